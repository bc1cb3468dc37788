//! Helpers shared by the end-to-end tests of the `vpm` binary and the library-level run tests.
#![allow(dead_code)]

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The binary, with stdin closed and a log level that does not depend on the environment.
pub fn vpm() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vpm"));
    c.stdin(Stdio::null()).env_remove("VPM_LOG");
    c
}

/// Runs `vpm args…` (in `cwd` when given) and returns its output.
pub fn run_in(cwd: Option<&Path>, args: &[&str]) -> Output {
    let mut c = vpm();
    c.args(args);
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    c.output().expect("could not start the vpm binary")
}

pub fn run(args: &[&str]) -> Output {
    run_in(None, args)
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Panics with the command's output unless it exited 0.
#[track_caller]
pub fn assert_ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: expected success, got {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

/// Panics unless the command exited with a non-zero code (and was not killed by a signal).
#[track_caller]
pub fn assert_failed(o: &Output, what: &str) {
    let code = o.status.code();
    assert!(
        matches!(code, Some(c) if c != 0),
        "{what}: expected a non-zero exit code, got {:?}\n--- stderr\n{}",
        o.status,
        stderr(o)
    );
}

/// A CLI failure must be a message, not a crash.
#[track_caller]
pub fn assert_no_panic(err: &str) {
    assert!(!err.contains("panicked"), "the binary panicked:\n{err}");
    assert!(
        !err.contains("RUST_BACKTRACE"),
        "the binary panicked:\n{err}"
    );
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

pub fn manifest(run_dir: &Path) -> serde_json::Value {
    let p = run_dir.join("manifest.json");
    let text =
        fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()))
}

/// `vpm run CASE --out OUT --threads 1 --abort-after-steps STEPS`, which must stop as a killed
/// process would (status 137).
#[track_caller]
pub fn run_aborted(case: &str, out: &Path, steps: &str) -> Output {
    let o = run(&[
        "run",
        case,
        "--out",
        s(out),
        "--threads",
        "1",
        "--abort-after-steps",
        steps,
    ]);
    assert_eq!(o.status.code(), Some(137), "abort: {}", stderr(&o));
    o
}

/// Run options for library-level runs in tests: all threads, no progress output.
pub fn quiet_run_options() -> vpm::run::RunOptions {
    vpm::run::RunOptions {
        threads: rayon::current_num_threads(),
        progress: vpm::run::ProgressStyle::Quiet,
        abort_after_steps: None,
        signal_in_step: None,
    }
}

/// Reads a CSV written by a run: header names and rows of numbers.
pub fn read_csv(path: &Path) -> (Vec<String>, Vec<Vec<f64>>) {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut lines = text.lines();
    let header = lines
        .next()
        .expect("header")
        .split(',')
        .map(str::to_string)
        .collect();
    let rows = lines
        .map(|l| l.split(',').map(|v| v.parse().expect("number")).collect())
        .collect();
    (header, rows)
}

/// The index of column `name` in a CSV header.
pub fn col(header: &[String], name: &str) -> usize {
    header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name}"))
}
