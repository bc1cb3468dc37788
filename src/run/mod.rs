//! Running a case: one run core for every kind of flow.
//!
//! - [`simulation::Simulation`] owns the clock, lands Δt on events, runs the output writers,
//!   snapshots and checkpoints on their schedules ([`schedule`], [`callbacks`]), stops on a
//!   failed step or a signal with the last good state on disk, resumes from a checkpoint and
//!   keeps the manifest.
//! - A [`model::Model`] holds the state and the physics: [`field::FieldModel`] for flows given as
//!   a velocity field (the spectral solver, with the vortex particles alongside in lockstep) and
//!   [`particles::ParticleModel`] for flows given by particles (ring, tube).
//! - [`memory`] estimates what a case needs before anything is allocated; [`start`] refuses a
//!   case that does not fit.

pub mod callbacks;
pub mod field;
pub mod memory;
pub mod model;
pub mod particles;
pub mod plan;
pub mod progress;
pub mod schedule;
pub mod simulation;

use crate::config::Case;
use crate::output::{write_particle_snapshot, ParticleSnapshot, RunLock};
use crate::particles::ParticleSet;
use crate::summation::planner::Recipe;
use crate::vortex::stepper::ParticleStepper;
use crate::vortex::VortexSettings;
use anyhow::{Context, Result};
pub use plan::{RunDevices, RunPlan};
use simulation::{ResumeChanges, Run, Simulation};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressStyle {
    /// An indicatif bar (for a terminal).
    Bar,
    /// Plain progress lines (for logs and pipes).
    Lines,
    /// Nothing.
    Quiet,
}

/// Options of a run that are not part of the case.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub threads: usize,
    pub progress: ProgressStyle,
    /// For tests of kill-and-resume: stop abruptly (no final outputs) after this many steps of
    /// this process, as a killed process would.
    pub abort_after_steps: Option<u64>,
}

/// How [`simulation::Simulation::run_to_end`] ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// t_end reached; final outputs and plots written.
    Finished,
    /// SIGINT or SIGTERM: stopped after a checkpoint (`vpm resume` continues).
    Interrupted,
    /// Stopped by `abort_after_steps` (tests only).
    Aborted,
}

/// The settings of a case's pictures (the structures' isosurface level).
pub fn plot_options(case: &Case) -> postprocess::PlotOptions {
    postprocess::PlotOptions {
        q_level: case.output.structures_level,
        ..Default::default()
    }
}

/// Starts the run the case calls for (field- or particle-defined) in an existing, empty run
/// directory, after checking that its memory fits. `lock` is the run directory's lock when the
/// caller took it while creating the directory ([`crate::output::create_locked_run_dir`]);
/// otherwise it is taken here.
pub fn start(
    case: Case,
    run_dir: &Path,
    options: RunOptions,
    prepared: Option<Prepared>,
) -> Result<Box<dyn Run>> {
    let Prepared { plan, lock } = match prepared {
        Some(p) => p,
        None => Prepared::new(&case, run_dir)?,
    };
    Ok(if case.initial.is_particle_defined() {
        Box::new(Simulation::<particles::ParticleModel>::start(
            case, run_dir, options, plan, lock,
        )?)
    } else {
        Box::new(Simulation::<field::FieldModel>::start(
            case, run_dir, options, plan, lock,
        )?)
    })
}

/// What a run needs before its directory is used: its plan (devices opened once, particles
/// sampled once, the evaluator planned once, the memory checked against them) and the run
/// directory's lock.
pub struct Prepared {
    pub plan: RunPlan,
    pub lock: RunLock,
}

impl Prepared {
    /// Plans the run and checks that its memory and its outputs' disk space fit, then locks
    /// `run_dir`.
    pub fn new(case: &Case, run_dir: &Path) -> Result<Prepared> {
        let plan = RunPlan::checked(case)?;
        memory::check_disk(case, &plan, run_dir)?;
        let lock = RunLock::acquire(run_dir, "vpm run")?;
        Ok(Prepared { plan, lock })
    }
}

/// Continues a run from its latest checkpoint, with optional changes (a later t_end, another
/// device). The run directory is locked first.
pub fn resume(
    run_dir: &Path,
    options: RunOptions,
    changes: &ResumeChanges,
) -> Result<Box<dyn Run>> {
    let lock = RunLock::acquire(run_dir, "vpm resume")?;
    let case = Case::from_file(&run_dir.join("case.toml"))?;
    Ok(if case.initial.is_particle_defined() {
        Box::new(Simulation::<particles::ParticleModel>::resume(
            case, run_dir, options, changes, lock,
        )?)
    } else {
        Box::new(Simulation::<field::FieldModel>::resume(
            case, run_dir, options, changes, lock,
        )?)
    })
}

fn stop_flag() -> &'static Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// How long after the first signal a second one ends the process at once. Shorter gaps are one
/// request delivered twice: coreutils `timeout` (without `--foreground`) sends its signal to the
/// child and then to its whole process group, and a run stopped that way lost its checkpoint
/// when the copy arrived as a separate signal.
const SECOND_SIGNAL_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Makes SIGINT and SIGTERM ask the run to stop after the step in progress, with a checkpoint;
/// a second signal of either kind, [`SECOND_SIGNAL_AFTER`] or more after the first, ends the
/// process at once (exit status 130).
pub fn install_signal_handlers() -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use std::sync::atomic::AtomicU64;
    use std::time::Instant;
    static BASE: OnceLock<Instant> = OnceLock::new();
    // Nanoseconds after BASE of the first signal, plus one; 0 before any.
    static FIRST: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(Instant::now);
    for sig in [SIGINT, SIGTERM] {
        let flag = Arc::clone(stop_flag());
        let handler = move || {
            // Instant::now (clock_gettime) and atomics are async-signal-safe.
            let now = base.elapsed().as_nanos() as u64 + 1;
            match FIRST.compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => flag.store(true, Ordering::SeqCst),
                Err(first) => {
                    if now.saturating_sub(first) >= SECOND_SIGNAL_AFTER.as_nanos() as u64 {
                        signal_hook::low_level::exit(130);
                    }
                }
            }
        };
        // SAFETY: the handler only reads the monotonic clock, updates atomics and calls
        // `_exit` (signal_hook::low_level::exit), all async-signal-safe; it never allocates or
        // locks.
        unsafe { signal_hook::low_level::register(sig, handler) }
            .context("installing the signal handlers")?;
    }
    Ok(())
}

/// Whether a stop was asked for by a signal.
pub fn interrupted() -> bool {
    stop_flag().load(Ordering::Relaxed)
}

/// The particle stepper of a case around `particles`, with the evaluator of the run's `recipe`
/// (built here, on its device). `zero_total_strength`: keep Σα = 0 at reinitialisation (a
/// periodic field; not a single tube or ring, which carries its own circulation).
pub fn particle_stepper(
    case: &Case,
    recipe: &Recipe,
    particles: ParticleSet,
    zero_total_strength: bool,
) -> Result<Box<dyn ParticleStepper>> {
    let vc = case
        .vortex
        .as_ref()
        .with_context(|| format!("case `{}`: needs a [vortex] section", case.name))?;
    let device = recipe.device();
    let evaluator = recipe
        .build()
        .with_context(|| plan::evaluator_context(case, device))?;
    let settings = VortexSettings {
        nu: case.flow.nu,
        scheme: vc.stretching,
        reinit_every: vc.reinit_every,
        lattice_n: vc.n,
        sigma0: vc.sigma0(),
        rbf: vc.rbf,
        conditioning: vc.conditioning,
        zero_total_strength,
    };
    let stepper = crate::vortex::planner::plan(particles, evaluator, settings, device)
        .with_context(|| format!("case `{}`: [vortex]", case.name))?;
    tracing::info!("vortex stepper: {}", stepper.describe());
    Ok(stepper)
}

/// Adds the particle solver's exact state to a checkpoint: its arrays, and its AB2 clock as
/// `vortex_clock` in the model's meta.
pub(crate) fn save_vortex(
    solver: &mut dyn ParticleStepper,
    state: &mut model::ModelState,
) -> Result<()> {
    let (arrays, clock) = solver.state_arrays()?;
    for (name, shape, data) in arrays {
        state.arrays.push(name, shape, data);
    }
    state.meta["vortex_clock"] = serde_json::to_value(clock)?;
    Ok(())
}

/// Restores the particle solver from a checkpoint written by [`save_vortex`].
pub(crate) fn restore_vortex(
    solver: &mut dyn ParticleStepper,
    state: &model::ModelState,
) -> Result<()> {
    let clock: crate::vortex::VortexClock = serde_json::from_value(
        state
            .meta
            .get("vortex_clock")
            .cloned()
            .context("checkpoint meta.json lacks `vortex_clock`")?,
    )
    .context("checkpoint meta.json: `vortex_clock`")?;
    solver
        .restore_state(
            &|name: &str| state.arrays.get(name).map(|(_, d)| d.to_vec()),
            clock,
        )
        .map_err(anyhow::Error::msg)
}

/// Writes `snapshots/particles-<step>.npz/.vtp` (and the .pvd index) for `solver` at (t, step):
/// the particles with the instantaneous f64 velocity and stretching at that state (not the AB2
/// combination; the step that follows reuses them).
pub(crate) fn write_vortex_snapshot(
    run_dir: &Path,
    solver: &mut dyn ParticleStepper,
    t: f64,
    step: u64,
) -> Result<()> {
    let (u, dadt) = solver.derivatives()?;
    let p = solver.particles()?;
    write_particle_snapshot(
        run_dir,
        &ParticleSnapshot {
            t,
            step,
            x: &p.x,
            alpha: &p.alpha,
            sigma: &p.sigma,
            id: &p.id,
            velocity: &u,
            dalpha_dt: &dadt,
        },
    )?;
    Ok(())
}
