//! Chooses the evaluator for a case from a registry: a table of (method, boundary, device kind)
//! → constructor, in the style of Dedalus's registries (a new evaluator is one row, not a new
//! branch in nested matches).
//!
//! The choice is made once, at run time, from the case's `[vortex]` section and the run's
//! [`Device`]; the rest of the program only sees `Box<dyn Summation>`. The GPU evaluators are
//! built on the GPU of the `Device` value passed in (`Device::Cuda(gpu)`, any ordinal), never on
//! a process-global one.
//!
//! # Registry
//!
//! | method   | boundary   | device | evaluator                                   |
//! |----------|------------|--------|---------------------------------------------|
//! | direct   | free space | cpu    | [`DirectFreeSpace`] (f64, rayon)            |
//! | direct   | free space | cuda   | [`CudaDirect`] (f32 pair sums)              |
//! | ewald    | periodic   | cpu    | [`EwaldPeriodic`] (f64, rayon)              |
//! | ewald    | periodic   | cuda   | [`CudaEwald`] (f32 sums, cuFFT)             |
//! | fmm      | free space | cpu    | [`FmmFreeSpace`] (f64, rayon)               |
//! | fmm      | free space | cuda   | [`CudaFmm`] (f64 expansions, f32 near field) |
//! | fmm      | periodic   | cpu    | [`FmmPeriodic`] (f64, rayon)                |
//! | fmm      | periodic   | cuda   | [`CudaFmm::periodic`] (f64 expansions, f32 near field) |
//!
//! **`auto`** ([`EvaluatorKind::Auto`], the periodic box's default) is resolved here: in the
//! periodic box the cheaper of Ewald and the FMM on the run's device at the requested accuracy,
//! from each row's committed cost estimate (seconds per evaluation from constants, never timed
//! at start, so a run and its resume choose alike; the run also keeps its choice in its
//! checkpoints); in free space the direct sum. [`Recipe::choice`] says what was chosen with
//! both estimates (the run's log and manifest).
//!
//! Every constructor takes [`EvaluatorOptions`]: the requested accuracy (Ewald, FMM) and how
//! often the FMM checks itself against the direct sum. The FMM plans its order, opening angle and
//! near field from the accuracy and refuses one finer than the device can deliver
//! ([`crate::summation::fmm::params`]).
//!
//! A (method, boundary) pair with no row on any device is refused with the reason (a truncated
//! image sum is only conditionally convergent; Ewald is a periodic method; the FMM is built for
//! free space only so far); a pair with rows on other devices only is refused naming the devices
//! that have it.
//!
//! # Gravity
//!
//! Softened gravity (free space) has its own registry, [`GRAVITY_REGISTRY`]: (method, device) →
//! `Box<dyn GravitySummation>`, built by [`plan_gravity`] with the softening, the accuracy (FMM)
//! and the check cadence.
//!
//! | method | device | evaluator                                  |
//! |--------|--------|--------------------------------------------|
//! | direct | cpu    | [`DirectGravity`] (f64, rayon)             |
//! | direct | cuda   | [`CudaDirectGravity`] (f32 tiles)          |
//! | fmm    | cpu    | [`FmmGravity`] (f64, rayon)                |
//! | fmm    | cuda   | [`CudaFmmGravity`] (f64 expansions, f32 near field) |
//!
//! A request with no row is refused naming the rows that exist.

use super::direct::{CudaDirect, CudaDirectGravity, DirectFreeSpace, DirectGravity};
use super::ewald::params::{
    max_grid_for_memory, plan as plan_ewald, CostModel, CPU_BYTES_PER_GRID_POINT,
    GPU_BYTES_PER_GRID_POINT,
};
use super::ewald::{engine::GPU_COSTS, CudaEwald, EwaldPeriodic};
use super::fmm::{
    cuda_periodic, periodic, plan_parameters, CudaFmm, CudaFmmGravity, FmmBackend, FmmFreeSpace,
    FmmGravity, FmmPeriodic,
};
use super::interaction::{GravitySummation, PlummerGravity};
use super::EvaluatorKind;
use super::{Boundary, Summation, SummationError};
use crate::device::{Device, DeviceKind};

/// The planned evaluator and a sentence saying what was chosen and why.
pub struct Plan {
    pub evaluator: Box<dyn Summation>,
    pub description: String,
}

/// The two kinds of boundary, without the box length (the registry's key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundaryKind {
    FreeSpace,
    Periodic,
}

impl BoundaryKind {
    pub fn of(boundary: &Boundary) -> Self {
        match boundary {
            Boundary::FreeSpace => BoundaryKind::FreeSpace,
            Boundary::Periodic { .. } => BoundaryKind::Periodic,
        }
    }
}

/// What every constructor of the registry is given besides the device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvaluatorOptions {
    /// Requested relative accuracy (Ewald and FMM; the direct sums are exact).
    pub accuracy: f64,
    /// FMM: evaluations between its built-in checks against the direct sum (0: only the first).
    pub check_every: u64,
}

/// Default [`EvaluatorOptions::check_every`] (the case key `vortex.accuracy_check_every`).
pub const DEFAULT_CHECK_EVERY: u64 = 100;

impl EvaluatorOptions {
    /// `accuracy` with the default check cadence.
    pub fn new(accuracy: f64) -> Self {
        Self {
            accuracy,
            check_every: DEFAULT_CHECK_EVERY,
        }
    }
}

impl From<f64> for EvaluatorOptions {
    /// An accuracy alone (the checks at their default cadence).
    fn from(accuracy: f64) -> Self {
        Self::new(accuracy)
    }
}

/// Builds an evaluator on a device with the given options.
type Constructor = fn(&Device, &EvaluatorOptions) -> Result<Box<dyn Summation>, SummationError>;
/// An evaluator's memory for a problem, before it is built.
type MemoryRule =
    fn(&Problem, &Device, &EvaluatorOptions) -> Result<MemoryEstimate, SummationError>;
/// An evaluator's rough seconds per velocity + stretching evaluation of a problem: on one CPU
/// thread for the CPU rows (the run divides by its threads), on the whole GPU for the CUDA ones.
type TimeRule = fn(&Problem, &EvaluatorOptions) -> Result<f64, SummationError>;
/// What an evaluator is, with the parameters it plans from the options, in words (the run's log,
/// `vpm check` and the manifest print it).
type DescribeRule = fn(&Device, &EvaluatorOptions) -> Result<String, SummationError>;

/// One row of the registry: everything the planner knows of one evaluator.
pub struct Registration {
    pub method: EvaluatorKind,
    pub boundary: BoundaryKind,
    pub device: DeviceKind,
    build: Constructor,
    memory: MemoryRule,
    seconds: TimeRule,
    describe: DescribeRule,
}

/// The name of a GPU evaluator's card ("" when `device` is no GPU).
fn card(device: &Device) -> String {
    device
        .gpu()
        .map(|g| format!(" on {}", g.info().name))
        .unwrap_or_default()
}

/// Every evaluator the planner can build (see the module docs): a new evaluator is one row.
pub const REGISTRY: &[Registration] = &[
    Registration {
        method: EvaluatorKind::Direct,
        boundary: BoundaryKind::FreeSpace,
        device: DeviceKind::Cpu,
        build: |_, _| Ok(Box::new(DirectFreeSpace)),
        memory: |_, _, _| Ok(MemoryEstimate::default()),
        seconds: |p, _| Ok(CPU_DIRECT_SECONDS_PER_PAIR * p.pairs()),
        describe: |_, _| Ok("direct free-space CPU f64".into()),
    },
    Registration {
        method: EvaluatorKind::Direct,
        boundary: BoundaryKind::FreeSpace,
        device: DeviceKind::Cuda,
        build: |device, _| gpu_evaluator(device, CudaDirect::new),
        memory: |p, _, _| {
            let m = p.particles.max(p.lattice_nodes()) as u64;
            Ok(MemoryEstimate {
                host: 112 * m,
                device: 304 * m,
            })
        },
        seconds: |p, _| Ok(p.pairs() / GPU_DIRECT_PAIRS_PER_SECOND),
        describe: |device, _| Ok(format!("direct free-space CUDA f32{}", card(device))),
    },
    Registration {
        method: EvaluatorKind::Ewald,
        boundary: BoundaryKind::Periodic,
        device: DeviceKind::Cpu,
        build: |_, o| Ok(Box::new(EwaldPeriodic::new(o.accuracy))),
        memory: |p, device, o| {
            let g = ewald_grid_points(
                p,
                device,
                o.accuracy,
                &CostModel::CPU,
                CPU_BYTES_PER_GRID_POINT,
            )?;
            Ok(MemoryEstimate {
                host: CPU_BYTES_PER_GRID_POINT * g
                    + 208 * p.particles as u64
                    + 24 * p.lattice_nodes() as u64,
                device: 0,
            })
        },
        seconds: |p, _| Ok(CPU_EWALD_SECONDS_PER_PARTICLE * p.particles as f64),
        describe: |_, o| {
            let accuracy = o.accuracy;
            if !(1e-15..1.0).contains(&accuracy) {
                return Err(SummationError::Unsupported(format!(
                    "Ewald: accuracy {accuracy} outside [1e-15, 1)"
                )));
            }
            Ok(format!("Ewald periodic CPU f64 (accuracy {accuracy:e})"))
        },
    },
    Registration {
        method: EvaluatorKind::Ewald,
        boundary: BoundaryKind::Periodic,
        device: DeviceKind::Cuda,
        build: |device, o| gpu_evaluator(device, |gpu| CudaEwald::new(gpu, o.accuracy)),
        memory: |p, device, o| {
            let g = ewald_grid_points(p, device, o.accuracy, &GPU_COSTS, GPU_BYTES_PER_GRID_POINT)?;
            Ok(MemoryEstimate {
                host: 0,
                device: GPU_BYTES_PER_GRID_POINT * g
                    + 280 * p.particles as u64
                    + 48 * p.lattice_nodes() as u64,
            })
        },
        seconds: |p, _| Ok(GPU_EWALD_SECONDS_PER_PARTICLE * p.particles as f64),
        describe: |device, o| {
            Ok(format!(
                "Ewald periodic CUDA f32 (accuracy {:e}){}",
                o.accuracy,
                card(device)
            ))
        },
    },
    Registration {
        method: EvaluatorKind::Fmm,
        boundary: BoundaryKind::FreeSpace,
        device: DeviceKind::Cpu,
        build: |_, o| Ok(Box::new(FmmFreeSpace::new(o.accuracy, o.check_every)?)),
        memory: |p, _, o| {
            let n = p.particles as u64;
            let cells = fmm_cells(o.accuracy, FmmBackend::Cpu, n)?;
            Ok(MemoryEstimate {
                host: FMM_CPU_BYTES_PER_PARTICLE * n + cells.all + 40 * p.lattice_nodes() as u64,
                device: 0,
            })
        },
        seconds: |p, o| Ok(cpu_fmm_seconds_per_particle(o.accuracy)? * p.particles as f64),
        describe: |_, o| {
            let params = plan_parameters(o.accuracy, FmmBackend::Cpu)?;
            Ok(format!("FMM free-space CPU f64, {params}"))
        },
    },
    Registration {
        method: EvaluatorKind::Fmm,
        boundary: BoundaryKind::Periodic,
        device: DeviceKind::Cpu,
        build: |_, o| Ok(Box::new(FmmPeriodic::new(o.accuracy, o.check_every)?)),
        memory: |p, _, o| {
            let n = p.particles as u64;
            let cells = fmm_cells(o.accuracy, FmmBackend::Cpu, n)?;
            Ok(MemoryEstimate {
                host: (FMM_CPU_BYTES_PER_PARTICLE + FMM_PERIODIC_BYTES_PER_PARTICLE) * n
                    + cells.all
                    + 40 * p.lattice_nodes() as u64,
                device: 0,
            })
        },
        seconds: |p, o| {
            let per = cpu_fmm_seconds_per_particle(o.accuracy)?;
            Ok(PERIODIC_FMM_FACTOR * per * p.particles as f64)
        },
        describe: |_, o| {
            let params = plan_parameters(o.accuracy, FmmBackend::Cpu)?;
            Ok(periodic::describe(&params))
        },
    },
    Registration {
        method: EvaluatorKind::Fmm,
        boundary: BoundaryKind::FreeSpace,
        device: DeviceKind::Cuda,
        build: |device, o| {
            gpu_planned_evaluator(device, |gpu| CudaFmm::new(gpu, o.accuracy, o.check_every))
        },
        memory: |p, _, o| gpu_fmm_memory(p, o, false),
        seconds: |p, _| Ok(GPU_FMM_SECONDS_PER_PARTICLE * p.particles as f64),
        describe: |device, o| {
            let params = plan_parameters(o.accuracy, FmmBackend::Cuda)?;
            Ok(format!(
                "FMM free-space GPU (f64 expansions, f32 near field), {params}{}",
                card(device)
            ))
        },
    },
    Registration {
        method: EvaluatorKind::Fmm,
        boundary: BoundaryKind::Periodic,
        device: DeviceKind::Cuda,
        build: |d, o| gpu_planned_evaluator(d, |g| CudaFmm::periodic(g, o.accuracy, o.check_every)),
        memory: |p, _, o| gpu_fmm_memory(p, o, true),
        seconds: |p, _| Ok(GPU_PERIODIC_FMM_SECONDS_PER_PARTICLE * p.particles as f64),
        describe: |device, o| {
            let params = plan_parameters(o.accuracy, FmmBackend::Cuda)?;
            Ok(format!(
                "{}{}",
                cuda_periodic::describe(&params),
                card(device)
            ))
        },
    },
];

/// The GPU FMM's memory (the rules of [`recipe`]); `periodic` adds the wrapped positions
/// ([`FMM_PERIODIC_BYTES_PER_PARTICLE`]) and the lists' shift indices (2 bytes per 4-byte entry).
fn gpu_fmm_memory(
    p: &Problem,
    o: &EvaluatorOptions,
    periodic: bool,
) -> Result<MemoryEstimate, SummationError> {
    let n = p.particles as u64;
    let cells = fmm_cells(o.accuracy, FmmBackend::Cuda, n)?;
    let (per_particle, shifts) = match periodic {
        true => (FMM_PERIODIC_BYTES_PER_PARTICLE, cells.lists / 2),
        false => (0, 0),
    };
    Ok(MemoryEstimate {
        host: FMM_TREE_BYTES_PER_PARTICLE * n + cells.lists + 40 * p.lattice_nodes() as u64,
        device: (FMM_GPU_DEVICE_BYTES_PER_PARTICLE + per_particle) * n + cells.all + shifts,
    })
}

/// The periodic FMM's seconds per particle over the free-space FMM's at the same accuracy
/// ([`cpu_fmm_seconds_per_particle`]): the near images add M2L pairs at the top levels and the
/// cells at the box's faces take their P2P partners from the neighbouring images. Measured on
/// 2 cores (`cargo test --test periodic_fmm timings -- --ignored`, jittered lattices, σ = h,
/// accuracy 1e-4, p = 9): 1.05 s for 16³ and 4.5 s for 32³ particles, 2.6e-4 and 2.7e-4 s per
/// particle and thread at 32³ against the free-space model's 1.8e-4.
pub const PERIODIC_FMM_FACTOR: f64 = 1.5;
/// The periodic FMM per particle besides the free-space FMM's: the wrapped positions (24).
pub const FMM_PERIODIC_BYTES_PER_PARTICLE: u64 = 24;

/// Seconds per pair of the CPU direct sum on one thread (velocity + stretching, f64).
pub const CPU_DIRECT_SECONDS_PER_PAIR: f64 = 6.5e-8;
/// Seconds per particle of the CPU Ewald sum on one thread at the default accuracy.
pub const CPU_EWALD_SECONDS_PER_PARTICLE: f64 = 1.4e-5;
/// Pairs per second of the GPU all-pairs kernels, velocity + stretching (about 600 G/s on an
/// H100 at N ≥ 2.6·10⁵, docs/performance.md; less at small N).
const GPU_DIRECT_PAIRS_PER_SECOND: f64 = 4.0e11;
/// Seconds per particle of the GPU particle-mesh Ewald sum, velocity + classical stretching,
/// at the default accuracy 1e-4 with the Kaiser–Bessel window: 131 ms for the 16.7·10⁶
/// particles of the 256³ lattice at overlap 0.75 (82.5 ms at overlap 1) on an H100, the
/// evaluation inside the resident step (`vpm bench step --n 256 --overlap 0.75,1`, 2026-11-27,
/// docs/performance.md).
const GPU_EWALD_SECONDS_PER_PARTICLE: f64 = 7.8e-9;
/// Seconds per particle of the GPU periodic FMM at 1e-4, velocity + stretching, resident
/// particles: 0.224 s for 2.1·10⁶ and 1.60 s for 16.7·10⁶ particles of a jittered lattice
/// (σ = h) on an H100 (`vpm bench fmm --device cuda --periodic --n 2.1e6,16.7e6`,
/// 2026-11-27, docs/performance.md): 12 times the PME's, so `auto` takes the PME on a GPU.
const GPU_PERIODIC_FMM_SECONDS_PER_PARTICLE: f64 = 1.0e-7;
/// Seconds per particle of the GPU FMM, velocity + stretching (79.9 ms for 10⁶ particles at
/// accuracy 1e-4 on an H100, tree and lists on the device, resident particles: `vpm bench fmm
/// --device cuda`, issue 25; docs/performance.md).
const GPU_FMM_SECONDS_PER_PARTICLE: f64 = 8.0e-8;
/// The CPU FMM's near-field seconds per particle on one thread (see
/// [`cpu_fmm_seconds_per_particle`]).
const FMM_NEAR_SECONDS_PER_PARTICLE: f64 = 6.0e-5;
/// The CPU FMM's expansion part: the coefficient of (p+1)⁴ (see
/// [`cpu_fmm_seconds_per_particle`]).
const FMM_FAR_SECONDS_PER_PARTICLE_PER_P4: f64 = 1.2e-8;

/// Seconds per particle per velocity + stretching evaluation of the CPU FMM on one thread: a
/// near-field part, plus an expansion part that grows like (p+1)⁴ with the order p planned for
/// the accuracy (the M2L translations dominate). Measured with `vpm bench fmm` (AMD EPYC,
/// uniform particles, `verify::Particles::free_space`): at N = 10⁵ on one thread (CPU seconds
/// of the process) 7.4e-5 s at accuracy 1e-3 (p = 6), 1.64e-4 s at 1e-4 (p = 9), 4.35e-4 s at
/// 1e-6 (p = 13); at 1e-4 on two threads 1.12 s for N = 2·10⁴, 8.9 s for 10⁵ and 98.7 s for
/// 10⁶ (2.0e-4 s per particle and thread: the M2L lists grow with the tree's depth). The
/// constants fit the 10⁵ shape scaled up 20 % towards the large runs the FMM is for (8.9e-5,
/// 1.8e-4, 5.2e-4 s at p = 6, 9, 13). Clustered particles (a thin ring) have more near pairs
/// per particle.
pub fn cpu_fmm_seconds_per_particle(accuracy: f64) -> Result<f64, SummationError> {
    let p = plan_parameters(accuracy, FmmBackend::Cpu)?.order as f64;
    Ok(FMM_NEAR_SECONDS_PER_PARTICLE + FMM_FAR_SECONDS_PER_PARTICLE_PER_P4 * (p + 1.0).powi(4))
}

/// What the planner knows of the sums before any is built: the boundary, the particles
/// evaluated at themselves (velocity and stretching, each step), their largest core, and the
/// lattice reinitialisation samples the blob vorticity on (`lattice_n`³ nodes; 0 without one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Problem {
    pub boundary: Boundary,
    pub particles: usize,
    pub sigma_max: f64,
    pub lattice_n: usize,
}

impl Problem {
    /// A problem whose size is not known yet (benchmarks and tests that build an evaluator and
    /// size it at their first evaluation): no particles, no lattice.
    pub fn unknown_size(boundary: Boundary) -> Problem {
        Problem {
            boundary,
            particles: 0,
            sigma_max: 0.0,
            lattice_n: 0,
        }
    }

    fn pairs(&self) -> f64 {
        (self.particles as f64).powi(2)
    }

    fn lattice_nodes(&self) -> usize {
        self.lattice_n.pow(3)
    }
}

/// One evaluator planned and not yet built: the method on its device with its parameters, the
/// memory it will take and its rough time per evaluation. Made once per run; the memory and
/// disk checks, `vpm check`, the manifest and [`Recipe::build`] all read this one value.
pub struct Recipe {
    row: &'static Registration,
    device: Device,
    options: EvaluatorOptions,
    /// The problem it was planned for.
    pub problem: Problem,
    /// Its memory on the host and the device.
    pub memory: MemoryEstimate,
    /// Rough seconds per velocity + stretching evaluation: on one CPU thread for a CPU
    /// evaluator, on the whole GPU for a CUDA one ([`Recipe::seconds_per_evaluation`]).
    seconds: f64,
    /// The evaluator and its parameters in words, with the device ("… (device cuda:0)").
    pub description: String,
    /// For `evaluator = "auto"`: what was chosen and why, with every candidate's estimate.
    pub choice: Option<AutoChoice>,
}

/// How `evaluator = "auto"` was resolved ([`recipe`]): the candidates' estimated seconds per
/// velocity + stretching evaluation (one CPU thread, or the whole GPU; `None` with the reason
/// when a candidate has no row on the device or cannot deliver the accuracy) and the one chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoChoice {
    pub chosen: EvaluatorKind,
    pub estimates: Vec<(EvaluatorKind, Result<f64, String>)>,
}

impl std::fmt::Display for AutoChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "evaluator = \"auto\" chose \"{}\" (estimated seconds per velocity + stretching \
             evaluation, a CPU row on one thread",
            self.chosen
        )?;
        for (k, e) in &self.estimates {
            match e {
                Ok(s) => write!(f, "; \"{k}\" {s:.3e}")?,
                Err(why) => write!(f, "; \"{k}\" not available: {why}")?,
            }
        }
        write!(f, ")")
    }
}

impl AutoChoice {
    /// The estimate of `kind`, when it was a candidate with a row.
    pub fn estimate(&self, kind: EvaluatorKind) -> Option<f64> {
        self.estimates
            .iter()
            .find(|(k, _)| *k == kind)
            .and_then(|(_, e)| e.as_ref().ok().copied())
    }
}

/// The methods `evaluator = "auto"` chooses between for a boundary, in order of preference
/// on equal estimates.
fn auto_candidates(boundary: BoundaryKind) -> &'static [EvaluatorKind] {
    match boundary {
        BoundaryKind::FreeSpace => &[EvaluatorKind::Direct],
        BoundaryKind::Periodic => &[EvaluatorKind::Ewald, EvaluatorKind::Fmm],
    }
}

impl Recipe {
    /// The method planned.
    pub fn method(&self) -> EvaluatorKind {
        self.row.method
    }

    /// The device it runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Rough wall seconds per velocity + stretching evaluation with `threads` CPU threads (a
    /// GPU evaluator does not depend on them).
    pub fn seconds_per_evaluation(&self, threads: usize) -> f64 {
        match self.row.device {
            DeviceKind::Cpu => self.seconds / threads.max(1) as f64,
            DeviceKind::Cuda => self.seconds,
        }
    }

    /// Builds the evaluator this recipe describes.
    pub fn build(&self) -> Result<Plan, SummationError> {
        let evaluator = (self.row.build)(&self.device, &self.options)?;
        Ok(Plan {
            evaluator,
            description: self.description.clone(),
        })
    }
}

fn device_gpu(
    device: &Device,
) -> Result<&std::sync::Arc<crate::device::cuda::Gpu>, SummationError> {
    device.gpu().ok_or_else(|| {
        SummationError::Unsupported(format!("device {} is not a GPU", device.label()))
    })
}

/// A GPU evaluator built on `device`'s GPU, with a clear error when that fails.
fn gpu_evaluator<E: Summation + 'static>(
    device: &Device,
    build: impl FnOnce(
        std::sync::Arc<crate::device::cuda::Gpu>,
    ) -> Result<E, crate::device::cuda::CudaError>,
) -> Result<Box<dyn Summation>, SummationError> {
    Ok(Box::new(gpu_built(device, build)?))
}

/// Any GPU evaluator (Biot–Savart or gravity) built on `device`'s GPU, with a clear error when
/// that fails.
fn gpu_built<E>(
    device: &Device,
    build: impl FnOnce(
        std::sync::Arc<crate::device::cuda::Gpu>,
    ) -> Result<E, crate::device::cuda::CudaError>,
) -> Result<E, SummationError> {
    let gpu = device_gpu(device)?.clone();
    build(gpu).map_err(|e| {
        SummationError::Unsupported(format!(
            "device {}: the GPU evaluator could not be set up: {e}",
            device.label()
        ))
    })
}

/// A GPU evaluator built on `device`'s GPU by a constructor that plans its own parameters: its
/// refusal (an accuracy the device cannot deliver) is passed on as it is.
fn gpu_planned_evaluator<E: Summation + 'static>(
    device: &Device,
    build: impl FnOnce(std::sync::Arc<crate::device::cuda::Gpu>) -> Result<E, SummationError>,
) -> Result<Box<dyn Summation>, SummationError> {
    let gpu = device_gpu(device)?.clone();
    Ok(Box::new(build(gpu)?))
}

/// Why a (method, boundary) pair has no evaluator on any device.
fn unsupported_reason(kind: EvaluatorKind, boundary: BoundaryKind) -> String {
    match (kind, boundary) {
        (EvaluatorKind::Ewald, BoundaryKind::FreeSpace) => {
            "vortex.evaluator = \"ewald\" is for the periodic box; free-space flows use \"direct\""
                .into()
        }
        (EvaluatorKind::Direct, BoundaryKind::Periodic) => {
            "vortex.evaluator = \"direct\" sums in free space; the periodic box needs \"auto\", \
             \"ewald\" or \"fmm\" (a truncated image sum is only conditionally convergent)"
                .into()
        }
        (kind, boundary) => {
            format!("vortex.evaluator = \"{kind}\" has no evaluator for {boundary:?}")
        }
    }
}

/// The registry row for (method, boundary, device kind), or the reason there is none.
pub fn lookup(
    kind: EvaluatorKind,
    boundary: BoundaryKind,
    device: DeviceKind,
) -> Result<&'static Registration, SummationError> {
    let rows: Vec<&Registration> = REGISTRY
        .iter()
        .filter(|r| r.method == kind && r.boundary == boundary)
        .collect();
    if rows.is_empty() {
        return Err(SummationError::Unsupported(unsupported_reason(
            kind, boundary,
        )));
    }
    rows.iter()
        .find(|r| r.device == device)
        .copied()
        .ok_or_else(|| {
            let have: Vec<String> = rows.iter().map(|r| r.device.to_string()).collect();
            SummationError::Unsupported(format!(
                "vortex.evaluator = \"{kind}\" ({boundary:?}) runs on {} only, not on {device}",
                have.join(", ")
            ))
        })
}

/// Plans the evaluator `kind` for `problem` on `device`, without building it. `options` is the
/// requested relative accuracy (Ewald, FMM) and the FMM's check cadence ([`EvaluatorOptions`]; a
/// bare accuracy takes the default cadence).
///
/// On the CPU: direct or FMM (free space) or Ewald (periodic), f64. On a GPU: all pairs or FMM
/// in free space, Ewald or FMM in the periodic box, f32 sums; an error (with the reason) when the
/// method has no row for the boundary or device, or cannot deliver the accuracy there (the FMM
/// refuses it here, before any GPU is touched). The device was chosen before (`auto` resolved
/// by [`crate::device::Device::open`]). The description names the evaluator with its parameters
/// (for the FMM its order, opening angle, leaf size and near field) and the device.
///
/// Memory (bytes per item; the grid of the periodic evaluators is the one the Ewald rules plan
/// for the accuracy and cores up to `sigma_max`, equal cores: η = σ_max, no real-space sources,
/// capped by the device's memory as the evaluator will cap it):
/// * CPU direct: nothing beyond the caller's arrays (0).
/// * CPU Ewald: the grid, [`CPU_BYTES_PER_GRID_POINT`] per point; per particle the window
///   locations (48), the mesh results (96), the cell-list copy (64); per lattice node the
///   vorticity output (24).
/// * GPU direct: on the device, per particle 2 packed source and 2 target vectors (64 in f32)
///   and 12 output reals with up to 4 splits (240); the host keeps the same packing (64) and
///   the output (48).
/// * GPU Ewald: on the device the grid, [`GPU_BYTES_PER_GRID_POINT`] per point, and per
///   particle the f64 inputs and outputs (7 + 3 + 3 + 9 doubles: 176), sort keys and orders
///   (6 ints: 24), packed copies (3 × 16 + 32: 80); per lattice node the target and the output
///   (48); the host nothing beyond the caller's arrays.
/// * CPU FMM (one tree, targets = sources): per particle the Morton keys and order while the
///   tree is built (16), the sources in tree order (x, α, σ: 56) and the per-target answers
///   before they are scattered (velocity and gradient: 96), [`FMM_CPU_BYTES_PER_PARTICLE`] in
///   all; per cell, about 2N/leaf_size cells, the cell itself (72), its multipole and local
///   expansions (2 × 3 × (p+1)(p+2)/2 complex f64: 96 (p+1)(p+2)/2) and its share of the
///   interaction lists (about 300 M2L and 60 P2P entries of 4 bytes:
///   [`FMM_LIST_BYTES_PER_CELL`]), with p and the leaf size planned for the accuracy
///   ([`crate::summation::fmm::plan_parameters`]); per lattice node its key and order (16) and
///   answer (24) for the blob vorticity.
/// * GPU FMM: on the device the same expansions and lists per cell, and per particle the f32
///   packed sources and targets (32 + 32) and the f64 outputs (3 + 9 doubles: 96),
///   [`FMM_GPU_DEVICE_BYTES_PER_PARTICLE`]; on the host the tree and lists (keys and order 16
///   per particle, cells and lists as above) and the blob vorticity at the lattice nodes, which
///   the GPU FMM sums on the host (40 per node).
pub fn recipe(
    problem: Problem,
    kind: EvaluatorKind,
    device: &Device,
    options: impl Into<EvaluatorOptions>,
) -> Result<Recipe, SummationError> {
    let options = options.into();
    if kind == EvaluatorKind::Auto {
        return auto_recipe(problem, device, options);
    }
    let row = lookup(kind, BoundaryKind::of(&problem.boundary), device.kind())?;
    let name = (row.describe)(device, &options)?;
    Ok(Recipe {
        row,
        device: device.clone(),
        options,
        problem,
        memory: (row.memory)(&problem, device, &options)?,
        seconds: (row.seconds)(&problem, &options)?,
        description: format!("{name} (device {})", device.label()),
        choice: None,
    })
}

/// `evaluator = "auto"`: the recipe of every candidate for the boundary on `device`, and the
/// one with the smallest estimated seconds per evaluation (the first on a tie), with the
/// estimates in its [`Recipe::choice`]; an error naming every candidate's when none can run.
fn auto_recipe(
    problem: Problem,
    device: &Device,
    options: EvaluatorOptions,
) -> Result<Recipe, SummationError> {
    let mut best: Option<Recipe> = None;
    let mut estimates = Vec::new();
    for &kind in auto_candidates(BoundaryKind::of(&problem.boundary)) {
        match recipe(problem, kind, device, options) {
            Ok(r) => {
                estimates.push((kind, Ok(r.seconds)));
                if best.as_ref().is_none_or(|b| r.seconds < b.seconds) {
                    best = Some(r);
                }
            }
            Err(e) => estimates.push((kind, Err(e.to_string()))),
        }
    }
    let choice = |chosen| AutoChoice {
        chosen,
        estimates: estimates.clone(),
    };
    match best {
        Some(mut r) => {
            r.choice = Some(choice(r.method()));
            Ok(r)
        }
        None => Err(SummationError::Unsupported(format!(
            "{}: no candidate can run",
            choice(EvaluatorKind::Auto)
        ))),
    }
}

/// Plans and builds the evaluator `kind` for `boundary` on `device` ([`recipe`] for a problem
/// sized at the first evaluation, then [`Recipe::build`]): for benchmarks and tests.
pub fn plan(
    boundary: Boundary,
    kind: EvaluatorKind,
    device: &Device,
    options: impl Into<EvaluatorOptions>,
) -> Result<Plan, SummationError> {
    recipe(Problem::unknown_size(boundary), kind, device, options)?.build()
}

/// Builds a gravity evaluator on a device with a softening and the options.
type GravityConstructor = fn(
    &Device,
    PlummerGravity,
    &EvaluatorOptions,
) -> Result<Box<dyn GravitySummation>, SummationError>;

/// One row of the gravity registry.
pub struct GravityRegistration {
    pub method: EvaluatorKind,
    pub device: DeviceKind,
    build: GravityConstructor,
}

/// Every gravity evaluator the planner can build (module docs): a new one is one row.
pub const GRAVITY_REGISTRY: &[GravityRegistration] = &[
    GravityRegistration {
        method: EvaluatorKind::Direct,
        device: DeviceKind::Cpu,
        build: |_, g, _| Ok(Box::new(DirectGravity::new(g))),
    },
    GravityRegistration {
        method: EvaluatorKind::Direct,
        device: DeviceKind::Cuda,
        build: |device, g, _| {
            let e = gpu_built(device, |gpu| CudaDirectGravity::new(gpu, g))?;
            Ok(Box::new(e))
        },
    },
    GravityRegistration {
        method: EvaluatorKind::Fmm,
        device: DeviceKind::Cpu,
        build: |_, g, o| Ok(Box::new(FmmGravity::new(g, o.accuracy, o.check_every)?)),
    },
    GravityRegistration {
        method: EvaluatorKind::Fmm,
        device: DeviceKind::Cuda,
        build: |device, g, o| {
            let gpu = device_gpu(device)?.clone();
            let e = CudaFmmGravity::new(gpu, g, o.accuracy, o.check_every)?;
            Ok(Box::new(e))
        },
    },
];

/// Builds the gravity evaluator `kind` on `device` with softening `gravity` and `options` (the
/// FMM's accuracy and check cadence); refused, naming the rows that exist, when the registry has
/// none for (kind, device).
pub fn plan_gravity(
    kind: EvaluatorKind,
    device: &Device,
    gravity: PlummerGravity,
    options: impl Into<EvaluatorOptions>,
) -> Result<Box<dyn GravitySummation>, SummationError> {
    let row = GRAVITY_REGISTRY
        .iter()
        .find(|r| r.method == kind && r.device == device.kind())
        .ok_or_else(|| {
            let have: Vec<String> = GRAVITY_REGISTRY
                .iter()
                .map(|r| format!("{} on {}", r.method, r.device))
                .collect();
            SummationError::Unsupported(format!(
                "gravity has no \"{kind}\" evaluator on {}; it has {}",
                device.kind(),
                have.join(", ")
            ))
        })?;
    (row.build)(device, gravity, &options.into())
}

/// Memory an evaluator will take, in bytes, on the host and on the device (0 on the device for
/// the CPU evaluators; the host part of the GPU evaluators is their staging of inputs and
/// results).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryEstimate {
    pub host: u64,
    pub device: u64,
}

/// Points of the Ewald mesh planned for `problem` at `accuracy` on `device` (see [`recipe`]).
fn ewald_grid_points(
    problem: &Problem,
    device: &Device,
    accuracy: f64,
    cost: &CostModel,
    bytes_per_point: u64,
) -> Result<u64, SummationError> {
    if problem.particles == 0 {
        return Ok(0);
    }
    let max_grid = max_grid_for_memory(device.memory_total(), bytes_per_point);
    let accuracy = if device.is_cuda() {
        super::ewald::cuda::gpu_planning_accuracy(accuracy)?
    } else {
        accuracy
    };
    let n = problem.particles;
    let p = plan_ewald(accuracy, problem.sigma_max, 0, n, n, true, cost, max_grid)?;
    Ok((p.grid as u64).pow(3))
}

/// FMM: Morton keys and tree order per particle while a tree is built.
pub const FMM_TREE_BYTES_PER_PARTICLE: u64 = 16;
/// CPU FMM per particle: keys and order (16), sources in tree order (56), answers (96).
pub const FMM_CPU_BYTES_PER_PARTICLE: u64 = FMM_TREE_BYTES_PER_PARTICLE + 56 + 96;
/// GPU FMM per particle on the device: f32 packed source and target (32 + 32), f64 velocity and
/// gradient out (96).
pub const FMM_GPU_DEVICE_BYTES_PER_PARTICLE: u64 = 32 + 32 + 96;
/// FMM interaction lists per cell: about 300 M2L and 60 P2P entries of 4 bytes.
pub const FMM_LIST_BYTES_PER_CELL: u64 = (300 + 60) * 4;
/// An FMM cell's own record (centre, sizes, ranges, links).
const FMM_CELL_BYTES: u64 = 72;

/// The per-cell memory of an FMM of `n` particles at `accuracy` on `backend`.
struct FmmCellBytes {
    /// Cells, expansions and lists (where the expansions live).
    all: u64,
    /// Cells and lists alone (the host's share of the GPU evaluator).
    lists: u64,
}

fn fmm_cells(accuracy: f64, backend: FmmBackend, n: u64) -> Result<FmmCellBytes, SummationError> {
    let params = plan_parameters(accuracy, backend)?;
    let cells = 2 * n.div_ceil(params.leaf_size as u64);
    let expansions = 2 * 3 * super::fmm::expansions::coefficient_count(params.order) as u64 * 16;
    let lists = cells * (FMM_CELL_BYTES + FMM_LIST_BYTES_PER_CELL);
    Ok(FmmCellBytes {
        all: lists + cells * expansions,
        lists,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIODIC: Boundary = Boundary::Periodic {
        length: std::f64::consts::TAU,
    };

    /// The method of each CPU row with its boundary.
    const CPU_ROWS: [(Boundary, EvaluatorKind); 4] = [
        (Boundary::FreeSpace, EvaluatorKind::Direct),
        (PERIODIC, EvaluatorKind::Ewald),
        (Boundary::FreeSpace, EvaluatorKind::Fmm),
        (PERIODIC, EvaluatorKind::Fmm),
    ];

    /// A problem of `particles` particles of core `sigma_max` and no lattice.
    fn problem(boundary: Boundary, particles: usize, sigma_max: f64) -> Problem {
        Problem {
            boundary,
            particles,
            sigma_max,
            lattice_n: 0,
        }
    }

    #[test]
    fn every_method_boundary_pair_has_one_row_per_device_at_most() {
        for (i, a) in REGISTRY.iter().enumerate() {
            for b in &REGISTRY[i + 1..] {
                assert!(
                    !(a.method == b.method && a.boundary == b.boundary && a.device == b.device),
                    "duplicate row {} {:?} {}",
                    a.method,
                    a.boundary,
                    a.device
                );
            }
        }
    }

    #[test]
    fn unsupported_pairs_are_refused_with_the_reason() {
        let e = plan(
            Boundary::FreeSpace,
            EvaluatorKind::Ewald,
            &Device::Cpu,
            1e-6,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("periodic box"), "{e}");
        let e = plan(
            Boundary::Periodic {
                length: std::f64::consts::TAU,
            },
            EvaluatorKind::Direct,
            &Device::Cpu,
            1e-6,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("conditionally convergent"), "{e}");
    }

    #[test]
    fn cpu_evaluators_have_no_device_form() {
        for (b, k) in CPU_ROWS {
            let mut p = plan(b, k, &Device::Cpu, 1e-6).unwrap();
            assert!(p.evaluator.device_form().is_none(), "{}", p.description);
        }
    }

    #[test]
    fn cpu_rows_build_and_estimate() {
        let p = plan(
            Boundary::FreeSpace,
            EvaluatorKind::Direct,
            &Device::Cpu,
            1e-6,
        )
        .unwrap();
        assert!(p.description.contains("direct free-space CPU f64"));
        let periodic = Boundary::Periodic {
            length: std::f64::consts::TAU,
        };
        let p = plan(periodic, EvaluatorKind::Ewald, &Device::Cpu, 1e-6).unwrap();
        assert!(p.description.contains("Ewald periodic CPU f64"));
        let h = std::f64::consts::TAU / 32.0;
        let problem = Problem {
            boundary: periodic,
            particles: 32 * 32 * 32,
            sigma_max: h,
            lattice_n: 32,
        };
        let m = recipe(problem, EvaluatorKind::Ewald, &Device::Cpu, 1e-6)
            .unwrap()
            .memory;
        assert_eq!(m.device, 0);
        assert!(m.host > 208 * 32 * 32 * 32, "{m:?}");
        assert!(m.host < 1 << 30, "{m:?}");
    }

    #[test]
    fn fmm_rows_build_describe_and_refuse() {
        // The CPU row: its description names the FMM and its planned parameters.
        let p = plan(
            Boundary::FreeSpace,
            EvaluatorKind::Fmm,
            &Device::Cpu,
            EvaluatorOptions {
                accuracy: 1e-6,
                check_every: 0,
            },
        )
        .unwrap();
        assert!(
            p.description.contains("FMM free-space CPU f64"),
            "{}",
            p.description
        );
        assert!(p.description.contains("order p = "), "{}", p.description);
        assert!(p.description.contains("(device cpu)"), "{}", p.description);
        // A GPU row exists (built only where there is a GPU: tests/gpu*.rs).
        assert!(lookup(
            EvaluatorKind::Fmm,
            BoundaryKind::FreeSpace,
            DeviceKind::Cuda
        )
        .is_ok());
        // Finer than the CPU's f64 floor: refused with the reason.
        let e = plan(Boundary::FreeSpace, EvaluatorKind::Fmm, &Device::Cpu, 1e-11)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("FMM") && e.contains("1e-10"), "{e}");
        // Finer than the GPU's f32 floor: refused when estimating, before any GPU is touched.
        let e = fmm_cells(1e-7, FmmBackend::Cuda, 1000)
            .err()
            .unwrap()
            .to_string();
        let floor = format!("{:e}", crate::summation::fmm::params::GPU_ACCURACY_FLOOR);
        assert!(e.contains("f32") && e.contains(&floor), "{e}");
        // The periodic box: a CPU row and a GPU row (built only where there is a GPU), whose
        // memory is the free-space GPU row's and more.
        let periodic = Boundary::Periodic {
            length: std::f64::consts::TAU,
        };
        let p = plan(periodic, EvaluatorKind::Fmm, &Device::Cpu, 1e-6).unwrap();
        assert!(
            p.description.contains("FMM periodic CPU f64"),
            "{}",
            p.description
        );
        let row = lookup(EvaluatorKind::Fmm, BoundaryKind::Periodic, DeviceKind::Cuda).unwrap();
        let free = lookup(
            EvaluatorKind::Fmm,
            BoundaryKind::FreeSpace,
            DeviceKind::Cuda,
        )
        .unwrap();
        let big = problem(periodic, 1 << 20, 0.01);
        let o = EvaluatorOptions::new(1e-4);
        let (mp, mf) = (
            (row.memory)(&big, &Device::Cpu, &o).unwrap(),
            (free.memory)(&big, &Device::Cpu, &o).unwrap(),
        );
        assert!(
            mp.device > mf.device && mp.device < 2 * mf.device,
            "{mp:?} {mf:?}"
        );
        let (tp, tf) = (
            (row.seconds)(&big, &o).unwrap(),
            (free.seconds)(&big, &o).unwrap(),
        );
        // Measured apart (the periodic one by `vpm bench fmm --periodic`): the images cost it
        // about a fifth more than free space.
        assert_eq!(
            tp,
            GPU_PERIODIC_FMM_SECONDS_PER_PARTICLE * big.particles as f64
        );
        assert!(tp > tf && tp < 1.5 * tf, "{tp} {tf}");
        let d = (row.describe)(&Device::Cpu, &o).unwrap();
        assert!(
            d.contains("FMM periodic GPU") && d.contains("|n|∞ ≤ 4"),
            "{d}"
        );
    }

    /// `auto` picks the cheaper periodic method from the rows' estimates, says both, and is
    /// the direct sum in free space.
    #[test]
    fn auto_picks_the_cheaper_method_and_states_both_estimates() {
        let p = problem(PERIODIC, 32 * 32 * 32, std::f64::consts::TAU / 32.0);
        let r = recipe(p, EvaluatorKind::Auto, &Device::Cpu, 1e-4).unwrap();
        let c = r.choice.clone().unwrap();
        let (ewald, fmm) = (
            c.estimate(EvaluatorKind::Ewald).unwrap(),
            c.estimate(EvaluatorKind::Fmm).unwrap(),
        );
        let cheaper = if fmm < ewald {
            EvaluatorKind::Fmm
        } else {
            EvaluatorKind::Ewald
        };
        assert_eq!((r.method(), c.chosen), (cheaper, cheaper));
        // The estimates are the rows' own.
        let alone = |k| {
            recipe(p, k, &Device::Cpu, 1e-4)
                .unwrap()
                .seconds_per_evaluation(1)
        };
        assert_eq!(
            (ewald, fmm),
            (alone(EvaluatorKind::Ewald), alone(EvaluatorKind::Fmm))
        );
        let text = c.to_string();
        assert!(
            text.contains("\"ewald\"") && text.contains("\"fmm\""),
            "{text}"
        );
        // An accuracy the FMM cannot deliver leaves Ewald, with the FMM's reason.
        let r = recipe(p, EvaluatorKind::Auto, &Device::Cpu, 1e-12).unwrap();
        assert_eq!(r.method(), EvaluatorKind::Ewald);
        assert!(r.choice.unwrap().to_string().contains("not available"));
        // Free space: the direct sum.
        let r = recipe(
            problem(Boundary::FreeSpace, 1000, 0.1),
            EvaluatorKind::Auto,
            &Device::Cpu,
            1e-4,
        )
        .unwrap();
        assert_eq!(r.method(), EvaluatorKind::Direct);
    }

    #[test]
    fn fmm_check_cadence_reaches_the_evaluator() {
        use crate::summation::verify::Particles;
        use crate::summation::{Evaluation, Extra};
        let particles = Particles::free_space(600, 7);
        let checks = |check_every: u64| {
            let options = EvaluatorOptions {
                accuracy: 1e-4,
                check_every,
            };
            let mut p = plan(
                Boundary::FreeSpace,
                EvaluatorKind::Fmm,
                &Device::Cpu,
                options,
            )
            .unwrap();
            let mut out = Evaluation::default();
            for _ in 0..3 {
                p.evaluator
                    .evaluate(&particles.sources(), &particles.x, Extra::None, &mut out)
                    .unwrap();
            }
            p.evaluator.take_accuracy_checks()
        };
        // 0: the first evaluation only; 1: every evaluation.
        assert_eq!(checks(0).len(), 1);
        let all = checks(1);
        assert_eq!(
            all.iter().map(|c| c.evaluation).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert!(all.iter().all(|c| c.passed()), "{all:?}");
        // A bare accuracy takes the default cadence.
        assert_eq!(
            EvaluatorOptions::from(1e-6).check_every,
            DEFAULT_CHECK_EVERY
        );
    }

    #[test]
    fn a_recipe_describes_what_it_builds_before_building_it() {
        for (boundary, kind) in CPU_ROWS {
            let r = recipe(problem(boundary, 10_000, 0.1), kind, &Device::Cpu, 1e-5).unwrap();
            assert_eq!(r.method(), kind);
            let built = r.build().unwrap();
            // The recipe's words are the built evaluator's own name, with the device.
            assert_eq!(
                r.description,
                format!("{} (device cpu)", built.evaluator.name())
            );
            assert_eq!(built.description, r.description);
            // A CPU evaluator's time divides among the threads.
            let one = r.seconds_per_evaluation(1);
            assert!(one > 0.0 && one.is_finite(), "{kind}: {one}");
            assert!((r.seconds_per_evaluation(4) * 4.0 - one).abs() < 1e-12 * one);
        }
        // All pairs grow as N², the FMM about as N.
        let time = |kind, particles| {
            recipe(
                problem(Boundary::FreeSpace, particles, 0.1),
                kind,
                &Device::Cpu,
                1e-4,
            )
            .unwrap()
            .seconds_per_evaluation(1)
        };
        let ratio = |kind| time(kind, 20_000) / time(kind, 10_000);
        assert!((ratio(EvaluatorKind::Direct) - 4.0).abs() < 1e-9);
        assert!((ratio(EvaluatorKind::Fmm) - 2.0).abs() < 1e-9);
        // An accuracy a row cannot deliver is refused when planning, before anything is built.
        let e = recipe(
            Problem::unknown_size(PERIODIC),
            EvaluatorKind::Ewald,
            &Device::Cpu,
            2.0,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("outside [1e-15, 1)"), "{e}");
    }

    #[test]
    fn fmm_memory_estimate_follows_the_planned_order() {
        let n = 1_000_000;
        let at = |accuracy: f64| {
            let problem = problem(Boundary::FreeSpace, n, 0.06);
            recipe(problem, EvaluatorKind::Fmm, &Device::Cpu, accuracy)
                .unwrap()
                .memory
        };
        let (coarse, fine) = (at(1e-3), at(1e-7));
        assert_eq!(coarse.device, 0);
        // Above the particles' own bytes, a few kilobytes per particle at most.
        for m in [coarse, fine] {
            assert!(m.host > FMM_CPU_BYTES_PER_PARTICLE * n as u64, "{m:?}");
            assert!(m.host < 8_000 * n as u64, "{m:?}");
        }
        // The CPU's leaves grow with the order as its expansions do (params::cpu_leaf_size):
        // fewer, larger cells, within a factor 2 of each other.
        assert!(
            fine.host < 2 * coarse.host && coarse.host < 2 * fine.host,
            "{coarse:?} {fine:?}"
        );
    }

    #[test]
    fn gravity_rows_build_and_refuse_naming_what_exists() {
        let g = PlummerGravity::new(0.01).unwrap();
        let d = plan_gravity(EvaluatorKind::Direct, &Device::Cpu, g, 1e-4).unwrap();
        assert!(
            d.name().contains("direct") && d.gravity() == g,
            "{}",
            d.name()
        );
        let f = plan_gravity(EvaluatorKind::Fmm, &Device::Cpu, g, 1e-4).unwrap();
        assert!(f.name().contains("FMM"), "{}", f.name());
        let e = plan_gravity(EvaluatorKind::Ewald, &Device::Cpu, g, 1e-4)
            .err()
            .unwrap()
            .to_string();
        assert!(
            [
                "direct on cpu",
                "fmm on cpu",
                "direct on cuda",
                "fmm on cuda"
            ]
            .iter()
            .all(|row| e.contains(row)),
            "{e}"
        );
        assert!(plan_gravity(EvaluatorKind::Fmm, &Device::Cpu, g, 1e-12).is_err());
    }
}
