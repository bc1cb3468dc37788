//! The vortex method where the flow outgrows its particles (docs/physics.md §3.5,
//! docs/validation.md "Under-resolved flows"): Taylor–Green at Re = 1600 and without viscosity,
//! 32³ particles beside a 32³ spectral grid, with the `[vortex]` defaults (overlap 0.75, the
//! spectral reinitialisation every 10 steps, the solenoidal projection: docs/physics.md §3.7).
//! The inviscid run bounds the energy the particles lose (the blobs' smoothing floor) and what
//! each reinitialisation changes; the viscous runs check that K never grows. Before the solenoidal projection the viscous run below grew K by 31 %
//! at t = 6 and stopped on NaN at t = 6.46; the strength-based CFL estimate made its step fall
//! from 0.05 to below 0.005.

mod common;
use common::*;
use std::fs;
use std::path::Path;

/// Taylor–Green at 32³ by both solvers; `step` is the `[time]` step line. The `[vortex]`
/// section gives only n: overlap, reinitialisation (spectral, every 10 steps) and its
/// conditioning, evaluator and accuracy are the defaults, so these tests guard them.
fn taylor_green_32(nu: f64, t_end: f64, step: &str) -> String {
    format!(
        r#"description = "Taylor–Green, 32³, both solvers"
[flow]
nu = {nu}
[initial]
kind = "taylor-green"
[time]
t_end = {t_end}
{step}
[output]
every_time = 0.1
spectra_times = [0.0]
[checkpoint]
every_time = {t_end}
[spectral]
n = 32
dealias = "2/3"
[vortex]
n = 32
"#
    )
}

/// (t, K) of the particle solver's energy.csv.
fn particle_energy(run: &Path) -> Vec<(f64, f64)> {
    let text = fs::read_to_string(run.join("vortex/energy.csv")).expect("vortex/energy.csv");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (t, k) = (col("t"), col("K"));
    lines
        .map(|l| {
            let v: Vec<f64> = l.split(',').map(|x| x.parse().expect("number")).collect();
            (v[t], v[k])
        })
        .collect()
}

/// Runs `case` into a fresh directory and returns it with the particle energy.
fn run_case(name: &str, case: &str) -> (tempfile::TempDir, Vec<(f64, f64)>) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{name}.toml"));
    fs::write(&file, case).unwrap();
    let out = dir.path().join("run");
    let o = run(&["run", s(&file), "--out", s(&out), "--threads", "2"]);
    assert_ok(&o, name);
    let energy = particle_energy(&out);
    (dir, energy)
}

/// The largest rise of K from one output to the next, relative.
fn largest_rise(energy: &[(f64, f64)]) -> (f64, f64) {
    energy
        .windows(2)
        .map(|w| ((w[1].1 - w[0].1) / w[0].1, w[1].0))
        .fold(
            (f64::NEG_INFINITY, 0.0),
            |a, b| if b.0 > a.0 { b } else { a },
        )
}

#[test]
fn taylor_green_re1600_at_32_cubed_decays_to_t10_under_cfl() {
    let (dir, energy) = run_case(
        "tgv-re1600-32",
        &taylor_green_32(1.0 / 1600.0, 10.0, "cfl = 0.5"),
    );
    // Every output, t = 0 to 10 by 0.1, finite (a NaN would have stopped the run).
    assert_eq!(energy.len(), 101, "{energy:?}");
    assert!((energy.last().unwrap().0 - 10.0).abs() < 1e-12);
    assert!(energy.iter().all(|(_, k)| k.is_finite() && *k > 0.0));
    let (rise, at) = largest_rise(&energy);
    assert!(
        rise <= 1e-6,
        "particle K rose by {rise:e} (relative) at t = {at}: {energy:?}"
    );
    // The unforced flow loses energy: at t = 10 the 32³ spectral reference keeps 0.76 K(0);
    // the particles, over-dissipative at this resolution, keep less, but not nothing.
    let kept = energy.last().unwrap().1 / energy[0].1;
    assert!(kept > 0.5 && kept < 0.8, "K(10)/K(0) = {kept}");
    // The adaptive step does not collapse.
    let m = manifest(&dir.path().join("run"));
    let first = m["cfl_steps"]["first"].as_f64().expect("cfl_steps.first");
    let smallest = m["cfl_steps"]["smallest"]
        .as_f64()
        .expect("cfl_steps.smallest");
    assert!(
        smallest >= 0.1 * first,
        "the CFL step fell from {first} to {smallest} at t = {}",
        m["cfl_steps"]["smallest_at"]
    );
}

#[test]
fn inviscid_taylor_green_at_32_cubed_does_not_gain_energy() {
    // Every reinitialisation measured (K just before and after).
    let case = taylor_green_32(0.0, 3.0, "dt = 0.01") + "dissipation_every = 1\n";
    let (dir, energy) = run_case("tgv-inviscid-32", &case);
    assert_eq!(energy.len(), 31);
    let (rise, at) = largest_rise(&energy);
    assert!(
        rise <= 1e-6,
        "inviscid particle K rose by {rise:e} (relative) at t = {at}: {energy:?}"
    );
    // What the blobs' smoothing costs at this resolution (docs/physics.md §3.7,
    // docs/validation.md "Energy lost at reinitialisation"): 3.31 % by t = 3 at overlap 0.75
    // whatever the reinitialisation interval and Δt, while the spectral solver conserves K to
    // round-off. The exact interpolating reinitialisation lost 3.42 %, and more at finer
    // particles where the smoothing is smaller: the bound fails if resampling loses energy again.
    let k0 = energy[0].1;
    let lost = (k0 - energy.last().unwrap().1) / k0;
    assert!(
        lost > 0.0 && lost < 0.0335,
        "inviscid K lost {lost} by t = 3"
    );
    // Each reinitialisation keeps K: the spectral solve changes it by −2.1e-6 on average here,
    // the exact interpolating one by −6.4e-5 (docs/validation.md).
    let m = manifest(&dir.path().join("run"));
    let d = &m["numerical_dissipation"];
    let per_reinit = d["mean_change_per_reinit"]
        .as_f64()
        .expect("mean_change_per_reinit");
    assert_eq!(d["reinitialisations"].as_u64(), Some(30), "{d}");
    assert_eq!(d["measured"].as_u64(), Some(30), "{d}");
    assert!(
        per_reinit.abs() < 1e-5,
        "a reinitialisation changed K by {per_reinit:e} on average"
    );
}

/// The `[vortex]` defaults at a fixed step (the issue's report: K rose by 1.2e-3 between two
/// outputs with the defaults of the time, Δt = 0.01, 32³, Re = 1600): an unforced viscous flow
/// never gains energy, whatever the step control. To t = 5 for CI time (the run to t = 10 was
/// checked by hand: K falls at every output, docs/validation.md).
#[test]
fn taylor_green_re1600_at_32_cubed_never_gains_energy_at_a_fixed_step() {
    let (_dir, energy) = run_case(
        "tgv-re1600-32-fixed",
        &taylor_green_32(1.0 / 1600.0, 5.0, "dt = 0.01"),
    );
    assert_eq!(energy.len(), 51, "{energy:?}");
    let (rise, at) = largest_rise(&energy);
    assert!(
        rise < 0.0,
        "particle K rose by {rise:e} (relative) at t = {at}: {energy:?}"
    );
}
