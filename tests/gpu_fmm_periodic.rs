//! The periodic FMM on the GPU ([`CudaFmm::periodic`], src/summation/fmm/cuda_periodic.rs)
//! against the CPU periodic FMM ([`FmmPeriodic`], f64) and the CPU Ewald sum: random cores with
//! Σα = 0 and not, and a jittered 32³ lattice, velocity with both stretching schemes and the
//! gradient; its image lists built on the device equal the host's `build_image_lists` (shift
//! for shift) and its wrap the host's (bit for bit); the resident form gives the host form's
//! bits; the planner's row builds it; below the f32 floor it is refused. Skipped (with the
//! reason printed) without a GPU.

use std::f64::consts::{PI, TAU};
use vpm::device::buffer::DeviceBuffer;
use vpm::device::Device;
use vpm::summation::ewald::EwaldPeriodic;
use vpm::summation::fmm::gpu_tree::{Cores, GpuTree, TreeRequest};
use vpm::summation::fmm::periodic::near_shifts;
use vpm::summation::fmm::{plan_parameters, CudaFmm, Fmm, FmmBackend, FmmPeriodic, Structure};
use vpm::summation::planner::plan;
use vpm::summation::verify::{self, flat9, gpu_or_skip, poisoned, rel_l2, Particles};
use vpm::summation::{Boundary, Evaluation, EvaluatorKind, Extra, Summation};

/// The host's `cells::wrap` (crate-private): x into [−π, π).
fn wrap(x: f64) -> f64 {
    let y = (x + PI).rem_euclid(TAU) - PI;
    if y >= PI {
        y - TAU
    } else {
        y
    }
}

fn wrap_all(x: &[[f64; 3]]) -> Vec<[f64; 3]> {
    x.iter().map(|p| p.map(wrap)).collect()
}

/// Relative L2 errors of the velocity and of the extra (stretching or gradient) of `a` against
/// `b`.
fn errors(a: &Evaluation, b: &Evaluation, extra: &Extra) -> (f64, f64) {
    let ev = rel_l2(&a.velocity, &b.velocity);
    let ex = match extra {
        Extra::None => 0.0,
        Extra::Gradient => rel_l2(&flat9(&a.gradient), &flat9(&b.gradient)),
        Extra::Stretching { .. } => rel_l2(&a.stretching, &b.stretching),
    };
    (ev, ex)
}

/// The device's wrap equals the host's bit for bit, and the trees and image lists built on the
/// device (the 729 near images, each entry with its shift) equal the host's, for targets at
/// the sources and for other targets.
#[test]
fn gpu_periodic_lists_and_wrap_equal_the_hosts() {
    let Some(gpu) = gpu_or_skip() else { return };
    let s = gpu.stream().clone();
    // Some outside the box (wrapped), some exactly on its faces and corners.
    let mut p = Particles::random_in_box(6000, 1.3, 0.05, 0.2, 3);
    p.x[0] = [PI, -PI, PI];
    p.x[1] = [-PI, 3.0 * PI, 0.0];
    p.x[2] = [PI - 1e-15, -PI + 1e-15, 5.0 * TAU];
    let targets: Vec<[f64; 3]> = verify::random_points(1500, 8)
        .iter()
        .map(|v| v.map(|c| 1.4 * c))
        .collect();
    let mut tree = GpuTree::new(&gpu).unwrap();
    let (mut x, mut tx, mut sig) = (
        DeviceBuffer::new(),
        DeviceBuffer::new(),
        DeviceBuffer::new(),
    );
    x.upload(&s, p.x.as_flattened(), "positions").unwrap();
    tx.upload(&s, targets.as_flattened(), "targets").unwrap();
    sig.upload(&s, &p.sigma, "cores").unwrap();
    let (mut xw, mut tw) = (DeviceBuffer::new(), DeviceBuffer::new());
    tree.wrap(x.get(), p.len(), &mut xw).unwrap();
    tree.wrap(tx.get(), targets.len(), &mut tw).unwrap();
    let mut got = vec![0.0; 3 * p.len()];
    xw.download(&gpu, &mut got, "wrapped").unwrap();
    let hx = wrap_all(&p.x);
    let ht = wrap_all(&targets);
    assert!(
        got.iter()
            .zip(hx.as_flattened())
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "the device's wrap differs from the host's"
    );
    let shifts = near_shifts(2);
    tree.set_images(&shifts).unwrap();
    let params = plan_parameters(1e-4, FmmBackend::Cuda).unwrap();
    let rho_cut = params.rho_cut(true);
    let sigma_max = p.sigma.iter().copied().fold(0.0, f64::max);
    for other in [false, true] {
        let req = TreeRequest {
            x: xw.get(),
            n: p.len(),
            cores: Cores::PerPoint(sig.get()),
            targets: other.then(|| (tw.get(), targets.len())),
            leaf_size: params.leaf_size,
            theta: params.theta,
            rho_cut,
            scale_max: sigma_max,
        };
        tree.build(&req).unwrap();
        let host_targets: &[[f64; 3]] = if other { &ht } else { &hx };
        let host = Structure::build_images(
            (&hx, &p.sigma),
            host_targets,
            &params,
            (rho_cut, sigma_max),
            shifts.clone(),
        );
        let (ds, dt, _) = tree.download().unwrap();
        let dl = tree.download_image_lists().unwrap();
        let name = if other {
            "other targets"
        } else {
            "targets = sources"
        };
        assert_eq!(ds.cells, host.sources.cells, "{name}: source cells");
        assert_eq!(ds.order, host.sources.order, "{name}: source order");
        assert_eq!(
            dt.map(|t| t.cells),
            host.target_tree.as_ref().map(|t| t.cells.clone()),
            "{name}: target cells"
        );
        let (hl, hi) = (&host.lists, host.images.as_ref().unwrap());
        assert_eq!(dl.lists.m2l_offsets, hl.m2l_offsets, "{name}: M2L offsets");
        assert_eq!(dl.lists.m2l_sources, hl.m2l_sources, "{name}: M2L sources");
        assert_eq!(dl.m2l_shifts, hi.m2l, "{name}: M2L shifts");
        assert_eq!(dl.lists.p2p_offsets, hl.p2p_offsets, "{name}: P2P offsets");
        assert_eq!(dl.lists.p2p_sources, hl.p2p_sources, "{name}: P2P sources");
        assert_eq!(dl.p2p_shifts, hi.p2p, "{name}: P2P shifts");
        assert!(
            hi.m2l.iter().any(|&v| v != hi.m2l[0]),
            "{name}: one shift only"
        );
        println!(
            "{name}: {} cells, {} M2L and {} P2P entries with their shifts: equal",
            ds.cells.len(),
            hl.m2l_count(),
            hl.p2p_count()
        );
    }
}

/// The GPU periodic FMM, the CPU periodic FMM with the same parameters and the CPU Ewald sum
/// at a tenth of the request, on `p` with `extra`: the GPU within the request of both; the
/// built-in check (against Ewald) passes.
fn compare_with_cpu(
    gpu: &std::sync::Arc<vpm::device::cuda::Gpu>,
    name: &str,
    p: &Particles,
    accuracy: f64,
) {
    let mut g = CudaFmm::periodic(gpu.clone(), accuracy, 0).unwrap();
    let params = *g.params();
    let mut cpu = FmmPeriodic::with_params(params, 0);
    cpu.disable_checks();
    let mut ewald = EwaldPeriodic::new(0.1 * accuracy);
    for (what, extra) in verify::all_extras(&p.alpha) {
        let mut got = poisoned(p.len());
        g.evaluate(&p.sources(), &p.x, extra, &mut got).unwrap();
        assert!(
            verify::all_finite(&got.velocity),
            "{name} {what}: unwritten velocities"
        );
        let (mut c, mut e) = (Evaluation::default(), Evaluation::default());
        cpu.evaluate(&p.sources(), &p.x, extra, &mut c).unwrap();
        ewald.evaluate(&p.sources(), &p.x, extra, &mut e).unwrap();
        let (cv, cx) = errors(&got, &c, &extra);
        let (ev, ex) = errors(&got, &e, &extra);
        let (fv, fx) = errors(&c, &e, &extra);
        println!(
            "{name}, {accuracy:e}, {what}: GPU vs CPU FMM {cv:.2e} / {cx:.2e}, vs Ewald {ev:.2e} / \
             {ex:.2e} (CPU FMM vs Ewald {fv:.2e} / {fx:.2e}); {:?}",
            g.last_stats()
        );
        assert!(
            cv <= accuracy && cx <= accuracy,
            "{name} {what}: GPU vs CPU FMM {cv:e} {cx:e}"
        );
        assert!(
            ev <= accuracy && ex <= accuracy,
            "{name} {what}: GPU vs Ewald {ev:e} {ex:e}"
        );
    }
    let checks = g.take_accuracy_checks();
    assert_eq!(checks.len(), 1, "{name}: the first evaluation is checked");
    assert!(checks.iter().all(|c| c.passed()), "{name}: {checks:?}");
}

/// Random cores (Σα = 0, some particles outside the box) at 1e-4 and at the f32 floor 5e-5.
#[test]
fn gpu_periodic_fmm_matches_the_cpu_fmm_and_ewald() {
    let Some(gpu) = gpu_or_skip() else { return };
    let p = Particles::random_in_box(4000, 1.1, 0.05, 0.2, 5);
    for accuracy in [1e-4, 5e-5] {
        compare_with_cpu(&gpu, "random cores", &p, accuracy);
    }
}

/// Σα ≠ 0: the vacuum term's Q part (a rotation and a constant gradient) is subtracted on the
/// device as on the CPU.
#[test]
fn gpu_periodic_fmm_with_a_mean_strength() {
    let Some(gpu) = gpu_or_skip() else { return };
    let mut p = Particles::random_in_box(3000, 1.0, 0.08, 0.25, 6);
    for (a, x) in p.alpha.iter_mut().zip(&p.x.clone()) {
        a[0] += 0.3;
        a[2] += 0.5 * x[0].clamp(-3.0, 3.0);
    }
    compare_with_cpu(&gpu, "mean strength", &p, 1e-4);
}

/// The layout of a vortex run: a jittered 32³ lattice with σ = h.
#[test]
fn gpu_periodic_fmm_on_a_32_cubed_lattice() {
    let Some(gpu) = gpu_or_skip() else { return };
    let p = Particles::lattice(32, 0.3, 7);
    compare_with_cpu(&gpu, "32³ lattice", &p, 1e-4);
}

/// The resident form (the GPU stepper's) gives the host form's bits for every extra.
#[test]
fn gpu_periodic_fmm_device_form_matches_host_form() {
    let Some(gpu) = gpu_or_skip() else { return };
    let p = Particles::random_in_box(5000, 1.2, 0.05, 0.2, 9);
    let mut fmm = CudaFmm::periodic(gpu, 1e-4, 0).unwrap();
    fmm.disable_checks();
    for (what, extra) in verify::all_extras(&p.alpha) {
        let (ev, ex) = verify::device_against_host(&mut fmm, &p, extra).unwrap();
        assert!(ev == 0.0 && ex == 0.0, "{what}: {ev:e} {ex:e}");
    }
}

/// Other targets than the sources (their own tree, wrapped on the device) against Ewald, and
/// two runs give the same bits.
#[test]
fn gpu_periodic_fmm_at_other_targets_is_deterministic() {
    let Some(gpu) = gpu_or_skip() else { return };
    let p = Particles::random_in_box(3000, 1.0, 0.05, 0.2, 10);
    let targets: Vec<[f64; 3]> = verify::random_points(800, 11)
        .iter()
        .map(|v| v.map(|c| 1.3 * c))
        .collect();
    let mut g = CudaFmm::periodic(gpu, 1e-4, 0).unwrap();
    g.disable_checks();
    let extra = Extra::Gradient;
    let (mut a, mut b, mut e) = (
        poisoned(targets.len()),
        poisoned(targets.len()),
        Evaluation::default(),
    );
    g.evaluate(&p.sources(), &targets, extra, &mut a).unwrap();
    g.evaluate(&p.sources(), &targets, extra, &mut b).unwrap();
    assert!(
        a.velocity == b.velocity && a.gradient == b.gradient,
        "not deterministic"
    );
    EwaldPeriodic::new(1e-5)
        .evaluate(&p.sources(), &targets, extra, &mut e)
        .unwrap();
    let (ev, eg) = errors(&a, &e, &extra);
    println!("other targets: velocity {ev:.2e}, gradient {eg:.2e}");
    assert!(ev <= 1e-4 && eg <= 1e-4, "{ev:e} {eg:e}");
}

/// The planner's row builds it (periodic, named with its images), and a request below the f32
/// floor is refused, naming it.
#[test]
fn gpu_periodic_fmm_is_planned_and_refuses_below_its_floor() {
    let Some(gpu) = gpu_or_skip() else { return };
    let periodic = Boundary::Periodic { length: TAU };
    let plan = plan(
        periodic,
        EvaluatorKind::Fmm,
        &Device::Cuda(gpu.clone()),
        1e-4,
    )
    .unwrap();
    assert_eq!(plan.evaluator.boundary(), periodic);
    let name = plan.evaluator.name();
    assert!(
        name.contains("FMM periodic GPU") && name.contains("|n|∞ ≤ 4"),
        "{name}"
    );
    let e = CudaFmm::periodic(gpu, 1e-5, 0).err().unwrap().to_string();
    assert!(e.contains("f32") && e.contains("5e-5"), "{e}");
}
