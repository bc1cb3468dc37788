//! The GPU-resident vortex stepper (src/vortex/resident.rs) against the host-driven CPU f64
//! stepper on the same case, and its determinism: two runs, and a run stopped and resumed from
//! its checkpoint arrays, are bit-identical. Every test skips with a printed reason without a
//! GPU.

use vpm::config::{resolve_case, Case, TimeStep};
use vpm::device::{Device, DeviceRequest};
use vpm::diagnostics::flow_stats;
use vpm::particles::ParticleSet;
use vpm::run::field::initial_particles;
use vpm::summation::ewald::cuda::F32_ACCURACY_FLOOR;
use vpm::summation::verify::{self, gpu_or_skip};
use vpm::vortex::stepper::{ParticleStepper, ParticleSummary};
use vpm::vortex::{NamedArray, RbfSolver, VortexClock, VortexError};

/// A stepper's exact state, as a checkpoint holds it.
type State = (Vec<NamedArray>, VortexClock);

fn fixed_dt(c: &Case) -> f64 {
    match c.time.step {
        TimeStep::Fixed { dt } => dt,
        _ => panic!("case `{}` has no fixed Δt", c.name),
    }
}

/// The named case, its far field at the GPU PME's floor (the finest both evaluators take, below
/// the cases' default; [`K_TOL`] follows from it).
fn case(name: &str) -> Case {
    let mut c = resolve_case(name).expect("named case").0;
    if let Some(v) = c.vortex.as_mut() {
        v.accuracy = F32_ACCURACY_FLOOR;
    }
    c
}

fn initial(case: &Case) -> ParticleSet {
    initial_particles(case)
        .unwrap()
        .expect("a [vortex] section")
        .0
}

fn stepper(case: &Case, device: &Device, p: ParticleSet) -> Box<dyn ParticleStepper> {
    let recipe = vpm::run::plan::evaluator_recipe(case, device, p.len()).unwrap();
    vpm::run::particle_stepper(case, &recipe, p, true).unwrap()
}

fn gpu_device() -> Option<Device> {
    gpu_or_skip()?;
    Some(Device::open(DeviceRequest::Cuda(None)).unwrap().0)
}

/// K of the particle field on the case's spectral grid.
fn energy(s: &mut dyn ParticleStepper, n: usize) -> f64 {
    let (layout, modes) = s.velocity_modes_on_grid(n).unwrap();
    flow_stats(&layout, &modes, 0.0).energy
}

fn max_abs_diff(a: &[[f64; 3]], b: &[[f64; 3]]) -> f64 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

fn max_abs(a: &[[f64; 3]]) -> f64 {
    a.iter().flatten().map(|x| x.abs()).fold(0.0, f64::max)
}

/// The GPU stepper against the CPU f64 stepper on `name` for `steps` steps of the case's Δt:
/// K(t) at every step within `k_tol` relative, positions and strengths after the first
/// reinitialisation.
fn gpu_against_cpu(name: &str, steps: usize, k_tol: f64) {
    let Some(gpu) = gpu_device() else { return };
    let c = case(name);
    let n_grid = c.spectral.as_ref().unwrap().n;
    let dt = fixed_dt(&c);
    let reinit = c.vortex.as_ref().unwrap().reinit_every.unwrap() as usize;
    let p = initial(&c);
    let mut cpu = stepper(&c, &Device::Cpu, p.clone());
    let mut gpu_s = stepper(&c, &gpu, p);
    assert!(
        gpu_s.describe().contains("resident"),
        "{}",
        gpu_s.describe()
    );
    let mut worst: f64 = 0.0;
    for step in 0..=steps {
        let (kc, kg) = (energy(cpu.as_mut(), n_grid), energy(gpu_s.as_mut(), n_grid));
        let rel = (kg - kc).abs() / kc;
        worst = worst.max(rel);
        assert!(
            rel < k_tol,
            "{name} step {step}: K gpu {kg} cpu {kc}, rel {rel:e}"
        );
        if step == reinit {
            // Just after the first reinitialisation: both on the lattice, strengths compared.
            let (pc, pg) = (
                cpu.particles().unwrap().clone(),
                gpu_s.particles().unwrap().clone(),
            );
            assert_eq!(pc.len(), pg.len());
            assert_eq!(max_abs_diff(&pc.x, &pg.x), 0.0, "lattice positions");
            assert_eq!(pc.sigma, pg.sigma);
            let e = max_abs_diff(&pc.alpha, &pg.alpha) / max_abs(&pc.alpha);
            println!("{name}: strengths after the first reinitialisation, max rel diff {e:e}");
            assert!(e < 1e-4, "strengths after reinitialisation differ by {e:e}");
            // The device's summary against the same sums over the pulled GPU particles
            // (round-off), and against the CPU run's (the f32 of the pair sums).
            let (sc, sh, sg) = (
                ParticleSummary::of(&pc),
                ParticleSummary::of(&pg),
                gpu_s.summary().unwrap(),
            );
            assert_eq!(sc.count, sg.count);
            assert_eq!(sh.sigma_max, sg.sigma_max);
            let scale: f64 =
                pg.x.iter()
                    .zip(&pg.alpha)
                    .map(|(x, a)| max_abs(&[*x]) * max_abs(&[*a]))
                    .sum();
            let strength_scale: f64 = pg.alpha.iter().map(|a| max_abs(&[*a])).sum();
            for c in 0..3 {
                assert!(
                    (sg.total_strength[c] - sh.total_strength[c]).abs() < 1e-12 * strength_scale,
                    "Σα device {:?} host {:?}",
                    sg.total_strength,
                    sh.total_strength
                );
                assert!(sg.total_strength[c].abs() < 1e-10 * strength_scale);
                assert!((sg.impulse[c] - sh.impulse[c]).abs() < 1e-12 * scale);
                assert!(
                    (sc.impulse[c] - sg.impulse[c]).abs() < 1e-6 * scale,
                    "impulse cpu {:?} gpu {:?} (scale {scale:e})",
                    sc.impulse,
                    sg.impulse
                );
            }
        }
        if step < steps {
            cpu.step(dt).unwrap();
            gpu_s.step(dt).unwrap();
        }
    }
    println!("{name}: {steps} steps, worst relative K difference GPU vs CPU {worst:e}");
}

/// K of the GPU run against the CPU f64 run, relative: both evaluators run at ε =
/// [`F32_ACCURACY_FLOOR`] (1e-5, [`case`]), K is quadratic in the velocity, so the two differ by
/// about 2ε (1.23e-5 measured at step 0 of hit-64-compare on an H100); 4ε leaves room for the
/// drift over the steps. (It was 1e-5 when the evaluators ran at 1e-6.)
const K_TOL: f64 = 4.0 * F32_ACCURACY_FLOOR;

#[test]
fn resident_stepper_matches_cpu_on_hit_32_compare() {
    // the whole case: t ≤ 2 at Δt = 0.01
    gpu_against_cpu("hit-32-compare", 200, K_TOL);
}

#[test]
fn resident_stepper_matches_cpu_on_50_steps_of_hit_64_compare() {
    gpu_against_cpu("hit-64-compare", 50, K_TOL);
}

/// The exact state after `steps` steps from the case's start (AB2 history included).
fn state_after(c: &Case, gpu: &Device, steps: usize) -> State {
    let dt = fixed_dt(c);
    let mut s = stepper(c, gpu, initial(c));
    for _ in 0..steps {
        s.step(dt).unwrap();
    }
    s.state_arrays().unwrap()
}

/// Two checkpoint states are the same to the bit: clock, array names and values.
#[track_caller]
fn assert_same_state(got: &State, want: &State, when: &str) {
    assert_eq!(got.1, want.1, "clock {when}");
    assert_eq!(got.0.len(), want.0.len());
    for (x, y) in got.0.iter().zip(&want.0) {
        assert_eq!(x.0, y.0);
        assert!(
            x.2.iter()
                .zip(&y.2)
                .all(|(p, q)| p.to_bits() == q.to_bits()),
            "array {} differs {when}",
            x.0
        );
    }
}

#[test]
fn resident_runs_are_bit_identical_and_resume_exactly() {
    let Some(gpu) = gpu_device() else { return };
    let c = case("hit-32-compare");
    let dt = fixed_dt(&c);
    // 7 steps: reinitialisations after steps 2, 4, 6, and an AB2 history at the end.
    let a = state_after(&c, &gpu, 7);
    assert_same_state(&state_after(&c, &gpu, 7), &a, "between two runs");
    // Stop after 3 steps (history present), restore into a fresh stepper, go on to 7.
    let (arrays, clock) = state_after(&c, &gpu, 3);
    assert!(clock.history_dt.is_some());
    let mut resumed = stepper(&c, &gpu, ParticleSet::default());
    let get = |name: &str| arrays.iter().find(|a| a.0 == name).map(|a| a.2.clone());
    resumed.restore_state(&get, clock).unwrap();
    for _ in 3..7 {
        resumed.step(dt).unwrap();
    }
    assert_same_state(&resumed.state_arrays().unwrap(), &a, "after resume");
}

/// The host waits for the GPU at most once per resident step (src/vortex/resident.rs, "One host
/// wait per step"): every engine queues on the GPU's one stream, and the step reads its finite
/// flag, with the stability limits where the next step starts when Δt is chosen by CFL, in one
/// copy. Counted per step on this thread (`thread_sync_counts`: other tests share the GPU) on
/// `hit-32-compare` (48³ particles, reinitialisation every 2 steps), reinitialisation steps and
/// the Heun steps after them included: with a fixed Δt every step; by CFL every step but the
/// first (it measures the limits at the initial state: one more wait). Output is not part of a
/// step: its waits (grid diagnostics, summary) are counted separately and printed. And the
/// steps prepared ahead by CFL stepping leave the same bits as the same steps without it.
#[test]
fn resident_step_waits_for_the_gpu_once() {
    use vpm::device::cuda::{thread_sync_counts, SyncCounts};
    let Some(gpu) = gpu_device() else { return };
    let c = case("hit-32-compare");
    let n = c.spectral.as_ref().map_or(32, |s| s.n);
    let counted = |f: &mut dyn FnMut()| -> SyncCounts {
        let before = thread_sync_counts();
        f();
        thread_sync_counts() - before
    };
    let steps = 7;
    // A fixed Δt.
    let dt = fixed_dt(&c);
    let mut s = stepper(&c, &gpu, initial(&c));
    for k in 1..=steps {
        let w = counted(&mut || s.step(dt).unwrap());
        println!("fixed Δt, step {k}: {w}");
        assert!(
            w.waits <= 1 && w.copies_to_host <= 1,
            "fixed Δt, step {k}: {w}"
        );
    }
    let w = counted(&mut || {
        s.grid_diagnostics(n, c.flow.nu).unwrap();
        s.summary().unwrap();
    });
    println!("output (grid diagnostics and summary, not a step): {w}");
    // Δt by CFL: stable_dt, then the step.
    let mut s = stepper(&c, &gpu, initial(&c));
    let mut dts = Vec::new();
    for k in 1..=steps {
        let w = counted(&mut || {
            let dt = s.stable_dt(0.5).unwrap();
            s.step(dt).unwrap();
            dts.push(dt);
        });
        println!("CFL, step {k} (Δt = {:.3e}): {w}", dts[k - 1]);
        let most = if k == 1 { 2 } else { 1 };
        assert!(
            w.waits <= most && w.copies_to_host <= most,
            "CFL, step {k}: {w} (at most {most})"
        );
    }
    let cfl = s.state_arrays().unwrap();
    // The same steps without asking for the limits: nothing prepared ahead.
    let mut plain = stepper(&c, &gpu, initial(&c));
    for &dt in &dts {
        plain.step(dt).unwrap();
    }
    assert_same_state(&plain.state_arrays().unwrap(), &cfl, "with and without CFL");
}

#[test]
fn resident_stepper_refuses_cg_and_reports_non_finite_states() {
    let Some(gpu) = gpu_device() else { return };
    let mut c = case("hit-32-compare");
    c.vortex.as_mut().unwrap().rbf = RbfSolver::ConjugateGradient {
        tolerance: RbfSolver::DEFAULT_TOLERANCE,
        max_iterations: RbfSolver::DEFAULT_MAX_ITERATIONS,
    };
    let p = initial(&case("hit-32-compare"));
    let recipe = vpm::run::plan::evaluator_recipe(&c, &gpu, p.len()).unwrap();
    let e = vpm::run::particle_stepper(&c, &recipe, p, true)
        .err()
        .expect("cg on a GPU is refused");
    let msg = format!("{e:#}");
    assert!(
        msg.contains("rbf = \"cg\"") && msg.contains("spectral") && msg.contains("exact"),
        "{msg}"
    );
    // A NaN strength: the step is refused, the state kept.
    let c = case("hit-32-compare");
    let mut p = initial(&c);
    p.alpha[17][1] = f64::NAN;
    let mut s = stepper(&c, &gpu, p);
    match s.step(0.01) {
        Err(VortexError::NonFinite) | Err(VortexError::Summation(_)) => {}
        other => panic!("expected a non-finite error, got {other:?}"),
    }
}

#[test]
fn resident_stable_dt_matches_cpu() {
    let Some(gpu) = gpu_device() else { return };
    let c = case("hit-32-compare");
    let p = initial(&c);
    let mut cpu = stepper(&c, &Device::Cpu, p.clone());
    let mut g = stepper(&c, &gpu, p);
    let (a, b) = (cpu.stable_dt(0.5).unwrap(), g.stable_dt(0.5).unwrap());
    assert!((a - b).abs() < 1e-5 * a, "stable Δt cpu {a} gpu {b}");
    // The derivatives pulled from the device agree with the CPU's.
    let ((uc, sc), (ug, sg)) = (cpu.derivatives().unwrap(), g.derivatives().unwrap());
    let eu = verify::rel_l2(&ug, &uc);
    let es = verify::rel_l2(&sg, &sc);
    println!("derivatives GPU vs CPU: velocity {eu:e}, stretching {es:e}");
    assert!(eu < 1e-5 && es < 1e-4, "velocity {eu:e}, stretching {es:e}");
}

/// The GPU Ewald evaluator's separable lattice sum of the blob vorticity (reinitialisation)
/// against the CPU's (`summation::lattice`, the same cube cutoff), for particles off the lattice
/// with unequal cores, and bit-identical when repeated.
#[test]
fn gpu_lattice_vorticity_matches_cpu_separable_sum() {
    use vpm::device::buffer::DeviceBuffer;
    use vpm::summation::ewald::CudaEwald;
    use vpm::summation::{DeviceSources, Sources, Summation};
    let Some(gpu) = gpu_or_skip() else { return };
    let mut ew = CudaEwald::new(gpu.clone(), 1e-5).unwrap();
    for (n, count, smin, smax, seed) in [
        (32usize, 20_000usize, 0.1, 0.2, 1u64),
        (48, 5_000, 0.05, 0.25, 2),
        (24, 3_000, 0.08, 0.12, 3),
    ] {
        let p = verify::Particles::random_in_box(count, 1.0, smin, smax, seed);
        let src = Sources {
            x: &p.x,
            alpha: &p.alpha,
            sigma: &p.sigma,
        };
        let mut cpu = Vec::new();
        vpm::summation::lattice::lattice_vorticity(&src, n, &mut cpu).unwrap();
        let stream = ew.device().stream().clone();
        let (mut x, mut a, mut s) = (
            DeviceBuffer::new(),
            DeviceBuffer::new(),
            DeviceBuffer::new(),
        );
        x.upload(&stream, p.x.as_flattened(), "x").unwrap();
        a.upload(&stream, p.alpha.as_flattened(), "alpha").unwrap();
        s.upload(&stream, &p.sigma, "sigma").unwrap();
        let sigma_max = p.sigma.iter().copied().fold(0.0, f64::max);
        let dev_src = DeviceSources {
            x: &x,
            alpha: &a,
            sigma: &s,
            n: count,
            sigma_max,
            equal_cores: false,
        };
        let mut runs = Vec::new();
        for _ in 0..2 {
            let mut out = DeviceBuffer::new();
            let used = ew
                .device_form()
                .unwrap()
                .vorticity_on_lattice_device(&dev_src, n, &mut out)
                .unwrap();
            assert!(used, "n = {n}: the lattice method applies");
            let mut host = vec![0.0; 3 * n * n * n];
            out.download(&gpu, &mut host, "vorticity").unwrap();
            runs.push(host);
        }
        assert!(
            runs[0]
                .iter()
                .zip(&runs[1])
                .all(|(p, q)| p.to_bits() == q.to_bits()),
            "n = {n}: two evaluations differ"
        );
        let gpu3: Vec<[f64; 3]> = runs[0]
            .chunks_exact(3)
            .map(|c| [c[0], c[1], c[2]])
            .collect();
        let e = verify::rel_l2(&gpu3, &cpu);
        println!("lattice vorticity n = {n}, {count} particles: GPU vs CPU relative L2 {e:e}");
        assert!(e < 1e-12, "n = {n}: {e:e}");
    }
}

/// The particle field's diagnostics reduced on the device (`ParticleStepper::grid_diagnostics`,
/// src/spectral/gpu.rs `DeviceGridDiagnostics`) against the host's on the modes of the same
/// velocity (`velocity_modes_on_grid`): K, Z, L, λ, E(k) and max |∇·u|, on grids of 32³ (the
/// lattice's) and 24³ (not a power of two), after a few steps of `hit-32-compare`.
#[test]
fn resident_grid_diagnostics_match_host() {
    let Some(device) = gpu_device() else { return };
    let c = case("hit-32-compare");
    let nu = c.flow.nu;
    let mut s = stepper(&c, &device, initial(&c));
    for _ in 0..3 {
        s.prepare_step(fixed_dt(&c)).unwrap();
        s.commit_step().unwrap();
    }
    for n in [32, 24] {
        let d = s
            .grid_diagnostics(n, nu)
            .unwrap()
            .expect("the resident stepper has them");
        let (layout, modes) = s.velocity_modes_on_grid(n).unwrap();
        assert_eq!(d.layout, layout, "{n}³: layout");
        let st = flow_stats(&layout, &modes, nu);
        let rel = |a: f64, b: f64| ((a - b) / b).abs();
        for (name, a, b) in [
            ("K", d.stats.energy, st.energy),
            ("Z", d.stats.enstrophy, st.enstrophy),
            ("L", d.stats.integral_scale, st.integral_scale),
            ("λ", d.stats.taylor_microscale, st.taylor_microscale),
        ] {
            assert!(rel(a, b) <= 1e-12, "{n}³: {name} {a} vs {b}");
        }
        let spec = vpm::diagnostics::shell_spectrum(&layout, &modes);
        assert_eq!(d.spectrum.len(), spec.len());
        for (k, (a, b)) in d.spectrum.iter().zip(&spec).enumerate() {
            assert!(
                (a - b).abs() <= 1e-12 * st.energy,
                "{n}³: E({k}) {a} vs {b}"
            );
        }
        let mut fft = vpm::spectral::Fft3d::new(n, layout);
        let div = vpm::diagnostics::max_divergence(&mut fft, &modes);
        println!(
            "{n}³: K {:.6e} (host {:.6e}), max|∇·u| {:.3e} (host {:.3e})",
            d.stats.energy, st.energy, d.max_divergence, div
        );
        assert!(
            (d.max_divergence - div).abs() <= 1e-9 * div.max(1e-300) + 1e-15,
            "{n}³: max|∇·u| {} vs {div}",
            d.max_divergence
        );
        let w = vpm::diagnostics::max_vorticity(&mut fft, &modes);
        assert!(
            rel(d.max_vorticity, w) <= 1e-12,
            "{n}³: max|ω| {} vs {w}",
            d.max_vorticity
        );
    }
}
