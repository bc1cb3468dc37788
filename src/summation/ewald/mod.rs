//! The exact periodic velocity by Ewald splitting, CPU, f64, rayon (docs/physics.md §4).
//!
//! # Method
//!
//! With G_s = erf(r/(√2 s))/(4πr), the Green's function of a blob of core σ_q is split as
//! G_σq = (G_σq − G_η) + G_η with one splitting width η ≥ max σ_q:
//!
//! * **Real-space part** (short-ranged): for each target, the pair terms
//!   `kernel(σ_q) − kernel(η)` of [`crate::kernel`] (velocity, stretching and gradient are linear
//!   in the kernel; the self term r = 0 is included as the kernel gives it) over the sources
//!   within r_c, minimum-image convention, cell lists rebuilt each call (cells of side ≥ r_c/2
//!   searched ±2 cells: 125 (r_c/2)³ checked instead of 27 r_c³ with cells of side r_c). A source
//!   with σ_q = η contributes exactly zero and is left out: with equal cores everywhere (the
//!   lattice case) and η = σ, the real-space part is empty. When r_c ≥ π (cores above ~0.4 at
//!   tight accuracy) the minimum image no longer suffices and the real-space part sums explicit
//!   images of every selected source (O(N_t N_s), fine for the small sets that have such cores).
//! * **Smooth part** (particle-mesh Ewald with a Gaussian window, as in spectral Ewald): with
//!   τ = s·η, s ≤ 1/√2,
//!
//!   ```text
//!   e^{−k²η²/2} = e^{−k²τ²/2} · e^{−k²(η² − 2τ²)/2} · e^{−k²τ²/2}
//!   ```
//!
//!   1. spread: H(x_g) = Σ_q α_q ζ_τ(x_g − x_q) at the nodes x_g = −π + g·h of an M³ grid
//!      (h = 2π/M; ζ_τ the normalised 3-D Gaussian, a product of three 1-D ones, truncated to the
//!      P³ nodes nearest x_q);
//!   2. forward FFT ([`crate::spectral::Fft3d`], retained modes |k_i| ≤ K = ⌊(M−1)/2⌋): Ĥ(k) ≈ ω̂₀(k) e^{−k²τ²/2}
//!      with ω̂₀ = (1/V) Σ α_q e^{−ik·x_q};
//!   3. multiply by (i k × ·)/k² · e^{−k²(η² − 2τ²)/2}, k = 0 dropped (also when Σα ≠ 0, as the
//!      oracle does; the real-space part has no k = 0 content);
//!   4. inverse FFT of the 3 velocity components to the grid (F);
//!   5. gather: u(x) = h³ Σ_g F(x_g) ζ_τ(x − x_g) over the same P³ nodes, which applies the last
//!      e^{−k²τ²/2}. The velocity gradient, when stretching or the gradient is asked for, is the
//!      exact derivative of that gather, h³ Σ_g F(x_g) ∇ζ_τ(x − x_g): three inverse transforms
//!      instead of twelve, and three grids in memory instead of twelve. Classical stretching
//!      Σ_j α_p,j ∂_j u_i, transposed Σ_j ∂_i u_j α_p,j, added to the real-space stretching.
//!
//!   Why a Gaussian window rather than cardinal B-splines: its transform is itself a Gaussian
//!   that the Ewald factor absorbs, so nothing is divided (B-splines need a deconvolution by
//!   |b̂(k)|², which near the grid's Nyquist wavenumber amplifies the aliasing by up to
//!   (π/2)^{2p}); its errors are two clean exponentials that the parameter rules below control
//!   to any accuracy (B-spline errors fall only algebraically, like (kh)^p); its derivative is
//!   analytic (the gradient for free); and it is separable (3P exponentials per particle).
//!
//! # Parameters from the accuracy ε
//!
//! ε bounds the relative L2 error (over the targets) of each of velocity, gradient and both
//! stretching schemes; each of the three error sources below gets a third of it. With
//! ℓ = ln(1/ε) and s = τ/η:
//!
//! * real space: the dropped pair terms of G_σ − G_η beyond ρ = r/η decay like e^{−ρ²/2} (the
//!   tail of 1 − g(ρ) and of ρg', docs/physics.md §2): r_c = ρ_c η, ρ_c = √(2(ℓ + [`REAL_MARGIN`]));
//! * window truncation: the nodes left out lie beyond w = P h/2, where the Gaussian has fallen to
//!   e^{−w²/(2τ²)}; the gradient (through ∇ζ_τ) loses about a factor η/τ more, so
//!   P = ⌈2τ √(2(ℓ + ln(1/s) + [`WINDOW_MARGIN`]))/h⌉;
//! * aliasing of spreading and gathering: a grid mode k meets its alias k ± M through both
//!   Gaussians and the multiplier, ~ exp(−[(M − k)²τ² + k²(η² − τ²)]/2), worst over 0 ≤ k ≤ M/2
//!   at exp(−M²η² s²(1 − s²)/2) (the Nyquist modes dropped by the transform are smaller still);
//!   the gradient loses about (η/τ)² more, so
//!   M ≥ √(2(ℓ + 2 ln(1/s) + [`MESH_MARGIN`])) / (η s √(1 − s²)), rounded up to an even
//!   2^a 3^b 5^c 7^d.
//!
//! The three estimates were checked one at a time against the Fourier oracle ([`super::oracle`];
//! 200 random particles, σ ∈ [0.25, 0.4], the other two error sources made negligible): the
//! measured errors follow e^{−ρ_c²/2}, e^{−w²/(2τ²)} and e^{−M²η²s²(1−s²)/2} over ℓ = 5…30, and
//! the margins are the worst measured log(error / estimate) (stretching, the largest) plus ln 3.
//! The resulting end-to-end errors (tests/ewald.rs, ε = 1e-3…1e-12) are 1/3 to 1/20 of ε.
//!
//! s = 1/√2 gives the smallest grid, smaller s a smaller support P on a finer grid (P → 2ℓ/π as
//! s → 0, the e^{−πP/2} of spectral Ewald). η (a multiple of σ_max, ≥ σ_max) and s are chosen per
//! call by minimising a cost model of the real-space pairs, the transforms and the
//! spreading/gathering work ([`params::plan`]) under a cap of M_max³ grid points, M_max from the
//! memory of the device ([`params::max_grid_for_memory`]).
//! For equal cores this is η = σ and no real-space part; for lattice particles the cost is
//! O(N P³ + M³ log M) with M ∝ N^{1/3}: O(N log N).

//! # Blob vorticity
//!
//! [`crate::summation::Summation::vorticity`] sums Σ_q α_q ζ_σq(x − x_q) directly: the Gaussian is short-ranged, so
//! only sources within [`crate::summation::cells::VORTICITY_CUTOFF`] σ_q count (dropped: < e^{−24.5} ≈ 2e-11 of a blob's
//! peak), found with the same cell lists (cells for 7 σ_max, minimum image; explicit images when
//! 7 σ_max ≥ π). No Ewald split is needed.
//!
//! # Determinism
//!
//! Results are bit-identical for any thread count: every target is summed by one task in a fixed
//! source order; the spreading gives each thread a slab of x planes and visits, for each slab, the
//! particles bucketed by the first plane of their support in increasing plane order, so each grid
//! node receives its contributions in the same order whatever the slab width; [`crate::spectral::Fft3d`] transforms
//! every line the same way on any thread; the multiplier is pointwise.
//!
//! # Files
//!
//! [`params`] (the rules above, the cost model, the grid cap), `mesh` (the CPU smooth part),
//! [`cpu`] ([`EwaldPeriodic`]: f64, rayon), [`cuda`] ([`CudaEwald`]: the same method in f32 on
//! a GPU) and [`engine`] (its device side: kernels of `kernels/ewald.cu`, cuFFT, buffers).

pub mod cpu;
pub mod cuda;
pub mod engine;
pub(crate) mod mesh;
pub mod params;

pub use cpu::{EwaldPeriodic, EwaldTimings};
pub use cuda::CudaEwald;
pub use params::{CostModel, EwaldParameters, MESH_MARGIN, REAL_MARGIN, WINDOW_MARGIN};
