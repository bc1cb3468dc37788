//! The seam between the run core and a spectral solver: [`SpectralStepper`], implemented by
//! the CPU solver ([`SpectralSolver`]) and meant for a GPU one that keeps its Fourier modes on
//! the device between steps. The run core reaches the modes only through
//! [`SpectralStepper::velocity_modes`], which a device implementation answers by pulling them at
//! output, checkpoint and progress times, never every step.

use super::solver::{NonFiniteState, SpectralGrid, SpectralSolver, VectorModes};
use super::ModeLayout;
use crate::device::Device;

/// A pseudo-spectral Navier–Stokes stepper on the periodic box (docs/physics.md §5).
pub trait SpectralStepper: Send {
    /// Grid, dealiasing rule and retained modes.
    fn grid(&self) -> SpectralGrid;
    /// Kinematic viscosity.
    fn nu(&self) -> f64;
    /// Sets the velocity modes of the initial field (projected onto divergence-free fields).
    fn set_velocity_modes(&mut self, uhat: VectorModes);
    /// Restores modes saved by a checkpoint, exactly (no projection).
    fn restore_velocity_modes(&mut self, uhat: VectorModes);
    /// The velocity modes of the current state on the host (a device stepper copies them back).
    fn velocity_modes(&mut self) -> &VectorModes;
    /// The largest step the CFL rule of §5.4 allows for CFL number `cfl`.
    fn cfl_dt(&mut self, cfl: f64) -> f64;
    /// One Lawson RK4 step; a non-finite result is not committed.
    fn step(&mut self, dt: f64) -> Result<(), NonFiniteState>;
    /// dK/dt from the right-hand side at the current state (−2νZ plus round-off).
    fn dkdt_from_rhs(&mut self) -> f64;
    /// The velocity on the N³ solution grid (the final field).
    fn velocity_on_grid(&mut self) -> [Vec<f64>; 3];
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
    fn set_velocity_modes(&mut self, uhat: VectorModes) {
        SpectralSolver::set_velocity_modes(self, uhat)
    }
    fn restore_velocity_modes(&mut self, uhat: VectorModes) {
        SpectralSolver::restore_velocity_modes(self, uhat)
    }
    fn velocity_modes(&mut self) -> &VectorModes {
        SpectralSolver::velocity_modes(self)
    }
    fn cfl_dt(&mut self, cfl: f64) -> f64 {
        SpectralSolver::cfl_dt(self, cfl)
    }
    fn step(&mut self, dt: f64) -> Result<(), NonFiniteState> {
        SpectralSolver::step(self, dt)
    }
    fn dkdt_from_rhs(&mut self) -> f64 {
        SpectralSolver::dkdt_from_rhs(self)
    }
    fn velocity_on_grid(&mut self) -> [Vec<f64>; 3] {
        SpectralSolver::velocity_on_grid(self)
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
}

/// Why no spectral stepper could be made for a device.
#[derive(Debug, thiserror::Error)]
pub enum SpectralPlanError {
    #[error(
        "the spectral solver runs on the CPU only (its GPU version is not written yet); use \
         \"cpu\" or \"auto\""
    )]
    NoGpuVersion,
}

/// The spectral stepper for `device`: the CPU solver (the place where a GPU solver is chosen).
pub fn plan(
    grid: SpectralGrid,
    nu: f64,
    device: &Device,
) -> Result<Box<dyn SpectralStepper>, SpectralPlanError> {
    match device {
        Device::Cpu => Ok(Box::new(SpectralSolver::new(grid, nu))),
        Device::Cuda(_) => Err(SpectralPlanError::NoGpuVersion),
    }
}
