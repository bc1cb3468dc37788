//! Picks a gravity run's force method (all pairs or the FMM) from N, the device and the accuracy,
//! and builds its leapfrog: [`super::resident::ResidentLeapfrog`] on a GPU,
//! [`super::host::HostLeapfrog`] on the CPU.
//!
//! `auto` takes the cheaper of the two by the committed cost rules below (seconds per force
//! evaluation), measured by `vpm bench gravity` (docs/performance.md, "Gravity").

use super::bodies::BodySet;
use super::host::HostLeapfrog;
use super::resident::ResidentLeapfrog;
use super::stepper::BodyStepper;
use super::GravityError;
use crate::device::Device;
use crate::summation::interaction::PlummerGravity;
use crate::summation::planner::{plan_gravity, EvaluatorOptions};
use crate::summation::EvaluatorKind;

/// CPU all pairs, f64: seconds per pair on one core (the run divides by the threads). Measured by
/// `vpm bench gravity --n 1e3,1e4` on the 2-core development machine (docs/performance.md).
pub const CPU_DIRECT_SECONDS_PER_PAIR: f64 = 3.4e-9;
/// CPU FMM, f64: seconds per body on one core at accuracy 1e-4, by the same bench: the two meet
/// near N = 11 000 on the CPU. (`vpm bench gravity --device cpu` prints both CPU constants from
/// its rows.)
pub const CPU_FMM_SECONDS_PER_BODY: f64 = 3.85e-5;
/// GPU all pairs (f32 tiles, one H100): seconds per pair. Measured by `vpm bench gravity
/// --device cuda` on one H100 (t / N² at N = 1e6: 1.97e12 interactions/s; docs/performance.md).
pub const GPU_DIRECT_SECONDS_PER_PAIR: f64 = 5.08e-13;
/// GPU FMM (one H100) at accuracy 1e-4: seconds per body, plus a fixed cost per evaluation.
/// Measured by `vpm bench gravity --device cuda` on one H100 (the slope of its least-squares line
/// t = a + b N over the sizes).
pub const GPU_FMM_SECONDS_PER_BODY: f64 = 1.87e-7;
/// The GPU FMM's fixed cost per evaluation (tree levels, launches), seconds. Measured by `vpm
/// bench gravity --device cuda` on one H100 (the intercept of the same line).
pub const GPU_FMM_SECONDS_FIXED: f64 = 1.26e-2;

/// Host bytes per body of the host leapfrog: the bodies (58 B) and their trial copy, φ and a
/// and their trial copy (32 B each), the diagnostics' copies at outputs.
pub const HOST_BYTES_PER_BODY: u64 = 320;
/// Extra host bytes per body of the CPU FMM (tree, sorted copies, expansions).
pub const CPU_FMM_BYTES_PER_BODY: u64 = 400;
/// Device bytes per body of the GPU leapfrog (f64 bodies, trial state, φ and a, the all-pairs
/// engine's f32 records).
pub const GPU_BYTES_PER_BODY: u64 = 260;
/// Extra device bytes per body of the GPU FMM (tree, lists, expansions).
pub const GPU_FMM_BYTES_PER_BODY: u64 = 600;

/// (host, device) bytes of a gravity run of `n` bodies on `device`, with the FMM or all pairs.
pub fn memory_bytes(n: u64, fmm: bool, device: &Device) -> (u64, u64) {
    match device {
        Device::Cpu => (
            n * (HOST_BYTES_PER_BODY + if fmm { CPU_FMM_BYTES_PER_BODY } else { 0 }),
            0,
        ),
        // The host holds the bodies at outputs and checkpoints.
        Device::Cuda(_) | Device::Group(_) => (
            n * HOST_BYTES_PER_BODY,
            n * (GPU_BYTES_PER_BODY + if fmm { GPU_FMM_BYTES_PER_BODY } else { 0 }),
        ),
    }
}

/// The method a gravity run uses and why.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodChoice {
    /// `Direct` or `Fmm`.
    pub method: EvaluatorKind,
    /// Estimated seconds per force evaluation of the chosen method.
    pub seconds: f64,
    /// For `auto`: both estimates in words, for the log, `vpm check` and the manifest.
    pub reason: Option<String>,
}

/// Estimated seconds per evaluation of `method` for `n` bodies on `device` with `threads` CPU
/// threads.
pub fn seconds_per_evaluation(
    method: EvaluatorKind,
    n: usize,
    device: &Device,
    threads: usize,
) -> f64 {
    let n = n as f64;
    let threads = threads.max(1) as f64;
    match (method, device) {
        (EvaluatorKind::Fmm, Device::Cpu) => CPU_FMM_SECONDS_PER_BODY * n / threads,
        (EvaluatorKind::Fmm, Device::Cuda(_) | Device::Group(_)) => {
            GPU_FMM_SECONDS_FIXED + GPU_FMM_SECONDS_PER_BODY * n
        }
        (_, Device::Cpu) => CPU_DIRECT_SECONDS_PER_PAIR * n * n / threads,
        (_, Device::Cuda(_) | Device::Group(_)) => GPU_DIRECT_SECONDS_PER_PAIR * n * n,
    }
}

/// The method for `requested` (`Auto`, `Direct` or `Fmm`): `Auto` takes the cheaper by
/// [`seconds_per_evaluation`]; anything else is refused naming what is allowed.
pub fn choose_method(
    requested: EvaluatorKind,
    n: usize,
    device: &Device,
    threads: usize,
) -> Result<MethodChoice, GravityError> {
    let cost = |m| seconds_per_evaluation(m, n, device, threads);
    match requested {
        EvaluatorKind::Direct | EvaluatorKind::Fmm => Ok(MethodChoice {
            method: requested,
            seconds: cost(requested),
            reason: None,
        }),
        EvaluatorKind::Auto => {
            let (d, f) = (cost(EvaluatorKind::Direct), cost(EvaluatorKind::Fmm));
            let method = if f < d {
                EvaluatorKind::Fmm
            } else {
                EvaluatorKind::Direct
            };
            Ok(MethodChoice {
                method,
                seconds: d.min(f),
                reason: Some(format!(
                    "auto chose \"{method}\" for {n} bodies on {}: all pairs ≈ {d:.3e} s, FMM ≈ \
                     {f:.3e} s per evaluation",
                    device.label()
                )),
            })
        }
        other => Err(GravityError::BadBodies(format!(
            "gravity has no \"{other}\" evaluator; allowed: \"auto\", \"direct\", \"fmm\""
        ))),
    }
}

/// The leapfrog over `bodies` on `device` with forces by `method` (`Direct` or `Fmm`) at `options`.
pub fn stepper(
    bodies: BodySet,
    device: &Device,
    method: EvaluatorKind,
    gravity: PlummerGravity,
    options: &EvaluatorOptions,
) -> Result<Box<dyn BodyStepper>, GravityError> {
    match device.gpu() {
        Some(gpu) => Ok(Box::new(ResidentLeapfrog::new(
            gpu.clone(),
            method,
            gravity,
            options,
            bodies,
        )?)),
        None => {
            let summation = plan_gravity(method, device, gravity, *options)?;
            Ok(Box::new(HostLeapfrog::new(summation, bodies)?))
        }
    }
}
