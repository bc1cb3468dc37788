//! A run: the model state and physics (the spectral solver), driven in time with output writers
//! and checkpoints on the case's schedules.
//!
//! - Outputs (a row of `energy.csv`) every N steps or every Δt_out of simulated time, spectra at
//!   the listed times, checkpoints every N steps or every T; time-based events are landed on
//!   exactly by shortening the step that would cross them, and t_end always is.
//! - A checkpoint holds the exact state, the clock, the schedule counters and the length of every
//!   CSV at that moment; [`Simulation::resume`] truncates the CSVs to those lengths and continues,
//!   so a killed and resumed run writes the same bytes as an uninterrupted one.
//! - A step that produces a non-finite state is not committed: the run stops with a clear error,
//!   after writing a checkpoint of the last good state.

use crate::config::{Cadence, Case, TimeStep, VortexConfig};
use crate::diagnostics::{flow_stats, max_divergence, shell_spectrum, FlowStats};
use crate::init::initial_modes;
use crate::output::{
    format_f64, read_latest_checkpoint, write_atomic, write_checkpoint, write_particle_snapshot,
    write_velocity_npz, CheckpointArrays, CsvLog, Manifest, ParticleSnapshot,
};
use crate::particles::ParticleSet;
use crate::spectral::solver::zero_modes;
use crate::spectral::{Fft3d, ModeLayout, SpectralGrid, SpectralSolver, VectorModes};
use crate::summation::{planner, Boundary, Evaluation};
use crate::vortex::field::{grid_kmax, particles_from_modes};
use crate::vortex::rbf::SolveReport;
use crate::vortex::{VortexClock, VortexSettings, VortexSolver};
use anyhow::{bail, Context, Result};
use num_complex::Complex64;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Columns of `spectral/energy.csv`.
pub const ENERGY_COLUMNS: [&str; 13] = [
    "t",
    "step",
    "dt",
    "K",
    "eps",
    "Z",
    "minus_dKdt",
    "u_rms",
    "L",
    "T",
    "lambda",
    "Re_lambda",
    "max_div",
];
/// Columns of `spectral/spectra.csv`.
pub const SPECTRA_COLUMNS: [&str; 3] = ["t", "k", "E"];

/// Extra columns of `vortex/energy.csv` (after the [`ENERGY_COLUMNS`]; there `minus_dKdt` is
/// `nan`: the particle method has no right-hand side in Fourier space to take it from).
pub const VORTEX_EXTRA_COLUMNS: [&str; 8] = [
    "sigma_max_over_sigma0",
    "rbf_iterations",
    "rbf_residual",
    "total_strength",
    "impulse_x",
    "impulse_y",
    "impulse_z",
    "particles",
];
/// Columns of `comparison.csv`: `quantity` is `K` (k = 0) or `E` (shell k); rel_diff =
/// (vortex − spectral)/spectral.
pub const COMPARISON_COLUMNS: [&str; 6] = ["t", "quantity", "k", "spectral", "vortex", "rel_diff"];

const ENERGY_CSV: &str = "spectral/energy.csv";
const SPECTRA_CSV: &str = "spectral/spectra.csv";
const VORTEX_ENERGY_CSV: &str = "vortex/energy.csv";
const VORTEX_SPECTRA_CSV: &str = "vortex/spectra.csv";
const COMPARISON_CSV: &str = "comparison.csv";

fn vortex_columns() -> Vec<&'static str> {
    ENERGY_COLUMNS
        .iter()
        .chain(VORTEX_EXTRA_COLUMNS.iter())
        .copied()
        .collect()
}

/// Writes `snapshots/particles-<step>.npz/.vtp` (and the .pvd index) for `solver` at (t, step):
/// the particles with the instantaneous f64 velocity and stretching at that state (not the AB2
/// combination; the step that follows reuses them).
pub(crate) fn write_vortex_snapshot(
    run_dir: &Path,
    solver: &mut VortexSolver,
    t: f64,
    step: u64,
) -> Result<()> {
    let (u, dadt) = {
        let (u, s) = solver.derivatives()?;
        (u.to_vec(), s.to_vec())
    };
    let p = solver.particles();
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

/// Where the run is in time and in its schedules. Saved in every checkpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Clock {
    t: f64,
    step: u64,
    /// Index of the next time-based output (its time is index · Δt_out).
    next_output: u64,
    /// Index of the next time-based checkpoint.
    next_checkpoint: u64,
    /// Index into `spectra_times` of the next spectrum to write.
    next_spectrum: usize,
    /// Index of the next time-based particle snapshot.
    next_snapshot: u64,
}

/// Wall time per stage, for the manifest.
#[derive(Default)]
struct StageTimes {
    stepping: f64,
    vortex_stepping: f64,
    vortex_diagnostics: f64,
    diagnostics: f64,
    checkpoints: f64,
}

/// Outcome of [`Simulation::run_to_end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    Finished,
    /// Stopped by `abort_after_steps` (tests only).
    Aborted,
}

/// The vortex particle side of a run with both solvers.
struct VortexRun {
    solver: VortexSolver,
    sigma0: f64,
    energy: CsvLog,
    spectra: CsvLog,
    comparison: CsvLog,
    /// The initial RBF solve, reported until the first reinitialisation.
    initial_solve: Option<SolveReport>,
    scratch: Evaluation,
}

pub struct Simulation {
    case: Case,
    vortex: Option<VortexRun>,
    run_dir: PathBuf,
    solver: SpectralSolver,
    /// Transform on the N^3 solution grid (divergence check).
    grid_fft: Fft3d,
    clock: Clock,
    energy: CsvLog,
    spectra: CsvLog,
    manifest: Manifest,
    times: StageTimes,
    options: RunOptions,
}

impl Simulation {
    /// Sets up a new run in an existing (empty) run directory: writes case.toml, the manifest,
    /// the CSV headers and the t = 0 outputs and checkpoint.
    pub fn start(case: Case, run_dir: &Path, options: RunOptions) -> Result<Self> {
        let t0 = Instant::now();
        write_atomic(&run_dir.join("case.toml"), case.to_toml_string().as_bytes())?;
        let mut manifest = Manifest::new(options.threads);
        manifest.set_status("running");
        manifest.write(run_dir)?;
        let grid = spectral_grid(&case)?;
        let mut solver = SpectralSolver::new(grid, case.flow.nu);
        let modes = initial_modes(&case.initial, &grid.layout())
            .with_context(|| format!("case `{}`: initial condition", case.name))?;
        solver.set_velocity_modes(modes);
        let energy = CsvLog::create(&run_dir.join(ENERGY_CSV), &ENERGY_COLUMNS)?;
        let spectra = CsvLog::create(&run_dir.join(SPECTRA_CSV), &SPECTRA_COLUMNS)?;
        let vortex = match &case.vortex {
            Some(vc) => Some(VortexRun::start(&case, vc, run_dir)?),
            None => None,
        };
        manifest.add_stage_time("setup", t0.elapsed().as_secs_f64());
        let mut sim = Self {
            vortex,
            grid_fft: Fft3d::new(grid.n, grid.layout()),
            case,
            run_dir: run_dir.to_path_buf(),
            solver,
            clock: Clock {
                t: 0.0,
                step: 0,
                next_output: 0,
                next_checkpoint: 0,
                next_spectrum: 0,
                next_snapshot: 0,
            },
            energy,
            spectra,
            manifest,
            times: StageTimes::default(),
            options,
        };
        sim.events_after_step(0.0)?;
        Ok(sim)
    }

    /// Continues a run from its latest checkpoint.
    pub fn resume(run_dir: &Path, options: RunOptions) -> Result<Self> {
        let t0 = Instant::now();
        let case_path = run_dir.join("case.toml");
        let case = Case::from_file(&case_path)?;
        let (step, meta, arrays) = read_latest_checkpoint(run_dir)?.with_context(|| {
            format!(
                "{}: no valid checkpoint to resume from (checkpoints/ is empty or damaged)",
                run_dir.display()
            )
        })?;
        let grid = spectral_grid(&case)?;
        let mut solver = SpectralSolver::new(grid, case.flow.nu);
        let layout = grid.layout();
        let uhat = arrays
            .arrays
            .iter()
            .find(|(name, _, _)| name == "uhat")
            .context("checkpoint has no array `uhat`")?;
        let expected = vec![3, layout.len(), 2];
        if uhat.1 != expected {
            bail!(
                "checkpoint array `uhat` has shape {:?}, expected {:?} for n = {} with {} dealiasing",
                uhat.1,
                expected,
                grid.n,
                grid.dealias
            );
        }
        let mut modes = zero_modes(&layout);
        for (c, comp) in modes.iter_mut().enumerate() {
            for (i, z) in comp.iter_mut().enumerate() {
                let j = 2 * (c * layout.len() + i);
                *z = Complex64::new(uhat.2[j], uhat.2[j + 1]);
            }
        }
        solver.restore_velocity_modes(modes);
        let get_u64 = |k: &str| {
            meta.get(k)
                .and_then(|v| v.as_u64())
                .with_context(|| format!("checkpoint meta.json lacks `{k}`"))
        };
        let clock = Clock {
            t: meta
                .get("t")
                .and_then(|v| v.as_f64())
                .context("checkpoint meta.json lacks `t`")?,
            step: get_u64("step")?,
            next_output: get_u64("next_output")?,
            next_checkpoint: get_u64("next_checkpoint")?,
            next_spectrum: get_u64("next_spectrum")? as usize,
            next_snapshot: get_u64("next_snapshot")?,
        };
        if clock.step != step {
            bail!(
                "checkpoint step {step} disagrees with its meta.json ({})",
                clock.step
            );
        }
        let csv_len = |name: &str| {
            meta.get("csv")
                .and_then(|c| c.get(name))
                .and_then(|v| v.as_u64())
                .with_context(|| format!("checkpoint meta.json lacks the length of {name}"))
        };
        let energy = CsvLog::reopen_truncated(
            &run_dir.join(ENERGY_CSV),
            &ENERGY_COLUMNS,
            csv_len(ENERGY_CSV)?,
        )?;
        let spectra = CsvLog::reopen_truncated(
            &run_dir.join(SPECTRA_CSV),
            &SPECTRA_COLUMNS,
            csv_len(SPECTRA_CSV)?,
        )?;
        let vortex = match &case.vortex {
            Some(vc) => {
                let mut solver = vortex_solver(&case, vc, ParticleSet::default())?;
                let clock: VortexClock = serde_json::from_value(
                    meta.get("vortex_clock")
                        .cloned()
                        .context("checkpoint meta.json lacks `vortex_clock`")?,
                )
                .context("checkpoint meta.json: `vortex_clock`")?;
                solver
                    .restore_state(
                        |name| {
                            arrays
                                .arrays
                                .iter()
                                .find(|(n, _, _)| n == name)
                                .map(|(_, _, d)| d.clone())
                        },
                        clock,
                    )
                    .map_err(|e| anyhow::anyhow!("checkpoint step {step}: {e}"))?;
                Some(VortexRun {
                    solver,
                    sigma0: vc.sigma0(),
                    energy: CsvLog::reopen_truncated(
                        &run_dir.join(VORTEX_ENERGY_CSV),
                        &vortex_columns(),
                        csv_len(VORTEX_ENERGY_CSV)?,
                    )?,
                    spectra: CsvLog::reopen_truncated(
                        &run_dir.join(VORTEX_SPECTRA_CSV),
                        &SPECTRA_COLUMNS,
                        csv_len(VORTEX_SPECTRA_CSV)?,
                    )?,
                    comparison: CsvLog::reopen_truncated(
                        &run_dir.join(COMPARISON_CSV),
                        &COMPARISON_COLUMNS,
                        csv_len(COMPARISON_CSV)?,
                    )?,
                    initial_solve: None,
                    scratch: Evaluation::default(),
                })
            }
            None => None,
        };
        let mut manifest =
            Manifest::read(run_dir).unwrap_or_else(|_| Manifest::new(options.threads));
        manifest.record_resume(step);
        manifest.set_status("running");
        manifest.add_stage_time("setup", t0.elapsed().as_secs_f64());
        manifest.write(run_dir)?;
        Ok(Self {
            vortex,
            grid_fft: Fft3d::new(grid.n, layout),
            case,
            run_dir: run_dir.to_path_buf(),
            solver,
            clock,
            energy,
            spectra,
            manifest,
            times: StageTimes::default(),
            options,
        })
    }

    pub fn case(&self) -> &Case {
        &self.case
    }

    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    pub fn time(&self) -> f64 {
        self.clock.t
    }

    pub fn step_count(&self) -> u64 {
        self.clock.step
    }

    pub fn is_finished(&self) -> bool {
        self.clock.t >= self.case.time.t_end
    }

    /// The time of the next event the clock must land on exactly.
    fn next_event_time(&self) -> f64 {
        let mut te = self.case.time.t_end;
        if let Cadence::Time(d) = self.case.output.cadence {
            te = te.min(self.clock.next_output as f64 * d);
        }
        if let Cadence::Time(d) = self.case.checkpoint.cadence {
            te = te.min(self.clock.next_checkpoint as f64 * d);
        }
        if let Some(&ts) = self.case.output.spectra_times.get(self.clock.next_spectrum) {
            te = te.min(ts);
        }
        if let Some(Cadence::Time(d)) = self.snapshot_cadence() {
            te = te.min(self.clock.next_snapshot as f64 * d);
        }
        te
    }

    /// The particle snapshot schedule, if the case has one.
    fn snapshot_cadence(&self) -> Option<Cadence> {
        self.case.vortex.as_ref().and_then(|v| v.snapshots)
    }

    /// Runs until t_end (or until `abort_after_steps`), writing outputs on schedule, then the
    /// final field, the manifest and the plots.
    pub fn run_to_end(&mut self) -> Result<RunEnd> {
        let t_end = self.case.time.t_end;
        let mut progress = Progress::new(self.options.progress, t_end, self.clock.t);
        let mut steps_here = 0u64;
        let started = Instant::now();
        while self.clock.t < t_end {
            let mut dt = match self.case.time.step {
                TimeStep::Fixed { dt } => dt,
                TimeStep::Cfl { cfl, dt_max } => {
                    let mut dt = self.solver.cfl_dt(cfl).min(dt_max.unwrap_or(f64::INFINITY));
                    // Both solvers step together: the particles' limits apply too.
                    if let Some(v) = &mut self.vortex {
                        match v.solver.stable_dt(cfl) {
                            Ok(dt_vortex) => dt = dt.min(dt_vortex),
                            Err(e) => return Err(self.stop_on_vortex_failure(&e.to_string())),
                        }
                    }
                    dt
                }
            };
            if !(dt.is_finite() && dt > 0.0) {
                // A CFL step with u = 0 everywhere: nothing moves, step to the next event.
                dt = t_end - self.clock.t;
            }
            let te = self.next_event_time();
            // Land on the event when this step reaches it, allowing for round-off in t.
            let landing = te - self.clock.t <= dt * (1.0 + 1e-6);
            if landing {
                dt = te - self.clock.t;
            }
            let ts = Instant::now();
            if let Err(e) = self.solver.step(dt) {
                self.times.stepping += ts.elapsed().as_secs_f64();
                return Err(self.stop_on_bad_state(&e.to_string()));
            }
            self.times.stepping += ts.elapsed().as_secs_f64();
            if let Some(v) = &mut self.vortex {
                let tv = Instant::now();
                let res = v.solver.step(dt);
                self.times.vortex_stepping += tv.elapsed().as_secs_f64();
                if let Err(e) = res {
                    return Err(self.stop_on_vortex_failure(&e.to_string()));
                }
            }
            self.clock.step += 1;
            self.clock.t = if landing { te } else { self.clock.t + dt };
            self.events_after_step(dt)?;
            steps_here += 1;
            let energy = format!("K={:.6e}", self.last_energy());
            progress.update(
                self.clock.step,
                self.clock.t,
                dt,
                &energy,
                started,
                steps_here,
            );
            if Some(steps_here) == self.options.abort_after_steps {
                progress.finish();
                return Ok(RunEnd::Aborted);
            }
        }
        progress.finish();
        self.finish()?;
        Ok(RunEnd::Finished)
    }

    fn last_energy(&self) -> f64 {
        flow_stats(&self.solver.layout(), self.solver.velocity_modes(), 0.0).energy
    }

    /// Outputs, spectra and checkpoints due at the current clock (after a step of size `dt`).
    fn events_after_step(&mut self, dt: f64) -> Result<()> {
        let t = self.clock.t;
        let t_end = self.case.time.t_end;
        let step = self.clock.step;
        let at_end = t >= self.case.time.t_end;
        let output_due = at_end
            || match self.case.output.cadence {
                Cadence::Steps(n) => step % n == 0,
                Cadence::Time(d) => reached(t, self.clock.next_output as f64 * d, d),
            };
        let spectrum_due = self
            .case
            .output
            .spectra_times
            .get(self.clock.next_spectrum)
            .is_some_and(|&ts| reached(t, ts, t_end));
        let checkpoint_due = at_end
            || match self.case.checkpoint.cadence {
                Cadence::Steps(n) => step % n == 0,
                Cadence::Time(d) => reached(t, self.clock.next_checkpoint as f64 * d, d),
            };
        let td = Instant::now();
        let mut spectral_energy = None;
        if output_due {
            spectral_energy = Some(self.write_energy_row(dt)?);
            if let Cadence::Time(d) = self.case.output.cadence {
                self.clock.next_output = (t / d + 1e-9).floor() as u64 + 1;
            }
        }
        let mut spectral_spectrum = None;
        if spectrum_due {
            let e = shell_spectrum(&self.solver.layout(), self.solver.velocity_modes());
            spectral_spectrum = Some(e.clone());
            for (k, ek) in e.iter().enumerate() {
                self.spectra
                    .append_row_fmt(&[format_f64(t), k.to_string(), format_f64(*ek)])?;
            }
            while self
                .case
                .output
                .spectra_times
                .get(self.clock.next_spectrum)
                .is_some_and(|&ts| reached(t, ts, t_end))
            {
                self.clock.next_spectrum += 1;
            }
        }
        self.times.diagnostics += td.elapsed().as_secs_f64();
        if output_due || spectrum_due {
            let tv = Instant::now();
            self.write_vortex_outputs(dt, spectral_energy, spectral_spectrum.as_deref())?;
            self.times.vortex_diagnostics += tv.elapsed().as_secs_f64();
        }
        let snapshot_due = match self.snapshot_cadence() {
            Some(Cadence::Steps(n)) => step % n == 0,
            Some(Cadence::Time(d)) => reached(t, self.clock.next_snapshot as f64 * d, d),
            None => false,
        };
        if snapshot_due {
            if let Some(Cadence::Time(d)) = self.snapshot_cadence() {
                self.clock.next_snapshot = (t / d + 1e-9).floor() as u64 + 1;
            }
            self.write_particle_snapshot()?;
        }
        if checkpoint_due {
            if let Cadence::Time(d) = self.case.checkpoint.cadence {
                self.clock.next_checkpoint = (t / d + 1e-9).floor() as u64 + 1;
            }
            self.write_checkpoint()?;
        }
        Ok(())
    }

    /// Writes a row of spectral/energy.csv; returns K.
    fn write_energy_row(&mut self, dt: f64) -> Result<f64> {
        let layout = self.solver.layout();
        let nu = self.solver.nu();
        let st = flow_stats(&layout, self.solver.velocity_modes(), nu);
        let minus_dkdt = -self.solver.dkdt_from_rhs();
        let div = max_divergence(&mut self.grid_fft, self.solver.velocity_modes());
        let c = &self.clock;
        let mut fields = vec![format_f64(c.t), c.step.to_string()];
        fields.extend(
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
            ]
            .map(format_f64),
        );
        self.energy.append_row_fmt(&fields)?;
        Ok(st.energy)
    }

    /// The vortex side's rows at an output or spectrum time, and the comparison rows.
    fn write_vortex_outputs(
        &mut self,
        dt: f64,
        spectral_energy: Option<f64>,
        spectral_spectrum: Option<&[f64]>,
    ) -> Result<()> {
        let Some(v) = &mut self.vortex else {
            return Ok(());
        };
        let (t, step) = (self.clock.t, self.clock.step);
        let n = self.solver.grid().n;
        let (st, spectrum, div) = v.stats(n, self.case.flow.nu)?;
        // Relative difference; undefined (nan) where the spectral value is round-off (below
        // 1e-14 of K: e.g. empty shells of Taylor–Green).
        let floor = 1e-14 * spectral_energy.unwrap_or(st.energy).abs();
        let rel = |a: f64, b: f64| {
            if a.abs() > floor {
                (b - a) / a
            } else {
                f64::NAN
            }
        };
        if spectral_energy.is_some() {
            let p = v.solver.particles();
            let sigma_max = p.sigma.iter().copied().fold(0.0, f64::max);
            let solve = v.solver.last_solve().or(v.initial_solve);
            let total = p.total_strength();
            let impulse = p.impulse();
            let mut fields = vec![format_f64(t), step.to_string()];
            fields.extend(
                [
                    dt,
                    st.energy,
                    st.dissipation,
                    st.enstrophy,
                    f64::NAN,
                    st.u_rms,
                    st.integral_scale,
                    st.turnover_time,
                    st.taylor_microscale,
                    st.re_lambda,
                    div,
                    sigma_max / v.sigma0,
                ]
                .map(format_f64),
            );
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
            fields.push(p.len().to_string());
            v.energy.append_row_fmt(&fields)?;
        }
        if let Some(k) = spectral_energy {
            v.comparison.append_row_fmt(&[
                format_f64(t),
                "K".into(),
                "0".into(),
                format_f64(k),
                format_f64(st.energy),
                format_f64(rel(k, st.energy)),
            ])?;
        }
        if let Some(es) = spectral_spectrum {
            for (k, ev) in spectrum.iter().enumerate() {
                v.spectra
                    .append_row_fmt(&[format_f64(t), k.to_string(), format_f64(*ev)])?;
            }
            for (k, (a, b)) in es.iter().zip(&spectrum).enumerate().skip(1) {
                v.comparison.append_row_fmt(&[
                    format_f64(t),
                    "E".into(),
                    k.to_string(),
                    format_f64(*a),
                    format_f64(*b),
                    format_f64(rel(*a, *b)),
                ])?;
            }
        }
        Ok(())
    }

    /// `snapshots/particles-<step>.npz/.vtp` with the instantaneous f64 velocity and stretching
    /// at the current state (not the AB2 combination).
    fn write_particle_snapshot(&mut self) -> Result<()> {
        let Some(v) = &mut self.vortex else {
            return Ok(());
        };
        write_vortex_snapshot(&self.run_dir, &mut v.solver, self.clock.t, self.clock.step)
    }

    /// The particle step failed: the spectral state has advanced but the particles have not, so
    /// no new checkpoint is written; the last scheduled checkpoint holds the last good state of
    /// both solvers.
    fn stop_on_vortex_failure(&mut self, why: &str) -> anyhow::Error {
        let msg = format!(
            "vortex solver: {why} in the step after step {} (t = {}); the run stopped. The \
             latest checkpoint in {} holds the last good state of both solvers, and the CSV \
             files hold every row up to the failure.",
            self.clock.step,
            self.clock.t,
            self.run_dir.join("checkpoints").display(),
        );
        self.manifest.set_status(format!("failed: {msg}"));
        self.flush_manifest();
        anyhow::anyhow!(msg)
    }

    fn write_checkpoint(&mut self) -> Result<()> {
        let tc = Instant::now();
        let c = self.clock;
        let meta = json!({
            "step": c.step,
            "t": c.t,
            "next_output": c.next_output,
            "next_checkpoint": c.next_checkpoint,
            "next_spectrum": c.next_spectrum,
            "next_snapshot": c.next_snapshot,
            "csv": {
                ENERGY_CSV: self.energy.len_bytes(),
                SPECTRA_CSV: self.spectra.len_bytes(),
            },
            "case": self.case.name,
        });
        let mut meta = meta;
        let mut arrays = CheckpointArrays {
            arrays: vec![(
                "uhat".to_string(),
                vec![3, self.solver.layout().len(), 2],
                flatten_modes(self.solver.velocity_modes()),
            )],
        };
        if let Some(v) = &self.vortex {
            let (va, vclock) = v.solver.state_arrays();
            arrays.arrays.extend(va);
            meta["vortex_clock"] = serde_json::to_value(vclock)?;
            meta["csv"][VORTEX_ENERGY_CSV] = json!(v.energy.len_bytes());
            meta["csv"][VORTEX_SPECTRA_CSV] = json!(v.spectra.len_bytes());
            meta["csv"][COMPARISON_CSV] = json!(v.comparison.len_bytes());
        }
        write_checkpoint(
            &self.run_dir,
            c.step,
            &meta,
            &arrays,
            self.case.checkpoint.keep,
        )?;
        self.times.checkpoints += tc.elapsed().as_secs_f64();
        Ok(())
    }

    /// The state went non-finite: keep what is on disk, checkpoint the last good state, record
    /// the failure in the manifest and return the error to report.
    fn stop_on_bad_state(&mut self, why: &str) -> anyhow::Error {
        let c = self.clock;
        let saved = self.write_checkpoint();
        let msg = format!(
            "{why} in the step after step {} (t = {}); the run stopped. The last good state \
             (step {}) is {} in {}, and spectral/energy.csv holds every row up to it. Reduce \
             the time step (time.dt or time.cfl) or raise the resolution, then `vpm run` again.",
            c.step,
            c.t,
            c.step,
            if saved.is_ok() {
                "checkpointed"
            } else {
                "NOT checkpointed"
            },
            self.run_dir.join("checkpoints").display(),
        );
        self.manifest.set_status(format!("failed: {msg}"));
        self.flush_manifest();
        anyhow::anyhow!(msg)
    }

    fn flush_manifest(&mut self) {
        let t = std::mem::take(&mut self.times);
        self.manifest.add_stage_time("time_stepping", t.stepping);
        self.manifest.add_stage_time("diagnostics", t.diagnostics);
        self.manifest.add_stage_time("checkpoints", t.checkpoints);
        if let Some(v) = &mut self.vortex {
            self.manifest
                .add_stage_time("vortex_time_stepping", t.vortex_stepping);
            self.manifest
                .add_stage_time("vortex_diagnostics", t.vortex_diagnostics);
            // Parts of vortex_time_stepping (also of vortex_diagnostics: outputs and snapshots
            // evaluate the particles' derivatives too).
            let phases = v.solver.take_timings();
            self.manifest
                .add_stage_time("vortex_evaluation", phases.evaluation);
            self.manifest
                .add_stage_time("vortex_reinit_vorticity", phases.reinit_vorticity);
            self.manifest
                .add_stage_time("vortex_reinit_solve", phases.reinit_solve);
        }
        if let Err(e) = self.manifest.write(&self.run_dir) {
            tracing::warn!("could not write the manifest: {e}");
        }
    }

    /// Final velocity field, manifest and plots.
    fn finish(&mut self) -> Result<()> {
        let tf = Instant::now();
        let n = self.solver.grid().n;
        let [u, v, w] = self.solver.velocity_on_grid();
        write_velocity_npz(&self.run_dir.join("spectral/final.npz"), n, &u, &v, &w)?;
        self.manifest
            .add_stage_time("final_field", tf.elapsed().as_secs_f64());
        let tp = Instant::now();
        let plots = postprocess::plot_run(&self.run_dir, &self.case.name);
        self.manifest
            .add_stage_time("plots", tp.elapsed().as_secs_f64());
        self.manifest.set_status("finished");
        self.flush_manifest();
        plots.context("drawing the plots")?;
        Ok(())
    }

    /// The solver (for inspection in tests and benchmarks).
    pub fn solver(&self) -> &SpectralSolver {
        &self.solver
    }
}

/// The spectral grid of a field-defined case (particle-defined cases run in
/// [`crate::particle_run`]).
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

/// The device the particle solver of a case runs on: `[vortex] device`, else the run's.
pub(crate) fn vortex_device(case: &Case, vc: &VortexConfig) -> Result<crate::device::Device> {
    let request = vc.device.unwrap_or(case.device);
    let (device, note) = crate::device::Device::open(request)
        .with_context(|| format!("case `{}`: [vortex]", case.name))?;
    tracing::info!("vortex device: {note}");
    Ok(device)
}

/// The particle solver of a case (periodic box) around the given particles.
fn vortex_solver(case: &Case, vc: &VortexConfig, particles: ParticleSet) -> Result<VortexSolver> {
    let plan = planner::plan(
        Boundary::Periodic {
            length: std::f64::consts::TAU,
        },
        vc.evaluator,
        &vortex_device(case, vc)?,
        vc.accuracy,
    )
    .with_context(|| format!("case `{}`: [vortex]", case.name))?;
    tracing::info!("vortex evaluator: {}", plan.description);
    let settings = VortexSettings {
        nu: case.flow.nu,
        scheme: vc.stretching,
        reinit_every: vc.reinit_every,
        lattice_n: vc.n,
        sigma0: vc.sigma0(),
        rbf: vc.rbf,
        zero_total_strength: true,
    };
    Ok(VortexSolver::new(particles, plan.evaluator, settings))
}

impl VortexRun {
    /// Particles on the n^3 lattice from the case's initial field (the same field as the
    /// spectral solver's), and the vortex output files.
    fn start(case: &Case, vc: &VortexConfig, run_dir: &Path) -> Result<Self> {
        let layout = ModeLayout::new(grid_kmax(vc.n));
        let modes = initial_modes(&case.initial, &layout).with_context(|| {
            format!(
                "case `{}`: initial field on the particle lattice",
                case.name
            )
        })?;
        let (particles, initial_solve) =
            particles_from_modes(&layout, &modes, vc.n, vc.overlap, vc.rbf);
        Ok(Self {
            solver: vortex_solver(case, vc, particles)?,
            sigma0: vc.sigma0(),
            energy: CsvLog::create(&run_dir.join(VORTEX_ENERGY_CSV), &vortex_columns())?,
            spectra: CsvLog::create(&run_dir.join(VORTEX_SPECTRA_CSV), &SPECTRA_COLUMNS)?,
            comparison: CsvLog::create(&run_dir.join(COMPARISON_CSV), &COMPARISON_COLUMNS)?,
            initial_solve,
            scratch: Evaluation::default(),
        })
    }

    /// Diagnostics of the particle field on the spectral solver's N^3 grid (same code as the
    /// spectral side): stats, shell spectrum, max |∇·u|.
    fn stats(&mut self, n: usize, nu: f64) -> Result<(FlowStats, Vec<f64>, f64)> {
        let (layout, modes) = self.solver.velocity_modes_on_grid(n, &mut self.scratch)?;
        let st = flow_stats(&layout, &modes, nu);
        let mut fft = Fft3d::new(n, layout);
        let div = max_divergence(&mut fft, &modes);
        Ok((st, shell_spectrum(&layout, &modes), div))
    }
}

/// Whether time t has reached an event time, up to round-off relative to the event's scale
/// (its cadence, or t_end). Event times are computed as index × cadence, so two events that
/// coincide in exact arithmetic (3 × 0.1 and 0.3) may differ in the last bit; the landing logic
/// puts the clock on one of them exactly, and both must count as reached there.
pub(crate) fn reached(t: f64, event: f64, scale: f64) -> bool {
    t >= event - 1e-9 * scale
}

/// Interleaved (re, im) values of a vector field, component-major.
fn flatten_modes(m: &VectorModes) -> Vec<f64> {
    m.iter()
        .flat_map(|c| c.iter().flat_map(|z| [z.re, z.im]))
        .collect()
}

/// Progress display: a bar on a terminal, plain lines otherwise.
pub(crate) struct Progress {
    style: ProgressStyle,
    bar: Option<indicatif::ProgressBar>,
    t_end: f64,
    last_line: Instant,
    next_fraction: f64,
}

const BAR_TICKS: u64 = 10_000;

impl Progress {
    pub(crate) fn new(style: ProgressStyle, t_end: f64, t: f64) -> Self {
        let bar = (style == ProgressStyle::Bar).then(|| {
            let b = indicatif::ProgressBar::new(BAR_TICKS);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {percent:>3}% eta {eta} {msg}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            b.set_position((t / t_end * BAR_TICKS as f64) as u64);
            b
        });
        Self {
            style,
            bar,
            t_end,
            last_line: Instant::now(),
            next_fraction: (t / t_end * 20.0).floor() / 20.0 + 0.05,
        }
    }

    /// Reports the clock after a step; `quantity` is a short "name=value" (e.g. the energy).
    pub(crate) fn update(
        &mut self,
        step: u64,
        t: f64,
        dt: f64,
        quantity: &str,
        started: Instant,
        steps: u64,
    ) {
        let per_step = started.elapsed().as_secs_f64() / steps.max(1) as f64;
        let msg = format!(
            "step {step} t={t:.4} dt={dt:.3e} {quantity} {:.1} ms/step",
            per_step * 1e3
        );
        match self.style {
            ProgressStyle::Bar => {
                if let Some(b) = &self.bar {
                    b.set_position((t / self.t_end * BAR_TICKS as f64) as u64);
                    b.set_message(msg);
                }
            }
            ProgressStyle::Lines => {
                let frac = t / self.t_end;
                if frac >= self.next_fraction - 1e-12 || self.last_line.elapsed().as_secs() >= 30 {
                    eprintln!("[{:5.1}%] {msg}", 100.0 * frac);
                    self.last_line = Instant::now();
                    while self.next_fraction <= frac + 1e-12 {
                        self.next_fraction += 0.05;
                    }
                }
            }
            ProgressStyle::Quiet => {}
        }
    }

    pub(crate) fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish();
        }
    }
}

/// A run of either kind: a field-defined flow ([`Simulation`]: the spectral solver, with the
/// particles alongside when the case asks) or a particle-defined one
/// ([`crate::particle_run::ParticleRun`]: vortex ring, tube).
pub enum AnyRun {
    Field(Box<Simulation>),
    Particles(Box<crate::particle_run::ParticleRun>),
}

impl AnyRun {
    /// Starts the run that the case's initial condition calls for.
    pub fn start(case: Case, run_dir: &Path, options: RunOptions) -> Result<Self> {
        Ok(if case.initial.is_particle_defined() {
            AnyRun::Particles(Box::new(crate::particle_run::ParticleRun::start(
                case, run_dir, options,
            )?))
        } else {
            AnyRun::Field(Box::new(Simulation::start(case, run_dir, options)?))
        })
    }

    /// Continues a run from its latest checkpoint.
    pub fn resume(run_dir: &Path, options: RunOptions) -> Result<Self> {
        let case = Case::from_file(&run_dir.join("case.toml"))?;
        Ok(if case.initial.is_particle_defined() {
            AnyRun::Particles(Box::new(crate::particle_run::ParticleRun::resume(
                case, run_dir, options,
            )?))
        } else {
            AnyRun::Field(Box::new(Simulation::resume(run_dir, options)?))
        })
    }

    pub fn run_to_end(&mut self) -> Result<RunEnd> {
        match self {
            AnyRun::Field(s) => s.run_to_end(),
            AnyRun::Particles(p) => p.run_to_end(),
        }
    }

    pub fn case(&self) -> &Case {
        match self {
            AnyRun::Field(s) => s.case(),
            AnyRun::Particles(p) => p.case(),
        }
    }

    pub fn run_dir(&self) -> &Path {
        match self {
            AnyRun::Field(s) => s.run_dir(),
            AnyRun::Particles(p) => p.run_dir(),
        }
    }

    pub fn time(&self) -> f64 {
        match self {
            AnyRun::Field(s) => s.time(),
            AnyRun::Particles(p) => p.time(),
        }
    }

    pub fn step_count(&self) -> u64 {
        match self {
            AnyRun::Field(s) => s.step_count(),
            AnyRun::Particles(p) => p.step_count(),
        }
    }

    pub fn is_finished(&self) -> bool {
        match self {
            AnyRun::Field(s) => s.is_finished(),
            AnyRun::Particles(p) => p.is_finished(),
        }
    }
}
