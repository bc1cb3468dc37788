//! The exact periodic reference: the direct Fourier sum of docs/physics.md §4, for tests.
//!
//! With integer wavevectors k and V = (2π)^3,
//!
//! ```text
//! ω̂(k) = (1/V) Σ_q α_q e^{−ik·x_q} e^{−k²σ_q²/2}
//! u(x)  = Σ_{k≠0} (i k × ω̂(k))/k² e^{ik·x},      ∂u_i/∂x_j = Σ_{k≠0} i k_j (i k × ω̂(k))_i/k² e^{ik·x}
//! ω(x)  = Σ_k ω̂(k) e^{ik·x}                       (k = 0 included: the blob sum has a mean)
//! ```
//!
//! The k = 0 mode of the velocity is dropped (zero-mean periodic velocity), also when Σα ≠ 0.
//! The sums run over the ball |k| ≤ k_max, by default k_max = 8/σ_min (every dropped mode is
//! damped by at least e^{−32} ≈ 1e-14). The fields are real, so only half of the ball is summed
//! (2 Re of each term with k in the half space k_z > 0, or k_z = 0 and (k_y, k_x) > (0, 0)).
//!
//! Cost O((N_sources + N_targets) · N_k) with N_k ≈ (2π/3) k_max³ modes: a few hundred particles
//! with σ ≳ 0.2 take a fraction of a second. Not for production use.
//!
//! Every sum is over a fixed index order (parallel work only splits independent outputs), so the
//! results are bit-identical for any thread count.

use super::{
    check_inputs, Boundary, Evaluation, Extra, Request, Sources, SumResult, Summation,
    SummationError,
};
use num_complex::Complex64;
use rayon::prelude::*;
use std::f64::consts::TAU;

/// Damping exponent k·σ_min at which the default truncation stops.
pub const DEFAULT_K_SIGMA: f64 = 8.0;

/// The direct Fourier-series evaluator (exact to the truncation; O(N · N_k)).
#[derive(Debug, Default, Clone, Copy)]
pub struct FourierOracle {
    /// Largest |k| summed; `None`: 8/σ_min of the sources of each call.
    pub kmax: Option<f64>,
}

/// Fourier coefficients of the sources on the half ball: wavevectors and ω̂(k).
struct Spectrum {
    k: Vec<[f64; 3]>,
    omega: Vec<[Complex64; 3]>,
}

impl FourierOracle {
    /// Truncation at 8/σ_min.
    pub fn new() -> Self {
        Self { kmax: None }
    }

    /// Truncation at a given |k|.
    pub fn with_kmax(kmax: f64) -> Self {
        Self { kmax: Some(kmax) }
    }

    fn kmax_for(&self, sources: &Sources) -> Result<f64, SummationError> {
        if let Some(k) = self.kmax {
            return Ok(k);
        }
        let smin = sources.sigma.iter().copied().fold(f64::INFINITY, f64::min);
        if !(smin > 0.0 && smin.is_finite()) {
            return Err(SummationError::BadSources(
                "the oracle needs positive core radii".into(),
            ));
        }
        Ok(DEFAULT_K_SIGMA / smin)
    }

    /// ω̂(k) on the half ball |k| ≤ kmax (k = 0 included, stored first).
    fn spectrum(sources: &Sources, kmax: f64) -> Spectrum {
        let kk = kmax.floor() as i64;
        let side = (2 * kk + 1) as usize;
        let mut k = Vec::new();
        for kz in 0..=kk {
            for ky in -kk..=kk {
                for kx in -kk..=kk {
                    let half = kz > 0 || ky > 0 || (ky == 0 && kx >= 0);
                    let k2 = (kx * kx + ky * ky + kz * kz) as f64;
                    if half && k2 <= kmax * kmax {
                        k.push([kx as f64, ky as f64, kz as f64]);
                    }
                }
            }
        }
        // e^{−i k_d x_d} for k_d = −K..=K, per source and direction: [q][d][k_d + K].
        let phases = phase_tables(sources.x, kk, -1.0);
        let inv_v = 1.0 / (TAU * TAU * TAU);
        let omega = k
            .par_iter()
            .map(|kv| {
                let k2 = kv[0] * kv[0] + kv[1] * kv[1] + kv[2] * kv[2];
                let idx = kv.map(|c| (c as i64 + kk) as usize);
                let mut acc = [Complex64::new(0.0, 0.0); 3];
                for q in 0..sources.len() {
                    let p = &phases[q * 3 * side..(q + 1) * 3 * side];
                    let e = p[idx[0]] * p[side + idx[1]] * p[2 * side + idx[2]];
                    let s = sources.sigma[q];
                    let e = e * ((-0.5 * k2 * s * s).exp() * inv_v);
                    for (a, &aq) in acc.iter_mut().zip(&sources.alpha[q]) {
                        *a += e * aq;
                    }
                }
                acc
            })
            .collect();
        Spectrum { k, omega }
    }

    /// Velocity and (optionally) gradient at the targets.
    #[allow(clippy::type_complexity)]
    pub fn fields(
        &self,
        sources: &Sources,
        targets: &[[f64; 3]],
        gradient: bool,
    ) -> Result<(Vec<[f64; 3]>, Option<Vec<[[f64; 3]; 3]>>), SummationError> {
        check_inputs(sources, targets, &Extra::None)?;
        let kmax = self.kmax_for(sources)?;
        let spec = Self::spectrum(sources, kmax);
        let kk = kmax.floor() as i64;
        let side = (2 * kk + 1) as usize;
        // A(k) = (i k × ω̂)/k², k ≠ 0; u = Σ 2 Re[A e^{ikx}] over the half ball.
        let a: Vec<[Complex64; 3]> = spec
            .k
            .iter()
            .zip(&spec.omega)
            .map(|(k, w)| {
                let k2 = k[0] * k[0] + k[1] * k[1] + k[2] * k[2];
                if k2 == 0.0 {
                    return [Complex64::new(0.0, 0.0); 3];
                }
                let c = [
                    w[2] * k[1] - w[1] * k[2],
                    w[0] * k[2] - w[2] * k[0],
                    w[1] * k[0] - w[0] * k[1],
                ];
                c.map(|z| Complex64::new(-z.im, z.re) / k2)
            })
            .collect();
        let tphase = phase_tables(targets, kk, 1.0);
        let res: Vec<([f64; 3], [[f64; 3]; 3])> = (0..targets.len())
            .into_par_iter()
            .map(|t| {
                let p = &tphase[t * 3 * side..(t + 1) * 3 * side];
                let mut u = [0.0; 3];
                let mut g = [[0.0; 3]; 3];
                for (k, ak) in spec.k.iter().zip(&a) {
                    let idx = k.map(|c| (c as i64 + kk) as usize);
                    let e = p[idx[0]] * p[side + idx[1]] * p[2 * side + idx[2]];
                    for i in 0..3 {
                        let z = ak[i] * e;
                        u[i] += 2.0 * z.re;
                        if gradient {
                            // Re(i k_j z) = −k_j Im z.
                            for j in 0..3 {
                                g[i][j] -= 2.0 * k[j] * z.im;
                            }
                        }
                    }
                }
                (u, g)
            })
            .collect();
        let u = res.iter().map(|r| r.0).collect();
        let g = gradient.then(|| res.iter().map(|r| r.1).collect());
        Ok((u, g))
    }

    /// Blob vorticity ω_h = Σ_k ω̂(k) e^{ik·x} (k = 0 included) at the targets.
    pub fn vorticity_field(
        &self,
        sources: &Sources,
        targets: &[[f64; 3]],
    ) -> Result<Vec<[f64; 3]>, SummationError> {
        check_inputs(sources, targets, &Extra::None)?;
        let kmax = self.kmax_for(sources)?;
        let spec = Self::spectrum(sources, kmax);
        let kk = kmax.floor() as i64;
        let side = (2 * kk + 1) as usize;
        let tphase = phase_tables(targets, kk, 1.0);
        Ok((0..targets.len())
            .into_par_iter()
            .map(|t| {
                let p = &tphase[t * 3 * side..(t + 1) * 3 * side];
                let mut w = [0.0; 3];
                for (k, wk) in spec.k.iter().zip(&spec.omega) {
                    let idx = k.map(|c| (c as i64 + kk) as usize);
                    let e = p[idx[0]] * p[side + idx[1]] * p[2 * side + idx[2]];
                    // The k = 0 mode stands for itself only.
                    let m = if k == &[0.0; 3] { 1.0 } else { 2.0 };
                    for c in 0..3 {
                        w[c] += m * (wk[c] * e).re;
                    }
                }
                w
            })
            .collect())
    }
}

/// e^{s i k_d x_d} for k_d = −K..=K, laid out [point][d][k_d + K].
fn phase_tables(x: &[[f64; 3]], kk: i64, s: f64) -> Vec<Complex64> {
    let side = (2 * kk + 1) as usize;
    let mut out = vec![Complex64::new(0.0, 0.0); x.len() * 3 * side];
    out.par_chunks_mut(3 * side)
        .zip(x.par_iter())
        .for_each(|(o, xp)| {
            for d in 0..3 {
                for (i, k) in (-kk..=kk).enumerate() {
                    // Direct sin/cos per entry: no recurrence error.
                    let (sn, cs) = (s * k as f64 * xp[d]).sin_cos();
                    o[d * side + i] = Complex64::new(cs, sn);
                }
            }
        });
    out
}

pub use super::stretching_from_gradient;

impl Summation for FourierOracle {
    fn name(&self) -> String {
        "Fourier-series oracle (periodic, f64)".into()
    }

    fn boundary(&self) -> Boundary {
        Boundary::Periodic { length: TAU }
    }

    fn evaluate_request(&mut self, req: Request, out: &mut Evaluation) -> SumResult {
        let (sources, targets, extra) = (req.sources, req.targets, req.extra);
        check_inputs(sources, targets, &extra)?;
        out.resize_for(targets.len(), &extra);
        let want_grad = !matches!(extra, Extra::None);
        let (u, g) = self.fields(sources, targets, want_grad)?;
        out.velocity[..targets.len()].copy_from_slice(&u);
        match extra {
            Extra::None => {}
            Extra::Gradient => out.gradient[..targets.len()].copy_from_slice(&g.unwrap()),
            Extra::Stretching { alpha, scheme } => {
                let g = g.unwrap();
                for ((s, gi), a) in out.stretching.iter_mut().zip(&g).zip(alpha) {
                    *s = stretching_from_gradient(gi, a, scheme);
                }
            }
        }
        Ok(())
    }

    fn vorticity(&mut self, src: &Sources, at: &[[f64; 3]], out: &mut Vec<[f64; 3]>) -> SumResult {
        let (sources, targets) = (src, at);
        *out = self.vorticity_field(sources, targets)?;
        Ok(())
    }
}
