//! The all-pairs Biot–Savart kernel family (`kernels/biot_savart.cu`) on the device: the
//! Biot–Savart records (packed on the host or, for the device form, on the GPU) and the launches
//! of each mode, over the shared tile engine of [`super::tiles`] (resident buffers, source
//! splits, poisoned outputs checked fully written, CUDA-event timing).
//!
//! [`AllPairs`] is the engine, made on the GPU it is given (no process-global device);
//! [`super::CudaDirect`] puts the [`crate::summation::Summation`] trait on it.

use super::tiles::{cfg_n, KernelResources, TileEngine, TileLaunch, PAD_POSITION, TILE_HEADER};
pub use super::tiles::{GpuReal, KernelConfig};
use crate::device::cuda::{kernel_source, CompiledModule, CudaError, Doing, Gpu, KernelSource};
use crate::summation::Sources;
use cudarc::driver::{CudaFunction, CudaStream, PushKernelArg};
use std::sync::Arc;

/// The family with the headers it includes.
pub const KERNELS: KernelSource = kernel_source!(
    "biot_savart.cu",
    crate::summation::PAIR_KERNEL_HEADER,
    TILE_HEADER
);

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

    /// The tile kernels, in the order of [`Mode::ALL`].
    const KERNEL_NAMES: [&'static str; 5] = [
        "bs_velocity",
        "bs_stretching_classical",
        "bs_stretching_transposed",
        "bs_gradient",
        "bs_vorticity",
    ];

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

    /// The tile launch of this mode (the kernels' real argument is unused).
    fn launch<T: GpuReal>(self) -> TileLaunch<T> {
        TileLaunch {
            kernel: self.index(),
            components: self.components(),
            param: T::zero(),
        }
    }
}

/// All-pairs Biot–Savart sums on the GPU in precision `T`, with resident device buffers.
pub struct AllPairs<T: GpuReal> {
    tiles: TileEngine<T>,
    /// bs_pack_sources, bs_pack_targets, bs_unpack (the device form).
    pack_sources: CudaFunction,
    pack_targets: CudaFunction,
    unpack: CudaFunction,
}

impl<T: GpuReal> std::fmt::Debug for AllPairs<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllPairs")
            .field("precision", &T::PRECISION)
            .field("config", &self.tiles.config())
            .field("gpu", &self.tiles.gpu().info().name)
            .finish()
    }
}

impl<T: GpuReal> AllPairs<T> {
    /// Compiles (once per process and GPU) and loads the kernels for `config` on `gpu`.
    pub fn new(gpu: Arc<Gpu>, config: KernelConfig) -> Result<Self, CudaError> {
        let tiles = TileEngine::new(gpu, config, &KERNELS, &Mode::KERNEL_NAMES)?;
        let load = |name: &str| tiles.module().function(name);
        let (pack_sources, pack_targets, unpack) = (
            load("bs_pack_sources")?,
            load("bs_pack_targets")?,
            load("bs_unpack")?,
        );
        Ok(AllPairs {
            tiles,
            pack_sources,
            pack_targets,
            unpack,
        })
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        self.tiles.gpu()
    }

    /// "CUDA <precision> on <GPU>", for evaluator names.
    pub fn describe(&self) -> String {
        self.tiles.describe()
    }

    pub fn config(&self) -> KernelConfig {
        self.tiles.config()
    }

    /// The compiled module (NVRTC log, cubin).
    pub fn module(&self) -> &Arc<CompiledModule> {
        self.tiles.module()
    }

    /// Registers, local memory and occupancy of each kernel.
    pub fn resources(&self) -> Result<Vec<KernelResources>, CudaError> {
        self.tiles.resources()
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
        let f4pi = 0.25 * std::f64::consts::FRAC_1_PI;
        let far = T::RHO_FAR * T::RHO_FAR;
        let record = |q: usize| {
            let (x, a, s) = (sources.x[q], sources.alpha[q], sources.sigma[q]);
            let s2 = s * s;
            [
                [x[0], x[1], x[2], 1.0 / s2],
                [a[0] * f4pi, a[1] * f4pi, a[2] * f4pi, far * s2],
            ]
        };
        // α = 0 and far² = 0 (never "near"): contributes exact zeros, no inf or NaN.
        let pad = [[PAD_POSITION, PAD_POSITION, PAD_POSITION, 1.0], [0.0; 4]];
        self.tiles.upload_sources(n, record, pad)
    }

    /// Packs and copies the targets and, for stretching, their strengths (sent as 3α).
    pub fn upload_targets(
        &mut self,
        targets: &[[f64; 3]],
        alpha: Option<&[[f64; 3]]>,
    ) -> Result<(), CudaError> {
        let n = targets.len();
        let pos = |i: usize| {
            let x = targets[i];
            [x[0], x[1], x[2], 0.0]
        };
        match alpha {
            None => self.tiles.upload_targets(n, |i| [pos(i)]),
            Some(alpha) if alpha.len() != n => Err(CudaError::Invalid(format!(
                "{} target strengths for {n} targets",
                alpha.len()
            ))),
            Some(alpha) => self.tiles.upload_targets(n, |i| {
                let a = alpha[i];
                [pos(i), [3.0 * a[0], 3.0 * a[1], 3.0 * a[2], 0.0]]
            }),
        }
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
        let (padded, (stream, [pos, str])) = self.tiles.reserve_sources(n)?;
        if padded > 0 {
            let (n_i, padded_i) = (n as i32, padded as i32);
            let f4pi = 0.25 * std::f64::consts::FRAC_1_PI;
            let far2 = T::RHO_FAR * T::RHO_FAR;
            let mut b = stream.launch_builder(&self.pack_sources);
            b.arg(&x)
                .arg(&alpha)
                .arg(&sigma)
                .arg(&n_i)
                .arg(&padded_i)
                .arg(&f4pi)
                .arg(&far2)
                .arg(pos.get_mut())
                .arg(str.get_mut());
            // SAFETY: bs_pack_sources(const double* x, const double* alpha, const double* sigma,
            // int n, int padded, double f4pi, double far2, real4* pos, real4* str): x and alpha
            // hold 3·n doubles and sigma n (the caller's device buffers, DeviceSummation's
            // contract), pos and str 4·padded reals (reserve_sources()); the grid covers padded.
            unsafe { b.launch(cfg_n(padded)) }.doing("launching bs_pack_sources")?;
        }
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
        let (stream, [pos, alp]) = self.tiles.reserve_targets(n, alpha != 0)?;
        if n > 0 {
            let n_i = n as i32;
            let alp = if alpha != 0 { alp.addr(stream) } else { 0u64 };
            let mut b = stream.launch_builder(&self.pack_targets);
            b.arg(&x).arg(&alpha).arg(&n_i).arg(pos.get_mut()).arg(&alp);
            // SAFETY: bs_pack_targets(const double* x, const double* alpha, int n, real4* pos,
            // real4* alp): x holds 3·n doubles and alpha 3·n or is null (the caller's device
            // buffers), pos and alp 4·n reals (reserve_targets()), alp null when alpha is; the
            // grid covers n.
            unsafe { b.launch(cfg_n(n)) }.doing("launching bs_pack_targets")?;
        }
        Ok(())
    }

    /// Writes the output of the last launch as f64 into device arrays: the velocity (3 per
    /// target) at `u` and the further components (3 stretching or 9 gradient per target) at
    /// `extra` (0: not written), queued on the GPU's stream (the host does not wait).
    pub fn unpack_on_device(&mut self, u: u64, extra: u64) -> Result<(), CudaError> {
        let nt = self.tiles.targets();
        let stream = self.tiles.stream().clone();
        let (out, last) = self.tiles.output()?;
        if nt > 0 {
            let (nt_i, nc_i) = (nt as i32, last.components as i32);
            let mut b = stream.launch_builder(&self.unpack);
            b.arg(out.get()).arg(&nt_i).arg(&nc_i).arg(&u).arg(&extra);
            // SAFETY: bs_unpack(const real* out, int nt, int nc, double* u, double* ex): out
            // holds nt·nc reals of the last launch (the engine's prepare() sized it), u 3·nt
            // doubles and ex (nc − 3)·nt or null (the caller's device buffers); the grid covers
            // nt.
            unsafe { b.launch(cfg_n(nt)) }.doing("launching bs_unpack")?;
        }
        Ok(())
    }

    /// The stream every launch runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.tiles.stream()
    }

    /// Checks the mode against the upload.
    fn check_mode(&self, mode: Mode) -> Result<TileLaunch<T>, CudaError> {
        if mode.needs_target_alpha() && !self.tiles.has_target_b() {
            return Err(CudaError::Invalid(
                "stretching needs the target strengths: upload them with the targets".into(),
            ));
        }
        Ok(mode.launch())
    }

    /// Queues one evaluation of `mode` on the loaded sources and targets (asynchronous). The
    /// output is poisoned first, so [`AllPairs::download`] can check that every value was
    /// written.
    pub fn launch(&mut self, mode: Mode) -> Result<(), CudaError> {
        let launch = self.check_mode(mode)?;
        self.tiles.launch(launch)
    }

    /// Waits for the launches and copies the output of the last one to the host: `targets ×
    /// components` values, checked finite (fully written: the buffer was poisoned with NaN).
    pub fn download(&mut self) -> Result<&[T], CudaError> {
        self.tiles.download()
    }

    /// The output of the last [`AllPairs::download`] (targets × components values).
    pub fn last_output(&self) -> &[T] {
        self.tiles.last_output()
    }

    /// Times `repeats` evaluations of `mode` with CUDA events around the kernel launches (the
    /// output poisoning before each is outside), after one untimed warm-up; milliseconds per
    /// evaluation, in order.
    pub fn time_launches(&mut self, mode: Mode, repeats: usize) -> Result<Vec<f64>, CudaError> {
        let launch = self.check_mode(mode)?;
        self.tiles.time_launches(launch, repeats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launch_code_names_the_declared_kernels() {
        let declared = super::super::tiles::declared_tile_kernels(&KERNELS);
        assert_eq!(declared, Mode::KERNEL_NAMES);
        assert_eq!(Mode::ALL.map(|m| m.index()), [0, 1, 2, 3, 4]);
    }
}
