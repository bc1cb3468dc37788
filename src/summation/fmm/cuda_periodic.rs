//! The periodic FMM on one GPU: [`super::CudaFmm`]'s periodic mode ([`super::CudaFmm::periodic`]), the CPU's
//! method ([`super::FmmPeriodic`], module docs of [`super::periodic`]) on the free-space GPU
//! engine ([`super::cuda`]), which it shares kernel for kernel:
//!
//! * **The box.** Positions (and other targets) are wrapped into [−π, π)³ on the device
//!   ([`GpuTree::wrap`], bit for bit the host's `wrap`) and the trees are built on them: the
//!   root cube is the wrapped points' bounding cube, as the CPU's.
//! * **Near images through the lists**: built on the device through the 729 shifts of S_2
//!   ([`GpuTree::set_images`]; equal to the host's
//!   [`build_image_lists`](super::traversal::build_image_lists), shift for shift); M2L
//!   translates from the shifted source centre, P2P moves the sources by their entry's shift
//!   (relative to the target leaf's centre in f64, before the f32 rounding).
//! * **Far images**: after the upward pass the source root's multipole (order p, 3 charges: a
//!   few hundred doubles) comes to the host, [`LatticeSum::local_from_multipole`] runs there
//!   while the GPU does M2L, and the local expansion at the target root goes back and is added
//!   to the root's before L2L (`fmm_add_root`). The CPU sums the box's multipole at the lattice
//!   order P ≥ p; here its degrees above p are dropped, which changes the far images' field by
//!   about (0.87/4.5)^{p+1} of the box multipole's (tested below against the CPU's form).
//! * **The vacuum term** ([`VacuumTerm`]): D and Q are the root multipole's degree-0 and -1
//!   moments ([`VacuumTerm::from_multipole`]: the device's P2M and M2M are the reduction, in
//!   f64); the affine velocity c + G x and its constant gradient G are subtracted on the device
//!   after the near field (`fmm_vacuum`), so the answer is the Ewald sum's (zero mean
//!   velocity), also when Σα ≠ 0.
//!
//! The resident form ([`crate::summation::DeviceSummation`]) runs the same steps on resident
//! particles. The built-in check compares a sample with the CPU's Ewald sum at a tenth of the
//! request ([`CHECK_REFINEMENT`]), which also sums the blob vorticity.

use super::expansions::coefficient_count;
use super::gpu_tree::GpuTree;
use super::params::FmmParams;
use super::periodic::{
    describe_engine, lattice_order, name_of, near_shifts, LatticeSum, VacuumTerm, CHECK_REFINEMENT,
    LATTICE_LEVELS, NEAR_LEVEL,
};
use crate::device::buffer::DeviceBuffer;
use crate::device::cuda::{launch, CudaError, Gpu};
use crate::device::sort::cfg_items;
use crate::summation::ewald::EwaldPeriodic;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, PushKernelArg};
use num_complex::Complex64 as C64;
use std::sync::Arc;

/// The engine in the periodic GPU FMM's name.
pub const GPU_ENGINE: &str = "GPU (f64 expansions, f32 near field)";

/// What the periodic box adds to [`super::CudaFmm`] (module docs): the far images' lattice sum, the
/// image shifts, the Ewald sum the check compares with, and the device buffers of the wrapped
/// points and of the root's terms.
pub(super) struct Periodic {
    pub(super) lattice: LatticeSum,
    pub(super) near_level: u32,
    /// The built-in check's reference; also sums the blob vorticity.
    pub(super) ewald: EwaldPeriodic,
    /// The sources' and the other targets' positions wrapped into the box (3 per point).
    x: DeviceBuffer<f64>,
    targets: DeviceBuffer<f64>,
    /// The far images' local expansion at the target root (order p, 3 charges, f64 pairs).
    root_local: DeviceBuffer<f64>,
    /// The vacuum term's c (3) and G (9, row-major): u_vac − u_Ewald = c + G x.
    pub(super) vacuum: DeviceBuffer<f64>,
    /// The source root's multipole, downloaded after the upward pass.
    mult: Vec<f64>,
}

impl Periodic {
    /// The images of S_`NEAR_LEVEL` and the lattice sum for `params`; the shift table goes to
    /// `tree`.
    pub(super) fn new(params: &FmmParams, tree: &mut GpuTree) -> Result<Self, CudaError> {
        let order = lattice_order(params.accuracy, params.order);
        tree.set_images(&near_shifts(NEAR_LEVEL))?;
        Ok(Self {
            lattice: LatticeSum::new(order, LATTICE_LEVELS, NEAR_LEVEL),
            near_level: NEAR_LEVEL,
            ewald: EwaldPeriodic::new((CHECK_REFINEMENT * params.accuracy).max(1e-13)),
            x: DeviceBuffer::new(),
            targets: DeviceBuffer::new(),
            root_local: DeviceBuffer::new(),
            vacuum: DeviceBuffer::new(),
            mult: Vec::new(),
        })
    }

    /// The engine's name with its images and `params`.
    pub(super) fn name(&self, params: &FmmParams) -> String {
        name_of(GPU_ENGINE, self.near_level, &self.lattice, params)
    }

    /// Queues the wrapping of the `n` sources at `x` and of the other targets (3 per point)
    /// into the box; the wrapped arrays to build the trees on.
    #[allow(clippy::type_complexity)]
    pub(super) fn wrap<'a>(
        &'a mut self,
        tree: &GpuTree,
        (x, n): (&CudaSlice<f64>, usize),
        targets: Option<(&CudaSlice<f64>, usize)>,
    ) -> Result<(&'a CudaSlice<f64>, Option<(&'a CudaSlice<f64>, usize)>), CudaError> {
        tree.wrap(x, n, &mut self.x)?;
        if let Some((t, nt)) = targets {
            tree.wrap(t, nt, &mut self.targets)?;
        }
        Ok((
            self.x.get(),
            targets.map(|(_, nt)| (self.targets.get(), nt)),
        ))
    }

    /// After the upward pass: downloads the source root's multipole (cell 0 of `mult`, order
    /// `p`, 3 charges; waits for the GPU).
    pub(super) fn fetch_root(
        &mut self,
        gpu: &Gpu,
        mult: &DeviceBuffer<f64>,
        p: usize,
    ) -> Result<(), CudaError> {
        self.mult.resize(2 * 3 * coefficient_count(p), 0.0);
        mult.download(gpu, &mut self.mult, "the root multipole")
    }

    /// Once M2L is queued: the far images' local expansion about the target root's centre and
    /// the vacuum term from the downloaded root multipole (about the source root's centre) on
    /// the host, uploaded; the local added to the target root's (cell 0 of `local`) by
    /// `add_root`.
    pub(super) fn add_root_local(
        &mut self,
        s: &Arc<CudaStream>,
        add_root: &CudaFunction,
        (source_root, target_root): ([f64; 3], [f64; 3]),
        p: usize,
        local: &mut DeviceBuffer<f64>,
    ) -> Result<(), CudaError> {
        let (root, vacuum) = root_terms(&self.lattice, &self.mult, source_root, target_root, p);
        self.root_local
            .upload(s, &root, "the far images' local expansion")?;
        self.vacuum.upload(s, &vacuum, "the vacuum term")?;
        let entries = 3 * coefficient_count(p);
        // SAFETY: fmm_add_root(add, local): add holds 3·NC complex values (uploaded above),
        // local at least those of the target root (cell 0); one thread per value.
        launch!(s, add_root, "fmm_add_root", cfg_items(entries, 128);
            self.root_local.get(), local.get_mut())?;
        Ok(())
    }
}

/// The host's part of one evaluation (module docs): from the source root's multipole `mult`
/// (f64 pairs, order `p`, 3 charges, about `source_root`), the far images' local expansion
/// about `target_root` (f64 pairs, order p) and the vacuum term's c and G (u_vac − u_Ewald =
/// c + G x: c at 0..3, G row-major at 3..12).
pub(super) fn root_terms(
    lattice: &LatticeSum,
    mult: &[f64],
    source_root: [f64; 3],
    target_root: [f64; 3],
    p: usize,
) -> (Vec<f64>, [f64; 12]) {
    let m: Vec<C64> = mult.chunks(2).map(|c| C64::new(c[0], c[1])).collect();
    let local = lattice.local_from_multipole(&m, source_root, target_root, p);
    let vac = VacuumTerm::from_multipole(&m, source_root);
    let (c, g) = (vac.velocity([0.0; 3]), vac.gradient());
    let mut terms = [0.0; 12];
    terms[..3].copy_from_slice(&c);
    for (k, row) in g.iter().enumerate() {
        terms[3 + 3 * k..6 + 3 * k].copy_from_slice(row);
    }
    (local.iter().flat_map(|v| [v.re, v.im]).collect(), terms)
}

/// What [`super::CudaFmm::periodic`] with `params` is, in words (its name): for the planner.
pub fn describe(params: &FmmParams) -> String {
    describe_engine(GPU_ENGINE, params)
}

#[cfg(test)]
mod tests {
    use super::super::expansions::{coefficient_count, l2p, m2m, p2m, Workspace};
    use super::super::periodic::{lattice_order, LatticeSum, VacuumTerm, LATTICE_LEVELS};
    use super::*;
    use crate::summation::cells::wrap;
    use crate::summation::interaction::PotentialDerivatives;
    use rand::{Rng, SeedableRng};

    /// Random sources in the box with Σα = 0 and not.
    fn sources(n: usize, neutral: bool) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let x: Vec<[f64; 3]> = (0..n)
            .map(|_| [0, 1, 2].map(|_| wrap(7.0 * (rng.random::<f64>() - 0.5))))
            .collect();
        let mut a: Vec<[f64; 3]> = (0..n)
            .map(|_| [0, 1, 2].map(|_| rng.random::<f64>() - 0.5))
            .collect();
        if neutral {
            let mean: [f64; 3] =
                std::array::from_fn(|k| a.iter().map(|v| v[k]).sum::<f64>() / n as f64);
            a.iter_mut()
                .for_each(|v| *v = std::array::from_fn(|k| v[k] - mean[k]));
        }
        (x, a)
    }

    /// A multipole of order `p` about `at` (flat f64 pairs, as the GPU's).
    fn multipole(x: &[[f64; 3]], a: &[[f64; 3]], at: [f64; 3], p: usize) -> Vec<f64> {
        let mut m = vec![C64::new(0.0, 0.0); 3 * coefficient_count(p)];
        p2m::<3>(&mut Workspace::new(p), at, x, a, &mut m);
        m.iter().flat_map(|v| [v.re, v.im]).collect()
    }

    #[test]
    fn the_vacuum_moments_come_from_the_root_multipole() {
        for neutral in [true, false] {
            let (x, a) = sources(500, neutral);
            let at = [0.03, -0.02, 0.011];
            let want = VacuumTerm::of(&x, &a);
            let m: Vec<C64> = multipole(&x, &a, at, 3)
                .chunks(2)
                .map(|c| C64::new(c[0], c[1]))
                .collect();
            let got = VacuumTerm::from_multipole(&m, at);
            let scale = want.d.iter().flatten().fold(0.0f64, |s, v| s.max(v.abs()));
            for l in 0..3 {
                assert!((got.q[l] - want.q[l]).abs() <= 1e-13 * scale.max(1e-300));
                for j in 0..3 {
                    assert!(
                        (got.d[l][j] - want.d[l][j]).abs() <= 1e-12 * scale,
                        "D[{l}][{j}]: {} vs {}",
                        got.d[l][j],
                        want.d[l][j]
                    );
                }
            }
            // c + G x is the velocity, G the gradient.
            let (_, vac) = root_terms(
                &LatticeSum::new(4, 2, NEAR_LEVEL),
                &multipole(&x, &a, at, 4),
                at,
                [0.0; 3],
                4,
            );
            let xt = [1.1, -2.0, 0.4];
            let u = want.velocity(xt);
            let g = want.gradient();
            for k in 0..3 {
                let affine = vac[k] + (0..3).map(|m| vac[3 + 3 * k + m] * xt[m]).sum::<f64>();
                assert!((affine - u[k]).abs() <= 1e-12 * scale, "u[{k}]");
                for m in 0..3 {
                    assert!((vac[3 + 3 * k + m] - g[k][m]).abs() <= 1e-12 * scale);
                }
            }
        }
    }

    /// The GPU's pipeline in f64 on the host (a mirror): the trees and image lists of the
    /// wrapped points, the far images and the vacuum term from the root multipole at the tree's
    /// order about the source root's centre ([`root_terms`]), c + G x and G subtracted; equal to
    /// the CPU periodic FMM's answer (P2M at the lattice order, [`VacuumTerm::of`]) to 1e-9,
    /// with Σα ≠ 0.
    #[test]
    fn the_gpu_pipeline_in_f64_matches_the_cpu_periodic_fmm() {
        use super::super::cpu::evaluate_biot_savart;
        use super::super::params::{plan_parameters, FmmBackend};
        use super::super::periodic::near_shifts;
        use super::super::{FmmPeriodic, Structure};
        use crate::summation::verify::{flat9, rel_l2, Particles};
        use crate::summation::{Evaluation, Extra, Request, Sources, Summation};
        let mut p = Particles::random_in_box(500, 1.2, 0.1, 0.3, 4);
        p.alpha.iter_mut().for_each(|a| a[1] += 0.2);
        let accuracy = 1e-7;
        let params = plan_parameters(accuracy, FmmBackend::Cpu).unwrap();
        let order = params.order;
        let lattice = LatticeSum::new(lattice_order(accuracy, order), LATTICE_LEVELS, NEAR_LEVEL);
        let x: Vec<[f64; 3]> = p.x.iter().map(|v| v.map(wrap)).collect();
        let src = Sources {
            x: &x,
            alpha: &p.alpha,
            sigma: &p.sigma,
        };
        let req = Request {
            sources: &src,
            targets: &x,
            extra: Extra::Gradient,
        };
        let n = x.len();
        let mut got = Evaluation {
            velocity: vec![[0.0; 3]; n],
            gradient: vec![[[0.0; 3]; 3]; n],
            ..Default::default()
        };
        let mut vac = [0.0; 12];
        evaluate_biot_savart(
            &params,
            &req,
            &mut got,
            |near| Structure::build_images((&x, &p.sigma), &x, &params, near, near_shifts(2)),
            |st| {
                let (cs, ct) = (st.sources.cells[0].center, st.targets().cells[0].center);
                let m = multipole(&x, &p.alpha, cs, order);
                let (local, v) = root_terms(&lattice, &m, cs, ct, order);
                vac = v;
                Some(local.chunks(2).map(|c| C64::new(c[0], c[1])).collect())
            },
        );
        for (i, xi) in x.iter().enumerate() {
            for k in 0..3 {
                let g = &vac[3 + 3 * k..6 + 3 * k];
                got.velocity[i][k] -= vac[k] + g[0] * xi[0] + g[1] * xi[1] + g[2] * xi[2];
                for (d, gm) in got.gradient[i][k].iter_mut().zip(g) {
                    *d -= gm;
                }
            }
        }
        let mut cpu = FmmPeriodic::with_params(params, 0);
        let mut want = Evaluation::default();
        cpu.evaluate(&p.sources(), &p.x, Extra::Gradient, &mut want)
            .unwrap();
        let ev = rel_l2(&got.velocity, &want.velocity);
        let eg = rel_l2(&flat9(&got.gradient), &flat9(&want.gradient));
        println!("GPU pipeline (f64 mirror) vs CPU periodic FMM: {ev:.2e} {eg:.2e}");
        assert!(ev < 1e-9 && eg < 1e-9, "{ev:e} {eg:e}");
    }

    /// The velocity (1/4π) ∇ × φ of a local expansion at the points `d` from its centre.
    fn velocities(local: &[C64], p: usize, d: &[[f64; 3]]) -> Vec<[f64; 3]> {
        let mut ws = Workspace::new(p);
        d.iter()
            .map(|&d| {
                let g: [PotentialDerivatives; 3] = l2p::<3>(&mut ws, d, local, (1, 1));
                let f = 0.25 / std::f64::consts::PI;
                [
                    f * (g[2].gradient[1] - g[1].gradient[2]),
                    f * (g[0].gradient[2] - g[2].gradient[0]),
                    f * (g[1].gradient[0] - g[0].gradient[1]),
                ]
            })
            .collect()
    }

    /// The GPU's far images (the root multipole at the tree's order p about the root cube's
    /// centre, moved to 0) against the CPU's (P2M at the lattice order P about 0): their
    /// velocities differ by well under the request of the box's whole velocity scale.
    #[test]
    fn the_far_images_from_the_trees_root_multipole_match_the_cpus() {
        let (x, a) = sources(2000, true);
        for (accuracy, p) in [(1e-4, 9), (1e-5, 11)] {
            let lattice = LatticeSum::new(lattice_order(accuracy, p), LATTICE_LEVELS, NEAR_LEVEL);
            let (source_root, target_root) = ([0.004, -0.003, 0.002], [0.001, 0.002, -0.003]);
            let cpu = lattice.root_local(&x, &a, target_root, p);
            let (gpu, _) = root_terms(
                &lattice,
                &multipole(&x, &a, source_root, p),
                source_root,
                target_root,
                p,
            );
            let gpu: Vec<C64> = gpu.chunks(2).map(|c| C64::new(c[0], c[1])).collect();
            let pts: Vec<[f64; 3]> = x[..200]
                .iter()
                .map(|v| std::array::from_fn(|k| v[k] - target_root[k]))
                .collect();
            let (uc, ug) = (velocities(&cpu, p, &pts), velocities(&gpu, p, &pts));
            let diff = uc
                .iter()
                .zip(&ug)
                .map(|(c, g)| (0..3).map(|k| (c[k] - g[k]).powi(2)).sum::<f64>())
                .sum::<f64>()
                .sqrt();
            let far = uc.iter().flatten().map(|v| v * v).sum::<f64>().sqrt();
            // The box's own velocity scale: Σ|α| / L² per target, rms over the sample.
            let scale = a.iter().flatten().map(|v| v.abs()).sum::<f64>()
                / (std::f64::consts::TAU.powi(2) * (x.len() as f64).sqrt())
                * (pts.len() as f64).sqrt();
            println!("p = {p}: far images {far:.3e}, GPU − CPU {diff:.3e}, scale {scale:.3e}");
            assert!(diff <= 1e-2 * accuracy * scale, "{diff:e} vs {scale:e}");
            // The M2M to 0 is exact for the degrees it keeps.
            let mut m = vec![C64::new(0.0, 0.0); 3 * coefficient_count(p)];
            let src: Vec<C64> = multipole(&x, &a, source_root, p)
                .chunks(2)
                .map(|c| C64::new(c[0], c[1]))
                .collect();
            m2m::<3>(
                &mut Workspace::new(p),
                source_root.map(|v| -v),
                &src,
                &mut m,
            );
            let direct = multipole(&x, &a, [0.0; 3], p);
            for (i, v) in m.iter().enumerate() {
                assert!((v.re - direct[2 * i]).abs() <= 1e-9 * (1.0 + direct[2 * i].abs()));
            }
        }
    }
}
