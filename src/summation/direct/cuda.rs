//! All-pairs free-space summation on the GPU (`kernels/biot_savart.cu`), behind the
//! [`Summation`] trait: the GPU counterpart of [`super::DirectFreeSpace`].
//!
//! Inputs are the same f64 slices; they are rounded to the device precision (f32 for
//! [`CudaDirect`], f64 for the reference build [`CudaDirectOf<f64>`]) and the results converted
//! back. Device buffers stay allocated between calls and grow only when N grows; every output
//! is poisoned before the launch and checked fully written after it.

use super::all_pairs::{AllPairs, Mode};
use super::tiles::{GpuReal, KernelConfig};
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{CudaError, Gpu};
use crate::kernel::StretchingScheme;
use crate::summation::{
    begin_vorticity, Boundary, DeviceEvaluation, DeviceExtra, DevicePoints, DeviceSources,
    DeviceSummation, DeviceTargets, DeviceWork, Evaluation, Extra, Request, Sources, SumResult,
    Summation,
};
use std::sync::Arc;

/// All-pairs evaluation in unbounded space on the GPU, in precision `T`.
#[derive(Debug)]
pub struct CudaDirectOf<T: GpuReal> {
    engine: AllPairs<T>,
}

/// The production GPU evaluator: f32 on the device.
pub type CudaDirect = CudaDirectOf<f32>;

impl<T: GpuReal> CudaDirectOf<T> {
    /// The evaluator on `gpu` with the default launch configuration; an error (never a panic)
    /// when the kernels cannot be compiled or loaded.
    pub fn new(gpu: Arc<Gpu>) -> Result<Self, CudaError> {
        Self::with_config(gpu, KernelConfig::default())
    }

    pub fn with_config(gpu: Arc<Gpu>, config: KernelConfig) -> Result<Self, CudaError> {
        Ok(CudaDirectOf {
            engine: AllPairs::new(gpu, config)?,
        })
    }

    /// The device engine (uploads, launches, timing).
    pub fn engine(&mut self) -> &mut AllPairs<T> {
        &mut self.engine
    }
}

/// The kernel of a stretching scheme.
fn stretching_mode(scheme: StretchingScheme) -> Mode {
    match scheme {
        StretchingScheme::Classical => Mode::Classical,
        StretchingScheme::Transposed => Mode::Transposed,
    }
}

/// Packs device-resident sources and targets (with target strengths `talpha` for stretching)
/// into the engine, as [`AllPairs::upload_sources`] and [`AllPairs::upload_targets`] do from
/// the host.
fn pack_on_device<T: GpuReal>(
    e: &mut AllPairs<T>,
    sources: &DeviceSources,
    targets: &DeviceTargets,
    talpha: Option<&DeviceBuffer<f64>>,
) -> SumResult {
    let stream = e.stream().clone();
    let x = sources.x.addr(&stream);
    e.pack_sources_on_device(
        x,
        sources.alpha.addr(&stream),
        sources.sigma.addr(&stream),
        sources.n,
    )?;
    let tx = match targets {
        DeviceTargets::Sources => x,
        DeviceTargets::Points { x, .. } => x.addr(&stream),
    };
    let ta = talpha.map_or(0, |a| a.addr(&stream));
    Ok(e.pack_targets_on_device(tx, ta, targets.len(sources))?)
}

impl<T: GpuReal> DeviceSummation for CudaDirectOf<T> {
    fn gpu(&self) -> &Arc<Gpu> {
        self.engine.gpu()
    }

    /// The host form's launches on device-resident particles: the f64 inputs are packed and
    /// rounded on the GPU exactly as the host packs them, so the sums are bit-identical to
    /// [`Summation::evaluate`]'s.
    fn evaluate_on_device(&mut self, work: DeviceWork, out: &mut DeviceEvaluation) -> SumResult {
        let (sources, targets, extra) = (work.sources, work.targets, work.extra);
        let e = &mut self.engine;
        let stream = e.stream().clone();
        let nt = targets.len(sources);
        let (mode, talpha) = match extra {
            DeviceExtra::None => (Mode::Velocity, None),
            DeviceExtra::Stretching { alpha, scheme } => (
                stretching_mode(*scheme),
                Some(alpha.unwrap_or(sources.alpha)),
            ),
            DeviceExtra::Gradient => (Mode::Gradient, None),
        };
        pack_on_device(e, sources, targets, talpha)?;
        e.launch(mode)?;
        out.velocity.ensure(&stream, 3 * nt)?;
        let ex = match mode {
            Mode::Classical | Mode::Transposed => Some(&mut out.stretching),
            Mode::Gradient => Some(&mut out.gradient),
            Mode::Velocity | Mode::Vorticity => None,
        };
        let ex_addr = match ex {
            Some(b) => {
                b.ensure(&stream, (mode.components() - 3) * nt)?;
                b.addr(&stream)
            }
            None => 0,
        };
        Ok(e.unpack_on_device(out.velocity.addr(&stream), ex_addr)?)
    }

    /// The host form's vorticity launch ([`Summation::vorticity`]) on device buffers.
    fn vorticity_on_device(&mut self, at: DevicePoints, out: &mut DeviceBuffer<f64>) -> SumResult {
        let DevicePoints { sources, targets } = at;
        let e = &mut self.engine;
        let stream = e.stream().clone();
        let nt = targets.len(sources);
        pack_on_device(e, sources, targets, None)?;
        e.launch(Mode::Vorticity)?;
        out.ensure(&stream, 3 * nt)?;
        Ok(e.unpack_on_device(out.addr(&stream), 0)?)
    }
}

impl<T: GpuReal> Summation for CudaDirectOf<T> {
    fn device_form(&mut self) -> Option<&mut dyn DeviceSummation> {
        Some(self)
    }

    fn name(&self) -> String {
        format!("direct free-space {}", self.engine.describe())
    }

    fn boundary(&self) -> Boundary {
        Boundary::FreeSpace
    }

    fn evaluate_request(&mut self, req: Request, out: &mut Evaluation) -> SumResult {
        let (sources, targets, extra) = (req.sources, req.targets, req.extra);
        let (mode, alpha) = match extra {
            Extra::None => (Mode::Velocity, None),
            Extra::Stretching { alpha, scheme } => (stretching_mode(scheme), Some(alpha)),
            Extra::Gradient => (Mode::Gradient, None),
        };
        let e = &mut self.engine;
        e.upload_sources(sources)?;
        e.upload_targets(targets, alpha)?;
        e.launch(mode)?;
        let d = e.download()?;
        let nc = mode.components();
        let v = |i: usize, c: usize| d[i * nc + c].to_f64();
        for i in 0..targets.len() {
            out.velocity[i] = [v(i, 0), v(i, 1), v(i, 2)];
        }
        match mode {
            Mode::Classical | Mode::Transposed => {
                for i in 0..targets.len() {
                    out.stretching[i] = [v(i, 3), v(i, 4), v(i, 5)];
                }
            }
            Mode::Gradient => {
                for i in 0..targets.len() {
                    out.gradient[i] =
                        std::array::from_fn(|r| std::array::from_fn(|c| v(i, 3 + 3 * r + c)));
                }
            }
            Mode::Velocity | Mode::Vorticity => {}
        }
        Ok(())
    }

    fn vorticity(&mut self, src: &Sources, at: &[[f64; 3]], out: &mut Vec<[f64; 3]>) -> SumResult {
        let (sources, targets) = (src, at);
        if begin_vorticity(sources, targets, out)? {
            return Ok(());
        }
        let e = &mut self.engine;
        e.upload_sources(sources)?;
        e.upload_targets(targets, None)?;
        e.launch(Mode::Vorticity)?;
        let d = e.download()?;
        out.clear();
        out.extend(
            d.chunks_exact(3)
                .map(|w| [w[0].to_f64(), w[1].to_f64(), w[2].to_f64()]),
        );
        Ok(())
    }
}
