//! Chooses the evaluator for a case: free space or periodic box, direct or Ewald, CPU or CUDA.
//!
//! The choice is made once, at run time, from the case's `[vortex]` section; the rest of the
//! program only sees `Box<dyn Summation>`.

use super::direct::DirectFreeSpace;
use super::ewald::EwaldPeriodic;
use super::{Boundary, Summation, SummationError};
use crate::config::{Backend, EvaluatorKind};

/// The planned evaluator and a sentence saying what was chosen and why.
pub struct Plan {
    pub evaluator: Box<dyn Summation>,
    pub description: String,
}

/// Picks the evaluator for `boundary`. `accuracy` is the requested relative accuracy of the
/// periodic evaluator. The CUDA backend is not built yet: `cuda` is an error, `auto` uses the
/// CPU and says so.
pub fn plan(
    boundary: Boundary,
    kind: EvaluatorKind,
    backend: Backend,
    accuracy: f64,
) -> Result<Plan, SummationError> {
    let device_note = match backend {
        Backend::Cuda => {
            return Err(SummationError::Unsupported(
                "vortex.backend = \"cuda\": this build has no GPU evaluators yet (CPU only); \
                 use \"cpu\" or \"auto\""
                    .into(),
            ))
        }
        Backend::Auto => "auto: CPU (no GPU evaluators in this build)",
        Backend::Cpu => "cpu",
    };
    let evaluator: Box<dyn Summation> = match (boundary, kind) {
        (Boundary::FreeSpace, EvaluatorKind::Direct) => Box::new(DirectFreeSpace),
        (Boundary::Periodic { .. }, EvaluatorKind::Ewald) => Box::new(EwaldPeriodic::new(accuracy)),
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
    };
    let description = format!("{} (backend {device_note})", evaluator.name());
    Ok(Plan {
        evaluator,
        description,
    })
}
