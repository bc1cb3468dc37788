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
//! * **Smooth part** (particle-mesh Ewald with a Kaiser–Bessel window and deconvolution,
//!   [`window`]): with w nodes per direction on the M³ grid (nodes x_g = −π + g·h, h = 2π/M),
//!
//!   ```text
//!   φ(x) = I₀(β √(1 − (2x/(w h))²)) on |x| ≤ w h/2,   φ̂(k) = w h · sinh(√(β² − z²))/√(β² − z²),
//!   z = k w h/2 (sin(√(z² − β²))/√(z² − β²) above β)
//!   ```
//!
//!   (Kaiser 1966; Jackson, Meyer, Nishimura & Macovski 1991), normalised by φ̂(0):
//!   1. spread: H(x_g) = Σ_q α_q Φ(x_g − x_q), Φ the product of three φ/φ̂(0), over the w³ nodes
//!      of x_q's support;
//!   2. forward FFT ([`crate::spectral::Fft3d`], retained modes |k_i| ≤ K, the band):
//!      Ĥ(k) ≈ ω̂₀(k) Φ̂(k) with ω̂₀ = (1/V) Σ α_q e^{−ik·x_q}, plus the aliases of k;
//!   3. multiply by (i k × ·)/k² · T(k_x) T(k_y) T(k_z), T(k) = e^{−k²η²/2}/(φ̂(k)/φ̂(0))² (the
//!      Ewald factor is separable; spreading and gathering each apply Φ̂ once, so the multiplier
//!      divides by it twice; a per-axis table, [`KaiserBessel::multiplier_table`]), k = 0
//!      dropped (also when Σα ≠ 0, as the oracle does; the real-space part has no k = 0 content);
//!   4. inverse FFT of the 3 velocity components to the grid (F);
//!   5. gather: u(x) = h³ Σ_g F(x_g) Φ(x − x_g) over the same w³ nodes. The velocity gradient,
//!      when stretching or the gradient is asked for, is the exact derivative of that gather,
//!      h³ Σ_g F(x_g) ∇Φ(x − x_g) with φ'(x) = −β (2/(wh))² x I₁(βs)/s, s = √(1 − (2x/(wh))²)
//!      (finite at the edge: I₁(βs)/s → β/2): three inverse transforms instead of twelve, and
//!      three grids in memory instead of twelve. Classical stretching Σ_j α_p,j ∂_j u_i,
//!      transposed Σ_j ∂_i u_j α_p,j, added to the real-space stretching.
//!
//!   Why Kaiser–Bessel: gridding windows built for non-uniform FFTs reach a tolerance with about
//!   half the support of a Gaussian (w ≈ 8 at 1e-4 here against P = 12–13 at 1e-6 for the
//!   Gaussian window this module used before, spectral-Ewald style: Lindbo & Tornberg 2011); its
//!   transform is closed-form, so the deconvolution is exact; its aliasing error is one clean
//!   exponential in w (Fessler & Sutton 2003); it is separable and its derivative is analytic.
//!   The "exponential of semicircle" window of FINUFFT (Barnett, Magland & af Klinteberg 2019)
//!   decays alike but its transform needs a quadrature.
//!
//! # Parameters from the accuracy ε
//!
//! ε bounds the relative L2 error (over the targets) of each of velocity, gradient and both
//! stretching schemes; each of the three error sources below gets a third of it. With
//! ℓ = ln(1/ε):
//!
//! * real space: the dropped pair terms of G_σ − G_η beyond ρ = r/η decay like e^{−ρ²/2} (the
//!   tail of 1 − g(ρ) and of ρg', docs/physics.md §2): r_c = ρ_c η, ρ_c = √(2(ℓ + [`REAL_MARGIN`]));
//! * band: the modes |k_i| > K are dropped, each damped by e^{−k²η²/2}:
//!   K = ⌈√(2(ℓ + [`BAND_MARGIN`]))/η⌉;
//! * aliasing of spreading and gathering: at upsampling u = M/(2K) (M the smallest even
//!   2^a 3^b 5^c 7^d ≥ 2uK for the candidate u) the shape β = π w (1 − K/M) puts the alias
//!   k − M of the band edge K at the edge of φ̂'s main lobe, and the ratio of alias to mode
//!   falls like e^{−π w √(1 − 1/u)} (Fessler & Sutton 2003; Beatty, Nishimura & Pauly 2005);
//!   the gradient (the derivative of the gather) loses a factor that grows with the grid and
//!   the upsampling, so w = ⌈(ℓ + ln(Mη) + 3 ln u + [`ALIAS_MARGIN`])/(π √(1 − 1/u))⌉
//!   ([`params::mesh_and_window`]).
//!
//! The estimates were checked one at a time against the Fourier oracle ([`super::oracle`];
//! tests/ewald.rs `measure_error_model`: 200 particles, equal cores σ = 0.3 and 0.15, the other
//! errors made negligible): the measured errors follow e^{−K²η²/2} over ℓ = 5…25 and
//! e^{−π w √(1 − 1/u)} over w = 3…14, u = 1.25…3, and the margins are the worst measured
//! log(error / estimate) (stretching, the largest) plus ln 3 (the constants' docs give the
//! numbers). The resulting end-to-end errors (tests/ewald.rs, ε = 1e-3…1e-12) are ε/4 to ε/20.
//!
//! η (a multiple of σ_max, ≥ σ_max) and u are chosen per call by minimising a cost model of the
//! real-space pairs, the transforms and the spreading/gathering work ([`params::plan`]) under a
//! cap of M_max³ grid points, M_max from the memory of the device
//! ([`params::max_grid_for_memory`]). For equal cores this is η = σ and no real-space part; for
//! lattice particles the cost is O(N w³ + M³ log M) with M ∝ N^{1/3}: O(N log N). Planned for
//! the 256³ lattice (η = σ, GPU cost model; `lattice_256_plans_pure_mesh_under_an_80_gb_cap`
//! prints them), M and w:
//!
//! | request | σ = h | σ = 0.75 h |
//! | --- | --- | --- |
//! | 1e-4 | 560, 8 | 750, 8 |
//! | 1e-5 (CPU) | 720, 9 | 810, 10 |
//! | 1e-5 (GPU: the method at 5e-6) | 750, 9 | 840, 10 |
//! | 1e-6 (CPU) | 768, 10 | 750, 13 |
//! | 1e-6, the former Gaussian window | 672, P = 12 | 700, P = 13 |
//!
//! The window work w³ N is 8.6e9 at 1e-4 against the Gaussian's 2.9e10 (σ = h) and 3.7e10
//! (σ = 0.75 h) at 1e-6, 3.4 and 4.3 times less; the grid M³ is 1.8e8 and 4.2e8 against 3.0e8
//! and 3.4e8.

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
//! [`params`] (the rules above, the cost model, the grid cap), [`window`] (the Kaiser–Bessel
//! window, its transform and the multiplier's table), `mesh` (the CPU smooth part),
//! [`cpu`] ([`EwaldPeriodic`]: f64, rayon), [`cuda`] ([`CudaEwald`]: the same method in f32 on
//! a GPU) and [`engine`] (its device side: kernels of `kernels/ewald.cu`, cuFFT, buffers).

pub mod cpu;
pub mod cuda;
pub mod engine;
pub(crate) mod mesh;
pub mod params;
pub mod window;

pub use cpu::{EwaldPeriodic, EwaldTimings};
pub use cuda::CudaEwald;
pub use params::{CostModel, EwaldParameters, ALIAS_MARGIN, BAND_MARGIN, REAL_MARGIN};
pub use window::KaiserBessel;
