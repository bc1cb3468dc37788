//! `vpm bench step`: the whole vortex step as a run takes it, on the device given (the GPU-
//! resident stepper with a GPU, the host-driven one on the CPU): milliseconds per step
//! (evaluation + update), per reinitialisation and per output step, the phases, host↔device
//! bytes per step, device memory, and the relative L2 error of velocity and stretching against
//! the CPU f64 Ewald evaluator (the direct sum for `--evaluator fmm`, in free space) on a sample
//! of particles.
//!
//! The particles are those of a decaying-turbulence run: the isotropic field of `hit-64`
//! (kp = 4, u0 = 1, seed 1, |k| ≤ min(12, n/2 − 1)) on the n³ lattice, σ0 = overlap·h, strengths
//! by the exact RBF solve with the default conditioning; ν = 1.28/n ([`bench_viscosity`]: the
//! named cases' family), classical stretching, Δt from
//! the stability limits at CFL 0.5 (docs/physics.md §3.4), fixed for the benchmark.
//! Times are wall clock: each step ends synchronised with the GPU (its finite check reads a flag
//! back), so a step's time is what a run sees; the phases are device times (CUDA events) on a
//! GPU. Medians over the timed steps after warm-up.

use super::{finish_report, fmt_error, median, print_header, SampleCheck};
use crate::config::{InitialCondition, VortexConfig};
use crate::device::Device;
use crate::diagnostics::{flow_stats, shell_spectrum};
use crate::init::initial_modes;
use crate::kernel::StretchingScheme;
use crate::spectral::ModeLayout;
use crate::summation::direct::DirectFreeSpace;
use crate::summation::ewald::EwaldPeriodic;
use crate::summation::{
    planner, Boundary, Evaluation, EvaluatorKind, Extra, Request, Sources, Summation,
};
use crate::vortex::field::{grid_kmax, particles_from_modes};
use crate::vortex::planner::plan;
use crate::vortex::stepper::{ParticleStepper, TransferBytes};
use crate::vortex::{RbfSolver, VortexSettings};
use anyhow::{Context, Result};
use serde::Serialize;
use std::f64::consts::TAU;
use std::path::Path;
use std::time::Instant;

/// What `vpm bench step` measures besides the sizes.
#[derive(Debug, Clone)]
pub struct StepBenchOptions {
    pub overlaps: Vec<f64>,
    pub evaluator: EvaluatorKind,
    pub accuracy: f64,
    /// Timed steps per size (after the warm-up).
    pub steps: usize,
    /// Warm-up steps; with reinitialisation at least `reinit_every + 1`, so that one
    /// reinitialisation (and its cuFFT plans) is made before timing.
    pub warmup: usize,
    pub reinit_every: u64,
    /// How reinitialisation solves for the strengths.
    pub rbf: RbfSolver,
    /// Particles checked against the CPU f64 evaluator (0: none).
    pub sample: usize,
    /// Timed output steps.
    pub outputs: usize,
}

/// One row of `vpm bench step`.
#[derive(Debug, Clone, Serialize)]
pub struct StepBenchRow {
    pub lattice: usize,
    pub particles: usize,
    pub overlap: f64,
    pub stepper: String,
    pub dt: f64,
    /// Median wall milliseconds of a step without reinitialisation (evaluation + update).
    pub ms_step: f64,
    /// Median wall milliseconds of a reinitialisation (blob vorticity at the lattice nodes and
    /// the RBF solve; the step that ends with it costs ms_step + ms_reinit).
    pub ms_reinit: f64,
    /// Mean wall milliseconds over all timed steps: reinitialisations and the Heun steps after
    /// them (two evaluations) included, i.e. the cost of a step over a run.
    pub ms_step_amortised: f64,
    pub reinit_every: u64,
    /// Median wall milliseconds of the particle side of an output step: velocity at the n³
    /// grid nodes, its transform, K/Z/ε, E(k), max |∇·u| (on the device with a GPU) and the
    /// particle summary.
    pub ms_output: f64,
    /// Median milliseconds per step of each phase (steps without reinitialisation).
    pub ms_evaluation: f64,
    pub ms_update: f64,
    /// Median milliseconds of the two parts of a reinitialisation.
    pub ms_reinit_vorticity: f64,
    pub ms_reinit_solve: f64,
    #[serde(flatten)]
    pub device: DeviceUse,
    /// Velocity and stretching at the state after the output steps against the CPU f64 Ewald
    /// evaluator in the box, the direct sum for the FMM (not checked for all pairs).
    #[serde(flatten)]
    pub check: SampleCheck,
    pub timed_steps: usize,
}

/// What the stepper moves between host and device and takes on the device (null on the CPU).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DeviceUse {
    /// Bytes between host and device per step (timed steps, reinitialisations included), and
    /// per output step.
    pub bytes_per_step: Option<f64>,
    pub bytes_per_output: Option<f64>,
    /// Device memory taken by the stepper, its evaluator and plans (free memory before it was
    /// made minus the least free memory seen while it ran), bytes.
    pub device_memory_bytes: Option<u64>,
}

/// ν of the benchmark on an n³ lattice: 1.28/n, the family of the named isotropic cases
/// (hit-64-compare 0.02, hit-128-compare 0.01, sc09-hit-256-compare 0.005), so that the cores
/// grow between reinitialisations as much, relative to h, as in those runs.
pub fn bench_viscosity(n: usize) -> f64 {
    1.28 / n as f64
}

/// The benchmark's particles on the n³ lattice (module docs).
fn turbulence_particles(n: usize, overlap: f64) -> Result<crate::particles::ParticleSet> {
    let ic = InitialCondition::Isotropic {
        kp: 4.0,
        u0: 1.0,
        seed: 1,
        k_cut: 12.0f64.min(grid_kmax(n) as f64),
    };
    let layout = ModeLayout::new(grid_kmax(n));
    let modes = initial_modes(&ic, &layout)?;
    let (p, _) = particles_from_modes(
        &layout,
        &modes,
        n,
        overlap,
        RbfSolver::DEFAULT,
        VortexConfig::DEFAULT_CONDITIONING,
    );
    Ok(p)
}

fn free_memory(device: &Device) -> Option<u64> {
    device
        .gpu()
        .and_then(|g| g.free_memory().ok())
        .map(|b| b as u64)
}

/// Runs the benchmark for each lattice size and overlap.
pub fn bench_step(
    device: &Device,
    lattice: &[usize],
    o: &StepBenchOptions,
    json: Option<&Path>,
) -> Result<Vec<StepBenchRow>> {
    crate::out!(
        "vpm bench step: {} on {}; {} evaluator, accuracy {:e}; {} timed steps after {} warm-up, \
         reinitialisation every {} (rbf = {}); wall clock, steps synchronised; accuracy vs CPU f64 Ewald on \
         {} particles ({} CPU threads)",
        if device.gpu().is_some() {
            "GPU-resident stepper"
        } else {
            "host stepper"
        },
        device.label(),
        o.evaluator,
        o.accuracy,
        o.steps,
        o.warmup,
        o.reinit_every,
        o.rbf.as_str(),
        o.sample,
        rayon::current_num_threads()
    );
    print_header("n|particles|overlap|ms step|ms reinit|ms amort.|ms output|ms eval|ms upd|B/step|dev GB|err vel|err str", &[5, 9, 7, 9, 9, 10, 9, 8, 8, 10, 8, 9, 9]);
    let mut rows = Vec::new();
    for &n in lattice {
        for &overlap in &o.overlaps {
            let row = bench_one(device, n, overlap, o)
                .with_context(|| format!("n = {n}, overlap {overlap}"))?;
            crate::out!(
                "{:>5} {:>9} {:>7} {:>9.2} {:>9.2} {:>10.2} {:>9.2} {:>8.2} {:>8.2} {:>10} {:>8} {:>9} {:>9}",
                n,
                row.particles,
                overlap,
                row.ms_step,
                row.ms_reinit,
                row.ms_step_amortised,
                row.ms_output,
                row.ms_evaluation,
                row.ms_update,
                row.device
                    .bytes_per_step
                    .map_or("-".into(), |b| format!("{b:.0}")),
                row.device
                    .device_memory_bytes
                    .map_or("-".into(), |b| format!("{:.2}", b as f64 / 1e9)),
                fmt_error(row.check.rel_l2_velocity),
                fmt_error(row.check.rel_l2_stretching)
            );
            crate::out!(
                "      reinit: vorticity {:.2} ms, solve {:.2} ms; output {:.0} B; {}",
                row.ms_reinit_vorticity,
                row.ms_reinit_solve,
                row.device.bytes_per_output.unwrap_or(0.0),
                row.stepper
            );
            rows.push(row);
        }
    }
    let gpu = device.gpu().map(|g| g.info().clone());
    finish_report(
        json,
        serde_json::json!({
            "benchmark": "step",
            "device": device.label(),
            "gpu": gpu,
            "evaluator": o.evaluator.as_str(),
            "accuracy": o.accuracy,
            "timing": "wall clock per synchronised step, median of the timed steps after warm-up",
        }),
        rows,
    )
}

fn bench_one(
    device: &Device,
    n: usize,
    overlap: f64,
    o: &StepBenchOptions,
) -> Result<StepBenchRow> {
    let particles = turbulence_particles(n, overlap)?;
    let np = particles.len();
    let boundary = match o.evaluator {
        EvaluatorKind::Ewald | EvaluatorKind::Auto => Boundary::Periodic { length: TAU },
        EvaluatorKind::Direct | EvaluatorKind::Fmm => Boundary::FreeSpace,
    };
    let periodic = matches!(boundary, Boundary::Periodic { .. });
    let settings = VortexSettings {
        nu: bench_viscosity(n),
        scheme: StretchingScheme::Classical,
        reinit_every: periodic.then_some(o.reinit_every),
        lattice_n: n,
        sigma0: overlap * TAU / n as f64,
        rbf: o.rbf,
        conditioning: VortexConfig::DEFAULT_CONDITIONING,
        zero_total_strength: true,
    };
    let free_before = free_memory(device);
    let mut least_free = free_before;
    let note_free = |least: &mut Option<u64>| {
        if let (Some(l), Some(f)) = (*least, free_memory(device)) {
            *least = Some(l.min(f));
        }
    };
    let evaluator = planner::plan(boundary, o.evaluator, device, o.accuracy)?;
    let mut s: Box<dyn ParticleStepper> = plan(particles, evaluator, settings, device)?;
    let dt = s.stable_dt(0.5)?;
    // The warm-up includes a reinitialisation, so the timed ones do not pay for cuFFT plans.
    let warmup = if periodic {
        o.warmup.max(o.reinit_every as usize + 1)
    } else {
        o.warmup
    };
    for _ in 0..warmup {
        s.step(dt)?;
    }
    note_free(&mut least_free);
    s.take_timings();
    let bytes0 = s.transfer_bytes();
    let mut all = Vec::new();
    let mut plain = Vec::new();
    let mut eval = Vec::new();
    let mut update = Vec::new();
    let mut reinit = Vec::new();
    let mut reinit_w = Vec::new();
    let mut reinit_s = Vec::new();
    for _ in 0..o.steps {
        let t = Instant::now();
        s.step(dt)?;
        let wall = t.elapsed().as_secs_f64() * 1e3;
        all.push(wall);
        let ph = s.take_timings();
        let r = (ph.reinit_vorticity + ph.reinit_solve) * 1e3;
        if r > 0.0 {
            reinit.push(r);
            reinit_w.push(ph.reinit_vorticity * 1e3);
            reinit_s.push(ph.reinit_solve * 1e3);
        } else {
            plain.push(wall);
            eval.push(ph.evaluation * 1e3);
            update.push(ph.update * 1e3);
        }
    }
    note_free(&mut least_free);
    let bytes1 = s.transfer_bytes();
    // Output steps: the particle side of the diagnostics.
    let mut outputs = Vec::new();
    for _ in 0..o.outputs.max(1) {
        let t = Instant::now();
        // As a run does it: on the device when the stepper can, else on the host.
        let (st, sp) = match s.grid_diagnostics(n, bench_viscosity(n))? {
            Some(d) => (d.stats, d.spectrum),
            None => {
                let (layout, modes) = s.velocity_modes_on_grid(n)?;
                (
                    flow_stats(&layout, &modes, bench_viscosity(n)),
                    shell_spectrum(&layout, &modes),
                )
            }
        };
        let sum = s.summary()?;
        std::hint::black_box((st, sp, sum));
        outputs.push(t.elapsed().as_secs_f64() * 1e3);
    }
    note_free(&mut least_free);
    let bytes2 = s.transfer_bytes();
    // Accuracy of the derivatives at the current state on a sample, against the CPU f64 Ewald
    // evaluator in the box and the direct sum for the FMM (none for all pairs).
    let mut reference: Option<Box<dyn Summation>> = match o.evaluator {
        EvaluatorKind::Ewald | EvaluatorKind::Auto => {
            Some(Box::new(EwaldPeriodic::new(o.accuracy)))
        }
        EvaluatorKind::Fmm => Some(Box::new(DirectFreeSpace)),
        EvaluatorKind::Direct => None,
    };
    let (velocity, stretching) = s.derivatives()?;
    let p = s.particles()?.clone();
    let out = Evaluation {
        velocity,
        stretching,
        gradient: Vec::new(),
    };
    let (check, _) = SampleCheck::run(
        &out,
        reference.as_mut().map(|r| r.as_mut() as &mut dyn Summation),
        Request {
            sources: &Sources::of(&p),
            targets: &p.x,
            extra: Extra::Stretching {
                alpha: &p.alpha,
                scheme: StretchingScheme::Classical,
            },
        },
        (o.sample, 0x5e7 ^ n as u64),
    )?;
    let med = |v: Vec<f64>| if v.is_empty() { f64::NAN } else { median(v) };
    let ms_step = med(plain);
    let ms_reinit = med(reinit);
    // Bytes moved between two snapshots of the stepper's traffic, per one of `count` steps.
    let moved = |a: Option<TransferBytes>, b: Option<TransferBytes>, count: usize| {
        Some((b?.total() - a?.total()) as f64 / count.max(1) as f64)
    };
    Ok(StepBenchRow {
        lattice: n,
        particles: np,
        overlap,
        stepper: s.describe(),
        dt,
        ms_step,
        ms_reinit,
        ms_step_amortised: all.iter().sum::<f64>() / all.len().max(1) as f64,
        reinit_every: o.reinit_every,
        ms_output: med(outputs),
        ms_evaluation: med(eval),
        ms_update: med(update),
        ms_reinit_vorticity: med(reinit_w),
        ms_reinit_solve: med(reinit_s),
        device: DeviceUse {
            bytes_per_step: moved(bytes0, bytes1, o.steps),
            bytes_per_output: moved(bytes1, bytes2, o.outputs),
            device_memory_bytes: free_before
                .zip(least_free)
                .map(|(a, b)| a.saturating_sub(b)),
        },
        check,
        timed_steps: o.steps,
    })
}
