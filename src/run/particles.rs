//! The model of a flow given by its particles: the vortex particle solver alone, for flows given
//! by their vorticity rather than by a velocity field on the spectral grid (docs/physics.md §7).
//!
//! * `vortex-ring`: a ring of radius R, circulation Γ and Gaussian core in free space (direct
//!   summation or FMM); each output writes a row of `vortex/ring.csv`
//!   ([`crate::diagnostics::ring`]).
//! * `coaxial-rings`: several such rings about the z axis (leapfrogging), particles ring after
//!   ring; each output writes a row per ring to `vortex/rings.csv`: each ring's position, radius
//!   and speed, and the totals (impulse, Σα, largest core radius).
//! * `vortex-tube`: a straight tube along z through the periodic box (Ewald summation), with
//!   core spreading; each output writes the Lamb–Oseen profile to `vortex/lamb_oseen.csv`
//!   ([`crate::diagnostics::lamb_oseen`]).

use crate::config::{Case, InitialCondition};
use crate::device::Device;
use crate::diagnostics::lamb_oseen::{core_at, profile, profile_radii, profile_targets};
use crate::diagnostics::ring::{coaxial_ring_diagnostics, ring_diagnostics, RingMembers};
use crate::init::particles::{coaxial_rings_len, saffman_ring_speed, CoaxialRing};
use crate::output::{CheckpointArrays, FieldTime};
use crate::particles::ParticleSet;
use crate::run::callbacks::{CallContext, Callback, LogSpec, ScheduledCallback};
use crate::run::model::{Model, ModelState, StepFailure};
use crate::run::plan::RunPlan;
use crate::run::sampling::core_sampling;
use crate::run::schedule::{Schedule, Scheduled};
use crate::summation::Evaluation;
use crate::vortex::stepper::ParticleStepper;
use anyhow::{bail, Context, Result};
use postprocess::layout::{
    LAMB_OSEEN_COLUMNS, LAMB_OSEEN_CSV, RINGS_COLUMNS, RINGS_CSV, RING_COLUMNS, RING_CSV,
};
use std::path::Path;
use std::time::Instant;

/// The flow and what its diagnostics compare against.
#[derive(Debug, Clone, PartialEq)]
enum Flow {
    Ring {
        circulation: f64,
        core: f64,
    },
    /// Coaxial rings: each ring's parameters and the ids of its particles.
    Rings {
        rings: Vec<CoaxialRing>,
        members: Vec<RingMembers>,
    },
    Tube {
        circulation: f64,
        core: f64,
    },
}

fn flow_of(case: &Case) -> Result<Flow> {
    match &case.initial {
        &InitialCondition::VortexRing {
            circulation, core, ..
        } => Ok(Flow::Ring { circulation, core }),
        InitialCondition::CoaxialRings { rings } => {
            // Ring after ring (`coaxial_rings`): the ids of ring k follow those of ring k − 1.
            let (sampling, sampled) = core_sampling(case)?;
            let cores = rings
                .iter()
                .map(|r| sampled(r.core))
                .collect::<Result<Vec<_>>>()?;
            let mut start = 0u64;
            let members = coaxial_rings_len(rings, &cores, &sampling)
                .into_iter()
                .zip(rings)
                .map(|(len, ring)| {
                    let ids = start..start + len as u64;
                    start = ids.end;
                    RingMembers {
                        ids,
                        circulation: ring.circulation,
                    }
                })
                .collect();
            Ok(Flow::Rings {
                rings: rings.clone(),
                members,
            })
        }
        &InitialCondition::VortexTube { circulation, core } => Ok(Flow::Tube { circulation, core }),
        _ => bail!(
            "case `{}`: initial.kind = \"{}\" is a field; it runs with the spectral solver",
            case.name,
            case.initial.kind_str()
        ),
    }
}

/// The particle solver alone (module docs).
pub struct ParticleModel {
    flow: Flow,
    solver: Box<dyn ParticleStepper>,
    sigma0: f64,
    nu: f64,
    scratch: Evaluation,
    stepping_seconds: f64,
    diagnostics_seconds: f64,
    /// The latest figure for the progress line.
    last_figure: String,
}

impl ParticleModel {
    fn build(case: &Case, plan: &RunPlan, particles: ParticleSet) -> Result<Self> {
        let flow = flow_of(case)?;
        // A single tube or ring carries its own circulation: no Σα = 0 enforcement (free-space
        // rings are never reinitialised anyway).
        let solver = crate::run::particle_solver::particle_stepper(
            case,
            plan.evaluator(case)?,
            particles,
            false,
        )?;
        Ok(ParticleModel {
            flow,
            solver,
            sigma0: case.vortex.as_ref().map_or(0.0, |v| v.sigma0()),
            nu: case.flow.nu,
            scratch: Evaluation::default(),
            stepping_seconds: 0.0,
            diagnostics_seconds: 0.0,
            last_figure: String::new(),
        })
    }
}

impl Model for ParticleModel {
    fn initial(case: &Case, plan: &mut RunPlan) -> Result<Self> {
        let particles = plan
            .take_initial_particles()
            .context("the run's plan holds no sampled particles")?;
        tracing::info!("{} particles", particles.len());
        ParticleModel::build(case, plan, particles)
    }

    fn for_restore(case: &Case, plan: &mut RunPlan) -> Result<Self> {
        ParticleModel::build(case, plan, ParticleSet::default())
    }

    fn callbacks(case: &Case) -> Vec<ScheduledCallback<Self>> {
        let schedule = Scheduled::new(Schedule::from(case.output.cadence), true);
        match flow_of(case) {
            Ok(Flow::Tube { .. }) => {
                vec![ScheduledCallback::new("output", schedule, LambOseenWriter)]
            }
            Ok(Flow::Rings { .. }) => {
                vec![ScheduledCallback::new("output", schedule, RingsWriter)]
            }
            _ => vec![ScheduledCallback::new("output", schedule, RingWriter)],
        }
    }

    fn stable_dt(&mut self, cfl: f64) -> Result<f64, StepFailure> {
        self.solver
            .stable_dt(cfl)
            .map_err(|e| StepFailure::new(format!("vortex solver: {e}")).caused_by(&e))
    }

    fn step(&mut self, dt: f64) -> Result<(), StepFailure> {
        let t0 = Instant::now();
        let prepared = self.solver.prepare_step(dt);
        let committed = prepared.is_ok().then(|| self.solver.commit_step());
        self.stepping_seconds += t0.elapsed().as_secs_f64();
        prepared.map_err(|e| StepFailure::new(format!("vortex solver: {e}")).caused_by(&e))?;
        match committed {
            Some(Err(e)) => Err(StepFailure::after_commit(format!(
                "vortex solver, after the step: {e}"
            ))
            .caused_by(&e)),
            _ => Ok(()),
        }
    }

    fn save(&mut self) -> Result<ModelState> {
        let mut state = ModelState {
            arrays: CheckpointArrays::new(),
            meta: serde_json::json!({}),
        };
        crate::run::particle_solver::save_vortex(self.solver.as_mut(), &mut state)?;
        Ok(state)
    }

    fn restore(&mut self, state: &ModelState) -> Result<()> {
        crate::run::particle_solver::restore_vortex(self.solver.as_mut(), state)
    }

    fn take_timings(&mut self) -> Vec<(&'static str, f64)> {
        let phases = self.solver.take_timings();
        vec![
            (
                "vortex_time_stepping",
                std::mem::take(&mut self.stepping_seconds),
            ),
            (
                "vortex_diagnostics",
                std::mem::take(&mut self.diagnostics_seconds),
            ),
            ("vortex_evaluation", phases.evaluation),
            ("vortex_reinit_vorticity", phases.reinit_vorticity),
            ("vortex_reinit_solve", phases.reinit_solve),
            ("vortex_update", phases.update),
        ]
    }

    fn progress_figure(&mut self) -> String {
        self.last_figure.clone()
    }

    fn particles(&mut self) -> Option<&mut dyn ParticleStepper> {
        Some(self.solver.as_mut())
    }

    fn write_final(&mut self, _run_dir: &Path, _time: FieldTime) -> Result<()> {
        Ok(())
    }

    fn devices(&self) -> Vec<(&'static str, Device)> {
        vec![("vortex", self.solver.device())]
    }
}

/// A row of `vortex/ring.csv`.
struct RingWriter;

impl Callback<ParticleModel> for RingWriter {
    fn logs(&self) -> Vec<LogSpec> {
        vec![LogSpec::new(RING_CSV, &RING_COLUMNS)]
    }

    fn call(&mut self, m: &mut ParticleModel, ctx: &mut CallContext) -> Result<()> {
        let Flow::Ring { circulation, core } = m.flow else {
            bail!("the ring writer needs a vortex ring");
        };
        let t0 = Instant::now();
        let sigma = core_at(core, m.nu, ctx.t);
        let (u, dadt) = m.solver.derivatives()?;
        let p = m.solver.particles()?;
        let d = ring_diagnostics(p, &u, &dadt, circulation);
        let saffman = saffman_ring_speed(d.radius, circulation, sigma);
        let impulse = p.impulse();
        let total = p.total_strength();
        let sigma_max = p.sigma.iter().copied().fold(0.0, f64::max);
        let row = [
            ctx.t,
            ctx.step as f64,
            ctx.dt,
            d.z,
            d.radius,
            d.speed,
            saffman,
            sigma,
            impulse[0],
            impulse[1],
            impulse[2],
            (total[0].powi(2) + total[1].powi(2) + total[2].powi(2)).sqrt(),
            p.len() as f64,
            sigma_max / m.sigma0,
        ];
        ctx.logs.row(RING_CSV, &row)?;
        m.last_figure = format!("U={:.5} (Saffman {saffman:.5})", d.speed);
        m.diagnostics_seconds += t0.elapsed().as_secs_f64();
        Ok(())
    }
}

/// The rows of `vortex/rings.csv` at one time: one per ring (columns: [`RINGS_COLUMNS`]).
struct RingsWriter;

impl Callback<ParticleModel> for RingsWriter {
    fn logs(&self) -> Vec<LogSpec> {
        vec![LogSpec::new(RINGS_CSV, &RINGS_COLUMNS)]
    }

    fn call(&mut self, m: &mut ParticleModel, ctx: &mut CallContext) -> Result<()> {
        let Flow::Rings { rings, members } = &m.flow else {
            bail!("the rings writer needs coaxial rings");
        };
        let t0 = Instant::now();
        let (u, dadt) = m.solver.derivatives()?;
        let p = m.solver.particles()?;
        let each = coaxial_ring_diagnostics(p, &u, &dadt, members);
        let impulse = p.impulse();
        let total = p.total_strength();
        let sigma_max = p.sigma.iter().copied().fold(0.0, f64::max);
        let mut figure = Vec::with_capacity(rings.len());
        for (k, (ring, (d, count))) in rings.iter().zip(&each).enumerate() {
            // The core of a ring whose radius changed: its volume 2π²Rσ² is kept, so
            // σ = σ(t)·√(R/R_I), σ(t) the spread core of a ring of the case's radius R.
            let sigma = core_at(ring.core, m.nu, ctx.t) * (ring.radius / d.radius).sqrt();
            let saffman = saffman_ring_speed(d.radius, ring.circulation, sigma);
            let row = [
                ctx.t,
                ctx.step as f64,
                ctx.dt,
                (k + 1) as f64,
                d.z,
                d.radius,
                d.speed,
                saffman,
                sigma,
                *count as f64,
                impulse[0],
                impulse[1],
                impulse[2],
                total[0],
                total[1],
                total[2],
                sigma_max,
            ];
            ctx.logs.row(RINGS_CSV, &row)?;
            figure.push(format!("R{}={:.3} z{}={:.3}", k + 1, d.radius, k + 1, d.z));
        }
        m.last_figure = figure.join(" ");
        m.diagnostics_seconds += t0.elapsed().as_secs_f64();
        Ok(())
    }
}

/// The rows of `vortex/lamb_oseen.csv` at one time.
struct LambOseenWriter;

impl Callback<ParticleModel> for LambOseenWriter {
    fn logs(&self) -> Vec<LogSpec> {
        vec![LogSpec::new(LAMB_OSEEN_CSV, &LAMB_OSEEN_COLUMNS)]
    }

    fn call(&mut self, m: &mut ParticleModel, ctx: &mut CallContext) -> Result<()> {
        let Flow::Tube { circulation, core } = m.flow else {
            bail!("the Lamb–Oseen writer needs a vortex tube");
        };
        let t0 = Instant::now();
        let sigma = core_at(core, m.nu, ctx.t);
        let radii = profile_radii(core);
        let targets = profile_targets(&radii);
        m.solver.velocity_at(&targets, &mut m.scratch)?;
        let mut worst = 0.0f64;
        for (r, ut, exact) in profile(&radii, &targets, &m.scratch.velocity, circulation, sigma) {
            let rel = (ut - exact) / exact;
            worst = worst.max(rel.abs());
            ctx.logs.row(LAMB_OSEEN_CSV, &[ctx.t, r, ut, exact, rel])?;
        }
        m.last_figure = format!("max|Δu_θ/u_θ|={worst:.2e}");
        m.diagnostics_seconds += t0.elapsed().as_secs_f64();
        Ok(())
    }
}
