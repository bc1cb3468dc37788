//! The GPU M2L's layout and arithmetic on the host (kernels/fmm.cu, `fmm_m2l_expand[_f32]`,
//! `fmm_m2l` and `fmm_m2l_f32`): which output slots (B outputs of one degree) a lane owns,
//! which harmonic columns it builds, the complete (both signs of m) tables, the launch's warps
//! and shared memory, and an f32 mirror of the scaled kernel, tested here against the f64
//! operator of [`super::expansions`]. The test case
//! ([`M2lCase`]) is shared with the GPU test (tests/gpu_fmm.rs), which compares the kernels'
//! local expansions with [`M2lCase::reference`] coefficient by coefficient.
//!
//! The scaled form (ℓ = |R|, R = c_t − c_s, u = R/ℓ, ρ = √3 h_s the source cell's half
//! diagonal, a scale of the source alone, so its table is built once per cell):
//!
//! ```text
//! Ĩ_N^μ = I_N^μ(u) / N!     M̂_j^k = M_j^k j! ρ^{−j}
//! L_n^m = (−1)^{n+m} n! ℓ^{−(n+1)} Σ_j C(n+j, j) (ρ/ℓ)^j Σ_k M̂_j^k Ĩ_{j+n}^{k−m}
//! ```
//!
//! from I_N(R) = ℓ^{−(N+1)} I_N(u) and (j+n)!/j! = n! C(n+j, j); |Ĩ_N^μ| ≤ 2^N, |M̂_j^k| ≤
//! Σ|q| (r_s/ρ)^j ≤ Σ|q| and ρ/ℓ < √3 (listed cells are disjoint cubes), so every f32 value
//! stays in range up to 2p = 40.

use super::expansions::{coefficient_count, index, m2l, p2m, Workspace};
use super::params::M2lPrecision;
use num_complex::Complex64 as C64;
use rand::{Rng, SeedableRng};

/// Warps (target cells) per M2L block, compiled in as `-DM2L_WARPS` (the kernels' launch
/// bound) and used by the launch unless the warps' shared tables would pass 48 KiB
/// ([`m2l_block`]). The knob to tune on the H100 (docs/performance.md).
pub const M2L_WARPS: usize = 4;

/// Shared memory a block may take without opting in.
const SHARED_LIMIT: usize = 48 * 1024;

/// Warps (cells) per block of P2M, M2M and L2L (`-DFAR_WARPS`): up to 4, as many as fit
/// the M2M and L2L tables, (q + 1)(p+1)(p+2)/2 complex f64 values a warp, in 48 KiB.
pub fn far_warps(p: usize, q: usize) -> usize {
    (SHARED_LIMIT / (16 * (q + 1) * coefficient_count(p))).clamp(1, 4)
}

/// Outputs per lane of P2M, M2M and L2L (`FAR_R`): lane l owns coefficients l, l + 32, …
/// below (p+1)(p+2)/2.
pub const fn outputs_per_lane(p: usize) -> usize {
    coefficient_count(p).div_ceil(32)
}

/// The M2L's slots of `b` outputs (n, m0 … m0 + b − 1) for degrees 0..=p, in the kernels'
/// order (n ascending, m0 = 0, b, 2b, … ≤ n): `m2l_slots` has their number.
pub fn slots(p: usize, b: usize) -> Vec<(usize, usize)> {
    (0..=p)
        .flat_map(|n| (0..=n).step_by(b).map(move |m0| (n, m0)))
        .collect()
}

/// Outputs per M2L slot (`M2L_B`, the kernels' `m2l_width`): the smallest b ≤ 3 whose slots
/// fit one round of 32 lanes, else 2.
pub fn slot_width(p: usize) -> usize {
    (1..=3).find(|&b| slots(p, b).len() <= 32).unwrap_or(2)
}

/// Rounds of 32 slots (`M2L_RR`): lane l owns slots l, l + 32, ….
pub fn slot_rounds(p: usize) -> usize {
    slots(p, slot_width(p)).len().div_ceil(32)
}

/// (n, m) of coefficient `i` (the kernels' `cdecode`).
pub fn decode(i: usize) -> (usize, usize) {
    let mut n = 0;
    while (n + 1) * (n + 2) / 2 <= i {
        n += 1;
    }
    (n, i - n * (n + 1) / 2)
}

/// The columns μ ≥ 0 of the order-2p irregular table lane `lane` builds: μ = lane, lane + 32,
/// … ≤ 2p (2p serial steps each: μ diagonal, 2p − μ recurrence).
pub fn lane_columns(p: usize, lane: usize) -> Vec<usize> {
    (lane..=2 * p).step_by(32).collect()
}

/// Position of X_n^m, |m| ≤ n, in a complete table (both signs of m): n² + n + m.
pub const fn full_index(n: usize, m: isize) -> usize {
    (n * n + n).wrapping_add_signed(m)
}

/// The row stride W of the f32 M2L's rectangular order-2p table (`-DM2L_W`; 0: triangular):
/// up to p = 12 the W in 4p+1 ..= 4p+8 whose windowed reads take the fewest wavefronts
/// ([`window_wavefronts`], the smallest W of equals), where that beats the triangular table.
pub fn table_stride(p: usize) -> usize {
    if p > 12 {
        return 0;
    }
    let mut best = (window_wavefronts(p, 0), 0);
    for w in 4 * p + 1..=4 * p + 8 {
        let c = window_wavefronts(p, w);
        if c < best.0 - 1e-9 {
            best = (c, w);
        }
    }
    best.1
}

/// The table stride of the M2L in `precision` ([`table_stride`] in f32, triangular in f64).
pub fn stride_for(p: usize, precision: M2lPrecision) -> usize {
    match precision {
        M2lPrecision::F32 => table_stride(p),
        M2lPrecision::F64 => 0,
    }
}

/// Where row N of the M2L's order-2p table starts (`irow`; I_N^μ at that + μ): N W + 2p for a
/// stride W > 0, else N² + N.
pub fn table_row(p: usize, w: usize, n: usize) -> usize {
    if w > 0 {
        n * w + 2 * p
    } else {
        n * n + n
    }
}

/// Values of the M2L's order-2p table (`M2L_NI`): (2p+1) W or (2p+1)².
pub fn table_len(p: usize, w: usize) -> usize {
    (2 * p + 1) * if w > 0 { w } else { 2 * p + 1 }
}

/// Static shared bytes of an M2L block: the f32 kernel's binomial and reciprocal tables,
/// 4 ((p+1)² + 2p + 2) bytes.
pub fn m2l_static_shared(p: usize, precision: M2lPrecision) -> usize {
    match precision {
        M2lPrecision::F64 => 0,
        M2lPrecision::F32 => 4 * ((p + 1) * (p + 1) + 2 * p + 2),
    }
}

/// Warps per block and dynamic shared bytes of an M2L launch at order `p` with `q` charges:
/// per warp the padding (`M2L_PAD` = B − 1 values read only for outputs past m = n), the
/// complete order-2p table ([`table_len`]) and the copied multipole table, (B − 1 + table +
/// q (p+1)²)
/// complex values of 16 (f64) or 8 (f32) bytes; the f32 kernel adds
/// [`m2l_static_shared`] bytes per block.
pub fn m2l_block(p: usize, q: usize, precision: M2lPrecision) -> (usize, usize) {
    let (bytes, fixed) = match precision {
        M2lPrecision::F64 => (16, 0),
        M2lPrecision::F32 => (8, m2l_static_shared(p, precision)),
    };
    let ni = table_len(p, stride_for(p, precision));
    let per_warp = bytes * (slot_width(p) - 1 + ni + q * (p + 1) * (p + 1));
    let warps = ((SHARED_LIMIT - fixed) / per_warp).clamp(1, M2L_WARPS);
    (warps, warps * per_warp)
}

/// Mean shared-memory wavefronts of one windowed load of I (8-byte values: two half-warps,
/// each as many wavefronts as the most distinct 4-byte words one of the 32 banks holds) over
/// the (j, k) of a pair, with the lanes' slots at order `p` in the table of stride `w` (0:
/// triangular): the count behind [`table_stride`] (tests, docs/performance.md).
pub fn window_wavefronts(p: usize, w: usize) -> f64 {
    let b = slot_width(p);
    let sl = slots(p, b);
    let (mut total, mut count) = (0usize, 0usize);
    for j in 0..=p {
        for k in -(j as isize)..=j as isize {
            for r in 0..slot_rounds(p) {
                for half in 0..2 {
                    let mut banks: Vec<Vec<isize>> = vec![Vec::new(); 32];
                    for lane in 16 * half..16 * half + 16 {
                        let Some(&(n, m0)) = sl.get(lane + 32 * r) else {
                            continue;
                        };
                        let a = table_row(p, w, j + n) as isize - m0 as isize + k;
                        for word in [2 * a, 2 * a + 1] {
                            let bank = &mut banks[word.rem_euclid(32) as usize];
                            if !bank.contains(&word) {
                                bank.push(word);
                            }
                        }
                    }
                    total += banks.iter().map(Vec::len).max().unwrap_or(0);
                }
            }
            count += 1;
        }
    }
    total as f64 / count as f64
}

/// `fmm_m2l_expand_f32` on the host: the complete table M̂_j^k = M_j^k j! ρ^{−j} (ρ = √3
/// `half`) of one source cell's `multipole` (K components), in f32.
pub fn expanded_f32<const K: usize>(p: usize, half: f64, multipole: &[C64]) -> Vec<[f32; 2]> {
    let irho = 1.0 / (3f64.sqrt() * half);
    let mut mt = vec![[0f32; 2]; K * (p + 1) * (p + 1)];
    for j in 0..=p {
        let sc = (1..=j).fold(1.0, |s, a| s * a as f64 * irho);
        for k in 0..=j {
            for c in 0..K {
                let v = multipole[K * index(j, k) + c];
                let w = [(v.re * sc) as f32, (v.im * sc) as f32];
                mt[K * full_index(j, k as isize) + c] = w;
                mt[K * full_index(j, -(k as isize)) + c] = mirror(w, k);
            }
        }
    }
    mt
}

/// `fmm_m2l_f32`'s arithmetic for one pair on the host: adds to `local` (f64, K components)
/// the field of `multipole` (a source cell of half side `half`) with `b` = c_t − c_s, products
/// and inner sums in f32 as the kernel does them (same tables, same order, the weights
/// C(n+j, j) (ρ/ℓ)^j), the pair's result scaled and added in f64.
pub fn m2l_scaled_f32<const K: usize>(
    p: usize,
    b: [f64; 3],
    half: f64,
    multipole: &[C64],
    local: &mut [C64],
) {
    let l = (b[0] * b[0] + b[1] * b[1] + b[2] * b[2]).sqrt();
    let il = 1.0 / l;
    let u = [(b[0] * il) as f32, (b[1] * il) as f32, (b[2] * il) as f32];
    let top = 2 * p;
    // Ĩ, complete, from the columns as the lanes build them.
    let mut t = vec![[0f32; 2]; (top + 1) * (top + 1)];
    for lane in 0..32 {
        for m in lane_columns(p, lane) {
            scaled_column(u, m, top, &mut t);
        }
    }
    let mt = expanded_f32::<K>(p, half, multipole);
    let rl = (3f64.sqrt() * half * il) as f32;
    // The lanes' slots as the kernel runs them: a window of B values of row j + n slides
    // along k; the table is read through its B − 1 padding values (NaN here, so a real
    // output that read them would show).
    let b = slot_width(p);
    let pad = b - 1;
    let rect = table_stride(p);
    let mut tp = vec![[f32::NAN; 2]; pad + table_len(p, rect)];
    for big in 0..=top {
        for mu in -(big as isize)..=big as isize {
            tp[(pad + table_row(p, rect, big)).wrapping_add_signed(mu)] = t[full_index(big, mu)];
        }
    }
    let at = |i: isize| tp[(i + pad as isize) as usize];
    let count = slots(p, b).len();
    for lane in 0..32 {
        for r in 0..slot_rounds(p) {
            if lane + 32 * r >= count {
                continue; // a dummy slot: computed by the kernel, not written
            }
            let (n, m0) = kernel_slot(b, lane + 32 * r);
            let mut part = vec![[[0f32; 2]; K]; b];
            let mut pw = 1f32;
            for j in 0..=p {
                let big = j + n;
                let base = table_row(p, rect, big) as isize - m0 as isize; // I_big^{k − m0} at base + k
                let mut win = vec![[0f32; 2]; b]; // win[b'] = I_big^{k − m0 − b'}
                for (bb, w) in win.iter_mut().enumerate().skip(1) {
                    *w = at(base - j as isize - bb as isize);
                }
                let mut sj = vec![[[0f32; 2]; K]; b];
                for k in -(j as isize)..=j as isize {
                    win[0] = at(base + k);
                    for (h, s) in win.iter().zip(sj.iter_mut()) {
                        for (c, s) in s.iter_mut().enumerate() {
                            let mv = mt[K * full_index(j, k) + c];
                            s[0] = mv[0].mul_add(h[0], s[0]);
                            s[0] = (-mv[1]).mul_add(h[1], s[0]);
                            s[1] = mv[0].mul_add(h[1], s[1]);
                            s[1] = mv[1].mul_add(h[0], s[1]);
                        }
                    }
                    win.rotate_right(1);
                }
                let w = binomial(n + j, j) as f32 * pw;
                pw *= rl;
                for (a, s) in part.iter_mut().zip(&sj) {
                    for (a, s) in a.iter_mut().zip(s) {
                        a[0] = w.mul_add(s[0], a[0]);
                        a[1] = w.mul_add(s[1], a[1]);
                    }
                }
            }
            let f = (1..=n).fold(il, |s, a| s * a as f64 * il);
            for (bb, a) in part.iter().enumerate() {
                let m = m0 + bb;
                if m > n {
                    continue;
                }
                let sign = if (n + m) % 2 == 1 { -f } else { f };
                for (c, a) in a.iter().enumerate() {
                    local[K * index(n, m) + c] += C64::new(a[0] as f64, a[1] as f64) * sign;
                }
            }
        }
    }
}

/// Slot `s` (n, m0) as the kernels decode it (`m2l_warp`): ⌈(n+1)/b⌉ slots per degree.
pub fn kernel_slot(b: usize, mut s: usize) -> (usize, usize) {
    let mut n = 0;
    while s >= (n + b) / b {
        s -= (n + b) / b;
        n += 1;
    }
    (n, b * s)
}

/// X^{−k} = (−1)^k conj(X^k).
fn mirror(w: [f32; 2], k: usize) -> [f32; 2] {
    if k % 2 == 1 {
        [-w[0], w[1]]
    } else {
        [w[0], -w[1]]
    }
}

/// C(n, k) in f64 (exact below 2^53).
fn binomial(n: usize, k: usize) -> f64 {
    (1..=k).fold(1.0, |b, a| b * (n - k + a) as f64 / a as f64)
}

/// Column m of Ĩ_N^m = I_N^m(u)/N! at the unit vector u, N = m..top, both signs, in f32
/// (the kernels' `irregular_column_full` with SCALED: reciprocals 1/n in f32, no division).
fn scaled_column(u: [f32; 3], m: usize, top: usize, t: &mut [[f32; 2]]) {
    let mut put = |n: usize, v: [f32; 2]| {
        t[full_index(n, m as isize)] = v;
        t[full_index(n, -(m as isize))] = mirror(v, m);
    };
    let rec = |n: usize| 1.0 / n as f32;
    let mut d = [1f32, 0.0];
    for k in 1..=m {
        let f = -((2 * k - 1) as f32) * rec(k);
        let xy = [u[0] * f, u[1] * f];
        d = [xy[0] * d[0] - xy[1] * d[1], xy[0] * d[1] + xy[1] * d[0]];
    }
    put(m, d);
    if m + 1 > top {
        return;
    }
    let f1 = (2 * m + 1) as f32 * rec(m + 1) * u[2];
    let (mut b, mut a) = (d, [d[0] * f1, d[1] * f1]);
    put(m + 1, a);
    for n in m + 2..=top {
        let f = (2 * n - 1) as f32 * rec(n) * u[2];
        let g = ((n - 1) * (n - 1) - m * m) as f32 * (rec(n) * rec(n - 1));
        let v = [a[0] * f - b[0] * g, a[1] * f - b[1] * g];
        put(n, v);
        b = a;
        a = v;
    }
}

/// A small M2L problem with the kernels' inputs: target cells, each with an interaction list
/// of source cells (well separated at θ = 0.5, some far away), the sources' multipoles from
/// P2M of random particles, K charges each.
pub struct M2lCase {
    pub p: usize,
    pub q: usize,
    /// 3 per target cell.
    pub tcenter: Vec<f64>,
    /// 3 per source cell.
    pub scenter: Vec<f64>,
    /// The source cells' half sides.
    pub shalf: Vec<f64>,
    /// Target t's list is sources[offsets[t]..offsets[t + 1]].
    pub offsets: Vec<u32>,
    pub sources: Vec<u32>,
    /// The multipoles, q (p+1)(p+2)/2 complex values (re, im) per source cell.
    pub mult: Vec<f64>,
}

impl M2lCase {
    /// Five target cells of half side 1/4, 24 sources each (cells of the same size at 1.8 to 4
    /// and two at 12), 8 particles per source cell, `q` ∈ {1, 3} charges.
    pub fn new(p: usize, q: usize, seed: u64) -> Self {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let (h, targets, per_list) = (0.25, 5, 24);
        let mut case = Self {
            p,
            q,
            tcenter: Vec::new(),
            scenter: Vec::new(),
            shalf: Vec::new(),
            offsets: vec![0],
            sources: Vec::new(),
            mult: Vec::new(),
        };
        let mut ws = Workspace::new(p);
        for t in 0..targets {
            let tc: [f64; 3] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
            case.tcenter.extend(tc);
            for e in 0..per_list {
                let dist = if e < 2 {
                    12.0
                } else {
                    rng.random_range(1.8..4.0)
                };
                let dir: [f64; 3] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
                let norm = dir.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-3);
                let sc: [f64; 3] = std::array::from_fn(|a| tc[a] + dist * dir[a] / norm);
                let s = case.scenter.len() / 3;
                case.scenter.extend(sc);
                case.shalf.push(h);
                case.sources.push(s as u32);
                let y: Vec<[f64; 3]> = (0..8)
                    .map(|_| std::array::from_fn(|a| sc[a] + rng.random_range(-h..h)))
                    .collect();
                let charges: Vec<[f64; 3]> = (0..8)
                    .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
                    .collect();
                let mut m = vec![C64::new(0.0, 0.0); q * coefficient_count(p)];
                match q {
                    1 => {
                        let c1: Vec<[f64; 1]> = charges.iter().map(|c| [c[0]]).collect();
                        p2m::<1>(&mut ws, sc, &y, &c1, &mut m);
                    }
                    _ => p2m::<3>(&mut ws, sc, &y, &charges, &mut m),
                }
                case.mult.extend(m.iter().flat_map(|v| [v.re, v.im]));
            }
            case.offsets.push(((t + 1) * per_list) as u32);
        }
        case
    }

    fn targets(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The multipole of source cell `s`.
    fn multipole(&self, s: usize) -> Vec<C64> {
        let w = self.q * coefficient_count(self.p);
        self.mult[2 * w * s..2 * w * (s + 1)]
            .chunks(2)
            .map(|v| C64::new(v[0], v[1]))
            .collect()
    }

    /// Each target's local expansion from `pair` (b = c_t − c_s, multipole, local), the
    /// sources in list order, flattened as the kernels write them (re, im).
    fn locals(&self, mut pair: impl FnMut([f64; 3], usize, &[C64], &mut [C64])) -> Vec<f64> {
        let w = self.q * coefficient_count(self.p);
        let mut out = Vec::with_capacity(2 * w * self.targets());
        for t in 0..self.targets() {
            let mut local = vec![C64::new(0.0, 0.0); w];
            for e in self.offsets[t]..self.offsets[t + 1] {
                let s = self.sources[e as usize] as usize;
                let b = std::array::from_fn(|a| self.tcenter[3 * t + a] - self.scenter[3 * s + a]);
                pair(b, s, &self.multipole(s), &mut local);
            }
            out.extend(local.iter().flat_map(|v| [v.re, v.im]));
        }
        out
    }

    /// The f64 operator's local expansions ([`m2l`]).
    pub fn reference(&self) -> Vec<f64> {
        let mut ws = Workspace::new(self.p);
        match self.q {
            1 => self.locals(|b, _, m, l| m2l::<1>(&mut ws, b, m, l)),
            _ => self.locals(|b, _, m, l| m2l::<3>(&mut ws, b, m, l)),
        }
    }

    /// The f32 mirror's ([`m2l_scaled_f32`]).
    pub fn scaled_f32(&self) -> Vec<f64> {
        let p = self.p;
        match self.q {
            1 => self.locals(|b, s, m, l| m2l_scaled_f32::<1>(p, b, self.shalf[s], m, l)),
            _ => self.locals(|b, s, m, l| m2l_scaled_f32::<3>(p, b, self.shalf[s], m, l)),
        }
    }

    /// Σ over each target's list of |the pair's L_n^m| (f64 operator), laid out as
    /// [`Self::reference`] with the sums in the real parts: the scale of the rounding errors.
    fn magnitudes(&self) -> Vec<f64> {
        let mut ws = Workspace::new(self.p);
        let mut tmp = vec![C64::new(0.0, 0.0); self.q * coefficient_count(self.p)];
        let q = self.q;
        self.locals(|b, _, m, l| {
            tmp.iter_mut().for_each(|v| *v = C64::new(0.0, 0.0));
            match q {
                1 => m2l::<1>(&mut ws, b, m, &mut tmp),
                _ => m2l::<3>(&mut ws, b, m, &mut tmp),
            }
            for (a, v) in l.iter_mut().zip(&tmp) {
                a.re += v.norm();
            }
        })
    }

    /// The largest error of `got` against `reference`, coefficient by coefficient, relative
    /// to the largest Σ_pairs |L_n^m| of the same target, degree n and charge (the size of the
    /// terms the sums round, [`Self::magnitudes`]).
    pub fn max_error(&self, got: &[f64], reference: &[f64]) -> f64 {
        let magnitude = self.magnitudes();
        let (p, q) = (self.p, self.q);
        let w = q * coefficient_count(p);
        let at = |v: &[f64], t: usize, n: usize, m: usize, c: usize| {
            let k = 2 * (w * t + q * index(n, m) + c);
            C64::new(v[k], v[k + 1])
        };
        let mut worst = 0.0f64;
        for t in 0..self.targets() {
            for n in 0..=p {
                for c in 0..q {
                    let scale = (0..=n)
                        .map(|m| at(&magnitude, t, n, m, c).norm())
                        .fold(0.0, f64::max);
                    for m in 0..=n {
                        let e = (at(got, t, n, m, c) - at(reference, t, n, m, c)).norm() / scale;
                        worst = worst.max(if e.is_nan() { f64::INFINITY } else { e });
                    }
                }
            }
        }
        worst
    }
}

/// The f32 M2L's tolerance in [`M2lCase::max_error`] at order p: 4 u (p+1) with u = 2^{−23},
/// the rounding of a pair's (p+1)² f32 products and of the order-2p recurrences adding as a
/// random walk (√((p+1)²) = p+1); the mirror measures 2 to 20 times less (p = 4 … 20, test
/// below), a wrong term gives errors of order one.
pub fn f32_tolerance(p: usize) -> f64 {
    4.0 * f32::EPSILON as f64 * (p + 1) as f64
}

/// The f64 kernel's tolerance in [`M2lCase::max_error`]: the same sums in another order.
pub const F64_TOLERANCE: f64 = 1e-13;

/// The largest |I_N^μ(u)/N!| over unit vectors (for the range argument; tests).
#[cfg(test)]
fn scaled_harmonic_bound(u: [f64; 3], top: usize) -> f64 {
    use super::expansions::irregular_harmonics;
    let mut t = vec![C64::new(0.0, 0.0); coefficient_count(top)];
    irregular_harmonics(u, top, &mut t);
    (0..=top)
        .flat_map(|n| (0..=n).map(move |m| (n, m)))
        .map(|(n, m)| {
            t[index(n, m)].norm()
                / (1..=n).fold(1.0, |f: f64, a| f * a as f64)
                / 2f64.powi(n as i32)
        })
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every M2L output (n, m) has exactly one slot and lane (slot l + 32 r, output m0 + b),
    /// every column μ ≤ 2p one builder with 2p serial steps, one round of slots up to p = 11
    /// (B = 1, 2, 2, 3 at p = 4, 7, 9, 11), and the slots' windowed reads of the order-2p table
    /// stay within it or its B − 1 padding values before it.
    #[test]
    fn lanes_cover_outputs_and_columns_once() {
        for p in [2, 4, 7, 9, 11, 15, 20] {
            let nc = coefficient_count(p);
            let b = slot_width(p);
            let sl = slots(p, b);
            assert_eq!(slot_rounds(p), sl.len().div_ceil(32));
            for (i, &slot) in sl.iter().enumerate() {
                assert_eq!(kernel_slot(b, i), slot, "p = {p}");
            }
            let mut seen = vec![0; nc];
            for &(n, m0) in &sl {
                for m in m0..(m0 + b).min(n + 1) {
                    seen[index(n, m)] += 1;
                }
                // I_{j+n}^{k−m0−b'} for |k| ≤ j ≤ p, b' < B: row(j + n) + k − m0 − b'.
                for w in [0, 4 * p + 1] {
                    for j in 0..=p {
                        let row = table_row(p, w, j + n) as isize;
                        let lo = row - j as isize - (m0 + b - 1) as isize;
                        let hi = row + j as isize - m0 as isize;
                        assert!(lo >= -(b as isize - 1), "p = {p}: ({n}, {m0}) reads {lo}");
                        assert!(hi < table_len(p, w) as isize);
                    }
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "p = {p}");
            let mut cols = vec![0; 2 * p + 1];
            for lane in 0..32 {
                let c = lane_columns(p, lane);
                for &m in &c {
                    cols[m] += 1;
                }
                assert!(c.len() <= (2 * p + 1).div_ceil(32));
            }
            assert!(cols.iter().all(|&s| s == 1), "p = {p}");
            if p <= 11 {
                assert_eq!(slot_rounds(p), 1, "p = {p}");
            }
            // Rectangular rows (any W ≥ 4p + 1) do not overlap and fit the table.
            let top = 2 * p;
            let w = 4 * p + 1;
            for big in 0..top {
                let end = table_row(p, w, big) + big;
                assert!(end < table_row(p, w, big + 1) - (big + 1));
            }
            assert!(table_row(p, w, top) + top < table_len(p, w));
            let chosen = table_stride(p);
            assert!(chosen == 0 || (4 * p + 1..=4 * p + 8).contains(&chosen));
            // Complete tables: n² + n + m runs over 0..(top+1)² once.
            let mut idx: Vec<usize> = (0..=top)
                .flat_map(|n| (-(n as isize)..=n as isize).map(move |m| full_index(n, m)))
                .collect();
            idx.sort_unstable();
            assert_eq!(idx, (0..(top + 1) * (top + 1)).collect::<Vec<_>>());
        }
        assert_eq!(
            [4, 7, 9, 10, 11].map(slot_width),
            [1, 2, 2, 3, 3],
            "the kernels' m2l_width"
        );
    }

    /// The launches fit 48 KiB for every order the GPU is built for, with at least one warp,
    /// and uses the knob where it fits (p = 9, q = 3 in f64: 10.3 KiB a warp).
    #[test]
    fn m2l_blocks_fit_shared_memory() {
        for p in [2, 4, 7, 9, 11, 15, 20] {
            for q in [1, 3] {
                for prec in [M2lPrecision::F64, M2lPrecision::F32] {
                    let (w, bytes) = m2l_block(p, q, prec);
                    assert!(
                        (1..=M2L_WARPS).contains(&w)
                            && bytes + m2l_static_shared(p, prec) <= SHARED_LIMIT,
                        "{p} {q}"
                    );
                }
            }
        }
        assert_eq!(
            m2l_block(9, 3, M2lPrecision::F64),
            (4, 4 * 16 * (1 + 361 + 300))
        );
        assert_eq!(
            m2l_block(9, 3, M2lPrecision::F32),
            (4, 4 * 8 * (1 + 19 * table_stride(9) + 300))
        );
        assert_eq!(m2l_block(11, 3, M2lPrecision::F32).0, 4);
        assert_eq!(m2l_block(20, 3, M2lPrecision::F64).0, 1);
        assert_eq!(
            (far_warps(9, 3), far_warps(20, 3), far_warps(20, 1)),
            (4, 3, 4)
        );
    }

    /// The per-cell f32 tables (ρ = √3 h) stay below Σ|q| (the particles lie in the cell), so
    /// nothing in them overflows at any order; their ±k halves mirror each other.
    #[test]
    fn expanded_tables_are_bounded() {
        for p in [4, 9, 20] {
            let case = M2lCase::new(p, 3, 3);
            for s in 0..case.shalf.len() {
                let t = expanded_f32::<3>(p, case.shalf[s], &case.multipole(s));
                let big = t.iter().map(|v| v[0].hypot(v[1])).fold(0f32, f32::max);
                // 8 particles with charges in [−1, 1]: Σ|q| ≤ 8.
                assert!(big.is_finite() && big <= 8.0, "p = {p}: {big}");
                assert_eq!(t[3 * full_index(1, -1)], mirror(t[3 * full_index(1, 1)], 1));
            }
        }
    }

    /// The chosen rectangular tables meet fewer bank conflicts than the triangular ones (p =
    /// 7: 4.9 → 3.0 wavefronts a load, 9: 6.4 → 4.0, 11: 4.7 → 4.0), and the strides are these
    /// (compiled in as -DM2L_W).
    #[test]
    fn rectangular_table_has_fewer_bank_conflicts() {
        for p in [7, 9, 11] {
            let w = table_stride(p);
            let (tri, rect) = (window_wavefronts(p, 0), window_wavefronts(p, w));
            eprintln!("p = {p}: W = {w}, {tri:.2} → {rect:.2} wavefronts");
            assert!(rect < tri && rect <= 4.0 + 1e-12, "p = {p}: {tri} {rect}");
        }
        assert_eq!([7, 9, 11, 13].map(table_stride), [29, 37, 46, 0]);
    }

    /// The planner puts the GPU's M2L in f32 at coarse accuracies (said in the sentence), in
    /// f64 below [`GPU_F32_M2L_ACCURACY`] when the GPU is planned that fine; the CPU's stays f64.
    #[test]
    fn planner_picks_the_m2l_precision() {
        use super::super::params::{
            plan_gravity_parameters, plan_parameters, FmmBackend, GPU_ACCURACY_FLOOR,
            GPU_F32_M2L_ACCURACY,
        };
        use crate::summation::interaction::PlummerGravity;
        let g = plan_parameters(1e-4, FmmBackend::Cuda).unwrap();
        assert_eq!(g.m2l, M2lPrecision::F32);
        assert!(g.to_string().ends_with(", M2L in scaled f32"), "{g}");
        let gravity = PlummerGravity::new(1e-3).unwrap();
        let gg = plan_gravity_parameters(1e-4, FmmBackend::Cuda, gravity).unwrap();
        assert_eq!(gg.m2l, M2lPrecision::F32);
        let c = plan_parameters(1e-4, FmmBackend::Cpu).unwrap();
        assert_eq!(c.m2l, M2lPrecision::F64);
        assert!(!c.to_string().contains("M2L"), "{c}");
        if GPU_ACCURACY_FLOOR < GPU_F32_M2L_ACCURACY {
            let fine = plan_parameters(GPU_ACCURACY_FLOOR, FmmBackend::Cuda).unwrap();
            assert_eq!(fine.m2l, M2lPrecision::F64);
        }
    }

    /// The scaled harmonics stay below 2^N in magnitude (f32 range up to N = 40), on the axis
    /// and off it.
    #[test]
    fn scaled_harmonics_are_bounded() {
        for u in [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.6, -0.48, 0.64]] {
            assert!(scaled_harmonic_bound(u, 40) <= 1.0 + 1e-12, "{u:?}");
        }
    }

    /// The f32 mirror of `fmm_m2l_f32` (its slots, windows and padding: NaN there, so a
    /// real output reading it fails) matches the f64 operator within [`f32_tolerance`] at
    /// every slot width (1, 2, 3: p = 4, 7 and 9, 11) and several rounds (15, 20), both charge
    /// counts.
    #[test]
    fn scaled_f32_m2l_matches_f64_operator() {
        for p in [4, 7, 9, 11, 15, 20] {
            for q in [1, 3] {
                let case = M2lCase::new(p, q, 7 + p as u64);
                let e = case.max_error(&case.scaled_f32(), &case.reference());
                eprintln!(
                    "p = {p}, q = {q}: f32 mirror error {e:.2e}, tolerance {:.2e}",
                    f32_tolerance(p)
                );
                assert!(e <= f32_tolerance(p), "p = {p}, q = {q}: {e:e}");
            }
        }
    }
}
