//! Fast summation of pair interactions: sums Σ_q K(x_i − x_q; q) over sources q at targets x_i,
//! for the regularised Biot–Savart law of vortex particles and for Newtonian gravity with
//! Plummer softening ([`interaction`]: the [`interaction::PairInteraction`] the engines are
//! written over, and gravity's seam [`interaction::GravitySummation`]); one trait per
//! interaction, several implementations, and a planner that picks one from the case (in the
//! style of rustfft's planner).
//!
//! A [`Summation`] evaluates, at a set of targets, the velocity induced by a set of source
//! particles, optionally with the vortex stretching of target strengths or the full velocity
//! gradient (docs/physics.md §2), and the blob vorticity ω_h (for reinitialisation). The time stepper
//! and the diagnostics talk only to this trait, so a CPU loop, a GPU kernel, an Ewald sum, an FMM
//! or several GPUs can answer without the stepper knowing.
//!
//! # The device form
//!
//! The GPU-resident stepper (particles kept on the GPU between steps) and the GPU evaluators (all
//! pairs, Ewald, FMM) share a second, device-side form of the same seam: [`DeviceSources`] (f64
//! arrays on the GPU), [`DeviceTargets`], [`DeviceExtra`] and [`DeviceEvaluation`] (f64 device
//! buffers for the results), and the trait [`DeviceSummation`]. An evaluator that has it returns
//! it from [`Summation::device_form`] (default `None`: host form only). The device form computes
//! exactly what [`Summation::evaluate`] computes — the same kernels on the same values, the f64
//! inputs converted to the sums' f32 on the device — without copying particles or results
//! through the host. The caller's buffers must live on the evaluator's GPU
//! ([`DeviceSummation::gpu`]).
//!
//! **Queued on the GPU's stream.** A device-form call queues its work on the GPU's one stream
//! ([`Gpu::stream`]) and returns without waiting for it: the inputs are ready when the stream
//! reaches the call (whatever the caller queued before it has written them), and the results
//! are ready for whatever is queued after it. Neither side synchronises the host to hand work
//! over. An evaluator may still wait where it needs a value on the host (the GPU FMM copies
//! positions and cores down for its tree, and waits for its phase timings and for a due
//! accuracy check); every such wait goes through the [`Gpu`] and is counted
//! ([`Gpu::sync_counts`]).
//!
//! Implementations, one folder per method, one file per device:
//! [`direct::DirectFreeSpace`] (free space, all pairs, f64, rayon), [`direct::CudaDirect`] (all
//! pairs on a GPU, f32), [`ewald::EwaldPeriodic`] (periodic box, Ewald split, CPU f64),
//! [`ewald::CudaEwald`] (the same on a GPU, f32), [`fmm::FmmFreeSpace`] (free space, fast
//! multipoles, CPU f64) and [`fmm::CudaFmm`] (the same on a GPU: f64 expansions, f32 near field,
//! tree and lists built on the device). For gravity: [`direct::DirectGravity`] and
//! [`fmm::FmmGravity`] (CPU, f64, the same engines over [`interaction::PlummerGravity`]).
//! [`planner`] picks one from a registry (gravity: [`planner::plan_gravity`]);
//! [`verify`] measures any of them against a reference; [`cells`] (cell lists in the box),
//! [`lattice`] (blob vorticity on the lattice) and [`oracle`] (the Fourier-series oracle of
//! docs/physics.md §4) are shared by them and the tests.

pub mod cells;
pub mod direct;
pub mod ewald;
pub mod fmm;
pub mod interaction;
pub mod lattice;
pub mod oracle;
pub mod planner;
pub mod verify;

use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{CudaError, Gpu};
pub use crate::kernel::stretching_from_gradient;
use crate::kernel::StretchingScheme;
use std::sync::Arc;

/// The device-side pair kernel (docs/physics.md §2: g(ρ), G3, G5 with their series near 0, and the
/// velocity and stretching pair terms), written once in `kernels/common.cuh` and included by
/// both GPU families (`biot_savart.cu`, `ewald.cu`) as a named NVRTC header.
pub const PAIR_KERNEL_HEADER: (&str, &str) =
    ("common.cuh", include_str!("../../kernels/common.cuh"));

/// Which Biot–Savart summation the vortex solver uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvaluatorKind {
    /// `"direct"`: all pairs.
    Direct,
    /// `"ewald"`: Ewald splitting, short-range pairs plus a particle-mesh Fourier part (the
    /// default for the periodic box).
    Ewald,
    /// `"fmm"`: the fast multipole method (free space, and the periodic box on the CPU,
    /// docs/physics.md §8).
    Fmm,
    /// `"auto"`: the planner picks the cheaper method for the boundary on the run's device from
    /// its committed cost constants ([`planner::recipe`]; the periodic box's default).
    Auto,
}

impl EvaluatorKind {
    /// The TOML spelling: `"direct"`, `"ewald"`, `"fmm"` or `"auto"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            EvaluatorKind::Direct => "direct",
            EvaluatorKind::Ewald => "ewald",
            EvaluatorKind::Fmm => "fmm",
            EvaluatorKind::Auto => "auto",
        }
    }
}

impl EvaluatorKind {
    /// The kind of a TOML spelling ([`EvaluatorKind::as_str`]), `None` for any other.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Direct, Self::Ewald, Self::Fmm, Self::Auto]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for EvaluatorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the particles live.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Boundary {
    /// Unbounded space (vortex rings, tubes).
    FreeSpace,
    /// The periodic box [−L/2, L/2)^3; the velocity is the zero-mean periodic one (docs/physics.md §4).
    Periodic { length: f64 },
}

/// Source particles: positions, strengths, core radii (slices of a [`crate::particles::ParticleSet`]
/// or of any other storage).
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    pub x: &'a [[f64; 3]],
    pub alpha: &'a [[f64; 3]],
    pub sigma: &'a [f64],
}

impl<'a> Sources<'a> {
    pub fn of(p: &'a crate::particles::ParticleSet) -> Self {
        Self {
            x: &p.x,
            alpha: &p.alpha,
            sigma: &p.sigma,
        }
    }

    pub fn len(&self) -> usize {
        self.x.len()
    }

    pub fn is_empty(&self) -> bool {
        self.x.is_empty()
    }
}

/// What to evaluate at the targets besides the velocity.
#[derive(Debug, Clone, Copy)]
pub enum Extra<'a> {
    /// Velocity only.
    None,
    /// Stretching dα/dt of the given target strengths (one per target).
    Stretching {
        alpha: &'a [[f64; 3]],
        scheme: StretchingScheme,
    },
    /// The velocity gradient ∂u_i/∂x_j at each target.
    Gradient,
}

/// Results at the targets. Buffers are owned by the caller and reused between calls, so hot
/// loops do not allocate; only the parts that were asked for are written.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    pub velocity: Vec<[f64; 3]>,
    pub stretching: Vec<[f64; 3]>,
    pub gradient: Vec<[[f64; 3]; 3]>,
}

impl Evaluation {
    /// Sizes the buffers for `n` targets and the requested extra.
    pub fn resize_for(&mut self, n: usize, extra: &Extra) {
        self.velocity.resize(n, [0.0; 3]);
        match extra {
            Extra::None => {}
            Extra::Stretching { .. } => self.stretching.resize(n, [0.0; 3]),
            Extra::Gradient => self.gradient.resize(n, [[0.0; 3]; 3]),
        }
    }

    /// Sets the first `n` results of the velocity and the requested extra to zero (the answer
    /// when there are no sources).
    pub fn fill_zero(&mut self, n: usize, extra: &Extra) {
        self.velocity[..n].fill([0.0; 3]);
        match extra {
            Extra::None => {}
            Extra::Stretching { .. } => self.stretching[..n].fill([0.0; 3]),
            Extra::Gradient => self.gradient[..n].fill([[0.0; 3]; 3]),
        }
    }
}

/// Source particles resident on a GPU (the device form of [`Sources`]): f64 arrays on the
/// evaluator's GPU, positions and strengths 3 per particle (x, y, z), core radii 1.
#[derive(Clone, Copy)]
pub struct DeviceSources<'a> {
    pub x: &'a DeviceBuffer<f64>,
    pub alpha: &'a DeviceBuffer<f64>,
    pub sigma: &'a DeviceBuffer<f64>,
    /// Particles (the buffers may be longer).
    pub n: usize,
    /// The largest core radius, which the caller knows without reading the cores back (they
    /// change only by core spreading, the same for every particle, and by reinitialisation).
    pub sigma_max: f64,
    /// Whether every core radius equals `sigma_max` (then the Ewald real-space part is empty,
    /// as in the host form; otherwise every source enters it, those at σ_max with an exact zero).
    pub equal_cores: bool,
}

/// Where the device form evaluates.
#[derive(Clone, Copy)]
pub enum DeviceTargets<'a> {
    /// At the source positions (the time step).
    Sources,
    /// At `n` points, f64, 3 per point.
    Points { x: &'a DeviceBuffer<f64>, n: usize },
}

impl DeviceTargets<'_> {
    pub fn len(&self, sources: &DeviceSources) -> usize {
        match self {
            DeviceTargets::Sources => sources.n,
            DeviceTargets::Points { n, .. } => *n,
        }
    }
}

/// What the device form evaluates besides the velocity (as [`Extra`]).
#[derive(Clone, Copy)]
pub enum DeviceExtra<'a> {
    None,
    /// Stretching of the target strengths: `None` for the sources' own strengths (targets =
    /// sources), else f64, 3 per target.
    Stretching {
        alpha: Option<&'a DeviceBuffer<f64>>,
        scheme: StretchingScheme,
    },
    Gradient,
}

/// Results of the device form: f64 device buffers, 3 values per target for the velocity and
/// the stretching, 9 (row-major ∂u_i/∂x_j) for the gradient. Owned by the caller and reused;
/// the evaluator grows them as needed; only the parts asked for are written.
#[derive(Default)]
pub struct DeviceEvaluation {
    pub velocity: DeviceBuffer<f64>,
    pub stretching: DeviceBuffer<f64>,
    pub gradient: DeviceBuffer<f64>,
}

/// The sources and targets of a device-form sum, on the GPU.
#[derive(Clone, Copy)]
pub struct DevicePoints<'a> {
    pub sources: &'a DeviceSources<'a>,
    pub targets: &'a DeviceTargets<'a>,
}

/// One evaluation asked of a [`DeviceSummation`]: sources, targets and extra, all on the GPU.
#[derive(Clone, Copy)]
pub struct DeviceWork<'a> {
    pub sources: &'a DeviceSources<'a>,
    pub targets: &'a DeviceTargets<'a>,
    pub extra: &'a DeviceExtra<'a>,
}

/// The device form of [`Summation`] (see the module docs): every method is queued on the GPU's
/// stream after the work that wrote its inputs, and its outputs are ready for the work queued
/// after it; the host does not wait.
pub trait DeviceSummation {
    /// The GPU the inputs and outputs must live on.
    fn gpu(&self) -> &Arc<Gpu>;

    /// Velocity (and stretching or gradient) at the targets induced by the sources of `work`,
    /// into `out`.
    fn evaluate_on_device(&mut self, work: DeviceWork, out: &mut DeviceEvaluation) -> SumResult;

    /// Blob vorticity ω_h(x) = Σ_q α_q ζ_σq(x − x_q) at the targets from the sources of `at`
    /// (the device form of [`Summation::vorticity`]), 3 f64 per target into `out` (grown as
    /// needed).
    fn vorticity_on_device(&mut self, at: DevicePoints, out: &mut DeviceBuffer<f64>) -> SumResult;

    /// Blob vorticity at the nodes of the n³ lattice on [−π, π)³ ([`lattice::lattice_nodes`]
    /// order), 3 f64 per node into `out`, by a method that uses the lattice's structure (the
    /// device form of [`Summation::vorticity_on_lattice`]). `Ok(false)` when the evaluator has
    /// none for these sources (the caller then uses [`DeviceSummation::vorticity_on_device`]
    /// at the nodes); the default.
    fn vorticity_on_lattice_device(
        &mut self,
        _sources: &DeviceSources,
        _n: usize,
        _out: &mut DeviceBuffer<f64>,
    ) -> Result<bool, SummationError> {
        Ok(false)
    }
}

/// Why a summation could not be done.
#[derive(Debug, thiserror::Error)]
pub enum SummationError {
    #[error("sources are inconsistent: {0}")]
    BadSources(String),
    #[error("{what} has {got} entries but there are {expected} targets")]
    TargetMismatch {
        what: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("{0}")]
    Unsupported(String),
    /// The GPU failed (driver error, or an output not fully written).
    #[error("GPU: {0}")]
    Device(String),
    /// An evaluator's built-in comparison with the direct sum missed the requested accuracy
    /// (the FMM's check, [`fmm::check`]).
    #[error("{0}")]
    AccuracyCheck(String),
}

impl From<CudaError> for SummationError {
    fn from(e: CudaError) -> Self {
        SummationError::Device(e.to_string())
    }
}

/// The result of a summation (the answers are written into the caller's buffers).
pub type SumResult = Result<(), SummationError>;

/// One evaluation asked of a [`Summation`]: the sources, the points where the velocity is
/// wanted, and what else to compute there.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub sources: &'a Sources<'a>,
    pub targets: &'a [[f64; 3]],
    pub extra: Extra<'a>,
}

/// Velocity (and optionally stretching or gradient) at targets induced by sources, and the blob
/// vorticity at targets.
pub trait Summation: Send {
    /// A short description for logs and manifests, e.g. "direct free-space CPU f64".
    fn name(&self) -> String;

    /// The boundary condition this evaluator implements.
    fn boundary(&self) -> Boundary;

    /// Evaluates a [`Request`] into `out`: what an evaluator implements. Callers use
    /// [`Summation::evaluate`], which checks the inputs, sizes `out` and answers zero without
    /// sources before calling this, so an implementation may assume all three.
    fn evaluate_request(&mut self, req: Request, out: &mut Evaluation) -> SumResult;

    /// Evaluates at `targets` the velocity induced by `sources`, and `extra`; results go into
    /// `out` (resized as needed).
    fn evaluate(
        &mut self,
        sources: &Sources,
        targets: &[[f64; 3]],
        extra: Extra,
        out: &mut Evaluation,
    ) -> SumResult {
        if begin_evaluation(sources, targets, &extra, out)? {
            return Ok(());
        }
        self.evaluate_request(
            Request {
                sources,
                targets,
                extra,
            },
            out,
        )
    }

    /// The device form of this evaluator, when it has one (GPU evaluators): the same sums on
    /// particles that stay on the GPU. `None` by default.
    fn device_form(&mut self) -> Option<&mut dyn DeviceSummation> {
        None
    }

    /// The evaluator's built-in accuracy checks since the last call (the FMM's comparisons with
    /// the direct sum, [`fmm::AccuracyCheck`]), for the run log and the manifest. Empty by
    /// default.
    fn take_accuracy_checks(&mut self) -> Vec<fmm::AccuracyCheck> {
        Vec::new()
    }

    /// Blob vorticity ω_h(x) = Σ_q α_q ζ_σq(x − x_q) at `targets`.
    fn vorticity(
        &mut self,
        sources: &Sources,
        targets: &[[f64; 3]],
        out: &mut Vec<[f64; 3]>,
    ) -> Result<(), SummationError>;

    /// Blob vorticity at the nodes of the n³ lattice on [−π, π)³ ([`lattice::lattice_nodes`]
    /// order), the sums of reinitialisation. By default [`Summation::vorticity`] at those nodes;
    /// an evaluator may use the lattice's structure ([`lattice::lattice_vorticity`]).
    fn vorticity_on_lattice(
        &mut self,
        src: &Sources,
        n: usize,
        out: &mut Vec<[f64; 3]>,
    ) -> SumResult {
        self.vorticity(src, &lattice::lattice_nodes(n), out)
    }
}

/// Checks the inputs, sizes `out` for the targets and the extra, and when there are no sources
/// writes the answer (zeros): `true` when nothing is left to compute. The common start of every
/// [`Summation::evaluate`].
pub(crate) fn begin_evaluation(
    sources: &Sources,
    targets: &[[f64; 3]],
    extra: &Extra,
    out: &mut Evaluation,
) -> Result<bool, SummationError> {
    check_inputs(sources, targets, extra)?;
    out.resize_for(targets.len(), extra);
    if sources.is_empty() {
        out.fill_zero(targets.len(), extra);
        return Ok(true);
    }
    Ok(false)
}

/// The same for [`Summation::vorticity`]: checks, sizes `out`, zeros when there are no sources.
pub(crate) fn begin_vorticity(
    sources: &Sources,
    targets: &[[f64; 3]],
    out: &mut Vec<[f64; 3]>,
) -> Result<bool, SummationError> {
    check_inputs(sources, targets, &Extra::None)?;
    out.resize(targets.len(), [0.0; 3]);
    if sources.is_empty() {
        out.fill([0.0; 3]);
        return Ok(true);
    }
    Ok(false)
}

/// Checks that sources and the per-target inputs have consistent lengths.
pub(crate) fn check_inputs(
    sources: &Sources,
    targets: &[[f64; 3]],
    extra: &Extra,
) -> Result<(), SummationError> {
    if sources.alpha.len() != sources.x.len() || sources.sigma.len() != sources.x.len() {
        return Err(SummationError::BadSources(format!(
            "{} positions, {} strengths, {} core radii",
            sources.x.len(),
            sources.alpha.len(),
            sources.sigma.len()
        )));
    }
    if let Extra::Stretching { alpha, .. } = extra {
        if alpha.len() != targets.len() {
            return Err(SummationError::TargetMismatch {
                what: "target strengths",
                got: alpha.len(),
                expected: targets.len(),
            });
        }
    }
    Ok(())
}

/// σ_min, σ_max of the sources, checking that every core radius is positive and finite.
pub(crate) fn sigma_range(sources: &Sources) -> Result<(f64, f64), SummationError> {
    let mut lo = f64::INFINITY;
    let mut hi = 0.0f64;
    for &s in sources.sigma {
        if !(s > 0.0 && s.is_finite()) {
            return Err(SummationError::BadSources(format!(
                "core radius {s} (must be positive and finite)"
            )));
        }
        lo = lo.min(s);
        hi = hi.max(s);
    }
    Ok((lo, hi))
}
