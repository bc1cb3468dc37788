//! The pseudo-spectral reference solver: mode storage ([`layout`]), 3-D real transforms
//! ([`fft3d`]) and the RK4 solver on the CPU ([`solver`]) and on a GPU ([`gpu`]); the run core
//! talks to either through the [`SpectralStepper`] seam ([`stepper`]), and [`planner`] picks one
//! for the run's device.

pub mod distributed;
pub mod fft3d;
pub mod gpu;
pub mod gpu_slab;
pub mod layout;
pub mod planner;
pub mod slab;
pub mod slab_host;
pub mod solver;
pub mod stepper;

pub use distributed::DistributedSpectralSolver;
pub use fft3d::Fft3d;
pub use gpu::GpuSpectralSolver;
pub use layout::ModeLayout;
pub use solver::{Dealias, SpectralGrid, SpectralSolver, VectorModes};
pub use stepper::{SpectralError, SpectralStepper};
