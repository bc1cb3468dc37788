//! What a gravity run reports at every output (docs/physics.md §11.4): the kinetic and potential
//! energy with the force's own softened potential, the total and its relative error against
//! t = 0, linear and angular momentum, the virial ratio 2K/|W|, the 10/50/90 % Lagrangian radii,
//! and the mass centre of every (galaxy, component).

use super::bodies::{BodySet, Component};

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
    /// 2K/|W|.
    pub virial_ratio: f64,
    /// The radii about the centre of mass holding 10, 50 and 90 % of the mass.
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
pub fn diagnostics(bodies: &BodySet, potential: &[f64], softening: f64) -> GravityDiagnostics {
    let _ = (bodies, potential, softening);
    todo!("helper `nbody`")
}
