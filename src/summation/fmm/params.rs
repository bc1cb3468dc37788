//! Accuracy in, parameters out: the FMM's expansion order, opening criterion, near-field radius
//! and leaf size from the requested relative accuracy (docs/physics.md §8).
//!
//! * **Near-field radius ρ_c.** Pairs closer than ρ_c σ_max use the exact Gaussian kernel; farther
//!   ones may use 1/(4πr). ρ_c is the smallest ρ whose kernel tail is below `TAIL_SHARE` × the
//!   accuracy: for the velocity 1 − g(ρ), for the gradient (stretching) (ρg' + 3(1 − g))/3, about
//!   ten times larger (§8). The tail is a bound per pair; most of a target's velocity comes from
//!   farther away, so the sum's relative error is smaller still. Gravity
//!   ([`plan_gravity_parameters`]) has no radius: its expansions are those of the softened kernel
//!   ([`super::cartesian`]), exact at any distance the opening criterion accepts.
//! * **Order p and opening angle θ.** A well-separated pair (r_A + r_B ≤ θd) truncated at order p
//!   errs by about θ^{p+1} relative to that pair's contribution, second derivatives by about
//!   (p+1) times more. The traversal accepts most pairs well inside the criterion, so measured
//!   errors fall faster; [`truncation_error`] is fitted to them. θ is fixed per device (a smaller
//!   θ moves work from P2P to M2L) and p is the smallest order whose modelled error meets the
//!   accuracy.
//! * **Leaf size.** Per device, as the seed's measurements suggest (SC09 §4.3: 20–160 particles
//!   per leaf on CPUs, 100–800 on GPUs), tuned with `vpm bench fmm` (docs/performance.md); leaves
//!   are never split below a side of ρ_c σ_max / 4 (§8: leaves much smaller than the near field
//!   only add lists).

use super::cartesian::CARTESIAN_MAX_ORDER;
use crate::summation::interaction::{InteractionKind, PairInteraction, PlummerGravity};
use crate::summation::SummationError;

/// Which implementation the parameters are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum FmmBackend {
    /// f64 everywhere, rayon.
    Cpu,
    /// f64 expansions, f32 direct sums, one GPU.
    Cuda,
}

/// The finest accuracy the CPU (f64) evaluator is planned for.
pub const CPU_ACCURACY_FLOOR: f64 = 1e-10;
/// The finest accuracy the GPU evaluator is planned for: its near field is summed in f32. On
/// the H100 the f32 sums alone leave relative L2 errors of 1e-6 (velocity) to 2e-5 (a thin
/// ring's transposed stretching, whose reference nearly cancels) at any order (tests/gpu_fmm.rs).
pub const GPU_ACCURACY_FLOOR: f64 = 5e-5;
/// Fraction of the requested accuracy given to the kernel tail at ρ_c.
pub const TAIL_SHARE: f64 = 0.1;
/// The order is planned for this fraction of the accuracy: the model is fitted to uniform sets
/// evaluated at the sources, and a thin ring's stretching measured up to 1.5× the request at
/// the sources and 4× at targets on cell faces away from the ring (tests/fmm.rs).
pub const ORDER_MARGIN: f64 = 0.2;
/// The highest order planned.
pub const MAX_ORDER: usize = 30;
/// Leaves on the GPU hold at most this many particles (both interactions). Tuned on one GPU
/// with `vpm bench fmm --leaf-size` (docs/performance.md, issue 25): at 10⁶ uniform particles
/// (1e-4, θ = 0.5) leaves ≤ 256 give about 244 particles a leaf and 80 ms per velocity +
/// stretching evaluation against 119 ms with ≤ 128 (30 a leaf: 4.5× the M2L pairs); gravity
/// 76 ms against 235 ms. A uniform octree refines by 8× a level, so the leaves hold between
/// 32 and 256: 195 at 10⁵, 122 at 4·10⁶, 64 at 16.7·10⁶.
pub const GPU_LEAF_SIZE: usize = 256;
/// The highest Cartesian order the GPU kernels are compiled for (kernels/fmm_cartesian.cu).
pub const CARTESIAN_GPU_MAX_ORDER: usize = 12;

/// The precision of the GPU's M2L (kernels/fmm.cu): the expansions are stored in f64 either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum M2lPrecision {
    /// f64 products and sums (the CPU, and the GPU below [`GPU_F32_M2L_ACCURACY`]).
    F64,
    /// f32 products of dimensionless (scaled) harmonics and multipoles, each pair's terms added
    /// in f64 (`fmm_m2l_f32`).
    F32,
}

impl M2lPrecision {
    /// `f64` or `f32` (`vpm bench fmm --m2l`).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "f64" => Ok(Self::F64),
            "f32" => Ok(Self::F32),
            _ => Err(format!("M2L precision {s:?}: expected f64 or f32")),
        }
    }
}

/// The GPU's M2L runs in f32 at requested accuracies at or above this. One pair's result is an
/// f32 sum of (p+1)² products per coefficient with binomial weights, relative rounding about
/// u (p+1) = 6e-7 at p = 9 (u = 6e-8, errors adding as a random walk over the (p+1)² terms;
/// the bound u (p+1)² = 6e-6 if they all had one sign), and the pairs are added in f64; the
/// truncation error the order is planned for is [`ORDER_MARGIN`] × the accuracy, so the f32
/// rounding stays a tenth of that at 1e-5 (measured by `gpu_m2l_matches_cpu_coefficients` in
/// tests/gpu_fmm.rs).
pub const GPU_F32_M2L_ACCURACY: f64 = 1e-5;

/// The chosen parameters; `Display` gives the sentence for the run log and the manifest.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct FmmParams {
    /// The interaction the parameters are planned for.
    pub interaction: InteractionKind,
    /// The requested relative accuracy.
    pub accuracy: f64,
    pub backend: FmmBackend,
    /// Expansion order p (terms n ≤ p).
    pub order: usize,
    /// Opening angle θ: cells interact by expansions when r_A + r_B ≤ θ d.
    pub theta: f64,
    /// ρ_c for the velocity alone and for velocity and gradient, in units of each source's
    /// length scale ([`PairInteraction::source_scale`]: σ for Biot–Savart; 0 for gravity, whose
    /// expansions are the softened kernel's).
    pub rho_cut_velocity: f64,
    pub rho_cut_gradient: f64,
    /// Largest number of particles in a leaf.
    pub leaf_size: usize,
    /// The precision of the M2L products (GPU; the CPU is f64).
    pub m2l: M2lPrecision,
}

impl FmmParams {
    /// ρ_c for an evaluation that does (`true`) or does not need the velocity gradient.
    pub fn rho_cut(&self, gradient: bool) -> f64 {
        if gradient {
            self.rho_cut_gradient
        } else {
            self.rho_cut_velocity
        }
    }
}

impl FmmParams {
    /// The M2L's precision for the log sentence (said only when it is f32).
    fn m2l_words(&self) -> &'static str {
        match self.m2l {
            M2lPrecision::F64 => "",
            M2lPrecision::F32 => ", M2L in scaled f32",
        }
    }
}

impl std::fmt::Display for FmmParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.interaction == InteractionKind::Gravity {
            return write!(
                f,
                "accuracy {:e}: softened Cartesian expansions of order p = {}, θ = {}, leaves ≤ \
                 {} bodies",
                self.accuracy, self.order, self.theta, self.leaf_size
            );
        }
        write!(
            f,
            "accuracy {:e}: order p = {}, θ = {}, leaves ≤ {} particles, exact kernel within \
             ρ_c = {:.2} σ_max ({:.2} for the velocity alone){}",
            self.accuracy,
            self.order,
            self.theta,
            self.leaf_size,
            self.rho_cut_gradient,
            self.rho_cut_velocity,
            self.m2l_words()
        )
    }
}

/// The Gaussian kernel's tails and the radius where one falls below a bound live with the pair
/// equations ([`crate::kernel`]); re-exported here, where the near field is planned.
pub use crate::kernel::{gradient_tail, rho_cut, velocity_tail};

/// The error model: relative L2 error of the velocity gradient (stretching) of an evaluation at
/// order p and opening angle θ, E = 0.05 θ^{1.4p}, a third of that for the velocity. Fitted to
/// direct sums of 20 000 uniform particles at θ = 0.4, 0.5, 0.6 and p = 2…20 (test `calibrate` in
/// tests/fmm.rs, table in docs/validation.md): at θ = 0.5 the measured stretching errors are
/// 7.7e-4, 1.2e-5, 2.3e-7, 4.6e-9, 1.0e-10 at p = 4, 8, 12, 16, 20 against the model's 1.0e-3,
/// 2.1e-5, 4.4e-7, 9.1e-9, 1.9e-10; at θ = 0.6 the model is pessimistic by up to 40×. The errors
/// fall faster than the single-pair bound θ^{p+1} because the traversal accepts most pairs well
/// inside the criterion.
pub fn truncation_error(order: usize, theta: f64, gradient: bool) -> f64 {
    let e = 0.05 * theta.powf(1.4 * order as f64);
    if gradient {
        e
    } else {
        e / 3.0
    }
}

/// Plans the parameters of the Biot–Savart FMM for `accuracy` on `backend`, or says why it
/// cannot.
pub fn plan_parameters(accuracy: f64, backend: FmmBackend) -> Result<FmmParams, SummationError> {
    let tails = |gradient| {
        crate::summation::interaction::BiotSavart::exact(gradient)
            .near_field_radius(TAIL_SHARE * accuracy)
    };
    Ok(FmmParams {
        rho_cut_velocity: tails(false),
        rho_cut_gradient: tails(true),
        ..plan_expansions(accuracy, backend, true)?
    })
}

/// The error model of the gravity FMM's softened Cartesian expansions ([`super::cartesian`]):
/// relative L2 error of the acceleration at order p and opening angle θ, E = 2.5e-2 θ^{1.23 p}
/// (the potential's is 30–100× smaller). Fitted to 20 000 bodies uniform in the unit cube with
/// ε = 0.1 N^{−1/3} (issue 25's set) at θ = 0.4, 0.5, 0.6 and p = 2…14 (test `calibrate` in
/// tests/gravity.rs, table in docs/validation.md): per order the errors fall by θ^{1.23} at each
/// θ (faster than the single-pair bound θ^{p+1}, as for the solid harmonics); at θ = 0.5 they are
/// 2.4e-4, 2.5e-5, 3.7e-6, 6.9e-7, 1.4e-7, 2.8e-8 at p = 4, 6, 8, 10, 12, 14, and 6e-3 θ^{1.23p}
/// fits them within 1.7×. The constant is doubled for clustered sets: a Plummer sphere's errors
/// are 2–3× the uniform set's and its sampled maximum 13× its L2 at p = 4 (1.1e-2 at 1e-3 with
/// the uniform fit; tests/gravity.rs). It does not depend on the softening: the expansions are
/// those of the softened kernel, which converge at least as fast as the Newtonian ones.
/// Checked again for a lower order (issue 25, `calibrate` at the GPU's θ = 0.5 and leaves ≤ 128,
/// 20 000 bodies, p = 3…10; docs/validation.md): on the uniform set p = 6 would meet 1e-4 (a at
/// cell faces L2 2.7e-5, max 2.2e-4), but a Plummer sphere at cell faces is 20× worse than the
/// uniform set at the bodies (p = 8: L2 7.1e-5, max 1.3e-3, just above 10 × 1e-4; p = 5: L2
/// 1.2e-3 against 1e-3). So the constant is raised from 1.2e-2 to 2.5e-2, which plans p = 6 at
/// 1e-3 and p = 9 at 1e-4 at θ = 0.5, the orders that set needs to meet the contract (L2 ≤ the
/// request, maximum ≤ 10×).
pub fn cartesian_truncation_error(order: usize, theta: f64) -> f64 {
    2.5e-2 * theta.powf(1.23 * order as f64)
}

/// Plans the parameters of the gravity FMM for `accuracy` on `backend`: softened Cartesian
/// expansions ([`super::cartesian`]) whose order meets [`cartesian_truncation_error`] ≤
/// [`ORDER_MARGIN`] × the accuracy, and no near-field radius (the lists' near field is only the
/// opening criterion's, for any softening of `_gravity`).
pub fn plan_gravity_parameters(
    accuracy: f64,
    backend: FmmBackend,
    _gravity: PlummerGravity,
) -> Result<FmmParams, SummationError> {
    let base = plan_expansions(accuracy, backend, false)?;
    let order = plan_order(InteractionKind::Gravity, accuracy, base.theta, backend)?;
    Ok(FmmParams {
        interaction: InteractionKind::Gravity,
        order,
        ..base
    })
}

/// The CPU's leaf size for expansions of order p: 5(p+1)²/4 particles, at least 48 and at most
/// 400. One M2L costs about 3(p+1)⁴/2 complex products and a leaf's near field grows with its
/// size, so the balance of the two moves to larger leaves as p grows, as (p+1)² (SC09 §4.3).
/// Measured on 2 cores (docs/performance.md, "CPU"): at 1e-6 (p = 13) leaves of 245 make a
/// 30 000-particle evaluation 8× faster than leaves of 48; at 1e-4 (p = 9, leaves of 125)
/// 10⁵ and 10⁶ uniform particles get the same tree as with 48.
pub fn cpu_leaf_size(order: usize) -> usize {
    (5 * (order + 1) * (order + 1) / 4).clamp(48, 400)
}

/// The highest Cartesian order (gravity) on `backend`.
pub fn cartesian_max_order(backend: FmmBackend) -> usize {
    match backend {
        FmmBackend::Cpu => CARTESIAN_MAX_ORDER,
        FmmBackend::Cuda => CARTESIAN_GPU_MAX_ORDER,
    }
}

/// The order planned for `accuracy` at opening angle `theta`: the smallest whose modelled error
/// ([`truncation_error`] of second derivatives for Biot–Savart, [`cartesian_truncation_error`]
/// for gravity) meets [`ORDER_MARGIN`] × the accuracy, or an error naming the largest order.
pub fn plan_order(
    interaction: InteractionKind,
    accuracy: f64,
    theta: f64,
    backend: FmmBackend,
) -> Result<usize, SummationError> {
    let (model, max_order): (&dyn Fn(usize) -> f64, usize) = match (interaction, backend) {
        (InteractionKind::BiotSavart, _) => (&|p| truncation_error(p, theta, true), MAX_ORDER),
        (InteractionKind::Gravity, _) => (
            &|p| cartesian_truncation_error(p, theta),
            cartesian_max_order(backend),
        ),
    };
    (1..=max_order)
        .find(|&p| model(p) <= ORDER_MARGIN * accuracy)
        .ok_or_else(|| {
            SummationError::Unsupported(format!(
                "FMM ({interaction}, θ = {theta}): accuracy {accuracy:e} needs an order above \
                 {max_order}"
            ))
        })
}

/// The accuracy checked against `backend`'s floor, θ and the leaf size of the device, and the
/// order for the error model of first (`gradient` false) or second derivatives; the near-field
/// radii left 0.
fn plan_expansions(
    accuracy: f64,
    backend: FmmBackend,
    gradient: bool,
) -> Result<FmmParams, SummationError> {
    let floor = match backend {
        FmmBackend::Cpu => CPU_ACCURACY_FLOOR,
        FmmBackend::Cuda => GPU_ACCURACY_FLOOR,
    };
    if !(accuracy.is_finite() && accuracy < 1.0) || accuracy <= 0.0 {
        return Err(SummationError::Unsupported(format!(
            "FMM: accuracy {accuracy} must be in ({floor:e}, 1)"
        )));
    }
    if accuracy < floor {
        let why = match backend {
            FmmBackend::Cpu => "the f64 expansions are planned down to",
            FmmBackend::Cuda => {
                "the GPU sums its near field in f32, which reaches about; use the CPU (f64) for \
                 finer accuracy. GPU floor"
            }
        };
        return Err(SummationError::Unsupported(format!(
            "FMM: accuracy {accuracy:e} is finer than this device can deliver ({why} {floor:e})"
        )));
    }
    let theta = 0.5;
    let order = (1..=MAX_ORDER)
        .find(|&p| truncation_error(p, theta, gradient) <= ORDER_MARGIN * accuracy)
        .ok_or_else(|| {
            SummationError::Unsupported(format!("FMM: accuracy {accuracy:e} needs p > {MAX_ORDER}"))
        })?;
    let leaf_size = match backend {
        FmmBackend::Cpu => cpu_leaf_size(order),
        FmmBackend::Cuda => GPU_LEAF_SIZE,
    };
    Ok(FmmParams {
        interaction: InteractionKind::BiotSavart,
        accuracy,
        backend,
        order,
        theta,
        rho_cut_velocity: 0.0,
        rho_cut_gradient: 0.0,
        leaf_size,
        m2l: match backend {
            FmmBackend::Cuda if accuracy >= GPU_F32_M2L_ACCURACY => M2lPrecision::F32,
            _ => M2lPrecision::F64,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_match_physics_md_table() {
        // docs/physics.md §8: 1 − g ≈ 1.5e-5, 1.2e-6, 7.5e-8, 3.6e-9 at ρ = 5, 5.5, 6, 6.5;
        // the gradient's ≈ 1.4e-4, 1.3e-5, 9.5e-7, 5.2e-8.
        for (rho, v, g) in [
            (5.0, 1.5e-5, 1.4e-4),
            (5.5, 1.2e-6, 1.3e-5),
            (6.0, 7.5e-8, 9.5e-7),
            (6.5, 3.6e-9, 5.2e-8),
        ] {
            assert!(
                (velocity_tail(rho) / v - 1.0).abs() < 0.06,
                "{rho}: {}",
                velocity_tail(rho)
            );
            assert!(
                (gradient_tail(rho) / g - 1.0).abs() < 0.06,
                "{rho}: {}",
                gradient_tail(rho)
            );
        }
        // And against the kernel: 1 − g(ρ) from kernel.rs where it has no cancellation trouble.
        let g = crate::kernel::cutoff_g(3.0f64);
        assert!(((1.0 - g) / velocity_tail(3.0) - 1.0).abs() < 1e-12);
    }

    /// The gravity FMM is planned as the Biot–Savart one (down to the f32 floor on the GPU, with
    /// the GPU's θ and leaves) but with softened Cartesian expansions: no near-field radius for
    /// any softening, an order that grows as the accuracy falls, within the kernels' largest.
    #[test]
    fn gravity_has_no_near_field_radius_and_stops_at_the_f32_floor() {
        let g = PlummerGravity::new(1e-3).unwrap();
        let gpu = plan_gravity_parameters(GPU_ACCURACY_FLOOR, FmmBackend::Cuda, g).unwrap();
        let cpu = plan_gravity_parameters(GPU_ACCURACY_FLOOR, FmmBackend::Cpu, g).unwrap();
        assert_eq!(gpu.interaction, InteractionKind::Gravity);
        assert_eq!(
            (gpu.backend, gpu.leaf_size),
            (FmmBackend::Cuda, GPU_LEAF_SIZE)
        );
        assert_eq!((gpu.rho_cut_velocity, cpu.rho_cut_gradient), (0.0, 0.0));
        assert!(gpu.order <= CARTESIAN_GPU_MAX_ORDER);
        assert!(
            cpu.to_string().contains("softened Cartesian expansions"),
            "{cpu}"
        );
        let e = plan_gravity_parameters(1e-5, FmmBackend::Cuda, g)
            .unwrap_err()
            .to_string();
        assert!(e.contains("f32") && e.contains("5e-5"), "{e}");
        let mut last = 0;
        for a in [1e-3, 1e-4, 1e-6, 1e-8] {
            let p = plan_gravity_parameters(a, FmmBackend::Cpu, g).unwrap();
            assert!(
                p.order > last && p.order <= CARTESIAN_MAX_ORDER,
                "{a:e}: {p}"
            );
            last = p.order;
        }
    }

    #[test]
    fn finer_accuracy_plans_higher_order_and_wider_near_field() {
        let mut last = plan_parameters(1e-3, FmmBackend::Cpu).unwrap();
        for a in [1e-4, 1e-6, 1e-8, 1e-10] {
            let p = plan_parameters(a, FmmBackend::Cpu).unwrap();
            assert!(p.order > last.order && p.rho_cut_gradient > last.rho_cut_gradient);
            assert!(p.rho_cut_gradient > p.rho_cut_velocity);
            last = p;
        }
        let e = plan_parameters(1e-11, FmmBackend::Cpu)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1e-10"), "{e}");
        let e = plan_parameters(1e-5, FmmBackend::Cuda)
            .unwrap_err()
            .to_string();
        assert!(e.contains("f32") && e.contains("CPU"), "{e}");
        assert!(plan_parameters(0.0, FmmBackend::Cpu).is_err());
        assert!(plan_parameters(f64::NAN, FmmBackend::Cpu).is_err());
    }

    /// The CPU's leaves grow with the order (1e-6 plans p = 13 and leaves of 245; 1e-4 p = 9
    /// and 125); the GPU's stay at 128.
    #[test]
    fn cpu_leaves_grow_with_the_order() {
        let cpu = |a| plan_parameters(a, FmmBackend::Cpu).unwrap();
        assert_eq!((cpu(1e-6).order, cpu(1e-6).leaf_size), (13, 245));
        assert_eq!((cpu(1e-4).order, cpu(1e-4).leaf_size), (9, 125));
        assert_eq!(cpu(1e-2).leaf_size, 48);
        assert_eq!(cpu(1e-10).leaf_size, 400);
        let gpu = plan_parameters(1e-4, FmmBackend::Cuda).unwrap();
        assert_eq!((gpu.order, gpu.leaf_size), (9, GPU_LEAF_SIZE));
    }
}
