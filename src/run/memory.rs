//! What a case needs before anything is allocated: memory on the host and on the device,
//! checked against what each has ([`check_fits`]), the disk its outputs take
//! ([`super::disk`]), checked against the run directory's file system ([`check_disk`]), and a
//! rough time per step (`vpm check`).
//!
//! The figures count the large arrays each solver holds (documented per term below), not every
//! small allocation; they are meant to be within a factor of about 1.5 of the peak resident
//! size, which is what decides whether a run can start.

use crate::config::{Case, TimeStep};
use crate::device::{host_memory_available, Device};
use crate::run::plan::RunPlan;
use crate::spectral::{Dealias, SpectralGrid};

use anyhow::{bail, Result};
use std::path::Path;

/// Bytes of one complex f64.
const C64: u64 = 16;
/// Host bytes per particle of the particle stepper: the set (x, α, σ, id: 64 B), the next and
/// Heun-predictor copies (128 B), velocity and stretching now, at the predictor and in the AB2
/// history (144 B). The evaluator's own memory comes from
/// its [`crate::summation::planner::Recipe`] (`memory`).
const HOST_BYTES_PER_PARTICLE: u64 = 336;

/// Memory a case needs, by part.
#[derive(Debug, Clone, Default)]
pub struct MemoryEstimate {
    /// Host bytes per part (name, bytes).
    pub host: Vec<(String, u64)>,
    /// Device bytes per part, when a solver runs on a GPU.
    pub device: Vec<(String, u64)>,
    /// Disk bytes of every file the run writes, per part, at the peak ([`super::disk`]).
    pub disk: Vec<(String, u64)>,
}

impl MemoryEstimate {
    pub fn host_total(&self) -> u64 {
        self.host.iter().map(|(_, b)| b).sum()
    }
    pub fn device_total(&self) -> u64 {
        self.device.iter().map(|(_, b)| b).sum()
    }
    pub fn disk_total(&self) -> u64 {
        self.disk.iter().map(|(_, b)| b).sum()
    }
}

/// Bytes as GiB/MiB for messages.
pub fn human_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    }
}

/// The spectral solver's arrays for grid n with `dealias`: the mixed-space buffers of the
/// product-grid transform (M² (K+1) complex values for the six inputs and three outputs of the
/// rotational form), five vector mode arrays of L retained modes (state, first stage, two stage
/// buffers, accumulator), per-mode |k|², k and the viscous factor, the N³ diagnostic transform
/// (three fields) and the final velocity field on the grid (3 N³ f64).
pub fn spectral_bytes(n: usize, dealias: Dealias) -> u64 {
    let grid = SpectralGrid::new(n, dealias);
    let m = grid.product_grid() as u64;
    let k1 = grid.kmax() as u64 + 1;
    let side = 2 * grid.kmax() as u64 + 1;
    let modes = side * side * k1;
    let n = n as u64;
    let mixed = m * m * k1 * 9 * C64;
    let vectors = modes * (5 * 3 * C64 + 40);
    let diagnostics = n * n * k1 * 3 * C64 + 3 * n * n * n * 8;
    mixed + vectors + diagnostics
}

/// Estimates the memory and disk of a case from its plan (devices, particles, evaluator).
pub fn estimate(case: &Case, plan: &RunPlan) -> Result<MemoryEstimate> {
    let devices = &plan.devices;
    let mut e = MemoryEstimate {
        disk: super::disk::estimate(case, plan.particle_count),
        ..MemoryEstimate::default()
    };
    if let Some(s) = &case.spectral {
        match &devices.spectral {
            Some(Device::Cuda(_)) => {
                let grid = SpectralGrid::new(s.n, s.dealias);
                e.device.push((
                    "spectral solver on the GPU".into(),
                    crate::spectral::GpuSpectralSolver::device_bytes(grid),
                ));
                // The host copy of the modes (and its staging copy) at checkpoints and the
                // final velocity field.
                let modes = grid.layout().len() as u64 * 3 * C64;
                let n3 = (s.n as u64).pow(3);
                e.host
                    .push(("spectral modes on the host".into(), 2 * modes + 6 * n3 * 8));
            }
            Some(Device::Group(group)) => {
                let grid = SpectralGrid::new(s.n, s.dealias);
                e.device.push((
                    format!(
                        "spectral solver across {} GPUs ({}), on each GPU",
                        group.ranks(),
                        group.label()
                    ),
                    crate::spectral::DistributedSpectralSolver::device_bytes(grid, group.ranks()),
                ));
                // Rank 0 gathers the global modes at checkpoints (and its staging copy) and
                // the velocity field on the N³ grid.
                e.host.push((
                    "spectral modes gathered on rank 0's host".into(),
                    2 * grid.layout().len() as u64 * 3 * C64 + 6 * (s.n as u64).pow(3) * 8,
                ));
            }
            _ => e
                .host
                .push(("spectral solver".into(), spectral_bytes(s.n, s.dealias))),
        }
    }
    if let Some(s) = &case.spectral {
        let o = &case.output;
        let solvers = 1 + u64::from(case.vortex.is_some());
        if !o.fields_times.is_empty() {
            // grid_fields' arrays, the transform's mixed buffer, the particle velocity at the
            // nodes, the largest npz array being written and the pictures' copy of Q and
            // vorticity of both solvers (f32).
            let n3 = (s.n as u64).pow(3);
            let kept = n3 / (o.fields_stride as u64).pow(3);
            let mixed = (s.n as u64).pow(2) * (s.n as u64 / 2) * C64;
            let node_velocity = (solvers - 1) * 3 * n3 * 8;
            e.host.push((
                "fields on the grid (velocity, vorticity, Q) and pictures".into(),
                crate::diagnostics::structures::grid_fields_bytes(s.n)
                    + mixed
                    + node_velocity
                    + 3 * kept * o.fields_precision.bytes()
                    + solvers * 4 * kept * 4,
            ));
        }
    }
    if let (Some(vc), Some(recipe)) = (&case.vortex, &plan.evaluator) {
        let device = recipe.device();
        let np = plan.particle_count;
        e.host.push((
            format!("{np} particles"),
            np as u64 * HOST_BYTES_PER_PARTICLE,
        ));
        let lattice = vc.reinit_lattices();
        if let Some((n, m)) = lattice {
            // Blob vorticity sampled on the m³ lattice, its three complex spectra, the band's
            // on the n³ lattice and the strengths.
            let (n3, m3) = ((n as u64).pow(3), (m as u64).pow(3));
            let bytes = m3 * (3 * C64 + 24) + if m == n { 0 } else { n3 * (3 * C64 + 24) };
            e.host.push(("reinitialisation lattice".into(), bytes));
        }
        if let Some(s) = &case.spectral {
            // The particle velocity at the N³ nodes and its modes, for the shared diagnostics.
            let nodes = (s.n as u64).pow(3);
            e.host
                .push(("particle diagnostics grid".into(), nodes * 48));
        }
        let ev = recipe.memory;
        let what = format!("{} evaluator on {}", vc.evaluator, device.label());
        if ev.host > 0 {
            e.host.push((what.clone(), ev.host));
        }
        if ev.device > 0 {
            e.device.push((what, ev.device));
        }
        if let Device::Cuda(_) = device {
            // The GPU-resident stepper: particle state, history, derivatives, lattice and
            // RBF spectra, grid nodes for the diagnostics (src/vortex/resident.rs).
            e.device.push((
                "particles resident on the GPU".into(),
                crate::vortex::resident::device_bytes(
                    np,
                    lattice,
                    case.spectral.as_ref().map(|s| s.n),
                ),
            ));
        }
    }
    if let (Some(_), Some(device)) = (&case.gravity, &plan.devices.gravity) {
        let n = plan.particle_count as u64;
        let fmm = plan
            .gravity_method
            .as_ref()
            .is_some_and(|c| c.method == crate::summation::EvaluatorKind::Fmm);
        let (host, gpu) = crate::gravity::planner::memory_bytes(n, fmm, device);
        e.host.push((format!("{n} bodies and their forces"), host));
        if gpu > 0 {
            e.device
                .push((format!("{n} bodies resident on the GPU"), gpu));
        }
    }
    Ok(e)
}

/// Refuses, before anything is allocated, a case whose estimate exceeds the memory the host
/// (the smaller of available memory and the cgroup limit) or the GPU (free memory from the
/// driver) has, naming both figures.
pub fn check_fits(case: &Case, plan: &RunPlan) -> Result<()> {
    let e = estimate(case, plan)?;
    if let Some(avail) = host_memory_available() {
        let need = e.host_total();
        if need > avail {
            bail!(
                "case `{}` needs about {} of host memory ({}), but {} is available (the smaller \
                 of MemAvailable and the cgroup limit); reduce spectral.n or vortex.n",
                case.name,
                human_bytes(need),
                parts(&e.host),
                human_bytes(avail)
            );
        }
    }
    // Both solvers' device parts are counted against the first GPU of the run (they share one
    // unless the case puts them on different GPUs, where this is conservative).
    let gpu = [&plan.devices.spectral, &plan.devices.vortex]
        .into_iter()
        .flatten()
        .find(|d| d.is_cuda());
    if let Some(device) = gpu {
        let need = e.device_total();
        if let Some(free) = device.memory_available() {
            if need > free {
                bail!(
                    "case `{}` needs about {} of GPU memory ({}), but {} has {} free",
                    case.name,
                    human_bytes(need),
                    parts(&e.device),
                    device.label(),
                    human_bytes(free)
                );
            }
        }
    }
    Ok(())
}

/// Refuses a new run whose outputs ([`MemoryEstimate::disk`]) would not fit in the space left
/// on the file system of `run_dir` (or of its nearest existing ancestor, for a run directory
/// not made yet), naming both figures. Where the free space cannot be read, nothing is refused.
pub fn check_disk(case: &Case, plan: &RunPlan, run_dir: &Path) -> Result<()> {
    let e = estimate(case, plan)?;
    let need = e.disk_total();
    if let Some(free) = disk_space_for(run_dir) {
        if need > free {
            bail!(
                "case `{}` writes about {} ({}), but {} has {} free; choose another --out, \
                 fewer output.fields_times, a larger output.fields_stride or fewer particle \
                 snapshots",
                case.name,
                human_bytes(need),
                parts(&e.disk),
                run_dir.display(),
                human_bytes(free)
            );
        }
    }
    Ok(())
}

/// The free space (bytes) of the file system a run directory `run_dir` is or would be on: that
/// of its nearest existing ancestor; `None` where it cannot be read.
pub fn disk_space_for(run_dir: &Path) -> Option<u64> {
    let existing = run_dir
        .ancestors()
        .find(|p| p.exists())
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    crate::device::disk_space_available(existing)
}

fn parts(p: &[(String, u64)]) -> String {
    p.iter()
        .map(|(k, b)| format!("{k}: {}", human_bytes(*b)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Seconds per RK4 step of the spectral solver per M³·log2 M on one thread (measured: 128³ on 2
/// threads, docs/performance.md: 158 ms with 2/3, 671 ms with 3/2).
const SPECTRAL_SECONDS_PER_UNIT: f64 = 2.4e-8;
/// The same on a GPU (the 256³ RK4 step with the 3/2 rule, M = 384: 53 ms on an H100,
/// docs/performance.md).
const GPU_SPECTRAL_SECONDS_PER_UNIT: f64 = 1.1e-10;
/// A rough run-time estimate from the plan: the spectral solver on its device (the CPU with
/// `threads` threads, or a GPU at the H100's measured rate), the particle evaluator at its
/// recipe's time per evaluation (`vpm bench` measures both): (seconds per step, steps when Δt
/// is fixed or `time.max_steps` bounds them).
pub fn rough_time(case: &Case, plan: &RunPlan, threads: usize) -> Result<(f64, Option<u64>)> {
    let mut per_step = 0.0;
    if let Some(s) = &case.spectral {
        let m = SpectralGrid::new(s.n, s.dealias).product_grid() as f64;
        let work = m.powi(3) * m.log2();
        per_step += match &plan.devices.spectral {
            Some(Device::Cuda(_)) => GPU_SPECTRAL_SECONDS_PER_UNIT * work,
            // Ideal scaling over the GPUs; the transposes add to it.
            Some(Device::Group(g)) => GPU_SPECTRAL_SECONDS_PER_UNIT * work / g.ranks() as f64,
            _ => SPECTRAL_SECONDS_PER_UNIT * work / threads.max(1) as f64,
        };
    }
    if let (Some(vc), Some(recipe)) = (&case.vortex, &plan.evaluator) {
        // One evaluation per step (AB2), plus about half an evaluation's worth for the
        // reinitialisation every few steps.
        let evals = 1.0 + vc.reinit_every.map_or(0.0, |k| 2.0 / k as f64);
        per_step += evals * recipe.seconds_per_evaluation(threads);
    }
    if let Some(choice) = &plan.gravity_method {
        // One force evaluation per leapfrog step.
        per_step += choice.seconds;
    }
    let steps = match case.time.step {
        TimeStep::Fixed { dt } => Some((case.time.t_end / dt).ceil() as u64),
        TimeStep::Cfl { .. } => None,
    };
    // time.max_steps stops the run earlier.
    let steps = match (steps, case.time.max_steps) {
        (Some(n), Some(m)) => Some(n.min(m)),
        (None, m) => m,
        (n, None) => n,
    };
    Ok((per_step, steps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spectral_estimate_grows_as_n_cubed() {
        let a = spectral_bytes(64, Dealias::ThreeHalves) as f64;
        let b = spectral_bytes(128, Dealias::ThreeHalves) as f64;
        assert!((b / a - 8.0).abs() < 0.5, "{}", b / a);
        // 2048³ with the 3/2 rule needs terabytes.
        assert!(spectral_bytes(2048, Dealias::ThreeHalves) > 1u64 << 40);
        assert!(spectral_bytes(64, Dealias::TwoThirds) < spectral_bytes(64, Dealias::ThreeHalves));
    }
}
