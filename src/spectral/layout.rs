//! Storage of the retained Fourier modes of a real periodic field.
//!
//! A field on the box [-π, π]^3 is kept as its Fourier coefficients û(k) for the integer
//! wavevectors with |k_x|, |k_y| ≤ K and 0 ≤ k_z ≤ K (the other half follows from
//! û(−k) = conj û(k)). Every mode outside that cube is zero by construction, so dealiasing by
//! truncation needs no mask: it is the storage itself.
//!
//! Index order is `[iy][ix][kz]` (k_z fastest). This order lets the 3-D transform hand whole,
//! contiguous blocks to its threads (see [`super::fft3d`]). Always go through
//! [`ModeLayout::index`] and [`ModeLayout::wavenumber`] rather than assuming it.
//!
//! Coefficients are those of the DFT on nodes x_i = i·h. The physical grid of the project is
//! x_i = −π + i·h (docs/physics.md §6), so the coefficient of e^{ik·x} in the project's coordinates is
//! (−1)^{k_x+k_y+k_z} times the stored value; [`ModeLayout::grid_phase`] gives that sign. Energies,
//! spectra and all diagnostics are unaffected.

use num_complex::Complex64;

/// Which modes are stored and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeLayout {
    /// Largest retained |k| in each direction.
    pub kmax: usize,
}

impl ModeLayout {
    pub fn new(kmax: usize) -> Self {
        Self { kmax }
    }

    /// Number of retained k_x (or k_y) values: 2K + 1.
    pub fn side(&self) -> usize {
        2 * self.kmax + 1
    }

    /// Number of retained k_z values: K + 1.
    pub fn nz(&self) -> usize {
        self.kmax + 1
    }

    /// Number of stored complex coefficients per component.
    pub fn len(&self) -> usize {
        self.side() * self.side() * self.nz()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Signed wavenumber of a k_x or k_y index.
    #[inline]
    pub fn wavenumber(&self, i: usize) -> i64 {
        if i <= self.kmax {
            i as i64
        } else {
            i as i64 - self.side() as i64
        }
    }

    /// Index (k_x or k_y) of a signed wavenumber, `None` when it is not retained.
    #[inline]
    pub fn index_of(&self, k: i64) -> Option<usize> {
        let kmax = self.kmax as i64;
        if k.abs() > kmax {
            None
        } else if k >= 0 {
            Some(k as usize)
        } else {
            Some((k + self.side() as i64) as usize)
        }
    }

    /// Flat index of mode (ix, iy, kz).
    #[inline]
    pub fn index(&self, ix: usize, iy: usize, kz: usize) -> usize {
        (iy * self.side() + ix) * self.nz() + kz
    }

    /// Flat index of the integer wavevector k, `None` when not stored (k_z < 0 is stored as the
    /// conjugate of −k: use [`ModeLayout::get`] to read either half).
    pub fn index_of_wavevector(&self, k: [i64; 3]) -> Option<usize> {
        if k[2] < 0 || k[2] > self.kmax as i64 {
            return None;
        }
        Some(self.index(self.index_of(k[0])?, self.index_of(k[1])?, k[2] as usize))
    }

    /// Coefficient of wavevector k from stored data (either half space); zero if not retained.
    pub fn get(&self, data: &[Complex64], k: [i64; 3]) -> Complex64 {
        if k[2] >= 0 {
            self.index_of_wavevector(k)
                .map_or(Complex64::new(0.0, 0.0), |i| data[i])
        } else {
            self.index_of_wavevector([-k[0], -k[1], -k[2]])
                .map_or(Complex64::new(0.0, 0.0), |i| data[i].conj())
        }
    }

    /// Multiplicity of a stored mode in sums over all k: modes with k_z > 0 stand for
    /// themselves and their conjugate partner.
    #[inline]
    pub fn weight(kz: usize) -> f64 {
        if kz == 0 {
            1.0
        } else {
            2.0
        }
    }

    /// (−1)^{k_x+k_y+k_z}: converts between DFT coefficients (nodes at i·h) and coefficients in
    /// the project's coordinates (nodes at −π + i·h).
    #[inline]
    pub fn grid_phase(k: [i64; 3]) -> f64 {
        if (k[0] + k[1] + k[2]).rem_euclid(2) == 0 {
            1.0
        } else {
            -1.0
        }
    }

    /// Calls `f(index, [kx, ky, kz])` for every stored mode, in storage order.
    pub fn for_each_mode(&self, mut f: impl FnMut(usize, [i64; 3])) {
        let (side, nz) = (self.side(), self.nz());
        for iy in 0..side {
            let ky = self.wavenumber(iy);
            for ix in 0..side {
                let kx = self.wavenumber(ix);
                let base = (iy * side + ix) * nz;
                for kz in 0..nz {
                    f(base + kz, [kx, ky, kz as i64]);
                }
            }
        }
    }

    /// Makes the k_z = 0 plane Hermitian (û(−k) = conj û(k)) by averaging each pair, and sets the
    /// imaginary part of the mean mode to zero. Round-off in a transform can break this slightly;
    /// the state of a real field must keep it exactly.
    pub fn enforce_hermitian(&self, data: &mut [Complex64]) {
        let side = self.side();
        for iy in 0..side {
            let ky = self.wavenumber(iy);
            for ix in 0..side {
                let kx = self.wavenumber(ix);
                // Visit each pair once: the one with (ky, kx) lexicographically positive.
                if (ky, kx) <= (0, 0) {
                    continue;
                }
                let a = self.index(ix, iy, 0);
                let b = self.index(self.index_of(-kx).unwrap(), self.index_of(-ky).unwrap(), 0);
                let avg = 0.5 * (data[a] + data[b].conj());
                data[a] = avg;
                data[b] = avg.conj();
            }
        }
        data[0].im = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_round_trip() {
        let l = ModeLayout::new(5);
        let mut seen = vec![false; l.len()];
        l.for_each_mode(|i, k| {
            assert_eq!(l.index_of_wavevector(k), Some(i));
            assert!(!seen[i]);
            seen[i] = true;
        });
        assert!(seen.iter().all(|&s| s));
        assert_eq!(l.index_of(6), None);
        assert_eq!(l.index_of(-5), Some(6));
    }
}
