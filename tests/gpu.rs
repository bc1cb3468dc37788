//! GPU all-pairs kernels (kernels/biot_savart.cu) against the CPU f64 evaluator.
//!
//! The GPU tests print why and pass when no usable GPU is present (CPU-only CI stays green); on a
//! GPU machine they check, on fresh random particle sets: f32 velocity within 1e-5 and
//! stretching (both schemes) and gradient within 1e-4 relative L2 of CPU f64, the f64 build of
//! the same kernels within 1e-12, the blob vorticity, sizes that are not multiples of the tile,
//! targets different from the sources, small-ρ pairs down to coincident target and source,
//! unequal cores, and outputs fully written (the engine poisons them with NaN before each launch
//! and rejects any that remain). The planner and source checks run everywhere.
//!
//! Plummer gravity (kernels/gravity.cu over the same tile loop): f32 and the f64 build against an
//! f64 CPU loop over `PlummerGravity::pair`, with ε > 0 and ε = 0 (self pairs skipped), at the
//! bodies and at other points, sizes off the tile, several launch shapes, 2^18 bodies on a sample
//! of targets, coincident bodies refused at ε = 0, and `vpm bench direct --interaction gravity`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vpm::device::{Device, DeviceRequest};
use vpm::kernel::StretchingScheme;
use vpm::summation::direct::cuda_gravity::reference_gravity;
use vpm::summation::direct::{
    CudaDirect, CudaDirectGravity, CudaDirectGravityOf, CudaDirectOf, DirectFreeSpace, GpuReal,
    KernelConfig,
};
use vpm::summation::interaction::{Bodies, GravityEvaluation, GravitySummation, PlummerGravity};
use vpm::summation::planner::plan;
use vpm::summation::verify::ErrorStats;
use vpm::summation::verify::{self, gpu_or_skip, Particles};
use vpm::summation::EvaluatorKind;
use vpm::summation::{Boundary, Evaluation, Extra, Sources, Summation};

/// Particles uniform in [−π, π]^3 with cores jittered in [0.7, 1]·2π/n^{1/3} and strengths in
/// [−1, 1]; targets: every source position (coincident pairs), copies of sources moved by
/// 1e-4 … 1 core radii (small ρ), and `extra` uniform points.
struct Set {
    particles: Particles,
    targets: Vec<[f64; 3]>,
    target_alpha: Vec<[f64; 3]>,
}

impl Set {
    fn new(n: usize, extra: usize, seed: u64) -> Set {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let pi = std::f64::consts::PI;
        let s0 = std::f64::consts::TAU / (n as f64).cbrt();
        let mut x: Vec<[f64; 3]> = (0..n)
            .map(|_| std::array::from_fn(|_| rng.random_range(-pi..pi)))
            .collect();
        // A few sources almost on top of each other.
        for i in 1..n.min(6) {
            x[i] = [x[0][0] + 1e-3 * i as f64 * s0, x[0][1], x[0][2]];
        }
        let alpha: Vec<[f64; 3]> = (0..n)
            .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
            .collect();
        let sigma: Vec<f64> = (0..n).map(|_| s0 * rng.random_range(0.7..1.0)).collect();
        let mut targets = x.clone();
        for xq in x.iter().take(64) {
            let d = s0 * 10f64.powf(rng.random_range(-4.0..0.0));
            let u: [f64; 3] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
            let norm = (u[0] * u[0] + u[1] * u[1] + u[2] * u[2]).sqrt().max(1e-3);
            targets.push(std::array::from_fn(|c| xq[c] + d * u[c] / norm));
        }
        for _ in 0..extra {
            targets.push(std::array::from_fn(|_| rng.random_range(-pi..pi)));
        }
        let target_alpha = (0..targets.len())
            .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
            .collect();
        Set {
            particles: Particles { x, alpha, sigma },
            targets,
            target_alpha,
        }
    }

    fn sources(&self) -> Sources<'_> {
        self.particles.sources()
    }
}

/// Every evaluation of the GPU evaluator `gpu` against CPU f64 on `set`; returns the worst
/// relative L2 differences (velocity, stretching/gradient, vorticity).
fn compare<T: GpuReal>(gpu: &mut CudaDirectOf<T>, set: &Set) -> (f64, f64, f64) {
    let src = set.sources();
    let (u, x, _) = verify::compare_all_extras(
        gpu,
        &mut DirectFreeSpace,
        &src,
        &set.targets,
        &set.target_alpha,
    )
    .unwrap();
    let (mut wg, mut wc) = (Vec::new(), Vec::new());
    gpu.vorticity(&src, &set.targets, &mut wg).unwrap();
    DirectFreeSpace
        .vorticity(&src, &set.targets, &mut wc)
        .unwrap();
    assert!(verify::all_finite(&wg), "non-finite GPU vorticity");
    (u.rel_l2, x.rel_l2, verify::rel_l2(&wg, &wc))
}

/// [`compare`], printed and held to the f32 tolerances (velocity and vorticity 1e-5, stretching
/// and gradient 1e-4) or to `tol` for all three.
#[track_caller]
fn check<T: GpuReal>(gpu: &mut CudaDirectOf<T>, set: &Set, label: &str, tol: Option<f64>) {
    let (u, x, w) = compare(gpu, set);
    eprintln!("{label}: velocity {u:.2e}, stretching/gradient {x:.2e}, vorticity {w:.2e}");
    let (tu, tx) = tol.map_or((1e-5, 1e-4), |t| (t, t));
    assert!(
        u <= tu && x <= tx && w <= tu,
        "{label}: velocity {u:e}, stretching/gradient {x:e}, vorticity {w:e}"
    );
}

#[test]
fn gpu_f32_matches_cpu_f64_on_random_sets() {
    let Some(gpu0) = gpu_or_skip() else { return };
    let mut gpu = CudaDirect::new(gpu0.clone()).unwrap();
    // Sizes around and off the tile (256 sources, 512 targets per block by default).
    for (i, &(n, extra)) in [(1, 3), (31, 5), (257, 100), (1000, 333), (4099, 1)]
        .iter()
        .enumerate()
    {
        let set = Set::new(n, extra, 0x9e37 + i as u64);
        check(&mut gpu, &set, &format!("n = {n}"), None);
    }
}

/// Launch shapes from (block, targets per thread, unroll, minimum blocks per SM).
fn configs(shapes: &[(u32, u32, u32, u32)]) -> impl Iterator<Item = KernelConfig> + '_ {
    shapes
        .iter()
        .map(|&(block, tpt, unroll, min_blocks)| KernelConfig {
            block,
            targets_per_thread: tpt,
            unroll,
            min_blocks,
        })
}

#[test]
fn gpu_f32_launch_configurations_agree() {
    let Some(gpu0) = gpu_or_skip() else { return };
    let set = Set::new(3001, 77, 0xc0f1);
    for config in configs(&[
        (128, 1, 4, 0),
        (256, 4, 2, 2),
        (64, 3, 8, 0),
        (512, 1, 1, 0),
    ]) {
        let mut gpu = CudaDirect::with_config(gpu0.clone(), config).unwrap();
        check(&mut gpu, &set, &config.to_string(), None);
    }
}

#[test]
fn gpu_f32_large_n_on_a_sample_of_targets() {
    let Some(gpu0) = gpu_or_skip() else { return };
    // 2^18 equal-core sources (the benchmark's layout); 1500 sampled targets on the CPU.
    let n = 1 << 18;
    let p = Particles::free_space(n, 0x1a26e);
    let (x, alpha, src) = (&p.x, &p.alpha, p.sources());
    let m = 1500;
    let extra = Extra::Stretching {
        alpha: &alpha[..m],
        scheme: StretchingScheme::Classical,
    };
    let mut gpu = CudaDirect::new(gpu0.clone()).unwrap();
    let (mut g, mut c) = (Evaluation::default(), Evaluation::default());
    gpu.evaluate(&src, &x[..m], extra, &mut g).unwrap();
    DirectFreeSpace
        .evaluate(&src, &x[..m], extra, &mut c)
        .unwrap();
    let (u, s) = (
        verify::rel_l2(&g.velocity, &c.velocity),
        verify::rel_l2(&g.stretching, &c.stretching),
    );
    eprintln!("n = 2^18, {m} targets: velocity {u:.2e}, stretching {s:.2e}");
    assert!(u <= 1e-5, "velocity rel L2 {u:e}");
    assert!(s <= 1e-4, "stretching rel L2 {s:e}");
}

#[test]
fn gpu_f64_build_matches_cpu_f64() {
    let Some(gpu0) = gpu_or_skip() else { return };
    let mut gpu = CudaDirectOf::<f64>::new(gpu0.clone()).unwrap();
    for (i, &(n, extra)) in [(300, 41), (2050, 9)].iter().enumerate() {
        let set = Set::new(n, extra, 0xf64 + i as u64);
        check(&mut gpu, &set, &format!("f64 n = {n}"), Some(1e-12));
    }
}

#[test]
fn gpu_buffers_are_reused_across_sizes_and_edge_cases() {
    let Some(gpu0) = gpu_or_skip() else { return };
    let mut gpu = CudaDirect::new(gpu0.clone()).unwrap();
    // Shrinking and growing N on one evaluator (resident buffers larger than needed).
    for (i, n) in [2000, 10, 700, 2500].into_iter().enumerate() {
        let set = Set::new(n, 3, 0xb0f + i as u64);
        check(&mut gpu, &set, &format!("n = {n}"), None);
    }
    // No sources: exact zeros. No targets: empty outputs.
    let set = Set::new(50, 0, 7);
    let none = Sources {
        x: &[],
        alpha: &[],
        sigma: &[],
    };
    let mut out = Evaluation::default();
    gpu.evaluate(&none, &set.targets, Extra::Gradient, &mut out)
        .unwrap();
    assert!(out.velocity.iter().all(|v| *v == [0.0; 3]));
    assert!(out.gradient.iter().all(|g| *g == [[0.0; 3]; 3]));
    gpu.evaluate(&set.sources(), &[], Extra::None, &mut out)
        .unwrap();
    let mut w = vec![[1.0; 3]; 4];
    gpu.vorticity(&set.sources(), &[], &mut w).unwrap();
    assert!(w.is_empty());
    // A non-positive core radius is refused, not computed.
    let bad = Sources {
        x: &set.particles.x[..2],
        alpha: &set.particles.alpha[..2],
        sigma: &[0.1, 0.0],
    };
    let e = gpu
        .evaluate(&bad, &set.targets, Extra::None, &mut out)
        .unwrap_err();
    assert!(e.to_string().contains("core radius"), "{e}");
}

#[test]
fn planner_cuda_device_without_gpu_is_a_clear_error() {
    let cuda = Device::open(DeviceRequest::Cuda(None));
    match vpm::cuda::availability() {
        Ok(info) => {
            let (device, _) = cuda.unwrap_or_else(|e| panic!("GPU {info} present but: {e}"));
            let p = plan(Boundary::FreeSpace, EvaluatorKind::Direct, &device, 1e-6)
                .unwrap_or_else(|e| panic!("GPU {info} present but: {e}"));
            assert!(p.description.contains("CUDA"), "{}", p.description);
            assert!(p.description.contains("device cuda:0"), "{}", p.description);
        }
        Err(why) => {
            let m = cuda.expect_err("cuda without a GPU must fail").to_string();
            assert!(
                m.contains("device \"cuda\" asked for, but no usable CUDA GPU: "),
                "{m}"
            );
            assert!(m.contains(&why.to_string()), "{m}");
            // auto falls back to the CPU and says why.
            let (device, note) = Device::open(DeviceRequest::Auto).unwrap();
            assert_eq!(device.label(), "cpu");
            assert!(note.contains("auto: cpu, no usable GPU"), "{note}");
        }
    }
    // The periodic box (GPU Ewald) is checked in tests/gpu_ewald.rs; `cpu` never asks for a GPU.
    let periodic = Boundary::Periodic {
        length: std::f64::consts::TAU,
    };
    let p = plan(periodic, EvaluatorKind::Ewald, &Device::Cpu, 1e-6).unwrap();
    assert!(p.description.contains("device cpu"), "{}", p.description);
}

/// The device form (particles on the GPU, no host copies) runs the host form's kernels on the
/// same packed values: bit-identical results, f32 and f64 builds, every mode.
#[test]
fn gpu_device_form_is_bit_identical_to_host_form() {
    let Some(gpu0) = gpu_or_skip() else { return };
    let p = Particles::free_space(3001, 0xde7);
    let mut f32_gpu = CudaDirect::new(gpu0.clone()).unwrap();
    let mut f64_gpu = CudaDirectOf::<f64>::new(gpu0.clone()).unwrap();
    for (_, extra) in verify::all_extras(&p.alpha) {
        for ev in [&mut f32_gpu as &mut dyn Summation, &mut f64_gpu] {
            let (du, dx) = verify::device_against_host(ev, &p, extra).unwrap();
            eprintln!("{}: device − host {du:e} {dx:e}", ev.name());
            assert_eq!((du, dx), (0.0, 0.0), "{}", ev.name());
        }
    }
    assert!(DirectFreeSpace.device_form().is_none());
}

// ---- Plummer gravity ---------------------------------------------------------------------------

/// Bodies uniform in [−1, 1]³ with masses in [0.5, 1.5]/n, and `extra` other points in the same
/// cube (targets ≠ sources). Positions are f32 values, so the f32 kernels see the reference's
/// inputs exactly and the comparison measures their arithmetic (rounding the positions of the
/// nearest pair to f32 alone would move its force by ~1e-5 at ε = 0).
struct GravitySet {
    x: Vec<[f64; 3]>,
    mass: Vec<f64>,
    points: Vec<[f64; 3]>,
}

impl GravitySet {
    fn new(n: usize, extra: usize, seed: u64) -> GravitySet {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut cube = |k: usize| -> Vec<[f64; 3]> {
            (0..k)
                .map(|_| [0; 3].map(|_| rng.random_range(-1.0f32..1.0) as f64))
                .collect()
        };
        let (x, points) = (cube(n), cube(extra));
        let mass = (0..n)
            .map(|_| rng.random_range(0.5..1.5) / n as f64)
            .collect();
        GravitySet { x, mass, points }
    }

    fn bodies(&self) -> Bodies<'_> {
        Bodies {
            x: &self.x,
            mass: &self.mass,
        }
    }
}

/// φ and a of `gpu` at `targets` (None: the bodies) against the f64 CPU loop.
fn gravity_errors(
    gpu: &mut dyn GravitySummation,
    set: &GravitySet,
    targets: Option<&[[f64; 3]]>,
) -> (ErrorStats, ErrorStats) {
    let bodies = set.bodies();
    let mut g = GravityEvaluation::default();
    gpu.evaluate_gravity(&bodies, targets, &mut g).unwrap();
    let at = targets.unwrap_or(&set.x);
    assert_eq!(g.potential.len(), at.len());
    let c = reference_gravity(&gpu.gravity(), &bodies, at);
    let phi = |v: &[f64]| v.iter().map(|&p| [p]).collect::<Vec<_>>();
    let ep = ErrorStats::of(&phi(&g.potential), &phi(&c.potential));
    (ep, ErrorStats::of(&g.acceleration, &c.acceleration))
}

/// [`gravity_errors`] at the bodies and at the set's other points, printed and held to
/// `(rel L2, largest over rms)` for φ and for a.
#[track_caller]
fn check_gravity(
    gpu: &mut dyn GravitySummation,
    set: &GravitySet,
    label: &str,
    phi: (f64, f64),
    a: (f64, f64),
) {
    for (what, targets) in [("bodies", None), ("points", Some(&set.points[..]))] {
        let (ep, ea) = gravity_errors(gpu, set, targets);
        eprintln!(
            "{label} at the {what}: φ {:.2e} (max {:.2e}), a {:.2e} (max {:.2e})",
            ep.rel_l2, ep.max_rel, ea.rel_l2, ea.max_rel
        );
        assert!(
            ep.rel_l2 <= phi.0 && ep.max_rel <= phi.1 && ea.rel_l2 <= a.0 && ea.max_rel <= a.1,
            "{label} at the {what}: φ {ep:?}, a {ea:?}"
        );
    }
}

/// f32 tolerances (relative L2, largest over rms), about 5× and 10× what an f32 emulation of the
/// kernels measures at n = 4099 (φ 9e-7 and 4e-6; a at ε = 0.05 9e-7 and 6e-6; a at ε = 0
/// 1.1e-6 and 3e-5, the largest where the nearest pairs make a far above its rms).
const F32_PHI: (f64, f64) = (5e-6, 5e-5);
const F32_A_SOFT: (f64, f64) = (5e-6, 5e-5);
const F32_A_NEWTON: (f64, f64) = (1e-5, 5e-4);

#[test]
fn gpu_gravity_f32_and_f64_match_cpu_f64() {
    let Some(gpu0) = gpu_or_skip() else { return };
    for eps in [0.05, 0.0] {
        let g = PlummerGravity::new(eps).unwrap();
        let mut f32_gpu = CudaDirectGravity::new(gpu0.clone(), g).unwrap();
        let a_tol = if eps > 0.0 { F32_A_SOFT } else { F32_A_NEWTON };
        // Sizes around and off the tile (256 sources, 1024 targets per block by default).
        for (i, &(n, extra)) in [(2, 3), (255, 17), (1000, 333), (4099, 7)]
            .iter()
            .enumerate()
        {
            let set = GravitySet::new(n, extra, 0x6a7 + i as u64);
            check_gravity(
                &mut f32_gpu,
                &set,
                &format!("f32 ε = {eps}, n = {n}"),
                F32_PHI,
                a_tol,
            );
        }
        let mut f64_gpu = CudaDirectGravityOf::<f64>::new(gpu0.clone(), g).unwrap();
        for (i, &(n, extra)) in [(300, 41), (2050, 9)].iter().enumerate() {
            let set = GravitySet::new(n, extra, 0xf64 + i as u64);
            let tol = (1e-12, 1e-11);
            check_gravity(
                &mut f64_gpu,
                &set,
                &format!("f64 ε = {eps}, n = {n}"),
                tol,
                tol,
            );
        }
    }
}

#[test]
fn gpu_gravity_launch_configurations_agree() {
    let Some(gpu0) = gpu_or_skip() else { return };
    let set = GravitySet::new(3001, 77, 0xc0f2);
    let g = PlummerGravity::new(0.02).unwrap();
    let shapes = [
        (128, 1, 4, 0),
        (256, 4, 4, 0),
        (64, 3, 8, 0),
        (512, 8, 2, 0),
        (256, 2, 16, 2),
    ];
    for config in configs(&shapes) {
        let mut gpu = CudaDirectGravity::with_config(gpu0.clone(), g, config).unwrap();
        check_gravity(&mut gpu, &set, &config.to_string(), F32_PHI, F32_A_SOFT);
    }
}

#[test]
fn gpu_gravity_f32_large_n_on_a_sample_of_targets() {
    let Some(gpu0) = gpu_or_skip() else { return };
    // 2^18 bodies (the two-level f32 sums over 1024 tiles); 500 of them as explicit targets.
    let set = GravitySet::new(1 << 18, 0, 0x1a27);
    let g = PlummerGravity::new(0.01).unwrap();
    let mut gpu = CudaDirectGravity::new(gpu0.clone(), g).unwrap();
    let (ep, ea) = gravity_errors(&mut gpu, &set, Some(&set.x[..500]));
    eprintln!("n = 2^18, 500 targets: φ {ep:?}, a {ea:?}");
    assert!(ep.rel_l2 <= 5e-6 && ea.rel_l2 <= 2e-5, "φ {ep:?}, a {ea:?}");
}

#[test]
fn gpu_gravity_edge_cases() {
    let Some(gpu0) = gpu_or_skip() else { return };
    let x = [[0.0, 1.0, 2.0], [1.0, 1.0, 1.0], [0.0, 1.0, 2.0]];
    let mass = [1.0, 2.0, 3.0];
    let bodies = Bodies { x: &x, mass: &mass };
    let mut out = GravityEvaluation::default();
    // ε = 0: coincident bodies are refused, not computed.
    let mut newton =
        CudaDirectGravity::new(gpu0.clone(), PlummerGravity::new(0.0).unwrap()).unwrap();
    let e = newton
        .evaluate_gravity(&bodies, None, &mut out)
        .unwrap_err();
    assert!(e.to_string().contains("bodies 0 and 2"), "{e}");
    // Bodies apart in f64 but not in f32 are refused too.
    let close = [[1.0, 0.0, 0.0], [1.0 + 1e-12, 0.0, 0.0]];
    let two = Bodies {
        x: &close,
        mass: &mass[..2],
    };
    let e = newton.evaluate_gravity(&two, None, &mut out).unwrap_err();
    assert!(e.to_string().contains("in f32: bodies 0 and 1"), "{e}");
    // ε > 0: the same bodies are fine; the coincident pair adds −m/ε and no force.
    let soft = PlummerGravity::new(0.5).unwrap();
    let mut gpu = CudaDirectGravity::new(gpu0.clone(), soft).unwrap();
    gpu.evaluate_gravity(&bodies, None, &mut out).unwrap();
    let c = reference_gravity(&soft, &bodies, &x);
    for i in 0..3 {
        assert!((out.potential[i] - c.potential[i]).abs() <= 1e-6 * c.potential[i].abs());
        for k in 0..3 {
            assert!((out.acceleration[i][k] - c.acceleration[i][k]).abs() <= 1e-6);
        }
    }
    // No bodies: exact zeros. No targets: empty outputs. Masses that do not match: refused.
    let none = Bodies { x: &[], mass: &[] };
    gpu.evaluate_gravity(&none, Some(&x), &mut out).unwrap();
    assert_eq!(out.potential, [0.0; 3]);
    assert!(out.acceleration.iter().all(|a| *a == [0.0; 3]));
    gpu.evaluate_gravity(&bodies, Some(&[]), &mut out).unwrap();
    assert!(out.potential.is_empty() && out.acceleration.is_empty());
    let bad = Bodies {
        x: &x,
        mass: &mass[..2],
    };
    let e = gpu.evaluate_gravity(&bad, None, &mut out).unwrap_err();
    assert!(e.to_string().contains("3 positions but 2 masses"), "{e}");
    // A softening whose square underflows f32 is refused by name.
    let tiny = PlummerGravity::new(1e-30).unwrap();
    let mut gpu = CudaDirectGravity::new(gpu0.clone(), tiny).unwrap();
    let e = gpu
        .evaluate_gravity(&bodies, Some(&[[5.0; 3]]), &mut out)
        .unwrap_err();
    assert!(e.to_string().contains("underflows f32"), "{e}");
}

/// `vpm bench direct --interaction gravity`: on the CPU the f64 sum's rows; with a GPU a small
/// run writes its JSON rows; without one, a clear error (no panic).
#[test]
fn gravity_bench_runs_or_says_why_not() {
    let vpm = env!("CARGO_BIN_EXE_vpm");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("g.json");
    let run = |args: &[&str]| std::process::Command::new(vpm).args(args).output().unwrap();
    let base = [
        "bench",
        "direct",
        "--interaction",
        "gravity",
        "--n",
        "3000",
        "--repeats",
        "1",
    ];
    // On the CPU: the f64 all-pairs sum, its rows in the JSON.
    let cpu_json = dir.path().join("cpu.json");
    let mut cpu_args = base.to_vec();
    cpu_args.extend(["--json", cpu_json.to_str().unwrap()]);
    let o = run(&cpu_args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cpu_json).unwrap()).unwrap();
    assert_eq!(v["device"], "cpu", "{v}");
    assert!(
        v["rows"][0]["interactions_per_second"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    let mut args = base.to_vec();
    args.extend([
        "--device",
        "cuda",
        "--sample",
        "50",
        "--json",
        json.to_str().unwrap(),
    ]);
    let o = run(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    match vpm::cuda::availability() {
        Ok(_) => {
            assert!(o.status.success(), "{err}");
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            let row = &v["rows"][0];
            assert!(
                row["interactions_per_second"].as_f64().unwrap() > 0.0,
                "{v}"
            );
            assert!(
                row["error_potential"]["rel_l2"].as_f64().unwrap() < 1e-5,
                "{v}"
            );
            assert_eq!(v["interaction"], "gravity");
        }
        Err(_) => {
            assert!(!o.status.success());
            assert!(
                err.contains("no usable CUDA GPU") && !err.contains("panicked"),
                "{err}"
            );
        }
    }
}
