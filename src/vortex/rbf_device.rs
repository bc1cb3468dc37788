//! The solves of reinitialisation on the GPU, in f64 (docs/physics.md §3.3 and §3.7, with the
//! conditioning of §3.5): the device form of [`super::solve_strengths`] with
//! [`super::RbfSolver::Exact`] and [`super::RbfSolver::Spectral`], for a particle stepper whose
//! lattice vorticity already lives on the GPU. The exact solve is described below; the spectral
//! one samples ω on a finer m³ lattice, takes the band |q_d| ≤ n/2 of its spectrum
//! (`lat_band`) and divides by the band's Gaussian ĝ instead of ĉ, in the same pass. Kernels:
//! `kernels/lattice.cu`; transforms: cuFFT (D2Z and Z2D, batched over the three components,
//! plans kept per pair of lattice sizes), all on the GPU's one stream ([`Gpu::stream`]):
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

use super::rbf::{signed_wavenumber, LatticeGaussian};
use super::reinit::{band_gaussian_symbol, ConditioningReport, LatticeConditioning, LatticeFilter};
use super::RbfSolver;
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{
    cufft_available, fft_plan, fft_work_bytes, half_spectrum_len, kernel_source, launch, CudaError,
    Doing, FftLayout, Gpu, KernelSource,
};
use cudarc::cufft::{sys as cufft_sys, CudaFft};
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// The family (no headers).
pub const KERNELS: KernelSource = kernel_source!("lattice.cu");

/// Threads per block of `lat_condition` (`LAT_THREADS` in lattice.cu).
const THREADS: u32 = 256;
/// Most blocks of `lat_condition` (the threads stride over the modes beyond); the grid depends
/// on n alone, so the partial sums do too.
const MAX_BLOCKS: usize = 1024;

/// cuFFT plans for one pair of lattice sizes.
struct Plans {
    /// The particle lattice.
    n: usize,
    /// The lattice the vorticity is sampled on (n, or finer for the spectral solve).
    m: usize,
    /// Node-major ω on the m³ lattice (stride 3, one batch per component) → 3 half spectra.
    d2z: CudaFft,
    /// 3 half spectra → node-major β (stride 3).
    z2d: CudaFft,
    /// The work areas cuFFT allocated for the two plans, in bytes.
    work_bytes: u64,
}

/// The exact RBF solve of reinitialisation on one GPU stream (see the module docs): resident
/// buffers (grow only), cuFFT plans per lattice size, the symbol and filter tables per (n, σ0)
/// and (n, filter).
pub struct DeviceRbfSolver {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    condition: CudaFunction,
    band: CudaFunction,
    plans: Option<Plans>,
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
            .field("lattice", &self.plans.as_ref().map(|p| p.n))
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
        let band = module.function("lat_band")?;
        Ok(DeviceRbfSolver {
            gpu,
            stream,
            condition,
            band,
            plans: None,
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

    /// What this solver holds on the device after its last successful solve, in bytes: its
    /// buffers and the work areas cuFFT reported for its plans (the caller's ω and β not
    /// counted); 0 before the first. For checking [`DeviceRbfSolver::device_bytes`].
    pub fn resident_bytes(&self) -> u64 {
        if !self.solved {
            return 0;
        }
        let work = self.plans.as_ref().map_or(0, |p| p.work_bytes);
        let complex = std::mem::size_of::<cufft_sys::double2>() as u64;
        (self.spec.capacity() + self.fine.capacity()) as u64 * complex
            + 8 * (self.sym.get().len() + self.filt.get().len() + self.partials.get().len()) as u64
            + work
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
    /// gets there) is not changed. The host does not wait.
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
        if !(sigma0 > 0.0 && sigma0.is_finite()) {
            return Err(CudaError::Invalid(format!(
                "GPU RBF solve: core radius σ0 = {sigma0} (positive and finite)"
            )));
        }
        let (n3, m3) = (n * n * n, m * m * m);
        let have = omega.get().len();
        if have < 3 * m3 {
            return Err(CudaError::Invalid(format!(
                "GPU RBF solve: the lattice vorticity holds {have} values, {} needed for m = {m}",
                3 * m3
            )));
        }
        let s = self.stream.clone();
        self.ensure_tables(n, sigma0, spectral, conditioning.filter)?;
        self.ensure_plans(n, m)?;
        let nc = half_spectrum_len(n);
        self.spec.ensure(&s, 3 * nc)?;
        alpha_out.ensure(&s, 3 * n3)?;
        let nb = blocks(n);
        self.partials.ensure(&s, 3 * nb)?;

        let plans = self.plans.as_ref().expect("plans were just made");
        if m == n {
            plans
                .d2z
                .exec_d2z(omega.get(), self.spec.get_mut())
                .doing("cuFFT D2Z of the lattice vorticity")?;
        } else {
            self.fine.ensure(&s, 3 * half_spectrum_len(m))?;
            plans
                .d2z
                .exec_d2z(omega.get(), self.fine.get_mut())
                .doing("cuFFT D2Z of the sampled vorticity")?;
            let (m_i, n_i) = (m as i32, n as i32);
            // SAFETY: lat_band(const double2* fine, int m, double2* spec, int n): fine holds
            // the 3 half spectra of m·m·(m/2+1) (ensured above, written by the D2Z), spec those
            // of n·n·(n/2+1) (ensured to 3·nc); threads stride over the n-modes.
            launch!(s, &self.band, "lat_band", LaunchConfig {
                    grid_dim: (blocks(n) as u32, 1, 1),
                    block_dim: (THREADS, 1, 1),
                    shared_mem_bytes: 0,
                };
                self.fine.get(), &m_i, self.spec.get_mut(), &n_i)?;
        }
        let cfg = LaunchConfig {
            grid_dim: (nb as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let n_i = n as i32;
        let solenoidal = i32::from(conditioning.solenoidal);
        let zero = i32::from(zero_total);
        // The D2Z is unnormalised on the m³ lattice.
        let scale = 1.0 / m3 as f64;
        // SAFETY: lat_condition(double2* spec, const double* sym, const double* filt, int n,
        // int solenoidal, int zero_total, double scale, double* partials): spec holds the 3 half
        // spectra of n·n·(n/2+1) double2 each (ensured to 3·nc above, written by the D2Z or
        // lat_band), sym and filt n doubles each (ensure_tables), partials 3·nb doubles for the
        // nb blocks of the grid; blockDim is LAT_THREADS (256), which its shared arrays assume.
        launch!(s, &self.condition, "lat_condition", cfg;
            self.spec.get_mut(), self.sym.get(), self.filt.get(), &n_i, &solenoidal, &zero,
            &scale, self.partials.get_mut())?;
        plans
            .z2d
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

    /// The D2Z plan on the sampling lattice m and the Z2D plan on the particle lattice n (made
    /// once per (n, m)): 3 batches, real data node-major with stride 3 (batch b at offset b),
    /// spectra contiguous per component.
    fn ensure_plans(&mut self, n: usize, m: usize) -> Result<(), CudaError> {
        if self.plans.as_ref().is_some_and(|p| p.n == n && p.m == m) {
            return Ok(());
        }
        self.plans = None;
        use cufft_sys::cufftType::{CUFFT_D2Z, CUFFT_Z2D};
        let (mi, ni) = (m as i32, n as i32);
        let (embed_m, embed_n) = ([mi; 3], [ni; 3]);
        let half_m = [mi, mi, (m / 2 + 1) as i32];
        let half_n = [ni, ni, (n / 2 + 1) as i32];
        let real_m = FftLayout::new(&embed_m, 3, 1);
        let real_n = FftLayout::new(&embed_n, 3, 1);
        let cplx_m = FftLayout::new(&half_m, 1, half_spectrum_len(m) as i32);
        let cplx_n = FftLayout::new(&half_n, 1, half_spectrum_len(n) as i32);
        let d2z = fft_plan(
            &format!("the {m}^3 lattice"),
            &embed_m,
            (real_m, cplx_m),
            CUFFT_D2Z,
            3,
            &self.stream,
        )?;
        let z2d = fft_plan(
            &format!("the {n}^3 lattice"),
            &embed_n,
            (cplx_n, real_n),
            CUFFT_Z2D,
            3,
            &self.stream,
        )?;
        let work_bytes = fft_work_bytes(&d2z)? + fft_work_bytes(&z2d)?;
        self.plans = Some(Plans {
            n,
            m,
            d2z,
            z2d,
            work_bytes,
        });
        Ok(())
    }
}
