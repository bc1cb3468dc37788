//! All-pairs Plummer gravity on the GPU (`kernels/gravity.cu` over the tile loop of
//! `kernels/tiles.cuh`), behind [`GravitySummation`]: the potential and the acceleration at every
//! target from every body (docs/physics.md §10), in f32 ([`CudaDirectGravity`]) or in the f64
//! reference build ([`CudaDirectGravityOf<f64>`]).
//!
//! Bodies are packed as (x, y, z, m) and padded to a whole tile with massless bodies far away;
//! targets as (x, y, z, 0). With ε > 0 every pair is summed, the self pair included (−m/ε in φ,
//! nothing in a); with ε = 0 a pair at distance 0 adds nothing (so `targets = None` skips each
//! body's self pair), and coincident bodies are refused ([`PlummerGravity::check_bodies`]).
//!
//! The device form ([`CudaDirectGravityOf::evaluate_resident`], for the GPU-resident leapfrog)
//! packs bodies held in f64 device arrays on the GPU (`grav_pack`, the host packing's rounding),
//! launches the same tile kernels and writes φ and a back into f64 device arrays
//! (`grav_unpack`), with no copy to or from the host.

use super::tiles::{
    cfg_n, GpuReal, KernelConfig, KernelResources, TileEngine, TileLaunch, PAD_POSITION,
    TILE_HEADER,
};
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{kernel_source, launch, CudaError, Gpu, KernelSource};
use crate::summation::interaction::{
    Bodies, GravityEvaluation, GravitySummation, GravityWork, PlummerGravity,
};
use crate::summation::{SumResult, SummationError};
use cudarc::driver::{CudaFunction, PushKernelArg};
use std::sync::Arc;

/// The family with the header it includes.
pub const KERNELS: KernelSource = kernel_source!("gravity.cu", TILE_HEADER);

/// The tile kernels: ε > 0 (every pair), ε = 0 (pairs at distance 0 skipped).
const KERNEL_NAMES: [&str; 2] = ["grav_softened", "grav_newton"];

/// Reals per target in the output: φ, a_x, a_y, a_z.
pub const GRAVITY_OUTPUTS: usize = 4;

/// All-pairs Plummer gravity on a GPU in precision `T`, with resident device buffers.
#[derive(Debug)]
pub struct CudaDirectGravityOf<T: GpuReal> {
    tiles: TileEngine<T>,
    gravity: PlummerGravity,
    /// `grav_pack` and `grav_unpack` (the device form).
    pack: CudaFunction,
    unpack: CudaFunction,
}

/// The production GPU gravity evaluator: f32 on the device.
pub type CudaDirectGravity = CudaDirectGravityOf<f32>;

impl<T: GpuReal> CudaDirectGravityOf<T> {
    /// The evaluator of `gravity` on `gpu` with the default launch configuration
    /// ([`KernelConfig::GRAVITY`]); an error (never a panic) when the kernels cannot be compiled
    /// or loaded.
    pub fn new(gpu: Arc<Gpu>, gravity: PlummerGravity) -> Result<Self, CudaError> {
        Self::with_config(gpu, gravity, KernelConfig::GRAVITY)
    }

    pub fn with_config(
        gpu: Arc<Gpu>,
        gravity: PlummerGravity,
        config: KernelConfig,
    ) -> Result<Self, CudaError> {
        let tiles = TileEngine::new(gpu, config, &KERNELS, &KERNEL_NAMES)?.filling_waves()?;
        let pack = tiles.module().function("grav_pack")?;
        let unpack = tiles.module().function("grav_unpack")?;
        Ok(CudaDirectGravityOf {
            tiles,
            gravity,
            pack,
            unpack,
        })
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        self.tiles.gpu()
    }

    pub fn config(&self) -> KernelConfig {
        self.tiles.config()
    }

    /// Registers, local memory and occupancy of both kernels.
    pub fn resources(&self) -> Result<Vec<KernelResources>, CudaError> {
        self.tiles.resources()
    }

    /// Checks the bodies (one finite mass each; with the bodies as targets at ε = 0, no two at
    /// one position in f64 or once rounded to `T`, as [`GravitySummation::evaluate_gravity`]
    /// checks) and copies them and the targets (`None`: the bodies' positions) to the device.
    pub fn upload(
        &mut self,
        bodies: &Bodies,
        targets: Option<&[[f64; 3]]>,
    ) -> Result<(), SummationError> {
        bodies.check()?;
        if targets.is_none() {
            self.gravity.check_bodies(bodies.x)?;
        }
        self.load(bodies, targets)
    }

    /// [`CudaDirectGravityOf::upload`] after the f64 checks (done by the caller): the check in
    /// `T` and the copies.
    fn load(
        &mut self,
        bodies: &Bodies,
        targets: Option<&[[f64; 3]]>,
    ) -> Result<(), SummationError> {
        let (x, m) = (bodies.x, bodies.mass);
        if targets.is_none() {
            check_bodies_in::<T>(&self.gravity, x)?;
        }
        let pad = [[PAD_POSITION, PAD_POSITION, PAD_POSITION, 0.0]];
        self.tiles
            .upload_sources(x.len(), |q| [[x[q][0], x[q][1], x[q][2], m[q]]], pad)?;
        let at = targets.unwrap_or(x);
        self.tiles
            .upload_targets(at.len(), |i| [[at[i][0], at[i][1], at[i][2], 0.0]])?;
        Ok(())
    }

    /// The kernel and its ε² for this evaluator's softening: `grav_newton` at ε = 0, else
    /// `grav_softened`; an error when ε > 0 but ε² is below the smallest normal `T` (the
    /// kernel would see ε = 0).
    fn tile_launch(&self) -> Result<TileLaunch<T>, CudaError> {
        let eps2 = softening_squared_in::<T>(&self.gravity)?;
        let kernel = if self.gravity.softening == 0.0 { 1 } else { 0 };
        Ok(TileLaunch {
            kernel,
            components: GRAVITY_OUTPUTS,
            param: eps2,
        })
    }

    /// Queues one evaluation on the uploaded bodies and targets (asynchronous; the output is
    /// poisoned first).
    pub fn launch(&mut self) -> Result<(), CudaError> {
        let launch = self.tile_launch()?;
        self.tiles.launch(launch)
    }

    /// Waits for the last launch and copies its output to the host: φ, a_x, a_y, a_z per target,
    /// checked fully written and finite.
    pub fn download(&mut self) -> Result<&[T], CudaError> {
        self.tiles.download()
    }

    /// Times `repeats` evaluations with CUDA events around the kernel launches, after one
    /// untimed warm-up; milliseconds per evaluation, in order. The last output is downloaded
    /// and checked ([`CudaDirectGravityOf::output`] reads it).
    pub fn time_launches(&mut self, repeats: usize) -> Result<Vec<f64>, CudaError> {
        let launch = self.tile_launch()?;
        self.tiles.time_launches(launch, repeats)
    }

    /// The device form, with the arguments of [`crate::summation::fmm::CudaFmmGravity`]'s: the
    /// bodies as targets, their f64 positions (3 each) and masses on this engine's GPU, φ and a
    /// into f64 device arrays (grown as needed), queued on the GPU's stream (the host does not
    /// wait). The
    /// bodies are packed on the device as [`CudaDirectGravityOf::upload`] packs them on the
    /// host, so both forms give the same values bit for bit. Nothing is checked on the device:
    /// the caller checks the bodies (at ε = 0, none coincident in `T`) and the results' finiteness
    /// (an unwritten output is NaN: the tile output is poisoned before each launch).
    pub fn evaluate_resident(
        &mut self,
        x: &DeviceBuffer<f64>,
        mass: &DeviceBuffer<f64>,
        n: usize,
        phi: &mut DeviceBuffer<f64>,
        acc: &mut DeviceBuffer<f64>,
    ) -> SumResult {
        let launch_of = self.tile_launch()?;
        if n == 0 {
            return Ok(());
        }
        let (padded, (stream, src)) = self.tiles.reserve_sources(n)?;
        let src_addr = src[0].addr(stream);
        let (stream, tgt) = self.tiles.reserve_targets(n, false)?;
        let tgt_addr = tgt[0].addr(stream);
        let stream = stream.clone();
        let (n_i, padded_i) = (n as i32, padded as i32);
        // SAFETY: grav_pack(const double* x, const double* m, int n, int padded, real4* src,
        // real4* tgt): x holds 3·n doubles and m n (the caller's device buffers), src 4·padded
        // reals (reserve_sources()) and tgt 4·n (reserve_targets()); the grid covers padded.
        launch!(stream, &self.pack, "grav_pack", cfg_n(padded);
            x.get(), mass.get(), &n_i, &padded_i, &src_addr, &tgt_addr)?;
        self.tiles.launch(launch_of)?;
        phi.ensure(&stream, n)?;
        acc.ensure(&stream, 3 * n)?;
        let (out, _) = self.tiles.output()?;
        // SAFETY: grav_unpack(const real* out, int nt, double* phi, double* acc): out holds
        // n·4 reals of the launch just queued (the engine's prepare() sized it), phi n doubles
        // and acc 3·n (ensured above); the grid covers n.
        launch!(stream, &self.unpack, "grav_unpack", cfg_n(n);
            out.get(), &n_i, phi.get_mut(), acc.get_mut())?;
        Ok(())
    }

    /// The last downloaded output as φ and a into `out` (resized).
    pub fn output(&self, out: &mut GravityEvaluation) {
        let d = self.tiles.last_output();
        let n = d.len() / GRAVITY_OUTPUTS;
        out.resize(n);
        for (i, w) in d.chunks_exact(GRAVITY_OUTPUTS).enumerate() {
            out.potential[i] = w[0].to_f64();
            out.acceleration[i] = [w[1].to_f64(), w[2].to_f64(), w[3].to_f64()];
        }
    }
}

impl<T: GpuReal> GravitySummation for CudaDirectGravityOf<T> {
    fn name(&self) -> String {
        format!("gravity direct {}", self.tiles.describe())
    }

    fn gravity(&self) -> PlummerGravity {
        self.gravity
    }

    fn evaluate_bodies(&mut self, work: GravityWork, out: &mut GravityEvaluation) -> SumResult {
        // `evaluate_gravity` has checked the bodies in f64.
        self.load(work.bodies, work.targets)?;
        self.launch()?;
        self.download()?;
        self.output(out);
        Ok(())
    }
}

/// The f64 reference: φ and a at `at` from every body by [`PlummerGravity::pair`] (the CPU
/// all-pairs loop, [`super::cpu::all_pairs`]; a pair at distance 0 adds nothing at ε = 0, as on
/// the GPU).
pub fn reference_gravity(
    gravity: &PlummerGravity,
    bodies: &Bodies,
    at: &[[f64; 3]],
) -> GravityEvaluation {
    let mut out = GravityEvaluation::default();
    out.resize(at.len());
    let answers = super::cpu::all_pairs(gravity, bodies.x, bodies.mass, at);
    crate::summation::interaction::store_gravity(&answers, &mut out);
    out
}

/// ε² in the GPU precision `T`, as the kernels take it: an error when ε > 0 but ε² underflows
/// `T` (the kernel would see ε = 0: the self pair's −m/ε lost, coincident bodies unguarded).
/// Shared by the all-pairs and FMM engines.
pub(crate) fn softening_squared_in<T: GpuReal>(gravity: &PlummerGravity) -> Result<T, CudaError> {
    let eps = gravity.softening;
    if eps == 0.0 {
        return Ok(T::zero());
    }
    let eps2 = T::from_f64(eps * eps);
    if eps2 < T::min_positive_value() {
        return Err(CudaError::Invalid(format!(
            "softening {eps}: its square underflows {} (use 0, or a softening of at least {:e})",
            T::PRECISION,
            T::min_positive_value().to_f64().sqrt()
        )));
    }
    Ok(eps2)
}

/// At ε = 0, refuses bodies apart in f64 that coincide once rounded to the GPU precision `T`
/// (their pair would be skipped as a self pair); any ε > 0 accepts every set. Shared by the
/// all-pairs and FMM engines.
pub(crate) fn check_bodies_in<T: GpuReal>(
    gravity: &PlummerGravity,
    x: &[[f64; 3]],
) -> Result<(), SummationError> {
    if gravity.softening > 0.0 || T::PRECISION == "f64" {
        return Ok(());
    }
    let rounded: Vec<[f64; 3]> = x
        .iter()
        .map(|p| p.map(|c| T::from_f64(c).to_f64()))
        .collect();
    gravity.check_bodies(&rounded).map_err(|e| match e {
        SummationError::BadSources(m) => {
            SummationError::BadSources(format!("in {}: {m}", T::PRECISION))
        }
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launch_code_names_the_declared_kernels() {
        let declared = super::super::tiles::declared_tile_kernels(&KERNELS);
        assert_eq!(declared, KERNEL_NAMES);
    }

    #[test]
    fn reference_skips_the_self_pair_only_without_softening() {
        let x = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]];
        let mass = [2.0, 3.0];
        let bodies = Bodies { x: &x, mass: &mass };
        let newton = PlummerGravity::new(0.0).unwrap();
        let r = reference_gravity(&newton, &bodies, &x);
        assert_eq!(r.potential, [-3.0, -2.0]);
        assert_eq!(r.acceleration, [[3.0, 0.0, 0.0], [-2.0, 0.0, 0.0]]);
        let soft = PlummerGravity::new(0.5).unwrap();
        let r = reference_gravity(&soft, &bodies, &x[..1]);
        let s = 1.25f64.sqrt();
        assert!((r.potential[0] - (-2.0 / 0.5 - 3.0 / s)).abs() < 1e-14);
        assert!((r.acceleration[0][0] - 3.0 / (s * s * s)).abs() < 1e-14);
    }
}
