//! The periodic FMM ([`FmmPeriodic`]) against the Fourier-series oracle (f64, to 1e-8) and the
//! Ewald sum, the convergence of its image sums, and the sign and size of the vacuum term it
//! subtracts (docs/physics.md §4).

use vpm::summation::fmm::periodic::{VacuumTerm, LATTICE_LEVELS};
use vpm::summation::fmm::{Fmm, FmmPeriodic};
use vpm::summation::oracle::FourierOracle;
use vpm::summation::verify::{flat9, rel_l2, Particles};
use vpm::summation::{ewald::EwaldPeriodic, Evaluation, Extra, Summation};

/// Velocity and gradient of `e` at the particles themselves.
fn evaluate(e: &mut dyn Summation, p: &Particles) -> Evaluation {
    let mut out = Evaluation::default();
    e.evaluate(&p.sources(), &p.x, Extra::Gradient, &mut out)
        .unwrap();
    out
}

/// Relative L2 errors of the velocity and the gradient of `a` against `b`.
fn errors(a: &Evaluation, b: &Evaluation) -> (f64, f64) {
    (
        rel_l2(&a.velocity, &b.velocity),
        rel_l2(&flat9(&a.gradient), &flat9(&b.gradient)),
    )
}

/// A few hundred particles with unequal cores, some outside the box (wrapped).
fn particles(mean: [f64; 3]) -> Particles {
    let mut p = Particles::random_in_box(300, 1.1, 0.35, 0.6, 3);
    for a in &mut p.alpha {
        *a = [0, 1, 2].map(|k| a[k] + mean[k]);
    }
    p
}

fn oracle(p: &Particles) -> Evaluation {
    evaluate(&mut FourierOracle::new(), p)
}

#[test]
fn matches_the_oracle_to_1e_8_with_and_without_a_mean_strength() {
    for mean in [[0.0; 3], [0.3, -0.2, 0.5]] {
        let p = particles(mean);
        let want = oracle(&p);
        let mut fmm = FmmPeriodic::new(1e-9, 0).unwrap();
        let got = evaluate(&mut fmm, &p);
        let (ev, eg) = errors(&got, &want);
        println!(
            "mean {mean:?}: velocity {ev:.2e}, gradient {eg:.2e} ({})",
            fmm.name()
        );
        assert!(ev < 1e-8 && eg < 1e-8, "mean {mean:?}: {ev:e} {eg:e}");
    }
}

/// The cube-ordered image sum differs from the oracle by the vacuum term: its sign and factor
/// (ε_kjl (D_lj − Q_l x_j)/(3V)) on a set with a large D = Σ α x.
#[test]
fn the_vacuum_term_has_the_derived_sign_and_size() {
    let mut p = particles([0.1, 0.0, -0.2]);
    // α_z ∝ x: a large D_zx.
    for (a, x) in p.alpha.iter_mut().zip(&p.x.clone()) {
        a[2] += 2.0 * x[0].clamp(-3.0, 3.0);
    }
    let want = oracle(&p);
    let mut vac = FmmPeriodic::new(1e-9, 0).unwrap().vacuum_convention();
    vac.disable_checks();
    let got = evaluate(&mut vac, &p);
    let wrapped: Vec<[f64; 3]> = p
        .x
        .iter()
        .map(|x| {
            x.map(|v| {
                (v + std::f64::consts::PI).rem_euclid(std::f64::consts::TAU) - std::f64::consts::PI
            })
        })
        .collect();
    let term = VacuumTerm::of(&wrapped, &p.alpha);
    let diff: Vec<[f64; 3]> = (0..p.len())
        .map(|i| [0, 1, 2].map(|k| got.velocity[i][k] - want.velocity[i][k]))
        .collect();
    let predicted: Vec<[f64; 3]> = wrapped.iter().map(|x| term.velocity(*x)).collect();
    let e = rel_l2(&diff, &predicted);
    let rms =
        |v: &[[f64; 3]]| (v.iter().flatten().map(|c| c * c).sum::<f64>() / v.len() as f64).sqrt();
    let share = rms(&predicted) / rms(&want.velocity);
    println!("vacuum term: {share:.2} of the rms velocity, predicted to {e:.2e}");
    assert!(
        share > 0.05,
        "the set's vacuum term is too small to test: {share}"
    );
    assert!(e < 1e-6, "the difference is not the predicted term: {e:e}");
    // The gradient's term is uniform: −ε_kml Q_l/(3V).
    let g = flat9(&[term.gradient()])[0];
    for (a, b) in flat9(&got.gradient).iter().zip(&flat9(&want.gradient)) {
        for c in 0..9 {
            assert!(
                (a[c] - b[c] - g[c]).abs() < 1e-7,
                "{} vs {}",
                a[c] - b[c],
                g[c]
            );
        }
    }
}

/// The periodic FMM at 1e-9 with `near_level`, `levels` and lattice order 30, unchecked.
fn with_images(near_level: u32, levels: usize) -> FmmPeriodic {
    let mut f = FmmPeriodic::new(1e-9, 0)
        .unwrap()
        .with_images(near_level, levels, 30);
    f.disable_checks();
    f
}

/// The lattice sum converges with the supercell levels (each adds about 9× less), and the
/// near images S_2 give the same answer as S_3 (|n|∞ ≤ 13) within the request.
#[test]
fn the_image_sums_converge_in_levels_and_near_images() {
    let p = Particles::random_in_box(200, 1.0, 0.4, 0.5, 9);
    let reference = evaluate(&mut with_images(2, 16), &p);
    let mut last = f64::INFINITY;
    for levels in [2, 4, 6, 8] {
        let mut f = with_images(2, levels);
        let (ev, _) = errors(&evaluate(&mut f, &p), &reference);
        println!("levels {levels}: velocity {ev:.2e}");
        assert!(
            ev < last / 20.0 || ev < 1e-12,
            "levels {levels}: {ev:e} after {last:e}"
        );
        last = ev;
    }
    let mut f = FmmPeriodic::new(1e-9, 0).unwrap();
    let (ev, _) = errors(&evaluate(&mut f, &p), &reference);
    assert!(ev < 1e-10, "{LATTICE_LEVELS} levels: {ev:e}");
    // The images of S_3 \ S_2 (|n|∞ = 5…13) through the tree instead of the lattice sum.
    let q = Particles::random_in_box(32, 1.0, 0.4, 0.5, 4);
    let t = std::time::Instant::now();
    let mut near3 = FmmPeriodic::new(1e-5, 0).unwrap().with_images(3, 14, 30);
    near3.disable_checks();
    let (ev, eg) = errors(
        &evaluate(&mut near3, &q),
        &evaluate(&mut with_images(2, 14), &q),
    );
    println!(
        "S_3 against S_2: velocity {ev:.2e}, gradient {eg:.2e} ({:.2} s)",
        t.elapsed().as_secs_f64()
    );
    assert!(ev < 1e-6 && eg < 1e-6, "{ev:e} {eg:e}");
}

/// Against the Ewald sum on a jittered 12³ lattice at 1e-4 and 1e-6: the two periodic methods
/// agree to the request.
#[test]
fn matches_ewald_on_a_lattice() {
    let p = Particles::lattice(12, 0.3, 5);
    let want = evaluate(&mut EwaldPeriodic::new(1e-9), &p);
    for accuracy in [1e-4, 1e-6] {
        let mut fmm = FmmPeriodic::new(accuracy, 0).unwrap();
        let t = std::time::Instant::now();
        let got = evaluate(&mut fmm, &p);
        let (ev, eg) = errors(&got, &want);
        println!(
            "{accuracy:e}: velocity {ev:.2e}, gradient {eg:.2e}, {:.2} s",
            t.elapsed().as_secs_f64()
        );
        assert!(
            ev < accuracy && eg < accuracy,
            "{accuracy:e}: {ev:e} {eg:e}"
        );
    }
}

/// The built-in check compares with a finer Ewald sum and passes.
#[test]
fn the_built_in_check_compares_with_ewald() {
    let p = Particles::lattice(8, 0.3, 2);
    let mut fmm = FmmPeriodic::new(1e-5, 1).unwrap();
    let mut out = Evaluation::default();
    let extra = Extra::Stretching {
        alpha: &p.alpha,
        scheme: vpm::kernel::StretchingScheme::Transposed,
    };
    fmm.evaluate(&p.sources(), &p.x, extra, &mut out).unwrap();
    let checks = fmm.take_accuracy_checks();
    assert_eq!(checks.len(), 1);
    assert!(
        checks[0].passed() && checks[0].velocity_l2 < 1e-5,
        "{:?}",
        checks[0]
    );
}

/// Timings of both periodic methods on 16³ and 32³ lattices at 1e-4 (velocity + stretching,
/// the machine's threads): `cargo test --test periodic_fmm timings -- --ignored --nocapture`.
#[test]
#[ignore]
fn timings() {
    for n in [16, 32] {
        let p = Particles::lattice(n, 0.3, 1);
        let extra = Extra::Stretching {
            alpha: &p.alpha,
            scheme: vpm::kernel::StretchingScheme::Transposed,
        };
        let mut fmm = FmmPeriodic::new(1e-4, 0).unwrap();
        fmm.disable_checks();
        let mut ewald = EwaldPeriodic::new(1e-4);
        let (mut a, mut b) = (Evaluation::default(), Evaluation::default());
        for _ in 0..2 {
            let t = std::time::Instant::now();
            fmm.evaluate(&p.sources(), &p.x, extra, &mut a).unwrap();
            let tf = t.elapsed().as_secs_f64();
            let t = std::time::Instant::now();
            ewald.evaluate(&p.sources(), &p.x, extra, &mut b).unwrap();
            let te = t.elapsed().as_secs_f64();
            let s = fmm.last_stats();
            println!(
                "{n}³: FMM {tf:.3} s (tree {:.3}, up {:.3}, m2l+far {:.3}, down {:.3}, p2p {:.3}; \
                 {} M2L, {:.0} near pairs/target), Ewald {te:.3} s; velocity differ {:.2e}",
                s.tree_seconds,
                s.upward_seconds,
                s.m2l_seconds,
                s.downward_seconds,
                s.p2p_seconds,
                s.m2l_pairs,
                s.p2p_per_target(),
                rel_l2(&a.velocity, &b.velocity)
            );
        }
    }
}

// --- `vpm verify periodic` and `evaluator = "auto"` end to end --------------------------------

mod common;
use common::{assert_failed, assert_ok, manifest, run, s, stderr, stdout};
use std::fs;

/// quick.toml's Taylor–Green flow with particles: an 8³ lattice, `vortex_keys` added.
fn periodic_case(vortex_keys: &str) -> String {
    format!(
        "description = \"Taylor–Green with 8³ particles\"\n\n[flow]\nnu = 0.05\n\n[initial]\n\
         kind = \"taylor-green\"\n\n[time]\nt_end = 0.04\ndt = 0.02\n\n[output]\nevery_steps = 1\n\n\
         [checkpoint]\nevery_steps = 1\n\n[spectral]\nn = 16\ndealias = \"2/3\"\n\n[vortex]\nn = 8\n\
         {vortex_keys}"
    )
}

#[test]
fn verify_periodic_prints_the_two_methods_differences() {
    let tmp = tempfile::tempdir().unwrap();
    let case = tmp.path().join("tg.toml");
    fs::write(&case, periodic_case("accuracy = 1e-4\n")).unwrap();
    let o = run(&[
        "verify",
        "periodic",
        s(&case),
        "--sample",
        "200",
        "--threads",
        "2",
    ]);
    assert_ok(&o, "vpm verify periodic");
    let out = stdout(&o);
    assert!(out.contains("the two methods agree"), "{out}");
    for q in ["velocity", "stretching"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(q))
            .unwrap_or_else(|| panic!("{out}"));
        let l2: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(l2 < 3e-4, "{q}: {l2} ({out})");
    }
    // A free-space case is refused, naming why.
    let o = run(&["verify", "periodic", "ring", "--threads", "2"]);
    assert_failed(&o, "verify periodic of a ring");
    assert!(stderr(&o).contains("free space"), "{}", stderr(&o));
}

/// The latest checkpoint's meta.json of a run.
fn latest_meta(run_dir: &std::path::Path) -> std::path::PathBuf {
    let mut metas: Vec<_> = fs::read_dir(run_dir.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path().join("meta.json"))
        .filter(|p| p.exists())
        .collect();
    metas.sort();
    metas.pop().expect("a checkpoint")
}

/// `evaluator = "auto"` (the default) picks a method with both estimates in the manifest,
/// stores it in the checkpoints, and a resume keeps the stored one (here edited to "fmm", as
/// if the constants had chosen it) rather than choosing again.
#[test]
fn auto_choice_is_logged_stored_and_kept_on_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let case = tmp.path().join("tg.toml");
    fs::write(&case, periodic_case("accuracy = 1e-4\n")).unwrap();
    let dir = tmp.path().join("run");
    let o = run(&["run", s(&case), "--out", s(&dir), "--threads", "2"]);
    assert_ok(&o, "run with evaluator auto");
    let m = manifest(&dir);
    let choice = m["evaluator_choice"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        choice.contains("chose \"ewald\"") && choice.contains("\"fmm\""),
        "{m:#}"
    );
    assert!(
        m["evaluators"]["vortex"]
            .as_str()
            .unwrap()
            .contains("Ewald"),
        "{m:#}"
    );
    let meta = latest_meta(&dir);
    let text = fs::read_to_string(&meta).unwrap();
    assert!(
        text.contains("\"evaluator\": \"ewald\"") || text.contains("\"evaluator\":\"ewald\""),
        "{text}"
    );
    // The resumed run keeps what the checkpoint says was chosen.
    let text = text.replace("\"ewald\"", "\"fmm\"");
    fs::write(&meta, text).unwrap();
    let o = run(&["resume", s(&dir), "--t-end", "0.06", "--threads", "2"]);
    assert_ok(&o, "resume");
    let m = manifest(&dir);
    let vortex = m["evaluators"]["vortex"].as_str().unwrap();
    assert!(vortex.contains("FMM periodic"), "{m:#}");
    let text = fs::read_to_string(latest_meta(&dir)).unwrap();
    assert!(text.contains("fmm"), "{text}");
}
