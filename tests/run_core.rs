//! What the run core gives long runs, end to end through the binary: a signal stops a run with a
//! checkpoint and `vpm resume` continues it to the same bytes; `vpm resume --t-end` extends a
//! finished run; a second process on a run directory in use is refused; `vpm check` prints the resolved case with its memory and time; a case too big
//! for the machine, a run past `time.max_steps`, a collapsing CFL step and a second process on
//! the same run directory are clear errors; a checkpoint written before the run core resumes.

mod common;
use common::*;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// A Taylor–Green case to `t_end` in fixed steps of 0.01 on a 16³ grid (2/3 rule), output every
/// step, a spectrum at t = 0, a checkpoint every 4 steps; `extra_time` adds [time] keys.
fn case_text(t_end: &str, extra_time: &str) -> String {
    format!(
        "description = \"run-core test\"\n\n[flow]\nnu = 0.05\n\n[initial]\nkind = \
         \"taylor-green\"\n\n[time]\nt_end = {t_end}\ndt = 0.01\n{extra_time}\n[output]\n\
         every_steps = 1\nspectra_times = [0]\n\n[checkpoint]\nevery_steps = 4\n\n[spectral]\n\
         n = 16\ndealias = \"2/3\"\n"
    )
}

fn write_case(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn rows(path: &Path) -> usize {
    fs::read_to_string(path).map_or(0, |t| t.lines().count().saturating_sub(1))
}

extern "C" {
    /// kill(2) from the C library.
    fn kill(pid: i32, sig: i32) -> i32;
}
const SIGINT: i32 = 2;

/// The files of two runs that must agree to the byte.
fn assert_same_outputs(a: &Path, b: &Path) {
    for f in [
        "spectral/energy.csv",
        "spectral/spectra.csv",
        "spectral/final.npz",
    ] {
        let (x, y) = (fs::read(a.join(f)).unwrap(), fs::read(b.join(f)).unwrap());
        assert!(
            x == y,
            "{f} differs between {} and {}",
            a.display(),
            b.display()
        );
    }
}

#[test]
#[cfg(unix)]
fn sigint_checkpoints_and_resume_reproduces_the_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    // Long enough (2 000 steps) that the signal lands mid-run.
    let case = write_case(tmp.path(), "long.toml", &case_text("20", ""));
    let (a, b) = (tmp.path().join("A"), tmp.path().join("B"));
    let child = vpm()
        .args(["run", &case, "--out", s(&b), "--threads", "1"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let energy = b.join("spectral/energy.csv");
    let start = Instant::now();
    while rows(&energy) < 30 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the run did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // While it runs, the run directory is locked: a resume, or a run with --force, is refused
    // with the holder named.
    for args in [
        vec!["resume", s(&b)],
        vec!["run", &case, "--out", s(&b), "--force"],
    ] {
        let o = run(&args);
        assert_failed(&o, "a second process on a run directory in use");
        let err = stderr(&o);
        assert_no_panic(&err);
        let holder = format!("is in use by vpm run (pid {}", child.id());
        assert!(err.contains(&holder), "{args:?}: {err}");
    }
    // SAFETY: kill(2) on the child we spawned, with a valid signal number.
    assert_eq!(unsafe { kill(child.id() as i32, SIGINT) }, 0);
    // A copy of the same request a moment later, as coreutils `timeout` sends it (to the child,
    // then to its process group): still one request, the run stops with its checkpoint.
    std::thread::sleep(Duration::from_millis(20));
    // SAFETY: as above (the child cannot have been reaped: it is waited for only below).
    assert_eq!(unsafe { kill(child.id() as i32, SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_no_panic(&err);
    assert_eq!(out.status.code(), Some(130), "stderr:\n{err}");
    assert!(
        err.contains("interrupted at t = ") && err.contains("vpm resume"),
        "{err}"
    );
    // The signal was acknowledged once, at once (by the handler), before the stop.
    let ack = "then checkpointing; a second signal 1 s later quits without it\n";
    assert_eq!(err.matches(ack).count(), 1, "{err}");
    assert!(err.contains("vpm: finishing step "), "{err}");
    assert!(err.find(ack) < err.find("interrupted at t = "), "{err}");
    let m = manifest(&b);
    let status = m["status"].as_str().unwrap();
    assert!(
        status.starts_with("stopped: interrupted at step "),
        "{status}"
    );
    let stopped_rows = rows(&energy);
    assert!(stopped_rows < 2001, "the run finished before the signal");
    assert!(!b.join("spectral/final.npz").exists());
    // The last checkpoint is the step it stopped at (the row count is steps + 1).
    let (step, _, _) = vpm::output::read_latest_checkpoint(&b).unwrap().unwrap();
    assert_eq!(step as usize + 1, stopped_rows, "checkpoint at the stop");

    assert_ok(
        &run(&["resume", s(&b), "--threads", "1"]),
        "resume after SIGINT",
    );
    assert_ok(
        &run(&["run", &case, "--out", s(&a), "--threads", "1"]),
        "uninterrupted",
    );
    assert_same_outputs(&a, &b);
    assert_eq!(manifest(&b)["status"], "finished");
}

#[test]
fn resume_with_a_later_t_end_extends_a_finished_run() {
    let tmp = tempfile::tempdir().unwrap();
    let short = write_case(tmp.path(), "short.toml", &case_text("0.08", ""));
    let run_dir = tmp.path().join("R");
    assert_ok(
        &run(&["run", &short, "--out", s(&run_dir), "--threads", "1"]),
        "short run",
    );
    assert_eq!(rows(&run_dir.join("spectral/energy.csv")), 9);
    // Not later than the end: refused, nothing changed.
    let o = run(&["resume", s(&run_dir), "--t-end", "0.05"]);
    assert_failed(&o, "an earlier t_end");
    assert!(
        stderr(&o).contains("--t-end 0.05: must be later than"),
        "{}",
        stderr(&o)
    );
    let o = run(&["resume", s(&run_dir), "--t-end", "0.16", "--threads", "1"]);
    assert_ok(&o, "extend to 0.16");
    assert!(stderr(&o).contains("t_end = 0.16"), "{}", stderr(&o));
    assert_eq!(rows(&run_dir.join("spectral/energy.csv")), 17);
    let case = vpm::config::Case::from_file(&run_dir.join("case.toml")).unwrap();
    assert_eq!(case.time.t_end, 0.16);
    let m = manifest(&run_dir);
    assert_eq!(m["status"], "finished");
    assert_eq!(m["resumes"].as_array().map(Vec::len), Some(1));
    // The extended run follows a run to 0.16 from the start: the same steps of 0.01, except that
    // the first end landed on t = 0.08 exactly (a last step shorter by round-off), so K agrees
    // to round-off rather than to the bit.
    let long = write_case(tmp.path(), "long.toml", &case_text("0.16", ""));
    let direct = tmp.path().join("D");
    assert_ok(
        &run(&["run", &long, "--out", s(&direct), "--threads", "1"]),
        "direct run",
    );
    let k = |dir: &Path| -> Vec<f64> {
        let text = fs::read_to_string(dir.join("spectral/energy.csv")).unwrap();
        text.lines()
            .skip(1)
            .map(|l| l.split(',').nth(3).unwrap().parse().unwrap())
            .collect()
    };
    let (ke, kd) = (k(&run_dir), k(&direct));
    assert_eq!(ke.len(), kd.len());
    for (a, b) in ke.iter().zip(&kd) {
        assert!(((a - b) / b).abs() < 1e-13, "K {a} vs {b}");
    }
}

#[test]
fn check_prints_the_resolved_case_memory_and_time() {
    let o = run(&["check", "tgv-re100-compare"]);
    assert_ok(&o, "vpm check");
    let out = stdout(&o);
    // The resolved case parses back to the same case.
    let (case, _) = vpm::config::resolve_case("tgv-re100-compare").unwrap();
    let printed = vpm::config::Case::from_toml_str(&out, "check output").unwrap();
    assert_eq!(printed, case);
    for want in [
        "# Memory",
        "spectral solver",
        "particles",
        "host total",
        "# Time",
        "per step",
    ] {
        assert!(out.contains(want), "missing {want:?}:\n{out}");
    }
    // A bad case is the case-file error, not a panic.
    let tmp = tempfile::tempdir().unwrap();
    let bad = write_case(
        tmp.path(),
        "bad.toml",
        &case_text("1", "").replace("n = 16", "n = 15"),
    );
    let o = run(&["check", &bad]);
    assert_failed(&o, "check of a bad case");
    assert!(stderr(&o).contains("spectral.n"), "{}", stderr(&o));
}

#[test]
fn a_case_too_big_for_memory_is_refused_with_both_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let huge = write_case(
        tmp.path(),
        "huge.toml",
        &case_text("1", "").replace("n = 16", "n = 2048"),
    );
    for cmd in ["run", "check"] {
        let out = tmp.path().join("never");
        let o = run(&[cmd, &huge, "--out", s(&out)][..if cmd == "run" { 4 } else { 2 }]);
        assert_failed(&o, cmd);
        let err = stderr(&o);
        assert_no_panic(&err);
        assert!(
            err.contains("needs about")
                && err.contains("of host memory")
                && err.contains("available"),
            "{cmd}: {err}"
        );
        assert!(!out.exists(), "no run directory for a refused case");
    }
}

#[test]
fn max_steps_stops_with_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let case = write_case(tmp.path(), "m.toml", &case_text("1", "max_steps = 6\n"));
    let run_dir = tmp.path().join("R");
    let o = run(&["run", &case, "--out", s(&run_dir), "--threads", "1"]);
    assert_failed(&o, "max_steps");
    let err = stderr(&o);
    assert!(
        err.contains("time.max_steps = 6 reached at t = 0.06"),
        "{err}"
    );
    assert_eq!(rows(&run_dir.join("spectral/energy.csv")), 7);
    let (step, _, _) = vpm::output::read_latest_checkpoint(&run_dir)
        .unwrap()
        .unwrap();
    assert_eq!(step, 6);
    assert!(manifest(&run_dir)["status"]
        .as_str()
        .unwrap()
        .starts_with("stopped: time.max_steps"));
}

#[test]
fn a_collapsing_cfl_step_stops_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let text = case_text("1", "").replace("dt = 0.01", "cfl = 1e-14");
    let case = write_case(tmp.path(), "c.toml", &text);
    let run_dir = tmp.path().join("R");
    let o = run(&["run", &case, "--out", s(&run_dir), "--threads", "1"]);
    assert_failed(&o, "tiny CFL step");
    let err = stderr(&o);
    assert_no_panic(&err);
    assert!(err.contains("the CFL time step fell to"), "{err}");
    assert!(err.contains("1e-12·t_end"), "{err}");
}

#[test]
fn a_checkpoint_written_before_the_run_core_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let case = write_case(tmp.path(), "l.toml", &case_text("0.12", ""));
    let (a, b) = (tmp.path().join("A"), tmp.path().join("B"));
    assert_ok(
        &run(&["run", &case, "--out", s(&a), "--threads", "1"]),
        "whole run",
    );
    run_aborted(&case, &b, "5");
    // Rewrite the latest checkpoint's meta.json in the layout of vpm before the run core.
    let dir = b.join("checkpoints/ckpt-0000000004");
    let meta: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("meta.json")).unwrap()).unwrap();
    let sched = &meta["schedules"];
    let legacy = serde_json::json!({
        "step": meta["step"], "t": meta["t"], "case": meta["case"],
        "next_output": sched["output"], "next_checkpoint": sched["checkpoint"],
        "next_spectrum": sched["spectra"], "next_snapshot": 0, "csv": meta["csv"],
    });
    fs::write(dir.join("meta.json"), serde_json::to_vec(&legacy).unwrap()).unwrap();
    assert_ok(
        &run(&["resume", s(&b), "--threads", "1"]),
        "resume from a legacy checkpoint",
    );
    assert_same_outputs(&a, &b);
}

#[test]
fn resuming_on_another_device_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let case = write_case(tmp.path(), "d.toml", &case_text("0.12", ""));
    let b = tmp.path().join("B");
    run_aborted(&case, &b, "5");
    let meta_path = b.join("checkpoints/ckpt-0000000004/meta.json");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&fs::read(&meta_path).unwrap()).unwrap();
    assert_eq!(
        meta["devices"]["spectral"], "cpu",
        "the checkpoint records the device"
    );
    meta["devices"]["spectral"] = "cuda:1".into();
    fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
    let o = run(&["resume", s(&b), "--threads", "1"]);
    assert_ok(&o, "resume");
    let err = stderr(&o);
    assert!(
        err.contains(
            "the checkpoint was written with the spectral solver on cuda:1; it resumes on cpu"
        ),
        "{err}"
    );
}

#[test]
fn an_event_one_ulp_before_t_end_is_t_end() {
    // 3 × 0.3 = 0.8999999999999999 < 0.9: the output there is the output at t_end, not one
    // more step of 1e-16 after it.
    let tmp = tempfile::tempdir().unwrap();
    let text = case_text("0.9", "")
        .replace("dt = 0.01", "dt = 0.1")
        .replace("every_steps = 1\n", "every_time = 0.3\n");
    let case = write_case(tmp.path(), "u.toml", &text);
    let run_dir = tmp.path().join("R");
    assert_ok(
        &run(&["run", &case, "--out", s(&run_dir), "--threads", "1"]),
        "run",
    );
    let energy = fs::read_to_string(run_dir.join("spectral/energy.csv")).unwrap();
    let t: Vec<&str> = energy
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(t.len(), 4, "outputs at 0, 0.3, 0.6 and t_end:\n{energy}");
    assert_eq!(t[3].parse::<f64>().unwrap(), 0.9);
    assert_eq!(manifest(&run_dir)["status"], "finished");
}
