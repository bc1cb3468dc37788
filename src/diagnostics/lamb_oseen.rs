//! A Lamb–Oseen tube along z in the periodic box (`vortex/lamb_oseen.csv`): the azimuthal
//! velocity measured from the particles against the exact profile with the periodic background
//! (docs/physics.md §7): u_θ = Γ/(2πr)(1 − exp(−r²/(2σ²))) − Γr/(2L²), σ² = core² + 2νt, L = 2π.

use std::f64::consts::{PI, TAU};

/// Radii of the profile, in units of the initial core σ0, capped at [`PROFILE_R_MAX`].
pub const PROFILE_RADII_OVER_CORE: [f64; 9] = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0];
/// Largest radius of the profile (the nearest image axis is 2π away).
pub const PROFILE_R_MAX: f64 = 1.0;
/// Directions per radius averaged for u_θ.
pub const PROFILE_DIRECTIONS: usize = 8;

/// The radii of the profile for a tube of initial core `core`.
pub fn profile_radii(core: f64) -> Vec<f64> {
    PROFILE_RADII_OVER_CORE
        .iter()
        .map(|&f| f * core)
        .filter(|&r| r <= PROFILE_R_MAX)
        .collect()
}

/// The probe points at z = 0: [`PROFILE_DIRECTIONS`] per radius, off the lattice axes (offset
/// by half a step), radius-major.
pub fn profile_targets(radii: &[f64]) -> Vec<[f64; 3]> {
    let mut targets = Vec::with_capacity(radii.len() * PROFILE_DIRECTIONS);
    for &r in radii {
        for j in 0..PROFILE_DIRECTIONS {
            let th = (j as f64 + 0.5) * TAU / PROFILE_DIRECTIONS as f64;
            targets.push([r * th.cos(), r * th.sin(), 0.0]);
        }
    }
    targets
}

/// (r, u_θ averaged over the directions, exact u_θ) for each radius, from the velocity at the
/// [`profile_targets`]; σ is the core at this time.
pub fn profile(
    radii: &[f64],
    targets: &[[f64; 3]],
    velocity: &[[f64; 3]],
    circulation: f64,
    sigma: f64,
) -> Vec<(f64, f64, f64)> {
    radii
        .iter()
        .enumerate()
        .map(|(i, &r)| {
            let ut = (0..PROFILE_DIRECTIONS)
                .map(|j| {
                    let k = i * PROFILE_DIRECTIONS + j;
                    let (x, u) = (targets[k], velocity[k]);
                    (-x[1] * u[0] + x[0] * u[1]) / r
                })
                .sum::<f64>()
                / PROFILE_DIRECTIONS as f64;
            (r, ut, lamb_oseen_periodic(circulation, sigma, r))
        })
        .collect()
}

/// The core σ at time t of a Gaussian core that was `core` at t = 0: σ² = core² + 2νt.
pub fn core_at(core: f64, nu: f64, t: f64) -> f64 {
    (core * core + 2.0 * nu * t).sqrt()
}

/// Lamb–Oseen azimuthal velocity of a tube of circulation Γ and core σ in the periodic box of
/// side 2π, with the uniform background vorticity −Γ/L² (docs/physics.md §7).
pub fn lamb_oseen_periodic(circulation: f64, sigma: f64, r: f64) -> f64 {
    let l = TAU;
    circulation / (2.0 * PI * r) * (1.0 - (-r * r / (2.0 * sigma * sigma)).exp())
        - circulation * r / (2.0 * l * l)
}
