//! The adaptive octree of the FMM (docs/physics.md §8): particles sorted by Morton (Z-order)
//! keys, cells split while they hold more than the leaf size.
//!
//! Cells are stored breadth first, level by level, so every level is one contiguous range and
//! the children of a cell are contiguous; a cell's particles are a contiguous range of the
//! sorted order. Each cell keeps its cube (centre, half side), the radius of the smallest sphere
//! about the centre that holds its particles (the opening criterion uses it) and, for source
//! trees, the largest core radius inside (the regularisation criterion of §8).

use rayon::prelude::*;

/// Bits of the Morton key per dimension (levels the tree can have).
pub const MAX_LEVEL: usize = 21;

/// One cell of the octree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    /// Centre of the cube.
    pub center: [f64; 3],
    /// Half the side of the cube.
    pub half: f64,
    /// Largest distance from the centre to a particle of the cell.
    pub radius: f64,
    /// The largest core radius among the cell's particles (0 for target-only trees).
    pub sigma_max: f64,
    /// The cell's particles: `begin..end` of the sorted order.
    pub begin: u32,
    pub end: u32,
    /// First child (cells) and the number of children (0 for a leaf).
    pub child_begin: u32,
    pub child_count: u8,
    pub level: u8,
    /// Parent cell (itself for the root).
    pub parent: u32,
}

impl Cell {
    #[inline]
    pub fn is_leaf(&self) -> bool {
        self.child_count == 0
    }

    #[inline]
    pub fn len(&self) -> usize {
        (self.end - self.begin) as usize
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.end == self.begin
    }

    #[inline]
    pub fn children(&self) -> std::ops::Range<usize> {
        self.child_begin as usize..self.child_begin as usize + self.child_count as usize
    }

    #[inline]
    pub fn particles(&self) -> std::ops::Range<usize> {
        self.begin as usize..self.end as usize
    }
}

/// An octree over a set of points.
#[derive(Debug, Clone, Default)]
pub struct Octree {
    /// Cells, breadth first; cell 0 is the root.
    pub cells: Vec<Cell>,
    /// `order[i]` is the index (in the caller's arrays) of the i-th particle in tree order.
    pub order: Vec<u32>,
    /// Cell ranges of each level, root first.
    pub levels: Vec<std::ops::Range<usize>>,
    /// The leaves, in cell order.
    pub leaves: Vec<u32>,
}

/// Interleaves the low 21 bits of x, y, z into a 63-bit Morton key (x in the lowest bit).
#[inline]
pub fn morton_key(ix: u32, iy: u32, iz: u32) -> u64 {
    fn spread(v: u32) -> u64 {
        let mut x = (v as u64) & 0x1f_ffff;
        x = (x | (x << 32)) & 0x1f00000000ffff;
        x = (x | (x << 16)) & 0x1f0000ff0000ff;
        x = (x | (x << 8)) & 0x100f00f00f00f00f;
        x = (x | (x << 4)) & 0x10c30c30c30c30c3;
        x = (x | (x << 2)) & 0x1249249249249249;
        x
    }
    spread(ix) | (spread(iy) << 1) | (spread(iz) << 2)
}

/// The root cube of a tree and its Morton grid: the bounding box's centre, half the largest
/// extent (a little more, so that no point sits on the upper face), and the map from points to
/// keys. The host build and the GPU build ([`super::gpu_tree`]) take it from the same box.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoundingCube {
    pub center: [f64; 3],
    pub half: f64,
    /// The lower corner and cells per unit length of the 2^21 grid.
    pub corner: [f64; 3],
    pub scale: f64,
}

impl BoundingCube {
    /// The cube of the box `lo`..`hi` (componentwise minima and maxima of the points).
    pub fn of(lo: [f64; 3], hi: [f64; 3]) -> Self {
        let center = [0, 1, 2].map(|k| 0.5 * (lo[k] + hi[k]));
        let extent = (0..3).map(|k| hi[k] - lo[k]).fold(0.0f64, f64::max);
        // A little larger than the points so that none sits on the upper face.
        let half = 0.5 * extent * (1.0 + 1e-9) + f64::MIN_POSITIVE.max(1e-300);
        let scale = (1u64 << MAX_LEVEL) as f64 / (2.0 * half);
        let corner = [0, 1, 2].map(|k| center[k] - half);
        Self {
            center,
            half,
            corner,
            scale,
        }
    }

    /// The 63-bit Morton key of `p`: its grid cell, clamped to the grid.
    #[inline]
    pub fn key(&self, p: &[f64; 3]) -> u64 {
        let max_index = (1u32 << MAX_LEVEL) - 1;
        let q = [0, 1, 2].map(|k| (((p[k] - self.corner[k]) * self.scale) as u32).min(max_index));
        morton_key(q[0], q[1], q[2])
    }
}

impl Octree {
    /// Builds the tree of the points `x` (core radii `sigma`, or `None` for targets): leaves hold
    /// at most `leaf_size` particles unless their side would fall below `min_side` or the key
    /// runs out of levels. Deterministic for any number of threads.
    pub fn build(x: &[[f64; 3]], sigma: Option<&[f64]>, leaf_size: usize, min_side: f64) -> Self {
        let n = x.len();
        if n == 0 {
            return Self::default();
        }
        let (lo, hi) = x
            .par_iter()
            .fold(
                || ([f64::INFINITY; 3], [f64::NEG_INFINITY; 3]),
                |(mut lo, mut hi), p| {
                    for k in 0..3 {
                        lo[k] = lo[k].min(p[k]);
                        hi[k] = hi[k].max(p[k]);
                    }
                    (lo, hi)
                },
            )
            .reduce(
                || ([f64::INFINITY; 3], [f64::NEG_INFINITY; 3]),
                |a, b| {
                    (
                        [0, 1, 2].map(|k| a.0[k].min(b.0[k])),
                        [0, 1, 2].map(|k| a.1[k].max(b.1[k])),
                    )
                },
            );
        let cube = BoundingCube::of(lo, hi);
        let mut keyed: Vec<(u64, u32)> = x
            .par_iter()
            .enumerate()
            .map(|(i, p)| (cube.key(p), i as u32))
            .collect();
        keyed.par_sort_unstable();
        let order: Vec<u32> = keyed.iter().map(|k| k.1).collect();
        let keys: Vec<u64> = keyed.iter().map(|k| k.0).collect();

        let mut cells = vec![Cell {
            center: cube.center,
            half: cube.half,
            radius: 0.0,
            sigma_max: 0.0,
            begin: 0,
            end: n as u32,
            child_begin: 0,
            child_count: 0,
            level: 0,
            parent: 0,
        }];
        let mut levels: Vec<std::ops::Range<usize>> = Vec::with_capacity(MAX_LEVEL + 1);
        levels.push(0..1);
        let mut level = 0;
        loop {
            let range = levels[level].clone();
            let mut next = Vec::new();
            for ci in range.clone() {
                let c = cells[ci];
                let split =
                    c.len() > leaf_size && level < MAX_LEVEL && 2.0 * c.half >= 2.0 * min_side;
                if !split {
                    continue;
                }
                let shift = 3 * (MAX_LEVEL - 1 - level);
                let child_begin = cells.len() + next.len();
                let mut count = 0u8;
                let mut start = c.begin as usize;
                let end = c.end as usize;
                while start < end {
                    let digit = (keys[start] >> shift) & 7;
                    let stop =
                        start + keys[start..end].partition_point(|&k| (k >> shift) & 7 <= digit);
                    let h = 0.5 * c.half;
                    let child_center =
                        [0, 1, 2].map(|k| c.center[k] + if (digit >> k) & 1 == 1 { h } else { -h });
                    next.push(Cell {
                        center: child_center,
                        half: h,
                        radius: 0.0,
                        sigma_max: 0.0,
                        begin: start as u32,
                        end: stop as u32,
                        child_begin: 0,
                        child_count: 0,
                        level: (level + 1) as u8,
                        parent: ci as u32,
                    });
                    count += 1;
                    start = stop;
                }
                cells[ci].child_begin = child_begin as u32;
                cells[ci].child_count = count;
            }
            if next.is_empty() {
                break;
            }
            let begin = cells.len();
            cells.extend(next);
            levels.push(begin..cells.len());
            level += 1;
        }

        // Radii and core maxima of the leaves from their particles, then upwards.
        let leaves: Vec<u32> = (0..cells.len() as u32)
            .filter(|&c| cells[c as usize].is_leaf())
            .collect();
        let leaf_props: Vec<(f64, f64)> = leaves
            .par_iter()
            .map(|&c| {
                let cell = &cells[c as usize];
                let mut r2 = 0.0f64;
                let mut s = 0.0f64;
                for i in cell.particles() {
                    let p = x[order[i] as usize];
                    let d2 = (0..3).map(|k| (p[k] - cell.center[k]).powi(2)).sum::<f64>();
                    r2 = r2.max(d2);
                    if let Some(sig) = sigma {
                        s = s.max(sig[order[i] as usize]);
                    }
                }
                (r2.sqrt(), s)
            })
            .collect();
        for (&c, &(r, s)) in leaves.iter().zip(&leaf_props) {
            cells[c as usize].radius = r;
            cells[c as usize].sigma_max = s;
        }
        for l in (0..levels.len()).rev() {
            for ci in levels[l].clone() {
                let c = cells[ci];
                if c.is_leaf() {
                    continue;
                }
                let mut r = 0.0f64;
                let mut s = 0.0f64;
                for k in c.children() {
                    let ch = &cells[k];
                    let d = (0..3)
                        .map(|a| (ch.center[a] - c.center[a]).powi(2))
                        .sum::<f64>()
                        .sqrt();
                    r = r.max(d + ch.radius);
                    s = s.max(ch.sigma_max);
                }
                // Never larger than the cube's circumscribed sphere.
                cells[ci].radius = r.min(c.half * 3f64.sqrt());
                cells[ci].sigma_max = s;
            }
        }
        Self {
            cells,
            order,
            levels,
            leaves,
        }
    }

    /// Number of levels (root = level 0).
    pub fn depth(&self) -> usize {
        self.levels.len()
    }
}

/// `n` points in cubes about the origin, every `every`-th in one of side `far` and the others in
/// one of side `near`: the tests' clustered sets.
#[cfg(test)]
pub(crate) fn clustered_points(
    rng: &mut impl rand::Rng,
    n: usize,
    every: usize,
    far: f64,
    near: f64,
) -> Vec<[f64; 3]> {
    (0..n)
        .map(|i| {
            let s = if i % every == 0 { far } else { near };
            [0, 1, 2].map(|_| s * (rng.random::<f64>() - 0.5))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn morton_key_interleaves_bits() {
        assert_eq!(morton_key(1, 0, 0), 1);
        assert_eq!(morton_key(0, 1, 0), 2);
        assert_eq!(morton_key(0, 0, 1), 4);
        assert_eq!(morton_key(3, 0, 0), 0b1001);
        assert_eq!(morton_key(0x1f_ffff, 0, 0) >> 60, 1);
    }

    #[test]
    fn bounding_cube_holds_the_box_and_keys_clamp() {
        let c = BoundingCube::of([-1.0, 0.0, 2.0], [1.0, 0.5, 2.0]);
        assert_eq!(c.center, [0.0, 0.25, 2.0]);
        assert!(c.half > 1.0 && c.half < 1.0 + 1e-8);
        assert_eq!(c.corner[0], -c.half);
        // The lowest corner has key 0, the highest point the largest cell, outside points clamp.
        assert_eq!(c.key(&c.corner), 0);
        let top = morton_key(0x1f_ffff, 0x1f_ffff, 0x1f_ffff);
        assert_eq!(
            c.key(&[c.corner[0] + 2.0 * c.half; 3].map(|v| v + 10.0)),
            top
        );
        assert_eq!(c.key(&[-1e300, -1e300, -1e300]), 0);
        assert!(c.key(&[1.0, 0.5, 2.0]) <= top);
        // A single point: a tiny cube about it (its key 0).
        let one = BoundingCube::of([3.0; 3], [3.0; 3]);
        assert!(one.half > 0.0 && one.key(&[3.0; 3]) == 0);
    }

    #[test]
    fn cells_partition_the_particles_and_contain_them() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        // Clustered: most points in a small ball, a few far away.
        let x = clustered_points(&mut rng, 5000, 10, 3.0, 0.05);
        let sigma: Vec<f64> = (0..5000).map(|i| 0.01 + 1e-6 * i as f64).collect();
        let t = Octree::build(&x, Some(&sigma), 32, 0.0);
        let mut seen = vec![false; x.len()];
        for &i in &t.order {
            assert!(!seen[i as usize]);
            seen[i as usize] = true;
        }
        let mut covered = 0;
        for &l in &t.leaves {
            let c = &t.cells[l as usize];
            assert!(c.len() <= 32 && !c.is_empty());
            covered += c.len();
            for i in c.particles() {
                let p = x[t.order[i] as usize];
                for (pk, ck) in p.iter().zip(c.center) {
                    assert!((pk - ck).abs() <= c.half * (1.0 + 1e-12));
                }
                let d = (0..3)
                    .map(|k| (p[k] - c.center[k]).powi(2))
                    .sum::<f64>()
                    .sqrt();
                assert!(d <= c.radius * (1.0 + 1e-12));
                assert!(sigma[t.order[i] as usize] <= c.sigma_max);
            }
        }
        assert_eq!(covered, x.len());
        for (ci, c) in t.cells.iter().enumerate() {
            if !c.is_leaf() {
                let kids: usize = c.children().map(|k| t.cells[k].len()).sum();
                assert_eq!(kids, c.len());
                for k in c.children() {
                    assert_eq!(t.cells[k].parent as usize, ci);
                    assert!(t.cells[k].radius <= c.radius + 1e-12);
                }
            }
        }
        // Adaptive: the dense cluster is refined much deeper than the sparse shell.
        assert!(t.depth() > 5, "{}", t.depth());
        assert_eq!(Octree::build(&x, Some(&sigma), 32, 0.0).order, t.order);
    }
}
