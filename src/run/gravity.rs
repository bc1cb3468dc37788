//! The model of a gravity case: bodies under softened Newtonian gravity, stepped by the
//! kick–drift–kick leapfrog (docs/physics.md §10, §11).
//!
//! Each output writes a row of `gravity/energy.csv` (energies, the relative energy error against
//! t = 0, momenta, virial ratio, Lagrangian radii) and a row per (galaxy, component) of
//! `gravity/components.csv`; a relative energy error beyond `gravity.energy_error_limit` stops
//! the run (the last checkpoint stays the last good state). Body snapshots are written at
//! `gravity.snapshot_every_*` and at `gravity.pictures_times`, and the pictures drawn from them.

use crate::config::Case;
use crate::device::Device;
use crate::gravity::bodies::{BodySet, Component};
use crate::gravity::diagnostics::{diagnostics, GravityDiagnostics};
use crate::gravity::planner::stepper;
use crate::gravity::stepper::BodyStepper;
use crate::gravity::units::Units;
use crate::output::bodies::{write_body_snapshot, BodyFormat};
use crate::output::{format_f64, CheckpointArrays, EnergyConservation, FieldTime};
use crate::run::callbacks::{CallContext, Callback, LogSpec, ScheduledCallback};
use crate::run::model::{Model, ModelState, StepFailure};
use crate::run::plan::RunPlan;
use crate::run::schedule::{Schedule, Scheduled};
use crate::summation::fmm::AccuracyCheck;
use crate::summation::interaction::PlummerGravity;
use crate::summation::EvaluatorKind;
use anyhow::{bail, Context, Result};
use postprocess::layout::{
    GRAVITY_COLUMNS, GRAVITY_COMPONENTS_COLUMNS, GRAVITY_COMPONENTS_CSV, GRAVITY_CSV,
    GRAVITY_UNITS_JSON,
};
use std::path::Path;
use std::time::Instant;

/// The gravity model (module docs).
pub struct GravityModel {
    /// The leapfrog; `None` only between [`Model::for_restore`] and [`Model::restore`].
    stepper: Option<Box<dyn BodyStepper>>,
    device: Device,
    method: EvaluatorKind,
    gravity: PlummerGravity,
    options: crate::summation::planner::EvaluatorOptions,
    /// The energy summary for the manifest, with E₀ (set at the first output, kept in
    /// checkpoints).
    conservation: Option<EnergyConservation>,
    limit: f64,
    diagnostics_seconds: f64,
    last_figure: String,
    /// The step of the latest body snapshot this process wrote: the snapshots' cadence and the
    /// pictures' times may fall on one step, which is written once.
    snapshot_step: Option<u64>,
}

impl GravityModel {
    fn build(case: &Case, plan: &RunPlan, bodies: Option<BodySet>) -> Result<GravityModel> {
        let g = case
            .gravity
            .as_ref()
            .with_context(|| format!("case `{}`: a gravity case needs [gravity]", case.name))?;
        let device = plan
            .devices
            .gravity
            .clone()
            .context("the run's plan has no gravity device")?;
        let method = plan
            .gravity_method
            .as_ref()
            .context("the run's plan has no gravity method")?
            .method;
        let gravity = PlummerGravity::new(g.softening)?;
        let options = g.evaluator_options();
        let stepper = match bodies {
            Some(b) => Some(stepper(b, &device, method, gravity, &options)?),
            None => None,
        };
        Ok(GravityModel {
            stepper,
            device,
            method,
            gravity,
            options,
            conservation: None,
            limit: g.energy_error_limit,
            diagnostics_seconds: 0.0,
            last_figure: String::new(),
            snapshot_step: None,
        })
    }

    fn stepper(&mut self) -> Result<&mut dyn BodyStepper> {
        match &mut self.stepper {
            Some(s) => Ok(s.as_mut()),
            None => bail!("the gravity model has no bodies (not restored)"),
        }
    }

    /// The diagnostics of the current state.
    fn diagnostics(&mut self) -> Result<(BodySet, GravityDiagnostics)> {
        let softening = self.gravity.softening;
        let s = self.stepper()?;
        let bodies = s.bodies()?;
        let phi = s.potentials()?;
        let d = diagnostics(&bodies, &phi, softening);
        Ok((bodies, d))
    }
}

/// Checkpoint array names (the masses' length is the body count a resume plans for).
pub const BODY_MASS: &str = "body_mass";
const MASS: &str = BODY_MASS;
const POSITION: &str = "body_x";
const VELOCITY: &str = "body_v";
const COMPONENT: &str = "body_component";
const GALAXY: &str = "body_galaxy";

impl Model for GravityModel {
    fn initial(case: &Case, plan: &mut RunPlan) -> Result<Self> {
        let bodies = plan
            .take_initial_bodies()
            .context("the run's plan holds no bodies")?;
        tracing::info!("{} bodies", bodies.len());
        GravityModel::build(case, plan, Some(bodies))
    }

    fn for_restore(case: &Case, plan: &mut RunPlan) -> Result<Self> {
        GravityModel::build(case, plan, None)
    }

    fn callbacks(case: &Case) -> Vec<ScheduledCallback<Self>> {
        let output = Scheduled::new(Schedule::from(case.output.cadence), true);
        let writer = DiagnosticsWriter { units: case.units };
        let mut callbacks = vec![ScheduledCallback::new("output", output, writer)];
        if let Some(g) = &case.gravity {
            let formats = g.written_formats();
            if let Some(c) = g.snapshots {
                callbacks.push(ScheduledCallback::new(
                    "body_snapshots",
                    Scheduled::new(Schedule::from(c), true),
                    SnapshotWriter {
                        formats: formats.clone(),
                    },
                ));
            }
            callbacks.push(ScheduledCallback::new(
                "picture_snapshots",
                Scheduled::new(
                    Schedule::SpecifiedTimes {
                        times: g.pictures_times.clone(),
                        scale: case.time.t_end,
                    },
                    false,
                ),
                SnapshotWriter { formats },
            ));
        }
        callbacks
    }

    fn stable_dt(&mut self, _cfl: f64) -> Result<f64, StepFailure> {
        // The leapfrog takes the case's fixed step (the parser refuses `cfl`).
        Ok(f64::INFINITY)
    }

    fn step(&mut self, dt: f64) -> Result<(), StepFailure> {
        let s = self
            .stepper()
            .map_err(|e| StepFailure::new(format!("gravity: {e}")))?;
        s.step(dt)
            .map_err(|e| StepFailure::new(format!("gravity: {e}")).caused_by(&e))
    }

    fn save(&mut self) -> Result<ModelState> {
        let b = self.stepper()?.bodies()?;
        let n = b.len();
        let mut arrays = CheckpointArrays::new();
        arrays.push(MASS, vec![n], b.mass.clone());
        arrays.push(
            POSITION,
            vec![n, 3],
            b.x.iter().flatten().copied().collect(),
        );
        arrays.push(
            VELOCITY,
            vec![n, 3],
            b.v.iter().flatten().copied().collect(),
        );
        arrays.push(
            COMPONENT,
            vec![n],
            b.component.iter().map(|&c| c as u8 as f64).collect(),
        );
        arrays.push(
            GALAXY,
            vec![n],
            b.galaxy.iter().map(|&g| g as f64).collect(),
        );
        Ok(ModelState {
            arrays,
            meta: serde_json::json!({
                "gravity_method": self.method.to_string(),
                "energy_conservation": self.conservation,
            }),
        })
    }

    fn restore(&mut self, state: &ModelState) -> Result<()> {
        let get = |name: &str| -> Result<&[f64]> {
            Ok(state
                .arrays
                .get(name)
                .with_context(|| format!("the checkpoint has no array `{name}`"))?
                .1)
        };
        let (mass, x, v, component, galaxy) = (
            get(MASS)?,
            get(POSITION)?,
            get(VELOCITY)?,
            get(COMPONENT)?,
            get(GALAXY)?,
        );
        let n = mass.len();
        if x.len() != 3 * n || v.len() != 3 * n || component.len() != n || galaxy.len() != n {
            bail!("the checkpoint's body arrays have unequal lengths");
        }
        let mut bodies = BodySet::with_capacity(n);
        for i in 0..n {
            let c = Component::from_u8(component[i] as u8)
                .with_context(|| format!("body {i}: unknown component {}", component[i]))?;
            bodies.push(
                mass[i],
                [x[3 * i], x[3 * i + 1], x[3 * i + 2]],
                [v[3 * i], v[3 * i + 1], v[3 * i + 2]],
                c,
                galaxy[i] as u8,
            );
        }
        // The method the run was computed with (auto's choice is kept).
        if let Some(m) = state.meta.get("gravity_method").and_then(|m| m.as_str()) {
            self.method = match m {
                "direct" => EvaluatorKind::Direct,
                "fmm" => EvaluatorKind::Fmm,
                other => bail!("the checkpoint's gravity method \"{other}\" is unknown"),
            };
        }
        // The summary as of the checkpoint (its limit is the case's now).
        self.conservation = match state.meta.get("energy_conservation") {
            Some(v) if !v.is_null() => {
                let mut c: EnergyConservation = serde_json::from_value(v.clone())
                    .context("the checkpoint's energy_conservation")?;
                c.limit = self.limit;
                Some(c)
            }
            _ => None,
        };
        self.stepper = Some(stepper(
            bodies,
            &self.device,
            self.method,
            self.gravity,
            &self.options,
        )?);
        Ok(())
    }

    fn take_timings(&mut self) -> Vec<(&'static str, f64)> {
        let mut t = self
            .stepper
            .as_mut()
            .map(|s| s.take_timings())
            .unwrap_or_default();
        t.push((
            "gravity diagnostics",
            std::mem::take(&mut self.diagnostics_seconds),
        ));
        t
    }

    fn progress_figure(&mut self) -> String {
        self.last_figure.clone()
    }

    fn particles(&mut self) -> Option<&mut dyn crate::vortex::stepper::ParticleStepper> {
        None
    }

    fn write_final(&mut self, _run_dir: &Path, _time: FieldTime) -> Result<()> {
        Ok(())
    }

    fn energy_conservation(&self) -> Option<EnergyConservation> {
        self.conservation.clone()
    }

    fn evaluator_descriptions(&mut self) -> Vec<(&'static str, String)> {
        self.stepper
            .as_ref()
            .map(|s| vec![("gravity", s.describe())])
            .unwrap_or_default()
    }

    fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck> {
        self.stepper
            .as_mut()
            .map(|s| s.take_accuracy_checks())
            .unwrap_or_default()
    }

    fn devices(&self) -> Vec<(&'static str, Device)> {
        vec![("gravity", self.device.clone())]
    }
}

/// The rows of `gravity/energy.csv` and `gravity/components.csv` at one output, and the energy
/// bound.
struct DiagnosticsWriter {
    /// The case's units, for `gravity/units.json`.
    units: Option<Units>,
}

impl Callback<GravityModel> for DiagnosticsWriter {
    fn logs(&self) -> Vec<LogSpec> {
        vec![
            LogSpec::new(GRAVITY_CSV, &GRAVITY_COLUMNS),
            LogSpec::new(GRAVITY_COMPONENTS_CSV, &GRAVITY_COMPONENTS_COLUMNS),
        ]
    }

    fn call(&mut self, m: &mut GravityModel, ctx: &mut CallContext) -> Result<()> {
        let t0 = Instant::now();
        let (_, d) = m.diagnostics()?;
        let e0 = m
            .conservation
            .as_ref()
            .map_or(d.energy, |c| c.initial_energy);
        let error = if e0 != 0.0 {
            (d.energy - e0) / e0.abs()
        } else {
            d.energy - e0
        };
        let row = [
            ctx.t,
            ctx.step as f64,
            d.kinetic,
            d.potential,
            d.energy,
            error,
            d.momentum[0],
            d.momentum[1],
            d.momentum[2],
            d.angular_momentum[0],
            d.angular_momentum[1],
            d.angular_momentum[2],
            d.virial_ratio,
            d.lagrangian_radii[0],
            d.lagrangian_radii[1],
            d.lagrangian_radii[2],
        ];
        ctx.logs.row(GRAVITY_CSV, &row)?;
        for c in &d.components {
            let mut fields = vec![
                format_f64(ctx.t),
                c.galaxy.to_string(),
                c.component.name().to_string(),
                format_f64(c.mass),
            ];
            fields.extend(c.centre.iter().chain(&c.velocity).map(|&x| format_f64(x)));
            ctx.logs.row_fmt(GRAVITY_COMPONENTS_CSV, &fields)?;
        }
        let worst = match &m.conservation {
            Some(c) if c.max_abs_energy_error >= error.abs() => (c.max_abs_energy_error, c.max_at),
            _ => (error.abs(), ctx.t),
        };
        m.conservation = Some(EnergyConservation {
            initial_energy: e0,
            t: ctx.t,
            energy_error: error,
            max_abs_energy_error: worst.0,
            max_at: worst.1,
            limit: m.limit,
        });
        m.last_figure = format!("ΔE/E={error:+.2e} Q={:.3}", d.virial_ratio);
        m.diagnostics_seconds += t0.elapsed().as_secs_f64();
        // A NaN error stops the run too.
        if error.abs() > m.limit || error.is_nan() {
            bail!(
                "the relative energy error |E − E₀|/|E₀| = {:.3e} at t = {} exceeds \
                 gravity.energy_error_limit = {:e}: the step is too large for these bodies (or \
                 the softening too small); lower time.dt or raise gravity.softening and run \
                 again, or raise the limit in the run directory's case.toml and `vpm resume`",
                error.abs(),
                ctx.t,
                m.limit
            );
        }
        let units_json = ctx.run_dir.join(GRAVITY_UNITS_JSON);
        if !units_json.is_file() {
            write_units(&units_json, self.units.as_ref())?;
        }
        Ok(())
    }
}

/// `gravity/units.json` for the pictures (postprocess::layout::GRAVITY_UNITS_JSON): `{}` for
/// N-body units.
fn write_units(path: &Path, units: Option<&Units>) -> Result<()> {
    let json = match units {
        Some(u) => serde_json::json!({
            "length": u.length,
            "length_unit": u.length_unit.as_str(),
            "mass_msun": u.mass_msun,
            "time_seconds": u.time_seconds(),
        }),
        None => serde_json::json!({}),
    };
    let text = serde_json::to_string_pretty(&json)? + "\n";
    crate::output::write_atomic(path, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// Body snapshots in the case's formats (npz always: the pictures read it).
struct SnapshotWriter {
    formats: Vec<BodyFormat>,
}

impl Callback<GravityModel> for SnapshotWriter {
    fn call(&mut self, m: &mut GravityModel, ctx: &mut CallContext) -> Result<()> {
        if m.snapshot_step == Some(ctx.step) {
            return Ok(());
        }
        let t0 = Instant::now();
        let softening = m.gravity.softening;
        let bodies = m.stepper()?.bodies()?;
        write_body_snapshot(
            ctx.run_dir,
            ctx.step,
            ctx.t,
            &bodies,
            softening,
            &self.formats,
        )?;
        m.snapshot_step = Some(ctx.step);
        m.diagnostics_seconds += t0.elapsed().as_secs_f64();
        Ok(())
    }
}
