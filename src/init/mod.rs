//! Initial velocity fields shared by both solvers (docs/physics.md §5).
//!
//! Every field here is band-limited and defined in the project's coordinates on [-π, π]^3, either
//! by a formula (Taylor–Green, shear wave) or by its Fourier coefficients as a function of the
//! integer wavevector (isotropic turbulence). Sampling one on a grid of any N that retains its
//! modes gives the same field, and the vortex method can evaluate the same field at its lattice.

pub mod particles;

use crate::config::InitialCondition;
use crate::spectral::solver::zero_modes;
use crate::spectral::{ModeLayout, VectorModes};
use num_complex::Complex64;
use rand::{Rng, SeedableRng};
use std::f64::consts::{PI, TAU};

/// Why an initial condition does not fit a grid.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("initial.kind = \"{0}\" is defined by particles, not by a velocity field on a grid")]
    ParticleDefined(&'static str),
    #[error(
        "the initial field has wavenumbers up to {needed} but the grid keeps |k_i| ≤ {kept}: \
         raise spectral.n or lower initial.{key}"
    )]
    NotResolved {
        needed: f64,
        kept: usize,
        /// The key of `[initial]` that sets the wavenumber.
        key: &'static str,
    },
}

/// Isotropic random-phase field: parameters of E(k) = 16 √(2/π) u0² k⁴/kp⁵ exp(−2k²/kp²).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IsotropicField {
    /// Peak wavenumber kp.
    pub kp: f64,
    /// Target rms velocity per component u' (K = 3/2 u0²).
    pub u0: f64,
    /// Seed of the phases.
    pub seed: u64,
    /// Band limit: modes with |k| > k_cut are zero.
    pub k_cut: f64,
}

impl IsotropicField {
    /// The model spectrum E(k), whose integral over k ∈ [0, ∞) is (3/2) u0².
    pub fn model_spectrum(&self, k: f64) -> f64 {
        let (kp, u0) = (self.kp, self.u0);
        16.0 * (2.0 / PI).sqrt() * u0 * u0 * k.powi(4) / kp.powi(5)
            * (-2.0 * k * k / (kp * kp)).exp()
    }

    /// Energy of one mode before normalisation: ½|û(k)|² = E(|k|)/(4π|k|²), the continuum
    /// density of modes being 4π|k|² per unit |k|.
    fn raw_mode_energy(&self, k2: f64) -> f64 {
        if k2 == 0.0 || k2.sqrt() > self.k_cut {
            0.0
        } else {
            self.model_spectrum(k2.sqrt()) / (4.0 * PI * k2)
        }
    }

    /// The factor that makes Σ_k ½|û|² over the integer lattice equal (3/2) u0² exactly.
    /// (The lattice sum of the continuum density differs from the integral by the lattice-point
    /// count of each shell; normalising removes that from the total.)
    pub fn normalisation(&self) -> f64 {
        let kc = self.k_cut.floor() as i64;
        let mut sum = 0.0;
        for kx in -kc..=kc {
            for ky in -kc..=kc {
                for kz in -kc..=kc {
                    sum += self.raw_mode_energy((kx * kx + ky * ky + kz * kz) as f64);
                }
            }
        }
        1.5 * self.u0 * self.u0 / sum
    }

    /// Energy ½|û(k)|² of mode k in the normalised field.
    pub fn mode_energy(&self, k: [i64; 3], normalisation: f64) -> f64 {
        normalisation * self.raw_mode_energy((k[0] * k[0] + k[1] * k[1] + k[2] * k[2]) as f64)
    }

    /// Fourier coefficient û(k) in the project's coordinates (u(x) = Σ û(k) e^{ik·x} with x in
    /// [-π, π]^3). A function of (seed, k) only: Hermitian (û(−k) = conj û(k)), solenoidal
    /// (k·û = 0), with |û(k)|² fixed by the spectrum and random phases and polarisation
    /// (Rogallo 1981): û = a(e^{iθ₁} cos φ e₁ + e^{iθ₂} sin φ e₂), with e₁, e₂ ⟂ k.
    pub fn coefficient(&self, k: [i64; 3], normalisation: f64) -> [Complex64; 3] {
        let zero = [Complex64::new(0.0, 0.0); 3];
        if k == [0, 0, 0] {
            return zero;
        }
        // Generate for the canonical member of the pair {k, −k}; conjugate for the other.
        let canonical = (k[2], k[1], k[0]) > (0, 0, 0);
        let kc = if canonical { k } else { [-k[0], -k[1], -k[2]] };
        let energy = self.mode_energy(kc, normalisation);
        if energy == 0.0 {
            return zero;
        }
        let amp = (2.0 * energy).sqrt();
        let mut rng = rand_chacha::ChaCha8Rng::from_seed(mode_seed(self.seed, kc));
        let th1 = TAU * rng.random::<f64>();
        let th2 = TAU * rng.random::<f64>();
        let phi = TAU * rng.random::<f64>();
        let (e1, e2) = transverse_basis(kc);
        let a = Complex64::from_polar(amp * phi.cos(), th1);
        let b = Complex64::from_polar(amp * phi.sin(), th2);
        let c: [Complex64; 3] = std::array::from_fn(|i| a * e1[i] + b * e2[i]);
        if canonical {
            c
        } else {
            c.map(|z| z.conj())
        }
    }
}

/// A 32-byte ChaCha seed from (seed, k), mixed by SplitMix64 so neighbouring k are unrelated.
fn mode_seed(seed: u64, k: [i64; 3]) -> [u8; 32] {
    let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut mix = |v: u64| {
        state = state.wrapping_add(v).wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let words = [
        mix(k[0] as u64),
        mix(k[1] as u64),
        mix(k[2] as u64),
        mix(0x5eed),
    ];
    let mut out = [0u8; 32];
    for (i, w) in words.iter().enumerate() {
        out[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Orthonormal e₁, e₂ with e₁ ⟂ k, e₂ = k̂ × e₁.
fn transverse_basis(k: [i64; 3]) -> ([f64; 3], [f64; 3]) {
    let kf = [k[0] as f64, k[1] as f64, k[2] as f64];
    let kn = norm(kf);
    let khat = kf.map(|x| x / kn);
    // The axis least aligned with k.
    let ax = (0..3)
        .min_by(|&a, &b| kf[a].abs().total_cmp(&kf[b].abs()))
        .unwrap();
    let mut e = [0.0; 3];
    e[ax] = 1.0;
    let e1 = cross(khat, e);
    let n1 = norm(e1);
    let e1 = e1.map(|x| x / n1);
    (e1, cross(khat, e1))
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn norm(a: [f64; 3]) -> f64 {
    (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt()
}

/// Fourier coefficients (DFT convention of [`ModeLayout`]) of an initial condition on a layout.
/// Fails when the field has modes the layout does not keep.
pub fn initial_modes(ic: &InitialCondition, layout: &ModeLayout) -> Result<VectorModes, InitError> {
    let mut out = zero_modes(layout);
    let kept = layout.kmax;
    // Places the coefficient c (project coordinates) of wavevector k, and its partner −k where
    // the layout stores it, converting to the DFT convention.
    let mut put = |k: [i64; 3], c: [Complex64; 3]| {
        let s = ModeLayout::grid_phase(k);
        for (comp, v) in c.iter().enumerate() {
            if k[2] >= 0 {
                if let Some(i) = layout.index_of_wavevector(k) {
                    out[comp][i] += v * s;
                }
            }
            let km = [-k[0], -k[1], -k[2]];
            if km[2] >= 0 {
                if let Some(i) = layout.index_of_wavevector(km) {
                    out[comp][i] += v.conj() * s;
                }
            }
        }
    };
    let r = ic
        .reach()
        .ok_or(InitError::ParticleDefined(ic.kind_str()))?;
    if r.kmax > kept {
        return Err(InitError::NotResolved {
            needed: r.wavenumber,
            kept,
            key: r.key,
        });
    }
    match *ic {
        InitialCondition::VortexRing { .. }
        | InitialCondition::CoaxialRings { .. }
        | InitialCondition::VortexTube { .. }
        | InitialCondition::Bodies(_) => {
            return Err(InitError::ParticleDefined(ic.kind_str()));
        }
        InitialCondition::TaylorGreen { amplitude } => {
            // u = A sin x cos y cos z, v = −A cos x sin y cos z, w = 0: each product of
            // sines and cosines is a sum of e^{i(±x ± y ± z)}/8 with signs from sin = (e − ē)/2i.
            for sx in [-1i64, 1] {
                for sy in [-1i64, 1] {
                    for sz in [-1i64, 1] {
                        let k = [sx, sy, sz];
                        // Only half of the 8 wavevectors get placed; `put` adds the conjugate.
                        if sz < 0 {
                            continue;
                        }
                        // sin x → sx/(2i), cos → 1/2.
                        let u = Complex64::new(0.0, -(sx as f64)) * (amplitude / 8.0);
                        let v = Complex64::new(0.0, sy as f64) * (amplitude / 8.0);
                        put(k, [u, v, Complex64::new(0.0, 0.0)]);
                    }
                }
            }
        }
        InitialCondition::ShearWave {
            wavevector,
            amplitude,
            polarisation,
        } => {
            // u = A a sin(k·x) = A a (e^{ik·x} − e^{−ik·x})/(2i)
            let c = Complex64::new(0.0, -0.5 * amplitude);
            put(wavevector, polarisation.map(|a| c * a));
        }
        InitialCondition::Isotropic {
            kp,
            u0,
            seed,
            k_cut,
        } => {
            let field = IsotropicField {
                kp,
                u0,
                seed,
                k_cut,
            };
            let norm = field.normalisation();
            layout.for_each_mode(|i, k| {
                let c = field.coefficient(k, norm);
                let s = ModeLayout::grid_phase(k);
                for comp in 0..3 {
                    out[comp][i] = c[comp] * s;
                }
            });
        }
    }
    Ok(out)
}

/// Evaluates a velocity field given by coefficients in the project's coordinates at a point
/// (direct sum; for tests and small evaluations).
pub fn evaluate_modes(layout: &ModeLayout, modes: &VectorModes, x: [f64; 3]) -> [f64; 3] {
    let mut u = [0.0; 3];
    layout.for_each_mode(|i, k| {
        // Stored values are DFT-convention: convert back with the grid phase.
        let s = ModeLayout::grid_phase(k);
        let e = Complex64::from_polar(
            1.0,
            k[0] as f64 * x[0] + k[1] as f64 * x[1] + k[2] as f64 * x[2],
        );
        for c in 0..3 {
            u[c] += ModeLayout::weight(k[2] as usize) * (modes[c][i] * s * e).re;
        }
    });
    u
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::InitialCondition;

    #[test]
    fn taylor_green_modes_match_formula() {
        let lay = ModeLayout::new(3);
        let m = initial_modes(&InitialCondition::TaylorGreen { amplitude: 1.0 }, &lay).unwrap();
        for x in [[0.3, -1.2, 2.0], [-3.0, 0.1, 0.7]] {
            let u = evaluate_modes(&lay, &m, x);
            let exact = [
                x[0].sin() * x[1].cos() * x[2].cos(),
                -x[0].cos() * x[1].sin() * x[2].cos(),
                0.0,
            ];
            for c in 0..3 {
                assert!((u[c] - exact[c]).abs() < 1e-14, "{u:?} vs {exact:?}");
            }
        }
    }

    #[test]
    fn shear_wave_modes_match_formula() {
        let lay = ModeLayout::new(4);
        let k = [1i64, -2, 0];
        let a = [2.0 / 5f64.sqrt(), 1.0 / 5f64.sqrt(), 0.0];
        let ic = InitialCondition::ShearWave {
            wavevector: k,
            amplitude: 0.7,
            polarisation: a,
        };
        let m = initial_modes(&ic, &lay).unwrap();
        let x = [0.4, 1.1, -2.5];
        let u = evaluate_modes(&lay, &m, x);
        let ph = (k[0] as f64 * x[0] + k[1] as f64 * x[1]).sin();
        for c in 0..3 {
            assert!((u[c] - 0.7 * a[c] * ph).abs() < 1e-14);
        }
    }

    #[test]
    fn isotropic_coefficients_are_hermitian_and_solenoidal() {
        let f = IsotropicField {
            kp: 3.0,
            u0: 1.0,
            seed: 9,
            k_cut: 7.0,
        };
        let norm = f.normalisation();
        for k in [[1i64, 2, 3], [0, 4, -1], [-5, 0, 0], [2, -2, 2]] {
            let a = f.coefficient(k, norm);
            let b = f.coefficient([-k[0], -k[1], -k[2]], norm);
            let dot: Complex64 = (0..3).map(|i| a[i] * k[i] as f64).sum();
            assert!(dot.norm() < 1e-14);
            for i in 0..3 {
                assert_eq!(a[i], b[i].conj());
            }
            let e: f64 = a.iter().map(|z| 0.5 * z.norm_sqr()).sum();
            assert!((e - f.mode_energy(k, norm)).abs() < 1e-15);
        }
        // A different seed changes the phases, not the amplitudes.
        let g = IsotropicField { seed: 10, ..f };
        assert_ne!(
            f.coefficient([1, 2, 3], norm),
            g.coefficient([1, 2, 3], norm)
        );
    }
}
