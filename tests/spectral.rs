//! Checks of the pseudo-spectral solver against known answers (docs/physics.md §7) and of the shared
//! initial conditions and diagnostics. CI-sized: 16^3 to 48^3 grids.

use num_complex::Complex64;
use vpm::config::{Dealias, InitialCondition};
use vpm::diagnostics::{flow_stats, max_divergence, shell_spectrum};
use vpm::init::{initial_modes, IsotropicField};
use vpm::spectral::{Fft3d, ModeLayout, SpectralGrid, SpectralSolver};
use vpm::summation::verify;

const TG: InitialCondition = InitialCondition::TaylorGreen { amplitude: 1.0 };

fn solver(n: usize, dealias: Dealias, nu: f64, ic: &InitialCondition) -> SpectralSolver {
    let grid = SpectralGrid::new(n, dealias);
    let mut s = SpectralSolver::new(grid, nu);
    s.set_velocity_modes(initial_modes(ic, &grid.layout()).unwrap());
    s
}

fn energy(s: &SpectralSolver) -> f64 {
    flow_stats(&s.layout(), s.velocity_modes(), s.nu()).energy
}

#[test]
fn taylor_green_initial_energy_and_dissipation() {
    let mut s = solver(16, Dealias::ThreeHalves, 0.01, &TG);
    let st = flow_stats(&s.layout(), s.velocity_modes(), 0.01);
    assert!((st.energy - 0.125).abs() < 1e-15, "K = {}", st.energy);
    // ε(0) = 3ν/4 (|k|² = 3 for every mode).
    assert!((st.dissipation - 0.0075).abs() < 1e-16);
    // u' = √(2K/3) = √(1/12).
    assert!((st.u_rms - (1.0f64 / 12.0).sqrt()).abs() < 1e-15);
    // L = π/(2u'²) · K/√3 (every mode has |k| = √3).
    let l = std::f64::consts::PI / (2.0 / 12.0) * 0.125 / 3f64.sqrt();
    assert!((st.integral_scale - l).abs() < 1e-14);
    // The velocity on the grid is the formula at x_i = −π + i·h.
    let u = s.velocity_on_grid();
    let n = 16;
    let h = std::f64::consts::TAU / n as f64;
    for (i, j, k) in [(0, 0, 0), (3, 7, 11), (15, 2, 9)] {
        let (x, y, z) = (
            -std::f64::consts::PI + i as f64 * h,
            -std::f64::consts::PI + j as f64 * h,
            -std::f64::consts::PI + k as f64 * h,
        );
        let idx = (i * n + j) * n + k;
        assert!((u[0][idx] - x.sin() * y.cos() * z.cos()).abs() < 1e-14);
        assert!((u[1][idx] + x.cos() * y.sin() * z.cos()).abs() < 1e-14);
        assert!(u[2][idx].abs() < 1e-14);
    }
    assert!(s.speed_sum_max() > 0.0);
}

/// Inviscid, dealiased Taylor–Green at 32^3 keeps K to ≤ 1e-11 relative over t ≤ 1 (Δt = 0.01),
/// for both dealiasing rules.
#[test]
fn inviscid_taylor_green_conserves_energy() {
    for dealias in [Dealias::ThreeHalves, Dealias::TwoThirds] {
        let mut s = solver(32, dealias, 0.0, &TG);
        let k0 = energy(&s);
        let mut worst: f64 = 0.0;
        for _ in 0..100 {
            s.step(0.01).unwrap();
            worst = worst.max(((energy(&s) - k0) / k0).abs());
        }
        assert!(
            worst <= 1e-11,
            "{dealias:?}: relative energy drift {worst:e}"
        );
        // The flow did something: enstrophy grew.
        let z = flow_stats(&s.layout(), s.velocity_modes(), 0.0).enstrophy;
        assert!(z > 0.375 * 1.05, "{dealias:?}: Z = {z}");
    }
}

/// In a dealiased viscous run, −dK/dt from the right-hand side equals 2νZ to ≤ 1e-10 relative.
#[test]
fn energy_balance_from_rhs() {
    for dealias in [Dealias::ThreeHalves, Dealias::TwoThirds] {
        let nu = 0.02;
        let mut s = solver(24, dealias, nu, &TG);
        for step in 0..=60 {
            if step % 20 == 0 {
                let minus_dkdt = -s.dkdt_from_rhs();
                let eps = flow_stats(&s.layout(), s.velocity_modes(), nu).dissipation;
                let rel = ((minus_dkdt - eps) / eps).abs();
                assert!(
                    rel <= 1e-10,
                    "{dealias:?} step {step}: {minus_dkdt} vs {eps}"
                );
            }
            s.step(0.02).unwrap();
        }
    }
}

/// A single shear mode is an exact solution: K(t) = K0 exp(−2ν|k|²t).
#[test]
fn shear_mode_decays_exactly() {
    let k = [1i64, 2, -1];
    let a = [1.0 / 2f64.sqrt(), 0.0, 1.0 / 2f64.sqrt()]; // a·k = 0
    let ic = InitialCondition::ShearWave {
        wavevector: k,
        amplitude: 0.8,
        polarisation: a,
    };
    let nu = 0.05;
    for (dealias, dt) in [(Dealias::TwoThirds, 0.05), (Dealias::ThreeHalves, 0.013)] {
        let mut s = solver(16, dealias, nu, &ic);
        let k0 = energy(&s);
        assert!((k0 - 0.16).abs() < 1e-15); // ½ A² ⟨sin²⟩ = A²/4
        let mut t = 0.0;
        for _ in 0..40 {
            s.step(dt).unwrap();
            t += dt;
            let exact = k0 * (-2.0 * nu * 6.0 * t).exp();
            let rel = ((energy(&s) - exact) / exact).abs();
            assert!(rel < 1e-13, "{dealias:?} t = {t}: rel error {rel:e}");
        }
    }
}

/// Low-Re Taylor–Green at early times: K ≈ K0 exp(−6νt) while transfer is negligible.
#[test]
fn small_amplitude_taylor_green_decays_at_viscous_rate() {
    let ic = InitialCondition::TaylorGreen { amplitude: 1e-4 };
    let nu = 0.1;
    let mut s = solver(16, Dealias::ThreeHalves, nu, &ic);
    let k0 = energy(&s);
    for _ in 0..50 {
        s.step(0.02).unwrap();
    }
    let exact = k0 * (-6.0 * nu * 1.0f64).exp();
    assert!(((energy(&s) - exact) / exact).abs() < 1e-8);
}

#[test]
fn divergence_stays_at_round_off_and_spectrum_sums_to_energy() {
    let ic = InitialCondition::Isotropic {
        kp: 3.0,
        u0: 1.0,
        seed: 5,
        k_cut: 7.0,
    };
    let mut s = solver(24, Dealias::ThreeHalves, 0.01, &ic);
    for _ in 0..10 {
        s.step(0.01).unwrap();
    }
    let mut fft = Fft3d::new(24, s.layout());
    let div = max_divergence(&mut fft, s.velocity_modes());
    assert!(div < 1e-12, "max |div u| = {div:e}");
    let e = shell_spectrum(&s.layout(), s.velocity_modes());
    let k = energy(&s);
    assert!(((e.iter().sum::<f64>() - k) / k).abs() < 1e-14);
    assert_eq!(e[0], 0.0);
}

/// The isotropic field's shell spectrum is the target E(k). With random phases and fixed
/// amplitudes (Rogallo), the only deviation from the continuum E(k) is the lattice: shell s holds
/// n_s integer wavevectors where the continuum has 4π(s² + 1/12) per unit width, and E varies
/// across the shell. So (i) each shell equals Σ_{k∈shell} E(|k|)/(4π|k|²) · c exactly, with c the
/// normalisation to K = 3/2 u0²; (ii) relative to the continuum, shell s deviates by the lattice
/// count fluctuation (n_s − 4π(s²+1/12))/(4π(s²+1/12)) plus the within-shell variation of
/// E(k)/k², bounded by ½ max|d ln(E/k²)/dk|·½ to first order; we check against that bound.
#[test]
fn isotropic_field_has_target_spectrum() {
    let (kp, u0, k_cut) = (4.0, 1.0, 12.0);
    let ic = InitialCondition::Isotropic {
        kp,
        u0,
        seed: 1,
        k_cut,
    };
    let field = IsotropicField {
        kp,
        u0,
        seed: 1,
        k_cut,
    };
    let layout = SpectralGrid::new(32, Dealias::ThreeHalves).layout();
    let modes = initial_modes(&ic, &layout).unwrap();
    let e = shell_spectrum(&layout, &modes);
    let st = flow_stats(&layout, &modes, 0.01);
    assert!((st.energy - 1.5).abs() < 1e-13, "K = {}", st.energy);
    let c = field.normalisation();
    // Exact lattice expectation per shell and the lattice counts.
    let kc = k_cut as i64;
    let nsh = e.len();
    let (mut expect, mut count) = (vec![0.0; nsh], vec![0usize; nsh]);
    for kx in -kc..=kc {
        for ky in -kc..=kc {
            for kz in -kc..=kc {
                let k2 = (kx * kx + ky * ky + kz * kz) as f64;
                let s = (k2.sqrt() + 0.5).floor() as usize;
                if s < nsh {
                    expect[s] += field.mode_energy([kx, ky, kz], c);
                    count[s] += 1;
                }
            }
        }
    }
    for s in 1..nsh {
        assert!(
            (e[s] - expect[s]).abs() <= 1e-13 * expect[s].max(1e-300) + 1e-300,
            "shell {s}: {} vs lattice sum {}",
            e[s],
            expect[s]
        );
    }
    for s in 2..=(k_cut as usize - 1) {
        let sf = s as f64;
        let target = field.model_spectrum(sf);
        let lattice = (count[s] as f64 - 4.0 * std::f64::consts::PI * (sf * sf + 1.0 / 12.0))
            / (4.0 * std::f64::consts::PI * (sf * sf + 1.0 / 12.0));
        // d ln(E/k²)/dk = 2/k − 4k/kp²; over half a shell width.
        let slope = (2.0 / sf - 4.0 * sf / (kp * kp))
            .abs()
            .max((2.0 / (sf + 0.5) - 4.0 * (sf + 0.5) / (kp * kp)).abs());
        let tol = lattice.abs() + 0.5 * slope * 0.5 + (c - 1.0).abs() + 0.02;
        let rel = (e[s] - target) / target;
        assert!(
            rel.abs() <= tol,
            "shell {s}: E = {} target {target} (rel {rel:.3}, tol {tol:.3})",
            e[s]
        );
    }
}

/// The isotropic field is a function of (seed, k): two grids sample the same field, and the
/// result is bit-identical for any thread count (also after time steps).
#[test]
fn isotropic_field_is_grid_and_thread_independent() {
    let ic = InitialCondition::Isotropic {
        kp: 3.0,
        u0: 1.0,
        seed: 77,
        k_cut: 7.0,
    };
    // Same field on 32^3 and 48^3 grids: compare at common nodes (i/32 = j/48).
    let run_grid = |n: usize| {
        let s = solver(n, Dealias::TwoThirds, 0.0, &ic);
        s.velocity_on_grid()
    };
    let (a, b) = (run_grid(32), run_grid(48));
    for (i, j, k) in [(0, 0, 0), (2, 4, 6), (30, 14, 8)] {
        let ia = (i * 32 + j) * 32 + k;
        let ib = ((i * 3 / 2) * 48 + j * 3 / 2) * 48 + k * 3 / 2;
        for c in 0..3 {
            assert!((a[c][ia] - b[c][ib]).abs() < 1e-13);
        }
    }
    let run_threads = |threads: usize| {
        verify::on_threads(threads, || {
            let mut s = solver(24, Dealias::ThreeHalves, 0.01, &ic);
            let init = s.velocity_modes().clone();
            for _ in 0..3 {
                s.step(0.01).unwrap();
            }
            let d = -s.dkdt_from_rhs();
            (init, s.velocity_modes().clone(), d)
        })
    };
    let (one, two) = (run_threads(1), run_threads(2));
    let bits = |v: &[Vec<Complex64>; 3]| -> Vec<u64> {
        v.iter()
            .flatten()
            .flat_map(|z| [z.re.to_bits(), z.im.to_bits()])
            .collect()
    };
    assert_eq!(bits(&one.0), bits(&two.0));
    assert_eq!(bits(&one.1), bits(&two.1));
    assert_eq!(one.2.to_bits(), two.2.to_bits());
}

/// A field with modes the grid does not keep is refused, not silently truncated.
#[test]
fn unresolved_initial_field_is_an_error() {
    let ic = InitialCondition::Isotropic {
        kp: 4.0,
        u0: 1.0,
        seed: 1,
        k_cut: 12.0,
    };
    let layout = SpectralGrid::new(32, Dealias::TwoThirds).layout(); // keeps |k_i| ≤ 10
    let err = initial_modes(&ic, &layout).unwrap_err().to_string();
    assert!(err.contains("k_cut") && err.contains("10"), "{err}");
    let _ = ModeLayout::new(1);
}

/// The dealiased nonlinear term equals the exact one: N̂(k) = P(k) Σ_{p+q=k} û(p) × ω̂(q) for
/// every retained k, computed here by a direct triadic sum (an independent f64 implementation).
/// Aliasing, for either rule, would add spurious triads and fail this; energy tests cannot see
/// it, because the rotational form conserves energy on the collocation grid even when aliased.
#[test]
fn nonlinear_term_matches_direct_triadic_sum() {
    use rand::{Rng, SeedableRng};
    for (n, dealias) in [(8, Dealias::ThreeHalves), (10, Dealias::TwoThirds)] {
        let grid = SpectralGrid::new(n, dealias);
        let layout = grid.layout();
        assert_eq!(layout.kmax, 3);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let modes: [Vec<Complex64>; 3] = std::array::from_fn(|_| {
            (0..layout.len())
                .map(|_| Complex64::new(rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0)))
                .collect()
        });
        let mut s = SpectralSolver::new(grid, 0.0);
        s.set_velocity_modes(modes);
        let u = s.velocity_modes().clone();
        let got = s.rhs_at_current().clone();
        // Every mode of the field, both half spaces.
        let kmax = layout.kmax as i64;
        let mut all = Vec::new();
        for kx in -kmax..=kmax {
            for ky in -kmax..=kmax {
                for kz in -kmax..=kmax {
                    let k = [kx, ky, kz];
                    let uk: [Complex64; 3] = std::array::from_fn(|c| layout.get(&u[c], k));
                    let kf = k.map(|x| x as f64);
                    let i = Complex64::new(0.0, 1.0);
                    let wk = [
                        i * (kf[1] * uk[2] - kf[2] * uk[1]),
                        i * (kf[2] * uk[0] - kf[0] * uk[2]),
                        i * (kf[0] * uk[1] - kf[1] * uk[0]),
                    ];
                    all.push((k, uk, wk));
                }
            }
        }
        let mut worst: f64 = 0.0;
        let mut scale: f64 = 0.0;
        layout.for_each_mode(|idx, k| {
            let mut f = [Complex64::new(0.0, 0.0); 3];
            for (p, up, _) in &all {
                let q = [k[0] - p[0], k[1] - p[1], k[2] - p[2]];
                if q.iter().any(|x| x.abs() > kmax) {
                    continue;
                }
                let wq: [Complex64; 3] = {
                    let j = ((q[0] + kmax) * (2 * kmax + 1) + (q[1] + kmax)) * (2 * kmax + 1)
                        + (q[2] + kmax);
                    all[j as usize].2
                };
                f[0] += up[1] * wq[2] - up[2] * wq[1];
                f[1] += up[2] * wq[0] - up[0] * wq[2];
                f[2] += up[0] * wq[1] - up[1] * wq[0];
            }
            let kf = k.map(|x| x as f64);
            let k2: f64 = kf.iter().map(|x| x * x).sum();
            if k2 > 0.0 {
                let dot = (f[0] * kf[0] + f[1] * kf[1] + f[2] * kf[2]) / k2;
                for c in 0..3 {
                    f[c] -= dot * kf[c];
                }
            } else {
                f = [Complex64::new(0.0, 0.0); 3];
            }
            for c in 0..3 {
                worst = worst.max((got[c][idx] - f[c]).norm());
                scale = scale.max(f[c].norm());
            }
        });
        assert!(
            worst <= 1e-12 * scale,
            "{dealias:?}: max |N - N_direct| = {worst:e} (scale {scale:e})"
        );
    }
}
