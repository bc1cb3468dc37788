//! The particle solver's pieces that both models share: its stepper built from the run's
//! evaluator recipe, its exact state in a checkpoint and back, and its snapshots.

use crate::config::Case;
use crate::output::{write_particle_snapshot, ParticleSnapshot};
use crate::particles::ParticleSet;
use crate::run::model;
use crate::run::plan::evaluator_context;
use crate::summation::planner::Recipe;
use crate::vortex::stepper::ParticleStepper;
use crate::vortex::VortexSettings;
use anyhow::{Context, Result};
use std::path::Path;

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
        .with_context(|| evaluator_context(case, device))?;
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
