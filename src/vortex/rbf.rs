//! Radial-basis-function interpolation on the periodic particle lattice (docs/physics.md §3;
//! Barba, Leonard & Allen 2005; Yokota et al. 2007).
//!
//! Given the vorticity ω_i at the N^3 lattice nodes x_i = −π + i·h, find strengths β_j of
//! Gaussian blobs of core σ0 at the same nodes such that
//!
//!   Σ_j β_j ζ_σ0(x_i − x_j) = ω_i    for every node i,
//!
//! with ζ periodised over the box. The 3-D Gaussian factorises, so the matrix is a Kronecker
//! product A = C ⊗ C ⊗ C of one 1-D circulant C with weights
//! c_m = (2πσ0²)^(−1/2) Σ_images exp(−(m h + jL)²/(2σ0²)). Hence:
//! - applying A is three 1-D periodic convolutions (used by CG, cost O(N^3 · stencil));
//! - the exact solve applies C⁻¹ along each axis: FFT each line, divide by the DFT of c, inverse
//!   FFT (β̂(k) = ω̂(k)/ŝ(k) with ŝ = ĉ(k_x)ĉ(k_y)ĉ(k_z)).
//!
//! The matrix is symmetric positive definite but ill-conditioned at the highest wavenumbers
//! (condition number ≈ 3e5 at σ0 = h), so CG needs tens of iterations and high-k noise in ω is
//! amplified by the exact solve.

use num_complex::Complex64;
use rayon::prelude::*;
use rustfft::FftPlanner;
use std::f64::consts::TAU;

/// Outcome of an iterative solve.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SolveReport {
    pub iterations: usize,
    /// Final relative residual ‖Aβ − ω‖ / ‖ω‖ (all three components together).
    pub relative_residual: f64,
    pub converged: bool,
}

/// The 1-D circulant of the periodised Gaussian on an N-point lattice of spacing h = 2π/N.
#[derive(Debug, Clone)]
pub struct LatticeGaussian {
    n: usize,
    /// c_m for m = 0..N (periodic), with all images summed.
    weights: Vec<f64>,
    /// Offsets with a weight above round-off, as (offset, weight), for the convolution.
    stencil: Vec<(isize, f64)>,
}

impl LatticeGaussian {
    /// The circulant for core radius `sigma` on an `n`-point lattice of the box [−π, π).
    pub fn new(n: usize, sigma: f64) -> Self {
        let h = TAU / n as f64;
        // ζ_σ(r) = Π_d c(r_d) with the 1-D Gaussian c(d) = (2πσ²)^(−1/2) exp(−d²/(2σ²)).
        let one_d = |d: f64| norm1(sigma) * (-d * d / (2.0 * sigma * sigma)).exp();
        let reach = (12.0 * sigma / h).ceil() as i64 + n as i64;
        let mut weights = vec![0.0; n];
        for m in -reach..=reach {
            weights[m.rem_euclid(n as i64) as usize] += one_d(m as f64 * h);
        }
        let max = weights.iter().cloned().fold(0.0, f64::max);
        let stencil = (0..n)
            .filter(|&m| weights[m] > 1e-18 * max)
            .map(|m| {
                let off = if m <= n / 2 {
                    m as isize
                } else {
                    m as isize - n as isize
                };
                (off, weights[m])
            })
            .collect();
        Self {
            n,
            weights,
            stencil,
        }
    }

    /// DFT of the weights, ĉ(k) = Σ_m c_m e^{−2πi k m/N} (real and positive: c is symmetric).
    pub fn spectrum(&self) -> Vec<f64> {
        let n = self.n;
        (0..n)
            .map(|k| {
                self.weights
                    .iter()
                    .enumerate()
                    .map(|(m, c)| c * (TAU * (k * m) as f64 / n as f64).cos())
                    .sum()
            })
            .collect()
    }

    /// y = A x for a scalar field on the lattice (`[i][j][k]` order): three periodic 1-D
    /// convolutions with the stencil.
    pub fn apply(&self, x: &[f64], y: &mut [f64], scratch: &mut Vec<f64>) {
        let n = self.n;
        assert_eq!(x.len(), n * n * n);
        scratch.resize(n * n * n, 0.0);
        // Along k (stride 1), then j (stride n), then i (stride n²).
        self.convolve_axis(x, y, 1);
        self.convolve_axis(y, scratch, n);
        self.convolve_axis(scratch, y, n * n);
    }

    fn convolve_axis(&self, src: &[f64], dst: &mut [f64], stride: usize) {
        let n = self.n;
        let stencil = &self.stencil;
        dst.par_chunks_mut(n * n)
            .enumerate()
            .for_each(|(i, plane)| {
                for (local, out) in plane.iter_mut().enumerate() {
                    let idx = i * n * n + local;
                    // Coordinate along the axis and the base index with that coordinate at 0.
                    let coord = (idx / stride) % n;
                    let base = idx - coord * stride;
                    let mut s = 0.0;
                    for &(off, w) in stencil {
                        let c = (coord as isize + off).rem_euclid(n as isize) as usize;
                        s += w * src[base + c * stride];
                    }
                    *out = s;
                }
            });
    }

    /// Solves A β = ω exactly: C⁻¹ along each axis by FFT.
    pub fn solve_exact(&self, omega: &[f64], beta: &mut [f64]) {
        let n = self.n;
        let spec = self.spectrum();
        let mut planner = FftPlanner::new();
        let fwd = planner.plan_fft_forward(n);
        let inv = planner.plan_fft_inverse(n);
        let mut data: Vec<Complex64> = omega.iter().map(|&v| Complex64::new(v, 0.0)).collect();
        for stride in [1, n, n * n] {
            along_axis(&mut data, n, stride, |line| {
                fwd.process(line);
                for (k, z) in line.iter_mut().enumerate() {
                    *z /= spec[k] * n as f64;
                }
                inv.process(line);
            });
        }
        for (b, z) in beta.iter_mut().zip(&data) {
            *b = z.re;
        }
    }

    /// Solves A β = ω by conjugate gradients, starting from `beta` (its current content).
    pub fn solve_cg(
        &self,
        omega: &[f64],
        beta: &mut [f64],
        tolerance: f64,
        max_iterations: usize,
    ) -> SolveReport {
        let len = omega.len();
        let mut scratch = Vec::new();
        let mut ap = vec![0.0; len];
        self.apply(beta, &mut ap, &mut scratch);
        let mut r: Vec<f64> = omega.iter().zip(&ap).map(|(w, a)| w - a).collect();
        let mut p = r.clone();
        let norm_w = dot(omega, omega).sqrt().max(f64::MIN_POSITIVE);
        let mut rr = dot(&r, &r);
        let mut iterations = 0;
        while rr.sqrt() / norm_w > tolerance && iterations < max_iterations {
            self.apply(&p, &mut ap, &mut scratch);
            let a = rr / dot(&p, &ap);
            beta.par_iter_mut().zip(&p).for_each(|(b, pi)| *b += a * pi);
            r.par_iter_mut()
                .zip(&ap)
                .for_each(|(ri, api)| *ri -= a * api);
            let rr_new = dot(&r, &r);
            let b = rr_new / rr;
            p.par_iter_mut()
                .zip(&r)
                .for_each(|(pi, ri)| *pi = ri + b * *pi);
            rr = rr_new;
            iterations += 1;
        }
        let relative_residual = rr.sqrt() / norm_w;
        SolveReport {
            iterations,
            relative_residual,
            converged: relative_residual <= tolerance,
        }
    }
}

/// Signed integer wavenumber of DFT index `m` on an `n`-point line: m for m ≤ n/2, m − n above
/// (the Nyquist index n/2 is taken as +n/2).
pub(crate) fn signed_wavenumber(m: usize, n: usize) -> f64 {
    if m <= n / 2 {
        m as f64
    } else {
        m as f64 - n as f64
    }
}

/// A 3-D complex DFT over the N^3 lattice (`[i][j][k]` order) by 1-D transforms along each axis.
/// Forward: ŵ(k) = Σ_x w(x) e^{−i k·x}; inverse without the 1/N^3 (the caller scales).
fn lattice_dft(data: &mut [Complex64], n: usize, inverse: bool) {
    let mut planner = FftPlanner::new();
    let fft = if inverse {
        planner.plan_fft_inverse(n)
    } else {
        planner.plan_fft_forward(n)
    };
    for stride in [1, n, n * n] {
        along_axis(data, n, stride, |line| fft.process(line));
    }
}

/// Applies `f` to every line of the N^3 lattice along the axis of `stride` (1, N or N²): the
/// lines are gathered into contiguous buffers, transformed in parallel and scattered back.
fn along_axis(
    data: &mut [Complex64],
    n: usize,
    stride: usize,
    f: impl Fn(&mut [Complex64]) + Sync + Send,
) {
    if stride == 1 {
        data.par_chunks_mut(n).for_each(f);
        return;
    }
    let lines: Vec<usize> = (0..n * n * n)
        .filter(|&idx| (idx / stride).is_multiple_of(n))
        .collect();
    let mut buf = vec![Complex64::new(0.0, 0.0); lines.len() * n];
    for (l, &base) in lines.iter().enumerate() {
        for c in 0..n {
            buf[l * n + c] = data[base + c * stride];
        }
    }
    buf.par_chunks_mut(n).for_each(f);
    for (l, &base) in lines.iter().enumerate() {
        for c in 0..n {
            data[base + c * stride] = buf[l * n + c];
        }
    }
}

/// The lattice vorticity ω_i as three complex spectra ω̂(k) = (1/N³) Σ_i ω_i e^{−i k·x_i}.
pub fn lattice_spectrum(omega: &[[f64; 3]], n: usize) -> [Vec<Complex64>; 3] {
    assert_eq!(omega.len(), n * n * n, "lattice field of the wrong size");
    let scale = 1.0 / (n * n * n) as f64;
    std::array::from_fn(|c| {
        let mut w: Vec<Complex64> = omega
            .iter()
            .map(|v| Complex64::new(v[c] * scale, 0.0))
            .collect();
        lattice_dft(&mut w, n, false);
        w
    })
}

/// The real field at the lattice nodes of three spectra from [`lattice_spectrum`].
pub fn lattice_field(spectrum: &[Vec<Complex64>; 3], n: usize) -> Vec<[f64; 3]> {
    let mut out = vec![[0.0; 3]; n * n * n];
    for (c, s) in spectrum.iter().enumerate() {
        let mut w = s.clone();
        lattice_dft(&mut w, n, true);
        for (o, z) in out.iter_mut().zip(&w) {
            o[c] = z.re;
        }
    }
    out
}

/// Calls `f(index, k)` for every mode of the N^3 lattice spectrum with its signed integer
/// wavenumber k.
pub fn for_each_lattice_mode(n: usize, mut f: impl FnMut(usize, [f64; 3])) {
    for i in 0..n {
        let ki = signed_wavenumber(i, n);
        for j in 0..n {
            let kj = signed_wavenumber(j, n);
            for k in 0..n {
                f((i * n + j) * n + k, [ki, kj, signed_wavenumber(k, n)]);
            }
        }
    }
}

/// Normalisation of the 1-D Gaussian factor: (2πσ²)^(−1/2).
fn norm1(sigma: f64) -> f64 {
    1.0 / (TAU.sqrt() * sigma)
}

/// Σ x_i y_i in a fixed order (thread-count independent): per-chunk partials summed in order.
fn dot(x: &[f64], y: &[f64]) -> f64 {
    const CHUNK: usize = 4096;
    let parts: Vec<f64> = x
        .par_chunks(CHUNK)
        .zip(y.par_chunks(CHUNK))
        .map(|(a, b)| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>())
        .collect();
    parts.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::gaussian_zeta;
    use rand::{Rng, SeedableRng};

    /// The periodised 3-D Gaussian sum at a node, by brute force over images.
    fn brute_force(n: usize, sigma: f64, beta: &[f64], node: [usize; 3]) -> f64 {
        let h = TAU / n as f64;
        let mut s = 0.0;
        for i in 0..n {
            for j in 0..n {
                for k in 0..n {
                    let b = beta[(i * n + j) * n + k];
                    for (ix, iy, iz) in itertools3() {
                        let d = [
                            (node[0] as f64 - i as f64) * h + ix as f64 * TAU,
                            (node[1] as f64 - j as f64) * h + iy as f64 * TAU,
                            (node[2] as f64 - k as f64) * h + iz as f64 * TAU,
                        ];
                        s += b * gaussian_zeta(d[0] * d[0] + d[1] * d[1] + d[2] * d[2], sigma);
                    }
                }
            }
        }
        s
    }

    fn itertools3() -> impl Iterator<Item = (i32, i32, i32)> {
        (-1..=1).flat_map(|a| (-1..=1).flat_map(move |b| (-1..=1).map(move |c| (a, b, c))))
    }

    #[test]
    fn apply_matches_brute_force_gaussian_sum() {
        let n = 8;
        let sigma = 0.8 * TAU / n as f64; // images beyond ±1 are below 1e-20
        let g = LatticeGaussian::new(n, sigma);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let beta: Vec<f64> = (0..n * n * n)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let mut y = vec![0.0; beta.len()];
        g.apply(&beta, &mut y, &mut Vec::new());
        for node in [[0, 0, 0], [3, 5, 7], [7, 1, 4]] {
            let b = brute_force(n, sigma, &beta, node);
            let got = y[(node[0] * n + node[1]) * n + node[2]];
            assert!((b - got).abs() < 1e-12 * b.abs().max(1.0), "{b} vs {got}");
        }
    }

    #[test]
    fn exact_and_cg_solves_agree_on_a_multimode_field() {
        let n = 16;
        let h = TAU / n as f64;
        let sigma = h; // overlap 1, as in the seed
        let g = LatticeGaussian::new(n, sigma);
        // Multi-mode random field: a few dozen Fourier modes with random amplitudes and phases.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let modes: Vec<([f64; 3], f64, f64)> = (0..40)
            .map(|_| {
                (
                    [
                        rng.random_range(-5i32..=5) as f64,
                        rng.random_range(-5i32..=5) as f64,
                        rng.random_range(-5i32..=5) as f64,
                    ],
                    rng.random_range(-1.0..1.0),
                    rng.random_range(0.0..TAU),
                )
            })
            .collect();
        let mut omega = vec![0.0; n * n * n];
        for i in 0..n {
            for j in 0..n {
                for k in 0..n {
                    let x = [
                        -std::f64::consts::PI + i as f64 * h,
                        -std::f64::consts::PI + j as f64 * h,
                        -std::f64::consts::PI + k as f64 * h,
                    ];
                    omega[(i * n + j) * n + k] = modes
                        .iter()
                        .map(|(kv, a, ph)| {
                            a * (kv[0] * x[0] + kv[1] * x[1] + kv[2] * x[2] + ph).cos()
                        })
                        .sum();
                }
            }
        }
        let mut exact = vec![0.0; omega.len()];
        g.solve_exact(&omega, &mut exact);
        // The exact solution reproduces ω at the nodes.
        let mut back = vec![0.0; omega.len()];
        g.apply(&exact, &mut back, &mut Vec::new());
        let err = back
            .iter()
            .zip(&omega)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(err < 1e-10, "exact solve residual {err:e}");
        let mut cg = vec![0.0; omega.len()];
        let rep = g.solve_cg(&omega, &mut cg, 1e-10, 500);
        assert!(rep.converged, "{rep:?}");
        let diff = cg
            .iter()
            .zip(&exact)
            .map(|(a, b)| (a - b).powi(2))
            .sum::<f64>()
            .sqrt()
            / exact.iter().map(|a| a * a).sum::<f64>().sqrt();
        // CG's error is bounded by the condition number times its residual.
        assert!(
            diff < 1e-5,
            "CG vs exact: relative difference {diff:e}, {rep:?}"
        );
        assert!(rep.iterations > 5 && rep.iterations < 500, "{rep:?}");
    }
}
