//! The Kaiser–Bessel window of the particle-mesh part (module docs of [`super`]): its 1-D
//! weights and their derivatives at the nodes of a support, its Fourier transform, and the
//! per-axis table of the Ewald multiplier that the spread and the gather deconvolve. The CPU
//! mesh (f64) evaluates the weights here; the GPU kernels (`kernels/ewald.cu`, f32) evaluate the
//! same formula with CUDA's `cyl_bessel_i0f`/`cyl_bessel_i1f` and receive the table from
//! [`KaiserBessel::multiplier_table`].

use std::f64::consts::{LN_2, PI, TAU};

/// Terms of the series below with a tabulated divisor (x up to about 200).
const SERIES_TABLE: usize = 256;

/// 1/k² and 1/(k(k+1)) for k = 0..SERIES_TABLE (k = 0 unused): the series' ratios without a
/// division per term.
static SERIES_RECIPROCALS: [[f64; 2]; SERIES_TABLE] = {
    let mut t = [[0.0; 2]; SERIES_TABLE];
    let mut k = 1;
    while k < SERIES_TABLE {
        let kf = k as f64;
        t[k] = [1.0 / (kf * kf), 1.0 / (kf * (kf + 1.0))];
        k += 1;
    }
    t
};

/// I₀(x) and I₁(x) by their power series, f64, x ≥ 0: I₀ = Σ t^k/(k!)², I₁ = (x/2) Σ
/// t^k/(k!(k+1)!), t = x²/4. Every term is positive, so the sums are accurate to rounding; the
/// terms fall below 1e-17 of the sum after about x + 25 of them.
pub fn bessel_i0_i1(x: f64) -> (f64, f64) {
    bessel_series::<true>(x)
}

/// I₀(x) alone (the series of [`bessel_i0_i1`] without I₁'s).
pub fn bessel_i0(x: f64) -> f64 {
    bessel_series::<false>(x).0
}

/// The series of I₀ and, when `I1`, of I₁ (else 0).
#[inline]
fn bessel_series<const I1: bool>(x: f64) -> (f64, f64) {
    let t = 0.25 * x * x;
    let (mut a, mut b) = (1.0f64, 1.0f64);
    let (mut s0, mut s1) = (1.0f64, 1.0f64);
    let mut k = 1usize;
    while a > 1e-17 * s0 || (I1 && b > 1e-17 * s1) {
        let [r0, r1] = match SERIES_RECIPROCALS.get(k) {
            Some(r) => *r,
            None => {
                let kf = k as f64;
                [1.0 / (kf * kf), 1.0 / (kf * (kf + 1.0))]
            }
        };
        a *= t * r0;
        s0 += a;
        if I1 {
            b *= t * r1;
            s1 += b;
        }
        k += 1;
    }
    (s0, if I1 { 0.5 * x * s1 } else { 0.0 })
}

/// ln(sinh t / t), t ≥ 0, without overflow.
fn ln_sinhc(t: f64) -> f64 {
    if t < 1e-6 {
        t * t / 6.0
    } else if t < 1.0 {
        (t.sinh() / t).ln()
    } else {
        t + (-(-2.0 * t).exp()).ln_1p() - LN_2 - t.ln()
    }
}

/// The Kaiser–Bessel window φ(x) = I₀(β √(1 − (2x/(w h))²)) on |x| ≤ w h/2 (zero outside), of
/// w nodes per direction on the grid of spacing h = 2π/M, normalised by its transform at k = 0:
/// the effective window is φ/φ̂(0), whose transform is φ̂(k)/φ̂(0) with
/// φ̂(k) = w h · sinh(√(β² − z²))/√(β² − z²), z = k w h/2 (Kaiser 1966; Jackson et al. 1991).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KaiserBessel {
    /// Nodes per direction (the support P).
    pub w: usize,
    /// Shape parameter.
    pub beta: f64,
    /// Grid spacing.
    pub h: f64,
    /// Grid points per direction, M (h = 2π/M).
    pub m: usize,
    /// 4/w²: s² = 1 − e²·(4/w²) for a node e grid units away.
    c4: f64,
    /// 1/I₀(β): the weights below are I₀(β s)/I₀(β) ∈ (0, 1].
    inv_i0b: f64,
    /// The per-axis factor that turns those weights into φ/φ̂(0): I₀(β)/φ̂(0).
    norm: f64,
}

impl KaiserBessel {
    /// The window of `w` nodes with shape `beta` on the grid of side `m`.
    pub fn new(m: usize, w: usize, beta: f64) -> Self {
        let h = TAU / m as f64;
        let (i0b, _) = bessel_i0_i1(beta);
        // φ̂(0) = w h sinh β / β, in logarithms (β up to 100).
        let ln_hat0 = (w as f64 * h).ln() + ln_sinhc(beta);
        Self {
            w,
            beta,
            h,
            m,
            c4: 4.0 / (w * w) as f64,
            inv_i0b: 1.0 / i0b,
            norm: (i0b.ln() - ln_hat0).exp(),
        }
    }

    /// The constants the GPU kernels take: (β, 4/w², 1/I₀(β), I₀(β)/φ̂(0)).
    pub fn kernel_constants(&self) -> (f64, f64, f64, f64) {
        (self.beta, self.c4, self.inv_i0b, self.norm)
    }

    /// 1/I₀(β): the weights are I₀(β s)/I₀(β) ∈ (0, 1].
    pub fn inv_i0b(&self) -> f64 {
        self.inv_i0b
    }

    /// The transform of the weights I₀(β s)/I₀(β) (per unit length, no normalisation) at any
    /// wavenumber k: φ̂(k)/I₀(β) = w h · sinh(√(β² − z²))/√(β² − z²) / I₀(β), z = k w h/2, and
    /// sin(√(z² − β²))/√(z² − β²) beyond the main lobe (1 at z = β).
    pub fn transform(&self, k: f64) -> f64 {
        let wh = self.w as f64 * self.h;
        let z = 0.5 * k * wh;
        let d = self.beta * self.beta - z * z;
        let shape = if d > 0.0 {
            let s = d.sqrt();
            s.sinh() / s
        } else if d < 0.0 {
            let s = (-d).sqrt();
            s.sin() / s
        } else {
            1.0
        };
        wh * shape * self.inv_i0b
    }

    /// The aliasing error per axis on the band |k| ≤ `kmax`: the largest over 0 ≤ k ≤ kmax of
    /// Σ_{0<|l|≤3} |φ̂(k + lM)| / φ̂(k), the images a spread or a gather folds onto mode k.
    pub fn aliasing(&self, kmax: usize) -> f64 {
        let m = self.m as f64;
        (0..=kmax)
            .map(|k| {
                let k = k as f64;
                let images: f64 = (1..=3)
                    .map(|l| {
                        let l = l as f64;
                        self.transform(k + l * m).abs() + self.transform(k - l * m).abs()
                    })
                    .sum();
                images / self.transform(k)
            })
            .fold(0.0, f64::max)
    }

    /// The per-axis factor I₀(β)/φ̂(0) (per unit length) of the weights below.
    pub fn norm(&self) -> f64 {
        self.norm
    }

    /// I₀(β s)/I₀(β) at a node `e` grid units from the position (s² = 1 − (2e/w)²; zero
    /// outside the support).
    #[inline]
    pub fn weight(&self, e: f64) -> f64 {
        let s2 = 1.0 - e * e * self.c4;
        if s2 < 0.0 {
            return 0.0;
        }
        bessel_i0(self.beta * s2.sqrt()) * self.inv_i0b
    }

    /// The weight and its derivative with respect to e: −β (4/w²) e I₁(β s)/s / I₀(β) (finite
    /// at s = 0: I₁(β s)/s → β/2).
    #[inline]
    pub fn weight_and_derivative(&self, e: f64) -> (f64, f64) {
        let s2 = 1.0 - e * e * self.c4;
        if s2 < 0.0 {
            return (0.0, 0.0);
        }
        let s = s2.sqrt();
        let (i0, i1) = bessel_i0_i1(self.beta * s);
        let i1_over_s = if s > 1e-8 { i1 / s } else { 0.5 * self.beta };
        (
            i0 * self.inv_i0b,
            -self.beta * self.c4 * e * i1_over_s * self.inv_i0b,
        )
    }

    /// ln(φ̂(k)/φ̂(0)) at the wavenumber k, for z = k w h/2 < β (the retained band; panics
    /// otherwise, a planning error).
    pub fn ln_transform(&self, k: f64) -> f64 {
        let z = 0.5 * k * self.w as f64 * self.h;
        let t2 = self.beta * self.beta - z * z;
        assert!(
            t2 > 0.0,
            "Kaiser–Bessel window: wavenumber {k} beyond the window's main lobe (β = {})",
            self.beta
        );
        ln_sinhc(t2.sqrt()) - ln_sinhc(self.beta)
    }

    /// The per-axis factors of the multiplier, T(k) = e^{−k²η²/2}/(φ̂(k)/φ̂(0))² for
    /// k = 0..=kmax: the mesh multiplier is (i k × ·)/k² · T(k_x) T(k_y) T(k_z) (the Ewald
    /// factor is separable, and spreading and gathering each apply φ̂ once).
    pub fn multiplier_table(&self, eta: f64, kmax: usize) -> Vec<f64> {
        (0..=kmax)
            .map(|k| {
                let kf = k as f64;
                (-0.5 * kf * kf * eta * eta - 2.0 * self.ln_transform(kf)).exp()
            })
            .collect()
    }
}

/// β that puts the alias of the band edge at the edge of the window's main lobe:
/// β = π w (1 − kmax/M) (Fessler & Sutton 2003; Beatty et al. 2005).
pub fn beta_for(m: usize, w: usize, kmax: usize) -> f64 {
    PI * w as f64 * (1.0 - kmax as f64 / m as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// I₀ and I₁ against reference values (Abramowitz & Stegun table 9.8, and the asymptotic
    /// e^x/√(2πx) growth at 40).
    #[test]
    fn bessel_values() {
        let (a, b) = bessel_i0_i1(1.0);
        assert!((a - 1.266_065_877_752_008_4).abs() < 1e-15, "{a}");
        assert!((b - 0.565_159_103_992_485).abs() < 1e-15, "{b}");
        let (a, b) = bessel_i0_i1(10.0);
        assert!((a / 2_815.716_628_466_254 - 1.0).abs() < 1e-14, "{a}");
        assert!((b / 2_670.988_303_701_255 - 1.0).abs() < 1e-14, "{b}");
        let (a, _) = bessel_i0_i1(0.0);
        assert_eq!(a, 1.0);
        for x in [0.3, 7.0, 33.0] {
            assert_eq!(bessel_i0(x), bessel_i0_i1(x).0);
        }
    }

    /// The closed-form transform against a quadrature of the window (Simpson, 4000 panels),
    /// and the derivative against a central difference.
    #[test]
    fn transform_and_derivative_match_quadrature() {
        let kb = KaiserBessel::new(64, 7, beta_for(64, 7, 20));
        let half = 0.5 * kb.w as f64; // grid units
        let n = 4000;
        for k in [0.0, 3.0, 11.0, 20.0] {
            let mut s = 0.0;
            for i in 0..=n {
                let e = -half + 2.0 * half * i as f64 / n as f64;
                let c = if i == 0 || i == n {
                    1.0
                } else if i % 2 == 1 {
                    4.0
                } else {
                    2.0
                };
                // φ/φ̂(0) = norm · weight, x = e h.
                s += c * kb.norm() * kb.weight(e) * (k * e * kb.h).cos();
            }
            let quad = s * (2.0 * half * kb.h / n as f64) / 3.0;
            let exact = kb.ln_transform(k).exp();
            assert!((quad - exact).abs() < 1e-9, "k={k}: {quad} vs {exact}");
        }
        for e in [-3.4, -1.2, 0.0, 0.7, 3.49] {
            let (_, d) = kb.weight_and_derivative(e);
            let fd = (kb.weight(e + 1e-6) - kb.weight(e - 1e-6)) / 2e-6;
            assert!((d - fd).abs() < 1e-6, "e={e}: {d} vs {fd}");
        }
    }

    #[test]
    fn window_transform_is_the_fourier_integral_beyond_the_main_lobe() {
        // Simpson's rule on the window (smooth inside, a jump of 1/I₀(β) at the ends) against
        // the closed form, inside and outside the main lobe.
        // A band window: 12 nodes on a 24-point mesh for a 16-point lattice (u = 1.5).
        let kb = KaiserBessel::new(24, 12, PI * 12.0 * (1.0 - 0.5 * 16.0 / 24.0));
        let h = TAU / 24.0;
        let half = 6.0;
        let steps = 20_000;
        for k in [0.0, 3.0, 8.0, 16.0, 20.0, 31.0] {
            let dx = 2.0 * half / steps as f64;
            let mut s = 0.0;
            for i in 0..=steps {
                let d = -half + i as f64 * dx;
                let c = if i == 0 || i == steps {
                    1.0
                } else if i % 2 == 1 {
                    4.0
                } else {
                    2.0
                };
                // The window's values on the closed interval (its end values included).
                let t = d / half;
                let v = bessel_i0(kb.beta * (1.0 - t * t).max(0.0).sqrt()) * kb.inv_i0b();
                s += c * v * (k * d * h).cos();
            }
            let integral = s * dx / 3.0 * h;
            let closed = kb.transform(k);
            assert!(
                (integral - closed).abs() < 1e-12 * kb.transform(0.0),
                "k = {k}: {integral} vs {closed}"
            );
        }
    }
}
