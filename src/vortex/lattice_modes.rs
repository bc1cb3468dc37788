//! The blob vorticity's Fourier modes on the particle lattice's band, by a type-1 non-uniform
//! FFT in f64 (docs/physics.md §3.7): what spectral reinitialisation ([`super::RbfSolver::Spectral`])
//! solves from, at a cost that does not grow with the cores.
//!
//! With one core σ, the blob field ω_h = Σ_p α_p ζ_σ(x − x_p) has the coefficients
//! ω̂(q) = V⁻¹ e^{−|q|²σ²/2} Σ_p α_p e^{−iq·x_p}. In the lattice-DFT convention of
//! [`super::rbf::lattice_spectrum`] (nodes −π + i·h) the spectral solve needs
//! ω̂(q) (−1)^{q_x+q_y+q_z} = V⁻¹ e^{−|q|²σ²/2} Σ_p α_p e^{−iq·x'_p}, x' = x + π ∈ [0, 2π)³, for every
//! q of the band |q_d| ≤ n/2. They are computed as a non-uniform FFT of type 1 (Kaiser–Bessel
//! gridding: Jackson et al., IEEE TMI 10, 1991; Fessler & Sutton, IEEE TSP 51, 2003; Barnett,
//! Magland & af Klinteberg, SIAM J. Sci. Comput. 41, 2019):
//!
//! 1. **Spread** each α_p onto the M³ mesh (spacing H = 2π/M, M > n, [`ModesPlan`]) with the
//!    separable window φ(x) = Π_d φ₁(x_d), φ₁(x) = I₀(β√(1 − t²))/I₀(β) for t = 2x/(wH) in
//!    (−1, 1), 0 outside: w nodes per direction;
//! 2. **Transform**: F(m) = Σ_j f_j e^{−2πi m·j/M};
//! 3. **Deconvolve** on the band: by Poisson summation F(q) = H⁻³ Σ_l φ̂(q + lM) Σ_p α_p
//!    e^{−i(q+lM)·x'_p}, so the modes are F(q) Π_d e^{−q_d²σ²/2}/(M φ̂₁(q_d)), with the closed form
//!    φ̂₁(k) = wH sinh(√(β² − z²))/(√(β² − z²) I₀(β)), z = kwH/2 (sin for z > β), and an error of
//!    the terms l ≠ 0 (aliasing).
//!
//! The cost is N·w³ + M³ log M, independent of σ; the 7σ lattice sum it replaces grew with
//! the cores. β = πw(1 − 1/(2u)), u = M/n, puts the band edge's nearest alias exactly at the
//! edge of φ̂'s main lobe.
//!
//! **The window rule** ([`ModesPlan::new`]): the RBF solve divides mode q by the band Gaussian,
//! amplifying an error by up to A = exp((n/2)²σ0²/2) (139 at σ0 = h, 16 at 0.75h); the modes'
//! error times A must stay below [`VORTICITY_TOLERANCE`] (1e-6) of the vorticity's rms. The
//! aliasing error per axis is E(w) = max over band k of Σ_{0<|l|≤3} |φ̂₁(k + lM)|/φ̂₁(k), three
//! axes add to 3E, so w is the smallest width with 3E(w) ≤ 1e-6/A (no finer than
//! [`TOLERANCE_FLOOR`], the modes' own round-off): at M = 3n/2 (u = 1.5, the same mesh as
//! [`super::reinit::sampling_lattice`]) w = 12 at overlap 0.75 and 14 at overlap 1. When no
//! width up to [`MAX_WIDTH`] reaches it, or the mesh is too small for the GPU's gather, the next
//! mesh size is taken.
//!
//! The GPU form is [`super::rbf_device::DeviceRbfSolver::queue_band_modes`]
//! (kernels/lattice_modes.cu); [`blob_band_spectrum`] is its CPU f64 mirror, which the host
//! stepper's reinitialisation ([`super::VortexSolver::reinitialise`]) uses: both steppers solve
//! from the same modes.

use super::rbf::{for_each_lattice_mode, lattice_spectrum, signed_wavenumber};
use super::reinit::{band_of_spectrum, sampling_lattice};
use crate::summation::ewald::window::KaiserBessel;
use num_complex::Complex64;
use rayon::prelude::*;
use std::f64::consts::{PI, TAU};

/// The RBF solve's target: the modes' error times the solve's amplification, relative to the
/// vorticity's rms (issue 26).
pub const VORTICITY_TOLERANCE: f64 = 1e-6;
/// The finest aliasing error asked of the window: below it the f64 sums' round-off dominates.
pub const TOLERANCE_FLOOR: f64 = 1e-13;
/// Narrowest window, in nodes per direction.
pub const MIN_WIDTH: usize = 4;
/// Widest window, in nodes per direction.
pub const MAX_WIDTH: usize = 16;
/// The GPU gather's tile edge in mesh nodes (`LM_TILE` in kernels/lattice_modes.cu).
pub const TILE: usize = 8;
/// The GPU's particle cells' edge in mesh nodes (`LM_CELL`).
pub const CELL: usize = 2;

/// The Kaiser–Bessel window of `width` nodes on an M = `mesh` point mesh for the band of an
/// `n`-point lattice (mesh > n): [`KaiserBessel`] (src/summation/ewald/window.rs, the one
/// definition the PME shares) with β = πw(1 − 1/(2u)), u = M/n (Fessler & Sutton 2003).
pub fn band_window(width: usize, mesh: usize, n: usize) -> KaiserBessel {
    let u = mesh as f64 / n as f64;
    KaiserBessel::new(mesh, width, PI * width as f64 * (1.0 - 0.5 / u))
}

/// The RBF solve's largest amplification of a mode error on an `n`³ lattice with core σ0:
/// exp((n/2)²σ0²/2), the inverse of the band Gaussian at the band's edge relative to q = 0.
pub fn amplification(n: usize, sigma0: f64) -> f64 {
    let edge = 0.5 * n as f64 * sigma0;
    (0.5 * edge * edge).exp()
}

/// The aliasing error per axis the window must reach: [`VORTICITY_TOLERANCE`] over the
/// amplification and over the three axes, no finer than [`TOLERANCE_FLOOR`].
pub fn axis_tolerance(n: usize, sigma0: f64) -> f64 {
    (VORTICITY_TOLERANCE / amplification(n, sigma0) / 3.0).max(TOLERANCE_FLOOR)
}

/// The GPU gather's sweep: (first cell's offset from the tile's first cell, cells per
/// direction) of the particles whose window of `width` nodes reaches a tile of [`TILE`] nodes.
/// A particle at mesh coordinate p reaches node i when |i − p| < w/2, so the tile [t0, t0 + T)
/// takes p in (t0 − w/2, t0 + T − 1 + w/2): cells ⌊(t0 − w/2)/C⌋ to ⌊(t0 + T − 1 + w/2)/C⌋.
pub fn sweep(width: usize) -> (i64, usize) {
    let (w, c) = (width as i64, 2 * CELL as i64);
    let lo = -(w + c - 1) / c; // −⌈w/(2C)⌉
    let hi = (2 * TILE as i64 - 2 + w) / c; // ⌊(2T − 2 + w)/(2C)⌋
    (lo, (hi - lo + 1) as usize)
}

/// Why no window fits.
#[derive(Debug, thiserror::Error)]
#[error(
    "lattice modes: no Kaiser–Bessel window of at most {MAX_WIDTH} nodes on a mesh of at most \
     {max_mesh}³ reaches the aliasing error {tolerance:.1e} asked for the {n}³ lattice with \
     σ0 = {sigma0} (amplification {amplification:.1e})"
)]
pub struct NoWindow {
    n: usize,
    sigma0: f64,
    tolerance: f64,
    amplification: f64,
    max_mesh: usize,
}

/// The mesh and window for the band modes of an n³ lattice ([`ModesPlan::new`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModesPlan {
    /// The particle lattice n (the band |q_d| ≤ n/2).
    pub n: usize,
    /// The window (its `m` is the mesh side M).
    pub window: KaiserBessel,
}

/// Whether `m` is a multiple of 8 with no prime factor above 7.
fn smooth_multiple_of_8(m: usize) -> bool {
    let mut r = m;
    for p in [2, 3, 5, 7] {
        while r.is_multiple_of(p) {
            r /= p;
        }
    }
    r == 1 && m.is_multiple_of(8)
}

impl ModesPlan {
    /// The window rule (module docs): starting from M = [`sampling_lattice`]`(n)` (3n/2, u =
    /// 1.5), the smallest width w with the per-axis aliasing error at most
    /// [`axis_tolerance`]`(n, σ0)`, on the first mesh (multiples of 8 with prime factors ≤ 7,
    /// up to 4n + 32) where such a width exists and the GPU's sweep of cells fits the mesh.
    pub fn new(n: usize, sigma0: f64) -> Result<Self, NoWindow> {
        let tolerance = axis_tolerance(n, sigma0);
        let max_mesh = 4 * n + 32;
        let mut mesh = sampling_lattice(n);
        while mesh <= max_mesh {
            if smooth_multiple_of_8(mesh) {
                let found = (MIN_WIDTH..=MAX_WIDTH)
                    .map(|w| band_window(w, mesh, n))
                    .find(|kb| kb.aliasing(n / 2) <= tolerance);
                if let Some(window) = found {
                    if sweep(window.w).1 * CELL <= mesh {
                        return Ok(ModesPlan { n, window });
                    }
                }
            }
            mesh += 8;
        }
        Err(NoWindow {
            n,
            sigma0,
            tolerance,
            amplification: amplification(n, sigma0),
            max_mesh,
        })
    }

    /// M, the mesh's points per direction.
    pub fn mesh(&self) -> usize {
        self.window.m
    }

    /// The deconvolution per DFT index d of the n-point lattice for core σ:
    /// e^{−q²σ²/2}/(M φ̂₁(q)), q the signed wavenumber (+n/2 at a Nyquist index; φ̂₁ and the
    /// Gaussian are even, so the Nyquist sum of ±n/2 takes the same factor).
    pub fn factors(&self, sigma: f64) -> Vec<f64> {
        let m = self.mesh() as f64;
        (0..self.n)
            .map(|d| {
                let q = signed_wavenumber(d, self.n);
                (-0.5 * q * q * sigma * sigma).exp() / (m * self.window.transform(q))
            })
            .collect()
    }

    /// Device bytes of the mesh in the GPU's in-place transform layout: 3 components of
    /// M·M·2(M/2 + 1) f64.
    pub fn mesh_bytes(&self) -> u64 {
        let m = self.mesh() as u64;
        3 * m * m * 2 * (m / 2 + 1) * 8
    }
}

/// The mesh coordinate p ∈ [0, M) of a position (box [−π, π) per axis, periodic) on an M-point
/// mesh (the GPU's `lm_coordinate`).
pub fn mesh_coordinate(x: f64, mesh: usize) -> f64 {
    let mut s = x + PI;
    s -= TAU * (s / TAU).floor();
    let p = s * (mesh as f64 / TAU);
    if p >= mesh as f64 {
        p - mesh as f64
    } else {
        p
    }
}

/// The CPU f64 mirror of the GPU's band modes (module docs; the host stepper's spectral
/// reinitialisation with one core): the blob field's coefficients on
/// the band of the `plan.n`³ lattice, in the layout and normalisation of
/// [`super::reinit::band_of_spectrum`] (the full n³ lattice spectrum of
/// [`lattice_spectrum`], a Nyquist component the sum of ±n/2), for particles at `x` with
/// strengths `alpha` and one core `sigma`.
pub fn blob_band_spectrum(
    x: &[[f64; 3]],
    alpha: &[[f64; 3]],
    sigma: f64,
    plan: &ModesPlan,
) -> [Vec<Complex64>; 3] {
    let (n, m) = (plan.n, plan.mesh());
    let field = spread(x, alpha, plan);
    // lattice_spectrum divides by M³; the factors want the plain sum.
    let fine = lattice_spectrum(&field, m);
    let mut band = band_of_spectrum(&fine, m, n);
    let f = plan.factors(sigma);
    let m3 = (m * m * m) as f64;
    for_each_lattice_mode(n, |i, _| {
        let s = m3 * (f[i / (n * n)] * f[(i / n) % n] * f[i % n]);
        for c in band.iter_mut() {
            c[i] *= s;
        }
    });
    band
}

/// The reference for [`blob_band_spectrum`] by direct f64 sums, O(N·n³): in the same layout,
/// mode q = V⁻¹ e^{−|q|²σ²/2} Σ_p α_p e^{−iq·(x_p + π)}, a Nyquist component the sum of ±n/2.
pub fn direct_band_spectrum(
    x: &[[f64; 3]],
    alpha: &[[f64; 3]],
    sigma: f64,
    n: usize,
) -> [Vec<Complex64>; 3] {
    let axis = |d: usize| -> Vec<f64> {
        if n.is_multiple_of(2) && d == n / 2 {
            vec![d as f64, -(d as f64)]
        } else {
            vec![signed_wavenumber(d, n)]
        }
    };
    let mut out: [Vec<Complex64>; 3] =
        std::array::from_fn(|_| vec![Complex64::new(0.0, 0.0); n * n * n]);
    for_each_lattice_mode(n, |i, _| {
        for &qx in &axis(i / (n * n)) {
            for &qy in &axis((i / n) % n) {
                for &qz in &axis(i % n) {
                    let q = [qx, qy, qz];
                    let q2 = qx * qx + qy * qy + qz * qz;
                    let g = (-0.5 * q2 * sigma * sigma).exp() / TAU.powi(3);
                    for (xp, a) in x.iter().zip(alpha) {
                        let phase = -(0..3).map(|d| q[d] * (xp[d] + PI)).sum::<f64>();
                        let e = Complex64::from_polar(g, phase);
                        for c in 0..3 {
                            out[c][i] += e * a[c];
                        }
                    }
                }
            }
        }
    });
    out
}

/// Step 1 of the module docs: α spread onto the M³ mesh with the window (`[i][j][k]` order).
/// In parallel over slabs of x planes, each slab summing the particles that reach it in their
/// index order: every node takes its terms in particle order whatever the thread count, so the
/// mesh is the same to the bit for any number of threads (and equal to a particle-by-particle
/// scatter).
pub fn spread(x: &[[f64; 3]], alpha: &[[f64; 3]], plan: &ModesPlan) -> Vec<[f64; 3]> {
    let (m, kb) = (plan.mesh(), plan.window);
    let half = 0.5 * kb.w as f64;
    // The nodes a particle at mesh coordinate p reaches along an axis, |i − p| ≤ w/2 (unwrapped
    // first index, count), and their (wrapped index, weight).
    let reach = |p: f64| -> (i64, usize) {
        let (first, last) = ((p - half).ceil() as i64, (p + half).floor() as i64);
        (first, (last - first + 1) as usize)
    };
    let axis = |p: f64, row: &mut Vec<(usize, f64)>| {
        let (first, count) = reach(p);
        row.clear();
        row.extend(
            (first..first + count as i64)
                .map(|i| (i.rem_euclid(m as i64) as usize, kb.weight(i as f64 - p))),
        );
    };
    let pos: Vec<[f64; 3]> = x
        .par_iter()
        .map(|p| std::array::from_fn(|d| mesh_coordinate(p[d], m)))
        .collect();
    // Slabs of `per` x planes; each lists, in index order, the particles reaching one of them.
    let per = m.div_ceil(m.min(4 * rayon::current_num_threads()).max(1));
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); m.div_ceil(per)];
    for (q, p) in pos.iter().enumerate() {
        let (first, count) = reach(p[0]);
        for i in first..first + count as i64 {
            let list = &mut members[i.rem_euclid(m as i64) as usize / per];
            if list.last() != Some(&(q as u32)) {
                list.push(q as u32);
            }
        }
    }
    let mut field = vec![[0.0f64; 3]; m * m * m];
    field
        .par_chunks_mut(per * m * m)
        .zip(members.par_iter())
        .enumerate()
        .for_each(|(s, (slab, list))| {
            let planes = s * per..s * per + slab.len() / (m * m);
            let (mut wx, mut wy, mut wz) = (Vec::new(), Vec::new(), Vec::new());
            for &q in list {
                let (p, a) = (pos[q as usize], alpha[q as usize]);
                axis(p[0], &mut wx);
                axis(p[1], &mut wy);
                axis(p[2], &mut wz);
                for &(i, fx) in wx.iter().filter(|(i, _)| planes.contains(i)) {
                    let plane = &mut slab[(i - planes.start) * m * m..][..m * m];
                    for &(j, fy) in &wy {
                        let fxy = fx * fy;
                        for &(k, fz) in &wz {
                            let f = fxy * fz;
                            let node = &mut plane[j * m + k];
                            for c in 0..3 {
                                node[c] += a[c] * f;
                            }
                        }
                    }
                }
            }
        });
    field
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A lattice of n³ particles moved by up to 0.45h, random strengths.
    fn moved_lattice(n: usize, seed: u64) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let h = TAU / n as f64;
        let mut x = super::super::lattice_nodes(n);
        for p in x.iter_mut() {
            for c in p.iter_mut() {
                *c += rng.random_range(-0.45..0.45) * h;
            }
        }
        // A particle beyond the box, wrapped by the spread.
        x[0][1] += 2.0 * TAU;
        let alpha = (0..x.len())
            .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
            .collect();
        (x, alpha)
    }

    fn rms(v: &[Vec<Complex64>; 3]) -> f64 {
        let s: f64 = v.iter().flatten().map(|z| z.norm_sqr()).sum();
        (s / v[0].len() as f64).sqrt()
    }

    #[test]
    fn window_rule_meets_the_tolerance_with_the_smallest_width() {
        // (n, overlap) → (mesh, width): u = 1.5 for the runs' lattices.
        for (n, overlap, mesh, width) in [
            (256, 0.75, 384, 12),
            (256, 1.0, 384, 14),
            (48, 0.75, 72, 12),
            (64, 1.0, 96, 14),
            // Tiny lattices: the GPU's sweep needs a larger mesh.
            (8, 0.75, 24, 9),
        ] {
            let sigma0 = overlap * TAU / n as f64;
            let plan = ModesPlan::new(n, sigma0).unwrap();
            assert_eq!(
                (plan.mesh(), plan.window.w),
                (mesh, width),
                "n = {n}, overlap {overlap}"
            );
            let tol = axis_tolerance(n, sigma0);
            assert!(plan.window.aliasing(n / 2) <= tol);
            let narrower = band_window(width - 1, mesh, n);
            assert!(narrower.aliasing(n / 2) > tol, "n = {n}: w − 1 would do");
            assert!(sweep(width).1 * CELL <= mesh);
        }
        // The amplification of the issue: 139 at σ0 = h, 16 at 0.75h.
        assert!((amplification(256, TAU / 256.0) - 139.0).abs() < 0.1);
        assert!((amplification(256, 0.75 * TAU / 256.0) - 16.05).abs() < 0.01);
        // Wide cores ask for the floor and a finer mesh; beyond it, a clear refusal.
        let sigma_wide = 1.5 * TAU / 64.0;
        let wide = ModesPlan::new(64, sigma_wide).unwrap();
        eprintln!("overlap 1.5: mesh {}, w = {}", wide.mesh(), wide.window.w);
        assert!(wide.mesh() > 96 && wide.window.aliasing(32) <= axis_tolerance(64, sigma_wide));
        let err = ModesPlan::new(64, 3.0 * TAU / 64.0);
        assert!(err.is_ok() || err.unwrap_err().to_string().contains("no Kaiser–Bessel"));
    }

    #[test]
    fn sweep_covers_every_particle_reaching_a_tile() {
        for w in MIN_WIDTH..=MAX_WIDTH {
            let (lo, span) = sweep(w);
            let half = 0.5 * w as f64;
            // Particles at p (tile at t0 = 0, cells of C nodes) just inside the reach.
            for p in [-half + 1e-9, (TILE - 1) as f64 + half - 1e-9] {
                let cell = (p / CELL as f64).floor() as i64;
                assert!(
                    cell >= lo && cell < lo + span as i64,
                    "w = {w}: p = {p} in cell {cell}, sweep {lo}..+{span}"
                );
            }
        }
    }

    #[test]
    fn band_modes_match_the_direct_sum() {
        for (n, overlap, grown) in [(16usize, 0.75, 1.3), (15, 1.0, 1.0)] {
            let h = TAU / n as f64;
            let sigma0 = overlap * h;
            let (x, alpha) = moved_lattice(n, 11 + n as u64);
            let sigma = grown * sigma0;
            let plan = ModesPlan::new(n, sigma0).unwrap();
            let nufft = blob_band_spectrum(&x, &alpha, sigma, &plan);
            let exact = direct_band_spectrum(&x, &alpha, sigma, n);
            let scale = rms(&exact);
            let mut worst = 0.0f64;
            for c in 0..3 {
                for (a, b) in nufft[c].iter().zip(&exact[c]) {
                    worst = worst.max((a - b).norm());
                }
            }
            // The error each mode meets in the RBF solve: relative to the rms, times the
            // amplification.
            let amp = amplification(n, sigma0);
            eprintln!(
                "n = {n}, overlap {overlap}, σ = {grown}σ0: mesh {}, w = {}, max mode error \
                 {:.2e} of the rms, × amplification {amp:.0} = {:.2e}",
                plan.mesh(),
                plan.window.w,
                worst / scale,
                amp * worst / scale
            );
            assert!(amp * worst / scale < VORTICITY_TOLERANCE, "{worst:e}");
            assert!(worst / scale < 1e-8);
        }
    }

    /// The GPU's gather (kernels/lattice_modes.cu: cells, stable sort, sweep of `lm_spread`)
    /// emulated on the host, node by node.
    fn gather_like_the_gpu(x: &[[f64; 3]], alpha: &[[f64; 3]], plan: &ModesPlan) -> Vec<[f64; 3]> {
        let (m, kb) = (plan.mesh(), plan.window);
        let cells = m / CELL;
        let cell = |p: f64| ((p / CELL as f64) as usize).min(cells - 1);
        let pos: Vec<[f64; 3]> = x
            .iter()
            .map(|p| std::array::from_fn(|d| mesh_coordinate(p[d], m)))
            .collect();
        let key = |p: &[f64; 3]| (cell(p[0]) * cells + cell(p[1])) * cells + cell(p[2]);
        let mut order: Vec<usize> = (0..x.len()).collect();
        order.sort_by_key(|&i| key(&pos[i])); // stable
        let mut starts = vec![0usize; cells.pow(3) + 1];
        for p in &pos {
            starts[key(p) + 1] += 1;
        }
        for c in 0..cells.pow(3) {
            starts[c + 1] += starts[c];
        }
        let (lo, span) = sweep(kb.w);
        let wrap = |c: i64| c.rem_euclid(cells as i64) as usize;
        let per = (TILE / CELL) as i64;
        let tiles = m / TILE;
        let mut field = vec![[0.0f64; 3]; m * m * m];
        let weight = |node: usize, p: f64| {
            let mut d = node as f64 - p;
            d -= m as f64 * ((d + 0.5 * m as f64) / m as f64).floor();
            kb.weight(d)
        };
        for b in 0..tiles.pow(3) {
            let bt = [b / (tiles * tiles), (b / tiles) % tiles, b % tiles];
            let mut visited = vec![false; x.len()];
            for ox in 0..span as i64 {
                for oy in 0..span as i64 {
                    for oz in 0..span as i64 {
                        let c = [
                            wrap(per * bt[0] as i64 + lo + ox),
                            wrap(per * bt[1] as i64 + lo + oy),
                            wrap(per * bt[2] as i64 + lo + oz),
                        ];
                        let row = (c[0] * cells + c[1]) * cells + c[2];
                        for &q in &order[starts[row]..starts[row + 1]] {
                            assert!(!visited[q], "particle {q} visited twice by tile {b}");
                            visited[q] = true;
                            let w: [[f64; TILE]; 3] = std::array::from_fn(|d| {
                                std::array::from_fn(|l| weight(TILE * bt[d] + l, pos[q][d]))
                            });
                            for l in 0..TILE.pow(3) {
                                let (i, j, k) = (l / (TILE * TILE), (l / TILE) % TILE, l % TILE);
                                let f = w[0][i] * w[1][j] * w[2][k];
                                let node = [TILE * bt[0] + i, TILE * bt[1] + j, TILE * bt[2] + k];
                                let out = &mut field[(node[0] * m + node[1]) * m + node[2]];
                                for c in 0..3 {
                                    out[c] += alpha[q][c] * f;
                                }
                            }
                        }
                    }
                }
            }
        }
        field
    }

    #[test]
    fn the_gpus_gather_order_gives_the_spread() {
        // Smallest meshes (the sweep wraps around the mesh) and a larger one.
        for (n, overlap) in [(8usize, 0.75), (16, 1.0)] {
            let (x, alpha) = moved_lattice(n, 5 + n as u64);
            let plan = ModesPlan::new(n, overlap * TAU / n as f64).unwrap();
            let scatter = spread(&x, &alpha, &plan);
            let gather = gather_like_the_gpu(&x, &alpha, &plan);
            let scale = scatter.iter().flatten().fold(0.0f64, |a, v| a.max(v.abs()));
            let worst = scatter
                .iter()
                .flatten()
                .zip(gather.iter().flatten())
                .fold(0.0f64, |a, (s, g)| a.max((s - g).abs()));
            assert!(
                worst <= 1e-13 * scale,
                "n = {n} (mesh {}, w = {}): {worst:e} of {scale:e}",
                plan.mesh(),
                plan.window.w
            );
        }
    }

    #[test]
    fn band_modes_are_the_same_to_the_bit_for_any_thread_count() {
        // 1 thread (4 slabs of x planes) against 2 and 3 (8 and 12 slabs): every node sums
        // its particles in index order.
        let n = 16;
        let (x, alpha) = moved_lattice(n, 21);
        let plan = ModesPlan::new(n, 0.75 * TAU / n as f64).unwrap();
        let run = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| blob_band_spectrum(&x, &alpha, 1.1 * TAU / n as f64, &plan))
        };
        let bits = |b: &[Vec<Complex64>; 3]| -> Vec<u64> {
            b.iter()
                .flatten()
                .flat_map(|z| [z.re.to_bits(), z.im.to_bits()])
                .collect()
        };
        let one = bits(&run(1));
        for threads in [2, 3] {
            assert!(one == bits(&run(threads)), "{threads} threads differ");
        }
    }

    #[test]
    fn band_modes_reach_round_off_with_a_wide_window() {
        // The algorithm itself, apart from the rule: w = 16 on M = 2n.
        let n = 12;
        let (x, alpha) = moved_lattice(n, 3);
        let sigma = 0.8 * TAU / n as f64;
        let plan = ModesPlan {
            n,
            window: band_window(16, 2 * n, n),
        };
        let nufft = blob_band_spectrum(&x, &alpha, sigma, &plan);
        let exact = direct_band_spectrum(&x, &alpha, sigma, n);
        let scale = rms(&exact);
        let worst = (0..3)
            .flat_map(|c| nufft[c].iter().zip(&exact[c]).map(|(a, b)| (a - b).norm()))
            .fold(0.0f64, f64::max);
        eprintln!(
            "w = 16, u = 2: max mode error {:.2e} of the rms",
            worst / scale
        );
        assert!(worst / scale < 1e-10, "{:e}", worst / scale);
    }
}
