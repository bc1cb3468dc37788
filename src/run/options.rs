//! What a run is given besides its case: threads, how progress is shown, the testing aids, how a
//! run ended, and the settings of its pictures.

use crate::config::Case;

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
    /// For tests of a signal at a chosen point: raise SIGINT as the N-th step of this process
    /// begins (the handlers of [`crate::run::signals::install_signal_handlers`] must be in place).
    pub signal_in_step: Option<u64>,
}

/// How [`crate::run::simulation::Simulation::run_to_end`] ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// t_end reached; final outputs and plots written.
    Finished,
    /// SIGINT or SIGTERM: stopped after a checkpoint (`vpm resume` continues).
    Interrupted,
    /// Stopped by `abort_after_steps` (tests only).
    Aborted,
}

/// The settings of a case's pictures (the structures' isosurface level).
pub fn plot_options(case: &Case) -> postprocess::PlotOptions {
    postprocess::PlotOptions {
        q_level: case.output.structures_level,
        picture_times: case
            .gravity
            .as_ref()
            .map(|g| g.pictures_times.clone())
            .unwrap_or_default(),
        ..Default::default()
    }
}
