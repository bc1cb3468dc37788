//! The console through the `vpm` binary: a closed pipe or a full device on stdout or stderr never
//! kills a run nor prints a panic (`vpm::console`), what the commands print is short and whole
//! (versions, decimals, case summaries), and errors are plain text with a way out.
//!
//! A closed pipe is a pipe whose reading end is dropped before the child starts, so its first
//! write fails with EPIPE; a full device is /dev/full (ENOSPC).

mod common;

use common::{assert_no_panic, manifest, s, stderr, stdout, vpm};
use std::fs::{self, File};
use std::path::Path;
use std::process::{Output, Stdio};

/// The writing end of a pipe whose reader is already gone.
fn closed_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    writer.into()
}

/// /dev/full, where every write fails with "No space left on device".
fn full_device() -> Stdio {
    File::options()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full (Linux)")
        .into()
}

/// `vpm args…` with stdout and stderr as given; returns the output (the captured streams are
/// empty where they were not piped).
fn vpm_into(args: &[&str], out: Stdio, err: Stdio) -> Output {
    vpm()
        .args(args)
        .stdout(out)
        .stderr(err)
        .output()
        .expect("could not start the vpm binary")
}

/// quick.toml's Taylor–Green vortex on 16³, cut to 5 steps.
const TINY_CASE: &str = r#"
description = "quick, 5 steps"

[flow]
nu = 0.05

[initial]
kind = "taylor-green"

[time]
t_end = 0.1
dt = 0.02

[output]
every_steps = 1
spectra_times = [0.0, 0.1]

[checkpoint]
every_steps = 2

[spectral]
n = 16
"#;

/// Writes [`TINY_CASE`] into `dir` and returns its path.
fn tiny_case(dir: &Path) -> String {
    let p = dir.join("tiny.toml");
    fs::write(&p, TINY_CASE).unwrap();
    s(&p).to_string()
}

/// Runs the tiny case into `<dir>/<name>` with the given console and checks that it finished
/// as if nothing had happened: status 0, manifest `finished`, the final field and pictures.
fn assert_run_survives(dir: &Path, name: &str, out: Stdio, err: Stdio) {
    let case = tiny_case(dir);
    let run_dir = dir.join(name);
    let o = vpm_into(
        &["run", &case, "--out", s(&run_dir), "--threads", "1"],
        out,
        err,
    );
    assert_eq!(o.status.code(), Some(0), "{name}: {:?}", o.status);
    assert_eq!(manifest(&run_dir)["status"], "finished", "{name}");
    for file in ["spectral/final.npz", "energy.png", "spectrum.png"] {
        assert!(run_dir.join(file).is_file(), "{name}: no {file}");
    }
}

#[test]
fn a_run_whose_console_is_closed_or_full_finishes() {
    // Before: the first line to stderr panicked (status 101, manifest left at "running").
    let tmp = tempfile::tempdir().unwrap();
    assert_run_survives(tmp.path(), "closed", closed_pipe(), closed_pipe());
    assert_run_survives(tmp.path(), "full", full_device(), full_device());
}

/// The lines a command wrote on stderr.
fn stderr_lines(o: &Output) -> Vec<String> {
    stderr(o).lines().map(str::to_string).collect()
}

/// Commands whose product is stdout (`-q`: no log lines, only what this is about).
const PRINTING: [&[&str]; 3] = [&["cases"], &["-q", "check", "quick"], &["--version"]];

#[test]
fn printing_commands_fail_in_one_line_on_a_full_device() {
    for args in PRINTING {
        let o = vpm_into(args, full_device(), Stdio::piped());
        let err = stderr(&o);
        assert_no_panic(&err);
        assert_eq!(o.status.code(), Some(1), "vpm {args:?}: {err}");
        assert_eq!(
            stderr_lines(&o),
            ["error: cannot write to standard output: No space left on device (os error 28)"],
            "vpm {args:?}"
        );
    }
}

#[test]
fn printing_commands_stop_quietly_on_a_closed_pipe() {
    // As `vpm cases | head -1` once head has gone: status 1 (the output was not all
    // delivered), nothing on stderr.
    for args in PRINTING {
        let o = vpm_into(args, closed_pipe(), Stdio::piped());
        assert_eq!(o.status.code(), Some(1), "vpm {args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "vpm {args:?}");
    }
}

#[test]
fn version_names_the_commit() {
    let o = vpm_into(&["--version"], Stdio::piped(), Stdio::piped());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let version = env!("CARGO_PKG_VERSION");
    // build.rs sets VPM_GIT_COMMIT for every target of the package when git knows the commit.
    let expected = match option_env!("VPM_GIT_COMMIT") {
        Some(commit) => {
            assert!(commit.len() >= 12 && commit.bytes().all(|b| b.is_ascii_hexdigit()));
            format!("vpm {version} (commit {})\n", &commit[..12])
        }
        None => format!("vpm {version}\n"),
    };
    assert_eq!(stdout(&o), expected);
}

#[test]
fn case_summaries_end_at_a_sentence() {
    let o = vpm_into(&["cases"], Stdio::piped(), Stdio::piped());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    for line in text.lines() {
        assert!(line.ends_with('.'), "cut mid-sentence: {line}");
    }
    // A summary wrapped over two comment lines in its file is read whole.
    assert!(
        text.contains("spectral 64³ and vortex particles on a 48³ lattice."),
        "{text}"
    );
}

/// The tiny case with `[time]` replaced by `time`.
fn tiny_case_with_time(dir: &Path, name: &str, time: &str) -> String {
    let text = TINY_CASE.replace("t_end = 0.1\ndt = 0.02", time);
    let text = text.replace("spectra_times = [0.0, 0.1]", "spectra_times = [0.0]");
    let p = dir.join(format!("{name}.toml"));
    fs::write(&p, text).unwrap();
    s(&p).to_string()
}

#[test]
fn extreme_times_print_in_short_decimals() {
    let tmp = tempfile::tempdir().unwrap();
    // An error naming t_end and dt: before, dt = 1e-300 was spelled with 300 zeros.
    let tiny_dt = tiny_case_with_time(tmp.path(), "tiny-dt", "t_end = 0.5\ndt = 1e-300");
    let o = vpm_into(&["check", &tiny_dt], Stdio::piped(), Stdio::piped());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("t_end / dt = 0.5 / 1e-300 = "), "{err}");
    assert!(!err.contains("00000000"), "{err}");

    // The resolved case: before, t_end = 1e20 was `100000000000000000000.0`; the text still
    // reads back to the same case.
    let far = tiny_case_with_time(tmp.path(), "far", "t_end = 1e20\ndt = 1e15");
    let o = vpm_into(&["-q", "check", &far], Stdio::piped(), Stdio::piped());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("\nt_end = 1e20\n"), "{text}");
    assert!(!text.contains("00000000000000000"), "{text}");
    let again = tmp.path().join("again.toml");
    fs::write(&again, &text).unwrap();
    let o = vpm_into(&["-q", "check", s(&again)], Stdio::piped(), Stdio::piped());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), text);
}

#[test]
fn bench_step_without_a_gpu_says_what_to_run() {
    let no_gpu = |extra: &[&str]| {
        let mut c = vpm();
        c.args(["bench", "step", "--n", "8", "--threads", "1"])
            .args(extra)
            .env("VPM_NO_CUDA", "1");
        c.output().expect("could not start the vpm binary")
    };
    let o = no_gpu(&[]);
    let err = stderr(&o);
    assert_no_panic(&err);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no usable CUDA GPU") && err.contains("`vpm bench step --device cpu`"),
        "{err}"
    );
    // And what it suggests runs.
    let o = no_gpu(&[
        "--device", "cpu", "--steps", "1", "--warmup", "0", "--sample", "0",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_failed_npz_write_is_reported_in_plain_words() {
    // A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) fails the write of the first file over
    // it with EFBIG, as a full disk fails it with ENOSPC. Before, zip's clean-up printed
    // `ZipWriter drop failed: Io(Os { code: 27, kind: FileTooLarge, … })` in front of the
    // message.
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().unwrap();
    let case = tiny_case(tmp.path());
    let run_dir = tmp.path().join("run");
    let mut c = vpm();
    c.args(["run", &case, "--out", s(&run_dir), "--threads", "1"]);
    // SAFETY: only async-signal-safe calls (setrlimit, signal) between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 60 * 1024,
                rlim_max: 60 * 1024,
            };
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = c.output().expect("could not start the vpm binary");
    let err = stderr(&o);
    assert_no_panic(&err);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ")
            && last.contains("cannot write npz ")
            && last.ends_with("(os error 27)"),
        "{err}"
    );
    assert!(!err.contains("Os {") && !err.contains("ZipWriter"), "{err}");
}
