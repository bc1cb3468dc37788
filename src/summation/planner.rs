//! Chooses the evaluator for a case: free space or periodic box, direct or Ewald, CPU or CUDA.
//!
//! The choice is made once, at run time, from the case's `[vortex]` section; the rest of the
//! program only sees `Box<dyn Summation>`.

use super::cuda_direct::CudaDirect;
use super::cuda_ewald::CudaEwald;
use super::direct::DirectFreeSpace;
use super::ewald::EwaldPeriodic;
use super::{Boundary, Summation, SummationError};
use crate::config::{Backend, EvaluatorKind};
use crate::cuda::CudaError;

/// The planned evaluator and a sentence saying what was chosen and why.
pub struct Plan {
    pub evaluator: Box<dyn Summation>,
    pub description: String,
}

/// Picks the evaluator for `boundary`. `accuracy` is the requested relative accuracy of the
/// periodic evaluator.
///
/// Backends: `cpu` always runs on the CPU; `cuda` runs on the GPU (all pairs in free space,
/// Ewald in the periodic box) and is an error when no GPU is usable (with the reason); `auto`
/// takes the GPU when it can and says why when it does not.
pub fn plan(
    boundary: Boundary,
    kind: EvaluatorKind,
    backend: Backend,
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
    let (evaluator, note): (Box<dyn Summation>, String) = match backend {
        Backend::Cpu => (cpu_evaluator(boundary, accuracy), "cpu".into()),
        Backend::Cuda => {
            let e = gpu_evaluator(boundary, accuracy).map_err(|e| {
                SummationError::Unsupported(match e {
                    CudaError::Unavailable(_) => {
                        format!("vortex.backend = \"cuda\" but no CUDA driver/GPU was found: {e}")
                    }
                    _ => format!(
                        "vortex.backend = \"cuda\": the GPU evaluator could not be set up: {e}"
                    ),
                })
            })?;
            (e, "cuda".into())
        }
        Backend::Auto => match gpu_evaluator(boundary, accuracy) {
            Ok(e) => (e, "auto: CUDA, a GPU is usable".into()),
            Err(why) => {
                let why = match why {
                    CudaError::Unavailable(_) => format!("no usable GPU: {why}"),
                    _ => format!("the GPU evaluator could not be set up: {why}"),
                };
                (
                    cpu_evaluator(boundary, accuracy),
                    format!("auto: CPU, {why}"),
                )
            }
        },
    };
    let description = format!("{} (backend {note})", evaluator.name());
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
