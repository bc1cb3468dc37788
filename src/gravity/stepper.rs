//! The seam between the run core's gravity model and the leapfrog steppers: the host one
//! ([`super::host::HostLeapfrog`], f64 on the CPU with any engine) and the GPU-resident one
//! ([`super::resident::ResidentLeapfrog`]). Both keep the accelerations and potentials of the
//! current positions, so a step costs one force evaluation.

use super::bodies::BodySet;
use super::GravityError;
use crate::summation::fmm::AccuracyCheck;

/// A kick–drift–kick leapfrog with a fixed step (docs/physics.md §10):
///
/// ```text
/// v ← v + a(x) Δt/2;   x ← x + v Δt;   v ← v + a(x) Δt/2
/// ```
///
/// where a(x) (and the potential φ(x), for the energy) come from the stepper's gravitational
/// summation at its accuracy. The stepper's state is its bodies: a(x) and φ(x) are recomputed from
/// them by [`BodyStepper::set_bodies`], so a run restored from its bodies continues bit for bit.
pub trait BodyStepper: Send {
    /// A description for the log and the manifest: the method, device, precision, softening.
    fn describe(&self) -> String;

    /// The number of bodies.
    fn len(&self) -> usize;

    /// Whether there are no bodies.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The softening ε of the force (and of the potential energy).
    fn softening(&self) -> f64;

    /// Advances by one step `dt`. On error the bodies, accelerations and potentials are those
    /// before the step (a non-finite result is [`GravityError::NonFinite`]).
    fn step(&mut self, dt: f64) -> Result<(), GravityError>;

    /// A copy of the bodies now (from the device for the GPU stepper).
    fn bodies(&mut self) -> Result<BodySet, GravityError>;

    /// φ at each body, in body order, from the evaluation at the current positions (the same
    /// evaluation as the accelerations, so the energy uses the force's own softened potential).
    fn potentials(&mut self) -> Result<Vec<f64>, GravityError>;

    /// Replaces the bodies (a checkpoint's, or new initial conditions) and evaluates a and φ at
    /// them.
    fn set_bodies(&mut self, bodies: BodySet) -> Result<(), GravityError>;

    /// The summation's built-in accuracy checks (the FMM's, against all pairs) since the last
    /// call.
    fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck>;

    /// Wall seconds per phase since the last call ("gravity forces", "gravity update").
    fn take_timings(&mut self) -> Vec<(&'static str, f64)>;
}
