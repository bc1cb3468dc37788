//! `vpm bench spectral`: RK4 steps and 3-D transforms of the pseudo-spectral solver, on the CPU
//! or (`--device cuda`) the GPU, where it also times the device diagnostics and reports memory.

use super::{cpu_banner, finish_report, median, print_header};
use crate::config::InitialCondition;
use crate::device::Device;
use crate::init::initial_modes;
use crate::spectral::gpu::TransformKind;
use crate::spectral::Dealias;
use crate::spectral::{Fft3d, GpuSpectralSolver, SpectralGrid, SpectralSolver, VectorModes};
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// The field every spectral benchmark steps: fresh random input, an isotropic field with a
/// new seed for each grid size.
fn bench_field(grid: &SpectralGrid) -> Result<VectorModes> {
    let ic = InitialCondition::Isotropic {
        kp: 4.0,
        u0: 1.0,
        seed: 0x5eed ^ grid.n as u64,
        k_cut: (grid.kmax() as f64).min(12.0),
    };
    Ok(initial_modes(&ic, &grid.layout())?)
}

/// One row of `vpm bench spectral`.
#[derive(Debug, Clone, Serialize)]
pub struct SpectralBenchRow {
    pub n: usize,
    pub dealias: String,
    /// Points per dimension of the product grid (3N/2 or N).
    pub product_grid: usize,
    /// Median milliseconds of one RK4 step (four right-hand sides, 36 3-D transforms).
    pub ms_per_rk4_step: f64,
    /// Median milliseconds of one 3-D transform (mean of an inverse and a forward) on the
    /// product grid.
    pub ms_per_transform: f64,
    pub repeats: usize,
}
/// Times RK4 steps and 3-D transforms for each (N, dealiasing).
pub fn bench_spectral(
    sizes: &[usize],
    rules: &[Dealias],
    repeats: usize,
    json: Option<&Path>,
) -> Result<Vec<SpectralBenchRow>> {
    cpu_banner("vpm bench spectral", repeats);
    print_header(
        "N|dealias|grid|ms / RK4 step|ms / 3-D transform",
        &[6, 7, 8, 16, 18],
    );
    let mut rows = Vec::new();
    for &n in sizes {
        for &rule in rules {
            let grid = SpectralGrid::new(n, rule);
            let mut solver = SpectralSolver::new(grid, 0.01);
            solver.set_velocity_modes(bench_field(&grid)?);
            let dt = 1e-3;
            solver.step(dt)?; // warm-up: plans, scratch, page faults
            let mut step_ms = Vec::new();
            for _ in 0..repeats.max(1) {
                let t = Instant::now();
                solver.step(dt)?;
                step_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let m = grid.product_grid();
            let mut fft = Fft3d::new(m, grid.layout());
            let modes = solver.velocity_modes()[0].clone();
            let mut phys = vec![0.0; m * m * m];
            let mut back = modes.clone();
            fft.inverse(&modes, &mut phys);
            fft.forward(&mut phys, &mut back);
            let mut tr_ms = Vec::new();
            for _ in 0..repeats.max(1) {
                let t = Instant::now();
                fft.inverse(&modes, &mut phys);
                fft.forward(&mut phys, &mut back);
                tr_ms.push(t.elapsed().as_secs_f64() * 1e3 / 2.0);
            }
            let row = SpectralBenchRow {
                n,
                dealias: rule.as_str().to_string(),
                product_grid: m,
                ms_per_rk4_step: median(step_ms),
                ms_per_transform: median(tr_ms),
                repeats,
            };
            crate::out!(
                "{:>6} {:>7} {:>8} {:>16.1} {:>18.2}",
                row.n,
                row.dealias,
                row.product_grid,
                row.ms_per_rk4_step,
                row.ms_per_transform
            );
            rows.push(row);
        }
    }
    finish_report(json, serde_json::json!({ "benchmark": "spectral" }), rows)
}

/// One row of `vpm bench spectral --device cuda`.
#[derive(Debug, Clone, Serialize)]
pub struct SpectralGpuBenchRow {
    pub n: usize,
    pub dealias: String,
    /// Points per dimension of the product grid (3N/2 or N).
    pub product_grid: usize,
    /// `pruned` or `full` (src/spectral/gpu.rs).
    pub transforms: String,
    /// Median milliseconds of one RK4 step (CUDA events, from the first launch to the finite
    /// flag on the host).
    pub ms_per_rk4_step: f64,
    /// Median milliseconds of the step's 36 transforms alone.
    pub ms_transforms_per_step: f64,
    /// ms_transforms_per_step / ms_per_rk4_step.
    pub fft_share: f64,
    /// Device memory the solver holds (its buffers and cuFFT's work areas).
    pub resident_bytes: u64,
    /// Device memory used during the run as the driver saw it (free memory before the solver
    /// was made minus the least free memory seen after its steps and diagnostics).
    pub peak_device_bytes: u64,
    /// The run's estimate (`GpuSpectralSolver::device_bytes`).
    pub estimate_bytes: u64,
    /// Milliseconds of one output step's diagnostics (K, Z, ε, dK/dt, E(k), max |∇·u|),
    /// reduced on the device.
    pub ms_diagnostics: f64,
    pub repeats: usize,
}

/// Times the GPU solver's RK4 steps, their transforms, its diagnostics and memory for each (N,
/// dealiasing, transform kind), on an isotropic field with a fresh seed per size.
pub fn bench_spectral_gpu(
    device: &Device,
    sizes: &[usize],
    rules: &[Dealias],
    kinds: &[TransformKind],
    repeats: usize,
    json: Option<&Path>,
) -> Result<Vec<SpectralGpuBenchRow>> {
    let gpu = device
        .gpu()
        .context("vpm bench spectral --device cuda needs a GPU")?;
    crate::out!(
        "vpm bench spectral: {} (f64), median of {repeats} after warm-up, CUDA events",
        device.describe()
    );
    print_header(
        "N|dealias|grid|plan|ms / RK4 step|ms cuFFT/step|share|peak GB|est. GB|ms diagnost.",
        &[6, 7, 6, 7, 14, 14, 6, 10, 10, 12],
    );
    let mut rows = Vec::new();
    for &n in sizes {
        for &rule in rules {
            for &kind in kinds {
                let grid = SpectralGrid::new(n, rule);
                let free0 = gpu.free_memory()?;
                let mut least = free0;
                let mut solver = GpuSpectralSolver::with_transforms(gpu.clone(), grid, 0.01, kind)?;
                solver.set_velocity_modes(bench_field(&grid)?)?;
                let dt = 1e-3;
                let steps = solver.time_steps(dt, repeats)?;
                least = least.min(gpu.free_memory()?);
                let fft = solver.time_transforms(repeats)?;
                // The diagnostics of a new state each time (they are kept per state); the
                // first call is the warm-up.
                let mut diag_s = Vec::new();
                for _ in 0..=repeats.max(1) {
                    solver.step(dt)?;
                    // The first right-hand side of the next step (needed for dK/dt) is the
                    // step's, not the diagnostics'.
                    solver.speed_sum_max()?;
                    let t = Instant::now();
                    solver.flow_stats()?;
                    solver.shell_spectrum()?;
                    solver.dkdt_from_rhs()?;
                    solver.max_divergence()?;
                    diag_s.push(t.elapsed().as_secs_f64());
                }
                diag_s.remove(0);
                let diag = median(diag_s);
                least = least.min(gpu.free_memory()?);
                let step_ms = median(steps);
                let row = SpectralGpuBenchRow {
                    n,
                    dealias: rule.as_str().to_string(),
                    product_grid: grid.product_grid(),
                    transforms: kind.as_str().to_string(),
                    ms_per_rk4_step: step_ms,
                    ms_transforms_per_step: fft,
                    fft_share: fft / step_ms,
                    resident_bytes: solver.resident_bytes(),
                    peak_device_bytes: (free0 - least) as u64,
                    estimate_bytes: GpuSpectralSolver::device_bytes(grid),
                    ms_diagnostics: diag * 1e3,
                    repeats,
                };
                crate::out!(
                    "{:>6} {:>7} {:>6} {:>7} {:>14.2} {:>14.2} {:>6.2} {:>10.2} {:>10.2} {:>12.2}",
                    row.n,
                    row.dealias,
                    row.product_grid,
                    row.transforms,
                    row.ms_per_rk4_step,
                    row.ms_transforms_per_step,
                    row.fft_share,
                    row.peak_device_bytes as f64 / 1e9,
                    row.estimate_bytes as f64 / 1e9,
                    row.ms_diagnostics
                );
                rows.push(row);
            }
        }
    }
    let info = gpu.info();
    finish_report(
        json,
        serde_json::json!({
            "benchmark": "spectral",
            "device": device.label(),
            "gpu": info.to_string(),
        }),
        rows,
    )
}

/// One row of `vpm bench spectral --device cuda:all` (several GPUs, one process each).
#[derive(Debug, Clone, Serialize)]
pub struct SpectralGroupBenchRow {
    pub n: usize,
    pub dealias: String,
    /// Points per dimension of the product grid (3N/2 or N).
    pub product_grid: usize,
    pub gpus: usize,
    /// Median milliseconds of one RK4 step across the GPUs (CUDA events on rank 0's stream,
    /// after a barrier, to the reduced finite flag on the host); `None` when it does not fit.
    pub ms_per_rk4_step: Option<f64>,
    /// The same with every transpose between the transforms, all fields of a pass in one
    /// group (the step above transposes `DEFAULT_EXCHANGE_CHUNK` fields at a time beside the
    /// transforms of the next ones).
    pub ms_per_rk4_step_serial: Option<f64>,
    /// (fields per transpose, median ms per step) for 0 (serial), 1, 2 and 3.
    pub ms_per_rk4_step_by_chunk: Vec<(usize, f64)>,
    /// Median milliseconds of a one-field transpose alone (both directions averaged).
    pub ms_transpose_1: Option<f64>,
    /// The same for the one-GPU solver on rank 0's GPU; `None` when it does not fit one GPU.
    pub ms_one_gpu: Option<f64>,
    /// ms_one_gpu / (gpus · ms_per_rk4_step).
    pub strong_scaling_efficiency: Option<f64>,
    /// Median milliseconds of one all-to-all transpose of the 6 fields of an inverse pass and
    /// of the 3 of a forward pass, timed alone.
    pub ms_transpose_6: Option<f64>,
    pub ms_transpose_3: Option<f64>,
    /// Bytes each rank sends to the others in the 6-field transpose.
    pub transpose_bytes_per_rank: Option<u64>,
    /// transpose_bytes_per_rank / ms_transpose_6: NCCL's bus bandwidth of the all-to-all.
    pub transpose_gb_per_s: Option<f64>,
    /// 4 · (ms_transpose_6 + ms_transpose_3): the step's transposes alone, the communication
    /// floor of a step.
    pub ms_transposes_per_step: Option<f64>,
    /// The run's per-GPU estimate (`SlabRank::device_bytes`) and the one-GPU solver's.
    pub estimate_bytes_per_gpu: u64,
    pub estimate_bytes_one_gpu: u64,
    /// The largest peak device memory of ranks 1.. (total − free, sampled after each command;
    /// rank 0's GPU also ran the one-GPU baselines).
    pub peak_bytes_per_gpu: Option<u64>,
    /// Why a part was not measured.
    pub note: String,
    pub repeats: usize,
}

/// Times the spectral solver across the GPUs of `device` (a group) against the one-GPU solver
/// on rank 0's GPU, for each (N, dealiasing): the step, the transposes alone and memory.
pub fn bench_spectral_group(
    device: &Device,
    sizes: &[usize],
    rules: &[Dealias],
    repeats: usize,
    json: Option<&Path>,
) -> Result<Vec<SpectralGroupBenchRow>> {
    use crate::spectral::distributed::{check_split, DistributedSpectralSolver};
    use crate::spectral::gpu_slab::DEFAULT_EXCHANGE_CHUNK;
    use crate::spectral::SpectralStepper;
    let group = device
        .group()
        .context("vpm bench spectral across GPUs needs a group such as --device cuda:all")?
        .clone();
    let gpu = group.gpu().clone();
    let p = group.ranks();
    crate::out!(
        "vpm bench spectral: {} (f64, one process per GPU, NCCL), median of {repeats} after \
         warm-up, CUDA events",
        device.describe()
    );
    print_header(
        "N|dealias|grid|GPUs|ms / step|serial ms|1 GPU ms|effic.|ms tr. 6|ms tr. 3|GB/s|ms tr./step|est. GB/GPU|peak GB",
        &[6, 7, 6, 5, 10, 10, 10, 7, 9, 9, 7, 12, 12, 8],
    );
    let dt = 1e-3;
    let gb = |b: u64| b as f64 / 1e9;
    let mut rows = Vec::new();
    for &n in sizes {
        for &rule in rules {
            let grid = SpectralGrid::new(n, rule);
            let est_p = DistributedSpectralSolver::device_bytes(grid, p);
            let est_1 = GpuSpectralSolver::device_bytes(grid);
            let mut notes = Vec::new();
            let mut row = SpectralGroupBenchRow {
                n,
                dealias: rule.as_str().to_string(),
                product_grid: grid.product_grid(),
                gpus: p,
                ms_per_rk4_step: None,
                ms_per_rk4_step_serial: None,
                ms_per_rk4_step_by_chunk: Vec::new(),
                ms_transpose_1: None,
                ms_one_gpu: None,
                strong_scaling_efficiency: None,
                ms_transpose_6: None,
                ms_transpose_3: None,
                transpose_bytes_per_rank: None,
                transpose_gb_per_s: None,
                ms_transposes_per_step: None,
                estimate_bytes_per_gpu: est_p,
                estimate_bytes_one_gpu: est_1,
                peak_bytes_per_gpu: None,
                note: String::new(),
                repeats,
            };
            // The ranks' free memory when they joined, and rank 0's now (the one-GPU baselines
            // of earlier rows may have left memory in the driver's pool there).
            let least = group
                .least_free_memory()
                .unwrap_or(u64::MAX)
                .min(gpu.free_memory()? as u64);
            if let Err(why) = check_split(grid, p) {
                notes.push(why);
            } else if est_p > least {
                notes.push(format!(
                    "{p} GPUs: need {:.1} GB each, {:.1} GB free",
                    gb(est_p),
                    gb(least)
                ));
            } else {
                group.reset_peaks();
                let mut solver = DistributedSpectralSolver::new(group.clone(), grid, 0.01)?;
                solver.set_velocity_modes(bench_field(&grid)?)?;
                // The transposes alone first: the communication floor of a step.
                let (t6, bytes) = solver.time_transpose(6, repeats)?;
                let (t3, _) = solver.time_transpose(3, repeats)?;
                row.ms_transpose_1 = Some(solver.time_transpose(1, repeats)?.0);
                // Each way of queuing the transposes on the same run of states (the state
                // advances; the step's cost does not depend on it).
                for chunk in [0, 1, 2, 3] {
                    solver.set_exchange_chunk(chunk)?;
                    let ms = median(solver.time_steps(dt, repeats)?);
                    row.ms_per_rk4_step_by_chunk.push((chunk, ms));
                }
                solver.set_exchange_chunk(DEFAULT_EXCHANGE_CHUNK)?;
                let by = |c: usize| {
                    row.ms_per_rk4_step_by_chunk
                        .iter()
                        .find(|(k, _)| *k == c)
                        .map(|(_, ms)| *ms)
                };
                row.ms_per_rk4_step_serial = by(0);
                row.ms_per_rk4_step = by(DEFAULT_EXCHANGE_CHUNK);
                row.ms_transpose_6 = Some(t6);
                row.ms_transpose_3 = Some(t3);
                row.transpose_bytes_per_rank = Some(bytes);
                row.transpose_gb_per_s = Some(bytes as f64 / (t6 * 1e6));
                row.ms_transposes_per_step = Some(4.0 * (t6 + t3));
                // Ranks 1.. hold the group's solver alone; rank 0's GPU also keeps what the
                // one-GPU baselines of earlier rows left in the driver's memory pool.
                let records = solver.rank_records();
                let workers = if records.len() > 1 {
                    &records[1..]
                } else {
                    &records[..]
                };
                row.peak_bytes_per_gpu = workers
                    .iter()
                    .filter_map(|r| r.peak_device_memory_bytes)
                    .max();
            }
            // The one-GPU baseline after the group's solver is gone (so that rank 0's peak is
            // the group's), on rank 0's GPU, when the memory model says it fits.
            let free = gpu.free_memory()? as u64;
            let ms_one_gpu = if est_1 <= free {
                let mut one = GpuSpectralSolver::new(gpu.clone(), grid, 0.01)?;
                one.set_velocity_modes(bench_field(&grid)?)?;
                Some(median(one.time_steps(dt, repeats)?))
            } else {
                notes.push(format!(
                    "one GPU: needs {:.1} GB, {:.1} GB free",
                    gb(est_1),
                    gb(free)
                ));
                None
            };
            row.ms_one_gpu = ms_one_gpu;
            row.strong_scaling_efficiency = ms_one_gpu
                .zip(row.ms_per_rk4_step)
                .map(|(t1, tp)| t1 / (p as f64 * tp));
            row.note = notes.join("; ");
            let cell = |v: Option<f64>, digits: usize| {
                v.map_or("—".to_string(), |v| format!("{v:.digits$}"))
            };
            crate::out!(
                "{:>6} {:>7} {:>6} {:>5} {:>10} {:>10} {:>10} {:>7} {:>9} {:>9} {:>7} {:>12} {:>12.2} {:>8}",
                row.n,
                row.dealias,
                row.product_grid,
                row.gpus,
                cell(row.ms_per_rk4_step, 2),
                cell(row.ms_per_rk4_step_serial, 2),
                cell(row.ms_one_gpu, 2),
                cell(row.strong_scaling_efficiency, 2),
                cell(row.ms_transpose_6, 3),
                cell(row.ms_transpose_3, 3),
                cell(row.transpose_gb_per_s, 0),
                cell(row.ms_transposes_per_step, 2),
                gb(row.estimate_bytes_per_gpu),
                cell(row.peak_bytes_per_gpu.map(gb), 2),
            );
            if !row.ms_per_rk4_step_by_chunk.is_empty() {
                let each: Vec<String> = row
                    .ms_per_rk4_step_by_chunk
                    .iter()
                    .map(|(c, ms)| format!("{c}: {ms:.2}"))
                    .collect();
                crate::out!(
                    "       ms / step by fields per transpose (0 = serial) {}; one-field \
                     transpose alone {} ms",
                    each.join(", "),
                    cell(row.ms_transpose_1, 3)
                );
            }
            if !row.note.is_empty() {
                crate::out!("       {}", row.note);
            }
            rows.push(row);
        }
    }
    finish_report(
        json,
        serde_json::json!({
            "benchmark": "spectral",
            "device": device.label(),
            "gpus": group.ordinals(),
            "gpu": gpu.info().to_string(),
        }),
        rows,
    )
}
