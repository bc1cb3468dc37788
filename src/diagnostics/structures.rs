//! Vortex structures on the grid (docs/physics.md §6.2): the velocity, the vorticity and the
//! second invariant of the velocity gradient,
//!
//! ```text
//! Q = ½(‖Ω‖² − ‖S‖²) = −½ ∂_j u_i ∂_i u_j        (incompressible flow)
//! ```
//!
//! with S and Ω the symmetric and antisymmetric parts of A_ij = ∂u_i/∂x_j. Q > 0 marks regions
//! where rotation dominates strain (vortex cores). The seed paper's Figure 15 draws
//! II = u_{i,j} u_{j,i} = −2Q.
//!
//! Every derivative is spectral: from velocity modes û(k) (u(x) = Σ_k û(k) e^{ik·x}),
//! ∂_j u_i ↔ i k_j û_i and ω̂ = i k × û, transformed to the N³ grid nodes x_i = −π + i·h. Both
//! solvers go through [`grid_fields`]: the spectral solver with its own modes, the particles
//! with the modes of their velocity sampled at the same nodes (as for every other diagnostic).
//! For any field whose product A_ij A_ji is resolved on the grid (Taylor–Green at t = 0, say)
//! Q at the nodes is exact to round-off.

use crate::diagnostics::flow::vorticity_mode;
use crate::spectral::{Fft3d, VectorModes};
use num_complex::Complex64;

/// Velocity, vorticity and Q at the n³ nodes of a periodic grid, each scalar array in
/// `[i][j][k]` order (index `(i·n + j)·n + k`, k fastest) ↔ (x_i, y_j, z_k), x_i = −π + i·h.
#[derive(Debug, Clone, PartialEq)]
pub struct GridFields {
    /// Nodes per side.
    pub n: usize,
    /// u, v, w.
    pub velocity: [Vec<f64>; 3],
    /// ω = ∇ × u.
    pub vorticity: [Vec<f64>; 3],
    /// Q = −½ ∂_j u_i ∂_i u_j.
    pub q: Vec<f64>,
}

impl GridFields {
    /// √⟨Q²⟩ over the nodes (the scale of the isosurface pictures: level c·Q_rms; the pictures
    /// take it from the written field, `postprocess::q_rms`).
    pub fn q_rms(&self) -> f64 {
        let sum: f64 = self.q.iter().map(|q| q * q).sum();
        (sum / self.q.len().max(1) as f64).sqrt()
    }
}

/// Q of one velocity gradient `a[i][j] = ∂u_i/∂x_j`: −½ Σ_ij a_ij a_ji (docs/physics.md §6.2).
/// Equal to [`q_from_strain_and_rotation`] for any trace-free `a`.
pub fn q_criterion(a: &[[f64; 3]; 3]) -> f64 {
    let mut s = 0.0;
    for (i, row) in a.iter().enumerate() {
        for (j, aij) in row.iter().enumerate() {
            s += aij * a[j][i];
        }
    }
    -0.5 * s
}

/// Q of one velocity gradient from its parts: ½(‖Ω‖² − ‖S‖²) with S = ½(A + Aᵀ),
/// Ω = ½(A − Aᵀ) and ‖·‖ the Frobenius norm. For a gradient with a trace (not incompressible)
/// this differs from [`q_criterion`] by ½ (tr A)².
#[allow(clippy::needless_range_loop)] // a[i][j] beside a[j][i]
pub fn q_from_strain_and_rotation(a: &[[f64; 3]; 3]) -> f64 {
    let (mut s2, mut w2) = (0.0, 0.0);
    for i in 0..3 {
        for j in 0..3 {
            let s = 0.5 * (a[i][j] + a[j][i]);
            let w = 0.5 * (a[i][j] - a[j][i]);
            s2 += s * s;
            w2 += w * w;
        }
    }
    0.5 * (w2 - s2)
}

/// Velocity, vorticity and Q at the nodes of `fft`'s grid from the velocity modes `modes` (on
/// `fft`'s layout), by spectral derivatives (module docs).
///
/// Q is accumulated pair by pair, −½[Σ_i A_ii² + 2 Σ_{i<j} A_ij A_ji], so besides the seven
/// output arrays only two gradient components are held at a time: 9 N³ values in all.
pub fn grid_fields(fft: &mut Fft3d, modes: &VectorModes) -> GridFields {
    let n = fft.m();
    let layout = fft.layout();
    let len = n * n * n;
    let mut spectrum = vec![Complex64::new(0.0, 0.0); layout.len()];
    let mut inverse = |fft: &mut Fft3d, f: &dyn Fn(usize, [f64; 3]) -> Complex64| {
        layout.for_each_mode(|i, k| spectrum[i] = f(i, k.map(|x| x as f64)));
        let mut phys = vec![0.0; len];
        fft.inverse(&spectrum, &mut phys);
        phys
    };
    // i·x for a complex x.
    let times_i = |z: Complex64| Complex64::new(-z.im, z.re);

    let velocity: [Vec<f64>; 3] = std::array::from_fn(|c| inverse(fft, &|i, _| modes[c][i]));
    let vorticity: [Vec<f64>; 3] =
        std::array::from_fn(|c| inverse(fft, &|i, k| vorticity_mode(modes, c, i, k)));
    // A_ij = ∂u_i/∂x_j ↔ i k_j û_i.
    let mut gradient =
        |fft: &mut Fft3d, i: usize, j: usize| inverse(fft, &|m, k| times_i(modes[i][m] * k[j]));
    let mut q = vec![0.0; len];
    for i in 0..3 {
        let a = gradient(fft, i, i);
        q.iter_mut().zip(&a).for_each(|(q, a)| *q += a * a);
    }
    for (i, j) in [(0, 1), (0, 2), (1, 2)] {
        let a = gradient(fft, i, j);
        let b = gradient(fft, j, i);
        q.iter_mut()
            .zip(a.iter().zip(&b))
            .for_each(|(q, (a, b))| *q += 2.0 * a * b);
    }
    q.iter_mut().for_each(|q| *q *= -0.5);
    GridFields {
        n,
        velocity,
        vorticity,
        q,
    }
}

/// Host bytes [`grid_fields`] holds at its peak for an n³ grid (the seven output arrays, two
/// gradient components; the transform's own buffers are counted by its owner).
pub fn grid_fields_bytes(n: usize) -> u64 {
    9 * (n as u64).pow(3) * 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pure_rotation_strain_and_shear() {
        // Solid rotation about z with angular velocity Ω: u = Ω × x, A = [[0, −Ω, 0], [Ω, 0, 0], 0].
        let w = 1.7;
        let rotation = [[0.0, -w, 0.0], [w, 0.0, 0.0], [0.0; 3]];
        assert!((q_criterion(&rotation) - w * w).abs() < 1e-15);
        assert!((q_from_strain_and_rotation(&rotation) - w * w).abs() < 1e-15);
        // Plane strain u = (a x, −a y, 0): Q = −a².
        let a = 0.6;
        let strain = [[a, 0.0, 0.0], [0.0, -a, 0.0], [0.0; 3]];
        assert!((q_criterion(&strain) + a * a).abs() < 1e-15);
        assert!((q_from_strain_and_rotation(&strain) + a * a).abs() < 1e-15);
        // Axisymmetric strain (a, −a/2, −a/2): Q = −¾ a².
        let axi = [[a, 0.0, 0.0], [0.0, -a / 2.0, 0.0], [0.0, 0.0, -a / 2.0]];
        assert!((q_criterion(&axi) + 0.75 * a * a).abs() < 1e-15);
        // Simple shear u = (γ y, 0, 0): strain and rotation balance, Q = 0.
        let shear = [[0.0, 2.5, 0.0], [0.0; 3], [0.0; 3]];
        assert_eq!(q_criterion(&shear), 0.0);
        assert_eq!(q_from_strain_and_rotation(&shear), 0.0);
    }

    #[test]
    fn the_two_forms_agree_for_trace_free_gradients() {
        // A fixed pseudo-random sequence of gradients, made trace-free.
        let mut x = 0.123_456_789_f64;
        let mut next = || {
            x = (x * 9301.0 + 0.4929).fract();
            2.0 * x - 1.0
        };
        for _ in 0..100 {
            let mut a = [[0.0; 3]; 3];
            for row in &mut a {
                for v in row.iter_mut() {
                    *v = next();
                }
            }
            let tr = a[0][0] + a[1][1] + a[2][2];
            a[2][2] -= tr;
            let (p, q) = (q_criterion(&a), q_from_strain_and_rotation(&a));
            assert!((p - q).abs() < 1e-14 * (1.0 + p.abs()), "{p} vs {q}");
        }
    }
}
