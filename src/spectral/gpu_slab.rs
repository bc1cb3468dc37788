//! One rank of the pseudo-spectral solver across several GPUs (docs/physics.md §5.6): the
//! slab decomposition of [`super::slab`] on this rank's GPU, with cuFFT for the local
//! transforms and NCCL ([`crate::device::nccl`]) for the all-to-all transposes and the
//! reductions. Every method is **collective**: all ranks call it in the same order (the rank-0
//! driver and the worker processes of [`crate::run::ranks`] see to that).
//!
//! SKELETON (lead): signatures only; the `slabgpu` engineer implements them.

use super::slab::SlabLayout;
use super::solver::{SpectralGrid, VectorModes};
use super::stepper::SpectralError;
use crate::device::nccl::NcclComm;
use std::sync::Arc;

/// Diagnostics of one state, summed over the ranks in rank order (equal on every rank).
#[derive(Debug, Clone, PartialEq)]
pub struct SlabSums {
    /// Σ w e, Σ w e |k|², Σ w e/|k|, dK/dt from the right-hand side (as the one-GPU solver).
    pub sums: [f64; 4],
    /// The shell spectrum E(s).
    pub spectrum: Vec<f64>,
}

/// This rank's part of the distributed solver.
pub struct SlabRank {
    _private: (),
}

impl SlabRank {
    /// Device memory one rank needs for `grid` over `ranks` GPUs, in bytes (the largest rank's).
    pub fn device_bytes(grid: SpectralGrid, ranks: usize) -> u64 {
        let _ = (grid, ranks);
        unimplemented!("skeleton")
    }

    /// This rank's solver with zero velocity (collective: plans and buffers on every rank).
    /// `Err` when the grid cannot be split over the ranks ([`super::slab::SlabError`]).
    pub fn new(comm: Arc<NcclComm>, grid: SpectralGrid, nu: f64) -> Result<Self, SpectralError> {
        let _ = (comm, grid, nu);
        unimplemented!("skeleton")
    }

    pub fn grid(&self) -> SpectralGrid {
        unimplemented!("skeleton")
    }
    pub fn nu(&self) -> f64 {
        unimplemented!("skeleton")
    }
    /// The split of the product grid.
    pub fn slabs(&self) -> SlabLayout {
        unimplemented!("skeleton")
    }
    pub fn comm(&self) -> &Arc<NcclComm> {
        unimplemented!("skeleton")
    }

    /// Sets the state from the global field rank 0 holds (`Some` on rank 0, `None` elsewhere),
    /// exactly as given (the caller projects first): each rank receives its k_z range.
    pub fn scatter_modes(&mut self, global: Option<&VectorModes>) -> Result<(), SpectralError> {
        let _ = global;
        unimplemented!("skeleton")
    }
    /// The global state gathered on rank 0 (`Some` there, `None` elsewhere).
    pub fn gather_modes(&mut self) -> Result<Option<VectorModes>, SpectralError> {
        unimplemented!("skeleton")
    }
    /// max(|u| + |v| + |w|) over the product grid at the current state (all ranks).
    pub fn speed_sum_max(&mut self) -> Result<f64, SpectralError> {
        unimplemented!("skeleton")
    }
    /// One Lawson RK4 step; a non-finite result (on any rank) is not committed on any rank.
    pub fn step(&mut self, dt: f64) -> Result<(), SpectralError> {
        let _ = dt;
        unimplemented!("skeleton")
    }
    /// The mode sums and spectrum of the current state (all ranks).
    pub fn sums(&mut self) -> Result<SlabSums, SpectralError> {
        unimplemented!("skeleton")
    }
    /// max |∇·u| over the N³ nodes (all ranks).
    pub fn max_divergence(&mut self) -> Result<f64, SpectralError> {
        unimplemented!("skeleton")
    }
    /// max |ω| over the N³ nodes (all ranks).
    pub fn max_vorticity(&mut self) -> Result<f64, SpectralError> {
        unimplemented!("skeleton")
    }
    /// The velocity on the N³ grid gathered on rank 0 (`Some` there), `[i][j][k]` order.
    pub fn velocity_on_grid(&mut self) -> Result<Option<[Vec<f64>; 3]>, SpectralError> {
        unimplemented!("skeleton")
    }
    /// Median ms of one all-to-all transpose of `fields` fields (both directions averaged)
    /// over `repeats`, and the bytes each rank sends to the others in one.
    pub fn time_transpose(
        &mut self,
        fields: usize,
        repeats: usize,
    ) -> Result<(f64, u64), SpectralError> {
        let _ = (fields, repeats);
        unimplemented!("skeleton")
    }
    /// Milliseconds (events on rank 0's stream, after a barrier) of each of `repeats` steps
    /// after one warm-up; the state advances.
    pub fn time_steps(&mut self, dt: f64, repeats: usize) -> Result<Vec<f64>, SpectralError> {
        let _ = (dt, repeats);
        unimplemented!("skeleton")
    }
}
