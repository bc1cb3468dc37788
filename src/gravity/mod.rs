//! Gravitational N-body on the summation engine (docs/physics.md §10, §11): bodies with mass,
//! position and velocity, Plummer-softened Newtonian gravity in units with G = 1, the
//! kick–drift–kick leapfrog with a fixed step, and what a gravity run reports.
//!
//! - [`bodies`]: the body set (struct of arrays, with each body's component and galaxy) and its
//!   checks.
//! - [`units`]: a case's length and mass units and the time unit G = 1 makes of them.
//! - [`initial`]: the named initial conditions (Kepler pair, Plummer sphere, cold collapse,
//!   disk galaxy, two galaxies on a parabolic orbit), seeded and thread-count independent.
//! - [`sampling`]: the seeded random draws the initial conditions share.
//! - [`diagnostics`]: energy with the force's own softened potential, momenta, virial ratio,
//!   Lagrangian radii, per-component mass centres.
//! - [`stepper`]: the [`stepper::BodyStepper`] seam the run core steps; [`host`] the CPU
//!   leapfrog in f64, [`resident`] the GPU one with the bodies resident on the device;
//!   [`planner`] picks the evaluator (all pairs or FMM) and the stepper.
//! - [`io`]: body tables (`m x y z vx vy vz` per line) and big-endian Tipsy files.

pub mod bodies;
pub mod cases;
pub mod diagnostics;
pub mod galaxy;
pub mod host;
pub mod initial;
pub mod io;
pub mod planner;
pub mod resident;
pub mod sampling;
pub mod stepper;
pub mod units;

use crate::device::cuda::CudaError;
use crate::summation::SummationError;
use std::path::PathBuf;

/// What can go wrong with bodies, their files and their stepping.
#[derive(Debug, thiserror::Error)]
pub enum GravityError {
    /// The bodies themselves are unusable (a negative or non-finite mass, a non-finite position
    /// or velocity, coincident bodies at ε = 0): the message names the body.
    #[error("{0}")]
    BadBodies(String),
    /// A body file is malformed: the file, its line (or record) and what is wrong.
    #[error("{}:{line}: {message}", file.display())]
    Input {
        file: PathBuf,
        /// 1-based line of a table, or record of a Tipsy file (0: the header).
        line: usize,
        message: String,
    },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A step made a position, velocity or acceleration non-finite (the state is unchanged).
    #[error("{0}")]
    NonFinite(String),
    #[error(transparent)]
    Summation(#[from] SummationError),
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// Writing a body file failed (the message names the file).
    #[error(transparent)]
    Output(#[from] crate::output::OutputError),
}
