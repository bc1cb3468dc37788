//! Direct summation over all pairs in free space (docs/physics.md §2):
//!
//! ```text
//! u(x_i) = (1/4π) Σ_q g(ρ)/r³ (α_q × r),   r = x_i − x_q, ρ = r/σ_q,
//! ```
//!
//! with the stretching or the velocity gradient from the same pair kernel
//! ([`crate::kernel`]); O(N_targets · N_sources). [`cpu`] is the exact f64 reference every
//! faster free-space evaluator is checked against, for softened gravity too
//! ([`cpu::DirectGravity`]); [`cuda`] puts the trait on the GPU engine of [`all_pairs`]
//! (`kernels/biot_savart.cu`). On the GPU every interaction shares one tile loop
//! (`kernels/tiles.cuh`) and one engine ([`tiles`]): Biot–Savart ([`all_pairs`]) and Plummer
//! gravity ([`cuda_gravity`], `kernels/gravity.cu`).

pub mod all_pairs;
pub mod cpu;
pub mod cuda;
pub mod cuda_gravity;
pub mod tiles;

pub use all_pairs::{AllPairs, Mode};
pub use cpu::{DirectFreeSpace, DirectGravity};
pub use cuda::{CudaDirect, CudaDirectOf};
pub use cuda_gravity::{CudaDirectGravity, CudaDirectGravityOf};
pub use tiles::{GpuReal, KernelConfig, TileEngine};
