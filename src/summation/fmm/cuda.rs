//! The FMM on one GPU (`kernels/fmm.cu`): the trees and interaction lists built on the device
//! ([`GpuTree`], `kernels/fmm_tree.cu`: the host's cells and lists, value for value), f64
//! expansions (M2L products in f64 or scaled f32, [`M2lPrecision`]) and f32 near-field sums, one
//! warp per cell for P2M, M2M, M2L and L2L and one thread block per target leaf for L2P with
//! P2P, the seed's "multiple walks" (SC09 §2.3). Buffers stay allocated between calls and grow
//! only.
//!
//! The host form uploads the particles in the caller's order (f64 positions, strengths, cores,
//! and the targets) and then runs as the device form; it receives the results. The device form
//! ([`DeviceSummation`], used by the GPU-resident stepper) takes resident particles: the tree
//! is built from them on the device (a few small downloads per tree level size the launches,
//! and the largest core radius comes back for the near-field radius), the strengths are gathered
//! into tree order there, and the results are written into the caller's device buffers. The
//! kernels never reduce across blocks, so the answer is deterministic, and both forms give the
//! same bits. [`FmmStats::tree_seconds`] is the device time of the tree and lists (CUDA events).
//!
//! **The periodic mode** ([`CudaFmm::periodic`], [`super::cuda_periodic`]) runs the same passes
//! on the wrapped particles with the near images in the lists, the far images' local expansion
//! added at the target root and the vacuum term subtracted at the end.

use super::cuda_periodic::Periodic;
use super::gpu_tree::{Cores, GpuTree, Shape, TreeRequest};
use super::m2l_layout::{far_warps, m2l_block, table_stride, M2L_WARPS};
use super::params::{plan_parameters, FmmBackend, FmmParams, M2lPrecision};
use super::{AccuracyCheck, Fmm, FmmState, FmmStats};
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::CompiledModule;
use crate::device::cuda::{
    kernel_source, launch, load_kernels, CudaError, Doing, Gpu, KernelSource,
};
use crate::kernel::StretchingScheme;
use crate::summation::direct::DirectFreeSpace;
use crate::summation::{
    sigma_range, Boundary, DeviceEvaluation, DeviceExtra, DevicePoints, DeviceSummation,
    DeviceTargets, DeviceWork, Evaluation, Extra, Request, Sources, SumResult, Summation,
    SummationError, PAIR_KERNEL_HEADER,
};
use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// The kernel family: fmm.cu with the shared pair kernel header.
pub const KERNELS: KernelSource = kernel_source!("fmm.cu", PAIR_KERNEL_HEADER);
/// Target leaves (one warp each) per block of the near-field kernels (`NEAR_WARPS` in fmm.cu,
/// passed at compilation).
pub(super) const NEAR_WARPS: usize = 4;
/// The highest order the GPU kernels are built for (their shared tables hold order 2p).
pub const GPU_MAX_ORDER: usize = 20;

/// The far-field kernels of one module (P2M, M2M, M2L in f64 and in scaled f32, L2L), written
/// once for any number of charges per source (`-DFMM_Q`, kept in `q`).
pub struct FarKernels {
    p2m: CudaFunction,
    m2m: CudaFunction,
    m2l: CudaFunction,
    m2l_f32: CudaFunction,
    m2l_expand: CudaFunction,
    m2l_expand_f32: CudaFunction,
    l2l: CudaFunction,
    q: usize,
    /// Cells (warps) per block of P2M, M2M and L2L, compiled in (`FAR_WARPS`).
    warps: usize,
}

/// Compiles fmm.cu for expansion order `p` and `q` charges per source (refused above
/// [`GPU_MAX_ORDER`]): the module, for the interaction's own kernels, and its far-field kernels.
pub(super) fn compile(
    gpu: &Gpu,
    p: usize,
    q: usize,
) -> Result<(Arc<CompiledModule>, FarKernels), SummationError> {
    if p > GPU_MAX_ORDER {
        return Err(SummationError::Unsupported(format!(
            "FMM on the GPU: order {p} above the kernels' largest, {GPU_MAX_ORDER}"
        )));
    }
    let options = [
        format!("-DFMM_P={p}"),
        format!("-DFMM_Q={q}"),
        format!("-DM2L_WARPS={M2L_WARPS}"),
        format!("-DM2L_W={}", table_stride(p)),
        format!("-DFAR_WARPS={}", far_warps(p, q)),
        format!("-DNEAR_WARPS={NEAR_WARPS}"),
    ];
    let module = gpu.module_from(&KERNELS, &options)?;
    #[rustfmt::skip]
    let far = load_kernels!(module, "fmm_", FarKernels {
        p2m, m2m, m2l, m2l_f32, m2l_expand, m2l_expand_f32, l2l; q: q, warps: far_warps(p, q)
    });
    Ok((module, far))
}

/// The compiled Biot–Savart kernels of one expansion order.
struct Kernels {
    order: usize,
    far: FarKernels,
    pack: CudaFunction,
    /// L2P with P2P, one kernel per output ([`ExtraKind`]).
    eval_velocity: CudaFunction,
    eval_gradient: CudaFunction,
    eval_classical: CudaFunction,
    eval_transposed: CudaFunction,
    /// The periodic mode's root local expansion and vacuum term.
    add_root: CudaFunction,
    vacuum: CudaFunction,
}

/// Device buffers, reused between calls. `s_alpha` holds the sources' charges in tree order (the
/// vortex strengths, 3 per source, or the masses).
#[derive(Default)]
pub(super) struct Buffers {
    pub(super) s_center: DeviceBuffer<f64>,
    /// The source cells' half sides (the f32 M2L's scale).
    pub(super) s_half: DeviceBuffer<f64>,
    pub(super) s_begin: DeviceBuffer<u32>,
    pub(super) s_end: DeviceBuffer<u32>,
    pub(super) s_child_begin: DeviceBuffer<u32>,
    pub(super) s_child_count: DeviceBuffer<u8>,
    pub(super) s_leaves: DeviceBuffer<u32>,
    pub(super) s_x: DeviceBuffer<f64>,
    pub(super) s_alpha: DeviceBuffer<f64>,
    pub(super) s_sigma: DeviceBuffer<f64>,
    pub(super) s_pos: DeviceBuffer<f32>,
    pub(super) s_str: DeviceBuffer<f32>,
    pub(super) t_center: DeviceBuffer<f64>,
    pub(super) t_begin: DeviceBuffer<u32>,
    pub(super) t_end: DeviceBuffer<u32>,
    pub(super) t_parent: DeviceBuffer<u32>,
    pub(super) t_leaves: DeviceBuffer<u32>,
    pub(super) t_x: DeviceBuffer<f64>,
    pub(super) t_order: DeviceBuffer<u32>,
    pub(super) t_alpha: DeviceBuffer<f64>,
    pub(super) s_order: DeviceBuffer<u32>,
    pub(super) m2l_offsets: DeviceBuffer<u32>,
    pub(super) m2l_sources: DeviceBuffer<u32>,
    pub(super) p2p_offsets: DeviceBuffer<u32>,
    pub(super) p2p_sources: DeviceBuffer<u32>,
    pub(super) mult: DeviceBuffer<f64>,
    /// The M2L's complete multipole tables (`fmm_m2l_expand[_f32]`), q (p+1)² complex values
    /// per source cell in f64 or f32.
    pub(super) m2l_mult: DeviceBuffer<f64>,
    pub(super) local: DeviceBuffer<f64>,
}

/// The FMM in free space on one GPU.
pub struct CudaFmm {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    state: FmmState,
    kernels: Option<Kernels>,
    buf: Buffers,
    /// The trees and lists, built on the device.
    tree: GpuTree,
    /// The host form's inputs in the caller's order.
    staged: Staged,
    /// The host form's outputs: velocities (3 per target) and the gradient or stretching.
    out_u: DeviceBuffer<f64>,
    out_x: DeviceBuffer<f64>,
    /// Tests: the far field left out (see [`CudaFmm::near_field_only`]).
    near_only: bool,
    /// The periodic box's additions (`None`: free space).
    periodic: Option<Box<Periodic>>,
}

/// The target tree on the device: its own arrays, or the source tree's when the targets are
/// the sources.
pub(super) struct TargetView<'a> {
    pub center: &'a CudaSlice<f64>,
    pub begin: &'a CudaSlice<u32>,
    pub end: &'a CudaSlice<u32>,
    /// Sorted positions, 3 per target.
    pub x: &'a CudaSlice<f64>,
}

impl Buffers {
    /// Takes the trees and lists built on the device by `tree` into the buffers the kernels read
    /// (device-to-device copies: cells, leaves, the orders, the sorted positions and, with
    /// `cores`, the sorted core radii), and sizes the multipole and local expansions for `q`
    /// charges at order `p`.
    pub(super) fn adopt(
        &mut self,
        s: &Arc<CudaStream>,
        tree: &GpuTree,
        cores: bool,
        q: usize,
        p: usize,
    ) -> Result<(), CudaError> {
        let (src, tgt) = (&tree.sources, tree.target_tree());
        let nc = src.n_cells;
        self.s_center.copy_from(s, &src.center, 3 * nc)?;
        self.s_half.copy_from(s, &src.half, nc)?;
        self.s_begin.copy_from(s, &src.begin, nc)?;
        self.s_end.copy_from(s, &src.end, nc)?;
        self.s_child_begin.copy_from(s, &src.child_begin, nc)?;
        self.s_child_count.copy_from(s, &src.child_count, nc)?;
        self.s_leaves.copy_from(s, &src.leaves, src.n_leaves)?;
        self.s_order.copy_from(s, &src.order, src.n)?;
        self.s_x.copy_from(s, &src.x, 3 * src.n)?;
        if cores {
            self.s_sigma.copy_from(s, &src.cores, src.n)?;
        }
        let ntc = tgt.n_cells;
        if tree.own_targets {
            self.t_center.copy_from(s, &tgt.center, 3 * ntc)?;
            self.t_begin.copy_from(s, &tgt.begin, ntc)?;
            self.t_end.copy_from(s, &tgt.end, ntc)?;
            self.t_x.copy_from(s, &tgt.x, 3 * tgt.n)?;
        }
        self.t_parent.copy_from(s, &tgt.parent, ntc)?;
        self.t_leaves.copy_from(s, &tgt.leaves, tgt.n_leaves)?;
        self.t_order.copy_from(s, &tgt.order, tgt.n)?;
        let l = &tree.lists;
        self.m2l_offsets.copy_from(s, &l.m2l_offsets, ntc + 1)?;
        self.m2l_sources.copy_from(s, &l.m2l_sources, l.m2l_count)?;
        self.p2p_offsets
            .copy_from(s, &l.p2p_offsets, tgt.n_leaves + 1)?;
        self.p2p_sources.copy_from(s, &l.p2p_sources, l.p2p_count)?;
        let stride = q * super::expansions::coefficient_count(p);
        self.mult.ensure(s, 2 * stride * nc)?;
        self.local.ensure(s, 2 * stride * ntc)?;
        Ok(())
    }

    /// The target tree: its own (`own`, uploaded with its sorted positions in `t_x`) or the
    /// sources'.
    pub(super) fn targets(&self, own: bool) -> TargetView<'_> {
        if own {
            TargetView {
                center: self.t_center.get(),
                begin: self.t_begin.get(),
                end: self.t_end.get(),
                x: self.t_x.get(),
            }
        } else {
            TargetView {
                center: self.s_center.get(),
                begin: self.s_begin.get(),
                end: self.s_end.get(),
                x: self.s_x.get(),
            }
        }
    }
}

/// `v` flattened (3 values per point).
pub(super) fn flat(v: &[[f64; 3]]) -> Vec<f64> {
    v.iter().flatten().copied().collect()
}

/// A launch of `blocks` blocks (at least one) of `threads` threads.
pub(super) fn cfg(blocks: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks.max(1) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The launch of the near-field kernels for `n_leaves` target leaves: one warp per leaf,
/// [`NEAR_WARPS`] per block.
pub(super) fn near_cfg(n_leaves: usize) -> LaunchConfig {
    cfg(n_leaves.div_ceil(NEAR_WARPS), 32 * NEAR_WARPS as u32)
}

/// Doubles of the local expansions of `cells` cells at order `p` with `q` charges.
pub(super) fn local_len(q: usize, p: usize, cells: usize) -> usize {
    2 * q * super::expansions::coefficient_count(p) * cells
}

/// The source cells' multipoles and geometry as the M2L reads them: `n_cells` cells with
/// centres (3 each), half sides and FMM_Q·NC complex multipoles each.
pub(super) struct M2lSources<'a> {
    pub(super) n_cells: usize,
    pub(super) center: &'a CudaSlice<f64>,
    pub(super) half: &'a CudaSlice<f64>,
    pub(super) mult: &'a CudaSlice<f64>,
}

/// M2L into `local` for `n_cells` target cells, in `precision`: the sources' complete tables
/// into `table` (`fmm_m2l_expand[_f32]`, one thread per entry; q (p+1)² complex values per
/// source cell), then one warp per target cell ([`m2l_block`] warps per block). `shifts`: the
/// device addresses of the entries' image shift indices and of the shift table (both 0: none).
#[allow(clippy::too_many_arguments)]
fn launch_m2l(
    k: &FarKernels,
    s: &Arc<CudaStream>,
    p: usize,
    precision: M2lPrecision,
    n_cells: usize,
    tcenter: &CudaSlice<f64>,
    src: &M2lSources,
    table: &mut CudaSlice<f64>,
    offsets: &CudaSlice<u32>,
    sources: &CudaSlice<u32>,
    local: &mut CudaSlice<f64>,
    (m2l_sh, table_addr): (u64, u64),
) -> Result<(), CudaError> {
    let entries = src.n_cells * k.q * (p + 1) * (p + 1);
    let (f, name) = match precision {
        M2lPrecision::F64 => (&k.m2l_expand, "fmm_m2l_expand"),
        M2lPrecision::F32 => (&k.m2l_expand_f32, "fmm_m2l_expand_f32"),
    };
    let ns = src.n_cells as i32;
    // SAFETY: fmm_m2l_expand[_f32](n_cells, half, mult, out): half has n_cells values, mult
    // FMM_Q·NC complex values per cell; out (table) q (p+1)² complex values of 16 or 8 bytes
    // per cell (far_field and m2l_on_gpu size it for f64); one thread per entry.
    launch!(s, f, name, cfg(entries.div_ceil(256), 256);
        &ns, src.half, src.mult, &mut *table)?;
    let (warps, shared) = m2l_block(p, k.q, precision);
    let config = LaunchConfig {
        grid_dim: (n_cells.div_ceil(warps).max(1) as u32, 1, 1),
        block_dim: (32 * warps as u32, 1, 1),
        shared_mem_bytes: shared as u32,
    };
    let (f, name) = match precision {
        M2lPrecision::F64 => (&k.m2l, "fmm_m2l"),
        M2lPrecision::F32 => (&k.m2l_f32, "fmm_m2l_f32"),
    };
    let n = n_cells as i32;
    // SAFETY: fmm_m2l[_f32](n_cells, tcenter, scenter, shalf, offsets, sources, mfull, local,
    // m2l_sh, shift_table): offsets has n_cells + 1 entries indexing sources (source cell ids
    // with centres in scenter, half sides in shalf and complete tables in mfull, written
    // above); m2l_sh (null, or one shift index per entry of sources) indexes shift_table (3
    // doubles per shift); local holds FMM_Q·NC complex values per target cell; the block has
    // 32·warps threads (warps ≤ M2L_WARPS, the launch bound) and the dynamic shared memory
    // m2l_block gives for them.
    launch!(s, f, name, config;
        &n, tcenter, src.center, src.half, offsets, sources, &*table, local, &m2l_sh,
        &table_addr)?;
    Ok(())
}

/// M2L alone on the GPU for a test: the local expansions of `case`'s target cells (f64 pairs,
/// as [`super::m2l_layout::M2lCase::reference`] lays them out) from the kernel compiled for
/// its order and charges, in `precision`.
pub fn m2l_on_gpu(
    gpu: &Arc<Gpu>,
    case: &super::m2l_layout::M2lCase,
    precision: M2lPrecision,
) -> Result<Vec<f64>, SummationError> {
    let (_, k) = compile(gpu, case.p, case.q)?;
    let s = gpu.stream().clone();
    let n_cells = case.offsets.len() - 1;
    let mut bufs: [DeviceBuffer<f64>; 5] = Default::default();
    let [tc, sc, sh, mult, table] = &mut bufs;
    tc.upload(&s, &case.tcenter, "M2L test centres")?;
    sc.upload(&s, &case.scenter, "M2L test centres")?;
    sh.upload(&s, &case.shalf, "M2L test half sides")?;
    mult.upload(&s, &case.mult, "M2L test multipoles")?;
    let n_sources = case.shalf.len();
    table.ensure(&s, 2 * case.q * (case.p + 1) * (case.p + 1) * n_sources)?;
    let (mut off, mut src) = (
        DeviceBuffer::<u32>::default(),
        DeviceBuffer::<u32>::default(),
    );
    off.upload(&s, &case.offsets, "M2L test lists")?;
    src.upload(&s, &case.sources, "M2L test lists")?;
    let len = 2 * case.q * super::expansions::coefficient_count(case.p) * n_cells;
    let mut local = DeviceBuffer::<f64>::default();
    local.poison(&s, len)?;
    launch_m2l(
        &k,
        &s,
        case.p,
        precision,
        n_cells,
        tc.get(),
        &M2lSources {
            n_cells: n_sources,
            center: sc.get(),
            half: sh.get(),
            mult: mult.get(),
        },
        table.get_mut(),
        off.get(),
        src.get(),
        local.get_mut(),
        (0, 0),
    )?;
    let mut out = vec![0.0; len];
    local.download(gpu, &mut out, "M2L test locals")?;
    Ok(out)
}

/// What the periodic box adds to [`far_field`]: its mode, the M2L entries' shifts and the shift
/// table (device addresses), the source and target roots' centres, the GPU and the kernel that
/// adds the root's local expansion.
pub(super) struct ImageStep<'a> {
    mode: &'a mut Periodic,
    m2l_shifts: (u64, u64),
    roots: ([f64; 3], [f64; 3]),
    gpu: &'a Gpu,
    add_root: &'a CudaFunction,
}

/// P2M, M2M, M2L (in `m2l`'s precision) and L2L on the structure uploaded by
/// [`Buffers::adopt`], with the sources' sorted positions in `s_x` and their `q`
/// charges each in `s_alpha` (the module's `FMM_Q`), queued on `s`; `timeline` marks the ends
/// of the upward pass, M2L and L2L (events 1 to 3). With `images` (the periodic box) M2L
/// translates through the entries' shifts, and the far images' local expansion, made on the
/// host from the source root's multipole while the GPU runs M2L, is added to the target root's
/// before L2L.
#[allow(clippy::too_many_arguments)]
pub(super) fn far_field(
    k: &FarKernels,
    b: &mut Buffers,
    s: &Arc<CudaStream>,
    st: &Shape,
    p: usize,
    m2l: M2lPrecision,
    timeline: &Timeline,
    mut images: Option<ImageStep>,
) -> Result<(), CudaError> {
    let (stree, ttree) = (&st.sources, st.targets());
    // One warp per cell, k.warps cells per block.
    let per_cell = |cells: usize| cfg(cells.div_ceil(k.warps), 32 * k.warps as u32);
    let n_sleaves = stree.leaves.len() as i32;
    // SAFETY: fmm_p2m(leaves, n_leaves, center, begin, end, x, charge, mult): the leaves index
    // cells of the uploaded source tree, whose particle ranges lie in 0..n; x holds 3n doubles
    // and charge FMM_Q·n (the caller's upload); mult holds FMM_Q·NC complex values (2 doubles)
    // per source cell (adopt); blocks of FAR_WARPS warps, one leaf each.
    launch!(s, &k.p2m, "fmm_p2m", per_cell(stree.leaves.len());
        b.s_leaves.get(), &n_sleaves, b.s_center.get(), b.s_begin.get(), b.s_end.get(),
        b.s_x.get(), b.s_alpha.get(), b.mult.get_mut())?;
    for lv in (0..stree.depth()).rev() {
        let r = stree.levels[lv].clone();
        let (first, count) = (r.start as i32, r.len() as i32);
        // SAFETY: fmm_m2m(first, count, center, child_begin, child_count, mult): cells
        // first..first+count exist; their children are cells of the next level, whose
        // expansions were written by P2M (leaves) or the previous launch.
        launch!(s, &k.m2m, "fmm_m2m", per_cell(r.len());
            &first, &count, b.s_center.get(), b.s_child_begin.get(), b.s_child_count.get(),
            b.mult.get_mut())?;
    }
    timeline.record(1, s)?;
    if let Some(im) = images.as_mut() {
        im.mode.fetch_root(im.gpu, &b.mult, p)?;
    }
    // The M2L's tables, allocated here (the engines without this far field do not pay them).
    b.m2l_mult
        .ensure(s, 2 * k.q * (p + 1) * (p + 1) * stree.cells.len())?;
    let tcenter = match st.target_tree {
        Some(_) => b.t_center.get(),
        None => b.s_center.get(),
    };
    launch_m2l(
        k,
        s,
        p,
        m2l,
        ttree.cells.len(),
        tcenter,
        &M2lSources {
            n_cells: stree.cells.len(),
            center: b.s_center.get(),
            half: b.s_half.get(),
            mult: b.mult.get(),
        },
        b.m2l_mult.get_mut(),
        b.m2l_offsets.get(),
        b.m2l_sources.get(),
        b.local.get_mut(),
        images.as_ref().map_or((0, 0), |im| im.m2l_shifts),
    )?;
    if let Some(im) = images {
        im.mode
            .add_root_local(s, im.add_root, im.roots, p, &mut b.local)?;
    }
    timeline.record(2, s)?;
    for lv in 1..ttree.depth() {
        let r = ttree.levels[lv].clone();
        let (first, count) = (r.start as i32, r.len() as i32);
        // SAFETY: fmm_l2l(first, count, center, parent, local): cells of this level and their
        // parents (the level above, already complete) exist in the target tree.
        launch!(s, &k.l2l, "fmm_l2l", per_cell(r.len());
            &first, &count, tcenter, b.t_parent.get(), b.local.get_mut())?;
    }
    timeline.record(3, s)
}

/// CUDA events at the phase boundaries of one evaluation: 0 its start, 1 the end of the upward
/// pass, 2 of M2L, 3 of L2L, 4 of L2P and P2P.
pub(super) struct Timeline([CudaEvent; 5]);

impl Timeline {
    pub(super) fn new(gpu: &Gpu) -> Result<Self, CudaError> {
        Ok(Self([
            gpu.event()?,
            gpu.event()?,
            gpu.event()?,
            gpu.event()?,
            gpu.event()?,
        ]))
    }

    /// Marks boundary `i` on `s`.
    pub(super) fn record(&self, i: usize, s: &Arc<CudaStream>) -> Result<(), CudaError> {
        self.0[i].record(s).doing("recording an event")
    }

    /// Marks the end (event 4), waits for the GPU and fills the phase times of `stats` from the
    /// events and its counts and tree time from `tree`.
    pub(super) fn finish(
        &self,
        gpu: &Gpu,
        s: &Arc<CudaStream>,
        tree: &GpuTree,
        stats: &mut FmmStats,
    ) -> Result<(), CudaError> {
        self.record(4, s)?;
        gpu.synchronize("the FMM")?;
        let ms = |a: usize, z: usize| -> Result<f64, CudaError> {
            gpu.elapsed_ms(&self.0[a], &self.0[z], "the FMM")
                .map(|t| t as f64 * 1e-3)
        };
        stats.upward_seconds = ms(0, 1)?;
        stats.m2l_seconds = ms(1, 2)?;
        stats.downward_seconds = ms(2, 3)?;
        stats.p2p_seconds = ms(3, 4)?;
        tree.count(stats);
        Ok(())
    }
}

impl CudaFmm {
    /// Plans the parameters for `accuracy` on the GPU (refused below
    /// [`super::params::GPU_ACCURACY_FLOOR`]) and compiles the kernels.
    pub fn new(gpu: Arc<Gpu>, accuracy: f64, check_every: u64) -> Result<Self, SummationError> {
        let params = plan_parameters(accuracy, FmmBackend::Cuda)?;
        Self::with_params(gpu, params, check_every)
    }

    /// With explicit parameters (tests and benchmarks).
    pub fn with_params(
        gpu: Arc<Gpu>,
        params: FmmParams,
        check_every: u64,
    ) -> Result<Self, SummationError> {
        let stream = gpu.stream().clone();
        let mut s = Self {
            tree: GpuTree::new(&gpu)?,
            staged: Staged::default(),
            gpu,
            stream,
            state: FmmState::new(params, check_every),
            kernels: None,
            buf: Buffers::default(),
            out_u: DeviceBuffer::default(),
            out_x: DeviceBuffer::default(),
            near_only: false,
            periodic: None,
        };
        s.ensure_kernels()?;
        Ok(s)
    }

    /// Turns on the periodic mode ([`super::cuda_periodic`]) for `params`.
    pub(super) fn set_periodic(&mut self, params: FmmParams) -> Result<(), CudaError> {
        self.periodic = Some(Box::new(Periodic::new(&params, &mut self.tree)?));
        Ok(())
    }

    /// The periodic FMM on the GPU ([`super::cuda_periodic`]): plans the parameters for `accuracy` on the
    /// GPU (refused below [`super::params::GPU_ACCURACY_FLOOR`]), compiles the kernels; checks
    /// against a finer Ewald sum at the first evaluation and every `every` evaluations after
    /// (0: only the first).
    pub fn periodic(gpu: Arc<Gpu>, accuracy: f64, every: u64) -> Result<Self, SummationError> {
        Self::new(gpu, accuracy, every)?.into_periodic()
    }

    /// With explicit parameters (tests and benchmarks).
    pub fn periodic_with_params(
        gpu: Arc<Gpu>,
        params: FmmParams,
        check_every: u64,
    ) -> Result<Self, SummationError> {
        Self::with_params(gpu, params, check_every)?.into_periodic()
    }

    /// The free-space engine turned periodic (for its planned parameters).
    fn into_periodic(mut self) -> Result<Self, SummationError> {
        let params = *self.params();
        self.set_periodic(params)?;
        Ok(self)
    }

    /// Counts an evaluation and, when due, checks the request `req`'s result `out` against the
    /// reference (the direct sum, or in the periodic box the finer Ewald sum); an error when it
    /// misses the request.
    fn after_evaluation(&mut self, req: &Request, out: &Evaluation, sigma_max: f64) -> SumResult {
        let (params, stats) = (self.state.params, self.state.stats);
        let reference: &mut dyn Summation = match self.periodic.as_deref_mut() {
            Some(per) => &mut per.ewald,
            None => &mut DirectFreeSpace,
        };
        self.state
            .schedule
            .after_evaluation_against(reference, req, out, sigma_max, &params, &stats)
    }

    fn ensure_kernels(&mut self) -> Result<(), SummationError> {
        let p = self.state.params.order;
        if self.kernels.as_ref().is_some_and(|k| k.order == p) {
            return Ok(());
        }
        let (module, far) = compile(&self.gpu, p, 3)?;
        #[rustfmt::skip]
        let k = load_kernels!(module, "fmm_", Kernels {
            pack, eval_velocity, eval_gradient, eval_classical, eval_transposed, add_root, vacuum;
            order: p, far: far
        });
        self.kernels = Some(k);
        Ok(())
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Tests: with `on`, the local expansions are zeroed before L2P, so an evaluation returns
    /// the near field (P2P over the lists) alone.
    pub fn near_field_only(&mut self, on: bool) {
        self.near_only = on;
    }

    /// The trees and lists of the last evaluation (tests download them).
    pub fn device_tree(&self) -> &GpuTree {
        &self.tree
    }

    /// One evaluation on device inputs (the caller's order; `sigma_max` their largest core):
    /// the trees and lists built on the device, the strengths gathered into tree order, the
    /// launches, and the results written to `outputs`.
    fn run(
        &mut self,
        inputs: &Inputs,
        sigma_max: f64,
        extra: ExtraKind,
        outputs: Outputs,
    ) -> Result<(), CudaError> {
        let gradient = !matches!(extra, ExtraKind::Velocity);
        let p = self.state.params.order;
        let s = self.stream.clone();
        let mut stats = FmmStats::default();
        let params = &self.state.params;
        // The periodic box: the trees are built on the positions wrapped into it.
        let (x, targets) = match self.periodic.as_deref_mut() {
            Some(per) => per.wrap(&self.tree, (inputs.x, inputs.n), inputs.targets)?,
            None => (inputs.x, inputs.targets),
        };
        self.tree.build(&TreeRequest {
            x,
            n: inputs.n,
            cores: Cores::PerPoint(inputs.sigma),
            targets,
            leaf_size: params.leaf_size,
            theta: params.theta,
            rho_cut: params.rho_cut(gradient),
            scale_max: sigma_max,
        })?;
        let st = self.tree.shape();
        let (stree, ttree) = (&st.sources, st.targets());
        let own_targets = st.target_tree.is_some();
        let n = inputs.n;
        let nt = self.tree.target_tree().n;
        let k = self
            .kernels
            .as_ref()
            .expect("kernels compiled at construction");
        let b = &mut self.buf;
        b.adopt(&s, &self.tree, true, 3, p)?;
        b.s_pos.ensure(&s, 4 * n)?;
        b.s_str.ensure(&s, 4 * n)?;
        b.s_alpha.ensure(&s, 3 * n)?;
        b.t_alpha.ensure(&s, 1)?;
        self.tree.gather_sources(3, inputs.alpha, &mut b.s_alpha)?;

        let timeline = Timeline::new(&self.gpu)?;
        let n_sleaves = stree.leaves.len() as i32;
        timeline.record(0, &s)?;
        // SAFETY: fmm_pack(leaves, n_leaves, center, begin, end, x, alpha, sigma, pos, str): the
        // leaves index cells of the uploaded source tree, whose particle ranges lie in 0..n;
        // x and alpha hold 3n doubles, sigma n, pos and str 4n floats (ensured above).
        launch!(s, &k.pack, "fmm_pack", cfg(stree.leaves.len(), 128);
            b.s_leaves.get(), &n_sleaves, b.s_center.get(), b.s_begin.get(), b.s_end.get(),
            b.s_x.get(), b.s_alpha.get(), b.s_sigma.get(), b.s_pos.get_mut(), b.s_str.get_mut())?;
        let [m2l_sh, p2p_sh, table] = self.tree.shift_addrs();
        let roots = (
            self.tree.sources.root_center,
            self.tree.target_tree().root_center,
        );
        let images = self.periodic.as_deref_mut().map(|mode| ImageStep {
            mode,
            m2l_shifts: (m2l_sh, table),
            roots,
            gpu: &self.gpu,
            add_root: &k.add_root,
        });
        far_field(
            &k.far,
            b,
            &s,
            &st,
            p,
            self.state.params.m2l,
            &timeline,
            images,
        )?;
        if self.near_only {
            b.local.zero(&s, local_len(3, p, ttree.cells.len()))?;
        }
        let n_tleaves = ttree.leaves.len() as i32;
        let rho_cut = self.state.params.rho_cut(gradient);
        let rho_cut2 = (rho_cut * rho_cut) as f32;
        let (eval, name) = match extra {
            ExtraKind::Velocity => (&k.eval_velocity, "fmm_eval_velocity"),
            ExtraKind::Gradient => (&k.eval_gradient, "fmm_eval_gradient"),
            ExtraKind::Stretching(StretchingScheme::Classical) => {
                (&k.eval_classical, "fmm_eval_classical")
            }
            ExtraKind::Stretching(StretchingScheme::Transposed) => {
                (&k.eval_transposed, "fmm_eval_transposed")
            }
        };
        let t = b.targets(own_targets);
        let (out_u, out_x, talpha) = match outputs {
            Outputs::Staged => {
                self.out_u.poison(&s, 3 * nt)?;
                let xlen = match extra {
                    ExtraKind::Velocity => 1,
                    ExtraKind::Gradient => 9 * nt,
                    ExtraKind::Stretching(_) => 3 * nt,
                };
                self.out_x.poison(&s, xlen)?;
                (&mut self.out_u, &mut self.out_x, None)
            }
            Outputs::Device { u, x, alpha } => (u, x, alpha),
        };
        let talpha = talpha.unwrap_or(b.t_alpha.get());
        // SAFETY: fmm_eval_*(tleaves, n, tcenter, tbegin, tend, tx, torder, p2p_offsets,
        // p2p_sources, scenter, sbegin, send, spos, sstr, local, rho_cut2, talpha, out_u,
        // out_x): target leaves and their sorted positions (3 per target), the order mapping
        // sorted → original targets (nt entries), the P2P lists (n + 1 offsets, source leaf
        // ids), the packed sources (4 floats each), the locals; out_u holds 3·nt doubles and
        // out_x 9·nt (gradient) or 3·nt (stretching) doubles, talpha 3·nt doubles when
        // stretching (ensured by the caller for device outputs); p2p_sh (null, or one shift
        // index per P2P entry) indexes the shift table (3 doubles per shift); one warp per
        // target leaf, blocks of NEAR_WARPS warps (the kernels' launch bound).
        launch!(s, eval, name, near_cfg(ttree.leaves.len());
            b.t_leaves.get(), &n_tleaves, t.center, t.begin, t.end, t.x, b.t_order.get(),
            b.p2p_offsets.get(), b.p2p_sources.get(), b.s_center.get(), b.s_begin.get(),
            b.s_end.get(), b.s_pos.get(), b.s_str.get(), b.local.get(), &rho_cut2,
            talpha, out_u.get_mut(), out_x.get_mut(), &p2p_sh, &table)?;
        if let Some(per) = self.periodic.as_deref() {
            let (nti, mode) = (nt as i32, extra.mode());
            // SAFETY: fmm_vacuum(n, tx, torder, vac, mode, talpha, out_u, out_x): tx holds the
            // nt sorted (wrapped) targets, torder their original indices; vac the 12 values
            // uploaded by the far field; talpha, out_u and out_x as for the eval kernel above
            // (talpha read only when stretching, out_x written only with a gradient or a
            // stretching); one thread per target.
            launch!(s, &k.vacuum, "fmm_vacuum", cfg(nt.div_ceil(128), 128);
                &nti, t.x, b.t_order.get(), per.vacuum.get(), &mode, talpha, out_u.get_mut(),
                out_x.get_mut())?;
        }
        // The phase timings wait for the GPU.
        timeline.finish(&self.gpu, &s, &self.tree, &mut stats)?;
        self.state.stats = stats;
        Ok(())
    }

    /// The host form's results: the staged outputs copied back into `out`.
    fn download(
        &mut self,
        nt: usize,
        extra: &Extra,
        out: &mut Evaluation,
    ) -> Result<(), CudaError> {
        let gpu = &self.gpu;
        let mut flat = vec![0.0f64; 3 * nt];
        self.out_u.download(gpu, &mut flat, "velocities")?;
        for (o, v) in out.velocity[..nt].iter_mut().zip(flat.chunks(3)) {
            *o = [v[0], v[1], v[2]];
        }
        match extra {
            Extra::None => {}
            Extra::Gradient => {
                let mut g = vec![0.0f64; 9 * nt];
                self.out_x.download(gpu, &mut g, "gradients")?;
                for (o, v) in out.gradient[..nt].iter_mut().zip(g.chunks(9)) {
                    *o = [[v[0], v[1], v[2]], [v[3], v[4], v[5]], [v[6], v[7], v[8]]];
                }
            }
            Extra::Stretching { .. } => {
                self.out_x.download(gpu, &mut flat, "stretching")?;
                for (o, v) in out.stretching[..nt].iter_mut().zip(flat.chunks(3)) {
                    *o = [v[0], v[1], v[2]];
                }
            }
        }
        if !out.velocity[..nt].iter().flatten().all(|v| v.is_finite()) {
            return Err(CudaError::Invalid(
                "the FMM left a velocity unwritten or not finite".into(),
            ));
        }
        Ok(())
    }

    /// Copies `len` doubles of a caller's device buffer to the host (the device form's positions
    /// and cores for the tree).
    fn to_host(
        &self,
        buf: &DeviceBuffer<f64>,
        len: usize,
        what: &str,
    ) -> Result<Vec<f64>, CudaError> {
        let mut v = vec![0.0; len];
        buf.download(&self.gpu, &mut v, what)?;
        Ok(v)
    }
}

/// What an evaluation computes besides the velocity (the device-agnostic part of [`Extra`]).
#[derive(Clone, Copy)]
enum ExtraKind {
    Velocity,
    Gradient,
    Stretching(StretchingScheme),
}

impl ExtraKind {
    /// The kernels' OUT_* mode (fmm.cu).
    fn mode(self) -> i32 {
        match self {
            ExtraKind::Velocity => 0,
            ExtraKind::Gradient => 1,
            ExtraKind::Stretching(StretchingScheme::Classical) => 2,
            ExtraKind::Stretching(StretchingScheme::Transposed) => 3,
        }
    }

    fn of(extra: &Extra) -> Self {
        match extra {
            Extra::None => ExtraKind::Velocity,
            Extra::Gradient => ExtraKind::Gradient,
            Extra::Stretching { scheme, .. } => ExtraKind::Stretching(*scheme),
        }
    }
}

/// The particles of one evaluation on the device, in the caller's order: positions and
/// strengths (3 per source), cores (1 per source), and other targets (3 per target) with their
/// number.
struct Inputs<'a> {
    x: &'a CudaSlice<f64>,
    alpha: &'a CudaSlice<f64>,
    sigma: &'a CudaSlice<f64>,
    n: usize,
    targets: Option<(&'a CudaSlice<f64>, usize)>,
}

/// The host forms' inputs uploaded in the caller's order (grow only): positions, charges (3
/// strengths or 1 mass per source), cores, other targets.
#[derive(Default)]
pub(super) struct Staged {
    pub(super) x: DeviceBuffer<f64>,
    pub(super) alpha: DeviceBuffer<f64>,
    pub(super) sigma: DeviceBuffer<f64>,
    pub(super) targets: DeviceBuffer<f64>,
}

/// Where the results go.
enum Outputs<'a> {
    /// The engine's own buffers, downloaded afterwards (the host form).
    Staged,
    /// The caller's device buffers (3 per target, 9 or 3 for the extra) and the target
    /// strengths of a stretching (3 per target, the caller's order).
    Device {
        u: &'a mut DeviceBuffer<f64>,
        x: &'a mut DeviceBuffer<f64>,
        alpha: Option<&'a cudarc::driver::CudaSlice<f64>>,
    },
}

impl DeviceSummation for CudaFmm {
    fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The host form's kernels on resident particles: the trees and lists are built on the
    /// device from the resident positions and cores (the largest core comes back, 8 bytes), the
    /// strengths are gathered into tree order there, and the results are written straight into
    /// `out`. Only a due built-in check brings particles and results to the host.
    fn evaluate_on_device(&mut self, work: DeviceWork, out: &mut DeviceEvaluation) -> SumResult {
        let src = work.sources;
        let n = src.n;
        let sigma_max = match n {
            0 => 0.0,
            _ => self.tree.sort().max(src.sigma.get(), n)?,
        };
        let (tbuf, nt) = match work.targets {
            DeviceTargets::Sources => (None, n),
            DeviceTargets::Points { x, n: nt } => (Some((x.get(), *nt)), *nt),
        };
        let (extra, talpha) = match work.extra {
            DeviceExtra::None => (ExtraKind::Velocity, None),
            DeviceExtra::Gradient => (ExtraKind::Gradient, None),
            DeviceExtra::Stretching { alpha, scheme } => (
                ExtraKind::Stretching(*scheme),
                Some(alpha.map_or(src.alpha.get(), |a| a.get())),
            ),
        };
        let s = self.stream.clone();
        out.velocity.ensure(&s, 3 * nt)?;
        let xlen = match extra {
            ExtraKind::Velocity => 1,
            ExtraKind::Gradient => 9 * nt,
            ExtraKind::Stretching(_) => 3 * nt,
        };
        let xbuf = match extra {
            ExtraKind::Gradient => &mut out.gradient,
            _ => &mut out.stretching,
        };
        xbuf.ensure(&s, xlen)?;
        let inputs = Inputs {
            x: src.x.get(),
            alpha: src.alpha.get(),
            sigma: src.sigma.get(),
            n,
            targets: tbuf,
        };
        let outputs = Outputs::Device {
            u: &mut out.velocity,
            x: xbuf,
            alpha: talpha,
        };
        self.run(&inputs, sigma_max, extra, outputs)?;
        // The built-in check, as in the host form: on a due evaluation the positions, cores,
        // results, strengths and target strengths come to the host for the sampled comparison.
        if !self.state.schedule.next_is_due(sigma_max) {
            let none = Sources {
                x: &[],
                alpha: &[],
                sigma: &[],
            };
            let req = Request {
                sources: &none,
                targets: &[],
                extra: Extra::None,
            };
            return self.after_evaluation(&req, &Evaluation::default(), sigma_max);
        }
        let to3 =
            |v: Vec<f64>| -> Vec<[f64; 3]> { v.chunks(3).map(|c| [c[0], c[1], c[2]]).collect() };
        let x3 = to3(self.to_host(src.x, 3 * n, "positions")?);
        let sig = self.to_host(src.sigma, n, "core radii")?;
        let targets_host = match work.targets {
            DeviceTargets::Sources => None,
            DeviceTargets::Points { x, n: nt } => Some(to3(self.to_host(x, 3 * nt, "targets")?)),
        };
        let targets: &[[f64; 3]] = targets_host.as_deref().unwrap_or(&x3);
        let alpha = to3(self.to_host(src.alpha, 3 * n, "strengths")?);
        let mut host = Evaluation {
            velocity: to3(self.to_host(&out.velocity, 3 * nt, "velocities")?),
            ..Default::default()
        };
        let target_alpha;
        let host_extra = match (extra, work.extra) {
            (ExtraKind::Velocity, _) => Extra::None,
            (ExtraKind::Gradient, _) => {
                host.gradient = self
                    .to_host(&out.gradient, 9 * nt, "gradients")?
                    .chunks(9)
                    .map(|v| [[v[0], v[1], v[2]], [v[3], v[4], v[5]], [v[6], v[7], v[8]]])
                    .collect();
                Extra::Gradient
            }
            (ExtraKind::Stretching(scheme), DeviceExtra::Stretching { alpha: ta, .. }) => {
                host.stretching = to3(self.to_host(&out.stretching, 3 * nt, "stretching")?);
                target_alpha = match ta {
                    Some(a) => to3(self.to_host(a, 3 * nt, "target strengths")?),
                    None => alpha.clone(),
                };
                Extra::Stretching {
                    alpha: &target_alpha,
                    scheme,
                }
            }
            (ExtraKind::Stretching(_), _) => unreachable!("the extra kind comes from work.extra"),
        };
        let full = Sources {
            x: &x3,
            alpha: &alpha,
            sigma: &sig,
        };
        let req = Request {
            sources: &full,
            targets,
            extra: host_extra,
        };
        self.after_evaluation(&req, &host, sigma_max)
    }

    /// The blob vorticity through the host (free-space runs do not reinitialise; this serves
    /// diagnostics): positions, strengths and cores come to the host, the CPU FMM's near sum
    /// runs there, and the result goes back.
    fn vorticity_on_device(&mut self, at: DevicePoints, out: &mut DeviceBuffer<f64>) -> SumResult {
        let DevicePoints { sources, targets } = at;
        let n = sources.n;
        let to3 =
            |v: Vec<f64>| -> Vec<[f64; 3]> { v.chunks(3).map(|c| [c[0], c[1], c[2]]).collect() };
        let x = to3(self.to_host(sources.x, 3 * n, "positions")?);
        let a = to3(self.to_host(sources.alpha, 3 * n, "strengths")?);
        let sig = self.to_host(sources.sigma, n, "core radii")?;
        let at = match targets {
            DeviceTargets::Sources => x.clone(),
            DeviceTargets::Points { x: t, n: nt } => to3(self.to_host(t, 3 * nt, "targets")?),
        };
        let mut w = Vec::new();
        self.vorticity(
            &Sources {
                x: &x,
                alpha: &a,
                sigma: &sig,
            },
            &at,
            &mut w,
        )?;
        let flat: Vec<f64> = w.iter().flatten().copied().collect();
        out.upload(&self.stream, &flat, "blob vorticity")?;
        Ok(())
    }
}

impl Summation for CudaFmm {
    fn name(&self) -> String {
        match &self.periodic {
            Some(per) => per.name(&self.state.params),
            None => format!(
                "FMM free-space GPU (f64 expansions, f32 near field), {}",
                self.state.params
            ),
        }
    }

    fn boundary(&self) -> Boundary {
        match self.periodic {
            Some(_) => Boundary::Periodic {
                length: std::f64::consts::TAU,
            },
            None => Boundary::FreeSpace,
        }
    }

    fn evaluate_request(&mut self, req: Request, out: &mut Evaluation) -> SumResult {
        let (_, sigma_max) = sigma_range(req.sources)?;
        let (src, targets) = (req.sources, req.targets);
        // The targets are the sources when they are the same array (one tree for both).
        let same = std::ptr::eq(targets.as_ptr(), src.x.as_ptr()) && targets.len() == src.len();
        let s = self.stream.clone();
        let mut staged = std::mem::take(&mut self.staged);
        staged.x.upload(&s, &flat(src.x), "positions")?;
        staged.alpha.upload(&s, &flat(src.alpha), "strengths")?;
        staged.sigma.upload(&s, src.sigma, "core radii")?;
        if !same {
            staged.targets.upload(&s, &flat(targets), "targets")?;
        }
        if let Extra::Stretching { alpha, .. } = req.extra {
            self.buf
                .t_alpha
                .upload(&s, &flat(alpha), "target strengths")?;
        }
        let inputs = Inputs {
            x: staged.x.get(),
            alpha: staged.alpha.get(),
            sigma: staged.sigma.get(),
            n: src.len(),
            targets: (!same).then(|| (staged.targets.get(), targets.len())),
        };
        let extra = ExtraKind::of(&req.extra);
        let result = self.run(&inputs, sigma_max, extra, Outputs::Staged);
        self.staged = staged;
        result?;
        self.download(req.targets.len(), &req.extra, out)?;
        self.after_evaluation(&req, out, sigma_max)
    }

    fn device_form(&mut self) -> Option<&mut dyn DeviceSummation> {
        Some(self)
    }

    fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck> {
        self.state.schedule.take()
    }

    /// The blob vorticity is a short-range sum: the CPU FMM's tree-based near sum (f64), or in
    /// the periodic box the CPU Ewald engine's (images included).
    fn vorticity(&mut self, src: &Sources, at: &[[f64; 3]], out: &mut Vec<[f64; 3]>) -> SumResult {
        if let Some(per) = self.periodic.as_deref_mut() {
            return per.ewald.vorticity(src, at, out);
        }
        let mut cpu = super::FmmFreeSpace::with_params(self.state.params, 0);
        cpu.vorticity(src, at, out)
    }
}

impl Fmm for CudaFmm {
    fn state(&self) -> &FmmState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut FmmState {
        &mut self.state
    }
}
