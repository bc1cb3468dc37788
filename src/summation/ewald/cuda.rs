//! The periodic Ewald evaluator on the GPU, f32: the method of [`super`] (Ewald split,
//! particle-mesh smooth part with the Kaiser–Bessel window, cell-list real-space part, direct
//! blob vorticity) with the same parameter rules and planner; only the cost model that picks the
//! cheapest (η, u) is the GPU's ([`GPU_COSTS`]), and the grid cap comes from the GPU's free
//! memory. Kernels: `kernels/ewald.cu`, driven by [`super::engine`].
//!
//! Precision: positions are wrapped and located in f64 on the device, sums run in f32, results
//! come back as f64. The f32 rounding of the sums (about [`F32_ROUNDING`] relative in the
//! stretching and the gradient, whose mesh part is the derivative of the gather) takes that
//! share of the requested accuracy: the method is planned at ε − [`F32_ROUNDING`]
//! ([`gpu_planning_accuracy`]), so that the delivered relative L2 error against the CPU f64 sum
//! stays ≤ ε (tests/gpu_ewald.rs checks 1e-3, 1e-4 and 1e-5). Requests finer than
//! [`F32_ACCURACY_FLOOR`] are refused at planning, naming the floor (as the GPU FMM does).

use super::engine::{
    DevicePointers, EwaldDevice, EwaldInputs, GpuEwaldTimings, GpuExtra, VorticityJob, GPU_COSTS,
};
use super::params::{
    evaluation_setup, max_grid_for_memory, plan, EwaldParameters, GPU_BYTES_PER_GRID_POINT,
};
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{CudaError, Gpu};
use crate::kernel::StretchingScheme;
use crate::summation::cells::VORTICITY_CUTOFF;
use crate::summation::{
    begin_vorticity, sigma_range, Boundary, DeviceEvaluation, DeviceExtra, DevicePoints,
    DeviceSources, DeviceSummation, DeviceTargets, DeviceWork, Evaluation, Extra, Request, Sources,
    SumResult, Summation, SummationError,
};
use std::f64::consts::TAU;
use std::sync::Arc;

/// The f32 rounding of the GPU sums, relative L2 (stretching and gradient; the velocity's is
/// smaller): the share of the requested accuracy the planner leaves to it.
pub const F32_ROUNDING: f64 = 5e-6;
/// The finest accuracy the GPU evaluator accepts: twice [`F32_ROUNDING`] (the method then gets
/// the other half). Finer requests are refused ([`gpu_planning_accuracy`]).
pub const F32_ACCURACY_FLOOR: f64 = 1e-5;

/// The accuracy the GPU evaluator plans the method at for a request of `accuracy`:
/// ε − [`F32_ROUNDING`]; an error naming the floor when ε < [`F32_ACCURACY_FLOOR`] (or
/// ε ∉ (0, 1)).
pub fn gpu_planning_accuracy(accuracy: f64) -> Result<f64, SummationError> {
    if !(accuracy > 0.0 && accuracy < 1.0) {
        return Err(SummationError::Unsupported(format!(
            "GPU Ewald: accuracy {accuracy} must be in ({F32_ACCURACY_FLOOR:e}, 1)"
        )));
    }
    if accuracy < F32_ACCURACY_FLOOR * (1.0 - 1e-12) {
        return Err(SummationError::Unsupported(format!(
            "GPU Ewald: accuracy {accuracy:e} is finer than the GPU (f32) evaluator can deliver \
             (floor {F32_ACCURACY_FLOOR:e}: its f32 rounding is about {F32_ROUNDING:e}); ask for \
             at least {F32_ACCURACY_FLOOR:e}, or use the CPU (f64) evaluator"
        )));
    }
    Ok(accuracy - F32_ROUNDING)
}

/// Ewald-split periodic evaluator on the GPU, box [−π, π)^3.
pub struct CudaEwald {
    accuracy: f64,
    fixed: Option<EwaldParameters>,
    params: Option<EwaldParameters>,
    /// Largest grid side the planner may choose (from the GPU's free memory at construction).
    max_grid: usize,
    dev: EwaldDevice,
    sel: Vec<i32>,
}

impl std::fmt::Debug for CudaEwald {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEwald")
            .field("accuracy", &self.accuracy)
            .field("params", &self.params)
            .field("device", &self.dev)
            .finish()
    }
}

/// Same slice (the time stepper passes the particles' own positions and strengths).
fn same<T>(a: &[T], b: &[T]) -> bool {
    a.as_ptr() == b.as_ptr() && a.len() == b.len()
}

impl CudaEwald {
    /// An evaluator with relative accuracy `accuracy` on `gpu` (kernels compiled on first use
    /// per GPU). Errors when NVRTC or cuFFT is not usable, or when the accuracy is finer than
    /// [`F32_ACCURACY_FLOOR`] or not below 1 (the message names the floor).
    pub fn new(gpu: Arc<Gpu>, accuracy: f64) -> Result<Self, CudaError> {
        gpu_planning_accuracy(accuracy).map_err(|e| CudaError::Invalid(e.to_string()))?;
        // The GPU's total memory, not its free memory, so that the plan (and so the results)
        // do not depend on what else runs on the GPU when a run starts or resumes.
        let max_grid = max_grid_for_memory(
            Some(gpu.info().total_memory_bytes as u64),
            GPU_BYTES_PER_GRID_POINT,
        );
        Ok(Self {
            accuracy,
            fixed: None,
            params: None,
            max_grid,
            dev: EwaldDevice::new(gpu)?,
            sel: Vec::new(),
        })
    }

    /// An evaluator with fixed parameters (as [`super::EwaldPeriodic::with_parameters`]).
    pub fn with_parameters(gpu: Arc<Gpu>, params: EwaldParameters) -> Result<Self, CudaError> {
        let mut e = Self::new(gpu, params.accuracy)?;
        e.fixed = Some(params);
        Ok(e)
    }

    /// The same evaluator with the grid side capped at `max_grid`.
    pub fn with_max_grid(mut self, max_grid: usize) -> Self {
        self.max_grid = max_grid;
        self
    }

    pub fn accuracy(&self) -> f64 {
        self.accuracy
    }

    /// The accuracy the method is planned at ([`gpu_planning_accuracy`]; the request was
    /// checked at construction).
    fn plan_accuracy(&self) -> Result<f64, SummationError> {
        gpu_planning_accuracy(self.accuracy)
    }

    /// The parameters of the last evaluation, `None` before the first.
    pub fn parameters(&self) -> Option<&EwaldParameters> {
        self.params.as_ref()
    }

    /// Device milliseconds of the phases of the last evaluation.
    pub fn timings(&self) -> GpuEwaldTimings {
        self.dev.timings()
    }

    pub fn device(&self) -> &EwaldDevice {
        &self.dev
    }
}

fn gpu_extra(scheme: StretchingScheme) -> GpuExtra {
    match scheme {
        StretchingScheme::Classical => GpuExtra::Classical,
        StretchingScheme::Transposed => GpuExtra::Transposed,
    }
}

impl DeviceSummation for CudaEwald {
    fn gpu(&self) -> &Arc<Gpu> {
        self.dev.gpu()
    }

    /// The host form's evaluation on device buffers: the same plan (from `sigma_max`, with the
    /// real-space selection empty for equal cores and all sources otherwise, see
    /// [`DeviceSources::equal_cores`]), the same kernels; the inputs are read where they are.
    fn evaluate_on_device(&mut self, work: DeviceWork, out: &mut DeviceEvaluation) -> SumResult {
        let (sources, targets, extra) = (work.sources, work.targets, work.extra);
        let nt = targets.len(sources);
        let (ns, sigma_max) = (sources.n, sources.sigma_max);
        if !(sigma_max > 0.0 && sigma_max.is_finite()) {
            return Err(SummationError::BadSources(format!(
                "core radius {sigma_max} (must be positive and finite)"
            )));
        }
        let want_grad = !matches!(extra, DeviceExtra::None);
        let below = if sources.equal_cores { 0 } else { ns };
        if self.fixed.is_some() {
            return Err(SummationError::Unsupported(
                "GPU Ewald: fixed parameters are for the host form only".into(),
            ));
        }
        let params = match &self.fixed {
            Some(f) => f.clone(),
            None => plan(
                self.plan_accuracy()?,
                sigma_max,
                below,
                ns,
                nt,
                want_grad,
                &GPU_COSTS,
                self.max_grid,
            )?,
        };
        let n_selected = if params.eta == sigma_max { below } else { ns };
        let (gextra, target_alpha, ex_buf) = match extra {
            DeviceExtra::None => (GpuExtra::None, None, None),
            DeviceExtra::Stretching { alpha, scheme } => (
                gpu_extra(*scheme),
                Some(alpha.unwrap_or(sources.alpha)),
                Some(&mut out.stretching),
            ),
            DeviceExtra::Gradient => (GpuExtra::Gradient, None, Some(&mut out.gradient)),
        };
        let stream = self.dev.stream().clone();
        out.velocity.ensure(&stream, 3 * nt)?;
        let ex_addr = match ex_buf {
            Some(b) => {
                b.ensure(&stream, gextra.components() * nt)?;
                b.addr(&stream)
            }
            None => 0,
        };
        if ns == 0 || nt == 0 {
            out.velocity.zero(&stream, 3 * nt)?;
            self.params = Some(params);
            return Ok(());
        }
        let ptrs = DevicePointers {
            x: sources.x.addr(&stream),
            alpha: sources.alpha.addr(&stream),
            sigma: sources.sigma.addr(&stream),
            targets: match targets {
                DeviceTargets::Sources => None,
                DeviceTargets::Points { x, .. } => Some(x.addr(&stream)),
            },
            target_alpha: target_alpha.map_or(0, |a| a.addr(&stream)),
            selected: 0,
            n_sources: ns,
            n_targets: nt,
            n_selected,
            u_out: out.velocity.addr(&stream),
            ex_out: ex_addr,
        };
        self.dev.evaluate_device(&params, &ptrs, gextra)?;
        self.params = Some(params);
        Ok(())
    }

    /// The host form's vorticity sums ([`Summation::vorticity`]) on device buffers.
    fn vorticity_on_device(&mut self, at: DevicePoints, out: &mut DeviceBuffer<f64>) -> SumResult {
        let DevicePoints { sources, targets } = at;
        let nt = targets.len(sources);
        let sigma_max = sources.sigma_max;
        if !(sigma_max > 0.0 && sigma_max.is_finite()) {
            return Err(SummationError::BadSources(format!(
                "core radius {sigma_max} (must be positive and finite)"
            )));
        }
        let stream = self.dev.stream().clone();
        out.ensure(&stream, 3 * nt)?;
        if sources.n == 0 || nt == 0 {
            return Ok(out.zero(&stream, 3 * nt)?);
        }
        let x = sources.x.addr(&stream);
        let t = match targets {
            DeviceTargets::Sources => x,
            DeviceTargets::Points { x, .. } => x.addr(&stream),
        };
        let src = [x, sources.alpha.addr(&stream), sources.sigma.addr(&stream)];
        let w = out.addr(&stream);
        Ok(self.dev.vorticity_device(&VorticityJob {
            sources: src,
            ns: sources.n,
            sigma_max,
            cutoff: VORTICITY_CUTOFF,
            targets: t,
            nt,
            w_out: w,
        })?)
    }

    /// The separable lattice sum ([`EwaldDevice::lattice_vorticity_device`]), the GPU form of
    /// the CPU evaluator's `vorticity_on_lattice`.
    fn vorticity_on_lattice_device(
        &mut self,
        sources: &DeviceSources,
        n: usize,
        out: &mut DeviceBuffer<f64>,
    ) -> Result<bool, SummationError> {
        let sigma_max = sources.sigma_max;
        if sources.n == 0 || !(sigma_max > 0.0 && sigma_max.is_finite()) {
            return Ok(false);
        }
        let stream = self.dev.stream().clone();
        out.ensure(&stream, 3 * n * n * n)?;
        let src = [
            sources.x.addr(&stream),
            sources.alpha.addr(&stream),
            sources.sigma.addr(&stream),
        ];
        let w = out.addr(&stream);
        Ok(self
            .dev
            .lattice_vorticity_device(src, sources.n, sigma_max, VORTICITY_CUTOFF, n, w)?)
    }
}

impl Summation for CudaEwald {
    fn device_form(&mut self) -> Option<&mut dyn DeviceSummation> {
        Some(self)
    }

    fn name(&self) -> String {
        format!(
            "Ewald periodic CUDA f32 (accuracy {:e}) on {}",
            self.accuracy,
            self.dev.gpu().info().name
        )
    }

    fn boundary(&self) -> Boundary {
        Boundary::Periodic { length: TAU }
    }

    fn evaluate_request(&mut self, req: Request, out: &mut Evaluation) -> SumResult {
        let (sources, targets, extra) = (req.sources, req.targets, req.extra);
        let nt = targets.len();
        let want_grad = !matches!(extra, Extra::None);
        let (params, selected) = evaluation_setup(
            self.plan_accuracy()?,
            self.fixed.as_ref(),
            sources,
            nt,
            want_grad,
            &GPU_COSTS,
            self.max_grid,
        )?;
        if nt == 0 {
            self.params = Some(params);
            return Ok(());
        }
        let all = selected.len() == sources.len();
        self.sel.clear();
        if !all {
            self.sel.extend(selected.iter().map(|&q| q as i32));
        }
        let (gextra, target_alpha) = match extra {
            Extra::None => (GpuExtra::None, None),
            Extra::Stretching { alpha, scheme } => (gpu_extra(scheme), Some(alpha)),
            Extra::Gradient => (GpuExtra::Gradient, None),
        };
        let inp = EwaldInputs {
            x: sources.x.as_flattened(),
            alpha: sources.alpha.as_flattened(),
            sigma: sources.sigma,
            targets: targets.as_flattened(),
            targets_are_sources: same(targets, sources.x),
            target_alpha: target_alpha.map(|a| a.as_flattened()),
            target_alpha_is_alpha: target_alpha.is_some_and(|a| same(a, sources.alpha)),
            selected: if all { None } else { Some(&self.sel) },
            n_selected: selected.len(),
        };
        let Evaluation {
            velocity,
            stretching,
            gradient,
        } = out;
        let ex_out: &mut [f64] = match extra {
            Extra::None => &mut [],
            Extra::Stretching { .. } => stretching[..nt].as_flattened_mut(),
            Extra::Gradient => gradient[..nt].as_flattened_mut().as_flattened_mut(),
        };
        self.dev.evaluate(
            &params,
            &inp,
            gextra,
            velocity[..nt].as_flattened_mut(),
            ex_out,
        )?;
        tracing::debug!("GPU Ewald: {params} ; {:?}", self.dev.timings());
        self.params = Some(params);
        Ok(())
    }

    fn vorticity(&mut self, src: &Sources, at: &[[f64; 3]], out: &mut Vec<[f64; 3]>) -> SumResult {
        let (sources, targets) = (src, at);
        if begin_vorticity(sources, targets, out)? {
            return Ok(());
        }
        let (_, sigma_max) = sigma_range(sources)?;
        if targets.is_empty() {
            return Ok(());
        }
        Ok(self.dev.vorticity(
            sources.x.as_flattened(),
            sources.alpha.as_flattened(),
            sources.sigma,
            sigma_max,
            VORTICITY_CUTOFF,
            targets.as_flattened(),
            same(targets, sources.x),
            out.as_flattened_mut(),
        )?)
    }
}
