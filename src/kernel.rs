//! The Gaussian-cutoff vortex-particle kernel for one particle pair (docs/physics.md §2).
//!
//! This module is the single place where the pair equations live: every CPU evaluator calls these
//! functions, and the GPU sources mirror them line for line. Everything is generic over `f32` and
//! `f64` through [`Real`].
//!
//! Notation (docs/physics.md §2): a source particle q at x_q with strength α_q and core σ_q acts on the
//! point x; r = x − x_q, r = |r|, ρ = r/σ_q, c = √(2/π) and
//!
//! ```text
//! g(ρ)  = erf(ρ/√2) − c ρ exp(−ρ²/2)            g'(ρ) = c ρ² exp(−ρ²/2)
//! G3(ρ) = g/ρ³                                  G5(ρ) = (3g − ρg')/ρ⁵
//! K = g/r³ = G3/σ³                              K'/r = (ρg' − 3g)/r⁵ = −G5/σ⁵   (r⁵ = ρ⁵σ⁵)
//! ```
//!
//! # Small ρ
//!
//! g, 3g − ρg' and therefore G3, G5 cancel catastrophically near ρ = 0 when evaluated directly.
//! Both are incomplete-gamma functions, g = P(3/2, ρ²/2) and 3g − ρg' = 3 P(5/2, ρ²/2), and the
//! incomplete-gamma series gives forms with only positive terms (no cancellation at all):
//!
//! ```text
//! S5(ρ²) = Σ_{k≥0} ρ^{2k} / (5·7·…·(2k+5)) = 1/5 + ρ²/35 + ρ⁴/315 + …
//! G5 = c e^{−ρ²/2} S5             G3 = c e^{−ρ²/2} (1 + ρ² S5) / 3
//! ```
//!
//! Expanding e^{−ρ²/2} recovers the alternating Taylor series quoted in docs/physics.md §2
//! (G3 = c(1/3 − ρ²/10 + ρ⁴/56 − …), G5 = c(1/5 − ρ²/14 + ρ⁴/72 − …)). The positive form is used
//! here because it is exact to rounding at larger ρ with fewer terms (alternating terms cancel)
//! and shares the one `exp` with the direct form. Below [`Real::SERIES_THRESHOLD`] the series
//! (truncated to [`Real::SERIES_COEFFS`], evaluated by Horner in ρ²) is used, above it the direct
//! erf form. See [`Real::SERIES_THRESHOLD`] for the measured errors that fix the thresholds.

use core::fmt::Debug;
use num_traits::Float;

/// A floating-point type the kernel runs in: `f32` (the GPU precision) or `f64` (the reference).
pub trait Real: Float + Copy + Send + Sync + Debug + 'static {
    /// 1/(4π), the Biot–Savart prefactor.
    const FRAC_1_4PI: Self;
    /// √(2/π), the prefactor of g' and of the small-ρ series.
    const SQRT_2_OVER_PI: Self;
    /// 1/√2 (erf argument ρ/√2).
    const FRAC_1_SQRT_2: Self;
    /// (2π)^(−3/2), the normalisation of the 3-D Gaussian ζ_σ.
    const GAUSS_NORM: Self;
    /// ρ below which [`g3_g5`] and [`cutoff_g`] use the series instead of the erf form.
    ///
    /// Chosen per precision so that neither branch limits the accuracy (relative errors measured
    /// against an f64 evaluation of the full positive series, fine sweeps; see tests/kernel.rs):
    ///
    /// * **f32: 2.0.** The direct erf form in f32 is poor well above ρ = 0.5, the switch point of
    ///   the short alternating Taylor series (that figure only bounds the series' truncation): measured
    ///   worst relative error of G5 is 1.3e-4 on (0.4, 0.5], 4.0e-5 on (0.5, 0.7], 1.3e-5 on
    ///   (0.7, 1], 1.4e-6 on (1.2, 1.4], 9.6e-7 on (1.4, 1.6] and 3.5e-7 above 2 (G3: 1.2e-6 on
    ///   (0.7, 1], ≤ 1.9e-7 above 2). With the threshold at 2 the f32 kernel stays within 1e-6 of
    ///   f64 on all of [0, 6]: measured worst 3.0e-7 for G3 (ρ ≈ 1.65, series) and 4.2e-7 for G5
    ///   (ρ ≈ 2.002, direct), test `f32_matches_f64_including_rho_zero`. The 13-term series
    ///   truncates at relative 3.0e-9 (G5) / 1.9e-9 (G3) at ρ = 2, below f32 rounding
    ///   (12 terms: 2.4e-8; 10 terms: 1.2e-6). For comparison, the alternating 5-term g / 4-term
    ///   G5 series measure 1.6e-7 (G3) and 4.1e-6 (G5) at ρ = 0.5.
    /// * **f64: 1.0.** The direct form's cancellation costs up to 6.6e-10 (G5) on (0.05, 0.1],
    ///   3.2e-11 on (0.1, 0.2], 2e-13 on (0.4, 0.5], 2.2e-14 on (0.7, 1] and ≤ 5e-15 above 1
    ///   (G3 ≤ 2e-15 above 1): starting the direct form at 1 instead of 0.1 gains three orders
    ///   of magnitude at no cost. The 14-term series truncates at relative < 1e-17 at ρ = 1
    ///   (13 terms: 1.2e-16 for G5, 12 terms: 2.2e-15). Measured f64 worst on [0, 6] against an
    ///   untruncated series: 1.6e-15 (G3), 5.3e-15 (G5); series and direct agree to 3.5e-15 at 1.
    const SERIES_THRESHOLD: Self;
    /// Coefficients a_k = 1/(5·7·…·(2k+5)) of S5(ρ²) = Σ a_k ρ^{2k}, truncated per precision (13
    /// terms for f32, 14 for f64; see [`Real::SERIES_THRESHOLD`]).
    const SERIES_COEFFS: &'static [Self];
    /// The error function (libm `erff` / `erf`; `f64::erf` is not stable).
    fn erf(self) -> Self;
    /// Conversion of an `f64` literal (rounds to nearest for `f32`).
    fn cast_f64(x: f64) -> Self;
}

/// a_k = 1/(5·7·…·(2k+5)), computed in f64 at compile time.
const fn series_coeffs_f64<const N: usize>() -> [f64; N] {
    let mut a = [0.0; N];
    let mut p = 1.0;
    let mut k = 0;
    while k < N {
        p *= (2 * k + 5) as f64;
        a[k] = 1.0 / p;
        k += 1;
    }
    a
}

const COEFFS_F64: [f64; 14] = series_coeffs_f64::<14>();

const COEFFS_F32: [f32; 13] = {
    let a = series_coeffs_f64::<13>();
    let mut b = [0.0f32; 13];
    let mut k = 0;
    while k < 13 {
        b[k] = a[k] as f32;
        k += 1;
    }
    b
};

/// 1/(4π) in f64 (0.25 × the correctly rounded 1/π is exact).
const FRAC_1_4PI_F64: f64 = 0.25 * core::f64::consts::FRAC_1_PI;
/// √(2/π) = 0.797 884 560 802 865 355 88…
const SQRT_2_OVER_PI_F64: f64 = 0.797_884_560_802_865_4;
/// (2π)^(−3/2) = 0.063 493 635 934 240 969 79…
const GAUSS_NORM_F64: f64 = 0.063_493_635_934_240_97;

impl Real for f32 {
    const FRAC_1_4PI: f32 = FRAC_1_4PI_F64 as f32;
    const SQRT_2_OVER_PI: f32 = SQRT_2_OVER_PI_F64 as f32;
    const FRAC_1_SQRT_2: f32 = core::f32::consts::FRAC_1_SQRT_2;
    const GAUSS_NORM: f32 = GAUSS_NORM_F64 as f32;
    const SERIES_THRESHOLD: f32 = 2.0;
    const SERIES_COEFFS: &'static [f32] = &COEFFS_F32;
    #[inline]
    fn erf(self) -> f32 {
        libm::erff(self)
    }
    #[inline]
    fn cast_f64(x: f64) -> f32 {
        x as f32
    }
}

impl Real for f64 {
    const FRAC_1_4PI: f64 = FRAC_1_4PI_F64;
    const SQRT_2_OVER_PI: f64 = SQRT_2_OVER_PI_F64;
    const FRAC_1_SQRT_2: f64 = core::f64::consts::FRAC_1_SQRT_2;
    const GAUSS_NORM: f64 = GAUSS_NORM_F64;
    const SERIES_THRESHOLD: f64 = 1.0;
    const SERIES_COEFFS: &'static [f64] = &COEFFS_F64;
    #[inline]
    fn erf(self) -> f64 {
        libm::erf(self)
    }
    #[inline]
    fn cast_f64(x: f64) -> f64 {
        x
    }
}

/// The vortex-stretching scheme (docs/physics.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StretchingScheme {
    /// dα_p/dt = (α_p·∇)u(x_p) (the seed paper's Eq. 3; the default).
    #[default]
    Classical,
    /// dα_p/dt = (∇u)ᵀα_p; conserves Σα exactly for equal cores.
    Transposed,
}

#[inline]
fn dot<T: Real>(a: [T; 3], b: [T; 3]) -> T {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

#[inline]
fn cross<T: Real>(a: [T; 3], b: [T; 3]) -> [T; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

/// S5(x) = Σ a_k x^k (x = ρ²), Horner, positive terms only.
#[inline]
fn series_s5<T: Real>(x: T) -> T {
    let a = T::SERIES_COEFFS;
    let n = a.len();
    let mut s = a[n - 1];
    for k in (0..n - 1).rev() {
        s = s * x + a[k];
    }
    s
}

/// g(ρ) = erf(ρ/√2) − √(2/π) ρ exp(−ρ²/2) (docs/physics.md §2), the fraction of the Gaussian's
/// circulation inside radius ρσ; → 1 for ρ → ∞.
///
/// Below [`Real::SERIES_THRESHOLD`] it is evaluated as g = √(2/π) e^{−ρ²/2} ρ³ (1 + ρ² S5(ρ²))/3
/// (module docs), which has no cancellation.
#[inline]
pub fn cutoff_g<T: Real>(rho: T) -> T {
    let x = rho * rho;
    let e = (-T::cast_f64(0.5) * x).exp();
    if rho < T::SERIES_THRESHOLD {
        let s5 = series_s5(x);
        T::SQRT_2_OVER_PI * e * (T::one() + x * s5) * T::cast_f64(1.0 / 3.0) * (x * rho)
    } else {
        (rho * T::FRAC_1_SQRT_2).erf() - T::SQRT_2_OVER_PI * rho * e
    }
}

/// g'(ρ) = √(2/π) ρ² exp(−ρ²/2) (docs/physics.md §2).
#[inline]
pub fn cutoff_g_prime<T: Real>(rho: T) -> T {
    let x = rho * rho;
    T::SQRT_2_OVER_PI * x * (-T::cast_f64(0.5) * x).exp()
}

/// (G3, G5) = (g/ρ³, (3g − ρg')/ρ⁵) (docs/physics.md §2), smooth and finite at ρ = 0:
/// G3(0) = √(2/π)/3, G5(0) = √(2/π)/5.
///
/// Below [`Real::SERIES_THRESHOLD`]: G5 = √(2/π) e^{−ρ²/2} S5(ρ²), G3 = √(2/π) e^{−ρ²/2}
/// (1 + ρ²S5)/3 (module docs); above it the direct erf form. One `exp`, and one `erf` on the
/// direct branch only. K = G3/σ³ and K'/r = −G5/σ⁵.
#[inline]
pub fn g3_g5<T: Real>(rho: T) -> (T, T) {
    let x = rho * rho;
    let e = (-T::cast_f64(0.5) * x).exp();
    let ce = T::SQRT_2_OVER_PI * e;
    if rho < T::SERIES_THRESHOLD {
        let s5 = series_s5(x);
        (ce * (T::one() + x * s5) * T::cast_f64(1.0 / 3.0), ce * s5)
    } else {
        // g = erf(ρ/√2) − cρe, ρg' = cρ³e.
        let g = (rho * T::FRAC_1_SQRT_2).erf() - ce * rho;
        let rho3 = x * rho;
        (g / rho3, (T::cast_f64(3.0) * g - ce * rho3) / (rho3 * x))
    }
}

/// The per-pair scalars of every kernel function from r² = |r|²: k = K/(4π) = G3/(4πσ³) and
/// l = −(K'/r)/(4π) = G5/(4πσ⁵), so that u = k (α_q × r) and
/// ∂u_i/∂x_j = k ε_ikj α_qk − l (α_q × r)_i r_j.
#[inline(always)]
pub fn pair_coefficients<T: Real>(r2: T, sigma_q: T) -> (T, T) {
    let inv_s = T::one() / sigma_q;
    let rho = r2.sqrt() * inv_s;
    let (g3, g5) = g3_g5(rho);
    let inv_s3 = inv_s * inv_s * inv_s;
    let k = T::FRAC_1_4PI * g3 * inv_s3;
    let l = T::FRAC_1_4PI * g5 * inv_s3 * inv_s * inv_s;
    (k, l)
}

/// The singular limit (g ≡ 1, ρ → ∞) of [`pair_coefficients`]: k = 1/(4πr³), l = 3/(4πr⁵), the
/// far-field kernel of the FMM (docs/physics.md §8). Requires r² > 0.
#[inline(always)]
pub fn singular_pair_coefficients<T: Real>(r2: T) -> (T, T) {
    let inv_r = T::one() / r2.sqrt();
    let k = T::FRAC_1_4PI * inv_r * inv_r * inv_r;
    (k, T::cast_f64(3.0) * k * inv_r * inv_r)
}

/// The per-pair scalars shared by every kernel function: ([`pair_coefficients`], c = α_q × r).
#[inline(always)]
fn pair_terms<T: Real>(r: [T; 3], alpha_q: [T; 3], sigma_q: T) -> (T, T, [T; 3]) {
    let (k, l) = pair_coefficients(dot(r, r), sigma_q);
    (k, l, cross(alpha_q, r))
}

#[inline(always)]
fn stretching_from_terms<T: Real>(
    k: T,
    l: T,
    c: [T; 3],
    r: [T; 3],
    alpha_q: [T; 3],
    alpha_p: [T; 3],
    scheme: StretchingScheme,
) -> [T; 3] {
    match scheme {
        StretchingScheme::Classical => {
            // (1/4π)[K (α_q × α_p) + (K'/r)(α_p·r)(α_q × r)]
            let a = cross(alpha_q, alpha_p);
            let b = l * dot(alpha_p, r);
            [
                k * a[0] - b * c[0],
                k * a[1] - b * c[1],
                k * a[2] - b * c[2],
            ]
        }
        StretchingScheme::Transposed => {
            // (1/4π)[K (α_p × α_q) + (K'/r)(α_p·(α_q × r)) r]
            let a = cross(alpha_p, alpha_q);
            let b = l * dot(alpha_p, c);
            [
                k * a[0] - b * r[0],
                k * a[1] - b * r[1],
                k * a[2] - b * r[2],
            ]
        }
    }
}

/// Velocity induced at x by particle q (docs/physics.md §2): with r = x − x_q,
/// u = (1/4π) g(ρ)/r³ (α_q × r) = (1/4π) G3(ρ)/σ_q³ (α_q × r). Zero at r = 0 (the self term).
/// Requires σ_q > 0.
#[inline]
pub fn velocity<T: Real>(r: [T; 3], alpha_q: [T; 3], sigma_q: T) -> [T; 3] {
    let (k, _, c) = pair_terms(r, alpha_q, sigma_q);
    [k * c[0], k * c[1], k * c[2]]
}

/// Velocity gradient at x due to particle q (docs/physics.md §2), indexed `[i][j]` = ∂u_i/∂x_j:
/// ∂u_i/∂x_j = (1/4π)[K ε_ikj α_qk + (K'/r) r_j (α_q × r)_i], K = G3/σ_q³, K'/r = −G5/σ_q⁵.
/// Finite at r = 0: (1/4π) G3(0)/σ_q³ `[α_q]_×` (the cross-product matrix of α_q).
#[inline]
pub fn velocity_gradient<T: Real>(r: [T; 3], alpha_q: [T; 3], sigma_q: T) -> [[T; 3]; 3] {
    let (k, l, c) = pair_terms(r, alpha_q, sigma_q);
    let a = alpha_q;
    let z = T::zero();
    // K ε_ikj α_qk is K times the cross-product matrix of α_q: M v = α_q × v.
    let m = [[z, -a[2], a[1]], [a[2], z, -a[0]], [-a[1], a[0], z]];
    let mut grad = [[z; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            grad[i][j] = k * m[i][j] - l * c[i] * r[j];
        }
    }
    grad
}

/// Contribution of particle q to dα_p/dt (docs/physics.md §2), r = x_p − x_q, K = G3/σ_q³,
/// K'/r = −G5/σ_q⁵:
///
/// * classical, (α_p·∇)u: (1/4π)[K (α_q × α_p) − G5/σ_q⁵ (α_p·r)(α_q × r)];
/// * transposed, (∇u)ᵀα_p: (1/4π)[K (α_p × α_q) − G5/σ_q⁵ (α_p·(α_q × r)) r].
///
/// Zero at r = 0 when α_p = α_q (the self term). The transposed pair terms are antisymmetric
/// under p ↔ q only for σ_p = σ_q.
#[inline]
pub fn stretching<T: Real>(
    r: [T; 3],
    alpha_q: [T; 3],
    sigma_q: T,
    alpha_p: [T; 3],
    scheme: StretchingScheme,
) -> [T; 3] {
    let (k, l, c) = pair_terms(r, alpha_q, sigma_q);
    stretching_from_terms(k, l, c, r, alpha_q, alpha_p, scheme)
}

/// Stretching from the velocity gradient `g[i][j]` = ∂u_i/∂x_j and the target strength a:
/// classical Σ_j a_j ∂_j u_i = (a·∇)u, transposed Σ_j ∂_i u_j a_j = (∇u)ᵀa (docs/physics.md §2).
#[inline]
pub fn stretching_from_gradient(
    g: &[[f64; 3]; 3],
    a: &[f64; 3],
    scheme: StretchingScheme,
) -> [f64; 3] {
    match scheme {
        StretchingScheme::Classical => {
            [0, 1, 2].map(|i| g[i][0] * a[0] + g[i][1] * a[1] + g[i][2] * a[2])
        }
        StretchingScheme::Transposed => {
            [0, 1, 2].map(|i| g[0][i] * a[0] + g[1][i] * a[1] + g[2][i] * a[2])
        }
    }
}

/// The hot-loop form: ([`velocity`], [`stretching`]) of particle q at particle p together,
/// sharing ρ, one `exp` and at most one `erf` (docs/physics.md §2); bit-identical to the separate
/// calls.
#[inline]
pub fn velocity_and_stretching<T: Real>(
    r: [T; 3],
    alpha_q: [T; 3],
    sigma_q: T,
    alpha_p: [T; 3],
    scheme: StretchingScheme,
) -> ([T; 3], [T; 3]) {
    let (k, l, c) = pair_terms(r, alpha_q, sigma_q);
    (
        [k * c[0], k * c[1], k * c[2]],
        stretching_from_terms(k, l, c, r, alpha_q, alpha_p, scheme),
    )
}

/// The 3-D Gaussian ζ_σ(r) = (2πσ²)^(−3/2) exp(−r²/(2σ²)) (docs/physics.md §2), from r² = |r|²;
/// integrates to 1 over space (vorticity evaluation, RBF reinitialisation).
#[inline]
pub fn gaussian_zeta<T: Real>(r2: T, sigma: T) -> T {
    let inv_s = T::one() / sigma;
    let inv_s2 = inv_s * inv_s;
    T::GAUSS_NORM * inv_s2 * inv_s * (-T::cast_f64(0.5) * r2 * inv_s2).exp()
}

/// Vorticity induced at x by particle q (docs/physics.md §2): ω = α_q ζ_σq(|r|), r = x − x_q.
#[inline]
pub fn vorticity<T: Real>(r: [T; 3], alpha_q: [T; 3], sigma_q: T) -> [T; 3] {
    let z = gaussian_zeta(dot(r, r), sigma_q);
    [alpha_q[0] * z, alpha_q[1] * z, alpha_q[2] * z]
}

/// The singular Biot–Savart velocity (1/4π) (α_q × r)/r³ (docs/physics.md §2 with g ≡ 1), for
/// far-field checks. Returns zero at r = 0 (the self term contributes nothing).
#[inline]
pub fn singular_velocity<T: Real>(r: [T; 3], alpha_q: [T; 3]) -> [T; 3] {
    let r2 = dot(r, r);
    if r2 == T::zero() {
        return [T::zero(); 3];
    }
    let k = T::FRAC_1_4PI / (r2 * r2.sqrt());
    let c = cross(alpha_q, r);
    [k * c[0], k * c[1], k * c[2]]
}

/// 1 − g(ρ) = erfc(ρ/√2) + √(2/π) ρ e^{−ρ²/2}: the relative difference of the regularised and
/// singular velocity kernels at ρ (docs/physics.md §8: how far from a blob the singular kernel may stand for it).
pub fn velocity_tail(rho: f64) -> f64 {
    libm::erfc(rho * std::f64::consts::FRAC_1_SQRT_2)
        + <f64 as Real>::SQRT_2_OVER_PI * rho * (-0.5 * rho * rho).exp()
}

/// (ρg' + 3(1 − g))/3: the relative difference of the gradient kernels at ρ (§8).
pub fn gradient_tail(rho: f64) -> f64 {
    let gp = <f64 as Real>::SQRT_2_OVER_PI * rho * rho * (-0.5 * rho * rho).exp();
    (rho * gp + 3.0 * velocity_tail(rho)) / 3.0
}

/// The smallest ρ (to 0.01) with `tail(ρ)` ≤ `bound`; both tails fall monotonically.
pub fn rho_cut(tail: fn(f64) -> f64, bound: f64) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 40.0f64);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if tail(mid) <= bound {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    (hi * 100.0).ceil() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_series_coefficients() {
        // a_k = 1/(5·7·…·(2k+5)): 1/5, 1/35, 1/315, 1/3465, …
        for (k, want) in [1.0 / 5.0, 1.0 / 35.0, 1.0 / 315.0, 1.0 / 3465.0]
            .iter()
            .enumerate()
        {
            assert!((COEFFS_F64[k] - want).abs() <= 1e-17 * want);
        }
        for k in 1..COEFFS_F64.len() {
            let ratio = COEFFS_F64[k - 1] / COEFFS_F64[k];
            assert!((ratio - (2 * k + 5) as f64).abs() <= 1e-12 * ratio);
        }
        for (a, b) in COEFFS_F32.iter().zip(COEFFS_F64.iter()) {
            assert_eq!(*a, *b as f32);
        }
        // S5(0) = 1/5 and the series against direct summation of its terms at ρ² = 0.5.
        assert_eq!(series_s5(0.0f64), 0.2);
        let direct: f64 = COEFFS_F64
            .iter()
            .enumerate()
            .map(|(k, a)| a * 0.5f64.powi(k as i32))
            .sum();
        assert!((series_s5(0.5f64) - direct).abs() <= 1e-16);
    }
}
