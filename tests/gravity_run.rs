//! Gravity runs end to end through the `vpm` binary: the diagnostics rows, the manifest's energy
//! summary and method, snapshots and pictures, the energy bound, kill-and-resume to the same
//! bytes, and bad body files named with file and line.

mod common;

use common::*;
use std::fs;
use std::path::Path;

/// A Plummer sphere of 256 bodies with all pairs on the CPU: short and fully deterministic.
fn plummer_case(dir: &Path, extra: &str) -> String {
    let case = dir.join("cluster.toml");
    fs::write(
        &case,
        format!(
            "# A small Plummer sphere.\n\
             [initial]\nkind = \"plummer\"\nn = 256\nseed = 3\n\
             [time]\nt_end = 0.5\ndt = 0.01\n\
             [output]\nevery_steps = 5\n[checkpoint]\nevery_steps = 20\n\
             [gravity]\nsoftening = 0.05\nevaluator = \"direct\"\nsnapshot_every_time = 0.25\n\
             snapshot_formats = [\"npz\", \"vtp\", \"tipsy\", \"table\"]\n{extra}"
        ),
    )
    .unwrap();
    case.to_str().unwrap().to_string()
}

#[test]
fn a_plummer_run_writes_its_diagnostics_snapshots_and_pictures_and_resumes_to_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let case = plummer_case(dir.path(), "");
    let a = dir.path().join("a");
    assert_ok(
        &run(&["run", &case, "--out", s(&a), "--threads", "2"]),
        "run",
    );
    let (header, rows) = read_csv(&a.join("gravity/energy.csv"));
    assert_eq!(rows.len(), 11, "an output every 5 of 50 steps and at t = 0");
    let err = col(&header, "energy_error");
    assert_eq!(rows[0][err], 0.0);
    let worst = rows.iter().map(|r| r[err].abs()).fold(0.0, f64::max);
    assert!(worst > 0.0 && worst < 1e-3, "energy error {worst:e}");
    // All pairs conserve linear momentum to round-off.
    for r in &rows {
        let p = [col(&header, "px"), col(&header, "py"), col(&header, "pz")].map(|c| r[c]);
        assert!(p.iter().all(|x| x.abs() < 1e-12), "momentum {p:?}");
    }
    let m = manifest(&a);
    assert_eq!(m["status"], "finished");
    let e = &m["energy_conservation"];
    assert!((e["max_abs_energy_error"].as_f64().unwrap() - worst).abs() <= 1e-15 * (1.0 + worst));
    assert!(m["evaluators"]["gravity"]
        .as_str()
        .unwrap()
        .contains("leapfrog"));
    assert!(m["devices"]["gravity"].as_str().is_some());
    for step in [0, 25, 50] {
        for ext in ["npz", "vtp", "tipsy", "txt"] {
            let f = a.join(format!("snapshots/bodies-{step:08}.{ext}"));
            assert!(f.is_file(), "{} missing", f.display());
        }
    }
    assert!(a.join("gravity/units.json").is_file());
    for p in [
        "energy-error.png",
        "lagrangian-radii.png",
        "gravity/animation.png",
    ] {
        assert!(a.join(p).is_file(), "{p} missing");
    }
    // Killed after step 27 (checkpoint at 20), resumed: the same bytes.
    let b = dir.path().join("b");
    run_aborted(&case, &b, "27");
    assert_ok(&run(&["resume", s(&b), "--threads", "1"]), "resume");
    // The energy summary carries over the checkpoint: the same as the uninterrupted run's.
    assert_eq!(
        manifest(&a)["energy_conservation"],
        manifest(&b)["energy_conservation"]
    );
    for f in [
        "gravity/energy.csv",
        "gravity/components.csv",
        "snapshots/bodies-00000050.npz",
        "snapshots/bodies-00000050.tipsy",
        "snapshots/bodies.pvd",
    ] {
        assert!(
            fs::read(a.join(f)).unwrap() == fs::read(b.join(f)).unwrap(),
            "{f} differs after a kill and resume"
        );
    }
}

#[test]
fn the_energy_bound_stops_the_run_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    // A huge step: the energy error passes 1e-6 at the first output.
    let case = plummer_case(dir.path(), "energy_error_limit = 1e-6\n");
    let a = dir.path().join("a");
    let o = run(&["run", &case, "--out", s(&a), "--threads", "2"]);
    assert_failed(&o, "run past the energy bound");
    let err = stderr(&o);
    assert!(err.contains("gravity.energy_error_limit"), "{err}");
    assert_no_panic(&err);
    assert!(manifest(&a)["status"]
        .as_str()
        .unwrap()
        .starts_with("failed"));
}

#[test]
fn bodies_from_a_table_and_a_bad_table_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("pair.txt");
    fs::write(
        &table,
        "# m x y z vx vy vz\n0.5 1 0 0 0 0.5 0\n0.5 -1 0 0 0 -0.5 0\n",
    )
    .unwrap();
    let case = dir.path().join("pair.toml");
    fs::write(
        &case,
        "[initial]\nkind = \"bodies\"\nfile = \"pair.txt\"\n[time]\nt_end = 1.0\ndt = 0.01\n\
         [gravity]\nsoftening = 0.0\n",
    )
    .unwrap();
    let a = dir.path().join("a");
    assert_ok(
        &run(&["run", s(&case), "--out", s(&a), "--threads", "1"]),
        "run from a table",
    );
    fs::write(&table, "0.5 1 0 0 0 0.5 0\n0.5 -1 0 zero 0 -0.5 0\n").unwrap();
    let o = run(&["run", s(&case), "--out", s(&dir.path().join("b"))]);
    assert_failed(&o, "a malformed table");
    let err = stderr(&o);
    assert!(err.contains("pair.txt:2"), "{err}");
    assert_no_panic(&err);
    // Two bodies at one place without softening: named with the file and both lines.
    fs::write(
        &table,
        "0.5 1 0 0 0 0.5 0\n# a comment\n0.5 1 0 0 0 -0.5 0\n",
    )
    .unwrap();
    let o = run(&["run", s(&case), "--out", s(&dir.path().join("c"))]);
    assert_failed(&o, "coincident bodies at softening 0");
    let err = stderr(&o);
    assert!(
        err.contains("pair.txt:3") && err.contains("line 1"),
        "{err}"
    );
    assert_no_panic(&err);
}
