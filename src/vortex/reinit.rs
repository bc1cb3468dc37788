//! Reinitialisation's spectral solve and the conditioning of the lattice vorticity before any
//! solve (docs/physics.md §3).
//!
//! Reinitialisation samples the blob vorticity ω_h at the N³ lattice nodes (interpolation) or at
//! the nodes of a finer lattice whose band it keeps ([`condition_and_solve_spectral`],
//! docs/physics.md §3.7), or, with one core, takes ω_h's band modes from the particles
//! themselves ([`super::lattice_modes`], then [`solve_spectral_band`]), and solves for new
//! strengths. Two things in those samples are not the
//! flow's: a longitudinal (divergent) part, which a Lagrangian field with classical stretching
//! builds up and which induces no velocity, and content at the lattice scale, where the exact RBF
//! inverse divides by the tiny symbol ŝ(k) of the Gaussian circulant. In the lattice spectrum
//! ω̂(k) (integer wavenumbers, |k_d| ≤ N/2):
//!
//! * solenoidal projection (Cottet & Koumoutsakos 2000; the lattice form of the relaxation toward
//!   a divergence-free field that Winckelmans & Leonard 1993 describe): ω̂ ← ω̂ − k (k·ω̂)/|k|²;
//! * a spectral filter ω̂ ← F(k) ω̂, see [`LatticeFilter`].
//!
//! docs/physics.md §3.5 gives the equations and why; docs/validation.md ("Under-resolved flows")
//! the measurements behind the default.

use super::rbf::{for_each_lattice_mode, lattice_field, lattice_spectrum, signed_wavenumber};

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

/// The lattice size on which spectral reinitialisation ([`super::RbfSolver::Spectral`]) samples
/// the blob vorticity for an `n`³ particle lattice: the smallest multiple of 8 at or above 3n/2
/// with no prime factor above 7 (the GPU's separable lattice sum needs a multiple of 8, and
/// cuFFT and rustfft are fast on such sizes: 384 for n = 256, 72 for 48, 24 for 12). On it a
/// mode q of the band |q_d| ≤ n/2 meets its nearest alias at q ± m, where the Gaussian of core σ
/// has fallen by at least exp(−((m − n/2)² − (n/2)²)σ²/2) relative to q (per axis, at the band's
/// edge): exp(−0.75·2π²·overlap²) for m = 3n/2, 2.4e-4 at overlap 0.75 and 3.7e-7 at 1
/// (docs/physics.md §3.7).
pub fn sampling_lattice(n: usize) -> usize {
    let smooth = |m: usize| {
        let mut r = m;
        for p in [2, 3, 5, 7] {
            while r.is_multiple_of(p) {
                r /= p;
            }
        }
        r == 1
    };
    let mut m = (3 * n).div_ceil(2).next_multiple_of(8);
    while !smooth(m) {
        m += 8;
    }
    m
}

/// The 1-D symbol of the lattice Gaussian without its aliases, per DFT index d of an `n`-point
/// lattice of spacing h = 2π/n: ĝ(d) = (1/h) Σ_q exp(−q²σ0²/2) over the wavenumbers q of the band
/// |q| ≤ n/2 that index d stands for (q_d alone, and both ±n/2 at the Nyquist index of even n).
/// It replaces the circulant's DFT ĉ(d) = (1/h) Σ_j exp(−(q_d + jn)²σ0²/2) (all aliases) in the
/// spectral solve (docs/physics.md §3.7).
pub fn band_gaussian_symbol(n: usize, sigma0: f64) -> Vec<f64> {
    let h = std::f64::consts::TAU / n as f64;
    (0..n)
        .map(|d| {
            let q = signed_wavenumber(d, n);
            let images = if n.is_multiple_of(2) && d == n / 2 {
                2.0
            } else {
                1.0
            };
            images * (-0.5 * q * q * sigma0 * sigma0).exp() / h
        })
        .collect()
}

/// Fine-lattice DFT indices (one, or two at the Nyquist index of even `n`) of the wavenumbers
/// that coarse index `d` of an `n`-point lattice stands for, on an `m`-point lattice (m ≥ n).
fn band_indices(d: usize, n: usize, m: usize) -> ([usize; 2], usize) {
    let fine = |q: i64| q.rem_euclid(m as i64) as usize;
    if n.is_multiple_of(2) && d == n / 2 {
        ([fine(d as i64), fine(-(d as i64))], 2)
    } else {
        // Integer-valued: the conversion is exact.
        ([fine(signed_wavenumber(d, n) as i64), 0], 1)
    }
}

/// The band |q_d| ≤ n/2 of an `m`³ lattice spectrum ([`lattice_spectrum`] of a field sampled on
/// the finer lattice) as an `n`³ lattice spectrum: coarse mode q takes the fine mode q, and a
/// Nyquist component (even n) the sum of the fine modes +n/2 and −n/2, which is what sampling the
/// band on the n³ lattice would give. With m = n it is the identity.
pub fn band_of_spectrum(
    fine: &[Vec<num_complex::Complex64>; 3],
    m: usize,
    n: usize,
) -> [Vec<num_complex::Complex64>; 3] {
    assert!(
        m >= n,
        "the sampling lattice is coarser than the particle lattice"
    );
    let axis: Vec<([usize; 2], usize)> = (0..n).map(|d| band_indices(d, n, m)).collect();
    std::array::from_fn(|c| {
        let src = &fine[c];
        let mut out = vec![num_complex::Complex64::new(0.0, 0.0); n * n * n];
        for_each_lattice_mode(n, |i, _| {
            let (ax, ay, az) = (axis[i / (n * n)], axis[(i / n) % n], axis[i % n]);
            let mut sum = num_complex::Complex64::new(0.0, 0.0);
            for &fx in &ax.0[..ax.1] {
                for &fy in &ay.0[..ay.1] {
                    for &fz in &az.0[..az.1] {
                        sum += src[(fx * m + fy) * m + fz];
                    }
                }
            }
            out[i] = sum;
        });
        out
    })
}

/// Spectral reinitialisation's solve (docs/physics.md §3.7): from the blob vorticity sampled on
/// the `m`³ lattice ([`sampling_lattice`], or m = n for a field band-limited below n/2), the
/// strengths on the `n`³ lattice whose blob field of core σ0 has the sampled field's Fourier
/// coefficients at every lattice wavenumber, conditioned as `conditioning` asks:
/// β̂(q) = F(q) P(q) ω̂(q) / ĝ(q_x)ĝ(q_y)ĝ(q_z), ĝ = [`band_gaussian_symbol`]. Returns the
/// strengths (before any Σβ = 0) and the conditioning report.
pub fn condition_and_solve_spectral(
    omega: &[[f64; 3]],
    m: usize,
    n: usize,
    sigma0: f64,
    conditioning: LatticeConditioning,
) -> (Vec<[f64; 3]>, ConditioningReport) {
    let fine = lattice_spectrum(omega, m);
    let spectrum = if m == n {
        fine
    } else {
        // The fine spectra (48·m³ bytes) are dropped here, before the n³ transforms.
        band_of_spectrum(&fine, m, n)
    };
    solve_spectral_band(spectrum, n, sigma0, conditioning)
}

/// The spectral solve of [`condition_and_solve_spectral`] from the blob field's band spectrum
/// itself (the layout of [`band_of_spectrum`]; e.g. the non-uniform FFT's
/// [`super::lattice_modes::blob_band_spectrum`]): conditioned as `conditioning` asks and divided
/// by the band Gaussian. Returns the strengths (before any Σβ = 0) and the conditioning report.
pub fn solve_spectral_band(
    mut spectrum: [Vec<num_complex::Complex64>; 3],
    n: usize,
    sigma0: f64,
    conditioning: LatticeConditioning,
) -> (Vec<[f64; 3]>, ConditioningReport) {
    let symbol = band_gaussian_symbol(n, sigma0);
    let report = condition_spectrum(&mut spectrum, n, conditioning, Some(&symbol));
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

    /// The blob field's Fourier coefficient ω̂(k) = V⁻¹ Σ_p α_p e^{−ik·x_p} e^{−k²σ_p²/2} at an
    /// integer wavenumber, by direct f64 sum (docs/physics.md §4.2).
    fn blob_coefficient(
        x: &[[f64; 3]],
        alpha: &[[f64; 3]],
        sigma: &[f64],
        k: [f64; 3],
    ) -> [num_complex::Complex64; 3] {
        let k2 = k[0] * k[0] + k[1] * k[1] + k[2] * k[2];
        let mut out = [num_complex::Complex64::new(0.0, 0.0); 3];
        for p in 0..x.len() {
            let phase = -(k[0] * x[p][0] + k[1] * x[p][1] + k[2] * x[p][2]);
            let w =
                num_complex::Complex64::from_polar((-0.5 * k2 * sigma[p] * sigma[p]).exp(), phase)
                    / TAU.powi(3);
            for d in 0..3 {
                out[d] += w * alpha[p][d];
            }
        }
        out
    }

    #[test]
    fn spectral_solve_keeps_the_blob_fields_lattice_modes_of_moved_particles() {
        use crate::summation::{lattice::lattice_vorticity, Sources};
        use rand::{Rng, SeedableRng};
        let (n, overlap) = (12usize, 0.8);
        let h = TAU / n as f64;
        let sigma0 = overlap * h;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // A lattice moved by up to 0.4 h, cores grown by core spreading, random strengths.
        let mut x = super::super::lattice_nodes(n);
        for p in x.iter_mut() {
            for c in p.iter_mut() {
                *c += rng.random_range(-0.4..0.4) * h;
            }
        }
        let alpha: Vec<[f64; 3]> = (0..x.len())
            .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
            .collect();
        let sigma = vec![1.1 * sigma0; x.len()];
        let m = sampling_lattice(n);
        assert_eq!(m, 24);
        let mut omega = Vec::new();
        let sources = Sources {
            x: &x,
            alpha: &alpha,
            sigma: &sigma,
        };
        lattice_vorticity(&sources, m, &mut omega).unwrap();
        let (beta, _) =
            condition_and_solve_spectral(&omega, m, n, sigma0, LatticeConditioning::NONE);
        let nodes = super::super::lattice_nodes(n);
        let cores = vec![sigma0; nodes.len()];
        // Interpolation at the nodes from the n³ samples, for contrast.
        let mut on_nodes = Vec::new();
        lattice_vorticity(&sources, n, &mut on_nodes).unwrap();
        let symbol = super::super::rbf::LatticeGaussian::new(n, sigma0).spectrum();
        let (interpolated, _) =
            condition_and_solve_exact(&on_nodes, n, &symbol, LatticeConditioning::NONE);
        let (mut worst, mut worst_interp) = (0.0f64, 0.0f64);
        // Every wavenumber of the band off the Nyquist planes, 0 ≤ k_d ≤ 5 (and mirrors are
        // conjugates).
        for kx in -5i32..=5 {
            for ky in -5i32..=5 {
                for kz in 0i32..=5 {
                    let k = [kx as f64, ky as f64, kz as f64];
                    let old = blob_coefficient(&x, &alpha, &sigma, k);
                    let new = blob_coefficient(&nodes, &beta, &cores, k);
                    let interp = blob_coefficient(&nodes, &interpolated, &cores, k);
                    let norm = old.iter().map(|z| z.norm_sqr()).sum::<f64>().sqrt();
                    let err = (0..3)
                        .map(|d| (new[d] - old[d]).norm_sqr())
                        .sum::<f64>()
                        .sqrt();
                    let err_i = (0..3)
                        .map(|d| (interp[d] - old[d]).norm_sqr())
                        .sum::<f64>()
                        .sqrt();
                    worst = worst.max(err / norm);
                    worst_interp = worst_interp.max(err_i / norm);
                }
            }
        }
        eprintln!(
            "worst relative mode error: spectral {worst:.2e}, interpolation {worst_interp:.2e}"
        );
        // The sampling's alias error at the band's edge, exp(−0.75·2π²·overlap²·1.21) ≈ 6e-7
        // relative per axis, times the sampled field's own aliases of the moved particles.
        assert!(
            worst < 1e-5,
            "spectral solve: worst relative mode error {worst:e}"
        );
        // Interpolation changes the moved particles' modes by percents near the band's edge.
        assert!(worst_interp > 1e-2, "interpolation: {worst_interp:e}");
    }

    #[test]
    fn sampling_lattices_are_multiples_of_8_with_small_prime_factors() {
        for (n, m) in [
            (12, 24),
            (16, 24),
            (24, 40),
            (32, 48),
            (40, 64),
            (48, 72),
            (62, 96),
            (64, 96),
            (128, 192),
            (254, 384),
            (256, 384),
            (510, 768),
            (512, 768),
        ] {
            assert_eq!(sampling_lattice(n), m, "n = {n}");
        }
        for n in (8..=512).step_by(2) {
            let m = sampling_lattice(n);
            assert!(
                m.is_multiple_of(8) && 2 * m >= 3 * n && m < 2 * n + 16,
                "n = {n}: m = {m}"
            );
        }
    }
}
