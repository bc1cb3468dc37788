//! The gravity FMM's softened Cartesian expansions on one GPU (kernels/fmm_cartesian.cu, the
//! device form of [`super::cartesian`]): [`CartesianGravityKernels`] queues the upward pass, the
//! M2L (a warp per target cell), the downward pass and the fused L2P + P2P on the device buffers
//! of a structure built on the device ([`Buffers`] adopted from a
//! [`super::gpu_tree::GpuTree`]: cells, leaves, levels, lists, sorted positions and masses);
//! [`super::CudaFmmGravity`] drives it.

use super::cartesian::term_count;
use super::cuda::{cfg, Buffers, Timeline};
use super::gpu_tree::Shape;
use super::params::CARTESIAN_GPU_MAX_ORDER;
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{kernel_source, launch, load_kernels, CudaError, Gpu, KernelSource};
use crate::summation::interaction::PlummerGravity;
use crate::summation::{SummationError, PAIR_KERNEL_HEADER};
use cudarc::driver::{CudaFunction, CudaStream, PushKernelArg};
use std::sync::Arc;

/// The kernel family, with the shared header (its softened gravity pair).
pub const KERNELS: KernelSource = kernel_source!("fmm_cartesian.cu", PAIR_KERNEL_HEADER);
/// Threads per block of every kernel but the M2L (`CART_THREADS`).
const THREADS: u32 = 128;
/// Target cells (warps) per block of `cart_m2l` (`M2L_WARPS`).
const M2L_WARPS: usize = 4;

/// The compiled kernels of one order (`-DCART_P`).
pub struct CartesianGravityKernels {
    order: usize,
    p2m: CudaFunction,
    m2m: CudaFunction,
    m2l: CudaFunction,
    l2l: CudaFunction,
    eval: CudaFunction,
}

/// ε² as the kernels take it: f64 for the expansions, f32 for the near field.
#[derive(Debug, Clone, Copy)]
pub struct SofteningSquared {
    pub far: f64,
    pub near: f32,
}

impl SofteningSquared {
    /// ε² of `gravity` in both precisions (the caller refuses an ε² that underflows f32).
    pub fn of(gravity: &PlummerGravity) -> Self {
        let e2 = gravity.softening * gravity.softening;
        Self {
            far: e2,
            near: e2 as f32,
        }
    }
}

impl CartesianGravityKernels {
    /// Compiles kernels/fmm_cartesian.cu for order `p` (2 ≤ p ≤ [`CARTESIAN_GPU_MAX_ORDER`]).
    pub fn new(gpu: &Gpu, p: usize) -> Result<Self, SummationError> {
        if !(2..=CARTESIAN_GPU_MAX_ORDER).contains(&p) {
            return Err(SummationError::Unsupported(format!(
                "gravity FMM on the GPU: Cartesian order {p} outside the kernels' 2…\
                 {CARTESIAN_GPU_MAX_ORDER}"
            )));
        }
        let module = gpu.module_from(&KERNELS, &[format!("-DCART_P={p}")])?;
        #[rustfmt::skip]
        let kernels = load_kernels!(module, "cart_", CartesianGravityKernels {
            p2m, m2m, m2l, l2l, eval; order: p
        });
        Ok(kernels)
    }

    /// The expansion order compiled.
    pub fn order(&self) -> usize {
        self.order
    }

    /// Queues the whole evaluation on `s`: P2M, M2M per level (deepest first), M2L, L2L
    /// per level, then L2P with P2P into `out_phi` (one per target) and `out_acc` (three), at the
    /// targets' original indices. `b` holds the structure of shape `st` (adopted from the GPU
    /// tree), the bodies' sorted positions in `s_x` and masses in `s_alpha`, and the `targets`
    /// points' sorted positions in `t_x` when they have a tree of their own; `mult`, `local` and
    /// the outputs are sized here. `timeline` marks the ends of the upward pass, M2L and L2L
    /// (events 1 to 3; the caller records 0 and 4).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        st: &Shape,
        targets: usize,
        eps2: SofteningSquared,
        timeline: &Timeline,
        out_phi: &mut DeviceBuffer<f64>,
        out_acc: &mut DeviceBuffer<f64>,
    ) -> Result<(), CudaError> {
        let (stree, ttree) = (&st.sources, st.targets());
        let nt = term_count(self.order);
        b.mult.ensure(s, nt * stree.cells.len())?;
        b.local.ensure(s, nt * ttree.cells.len())?;
        out_phi.poison(s, targets)?;
        out_acc.poison(s, 3 * targets)?;
        let n_sleaves = stree.leaves.len() as i32;
        // SAFETY: cart_p2m(leaves, n_leaves, center, begin, end, x, mass, mult): the leaves index
        // cells of the uploaded source tree, whose body ranges lie in 0..bodies; x holds
        // 3·bodies doubles and mass `bodies` (the caller's upload), mult NT doubles per source
        // cell (ensured above); blockDim is CART_THREADS.
        launch!(s, &self.p2m, "cart_p2m", cfg(stree.leaves.len(), THREADS);
            b.s_leaves.get(), &n_sleaves, b.s_center.get(), b.s_begin.get(), b.s_end.get(),
            b.s_x.get(), b.s_alpha.get(), b.mult.get_mut())?;
        for r in stree.levels.iter().rev() {
            let (first, count) = (r.start as i32, r.len() as i32);
            // SAFETY: cart_m2m(first, count, center, child_begin, child_count, mult): cells
            // first..first+count of the source tree; their children (the next level) were
            // written by P2M or the previous launch; leaves are skipped.
            launch!(s, &self.m2m, "cart_m2m", cfg(r.len(), THREADS);
                &first, &count, b.s_center.get(), b.s_child_begin.get(), b.s_child_count.get(),
                b.mult.get_mut())?;
        }
        timeline.record(1, s)?;
        let own = st.target_tree.is_some();
        let n_tcells = ttree.cells.len() as i32;
        // The target tree's arrays (its own, or the sources' when the targets are the bodies),
        // borrowed field by field beside the expansions written below.
        let (tcenter, tbegin, tend, tx) = if own {
            (&b.t_center, &b.t_begin, &b.t_end, &b.t_x)
        } else {
            (&b.s_center, &b.s_begin, &b.s_end, &b.s_x)
        };
        // SAFETY: cart_m2l(n_cells, tcenter, scenter, offsets, sources, mult, eps2, local):
        // offsets has n_cells + 1 entries into sources (source cell ids); mult and local hold
        // NT doubles per source and target cell; 32·M2L_WARPS threads per block, one warp per
        // target cell (the grid covers n_cells).
        launch!(s, &self.m2l, "cart_m2l", cfg(ttree.cells.len().div_ceil(M2L_WARPS), 32 * M2L_WARPS as u32);
            &n_tcells, tcenter.get(), b.s_center.get(), b.m2l_offsets.get(), b.m2l_sources.get(),
            b.mult.get(), &eps2.far, b.local.get_mut())?;
        timeline.record(2, s)?;
        for r in ttree.levels.iter().skip(1) {
            let (first, count) = (r.start as i32, r.len() as i32);
            // SAFETY: cart_l2l(first, count, center, parent, local): cells of this level of the
            // target tree and their parents (the level above, complete).
            launch!(s, &self.l2l, "cart_l2l", cfg(r.len(), THREADS);
                &first, &count, tcenter.get(), b.t_parent.get(), b.local.get_mut())?;
        }
        timeline.record(3, s)?;
        let n_tleaves = ttree.leaves.len() as i32;
        // SAFETY: cart_eval(tleaves, n, tcenter, tbegin, tend, tx, torder, p2p_offsets,
        // p2p_sources, scenter, sbegin, send, sx, smass, local, eps2, out_phi, out_acc): target
        // leaves and their sorted positions (3 per target), the order mapping sorted → original
        // targets, the P2P lists (n_tleaves + 1 offsets, source leaf ids), the bodies' sorted
        // positions and masses, the locals (NT per target cell); out_phi holds `targets` doubles and out_acc 3·targets
        // (poisoned above); blockDim is CART_THREADS.
        launch!(s, &self.eval, "cart_eval", cfg(ttree.leaves.len(), THREADS);
            b.t_leaves.get(), &n_tleaves, tcenter.get(), tbegin.get(), tend.get(), tx.get(),
            b.t_order.get(),
            b.p2p_offsets.get(), b.p2p_sources.get(), b.s_center.get(), b.s_begin.get(),
            b.s_end.get(), b.s_x.get(), b.s_alpha.get(), b.local.get(), &eps2.near, out_phi.get_mut(),
            out_acc.get_mut())?;
        Ok(())
    }
}
