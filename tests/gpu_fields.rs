//! Fields and pictures of a run whose solvers live on the GPU (the spectral modes and the
//! resident particles are pulled only at `output.fields_times`) against the same run on the
//! CPU. Skips with a printed reason without a GPU.

mod common;

use common::quiet_run_options;
use std::fs;
use std::path::{Path, PathBuf};
use vpm::config::Case;
use vpm::summation::verify::gpu_or_skip;

/// Taylor–Green by both solvers at 32³ (particles on a 32³ lattice, Ewald), fields at t = 0
/// and t_end.
fn case(device: &str) -> Case {
    let text = format!(
        "name = \"tg-fields\"\ndevice = \"{device}\"\n\
         [flow]\nnu = 0.02\n[initial]\nkind = \"taylor-green\"\n\
         [time]\nt_end = 0.4\ndt = 0.02\n\
         [output]\nevery_time = 0.2\nfields_times = [0.0, 0.4]\n\
         [checkpoint]\nevery_time = 0.4\n[spectral]\nn = 32\n\
         [vortex]\noverlap = 0.75\nreinit_every = 5\nrbf = \"exact\"\naccuracy = 1e-5\n"
    );
    Case::from_toml_str(&text, "tg-fields.toml").unwrap()
}

fn run(device: &str, dir: &Path) -> PathBuf {
    let out = dir.join(device);
    fs::create_dir_all(&out).unwrap();
    let mut run = vpm::run::start(case(device), &out, quiet_run_options(), None).expect("start");
    run.run_to_end().expect("run");
    out
}

/// Q and vorticity of a fields npz, f32 values as f64, flat.
fn read(path: &Path) -> (Vec<f64>, Vec<f64>) {
    let mut npz = ndarray_npy::NpzReader::new(fs::File::open(path).unwrap()).unwrap();
    let q: ndarray::Array3<f32> = npz.by_name("Q").unwrap();
    let w: ndarray::Array4<f32> = npz.by_name("vorticity").unwrap();
    (
        q.iter().map(|&x| f64::from(x)).collect(),
        w.iter().map(|&x| f64::from(x)).collect(),
    )
}

/// ‖a − b‖ / ‖b‖.
fn rel_l2(a: &[f64], b: &[f64]) -> f64 {
    let d: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    let n: f64 = b.iter().map(|y| y * y).sum();
    (d / n).sqrt()
}

#[test]
fn fields_on_the_gpu_match_the_cpu_run() {
    if gpu_or_skip().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gpu = run("cuda", dir.path());
    let cpu = run("cpu", dir.path());
    for (solver, tol) in [("spectral", 1e-6), ("vortex", 1e-3)] {
        for step in [0, 20] {
            let name = format!("fields/{solver}-{step:08}.npz");
            let (qg, wg) = read(&gpu.join(&name));
            let (qc, wc) = read(&cpu.join(&name));
            let (eq, ew) = (rel_l2(&qg, &qc), rel_l2(&wg, &wc));
            println!("{name}: Q {eq:.2e}, vorticity {ew:.2e} (GPU against CPU, relative L2)");
            assert!(
                eq < tol && ew < tol,
                "{name}: Q {eq:e}, ω {ew:e} (allowed {tol:e})"
            );
        }
    }
    for p in ["structures-00000020.png", "vorticity-00000020.png"] {
        assert!(gpu.join(p).is_file(), "{p} missing on the GPU run");
    }
}
