//! The blob vorticity on the periodic lattice, by separable Gaussian weights.
//!
//! Reinitialisation (docs/physics.md §3) needs ω_h(x_i) = Σ_q α_q ζ_σq(x_i − x_q) at the n³ lattice
//! nodes x_ijk = (−π + i h, −π + j h, −π + k h), h = 2π/n. The Gaussian factorises,
//!   ζ_σ(r) = (2π)^{−3/2} σ^{−3} g(r_x) g(r_y) g(r_z),  g(s) = exp(−s²/(2σ²)),
//! so each particle contributes to the nodes of a cube around it through three short 1-D weight
//! rows: 3(2m + 1) exponentials and (2m + 1)³ multiply-adds for a half-width of m nodes, instead
//! of one exponential and a distance test per particle–node pair. The cube covers
//! |r_x|, |r_y|, |r_z| < c σ_q with c = [`VORTICITY_CUTOFF`] (it contains the sphere |r| < c σ_q
//! that the pairwise sums use, so the two agree to the dropped tail, < e^{−c²/2} of a blob's
//! peak). Periodic images come from wrapping the node index; cubes wider than the box simply
//! visit a node once per image.
//!
//! Work is split over slabs of x planes (contiguous in the `[i][j][k]` output), each slab
//! gathering the particles whose cube reaches it, so threads never write the same node and the
//! result does not depend on the thread count.

use super::cells::VORTICITY_CUTOFF;
use super::{sigma_range, Sources, SummationError};
use rayon::prelude::*;
use std::f64::consts::{PI, TAU};

/// (2π)^{−3/2}.
const GAUSS_NORM: f64 = 0.063_493_635_934_240_97;

/// The lattice nodes x_ijk = (−π + i h, −π + j h, −π + k h), h = 2π/n, in `[i][j][k]` order.
pub fn lattice_nodes(n: usize) -> Vec<[f64; 3]> {
    let h = TAU / n as f64;
    let mut v = Vec::with_capacity(n * n * n);
    for i in 0..n {
        for j in 0..n {
            for k in 0..n {
                v.push([-PI + i as f64 * h, -PI + j as f64 * h, -PI + k as f64 * h]);
            }
        }
    }
    v
}

/// One particle's cube: first unwrapped node index and count per axis.
#[derive(Clone, Copy)]
struct Cube {
    first: [i64; 3],
    count: [usize; 3],
}

fn cube(x: &[f64; 3], sigma: f64, h: f64) -> Cube {
    let reach = VORTICITY_CUTOFF * sigma;
    let mut first = [0i64; 3];
    let mut count = [0usize; 3];
    for c in 0..3 {
        // Nodes m with |−π + m h − x| < reach.
        let lo = ((x[c] - reach + PI) / h).floor() as i64 + 1;
        let hi = ((x[c] + reach + PI) / h).ceil() as i64 - 1;
        first[c] = lo;
        count[c] = (hi - lo + 1).max(0) as usize;
    }
    Cube { first, count }
}

/// Node index of unwrapped index m.
fn wrap(m: i64, n: usize) -> usize {
    m.rem_euclid(n as i64) as usize
}

/// Gaussian weights exp(−(x_m − x)²/(2σ²)) of the nodes m = first … first + count − 1.
fn weights(row: &mut Vec<f64>, first: i64, count: usize, x: f64, sigma: f64, h: f64) {
    let a = -0.5 / (sigma * sigma);
    row.clear();
    row.extend((0..count).map(|t| {
        let d = -PI + (first + t as i64) as f64 * h - x;
        (a * d * d).exp()
    }));
}

/// ω_h at the nodes of the n³ lattice (`[i][j][k]` order, as [`lattice_nodes`]), into `out`
/// (resized to n³). Sources need not be on the lattice; every core radius must be positive
/// and finite.
pub fn lattice_vorticity(
    sources: &Sources,
    n: usize,
    out: &mut Vec<[f64; 3]>,
) -> Result<(), SummationError> {
    sigma_range(sources)?;
    if n == 0 {
        out.clear();
        return Ok(());
    }
    let h = TAU / n as f64;
    let cubes: Vec<Cube> = sources
        .x
        .par_iter()
        .zip(sources.sigma.par_iter())
        .map(|(x, &s)| cube(x, s, h))
        .collect();
    // Slabs of x planes; each lists the particles whose cube reaches one of its planes.
    let slabs = n.min(4 * rayon::current_num_threads()).max(1);
    let slab_of = |i: usize| i * slabs / n;
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); slabs];
    for (q, c) in cubes.iter().enumerate() {
        // A cube as wide as the box reaches every plane within its first n.
        for t in 0..c.count[0].min(n) {
            let s = slab_of(wrap(c.first[0] + t as i64, n));
            if members[s].last().is_none_or(|&m| m as usize != q) {
                members[s].push(q as u32);
            }
        }
    }
    out.clear();
    out.resize(n * n * n, [0.0; 3]);
    // Slab s owns planes i with slab_of(i) == s: a contiguous range, so a contiguous chunk.
    let mut chunks: Vec<&mut [[f64; 3]]> = Vec::with_capacity(slabs);
    let mut rest: &mut [[f64; 3]] = out;
    let mut plane = 0;
    for s in 0..slabs {
        let end = (plane..n).find(|&i| slab_of(i) != s).unwrap_or(n);
        let (a, b) = rest.split_at_mut((end - plane) * n * n);
        chunks.push(a);
        rest = b;
        plane = end;
    }
    chunks
        .into_par_iter()
        .zip(members.par_iter())
        .enumerate()
        .for_each(|(s, (chunk, list))| {
            let i0 = (0..n).find(|&i| slab_of(i) == s).unwrap_or(n);
            let planes = chunk.len() / (n * n);
            let (mut gx, mut gy, mut gz) = (Vec::new(), Vec::new(), Vec::new());
            for &q in list {
                let q = q as usize;
                let (x, a, sigma) = (&sources.x[q], sources.alpha[q], sources.sigma[q]);
                let c = cubes[q];
                weights(&mut gx, c.first[0], c.count[0], x[0], sigma, h);
                weights(&mut gy, c.first[1], c.count[1], x[1], sigma, h);
                weights(&mut gz, c.first[2], c.count[2], x[2], sigma, h);
                let norm = GAUSS_NORM / (sigma * sigma * sigma);
                for (tx, wx) in gx.iter().enumerate() {
                    let i = wrap(c.first[0] + tx as i64, n);
                    if i < i0 || i >= i0 + planes {
                        continue;
                    }
                    let wx = wx * norm;
                    let row_i = (i - i0) * n * n;
                    for (ty, wy) in gy.iter().enumerate() {
                        let j = wrap(c.first[1] + ty as i64, n);
                        let wxy = wx * wy;
                        let row = &mut chunk[row_i + j * n..row_i + (j + 1) * n];
                        for (tz, wz) in gz.iter().enumerate() {
                            let w = wxy * wz;
                            let node = &mut row[wrap(c.first[2] + tz as i64, n)];
                            node[0] += a[0] * w;
                            node[1] += a[1] * w;
                            node[2] += a[2] * w;
                        }
                    }
                }
            }
        });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summation::ewald::EwaldPeriodic;
    use crate::summation::Summation;
    use rand::{Rng, SeedableRng};

    /// Against the pairwise cell-list sum of the CPU Ewald evaluator, for particles off the
    /// lattice with unequal cores, cores wide enough to reach across several nodes, and a
    /// lattice small enough that cubes wrap around the box.
    #[test]
    fn separable_sum_matches_pairwise_sum() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for (n, count, sigma_lo, sigma_hi) in
            [(16, 900, 0.2, 0.5), (9, 300, 0.3, 0.9), (24, 50, 0.05, 0.1)]
        {
            let x: Vec<[f64; 3]> = (0..count)
                .map(|_| std::array::from_fn(|_| rng.random_range(-PI..PI)))
                .collect();
            let alpha: Vec<[f64; 3]> = (0..count)
                .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
                .collect();
            let sigma: Vec<f64> = (0..count)
                .map(|_| rng.random_range(sigma_lo..sigma_hi))
                .collect();
            let sources = Sources {
                x: &x,
                alpha: &alpha,
                sigma: &sigma,
            };
            let mut fast = Vec::new();
            lattice_vorticity(&sources, n, &mut fast).unwrap();
            let mut pairwise = Vec::new();
            EwaldPeriodic::new(1e-6)
                .vorticity(&sources, &lattice_nodes(n), &mut pairwise)
                .unwrap();
            assert_eq!(fast.len(), n * n * n);
            let (mut num, mut den) = (0.0, 0.0);
            for (f, p) in fast.iter().zip(&pairwise) {
                for c in 0..3 {
                    num += (f[c] - p[c]) * (f[c] - p[c]);
                    den += p[c] * p[c];
                }
            }
            let rel = (num / den).sqrt();
            assert!(
                den > 0.0 && rel < 1e-10,
                "n = {n}: relative L2 difference {rel:e}"
            );
        }
    }

    #[test]
    fn does_not_depend_on_the_thread_count() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let x: Vec<[f64; 3]> = (0..500)
            .map(|_| std::array::from_fn(|_| rng.random_range(-PI..PI)))
            .collect();
        let alpha = vec![[0.3, -0.2, 0.1]; 500];
        let sigma = vec![0.3; 500];
        let sources = Sources {
            x: &x,
            alpha: &alpha,
            sigma: &sigma,
        };
        let run = |threads| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    let mut out = Vec::new();
                    lattice_vorticity(&sources, 20, &mut out).unwrap();
                    out
                })
        };
        assert_eq!(run(1), run(3));
    }
}
