//! The slab decomposition of the spectral solver over several ranks (GPUs, or threads in the
//! host mirror): which x planes, which retained modes and which chunks of the all-to-all
//! transpose each rank holds (docs/physics.md §5.6).
//!
//! The 3-D transforms of the solver are split at their natural boundary (the pruned transforms
//! of [`super::gpu`]): the real (y, z) transforms act on one x plane at a time, the complex x
//! transforms on one line (k_y, k_z) at a time. So with P ranks on the product grid M:
//! - **slab side** (physical space, the (y, z) transforms): rank q holds the x planes
//!   `x_range(q)` = [q·M/P, (q+1)·M/P) of every field, as half spectra `[x_local][y][k_z]`
//!   (M × (M/2 + 1) per plane, cuFFT's D2Z layout) and real fields `[x_local][y][z]`;
//! - **pencil side** (the x transforms and the modes): rank r holds the k_z values
//!   `kz_range(r)` (a contiguous split of 0..=K, the first (K+1) mod P ranks one more), and for
//!   them every retained k_y: the pencil buffer `[x or k_x (M)][iy (2K+1)][kz_local]` per field,
//!   and its retained modes in the **local compact layout** `[iy][ix][kz_local]` (the
//!   [`super::ModeLayout`] order with nz replaced by `nz_local(r)`).
//!
//! Only retained modes travel: the transpose moves, for every pair (slab rank q, pencil rank r),
//! the chunk `[x_local (M/P)][iy (2K+1)][kz_local (nz_local(r))]`. Because x is outermost on the
//! pencil side, the chunk of slab rank q is one contiguous block there (at
//! [`SlabLayout::pencil_chunk_offset`]); on the slab side the chunks of the P pencil ranks lie
//! one after the other in the **exchange buffer** (at [`SlabLayout::exchange_chunk_offset`]),
//! and packing / unpacking moves them between it and the half spectra. With F fields in one
//! transpose, field f of a buffer starts at f·[`SlabLayout::pencil_len`] (pencil side) or
//! f·[`SlabLayout::exchange_len`] (slab side).
//!
//! The k_z = 0 plane (the only one with a Hermitian constraint) lies wholly on rank 0, so the
//! symmetry is enforced without communication. Every reduction is a per-rank partial added in
//! rank order, so the results do not depend on timing.

use super::layout::ModeLayout;
use super::solver::{SpectralGrid, VectorModes};
use num_complex::Complex64;
use std::ops::Range;

/// Why a grid cannot be split over the ranks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlabError {
    #[error(
        "the product grid {m}³ cannot be split into {ranks} slabs: {m} is not divisible by \
         {ranks} (choose n so that the grid where products are formed, n for 2/3 and 3n/2 for \
         3/2, is a multiple of the number of GPUs)"
    )]
    PlanesNotDivisible { m: usize, ranks: usize },
    #[error(
        "{ranks} ranks are more than the {nz} retained k_z values (K = {kmax}): use fewer GPUs \
         or a larger n"
    )]
    TooFewModes {
        ranks: usize,
        nz: usize,
        kmax: usize,
    },
    #[error(
        "the solution grid {n}³ (where max |∇·u|, max |ω| and the velocity field are \
         evaluated) cannot be split into {ranks} slabs: {n} is not divisible by {ranks} \
         (choose n as a multiple of the number of GPUs)"
    )]
    SolutionPlanesNotDivisible { n: usize, ranks: usize },
    #[error("the number of ranks must be at least 1")]
    NoRanks,
}

/// The split of one product grid over `ranks` (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlabLayout {
    /// Points per dimension of the product grid M.
    pub m: usize,
    /// Largest retained |k_i|.
    pub kmax: usize,
    /// Number of ranks P.
    pub ranks: usize,
}

impl SlabLayout {
    /// The split of the M³ grid holding modes |k_i| ≤ `kmax` over `ranks`; M must be a
    /// multiple of the ranks and every rank must get at least one k_z value.
    pub fn new(m: usize, kmax: usize, ranks: usize) -> Result<Self, SlabError> {
        if ranks == 0 {
            return Err(SlabError::NoRanks);
        }
        if !m.is_multiple_of(ranks) {
            return Err(SlabError::PlanesNotDivisible { m, ranks });
        }
        if kmax + 1 < ranks {
            return Err(SlabError::TooFewModes {
                ranks,
                nz: kmax + 1,
                kmax,
            });
        }
        Ok(SlabLayout { m, kmax, ranks })
    }

    /// The split of the N³ solution grid of `grid` (the diagnostics on the grid: max |∇·u|,
    /// max |ω|, the velocity field) over `ranks`; the product grid's split when N = M.
    pub fn solution(grid: SpectralGrid, ranks: usize) -> Result<Self, SlabError> {
        SlabLayout::new(grid.n, grid.kmax(), ranks).map_err(|e| match e {
            SlabError::PlanesNotDivisible { m, ranks } => {
                SlabError::SolutionPlanesNotDivisible { n: m, ranks }
            }
            e => e,
        })
    }

    /// The splits a solver for `grid` on `ranks` needs: the product grid's (the step's
    /// transposes) and, when N differs from it (the 3/2 rule), the solution grid's (the
    /// diagnostics on the N³ nodes). Both grids must be multiples of the ranks.
    pub fn for_grid(
        grid: SpectralGrid,
        ranks: usize,
    ) -> Result<(SlabLayout, Option<SlabLayout>), SlabError> {
        let product = SlabLayout::new(grid.product_grid(), grid.kmax(), ranks)?;
        let solution = if grid.n != grid.product_grid() {
            Some(SlabLayout::solution(grid, ranks)?)
        } else {
            None
        };
        Ok((product, solution))
    }

    /// The global mode layout.
    pub fn modes(&self) -> ModeLayout {
        ModeLayout::new(self.kmax)
    }

    /// Retained k_x (or k_y) values: 2K + 1.
    pub fn side(&self) -> usize {
        2 * self.kmax + 1
    }

    /// x planes per rank: M / P.
    pub fn planes(&self) -> usize {
        self.m / self.ranks
    }

    /// Complex values per plane of a half spectrum: M·(M/2 + 1).
    pub fn half_plane(&self) -> usize {
        self.m * (self.m / 2 + 1)
    }

    /// The x planes slab rank `q` holds.
    pub fn x_range(&self, q: usize) -> Range<usize> {
        q * self.planes()..(q + 1) * self.planes()
    }

    /// The k_z values pencil rank `r` holds.
    pub fn kz_range(&self, r: usize) -> Range<usize> {
        let nz = self.kmax + 1;
        let (base, extra) = (nz / self.ranks, nz % self.ranks);
        let start = r * base + r.min(extra);
        start..start + base + usize::from(r < extra)
    }

    /// Number of k_z values of pencil rank `r`.
    pub fn nz_local(&self, r: usize) -> usize {
        self.kz_range(r).len()
    }

    /// The rank holding k_z.
    pub fn rank_of_kz(&self, kz: usize) -> usize {
        (0..self.ranks)
            .find(|&r| self.kz_range(r).contains(&kz))
            .expect("kz ≤ K")
    }

    /// Retained modes of pencil rank `r` per component: side²·nz_local(r).
    pub fn local_len(&self, r: usize) -> usize {
        self.side() * self.side() * self.nz_local(r)
    }

    /// Index in rank `r`'s local compact layout of mode (ix, iy, kz_local).
    #[inline]
    pub fn local_index(&self, r: usize, ix: usize, iy: usize, kz_local: usize) -> usize {
        (iy * self.side() + ix) * self.nz_local(r) + kz_local
    }

    /// Complex values per field of rank `r`'s pencil buffer: M·side·nz_local(r).
    pub fn pencil_len(&self, r: usize) -> usize {
        self.m * self.side() * self.nz_local(r)
    }

    /// Index in rank `r`'s pencil buffer (one field) of x (or the DFT index of k_x), iy and
    /// kz_local.
    #[inline]
    pub fn pencil_index(&self, r: usize, x: usize, iy: usize, kz_local: usize) -> usize {
        (x * self.side() + iy) * self.nz_local(r) + kz_local
    }

    /// Complex values of the chunk between any slab rank and pencil rank `r` (one field):
    /// planes·side·nz_local(r).
    pub fn chunk_len(&self, r: usize) -> usize {
        self.planes() * self.side() * self.nz_local(r)
    }

    /// Where, in pencil rank `r`'s buffer (one field), the chunk of slab rank `q` starts.
    pub fn pencil_chunk_offset(&self, r: usize, q: usize) -> usize {
        q * self.chunk_len(r)
    }

    /// Complex values per field of a slab rank's exchange buffer: planes·side·(K + 1) (the
    /// chunks of all pencil ranks).
    pub fn exchange_len(&self) -> usize {
        self.planes() * self.side() * (self.kmax + 1)
    }

    /// Where, in a slab rank's exchange buffer (one field), the chunk of pencil rank `r` starts.
    pub fn exchange_chunk_offset(&self, r: usize) -> usize {
        (0..r).map(|p| self.chunk_len(p)).sum()
    }

    /// Index in a slab rank's exchange buffer (one field) of x_local, iy and k_z (global).
    #[inline]
    pub fn exchange_index(&self, x_local: usize, iy: usize, kz: usize) -> usize {
        let r = self.rank_of_kz(kz);
        let kzl = kz - self.kz_range(r).start;
        self.exchange_chunk_offset(r) + (x_local * self.side() + iy) * self.nz_local(r) + kzl
    }

    /// The DFT row y (0..M) of the half spectrum holding compact index iy.
    #[inline]
    pub fn row_of(&self, iy: usize) -> usize {
        let ky = self.modes().wavenumber(iy);
        ky.rem_euclid(self.m as i64) as usize
    }

    /// Index in a slab rank's half spectra (one field) of x_local, DFT row y and k_z.
    #[inline]
    pub fn half_index(&self, x_local: usize, y: usize, kz: usize) -> usize {
        (x_local * self.m + y) * (self.m / 2 + 1) + kz
    }

    /// Packs (slab side, after the forward (y, z) transforms) the retained rows of the half
    /// spectra `half` (planes·M·(M/2+1) per field, `fields` fields) into the exchange buffer
    /// `exchange` (exchange_len per field). The host form of the GPU's pack kernel.
    pub fn pack(&self, fields: usize, half: &[Complex64], exchange: &mut [Complex64]) {
        let hp = self.planes() * self.half_plane();
        let el = self.exchange_len();
        for f in 0..fields {
            for xl in 0..self.planes() {
                for iy in 0..self.side() {
                    let y = self.row_of(iy);
                    for kz in 0..=self.kmax {
                        exchange[f * el + self.exchange_index(xl, iy, kz)] =
                            half[f * hp + self.half_index(xl, y, kz)];
                    }
                }
            }
        }
    }

    /// Unpacks (slab side, before the inverse (y, z) transforms) the exchange buffer into the
    /// half spectra, writing zero at every position that holds no retained row or k_z (every
    /// position is written). The host form of the GPU's unpack kernel.
    pub fn unpack(&self, fields: usize, exchange: &[Complex64], half: &mut [Complex64]) {
        let hp = self.planes() * self.half_plane();
        let el = self.exchange_len();
        let mh = self.m / 2 + 1;
        for f in 0..fields {
            half[f * hp..(f + 1) * hp].fill(Complex64::new(0.0, 0.0));
            for xl in 0..self.planes() {
                for iy in 0..self.side() {
                    let y = self.row_of(iy);
                    for kz in 0..(self.kmax + 1).min(mh) {
                        half[f * hp + self.half_index(xl, y, kz)] =
                            exchange[f * el + self.exchange_index(xl, iy, kz)];
                    }
                }
            }
        }
    }

    /// The modes of pencil rank `r` cut out of a global field (local compact layout).
    pub fn local_modes(&self, r: usize, global: &VectorModes) -> VectorModes {
        let g = self.modes();
        let kz = self.kz_range(r);
        std::array::from_fn(|c| {
            let mut out = Vec::with_capacity(self.local_len(r));
            for iy in 0..self.side() {
                for ix in 0..self.side() {
                    let base = g.index(ix, iy, 0);
                    out.extend_from_slice(&global[c][base + kz.start..base + kz.end]);
                }
            }
            out
        })
    }

    /// The global field from the modes of every rank, in rank order.
    pub fn global_modes(&self, parts: &[VectorModes]) -> VectorModes {
        assert_eq!(parts.len(), self.ranks);
        let g = self.modes();
        std::array::from_fn(|c| {
            let mut out = vec![Complex64::new(0.0, 0.0); g.len()];
            for (r, part) in parts.iter().enumerate() {
                let kz = self.kz_range(r);
                let nzl = kz.len();
                for iy in 0..self.side() {
                    for ix in 0..self.side() {
                        let base = g.index(ix, iy, 0);
                        let local = self.local_index(r, ix, iy, 0);
                        out[base + kz.start..base + kz.end]
                            .copy_from_slice(&part[c][local..local + nzl]);
                    }
                }
            }
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kz_ranges_cover_every_value_once_and_chunks_tile_the_buffers() {
        for (m, kmax, ranks) in [(12, 3, 4), (18, 8, 3), (16, 5, 2), (24, 7, 1), (32, 10, 4)] {
            let s = SlabLayout::new(m, kmax, ranks).unwrap();
            let mut next = 0;
            for r in 0..ranks {
                assert_eq!(s.kz_range(r).start, next);
                next = s.kz_range(r).end;
                assert!(s.nz_local(r) >= 1);
                assert_eq!(s.pencil_len(r), ranks * s.chunk_len(r));
            }
            assert_eq!(next, kmax + 1);
            let total: usize = (0..ranks).map(|r| s.chunk_len(r)).sum();
            assert_eq!(total, s.exchange_len());
            // Every exchange index is hit exactly once.
            let mut seen = vec![false; s.exchange_len()];
            for xl in 0..s.planes() {
                for iy in 0..s.side() {
                    for kz in 0..=kmax {
                        let i = s.exchange_index(xl, iy, kz);
                        assert!(!seen[i]);
                        seen[i] = true;
                    }
                }
            }
            assert!(seen.iter().all(|&v| v));
        }
    }

    #[test]
    fn pack_then_unpack_keeps_the_retained_rows_and_zeroes_the_rest() {
        let s = SlabLayout::new(12, 3, 3).unwrap();
        let hp = s.planes() * s.half_plane();
        let half: Vec<Complex64> = (0..2 * hp)
            .map(|i| Complex64::new(i as f64, -(i as f64)))
            .collect();
        let mut ex = vec![Complex64::new(f64::NAN, 0.0); 2 * s.exchange_len()];
        s.pack(2, &half, &mut ex);
        assert!(ex.iter().all(|z| z.re.is_finite()));
        let mut back = vec![Complex64::new(f64::NAN, 0.0); 2 * hp];
        s.unpack(2, &ex, &mut back);
        let g = s.modes();
        for f in 0..2 {
            for xl in 0..s.planes() {
                for y in 0..s.m {
                    for kz in 0..s.m / 2 + 1 {
                        let i = f * hp + s.half_index(xl, y, kz);
                        let ky = if y <= s.m / 2 {
                            y as i64
                        } else {
                            y as i64 - s.m as i64
                        };
                        let kept = kz <= s.kmax && g.index_of(ky).is_some();
                        let want = if kept {
                            half[i]
                        } else {
                            Complex64::new(0.0, 0.0)
                        };
                        assert_eq!(back[i], want, "f {f} x {xl} y {y} kz {kz}");
                    }
                }
            }
        }
    }

    #[test]
    fn local_modes_round_trip_through_the_ranks() {
        let s = SlabLayout::new(16, 5, 4).unwrap();
        let g = s.modes();
        let global: VectorModes = std::array::from_fn(|c| {
            (0..g.len())
                .map(|i| Complex64::new((c * g.len() + i) as f64, 1.0))
                .collect()
        });
        let parts: Vec<VectorModes> = (0..4).map(|r| s.local_modes(r, &global)).collect();
        for (r, p) in parts.iter().enumerate() {
            assert_eq!(p[0].len(), s.local_len(r));
            // Spot check: mode (ix, iy, kz) of rank r is the global one.
            let kz = s.kz_range(r).start;
            assert_eq!(
                p[1][s.local_index(r, 3, 7, 0)],
                global[1][g.index(3, 7, kz)]
            );
        }
        assert_eq!(s.global_modes(&parts), global);
    }

    #[test]
    fn bad_splits_are_refused_with_the_reason() {
        assert_eq!(
            SlabLayout::new(18, 5, 4),
            Err(SlabError::PlanesNotDivisible { m: 18, ranks: 4 })
        );
        assert!(matches!(
            SlabLayout::new(8, 2, 4),
            Err(SlabError::TooFewModes { .. })
        ));
        assert_eq!(SlabLayout::new(8, 2, 0), Err(SlabError::NoRanks));
        let e = SlabLayout::new(18, 5, 4).unwrap_err().to_string();
        assert!(e.contains("not divisible by 4"), "{e}");
    }
}
