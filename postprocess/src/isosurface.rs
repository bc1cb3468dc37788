//! Isosurfaces of periodic scalar grids by marching tetrahedra.
//!
//! The grid has n³ nodes x_i = −π + i·h (h = 2π/n) in each direction, node
//! n being node 0 again (periodic, not stored). Every cell between
//! neighbouring nodes, the ones across the wrap included, is split into six
//! tetrahedra around its main diagonal (the Kuhn triangulation). Neighbouring
//! cells split their shared face the same way, so the surface is watertight,
//! and a tetrahedron has no ambiguous case: it is cut by one triangle or by
//! one quadrilateral (two triangles).
//!
//! Triangles are streamed to a visitor cell by cell, in a fixed order, so
//! that a grid of 256³ nodes (about 10⁷ triangles at a typical level) never
//! needs the whole mesh in memory.

use anyhow::{bail, Result};
use std::f32::consts::PI;

/// A scalar field on a periodic n³ grid covering [−π, π)³, borrowed.
#[derive(Clone, Copy, Debug)]
pub struct PeriodicGrid<'a> {
    n: usize,
    values: &'a [f32],
}

impl<'a> PeriodicGrid<'a> {
    /// The field of `values`, in C order: index (i·n + j)·n + k holds node
    /// (x_i, y_j, z_k).
    ///
    /// # Errors
    ///
    /// `n < 2`, or `values` not holding n³ values.
    pub fn new(n: usize, values: &'a [f32]) -> Result<Self> {
        if n < 2 {
            bail!("a periodic grid needs n >= 2 nodes per direction, got n = {n}");
        }
        let expected = n.checked_mul(n).and_then(|m| m.checked_mul(n));
        if expected != Some(values.len()) {
            bail!(
                "{} values do not make an n³ grid with n = {n}",
                values.len()
            );
        }
        Ok(Self { n, values })
    }

    /// Nodes per direction.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Node spacing h = 2π/n.
    pub fn spacing(&self) -> f32 {
        2.0 * PI / self.n as f32
    }

    /// The value at node (i, j, k), each index taken modulo n.
    pub fn at(&self, i: usize, j: usize, k: usize) -> f32 {
        let n = self.n;
        self.values[((i % n) * n + j % n) * n + k % n]
    }

    /// ∇f at node (i, j, k) by central differences across the periodic
    /// boundary (indices taken modulo n).
    pub fn gradient(&self, i: usize, j: usize, k: usize) -> [f32; 3] {
        let n = self.n;
        let (i, j, k) = (i % n, j % n, k % n);
        let (ip, im) = ((i + 1) % n, (i + n - 1) % n);
        let (jp, jm) = ((j + 1) % n, (j + n - 1) % n);
        let (kp, km) = ((k + 1) % n, (k + n - 1) % n);
        let f = |i: usize, j: usize, k: usize| self.values[(i * n + j) * n + k];
        let s = 0.5 / self.spacing();
        [
            (f(ip, j, k) - f(im, j, k)) * s,
            (f(i, jp, k) - f(i, jm, k)) * s,
            (f(i, j, kp) - f(i, j, km)) * s,
        ]
    }
}

/// One triangle of an isosurface.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Triangle {
    /// Corner positions in [−π, π]³.
    pub vertices: [[f32; 3]; 3],
    /// Unit normals at the corners, −∇f/|∇f| interpolated from the grid
    /// nodes: they point towards decreasing values (out of the regions
    /// above the level). Zero where the gradient vanishes or is not finite.
    pub normals: [[f32; 3]; 3],
}

impl Triangle {
    /// The triangle's area.
    pub fn area(&self) -> f32 {
        let c = cross(
            sub(self.vertices[1], self.vertices[0]),
            sub(self.vertices[2], self.vertices[0]),
        );
        0.5 * dot(c, c).sqrt()
    }
}

/// The six tetrahedra of a cell, as corner numbers c = dx + 2·dy + 4·dz:
/// each runs from corner 0 to corner 7 along one path of cell edges.
/// Every edge joins corners a < b whose bits are nested (a ⊂ b).
const TETS: [[usize; 4]; 6] = [
    [0, 1, 3, 7],
    [0, 1, 5, 7],
    [0, 2, 3, 7],
    [0, 2, 6, 7],
    [0, 4, 5, 7],
    [0, 4, 6, 7],
];

/// Call `visit` with every triangle of the surface f = `level` of `grid`,
/// oriented so that (v1 − v0) × (v2 − v0) points towards decreasing f.
///
/// "Inside" is f > `level`. Cells are visited with i (x) slowest and k (z)
/// fastest, the six tetrahedra of a cell in a fixed order, so the sequence
/// of triangles is the same on every run. A cell with a non-finite corner
/// value is skipped; a non-finite level gives no triangles.
pub fn for_each_triangle(grid: &PeriodicGrid<'_>, level: f32, mut visit: impl FnMut(&Triangle)) {
    if !level.is_finite() {
        return;
    }
    let n = grid.n;
    let v = grid.values;
    let h = grid.spacing();
    let coord = |i: usize| -PI + i as f32 * h;
    for i in 0..n {
        let i1 = (i + 1) % n;
        for j in 0..n {
            let j1 = (j + 1) % n;
            let rows = [
                (i * n + j) * n,
                (i1 * n + j) * n,
                (i * n + j1) * n,
                (i1 * n + j1) * n,
            ];
            for k in 0..n {
                let k1 = (k + 1) % n;
                let f = [
                    v[rows[0] + k],
                    v[rows[1] + k],
                    v[rows[2] + k],
                    v[rows[3] + k],
                    v[rows[0] + k1],
                    v[rows[1] + k1],
                    v[rows[2] + k1],
                    v[rows[3] + k1],
                ];
                let inside = f.iter().filter(|&&x| x > level).count();
                if inside == 0 || inside == 8 || f.iter().any(|x| !x.is_finite()) {
                    continue;
                }
                let mut cell = Cell {
                    f,
                    pos: [[0.0; 3]; 8],
                    grad: [[0.0; 3]; 8],
                    level,
                };
                for c in 0..8 {
                    let (dx, dy, dz) = (c & 1, (c >> 1) & 1, (c >> 2) & 1);
                    // Positions from the unwrapped node number, so the wrap
                    // cells reach x = π and shared vertices agree bit for bit.
                    cell.pos[c] = [coord(i + dx), coord(j + dy), coord(k + dz)];
                    cell.grad[c] = grid.gradient(i + dx, j + dy, k + dz);
                }
                for tet in &TETS {
                    cell.tetrahedron(tet, &mut visit);
                }
            }
        }
    }
}

/// The corners of one cell crossed by the surface.
struct Cell {
    f: [f32; 8],
    pos: [[f32; 3]; 8],
    grad: [[f32; 3]; 8],
    level: f32,
}

impl Cell {
    /// The surface point on the edge between corners `a` and `b`, and its
    /// unit normal. Always interpolated from the lower corner number, so the
    /// neighbouring cells sharing the edge get the same bits.
    fn edge_point(&self, a: usize, b: usize) -> ([f32; 3], [f32; 3]) {
        let (a, b) = if a < b { (a, b) } else { (b, a) };
        // One end is above the level and one is not, so the difference is
        // not zero and t is in [0, 1].
        let t = (self.level - self.f[a]) / (self.f[b] - self.f[a]);
        let lerp = |p: [f32; 3], q: [f32; 3]| {
            [
                p[0] + t * (q[0] - p[0]),
                p[1] + t * (q[1] - p[1]),
                p[2] + t * (q[2] - p[2]),
            ]
        };
        let g = lerp(self.grad[a], self.grad[b]);
        let len = dot(g, g).sqrt();
        let normal = if len.is_finite() && len > 0.0 {
            [-g[0] / len, -g[1] / len, -g[2] / len]
        } else {
            [0.0; 3]
        };
        (lerp(self.pos[a], self.pos[b]), normal)
    }

    /// Emit the triangles cutting tetrahedron `tet`.
    fn tetrahedron(&self, tet: &[usize; 4], visit: &mut impl FnMut(&Triangle)) {
        let mut ins = [0usize; 4];
        let mut outs = [0usize; 4];
        let (mut ni, mut no) = (0, 0);
        for &c in tet {
            if self.f[c] > self.level {
                ins[ni] = c;
                ni += 1;
            } else {
                outs[no] = c;
                no += 1;
            }
        }
        // A direction from the inside to the outside, to orient triangles.
        let out_dir = |a: usize, b: usize| sub(self.pos[b], self.pos[a]);
        match (ni, no) {
            (1, 3) => {
                let a = ins[0];
                let d = out_dir(a, outs[0]);
                self.emit([(a, outs[0]), (a, outs[1]), (a, outs[2])], d, visit);
            }
            (3, 1) => {
                let b = outs[0];
                let d = out_dir(ins[0], b);
                self.emit([(ins[0], b), (ins[1], b), (ins[2], b)], d, visit);
            }
            (2, 2) => {
                let (a, b, c, e) = (ins[0], ins[1], outs[0], outs[1]);
                let d = out_dir(a, c);
                // The quad ac, ae, be, bc, cut along ac–be.
                self.emit([(a, c), (a, e), (b, e)], d, visit);
                self.emit([(a, c), (b, e), (b, c)], d, visit);
            }
            _ => {}
        }
    }

    /// Emit the triangle through the surface points of three edges, wound so
    /// that its normal has a positive component along `out`.
    fn emit(&self, edges: [(usize, usize); 3], out: [f32; 3], visit: &mut impl FnMut(&Triangle)) {
        let (p0, n0) = self.edge_point(edges[0].0, edges[0].1);
        let (p1, n1) = self.edge_point(edges[1].0, edges[1].1);
        let (p2, n2) = self.edge_point(edges[2].0, edges[2].1);
        let face = cross(sub(p1, p0), sub(p2, p0));
        let tri = if dot(face, out) >= 0.0 {
            Triangle {
                vertices: [p0, p1, p2],
                normals: [n0, n1, n2],
            }
        } else {
            Triangle {
                vertices: [p0, p2, p1],
                normals: [n0, n2, n1],
            }
        };
        visit(&tri);
    }
}

pub(crate) fn sub(a: [f32; 3], b: [f32; 3]) -> [f32; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

pub(crate) fn dot(a: [f32; 3], b: [f32; 3]) -> f32 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

pub(crate) fn cross(a: [f32; 3], b: [f32; 3]) -> [f32; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tetrahedron edge always joins nested corners, so shared faces of
    /// neighbouring cells are split alike.
    #[test]
    fn tetrahedra_edges_are_nested() {
        for tet in &TETS {
            for a in 0..4 {
                for b in a + 1..4 {
                    let (x, y) = (tet[a], tet[b]);
                    assert!(x < y && x & y == x, "{tet:?}");
                }
            }
        }
    }

    #[test]
    fn bad_grids_are_errors() {
        assert!(PeriodicGrid::new(1, &[0.0]).is_err());
        assert!(PeriodicGrid::new(3, &[0.0; 26]).is_err());
        assert!(PeriodicGrid::new(usize::MAX, &[]).is_err());
        assert!(PeriodicGrid::new(2, &[0.0; 8]).is_ok());
    }

    #[test]
    fn non_finite_values_and_levels_are_skipped() {
        let mut v = vec![0.0f32; 64];
        v[0] = 1.0;
        let g = PeriodicGrid::new(4, &v).unwrap();
        let mut count = 0;
        for_each_triangle(&g, 0.5, |_| count += 1);
        assert!(count > 0);
        let mut none = 0;
        for_each_triangle(&g, f32::NAN, |_| none += 1);
        for_each_triangle(&g, f32::INFINITY, |_| none += 1);
        assert_eq!(none, 0);
        v[1] = f32::NAN;
        let g = PeriodicGrid::new(4, &v).unwrap();
        for_each_triangle(&g, 0.5, |t| {
            assert!(t.vertices.iter().flatten().all(|x| x.is_finite()));
        });
    }
}
