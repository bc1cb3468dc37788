//! Cell lists in the periodic box [−π, π)³, shared by the real-space part of the Ewald
//! evaluators and the blob-vorticity sums: sources (a selection) wrapped into the box and
//! sorted by cell, visited from a target within a cutoff by the minimum-image convention, or
//! through explicit periodic images when the cutoff reaches π (docs/physics.md §4).

use super::Sources;
use std::f64::consts::{PI, TAU};

/// Blob-vorticity cutoff in units of σ_q: e^{−7²/2} ≈ 2.3e-11 of the blob's peak.
pub const VORTICITY_CUTOFF: f64 = 7.0;

/// The device form of [`wrap`] (`box_wrap` in `kernels/box.cuh`), a named NVRTC header.
pub const BOX_HEADER: (&str, &str) = ("box.cuh", include_str!("../../kernels/box.cuh"));

/// Wraps a coordinate into [−π, π) (on the device: [`BOX_HEADER`]).
#[inline]
pub(crate) fn wrap(x: f64) -> f64 {
    let y = (x + PI).rem_euclid(TAU) - PI;
    if y >= PI {
        y - TAU
    } else {
        y
    }
}

/// Cells per side for a cutoff: side ≥ r_cut/[`CELL_SUB`] (searched ±CELL_SUB cells), or 0 when
/// r_cut ≥ π (explicit images).
pub(crate) fn cells_for(r_cut: f64) -> usize {
    if r_cut < PI {
        ((TAU * CELL_SUB as f64 / r_cut).floor() as usize).max(2)
    } else {
        0
    }
}

/// Cells searched on each side of a target's cell: cells of side ≥ r_c/2 and a 5³ stencil
/// check 125 (r_c/2)³ ≈ 3.7 × the cutoff sphere's volume instead of 27 r_c³ ≈ 6.4 ×.
pub(crate) const CELL_SUB: usize = 2;

/// Folds a difference of two coordinates in [−π, π) into [−π, π] (minimum image).
#[inline(always)]
fn fold(r: f64) -> f64 {
    if r > PI {
        r - TAU
    } else if r < -PI {
        r + TAU
    } else {
        r
    }
}

/// Sources (a selection, wrapped into the box and reordered by cell) and the neighbour search
/// of the real-space part and of the blob vorticity.
pub(crate) struct Neighbours {
    r_cut2: f64,
    /// Cells per side; 0: no cells, explicit images.
    cells: usize,
    side: f64,
    start: Vec<usize>,
    pub(crate) x: Vec<[f64; 3]>,
    pub(crate) alpha: Vec<[f64; 3]>,
    pub(crate) sigma: Vec<f64>,
    /// Image shifts (explicit-image mode).
    shifts: Vec<[f64; 3]>,
}

impl Neighbours {
    /// Cells when r_cut < π (minimum image), explicit images otherwise.
    pub(crate) fn build(sources: &Sources, selected: &[usize], r_cut: f64) -> Self {
        let cells = cells_for(r_cut);
        let ncell = cells.max(1).pow(3);
        let side = TAU / cells.max(1) as f64;
        let xw: Vec<[f64; 3]> = selected.iter().map(|&q| sources.x[q].map(wrap)).collect();
        let cell_of = |x: &[f64; 3]| -> usize {
            if cells == 0 {
                return 0;
            }
            let c = x.map(|v| (((v + PI) / side) as usize).min(cells - 1));
            (c[0] * cells + c[1]) * cells + c[2]
        };
        // Counting sort by cell, stable (selection order within a cell).
        let mut start = vec![0usize; ncell + 1];
        let ids: Vec<usize> = xw.iter().map(cell_of).collect();
        for &c in &ids {
            start[c + 1] += 1;
        }
        for c in 0..ncell {
            start[c + 1] += start[c];
        }
        let mut fill = start.clone();
        let mut order = vec![0usize; selected.len()];
        for (k, &c) in ids.iter().enumerate() {
            order[fill[c]] = k;
            fill[c] += 1;
        }
        let mut shifts = Vec::new();
        if cells == 0 {
            let m = ((r_cut + PI) / TAU).ceil() as i64;
            for i in -m..=m {
                for j in -m..=m {
                    for k in -m..=m {
                        shifts.push([i as f64 * TAU, j as f64 * TAU, k as f64 * TAU]);
                    }
                }
            }
        }
        Self {
            r_cut2: r_cut * r_cut,
            cells,
            side,
            start,
            x: order.iter().map(|&k| xw[k]).collect(),
            alpha: order.iter().map(|&k| sources.alpha[selected[k]]).collect(),
            sigma: order.iter().map(|&k| sources.sigma[selected[k]]).collect(),
            shifts,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.x.is_empty()
    }

    /// Calls `f(j, r)` for every (image of a) stored source j with |r| < r_cut, r = x − x_j, in
    /// an order that depends only on x and the sources.
    #[inline]
    pub(crate) fn visit(&self, x: &[f64; 3], mut f: impl FnMut(usize, [f64; 3])) {
        let x = x.map(wrap);
        if self.cells == 0 {
            for (j, xj) in self.x.iter().enumerate() {
                let r0 = [0, 1, 2].map(|d| fold(x[d] - xj[d]));
                for s in &self.shifts {
                    let r = [r0[0] + s[0], r0[1] + s[1], r0[2] + s[2]];
                    if r[0] * r[0] + r[1] * r[1] + r[2] * r[2] < self.r_cut2 {
                        f(j, r);
                    }
                }
            }
            return;
        }
        let n = self.cells;
        let c = x.map(|v| (((v + PI) / self.side) as usize).min(n - 1));
        // Distinct neighbour cells per axis: c−SUB..=c+SUB (mod n), or every cell when the
        // stencil would wrap onto itself.
        let width = 2 * CELL_SUB + 1;
        let axis = |ci: usize| -> ([usize; 2 * CELL_SUB + 1], usize) {
            let mut a = [0usize; 2 * CELL_SUB + 1];
            if n >= width {
                for (k, ak) in a.iter_mut().enumerate() {
                    *ak = (ci + n + k - CELL_SUB) % n;
                }
                (a, width)
            } else {
                for (k, ak) in a.iter_mut().enumerate().take(n) {
                    *ak = k;
                }
                (a, n)
            }
        };
        let (ax, nx) = axis(c[0]);
        let (ay, ny) = axis(c[1]);
        let (az, nz) = axis(c[2]);
        for &cx in &ax[..nx] {
            for &cy in &ay[..ny] {
                for &cz in &az[..nz] {
                    let cell = (cx * n + cy) * n + cz;
                    for j in self.start[cell]..self.start[cell + 1] {
                        let xj = &self.x[j];
                        let r = [fold(x[0] - xj[0]), fold(x[1] - xj[1]), fold(x[2] - xj[2])];
                        if r[0] * r[0] + r[1] * r[1] + r[2] * r[2] < self.r_cut2 {
                            f(j, r);
                        }
                    }
                }
            }
        }
    }
}
