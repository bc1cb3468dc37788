//! The gravity FMM's softened Cartesian expansions on the GPU (`CudaFmmGravity`:
//! kernels/fmm_cartesian.cu on the tree built on the device): against the CPU Cartesian FMM with
//! the same parameters, so the same trees, lists and order (f32 near field: ~1e-6), against the
//! f64 all-pairs sum at several
//! accuracies, at the bodies (self pairs, ε = 0 included) and at targets of their own tree,
//! with small and large softening; bit-identical reruns; every order compiles. Skipped (with
//! the reason printed) without a GPU.

use vpm::bench::fmm::gravity_bodies;
use vpm::device::buffer::DeviceBuffer;
use vpm::summation::direct::DirectGravity;
use vpm::summation::fmm::cuda_cartesian::CartesianGravityKernels;
use vpm::summation::fmm::params::CARTESIAN_GPU_MAX_ORDER;
use vpm::summation::fmm::{
    plan_gravity_parameters, CudaFmmGravity, Fmm, FmmBackend, FmmGravity, Structure,
};
use vpm::summation::interaction::{Bodies, GravityEvaluation, GravitySummation, PlummerGravity};
use vpm::summation::verify::{cell_face_targets, gpu_or_skip, ErrorStats, Particles};

/// (acceleration, potential) errors of `got` against `want`.
fn errors(got: &GravityEvaluation, want: &GravityEvaluation) -> (ErrorStats, ErrorStats) {
    let wrap = |v: &[f64]| v.iter().map(|&p| [p]).collect::<Vec<[f64; 1]>>();
    (
        ErrorStats::of(&got.acceleration, &want.acceleration),
        ErrorStats::of(&wrap(&got.potential), &wrap(&want.potential)),
    )
}

/// The GPU against the CPU (same structure, same order) and the f64 all-pairs sum, for the
/// bodies themselves (`faces` false) or targets on cell faces.
fn compare(n: usize, eps: Option<f64>, accuracy: f64, faces: bool) {
    let Some(gpu) = gpu_or_skip() else { return };
    let (x, m, g0) = gravity_bodies(n, 7);
    let g = eps.map_or(g0, |e| PlummerGravity::new(e).unwrap());
    let params = plan_gravity_parameters(accuracy, FmmBackend::Cuda, g).unwrap();
    let face_targets = cell_face_targets(
        &Particles {
            x: x.clone(),
            ..Default::default()
        },
        2000,
        3,
    );
    let tx: &[[f64; 3]] = if faces { &face_targets } else { &x };
    let st = Structure::build_gravity(&x, tx, &params);
    assert_eq!(st.target_tree.is_some(), faces);
    let bodies = Bodies { x: &x, mass: &m };
    let targets = faces.then_some(tx);
    let mut engine = CudaFmmGravity::with_params(gpu.clone(), g, params, 0).unwrap();
    engine.disable_checks();
    let (mut a, mut b) = (GravityEvaluation::default(), GravityEvaluation::default());
    engine.evaluate_gravity(&bodies, targets, &mut a).unwrap();
    let stats = *engine.last_stats();
    engine.evaluate_gravity(&bodies, targets, &mut b).unwrap();
    assert!(
        a.potential == b.potential && a.acceleration == b.acceleration,
        "not deterministic"
    );
    if !faces {
        // The device form on resident bodies gives the host form's bits.
        let s = gpu.stream().clone();
        let flat: Vec<f64> = x.iter().flatten().copied().collect();
        let (mut xd, mut md) = (DeviceBuffer::default(), DeviceBuffer::default());
        xd.upload(&s, &flat, "positions").unwrap();
        md.upload(&s, &m, "masses").unwrap();
        let (mut phi, mut acc) = (DeviceBuffer::default(), DeviceBuffer::default());
        engine
            .evaluate_resident(&xd, &md, x.len(), &mut phi, &mut acc)
            .unwrap();
        let mut p = vec![0.0; x.len()];
        phi.download(&gpu, &mut p, "potentials").unwrap();
        let mut f = vec![0.0; 3 * x.len()];
        acc.download(&gpu, &mut f, "accelerations").unwrap();
        assert!(p == a.potential, "resident φ differs from the host form's");
        let host: Vec<f64> = a.acceleration.iter().flatten().copied().collect();
        assert!(f == host, "resident a differs from the host form's");
    }
    // The device's trees and lists are the host's (tests/gpu_tree.rs), so the CPU engine with
    // the same parameters sums the same expansions.
    assert_eq!(stats.m2l_pairs, st.lists.m2l_count());
    let mut cpu = FmmGravity::with_params(g, params, 0);
    cpu.disable_checks();
    let mut c = GravityEvaluation::default();
    cpu.evaluate_gravity(&bodies, targets, &mut c).unwrap();
    let mut direct = GravityEvaluation::default();
    DirectGravity::new(g)
        .evaluate_gravity(&bodies, faces.then_some(tx), &mut direct)
        .unwrap();
    let (ga, gp) = errors(&a, &c);
    let (da, dp) = errors(&a, &direct);
    let (ca, _) = errors(&c, &direct);
    println!(
        "n {n} ε {:.3e} {accuracy:e} faces {faces}: p {}, M2L {}, P2P/target {:.0}; GPU vs CPU a \
         {:.2e} (max {:.2e}) φ {:.2e}; GPU vs direct a {:.2e} (max {:.2e}) φ {:.2e} (max {:.2e}); \
         CPU vs direct a {:.2e}; GPU phases up {:.4} M2L {:.4} down {:.4} eval {:.4} s",
        g.softening,
        params.order,
        stats.m2l_pairs,
        stats.p2p_per_target(),
        ga.rel_l2,
        ga.max_rel,
        gp.rel_l2,
        da.rel_l2,
        da.max_rel,
        dp.rel_l2,
        dp.max_rel,
        ca.rel_l2,
        stats.upward_seconds,
        stats.m2l_seconds,
        stats.downward_seconds,
        stats.p2p_seconds
    );
    assert!(stats.m2l_pairs > 0);
    // The f32 near field against the f64 one: relative L2 ~1e-6.
    assert!(
        ga.rel_l2 < 1e-5 && gp.rel_l2 < 1e-5,
        "GPU vs CPU {ga:?} {gp:?}"
    );
    assert!(ga.max_rel < 2e-4, "GPU vs CPU max {ga:?}");
    assert!(
        da.within(accuracy, 10.0) && dp.within(accuracy, 10.0),
        "GPU vs direct {da:?} {dp:?}"
    );
}

#[test]
fn gpu_cartesian_matches_cpu_and_direct_at_1e3() {
    compare(20000, None, 1e-3, false);
}

#[test]
fn gpu_cartesian_matches_cpu_and_direct_at_1e4() {
    compare(20000, None, 1e-4, false);
    compare(20000, None, 1e-4, true);
}

#[test]
fn gpu_cartesian_at_the_f32_floor_and_with_large_softening() {
    compare(20000, None, 5e-5, true);
    compare(8000, Some(0.05), 1e-4, false);
}

#[test]
fn gpu_cartesian_without_softening_skips_the_self_pair() {
    compare(8000, Some(0.0), 1e-4, false);
}

/// Every order the planner may ask of the GPU compiles and loads.
#[test]
fn gpu_cartesian_compiles_every_order() {
    let Some(gpu) = gpu_or_skip() else { return };
    for p in 2..=CARTESIAN_GPU_MAX_ORDER {
        let k = CartesianGravityKernels::new(&gpu, p).unwrap();
        assert_eq!(k.order(), p);
    }
    assert!(CartesianGravityKernels::new(&gpu, CARTESIAN_GPU_MAX_ORDER + 1).is_err());
}
