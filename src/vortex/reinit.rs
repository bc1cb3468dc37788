//! Conditioning of the lattice vorticity before the RBF solve of reinitialisation
//! (docs/physics.md §3).
//!
//! Reinitialisation samples the blob vorticity ω_h at the N³ lattice nodes and solves for new
//! strengths. Two things in those samples are not the flow's: a longitudinal (divergent) part,
//! which a Lagrangian field with classical stretching builds up and which induces no velocity,
//! and content at the lattice scale, where the exact RBF inverse divides by the tiny symbol
//! ŝ(k) of the Gaussian circulant. In the lattice spectrum ω̂(k) (integer wavenumbers,
//! |k_d| ≤ N/2):
//!
//! * solenoidal projection (Cottet & Koumoutsakos 2000; the lattice form of the relaxation toward
//!   a divergence-free field that Winckelmans & Leonard 1993 describe): ω̂ ← ω̂ − k (k·ω̂)/|k|²;
//! * a spectral filter ω̂ ← F(k) ω̂, see [`LatticeFilter`].
//!
//! docs/physics.md §3.5 gives the equations and why; docs/validation.md ("Under-resolved flows")
//! the measurements behind the default.

use super::rbf::{for_each_lattice_mode, lattice_field, lattice_spectrum};

/// The spectral filter applied to the lattice vorticity at reinitialisation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LatticeFilter {
    /// `reinit_filter = "none"`: the samples as they are (the exact RBF inverse then reproduces
    /// them at the nodes).
    None,
    /// `reinit_filter = "exponential"`: F(k) = Π_d exp(−36 (|k_d|/(N/2))^36) (Hou & Li, J. Comput.
    /// Phys. 226, 2007): the lower two thirds of each axis untouched to 1e-6, the top sixth
    /// removed.
    Exponential,
}

impl LatticeFilter {
    /// The TOML spelling of `reinit_filter`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LatticeFilter::None => "none",
            LatticeFilter::Exponential => "exponential",
        }
    }

    /// F(k) for the signed integer wavenumber `k` on an `n`³ lattice.
    pub fn factor(&self, k: [f64; 3], n: usize) -> f64 {
        match self {
            LatticeFilter::None => 1.0,
            LatticeFilter::Exponential => {
                let half = n as f64 / 2.0;
                k.iter()
                    .map(|kd| (-36.0 * (kd.abs() / half).powi(36)).exp())
                    .product()
            }
        }
    }
}

/// What reinitialisation does to the lattice vorticity before the RBF solve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatticeConditioning {
    /// `reinit_projection = "solenoidal"` (true) or `"none"`.
    pub solenoidal: bool,
    /// `reinit_filter`.
    pub filter: LatticeFilter,
}

impl LatticeConditioning {
    /// Nothing done: the samples go to the RBF solve as they are.
    pub const NONE: LatticeConditioning = LatticeConditioning {
        solenoidal: false,
        filter: LatticeFilter::None,
    };

    /// True when [`condition_lattice_vorticity`] leaves the field unchanged.
    pub fn is_identity(&self) -> bool {
        !self.solenoidal && self.filter == LatticeFilter::None
    }
}

/// What conditioning found and removed, as fractions of the lattice enstrophy Σ_k |ω̂(k)|².
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConditioningReport {
    /// The longitudinal part Σ |k·ω̂|²/|k|² over Σ |ω̂|² (measured whether or not projected).
    pub longitudinal_fraction: f64,
    /// Σ (1 − F²)|ω̂|² over Σ |ω̂|² of the (projected) field: what the filter removed.
    pub filtered_fraction: f64,
}

/// Conditions `omega` (ω at the `n`³ lattice nodes, `[i][j][k]` order) in place as
/// `conditioning` asks, and reports the longitudinal share and the filtered share. The mean
/// (k = 0) is kept: Σα = 0 is enforced by the solve's caller where the flow needs it.
pub fn condition_lattice_vorticity(
    omega: &mut Vec<[f64; 3]>,
    n: usize,
    conditioning: LatticeConditioning,
) -> ConditioningReport {
    let mut spectrum = lattice_spectrum(omega, n);
    let report = condition_spectrum(&mut spectrum, n, conditioning, None);
    if !conditioning.is_identity() {
        *omega = lattice_field(&spectrum, n);
    }
    report
}

/// The exact RBF solve of docs/physics.md §3.3 on the conditioned vorticity, in one pass over
/// the lattice spectrum: β̂(k) = F(k) P(k) ω̂(k) / ŝ(k), with `symbol` the 1-D circulant's DFT
/// ĉ(m) (m = 0..N, [`super::rbf::LatticeGaussian::spectrum`]) and ŝ = ĉ(m_x) ĉ(m_y) ĉ(m_z).
/// Returns the strengths at the nodes (before any Σβ = 0) and the conditioning report.
pub fn condition_and_solve_exact(
    omega: &[[f64; 3]],
    n: usize,
    symbol: &[f64],
    conditioning: LatticeConditioning,
) -> (Vec<[f64; 3]>, ConditioningReport) {
    let mut spectrum = lattice_spectrum(omega, n);
    let report = condition_spectrum(&mut spectrum, n, conditioning, Some(symbol));
    (lattice_field(&spectrum, n), report)
}

/// Projection and filter on the lattice spectrum, then (with `symbol`) the division by the
/// circulant's symbol.
fn condition_spectrum(
    spectrum: &mut [Vec<num_complex::Complex64>; 3],
    n: usize,
    conditioning: LatticeConditioning,
    symbol: Option<&[f64]>,
) -> ConditioningReport {
    let (mut total, mut longitudinal, mut filtered) = (0.0, 0.0, 0.0);
    for_each_lattice_mode(n, |i, k| {
        let w = [spectrum[0][i], spectrum[1][i], spectrum[2][i]];
        let w2: f64 = w.iter().map(|z| z.norm_sqr()).sum();
        total += w2;
        let k2 = k[0] * k[0] + k[1] * k[1] + k[2] * k[2];
        let mut kept = w;
        if k2 > 0.0 {
            let kdotw = w[0] * k[0] + w[1] * k[1] + w[2] * k[2];
            longitudinal += kdotw.norm_sqr() / k2;
            if conditioning.solenoidal {
                for d in 0..3 {
                    kept[d] = w[d] - kdotw * (k[d] / k2);
                }
            }
        }
        let f = conditioning.filter.factor(k, n);
        let kept2: f64 = kept.iter().map(|z| z.norm_sqr()).sum();
        filtered += (1.0 - f * f) * kept2;
        let scale = match symbol {
            // DFT indices of node i: (i / n², (i / n) mod n, i mod n).
            Some(c) => f / (c[i / (n * n)] * c[(i / n) % n] * c[i % n]),
            None => f,
        };
        for d in 0..3 {
            spectrum[d][i] = kept[d] * scale;
        }
    });
    let total = total.max(f64::MIN_POSITIVE);
    ConditioningReport {
        longitudinal_fraction: longitudinal / total,
        filtered_fraction: filtered / total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::{PI, TAU};

    fn lattice(n: usize, f: impl Fn([f64; 3]) -> [f64; 3]) -> Vec<[f64; 3]> {
        let h = TAU / n as f64;
        let mut out = Vec::with_capacity(n * n * n);
        for i in 0..n {
            for j in 0..n {
                for k in 0..n {
                    out.push(f([
                        -PI + i as f64 * h,
                        -PI + j as f64 * h,
                        -PI + k as f64 * h,
                    ]));
                }
            }
        }
        out
    }

    #[test]
    fn projection_removes_a_gradient_and_keeps_a_curl() {
        let n = 16;
        // A solenoidal field (Taylor–Green's vorticity) plus a gradient ∇φ, φ = sin(2x) cos(3y).
        let curl = |x: [f64; 3]| {
            [
                -x[0].cos() * x[1].sin() * x[2].sin(),
                -x[0].sin() * x[1].cos() * x[2].sin(),
                2.0 * x[0].sin() * x[1].sin() * x[2].cos(),
            ]
        };
        let grad = |x: [f64; 3]| {
            [
                2.0 * (2.0 * x[0]).cos() * (3.0 * x[1]).cos(),
                -3.0 * (2.0 * x[0]).sin() * (3.0 * x[1]).sin(),
                0.0,
            ]
        };
        let mut omega = lattice(n, |x| {
            let (a, b) = (curl(x), grad(x));
            [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
        });
        let report = condition_lattice_vorticity(
            &mut omega,
            n,
            LatticeConditioning {
                solenoidal: true,
                filter: LatticeFilter::None,
            },
        );
        let want = lattice(n, curl);
        let err = omega
            .iter()
            .zip(&want)
            .flat_map(|(a, b)| (0..3).map(move |d| (a[d] - b[d]).abs()))
            .fold(0.0, f64::max);
        assert!(err < 1e-12, "projection error {err:e}");
        // ⟨|∇φ|²⟩ = (4 + 9)/4 = 13/4 against ⟨|ω_TG|²⟩ = (1 + 1 + 4)/8 = 3/4.
        let expected = 3.25 / (3.25 + 0.75);
        assert!(
            (report.longitudinal_fraction - expected).abs() < 1e-12,
            "{report:?}"
        );
        assert!(report.filtered_fraction.abs() < 1e-15);
    }

    #[test]
    fn exponential_filter_keeps_low_modes_and_removes_the_top_of_the_band() {
        let n = 24;
        let f = LatticeFilter::Exponential;
        assert!((f.factor([4.0, 3.0, 2.0], n) - 1.0).abs() < 1e-6);
        assert!(f.factor([12.0, 0.0, 0.0], n) < 1e-15);
        let low = |x: [f64; 3]| [(2.0 * x[1]).sin(), 0.0, 0.0];
        let mut omega = lattice(n, |x| {
            let a = low(x);
            [a[0], a[1] + (11.0 * x[0]).cos(), 0.0]
        });
        let report = condition_lattice_vorticity(
            &mut omega,
            n,
            LatticeConditioning {
                solenoidal: false,
                filter: f,
            },
        );
        let want = lattice(n, low);
        let removed_mode = (-36.0f64 * (11.0f64 / 12.0).powi(36)).exp();
        let err = omega
            .iter()
            .zip(&want)
            .flat_map(|(a, b)| (0..3).map(move |d| (a[d] - b[d]).abs()))
            .fold(0.0, f64::max);
        assert!(err < removed_mode + 1e-6, "filter error {err:e}");
        // Half of the enstrophy sits at k = 11, of which 1 − F² is removed.
        let expected = 0.5 * (1.0 - removed_mode * removed_mode);
        assert!(
            (report.filtered_fraction - expected).abs() < 1e-6,
            "{report:?}"
        );
    }

    #[test]
    fn one_pass_exact_solve_equals_conditioning_then_the_axis_by_axis_solve() {
        use crate::vortex::rbf::LatticeGaussian;
        let n = 12;
        let sigma = 0.9 * TAU / n as f64;
        // A field with a curl, a gradient and lattice-scale content.
        let omega = lattice(n, |x| {
            [
                (x[1] + 0.3).sin() * (2.0 * x[2]).cos() + 0.2 * (5.0 * x[0]).cos(),
                (3.0 * x[0]).cos() + 0.1 * (6.0 * x[1]).sin(),
                (x[0] - 2.0 * x[1]).sin() * x[2].cos(),
            ]
        });
        let g = LatticeGaussian::new(n, sigma);
        for conditioning in [
            LatticeConditioning::NONE,
            LatticeConditioning {
                solenoidal: true,
                filter: LatticeFilter::Exponential,
            },
        ] {
            let (one_pass, report) =
                condition_and_solve_exact(&omega, n, &g.spectrum(), conditioning);
            let mut w = omega.clone();
            let report2 = condition_lattice_vorticity(&mut w, n, conditioning);
            assert_eq!(report, report2);
            for c in 0..3 {
                let wc: Vec<f64> = w.iter().map(|v| v[c]).collect();
                let mut b = vec![0.0; wc.len()];
                g.solve_exact(&wc, &mut b);
                let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                for (a, b) in one_pass.iter().zip(&b) {
                    assert!(
                        (a[c] - b).abs() < 1e-11 * scale,
                        "{conditioning:?}: {} vs {b}",
                        a[c]
                    );
                }
            }
        }
    }
}
