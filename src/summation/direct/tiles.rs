//! The GPU all-pairs engine, written once over the interaction (`kernels/tiles.cuh`): packing of
//! f64 records into the kernels' 4-vectors with tile padding, device buffers that stay resident
//! and only grow, launches of any tile kernel (one signature for all) with the source splits and
//! their deterministic reduction, poisoned outputs checked fully written, and CUDA-event timing.
//!
//! A family of tile kernels (`biot_savart.cu`, `gravity.cu`) is compiled into one
//! [`TileEngine`]; the interaction's own engine ([`super::AllPairs`] for Biot–Savart,
//! [`super::cuda_gravity::CudaDirectGravityOf`] for gravity) packs its records through
//! [`TileEngine::upload_sources`] and [`TileEngine::upload_targets`] and launches with a
//! [`TileLaunch`].

use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{CompiledModule, CudaError, Doing, Gpu, KernelSource};
use crate::kernel::Real;
use cudarc::driver::{
    CudaFunction, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use std::sync::Arc;

/// The tile loop shared by the all-pairs families, given to NVRTC as the named header
/// `"tiles.cuh"`.
pub const TILE_HEADER: (&str, &str) = ("tiles.cuh", include_str!("../../../kernels/tiles.cuh"));

/// A real type the kernels run in: `f32` (the production precision) or `f64` (the reference
/// build, `-DVPM_DOUBLE`).
pub trait GpuReal: Real + DeviceRepr + ValidAsZeroBits + Default + Unpin {
    /// "f32" or "f64".
    const PRECISION: &'static str;
    /// ρ beyond which the Biot–Savart kernels' warp-uniform far-field path takes g = 1,
    /// ρg' = 0 (exact to rounding: f32 1 − g < 1e-10 and c ρ³ e^{−ρ²/2}/3 < 2e-9 at ρ = 7; f64
    /// both < 1e-19 at ρ = 10). Packed per source as (ρ_far σ)².
    const RHO_FAR: f64;
    /// NVRTC options that select the precision.
    fn precision_options() -> Vec<String>;
    /// Rounds an f64 input.
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl GpuReal for f32 {
    const PRECISION: &'static str = "f32";
    const RHO_FAR: f64 = 7.0;
    fn precision_options() -> Vec<String> {
        // exp2f/rsqrtf/sqrtf/__fdividef as single MUFU instructions, flush-to-zero.
        vec!["--use_fast_math".into()]
    }
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl GpuReal for f64 {
    const PRECISION: &'static str = "f64";
    const RHO_FAR: f64 = 10.0;
    fn precision_options() -> Vec<String> {
        vec!["-DVPM_DOUBLE".into(), "--fmad=true".into()]
    }
    fn from_f64(x: f64) -> f64 {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
}

/// Launch shape: threads per block (= sources per shared-memory tile), targets per thread,
/// unroll factor of the loop over a tile, minimum blocks per multiprocessor; written
/// `BLOCKxTARGETSxUNROLLxMINBLOCKS`. Each distinct configuration is its own module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelConfig {
    pub block: u32,
    pub targets_per_thread: u32,
    pub unroll: u32,
    /// Minimum resident blocks per multiprocessor asked of the compiler (`__launch_bounds__`'s
    /// second argument; caps the registers); 0: not asked.
    pub min_blocks: u32,
}

impl Default for KernelConfig {
    /// The Biot–Savart kernels' configuration (256 threads, 2 targets per thread, unroll 4), the
    /// one measured in docs/performance.md; `vpm bench kernel --configs …` compares others.
    fn default() -> Self {
        KernelConfig {
            block: 256,
            targets_per_thread: 2,
            unroll: 4,
            min_blocks: 0,
        }
    }
}

impl KernelConfig {
    /// The gravity kernels' configuration: 128 threads, 4 targets per thread (a pair is 14
    /// instructions, so one shared-memory load serves 4 of them), the source tile unrolled 16×,
    /// at least 4 blocks per multiprocessor (95 registers, 5 blocks of 4 warps with NVRTC 13.0
    /// for sm_90). The fastest of 15 shapes measured at N = 2^20 on an H100 (1.96e12 pairs/s;
    /// docs/performance.md); `vpm bench direct --interaction gravity --device cuda --configs …`
    /// compares others.
    pub const GRAVITY: KernelConfig = KernelConfig {
        block: 128,
        targets_per_thread: 4,
        unroll: 16,
        min_blocks: 4,
    };

    /// Refuses a shape the kernels are not written for.
    pub fn check(&self) -> Result<(), CudaError> {
        let ok = [32, 64, 128, 256, 512].contains(&self.block)
            && [1, 2, 3, 4, 6, 8].contains(&self.targets_per_thread)
            && (1..=32).contains(&self.unroll)
            && self.block.is_multiple_of(self.unroll)
            && self.min_blocks * self.block <= 2048;
        if ok {
            Ok(())
        } else {
            Err(CudaError::Invalid(format!(
                "unsupported kernel configuration {self:?} (block 32…512, a power of two; \
                 targets per thread 1, 2, 3, 4, 6 or 8; unroll dividing the block; at most 2048 \
                 resident threads)"
            )))
        }
    }

    fn options(&self) -> Vec<String> {
        vec![
            format!("-DVPM_BLOCK={}", self.block),
            format!("-DVPM_TPT={}", self.targets_per_thread),
            format!("-DVPM_UNROLL={}", self.unroll),
            format!("-DVPM_MINB={}", self.min_blocks),
        ]
    }
}

impl std::fmt::Display for KernelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}x{}x{}x{}",
            self.block, self.targets_per_thread, self.unroll, self.min_blocks
        )
    }
}

/// Registers and local memory of one compiled kernel (cuFuncGetAttribute).
#[derive(Debug, Clone, serde::Serialize)]
pub struct KernelResources {
    pub kernel: String,
    pub registers: i32,
    /// Local memory per thread in bytes (spills and stack); 0 means no spills.
    pub local_bytes: i32,
    pub static_shared_bytes: i32,
    /// Resident blocks per multiprocessor at this block size.
    pub blocks_per_sm: u32,
}

/// One thread per item, 256 per block.
pub(crate) fn cfg_n(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(256), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Far-away padding position of the source records (with a zero strength or mass: adds exact
/// zeros, no inf or NaN).
pub const PAD_POSITION: f64 = 1e15;

/// Packs `n` records of `V` 4-vectors each (`record(q)`), then `pad` up to a whole number of
/// tiles of `block`, rounded to `T`, into `out[v]` (cleared first); returns the tiles.
pub fn pack_records<T: GpuReal, const V: usize>(
    n: usize,
    block: usize,
    record: impl Fn(usize) -> [[f64; 4]; V],
    pad: [[f64; 4]; V],
    out: &mut [Vec<T>],
) -> usize {
    let tiles = n.div_ceil(block.max(1));
    let padded = tiles * block;
    for o in out.iter_mut().take(V) {
        o.clear();
        o.reserve(4 * padded);
    }
    let mut push = |r: [[f64; 4]; V]| {
        for (o, v) in out.iter_mut().zip(r) {
            o.extend(v.map(T::from_f64));
        }
    };
    (0..n).for_each(|q| push(record(q)));
    (n..padded).for_each(|_| push(pad));
    tiles
}

/// Where a family packs records on the device: the engine's stream and its two buffers (of
/// sources, or of targets).
pub type PackInto<'a, T> = (&'a Arc<CudaStream>, &'a mut [DeviceBuffer<T>; 2]);

/// A launch of one kernel of the family: its index in the names given to [`TileEngine::new`],
/// the reals it writes per target, and the real argument (`TileArgs::param`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TileLaunch<T> {
    pub kernel: usize,
    pub components: usize,
    pub param: T,
}

/// The last upload: counts that the launches use.
#[derive(Debug, Clone, Copy, Default)]
struct Loaded {
    sources: usize,
    tiles: usize,
    targets: usize,
    /// Whether the targets' second vector was uploaded.
    target_b: bool,
}

/// The tile kernels of one family on a GPU in precision `T`, with resident device buffers.
pub struct TileEngine<T: GpuReal> {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    config: KernelConfig,
    module: Arc<CompiledModule>,
    names: &'static [&'static str],
    kernels: Vec<CudaFunction>,
    reduce: CudaFunction,
    /// Up to two 4-vectors per source and per target (`TileArgs` src_a/src_b, tgt_a/tgt_b).
    src: [DeviceBuffer<T>; 2],
    tgt: [DeviceBuffer<T>; 2],
    out: DeviceBuffer<T>,
    part: DeviceBuffer<T>,
    host: [Vec<T>; 2],
    host_out: Vec<T>,
    loaded: Loaded,
    /// The last launch since the last upload of targets (downloads need its component count).
    last: Option<TileLaunch<T>>,
    /// Resident blocks per multiprocessor of each kernel, when large target counts split the
    /// sources to fill the last wave ([`TileEngine::filling_waves`]).
    resident: Option<Vec<usize>>,
}

impl<T: GpuReal> std::fmt::Debug for TileEngine<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileEngine")
            .field("kernels", &self.names)
            .field("precision", &T::PRECISION)
            .field("config", &self.config)
            .field("gpu", &self.gpu.info().name)
            .finish()
    }
}

impl<T: GpuReal> TileEngine<T> {
    /// Compiles (once per process and GPU) the family `source` for `config` in precision `T`
    /// and loads its tile kernels `names` and `tile_reduce_splits`.
    pub fn new(
        gpu: Arc<Gpu>,
        config: KernelConfig,
        source: &KernelSource,
        names: &'static [&'static str],
    ) -> Result<Self, CudaError> {
        config.check()?;
        let mut options = T::precision_options();
        options.extend(config.options());
        let module = gpu.module_from(source, &options)?;
        let kernels = names
            .iter()
            .map(|n| module.function(n))
            .collect::<Result<Vec<_>, _>>()?;
        let reduce = module.function("tile_reduce_splits")?;
        let stream = gpu.stream().clone();
        Ok(TileEngine {
            gpu,
            stream,
            config,
            module,
            names,
            kernels,
            reduce,
            src: Default::default(),
            tgt: Default::default(),
            out: DeviceBuffer::new(),
            part: DeviceBuffer::new(),
            host: Default::default(),
            host_out: Vec::new(),
            loaded: Loaded::default(),
            last: None,
            resident: None,
        })
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    pub fn config(&self) -> KernelConfig {
        self.config
    }

    /// The compiled module (NVRTC log, cubin).
    pub fn module(&self) -> &Arc<CompiledModule> {
        &self.module
    }

    /// The stream every launch runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// "CUDA <precision> on <GPU>", for evaluator names.
    pub fn describe(&self) -> String {
        format!("CUDA {} on {}", T::PRECISION, self.gpu.info().name)
    }

    /// The name of kernel `index`.
    pub fn kernel_name(&self, index: usize) -> &'static str {
        self.names[index]
    }

    /// Registers, local memory and occupancy of each tile kernel.
    pub fn resources(&self) -> Result<Vec<KernelResources>, CudaError> {
        use cudarc::driver::sys::CUfunction_attribute as FA;
        self.gpu.bind()?;
        let mut v = Vec::new();
        for (name, f) in self.names.iter().zip(&self.kernels) {
            let attr = |a| f.get_attribute(a).doing("reading kernel attributes");
            let blocks = f
                .occupancy_max_active_blocks_per_multiprocessor(self.config.block, 0, None)
                .doing("reading occupancy")?;
            v.push(KernelResources {
                kernel: name.to_string(),
                registers: attr(FA::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
                local_bytes: attr(FA::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
                static_shared_bytes: attr(FA::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
                blocks_per_sm: blocks,
            });
        }
        Ok(v)
    }

    /// Packs ([`pack_records`]) and copies `n` sources of `V` ≤ 2 vectors each, padded with
    /// `pad` to a whole number of tiles.
    pub fn upload_sources<const V: usize>(
        &mut self,
        n: usize,
        record: impl Fn(usize) -> [[f64; 4]; V],
        pad: [[f64; 4]; V],
    ) -> Result<(), CudaError> {
        const { assert!(V >= 1 && V <= 2) };
        self.source_tiles(n)?;
        let tiles = pack_records(n, self.config.block as usize, record, pad, &mut self.host);
        for v in 0..V {
            self.src[v].upload(&self.stream, &self.host[v], "source records")?;
        }
        self.loaded.sources = n;
        self.loaded.tiles = tiles;
        Ok(())
    }

    /// Packs and copies `n` targets of `V` ≤ 2 vectors each (the second is `TileArgs::tgt_b`).
    pub fn upload_targets<const V: usize>(
        &mut self,
        n: usize,
        record: impl Fn(usize) -> [[f64; 4]; V],
    ) -> Result<(), CudaError> {
        const { assert!(V >= 1 && V <= 2) };
        check_targets(n)?;
        pack_records(n, 1, record, [[0.0; 4]; V], &mut self.host);
        for v in 0..V {
            self.tgt[v].upload(&self.stream, &self.host[v], "target records")?;
        }
        self.set_targets(n, V == 2);
        Ok(())
    }

    /// Tiles for `n` sources; an error when they are too many for one launch.
    fn source_tiles(&self, n: usize) -> Result<usize, CudaError> {
        let block = self.config.block as usize;
        let tiles = n.div_ceil(block);
        if tiles * block > i32::MAX as usize / 4 {
            return Err(CudaError::Invalid(format!(
                "{n} sources: too many for one launch"
            )));
        }
        Ok(tiles)
    }

    /// Sizes the source buffers for `n` sources packed on the device and records the counts;
    /// returns the padded count and the stream and buffers to pack into.
    pub fn reserve_sources(&mut self, n: usize) -> Result<(usize, PackInto<'_, T>), CudaError> {
        let tiles = self.source_tiles(n)?;
        let padded = tiles * self.config.block as usize;
        for b in &mut self.src {
            b.ensure(&self.stream, 4 * padded)?;
        }
        self.loaded.sources = n;
        self.loaded.tiles = tiles;
        Ok((padded, (&self.stream, &mut self.src)))
    }

    /// Sizes the target buffers for `n` targets packed on the device and records the count and
    /// whether the second vector is there; returns the stream and buffers to pack into.
    pub fn reserve_targets(
        &mut self,
        n: usize,
        second: bool,
    ) -> Result<PackInto<'_, T>, CudaError> {
        check_targets(n)?;
        for b in &mut self.tgt {
            b.ensure(&self.stream, 4 * n)?;
        }
        self.set_targets(n, second);
        Ok((&self.stream, &mut self.tgt))
    }

    fn set_targets(&mut self, n: usize, second: bool) {
        self.loaded.targets = n;
        self.loaded.target_b = second;
        self.last = None;
    }

    /// Targets of the last upload.
    pub fn targets(&self) -> usize {
        self.loaded.targets
    }

    /// Whether the targets' second vector was uploaded with them.
    pub fn has_target_b(&self) -> bool {
        self.loaded.target_b
    }

    /// The output of the last launch on the device (targets × components reals) and the launch.
    pub fn output(&self) -> Result<(&DeviceBuffer<T>, TileLaunch<T>), CudaError> {
        let last = self
            .last
            .ok_or_else(|| CudaError::Invalid("no launch on the current targets to read".into()))?;
        Ok((&self.out, last))
    }

    /// Source splits (grid y) for `kernel` on the loaded counts ([`split_sources`]): about
    /// four blocks per multiprocessor in all for small target counts, and with
    /// [`TileEngine::filling_waves`] a full last wave. Returns (splits, tiles per split).
    fn splits(&self, kernel: usize) -> (usize, usize) {
        let per_block = (self.config.block * self.config.targets_per_thread) as usize;
        let xb = self.loaded.targets.div_ceil(per_block).max(1);
        let sms = self.gpu.info().multiprocessors.max(1) as usize;
        let resident = self.resident.as_ref().map(|r| r[kernel] * sms);
        split_sources(xb, self.loaded.tiles, 4 * sms, resident)
    }

    /// Lets large target counts split the sources too, so that the last wave of blocks on the
    /// GPU is nearly full (at most 4 splits; from each kernel's occupancy). The sums' order then
    /// depends on the GPU; the Biot–Savart family does not use it (its results stay those of
    /// one split).
    pub fn filling_waves(mut self) -> Result<Self, CudaError> {
        self.gpu.bind()?;
        let mut resident = Vec::with_capacity(self.kernels.len());
        for f in &self.kernels {
            let blocks = f
                .occupancy_max_active_blocks_per_multiprocessor(self.config.block, 0, None)
                .doing("reading occupancy")?;
            resident.push(blocks as usize);
        }
        self.resident = Some(resident);
        Ok(self)
    }

    /// Queues one evaluation on the loaded sources and targets (asynchronous). The output is
    /// poisoned first, so [`TileEngine::download`] can check that every value was written.
    pub fn launch(&mut self, launch: TileLaunch<T>) -> Result<(), CudaError> {
        self.prepare(launch)?;
        self.enqueue(launch)
    }

    /// Sizes the outputs and poisons them (NaN).
    fn prepare(&mut self, launch: TileLaunch<T>) -> Result<(), CudaError> {
        let l = self.loaded;
        self.last = Some(launch);
        let len = l.targets * launch.components;
        if len == 0 {
            return Ok(());
        }
        self.out.ensure(&self.stream, len)?;
        self.out.poison(&self.stream, len)?;
        let (splits, _) = self.splits(launch.kernel);
        if splits > 1 && l.sources > 0 {
            self.part.ensure(&self.stream, splits * len)?;
            self.part.poison(&self.stream, splits * len)?;
        }
        Ok(())
    }

    /// The kernel launches of one evaluation (after [`TileEngine::prepare`]).
    fn enqueue(&mut self, launch: TileLaunch<T>) -> Result<(), CudaError> {
        let l = self.loaded;
        let len = l.targets * launch.components;
        if len == 0 {
            return Ok(());
        }
        if l.sources == 0 {
            // No sources: every sum is an exact zero.
            let mut view = self.out.get_mut().slice_mut(0..len);
            return self
                .stream
                .memset_zeros(&mut view)
                .doing("zeroing the output");
        }
        let (splits, tiles_per_split) = self.splits(launch.kernel);
        let per_block = self.config.block * self.config.targets_per_thread;
        let cfg = LaunchConfig {
            grid_dim: ((l.targets as u32).div_ceil(per_block), splits as u32, 1),
            block_dim: (self.config.block, 1, 1),
            shared_mem_bytes: 0,
        };
        let (n_tiles, tps, nt) = (l.tiles as i32, tiles_per_split as i32, l.targets as i32);
        let name = self.names[launch.kernel];
        // A vector the interaction does not read points at the first (any valid array).
        let src_b = if self.src[1].capacity() > 0 {
            self.src[1].get()
        } else {
            self.src[0].get()
        };
        let tgt_b = if l.target_b {
            self.tgt[1].get()
        } else {
            self.tgt[0].get()
        };
        let dest = if splits > 1 {
            self.part.get_mut()
        } else {
            self.out.get_mut()
        };
        let mut b = self.stream.launch_builder(&self.kernels[launch.kernel]);
        b.arg(self.src[0].get())
            .arg(src_b)
            .arg(&n_tiles)
            .arg(&tps)
            .arg(self.tgt[0].get())
            .arg(tgt_b)
            .arg(&nt)
            .arg(&launch.param)
            .arg(dest);
        // SAFETY: the argument list matches VPM_TILE_KERNEL's signature in tiles.cuh (src_a,
        // src_b: n_tiles·block real4 each, or src_b = src_a where the family uses one; int
        // n_tiles, int tiles_per_split; tgt_a, tgt_b: nt real4 each (tgt_b = tgt_a when not
        // uploaded, and then not read: the family's wrapper checks the mode against the upload);
        // int nt; real param; out: splits·nt·kOutputs reals); every buffer was sized by
        // upload()/reserve_*()/prepare() for these counts, and the grid covers exactly nt
        // targets and n_tiles tiles.
        unsafe { b.launch(cfg) }.doing(format!("launching {name}"))?;
        if splits > 1 {
            let (splits_i, len_i) = (splits as i32, len as i64);
            let mut b = self.stream.launch_builder(&self.reduce);
            b.arg(self.part.get())
                .arg(&splits_i)
                .arg(&len_i)
                .arg(self.out.get_mut());
            // SAFETY: tile_reduce_splits(const real*, int, long long, real*): part holds
            // splits·len values and out len values (prepare()); the grid covers len.
            unsafe { b.launch(cfg_n(len)) }.doing("launching tile_reduce_splits")?;
        }
        Ok(())
    }

    /// Waits for the launches and copies the output of the last one to the host: `targets ×
    /// components` values, checked finite (fully written: the buffer was poisoned with NaN).
    pub fn download(&mut self) -> Result<&[T], CudaError> {
        let (_, last) = self.output()?;
        let name = self.names[last.kernel];
        let nc = last.components;
        let len = self.loaded.targets * nc;
        self.host_out.clear();
        self.host_out.resize(len, T::zero());
        if len > 0 {
            let view = self.out.get().slice(0..len);
            let what = format!("the output of {name}");
            self.gpu
                .copy_to_host(&view, &mut self.host_out[..], &what)?;
        }
        if let Some(k) = self.host_out.iter().position(|v| !v.is_finite()) {
            return Err(CudaError::Invalid(format!(
                "{name}: output value {} of target {} is {:?}: not written by the kernel, or the \
                 inputs overflow",
                k % nc,
                k / nc,
                self.host_out[k]
            )));
        }
        Ok(&self.host_out)
    }

    /// The output of the last [`TileEngine::download`] (targets × components values).
    pub fn last_output(&self) -> &[T] {
        &self.host_out
    }

    /// Times `repeats` launches with CUDA events around the kernels (the output poisoning
    /// before each is outside), after one untimed warm-up; milliseconds per evaluation, in order.
    /// The last output is downloaded and checked fully written.
    pub fn time_launches(
        &mut self,
        launch: TileLaunch<T>,
        repeats: usize,
    ) -> Result<Vec<f64>, CudaError> {
        let ev = || self.gpu.event();
        let (start, stop) = (ev()?, ev()?);
        let name = self.names[launch.kernel];
        self.launch(launch)?;
        self.download()?;
        let mut ms = Vec::with_capacity(repeats);
        for _ in 0..repeats.max(1) {
            self.prepare(launch)?;
            start.record(&self.stream).doing("recording an event")?;
            self.enqueue(launch)?;
            stop.record(&self.stream).doing("recording an event")?;
            let t = self.gpu.elapsed_ms(&start, &stop, name)?;
            ms.push(t as f64);
        }
        self.download()?;
        Ok(ms)
    }
}

/// Source splits for `xb` blocks of targets over `tiles` source tiles: enough that about `want`
/// blocks run when the targets are few; otherwise, when `resident` blocks fit on the GPU at a
/// time, the fewest splits (at most 4) that fill the last wave of blocks best (a split must gain
/// over 1 % of the GPU). Returns (splits, tiles per split); the last split may be shorter.
pub fn split_sources(
    xb: usize,
    tiles: usize,
    want: usize,
    resident: Option<usize>,
) -> (usize, usize) {
    let (xb, tiles) = (xb.max(1), tiles.max(1));
    let mut splits = want.div_ceil(xb).clamp(1, tiles);
    if let Some(slots) = resident.filter(|&r| r > 0 && splits == 1) {
        let filled = |s: usize| (xb * s) as f64 / ((xb * s).div_ceil(slots) * slots) as f64;
        splits = (2..=tiles.min(4)).fold(1, |best, s| {
            if filled(s) > filled(best) + 0.01 {
                s
            } else {
                best
            }
        });
    }
    let tiles_per_split = tiles.div_ceil(splits);
    (tiles.div_ceil(tiles_per_split), tiles_per_split)
}

/// Refuses more targets than one launch can index.
fn check_targets(n: usize) -> Result<(), CudaError> {
    if n > (i32::MAX as usize) / 16 {
        return Err(CudaError::Invalid(format!(
            "{n} targets: too many for one launch"
        )));
    }
    Ok(())
}

/// The tile kernels a family's source declares (`VPM_TILE_KERNEL(name, …)`), in order, after
/// checking that it includes the tile header (the launch code's names must be these).
#[cfg(test)]
pub(crate) fn declared_tile_kernels(family: &KernelSource) -> Vec<&'static str> {
    assert!(
        family.text.contains("#include \"tiles.cuh\"")
            && family.headers.iter().any(|h| h.0 == TILE_HEADER.0),
        "{} does not include tiles.cuh as a named header",
        family.file
    );
    family
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("VPM_TILE_KERNEL("))
        .filter_map(|l| l.split(',').next())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_defines_the_loop_the_engine_launches() {
        let (name, text) = TILE_HEADER;
        assert_eq!(name, "tiles.cuh");
        for item in [
            "struct TileArgs",
            "void tile_body",
            "#define VPM_TILE_KERNEL(NAME, ...)",
            "extern \"C\" __global__ void tile_reduce_splits",
        ] {
            assert!(text.contains(item), "{item}");
        }
    }

    #[test]
    fn records_are_rounded_and_padded_to_whole_tiles() {
        let mut out: [Vec<f32>; 2] = Default::default();
        let rec = |q: usize| {
            let x = q as f64 + 0.1;
            [[x, -x, 2.0 * x, 1.0 / 3.0], [q as f64; 4]]
        };
        let pad = [[PAD_POSITION, PAD_POSITION, PAD_POSITION, 0.0], [0.0; 4]];
        let tiles = pack_records(5, 4, rec, pad, &mut out);
        assert_eq!(tiles, 2);
        assert_eq!(out[0].len(), 4 * 8);
        assert_eq!(out[1].len(), 4 * 8);
        // The f64 values rounded once to f32.
        assert_eq!(&out[0][4..8], &[1.1f32, -1.1, 2.2, (1.0f64 / 3.0) as f32]);
        assert_eq!(&out[1][16..20], &[4.0f32; 4]);
        // Items 5…7 are the padding.
        for q in 5..8 {
            assert_eq!(&out[0][4 * q..4 * q + 4], &[1e15f32, 1e15, 1e15, 0.0]);
            assert_eq!(&out[1][4 * q..4 * q + 4], &[0.0f32; 4]);
        }
        // A whole number of tiles is not padded; a second call starts afresh; one vector
        // leaves the second array alone.
        let mut one: [Vec<f64>; 2] = [vec![9.0], vec![7.0]];
        assert_eq!(
            pack_records(8, 4, |q| [[q as f64; 4]], [[0.0; 4]], &mut one),
            2
        );
        assert_eq!(one[0].len(), 32);
        assert_eq!(one[0][31], 7.0);
        assert_eq!(one[1], [7.0]);
        assert_eq!(
            pack_records(0, 256, |_| [[1.0; 4]], [[0.0; 4]], &mut one),
            0
        );
        assert!(one[0].is_empty());
    }

    #[test]
    fn splits_fill_the_gpu_and_the_last_wave() {
        // Few targets: about `want` blocks in all (132 SMs × 4), at most one split per tile.
        assert_eq!(split_sources(4, 4096, 528, None), (128, 32));
        assert_eq!(split_sources(1, 3, 528, None), (3, 1));
        // Many targets: one split, unless the last wave is to be filled.
        assert_eq!(split_sources(1024, 4096, 528, None), (1, 4096));
        // 1024 blocks on 132 × 4 slots: 97 % full already.
        assert_eq!(split_sources(1024, 4096, 528, Some(528)), (1, 4096));
        // On 132 × 3 slots: 86 % with 1 or 2 splits, 97 % with 3.
        assert_eq!(split_sources(1024, 4096, 528, Some(396)), (3, 1366));
        // Never more splits than tiles: with 2 tiles, 3 splits are out and 2 gain nothing.
        assert_eq!(split_sources(1024, 2, 528, Some(396)), (1, 2));
        // 700 blocks on 528 slots: 66 % full with one split, 88 % with 2 or 4, 99 % with 3.
        assert_eq!(split_sources(700, 4096, 528, Some(528)), (3, 1366));
    }

    #[test]
    fn launch_shapes_are_checked() {
        assert!(KernelConfig::default().check().is_ok());
        assert!(KernelConfig::GRAVITY.check().is_ok());
        let bad = KernelConfig {
            unroll: 3,
            ..KernelConfig::GRAVITY
        };
        let e = bad.check().unwrap_err().to_string();
        assert!(e.contains("unroll dividing the block"), "{e}");
        assert_eq!(KernelConfig::GRAVITY.to_string(), "128x4x16x4");
        assert!(KernelConfig::GRAVITY
            .options()
            .contains(&"-DVPM_TPT=4".to_string()));
    }
}
