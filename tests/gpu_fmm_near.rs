//! The GPU FMM's near field alone (kernels/fmm.cu `fmm_eval_velocity`, `_gradient`,
//! `_classical`, `_transposed` with the local expansions zeroed, `near_field_only`) against a
//! straightforward f64 sum over exactly the P2P pairs of the lists the device built (downloaded
//! with `GpuTree::download`): for the
//! Biot–Savart law the exact kernel within ρ_c σ_q and the singular one beyond (the planned
//! gradient radius for every output, so that one tree serves all four), velocity, gradient and
//! both stretching schemes. Leaves of 1 to 300 particles (leaf sizes 300 and 8 on a clustered
//! set), targets at the sources and other points.
//! Skipped (with the reason printed) without a GPU.

use vpm::kernel::{
    pair_coefficients, singular_pair_coefficients, stretching_from_gradient, StretchingScheme,
};
use vpm::summation::fmm::gpu_tree::GpuTree;
use vpm::summation::fmm::{plan_parameters, CudaFmm, Fmm, FmmBackend, FmmParams};
use vpm::summation::verify::{gpu_or_skip, poisoned, rel_l2, Particles};
use vpm::summation::{Extra, Summation};

/// Relative L2 and the largest error over the reference's RMS, of `got` against `want`.
fn errors<const K: usize>(got: &[[f64; K]], want: &[[f64; K]]) -> (f64, f64) {
    let rms = (want.iter().flatten().map(|v| v * v).sum::<f64>() / want.len() as f64).sqrt();
    let max = got
        .iter()
        .zip(want)
        .map(|(a, b)| (0..K).map(|k| (a[k] - b[k]).powi(2)).sum::<f64>().sqrt())
        .fold(0.0, f64::max);
    (rel_l2(got, want), max / rms)
}

/// Calls `f` on every P2P pair of the last build as (original target, original source)
/// indices; returns their number and the smallest and largest leaf (target leaves and the
/// source leaves of the lists).
fn for_each_p2p_pair(tree: &GpuTree, mut f: impl FnMut(usize, usize)) -> (usize, usize, usize) {
    let (s, t, lists) = tree.download().unwrap();
    let t = t.as_ref().unwrap_or(&s);
    let (mut pairs, mut lo, mut hi) = (0, usize::MAX, 0);
    for (i, &l) in t.leaves.iter().enumerate() {
        let tc = &t.cells[l as usize];
        for &sl in lists.p2p_of(i) {
            let sc = &s.cells[sl as usize];
            for c in [tc, sc] {
                lo = lo.min(c.particles().len());
                hi = hi.max(c.particles().len());
            }
            for a in tc.particles() {
                for b in sc.particles() {
                    f(t.order[a] as usize, s.order[b] as usize);
                    pairs += 1;
                }
            }
        }
    }
    (pairs, lo, hi)
}

/// The f64 near-field velocity and gradient at `y` over the P2P pairs of `tree`'s lists, exact
/// kernel within `rho_cut` σ_q and singular beyond; the pair count and leaf range.
type Reference = (Vec<[f64; 3]>, Vec<[[f64; 3]; 3]>, (usize, usize, usize));
fn biot_savart_reference(tree: &GpuTree, p: &Particles, y: &[[f64; 3]], rho_cut: f64) -> Reference {
    let mut u = vec![[0.0; 3]; y.len()];
    let mut g = vec![[[0.0; 3]; 3]; y.len()];
    let counts = for_each_p2p_pair(tree, |t, q| {
        let r: [f64; 3] = std::array::from_fn(|k| y[t][k] - p.x[q][k]);
        let r2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
        let s = p.sigma[q];
        let (k, l) = match r2 <= (rho_cut * s).powi(2) {
            true => pair_coefficients(r2, s),
            false => singular_pair_coefficients(r2),
        };
        let a = p.alpha[q];
        let c = [
            a[1] * r[2] - a[2] * r[1],
            a[2] * r[0] - a[0] * r[2],
            a[0] * r[1] - a[1] * r[0],
        ];
        let m = [[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]];
        for i in 0..3 {
            u[t][i] += k * c[i];
            for j in 0..3 {
                g[t][i][j] += k * m[i][j] - l * c[i] * r[j];
            }
        }
    });
    (u, g, counts)
}

/// Whether a build's leaves span what the kernels' layouts distinguish: with leaves ≤ 300 some
/// above one chunk of targets (128), with leaves ≤ 8 some of at most 4 (a lane group per target).
fn leaf_range_covered(leaf_size: usize, lo: usize, hi: usize) -> bool {
    match leaf_size {
        300 => hi > 128,
        _ => lo <= 4,
    }
}

#[test]
fn gpu_near_field_equals_f64_sum_over_the_p2p_pairs() {
    let Some(gpu) = gpu_or_skip() else { return };
    let p = Particles::plummer(4000, 0.5, 0.01, 11);
    let others = Particles::plummer(1200, 0.7, 0.01, 12).x;
    let other_alpha = Particles::plummer(1200, 0.7, 0.01, 13).alpha;
    let planned = plan_parameters(1e-4, FmmBackend::Cuda).unwrap();
    for leaf_size in [300, 8] {
        let rho_cut = planned.rho_cut_gradient;
        let params = FmmParams {
            leaf_size,
            rho_cut_velocity: rho_cut,
            ..planned
        };
        let mut fmm = CudaFmm::with_params(gpu.clone(), params, 0).unwrap();
        fmm.disable_checks();
        fmm.near_field_only(true);
        for (where_, y, ya) in [
            ("sources", &p.x, &p.alpha),
            ("others", &others, &other_alpha),
        ] {
            let n = y.len();
            let mut vel = poisoned(n);
            fmm.evaluate(&p.sources(), y, Extra::None, &mut vel)
                .unwrap();
            let (u, g, (pairs, lo, hi)) = biot_savart_reference(fmm.device_tree(), &p, y, rho_cut);
            let tag = format!("leaves ≤ {leaf_size}, targets at {where_}");
            println!("{tag}: {pairs} P2P pairs, leaves of {lo} to {hi}");
            assert!(
                leaf_range_covered(leaf_size, lo, hi),
                "{tag}: leaves {lo}..{hi}"
            );
            let check = |what: &str, (l2, max): (f64, f64), tol: f64| {
                println!("{tag}, {what}: rel L2 {l2:.2e}, max/rms {max:.2e}");
                assert!(
                    l2 <= tol && max <= 100.0 * tol,
                    "{tag}, {what}: {l2:e} {max:e}"
                );
            };
            check("velocity", errors(&vel.velocity, &u), 2e-5);
            let mut grad = poisoned(n);
            fmm.evaluate(&p.sources(), y, Extra::Gradient, &mut grad)
                .unwrap();
            let flat = |v: &[[[f64; 3]; 3]]| -> Vec<[f64; 9]> {
                v.iter()
                    .map(|m| std::array::from_fn(|k| m[k / 3][k % 3]))
                    .collect()
            };
            check("velocity (gradient run)", errors(&grad.velocity, &u), 2e-5);
            check("gradient", errors(&flat(&grad.gradient), &flat(&g)), 5e-5);
            for scheme in [StretchingScheme::Classical, StretchingScheme::Transposed] {
                let mut st = poisoned(n);
                let extra = Extra::Stretching { alpha: ya, scheme };
                fmm.evaluate(&p.sources(), y, extra, &mut st).unwrap();
                let want: Vec<[f64; 3]> = g
                    .iter()
                    .zip(ya.iter())
                    .map(|(m, a)| stretching_from_gradient(m, a, scheme))
                    .collect();
                check(
                    &format!("{scheme:?} stretching"),
                    errors(&st.stretching, &want),
                    5e-5,
                );
            }
        }
    }
}

/// Host mirror of fmm.cu's `near_leaf` and `near_stage` index arithmetic (`tpt` targets per
/// lane: NEAR_TPT = 4, or 3 for the gradient; NEAR_STAGE = 128), step for step on 32 simulated
/// lanes, for one row of the lists given as the source leaves' (first packed source, count),
/// and one target leaf of `n` targets: each
/// (target, source) pair of the row is summed exactly once, by the lane group the kernel gives
/// it, after the groups' shuffle reduction. The GPU tests above are the kernels' only check on
/// a device; this one runs everywhere.
fn mirror_near_leaf(row: &[(u32, u32)], n: usize, tpt: usize) -> Vec<Vec<u32>> {
    const STAGE: usize = 128;
    let sources: u32 = row.iter().map(|r| r.1).sum();
    let first_source = row.iter().map(|r| r.0).min().unwrap_or(0);
    let mut counts = vec![vec![0u32; sources as usize]; n];
    let chunk = 32 * tpt;
    for base in (0..n).step_by(chunk) {
        let nc = (n - base).min(chunk);
        let mut l = 1;
        while l * tpt < nc {
            l <<= 1;
        }
        let groups = 32 / l;
        // Per lane: the (target, source) pairs it summed, then reduced onto lanes 0..L.
        let mut lane_pairs: Vec<Vec<(usize, u32)>> = vec![Vec::new(); 32];
        let (mut e, mut off) = (0usize, 0u32);
        while e < row.len() {
            // The window: lane i holds entry e + i.
            let mut end = [0u32; 32];
            let mut begin = [0u32; 32];
            let mut valid = [false; 32];
            let mut acc = 0;
            for lane in 0..32 {
                let (mut b, mut c) = (0, 0);
                if e + lane < row.len() {
                    valid[lane] = true;
                    (b, c) = row[e + lane];
                    if lane == 0 {
                        b += off;
                        c -= off;
                    }
                }
                acc += c;
                end[lane] = acc;
                begin[lane] = b;
            }
            let total = end[31];
            let staged = (total as usize).min(STAGE);
            let padded = staged.div_ceil(groups) * groups;
            assert!(padded <= STAGE && padded % groups == 0);
            let mut buf = vec![None; padded];
            for (v, slot) in buf.iter_mut().enumerate() {
                if v < staged {
                    let mut i = 0;
                    let mut s = 16;
                    while s > 0 {
                        if end[i + s - 1] <= v as u32 {
                            i += s;
                        }
                        s >>= 1;
                    }
                    let before = if i > 0 { end[i - 1] } else { 0 };
                    *slot = Some(begin[i] + (v as u32 - before));
                }
            }
            let k = (0..32)
                .filter(|&i| valid[i] && end[i] <= staged as u32)
                .count();
            let before = if k == 0 { 0 } else { end[(k + 31) & 31] };
            off = if k == 0 { off } else { 0 } + (staged as u32 - before);
            e += k;
            for (lane, pairs) in lane_pairs.iter_mut().enumerate() {
                let (g, slot) = (lane / l, lane % l);
                for q in buf.iter().skip(g).step_by(groups).flatten() {
                    // Slot t computes target min(slot + L t, nc − 1), stored as slot + L t.
                    for t in 0..tpt {
                        pairs.push((slot + l * t, *q));
                    }
                }
            }
        }
        // The shuffle tree: lane x adds lane x + d for d = 16, 8, …, L (its own value when
        // x + d > 31); lanes 0..L (group 0) store their targets slot + L t < nc.
        let mut d = 16;
        while d >= l {
            let prev = lane_pairs.clone();
            for (x, pairs) in lane_pairs.iter_mut().enumerate() {
                pairs.extend_from_slice(&prev[if x + d < 32 { x + d } else { x }]);
            }
            d >>= 1;
        }
        for (slot, pairs) in lane_pairs.iter().enumerate().take(l) {
            for &(t, q) in pairs {
                // Only the lane's own targets below nc are stored.
                if (0..tpt).any(|k| slot + l * k == t) && t < nc {
                    counts[base + t][(q - first_source) as usize] += 1;
                }
            }
        }
    }
    counts
}

#[test]
fn near_leaf_layout_sums_every_pair_once() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
    for n in [1, 2, 5, 31, 32, 33, 100, 128, 129, 300] {
        for _ in 0..3 {
            // Consecutive leaves of 1 to 300 sources, some rows longer than a window of 32.
            let entries = rng.random_range(1..70);
            let mut row = Vec::new();
            let mut at = 1000;
            for _ in 0..entries {
                let c = match rng.random_range(0..4) {
                    0 => 1,
                    1 => rng.random_range(1..8),
                    2 => rng.random_range(8..130),
                    _ => rng.random_range(130..301),
                };
                row.push((at, c));
                at += c;
            }
            for tpt in [3, 4] {
                let counts = mirror_near_leaf(&row, n, tpt);
                assert!(
                    counts.iter().flatten().all(|&c| c == 1),
                    "targets {n}, {tpt} per lane, row {row:?}: a pair summed {} times",
                    counts.iter().flatten().find(|&&c| c != 1).unwrap()
                );
            }
        }
    }
}
