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
//! | *fmm*    | *both*     | *…*    | *the place for a fast multipole method (docs/physics.md §8): a row per device once `summation/fmm/` exists, with an `EvaluatorKind::Fmm` spelling `"fmm"` in the case* |
//!
//! A (method, boundary) pair with no row on any device is refused with the reason (a truncated
//! image sum is only conditionally convergent; Ewald is a periodic method); a pair with rows on
//! other devices only is refused naming the devices that have it.

use super::direct::{CudaDirect, DirectFreeSpace};
use super::ewald::params::{
    max_grid_for_memory, plan as plan_ewald, CostModel, CPU_BYTES_PER_GRID_POINT,
    GPU_BYTES_PER_GRID_POINT,
};
use super::ewald::{engine::GPU_COSTS, CudaEwald, EwaldPeriodic};
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

/// Builds an evaluator on a device for a requested accuracy (periodic evaluators).
type Constructor = fn(&Device, f64) -> Result<Box<dyn Summation>, SummationError>;

/// One row of the registry.
pub struct Registration {
    pub method: EvaluatorKind,
    pub boundary: BoundaryKind,
    pub device: DeviceKind,
    build: Constructor,
}

/// Every evaluator the planner can build (see the module docs; an FMM adds its rows here).
pub const REGISTRY: &[Registration] = &[
    Registration {
        method: EvaluatorKind::Direct,
        boundary: BoundaryKind::FreeSpace,
        device: DeviceKind::Cpu,
        build: |_, _| Ok(Box::new(DirectFreeSpace)),
    },
    Registration {
        method: EvaluatorKind::Direct,
        boundary: BoundaryKind::FreeSpace,
        device: DeviceKind::Cuda,
        build: |device, _| gpu_evaluator(device, CudaDirect::new),
    },
    Registration {
        method: EvaluatorKind::Ewald,
        boundary: BoundaryKind::Periodic,
        device: DeviceKind::Cpu,
        build: |_, accuracy| {
            if !(1e-15..1.0).contains(&accuracy) {
                return Err(SummationError::Unsupported(format!(
                    "Ewald: accuracy {accuracy} outside [1e-15, 1)"
                )));
            }
            Ok(Box::new(EwaldPeriodic::new(accuracy)))
        },
    },
    Registration {
        method: EvaluatorKind::Ewald,
        boundary: BoundaryKind::Periodic,
        device: DeviceKind::Cuda,
        build: |device, accuracy| gpu_evaluator(device, |gpu| CudaEwald::new(gpu, accuracy)),
    },
    // FMM (docs/physics.md §8): one row per device kind and boundary when `summation/fmm/` exists.
];

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
    let gpu = device_gpu(device)?.clone();
    match build(gpu) {
        Ok(e) => Ok(Box::new(e)),
        Err(e) => Err(SummationError::Unsupported(format!(
            "device {}: the GPU evaluator could not be set up: {e}",
            device.label()
        ))),
    }
}

/// Why a (method, boundary) pair has no evaluator on any device.
fn unsupported_reason(kind: EvaluatorKind, boundary: BoundaryKind) -> String {
    match (kind, boundary) {
        (EvaluatorKind::Ewald, BoundaryKind::FreeSpace) => {
            "vortex.evaluator = \"ewald\" is for the periodic box; free-space flows use \"direct\""
                .into()
        }
        (EvaluatorKind::Direct, BoundaryKind::Periodic) => {
            "vortex.evaluator = \"direct\" sums in free space; the periodic box needs \"ewald\" \
             (a truncated image sum is only conditionally convergent)"
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

/// Picks the evaluator for `boundary` on `device`. `accuracy` is the requested relative
/// accuracy of the periodic evaluator.
///
/// On the CPU: direct (free space) or Ewald (periodic), f64. On a GPU: all pairs in free space,
/// Ewald in the periodic box, f32 sums; an error (with the reason) when the GPU evaluator cannot
/// be set up. The device was chosen before (`auto` resolved by [`crate::device::Device::open`]).
pub fn plan(
    boundary: Boundary,
    kind: EvaluatorKind,
    device: &Device,
    accuracy: f64,
) -> Result<Plan, SummationError> {
    let row = lookup(kind, BoundaryKind::of(&boundary), device.kind())?;
    let evaluator = (row.build)(device, accuracy)?;
    let description = format!("{} (device {})", evaluator.name(), device.label());
    Ok(Plan {
        evaluator,
        description,
    })
}

/// Memory an evaluator will take, in bytes, on the host and on the device (0 on the device for
/// the CPU evaluators; the host part of the GPU evaluators is their staging of inputs and
/// results).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryEstimate {
    pub host: u64,
    pub device: u64,
}

/// Estimates the memory of the evaluator [`plan`] would build, before building it: for
/// `n_particles` sources evaluated at themselves (velocity and stretching, the time step) and,
/// when `lattice_n > 0`, the blob vorticity at the `lattice_n`³ nodes of reinitialisation. For
/// the periodic evaluators the grid is the one the Ewald rules plan for `accuracy` and cores up
/// to `sigma_max` (equal cores: η = σ_max, no real-space sources), capped by the device's
/// memory as the evaluator will cap it.
///
/// What is counted (bytes per item):
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
pub fn estimate_bytes(
    boundary: Boundary,
    kind: EvaluatorKind,
    device: &Device,
    accuracy: f64,
    n_particles: usize,
    sigma_max: f64,
    lattice_n: usize,
) -> Result<MemoryEstimate, SummationError> {
    let row = lookup(kind, BoundaryKind::of(&boundary), device.kind())?;
    let n = n_particles as u64;
    let nodes = (lattice_n as u64).pow(3);
    let grid_points = |cost: &CostModel, bytes_per_point: u64| -> Result<u64, SummationError> {
        if n_particles == 0 {
            return Ok(0);
        }
        let max_grid = max_grid_for_memory(device.memory_total(), bytes_per_point);
        let accuracy = if device.is_cuda() {
            accuracy.max(super::ewald::cuda::F32_ACCURACY_FLOOR)
        } else {
            accuracy
        };
        let p = plan_ewald(
            accuracy,
            sigma_max,
            0,
            n_particles,
            n_particles,
            true,
            cost,
            max_grid,
        )?;
        Ok((p.grid as u64).pow(3))
    };
    Ok(match (row.method, row.device) {
        (EvaluatorKind::Direct, DeviceKind::Cpu) => MemoryEstimate::default(),
        (EvaluatorKind::Direct, DeviceKind::Cuda) => {
            let m = n.max(nodes);
            MemoryEstimate {
                host: 112 * m,
                device: 304 * m,
            }
        }
        (EvaluatorKind::Ewald, DeviceKind::Cpu) => {
            let g = grid_points(&CostModel::CPU, CPU_BYTES_PER_GRID_POINT)?;
            MemoryEstimate {
                host: CPU_BYTES_PER_GRID_POINT * g + 208 * n + 24 * nodes,
                device: 0,
            }
        }
        (EvaluatorKind::Ewald, DeviceKind::Cuda) => {
            let g = grid_points(&GPU_COSTS, GPU_BYTES_PER_GRID_POINT)?;
            MemoryEstimate {
                host: 0,
                device: GPU_BYTES_PER_GRID_POINT * g + 280 * n + 48 * nodes,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let periodic = Boundary::Periodic {
            length: std::f64::consts::TAU,
        };
        for (b, k) in [
            (Boundary::FreeSpace, EvaluatorKind::Direct),
            (periodic, EvaluatorKind::Ewald),
        ] {
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
        let m = estimate_bytes(
            periodic,
            EvaluatorKind::Ewald,
            &Device::Cpu,
            1e-6,
            32 * 32 * 32,
            h,
            32,
        )
        .unwrap();
        assert_eq!(m.device, 0);
        assert!(m.host > 208 * 32 * 32 * 32, "{m:?}");
        assert!(m.host < 1 << 30, "{m:?}");
    }
}
