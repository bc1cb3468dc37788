//! A vortex ring about the z axis, from its particles (`vortex/ring.csv`).
//!
//! Position and speed are impulse-weighted over the particles with weights w_p = (x_p × α_p)·ẑ:
//! Z = Σ w_p z_p / Σ w_p and U = dZ/dt, exact for the particle state ([`ring_diagnostics`]);
//! the impulse radius is R_I = √(I_z/(πΓ)) with I = ½ Σ x_p × α_p. Saffman's speed for a
//! Gaussian core is in [`crate::init::particles::saffman_ring_speed`] (docs/physics.md §7).

use crate::particles::ParticleSet;
use std::f64::consts::PI;

/// Ring position, speed and impulse radius (module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RingDiagnostics {
    /// Z = Σ w z / Σ w, w = (x × α)·ẑ.
    pub z: f64,
    /// U = dZ/dt, exact for the particle state (see [`ring_diagnostics`]).
    pub speed: f64,
    /// R_I = √(I_z/(πΓ)).
    pub radius: f64,
}

/// Position, speed and impulse radius of a ring about the z axis from its particles, their
/// velocities `u` and strength rates `dalpha_dt`.
///
/// The speed is the time derivative of the impulse-weighted centroid,
/// dZ/dt = [Σ w u_z + Σ ẇ (z − Z)] / Σ w with ẇ = (u × α + x × dα/dt)·ẑ. The first sum alone
/// (the weighted mean particle velocity) is not the ring speed: the weights grow with the
/// distance from the axis, so the core's rotation, +z on the inner side and −z on the outer,
/// biases it low by O(Γ/(4πR)) (22 % for the `ring` case); the ẇ term cancels that bias.
pub fn ring_diagnostics(
    p: &ParticleSet,
    u: &[[f64; 3]],
    dalpha_dt: &[[f64; 3]],
    circulation: f64,
) -> RingDiagnostics {
    let (mut sw, mut swz) = (0.0, 0.0);
    for (x, a) in p.x.iter().zip(&p.alpha) {
        let w = x[0] * a[1] - x[1] * a[0];
        sw += w;
        swz += w * x[2];
    }
    let z = swz / sw;
    let mut rate = 0.0;
    for (((x, a), v), da) in p.x.iter().zip(&p.alpha).zip(u).zip(dalpha_dt) {
        let w = x[0] * a[1] - x[1] * a[0];
        let w_dot = (v[0] * a[1] - v[1] * a[0]) + (x[0] * da[1] - x[1] * da[0]);
        rate += w * v[2] + w_dot * (x[2] - z);
    }
    RingDiagnostics {
        z,
        speed: rate / sw,
        radius: (p.impulse()[2] / (PI * circulation)).sqrt(),
    }
}
