//! The periodic FMM on the CPU (f64): the Biot–Savart sum in the box [−π, π)³ (L = 2π) by the
//! free-space engine ([`super::cpu`]) plus the box's images, checked against the Ewald sum
//! (docs/physics.md §4.5 and §8).
//!
//! With S_k the supercell of side 3^k L made of the 3^{3k} images of the box about it, the sum
//! over every image of every source is split in two:
//!
//! * **Near images** (S_2: |n|∞ ≤ 4, 729 images) **through the traversal**: one target tree
//!   and one source tree, the source tree visited through the 729 shifts n L
//!   ([`super::traversal::build_image_lists`]); M2L uses the shifted source centre, P2P adds
//!   the shift to the source positions. The near-field radius rule is kept (cells interact by
//!   expansion only beyond ρ_c σ_max), so the result converges to the regularised sum.
//! * **Far images** (|n|∞ ≥ 5) **by a lattice sum of the root expansion**, the supercell
//!   recursion of the seed ("2⁵ periodic images"): S_{k+1} \ S_k is the 9³ − 3³ = 702 copies
//!   of S_{k−1} at offsets m 3^{k−1} L, |m|∞ ∈ {2, 3, 4}. The multipole of S_k is the M2M of 27
//!   copies of S_{k−1}'s (S_0: the box's, by P2M about the box centre), and the local expansion
//!   at the box centre gets Σ_{k ≥ 2} Σ_m M2L(M_{k−1}, offset). Both are linear in the
//!   harmonics of the offsets, so each level is one M2M and one M2L with tables summed once
//!   over the 27 and the 702 offsets ([`LatticeSum`]), in units of the supercell's side (no
//!   overflow at any level). The worst convergence ratio of these M2Ls is (0.866·3 + 0.866)/6
//!   ≈ 0.58 (at k = 2), so this part runs at its own order P ≥ p ([`lattice_order`]); each
//!   level's contribution falls about 9× ([`LATTICE_LEVELS`] levels). The local expansion is
//!   moved to the target root's centre (L2L at order P, truncated to p) and goes down the tree
//!   with the rest.
//!
//! **The conditionally convergent term.** Both parts sum each source's images in cubes about
//! it, |n|∞ ≤ R, R → ∞: the vacuum (cube = sphere, by cubic symmetry) boundary condition.
//! The Ewald sum and the oracle drop k = 0 (a neutralising background, zero mean velocity).
//! They differ by ψ_vac,l − ψ_Ewald,l = −Σ_q α_q,l |x − x_q|²/(6V) + const (the background's
//! potential, V = L³), which for Σα = 0 is the textbook P·x/(3V) (de Leeuw, Perram & Smith,
//! Proc. R. Soc. A 373 (1980) 27; φ_vac = φ_Ewald + P·x/(3V) for φ = Σ q/(4πr), P = Σ q x_q).
//! With u = ∇ × ψ ([`VacuumTerm`]):
//!
//! ```text
//! u_vac,k − u_Ewald,k = (1/(3V)) ε_kjl (D_lj − Q_l x_j),   D_lj = Σ_q α_q,l x_q,j,  Q = Σ_q α_q
//! ∂_m u_vac,k − ∂_m u_Ewald,k = −(1/(3V)) ε_kml Q_l
//! ```
//!
//! (x_q the wrapped source positions, x the wrapped target), subtracted from the FMM's answer,
//! so it is the Ewald sum's also when Σα ≠ 0 (tested against the oracle both ways).
//!
//! **The built-in check** compares a sample of targets with [`EwaldPeriodic`] at a tenth of
//! the requested accuracy ([`CHECK_REFINEMENT`]), at the first evaluation and every
//! `check_every` after, as the free-space FMM checks against the direct sum.

use super::cpu::evaluate_biot_savart;
use super::expansions::{
    coefficient_count, irregular_harmonics, l2l, m2l_table, m2m, m2m_table, p2m, regular_harmonics,
    Workspace,
};
use super::params::{plan_parameters, FmmBackend, FmmParams};
use super::{AccuracyCheck, Fmm, FmmState, Structure};
use crate::summation::cells::wrap;
use crate::summation::ewald::EwaldPeriodic;
use crate::summation::{
    sigma_range, stretching_from_gradient, Boundary, Evaluation, Extra, Request, Sources,
    SumResult, Summation, SummationError,
};
use num_complex::Complex64 as C64;
use std::f64::consts::TAU;

/// The box side L.
pub const BOX_LENGTH: f64 = TAU;
/// The near images are those of the supercell S_2 (|n|∞ ≤ (3² − 1)/2 = 4).
pub const NEAR_LEVEL: u32 = 2;
/// Supercell levels of the lattice sum: the last one adds about 9^{−12} ≈ 3.5e-12 of the
/// first.
pub const LATTICE_LEVELS: usize = 12;
/// The worst convergence ratio of the lattice sum's M2Ls, (0.866·3 + 0.866)/6 (module docs).
pub const LATTICE_RATIO: f64 = 0.58;
/// The highest order of the lattice sum.
pub const LATTICE_MAX_ORDER: usize = 40;
/// The built-in check's reference is the Ewald sum at this fraction of the request.
pub const CHECK_REFINEMENT: f64 = 0.1;

/// The order P of the lattice sum for `accuracy` with the tree's order `p`: the smallest with
/// [`LATTICE_RATIO`]^{P+1} ≤ accuracy/10, at least p and at most [`LATTICE_MAX_ORDER`]. The
/// far images' share of the velocity is small (cubic symmetry cancels their monopole and
/// dipole fields at the box centre), so this bound is pessimistic.
pub fn lattice_order(accuracy: f64, p: usize) -> usize {
    let terms = ((0.1 * accuracy).ln() / LATTICE_RATIO.ln()).ceil().max(1.0) as usize;
    (terms - 1).clamp(p, LATTICE_MAX_ORDER)
}

/// The image shifts n L of the supercell S_`level` (|n|∞ ≤ (3^level − 1)/2), z slowest.
pub fn near_shifts(level: u32) -> Vec<[f64; 3]> {
    let r = (3i64.pow(level) - 1) / 2;
    let mut out = Vec::new();
    for z in -r..=r {
        for y in -r..=r {
            for x in -r..=r {
                out.push([x, y, z].map(|v| v as f64 * BOX_LENGTH));
            }
        }
    }
    out
}

/// The lattice sum of the far images (module docs): the summed harmonic tables of the 27
/// supercell children and of the 702 shell copies, in units of the copies' spacing.
#[derive(Debug, Clone)]
pub struct LatticeSum {
    order: usize,
    levels: usize,
    near_level: u32,
    /// Σ_{|m|∞ ≤ 1} R(m), order P.
    supercell: Vec<C64>,
    /// Σ_{|m|∞ ∈ {2,3,4}} I(−m), order 2P.
    shell: Vec<C64>,
}

impl LatticeSum {
    /// The tables for order P = `order`, `levels` supercell levels and near images S_`near_level`.
    pub fn new(order: usize, levels: usize, near_level: u32) -> Self {
        let mut supercell = vec![C64::new(0.0, 0.0); coefficient_count(order)];
        let mut shell = vec![C64::new(0.0, 0.0); coefficient_count(2 * order)];
        let mut r = supercell.clone();
        let mut t = shell.clone();
        for m in near_shifts(2) {
            let m = m.map(|v| (v / BOX_LENGTH).round());
            let norm = m.iter().fold(0.0f64, |a, v| a.max(v.abs()));
            if norm <= 1.0 {
                regular_harmonics(m, order, &mut r);
                supercell.iter_mut().zip(&r).for_each(|(a, b)| *a += b);
            } else {
                irregular_harmonics(m.map(|v| -v), 2 * order, &mut t);
                shell.iter_mut().zip(&t).for_each(|(a, b)| *a += b);
            }
        }
        Self {
            order,
            levels,
            near_level,
            supercell,
            shell,
        }
    }

    /// The order P of the sum.
    pub fn order(&self) -> usize {
        self.order
    }

    /// The local expansion (order P, about the box centre 0) of the images outside S_near of
    /// the sources whose multipole expansion about 0 is `box_multipole` (order P, 3 charges).
    pub fn far_local(&self, box_multipole: &[C64]) -> Vec<C64> {
        let p = self.order;
        let zeros = vec![C64::new(0.0, 0.0); 3 * coefficient_count(p)];
        // M̂_n = M_n / s^n for the supercell of side s (S_0: the box).
        let mut m = box_multipole.to_vec();
        scale_degrees(&mut m, p, |n| BOX_LENGTH.powi(-(n as i32)));
        let mut local = zeros.clone();
        for k in 1..=self.levels {
            // m is S_{k−1}'s, of side s = 3^{k−1} L; its copies in S_{k+1} \ S_k are far
            // from k = near_level on.
            let s = 3f64.powi(k as i32 - 1) * BOX_LENGTH;
            if k >= self.near_level as usize {
                let mut l = zeros.clone();
                m2l_table::<3>(p, &self.shell, &m, &mut l);
                scale_degrees(&mut l, p, |n| s.powi(-(n as i32 + 1)));
                local.iter_mut().zip(&l).for_each(|(a, b)| *a += b);
            }
            let mut next = zeros.clone();
            m2m_table::<3>(p, &self.supercell, &m, &mut next);
            scale_degrees(&mut next, p, |n| 3f64.powi(-(n as i32)));
            m = next;
        }
        local
    }

    /// The far images' local expansion of order `p` about `center` (the target root's centre)
    /// for the sources at `x` (in the box) with strengths `alpha`.
    pub fn root_local(
        &self,
        x: &[[f64; 3]],
        alpha: &[[f64; 3]],
        center: [f64; 3],
        p: usize,
    ) -> Vec<C64> {
        let mut ws = Workspace::new(self.order);
        let mut mult = vec![C64::new(0.0, 0.0); 3 * coefficient_count(self.order)];
        p2m::<3>(&mut ws, [0.0; 3], x, alpha, &mut mult);
        self.local_from_multipole(&mult, [0.0; 3], center, p)
    }

    /// The far images' local expansion of order `p` about `center` from the multipole
    /// expansion `mult` (3 charges, any order, about `at`) of the sources in the box: moved to
    /// the box centre 0 (M2M at its own order), its degrees above P dropped and those it lacks
    /// taken as zero, [`LatticeSum::far_local`], moved to `center` (L2L at order P) and
    /// truncated to p. The GPU FMM's form (the tree's root multipole, order p); the CPU's
    /// [`LatticeSum::root_local`] is the case `at` = 0 at order P.
    pub fn local_from_multipole(
        &self,
        mult: &[C64],
        at: [f64; 3],
        center: [f64; 3],
        p: usize,
    ) -> Vec<C64> {
        let order = (0..)
            .find(|&q| 3 * coefficient_count(q) >= mult.len())
            .unwrap();
        assert_eq!(
            mult.len(),
            3 * coefficient_count(order),
            "a 3-charge expansion"
        );
        let mut m0 = mult.to_vec();
        if at != [0.0; 3] {
            m0.fill(C64::new(0.0, 0.0));
            m2m::<3>(&mut Workspace::new(order), at.map(|v| -v), mult, &mut m0);
        }
        m0.resize(3 * coefficient_count(self.order), C64::new(0.0, 0.0));
        let far = self.far_local(&m0);
        let mut moved = vec![C64::new(0.0, 0.0); far.len()];
        l2l::<3>(&mut Workspace::new(self.order), center, &far, &mut moved);
        moved.truncate(3 * coefficient_count(p.min(self.order)));
        moved.resize(3 * coefficient_count(p), C64::new(0.0, 0.0));
        moved
    }
}

/// Multiplies the degree-n coefficients of a 3-charge expansion of order `p` by `f(n)`.
fn scale_degrees(coef: &mut [C64], p: usize, f: impl Fn(usize) -> f64) {
    for n in 0..=p {
        let g = f(n);
        let lo = 3 * coefficient_count(n) - 3 * (n + 1);
        for c in &mut coef[lo..3 * coefficient_count(n)] {
            *c *= g;
        }
    }
}

/// The difference between the cube-ordered image sum (vacuum) and the Ewald sum (module
/// docs): D_lj = Σ α_l x_j and Q = Σ α over the wrapped sources, over 3V.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VacuumTerm {
    pub d: [[f64; 3]; 3],
    pub q: [f64; 3],
}

/// The Levi-Civita symbol ε_ijk.
fn levi_civita(i: usize, j: usize, k: usize) -> f64 {
    ((j as f64 - i as f64) * (k as f64 - i as f64) * (k as f64 - j as f64)) / 2.0
}

impl VacuumTerm {
    /// The moments of the sources at `x` (in the box) with strengths `alpha`, over 3V.
    pub fn of(x: &[[f64; 3]], alpha: &[[f64; 3]]) -> Self {
        let v3 = 3.0 * BOX_LENGTH.powi(3);
        let mut d = [[0.0; 3]; 3];
        let mut q = [0.0; 3];
        for (xq, a) in x.iter().zip(alpha) {
            for l in 0..3 {
                q[l] += a[l] / v3;
                for j in 0..3 {
                    d[l][j] += a[l] * xq[j] / v3;
                }
            }
        }
        Self { d, q }
    }

    /// The moments from the multipole expansion `mult` (3 charges, order ≥ 1, about `at`) of
    /// the sources in the box: Q = M_0^0 and Σ α_l (x − at)_j from M_1^0 = Σ α z and
    /// M_1^1 = −Σ α (x − i y)/2 (the expansions' normalisation), D = that + Q atᵀ. The GPU
    /// FMM's reduction (its root multipole, summed in f64 on the device).
    pub fn from_multipole(mult: &[C64], at: [f64; 3]) -> Self {
        let v3 = 3.0 * BOX_LENGTH.powi(3);
        let q: [f64; 3] = std::array::from_fn(|l| mult[l].re);
        let d = std::array::from_fn(|l| {
            let (m10, m11) = (mult[3 + l], mult[6 + l]);
            let moment = [-2.0 * m11.re, 2.0 * m11.im, m10.re];
            std::array::from_fn(|j| (moment[j] + q[l] * at[j]) / v3)
        });
        Self {
            d,
            q: q.map(|v| v / v3),
        }
    }

    /// u_vac − u_Ewald at `x` (in the box): ε_kjl (D_lj − Q_l x_j)/(3V).
    pub fn velocity(&self, x: [f64; 3]) -> [f64; 3] {
        std::array::from_fn(|k| {
            let mut s = 0.0;
            for (j, xj) in x.iter().enumerate() {
                for l in 0..3 {
                    s += levi_civita(k, j, l) * (self.d[l][j] - self.q[l] * xj);
                }
            }
            s
        })
    }

    /// ∂_m u_vac,k − ∂_m u_Ewald,k, `[k][m]`: −ε_kml Q_l/(3V).
    pub fn gradient(&self) -> [[f64; 3]; 3] {
        std::array::from_fn(|k| {
            std::array::from_fn(|m| {
                -(0..3)
                    .map(|l| levi_civita(k, m, l) * self.q[l])
                    .sum::<f64>()
            })
        })
    }

    /// Subtracts the term from an evaluation at the (wrapped) targets `x`.
    fn subtract(&self, x: &[[f64; 3]], extra: &Extra, out: &mut Evaluation) {
        let g = self.gradient();
        for (t, xt) in x.iter().enumerate() {
            let u = self.velocity(*xt);
            out.velocity[t] = std::array::from_fn(|k| out.velocity[t][k] - u[k]);
            match extra {
                Extra::None => {}
                Extra::Gradient => {
                    for (row, gr) in out.gradient[t].iter_mut().zip(&g) {
                        row.iter_mut().zip(gr).for_each(|(a, b)| *a -= b);
                    }
                }
                Extra::Stretching { alpha, scheme } => {
                    let s = stretching_from_gradient(&g, &alpha[t], *scheme);
                    out.stretching[t] = std::array::from_fn(|k| out.stretching[t][k] - s[k]);
                }
            }
        }
    }
}

/// The periodic FMM on the CPU (f64; module docs).
#[derive(Debug)]
pub struct FmmPeriodic {
    state: FmmState,
    lattice: LatticeSum,
    near_level: u32,
    /// Whether the vacuum term is subtracted (the Ewald sum's convention; `false` only to test
    /// the term).
    ewald_convention: bool,
    /// The built-in check's reference; also sums the blob vorticity.
    ewald: EwaldPeriodic,
}

impl FmmPeriodic {
    /// Plans the parameters for `accuracy` (an error when the CPU cannot deliver it); checks
    /// against a finer Ewald sum at the first evaluation and every `check_every` after (0:
    /// only the first).
    pub fn new(accuracy: f64, check_every: u64) -> Result<Self, SummationError> {
        Ok(Self::with_params(
            plan_parameters(accuracy, FmmBackend::Cpu)?,
            check_every,
        ))
    }

    /// With explicit parameters (tests and benchmarks).
    pub fn with_params(params: FmmParams, check_every: u64) -> Self {
        let order = lattice_order(params.accuracy, params.order);
        Self {
            state: FmmState::new(params, check_every),
            lattice: LatticeSum::new(order, LATTICE_LEVELS, NEAR_LEVEL),
            near_level: NEAR_LEVEL,
            ewald_convention: true,
            ewald: EwaldPeriodic::new((CHECK_REFINEMENT * params.accuracy).max(1e-13)),
        }
    }

    /// The images summed: the near ones of S_`near_level` (1, 2 or 3), `levels` supercell
    /// levels beyond at order `order` (tests of the convergence).
    pub fn with_images(mut self, near_level: u32, levels: usize, order: usize) -> Self {
        assert!((1..=3).contains(&near_level), "near level 1, 2 or 3");
        self.near_level = near_level;
        self.lattice = LatticeSum::new(order.max(self.state.params.order), levels, near_level);
        self
    }

    /// Leaves the vacuum term in (the cube-ordered image sum; tests of the term).
    pub fn vacuum_convention(mut self) -> Self {
        self.ewald_convention = false;
        self
    }

    /// The order of the lattice sum.
    pub fn lattice_order(&self) -> usize {
        self.lattice.order()
    }
}

fn wrap_all(x: &[[f64; 3]]) -> Vec<[f64; 3]> {
    x.iter().map(|p| p.map(wrap)).collect()
}

/// The periodic FMM's name: `engine` (where and in what precision) with its images and
/// parameters.
pub(super) fn name_of(
    engine: &str,
    near_level: u32,
    lattice: &LatticeSum,
    params: &FmmParams,
) -> String {
    format!(
        "FMM periodic {engine} (images |n|∞ ≤ {} through the tree, {} supercell levels at order \
         {} beyond), {params}",
        (3i64.pow(near_level) - 1) / 2,
        lattice.levels,
        lattice.order,
    )
}

/// The CPU engine in the periodic FMM's name.
const CPU_ENGINE: &str = "CPU f64";

/// What [`FmmPeriodic::new`] with `params` is, in words (its name): for the planner.
pub fn describe(params: &FmmParams) -> String {
    describe_engine(CPU_ENGINE, params)
}

/// The name of a periodic FMM on `engine` with `params` and the default images.
pub(super) fn describe_engine(engine: &str, params: &FmmParams) -> String {
    let order = lattice_order(params.accuracy, params.order);
    name_of(
        engine,
        NEAR_LEVEL,
        &LatticeSum::new(order, LATTICE_LEVELS, NEAR_LEVEL),
        params,
    )
}

impl Summation for FmmPeriodic {
    fn name(&self) -> String {
        name_of(
            CPU_ENGINE,
            self.near_level,
            &self.lattice,
            &self.state.params,
        )
    }

    fn boundary(&self) -> Boundary {
        Boundary::Periodic { length: TAU }
    }

    fn evaluate_request(&mut self, req: Request, out: &mut Evaluation) -> SumResult {
        if req.targets.is_empty() {
            return Ok(());
        }
        let (_, sigma_max) = sigma_range(req.sources)?;
        let params = self.state.params;
        let x = wrap_all(req.sources.x);
        let same = std::ptr::eq(req.targets.as_ptr(), req.sources.x.as_ptr())
            && req.targets.len() == req.sources.x.len();
        let own_targets;
        let tx: &[[f64; 3]] = if same {
            &x
        } else {
            own_targets = wrap_all(req.targets);
            &own_targets
        };
        let sources = Sources {
            x: &x,
            alpha: req.sources.alpha,
            sigma: req.sources.sigma,
        };
        let wrapped = Request {
            sources: &sources,
            targets: tx,
            extra: req.extra,
        };
        let (lattice, shifts) = (&self.lattice, near_shifts(self.near_level));
        let scale = (&x[..], req.sources.sigma);
        let stats = evaluate_biot_savart(
            &params,
            &wrapped,
            out,
            |near| Structure::build_images(scale, tx, &params, near, shifts),
            |st| {
                let center = st.targets().cells[0].center;
                Some(lattice.root_local(&x, req.sources.alpha, center, params.order))
            },
        );
        if self.ewald_convention {
            VacuumTerm::of(&x, req.sources.alpha).subtract(tx, &req.extra, out);
        }
        self.state.stats = stats;
        let reference = &mut self.ewald;
        self.state
            .schedule
            .after_evaluation_against(reference, &req, out, sigma_max, &params, &stats)
    }

    fn take_accuracy_checks(&mut self) -> Vec<AccuracyCheck> {
        self.state.schedule.take()
    }

    /// The blob sum is local: the Ewald evaluator's cell lists in the box.
    fn vorticity(&mut self, src: &Sources, at: &[[f64; 3]], out: &mut Vec<[f64; 3]>) -> SumResult {
        self.ewald.vorticity(src, at, out)
    }

    /// The Ewald evaluator's separable sum at the lattice nodes.
    fn vorticity_on_lattice(&mut self, s: &Sources, n: usize, w: &mut Vec<[f64; 3]>) -> SumResult {
        self.ewald.vorticity_on_lattice(s, n, w)
    }
}

impl Fmm for FmmPeriodic {
    fn state(&self) -> &FmmState {
        &self.state
    }
    fn state_mut(&mut self) -> &mut FmmState {
        &mut self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levi_civita_is_the_permutation_sign() {
        assert_eq!(levi_civita(0, 1, 2), 1.0);
        assert_eq!(levi_civita(1, 2, 0), 1.0);
        assert_eq!(levi_civita(1, 0, 2), -1.0);
        assert_eq!(levi_civita(0, 0, 2), 0.0);
        assert_eq!(levi_civita(2, 1, 0), -1.0);
    }

    #[test]
    fn near_shifts_cover_the_supercell() {
        assert_eq!(near_shifts(1).len(), 27);
        assert_eq!(near_shifts(2).len(), 729);
        assert!(near_shifts(2).contains(&[4.0 * TAU, -4.0 * TAU, 0.0]));
    }

    #[test]
    fn lattice_order_grows_with_the_accuracy() {
        assert!(lattice_order(1e-4, 9) >= 9);
        assert!(lattice_order(1e-8, 9) > lattice_order(1e-4, 9));
        assert!(lattice_order(1e-10, 9) <= LATTICE_MAX_ORDER);
    }
}
