//! The kick–drift–kick leapfrog with the bodies resident on one GPU (docs/physics.md §10):
//! masses, positions and velocities in f64 on the device, the kicks and the drift by
//! `kernels/nbody.cu`, the forces by the engine's device forms (all pairs, or the FMM with its tree
//! built on the device). The host sees the bodies only at outputs and checkpoints, and one finite
//! flag per step.

use super::bodies::BodySet;
use super::stepper::BodyStepper;
use super::GravityError;
use crate::device::cuda::Gpu;
use crate::summation::fmm::AccuracyCheck;
use crate::summation::interaction::PlummerGravity;
use crate::summation::planner::EvaluatorOptions;
use crate::summation::EvaluatorKind;
use std::sync::Arc;

/// The GPU leapfrog (module docs).
pub struct ResidentLeapfrog {
    _private: (),
}

impl ResidentLeapfrog {
    /// A leapfrog over `bodies` on `gpu` with forces by `method` (`Direct` or `Fmm`) at
    /// `options` (the FMM's accuracy and check cadence), evaluated here at the bodies.
    pub fn new(
        gpu: Arc<Gpu>,
        method: EvaluatorKind,
        gravity: PlummerGravity,
        options: &EvaluatorOptions,
        bodies: BodySet,
    ) -> Result<ResidentLeapfrog, GravityError> {
        let _ = (gpu, method, gravity, options, bodies);
        todo!("helper `gpunbody`")
    }
}

impl BodyStepper for ResidentLeapfrog {
    fn describe(&self) -> String {
        todo!("helper `gpunbody`")
    }
    fn len(&self) -> usize {
        todo!("helper `gpunbody`")
    }
    fn softening(&self) -> f64 {
        todo!("helper `gpunbody`")
    }
    fn step(&mut self, dt: f64) -> Result<(), GravityError> {
        let _ = dt;
        todo!("helper `gpunbody`")
    }
    fn bodies(&mut self) -> Result<BodySet, GravityError> {
        todo!("helper `gpunbody`")
    }
    fn potentials(&mut self) -> Result<Vec<f64>, GravityError> {
        todo!("helper `gpunbody`")
    }
    fn set_bodies(&mut self, bodies: BodySet) -> Result<(), GravityError> {
        let _ = bodies;
        todo!("helper `gpunbody`")
    }
    fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck> {
        todo!("helper `gpunbody`")
    }
    fn take_timings(&mut self) -> Vec<(&'static str, f64)> {
        todo!("helper `gpunbody`")
    }
}
