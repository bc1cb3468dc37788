//! The FMM's tree and interaction lists built on the GPU (kernels/fmm_tree.cu,
//! src/summation/fmm/gpu_tree.rs) equal the host's (`Octree::build`, `build_lists`) exactly —
//! every cell field, the order, the levels, the leaves and both CSR lists — on uniform,
//! clustered, thin-ring and Plummer sets, with separate targets (on cell faces, coinciding with
//! sources, on a lattice) and from a few points to 100k; and the shared sort module
//! (kernels/sort.cu) against host sorts, scans and reductions. Skipped (with the reason printed)
//! without a GPU.

use rand::{Rng, SeedableRng};
use std::sync::Arc;
use vpm::device::buffer::DeviceBuffer;
use vpm::device::cuda::Gpu;
use vpm::device::sort::DeviceSort;
use vpm::summation::fmm::gpu_tree::{min_leaf_side, Cores, GpuTree, TreeRequest};
use vpm::summation::fmm::traversal::{build_lists, Criterion};
use vpm::summation::fmm::tree::Octree;
use vpm::summation::verify::{cell_face_targets, gpu_or_skip, Particles};

fn upload(gpu: &Gpu, v: &[f64]) -> DeviceBuffer<f64> {
    let mut b = DeviceBuffer::new();
    b.upload(gpu.stream(), v, "test data").unwrap();
    b
}

fn flat(x: &[[f64; 3]]) -> Vec<f64> {
    x.iter().flatten().copied().collect()
}

/// The parameters of one comparison.
#[derive(Clone, Copy)]
struct Params {
    leaf: usize,
    theta: f64,
    rho_cut: f64,
    /// Per-point cores (`None`: every source's scale 1, as gravity).
    per_point: bool,
}

/// Builds on the host and on the device and asserts equality; returns (cells, m2l, p2p) counts.
fn compare(
    tree: &mut GpuTree,
    gpu: &Arc<Gpu>,
    name: &str,
    p: &Particles,
    targets: Option<&[[f64; 3]]>,
    q: Params,
) -> (usize, usize, usize) {
    let scale: Vec<f64> = match q.per_point {
        true => p.sigma.clone(),
        false => vec![1.0; p.len()],
    };
    let scale_max = scale.iter().copied().fold(0.0, f64::max);
    let min_side = min_leaf_side(q.rho_cut, scale_max);
    let hs = Octree::build(&p.x, Some(&scale), q.leaf, min_side);
    let ht = targets.map(|t| Octree::build(t, None, q.leaf, min_side));
    let criterion = Criterion::Multipole {
        theta: q.theta,
        rho_cut: q.rho_cut,
    };
    let hl = build_lists(ht.as_ref().unwrap_or(&hs), &hs, criterion);

    let x = upload(gpu, &flat(&p.x));
    let sig = upload(gpu, &p.sigma);
    let tx = targets.map(|t| (upload(gpu, &flat(t)), t.len()));
    let req = TreeRequest {
        x: x.get(),
        n: p.len(),
        cores: match q.per_point {
            true => Cores::PerPoint(sig.get()),
            false => Cores::Uniform(1.0),
        },
        targets: tx.as_ref().map(|(b, n)| (b.get(), *n)),
        leaf_size: q.leaf,
        theta: q.theta,
        rho_cut: q.rho_cut,
        scale_max,
    };
    tree.build(&req).unwrap();
    let (ds, dt, dl) = tree.download().unwrap();
    let same =
        |what: &str, ok: bool| assert!(ok, "{name}: the GPU's {what} differs from the host's");
    for (h, d, which) in [
        (Some(&hs), Some(&ds), "source"),
        (ht.as_ref(), dt.as_ref(), "target"),
    ] {
        let (Some(h), Some(d)) = (h, d) else {
            same("target tree presence", h.is_none() && d.is_none());
            continue;
        };
        same(&format!("{which} levels"), h.levels == d.levels);
        same(&format!("{which} order"), h.order == d.order);
        same(
            &format!("{which} cell count"),
            h.cells.len() == d.cells.len(),
        );
        if let Some(i) = (0..h.cells.len()).find(|&i| h.cells[i] != d.cells[i]) {
            panic!(
                "{name}: {which} cell {i} differs:\n host {:?}\n  gpu {:?}",
                h.cells[i], d.cells[i]
            );
        }
        same(&format!("{which} leaves"), h.leaves == d.leaves);
    }
    same("M2L offsets", hl.m2l_offsets == dl.m2l_offsets);
    same("M2L sources", hl.m2l_sources == dl.m2l_sources);
    same("P2P offsets", hl.p2p_offsets == dl.p2p_offsets);
    same("P2P sources", hl.p2p_sources == dl.p2p_sources);
    let t = ht.as_ref().unwrap_or(&hs);
    assert_eq!(
        tree.lists.p2p_pairs,
        hl.p2p_pairs(t, &hs),
        "{name}: P2P pairs"
    );
    assert_eq!(tree.lists.m2l_count, hl.m2l_count(), "{name}: M2L count");
    println!(
        "{name}: {} cells, depth {}, {} M2L, {} P2P entries: equal",
        hs.cells.len(),
        hs.depth(),
        hl.m2l_count(),
        hl.p2p_count()
    );
    (hs.cells.len(), hl.m2l_count(), hl.p2p_count())
}

/// Points mostly in a small cube, every `every`-th in a large one (tree.rs's clustered set).
fn clustered(n: usize, every: usize, far: f64, near: f64, seed: u64) -> Particles {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let x: Vec<[f64; 3]> = (0..n)
        .map(|i| {
            let s = if i % every == 0 { far } else { near };
            [0, 1, 2].map(|_| s * (rng.random::<f64>() - 0.5))
        })
        .collect();
    let sigma = (0..n).map(|i| 0.01 + 1e-6 * i as f64).collect();
    Particles {
        alpha: vec![[0.0; 3]; n],
        x,
        sigma,
    }
}

const BS: Params = Params {
    leaf: 32,
    theta: 0.5,
    rho_cut: 5.0,
    per_point: true,
};

#[test]
fn gpu_tree_and_lists_equal_the_hosts() {
    let Some(gpu) = gpu_or_skip() else { return };
    let mut tree = GpuTree::new(&gpu).unwrap();
    // One GpuTree throughout: its buffers are reused (grown and shrunk between sets).
    for n in [1usize, 2, 3, 9, 33, 100, 1000] {
        let p = Particles::random_in_box(n, 1.0, 0.01, 0.02, n as u64);
        compare(&mut tree, &gpu, &format!("uniform {n}"), &p, None, BS);
    }
    let big = Particles::free_space(100_000, 1);
    let (cells, m2l, p2p) = compare(&mut tree, &gpu, "uniform 100k", &big, None, BS);
    assert!(cells > 3000 && m2l > 0 && p2p > 0);
    compare(
        &mut tree,
        &gpu,
        "clustered 20k",
        &clustered(20_000, 10, 3.0, 0.05, 7),
        None,
        BS,
    );
    compare(
        &mut tree,
        &gpu,
        "ring 30k",
        &Particles::thin_ring(30_000, 3),
        None,
        BS,
    );
    let plummer = Particles::plummer(50_000, 0.3, 0.01, 2);
    compare(&mut tree, &gpu, "plummer 50k", &plummer, None, BS);
    // Gravity's form: every source's scale 1, an absolute near-field radius; small leaves.
    let g = Params {
        leaf: 8,
        theta: 0.4,
        rho_cut: 1e-3,
        per_point: false,
    };
    compare(
        &mut tree,
        &gpu,
        "plummer gravity",
        &Particles::plummer(8000, 0.3, 0.01, 5),
        None,
        g,
    );
    // Coincident points: splitting stops at the minimum side / the last level.
    let mut dup = Particles::random_in_box(500, 1.0, 0.01, 0.01, 4);
    for i in 0..300 {
        dup.x[i] = [0.25, -0.5, 0.125];
    }
    compare(&mut tree, &gpu, "coincident", &dup, None, BS);
    let tiny = Params {
        rho_cut: 0.0,
        leaf: 1,
        ..BS
    };
    compare(&mut tree, &gpu, "coincident, leaf 1", &dup, None, tiny);
}

#[test]
fn gpu_tree_and_lists_equal_the_hosts_with_separate_targets() {
    let Some(gpu) = gpu_or_skip() else { return };
    let mut tree = GpuTree::new(&gpu).unwrap();
    let p = Particles::plummer(20_000, 0.3, 0.01, 2);
    let faces = cell_face_targets(&p, 3000, 9);
    compare(
        &mut tree,
        &gpu,
        "plummer, face targets",
        &p,
        Some(&faces),
        BS,
    );
    // Targets at the sources (a copy: a separate tree of the same points) and on a lattice.
    let u = Particles::free_space(10_000, 3);
    compare(
        &mut tree,
        &gpu,
        "uniform, copied targets",
        &u,
        Some(&u.x.clone()),
        BS,
    );
    let lattice: Vec<[f64; 3]> = (0..16 * 16 * 16)
        .map(|i| [i % 16, (i / 16) % 16, i / 256].map(|k| -3.0 + 0.4 * k as f64))
        .collect();
    compare(
        &mut tree,
        &gpu,
        "uniform, lattice targets",
        &u,
        Some(&lattice),
        BS,
    );
    let ring = Particles::thin_ring(5000, 4);
    let few = cell_face_targets(&ring, 7, 1);
    compare(&mut tree, &gpu, "ring, 7 targets", &ring, Some(&few), BS);
    let one = Particles::random_in_box(1, 1.0, 0.01, 0.01, 1);
    compare(
        &mut tree,
        &gpu,
        "1 source, face targets",
        &one,
        Some(&faces),
        BS,
    );
    // Back to targets = sources with the same GpuTree.
    compare(&mut tree, &gpu, "plummer again", &p, None, BS);
}

#[test]
fn gpu_radix_sort_scan_and_bounds_equal_the_hosts() {
    let Some(gpu) = gpu_or_skip() else { return };
    let s = gpu.stream().clone();
    let mut sort = DeviceSort::new(&gpu).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    for (n, bits, distinct) in [
        (1usize, 63u32, 1u64),
        (2, 63, 1),
        (1000, 63, 7),
        (5000, 20, 100),
        (100_003, 63, 1000),
        (300_000, 64, u64::MAX),
    ] {
        let mask = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        // Many ties: `distinct` values spread over the key bits.
        let keys: Vec<u64> = (0..n)
            .map(|_| {
                let v = rng.random::<u64>() % distinct.max(1);
                v.wrapping_mul(0x9e37_79b9_7f4a_7c15) & mask
            })
            .collect();
        let vals: Vec<u32> = (0..n).map(|_| rng.random::<u32>()).collect();
        let mut want: Vec<(u64, u32)> = keys.iter().copied().zip(vals.iter().copied()).collect();
        want.sort_by_key(|p| p.0); // stable
        let (mut dk, mut dv) = (DeviceBuffer::new(), DeviceBuffer::new());
        dk.upload(&s, &keys, "keys").unwrap();
        dv.upload(&s, &vals, "values").unwrap();
        sort.sort_pairs(dk.get_mut(), dv.get_mut(), n, bits)
            .unwrap();
        let (mut gk, mut gv) = (vec![0u64; n], vec![0u32; n]);
        dk.download(&gpu, &mut gk, "keys").unwrap();
        dv.download(&gpu, &mut gv, "values").unwrap();
        let got: Vec<(u64, u32)> = gk.into_iter().zip(gv).collect();
        assert!(got == want, "radix sort of {n} keys ({bits} bits) differs");
    }
    for n in [1usize, 5, 2048, 2049, 1_000_000] {
        let v: Vec<u32> = (0..n).map(|_| rng.random_range(0..9)).collect();
        let mut d = DeviceBuffer::new();
        d.upload(&s, &v, "counts").unwrap();
        sort.exclusive_scan(d.get_mut(), n).unwrap();
        let mut got = vec![0u32; n];
        d.download(&gpu, &mut got, "counts").unwrap();
        let want: Vec<u32> = v
            .iter()
            .scan(0u32, |acc, &c| {
                let e = *acc;
                *acc += c;
                Some(e)
            })
            .collect();
        assert_eq!(got, want, "scan of {n}");
    }
    for n in [1usize, 7, 100_000] {
        let x: Vec<f64> = (0..3 * n).map(|_| rng.random_range(-5.0..3.0)).collect();
        let b = upload(&gpu, &x);
        let (lo, hi) = sort.bounds(b.get(), n).unwrap();
        for k in 0..3 {
            let c = x.iter().skip(k).step_by(3);
            assert_eq!(lo[k], c.clone().copied().fold(f64::INFINITY, f64::min));
            assert_eq!(hi[k], c.copied().fold(f64::NEG_INFINITY, f64::max));
        }
        let m = sort.max(b.get(), n).unwrap();
        assert_eq!(m, x[..n].iter().copied().fold(f64::NEG_INFINITY, f64::max));
    }
}

/// The GPU engines count their device-built trees and lists as the host structure counts
/// (cells, leaves, depth, M2L entries, near-field pairs, targets), with targets at the sources
/// and elsewhere, and time the build on the device.
#[test]
fn gpu_fmm_engines_count_their_device_trees_as_the_host() {
    use vpm::bench::fmm::gravity_bodies;
    use vpm::summation::fmm::{
        plan_gravity_parameters, plan_parameters, CudaFmm, CudaFmmGravity, Fmm, FmmBackend,
        FmmStats, Structure,
    };
    use vpm::summation::interaction::{Bodies, GravityEvaluation, GravitySummation};
    use vpm::summation::verify::poisoned;
    use vpm::summation::{Extra, Summation};
    let Some(gpu) = gpu_or_skip() else { return };
    let p = Particles::plummer(20_000, 0.3, 0.01, 4);
    let faces = cell_face_targets(&p, 2000, 5);
    let params = plan_parameters(1e-4, FmmBackend::Cuda).unwrap();
    let mut g = CudaFmm::with_params(gpu.clone(), params, 0).unwrap();
    g.disable_checks();
    let counts = |s: &FmmStats| {
        (
            s.cells,
            s.leaves,
            s.depth,
            s.m2l_pairs,
            s.p2p_pairs,
            s.targets,
        )
    };
    for targets in [&p.x[..], &faces[..]] {
        let mut out = poisoned(targets.len());
        g.evaluate(&p.sources(), targets, Extra::None, &mut out)
            .unwrap();
        let mut want = FmmStats::default();
        Structure::build(&p.sources(), targets, &params, false, 0.01).count(&mut want, 0);
        let got = *g.last_stats();
        assert_eq!(
            counts(&got),
            counts(&want),
            "Biot–Savart, {} targets",
            targets.len()
        );
        assert!(got.tree_seconds > 0.0);
    }
    let (x, mass, gravity) = gravity_bodies(20_000, 3);
    let bodies = Bodies { x: &x, mass: &mass };
    let gp = plan_gravity_parameters(1e-4, FmmBackend::Cuda, gravity).unwrap();
    let mut f = CudaFmmGravity::with_params(gpu, gravity, gp, 0).unwrap();
    f.disable_checks();
    for t in [None, Some(&faces[..])] {
        let mut out = GravityEvaluation::default();
        f.evaluate_gravity(&bodies, t, &mut out).unwrap();
        let mut want = FmmStats::default();
        Structure::build_gravity(&x, t.unwrap_or(&x), &gp).count(&mut want, 0);
        assert_eq!(
            counts(f.last_stats()),
            counts(&want),
            "gravity, targets {:?}",
            t.map(<[_]>::len)
        );
    }
}
