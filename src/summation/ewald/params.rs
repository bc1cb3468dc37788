//! The parameter rules of the Ewald evaluators (module docs of [`super`]): from the requested
//! accuracy ε to the real-space cutoff, the window support and the grid size, the cost model
//! that picks the cheapest splitting width η and window width τ among the candidates, and the
//! grid cap that comes from the memory of the device the evaluator runs on.

use super::super::cells::{cells_for, CELL_SUB};
use super::super::{sigma_range, Sources, SummationError};
use std::f64::consts::{PI, TAU};

/// Added to ℓ = ln(1/ε) in the real-space cutoff rule: ln 3 (one third of the budget per error
/// term) + 0.8 (worst measured log of error / e^{−ρ_c²/2}, stretching; velocity: −0.8).
pub const REAL_MARGIN: f64 = 1.9;
/// Added to ℓ in the band rule K = ⌈√(2(ℓ + BAND_MARGIN))/η⌉ (the modes |k_i| > K are dropped,
/// each worth at most e^{−K²η²/2}): ln 3 − 0.5. Measured (tests/ewald.rs `measure_error_model`,
/// 200 particles, equal cores σ = 0.3 and 0.15, ℓ = 5…25, aliasing made negligible): the
/// truncation error is e^{−4.3…−2.2} e^{−K²η²/2} for the velocity and e^{−2.5…−0.53}
/// e^{−K²η²/2} for the gradient and both stretching forms (the worst, −0.53, at ℓ = 5).
pub const BAND_MARGIN: f64 = 0.6;
/// Added to ℓ + ln(M η) + 3 ln u in the window rule
/// w = ⌈(ℓ + ln(Mη) + 3 ln u + ALIAS_MARGIN)/(π √(1 − 1/u))⌉, u = M/(2K) (the aliasing error of
/// the Kaiser–Bessel window): ln 3 + 0.45. Measured (`measure_error_model`, the band made
/// negligible, u = 1.25…3, w = 3…14): the aliasing error follows e^{−π w √(1 − 1/u)} (Fessler &
/// Sutton's decay) with a prefactor that grows with the grid and the upsampling: velocity
/// Mη e^{−8.3…−1.8}, gradient Mη e^{−5…+1.5}, stretching Mη e^{−3.9…+3.3}; stretching
/// over Mη u³: e^{−4.2…+0.45} (the worst at u = 1.5, w = 4).
pub const ALIAS_MARGIN: f64 = 1.6;
/// Grid cap when the device's memory cannot be read (the former fixed cap: 3 real f64 fields of
/// 384³ and 3 half spectra are about 2.7 GB).
pub const DEFAULT_MAX_GRID: usize = 384;
/// Bytes per grid point of the CPU evaluator: 3 real f64 fields (24 B) and 3 retained half
/// spectra of complex f64 (≈ M³/2 modes each: 24 B), plus the transform's line scratch and
/// slack (16 B).
pub const CPU_BYTES_PER_GRID_POINT: u64 = 64;
/// Bytes per grid point of the GPU evaluator: 3 real f32 fields (12 B), 3 half spectra of
/// complex f32 (12 B), and cuFFT's work area for the batched R2C/C2R plans (at most the size of
/// the data: 24 B).
pub const GPU_BYTES_PER_GRID_POINT: u64 = 48;
/// Fraction of the device's total memory the grid may take (the rest is for particles, the
/// other solver, and what other processes take meanwhile). Total rather than free memory, so
/// that the plan, and with it the results, is the same at every start and resume on a machine;
/// the run's memory check compares the whole estimate with the free memory.
pub const GRID_MEMORY_FRACTION: f64 = 0.5;
/// Grid sides are never planned above this, whatever the memory (32-bit indexing of the GPU
/// kernels: 3·M³ < 2³¹ needs M ≤ 894).
pub const HARD_MAX_GRID: usize = 864;
/// Grid sides are never capped below this (the smallest grid the rules plan, M ≥ 8, with room
/// for the sizes of the tests and named cases: lattices up to 64³ plan M ≤ 256, checked by a
/// test below).
pub const MIN_MAX_GRID: usize = 256;

/// The largest grid side M whose grid fits in `GRID_MEMORY_FRACTION` of `available` (total) bytes at
/// `bytes_per_point` per grid point (M³ · bytes_per_point ≤ fraction · available), clamped to
/// [[`MIN_MAX_GRID`], [`HARD_MAX_GRID`]]; [`DEFAULT_MAX_GRID`] when the memory is unknown.
pub fn max_grid_for_memory(available: Option<u64>, bytes_per_point: u64) -> usize {
    match available {
        None => DEFAULT_MAX_GRID,
        Some(bytes) => {
            let points = GRID_MEMORY_FRACTION * bytes as f64 / bytes_per_point.max(1) as f64;
            (points.cbrt().floor() as usize).clamp(MIN_MAX_GRID, HARD_MAX_GRID)
        }
    }
}

/// Candidate splitting widths, in units of σ_max (the cost model picks one).
const ETA_FACTORS: [f64; 10] = [1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0, 12.0];
/// Candidate upsampling factors u = M/(2K) (the cost model picks one).
const U_CANDIDATES: [f64; 7] = [1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0];

/// The constants of the planner's cost model, nanoseconds (see [`plan`]): the
/// method and its accuracy rules are the same on every device, the cheapest (η, u) is not.
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
    /// Per window point (w³) and grid field touched.
    pub ns_grid_point: f64,
    /// Per 1-D window weight (a Bessel function: 3w per particle spread, 3w or 6w gathered).
    pub ns_weight: f64,
    /// Fields touched per window point when spreading (3 strength components).
    pub spread_fields: f64,
    /// … when gathering the velocity (3), and the velocity with its gradient (6: F·w and F·∂w).
    pub gather_fields: f64,
    pub gather_fields_gradient: f64,
    /// Fixed cost per source and per target.
    pub ns_per_particle: f64,
    /// The widest window the device's kernels take (nodes per direction).
    pub max_support: usize,
}

impl CostModel {
    /// One CPU core, measured with the release build on the development machine.
    pub const CPU: CostModel = CostModel {
        ns_pair_velocity: 180.0,
        ns_pair_extra: 300.0,
        ns_pair_check: 5.0,
        ns_fft_point_log: 0.45,
        ns_grid_point: 0.5,
        ns_weight: 60.0,
        spread_fields: 3.0,
        gather_fields: 3.0,
        gather_fields_gradient: 6.0,
        ns_per_particle: 500.0,
        max_support: 64,
    };
}

/// Parameters of one evaluation (see the module docs for the rules).
#[derive(Debug, Clone, PartialEq)]
pub struct EwaldParameters {
    /// The requested relative accuracy ε.
    pub accuracy: f64,
    /// Splitting width η ≥ max σ_q.
    pub eta: f64,
    /// Shape β of the Kaiser–Bessel window ([`super::window`]).
    pub beta: f64,
    /// Real-space cutoff r_c = ρ_c η.
    pub r_cut: f64,
    /// Grid points per side M.
    pub grid: usize,
    /// Window support w (nodes per dimension).
    pub support: usize,
    /// Retained wavenumbers |k_i| ≤ K (the band; K < M/2).
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
            "ε={:.0e} η={:.4} r_c={:.4} M={} window=Kaiser–Bessel w={} β={:.2} K={} \
             real-space sources={} cells={}",
            self.accuracy,
            self.eta,
            self.r_cut,
            self.grid,
            self.support,
            self.beta,
            self.kmax,
            self.real_space_sources,
            self.cells_per_side
        )
    }
}

/// Smallest even 2^a 3^b 5^c 7^d ≥ n.
pub(crate) fn fft_size(n: usize) -> usize {
    let mut m = n.max(2);
    loop {
        if m.is_multiple_of(2) {
            let mut r = m;
            for p in [2, 3, 5, 7] {
                while r.is_multiple_of(p) {
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

/// The band K = ⌈√(2(ℓ + [`BAND_MARGIN`]))/η⌉ (module docs), at least 1.
pub fn band(ell: f64, eta: f64) -> usize {
    ((2.0 * (ell + BAND_MARGIN)).sqrt() / eta).ceil().max(1.0) as usize
}

/// The grid side M, the window width w and its shape β for the band `kmax` at upsampling `u`
/// (module docs): M the smallest even 2^a 3^b 5^c 7^d ≥ max(2uK, 2K + 2, 8), then with the
/// actual u = M/(2K), w = ⌈(ℓ + ln(Mη) + 3 ln u + [`ALIAS_MARGIN`])/(π √(1 − 1/u))⌉ (at least
/// 2), β = π w (1 − K/M).
/// `None` when the numbers are degenerate (η not positive and finite).
pub fn mesh_and_window(ell: f64, eta: f64, kmax: usize, u: f64) -> Option<(usize, usize, f64)> {
    let need = (2.0 * u * kmax as f64).ceil();
    if !need.is_finite() || need > 1e6 {
        return None;
    }
    let m = fft_size((need as usize).max(2 * kmax + 2).max(8));
    let u_eff = m as f64 / (2 * kmax) as f64;
    let decay = PI * (1.0 - 1.0 / u_eff).sqrt();
    let prefactor = (m as f64 * eta).ln().max(0.0) + 3.0 * u_eff.ln();
    let w = ((ell + prefactor + ALIAS_MARGIN) / decay).ceil();
    if !w.is_finite() || w > 1e4 {
        return None;
    }
    let w = (w as usize).max(2);
    Some((m, w, super::window::beta_for(m, w, kmax)))
}

/// Chooses η, r_c, the band K, M and the window (w, β) for `accuracy` (module docs): the rules
/// fix r_c and K for each candidate η, M and (w, β) for each upsampling u, and the cheapest
/// candidate (η, u) by the cost model wins (windows wider than `cost.max_support` are skipped).
///
/// `n_below_max` is the number of sources with σ_q < σ_max (the real-space sources when
/// η = σ_max); `extra` says whether stretching or the gradient is wanted. Cost model (one
/// core, ns; measured with the release build on the development machine): real-space pairs
/// in range × (180 velocity, 300 with extras; two kernel calls each) + distance checks × 5,
/// transforms 6 × 0.45 M³ log₂ M³, spreading 3 w³ N_s and gathering (3 or 6) w³ N_t × 0.5,
/// 60 per 1-D window weight (3w per source, 3w or 6w per target), plus 500 per particle ([`CostModel::CPU`]; the GPU has its own). Sources and targets are
/// assumed spread over the box. Grids larger than `max_grid`³ are not considered
/// ([`max_grid_for_memory`]).
#[allow(clippy::too_many_arguments)]
pub fn plan(
    accuracy: f64,
    sigma_max: f64,
    n_below_max: usize,
    n_sources: usize,
    n_targets: usize,
    extra: bool,
    cost: &CostModel,
    max_grid: usize,
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
        let kmax = band(ell, eta);
        for u in U_CANDIDATES {
            let Some((m, w, beta)) = mesh_and_window(ell, eta, kmax, u) else {
                continue;
            };
            if m > max_grid || w > m || w > cost.max_support {
                continue;
            }
            let m3 = (m as f64).powi(3);
            let w3 = (w as f64).powi(3);
            let (gather, gather_weights) = if extra {
                (cost.gather_fields_gradient, 6.0)
            } else {
                (cost.gather_fields, 3.0)
            };
            let mesh_ns = 6.0 * cost.ns_fft_point_log * m3 * m3.log2()
                + cost.ns_grid_point * w3 * (cost.spread_fields * ns + gather * nt)
                + cost.ns_weight * w as f64 * (3.0 * ns + gather_weights * nt)
                + cost.ns_per_particle * (ns + nt);
            let cost = (real_ns + mesh_ns) * 1e-9;
            if best.as_ref().is_none_or(|b| cost < b.estimated_seconds) {
                best = Some(EwaldParameters {
                    accuracy,
                    eta,
                    beta,
                    r_cut,
                    grid: m,
                    support: w,
                    kmax,
                    real_space_sources: n_rs,
                    cells_per_side: cells,
                    estimated_seconds: cost,
                });
            }
        }
    }
    best.ok_or_else(|| {
        SummationError::Unsupported(format!(
            "Ewald: no grid of at most {max_grid}^3 points reaches accuracy {accuracy:e} \
             for core radius σ_max = {sigma_max} in the box [-π, π)^3"
        ))
    })
}

/// The parameters of one evaluation of `sources` (non-empty) at `n_targets` targets — planned
/// with `cost`, or the `fixed` ones checked and completed — and the real-space sources: those
/// with σ_q ≠ η when η = σ_max (the sources at σ_max cancel exactly), every source when
/// η > σ_max.
#[allow(clippy::too_many_arguments)]
pub(crate) fn evaluation_setup(
    accuracy: f64,
    fixed: Option<&EwaldParameters>,
    sources: &Sources,
    n_targets: usize,
    want_grad: bool,
    cost: &CostModel,
    max_grid: usize,
) -> Result<(EwaldParameters, Vec<usize>), SummationError> {
    let (_, sigma_max) = sigma_range(sources)?;
    let below: Vec<usize> = (0..sources.len())
        .filter(|&q| sources.sigma[q] != sigma_max)
        .collect();
    let params = match fixed {
        None => plan(
            accuracy,
            sigma_max,
            below.len(),
            sources.len(),
            n_targets,
            want_grad,
            cost,
            max_grid,
        )?,
        Some(f) => {
            let mut p = f.clone();
            // K = 0 asks for the widest band, β = 0 for the rule's shape.
            if p.kmax == 0 {
                p.kmax = p.grid.saturating_sub(1) / 2;
            }
            if p.beta == 0.0 {
                p.beta = super::window::beta_for(p.grid, p.support, p.kmax);
            }
            let lobe = PI * p.support as f64 * p.kmax as f64 / p.grid as f64;
            if f.eta < sigma_max
                || p.support > p.grid
                || p.grid < 4
                || 2 * p.kmax >= p.grid
                || p.beta.is_nan()
                || p.beta <= lobe
            {
                return Err(SummationError::Unsupported(format!(
                    "Ewald: fixed parameters need η ≥ σ_max = {sigma_max}, w ≤ M, 2K < M and \
                     β > π w K/M = {lobe} ({p})"
                )));
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The memory cap changes no plan of the sizes the tests and named cases use: lattices up
    /// to 64³ (σ = h) at accuracies 1e-3 … 1e-10 (64³: 1e-8) and the random sets of tests/ewald.rs down to
    /// 1e-12, plan
    /// the same parameters under the smallest cap the memory rule gives ([`MIN_MAX_GRID`]), the
    /// former fixed cap ([`DEFAULT_MAX_GRID`]) and the largest ([`HARD_MAX_GRID`]).
    #[test]
    fn grid_cap_from_memory_keeps_the_plans_of_small_cases() {
        let mut cases = Vec::new();
        for n in [8usize, 12, 16, 24, 32, 48, 64] {
            let h = TAU / n as f64;
            cases.push((h, 0, n * n * n));
        }
        for (sigma_max, n) in [(0.4, 200), (0.3, 300), (0.5, 300), (0.8, 60), (0.1, 50)] {
            cases.push((sigma_max, n, n));
        }
        for (sigma_max, below, n) in cases {
            // (The random sets of the tests go down to 1e-12; a 64³ lattice at 1e-9 plans
            // M = 270, above the floor: planned the same only where memory allows.)
            let tightest: f64 = if below > 0 {
                1e-12
            } else if n < 64 * 64 * 64 {
                1e-10
            } else {
                1e-8
            };
            for acc in [1e-3, 1e-4, 1e-6, 1e-8, tightest.max(1e-10), tightest] {
                for extra in [false, true] {
                    for cost in [&CostModel::CPU, &crate::summation::ewald::engine::GPU_COSTS] {
                        let at = |cap| plan(acc, sigma_max, below, n, n, extra, cost, cap);
                        let (a, b, c) = (at(MIN_MAX_GRID), at(DEFAULT_MAX_GRID), at(HARD_MAX_GRID));
                        let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
                        assert_eq!(a, b, "σ={sigma_max} n={n} ε={acc}");
                        assert_eq!(b, c, "σ={sigma_max} n={n} ε={acc}");
                    }
                }
            }
        }
    }

    /// The plan of the GPU evaluator for the SC09 run (`cases/sc09-hit-256-compare.toml`):
    /// 256³ lattice particles with equal cores σ = overlap·h, h = 2π/256, targets = sources,
    /// stretching, [`GPU_COSTS`](crate::summation::ewald::engine::GPU_COSTS), the method planned
    /// at `planned` (a GPU request ε is planned at ε − 5e-6, its f32 share taken off).
    fn plan_256(planned: f64, overlap: f64, max_grid: usize) -> (f64, EwaldParameters) {
        let n = 256usize;
        let sigma = overlap * TAU / n as f64;
        let cost = &crate::summation::ewald::engine::GPU_COSTS;
        let p = plan(planned, sigma, 0, n.pow(3), n.pow(3), true, cost, max_grid).unwrap();
        (sigma, p)
    }

    /// With the grid cap of an 80 GB GPU ([`max_grid_for_memory`]: the hard cap 864), the
    /// 256³ lattice gets the pure-mesh plan at 1e-4, 1e-5 and 1e-6: η = σ, so the real-space
    /// part is empty. The plans printed are the module docs' table (overlap 1 at 1e-4:
    /// M = 560, w = 8; overlap 0.75: M = 750, w = 8).
    #[test]
    fn lattice_256_plans_pure_mesh_under_an_80_gb_cap() {
        let cap = max_grid_for_memory(Some(80_000_000_000), GPU_BYTES_PER_GRID_POINT);
        assert_eq!(cap, HARD_MAX_GRID);
        let gpu = |e: f64| crate::summation::ewald::cuda::gpu_planning_accuracy(e).unwrap();
        let requests = [
            ("GPU request 1e-4", gpu(1e-4)),
            ("GPU request 2e-5", gpu(2e-5)),
            ("GPU request 1e-5", gpu(1e-5)),
            ("method at 1e-4", 1e-4),
            ("method at 1e-5", 1e-5),
            ("method at 1e-6", 1e-6),
        ];
        for (label, accuracy) in requests {
            for overlap in [0.75, 1.0] {
                let (sigma, p) = plan_256(accuracy, overlap, cap);
                let n = 256f64.powi(3);
                eprintln!(
                    "256³ overlap {overlap} {label}: {p}; M³ = {:.2e}, w³ N = {:.2e}, \
                     {:.0} ms by the cost model",
                    (p.grid as f64).powi(3),
                    (p.support as f64).powi(3) * n,
                    1e3 * p.estimated_seconds
                );
                assert_eq!(p.eta, sigma, "overlap {overlap}: {p}");
                assert_eq!(p.real_space_sources, 0, "overlap {overlap}: {p}");
                assert!(p.grid <= cap, "overlap {overlap}: {p}");
                let bytes = (p.grid as f64).powi(3) * GPU_BYTES_PER_GRID_POINT as f64;
                assert!(
                    bytes <= GRID_MEMORY_FRACTION * 80e9,
                    "overlap {overlap}: {p}"
                );
            }
        }
        // The lead's figures for the default accuracy (σ = h): the window's work per particle
        // w³ is at most 512 (the Gaussian's P³ was 1 728–2 197 at 1e-6).
        let (_, p) = plan_256(gpu(1e-4), 1.0, cap);
        assert!(p.support <= 8 && p.grid <= 600, "{p}");
    }

    /// Under the former fixed cap of 384 the pure-mesh grid (M ≥ 2K + 2 with K ≈ 180 at 1e-4
    /// for σ = h, more for smaller cores) does not fit, so η grows past σ and every particle
    /// enters the real-space part, several times the pure-mesh plan's cost.
    #[test]
    fn lattice_256_plans_a_split_under_the_old_cap() {
        let cap = max_grid_for_memory(Some(80_000_000_000), GPU_BYTES_PER_GRID_POINT);
        for overlap in [0.75, 1.0] {
            let (sigma, split) = plan_256(1e-4, overlap, DEFAULT_MAX_GRID);
            assert!(split.eta > sigma, "overlap {overlap}: {split}");
            assert_eq!(
                split.real_space_sources,
                256usize.pow(3),
                "overlap {overlap}"
            );
            assert!(split.grid <= DEFAULT_MAX_GRID, "overlap {overlap}: {split}");
            let (_, mesh) = plan_256(1e-4, overlap, cap);
            assert!(
                split.estimated_seconds > 2.0 * mesh.estimated_seconds,
                "overlap {overlap}: split {split} {} s, pure mesh {mesh} {} s",
                split.estimated_seconds,
                mesh.estimated_seconds
            );
        }
    }

    #[test]
    fn grid_cap_follows_memory() {
        assert_eq!(max_grid_for_memory(None, 64), DEFAULT_MAX_GRID);
        // 256 MiB: never below the floor.
        assert_eq!(max_grid_for_memory(Some(1 << 28), 64), MIN_MAX_GRID);
        // 80 GB on a GPU at 48 B per point and half of it: (0.5·80e9/48)^(1/3) ≈ 941 → the cap.
        assert_eq!(max_grid_for_memory(Some(80_000_000_000), 48), HARD_MAX_GRID);
        // 16 GB of host memory: (0.5·16e9/64)^(1/3) = 500.
        assert_eq!(max_grid_for_memory(Some(16_000_000_000), 64), 500);
    }
}
