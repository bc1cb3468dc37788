//! Solid-harmonic expansions of the Laplace kernel 1/|x − y| and their translation operators
//! (docs/physics.md §8): P2M, M2M, M2L, L2L and L2P, each in one named function, f64.
//!
//! # Normalisation
//!
//! With spherical coordinates (r, θ, φ) of x and P_n^m the associated Legendre functions with the
//! Condon–Shortley phase, the scaled regular and irregular solid harmonics are
//!
//! ```text
//! R_n^m(x) = r^n P_n^m(cos θ) e^{imφ} / (n+m)!        I_n^m(x) = (n−m)! P_n^m(cos θ) e^{imφ} / r^{n+1}
//! ```
//!
//! (Epton & Dembart, SIAM J. Sci. Comput. 16 (1995)). Both satisfy X_n^{−m} = (−1)^m conj(X_n^m),
//! so only m ≥ 0 is stored, at index n(n+1)/2 + m. They follow from the recurrences
//!
//! ```text
//! R_0^0 = 1,   R_m^m = −(x+iy)/(2m) R_{m−1}^{m−1},   R_n^m = ((2n−1) z R_{n−1}^m − r² R_{n−2}^m)/((n+m)(n−m))
//! I_0^0 = 1/r, I_m^m = −(2m−1)(x+iy)/r² I_{m−1}^{m−1}, I_n^m = ((2n−1) z I_{n−1}^m − ((n−1)² − m²) I_{n−2}^m)/r²
//! ```
//!
//! and give the three identities the operators are built on (tested in this module):
//!
//! ```text
//! 1/|x − y| = Σ_{n,m} conj(R_n^m(y)) I_n^m(x)                          (|y| < |x|)
//! R_n^m(a + b) = Σ_{j ≤ n, k} R_j^k(a) R_{n−j}^{m−k}(b)                  (regular addition)
//! I_j^k(b − a) = Σ_{n,m} conj(R_n^m(a)) I_{j+n}^{k+m}(b)                 (|a| < |b|)
//! ```
//!
//! so that, for charges q at y around a centre c, with M_n^m = Σ q conj(R_n^m(y − c)) (P2M):
//!
//! ```text
//! M2M (c → c'):  M'_n^m = Σ_{j,k} M_j^k conj(R_{n−j}^{m−k}(c − c'))
//! M2L (c → c_L): L_n^m  = (−1)^{n+m} Σ_{j,k} M_j^k I_{j+n}^{k−m}(c_L − c)
//! L2L (c → c'):  L'_n^m = Σ_{j ≥ n, k} L_j^k R_{j−n}^{k−m}(c' − c)
//! potential      φ(x)   = Σ_{n,m} M_n^m I_n^m(x − c) = Σ_{n,m} L_n^m R_n^m(x − c_L)
//! ```
//!
//! L2P is L2L to the point itself keeping n ≤ 2: L'_0^0 is φ, the n = 1 terms its gradient and
//! the n = 2 terms its Hessian (see [`l2p`]). Expansions of the K potentials of one
//! interaction (K charges per source, [`crate::summation::interaction::PairInteraction`]: the
//! three components of the vortex strengths, docs/physics.md §8, or the mass) are stored
//! together, coefficient-major: `coef[K * index(n, m) + component]`; every operator is generic
//! in K.

// The operators index three components and (n, m) tables side by side; index loops read like
// the equations.
#![allow(clippy::needless_range_loop)]

use num_complex::Complex64 as C64;

/// Number of stored coefficients (m ≥ 0) of an expansion of order p: (p+1)(p+2)/2.
#[inline]
pub const fn coefficient_count(p: usize) -> usize {
    (p + 1) * (p + 2) / 2
}

/// Storage index of (n, m), 0 ≤ m ≤ n.
#[inline(always)]
pub const fn index(n: usize, m: usize) -> usize {
    n * (n + 1) / 2 + m
}

/// X_n^m for any −n ≤ m ≤ n from the stored m ≥ 0 half: X_n^{−m} = (−1)^m conj(X_n^m).
#[inline(always)]
fn signed(table: &[C64], n: usize, m: isize) -> C64 {
    if m >= 0 {
        table[index(n, m as usize)]
    } else {
        let v = table[index(n, (-m) as usize)].conj();
        if m & 1 == 1 {
            -v
        } else {
            v
        }
    }
}

/// The same for a K-component expansion, component `c`.
#[inline(always)]
fn signed_k<const K: usize>(coef: &[C64], n: usize, m: isize, c: usize) -> C64 {
    if m >= 0 {
        coef[K * index(n, m as usize) + c]
    } else {
        let v = coef[K * index(n, (-m) as usize) + c].conj();
        if m & 1 == 1 {
            -v
        } else {
            v
        }
    }
}

/// R_n^m(x) for n ≤ p, m ≥ 0, into `out` (length ≥ [`coefficient_count`]`(p)`).
pub fn regular_harmonics(x: [f64; 3], p: usize, out: &mut [C64]) {
    let xy = C64::new(x[0], x[1]);
    let z = x[2];
    let r2 = x[0] * x[0] + x[1] * x[1] + z * z;
    let mut diag = C64::new(1.0, 0.0);
    for m in 0..=p {
        if m > 0 {
            diag = -xy * diag / (2 * m) as f64;
        }
        out[index(m, m)] = diag;
        if m < p {
            out[index(m + 1, m)] = diag * z;
        }
        for n in m + 2..=p {
            let a = out[index(n - 1, m)] * ((2 * n - 1) as f64 * z);
            let b = out[index(n - 2, m)] * r2;
            out[index(n, m)] = (a - b) / ((n + m) * (n - m)) as f64;
        }
    }
}

/// I_n^m(x) for n ≤ p, m ≥ 0, into `out` (length ≥ [`coefficient_count`]`(p)`); x ≠ 0.
pub fn irregular_harmonics(x: [f64; 3], p: usize, out: &mut [C64]) {
    let xy = C64::new(x[0], x[1]);
    let z = x[2];
    let r2 = x[0] * x[0] + x[1] * x[1] + z * z;
    let inv_r2 = 1.0 / r2;
    let mut diag = C64::new(inv_r2.sqrt(), 0.0);
    for m in 0..=p {
        if m > 0 {
            diag = -xy * diag * ((2 * m - 1) as f64 * inv_r2);
        }
        out[index(m, m)] = diag;
        if m < p {
            out[index(m + 1, m)] = diag * ((2 * m + 1) as f64 * z * inv_r2);
        }
        for n in m + 2..=p {
            let a = out[index(n - 1, m)] * ((2 * n - 1) as f64 * z);
            let b = out[index(n - 2, m)] * (((n - 1) * (n - 1) - m * m) as f64);
            out[index(n, m)] = (a - b) * inv_r2;
        }
    }
}

/// Scratch space for the operators (harmonic tables up to order 2p), reused between calls.
#[derive(Debug, Clone)]
pub struct Workspace {
    p: usize,
    table: Vec<C64>,
}

impl Workspace {
    pub fn new(p: usize) -> Self {
        Self {
            p,
            table: vec![C64::new(0.0, 0.0); coefficient_count(2 * p)],
        }
    }
}

/// P2M: adds to the multipole expansion `m` (order p, centre c) the charges `q` (K
/// components) at `y`: M_n^m += q conj(R_n^m(y − c)).
pub fn p2m<const K: usize>(
    ws: &mut Workspace,
    c: [f64; 3],
    y: &[[f64; 3]],
    q: &[[f64; K]],
    m: &mut [C64],
) {
    let p = ws.p;
    for (yi, qi) in y.iter().zip(q) {
        regular_harmonics([yi[0] - c[0], yi[1] - c[1], yi[2] - c[2]], p, &mut ws.table);
        for i in 0..coefficient_count(p) {
            let r = ws.table[i].conj();
            for k in 0..K {
                m[K * i + k] += r * qi[k];
            }
        }
    }
}

/// M2M: adds to the parent's multipole expansion `parent` (centre c') the child's `child`
/// (centre c): M'_n^m += Σ_{j,k} M_j^k conj(R_{n−j}^{m−k}(c − c')).
pub fn m2m<const K: usize>(
    ws: &mut Workspace,
    child_to_parent: [f64; 3],
    child: &[C64],
    parent: &mut [C64],
) {
    let d = child_to_parent;
    regular_harmonics([-d[0], -d[1], -d[2]], ws.p, &mut ws.table);
    m2m_table::<K>(ws.p, &ws.table, child, parent);
}

/// M2M (order p) with the regular harmonics R(c − c') of the child's centre c seen from the
/// parent's c' already in `r` (order ≥ p). M2M is linear in the table, so the M2Ms of equal
/// children at several centres are one M2M with the sum of their tables (the supercells of
/// [`super::periodic`]).
pub fn m2m_table<const K: usize>(p: usize, r: &[C64], child: &[C64], parent: &mut [C64]) {
    for n in 0..=p {
        for m in 0..=n as isize {
            let mut acc = [C64::new(0.0, 0.0); K];
            for j in 0..=n {
                let nj = (n - j) as isize;
                let k_lo = (-(j as isize)).max(m - nj);
                let k_hi = (j as isize).min(m + nj);
                for k in k_lo..=k_hi {
                    let t = signed(r, n - j, m - k).conj();
                    for c in 0..K {
                        acc[c] += signed_k::<K>(child, j, k, c) * t;
                    }
                }
            }
            let i = index(n, m as usize);
            for c in 0..K {
                parent[K * i + c] += acc[c];
            }
        }
    }
}

/// M2L: adds to the local expansion `local` (centre c_L) the field of the multipole expansion
/// `multipole` (centre c), with `b` = c_L − c:
/// L_n^m += (−1)^{n+m} Σ_{j,k} M_j^k I_{j+n}^{k−m}(b).
pub fn m2l<const K: usize>(ws: &mut Workspace, b: [f64; 3], multipole: &[C64], local: &mut [C64]) {
    irregular_harmonics(b, 2 * ws.p, &mut ws.table);
    m2l_table::<K>(ws.p, &ws.table, multipole, local);
}

/// M2L (order p) with the irregular harmonics I(b) already in `t` (order ≥ 2p). M2L is linear
/// in the table, so the M2Ls of one multipole expansion placed at several centres are one M2L
/// with the sum of their tables (the lattice sums of [`super::periodic`]).
pub fn m2l_table<const K: usize>(p: usize, t: &[C64], multipole: &[C64], local: &mut [C64]) {
    for n in 0..=p {
        for m in 0..=n as isize {
            let mut acc = [C64::new(0.0, 0.0); K];
            for j in 0..=p {
                for k in -(j as isize)..=j as isize {
                    let h = signed(t, j + n, k - m);
                    for c in 0..K {
                        acc[c] += signed_k::<K>(multipole, j, k, c) * h;
                    }
                }
            }
            let sign = if (n as isize + m) & 1 == 1 { -1.0 } else { 1.0 };
            let i = index(n, m as usize);
            for c in 0..K {
                local[K * i + c] += acc[c] * sign;
            }
        }
    }
}

/// L2L: adds to the child's local expansion `child` (centre c') the parent's `parent` (centre
/// c), with `d` = c' − c: L'_n^m += Σ_{j ≥ n, k} L_j^k R_{j−n}^{k−m}(d).
pub fn l2l<const K: usize>(ws: &mut Workspace, d: [f64; 3], parent: &[C64], child: &mut [C64]) {
    let p = ws.p;
    regular_harmonics(d, p, &mut ws.table);
    for n in 0..=p {
        for m in 0..=n {
            let acc = shifted_local::<K>(&ws.table, p, parent, n, m);
            let i = index(n, m);
            for (c, a) in acc.iter().enumerate() {
                child[K * i + c] += a;
            }
        }
    }
}

/// One coefficient of a shifted local expansion: Σ_{j ≥ n, k} L_j^k R_{j−n}^{k−m}(d), the
/// regular harmonics of d in `r` (the sum of [`l2l`] and [`l2p`]).
fn shifted_local<const K: usize>(
    r: &[C64],
    p: usize,
    local: &[C64],
    n: usize,
    m: usize,
) -> [C64; K] {
    let m = m as isize;
    let mut acc = [C64::new(0.0, 0.0); K];
    for j in n..=p {
        let jn = (j - n) as isize;
        let k_lo = (-(j as isize)).max(m - jn);
        let k_hi = (j as isize).min(m + jn);
        for k in k_lo..=k_hi {
            let t = signed(r, j - n, k - m);
            for c in 0..K {
                acc[c] += signed_k::<K>(local, j, k, c) * t;
            }
        }
    }
    acc
}

pub use crate::summation::interaction::PotentialDerivatives;

/// L2P: the derivatives of orders `lo..=hi` (0: the potential, 1: the gradient, 2: the Hessian;
/// hi ≤ 2) of the K potentials at the point c_L + d, from the local expansion `local` (centre
/// c_L); the other orders are left zero.
///
/// The expansion is shifted to the point (L2L with outputs n ≤ 2). With L_1^1 = a + ib and
/// L_2^2 = c + id there, R_1^0 = z, R_1^1 = −(x+iy)/2, R_2^0 = (3z² − r²)/4, R_2^1 = −z(x+iy)/2
/// and R_2^2 = (x+iy)²/8 give φ = L_0^0, ∇φ = (−a, b, L_1^0) and the Hessian
/// H_xx = (c − L_2^0)/2, H_yy = −(c + L_2^0)/2, H_zz = L_2^0, H_xy = −d/2, H_xz = −Re L_2^1,
/// H_yz = Im L_2^1 (the m < 0 terms are the conjugates, so each m > 0 term counts twice).
pub fn l2p<const K: usize>(
    ws: &mut Workspace,
    d: [f64; 3],
    local: &[C64],
    (lo, hi): (usize, usize),
) -> [PotentialDerivatives; K] {
    let p = ws.p;
    regular_harmonics(d, p, &mut ws.table);
    // Shifted coefficients L'_n^m for lo ≤ n ≤ hi, m ≥ 0.
    let mut shifted = [[C64::new(0.0, 0.0); K]; 6];
    for n in lo..=hi.min(2) {
        for m in 0..=n {
            shifted[index(n, m)] = shifted_local::<K>(&ws.table, p, local, n, m);
        }
    }
    let mut out = [PotentialDerivatives::default(); K];
    for c in 0..K {
        if lo == 0 {
            out[c].potential = shifted[index(0, 0)][c].re;
        }
        if lo <= 1 && hi >= 1 {
            let l10 = shifted[index(1, 0)][c].re;
            let l11 = shifted[index(1, 1)][c];
            out[c].gradient = [-l11.re, l11.im, l10];
        }
        if hi >= 2 {
            let l20 = shifted[index(2, 0)][c].re;
            let l21 = shifted[index(2, 1)][c];
            let l22 = shifted[index(2, 2)][c];
            let (hxx, hyy, hzz) = ((l22.re - l20) / 2.0, -(l22.re + l20) / 2.0, l20);
            let (hxy, hxz, hyz) = (-l22.im / 2.0, -l21.re, l21.im);
            out[c].hessian = [[hxx, hxy, hxz], [hxy, hyy, hyz], [hxz, hyz, hzz]];
        }
    }
    out
}

/// Σ_{n,m} X_n^m H_n^m of K expansions X against the table H already in `ws`.
fn contract<const K: usize>(ws: &Workspace, coef: &[C64]) -> [f64; K] {
    let mut out = [0.0; K];
    for n in 0..=ws.p {
        for m in -(n as isize)..=n as isize {
            let h = signed(&ws.table, n, m);
            for (c, o) in out.iter_mut().enumerate() {
                *o += (signed_k::<K>(coef, n, m, c) * h).re;
            }
        }
    }
    out
}

/// Potentials Σ_n,m M_n^m I_n^m(x − c) of a multipole expansion at a point (for tests and checks).
pub fn m2p_potential<const K: usize>(
    ws: &mut Workspace,
    d: [f64; 3],
    multipole: &[C64],
) -> [f64; K] {
    irregular_harmonics(d, ws.p, &mut ws.table);
    contract::<K>(ws, multipole)
}

/// Potentials Σ_n,m L_n^m R_n^m(x − c_L) of a local expansion at a point (for tests).
pub fn l2p_potential<const K: usize>(ws: &mut Workspace, d: [f64; 3], local: &[C64]) -> [f64; K] {
    regular_harmonics(d, ws.p, &mut ws.table);
    contract::<K>(ws, local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn zeros(p: usize) -> Vec<C64> {
        vec![C64::new(0.0, 0.0); 3 * coefficient_count(p)]
    }

    fn random_cloud(rng: &mut impl Rng, n: usize, c: [f64; 3], a: f64) -> Vec<[f64; 3]> {
        (0..n)
            .map(|_| [0, 1, 2].map(|i| c[i] + a * (2.0 * rng.random::<f64>() - 1.0)))
            .collect()
    }

    fn direct(x: [f64; 3], y: &[[f64; 3]], q: &[[f64; 3]]) -> [PotentialDerivatives; 3] {
        // Potential 1/|x − y|: gradient −r/r³, Hessian (3 r_i r_j − r² δ_ij)/r⁵.
        let mut out = [PotentialDerivatives::default(); 3];
        for (yi, qi) in y.iter().zip(q) {
            let r = [x[0] - yi[0], x[1] - yi[1], x[2] - yi[2]];
            let r2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
            let inv = 1.0 / r2.sqrt();
            let inv3 = inv / r2;
            let inv5 = inv3 / r2;
            for c in 0..3 {
                for i in 0..3 {
                    out[c].gradient[i] -= qi[c] * r[i] * inv3;
                    for j in 0..3 {
                        let delta = if i == j { r2 } else { 0.0 };
                        out[c].hessian[i][j] += qi[c] * (3.0 * r[i] * r[j] - delta) * inv5;
                    }
                }
            }
        }
        out
    }

    fn direct_potential(x: [f64; 3], y: &[[f64; 3]], q: &[[f64; 3]]) -> [f64; 3] {
        let mut out = [0.0; 3];
        for (yi, qi) in y.iter().zip(q) {
            let r =
                ((x[0] - yi[0]).powi(2) + (x[1] - yi[1]).powi(2) + (x[2] - yi[2]).powi(2)).sqrt();
            for c in 0..3 {
                out[c] += qi[c] / r;
            }
        }
        out
    }

    #[test]
    fn harmonics_match_legendre_closed_forms() {
        // R_2^0 = (3z² − r²)/4, R_2^2 = (x+iy)²/8, I_1^1 = −(x+iy)/r³, I_2^0 = (3z² − r²)/r⁵.
        let x = [0.3, -0.7, 0.5];
        let r2: f64 = x.iter().map(|v| v * v).sum();
        let mut t = vec![C64::new(0.0, 0.0); coefficient_count(4)];
        regular_harmonics(x, 4, &mut t);
        let xy = C64::new(x[0], x[1]);
        assert!((t[index(2, 0)].re - (3.0 * x[2] * x[2] - r2) / 4.0).abs() < 1e-15);
        assert!((t[index(2, 2)] - xy * xy / 8.0).norm() < 1e-15);
        irregular_harmonics(x, 4, &mut t);
        let r = r2.sqrt();
        assert!((t[index(1, 1)] + xy / (r2 * r)).norm() < 1e-14);
        assert!((t[index(2, 0)].re - (3.0 * x[2] * x[2] - r2) / (r2 * r2 * r)).abs() < 1e-14);
    }

    #[test]
    fn multipole_and_local_expansions_converge_to_the_direct_potential() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let c = [0.1, -0.2, 0.3];
        let y = random_cloud(&mut rng, 20, c, 0.5);
        let q: Vec<[f64; 3]> = (0..20)
            .map(|_| [0, 1, 2].map(|_| rng.random::<f64>() - 0.5))
            .collect();
        let x = [3.0, 1.5, -2.0];
        let want = direct_potential(x, &y, &q);
        let mut last = f64::INFINITY;
        for p in [4, 8, 12, 16] {
            let mut ws = Workspace::new(p);
            let mut m = zeros(p);
            p2m(&mut ws, c, &y, &q, &mut m);
            let got = m2p_potential::<3>(&mut ws, [x[0] - c[0], x[1] - c[1], x[2] - c[2]], &m);
            let err = (0..3).map(|k| (got[k] - want[k]).abs()).fold(0.0, f64::max);
            assert!(err < last, "p = {p}: error {err} not below {last}");
            last = err;
        }
        assert!(last < 1e-9, "{last}");
    }

    /// P2M, M2M, M2L, L2L and L2P chained against direct derivatives; the error falls with p.
    #[test]
    fn operator_chain_matches_direct_derivatives() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let child = [0.25, -0.25, 0.25];
        let parent = [0.0, 0.0, 0.0];
        let y = random_cloud(&mut rng, 30, child, 0.25);
        let q: Vec<[f64; 3]> = (0..30)
            .map(|_| [0, 1, 2].map(|_| rng.random::<f64>() - 0.5))
            .collect();
        let target_parent = [4.0, 1.0, -1.0];
        let target_child = [4.25, 0.75, -0.75];
        let x = [4.4, 0.6, -0.9];
        let want = direct(x, &y, &q);
        let scale = want
            .iter()
            .flat_map(|w| w.hessian.into_iter().flatten())
            .fold(0.0f64, |a, v| a.max(v.abs()));
        let gscale = want
            .iter()
            .flat_map(|w| w.gradient)
            .fold(0.0f64, |a, v| a.max(v.abs()));
        let mut last = (f64::INFINITY, f64::INFINITY);
        for p in [4, 8, 12, 16, 20] {
            let mut ws = Workspace::new(p);
            let mut mc = zeros(p);
            p2m(&mut ws, child, &y, &q, &mut mc);
            let mut mp = zeros(p);
            let d = [0, 1, 2].map(|i| parent[i] - child[i]);
            m2m::<3>(&mut ws, d, &mc, &mut mp);
            let mut lp = zeros(p);
            m2l::<3>(
                &mut ws,
                [0, 1, 2].map(|i| target_parent[i] - parent[i]),
                &mp,
                &mut lp,
            );
            let mut lc = zeros(p);
            l2l::<3>(
                &mut ws,
                [0, 1, 2].map(|i| target_child[i] - target_parent[i]),
                &lp,
                &mut lc,
            );
            let got: [PotentialDerivatives; 3] = l2p(
                &mut ws,
                [0, 1, 2].map(|i| x[i] - target_child[i]),
                &lc,
                (1, 2),
            );
            let mut eg = 0.0f64;
            let mut eh = 0.0f64;
            for c in 0..3 {
                for i in 0..3 {
                    eg = eg.max((got[c].gradient[i] - want[c].gradient[i]).abs() / gscale);
                    for j in 0..3 {
                        eh = eh.max((got[c].hessian[i][j] - want[c].hessian[i][j]).abs() / scale);
                    }
                }
            }
            assert!(
                eg < last.0 && eh < last.1,
                "p = {p}: {eg:e} {eh:e} after {last:?}"
            );
            last = (eg, eh);
        }
        assert!(last.0 < 1e-10 && last.1 < 1e-9, "{last:?}");
    }

    #[test]
    fn local_potential_after_m2l_matches_direct() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let c = [0.0, 0.0, 0.0];
        let y = random_cloud(&mut rng, 10, c, 0.5);
        let q: Vec<[f64; 3]> = (0..10).map(|_| [1.0, -0.5, 0.25]).collect();
        let cl = [-2.0, 3.0, 1.0];
        let x = [-2.3, 3.2, 0.8];
        let p = 18;
        let mut ws = Workspace::new(p);
        let mut m = zeros(p);
        p2m(&mut ws, c, &y, &q, &mut m);
        let mut l = zeros(p);
        m2l::<3>(&mut ws, cl, &m, &mut l);
        let got = l2p_potential::<3>(&mut ws, [x[0] - cl[0], x[1] - cl[1], x[2] - cl[2]], &l);
        let want = direct_potential(x, &y, &q);
        for k in 0..3 {
            assert!(
                (got[k] - want[k]).abs() < 1e-10 * want[k].abs().max(1.0),
                "{got:?} {want:?}"
            );
        }
    }

    /// One charge (the mass): the potential and its gradient from L2P with orders (0, 1), after
    /// P2M and M2L, match the direct sums Σ m/r and Σ −m r/r³.
    #[test]
    fn one_charge_potential_and_gradient_match_direct() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let y = random_cloud(&mut rng, 15, [0.0; 3], 0.5);
        let q: Vec<[f64; 1]> = (0..15).map(|_| [rng.random::<f64>()]).collect();
        let cl = [2.5, -1.0, 2.0];
        let x = [2.7, -1.2, 1.9];
        let p = 20;
        let mut ws = Workspace::new(p);
        let mut m = vec![C64::new(0.0, 0.0); coefficient_count(p)];
        p2m(&mut ws, [0.0; 3], &y, &q, &mut m);
        let mut l = vec![C64::new(0.0, 0.0); coefficient_count(p)];
        m2l::<1>(&mut ws, cl, &m, &mut l);
        let [got] = l2p::<1>(&mut ws, [0, 1, 2].map(|i| x[i] - cl[i]), &l, (0, 1));
        let (mut phi, mut g) = (0.0, [0.0; 3]);
        for (yi, qi) in y.iter().zip(&q) {
            let r = [0, 1, 2].map(|i| x[i] - yi[i]);
            let r2: f64 = r.iter().map(|v| v * v).sum();
            phi += qi[0] / r2.sqrt();
            for i in 0..3 {
                g[i] -= qi[0] * r[i] / (r2 * r2.sqrt());
            }
        }
        assert!(
            (got.potential - phi).abs() < 1e-12 * phi.abs(),
            "{got:?} {phi}"
        );
        for i in 0..3 {
            assert!(
                (got.gradient[i] - g[i]).abs() < 1e-11 * phi.abs(),
                "{got:?} {g:?}"
            );
        }
        assert_eq!(got.hessian, [[0.0; 3]; 3]);
    }
}
