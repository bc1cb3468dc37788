//! Parallel 3-D real transforms between an M^3 physical grid and the retained modes of a
//! [`ModeLayout`] (|k_x|, |k_y|, k_z ≤ K with 2K < M), and a fused pipeline that evaluates a
//! pointwise function of several fields without storing any field on the M^3 grid.
//!
//! Normalisation follows docs/physics.md §6: `forward` returns û with u(x) = Σ_k û(k) e^{ik·x}
//! (the DFT divided by M^3), `inverse` evaluates that sum at the M^3 nodes. With M = N this is the
//! plain transform of an N^3 field; with M = 3N/2 and K < N/2 it is the padded transform of the
//! 3/2 rule.
//!
//! The transform is done axis by axis with 1-D complex FFTs (rustfft) on contiguous lines:
//! - inverse: x lines for each retained (k_y, k_z), stored in a mixed-space buffer
//!   `[k_y][x][field][k_z]`; then, one x plane per task, y lines for each k_z ≤ K, then z;
//! - forward: the same in reverse order, one x plane per task down to a mixed-space buffer
//!   `[x][k_y][field][k_z]`, then x lines for each retained (k_y, k_z).
//!
//! The z direction is real: two real z lines (rows y and y + 1 of a plane) share one complex FFT
//! of length M. The inverse builds Z = A + iB from the half spectra A, B of the two rows
//! (extended to k_z < 0 by conjugation), so that the real and imaginary parts of the transform of
//! Z are the two rows; the forward transforms p + iq and separates the half spectra again,
//! 2P_k = Z_k + conj Z_{−k} and 2Q_k = −i (Z_k − conj Z_{−k}), for k_z ≤ K only. Rows are taken
//! four at a time so that the strided half spectra are read and written a cache line at a time.
//!
//! [`Fft3d::apply_pointwise`] (and [`Fft3d::apply_pointwise_with`]) fuse inverse transforms, a
//! pointwise function and forward transforms (see [`Pointwise`]):
//! 1. x pass: the inputs are computed from the stored modes while they are gathered (so derived
//!    fields such as ω̂ = ik × û are never stored), transformed along x and written to the
//!    mixed-space buffer;
//! 2. one task per x plane, with per-thread scratch: the y pass of every input, then for four
//!    rows at a time the inverse z transforms, the pointwise function on the real values (and
//!    the max reduction), the forward z transforms of the results, and finally the forward y pass
//!    of the results into the second mixed-space buffer;
//! 3. x pass of the results, each retained output mode being handed to a store callback (the
//!    solver applies the Leray projection and its Runge–Kutta stage update there).
//!
//! No field ever exists on the M^3 grid, so the pipeline streams only the two mixed-space
//! buffers through memory; when they are too large to stay in cache until the next pass reads
//! them, they are written with non-temporal stores (`store_stream`).
//!
//! Lines whose input is entirely zero padding are never transformed, and only retained modes
//! are written back, which is what makes the 2/3 truncation exact and the 3/2 rule cheap.
//! Strided axes are handled by blocked transposes into per-thread scratch, work is handed to
//! rayon as disjoint blocks, and each 1-D line is transformed independently of how work is split
//! (the only reduction, a maximum, does not depend on order), so the results are bit-identical
//! for any number of threads.

use super::layout::ModeLayout;
use num_complex::Complex64;
use rayon::prelude::*;
use rustfft::{Fft, FftPlanner};
use std::cell::RefCell;
use std::sync::Arc;

const ZERO: Complex64 = Complex64 { re: 0.0, im: 0.0 };

/// Rows (real z lines) handled together: two complex FFTs of two rows each.
const GROUP: usize = 4;

/// A pointwise operation for [`Fft3d::apply_pointwise`]: NIN real input fields, given by their
/// retained modes, to NOUT real output fields, returned as their retained modes. The methods are
/// called from rayon workers that hold their per-thread scratch, so they must not start
/// parallel work themselves.
pub trait Pointwise<const NIN: usize, const NOUT: usize>: Sync {
    /// Coefficients of the input fields at stored mode `index`, wavevector `k` (called once
    /// per mode; derived fields such as a curl need no storage).
    fn input(&self, index: usize, k: [i64; 3]) -> [Complex64; NIN];

    /// Output values at one node of the M^3 grid from the input values there, and a scalar
    /// whose maximum over all nodes `apply_pointwise` returns. Nodes come in an unspecified
    /// order, so this must be a pure function of its argument.
    fn point(&self, v: &[f64; NIN]) -> ([f64; NOUT], f64);
}

/// Per-thread scratch, grown on first use and reused by every later transform on that thread.
#[derive(Default)]
struct Scratch {
    /// Lines gathered for a 1-D FFT pass, `[field][k_z][M]`.
    lines: Vec<Complex64>,
    /// Complex rows of length M holding two real z lines each, `[field][pair][M]`.
    rows: Vec<Complex64>,
    /// Scratch of the 1-D FFT implementations.
    fft: Vec<Complex64>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

fn grow(v: &mut Vec<Complex64>, len: usize) {
    if v.len() < len {
        v.resize(len, ZERO);
    }
}

/// Runs `f` on this thread's scratch cut to the given lengths. `f` must not start parallel
/// work (a task stolen by this thread would find the scratch borrowed).
fn with_scratch<R>(
    lines: usize,
    rows: usize,
    fft: usize,
    f: impl FnOnce(&mut [Complex64], &mut [Complex64], &mut [Complex64]) -> R,
) -> R {
    SCRATCH.with(|s| {
        let s = &mut *s.borrow_mut();
        grow(&mut s.lines, lines);
        grow(&mut s.rows, rows);
        grow(&mut s.fft, fft);
        f(
            &mut s.lines[..lines],
            &mut s.rows[..rows],
            &mut s.fft[..fft],
        )
    })
}

/// The real and imaginary parts of complex numbers as one f64 slice (re, im, re, im, …).
fn as_f64(z: &[Complex64]) -> &[f64] {
    // SAFETY: `Complex<f64>` is `#[repr(C)]` with fields `re: f64, im: f64` (num-complex
    // documents and relies on this layout), so `z.len()` of them occupy exactly `2 * z.len()`
    // f64s at the same address with the same alignment; the borrow is carried over unchanged.
    unsafe { std::slice::from_raw_parts(z.as_ptr().cast::<f64>(), 2 * z.len()) }
}

/// Mutable form of [`as_f64`].
fn as_f64_mut(z: &mut [Complex64]) -> &mut [f64] {
    // SAFETY: as in `as_f64`; the exclusive borrow of `z` becomes the exclusive borrow of the
    // result, and every f64 bit pattern is a valid part of a complex number.
    unsafe { std::slice::from_raw_parts_mut(z.as_mut_ptr().cast::<f64>(), 2 * z.len()) }
}

/// dst[c·ds + r] = src[r·ss + c] for r < rows, c < cols, in 4 × 4 tiles so that both sides
/// are walked a cache line at a time.
#[inline]
fn transpose(
    src: &[Complex64],
    ss: usize,
    dst: &mut [Complex64],
    ds: usize,
    rows: usize,
    cols: usize,
) {
    const T: usize = 4;
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(src.len() >= (rows - 1) * ss + cols && dst.len() >= (cols - 1) * ds + rows);
    let (rt, ct) = (rows - rows % T, cols - cols % T);
    for r0 in (0..rt).step_by(T) {
        for c0 in (0..ct).step_by(T) {
            let mut tile = [[ZERO; T]; T];
            for (i, t) in tile.iter_mut().enumerate() {
                t.copy_from_slice(&src[(r0 + i) * ss + c0..(r0 + i) * ss + c0 + T]);
            }
            for j in 0..T {
                let d = &mut dst[(c0 + j) * ds + r0..(c0 + j) * ds + r0 + T];
                for i in 0..T {
                    d[i] = tile[i][j];
                }
            }
        }
        for c in ct..cols {
            for r in r0..r0 + T {
                dst[c * ds + r] = src[r * ss + c];
            }
        }
    }
    for r in rt..rows {
        for c in 0..cols {
            dst[c * ds + r] = src[r * ss + c];
        }
    }
}

/// Buffers at least this large are written with non-temporal stores (see [`store_stream`]).
/// Between the write and the read of a mixed-space buffer, the other passes stream a similar
/// amount of data, so a buffer of several MiB is evicted from the caches of a few cores anyway
/// (and bypassing them saves the read of every destination line), while a small one may still
/// be in cache for its reader. Measured on 2-core Xeon VMs: streaming helps at 128^3 (buffers
/// of 15–150 MiB) and is neutral or slightly harmful for the 1–6 MiB buffers at 64^3.
const STREAM_MIN_BYTES: usize = 8 << 20;

/// Stores `v` in `dst`; with `nt`, without first reading the destination's cache line (a
/// non-temporal store on x86-64; a plain store elsewhere or when `dst` is not 16-byte
/// aligned). For large buffers that are written in full and read back only in a later pass:
/// it halves their memory traffic. A task that used it must call [`stream_fence`] before it
/// ends.
#[inline(always)]
fn store_stream(dst: &mut Complex64, v: Complex64, nt: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_set_pd, _mm_stream_pd};
        let p = (dst as *mut Complex64).cast::<f64>();
        if nt && (p as usize).is_multiple_of(16) {
            // SAFETY: SSE2 is part of the x86-64 baseline. `p` comes from an exclusive reference
            // to a `Complex64` (`#[repr(C)]`, two f64s: 16 valid, writable bytes) and is 16-byte
            // aligned, as `_mm_stream_pd` requires. Visibility to other threads is ordered by
            // the `_mm_sfence` of `stream_fence`, which every writer task runs before it ends.
            unsafe { _mm_stream_pd(p, _mm_set_pd(v.im, v.re)) };
            return;
        }
    }
    *dst = v;
}

/// Orders the non-temporal stores of [`store_stream`] made by this thread before its later
/// stores (in particular rayon's completion signal), so that every other thread sees them.
#[inline]
fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_sfence` has no preconditions beyond SSE, part of the x86-64 baseline.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// dst[c·ds + r] = src[r·ss + c] like [`transpose`], but walking `dst` in order and writing
/// it with [`store_stream`] (non-temporal with `nt`): for destinations in large buffers, with
/// `src` in cache.
#[inline]
fn transpose_stream(
    src: &[Complex64],
    ss: usize,
    dst: &mut [Complex64],
    ds: usize,
    rows: usize,
    cols: usize,
    nt: bool,
) {
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(src.len() >= (rows - 1) * ss + cols && dst.len() >= (cols - 1) * ds + rows);
    for c in 0..cols {
        for (r, d) in dst[c * ds..c * ds + rows].iter_mut().enumerate() {
            store_stream(d, src[r * ss + c], nt);
        }
    }
}

/// Splits every slice of an array at `mid`.
fn split_all<const N: usize>(
    a: [&mut [Complex64]; N],
    mid: usize,
) -> ([&mut [Complex64]; N], [&mut [Complex64]; N]) {
    let mut right: [&mut [Complex64]; N] = std::array::from_fn(|_| Default::default());
    let mut i = 0;
    let left = a.map(|s| {
        let (l, r) = s.split_at_mut(mid);
        right[i] = r;
        i += 1;
        l
    });
    (left, right)
}

/// Calls `f(first + i, blocks_i)` in parallel for each block i of `len` elements of all the
/// slices (which have equal lengths, a multiple of `len`).
fn par_blocks<const N: usize>(
    blocks: [&mut [Complex64]; N],
    len: usize,
    first: usize,
    f: &(impl Fn(usize, [&mut [Complex64]; N]) + Sync),
) {
    let n = blocks[0].len() / len;
    match n {
        0 => {}
        1 => f(first, blocks),
        _ => {
            let mid = n / 2;
            let (l, r) = split_all(blocks, mid * len);
            rayon::join(
                || par_blocks(l, len, first, f),
                || par_blocks(r, len, first + mid, f),
            );
        }
    }
}

/// outs[g][j] = op.point(ins[·][j])[g] for every lane j; returns the maximum of the scalars
/// (at least 0). Works on blocks of four lanes held in arrays, so that the compiler keeps four
/// independent running maxima in registers and vectorises across lanes (eight lanes spill).
#[inline]
fn pointwise_lanes<const NIN: usize, const NOUT: usize>(
    op: &impl Pointwise<NIN, NOUT>,
    ins: [&[f64]; NIN],
    mut outs: [&mut [f64]; NOUT],
) -> f64 {
    const W: usize = 4;
    let lanes = ins[0].len();
    let mut acc = [0.0f64; W];
    let full = lanes - lanes % W;
    for j0 in (0..full).step_by(W) {
        let a: [[f64; W]; NIN] = std::array::from_fn(|f| {
            let mut a = [0.0; W];
            a.copy_from_slice(&ins[f][j0..j0 + W]);
            a
        });
        let mut o = [[0.0f64; W]; NOUT];
        for l in 0..W {
            let (r, s) = op.point(&std::array::from_fn(|f| a[f][l]));
            for g in 0..NOUT {
                o[g][l] = r[g];
            }
            // Not f64::max: the plain comparison vectorises; a NaN is skipped either way.
            if s > acc[l] {
                acc[l] = s;
            }
        }
        for (dst, src) in outs.iter_mut().zip(&o) {
            dst[j0..j0 + W].copy_from_slice(src);
        }
    }
    let mut smax = acc.into_iter().fold(0.0, f64::max);
    for j in full..lanes {
        let (r, s) = op.point(&std::array::from_fn(|f| ins[f][j]));
        for (dst, v) in outs.iter_mut().zip(r) {
            dst[j] = v;
        }
        smax = smax.max(s);
    }
    smax
}

/// The input of the plain inverse transform (only `input` is used).
struct Identity<'a>(&'a [Complex64]);

impl Pointwise<1, 1> for Identity<'_> {
    #[inline]
    fn input(&self, index: usize, _k: [i64; 3]) -> [Complex64; 1] {
        [self.0[index]]
    }
    #[inline]
    fn point(&self, v: &[f64; 1]) -> ([f64; 1], f64) {
        (*v, 0.0)
    }
}

/// A planned 3-D transform for one physical size M and one retained-mode cube K.
pub struct Fft3d {
    m: usize,
    layout: ModeLayout,
    fwd: Arc<dyn Fft<f64>>,
    inv: Arc<dyn Fft<f64>>,
    /// Mixed space after the inverse x pass, `[iy][x][field][kz]` (grown to the number of fields
    /// of the largest call).
    mixed_in: Vec<Complex64>,
    /// Mixed space before the forward x pass, `[x][iy][field][kz]`.
    mixed_out: Vec<Complex64>,
    /// Destination buffers of at least this many bytes get non-temporal stores
    /// ([`STREAM_MIN_BYTES`]; tests lower it to cover that path on small grids).
    stream_min_bytes: usize,
}

impl Fft3d {
    /// Plans transforms between an `m`^3 grid and the modes of `layout`. Requires 2K < M so that
    /// every retained wavenumber has its own grid frequency (no Nyquist mode is kept).
    pub fn new(m: usize, layout: ModeLayout) -> Self {
        assert!(
            2 * layout.kmax < m,
            "Fft3d: retained K = {} needs a grid of more than {} points (got {m})",
            layout.kmax,
            2 * layout.kmax
        );
        let mut planner = FftPlanner::new();
        Self {
            m,
            layout,
            fwd: planner.plan_fft_forward(m),
            inv: planner.plan_fft_inverse(m),
            mixed_in: Vec::new(),
            mixed_out: Vec::new(),
            stream_min_bytes: STREAM_MIN_BYTES,
        }
    }

    /// Physical points per dimension.
    pub fn m(&self) -> usize {
        self.m
    }

    pub fn layout(&self) -> ModeLayout {
        self.layout
    }

    /// Number of points of a physical field (M^3).
    pub fn physical_len(&self) -> usize {
        self.m * self.m * self.m
    }

    /// Whether a destination buffer of `len` complex numbers gets non-temporal stores.
    fn streams(&self, len: usize) -> bool {
        len * std::mem::size_of::<Complex64>() >= self.stream_min_bytes
    }

    fn fft_scratch_len(&self) -> usize {
        self.fwd
            .get_inplace_scratch_len()
            .max(self.inv.get_inplace_scratch_len())
    }

    /// Grid frequency of k_x (or k_y) index `i`.
    #[inline]
    fn bin(&self, i: usize) -> usize {
        let k = self.layout.kmax;
        if i <= k {
            i
        } else {
            i + self.m - self.layout.side()
        }
    }

    /// Copies the retained columns (grid frequencies 0..=K and M−K..M) of `n` lines of length M
    /// into rows `[i][line]`, `dst_stride` apart, `i` the k_x or k_y index, with
    /// [`store_stream`].
    fn pick_retained(
        &self,
        lines: &[Complex64],
        n: usize,
        dst: &mut [Complex64],
        dst_stride: usize,
        nt: bool,
    ) {
        let (m, k) = (self.m, self.layout.kmax);
        transpose_stream(lines, m, dst, dst_stride, n, k + 1, nt);
        transpose_stream(
            &lines[m - k..],
            m,
            &mut dst[(k + 1) * dst_stride..],
            dst_stride,
            n,
            k,
            nt,
        );
    }

    /// Fills `n` lines of length M from rows `[i][line]`, `src_stride` apart (`i` the k_x or k_y
    /// index): the retained grid frequencies get the rows, the others zero.
    fn place_retained(
        &self,
        src: &[Complex64],
        src_stride: usize,
        n: usize,
        lines: &mut [Complex64],
    ) {
        let (m, k) = (self.m, self.layout.kmax);
        for line in lines[..n * m].chunks_exact_mut(m) {
            line[k + 1..m - k].fill(ZERO);
        }
        transpose(src, src_stride, lines, m, k + 1, n);
        transpose(
            &src[(k + 1) * src_stride..],
            src_stride,
            &mut lines[m - k..],
            m,
            k,
            n,
        );
    }

    /// Inverse x pass: mixed[iy][x][f][kz] from the inputs of `op`.
    fn x_inverse<const NIN: usize, const NOUT: usize>(
        &self,
        mixed: &mut [Complex64],
        op: &impl Pointwise<NIN, NOUT>,
    ) {
        let (m, lay) = (self.m, self.layout);
        let (k, side, nz) = (lay.kmax, lay.side(), lay.nz());
        let fft_len = self.fft_scratch_len();
        let blk = NIN * m * nz;
        let nt = self.streams(side * blk);
        mixed[..side * blk]
            .par_chunks_mut(blk)
            .enumerate()
            .for_each(|(iy, out)| {
                with_scratch(NIN * nz * m, 0, fft_len, |lines, _, fft| {
                    for line in lines.chunks_exact_mut(m) {
                        line[k + 1..m - k].fill(ZERO);
                    }
                    // Inputs of this k_y row in 4 × 4 tiles of (k_x, k_z), written to
                    // lines[f][kz][bin(ix)].
                    let ky = lay.wavenumber(iy);
                    let base = iy * side * nz;
                    for ix0 in (0..side).step_by(4) {
                        for kz0 in (0..nz).step_by(4) {
                            for ix in ix0..(ix0 + 4).min(side) {
                                let (b, kx) = (self.bin(ix), lay.wavenumber(ix));
                                for kz in kz0..(kz0 + 4).min(nz) {
                                    let v = op.input(base + ix * nz + kz, [kx, ky, kz as i64]);
                                    for (f, &vf) in v.iter().enumerate() {
                                        lines[(f * nz + kz) * m + b] = vf;
                                    }
                                }
                            }
                        }
                    }
                    self.inv.process_with_scratch(lines, fft);
                    // lines[(f, kz)][x] -> out[x][(f, kz)]
                    transpose_stream(lines, m, out, NIN * nz, NIN * nz, m, nt);
                    stream_fence();
                });
            });
    }

    /// Inverse y pass of plane x: lines[f][kz][y] from mixed[iy][x][f][kz].
    fn y_inverse<const NIN: usize>(
        &self,
        mixed: &[Complex64],
        x: usize,
        lines: &mut [Complex64],
        fft: &mut [Complex64],
    ) {
        let (m, nz) = (self.m, self.layout.nz());
        let row = NIN * nz;
        self.place_retained(&mixed[x * row..], m * row, row, lines);
        self.inv
            .process_with_scratch(&mut lines[..NIN * nz * m], fft);
    }

    /// Builds `(n + 1) / 2` complex rows (`rows[pair][M]`) whose inverse FFTs hold the real z
    /// lines y0 + 2p in their real parts and y0 + 2p + 1 (when < y0 + n) in their imaginary
    /// parts, from the half spectra lines[kz][y] (kz ≤ K).
    #[inline]
    fn z_pack(&self, lines: &[Complex64], y0: usize, n: usize, rows: &mut [Complex64]) {
        let (m, k) = (self.m, self.layout.kmax);
        let pairs = n.div_ceil(2);
        let paired = |p: usize| 2 * p + 1 < n;
        for (p, row) in rows[..pairs * m].chunks_exact_mut(m).enumerate() {
            row[k + 1..m - k].fill(ZERO);
            // A real line has a real mean along z: drop round-off in the imaginary parts.
            let a = lines[y0 + 2 * p].re;
            let b = if paired(p) {
                lines[y0 + 2 * p + 1].re
            } else {
                0.0
            };
            row[0] = Complex64::new(a, b);
        }
        for kz in 1..=k {
            let src = &lines[kz * m + y0..kz * m + y0 + n];
            for p in 0..pairs {
                let a = src[2 * p];
                let b = if paired(p) { src[2 * p + 1] } else { ZERO };
                // A + iB and conj(A) + i conj(B).
                rows[p * m + kz] = Complex64::new(a.re - b.im, a.im + b.re);
                rows[p * m + m - kz] = Complex64::new(a.re + b.im, b.re - a.im);
            }
        }
    }

    /// From the forward FFTs `rows[pair][M]` of (line y0 + 2p) + i (line y0 + 2p + 1), stores
    /// twice the half spectra (kz ≤ K) of the `n` real lines in lines[kz][y0 + i].
    #[inline]
    fn z_unpack(&self, rows: &[Complex64], y0: usize, n: usize, lines: &mut [Complex64]) {
        let (m, k) = (self.m, self.layout.kmax);
        let pairs = n.div_ceil(2);
        for kz in 0..=k {
            let dst = &mut lines[kz * m + y0..kz * m + y0 + n];
            for p in 0..pairs {
                let (z, w) = (rows[p * m + kz], rows[p * m + (m - kz) % m]);
                // Z_k + conj Z_{−k} and −i (Z_k − conj Z_{−k}).
                dst[2 * p] = Complex64::new(z.re + w.re, z.im - w.im);
                if 2 * p + 1 < n {
                    dst[2 * p + 1] = Complex64::new(z.im + w.im, w.re - z.re);
                }
            }
        }
    }

    /// Forward y pass of plane x: transforms lines[f][kz][y] and stores the retained k_y in
    /// out[iy][f][kz] (non-temporal stores when the whole mixed-space buffer is large).
    fn y_forward<const NOUT: usize>(
        &self,
        lines: &mut [Complex64],
        out: &mut [Complex64],
        fft: &mut [Complex64],
    ) {
        let (m, nz) = (self.m, self.layout.nz());
        let nt = self.streams(NOUT * m * self.layout.side() * nz);
        self.fwd
            .process_with_scratch(&mut lines[..NOUT * nz * m], fft);
        self.pick_retained(lines, NOUT * nz, out, NOUT * nz, nt);
        stream_fence();
    }

    /// Forward x pass: from mixed[x][iy][f][kz] (holding twice the coefficients) to the retained
    /// modes of the NOUT outputs, normalised by 1/M^3 and handed to `store` mode by mode with
    /// the elements of `dst` at that mode.
    fn x_forward<const NOUT: usize, const NS: usize>(
        &self,
        mixed: &[Complex64],
        dst: [&mut [Complex64]; NS],
        store: &(impl Fn(usize, [i64; 3], [Complex64; NOUT], [&mut Complex64; NS]) + Sync),
    ) {
        let (m, lay) = (self.m, self.layout);
        let (side, nz) = (lay.side(), lay.nz());
        let fft_len = self.fft_scratch_len();
        // ½ undoes the factor 2 of `z_unpack`; multiplying by a power of two is exact.
        let norm = 0.5 / (m as f64).powi(3);
        let row = NOUT * nz;
        par_blocks(dst, side * nz, 0, &|iy, mut outs| {
            with_scratch(NOUT * nz * m, 0, fft_len, |lines, _, fft| {
                // mixed[x][iy][(f, kz)] -> lines[(f, kz)][x]
                transpose(&mixed[iy * row..], side * row, lines, m, m, row);
                self.fwd.process_with_scratch(lines, fft);
                // Retained k_x of every output, stored mode by mode.
                let ky = lay.wavenumber(iy);
                for ix in 0..side {
                    let (b, kx) = (self.bin(ix), lay.wavenumber(ix));
                    for kz in 0..nz {
                        let c = std::array::from_fn(|f| lines[(f * nz + kz) * m + b] * norm);
                        let i = ix * nz + kz;
                        let d = outs.each_mut().map(|o| &mut o[i]);
                        store((iy * side + ix) * nz + kz, [kx, ky, kz as i64], c, d);
                    }
                }
                stream_fence();
            });
        });
    }

    /// Evaluates u(x) = Σ_k û(k) e^{ik·x} at the M^3 nodes (index (i·M + j)·M + k).
    pub fn inverse(&mut self, modes: &[Complex64], phys: &mut [f64]) {
        let (m, lay) = (self.m, self.layout);
        let nz = lay.nz();
        assert_eq!(modes.len(), lay.len());
        assert_eq!(phys.len(), m * m * m);
        let fft_len = self.fft_scratch_len();
        let mut mixed = std::mem::take(&mut self.mixed_in);
        grow(&mut mixed, lay.side() * m * nz);
        self.x_inverse(&mut mixed, &Identity(modes));
        let mixed_ref = &mixed;
        phys.par_chunks_mut(m * m).enumerate().for_each(|(x, out)| {
            with_scratch(nz * m, GROUP / 2 * m, fft_len, |lines, rows, fft| {
                self.y_inverse::<1>(mixed_ref, x, lines, fft);
                for y0 in (0..m).step_by(GROUP) {
                    let n = GROUP.min(m - y0);
                    let rows = &mut rows[..n.div_ceil(2) * m];
                    self.z_pack(lines, y0, n, rows);
                    self.inv.process_with_scratch(rows, fft);
                    let dst = &mut out[y0 * m..(y0 + n) * m];
                    for (i, o) in dst.chunks_exact_mut(m).enumerate() {
                        let row = &rows[i / 2 * m..(i / 2 + 1) * m];
                        if i % 2 == 0 {
                            o.iter_mut().zip(row).for_each(|(o, z)| *o = z.re);
                        } else {
                            o.iter_mut().zip(row).for_each(|(o, z)| *o = z.im);
                        }
                    }
                }
            });
        });
        self.mixed_in = mixed;
    }

    /// Fourier coefficients of the retained modes of a physical field: û = DFT(u) / M^3.
    /// `phys` is left unchanged.
    pub fn forward(&mut self, phys: &mut [f64], modes: &mut [Complex64]) {
        let (m, lay) = (self.m, self.layout);
        let (side, nz) = (lay.side(), lay.nz());
        assert_eq!(modes.len(), lay.len());
        assert_eq!(phys.len(), m * m * m);
        let fft_len = self.fft_scratch_len();
        let mut mixed = std::mem::take(&mut self.mixed_out);
        grow(&mut mixed, m * side * nz);
        let phys = &*phys;
        mixed[..m * side * nz]
            .par_chunks_mut(side * nz)
            .enumerate()
            .for_each(|(x, out)| {
                with_scratch(nz * m, GROUP / 2 * m, fft_len, |lines, rows, fft| {
                    let src = &phys[x * m * m..(x + 1) * m * m];
                    for y0 in (0..m).step_by(GROUP) {
                        let n = GROUP.min(m - y0);
                        let rows = &mut rows[..n.div_ceil(2) * m];
                        for (p, row) in rows.chunks_exact_mut(m).enumerate() {
                            let y = y0 + 2 * p;
                            let r0 = &src[y * m..(y + 1) * m];
                            if 2 * p + 1 < n {
                                let r1 = &src[(y + 1) * m..(y + 2) * m];
                                for ((z, &a), &b) in row.iter_mut().zip(r0).zip(r1) {
                                    *z = Complex64::new(a, b);
                                }
                            } else {
                                for (z, &a) in row.iter_mut().zip(r0) {
                                    *z = Complex64::new(a, 0.0);
                                }
                            }
                        }
                        self.fwd.process_with_scratch(rows, fft);
                        self.z_unpack(rows, y0, n, lines);
                    }
                    self.y_forward::<1>(lines, out, fft);
                });
            });
        let nt = self.streams(modes.len());
        self.x_forward(&mixed, [modes], &|_, _, [c], [d]| store_stream(d, c, nt));
        self.mixed_out = mixed;
    }

    /// Fused inverse transforms, pointwise operation and forward transforms: `outputs` receive
    /// the retained modes of `op.point` applied at every node of the M^3 grid to the fields
    /// whose modes are `op.input` (what [`Fft3d::inverse`], the function on the grid and
    /// [`Fft3d::forward`] would give, up to round-off). Returns the maximum over all nodes of
    /// the scalar of `op.point`, or 0 if that is larger.
    pub fn apply_pointwise<const NIN: usize, const NOUT: usize>(
        &mut self,
        op: &impl Pointwise<NIN, NOUT>,
        outputs: [&mut [Complex64]; NOUT],
    ) -> f64 {
        let nt = self.streams(NOUT * self.layout.len());
        self.apply_pointwise_with(op, outputs, &|_, _, c, d| {
            for (d, c) in d.into_iter().zip(c) {
                store_stream(d, c, nt);
            }
        })
    }

    /// [`Fft3d::apply_pointwise`] with the storing of the outputs left to `store`: it is called
    /// once for every stored mode, with the mode's index, its wavevector, the NOUT output
    /// coefficients there and the elements of the NS slices of `dst` at that index (each slice
    /// has one element per stored mode), which it may read and write. This lets a caller
    /// combine the outputs with other data (a projection, a time-stepping stage) while they are
    /// in cache. Every `op.input` call happens before the first `store` call. Like the methods
    /// of `op`, `store` runs on the workers' per-thread scratch and must not start parallel
    /// work.
    pub fn apply_pointwise_with<const NIN: usize, const NOUT: usize, const NS: usize>(
        &mut self,
        op: &impl Pointwise<NIN, NOUT>,
        dst: [&mut [Complex64]; NS],
        store: &(impl Fn(usize, [i64; 3], [Complex64; NOUT], [&mut Complex64; NS]) + Sync),
    ) -> f64 {
        let (m, lay) = (self.m, self.layout);
        let (side, nz) = (lay.side(), lay.nz());
        assert!(NIN > 0 && NOUT > 0 && NS > 0);
        assert!(dst.iter().all(|o| o.len() == lay.len()));
        let fft_len = self.fft_scratch_len();
        let mut mixed_in = std::mem::take(&mut self.mixed_in);
        let mut mixed_out = std::mem::take(&mut self.mixed_out);
        grow(&mut mixed_in, NIN * side * m * nz);
        grow(&mut mixed_out, NOUT * m * side * nz);
        self.x_inverse(&mut mixed_in, op);
        let mixed_ref = &mixed_in;
        let nl = NIN.max(NOUT);
        let half = GROUP / 2;
        let fmax = mixed_out[..NOUT * m * side * nz]
            .par_chunks_mut(NOUT * side * nz)
            .enumerate()
            .map(|(x, out)| {
                with_scratch(
                    nl * nz * m,
                    (NIN + NOUT) * half * m,
                    fft_len,
                    |lines, rows, fft| {
                        self.y_inverse::<NIN>(mixed_ref, x, lines, fft);
                        let (zin, zout) = rows.split_at_mut(NIN * half * m);
                        let mut fmax = 0.0f64;
                        for y0 in (0..m).step_by(GROUP) {
                            let n = GROUP.min(m - y0);
                            let pairs = n.div_ceil(2);
                            let zin = &mut zin[..NIN * pairs * m];
                            let zout = &mut zout[..NOUT * pairs * m];
                            for (f, z) in zin.chunks_exact_mut(pairs * m).enumerate() {
                                self.z_pack(&lines[f * nz * m..], y0, n, z);
                            }
                            self.inv.process_with_scratch(zin, fft);
                            if n % 2 == 1 {
                                // The last pair has one row: give its imaginary part a copy of the
                                // real part, so that `point` sees only values of real nodes.
                                for z in zin.chunks_exact_mut(pairs * m) {
                                    for z in &mut z[(pairs - 1) * m..] {
                                        z.im = z.re;
                                    }
                                }
                            }
                            // Pointwise, on the real and imaginary parts alike.
                            let lanes = 2 * pairs * m;
                            let vin = as_f64(zin);
                            let ins: [&[f64]; NIN] =
                                std::array::from_fn(|f| &vin[f * lanes..(f + 1) * lanes]);
                            let mut vout = as_f64_mut(zout).chunks_exact_mut(lanes);
                            let outs: [&mut [f64]; NOUT] =
                                std::array::from_fn(|_| vout.next().unwrap_or_default());
                            fmax = fmax.max(pointwise_lanes(op, ins, outs));
                            self.fwd.process_with_scratch(zout, fft);
                            // Rows y0..y0 + n of every input line are consumed: the outputs can
                            // take their place.
                            for (g, z) in zout.chunks_exact(pairs * m).enumerate() {
                                self.z_unpack(z, y0, n, &mut lines[g * nz * m..]);
                            }
                        }
                        self.y_forward::<NOUT>(lines, out, fft);
                        fmax
                    },
                )
            })
            .reduce(|| 0.0, f64::max);
        self.x_forward(&mixed_out, dst, store);
        self.mixed_in = mixed_in;
        self.mixed_out = mixed_out;
        fmax
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Direct evaluation of Σ_k û(k) e^{ik·x} at node (i, j, l) of an m-grid (nodes at i·2π/m).
    fn direct_sum(lay: &ModeLayout, modes: &[Complex64], m: usize, p: [usize; 3]) -> f64 {
        let h = std::f64::consts::TAU / m as f64;
        let mut s = 0.0;
        lay.for_each_mode(|idx, k| {
            let phase = h * (k[0] * p[0] as i64 + k[1] * p[1] as i64 + k[2] * p[2] as i64) as f64;
            let e = Complex64::from_polar(1.0, phase);
            s += ModeLayout::weight(k[2] as usize) * (modes[idx] * e).re;
        });
        s
    }

    fn random_modes(lay: &ModeLayout, seed: u64) -> Vec<Complex64> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut v: Vec<Complex64> = (0..lay.len())
            .map(|_| Complex64::new(rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0)))
            .collect();
        lay.enforce_hermitian(&mut v);
        v
    }

    #[test]
    fn inverse_matches_direct_sum_and_forward_inverts() {
        for (m, k) in [(12, 5), (18, 5), (15, 4), (16, 7), (13, 6), (14, 4)] {
            let lay = ModeLayout::new(k);
            let modes = random_modes(&lay, 7);
            let mut fft = Fft3d::new(m, lay);
            let mut phys = vec![0.0; m * m * m];
            fft.inverse(&modes, &mut phys);
            for p in [
                [0, 0, 0],
                [1, 2, 3],
                [m - 1, 4, 2],
                [5, m - 1, m - 2],
                [2, m - 2, 1],
            ] {
                let d = direct_sum(&lay, &modes, m, p);
                let got = phys[(p[0] * m + p[1]) * m + p[2]];
                assert!((d - got).abs() < 1e-11, "m={m} p={p:?}: {d} vs {got}");
            }
            let mut back = vec![ZERO; lay.len()];
            fft.forward(&mut phys, &mut back);
            let err = back
                .iter()
                .zip(&modes)
                .map(|(a, b)| (a - b).norm())
                .fold(0.0, f64::max);
            assert!(err < 1e-13, "m={m}: round trip error {err}");
        }
    }

    #[test]
    fn forward_truncates_unretained_modes() {
        // A product of two retained modes lands partly outside the cube: forward keeps exactly
        // the retained coefficients of the exact product (no aliasing when M ≥ 3K + 1).
        let (m, k) = (16, 5);
        let lay = ModeLayout::new(k);
        let mut fft = Fft3d::new(m, lay);
        let h = std::f64::consts::TAU / m as f64;
        let mut phys = vec![0.0; m * m * m];
        for i in 0..m {
            for j in 0..m {
                for l in 0..m {
                    let (x, y, z) = (i as f64 * h, j as f64 * h, l as f64 * h);
                    // cos(4x) cos(3x) = ½ cos 7x + ½ cos x; cos 7x is not retained (K = 5).
                    phys[(i * m + j) * m + l] =
                        (4.0 * x).cos() * (3.0 * x).cos() * (2.0 * z).sin() + (y + z).cos();
                }
            }
        }
        let mut modes = vec![ZERO; lay.len()];
        fft.forward(&mut phys, &mut modes);
        let c = |k: [i64; 3]| lay.get(&modes, k);
        // ½ cos x sin 2z = (1/8 i)(e^{i(x+2z)} − e^{i(x−2z)} + e^{i(−x+2z)} − e^{−i(x+2z)})
        assert!((c([1, 0, 2]) - Complex64::new(0.0, -0.125)).norm() < 1e-14);
        assert!((c([0, 1, 1]) - Complex64::new(0.5, 0.0)).norm() < 1e-14);
        let total: f64 = modes.iter().map(|z| z.norm_sqr()).sum();
        // Retained: 4 modes of ±1/8 from cos x sin 2z (2 stored: kz = 2 > 0) and (0,1,1) stored
        // once with 1/2. Nothing else, in particular nothing from the 7x term.
        assert!((total - (2.0 * 0.015625 + 0.25)).abs() < 1e-14, "{total}");
    }

    /// Two fields in; their product, the square of the first and their sum out.
    struct Products<'a>(&'a [Complex64], &'a [Complex64]);

    impl Pointwise<2, 3> for Products<'_> {
        fn input(&self, i: usize, _k: [i64; 3]) -> [Complex64; 2] {
            [self.0[i], self.1[i]]
        }
        fn point(&self, &[x, y]: &[f64; 2]) -> ([f64; 3], f64) {
            ([x * y, x * x, x + y], x.abs())
        }
    }

    fn max_diff(a: &[Complex64], b: &[Complex64]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).norm())
            .fold(0.0, f64::max)
    }

    /// The fused pipeline gives what separate inverse transforms, the pointwise function on the
    /// grid and forward transforms give (odd and even M, M not a multiple of the row group,
    /// more outputs than inputs), and `apply_pointwise_with` hands every mode to `store` with
    /// its index and wavevector and the right elements of the destination slices.
    #[test]
    fn apply_pointwise_matches_separate_transforms() {
        for (m, k) in [(16, 5), (15, 4), (12, 5), (13, 4), (18, 5)] {
            let lay = ModeLayout::new(k);
            let a = random_modes(&lay, 1);
            let b = random_modes(&lay, 2);
            let mut fft = Fft3d::new(m, lay);
            let (mut pa, mut pb) = (vec![0.0; m * m * m], vec![0.0; m * m * m]);
            fft.inverse(&a, &mut pa);
            fft.inverse(&b, &mut pb);
            let mut grid = [
                pa.iter().zip(&pb).map(|(x, y)| x * y).collect::<Vec<_>>(),
                pa.iter().map(|x| x * x).collect(),
                pa.iter().zip(&pb).map(|(x, y)| x + y).collect(),
            ];
            let mut want: [Vec<Complex64>; 3] = std::array::from_fn(|_| vec![ZERO; lay.len()]);
            for (g, w) in grid.iter_mut().zip(&mut want) {
                fft.forward(g, w);
            }
            let amax = pa.iter().fold(0.0f64, |s, x| s.max(x.abs()));
            let mut got: [Vec<Complex64>; 3] = std::array::from_fn(|_| vec![ZERO; lay.len()]);
            let [g0, g1, g2] = &mut got;
            let gmax = fft.apply_pointwise(&Products(&a, &b), [g0, g1, g2]);
            assert!(
                (gmax - amax).abs() < 1e-12 * amax,
                "m={m}: {gmax} vs {amax}"
            );
            for (g, w) in got.iter().zip(&want) {
                let err = max_diff(g, w);
                assert!(err < 1e-13, "m={m}: fused vs separate {err:e}");
            }
            // Custom store: d0 += product / s(k), d1 = sum + index.
            let s = |k: [i64; 3]| (1 + k[0] * k[0] + 2 * k[1] * k[1] + 3 * k[2] * k[2]) as f64;
            let mut d0 = b.clone();
            let mut d1 = vec![ZERO; lay.len()];
            let smax = fft.apply_pointwise_with(
                &Products(&a, &b),
                [&mut d0, &mut d1],
                &|i, k, c: [Complex64; 3], [x, y]| {
                    *x += c[0] / s(k);
                    *y = c[2] + i as f64;
                },
            );
            assert_eq!(smax.to_bits(), gmax.to_bits());
            lay.for_each_mode(|i, k| {
                assert!((d0[i] - (b[i] + want[0][i] / s(k))).norm() < 1e-13);
                assert!((d1[i] - (want[2][i] + i as f64)).norm() < 1e-12);
            });
        }
    }

    /// Bit-identical results for one and two threads, and with or without non-temporal stores
    /// (the threshold is lowered to 0 to cover that path on a small grid).
    #[test]
    fn bit_identical_for_one_and_two_threads_and_streaming_stores() {
        let lay = ModeLayout::new(10);
        let modes = random_modes(&lay, 3);
        let other = random_modes(&lay, 4);
        let run = |threads: usize, stream_min_bytes: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut fft = Fft3d::new(32, lay);
                fft.stream_min_bytes = stream_min_bytes;
                let mut phys = vec![0.0; 32 * 32 * 32];
                fft.inverse(&modes, &mut phys);
                let mut back = vec![ZERO; lay.len()];
                let mut p2 = phys.clone();
                fft.forward(&mut p2, &mut back);
                let mut prod: [Vec<Complex64>; 3] = std::array::from_fn(|_| vec![ZERO; lay.len()]);
                let [g0, g1, g2] = &mut prod;
                let s = fft.apply_pointwise(&Products(&modes, &other), [g0, g1, g2]);
                let phys: Vec<u64> = phys.iter().map(|x| x.to_bits()).collect();
                (phys, back, prod, s.to_bits())
            })
        };
        let reference = run(1, usize::MAX);
        assert!(reference == run(2, usize::MAX));
        assert!(reference == run(1, 0));
        assert!(reference == run(2, 0));
    }
}
