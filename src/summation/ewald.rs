//! The exact periodic velocity by Ewald splitting, CPU, f64, rayon (PHYSICS.md §4).
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
//!   2. forward FFT ([`Fft3d`], retained modes |k_i| ≤ K = ⌊(M−1)/2⌋): Ĥ(k) ≈ ω̂₀(k) e^{−k²τ²/2}
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
//!   tail of 1 − g(ρ) and of ρg', PHYSICS.md §2): r_c = ρ_c η, ρ_c = √(2(ℓ + [`REAL_MARGIN`]));
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
//! spreading/gathering work ([`EwaldPeriodic::plan`]) under a cap of [`MAX_GRID`]³ grid points.
//! For equal cores this is η = σ and no real-space part; for lattice particles the cost is
//! O(N P³ + M³ log M) with M ∝ N^{1/3}: O(N log N).

//! # Blob vorticity
//!
//! [`Summation::vorticity`] sums Σ_q α_q ζ_σq(x − x_q) directly: the Gaussian is short-ranged, so
//! only sources within [`VORTICITY_CUTOFF`] σ_q count (dropped: < e^{−24.5} ≈ 2e-11 of a blob's
//! peak), found with the same cell lists (cells for 7 σ_max, minimum image; explicit images when
//! 7 σ_max ≥ π). No Ewald split is needed.
//!
//! # Determinism
//!
//! Results are bit-identical for any thread count: every target is summed by one task in a fixed
//! source order; the spreading gives each thread a slab of x planes and visits, for each slab, the
//! particles bucketed by the first plane of their support in increasing plane order, so each grid
//! node receives its contributions in the same order whatever the slab width; [`Fft3d`] transforms
//! every line the same way on any thread; the multiplier is pointwise.

use super::{check_inputs, Boundary, Evaluation, Extra, Sources, Summation, SummationError};
use crate::kernel::StretchingScheme;
use crate::kernel::{gaussian_zeta, velocity, velocity_and_stretching, velocity_gradient};
use crate::spectral::{Fft3d, ModeLayout};
use num_complex::Complex64;
use rayon::prelude::*;
use std::f64::consts::{PI, TAU};
use std::time::Instant;

/// Added to ℓ = ln(1/ε) in the real-space cutoff rule: ln 3 (one third of the budget per error
/// term) + 0.8 (worst measured log of error / e^{−ρ_c²/2}, stretching; velocity: −0.8).
pub const REAL_MARGIN: f64 = 1.9;
/// Added to ℓ + ln(η/τ) in the window-support rule: ln 3 + 0.3 (measured: the truncation error
/// of the stretching is (η/τ)·e^{−0.4…0.3}·e^{−w²/(2τ²)}; of the velocity ≤ 1.1 e^{−w²/(2τ²)}).
pub const WINDOW_MARGIN: f64 = 1.4;
/// Added to ℓ + 2 ln(η/τ) in the grid-size rule: ln 3 + 1.3 (measured: the aliasing error of the
/// stretching is (η/τ)² e^{−0.4…1.1} e^{−M²η²s²(1−s²)/2} for s = 0.1…1/√2; of the velocity
/// ≤ e^{1.3} e^{−M²η²s²(1−s²)/2}).
pub const MESH_MARGIN: f64 = 2.4;
/// Largest grid side M (memory cap: 3 real fields of M³ and 3 half spectra).
pub const MAX_GRID: usize = 384;
/// Blob-vorticity cutoff in units of σ_q: e^{−7²/2} ≈ 2.3e-11 of the blob's peak.
pub const VORTICITY_CUTOFF: f64 = 7.0;

/// Candidate splitting widths, in units of σ_max (the cost model picks one).
const ETA_FACTORS: [f64; 10] = [1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0, 12.0];
/// Candidate window widths s = τ/η (≤ 1/√2).
const S_CANDIDATES: [f64; 12] = [
    0.1,
    0.15,
    0.2,
    0.25,
    0.3,
    0.35,
    0.4,
    0.45,
    0.5,
    0.55,
    0.6,
    std::f64::consts::FRAC_1_SQRT_2,
];

/// The constants of the planner's cost model, nanoseconds (see [`EwaldPeriodic::plan`]): the
/// method and its accuracy rules are the same on every device, the cheapest (η, s) is not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Per real-space pair in range, velocity only (two kernel calls).
    pub ns_pair_velocity: f64,
    /// Per real-space pair in range, with stretching or the gradient.
    pub ns_pair_extra: f64,
    /// Per distance check of the cell search.
    pub ns_pair_check: f64,
    /// Per grid point and log₂(M³), for each of the 6 transforms.
    pub ns_fft_point_log: f64,
    /// Per window point (P³) and grid field touched.
    pub ns_grid_point: f64,
    /// Fields touched per window point when spreading (3 strength components).
    pub spread_fields: f64,
    /// … when gathering the velocity (3), and the velocity with its gradient (6: F·w and F·∂w).
    pub gather_fields: f64,
    pub gather_fields_gradient: f64,
    /// Fixed cost per source and per target.
    pub ns_per_particle: f64,
}

impl CostModel {
    /// One CPU core, measured with the release build on the development machine.
    pub const CPU: CostModel = CostModel {
        ns_pair_velocity: 180.0,
        ns_pair_extra: 300.0,
        ns_pair_check: 5.0,
        ns_fft_point_log: 0.45,
        ns_grid_point: 0.5,
        spread_fields: 3.0,
        gather_fields: 3.0,
        gather_fields_gradient: 6.0,
        ns_per_particle: 500.0,
    };
}

/// Parameters of one evaluation (see the module docs for the rules).
#[derive(Debug, Clone, PartialEq)]
pub struct EwaldParameters {
    /// The requested relative accuracy ε.
    pub accuracy: f64,
    /// Splitting width η ≥ max σ_q.
    pub eta: f64,
    /// Window width τ = s·η.
    pub tau: f64,
    /// Real-space cutoff r_c = ρ_c η.
    pub r_cut: f64,
    /// Grid points per side M.
    pub grid: usize,
    /// Window support P (nodes per dimension).
    pub support: usize,
    /// Retained wavenumbers |k_i| ≤ K.
    pub kmax: usize,
    /// Sources in the real-space part (those with σ_q ≠ η).
    pub real_space_sources: usize,
    /// Cells per side of the real-space cell lists; 0: explicit images (r_c ≥ π).
    pub cells_per_side: usize,
    /// The cost model's estimate, seconds on one core.
    pub estimated_seconds: f64,
}

impl std::fmt::Display for EwaldParameters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ε={:.0e} η={:.4} τ={:.4} r_c={:.4} M={} P={} K={} real-space sources={} cells={}",
            self.accuracy,
            self.eta,
            self.tau,
            self.r_cut,
            self.grid,
            self.support,
            self.kmax,
            self.real_space_sources,
            self.cells_per_side
        )
    }
}

/// Wall-clock seconds of the phases of the last evaluation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EwaldTimings {
    /// Spreading the strengths onto the grid.
    pub spread: f64,
    /// Forward transforms, multiplier, inverse transforms.
    pub transforms: f64,
    /// Interpolation back to the targets (velocity, and gradient when asked).
    pub gather: f64,
    /// Real-space sums (cell lists, pair terms) and combination.
    pub real_space: f64,
}

/// Ewald-split periodic evaluator on the box [−π, π)^3 (see the module docs).
pub struct EwaldPeriodic {
    accuracy: f64,
    /// Parameters fixed by [`EwaldPeriodic::with_parameters`] instead of planned per call.
    fixed: Option<EwaldParameters>,
    params: Option<EwaldParameters>,
    timings: EwaldTimings,
    fft: Option<Fft3d>,
    grids: [Vec<f64>; 3],
    modes: [Vec<Complex64>; 3],
}

impl Default for EwaldPeriodic {
    fn default() -> Self {
        Self::new(1e-6)
    }
}

impl std::fmt::Debug for EwaldPeriodic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EwaldPeriodic")
            .field("accuracy", &self.accuracy)
            .field("params", &self.params)
            .finish()
    }
}

/// Wraps a coordinate into [−π, π).
#[inline]
fn wrap(x: f64) -> f64 {
    let y = (x + PI).rem_euclid(TAU) - PI;
    if y >= PI {
        y - TAU
    } else {
        y
    }
}

#[inline]
fn add3(a: &mut [f64; 3], b: &[f64; 3]) {
    a[0] += b[0];
    a[1] += b[1];
    a[2] += b[2];
}

#[inline]
fn sub3(a: &[f64; 3], b: &[f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

/// Smallest even 2^a 3^b 5^c 7^d ≥ n.
pub(crate) fn fft_size(n: usize) -> usize {
    let mut m = n.max(2);
    loop {
        if m % 2 == 0 {
            let mut r = m;
            for p in [2, 3, 5, 7] {
                while r % p == 0 {
                    r /= p;
                }
            }
            if r == 1 {
                return m;
            }
        }
        m += 1;
    }
}

/// Cells per side for a cutoff: side ≥ r_cut/[`CELL_SUB`] (searched ±CELL_SUB cells), or 0 when
/// r_cut ≥ π (explicit images).
pub(crate) fn cells_for(r_cut: f64) -> usize {
    if r_cut < PI {
        ((TAU * CELL_SUB as f64 / r_cut).floor() as usize).max(2)
    } else {
        0
    }
}

/// Cells searched on each side of a target's cell: cells of side ≥ r_c/2 and a 5³ stencil
/// check 125 (r_c/2)³ ≈ 3.7 × the cutoff sphere's volume instead of 27 r_c³ ≈ 6.4 ×.
pub(crate) const CELL_SUB: usize = 2;

/// Folds a difference of two coordinates in [−π, π) into [−π, π] (minimum image).
#[inline(always)]
fn fold(r: f64) -> f64 {
    if r > PI {
        r - TAU
    } else if r < -PI {
        r + TAU
    } else {
        r
    }
}

/// Sources (a selection, wrapped into the box and reordered by cell) and the neighbour search
/// of the real-space part and of the blob vorticity.
struct Neighbours {
    r_cut2: f64,
    /// Cells per side; 0: no cells, explicit images.
    cells: usize,
    side: f64,
    start: Vec<usize>,
    x: Vec<[f64; 3]>,
    alpha: Vec<[f64; 3]>,
    sigma: Vec<f64>,
    /// Image shifts (explicit-image mode).
    shifts: Vec<[f64; 3]>,
}

impl Neighbours {
    /// Cells when r_cut < π (minimum image), explicit images otherwise.
    fn build(sources: &Sources, selected: &[usize], r_cut: f64) -> Self {
        let cells = cells_for(r_cut);
        let ncell = cells.max(1).pow(3);
        let side = TAU / cells.max(1) as f64;
        let xw: Vec<[f64; 3]> = selected.iter().map(|&q| sources.x[q].map(wrap)).collect();
        let cell_of = |x: &[f64; 3]| -> usize {
            if cells == 0 {
                return 0;
            }
            let c = x.map(|v| (((v + PI) / side) as usize).min(cells - 1));
            (c[0] * cells + c[1]) * cells + c[2]
        };
        // Counting sort by cell, stable (selection order within a cell).
        let mut start = vec![0usize; ncell + 1];
        let ids: Vec<usize> = xw.iter().map(cell_of).collect();
        for &c in &ids {
            start[c + 1] += 1;
        }
        for c in 0..ncell {
            start[c + 1] += start[c];
        }
        let mut fill = start.clone();
        let mut order = vec![0usize; selected.len()];
        for (k, &c) in ids.iter().enumerate() {
            order[fill[c]] = k;
            fill[c] += 1;
        }
        let mut shifts = Vec::new();
        if cells == 0 {
            let m = ((r_cut + PI) / TAU).ceil() as i64;
            for i in -m..=m {
                for j in -m..=m {
                    for k in -m..=m {
                        shifts.push([i as f64 * TAU, j as f64 * TAU, k as f64 * TAU]);
                    }
                }
            }
        }
        Self {
            r_cut2: r_cut * r_cut,
            cells,
            side,
            start,
            x: order.iter().map(|&k| xw[k]).collect(),
            alpha: order.iter().map(|&k| sources.alpha[selected[k]]).collect(),
            sigma: order.iter().map(|&k| sources.sigma[selected[k]]).collect(),
            shifts,
        }
    }

    fn is_empty(&self) -> bool {
        self.x.is_empty()
    }

    /// Calls `f(j, r)` for every (image of a) stored source j with |r| < r_cut, r = x − x_j, in
    /// an order that depends only on x and the sources.
    #[inline]
    fn visit(&self, x: &[f64; 3], mut f: impl FnMut(usize, [f64; 3])) {
        let x = x.map(wrap);
        if self.cells == 0 {
            for (j, xj) in self.x.iter().enumerate() {
                let r0 = [0, 1, 2].map(|d| fold(x[d] - xj[d]));
                for s in &self.shifts {
                    let r = [r0[0] + s[0], r0[1] + s[1], r0[2] + s[2]];
                    if r[0] * r[0] + r[1] * r[1] + r[2] * r[2] < self.r_cut2 {
                        f(j, r);
                    }
                }
            }
            return;
        }
        let n = self.cells;
        let c = x.map(|v| (((v + PI) / self.side) as usize).min(n - 1));
        // Distinct neighbour cells per axis: c−SUB..=c+SUB (mod n), or every cell when the
        // stencil would wrap onto itself.
        let width = 2 * CELL_SUB + 1;
        let axis = |ci: usize| -> ([usize; 2 * CELL_SUB + 1], usize) {
            let mut a = [0usize; 2 * CELL_SUB + 1];
            if n >= width {
                for (k, ak) in a.iter_mut().enumerate() {
                    *ak = (ci + n + k - CELL_SUB) % n;
                }
                (a, width)
            } else {
                for (k, ak) in a.iter_mut().enumerate().take(n) {
                    *ak = k;
                }
                (a, n)
            }
        };
        let (ax, nx) = axis(c[0]);
        let (ay, ny) = axis(c[1]);
        let (az, nz) = axis(c[2]);
        for &cx in &ax[..nx] {
            for &cy in &ay[..ny] {
                for &cz in &az[..nz] {
                    let cell = (cx * n + cy) * n + cz;
                    for j in self.start[cell]..self.start[cell + 1] {
                        let xj = &self.x[j];
                        let r = [fold(x[0] - xj[0]), fold(x[1] - xj[1]), fold(x[2] - xj[2])];
                        if r[0] * r[0] + r[1] * r[1] + r[2] * r[2] < self.r_cut2 {
                            f(j, r);
                        }
                    }
                }
            }
        }
    }
}

/// The truncated Gaussian window on the M³ grid with nodes −π + g·h.
#[derive(Clone, Copy)]
struct Window {
    m: usize,
    p: usize,
    h: f64,
    /// 1/(2τ²).
    inv_2tau2: f64,
    /// 1/τ².
    inv_tau2: f64,
    /// (2πτ²)^(−1/2), the 1-D normalisation.
    norm: f64,
}

impl Window {
    fn new(m: usize, p: usize, tau: f64) -> Self {
        Self {
            m,
            p,
            h: TAU / m as f64,
            inv_2tau2: 0.5 / (tau * tau),
            inv_tau2: 1.0 / (tau * tau),
            norm: 1.0 / (TAU.sqrt() * tau),
        }
    }

    /// First support node per axis (in 0..M) and δ = u − first (u the position in grid units).
    /// The support is the P nodes first..first+P−1 (mod M); every node outside it is at least
    /// P h/2 away.
    #[inline]
    fn locate(&self, x: &[f64; 3]) -> ([usize; 3], [f64; 3]) {
        let mut first = [0usize; 3];
        let mut delta = [0.0; 3];
        let mf = self.m as f64;
        for d in 0..3 {
            let u = (wrap(x[d]) + PI) / self.h;
            let s = (u + 1.0 - 0.5 * self.p as f64).floor();
            delta[d] = u - s;
            first[d] = (s as i64).rem_euclid(self.m as i64) as usize;
            debug_assert!(u < mf + 1.0);
        }
        (first, delta)
    }

    /// 1-D weights ζ₁(d_m), d_m = (δ − m) h (position minus node), for m = 0..P.
    #[inline]
    fn weights(&self, delta: f64, w: &mut [f64]) {
        for (m, wm) in w.iter_mut().enumerate() {
            let d = (delta - m as f64) * self.h;
            *wm = self.norm * (-d * d * self.inv_2tau2).exp();
        }
    }

    /// Weights and their derivatives with respect to the position: −d/τ² ζ₁(d).
    #[inline]
    fn weights_and_derivatives(&self, delta: f64, w: &mut [f64], dw: &mut [f64]) {
        for (m, (wm, dm)) in w.iter_mut().zip(dw.iter_mut()).enumerate() {
            let d = (delta - m as f64) * self.h;
            *wm = self.norm * (-d * d * self.inv_2tau2).exp();
            *dm = -d * self.inv_tau2 * *wm;
        }
    }

    /// The two contiguous runs (grid start, weight range) of an axis' support starting at
    /// `first`.
    #[inline]
    fn runs(&self, first: usize) -> [(usize, usize, usize); 2] {
        let n1 = self.p.min(self.m - first);
        [(first, 0, n1), (0, n1, self.p)]
    }
}

/// Result of the mesh part at the targets.
struct MeshOut {
    velocity: Vec<[f64; 3]>,
    gradient: Vec<[[f64; 3]; 3]>,
}

impl EwaldPeriodic {
    /// An evaluator with relative accuracy `accuracy` (1e-6 is a good default, 1e-10 for
    /// tests). Panics unless 1e-15 ≤ accuracy < 1.
    pub fn new(accuracy: f64) -> Self {
        assert!(
            (1e-15..1.0).contains(&accuracy),
            "EwaldPeriodic: accuracy {accuracy} outside [1e-15, 1)"
        );
        Self {
            accuracy,
            fixed: None,
            params: None,
            timings: EwaldTimings::default(),
            fft: None,
            grids: Default::default(),
            modes: Default::default(),
        }
    }

    /// An evaluator with fixed parameters (experiments and tests: e.g. one error term isolated
    /// by making the others negligible). `eta` must be ≥ every σ_q; `real_space_sources`,
    /// `cells_per_side`, `kmax` and `estimated_seconds` are recomputed.
    pub fn with_parameters(params: EwaldParameters) -> Self {
        let mut e = Self::new(params.accuracy);
        e.fixed = Some(params);
        e
    }

    pub fn accuracy(&self) -> f64 {
        self.accuracy
    }

    /// The parameters of the last evaluation (for logs), `None` before the first.
    pub fn parameters(&self) -> Option<&EwaldParameters> {
        self.params.as_ref()
    }

    /// Phase timings of the last evaluation.
    pub fn timings(&self) -> EwaldTimings {
        self.timings
    }

    /// Chooses η, τ, r_c, M and P for `accuracy` (module docs): the rules fix r_c, P and M for
    /// each candidate (η, s), and the cheapest candidate by the cost model wins.
    ///
    /// `n_below_max` is the number of sources with σ_q < σ_max (the real-space sources when
    /// η = σ_max); `extra` says whether stretching or the gradient is wanted. Cost model (one
    /// core, ns; measured with the release build on the development machine): real-space pairs
    /// in range × (180 velocity, 300 with extras; two kernel calls each) + distance checks × 5,
    /// transforms 6 × 0.45 M³ log₂ M³, spreading 3 P³ N_s and gathering (3 or 6) P³ N_t × 0.5,
    /// plus 500 per particle. Sources and targets are assumed spread over the box.
    pub fn plan(
        accuracy: f64,
        sigma_max: f64,
        n_below_max: usize,
        n_sources: usize,
        n_targets: usize,
        extra: bool,
    ) -> Result<EwaldParameters, SummationError> {
        Self::plan_with_costs(
            accuracy,
            sigma_max,
            n_below_max,
            n_sources,
            n_targets,
            extra,
            &CostModel::CPU,
        )
    }

    /// [`EwaldPeriodic::plan`] with another device's cost model (same rules, same candidates).
    pub fn plan_with_costs(
        accuracy: f64,
        sigma_max: f64,
        n_below_max: usize,
        n_sources: usize,
        n_targets: usize,
        extra: bool,
        cost: &CostModel,
    ) -> Result<EwaldParameters, SummationError> {
        let ell = (1.0 / accuracy).ln();
        let rho_c = (2.0 * (ell + REAL_MARGIN)).sqrt();
        let (ns, nt) = (n_sources as f64, n_targets as f64);
        let volume = TAU * TAU * TAU;
        let mut best: Option<EwaldParameters> = None;
        for fac in ETA_FACTORS {
            let eta = sigma_max * fac;
            let n_rs = if fac == 1.0 { n_below_max } else { n_sources };
            let r_cut = rho_c * eta;
            let cells = cells_for(r_cut);
            let real_ns = if n_rs == 0 {
                0.0
            } else {
                let width = (2 * CELL_SUB + 1) as f64;
                let checked = if cells > 0 {
                    (width / cells as f64).min(1.0).powi(3)
                } else {
                    let m = ((r_cut + PI) / TAU).ceil();
                    (2.0 * m + 1.0).powi(3)
                };
                let in_range = (4.0 / 3.0 * PI * r_cut.powi(3) / volume).min(checked);
                let pair = if extra {
                    cost.ns_pair_extra
                } else {
                    cost.ns_pair_velocity
                };
                nt * n_rs as f64 * (checked * cost.ns_pair_check + in_range * pair)
            };
            for s in S_CANDIDATES {
                let tau = s * eta;
                let mesh_e = (2.0 * (ell + MESH_MARGIN - 2.0 * s.ln())).sqrt();
                let window_e = (2.0 * (ell + WINDOW_MARGIN - s.ln())).sqrt();
                let m_min = mesh_e / (eta * s * (1.0 - s * s).sqrt());
                // (m_min is NaN or infinite only for degenerate σ_max, rejected before.)
                if m_min.is_nan() || m_min > MAX_GRID as f64 {
                    continue;
                }
                let m = fft_size((m_min.ceil() as usize).max(8));
                if m > MAX_GRID {
                    continue;
                }
                let h = TAU / m as f64;
                let p = (2.0 * tau * window_e / h).ceil() as usize;
                if p > m {
                    continue;
                }
                let m3 = (m as f64).powi(3);
                let p3 = (p as f64).powi(3);
                let gather = if extra {
                    cost.gather_fields_gradient
                } else {
                    cost.gather_fields
                };
                let mesh_ns = 6.0 * cost.ns_fft_point_log * m3 * m3.log2()
                    + cost.ns_grid_point * p3 * (cost.spread_fields * ns + gather * nt)
                    + cost.ns_per_particle * (ns + nt);
                let cost = (real_ns + mesh_ns) * 1e-9;
                if best.as_ref().is_none_or(|b| cost < b.estimated_seconds) {
                    best = Some(EwaldParameters {
                        accuracy,
                        eta,
                        tau,
                        r_cut,
                        grid: m,
                        support: p,
                        kmax: (m - 1) / 2,
                        real_space_sources: n_rs,
                        cells_per_side: cells,
                        estimated_seconds: cost,
                    });
                }
            }
        }
        best.ok_or_else(|| {
            SummationError::Unsupported(format!(
                "Ewald: no grid of at most {MAX_GRID}^3 points reaches accuracy {accuracy:e} \
                 for core radius σ_max = {sigma_max} in the box [-π, π)^3"
            ))
        })
    }

    /// The smooth part at the targets: velocity, and the gradient when `want_grad`.
    fn mesh(
        &mut self,
        p: &EwaldParameters,
        sources: &Sources,
        targets: &[[f64; 3]],
        want_grad: bool,
    ) -> MeshOut {
        let (m, pp) = (p.grid, p.support);
        let win = Window::new(m, pp, p.tau);
        let layout = ModeLayout::new(p.kmax);
        if self
            .fft
            .as_ref()
            .is_none_or(|f| f.m() != m || f.layout() != layout)
        {
            self.fft = Some(Fft3d::new(m, layout));
        }
        let m3 = m * m * m;
        for g in &mut self.grids {
            g.clear();
            g.resize(m3, 0.0);
        }
        for md in &mut self.modes {
            md.clear();
            md.resize(layout.len(), Complex64::new(0.0, 0.0));
        }

        // 1. Spread.
        let t0 = Instant::now();
        let locs: Vec<([usize; 3], [f64; 3])> =
            sources.x.par_iter().map(|x| win.locate(x)).collect();
        spread(&win, &locs, sources.alpha, &mut self.grids);

        let t1 = Instant::now();
        // 2.–4. Transform, multiply, transform back.
        let fft = self.fft.as_mut().unwrap();
        for (g, md) in self.grids.iter_mut().zip(self.modes.iter_mut()) {
            fft.forward(g, md);
        }
        multiply(&layout, p.eta, p.tau, &mut self.modes);
        for (g, md) in self.grids.iter_mut().zip(self.modes.iter()) {
            fft.inverse(md, g);
        }

        // 5. Gather.
        let t2 = Instant::now();
        let res = gather(&win, &self.grids, targets, want_grad);
        self.timings.spread = (t1 - t0).as_secs_f64();
        self.timings.transforms = (t2 - t1).as_secs_f64();
        self.timings.gather = t2.elapsed().as_secs_f64();
        res
    }
}

/// Spreads α_q ζ_τ(x_g − x_q) onto the three grids (module docs: determinism).
fn spread(
    win: &Window,
    locs: &[([usize; 3], [f64; 3])],
    alpha: &[[f64; 3]],
    grids: &mut [Vec<f64>; 3],
) {
    let (m, p) = (win.m, win.p);
    // Bucket the particles by the first x plane of their support (stable).
    let mut start = vec![0usize; m + 1];
    for l in locs {
        start[l.0[0] + 1] += 1;
    }
    for i in 0..m {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut order = vec![0usize; locs.len()];
    for (q, l) in locs.iter().enumerate() {
        order[fill[l.0[0]]] = q;
        fill[l.0[0]] += 1;
    }
    // Slab width: any value gives the same bits; ~4 slabs per thread balance the work.
    let slab = m.div_ceil(4 * rayon::current_num_threads()).max(1);
    let plane = m * m;
    let [g0, g1, g2] = grids;
    g0.par_chunks_mut(slab * plane)
        .zip(g1.par_chunks_mut(slab * plane))
        .zip(g2.par_chunks_mut(slab * plane))
        .enumerate()
        .for_each(|(si, ((s0, s1), s2))| {
            let ia = (si * slab) as i64;
            let ib = ia + (s0.len() / plane) as i64;
            let mut wy = vec![0.0; p];
            let mut wz = vec![0.0; p];
            let (o0, o1, o2) = (s0, s1, s2);
            // Unwrapped first planes v in increasing order: a node of plane i sees the buckets
            // v = i−P+1..=i in this order whatever the slab.
            for v in (ia - p as i64 + 1)..ib {
                let b = v.rem_euclid(m as i64) as usize;
                let lo = v.max(ia);
                let hi = (v + p as i64).min(ib);
                if lo >= hi {
                    continue;
                }
                for &q in &order[start[b]..start[b + 1]] {
                    let (first, delta) = locs[q];
                    win.weights(delta[1], &mut wy);
                    win.weights(delta[2], &mut wz);
                    let runs = win.runs(first[2]);
                    let a = alpha[q];
                    for i in lo..hi {
                        let mi = (i - v) as usize;
                        let d = (delta[0] - mi as f64) * win.h;
                        let wx = win.norm * (-d * d * win.inv_2tau2).exp();
                        let base = (i - ia) as usize * plane;
                        for (bi, &wyb) in wy.iter().enumerate() {
                            let mut y = first[1] + bi;
                            if y >= m {
                                y -= m;
                            }
                            let c = wx * wyb;
                            let (a0, a1, a2) = (a[0] * c, a[1] * c, a[2] * c);
                            let row = base + y * m;
                            for &(z0, w0, w1) in &runs {
                                let n = w1 - w0;
                                let r0 = &mut o0[row + z0..row + z0 + n];
                                let r1 = &mut o1[row + z0..row + z0 + n];
                                let r2 = &mut o2[row + z0..row + z0 + n];
                                let w = &wz[w0..w1];
                                for k in 0..n {
                                    r0[k] += a0 * w[k];
                                    r1[k] += a1 * w[k];
                                    r2[k] += a2 * w[k];
                                }
                            }
                        }
                    }
                }
            }
        });
}

/// Multiplies the spectrum of the spread field by (i k × ·)/k² e^{−k²(η² − 2τ²)/2}, k = 0 → 0.
fn multiply(layout: &ModeLayout, eta: f64, tau: f64, modes: &mut [Vec<Complex64>; 3]) {
    let (side, nz) = (layout.side(), layout.nz());
    let c = 0.5 * (eta * eta - 2.0 * tau * tau);
    let [m0, m1, m2] = modes;
    m0.par_chunks_mut(side * nz)
        .zip(m1.par_chunks_mut(side * nz))
        .zip(m2.par_chunks_mut(side * nz))
        .enumerate()
        .for_each(|(iy, ((a, b), cc))| {
            let ky = layout.wavenumber(iy) as f64;
            for ix in 0..side {
                let kx = layout.wavenumber(ix) as f64;
                for kz in 0..nz {
                    let i = ix * nz + kz;
                    let kzf = kz as f64;
                    let k2 = kx * kx + ky * ky + kzf * kzf;
                    if k2 == 0.0 {
                        a[i] = Complex64::new(0.0, 0.0);
                        b[i] = Complex64::new(0.0, 0.0);
                        cc[i] = Complex64::new(0.0, 0.0);
                        continue;
                    }
                    let f = (-c * k2).exp() / k2;
                    let h = [a[i], b[i], cc[i]];
                    let x = [
                        h[2] * ky - h[1] * kzf,
                        h[0] * kzf - h[2] * kx,
                        h[1] * kx - h[0] * ky,
                    ];
                    // i z = (−Im z, Re z).
                    let u = x.map(|z| Complex64::new(-z.im * f, z.re * f));
                    a[i] = u[0];
                    b[i] = u[1];
                    cc[i] = u[2];
                }
            }
        });
}

/// u(x) = h³ Σ_g F(x_g) ζ_τ(x − x_g) and, when `want_grad`, its exact gradient.
fn gather(win: &Window, grids: &[Vec<f64>; 3], targets: &[[f64; 3]], want_grad: bool) -> MeshOut {
    let (m, p) = (win.m, win.p);
    let h3 = win.h * win.h * win.h;
    let [g0, g1, g2] = grids;
    let res: Vec<([f64; 3], [[f64; 3]; 3])> = targets
        .par_iter()
        .map_init(
            || vec![0.0; 6 * p],
            |buf, x| {
                let (first, delta) = win.locate(x);
                let (wx, rest) = buf.split_at_mut(p);
                let (wy, rest) = rest.split_at_mut(p);
                let (wz, rest) = rest.split_at_mut(p);
                let (dx, rest) = rest.split_at_mut(p);
                let (dy, dz) = rest.split_at_mut(p);
                if want_grad {
                    win.weights_and_derivatives(delta[0], wx, dx);
                    win.weights_and_derivatives(delta[1], wy, dy);
                    win.weights_and_derivatives(delta[2], wz, dz);
                } else {
                    win.weights(delta[0], wx);
                    win.weights(delta[1], wy);
                    win.weights(delta[2], wz);
                }
                let runs = win.runs(first[2]);
                // s[f]: Σ F w w w; g[f][j]: Σ F ∂_j(w w w).
                let mut s = [0.0; 3];
                let mut g = [[0.0; 3]; 3];
                for a in 0..p {
                    let mut xg = first[0] + a;
                    if xg >= m {
                        xg -= m;
                    }
                    let mut y00 = [0.0; 3];
                    let mut y10 = [0.0; 3];
                    let mut y01 = [0.0; 3];
                    for b in 0..p {
                        let mut yg = first[1] + b;
                        if yg >= m {
                            yg -= m;
                        }
                        let row = (xg * m + yg) * m;
                        // The three fields in one pass: six independent accumulation chains.
                        let (mut z0, mut z1) = ([0.0; 3], [0.0; 3]);
                        for &(zs, w0, w1) in &runs {
                            let n = w1 - w0;
                            let (v0, v1, v2) = (
                                &g0[row + zs..row + zs + n],
                                &g1[row + zs..row + zs + n],
                                &g2[row + zs..row + zs + n],
                            );
                            let (w, dw) = (&wz[w0..w1], &dz[w0..w1]);
                            if want_grad {
                                for k in 0..n {
                                    z0[0] += v0[k] * w[k];
                                    z0[1] += v1[k] * w[k];
                                    z0[2] += v2[k] * w[k];
                                    z1[0] += v0[k] * dw[k];
                                    z1[1] += v1[k] * dw[k];
                                    z1[2] += v2[k] * dw[k];
                                }
                            } else {
                                for k in 0..n {
                                    z0[0] += v0[k] * w[k];
                                    z0[1] += v1[k] * w[k];
                                    z0[2] += v2[k] * w[k];
                                }
                            }
                        }
                        for f in 0..3 {
                            y00[f] += wy[b] * z0[f];
                            if want_grad {
                                y10[f] += dy[b] * z0[f];
                                y01[f] += wy[b] * z1[f];
                            }
                        }
                    }
                    for f in 0..3 {
                        s[f] += wx[a] * y00[f];
                        if want_grad {
                            g[f][0] += dx[a] * y00[f];
                            g[f][1] += wx[a] * y10[f];
                            g[f][2] += wx[a] * y01[f];
                        }
                    }
                }
                (s.map(|v| v * h3), g.map(|r| r.map(|v| v * h3)))
            },
        )
        .collect();
    MeshOut {
        velocity: res.iter().map(|r| r.0).collect(),
        gradient: if want_grad {
            res.iter().map(|r| r.1).collect()
        } else {
            Vec::new()
        },
    }
}

/// Stretching from the velocity gradient `g[i][j]` = ∂u_i/∂x_j and the target strength a:
/// classical Σ_j a_j ∂_j u_i, transposed Σ_j ∂_i u_j a_j.
#[inline]
fn stretching_from_gradient(g: &[[f64; 3]; 3], a: &[f64; 3], scheme: StretchingScheme) -> [f64; 3] {
    match scheme {
        StretchingScheme::Classical => {
            [0, 1, 2].map(|i| g[i][0] * a[0] + g[i][1] * a[1] + g[i][2] * a[2])
        }
        StretchingScheme::Transposed => {
            [0, 1, 2].map(|i| g[0][i] * a[0] + g[1][i] * a[1] + g[2][i] * a[2])
        }
    }
}

/// The parameters of one evaluation of `sources` (non-empty) at `n_targets` targets — planned
/// with `cost`, or the `fixed` ones checked and completed — and the real-space sources: those
/// with σ_q ≠ η when η = σ_max (the sources at σ_max cancel exactly), every source when
/// η > σ_max.
pub(crate) fn evaluation_setup(
    accuracy: f64,
    fixed: Option<&EwaldParameters>,
    sources: &Sources,
    n_targets: usize,
    want_grad: bool,
    cost: &CostModel,
) -> Result<(EwaldParameters, Vec<usize>), SummationError> {
    let (_, sigma_max) = sigma_range(sources)?;
    let below: Vec<usize> = (0..sources.len())
        .filter(|&q| sources.sigma[q] != sigma_max)
        .collect();
    let params = match fixed {
        None => EwaldPeriodic::plan_with_costs(
            accuracy,
            sigma_max,
            below.len(),
            sources.len(),
            n_targets,
            want_grad,
            cost,
        )?,
        Some(f) => {
            if f.eta < sigma_max || f.support > f.grid || f.grid < 4 {
                return Err(SummationError::Unsupported(format!(
                    "Ewald: fixed parameters need η ≥ σ_max = {sigma_max} and P ≤ M ({f})"
                )));
            }
            let mut p = f.clone();
            p.kmax = (p.grid - 1) / 2;
            p.cells_per_side = cells_for(p.r_cut);
            p.real_space_sources = if p.eta == sigma_max {
                below.len()
            } else {
                sources.len()
            };
            p.estimated_seconds = f64::NAN;
            p
        }
    };
    let selected = if params.eta == sigma_max {
        below
    } else {
        (0..sources.len()).collect()
    };
    Ok((params, selected))
}

/// σ_min, σ_max of the sources, checking that every core radius is positive and finite.
pub(crate) fn sigma_range(sources: &Sources) -> Result<(f64, f64), SummationError> {
    let mut lo = f64::INFINITY;
    let mut hi = 0.0f64;
    for &s in sources.sigma {
        if !(s > 0.0 && s.is_finite()) {
            return Err(SummationError::BadSources(format!(
                "core radius {s} (must be positive and finite)"
            )));
        }
        lo = lo.min(s);
        hi = hi.max(s);
    }
    Ok((lo, hi))
}

impl Summation for EwaldPeriodic {
    fn name(&self) -> String {
        format!("Ewald periodic CPU f64 (accuracy {:e})", self.accuracy)
    }

    fn boundary(&self) -> Boundary {
        Boundary::Periodic { length: TAU }
    }

    fn evaluate(
        &mut self,
        sources: &Sources,
        targets: &[[f64; 3]],
        extra: Extra,
        out: &mut Evaluation,
    ) -> Result<(), SummationError> {
        check_inputs(sources, targets, &extra)?;
        out.resize_for(targets.len(), &extra);
        let nt = targets.len();
        if sources.is_empty() {
            out.fill_zero(nt, &extra);
            return Ok(());
        }
        let want_grad = !matches!(extra, Extra::None);
        let (params, selected) = evaluation_setup(
            self.accuracy,
            self.fixed.as_ref(),
            sources,
            nt,
            want_grad,
            &CostModel::CPU,
        )?;
        let eta = params.eta;
        let mesh = self.mesh(&params, sources, targets, want_grad);
        let t_real = Instant::now();
        let nb = Neighbours::build(sources, &selected, params.r_cut);
        self.params = Some(params);

        // Real-space part, combined with the mesh part target by target.
        match extra {
            Extra::None => {
                out.velocity[..nt]
                    .par_iter_mut()
                    .zip(targets.par_iter())
                    .zip(mesh.velocity.par_iter())
                    .for_each(|((u, x), um)| {
                        let mut acc = *um;
                        if !nb.is_empty() {
                            let mut ur = [0.0; 3];
                            nb.visit(x, |j, r| {
                                let v1 = velocity(r, nb.alpha[j], nb.sigma[j]);
                                let v2 = velocity(r, nb.alpha[j], eta);
                                add3(&mut ur, &sub3(&v1, &v2));
                            });
                            add3(&mut acc, &ur);
                        }
                        *u = acc;
                    });
            }
            Extra::Stretching { alpha, scheme } => {
                out.velocity[..nt]
                    .par_iter_mut()
                    .zip(out.stretching[..nt].par_iter_mut())
                    .zip(targets.par_iter())
                    .zip(alpha.par_iter())
                    .zip(mesh.velocity.par_iter().zip(mesh.gradient.par_iter()))
                    .for_each(|((((u, st), x), ap), (um, gm))| {
                        let mut au = *um;
                        let mut ast = stretching_from_gradient(gm, ap, scheme);
                        if !nb.is_empty() {
                            let (mut ur, mut sr) = ([0.0; 3], [0.0; 3]);
                            nb.visit(x, |j, r| {
                                let (v1, s1) = velocity_and_stretching(
                                    r,
                                    nb.alpha[j],
                                    nb.sigma[j],
                                    *ap,
                                    scheme,
                                );
                                let (v2, s2) =
                                    velocity_and_stretching(r, nb.alpha[j], eta, *ap, scheme);
                                add3(&mut ur, &sub3(&v1, &v2));
                                add3(&mut sr, &sub3(&s1, &s2));
                            });
                            add3(&mut au, &ur);
                            add3(&mut ast, &sr);
                        }
                        *u = au;
                        *st = ast;
                    });
            }
            Extra::Gradient => {
                out.velocity[..nt]
                    .par_iter_mut()
                    .zip(out.gradient[..nt].par_iter_mut())
                    .zip(targets.par_iter())
                    .zip(mesh.velocity.par_iter().zip(mesh.gradient.par_iter()))
                    .for_each(|(((u, g), x), (um, gm))| {
                        let mut au = *um;
                        let mut ag = *gm;
                        if !nb.is_empty() {
                            let (mut ur, mut gr) = ([0.0; 3], [[0.0; 3]; 3]);
                            nb.visit(x, |j, r| {
                                let (a, s) = (nb.alpha[j], nb.sigma[j]);
                                add3(&mut ur, &sub3(&velocity(r, a, s), &velocity(r, a, eta)));
                                let g1 = velocity_gradient(r, a, s);
                                let g2 = velocity_gradient(r, a, eta);
                                for i in 0..3 {
                                    add3(&mut gr[i], &sub3(&g1[i], &g2[i]));
                                }
                            });
                            add3(&mut au, &ur);
                            for i in 0..3 {
                                add3(&mut ag[i], &gr[i]);
                            }
                        }
                        *u = au;
                        *g = ag;
                    });
            }
        }
        self.timings.real_space = t_real.elapsed().as_secs_f64();
        tracing::debug!(
            "Ewald: {} ; spread {:.3} s, transforms {:.3} s, gather {:.3} s, real space {:.3} s",
            self.params.as_ref().unwrap(),
            self.timings.spread,
            self.timings.transforms,
            self.timings.gather,
            self.timings.real_space
        );
        Ok(())
    }

    fn vorticity(
        &mut self,
        sources: &Sources,
        targets: &[[f64; 3]],
        out: &mut Vec<[f64; 3]>,
    ) -> Result<(), SummationError> {
        check_inputs(sources, targets, &Extra::None)?;
        out.resize(targets.len(), [0.0; 3]);
        if sources.is_empty() {
            out.fill([0.0; 3]);
            return Ok(());
        }
        let (_, sigma_max) = sigma_range(sources)?;
        let all: Vec<usize> = (0..sources.len()).collect();
        let nb = Neighbours::build(sources, &all, VORTICITY_CUTOFF * sigma_max);
        let c2 = VORTICITY_CUTOFF * VORTICITY_CUTOFF;
        out.par_iter_mut()
            .zip(targets.par_iter())
            .for_each(|(w, x)| {
                let mut acc = [0.0; 3];
                nb.visit(x, |j, r| {
                    let s = nb.sigma[j];
                    let r2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
                    if r2 < c2 * s * s {
                        let z = gaussian_zeta(r2, s);
                        let a = nb.alpha[j];
                        acc[0] += a[0] * z;
                        acc[1] += a[1] * z;
                        acc[2] += a[2] * z;
                    }
                });
                *w = acc;
            });
        Ok(())
    }

    /// At the lattice nodes the Gaussian's separability makes the sum several times cheaper
    /// ([`super::lattice::lattice_vorticity`]; same cutoff, agrees with [`Self::vorticity`] to
    /// its dropped tail).
    fn vorticity_on_lattice(
        &mut self,
        sources: &Sources,
        n: usize,
        out: &mut Vec<[f64; 3]>,
    ) -> Result<(), SummationError> {
        super::lattice::lattice_vorticity(sources, n, out)
    }
}
