//! Known-answer tests of the pair kernel (src/kernel.rs; docs/physics.md §2 and §7).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vpm::kernel::{
    cutoff_g, cutoff_g_prime, g3_g5, gaussian_zeta, singular_velocity, stretching, velocity,
    velocity_and_stretching, velocity_gradient, vorticity, Real, StretchingScheme,
};

const C: f64 = 0.797_884_560_802_865_4; // √(2/π)
const SCHEMES: [StretchingScheme; 2] = [StretchingScheme::Classical, StretchingScheme::Transposed];

fn rel(a: f64, b: f64) -> f64 {
    ((a - b) / b).abs()
}

/// Reference (G3, G5) from the positive incomplete-gamma series, summed in f64 until the terms
/// stop mattering: G5 = c e^{−ρ²/2} Σ ρ^{2k}/(5·7·…·(2k+5)), G3 = c e^{−ρ²/2}(1 + ρ²S5)/3. All
/// terms are positive, so it is accurate to a few ulp for every ρ (about 100 terms at ρ = 6).
fn reference_g3_g5(rho: f64) -> (f64, f64) {
    let x = rho * rho;
    let (mut s5, mut t, mut k) = (0.0, 0.2, 0);
    while t > 1e-22 * s5 || k == 0 {
        s5 += t;
        k += 1;
        t *= x / (2 * k + 5) as f64;
    }
    let e = (-0.5 * x).exp();
    (C * e * (1.0 + x * s5) / 3.0, C * e * s5)
}

/// Second, independent reference for small ρ: the alternating Taylor series of docs/physics.md §2,
/// G3 = c Σ (−1)^m ρ^{2m}/(2^m m! (2m+3)), G5 = c Σ (−1)^m ρ^{2m}/(2^m m! (2m+5)), 30 terms.
fn taylor_g3_g5(rho: f64) -> (f64, f64) {
    let x = rho * rho;
    let (mut g3, mut g5, mut p) = (0.0, 0.0, 1.0); // p = (−x/2)^m / m!
    for m in 0..30 {
        g3 += p / (2 * m + 3) as f64;
        g5 += p / (2 * m + 5) as f64;
        p *= -0.5 * x / (m + 1) as f64;
    }
    (C * g3, C * g5)
}

/// The direct erf form of docs/physics.md §2, written out here independently of src/kernel.rs.
fn direct_g3_g5(rho: f64) -> (f64, f64) {
    let e = (-0.5 * rho * rho).exp();
    let g = libm::erf(rho / 2f64.sqrt()) - C * rho * e;
    let gp = C * rho * rho * e;
    (g / rho.powi(3), (3.0 * g - rho * gp) / rho.powi(5))
}

fn rand_vec(rng: &mut ChaCha8Rng, scale: f64) -> [f64; 3] {
    [0; 3].map(|_| scale * rng.random_range(-1.0..1.0))
}

fn rand_unit(rng: &mut ChaCha8Rng) -> [f64; 3] {
    loop {
        let v = rand_vec(rng, 1.0);
        let n = norm(v);
        if n > 0.1 && n <= 1.0 {
            return v.map(|c| c / n);
        }
    }
}

fn norm(v: [f64; 3]) -> f64 {
    (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
}

fn to32(v: [f64; 3]) -> [f32; 3] {
    v.map(|c| c as f32)
}

#[test]
fn spot_values() {
    let g: [(f64, f64); 3] = [(1.0, 0.198748), (2.0, 0.738536), (3.0, 0.970709)];
    for (rho, want) in g {
        assert!(
            (cutoff_g(rho) - want).abs() <= 1e-6,
            "g({rho}) = {}",
            cutoff_g(rho)
        );
        let g32 = cutoff_g(rho as f32) as f64;
        assert!((g32 - want).abs() <= 1e-6, "f32 g({rho}) = {g32}");
    }
    assert!((cutoff_g_prime(1.0f64) - 0.483941).abs() <= 1e-6);
    assert!((cutoff_g_prime(1.0f32) as f64 - 0.483941).abs() <= 1e-6);
    let tail = 1.0 - cutoff_g(6.5);
    assert!(tail > 0.0 && tail < 4e-9, "1 − g(6.5) = {tail:e}");
    let g32 = cutoff_g(6.5f32);
    assert!(g32 <= 1.0 && 1.0 - g32 <= 1.2e-7, "f32 g(6.5) = {g32}");
    // g = ρ³ G3 on both branches, and g → 0 like c ρ³/3.
    for rho in [1e-3, 0.05, 0.5, 0.999, 1.0, 1.5, 2.5, 4.0] {
        let (g3, _) = g3_g5(rho);
        assert!(rel(cutoff_g(rho), g3 * rho.powi(3)) <= 4e-16, "ρ = {rho}");
    }
    assert_eq!(cutoff_g(0.0), 0.0);
    assert_eq!(cutoff_g(0.0f32), 0.0);
}

#[test]
fn g_prime_is_derivative_of_g() {
    for rho in [0.05f64, 0.3, 0.7, 1.0, 1.3, 2.0, 3.0, 4.0] {
        let h = 1e-5 * rho.min(1.0);
        let fd = (cutoff_g(rho + h) - cutoff_g(rho - h)) / (2.0 * h);
        assert!(
            rel(fd, cutoff_g_prime(rho)) <= 1e-8,
            "ρ = {rho}: {fd} vs {}",
            cutoff_g_prime(rho)
        );
    }
}

#[test]
fn references_agree() {
    // The two small-ρ references (positive series and alternating Taylor series) agree, and the
    // positive series agrees with the direct erf form where that one is well conditioned.
    for i in 0..=1000 {
        let rho = i as f64 * 1e-3;
        let (a3, a5) = reference_g3_g5(rho);
        let (b3, b5) = taylor_g3_g5(rho);
        assert!(rel(a3, b3) <= 2e-15 && rel(a5, b5) <= 2e-15, "ρ = {rho}");
    }
    for i in 0..=500 {
        let rho = 1.0 + i as f64 * 1e-2;
        let (a3, a5) = reference_g3_g5(rho);
        let (d3, d5) = direct_g3_g5(rho);
        assert!(rel(a3, d3) <= 5e-15 && rel(a5, d5) <= 1e-14, "ρ = {rho}");
    }
}

#[test]
fn series_and_direct_agree_at_the_threshold() {
    // f64: just below the threshold the kernel uses the series, just above the erf form; each is
    // compared with the other form (written out in this file) and with the reference.
    let t = f64::SERIES_THRESHOLD;
    let mut worst = [0.0f64; 4];
    for d in [1e-12, 1e-9, 1e-6, 1e-3] {
        for rho in [t * (1.0 - d), t * (1.0 + d)] {
            let (k3, k5) = g3_g5(rho);
            let (d3, d5) = direct_g3_g5(rho);
            let (r3, r5) = reference_g3_g5(rho);
            assert!(rel(k3, d3) <= 1e-12, "G3 at {rho}: {k3} vs direct {d3}");
            assert!(rel(k5, d5) <= 1e-10, "G5 at {rho}: {k5} vs direct {d5}");
            worst[0] = worst[0].max(rel(k3, d3));
            worst[1] = worst[1].max(rel(k5, d5));
            worst[2] = worst[2].max(rel(k3, r3));
            worst[3] = worst[3].max(rel(k5, r5));
        }
    }
    assert!(
        worst[2] <= 2e-15 && worst[3] <= 5e-15,
        "vs reference: {worst:?}"
    );
    eprintln!(
        "f64 threshold {t}: kernel vs direct G3 {:.1e} G5 {:.1e}; vs reference G3 {:.1e} G5 {:.1e}",
        worst[0], worst[1], worst[2], worst[3]
    );
    // f32: the branch switch is continuous to f32 rounding.
    let t = f32::SERIES_THRESHOLD;
    let below = g3_g5(t - f32::EPSILON * t);
    let above = g3_g5(t);
    let (r3, r5) = reference_g3_g5(t as f64);
    for (v, r) in [(below.0, r3), (above.0, r3), (below.1, r5), (above.1, r5)] {
        assert!(rel(v as f64, r) <= 1e-6, "f32 at threshold: {v} vs {r}");
    }
}

#[test]
fn f64_matches_reference_on_a_fine_sweep() {
    let (mut w3, mut w5) = (0.0f64, 0.0f64);
    for i in 0..=60_000 {
        let rho = i as f64 * 1e-4;
        let (k3, k5) = g3_g5(rho);
        let (r3, r5) = reference_g3_g5(rho);
        w3 = w3.max(rel(k3, r3));
        w5 = w5.max(rel(k5, r5));
    }
    eprintln!("f64 vs reference on [0, 6]: G3 {w3:.2e}, G5 {w5:.2e}");
    assert!(w3 <= 5e-15 && w5 <= 2e-14, "G3 {w3:e}, G5 {w5:e}");
}

#[test]
fn f32_matches_f64_including_rho_zero() {
    // ρ = 0 exactly: G3(0) = √(2/π)/3, G5(0) = √(2/π)/5.
    let (a3, a5) = g3_g5(0.0f64);
    assert!(rel(a3, C / 3.0) <= 4e-16 && rel(a5, C / 5.0) <= 4e-16);
    let (b3, b5) = g3_g5(0.0f32);
    let eps = f32::EPSILON as f64;
    assert!(rel(b3 as f64, C / 3.0) <= 2.0 * eps && rel(b5 as f64, C / 5.0) <= 2.0 * eps);
    // Fine sweep of (0, 6] (same f32 input to both precisions), plus tiny ρ.
    let (mut w3, mut w5) = ((0.0f64, 0.0f64), (0.0f64, 0.0f64));
    let tiny = [1e-30f32, 1e-20, 1e-10, 1e-6, 1e-4, 1e-3];
    let sweep = (1..=300_000).map(|i| (i as f64 * 2e-5) as f32);
    for rho in tiny.into_iter().chain(sweep) {
        let (s3, s5) = g3_g5(rho);
        let (d3, d5) = g3_g5(rho as f64);
        let (r3, r5) = reference_g3_g5(rho as f64);
        assert!(rel(d3, r3) <= 2e-14 && rel(d5, r5) <= 2e-14, "f64 at {rho}");
        let e3 = rel(s3 as f64, d3);
        let e5 = rel(s5 as f64, d5);
        if e3 > w3.0 {
            w3 = (e3, rho as f64);
        }
        if e5 > w5.0 {
            w5 = (e5, rho as f64);
        }
    }
    eprintln!(
        "f32 vs f64 on (0, 6]: G3 worst {:.2e} at ρ = {:.4}, G5 worst {:.2e} at ρ = {:.4}",
        w3.0, w3.1, w5.0, w5.1
    );
    assert!(w3.0 <= 1e-6 && w5.0 <= 1e-6, "G3 {w3:?}, G5 {w5:?}");
}

#[test]
fn gradient_matches_central_differences() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for rho in [0.05, 0.3, 0.99, 1.01, 1.5, 2.0, 3.0, 5.0] {
        for _ in 0..5 {
            let sigma = rng.random_range(0.05..2.0);
            let alpha = rand_vec(&mut rng, 1.0);
            let r = rand_unit(&mut rng).map(|c| c * rho * sigma);
            let grad = velocity_gradient(r, alpha, sigma);
            let h = 1e-5 * sigma;
            let mut fd = [[0.0; 3]; 3];
            for j in 0..3 {
                let (mut rp, mut rm) = (r, r);
                rp[j] += h;
                rm[j] -= h;
                let (up, um) = (velocity(rp, alpha, sigma), velocity(rm, alpha, sigma));
                for i in 0..3 {
                    fd[i][j] = (up[i] - um[i]) / (2.0 * h);
                }
            }
            let scale = grad.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
            for i in 0..3 {
                for j in 0..3 {
                    let err = (grad[i][j] - fd[i][j]).abs() / scale;
                    assert!(
                        err <= 1e-7,
                        "ρ = {rho}, [{i}][{j}]: {} vs {}",
                        grad[i][j],
                        fd[i][j]
                    );
                }
            }
        }
    }
}

#[test]
fn stretching_matches_gradient_and_fused_call() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    for n in 0..400 {
        let sigma = rng.random_range(0.05..2.0);
        let rho = if n % 4 == 0 {
            rng.random_range(0.0..1.0)
        } else {
            rng.random_range(0.0..8.0)
        };
        let r = rand_unit(&mut rng).map(|c| c * rho * sigma);
        let (aq, ap) = (rand_vec(&mut rng, 1.0), rand_vec(&mut rng, 1.0));
        let grad = velocity_gradient(r, aq, sigma);
        let classical = stretching(r, aq, sigma, ap, StretchingScheme::Classical);
        let transposed = stretching(r, aq, sigma, ap, StretchingScheme::Transposed);
        let scale = grad.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs())) * norm(ap);
        for i in 0..3 {
            let want_c: f64 = (0..3).map(|j| ap[j] * grad[i][j]).sum();
            let want_t: f64 = (0..3).map(|j| grad[j][i] * ap[j]).sum();
            assert!(
                (classical[i] - want_c).abs() <= 1e-13 * scale,
                "classical, ρ = {rho}"
            );
            assert!(
                (transposed[i] - want_t).abs() <= 1e-13 * scale,
                "transposed, ρ = {rho}"
            );
        }
        for scheme in SCHEMES {
            let (u, s) = velocity_and_stretching(r, aq, sigma, ap, scheme);
            assert_eq!(u, velocity(r, aq, sigma));
            assert_eq!(s, stretching(r, aq, sigma, ap, scheme));
            let (r32, aq32, ap32, s32) = (to32(r), to32(aq), to32(ap), sigma as f32);
            let (u, s) = velocity_and_stretching(r32, aq32, s32, ap32, scheme);
            assert_eq!(u, velocity(r32, aq32, s32));
            assert_eq!(s, stretching(r32, aq32, s32, ap32, scheme));
        }
    }
}

#[test]
fn far_field_is_singular_biot_savart() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    for rho in [8.0, 9.0, 12.0, 30.0, 100.0] {
        for _ in 0..10 {
            let sigma = rng.random_range(0.05..2.0);
            let alpha = rand_vec(&mut rng, 1.0);
            let r = rand_unit(&mut rng).map(|c| c * rho * sigma);
            let (u, us) = (velocity(r, alpha, sigma), singular_velocity(r, alpha));
            let err = norm([0, 1, 2].map(|i| u[i] - us[i])) / norm(us);
            assert!(err <= 1e-12, "ρ = {rho}: relative {err:e}");
        }
    }
    // ... and is not at ρ = 4 (1 − g(4) ≈ 1.1e-3): the check can fail.
    let (r, alpha) = ([4.0, 0.0, 0.0], [0.0, 0.0, 1.0]);
    let (u, us) = (velocity(r, alpha, 1.0), singular_velocity(r, alpha));
    assert!(rel(u[1], us[1]) > 1e-4);
}

/// Σ_p Σ_q stretching(p ← q) and Σ_p Σ_q |stretching(p ← q)| over a random cloud.
fn total_stretching(
    x: &[[f64; 3]],
    a: &[[f64; 3]],
    s: &[f64],
    scheme: StretchingScheme,
) -> ([f64; 3], f64) {
    let (mut sum, mut mag) = ([0.0; 3], 0.0);
    for p in 0..x.len() {
        for q in 0..x.len() {
            let r = [0, 1, 2].map(|c| x[p][c] - x[q][c]);
            let w = stretching(r, a[q], s[q], a[p], scheme);
            for c in 0..3 {
                sum[c] += w[c];
            }
            mag += norm(w);
        }
    }
    (sum, mag)
}

#[test]
fn transposed_scheme_conserves_total_strength_only_for_equal_cores() {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let n = 50;
    let x: Vec<[f64; 3]> = (0..n).map(|_| rand_vec(&mut rng, 1.0)).collect();
    let a: Vec<[f64; 3]> = (0..n).map(|_| rand_vec(&mut rng, 0.1)).collect();
    let equal = vec![0.4; n];
    let (sum, mag) = total_stretching(&x, &a, &equal, StretchingScheme::Transposed);
    eprintln!(
        "transposed, equal cores: |Σ|/Σ|·| = {:.1e}",
        norm(sum) / mag
    );
    assert!(
        norm(sum) <= 1e-14 * mag,
        "equal cores: |Σ| = {:e}, Σ|·| = {mag:e}",
        norm(sum)
    );
    // The classical scheme does not conserve Σα even with equal cores.
    let (sum, mag) = total_stretching(&x, &a, &equal, StretchingScheme::Classical);
    eprintln!("classical, equal cores: |Σ|/Σ|·| = {:.1e}", norm(sum) / mag);
    assert!(
        norm(sum) > 1e-3 * mag,
        "classical: |Σ| = {:e}, Σ|·| = {mag:e}",
        norm(sum)
    );
    // Unequal cores break the antisymmetry of the transposed pair term.
    let unequal: Vec<f64> = (0..n).map(|_| rng.random_range(0.3..0.5)).collect();
    let (sum, mag) = total_stretching(&x, &a, &unequal, StretchingScheme::Transposed);
    eprintln!(
        "transposed, unequal cores: |Σ|/Σ|·| = {:.1e}",
        norm(sum) / mag
    );
    assert!(
        norm(sum) > 1e-3 * mag,
        "unequal cores: |Σ| = {:e}, Σ|·| = {mag:e}",
        norm(sum)
    );
}

#[test]
fn self_term_is_zero_in_both_precisions() {
    let (a, sigma) = ([0.3, -1.2, 0.7], 0.25);
    assert_eq!(velocity([0.0; 3], a, sigma), [0.0; 3]);
    assert_eq!(singular_velocity([0.0; 3], a), [0.0; 3]);
    let a32 = to32(a);
    assert_eq!(velocity([0.0f32; 3], a32, sigma as f32), [0.0; 3]);
    assert_eq!(singular_velocity([0.0f32; 3], a32), [0.0; 3]);
    for scheme in SCHEMES {
        let (u, s) = velocity_and_stretching([0.0; 3], a, sigma, a, scheme);
        assert_eq!((u, s), ([0.0; 3], [0.0; 3]), "{scheme:?}");
        assert_eq!(stretching([0.0; 3], a, sigma, a, scheme), [0.0; 3]);
        let (u, s) = velocity_and_stretching([0.0f32; 3], a32, sigma as f32, a32, scheme);
        assert_eq!((u, s), ([0.0; 3], [0.0; 3]), "f32 {scheme:?}");
        assert_eq!(
            stretching([0.0f32; 3], a32, sigma as f32, a32, scheme),
            [0.0; 3]
        );
    }
    // The gradient at r = 0 is finite: (1/4π) G3(0)/σ³ times the cross-product matrix of α.
    let grad = velocity_gradient([0.0; 3], a, sigma);
    let k = C / 3.0 / (4.0 * std::f64::consts::PI * sigma.powi(3));
    assert!(rel(grad[1][0], k * a[2]) <= 1e-15 && rel(grad[0][2], k * a[1]) <= 1e-15);
    assert!(grad.iter().flatten().all(|v| v.is_finite()));
    assert!(velocity_gradient([0.0f32; 3], a32, sigma as f32)
        .iter()
        .flatten()
        .all(|v| v.is_finite()));
}

#[test]
fn gaussian_zeta_integrates_to_one() {
    let sigma = 0.7f64;
    assert!(
        rel(
            gaussian_zeta(0.0, sigma),
            (2.0 * std::f64::consts::PI * sigma * sigma).powf(-1.5)
        ) <= 1e-15
    );
    // Trapezoidal sum on a lattice of spacing σ/4 out to ±8σ (spectrally accurate for a Gaussian).
    let h = sigma / 4.0;
    let m = 32i32;
    let (mut s64, mut s32) = (0.0f64, 0.0f64);
    for i in -m..=m {
        for j in -m..=m {
            for k in -m..=m {
                let r2 = h * h * (i * i + j * j + k * k) as f64;
                s64 += gaussian_zeta(r2, sigma);
                s32 += gaussian_zeta(r2 as f32, sigma as f32) as f64;
            }
        }
    }
    let (i64_, i32_) = (s64 * h.powi(3), s32 * h.powi(3));
    assert!((i64_ - 1.0).abs() <= 1e-6, "f64 integral {i64_}");
    assert!((i32_ - 1.0).abs() <= 1e-6, "f32 integral {i32_}");
    // Vorticity of one particle is α ζ.
    let (r, a) = ([0.1, -0.2, 0.3], [1.0, 2.0, -3.0]);
    let w = vorticity(r, a, sigma);
    let z = gaussian_zeta(0.14, sigma);
    for c in 0..3 {
        assert!(rel(w[c], a[c] * z) <= 1e-15);
    }
}

/// The device-side pair kernel (kernels/common.cuh, included by both GPU families) uses
/// src/kernel.rs's series coefficients and thresholds, in both precisions.
#[test]
fn device_header_mirrors_the_cpu_series() {
    let (name, header) = vpm::summation::PAIR_KERNEL_HEADER;
    assert_eq!(name, "common.cuh");
    for family in [
        vpm::summation::direct::all_pairs::KERNELS,
        vpm::summation::ewald::engine::KERNELS,
        vpm::summation::fmm::cuda::KERNELS,
    ] {
        let family = family.text;
        assert!(family.contains("#include \"common.cuh\""));
    }
    // Horner literals of one precision: "T s = a_K;" then "s = s * x + a_k;" down to a_0.
    fn coefficients(header: &str, signature: &str, suffix: &str) -> Vec<f64> {
        let body = header.split(signature).nth(1).expect(signature);
        let body = &body[..body.find("return s;").expect("end of the series")];
        body.split(';')
            .filter_map(|stmt| stmt.rsplit(['=', '+']).next())
            .filter_map(|t| t.trim().strip_suffix(suffix))
            .filter_map(|t| t.trim().parse::<f64>().ok())
            .collect()
    }
    let a64 = <f64 as Real>::SERIES_COEFFS;
    let a32 = <f32 as Real>::SERIES_COEFFS;
    let l64 = coefficients(header, "double vpm_series_s5(double x)", "");
    let l32 = coefficients(header, "float vpm_series_s5(float x)", "f");
    assert_eq!(l64.len(), a64.len(), "{l64:?}");
    assert_eq!(l32.len(), a32.len(), "{l32:?}");
    for (k, &l) in l64.iter().enumerate() {
        assert_eq!(l, a64[a64.len() - 1 - k], "f64 a_{}", a64.len() - 1 - k);
    }
    for (k, &l) in l32.iter().enumerate() {
        // The f32 literal as NVRTC reads it (nearest float) is src/kernel.rs's f32 coefficient.
        assert_eq!(
            l as f32,
            a32[a32.len() - 1 - k],
            "f32 a_{}",
            a32.len() - 1 - k
        );
    }
    let t64 = <f64 as Real>::SERIES_THRESHOLD;
    let t32 = <f32 as Real>::SERIES_THRESHOLD;
    assert!(
        header.contains(&format!("#define VPM_SERIES_RHO_F64 {t64:.1}\n")),
        "f64 threshold ρ < {t64}"
    );
    assert!(
        header.contains(&format!("#define VPM_SERIES_RHO_F32 {t32:.1}f\n")),
        "f32 threshold ρ < {t32}"
    );
}
