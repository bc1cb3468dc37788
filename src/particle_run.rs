//! A run of a particle-defined flow: the vortex particle solver alone, for flows given by their
//! vorticity rather than by a velocity field on the spectral grid (PHYSICS.md §7 checks).
//!
//! * `vortex-ring`: a ring of radius R, circulation Γ and Gaussian core σ in free space (direct
//!   summation). Each output row of `vortex/ring.csv` gives the ring's position Z and speed U,
//!   impulse-weighted over the particles with weights w_p = (x_p × α_p)·ẑ:
//!   Z = Σ w_p z_p / Σ w_p and U = dZ/dt, exact for the particle state ([`ring_diagnostics`]);
//!   the impulse
//!   radius R_I = √(I_z/(πΓ)) with I = ½ Σ x_p × α_p; and Saffman's speed for a Gaussian core,
//!   U_S = Γ/(4πR_I)[ln(8R_I/σ) − 0.9045] with σ² = core² + 2νt.
//! * `vortex-tube`: a straight tube along z through the periodic box (Ewald summation), with
//!   core spreading. Each output writes, for radii r in the core and outside it (≤ 1, away from
//!   the images at distance 2π), the azimuthal velocity u_θ(r) averaged over 8 directions at
//!   z = 0 and the Lamb–Oseen profile with the periodic background (PHYSICS.md §7):
//!   u_θ = Γ/(2πr)(1 − exp(−r²/(2σ²))) − Γr/(2L²), σ² = core² + 2νt, L = 2π.
//!
//! Schedules, checkpoints, byte-exact resume, NaN stop and progress work as in
//! [`crate::simulation`]; the plots are drawn by `postprocess` (ring.png, lamb-oseen.png).

use crate::config::{Cadence, Case, InitialCondition, TimeStep, VortexConfig};
use crate::init::particles::{saffman_ring_speed, vortex_ring, vortex_tube, CoreSampling};
use crate::output::{
    read_latest_checkpoint, write_atomic, write_checkpoint, CheckpointArrays, CsvLog, Manifest,
};
use crate::particles::ParticleSet;
use crate::simulation::{
    reached, vortex_device, write_vortex_snapshot, Progress, RunEnd, RunOptions,
};
use crate::summation::{planner, Boundary, Evaluation};
use crate::vortex::{VortexClock, VortexSettings, VortexSolver};
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::f64::consts::{PI, TAU};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `vortex/ring.csv`.
pub const RING_CSV: &str = "vortex/ring.csv";
/// Columns of `vortex/ring.csv`.
pub const RING_COLUMNS: [&str; 14] = [
    "t",
    "step",
    "dt",
    "z",
    "radius",
    "speed",
    "saffman_speed",
    "core",
    "impulse_x",
    "impulse_y",
    "impulse_z",
    "total_strength",
    "particles",
    "sigma_max_over_sigma0",
];
/// `vortex/lamb_oseen.csv`.
pub const LAMB_OSEEN_CSV: &str = "vortex/lamb_oseen.csv";
/// Columns of `vortex/lamb_oseen.csv` (one row per output time and radius).
pub const LAMB_OSEEN_COLUMNS: [&str; 5] = ["t", "r", "u_theta", "u_exact", "rel_err"];
/// Radii of the Lamb–Oseen profile, in units of the initial core σ0, capped at r = 1.
const PROFILE_RADII_OVER_CORE: [f64; 9] = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0];
/// Largest radius of the Lamb–Oseen profile (the nearest image axis is 2π away).
const PROFILE_R_MAX: f64 = 1.0;
/// Directions per radius averaged for u_θ.
const PROFILE_DIRECTIONS: usize = 8;
/// Core sampling cut-off (units of the sampled core's σ_c).
const CORE_EXTENT: f64 = 3.5;

/// Where the run is in time and in its schedules. Saved in every checkpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Clock {
    t: f64,
    step: u64,
    next_output: u64,
    next_checkpoint: u64,
    next_snapshot: u64,
}

/// The flow and what its diagnostics compare against.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Flow {
    Ring { circulation: f64, core: f64 },
    Tube { circulation: f64, core: f64 },
}

/// A particle-only run (see the module docs).
pub struct ParticleRun {
    case: Case,
    flow: Flow,
    run_dir: PathBuf,
    solver: VortexSolver,
    sigma0: f64,
    clock: Clock,
    log: CsvLog,
    manifest: Manifest,
    options: RunOptions,
    scratch: Evaluation,
    stepping_seconds: f64,
    diagnostics_seconds: f64,
    /// The latest figure for the progress line.
    last_figure: String,
}

fn vortex_config(case: &Case) -> Result<&VortexConfig> {
    case.vortex.as_ref().with_context(|| {
        format!(
            "case `{}`: initial.kind = \"{}\" needs a [vortex] section",
            case.name,
            case.initial.kind_str()
        )
    })
}

fn flow_of(case: &Case) -> Result<Flow> {
    match case.initial {
        InitialCondition::VortexRing {
            circulation, core, ..
        } => Ok(Flow::Ring { circulation, core }),
        InitialCondition::VortexTube { circulation, core } => Ok(Flow::Tube { circulation, core }),
        _ => bail!(
            "case `{}`: initial.kind = \"{}\" is a field; it runs with the spectral solver",
            case.name,
            case.initial.kind_str()
        ),
    }
}

/// The particles of the initial condition: the core of standard deviation `core` is sampled
/// with σ_c = √(core² − σ_p²) so that the blobs (σ_p = overlap·h) add up to it.
pub fn initial_particles(case: &Case) -> Result<ParticleSet> {
    let vc = vortex_config(case)?;
    let sigma_p = vc.sigma0();
    let sampling = CoreSampling {
        spacing: vc.spacing(),
        particle_sigma: sigma_p,
        core_extent: CORE_EXTENT,
    };
    let sampled = |core: f64| -> Result<f64> {
        let v = core * core - sigma_p * sigma_p;
        if v <= 0.0 {
            bail!(
                "case `{}`: initial.core = {core} must exceed the blob radius overlap·h = \
                 {sigma_p}",
                case.name
            );
        }
        Ok(v.sqrt())
    };
    Ok(match case.initial {
        InitialCondition::VortexRing {
            radius,
            circulation,
            core,
        } => vortex_ring(radius, circulation, sampled(core)?, [0.0; 3], &sampling),
        InitialCondition::VortexTube { circulation, core } => {
            vortex_tube(circulation, sampled(core)?, [0.0, 0.0], TAU, &sampling)
        }
        _ => bail!("case `{}`: not a particle-defined flow", case.name),
    })
}

fn solver_for(case: &Case, particles: ParticleSet) -> Result<VortexSolver> {
    let vc = vortex_config(case)?;
    let flow = flow_of(case)?;
    let boundary = match flow {
        Flow::Ring { .. } => Boundary::FreeSpace,
        Flow::Tube { .. } => Boundary::Periodic { length: TAU },
    };
    let plan = planner::plan(
        boundary,
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
        // A single tube or ring carries its own circulation: no Σα = 0 enforcement.
        zero_total_strength: false,
    };
    Ok(VortexSolver::new(particles, plan.evaluator, settings))
}

fn columns(flow: Flow) -> (&'static str, &'static [&'static str]) {
    match flow {
        Flow::Ring { .. } => (RING_CSV, &RING_COLUMNS),
        Flow::Tube { .. } => (LAMB_OSEEN_CSV, &LAMB_OSEEN_COLUMNS),
    }
}

impl ParticleRun {
    /// Sets up a new run in an existing (empty) run directory: case.toml, manifest, CSV header,
    /// the t = 0 outputs and checkpoint.
    pub fn start(case: Case, run_dir: &Path, options: RunOptions) -> Result<Self> {
        let t0 = Instant::now();
        write_atomic(&run_dir.join("case.toml"), case.to_toml_string().as_bytes())?;
        let mut manifest = Manifest::new(options.threads);
        manifest.set_status("running");
        manifest.write(run_dir)?;
        let flow = flow_of(&case)?;
        let particles = initial_particles(&case)?;
        tracing::info!("{} particles", particles.len());
        let solver = solver_for(&case, particles)?;
        std::fs::create_dir_all(run_dir.join("vortex"))
            .with_context(|| format!("creating {}", run_dir.join("vortex").display()))?;
        let (file, cols) = columns(flow);
        let log = CsvLog::create(&run_dir.join(file), cols)?;
        manifest.add_stage_time("setup", t0.elapsed().as_secs_f64());
        let mut run = Self {
            sigma0: vortex_config(&case)?.sigma0(),
            case,
            flow,
            run_dir: run_dir.to_path_buf(),
            solver,
            clock: Clock {
                t: 0.0,
                step: 0,
                next_output: 0,
                next_checkpoint: 0,
                next_snapshot: 0,
            },
            log,
            manifest,
            options,
            scratch: Evaluation::default(),
            stepping_seconds: 0.0,
            diagnostics_seconds: 0.0,
            last_figure: String::new(),
        };
        run.events_after_step(0.0)?;
        Ok(run)
    }

    /// Continues a run from its latest checkpoint (the CSV is truncated to its length then).
    pub fn resume(case: Case, run_dir: &Path, options: RunOptions) -> Result<Self> {
        let t0 = Instant::now();
        let flow = flow_of(&case)?;
        let (step, meta, arrays) = read_latest_checkpoint(run_dir)?.with_context(|| {
            format!(
                "{}: no valid checkpoint to resume from (checkpoints/ is empty or damaged)",
                run_dir.display()
            )
        })?;
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
            next_snapshot: get_u64("next_snapshot")?,
        };
        if clock.step != step {
            bail!(
                "checkpoint step {step} disagrees with its meta.json ({})",
                clock.step
            );
        }
        let mut solver = solver_for(&case, ParticleSet::default())?;
        let vclock: VortexClock = serde_json::from_value(
            meta.get("vortex_clock")
                .cloned()
                .context("checkpoint meta.json lacks `vortex_clock`")?,
        )
        .context("checkpoint meta.json: `vortex_clock`")?;
        solver
            .restore_state(|name| arrays.get(name).map(|(_, d)| d.to_vec()), vclock)
            .map_err(|e| anyhow::anyhow!("checkpoint step {step}: {e}"))?;
        let (file, cols) = columns(flow);
        let len = meta
            .get("csv")
            .and_then(|c| c.get(file))
            .and_then(|v| v.as_u64())
            .with_context(|| format!("checkpoint meta.json lacks the length of {file}"))?;
        let log = CsvLog::reopen_truncated(&run_dir.join(file), cols, len)?;
        let mut manifest =
            Manifest::read(run_dir).unwrap_or_else(|_| Manifest::new(options.threads));
        manifest.record_resume(step);
        manifest.set_status("running");
        manifest.add_stage_time("setup", t0.elapsed().as_secs_f64());
        manifest.write(run_dir)?;
        Ok(Self {
            sigma0: vortex_config(&case)?.sigma0(),
            case,
            flow,
            run_dir: run_dir.to_path_buf(),
            solver,
            clock,
            log,
            manifest,
            options,
            scratch: Evaluation::default(),
            stepping_seconds: 0.0,
            diagnostics_seconds: 0.0,
            last_figure: String::new(),
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

    /// The particles (for tests).
    pub fn particles(&self) -> &ParticleSet {
        self.solver.particles()
    }

    fn snapshot_cadence(&self) -> Option<Cadence> {
        self.case.vortex.as_ref().and_then(|v| v.snapshots)
    }

    fn next_event_time(&self) -> f64 {
        let mut te = self.case.time.t_end;
        let mut at = |cadence: Option<Cadence>, next: u64| {
            if let Some(Cadence::Time(d)) = cadence {
                te = te.min(next as f64 * d);
            }
        };
        at(Some(self.case.output.cadence), self.clock.next_output);
        at(
            Some(self.case.checkpoint.cadence),
            self.clock.next_checkpoint,
        );
        at(self.snapshot_cadence(), self.clock.next_snapshot);
        te
    }

    /// Runs until t_end (or `abort_after_steps`), then the manifest and the plots.
    pub fn run_to_end(&mut self) -> Result<RunEnd> {
        let t_end = self.case.time.t_end;
        let mut progress = Progress::new(self.options.progress, t_end, self.clock.t);
        let mut steps_here = 0u64;
        let started = Instant::now();
        while self.clock.t < t_end {
            let mut dt = match self.case.time.step {
                TimeStep::Fixed { dt } => dt,
                TimeStep::Cfl { cfl, dt_max } => match self.solver.stable_dt(cfl) {
                    Ok(dt) => dt.min(dt_max.unwrap_or(f64::INFINITY)),
                    Err(e) => return Err(self.stop_on_failure(&e.to_string())),
                },
            };
            if !(dt.is_finite() && dt > 0.0) {
                // Nothing moves: step to the next event.
                dt = t_end - self.clock.t;
            }
            let te = self.next_event_time();
            let landing = te - self.clock.t <= dt * (1.0 + 1e-6);
            if landing {
                dt = te - self.clock.t;
            }
            let ts = Instant::now();
            let res = self.solver.step(dt);
            self.stepping_seconds += ts.elapsed().as_secs_f64();
            if let Err(e) = res {
                return Err(self.stop_on_failure(&e.to_string()));
            }
            self.clock.step += 1;
            self.clock.t = if landing { te } else { self.clock.t + dt };
            self.events_after_step(dt)?;
            steps_here += 1;
            progress.update(
                self.clock.step,
                self.clock.t,
                dt,
                &self.last_figure,
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

    fn events_after_step(&mut self, dt: f64) -> Result<()> {
        let (t, step) = (self.clock.t, self.clock.step);
        let at_end = t >= self.case.time.t_end;
        let due = |cadence: Cadence, next: u64| match cadence {
            Cadence::Steps(n) => step % n == 0,
            Cadence::Time(d) => reached(t, next as f64 * d, d),
        };
        let next_index = |cadence: Cadence| match cadence {
            Cadence::Time(d) => Some((t / d + 1e-9).floor() as u64 + 1),
            Cadence::Steps(_) => None,
        };
        let output = self.case.output.cadence;
        if at_end || due(output, self.clock.next_output) {
            let td = Instant::now();
            self.write_output_row(dt)?;
            self.diagnostics_seconds += td.elapsed().as_secs_f64();
            if let Some(i) = next_index(output) {
                self.clock.next_output = i;
            }
        }
        if let Some(cadence) = self.snapshot_cadence() {
            if due(cadence, self.clock.next_snapshot) {
                if let Some(i) = next_index(cadence) {
                    self.clock.next_snapshot = i;
                }
                self.write_snapshot()?;
            }
        }
        let checkpoint = self.case.checkpoint.cadence;
        if at_end || due(checkpoint, self.clock.next_checkpoint) {
            if let Some(i) = next_index(checkpoint) {
                self.clock.next_checkpoint = i;
            }
            self.write_checkpoint()?;
        }
        Ok(())
    }

    /// σ² = core² + 2νt: the core the particles represent at time t (core spreading).
    fn core_now(&self, core: f64) -> f64 {
        (core * core + 2.0 * self.case.flow.nu * self.clock.t).sqrt()
    }

    fn write_output_row(&mut self, dt: f64) -> Result<()> {
        match self.flow {
            Flow::Ring { circulation, core } => {
                let sigma = self.core_now(core);
                let (u, dadt) = {
                    let (u, s) = self.solver.derivatives()?;
                    (u.to_vec(), s.to_vec())
                };
                let p = self.solver.particles();
                let d = ring_diagnostics(p, &u, &dadt, circulation);
                let saffman = saffman_ring_speed(d.radius, circulation, sigma);
                let impulse = p.impulse();
                let total = p.total_strength();
                let sigma_max = p.sigma.iter().copied().fold(0.0, f64::max);
                let row = [
                    self.clock.t,
                    self.clock.step as f64,
                    dt,
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
                    sigma_max / self.sigma0,
                ];
                self.log.append_row(&row)?;
                self.last_figure = format!("U={:.5} (Saffman {saffman:.5})", d.speed);
            }
            Flow::Tube { circulation, core } => {
                let sigma = self.core_now(core);
                let profile = self.tube_profile(circulation, core, sigma)?;
                let mut worst = 0.0f64;
                for &(r, ut, exact) in &profile {
                    let rel = (ut - exact) / exact;
                    worst = worst.max(rel.abs());
                    self.log.append_row(&[self.clock.t, r, ut, exact, rel])?;
                }
                self.last_figure = format!("max|Δu_θ/u_θ|={worst:.2e}");
            }
        }
        Ok(())
    }

    /// (r, u_θ from the particles, Lamb–Oseen with the periodic background) at the profile
    /// radii (units of the initial core, up to [`PROFILE_R_MAX`]).
    fn tube_profile(
        &mut self,
        circulation: f64,
        core: f64,
        sigma: f64,
    ) -> Result<Vec<(f64, f64, f64)>> {
        let radii: Vec<f64> = PROFILE_RADII_OVER_CORE
            .iter()
            .map(|&f| f * core)
            .filter(|&r| r <= PROFILE_R_MAX)
            .collect();
        let mut targets = Vec::with_capacity(radii.len() * PROFILE_DIRECTIONS);
        for &r in &radii {
            for j in 0..PROFILE_DIRECTIONS {
                // Directions off the lattice axes (offset by half a step).
                let th = (j as f64 + 0.5) * TAU / PROFILE_DIRECTIONS as f64;
                targets.push([r * th.cos(), r * th.sin(), 0.0]);
            }
        }
        self.solver.velocity_at(&targets, &mut self.scratch)?;
        Ok(radii
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let ut = (0..PROFILE_DIRECTIONS)
                    .map(|j| {
                        let k = i * PROFILE_DIRECTIONS + j;
                        let (x, u) = (targets[k], self.scratch.velocity[k]);
                        (-x[1] * u[0] + x[0] * u[1]) / r
                    })
                    .sum::<f64>()
                    / PROFILE_DIRECTIONS as f64;
                (r, ut, lamb_oseen_periodic(circulation, sigma, r))
            })
            .collect())
    }

    fn write_snapshot(&mut self) -> Result<()> {
        write_vortex_snapshot(
            &self.run_dir,
            &mut self.solver,
            self.clock.t,
            self.clock.step,
        )
    }

    fn write_checkpoint(&mut self) -> Result<()> {
        let c = self.clock;
        let (arrays, vclock) = self.solver.state_arrays();
        let (file, _) = columns(self.flow);
        let meta = json!({
            "step": c.step,
            "t": c.t,
            "next_output": c.next_output,
            "next_checkpoint": c.next_checkpoint,
            "next_snapshot": c.next_snapshot,
            "csv": { file: self.log.len_bytes() },
            "case": self.case.name,
            "vortex_clock": serde_json::to_value(vclock)?,
        });
        let mut ck = CheckpointArrays::new();
        for (name, shape, data) in arrays {
            ck.push(name, shape, data);
        }
        write_checkpoint(&self.run_dir, c.step, &meta, &ck, self.case.checkpoint.keep)?;
        Ok(())
    }

    /// The step failed (non-finite state or evaluator error): the state was not committed, so
    /// the state in hand is the last good one; checkpoint it and report.
    fn stop_on_failure(&mut self, why: &str) -> anyhow::Error {
        let c = self.clock;
        let saved = self.write_checkpoint();
        let msg = format!(
            "vortex solver: {why} in the step after step {} (t = {}); the run stopped. The last \
             good state (step {}) is {} in {}, and {} holds every row up to it. Reduce time.dt \
             or refine the particles, then `vpm run` again.",
            c.step,
            c.t,
            c.step,
            if saved.is_ok() {
                "checkpointed"
            } else {
                "NOT checkpointed"
            },
            self.run_dir.join("checkpoints").display(),
            self.log.path().display(),
        );
        self.manifest.set_status(format!("failed: {msg}"));
        self.flush_manifest();
        anyhow::anyhow!(msg)
    }

    fn flush_manifest(&mut self) {
        self.manifest.add_stage_time(
            "vortex_time_stepping",
            std::mem::take(&mut self.stepping_seconds),
        );
        self.manifest.add_stage_time(
            "vortex_diagnostics",
            std::mem::take(&mut self.diagnostics_seconds),
        );
        let phases = self.solver.take_timings();
        self.manifest
            .add_stage_time("vortex_evaluation", phases.evaluation);
        self.manifest
            .add_stage_time("vortex_reinit_vorticity", phases.reinit_vorticity);
        self.manifest
            .add_stage_time("vortex_reinit_solve", phases.reinit_solve);
        if let Err(e) = self.manifest.write(&self.run_dir) {
            tracing::warn!("could not write the manifest: {e}");
        }
    }

    fn finish(&mut self) -> Result<()> {
        let tp = Instant::now();
        let plots = postprocess::plot_run(&self.run_dir, &self.case.name);
        self.manifest
            .add_stage_time("plots", tp.elapsed().as_secs_f64());
        self.manifest.set_status("finished");
        self.flush_manifest();
        plots.context("drawing the plots")?;
        Ok(())
    }
}

/// Ring position, speed and impulse radius (module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RingDiagnostics {
    /// Z = Σ w z / Σ w, w = (x × α)·ẑ.
    pub z: f64,
    /// U = dZ/dt, exact for the particle state (see [`ring_diagnostics`]).
    pub speed: f64,
    /// R_I = √(I_z/(πΓ)).
    pub radius: f64,
}

/// Position, speed and impulse radius of a ring about the z axis from its particles, their
/// velocities `u` and strength rates `dalpha_dt`.
///
/// The speed is the time derivative of the impulse-weighted centroid,
/// dZ/dt = [Σ w u_z + Σ ẇ (z − Z)] / Σ w with ẇ = (u × α + x × dα/dt)·ẑ. The first sum alone
/// (the weighted mean particle velocity) is not the ring speed: the weights grow with the
/// distance from the axis, so the core's rotation, +z on the inner side and −z on the outer,
/// biases it low by O(Γ/(4πR)) (22 % for the `ring` case); the ẇ term cancels that bias.
pub fn ring_diagnostics(
    p: &ParticleSet,
    u: &[[f64; 3]],
    dalpha_dt: &[[f64; 3]],
    circulation: f64,
) -> RingDiagnostics {
    let (mut sw, mut swz) = (0.0, 0.0);
    for (x, a) in p.x.iter().zip(&p.alpha) {
        let w = x[0] * a[1] - x[1] * a[0];
        sw += w;
        swz += w * x[2];
    }
    let z = swz / sw;
    let mut rate = 0.0;
    for (((x, a), v), da) in p.x.iter().zip(&p.alpha).zip(u).zip(dalpha_dt) {
        let w = x[0] * a[1] - x[1] * a[0];
        let w_dot = (v[0] * a[1] - v[1] * a[0]) + (x[0] * da[1] - x[1] * da[0]);
        rate += w * v[2] + w_dot * (x[2] - z);
    }
    RingDiagnostics {
        z,
        speed: rate / sw,
        radius: (p.impulse()[2] / (PI * circulation)).sqrt(),
    }
}

/// Lamb–Oseen azimuthal velocity of a tube of circulation Γ and core σ in the periodic box of
/// side 2π, with the uniform background vorticity −Γ/L² (PHYSICS.md §7).
pub fn lamb_oseen_periodic(circulation: f64, sigma: f64, r: f64) -> f64 {
    let l = TAU;
    circulation / (2.0 * PI * r) * (1.0 - (-r * r / (2.0 * sigma * sigma)).exp())
        - circulation * r / (2.0 * l * l)
}
