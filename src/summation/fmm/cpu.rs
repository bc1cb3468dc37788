//! The FMM on the CPU: f64 throughout, rayon over cells and leaves, deterministic for any number
//! of threads (every sum runs in a fixed order: lists in traversal order, children in cell
//! order).

use super::expansions::{coefficient_count, l2l, l2p, m2l, m2m, p2m, Workspace};
use super::params::{plan_parameters, FmmBackend, FmmParams};
use super::traversal::{build_lists, Criterion};
use super::tree::Octree;
use super::{AccuracyCheck, Fmm, FmmState, FmmStats, Structure};
use crate::kernel::{gaussian_zeta, pair_coefficients, singular_pair_coefficients};
use crate::summation::{
    begin_vorticity, sigma_range, stretching_from_gradient, Boundary, Evaluation, Extra, Request,
    Sources, SumResult, Summation,
};
use num_complex::Complex64 as C64;
use rayon::prelude::*;
use std::time::Instant;

/// Blob vorticity is summed over sources within this many σ_max of the target (the Gaussian is
/// e^{−ρ²/2} < 1e-17 of its peak beyond).
pub const VORTICITY_CUTOFF: f64 = 9.0;

/// The FMM in free space on the CPU (f64).
#[derive(Debug, Clone)]
pub struct FmmFreeSpace {
    state: FmmState,
}

impl FmmFreeSpace {
    /// Plans the parameters for `accuracy` (an error when the CPU cannot deliver it); checks
    /// against the direct sum at the first evaluation and every `check_every` after (0: only
    /// the first).
    pub fn new(accuracy: f64, check_every: u64) -> Result<Self, crate::summation::SummationError> {
        Ok(Self::with_params(
            plan_parameters(accuracy, FmmBackend::Cpu)?,
            check_every,
        ))
    }

    /// With explicit parameters (tests and benchmarks).
    pub fn with_params(params: FmmParams, check_every: u64) -> Self {
        Self {
            state: FmmState::new(params, check_every),
        }
    }
}

/// Per-target results in tree order: velocity and gradient of the velocity.
type Answer = ([f64; 3], [[f64; 3]; 3]);

/// Velocity (1/4π) ∇ × φ and its gradient (1/4π) ε_ikl ∂_j ∂_k φ_l from the derivatives of the
/// three potentials φ_c = Σ α_c/|x − y| (docs/physics.md §8).
fn curl_of_potentials(g: &[[f64; 3]; 3], h: &[[[f64; 3]; 3]; 3]) -> Answer {
    let f = <f64 as crate::kernel::Real>::FRAC_1_4PI;
    let u = [
        f * (g[2][1] - g[1][2]),
        f * (g[0][2] - g[2][0]),
        f * (g[1][0] - g[0][1]),
    ];
    let mut du = [[0.0; 3]; 3];
    for j in 0..3 {
        du[0][j] = f * (h[2][1][j] - h[1][2][j]);
        du[1][j] = f * (h[0][2][j] - h[2][0][j]);
        du[2][j] = f * (h[1][0][j] - h[0][1][j]);
    }
    (u, du)
}

/// P2P: adds to `acc` the velocity (and gradient when `gradient`) at `x` of the sources `ys`,
/// exact kernel within ρ_c σ_q, singular beyond (docs/physics.md §8).
#[inline]
fn p2p(
    x: [f64; 3],
    ys: &[[f64; 3]],
    alphas: &[[f64; 3]],
    sigmas: &[f64],
    rho_cut: f64,
    gradient: bool,
    acc: &mut Answer,
) {
    let rc2 = rho_cut * rho_cut;
    for q in 0..ys.len() {
        let r = [x[0] - ys[q][0], x[1] - ys[q][1], x[2] - ys[q][2]];
        let r2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
        let s = sigmas[q];
        let (k, l) = if r2 > rc2 * s * s {
            singular_pair_coefficients(r2)
        } else {
            pair_coefficients(r2, s)
        };
        let a = alphas[q];
        let c = [
            a[1] * r[2] - a[2] * r[1],
            a[2] * r[0] - a[0] * r[2],
            a[0] * r[1] - a[1] * r[0],
        ];
        acc.0[0] += k * c[0];
        acc.0[1] += k * c[1];
        acc.0[2] += k * c[2];
        if gradient {
            // ∂u_i/∂x_j = k ε_ikj α_k − l c_i r_j.
            let m = [[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]];
            for i in 0..3 {
                for j in 0..3 {
                    acc.1[i][j] += k * m[i][j] - l * c[i] * r[j];
                }
            }
        }
    }
}

/// Sources in tree order (contiguous per cell).
struct SortedSources {
    x: Vec<[f64; 3]>,
    alpha: Vec<[f64; 3]>,
    sigma: Vec<f64>,
}

impl SortedSources {
    fn new(s: &Sources, tree: &Octree) -> Self {
        let order = &tree.order;
        Self {
            x: order.par_iter().map(|&i| s.x[i as usize]).collect(),
            alpha: order.par_iter().map(|&i| s.alpha[i as usize]).collect(),
            sigma: order.par_iter().map(|&i| s.sigma[i as usize]).collect(),
        }
    }
}

/// Multipole expansions of every source cell: leaves by P2M, the others by M2M from their
/// children, deepest level first.
fn upward(tree: &Octree, src: &SortedSources, p: usize) -> Vec<C64> {
    let stride = 3 * coefficient_count(p);
    let mut mult = vec![C64::new(0.0, 0.0); tree.cells.len() * stride];
    for l in (0..tree.depth()).rev() {
        let range = tree.levels[l].clone();
        let split = range.end * stride;
        let (head, deeper) = mult.split_at_mut(split);
        let deeper_start = range.end;
        head[range.start * stride..]
            .par_chunks_mut(stride)
            .enumerate()
            .for_each_init(
                || Workspace::new(p),
                |ws, (i, m)| {
                    let cell = &tree.cells[range.start + i];
                    if cell.is_leaf() {
                        let r = cell.particles();
                        p2m(ws, cell.center, &src.x[r.clone()], &src.alpha[r], m);
                    } else {
                        for ch in cell.children() {
                            let child = &tree.cells[ch];
                            let d = [0, 1, 2].map(|k| cell.center[k] - child.center[k]);
                            let o = (ch - deeper_start) * stride;
                            m2m(ws, d, &deeper[o..o + stride], m);
                        }
                    }
                },
            );
    }
    mult
}

/// Local expansions of every target cell: M2L from its list, then L2L from its parent, top
/// level first.
fn downward(
    targets: &Octree,
    sources: &Octree,
    st: &Structure,
    mult: &[C64],
    p: usize,
    stats: &mut FmmStats,
) -> Vec<C64> {
    let stride = 3 * coefficient_count(p);
    let t0 = Instant::now();
    let mut local = vec![C64::new(0.0, 0.0); targets.cells.len() * stride];
    local.par_chunks_mut(stride).enumerate().for_each_init(
        || Workspace::new(p),
        |ws, (tc, l)| {
            let a = &targets.cells[tc];
            for &sc in st.lists.m2l_of(tc) {
                let b = &sources.cells[sc as usize];
                let d = [0, 1, 2].map(|k| a.center[k] - b.center[k]);
                let o = sc as usize * stride;
                m2l(ws, d, &mult[o..o + stride], l);
            }
        },
    );
    stats.m2l_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for lv in 1..targets.depth() {
        let range = targets.levels[lv].clone();
        let (upper, cur) = local.split_at_mut(range.start * stride);
        cur[..range.len() * stride]
            .par_chunks_mut(stride)
            .enumerate()
            .for_each_init(
                || Workspace::new(p),
                |ws, (i, l)| {
                    let cell = &targets.cells[range.start + i];
                    let parent = &targets.cells[cell.parent as usize];
                    let d = [0, 1, 2].map(|k| cell.center[k] - parent.center[k]);
                    let o = cell.parent as usize * stride;
                    l2l(ws, d, &upper[o..o + stride], l);
                },
            );
    }
    stats.downward_seconds = t1.elapsed().as_secs_f64();
    local
}

impl Summation for FmmFreeSpace {
    fn name(&self) -> String {
        format!("FMM free-space CPU f64, {}", self.state.params)
    }

    fn boundary(&self) -> Boundary {
        Boundary::FreeSpace
    }

    fn evaluate_request(&mut self, req: Request, out: &mut Evaluation) -> SumResult {
        let (sources, targets, extra) = (req.sources, req.targets, req.extra);
        let (_, sigma_max) = sigma_range(sources)?;
        let gradient = !matches!(extra, Extra::None);
        let p = self.state.params.order;
        let mut stats = FmmStats::default();

        let t0 = Instant::now();
        let st = Structure::build(sources, targets, &self.state.params, gradient, sigma_max);
        let src = SortedSources::new(sources, &st.sources);
        stats.tree_seconds = t0.elapsed().as_secs_f64();

        let t1 = Instant::now();
        let mult = upward(&st.sources, &src, p);
        stats.upward_seconds = t1.elapsed().as_secs_f64();
        let ttree = st.targets();
        let local = downward(ttree, &st.sources, &st, &mult, p, &mut stats);

        // L2P and P2P per target leaf.
        let t2 = Instant::now();
        let rho_cut = self.state.params.rho_cut(gradient);
        let stride = 3 * coefficient_count(p);
        let per_leaf: Vec<Vec<Answer>> = ttree
            .leaves
            .par_iter()
            .enumerate()
            .map_init(
                || Workspace::new(p),
                |ws, (li, &leaf)| {
                    let cell = &ttree.cells[leaf as usize];
                    let l = &local[leaf as usize * stride..(leaf as usize + 1) * stride];
                    let near = st.lists.p2p_of(li);
                    cell.particles()
                        .map(|i| {
                            let x = targets[ttree.order[i] as usize];
                            let d = [0, 1, 2].map(|k| x[k] - cell.center[k]);
                            let pd = l2p(ws, d, l, gradient);
                            let mut acc = curl_of_potentials(&pd.gradient, &pd.hessian);
                            for &sl in near {
                                let r = st.sources.cells[sl as usize].particles();
                                p2p(
                                    x,
                                    &src.x[r.clone()],
                                    &src.alpha[r.clone()],
                                    &src.sigma[r],
                                    rho_cut,
                                    gradient,
                                    &mut acc,
                                );
                            }
                            acc
                        })
                        .collect()
                },
            )
            .collect();
        for (&leaf, answers) in ttree.leaves.iter().zip(&per_leaf) {
            let cell = &ttree.cells[leaf as usize];
            for (i, a) in cell.particles().zip(answers) {
                let t = ttree.order[i] as usize;
                out.velocity[t] = a.0;
                match extra {
                    Extra::None => {}
                    Extra::Gradient => out.gradient[t] = a.1,
                    Extra::Stretching { alpha, scheme } => {
                        out.stretching[t] = stretching_from_gradient(&a.1, &alpha[t], scheme)
                    }
                }
            }
        }
        stats.p2p_seconds = t2.elapsed().as_secs_f64();
        st.count(&mut stats, p);
        self.state.stats = stats;
        self.state.schedule.after_evaluation(
            sources,
            targets,
            &extra,
            out,
            sigma_max,
            &self.state.params,
            &stats,
        )
    }

    fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck> {
        self.state.schedule.take()
    }

    fn vorticity(&mut self, src: &Sources, at: &[[f64; 3]], out: &mut Vec<[f64; 3]>) -> SumResult {
        if begin_vorticity(src, at, out)? {
            return Ok(());
        }
        let (_, sigma_max) = sigma_range(src)?;
        let leaf = self.state.params.leaf_size;
        let min_side = 0.25 * VORTICITY_CUTOFF * sigma_max;
        let stree = Octree::build(src.x, Some(src.sigma), leaf, min_side);
        let ttree = Octree::build(at, None, leaf, min_side);
        let lists = build_lists(
            &ttree,
            &stree,
            Criterion::NearOnly {
                cutoff: VORTICITY_CUTOFF,
            },
        );
        let sorted = SortedSources::new(src, &stree);
        let per_leaf: Vec<Vec<[f64; 3]>> = ttree
            .leaves
            .par_iter()
            .enumerate()
            .map(|(li, &leaf)| {
                ttree.cells[leaf as usize]
                    .particles()
                    .map(|i| {
                        let x = at[ttree.order[i] as usize];
                        let mut acc = [0.0; 3];
                        for &sl in lists.p2p_of(li) {
                            for q in stree.cells[sl as usize].particles() {
                                let y = sorted.x[q];
                                let r2 = (x[0] - y[0]).powi(2)
                                    + (x[1] - y[1]).powi(2)
                                    + (x[2] - y[2]).powi(2);
                                let z = gaussian_zeta(r2, sorted.sigma[q]);
                                for (a, w) in acc.iter_mut().zip(sorted.alpha[q]) {
                                    *a += w * z;
                                }
                            }
                        }
                        acc
                    })
                    .collect()
            })
            .collect();
        for (&leaf, w) in ttree.leaves.iter().zip(&per_leaf) {
            for (i, v) in ttree.cells[leaf as usize].particles().zip(w) {
                out[ttree.order[i] as usize] = *v;
            }
        }
        Ok(())
    }
}

impl Fmm for FmmFreeSpace {
    fn state(&self) -> &FmmState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut FmmState {
        &mut self.state
    }
}
