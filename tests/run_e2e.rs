//! The `vpm` binary end to end: each test runs the real executable in its own temporary
//! directory, with one or two worker threads and no stdin, and checks what lands on disk and
//! what is printed.
//!
//! Every run here is a 16³ grid for at most a few dozen steps, so each test takes about a second
//! on two cores.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::*;
use vpm::config::{named_cases, resolve_case, Case};
use vpm::output::{read_field_time, read_latest_checkpoint, read_velocity_npz, utc_now_compact};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A CSV file of numbers: header and rows.
struct Csv {
    header: Vec<String>,
    rows: Vec<Vec<f64>>,
}

impl Csv {
    fn read(path: &Path) -> Csv {
        let text = fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        assert!(
            text.ends_with('\n'),
            "{}: last line is incomplete",
            path.display()
        );
        let mut lines = text.lines();
        let header: Vec<String> = lines
            .next()
            .unwrap_or_else(|| panic!("{} is empty", path.display()))
            .split(',')
            .map(str::to_string)
            .collect();
        let rows: Vec<Vec<f64>> = lines
            .enumerate()
            .map(|(i, l)| {
                let row: Vec<f64> = l
                    .split(',')
                    .map(|f| {
                        f.parse().unwrap_or_else(|e| {
                            panic!("{}:{}: bad number {f:?}: {e}", path.display(), i + 2)
                        })
                    })
                    .collect();
                assert_eq!(
                    row.len(),
                    header.len(),
                    "{}:{}: wrong number of fields",
                    path.display(),
                    i + 2
                );
                row
            })
            .collect();
        Csv { header, rows }
    }

    fn col_index(&self, name: &str) -> usize {
        self.header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name:?} in {:?}", self.header))
    }

    fn col(&self, name: &str) -> Vec<f64> {
        let i = self.col_index(name);
        self.rows.iter().map(|r| r[i]).collect()
    }
}

#[track_caller]
fn assert_rel_close(a: f64, b: f64, tol: f64, what: &str) {
    let scale = a.abs().max(b.abs());
    assert!(
        (a - b).abs() <= tol * scale,
        "{what}: {a:e} vs {b:e} (relative difference {:e}, allowed {tol:e})",
        (a - b).abs() / scale
    );
}

/// Decodes a PNG and checks it is a plausible plot: a real size and more than one colour.
fn check_png(path: &Path) {
    let file =
        fs::File::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    // Palette and low bit depths expanded to whole bytes per sample.
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder
        .read_info()
        .unwrap_or_else(|e| panic!("{} is not a PNG: {e}", path.display()));
    let mut buf = vec![0u8; reader.output_buffer_size()];
    let info = reader
        .next_frame(&mut buf)
        .unwrap_or_else(|e| panic!("cannot decode {}: {e}", path.display()));
    assert!(
        info.width >= 200 && info.height >= 150,
        "{}: suspiciously small image {}×{}",
        path.display(),
        info.width,
        info.height
    );
    let bpp = info.color_type.samples()
        * if info.bit_depth == png::BitDepth::Sixteen {
            2
        } else {
            1
        };
    let pixels = &buf[..info.buffer_size()];
    let mut distinct = std::collections::HashSet::new();
    for row in pixels.chunks(info.line_size) {
        for px in row[..info.width as usize * bpp].chunks(bpp) {
            distinct.insert(px.to_vec());
            if distinct.len() > 2 {
                return;
            }
        }
    }
    panic!(
        "{}: only {} distinct colour(s); the plot is blank",
        path.display(),
        distinct.len()
    );
}

/// Names of the `ckpt-*` directories under `<run>/checkpoints`, sorted.
fn checkpoints(run_dir: &Path) -> Vec<String> {
    let dir = run_dir.join("checkpoints");
    let mut v: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ckpt-"))
        .collect();
    v.sort();
    v
}

/// ½⟨|u|²⟩ of a field written by `write_velocity_npz`.
fn field_energy(path: &Path) -> (usize, f64) {
    let (n, u, v, w) = read_velocity_npz(path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(u.len(), n * n * n);
    let mut sum = 0.0;
    for ((a, b), c) in u.iter().zip(&v).zip(&w) {
        assert!(
            a.is_finite() && b.is_finite() && c.is_finite(),
            "{}: non-finite velocity",
            path.display()
        );
        sum += a * a + b * b + c * c;
    }
    (n, 0.5 * sum / (n * n * n) as f64)
}

/// Runs the named case `quick` into `<tmp>/run` and returns that directory.
fn run_quick(tmp: &Path, threads: &str) -> PathBuf {
    let out = tmp.join("run");
    let o = run(&["run", "quick", "--out", s(&out), "--threads", threads]);
    assert_ok(&o, "vpm run quick");
    out
}

// ---------------------------------------------------------------------------------------------
// 1. `vpm run quick` end to end
// ---------------------------------------------------------------------------------------------

#[test]
fn run_quick_writes_every_output() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_quick(tmp.path(), "2");
    let (quick, _) = resolve_case("quick").unwrap();

    // case.toml: the resolved case, parsing back to the same Case.
    let written = Case::from_file(&out.join("case.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(written, quick);
    let t_end = quick.time.t_end;
    assert_eq!(t_end, 0.5);

    // manifest.json
    let m = manifest(&out);
    for key in [
        "vpm_version",
        "command_line",
        "threads",
        "cpu_model",
        "stage_wall_seconds",
        "status",
    ] {
        assert!(m.get(key).is_some(), "manifest.json lacks `{key}`: {m:#}");
    }
    assert_eq!(m["status"], "finished", "{m:#}");
    assert_eq!(m["threads"], 2, "{m:#}");
    assert_eq!(m["vpm_version"], env!("CARGO_PKG_VERSION"));
    let cl: Vec<&str> = m["command_line"]
        .as_array()
        .expect("command_line is an array")
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        cl.contains(&"run") && cl.contains(&"quick"),
        "command_line {cl:?}"
    );
    assert!(!m["cpu_model"].as_str().unwrap().is_empty());
    let stages = m["stage_wall_seconds"].as_object().expect("an object");
    assert!(!stages.is_empty());
    for (k, v) in stages {
        let x = v.as_f64().unwrap_or(-1.0);
        assert!(x.is_finite() && x >= 0.0, "stage {k}: {v}");
    }

    // spectral/energy.csv
    let energy = Csv::read(&out.join("spectral/energy.csv"));
    for c in ["t", "K", "eps", "Z", "u_rms", "L", "T", "Re_lambda"] {
        energy.col_index(c);
    }
    let t = energy.col("t");
    let k = energy.col("K");
    assert!(t.len() >= 2, "energy.csv has {} rows", t.len());
    assert_eq!(t[0], 0.0);
    assert_eq!(
        *t.last().unwrap(),
        t_end,
        "the run must end exactly at t_end"
    );
    assert!(t.windows(2).all(|w| w[1] > w[0]), "t not increasing: {t:?}");
    assert!(
        k.windows(2).all(|w| w[1] < w[0]),
        "K must decay at Re = 20: {k:?}"
    );
    for r in &energy.rows {
        assert!(r.iter().all(|x| x.is_finite()), "non-finite row {r:?}");
    }
    // quick: K0 = 1/8 for the unit Taylor–Green vortex.
    assert_rel_close(k[0], 0.125, 1e-12, "K(0)");

    // spectral/spectra.csv: E(k) at t = 0 and t_end, each summing to K.
    let spectra = Csv::read(&out.join("spectral/spectra.csv"));
    assert_eq!(spectra.header, ["t", "k", "E"]);
    let mut by_t: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for r in &spectra.rows {
        let e = by_t.entry(r[0].to_bits()).or_insert((r[0], 0.0));
        e.1 += r[2];
    }
    let times: Vec<f64> = by_t.values().map(|v| v.0).collect();
    assert_eq!(times, vec![0.0, t_end], "spectrum times");
    for (ts, sum_e) in by_t.values() {
        let i = t
            .iter()
            .position(|x| x == ts)
            .unwrap_or_else(|| panic!("no energy row at spectrum time {ts}"));
        assert_rel_close(*sum_e, k[i], 1e-12, &format!("Σ E(k) vs K at t = {ts}"));
    }

    // spectral/final.npz: the field at t_end, whose energy is the last K, stamped with the
    // time and step of the last row.
    let (n, e_final) = field_energy(&out.join("spectral/final.npz"));
    assert_eq!(n, 16);
    assert_rel_close(e_final, *k.last().unwrap(), 1e-12, "½⟨|u|²⟩ of final.npz");
    let stamp = read_field_time(&out.join("spectral/final.npz")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (stamp.t, stamp.step as f64),
        (t_end, *energy.col("step").last().unwrap())
    );

    // plots
    check_png(&out.join("energy.png"));
    check_png(&out.join("spectrum.png"));

    // checkpoints
    assert!(
        !checkpoints(&out).is_empty(),
        "no ckpt-* under {}",
        out.display()
    );
}

#[test]
fn run_named_case_from_another_directory_uses_default_run_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let before = utc_now_compact();
    let o = run_in(Some(tmp.path()), &["run", "quick", "--threads", "1"]);
    let after = utc_now_compact();
    assert_ok(&o, "vpm run quick (in a directory without cases/)");

    let runs = tmp.path().join("runs");
    let entries: Vec<String> = fs::read_dir(&runs)
        .unwrap_or_else(|e| panic!("{} was not created: {e}", runs.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let name = &entries[0];
    let stamp = name
        .strip_prefix("quick-")
        .unwrap_or_else(|| panic!("run directory {name:?} is not quick-<stamp>"));
    // YYYYMMDDTHHMMSSZ
    let b = stamp.as_bytes();
    assert!(
        b.len() == 16
            && b[8] == b'T'
            && b[15] == b'Z'
            && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit),
        "stamp {stamp:?} is not YYYYMMDDTHHMMSSZ"
    );
    assert!(
        before.as_str() <= stamp && stamp <= after.as_str(),
        "stamp {stamp} not between {before} and {after} (UTC)"
    );
    let dir = runs.join(name);
    assert_eq!(manifest(&dir)["status"], "finished");
    assert!(dir.join("spectral/final.npz").is_file());
}

// ---------------------------------------------------------------------------------------------
// 2. An existing run directory is refused without --force
// ---------------------------------------------------------------------------------------------

#[test]
fn existing_run_dir_is_refused_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_quick(tmp.path(), "1");
    let energy_path = out.join("spectral/energy.csv");
    let energy_before = fs::read(&energy_path).unwrap();
    let manifest_before = fs::read(out.join("manifest.json")).unwrap();
    let case_before = fs::read(out.join("case.toml")).unwrap();
    // A file of the user's that --force must leave alone.
    fs::write(out.join("notes.txt"), "my notes\n").unwrap();

    let o = run(&["run", "quick", "--out", s(&out), "--threads", "1"]);
    assert_failed(&o, "second run into the same --out");
    let err = stderr(&o);
    assert!(
        err.contains("--force"),
        "stderr should mention --force:\n{err}"
    );
    assert!(
        err.contains(s(&out)),
        "stderr should name the directory:\n{err}"
    );
    assert_no_panic(&err);
    assert_eq!(fs::read(&energy_path).unwrap(), energy_before);
    assert_eq!(
        fs::read(out.join("manifest.json")).unwrap(),
        manifest_before
    );
    assert_eq!(fs::read(out.join("case.toml")).unwrap(), case_before);

    let o = run(&[
        "run",
        "quick",
        "--out",
        s(&out),
        "--threads",
        "1",
        "--force",
    ]);
    assert_ok(&o, "run with --force");
    assert_eq!(manifest(&out)["status"], "finished");
    // Same case, same thread count: the same bytes.
    assert_eq!(fs::read(&energy_path).unwrap(), energy_before);
    assert_eq!(
        fs::read_to_string(out.join("notes.txt")).unwrap(),
        "my notes\n"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Kill and resume
// ---------------------------------------------------------------------------------------------

/// quick.toml's physics with a schedule that exercises landing on output and spectrum times:
/// every_time = 0.06 and 0.37 are not multiples of dt = 0.02.
const RESUME_CASE: &str = r#"# Kill-and-resume test case.
description = "quick with an awkward output schedule"

[flow]
nu = 0.05

[initial]
kind = "taylor-green"

[time]
t_end = 0.5
dt = 0.02

[output]
every_time = 0.06
spectra_times = [0, 0.1, 0.37, 0.5]

[checkpoint]
every_steps = 4

[spectral]
n = 16
dealias = "2/3"
"#;

#[test]
fn kill_and_resume_reproduces_the_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    let case = tmp.path().join("resume-case.toml");
    fs::write(&case, RESUME_CASE).unwrap();
    let a = tmp.path().join("A");
    let b = tmp.path().join("B");

    assert_ok(
        &run(&["run", s(&case), "--out", s(&a), "--threads", "2"]),
        "uninterrupted run",
    );

    run_aborted(s(&case), &b, "7");
    assert!(!b.join("spectral/final.npz").exists());
    assert_eq!(manifest(&b)["status"], "running");
    // A kill in the middle of a write leaves a partial line.
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(b.join("spectral/energy.csv"))
            .unwrap();
        f.write_all(b"1.4000000000000001e-1,7.0000000000000000e0,2.0000")
            .unwrap();
    }

    let o = run(&[
        "resume",
        s(&b),
        "--threads",
        "2",
        "--abort-after-steps",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(137), "second abort: {}", stderr(&o));
    assert!(!b.join("spectral/final.npz").exists());

    let o = run(&["resume", s(&b), "--threads", "1"]);
    assert_ok(&o, "final resume");

    for f in ["spectral/energy.csv", "spectral/spectra.csv"] {
        let (x, y) = (fs::read(a.join(f)).unwrap(), fs::read(b.join(f)).unwrap());
        assert!(
            x == y,
            "{f} differs between the uninterrupted and the resumed run\n--- A\n{}\n--- B\n{}",
            String::from_utf8_lossy(&x),
            String::from_utf8_lossy(&y)
        );
    }
    let fa = read_velocity_npz(&a.join("spectral/final.npz")).unwrap();
    let fb = read_velocity_npz(&b.join("spectral/final.npz")).unwrap();
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(fa.0, fb.0);
    assert!(bits(&fa.1) == bits(&fb.1), "final u differs");
    assert!(bits(&fa.2) == bits(&fb.2), "final v differs");
    assert!(bits(&fa.3) == bits(&fb.3), "final w differs");

    // The schedule was honoured: outputs at multiples of 0.06 and at t_end, spectra at the
    // listed times.
    let energy = Csv::read(&a.join("spectral/energy.csv"));
    let t = energy.col("t");
    let mut expected: Vec<f64> = (0..=8).map(|i| i as f64 * 0.06).collect();
    expected.push(0.5);
    assert_eq!(t, expected, "output times");
    let spectra = Csv::read(&a.join("spectral/spectra.csv"));
    let mut ts = spectra.col("t");
    ts.dedup();
    assert_eq!(ts, vec![0.0, 0.1, 0.37, 0.5], "spectrum times");

    let mb = manifest(&b);
    assert_eq!(mb["status"], "finished");
    assert_eq!(
        mb["resumes"].as_array().map(Vec::len),
        Some(2),
        "two resumes recorded: {mb:#}"
    );

    // Resuming a finished run does nothing and says so.
    let energy_b = fs::read(b.join("spectral/energy.csv")).unwrap();
    let o = run(&["resume", s(&b), "--threads", "1"]);
    assert_ok(&o, "resume of a finished run");
    let err = stderr(&o);
    assert!(
        err.contains("complete"),
        "should say it is complete:\n{err}"
    );
    assert_eq!(fs::read(b.join("spectral/energy.csv")).unwrap(), energy_b);
    assert_eq!(
        manifest(&b)["status"],
        "finished",
        "the manifest stays as it was"
    );
}

#[test]
fn resume_without_checkpoints_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_quick(tmp.path(), "1");
    fs::remove_dir_all(out.join("checkpoints")).unwrap();
    let o = run(&["resume", s(&out), "--threads", "1"]);
    assert_failed(&o, "resume with no checkpoints");
    let err = stderr(&o);
    assert_no_panic(&err);
    assert!(
        err.contains("checkpoint") && err.contains(s(&out)),
        "should say there is no checkpoint in {}:\n{err}",
        out.display()
    );

    // Not a run directory at all.
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let o = run(&["resume", s(&empty), "--threads", "1"]);
    assert_failed(&o, "resume of an empty directory");
    let err = stderr(&o);
    assert_no_panic(&err);
    assert!(err.contains(s(&empty)), "should name the directory:\n{err}");
}

/// `--backend cuda` without a usable GPU (hidden here by VPM_NO_CUDA, so this holds on GPU
/// machines too) is a clear error before any run directory is made; the default `auto` runs on
/// the CPU and says why; `--backend` on a case without particles is refused.
#[test]
fn backend_cuda_without_a_gpu_is_a_clear_error_and_auto_falls_back() {
    let tmp = tempfile::tempdir().unwrap();
    // One worker thread, the GPU hidden.
    let no_gpu = |args: &[&str]| {
        let mut c = vpm();
        c.args(args)
            .args(["--threads", "1"])
            .env("VPM_NO_CUDA", "1");
        c.output().expect("could not start the vpm binary")
    };
    let out = tmp.path().join("cuda");
    let case = "hit-32-compare";
    let o = no_gpu(&["run", case, "--backend", "cuda", "--out", s(&out)]);
    assert_failed(&o, "--backend cuda without a GPU");
    let err = stderr(&o);
    assert_no_panic(&err);
    assert!(
        err.contains("device \"cuda\" asked for, but no usable CUDA GPU")
            && err.contains("VPM_NO_CUDA"),
        "should say that no GPU is usable and why:\n{err}"
    );
    assert!(
        !out.exists(),
        "no run directory for a run that cannot start"
    );

    // auto (the case's default): the CPU evaluator, with the reason in the log.
    let out = tmp.path().join("auto");
    let o = no_gpu(&["run", case, "--out", s(&out), "--abort-after-steps", "1"]);
    let err = stderr(&o);
    assert_no_panic(&err);
    assert!(
        err.contains("vortex device: auto: cpu, no usable GPU") && err.contains("VPM_NO_CUDA"),
        "auto should fall back to the CPU and say why:\n{err}"
    );

    // A spectral-only case follows --device cpu; asking for a GPU where there is none is an
    // error that names the section and says why.
    let q = tmp.path().join("q");
    let o = run(&["run", "quick", "--device", "cpu", "--out", s(&q)]);
    assert_ok(&o, "--device cpu on a spectral-only case");
    assert!(manifest(&q)["devices"]["spectral"]
        .as_str()
        .unwrap()
        .starts_with("cpu"));
    let g = tmp.path().join("g");
    let o = no_gpu(&["run", "quick", "--backend", "cuda", "--out", s(&g)]);
    assert_failed(&o, "--device cuda on a spectral-only case");
    let err = stderr(&o);
    assert_no_panic(&err);
    assert!(
        err.contains("[spectral]") && err.contains("no usable CUDA GPU"),
        "{err}"
    );
    assert!(!tmp.path().join("g").exists());
}

// ---------------------------------------------------------------------------------------------
// 4. Bad input through the CLI
// ---------------------------------------------------------------------------------------------

#[test]
fn invalid_case_file_reports_file_line_and_key() {
    let tmp = tempfile::tempdir().unwrap();
    let text = RESUME_CASE.replace("n = 16", "n = 7");
    let line = text
        .lines()
        .position(|l| l == "n = 7")
        .expect("the edited line")
        + 1;
    let case = tmp.path().join("bad.toml");
    fs::write(&case, &text).unwrap();
    let out = tmp.path().join("out");

    let o = run(&["run", s(&case), "--out", s(&out), "--threads", "1"]);
    assert_failed(&o, "n = 7");
    let err = stderr(&o);
    assert_no_panic(&err);
    let at = format!("{}:{line}", case.display());
    assert!(err.contains(&at), "stderr should point at {at}:\n{err}");
    assert!(
        err.contains("spectral.n"),
        "stderr should name the key:\n{err}"
    );
    assert!(
        !out.exists(),
        "nothing should be written for an invalid case"
    );
}

#[test]
fn unknown_named_case_lists_the_named_cases() {
    let o = run(&["run", "no-such-case", "--threads", "1"]);
    assert_failed(&o, "unknown case");
    let err = stderr(&o);
    assert_no_panic(&err);
    assert!(err.contains("no-such-case"), "{err}");
    for c in named_cases() {
        assert!(
            err.contains(c.name),
            "stderr should list `{}`:\n{err}",
            c.name
        );
    }
}

#[test]
fn missing_case_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope.toml");
    let o = run(&["run", s(&missing), "--threads", "1"]);
    assert_failed(&o, "missing case file");
    let err = stderr(&o);
    assert_no_panic(&err);
    assert!(err.contains(s(&missing)), "should name the file:\n{err}");
}

// ---------------------------------------------------------------------------------------------
// 5. A non-finite state stops the run and keeps the last good one
// ---------------------------------------------------------------------------------------------

/// An inviscid Taylor–Green vortex with a step far beyond stability. RK4 on the quadratic
/// nonlinearity is a degree-16 polynomial map per step, so the state overflows quickly: in the
/// first step for amplitude 1e150, after four good steps for amplitude 3.
fn blowup_case(amplitude: &str) -> String {
    format!(
        r#"# Blows up on purpose.
[flow]
nu = 0.0

[initial]
kind = "taylor-green"
amplitude = {amplitude}

[time]
t_end = 100.0
dt = 0.5

[output]
every_steps = 1

[checkpoint]
every_steps = 1000

[spectral]
n = 16
"#
    )
}

fn run_blowup(tmp: &Path, amplitude: &str) -> (PathBuf, Output) {
    let case = tmp.join("blowup.toml");
    fs::write(&case, blowup_case(amplitude)).unwrap();
    let out = tmp.join("run");
    let o = run(&["run", s(&case), "--out", s(&out), "--threads", "2"]);
    (out, o)
}

/// The checks every blow-up must pass; returns energy.csv.
fn check_blowup_stopped(out: &Path, o: &Output) -> Csv {
    assert_failed(o, "blow-up");
    let err = stderr(o);
    assert_no_panic(&err);
    assert!(
        err.contains("non-finite") || err.contains("NaN"),
        "should say the state went non-finite:\n{err}"
    );
    let ckdir = out.join("checkpoints");
    assert!(
        err.contains(s(&ckdir)),
        "should name {}:\n{err}",
        ckdir.display()
    );

    let energy = Csv::read(&out.join("spectral/energy.csv"));
    assert!(!energy.rows.is_empty(), "the t = 0 row is lost");
    assert!(
        energy.rows.len() <= 11,
        "took {} steps to blow up",
        energy.rows.len()
    );
    let t = energy.col("t");
    assert_eq!(t[0], 0.0);
    for x in energy.col("K") {
        assert!(x.is_finite() && x > 0.0, "K = {x} in a row kept");
    }

    let m = manifest(out);
    let status = m["status"].as_str().unwrap_or_default();
    assert!(status.starts_with("failed"), "status {status:?}");
    assert!(!out.join("spectral/final.npz").exists());

    // The latest checkpoint holds the state of the last row written.
    assert!(!checkpoints(out).is_empty());
    let (step, meta, arrays) = read_latest_checkpoint(out)
        .unwrap()
        .expect("a valid checkpoint");
    let last = energy.rows.last().unwrap();
    assert_eq!(step as f64, last[energy.col_index("step")]);
    assert_eq!(meta["t"].as_f64(), t.last().copied());
    let (_, uhat) = arrays.get("uhat").expect("uhat in the checkpoint");
    assert!(uhat.iter().all(|x| x.is_finite()), "non-finite checkpoint");
    energy
}

#[test]
fn non_finite_state_stops_the_run_and_keeps_the_last_good_state() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, o) = run_blowup(tmp.path(), "1e150");
    let energy = check_blowup_stopped(&out, &o);
    // λ and Re_λ involve ν/ε = 0/0 for ν = 0: see the ignored test below.
    let skip = [energy.col_index("lambda"), energy.col_index("Re_lambda")];
    for r in &energy.rows {
        for (i, x) in r.iter().enumerate() {
            assert!(
                skip.contains(&i) || x.is_finite(),
                "non-finite {} in row {r:?}",
                energy.header[i]
            );
        }
    }
}

#[test]
fn blow_up_after_some_steps_checkpoints_the_last_good_step() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, o) = run_blowup(tmp.path(), "3.0");
    let energy = check_blowup_stopped(&out, &o);
    // checkpoint.every_steps = 1000: the checkpoint after step 0 was written by the failure.
    let steps = energy.col("step");
    let last_step = *steps.last().unwrap();
    assert!(last_step >= 1.0, "expected a few good steps, got {steps:?}");
    let names = checkpoints(&out);
    assert!(
        names
            .last()
            .unwrap()
            .ends_with(&format!("{:010}", last_step as u64)),
        "{names:?}"
    );
    // The rows of good states hold finite state statistics. (minus_dKdt, a product of û and
    // the nonlinear term, overflows for the last, huge but finite, state; λ and Re_λ are 0/0
    // for ν = 0.)
    for c in [
        "t", "step", "dt", "K", "eps", "Z", "u_rms", "L", "T", "max_div",
    ] {
        for x in energy.col(c) {
            assert!(x.is_finite(), "{c} = {x}");
        }
    }

    // Resuming from that checkpoint fails the same way and leaves energy.csv as it was.
    let before = fs::read(out.join("spectral/energy.csv")).unwrap();
    let o = run(&["resume", s(&out), "--threads", "1"]);
    assert_failed(&o, "resume of a blown-up run");
    let err = stderr(&o);
    assert_no_panic(&err);
    assert!(err.contains("non-finite") || err.contains("NaN"), "{err}");
    assert_eq!(fs::read(out.join("spectral/energy.csv")).unwrap(), before);
}

#[test]
fn inviscid_rows_have_a_finite_taylor_microscale() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, _) = run_blowup(tmp.path(), "1e150");
    let energy = Csv::read(&out.join("spectral/energy.csv"));
    for (l, re) in energy.col("lambda").iter().zip(energy.col("Re_lambda")) {
        assert!(l.is_finite() && *l > 0.0, "λ = {l} for ν = 0");
        assert!(
            !re.is_nan(),
            "Re_λ = NaN for ν = 0 (+inf would be the limit)"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 6. `vpm cases` and `vpm plot`
// ---------------------------------------------------------------------------------------------

#[test]
fn cases_lists_named_cases_with_summaries() {
    let o = run(&["cases"]);
    assert_ok(&o, "vpm cases");
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), named_cases().len(), "{text}");
    for name in ["quick", "tgv-re100", "hit-64"] {
        let matching: Vec<&&str> = lines
            .iter()
            .filter(|l| l.split_whitespace().next() == Some(name))
            .collect();
        assert_eq!(matching.len(), 1, "`{name}` should be on one line:\n{text}");
        let summary = matching[0][name.len()..].trim();
        assert!(
            summary.len() > 10,
            "`{name}` has no summary: {:?}",
            matching[0]
        );
        let expected = named_cases().iter().find(|c| c.name == name).unwrap();
        assert_eq!(summary, expected.summary);
    }
}

#[test]
fn plot_redraws_the_pngs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_quick(tmp.path(), "1");
    for p in ["energy.png", "spectrum.png"] {
        fs::remove_file(out.join(p)).unwrap();
    }
    let o = run(&["plot", s(&out)]);
    assert_ok(&o, "vpm plot");
    for p in ["energy.png", "spectrum.png"] {
        check_png(&out.join(p));
        assert!(stdout(&o).contains(p), "stdout should list {p}");
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Help
// ---------------------------------------------------------------------------------------------

#[test]
fn help_exits_zero() {
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["resume", "--help"],
        &["--version"],
    ] {
        let o = run(args);
        assert_ok(&o, &format!("vpm {}", args.join(" ")));
        assert!(!stdout(&o).is_empty(), "vpm {}: no output", args.join(" "));
    }
    let o = run(&["--help"]);
    for sub in ["run", "resume", "cases", "plot", "bench"] {
        assert!(stdout(&o).contains(sub), "--help should list `{sub}`");
    }
    let o = run(&["run", "--help"]);
    let text = stdout(&o);
    assert!(text.contains("--out") && text.contains("--force") && text.contains("--threads"));
    assert!(
        !text.contains("abort-after-steps"),
        "the testing flag should be hidden:\n{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// Minor defects found while writing these tests
// ---------------------------------------------------------------------------------------------

#[test]
fn missing_case_file_error_is_not_repeated() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope.toml");
    let o = run(&["run", s(&missing), "--threads", "1"]);
    let err = stderr(&o);
    assert_eq!(
        err.matches("os error").count(),
        1,
        "the OS error appears more than once:\n{err}"
    );
}

#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let case = tmp.path().join("resume-case.toml");
    fs::write(&case, RESUME_CASE).unwrap();
    let b = tmp.path().join("B");
    run_aborted(s(&case), &b, "7");
    // A partial line makes the resume log an INFO message about dropping it.
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(b.join("spectral/energy.csv"))
            .unwrap();
        f.write_all(b"1.0,2.0").unwrap();
    }
    let o = run(&["resume", s(&b), "--threads", "1"]);
    assert_ok(&o, "resume");
    let err = stderr(&o);
    assert!(err.contains("dropping"), "expected the INFO line:\n{err}");
    assert!(!err.contains('\u{1b}'), "escape codes on a pipe:\n{err:?}");
}

/// `vpm bench spectral` and `vpm bench direct` print a table that names the hardware and write
/// JSON with one row per size.
#[test]
fn benchmarks_print_a_table_and_write_json() {
    let dir = tempfile::tempdir().unwrap();
    // Runs `vpm bench WHAT ARGS… --repeats 1 --json FILE`; returns stdout and the JSON.
    let bench = |what: &str, args: &[&str]| -> (String, serde_json::Value) {
        let json = dir.path().join(format!("{what}.json"));
        let mut all = vec!["bench", what];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--repeats", "1", "--json", s(&json)]);
        let out = run(&all);
        assert_ok(&out, &format!("vpm bench {what}"));
        let value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
        (stdout(&out), value)
    };
    let positive = |v: &serde_json::Value| v.as_f64().unwrap() > 0.0;

    let (text, json) = bench(
        "spectral",
        &["--n", "8,16", "--dealias", "2/3", "--threads", "1"],
    );
    assert!(
        text.contains("ms / RK4 step") && text.contains("1 threads"),
        "{text}"
    );
    assert_eq!(json["rows"].as_array().unwrap().len(), 2);
    assert!(positive(&json["rows"][1]["ms_per_rk4_step"]));
    assert!(!json["cpu"].as_str().unwrap().is_empty());

    let (_, json) = bench("direct", &["--n", "64,128", "--threads", "2"]);
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(positive(
        &rows[0]["interactions_per_second_velocity_stretching"]
    ));

    let (_, json) = bench("ewald", &["--n", "8", "--threads", "2"]);
    assert_eq!(json["rows"][0]["particles"].as_u64(), Some(512));
    assert!(positive(&json["rows"][0]["particles_per_second_velocity"]));
}

/// A small Taylor–Green case run by both solvers: the vortex method's K(t) follows the spectral
/// K(t), every file of both solvers is written, and kill-and-resume reproduces the run exactly
/// (particles, AB2 history and reinitialisation counter come back from the checkpoint, and the
/// sums of the numerical-dissipation measurements, here at every reinitialisation).
#[test]
fn both_solvers_run_compare_and_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let case = dir.path().join("tg-both.toml");
    std::fs::write(
        &case,
        "# Taylor–Green by both solvers, 16^3.\n\
         [flow]\nnu = 0.05\n[initial]\nkind = \"taylor-green\"\n\
         [time]\nt_end = 0.3\ndt = 0.02\n[output]\nevery_steps = 2\nspectra_times = [0.0, 0.3]\n\
         [checkpoint]\nevery_steps = 4\n[spectral]\nn = 16\ndealias = \"3/2\"\n\
         [vortex]\nreinit_every = 5\nsnapshot_every_time = 0.1\ndissipation_every = 1\n",
    )
    .unwrap();
    let a = dir.path().join("a");
    let c = case.to_str().unwrap();
    let out = run(&["run", c, "--out", a.to_str().unwrap(), "--threads", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in [
        "vortex/energy.csv",
        "vortex/spectra.csv",
        "comparison.csv",
        "energy.png",
    ] {
        assert!(a.join(f).exists(), "{f} missing");
    }
    // Particle snapshots at t = 0, 0.1, 0.2, 0.3 (steps 0, 5, 10, 15), each npz + vtp, and a pvd.
    let snap = vpm::output::read_particle_snapshot(&a.join("snapshots/particles-00000010.npz"))
        .expect("snapshot at step 10");
    assert_eq!(snap.len(), 16 * 16 * 16);
    assert!((snap.t - 0.2).abs() < 1e-12);
    for step in [0, 5, 10, 15] {
        assert!(a
            .join(format!("snapshots/particles-{step:08}.vtp"))
            .exists());
    }
    let pvd = std::fs::read_to_string(a.join("snapshots/particles.pvd")).unwrap();
    assert_eq!(pvd.matches("<DataSet").count(), 4, "{pvd}");
    // K(t) agreement.
    let text = std::fs::read_to_string(a.join("comparison.csv")).unwrap();
    let mut rows = 0;
    for line in text.lines().skip(1).filter(|l| l.contains(",K,")) {
        let rel: f64 = line.rsplit(',').next().unwrap().parse().unwrap();
        assert!(rel.abs() < 5e-3, "K differs by {rel} at {line}");
        rows += 1;
    }
    assert!(rows >= 8, "{rows} comparison rows");
    // Kill and resume: after 3 steps (resumed from step 0, before the first
    // reinitialisation: the energy rows report the initial RBF solve), 7 (from step 4, across
    // the reinitialisation at 5) and 13 (from step 12, after the one at 10).
    for abort in ["3", "7", "13"] {
        let b = dir.path().join(format!("b{abort}"));
        run_aborted(c, &b, abort);
        assert_ok(&run(&["resume", s(&b), "--threads", "1"]), "resume");
        for f in [
            "spectral/energy.csv",
            "vortex/energy.csv",
            "vortex/spectra.csv",
            "comparison.csv",
            "snapshots/particles-00000015.npz",
        ] {
            assert!(
                fs::read(a.join(f)).unwrap() == fs::read(b.join(f)).unwrap(),
                "{f} differs after a kill at step {abort} and resume"
            );
        }
        let summary = |d: &Path| manifest(d)["numerical_dissipation"].clone();
        assert_eq!(summary(&a), summary(&b), "after a kill at step {abort}");
    }
}

/// Every run with particles beside the spectral solver measures their numerical dissipation
/// (here at every reinitialisation, every 2 steps): K just before and just after each, the
/// stretches of steps between them against ∫2νZ dt, −dK/dt over the rows, max|ω| of both
/// fields; a summary in the manifest and the run log. The K measured before a
/// reinitialisation is the K an output reports for that state: a run that reinitialises a step
/// later writes it in its row of that step. And measuring changes no state.
#[test]
fn numerical_dissipation_is_measured_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let run_with = |name: &str, vortex: &str| -> (PathBuf, Output) {
        let case = dir.path().join(format!("{name}.toml"));
        fs::write(
            &case,
            format!(
                "[flow]\nnu = 0.05\n[initial]\nkind = \"taylor-green\"\n\
                 [time]\nt_end = 0.12\ndt = 0.02\n[output]\nevery_steps = 1\n\
                 [checkpoint]\nevery_steps = 100\n[spectral]\nn = 16\n[vortex]\n{vortex}"
            ),
        )
        .unwrap();
        let out = dir.path().join(name);
        let o = run(&["run", s(&case), "--out", s(&out), "--threads", "2"]);
        assert_ok(&o, name);
        (out, o)
    };
    let (a, log) = run_with("every", "reinit_every = 2\ndissipation_every = 1\n");
    let (later, _) = run_with("later", "reinit_every = 3\n");
    let (rarely, _) = run_with("rarely", "reinit_every = 2\ndissipation_every = 1000\n");
    let (va, vl, vr) = (
        Csv::read(&a.join("vortex/energy.csv")),
        Csv::read(&later.join("vortex/energy.csv")),
        Csv::read(&rarely.join("vortex/energy.csv")),
    );
    let (k, k_before) = (va.col("K"), va.col("K_before_reinit"));
    assert_eq!(k.len(), 7, "rows at steps 0 … 6");
    // Step 2: "later" has not reinitialised yet; its K is that of the state "every" measured.
    assert_eq!(k_before[2], vl.col("K")[2]);
    // Measuring changes nothing: K as without measurements.
    assert_eq!(k, vr.col("K"));
    assert_eq!(vr.col("reinits_measured"), [0.0; 7]);
    assert_eq!(vr.col("reinits"), [0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]);
    // Reinitialised and measured at steps 2, 4 and 6: K_after (the row's K) − K_before.
    let (dk, rel) = (va.col("reinit_dK"), va.col("reinit_dK_rel"));
    let excess = va.col("stepping_dK_excess_rel");
    for step in [2, 4, 6] {
        assert_eq!(va.col("reinits")[step], 1.0);
        assert_eq!(va.col("reinits_measured")[step], 1.0);
        assert_rel_close(dk[step], k[step] - k_before[step], 1e-12, "reinit_dK");
        assert_rel_close(rel[step], dk[step] / k_before[step], 1e-12, "reinit_dK_rel");
        assert!(dk[step].abs() < 1e-5 * k[step], "{}", dk[step]);
    }
    // The stretches from step 2 to 4 and 4 to 6.
    assert!(excess[4].is_finite() && excess[6].is_finite(), "{excess:?}");
    assert!(excess[2].is_nan() && k_before[3].is_nan());
    // −dK/dt over the rows: finite from the second row on, near ε = 2νZ of this viscous flow.
    let (minus_dkdt, eps) = (va.col("minus_dKdt"), va.col("eps"));
    assert!(minus_dkdt[0].is_nan());
    for i in 1..7 {
        assert_rel_close(minus_dkdt[i], eps[i], 0.05, "−dK/dt against ε");
    }
    // max|ω| of both: 2 for Taylor–Green at t = 0 on the spectral grid, near it for particles.
    let spectral = Csv::read(&a.join("spectral/energy.csv"));
    assert_rel_close(
        spectral.col("max_vorticity")[0],
        2.0,
        1e-12,
        "spectral max|ω|",
    );
    assert_rel_close(va.col("max_vorticity")[0], 2.0, 1e-3, "particle max|ω|");
    // The summary: 3 reinitialisations, all measured, 2 stretches; in the log too.
    let m = &manifest(&a)["numerical_dissipation"];
    assert_eq!(
        (
            &m["reinitialisations"],
            &m["measured"],
            &m["stepping_stretches"]
        ),
        (&3.into(), &3.into(), &2.into()),
        "{m}"
    );
    for key in [
        "reinit_change",
        "stepping_excess",
        "total_change",
        "viscous_change",
    ] {
        assert!(m[key].as_f64().is_some_and(f64::is_finite), "{key}: {m}");
    }
    assert!(
        stderr(&log).contains("numerical dissipation"),
        "{}",
        stderr(&log)
    );
}

/// Q of a fields npz (f32), flat in C order.
fn fields_q(path: &Path) -> Vec<f64> {
    let f = fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut npz = ndarray_npy::NpzReader::new(f).unwrap();
    let q: ndarray::Array3<f32> = npz.by_name("Q").unwrap();
    q.iter().map(|&x| f64::from(x)).collect()
}

/// `output.fields_times` with both solvers: velocity, vorticity and Q of each at the listed
/// times (npz, vti, a pvd per solver), the structures and vorticity pictures next to energy.png;
/// the particle field's Q at t = 0 follows the spectral one; `vpm plot` redraws the pictures to
/// the same bytes; a killed and resumed run writes the same field files.
#[test]
fn fields_and_pictures_at_the_listed_times() {
    let dir = tempfile::tempdir().unwrap();
    let case = dir.path().join("tg-fields.toml");
    fs::write(
        &case,
        "# Taylor–Green by both solvers, 16^3, with fields.\n\
         [flow]\nnu = 0.05\n[initial]\nkind = \"taylor-green\"\n\
         [time]\nt_end = 0.2\ndt = 0.02\n\
         [output]\nevery_steps = 2\nfields_times = [0.0, 0.1, 0.2]\nstructures_level = 1.5\n\
         [checkpoint]\nevery_steps = 4\n[spectral]\nn = 16\n[vortex]\nreinit_every = 5\n",
    )
    .unwrap();
    let c = case.to_str().unwrap();
    let a = dir.path().join("a");
    assert_ok(&run(&["run", c, "--out", s(&a), "--threads", "2"]), "run");
    for solver in ["spectral", "vortex"] {
        for step in [0, 5, 10] {
            for ext in ["npz", "vti"] {
                let f = a.join(format!("fields/{solver}-{step:08}.{ext}"));
                assert!(f.is_file(), "{} missing", f.display());
            }
        }
        let pvd = fs::read_to_string(a.join(format!("fields/{solver}.pvd"))).unwrap();
        assert_eq!(pvd.matches("<DataSet").count(), 3, "{pvd}");
    }
    let pictures = [
        "structures-00000000.png",
        "vorticity-00000000.png",
        "structures-00000010.png",
        "vorticity-00000010.png",
    ];
    for p in pictures {
        check_png(&a.join(p));
    }
    // At t = 0 the particles carry the spectral field (RBF strengths), so their Q is close.
    let qs = fields_q(&a.join("fields/spectral-00000000.npz"));
    let qv = fields_q(&a.join("fields/vortex-00000000.npz"));
    let diff: f64 = qs
        .iter()
        .zip(&qv)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = qs.iter().map(|a| a * a).sum::<f64>().sqrt();
    assert!(
        diff < 0.05 * norm,
        "vortex Q differs from spectral Q by {:e}",
        diff / norm
    );
    // `vpm plot` redraws the same pictures, byte for byte.
    let before: Vec<Vec<u8>> = pictures
        .iter()
        .map(|p| fs::read(a.join(p)).unwrap())
        .collect();
    for p in pictures {
        fs::remove_file(a.join(p)).unwrap();
    }
    let o = run(&["plot", s(&a)]);
    assert_ok(&o, "vpm plot");
    for (p, b) in pictures.iter().zip(&before) {
        assert!(stdout(&o).contains(p), "stdout should list {p}");
        assert!(
            fs::read(a.join(p)).unwrap() == *b,
            "{p} differs when redrawn"
        );
    }
    // Killed after step 7 (checkpoint at 4, fields of step 5 written after it) and resumed: the
    // resumed run writes step 5 again, and the files are those of the uninterrupted run.
    let b = dir.path().join("b");
    run_aborted(c, &b, "7");
    assert!(b.join("fields/vortex-00000005.npz").is_file());
    assert_ok(&run(&["resume", s(&b), "--threads", "1"]), "resume");
    for f in [
        "fields/spectral-00000005.npz",
        "fields/vortex-00000005.npz",
        "fields/spectral.pvd",
        "structures-00000005.png",
        "fields/spectral-00000010.npz",
        "fields/vortex-00000010.vti",
        "fields/vortex.pvd",
        "structures-00000010.png",
    ] {
        assert!(
            fs::read(a.join(f)).unwrap() == fs::read(b.join(f)).unwrap(),
            "{f} differs after a kill and resume"
        );
    }
}

/// `vpm run` refuses, before making the run directory, a case whose outputs cannot fit on the
/// disk (here 10 000 fields times of a 256³ grid: about 11 TB), naming the estimate and the
/// free space.
#[test]
fn run_whose_outputs_do_not_fit_on_the_disk_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let times: Vec<String> = (0..10_000)
        .map(|i| format!("{}", i as f64 * 1e-4))
        .collect();
    let case = dir.path().join("huge.toml");
    fs::write(
        &case,
        format!(
            "[flow]\nnu = 0.01\n[initial]\nkind = \"taylor-green\"\n[time]\nt_end = 1.0\n\
             dt = 0.1\n[output]\nfields_times = [{}]\n[spectral]\nn = 256\ndealias = \"2/3\"\n",
            times.join(", ")
        ),
    )
    .unwrap();
    let out = dir.path().join("runs/huge");
    let o = run(&["run", s(&case), "--out", s(&out), "--device", "cpu"]);
    assert_failed(&o, "a case too big for the disk");
    let err = stderr(&o);
    assert!(
        err.contains("free") && err.contains("fields at 10000 times") && err.contains("--out"),
        "{err}"
    );
    assert!(!out.exists(), "the run directory was made");
}
