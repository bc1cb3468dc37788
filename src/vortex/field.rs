//! Between grid fields and particles: the vortex method starts from the same initial field as the
//! spectral solver, and its diagnostics go through the same code (docs/physics.md §5–6).
//!
//! - [`vorticity_on_lattice`]: ω = ∇ × u at the N^3 lattice nodes x_i = −π + i·h, from retained
//!   Fourier modes (ω̂ = ik × û, inverse transform).
//! - [`particles_from_modes`]: particles at the lattice nodes, σ0 = overlap·h, strengths from the
//!   reinitialisation's solve: the blob vorticity has ω's Fourier modes (spectral, the default)
//!   or reproduces ω at the nodes (exact, CG).
//! - [`velocity_modes_from_particles`]: the particle velocity evaluated at the N^3 grid nodes by a
//!   [`Summation`], transformed to retained modes; feed them to [`crate::diagnostics`] exactly as
//!   the spectral solver's modes.

use super::reinit::LatticeConditioning;
use super::{lattice_nodes, particles_on_lattice, solve_strengths, RbfSolver};
use crate::particles::ParticleSet;
use crate::spectral::solver::zero_modes;
use crate::spectral::{Fft3d, ModeLayout, VectorModes};
use crate::summation::{Evaluation, Extra, Sources, Summation, SummationError};
use crate::vortex::rbf::SolveReport;
use num_complex::Complex64;
use std::f64::consts::TAU;

/// Largest retained |k_i| of an n-point grid's transforms (the Nyquist mode is not kept).
pub fn grid_kmax(n: usize) -> usize {
    n / 2 - 1
}

/// ω at the nodes of the n^3 lattice (`[i][j][k]` order) from velocity modes on `layout`.
/// Requires 2K < n (every retained mode has its own lattice frequency).
pub fn vorticity_on_lattice(layout: &ModeLayout, modes: &VectorModes, n: usize) -> Vec<[f64; 3]> {
    let mut fft = Fft3d::new(n, *layout);
    let mut omega = vec![[0.0; 3]; n * n * n];
    let mut w = vec![Complex64::new(0.0, 0.0); layout.len()];
    let mut phys = vec![0.0; n * n * n];
    for c in 0..3 {
        let (a, b) = ((c + 1) % 3, (c + 2) % 3);
        layout.for_each_mode(|i, k| {
            let kf = [k[0] as f64, k[1] as f64, k[2] as f64];
            let v = modes[b][i] * kf[a] - modes[a][i] * kf[b];
            w[i] = Complex64::new(-v.im, v.re); // i·(k × û)_c
        });
        fft.inverse(&w, &mut phys);
        for (o, p) in omega.iter_mut().zip(&phys) {
            o[c] = *p;
        }
    }
    omega
}

/// Particles at the n^3 lattice nodes representing the field with velocity `modes`:
/// σ0 = overlap · 2π/n, strengths from the RBF solve of the lattice vorticity conditioned as
/// reinitialisation conditions it, Σα = 0.
pub fn particles_from_modes(
    layout: &ModeLayout,
    modes: &VectorModes,
    n: usize,
    overlap: f64,
    rbf: RbfSolver,
    conditioning: LatticeConditioning,
) -> (ParticleSet, Option<SolveReport>) {
    let omega = vorticity_on_lattice(layout, modes, n);
    let sigma0 = overlap * TAU / n as f64;
    let (alpha, report, _) = solve_strengths(&omega, n, n, sigma0, rbf, conditioning, true);
    (particles_on_lattice(n, &alpha, sigma0), report)
}

/// Velocity of the particle field at the n^3 grid nodes, as retained modes (|k_i| ≤ n/2 − 1)
/// ready for [`crate::diagnostics`]. `scratch` is reused between calls.
pub fn velocity_modes_from_particles(
    evaluator: &mut dyn Summation,
    particles: &ParticleSet,
    n: usize,
    scratch: &mut Evaluation,
) -> Result<(ModeLayout, VectorModes), SummationError> {
    let nodes = lattice_nodes(n);
    evaluator.evaluate(&Sources::of(particles), &nodes, Extra::None, scratch)?;
    Ok(modes_from_node_velocities(n, &scratch.velocity))
}

/// Retained modes (|k_i| ≤ n/2 − 1) of a velocity given at the n³ grid nodes
/// ([`lattice_nodes`] order): the transform behind [`velocity_modes_from_particles`], shared
/// with steppers that evaluate the node velocities elsewhere (on a GPU).
pub fn modes_from_node_velocities(n: usize, velocity: &[[f64; 3]]) -> (ModeLayout, VectorModes) {
    let layout = ModeLayout::new(grid_kmax(n));
    let mut fft = Fft3d::new(n, layout);
    let mut modes = zero_modes(&layout);
    let mut phys = vec![0.0; n * n * n];
    for (c, m) in modes.iter_mut().enumerate() {
        for (p, u) in phys.iter_mut().zip(velocity) {
            *p = u[c];
        }
        fft.forward(&mut phys, m);
    }
    (layout, modes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::InitialCondition;
    use crate::init::initial_modes;
    use crate::spectral::Dealias;
    use crate::spectral::SpectralGrid;
    use crate::vortex::rbf::LatticeGaussian;
    use std::f64::consts::PI;

    #[test]
    fn taylor_green_vorticity_and_particles_reproduce_the_field() {
        let n = 16;
        let grid = SpectralGrid::new(n, Dealias::ThreeHalves);
        let layout = grid.layout();
        let modes =
            initial_modes(&InitialCondition::TaylorGreen { amplitude: 1.0 }, &layout).unwrap();
        let omega = vorticity_on_lattice(&layout, &modes, n);
        // ω of Taylor–Green: (−cos x sin y sin z, −sin x cos y sin z, 2 sin x sin y cos z).
        let h = TAU / n as f64;
        for (i, j, k) in [(0, 0, 0), (3, 5, 7), (15, 1, 9)] {
            let (x, y, z) = (-PI + i as f64 * h, -PI + j as f64 * h, -PI + k as f64 * h);
            let w = omega[(i * n + j) * n + k];
            let exact = [
                -x.cos() * y.sin() * z.sin(),
                -x.sin() * y.cos() * z.sin(),
                2.0 * x.sin() * y.sin() * z.cos(),
            ];
            for c in 0..3 {
                assert!((w[c] - exact[c]).abs() < 1e-13, "{w:?} vs {exact:?}");
            }
        }
        // The blob field of the particles reproduces ω at the nodes (exact RBF solve).
        let (p, _) = particles_from_modes(
            &layout,
            &modes,
            n,
            1.0,
            RbfSolver::Exact,
            LatticeConditioning::NONE,
        );
        assert_eq!(p.len(), n * n * n);
        let g = LatticeGaussian::new(n, p.sigma[0]);
        for c in 0..3 {
            let a: Vec<f64> = p.alpha.iter().map(|v| v[c]).collect();
            let mut back = vec![0.0; a.len()];
            g.apply(&a, &mut back, &mut Vec::new());
            let err = back
                .iter()
                .zip(&omega)
                .map(|(b, w)| (b - w[c]).abs())
                .fold(0.0, f64::max);
            assert!(err < 1e-10, "component {c}: {err:e}");
        }
        let total = p.total_strength();
        assert!(total.iter().all(|t| t.abs() < 1e-12));
    }
}
