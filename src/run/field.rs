//! The model of a flow given as a velocity field: the pseudo-spectral solver, with the vortex
//! particles alongside when the case has `[vortex]`. Both start from the same initial field
//! (the particles by RBF interpolation on their own lattice) and step in lockstep with the same
//! Δt; the particle velocity is sampled at the spectral grid's nodes and handed to the same
//! diagnostics, so K, ε and E(k) mean the same thing in `spectral/` and `vortex/`.
//!
//! Every reinitialisation of the particles that falls due with a step is done here, measured
//! as the run's [`DissipationMeter`] asks (K just before and after: docs/physics.md §3.6).
//!
//! Writers: `output` (a row of `spectral/energy.csv`, and of `vortex/energy.csv` with the K row
//! of `comparison.csv`), `spectra` (the shell spectra of both and the E rows of
//! `comparison.csv`) at the listed times, and `fields` (velocity, vorticity and Q of both on the
//! spectral grid, `fields/`, and their pictures) at `output.fields_times`.

use crate::config::Case;
use crate::device::Device;
use crate::diagnostics::compare::relative_difference;
use crate::diagnostics::structures::{grid_fields, GridFields};
use crate::diagnostics::{flow_stats, max_divergence, max_vorticity, shell_spectrum, FlowStats};
use crate::init::initial_modes;
use crate::output::NumericalDissipation;
use crate::output::{
    format_f64, write_fields, write_velocity_npz, CheckpointArrays, FieldPrecision, FieldTime,
    FieldsFrame,
};
use crate::particles::ParticleSet;
use crate::run::callbacks::{CallContext, Callback, LogSpec, ScheduledCallback};
use crate::run::dissipation::{DissipationMeter, Measure};
use crate::run::model::{Model, ModelState, StepFailure};
use crate::run::plan::RunPlan;
use crate::run::schedule::{Schedule, Scheduled};
use crate::spectral::solver::zero_modes;
use crate::spectral::{
    Fft3d, ModeLayout, SpectralError, SpectralGrid, SpectralStepper, VectorModes,
};

use crate::vortex::field::{grid_kmax, particles_from_modes};
use crate::vortex::rbf::SolveReport;
use crate::vortex::stepper::ParticleStepper;
use crate::vortex::VortexError;
use anyhow::{bail, Context, Result};
use num_complex::Complex64;
use postprocess::layout::{
    vortex_energy_columns, COMPARISON_COLUMNS, COMPARISON_CSV, ENERGY_COLUMNS, FINAL_NPZ,
    SPECTRAL_ENERGY_CSV, SPECTRAL_SPECTRA_CSV, SPECTRA_COLUMNS, VORTEX_ENERGY_CSV,
    VORTEX_SPECTRA_CSV,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// The particle side of a field-defined run.
struct VortexSide {
    solver: Box<dyn ParticleStepper>,
    sigma0: f64,
    /// The initial RBF solve, reported until the first reinitialisation.
    initial_solve: Option<SolveReport>,
    /// The numerical dissipation measured so far.
    meter: DissipationMeter,
}

/// Diagnostics of the particle field on the spectral grid.
#[derive(Clone)]
struct VortexStats {
    stats: FlowStats,
    spectrum: Vec<f64>,
    max_div: f64,
    max_vorticity: f64,
}

impl VortexStats {
    /// Diagnostics of the particle velocity at the nodes of the n³ grid with viscosity ν, the
    /// same code as the spectral side's: reduced where the particles live when the stepper can
    /// (the GPU-resident one), else from the velocity's modes on the host; there, without
    /// `full`, the flow statistics only (the spectrum empty, the maxima NaN).
    fn of(
        solver: &mut dyn ParticleStepper,
        n: usize,
        nu: f64,
        full: bool,
    ) -> Result<VortexStats, VortexError> {
        if let Some(d) = solver.grid_diagnostics(n, nu)? {
            return Ok(VortexStats {
                stats: d.stats,
                spectrum: d.spectrum,
                max_div: d.max_divergence,
                max_vorticity: d.max_vorticity,
            });
        }
        let (layout, modes) = solver.velocity_modes_on_grid(n)?;
        let stats = flow_stats(&layout, &modes, nu);
        if !full {
            return Ok(VortexStats {
                stats,
                spectrum: Vec::new(),
                max_div: f64::NAN,
                max_vorticity: f64::NAN,
            });
        }
        let mut fft = Fft3d::new(n, layout);
        Ok(VortexStats {
            stats,
            spectrum: shell_spectrum(&layout, &modes),
            max_div: max_divergence(&mut fft, &modes),
            max_vorticity: max_vorticity(&mut fft, &modes),
        })
    }

    /// K and ε, for the dissipation meter.
    fn measure(&self) -> Measure {
        Measure {
            energy: self.stats.energy,
            dissipation: self.stats.dissipation,
        }
    }
}

/// The spectral solver ± the particle solver (module docs).
pub struct FieldModel {
    spectral: Box<dyn SpectralStepper>,
    vortex: Option<VortexSide>,
    nu: f64,
    timings: BTreeMap<&'static str, f64>,
    /// The particle diagnostics of the current state (the output and spectrum writers share
    /// them when both are due; cleared by every step).
    vortex_stats: Option<VortexStats>,
    last_energy: f64,
}

/// The spectral grid of a field-defined case.
fn spectral_grid(case: &Case) -> Result<SpectralGrid> {
    match &case.spectral {
        Some(s) => Ok(SpectralGrid::new(s.n, s.dealias)),
        None => bail!(
            "case `{}`: initial.kind = \"{}\" has no spectral reference; it runs the particle \
             solver alone",
            case.name,
            case.initial.kind_str()
        ),
    }
}

impl FieldModel {
    fn build(
        case: &Case,
        plan: &RunPlan,
        particles: Option<(ParticleSet, Option<SolveReport>)>,
    ) -> Result<Self> {
        let grid = spectral_grid(case)?;
        let spectral_device = plan.devices.spectral.clone().unwrap_or(Device::Cpu);
        let spectral = crate::spectral::planner::plan(grid, case.flow.nu, &spectral_device)
            .with_context(|| format!("case `{}`: [spectral]", case.name))?;
        let vortex = match (&case.vortex, particles, &plan.evaluator) {
            (Some(vc), Some((p, initial_solve)), Some(recipe)) => {
                let solver = crate::run::particle_solver::particle_stepper(case, recipe, p, true)?;
                Some(VortexSide {
                    solver,
                    sigma0: vc.sigma0(),
                    initial_solve,
                    meter: DissipationMeter::new(vc.dissipation_every.unwrap_or(1)),
                })
            }
            _ => None,
        };
        Ok(FieldModel {
            spectral,
            vortex,
            nu: case.flow.nu,
            timings: BTreeMap::new(),
            vortex_stats: None,
            last_energy: f64::NAN,
        })
    }

    fn add_time(&mut self, stage: &'static str, since: Instant) {
        *self.timings.entry(stage).or_insert(0.0) += since.elapsed().as_secs_f64();
    }

    /// Diagnostics of the particle field on the spectral solver's N³ grid (the same code as the
    /// spectral side): stats, shell spectrum, max |∇·u|, max |ω|; computed once per state.
    fn vortex_stats(&mut self) -> Result<Option<VortexStats>> {
        if self.vortex_stats.is_none() {
            let n = self.spectral.grid().n;
            let nu = self.nu;
            let Some(v) = &mut self.vortex else {
                return Ok(None);
            };
            let t0 = Instant::now();
            self.vortex_stats = Some(VortexStats::of(v.solver.as_mut(), n, nu, true)?);
            self.add_time("vortex_diagnostics", t0);
        }
        Ok(self.vortex_stats.clone())
    }
}

/// The particles of a field-defined case at t = 0, when it has a `[vortex]` section: at the n³
/// lattice nodes, from the same initial field as the spectral solver's, strengths by the case's
/// RBF solve (on the host), with the solve's report.
pub fn initial_particles(case: &Case) -> Result<Option<(ParticleSet, Option<SolveReport>)>> {
    let Some(vc) = &case.vortex else {
        return Ok(None);
    };
    let layout = ModeLayout::new(grid_kmax(vc.n));
    let modes = initial_modes(&case.initial, &layout).with_context(|| {
        format!(
            "case `{}`: initial field on the particle lattice",
            case.name
        )
    })?;
    Ok(Some(particles_from_modes(
        &layout,
        &modes,
        vc.n,
        vc.overlap,
        vc.rbf,
        vc.conditioning,
    )))
}

impl Model for FieldModel {
    fn initial(case: &Case, plan: &mut RunPlan) -> Result<Self> {
        let grid = spectral_grid(case)?;
        let particles = initial_particles(case)?;
        let mut model = FieldModel::build(case, plan, particles)?;
        let modes = initial_modes(&case.initial, &grid.layout())
            .with_context(|| format!("case `{}`: initial condition", case.name))?;
        model
            .spectral
            .set_velocity_modes(modes)
            .with_context(|| format!("case `{}`: the initial field", case.name))?;
        Ok(model)
    }

    fn for_restore(case: &Case, plan: &mut RunPlan) -> Result<Self> {
        let particles = case.vortex.as_ref().map(|_| (ParticleSet::default(), None));
        FieldModel::build(case, plan, particles)
    }

    fn callbacks(case: &Case) -> Vec<ScheduledCallback<Self>> {
        let with_vortex = case.vortex.is_some();
        vec![
            ScheduledCallback::new(
                "output",
                Scheduled::new(Schedule::from(case.output.cadence), true),
                EnergyWriter { with_vortex },
            ),
            ScheduledCallback::new(
                "spectra",
                Scheduled::new(
                    Schedule::SpecifiedTimes {
                        times: case.output.spectra_times.clone(),
                        scale: case.time.t_end,
                    },
                    false,
                ),
                SpectraWriter { with_vortex },
            ),
            ScheduledCallback::new(
                "fields",
                Scheduled::new(
                    Schedule::SpecifiedTimes {
                        times: case.output.fields_times.clone(),
                        scale: case.time.t_end,
                    },
                    false,
                ),
                FieldsWriter {
                    stride: case.output.fields_stride,
                    precision: case.output.fields_precision,
                    plot: crate::run::options::plot_options(case),
                    title: case.name.clone(),
                },
            ),
        ]
    }

    fn stable_dt(&mut self, cfl: f64) -> Result<f64, StepFailure> {
        let mut dt = self
            .spectral
            .cfl_dt(cfl)
            .map_err(|e| StepFailure::new(format!("spectral solver: {e}")))?;
        // Both solvers step together: the particles' limits apply too.
        if let Some(v) = &mut self.vortex {
            let t0 = Instant::now();
            let dt_vortex = v
                .solver
                .stable_dt(cfl)
                .map_err(|e| StepFailure::new(format!("vortex solver: {e}")).caused_by(&e))?;
            dt = dt.min(dt_vortex);
            self.add_time("vortex_time_stepping", t0);
        }
        Ok(dt)
    }

    /// Both solvers or neither: the particle step is prepared first and committed only when
    /// the spectral step succeeded. Only the reinitialisation that may follow the commit (and
    /// its measurement, [`reinitialise_measured`]) can fail afterwards; that failure says the
    /// step was committed.
    fn step(&mut self, dt: f64) -> Result<(), StepFailure> {
        self.vortex_stats = None;
        self.last_energy = f64::NAN;
        let vortex_failed =
            |e: VortexError| StepFailure::new(format!("vortex solver: {e}")).caused_by(&e);
        if let Some(v) = &mut self.vortex {
            let t0 = Instant::now();
            let prepared = v.solver.prepare_step(dt);
            *self.timings.entry("vortex_time_stepping").or_insert(0.0) +=
                t0.elapsed().as_secs_f64();
            prepared.map_err(vortex_failed)?;
        }
        let t0 = Instant::now();
        let spectral = self.spectral.step(dt);
        self.add_time("spectral_time_stepping", t0);
        if let Err(e) = spectral {
            if let Some(v) = &mut self.vortex {
                v.solver.discard_step();
            }
            return Err(match e {
                // "rank r (cuda:N) …" leads the manifest's `failed:` status.
                SpectralError::Ranks(why) => StepFailure {
                    advice: Some(crate::spectral::distributed::RANK_FAILED_ADVICE),
                    ..StepFailure::new(why)
                },
                e => StepFailure::new(format!("spectral solver: {e}")),
            });
        }
        let n = self.spectral.grid().n;
        if let Some(v) = &mut self.vortex {
            let t0 = Instant::now();
            let committed = v.solver.commit_step_deferring_reinit();
            *self.timings.entry("vortex_time_stepping").or_insert(0.0) +=
                t0.elapsed().as_secs_f64();
            let after_commit = |e: VortexError| {
                StepFailure::after_commit(format!("vortex solver, after the step: {e}"))
            };
            let due = committed.map_err(after_commit)?;
            v.meter.advance(dt);
            if due {
                self.vortex_stats = reinitialise_measured(v, n, self.nu, &mut self.timings)
                    .map_err(after_commit)?;
            }
        }
        Ok(())
    }

    fn save(&mut self) -> Result<ModelState> {
        let layout = self.spectral.layout();
        let mut arrays = CheckpointArrays::new();
        arrays.push(
            "uhat",
            vec![3, layout.len(), 2],
            flatten_modes(self.spectral.velocity_modes()?),
        );
        let mut state = ModelState {
            arrays,
            meta: serde_json::json!({}),
        };
        if let Some(v) = &mut self.vortex {
            crate::run::particle_solver::save_vortex(v.solver.as_mut(), &mut state)?;
            // The RBF solve the energy rows report (the last one, or the initial one before the
            // first reinitialisation), so that a resumed run writes the same rows.
            state.meta["rbf_report"] =
                serde_json::to_value(v.solver.last_solve().or(v.initial_solve))?;
            state.meta["numerical_dissipation"] = serde_json::to_value(&v.meter)?;
        }
        Ok(state)
    }

    fn restore(&mut self, state: &ModelState) -> Result<()> {
        let layout = self.spectral.layout();
        let (shape, data) = state
            .arrays
            .get("uhat")
            .context("checkpoint has no array `uhat`")?;
        let expected = vec![3, layout.len(), 2];
        if shape != expected.as_slice() {
            let grid = self.spectral.grid();
            bail!(
                "checkpoint array `uhat` has shape {shape:?}, expected {expected:?} for n = {} \
                 with {} dealiasing",
                grid.n,
                grid.dealias
            );
        }
        let mut modes = zero_modes(&layout);
        for (c, comp) in modes.iter_mut().enumerate() {
            for (i, z) in comp.iter_mut().enumerate() {
                let j = 2 * (c * layout.len() + i);
                *z = Complex64::new(data[j], data[j + 1]);
            }
        }
        self.spectral.restore_velocity_modes(modes)?;
        if let Some(v) = &mut self.vortex {
            crate::run::particle_solver::restore_vortex(v.solver.as_mut(), state)?;
            // Checkpoints written before the report was saved have none (the rows then read
            // nan until the next reinitialisation).
            v.initial_solve = match state.meta.get("rbf_report") {
                Some(r) => serde_json::from_value(r.clone()).context("checkpoint `rbf_report`")?,
                None => None,
            };
            // Checkpoints written before the measurements have none: they start afresh.
            if let Some(m) = state.meta.get("numerical_dissipation") {
                v.meter = DissipationMeter::restored(m.clone(), v.meter.every())
                    .context("checkpoint `numerical_dissipation`")?;
            }
        }
        self.vortex_stats = None;
        Ok(())
    }

    fn take_timings(&mut self) -> Vec<(&'static str, f64)> {
        let mut t: Vec<_> = std::mem::take(&mut self.timings).into_iter().collect();
        if let Some(v) = &mut self.vortex {
            // Parts of vortex_time_stepping (and of vortex_diagnostics: outputs and snapshots
            // evaluate the particles' derivatives too).
            let phases = v.solver.take_timings();
            t.push(("vortex_evaluation", phases.evaluation));
            t.push(("vortex_reinit_vorticity", phases.reinit_vorticity));
            t.push(("vortex_reinit_solve", phases.reinit_solve));
            t.push(("vortex_update", phases.update));
        }
        t
    }

    fn progress_figure(&mut self) -> String {
        if self.last_energy.is_nan() {
            self.last_energy = self.spectral.flow_stats().map_or(f64::NAN, |s| s.energy);
        }
        format!("K={:.6e}", self.last_energy)
    }

    fn particles(&mut self) -> Option<&mut dyn ParticleStepper> {
        match &mut self.vortex {
            Some(v) => Some(v.solver.as_mut()),
            None => None,
        }
    }

    fn write_final(&mut self, run_dir: &Path, time: FieldTime) -> Result<()> {
        let n = self.spectral.grid().n;
        let [u, v, w] = self.spectral.velocity_on_grid()?;
        write_velocity_npz(&run_dir.join(FINAL_NPZ), n, [&u, &v, &w], time)?;
        Ok(())
    }

    fn numerical_dissipation(&self) -> Option<NumericalDissipation> {
        self.vortex.as_ref()?.meter.summary()
    }

    fn devices(&self) -> Vec<(&'static str, Device)> {
        let mut d = vec![("spectral", self.spectral.device())];
        if let Some(v) = &self.vortex {
            d.push(("vortex", v.solver.device()));
        }
        d
    }
}

/// The reinitialisation that fell due with a step, measured as the meter plans it: the particle
/// field's diagnostics on the n³ grid just before and just after ([`VortexStats::of`]). Returns
/// those after it when measured: the outputs of this state use them. The measurements' wall
/// time goes to `vortex_dissipation`, the reinitialisation's to `vortex_time_stepping`.
fn reinitialise_measured(
    v: &mut VortexSide,
    n: usize,
    nu: f64,
    timings: &mut BTreeMap<&'static str, f64>,
) -> Result<Option<VortexStats>, VortexError> {
    let plan = v.meter.plan();
    let mut measure = |on: bool, full: bool, solver: &mut dyn ParticleStepper| {
        let t0 = Instant::now();
        let stats = on.then(|| VortexStats::of(solver, n, nu, full)).transpose();
        *timings.entry("vortex_dissipation").or_insert(0.0) += t0.elapsed().as_secs_f64();
        stats
    };
    let before = measure(plan.before, false, v.solver.as_mut())?;
    let t0 = Instant::now();
    let reinitialised = v.solver.reinitialise();
    let seconds = t0.elapsed().as_secs_f64();
    reinitialised?;
    let after = measure(plan.after, true, v.solver.as_mut())?;
    *timings.entry("vortex_time_stepping").or_insert(0.0) += seconds;
    v.meter.record(
        before.as_ref().map(VortexStats::measure),
        after.as_ref().map(VortexStats::measure),
    );
    Ok(after)
}

/// Interleaved (re, im) values of a vector field, component-major.
fn flatten_modes(m: &VectorModes) -> Vec<f64> {
    m.iter()
        .flat_map(|c| c.iter().flat_map(|z| [z.re, z.im]))
        .collect()
}

/// The fields of an `energy.csv` row after (t, step): Δt, the flow statistics, −dK/dt, max|∇·u|,
/// max|ω|.
fn energy_fields(
    dt: f64,
    st: &FlowStats,
    minus_dkdt: f64,
    [div, max_vorticity]: [f64; 2],
) -> Vec<String> {
    [
        dt,
        st.energy,
        st.dissipation,
        st.enstrophy,
        minus_dkdt,
        st.u_rms,
        st.integral_scale,
        st.turnover_time,
        st.taylor_microscale,
        st.re_lambda,
        div,
        max_vorticity,
    ]
    .map(format_f64)
    .to_vec()
}

/// `output`: a row of `spectral/energy.csv`; with particles, a row of `vortex/energy.csv` and
/// the K row of `comparison.csv`.
struct EnergyWriter {
    with_vortex: bool,
}

impl Callback<FieldModel> for EnergyWriter {
    fn logs(&self) -> Vec<LogSpec> {
        let mut logs = vec![LogSpec::new(SPECTRAL_ENERGY_CSV, &ENERGY_COLUMNS)];
        if self.with_vortex {
            logs.push(LogSpec::new(VORTEX_ENERGY_CSV, &vortex_energy_columns()));
            logs.push(LogSpec::new(COMPARISON_CSV, &COMPARISON_COLUMNS));
        }
        logs
    }

    fn call(&mut self, m: &mut FieldModel, ctx: &mut CallContext) -> Result<()> {
        let t0 = Instant::now();
        let st = m.spectral.flow_stats()?;
        let minus_dkdt = -m.spectral.dkdt_from_rhs()?;
        let maxima = [m.spectral.max_divergence()?, m.spectral.max_vorticity()?];
        let mut fields = ctx.time_fields();
        fields.extend(energy_fields(ctx.dt, &st, minus_dkdt, maxima));
        ctx.logs.row_fmt(SPECTRAL_ENERGY_CSV, &fields)?;
        m.last_energy = st.energy;
        m.add_time("diagnostics", t0);
        let Some(vs) = m.vortex_stats()? else {
            return Ok(());
        };
        let v = m.vortex.as_mut().expect("vortex stats come from particles");
        let solve = v.solver.last_solve().or(v.initial_solve);
        let sigma0 = v.sigma0;
        let summary = v.solver.summary()?;
        let (sigma_max, total, impulse) =
            (summary.sigma_max, summary.total_strength, summary.impulse);
        let report = v.meter.row(ctx.t, vs.measure());
        tracing::debug!("{}", v.meter.summary().expect("a row was just added"));
        let mut fields = ctx.time_fields();
        fields.extend(energy_fields(
            ctx.dt,
            &vs.stats,
            report.minus_dkdt,
            [vs.max_div, vs.max_vorticity],
        ));
        fields.push(format_f64(sigma_max / sigma0));
        fields.push(solve.map_or("nan".into(), |r| r.iterations.to_string()));
        fields.push(solve.map_or("nan".into(), |r| format_f64(r.relative_residual)));
        fields.extend(
            [
                (total[0].powi(2) + total[1].powi(2) + total[2].powi(2)).sqrt(),
                impulse[0],
                impulse[1],
                impulse[2],
            ]
            .map(format_f64),
        );
        fields.push(summary.count.to_string());
        fields.extend(report.dissipation_fields());
        ctx.logs.row_fmt(VORTEX_ENERGY_CSV, &fields)?;
        ctx.logs.row_fmt(
            COMPARISON_CSV,
            &[
                format_f64(ctx.t),
                "K".into(),
                "0".into(),
                format_f64(st.energy),
                format_f64(vs.stats.energy),
                format_f64(relative_difference(st.energy, vs.stats.energy, st.energy)),
            ],
        )?;
        Ok(())
    }
}

/// `spectra`: the shell spectrum of each solver, and the E rows of `comparison.csv`.
struct SpectraWriter {
    with_vortex: bool,
}

impl Callback<FieldModel> for SpectraWriter {
    fn logs(&self) -> Vec<LogSpec> {
        let mut logs = vec![LogSpec::new(SPECTRAL_SPECTRA_CSV, &SPECTRA_COLUMNS)];
        if self.with_vortex {
            logs.push(LogSpec::new(VORTEX_SPECTRA_CSV, &SPECTRA_COLUMNS));
        }
        logs
    }

    fn call(&mut self, m: &mut FieldModel, ctx: &mut CallContext) -> Result<()> {
        let t0 = Instant::now();
        let spectrum = m.spectral.shell_spectrum()?;
        let energy = m.spectral.flow_stats()?.energy;
        let t = format_f64(ctx.t);
        for (k, e) in spectrum.iter().enumerate() {
            ctx.logs.row_fmt(
                SPECTRAL_SPECTRA_CSV,
                &[t.clone(), k.to_string(), format_f64(*e)],
            )?;
        }
        m.add_time("diagnostics", t0);
        let Some(vs) = m.vortex_stats()? else {
            return Ok(());
        };
        for (k, e) in vs.spectrum.iter().enumerate() {
            ctx.logs.row_fmt(
                VORTEX_SPECTRA_CSV,
                &[t.clone(), k.to_string(), format_f64(*e)],
            )?;
        }
        for (k, (a, b)) in spectrum.iter().zip(&vs.spectrum).enumerate().skip(1) {
            ctx.logs.row_fmt(
                COMPARISON_CSV,
                &[
                    t.clone(),
                    "E".into(),
                    k.to_string(),
                    format_f64(*a),
                    format_f64(*b),
                    format_f64(relative_difference(*a, *b, energy)),
                ],
            )?;
        }
        Ok(())
    }
}

/// `fields`: velocity, vorticity and Q of the spectral solver and, with particles, of the
/// particle velocity sampled at the same N³ nodes ([`grid_fields`], docs/physics.md §6.2),
/// written under `fields/` ([`write_fields`]); then the structures and vorticity pictures of
/// that time ([`postprocess::plot_fields_at`]). The fields are pulled from a GPU only here.
struct FieldsWriter {
    stride: usize,
    precision: FieldPrecision,
    plot: postprocess::PlotOptions,
    title: String,
}

impl FieldsWriter {
    fn write(&self, solver: &str, fields: &GridFields, ctx: &CallContext) -> Result<()> {
        let frame = FieldsFrame {
            solver,
            t: ctx.t,
            step: ctx.step,
            stride: self.stride,
            precision: self.precision,
            fields,
        };
        write_fields(ctx.run_dir, &frame)?;
        Ok(())
    }
}

impl Callback<FieldModel> for FieldsWriter {
    fn call(&mut self, m: &mut FieldModel, ctx: &mut CallContext) -> Result<()> {
        let t0 = Instant::now();
        let n = m.spectral.grid().n;
        let layout = m.spectral.layout();
        let spectral = {
            let modes = m.spectral.velocity_modes()?;
            grid_fields(&mut Fft3d::new(n, layout), modes)
        };
        self.write(postprocess::layout::SPECTRAL_DIR, &spectral, ctx)?;
        drop(spectral);
        if let Some(v) = &mut m.vortex {
            let (layout, modes) = v.solver.velocity_modes_on_grid(n)?;
            let vortex = grid_fields(&mut Fft3d::new(n, layout), &modes);
            self.write(postprocess::layout::VORTEX_DIR, &vortex, ctx)?;
        }
        m.add_time("fields", t0);
        // The pictures can be redrawn from the files (`vpm plot`): a failure is not the run's.
        let t0 = Instant::now();
        match postprocess::plot_fields_at(ctx.run_dir, ctx.step, &self.title, &self.plot) {
            Ok(paths) => {
                for p in paths {
                    tracing::debug!("wrote {}", p.display());
                }
            }
            Err(e) => tracing::warn!("the pictures of step {}: {e:#}", ctx.step),
        }
        m.add_time("pictures", t0);
        Ok(())
    }
}
