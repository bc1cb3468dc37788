//! Pair interactions: what a source carries, what a pair contributes at a target, and how the
//! kernel departs from the singular Laplace kernel (and so where a fast method may use
//! expansions).
//!
//! The summation engine evaluates sums Σ_q K(x_i − x_q; q) over pairs. Two interactions share it:
//!
//! | interaction | charges per source | core | outputs at a target | section |
//! | --- | --- | --- | --- | --- |
//! | [`InteractionKind::BiotSavart`] | 3 (the strength α) | σ per source (Gaussian cutoff) | velocity; stretching or gradient; blob vorticity | docs/physics.md §2 |
//! | [`InteractionKind::Gravity`] | 1 (the mass m) | one softening ε ≥ 0 (Plummer) | potential φ and acceleration a | docs/physics.md §10 |
//!
//! The Biot–Savart law keeps its own seam ([`super::Sources`], [`super::Evaluation`],
//! [`super::Summation`]), which the vortex solver talks to. Gravity's seam is here:
//! [`Bodies`], [`GravityEvaluation`] and [`GravitySummation`].

use super::{SumResult, SummationError};

/// Which pair interaction a summation computes (the option of `vpm bench direct|fmm
/// --interaction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InteractionKind {
    /// `"biot-savart"`: the regularised Biot–Savart law of vortex particles.
    BiotSavart,
    /// `"gravity"`: Newtonian gravity with Plummer softening.
    Gravity,
}

impl InteractionKind {
    /// Every kind, in the order the help text lists them.
    pub const ALL: [InteractionKind; 2] = [InteractionKind::BiotSavart, InteractionKind::Gravity];

    /// The spelling on the command line.
    pub fn as_str(&self) -> &'static str {
        match self {
            InteractionKind::BiotSavart => "biot-savart",
            InteractionKind::Gravity => "gravity",
        }
    }

    /// Reads a spelling of [`InteractionKind::as_str`]; the error names what is allowed.
    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                format!("unknown interaction {s:?} (allowed: \"biot-savart\", \"gravity\")")
            })
    }
}

impl std::fmt::Display for InteractionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Newtonian gravity with Plummer softening ε ≥ 0, in units with G = 1 (docs/physics.md §10):
///
/// ```text
/// φ_i = −Σ_j m_j / (r_ij² + ε²)^{1/2},   a_i = Σ_j m_j (x_j − x_i) / (r_ij² + ε²)^{3/2}.
/// ```
///
/// With ε > 0 the self pair contributes −m_i/ε to φ and nothing to a; it is kept, so that the
/// potential energy W = ½ Σ_i m_i φ_i + ½ Σ_i m_i²/ε counts each pair once (the all-pairs GPU
/// kernels of the seeds rely on it). With ε = 0 the self pair is skipped and coincident bodies
/// are refused ([`PlummerGravity::check_bodies`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlummerGravity {
    /// The softening length ε ≥ 0.
    pub softening: f64,
}

impl PlummerGravity {
    /// Gravity with softening ε; refuses a negative or non-finite one.
    pub fn new(softening: f64) -> Result<Self, SummationError> {
        if !(softening >= 0.0 && softening.is_finite()) {
            return Err(SummationError::BadSources(format!(
                "softening {softening} (must be finite and ≥ 0)"
            )));
        }
        Ok(Self { softening })
    }

    /// The potential and the acceleration at a target from one body of mass `m` at distance
    /// vector `d = x_source − x_target`: (−m/s, m d/s³) with s = (|d|² + ε²)^{1/2}. At ε = 0 and
    /// d = 0 (the self pair) both are zero.
    #[inline]
    pub fn pair(&self, d: [f64; 3], m: f64) -> (f64, [f64; 3]) {
        let s2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + self.softening * self.softening;
        if s2 == 0.0 {
            return (0.0, [0.0; 3]);
        }
        let inv_s = 1.0 / s2.sqrt();
        let inv_s3 = inv_s * inv_s * inv_s;
        (
            -m * inv_s,
            [m * d[0] * inv_s3, m * d[1] * inv_s3, m * d[2] * inv_s3],
        )
    }

    /// Relative departure of the softened kernels from the Newtonian ones at distance r:
    /// 1 − r/(r² + ε²)^{1/2} for the potential and 1 − r³/(r² + ε²)^{3/2} ≈ 1.5 (ε/r)² for the
    /// acceleration (the larger). Beyond the radius where it is below a bound, Newtonian
    /// expansions represent the softened sum to that bound.
    pub fn departure(&self, r: f64) -> f64 {
        let e2 = self.softening * self.softening;
        if e2 == 0.0 {
            return 0.0;
        }
        let s = (r * r + e2).sqrt();
        1.0 - (r / s).powi(3)
    }

    /// The smallest distance beyond which [`PlummerGravity::departure`] ≤ `bound` (0 at ε = 0):
    /// r = ε / ((1 − bound)^{−2/3} − 1)^{1/2} ≈ ε (1.5/bound)^{1/2}, about 122 ε at 1e-4.
    pub fn newtonian_radius(&self, bound: f64) -> f64 {
        if self.softening == 0.0 {
            return 0.0;
        }
        let b = bound.clamp(f64::MIN_POSITIVE, 0.5);
        // 1 − (r/s)³ = b  ⇔  r²/(r² + ε²) = (1 − b)^{2/3}.
        let c = (1.0 - b).powf(2.0 / 3.0);
        self.softening * (c / (1.0 - c)).sqrt()
    }

    /// At ε = 0 two bodies at one position make an infinite force: refuses them, naming the
    /// first such pair (indices into `x`). Any ε > 0 accepts every set.
    pub fn check_bodies(&self, x: &[[f64; 3]]) -> Result<(), SummationError> {
        if self.softening > 0.0 {
            return Ok(());
        }
        let mut order: Vec<usize> = (0..x.len()).collect();
        order.sort_unstable_by(|&a, &b| {
            x[a].partial_cmp(&x[b]).unwrap_or(std::cmp::Ordering::Equal)
        });
        for w in order.windows(2) {
            if x[w[0]] == x[w[1]] {
                return Err(SummationError::BadSources(format!(
                    "bodies {} and {} are both at {:?}: with softening 0 their force is infinite \
                     (set a softening > 0 or move one)",
                    w[0].min(w[1]),
                    w[0].max(w[1]),
                    x[w[0]]
                )));
            }
        }
        Ok(())
    }
}

/// Bodies of a gravitational sum: positions and masses (slices of any storage).
#[derive(Debug, Clone, Copy)]
pub struct Bodies<'a> {
    pub x: &'a [[f64; 3]],
    pub mass: &'a [f64],
}

impl Bodies<'_> {
    pub fn len(&self) -> usize {
        self.x.len()
    }

    pub fn is_empty(&self) -> bool {
        self.x.is_empty()
    }

    /// Checks that there is one finite mass per position.
    pub fn check(&self) -> Result<(), SummationError> {
        if self.mass.len() != self.x.len() {
            return Err(SummationError::BadSources(format!(
                "{} positions but {} masses",
                self.x.len(),
                self.mass.len()
            )));
        }
        if let Some(i) = self.mass.iter().position(|m| !m.is_finite()) {
            return Err(SummationError::BadSources(format!(
                "mass of body {i} is {}",
                self.mass[i]
            )));
        }
        Ok(())
    }
}

/// Results of a gravitational sum at the targets: the potential φ and the acceleration a.
/// Owned by the caller and reused between calls.
#[derive(Debug, Clone, Default)]
pub struct GravityEvaluation {
    pub potential: Vec<f64>,
    pub acceleration: Vec<[f64; 3]>,
}

impl GravityEvaluation {
    /// Sizes both outputs for `n` targets.
    pub fn resize(&mut self, n: usize) {
        self.potential.resize(n, 0.0);
        self.acceleration.resize(n, [0.0; 3]);
    }
}

/// A gravitational summation: the potential and acceleration at targets from bodies, with the
/// evaluator's softening. The gravity form of [`super::Summation`].
pub trait GravitySummation: Send {
    /// A short description for logs and benchmark tables, e.g. "gravity direct CPU f64".
    fn name(&self) -> String;

    /// The interaction (its softening).
    fn gravity(&self) -> PlummerGravity;

    /// φ and a at `targets` from `bodies` into `out` (resized). When the targets are the bodies'
    /// own positions pass `targets = None`: at ε = 0 each body's self pair is then skipped.
    fn evaluate_gravity(
        &mut self,
        bodies: &Bodies,
        targets: Option<&[[f64; 3]]>,
        out: &mut GravityEvaluation,
    ) -> SumResult;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_round_trips_and_names_the_allowed_spellings() {
        for k in InteractionKind::ALL {
            assert_eq!(InteractionKind::parse(k.as_str()), Ok(k));
        }
        let e = InteractionKind::parse("coulomb").unwrap_err();
        assert!(e.contains("biot-savart") && e.contains("gravity"), "{e}");
    }

    #[test]
    fn plummer_pair_is_newtonian_far_away_and_finite_at_zero() {
        let g = PlummerGravity::new(0.1).unwrap();
        let (phi, a) = g.pair([3.0, 4.0, 0.0], 2.0);
        let s = (25.0f64 + 0.01).sqrt();
        assert!((phi + 2.0 / s).abs() < 1e-15);
        assert!((a[0] - 2.0 * 3.0 / s.powi(3)).abs() < 1e-15 && a[2] == 0.0);
        let (phi0, a0) = g.pair([0.0; 3], 2.0);
        assert!((phi0 + 20.0).abs() < 1e-12 && a0 == [0.0; 3]);
        let newton = PlummerGravity::new(0.0).unwrap();
        assert_eq!(newton.pair([0.0; 3], 1.0), (0.0, [0.0; 3]));
        assert!(PlummerGravity::new(-1.0).is_err() && PlummerGravity::new(f64::NAN).is_err());
    }

    #[test]
    fn newtonian_radius_inverts_the_departure() {
        let g = PlummerGravity::new(0.01).unwrap();
        for bound in [1e-3, 1e-4, 1e-6] {
            let r = g.newtonian_radius(bound);
            assert!(
                (g.departure(r) - bound).abs() < 1e-3 * bound,
                "{bound}: {}",
                g.departure(r)
            );
            // The algebraic tail 1.5 (ε/r)²: r ≈ ε √(1.5/bound).
            assert!((r / (0.01 * (1.5 / bound).sqrt()) - 1.0).abs() < 0.01);
        }
        assert!((g.newtonian_radius(1e-4) / 0.01 - 122.0).abs() < 1.0);
        assert_eq!(
            PlummerGravity::new(0.0).unwrap().newtonian_radius(1e-4),
            0.0
        );
    }

    #[test]
    fn coincident_bodies_are_refused_only_without_softening() {
        let x = [[0.0, 1.0, 2.0], [1.0, 1.0, 1.0], [0.0, 1.0, 2.0]];
        let e = PlummerGravity::new(0.0)
            .unwrap()
            .check_bodies(&x)
            .unwrap_err();
        assert!(e.to_string().contains("bodies 0 and 2"), "{e}");
        assert!(PlummerGravity::new(1e-3).unwrap().check_bodies(&x).is_ok());
        assert!(PlummerGravity::new(0.0)
            .unwrap()
            .check_bodies(&x[..2])
            .is_ok());
    }
}
