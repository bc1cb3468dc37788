//! One rank of the pseudo-spectral solver across several GPUs (docs/physics.md §5.6): the
//! slab decomposition of [`super::slab`] on this rank's GPU, with cuFFT for the local
//! transforms and NCCL ([`crate::device::nccl`]) for the all-to-all transposes and the
//! reductions. Every method is **collective**: all ranks call it in the same order (the rank-0
//! driver and the worker processes of the run see to that).
//!
//! One right-hand side N(v̂) on rank r (kernels: `kernels/spectral_slab.cu`, with `sp_cross`
//! of `kernels/spectral.cu`; the formulas are the one-GPU solver's, shared through
//! `kernels/spectral.cuh`):
//! 1. `sps_gather`: v̂ and ω̂ = i k × v̂ of the local modes (k_z ∈ kz_range(r), every retained
//!    k_y) into six pencil fields `[k_x DFT index][iy][kz_local]`, zero where |k_x| > K;
//! 2. inverse complex x transforms of every (iy, kz_local) line (one batched plan per field);
//! 3. the transpose: one NCCL group of sends and receives carrying all six fields, pencil rank r
//!    sending slab rank q the chunk x ∈ x_range(q) (contiguous) of each field, received at
//!    exchange_chunk_offset(r) of that field (this rank's own chunk is a device copy);
//! 4. `sps_unpack` into the half spectra of the local planes (zero elsewhere), inverse real
//!    (y, z) transforms (one plan batched over the planes, per field);
//! 5. `sp_cross`: u × ω in place and the local max(|u| + |v| + |w|);
//! 6. forward (y, z) transforms of the three products, `sps_pack`, the transpose back (one
//!    group, three fields), forward x transforms;
//! 7. `sps_store`: the 1/M³ scale, the Leray projection and the Runge–Kutta stage update of the
//!    local modes; after the fourth stage `sps_hermitian` on rank 0 (the k_z = 0 plane is all
//!    there) and the finite flag, max-reduced over the ranks so that no rank commits a bad step.
//!
//! The transposes of 3. and 6. run a chunk of fields at a time on the GPU's exchange stream
//! ([`NcclComm::exchange_beside`]; [`DEFAULT_EXCHANGE_CHUNK`] fields): on the way out a
//! chunk's transpose overlaps the x transforms of the next chunk and the (y, z) transforms of
//! the previous one; on the way back the (y, z) transforms and packing of the next chunk and
//! the x transforms of the previous one. Events keep every buffer's order. With
//! [`SlabRank::set_exchange_chunk`]`(0)` each pass's fields go in one group between the
//! transforms instead; the operations on every value are the same, so the results are too, to
//! the bit.
//!
//! A step is queued without host waits except the finite flag (one wait per step); buffers and
//! plans are made once, in [`SlabRank::new`]. Diagnostics: the per-row partials of each rank are
//! all-gathered and every rank adds them in rank order, then row order (identical everywhere);
//! maxima are all-reduced. max |∇·u|, max |ω| and the velocity on the grid use the same
//! machinery on the N grid (a second [`SlabLayout`], m = N, with the 3/2 rule; N must then also
//! be a multiple of the ranks).
//!
//! Every wait goes through [`NcclComm::wait`], which returns `Err` (the communicator aborted)
//! once the run's abort signal is raised, so a failed rank stops every rank.

use super::gpu::{cfg_for, pruned_plans, SPECTRAL_HEADER, THREADS};
use super::layout::ModeLayout;
use super::slab::SlabLayout;
use super::solver::{NonFiniteState, SpectralGrid, VectorModes};
use super::stepper::SpectralError;
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{
    cufft_available, fft_work_bytes, kernel_source, launch, load_kernels, CudaError, Doing, Gpu,
    KernelSource,
};
use crate::device::nccl::{NcclComm, Pending, Transfer};
use crate::diagnostics::flow::shell_count;
use cudarc::cufft::{result as cufft_result, sys as cufft_sys, CudaFft, FftDirection};
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use num_complex::Complex64;
use std::sync::Arc;

/// The slab kernels, with the solver's shared header.
pub const KERNELS: KernelSource = kernel_source!("spectral_slab.cu", SPECTRAL_HEADER);

/// Bytes of one complex f64.
const C16: u64 = 16;

/// Diagnostics of one state, summed over the ranks in rank order (equal on every rank).
#[derive(Debug, Clone, PartialEq)]
pub struct SlabSums {
    /// Σ w e, Σ w e |k|², Σ w e/|k|, dK/dt from the right-hand side (as the one-GPU solver).
    pub sums: [f64; 4],
    /// The shell spectrum E(s).
    pub spectrum: Vec<f64>,
}

/// The kernels of spectral_slab.cu and the four of spectral.cu used as they are.
struct Kernels {
    // spectral_slab.cu
    gather: CudaFunction,
    halves: CudaFunction,
    rk_begin: CudaFunction,
    store: CudaFunction,
    hermitian: CudaFunction,
    mode_sums: CudaFunction,
    // spectral.cu
    sp_cross: CudaFunction,
    sp_nonfinite: CudaFunction,
    sp_max_abs: CudaFunction,
    sp_max_norm2: CudaFunction,
}

/// The plans of one grid (m) on this rank: the x lines of the pencil side and the (y, z)
/// planes of the slab side.
struct SlabTransforms {
    slabs: SlabLayout,
    rank: usize,
    /// Z2Z of length m over the side·nz_local lines of one pencil field (stride side·nz_local).
    x: CudaFft,
    /// Z2D (y, z) over the planes of one field.
    yz_inv: CudaFft,
    /// D2Z (y, z) over the planes of one field (product grid only).
    yz_fwd: Option<CudaFft>,
    work_bytes: u64,
}

impl SlabTransforms {
    /// The plans of `slabs` on rank `rank`, on `gpu`'s stream (the forward (y, z) plan when
    /// `forward`).
    fn new(gpu: &Gpu, slabs: SlabLayout, rank: usize, forward: bool) -> Result<Self, CudaError> {
        let (m, stream) = (slabs.m, gpu.stream());
        let what = format!("the {m}^3 grid on rank {rank}");
        // x lines of every (iy, kz_local) of a pencil field: element x of line b at b + x·lines.
        let lines = (slabs.side() * slabs.nz_local(rank)) as i32;
        let planes = slabs.planes() as i32;
        let (x, yz_inv, yz_fwd) = pruned_plans(&what, m, (lines, lines), planes, forward, stream)?;
        let work_bytes = [&x, &yz_inv]
            .into_iter()
            .chain(yz_fwd.as_ref())
            .map(fft_work_bytes)
            .sum::<Result<u64, CudaError>>()?;
        Ok(SlabTransforms {
            slabs,
            rank,
            x,
            yz_inv,
            yz_fwd,
            work_bytes,
        })
    }

    /// Complex values per pencil field on this rank.
    fn pstride(&self) -> usize {
        self.slabs.pencil_len(self.rank)
    }
    /// Complex values per exchange field.
    fn estride(&self) -> usize {
        self.slabs.exchange_len()
    }
    /// Complex values per half-spectrum field (the local planes, contiguous).
    fn hstride(&self) -> usize {
        self.slabs.planes() * self.slabs.half_plane()
    }
    /// Values per real field (the local planes, contiguous).
    fn rstride(&self) -> usize {
        self.slabs.planes() * self.slabs.m * self.slabs.m
    }

    /// The x transform (in place) of the pencil field at `pen`.
    ///
    /// # Safety
    /// `pen` holds pstride() complex values of this plan's context.
    unsafe fn x(&self, pen: u64, dir: FftDirection) -> Result<(), CudaError> {
        let p = pen as *mut cufft_sys::cufftDoubleComplex;
        // SAFETY: the caller's contract.
        unsafe { cufft_result::exec_z2z(self.x.handle(), p, p, dir as i32) }
            .doing("cuFFT Z2Z (x) on the pencils")
    }

    /// The inverse (y, z) transforms of the half spectra at `half` (overwritten) into `real`.
    ///
    /// # Safety
    /// `half` holds hstride() complex values and `real` rstride() f64 of this context.
    unsafe fn yz_inverse(&self, half: u64, real: u64) -> Result<(), CudaError> {
        // SAFETY: the caller's contract.
        unsafe {
            cufft_result::exec_z2d(
                self.yz_inv.handle(),
                half as *mut cufft_sys::cufftDoubleComplex,
                real as *mut cufft_sys::cufftDoubleReal,
            )
        }
        .doing("cuFFT Z2D (y, z) on the slab")
    }

    /// The forward (y, z) transforms of the real planes at `real` into `half`.
    ///
    /// # Safety
    /// As [`SlabTransforms::yz_inverse`].
    unsafe fn yz_forward(&self, real: u64, half: u64) -> Result<(), CudaError> {
        let f = self
            .yz_fwd
            .as_ref()
            .ok_or_else(|| CudaError::Invalid("no forward (y, z) plan on this grid".into()))?;
        // SAFETY: the caller's contract.
        unsafe {
            cufft_result::exec_d2z(
                f.handle(),
                real as *mut cufft_sys::cufftDoubleReal,
                half as *mut cufft_sys::cufftDoubleComplex,
            )
        }
        .doing("cuFFT D2Z (y, z) on the slab")
    }
}

/// Which mode buffer a right-hand side reads.
#[derive(Clone, Copy)]
enum Input {
    State,
    StageA,
    StageB,
}

/// A maximum over the N-grid nodes.
#[derive(Clone, Copy)]
enum GridMax {
    Divergence,
    Vorticity,
}

/// Quantity codes of `sps_gather` (4 bits per field): 0–2 velocity, 3 divergence, 4–6 vorticity.
fn codes(quantities: &[i32]) -> i32 {
    quantities
        .iter()
        .enumerate()
        .fold(0, |acc, (f, q)| acc | (q << (4 * f)))
}

/// Words of the maxima buffer.
const W_SPEED: usize = 0;
const W_STAGE_SPEED: usize = 1;
const W_GRID: usize = 2;
const W_FLAG: usize = 3;
const W_BARRIER: usize = 4;
const WORDS: usize = 5;

/// The local mode buffers.
const UHAT: usize = 0;
const K1: usize = 1;
const STAGE_A: usize = 2;
const STAGE_B: usize = 3;
const ACC: usize = 4;

/// This rank's part of the distributed solver.
pub struct SlabRank {
    comm: Arc<NcclComm>,
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    grid: SpectralGrid,
    layout: ModeLayout,
    nu: f64,
    rank: usize,
    k: Kernels,
    /// The product grid's plans and split.
    product: SlabTransforms,
    /// The N grid's, when it differs (3/2 rule).
    solution: Option<SlabTransforms>,
    /// Local modes (3·local_len each), indexed by UHAT, K1, STAGE_A, STAGE_B, ACC.
    modes: [DeviceBuffer<cufft_sys::double2>; 5],
    /// Six pencil fields, six exchange fields, six half spectra and six real fields (product
    /// grid sizes; the N grid uses the first parts).
    pen: DeviceBuffer<cufft_sys::double2>,
    ex: DeviceBuffer<cufft_sys::double2>,
    /// (The half spectra as f64 pairs: rank 0's staging area outside a step.)
    half: DeviceBuffer<f64>,
    real: DeviceBuffer<f64>,
    /// Maxima, flag and barrier words (W_*).
    words: DeviceBuffer<u64>,
    /// This rank's row partials (4·side scalars, then side·nshell shells) and every rank's.
    partials: DeviceBuffer<f64>,
    gathered: DeviceBuffer<f64>,
    /// Rank 0's staging area for scatters and gathers when the half spectra are too small
    /// (more than 6 ranks; made when first needed).
    staging: DeviceBuffer<f64>,
    k1_valid: bool,
    speed: Option<f64>,
    sums: Option<SlabSums>,
    /// Fields per transpose beside the transforms, or 0: all fields of a pass in one group
    /// between them ([`SlabRank::set_exchange_chunk`]).
    exchange_chunk: usize,
}

impl Drop for SlabRank {
    /// The buffers are freed in the main stream's order: it first waits for whatever the
    /// exchange stream still holds (an exchange left unjoined by an error), so that no
    /// transfer writes into freed memory.
    fn drop(&mut self) {
        let _ = self.comm.join_all();
    }
}

impl std::fmt::Debug for SlabRank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (r, p) = (self.rank, self.product.slabs.ranks);
        write!(f, "SlabRank {r} of {p} on {:?}", self.grid)
    }
}

/// Fields per transpose beside the transforms unless set otherwise
/// ([`SlabRank::set_exchange_chunk`]): the fastest of 1, 2 and 3 on 4 H100s at 512³ and 1024³
/// (docs/performance.md).
pub const DEFAULT_EXCHANGE_CHUNK: usize = 1;

/// `count` fields in consecutive chunks of `chunk` (the last one shorter).
fn field_chunks(count: usize, chunk: usize) -> Vec<std::ops::Range<usize>> {
    (0..count)
        .step_by(chunk.max(1))
        .map(|a| a..(a + chunk.max(1)).min(count))
        .collect()
}

/// What a transpose is called in errors.
fn transpose_name(to_slabs: bool) -> &'static str {
    if to_slabs {
        "the transpose to the slabs"
    } else {
        "the transpose to the pencils"
    }
}

fn invalid(e: impl std::fmt::Display) -> SpectralError {
    SpectralError::Device(CudaError::Invalid(e.to_string()))
}

/// The product and solution splits of `grid` ([`SlabLayout::for_grid`]), the error as text.
fn layouts(grid: SpectralGrid, ranks: usize) -> Result<(SlabLayout, Option<SlabLayout>), String> {
    SlabLayout::for_grid(grid, ranks).map_err(|e| e.to_string())
}

impl SlabRank {
    /// Device memory one rank needs for `grid` over `ranks` GPUs, in bytes (the largest rank's:
    /// rank 0, which holds the most k_z values and the staging area of scatters and gathers):
    /// five local mode arrays, six pencil, exchange, half-spectrum and real fields of the
    /// product grid's slab, the row partials, the staging area (the global modes or one
    /// velocity component on the N grid; inside the half spectra up to 6 ranks), and cuFFT's
    /// work areas allowed as a pencil field and two half-spectrum fields per grid, plus 64 MiB.
    pub fn device_bytes(grid: SpectralGrid, ranks: usize) -> u64 {
        let Ok((p, s)) = layouts(grid, ranks.max(1)) else {
            return super::gpu::GpuSpectralSolver::device_bytes(grid);
        };
        let layout = grid.layout();
        let modes = 5 * 3 * p.local_len(0) as u64 * C16;
        let half = (p.planes() * p.half_plane()) as u64 * C16;
        let real = (p.planes() * p.m * p.m) as u64 * 8;
        let pencil = p.pencil_len(0) as u64 * C16;
        let exchange = p.exchange_len() as u64 * C16;
        let fields = 6 * (half + real + pencil + exchange);
        let rows = layout.side() as u64 * (4 + shell_count(&layout) as u64) * 8;
        let partials = rows * (1 + ranks as u64) + WORDS as u64 * 8;
        // The staging area: the global modes or one velocity component on the N grid, in the
        // half spectra when they hold it (up to 6 ranks), else beside them.
        let staging = (3 * layout.len() as u64 * C16)
            .max(grid.n.pow(3) as u64 * 8)
            .saturating_sub(6 * half);
        let work = |l: &SlabLayout| {
            l.pencil_len(0) as u64 * C16 + 2 * (l.planes() * l.half_plane()) as u64 * C16
        };
        let work = work(&p) + s.as_ref().map_or(0, work);
        modes + fields + partials + staging + work + (64 << 20)
    }

    /// This rank's solver with zero velocity (collective: plans and buffers on every rank).
    /// `Err` when the grid cannot be split over the ranks ([`super::slab::SlabError`]).
    pub fn new(comm: Arc<NcclComm>, grid: SpectralGrid, nu: f64) -> Result<Self, SpectralError> {
        cufft_available()?;
        let ranks = comm.ranks();
        let rank = comm.rank();
        let m = grid.product_grid();
        let kmax = grid.kmax();
        if m < 4 || 2 * kmax + 1 > 4 * THREADS as usize {
            return Err(invalid(format!(
                "the GPU spectral solver across GPUs: n = {} with {} dealiasing (product grid \
                 {m}³) is outside what it handles (product grid 4³ or more, K ≤ 511)",
                grid.n, grid.dealias
            )));
        }
        let (p, s) = layouts(grid, ranks).map_err(invalid)?;
        // cuFFT's plans here are 32-bit: one field of a rank's slab must stay below 2³¹ values.
        if (p.planes() * m * m) as u128 > i32::MAX as u128 {
            return Err(invalid(format!(
                "the GPU spectral solver across {ranks} GPUs: a slab of {} planes of {m}² is \
                 too large for cuFFT's 32-bit plans (use more GPUs)",
                p.planes()
            )));
        }
        let gpu = comm.gpu().clone();
        let stream = gpu.stream().clone();
        // Compiled once per process and GPU; the four spectral.cu kernels are the one-GPU
        // solver's module.
        let (slab, one) = (
            gpu.module_from(&KERNELS, &[])?,
            gpu.module_from(&super::gpu::KERNELS, &[])?,
        );
        #[rustfmt::skip]
        let k = load_kernels!(slab, "sps_", Kernels {
            gather, halves, rk_begin, store, hermitian, mode_sums;
            sp_cross: one.function("sp_cross")?,
            sp_nonfinite: one.function("sp_nonfinite")?,
            sp_max_abs: one.function("sp_max_abs")?,
            sp_max_norm2: one.function("sp_max_norm2")?,
        });
        let product = SlabTransforms::new(&gpu, p, rank, true)?;
        let solution = match s {
            Some(s) => Some(SlabTransforms::new(&gpu, s, rank, false)?),
            None => None,
        };
        let layout = grid.layout();
        let mut r = SlabRank {
            comm,
            gpu,
            stream: stream.clone(),
            grid,
            layout,
            nu,
            rank,
            k,
            product,
            solution,
            modes: std::array::from_fn(|_| DeviceBuffer::new()),
            pen: DeviceBuffer::new(),
            ex: DeviceBuffer::new(),
            half: DeviceBuffer::new(),
            real: DeviceBuffer::new(),
            words: DeviceBuffer::new(),
            partials: DeviceBuffer::new(),
            gathered: DeviceBuffer::new(),
            staging: DeviceBuffer::new(),
            k1_valid: false,
            speed: None,
            sums: None,
            exchange_chunk: DEFAULT_EXCHANGE_CHUNK,
        };
        let l3 = 3 * p.local_len(rank);
        for b in &mut r.modes {
            b.zero(&stream, l3)?;
        }
        r.pen.zero(&stream, 6 * r.product.pstride())?;
        r.ex.zero(&stream, 6 * r.product.estride())?;
        r.half.zero(&stream, 2 * 6 * r.product.hstride())?;
        r.real.zero(&stream, 6 * r.product.rstride())?;
        r.words.zero(&stream, WORDS)?;
        let rows = layout.side() * (4 + shell_count(&layout));
        r.partials.zero(&stream, rows)?;
        r.gathered.zero(&stream, ranks * rows)?;
        // Every rank has its buffers before any transfer.
        r.barrier()?;
        Ok(r)
    }

    pub fn grid(&self) -> SpectralGrid {
        self.grid
    }
    pub fn nu(&self) -> f64 {
        self.nu
    }
    /// The split of the product grid.
    pub fn slabs(&self) -> SlabLayout {
        self.product.slabs
    }
    pub fn comm(&self) -> &Arc<NcclComm> {
        &self.comm
    }
    /// The split of the N grid (the product grid's with 2/3 truncation).
    pub fn solution_slabs(&self) -> SlabLayout {
        self.solution_transforms().slabs
    }

    /// What this rank holds on the device now, in bytes: its buffers and the work areas cuFFT
    /// reported for its plans (for checking [`SlabRank::device_bytes`]).
    pub fn resident_bytes(&self) -> u64 {
        let c = self
            .modes
            .iter()
            .chain([&self.pen, &self.ex])
            .map(|b| b.capacity() as u64 * C16)
            .sum::<u64>();
        let f = [
            &self.half,
            &self.real,
            &self.partials,
            &self.gathered,
            &self.staging,
        ]
        .iter()
        .map(|b| b.capacity() as u64 * 8)
        .sum::<u64>();
        let work = self.product.work_bytes + self.solution.as_ref().map_or(0, |t| t.work_bytes);
        c + f + 8 * WORDS as u64 + work
    }

    fn solution_transforms(&self) -> &SlabTransforms {
        self.solution.as_ref().unwrap_or(&self.product)
    }

    fn addr<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        b: &DeviceBuffer<T>,
    ) -> u64 {
        b.addr(&self.stream)
    }

    /// The device address of mode buffer `i` (UHAT, K1, …).
    fn mode(&self, i: usize) -> u64 {
        self.modes[i].addr(&self.stream)
    }

    fn word(&self, i: usize) -> u64 {
        self.addr(&self.words) + 8 * i as u64
    }

    fn zero_word(&self, i: usize) -> Result<(), CudaError> {
        // SAFETY: word i < WORDS of the words buffer (allocated in `new` on this stream).
        unsafe {
            cudarc::driver::result::memset_d8_async(self.word(i), 0, 8, self.stream.cu_stream())
        }
        .doing("zeroing a maximum")
    }

    /// Waits (abortably) and reads the words.
    fn read_words(&self, what: &str) -> Result<[u64; WORDS], CudaError> {
        self.comm.wait(what)?;
        let mut w = [0u64; WORDS];
        self.words.download(&self.gpu, &mut w, what)?;
        Ok(w)
    }

    /// A barrier over the ranks (waited for).
    fn barrier(&self) -> Result<(), CudaError> {
        // SAFETY: the barrier word of `words`.
        unsafe { self.comm.barrier(self.word(W_BARRIER)) }
    }

    fn state_changed(&mut self) {
        self.k1_valid = false;
        self.speed = None;
        self.sums = None;
    }

    /// The transfers of the transpose of fields `fields` on grid `t`: pencil side → slab side
    /// when `to_slabs`, else back; field f's chunk for (or from) each rank in rank order.
    fn transpose_list(
        &self,
        t: &SlabTransforms,
        fields: std::ops::Range<usize>,
        to_slabs: bool,
    ) -> Vec<Transfer> {
        let s = &t.slabs;
        let r = self.rank;
        let (pen, ex) = (self.addr(&self.pen), self.addr(&self.ex));
        let (ps, es) = (t.pstride() as u64, t.estride() as u64);
        let mut list = Vec::with_capacity(fields.len() * s.ranks);
        for f in fields.start as u64..fields.end as u64 {
            for q in 0..s.ranks {
                // Pencil side: my chunk for slab rank q; slab side: pencil rank q's chunk.
                let pencil = (
                    pen + (f * ps + s.pencil_chunk_offset(r, q) as u64) * C16,
                    s.chunk_len(r) * 16,
                );
                let slab = (
                    ex + (f * es + s.exchange_chunk_offset(q) as u64) * C16,
                    s.chunk_len(q) * 16,
                );
                let (send, recv) = if to_slabs {
                    (pencil, slab)
                } else {
                    (slab, pencil)
                };
                list.push(Transfer {
                    peer: q,
                    send,
                    recv,
                });
            }
        }
        list
    }

    /// Queues the transpose of the first `fields` fields on grid `t` on the main stream, in
    /// one NCCL group for all fields and peers.
    fn transpose(
        &self,
        t: &SlabTransforms,
        fields: usize,
        to_slabs: bool,
    ) -> Result<(), CudaError> {
        let list = self.transpose_list(t, 0..fields, to_slabs);
        // SAFETY: the pencil and exchange buffers hold 6 fields of the product grid's strides
        // (≥ this grid's); every offset + length stays inside field f (slab.rs: the chunks tile
        // the buffers); every rank queues the same list shape (fields × ranks) in the same
        // order, and chunk sizes agree pairwise (rank q sends chunk_len(q) to r, which expects
        // chunk_len(q)).
        unsafe { self.comm.exchange(transpose_name(to_slabs), &list) }
    }

    /// Queues the transpose of `fields` on grid `t` beside the main stream (after what it has
    /// queued so far), in one NCCL group; the caller joins it before touching those fields'
    /// pencil or exchange areas again.
    fn transpose_beside(
        &self,
        t: &SlabTransforms,
        fields: std::ops::Range<usize>,
        to_slabs: bool,
    ) -> Result<Pending, CudaError> {
        let list = self.transpose_list(t, fields, to_slabs);
        // SAFETY: as in `transpose` (these fields); until the join the main stream only works
        // on the other fields' pencil and exchange areas (`to_physical`, `rhs`).
        unsafe { self.comm.exchange_beside(transpose_name(to_slabs), &list) }
    }

    /// Queues `sps_halves` on `fields` fields from field `f` on, of grid `t`: the half spectra
    /// from the exchange areas when `to_half` (zero where no retained mode lands), else the
    /// exchange areas from the half spectra.
    fn halves(
        &self,
        t: &SlabTransforms,
        f: u64,
        fields: i32,
        to_half: bool,
    ) -> Result<(), CudaError> {
        let s = &t.slabs;
        let (h, e) = (
            self.addr(&self.half) + f * t.hstride() as u64 * C16,
            self.addr(&self.ex) + f * t.estride() as u64 * C16,
        );
        let (es, planes, m, kmax, ranks) = (
            t.estride() as i64,
            s.planes() as i32,
            s.m as i32,
            s.kmax as i32,
            s.ranks as i32,
        );
        let to_half = i32::from(to_half);
        // SAFETY: sps_halves(double2* h, double2* ex, long long estride, int fields, int
        // planes, int m, int kmax, int ranks, int to_half): ex `fields` ≤ 6 − f fields of
        // estride from field f on, h as many of planes·m·(m/2+1) (the half and exchange buffers
        // hold 6 fields of the product grid's strides, ≥ this grid's).
        launch!(self.stream, &self.k.halves, "sps_halves", cfg_for(t.hstride());
            &h, &e, &es, &fields, &planes, &m, &kmax, &ranks, &to_half)?;
        Ok(())
    }

    /// Queues the gather of `quantities` (sps_gather codes) of the local modes at `src` onto
    /// the slab side of grid `t`: pencil fields, x inverse, transpose, unpack, (y, z) inverse
    /// into the first `quantities.len()` real fields (rstride apart).
    fn to_physical(
        &self,
        t: &SlabTransforms,
        src: u64,
        quantities: &[i32],
    ) -> Result<(), CudaError> {
        let s = &t.slabs;
        let count = quantities.len();
        let (pen, half, real) = (
            self.addr(&self.pen),
            self.addr(&self.half),
            self.addr(&self.real),
        );
        let len = s.local_len(self.rank) as i64;
        let nzl = s.nz_local(self.rank) as i32;
        let kz0 = s.kz_range(self.rank).start as i32;
        let (ps, mi, kmax) = (t.pstride() as i64, s.m as i32, s.kmax as i32);
        let (code, count_i) = (codes(quantities), count as i32);
        // SAFETY: sps_gather(const double2* v, long long len, int nzl, int kz0, double2* pen,
        // long long pstride, int m, int kmax, int codes, int count): v holds 3·len double2 (a
        // local mode buffer), pen `count` ≤ 6 fields of pstride (within the 6 product-grid
        // fields); m·side·nzl = pstride positions.
        launch!(self.stream, &self.k.gather, "sps_gather", cfg_for(t.pstride());
            &src, &len, &nzl, &kz0, &pen, &ps, &mi, &kmax, &code, &count_i)?;
        // Fields f.. of the half spectra from their exchange areas.
        let unpack = |f: u64, fields: i32| self.halves(t, f, fields, true);
        let x_inverse = |f: u64| -> Result<(), CudaError> {
            // SAFETY: field f of the pencil buffer (pstride values).
            unsafe { t.x(pen + f * ps as u64 * C16, FftDirection::Inverse) }
        };
        let yz_inverse = |f: u64| -> Result<(), CudaError> {
            // SAFETY: field f of the half (hstride) and real (rstride) buffers.
            unsafe {
                t.yz_inverse(
                    half + f * t.hstride() as u64 * C16,
                    real + f * t.rstride() as u64 * 8,
                )
            }
        };
        if self.exchange_chunk > 0 {
            // A chunk's transpose runs while the next chunk is transformed along x, and the
            // (y, z) transforms of a chunk start as soon as its transpose is in.
            let chunks = field_chunks(count, self.exchange_chunk);
            let mut pending = Vec::with_capacity(chunks.len());
            for c in &chunks {
                for f in c.clone() {
                    x_inverse(f as u64)?;
                }
                pending.push(self.transpose_beside(t, c.clone(), true)?);
            }
            for (c, p) in chunks.into_iter().zip(pending) {
                self.comm.join(p)?;
                unpack(c.start as u64, c.len() as i32)?;
                for f in c {
                    yz_inverse(f as u64)?;
                }
            }
        } else {
            for f in 0..count as u64 {
                x_inverse(f)?;
            }
            self.transpose(t, count, true)?;
            unpack(0, count_i)?;
            for f in 0..count as u64 {
                yz_inverse(f)?;
            }
        }
        Ok(())
    }

    /// Queues one right-hand side N(input) and the store of `stage` (module docs).
    fn rhs(&mut self, input: Input, stage: i32, dt: f64) -> Result<(), CudaError> {
        let src = match input {
            Input::State => self.mode(UHAT),
            Input::StageA => self.mode(STAGE_A),
            Input::StageB => self.mode(STAGE_B),
        };
        let t = &self.product;
        self.to_physical(t, src, &[0, 1, 2, 4, 5, 6])?;
        let s = &t.slabs;
        let word = if stage == 1 { W_SPEED } else { W_STAGE_SPEED };
        self.zero_word(word)?;
        let speed = self.word(word);
        let (real, half, pen) = (
            self.addr(&self.real),
            self.addr(&self.half),
            self.addr(&self.pen),
        );
        let (n3, rs) = (t.rstride() as i64, t.rstride() as i64);
        // SAFETY: sp_cross(double* r, long long n3, long long rs, unsigned long long* speed_max):
        // six real fields of rs f64 (the slab's planes), one word; blockDim = SP_THREADS.
        launch!(self.stream, &self.k.sp_cross, "sp_cross", cfg_for(t.rstride()); &real, &n3, &rs, &speed)?;
        let (mi, kmax) = (s.m as i32, s.kmax as i32);
        let ps = t.pstride() as u64;
        // Field f's half spectra from its real values, packed into its exchange area (all
        // `fields` from f on when more than one).
        let yz_forward = |f: u64| -> Result<(), CudaError> {
            // SAFETY: field f of the real and half buffers.
            unsafe {
                t.yz_forward(
                    real + f * t.rstride() as u64 * 8,
                    half + f * t.hstride() as u64 * C16,
                )
            }
        };
        let pack = |f: u64, fields: i32| self.halves(t, f, fields, false);
        let x_forward = |f: u64| -> Result<(), CudaError> {
            // SAFETY: field f of the pencil buffer.
            unsafe { t.x(pen + f * ps * C16, FftDirection::Forward) }
        };
        if self.exchange_chunk > 0 {
            // A chunk's transpose back runs while the next chunk is transformed along (y, z)
            // and packed, and the x transforms of a chunk start as soon as it is back.
            let chunks = field_chunks(3, self.exchange_chunk);
            let mut pending = Vec::with_capacity(chunks.len());
            for c in &chunks {
                for f in c.clone() {
                    yz_forward(f as u64)?;
                }
                pack(c.start as u64, c.len() as i32)?;
                pending.push(self.transpose_beside(t, c.clone(), false)?);
            }
            for (c, p) in chunks.into_iter().zip(pending) {
                self.comm.join(p)?;
                for f in c {
                    x_forward(f as u64)?;
                }
            }
        } else {
            for f in 0..3u64 {
                yz_forward(f)?;
            }
            pack(0, 3)?;
            self.transpose(t, 3, false)?;
            for f in 0..3u64 {
                x_forward(f)?;
            }
        }
        let len = s.local_len(self.rank) as i64;
        let nzl = s.nz_local(self.rank) as i32;
        let kz0 = s.kz_range(self.rank).start as i32;
        let scale = 1.0 / (s.m as f64).powi(3);
        let (uh, k1, acc, sa, sb) = (
            self.mode(UHAT),
            self.mode(K1),
            self.mode(ACC),
            self.mode(STAGE_A),
            self.mode(STAGE_B),
        );
        let (ps_i, nu) = (ps as i64, self.nu);
        // SAFETY: sps_store(const double2* pen, long long pstride, int m, int nzl, int kz0,
        // double scale, int kmax, long long len, int stage, double nu, double dt, const double2*
        // uh, double2* k1, double2* acc, double2* sa, double2* sb): three pencil fields, five
        // local mode buffers of 3·len double2.
        launch!(self.stream, &self.k.store, "sps_store", cfg_for(len as usize);
            &pen, &ps_i, &mi, &nzl, &kz0, &scale, &kmax, &len, &stage, &nu, &dt, &uh, &k1,
            &acc, &sa, &sb)
        .map(drop)
    }

    /// N(û) at the current state into K1 and its speed into W_SPEED (queued once per state).
    fn ensure_k1(&mut self) -> Result<(), CudaError> {
        if self.k1_valid {
            return Ok(());
        }
        self.rhs(Input::State, 1, 0.0)?;
        self.k1_valid = true;
        Ok(())
    }

    /// Bytes of rank r's local modes (3 components).
    fn part_bytes(&self, r: usize) -> usize {
        3 * self.product.slabs.local_len(r) * 16
    }

    /// Where rank r's part starts in rank 0's staging area (bytes).
    fn part_offset(&self, r: usize) -> u64 {
        (0..r).map(|p| self.part_bytes(p) as u64).sum()
    }

    /// Rank 0's staging area of `len` f64 for scatters and gathers: the half spectra (scratch
    /// outside a step) when they hold it, else a buffer of its own.
    fn staging(&mut self, len: usize) -> Result<&mut DeviceBuffer<f64>, CudaError> {
        if self.half.capacity() >= len {
            return Ok(&mut self.half);
        }
        self.staging.ensure(&self.stream, len)?;
        Ok(&mut self.staging)
    }

    /// The transfers between rank 0's staging area at `st` (every rank's part at
    /// part_offset) and the local modes at `mine` (part_bytes of this rank): to the ranks
    /// (`scatter`) or back.
    fn root_transfers(&self, mine: u64, st: u64, scatter: bool) -> Vec<Transfer> {
        let own = (mine, self.part_bytes(self.rank));
        let pair = |staged: (u64, usize), local: (u64, usize)| {
            if scatter {
                (staged, local)
            } else {
                (local, staged)
            }
        };
        if self.rank != 0 {
            let (send, recv) = pair((0, 0), own);
            return vec![Transfer {
                peer: 0,
                send,
                recv,
            }];
        }
        (0..self.product.slabs.ranks)
            .map(|r| {
                let staged = (st + self.part_offset(r), self.part_bytes(r));
                let local = if r == 0 { own } else { (0, 0) };
                let (send, recv) = pair(staged, local);
                Transfer {
                    peer: r,
                    send,
                    recv,
                }
            })
            .collect()
    }

    /// Sets the state from the global field rank 0 holds (`Some` on rank 0, `None` elsewhere),
    /// exactly as given (the caller projects first): each rank receives its k_z range.
    pub fn scatter_modes(&mut self, global: Option<&VectorModes>) -> Result<(), SpectralError> {
        let s = self.product.slabs;
        let uh = self.mode(UHAT);
        let mut st = 0;
        if self.rank == 0 {
            let g = global.ok_or_else(|| invalid("scatter_modes: rank 0 must hold the field"))?;
            let len = self.layout.len();
            if g.iter().any(|c| c.len() != len) {
                return Err(invalid(format!(
                    "scatter_modes: the field holds {} modes per component, the grid {len}",
                    g[0].len()
                )));
            }
            let mut flat = Vec::with_capacity(6 * len);
            for r in 0..s.ranks {
                for c in s.local_modes(r, g) {
                    flat.extend(c.iter().flat_map(|z| [z.re, z.im]));
                }
            }
            let stream = self.stream.clone();
            let area = self.staging(flat.len())?;
            area.upload(&stream, &flat, "the spectral state")?;
            st = area.addr(&stream);
        }
        let list = self.root_transfers(uh, st, true);
        // SAFETY: rank 0's staging holds every part (uploaded above), each rank's uhat its
        // own part (3·local_len); sizes agree pairwise (part_bytes(r) both ways).
        unsafe { self.comm.exchange("scattering the modes", &list)? };
        self.comm.wait("scattering the modes")?;
        self.state_changed();
        Ok(())
    }

    /// The global state gathered on rank 0 (`Some` there, `None` elsewhere).
    pub fn gather_modes(&mut self) -> Result<Option<VectorModes>, SpectralError> {
        let uh = self.mode(UHAT);
        self.gather_local(uh, "gathering the modes")
    }

    /// The projected nonlinear term N(û) = P F[u × ω] at the current state (the first stage of
    /// the next step) gathered on rank 0 (`Some` there): for comparing the distributed
    /// transforms with another solver's (`SpectralSolver::rhs_at_current`).
    pub fn rhs_modes(&mut self) -> Result<Option<VectorModes>, SpectralError> {
        self.ensure_k1()?;
        let k1 = self.mode(K1);
        self.gather_local(k1, "gathering the right-hand side")
    }

    /// The local modes at `src` (3·local_len) of every rank, assembled on rank 0.
    fn gather_local(&mut self, src: u64, what: &str) -> Result<Option<VectorModes>, SpectralError> {
        let s = self.product.slabs;
        let total: usize = (0..s.ranks).map(|r| self.part_bytes(r)).sum();
        let stream = self.stream.clone();
        let st = if self.rank == 0 {
            self.staging(total / 8)?.addr(&stream)
        } else {
            0
        };
        let list = self.root_transfers(src, st, false);
        // SAFETY: `src` holds this rank's 3·local_len modes, rank 0's staging every part
        // (ensured above); sizes agree pairwise (part_bytes(r) both ways).
        unsafe { self.comm.exchange(what, &list)? };
        self.comm.wait(what)?;
        if self.rank != 0 {
            return Ok(None);
        }
        let mut flat = vec![0.0; total / 8];
        let gpu = self.gpu.clone();
        self.staging(total / 8)?.download(&gpu, &mut flat, what)?;
        let mut parts = Vec::with_capacity(s.ranks);
        let mut at = 0;
        for r in 0..s.ranks {
            let l = s.local_len(r);
            let part: VectorModes = std::array::from_fn(|c| {
                let b = at + 2 * c * l;
                (0..l)
                    .map(|i| Complex64::new(flat[b + 2 * i], flat[b + 2 * i + 1]))
                    .collect()
            });
            at += 6 * l;
            parts.push(part);
        }
        Ok(Some(s.global_modes(&parts)))
    }

    /// Test hook for the transpose: uploads `pencil` (this rank's `fields` pencil fields of
    /// the product grid, pencil_len each) into the pencil buffer, poisons the exchange buffer
    /// (NaN), transposes to the slabs and downloads the exchange fields; then poisons the
    /// pencil buffer, transposes back and downloads it. Returns (exchange, pencil after the
    /// round trip). Leaves the scratch buffers overwritten (the state is untouched).
    #[doc(hidden)]
    pub fn transpose_probe(
        &mut self,
        pencil: &[Complex64],
        fields: usize,
    ) -> Result<(Vec<Complex64>, Vec<Complex64>), SpectralError> {
        let ps = self.product.pstride();
        if !(1..=6).contains(&fields) || pencil.len() != fields * ps {
            return Err(invalid(format!(
                "transpose_probe: {} values for {fields} fields of {ps}",
                pencil.len()
            )));
        }
        let flat: Vec<cufft_sys::double2> = pencil
            .iter()
            .map(|z| cufft_sys::double2 { x: z.re, y: z.im })
            .collect();
        self.pen
            .upload(&self.stream, &flat, "the probe's pencils")?;
        let ex = self.probe_leg(fields, true)?;
        let back = self.probe_leg(fields, false)?;
        Ok((ex, back))
    }

    /// One leg of [`SlabRank::transpose_probe`]: the receiving buffer poisoned, the transpose,
    /// its first `fields` fields read back.
    fn probe_leg(
        &mut self,
        fields: usize,
        to_slabs: bool,
    ) -> Result<Vec<Complex64>, SpectralError> {
        let n = if to_slabs {
            self.product.estride()
        } else {
            self.product.pstride()
        };
        let target = if to_slabs {
            &mut self.ex
        } else {
            &mut self.pen
        };
        target.poison(&self.stream, 6 * n)?;
        self.transpose(&self.product, fields, to_slabs)?;
        self.comm.wait("the probe's transpose")?;
        let target = if to_slabs { &self.ex } else { &self.pen };
        let mut out = vec![cufft_sys::double2 { x: 0.0, y: 0.0 }; fields * n];
        target.download(&self.gpu, &mut out, "the probe's transpose")?;
        Ok(out.into_iter().map(|z| Complex64::new(z.x, z.y)).collect())
    }

    /// max(|u| + |v| + |w|) over the product grid at the current state (all ranks).
    pub fn speed_sum_max(&mut self) -> Result<f64, SpectralError> {
        if let Some(v) = self.speed {
            return Ok(v);
        }
        self.ensure_k1()?;
        // SAFETY: the speed word.
        unsafe {
            self.comm
                .all_reduce_max_u64("the speed maximum", self.word(W_SPEED), 1)?
        };
        let w = self.read_words("the speed maximum")?;
        let v = f64::from_bits(w[W_SPEED]);
        self.speed = Some(v);
        Ok(v)
    }

    /// One Lawson RK4 step; a non-finite result (on any rank) is not committed on any rank.
    pub fn step(&mut self, dt: f64) -> Result<(), SpectralError> {
        self.ensure_k1()?;
        let s = self.product.slabs;
        let len = s.local_len(self.rank) as i64;
        let nzl = s.nz_local(self.rank) as i32;
        let kz0 = s.kz_range(self.rank).start as i32;
        let kmax = s.kmax as i32;
        let nu = self.nu;
        let (uh, k1, acc, sa) = (
            self.mode(UHAT),
            self.mode(K1),
            self.mode(ACC),
            self.mode(STAGE_A),
        );
        // SAFETY: sps_rk_begin(const double2* uh, const double2* k1, double2* acc, double2* sa,
        // long long len, int kmax, int nzl, int kz0, double nu, double dt): four local mode
        // buffers of 3·len double2.
        launch!(self.stream, &self.k.rk_begin, "sps_rk_begin", cfg_for(len as usize);
            &uh, &k1, &acc, &sa, &len, &kmax, &nzl, &kz0, &nu, &dt)?;
        self.rhs(Input::StageA, 2, dt)?;
        self.rhs(Input::StageB, 3, dt)?;
        self.rhs(Input::StageA, 4, dt)?;
        if self.rank == 0 {
            let side = s.side();
            let herm = LaunchConfig {
                grid_dim: ((side * side).div_ceil(THREADS as usize) as u32, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: sps_hermitian(double2* v, long long len, int kmax, int nzl): acc holds
            // 3·len double2 of rank 0, whose first k_z is 0; one thread per (iy, ix).
            launch!(self.stream, &self.k.hermitian, "sps_hermitian", herm; &acc, &len, &kmax, &nzl)?;
        }
        self.zero_word(W_FLAG)?;
        let (n, flag) = (6 * len, self.word(W_FLAG));
        // SAFETY: sp_nonfinite(const double* v, long long n, unsigned int* flag): acc holds
        // 3·len double2 = 6·len doubles; flag is the low half of a zeroed u64 word.
        launch!(self.stream, &self.k.sp_nonfinite, "sp_nonfinite", cfg_for(n as usize); &acc, &n, &flag)?;
        // SAFETY: the flag word.
        unsafe { self.comm.all_reduce_max_u64("the finite flag", flag, 1)? };
        let w = self.read_words("the step")?;
        if w[W_FLAG] != 0 {
            return Err(NonFiniteState.into());
        }
        self.modes.swap(UHAT, ACC);
        self.state_changed();
        Ok(())
    }

    /// The mode sums and spectrum of the current state (all ranks).
    pub fn sums(&mut self) -> Result<SlabSums, SpectralError> {
        if let Some(s) = &self.sums {
            return Ok(s.clone());
        }
        self.ensure_k1()?;
        let s = self.product.slabs;
        let side = s.side();
        let nshell = shell_count(&self.layout);
        let rows = side * (4 + nshell);
        let len = s.local_len(self.rank) as i64;
        let nzl = s.nz_local(self.rank) as i32;
        let kz0 = s.kz_range(self.rank).start as i32;
        let (kmax, nu, nshell_i) = (s.kmax as i32, self.nu, nshell as i32);
        let (u, k1) = (self.mode(UHAT), self.mode(K1));
        let sc = self.addr(&self.partials);
        let sh = sc + 4 * side as u64 * 8;
        let cfg = LaunchConfig {
            grid_dim: (side as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: sps_mode_sums(const double2* u, const double2* k1, long long len, int kmax,
        // int nzl, int kz0, double nu, int nshell, double* scalars, double* shells): u and k1
        // 3·len double2; scalars 4·side and shells side·nshell doubles (the partials buffer,
        // sized in `new`); one block per row, side ≤ 4·SP_THREADS (checked in `new`).
        launch!(self.stream, &self.k.mode_sums, "sps_mode_sums", cfg;
            &u, &k1, &len, &kmax, &nzl, &kz0, &nu, &nshell_i, &sc, &sh)?;
        let all = self.addr(&self.gathered);
        // SAFETY: partials holds `rows` f64, gathered ranks·rows.
        unsafe { self.comm.all_gather_f64("the mode sums", sc, all, rows)? };
        self.comm.wait("the mode sums")?;
        let mut host = vec![0.0; s.ranks * rows];
        self.gathered
            .download(&self.gpu, &mut host, "the mode sums")?;
        let mut sums = [0.0; 4];
        let mut spectrum = vec![0.0; nshell];
        // Rank by rank, row by row: the same order on every rank.
        for part in host.chunks_exact(rows) {
            let (scalars, shells) = part.split_at(4 * side);
            for row in scalars.chunks_exact(4) {
                for (a, b) in sums.iter_mut().zip(row) {
                    *a += b;
                }
            }
            for row in shells.chunks_exact(nshell) {
                for (a, b) in spectrum.iter_mut().zip(row) {
                    *a += b;
                }
            }
        }
        let r = SlabSums { sums, spectrum };
        self.sums = Some(r.clone());
        Ok(r)
    }

    /// A maximum over the N³ nodes (all ranks).
    fn grid_max(&mut self, which: GridMax) -> Result<f64, SpectralError> {
        let t = self.solution_transforms();
        let u = self.mode(UHAT);
        let quantities: &[i32] = match which {
            GridMax::Divergence => &[3],
            GridMax::Vorticity => &[4, 5, 6],
        };
        self.to_physical(t, u, quantities)?;
        self.zero_word(W_GRID)?;
        let (real, out) = (self.addr(&self.real), self.word(W_GRID));
        let (n, rs) = (t.rstride() as i64, t.rstride() as i64);
        match which {
            // SAFETY: sp_max_abs(const double* r, long long n, unsigned long long* out): the
            // first real field (n = the slab's nodes), one word; blockDim = SP_THREADS.
            GridMax::Divergence => {
                launch!(self.stream, &self.k.sp_max_abs, "sp_max_abs", cfg_for(n as usize);
                    &real, &n, &out)?;
            }
            // SAFETY: sp_max_norm2(const double* r, long long n, long long rs, unsigned long
            // long* out): three real fields rs apart.
            GridMax::Vorticity => {
                launch!(self.stream, &self.k.sp_max_norm2, "sp_max_norm2", cfg_for(n as usize);
                    &real, &n, &rs, &out)?;
            }
        }
        // SAFETY: the grid word.
        unsafe { self.comm.all_reduce_max_u64("a grid maximum", out, 1)? };
        let v = f64::from_bits(self.read_words("a grid maximum")?[W_GRID]);
        Ok(match which {
            GridMax::Divergence => v,
            GridMax::Vorticity => v.sqrt(),
        })
    }

    /// max |∇·u| over the N³ nodes (all ranks).
    pub fn max_divergence(&mut self) -> Result<f64, SpectralError> {
        self.grid_max(GridMax::Divergence)
    }
    /// max |ω| over the N³ nodes (all ranks).
    pub fn max_vorticity(&mut self) -> Result<f64, SpectralError> {
        self.grid_max(GridMax::Vorticity)
    }

    /// The velocity on the N³ grid gathered on rank 0 (`Some` there), `[i][j][k]` order.
    pub fn velocity_on_grid(&mut self) -> Result<Option<[Vec<f64>; 3]>, SpectralError> {
        let t = self.solution_transforms();
        let u = self.mode(UHAT);
        self.to_physical(t, u, &[0, 1, 2])?;
        let n = self.grid.n;
        let n3 = n * n * n;
        let slab = t.rstride();
        let bytes = slab * 8;
        let real = self.addr(&self.real);
        let ranks = t.slabs.ranks;
        let (stream, gpu) = (self.stream.clone(), self.gpu.clone());
        let mut out: [Vec<f64>; 3] = Default::default();
        // One component at a time (the staging area holds N³ values).
        for (c, out) in out.iter_mut().enumerate() {
            let mine = (real + (c * bytes) as u64, bytes);
            let list: Vec<Transfer> = if self.rank == 0 {
                let st = self.staging(n3)?.addr(&stream);
                (0..ranks)
                    .map(|q| Transfer {
                        peer: q,
                        send: if q == 0 { mine } else { (0, 0) },
                        recv: (st + (q * bytes) as u64, bytes),
                    })
                    .collect()
            } else {
                vec![Transfer {
                    peer: 0,
                    send: mine,
                    recv: (0, 0),
                }]
            };
            // SAFETY: every rank's real buffer holds three fields of `slab` f64 of the N grid
            // (component c at c·slab); rank 0's staging area N³ f64, rank q's slab at q·slab
            // (the x planes of rank q follow those of q − 1: the global [i][j][k] order).
            unsafe { self.comm.exchange("gathering the velocity", &list)? };
            self.comm.wait("gathering the velocity")?;
            if self.rank == 0 {
                out.resize(n3, 0.0);
                self.staging(n3)?
                    .download(&gpu, out, "the velocity on the grid")?;
            }
        }
        Ok((self.rank == 0).then_some(out))
    }

    /// Median ms of one all-to-all transpose of `fields` fields (both directions averaged)
    /// over `repeats`, and the bytes each rank sends to the others in one.
    pub fn time_transpose(
        &mut self,
        fields: usize,
        repeats: usize,
    ) -> Result<(f64, u64), SpectralError> {
        if !(1..=6).contains(&fields) {
            return Err(invalid(format!(
                "time_transpose: {fields} fields (1 to 6 allowed)"
            )));
        }
        let s = self.product.slabs;
        let sent = (0..s.ranks)
            .filter(|&q| q != self.rank)
            .map(|_| s.chunk_len(self.rank) as u64 * C16)
            .sum::<u64>()
            * fields as u64;
        // One warm-up pair, then a barrier so that every rank starts together.
        let pair = |r: &mut Self| -> Result<(), SpectralError> {
            r.transpose(&r.product, fields, true)?;
            Ok(r.transpose(&r.product, fields, false)?)
        };
        pair(self)?;
        self.barrier()?;
        let mut ms: Vec<f64> = self.timed(repeats, pair)?.iter().map(|t| t / 2.0).collect();
        // The scratch buffers were overwritten: the next right-hand side rewrites them all.
        ms.sort_by(f64::total_cmp);
        Ok((ms[ms.len() / 2], sent))
    }

    /// Transposes `fields` fields at a time (1 to 6) on the GPU's exchange stream, beside the
    /// transforms of the next ones, or with 0 every pass's fields in one group on the main
    /// stream, between the transforms (the default is [`DEFAULT_EXCHANGE_CHUNK`]). Every
    /// field sees the same operations either way, so the results are the same to the bit;
    /// only the time differs (`vpm bench spectral` times each).
    pub fn set_exchange_chunk(&mut self, fields: usize) {
        self.exchange_chunk = fields.min(6);
    }

    /// Milliseconds (events on rank 0's stream, after a barrier) of each of `repeats` steps
    /// after one warm-up; the state advances.
    pub fn time_steps(&mut self, dt: f64, repeats: usize) -> Result<Vec<f64>, SpectralError> {
        self.step(dt)?;
        self.barrier()?;
        self.timed(repeats, |r| r.step(dt))
    }

    /// Milliseconds (events on this rank's stream) of each of `repeats` runs of `body`, each
    /// waited for (abortably) before it is read.
    fn timed(
        &mut self,
        repeats: usize,
        mut body: impl FnMut(&mut Self) -> Result<(), SpectralError>,
    ) -> Result<Vec<f64>, SpectralError> {
        let (start, stop) = (self.gpu.event()?, self.gpu.event()?);
        let mut out = Vec::with_capacity(repeats.max(1));
        for _ in 0..repeats.max(1) {
            start.record(&self.stream).doing("recording an event")?;
            body(self)?;
            stop.record(&self.stream).doing("recording an event")?;
            self.comm.wait("a timed run")?;
            out.push(self.gpu.elapsed_ms(&start, &stop, "a timed run")? as f64);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_chunks_cover_every_field_once_in_order() {
        assert_eq!(
            field_chunks(6, 1),
            (0..6).map(|f| f..f + 1).collect::<Vec<_>>()
        );
        assert_eq!(field_chunks(6, 4), vec![0..4, 4..6]);
        assert_eq!(field_chunks(3, 2), vec![0..2, 2..3]);
        assert_eq!(field_chunks(3, 6), vec![0..3]);
        assert_eq!(field_chunks(3, 0), field_chunks(3, 1));
    }

    #[test]
    fn quantity_codes_pack_four_bits_per_field() {
        assert_eq!(codes(&[0, 1, 2, 4, 5, 6]), 0x654210);
        assert_eq!(codes(&[3]), 3);
        assert_eq!(codes(&[4, 5, 6]), 0x654);
    }

    #[test]
    fn device_bytes_grow_with_the_grid_and_shrink_with_the_ranks() {
        use super::super::solver::Dealias;
        let g = SpectralGrid::new(128, Dealias::TwoThirds);
        let (one, two, four) = (
            SlabRank::device_bytes(g, 1),
            SlabRank::device_bytes(g, 2),
            SlabRank::device_bytes(g, 4),
        );
        assert!(one > two && two > four, "{one} {two} {four}");
        let big = SpectralGrid::new(256, Dealias::TwoThirds);
        assert!(SlabRank::device_bytes(big, 4) > four);
        // 3/2 with n not a multiple of the ranks: the one-GPU figure (the split is refused).
        let bad = SpectralGrid::new(16, Dealias::ThreeHalves);
        assert_eq!(
            SlabRank::device_bytes(bad, 3),
            super::super::gpu::GpuSpectralSolver::device_bytes(bad)
        );
        assert!(layouts(bad, 3)
            .unwrap_err()
            .contains("multiple of the number of GPUs"));
    }
}
