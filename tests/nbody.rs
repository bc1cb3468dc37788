//! Gravitational N-body on the CPU (issue 27, docs/physics.md §11): the host kick–drift–kick
//! leapfrog with all pairs and with the FMM, on the named initial conditions (Kepler pair,
//! Plummer sphere, cold collapse) and the diagnostics of §11.4. CI-sized; the full Plummer test
//! (N = 16 384) is `#[ignore]`d (see `plummer_16384_full_size`).

use vpm::device::Device;
use vpm::gravity::bodies::BodySet;
use vpm::gravity::diagnostics::{diagnostics, GravityDiagnostics};
use vpm::gravity::host::HostLeapfrog;
use vpm::gravity::initial::{cold_collapse, kepler, plummer, KeplerOrbit};
use vpm::gravity::stepper::BodyStepper;
use vpm::summation::interaction::{Bodies, GravityEvaluation, PlummerGravity};
use vpm::summation::planner::plan_gravity;
use vpm::summation::verify::{on_threads, ErrorStats};
use vpm::summation::EvaluatorKind;

/// The FMM accuracy and the planner option of every stepper here.
const ACCURACY: f64 = 1e-4;

/// The committed seed of the Plummer sets.
const SEED: u64 = 2027;

/// The leapfrog over `bodies` with forces by `kind` on the CPU, softening `eps`.
fn leapfrog(bodies: BodySet, kind: EvaluatorKind, eps: f64) -> HostLeapfrog {
    let summation = plan_gravity(
        kind,
        &Device::Cpu,
        PlummerGravity::new(eps).unwrap(),
        ACCURACY,
    )
    .unwrap();
    HostLeapfrog::new(summation, bodies).unwrap()
}

/// The diagnostics of the stepper's current state.
fn diag(s: &mut HostLeapfrog) -> GravityDiagnostics {
    let b = s.bodies().unwrap();
    let p = s.potentials().unwrap();
    diagnostics(&b, &p, s.softening())
}

/// The diagnostics at t = 0 and after every `every` steps of `dt`, `steps` steps in all.
fn run(s: &mut HostLeapfrog, dt: f64, steps: usize, every: usize) -> Vec<GravityDiagnostics> {
    let mut out = vec![diag(s)];
    for k in 1..=steps {
        s.step(dt).unwrap();
        if k % every == 0 {
            out.push(diag(s));
        }
    }
    out
}

/// max |E(t)/E(0) − 1| over `d`.
fn max_energy_error(d: &[GravityDiagnostics]) -> f64 {
    let e0 = d[0].energy;
    d.iter()
        .map(|x| (x.energy / e0 - 1.0).abs())
        .fold(0.0, f64::max)
}

fn norm(v: [f64; 3]) -> f64 {
    (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
}

/// The Kepler pair of the `kepler` case: masses 0.6 and 0.4, a = 1, e = 0.5 (P = 2π).
const ORBIT: KeplerOrbit = KeplerOrbit {
    masses: [0.6, 0.4],
    semi_major_axis: 1.0,
    eccentricity: 0.5,
};

/// One Kepler run of `orbits` periods at `steps_per_orbit` steps: the relative energy error after
/// every step and the pericentre times (the separation's minima, refined by a parabola through
/// the three samples about each).
fn kepler_run(steps_per_orbit: usize, orbits: usize) -> (Vec<f64>, Vec<f64>) {
    let p = ORBIT.period();
    let dt = p / steps_per_orbit as f64;
    let mut s = leapfrog(kepler(&ORBIT).unwrap(), EvaluatorKind::Direct, 0.0);
    let e0 = diag(&mut s).energy;
    assert!((e0 / ORBIT.energy() - 1.0).abs() < 1e-14, "{e0}");
    let separation = |s: &mut HostLeapfrog| {
        let b = s.bodies().unwrap();
        norm(std::array::from_fn(|k| b.x[0][k] - b.x[1][k]))
    };
    let mut errors = Vec::new();
    let mut r = vec![separation(&mut s)];
    for _ in 0..steps_per_orbit * orbits {
        s.step(dt).unwrap();
        errors.push((diag(&mut s).energy / e0 - 1.0).abs());
        r.push(separation(&mut s));
    }
    let mut pericentres = Vec::new();
    for k in 1..r.len() - 1 {
        if r[k] < r[k - 1] && r[k] <= r[k + 1] {
            let (a, b, c) = (r[k - 1], r[k], r[k + 1]);
            let shift = 0.5 * (a - c) / (a - 2.0 * b + c);
            pericentres.push((k as f64 + shift) * dt);
        }
    }
    (errors, pericentres)
}

/// Kepler, e = 0.5, ε = 0, 10 orbits at Δt = P/1000 (issue 27): max |ΔE/E| ≤ 2e-4, no drift
/// (the largest error over orbits 9–10 within 10 % of that over orbits 1–2), the error falling
/// 4× ± 15 % from Δt = P/1000 to P/2000, and the period from the pericentre passages within
/// 3e-4 of 2π (a³/M)^{1/2}.
///
/// Measured: max |ΔE/E| = 1.073e-4 at P/1000 and 2.682e-5 at P/2000 (ratio 4.000), orbits 9–10
/// against 1–2: 1.0000 (the error repeats each orbit, peaking at pericentre); period from 9
/// pericentres: +1.55e-4 (the leapfrog's O(Δt²) phase error). Takes about 0.1 s.
#[test]
fn kepler_energy_order_and_period() {
    let orbits = 10;
    let (errors, pericentres) = kepler_run(1000, orbits);
    let max = errors.iter().fold(0.0, |a: f64, &b| a.max(b));
    let early = errors[..2000].iter().fold(0.0, |a: f64, &b| a.max(b));
    let late = errors[8000..].iter().fold(0.0, |a: f64, &b| a.max(b));
    let (fine, _) = kepler_run(2000, orbits);
    let max_fine = fine.iter().fold(0.0, |a: f64, &b| a.max(b));
    let measured =
        (pericentres[pericentres.len() - 1] - pericentres[0]) / (pericentres.len() - 1) as f64;
    let period_error = measured / ORBIT.period() - 1.0;
    eprintln!(
        "kepler: max|ΔE/E| {max:.3e} (P/1000), {max_fine:.3e} (P/2000), ratio {:.3}; orbits \
         9–10 / 1–2: {:.4}; {} pericentres, period error {period_error:.2e}",
        max / max_fine,
        late / early,
        pericentres.len()
    );
    assert!(max <= 2e-4, "max |ΔE/E| = {max:e}");
    assert!(
        (late / early - 1.0).abs() <= 0.1,
        "drift: {late:e} vs {early:e}"
    );
    assert!(
        (max / max_fine - 4.0).abs() <= 0.6,
        "order: {max:e} / {max_fine:e}"
    );
    assert_eq!(
        pericentres.len(),
        orbits - 1,
        "one pericentre at each whole period inside the run"
    );
    assert!(period_error.abs() <= 3e-4, "period error {period_error:e}");
}

/// The Plummer sphere of `n` bodies from the committed seed.
fn plummer_set(n: usize) -> BodySet {
    plummer(n, SEED).unwrap()
}

/// The initial Plummer sphere: unit mass, centre of mass at rest at the origin, energy near the
/// Hénon −1/4 and Lagrangian radii near the analytic 0.309 / 0.769 / 2.184.
///
/// Tolerances: four standard deviations of the sampling noise at N = 2048 (the enclosed mass
/// fraction f has σ = (f(1 − f)/N)^{1/2}, divided by dM/dr at r_f): 11 %, 8 %, 14.5 %.
/// Measured from the committed seed: 0.3099 / 0.7549 / 2.0438 (+0.3 %, −1.8 %, −6.4 %: 0.1, 0.9
/// and 1.8 σ), E = −0.2509 (ε = 0.01), 2K/|W| = 1.0147.
#[test]
fn plummer_initial_conditions() {
    let n = 2048;
    let b = plummer_set(n);
    assert_eq!(b.len(), n);
    assert!((b.total_mass() - 1.0).abs() < 1e-12);
    let (x, v) = b.centre_of_mass();
    assert!(norm(x) < 1e-15 && norm(v) < 1e-15, "{x:?} {v:?}");
    let mut s = leapfrog(b, EvaluatorKind::Direct, 0.01);
    let d = diag(&mut s);
    let analytic = [0.309, 0.769, 2.184];
    let tolerance = [0.11, 0.08, 0.145];
    eprintln!(
        "plummer N = {n}: Lagrangian radii {:?}, E = {:.4}, 2K/|W| = {:.4}",
        d.lagrangian_radii, d.energy, d.virial_ratio
    );
    for k in 0..3 {
        let rel = d.lagrangian_radii[k] / analytic[k] - 1.0;
        assert!(rel.abs() <= tolerance[k], "r[{k}] {rel:+.3}");
    }
    assert!((d.energy + 0.25).abs() < 0.02, "E = {}", d.energy);
    assert!(
        (d.virial_ratio - 1.0).abs() < 0.06,
        "2K/|W| = {}",
        d.virial_ratio
    );
    assert!(plummer(1, 1).is_err());
}

/// A Plummer sphere of N = 2048 in equilibrium, all pairs, ε = 0.01, Δt = 1/128, t ≤ 8 (2.8
/// crossing times; t_rh ≈ 37 at this N). The bounds are twice the values measured from the
/// committed seed (issue 27; the N = 16 384 numbers do not hold at this N): max |ΔE/E| 2.14e-4
/// (7.2e-5 up to t = 4: at this N the error is set by close encounters at ε = 0.01 and grows as
/// a random walk), 2K/|W| between 0.9728 and 1.0250 (max |Q − 1| = 0.0272: the sample starts at
/// Q = 1.015 and oscillates), Lagrangian radii departing at most 9.4 % (r10), 8.9 % (r50), 8.0 %
/// (r90) from t = 0 (the virial oscillation of a 2048-body sample: r50 0.755 → 0.819 → 0.744).
/// Takes about 6 s on 2 cores.
#[test]
fn plummer_equilibrium_all_pairs() {
    let mut s = leapfrog(plummer_set(2048), EvaluatorKind::Direct, 0.01);
    let d = run(&mut s, 1.0 / 128.0, 1024, 8);
    let e = max_energy_error(&d);
    let q = d
        .iter()
        .map(|x| (x.virial_ratio - 1.0).abs())
        .fold(0.0, f64::max);
    let (qmin, qmax) = d.iter().fold((f64::MAX, f64::MIN), |(a, b), x| {
        (a.min(x.virial_ratio), b.max(x.virial_ratio))
    });
    let r0 = d[0].lagrangian_radii;
    let drift: [f64; 3] = std::array::from_fn(|k| {
        d.iter()
            .map(|x| (x.lagrangian_radii[k] / r0[k] - 1.0).abs())
            .fold(0.0, f64::max)
    });
    eprintln!(
        "plummer 2048: max|ΔE/E| {e:.3e}, 2K/|W| in [{qmin:.4}, {qmax:.4}], radii drift \
         {drift:.4?}"
    );
    assert!(e <= 2.0 * 2.14e-4, "max |ΔE/E| = {e:e}");
    assert!(q <= 2.0 * 0.0272, "max |2K/|W| − 1| = {q}");
    for (k, bound) in [0.094, 0.089, 0.080].into_iter().enumerate() {
        assert!(drift[k] <= 2.0 * bound, "radius {k} drifted {}", drift[k]);
    }
}

/// Linear momentum with all pairs (f_ij = −f_ji): a cold collapse of N = 1024 (violent: the
/// accelerations grow as it falls in), ε = 0.01, 160 steps of 1/128 (t = 1.25, past the
/// collapse at t ≈ 1.1), |P(t) − P(0)| against Σ m|v| at t = 0 at each output. Round-off: measured
/// 4.0e-16 at most; bound 1e-14. Also the initial conditions: 2K/|W| = 0.1 against the analytic
/// W exactly, 0.1013 against the sampled softened W.
#[test]
fn momentum_is_conserved_by_all_pairs() {
    let n = 1024;
    let b = cold_collapse(n, 0.1, SEED).unwrap();
    // 2K = 0.1 |W_analytic| = 0.06 exactly, the centre of mass at rest at the origin.
    let k: f64 = (0..n)
        .map(|i| 0.5 * b.mass[i] * b.v[i].iter().map(|c| c * c).sum::<f64>())
        .sum();
    assert!((2.0 * k / 0.6 - 0.1).abs() < 1e-14, "{k}");
    assert!(b.x.iter().all(|x| norm(*x) <= 1.05));
    // The scale of round-off: Σ m|v| at t = 0 (the smallest of the run: the sphere starts cold).
    let scale: f64 = (0..n).map(|i| b.mass[i] * norm(b.v[i])).sum();
    let mut s = leapfrog(b, EvaluatorKind::Direct, 0.01);
    let d = run(&mut s, 1.0 / 128.0, 160, 16);
    let p0 = d[0].momentum;
    let worst = d
        .iter()
        .map(|x| norm(std::array::from_fn(|k| x.momentum[k] - p0[k])) / scale)
        .fold(0.0, f64::max);
    eprintln!(
        "cold collapse: initial 2K/|W| {:.4}, max |ΔP|/Σm|v| {worst:.2e}, Σm|v| {scale:.3}",
        d[0].virial_ratio
    );
    assert!(worst <= 1e-14, "momentum error {worst:e}");
    // The sampled W differs from −3/5 by noise and the softening: within 3 %.
    assert!(
        (d[0].virial_ratio - 0.1).abs() < 0.003,
        "{}",
        d[0].virial_ratio
    );
    assert!(cold_collapse(n, 1.0, 1).is_err() && cold_collapse(n, -0.1, 1).is_err());
}

/// The FMM's forces in the leapfrog against all pairs on a Plummer set of N = 2048 (ε = 0.01):
/// relative L2 of the accelerations ≤ the requested 1e-4, and a short FMM leapfrog run
/// (t ≤ 1, Δt = 1/128) whose energy error stays comparable to all pairs' (the FMM's force error
/// is not symplectic: its energy error may drift slightly). Measured: acceleration error
/// 3.0e-6 (potential 2.0e-7); max |ΔE/E| 3.08e-5 for both over t ≤ 1. Bound: 2× all pairs'
/// + 1e-5.
#[test]
fn fmm_forces_agree_with_all_pairs_in_the_leapfrog() {
    let b = plummer_set(2048);
    let evaluation = |kind| -> GravityEvaluation {
        let mut g = plan_gravity(
            kind,
            &Device::Cpu,
            PlummerGravity::new(0.01).unwrap(),
            ACCURACY,
        )
        .unwrap();
        let mut out = GravityEvaluation::default();
        g.evaluate_gravity(
            &Bodies {
                x: &b.x,
                mass: &b.mass,
            },
            None,
            &mut out,
        )
        .unwrap();
        out
    };
    let (direct, fmm) = (
        evaluation(EvaluatorKind::Direct),
        evaluation(EvaluatorKind::Fmm),
    );
    let wrap = |v: &[f64]| v.iter().map(|&p| [p]).collect::<Vec<[f64; 1]>>();
    let a = ErrorStats::of(&fmm.acceleration, &direct.acceleration);
    let phi = ErrorStats::of(&wrap(&fmm.potential), &wrap(&direct.potential));
    let mut sd = leapfrog(b.clone(), EvaluatorKind::Direct, 0.01);
    let mut sf = leapfrog(b, EvaluatorKind::Fmm, 0.01);
    let ed = max_energy_error(&run(&mut sd, 1.0 / 128.0, 128, 4));
    let ef = max_energy_error(&run(&mut sf, 1.0 / 128.0, 128, 4));
    eprintln!(
        "fmm vs all pairs: a rel L2 {:.2e}, φ rel L2 {:.2e}; max|ΔE/E| fmm {ef:.2e}, all pairs \
         {ed:.2e}",
        a.rel_l2, phi.rel_l2
    );
    assert!(a.rel_l2 <= ACCURACY, "accelerations {:e}", a.rel_l2);
    assert!(phi.rel_l2 <= ACCURACY, "potentials {:e}", phi.rel_l2);
    assert!(
        ef <= 2.0 * ed + 1e-5,
        "FMM energy error {ef:e} against {ed:e}"
    );
}

/// The same seed gives the same bodies, bit for bit, on 1 and 2 threads: the initial conditions
/// (drawn serially) and 16 leapfrog steps with all pairs and with the FMM (N = 512).
#[test]
fn same_seed_same_bodies_on_any_thread_count() {
    let go = || {
        let mut out = Vec::new();
        for kind in [EvaluatorKind::Direct, EvaluatorKind::Fmm] {
            let mut s = leapfrog(plummer(512, SEED).unwrap(), kind, 0.01);
            for _ in 0..16 {
                s.step(1.0 / 128.0).unwrap();
            }
            out.push(s.bodies().unwrap());
        }
        out.push(cold_collapse(512, 0.1, SEED).unwrap());
        out
    };
    let one = on_threads(1, go);
    let two = on_threads(2, go);
    assert!(one == two, "bodies differ between 1 and 2 threads");
    assert!(plummer(512, SEED).unwrap() != plummer(512, SEED + 1).unwrap());
}

/// The Kepler pair's initial conditions: pericentre on the x axis, centre of mass at rest at
/// the origin, energy −m1 m2/2a, and bad orbits refused.
#[test]
fn kepler_initial_conditions() {
    let b = kepler(&ORBIT).unwrap();
    let (x, v) = b.centre_of_mass();
    assert!(norm(x) < 1e-16 && norm(v) < 1e-16);
    assert!((b.x[0][0] - b.x[1][0] - 0.5).abs() < 1e-15);
    let bad = |m: f64, a: f64, e: f64| KeplerOrbit {
        masses: [m, 1.0],
        semi_major_axis: a,
        eccentricity: e,
    };
    for orbit in [bad(-1.0, 1.0, 0.5), bad(1.0, 0.0, 0.5), bad(1.0, 1.0, 1.0)] {
        assert!(kepler(&orbit).is_err(), "{orbit:?}");
    }
}

/// The full-size Plummer test of issue 27 (the CPU mirror of the GPU test in tests/gpu_nbody.rs):
/// N = 16 384, ε = 0.01, all pairs, t ≤ 10 at Δt = 1/128 and 1/64: max |ΔE/E| < 2e-5 at 1/128 and
/// at least 4× smaller than at 1/64, 2K/|W| within [0.99, 1.01] after t = 0, r50 within 2 % and
/// r10, r90 within 4 % of their t = 0 values. 1920 steps of 2.7e8 pairs at 0.84 s a step
/// (measured, all pairs on 2 shared cores): about 27 minutes
/// (`cargo test --test nbody -- --ignored plummer_16384`; the test profile is optimised).
#[test]
#[ignore]
fn plummer_16384_full_size() {
    let b = plummer_set(16_384);
    let mut coarse = leapfrog(b.clone(), EvaluatorKind::Direct, 0.01);
    let e_coarse = max_energy_error(&run(&mut coarse, 1.0 / 64.0, 640, 8));
    let mut s = leapfrog(b, EvaluatorKind::Direct, 0.01);
    let d = run(&mut s, 1.0 / 128.0, 1280, 16);
    let e = max_energy_error(&d);
    let r0 = d[0].lagrangian_radii;
    eprintln!("plummer 16384: max|ΔE/E| {e:.3e} (1/128), {e_coarse:.3e} (1/64)");
    assert!(e < 2e-5 && e_coarse >= 4.0 * e, "{e:e} {e_coarse:e}");
    for x in &d[1..] {
        assert!(
            (0.99..=1.01).contains(&x.virial_ratio),
            "2K/|W| {}",
            x.virial_ratio
        );
        for (k, bound) in [0.04, 0.02, 0.04].into_iter().enumerate() {
            let rel = x.lagrangian_radii[k] / r0[k] - 1.0;
            assert!(rel.abs() <= bound, "radius {k}: {rel:+.4}");
        }
    }
}
