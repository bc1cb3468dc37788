//! What the run core asks of a model: a stable step, a step that is not committed when it
//! fails, its exact state for checkpoints, its timings and a figure for the progress line.
//!
//! Two models implement it: [`crate::run::field::FieldModel`] (a flow given as a velocity
//! field: the spectral solver, with the particles alongside in lockstep when the case has
//! `[vortex]`) and [`crate::run::particles::ParticleModel`] (a flow given by its particles: a
//! vortex ring in free space, a tube in the periodic box).

use crate::config::Case;
use crate::output::{CheckpointArrays, FieldTime};
use crate::run::callbacks::ScheduledCallback;
use crate::run::plan::RunPlan;
use crate::vortex::stepper::ParticleStepper;
use std::path::Path;

/// Why a model could not step (or report its stable step).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct StepFailure {
    /// What failed, e.g. "spectral solver: the velocity became non-finite".
    pub message: String,
    /// Whether the step was committed before the failure (a reinitialisation that follows the
    /// committed step failed): the state in hand is then the one after the step. Otherwise it
    /// is the one before it, unchanged.
    pub committed: bool,
    /// What to do about it, where the run core's usual advice (a smaller step, a finer
    /// resolution) does not apply: e.g. [`ACCURACY_CHECK_ADVICE`].
    pub advice: Option<&'static str>,
}

/// The advice after an evaluator's built-in accuracy check failed (the FMM against the direct
/// sum): the state is fine, the summation is not accurate enough for it.
pub const ACCURACY_CHECK_ADVICE: &str = "Ask for a finer `accuracy` in [vortex] (or use \
     evaluator = \"direct\" in free space, \"ewald\" in the periodic box), then `vpm run` again; or change it in the run directory's \
     case.toml and `vpm resume` from the checkpoint.";

impl StepFailure {
    /// A failure before anything was committed.
    pub fn new(message: impl Into<String>) -> StepFailure {
        StepFailure {
            message: message.into(),
            committed: false,
            advice: None,
        }
    }

    /// A failure after the step was committed.
    pub fn after_commit(message: impl Into<String>) -> StepFailure {
        StepFailure {
            message: message.into(),
            committed: true,
            advice: None,
        }
    }

    /// This failure with the advice its cause `error` calls for (an evaluator's failed accuracy
    /// check: [`ACCURACY_CHECK_ADVICE`]).
    pub fn caused_by(mut self, error: &(dyn std::error::Error + 'static)) -> StepFailure {
        if is_accuracy_check_failure(error) {
            self.advice = Some(ACCURACY_CHECK_ADVICE);
        }
        self
    }
}

/// Whether `error`, or an error it was caused by, is an evaluator's failed accuracy check
/// ([`crate::summation::SummationError::AccuracyCheck`], also inside the particle solver's
/// error).
pub fn is_accuracy_check_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    use crate::summation::SummationError;
    use crate::vortex::VortexError;
    let mut cause = Some(error);
    while let Some(e) = cause {
        let found = matches!(
            e.downcast_ref::<SummationError>(),
            Some(SummationError::AccuracyCheck(_))
        ) || matches!(
            e.downcast_ref::<VortexError>(),
            Some(VortexError::Summation(SummationError::AccuracyCheck(_)))
        );
        if found {
            return true;
        }
        cause = e.source();
    }
    false
}

/// A model's exact state for a checkpoint: arrays for `state.npz`, scalars for `meta.json`.
#[derive(Debug, Clone, Default)]
pub struct ModelState {
    pub arrays: CheckpointArrays,
    /// Model-specific scalars (e.g. the particle stepper's AB2 clock).
    pub meta: serde_json::Value,
}

/// A model of the run core (see the module docs).
pub trait Model: Sized {
    /// A model at t = 0 from the case's initial condition, its solvers on the plan's devices
    /// (the plan's sampled particles taken, its evaluator built).
    fn initial(case: &Case, plan: &mut RunPlan) -> anyhow::Result<Self>;

    /// A model ready for [`Model::restore`] (no initial-condition work).
    fn for_restore(case: &Case, plan: &mut RunPlan) -> anyhow::Result<Self>;

    /// The output writers of this model, with their schedules from the case (the snapshot
    /// writer and the checkpointer are the run core's).
    fn callbacks(case: &Case) -> Vec<ScheduledCallback<Self>>;

    /// The largest step its stability limits allow for a CFL number `cfl` (infinite when nothing
    /// moves).
    fn stable_dt(&mut self, cfl: f64) -> Result<f64, StepFailure>;

    /// Advances by `dt`. On error the state is unchanged unless the error says the step was
    /// committed ([`StepFailure::committed`]).
    fn step(&mut self, dt: f64) -> Result<(), StepFailure>;

    /// The exact state, so that [`Model::restore`] continues bit for bit.
    fn save(&mut self) -> anyhow::Result<ModelState>;

    /// Restores a state written by [`Model::save`].
    fn restore(&mut self, state: &ModelState) -> anyhow::Result<()>;

    /// Wall seconds per phase since the last call, for the manifest (`stage_wall_seconds`).
    fn take_timings(&mut self) -> Vec<(&'static str, f64)>;

    /// A short "name=value" for the progress line (e.g. the energy).
    fn progress_figure(&mut self) -> String;

    /// The particle solver, if the model has particles (snapshots).
    fn particles(&mut self) -> Option<&mut dyn ParticleStepper>;

    /// Final outputs written at t_end (e.g. the spectral field), stamped with `time`: the run's
    /// time and step; a resume of a run stopped before they were all written writes them again.
    fn write_final(&mut self, run_dir: &Path, time: FieldTime) -> anyhow::Result<()>;

    /// The numerical dissipation the model measured, for the manifest and the run log (`None`:
    /// it measures none).
    fn numerical_dissipation(&self) -> Option<crate::output::NumericalDissipation> {
        None
    }

    /// A gravity run's energy conservation, for the manifest (`None`: not a gravity run).
    fn energy_conservation(&self) -> Option<crate::output::EnergyConservation> {
        None
    }

    /// Each solver's evaluator in words, for the manifest's `evaluators` (solver → description):
    /// the particle stepper's by default.
    fn evaluator_descriptions(&mut self) -> Vec<(&'static str, String)> {
        self.particles()
            .map(|p| vec![("vortex", p.describe())])
            .unwrap_or_default()
    }

    /// The evaluators' built-in accuracy checks since the last call: the particle stepper's by
    /// default.
    fn take_accuracy_checks(&mut self) -> Vec<crate::summation::fmm::AccuracyCheck> {
        self.particles()
            .map(|p| p.take_accuracy_checks())
            .unwrap_or_default()
    }

    /// Which device each solver runs on ("spectral" → "cpu", "vortex" → "cuda:0"), for the
    /// manifest and the checkpoint.
    fn devices(&self) -> Vec<(&'static str, crate::device::Device)>;
}
