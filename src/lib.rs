//! vpm: vortex particle method for turbulence, checked against a pseudo-spectral solver.
//!
//! See `ARCHITECTURE.md` for a tour of the modules and `docs/physics.md` for the formulas and
//! conventions every module follows (code cites its sections as `docs/physics.md §n`).

pub mod bench;
pub mod cli;
pub mod config;
pub mod console;
pub mod device;
pub mod diagnostics;
pub mod gravity;
pub mod init;
pub mod kernel;
pub mod output;
pub mod particles;
pub mod run;
pub mod spectral;
pub mod summation;
pub mod vortex;

/// The CUDA plumbing under its former path (`vpm::cuda::availability()`, …): see [`device::cuda`].
pub use device::cuda;
