//! Direct summation over all pairs in free space (docs/physics.md §2):
//!
//! ```text
//! u(x_i) = (1/4π) Σ_q g(ρ)/r³ (α_q × r),   r = x_i − x_q, ρ = r/σ_q,
//! ```
//!
//! with the stretching or the velocity gradient from the same pair kernel
//! ([`crate::kernel`]); O(N_targets · N_sources). [`cpu`] is the exact f64 reference every
//! faster free-space evaluator is checked against, for softened gravity too
//! ([`cpu::DirectGravity`]); [`cuda`] puts the trait on the GPU engine of
//! [`all_pairs`] (`kernels/biot_savart.cu`).

pub mod all_pairs;
pub mod cpu;
pub mod cuda;

pub use all_pairs::{AllPairs, GpuReal, KernelConfig, Mode};
pub use cpu::{DirectFreeSpace, DirectGravity};
pub use cuda::{CudaDirect, CudaDirectOf};
