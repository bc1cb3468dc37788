//! Fast multipole method in free space for a pair interaction (docs/physics.md §8), in exafmm's
//! vocabulary: an adaptive octree ([`tree`]), a dual-tree traversal that yields the interaction
//! lists ([`traversal`]), the solid-harmonic operators P2M, M2M, M2L, L2L and L2P, generic in the
//! number of Laplace charges per source ([`expansions`]), the near field P2P with the
//! interaction's exact pair, and accuracy in → parameters out ([`params`]). A built-in check
//! compares a sample of targets with the direct sum ([`check`]).
//!
//! The interaction ([`crate::summation::interaction::PairInteraction`]) says what the charges
//! are and what the answer is made of: for the regularised Biot–Savart law the three components
//! of the vortex strengths are three Laplace charges sharing one tree and one set of
//! translations, the velocity is the curl of the local expansions' first derivatives and the
//! velocity gradient (the stretching) comes from their second derivatives. Cells interact
//! through expansions only when every source–target distance between them exceeds the
//! interaction's near-field radius (ρ_c σ_max), so the answer converges to the exact direct sum,
//! not the singular one. Plummer gravity instead expands the softened kernel itself (Cartesian
//! Taylor expansions, [`cartesian`]; the mass is one charge, φ and a come from the potential and
//! its gradient), so its near field is only the opening criterion's.
//!
//! Implementations: [`FmmFreeSpace`] (Biot–Savart, CPU, f64, rayon), [`FmmGravity`] (gravity,
//! CPU, f64), [`CudaFmm`] (Biot–Savart on one GPU: f64 expansions, f32 near-field sums, tree
//! and lists built on the device, [`gpu_tree`], equal to the host's) and [`CudaFmmGravity`] (gravity on one GPU, the same far-field
//! kernels with one charge). [`FmmPeriodic`] (Biot–Savart, CPU, f64) sums the periodic box:
//! the near images through the traversal, the far ones by a lattice sum of the root's
//! expansion, and the conditionally convergent term made the Ewald sum's ([`periodic`],
//! docs/physics.md §4); [`CudaFmm::periodic`] is the same on one GPU ([`cuda_periodic`]).

pub mod cartesian;
pub mod check;
pub mod cpu;
pub mod cuda;
pub mod cuda_cartesian;
pub mod cuda_gravity;
pub mod cuda_periodic;
pub mod expansions;
pub mod gpu_tree;
pub mod m2l_layout;
pub mod params;
pub mod periodic;
pub mod traversal;
pub mod tree;

pub use check::AccuracyCheck;
pub use cpu::{FmmFreeSpace, FmmGravity};
pub use cuda::CudaFmm;
pub use cuda_gravity::CudaFmmGravity;
pub use params::{plan_gravity_parameters, plan_parameters, FmmBackend, FmmParams};
pub use periodic::FmmPeriodic;

use crate::summation::direct::{DirectFreeSpace, DirectGravity};
use crate::summation::interaction::{
    Bodies, GravityEvaluation, GravitySummation, GravityWork, PlummerGravity,
};
use crate::summation::{Evaluation, Extra, Request, Sources, SumResult, Summation, SummationError};
use traversal::{build_image_lists, build_lists, Criterion, InteractionLists};
use tree::Octree;

/// Counts and phase times of one evaluation (seconds, wall clock on the host; the GPU engines
/// fill them from CUDA events, the tree phase included).
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

/// The trees and interaction lists of one evaluation, built on the host (the CPU engines, and
/// the reference the GPU's [`gpu_tree`] build is tested against).
pub struct Structure {
    pub sources: Octree,
    /// The target tree, `None` when the targets are the sources (one tree for both).
    pub target_tree: Option<Octree>,
    pub lists: InteractionLists,
    /// The image shifts of the lists' entries (the periodic box); `None` in free space.
    pub images: Option<ImageShifts>,
}

/// The shift of every list entry of a [`Structure`] built with images
/// ([`traversal::build_image_lists`]): a table of shift vectors and an index into it per M2L
/// and per P2P entry.
#[derive(Debug, Clone)]
pub struct ImageShifts {
    pub table: Vec<[f64; 3]>,
    pub m2l: Vec<u16>,
    pub p2p: Vec<u16>,
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
        let near = (params.rho_cut(gradient), sigma_max);
        Self::build_scaled((sources.x, sources.sigma), targets, params, near)
    }

    /// Trees and lists for `targets` and the sources at `x` whose kernels depart from the
    /// singular one on the lengths `scale` (one per source, [`PairInteraction::source_scale`]):
    /// expansions only beyond `rho_cut` × the scale, `scale_max` the largest. Leaves are not
    /// split below a side of `rho_cut` × `scale_max` / 4.
    ///
    /// [`PairInteraction::source_scale`]: crate::summation::interaction::PairInteraction::source_scale
    pub fn build_scaled(
        (x, scale): (&[[f64; 3]], &[f64]),
        targets: &[[f64; 3]],
        params: &FmmParams,
        near: (f64, f64),
    ) -> Self {
        let (stree, target_tree, criterion) = Self::trees((x, scale), targets, params, near);
        let lists = build_lists(target_tree.as_ref().unwrap_or(&stree), &stree, criterion);
        Self {
            sources: stree,
            target_tree,
            lists,
            images: None,
        }
    }

    /// Trees and lists of a periodic sum: the sources at `x` (wrapped into the box) seen from
    /// `targets` through every shift of `shifts` (the near images, [`periodic`]); otherwise as
    /// [`Structure::build_scaled`].
    pub fn build_images(
        (x, scale): (&[[f64; 3]], &[f64]),
        targets: &[[f64; 3]],
        params: &FmmParams,
        near: (f64, f64),
        shifts: Vec<[f64; 3]>,
    ) -> Self {
        let (stree, target_tree, criterion) = Self::trees((x, scale), targets, params, near);
        let l = build_image_lists(
            target_tree.as_ref().unwrap_or(&stree),
            &stree,
            criterion,
            &shifts,
        );
        Self {
            sources: stree,
            target_tree,
            lists: l.lists,
            images: Some(ImageShifts {
                table: shifts,
                m2l: l.m2l_shifts,
                p2p: l.p2p_shifts,
            }),
        }
    }

    /// The source tree, the target tree (`None` when the targets are the sources) and the
    /// traversal's criterion of [`Structure::build_scaled`].
    fn trees(
        (x, scale): (&[[f64; 3]], &[f64]),
        targets: &[[f64; 3]],
        params: &FmmParams,
        (rho_cut, scale_max): (f64, f64),
    ) -> (Octree, Option<Octree>, Criterion) {
        let min_side = gpu_tree::min_leaf_side(rho_cut, scale_max);
        let stree = Octree::build(x, Some(scale), params.leaf_size, min_side);
        let same = std::ptr::eq(targets.as_ptr(), x.as_ptr()) && targets.len() == x.len();
        let target_tree = (!same).then(|| Octree::build(targets, None, params.leaf_size, min_side));
        let criterion = Criterion::Multipole {
            theta: params.theta,
            rho_cut,
        };
        (stree, target_tree, criterion)
    }

    /// The shift of M2L entry `e` (of `lists.m2l_sources`): zero in free space.
    #[inline]
    pub fn m2l_shift(&self, e: usize) -> [f64; 3] {
        self.images
            .as_ref()
            .map_or([0.0; 3], |i| i.table[i.m2l[e] as usize])
    }

    /// The shift of P2P entry `e` (of `lists.p2p_sources`): zero in free space.
    #[inline]
    pub fn p2p_shift(&self, e: usize) -> [f64; 3] {
        self.images
            .as_ref()
            .map_or([0.0; 3], |i| i.table[i.p2p[e] as usize])
    }

    /// Trees and lists of a gravitational sum ([`super::interaction::PlummerGravity`]) on the
    /// bodies at `x` for `targets`: the near-field radius is absolute (`rho_cut_velocity`, every
    /// body's length scale 1).
    pub fn build_gravity(x: &[[f64; 3]], targets: &[[f64; 3]], params: &FmmParams) -> Self {
        let scale = vec![1.0; x.len()];
        Self::build_scaled((x, &scale), targets, params, (params.rho_cut_velocity, 1.0))
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

/// What the FMM engines ([`FmmFreeSpace`], [`FmmGravity`], [`CudaFmm`]) offer besides their
/// summation trait, from their [`FmmState`].
pub trait Fmm {
    fn state(&self) -> &FmmState;
    fn state_mut(&mut self) -> &mut FmmState;

    /// The parameters planned for the accuracy.
    fn params(&self) -> &FmmParams {
        &self.state().params
    }

    /// Counts and phase times of the last evaluation (on the GPU, device phases from CUDA
    /// events; the tree phase is the device's build of the trees and lists, without the host
    /// form's uploads).
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

    /// Counts an evaluation (with this largest core radius; 0 when the sources have none) and
    /// says whether it is to be checked: `None` when not, else whether the core radius grew.
    pub fn count_evaluation(&mut self, sigma_max: f64) -> Option<bool> {
        self.evaluations += 1;
        if self.disabled {
            return None;
        }
        let grown = self.checked_sigma > 0.0 && sigma_max > 1.01 * self.checked_sigma;
        let due = self.evaluations == 1
            || (self.every > 0 && (self.evaluations - 1).is_multiple_of(self.every))
            || grown;
        due.then_some(grown)
    }

    /// Logs and keeps a check of the evaluation just counted; an error when it misses the
    /// request (by more than [`check::FAILURE_FACTOR`]).
    pub fn record(&mut self, c: AccuracyCheck) -> SumResult {
        tracing::info!("{c}");
        if !c.meets_contract() {
            tracing::info!(
                "FMM check at evaluation {}: outside the contract (relative L2 ≤ {:e}, sampled \
                 maximum ≤ {:e}); the run goes on while the L2 errors stay within {}× the request",
                c.evaluation,
                c.requested,
                check::MAX_FACTOR * c.requested,
                check::FAILURE_FACTOR
            );
        }
        self.checked_sigma = c.sigma_max;
        self.pending.push(c);
        if c.passed() {
            Ok(())
        } else {
            Err(c.failure())
        }
    }

    /// Counts an evaluation and, when due, checks its result `out` against the direct sum; an
    /// error when the check misses the request (by more than [`check::FAILURE_FACTOR`]).
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
        let req = Request {
            sources,
            targets,
            extra: *extra,
        };
        self.after_evaluation_against(&mut DirectFreeSpace, &req, out, sigma_max, params, stats)
    }

    /// [`CheckSchedule::after_evaluation`] of the request `req` against `reference` (the
    /// periodic FMM's: a finer Ewald sum).
    pub fn after_evaluation_against(
        &mut self,
        reference: &mut dyn Summation,
        req: &Request,
        out: &Evaluation,
        sigma_max: f64,
        params: &FmmParams,
        stats: &FmmStats,
    ) -> SumResult {
        let (sources, targets, extra) = (req.sources, req.targets, &req.extra);
        let Some(grown) = self.count_evaluation(sigma_max) else {
            return Ok(());
        };
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
        let seed = self.evaluations;
        let e = check::check_sample(reference, sources, targets, extra, out, sample, seed)?;
        self.record(AccuracyCheck {
            evaluation: self.evaluations,
            sample,
            requested: params.accuracy,
            sigma_max,
            outputs: check::BIOT_SAVART_OUTPUTS,
            velocity_l2: e[0],
            velocity_max: e[1],
            derivative_l2: e[2],
            derivative_max: e[3],
        })
    }

    /// Which evaluation was counted last (1 = the first).
    pub fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

/// What both gravity FMM engines ([`FmmGravity`], [`CudaFmmGravity`]) keep besides their
/// buffers: the [`FmmState`] and the all-pairs sum with the same softening, the built-in check's
/// reference.
#[derive(Debug, Clone)]
pub struct GravityFmmState {
    pub fmm: FmmState,
    pub reference: DirectGravity,
}

impl GravityFmmState {
    pub fn new(gravity: PlummerGravity, params: FmmParams, check_every: u64) -> Self {
        Self {
            fmm: FmmState::new(params, check_every),
            reference: DirectGravity::new(gravity),
        }
    }

    pub fn gravity(&self) -> PlummerGravity {
        self.reference.gravity()
    }

    /// The engine's name for logs: `engine` says where and in what precision it sums.
    pub fn name(&self, engine: &str) -> String {
        let eps = self.gravity().softening;
        format!(
            "gravity FMM {engine} (softening {eps:e}), {}",
            self.fmm.params
        )
    }

    /// One [`GravitySummation::evaluate_bodies`] around the engine's `run` (φ and a at the
    /// points it is given into `out`, sized for them, and its counts and times), then, when due,
    /// the built-in check of φ and a against the reference on a sample; an error when it misses
    /// the request (by more than [`check::FAILURE_FACTOR`]).
    pub fn evaluate(
        &mut self,
        work: GravityWork,
        out: &mut GravityEvaluation,
        run: impl FnOnce(
            &FmmParams,
            &[[f64; 3]],
            &mut GravityEvaluation,
        ) -> Result<FmmStats, SummationError>,
    ) -> SumResult {
        let (bodies, targets, tx) = (work.bodies, work.targets, work.points());
        if tx.is_empty() {
            return Ok(());
        }
        let params = self.fmm.params;
        let stats = run(&params, tx, out)?;
        self.fmm.stats = stats;
        if self.fmm.schedule.count_evaluation(0.0).is_none() {
            return Ok(());
        }
        self.check(bodies, targets, out)
    }

    /// The built-in check of an evaluation just counted and due: φ and a of `out` (at `targets`,
    /// or at the bodies) against the reference on a sample; an error when it misses the request
    /// (by more than [`check::FAILURE_FACTOR`]).
    pub fn check(
        &mut self,
        bodies: &Bodies,
        targets: Option<&[[f64; 3]]>,
        out: &GravityEvaluation,
    ) -> SumResult {
        let (params, stats) = (self.fmm.params, self.fmm.stats);
        let points = targets.map_or(bodies.len(), |t| t.len());
        let schedule = &mut self.fmm.schedule;
        let sample = check::sample_size(stats.p2p_pairs, bodies.len(), points);
        let seed = schedule.evaluations();
        let reference = &mut self.reference;
        let e = check::check_gravity_sample(reference, bodies, targets, out, sample, seed)?;
        schedule.record(AccuracyCheck {
            evaluation: seed,
            sample,
            requested: params.accuracy,
            sigma_max: 0.0,
            outputs: check::GRAVITY_OUTPUTS,
            velocity_l2: e[0],
            velocity_max: e[1],
            derivative_l2: e[2],
            derivative_max: e[3],
        })
    }
}
