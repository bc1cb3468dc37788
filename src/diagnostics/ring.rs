//! Vortex rings about the z axis, from their particles: one ring (`vortex/ring.csv`) or several
//! coaxial rings, each on its own (`vortex/rings.csv`).
//!
//! Position and speed are impulse-weighted over a ring's particles with weights
//! w_p = (x_p × α_p)·ẑ: Z = Σ w_p z_p / Σ w_p and U = dZ/dt, exact for the particle state
//! ([`ring_diagnostics`]); the impulse radius is R_I = √(I_z/(πΓ)) with I_z = ½ Σ w_p the ring's
//! own axial impulse. Saffman's speed for a Gaussian core is in
//! [`crate::init::particles::saffman_ring_speed`] (docs/physics.md §7).
//!
//! Coaxial rings ([`coaxial_ring_diagnostics`]) are told apart by particle id: ring k is the ids
//! of the k-th range (`init::particles::coaxial_rings` makes them ring after ring). Free-space
//! runs never remesh, so the ids, and with them each ring's particles, stay the same all run.

use crate::particles::ParticleSet;
use std::f64::consts::PI;
use std::ops::Range;

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
    ring_of(&p.x, &p.alpha, u, dalpha_dt, circulation)
}

/// [`ring_diagnostics`] of the particles given as slices (one ring's).
fn ring_of(
    x: &[[f64; 3]],
    alpha: &[[f64; 3]],
    u: &[[f64; 3]],
    dalpha_dt: &[[f64; 3]],
    circulation: f64,
) -> RingDiagnostics {
    let (mut sw, mut swz) = (0.0, 0.0);
    for (x, a) in x.iter().zip(alpha) {
        let w = x[0] * a[1] - x[1] * a[0];
        sw += w;
        swz += w * x[2];
    }
    let z = swz / sw;
    let mut rate = 0.0;
    for (((x, a), v), da) in x.iter().zip(alpha).zip(u).zip(dalpha_dt) {
        let w = x[0] * a[1] - x[1] * a[0];
        let w_dot = (v[0] * a[1] - v[1] * a[0]) + (x[0] * da[1] - x[1] * da[0]);
        rate += w * v[2] + w_dot * (x[2] - z);
    }
    // I_z = ½ Σ w (halving is exact, so this is `ParticleSet::impulse`'s z to the bit).
    RingDiagnostics {
        z,
        speed: rate / sw,
        radius: (0.5 * sw / (PI * circulation)).sqrt(),
    }
}

/// One ring of a set of coaxial rings: the ids of its particles and its circulation.
#[derive(Debug, Clone, PartialEq)]
pub struct RingMembers {
    pub ids: Range<u64>,
    pub circulation: f64,
}

/// [`ring_diagnostics`] of each coaxial ring on its own, with its particle count found: ring k is
/// the particles whose ids lie in `rings[k].ids` (module docs).
pub fn coaxial_ring_diagnostics(
    p: &ParticleSet,
    u: &[[f64; 3]],
    dalpha_dt: &[[f64; 3]],
    rings: &[RingMembers],
) -> Vec<(RingDiagnostics, usize)> {
    let identity = p.id.iter().enumerate().all(|(i, &id)| id == i as u64);
    rings
        .iter()
        .map(|ring| {
            if identity {
                // Ids are indices (the usual case): ring k is a slice.
                let end = (ring.ids.end as usize).min(p.len());
                let r = (ring.ids.start as usize).min(end)..end;
                let d = ring_of(
                    &p.x[r.clone()],
                    &p.alpha[r.clone()],
                    &u[r.clone()],
                    &dalpha_dt[r.clone()],
                    ring.circulation,
                );
                (d, r.len())
            } else {
                let members: Vec<usize> = (0..p.len())
                    .filter(|&i| ring.ids.contains(&p.id[i]))
                    .collect();
                let pick = |v: &[[f64; 3]]| members.iter().map(|&i| v[i]).collect::<Vec<_>>();
                let d = ring_of(
                    &pick(&p.x),
                    &pick(&p.alpha),
                    &pick(u),
                    &pick(dalpha_dt),
                    ring.circulation,
                );
                (d, members.len())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::particles::{coaxial_rings, vortex_ring, CoaxialRing, CoreSampling};

    /// Two rings: each ring's figures from the set equal those of the ring alone, whatever the
    /// particle order.
    #[test]
    fn coaxial_rings_are_measured_one_by_one() {
        let s = CoreSampling::overlapping(0.1, 3.0);
        let rings =
            [(1.0, -0.5, 1.0), (0.7, 0.5, 2.0)].map(|(radius, z, circulation)| CoaxialRing {
                radius,
                z,
                circulation,
                core: 0.2,
            });
        let (p, ranges) = coaxial_rings(&rings, &[0.15, 0.15], &s);
        let members: Vec<RingMembers> = ranges
            .iter()
            .zip(&rings)
            .map(|(r, ring)| RingMembers {
                ids: r.clone(),
                circulation: ring.circulation,
            })
            .collect();
        // A made-up velocity: uniform axial speed plus a radial part, and no stretching.
        let u: Vec<[f64; 3]> = p.x.iter().map(|x| [0.1 * x[0], 0.1 * x[1], 0.3]).collect();
        let da = vec![[0.0; 3]; p.len()];
        let d = coaxial_ring_diagnostics(&p, &u, &da, &members);
        for (k, (ring, (di, count))) in rings.iter().zip(&d).enumerate() {
            assert_eq!(*count as u64, ranges[k].end - ranges[k].start);
            assert!((di.z - ring.z).abs() < 1e-12, "{di:?}");
            assert!((di.speed - 0.3).abs() < 1e-12, "{di:?}");
            // The same figures as the ring alone (same particles in the same order).
            let alone = vortex_ring(ring.radius, ring.circulation, 0.15, [0.0, 0.0, ring.z], &s);
            let r = ranges[k].start as usize..ranges[k].end as usize;
            assert_eq!(
                *di,
                ring_diagnostics(&alone, &u[r.clone()], &da[r], ring.circulation)
            );
            assert!(
                (di.radius - ring.radius).abs() / ring.radius < 0.05,
                "{di:?}"
            );
        }
        // Reversed order (ids kept): the same figures to round-off.
        let mut q = p.clone();
        q.x.reverse();
        q.alpha.reverse();
        q.sigma.reverse();
        q.id.reverse();
        let (mut ur, mut dr) = (u.clone(), da.clone());
        ur.reverse();
        dr.reverse();
        let e = coaxial_ring_diagnostics(&q, &ur, &dr, &members);
        for (a, b) in d.iter().zip(&e) {
            assert_eq!(a.1, b.1);
            assert!((a.0.z - b.0.z).abs() < 1e-12 && (a.0.radius - b.0.radius).abs() < 1e-12);
        }
    }
}
