//! Direct summation over all pairs in free space, f64, parallel over targets with rayon.
//!
//! u(x_i) = Σ_q K_σq(x_i − x_q) α_q with the kernel of [`crate::kernel`]; O(N_targets · N_sources).
//! The exact reference every faster free-space evaluator is checked against.

use crate::kernel::{gaussian_zeta, velocity, velocity_and_stretching, velocity_gradient};
use crate::summation::{
    begin_vorticity, Boundary, Evaluation, Extra, Request, Sources, SumResult, Summation,
};
use rayon::prelude::*;

/// Targets per rayon task: large enough to amortise scheduling, small enough to balance.
const TARGET_CHUNK: usize = 64;

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
        let pair_r = |x: &[f64; 3], q: usize| {
            let y = s.x[q];
            [x[0] - y[0], x[1] - y[1], x[2] - y[2]]
        };
        match extra {
            Extra::None => {
                out.velocity[..targets.len()]
                    .par_chunks_mut(TARGET_CHUNK)
                    .zip(targets.par_chunks(TARGET_CHUNK))
                    .for_each(|(u, x)| {
                        for (ui, xi) in u.iter_mut().zip(x) {
                            let mut acc = [0.0; 3];
                            for q in 0..s.len() {
                                let v = velocity(pair_r(xi, q), s.alpha[q], s.sigma[q]);
                                add(&mut acc, &v);
                            }
                            *ui = acc;
                        }
                    });
            }
            Extra::Stretching { alpha, scheme } => {
                out.velocity[..targets.len()]
                    .par_chunks_mut(TARGET_CHUNK)
                    .zip(out.stretching[..targets.len()].par_chunks_mut(TARGET_CHUNK))
                    .zip(targets.par_chunks(TARGET_CHUNK))
                    .zip(alpha.par_chunks(TARGET_CHUNK))
                    .for_each(|(((u, st), x), ap)| {
                        for i in 0..x.len() {
                            let (mut au, mut ast) = ([0.0; 3], [0.0; 3]);
                            for q in 0..s.len() {
                                let (v, w) = velocity_and_stretching(
                                    pair_r(&x[i], q),
                                    s.alpha[q],
                                    s.sigma[q],
                                    ap[i],
                                    scheme,
                                );
                                add(&mut au, &v);
                                add(&mut ast, &w);
                            }
                            u[i] = au;
                            st[i] = ast;
                        }
                    });
            }
            Extra::Gradient => {
                out.velocity[..targets.len()]
                    .par_chunks_mut(TARGET_CHUNK)
                    .zip(out.gradient[..targets.len()].par_chunks_mut(TARGET_CHUNK))
                    .zip(targets.par_chunks(TARGET_CHUNK))
                    .for_each(|((u, g), x)| {
                        for i in 0..x.len() {
                            let (mut au, mut ag) = ([0.0; 3], [[0.0; 3]; 3]);
                            for q in 0..s.len() {
                                let r = pair_r(&x[i], q);
                                add(&mut au, &velocity(r, s.alpha[q], s.sigma[q]));
                                let gq = velocity_gradient(r, s.alpha[q], s.sigma[q]);
                                for a in 0..3 {
                                    add(&mut ag[a], &gq[a]);
                                }
                            }
                            u[i] = au;
                            g[i] = ag;
                        }
                    });
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
        out.par_chunks_mut(TARGET_CHUNK)
            .zip(targets.par_chunks(TARGET_CHUNK))
            .for_each(|(w, x)| {
                for (wi, xi) in w.iter_mut().zip(x) {
                    let mut acc = [0.0; 3];
                    for q in 0..s.len() {
                        let y = s.x[q];
                        let r2 = (xi[0] - y[0]).powi(2)
                            + (xi[1] - y[1]).powi(2)
                            + (xi[2] - y[2]).powi(2);
                        let z = gaussian_zeta(r2, s.sigma[q]);
                        add(&mut acc, &s.alpha[q].map(|a| a * z));
                    }
                    *wi = acc;
                }
            });
        Ok(())
    }
}

#[inline]
fn add(a: &mut [f64; 3], b: &[f64; 3]) {
    a[0] += b[0];
    a[1] += b[1];
    a[2] += b[2];
}
