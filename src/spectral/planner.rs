//! The spectral stepper for a device: the CPU solver, the GPU solver on a CUDA device, or the
//! solver across the GPUs of a group ([`super::distributed`]).

use super::distributed::DistributedSpectralSolver;
use super::gpu::GpuSpectralSolver;
use super::solver::{SpectralGrid, SpectralSolver};
use super::stepper::{SpectralError, SpectralStepper};
use crate::device::Device;

/// The spectral stepper for `device`: the CPU solver, the GPU solver on a GPU (its buffers and
/// cuFFT plans made here), or the distributed solver on a group (every rank's part made here;
/// `Err` when the grid cannot be split over the ranks).
pub fn plan(
    grid: SpectralGrid,
    nu: f64,
    device: &Device,
) -> Result<Box<dyn SpectralStepper>, SpectralError> {
    match device {
        Device::Cpu => Ok(Box::new(SpectralSolver::new(grid, nu))),
        Device::Cuda(gpu) => Ok(Box::new(GpuSpectralSolver::new(gpu.clone(), grid, nu)?)),
        Device::Group(group) => Ok(Box::new(DistributedSpectralSolver::new(
            group.clone(),
            grid,
            nu,
        )?)),
    }
}
