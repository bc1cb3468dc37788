//! Parallel 3-D real-to-complex transforms between an M^3 physical grid and the retained modes of
//! a [`ModeLayout`] (|k_x|, |k_y|, k_z ≤ K with 2K < M).
//!
//! Normalisation follows PHYSICS.md §6: `forward` returns û with u(x) = Σ_k û(k) e^{ik·x}
//! (the DFT divided by M^3), `inverse` evaluates that sum at the M^3 nodes. With M = N this is the
//! plain transform of an N^3 field; with M = 3N/2 and K < N/2 it is the padded transform of the
//! 3/2 rule.
//!
//! The transform is done axis by axis with 1-D FFTs on contiguous lines (rustfft / realfft):
//! - inverse: x lines for each retained (k_y, k_z), then y lines for each (x, k_z ≤ K), then
//!   complex-to-real z lines for each (x, y);
//! - forward: the same in reverse order.
//!
//! Lines whose input is entirely zero padding are never transformed, and only retained modes
//! are written back, which is what makes the 2/3 truncation exact and the 3/2 rule cheap.
//! Strided axes are handled by small blocked transposes into per-thread scratch, planes are
//! handed to rayon as disjoint chunks, and each 1-D line is transformed independently of how work
//! is split, so the results are bit-identical for any number of threads.

use super::layout::ModeLayout;
use num_complex::Complex64;
use rayon::prelude::*;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};
use rustfft::{Fft, FftPlanner};
use std::cell::RefCell;
use std::sync::Arc;

const ZERO: Complex64 = Complex64 { re: 0.0, im: 0.0 };

/// Per-thread scratch, grown on first use and reused by every later transform on that thread.
#[derive(Default)]
struct Scratch {
    /// One y–z plane in mixed space: M × (M/2 + 1).
    plane: Vec<Complex64>,
    /// Lines gathered for a 1-D FFT pass: (K + 1) × M.
    lines: Vec<Complex64>,
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

/// A planned 3-D transform for one physical size M and one retained-mode cube K.
pub struct Fft3d {
    m: usize,
    mh: usize,
    layout: ModeLayout,
    fwd: Arc<dyn Fft<f64>>,
    inv: Arc<dyn Fft<f64>>,
    r2c: Arc<dyn RealToComplex<f64>>,
    c2r: Arc<dyn ComplexToReal<f64>>,
    /// Mixed-space buffer between the x pass and the y pass: L × M × (K + 1) for the inverse
    /// (`[iy][x][kz]`), M × L × (K + 1) for the forward transform (`[x][iy][kz]`).
    mixed: Vec<Complex64>,
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
        let mut rplanner = RealFftPlanner::new();
        let side = layout.side();
        Self {
            m,
            mh: m / 2 + 1,
            layout,
            fwd: planner.plan_fft_forward(m),
            inv: planner.plan_fft_inverse(m),
            r2c: rplanner.plan_fft_forward(m),
            c2r: rplanner.plan_fft_inverse(m),
            mixed: vec![ZERO; side * m * layout.nz()],
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

    /// Grid frequency index of a signed wavenumber.
    #[inline]
    fn bin(&self, k: i64) -> usize {
        k.rem_euclid(self.m as i64) as usize
    }

    fn fft_scratch_len(&self) -> usize {
        self.fwd
            .get_inplace_scratch_len()
            .max(self.inv.get_inplace_scratch_len())
            .max(self.r2c.get_scratch_len())
            .max(self.c2r.get_scratch_len())
    }

    /// Evaluates u(x) = Σ_k û(k) e^{ik·x} at the M^3 nodes (index (i·M + j)·M + k).
    pub fn inverse(&mut self, modes: &[Complex64], phys: &mut [f64]) {
        let (m, mh, lay) = (self.m, self.mh, self.layout);
        let (side, nz) = (lay.side(), lay.nz());
        assert_eq!(modes.len(), lay.len());
        assert_eq!(phys.len(), m * m * m);
        let fft_len = self.fft_scratch_len();
        let mut mixed = std::mem::take(&mut self.mixed);
        let this = &*self;
        let bins: Vec<usize> = (0..side).map(|i| this.bin(lay.wavenumber(i))).collect();

        // Pass 1: x lines, one block per retained k_y: modes[iy][ix][kz] -> mixed[iy][x][kz].
        mixed
            .par_chunks_mut(m * nz)
            .enumerate()
            .for_each(|(iy, out)| {
                SCRATCH.with(|s| {
                    let s = &mut *s.borrow_mut();
                    grow(&mut s.lines, nz * m);
                    grow(&mut s.fft, fft_len);
                    let lines = &mut s.lines[..nz * m];
                    lines.fill(ZERO);
                    let block = &modes[iy * side * nz..(iy + 1) * side * nz];
                    for (ix, &b) in bins.iter().enumerate() {
                        for kz in 0..nz {
                            lines[kz * m + b] = block[ix * nz + kz];
                        }
                    }
                    this.inv.process_with_scratch(lines, &mut s.fft[..fft_len]);
                    for x in 0..m {
                        for kz in 0..nz {
                            out[x * nz + kz] = lines[kz * m + x];
                        }
                    }
                });
            });

        // Passes 2 and 3, one x plane per task: y lines (mixed[iy][x][kz] -> plane[y][kz]), then
        // complex-to-real z lines (plane[y][..] -> phys[x][y][..]).
        let mixed_ref = &mixed;
        phys.par_chunks_mut(m * m).enumerate().for_each(|(x, out)| {
            SCRATCH.with(|s| {
                let s = &mut *s.borrow_mut();
                grow(&mut s.lines, nz * m);
                grow(&mut s.plane, m * mh);
                grow(&mut s.fft, fft_len);
                let lines = &mut s.lines[..nz * m];
                lines.fill(ZERO);
                for (iy, &b) in bins.iter().enumerate() {
                    let src = &mixed_ref[(iy * m + x) * nz..(iy * m + x + 1) * nz];
                    for kz in 0..nz {
                        lines[kz * m + b] = src[kz];
                    }
                }
                this.inv.process_with_scratch(lines, &mut s.fft[..fft_len]);
                let plane = &mut s.plane[..m * mh];
                for y in 0..m {
                    let row = &mut plane[y * mh..(y + 1) * mh];
                    for kz in 0..nz {
                        row[kz] = lines[kz * m + y];
                    }
                    row[nz..].fill(ZERO);
                    // A real field has a real mean along z; drop round-off in the imaginary
                    // part (and the Nyquist slot is zero) so the c2r input is valid.
                    row[0].im = 0.0;
                }
                for y in 0..m {
                    let row = &mut plane[y * mh..(y + 1) * mh];
                    this.c2r
                        .process_with_scratch(row, &mut out[y * m..(y + 1) * m], &mut s.fft)
                        .expect("c2r input is Hermitian by construction");
                }
            });
        });
        self.mixed = mixed;
    }

    /// Fourier coefficients of the retained modes of a physical field: û = DFT(u) / M^3.
    /// `phys` is used as scratch and left unspecified.
    pub fn forward(&mut self, phys: &mut [f64], modes: &mut [Complex64]) {
        let (m, mh, lay) = (self.m, self.mh, self.layout);
        let (side, nz) = (lay.side(), lay.nz());
        assert_eq!(modes.len(), lay.len());
        assert_eq!(phys.len(), m * m * m);
        let fft_len = self.fft_scratch_len();
        let mut mixed = std::mem::take(&mut self.mixed);
        let this = &*self;
        let bins: Vec<usize> = (0..side).map(|i| this.bin(lay.wavenumber(i))).collect();

        // Passes 1 and 2, one x plane per task: real-to-complex z lines into plane[y][kz], then y
        // lines for k_z ≤ K, keeping the retained k_y: mixed[x][iy][kz].
        mixed
            .par_chunks_mut(side * nz)
            .zip(phys.par_chunks_mut(m * m))
            .for_each(|(out, src)| {
                SCRATCH.with(|s| {
                    let s = &mut *s.borrow_mut();
                    grow(&mut s.lines, nz * m);
                    grow(&mut s.plane, m * mh);
                    grow(&mut s.fft, fft_len);
                    let plane = &mut s.plane[..m * mh];
                    for y in 0..m {
                        this.r2c
                            .process_with_scratch(
                                &mut src[y * m..(y + 1) * m],
                                &mut plane[y * mh..(y + 1) * mh],
                                &mut s.fft,
                            )
                            .expect("r2c lengths match the plan");
                    }
                    let lines = &mut s.lines[..nz * m];
                    for y in 0..m {
                        let row = &plane[y * mh..y * mh + nz];
                        for kz in 0..nz {
                            lines[kz * m + y] = row[kz];
                        }
                    }
                    this.fwd.process_with_scratch(lines, &mut s.fft[..fft_len]);
                    for (iy, &b) in bins.iter().enumerate() {
                        for kz in 0..nz {
                            out[iy * nz + kz] = lines[kz * m + b];
                        }
                    }
                });
            });

        // Pass 3: x lines, one block per retained k_y: mixed[x][iy][kz] -> modes[iy][ix][kz].
        let norm = 1.0 / (m as f64).powi(3);
        let mixed_ref = &mixed;
        modes
            .par_chunks_mut(side * nz)
            .enumerate()
            .for_each(|(iy, out)| {
                SCRATCH.with(|s| {
                    let s = &mut *s.borrow_mut();
                    grow(&mut s.lines, nz * m);
                    grow(&mut s.fft, fft_len);
                    let lines = &mut s.lines[..nz * m];
                    for x in 0..m {
                        let src = &mixed_ref[(x * side + iy) * nz..(x * side + iy + 1) * nz];
                        for kz in 0..nz {
                            lines[kz * m + x] = src[kz];
                        }
                    }
                    this.fwd.process_with_scratch(lines, &mut s.fft[..fft_len]);
                    for (ix, &b) in bins.iter().enumerate() {
                        for kz in 0..nz {
                            out[ix * nz + kz] = lines[kz * m + b] * norm;
                        }
                    }
                });
            });
        self.mixed = mixed;
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
        for (m, k) in [(12, 5), (18, 5), (15, 4), (16, 7)] {
            let lay = ModeLayout::new(k);
            let modes = random_modes(&lay, 7);
            let mut fft = Fft3d::new(m, lay);
            let mut phys = vec![0.0; m * m * m];
            fft.inverse(&modes, &mut phys);
            for p in [[0, 0, 0], [1, 2, 3], [m - 1, 4, 2], [5, m - 1, m - 2]] {
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

    #[test]
    fn bit_identical_for_one_and_two_threads() {
        let lay = ModeLayout::new(10);
        let modes = random_modes(&lay, 3);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut fft = Fft3d::new(32, lay);
                let mut phys = vec![0.0; 32 * 32 * 32];
                fft.inverse(&modes, &mut phys);
                let mut back = vec![ZERO; lay.len()];
                let mut p2 = phys.clone();
                fft.forward(&mut p2, &mut back);
                (phys, back)
            })
        };
        let (a, b) = (run(1), run(2));
        assert!(a
            .0
            .iter()
            .zip(&b.0)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
        assert!(a.1 == b.1);
    }
}
