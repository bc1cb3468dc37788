//! Cartesian Taylor expansions of the Plummer-softened kernel Φ(R) = (|R|² + ε²)^{−1/2}: the
//! gravity FMM's operators (docs/physics.md §8.1). Unlike the solid harmonics of
//! [`super::expansions`], which expand the Newtonian 1/r and so must leave every pair the
//! softening still bends to the near field, these expand the softened kernel itself: the near
//! field is only the opening criterion's and the error falls like θ^{p+1} for any ε ≥ 0 (ε = 0 is
//! Newton).
//!
//! **Multi-indices.** Terms n = (n_x, n_y, n_z) of total order |n| ≤ p, listed by order
//! ([`Table`]); n! = n_x! n_y! n_z!, Rⁿ = R_x^{n_x} R_y^{n_y} R_z^{n_z}, ∂ⁿ likewise;
//! w_n(d) = dⁿ/n! are the scaled monomials every operator uses.
//!
//! **Operators** (sources y of mass m about a source centre c_s, targets x = c_t + t):
//!
//! ```text
//! P2M  M_n = Σ m w_n(c_s − y)                        (kernel independent)
//! M2M  M_n(parent) = Σ_{k ≤ n} M_k(child) w_{n−k}(c_parent − c_child)
//! M2L  L_k = Σ_{|n| ≤ p − |k|} M_n D_{n+k}(c_t − c_s),   D_m = ∂^m Φ
//! L2L  L_k(child) = Σ_{j ≥ k} L_j(parent) w_{j−k}(c_child − c_parent)
//! L2P  ψ(x) = Σ_k L_k w_k(t),   ∂_i ψ(x) = Σ_{|k| ≤ p−1} L_{k+e_i} w_k(t)
//! ```
//!
//! from the Taylor series Φ(R + t − s) = Σ_{k,n} D_{n+k}(R) w_k(t) w_n(−s), truncated at
//! |n| + |k| ≤ p, with s = y − c_s: the moments are those of c_s − y, which carries the sign
//! (−1)^{|n|} of the usual M2L into the moments (kernels/fmm_cartesian.cu stores the same). The field is ψ = Σ m Φ(x − y); [`PlummerGravity`]'s potential is φ = −ψ and its
//! acceleration a = −∇φ = ∇ψ. Along any real line the series in h = t − s converges for
//! |h| < (|R|² + ε²)^{1/2} ≥ |R| (the kernel's complex singularities lie at |R + h|² = −ε²), so
//! the criterion r_A + r_B ≤ θ|R| bounds a pair's error by about θ^{p+1} at any softening.
//!
//! **Derivatives.** With s = |R|² + ε², Φ = s^{−1/2} obeys s ∂_iΦ + R_iΦ = 0. ε² is constant, so
//! ∂_j s = 2R_j and ∂_j² s = 2 as for r². Applying ∂^{n−e_i} by Leibniz (for any i with n_i ≥ 1)
//! and collecting the terms of axis i:
//!
//! ```text
//! s D_n = −(2n_i − 1) R_i D_{n−e_i} − (n_i − 1)² D_{n−2e_i}
//!         − Σ_{j≠i} [2 n_j R_j D_{n−e_j} + n_j (n_j − 1) D_{n−2e_j}],      D_0 = s^{−1/2}.
//! ```
//!
//! (Summing it over i with weights n_i gives the symmetric form s D_n = −(2|n| − 1) Σ_i n_i R_i
//! D_{n−e_i} − (|n| − 1) Σ_i n_i (n_i − 1) D_{n−2e_i}, per unit |n|; the tests check both against
//! finite differences and, at ε = 0, the closed forms of 1/r.) Each D_n costs at most six terms,
//! so all derivatives of order ≤ p cost O(p³) per cell pair and the M2L O(p⁶/720) products.

use super::tree::Octree;
use super::{FmmStats, Structure};
use crate::summation::interaction::PlummerGravity;
use rayon::prelude::*;
use std::time::Instant;

/// The highest order the tables are built for (the CPU's planned orders: 22 at its floor, 1e-10).
pub const CARTESIAN_MAX_ORDER: usize = 24;

/// One term of the derivative recurrence: `coef` × (R_axis, or 1 when `axis` is 3) × D_src.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecurrenceTerm {
    pub src: u32,
    pub axis: u8,
    pub coef: f64,
}

/// Multi-index tables of one order p: the terms, how to build their monomials and the kernel's
/// derivatives, and the index lists of the shifts (M2M, L2L) and of the M2L.
#[derive(Debug, Clone)]
pub struct Table {
    /// The order p: terms |n| ≤ p.
    pub order: usize,
    /// The multi-indices, by total order then (n_x descending, n_y descending): n at
    /// [`term_index`].
    pub terms: Vec<[u8; 3]>,
    /// Monomial recurrence: w_n = w_{prev} d_axis / n_axis (term 0 is w_0 = 1).
    pub mono_prev: Vec<u32>,
    pub mono_axis: Vec<u8>,
    pub mono_scale: Vec<f64>,
    /// Derivative recurrence of term n: terms `rec[rec_offsets[n]..rec_offsets[n+1]]`, and
    /// D_n = −(Σ terms) / s.
    pub rec_offsets: Vec<u32>,
    pub rec: Vec<RecurrenceTerm>,
    /// Shifts: triples (n, a, b) with a + b = n (M2M: M_n += M_a w_b; L2L: L_a += L_n w_b),
    /// grouped by n.
    pub shift: Vec<[u32; 3]>,
    /// M2L: for each output k, the indices of n + k in `m2l[m2l_offsets[k]..m2l_offsets[k+1]]`
    /// for the terms n = 0, 1, … of order ≤ p − |k| (a prefix of the term order).
    pub m2l_offsets: Vec<u32>,
    pub m2l: Vec<u32>,
    /// The index of n + e_i per term and axis (u32::MAX beyond order p): the gradient in L2P.
    pub up: Vec<[u32; 3]>,
    lookup: Vec<u32>,
}

/// The index of multi-index (i, j, k) in every [`Table`]: the terms of lower total order d = i +
/// j + k first, then n_x descending, n_y descending: d(d+1)(d+2)/6 + e(e+1)/2 + k with e = j + k
/// (`cart_index` in kernels/fmm_cartesian.cu).
pub fn term_index(i: usize, j: usize, k: usize) -> usize {
    let (d, e) = (i + j + k, j + k);
    d * (d + 1) * (d + 2) / 6 + e * (e + 1) / 2 + k
}

/// The number of terms of total order ≤ p: (p + 1)(p + 2)(p + 3)/6.
pub fn term_count(p: usize) -> usize {
    (p + 1) * (p + 2) * (p + 3) / 6
}

impl Table {
    /// The tables of order `p` (≤ [`CARTESIAN_MAX_ORDER`]).
    pub fn new(p: usize) -> Self {
        assert!(
            p <= CARTESIAN_MAX_ORDER,
            "Cartesian order {p} above the largest"
        );
        let mut terms = Vec::with_capacity(term_count(p));
        for deg in 0..=p {
            for i in (0..=deg).rev() {
                for j in (0..=deg - i).rev() {
                    terms.push([i as u8, j as u8, (deg - i - j) as u8]);
                }
            }
        }
        let side = p + 1;
        let mut lookup = vec![u32::MAX; side * side * side];
        for (t, n) in terms.iter().enumerate() {
            lookup[(n[0] as usize * side + n[1] as usize) * side + n[2] as usize] = t as u32;
        }
        let mut table = Self {
            order: p,
            terms,
            mono_prev: Vec::new(),
            mono_axis: Vec::new(),
            mono_scale: Vec::new(),
            rec_offsets: vec![0],
            rec: Vec::new(),
            shift: Vec::new(),
            m2l_offsets: vec![0],
            m2l: Vec::new(),
            up: Vec::new(),
            lookup,
        };
        table.build_lists();
        table
    }

    /// The index of multi-index `n`, if its order is ≤ p.
    pub fn index(&self, n: [i32; 3]) -> Option<usize> {
        let side = self.order as i32 + 1;
        if n.iter().any(|&c| c < 0) || n[0] + n[1] + n[2] > self.order as i32 {
            return None;
        }
        let i = self.lookup[((n[0] * side + n[1]) * side + n[2]) as usize];
        (i != u32::MAX).then_some(i as usize)
    }

    fn build_lists(&mut self) {
        let at = |t: &Self, n: [i32; 3]| t.index(n).map(|i| i as u32);
        let terms = self.terms.clone();
        for n in &terms {
            let n = n.map(i32::from);
            // Monomials and derivatives run along the first axis with n_i ≥ 1.
            let axis = (0..3).find(|&i| n[i] > 0);
            let (prev, ax, scale) = match axis {
                None => (0, 0, 1.0),
                Some(i) => {
                    let mut m = n;
                    m[i] -= 1;
                    (at(self, m).unwrap(), i as u8, 1.0 / n[i] as f64)
                }
            };
            self.mono_prev.push(prev);
            self.mono_axis.push(ax);
            self.mono_scale.push(scale);
            if let Some(i) = axis {
                for j in 0..3 {
                    let nj = n[j] as f64;
                    let (c1, c2) = if j == i {
                        (2.0 * nj - 1.0, (nj - 1.0) * (nj - 1.0))
                    } else {
                        (2.0 * nj, nj * (nj - 1.0))
                    };
                    for (step, coef, axis) in [(1, c1, j as u8), (2, c2, 3)] {
                        let mut m = n;
                        m[j] -= step;
                        if coef != 0.0 {
                            if let Some(src) = at(self, m) {
                                self.rec.push(RecurrenceTerm { src, axis, coef });
                            }
                        }
                    }
                }
            }
            self.rec_offsets.push(self.rec.len() as u32);
            let ni = at(self, n).unwrap();
            for a in &terms {
                let a = a.map(i32::from);
                let b = [n[0] - a[0], n[1] - a[1], n[2] - a[2]];
                if let (Some(ai), Some(bi)) = (at(self, a), at(self, b)) {
                    self.shift.push([ni, ai, bi]);
                }
            }
            self.up.push([0, 1, 2].map(|i| {
                let mut m = n;
                m[i] += 1;
                at(self, m).unwrap_or(u32::MAX)
            }));
        }
        for k in &terms {
            let k = k.map(i32::from);
            for n in &terms {
                let n = n.map(i32::from);
                let s = [n[0] + k[0], n[1] + k[1], n[2] + k[2]];
                if let Some(si) = at(self, s) {
                    self.m2l.push(si);
                }
            }
            self.m2l_offsets.push(self.m2l.len() as u32);
        }
    }

    pub fn len(&self) -> usize {
        self.terms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// w_n(d) = dⁿ/n! for every term into `w`.
    pub fn monomials(&self, d: [f64; 3], w: &mut [f64]) {
        w[0] = 1.0;
        for t in 1..self.len() {
            w[t] =
                w[self.mono_prev[t] as usize] * d[self.mono_axis[t] as usize] * self.mono_scale[t];
        }
    }

    /// D_n = ∂ⁿ (|R|² + ε²)^{−1/2} at `r` for every term into `d` (`eps2` = ε²; R ≠ 0 when
    /// ε = 0).
    pub fn derivatives(&self, r: [f64; 3], eps2: f64, d: &mut [f64]) {
        let s = r[0] * r[0] + r[1] * r[1] + r[2] * r[2] + eps2;
        let inv_s = 1.0 / s;
        d[0] = inv_s.sqrt();
        let ra = [r[0], r[1], r[2], 1.0];
        for t in 1..self.len() {
            let terms = &self.rec[self.rec_offsets[t] as usize..self.rec_offsets[t + 1] as usize];
            let sum: f64 = terms
                .iter()
                .map(|e| e.coef * ra[e.axis as usize] * d[e.src as usize])
                .sum();
            d[t] = -sum * inv_s;
        }
    }

    /// P2M: adds the moments of masses `m` at `x` about `center` to `mult`.
    pub fn p2m(
        &self,
        center: [f64; 3],
        x: &[[f64; 3]],
        m: &[f64],
        w: &mut [f64],
        mult: &mut [f64],
    ) {
        for (y, &q) in x.iter().zip(m) {
            self.monomials(between(center, *y), w);
            for (o, wi) in mult.iter_mut().zip(w.iter()) {
                *o += q * wi;
            }
        }
    }

    /// M2M: adds the moments `child` about its centre, moved to the parent's centre (`d` =
    /// c_parent − c_child), to `parent`.
    pub fn m2m(&self, d: [f64; 3], child: &[f64], w: &mut [f64], parent: &mut [f64]) {
        self.monomials(d, w);
        for &[n, a, b] in &self.shift {
            parent[n as usize] += child[a as usize] * w[b as usize];
        }
    }

    /// L2L: adds the parent's local expansion moved to the child's centre (`d` = c_child −
    /// c_parent) to `child`.
    pub fn l2l(&self, d: [f64; 3], parent: &[f64], w: &mut [f64], child: &mut [f64]) {
        self.monomials(d, w);
        for &[n, a, b] in &self.shift {
            child[a as usize] += parent[n as usize] * w[b as usize];
        }
    }

    /// M2L: adds to `local` (about c_t) the field of the moments `mult` (about c_s), `r` = c_t −
    /// c_s; `deriv` is scratch of [`Table::len`].
    pub fn m2l(&self, r: [f64; 3], eps2: f64, mult: &[f64], deriv: &mut [f64], local: &mut [f64]) {
        self.derivatives(r, eps2, deriv);
        for (k, l) in local.iter_mut().enumerate() {
            let sums = &self.m2l[self.m2l_offsets[k] as usize..self.m2l_offsets[k + 1] as usize];
            *l += mult[..sums.len()]
                .iter()
                .zip(sums)
                .map(|(m, &s)| m * deriv[s as usize])
                .sum::<f64>();
        }
    }

    /// L2P: ψ and ∇ψ at `t` = x − c_t from the local expansion `local`.
    pub fn l2p(&self, t: [f64; 3], local: &[f64], w: &mut [f64]) -> (f64, [f64; 3]) {
        self.monomials(t, w);
        let mut psi = 0.0;
        let mut grad = [0.0; 3];
        for (k, (&l, &wk)) in local.iter().zip(w.iter()).enumerate() {
            psi += l * wk;
            for (g, &u) in grad.iter_mut().zip(&self.up[k]) {
                if u != u32::MAX {
                    *g += local[u as usize] * wk;
                }
            }
        }
        (psi, grad)
    }
}

/// Per-thread scratch of the operators: monomials and derivatives.
struct Scratch {
    w: Vec<f64>,
    d: Vec<f64>,
}

impl Scratch {
    fn new(t: &Table) -> Self {
        Self {
            w: vec![0.0; t.len()],
            d: vec![0.0; t.len()],
        }
    }
}

/// The vector between two cell centres, `a − b`.
fn between(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

/// Moments of every cell of `tree` (sources `x`, masses `m` in tree order): P2M at leaves, M2M
/// from the children above, deepest level first. `table.len()` values per cell.
pub fn upward_moments(table: &Table, tree: &Octree, x: &[[f64; 3]], m: &[f64]) -> Vec<f64> {
    let nt = table.len();
    let mut mult = vec![0.0; tree.cells.len() * nt];
    for level in tree.levels.iter().rev() {
        let (above, below) = mult.split_at_mut(level.end * nt);
        let below_start = level.end;
        above[level.start * nt..]
            .par_chunks_mut(nt)
            .zip(&tree.cells[level.clone()])
            .for_each_init(
                || Scratch::new(table),
                |sc, (out, cell)| {
                    if cell.is_leaf() {
                        let r = cell.particles();
                        table.p2m(cell.center, &x[r.clone()], &m[r], &mut sc.w, out);
                        return;
                    }
                    for ch in cell.children() {
                        let child = &tree.cells[ch];
                        let o = (ch - below_start) * nt;
                        let d = between(cell.center, child.center);
                        table.m2m(d, &below[o..o + nt], &mut sc.w, out);
                    }
                },
            );
    }
    mult
}

/// Local expansions of every target cell of `st`: M2L from its list (in list order), then L2L
/// from the parent, top level first. Times into `stats`.
pub fn downward_locals(
    table: &Table,
    st: &Structure,
    eps2: f64,
    mult: &[f64],
    stats: &mut FmmStats,
) -> Vec<f64> {
    let nt = table.len();
    let ttree = st.targets();
    let t0 = Instant::now();
    let mut local = vec![0.0; ttree.cells.len() * nt];
    local
        .par_chunks_mut(nt)
        .zip(&ttree.cells)
        .enumerate()
        .for_each_init(
            || Scratch::new(table),
            |sc, (tc, (out, cell))| {
                for &s in st.lists.m2l_of(tc) {
                    let src = &st.sources.cells[s as usize];
                    let o = s as usize * nt;
                    let r = between(cell.center, src.center);
                    table.m2l(r, eps2, &mult[o..o + nt], &mut sc.d, out);
                }
            },
        );
    stats.m2l_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for level in ttree.levels.iter().skip(1) {
        let (parents, here) = local.split_at_mut(level.start * nt);
        here[..level.len() * nt]
            .par_chunks_mut(nt)
            .zip(&ttree.cells[level.clone()])
            .for_each_init(
                || Scratch::new(table),
                |sc, (out, cell)| {
                    let up = &ttree.cells[cell.parent as usize];
                    let o = cell.parent as usize * nt;
                    let d = between(cell.center, up.center);
                    table.l2l(d, &parents[o..o + nt], &mut sc.w, out);
                },
            );
    }
    stats.downward_seconds = t1.elapsed().as_secs_f64();
    local
}

/// The gravity FMM with softened Cartesian expansions of order `p` on built trees and lists
/// (the lists' near field only the opening criterion's): φ and a at `targets` from the bodies
/// at `x` with masses `mass` (input order), in the order of `targets`; phase times into
/// `stats`. The near field sums [`PlummerGravity::pair`] in f64.
pub fn evaluate_gravity(
    gravity: PlummerGravity,
    st: &Structure,
    (x, mass): (&[[f64; 3]], &[f64]),
    targets: &[[f64; 3]],
    p: usize,
    stats: &mut FmmStats,
) -> Vec<(f64, [f64; 3])> {
    let table = Table::new(p);
    let eps2 = gravity.softening * gravity.softening;
    let t0 = Instant::now();
    let order = &st.sources.order;
    let xs: Vec<[f64; 3]> = order.par_iter().map(|&i| x[i as usize]).collect();
    let ms: Vec<f64> = order.par_iter().map(|&i| mass[i as usize]).collect();
    let mult = upward_moments(&table, &st.sources, &xs, &ms);
    stats.upward_seconds = t0.elapsed().as_secs_f64();
    let local = downward_locals(&table, st, eps2, &mult, stats);

    let t2 = Instant::now();
    let ttree = st.targets();
    let nt = table.len();
    // A rayon task per target leaf (no near-field radius holds leaves large).
    let per_leaf: Vec<Vec<(f64, [f64; 3])>> = ttree
        .leaves
        .par_iter()
        .enumerate()
        .map_init(
            || Scratch::new(&table),
            |sc, (li, &leaf)| {
                let cell = &ttree.cells[leaf as usize];
                let l = &local[leaf as usize * nt..(leaf as usize + 1) * nt];
                let near = st.lists.p2p_of(li);
                cell.particles()
                    .map(|i| {
                        let xt = targets[ttree.order[i] as usize];
                        let (psi, mut a) = table.l2p(between(xt, cell.center), l, &mut sc.w);
                        let mut phi = -psi;
                        for &sl in near {
                            for q in st.sources.cells[sl as usize].particles() {
                                let (dp, da) = gravity.pair(between(xs[q], xt), ms[q]);
                                phi += dp;
                                a = [a[0] + da[0], a[1] + da[1], a[2] + da[2]];
                            }
                        }
                        (phi, a)
                    })
                    .collect()
            },
        )
        .collect();
    let mut answers = vec![(0.0, [0.0; 3]); targets.len()];
    for (&leaf, values) in ttree.leaves.iter().zip(&per_leaf) {
        for (i, v) in ttree.cells[leaf as usize].particles().zip(values) {
            answers[ttree.order[i] as usize] = *v;
        }
    }
    stats.p2p_seconds = t2.elapsed().as_secs_f64();
    answers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phi(r: [f64; 3], eps2: f64) -> f64 {
        1.0 / (r[0] * r[0] + r[1] * r[1] + r[2] * r[2] + eps2).sqrt()
    }

    /// ∂ⁿΦ by central differences of the (exact) derivatives of one order less.
    #[test]
    fn derivatives_match_finite_differences_and_the_symmetric_recurrence() {
        let t = Table::new(8);
        let r = [0.7, -0.4, 0.9];
        for eps2 in [0.0, 0.09, 2.0] {
            let mut d = vec![0.0; t.len()];
            t.derivatives(r, eps2, &mut d);
            assert!((d[0] - phi(r, eps2)).abs() < 1e-15);
            let h = 1e-5;
            for (k, n) in t.terms.iter().enumerate().skip(1) {
                let i = (0..3).rev().find(|&i| n[i] > 0).unwrap();
                let mut m = n.map(i32::from);
                m[i] -= 1;
                let lower = t.index(m).unwrap();
                let mut dp = vec![0.0; t.len()];
                let mut dm = vec![0.0; t.len()];
                let mut rp = r;
                rp[i] += h;
                let mut rm = r;
                rm[i] -= h;
                t.derivatives(rp, eps2, &mut dp);
                t.derivatives(rm, eps2, &mut dm);
                let fd = (dp[lower] - dm[lower]) / (2.0 * h);
                let scale = d[k].abs().max(1.0);
                assert!(
                    (fd - d[k]).abs() < 1e-7 * scale,
                    "{n:?} ε² {eps2}: {fd} {}",
                    d[k]
                );
                // The symmetric form: s D_n = −(2|n|−1)/|n| Σ n_i R_i D_{n−e_i} − (|n|−1)/|n|
                // Σ n_i (n_i−1) D_{n−2e_i}.
                let nn = n.map(i32::from);
                let deg = (nn[0] + nn[1] + nn[2]) as f64;
                let s = r[0] * r[0] + r[1] * r[1] + r[2] * r[2] + eps2;
                let mut rhs = 0.0;
                for j in 0..3 {
                    let nj = nn[j] as f64;
                    let mut a = nn;
                    a[j] -= 1;
                    if let Some(ia) = t.index(a) {
                        rhs -= (2.0 * deg - 1.0) / deg * nj * r[j] * d[ia];
                    }
                    a[j] -= 1;
                    if let Some(ib) = t.index(a) {
                        rhs -= (deg - 1.0) / deg * nj * (nj - 1.0) * d[ib];
                    }
                }
                assert!((s * d[k] - rhs).abs() < 1e-12 * scale, "{n:?}");
            }
        }
    }

    /// The table's order is the closed form the GPU kernels use.
    #[test]
    fn term_order_is_the_closed_form() {
        let t = Table::new(9);
        assert_eq!(t.len(), term_count(9));
        for (i, n) in t.terms.iter().enumerate() {
            assert_eq!(
                term_index(n[0] as usize, n[1] as usize, n[2] as usize),
                i,
                "{n:?}"
            );
        }
    }

    /// At ε = 0 the derivatives are those of 1/r in closed form.
    #[test]
    fn newtonian_closed_forms() {
        let t = Table::new(3);
        let r = [0.3, 0.5, -1.1];
        let r2: f64 = r.iter().map(|c| c * c).sum();
        let rn = r2.sqrt();
        let mut d = vec![0.0; t.len()];
        t.derivatives(r, 0.0, &mut d);
        let at = |n: [i32; 3]| d[t.index(n).unwrap()];
        assert!((at([1, 0, 0]) + r[0] / rn.powi(3)).abs() < 1e-14);
        assert!((at([0, 2, 0]) - (3.0 * r[1] * r[1] - r2) / rn.powi(5)).abs() < 1e-14);
        assert!((at([1, 0, 1]) - 3.0 * r[0] * r[2] / rn.powi(5)).abs() < 1e-14);
        let xyz = -15.0 * r[0] * r[1] * r[2] / rn.powi(7);
        assert!((at([1, 1, 1]) - xyz).abs() < 1e-13);
        let zzz = -(15.0 * r[2].powi(3) - 9.0 * r[2] * r2) / rn.powi(7);
        assert!(
            (at([0, 0, 3]) - zzz).abs() < 1e-13,
            "{} {zzz}",
            at([0, 0, 3])
        );
    }

    fn cluster(n: usize, c: [f64; 3], h: f64, seed: u64) -> (Vec<[f64; 3]>, Vec<f64>) {
        let mut s = seed;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        let x = (0..n)
            .map(|_| [0, 1, 2].map(|k| c[k] + h * (2.0 * next() - 1.0)))
            .collect();
        let m = (0..n).map(|_| 0.5 + next()).collect();
        (x, m)
    }

    /// P2M → M2M → M2L → L2L → L2P against the direct sum of a source cluster at a far target
    /// cluster: the error falls like θ^{p+1} (θ = 0.4 here) for ε = 0 and ε comparable to the
    /// distance; the shifts are exact.
    #[test]
    fn operators_converge_like_theta_to_the_p_plus_one() {
        let (cs, ct) = ([0.0; 3], [1.0, 0.6, -0.5]);
        let dist = 1.0f64 + 0.36 + 0.25;
        let h = 0.1 * dist.sqrt() / 3f64.sqrt();
        let (xs, ms) = cluster(40, cs, h, 1);
        let (xt, _) = cluster(30, ct, h, 2);
        for eps in [0.0, 0.05, 1.0] {
            let eps2 = eps * eps;
            let g = PlummerGravity::new(eps).unwrap();
            let mut last = f64::INFINITY;
            for p in [2, 4, 6, 8, 10] {
                let t = Table::new(p);
                let mut w = vec![0.0; t.len()];
                let mut d = vec![0.0; t.len()];
                // Moments about a child centre moved to cs; local at a parent centre moved to ct.
                let child = [0.02, -0.03, 0.01];
                let mut mc = vec![0.0; t.len()];
                t.p2m(child, &xs, &ms, &mut w, &mut mc);
                let mut m = vec![0.0; t.len()];
                t.m2m(between(cs, child), &mc, &mut w, &mut m);
                let mut direct_m = vec![0.0; t.len()];
                t.p2m(cs, &xs, &ms, &mut w, &mut direct_m);
                for (a, b) in m.iter().zip(&direct_m) {
                    assert!((a - b).abs() < 1e-14 * b.abs().max(1e-3), "M2M");
                }
                let parent = [ct[0] - 0.04, ct[1] + 0.02, ct[2] + 0.03];
                let mut lp = vec![0.0; t.len()];
                t.m2l(between(parent, cs), eps2, &m, &mut d, &mut lp);
                let mut l = vec![0.0; t.len()];
                t.l2l(between(ct, parent), &lp, &mut w, &mut l);
                let (mut err, mut norm) = (0.0f64, 0.0f64);
                for y in &xt {
                    let (psi, grad) = t.l2p(between(*y, ct), &l, &mut w);
                    let (mut phi, mut a) = (0.0, [0.0; 3]);
                    for (s, &q) in xs.iter().zip(&ms) {
                        let (dp, da) = g.pair(between(*s, *y), q);
                        phi += dp;
                        a = [0, 1, 2].map(|k| a[k] + da[k]);
                    }
                    err = err.max((psi + phi).abs() / phi.abs());
                    let an = a.iter().map(|v| v * v).sum::<f64>().sqrt();
                    norm = norm.max(an);
                    let de = (0..3).map(|k| (grad[k] - a[k]).powi(2)).sum::<f64>().sqrt();
                    err = err.max(de / an);
                }
                // The cluster radii (√3 h each plus the shifts) over the distance: θ ≈ 0.25.
                let bound = 3.0 * 0.25f64.powi(p as i32);
                assert!(err < bound, "ε {eps} p {p}: {err:e} > {bound:e}");
                assert!(
                    err < last || err < 1e-13,
                    "ε {eps} p {p}: {err:e} ≥ {last:e}"
                );
                last = err;
            }
        }
    }

    /// L2L then L2P equals L2P of the parent's expansion at the same point (a polynomial shift
    /// is exact up to the truncation of terms above p, which L2L keeps): to 1e-14.
    #[test]
    fn local_shift_is_exact() {
        let t = Table::new(7);
        let lp: Vec<f64> = (0..t.len())
            .map(|i| ((i * 37 % 11) as f64 - 5.0) * 0.1)
            .collect();
        let mut w = vec![0.0; t.len()];
        let mut l = vec![0.0; t.len()];
        let d = [0.1, -0.2, 0.05];
        t.l2l(d, &lp, &mut w, &mut l);
        let x = [0.03, 0.02, -0.04];
        let (a, ga) = t.l2p(x, &l, &mut w);
        let (b, gb) = t.l2p([x[0] + d[0], x[1] + d[1], x[2] + d[2]], &lp, &mut w);
        assert!((a - b).abs() < 1e-14 * b.abs().max(1.0));
        for k in 0..3 {
            assert!((ga[k] - gb[k]).abs() < 1e-13, "{ga:?} {gb:?}");
        }
    }
}
