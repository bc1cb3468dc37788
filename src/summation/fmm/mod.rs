//! Fast multipole method for the regularised Biot–Savart law in free space (docs/physics.md §8),
//! in exafmm's vocabulary: an adaptive octree ([`tree`]), a dual-tree traversal that yields the
//! interaction lists ([`traversal`]), the solid-harmonic operators P2M, M2M, M2L, L2L and L2P
//! ([`expansions`]), the near field P2P with the exact Gaussian-cutoff kernel of
//! [`crate::kernel`], and accuracy in → parameters out ([`params`]). A built-in check compares a
//! sample of targets with the direct sum ([`check`]).
//!
//! The three components of the vortex strengths are three Laplace charges sharing one tree and
//! one set of translations; the velocity is the curl of the local expansions' first derivatives
//! and the velocity gradient (the stretching) comes from their second derivatives. Cells interact
//! through expansions only when every source–target distance between them exceeds ρ_c σ_max, so
//! the answer converges to the regularised direct sum, not the singular one.
//!
//! Implementations: [`FmmFreeSpace`] (CPU, f64, rayon) and [`CudaFmm`] (one GPU: f64
//! expansions, f32 near-field sums, tree and lists built on the host). The design leaves room
//! for the periodic box (a sum of the root's images, §8), not built yet.

pub mod check;
pub mod cpu;
pub mod cuda;
pub mod expansions;
pub mod params;
pub mod traversal;
pub mod tree;

pub use check::AccuracyCheck;
pub use cpu::FmmFreeSpace;
pub use cuda::CudaFmm;
pub use params::{plan_parameters, FmmBackend, FmmParams};

use crate::summation::{Evaluation, Extra, Sources, SumResult};
use traversal::{build_lists, Criterion, InteractionLists};
use tree::Octree;

/// Counts and phase times of one evaluation (seconds, wall clock on the host; the GPU engine
/// fills them from CUDA events).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct FmmStats {
    pub tree_seconds: f64,
    pub upward_seconds: f64,
    pub m2l_seconds: f64,
    pub downward_seconds: f64,
    pub p2p_seconds: f64,
    pub cells: usize,
    pub leaves: usize,
    pub depth: usize,
    pub m2l_pairs: usize,
    /// Source particles summed directly, over all targets.
    pub p2p_pairs: u64,
    pub targets: usize,
}

impl FmmStats {
    /// Near-field pairs per target.
    pub fn p2p_per_target(&self) -> f64 {
        self.p2p_pairs as f64 / self.targets.max(1) as f64
    }

    pub fn total_seconds(&self) -> f64 {
        self.tree_seconds
            + self.upward_seconds
            + self.m2l_seconds
            + self.downward_seconds
            + self.p2p_seconds
    }
}

/// The trees and interaction lists of one evaluation, built on the host (both engines).
pub struct Structure {
    pub sources: Octree,
    /// The target tree, `None` when the targets are the sources (one tree for both).
    pub target_tree: Option<Octree>,
    pub lists: InteractionLists,
}

impl Structure {
    /// Trees and lists for `targets` and `sources` with the parameters' criterion; `gradient`
    /// selects ρ_c (docs/physics.md §8). Leaves are not split below a side of ρ_c σ_max / 4.
    pub fn build(
        sources: &Sources,
        targets: &[[f64; 3]],
        params: &FmmParams,
        gradient: bool,
        sigma_max: f64,
    ) -> Self {
        let rho_cut = params.rho_cut(gradient);
        let min_side = 0.25 * rho_cut * sigma_max;
        let stree = Octree::build(sources.x, Some(sources.sigma), params.leaf_size, min_side);
        let same =
            std::ptr::eq(targets.as_ptr(), sources.x.as_ptr()) && targets.len() == sources.x.len();
        let target_tree = (!same).then(|| Octree::build(targets, None, params.leaf_size, min_side));
        let lists = build_lists(
            target_tree.as_ref().unwrap_or(&stree),
            &stree,
            Criterion::Multipole {
                theta: params.theta,
                rho_cut,
            },
        );
        Self {
            sources: stree,
            target_tree,
            lists,
        }
    }

    pub fn targets(&self) -> &Octree {
        self.target_tree.as_ref().unwrap_or(&self.sources)
    }

    /// Fills the counts of `stats`.
    pub fn count(&self, stats: &mut FmmStats, _order: usize) {
        let t = self.targets();
        stats.cells =
            self.sources.cells.len() + self.target_tree.as_ref().map_or(0, |t| t.cells.len());
        stats.leaves = t.leaves.len();
        stats.depth = self.sources.depth().max(t.depth());
        stats.m2l_pairs = self.lists.m2l_count();
        stats.p2p_pairs = self.lists.p2p_pairs(t, &self.sources);
        stats.targets = t.order.len();
    }
}

/// What both FMM engines keep between evaluations: the parameters planned for the accuracy, the
/// built-in check's schedule and the last evaluation's counts and times.
#[derive(Debug, Clone)]
pub struct FmmState {
    pub params: FmmParams,
    pub schedule: CheckSchedule,
    pub stats: FmmStats,
}

impl FmmState {
    /// Checked at the first evaluation and every `check_every` after (0: only the first).
    pub fn new(params: FmmParams, check_every: u64) -> Self {
        Self {
            params,
            schedule: CheckSchedule::new(check_every),
            stats: FmmStats::default(),
        }
    }
}

/// What both FMM engines ([`FmmFreeSpace`], [`CudaFmm`]) offer besides [`crate::summation::Summation`], from
/// their [`FmmState`].
pub trait Fmm: crate::summation::Summation {
    fn state(&self) -> &FmmState;
    fn state_mut(&mut self) -> &mut FmmState;

    /// The parameters planned for the accuracy.
    fn params(&self) -> &FmmParams {
        &self.state().params
    }

    /// Counts and phase times of the last evaluation (on the GPU, device phases from CUDA
    /// events; the tree phase is the host's build and the uploads).
    fn last_stats(&self) -> &FmmStats {
        &self.state().stats
    }

    /// Turns the built-in check off (benchmarks time the evaluation alone).
    fn disable_checks(&mut self) {
        self.state_mut().schedule.disable();
    }
}

/// When the built-in check runs (module [`check`]) and what it found.
#[derive(Debug, Clone)]
pub struct CheckSchedule {
    every: u64,
    evaluations: u64,
    checked_sigma: f64,
    disabled: bool,
    pending: Vec<AccuracyCheck>,
}

impl CheckSchedule {
    /// At the first evaluation, every `every` evaluations after it (0: never again) and whenever
    /// the largest core radius has grown by more than 1 % since the last check.
    pub fn new(every: u64) -> Self {
        Self {
            every,
            evaluations: 0,
            checked_sigma: 0.0,
            disabled: false,
            pending: Vec::new(),
        }
    }

    pub fn disable(&mut self) {
        self.disabled = true;
    }

    /// The checks since the last call.
    pub fn take(&mut self) -> Vec<AccuracyCheck> {
        std::mem::take(&mut self.pending)
    }

    /// Whether the next evaluation, with this largest core radius, will be checked.
    pub fn next_is_due(&self, sigma_max: f64) -> bool {
        let k = self.evaluations + 1;
        !self.disabled
            && (k == 1
                || (self.every > 0 && (k - 1).is_multiple_of(self.every))
                || (self.checked_sigma > 0.0 && sigma_max > 1.01 * self.checked_sigma))
    }

    /// Counts an evaluation and, when due, checks its result `out` against the direct sum; an
    /// error when the check misses the request by more than [`check::FAILURE_FACTOR`].
    #[allow(clippy::too_many_arguments)]
    pub fn after_evaluation(
        &mut self,
        sources: &Sources,
        targets: &[[f64; 3]],
        extra: &Extra,
        out: &Evaluation,
        sigma_max: f64,
        params: &FmmParams,
        stats: &FmmStats,
    ) -> SumResult {
        self.evaluations += 1;
        if self.disabled {
            return Ok(());
        }
        let grown = self.checked_sigma > 0.0 && sigma_max > 1.01 * self.checked_sigma;
        let due = self.evaluations == 1
            || (self.every > 0 && (self.evaluations - 1).is_multiple_of(self.every))
            || grown;
        if !due {
            return Ok(());
        }
        if grown {
            tracing::info!(
                "FMM: the largest core radius grew from {:.5} to {:.5}; near field re-planned \
                 (exact kernel within {:.2} σ_max) and checked",
                self.checked_sigma,
                sigma_max,
                params.rho_cut(!matches!(extra, Extra::None))
            );
        }
        let sample = check::sample_size(stats.p2p_pairs, sources.len(), targets.len());
        let e = check::check_sample(sources, targets, extra, out, sample, self.evaluations)?;
        let c = AccuracyCheck {
            evaluation: self.evaluations,
            sample,
            requested: params.accuracy,
            sigma_max,
            velocity_l2: e[0],
            velocity_max: e[1],
            derivative_l2: e[2],
            derivative_max: e[3],
        };
        tracing::info!("{c}");
        self.checked_sigma = sigma_max;
        self.pending.push(c);
        if c.passed() {
            Ok(())
        } else {
            Err(c.failure())
        }
    }
}
