//! The pseudo-spectral reference solver: mode storage, 3-D real transforms and the RK4 solver,
//! on the CPU and on a GPU.

pub mod fft3d;
pub mod gpu;
pub mod layout;
pub mod planner;
pub mod solver;
pub mod stepper;

pub use fft3d::Fft3d;
pub use gpu::GpuSpectralSolver;
pub use layout::ModeLayout;
pub use solver::{Dealias, SpectralGrid, SpectralSolver, VectorModes};
pub use stepper::{SpectralError, SpectralStepper};
