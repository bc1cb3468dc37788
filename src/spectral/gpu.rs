//! The pseudo-spectral solver on a GPU, in f64 (docs/physics.md §5): the device form of
//! [`SpectralSolver`](super::SpectralSolver), with the same retained modes (so 2/3 truncation
//! stays free), the 3/2 rule or 2/3 truncation, the rotational form with Leray projection,
//! Lawson's RK4, and the diagnostics of [`crate::diagnostics`] reduced on the device. Kernels:
//! `kernels/spectral.cu`; transforms: cuFFT, plans made once.
//!
//! The state û, the first stage k1 = N(û), the two stage inputs and the accumulator live on the
//! device for the whole run, in the CPU's mode order ([`ModeLayout`]); the host sees a 4-byte
//! finite flag per step, 8 bytes when the CFL rule asks for the speed, and the diagnostics'
//! block partials at output times. Modes come back only when asked for (checkpoints, fields,
//! the end of a run).
//!
//! One right-hand side N(v̂) = P F[v × ω] on the product grid M (3N/2 or N), M_h = M/2 + 1:
//! 1. `sp_gather`: v̂ and ω̂ = i k × v̂ into six half spectra (M²·M_h, cuFFT's D2Z layout), zero
//!    outside the retained modes;
//! 2. six inverse transforms;
//! 3. `sp_cross`: v × ω in place, and max(|v_x| + |v_y| + |v_z|) (the CFL speed);
//! 4. three forward transforms;
//! 5. `sp_store`: the 1/M³ scaling, the projection and the Runge–Kutta stage update of every
//!    retained mode (k2, k3, k4 are never stored, as on the CPU).
//!
//! **Transforms.** [`TransformKind::Full`] uses cuFFT's 3-D plans. [`TransformKind::Pruned`]
//! skips the lines that are all padding: only the rows k_y ≤ K and k_y ≥ −K of the half spectrum
//! hold retained modes, so the complex x transforms run on two blocks of K + 1 rows (one 1-D plan,
//! stride M·M_h, distance 1: about 2/3 of the x lines), then the real (y, z) transforms on every x
//! plane (one 2-D plan batched over x, contiguous). The solver uses the pruned transforms:
//! `vpm bench spectral --device cuda` measured them 4–7 % faster at 256³ with either rule and at
//! 512³ with 2/3 truncation on an H100, and within 4 % of the full ones at 128³ and at 512³ with
//! the 3/2 rule (docs/performance.md).
//!
//! [`DeviceGridDiagnostics`] applies the same reductions to a velocity given at the nodes of an
//! N³ grid on the device (the particle field's diagnostics in a run with both solvers).
//!
//! **Determinism.** Every kernel is elementwise, an order-free maximum, or a sum over a fixed
//! grid with a fixed tree per block whose partials the host adds in block order; cuFFT's plans
//! are deterministic for a given plan and device. Two runs are bit-identical.
//!
//! The results agree with the CPU solver to round-off: the transforms differ (cuFFT against
//! rustfft), the formulas are the CPU's, but NVRTC contracts products and sums into fused
//! multiply-adds and the sums are trees, so the last bits differ (tests/gpu_spectral.rs: 1e-14
//! relative over 1000 steps).

use super::layout::ModeLayout;
use super::solver::{NonFiniteState, SpectralGrid, VectorModes};
use super::stepper::{SpectralError, SpectralStepper};
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{
    cufft_available, fft_plan, fft_work_bytes, half_spectrum_len, kernel_source, launch,
    load_kernels, CudaError, Doing, FftLayout, Gpu, KernelSource,
};
use crate::device::Device;
use crate::diagnostics::flow::{shell_count, FlowStats};
use cudarc::cufft::{result as cufft_result, sys as cufft_sys, CudaFft, FftDirection};
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use num_complex::Complex64;
use std::sync::Arc;

/// The solver's device helpers shared with the slab solver's kernels
/// ([`super::gpu_slab`], `kernels/spectral_slab.cu`).
pub const SPECTRAL_HEADER: (&str, &str) =
    ("spectral.cuh", include_str!("../../kernels/spectral.cuh"));

/// The family, with its header.
pub const KERNELS: KernelSource = kernel_source!("spectral.cu", SPECTRAL_HEADER);

/// Threads per block (`SP_THREADS` in spectral.cu).
pub(super) const THREADS: u32 = 256;
/// Most blocks of a grid-stride kernel.
const MAX_BLOCKS: usize = 8192;

/// How the 3-D transforms are done (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransformKind {
    /// x transforms only on the rows of retained k_y, then (y, z).
    Pruned,
    /// cuFFT's 3-D plans over the whole half spectrum.
    Full,
}

impl TransformKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            TransformKind::Pruned => "pruned",
            TransformKind::Full => "full",
        }
    }
}

/// Field stride of the half-spectrum buffer for grid m: m²·(m/2 + 1) rounded up to 16 values
/// (256 bytes), so that every field starts aligned for cuFFT whatever m is.
fn spec_stride(m: usize) -> usize {
    half_spectrum_len(m).next_multiple_of(16)
}

/// Field stride of the real buffer for grid m: m³ rounded up to 32 values (256 bytes).
fn real_stride(m: usize) -> usize {
    (m * m * m).next_multiple_of(32)
}

/// The plans of the pruned transforms on the m grid (`what` names it in errors): the complex
/// x transform (Z2Z, length m) of `lines` lines whose elements are `stride` apart (distance 1
/// from line to line), and the real (y, z) transforms of `planes` contiguous planes (m·(m/2+1)
/// complex or m² real values each): inverse (Z2D), and forward (D2Z) when `forward`. Shared
/// with the slab solver's ranks ([`super::gpu_slab`]).
pub(super) fn pruned_plans(
    what: &str,
    m: usize,
    (stride, lines): (i32, i32),
    planes: i32,
    forward: bool,
    stream: &Arc<CudaStream>,
) -> Result<(CudaFft, CudaFft, Option<CudaFft>), CudaError> {
    use cufft_sys::cufftType::{CUFFT_D2Z, CUFFT_Z2D, CUFFT_Z2Z};
    let (mi, mh) = (m as i32, (m / 2 + 1) as i32);
    let plan = |n: &[i32], layouts, ty, batch| fft_plan(what, n, layouts, ty, batch, stream);
    let dims = [mi];
    let line = FftLayout::new(&dims, stride, 1);
    let x = plan(&dims, (line, line), CUFFT_Z2Z, lines)?;
    let (half_dims, real_dims) = ([mi, mh], [mi, mi]);
    let half = FftLayout::new(&half_dims, 1, mi * mh);
    let real = FftLayout::new(&real_dims, 1, mi * mi);
    let yz_inv = plan(&real_dims, (half, real), CUFFT_Z2D, planes)?;
    let yz_fwd = if forward {
        Some(plan(&real_dims, (real, half), CUFFT_D2Z, planes)?)
    } else {
        None
    };
    Ok((x, yz_inv, yz_fwd))
}

/// cuFFT plans between half spectra and real fields on one m³ grid holding modes |k_i| ≤ kmax.
struct Transforms {
    m: usize,
    kmax: usize,
    kind: TransformKind,
    /// Pruned: the 1-D x plan (Z2Z) over K + 1 rows of y. Full: the 3-D Z2D plan.
    a: CudaFft,
    /// Pruned: the 2-D (y, z) Z2D plan, batched over the x planes. Full: the 3-D D2Z plan.
    b: CudaFft,
    /// Pruned: the 2-D (y, z) D2Z plan. Full: None.
    c: Option<CudaFft>,
    /// The work areas cuFFT allocated for the plans, in bytes.
    work_bytes: u64,
}

impl Transforms {
    fn new(
        m: usize,
        kmax: usize,
        kind: TransformKind,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, CudaError> {
        let mi = m as i32;
        let mh = (m / 2 + 1) as i32;
        let what = format!("the {m}^3 grid");
        let plan = |n: &[i32], layouts, ty, batch| fft_plan(&what, n, layouts, ty, batch, stream);
        use cufft_sys::cufftType::{CUFFT_D2Z, CUFFT_Z2D};
        let (a, b, c) = match kind {
            TransformKind::Pruned => {
                // x lines of K + 1 rows y (every k_z): element x of line b at b + x·M·M_h;
                // then the (y, z) planes, one per x.
                let x_lines = (mi * mh, (kmax as i32 + 1) * mh);
                pruned_plans(&what, m, x_lines, mi, true, stream)?
            }
            TransformKind::Full => {
                let cplx = [mi, mi, mh];
                let real = [mi, mi, mi];
                let dist_c = half_spectrum_len(m) as i32;
                let dist_r = mi * mi * mi;
                let (c, r) = (
                    FftLayout::new(&cplx, 1, dist_c),
                    FftLayout::new(&real, 1, dist_r),
                );
                let inv = plan(&real, (c, r), CUFFT_Z2D, 1)?;
                let fwd = plan(&real, (r, c), CUFFT_D2Z, 1)?;
                (inv, fwd, None)
            }
        };
        let mut work_bytes = fft_work_bytes(&a)? + fft_work_bytes(&b)?;
        if let Some(c) = &c {
            work_bytes += fft_work_bytes(c)?;
        }
        Ok(Transforms {
            m,
            kmax,
            kind,
            a,
            b,
            c,
            work_bytes,
        })
    }

    /// The offsets (in complex values) of the two blocks of K + 1 rows y that hold every
    /// retained k_y: rows 0..=K and M−K−1..M (the row M−K−1 holds no retained mode and is zero,
    /// so including it changes nothing).
    fn row_blocks(&self) -> [u64; 2] {
        let mh = (self.m / 2 + 1) as u64;
        [0, (self.m - self.kmax - 1) as u64 * mh]
    }

    /// The real field at `real` (m³ f64) from the half spectrum at `spec` (m²·m_h complex,
    /// overwritten: cuFFT's Z2D uses its input as scratch).
    ///
    /// # Safety
    /// `spec` and `real` are live device allocations of this plan's context holding those
    /// sizes, 16-byte aligned.
    unsafe fn inverse(&self, spec: u64, real: u64) -> Result<(), CudaError> {
        let s = spec as *mut cufft_sys::cufftDoubleComplex;
        let r = real as *mut cufft_sys::cufftDoubleReal;
        match self.kind {
            TransformKind::Pruned => {
                for off in self.row_blocks() {
                    let p = s.add(off as usize);
                    cufft_result::exec_z2z(self.a.handle(), p, p, FftDirection::Inverse as i32)
                        .doing("cuFFT Z2Z (x) inverse")?;
                }
                cufft_result::exec_z2d(self.b.handle(), s, r).doing("cuFFT Z2D (y, z)")
            }
            TransformKind::Full => cufft_result::exec_z2d(self.a.handle(), s, r).doing("cuFFT Z2D"),
        }
    }

    /// The half spectrum at `spec` (unnormalised DFT; with the pruned transforms only the rows
    /// of retained k_y are transformed along x, the others are left undefined) of the real
    /// field at `real` (left unchanged).
    ///
    /// # Safety
    /// As [`Transforms::inverse`].
    unsafe fn forward(&self, real: u64, spec: u64) -> Result<(), CudaError> {
        let s = spec as *mut cufft_sys::cufftDoubleComplex;
        let r = real as *mut cufft_sys::cufftDoubleReal;
        match self.kind {
            TransformKind::Pruned => {
                let yz = self
                    .c
                    .as_ref()
                    .expect("pruned transforms have a (y, z) D2Z plan");
                cufft_result::exec_d2z(yz.handle(), r, s).doing("cuFFT D2Z (y, z)")?;
                for off in self.row_blocks() {
                    let p = s.add(off as usize);
                    cufft_result::exec_z2z(self.a.handle(), p, p, FftDirection::Forward as i32)
                        .doing("cuFFT Z2Z (x) forward")?;
                }
                Ok(())
            }
            TransformKind::Full => cufft_result::exec_d2z(self.b.handle(), r, s).doing("cuFFT D2Z"),
        }
    }
}

/// The kernels of spectral.cu.
struct Kernels {
    gather: CudaFunction,
    scatter: CudaFunction,
    cross: CudaFunction,
    max_abs: CudaFunction,
    max_norm2: CudaFunction,
    rk_begin: CudaFunction,
    store: CudaFunction,
    hermitian: CudaFunction,
    nonfinite: CudaFunction,
    mode_sums: CudaFunction,
    deinterleave: CudaFunction,
}

impl Kernels {
    /// Compiles (once per process and GPU) and loads spectral.cu on `gpu`.
    fn load(gpu: &Gpu) -> Result<Self, CudaError> {
        let module = gpu.module_from(&KERNELS, &[])?;
        #[rustfmt::skip]
        let k = load_kernels!(module, "sp_", Kernels {
            gather, scatter, cross, max_abs, max_norm2, rk_begin, store, hermitian, nonfinite,
            mode_sums, deinterleave,
        });
        Ok(k)
    }
}

/// The device reductions of the diagnostics, shared by [`GpuSpectralSolver`] and
/// [`DeviceGridDiagnostics`]: the mode sums and shell spectrum (`sp_mode_sums`, row partials
/// added on the host in row order), max |∇·u| (`sp_scatter`, an inverse transform,
/// `sp_max_abs`) and max |ω| (`sp_scatter` and an inverse transform per component,
/// `sp_max_norm2`), with their buffers.
struct Reductions {
    scalars: DeviceBuffer<f64>,
    shells: DeviceBuffer<f64>,
    /// Maxima (bits): [0] the speed at the current state, [1] the speed at the RK4 stages (not
    /// read), [2] the divergence or |ω|².
    words: DeviceBuffer<u64>,
}

impl Reductions {
    fn new(stream: &Arc<CudaStream>, layout: &ModeLayout) -> Result<Self, CudaError> {
        let mut r = Reductions {
            scalars: DeviceBuffer::new(),
            shells: DeviceBuffer::new(),
            words: DeviceBuffer::new(),
        };
        let side = layout.side();
        r.scalars.ensure(stream, 4 * side)?;
        r.shells.ensure(stream, side * shell_count(layout))?;
        r.words.ensure(stream, 3)?;
        Ok(r)
    }

    fn bytes(&self) -> u64 {
        8 * (self.scalars.get().len() + self.shells.get().len() + self.words.get().len()) as u64
    }

    /// The device address of word `i`.
    fn word(&self, s: &Arc<CudaStream>, i: usize) -> u64 {
        self.words.addr(s) + 8 * i as u64
    }

    /// Zeroes word `i` on the stream.
    fn zero_word(&self, s: &Arc<CudaStream>, i: usize) -> Result<(), CudaError> {
        let w = self.word(s, i);
        // SAFETY: w is the address of one of the 3 u64 of `words` (allocated in `new` on this
        // stream's context).
        unsafe { cudarc::driver::result::memset_d8_async(w, 0, 8, s.cu_stream()) }
            .doing("zeroing a maximum")
    }

    /// Reads word `i` as a double (waits for the stream).
    fn read_word(&self, gpu: &Gpu, i: usize, what: &str) -> Result<f64, CudaError> {
        let mut bits = [0u64; 3];
        self.words.download(gpu, &mut bits, what)?;
        Ok(f64::from_bits(bits[i]))
    }

    /// The mode sums of the retained modes at `u` (3·L double2 on `layout`) and, when `k1` is
    /// not 0, dK/dt with the right-hand side at `k1`.
    fn mode_sums(
        &self,
        k: &Kernels,
        gpu: &Gpu,
        u: u64,
        k1: u64,
        layout: &ModeLayout,
        nu: f64,
    ) -> Result<StateSums, CudaError> {
        let s = gpu.stream();
        let side = layout.side();
        let nshell = shell_count(layout);
        let len = layout.len() as i64;
        let kmax = layout.kmax as i32;
        let nshell_i = nshell as i32;
        let (sc, sh) = (self.scalars.addr(s), self.shells.addr(s));
        let cfg = LaunchConfig {
            grid_dim: (side as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: sp_mode_sums(const double2* u, const double2* k1, long long len, int kmax,
        // double nu, int nshell, double* scalars, double* shells): u (and k1 unless null) hold
        // 3·len double2, scalars 4·side and shells side·nshell doubles (sized in `new` for this
        // layout); one block per row, blockDim = SP_THREADS, side ≤ 4·SP_THREADS (checked by
        // the constructors).
        launch!(s, &k.mode_sums, "sp_mode_sums", cfg;
            &u, &k1, &len, &kmax, &nu, &nshell_i, &sc, &sh)?;
        let mut scalars = vec![0.0; 4 * side];
        let mut shells = vec![0.0; side * nshell];
        self.scalars.download(gpu, &mut scalars, "the mode sums")?;
        self.shells
            .download(gpu, &mut shells, "the shell spectrum")?;
        // Rows added in row order.
        let mut sums = [0.0; 4];
        for row in scalars.chunks_exact(4) {
            for (a, b) in sums.iter_mut().zip(row) {
                *a += b;
            }
        }
        let mut spectrum = vec![0.0; nshell];
        for row in shells.chunks_exact(nshell) {
            for (a, b) in spectrum.iter_mut().zip(row) {
                *a += b;
            }
        }
        Ok(StateSums { sums, spectrum })
    }

    /// Enqueues the real field `what` (0–2: component, 3: divergence, 4–6: vorticity component
    /// `what` − 4) of the retained modes at
    /// `u` on the grid of `t` into `real`, through the half spectrum at `spec`.
    ///
    /// # Safety
    /// `u` holds 3·L double2 of `layout`; `spec` at least t.m²·(t.m/2+1) double2 and `real`
    /// t.m³ f64, 256-byte aligned, all on this stream's context.
    #[allow(clippy::too_many_arguments)]
    unsafe fn field_on_grid(
        k: &Kernels,
        s: &Arc<CudaStream>,
        t: &Transforms,
        u: u64,
        layout: &ModeLayout,
        what: i32,
        spec: u64,
        real: u64,
    ) -> Result<(), CudaError> {
        let hlen = half_spectrum_len(t.m);
        let len = layout.len() as i64;
        let kmax = layout.kmax as i32;
        let mi = t.m as i32;
        // SAFETY: sp_scatter(const double2* v, long long len, double2* h, int m, int kmax,
        // int what): as the function's contract states.
        launch!(s, &k.scatter, "sp_scatter", cfg_for(hlen);
            &u, &len, &spec, &mi, &kmax, &what)?;
        t.inverse(spec, real)
    }

    /// A maximum over the nodes of the grid of `t` for the retained modes at `u`: max |∇·u|
    /// (`sp_max_abs` of the divergence in the first field of `real`), or max |ω| (the three
    /// components in three fields `rs` apart, `sp_max_norm2`, the root taken here).
    ///
    /// # Safety
    /// As [`Reductions::field_on_grid`], with `real` holding three fields of `rs` ≥ t.m³ f64,
    /// each 256-byte aligned.
    #[allow(clippy::too_many_arguments)]
    unsafe fn grid_max(
        &self,
        k: &Kernels,
        gpu: &Gpu,
        t: &Transforms,
        u: u64,
        layout: &ModeLayout,
        spec: u64,
        (real, rs): (u64, usize),
        which: GridMax,
    ) -> Result<f64, CudaError> {
        let s = gpu.stream();
        let n3 = t.m.pow(3);
        self.zero_word(s, 2)?;
        let out = self.word(s, 2);
        let (n3_i, rs_i) = (n3 as i64, rs as i64);
        match which {
            GridMax::Divergence => {
                // SAFETY: the caller's contract.
                unsafe { Self::field_on_grid(k, s, t, u, layout, 3, spec, real)? };
                // SAFETY: sp_max_abs(const double* r, long long n, unsigned long long* out):
                // the m³ values of `real` just written, word 2; blockDim = SP_THREADS.
                launch!(s, &k.max_abs, "sp_max_abs", cfg_for(n3); &real, &n3_i, &out)?;
                self.read_word(gpu, 2, "the divergence maximum")
            }
            GridMax::Vorticity => {
                for c in 0..3 {
                    let field = real + (c * rs * 8) as u64;
                    // SAFETY: field c of `real` (the caller's contract).
                    unsafe { Self::field_on_grid(k, s, t, u, layout, 4 + c as i32, spec, field)? };
                }
                // SAFETY: sp_max_norm2(const double* r, long long n, long long rs, unsigned long
                // long* out): the three fields of m³ values just written, rs apart; word 2;
                // blockDim = SP_THREADS.
                launch!(s, &k.max_norm2, "sp_max_norm2", cfg_for(n3); &real, &n3_i, &rs_i, &out)?;
                Ok(self.read_word(gpu, 2, "the vorticity maximum")?.sqrt())
            }
        }
    }
}

/// A maximum over the grid nodes that [`Reductions::grid_max`] reduces on the device.
#[derive(Clone, Copy)]
enum GridMax {
    /// max |∇·u|.
    Divergence,
    /// max |ω|.
    Vorticity,
}

/// Which mode buffer a right-hand side reads.
#[derive(Clone, Copy)]
enum Input {
    State,
    StageA,
    StageB,
}

/// Diagnostics of one state, reduced on the device.
#[derive(Clone)]
struct StateSums {
    /// Σ w e, Σ w e |k|², Σ w e/|k|, dK/dt from the right-hand side.
    sums: [f64; 4],
    spectrum: Vec<f64>,
}

/// The pseudo-spectral solver on one GPU (module docs).
pub struct GpuSpectralSolver {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    grid: SpectralGrid,
    layout: ModeLayout,
    nu: f64,
    k: Kernels,
    /// Transforms on the product grid.
    product: Transforms,
    /// Transforms on the N grid for the diagnostics and the final field, when it differs from
    /// the product grid (made with the solver).
    solution: Option<Transforms>,
    /// The state û and the first stage, two stage inputs and the accumulator (3·L each).
    uhat: DeviceBuffer<cufft_sys::double2>,
    k1: DeviceBuffer<cufft_sys::double2>,
    stage_a: DeviceBuffer<cufft_sys::double2>,
    stage_b: DeviceBuffer<cufft_sys::double2>,
    acc: DeviceBuffer<cufft_sys::double2>,
    /// Six half spectra and six real fields on the product grid.
    spec: DeviceBuffer<cufft_sys::double2>,
    real: DeviceBuffer<f64>,
    flag: DeviceBuffer<u32>,
    /// The diagnostics' reductions and the maxima (speed, divergence).
    red: Reductions,
    k1_valid: bool,
    speed_sum_max: Option<f64>,
    sums: Option<StateSums>,
    /// The host copy of û, when current.
    host: Option<VectorModes>,
}

impl std::fmt::Debug for GpuSpectralSolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuSpectralSolver")
            .field("gpu", &self.gpu.info().name)
            .field("grid", &self.grid)
            .finish()
    }
}

/// Launch configuration of a grid-stride kernel over `n` items.
pub(super) fn cfg_for(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            n.div_ceil(THREADS as usize).clamp(1, MAX_BLOCKS) as u32,
            1,
            1,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl GpuSpectralSolver {
    /// A solver with zero velocity on `gpu`, with the pruned transforms (on an H100 4–7 % faster
    /// at 256³ with either rule and at 512³ with 2/3 truncation, within 4 % of the full ones
    /// elsewhere; docs/performance.md).
    pub fn new(gpu: Arc<Gpu>, grid: SpectralGrid, nu: f64) -> Result<Self, CudaError> {
        Self::with_transforms(gpu, grid, nu, TransformKind::Pruned)
    }

    /// A solver with zero velocity on `gpu` whose transforms are done as `kind` says. Allocates
    /// everything a step needs ([`GpuSpectralSolver::device_bytes`]) and makes the plans.
    pub fn with_transforms(
        gpu: Arc<Gpu>,
        grid: SpectralGrid,
        nu: f64,
        kind: TransformKind,
    ) -> Result<Self, CudaError> {
        cufft_available()?;
        let m = grid.product_grid();
        // cuFFT's plans here are 32-bit (M³ ≤ 2³¹ − 1: M ≤ 1290), and sp_mode_sums takes at
        // most 4·256 values of k_x per thread block.
        if m < 4 || (m as u128).pow(3) > i32::MAX as u128 || 2 * grid.kmax() + 1 > 4 * 256 {
            return Err(CudaError::Invalid(format!(
                "GPU spectral solver: n = {} with {} dealiasing (product grid {m}³) is outside \
                 what it handles (product grid 4³ to 1290³, K ≤ 511)",
                grid.n, grid.dealias
            )));
        }
        let stream = gpu.stream().clone();
        let k = Kernels::load(&gpu)?;
        let layout = grid.layout();
        let red = Reductions::new(&stream, &layout)?;
        let product = Transforms::new(m, grid.kmax(), kind, &stream)?;
        // The N-grid plans of the diagnostics, made now so that their memory is taken at the
        // start of a run, not at its first output.
        let solution = if grid.n != m {
            Some(Transforms::new(grid.n, grid.kmax(), kind, &stream)?)
        } else {
            None
        };
        let l3 = 3 * layout.len();
        let mut s = GpuSpectralSolver {
            gpu,
            stream: stream.clone(),
            grid,
            layout,
            nu,
            k,
            product,
            solution,
            uhat: DeviceBuffer::new(),
            k1: DeviceBuffer::new(),
            stage_a: DeviceBuffer::new(),
            stage_b: DeviceBuffer::new(),
            acc: DeviceBuffer::new(),
            spec: DeviceBuffer::new(),
            real: DeviceBuffer::new(),
            flag: DeviceBuffer::new(),
            red,
            k1_valid: false,
            speed_sum_max: None,
            sums: None,
            host: None,
        };
        for b in [
            &mut s.uhat,
            &mut s.k1,
            &mut s.stage_a,
            &mut s.stage_b,
            &mut s.acc,
        ] {
            b.zero(&stream, l3)?;
        }
        s.spec.ensure(&stream, 6 * spec_stride(m))?;
        s.real.ensure(&stream, 6 * real_stride(m))?;
        s.flag.ensure(&stream, 1)?;
        Ok(s)
    }

    /// Device memory of a solver for `grid`, in bytes: five vector mode arrays (3·L complex
    /// f64 each: state, first stage, two stage inputs, accumulator), six half spectra
    /// (M²·(M/2 + 1) complex f64) and six real fields (M³ f64) on the product grid, the
    /// diagnostics' row partials, and an allowance for cuFFT's work areas (each plan keeps its
    /// own) of three half spectra on the product grid, two on the N grid when it differs, plus
    /// 64 MiB. tests/gpu_spectral.rs checks it against the driver's figure.
    pub fn device_bytes(grid: SpectralGrid) -> u64 {
        let layout = grid.layout();
        let m = grid.product_grid();
        let l = layout.len() as u64;
        let half = spec_stride(m) as u64 * 16;
        let modes = 5 * 3 * l * 16;
        let fields = 6 * half + 6 * real_stride(m) as u64 * 8;
        let partials = layout.side() as u64 * (4 + shell_count(&layout) as u64) * 8;
        let solution = if grid.n != m {
            2 * spec_stride(grid.n) as u64 * 16
        } else {
            0
        };
        modes + fields + partials + 3 * half + solution + (64 << 20)
    }

    /// What this solver holds on the device now, in bytes: its buffers and the work areas cuFFT
    /// reported for its plans. For checking [`GpuSpectralSolver::device_bytes`].
    pub fn resident_bytes(&self) -> u64 {
        let c = 16u64;
        let modes = [
            &self.uhat,
            &self.k1,
            &self.stage_a,
            &self.stage_b,
            &self.acc,
        ]
        .iter()
        .map(|b| b.get().len() as u64 * c)
        .sum::<u64>();
        let fields = self.spec.get().len() as u64 * c + self.real.get().len() as u64 * 8;
        let partials = self.red.bytes();
        let work = self.product.work_bytes + self.solution.as_ref().map_or(0, |t| t.work_bytes);
        modes + fields + partials + work
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// How the transforms are done.
    pub fn transform_kind(&self) -> TransformKind {
        self.product.kind
    }

    fn addr<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        b: &DeviceBuffer<T>,
    ) -> u64 {
        b.addr(&self.stream)
    }

    /// Marks the state changed.
    fn state_changed(&mut self) {
        self.k1_valid = false;
        self.speed_sum_max = None;
        self.sums = None;
        self.host = None;
    }

    /// Uploads `uhat` as the state.
    fn upload_state(&mut self, uhat: &VectorModes) -> Result<(), CudaError> {
        let len = self.layout.len();
        assert!(uhat.iter().all(|c| c.len() == len));
        let flat: Vec<cufft_sys::double2> = uhat
            .iter()
            .flat_map(|c| c.iter().map(|z| cufft_sys::double2 { x: z.re, y: z.im }))
            .collect();
        self.uhat
            .upload(&self.stream, &flat, "the spectral state")?;
        self.state_changed();
        Ok(())
    }

    /// Replaces the state, projected onto divergence-free fields with the mean removed and the
    /// k_z = 0 plane Hermitian ([`super::SpectralSolver::set_velocity_modes`]).
    pub fn set_velocity_modes(&mut self, mut uhat: VectorModes) -> Result<(), CudaError> {
        super::solver::make_real_solenoidal(&self.layout, &mut uhat);
        self.upload_state(&uhat)?;
        self.host = Some(uhat);
        Ok(())
    }

    /// Restores a state exactly (no projection).
    pub fn restore_velocity_modes(&mut self, uhat: VectorModes) -> Result<(), CudaError> {
        self.upload_state(&uhat)?;
        self.host = Some(uhat);
        Ok(())
    }

    /// The state on the host (copied back once per state).
    pub fn velocity_modes(&mut self) -> Result<&VectorModes, CudaError> {
        if self.host.is_none() {
            let len = self.layout.len();
            let mut flat = vec![cufft_sys::double2 { x: 0.0, y: 0.0 }; 3 * len];
            self.uhat
                .download(&self.gpu, &mut flat, "the spectral state")?;
            let modes: VectorModes = std::array::from_fn(|c| {
                flat[c * len..(c + 1) * len]
                    .iter()
                    .map(|z| Complex64::new(z.x, z.y))
                    .collect()
            });
            self.host = Some(modes);
        }
        Ok(self.host.as_ref().expect("just copied"))
    }

    /// Enqueues one right-hand side N(input) and the store of `stage` (spectral.cu `sp_store`);
    /// resets and updates the speed maximum.
    fn rhs(&mut self, input: Input, stage: i32, dt: f64) -> Result<(), CudaError> {
        let s = self.stream.clone();
        let m = self.product.m;
        let (hs, rs) = (spec_stride(m), real_stride(m));
        let n3 = m * m * m;
        let len = self.layout.len() as i64;
        let kmax = self.layout.kmax as i32;
        let mi = m as i32;
        let src = match input {
            Input::State => self.addr(&self.uhat),
            Input::StageA => self.addr(&self.stage_a),
            Input::StageB => self.addr(&self.stage_b),
        };
        let spec = self.addr(&self.spec);
        let real = self.addr(&self.real);
        let hs_i = hs as i64;
        // SAFETY: sp_gather(const double2* v, long long len, double2* h, long long hstride,
        // int m, int kmax): v is a mode buffer of 3·len double2 (zeroed to that size at
        // construction), h the spectra buffer of 6 fields of hstride ≥ m²·(m/2+1) double2.
        launch!(s, &self.k.gather, "sp_gather", cfg_for(half_spectrum_len(m));
            &src, &len, &spec, &hs_i, &mi, &kmax)?;
        for f in 0..6u64 {
            // SAFETY: field f of the spectra (hs double2) and of the real fields (rs f64), both
            // inside the buffers sized at construction and 256-byte aligned; plans of this
            // context.
            unsafe {
                self.product
                    .inverse(spec + f * hs as u64 * 16, real + f * rs as u64 * 8)?
            };
        }
        // Word 0: the speed at the current state (stage 1); word 1: the stages' (unused).
        let word = usize::from(stage != 1);
        self.red.zero_word(&s, word)?;
        let speed = self.red.word(&s, word);
        let (n3_i, rs_i) = (n3 as i64, rs as i64);
        // SAFETY: sp_cross(double* r, long long n3, long long rs, unsigned long long*
        // speed_max): r holds six fields of rs ≥ n3 f64, speed_max points into the 3-word
        // speed buffer; blockDim = SP_THREADS (its shared array).
        launch!(s, &self.k.cross, "sp_cross", cfg_for(n3); &real, &n3_i, &rs_i, &speed)?;
        for f in 0..3u64 {
            // SAFETY: as for the inverse transforms above.
            unsafe {
                self.product
                    .forward(real + f * rs as u64 * 8, spec + f * hs as u64 * 16)?
            };
        }
        let scale = 1.0 / (m as f64).powi(3);
        let (uh, k1, acc, sa, sb) = (
            self.addr(&self.uhat),
            self.addr(&self.k1),
            self.addr(&self.acc),
            self.addr(&self.stage_a),
            self.addr(&self.stage_b),
        );
        let nu = self.nu;
        // SAFETY: sp_store(const double2* h, long long hstride, int m, double scale, int kmax,
        // long long len, int stage, double nu, double dt, const double2* uh, double2* k1,
        // double2* acc, double2* sa, double2* sb): h the spectra (the first three fields
        // written by the forward transforms), the five mode buffers 3·len double2 each.
        launch!(s, &self.k.store, "sp_store", cfg_for(len as usize);
            &spec, &hs_i, &mi, &scale, &kmax, &len, &stage, &nu, &dt, &uh, &k1, &acc, &sa,
            &sb)?;
        Ok(())
    }

    /// N(û) at the current state into k1, and its speed maximum into slot 0 (enqueued once per
    /// state; nothing is read back).
    fn ensure_k1(&mut self) -> Result<(), CudaError> {
        if !self.k1_valid {
            self.rhs(Input::State, 1, 0.0)?;
            self.k1_valid = true;
        }
        Ok(())
    }

    /// max(|u| + |v| + |w|) over the product grid at the current state.
    pub fn speed_sum_max(&mut self) -> Result<f64, CudaError> {
        self.ensure_k1()?;
        if self.speed_sum_max.is_none() {
            self.speed_sum_max = Some(self.red.read_word(&self.gpu, 0, "the speed maximum")?);
        }
        Ok(self.speed_sum_max.expect("just read"))
    }

    /// Drops the host copy of the state, so that the next [`GpuSpectralSolver::velocity_modes`]
    /// reads the device (tests).
    pub fn forget_host_copy(&mut self) {
        self.host = None;
    }

    /// The CFL step Δt = C·h / max(|u| + |v| + |w|) (infinite for u = 0).
    pub fn cfl_dt(&mut self, cfl: f64) -> Result<f64, CudaError> {
        let s = self.speed_sum_max()?;
        Ok(self.grid.cfl_dt(cfl, s))
    }

    /// One Lawson RK4 step (module docs of [`super::solver`]); a step whose result is not
    /// finite is not committed.
    pub fn step(&mut self, dt: f64) -> Result<(), SpectralError> {
        self.ensure_k1()?;
        let s = self.stream.clone();
        let len = self.layout.len() as i64;
        let kmax = self.layout.kmax as i32;
        let nu = self.nu;
        let (uh, k1, acc, sa) = (
            self.addr(&self.uhat),
            self.addr(&self.k1),
            self.addr(&self.acc),
            self.addr(&self.stage_a),
        );
        // SAFETY: sp_rk_begin(const double2* uh, const double2* k1, double2* acc, double2* sa,
        // long long len, int kmax, double nu, double dt): four mode buffers of 3·len double2.
        launch!(s, &self.k.rk_begin, "sp_rk_begin", cfg_for(len as usize);
            &uh, &k1, &acc, &sa, &len, &kmax, &nu, &dt)?;
        self.rhs(Input::StageA, 2, dt)?;
        self.rhs(Input::StageB, 3, dt)?;
        self.rhs(Input::StageA, 4, dt)?;
        let side = self.layout.side();
        let herm = LaunchConfig {
            grid_dim: ((side * side).div_ceil(THREADS as usize) as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: sp_hermitian(double2* v, long long len, int kmax): acc holds 3·len double2;
        // one thread per (iy, ix) of the side² plane, the rest return.
        launch!(s, &self.k.hermitian, "sp_hermitian", herm; &acc, &len, &kmax)?;
        self.flag.zero(&s, 1)?;
        let n = 6 * len;
        let flag = self.addr(&self.flag);
        // SAFETY: sp_nonfinite(const double* v, long long n, unsigned int* flag): acc holds
        // 3·len double2 = 6·len doubles; flag one u32.
        launch!(s, &self.k.nonfinite, "sp_nonfinite", cfg_for(n as usize); &acc, &n, &flag)?;
        let mut bad = [0u32];
        self.flag.download(&self.gpu, &mut bad, "the finite flag")?;
        if bad[0] != 0 {
            // The state and its first stage are untouched.
            return Err(NonFiniteState.into());
        }
        std::mem::swap(&mut self.uhat, &mut self.acc);
        self.state_changed();
        Ok(())
    }

    /// The device-reduced sums of the current state (once per state).
    fn state_sums(&mut self) -> Result<StateSums, CudaError> {
        if let Some(s) = &self.sums {
            return Ok(s.clone());
        }
        self.ensure_k1()?;
        let (u, k1) = (self.addr(&self.uhat), self.addr(&self.k1));
        let r = self
            .red
            .mode_sums(&self.k, &self.gpu, u, k1, &self.layout, self.nu)?;
        self.sums = Some(r.clone());
        Ok(r)
    }

    /// K, Z, ε, u', L, T, λ, Re_λ of the current state, reduced on the device.
    pub fn flow_stats(&mut self) -> Result<FlowStats, CudaError> {
        let s = self.state_sums()?;
        Ok(FlowStats::from_mode_sums(
            s.sums[0], s.sums[1], s.sums[2], self.nu,
        ))
    }

    /// The shell spectrum E(s) of the current state, reduced on the device.
    pub fn shell_spectrum(&mut self) -> Result<Vec<f64>, CudaError> {
        Ok(self.state_sums()?.spectrum)
    }

    /// dK/dt from the right-hand side at the current state.
    pub fn dkdt_from_rhs(&mut self) -> Result<f64, CudaError> {
        Ok(self.state_sums()?.sums[3])
    }

    /// The N-grid transforms (the product grid's when they coincide).
    fn solution_transforms(&self) -> &Transforms {
        self.solution.as_ref().unwrap_or(&self.product)
    }

    /// Enqueues the real field `what` (0–2: velocity component, 3: divergence) of the state on
    /// the N grid into real field `slot` (N³ values from slot·real_stride(N)).
    fn field_on_grid(&mut self, what: i32, slot: usize) -> Result<(), CudaError> {
        let rs = real_stride(self.grid.n) as u64;
        let (u, spec, real) = (
            self.addr(&self.uhat),
            self.addr(&self.spec),
            self.addr(&self.real),
        );
        // SAFETY: u holds 3·L double2; the spectra buffer ≥ N²·(N/2+1) double2 and the real
        // buffer 6 fields of real_stride(M) ≥ real_stride(N) f64 (slot ≤ 2, each 256-byte
        // aligned), all of this context.
        unsafe {
            Reductions::field_on_grid(
                &self.k,
                &self.stream,
                self.solution_transforms(),
                u,
                &self.layout,
                what,
                spec,
                real + slot as u64 * rs * 8,
            )
        }
    }

    /// max |∇·u| over the N³ nodes, on the device.
    pub fn max_divergence(&mut self) -> Result<f64, CudaError> {
        self.grid_max(GridMax::Divergence)
    }

    /// max |ω| over the N³ nodes, on the device.
    pub fn max_vorticity(&mut self) -> Result<f64, CudaError> {
        self.grid_max(GridMax::Vorticity)
    }

    /// [`Reductions::grid_max`] of the state on the N grid (real fields 0–2 of
    /// real_stride(N)).
    fn grid_max(&mut self, which: GridMax) -> Result<f64, CudaError> {
        let (u, spec, real) = (
            self.addr(&self.uhat),
            self.addr(&self.spec),
            self.addr(&self.real),
        );
        let rs = real_stride(self.grid.n);
        // SAFETY: u holds 3·L double2; the spectra buffer ≥ N²·(N/2+1) double2 and the real
        // buffer 6 fields of real_stride(M) ≥ real_stride(N) f64, all of this context.
        unsafe {
            self.red.grid_max(
                &self.k,
                &self.gpu,
                self.solution_transforms(),
                u,
                &self.layout,
                spec,
                (real, rs),
                which,
            )
        }
    }

    /// The velocity on the N³ grid, components in `[i][j][k]` order.
    pub fn velocity_on_grid(&mut self) -> Result<[Vec<f64>; 3], CudaError> {
        let n3 = self.grid.n.pow(3);
        let rs = real_stride(self.grid.n);
        for c in 0..3 {
            self.field_on_grid(c as i32, c)?;
        }
        let mut flat = vec![0.0; 2 * rs + n3];
        self.real
            .download(&self.gpu, &mut flat, "the velocity on the grid")?;
        Ok(std::array::from_fn(|c| flat[c * rs..c * rs + n3].to_vec()))
    }

    /// Median milliseconds (CUDA events) of the 36 transforms of one RK4 step alone (4 × (6
    /// inverse + 3 forward) on the product grid), over `repeats` repetitions after one warm-up:
    /// the cuFFT part of [`GpuSpectralSolver::step`], for `vpm bench spectral`. Leaves the
    /// state unchanged (only scratch is transformed).
    pub fn time_transforms(&mut self, repeats: usize) -> Result<f64, CudaError> {
        let s = self.stream.clone();
        let m = self.product.m;
        let (hlen, n3) = (spec_stride(m) as u64, real_stride(m) as u64);
        let (spec, real) = (self.addr(&self.spec), self.addr(&self.real));
        let run = |t: &Transforms| -> Result<(), CudaError> {
            for _ in 0..4 {
                for f in 0..6 {
                    // SAFETY: field f of the buffers sized at construction (contents are
                    // scratch here).
                    unsafe { t.inverse(spec + f * hlen * 16, real + f * n3 * 8)? };
                }
                for f in 0..3 {
                    // SAFETY: as above.
                    unsafe { t.forward(real + f * n3 * 8, spec + f * hlen * 16)? };
                }
            }
            Ok(())
        };
        let ev = || self.gpu.event();
        let (start, stop) = (ev()?, ev()?);
        run(&self.product)?;
        let mut ms = Vec::new();
        for _ in 0..repeats.max(1) {
            start.record(&s).doing("recording an event")?;
            run(&self.product)?;
            stop.record(&s).doing("recording an event")?;
            let t = self.gpu.elapsed_ms(&start, &stop, "the transforms")?;
            ms.push(t as f64);
        }
        // The scratch buffers were overwritten: the next right-hand side rewrites them all.
        ms.sort_by(f64::total_cmp);
        Ok(ms[ms.len() / 2])
    }

    /// Milliseconds (CUDA events) of each of `repeats` RK4 steps of size `dt` after one warm-up
    /// step, each timed from the first launch to the finite flag's arrival; the state advances.
    pub fn time_steps(&mut self, dt: f64, repeats: usize) -> Result<Vec<f64>, SpectralError> {
        let ev = || self.gpu.event();
        let (start, stop) = (ev()?, ev()?);
        self.step(dt)?;
        let mut ms = Vec::new();
        for _ in 0..repeats.max(1) {
            start.record(&self.stream).doing("recording an event")?;
            self.step(dt)?;
            stop.record(&self.stream).doing("recording an event")?;
            let t = self.gpu.elapsed_ms(&start, &stop, "a step")?;
            ms.push(t as f64);
        }
        Ok(ms)
    }
}

impl SpectralStepper for GpuSpectralSolver {
    fn grid(&self) -> SpectralGrid {
        self.grid
    }
    fn nu(&self) -> f64 {
        self.nu
    }
    fn set_velocity_modes(&mut self, uhat: VectorModes) -> Result<(), SpectralError> {
        Ok(GpuSpectralSolver::set_velocity_modes(self, uhat)?)
    }
    fn restore_velocity_modes(&mut self, uhat: VectorModes) -> Result<(), SpectralError> {
        Ok(GpuSpectralSolver::restore_velocity_modes(self, uhat)?)
    }
    fn velocity_modes(&mut self) -> Result<&VectorModes, SpectralError> {
        Ok(GpuSpectralSolver::velocity_modes(self)?)
    }
    fn cfl_dt(&mut self, cfl: f64) -> Result<f64, SpectralError> {
        Ok(GpuSpectralSolver::cfl_dt(self, cfl)?)
    }
    fn step(&mut self, dt: f64) -> Result<(), SpectralError> {
        GpuSpectralSolver::step(self, dt)
    }
    fn dkdt_from_rhs(&mut self) -> Result<f64, SpectralError> {
        Ok(GpuSpectralSolver::dkdt_from_rhs(self)?)
    }
    fn flow_stats(&mut self) -> Result<FlowStats, SpectralError> {
        Ok(GpuSpectralSolver::flow_stats(self)?)
    }
    fn shell_spectrum(&mut self) -> Result<Vec<f64>, SpectralError> {
        Ok(GpuSpectralSolver::shell_spectrum(self)?)
    }
    fn max_divergence(&mut self) -> Result<f64, SpectralError> {
        Ok(GpuSpectralSolver::max_divergence(self)?)
    }
    fn max_vorticity(&mut self) -> Result<f64, SpectralError> {
        Ok(GpuSpectralSolver::max_vorticity(self)?)
    }
    fn velocity_on_grid(&mut self) -> Result<[Vec<f64>; 3], SpectralError> {
        Ok(GpuSpectralSolver::velocity_on_grid(self)?)
    }
    fn device(&self) -> Device {
        Device::Cuda(self.gpu().clone())
    }
}

/// The diagnostics of one velocity field given at the nodes of an N³ grid.
#[derive(Debug, Clone)]
pub struct GridDiagnostics {
    /// The field's retained modes' layout (|k_i| ≤ K).
    pub layout: ModeLayout,
    pub stats: FlowStats,
    pub spectrum: Vec<f64>,
    pub max_divergence: f64,
    pub max_vorticity: f64,
}

/// The shared diagnostics (§6) of a velocity field that lives on the GPU as values at the nodes
/// of an N³ grid (the particle velocity at the spectral grid's nodes): three forward transforms
/// of the pruned kind, the retained modes |k_i| ≤ K picked and scaled by 1/N³ (`sp_store`, stage
/// 0), then the solver's own reductions (`Reductions`). What `modes_from_node_velocities`
/// and the host's `flow_stats`, `shell_spectrum`, `max_divergence` and `max_vorticity` give,
/// to round-off, with only the scalars and the spectrum's row partials crossing to the host.
pub struct DeviceGridDiagnostics {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    k: Kernels,
    layout: ModeLayout,
    transforms: Transforms,
    real: DeviceBuffer<f64>,
    spec: DeviceBuffer<cufft_sys::double2>,
    modes: DeviceBuffer<cufft_sys::double2>,
    red: Reductions,
}

impl DeviceGridDiagnostics {
    /// Plans and buffers for an n³ grid keeping the modes |k_i| ≤ kmax (2·kmax < n), on `gpu`'s
    /// stream.
    pub fn new(gpu: &Arc<Gpu>, n: usize, kmax: usize) -> Result<Self, CudaError> {
        let stream = gpu.stream().clone();
        cufft_available()?;
        if n < 4 || 2 * kmax >= n || (n as u128).pow(3) > i32::MAX as u128 || 2 * kmax + 1 > 1024 {
            return Err(CudaError::Invalid(format!(
                "GPU grid diagnostics: n = {n}, K = {kmax} (4 ≤ n ≤ 1290, 2K < n, K ≤ 511)"
            )));
        }
        let layout = ModeLayout::new(kmax);
        let k = Kernels::load(gpu)?;
        let transforms = Transforms::new(n, kmax, TransformKind::Pruned, &stream)?;
        let red = Reductions::new(&stream, &layout)?;
        let mut d = DeviceGridDiagnostics {
            gpu: gpu.clone(),
            stream,
            k,
            layout,
            transforms,
            real: DeviceBuffer::new(),
            spec: DeviceBuffer::new(),
            modes: DeviceBuffer::new(),
            red,
        };
        d.real.ensure(&d.stream, 3 * real_stride(n))?;
        d.spec.ensure(&d.stream, 3 * spec_stride(n))?;
        d.modes.ensure(&d.stream, 3 * layout.len())?;
        Ok(d)
    }

    /// Device memory of [`DeviceGridDiagnostics::new`] for (n, kmax), in bytes: three real
    /// fields and three half spectra on the n grid, the retained modes, the row partials, and
    /// cuFFT's work areas allowed as two half spectra plus 32 MiB.
    pub fn device_bytes(n: usize, kmax: usize) -> u64 {
        let layout = ModeLayout::new(kmax);
        let half = spec_stride(n) as u64 * 16;
        let partials = layout.side() as u64 * (4 + shell_count(&layout) as u64) * 8;
        3 * real_stride(n) as u64 * 8
            + 5 * half
            + 3 * layout.len() as u64 * 16
            + partials
            + (32 << 20)
    }

    /// The diagnostics of the velocity `u` (n³ node-major 3-vectors, f64, in the grid's
    /// `[i][j][k]` node order, on this stream's context) with viscosity ν.
    pub fn of_node_velocity(
        &mut self,
        u: &DeviceBuffer<f64>,
        nu: f64,
    ) -> Result<GridDiagnostics, CudaError> {
        let s = self.stream.clone();
        let n = self.transforms.m;
        let n3 = n * n * n;
        if u.get().len() < 3 * n3 {
            return Err(CudaError::Invalid(format!(
                "GPU grid diagnostics: the velocity holds {} values, {} needed for n = {n}",
                u.get().len(),
                3 * n3
            )));
        }
        let (hs, rs) = (spec_stride(n), real_stride(n));
        let (ua, real, spec, modes) = (
            u.addr(&s),
            self.real.addr(&s),
            self.spec.addr(&s),
            self.modes.addr(&s),
        );
        let (n3_i, rs_i) = (n3 as i64, rs as i64);
        // SAFETY: sp_deinterleave(const double* u, long long n3, double* r, long long rs): u
        // holds ≥ 3·n3 f64 (checked above), r three fields of rs ≥ n3 f64 (sized in `new`).
        launch!(s, &self.k.deinterleave, "sp_deinterleave", cfg_for(n3);
            &ua, &n3_i, &real, &rs_i)?;
        for c in 0..3u64 {
            // SAFETY: field c of the real (rs f64) and spectra (hs double2) buffers, 256-byte
            // aligned, of this context.
            unsafe {
                self.transforms
                    .forward(real + c * rs as u64 * 8, spec + c * hs as u64 * 16)?
            };
        }
        let (mi, kmax) = (n as i32, self.layout.kmax as i32);
        let len = self.layout.len() as i64;
        let (hs_i, scale, stage, zero) = (hs as i64, 1.0 / n3 as f64, 0i32, 0.0f64);
        // SAFETY: sp_store with stage 0 reads the three spectra (hstride hs, the retained modes
        // written by the forward transforms) and writes only its k1 argument, here the 3·len
        // double2 of `modes`; the other mode pointers are not touched at stage 0.
        launch!(s, &self.k.store, "sp_store", cfg_for(len as usize);
            &spec, &hs_i, &mi, &scale, &kmax, &len, &stage, &zero, &zero, &modes, &modes,
            &modes, &modes, &modes)?;
        let sums = self
            .red
            .mode_sums(&self.k, &self.gpu, modes, 0, &self.layout, nu)?;
        let (t, layout, gpu) = (&self.transforms, &self.layout, &self.gpu);
        let max = |which| {
            // SAFETY: modes holds 3·len double2; spec ≥ n²·(n/2+1) double2 and real three
            // fields of rs ≥ n³ f64, 256-byte aligned, of this context.
            unsafe {
                self.red
                    .grid_max(&self.k, gpu, t, modes, layout, spec, (real, rs), which)
            }
        };
        Ok(GridDiagnostics {
            layout: self.layout,
            stats: FlowStats::from_mode_sums(sums.sums[0], sums.sums[1], sums.sums[2], nu),
            spectrum: sums.spectrum,
            max_divergence: max(GridMax::Divergence)?,
            max_vorticity: max(GridMax::Vorticity)?,
        })
    }
}
