//! The seam between the run core and a particle solver: [`ParticleStepper`], implemented here by
//! the CPU-driven [`VortexSolver`] (host particles, any [`crate::summation::Summation`]
//! evaluator) and beside the GPU-resident
//! [`ResidentStepper`](super::resident::ResidentStepper), whose particles, AB2 history and
//! reinitialisation stay on the device; [`super::planner::plan`] picks one. The run core reaches
//! particle data only through the methods that return host values (particles, derivatives, grid
//! velocity, checkpoint arrays), which the resident stepper answers by pulling from the device
//! at output, snapshot, checkpoint and progress times.
//!
//! A step is prepared, then committed or discarded ([`ParticleStepper::prepare_step`]), so a
//! run stepping several solvers together commits all of them or none. A reinitialisation that
//! falls due with a step can be left to the caller
//! ([`ParticleStepper::commit_step_deferring_reinit`], then [`ParticleStepper::reinitialise`]),
//! which may measure the particle field just before and after it.

use super::rbf::SolveReport;
use super::{NamedArray, PhaseTimes, VortexClock, VortexError, VortexSettings, VortexSolver};
use crate::device::Device;
use crate::particles::ParticleSet;
use crate::spectral::{ModeLayout, VectorModes};
use crate::summation::fmm::AccuracyCheck;
use crate::summation::Evaluation;

/// Velocity and stretching at every particle, on the host.
pub type HostDerivatives = (Vec<[f64; 3]>, Vec<[f64; 3]>);

/// The scalars of the particle set that the output rows report (a GPU stepper reduces them on
/// the device instead of pulling the particles).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParticleSummary {
    pub count: usize,
    pub sigma_max: f64,
    /// Σ_p α_p.
    pub total_strength: [f64; 3],
    /// ½ Σ_p x_p × α_p.
    pub impulse: [f64; 3],
}

impl ParticleSummary {
    /// The summary of particles on the host.
    pub fn of(p: &ParticleSet) -> Self {
        ParticleSummary {
            count: p.len(),
            sigma_max: p.sigma.iter().copied().fold(0.0, f64::max),
            total_strength: p.total_strength(),
            impulse: p.impulse(),
        }
    }
}

/// Host↔device traffic of a GPU-resident stepper itself since it was made, bytes: particles, derivatives,
/// checkpoint arrays, flags and maxima (not the RBF solve's small tables and partial sums, nor
/// what an evaluator moves on its own: nothing, for the GPU Ewald and all-pairs engines).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferBytes {
    pub to_device: u64,
    pub to_host: u64,
}

impl TransferBytes {
    /// Both directions together.
    pub fn total(&self) -> u64 {
        self.to_device + self.to_host
    }
}

/// A vortex particle stepper (docs/physics.md §2–3).
pub trait ParticleStepper: Send {
    /// The evaluator and device, for logs.
    fn describe(&self) -> String;
    /// Physics and numerics.
    fn settings(&self) -> &VortexSettings;
    /// The device the particles live on.
    fn device(&self) -> Device;
    /// The largest step the stability limits of §3.4 allow for CFL number `cfl`.
    fn stable_dt(&mut self, cfl: f64) -> Result<f64, VortexError>;
    /// Computes the next state without committing it (see the module docs).
    fn prepare_step(&mut self, dt: f64) -> Result<(), VortexError>;
    /// Commits the prepared step (and reinitialises when due).
    fn commit_step(&mut self) -> Result<(), VortexError> {
        if self.commit_step_deferring_reinit()? {
            self.reinitialise()?;
        }
        Ok(())
    }
    /// Commits the prepared step without the reinitialisation that may fall due with it, and
    /// says whether one is due: the caller then calls [`ParticleStepper::reinitialise`] before
    /// the next step.
    fn commit_step_deferring_reinit(&mut self) -> Result<bool, VortexError>;
    /// Reinitialises now (docs/physics.md §3.3): the particles back on the lattice with σ0,
    /// the AB2 history restarted.
    fn reinitialise(&mut self) -> Result<(), VortexError>;
    /// Drops the prepared step: the state stays as it was.
    fn discard_step(&mut self);
    /// The particles, on the host.
    fn particles(&mut self) -> Result<&ParticleSet, VortexError>;
    /// Count, σ_max, Σα and impulse of the particles.
    fn summary(&mut self) -> Result<ParticleSummary, VortexError> {
        Ok(ParticleSummary::of(self.particles()?))
    }
    /// Host↔device traffic since the stepper was made (`None`: the particles live on the host).
    fn transfer_bytes(&self) -> Option<TransferBytes> {
        None
    }
    /// Velocity and stretching at the particles at the current state, on the host.
    fn derivatives(&mut self) -> Result<HostDerivatives, VortexError>;
    /// Velocity induced at arbitrary points (probes, profiles).
    fn velocity_at(
        &mut self,
        targets: &[[f64; 3]],
        out: &mut Evaluation,
    ) -> Result<(), VortexError>;
    /// The shared diagnostics of the particle velocity at the nodes of an n³ grid, reduced where
    /// the particles live, when the stepper can (the GPU-resident one); `None` means: use
    /// [`ParticleStepper::velocity_modes_on_grid`] and the host's diagnostics.
    fn grid_diagnostics(
        &mut self,
        _n: usize,
        _nu: f64,
    ) -> Result<Option<crate::spectral::gpu::GridDiagnostics>, VortexError> {
        Ok(None)
    }
    /// The particle velocity at the nodes of an n³ grid as retained modes (shared diagnostics).
    fn velocity_modes_on_grid(
        &mut self,
        n: usize,
    ) -> Result<(ModeLayout, VectorModes), VortexError>;
    /// The exact state for a checkpoint.
    fn state_arrays(&mut self) -> Result<(Vec<NamedArray>, VortexClock), VortexError>;
    /// Restores a state from [`ParticleStepper::state_arrays`].
    fn restore_state(
        &mut self,
        get: &dyn Fn(&str) -> Option<Vec<f64>>,
        clock: VortexClock,
    ) -> Result<(), String>;
    /// Time per phase since the last call ([`PhaseTimes`]: device time on a GPU).
    fn take_timings(&mut self) -> PhaseTimes;
    /// The last reinitialisation solve.
    fn last_solve(&self) -> Option<SolveReport>;
    /// The evaluator's built-in accuracy checks since the last call (the FMM's comparisons with
    /// the direct sum; [`crate::summation::Summation::take_accuracy_checks`]), for the run's log
    /// and manifest. Empty for evaluators without checks.
    fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck> {
        Vec::new()
    }

    /// One step: prepare and commit.
    fn step(&mut self, dt: f64) -> Result<(), VortexError> {
        self.prepare_step(dt)?;
        self.commit_step()
    }
}

impl ParticleStepper for VortexSolver {
    fn describe(&self) -> String {
        self.evaluator_name()
    }
    fn settings(&self) -> &VortexSettings {
        VortexSolver::settings(self)
    }
    fn device(&self) -> Device {
        self.device.clone()
    }
    fn stable_dt(&mut self, cfl: f64) -> Result<f64, VortexError> {
        VortexSolver::stable_dt(self, cfl)
    }
    fn prepare_step(&mut self, dt: f64) -> Result<(), VortexError> {
        let p = VortexSolver::prepare_step(self, dt)?;
        self.pending = Some(p);
        Ok(())
    }
    fn commit_step_deferring_reinit(&mut self) -> Result<bool, VortexError> {
        Ok(self
            .pending
            .take()
            .is_some_and(|p| VortexSolver::commit_state(self, p)))
    }
    fn reinitialise(&mut self) -> Result<(), VortexError> {
        VortexSolver::reinitialise(self)
    }
    fn discard_step(&mut self) {
        self.pending = None;
    }
    fn particles(&mut self) -> Result<&ParticleSet, VortexError> {
        Ok(VortexSolver::particles(self))
    }
    fn derivatives(&mut self) -> Result<HostDerivatives, VortexError> {
        let (u, s) = VortexSolver::derivatives(self)?;
        Ok((u.to_vec(), s.to_vec()))
    }
    fn velocity_at(
        &mut self,
        targets: &[[f64; 3]],
        out: &mut Evaluation,
    ) -> Result<(), VortexError> {
        Ok(VortexSolver::velocity_at(self, targets, out)?)
    }
    fn velocity_modes_on_grid(
        &mut self,
        n: usize,
    ) -> Result<(ModeLayout, VectorModes), VortexError> {
        let mut scratch = std::mem::take(&mut self.grid_scratch);
        let r = VortexSolver::velocity_modes_on_grid(self, n, &mut scratch);
        self.grid_scratch = scratch;
        Ok(r?)
    }
    fn state_arrays(&mut self) -> Result<(Vec<NamedArray>, VortexClock), VortexError> {
        Ok(VortexSolver::state_arrays(self))
    }
    fn restore_state(
        &mut self,
        get: &dyn Fn(&str) -> Option<Vec<f64>>,
        clock: VortexClock,
    ) -> Result<(), String> {
        VortexSolver::restore_state(self, get, clock)
    }
    fn take_timings(&mut self) -> PhaseTimes {
        VortexSolver::take_timings(self)
    }
    fn last_solve(&self) -> Option<SolveReport> {
        VortexSolver::last_solve(self)
    }
    fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck> {
        self.evaluator_mut().take_accuracy_checks()
    }
}
