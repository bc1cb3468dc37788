//! Direct summation over all pairs in free space, f64, parallel over targets with rayon: one
//! loop ([`sum_over_sources`]) for every pair interaction.
//!
//! u(x_i) = Σ_q K_σq(x_i − x_q) α_q with the kernel of [`crate::kernel`] ([`DirectFreeSpace`]),
//! and softened gravity ([`DirectGravity`], [`all_pairs`] of
//! [`crate::summation::interaction::PlummerGravity`]); O(N_targets · N_sources). The exact
//! references every faster free-space evaluator is checked against.

use crate::kernel::{gaussian_zeta, velocity, velocity_and_stretching, velocity_gradient};
use crate::summation::interaction::{
    store_gravity, GravityEvaluation, GravitySummation, GravityWork, PairInteraction,
    PlummerGravity,
};
use crate::summation::{
    begin_vorticity, Boundary, Evaluation, Extra, Request, Sources, SumResult, Summation,
};
use rayon::prelude::*;

/// Targets per rayon task: large enough to amortise scheduling, small enough to balance.
const TARGET_CHUNK: usize = 64;

/// The all-pairs loop every CPU direct sum runs: `out[i]` is `pair(i, q, acc)` folded over the
/// sources q = 0, 1, … from `A::default()`, in parallel over chunks of targets and in source
/// order within each target, so the result does not depend on the number of threads.
pub fn sum_over_sources<A: Default + Send>(
    out: &mut [A],
    sources: usize,
    pair: impl Fn(usize, usize, &mut A) + Sync,
) {
    out.par_chunks_mut(TARGET_CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            for (k, o) in chunk.iter_mut().enumerate() {
                let i = c * TARGET_CHUNK + k;
                let mut acc = A::default();
                for q in 0..sources {
                    pair(i, q, &mut acc);
                }
                *o = acc;
            }
        });
}

/// All pairs of a [`PairInteraction`]: the answer at each of `targets` from the sources at `x`
/// with data `sources`, exact pairs ([`PairInteraction::add_pair`]) in source order.
pub fn all_pairs<I: PairInteraction<K>, const K: usize>(
    interaction: &I,
    x: &[[f64; 3]],
    sources: &[I::Source],
    targets: &[[f64; 3]],
) -> Vec<I::Answer> {
    let mut out = vec![I::Answer::default(); targets.len()];
    sum_over_sources(&mut out, x.len(), |i, q, acc| {
        let (t, y) = (targets[i], x[q]);
        interaction.add_pair([t[0] - y[0], t[1] - y[1], t[2] - y[2]], &sources[q], acc)
    });
    out
}

/// All-pairs evaluation in unbounded space.
#[derive(Debug, Default, Clone, Copy)]
pub struct DirectFreeSpace;

impl Summation for DirectFreeSpace {
    fn name(&self) -> String {
        "direct free-space CPU f64".into()
    }

    fn boundary(&self) -> Boundary {
        Boundary::FreeSpace
    }

    fn evaluate_request(&mut self, req: Request, out: &mut Evaluation) -> SumResult {
        let (sources, targets, extra) = (req.sources, req.targets, req.extra);
        let s = *sources;
        let n = targets.len();
        let pair_r = |i: usize, q: usize| {
            let (x, y) = (targets[i], s.x[q]);
            [x[0] - y[0], x[1] - y[1], x[2] - y[2]]
        };
        match extra {
            Extra::None => sum_over_sources(&mut out.velocity[..n], s.len(), |i, q, acc| {
                add(acc, &velocity(pair_r(i, q), s.alpha[q], s.sigma[q]))
            }),
            Extra::Stretching { alpha, scheme } => {
                let mut both = vec![([0.0; 3], [0.0; 3]); n];
                sum_over_sources(&mut both, s.len(), |i, q, (au, ast)| {
                    let (v, w) = velocity_and_stretching(
                        pair_r(i, q),
                        s.alpha[q],
                        s.sigma[q],
                        alpha[i],
                        scheme,
                    );
                    add(au, &v);
                    add(ast, &w);
                });
                for (i, (u, st)) in both.into_iter().enumerate() {
                    out.velocity[i] = u;
                    out.stretching[i] = st;
                }
            }
            Extra::Gradient => {
                let mut both = vec![([0.0; 3], [[0.0; 3]; 3]); n];
                sum_over_sources(&mut both, s.len(), |i, q, (au, ag)| {
                    let r = pair_r(i, q);
                    add(au, &velocity(r, s.alpha[q], s.sigma[q]));
                    let gq = velocity_gradient(r, s.alpha[q], s.sigma[q]);
                    for a in 0..3 {
                        add(&mut ag[a], &gq[a]);
                    }
                });
                for (i, (u, g)) in both.into_iter().enumerate() {
                    out.velocity[i] = u;
                    out.gradient[i] = g;
                }
            }
        }
        Ok(())
    }

    fn vorticity(&mut self, src: &Sources, at: &[[f64; 3]], out: &mut Vec<[f64; 3]>) -> SumResult {
        let (sources, targets) = (src, at);
        if begin_vorticity(sources, targets, out)? {
            return Ok(());
        }
        let s = *sources;
        sum_over_sources(out, s.len(), |i, q, acc| {
            let (xi, y) = (targets[i], s.x[q]);
            let r2 = (xi[0] - y[0]).powi(2) + (xi[1] - y[1]).powi(2) + (xi[2] - y[2]).powi(2);
            let z = gaussian_zeta(r2, s.sigma[q]);
            add(acc, &s.alpha[q].map(|a| a * z));
        });
        Ok(())
    }
}

/// Newtonian gravity with Plummer softening over all pairs (docs/physics.md §10), f64, rayon
/// over targets: the reference of every gravity evaluator. At ε = 0 the self pair is skipped
/// and coincident bodies are refused.
#[derive(Debug, Clone, Copy)]
pub struct DirectGravity {
    gravity: PlummerGravity,
}

impl DirectGravity {
    pub fn new(gravity: PlummerGravity) -> Self {
        Self { gravity }
    }
}

impl GravitySummation for DirectGravity {
    fn name(&self) -> String {
        format!(
            "gravity direct CPU f64 (softening {:e})",
            self.gravity.softening
        )
    }

    fn gravity(&self) -> PlummerGravity {
        self.gravity
    }

    fn evaluate_bodies(&mut self, work: GravityWork, out: &mut GravityEvaluation) -> SumResult {
        let b = work.bodies;
        let answers = all_pairs(&self.gravity, b.x, b.mass, work.points());
        store_gravity(&answers, out);
        Ok(())
    }
}

#[inline]
fn add(a: &mut [f64; 3], b: &[f64; 3]) {
    a[0] += b[0];
    a[1] += b[1];
    a[2] += b[2];
}
