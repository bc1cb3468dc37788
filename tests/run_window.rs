//! The end of a run, end to end through the binary: a run stopped anywhere after its last step
//! (a signal in the last step, a kill after it, a full disk while writing `final.npz`, plots
//! that cannot be drawn) is finished by `vpm resume` to the bytes of an uninterrupted run; a
//! run is finished only when its manifest says so. Also: a run stopped before its first
//! checkpoint starts again at t = 0; a missing or foreign directory is named as such; the first
//! signal is acknowledged at once; `--t-end` puts a spectrum at the new end and refuses NaN.
//!
//! Every run is a 16³ Taylor–Green flow of 10 steps on one thread (well under a second each).

mod common;
use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Taylor–Green on 16³ to t = `t_end` in steps of 0.01, output every step, spectra at the
/// default times (0 and t_end), a checkpoint every 4 steps (and at the end).
fn case_text(t_end: &str) -> String {
    format!(
        "description = \"end-of-run test\"\n\n[flow]\nnu = 0.05\n\n[initial]\nkind = \
         \"taylor-green\"\n\n[time]\nt_end = {t_end}\ndt = 0.01\n\n[output]\nevery_steps = 1\n\n\
         [checkpoint]\nevery_steps = 4\n\n[spectral]\nn = 16\ndealias = \"2/3\"\n"
    )
}

/// Steps of the case to t = 0.1.
const STEPS: &str = "10";

/// A temporary directory with the case file `case.toml` (t_end = 0.1) and an uninterrupted
/// run of it in `A`.
struct Setup {
    tmp: tempfile::TempDir,
    case: String,
}

impl Setup {
    fn new() -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let case = tmp.path().join("case.toml");
        fs::write(&case, case_text("0.1")).unwrap();
        let setup = Setup {
            case: s(&case).to_string(),
            tmp,
        };
        let a = setup.dir("A");
        assert_ok(&setup.run(&a, &[]), "uninterrupted run");
        setup
    }

    /// A setup with a run in `B` killed (`--abort-after-steps`) after `steps` steps.
    fn killed_after(steps: &str) -> (Setup, PathBuf) {
        let setup = Setup::new();
        let b = setup.dir("B");
        run_aborted(&setup.case, &b, steps);
        (setup, b)
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// `vpm run CASE --out DIR --threads 1 EXTRA…`.
    fn run(&self, dir: &Path, extra: &[&str]) -> Output {
        let mut args = vec!["run", &self.case, "--out", s(dir), "--threads", "1"];
        args.extend_from_slice(extra);
        run(&args)
    }

    /// `vpm resume DIR` completes the run; it then equals the uninterrupted one, and a second
    /// resume leaves it as it is.
    #[track_caller]
    fn resume_completes(&self, b: &Path) {
        says(
            &resume(b),
            true,
            &[
                "reached t_end = 0.1 (step 10) but its final outputs were not all written",
                "vpm: finished at t = 0.1 after 10 steps",
            ],
        );
        assert_same_run(&self.dir("A"), b);
        let m = manifest(b);
        assert_eq!(m["status"], "finished");
        assert!(!m["resumes"].as_array().unwrap().is_empty());
        says(&resume(b), true, &["already complete"]);
    }
}

fn resume(dir: &Path) -> Output {
    run(&["resume", s(dir), "--threads", "1"])
}

/// The files of a run directory (relative paths, sorted), without the manifest and the lock.
fn files(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.retain(|p| p != Path::new("manifest.json") && p != Path::new(".vpm.lock"));
    out.sort();
    out
}

/// Two run directories hold the same files with the same bytes (the manifest aside): CSVs,
/// `final.npz`, the PNGs, case.toml and the checkpoints.
#[track_caller]
fn assert_same_run(a: &Path, b: &Path) {
    let (fa, fb) = (files(a), files(b));
    assert_eq!(fa, fb, "the two runs hold different files");
    for f in ["spectral/final.npz", "energy.png", "spectrum.png"] {
        assert!(fa.contains(&PathBuf::from(f)), "no {f} in {fa:?}");
    }
    for f in fa {
        assert!(
            fs::read(a.join(&f)).unwrap() == fs::read(b.join(&f)).unwrap(),
            "{} differs from the uninterrupted run's",
            f.display()
        );
    }
}

/// The stderr of a command that must have succeeded (`ok`) or failed (with a message, no
/// panic), checked to say each of `wants`.
#[track_caller]
fn says(o: &Output, ok: bool, wants: &[&str]) -> String {
    let err = stderr(o);
    match ok {
        true => assert_ok(o, wants.first().copied().unwrap_or("command")),
        false => assert_failed(o, wants.first().copied().unwrap_or("command")),
    }
    assert_no_panic(&err);
    for want in wants {
        assert!(err.contains(want), "missing {want:?}:\n{err}");
    }
    err
}

#[track_caller]
fn status(dir: &Path) -> String {
    manifest(dir)["status"].as_str().unwrap().to_string()
}

/// SIGINT as the last step begins: acknowledged at once, the run stops after that step
/// (checkpointed at t_end, no final outputs), and `vpm resume` writes them.
#[test]
fn a_signal_in_the_last_step_is_acknowledged_and_resume_finishes_the_run() {
    let setup = Setup::new();
    let b = setup.dir("B");
    let o = setup.run(&b, &["--signal-in-step", STEPS]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    // Acknowledged by the handler as the step began: before the step's progress line.
    let ack = "vpm: finishing step 10, then checkpointing; a second signal 1 s later quits \
               without it\n";
    let ack = err
        .find(ack)
        .unwrap_or_else(|| panic!("no acknowledgement:\n{err}"));
    let step = err
        .find("step 10 t=0.1000")
        .expect("the progress line of step 10");
    assert!(ack < step, "{err}");
    assert!(status(&b).starts_with("stopped: interrupted at step 10"));
    assert!(!b.join("spectral/final.npz").exists());
    setup.resume_completes(&b);
}

/// Killed after the last step (its checkpoint written, the manifest still `running`).
#[test]
fn a_kill_after_the_last_step_is_finished_by_resume() {
    let (setup, b) = Setup::killed_after(STEPS);
    assert_eq!(status(&b), "running");
    assert!(!b.join("spectral/final.npz").exists() && !b.join("energy.png").exists());
    setup.resume_completes(&b);
}

/// ENOSPC while writing `final.npz`: the run fails with the way out, the manifest says so.
#[test]
fn a_full_disk_while_writing_final_npz_is_finished_by_resume() {
    let setup = Setup::new();
    let b = setup.dir("B");
    let wants = [
        "writing the final field at the end of the run (t = 0.1, step 10)",
        "No space left on device",
        "`vpm resume ",
    ];
    says(
        &setup.run(&b, &["--fail-write", "final.npz"]),
        false,
        &wants,
    );
    assert!(status(&b).starts_with("failed: writing the final field"));
    assert!(!b.join("spectral/final.npz").exists());
    setup.resume_completes(&b);
}

/// The plots cannot be written (the resume that ends the run fails at them), then can.
#[test]
fn plots_that_cannot_be_drawn_leave_the_run_unfinished_until_resumed() {
    let (setup, b) = Setup::killed_after("9");
    // A directory where the picture goes: its rename fails as a write would.
    fs::create_dir(b.join("spectrum.png")).unwrap();
    says(
        &resume(&b),
        false,
        &["drawing the plots at the end of the run"],
    );
    assert!(status(&b).starts_with("failed: drawing the plots"));
    fs::remove_dir(b.join("spectrum.png")).unwrap();
    setup.resume_completes(&b);
}

/// No checkpoint: `vpm resume` removes the partial outputs and runs from t = 0.
#[test]
fn a_run_stopped_before_its_first_checkpoint_starts_again_at_zero() {
    // Killed after 7 steps, its checkpoints lost: CSV rows, but nothing to resume from.
    let (setup, b) = Setup::killed_after("7");
    fs::remove_dir_all(b.join("checkpoints")).unwrap();
    let wants = [
        "has no checkpoint (the run stopped before its first one)",
        "starting it again at t = 0",
    ];
    says(&resume(&b), true, &wants);
    assert_same_run(&setup.dir("A"), &b);
    let m = manifest(&b);
    assert_eq!(m["status"], "finished");
    assert_eq!(m["resumes"][0]["from_step"], 0);
}

/// A missing directory, one without case.toml, one with a case file but no run in it.
#[test]
fn resume_names_a_missing_or_foreign_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let want = format!("{}: no such run directory", missing.display());
    let err = says(&resume(&missing), false, &[&want]);
    assert!(!err.contains("lock"), "{err}");
    assert!(!missing.exists());

    let foreign = tmp.path().join("foreign");
    fs::create_dir(&foreign).unwrap();
    fs::write(foreign.join("notes.txt"), "mine").unwrap();
    says(
        &resume(&foreign),
        false,
        &["not a run directory (it has no case.toml)"],
    );
    // Left as it was: no lock file either.
    assert_eq!(fs::read_dir(&foreign).unwrap().count(), 1);

    // A folder with a case file called case.toml is not a run stopped at its start.
    let text = case_text("0.1");
    fs::write(foreign.join("case.toml"), &text).unwrap();
    let want = "neither a checkpoint nor manifest.json: not a run vpm started";
    says(&resume(&foreign), false, &[want]);
    assert_eq!(fs::read_to_string(foreign.join("case.toml")).unwrap(), text);
    assert!(!foreign.join("spectral").exists());
}

/// The distinct times of the spectra in `spectral/spectra.csv`.
fn spectrum_times(dir: &Path) -> Vec<f64> {
    let (header, rows) = read_csv(&dir.join("spectral/spectra.csv"));
    let t = col(&header, "t");
    let mut ts: Vec<f64> = rows.iter().map(|r| r[t]).collect();
    ts.dedup();
    ts
}

/// `--t-end T`: a spectrum at T, later times dropped; NaN, ∞ and negative times refused.
#[test]
fn t_end_puts_a_spectrum_at_the_new_end_and_refuses_non_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    let case = tmp.path().join("case.toml");
    fs::write(&case, case_text("0.05")).unwrap();
    let b = tmp.path().join("B");
    let o = run(&["run", s(&case), "--out", s(&b), "--threads", "1"]);
    assert_ok(&o, "run to 0.05");
    for (bad, why) in [
        ("nan", "is not a number"),
        ("inf", "is infinite"),
        ("-1", "is not after t = 0"),
    ] {
        let want = format!("`{bad}` {why}");
        says(&run(&["resume", s(&b), "--t-end", bad]), false, &[&want]);
    }
    let o = run(&["resume", s(&b), "--t-end", "0.1", "--threads", "1"]);
    assert_ok(&o, "extend to 0.1");
    assert_eq!(spectrum_times(&b), [0.0, 0.05, 0.1]);
    let resolved = vpm::config::Case::from_file(&b.join("case.toml")).unwrap();
    assert_eq!(resolved.output.spectra_times, [0.0, 0.05, 0.1]);
    assert_eq!(status(&b), "finished");

    // Ending an unfinished run earlier drops the spectrum times after the new end.
    let c = tmp.path().join("C");
    fs::write(&case, case_text("0.1")).unwrap();
    run_aborted(s(&case), &c, "2");
    let o = run(&["resume", s(&c), "--t-end", "0.03", "--threads", "1"]);
    assert_ok(&o, "end at 0.03");
    assert_eq!(spectrum_times(&c), [0.0, 0.03]);
}
