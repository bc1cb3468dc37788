//! Output writers as callbacks on schedules, and the CSV logs they append to.
//!
//! A callback declares the CSV files it writes ([`Callback::logs`]); the run core creates them
//! (new run) or reopens them truncated to the lengths saved in the checkpoint (resume), so
//! every CSV of a killed and resumed run has the bytes of an uninterrupted one.

use crate::output::{format_f64, CsvLog};
use crate::run::schedule::Scheduled;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The run's CSV logs by file name (relative to the run directory).
#[derive(Default)]
pub struct Logs {
    logs: BTreeMap<&'static str, CsvLog>,
}

impl Logs {
    /// Creates each file with its header (a new run).
    pub fn create(run_dir: &Path, specs: &[LogSpec]) -> Result<Logs> {
        let mut logs = BTreeMap::new();
        for s in specs {
            let path = run_dir.join(s.file);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            logs.insert(s.file, CsvLog::create(&path, &s.columns)?);
        }
        Ok(Logs { logs })
    }

    /// Reopens each file truncated to its length in `lengths` (a resume).
    pub fn reopen(
        run_dir: &Path,
        specs: &[LogSpec],
        lengths: &BTreeMap<String, u64>,
    ) -> Result<Logs> {
        let mut logs = BTreeMap::new();
        for s in specs {
            let len = *lengths
                .get(s.file)
                .with_context(|| format!("the checkpoint lacks the length of {}", s.file))?;
            let log = CsvLog::reopen_truncated(&run_dir.join(s.file), &s.columns, len)?;
            logs.insert(s.file, log);
        }
        Ok(Logs { logs })
    }

    /// The byte length of every log (saved in checkpoints).
    pub fn lengths(&self) -> BTreeMap<String, u64> {
        self.logs
            .iter()
            .map(|(k, v)| (k.to_string(), v.len_bytes()))
            .collect()
    }

    /// Appends a row of numbers (formatted to round-trip) to `file`.
    pub fn row(&mut self, file: &str, values: &[f64]) -> Result<()> {
        Ok(self.get(file)?.append_row(values)?)
    }

    /// Appends a row of already formatted fields to `file`.
    pub fn row_fmt(&mut self, file: &str, fields: &[String]) -> Result<()> {
        Ok(self.get(file)?.append_row_fmt(fields)?)
    }

    fn get(&mut self, file: &str) -> Result<&mut CsvLog> {
        self.logs
            .get_mut(file)
            .with_context(|| format!("no log {file} was declared"))
    }

    /// The path of `file` (for messages).
    pub fn path(&self, file: &str) -> Option<PathBuf> {
        self.logs.get(file).map(|l| l.path().to_path_buf())
    }
}

/// A CSV file a callback writes: its name in the run directory and its columns.
#[derive(Debug, Clone)]
pub struct LogSpec {
    pub file: &'static str,
    pub columns: Vec<&'static str>,
}

impl LogSpec {
    pub fn new(file: &'static str, columns: &[&'static str]) -> LogSpec {
        LogSpec {
            file,
            columns: columns.to_vec(),
        }
    }
}

/// What a callback sees besides the model.
pub struct CallContext<'a> {
    pub t: f64,
    pub step: u64,
    /// The step that led here (0 at the start).
    pub dt: f64,
    pub run_dir: &'a Path,
    pub logs: &'a mut Logs,
}

impl CallContext<'_> {
    /// "t, step" as the first two CSV fields.
    pub fn time_fields(&self) -> Vec<String> {
        vec![format_f64(self.t), self.step.to_string()]
    }
}

/// An output writer.
pub trait Callback<M> {
    /// The CSV files it appends to.
    fn logs(&self) -> Vec<LogSpec> {
        Vec::new()
    }

    /// Writes its output for the model's current state.
    fn call(&mut self, model: &mut M, ctx: &mut CallContext) -> Result<()>;
}

/// A callback with its schedule and a name (the key of its counter in checkpoints and of its
/// wall time in the manifest).
pub struct ScheduledCallback<M> {
    pub name: &'static str,
    pub schedule: Scheduled,
    pub callback: Box<dyn Callback<M>>,
}

impl<M> ScheduledCallback<M> {
    pub fn new(
        name: &'static str,
        schedule: Scheduled,
        callback: impl Callback<M> + 'static,
    ) -> ScheduledCallback<M> {
        ScheduledCallback {
            name,
            schedule,
            callback: Box::new(callback),
        }
    }
}
