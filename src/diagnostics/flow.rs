//! Flow diagnostics from Fourier coefficients (docs/physics.md §6), shared by both solvers.
//!
//! With u(x) = Σ_k û(k) e^{ik·x} and sums over all modes (each stored k_z > 0 mode counts twice):
//! - kinetic energy K = Σ ½|û|², enstrophy Z = Σ ½|k|²|û|², dissipation ε = 2νZ;
//! - u' = √(2K/3); integral scale L = π/(2u'²) Σ_{k≠0} ½|û|²/|k|; turnover time T = L/u';
//! - Taylor microscale λ = √(15νu'²/ε), Re_λ = u'λ/ν;
//! - shell spectrum E(k) = Σ_{k−½ ≤ |k| < k+½} ½|û|², so that Σ_k E(k) = K.
//!
//! Every sum uses the true |k| of each mode, never the shell index. Sums are taken in a fixed
//! order, so results do not depend on the thread count.

use crate::spectral::solver::ordered_sum;
use crate::spectral::{Fft3d, ModeLayout, VectorModes};
use num_complex::Complex64;
use rayon::prelude::*;

/// Scalar diagnostics of one velocity field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowStats {
    /// Kinetic energy K = ½⟨|u|²⟩.
    pub energy: f64,
    /// Enstrophy Z = ½⟨|ω|²⟩.
    pub enstrophy: f64,
    /// Dissipation ε = 2νZ.
    pub dissipation: f64,
    /// u' = √(2K/3).
    pub u_rms: f64,
    /// Integral scale L.
    pub integral_scale: f64,
    /// Eddy turnover time T = L/u'.
    pub turnover_time: f64,
    /// Taylor microscale λ.
    pub taylor_microscale: f64,
    /// Taylor-scale Reynolds number Re_λ.
    pub re_lambda: f64,
}

/// Mode sums of a velocity field: K, Z, and Σ ½|û|²/|k|.
fn mode_sums(layout: &ModeLayout, u: &VectorModes) -> (f64, f64, f64) {
    let (side, nz) = (layout.side(), layout.nz());
    let blocks = side * side;
    let sums = |f: &(dyn Fn(f64) -> f64 + Sync)| {
        ordered_sum(blocks, |blk| {
            let (iy, ix) = (blk / side, blk % side);
            let (kx, ky) = (layout.wavenumber(ix) as f64, layout.wavenumber(iy) as f64);
            let mut s = 0.0;
            for kz in 0..nz {
                let i = blk * nz + kz;
                let e = 0.5 * (u[0][i].norm_sqr() + u[1][i].norm_sqr() + u[2][i].norm_sqr());
                let k2 = kx * kx + ky * ky + (kz * kz) as f64;
                s += ModeLayout::weight(kz) * e * f(k2);
            }
            s
        })
    };
    let energy = sums(&|_| 1.0);
    let enstrophy = sums(&|k2| k2);
    let inv_k = sums(&|k2| if k2 > 0.0 { 1.0 / k2.sqrt() } else { 0.0 });
    (energy, enstrophy, inv_k)
}

/// K, Z, ε, u', L, T, λ and Re_λ of the field û with viscosity ν.
pub fn flow_stats(layout: &ModeLayout, u: &VectorModes, nu: f64) -> FlowStats {
    let (energy, enstrophy, inv_k) = mode_sums(layout, u);
    FlowStats::from_mode_sums(energy, enstrophy, inv_k, nu)
}

impl FlowStats {
    /// The statistics from the three mode sums (module docs): K = Σ ½|û|², Z = Σ ½|k|²|û|² and
    /// Σ_{k≠0} ½|û|²/|k|, with viscosity ν. Shared by the CPU sums here and the GPU solver's.
    pub fn from_mode_sums(energy: f64, enstrophy: f64, inv_k: f64, nu: f64) -> FlowStats {
        let dissipation = 2.0 * nu * enstrophy;
        let u2 = 2.0 * energy / 3.0;
        let u_rms = u2.sqrt();
        let integral_scale = std::f64::consts::PI / (2.0 * u2) * inv_k;
        // λ = √(15νu'²/ε) with ε = 2νZ, written without ν so that inviscid runs get a finite λ.
        let taylor_microscale = (7.5 * u2 / enstrophy).sqrt();
        FlowStats {
            energy,
            enstrophy,
            dissipation,
            u_rms,
            integral_scale,
            turnover_time: integral_scale / u_rms,
            taylor_microscale,
            re_lambda: u_rms * taylor_microscale / nu,
        }
    }
}

/// Shell of a mode: the integer s with s − ½ ≤ |k| < s + ½.
pub fn shell_of(k2: f64) -> usize {
    (k2.sqrt() + 0.5).floor() as usize
}

/// Number of shells that can hold a retained mode of `layout` (shells 0 ..= ⌊√3 K + ½⌋).
pub fn shell_count(layout: &ModeLayout) -> usize {
    shell_of(3.0 * (layout.kmax * layout.kmax) as f64) + 1
}

/// Shell spectrum E(s), s = 0, 1, …: Σ ½|û|² over modes with s − ½ ≤ |k| < s + ½.
pub fn shell_spectrum(layout: &ModeLayout, u: &VectorModes) -> Vec<f64> {
    let (side, nz) = (layout.side(), layout.nz());
    let nshell = shell_count(layout);
    // One partial spectrum per k_y block, added in block order: thread-count independent.
    let parts: Vec<Vec<f64>> = (0..side)
        .into_par_iter()
        .map(|iy| {
            let mut e = vec![0.0; nshell];
            let ky = layout.wavenumber(iy) as f64;
            for ix in 0..side {
                let kx = layout.wavenumber(ix) as f64;
                for kz in 0..nz {
                    let i = layout.index(ix, iy, kz);
                    let k2 = kx * kx + ky * ky + (kz * kz) as f64;
                    let en = 0.5 * (u[0][i].norm_sqr() + u[1][i].norm_sqr() + u[2][i].norm_sqr());
                    e[shell_of(k2)] += ModeLayout::weight(kz) * en;
                }
            }
            e
        })
        .collect();
    let mut e = vec![0.0; nshell];
    for p in parts {
        for (a, b) in e.iter_mut().zip(p) {
            *a += b;
        }
    }
    e
}

/// max |∇·u| over the nodes of the transform's grid.
pub fn max_divergence(fft: &mut Fft3d, u: &VectorModes) -> f64 {
    let layout = fft.layout();
    let mut div = vec![Complex64::new(0.0, 0.0); layout.len()];
    layout.for_each_mode(|i, k| {
        let d = u[0][i] * k[0] as f64 + u[1][i] * k[1] as f64 + u[2][i] * k[2] as f64;
        div[i] = Complex64::new(-d.im, d.re);
    });
    let mut phys = vec![0.0; fft.physical_len()];
    fft.inverse(&div, &mut phys);
    phys.par_iter().map(|x| x.abs()).reduce(|| 0.0, f64::max)
}

/// Mode `i` (wavevector `k`) of the vorticity component `c` of the velocity modes `u`:
/// ω̂_c = i (k_a û_b − k_b û_a), (c, a, b) cyclic.
pub fn vorticity_mode(u: &VectorModes, c: usize, i: usize, k: [f64; 3]) -> Complex64 {
    let (a, b) = ((c + 1) % 3, (c + 2) % 3);
    let d = u[b][i] * k[a] - u[a][i] * k[b];
    Complex64::new(-d.im, d.re)
}

/// max |ω| over the nodes of the transform's grid, ω = ∇ × u of the retained modes `u`.
pub fn max_vorticity(fft: &mut Fft3d, u: &VectorModes) -> f64 {
    let layout = fft.layout();
    let mut w = vec![Complex64::new(0.0, 0.0); layout.len()];
    let mut phys = vec![0.0; fft.physical_len()];
    let mut norm2 = vec![0.0; fft.physical_len()];
    for c in 0..3 {
        layout.for_each_mode(|i, k| w[i] = vorticity_mode(u, c, i, k.map(|x| x as f64)));
        fft.inverse(&w, &mut phys);
        norm2
            .par_iter_mut()
            .zip(&phys)
            .for_each(|(s, x)| *s += x * x);
    }
    norm2.par_iter().copied().reduce(|| 0.0, f64::max).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shells_follow_true_wavenumber() {
        assert_eq!(shell_of(0.0), 0);
        assert_eq!(shell_of(3.0), 2); // |k| = √3 ≈ 1.73 lies in shell 2
        assert_eq!(shell_of(2.0), 1); // √2 ≈ 1.41
        assert_eq!(shell_of(6.25), 3); // |k| = 2.5 starts shell 3
    }

    /// Taylor–Green u = (sin x cos y cos z, −cos x sin y cos z, 0) has
    /// ω = (−cos x sin y sin z, −sin x cos y sin z, 2 sin x sin y cos z), whose largest norm
    /// on a grid through (±π/2, ±π/2, 0) is 2.
    #[test]
    fn max_vorticity_of_taylor_green() {
        let n = 16;
        let layout = crate::spectral::ModeLayout::new(5);
        let modes = crate::init::initial_modes(
            &crate::config::InitialCondition::TaylorGreen { amplitude: 1.0 },
            &layout,
        )
        .unwrap();
        let mut fft = Fft3d::new(n, layout);
        let w = max_vorticity(&mut fft, &modes);
        assert!((w - 2.0).abs() < 1e-12, "{w}");
    }
}
