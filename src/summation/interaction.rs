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
//! [`Bodies`], [`GravityWork`], [`GravityEvaluation`] and [`GravitySummation`].
//!
//! # The pair interaction
//!
//! [`PairInteraction`] is what the engines are written over (the all-pairs loop of
//! [`super::direct::cpu`] and the CPU FMM of [`super::fmm::cpu`]): the charges a source carries
//! (K Laplace charges: Biot–Savart 3, gravity 1), the exact pair, the far field from the
//! derivatives of the K Laplace potentials φ_c(x) = Σ_q q_c/|x − x_q| ([`PotentialDerivatives`]),
//! and how the kernel departs from the singular one, which fixes the near-field radius at a
//! requested accuracy (docs/physics.md §8 and §8.1). Implementations:
//! [`BiotSavart`] (delegating to [`crate::kernel`]) and [`PlummerGravity`].

use super::{SumResult, SummationError};
use crate::kernel::{pair_coefficients, singular_pair_coefficients, Real};

/// Values and derivatives at one point of one Laplace potential φ(x) = Σ_q q/|x − x_q| (from a
/// local expansion, [`super::fmm::expansions::l2p`]): only the orders asked for are filled.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PotentialDerivatives {
    /// φ.
    pub potential: f64,
    /// ∂φ/∂x_i.
    pub gradient: [f64; 3],
    /// ∂²φ/∂x_i∂x_j (symmetric, trace free).
    pub hessian: [[f64; 3]; 3],
}

/// A pair interaction with `K` Laplace charges per source (module docs): what a summation
/// engine needs to know of the physics. An instance carries what one evaluation asks (e.g.
/// whether the velocity gradient is wanted).
pub trait PairInteraction<const K: usize>: Sync {
    /// What one source carries besides its position (Biot–Savart: strength and core; gravity:
    /// the mass).
    type Source: Copy + Send + Sync;
    /// The results at one target, summed over pairs.
    type Answer: Copy + Default + Send + Sync;

    /// The source's K Laplace charges (Biot–Savart: α; gravity: m).
    fn charges(&self, source: &Self::Source) -> [f64; K];

    /// Adds to `acc` the exact near-field contribution of one source at `r` = x_target −
    /// x_source.
    fn add_pair(&self, r: [f64; 3], source: &Self::Source, acc: &mut Self::Answer);

    /// The lowest and highest derivative order of the potentials the far field needs (0: the
    /// potential, 1: its gradient, 2: its Hessian).
    fn derivative_orders(&self) -> (usize, usize);

    /// The answer at a target from the derivatives there of the K Laplace potentials of the
    /// far sources (the Newtonian, singular kernel).
    fn far_field(&self, d: &[PotentialDerivatives; K]) -> Self::Answer;

    /// The length a source's kernel departs from the singular one on (Biot–Savart: its core
    /// σ; gravity: 1, its softening being one length for all).
    fn source_scale(&self, source: &Self::Source) -> f64;

    /// The relative departure of the kernel from the singular one at distance `r` in units of
    /// [`PairInteraction::source_scale`] (for the outputs this instance evaluates).
    fn departure(&self, r: f64) -> f64;

    /// The smallest distance, in units of [`PairInteraction::source_scale`], beyond which
    /// [`PairInteraction::departure`] ≤ `bound`: pairs farther apart may use the singular
    /// kernel's expansions, closer ones go to the near field with the exact kernel.
    fn near_field_radius(&self, bound: f64) -> f64;
}

/// A vortex particle's source data: strength α and core σ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Vortex {
    pub alpha: [f64; 3],
    pub sigma: f64,
}

/// The regularised Biot–Savart law (docs/physics.md §2) as a [`PairInteraction`] of three
/// charges (the components of α): the answer is the velocity and its gradient ∂u_i/∂x_j; the
/// far field is the curl of the first derivatives of the three potentials and the gradient
/// comes from their second derivatives (docs/physics.md §8). The pair delegates to
/// [`crate::kernel`], so results are those of the kernel's functions bit for bit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BiotSavart {
    /// Whether the velocity gradient is evaluated besides the velocity.
    pub gradient: bool,
    /// Pairs farther apart than this many cores use the singular kernel 1/(4πr³) (equal to the
    /// regularised one there to the accuracy, and cheaper); `f64::INFINITY` for the exact
    /// kernel everywhere.
    pub singular_beyond: f64,
}

impl BiotSavart {
    /// The exact kernel everywhere, velocity and (when `gradient`) its gradient.
    pub fn exact(gradient: bool) -> Self {
        Self {
            gradient,
            singular_beyond: f64::INFINITY,
        }
    }
}

impl PairInteraction<3> for BiotSavart {
    type Source = Vortex;
    /// Velocity and its gradient `[i][j]` = ∂u_i/∂x_j (zero unless asked).
    type Answer = ([f64; 3], [[f64; 3]; 3]);

    fn charges(&self, source: &Vortex) -> [f64; 3] {
        source.alpha
    }

    #[inline(always)]
    fn add_pair(&self, r: [f64; 3], source: &Vortex, acc: &mut Self::Answer) {
        let r2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
        let s = source.sigma;
        let rc2 = self.singular_beyond * self.singular_beyond;
        let (k, l) = if r2 > rc2 * s * s {
            singular_pair_coefficients(r2)
        } else {
            pair_coefficients(r2, s)
        };
        let a = source.alpha;
        let c = [
            a[1] * r[2] - a[2] * r[1],
            a[2] * r[0] - a[0] * r[2],
            a[0] * r[1] - a[1] * r[0],
        ];
        acc.0[0] += k * c[0];
        acc.0[1] += k * c[1];
        acc.0[2] += k * c[2];
        if self.gradient {
            // ∂u_i/∂x_j = k ε_ikj α_k − l c_i r_j.
            let m = [[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]];
            for i in 0..3 {
                for j in 0..3 {
                    acc.1[i][j] += k * m[i][j] - l * c[i] * r[j];
                }
            }
        }
    }

    fn derivative_orders(&self) -> (usize, usize) {
        (1, if self.gradient { 2 } else { 1 })
    }

    /// Velocity (1/4π) ∇ × φ and its gradient (1/4π) ε_ikl ∂_j ∂_k φ_l from the derivatives of
    /// the three potentials φ_c = Σ α_c/|x − y| (docs/physics.md §8).
    fn far_field(&self, d: &[PotentialDerivatives; 3]) -> Self::Answer {
        let f = <f64 as Real>::FRAC_1_4PI;
        let (g, h) = (d.map(|c| c.gradient), d.map(|c| c.hessian));
        let u = [
            f * (g[2][1] - g[1][2]),
            f * (g[0][2] - g[2][0]),
            f * (g[1][0] - g[0][1]),
        ];
        let mut du = [[0.0; 3]; 3];
        for j in 0..3 {
            du[0][j] = f * (h[2][1][j] - h[1][2][j]);
            du[1][j] = f * (h[0][2][j] - h[2][0][j]);
            du[2][j] = f * (h[1][0][j] - h[0][1][j]);
        }
        (u, du)
    }

    fn source_scale(&self, source: &Vortex) -> f64 {
        source.sigma
    }

    /// The Gaussian tail at ρ = r/σ: 1 − g(ρ) for the velocity, (ρg' + 3(1 − g))/3 with the
    /// gradient (docs/physics.md §8).
    fn departure(&self, rho: f64) -> f64 {
        use crate::kernel::{gradient_tail, velocity_tail};
        if self.gradient {
            gradient_tail(rho)
        } else {
            velocity_tail(rho)
        }
    }

    /// ρ_c (to 0.01) of [`crate::kernel::rho_cut`].
    fn near_field_radius(&self, bound: f64) -> f64 {
        use crate::kernel::{gradient_tail, rho_cut, velocity_tail};
        rho_cut(
            if self.gradient {
                gradient_tail
            } else {
                velocity_tail
            },
            bound,
        )
    }
}

/// Plummer gravity as a [`PairInteraction`] of one charge (the mass): the answer is
/// (φ, a); the far field is φ = −Φ and a = ∇Φ of the Newtonian potential Φ = Σ m/|x − y| of
/// the far masses. The near field (exact softened pairs) reaches
/// [`PlummerGravity::newtonian_radius`], an absolute length (the source scale is 1).
impl PairInteraction<1> for PlummerGravity {
    type Source = f64;
    /// Potential φ and acceleration a.
    type Answer = (f64, [f64; 3]);

    fn charges(&self, mass: &f64) -> [f64; 1] {
        [*mass]
    }

    #[inline(always)]
    fn add_pair(&self, r: [f64; 3], mass: &f64, acc: &mut Self::Answer) {
        let (phi, a) = self.pair([-r[0], -r[1], -r[2]], *mass);
        acc.0 += phi;
        acc.1[0] += a[0];
        acc.1[1] += a[1];
        acc.1[2] += a[2];
    }

    fn derivative_orders(&self) -> (usize, usize) {
        (0, 1)
    }

    fn far_field(&self, d: &[PotentialDerivatives; 1]) -> Self::Answer {
        (-d[0].potential, d[0].gradient)
    }

    fn source_scale(&self, _mass: &f64) -> f64 {
        1.0
    }

    fn departure(&self, r: f64) -> f64 {
        PlummerGravity::departure(self, r)
    }

    fn near_field_radius(&self, bound: f64) -> f64 {
        self.newtonian_radius(bound)
    }
}

/// Which pair interaction a summation computes (the option of `vpm bench direct|fmm
/// --interaction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
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
        match first_coincident(x) {
            Some((a, b)) => Err(SummationError::BadSources(format!(
                "bodies {a} and {b} are both at {:?}: with softening 0 their force is infinite \
                 (set a softening > 0 or move one)",
                x[a]
            ))),
            None => Ok(()),
        }
    }
}

/// Two bodies at one position, if any: (i, j) with i < j, the pair first in position order.
pub fn first_coincident(x: &[[f64; 3]]) -> Option<(usize, usize)> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_unstable_by(|&a, &b| x[a].partial_cmp(&x[b]).unwrap_or(std::cmp::Ordering::Equal));
    order
        .windows(2)
        .find(|w| x[w[0]] == x[w[1]])
        .map(|w| (w[0].min(w[1]), w[0].max(w[1])))
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

    /// Evaluates `work` into `out`: what an evaluator implements. Callers use
    /// [`GravitySummation::evaluate_gravity`], which checks the bodies, sizes `out` and answers
    /// zero without bodies before calling this, so an implementation may assume all three.
    fn evaluate_bodies(&mut self, work: GravityWork, out: &mut GravityEvaluation) -> SumResult;

    /// φ and a at `targets` from `bodies` into `out` (resized). When the targets are the bodies'
    /// own positions pass `targets = None`: at ε = 0 each body's self pair is then skipped (and
    /// coincident bodies are refused).
    fn evaluate_gravity(
        &mut self,
        bodies: &Bodies,
        targets: Option<&[[f64; 3]]>,
        out: &mut GravityEvaluation,
    ) -> SumResult {
        if begin_gravity(&self.gravity(), bodies, targets, out)? {
            return Ok(());
        }
        self.evaluate_bodies(GravityWork { bodies, targets }, out)
    }

    /// The evaluator's built-in accuracy checks since the last call (the FMM's, against all
    /// pairs); none for the others.
    fn take_accuracy_checks(&mut self) -> Vec<super::fmm::AccuracyCheck> {
        Vec::new()
    }
}

/// One evaluation asked of a [`GravitySummation`]: the bodies, and the points where φ and a are
/// wanted (`None`: at the bodies themselves).
#[derive(Debug, Clone, Copy)]
pub struct GravityWork<'a> {
    pub bodies: &'a Bodies<'a>,
    pub targets: Option<&'a [[f64; 3]]>,
}

impl GravityWork<'_> {
    /// The points evaluated: the targets, or the bodies' positions.
    pub fn points(&self) -> &[[f64; 3]] {
        self.targets.unwrap_or(self.bodies.x)
    }
}

/// The common start of every [`GravitySummation::evaluate_gravity`]: checks the bodies (and,
/// when the targets are the bodies at ε = 0, that no two coincide), sizes `out` for the targets
/// and, without bodies, writes the answer (zeros): `true` when nothing is left to compute.
fn begin_gravity(
    gravity: &PlummerGravity,
    bodies: &Bodies,
    targets: Option<&[[f64; 3]]>,
    out: &mut GravityEvaluation,
) -> Result<bool, SummationError> {
    bodies.check()?;
    if targets.is_none() {
        gravity.check_bodies(bodies.x)?;
    }
    out.resize(targets.unwrap_or(bodies.x).len());
    if bodies.is_empty() {
        out.potential.fill(0.0);
        out.acceleration.fill([0.0; 3]);
        return Ok(true);
    }
    Ok(false)
}

/// Splits (φ, a) answers into `out` (sized for them).
pub(crate) fn store_gravity(answers: &[(f64, [f64; 3])], out: &mut GravityEvaluation) {
    for ((phi, acc), (p, a)) in out
        .potential
        .iter_mut()
        .zip(out.acceleration.iter_mut())
        .zip(answers)
    {
        *phi = *p;
        *acc = *a;
    }
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

    /// The Laplace potential q/|x| of one charge at the origin and its derivatives at x.
    fn one_charge(q: f64, x: [f64; 3]) -> PotentialDerivatives {
        let r2 = x[0] * x[0] + x[1] * x[1] + x[2] * x[2];
        let r = r2.sqrt();
        let mut d = PotentialDerivatives {
            potential: q / r,
            gradient: x.map(|c| -q * c / (r2 * r)),
            ..Default::default()
        };
        for i in 0..3 {
            for j in 0..3 {
                let delta = if i == j { r2 } else { 0.0 };
                d.hessian[i][j] = q * (3.0 * x[i] * x[j] - delta) / (r2 * r2 * r);
            }
        }
        d
    }

    /// For both interactions the far field of one source, from its potentials' derivatives, is
    /// its singular pair, and the kernel's departure at the near-field radius meets the bound.
    #[test]
    fn far_field_of_one_source_is_the_singular_pair_and_the_radius_meets_the_bound() {
        let x = [3.0, -4.0, 12.0];
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-14 * b.abs().max(1e-3);
        let newton = PlummerGravity::new(0.0).unwrap();
        let (phi, a) = newton.far_field(&[one_charge(2.0, x)]);
        let mut want = (0.0, [0.0; 3]);
        newton.add_pair(x, &2.0, &mut want);
        assert!(
            close(phi, want.0) && (0..3).all(|k| close(a[k], want.1[k])),
            "{a:?}"
        );

        let v = Vortex {
            alpha: [0.3, -0.2, 0.5],
            sigma: 0.1,
        };
        let bs = BiotSavart {
            gradient: true,
            singular_beyond: 0.0,
        };
        let (u, du) = bs.far_field(&v.alpha.map(|q| one_charge(q, x)));
        let mut want = Default::default();
        bs.add_pair(x, &v, &mut want);
        let (wu, wdu): ([f64; 3], [[f64; 3]; 3]) = want;
        assert!((0..3).all(|i| close(u[i], wu[i])), "{u:?} {wu:?}");
        assert!(
            (0..9).all(|k| close(du[k / 3][k % 3], wdu[k / 3][k % 3])),
            "{du:?}"
        );

        let soft = PlummerGravity::new(0.01).unwrap();
        for b in [1e-3, 1e-6] {
            for gradient in [false, true] {
                let bs = BiotSavart::exact(gradient);
                assert!(bs.departure(bs.near_field_radius(b)) <= b);
            }
            let r = PairInteraction::near_field_radius(&soft, b);
            assert!(PairInteraction::departure(&soft, r) <= b * (1.0 + 1e-9));
        }
    }
}
