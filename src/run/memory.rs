//! What a case needs before anything is allocated: memory on the host and on the device,
//! checked against what each has ([`check_fits`]), the disk its outputs take, checked against
//! the run directory's file system ([`check_disk`]), and a rough time per step (`vpm check`).
//!
//! The figures count the large arrays each solver holds (documented per term below), not every
//! small allocation; they are meant to be within a factor of about 1.5 of the peak resident
//! size, which is what decides whether a run can start.

use crate::config::{Case, TimeStep};
use crate::device::{host_memory_available, Device};
use crate::run::RunDevices;
use crate::spectral::{Dealias, SpectralGrid};
use crate::summation::{planner, Boundary};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// Bytes of one complex f64.
const C64: u64 = 16;
/// Host bytes per particle of the particle stepper: the set (x, α, σ, id: 64 B), the next and
/// Heun-predictor copies (128 B), velocity and stretching now, at the predictor and in the AB2
/// history (144 B). The evaluator's own memory comes from
/// [`crate::summation::planner::estimate_bytes`].
const HOST_BYTES_PER_PARTICLE: u64 = 336;

/// Memory a case needs, by part.
#[derive(Debug, Clone, Default)]
pub struct MemoryEstimate {
    /// Host bytes per part (name, bytes).
    pub host: Vec<(String, u64)>,
    /// Device bytes per part, when a solver runs on a GPU.
    pub device: Vec<(String, u64)>,
    /// Disk bytes of the run's large outputs per part: fields, final field, checkpoints (CSV
    /// logs, pictures and particle snapshots are small or not counted).
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

/// The number of particles a case starts with.
pub fn particle_count(case: &Case) -> Result<usize> {
    match &case.vortex {
        None => Ok(0),
        Some(vc) if !case.initial.is_particle_defined() => Ok(vc.n.pow(3)),
        Some(_) => Ok(crate::run::particles::initial_particles(case)?.len()),
    }
}

/// Estimates the memory of a case whose solvers run on `devices`.
pub fn estimate(case: &Case, devices: &RunDevices) -> Result<MemoryEstimate> {
    let mut e = MemoryEstimate::default();
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
            e.disk.push((
                format!(
                    "fields at {} times, {} solver(s), {}",
                    o.fields_times.len(),
                    solvers,
                    o.fields_precision
                ),
                o.fields_times.len() as u64
                    * solvers
                    * crate::output::fields_disk_bytes(s.n, o.fields_stride, o.fields_precision),
            ));
        }
        e.disk
            .push(("final field".into(), 3 * (s.n as u64).pow(3) * 8));
    }
    let keep = case.checkpoint.keep as u64 + 1;
    let mut checkpoint = 0;
    if let Some(s) = &case.spectral {
        checkpoint += SpectralGrid::new(s.n, s.dealias).layout().len() as u64 * 3 * C64;
    }
    if case.vortex.is_some() {
        // x, α, σ, id and the AB2 history of velocity and stretching.
        checkpoint += particle_count(case)? as u64 * 14 * 8;
    }
    e.disk.push((
        format!("checkpoints (up to {keep} at once)"),
        keep * checkpoint,
    ));
    if let (Some(vc), Some(device)) = (&case.vortex, &devices.vortex) {
        let np = particle_count(case)?;
        e.host.push((
            format!("{np} particles"),
            np as u64 * HOST_BYTES_PER_PARTICLE,
        ));
        let lattice_n = if vc.reinit_every.is_some() { vc.n } else { 0 };
        if lattice_n > 0 {
            // Blob vorticity and the RBF solve on the n³ lattice: three complex fields and a
            // real copy.
            let lattice = (vc.n as u64).pow(3);
            e.host
                .push(("reinitialisation lattice".into(), lattice * (3 * C64 + 24)));
        }
        if let Some(s) = &case.spectral {
            // The particle velocity at the N³ nodes and its modes, for the shared diagnostics.
            let nodes = (s.n as u64).pow(3);
            e.host
                .push(("particle diagnostics grid".into(), nodes * 48));
        }
        let boundary = if case.initial.is_free_space() {
            Boundary::FreeSpace
        } else {
            Boundary::Periodic {
                length: std::f64::consts::TAU,
            }
        };
        let ev = planner::estimate_bytes(
            boundary,
            vc.evaluator,
            device,
            vc.accuracy,
            np,
            vc.sigma0(),
            lattice_n,
        )
        .with_context(|| crate::run::evaluator_context(case, vc, device))?;
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
                    (lattice_n > 0).then_some(lattice_n),
                    case.spectral.as_ref().map(|s| s.n),
                ),
            ));
        }
    }
    Ok(e)
}

/// Refuses, before anything is allocated, a case whose estimate exceeds the memory the host
/// (the smaller of available memory and the cgroup limit) or the GPU (free memory from the
/// driver) has, naming both figures.
pub fn check_fits(case: &Case, devices: &RunDevices) -> Result<()> {
    let e = estimate(case, devices)?;
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
    let gpu = [&devices.spectral, &devices.vortex]
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
pub fn check_disk(case: &Case, devices: &RunDevices, run_dir: &Path) -> Result<()> {
    let e = estimate(case, devices)?;
    let need = e.disk_total();
    let existing = run_dir
        .ancestors()
        .find(|p| p.exists())
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Some(free) = crate::device::disk_space_available(existing) {
        if need > free {
            bail!(
                "case `{}` writes about {} ({}), but {} has {} free; choose another --out, \
                 fewer output.fields_times or a larger output.fields_stride",
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

fn parts(p: &[(String, u64)]) -> String {
    p.iter()
        .map(|(k, b)| format!("{k}: {}", human_bytes(*b)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Seconds per RK4 step of the spectral solver per M³·log2 M on one thread (measured: 128³ on 2
/// threads, docs/performance.md: 158 ms with 2/3, 671 ms with 3/2).
const SPECTRAL_SECONDS_PER_UNIT: f64 = 2.4e-8;
/// Seconds per particle per velocity + stretching evaluation of the CPU Ewald evaluator on one
/// thread (1.4e5 particles/s on 2 threads at accuracy 1e-6, docs/performance.md).
const EWALD_SECONDS_PER_PARTICLE: f64 = 1.4e-5;
/// Seconds per pair of the CPU direct sum on one thread (3.1e7 pairs/s on 2 threads).
const DIRECT_SECONDS_PER_PAIR: f64 = 6.5e-8;

/// Seconds per particle per velocity + stretching evaluation of the CPU FMM on one thread: a
/// near-field part, plus an expansion part that grows like (p+1)⁴ with the order p planned for
/// the accuracy (the M2L translations dominate). Measured with `vpm bench fmm` (AMD EPYC,
/// uniform particles, `verify::Particles::free_space`): at N = 10⁵ on one thread (CPU seconds
/// of the process) 7.4e-5 s at accuracy 1e-3 (p = 6), 1.64e-4 s at 1e-4 (p = 9), 4.35e-4 s at
/// 1e-6 (p = 13); at 1e-4 on two threads 1.12 s for N = 2·10⁴, 8.9 s for 10⁵ and 98.7 s for
/// 10⁶ (2.0e-4 s per particle and thread: the M2L lists grow with the tree's depth). The
/// constants fit the 10⁵ shape scaled up 20 % towards the large runs the FMM is for (8.9e-5,
/// 1.8e-4, 5.2e-4 s at p = 6, 9, 13). Clustered particles (a thin ring) have more near pairs
/// per particle.
const FMM_NEAR_SECONDS_PER_PARTICLE: f64 = 6.0e-5;
/// The expansion part's coefficient of (p+1)⁴ (see [`FMM_NEAR_SECONDS_PER_PARTICLE`]).
const FMM_FAR_SECONDS_PER_PARTICLE_PER_P4: f64 = 1.2e-8;

/// Seconds per particle per velocity + stretching evaluation of the CPU FMM on one thread at
/// `accuracy` (see [`FMM_NEAR_SECONDS_PER_PARTICLE`]).
pub fn fmm_seconds_per_particle(accuracy: f64) -> Result<f64> {
    let p =
        crate::summation::fmm::plan_parameters(accuracy, crate::summation::fmm::FmmBackend::Cpu)?
            .order as f64;
    Ok(FMM_NEAR_SECONDS_PER_PARTICLE + FMM_FAR_SECONDS_PER_PARTICLE_PER_P4 * (p + 1.0).powi(4))
}

/// A rough run-time estimate on the CPU with `threads` threads (the GPU is much faster for the
/// particles; `vpm bench` measures both): (seconds per step, steps when Δt is fixed or
/// `time.max_steps` bounds them).
pub fn rough_cpu_time(case: &Case, threads: usize) -> Result<(f64, Option<u64>)> {
    let threads = threads.max(1) as f64;
    let mut per_step = 0.0;
    if let Some(s) = &case.spectral {
        let m = SpectralGrid::new(s.n, s.dealias).product_grid() as f64;
        per_step += SPECTRAL_SECONDS_PER_UNIT * m.powi(3) * m.log2() / threads;
    }
    if let Some(vc) = &case.vortex {
        let np = particle_count(case)? as f64;
        // One evaluation per step (AB2), plus about half an evaluation's worth for the
        // reinitialisation every few steps.
        let evals = 1.0 + vc.reinit_every.map_or(0.0, |k| 2.0 / k as f64);
        per_step += evals
            * match vc.evaluator {
                crate::summation::EvaluatorKind::Direct => DIRECT_SECONDS_PER_PAIR * np * np,
                crate::summation::EvaluatorKind::Ewald => EWALD_SECONDS_PER_PARTICLE * np,
                crate::summation::EvaluatorKind::Fmm => fmm_seconds_per_particle(vc.accuracy)? * np,
            }
            / threads;
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

    #[test]
    fn fmm_time_grows_with_the_accuracy_asked_for() {
        let coarse = fmm_seconds_per_particle(1e-3).unwrap();
        let fine = fmm_seconds_per_particle(1e-6).unwrap();
        assert!(coarse > FMM_NEAR_SECONDS_PER_PARTICLE && fine > 2.0 * coarse);
        assert!(fmm_seconds_per_particle(1e-11).is_err());
    }
}
