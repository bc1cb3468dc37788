//! The FMM's built-in accuracy check (issue 13): a random sample of targets summed directly
//! (f64, all pairs) and compared with the FMM's answer there, sized to cost at most a tenth of an
//! evaluation, at the first evaluation and every so many after. Errors follow docs/physics.md §8:
//! relative L2 over the sample and the largest component error over the rms component of the
//! reference ([`verify::rel_l2`], [`verify::max_rel`]), per output: the velocity and the
//! stretching or gradient of the Biot–Savart law ([`check_sample`]), the acceleration and the
//! potential of gravity ([`check_gravity_sample`]).

use crate::summation::interaction::{Bodies, GravityEvaluation, GravitySummation};
use crate::summation::verify::ErrorStats;
use crate::summation::{verify, Evaluation, Extra, Sources, Summation, SummationError};

/// The outputs a Biot–Savart check compares: the velocity, then the stretching or gradient.
pub const BIOT_SAVART_OUTPUTS: [&str; 2] = ["velocity", "stretching or gradient"];
/// The outputs a gravity check compares: the acceleration, then the potential.
pub const GRAVITY_OUTPUTS: [&str; 2] = ["acceleration", "potential"];

/// One comparison with the direct sum.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct AccuracyCheck {
    /// Which evaluation (1 = the first) was checked.
    pub evaluation: u64,
    /// Targets in the sample.
    pub sample: usize,
    /// The requested relative accuracy.
    pub requested: f64,
    /// The largest core radius at the check (0 for gravity).
    pub sigma_max: f64,
    /// The names of the two outputs compared ([`BIOT_SAVART_OUTPUTS`], [`GRAVITY_OUTPUTS`]).
    pub outputs: [&'static str; 2],
    /// The first output (velocity; gravity: acceleration): relative L2 and max |error| / rms.
    pub velocity_l2: f64,
    pub velocity_max: f64,
    /// The second (stretching or gradient, whichever was evaluated, 0 for velocity-only
    /// evaluations; gravity: the potential).
    pub derivative_l2: f64,
    pub derivative_max: f64,
}

/// A check fails the run when a relative L2 error exceeds the request by this factor. The
/// issue-25 contract (L2 ≤ the request, sampled maximum ≤ 10×) is printed by `vpm bench fmm`
/// and logged by every check, but not gated: a thin ring's stretching (`leapfrog-rings` on an
/// H100) measured L2 8.7e-5 and a maximum of 1.7e-3 at a request of 1e-4, the same at p = 9 and
/// p = 10, and later in that run L2 1.25e-4 and maximum 3.8e-3 at a request of 2e-4; a gate at
/// the contract stopped the run (docs/performance.md, issue 25).
pub const FAILURE_FACTOR: f64 = 10.0;
/// The contract's bound on the sampled maximum, in units of the request.
pub const MAX_FACTOR: f64 = 10.0;

impl AccuracyCheck {
    /// Whether both relative L2 errors are within [`FAILURE_FACTOR`] × the request.
    pub fn passed(&self) -> bool {
        self.velocity_l2 <= FAILURE_FACTOR * self.requested
            && self.derivative_l2 <= FAILURE_FACTOR * self.requested
    }

    /// Whether the issue-25 contract holds for both outputs: relative L2 ≤ the request and the
    /// largest error over the rms ≤ [`MAX_FACTOR`] × the request (logged, not gated).
    pub fn meets_contract(&self) -> bool {
        let a = self.requested;
        self.velocity_l2 <= a
            && self.derivative_l2 <= a
            && self.velocity_max <= MAX_FACTOR * a
            && self.derivative_max <= MAX_FACTOR * a
    }

    /// The error that stops a run after a failed check.
    pub fn failure(&self) -> SummationError {
        SummationError::AccuracyCheck(format!(
            "the FMM's check missed the requested accuracy {:e} by more than {FAILURE_FACTOR}× \
             ({self}); ask for a finer `accuracy` or another evaluator (\"direct\" in free \
             space, \"ewald\" in the periodic box)",
            self.requested
        ))
    }
}

impl std::fmt::Display for AccuracyCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FMM check at evaluation {} ({} targets, σ_max {:.4}): {} L2 {:.2e}, max {:.2e}; \
             {} L2 {:.2e}, max {:.2e} (requested {:e})",
            self.evaluation,
            self.sample,
            self.sigma_max,
            self.outputs[0],
            self.velocity_l2,
            self.velocity_max,
            self.outputs[1],
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

/// Compares `result` (the FMM's answer for `targets` and `extra`) with `reference` (the direct
/// sum in free space; a finer Ewald sum in the periodic box) on `sample` targets drawn with
/// `seed`, by the shared measures of [`crate::summation::verify`]: [velocity L2, velocity max,
/// derivative L2, derivative max].
pub fn check_sample(
    reference: &mut dyn Summation,
    sources: &Sources,
    targets: &[[f64; 3]],
    extra: &Extra,
    result: &Evaluation,
    sample: usize,
    seed: u64,
) -> Result<[f64; 4], SummationError> {
    let idx = verify::sample(targets.len(), sample, seed);
    let e = verify::errors_on_sample(result, reference, sources, targets, *extra, &idx)?;
    let d = e.extra.unwrap_or_default();
    Ok([e.velocity.rel_l2, e.velocity.max_rel, d.rel_l2, d.max_rel])
}

/// The gravity form of [`check_sample`]: `result` (the FMM's φ and a at `targets`, or at the
/// bodies when `None`) against `reference` (the all-pairs sum, [`crate::summation::direct::DirectGravity`]) on `sample`
/// targets drawn with `seed`: [acceleration L2, acceleration max, potential L2, potential max].
pub fn check_gravity_sample(
    reference: &mut dyn GravitySummation,
    bodies: &Bodies,
    targets: Option<&[[f64; 3]]>,
    result: &GravityEvaluation,
    sample: usize,
    seed: u64,
) -> Result<[f64; 4], SummationError> {
    let all = targets.unwrap_or(bodies.x);
    let idx = verify::sample(all.len(), sample, seed);
    let pick = |i: &usize| all[*i];
    let tx: Vec<[f64; 3]> = idx.iter().map(pick).collect();
    let mut want = GravityEvaluation::default();
    reference.evaluate_gravity(bodies, Some(&tx), &mut want)?;
    let acc: Vec<[f64; 3]> = idx.iter().map(|&i| result.acceleration[i]).collect();
    let phi: Vec<[f64; 1]> = idx.iter().map(|&i| [result.potential[i]]).collect();
    let want_phi: Vec<[f64; 1]> = want.potential.iter().map(|&p| [p]).collect();
    let (a, p) = (
        ErrorStats::of(&acc, &want.acceleration),
        ErrorStats::of(&phi, &want_phi),
    );
    Ok([a.rel_l2, a.max_rel, p.rel_l2, p.max_rel])
}
