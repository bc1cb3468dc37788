//! The FMM's built-in accuracy check (issue 13): a random sample of targets summed directly
//! (f64, all pairs) and compared with the FMM's answer there, sized to cost at most a tenth of an
//! evaluation, at the first evaluation and every so many after. Errors follow docs/physics.md §8:
//! relative L2 over the sample and the largest component error over the rms component of the
//! reference ([`verify::rel_l2`], [`verify::max_rel`]).

use crate::summation::direct::DirectFreeSpace;
use crate::summation::{verify, Evaluation, Extra, Sources, SummationError};

/// One comparison with the direct sum.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct AccuracyCheck {
    /// Which evaluation (1 = the first) was checked.
    pub evaluation: u64,
    /// Targets in the sample.
    pub sample: usize,
    /// The requested relative accuracy.
    pub requested: f64,
    /// The largest core radius at the check.
    pub sigma_max: f64,
    /// Velocity: relative L2 and max |error| / rms.
    pub velocity_l2: f64,
    pub velocity_max: f64,
    /// Stretching or gradient (whichever was evaluated; 0 for velocity-only evaluations).
    pub derivative_l2: f64,
    pub derivative_max: f64,
}

/// A check fails the run when an error exceeds the request by this factor.
pub const FAILURE_FACTOR: f64 = 10.0;

impl AccuracyCheck {
    /// Whether both relative L2 errors are within [`FAILURE_FACTOR`] × the request.
    pub fn passed(&self) -> bool {
        self.velocity_l2 <= FAILURE_FACTOR * self.requested
            && self.derivative_l2 <= FAILURE_FACTOR * self.requested
    }

    /// The error that stops a run after a failed check.
    pub fn failure(&self) -> SummationError {
        SummationError::AccuracyCheck(format!(
            "the FMM's check at evaluation {} missed the requested accuracy {:e} by more than \
             {FAILURE_FACTOR}×: relative L2 error {:.2e} (velocity), {:.2e} (stretching or \
             gradient) on {} sampled targets; ask for a finer `accuracy` or use evaluator = \
             \"direct\"",
            self.evaluation, self.requested, self.velocity_l2, self.derivative_l2, self.sample
        ))
    }
}

impl std::fmt::Display for AccuracyCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FMM check at evaluation {} ({} targets, σ_max {:.4}): velocity L2 {:.2e}, max {:.2e}; \
             derivative L2 {:.2e}, max {:.2e} (requested {:e})",
            self.evaluation,
            self.sample,
            self.sigma_max,
            self.velocity_l2,
            self.velocity_max,
            self.derivative_l2,
            self.derivative_max,
            self.requested
        )
    }
}

/// Sample size for a check costing about a tenth of an evaluation whose near field summed
/// `near_pairs` pairs: at least 16 targets, at most 1024 and all of them.
pub fn sample_size(near_pairs: u64, sources: usize, targets: usize) -> usize {
    let m = (0.1 * near_pairs as f64 / sources.max(1) as f64) as usize;
    m.clamp(16, 1024).min(targets)
}

/// Compares `result` (the FMM's answer for `targets` and `extra`) with the direct sum on
/// `sample` targets drawn with `seed`, by the shared measures of [`crate::summation::verify`]:
/// [velocity L2, velocity max, derivative L2, derivative max].
pub fn check_sample(
    sources: &Sources,
    targets: &[[f64; 3]],
    extra: &Extra,
    result: &Evaluation,
    sample: usize,
    seed: u64,
) -> Result<[f64; 4], SummationError> {
    let idx = verify::sample(targets.len(), sample, seed);
    let e = verify::errors_on_sample(result, &mut DirectFreeSpace, sources, targets, *extra, &idx)?;
    let d = e.extra.unwrap_or_default();
    Ok([e.velocity.rel_l2, e.velocity.max_rel, d.rel_l2, d.max_rel])
}
