//! Softened gravity by the FMM on one GPU ([`CudaFmmGravity`]): the structure of the CPU
//! [`super::FmmGravity`] (the same trees and lists, with the absolute near-field radius, built
//! on the device by [`GpuTree`] from the bodies uploaded in the caller's order), the far field of [`super::CudaFmm`] with one charge per body,
//! the mass (fmm.cu compiled with `-DFMM_Q=1`: P2M, M2M, M2L and L2L in f64,
//! [`super::cuda::far_field`]), then `fmm_pack_gravity` and `fmm_eval_gravity` (ε > 0) or
//! `fmm_eval_gravity_newton` (ε = 0): φ and a from the local expansion in f64 and the exact
//! softened pairs of the near field in f32 (docs/physics.md §8.1). With ε = 0 a pair at distance 0 adds nothing, so `targets = None`
//! skips each body's self pair, and coincident bodies are refused.

use super::cuda::{
    cfg, compile, far_field, flat, gather_cfg, local_len, near_cfg, Buffers, FarKernels, Staged,
    Timeline,
};
use super::gpu_tree::{Cores, GpuTree, TreeRequest};
use super::params::{plan_gravity_parameters, FmmBackend, FmmParams};
use super::{AccuracyCheck, Fmm, FmmState, FmmStats, GravityFmmState};
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{launch, load_kernels, CudaError, Gpu};
use crate::summation::direct::cuda_gravity::{check_bodies_in, softening_squared_in};
use crate::summation::interaction::{
    Bodies, GravityEvaluation, GravitySummation, GravityWork, PlummerGravity,
};
use crate::summation::{SumResult, SummationError};
use cudarc::driver::{CudaFunction, CudaStream, PushKernelArg};
use std::sync::Arc;

/// The kernels of one expansion order, one charge per body.
struct GravityKernels {
    order: usize,
    far: FarKernels,
    pack_gravity: CudaFunction,
    /// L2P with P2P for ε > 0, and for ε = 0 (pairs at distance 0 skipped).
    eval_gravity: CudaFunction,
    eval_gravity_newton: CudaFunction,
    gather: CudaFunction,
}

/// Plummer-softened gravity by the FMM on one GPU: f64 expansions, f32 near field (module docs).
pub struct CudaFmmGravity {
    core: GravityFmmState,
    engine: Engine,
}

/// The device side: kernels and buffers, which stay allocated between calls and grow only.
struct Engine {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    kernels: GravityKernels,
    buf: Buffers,
    /// The trees and lists, built on the device, and the bodies uploaded for them.
    tree: GpuTree,
    staged: Staged,
    /// Outputs: the accelerations (3 per target) and the potentials (1 per target).
    out_acc: DeviceBuffer<f64>,
    out_phi: DeviceBuffer<f64>,
    /// Tests: the far field left out (see [`CudaFmmGravity::near_field_only`]).
    near_only: bool,
}

impl CudaFmmGravity {
    /// Plans the parameters for `accuracy` and the softening of `gravity` on the GPU (refused
    /// below [`super::params::GPU_ACCURACY_FLOOR`]: the near field is summed in f32) and
    /// compiles the kernels; checks at the first evaluation and every `check_every` after (0:
    /// only the first).
    pub fn new(
        gpu: Arc<Gpu>,
        gravity: PlummerGravity,
        accuracy: f64,
        check_every: u64,
    ) -> Result<Self, SummationError> {
        let params = plan_gravity_parameters(accuracy, FmmBackend::Cuda, gravity)?;
        Self::with_params(gpu, gravity, params, check_every)
    }

    /// With explicit parameters (tests and benchmarks).
    pub fn with_params(
        gpu: Arc<Gpu>,
        gravity: PlummerGravity,
        params: FmmParams,
        check_every: u64,
    ) -> Result<Self, SummationError> {
        let p = params.order;
        let (module, far) = compile(&gpu, p, 1)?;
        #[rustfmt::skip]
        let kernels = load_kernels!(module, "fmm_", GravityKernels {
            pack_gravity, eval_gravity, eval_gravity_newton, gather; order: p, far: far
        });
        let engine = Engine {
            tree: GpuTree::new(&gpu)?,
            staged: Staged::default(),
            stream: gpu.stream().clone(),
            gpu,
            kernels,
            buf: Buffers::default(),
            out_acc: DeviceBuffer::default(),
            out_phi: DeviceBuffer::default(),
            near_only: false,
        };
        Ok(Self {
            core: GravityFmmState::new(gravity, params, check_every),
            engine,
        })
    }

    /// The built-in checks since the last call.
    pub fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck> {
        self.core.fmm.schedule.take()
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.engine.gpu
    }

    /// Tests: with `on`, the local expansions are zeroed before L2P, so an evaluation returns
    /// the near field (the softened pairs over the lists) alone.
    pub fn near_field_only(&mut self, on: bool) {
        self.engine.near_only = on;
    }

    /// The trees and lists of the last evaluation (tests download them).
    pub fn device_tree(&self) -> &GpuTree {
        &self.engine.tree
    }
}

impl Engine {
    /// φ and a at `tx` from `bodies` with the squared softening `eps2` and `params` on the GPU
    /// into `out`
    /// (sized for `tx`); the phase times and counts.
    fn run(
        &mut self,
        eps2: f32,
        params: &FmmParams,
        bodies: &Bodies,
        tx: &[[f64; 3]],
        out: &mut GravityEvaluation,
    ) -> Result<FmmStats, CudaError> {
        let p = params.order;
        debug_assert_eq!(self.kernels.order, p);
        let s = self.stream.clone();
        let (n, nt) = (bodies.len(), tx.len());
        let mut stats = FmmStats::default();

        // The bodies in the caller's order; the targets are the bodies when they are the same
        // array (one tree for both).
        let same = std::ptr::eq(tx.as_ptr(), bodies.x.as_ptr()) && nt == n;
        let st = &mut self.staged;
        st.x.upload(&s, &flat(bodies.x), "positions")?;
        st.alpha.upload(&s, bodies.mass, "masses")?;
        if !same {
            st.targets.upload(&s, &flat(tx), "targets")?;
        }
        self.tree.build(&TreeRequest {
            x: st.x.get(),
            n,
            cores: Cores::Uniform(1.0),
            targets: (!same).then(|| (st.targets.get(), nt)),
            leaf_size: params.leaf_size,
            theta: params.theta,
            rho_cut: params.rho_cut_velocity,
            scale_max: 1.0,
        })?;
        let st = self.tree.shape();
        let (stree, ttree) = (&st.sources, st.targets());
        let own_targets = st.target_tree.is_some();
        let (k, b) = (&self.kernels, &mut self.buf);
        b.adopt(&s, &self.tree, false, 1, p)?;
        b.s_alpha.ensure(&s, n)?;
        let ni = n as i32;
        // SAFETY: fmm_gather(order, n, width, src, dst): order (the tree's) holds n indices below
        // n; src holds the n masses (uploaded above), dst was ensured to n.
        launch!(s, &k.gather, "fmm_gather", gather_cfg(n);
            b.s_order.get(), &ni, &1i32, self.staged.alpha.get(), b.s_alpha.get_mut())?;
        b.s_pos.ensure(&s, 4 * n)?;

        let timeline = Timeline::new(&self.gpu)?;
        timeline.record(0, &s)?;
        let n_sleaves = stree.leaves.len() as i32;
        // SAFETY: fmm_pack_gravity(leaves, n_leaves, center, begin, end, x, mass, pos): the
        // leaves index cells of the uploaded source tree, whose body ranges lie in 0..n; x holds
        // 3n doubles, mass n, pos 4n floats (one float4 per body; ensured above).
        launch!(s, &k.pack_gravity, "fmm_pack_gravity", cfg(stree.leaves.len(), 128);
            b.s_leaves.get(), &n_sleaves, b.s_center.get(), b.s_begin.get(), b.s_end.get(),
            b.s_x.get(), b.s_alpha.get(), b.s_pos.get_mut())?;
        far_field(&k.far, b, &s, &st, p, params.m2l, &timeline)?;
        if self.near_only {
            b.local.zero(&s, local_len(1, p, ttree.cells.len()))?;
        }
        self.out_phi.poison(&s, nt)?;
        self.out_acc.poison(&s, 3 * nt)?;
        let n_tleaves = ttree.leaves.len() as i32;
        let t = b.targets(own_targets);
        // SAFETY: fmm_eval_gravity[_newton](tleaves, n, tcenter, tbegin, tend, tx, torder,
        // p2p_offsets, p2p_sources, scenter, sbegin, send, spos, local, eps2, out_phi, out_acc):
        // target
        // leaves and their sorted positions (3 per target), the order mapping sorted → original
        // targets (nt entries below nt), the P2P lists (n_tleaves + 1 offsets, source leaf ids),
        // the packed bodies (one float4 each), the locals (NC complex values per target cell,
        // FMM_Q = 1); out_phi holds nt doubles and out_acc 3·nt (poisoned above); one warp per
        // target leaf, blocks of NEAR_WARPS warps (the kernel's launch bound).
        let (eval, name) = match eps2 > 0.0 {
            true => (&k.eval_gravity, "fmm_eval_gravity"),
            false => (&k.eval_gravity_newton, "fmm_eval_gravity_newton"),
        };
        launch!(s, eval, name, near_cfg(ttree.leaves.len());
            b.t_leaves.get(), &n_tleaves, t.center, t.begin, t.end, t.x, b.t_order.get(),
            b.p2p_offsets.get(), b.p2p_sources.get(), b.s_center.get(), b.s_begin.get(),
            b.s_end.get(), b.s_pos.get(), b.local.get(), &eps2, self.out_phi.get_mut(),
            self.out_acc.get_mut())?;
        timeline.finish(&self.gpu, &s, &self.tree, &mut stats)?;

        self.out_phi
            .download(&self.gpu, &mut out.potential[..nt], "potentials")?;
        let mut flat = vec![0.0f64; 3 * nt];
        self.out_acc
            .download(&self.gpu, &mut flat, "accelerations")?;
        for (o, v) in out.acceleration.iter_mut().zip(flat.chunks(3)) {
            *o = [v[0], v[1], v[2]];
        }
        let finite = |v: &f64| v.is_finite();
        if !(out.potential.iter().all(finite) && flat.iter().all(finite)) {
            return Err(CudaError::Invalid(
                "the gravity FMM left a potential or an acceleration unwritten or not finite"
                    .into(),
            ));
        }
        Ok(stats)
    }
}

impl GravitySummation for CudaFmmGravity {
    fn name(&self) -> String {
        self.core.name("GPU (f64 expansions, f32 near field)")
    }

    fn gravity(&self) -> PlummerGravity {
        self.core.gravity()
    }

    fn evaluate_bodies(&mut self, work: GravityWork, out: &mut GravityEvaluation) -> SumResult {
        let gravity = self.core.gravity();
        let bodies = work.bodies;
        // The f32 near field: ε² must not underflow, and at ε = 0 bodies apart in f64 must stay
        // apart in f32 (the checks of the all-pairs engine).
        let eps2 = softening_squared_in::<f32>(&gravity)?;
        if work.targets.is_none() {
            check_bodies_in::<f32>(&gravity, bodies.x)?;
        }
        let engine = &mut self.engine;
        self.core.evaluate(work, out, |params, tx, out| {
            Ok(engine.run(eps2, params, bodies, tx, out)?)
        })
    }
}

impl Fmm for CudaFmmGravity {
    fn state(&self) -> &FmmState {
        &self.core.fmm
    }
    fn state_mut(&mut self) -> &mut FmmState {
        &mut self.core.fmm
    }
}
