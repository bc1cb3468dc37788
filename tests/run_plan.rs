//! One plan per run: `vpm check` and the run's manifest read the same evaluator recipe, and a
//! particle-defined flow is sampled once, by the plan, before the model takes its particles.

mod common;

use vpm::config::resolve_case;
use vpm::run::RunPlan;

#[test]
fn the_plan_samples_once_and_sizes_the_evaluator_for_those_particles() {
    let (case, _) = resolve_case("ring").unwrap();
    let mut plan = RunPlan::new(&case).unwrap();
    let sampled = vpm::run::sampling::initial_particles(&case).unwrap().len();
    assert_eq!(plan.particle_count, sampled);
    let recipe = plan.evaluator.as_ref().expect("a particle evaluator");
    assert_eq!(recipe.problem.particles, sampled);
    // The memory estimate reads the plan's count: the checkpoint row holds 14 doubles per
    // particle for each checkpoint kept at once.
    let e = vpm::run::memory::estimate(&case, &plan).unwrap();
    let kept = case.checkpoint.keep as u64 + 1;
    let checkpoints = e
        .disk
        .iter()
        .find(|(what, _)| what.starts_with("checkpoints"))
        .expect("a checkpoint row");
    assert!(
        checkpoints.1 >= kept * sampled as u64 * 14 * 8,
        "{checkpoints:?}"
    );
    // The model takes the sampled set; there is nothing left to take.
    assert_eq!(
        plan.take_initial_particles().map(|p| p.len()),
        Some(sampled)
    );
    assert!(plan.take_initial_particles().is_none());
}

#[test]
fn check_and_the_manifest_name_the_same_evaluator() {
    let dir = tempfile::tempdir().unwrap();
    let case = dir.path().join("ring.toml");
    let (mut ring, _) = resolve_case("ring").unwrap();
    ring.time.t_end = 0.05; // two steps
    std::fs::write(&case, ring.to_toml_string()).unwrap();
    let check = common::run(&["check", common::s(&case)]);
    common::assert_ok(&check, "vpm check");
    let stdout = common::stdout(&check);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("# Particle evaluator"))
        .unwrap_or_else(|| panic!("no evaluator line in\n{stdout}"));
    let described = line.split_once("): ").expect("a description").1;
    let out = dir.path().join("run");
    let run = common::run(&[
        "run",
        "-q",
        "--threads",
        "1",
        "--out",
        common::s(&out),
        common::s(&case),
    ]);
    common::assert_ok(&run, "vpm run");
    let manifest = common::manifest(&out);
    let recorded = manifest["evaluators"]["vortex"].as_str().unwrap();
    assert!(
        recorded.starts_with(described),
        "vpm check: {described}\nmanifest: {recorded}"
    );
}
