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
pub mod disk;
pub mod dissipation;
pub mod field;
pub mod gravity;
pub mod memory;
pub mod model;
pub mod options;
pub mod particle_solver;
pub mod particles;
pub mod plan;
pub mod progress;
pub mod sampling;
pub mod schedule;
pub mod signals;
pub mod simulation;
pub mod verify;

use crate::config::Case;
use crate::output::{Manifest, RunLock, CHECKPOINTS_DIR, MANIFEST_FILE};
use anyhow::{bail, Context, Result};
pub use options::{plot_options, ProgressStyle, RunEnd, RunOptions};
pub use particle_solver::particle_stepper;
pub use plan::{RunDevices, RunPlan};
pub use signals::install_signal_handlers;
use simulation::{ResumeChanges, Run, Simulation};
use std::path::Path;

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
    Ok(if case.initial.is_gravity() {
        Box::new(Simulation::<gravity::GravityModel>::start(
            case, run_dir, options, plan, lock,
        )?)
    } else if case.initial.is_particle_defined() {
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
        let plan = checked_plan(case, run_dir)?;
        let lock = RunLock::acquire(run_dir, "vpm run")?;
        Ok(Prepared { plan, lock })
    }
}

/// The case's plan ([`RunPlan::new`]), with its memory checked against its devices and its
/// outputs' disk space against `run_dir` (or its nearest existing ancestor): everything that
/// refuses a case before its run directory is made.
pub fn checked_plan(case: &Case, run_dir: &Path) -> Result<RunPlan> {
    let plan = RunPlan::new(case)?;
    check_plan(case, &plan, run_dir)?;
    Ok(plan)
}

/// The checks of [`checked_plan`] on a plan in hand (`vpm check` makes them after printing the
/// plan's estimates): its memory against its devices and its outputs' disk space against
/// `run_dir`.
pub fn check_plan(case: &Case, plan: &RunPlan, run_dir: &Path) -> Result<()> {
    memory::check_fits(case, plan)?;
    memory::check_disk(case, plan, run_dir)
}

/// Continues a run from its latest checkpoint, with optional changes (a later t_end, another
/// device); a run stopped before its first checkpoint starts again at t = 0 (and says so). The
/// run directory is locked first.
pub fn resume(
    run_dir: &Path,
    options: RunOptions,
    changes: &ResumeChanges,
) -> Result<Box<dyn Run>> {
    let case_file = run_dir.join(postprocess::layout::CASE_TOML);
    if !run_dir.exists() {
        bail!("{}: no such run directory", run_dir.display());
    }
    if !run_dir.is_dir() {
        bail!(
            "{}: not a directory; `vpm resume` takes a run directory",
            run_dir.display()
        );
    }
    if !case_file.is_file() {
        bail!(
            "{}: not a run directory (it has no case.toml); `vpm run CASE --out {}` starts a run \
             there",
            run_dir.display(),
            run_dir.display()
        );
    }
    let lock = RunLock::acquire(run_dir, "vpm resume")?;
    let case = Case::from_file(&case_file)?;
    let restart = !has_checkpoints(run_dir)?;
    if restart {
        // A directory vpm started a run in has a manifest from the start on.
        if !run_dir.join(MANIFEST_FILE).is_file() {
            bail!(
                "{}: neither a checkpoint nor {MANIFEST_FILE}: not a run vpm started; `vpm run {} \
                 --out {} --force` starts one there",
                run_dir.display(),
                case_file.display(),
                run_dir.display()
            );
        }
        let manifest = Manifest::read(run_dir).ok();
        if let Some(m) = &manifest {
            m.check_format(run_dir)?;
        }
        if manifest.is_some_and(|m| m.status == "finished") {
            bail!(
                "{}: the run is finished and has no checkpoint left to continue from \
                 (checkpoints/ was emptied); `vpm run {} --out NEW_DIR` runs it again",
                run_dir.display(),
                case_file.display()
            );
        }
        if options.progress != ProgressStyle::Quiet {
            crate::say!(
                "vpm: {} has no checkpoint (the run stopped before its first one); removing its \
                 partial outputs and starting it again at t = 0",
                run_dir.display()
            );
        }
    }
    if case.initial.is_gravity() {
        resume_as::<gravity::GravityModel>(restart, case, run_dir, options, changes, lock)
    } else if case.initial.is_particle_defined() {
        resume_as::<particles::ParticleModel>(restart, case, run_dir, options, changes, lock)
    } else {
        resume_as::<field::FieldModel>(restart, case, run_dir, options, changes, lock)
    }
}

/// [`resume`] of a model: from the latest checkpoint, or (`restart`: there is none) again from
/// t = 0, the manifest recording a resume from step 0.
fn resume_as<M: model::Model + 'static>(
    restart: bool,
    case: Case,
    run_dir: &Path,
    options: RunOptions,
    changes: &ResumeChanges,
    lock: RunLock,
) -> Result<Box<dyn Run>> {
    if !restart {
        return Ok(Box::new(Simulation::<M>::resume(
            case, run_dir, options, changes, lock,
        )?));
    }
    // No checkpoint: the partial outputs go (vpm's entries of the run directory; case.toml
    // is written again) and the run starts as `vpm run` starts it.
    let (case, _) = simulation::apply_changes(case, run_dir, changes, 0.0)?;
    let plan = checked_plan(&case, run_dir)?;
    crate::output::create_run_dir(&case.name, Some(run_dir), true)
        .context("removing the partial outputs of the stopped start")?;
    let mut sim = Simulation::<M>::start(case, run_dir, options, plan, lock)?;
    sim.record_restart();
    Ok(Box::new(sim))
}

/// Whether `run_dir` holds a checkpoint, valid or not: a `ckpt-*` directory in `checkpoints/`,
/// or one moved aside while being replaced (`.ckpt-<step>.old-<pid>`); the temporary directory
/// of an unfinished write is none.
fn has_checkpoints(run_dir: &Path) -> Result<bool> {
    let dir = run_dir.join(CHECKPOINTS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    Ok(entries.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.starts_with("ckpt-") || (name.starts_with(".ckpt-") && name.contains(".old-"))
    }))
}
