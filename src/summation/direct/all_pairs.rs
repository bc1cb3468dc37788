//! The all-pairs Biot–Savart kernel family (`kernels/biot_savart.cu`) on the device: packing of
//! the f64 inputs, device buffers that stay resident and only grow, launches with error checks,
//! poisoned outputs checked fully written, and CUDA-event timing for the benchmark.
//!
//! [`AllPairs`] is the engine, made on the GPU it is given (no process-global device);
//! [`super::CudaDirect`] puts the [`crate::summation::Summation`] trait on it.

use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{kernel_source, CompiledModule, CudaError, Doing, Gpu, KernelSource};
use crate::kernel::Real;
use crate::summation::Sources;
use cudarc::driver::{
    CudaFunction, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use std::sync::Arc;

/// The family with the header it includes.
pub const KERNELS: KernelSource =
    kernel_source!("biot_savart.cu", crate::summation::PAIR_KERNEL_HEADER);

/// A real type the kernels run in: `f32` (the production precision) or `f64` (the reference
/// build, `-DVPM_DOUBLE`).
pub trait GpuReal: Real + DeviceRepr + ValidAsZeroBits + Default + Unpin {
    /// "f32" or "f64".
    const PRECISION: &'static str;
    /// ρ beyond which the kernel's warp-uniform far-field path takes g = 1, ρg' = 0 (exact to
    /// rounding: f32 1 − g < 1e-10 and c ρ³ e^{−ρ²/2}/3 < 2e-9 at ρ = 7; f64 both < 1e-19 at
    /// ρ = 10). Packed per source as (ρ_far σ)².
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
    /// The starting configuration (256 threads, 2 targets per thread, unroll 4), the one measured
    /// in docs/performance.md; `vpm bench kernel --configs …` compares others.
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
    fn check(&self) -> Result<(), CudaError> {
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

/// What a launch computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// u (3 components per target).
    Velocity,
    /// u and the classical stretching (α_p·∇)u (6).
    Classical,
    /// u and the transposed stretching (∇u)ᵀα_p (6).
    Transposed,
    /// u and ∂u_i/∂x_j row-major (12).
    Gradient,
    /// ω_h = Σ α_q ζ_σq (3).
    Vorticity,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::Velocity,
        Mode::Classical,
        Mode::Transposed,
        Mode::Gradient,
        Mode::Vorticity,
    ];

    fn kernel_name(self) -> &'static str {
        match self {
            Mode::Velocity => "bs_velocity",
            Mode::Classical => "bs_stretching_classical",
            Mode::Transposed => "bs_stretching_transposed",
            Mode::Gradient => "bs_gradient",
            Mode::Vorticity => "bs_vorticity",
        }
    }

    /// Reals per target in the output.
    pub fn components(self) -> usize {
        match self {
            Mode::Velocity | Mode::Vorticity => 3,
            Mode::Classical | Mode::Transposed => 6,
            Mode::Gradient => 12,
        }
    }

    fn needs_target_alpha(self) -> bool {
        matches!(self, Mode::Classical | Mode::Transposed)
    }

    fn index(self) -> usize {
        self as usize
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
fn cfg_n(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(256), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The last upload: counts that the launches use.
#[derive(Debug, Clone, Copy, Default)]
struct Loaded {
    sources: usize,
    tiles: usize,
    targets: usize,
    target_alpha: bool,
}

/// All-pairs sums on the GPU in precision `T`, with resident device buffers.
pub struct AllPairs<T: GpuReal> {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    config: KernelConfig,
    module: Arc<CompiledModule>,
    functions: Vec<CudaFunction>,
    reduce: CudaFunction,
    /// bs_pack_sources, bs_pack_targets, bs_unpack (the device form).
    pack_sources: CudaFunction,
    pack_targets: CudaFunction,
    unpack: CudaFunction,
    src_pos: DeviceBuffer<T>,
    src_str: DeviceBuffer<T>,
    tgt_pos: DeviceBuffer<T>,
    tgt_alpha: DeviceBuffer<T>,
    out: DeviceBuffer<T>,
    part: DeviceBuffer<T>,
    host_a: Vec<T>,
    host_b: Vec<T>,
    host_out: Vec<T>,
    loaded: Loaded,
    /// Launches since the last upload of targets (an output check needs the current mode).
    last_mode: Option<Mode>,
}

impl<T: GpuReal> std::fmt::Debug for AllPairs<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllPairs")
            .field("precision", &T::PRECISION)
            .field("config", &self.config)
            .field("gpu", &self.gpu.info().name)
            .finish()
    }
}

impl<T: GpuReal> AllPairs<T> {
    /// Compiles (once per process and GPU) and loads the kernels for `config` on `gpu`.
    pub fn new(gpu: Arc<Gpu>, config: KernelConfig) -> Result<Self, CudaError> {
        config.check()?;
        let mut options = T::precision_options();
        options.extend(config.options());
        let module = gpu.module_from(&KERNELS, &options)?;
        let load = |name: &str| module.function(name);
        let functions = Mode::ALL
            .iter()
            .map(|m| load(m.kernel_name()))
            .collect::<Result<Vec<_>, _>>()?;
        let reduce = load("bs_reduce_splits")?;
        let pack_sources = load("bs_pack_sources")?;
        let pack_targets = load("bs_pack_targets")?;
        let unpack = load("bs_unpack")?;
        let stream = gpu.stream().clone();
        Ok(AllPairs {
            gpu,
            stream,
            config,
            module,
            functions,
            reduce,
            pack_sources,
            pack_targets,
            unpack,
            src_pos: DeviceBuffer::new(),
            src_str: DeviceBuffer::new(),
            tgt_pos: DeviceBuffer::new(),
            tgt_alpha: DeviceBuffer::new(),
            out: DeviceBuffer::new(),
            part: DeviceBuffer::new(),
            host_a: Vec::new(),
            host_b: Vec::new(),
            host_out: Vec::new(),
            loaded: Loaded::default(),
            last_mode: None,
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

    /// Registers, local memory and occupancy of each kernel.
    pub fn resources(&self) -> Result<Vec<KernelResources>, CudaError> {
        use cudarc::driver::sys::CUfunction_attribute as FA;
        let mut v = Vec::new();
        for (m, f) in Mode::ALL.iter().zip(&self.functions) {
            let attr = |a| f.get_attribute(a).doing("reading kernel attributes");
            let blocks = f
                .occupancy_max_active_blocks_per_multiprocessor(self.config.block, 0, None)
                .doing("reading occupancy")?;
            v.push(KernelResources {
                kernel: m.kernel_name().to_string(),
                registers: attr(FA::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
                local_bytes: attr(FA::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
                static_shared_bytes: attr(FA::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
                blocks_per_sm: blocks,
            });
        }
        Ok(v)
    }

    /// Packs and copies the sources: (x, 1/σ²) and (α/4π, (ρ_far σ)²) per source, padded with
    /// zero-strength sources far away to a whole number of tiles.
    pub fn upload_sources(&mut self, sources: &Sources) -> Result<(), CudaError> {
        let n = sources.len();
        if sources.alpha.len() != n || sources.sigma.len() != n {
            return Err(CudaError::Invalid(format!(
                "sources are inconsistent: {} positions, {} strengths, {} core radii",
                n,
                sources.alpha.len(),
                sources.sigma.len()
            )));
        }
        if let Some(i) = sources
            .sigma
            .iter()
            .position(|&s| !(s > 0.0 && s.is_finite()))
        {
            return Err(CudaError::Invalid(format!(
                "source {i} has core radius {} (must be positive and finite)",
                sources.sigma[i]
            )));
        }
        let block = self.config.block as usize;
        let tiles = n.div_ceil(block);
        let padded = tiles * block;
        if padded > i32::MAX as usize {
            return Err(CudaError::Invalid(format!(
                "{n} sources: too many for one launch"
            )));
        }
        let f4pi = 0.25 * std::f64::consts::FRAC_1_PI;
        let far = T::RHO_FAR * T::RHO_FAR;
        let t = T::from_f64;
        self.host_a.clear();
        self.host_b.clear();
        for q in 0..n {
            let (x, a, s) = (sources.x[q], sources.alpha[q], sources.sigma[q]);
            let s2 = s * s;
            self.host_a
                .extend_from_slice(&[t(x[0]), t(x[1]), t(x[2]), t(1.0 / s2)]);
            self.host_b.extend_from_slice(&[
                t(a[0] * f4pi),
                t(a[1] * f4pi),
                t(a[2] * f4pi),
                t(far * s2),
            ]);
        }
        for _ in n..padded {
            // α = 0 and far² = 0 (never "near"): contributes exact zeros, no inf or NaN.
            self.host_a
                .extend_from_slice(&[t(1e15), t(1e15), t(1e15), t(1.0)]);
            self.host_b.extend_from_slice(&[t(0.0); 4]);
        }
        self.src_pos
            .upload(&self.stream, &self.host_a, "source positions")?;
        self.src_str
            .upload(&self.stream, &self.host_b, "source strengths")?;
        self.loaded.sources = n;
        self.loaded.tiles = tiles;
        Ok(())
    }

    /// Packs and copies the targets and, for stretching, their strengths (sent as 3α).
    pub fn upload_targets(
        &mut self,
        targets: &[[f64; 3]],
        alpha: Option<&[[f64; 3]]>,
    ) -> Result<(), CudaError> {
        let n = targets.len();
        if n > (i32::MAX as usize) / 16 {
            return Err(CudaError::Invalid(format!(
                "{n} targets: too many for one launch"
            )));
        }
        let t = T::from_f64;
        self.host_a.clear();
        for x in targets {
            self.host_a
                .extend_from_slice(&[t(x[0]), t(x[1]), t(x[2]), t(0.0)]);
        }
        self.tgt_pos
            .upload(&self.stream, &self.host_a, "target positions")?;
        if let Some(alpha) = alpha {
            if alpha.len() != n {
                return Err(CudaError::Invalid(format!(
                    "{} target strengths for {n} targets",
                    alpha.len()
                )));
            }
            self.host_b.clear();
            for a in alpha {
                self.host_b.extend_from_slice(&[
                    t(3.0 * a[0]),
                    t(3.0 * a[1]),
                    t(3.0 * a[2]),
                    t(0.0),
                ]);
            }
            self.tgt_alpha
                .upload(&self.stream, &self.host_b, "target strengths")?;
        }
        self.loaded.targets = n;
        self.loaded.target_alpha = alpha.is_some();
        self.last_mode = None;
        Ok(())
    }

    /// The device form of [`AllPairs::upload_sources`]: packs `n` sources from f64 device
    /// arrays at addresses `x`, `alpha` (3 per source) and `sigma` (1) on the GPU, with the same
    /// f64 operations and rounding as the host packing (`bs_pack_sources`). The cores are not
    /// checked (that would need a copy): the caller's must be positive and finite.
    pub fn pack_sources_on_device(
        &mut self,
        x: u64,
        alpha: u64,
        sigma: u64,
        n: usize,
    ) -> Result<(), CudaError> {
        let block = self.config.block as usize;
        let tiles = n.div_ceil(block);
        let padded = tiles * block;
        if padded > i32::MAX as usize / 4 {
            return Err(CudaError::Invalid(format!(
                "{n} sources: too many for one launch"
            )));
        }
        self.src_pos.ensure(&self.stream, 4 * padded)?;
        self.src_str.ensure(&self.stream, 4 * padded)?;
        if padded > 0 {
            let (n_i, padded_i) = (n as i32, padded as i32);
            let f4pi = 0.25 * std::f64::consts::FRAC_1_PI;
            let far2 = T::RHO_FAR * T::RHO_FAR;
            let cfg = LaunchConfig {
                grid_dim: ((padded as u32).div_ceil(256), 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = self.stream.launch_builder(&self.pack_sources);
            b.arg(&x)
                .arg(&alpha)
                .arg(&sigma)
                .arg(&n_i)
                .arg(&padded_i)
                .arg(&f4pi)
                .arg(&far2)
                .arg(self.src_pos.get_mut())
                .arg(self.src_str.get_mut());
            // SAFETY: bs_pack_sources(const double* x, const double* alpha, const double* sigma,
            // int n, int padded, double f4pi, double far2, real4* pos, real4* str): x and alpha
            // hold 3·n doubles and sigma n (the caller's device buffers, DeviceSummation's
            // contract), pos and str 4·padded reals (ensure() above); the grid covers padded.
            unsafe { b.launch(cfg) }.doing("launching bs_pack_sources")?;
        }
        self.loaded.sources = n;
        self.loaded.tiles = tiles;
        Ok(())
    }

    /// The device form of [`AllPairs::upload_targets`]: `n` f64 points at device address `x`
    /// (3 each) and, for stretching, their f64 strengths at `alpha` (0: none).
    pub fn pack_targets_on_device(
        &mut self,
        x: u64,
        alpha: u64,
        n: usize,
    ) -> Result<(), CudaError> {
        if n > (i32::MAX as usize) / 16 {
            return Err(CudaError::Invalid(format!(
                "{n} targets: too many for one launch"
            )));
        }
        self.tgt_pos.ensure(&self.stream, 4 * n)?;
        self.tgt_alpha.ensure(&self.stream, 4 * n)?;
        if n > 0 {
            let n_i = n as i32;
            let alp = if alpha != 0 {
                self.tgt_alpha.addr(&self.stream)
            } else {
                0u64
            };
            let mut b = self.stream.launch_builder(&self.pack_targets);
            b.arg(&x)
                .arg(&alpha)
                .arg(&n_i)
                .arg(self.tgt_pos.get_mut())
                .arg(&alp);
            // SAFETY: bs_pack_targets(const double* x, const double* alpha, int n, real4* pos,
            // real4* alp): x holds 3·n doubles and alpha 3·n or is null (the caller's device
            // buffers), pos and alp 4·n reals (ensure() above), alp null when alpha is; the
            // grid covers n.
            unsafe { b.launch(cfg_n(n)) }.doing("launching bs_pack_targets")?;
        }
        self.loaded.targets = n;
        self.loaded.target_alpha = alpha != 0;
        self.last_mode = None;
        Ok(())
    }

    /// Writes the output of the last launch as f64 into device arrays: the velocity (3 per
    /// target) at `u` and the further components (3 stretching or 9 gradient per target) at
    /// `extra` (0: not written), queued on the GPU's stream (the host does not wait).
    pub fn unpack_on_device(&mut self, u: u64, extra: u64) -> Result<(), CudaError> {
        let mode = self.last_mode.ok_or_else(|| {
            CudaError::Invalid("unpack before any launch on the current targets".into())
        })?;
        let nt = self.loaded.targets;
        if nt > 0 {
            let (nt_i, nc_i) = (nt as i32, mode.components() as i32);
            let mut b = self.stream.launch_builder(&self.unpack);
            b.arg(self.out.get())
                .arg(&nt_i)
                .arg(&nc_i)
                .arg(&u)
                .arg(&extra);
            // SAFETY: bs_unpack(const real* out, int nt, int nc, double* u, double* ex): out
            // holds nt·nc reals of the last launch (prepare() sized it), u 3·nt doubles and ex
            // (nc − 3)·nt or null (the caller's device buffers); the grid covers nt.
            unsafe { b.launch(cfg_n(nt)) }.doing("launching bs_unpack")?;
        }
        Ok(())
    }

    /// The stream every launch runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Source splits (grid y) so that small target counts still fill the GPU: about four
    /// blocks per multiprocessor in all.
    fn splits(&self) -> (usize, usize) {
        let per_block = (self.config.block * self.config.targets_per_thread) as usize;
        let xb = self.loaded.targets.div_ceil(per_block).max(1);
        let want = 4 * self.gpu.info().multiprocessors.max(1) as usize;
        let tiles = self.loaded.tiles.max(1);
        let splits = want.div_ceil(xb).clamp(1, tiles);
        let tiles_per_split = tiles.div_ceil(splits);
        (tiles.div_ceil(tiles_per_split), tiles_per_split)
    }

    /// Queues one evaluation of `mode` on the loaded sources and targets (asynchronous). The
    /// output is poisoned first, so [`AllPairs::download`] can check that every value was
    /// written.
    pub fn launch(&mut self, mode: Mode) -> Result<(), CudaError> {
        self.prepare(mode)?;
        self.enqueue(mode)
    }

    /// Checks the mode against the upload, sizes the outputs and poisons them (NaN).
    fn prepare(&mut self, mode: Mode) -> Result<(), CudaError> {
        let l = self.loaded;
        if mode.needs_target_alpha() && !l.target_alpha {
            return Err(CudaError::Invalid(
                "stretching needs the target strengths: upload them with the targets".into(),
            ));
        }
        self.last_mode = Some(mode);
        let len = l.targets * mode.components();
        if len == 0 {
            return Ok(());
        }
        self.out.ensure(&self.stream, len)?;
        self.out.poison(&self.stream, len)?;
        let (splits, _) = self.splits();
        if splits > 1 && l.sources > 0 {
            self.part.ensure(&self.stream, splits * len)?;
            self.part.poison(&self.stream, splits * len)?;
        }
        Ok(())
    }

    /// The kernel launches of one evaluation (after [`AllPairs::prepare`]).
    fn enqueue(&mut self, mode: Mode) -> Result<(), CudaError> {
        let l = self.loaded;
        let len = l.targets * mode.components();
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
        let (splits, tiles_per_split) = self.splits();
        let per_block = self.config.block * self.config.targets_per_thread;
        let cfg = LaunchConfig {
            grid_dim: ((l.targets as u32).div_ceil(per_block), splits as u32, 1),
            block_dim: (self.config.block, 1, 1),
            shared_mem_bytes: 0,
        };
        let (n_tiles, tps, nt) = (l.tiles as i32, tiles_per_split as i32, l.targets as i32);
        let f = &self.functions[mode.index()];
        let alpha = if mode.needs_target_alpha() {
            self.tgt_alpha.get()
        } else {
            // Not read by this kernel; any valid pointer.
            self.tgt_pos.get()
        };
        let dest = if splits > 1 {
            self.part.get_mut()
        } else {
            self.out.get_mut()
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(self.src_pos.get())
            .arg(self.src_str.get())
            .arg(&n_tiles)
            .arg(&tps)
            .arg(self.tgt_pos.get())
            .arg(alpha)
            .arg(&nt)
            .arg(dest);
        // SAFETY: the argument list matches the kernel's signature (VPM_KERNEL in
        // biot_savart.cu: 2 source arrays of n_tiles·block float4/double4, two ints, 2 target
        // arrays of nt vectors, int nt, output of splits·nt·NC reals); every buffer was sized by
        // ensure()/upload() for these counts, and the grid covers exactly nt targets and
        // n_tiles tiles.
        unsafe { b.launch(cfg) }.doing(format!("launching {}", mode.kernel_name()))?;
        if splits > 1 {
            let (splits_i, len_i) = (splits as i32, len as i64);
            let cfg = LaunchConfig {
                grid_dim: ((len as u32).div_ceil(256), 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = self.stream.launch_builder(&self.reduce);
            b.arg(self.part.get())
                .arg(&splits_i)
                .arg(&len_i)
                .arg(self.out.get_mut());
            // SAFETY: bs_reduce_splits(const real*, int, long long, real*): part holds
            // splits·len values and out len values (prepare()); the grid covers len.
            unsafe { b.launch(cfg) }.doing("launching bs_reduce_splits")?;
        }
        Ok(())
    }

    /// Waits for the launches and copies the output of the last one to the host: `targets ×
    /// components` values, checked finite (fully written: the buffer was poisoned with NaN).
    pub fn download(&mut self) -> Result<&[T], CudaError> {
        let mode = self.last_mode.ok_or_else(|| {
            CudaError::Invalid("download before any launch on the current targets".into())
        })?;
        let nc = mode.components();
        let len = self.loaded.targets * nc;
        self.host_out.clear();
        self.host_out.resize(len, T::zero());
        if len > 0 {
            let view = self.out.get().slice(0..len);
            let what = format!("the output of {}", mode.kernel_name());
            self.gpu
                .copy_to_host(&view, &mut self.host_out[..], &what)?;
        }
        if let Some(k) = self.host_out.iter().position(|v| !v.is_finite()) {
            return Err(CudaError::Invalid(format!(
                "{}: output value {} of target {} is {:?}: not written by the kernel, or the \
                 inputs overflow",
                mode.kernel_name(),
                k % nc,
                k / nc,
                self.host_out[k]
            )));
        }
        Ok(&self.host_out)
    }

    /// The output of the last [`AllPairs::download`] (targets × components values).
    pub fn last_output(&self) -> &[T] {
        &self.host_out
    }

    /// Times `repeats` evaluations of `mode` with CUDA events around the kernel launches (the
    /// output poisoning before each is outside), after one untimed warm-up; milliseconds per
    /// evaluation, in order.
    pub fn time_launches(&mut self, mode: Mode, repeats: usize) -> Result<Vec<f64>, CudaError> {
        let ev = || self.gpu.event();
        let (start, stop) = (ev()?, ev()?);
        self.launch(mode)?;
        self.download()?;
        let mut ms = Vec::with_capacity(repeats);
        for _ in 0..repeats.max(1) {
            self.prepare(mode)?;
            start.record(&self.stream).doing("recording an event")?;
            self.enqueue(mode)?;
            stop.record(&self.stream).doing("recording an event")?;
            let t = self.gpu.elapsed_ms(&start, &stop, mode.kernel_name())?;
            ms.push(t as f64);
        }
        // The last launch's output must be complete too.
        self.download()?;
        Ok(ms)
    }
}
