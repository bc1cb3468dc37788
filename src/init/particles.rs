//! Particle initial conditions for flows defined by their vorticity: a vortex ring, several
//! coaxial rings (leapfrogging) and a straight vortex tube, each with a Gaussian core resolved by
//! many particles (not a single filament).
//!
//! The core is sampled on a square grid of spacing h in the plane normal to the centreline, out
//! to `core_extent` standard deviations; each particle carries α = ω(ρ)·(cell volume) along the
//! centreline's tangent and a blob of core radius σ_p. The resulting field is the sampled core
//! convolved with the blobs: a Gaussian core of variance σ_c² + σ_p² in the resolved limit
//! ([`effective_core`]).

use crate::particles::ParticleSet;
use std::f64::consts::{PI, TAU};
use std::ops::Range;

/// Discretisation of a Gaussian vortex core by particles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoreSampling {
    /// Particle spacing h (in the core cross-section and along the centreline).
    pub spacing: f64,
    /// Blob core radius of each particle, σ_p (overlap × h).
    pub particle_sigma: f64,
    /// Core cut-off radius in units of the sampled core's σ_c (3 to 4 keeps > 99 % of Γ).
    pub core_extent: f64,
}

#[cfg(test)]
impl CoreSampling {
    /// Particles `h` apart with blobs of core `h` (overlap 1), out to `core_extent` standard
    /// deviations: the tests' sampling.
    pub(crate) fn overlapping(h: f64, core_extent: f64) -> Self {
        CoreSampling {
            spacing: h,
            particle_sigma: h,
            core_extent,
        }
    }
}

/// Standard deviation of the core the particles represent: √(σ_c² + σ_p²).
pub fn effective_core(sampled_sigma: f64, particle_sigma: f64) -> f64 {
    (sampled_sigma * sampled_sigma + particle_sigma * particle_sigma).sqrt()
}

/// Cross-section points (a, b, weight) of a Gaussian core of circulation Γ and standard deviation
/// σ_c on a square grid of spacing h, ρ ≤ extent·σ_c; weights ω(ρ)h² are rescaled so that they
/// sum to Γ exactly.
fn core_cross_section(gamma: f64, sigma_c: f64, s: &CoreSampling) -> Vec<(f64, f64, f64)> {
    let h = s.spacing;
    let rmax = s.core_extent * sigma_c;
    let m = (rmax / h).ceil() as i64;
    let mut pts = Vec::new();
    for i in -m..=m {
        for j in -m..=m {
            let (a, b) = (i as f64 * h, j as f64 * h);
            let r2 = a * a + b * b;
            if r2 <= rmax * rmax {
                let w = (-r2 / (2.0 * sigma_c * sigma_c)).exp();
                pts.push((a, b, w));
            }
        }
    }
    let total: f64 = pts.iter().map(|p| p.2).sum();
    pts.iter_mut().for_each(|p| p.2 *= gamma / total);
    pts
}

/// Number of cross-sections around a ring of radius R: about one every h along the centreline.
fn ring_sections(radius: f64, s: &CoreSampling) -> usize {
    ((TAU * radius / s.spacing).round() as usize).max(8)
}

/// The number of particles [`vortex_ring`] makes for these arguments, without making them.
pub fn vortex_ring_len(radius: f64, sigma_c: f64, s: &CoreSampling) -> usize {
    ring_sections(radius, s) * core_cross_section(1.0, sigma_c, s).len()
}

/// A vortex ring of radius R and circulation Γ about the z axis, centred at `centre`, with a
/// Gaussian core of standard deviation σ_c sampled as described in the module docs. Vorticity
/// points along +φ, so for Γ > 0 the ring moves towards +z.
pub fn vortex_ring(
    radius: f64,
    gamma: f64,
    sigma_c: f64,
    centre: [f64; 3],
    s: &CoreSampling,
) -> ParticleSet {
    let section = core_cross_section(gamma, sigma_c, s);
    let n_phi = ring_sections(radius, s);
    let dphi = TAU / n_phi as f64;
    let mut p = ParticleSet::with_capacity(n_phi * section.len());
    for k in 0..n_phi {
        let phi = (k as f64 + 0.5) * dphi;
        let (sp, cp) = phi.sin_cos();
        for &(a, b, w) in &section {
            // a: radial offset from the core centre, b: axial offset.
            let rho = radius + a;
            let x = [centre[0] + rho * cp, centre[1] + rho * sp, centre[2] + b];
            // Circulation element w over an arc of length ρ dφ: α = w · ρ dφ · ê_φ.
            let len = rho * dphi;
            p.push(x, [-sp * w * len, cp * w * len, 0.0], s.particle_sigma);
        }
    }
    p
}

/// One ring of a set of coaxial rings about the z axis (`kind = "coaxial-rings"`): radius R,
/// axial position z of its plane, circulation Γ and the standard deviation of its Gaussian core
/// (the core the particles represent, blobs included).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CoaxialRing {
    pub radius: f64,
    pub z: f64,
    pub circulation: f64,
    pub core: f64,
}

/// Coaxial vortex rings about the z axis: ring k is [`vortex_ring`] (radius, circulation,
/// sampled core `sampled_sigma[k]`) centred at (0, 0, z_k). The particles are ring after ring, so
/// ring k's particles are those with ids in the k-th range returned (ids are indices here, and
/// the free-space steppers neither reorder nor remesh them).
pub fn coaxial_rings(
    rings: &[CoaxialRing],
    sampled_sigma: &[f64],
    s: &CoreSampling,
) -> (ParticleSet, Vec<Range<u64>>) {
    assert_eq!(rings.len(), sampled_sigma.len());
    let total = coaxial_rings_len(rings, sampled_sigma, s).iter().sum();
    let mut p = ParticleSet::with_capacity(total);
    let mut ranges = Vec::with_capacity(rings.len());
    for (ring, &sigma_c) in rings.iter().zip(sampled_sigma) {
        let start = p.len() as u64;
        let one = vortex_ring(
            ring.radius,
            ring.circulation,
            sigma_c,
            [0.0, 0.0, ring.z],
            s,
        );
        for ((x, a), sigma) in one.x.iter().zip(&one.alpha).zip(&one.sigma) {
            p.push(*x, *a, *sigma);
        }
        ranges.push(start..p.len() as u64);
    }
    (p, ranges)
}

/// The particle count of each ring of [`coaxial_rings`], without making them.
pub fn coaxial_rings_len(
    rings: &[CoaxialRing],
    sampled_sigma: &[f64],
    s: &CoreSampling,
) -> Vec<usize> {
    rings
        .iter()
        .zip(sampled_sigma)
        .map(|(ring, &sigma_c)| vortex_ring_len(ring.radius, sigma_c, s))
        .collect()
}

/// A straight vortex tube along z of the given length, centred at (x0, y0, 0), circulation Γ,
/// Gaussian core σ_c; layers every ≈h in z (rounded so that an integer number of layers fills
/// the length). With length 2π it is a tube through the periodic box [−π, π)^3.
pub fn vortex_tube(
    gamma: f64,
    sigma_c: f64,
    centre: [f64; 2],
    length: f64,
    s: &CoreSampling,
) -> ParticleSet {
    let section = core_cross_section(gamma, sigma_c, s);
    let nz = ((length / s.spacing).round() as usize).max(1);
    let hz = length / nz as f64;
    let mut p = ParticleSet::with_capacity(nz * section.len());
    for k in 0..nz {
        let z = -0.5 * length + (k as f64 + 0.5) * hz;
        for &(a, b, w) in &section {
            p.push(
                [centre[0] + a, centre[1] + b, z],
                [0.0, 0.0, w * hz],
                s.particle_sigma,
            );
        }
    }
    p
}

/// Saffman's speed of a thin ring with a Gaussian core of standard deviation σ:
/// U = Γ/(4πR) [ln(8R/σ) − 0.9045].
pub fn saffman_ring_speed(radius: f64, gamma: f64, sigma: f64) -> f64 {
    gamma / (4.0 * PI * radius) * ((8.0 * radius / sigma).ln() - 0.9045)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_has_circulation_and_impulse() {
        let s = CoreSampling::overlapping(0.05, 3.0);
        let (r, g) = (1.0, 1.0);
        let p = vortex_ring(r, g, 0.08, [0.0; 3], &s);
        assert!(p.len() < 20_000, "{}", p.len());
        // Σα = 0 for a closed ring (by symmetry, to round-off).
        let t = p.total_strength();
        assert!(t.iter().all(|c| c.abs() < 1e-12), "{t:?}");
        // Impulse of a ring: I = Γ π R² ẑ (thin-core limit; the core adds O(σ²/R²)).
        let i = p.impulse();
        assert!(i[0].abs() < 1e-12 && i[1].abs() < 1e-12);
        let thin = g * PI * r * r;
        assert!(
            (i[2] - thin).abs() / thin < 0.02,
            "I_z = {} vs {thin}",
            i[2]
        );
    }

    #[test]
    fn coaxial_rings_are_ring_after_ring() {
        let s = CoreSampling::overlapping(0.1, 3.0);
        let rings =
            [(1.0, 0.0, 1.0), (0.8, 1.0, 2.0)].map(|(radius, z, circulation)| CoaxialRing {
                radius,
                z,
                circulation,
                core: 0.15,
            });
        let sigma_c = [0.11, 0.12];
        let (p, ranges) = coaxial_rings(&rings, &sigma_c, &s);
        let lens = coaxial_rings_len(&rings, &sigma_c, &s);
        assert_eq!(
            ranges,
            vec![0..lens[0] as u64, lens[0] as u64..p.len() as u64]
        );
        assert_eq!(p.id, (0..p.len() as u64).collect::<Vec<_>>());
        for (k, (ring, range)) in rings.iter().zip(&ranges).enumerate() {
            let one = vortex_ring(
                ring.radius,
                ring.circulation,
                sigma_c[k],
                [0.0, 0.0, ring.z],
                &s,
            );
            let r = range.start as usize..range.end as usize;
            assert_eq!(one.len(), vortex_ring_len(ring.radius, sigma_c[k], &s));
            assert_eq!(&p.x[r.clone()], &one.x[..]);
            assert_eq!(&p.alpha[r], &one.alpha[..]);
        }
    }

    #[test]
    fn tube_strength_sums_to_circulation_times_length() {
        let s = CoreSampling::overlapping(0.1, 4.0);
        let p = vortex_tube(2.0, 0.2, [0.0, 0.0], TAU, &s);
        let t = p.total_strength();
        assert!((t[2] - 2.0 * TAU).abs() < 1e-12);
    }
}
