//! `vpm resume` checks the run directory's case.toml against the case stored in the checkpoint,
//! key by key, and the run directory's format: a physical key that changed is refused (nothing
//! written), changeable keys are accepted and recorded in the manifest, a checkpoint of before
//! the stored case resumes with a warning, and another format is refused naming both.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use common::*;

/// quick's flow, 10 steps, a checkpoint every 5.
const CASE: &str = r#"description = "resume checks"

[flow]
nu = 0.05

[initial]
kind = "taylor-green"

[time]
t_end = 0.2
dt = 0.02

[output]
every_steps = 1
spectra_times = [0.0, 0.2]

[checkpoint]
every_steps = 5

[spectral]
n = 16
dealias = "2/3"
"#;

/// This vpm's run-directory format.
const FORMAT: u64 = vpm::output::RUN_DIR_FORMAT as u64;

/// A run of [`CASE`] killed after 7 steps (its latest checkpoint is step 5, t = 0.1), in a
/// temporary directory: the directory, and the run directory in it.
fn killed_run() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let case = tmp.path().join("c.toml");
    fs::write(&case, CASE).unwrap();
    let run_dir = tmp.path().join("R");
    run_aborted(s(&case), &run_dir, "7");
    (tmp, run_dir)
}

fn resume(run_dir: &Path, more: &[&str]) -> std::process::Output {
    let mut args = vec!["resume", s(run_dir), "--threads", "1"];
    args.extend_from_slice(more);
    run(&args)
}

/// Replaces `from` (which must be there) by `to` in the text file `path`.
fn edit(path: &Path, from: &str, to: &str) {
    let text = fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{from:?} not in {}", path.display());
    fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// Rewrites the JSON file `path` through `f`.
fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
    f(&mut v);
    fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// Every file under `dir` with its bytes, but the lock file (emptied when a process releases it;
/// a killed run leaves its holder in it).
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if !p.ends_with(vpm::output::LOCK_FILE) {
                out.insert(p.clone(), fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Resumes `run_dir`, which must be refused with a message containing every one of `needles`,
/// without writing anything into it.
#[track_caller]
fn assert_refused(run_dir: &Path, needles: &[&str]) {
    let before = tree(run_dir);
    let o = resume(run_dir, &[]);
    assert_failed(&o, "resume");
    let err = stderr(&o);
    assert_no_panic(&err);
    for n in needles {
        assert!(err.contains(n), "should say {n:?}:\n{err}");
    }
    let after = tree(run_dir);
    let changed: std::collections::BTreeSet<_> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .collect();
    assert!(changed.is_empty(), "the refused resume wrote {changed:?}");
}

fn ckpt5_meta(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoints/ckpt-0000000005/meta.json")
}

#[test]
fn an_edited_physical_key_is_refused_naming_both_values() {
    let (_tmp, run_dir) = killed_run();
    let case_toml = run_dir.join("case.toml");
    edit(&case_toml, "nu = 0.05", "nu = 0.5");
    let line = format!(
        "{}: [flow] nu = 0.5, but the run was computed with nu = 0.05 up to step 5 (t = 0.1); a \
         physical key cannot change in a resumed run: put it back, or start a new run",
        case_toml.display()
    );
    assert_refused(&run_dir, &[&line]);
    // Put back, it resumes.
    edit(&case_toml, "nu = 0.5", "nu = 0.05");
    assert_ok(&resume(&run_dir, &[]), "resume with the case put back");
    assert_eq!(manifest(&run_dir)["status"], "finished");
}

#[test]
fn an_end_edited_before_the_checkpoint_is_refused() {
    let (_tmp, run_dir) = killed_run();
    let case_toml = run_dir.join("case.toml");
    edit(&case_toml, "t_end = 0.2", "t_end = 0.05");
    edit(
        &case_toml,
        "spectra_times = [0.0, 0.2]",
        "spectra_times = [0.0]",
    );
    let line = format!(
        "{}: time.t_end = 0.05 is before the latest checkpoint's t = 0.1",
        case_toml.display()
    );
    assert_refused(&run_dir, &[&line]);
}

#[test]
fn changed_end_outputs_and_device_are_accepted_and_recorded() {
    let (_tmp, run_dir) = killed_run();
    let case_toml = run_dir.join("case.toml");
    edit(&case_toml, "every_steps = 1\n", "every_steps = 2\n");
    edit(&case_toml, "keep = 2", "keep = 3");
    let o = resume(&run_dir, &["--t-end", "0.3", "--device", "cpu"]);
    assert_ok(&o, "resume with changed keys");
    let changes = [
        "checkpoint.keep: 2 → 3",
        "device: \"auto\" → \"cpu\"",
        "output.every_steps: 1 → 2",
        // The new end is a spectrum time.
        "output.spectra_times: [0.0, 0.2] → [0.0, 0.2, 0.3]",
        "time.t_end: 0.2 → 0.3",
    ];
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "resuming with the case changed: {}",
            changes.join("; ")
        )),
        "{err}"
    );
    let m = manifest(&run_dir);
    assert_eq!(m["status"], "finished");
    assert_eq!(m["format"], FORMAT);
    assert_eq!(m["resumes"][0]["from_step"], 5);
    assert_eq!(m["resumes"][0]["changes"], serde_json::json!(changes));
    // The checkpoints written since carry the changed case, so a second resume compares with it.
    let meta: serde_json::Value = serde_json::from_slice(
        &fs::read(run_dir.join("checkpoints/ckpt-0000000015/meta.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["format"], FORMAT);
    let stored = meta["resolved_case"].as_str().unwrap();
    assert!(
        stored.contains("t_end = 0.3") && stored.contains("keep = 3"),
        "{stored}"
    );
}

#[test]
fn a_checkpoint_without_its_case_resumes_with_a_warning() {
    let (_tmp, run_dir) = killed_run();
    // As written before the case was stored: format 2, no resolved_case, no format in the
    // manifest.
    edit_json(&ckpt5_meta(&run_dir), |v| {
        v["format"] = 2.into();
        v.as_object_mut().unwrap().remove("resolved_case");
    });
    edit_json(&run_dir.join("manifest.json"), |v| {
        v.as_object_mut().unwrap().remove("format");
    });
    let o = resume(&run_dir, &[]);
    assert_ok(&o, "resume of a format-2 checkpoint");
    let err = stderr(&o);
    assert!(
        err.contains("case.toml could not be checked against the case the run was computed with")
            && err.contains("run-directory format 2"),
        "{err}"
    );
    let m = manifest(&run_dir);
    assert_eq!(m["status"], "finished");
    assert_eq!(
        m["format"], FORMAT,
        "the resumed directory is written in this format"
    );
}

#[test]
fn another_format_is_refused_naming_both() {
    let (_tmp, run_dir) = killed_run();
    let newer = format!(
        "this run directory has format {}; this vpm reads format {FORMAT}",
        FORMAT + 1
    );
    let manifest_json = run_dir.join("manifest.json");
    edit_json(&manifest_json, |v| v["format"] = (FORMAT + 1).into());
    assert_refused(&run_dir, &[&newer, s(&manifest_json)]);
    edit_json(&manifest_json, |v| v["format"] = FORMAT.into());
    edit_json(&ckpt5_meta(&run_dir), |v| v["format"] = (FORMAT + 1).into());
    assert_refused(&run_dir, &[&newer, s(&ckpt5_meta(&run_dir))]);
}
