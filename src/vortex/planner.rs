//! The particle stepper for a planned evaluator: GPU-resident or host-driven.

use super::resident::ResidentStepper;
use super::stepper::ParticleStepper;
use super::{VortexError, VortexSettings, VortexSolver};
use crate::device::Device;
use crate::particles::ParticleSet;
use crate::summation::planner::Plan;

/// The particle stepper for a planned evaluator on `device`: the GPU-resident
/// [`ResidentStepper`] when the evaluator has a device form (a GPU evaluator), else the
/// host-driven [`VortexSolver`]. Errors are the resident stepper's (e.g. `rbf = "cg"` on a GPU,
/// kernels that do not compile): never a silent fallback to the host.
pub fn plan(
    particles: ParticleSet,
    mut evaluator: Plan,
    settings: VortexSettings,
    device: &Device,
) -> Result<Box<dyn ParticleStepper>, VortexError> {
    if evaluator.evaluator.device_form().is_some() {
        return Ok(Box::new(ResidentStepper::new(
            particles,
            evaluator.evaluator,
            settings,
            device.clone(),
            evaluator.description,
        )?));
    }
    let mut solver = VortexSolver::new(particles, evaluator.evaluator, settings);
    solver.device = device.clone();
    solver.description = evaluator.description;
    Ok(Box::new(solver))
}
