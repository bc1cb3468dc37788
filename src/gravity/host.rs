//! The kick–drift–kick leapfrog on the host in f64 (docs/physics.md §10), with any
//! [`GravitySummation`] for the forces (all pairs or the FMM, on the CPU or a GPU).

use super::bodies::BodySet;
use super::stepper::BodyStepper;
use super::GravityError;
use crate::summation::fmm::AccuracyCheck;
use crate::summation::interaction::{Bodies, GravityEvaluation, GravitySummation};
use std::time::Instant;

/// The leapfrog of [`BodyStepper`] with the bodies on the host.
pub struct HostLeapfrog {
    summation: Box<dyn GravitySummation>,
    bodies: BodySet,
    /// φ and a at the current positions.
    forces: GravityEvaluation,
    /// The trial step's state, swapped in when it is finite.
    trial: BodySet,
    trial_forces: GravityEvaluation,
    force_seconds: f64,
    update_seconds: f64,
}

impl HostLeapfrog {
    /// A leapfrog over `bodies` with forces from `summation` (evaluated here at the bodies).
    pub fn new(
        summation: Box<dyn GravitySummation>,
        bodies: BodySet,
    ) -> Result<HostLeapfrog, GravityError> {
        let mut s = HostLeapfrog {
            summation,
            bodies: BodySet::default(),
            forces: GravityEvaluation::default(),
            trial: BodySet::default(),
            trial_forces: GravityEvaluation::default(),
            force_seconds: 0.0,
            update_seconds: 0.0,
        };
        s.set_bodies(bodies)?;
        Ok(s)
    }

    /// φ and a at `bodies` into `out`.
    fn evaluate(
        summation: &mut dyn GravitySummation,
        bodies: &BodySet,
        out: &mut GravityEvaluation,
        seconds: &mut f64,
    ) -> Result<(), GravityError> {
        let start = Instant::now();
        let b = Bodies {
            x: &bodies.x,
            mass: &bodies.mass,
        };
        summation.evaluate_gravity(&b, None, out)?;
        *seconds += start.elapsed().as_secs_f64();
        Ok(())
    }
}

/// v ← v + a h for every body.
fn kick(v: &mut [[f64; 3]], a: &[[f64; 3]], h: f64) {
    for (v, a) in v.iter_mut().zip(a) {
        for k in 0..3 {
            v[k] += a[k] * h;
        }
    }
}

/// The first body whose position or velocity is not finite.
fn first_non_finite(b: &BodySet) -> Option<usize> {
    (0..b.len()).find(|&i| b.x[i].iter().chain(b.v[i].iter()).any(|c| !c.is_finite()))
}

impl BodyStepper for HostLeapfrog {
    fn describe(&self) -> String {
        format!(
            "kick–drift–kick leapfrog (host f64), forces: {}",
            self.summation.name()
        )
    }

    fn len(&self) -> usize {
        self.bodies.len()
    }

    fn softening(&self) -> f64 {
        self.summation.gravity().softening
    }

    fn step(&mut self, dt: f64) -> Result<(), GravityError> {
        let start = Instant::now();
        self.trial.clone_from(&self.bodies);
        let half = 0.5 * dt;
        kick(&mut self.trial.v, &self.forces.acceleration, half);
        for (x, v) in self.trial.x.iter_mut().zip(&self.trial.v) {
            for k in 0..3 {
                x[k] += v[k] * dt;
            }
        }
        self.update_seconds += start.elapsed().as_secs_f64();
        if let Some(i) = first_non_finite(&self.trial) {
            return Err(GravityError::NonFinite(format!(
                "body {i} became non-finite in the drift (Δt = {dt})"
            )));
        }
        Self::evaluate(
            self.summation.as_mut(),
            &self.trial,
            &mut self.trial_forces,
            &mut self.force_seconds,
        )?;
        let start = Instant::now();
        kick(&mut self.trial.v, &self.trial_forces.acceleration, half);
        let bad = first_non_finite(&self.trial).or_else(|| {
            (0..self.trial.len()).find(|&i| !self.trial_forces.potential[i].is_finite())
        });
        if let Some(i) = bad {
            return Err(GravityError::NonFinite(format!(
                "body {i}: its velocity or potential became non-finite (Δt = {dt})"
            )));
        }
        std::mem::swap(&mut self.bodies, &mut self.trial);
        std::mem::swap(&mut self.forces, &mut self.trial_forces);
        self.update_seconds += start.elapsed().as_secs_f64();
        Ok(())
    }

    fn bodies(&mut self) -> Result<BodySet, GravityError> {
        Ok(self.bodies.clone())
    }

    fn potentials(&mut self) -> Result<Vec<f64>, GravityError> {
        Ok(self.forces.potential.clone())
    }

    fn set_bodies(&mut self, bodies: BodySet) -> Result<(), GravityError> {
        bodies.check()?;
        let mut forces = GravityEvaluation::default();
        Self::evaluate(
            self.summation.as_mut(),
            &bodies,
            &mut forces,
            &mut self.force_seconds,
        )?;
        self.bodies = bodies;
        self.forces = forces;
        Ok(())
    }

    fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck> {
        self.summation.take_accuracy_checks()
    }

    fn take_timings(&mut self) -> Vec<(&'static str, f64)> {
        let t = vec![
            ("gravity forces", self.force_seconds),
            ("gravity update", self.update_seconds),
        ];
        self.force_seconds = 0.0;
        self.update_seconds = 0.0;
        t
    }
}
