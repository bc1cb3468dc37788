//! `manifest.json`: what ran, where, from which source, and how it went.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{git_commit, write_atomic, OutputError};

/// File name of the manifest inside the run directory.
pub const MANIFEST_FILE: &str = postprocess::layout::MANIFEST_JSON;

/// The run-directory format: the version of the files vpm writes into a run directory and reads
/// back to resume it, written into `manifest.json` and each checkpoint's `meta.json`. A change
/// to those files that another vpm could not resume bumps it.
/// 1: checkpoints before the run core (no `format` in their `meta.json`); 2: checkpoints without
/// the case they were computed with, and no `format` in `manifest.json`; 3: each checkpoint holds
/// its resolved case; 4: `energy.csv` has `max_vorticity` and `vortex/energy.csv` the
/// numerical-dissipation columns (a resume of an older run directory adds them to its logs,
/// `nan` in the rows written before: [`super::CsvLog::reopen_truncated`]).
pub const RUN_DIR_FORMAT: u32 = 4;
/// The oldest run-directory format this vpm resumes.
pub const OLDEST_RUN_DIR_FORMAT: u32 = 1;
/// The format of a `manifest.json` written before it had the field.
const FORMAT_BEFORE_THE_FIELD: u32 = 2;

fn format_before_the_field() -> u32 {
    FORMAT_BEFORE_THE_FIELD
}

/// Checks that `found`, the run-directory format `file` was written in, is one this vpm resumes
/// ([`OLDEST_RUN_DIR_FORMAT`] to [`RUN_DIR_FORMAT`]).
pub fn check_run_dir_format(file: &Path, found: u32) -> Result<(), OutputError> {
    if (OLDEST_RUN_DIR_FORMAT..=RUN_DIR_FORMAT).contains(&found) {
        Ok(())
    } else {
        Err(OutputError::RunDirFormat {
            path: file.to_path_buf(),
            found,
        })
    }
}

/// What to do with a run directory of format `found`, which this vpm does not read.
pub(super) fn format_advice(found: u32) -> String {
    if found > RUN_DIR_FORMAT {
        "a newer vpm wrote it: resume it with that one, or start a new run".to_string()
    } else {
        format!(
            "it reads format {OLDEST_RUN_DIR_FORMAT} and later, not this older one: start a new run"
        )
    }
}

/// One rank of a run across several GPUs ([`crate::device::GpuGroup`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankRecord {
    pub rank: usize,
    /// `"cuda:N"`.
    pub device: String,
    /// The GPU's description.
    pub gpu: String,
    /// The rank's process id.
    pub pid: u32,
    /// Peak device memory in use on the rank's GPU (total − free from the driver), sampled
    /// after every command of the solver.
    pub peak_device_memory_bytes: Option<u64>,
}

/// One resume of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumeRecord {
    /// UTC time (ISO-8601) at which the run was resumed.
    pub time: String,
    /// Step of the checkpoint the run resumed from.
    pub from_step: u64,
    /// The keys of the case that changed against the case of that checkpoint, each
    /// `"key: old → new"` (e.g. `"time.t_end: 0.5 → 1.0"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
}

/// The adaptive (CFL) steps of a run: the first and the smallest the stability limits chose, before
/// any shortening to land on an output time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CflSteps {
    pub first: f64,
    pub smallest: f64,
    /// The time at the start of the smallest step.
    pub smallest_at: f64,
}

impl CflSteps {
    /// Records a step of size `dt` chosen at time `t`.
    pub fn record(steps: &mut Option<CflSteps>, dt: f64, t: f64) {
        match steps {
            None => {
                *steps = Some(CflSteps {
                    first: dt,
                    smallest: dt,
                    smallest_at: t,
                })
            }
            Some(s) if dt < s.smallest => {
                s.smallest = dt;
                s.smallest_at = t;
            }
            Some(_) => {}
        }
    }
}

/// The particle method's numerical dissipation as the run measured it (docs/physics.md §3.6),
/// over its outputs from `t_start` to `t`; every change is a fraction of `initial_energy`, the
/// particle K at `t_start` (the first output of the run, or of its resume when the checkpoint
/// predates these measurements). A value that could not be formed (nothing measured) is absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumericalDissipation {
    /// `vortex.dissipation_every`: every this many reinitialisations were measured.
    pub dissipation_every: u64,
    /// The first output the summary covers.
    pub t_start: f64,
    /// The last output it covers.
    pub t: f64,
    /// The particle K at `t_start`.
    pub initial_energy: Option<f64>,
    /// Reinitialisations done.
    pub reinitialisations: u64,
    /// Reinitialisations measured: K just before and just after.
    pub measured: u64,
    /// The mean (K_after − K_before)/K_before of the measured reinitialisations.
    pub mean_change_per_reinit: Option<f64>,
    /// The K change by every reinitialisation, estimated: the mean measured K_after − K_before
    /// times the count done.
    pub reinit_change: Option<f64>,
    /// Stretches of steps measured: from a measured reinitialisation to the next one.
    pub stepping_stretches: u64,
    /// Their mean (K_end − K_start + ∫2νZ dt)/K_start (K_start: K after the reinitialisation).
    pub mean_stepping_excess_per_stretch: Option<f64>,
    /// K(t) − K(t_start).
    pub total_change: Option<f64>,
    /// −∫2νZ dt from `t_start` to `t` (trapezoid over the outputs): the viscous loss.
    pub viscous_change: Option<f64>,
    /// The change by stepping beyond the viscous loss: `total_change` − `reinit_change` −
    /// `viscous_change`.
    pub stepping_excess: Option<f64>,
}

impl std::fmt::Display for NumericalDissipation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{x:+.3e}"));
        write!(
            f,
            "numerical dissipation of the particles from t = {} to {}, as fractions of their \
             K at the start: {} reinitialisations, {} measured (every {}), mean change {} per \
             reinitialisation, {} by all of them (estimated); by stepping beyond ∫2νZ dt {} \
             ({} per measured stretch); total {}, viscous {}",
            self.t_start,
            self.t,
            self.reinitialisations,
            self.measured,
            self.dissipation_every,
            v(self.mean_change_per_reinit),
            v(self.reinit_change),
            v(self.stepping_excess),
            v(self.mean_stepping_excess_per_stretch),
            v(self.total_change),
            v(self.viscous_change),
        )
    }
}

/// A gravity run's energy conservation, for the manifest: the relative error
/// (E − E₀)/|E₀| with the force's own softened potential, now and at its largest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnergyConservation {
    /// E₀, the total energy at t = 0.
    pub initial_energy: f64,
    /// The time of the latest output.
    pub t: f64,
    /// (E − E₀)/|E₀| there.
    pub energy_error: f64,
    /// The largest |E − E₀|/|E₀| over the outputs so far, and its time.
    pub max_abs_energy_error: f64,
    pub max_at: f64,
    /// `gravity.energy_error_limit`: the run stops beyond it.
    pub limit: f64,
}

impl std::fmt::Display for EnergyConservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "energy error (E − E₀)/|E₀| = {:+.3e} at t = {}; largest |ΔE/E₀| {:.3e} at t = {}              (limit {:e})",
            self.energy_error, self.t, self.max_abs_energy_error, self.max_at, self.limit
        )
    }
}

/// Contents of `manifest.json`. Serialized with `serde_json` (pretty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The run-directory format ([`RUN_DIR_FORMAT`]); 2 for a manifest written before the field.
    #[serde(default = "format_before_the_field")]
    pub format: u32,
    /// vpm version (`CARGO_PKG_VERSION`).
    pub vpm_version: String,
    /// Git commit of the source, when known (see [`super::git_commit`]).
    pub git_commit: Option<String>,
    /// The command line (`std::env::args`).
    pub command_line: Vec<String>,
    /// Number of worker threads.
    pub threads: usize,
    /// CPU model from `/proc/cpuinfo` ("model name"), else `"unknown"`.
    pub cpu_model: String,
    /// Host name, when it could be found.
    pub hostname: Option<String>,
    /// Start time of the run, UTC ISO-8601 (`YYYY-MM-DDTHH:MM:SSZ`).
    pub start_time: String,
    /// Wall-clock seconds accumulated per stage (stage name → seconds).
    pub stage_wall_seconds: BTreeMap<String, f64>,
    /// `"running"`, `"finished"`, `"failed: <msg>"` or `"stopped: <msg>"`.
    pub status: String,
    /// One entry per resume, oldest first.
    pub resumes: Vec<ResumeRecord>,
    /// The device each solver ran on (solver → description), e.g. "vortex" → "cuda:0 NVIDIA
    /// H100 …".
    #[serde(default)]
    pub devices: BTreeMap<String, String>,
    /// Peak device memory in use while the run stepped, when a GPU was used: total − free from
    /// the driver, sampled after every step (so it includes the CUDA context and any other
    /// process on the GPU, and misses a transient peak inside a step).
    #[serde(default)]
    pub peak_device_memory_bytes: Option<u64>,
    /// A run across several GPUs: every rank's GPU, process and peak device memory (empty
    /// otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankRecord>,
    /// With `time.cfl`: the first and the smallest stable step (absent with a fixed step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cfl_steps: Option<CflSteps>,
    /// The Biot–Savart evaluator of each particle solver with its parameters (solver →
    /// description), e.g. "vortex" → "FMM free-space CPU f64, accuracy 1e-6: order p = …".
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub evaluators: BTreeMap<String, String>,
    /// With `vortex.evaluator = "auto"`: the method chosen and every candidate's estimated
    /// seconds per evaluation ([`crate::summation::planner::AutoChoice`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluator_choice: Option<String>,
    /// The evaluators' built-in accuracy checks (the FMM's comparisons with the direct sum),
    /// oldest first: each the check's own fields plus the run's `step` and `t` of the state it
    /// evaluated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accuracy_checks: Vec<serde_json::Value>,
    /// With particles alongside the spectral solver: their numerical dissipation, measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numerical_dissipation: Option<NumericalDissipation>,
    /// A gravity run's energy conservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_conservation: Option<EnergyConservation>,
}

/// The CPU model: the first "model name" of `/proc/cpuinfo`, else `"unknown"`.
pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_string())
            })
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

fn hostname() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|s| !s.is_empty())
}

impl Manifest {
    /// A manifest for a run starting now, with status `"running"`.
    pub fn new(threads: usize) -> Manifest {
        Manifest {
            format: RUN_DIR_FORMAT,
            vpm_version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: git_commit(),
            command_line: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            threads,
            cpu_model: cpu_model(),
            hostname: hostname(),
            start_time: super::utc_now_iso8601(),
            stage_wall_seconds: BTreeMap::new(),
            status: "running".to_string(),
            resumes: Vec::new(),
            devices: BTreeMap::new(),
            peak_device_memory_bytes: None,
            ranks: Vec::new(),
            cfl_steps: None,
            evaluators: BTreeMap::new(),
            evaluator_choice: None,
            accuracy_checks: Vec::new(),
            numerical_dissipation: None,
            energy_conservation: None,
        }
    }

    /// Add `seconds` of wall time to `stage` (created at 0 if new).
    /// Non-finite or negative values are ignored (JSON cannot hold NaN).
    pub fn add_stage_time(&mut self, stage: &str, seconds: f64) {
        if !seconds.is_finite() || seconds < 0.0 {
            tracing::warn!("ignoring wall time {seconds} for stage {stage}");
            return;
        }
        *self
            .stage_wall_seconds
            .entry(stage.to_string())
            .or_insert(0.0) += seconds;
    }

    /// Set the status (`"running"`, `"finished"`, `"failed: <msg>"`, `"stopped: <msg>"`).
    pub fn set_status(&mut self, status: impl Into<String>) {
        self.status = status.into();
    }

    /// Record a resume from the checkpoint at `from_step` with the case's `changes`
    /// (`"key: old → new"`), stamped with the current UTC time; also sets the status back to
    /// `"running"` and the format to this vpm's (what it writes from now on).
    pub fn record_resume(&mut self, from_step: u64, changes: Vec<String>) {
        self.resumes.push(ResumeRecord {
            time: super::utc_now_iso8601(),
            from_step,
            changes,
        });
        self.status = "running".to_string();
        self.format = RUN_DIR_FORMAT;
    }

    /// Checks that the run directory `run_dir` of this manifest has a format this vpm resumes.
    pub fn check_format(&self, run_dir: &Path) -> Result<(), OutputError> {
        check_run_dir_format(&run_dir.join(MANIFEST_FILE), self.format)
    }

    /// Write `<run_dir>/manifest.json` atomically.
    pub fn write(&self, run_dir: &Path) -> Result<(), OutputError> {
        let path = run_dir.join(MANIFEST_FILE);
        let mut bytes = serde_json::to_vec_pretty(self).map_err(|e| OutputError::Json {
            op: "serialize",
            path: path.clone(),
            error: e,
        })?;
        bytes.push(b'\n');
        write_atomic(&path, &bytes)
    }

    /// Read `<run_dir>/manifest.json`.
    pub fn read(run_dir: &Path) -> Result<Manifest, OutputError> {
        let path = run_dir.join(MANIFEST_FILE);
        let bytes = fs::read(&path).map_err(|e| OutputError::io("read", &path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| OutputError::Json {
            op: "parse",
            path,
            error: e,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let mut m = Manifest::new(8);
        assert_eq!(m.status, "running");
        assert_eq!(m.vpm_version, env!("CARGO_PKG_VERSION"));
        assert!(!m.cpu_model.is_empty());
        m.add_stage_time("spectral", 1.5);
        m.add_stage_time("spectral", 0.25);
        m.add_stage_time("vortex", 0.1);
        m.add_stage_time("bad", f64::NAN);
        m.record_resume(1200, vec!["time.t_end: 0.5 → 1.0".into()]);
        m.set_status("stopped: SIGINT");
        let d = NumericalDissipation {
            dissipation_every: 10,
            t_start: 0.0,
            t: 2.5,
            initial_energy: Some(0.125),
            reinitialisations: 50,
            measured: 5,
            mean_change_per_reinit: Some(-1e-4),
            reinit_change: Some(-5e-3),
            stepping_stretches: 5,
            mean_stepping_excess_per_stretch: None,
            total_change: Some(-0.5),
            viscous_change: Some(-0.49),
            stepping_excess: Some(-5e-3),
        };
        let line = d.to_string();
        assert!(
            line.contains("50 reinitialisations, 5 measured (every 10)")
                && line.contains("-5.000e-3 by all of them")
                && line.contains("(n/a per measured stretch)"),
            "{line}"
        );
        m.numerical_dissipation = Some(d);
        m.write(tmp.path()).unwrap();
        let back = Manifest::read(tmp.path()).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.stage_wall_seconds["spectral"], 1.75);
        assert!(!back.stage_wall_seconds.contains_key("bad"));
        assert_eq!(back.resumes[0].from_step, 1200);
        assert_eq!(back.resumes[0].changes, ["time.t_end: 0.5 → 1.0"]);
        assert_eq!(back.format, RUN_DIR_FORMAT);
        // rewrite replaces and leaves only the manifest
        m.set_status("finished");
        m.write(tmp.path()).unwrap();
        assert_eq!(Manifest::read(tmp.path()).unwrap().status, "finished");
        let names: Vec<_> = fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn missing_or_corrupt_manifest_names_path() {
        let tmp = tempfile::tempdir().unwrap();
        let err = Manifest::read(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("manifest.json"), "{err}");
        fs::write(tmp.path().join(MANIFEST_FILE), "{ not json").unwrap();
        let err = Manifest::read(tmp.path()).unwrap_err().to_string();
        assert!(
            err.contains("manifest.json") && err.contains("parse"),
            "{err}"
        );
    }

    #[test]
    fn a_manifest_before_the_format_field_is_format_2_and_others_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let mut m = Manifest::new(1);
        m.write(tmp.path()).unwrap();
        let path = tmp.path().join(MANIFEST_FILE);
        let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(v["format"], RUN_DIR_FORMAT);
        v.as_object_mut().unwrap().remove("format");
        // A resume record of before the changes were recorded has none.
        v["resumes"] = serde_json::json!([{"time": "2025-01-01T00:00:00Z", "from_step": 4}]);
        fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
        let old = Manifest::read(tmp.path()).unwrap();
        assert_eq!(old.format, 2);
        assert_eq!(old.numerical_dissipation, None);
        assert!(old.resumes[0].changes.is_empty());
        old.check_format(tmp.path()).unwrap();
        // A resume writes this vpm's format.
        m = old;
        m.record_resume(8, Vec::new());
        assert_eq!(m.format, RUN_DIR_FORMAT);

        m.format = RUN_DIR_FORMAT + 1;
        let e = m.check_format(tmp.path()).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "this run directory has format {}; this vpm reads format {RUN_DIR_FORMAT}",
                RUN_DIR_FORMAT + 1
            )) && e.contains("manifest.json")
                && e.contains("a newer vpm"),
            "{e}"
        );
        m.format = 0;
        let e = m.check_format(tmp.path()).unwrap_err().to_string();
        assert!(
            e.contains("has format 0;") && e.contains("start a new run"),
            "{e}"
        );
    }
}
