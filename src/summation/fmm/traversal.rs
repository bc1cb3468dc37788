//! Dual-tree traversal (docs/physics.md §8): which source cells act on which target cells
//! through expansions (M2L) and which leaf pairs are summed directly (P2P).
//!
//! A pair of cells (A target, B source), radii r_A, r_B about centres a distance d apart, is
//! *well separated* when both
//!
//! ```text
//! r_A + r_B ≤ θ d                 (the opening criterion: the expansions converge like θ^{p+1})
//! d − r_A − r_B ≥ ρ_c σ_max(B)    (every pair is far enough that the regularised kernel equals
//!                                  1/(4πr) to the requested accuracy, §8)
//! ```
//!
//! Well-separated pairs interact by M2L; two leaves that are not go to P2P with the exact kernel;
//! otherwise the larger cell is opened (the target by passing the source on to its children).
//! The traversal runs level by level over the target tree, each cell in parallel from its
//! parent's list of near sources, and every list is in a fixed order, so every sum is
//! deterministic for any number of threads.
//!
//! **Images.** [`build_image_lists`] visits the source tree through a table of shifts (the
//! periodic box's near images, [`super::periodic`]): the target root starts with the source
//! root once per shift, a source cell seen through shift s has its centre moved by s, and every
//! list entry carries the index of its shift. [`build_lists`] is the one-shift (zero) case.

use super::tree::Octree;
use rayon::prelude::*;

/// The interaction lists of one (target tree, source tree) pair, in compressed rows.
#[derive(Debug, Clone, Default)]
pub struct InteractionLists {
    /// Source cells acting on target cell t by M2L: `m2l_sources[m2l_offsets[t]..m2l_offsets[t+1]]`.
    pub m2l_offsets: Vec<u32>,
    pub m2l_sources: Vec<u32>,
    /// Source leaves acting on the target leaf `leaves[i]` by P2P:
    /// `p2p_sources[p2p_offsets[i]..p2p_offsets[i+1]]`.
    pub p2p_offsets: Vec<u32>,
    pub p2p_sources: Vec<u32>,
}

impl InteractionLists {
    pub fn m2l_count(&self) -> usize {
        self.m2l_sources.len()
    }

    pub fn p2p_count(&self) -> usize {
        self.p2p_sources.len()
    }

    pub fn m2l_of(&self, target_cell: usize) -> &[u32] {
        &self.m2l_sources
            [self.m2l_offsets[target_cell] as usize..self.m2l_offsets[target_cell + 1] as usize]
    }

    pub fn p2p_of(&self, target_leaf: usize) -> &[u32] {
        &self.p2p_sources
            [self.p2p_offsets[target_leaf] as usize..self.p2p_offsets[target_leaf + 1] as usize]
    }

    /// Source particles summed directly, over all targets (the near-field pair count).
    pub fn p2p_pairs(&self, targets: &Octree, sources: &Octree) -> u64 {
        targets
            .leaves
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                let nt = targets.cells[l as usize].len() as u64;
                self.p2p_of(i)
                    .iter()
                    .map(|&s| nt * sources.cells[s as usize].len() as u64)
                    .sum::<u64>()
            })
            .sum()
    }
}

/// What the traversal accepts as far.
#[derive(Debug, Clone, Copy)]
pub enum Criterion {
    /// The FMM criterion of the module docs.
    Multipole { theta: f64, rho_cut: f64 },
    /// Only the near field: pairs farther apart than `cutoff` σ_max(B) are dropped (sums of a
    /// kernel that decays like a Gaussian, e.g. the blob vorticity).
    NearOnly { cutoff: f64 },
}

enum Decision {
    Far,
    Drop,
    Near,
}

/// A source cell seen through one image shift: (cell, index into the shift table).
type Candidate = (u32, u16);

fn decide(
    t: &Octree,
    s: &Octree,
    a: usize,
    (b, shift): (usize, [f64; 3]),
    criterion: Criterion,
) -> Decision {
    let (ca, cb) = (&t.cells[a], &s.cells[b]);
    let d = (0..3)
        .map(|k| (ca.center[k] - cb.center[k] - shift[k]).powi(2))
        .sum::<f64>()
        .sqrt();
    let gap = d - ca.radius - cb.radius;
    match criterion {
        Criterion::Multipole { theta, rho_cut } => {
            if ca.radius + cb.radius <= theta * d && gap >= rho_cut * cb.sigma_max {
                Decision::Far
            } else {
                Decision::Near
            }
        }
        Criterion::NearOnly { cutoff } => {
            if gap > cutoff * cb.sigma_max {
                Decision::Drop
            } else {
                Decision::Near
            }
        }
    }
}

/// The lists of one target cell.
#[derive(Default)]
struct CellLists {
    /// Sources acting by M2L.
    far: Vec<Candidate>,
    /// Sources not yet separated (passed to the children; for a leaf, its P2P leaves).
    near: Vec<Candidate>,
}

/// Resolves the candidates of target cell `a`: each is accepted (M2L), dropped, kept near when
/// it is no larger than `a` (or a leaf) and `a` has children to pass it to, or else opened.
fn resolve(
    (t, s, shifts): (&Octree, &Octree, &[[f64; 3]]),
    a: usize,
    candidates: &[Candidate],
    criterion: Criterion,
) -> CellLists {
    let ca = &t.cells[a];
    let mut out = CellLists::default();
    let mut stack: Vec<Candidate> = candidates.iter().rev().copied().collect();
    while let Some((b, shift)) = stack.pop() {
        let seen = (b as usize, shifts[shift as usize]);
        match decide(t, s, a, seen, criterion) {
            Decision::Far => out.far.push((b, shift)),
            Decision::Drop => {}
            Decision::Near => {
                let cb = &s.cells[b as usize];
                // Open the source while it is larger than the target (or the target cannot be
                // split any further); otherwise the target's children take it over.
                if !cb.is_leaf() && (ca.is_leaf() || cb.radius > ca.radius) {
                    for ch in cb.children().rev() {
                        stack.push((ch as u32, shift));
                    }
                } else {
                    out.near.push((b, shift));
                }
            }
        }
    }
    out
}

/// The interaction lists of the targets of `t` with the sources of `s`, level by level: a
/// cell's candidates are its parent's near sources; every cell of a level is resolved in
/// parallel and its lists are in a fixed order (depth first over the source tree), so the
/// result does not depend on the number of threads.
pub fn build_lists(t: &Octree, s: &Octree, criterion: Criterion) -> InteractionLists {
    build_image_lists(t, s, criterion, &[[0.0; 3]]).lists
}

/// Interaction lists whose entries each carry an image shift (module docs).
#[derive(Debug, Clone, Default)]
pub struct ImageLists {
    pub lists: InteractionLists,
    /// The shift (index into the table given to [`build_image_lists`]) of each entry of
    /// `lists.m2l_sources` and of `lists.p2p_sources`.
    pub m2l_shifts: Vec<u16>,
    pub p2p_shifts: Vec<u16>,
}

/// The lists of the targets of `t` with the sources of `s` seen through every shift of
/// `shifts` (at most 65 536): the target root's candidates are the source root once per shift,
/// in table order; otherwise as [`build_lists`].
pub fn build_image_lists(
    t: &Octree,
    s: &Octree,
    criterion: Criterion,
    shifts: &[[f64; 3]],
) -> ImageLists {
    assert!(shifts.len() <= 1 << 16, "at most 65 536 image shifts");
    let nt = t.cells.len();
    if nt == 0 || s.cells.is_empty() {
        return ImageLists {
            lists: InteractionLists {
                m2l_offsets: vec![0; nt + 1],
                p2p_offsets: vec![0; t.leaves.len() + 1],
                ..Default::default()
            },
            ..Default::default()
        };
    }
    let roots: Vec<Candidate> = (0..shifts.len()).map(|i| (0, i as u16)).collect();
    let mut far: Vec<Vec<Candidate>> = vec![Vec::new(); nt];
    let mut near: Vec<Vec<Candidate>> = vec![Vec::new(); nt];
    for lv in 0..t.depth() {
        let range = t.levels[lv].clone();
        let resolved: Vec<CellLists> = range
            .clone()
            .into_par_iter()
            .map(|a| {
                let cand: &[Candidate] = if lv == 0 {
                    &roots
                } else {
                    &near[t.cells[a].parent as usize]
                };
                resolve((t, s, shifts), a, cand, criterion)
            })
            .collect();
        for (a, r) in range.clone().zip(resolved) {
            far[a] = r.far;
            near[a] = r.near;
        }
        // Parents' near lists are no longer needed once their children are resolved.
        if lv > 0 {
            for a in t.levels[lv - 1].clone() {
                if !t.cells[a].is_leaf() {
                    near[a] = Vec::new();
                }
            }
        }
    }
    let offsets = |rows: &mut dyn Iterator<Item = usize>| -> Vec<u32> {
        let mut o = vec![0u32];
        for len in rows {
            o.push(o.last().unwrap() + len as u32);
        }
        o
    };
    let m2l_offsets = offsets(&mut far.iter().map(Vec::len));
    let p2p_offsets = offsets(&mut t.leaves.iter().map(|&l| near[l as usize].len()));
    let (m2l_sources, m2l_shifts) = far.concat().into_iter().unzip();
    let (p2p_sources, p2p_shifts) = t
        .leaves
        .iter()
        .flat_map(|&l| near[l as usize].iter().copied())
        .unzip();
    ImageLists {
        lists: InteractionLists {
            m2l_offsets,
            m2l_sources,
            p2p_offsets,
            p2p_sources,
        },
        m2l_shifts,
        p2p_shifts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Every (target particle, source particle) pair is covered exactly once, by one M2L of an
    /// ancestor pair or one P2P, and far pairs respect both criteria.
    #[test]
    fn every_pair_is_covered_once() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let x = crate::summation::fmm::tree::clustered_points(&mut rng, 3000, 3, 4.0, 0.5);
        let sigma = vec![0.02; x.len()];
        let y: Vec<[f64; 3]> = (0..500)
            .map(|_| [0, 1, 2].map(|_| 3.0 * (rng.random::<f64>() - 0.5)))
            .collect();
        let s = Octree::build(&x, Some(&sigma), 16, 0.0);
        let t = Octree::build(&y, None, 16, 0.0);
        let lists = build_lists(
            &t,
            &s,
            Criterion::Multipole {
                theta: 0.5,
                rho_cut: 5.0,
            },
        );
        assert!(lists.m2l_count() > 0 && lists.p2p_count() > 0);
        // Count coverage per (target, source) particle pair.
        let mut cover = vec![0u8; y.len() * x.len()];
        let mut mark = |tc: usize, sc: usize| {
            for i in t.cells[tc].particles() {
                for j in s.cells[sc].particles() {
                    cover[t.order[i] as usize * x.len() + s.order[j] as usize] += 1;
                }
            }
        };
        for tc in 0..t.cells.len() {
            for &sc in lists.m2l_of(tc) {
                let (a, b) = (&t.cells[tc], &s.cells[sc as usize]);
                let d = (0..3)
                    .map(|k| (a.center[k] - b.center[k]).powi(2))
                    .sum::<f64>()
                    .sqrt();
                assert!(a.radius + b.radius <= 0.5 * d);
                assert!(d - a.radius - b.radius >= 5.0 * 0.02);
                mark(tc, sc as usize);
            }
        }
        for (i, &l) in t.leaves.iter().enumerate() {
            for &sc in lists.p2p_of(i) {
                mark(l as usize, sc as usize);
            }
        }
        // An M2L into a cell covers the targets of all its descendants (its particle range).
        let bad = cover.iter().filter(|&&c| c != 1).count();
        assert_eq!(bad, 0, "{bad} particle pairs not covered exactly once");
    }
}
