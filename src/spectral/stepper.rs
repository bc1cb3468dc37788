//! The seam between the run core and a spectral solver: [`SpectralStepper`], implemented here
//! by the CPU solver ([`SpectralSolver`]) and beside the GPU one
//! ([`GpuSpectralSolver`](super::GpuSpectralSolver), which keeps its Fourier modes on the device
//! between steps); [`super::planner::plan`] picks one for a device. The run core reads the
//! state through the diagnostics here, reduced where the state lives; it pulls the modes
//! themselves ([`SpectralStepper::velocity_modes`]) only at checkpoints and for fields.

use super::solver::{NonFiniteState, SpectralGrid, SpectralSolver, VectorModes};
use super::ModeLayout;
use crate::device::cuda::CudaError;
use crate::device::Device;
use crate::diagnostics::FlowStats;

/// Why a spectral stepper stopped.
#[derive(Debug, thiserror::Error)]
pub enum SpectralError {
    #[error(transparent)]
    NonFinite(#[from] NonFiniteState),
    #[error("the spectral solver on the GPU: {0}")]
    Device(#[from] CudaError),
    /// The solver across several GPUs: a rank failed ("rank r (cuda:N) …") or the grid cannot
    /// be split over the ranks.
    #[error("{0}")]
    Ranks(String),
}

/// A pseudo-spectral Navier–Stokes stepper on the periodic box (docs/physics.md §5).
pub trait SpectralStepper: Send {
    /// Grid, dealiasing rule and retained modes.
    fn grid(&self) -> SpectralGrid;
    /// Kinematic viscosity.
    fn nu(&self) -> f64;
    /// Sets the velocity modes of the initial field (projected onto divergence-free fields).
    fn set_velocity_modes(&mut self, uhat: VectorModes) -> Result<(), SpectralError>;
    /// Restores modes saved by a checkpoint, exactly (no projection).
    fn restore_velocity_modes(&mut self, uhat: VectorModes) -> Result<(), SpectralError>;
    /// The velocity modes of the current state on the host (a device stepper copies them back).
    fn velocity_modes(&mut self) -> Result<&VectorModes, SpectralError>;
    /// The largest step the CFL rule of §5.4 allows for CFL number `cfl`.
    fn cfl_dt(&mut self, cfl: f64) -> Result<f64, SpectralError>;
    /// One Lawson RK4 step; a non-finite result is not committed.
    fn step(&mut self, dt: f64) -> Result<(), SpectralError>;
    /// dK/dt from the right-hand side at the current state (−2νZ plus round-off).
    fn dkdt_from_rhs(&mut self) -> Result<f64, SpectralError>;
    /// K, Z, ε, u', L, T, λ, Re_λ of the current state (§6).
    fn flow_stats(&mut self) -> Result<FlowStats, SpectralError>;
    /// The shell spectrum E(s) of the current state (§6).
    fn shell_spectrum(&mut self) -> Result<Vec<f64>, SpectralError>;
    /// max |∇·u| over the N³ nodes.
    fn max_divergence(&mut self) -> Result<f64, SpectralError>;
    /// max |ω| over the N³ nodes.
    fn max_vorticity(&mut self) -> Result<f64, SpectralError>;
    /// The velocity on the N³ solution grid (the final field).
    fn velocity_on_grid(&mut self) -> Result<[Vec<f64>; 3], SpectralError>;
    /// The device the state lives on.
    fn device(&self) -> Device;

    /// The retained modes' layout.
    fn layout(&self) -> ModeLayout {
        self.grid().layout()
    }
}

impl SpectralStepper for SpectralSolver {
    fn grid(&self) -> SpectralGrid {
        SpectralSolver::grid(self)
    }
    fn nu(&self) -> f64 {
        SpectralSolver::nu(self)
    }
    fn set_velocity_modes(&mut self, uhat: VectorModes) -> Result<(), SpectralError> {
        SpectralSolver::set_velocity_modes(self, uhat);
        Ok(())
    }
    fn restore_velocity_modes(&mut self, uhat: VectorModes) -> Result<(), SpectralError> {
        SpectralSolver::restore_velocity_modes(self, uhat);
        Ok(())
    }
    fn velocity_modes(&mut self) -> Result<&VectorModes, SpectralError> {
        Ok(SpectralSolver::velocity_modes(self))
    }
    fn cfl_dt(&mut self, cfl: f64) -> Result<f64, SpectralError> {
        Ok(SpectralSolver::cfl_dt(self, cfl))
    }
    fn step(&mut self, dt: f64) -> Result<(), SpectralError> {
        Ok(SpectralSolver::step(self, dt)?)
    }
    fn dkdt_from_rhs(&mut self) -> Result<f64, SpectralError> {
        Ok(SpectralSolver::dkdt_from_rhs(self))
    }
    fn flow_stats(&mut self) -> Result<FlowStats, SpectralError> {
        Ok(crate::diagnostics::flow_stats(
            &self.layout(),
            SpectralSolver::velocity_modes(self),
            self.nu(),
        ))
    }
    fn shell_spectrum(&mut self) -> Result<Vec<f64>, SpectralError> {
        Ok(crate::diagnostics::shell_spectrum(
            &self.layout(),
            SpectralSolver::velocity_modes(self),
        ))
    }
    fn max_divergence(&mut self) -> Result<f64, SpectralError> {
        Ok(SpectralSolver::max_divergence(self))
    }
    fn max_vorticity(&mut self) -> Result<f64, SpectralError> {
        Ok(SpectralSolver::max_vorticity(self))
    }
    fn velocity_on_grid(&mut self) -> Result<[Vec<f64>; 3], SpectralError> {
        Ok(SpectralSolver::velocity_on_grid(self))
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
}
