//! The FMM on the CPU: f64 throughout, rayon over cells and leaves, deterministic for any number
//! of threads (every sum runs in a fixed order: lists in traversal order, children in cell
//! order). One engine ([`evaluate_tree`]) generic in the pair interaction and its number of
//! charges K; [`FmmFreeSpace`] runs it for the Biot–Savart law, [`FmmGravity`] for Plummer
//! gravity.

use super::cartesian::evaluate_gravity;
use super::expansions::{coefficient_count, l2l, l2p, m2l, m2m, p2m, Workspace};
use super::params::{plan_gravity_parameters, plan_parameters, FmmBackend, FmmParams};
use super::traversal::{build_lists, Criterion};
use super::tree::Octree;
use super::{AccuracyCheck, Fmm, FmmState, FmmStats, GravityFmmState, Structure};
use crate::kernel::gaussian_zeta;
use crate::summation::interaction::{
    store_gravity, BiotSavart, GravityEvaluation, GravitySummation, GravityWork, PairInteraction,
    PlummerGravity, Vortex,
};
use crate::summation::{
    begin_vorticity, sigma_range, stretching_from_gradient, Boundary, Evaluation, Extra, Request,
    Sources, SumResult, Summation, SummationError,
};
use num_complex::Complex64 as C64;
use rayon::prelude::*;
use std::time::Instant;

/// Targets per rayon task of L2P and P2P (a leaf with more is split between tasks).
const TARGET_CHUNK: usize = 64;

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
    pub fn new(accuracy: f64, check_every: u64) -> Result<Self, SummationError> {
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

/// Sources in tree order (contiguous per cell): positions, the interaction's source data and
/// its K charges.
struct SortedSources<S, const K: usize> {
    x: Vec<[f64; 3]>,
    src: Vec<S>,
    charges: Vec<[f64; K]>,
}

impl<S: Copy + Send + Sync, const K: usize> SortedSources<S, K> {
    /// The sources at `x` with data `source(i)` in the order of `tree`.
    fn new<I: PairInteraction<K, Source = S>>(
        interaction: &I,
        x: &[[f64; 3]],
        tree: &Octree,
        source: impl Fn(usize) -> S + Sync,
    ) -> Self {
        let order = &tree.order;
        let src: Vec<S> = order.par_iter().map(|&i| source(i as usize)).collect();
        Self {
            x: order.par_iter().map(|&i| x[i as usize]).collect(),
            charges: src.par_iter().map(|s| interaction.charges(s)).collect(),
            src,
        }
    }
}

/// Multipole expansions of every source cell: leaves by P2M, the others by M2M from their
/// children, deepest level first.
fn upward<S: Sync, const K: usize>(tree: &Octree, src: &SortedSources<S, K>, p: usize) -> Vec<C64> {
    let stride = K * coefficient_count(p);
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
                        p2m(ws, cell.center, &src.x[r.clone()], &src.charges[r], m);
                    } else {
                        for ch in cell.children() {
                            let child = &tree.cells[ch];
                            let d = [0, 1, 2].map(|k| cell.center[k] - child.center[k]);
                            let o = (ch - deeper_start) * stride;
                            m2m::<K>(ws, d, &deeper[o..o + stride], m);
                        }
                    }
                },
            );
    }
    mult
}

/// Local expansions of every target cell: M2L from its list (each source cell moved by its
/// image shift), then `root_local` added to the target root's (the periodic box's far images),
/// then L2L from its parent, top level first.
fn downward<const K: usize>(
    st: &Structure,
    mult: &[C64],
    (p, root_local): (usize, Option<&[C64]>),
    stats: &mut FmmStats,
) -> Vec<C64> {
    let (targets, sources) = (st.targets(), &st.sources);
    let stride = K * coefficient_count(p);
    let t0 = Instant::now();
    let mut local = vec![C64::new(0.0, 0.0); targets.cells.len() * stride];
    local.par_chunks_mut(stride).enumerate().for_each_init(
        || Workspace::new(p),
        |ws, (tc, l)| {
            let a = &targets.cells[tc];
            let entries = st.lists.m2l_offsets[tc] as usize..st.lists.m2l_offsets[tc + 1] as usize;
            for e in entries {
                let sc = st.lists.m2l_sources[e] as usize;
                let (b, s) = (&sources.cells[sc], st.m2l_shift(e));
                let d = [0, 1, 2].map(|k| a.center[k] - b.center[k] - s[k]);
                let o = sc * stride;
                m2l::<K>(ws, d, &mult[o..o + stride], l);
            }
        },
    );
    if let Some(r) = root_local {
        for (l, v) in local.iter_mut().zip(r) {
            *l += v;
        }
    }
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
                    l2l::<K>(ws, d, &upper[o..o + stride], l);
                },
            );
    }
    stats.downward_seconds = t1.elapsed().as_secs_f64();
    local
}

/// The FMM of one interaction on built trees and lists: upward pass, M2L and L2L, then per
/// target leaf L2P (the interaction's far field from the potentials' derivatives) and P2P (its
/// exact pair, the source moved by the entry's image shift). `root_local` (order p, about the
/// target root's centre) is added to the root's local expansion. The answers in the order of
/// `targets`; the phase times into `stats`.
fn evaluate_tree<I: PairInteraction<K>, const K: usize>(
    interaction: &I,
    st: &Structure,
    src: &SortedSources<I::Source, K>,
    targets: &[[f64; 3]],
    (p, root_local): (usize, Option<&[C64]>),
    stats: &mut FmmStats,
) -> Vec<I::Answer> {
    let t1 = Instant::now();
    let mult = upward(&st.sources, src, p);
    stats.upward_seconds = t1.elapsed().as_secs_f64();
    let local = downward::<K>(st, &mult, (p, root_local), stats);

    let t2 = Instant::now();
    let ttree = st.targets();
    let orders = interaction.derivative_orders();
    let stride = K * coefficient_count(p);
    // Work items of at most TARGET_CHUNK targets of one leaf: leaves held large by the near
    // field's size (a wide softening) are shared between threads too.
    let work: Vec<(usize, std::ops::Range<usize>)> = ttree
        .leaves
        .iter()
        .enumerate()
        .flat_map(|(li, &leaf)| {
            let r = ttree.cells[leaf as usize].particles();
            (r.start..r.end)
                .step_by(TARGET_CHUNK)
                .map(move |b| (li, b..(b + TARGET_CHUNK).min(r.end)))
        })
        .collect();
    let per_item: Vec<Vec<I::Answer>> = work
        .par_iter()
        .map_init(
            || Workspace::new(p),
            |ws, (li, range)| {
                let leaf = ttree.leaves[*li] as usize;
                let cell = &ttree.cells[leaf];
                let l = &local[leaf * stride..(leaf + 1) * stride];
                let near = st.lists.p2p_of(*li);
                let first = st.lists.p2p_offsets[*li] as usize;
                range
                    .clone()
                    .map(|i| {
                        let x = targets[ttree.order[i] as usize];
                        let d = [0, 1, 2].map(|k| x[k] - cell.center[k]);
                        let mut acc = interaction.far_field(&l2p::<K>(ws, d, l, orders));
                        for (e, &sl) in near.iter().enumerate() {
                            let s = st.p2p_shift(first + e);
                            for q in st.sources.cells[sl as usize].particles() {
                                let y = src.x[q];
                                let r = [0, 1, 2].map(|k| x[k] - y[k] - s[k]);
                                interaction.add_pair(r, &src.src[q], &mut acc);
                            }
                        }
                        acc
                    })
                    .collect()
            },
        )
        .collect();
    let mut answers = vec![I::Answer::default(); targets.len()];
    for ((_, range), item) in work.iter().zip(&per_item) {
        for (i, a) in range.clone().zip(item) {
            answers[ttree.order[i] as usize] = *a;
        }
    }
    stats.p2p_seconds = t2.elapsed().as_secs_f64();
    answers
}

/// The Biot–Savart FMM of one request on the CPU: the trees and lists from `structure` (given
/// the near field's (ρ_c, σ_max)), `root_local` (given them; order p about the target root's
/// centre: the periodic box's far images, timed with the M2L) added to the root's local
/// expansion, then the velocity and the stretching or gradient into `out`. Its counts and
/// times.
pub(super) fn evaluate_biot_savart(
    params: &FmmParams,
    req: &Request,
    out: &mut Evaluation,
    structure: impl FnOnce((f64, f64)) -> Structure,
    root_local: impl FnOnce(&Structure) -> Option<Vec<C64>>,
) -> FmmStats {
    let (sources, targets, extra) = (req.sources, req.targets, req.extra);
    let sigma_max = sources.sigma.iter().copied().fold(0.0, f64::max);
    let gradient = !matches!(extra, Extra::None);
    let p = params.order;
    let mut stats = FmmStats::default();
    let interaction = BiotSavart {
        gradient,
        singular_beyond: params.rho_cut(gradient),
    };

    let t0 = Instant::now();
    let st = structure((params.rho_cut(gradient), sigma_max));
    let src = SortedSources::new(&interaction, sources.x, &st.sources, |i| Vortex {
        alpha: sources.alpha[i],
        sigma: sources.sigma[i],
    });
    stats.tree_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let far = root_local(&st);
    let far_seconds = t1.elapsed().as_secs_f64();

    let answers = evaluate_tree(
        &interaction,
        &st,
        &src,
        targets,
        (p, far.as_deref()),
        &mut stats,
    );
    stats.m2l_seconds += far_seconds;
    let t2 = Instant::now();
    for (t, a) in answers.iter().enumerate() {
        out.velocity[t] = a.0;
        match extra {
            Extra::None => {}
            Extra::Gradient => out.gradient[t] = a.1,
            Extra::Stretching { alpha, scheme } => {
                out.stretching[t] = stretching_from_gradient(&a.1, &alpha[t], scheme)
            }
        }
    }
    stats.p2p_seconds += t2.elapsed().as_secs_f64();
    st.count(&mut stats, p);
    stats
}

impl Summation for FmmFreeSpace {
    fn name(&self) -> String {
        format!("FMM free-space CPU f64, {}", self.state.params)
    }

    fn boundary(&self) -> Boundary {
        Boundary::FreeSpace
    }

    fn evaluate_request(&mut self, req: Request, out: &mut Evaluation) -> SumResult {
        let (_, sigma_max) = sigma_range(req.sources)?;
        let params = self.state.params;
        let stats = evaluate_biot_savart(
            &params,
            &req,
            out,
            |near| {
                Structure::build_scaled(
                    (req.sources.x, req.sources.sigma),
                    req.targets,
                    &params,
                    near,
                )
            },
            |_| None,
        );
        self.state.stats = stats;
        self.state.schedule.after_evaluation(
            req.sources,
            req.targets,
            &req.extra,
            out,
            sigma_max,
            &params,
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
        let bs = BiotSavart::exact(false);
        let sorted = SortedSources::new(&bs, src.x, &stree, |i| Vortex {
            alpha: src.alpha[i],
            sigma: src.sigma[i],
        });
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
                                let z = gaussian_zeta(r2, sorted.src[q].sigma);
                                for (a, w) in acc.iter_mut().zip(sorted.src[q].alpha) {
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

/// Softened gravity by the FMM on the CPU (f64): the trees and lists of [`FmmFreeSpace`] with
/// Cartesian expansions of the softened kernel itself ([`super::cartesian`]): the near field is
/// only the opening criterion's, exact softened pairs (docs/physics.md §8.1). Checks itself against
/// [`crate::summation::direct::DirectGravity`] on a sample, as the Biot–Savart FMM does.
#[derive(Debug, Clone)]
pub struct FmmGravity {
    core: GravityFmmState,
}

impl FmmGravity {
    /// Plans the parameters for `accuracy` and the softening of `gravity` (an error when the CPU
    /// cannot deliver it); checks at the first evaluation and every `check_every` after (0:
    /// only the first).
    pub fn new(
        gravity: PlummerGravity,
        accuracy: f64,
        check_every: u64,
    ) -> Result<Self, SummationError> {
        let params = plan_gravity_parameters(accuracy, FmmBackend::Cpu, gravity)?;
        Ok(Self::with_params(gravity, params, check_every))
    }

    /// With explicit parameters (tests and benchmarks).
    pub fn with_params(gravity: PlummerGravity, params: FmmParams, check_every: u64) -> Self {
        Self {
            core: GravityFmmState::new(gravity, params, check_every),
        }
    }
}

impl GravitySummation for FmmGravity {
    fn name(&self) -> String {
        self.core.name("CPU f64")
    }

    fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck> {
        self.core.fmm.schedule.take()
    }

    fn gravity(&self) -> PlummerGravity {
        self.core.gravity()
    }

    fn evaluate_bodies(&mut self, work: GravityWork, out: &mut GravityEvaluation) -> SumResult {
        let gravity = self.core.gravity();
        let bodies = work.bodies;
        self.core.evaluate(work, out, |params, tx, out| {
            let mut stats = FmmStats::default();
            let t0 = Instant::now();
            let st = Structure::build_gravity(bodies.x, tx, params);
            stats.tree_seconds = t0.elapsed().as_secs_f64();
            let sources = (bodies.x, bodies.mass);
            let answers = evaluate_gravity(gravity, &st, sources, tx, params.order, &mut stats);
            store_gravity(&answers, out);
            st.count(&mut stats, params.order);
            Ok(stats)
        })
    }
}

impl Fmm for FmmGravity {
    fn state(&self) -> &FmmState {
        &self.core.fmm
    }
    fn state_mut(&mut self) -> &mut FmmState {
        &mut self.core.fmm
    }
}
