//! The GPU-resident leapfrog (src/gravity/resident.rs, kernels/nbody.cu; forces by the device
//! forms of the GPU all pairs and the GPU FMM) against the host leapfrog: bit for bit with the
//! same GPU force evaluator, to the f32 of the forces against the f64 CPU one; bit-identical
//! reruns; a failed step keeps the state; the Plummer test at N = 16 384; a 10^6-body FMM
//! step. Every test skips with a printed reason without a GPU.

use std::time::Instant;
use vpm::device::buffer::DeviceBuffer;
use vpm::device::Device;
use vpm::gravity::bodies::{BodySet, Component};
use vpm::gravity::diagnostics::{diagnostics, GravityDiagnostics};
use vpm::gravity::host::HostLeapfrog;
use vpm::gravity::initial::plummer;
use vpm::gravity::planner;
use vpm::gravity::resident::ResidentLeapfrog;
use vpm::gravity::stepper::BodyStepper;
use vpm::gravity::GravityError;
use vpm::summation::direct::CudaDirectGravity;
use vpm::summation::interaction::{Bodies, GravityEvaluation, GravitySummation, PlummerGravity};
use vpm::summation::planner::{plan_gravity, EvaluatorOptions};
use vpm::summation::verify::{self, gpu_or_skip, rel_l2};
use vpm::summation::EvaluatorKind;

/// Both force methods.
const METHODS: [EvaluatorKind; 2] = [EvaluatorKind::Direct, EvaluatorKind::Fmm];

/// The committed seed of the Plummer sets (tests/nbody.rs's).
const SEED: u64 = 2027;

/// Δt of the short runs (Hénon units).
const DT: f64 = 1.0 / 128.0;

/// The FMM at 1e-4, its built-in check at the first evaluation only.
fn options() -> EvaluatorOptions {
    EvaluatorOptions {
        accuracy: 1e-4,
        check_every: 0,
    }
}

fn gravity(eps: f64) -> PlummerGravity {
    PlummerGravity::new(eps).unwrap()
}

/// The GPU-resident leapfrog over `bodies`.
fn resident(device: &Device, method: EvaluatorKind, eps: f64, bodies: BodySet) -> ResidentLeapfrog {
    let gpu = device.gpu().unwrap().clone();
    ResidentLeapfrog::new(gpu, method, gravity(eps), &options(), bodies).unwrap()
}

/// The host leapfrog over `bodies` with the evaluator of `method` on `device`.
fn host(device: &Device, method: EvaluatorKind, eps: f64, bodies: BodySet) -> HostLeapfrog {
    let summation = plan_gravity(method, device, gravity(eps), options()).unwrap();
    HostLeapfrog::new(summation, bodies).unwrap()
}

fn steps(s: &mut dyn BodyStepper, n: usize, dt: f64) {
    for k in 0..n {
        s.step(dt)
            .unwrap_or_else(|e| panic!("step {k} of {}: {e}", s.describe()));
    }
}

/// The diagnostics of the stepper's state.
fn diag(s: &mut dyn BodyStepper) -> GravityDiagnostics {
    let b = s.bodies().unwrap();
    let p = s.potentials().unwrap();
    diagnostics(&b, &p, s.softening())
}

/// The state a checkpoint would hold: the bodies and the potentials.
fn state(s: &mut dyn BodyStepper) -> (BodySet, Vec<f64>) {
    (s.bodies().unwrap(), s.potentials().unwrap())
}

/// Whether two states are the same bit for bit (−0 ≠ +0, NaN = NaN of the same bits).
fn same_bits(a: &(BodySet, Vec<f64>), b: &(BodySet, Vec<f64>)) -> bool {
    let bits = |s: &(BodySet, Vec<f64>)| -> Vec<u64> {
        let b = &s.0;
        (b.x.iter().flatten())
            .chain(b.v.iter().flatten())
            .chain(&b.mass)
            .chain(&s.1)
            .map(|v| v.to_bits())
            .collect()
    };
    bits(a) == bits(b) && a.0.component == b.0.component && a.0.galaxy == b.0.galaxy
}

/// The device form of the GPU all pairs (`grav_pack`, the tile kernels, `grav_unpack`) gives the
/// host form's φ and a bit for bit: 1000 bodies (not a whole number of 128-body tiles: the
/// padding packed on the device), ε = 0.01 (`grav_softened`) and ε = 0 (`grav_newton`, the self
/// pairs skipped); an engine that evaluated a larger set before (buffers larger than needed)
/// gives the same.
#[test]
fn all_pairs_device_form_equals_the_host_form() {
    let Some(gpu) = gpu_or_skip() else { return };
    let s = gpu.stream().clone();
    let n = 1000;
    let x = verify::random_points(n, 27);
    let mass: Vec<f64> = (0..n).map(|i| (1.0 + (i % 7) as f64) / n as f64).collect();
    let bodies = Bodies { x: &x, mass: &mass };
    let (mut dx, mut dm) = (DeviceBuffer::new(), DeviceBuffer::new());
    dx.upload(&s, x.as_flattened(), "positions").unwrap();
    dm.upload(&s, &mass, "masses").unwrap();
    for eps in [0.01, 0.0] {
        let mut e = CudaDirectGravity::new(gpu.clone(), gravity(eps)).unwrap();
        let big = verify::random_points(3000, 5);
        let big_mass = vec![1.0 / 3000.0; 3000];
        let big_bodies = Bodies {
            x: &big,
            mass: &big_mass,
        };
        e.evaluate_gravity(&big_bodies, None, &mut GravityEvaluation::default())
            .unwrap();
        let mut host = GravityEvaluation::default();
        e.evaluate_gravity(&bodies, None, &mut host).unwrap();
        let (mut phi, mut acc) = (DeviceBuffer::new(), DeviceBuffer::new());
        for round in 0..2 {
            e.evaluate_resident(&dx, &dm, n, &mut phi, &mut acc)
                .unwrap();
            let mut p = vec![0.0; n];
            let mut a = vec![0.0; 3 * n];
            phi.download(&gpu, &mut p, "potentials").unwrap();
            acc.download(&gpu, &mut a, "accelerations").unwrap();
            let bits = |v: &[f64]| v.iter().map(|c| c.to_bits()).collect::<Vec<u64>>();
            assert_eq!(
                bits(&p),
                bits(&host.potential),
                "ε = {eps}, round {round}: φ"
            );
            assert_eq!(
                bits(&a),
                bits(host.acceleration.as_flattened()),
                "ε = {eps}, round {round}: a"
            );
        }
    }
}

/// The resident leapfrog against the host leapfrog over 20 steps of 1/128 on a Plummer sphere
/// of 4096 bodies (ε = 0.01), for both methods: (1) with the same GPU evaluator in its host form
/// the two steppers give the same bodies and potentials bit for bit (the device packing and the
/// update round as the host does); (2) against the f64 CPU all-pairs leapfrog the positions
/// agree to 1e-5 (relative L2) and the energy error is of the same order (the f32 forces: ~1e-7
/// relative for all pairs; the FMM at 1e-4). Also: the planner builds the resident stepper on a
/// GPU.
#[test]
fn resident_leapfrog_matches_the_host_leapfrog() {
    let Some(gpu) = gpu_or_skip() else { return };
    let device = Device::Cuda(gpu);
    let (n, eps, count) = (4096, 0.01, 20);
    let b = plummer(n, SEED).unwrap();
    let mut reference = host(&Device::Cpu, EvaluatorKind::Direct, eps, b.clone());
    let r0 = diag(&mut reference);
    steps(&mut reference, count, DT);
    let r1 = diag(&mut reference);
    let want = reference.bodies().unwrap();
    let de_ref = (r1.energy / r0.energy - 1.0).abs();
    for method in METHODS {
        let mut gpu_host = host(&device, method, eps, b.clone());
        let mut s = resident(&device, method, eps, b.clone());
        assert!(s.describe().contains("GPU-resident"), "{}", s.describe());
        assert_eq!((s.len(), s.softening()), (n, eps));
        let d0 = diag(&mut s);
        steps(&mut s, count, DT);
        steps(&mut gpu_host, count, DT);
        let d1 = diag(&mut s);
        let (got, same) = (state(&mut s), state(&mut gpu_host));
        let dx = rel_l2(&got.0.x, &same.0.x);
        assert!(
            same_bits(&got, &same),
            "{method}: resident and host leapfrog with the same GPU evaluator differ (positions \
             by {dx:e} relative L2)"
        );
        let dx = rel_l2(&got.0.x, &want.x);
        let dv = rel_l2(&got.0.v, &want.v);
        let de = (d1.energy / d0.energy - 1.0).abs();
        let e0 = (d0.energy / r0.energy - 1.0).abs();
        let (floor, e0_bound) = match method {
            EvaluatorKind::Direct => (2e-6, 1e-5),
            _ => (2e-5, 1e-4),
        };
        eprintln!(
            "{method}: positions {dx:.2e}, velocities {dv:.2e} relative L2 from the f64 \
             leapfrog; |ΔE/E| {de:.2e} (f64: {de_ref:.2e}); E(0) off by {e0:.2e}; {}",
            s.describe()
        );
        assert!(dx <= 1e-5, "{method}: positions differ by {dx:e}");
        assert!(
            de <= 3.0 * de_ref + floor,
            "{method}: |ΔE/E| {de:e} vs {de_ref:e}"
        );
        assert!(e0 <= e0_bound, "{method}: E(0) differs by {e0:e}");
        let planned = planner::stepper(b.clone(), &device, method, gravity(eps), &options());
        assert!(planned.unwrap().describe().contains("GPU-resident"));
    }
}

/// Two runs of 10 steps from the same bodies are bit-identical (positions, velocities,
/// potentials), for both methods; so is a run restored by `set_bodies` on a stepper that has
/// stepped before.
#[test]
fn resident_leapfrog_reruns_are_bit_identical() {
    let Some(gpu) = gpu_or_skip() else { return };
    let device = Device::Cuda(gpu);
    let b = plummer(4096, SEED).unwrap();
    for method in METHODS {
        let mut a = resident(&device, method, 0.01, b.clone());
        steps(&mut a, 10, DT);
        let first = state(&mut a);
        let mut c = resident(&device, method, 0.01, b.clone());
        steps(&mut c, 10, DT);
        assert!(
            same_bits(&first, &state(&mut c)),
            "{method}: two runs differ"
        );
        a.set_bodies(b.clone()).unwrap();
        steps(&mut a, 10, DT);
        assert!(
            same_bits(&first, &state(&mut a)),
            "{method}: a restored run differs"
        );
        let t = a.take_timings();
        let names: Vec<&str> = t.iter().map(|p| p.0).collect();
        assert_eq!(names, ["gravity forces", "gravity update"]);
        assert!(t.iter().all(|p| p.1 > 0.0), "{t:?}");
    }
}

/// A step that makes a position or velocity non-finite (Δt = 1e300, Δt = NaN) is refused as
/// `NonFinite` and leaves the bodies and potentials as they were, bit for bit; the next good
/// step gives what a stepper that never failed gives. New bodies with a NaN are refused and
/// change nothing.
#[test]
fn a_failed_step_leaves_the_state_unchanged() {
    let Some(gpu) = gpu_or_skip() else { return };
    let device = Device::Cuda(gpu);
    let b = plummer(1024, SEED).unwrap();
    for method in METHODS {
        let mut s = resident(&device, method, 0.01, b.clone());
        let mut clean = resident(&device, method, 0.01, b.clone());
        steps(&mut s, 2, DT);
        steps(&mut clean, 2, DT);
        let before = state(&mut s);
        for dt in [1e300, f64::NAN, f64::INFINITY] {
            match s.step(dt) {
                Err(GravityError::NonFinite(m)) => assert!(m.contains("non-finite"), "{m}"),
                other => panic!("{method}: Δt = {dt} gave {other:?}"),
            }
            assert!(
                same_bits(&before, &state(&mut s)),
                "{method}: Δt = {dt} changed the state"
            );
        }
        let mut bad = b.clone();
        bad.v[7][1] = f64::NAN;
        let e = s.set_bodies(bad).unwrap_err().to_string();
        assert!(e.contains("body 7: velocity"), "{e}");
        assert!(
            same_bits(&before, &state(&mut s)),
            "{method}: bad bodies changed the state"
        );
        steps(&mut s, 1, DT);
        steps(&mut clean, 1, DT);
        assert!(
            same_bits(&state(&mut clean), &state(&mut s)),
            "{method}: after a failure"
        );
    }
}

/// At ε = 0, coincident bodies are refused by name, in f64 and once rounded to the f32 of the
/// force sums, both when the stepper is made and by `set_bodies` (which keeps the old bodies).
#[test]
fn coincident_bodies_without_softening_are_refused() {
    let Some(gpu) = gpu_or_skip() else { return };
    let device = Device::Cuda(gpu.clone());
    let three = |x2: [f64; 3]| {
        let mut b = BodySet::default();
        b.push(1.0, [1.0, 0.0, 0.0], [0.0, 0.5, 0.0], Component::Body, 0);
        b.push(1.0, [-1.0, 0.0, 0.0], [0.0, -0.5, 0.0], Component::Body, 0);
        b.push(1e-3, x2, [0.0; 3], Component::Body, 0);
        b
    };
    let good = three([0.0, 3.0, 0.0]);
    for method in METHODS {
        let made = ResidentLeapfrog::new(
            gpu.clone(),
            method,
            gravity(0.0),
            &options(),
            three([1.0, 0.0, 0.0]),
        );
        let e = made.err().expect("coincident bodies accepted").to_string();
        assert!(e.contains("bodies 0 and 2"), "{e}");
        let mut s = resident(&device, method, 0.0, good.clone());
        steps(&mut s, 3, 1e-3);
        let before = state(&mut s);
        let e = s
            .set_bodies(three([1.0 + 1e-12, 0.0, 0.0]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("in f32") && e.contains("bodies 0 and 2"), "{e}");
        assert!(
            same_bits(&before, &state(&mut s)),
            "{method}: refused bodies changed the state"
        );
        steps(&mut s, 1, 1e-3);
    }
}

/// The GPU Plummer test (issue 27; tests/nbody.rs `plummer_16384_full_size` is its CPU
/// mirror): N = 16 384 from the committed seed, ε = 0.01, all pairs on the GPU (f32 forces, f64
/// bodies), t ≤ 10 at Δt = 1/128 and 1/64, diagnostics every 1/8: max |ΔE/E| < 2e-5 at 1/128 and
/// at least 4× smaller than at 1/64, 2K/|W| within [0.99, 1.01] after t = 0, r50 within 2 % and
/// r10, r90 within 4 % of their t = 0 values. 1920 steps of 2.7e8 pairs: a few seconds on an
/// H100.
#[test]
fn plummer_16384_in_equilibrium_on_the_gpu() {
    let Some(gpu) = gpu_or_skip() else { return };
    let device = Device::Cuda(gpu);
    let b = plummer(16_384, SEED).unwrap();
    let run = |dt: f64, count: usize, every: usize| {
        let mut s = resident(&device, EvaluatorKind::Direct, 0.01, b.clone());
        let mut d = vec![diag(&mut s)];
        let t = Instant::now();
        for k in 1..=count {
            s.step(dt).unwrap();
            if k % every == 0 {
                d.push(diag(&mut s));
            }
        }
        eprintln!(
            "Δt = {dt}: {count} steps in {:.2} s ({})",
            t.elapsed().as_secs_f64(),
            s.describe()
        );
        d
    };
    let max_de = |d: &[GravityDiagnostics]| {
        let e0 = d[0].energy;
        d.iter()
            .map(|x| (x.energy / e0 - 1.0).abs())
            .fold(0.0, f64::max)
    };
    let coarse = run(1.0 / 64.0, 640, 8);
    let d = run(1.0 / 128.0, 1280, 16);
    let (e, e_coarse) = (max_de(&d), max_de(&coarse));
    let r0 = d[0].lagrangian_radii;
    let (qmin, qmax) = d[1..].iter().fold((f64::MAX, f64::MIN), |(a, b), x| {
        (a.min(x.virial_ratio), b.max(x.virial_ratio))
    });
    let drift: [f64; 3] = std::array::from_fn(|k| {
        d.iter()
            .map(|x| (x.lagrangian_radii[k] / r0[k] - 1.0).abs())
            .fold(0.0, f64::max)
    });
    eprintln!(
        "plummer 16384 (GPU): max|ΔE/E| {e:.3e} (1/128), {e_coarse:.3e} (1/64); 2K/|W| in \
         [{qmin:.4}, {qmax:.4}] after t = 0 ({:.4} at t = 0); radii {r0:.4?} drifting {drift:.4?}",
        d[0].virial_ratio
    );
    assert!(e < 2e-5, "max |ΔE/E| = {e:e} at Δt = 1/128");
    assert!(
        e_coarse >= 4.0 * e,
        "order: {e_coarse:e} at 1/64, {e:e} at 1/128"
    );
    assert!(qmin >= 0.99 && qmax <= 1.01, "2K/|W| in [{qmin}, {qmax}]");
    for (k, bound) in [0.04, 0.02, 0.04].into_iter().enumerate() {
        assert!(drift[k] <= bound, "radius {k} drifted {}", drift[k]);
    }
}

/// A smoke test at the GPU companion's size: 10^6 Plummer bodies, FMM at 1e-4 (its built-in
/// check at the first evaluation), three resident steps; prints the times.
#[test]
fn million_body_fmm_steps() {
    let Some(gpu) = gpu_or_skip() else { return };
    let n = 1_000_000;
    let b = plummer(n, SEED).unwrap();
    let t = Instant::now();
    let mut s =
        ResidentLeapfrog::new(gpu, EvaluatorKind::Fmm, gravity(0.01), &options(), b).unwrap();
    let made = t.elapsed().as_secs_f64();
    let mut each = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        s.step(DT).unwrap();
        each.push(t.elapsed().as_secs_f64());
    }
    let checks = s.take_accuracy_checks();
    eprintln!(
        "10^6 bodies, FMM: made (upload + first evaluation + its check) in {made:.2} s; steps \
         {each:.3?} s; timings {:?}; checks {checks:?}; {}",
        s.take_timings(),
        s.describe()
    );
    assert_eq!(checks.len(), 1);
    let bodies = s.bodies().unwrap();
    assert!(bodies
        .x
        .iter()
        .chain(&bodies.v)
        .flatten()
        .all(|c| c.is_finite()));
    assert!(each.iter().all(|&t| t < 30.0), "{each:?}");
}
