//! The pseudo-spectral solver on the GPU (src/spectral/gpu.rs, kernels/spectral.cu) against the
//! CPU solver in f64 (docs/physics.md §5 and §6).
//!
//! The GPU tests print why and pass when no usable GPU is present (CPU-only CI stays green). On a
//! GPU machine they check:
//! - Taylor–Green at Re = 100 (the `tgv-re100` case: 64³, Δt = 0.01, 1000 steps) with both
//!   dealiasing rules: K(t) and ε(t) within 1e-12 relative of the CPU's at every 10th step;
//! - a random-phase isotropic field (every class of modes excited, unlike Taylor–Green's
//!   symmetric one) at 32³ and 64³, 100 steps, both rules: K(t) and ε(t) within 1e-10;
//! - inviscid energy conservation (≤ 1e-11 over t ≤ 1) and −dK/dt = 2νZ (≤ 1e-10) on the GPU;
//! - the device-reduced diagnostics (K, Z, L, the shell spectrum, dK/dt, max |∇·u|) and the
//!   velocity on the grid against the host's functions on the same modes, at sizes that are not
//!   powers of two too (the 3/2 rule's N-grid transforms included);
//! - pruned and full transforms agree; two runs, and a run restored from its modes, are
//!   bit-identical; a non-finite step is not committed; the device memory stays within
//!   `GpuSpectralSolver::device_bytes`.

use num_complex::Complex64;
use std::sync::Arc;
use vpm::config::{Dealias, InitialCondition};
use vpm::device::cuda::Gpu;
use vpm::diagnostics::{flow_stats, max_divergence, shell_spectrum};
use vpm::init::initial_modes;
use vpm::spectral::gpu::TransformKind;
use vpm::spectral::{
    Fft3d, GpuSpectralSolver, SpectralError, SpectralGrid, SpectralSolver, SpectralStepper,
    VectorModes,
};
use vpm::summation::verify::gpu_or_skip;

const TG: InitialCondition = InitialCondition::TaylorGreen { amplitude: 1.0 };
const RULES: [Dealias; 2] = [Dealias::ThreeHalves, Dealias::TwoThirds];

fn isotropic(seed: u64, n: usize) -> InitialCondition {
    InitialCondition::Isotropic {
        kp: 4.0,
        u0: 1.0,
        seed,
        k_cut: ((n - 1) / 3) as f64,
    }
}

fn cpu(grid: SpectralGrid, nu: f64, ic: &InitialCondition) -> SpectralSolver {
    let mut s = SpectralSolver::new(grid, nu);
    s.set_velocity_modes(initial_modes(ic, &grid.layout()).unwrap());
    s
}

fn gpu_solver(
    gpu: &Arc<Gpu>,
    grid: SpectralGrid,
    nu: f64,
    ic: &InitialCondition,
    kind: TransformKind,
) -> GpuSpectralSolver {
    let mut s = GpuSpectralSolver::with_transforms(gpu.clone(), grid, nu, kind).unwrap();
    s.set_velocity_modes(initial_modes(ic, &grid.layout()).unwrap())
        .unwrap();
    s
}

fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        ((a - b) / b).abs()
    }
}

/// Steps a CPU and a GPU solver together and returns the worst relative differences of K and ε
/// (GPU diagnostics reduced on the device, CPU ones on the host) at every `every`-th step.
fn compare_runs(
    gpu: &Arc<Gpu>,
    grid: SpectralGrid,
    nu: f64,
    ic: &InitialCondition,
    dt: f64,
    steps: usize,
    every: usize,
) -> (f64, f64) {
    let mut c = cpu(grid, nu, ic);
    let mut g = gpu_solver(gpu, grid, nu, ic, TransformKind::Pruned);
    let (mut wk, mut we) = (0.0f64, 0.0f64);
    for step in 0..=steps {
        if step % every == 0 {
            let sc = flow_stats(&c.layout(), c.velocity_modes(), nu);
            let sg = g.flow_stats().unwrap();
            wk = wk.max(rel(sg.energy, sc.energy));
            we = we.max(rel(sg.dissipation, sc.dissipation));
        }
        if step < steps {
            c.step(dt).unwrap();
            g.step(dt).unwrap();
        }
    }
    (wk, we)
}

#[test]
fn gpu_taylor_green_re100_matches_cpu() {
    let Some(gpu) = gpu_or_skip() else { return };
    for rule in RULES {
        let grid = SpectralGrid::new(64, rule);
        let (wk, we) = compare_runs(&gpu, grid, 0.01, &TG, 0.01, 1000, 10);
        println!("tgv-re100 64³ {rule}, 1000 steps: worst |ΔK|/K {wk:.2e}, |Δε|/ε {we:.2e}");
        assert!(wk <= 1e-12 && we <= 1e-12, "{rule}: K {wk:e}, ε {we:e}");
    }
}

#[test]
fn gpu_isotropic_matches_cpu() {
    let Some(gpu) = gpu_or_skip() else { return };
    for n in [32, 64] {
        for rule in RULES {
            let grid = SpectralGrid::new(n, rule);
            let dt = 0.5 * grid.h() / 4.0;
            let (wk, we) = compare_runs(&gpu, grid, 0.01, &isotropic(7 + n as u64, n), dt, 100, 1);
            println!("isotropic {n}³ {rule}, 100 steps: worst |ΔK|/K {wk:.2e}, |Δε|/ε {we:.2e}");
            assert!(
                wk <= 1e-10 && we <= 1e-10,
                "{n}³ {rule}: K {wk:e}, ε {we:e}"
            );
        }
    }
}

#[test]
fn gpu_inviscid_taylor_green_conserves_energy() {
    let Some(gpu) = gpu_or_skip() else { return };
    for rule in RULES {
        let grid = SpectralGrid::new(32, rule);
        let mut g = gpu_solver(&gpu, grid, 0.0, &TG, TransformKind::Pruned);
        let k0 = g.flow_stats().unwrap().energy;
        let mut worst = 0.0f64;
        for _ in 0..100 {
            g.step(0.01).unwrap();
            worst = worst.max(rel(g.flow_stats().unwrap().energy, k0));
        }
        let z = g.flow_stats().unwrap().enstrophy;
        println!("inviscid TG 32³ {rule}: drift {worst:.2e}, Z {z:.4}");
        assert!(worst <= 1e-11, "{rule}: relative energy drift {worst:e}");
        assert!(
            z > 0.375 * 1.05,
            "{rule}: the flow did not develop, Z = {z}"
        );
    }
}

#[test]
fn gpu_energy_balance_from_rhs() {
    let Some(gpu) = gpu_or_skip() else { return };
    for rule in RULES {
        let nu = 0.02;
        let grid = SpectralGrid::new(24, rule);
        let ic = InitialCondition::Isotropic {
            kp: 4.0,
            u0: 1.0,
            seed: 3,
            k_cut: grid.kmax() as f64,
        };
        let mut g = gpu_solver(&gpu, grid, nu, &ic, TransformKind::Pruned);
        for step in 0..=60 {
            if step % 20 == 0 {
                let minus = -g.dkdt_from_rhs().unwrap();
                let eps = g.flow_stats().unwrap().dissipation;
                assert!(
                    rel(minus, eps) <= 1e-10,
                    "{rule} step {step}: {minus} vs {eps}"
                );
            }
            g.step(0.01).unwrap();
        }
    }
}

/// The host's diagnostics of `modes`: stats, spectrum, max |∇·u|.
fn host_diagnostics(
    grid: SpectralGrid,
    modes: &VectorModes,
    nu: f64,
) -> (vpm::diagnostics::FlowStats, Vec<f64>, f64) {
    let layout = grid.layout();
    let mut fft = Fft3d::new(grid.n, layout);
    (
        flow_stats(&layout, modes, nu),
        shell_spectrum(&layout, modes),
        max_divergence(&mut fft, modes),
    )
}

#[test]
fn gpu_diagnostics_match_host() {
    let Some(gpu) = gpu_or_skip() else { return };
    let nu = 0.01;
    for (n, kind) in [
        (18, TransformKind::Pruned),
        (24, TransformKind::Full),
        (32, TransformKind::Pruned),
        (32, TransformKind::Full),
    ] {
        for rule in RULES {
            let grid = SpectralGrid::new(n, rule);
            let ic = isotropic(11, n);
            let mut g = gpu_solver(&gpu, grid, nu, &ic, kind);
            for _ in 0..5 {
                g.step(0.01).unwrap();
            }
            let modes = g.velocity_modes().unwrap().clone();
            let (st, spec, div) = host_diagnostics(grid, &modes, nu);
            let gs = g.flow_stats().unwrap();
            let label = format!("{n}³ {rule} {}", kind.as_str());
            for (name, a, b) in [
                ("K", gs.energy, st.energy),
                ("Z", gs.enstrophy, st.enstrophy),
                ("L", gs.integral_scale, st.integral_scale),
                ("λ", gs.taylor_microscale, st.taylor_microscale),
                ("Re_λ", gs.re_lambda, st.re_lambda),
            ] {
                assert!(rel(a, b) <= 1e-13, "{label}: {name} {a} vs {b}");
            }
            let gspec = g.shell_spectrum().unwrap();
            assert_eq!(gspec.len(), spec.len(), "{label}: shells");
            for (s, (a, b)) in gspec.iter().zip(&spec).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-13 * st.energy,
                    "{label}: E({s}) {a} vs {b}"
                );
            }
            let total: f64 = gspec.iter().sum();
            assert!(rel(total, gs.energy) <= 1e-13, "{label}: Σ E(k) vs K");
            // dK/dt from the right-hand side: the CPU solver restored to the same modes.
            let mut c = SpectralSolver::new(grid, nu);
            c.restore_velocity_modes(modes.clone());
            let (a, b) = (g.dkdt_from_rhs().unwrap(), c.dkdt_from_rhs());
            assert!(rel(a, b) <= 1e-12, "{label}: dK/dt {a} vs {b}");
            // max |∇·u| is round-off on both: the same order of magnitude, far below |u|/h.
            let gdiv = g.max_divergence().unwrap();
            println!("{label}: max|∇·u| GPU {gdiv:.2e}, CPU {div:.2e}");
            assert!(
                gdiv < 1e-11 && div < 1e-11,
                "{label}: divergence {gdiv:e} / {div:e}"
            );
            // max |ω| on the N³ grid.
            let (a, b) = (g.max_vorticity().unwrap(), c.max_vorticity());
            assert!(rel(a, b) <= 1e-12, "{label}: max|ω| {a} vs {b}");
            // The velocity on the N³ grid.
            let gu = g.velocity_on_grid().unwrap();
            let cu = c.velocity_on_grid();
            let umax = cu[0].iter().fold(0.0f64, |m, x| m.max(x.abs()));
            for comp in 0..3 {
                let d = gu[comp]
                    .iter()
                    .zip(&cu[comp])
                    .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
                assert!(d <= 1e-13 * umax, "{label}: u[{comp}] differs by {d:e}");
            }
        }
    }
}

fn bits(m: &VectorModes) -> Vec<(u64, u64)> {
    m.iter()
        .flat_map(|c| c.iter().map(|z| (z.re.to_bits(), z.im.to_bits())))
        .collect()
}

#[test]
fn gpu_runs_are_bit_identical_and_restore_exactly() {
    let Some(gpu) = gpu_or_skip() else { return };
    for rule in RULES {
        let grid = SpectralGrid::new(32, rule);
        let ic = isotropic(5, 32);
        let run = |stop_at: Option<usize>| {
            let mut g = gpu_solver(&gpu, grid, 0.01, &ic, TransformKind::Pruned);
            for step in 0..20 {
                if Some(step) == stop_at {
                    let saved = g.velocity_modes().unwrap().clone();
                    g = GpuSpectralSolver::new(gpu.clone(), grid, 0.01).unwrap();
                    g.restore_velocity_modes(saved).unwrap();
                }
                g.step(0.01).unwrap();
            }
            let st = g.flow_stats().unwrap();
            let spec = g.shell_spectrum().unwrap();
            (bits(g.velocity_modes().unwrap()), st.energy.to_bits(), spec)
        };
        let a = run(None);
        let b = run(None);
        let c = run(Some(10));
        assert!(a == b, "{rule}: two runs differ");
        assert!(a == c, "{rule}: the restored run differs");
    }
}

#[test]
fn gpu_full_and_pruned_transforms_agree() {
    let Some(gpu) = gpu_or_skip() else { return };
    for rule in RULES {
        let (grid, ic) = (SpectralGrid::new(32, rule), isotropic(9, 32));
        let solver = |kind| gpu_solver(&gpu, grid, 0.01, &ic, kind);
        let (mut p, mut f) = (solver(TransformKind::Pruned), solver(TransformKind::Full));
        for _ in 0..20 {
            p.step(0.01).unwrap();
            f.step(0.01).unwrap();
        }
        let (a, b) = (
            p.velocity_modes().unwrap().clone(),
            f.velocity_modes().unwrap(),
        );
        let scale = a[0].iter().fold(0.0f64, |m, z| m.max(z.norm()));
        let d = a
            .iter()
            .zip(b)
            .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).norm()))
            .fold(0.0f64, f64::max);
        assert!(d <= 1e-13 * scale, "{rule}: pruned vs full differ by {d:e}");
    }
}

#[test]
fn gpu_nonfinite_step_is_not_committed() {
    let Some(gpu) = gpu_or_skip() else { return };
    let grid = SpectralGrid::new(16, Dealias::TwoThirds);
    let mut g = gpu_solver(&gpu, grid, 0.01, &TG, TransformKind::Pruned);
    let mut modes = g.velocity_modes().unwrap().clone();
    modes[1][7] = Complex64::new(f64::NAN, 0.0);
    g.restore_velocity_modes(modes.clone()).unwrap();
    g.forget_host_copy();
    let before = bits(g.velocity_modes().unwrap());
    match g.step(0.01) {
        Err(SpectralError::NonFinite(_)) => {}
        other => panic!("expected a non-finite step, got {other:?}"),
    }
    // What the device holds, not the host copy.
    g.forget_host_copy();
    let after = bits(g.velocity_modes().unwrap());
    assert!(before == after, "the failed step changed the state");
}

#[test]
fn gpu_spectral_memory_within_estimate() {
    let Some(gpu) = gpu_or_skip() else { return };
    for (n, rule) in [
        (64, Dealias::ThreeHalves),
        (128, Dealias::TwoThirds),
        (128, Dealias::ThreeHalves),
    ] {
        let grid = SpectralGrid::new(n, rule);
        let free0 = gpu.free_memory().unwrap();
        let mut g = gpu_solver(&gpu, grid, 0.01, &TG, TransformKind::Pruned);
        g.step(1e-3).unwrap();
        let _ = g.max_divergence().unwrap();
        let _ = g.velocity_on_grid().unwrap();
        let free1 = gpu.free_memory().unwrap();
        let used = free0.saturating_sub(free1) as u64;
        let est = GpuSpectralSolver::device_bytes(grid);
        let resident = g.resident_bytes();
        println!(
            "{n}³ {rule}: driver {:.1} MB, resident {:.1} MB, estimate {:.1} MB",
            used as f64 / 1e6,
            resident as f64 / 1e6,
            est as f64 / 1e6
        );
        assert!(
            resident <= est,
            "{n}³ {rule}: resident {resident} > estimate {est}"
        );
        assert!(
            used <= est,
            "{n}³ {rule}: driver saw {used} > estimate {est}"
        );
        // The trait reports the GPU.
        assert!(SpectralStepper::device(&g).is_cuda());
    }
}
