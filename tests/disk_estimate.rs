//! Before a run writes: the disk estimate against what runs write, `--force` into an earlier
//! run's directory, and the checks `vpm check` shares with `vpm run`. Each test runs the `vpm`
//! binary on a small case in its own temporary directory (a few seconds on two cores).

use std::fs;
use std::path::{Path, PathBuf};

mod common;
use common::*;
use vpm::config::{resolve_case, DeviceRequest};
use vpm::run::{memory, RunPlan};

/// Bytes of every file under `dir`, and of the largest checkpoint (`checkpoints/ckpt-*`).
fn bytes_under(dir: &Path) -> (u64, u64) {
    let mut total = 0;
    let mut largest_checkpoint = 0;
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = fs::symlink_metadata(entry.path()).unwrap();
        if meta.is_dir() {
            let (sub, sub_largest) = bytes_under(&entry.path());
            total += sub;
            let checkpoint = entry.file_name().to_string_lossy().starts_with("ckpt-");
            largest_checkpoint = largest_checkpoint.max(if checkpoint { sub } else { sub_largest });
        } else {
            total += meta.len();
        }
    }
    (total, largest_checkpoint)
}

/// Writes `text` to `<dir>/<name>.toml`; returns its path.
fn case_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let file = dir.join(format!("{name}.toml"));
    fs::write(&file, text).unwrap();
    file
}

/// Runs the case `text` into a fresh directory and checks the disk estimate against what the
/// run wrote at its peak: the files at the end and one checkpoint more (a new checkpoint is
/// written before the oldest of the `keep` is removed; each case here writes more than `keep`).
/// The estimate must not be below it, nor more than 25 % or 1 MiB above. Also checks that
/// `vpm check` prints the same total, and that the run wrote the files `expected`.
fn estimate_holds(name: &str, text: &str, expected: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let file = case_file(tmp.path(), name, text);
    let out = tmp.path().join(name);
    let o = run(&[
        "run",
        s(&file),
        "--out",
        s(&out),
        "--threads",
        "2",
        "--device",
        "cpu",
    ]);
    assert_ok(&o, name);
    for f in expected {
        assert!(out.join(f).is_file(), "{name}: no {f}");
    }
    let (mut case, _) = resolve_case(s(&file)).unwrap();
    case.set_device(DeviceRequest::Cpu);
    let estimate = memory::estimate(&case, &RunPlan::new(&case).unwrap()).unwrap();
    let total = estimate.disk_total();
    let (at_end, checkpoint) = bytes_under(&out);
    let peak = at_end + checkpoint;
    let rows = format!("{:#?}", estimate.disk);
    assert!(
        total >= peak,
        "{name}: estimate {total} below the {peak} bytes written at the peak\n{rows}"
    );
    let allowed = (peak + peak / 4).max(peak + (1 << 20));
    assert!(
        total <= allowed,
        "{name}: estimate {total} more than 25 % or 1 MiB above the {peak} bytes written\n{rows}"
    );
    let o = run(&["check", s(&file)]);
    assert_ok(&o, "vpm check");
    let line = format!("#   disk total {}", memory::human_bytes(total));
    assert!(stdout(&o).contains(&line), "{line}\n{}", stdout(&o));
}

#[test]
fn disk_estimate_of_quick() {
    let text = vpm::config::named_case("quick").unwrap().text;
    estimate_holds("quick", text, &["spectral/final.npz", "spectrum.png"]);
}

/// Both solvers and particle snapshots (npz, vtp and the collection file): the snapshots are
/// most of what the run writes.
#[test]
fn disk_estimate_of_a_compare_case_with_particle_snapshots() {
    let text = "[flow]\nnu = 0.05\n[initial]\nkind = \"taylor-green\"\n\
                [time]\nt_end = 0.2\ndt = 0.05\n[output]\nevery_steps = 1\n\
                spectra_times = [0.0, 0.2]\n[checkpoint]\nevery_steps = 2\n\
                [spectral]\nn = 16\ndealias = \"2/3\"\n\
                [vortex]\nn = 16\nreinit_every = 3\naccuracy = 1e-3\nsnapshot_every_steps = 2\n";
    let files = ["snapshots/particles-00000004.vtp", "comparison.csv"];
    estimate_holds("compare", text, &files);
}

/// Grid fields (npz, vti, pvd) and their pictures at two times, of a turbulent field.
#[test]
fn disk_estimate_of_a_fields_case() {
    let text = "[flow]\nnu = 0.02\n[initial]\nkind = \"isotropic\"\nkp = 3\nu0 = 1\n\
                [time]\nt_end = 0.1\ndt = 0.05\n[output]\nfields_times = [0.0, 0.1]\n\
                [checkpoint]\nevery_steps = 1\nkeep = 1\n[spectral]\nn = 32\ndealias = \"2/3\"\n";
    let files = ["fields/spectral-00000002.vti", "vorticity-00000002.png"];
    estimate_holds("fields", text, &files);
}

/// One step of Taylor–Green with fields and their pictures at t = 0.
const EARLIER_RUN_WITH_FIELDS: &str = "[flow]\nnu = 0.05\n[initial]\nkind = \"taylor-green\"\n\
    [time]\nt_end = 0.05\ndt = 0.05\n[output]\nfields_times = [0.0]\n\
    [spectral]\nn = 16\ndealias = \"2/3\"\n";

/// Isotropic kp = 4 (so k_cut = 12) on a 16³ grid, which keeps |k_i| ≤ 7.
const UNRESOLVED_KP4: &str = "[flow]\nnu = 0.01\n[initial]\nkind = \"isotropic\"\nkp = 4\n\
    u0 = 1\n[time]\nt_end = 0.1\ndt = 0.01\n[spectral]\nn = 16\n";

/// `--force` into an earlier run's directory removes what a run writes (its fields and
/// pictures included), keeps the user's files, says which, and `vpm plot` then draws only the
/// new run's pictures.
#[test]
fn force_removes_an_earlier_runs_outputs_and_keeps_the_users() {
    let tmp = tempfile::tempdir().unwrap();
    let earlier = case_file(tmp.path(), "fields", EARLIER_RUN_WITH_FIELDS);
    let out = tmp.path().join("run");
    assert_ok(
        &run(&["run", s(&earlier), "--out", s(&out), "--threads", "2"]),
        "the earlier run",
    );
    assert!(out.join("fields").is_dir() && out.join("structures-00000000.png").is_file());
    fs::write(out.join("notes.txt"), "mine\n").unwrap();

    let o = run(&["run", "quick", "--out", s(&out), "--force"]);
    assert_ok(&o, "vpm run quick --force");
    let err = stderr(&o);
    assert!(
        err.contains(
            "--force: removed case.toml, checkpoints/, energy.png, fields/, manifest.json, \
             spectral/, spectrum.png, structures-00000000.png, vorticity-00000000.png; \
             kept notes.txt"
        ),
        "{err}"
    );
    assert!(!out.join("fields").exists());
    assert!(!out.join("structures-00000000.png").exists());
    assert!(!out.join("vorticity-00000000.png").exists());
    assert_eq!(fs::read_to_string(out.join("notes.txt")).unwrap(), "mine\n");
    let o = run(&["plot", s(&out)]);
    assert_ok(&o, "vpm plot");
    let drawn: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    assert_eq!(
        drawn,
        [s(&out.join("energy.png")), s(&out.join("spectrum.png"))],
        "vpm plot drew an earlier run's pictures"
    );
}

/// An initial field with modes its grid does not keep (isotropic kp = 4, so k_cut = 12, at
/// n = 16) is refused by `vpm check` as by `vpm run`, naming the key, before any directory is
/// made.
#[test]
fn check_refuses_what_run_refuses_before_any_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let case = case_file(tmp.path(), "kp4", UNRESOLVED_KP4);
    let expected = "kp4.toml:5: key `initial.kp` = 4: the initial field has wavenumbers up to \
                    k_cut = 3·kp = 12, but spectral.n = 16 with dealias = \"3/2\" keeps |k_i| ≤ 7";
    let o = run_in(Some(tmp.path()), &["check", s(&case)]);
    assert_failed(&o, "vpm check");
    assert!(stderr(&o).contains(expected), "{}", stderr(&o));
    let o = run_in(Some(tmp.path()), &["run", s(&case)]);
    assert_failed(&o, "vpm run");
    assert!(stderr(&o).contains(expected), "{}", stderr(&o));
    assert!(
        !tmp.path().join("runs").exists(),
        "vpm run made a directory"
    );
}

/// The same check on every grid of a case and for every key that sets a wavenumber: the
/// spectral grid after dealiasing, the particle lattice, `k_cut` given, a shear wave.
#[test]
fn unresolved_initial_fields_name_the_key_and_the_grid() {
    let parse = |initial: &str, grids: &str| {
        let text = format!(
            "[flow]\nnu = 0.01\n[initial]\n{initial}\n[time]\nt_end = 0.1\ndt = 0.01\n{grids}"
        );
        vpm::config::Case::from_toml_str(&text, "c.toml").map(|_| ())
    };
    let iso = "kind = \"isotropic\"\nkp = 2\nu0 = 1\nk_cut = 7.5";
    assert!(parse(iso, "[spectral]\nn = 16\n").is_ok());
    let err = parse(iso, "[spectral]\nn = 16\ndealias = \"2/3\"\n").unwrap_err();
    assert_eq!(err.key(), Some("initial.k_cut"));
    assert_eq!(err.line(), Some(7));
    let msg = err.to_string();
    assert!(
        msg.contains("up to 7.5, but spectral.n = 16 with dealias = \"2/3\" keeps |k_i| ≤ 5")
            && msg.contains("raise spectral.n or lower initial.k_cut"),
        "{msg}"
    );
    let err = parse(iso, "[spectral]\nn = 16\n[vortex]\nn = 12\n").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("the particle lattice of vortex.n = 12 keeps |k_i| ≤ 5")
            && msg.contains("raise vortex.n"),
        "{msg}"
    );
    let wave = "kind = \"shear-wave\"\nwavevector = [6, 0, 0]";
    assert!(parse(wave, "[spectral]\nn = 16\n").is_ok());
    let err = parse(wave, "[spectral]\nn = 16\ndealias = \"2/3\"\n").unwrap_err();
    assert_eq!(err.key(), Some("initial.wavevector"));
}
