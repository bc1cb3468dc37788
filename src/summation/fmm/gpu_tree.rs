//! The FMM's trees and interaction lists built on the GPU (`kernels/fmm_tree.cu`), particles
//! resident: the same cells, leaves, levels and lists as the host's [`Octree::build`] and
//! [`build_lists`](super::traversal::build_lists), value for value and in the same order
//! (`tests/gpu_tree.rs` compares them).
//!
//! A tree: the bounding box by a device reduction, downloaded (6 values) and turned into the
//! root cube and Morton grid by the host's own [`BoundingCube::of`]; the keys; the shared radix
//! sort of (key, index) pairs ([`DeviceSort`], stable, so ties keep index order as the host's
//! sort of pairs); the positions and cores gathered into tree order; then level by level a count
//! of each cell's children, a scan and an emit pass that writes the next level breadth first.
//! The level's child count is downloaded to size the next launch (one 4-byte download per level);
//! the leaves are compacted in cell order; radii and core maxima come from the leaves' particles
//! and then upward level by level. The lists: per target level, one thread per cell resolves its
//! parent's near sources depth first in the host's order (a count pass, a scan, a write pass;
//! two 4-byte downloads per level), the far sources of the levels concatenated give the M2L rows
//! in cell order, the leaves' near rows compacted give the P2P rows in leaf order, and the
//! near-field pair count is summed on the device (one 8-byte download). So an evaluation makes
//! about three small downloads per tree level, a few tens in all, and no large transfer.
//!
//! **Images** (the periodic box, [`super::cuda`]'s periodic mode): with a table of image shifts
//! ([`GpuTree::set_images`]) the lists are the host's
//! [`build_image_lists`](super::traversal::build_image_lists): the target root's candidates are
//! the source root once per shift, the criterion's distance is c_t − (c_s + shift) rounded as
//! the host rounds it, and every M2L and P2P entry carries its shift's index (u16,
//! [`DeviceLists::m2l_shifts`], [`DeviceLists::p2p_shifts`]). [`GpuTree::wrap`] wraps positions
//! into the box as the host's `wrap` does, bit for bit.
//!
//! Every buffer lives in [`GpuTree`] and grows only; values that decide the criterion (centres,
//! half sides, radii, distances, gaps) are computed without fused multiply-adds (the module is
//! compiled with `--fmad=false`), so they equal the host's bit for bit.

use super::traversal::{ImageLists, InteractionLists};
use super::tree::{BoundingCube, Cell, Octree, MAX_LEVEL};
use super::FmmStats;
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{
    kernel_source, launch, load_kernels, CudaError, Doing, Gpu, KernelSource,
};
use crate::device::sort::{cfg_items, DeviceSort};
use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, DeviceRepr, PushKernelArg, ValidAsZeroBits,
};
use std::ops::Range;
use std::sync::Arc;

/// The kernel family (compiled with `--fmad=false`).
pub const KERNELS: KernelSource =
    kernel_source!("fmm_tree.cu", crate::summation::cells::BOX_HEADER);
/// Threads per block of the tree kernels.
const THREADS: u32 = 128;
/// Bits of the Morton keys the sort orders.
const KEY_BITS: u32 = 3 * MAX_LEVEL as u32;

struct Kernels {
    keys: CudaFunction,
    gather: CudaFunction,
    root: CudaFunction,
    count: CudaFunction,
    emit: CudaFunction,
    leaf_flags: CudaFunction,
    leaf_write: CudaFunction,
    leaf_props: CudaFunction,
    upward: CudaFunction,
    lists_count: CudaFunction,
    lists_write: CudaFunction,
    p2p_count: CudaFunction,
    p2p_write: CudaFunction,
    wrap: CudaFunction,
}

/// The core radii of a tree's points: one per point (device array in the caller's order) or
/// one for all (gravity's unit length scale; 0 for a target tree).
#[derive(Clone, Copy)]
pub enum Cores<'a> {
    PerPoint(&'a CudaSlice<f64>),
    Uniform(f64),
}

/// One octree on the device: the cells as arrays (centre 3 per cell), the leaves, the sorted
/// order and the points in it, and the host's view of its shape.
#[derive(Default)]
pub struct DeviceTree {
    pub center: DeviceBuffer<f64>,
    pub half: DeviceBuffer<f64>,
    pub radius: DeviceBuffer<f64>,
    pub sigma_max: DeviceBuffer<f64>,
    pub begin: DeviceBuffer<u32>,
    pub end: DeviceBuffer<u32>,
    pub child_begin: DeviceBuffer<u32>,
    pub child_count: DeviceBuffer<u8>,
    pub parent: DeviceBuffer<u32>,
    pub leaves: DeviceBuffer<u32>,
    /// `order[i]`: the caller's index of the i-th point in tree order.
    pub order: DeviceBuffer<u32>,
    /// The points in tree order (3 per point) and, for per-point cores, the cores.
    pub x: DeviceBuffer<f64>,
    pub cores: DeviceBuffer<f64>,
    keys: DeviceBuffer<u64>,
    /// The root cube's centre (cell 0's, kept on the host).
    pub root_center: [f64; 3],
    /// Points, cells and leaves, and the cell range of each level (root first).
    pub n: usize,
    pub n_cells: usize,
    pub n_leaves: usize,
    pub levels: Vec<Range<usize>>,
}

impl DeviceTree {
    /// Number of levels.
    pub fn depth(&self) -> usize {
        self.levels.len()
    }

    /// Makes room for `cells` cells, keeping the first `keep`.
    fn reserve_cells(&mut self, s: &Arc<CudaStream>, cells: usize, keep: usize) -> CudaResult {
        self.center.grow_keep(s, 3 * cells, 3 * keep)?;
        self.half.grow_keep(s, cells, keep)?;
        self.radius.grow_keep(s, cells, keep)?;
        self.sigma_max.grow_keep(s, cells, keep)?;
        self.begin.grow_keep(s, cells, keep)?;
        self.end.grow_keep(s, cells, keep)?;
        self.child_begin.grow_keep(s, cells, keep)?;
        self.child_count.grow_keep(s, cells, keep)?;
        self.parent.grow_keep(s, cells, keep)
    }

    /// The tree on the host (tests): cells, order, levels and leaves as [`Octree`] holds them.
    pub fn download(&self, gpu: &Gpu) -> Result<Octree, CudaError> {
        if self.n_cells == 0 {
            return Ok(Octree::default());
        }
        let nc = self.n_cells;
        let center = fetch(gpu, &self.center, 3 * nc)?;
        let half = fetch(gpu, &self.half, nc)?;
        let radius = fetch(gpu, &self.radius, nc)?;
        let sigma_max = fetch(gpu, &self.sigma_max, nc)?;
        let begin = fetch(gpu, &self.begin, nc)?;
        let end = fetch(gpu, &self.end, nc)?;
        let child_begin = fetch(gpu, &self.child_begin, nc)?;
        let child_count = fetch(gpu, &self.child_count, nc)?;
        let parent = fetch(gpu, &self.parent, nc)?;
        let mut cells = Vec::with_capacity(nc);
        for (level, r) in self.levels.iter().enumerate() {
            for c in r.clone() {
                cells.push(Cell {
                    center: [center[3 * c], center[3 * c + 1], center[3 * c + 2]],
                    half: half[c],
                    radius: radius[c],
                    sigma_max: sigma_max[c],
                    begin: begin[c],
                    end: end[c],
                    child_begin: child_begin[c],
                    child_count: child_count[c],
                    level: level as u8,
                    parent: parent[c],
                });
            }
        }
        Ok(Octree {
            cells,
            order: fetch(gpu, &self.order, self.n)?,
            levels: self.levels.clone(),
            leaves: fetch(gpu, &self.leaves, self.n_leaves)?,
        })
    }
}

/// The interaction lists on the device: the M2L rows of every target cell and the P2P rows of
/// every target leaf (as [`InteractionLists`]), and the near rows of every target cell they are
/// made from.
#[derive(Default)]
pub struct DeviceLists {
    pub m2l_offsets: DeviceBuffer<u32>,
    pub m2l_sources: DeviceBuffer<u32>,
    pub p2p_offsets: DeviceBuffer<u32>,
    pub p2p_sources: DeviceBuffer<u32>,
    /// With images: the shift index of every entry of `m2l_sources` and of `p2p_sources`.
    pub m2l_shifts: DeviceBuffer<u16>,
    pub p2p_shifts: DeviceBuffer<u16>,
    near_offsets: DeviceBuffer<u32>,
    near_sources: DeviceBuffer<u32>,
    near_shifts: DeviceBuffer<u16>,
    pairs: DeviceBuffer<u64>,
    /// Entries of the M2L and P2P rows, and the source particles summed directly over all
    /// targets.
    pub m2l_count: usize,
    pub p2p_count: usize,
    pub p2p_pairs: u64,
}

/// What one build takes: the sources (positions, 3 per point in the caller's order, and their
/// cores), the targets when they are other points, and the parameters of the host's
/// [`Structure::build_scaled`](super::Structure::build_scaled).
pub struct TreeRequest<'a> {
    pub x: &'a CudaSlice<f64>,
    pub n: usize,
    pub cores: Cores<'a>,
    /// Other targets (positions, 3 per target) and their number; `None`: the sources.
    pub targets: Option<(&'a CudaSlice<f64>, usize)>,
    pub leaf_size: usize,
    pub theta: f64,
    /// Expansions only beyond `rho_cut` × a source's core (its length scale); leaves are not
    /// split below a side of `rho_cut` × `scale_max` / 4.
    pub rho_cut: f64,
    pub scale_max: f64,
}

type CudaResult = Result<(), CudaError>;

/// What the far-field passes need of a tree besides its device arrays: its cell, leaf and
/// level ranges (the names of [`Octree`]'s fields, so code written for either reads alike).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TreeShape {
    pub cells: Range<usize>,
    pub leaves: Range<usize>,
    pub levels: Vec<Range<usize>>,
}

impl TreeShape {
    pub fn depth(&self) -> usize {
        self.levels.len()
    }
}

/// The shapes of one evaluation's trees: the sources' and, when the targets are other points,
/// the targets' (as [`super::Structure`] holds the trees).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shape {
    pub sources: TreeShape,
    pub target_tree: Option<TreeShape>,
}

impl Shape {
    pub fn targets(&self) -> &TreeShape {
        self.target_tree.as_ref().unwrap_or(&self.sources)
    }
}

impl DeviceTree {
    /// Its cell, leaf and level ranges.
    pub fn shape(&self) -> TreeShape {
        TreeShape {
            cells: 0..self.n_cells,
            leaves: 0..self.n_leaves,
            levels: self.levels.clone(),
        }
    }
}

/// The trees and lists of one evaluation on the GPU, and the buffers they live in (reused, grow
/// only).
pub struct GpuTree {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    k: Kernels,
    sort: DeviceSort,
    counts: DeviceBuffer<u32>,
    events: [CudaEvent; 2],
    pub sources: DeviceTree,
    /// The target tree when the last build had other targets.
    pub targets: DeviceTree,
    pub own_targets: bool,
    pub lists: DeviceLists,
    /// The image shifts the sources are seen through (3 per shift; `None`: free space).
    images: Option<(DeviceBuffer<f64>, usize)>,
    /// Device seconds of the last build (CUDA events).
    pub seconds: f64,
}

/// The first `len` values of `buf` on the host.
fn fetch<T: DeviceRepr + ValidAsZeroBits + Default + Clone>(
    gpu: &Gpu,
    buf: &DeviceBuffer<T>,
    len: usize,
) -> Result<Vec<T>, CudaError> {
    let mut v = vec![T::default(); len];
    if len > 0 {
        buf.download(gpu, &mut v, "the GPU tree")?;
    }
    Ok(v)
}

/// Value `i` of `buf` on the host (one small download).
fn read_at(gpu: &Gpu, buf: &DeviceBuffer<u32>, i: usize) -> Result<u32, CudaError> {
    let mut v = [0u32];
    gpu.copy_to_host(
        &buf.get().slice(i..i + 1),
        &mut v,
        "a count of the GPU tree",
    )?;
    Ok(v[0])
}

/// Leaves are not split below this side (the host's rule in `Structure::build_scaled`).
pub fn min_leaf_side(rho_cut: f64, scale_max: f64) -> f64 {
    0.25 * rho_cut * scale_max
}

impl GpuTree {
    /// Loads the kernels on `gpu` (compiled once per process and GPU).
    pub fn new(gpu: &Arc<Gpu>) -> Result<Self, CudaError> {
        let module = gpu.module_from(&KERNELS, &["--fmad=false".to_string()])?;
        #[rustfmt::skip]
        let k = load_kernels!(module, "tree_", Kernels {
            keys, gather, root, count, emit, leaf_flags, leaf_write, leaf_props, upward,
            lists_count, lists_write, p2p_count, p2p_write, wrap
        });
        Ok(Self {
            gpu: gpu.clone(),
            stream: gpu.stream().clone(),
            k,
            sort: DeviceSort::new(gpu)?,
            counts: DeviceBuffer::new(),
            events: [gpu.event()?, gpu.event()?],
            sources: DeviceTree::default(),
            targets: DeviceTree::default(),
            own_targets: false,
            lists: DeviceLists::default(),
            images: None,
            seconds: 0.0,
        })
    }

    /// The image shifts the next builds see the sources through (the periodic box's near
    /// images, at most 65 536, in the host's table order); an empty table: free space.
    pub fn set_images(&mut self, shifts: &[[f64; 3]]) -> CudaResult {
        assert!(shifts.len() <= 1 << 16, "at most 65 536 image shifts");
        self.images = match shifts.len() {
            0 => None,
            n => {
                let mut table = DeviceBuffer::new();
                table.upload(&self.stream, &shifts.concat(), "the image shifts")?;
                Some((table, n))
            }
        };
        Ok(())
    }

    /// Device addresses of the last build's M2L and P2P entries' shift indices and of the shift
    /// table; all null (0) without images.
    pub fn shift_addrs(&self) -> [u64; 3] {
        let s = &self.stream;
        match (&self.images, self.lists.m2l_count, self.lists.p2p_count) {
            (Some((table, _)), m, p) if m > 0 || p > 0 => {
                let addr = |b: &DeviceBuffer<u16>, n: usize| if n > 0 { b.addr(s) } else { 0 };
                [
                    addr(&self.lists.m2l_shifts, m),
                    addr(&self.lists.p2p_shifts, p),
                    table.addr(s),
                ]
            }
            _ => [0; 3],
        }
    }

    /// Queues the `n` points at `x` (3 doubles each) wrapped into the box [−π, π)³ into `out`
    /// (grown as needed), as the host's `cells::wrap` does, bit for bit.
    pub fn wrap(&self, x: &CudaSlice<f64>, n: usize, out: &mut DeviceBuffer<f64>) -> CudaResult {
        let s = &self.stream;
        assert!(x.len() >= 3 * n);
        out.ensure(s, 3 * n)?;
        if n == 0 {
            return Ok(());
        }
        let n3 = 3 * n as i32;
        // SAFETY: tree_wrap(x, n3, out): x holds 3n doubles (asserted), out 3n (ensured).
        launch!(s, &self.k.wrap, "tree_wrap", cfg_items(3 * n, THREADS);
            x, &n3, out.get_mut())?;
        Ok(())
    }

    /// The shared sort (for the engines' other reductions).
    pub fn sort(&mut self) -> &mut DeviceSort {
        &mut self.sort
    }

    /// The tree the targets live in.
    pub fn target_tree(&self) -> &DeviceTree {
        if self.own_targets {
            &self.targets
        } else {
            &self.sources
        }
    }

    /// Builds the trees and lists of `req` on the device (waits for the small counts it
    /// downloads; the last wait ends the build, whose device time goes to [`Self::seconds`]).
    pub fn build(&mut self, req: &TreeRequest) -> CudaResult {
        let min_side = min_leaf_side(req.rho_cut, req.scale_max);
        self.events[0]
            .record(&self.stream)
            .doing("recording an event")?;
        let mut parts = Parts {
            gpu: &self.gpu,
            s: &self.stream,
            k: &self.k,
            sort: &mut self.sort,
            counts: &mut self.counts,
        };
        parts.tree(
            &mut self.sources,
            req.x,
            req.n,
            req.cores,
            req.leaf_size,
            min_side,
        )?;
        self.own_targets = req.targets.is_some();
        if let Some((tx, nt)) = req.targets {
            let zero = Cores::Uniform(0.0);
            parts.tree(&mut self.targets, tx, nt, zero, req.leaf_size, min_side)?;
        }
        let t = if self.own_targets {
            &self.targets
        } else {
            &self.sources
        };
        let images = self
            .images
            .as_ref()
            .map(|(b, n)| (b.addr(&self.stream), *n));
        let criterion = (req.theta, req.rho_cut);
        parts.lists(t, &self.sources, criterion, images, &mut self.lists)?;
        self.events[1]
            .record(&self.stream)
            .doing("recording an event")?;
        let mut pairs = [0u64];
        if t.n_leaves > 0 && self.sources.n_cells > 0 {
            self.lists
                .pairs
                .download(&self.gpu, &mut pairs, "the near-field pairs")?;
        } else {
            self.gpu.synchronize("the GPU tree")?;
        }
        self.lists.p2p_pairs = pairs[0];
        let ms = self
            .gpu
            .elapsed_ms(&self.events[0], &self.events[1], "the GPU tree")?;
        self.seconds = ms as f64 * 1e-3;
        Ok(())
    }

    /// Queues the gather of `width` values per source point (`src`, in the caller's order, at
    /// least `width` × the last build's source count) into tree order in `dst` (grown as needed):
    /// the strengths or masses that go with the sorted positions.
    pub fn gather_sources(
        &self,
        width: usize,
        src: &CudaSlice<f64>,
        dst: &mut DeviceBuffer<f64>,
    ) -> CudaResult {
        let (s, n) = (&self.stream, self.sources.n);
        assert!(src.len() >= width * n && width > 0);
        dst.ensure(s, width * n)?;
        if n == 0 {
            return Ok(());
        }
        let (ni, wi) = (n as i32, width as i32);
        // SAFETY: tree_gather(order, n, width, src, dst): the source tree's order holds a
        // permutation of 0..n, src width·n doubles (asserted), dst width·n (ensured).
        launch!(s, &self.k.gather, "tree_gather", cfg_items(n, THREADS);
            self.sources.order.get(), &ni, &wi, src, dst.get_mut())?;
        Ok(())
    }

    /// The shapes of the last build's trees.
    pub fn shape(&self) -> Shape {
        Shape {
            sources: self.sources.shape(),
            target_tree: self.own_targets.then(|| self.targets.shape()),
        }
    }

    /// Fills the counts of `stats` (as [`super::Structure::count`]) and the tree time.
    pub fn count(&self, stats: &mut FmmStats) {
        let t = self.target_tree();
        stats.tree_seconds = self.seconds;
        stats.cells = self.sources.n_cells + if self.own_targets { t.n_cells } else { 0 };
        stats.leaves = t.n_leaves;
        stats.depth = self.sources.depth().max(t.depth());
        stats.m2l_pairs = self.lists.m2l_count;
        stats.p2p_pairs = self.lists.p2p_pairs;
        stats.targets = t.n;
    }

    /// The last build on the host (tests): the source tree, the target tree when the targets
    /// were other points, and the lists.
    pub fn download(&self) -> Result<(Octree, Option<Octree>, InteractionLists), CudaError> {
        let gpu = &self.gpu;
        let t = self.target_tree();
        let l = &self.lists;
        let lists = InteractionLists {
            m2l_offsets: fetch(gpu, &l.m2l_offsets, t.n_cells + 1)?,
            m2l_sources: fetch(gpu, &l.m2l_sources, l.m2l_count)?,
            p2p_offsets: fetch(gpu, &l.p2p_offsets, t.n_leaves + 1)?,
            p2p_sources: fetch(gpu, &l.p2p_sources, l.p2p_count)?,
        };
        let targets = match self.own_targets {
            true => Some(self.targets.download(gpu)?),
            false => None,
        };
        Ok((self.sources.download(gpu)?, targets, lists))
    }

    /// The last build's lists with their image shifts on the host (tests; the shifts empty
    /// without images).
    pub fn download_image_lists(&self) -> Result<ImageLists, CudaError> {
        let (_, _, lists) = self.download()?;
        let l = &self.lists;
        let with = self.images.is_some();
        let shifts = |b: &DeviceBuffer<u16>, n: usize| match with {
            true => fetch(&self.gpu, b, n),
            false => Ok(Vec::new()),
        };
        Ok(ImageLists {
            m2l_shifts: shifts(&l.m2l_shifts, l.m2l_count)?,
            p2p_shifts: shifts(&l.p2p_shifts, l.p2p_count)?,
            lists,
        })
    }
}

/// What the build passes need, borrowed apart from the trees.
struct Parts<'a> {
    gpu: &'a Gpu,
    s: &'a Arc<CudaStream>,
    k: &'a Kernels,
    sort: &'a mut DeviceSort,
    counts: &'a mut DeviceBuffer<u32>,
}

impl Parts<'_> {
    /// Exclusive scan of the first `n` counts; returns the value at `at` (downloaded).
    fn scan_read(&mut self, n: usize, at: &[usize]) -> Result<Vec<u32>, CudaError> {
        self.sort.exclusive_scan(self.counts.get_mut(), n)?;
        at.iter()
            .map(|&i| read_at(self.gpu, self.counts, i))
            .collect()
    }

    /// The octree of the `n` points at `x` (3 doubles each) into `tree`.
    fn tree(
        &mut self,
        tree: &mut DeviceTree,
        x: &CudaSlice<f64>,
        n: usize,
        cores: Cores,
        leaf_size: usize,
        min_side: f64,
    ) -> CudaResult {
        let (s, k) = (self.s, self.k);
        tree.n = n;
        tree.levels.clear();
        tree.n_cells = 0;
        tree.n_leaves = 0;
        if n == 0 {
            return Ok(());
        }
        assert!(x.len() >= 3 * n && n < u32::MAX as usize);
        let (lo, hi) = self.sort.bounds(x, n)?;
        let cube = BoundingCube::of(lo, hi);
        tree.root_center = cube.center;
        tree.keys.ensure(s, n)?;
        tree.order.ensure(s, n)?;
        let ni = n as i32;
        let [c0, c1, c2] = cube.corner;
        // SAFETY: tree_keys(x, n, c0, c1, c2, scale, keys, index): x holds 3n doubles
        // (asserted), keys and index n values (ensured).
        launch!(s, &k.keys, "tree_keys", cfg_items(n, THREADS);
            x, &ni, &c0, &c1, &c2, &cube.scale, tree.keys.get_mut(), tree.order.get_mut())?;
        self.sort
            .sort_pairs(tree.keys.get_mut(), tree.order.get_mut(), n, KEY_BITS)?;
        tree.x.ensure(s, 3 * n)?;
        let (three, one) = (3i32, 1i32);
        // SAFETY: tree_gather(order, n, width, src, dst): order holds a permutation of 0..n,
        // src 3n doubles, dst 3n (ensured).
        launch!(s, &k.gather, "tree_gather", cfg_items(n, THREADS);
            tree.order.get(), &ni, &three, x, tree.x.get_mut())?;
        let uniform = match cores {
            Cores::PerPoint(sig) => {
                assert!(sig.len() >= n);
                tree.cores.ensure(s, n)?;
                // SAFETY: as above, one core per point (sig holds n, asserted).
                launch!(s, &k.gather, "tree_gather", cfg_items(n, THREADS);
                    tree.order.get(), &ni, &one, sig, tree.cores.get_mut())?;
                None
            }
            Cores::Uniform(v) => Some(v),
        };

        // Cells, level by level.
        tree.reserve_cells(s, (2 * n / leaf_size.max(1)).max(64), 0)?;
        let [r0, r1, r2] = cube.center;
        // SAFETY: tree_root(c0, c1, c2, half, n, center, half, begin, end, child_begin,
        // child_count, parent): one thread writes cell 0 of arrays holding ≥ 64 cells.
        launch!(s, &k.root, "tree_root", cfg_items(1, 32);
            &r0, &r1, &r2, &cube.half, &ni, tree.center.get_mut(), tree.half.get_mut(),
            tree.begin.get_mut(), tree.end.get_mut(), tree.child_begin.get_mut(),
            tree.child_count.get_mut(), tree.parent.get_mut())?;
        tree.levels.push(0..1);
        let mut n_cells = 1usize;
        let leaf = leaf_size.min(u32::MAX as usize) as u32;
        for level in 0.. {
            let r = tree.levels[level].clone();
            let (first, count, lv) = (r.start as i32, r.len() as i32, level as i32);
            self.counts.ensure(s, r.len() + 1)?;
            // SAFETY: tree_count(first, count, level, leaf_size, min_side, keys, half, begin,
            // end, nchild): cells first..first+count exist; their ranges index the n sorted
            // keys; nchild holds count + 1 values (ensured); the grid covers count + 1.
            launch!(s, &k.count, "tree_count", cfg_items(r.len() + 1, THREADS);
                &first, &count, &lv, &leaf, &min_side, tree.keys.get(), tree.half.get(),
                tree.begin.get(), tree.end.get(), self.counts.get_mut())?;
            let total = self.scan_read(r.len() + 1, &[r.len()])?[0] as usize;
            if total == 0 {
                break;
            }
            tree.reserve_cells(s, n_cells + total, n_cells)?;
            // SAFETY: tree_emit(first, count, level, keys, offs, center, half, begin, end,
            // child_begin, child_count, parent): offs holds the scanned count + 1 child counts;
            // the children go to cells first + count .. + total = n_cells + total (reserved).
            launch!(s, &k.emit, "tree_emit", cfg_items(r.len(), THREADS);
                &first, &count, &lv, tree.keys.get(), self.counts.get(),
                tree.center.get_mut(), tree.half.get_mut(), tree.begin.get_mut(),
                tree.end.get_mut(), tree.child_begin.get_mut(), tree.child_count.get_mut(),
                tree.parent.get_mut())?;
            tree.levels.push(n_cells..n_cells + total);
            n_cells += total;
        }
        tree.n_cells = n_cells;

        // Leaves in cell order.
        let nci = n_cells as i32;
        self.counts.ensure(s, n_cells + 1)?;
        // SAFETY: tree_leaf_flags(n_cells, child_count, flags): child_count holds n_cells
        // values, flags n_cells + 1 (ensured); the grid covers n_cells + 1.
        launch!(s, &k.leaf_flags, "tree_leaf_flags", cfg_items(n_cells + 1, THREADS);
            &nci, tree.child_count.get(), self.counts.get_mut())?;
        let n_leaves = self.scan_read(n_cells + 1, &[n_cells])?[0] as usize;
        tree.n_leaves = n_leaves;
        tree.leaves.ensure(s, n_leaves)?;
        // SAFETY: tree_leaf_write(n_cells, child_count, offs, leaves): offs holds the scanned
        // flags (n_cells + 1), leaves n_leaves values (the flags' sum, ensured).
        launch!(s, &k.leaf_write, "tree_leaf_write", cfg_items(n_cells, THREADS);
            &nci, tree.child_count.get(), self.counts.get(), tree.leaves.get_mut())?;

        // Radii and core maxima: the leaves from their particles, then upwards.
        let nli = n_leaves as i32;
        let (sig_ptr, uni) = match uniform {
            None => (tree.cores.addr(s), 0.0),
            Some(v) => (0u64, v),
        };
        // SAFETY: tree_leaf_props(n_leaves, leaves, center, begin, end, xs, sig, uniform,
        // radius, sigma): leaves index cells whose particle ranges lie in 0..n; xs holds the 3n
        // sorted positions, sig the n sorted cores or is null; radius and sigma n_cells values.
        launch!(s, &k.leaf_props, "tree_leaf_props", cfg_items(n_leaves, THREADS);
            &nli, tree.leaves.get(), tree.center.get(), tree.begin.get(), tree.end.get(),
            tree.x.get(), &sig_ptr, &uni, tree.radius.get_mut(), tree.sigma_max.get_mut())?;
        for r in tree.levels.iter().rev() {
            let (first, count) = (r.start as i32, r.len() as i32);
            // SAFETY: tree_upward(first, count, center, half, child_begin, child_count, radius,
            // sigma): cells first..first+count exist, their children are cells of the next
            // level (already final: leaves above, the previous launch for split cells).
            launch!(s, &k.upward, "tree_upward", cfg_items(r.len(), THREADS);
                &first, &count, tree.center.get(), tree.half.get(), tree.child_begin.get(),
                tree.child_count.get(), tree.radius.get_mut(), tree.sigma_max.get_mut())?;
        }
        Ok(())
    }

    /// The interaction lists of the targets of `t` with the sources of `src` (the same tree
    /// when the targets are the sources) into `out`, by the criterion (θ, ρ_c); with `images`
    /// (the shift table's device address and its number of shifts) through every shift, each
    /// entry's shift index into `out`'s shift arrays.
    fn lists(
        &mut self,
        t: &DeviceTree,
        src: &DeviceTree,
        (theta, rho_cut): (f64, f64),
        images: Option<(u64, usize)>,
        out: &mut DeviceLists,
    ) -> CudaResult {
        let s = self.s;
        let k = self.k;
        out.m2l_count = 0;
        out.p2p_count = 0;
        out.p2p_pairs = 0;
        if t.n_cells == 0 || src.n_cells == 0 {
            out.m2l_offsets.zero(s, t.n_cells + 1)?;
            out.p2p_offsets.zero(s, t.n_leaves + 1)?;
            return Ok(());
        }
        out.m2l_offsets.ensure(s, t.n_cells + 1)?;
        out.near_offsets.ensure(s, t.n_cells + 1)?;
        out.m2l_sources.ensure(s, 1)?;
        out.near_sources.ensure(s, 1)?;
        let (table, n_shifts) = images.unwrap_or((0, 1));
        let n_shifts = n_shifts as u32;
        if images.is_some() {
            out.m2l_shifts.ensure(s, 1)?;
            out.near_shifts.ensure(s, 1)?;
        }
        // A nullable device address: the buffer's with images, else null.
        let shift_addr = |b: &DeviceBuffer<u16>| if images.is_some() { b.addr(s) } else { 0 };
        let (mut far_base, mut near_base) = (0usize, 0usize);
        for (level, r) in t.levels.iter().enumerate() {
            let (lv, first, count) = (level as i32, r.start as i32, r.len() as i32);
            let c = r.len();
            self.counts.ensure(s, 2 * c + 1)?;
            let near_sh = shift_addr(&out.near_shifts);
            // SAFETY: tree_lists_count(level, first, count, target cell arrays, t_parent,
            // source cell arrays, theta, rho_cut, near_off, near_src, shift_table, n_shifts,
            // near_sh, cnt): the target cells first..first+count and their parents (the
            // previous level, whose near rows were written by the previous write pass: near_off
            // holds their offsets, near_src their entries, source cell ids, near_sh their
            // shifts or is null); the shift table holds 3 n_shifts doubles or is null (then
            // n_shifts = 1); cnt holds 2·count + 1 values (ensured).
            launch!(s, &k.lists_count, "tree_lists_count", cfg_items(c, THREADS);
                &lv, &first, &count, t.center.get(), t.radius.get(), t.child_begin.get(),
                t.child_count.get(), t.parent.get(), src.center.get(), src.radius.get(),
                src.sigma_max.get(), src.child_begin.get(), src.child_count.get(), &theta,
                &rho_cut, out.near_offsets.get(), out.near_sources.get(), &table, &n_shifts,
                &near_sh, self.counts.get_mut())?;
            let tot = self.scan_read(2 * c + 1, &[c, 2 * c])?;
            let (total_far, total_near) = (tot[0] as usize, (tot[1] - tot[0]) as usize);
            out.m2l_sources
                .grow_keep(s, far_base + total_far, far_base)?;
            out.near_sources
                .grow_keep(s, near_base + total_near, near_base)?;
            if images.is_some() {
                out.m2l_shifts
                    .grow_keep(s, far_base + total_far, far_base)?;
                out.near_shifts
                    .grow_keep(s, near_base + total_near, near_base)?;
            }
            let (tf, fb, nb) = (tot[0], far_base as u32, near_base as u32);
            // The parents' rows are read from the buffers the level writes (other entries; the
            // closing offset they share is rewritten with the value it holds): raw addresses.
            let (noff, nsrc) = (out.near_offsets.addr(s), out.near_sources.addr(s));
            let (near_sh, m2l_sh) = (shift_addr(&out.near_shifts), shift_addr(&out.m2l_shifts));
            // SAFETY: tree_lists_write(…as tree_lists_count…, cnt, total_far, far_base,
            // near_base, m2l_off, m2l_src, near_off_out, near_out, m2l_sh, near_sh_out): cnt
            // holds the scanned 2·count + 1 counts; m2l_src (and m2l_sh) has room for
            // far_base + total_far entries and near_out (and near_sh) for near_base +
            // total_near (grown above; the shift arrays null without images); m2l_off and
            // near_off_out hold n_cells + 1 offsets.
            launch!(s, &k.lists_write, "tree_lists_write", cfg_items(c, THREADS);
                &lv, &first, &count, t.center.get(), t.radius.get(), t.child_begin.get(),
                t.child_count.get(), t.parent.get(), src.center.get(), src.radius.get(),
                src.sigma_max.get(), src.child_begin.get(), src.child_count.get(), &theta,
                &rho_cut, &noff, &nsrc, &table, &n_shifts, &near_sh, self.counts.get(), &tf,
                &fb, &nb, out.m2l_offsets.get_mut(), out.m2l_sources.get_mut(), &noff, &nsrc,
                &m2l_sh, &near_sh)?;
            far_base += total_far;
            near_base += total_near;
        }
        out.m2l_count = far_base;

        // The leaves' near rows, compacted in leaf order: the P2P rows.
        let nl = t.n_leaves;
        let nli = nl as i32;
        self.counts.ensure(s, nl + 1)?;
        // SAFETY: tree_p2p_count(n_leaves, leaves, near_off, cnt): leaves index target cells,
        // near_off holds n_cells + 1 offsets; cnt nl + 1 values (ensured).
        launch!(s, &k.p2p_count, "tree_p2p_count", cfg_items(nl + 1, THREADS);
            &nli, t.leaves.get(), out.near_offsets.get(), self.counts.get_mut())?;
        let total = self.scan_read(nl + 1, &[nl])?[0];
        out.p2p_count = total as usize;
        out.p2p_offsets.ensure(s, nl + 1)?;
        out.p2p_sources.ensure(s, total as usize)?;
        if images.is_some() {
            out.p2p_shifts.ensure(s, total as usize)?;
        }
        out.pairs.zero(s, 1)?;
        let (near_sh, p2p_sh) = (shift_addr(&out.near_shifts), shift_addr(&out.p2p_shifts));
        // SAFETY: tree_p2p_write(n_leaves, total, leaves, near_off, near_src, offs, t_begin,
        // t_end, s_begin, s_end, p2p_off, p2p_src, pairs, near_sh, p2p_sh): offs holds the
        // scanned nl + 1 row lengths, p2p_src (and p2p_sh) room for their sum `total`, p2p_off
        // nl + 1 values, pairs one (zeroed); near_sh holds the near rows' shifts (both null
        // without images).
        launch!(s, &k.p2p_write, "tree_p2p_write", cfg_items(nl + 1, THREADS);
            &nli, &total, t.leaves.get(), out.near_offsets.get(), out.near_sources.get(),
            self.counts.get(), t.begin.get(), t.end.get(), src.begin.get(), src.end.get(),
            out.p2p_offsets.get_mut(), out.p2p_sources.get_mut(), out.pairs.get_mut(),
            &near_sh, &p2p_sh)?;
        Ok(())
    }
}

/// Host mirrors of the device passes (the kernels' index arithmetic, step for step), tested
/// against the host build: what the GPU tests check on a device, checked here on every machine.
#[cfg(test)]
mod mirror {
    use super::super::traversal::{build_image_lists, build_lists, Criterion, ImageLists};
    use super::super::tree::Octree;

    /// Exclusive scan in place (the sort module's scan).
    fn scan(v: &mut [u32]) {
        let mut acc = 0;
        for x in v.iter_mut() {
            let c = *x;
            *x = acc;
            acc += c;
        }
    }

    /// A list entry: a source cell and its shift's index.
    type Entry = (u32, u16);

    /// `tree_resolve`: each candidate's subtree depth first with a bounded stack, seen through
    /// the candidate's shift (the distance (c_t − c_s) − shift, as the kernel rounds it).
    fn resolve(
        (t, s, shifts): (&Octree, &Octree, &[[f64; 3]]),
        a: usize,
        cand: &[Entry],
        (theta, rho_cut): (f64, f64),
        far: &mut Vec<Entry>,
        near: &mut Vec<Entry>,
    ) {
        let ca = &t.cells[a];
        const STACK: usize = 1 + 7 * (super::MAX_LEVEL + 1);
        let mut stack = [0u32; STACK];
        for &(c, sj) in cand {
            let h = shifts[sj as usize];
            let mut sp = 0;
            stack[sp] = c;
            sp += 1;
            while sp > 0 {
                sp -= 1;
                let b = stack[sp] as usize;
                let cb = &s.cells[b];
                let d = [0, 1, 2].map(|k| ca.center[k] - cb.center[k] - h[k]);
                let d = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
                let gap = d - ca.radius - cb.radius;
                if ca.radius + cb.radius <= theta * d && gap >= rho_cut * cb.sigma_max {
                    far.push((b as u32, sj));
                } else if !cb.is_leaf() && (ca.is_leaf() || cb.radius > ca.radius) {
                    for ch in cb.children().rev() {
                        stack[sp] = ch as u32;
                        sp += 1;
                    }
                } else {
                    near.push((b as u32, sj));
                }
            }
        }
    }

    /// `GpuTree::lists` with `tree_lists_count`, `tree_lists_write`, `tree_p2p_*`, the
    /// sources seen through `shifts` (the level-0 candidates: the source root once per shift).
    pub(super) fn lists(
        t: &Octree,
        s: &Octree,
        theta: f64,
        rho_cut: f64,
        shifts: &[[f64; 3]],
    ) -> ImageLists {
        let nc = t.cells.len();
        let mut m2l_off = vec![0u32; nc + 1];
        let mut near_off = vec![0u32; nc + 1];
        let (mut m2l_src, mut near_src): (Vec<Entry>, Vec<Entry>) = (Vec::new(), Vec::new());
        let roots: Vec<Entry> = (0..shifts.len()).map(|j| (0, j as u16)).collect();
        for (level, r) in t.levels.iter().enumerate() {
            let count = r.len();
            let rows: Vec<(Vec<Entry>, Vec<Entry>)> = r
                .clone()
                .map(|a| {
                    let cand: Vec<Entry> = if level == 0 {
                        roots.clone()
                    } else {
                        let p = t.cells[a].parent as usize;
                        near_src[near_off[p] as usize..near_off[p + 1] as usize].to_vec()
                    };
                    let (mut f, mut n) = (Vec::new(), Vec::new());
                    resolve((t, s, shifts), a, &cand, (theta, rho_cut), &mut f, &mut n);
                    (f, n)
                })
                .collect();
            let mut cnt = vec![0u32; 2 * count + 1];
            for (i, (f, n)) in rows.iter().enumerate() {
                cnt[i] = f.len() as u32;
                cnt[count + i] = n.len() as u32;
            }
            scan(&mut cnt);
            let total_far = cnt[count];
            let (far_base, near_base) = (m2l_src.len() as u32, near_src.len() as u32);
            m2l_src.resize((far_base + total_far) as usize, (u32::MAX, 0));
            near_src.resize(
                (near_base + cnt[2 * count] - total_far) as usize,
                (u32::MAX, 0),
            );
            for (i, (f, n)) in rows.iter().enumerate() {
                let fo = far_base + cnt[i];
                let no = near_base + cnt[count + i] - total_far;
                m2l_src[fo as usize..fo as usize + f.len()].copy_from_slice(f);
                near_src[no as usize..no as usize + n.len()].copy_from_slice(n);
                m2l_off[r.start + i] = fo;
                near_off[r.start + i] = no;
                if i == count - 1 {
                    m2l_off[r.start + count] = fo + f.len() as u32;
                    near_off[r.start + count] = no + n.len() as u32;
                }
            }
        }
        let nl = t.leaves.len();
        let mut cnt: Vec<u32> = t
            .leaves
            .iter()
            .map(|&l| near_off[l as usize + 1] - near_off[l as usize])
            .chain([0])
            .collect();
        scan(&mut cnt);
        let mut p2p_src = vec![(u32::MAX, 0); cnt[nl] as usize];
        for (i, &l) in t.leaves.iter().enumerate() {
            let row = &near_src[near_off[l as usize] as usize..near_off[l as usize + 1] as usize];
            p2p_src[cnt[i] as usize..cnt[i] as usize + row.len()].copy_from_slice(row);
        }
        let (m2l_sources, m2l_shifts) = m2l_src.into_iter().unzip();
        let (p2p_sources, p2p_shifts) = p2p_src.into_iter().unzip();
        ImageLists {
            lists: super::InteractionLists {
                m2l_offsets: m2l_off,
                m2l_sources,
                p2p_offsets: cnt,
                p2p_sources,
            },
            m2l_shifts,
            p2p_shifts,
        }
    }

    /// Asserts that two image lists are equal, entry for entry.
    fn assert_same(m: &ImageLists, host: &ImageLists, name: &str) {
        let (a, b) = (&m.lists, &host.lists);
        assert!(b.m2l_count() > 0 && b.p2p_count() > 0, "{name}");
        assert_eq!(a.m2l_offsets, b.m2l_offsets, "{name}");
        assert_eq!(a.m2l_sources, b.m2l_sources, "{name}");
        assert_eq!(a.p2p_offsets, b.p2p_offsets, "{name}");
        assert_eq!(a.p2p_sources, b.p2p_sources, "{name}");
        assert_eq!(m.m2l_shifts, host.m2l_shifts, "{name}");
        assert_eq!(m.p2p_shifts, host.p2p_shifts, "{name}");
    }

    #[test]
    fn the_device_list_passes_give_the_hosts_lists() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let x = super::super::tree::clustered_points(&mut rng, 4000, 5, 3.0, 0.2);
        let sigma: Vec<f64> = (0..x.len()).map(|i| 0.005 + 1e-6 * i as f64).collect();
        let y: Vec<[f64; 3]> = (0..700)
            .map(|_| [0, 1, 2].map(|_| 2.0 * (rng.random::<f64>() - 0.5)))
            .collect();
        let s = Octree::build(&x, Some(&sigma), 16, 0.01);
        let t = Octree::build(&y, None, 16, 0.01);
        for (tt, name) in [(&s, "same tree"), (&t, "targets")] {
            let host = build_lists(
                tt,
                &s,
                Criterion::Multipole {
                    theta: 0.5,
                    rho_cut: 4.0,
                },
            );
            let m = lists(tt, &s, 0.5, 4.0, &[[0.0; 3]]);
            let host = ImageLists {
                m2l_shifts: vec![0; host.m2l_count()],
                p2p_shifts: vec![0; host.p2p_count()],
                lists: host,
            };
            assert_same(&m, &host, name);
        }
    }

    /// The periodic box: the wrapped points seen through the 729 near images (and 27), the
    /// lists with their shifts equal to the host's `build_image_lists`.
    #[test]
    fn the_device_list_passes_give_the_hosts_image_lists() {
        use super::super::periodic::near_shifts;
        use crate::summation::cells::wrap;
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        // Clustered about a corner of the box, so images of it are near neighbours.
        let x: Vec<[f64; 3]> = (0..3000)
            .map(|i| {
                let s = if i % 3 == 0 { 6.3 } else { 1.5 };
                [0, 1, 2].map(|_| wrap(3.0 + s * (rng.random::<f64>() - 0.5)))
            })
            .collect();
        let sigma: Vec<f64> = (0..x.len()).map(|i| 0.02 + 1e-6 * i as f64).collect();
        let y: Vec<[f64; 3]> = (0..500)
            .map(|_| [0, 1, 2].map(|_| wrap(7.0 * (rng.random::<f64>() - 0.5))))
            .collect();
        let s = Octree::build(&x, Some(&sigma), 16, 0.02);
        let t = Octree::build(&y, None, 16, 0.02);
        for level in [1, 2] {
            let shifts = near_shifts(level);
            for (tt, name) in [(&s, "same tree"), (&t, "targets")] {
                let criterion = Criterion::Multipole {
                    theta: 0.5,
                    rho_cut: 5.0,
                };
                let host = build_image_lists(tt, &s, criterion, &shifts);
                let m = lists(tt, &s, 0.5, 5.0, &shifts);
                assert!(host.m2l_shifts.iter().any(|&v| v != host.m2l_shifts[0]));
                assert!(host.p2p_shifts.iter().any(|&v| v != host.p2p_shifts[0]));
                assert_same(&m, &host, &format!("{name}, {} shifts", shifts.len()));
            }
        }
    }
}
