//! Chooses the evaluator for a case: free space or periodic box, direct or Ewald, CPU or CUDA.
//!
//! The choice is made once, at run time, from the case's `[vortex]` section; the rest of the
//! program only sees `Box<dyn Summation>`.

use super::cuda_direct::CudaDirect;
use super::cuda_ewald::CudaEwald;
use super::direct::DirectFreeSpace;
use super::ewald::EwaldPeriodic;
use super::EvaluatorKind;
use super::{Boundary, Summation, SummationError};
use crate::cuda::CudaError;
use crate::device::Device;

/// The planned evaluator and a sentence saying what was chosen and why.
pub struct Plan {
    pub evaluator: Box<dyn Summation>,
    pub description: String,
}

/// Picks the evaluator for `boundary` on `device`. `accuracy` is the requested relative
/// accuracy of the periodic evaluator.
///
/// On the CPU: direct (free space) or Ewald (periodic), f64. On a GPU: all pairs in free space,
/// Ewald in the periodic box, f32 sums; an error (with the reason) when the GPU evaluator cannot
/// be set up. The device was chosen before (`auto` resolved by [`crate::device::Device::open`]).
pub fn plan(
    boundary: Boundary,
    kind: EvaluatorKind,
    device: &Device,
    accuracy: f64,
) -> Result<Plan, SummationError> {
    match (boundary, kind) {
        (Boundary::FreeSpace, EvaluatorKind::Ewald) => {
            return Err(SummationError::Unsupported(
                "vortex.evaluator = \"ewald\" is for the periodic box; free-space flows use \
                 \"direct\""
                    .into(),
            ))
        }
        (Boundary::Periodic { .. }, EvaluatorKind::Direct) => {
            return Err(SummationError::Unsupported(
                "vortex.evaluator = \"direct\" sums in free space; the periodic box needs \
                 \"ewald\" (a truncated image sum is only conditionally convergent)"
                    .into(),
            ))
        }
        _ => {}
    }
    let evaluator: Box<dyn Summation> = match device {
        Device::Cpu => cpu_evaluator(boundary, accuracy),
        Device::Cuda(_) => gpu_evaluator(boundary, accuracy).map_err(|e| {
            SummationError::Unsupported(format!(
                "device {}: the GPU evaluator could not be set up: {e}",
                device.label()
            ))
        })?,
    };
    let description = format!("{} (device {})", evaluator.name(), device.label());
    Ok(Plan {
        evaluator,
        description,
    })
}

/// The GPU evaluator for the boundary: all pairs in free space, Ewald in the periodic box.
fn gpu_evaluator(boundary: Boundary, accuracy: f64) -> Result<Box<dyn Summation>, CudaError> {
    Ok(match boundary {
        Boundary::FreeSpace => Box::new(CudaDirect::new()?),
        Boundary::Periodic { .. } => Box::new(CudaEwald::new(accuracy)?),
    })
}

fn cpu_evaluator(boundary: Boundary, accuracy: f64) -> Box<dyn Summation> {
    match boundary {
        Boundary::FreeSpace => Box::new(DirectFreeSpace),
        Boundary::Periodic { .. } => Box::new(EwaldPeriodic::new(accuracy)),
    }
}
