//! The Ewald evaluator on the CPU, f64, rayon: the smooth part of `super::mesh` plus the
//! real-space pair sums over the cell lists of [`crate::summation::cells`], combined target by
//! target; the blob vorticity by the same cell lists, on the lattice by
//! [`crate::summation::lattice::lattice_vorticity`]. Method and parameters: [`super`].

use super::mesh::Mesh;
use super::params::{
    evaluation_setup, max_grid_for_memory, CostModel, EwaldParameters, CPU_BYTES_PER_GRID_POINT,
};
use crate::kernel::{gaussian_zeta, velocity, velocity_and_stretching, velocity_gradient};
use crate::summation::cells::{Neighbours, VORTICITY_CUTOFF};
use crate::summation::{
    begin_vorticity, sigma_range, stretching_from_gradient, Boundary, Evaluation, Extra, Request,
    Sources, SumResult, Summation,
};
use rayon::prelude::*;
use std::f64::consts::TAU;
use std::time::Instant;

/// Wall-clock seconds of the phases of the last evaluation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EwaldTimings {
    /// Spreading the strengths onto the grid.
    pub spread: f64,
    /// Forward transforms, multiplier, inverse transforms.
    pub transforms: f64,
    /// Interpolation back to the targets (velocity, and gradient when asked).
    pub gather: f64,
    /// Real-space sums (cell lists, pair terms) and combination.
    pub real_space: f64,
}

/// Ewald-split periodic evaluator on the box [−π, π)^3 (see the module docs).
pub struct EwaldPeriodic {
    accuracy: f64,
    /// Parameters fixed by [`EwaldPeriodic::with_parameters`] instead of planned per call.
    fixed: Option<EwaldParameters>,
    params: Option<EwaldParameters>,
    timings: EwaldTimings,
    /// Largest grid side the planner may choose (from the memory available).
    max_grid: usize,
    mesh: Mesh,
}

impl Default for EwaldPeriodic {
    fn default() -> Self {
        Self::new(1e-6)
    }
}

impl std::fmt::Debug for EwaldPeriodic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EwaldPeriodic")
            .field("accuracy", &self.accuracy)
            .field("params", &self.params)
            .finish()
    }
}

#[inline]
fn add3(a: &mut [f64; 3], b: &[f64; 3]) {
    a[0] += b[0];
    a[1] += b[1];
    a[2] += b[2];
}

#[inline]
fn sub3(a: &[f64; 3], b: &[f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

impl EwaldPeriodic {
    /// An evaluator with relative accuracy `accuracy` (vortex runs default to 1e-4,
    /// docs/physics.md §4.4; 1e-10 for references in tests). Panics unless
    /// 1e-15 ≤ accuracy < 1.
    pub fn new(accuracy: f64) -> Self {
        assert!(
            (1e-15..1.0).contains(&accuracy),
            "EwaldPeriodic: accuracy {accuracy} outside [1e-15, 1)"
        );
        Self {
            accuracy,
            fixed: None,
            params: None,
            timings: EwaldTimings::default(),
            // Total, not available, memory: the plan must not depend on the moment.
            max_grid: max_grid_for_memory(
                crate::device::host_memory_total(),
                CPU_BYTES_PER_GRID_POINT,
            ),
            mesh: Mesh::default(),
        }
    }

    /// An evaluator with fixed parameters (experiments and tests: e.g. one error term isolated
    /// by making the others negligible). `eta` must be ≥ every σ_q; `real_space_sources`,
    /// `cells_per_side`, `kmax` and `estimated_seconds` are recomputed.
    pub fn with_parameters(params: EwaldParameters) -> Self {
        let mut e = Self::new(params.accuracy);
        e.fixed = Some(params);
        e
    }

    /// The same evaluator with the grid side capped at `max_grid` (the planner sets the cap from
    /// the memory of the device, [`super::params::max_grid_for_memory`]).
    pub fn with_max_grid(mut self, max_grid: usize) -> Self {
        self.max_grid = max_grid;
        self
    }

    /// The largest grid side the planner may choose.
    pub fn max_grid(&self) -> usize {
        self.max_grid
    }

    pub fn accuracy(&self) -> f64 {
        self.accuracy
    }

    /// The parameters of the last evaluation (for logs), `None` before the first.
    pub fn parameters(&self) -> Option<&EwaldParameters> {
        self.params.as_ref()
    }

    /// Phase timings of the last evaluation.
    pub fn timings(&self) -> EwaldTimings {
        self.timings
    }
}

impl Summation for EwaldPeriodic {
    fn name(&self) -> String {
        format!("Ewald periodic CPU f64 (accuracy {:e})", self.accuracy)
    }

    fn boundary(&self) -> Boundary {
        Boundary::Periodic { length: TAU }
    }

    fn evaluate_request(&mut self, req: Request, out: &mut Evaluation) -> SumResult {
        let (sources, targets, extra) = (req.sources, req.targets, req.extra);
        let nt = targets.len();
        let want_grad = !matches!(extra, Extra::None);
        let (params, selected) = evaluation_setup(
            self.accuracy,
            self.fixed.as_ref(),
            sources,
            nt,
            want_grad,
            &CostModel::CPU,
            self.max_grid,
        )?;
        let eta = params.eta;
        let (mesh, mesh_timings) = self.mesh.evaluate(&params, sources, targets, want_grad);
        self.timings.spread = mesh_timings.spread;
        self.timings.transforms = mesh_timings.transforms;
        self.timings.gather = mesh_timings.gather;
        let t_real = Instant::now();
        let nb = Neighbours::build(sources, &selected, params.r_cut);
        self.params = Some(params);

        // Real-space part, combined with the mesh part target by target.
        match extra {
            Extra::None => {
                out.velocity[..nt]
                    .par_iter_mut()
                    .zip(targets.par_iter())
                    .zip(mesh.velocity.par_iter())
                    .for_each(|((u, x), um)| {
                        let mut acc = *um;
                        if !nb.is_empty() {
                            let mut ur = [0.0; 3];
                            nb.visit(x, |j, r| {
                                let v1 = velocity(r, nb.alpha[j], nb.sigma[j]);
                                let v2 = velocity(r, nb.alpha[j], eta);
                                add3(&mut ur, &sub3(&v1, &v2));
                            });
                            add3(&mut acc, &ur);
                        }
                        *u = acc;
                    });
            }
            Extra::Stretching { alpha, scheme } => {
                out.velocity[..nt]
                    .par_iter_mut()
                    .zip(out.stretching[..nt].par_iter_mut())
                    .zip(targets.par_iter())
                    .zip(alpha.par_iter())
                    .zip(mesh.velocity.par_iter().zip(mesh.gradient.par_iter()))
                    .for_each(|((((u, st), x), ap), (um, gm))| {
                        let mut au = *um;
                        let mut ast = stretching_from_gradient(gm, ap, scheme);
                        if !nb.is_empty() {
                            let (mut ur, mut sr) = ([0.0; 3], [0.0; 3]);
                            nb.visit(x, |j, r| {
                                let (v1, s1) = velocity_and_stretching(
                                    r,
                                    nb.alpha[j],
                                    nb.sigma[j],
                                    *ap,
                                    scheme,
                                );
                                let (v2, s2) =
                                    velocity_and_stretching(r, nb.alpha[j], eta, *ap, scheme);
                                add3(&mut ur, &sub3(&v1, &v2));
                                add3(&mut sr, &sub3(&s1, &s2));
                            });
                            add3(&mut au, &ur);
                            add3(&mut ast, &sr);
                        }
                        *u = au;
                        *st = ast;
                    });
            }
            Extra::Gradient => {
                out.velocity[..nt]
                    .par_iter_mut()
                    .zip(out.gradient[..nt].par_iter_mut())
                    .zip(targets.par_iter())
                    .zip(mesh.velocity.par_iter().zip(mesh.gradient.par_iter()))
                    .for_each(|(((u, g), x), (um, gm))| {
                        let mut au = *um;
                        let mut ag = *gm;
                        if !nb.is_empty() {
                            let (mut ur, mut gr) = ([0.0; 3], [[0.0; 3]; 3]);
                            nb.visit(x, |j, r| {
                                let (a, s) = (nb.alpha[j], nb.sigma[j]);
                                add3(&mut ur, &sub3(&velocity(r, a, s), &velocity(r, a, eta)));
                                let g1 = velocity_gradient(r, a, s);
                                let g2 = velocity_gradient(r, a, eta);
                                for i in 0..3 {
                                    add3(&mut gr[i], &sub3(&g1[i], &g2[i]));
                                }
                            });
                            add3(&mut au, &ur);
                            for i in 0..3 {
                                add3(&mut ag[i], &gr[i]);
                            }
                        }
                        *u = au;
                        *g = ag;
                    });
            }
        }
        self.timings.real_space = t_real.elapsed().as_secs_f64();
        tracing::debug!(
            "Ewald: {} ; spread {:.3} s, transforms {:.3} s, gather {:.3} s, real space {:.3} s",
            self.params.as_ref().unwrap(),
            self.timings.spread,
            self.timings.transforms,
            self.timings.gather,
            self.timings.real_space
        );
        Ok(())
    }

    fn vorticity(&mut self, src: &Sources, at: &[[f64; 3]], out: &mut Vec<[f64; 3]>) -> SumResult {
        let (sources, targets) = (src, at);
        if begin_vorticity(sources, targets, out)? {
            return Ok(());
        }
        let (_, sigma_max) = sigma_range(sources)?;
        let all: Vec<usize> = (0..sources.len()).collect();
        let nb = Neighbours::build(sources, &all, VORTICITY_CUTOFF * sigma_max);
        let c2 = VORTICITY_CUTOFF * VORTICITY_CUTOFF;
        out.par_iter_mut()
            .zip(targets.par_iter())
            .for_each(|(w, x)| {
                let mut acc = [0.0; 3];
                nb.visit(x, |j, r| {
                    let s = nb.sigma[j];
                    let r2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
                    if r2 < c2 * s * s {
                        let z = gaussian_zeta(r2, s);
                        let a = nb.alpha[j];
                        acc[0] += a[0] * z;
                        acc[1] += a[1] * z;
                        acc[2] += a[2] * z;
                    }
                });
                *w = acc;
            });
        Ok(())
    }

    /// At the lattice nodes the Gaussian's separability makes the sum several times cheaper
    /// ([`crate::summation::lattice::lattice_vorticity`]; same cutoff, agrees with [`Self::vorticity`] to
    /// its dropped tail).
    fn vorticity_on_lattice(
        &mut self,
        src: &Sources,
        n: usize,
        out: &mut Vec<[f64; 3]>,
    ) -> SumResult {
        crate::summation::lattice::lattice_vorticity(src, n, out)
    }
}
