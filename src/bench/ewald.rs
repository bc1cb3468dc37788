//! `vpm bench ewald`: the periodic Ewald evaluator on the device given (`--device`): the CPU
//! (f64, rayon, wall-clock medians) or a GPU (f32 sums, CUDA events, with an accuracy check
//! against the CPU f64 evaluator on a random sample of particles).

use super::{
    cpu_banner, finish_report, fmt_error, median, print_header, time_velocity_and_stretching,
    SampleCheck,
};
use crate::device::cuda::Gpu;
use crate::device::Device;
use crate::kernel::StretchingScheme;
use crate::summation::ewald::engine::GpuEwaldTimings;
use crate::summation::ewald::{CudaEwald, EwaldPeriodic};
use crate::summation::verify::Particles;
use crate::summation::{Evaluation, Extra, Summation};
use anyhow::Result;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The benchmark's particles on the n³ lattice: σ = h, random zero-sum strengths, a seed per
/// size (the same on both devices).
fn lattice_particles(n: usize) -> Particles {
    Particles::lattice(n, 0.0, 0xe3a1d ^ n as u64)
}

/// Rows of `vpm bench ewald` on either device.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum EwaldBenchRows {
    Cpu(Vec<EwaldBenchRow>),
    Gpu(Vec<EwaldGpuBenchRow>),
}

/// Times the Ewald evaluator of `device` on n³ lattices (see the CPU and GPU variants below).
/// `sample`: GPU only, particles checked against the CPU f64 evaluator (0: none).
pub fn bench_ewald(
    device: &Device,
    lattice: &[usize],
    accuracy: f64,
    repeats: usize,
    sample: usize,
    json: Option<&Path>,
) -> Result<EwaldBenchRows> {
    Ok(match device.gpu() {
        None => EwaldBenchRows::Cpu(bench_ewald_cpu(lattice, accuracy, repeats, json)?),
        Some(gpu) => EwaldBenchRows::Gpu(bench_ewald_gpu(
            gpu, lattice, accuracy, repeats, sample, json,
        )?),
    })
}

/// One row of `vpm bench ewald`.
#[derive(Debug, Clone, Serialize)]
pub struct EwaldBenchRow {
    /// Particles (an n^3 lattice).
    pub particles: usize,
    pub accuracy: f64,
    pub seconds_velocity: f64,
    pub seconds_velocity_stretching: f64,
    /// Particles per second (targets = sources), velocity only.
    pub particles_per_second_velocity: f64,
    /// Particles per second, velocity + stretching.
    pub particles_per_second_velocity_stretching: f64,
    pub parameters: String,
    pub repeats: usize,
}

/// Times the CPU periodic Ewald evaluator on lattice particles (σ = h, random zero-sum
/// strengths, fresh for each size: [`Particles::lattice`]): the layout of a vortex run in the box.
fn bench_ewald_cpu(
    lattice: &[usize],
    accuracy: f64,
    repeats: usize,
    json: Option<&Path>,
) -> Result<Vec<EwaldBenchRow>> {
    cpu_banner(
        &format!("vpm bench ewald (CPU, f64, accuracy {accuracy:e})"),
        repeats,
    );
    print_header(
        "particles|M|window|w|s velocity|particles/s vel|s vel+str|particles/s vel+str",
        &[10, 5, 6, 3, 12, 16, 12, 18],
    );
    let mut rows = Vec::new();
    for &n in lattice {
        let p = lattice_particles(n);
        let np = p.x.len() as f64;
        let mut ew = EwaldPeriodic::new(accuracy);
        let (tv, ts) = time_velocity_and_stretching(&mut ew, &p, repeats)?;
        let row = EwaldBenchRow {
            particles: p.x.len(),
            accuracy,
            seconds_velocity: tv,
            seconds_velocity_stretching: ts,
            particles_per_second_velocity: np / tv,
            particles_per_second_velocity_stretching: np / ts,
            parameters: ew.parameters().map_or(String::new(), |p| p.to_string()),
            repeats,
        };
        let (grid, support) = ew.parameters().map_or((0, 0), |p| (p.grid, p.support));
        crate::out!(
            "{:>10} {:>5} {:>6} {:>3} {:>12.4} {:>16.3e} {:>12.4} {:>18.3e}",
            row.particles,
            grid,
            WINDOW,
            support,
            tv,
            row.particles_per_second_velocity,
            ts,
            row.particles_per_second_velocity_stretching
        );
        rows.push(row);
    }
    finish_report(json, serde_json::json!({ "benchmark": "ewald" }), rows)
}

/// The window of the mesh part, as the tables print it (src/summation/ewald/window.rs).
const WINDOW: &str = "KB";

/// The accuracy of the CPU f64 reference of the GPU rows: a hundredth of the request (at least
/// 1e-12), so that the check measures the GPU's delivered error to within 1 %.
fn reference_accuracy(accuracy: f64) -> f64 {
    (0.01 * accuracy).max(1e-12)
}

/// One row of `vpm bench ewald --device cuda`.
#[derive(Debug, Clone, Serialize)]
pub struct EwaldGpuBenchRow {
    /// Particles (an n^3 lattice).
    pub particles: usize,
    pub accuracy: f64,
    /// Median device milliseconds of one velocity evaluation (CUDA events from the first upload
    /// to the end of the download: everything the trait call does on the GPU).
    pub ms_velocity: f64,
    /// The same for velocity + classical stretching.
    pub ms_velocity_stretching: f64,
    /// Median wall-clock milliseconds of the trait call (host work and checks included).
    pub wall_ms_velocity: f64,
    pub wall_ms_velocity_stretching: f64,
    /// Particles per second (targets = sources) from the device times.
    pub particles_per_second_velocity: f64,
    pub particles_per_second_velocity_stretching: f64,
    /// Device milliseconds per phase of the median velocity + stretching evaluation.
    pub phases_velocity_stretching: GpuEwaldTimings,
    /// Against the CPU f64 evaluator (at a hundredth of the accuracy: the delivered error) on a
    /// random sample of the particles.
    #[serde(flatten)]
    pub check: SampleCheck,
    pub parameters: String,
    pub repeats: usize,
}

/// Times the GPU periodic Ewald evaluator on `gpu` on lattice particles (σ = h, random zero-sum
/// strengths, fresh for each size; the layout of `vpm bench ewald` on the CPU), velocity and
/// velocity + classical stretching, CUDA events, median of `repeats` after one warm-up. Accuracy
/// against the CPU f64 evaluator on a random sample of `sample` particles (0: not checked).
fn bench_ewald_gpu(
    gpu: &Arc<Gpu>,
    lattice: &[usize],
    accuracy: f64,
    repeats: usize,
    sample: usize,
    json: Option<&Path>,
) -> Result<Vec<EwaldGpuBenchRow>> {
    let mut ew = CudaEwald::new(gpu.clone(), accuracy)?;
    let info = ew.device().gpu().info().clone();
    crate::out!(
        "vpm bench ewald (GPU, f32, accuracy {accuracy:e}): {info}; CUDA events, median of \
         {repeats} after warm-up; accuracy vs CPU f64 on {sample} particles ({} CPU threads)",
        rayon::current_num_threads()
    );
    print_header(
        "particles|M|window|w|ms vel|particles/s|ms v+s|particles/s v+s|err vel|err str",
        &[10, 5, 6, 3, 9, 14, 9, 16, 10, 10],
    );
    let mut rows = Vec::new();
    for &n in lattice {
        let p = lattice_particles(n);
        let (x, alpha, src) = (&p.x, &p.alpha, p.sources());
        let np = x.len() as f64;
        let stretching = Extra::Stretching {
            alpha,
            scheme: StretchingScheme::Classical,
        };
        let mut out = Evaluation::default();
        let mut time = |extra: Extra| -> Result<(f64, f64, GpuEwaldTimings)> {
            ew.evaluate(&src, x, extra, &mut out)?; // warm-up: compile, plans, buffers
            let mut runs = Vec::with_capacity(repeats.max(1));
            for _ in 0..repeats.max(1) {
                let t = Instant::now();
                ew.evaluate(&src, x, extra, &mut out)?;
                let wall = t.elapsed().as_secs_f64() * 1e3;
                let phases = ew.timings();
                runs.push((phases.total_ms(), wall, phases));
            }
            runs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let walls = median(runs.iter().map(|r| r.1).collect());
            let mid = runs[runs.len() / 2];
            Ok((mid.0, walls, mid.2))
        };
        let (tv, wv, _) = time(Extra::None)?;
        let (ts, ws, phases) = time(stretching)?;
        let params = ew.parameters().map_or(String::new(), |p| p.to_string());
        let (grid, support) = ew.parameters().map_or((0, 0), |p| (p.grid, p.support));
        // Accuracy on a random sample of the particles (the output of the last timed call).
        let seed = 0x5a3b1e ^ n as u64;
        let mut reference = EwaldPeriodic::new(reference_accuracy(accuracy));
        let (check, _) = SampleCheck::of_particles(&out, &mut reference, &p, (sample, seed))?;
        let row = EwaldGpuBenchRow {
            particles: x.len(),
            accuracy,
            ms_velocity: tv,
            ms_velocity_stretching: ts,
            wall_ms_velocity: wv,
            wall_ms_velocity_stretching: ws,
            particles_per_second_velocity: np / (tv * 1e-3),
            particles_per_second_velocity_stretching: np / (ts * 1e-3),
            phases_velocity_stretching: phases,
            check,
            parameters: params,
            repeats,
        };
        crate::out!(
            "{:>10} {:>5} {:>6} {:>3} {:>9.2} {:>14.3e} {:>9.2} {:>16.3e} {:>10} {:>10}",
            row.particles,
            grid,
            WINDOW,
            support,
            tv,
            row.particles_per_second_velocity,
            ts,
            row.particles_per_second_velocity_stretching,
            fmt_error(check.rel_l2_velocity),
            fmt_error(check.rel_l2_stretching)
        );
        crate::out!(
            "           v+s phases (ms): upload {:.2}, sort+spread {:.2}, FFTs {:.2}, gather {:.2}, \
             real space {:.2}, download {:.2}; wall {:.1} ms (vel {:.1} ms); {}",
            phases.upload_ms,
            phases.spread_ms,
            phases.transforms_ms,
            phases.gather_ms,
            phases.real_space_ms,
            phases.download_ms,
            ws,
            wv,
            row.parameters
        );
        rows.push(row);
    }
    finish_report(
        json,
        serde_json::json!({
            "benchmark": "ewald",
            "device": format!("cuda:{}", info.ordinal),
            "gpu": info,
            "precision": "f32 sums, f64 inputs and outputs",
            "timing": "CUDA events from the first upload to the end of the download, median \
                       after one warm-up",
        }),
        rows,
    )
}
