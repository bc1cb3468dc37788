//! `vpm bench direct`: the all-pairs evaluators. Biot–Savart on the CPU (here; on a GPU it is
//! `vpm bench kernel`'s table) and Plummer gravity on a GPU ([`bench_direct_gravity`]).

use super::kernel::{dump_modules, report_resources};
use super::{
    cpu_banner, finish_report, fmt_error, median, print_header, time_velocity_and_stretching,
};
use crate::device::cuda::Gpu;
use crate::summation::direct::cuda_gravity::reference_gravity;
use crate::summation::direct::{CudaDirectGravity, DirectFreeSpace, DirectGravity, KernelConfig};
use crate::summation::interaction::{Bodies, GravityEvaluation, GravitySummation, PlummerGravity};
use crate::summation::verify::{self, ErrorStats, Particles};
use anyhow::Result;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One row of `vpm bench direct`.
#[derive(Debug, Clone, Serialize)]
pub struct DirectBenchRow {
    pub n: usize,
    /// Median seconds of one all-pairs velocity evaluation (n targets, n sources).
    pub seconds_velocity: f64,
    /// Median seconds of one velocity + classical stretching evaluation.
    pub seconds_velocity_stretching: f64,
    /// Pair interactions per second, velocity only.
    pub interactions_per_second_velocity: f64,
    /// Pair interactions per second, velocity + stretching.
    pub interactions_per_second_velocity_stretching: f64,
    pub repeats: usize,
}

/// Times the CPU all-pairs evaluator on n particles uniform in [−π, π]^3 with σ = 2π/n^{1/3} and
/// random strengths (fresh for each size: [`Particles::free_space`]).
pub fn bench_direct(
    sizes: &[usize],
    repeats: usize,
    json: Option<&Path>,
) -> Result<Vec<DirectBenchRow>> {
    cpu_banner("vpm bench direct (CPU, f64)", repeats);
    print_header(
        "N|s velocity|pairs/s velocity|s vel+str|pairs/s vel+str",
        &[9, 12, 16, 12, 18],
    );
    let mut rows = Vec::new();
    for &n in sizes {
        let p = Particles::free_space(n, 0xbe7c ^ n as u64);
        let (tv, ts) = time_velocity_and_stretching(&mut DirectFreeSpace, &p, repeats)?;
        let pairs = (n * n) as f64;
        let row = DirectBenchRow {
            n,
            seconds_velocity: tv,
            seconds_velocity_stretching: ts,
            interactions_per_second_velocity: pairs / tv,
            interactions_per_second_velocity_stretching: pairs / ts,
            repeats,
        };
        crate::out!(
            "{:>9} {:>12.4} {:>16.3e} {:>12.4} {:>18.3e}",
            n,
            tv,
            row.interactions_per_second_velocity,
            ts,
            row.interactions_per_second_velocity_stretching
        );
        rows.push(row);
    }
    finish_report(json, serde_json::json!({ "benchmark": "direct" }), rows)
}

/// Flops per gravitational interaction in GPU Gems 3's accounting (docs/physics.md §10).
pub const GRAVITY_FLOPS_PER_INTERACTION: f64 = 20.0;

/// What `vpm bench direct --interaction gravity --device cuda` runs.
#[derive(Debug, Clone)]
pub struct GravityBenchOptions {
    /// The Plummer softening ε (0: the self pairs are skipped).
    pub softening: f64,
    pub repeats: usize,
    /// Targets checked against the f64 CPU sum per size (0: not checked).
    pub sample: usize,
    /// Launch configurations to compare (empty: [`KernelConfig::GRAVITY`]).
    pub configs: Vec<KernelConfig>,
    /// Tuning: write the compiled cubins and NVRTC logs here.
    pub dump: Option<PathBuf>,
}

/// One row of `vpm bench direct --interaction gravity --device cuda`.
#[derive(Debug, Clone, Serialize)]
pub struct GravityBenchRow {
    pub n: usize,
    /// Launch configuration (BLOCKxTARGETSxUNROLLxMINBLOCKS).
    pub config: String,
    /// Median milliseconds of one all-pairs evaluation of φ and a at the n bodies from the n
    /// bodies, CUDA events around the kernel launches.
    pub ms: f64,
    /// N² / time (GPU Gems 3's convention: the self pairs count).
    pub interactions_per_second: f64,
    /// At 20 flops an interaction.
    pub gflops: f64,
    /// φ against the f64 CPU sum on the sampled targets (relative L2; largest error over the
    /// rms value), or null when not checked.
    pub error_potential: Option<ErrorStats>,
    /// The same for a.
    pub error_acceleration: Option<ErrorStats>,
    /// Targets in the accuracy sample (0: not checked).
    pub accuracy_sample: usize,
    pub repeats: usize,
}

/// `n` bodies uniform in [−π, π]³ with masses uniform in [0.5, 1.5]/n (fresh for each seed).
pub fn uniform_bodies(n: usize, seed: u64) -> (Vec<[f64; 3]>, Vec<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let x = verify::random_points(n, seed ^ 0x6772_6176);
    let mass = (0..n)
        .map(|_| rng.random_range(0.5..1.5) / n as f64)
        .collect();
    (x, mass)
}

/// `vpm bench direct --interaction gravity` on the CPU: the f64 all-pairs sum
/// ([`DirectGravity`], rayon) of `sizes` uniform bodies with the given softening; interactions
/// per second (N² over the median time), the same rows as the GPU table (the CPU f64 sum is the
/// reference, so no error columns).
pub fn bench_direct_gravity_cpu(
    sizes: &[usize],
    softening: f64,
    repeats: usize,
    json: Option<&Path>,
) -> Result<Vec<GravityBenchRow>> {
    let gravity = PlummerGravity::new(softening)?;
    cpu_banner(
        &format!("vpm bench direct (CPU all-pairs gravity, f64, softening {softening})"),
        repeats,
    );
    print_header("N|s|interactions/s|GFLOP/s", &[9, 10, 15, 9]);
    let mut rows = Vec::new();
    let mut engine = DirectGravity::new(gravity);
    let mut out = GravityEvaluation::default();
    for &n in sizes {
        let (x, mass) = uniform_bodies(n, 0x6772_6176 ^ n as u64);
        let bodies = Bodies { x: &x, mass: &mass };
        let s =
            super::median_seconds(repeats, || engine.evaluate_gravity(&bodies, None, &mut out))?;
        let per_s = (n as f64) * (n as f64) / s;
        let row = GravityBenchRow {
            n,
            config: "cpu f64".into(),
            ms: s * 1e3,
            interactions_per_second: per_s,
            gflops: per_s * GRAVITY_FLOPS_PER_INTERACTION / 1e9,
            error_potential: None,
            error_acceleration: None,
            accuracy_sample: 0,
            repeats,
        };
        crate::out!("{:>9} {:>10.4} {:>15.3e} {:>9.2}", n, s, per_s, row.gflops);
        rows.push(row);
    }
    let mut header = gravity_header(
        "cpu",
        "f64",
        softening,
        "wall clock, median after one warm-up",
    );
    header["cpu"] = super::cpu_model().into();
    header["threads"] = rayon::current_num_threads().into();
    finish_report(json, header, rows)
}

/// The JSON header both gravity all-pairs benchmarks write: what was timed and on what bodies.
fn gravity_header(
    device: &str,
    precision: &str,
    softening: f64,
    timing: &str,
) -> serde_json::Value {
    serde_json::json!({
        "benchmark": "direct",
        "interaction": "gravity",
        "device": device,
        "precision": precision,
        "softening": softening,
        "bodies": "uniform in [-pi, pi]^3, masses uniform in [0.5, 1.5]/N; targets = bodies",
        "timing": timing,
        "flops_per_interaction": GRAVITY_FLOPS_PER_INTERACTION,
    })
}

/// Times the GPU all-pairs gravity kernels (f32) on `gpu` on n bodies at themselves
/// ([`uniform_bodies`], fresh for each size), for each launch configuration, with the potential
/// and acceleration checked against the f64 CPU sum on a random sample of the bodies.
pub fn bench_direct_gravity(
    gpu: &Arc<Gpu>,
    sizes: &[usize],
    options: &GravityBenchOptions,
    json: Option<&Path>,
) -> Result<Vec<GravityBenchRow>> {
    let gravity = PlummerGravity::new(options.softening)?;
    let info = gpu.info().clone();
    let configs = match options.configs.is_empty() {
        true => vec![KernelConfig::GRAVITY],
        false => options.configs.clone(),
    };
    let mut engines = Vec::new();
    for &c in &configs {
        engines.push(CudaDirectGravity::with_config(gpu.clone(), gravity, c)?);
    }
    let (repeats, sample) = (options.repeats, options.sample);
    crate::out!(
        "vpm bench direct (GPU all-pairs gravity, f32, softening {}): {info}; CUDA events, \
         median of {repeats} after warm-up; accuracy vs CPU f64 on {sample} targets ({} CPU \
         threads)",
        options.softening,
        rayon::current_num_threads()
    );
    let mut resources = Vec::new();
    for e in &engines {
        resources.push(report_resources(e.config(), &e.resources()?));
    }
    if let Some(dir) = &options.dump {
        dump_modules(gpu, dir)?;
    }
    print_header(
        "N|config|ms|interactions/s|GFLOP/s|relL2 phi|max phi|relL2 a|max a",
        &[9, 14, 10, 15, 9, 10, 10, 10, 10],
    );
    let mut rows = Vec::new();
    let mut out = GravityEvaluation::default();
    for &n in sizes {
        let (x, mass) = uniform_bodies(n, 0x6772_6176 ^ n as u64);
        let bodies = Bodies { x: &x, mass: &mass };
        // The accuracy sample: random bodies, the f64 reference at them only (the same for
        // every configuration).
        let idx = verify::sample(n, sample, 0x5a3b1e ^ n as u64);
        let at: Vec<[f64; 3]> = idx.iter().map(|&i| x[i]).collect();
        let reference = (!idx.is_empty()).then(|| reference_gravity(&gravity, &bodies, &at));
        for e in engines.iter_mut() {
            e.upload(&bodies, None)?;
            let ms = median(e.time_launches(repeats)?);
            e.output(&mut out);
            let (ep, ea) = match &reference {
                Some(r) => {
                    let phi = |v: &[f64], i: usize| [v[i]];
                    let gp: Vec<[f64; 1]> = idx.iter().map(|&i| phi(&out.potential, i)).collect();
                    let rp: Vec<[f64; 1]> = (0..idx.len()).map(|k| phi(&r.potential, k)).collect();
                    let ga: Vec<[f64; 3]> = idx.iter().map(|&i| out.acceleration[i]).collect();
                    (
                        Some(ErrorStats::of(&gp, &rp)),
                        Some(ErrorStats::of(&ga, &r.acceleration)),
                    )
                }
                None => (None, None),
            };
            let per_s = (n as f64) * (n as f64) / (ms * 1e-3);
            let row = GravityBenchRow {
                n,
                config: e.config().to_string(),
                ms,
                interactions_per_second: per_s,
                gflops: per_s * GRAVITY_FLOPS_PER_INTERACTION / 1e9,
                error_potential: ep,
                error_acceleration: ea,
                accuracy_sample: idx.len(),
                repeats,
            };
            crate::out!(
                "{:>9} {:>14} {:>10.3} {:>15.3e} {:>9.0} {:>10} {:>10} {:>10} {:>10}",
                n,
                row.config,
                ms,
                per_s,
                row.gflops,
                fmt_error(ep.map(|e| e.rel_l2)),
                fmt_error(ep.map(|e| e.max_rel)),
                fmt_error(ea.map(|e| e.rel_l2)),
                fmt_error(ea.map(|e| e.max_rel))
            );
            rows.push(row);
        }
    }
    let timing = "CUDA events around the kernel launches, median after one warm-up; outputs \
                  poisoned before each launch and checked fully written";
    let mut header = gravity_header("cuda", "f32", options.softening, timing);
    header["gpu"] = serde_json::json!(info);
    header["resources"] = serde_json::json!(resources);
    finish_report(json, header, rows)
}
