//! The run core: a generic [`Simulation`] that owns the clock, the Δt that lands exactly on
//! events, the schedules of the output writers, snapshots and checkpoints, the NaN stop, pickup
//! from a checkpoint, signals, and the manifest. Models ([`Model`]) hold the state and the
//! physics; they know nothing about files or schedules.
//!
//! - Time-based events are landed on exactly by shortening the step that would cross them, and
//!   t_end always is.
//! - A checkpoint holds the model's exact state, the clock, every schedule's counter, the
//!   length of every CSV and the resolved case ([`CheckpointMeta`]); a resume truncates the CSVs
//!   to those lengths and continues, so a killed and resumed run writes the same bytes as an
//!   uninterrupted one. The run directory's case.toml is compared with the checkpoint's case key
//!   by key first ([`crate::config::compare`]): a physical key that changed is refused.
//! - A step that fails (a non-finite state) is not committed: the run stops with a clear error
//!   after checkpointing the last good state.
//! - SIGINT or SIGTERM: the step in progress finishes, a checkpoint is written and the run stops
//!   cleanly (`vpm resume` continues it).
//! - A run is finished when its manifest says so, which it does only once the final outputs
//!   (final field, plots) are written: a run stopped or failed after its last step (checkpointed
//!   at t_end) writes them when resumed.

use crate::config::{compare, Case, TimeStep};
use crate::output::{
    check_run_dir_format, checkpoint_meta_path, read_latest_checkpoint, write_atomic,
    write_checkpoint, Manifest, RUN_DIR_FORMAT,
};
use crate::run::callbacks::{CallContext, LogSpec, Logs, ScheduledCallback};
use crate::run::model::{
    is_accuracy_check_failure, Model, ModelState, StepFailure, ACCURACY_CHECK_ADVICE,
};
use crate::run::options::{RunEnd, RunOptions};
use crate::run::progress::Progress;
use crate::run::schedule::{Schedule, Scheduled};
use crate::run::signals::interrupted;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A CFL step below this fraction of t_end stops the run (it would never finish).
pub(crate) const DT_FLOOR_OVER_T_END: f64 = 1e-12;
/// Name of the checkpointer's schedule.
const CHECKPOINT: &str = "checkpoint";
/// Name of the particle-snapshot schedule.
const SNAPSHOTS: &str = "snapshots";

/// `meta.json` of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    /// The run-directory format of the vpm that wrote it ([`RUN_DIR_FORMAT`]): 1 for a
    /// `meta.json` of before the run core, 2 for one without `resolved_case`.
    pub format: u32,
    /// The case's name.
    pub case: String,
    pub step: u64,
    pub t: f64,
    /// The counter (index of the next event) of every time-based schedule, by name.
    pub schedules: BTreeMap<String, u64>,
    /// Byte length of every CSV, by file name.
    pub csv: BTreeMap<String, u64>,
    /// The device each solver ran on ("spectral" → "cpu", "vortex" → "cuda:0").
    pub devices: BTreeMap<String, String>,
    /// The model's own scalars.
    pub model: serde_json::Value,
    /// The resolved case the state was computed with ([`Case::to_toml_string`]); `None` in
    /// checkpoints of format 2 and older.
    #[serde(default)]
    pub resolved_case: Option<String>,
    /// The particle evaluator's method ("ewald", "fmm", …): what `evaluator = "auto"` chose,
    /// kept on resume. `None` without particles and in older checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluator: Option<String>,
}

impl CheckpointMeta {
    /// Reads `meta.json` (at `path`, named in errors) in this layout or in the layout of vpm
    /// before the run core (flat `next_output`, `next_checkpoint`, `next_spectrum`,
    /// `next_snapshot`, `vortex_clock`); a format this vpm does not resume is refused.
    fn from_json(v: serde_json::Value, path: &Path) -> Result<CheckpointMeta> {
        if let Some(format) = v.get("format") {
            let found = format
                .as_u64()
                .and_then(|f| u32::try_from(f).ok())
                .with_context(|| {
                    format!("{}: `format` {format} is not a version", path.display())
                })?;
            check_run_dir_format(path, found)?;
            return serde_json::from_value(v).with_context(|| path.display().to_string());
        }
        #[derive(Deserialize)]
        struct Legacy {
            step: u64,
            t: f64,
            case: String,
            next_output: u64,
            next_checkpoint: u64,
            #[serde(default)]
            next_spectrum: u64,
            #[serde(default)]
            next_snapshot: u64,
            csv: BTreeMap<String, u64>,
            vortex_clock: Option<serde_json::Value>,
        }
        let l: Legacy = serde_json::from_value(v).context("checkpoint meta.json")?;
        let schedules = [
            ("output", l.next_output),
            (CHECKPOINT, l.next_checkpoint),
            ("spectra", l.next_spectrum),
            (SNAPSHOTS, l.next_snapshot),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let model = match l.vortex_clock {
            Some(c) => serde_json::json!({ "vortex_clock": c }),
            None => serde_json::json!({}),
        };
        Ok(CheckpointMeta {
            format: 1,
            case: l.case,
            step: l.step,
            t: l.t,
            schedules,
            csv: l.csv,
            devices: BTreeMap::new(),
            model,
            resolved_case: None,
            evaluator: None,
        })
    }
}

/// Changes a resume makes to the case (recorded in the run's case.toml).
#[derive(Debug, Clone, Default)]
pub struct ResumeChanges {
    /// A later end time (`--t-end`): extends a finished or unfinished run.
    pub t_end: Option<f64>,
    /// Another device for every solver (`--device`).
    pub device: Option<crate::device::DeviceRequest>,
}

/// A run of a model: see the module docs.
pub struct Simulation<M: Model> {
    case: Case,
    run_dir: PathBuf,
    model: M,
    t: f64,
    step: u64,
    callbacks: Vec<ScheduledCallback<M>>,
    snapshots: Option<Scheduled>,
    checkpoints: Scheduled,
    logs: Logs,
    manifest: Manifest,
    options: RunOptions,
    /// Wall seconds of the run core's own stages since the last manifest write.
    stage_seconds: BTreeMap<&'static str, f64>,
    /// Peak device memory in use (bytes) seen on the GPUs the model uses.
    peak_device_bytes: Option<u64>,
    /// The step at which the last checkpoint was written (no second one at the same step).
    last_checkpoint_step: Option<u64>,
    /// The particle evaluator's method (the one `evaluator = "auto"` chose), kept in the
    /// checkpoints so that a resume keeps it.
    evaluator_method: Option<crate::summation::EvaluatorKind>,
    _lock: crate::output::RunLock,
}

fn schedules_of<M: Model>(
    case: &Case,
) -> (Vec<ScheduledCallback<M>>, Option<Scheduled>, Scheduled) {
    let callbacks = M::callbacks(case);
    let snapshots = case
        .vortex
        .as_ref()
        .and_then(|v| v.snapshots)
        .map(|c| Scheduled::new(Schedule::from(c), false));
    let checkpoints = Scheduled::new(Schedule::from(case.checkpoint.cadence), true);
    (callbacks, snapshots, checkpoints)
}

fn log_specs<M>(callbacks: &[ScheduledCallback<M>]) -> Vec<LogSpec> {
    callbacks.iter().flat_map(|c| c.callback.logs()).collect()
}

impl<M: Model> Simulation<M> {
    /// Sets up a new run in an existing (empty) run directory: writes case.toml, the manifest,
    /// the CSV headers and the t = 0 outputs and checkpoint.
    pub fn start(
        case: Case,
        run_dir: &Path,
        options: RunOptions,
        mut plan: crate::run::plan::RunPlan,
        lock: crate::output::RunLock,
    ) -> Result<Self> {
        let t0 = Instant::now();
        write_atomic(
            &run_dir.join(postprocess::layout::CASE_TOML),
            case.to_toml_string().as_bytes(),
        )?;
        let mut manifest = Manifest::new(options.threads);
        manifest.set_status("running");
        manifest.write(run_dir)?;
        let model = match M::initial(&case, &mut plan) {
            Ok(m) => m,
            Err(e) => {
                manifest.set_status(format!("failed: setting up the model: {e:#}"));
                // The error that matters is `e`; a manifest that cannot be written is secondary.
                let _ = manifest.write(run_dir);
                return Err(e);
            }
        };
        let mut sim = Simulation::assemble(case, run_dir, model, options, manifest, lock);
        sim.record_evaluator(&plan);
        match Logs::create(run_dir, &log_specs(&sim.callbacks)) {
            Ok(logs) => sim.logs = logs,
            Err(e) => {
                let e = e.context("creating the CSV logs");
                sim.manifest.set_status(format!("failed: {e:#}"));
                sim.flush_manifest();
                return Err(e);
            }
        }
        sim.record_devices();
        sim.add_time("setup", t0.elapsed().as_secs_f64());
        if let Err(e) = sim.events_or_stop(0.0) {
            if sim.manifest.status == "running" {
                sim.manifest.set_status(format!("failed: {e:#}"));
                sim.flush_manifest();
            }
            return Err(e);
        }
        sim.collect_accuracy_checks();
        Ok(sim)
    }

    /// Continues a run from its latest checkpoint, with the case changes of `changes`.
    pub fn resume(
        case: Case,
        run_dir: &Path,
        options: RunOptions,
        changes: &ResumeChanges,
        lock: crate::output::RunLock,
    ) -> Result<Self> {
        let t0 = Instant::now();
        if let Ok(m) = Manifest::read(run_dir) {
            m.check_format(run_dir)?;
        }
        let (step, meta, arrays) = read_latest_checkpoint(run_dir)?.with_context(|| {
            format!(
                "{}: no valid checkpoint to resume from (checkpoints/ is empty or damaged)",
                run_dir.display()
            )
        })?;
        let meta = CheckpointMeta::from_json(meta, &checkpoint_meta_path(run_dir, step))?;
        if meta.step != step {
            bail!(
                "checkpoint step {step} disagrees with its meta.json ({})",
                meta.step
            );
        }
        // The changed case is written to case.toml only once the resume has been set up.
        let (case, changed_text) = apply_changes(case, run_dir, changes, meta.t)?;
        if case.time.t_end < meta.t {
            bail!(
                "{}: time.t_end = {} is before the latest checkpoint's t = {}; a run cannot end \
                 before the state it has reached: put t_end back to {} or later",
                run_dir.join(postprocess::layout::CASE_TOML).display(),
                crate::console::Short(case.time.t_end),
                crate::console::Short(meta.t),
                crate::console::Short(meta.t)
            );
        }
        let changed_keys = check_case(&case, &meta, run_dir, &options)?;
        let particles = arrays
            .get("particle_sigma")
            .or_else(|| arrays.get(crate::run::gravity::BODY_MASS))
            .map_or(0, |(shape, _)| shape[0]);
        // `evaluator = "auto"` keeps the method it chose at the start (in the checkpoint).
        let planned = keep_evaluator_choice(&case, &meta);
        let mut plan = crate::run::plan::RunPlan::for_resume(&planned, particles)?;
        let mut model = M::for_restore(&planned, &mut plan)?;
        model
            .restore(&ModelState {
                arrays,
                meta: meta.model.clone(),
            })
            .with_context(|| format!("checkpoint step {step}"))?;
        for (solver, device) in model.devices() {
            if let Some(was) = meta.devices.get(solver) {
                if *was != device.label() {
                    say(
                        &options,
                        &format!(
                            "the checkpoint was written with the {solver} solver on {was}; it \
                             resumes on {} (results continue, but not bit for bit as on {was})",
                            device.label()
                        ),
                    );
                }
            }
        }
        let mut manifest =
            Manifest::read(run_dir).unwrap_or_else(|_| Manifest::new(options.threads));
        // Finished: the manifest says so (written after the final outputs) and the end is not
        // moved. A run stopped after its last step resumes at t_end and writes what is missing.
        let complete = manifest.status == "finished" && meta.t >= case.time.t_end;
        let mut sim = Simulation::assemble(case, run_dir, model, options, manifest.clone(), lock);
        sim.record_evaluator(&plan);
        sim.t = meta.t;
        sim.step = step;
        sim.last_checkpoint_step = Some(step);
        let counter = |name: &str| meta.schedules.get(name).copied().unwrap_or(0);
        for c in &mut sim.callbacks {
            c.schedule.next = counter(c.name);
        }
        if let Some(s) = &mut sim.snapshots {
            s.next = counter(SNAPSHOTS);
        }
        sim.checkpoints.next = counter(CHECKPOINT);
        sim.logs = Logs::reopen(run_dir, &log_specs(&sim.callbacks), &meta.csv)?;
        // A finished run keeps the case it ran with (a `--device` alone changes nothing there).
        if let (Some(text), false) = (changed_text, complete) {
            write_atomic(
                &run_dir.join(postprocess::layout::CASE_TOML),
                text.as_bytes(),
            )?;
        }
        // A finished run that is not extended stays as it is (manifest included).
        if !complete {
            manifest.record_resume(step, changed_keys);
            manifest.set_status("running");
            manifest.write(run_dir)?;
            sim.manifest = manifest;
        }
        sim.record_devices();
        sim.add_time("setup", t0.elapsed().as_secs_f64());
        Ok(sim)
    }

    /// Records in the manifest that a resume started the run again at t = 0 (it had no
    /// checkpoint): a resume from step 0.
    pub(crate) fn record_restart(&mut self) {
        self.manifest.record_resume(0, Vec::new());
        self.flush_manifest();
    }

    /// A simulation at t = 0 with the case's schedules and no logs yet.
    fn assemble(
        case: Case,
        run_dir: &Path,
        model: M,
        options: RunOptions,
        manifest: Manifest,
        lock: crate::output::RunLock,
    ) -> Self {
        let (callbacks, snapshots, checkpoints) = schedules_of::<M>(&case);
        Simulation {
            case,
            run_dir: run_dir.to_path_buf(),
            model,
            t: 0.0,
            step: 0,
            callbacks,
            snapshots,
            checkpoints,
            logs: Logs::default(),
            manifest,
            options,
            stage_seconds: BTreeMap::new(),
            peak_device_bytes: None,
            last_checkpoint_step: None,
            evaluator_method: None,
            _lock: lock,
        }
    }

    /// Records the plan's particle evaluator: its method for the checkpoints and, when
    /// `evaluator = "auto"` chose it, the choice with both estimates in the manifest.
    fn record_evaluator(&mut self, plan: &crate::run::plan::RunPlan) {
        if let Some(r) = &plan.evaluator {
            self.evaluator_method = Some(r.method());
            if let Some(c) = &r.choice {
                self.manifest.evaluator_choice = Some(c.to_string());
            }
        }
        if let Some(reason) = plan.gravity_method.as_ref().and_then(|g| g.reason.as_ref()) {
            self.manifest.evaluator_choice = Some(reason.clone());
        }
    }

    pub fn case(&self) -> &Case {
        &self.case
    }

    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    pub fn time(&self) -> f64 {
        self.t
    }

    pub fn step_count(&self) -> u64 {
        self.step
    }

    /// Whether the run is finished: its manifest says so, which it does once the final outputs
    /// are written ([`Simulation::run_to_end`]), not as soon as the clock reaches t_end.
    pub fn is_finished(&self) -> bool {
        self.manifest.status == "finished"
    }

    /// The model (for inspection in tests).
    pub fn model(&mut self) -> &mut M {
        &mut self.model
    }

    fn add_time(&mut self, stage: &'static str, seconds: f64) {
        *self.stage_seconds.entry(stage).or_insert(0.0) += seconds;
    }

    fn record_devices(&mut self) {
        for (solver, device) in self.model.devices() {
            self.manifest
                .devices
                .insert(solver.to_string(), device.describe());
        }
        for (solver, evaluator) in self.model.evaluator_descriptions() {
            self.manifest.evaluators.insert(solver.into(), evaluator);
        }
    }

    /// Moves the evaluator's accuracy checks since the last call into the manifest, stamped
    /// with the step and time of the state in hand (for checks inside a step, the state the
    /// step started from).
    fn collect_accuracy_checks(&mut self) {
        let checks = self.model.take_accuracy_checks();
        for c in checks {
            let mut v = serde_json::to_value(c).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("step".into(), self.step.into());
                o.insert("t".into(), self.t.into());
            }
            self.manifest.accuracy_checks.push(v);
        }
    }

    /// The time of the next event the clock must land on exactly.
    /// An event within round-off of t_end (k·Δ computed one ulp short of it) is t_end itself,
    /// so that the run does not take a step of 1e-17 after it.
    fn next_event_time(&self) -> f64 {
        let t_end = self.case.time.t_end;
        let te = self
            .callbacks
            .iter()
            .map(|c| &c.schedule)
            .chain(self.snapshots.iter())
            .chain(std::iter::once(&self.checkpoints))
            .filter_map(Scheduled::next_time)
            .fold(t_end, f64::min);
        if crate::run::schedule::reached(te, t_end, t_end) {
            t_end
        } else {
            te
        }
    }

    /// The next step: the case's fixed Δt or the model's stable one, shortened to land on the
    /// next event. Returns (Δt, the event time when landing on it).
    fn next_dt(&mut self) -> Result<(f64, Option<f64>)> {
        let t_end = self.case.time.t_end;
        let mut dt = match self.case.time.step {
            TimeStep::Fixed { dt } => dt,
            TimeStep::Cfl { cfl, dt_max } => match self.model.stable_dt(cfl) {
                Ok(dt) => {
                    let dt = dt.min(dt_max.unwrap_or(f64::INFINITY));
                    if dt.is_finite() && dt > 0.0 {
                        crate::output::CflSteps::record(&mut self.manifest.cfl_steps, dt, self.t);
                    }
                    dt
                }
                Err(f) => {
                    self.collect_accuracy_checks();
                    return Err(self.stop_on_failure(&f, Failed::Step));
                }
            },
        };
        if !(dt.is_finite() && dt > 0.0) {
            // A CFL step with nothing moving: step to the next event.
            dt = t_end - self.t;
        } else if dt < DT_FLOOR_OVER_T_END * t_end {
            let f = StepFailure::new(format!(
                "the CFL time step fell to Δt = {dt:e}, below {DT_FLOOR_OVER_T_END:e}·t_end = \
                 {:e}: the flow is under-resolved or blowing up and the run would not finish",
                DT_FLOOR_OVER_T_END * t_end
            ));
            return Err(self.stop_on_failure(&f, Failed::Step));
        }
        let te = self.next_event_time();
        // Land on the event when this step reaches it, allowing for round-off in t.
        if te - self.t <= dt * (1.0 + 1e-6) {
            Ok((te - self.t, Some(te)))
        } else {
            Ok((dt, None))
        }
    }

    /// Runs until t_end (or a signal, `time.max_steps`, or `abort_after_steps`), writing outputs
    /// on schedule, then the final outputs, the manifest and the plots. Any error leaves the
    /// manifest saying so (`failed: …`), never `running`.
    pub fn run_to_end(&mut self) -> Result<RunEnd> {
        let r = self.run_loop();
        if let Err(e) = &r {
            if self.manifest.status == "running" {
                // A failed rank of a group of GPUs is the cause of whatever failed after it.
                let cause = self
                    .model
                    .devices()
                    .into_iter()
                    .find_map(|(_, d)| d.group().and_then(|g| g.failure()));
                let msg = match cause {
                    Some(rank) if !format!("{e:#}").starts_with(&rank) => {
                        format!("{rank}; then: {e:#}")
                    }
                    _ => format!("{e:#}"),
                };
                self.manifest.set_status(format!("failed: {msg}"));
                self.flush_manifest();
            }
        }
        r
    }

    fn run_loop(&mut self) -> Result<RunEnd> {
        let t_end = self.case.time.t_end;
        let mut progress = Progress::new(self.options.progress, t_end, self.t);
        let mut steps_here = 0u64;
        let started = Instant::now();
        while self.t < t_end {
            if interrupted() {
                // A signal during setup or during the last step's outputs.
                progress.finish();
                self.stop_on_signal()?;
                return Ok(RunEnd::Interrupted);
            }
            if let Some(max) = self.case.time.max_steps {
                if self.step >= max {
                    progress.finish();
                    return Err(self.stop_at_max_steps(max));
                }
            }
            let (dt, landing) = self.next_dt()?;
            crate::run::signals::set_step_in_progress(self.step + 1);
            if Some(steps_here + 1) == self.options.signal_in_step {
                crate::run::signals::raise_interrupt()?;
            }
            let ts = Instant::now();
            let stepped = self.model.step(dt);
            self.add_time("time_stepping", ts.elapsed().as_secs_f64());
            self.collect_accuracy_checks();
            if let Err(f) = stepped {
                progress.finish();
                if f.committed {
                    // The step itself was committed and what followed it failed (a
                    // reinitialisation): the state is the one after this step.
                    self.step += 1;
                    self.t = landing.unwrap_or(self.t + dt);
                }
                return Err(self.stop_on_failure(&f, Failed::Step));
            }
            self.step += 1;
            self.t = landing.unwrap_or(self.t + dt);
            let events = self.events_or_stop(dt);
            self.collect_accuracy_checks();
            if events.is_err() {
                progress.finish();
            }
            events?;
            self.sample_device_memory();
            steps_here += 1;
            let model = &mut self.model;
            progress.update(
                self.step,
                self.t,
                dt,
                || model.progress_figure(),
                started,
                steps_here,
            );
            if interrupted() {
                progress.finish();
                self.stop_on_signal()?;
                return Ok(RunEnd::Interrupted);
            }
            if Some(steps_here) == self.options.abort_after_steps {
                progress.finish();
                return Ok(RunEnd::Aborted);
            }
        }
        progress.finish();
        self.finish()?;
        Ok(RunEnd::Finished)
    }

    /// [`Simulation::events_after_step`]; when an output's evaluation fails its accuracy check
    /// (the FMM against the direct sum), the run stops with the reason in the manifest, as after
    /// a failed step, but without a checkpoint of the state in hand: its outputs are incomplete
    /// (a checkpoint there would resume with an output owed at its own time), so the latest
    /// checkpoint stays the last good state, and `vpm resume` repeats the steps after it.
    fn events_or_stop(&mut self, dt: f64) -> Result<()> {
        match self.events_after_step(dt) {
            Err(e) if e.chain().any(is_accuracy_check_failure) => {
                let f = StepFailure {
                    message: format!("{e:#}"),
                    committed: true,
                    advice: Some(ACCURACY_CHECK_ADVICE),
                };
                self.collect_accuracy_checks();
                Err(self.stop_on_failure(&f, Failed::Output))
            }
            r => r,
        }
    }

    /// Outputs, snapshots and the checkpoint due at the current clock (after a step of `dt`).
    fn events_after_step(&mut self, dt: f64) -> Result<()> {
        let (t, step) = (self.t, self.step);
        let at_end = t >= self.case.time.t_end;
        for c in &mut self.callbacks {
            if c.schedule.is_due(t, step, at_end) {
                let tc = Instant::now();
                let mut ctx = CallContext {
                    t,
                    step,
                    dt,
                    run_dir: &self.run_dir,
                    logs: &mut self.logs,
                };
                c.callback.call(&mut self.model, &mut ctx)?;
                c.schedule.advance_past(t);
                *self.stage_seconds.entry(c.name).or_insert(0.0) += tc.elapsed().as_secs_f64();
            }
        }
        if let Some(s) = &mut self.snapshots {
            if s.is_due(t, step, at_end) {
                s.advance_past(t);
                let ts = Instant::now();
                if let Some(solver) = self.model.particles() {
                    crate::run::particle_solver::write_vortex_snapshot(
                        &self.run_dir,
                        solver,
                        t,
                        step,
                    )?;
                }
                self.add_time(SNAPSHOTS, ts.elapsed().as_secs_f64());
            }
        }
        if self.checkpoints.is_due(t, step, at_end) {
            self.checkpoints.advance_past(t);
            self.write_checkpoint()?;
        }
        Ok(())
    }

    fn write_checkpoint(&mut self) -> Result<()> {
        let tc = Instant::now();
        let state = self.model.save()?;
        let mut schedules: BTreeMap<String, u64> = self
            .callbacks
            .iter()
            .map(|c| (c.name.to_string(), c.schedule.next))
            .collect();
        if let Some(s) = &self.snapshots {
            schedules.insert(SNAPSHOTS.into(), s.next);
        }
        schedules.insert(CHECKPOINT.into(), self.checkpoints.next);
        let meta = CheckpointMeta {
            format: RUN_DIR_FORMAT,
            case: self.case.name.clone(),
            step: self.step,
            t: self.t,
            schedules,
            csv: self.logs.lengths(),
            devices: self
                .model
                .devices()
                .into_iter()
                .map(|(s, d)| (s.to_string(), d.label()))
                .collect(),
            model: state.meta,
            resolved_case: Some(self.case.to_toml_string()),
            evaluator: self.evaluator_method.map(|k| k.as_str().to_string()),
        };
        write_checkpoint(
            &self.run_dir,
            self.step,
            &serde_json::to_value(&meta)?,
            &state.arrays,
            self.case.checkpoint.keep,
        )?;
        self.last_checkpoint_step = Some(self.step);
        self.add_time("checkpoints", tc.elapsed().as_secs_f64());
        Ok(())
    }

    /// Checkpoints the state in hand (unless one was just written at this step); returns
    /// whether the last good state is on disk.
    fn checkpoint_now(&mut self) -> bool {
        if self.last_checkpoint_step == Some(self.step) {
            return true;
        }
        match self.write_checkpoint() {
            Ok(()) => true,
            Err(e) => {
                tracing::error!("could not write the checkpoint: {e:#}");
                false
            }
        }
    }

    /// A failed step: the model's state is the last good one; checkpoint it, record the
    /// failure and return the error to report. After an output's failed evaluation (`what`)
    /// the latest checkpoint is the last good state instead ([`Simulation::events_or_stop`]).
    fn stop_on_failure(&mut self, f: &StepFailure, what: Failed) -> anyhow::Error {
        let checkpoints = self.run_dir.join("checkpoints");
        let advice = f.advice.unwrap_or(
            "Reduce the time step (time.dt or time.cfl) or raise the resolution, then `vpm run` \
             again.",
        );
        let msg = match what {
            Failed::Step => {
                let saved = self.checkpoint_now();
                format!(
                    "{} in the step after step {} (t = {}); the run stopped. The last good state \
                     (step {}) is {} in {}, and the CSV files hold every row up to it. {advice}",
                    f.message,
                    self.step,
                    self.t,
                    self.step,
                    if saved {
                        "checkpointed"
                    } else {
                        "NOT checkpointed"
                    },
                    checkpoints.display(),
                )
            }
            Failed::Output => format!(
                "{} at the output of step {} (t = {}); the run stopped before writing it. {} \
                 {advice}",
                f.message,
                self.step,
                self.t,
                match self.last_checkpoint_step {
                    Some(k) => format!(
                        "The last good state is the latest checkpoint (step {k}) in {}; `vpm \
                         resume` continues from it.",
                        checkpoints.display()
                    ),
                    None => "No checkpoint was written yet.".to_string(),
                },
            ),
        };
        self.manifest.set_status(format!("failed: {msg}"));
        self.flush_manifest();
        anyhow::anyhow!(msg)
    }

    fn stop_at_max_steps(&mut self, max: u64) -> anyhow::Error {
        let saved = self.checkpoint_now();
        let msg = format!(
            "time.max_steps = {max} reached at t = {} (t_end = {}); the run stopped with its \
             state {} in {}. Raise time.max_steps in {} and `vpm resume {}` to go on.",
            self.t,
            self.case.time.t_end,
            if saved {
                "checkpointed"
            } else {
                "NOT checkpointed"
            },
            self.run_dir.join("checkpoints").display(),
            self.run_dir.join(postprocess::layout::CASE_TOML).display(),
            self.run_dir.display(),
        );
        self.manifest.set_status(format!("stopped: {msg}"));
        self.flush_manifest();
        anyhow::anyhow!(msg)
    }

    fn stop_on_signal(&mut self) -> Result<()> {
        let saved = self.checkpoint_now();
        let msg = format!(
            "interrupted at step {} (t = {}); {}",
            self.step,
            self.t,
            if saved {
                "the state is checkpointed"
            } else {
                "the checkpoint could NOT be written; the previous one remains"
            }
        );
        self.manifest.set_status(format!("stopped: {msg}"));
        self.flush_manifest();
        if !saved {
            bail!("{msg}");
        }
        Ok(())
    }

    fn sample_device_memory(&mut self) {
        for (_, device) in self.model.devices() {
            if let Some(gpu) = device.gpu() {
                if let Ok(free) = gpu.free_memory() {
                    let used = (gpu.info().total_memory_bytes as u64).saturating_sub(free as u64);
                    self.peak_device_bytes = Some(self.peak_device_bytes.unwrap_or(0).max(used));
                }
            }
        }
    }

    /// Writes the manifest with the timings and checks gathered since the last write; a failure
    /// is logged (the run goes on; the next write may succeed).
    fn flush_manifest(&mut self) {
        if let Err(e) = self.write_manifest() {
            tracing::warn!("could not write the manifest: {e}");
        }
    }

    /// [`Simulation::flush_manifest`], returning the failure.
    fn write_manifest(&mut self) -> Result<(), crate::output::OutputError> {
        self.collect_accuracy_checks();
        for (stage, s) in std::mem::take(&mut self.stage_seconds) {
            self.manifest.add_stage_time(stage, s);
        }
        for (stage, s) in self.model.take_timings() {
            self.manifest.add_stage_time(stage, s);
        }
        for (_, device) in self.model.devices() {
            if let Some(group) = device.group() {
                self.manifest.ranks = group.rank_records();
            }
        }
        if let Some(p) = self.peak_device_bytes {
            let m = &mut self.manifest.peak_device_memory_bytes;
            *m = Some(m.unwrap_or(0).max(p));
        }
        if let Some(d) = self.model.numerical_dissipation() {
            self.manifest.numerical_dissipation = Some(d);
        }
        if let Some(e) = self.model.energy_conservation() {
            self.manifest.energy_conservation = Some(e);
        }
        self.manifest.write(&self.run_dir)
    }

    /// Final outputs and plots, then the manifest's status `finished`, in that order: a failure
    /// (or a kill) on the way leaves the run unfinished, its status `failed: …` (or `running`),
    /// and `vpm resume` writes them again from the checkpoint at t_end.
    fn finish(&mut self) -> Result<()> {
        let tf = Instant::now();
        let time = crate::output::FieldTime {
            t: self.t,
            step: self.step,
        };
        let written = self.model.write_final(&self.run_dir, time);
        self.add_time("final_field", tf.elapsed().as_secs_f64());
        self.unfinished_if_failed(written, "writing the final field")?;
        let tp = Instant::now();
        // The fields' pictures were drawn as the fields were written (`vpm plot` redraws them).
        let plots = postprocess::plot_run_with(
            &self.run_dir,
            &self.case.name,
            &postprocess::PlotOptions {
                field_pictures: false,
                ..crate::run::options::plot_options(&self.case)
            },
        );
        self.add_time("plots", tp.elapsed().as_secs_f64());
        self.unfinished_if_failed(plots.map(drop), "drawing the plots")?;
        if let Some(d) = self.model.numerical_dissipation() {
            tracing::info!("{d}");
        }
        if let Some(e) = self.model.energy_conservation() {
            tracing::info!("{e}");
        }
        self.manifest.set_status("finished");
        let written = self.write_manifest().map_err(anyhow::Error::from);
        self.unfinished_if_failed(written, "writing the manifest")
    }

    /// A failure of the final outputs (`what`): the manifest says `failed: …` with the way out
    /// (`vpm resume`, which writes them again), and the error says the same.
    fn unfinished_if_failed(&mut self, r: Result<()>, what: &str) -> Result<()> {
        let Err(e) = r else { return Ok(()) };
        let msg = format!(
            "{what} at the end of the run (t = {}, step {}): {e:#}. Every step is done and \
             checkpointed; `vpm resume {}` writes the final outputs once this is fixed.",
            self.t,
            self.step,
            self.run_dir.display()
        );
        self.manifest.set_status(format!("failed: {msg}"));
        self.flush_manifest();
        Err(anyhow::anyhow!(msg))
    }
}

/// The case of a resumed run with `changes` applied and validated, and its new TOML text when
/// it changed (the caller writes it to case.toml once the resume is set up).
pub(crate) fn apply_changes(
    mut case: Case,
    run_dir: &Path,
    changes: &ResumeChanges,
    t: f64,
) -> Result<(Case, Option<String>)> {
    if changes.t_end.is_none() && changes.device.is_none() {
        return Ok((case, None));
    }
    if let Some(t_end) = changes.t_end {
        if !(t_end.is_finite() && t_end > t) {
            bail!("--t-end {t_end}: must be later than the time of the latest checkpoint, t = {t}");
        }
        case.time.t_end = t_end;
        // The new end is a spectrum time (as t_end is by default), and times after it go.
        let o = &mut case.output;
        o.spectra_times.retain(|&ts| ts < t_end);
        o.spectra_times.push(t_end);
        o.fields_times.retain(|&tf| tf <= t_end);
    }
    if let Some(d) = changes.device {
        case.set_device(d);
    }
    let text = case.to_toml_string();
    let case = Case::from_toml_str(
        &text,
        &run_dir
            .join(postprocess::layout::CASE_TOML)
            .display()
            .to_string(),
    )
    .context("the changed case is not valid")?;
    Ok((case, Some(text)))
}

/// Compares `case`, the case a run resumes with, with the case its checkpoint (`meta`) was
/// computed with, key by key ([`compare::check_resumed_case`]): an error naming every physical
/// key that changed; else the changed keys (`"key: old → new"`), said on stderr. A checkpoint
/// without its case (written before vpm stored it) resumes with a warning that the case could
/// not be checked.
fn check_case(
    case: &Case,
    meta: &CheckpointMeta,
    run_dir: &Path,
    options: &RunOptions,
) -> Result<Vec<String>> {
    let file = run_dir
        .join(postprocess::layout::CASE_TOML)
        .display()
        .to_string();
    let origin = format!("<case of checkpoint step {}>", meta.step);
    let stored = match meta.resolved_case.as_deref() {
        Some(text) => Case::from_toml_str(text, &origin).map_err(|e| format!("{e}")),
        None => Err(format!(
            "the checkpoint was written by an older vpm (run-directory format {}), which did \
             not store the case",
            meta.format
        )),
    };
    let stored = match stored {
        Ok(stored) => stored,
        Err(why) => {
            say(
                options,
                &format!(
                    "{file} could not be checked against the case the run was computed with up \
                     to step {} ({why}); make sure its physical keys are those of the run \
                     (cases/README.md, \"Resuming a run\")",
                    meta.step
                ),
            );
            return Ok(Vec::new());
        }
    };
    let changes: Vec<String> =
        compare::check_resumed_case(&stored, case, &file, meta.step, meta.t)?
            .iter()
            .map(ToString::to_string)
            .collect();
    if !changes.is_empty() {
        say(
            options,
            &format!("resuming with the case changed: {}", changes.join("; ")),
        );
    }
    Ok(changes)
}

/// The case to plan a resume with: `case` itself, or with `evaluator = "auto"` the method the
/// checkpoint says it chose at the start (whatever the cost constants say now).
fn keep_evaluator_choice(case: &Case, meta: &CheckpointMeta) -> Case {
    use crate::summation::EvaluatorKind;
    let chosen = meta.evaluator.as_deref().and_then(EvaluatorKind::parse);
    let mut planned = case.clone();
    if let (Some(vc), Some(kind)) = (planned.vortex.as_mut(), chosen) {
        if vc.evaluator == EvaluatorKind::Auto && kind != EvaluatorKind::Auto {
            vc.evaluator = kind;
            tracing::info!(
                "vortex evaluator: evaluator = \"auto\" keeps \"{kind}\", chosen at the start \
                 of the run (checkpoint step {})",
                meta.step
            );
        }
    }
    planned
}

/// Tells the user `msg` on stderr (`vpm: …`) unless the run is quiet, and logs it.
fn say(options: &RunOptions, msg: &str) {
    tracing::debug!("{msg}");
    if options.progress != crate::run::options::ProgressStyle::Quiet {
        crate::say!("vpm: {msg}");
    }
}

/// What failed, for the stop message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failed {
    /// A step (or the stable step before it).
    Step,
    /// An output's evaluation at the state in hand.
    Output,
}

/// The trait object the binary drives: a [`Simulation`] of either model.
pub trait Run {
    fn run_to_end(&mut self) -> Result<RunEnd>;
    fn case(&self) -> &Case;
    fn run_dir(&self) -> &Path;
    fn time(&self) -> f64;
    fn step_count(&self) -> u64;
    fn is_finished(&self) -> bool;
}

impl<M: Model> Run for Simulation<M> {
    fn run_to_end(&mut self) -> Result<RunEnd> {
        Simulation::run_to_end(self)
    }
    fn case(&self) -> &Case {
        Simulation::case(self)
    }
    fn run_dir(&self) -> &Path {
        Simulation::run_dir(self)
    }
    fn time(&self) -> f64 {
        Simulation::time(self)
    }
    fn step_count(&self) -> u64 {
        Simulation::step_count(self)
    }
    fn is_finished(&self) -> bool {
        Simulation::is_finished(self)
    }
}

#[cfg(test)]
mod tests {
    //! The stop after an evaluator's failed accuracy check, with a model that fails on cue (a
    //! real FMM cannot be made to miss its accuracy without tampering with it).
    use super::*;
    use crate::device::Device;
    use crate::run::callbacks::Callback;
    use crate::run::options::ProgressStyle;
    use crate::run::plan::{RunDevices, RunPlan};
    use crate::summation::SummationError;

    /// Fails its step (`fail-step K`) or its output (`fail-output K`) at step K, as the case's
    /// description says, with an accuracy check's error.
    struct Cue {
        step_fails_at: Option<u64>,
        output_fails_at: Option<u64>,
        steps: u64,
    }

    fn cue(case: &Case, what: &str) -> Option<u64> {
        case.description.strip_prefix(what)?.trim().parse().ok()
    }

    fn failed_check() -> SummationError {
        SummationError::AccuracyCheck("the FMM's check at evaluation 7 missed it".into())
    }

    struct Output;

    impl Callback<Cue> for Output {
        fn call(&mut self, m: &mut Cue, _ctx: &mut CallContext) -> Result<()> {
            if Some(m.steps) == m.output_fails_at {
                return Err(crate::vortex::VortexError::from(failed_check()).into());
            }
            Ok(())
        }
    }

    impl Model for Cue {
        fn initial(case: &Case, _: &mut RunPlan) -> Result<Self> {
            Ok(Cue {
                step_fails_at: cue(case, "fail-step"),
                output_fails_at: cue(case, "fail-output"),
                steps: 0,
            })
        }
        fn for_restore(case: &Case, plan: &mut RunPlan) -> Result<Self> {
            Self::initial(case, plan)
        }
        fn callbacks(_: &Case) -> Vec<ScheduledCallback<Self>> {
            let every = Scheduled::new(Schedule::IterationInterval(1), true);
            vec![ScheduledCallback::new("output", every, Output)]
        }
        fn stable_dt(&mut self, _: f64) -> Result<f64, StepFailure> {
            Ok(0.1)
        }
        fn step(&mut self, _: f64) -> Result<(), StepFailure> {
            if Some(self.steps + 1) == self.step_fails_at {
                let e = crate::vortex::VortexError::from(failed_check());
                return Err(StepFailure::new(format!("vortex solver: {e}")).caused_by(&e));
            }
            self.steps += 1;
            Ok(())
        }
        fn save(&mut self) -> Result<ModelState> {
            Ok(ModelState {
                arrays: crate::output::CheckpointArrays::new(),
                meta: serde_json::json!({ "steps": self.steps }),
            })
        }
        fn restore(&mut self, _: &ModelState) -> Result<()> {
            Ok(())
        }
        fn take_timings(&mut self) -> Vec<(&'static str, f64)> {
            Vec::new()
        }
        fn progress_figure(&mut self) -> String {
            String::new()
        }
        fn particles(&mut self) -> Option<&mut dyn crate::vortex::stepper::ParticleStepper> {
            None
        }
        fn write_final(&mut self, _: &Path, _: crate::output::FieldTime) -> Result<()> {
            Ok(())
        }
        fn devices(&self) -> Vec<(&'static str, Device)> {
            Vec::new()
        }
    }

    /// The cue model's case: to t = 1 in steps of 0.1, a checkpoint every 5 steps.
    fn cue_case(description: &str) -> Case {
        let text = format!(
            "description = \"{description}\"\n[flow]\nnu = 0.0\n[initial]\nkind = \
             \"vortex-ring\"\nradius = 1.0\ncirculation = 1.0\ncore = 0.1\n[time]\nt_end = 1.0\n\
             dt = 0.1\n[output]\nevery_steps = 1\n[checkpoint]\nevery_steps = 5\n[vortex]\n\
             n = 104\nevaluator = \"fmm\"\n"
        );
        Case::from_toml_str(&text, "cue.toml").unwrap()
    }

    fn quiet() -> RunOptions {
        RunOptions {
            threads: 1,
            progress: ProgressStyle::Quiet,
            abort_after_steps: None,
            signal_in_step: None,
        }
    }

    /// Runs the cue model ([`cue_case`]); returns the error and the run directory.
    fn run_until_it_fails(description: &str) -> (String, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let plan = RunPlan::without_solvers(RunDevices {
            spectral: None,
            vortex: None,
            gravity: None,
        });
        let lock = crate::output::RunLock::acquire(dir.path(), "test").unwrap();
        let case = cue_case(description);
        let e = match Simulation::<Cue>::start(case, dir.path(), quiet(), plan, lock) {
            Ok(mut sim) => sim.run_to_end().unwrap_err(),
            Err(e) => e,
        };
        (format!("{e:#}"), dir)
    }

    fn latest_checkpoint(dir: &Path) -> Option<u64> {
        read_latest_checkpoint(dir)
            .unwrap()
            .map(|(step, _, _)| step)
    }

    #[test]
    fn a_failed_check_in_a_step_stops_with_the_state_checkpointed() {
        let (e, dir) = run_until_it_fails("fail-step 7");
        assert!(e.contains("missed it in the step after step 6"), "{e}");
        assert!(e.contains(ACCURACY_CHECK_ADVICE), "{e}");
        assert!(!e.contains("Reduce the time step"), "{e}");
        assert_eq!(latest_checkpoint(dir.path()), Some(6));
        let m = Manifest::read(dir.path()).unwrap();
        assert!(m.status.starts_with("failed: ") && m.status.contains("missed it"));
    }

    #[test]
    fn a_failed_check_at_an_output_stops_at_the_latest_checkpoint() {
        let (e, dir) = run_until_it_fails("fail-output 7");
        assert!(e.contains("at the output of step 7"), "{e}");
        assert!(e.contains("latest checkpoint (step 5)"), "{e}");
        assert!(e.contains(ACCURACY_CHECK_ADVICE), "{e}");
        assert_eq!(latest_checkpoint(dir.path()), Some(5));
        let m = Manifest::read(dir.path()).unwrap();
        assert!(m.status.starts_with("failed: ") && m.status.contains("missed it"));
        // At the start (the first evaluation is the t = 0 output's): no checkpoint yet.
        let (e, dir) = run_until_it_fails("fail-output 0");
        assert!(
            e.contains("at the output of step 0") && e.contains("No checkpoint"),
            "{e}"
        );
        assert_eq!(latest_checkpoint(dir.path()), None);
        assert!(Manifest::read(dir.path())
            .unwrap()
            .status
            .starts_with("failed: "));
    }

    #[test]
    fn a_run_is_finished_only_when_its_manifest_says_so() {
        // The cue model writes no CSV, so its plots fail at the end: every step is done and
        // checkpointed at t_end, yet the run is not finished.
        let (e, dir) = run_until_it_fails("");
        assert!(
            e.contains("drawing the plots at the end of the run (t = 1, step 10)"),
            "{e}"
        );
        assert!(
            e.contains("writes the final outputs once this is fixed"),
            "{e}"
        );
        let m = Manifest::read(dir.path()).unwrap();
        assert!(
            m.status.starts_with("failed: drawing the plots"),
            "{}",
            m.status
        );
        assert_eq!(latest_checkpoint(dir.path()), Some(10));
        // Resumed at t_end: not finished; the manifest is running again, the resume recorded.
        let lock = crate::output::RunLock::acquire(dir.path(), "test").unwrap();
        let changes = ResumeChanges::default();
        let sim =
            Simulation::<Cue>::resume(cue_case(""), dir.path(), quiet(), &changes, lock).unwrap();
        assert_eq!((sim.time(), sim.step_count()), (1.0, 10));
        assert!(!sim.is_finished());
        let m = Manifest::read(dir.path()).unwrap();
        assert_eq!(m.status, "running");
        assert_eq!(m.resumes.len(), 1);
    }
}
