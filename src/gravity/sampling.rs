//! Random draws shared by the initial conditions (docs/physics.md §11.3): one ChaCha8 stream per
//! model, drawn serially in body order, so a seed gives the same bodies on any thread count.
//!
//! Every sampler documents how many numbers it draws, so the stream a model consumes is fixed by
//! its code alone.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::f64::consts::TAU;

/// The random stream of an initial condition: ChaCha8 seeded by `seed` (rand_chacha's
/// `seed_from_u64`).
pub fn stream(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// A uniform number in [0, 1) (one draw).
pub fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    rng.random::<f64>()
}

/// A unit vector uniform on the sphere (two draws): cos θ uniform in [−1, 1), azimuth uniform in
/// [0, 2π).
pub fn isotropic_direction(rng: &mut ChaCha8Rng) -> [f64; 3] {
    let cos_theta = 2.0 * uniform(rng) - 1.0;
    let phi = TAU * uniform(rng);
    let sin_theta = (1.0 - cos_theta * cos_theta).max(0.0).sqrt();
    [sin_theta * phi.cos(), sin_theta * phi.sin(), cos_theta]
}

/// A vector of length `length` in an isotropic direction (two draws).
pub fn isotropic_vector(rng: &mut ChaCha8Rng, length: f64) -> [f64; 3] {
    isotropic_direction(rng).map(|c| c * length)
}

/// A point uniform in the ball of radius `radius` (three draws: the radius as R u^{1/3}, then
/// the direction).
pub fn uniform_in_ball(rng: &mut ChaCha8Rng, radius: f64) -> [f64; 3] {
    let r = radius * uniform(rng).cbrt();
    isotropic_vector(rng, r)
}

/// A standard normal number by the Box–Muller transform (two draws; the second normal of the
/// pair is dropped so every call draws the same count).
pub fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    // 1 − u lies in (0, 1], so the logarithm is finite.
    let u1 = 1.0 - uniform(rng);
    let u2 = uniform(rng);
    (-2.0 * u1.ln()).sqrt() * (TAU * u2).cos()
}

/// An isotropic Gaussian vector with standard deviation `sigma` per component (six draws).
pub fn gaussian_vector(rng: &mut ChaCha8Rng, sigma: f64) -> [f64; 3] {
    std::array::from_fn(|_| sigma * standard_normal(rng))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_are_unit_and_isotropic() {
        let mut rng = stream(5);
        let n = 20_000;
        let mut mean = [0.0; 3];
        let mut zz = 0.0;
        for _ in 0..n {
            let d = isotropic_direction(&mut rng);
            let len = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
            assert!((len - 1.0).abs() < 1e-14);
            for k in 0..3 {
                mean[k] += d[k] / n as f64;
            }
            zz += d[2] * d[2] / n as f64;
        }
        // Mean 0 and ⟨z²⟩ = 1/3, each within ~4 standard errors (σ ≈ 0.58/√n and 0.3/√n).
        assert!(mean.iter().all(|m| m.abs() < 0.017), "{mean:?}");
        assert!((zz - 1.0 / 3.0).abs() < 0.009, "{zz}");
    }

    #[test]
    fn ball_and_normal_moments() {
        let mut rng = stream(6);
        let n = 20_000;
        // ⟨r²⟩ = 3/5 R² in a uniform ball.
        let r2: f64 = (0..n)
            .map(|_| {
                let p = uniform_in_ball(&mut rng, 2.0);
                p.iter().map(|c| c * c).sum::<f64>()
            })
            .sum::<f64>()
            / n as f64;
        assert!((r2 / 4.0 - 0.6).abs() < 0.01, "{r2}");
        let (mut s, mut s2) = (0.0, 0.0);
        for _ in 0..n {
            let g = standard_normal(&mut rng);
            s += g / n as f64;
            s2 += g * g / n as f64;
        }
        assert!(s.abs() < 0.03 && (s2 - 1.0).abs() < 0.04, "{s} {s2}");
    }

    #[test]
    fn same_seed_same_stream() {
        let a: Vec<[f64; 3]> = {
            let mut r = stream(9);
            (0..4).map(|_| gaussian_vector(&mut r, 1.0)).collect()
        };
        let b: Vec<[f64; 3]> = {
            let mut r = stream(9);
            (0..4).map(|_| gaussian_vector(&mut r, 1.0)).collect()
        };
        assert_eq!(a, b);
    }
}
