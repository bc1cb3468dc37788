//! Pseudo-spectral Navier–Stokes solver (docs/physics.md §5).
//!
//! û_t = P(k) F[u × ω] − ν|k|² û,   P = I − k kᵀ/|k|²,
//!
//! in rotational form with ω = ∇ × u, on the retained modes of an N^3 grid. The nonlinear term is
//! dealiased either by the 3/2 rule (products on a padded 3N/2 grid, modes |k_i| ≤ N/2 − 1 kept)
//! or by 2/3 truncation (products on the N grid, modes |k_i| < N/3 kept); in both cases the
//! product is truncated after every forward transform, because only retained modes are stored.
//!
//! Time integration: classical RK4 with the viscous term exact through an integrating factor
//! (Lawson's RK4): with E(τ) = exp(−ν|k|²τ) and N(û) the projected nonlinear term,
//!
//!   k1 = N(û),  k2 = N(E(Δt/2)(û + Δt/2 k1)),  k3 = N(E(Δt/2)û + Δt/2 k2),
//!   k4 = N(E(Δt)û + Δt E(Δt/2) k3),
//!   û ← E(Δt)û + Δt/6 (E(Δt) k1 + 2E(Δt/2)(k2 + k3) + k4).
//!
//! A single Fourier mode therefore decays exactly as exp(−ν|k|²t) in amplitude.
//!
//! Each N(·) is one fused pass of [`Fft3d::apply_pointwise_with`]: ω̂ = i k × û is formed while
//! the modes are gathered, u × ω is formed plane by plane on the product grid without storing
//! any field there, and the projection and the Runge–Kutta update above are applied to each
//! mode of F[u × ω] as it is produced, so k2, k3 and k4 are never stored either.

use super::fft3d::{Fft3d, Pointwise};
use super::layout::ModeLayout;
use num_complex::Complex64;
use rayon::prelude::*;

const ZERO: Complex64 = Complex64 { re: 0.0, im: 0.0 };

/// A time step produced NaN or Inf.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the velocity became non-finite (NaN or Inf)")]
pub struct NonFiniteState;

/// Dealiasing of the nonlinear term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dealias {
    /// `"3/2"`: pad to 3n/2, multiply, truncate (exact for quadratic terms).
    ThreeHalves,
    /// `"2/3"`: zero the modes with |k_i| > n/3 (cheaper).
    TwoThirds,
}

impl Dealias {
    /// The TOML spelling: `"3/2"` or `"2/3"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Dealias::ThreeHalves => "3/2",
            Dealias::TwoThirds => "2/3",
        }
    }
}

impl std::fmt::Display for Dealias {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Three components of a vector field stored as retained modes.
pub type VectorModes = [Vec<Complex64>; 3];

/// Grid size, dealiasing rule and the sizes they imply.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpectralGrid {
    /// Points per dimension of the solution grid.
    pub n: usize,
    pub dealias: Dealias,
}

impl SpectralGrid {
    pub fn new(n: usize, dealias: Dealias) -> Self {
        Self { n, dealias }
    }

    /// Largest retained |k_i|: N/2 − 1 for the 3/2 rule (the Nyquist mode is dropped), the
    /// largest K with 3K < N for 2/3 truncation.
    pub fn kmax(&self) -> usize {
        match self.dealias {
            Dealias::ThreeHalves => self.n / 2 - 1,
            Dealias::TwoThirds => (self.n - 1) / 3,
        }
    }

    /// Points per dimension of the grid where products are formed: 3N/2 or N.
    pub fn product_grid(&self) -> usize {
        match self.dealias {
            Dealias::ThreeHalves => 3 * self.n / 2,
            Dealias::TwoThirds => self.n,
        }
    }

    pub fn layout(&self) -> ModeLayout {
        ModeLayout::new(self.kmax())
    }

    /// Grid spacing h = 2π/N.
    pub fn h(&self) -> f64 {
        std::f64::consts::TAU / self.n as f64
    }

    /// The step a CFL number allows (docs/physics.md §5.4): Δt = C·h / max(|u| + |v| + |w|),
    /// infinite for a field at rest (`speed_sum_max` = 0). Every spectral solver's `cfl_dt`.
    pub fn cfl_dt(&self, cfl: f64, speed_sum_max: f64) -> f64 {
        if speed_sum_max > 0.0 {
            cfl * self.h() / speed_sum_max
        } else {
            f64::INFINITY
        }
    }
}

/// Allocates a zero vector field on a layout.
pub fn zero_modes(layout: &ModeLayout) -> VectorModes {
    std::array::from_fn(|_| vec![ZERO; layout.len()])
}

/// The spectral solver: state (û, t), physics (ν, projection, dealiasing) and the RK4 stepper.
pub struct SpectralSolver {
    grid: SpectralGrid,
    layout: ModeLayout,
    nu: f64,
    fft: Fft3d,
    /// |k|² for every stored mode.
    k2: Vec<f64>,
    /// Integer wavevector components per stored mode.
    kvec: Vec<[f64; 3]>,
    /// The state: velocity Fourier coefficients.
    uhat: VectorModes,
    /// N(û) at the current state; valid when `k1_valid` (set by `rhs_at_current`, used as the
    /// first stage by `step`).
    k1: VectorModes,
    k1_valid: bool,
    /// max(|u| + |v| + |w|) on the product grid at the current state, when known.
    speed_sum_max: Option<f64>,
    // Scratch, allocated once: the two Runge–Kutta stage inputs (each stage's N(·) reads one
    // while its store writes the next into the other) and the accumulated new state.
    stage: VectorModes,
    stage_b: VectorModes,
    acc: VectorModes,
    /// exp(−ν|k|²Δt/2) per mode for the Δt in `ehalf_dt`.
    ehalf: Vec<f64>,
    ehalf_dt: f64,
    /// Transform on the N³ solution grid (the divergence check), made on first use.
    grid_fft: Option<Fft3d>,
}

impl SpectralSolver {
    /// A solver with zero velocity. `nu` is the kinematic viscosity.
    pub fn new(grid: SpectralGrid, nu: f64) -> Self {
        let layout = grid.layout();
        let m = grid.product_grid();
        let mut k2 = vec![0.0; layout.len()];
        let mut kvec = vec![[0.0; 3]; layout.len()];
        layout.for_each_mode(|i, k| {
            let kf = [k[0] as f64, k[1] as f64, k[2] as f64];
            kvec[i] = kf;
            k2[i] = kf[0] * kf[0] + kf[1] * kf[1] + kf[2] * kf[2];
        });
        Self {
            grid,
            layout,
            nu,
            fft: Fft3d::new(m, layout),
            k2,
            kvec,
            uhat: zero_modes(&layout),
            k1: zero_modes(&layout),
            k1_valid: false,
            speed_sum_max: None,
            stage: zero_modes(&layout),
            acc: zero_modes(&layout),
            stage_b: zero_modes(&layout),
            ehalf: vec![1.0; layout.len()],
            ehalf_dt: 0.0,
            grid_fft: None,
        }
    }

    pub fn grid(&self) -> SpectralGrid {
        self.grid
    }

    pub fn layout(&self) -> ModeLayout {
        self.layout
    }

    pub fn nu(&self) -> f64 {
        self.nu
    }

    /// The velocity Fourier coefficients (DFT convention, see [`ModeLayout`]).
    pub fn velocity_modes(&self) -> &VectorModes {
        &self.uhat
    }

    /// Replaces the state. The field is projected onto divergence-free fields, its mean removed
    /// and the k_z = 0 plane made Hermitian, so the state is always a real solenoidal field.
    pub fn set_velocity_modes(&mut self, uhat: VectorModes) {
        assert!(uhat.iter().all(|c| c.len() == self.layout.len()));
        self.uhat = uhat;
        let [a, b, c] = &mut self.uhat;
        project(&self.kvec, &self.k2, [a, b, c]);
        for c in self.uhat.iter_mut() {
            self.layout.enforce_hermitian(c);
            c[0] = ZERO;
        }
        self.k1_valid = false;
        self.speed_sum_max = None;
    }

    /// Restores a state saved from [`SpectralSolver::velocity_modes`] exactly (no projection).
    pub fn restore_velocity_modes(&mut self, uhat: VectorModes) {
        assert!(uhat.iter().all(|c| c.len() == self.layout.len()));
        self.uhat = uhat;
        self.k1_valid = false;
        self.speed_sum_max = None;
    }

    /// True when every coefficient of the state is finite.
    pub fn state_is_finite(&self) -> bool {
        self.uhat
            .iter()
            .all(|c| c.par_iter().all(|z| z.re.is_finite() && z.im.is_finite()))
    }

    /// The projected nonlinear term N(û) = P F[u × ω] at the current state (cached until the
    /// state changes; the next `step` reuses it as its first stage).
    pub fn rhs_at_current(&mut self) -> &VectorModes {
        if !self.k1_valid {
            let mut out = std::mem::take(&mut self.k1);
            let uh = std::mem::take(&mut self.uhat);
            let smax = self.nonlinear(&uh, &mut out);
            self.uhat = uh;
            self.k1 = out;
            self.k1_valid = true;
            self.speed_sum_max = Some(smax);
        }
        &self.k1
    }

    /// max(|u| + |v| + |w|) over the product grid at the current state.
    pub fn speed_sum_max(&mut self) -> f64 {
        self.rhs_at_current();
        self.speed_sum_max.unwrap()
    }

    /// The step allowed by a CFL number: Δt = C·h / max(|u| + |v| + |w|) (infinite for u = 0).
    pub fn cfl_dt(&mut self, cfl: f64) -> f64 {
        let s = self.speed_sum_max();
        self.grid.cfl_dt(cfl, s)
    }

    /// dK/dt from the right-hand side: Σ_k Re(û*·(N̂ − ν|k|²û)) over all modes.
    pub fn dkdt_from_rhs(&mut self) -> f64 {
        let nu = self.nu;
        self.rhs_at_current();
        let k1 = &self.k1;
        let lay = self.layout;
        let nz = lay.nz();
        let mut total = 0.0;
        for (uc, kc) in self.uhat.iter().zip(k1) {
            total += ordered_sum(uc.len() / nz, |blk| {
                let mut s = 0.0;
                for kz in 0..nz {
                    let i = blk * nz + kz;
                    let u = uc[i];
                    let rhs = kc[i] - u * (nu * self.k2[i]);
                    s += ModeLayout::weight(kz) * (u.conj() * rhs).re;
                }
                s
            });
        }
        total
    }

    /// One RK4 step of size `dt` (Lawson integrating factor for the viscous term). A step whose
    /// result is not finite is not committed: the state stays the last good one.
    pub fn step(&mut self, dt: f64) -> Result<(), NonFiniteState> {
        let nu = self.nu;
        self.rhs_at_current();
        if self.ehalf_dt != dt {
            let k2 = &self.k2;
            self.ehalf
                .par_iter_mut()
                .enumerate()
                .for_each(|(i, e)| *e = (-nu * k2[i] * 0.5 * dt).exp());
            self.ehalf_dt = dt;
        }
        let k1 = std::mem::take(&mut self.k1);
        let uh = std::mem::take(&mut self.uhat);
        let mut sa = std::mem::take(&mut self.stage);
        let mut acc = std::mem::take(&mut self.acc);
        let mut sb = std::mem::take(&mut self.stage_b);
        let ehalf = std::mem::take(&mut self.ehalf);
        let eh = |i: usize| ehalf[i];

        // acc = E û + Δt/6 E k1;  sa = E_h (û + Δt/2 k1)
        for c in 0..3 {
            zip4(&mut acc[c], &mut sa[c], &uh[c], &k1[c], |i, a, s, u, k| {
                let h = eh(i);
                let f = h * h;
                *a = (u + k * (dt / 6.0)) * f;
                *s = (u + k * (0.5 * dt)) * h;
            });
        }
        // The later stages are applied as each k_i = N(stage) is stored (`nonlinear_into`), so
        // k2, k3 and k4 are never stored.
        // k2 = N(sa):  acc += Δt/3 E_h k2;  sb = E_h û + Δt/2 k2
        let dst = fields([&mut acc, &mut sb]);
        self.nonlinear_into(&sa, dst, |i, k, [a0, a1, a2, s0, s1, s2]| {
            let h = eh(i);
            for (c, (a, s)) in [(a0, s0), (a1, s1), (a2, s2)].into_iter().enumerate() {
                *a += k[c] * (dt / 3.0 * h);
                *s = uh[c][i] * h + k[c] * (0.5 * dt);
            }
        });
        // k3 = N(sb):  acc += Δt/3 E_h k3;  sa = E û + Δt E_h k3
        let dst = fields([&mut acc, &mut sa]);
        self.nonlinear_into(&sb, dst, |i, k, [a0, a1, a2, s0, s1, s2]| {
            let h = eh(i);
            for (c, (a, s)) in [(a0, s0), (a1, s1), (a2, s2)].into_iter().enumerate() {
                *a += k[c] * (dt / 3.0 * h);
                *s = uh[c][i] * (h * h) + k[c] * (dt * h);
            }
        });
        // k4 = N(sa):  acc += Δt/6 k4
        self.nonlinear_into(&sa, fields([&mut acc]), |_, k, a: [_; 3]| {
            for (a, k) in a.into_iter().zip(k) {
                *a += k * (dt / 6.0);
            }
        });
        // Round-off in the transforms can break the symmetry of the k_z = 0 plane slightly;
        // the state of a real field keeps it exactly.
        for c in acc.iter_mut() {
            self.layout.enforce_hermitian(c);
        }
        let finite = acc
            .iter()
            .all(|c| c.par_iter().all(|z| z.re.is_finite() && z.im.is_finite()));
        self.stage = sa;
        self.stage_b = sb;
        self.k1 = k1;
        self.ehalf = ehalf;
        if !finite {
            // Keep the last good state (and its still valid first stage).
            self.uhat = uh;
            self.acc = acc;
            return Err(NonFiniteState);
        }
        self.uhat = acc;
        self.acc = uh;
        self.k1_valid = false;
        self.speed_sum_max = None;
        Ok(())
    }

    /// N(v̂) = P F[v × (∇ × v)], truncated to the retained modes. Returns max(|v_x| + |v_y| +
    /// |v_z|) on the product grid.
    fn nonlinear(&mut self, vh: &VectorModes, out: &mut VectorModes) -> f64 {
        self.nonlinear_into(vh, fields([out]), |_, k, o: [_; 3]| {
            for (o, k) in o.into_iter().zip(k) {
                *o = k;
            }
        })
    }

    /// N(v̂) handed to `store` mode by mode, with the mode's index and the elements at that
    /// index of the slices in `dst` (components of vector fields, see [`fields`]); returns
    /// max(|v_x| + |v_y| + |v_z|) on the product grid. One fused pass of
    /// [`Fft3d::apply_pointwise_with`] (see [`RotationalForm`]): neither ω̂, nor any field on the
    /// product grid, nor N(v̂) itself is stored.
    fn nonlinear_into<const NS: usize>(
        &mut self,
        vh: &VectorModes,
        dst: [&mut [Complex64]; NS],
        store: impl Fn(usize, [Complex64; 3], [&mut Complex64; NS]) + Sync,
    ) -> f64 {
        self.fft
            .apply_pointwise_with(&RotationalForm(vh), dst, &|i, k, n, d| {
                store(i, leray(k, n), d)
            })
    }

    /// max |∇·u| over the N³ nodes of the solution grid ([`crate::diagnostics::max_divergence`]).
    pub fn max_divergence(&mut self) -> f64 {
        let (fft, u) = self.grid_transform();
        crate::diagnostics::max_divergence(fft, u)
    }

    /// max |ω| over the N³ nodes of the solution grid ([`crate::diagnostics::max_vorticity`]).
    pub fn max_vorticity(&mut self) -> f64 {
        let (fft, u) = self.grid_transform();
        crate::diagnostics::max_vorticity(fft, u)
    }

    /// The transform of the N³ solution grid (made on first use), with the state's modes.
    fn grid_transform(&mut self) -> (&mut Fft3d, &VectorModes) {
        let (n, layout) = (self.grid.n, self.layout);
        let fft = self.grid_fft.get_or_insert_with(|| Fft3d::new(n, layout));
        (fft, &self.uhat)
    }

    /// Velocity on the N^3 solution grid (nodes x_i = −π + i·h), components in `[i][j][k]` order.
    pub fn velocity_on_grid(&self) -> [Vec<f64>; 3] {
        let n = self.grid.n;
        let mut fft = Fft3d::new(n, self.layout);
        std::array::from_fn(|c| {
            let mut p = vec![0.0; n * n * n];
            fft.inverse(&self.uhat[c], &mut p);
            p
        })
    }
}

/// The nonlinear term as a pointwise operation: the inputs are v̂ and ω̂ = i k × v̂ (formed
/// while the modes are gathered), the product is v × ω with max(|v_x| + |v_y| + |v_z|) as the
/// reduced scalar.
struct RotationalForm<'a>(&'a VectorModes);

impl Pointwise<6, 3> for RotationalForm<'_> {
    #[inline]
    fn input(&self, i: usize, k: [i64; 3]) -> [Complex64; 6] {
        let k = k.map(|x| x as f64);
        let [v0, v1, v2] = self.0;
        let v = [v0[i], v1[i], v2[i]];
        // ω̂_c = i (k_a v̂_b − k_b v̂_a) for (c, a, b) cyclic.
        let w: [Complex64; 3] = std::array::from_fn(|c| {
            let (a, b) = ((c + 1) % 3, (c + 2) % 3);
            let d = v[b] * k[a] - v[a] * k[b];
            Complex64::new(-d.im, d.re)
        });
        [v[0], v[1], v[2], w[0], w[1], w[2]]
    }

    #[inline]
    fn point(&self, values: &[f64; 6]) -> ([f64; 3], f64) {
        cross_and_speed(values)
    }
}

/// u × ω at one node from [u_x, u_y, u_z, ω_x, ω_y, ω_z], with |u_x| + |u_y| + |u_z| (the CFL
/// speed of §5.4): the pointwise step of the rotational form, shared by every host solver.
#[inline]
pub fn cross_and_speed(&[a, b, c, x, y, z]: &[f64; 6]) -> ([f64; 3], f64) {
    (
        [b * z - c * y, c * x - a * z, a * y - b * x],
        a.abs() + b.abs() + c.abs(),
    )
}

/// The Leray projection of one mode, with the arithmetic of [`project`].
#[inline]
pub fn leray(k: [i64; 3], [x, y, z]: [Complex64; 3]) -> [Complex64; 3] {
    let k = k.map(|x| x as f64);
    let k2 = k[0] * k[0] + k[1] * k[1] + k[2] * k[2];
    if k2 == 0.0 {
        return [ZERO; 3];
    }
    let dot = (x * k[0] + y * k[1] + z * k[2]) / k2;
    [x - dot * k[0], y - dot * k[1], z - dot * k[2]]
}

/// What [`SpectralSolver::set_velocity_modes`] does to a new state, mode by mode with
/// [`leray`]: the projection onto divergence-free fields, a Hermitian k_z = 0 plane and a zero
/// mean. For a solver that keeps no per-mode tables on the host (the GPU one).
pub fn make_real_solenoidal(layout: &ModeLayout, uhat: &mut VectorModes) {
    let [a, b, c] = uhat;
    layout.for_each_mode(|i, k| {
        let [x, y, z] = leray(k, [a[i], b[i], c[i]]);
        (a[i], b[i], c[i]) = (x, y, z);
    });
    for c in uhat.iter_mut() {
        layout.enforce_hermitian(c);
        c[0] = ZERO;
    }
}

/// Leray projection v̂ ← v̂ − k (k·v̂)/|k|², and v̂(0) = 0.
pub fn project(kvec: &[[f64; 3]], k2: &[f64], v: [&mut Vec<Complex64>; 3]) {
    let [a, b, c] = v;
    a.par_iter_mut()
        .zip(b.par_iter_mut())
        .zip(c.par_iter_mut())
        .enumerate()
        .for_each(|(i, ((x, y), z))| {
            if k2[i] == 0.0 {
                *x = ZERO;
                *y = ZERO;
                *z = ZERO;
                return;
            }
            let k = kvec[i];
            let dot = (*x * k[0] + *y * k[1] + *z * k[2]) / k2[i];
            *x -= dot * k[0];
            *y -= dot * k[1];
            *z -= dot * k[2];
        });
}

/// Σ over `blocks` of f(block), summed in block order whatever the thread count, so results are
/// bit-identical for any number of threads.
pub fn ordered_sum(blocks: usize, f: impl Fn(usize) -> f64 + Sync + Send) -> f64 {
    let parts: Vec<f64> = (0..blocks).into_par_iter().map(&f).collect();
    parts.iter().sum()
}

/// The component slices of NV vector fields, in order: [a_x, a_y, a_z, b_x, …]. `N` must be
/// 3·NV.
fn fields<const NV: usize, const N: usize>(v: [&mut VectorModes; NV]) -> [&mut [Complex64]; N] {
    assert_eq!(N, 3 * NV);
    let mut it = v.into_iter().flat_map(|v| v.iter_mut().map(|c| &mut c[..]));
    std::array::from_fn(|_| it.next().expect("N = 3·NV"))
}

/// Element-wise update over two outputs and two inputs, in parallel.
fn zip4(
    a: &mut [Complex64],
    s: &mut [Complex64],
    u: &[Complex64],
    k: &[Complex64],
    f: impl Fn(usize, &mut Complex64, &mut Complex64, Complex64, Complex64) + Sync,
) {
    a.par_iter_mut()
        .zip(s.par_iter_mut())
        .zip(u.par_iter().zip(k.par_iter()))
        .enumerate()
        .for_each(|(i, ((a, s), (u, k)))| f(i, a, s, *u, *k));
}
