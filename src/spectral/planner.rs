//! The spectral stepper for a device: the CPU solver, or the GPU solver on a CUDA device.

use super::gpu::GpuSpectralSolver;
use super::solver::{SpectralGrid, SpectralSolver};
use super::stepper::SpectralStepper;
use crate::device::cuda::CudaError;
use crate::device::Device;

/// The spectral stepper for `device`: the CPU solver, or the GPU solver on a GPU (its
/// buffers and cuFFT plans made here).
pub fn plan(
    grid: SpectralGrid,
    nu: f64,
    device: &Device,
) -> Result<Box<dyn SpectralStepper>, CudaError> {
    match device {
        Device::Cpu => Ok(Box::new(SpectralSolver::new(grid, nu))),
        Device::Cuda(gpu) => Ok(Box::new(GpuSpectralSolver::new(gpu.clone(), grid, nu)?)),
    }
}
