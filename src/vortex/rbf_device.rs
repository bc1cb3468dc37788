//! The solves of reinitialisation on the GPU, in f64 (docs/physics.md §3.3 and §3.7, with the
//! conditioning of §3.5): the device form of [`super::solve_strengths`] with
//! [`super::RbfSolver::Exact`] and [`super::RbfSolver::Spectral`], for a particle stepper whose
//! particles or lattice vorticity already live on the GPU. The exact solve is described below;
//! the spectral one takes the band |q_d| ≤ n/2 of the blob field's spectrum and divides by the
//! band's Gaussian ĝ instead of ĉ, in the same pass. The band comes from the particles
//! themselves by the non-uniform FFT of [`super::lattice_modes`]
//! ([`DeviceRbfSolver::queue_band_modes`]: `kernels/lattice_modes.cu`, a cost independent
//! of the cores), or from ω sampled on a finer m³ lattice ([`DeviceRbfSolver::solve`]:
//! `lm_band` of that file on its spectrum; unequal cores). Kernels: `kernels/lattice.cu`,
//! `kernels/lattice_modes.cu`; transforms: cuFFT (D2Z and Z2D, batched over the three
//! components, plans kept per size), all on the GPU's one stream ([`Gpu::stream`]):
//! [`DeviceRbfSolver::solve`] only queues (the host does not wait), and the report is read
//! when asked for ([`DeviceRbfSolver::report`], one small copy).
//!
//! On the n³ lattice (nodes x_i = −π + i·h, h = 2π/n, [`super::lattice_nodes`] order) the
//! strengths β solve Σ_j β_j ζ_σ0(x_i − x_j) = ω'_i, ω' the lattice vorticity ω conditioned as
//! §3.5 asks. In the lattice spectrum ω̂(q) = n⁻³ Σ_i ω_i e^{−2πi m·i/n} (DFT convention, q the
//! signed integer wavenumber of the DFT index m) this is one pass (reinit.rs
//! `condition_and_solve_exact`):
//!
//!   β̂(q) = F(q) P(q) ω̂(q) / ŝ(q),   P(q) ω̂ = ω̂ − q (q·ω̂)/|q|²  (q ≠ 0, when solenoidal),
//!   F(q) = f(q_x) f(q_y) f(q_z) (the filter),   ŝ(q) = ĉ(m_x) ĉ(m_y) ĉ(m_z),
//!
//! ĉ the DFT of the 1-D periodised Gaussian circulant ([`LatticeGaussian::spectrum`]).
//!
//! What reproduces the CPU to round-off:
//! - **Wavenumbers.** DFT index d ↦ d for d ≤ n/2, d − n above (rbf.rs `signed_wavenumber`): a
//!   Nyquist index n/2 (even n) is +n/2 wherever it appears. The CPU conditions all n³ modes of
//!   the full complex spectrum, each with its own q, and keeps the real part of the inverse
//!   transform. The mirror −m of a mode with a Nyquist component does not have wavenumber −q,
//!   so the projected spectrum is not Hermitian there and the real part averages the two. The
//!   half spectrum here stores β̂(m) = ½[M(q_m) + M(q_{−m})] ω̂(m), with M the per-mode operator
//!   above: that is the Hermitian part the CPU's real part keeps (`kernels/lattice.cu` gives the
//!   derivation), exact off the Nyquist planes, where the two terms are equal.
//! - **Report.** Σ|ω̂|², Σ|q·ω̂|²/|q|² and Σ(1 − F²)|Pω̂|² over all n³ modes as the CPU sums them:
//!   stored modes of the planes m_z = 0 and (even n) m_z = n/2, whose mirrors are stored too,
//!   count once; every other stored mode counts for itself (q_m) and for its unstored mirror
//!   (q_{−m}, the same |ω̂|²). The sums are per-block partials over a fixed grid with a fixed
//!   tree in each block, added on the host in block order: two solves of the same input are
//!   bit-identical. They stay on the device until [`DeviceRbfSolver::report`] reads them.
//! - **Tables.** ĉ(d) is [`LatticeGaussian::spectrum`] itself, f(d) is
//!   [`LatticeFilter::factor`] at (q_d, 0, 0) (the filter is a product over axes and its factor
//!   at 0 is exactly 1), both computed on the host by the CPU's code and uploaded once per
//!   (n, σ0) and (n, filter); the kernel forms F and ŝ as the same products in the same order.
//! - **Σβ = 0.** By the k = 0 mode: with `zero_total` the kernel sets β̂(0) = 0, which is
//!   subtracting the mean of each component after the inverse transform (the CPU's way), since
//!   the mean of the inverse transform is β̂(0) exactly. The report is unaffected (as on the CPU,
//!   it describes the vorticity before the solve).

use super::lattice_modes::{self, ModesPlan};
use super::rbf::{signed_wavenumber, LatticeGaussian};
use super::reinit::{band_gaussian_symbol, ConditioningReport, LatticeConditioning, LatticeFilter};
use super::RbfSolver;
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{
    cufft_available, fft_plan, fft_work_bytes, half_spectrum_len, kernel_source, launch,
    load_kernels, CudaError, Doing, FftLayout, Gpu, KernelSource,
};
use crate::device::sort::{cfg_items, DeviceSort};
use cudarc::cufft::{result as cufft_result, sys as cufft_sys, CudaFft};
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// The family (no headers).
pub const KERNELS: KernelSource = kernel_source!("lattice.cu");
/// The band modes by non-uniform FFT ([`super::lattice_modes`]; no headers, no options).
pub const MODE_KERNELS: KernelSource = kernel_source!("lattice_modes.cu");
/// Threads per block of `lm_spread` (LM_THREADS = LM_TILE²).
const SPREAD_THREADS: u32 = (lattice_modes::TILE * lattice_modes::TILE) as u32;

/// Threads per block of `lat_condition` (`LAT_THREADS` in lattice.cu).
const THREADS: u32 = 256;
/// Most blocks of `lat_condition` (the threads stride over the modes beyond); the grid depends
/// on n alone, so the partial sums do too.
const MAX_BLOCKS: usize = 1024;

/// A cuFFT plan for one lattice or mesh size, with the work area cuFFT allocated for it.
struct Plan {
    /// Points per direction.
    size: usize,
    fft: CudaFft,
    work_bytes: u64,
}

/// The cuFFT plans of the solver, each made for the last size asked.
#[derive(Default)]
struct Plans {
    /// 3 half spectra → node-major β (stride 3) on the n³ particle lattice.
    z2d: Option<Plan>,
    /// Node-major ω on the m³ lattice (stride 3, one batch per component) → 3 half spectra.
    d2z: Option<Plan>,
    /// The non-uniform FFT's mesh, 3 components in cuFFT's in-place real layout → 3 half
    /// spectra in place.
    mesh: Option<Plan>,
}

impl Plans {
    fn work_bytes(&self) -> u64 {
        [&self.z2d, &self.d2z, &self.mesh]
            .iter()
            .map(|p| p.as_ref().map_or(0, |p| p.work_bytes))
            .sum()
    }
}

/// The kernels of `kernels/lattice_modes.cu`.
struct ModeKernels {
    keys: CudaFunction,
    permute: CudaFunction,
    spread: CudaFunction,
    band: CudaFunction,
}

/// Particles on the solver's GPU whose band modes [`DeviceRbfSolver::queue_band_modes`]
/// computes: positions and strengths (3 f64 each per particle, node-major), one core radius.
#[derive(Clone, Copy)]
pub struct DeviceBlobs<'a> {
    pub x: &'a DeviceBuffer<f64>,
    pub alpha: &'a DeviceBuffer<f64>,
    /// The number of particles.
    pub count: usize,
    /// The core radius σ of every particle.
    pub sigma: f64,
}

/// The buffers of the non-uniform FFT (grow only).
#[derive(Default)]
struct ModeBuffers {
    /// The window rule's plan for (n, σ0 bits).
    plan: Option<(usize, u64, ModesPlan)>,
    /// The deconvolution table uploaded for (n, σ0 bits, σ bits).
    factors_key: Option<(usize, u64, u64)>,
    factors: DeviceBuffer<f64>,
    mesh: DeviceBuffer<f64>,
    keys: DeviceBuffer<u64>,
    order: DeviceBuffer<u32>,
    starts: DeviceBuffer<i32>,
    pos: DeviceBuffer<f64>,
    alpha: DeviceBuffer<f64>,
}

impl ModeBuffers {
    /// The buffers' bytes, with the sort's scratch copies of the keys and the order.
    fn bytes(&self) -> u64 {
        8 * (self.factors.capacity()
            + self.mesh.capacity()
            + 2 * self.keys.capacity()
            + self.pos.capacity()
            + self.alpha.capacity()) as u64
            + 4 * (2 * self.order.capacity() + self.starts.capacity()) as u64
    }
}

/// The exact RBF solve of reinitialisation on one GPU stream (see the module docs): resident
/// buffers (grow only), cuFFT plans per lattice size, the symbol and filter tables per (n, σ0)
/// and (n, filter).
pub struct DeviceRbfSolver {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    condition: CudaFunction,
    modes: ModeKernels,
    /// The particle sort of the non-uniform FFT (made at its first use).
    sort: Option<DeviceSort>,
    mode_buffers: ModeBuffers,
    plans: Plans,
    /// (n, σ0 bits, spectral) of the symbol on the device: ĉ for interpolation, the band's
    /// Gaussian ĝ for the spectral solve.
    symbol_key: Option<(usize, u64, bool)>,
    /// (n, filter) of the filter table on the device.
    filter_key: Option<(usize, LatticeFilter)>,
    sym: DeviceBuffer<f64>,
    filt: DeviceBuffer<f64>,
    spec: DeviceBuffer<cufft_sys::double2>,
    /// The half spectra on the sampling lattice (spectral solve on a finer lattice only).
    fine: DeviceBuffer<cufft_sys::double2>,
    partials: DeviceBuffer<f64>,
    host_partials: Vec<f64>,
    /// A solve has succeeded (every buffer is allocated).
    solved: bool,
}

impl std::fmt::Debug for DeviceRbfSolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceRbfSolver")
            .field("gpu", &self.gpu.info().name)
            .field("lattice", &self.plans.z2d.as_ref().map(|p| p.size))
            .finish()
    }
}

/// Blocks of `lat_condition` for lattice n (a function of n alone).
fn blocks(n: usize) -> usize {
    half_spectrum_len(n)
        .div_ceil(THREADS as usize)
        .clamp(1, MAX_BLOCKS)
}

impl DeviceRbfSolver {
    /// Compiles (once per process and GPU) and loads the kernel on `gpu`; every transform,
    /// launch and copy of [`DeviceRbfSolver::solve`] is queued on `gpu`'s stream. Fails when cuFFT
    /// cannot be loaded.
    pub fn new(gpu: Arc<Gpu>) -> Result<Self, CudaError> {
        cufft_available()?;
        let stream = gpu.stream().clone();
        let module = gpu.module_from(&KERNELS, &[])?;
        let condition = module.function("lat_condition")?;
        let mode_module = gpu.module_from(&MODE_KERNELS, &[])?;
        let modes = load_kernels!(
            mode_module,
            "lm_",
            ModeKernels {
                keys,
                permute,
                spread,
                band
            }
        );
        Ok(DeviceRbfSolver {
            gpu,
            stream,
            condition,
            modes,
            sort: None,
            mode_buffers: ModeBuffers::default(),
            plans: Plans::default(),
            symbol_key: None,
            filter_key: None,
            sym: DeviceBuffer::new(),
            filt: DeviceBuffer::new(),
            spec: DeviceBuffer::new(),
            fine: DeviceBuffer::new(),
            partials: DeviceBuffer::new(),
            host_partials: Vec::new(),
            solved: false,
        })
    }

    /// The stream every phase runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Device memory that [`DeviceRbfSolver::solve`] allocates for particle lattice `n` and
    /// sampling lattice `m`, in bytes: the three half spectra (3·n²·(n/2 + 1) complex f64, and
    /// 3·m²·(m/2 + 1) more when m ≠ n), the strengths it writes (3·n³ f64, the caller's
    /// `alpha_out`, sized by `solve`), the 1-D tables and the block partials, and an allowance
    /// for cuFFT of half the spectra plus 64 MiB. The input ω (3·m³ f64) is the caller's and not
    /// counted. Measured on an H100 (libcufft.so.12 of CUDA 13.0) at n = 128,
    /// 200, 256, 384 and 512: cuFFT reported no work area for these out-of-place plans, and the
    /// driver saw at most 33 MB beyond the buffers (tests/gpu_rbf.rs prints both).
    pub fn device_bytes(n: usize, m: usize) -> u64 {
        let n64 = n as u64;
        let fine = if m == n {
            0
        } else {
            3 * half_spectrum_len(m) as u64 * 16
        };
        let spectra = 3 * half_spectrum_len(n) as u64 * 16 + fine;
        let strengths = 3 * n64 * n64 * n64 * 8;
        let tables = 2 * n64 * 8;
        let partials = 3 * blocks(n) as u64 * 8;
        let cufft = spectra / 2 + (64 << 20);
        spectra + strengths + tables + partials + cufft
    }

    /// Device memory that [`DeviceRbfSolver::queue_band_modes`] allocates for `particles`
    /// particles and the `n`³ lattice with core σ0, in bytes: what [`Self::device_bytes`]`(n,
    /// n)` counts, the non-uniform FFT's mesh ([`ModesPlan::mesh_bytes`], 3·M²·2(M/2 + 1) f64;
    /// 1.37 GB at n = 256, M = 384) with half of it again for cuFFT's in-place plan, per
    /// particle the sorted positions and strengths (6 f64), the sort's keys and order and their
    /// scratch copies (2 u64 + 2 u32), and the cell starts ((M/2)³ + 1 i32). The particles
    /// themselves are the caller's. Fails as [`ModesPlan::new`] does.
    pub fn particle_device_bytes(
        particles: usize,
        n: usize,
        sigma0: f64,
    ) -> Result<u64, lattice_modes::NoWindow> {
        let plan = ModesPlan::new(n, sigma0)?;
        let cells = (plan.mesh() / lattice_modes::CELL) as u64;
        let per_particle = 6 * 8 + 2 * 8 + 2 * 4;
        Ok(Self::device_bytes(n, n)
            + plan.mesh_bytes() * 3 / 2
            + per_particle * particles as u64
            + 4 * (cells * cells * cells + 1)
            + 8 * n as u64)
    }

    /// What this solver holds on the device after its last successful solve, in bytes: its
    /// buffers and the work areas cuFFT reported for its plans (the caller's ω and β not
    /// counted); 0 before the first. For checking [`DeviceRbfSolver::device_bytes`].
    pub fn resident_bytes(&self) -> u64 {
        if !self.solved {
            return 0;
        }
        let complex = std::mem::size_of::<cufft_sys::double2>() as u64;
        (self.spec.capacity() + self.fine.capacity()) as u64 * complex
            + 8 * (self.sym.get().len() + self.filt.get().len() + self.partials.get().len()) as u64
            + self.mode_buffers.bytes()
            + self.plans.work_bytes()
    }

    /// Queues on the GPU's stream the strengths β on the `n`³ particle lattice for the
    /// vorticity `omega` sampled on the `m`³ lattice (3·m³ f64 on this GPU, node-major in
    /// [`super::lattice_nodes`] order, components x, y, z per node), conditioned as
    /// `conditioning` asks, with Σβ = 0 per component when `zero_total`: the device form of
    /// [`super::solve_strengths`] with `solver` = [`RbfSolver::Spectral`] (m from
    /// [`super::reinit::sampling_lattice`], or n) or [`RbfSolver::Exact`] (m = n), same
    /// strengths to round-off, same report ([`DeviceRbfSolver::report`]). `alpha_out` is resized
    /// ([`DeviceBuffer::ensure`]) to at least 3·n³ values and its first 3·n³ are written, in
    /// the layout of `omega`, ready for whatever is queued after; `omega` (read when the stream
    /// gets there) is not changed. The host does not wait. (Spectral reinitialisation of
    /// particles with one core takes their band modes directly instead:
    /// [`DeviceRbfSolver::queue_band_modes`].)
    ///
    /// Errors (found before anything is queued, or when queuing): n = 0, m < n, 3·m³ beyond
    /// 32-bit indexing, σ0 not positive and finite, `omega` shorter than 3·m³, conjugate
    /// gradients or interpolation from another lattice asked for, or a CUDA/cuFFT failure.
    /// Panics if `omega` was never allocated (a [`DeviceBuffer`] used before `ensure`).
    #[allow(clippy::too_many_arguments)]
    pub fn solve(
        &mut self,
        omega: &DeviceBuffer<f64>,
        m: usize,
        n: usize,
        sigma0: f64,
        solver: RbfSolver,
        conditioning: LatticeConditioning,
        zero_total: bool,
        alpha_out: &mut DeviceBuffer<f64>,
    ) -> Result<(), CudaError> {
        if n == 0 || m < n || 3 * (m as u128).pow(3) > i32::MAX as u128 {
            return Err(CudaError::Invalid(format!(
                "GPU RBF solve: lattice n = {n} sampled on m = {m} (1 ≤ n ≤ m ≤ {}: 32-bit \
                 cuFFT plans)",
                ((i32::MAX / 3) as f64).cbrt().floor()
            )));
        }
        let spectral = match solver {
            RbfSolver::Spectral => true,
            RbfSolver::Exact if m == n => false,
            _ => {
                return Err(CudaError::Invalid(format!(
                    "GPU RBF solve: rbf = \"{}\" from a {m}³ sampling of an {n}³ lattice (the \
                     GPU offers \"spectral\" and, on the particle lattice itself, \"exact\")",
                    solver.as_str()
                )))
            }
        };
        check_core(sigma0, "core radius σ0")?;
        let m3 = m * m * m;
        let have = omega.get().len();
        if have < 3 * m3 {
            return Err(CudaError::Invalid(format!(
                "GPU RBF solve: the lattice vorticity holds {have} values, {} needed for m = {m}",
                3 * m3
            )));
        }
        let s = self.stream.clone();
        self.ensure_tables(n, sigma0, spectral, conditioning.filter)?;
        self.spec.ensure(&s, 3 * half_spectrum_len(n))?;
        let d2z = ensure_plan(&mut self.plans.d2z, m, || lattice_plan(m, true, &s))?;
        if m == n {
            d2z.fft
                .exec_d2z(omega.get(), self.spec.get_mut())
                .doing("cuFFT D2Z of the lattice vorticity")?;
        } else {
            self.fine.ensure(&s, 3 * half_spectrum_len(m))?;
            d2z.fft
                .exec_d2z(omega.get(), self.fine.get_mut())
                .doing("cuFFT D2Z of the sampled vorticity")?;
            let fine = self.fine.addr(&s);
            self.band(fine, m, n, 0)?;
        }
        // The D2Z is unnormalised on the m³ lattice.
        self.condition_and_invert(alpha_out, n, 1.0 / m3 as f64, (conditioning, zero_total))
    }

    /// Spectral reinitialisation from the particles themselves (docs/physics.md §3.7), first
    /// half: queues on the GPU's stream the band modes of the blob field of `blobs` (one core
    /// σ) for the `n`³ lattice by the non-uniform FFT of [`super::lattice_modes`] (window and
    /// mesh by [`ModesPlan::new`] for (n, σ0)); [`DeviceRbfSolver::solve_band_modes`] then
    /// solves them for the strengths. The CPU form is
    /// [`super::lattice_modes::blob_band_spectrum`] followed by
    /// [`super::reinit::solve_spectral_band`]. Bit-reproducible (integer atomics, a stable sort,
    /// a gather in fixed order). The host does not wait, except for the upload of the
    /// deconvolution table when σ changed.
    ///
    /// Errors: n = 0, σ0 or σ not positive and finite, no particles, buffers shorter than
    /// 3·count, sizes beyond 32-bit indexing, no window for (n, σ0), or a CUDA/cuFFT failure.
    pub fn queue_band_modes(
        &mut self,
        blobs: DeviceBlobs,
        n: usize,
        sigma0: f64,
    ) -> Result<(), CudaError> {
        self.band_modes(blobs, n, sigma0)
    }

    /// The second half: the conditioned spectral solve of [`DeviceRbfSolver::solve`] on the band
    /// modes queued last by [`DeviceRbfSolver::queue_band_modes`] for the same `n` and σ0: the
    /// strengths β on the `n`³ lattice for core σ0 into `alpha_out` (resized to at least 3·n³),
    /// Σβ = 0 per component when `zero_total`, the report for [`DeviceRbfSolver::report`].
    pub fn solve_band_modes(
        &mut self,
        n: usize,
        sigma0: f64,
        conditioning: LatticeConditioning,
        zero_total: bool,
        alpha_out: &mut DeviceBuffer<f64>,
    ) -> Result<(), CudaError> {
        let queued = self.mode_buffers.factors_key.map(|k| (k.0, k.1));
        if queued != Some((n, sigma0.to_bits())) {
            return Err(CudaError::Invalid(format!(
                "GPU RBF solve: no band modes queued for n = {n}, σ0 = {sigma0}"
            )));
        }
        self.ensure_tables(n, sigma0, true, conditioning.filter)?;
        self.condition_and_invert(alpha_out, n, 1.0, (conditioning, zero_total))
    }

    /// The band modes [`DeviceRbfSolver::queue_band_modes`] solves from, downloaded (for
    /// tests): 3 half spectra of n·n·(n/2 + 1) complex values (cuFFT's D2Z layout, index
    /// (m_x·n + m_y)·(n/2 + 1) + m_z) in the normalisation of
    /// [`super::lattice_modes::blob_band_spectrum`]. Waits for the GPU.
    pub fn band_modes_to_host(
        &mut self,
        blobs: DeviceBlobs,
        n: usize,
        sigma0: f64,
    ) -> Result<[Vec<num_complex::Complex64>; 3], CudaError> {
        self.band_modes(blobs, n, sigma0)?;
        let nc = half_spectrum_len(n);
        let mut host = vec![cufft_sys::double2 { x: 0.0, y: 0.0 }; 3 * nc];
        self.spec.download(&self.gpu, &mut host, "the band modes")?;
        Ok(std::array::from_fn(|c| {
            host[c * nc..(c + 1) * nc]
                .iter()
                .map(|z| num_complex::Complex64::new(z.x, z.y))
                .collect()
        }))
    }

    /// The window rule's plan for (n, σ0), made once per pair.
    fn modes_plan(&mut self, n: usize, sigma0: f64) -> Result<ModesPlan, CudaError> {
        let key = (n, sigma0.to_bits());
        if let Some((pn, ps, plan)) = self.mode_buffers.plan {
            if (pn, ps) == key {
                return Ok(plan);
            }
        }
        let plan = ModesPlan::new(n, sigma0).map_err(|e| CudaError::Invalid(e.to_string()))?;
        self.mode_buffers.plan = Some((n, key.1, plan));
        Ok(plan)
    }

    /// Queues the band modes of `blobs` into `spec` (module docs of [`super::lattice_modes`];
    /// kernels/lattice_modes.cu gives the steps).
    fn band_modes(&mut self, blobs: DeviceBlobs, n: usize, sigma0: f64) -> Result<(), CudaError> {
        check_core(sigma0, "core radius σ0")?;
        check_core(blobs.sigma, "particles' core radius σ")?;
        let np = blobs.count;
        let short = blobs.x.get().len().min(blobs.alpha.get().len()) < 3 * np;
        if n == 0 || np == 0 || np >= (i32::MAX / 3) as usize || short {
            return Err(CudaError::Invalid(format!(
                "GPU lattice modes: {np} particles (1 to {}, positions and strengths 3 values \
                 each) for an n = {n} lattice (n ≥ 1)",
                i32::MAX / 3 - 1
            )));
        }
        let plan = self.modes_plan(n, sigma0)?;
        let (m, kb) = (plan.mesh(), plan.window);
        let mp = 2 * (m / 2 + 1);
        let cells = m / lattice_modes::CELL;
        let ncells = cells * cells * cells;
        if (3 * m * m * mp) as u128 > i32::MAX as u128 {
            return Err(CudaError::Invalid(format!(
                "GPU lattice modes: a {m}³ mesh for n = {n} is beyond 32-bit cuFFT plans"
            )));
        }
        let s = self.stream.clone();
        let b = &mut self.mode_buffers;
        let fkey = (n, sigma0.to_bits(), blobs.sigma.to_bits());
        if b.factors_key != Some(fkey) {
            b.factors_key = None;
            b.factors
                .upload(&s, &plan.factors(blobs.sigma), "the deconvolution")?;
            b.factors_key = Some(fkey);
        }
        // Cells and the sort: particles by cell, in index order within a cell.
        b.keys.ensure(&s, np)?;
        b.order.ensure(&s, np)?;
        b.starts.zero(&s, ncells + 1)?;
        let (np_i, m_i, cells_i) = (np as i32, m as i32, cells as i32);
        // SAFETY: lm_keys(const double* x, int np, int m, int cells, u64* keys, u32* vals,
        // int* counts): x holds ≥ 3·np doubles (checked), keys and order np values, starts
        // cells³ + 1 counts (zeroed above); one thread per particle.
        launch!(s, &self.modes.keys, "lm_keys", cfg_items(np, 256);
            blobs.x.get(), &np_i, &m_i, &cells_i, b.keys.get_mut(), b.order.get_mut(),
            b.starts.get_mut())?;
        if self.sort.is_none() {
            self.sort = Some(DeviceSort::new(&self.gpu)?);
        }
        let sort = self.sort.as_mut().expect("made above");
        sort.exclusive_scan(b.starts.get_mut(), ncells + 1)?;
        let bits = (usize::BITS - (ncells - 1).max(1).leading_zeros()).max(1);
        sort.sort_pairs(b.keys.get_mut(), b.order.get_mut(), np, bits)?;
        b.pos.ensure(&s, 3 * np)?;
        b.alpha.ensure(&s, 3 * np)?;
        // SAFETY: lm_permute(const u32* order, const double* x, const double* alpha, int np,
        // int m, double* pos, double* al): order a permutation of 0..np (sorted above), x and
        // alpha ≥ 3·np doubles (checked), pos and al 3·np (ensured); one thread per particle.
        launch!(s, &self.modes.permute, "lm_permute", cfg_items(np, 256);
            b.order.get(), blobs.x.get(), blobs.alpha.get(), &np_i, &m_i, b.pos.get_mut(),
            b.alpha.get_mut())?;
        b.mesh.ensure(&s, 3 * m * m * mp)?;
        let (lo, span) = lattice_modes::sweep(kb.w);
        debug_assert!(
            span <= cells,
            "ModesPlan::new keeps the sweep within the mesh"
        );
        let tiles = (m / lattice_modes::TILE) as u32;
        let (w_i, lo_i, span_i) = (kb.w as i32, lo as i32, span as i32);
        let inv_i0b = kb.inv_i0b();
        // SAFETY: lm_spread(const double* pos, const double* al, const int* start, int cells,
        // int m, int w, double beta, double inv_i0b, int lo, int span, double* mesh): pos/al
        // 3·np doubles in cell order, starts the cells³ + 1 scanned counts, mesh 3·m·m·mp
        // doubles (ensured); (m/8)³ blocks of LM_THREADS (64), one per tile of 8³ nodes (m is
        // a multiple of 8: ModesPlan); span ≤ cells (ModesPlan checks the sweep).
        launch!(s, &self.modes.spread, "lm_spread", LaunchConfig {
                grid_dim: (tiles * tiles * tiles, 1, 1),
                block_dim: (SPREAD_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            b.pos.get(), b.alpha.get(), b.starts.get(), &cells_i, &m_i, &w_i, &kb.beta,
            &inv_i0b, &lo_i, &span_i, b.mesh.get_mut())?;
        let mesh_plan = ensure_plan(&mut self.plans.mesh, m, || mesh_d2z_plan(m, &s))?;
        let mesh = b.mesh.addr(&s);
        // SAFETY: the plan transforms 3 batches of m³ in cuFFT's in-place layout (real rows of
        // mp doubles, complex rows of m/2 + 1); mesh holds 3·m·m·mp doubles on this stream.
        unsafe {
            cufft_result::exec_d2z(
                mesh_plan.fft.handle(),
                mesh as *mut cufft_sys::cufftDoubleReal,
                mesh as *mut cufft_sys::cufftDoubleComplex,
            )
        }
        .doing("cuFFT D2Z of the lattice modes' mesh")?;
        self.spec.ensure(&s, 3 * half_spectrum_len(n))?;
        let factors = self.mode_buffers.factors.addr(&s);
        self.band(mesh, m, n, factors)
    }

    /// Queues `lm_band`: the band of the 3 half spectra of the m³ lattice at device address
    /// `fine` (component stride m·m·(m/2 + 1)) into `spec`, each mode times the 1-D factors at
    /// `factors` (n doubles; 0: none).
    fn band(&mut self, fine: u64, m: usize, n: usize, factors: u64) -> Result<(), CudaError> {
        let (m_i, n_i) = (m as i32, n as i32);
        // SAFETY: lm_band(const double2* fine, int m, double2* spec, int n, const double* fac):
        // fine holds the 3 half spectra of m·m·(m/2+1) (the caller's), spec those of
        // n·n·(n/2+1) (ensured by the callers), fac n doubles or null; threads stride.
        launch!(self.stream, &self.modes.band, "lm_band", LaunchConfig {
                grid_dim: (blocks(n) as u32, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            &fine, &m_i, self.spec.get_mut(), &n_i, &factors)?;
        Ok(())
    }

    /// The conditioned solve on the band spectra in `spec` (ω̂ = `scale` · spec) and the
    /// inverse transform into `alpha_out` (tables ensured by the caller), conditioned and with
    /// Σβ = 0 as `(conditioning, zero_total)` ask.
    fn condition_and_invert(
        &mut self,
        alpha_out: &mut DeviceBuffer<f64>,
        n: usize,
        scale: f64,
        (conditioning, zero_total): (LatticeConditioning, bool),
    ) -> Result<(), CudaError> {
        let s = self.stream.clone();
        alpha_out.ensure(&s, 3 * n * n * n)?;
        let nb = blocks(n);
        self.partials.ensure(&s, 3 * nb)?;
        let cfg = LaunchConfig {
            grid_dim: (nb as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let n_i = n as i32;
        let solenoidal = i32::from(conditioning.solenoidal);
        let zero = i32::from(zero_total);
        // SAFETY: lat_condition(double2* spec, const double* sym, const double* filt, int n,
        // int solenoidal, int zero_total, double scale, double* partials): spec holds the 3 half
        // spectra of n·n·(n/2+1) double2 each (ensured and written by the callers), sym and
        // filt n doubles each (ensure_tables), partials 3·nb doubles for the nb blocks of the
        // grid; blockDim is LAT_THREADS (256), which its shared arrays assume.
        launch!(s, &self.condition, "lat_condition", cfg;
            self.spec.get_mut(), self.sym.get(), self.filt.get(), &n_i, &solenoidal, &zero,
            &scale, self.partials.get_mut())?;
        let z2d = ensure_plan(&mut self.plans.z2d, n, || lattice_plan(n, false, &s))?;
        z2d.fft
            .exec_z2d(self.spec.get_mut(), alpha_out.get_mut())
            .doing("cuFFT Z2D of the strengths")?;
        self.host_partials.resize(3 * nb, 0.0);
        self.solved = true;
        Ok(())
    }

    /// The conditioning report of the last queued solve (its block partials copied to the host
    /// and added in block order): waits for the GPU to finish that solve.
    pub fn report(&mut self) -> Result<ConditioningReport, CudaError> {
        if !self.solved {
            return Err(CudaError::Invalid(
                "GPU RBF solve: no report before the first solve".into(),
            ));
        }
        self.partials.download(
            &self.gpu,
            &mut self.host_partials,
            "the conditioning partial sums",
        )?;
        // Block partials in block order.
        let (mut total, mut longitudinal, mut filtered) = (0.0, 0.0, 0.0);
        for p in self.host_partials.chunks_exact(3) {
            total += p[0];
            longitudinal += p[1];
            filtered += p[2];
        }
        let total = f64::max(total, f64::MIN_POSITIVE);
        Ok(ConditioningReport {
            longitudinal_fraction: longitudinal / total,
            filtered_fraction: filtered / total,
        })
    }

    /// Uploads the 1-D symbol for (n, σ0) — ĉ(d) = [`LatticeGaussian::spectrum`] for
    /// interpolation, ĝ(d) = [`band_gaussian_symbol`] for the spectral solve — and f(d) =
    /// [`LatticeFilter::factor`] at (q_d, 0, 0) for (n, filter), d = 0..n, when they changed.
    fn ensure_tables(
        &mut self,
        n: usize,
        sigma0: f64,
        spectral: bool,
        filter: LatticeFilter,
    ) -> Result<(), CudaError> {
        let s = &self.stream;
        let key = (n, sigma0.to_bits(), spectral);
        if self.symbol_key != Some(key) {
            self.symbol_key = None;
            let symbol = if spectral {
                band_gaussian_symbol(n, sigma0)
            } else {
                LatticeGaussian::new(n, sigma0).spectrum()
            };
            self.sym.upload(s, &symbol, "the RBF symbol")?;
            self.symbol_key = Some(key);
        }
        if self.filter_key != Some((n, filter)) {
            self.filter_key = None;
            let factors: Vec<f64> = (0..n)
                .map(|d| filter.factor([signed_wavenumber(d, n), 0.0, 0.0], n))
                .collect();
            self.filt.upload(s, &factors, "the lattice filter")?;
            self.filter_key = Some((n, filter));
        }
        Ok(())
    }
}

/// A positive and finite core radius, or the error naming `what`.
fn check_core(sigma: f64, what: &str) -> Result<(), CudaError> {
    if sigma > 0.0 && sigma.is_finite() {
        Ok(())
    } else {
        Err(CudaError::Invalid(format!(
            "GPU RBF solve: {what} = {sigma} (positive and finite)"
        )))
    }
}

/// The plan in `slot` for `size`, made by `make` when the slot holds another size or none.
fn ensure_plan(
    slot: &mut Option<Plan>,
    size: usize,
    make: impl FnOnce() -> Result<CudaFft, CudaError>,
) -> Result<&Plan, CudaError> {
    if slot.as_ref().is_none_or(|p| p.size != size) {
        *slot = None;
        let fft = make()?;
        let work_bytes = fft_work_bytes(&fft)?;
        *slot = Some(Plan {
            size,
            fft,
            work_bytes,
        });
    }
    Ok(slot.as_ref().expect("made above"))
}

/// A plan between node-major values on the `size`³ lattice (stride 3, batch b at offset b) and
/// 3 half spectra contiguous per component: D2Z (`forward`, the sampled vorticity) or Z2D (the
/// strengths).
fn lattice_plan(
    size: usize,
    forward: bool,
    stream: &Arc<CudaStream>,
) -> Result<CudaFft, CudaError> {
    let si = size as i32;
    let embed = [si; 3];
    let half = [si, si, (size / 2 + 1) as i32];
    let real = FftLayout::new(&embed, 3, 1);
    let cplx = FftLayout::new(&half, 1, half_spectrum_len(size) as i32);
    use cufft_sys::cufftType::{CUFFT_D2Z, CUFFT_Z2D};
    let (layouts, kind) = if forward {
        ((real, cplx), CUFFT_D2Z)
    } else {
        ((cplx, real), CUFFT_Z2D)
    };
    let what = format!("the {size}^3 lattice");
    fft_plan(&what, &embed, layouts, kind, 3, stream)
}

/// The in-place D2Z plan on the non-uniform FFT's M³ mesh: 3 batches, real rows padded to
/// 2(M/2 + 1) doubles, complex rows of M/2 + 1.
fn mesh_d2z_plan(m: usize, stream: &Arc<CudaStream>) -> Result<CudaFft, CudaError> {
    let mi = m as i32;
    let dims = [mi; 3];
    let padded = [mi, mi, 2 * (m / 2 + 1) as i32];
    let half = [mi, mi, (m / 2 + 1) as i32];
    let real = FftLayout::new(&padded, 1, mi * mi * padded[2]);
    let cplx = FftLayout::new(&half, 1, half_spectrum_len(m) as i32);
    let what = format!("the {m}^3 mesh");
    fft_plan(
        &what,
        &dims,
        (real, cplx),
        cufft_sys::cufftType::CUFFT_D2Z,
        3,
        stream,
    )
}
