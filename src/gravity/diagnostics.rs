//! What a gravity run reports at every output (docs/physics.md §11.4): the kinetic and potential
//! energy with the force's own softened potential, the total and its relative error against
//! t = 0, linear and angular momentum, the virial ratio 2K/|W|, the 10/50/90 % Lagrangian radii,
//! and the mass centre of every (galaxy, component).

use super::bodies::{centre_of_mass_of, BodySet, Component};
use std::collections::BTreeSet;

/// The mass centre of the bodies of one galaxy's component.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentCentre {
    pub galaxy: u8,
    pub component: Component,
    /// Σ m of its bodies.
    pub mass: f64,
    pub centre: [f64; 3],
    pub velocity: [f64; 3],
}

/// The figures of one output (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct GravityDiagnostics {
    /// K = ½ Σ m v².
    pub kinetic: f64,
    /// W = ½ Σ_i m_i φ_i (+ ½ Σ m_i²/ε with ε > 0: the self pairs the engine keeps), the
    /// softened potential energy the leapfrog conserves with K.
    pub potential: f64,
    /// K + W.
    pub energy: f64,
    /// Σ m v.
    pub momentum: [f64; 3],
    /// Σ m x × v (about the origin).
    pub angular_momentum: [f64; 3],
    /// 2K/|W| (0 when W = 0: no pairs).
    pub virial_ratio: f64,
    /// The radii about the centre of mass holding 10, 50 and 90 % of the mass
    /// ([`lagrangian_radii`]).
    pub lagrangian_radii: [f64; 3],
    /// The centre of mass and its velocity.
    pub centre_of_mass: [f64; 3],
    /// Per (galaxy, component) present, ordered by galaxy then component code.
    pub components: Vec<ComponentCentre>,
}

/// The mass fractions of [`GravityDiagnostics::lagrangian_radii`].
pub const LAGRANGIAN_FRACTIONS: [f64; 3] = [0.1, 0.5, 0.9];

/// The diagnostics of `bodies` with `potential` φ_i at each body (from the same evaluation as the
/// forces, self pairs included as the engine computes them) and softening ε. Deterministic: sums
/// in body order, whatever the thread count.
///
/// With ε > 0 the engine's φ_i holds the self pair −m_i/ε (docs/physics.md §10), which the
/// potential energy adds back: W = ½ Σ m_i φ_i + ½ Σ m_i²/ε = −½ Σ_{i≠j} m_i m_j / s_ij.
///
/// Panics if `potential` does not have one entry per body (a caller's bug).
pub fn diagnostics(bodies: &BodySet, potential: &[f64], softening: f64) -> GravityDiagnostics {
    let n = bodies.len();
    assert_eq!(
        potential.len(),
        n,
        "diagnostics: {} potentials for {n} bodies",
        potential.len()
    );
    let self_pair = |m: f64| {
        if softening > 0.0 {
            m * m / softening
        } else {
            0.0
        }
    };
    let (mut kinetic, mut potential_energy) = (0.0, 0.0);
    let (mut momentum, mut angular_momentum) = ([0.0; 3], [0.0; 3]);
    for (i, &phi) in potential.iter().enumerate() {
        let (m, x, v) = (bodies.mass[i], bodies.x[i], bodies.v[i]);
        kinetic += 0.5 * m * (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
        potential_energy += 0.5 * (m * phi + self_pair(m));
        let l = [
            x[1] * v[2] - x[2] * v[1],
            x[2] * v[0] - x[0] * v[2],
            x[0] * v[1] - x[1] * v[0],
        ];
        for k in 0..3 {
            momentum[k] += m * v[k];
            angular_momentum[k] += m * l[k];
        }
    }
    let virial_ratio = if potential_energy != 0.0 {
        2.0 * kinetic / potential_energy.abs()
    } else {
        0.0
    };
    let (centre_of_mass, _) = bodies.centre_of_mass();
    GravityDiagnostics {
        kinetic,
        potential: potential_energy,
        energy: kinetic + potential_energy,
        momentum,
        angular_momentum,
        virial_ratio,
        lagrangian_radii: lagrangian_radii(bodies, centre_of_mass, &LAGRANGIAN_FRACTIONS),
        centre_of_mass,
        components: component_centres(bodies),
    }
}

/// The Lagrangian radii of `bodies` about `centre` for mass `fractions` (each in [0, 1]): the
/// bodies sorted by distance from `centre` (ties by index), the radius of fraction f is the
/// distance of the first body at which the enclosed mass, counting that body, reaches f Σ m
/// (within a relative 1e-12 for rounding). No interpolation between bodies: the radius is a
/// body's distance, off by at most one body's step from the continuous one. Zeros without mass.
pub fn lagrangian_radii<const K: usize>(
    bodies: &BodySet,
    centre: [f64; 3],
    fractions: &[f64; K],
) -> [f64; K] {
    let total = bodies.total_mass();
    if bodies.is_empty() || total <= 0.0 {
        return [0.0; K];
    }
    let mut radii: Vec<(f64, usize)> = bodies
        .x
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let d = [x[0] - centre[0], x[1] - centre[1], x[2] - centre[2]];
            ((d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt(), i)
        })
        .collect();
    radii.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    fractions.map(|f| {
        let want = f * total * (1.0 - 1e-12);
        let mut enclosed = 0.0;
        for &(r, i) in &radii {
            enclosed += bodies.mass[i];
            if enclosed >= want {
                return r;
            }
        }
        radii[radii.len() - 1].0
    })
}

/// The mass centre of every (galaxy, component) present, ordered by galaxy then component code,
/// each summed in body order.
fn component_centres(bodies: &BodySet) -> Vec<ComponentCentre> {
    let groups: BTreeSet<(u8, Component)> = bodies
        .galaxy
        .iter()
        .copied()
        .zip(bodies.component.iter().copied())
        .collect();
    groups
        .into_iter()
        .map(|(galaxy, component)| {
            let select = |i: usize| bodies.galaxy[i] == galaxy && bodies.component[i] == component;
            let mass = (0..bodies.len())
                .filter(|&i| select(i))
                .map(|i| bodies.mass[i])
                .sum();
            let (centre, velocity) = centre_of_mass_of(bodies, select);
            ComponentCentre {
                galaxy,
                component,
                mass,
                centre,
                velocity,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gravity::host::HostLeapfrog;
    use crate::gravity::stepper::BodyStepper;
    use crate::summation::direct::DirectGravity;
    use crate::summation::interaction::PlummerGravity;

    fn three() -> BodySet {
        let mut b = BodySet::default();
        b.push(1.0, [0.0, 0.0, 0.0], [0.5, 0.0, 0.0], Component::Body, 0);
        b.push(2.0, [3.0, 0.0, 0.0], [0.0, -1.0, 0.0], Component::Disk, 1);
        b.push(3.0, [0.0, 4.0, 0.0], [0.0, 0.0, 2.0], Component::Halo, 0);
        b
    }

    /// φ at the bodies as a run gets it: the host leapfrog's evaluation by all pairs.
    fn potentials(b: &BodySet, eps: f64) -> Vec<f64> {
        let summation = DirectGravity::new(PlummerGravity::new(eps).unwrap());
        let mut s = HostLeapfrog::new(Box::new(summation), b.clone()).unwrap();
        s.potentials().unwrap()
    }

    #[test]
    fn potential_energy_is_the_pair_sum_by_hand() {
        let b = three();
        // Distances 3, 4, 5 (a 3-4-5 triangle): with ε, s = (d² + ε²)^{1/2}.
        for eps in [0.0, 0.5] {
            let s = |d: f64| (d * d + eps * eps).sqrt();
            let w = -(1.0 * 2.0 / s(3.0) + 1.0 * 3.0 / s(4.0) + 2.0 * 3.0 / s(5.0));
            let k = 0.5 * (1.0 * 0.25 + 2.0 * 1.0 + 3.0 * 4.0);
            let d = diagnostics(&b, &potentials(&b, eps), eps);
            assert!(
                (d.potential - w).abs() < 1e-14,
                "ε = {eps}: {} vs {w}",
                d.potential
            );
            assert!((d.kinetic - k).abs() < 1e-15);
            assert!((d.energy - (k + w)).abs() < 1e-14);
            assert!((d.virial_ratio - 2.0 * k / w.abs()).abs() < 1e-14);
        }
    }

    #[test]
    fn momenta_and_component_centres() {
        let b = three();
        let d = diagnostics(&b, &potentials(&b, 0.1), 0.1);
        assert_eq!(d.momentum, [0.5, -2.0, 6.0]);
        // L = Σ m x × v: body 1: 2·(3,0,0)×(0,−1,0) = (0,0,−6); body 2: 3·(0,4,0)×(0,0,2) = (24,0,0).
        assert_eq!(d.angular_momentum, [24.0, 0.0, -6.0]);
        assert_eq!(d.centre_of_mass, [1.0, 2.0, 0.0]);
        let keys: Vec<(u8, Component, f64)> = d
            .components
            .iter()
            .map(|c| (c.galaxy, c.component, c.mass))
            .collect();
        assert_eq!(
            keys,
            vec![
                (0, Component::Body, 1.0),
                (0, Component::Halo, 3.0),
                (1, Component::Disk, 2.0)
            ]
        );
        assert_eq!(d.components[1].centre, [0.0, 4.0, 0.0]);
        assert_eq!(d.components[1].velocity, [0.0, 0.0, 2.0]);
    }

    #[test]
    fn lagrangian_radii_take_the_first_body_reaching_the_fraction() {
        // Ten unit masses at distances 1..=10 from the origin along x, centre given.
        let mut b = BodySet::default();
        for i in (1..=10).rev() {
            b.push(0.1, [i as f64, 0.0, 0.0], [0.0; 3], Component::Body, 0);
        }
        let r = lagrangian_radii(&b, [0.0; 3], &[0.1, 0.25, 0.5, 0.9, 1.0]);
        assert_eq!(r, [1.0, 3.0, 5.0, 9.0, 10.0]);
        assert_eq!(
            lagrangian_radii(&BodySet::default(), [0.0; 3], &[0.5]),
            [0.0]
        );
    }
}
