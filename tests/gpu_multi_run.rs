//! `vpm run` on several GPUs (`device = "cuda:all"`, src/device/group.rs and
//! src/spectral/distributed.rs): one process per GPU, joined by NCCL.
//!
//! In CI (no GPU) the first tests check the errors: several GPUs asked for on a machine without
//! one (a message, not a panic), a GPU named twice, a group for a benchmark that runs on one
//! device, and `vpm rank` started by hand.
//!
//! The GPU tests print why and pass on a machine with fewer than two usable GPUs (or without
//! NCCL). With two or more they check, for a Taylor–Green 128³ case of 100 steps:
//! - both dealiasing rules: K and ε of every output row on `cuda:all` equal the one-GPU run's to
//!   1e-12 (relative), and the manifest records every rank's GPU and peak memory;
//! - a run checkpointed on one GPU (stopped as a killed process would be) resumes on all GPUs
//!   and ends at the one-GPU K to 1e-12;
//! - a rank killed with SIGKILL (its pid from the log line of rank 0) ends the run within 10 s
//!   with a non-zero status and `failed: rank r …` in the manifest; the last checkpoint is
//!   intact and `vpm resume` completes the run.

mod common;

use common::{assert_failed, assert_no_panic, assert_ok, col, manifest, read_csv, s, stderr, vpm};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// `vpm args…` with the GPU hidden (VPM_NO_CUDA=1): what a machine without a GPU sees.
fn run_without_gpu(args: &[&str]) -> Output {
    vpm()
        .args(args)
        .env("VPM_NO_CUDA", "1")
        .output()
        .expect("could not start the vpm binary")
}

/// Asserts that `o` failed with a message (no panic) that says every one of `says`.
#[track_caller]
fn fails_saying(o: &Output, says: &[&str]) {
    assert_failed(o, says[0]);
    let err = stderr(o);
    assert_no_panic(&err);
    for part in says {
        assert!(err.contains(part), "lacks {part:?}:\n{err}");
    }
}

#[test]
fn several_gpus_without_a_gpu_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    for device in ["cuda:all", "cuda:0,1"] {
        let out = dir.path().join(device.replace([':', ','], "_"));
        let o = run_without_gpu(&["run", "quick", "--out", s(&out), "--device", device]);
        let request = format!("device \"{device}\"");
        fails_saying(&o, &[&request, "no usable CUDA GPU", "VPM_NO_CUDA"]);
    }
}

#[test]
fn a_gpu_named_twice_on_the_command_line_is_refused() {
    let o = run_without_gpu(&["run", "quick", "--device", "cuda:0,1,1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    fails_saying(&o, &["GPU 1 is named twice"]);
}

#[test]
fn solvers_on_one_device_refuse_a_group() {
    const ONLY: &str = "several GPUs run only the spectral solver";
    let o = run_without_gpu(&["bench", "fmm", "--device", "cuda:all", "--n", "1000"]);
    fails_saying(&o, &[ONLY]);
    // `--device` overrides the case's keys: a gravity case and a particle-only case refuse it
    // before any GPU is looked for.
    let dir = tempfile::tempdir().unwrap();
    for (case, section) in [("plummer", "[gravity]"), ("ring", "[vortex]")] {
        let out = dir.path().join(case);
        let o = run_without_gpu(&["run", case, "--out", s(&out), "--device", "cuda:0,1"]);
        fails_saying(&o, &[section, "device \"cuda:0,1\"", ONLY]);
    }
}

#[test]
fn a_rank_started_by_hand_says_what_it_is() {
    let o = vpm().arg("rank").output().unwrap();
    fails_saying(&o, &["started by `vpm run` with several GPUs"]);
}

// ---------------------------------------------------------------------------------------------
// On two or more GPUs.

/// The number of usable GPUs and a temporary directory when there are at least 2 and NCCL
/// loads; otherwise prints why the test is skipped and returns `None`.
fn gpus_or_skip(test: &str) -> Option<(usize, tempfile::TempDir)> {
    let n = match vpm::device::group::gpu_count() {
        Ok(n) => n,
        Err(e) => {
            println!("SKIPPED {test}: {e}");
            return None;
        }
    };
    if n < 2 {
        println!("SKIPPED {test}: {n} GPU on this machine; several GPUs need at least 2");
        return None;
    }
    if let Err(e) = vpm::device::nccl::nccl_available() {
        println!("SKIPPED {test}: NCCL is not usable: {e}");
        return None;
    }
    Some((n, tempfile::tempdir().unwrap()))
}

/// A Taylor–Green 128³ case of `steps` steps (Re = 1600), written into `dir`, with a checkpoint
/// every `every` steps.
fn tg128(dir: &Path, name: &str, dealias: &str, steps: usize, every: usize) -> PathBuf {
    let text = format!(
        r#"name = "{name}"
[flow]
nu = 0.000625
[initial]
kind = "taylor-green"
[time]
t_end = {t_end}
dt = 0.005
[output]
every_steps = 10
spectra_times = [0.0]
[checkpoint]
every_steps = {every}
keep = 2
[spectral]
n = 128
dealias = "{dealias}"
"#,
        t_end = steps as f64 * 0.005
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn run_case(case: &Path, out: &Path, device: &str) -> Output {
    vpm()
        .args(["run", s(case), "--out", s(out), "--device", device])
        .output()
        .unwrap()
}

/// Columns `names` of spectral/energy.csv, row by row.
fn energy(run_dir: &Path, names: &[&str]) -> Vec<Vec<f64>> {
    let (header, rows) = read_csv(&run_dir.join("spectral/energy.csv"));
    let cols: Vec<usize> = names.iter().map(|n| col(&header, n)).collect();
    rows.iter()
        .map(|r| cols.iter().map(|&c| r[c]).collect())
        .collect()
}

#[track_caller]
fn assert_close(a: &[Vec<f64>], b: &[Vec<f64>], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: row counts");
    for (i, (ra, rb)) in a.iter().zip(b).enumerate() {
        for (x, y) in ra.iter().zip(rb) {
            let rel = (x - y).abs() / y.abs().max(1e-300);
            assert!(
                rel <= tol,
                "{what}: row {i}: {x:e} vs {y:e} (relative {rel:e})"
            );
        }
    }
}

#[test]
fn taylor_green_128_on_all_gpus_equals_one_gpu() {
    let Some((gpus, dir)) = gpus_or_skip("taylor_green_128_on_all_gpus_equals_one_gpu") else {
        return;
    };
    for rule in ["2/3", "3/2"] {
        let name = format!("tg128-{}", rule.replace('/', "-"));
        let case = tg128(dir.path(), &name, rule, 100, 50);
        let one = dir.path().join(format!("{name}-one"));
        let all = dir.path().join(format!("{name}-all"));
        let o = run_case(&case, &one, "cuda:0");
        assert_ok(&o, "one GPU");
        let started = Instant::now();
        let o = run_case(&case, &all, "cuda:all");
        assert_ok(&o, "all GPUs");
        println!(
            "{rule}: {gpus} GPUs, run of 100 steps in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let cols = ["K", "eps", "Z"];
        assert_close(
            &energy(&all, &cols),
            &energy(&one, &cols),
            1e-12,
            &format!("{rule}: K, ε, Z on {gpus} GPUs against one"),
        );
        let m = manifest(&all);
        assert_eq!(m["status"], "finished", "{m}");
        let ranks = m["ranks"].as_array().expect("the manifest's ranks");
        assert_eq!(ranks.len(), gpus, "{m}");
        for (r, rank) in ranks.iter().enumerate() {
            assert_eq!(rank["rank"], r);
            assert_eq!(rank["device"], format!("cuda:{r}"));
            assert!(
                rank["peak_device_memory_bytes"].as_u64().unwrap() > 0,
                "{rank}"
            );
        }
        assert!(
            m["devices"]["spectral"]
                .as_str()
                .unwrap()
                .starts_with("cuda:0,1"),
            "{m}"
        );
    }
}

#[test]
fn a_run_checkpointed_on_one_gpu_resumes_on_all() {
    let test = "a_run_checkpointed_on_one_gpu_resumes_on_all";
    let Some((_, dir)) = gpus_or_skip(test) else {
        return;
    };
    let (case, whole) = (
        tg128(dir.path(), "tg128-resume", "2/3", 100, 25),
        dir.path().join("whole"),
    );
    assert_ok(&run_case(&case, &whole, "cuda:0"), "the uninterrupted run");
    // Stopped as a killed process would be after 60 steps: the checkpoint of step 50 remains.
    let cut = dir.path().join("cut");
    let o = vpm()
        .args(["run", s(&case), "--out", s(&cut), "--device", "cuda:0"])
        .args(["--abort-after-steps", "60"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(137), "{}", stderr(&o));
    let o = vpm()
        .args(["resume", s(&cut), "--device", "cuda:all"])
        .output()
        .unwrap();
    assert_ok(&o, "resume on all GPUs");
    let last = |d: &Path| energy(d, &["K", "eps"]).last().cloned().unwrap();
    assert_close(
        &[last(&cut)],
        &[last(&whole)],
        1e-12,
        "K and ε at the end, resumed on all GPUs",
    );
    assert_eq!(manifest(&cut)["status"], "finished");
}

#[test]
fn a_killed_rank_ends_the_run_cleanly() {
    let Some((gpus, dir)) = gpus_or_skip("a_killed_rank_ends_the_run_cleanly") else {
        return;
    };
    // Long enough to be killed in the middle: 6000 steps of 128³, a checkpoint every 500.
    let case = tg128(dir.path(), "tg128-kill", "2/3", 6000, 500);
    let out = dir.path().join("run");
    let mut child = vpm()
        .args(["run", s(&case), "--out", s(&out), "--device", "cuda:all"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Rank 0 logs "rank r on cuda:N (pid P): …" for every rank once the group is joined.
    let victim = gpus - 1;
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = String::new();
    let pid: u32 = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the run ended before its ranks were logged:\n{log}"))
            .unwrap();
        log.push_str(&line);
        log.push('\n');
        let prefix = format!("rank {victim} on cuda:");
        if let Some(rest) = line.split(&prefix).nth(1) {
            let pid = rest
                .split("(pid ")
                .nth(1)
                .unwrap()
                .split(')')
                .next()
                .unwrap();
            break pid.parse().unwrap();
        }
    };
    // Drain the log on a thread so the run never blocks on a full pipe.
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        for l in lines.map_while(Result::ok) {
            rest.push_str(&l);
            rest.push('\n');
        }
        rest
    });
    // Wait for the first checkpoint (step 500), then a little more.
    let checkpoints = out.join("checkpoints");
    let deadline = Instant::now() + Duration::from_secs(300);
    while std::fs::read_dir(&checkpoints).map_or(true, |d| d.count() == 0) {
        assert!(Instant::now() < deadline, "no checkpoint after 300 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let killed = Instant::now();
    // SAFETY: kill(2) on the pid of a child process of the run, with SIGKILL.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if killed.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the run did not end within 30 s of the kill");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = killed.elapsed();
    let rest = drain.join().unwrap();
    println!(
        "the run ended {:.2} s after rank {victim} was killed",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(10), "{took:?}\n{log}{rest}");
    assert!(!status.success(), "{status:?}");
    assert_no_panic(&rest);
    let m = manifest(&out);
    let st = m["status"].as_str().unwrap();
    assert!(
        st.starts_with(&format!(
            "failed: rank {victim} (cuda:{victim}, pid {pid}) exited"
        )),
        "{st}"
    );
    // No rank is left behind (rank 0 is the reaped `vpm run`, the others were reaped by it).
    let ranks = m["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), gpus, "{m}");
    for r in ranks {
        let p = r["pid"].as_u64().unwrap() as i32;
        // SAFETY: signal 0 only checks whether the process exists.
        let alive = unsafe { libc::kill(p, 0) } == 0;
        assert!(!alive, "rank {} (pid {p}) is still alive", r["rank"]);
    }
    // The checkpoint is intact: resume finishes the run (on all GPUs again).
    let o = vpm()
        .args(["resume", s(&out), "--device", "cuda:all"])
        .output()
        .unwrap();
    assert_ok(&o, "resume after the kill");
    assert_eq!(manifest(&out)["status"], "finished");
}
