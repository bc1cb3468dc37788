//! `vpm bench gravity` end to end on the CPU (src/bench/gravity.rs): both methods timed on small
//! Plummer spheres, the table, the crossover and planner lines, the JSON report; bad arguments
//! refused by name. About a second on two cores.

mod common;
use common::*;

#[test]
fn bench_gravity_prints_and_writes_both_methods() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("gravity.json");
    let args = [
        "bench",
        "gravity",
        "--n",
        "300,900",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--sample",
        "30",
        "--threads",
        "2",
        "--json",
        s(&json),
    ];
    let o = run(&args);
    assert_ok(&o, "vpm bench gravity");
    let out = stdout(&o);
    for want in [
        "vpm bench gravity",
        "interactions/s",
        "FMM relL2 a",
        "crossover (one evaluation)",
        "CPU_DIRECT_SECONDS_PER_PAIR",
    ] {
        assert!(out.contains(want), "no `{want}` in:\n{out}");
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["benchmark"], "gravity");
    assert_eq!(report["threads"], 2);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (row, n) in rows.iter().zip([300, 900]) {
        assert_eq!(row["n"], n);
        for key in [
            "all_pairs_seconds",
            "interactions_per_second",
            "gflops",
            "fmm_seconds",
            "fmm_rel_l2_acceleration",
            "step_seconds_all_pairs",
            "step_seconds_fmm",
        ] {
            assert!(row[key].as_f64().unwrap() > 0.0, "{key}: {row}");
        }
    }
    assert!(report["crossover_evaluation"]["n"].as_f64().unwrap() > 0.0);
    assert!(
        report["planner"]["CPU_FMM_SECONDS_PER_BODY"]
            .as_f64()
            .unwrap()
            > 0.0
    );

    // One method: no crossover.
    let o = run(&[
        "bench", "gravity", "--n", "200", "--method", "fmm", "--steps", "0",
    ]);
    assert_ok(&o, "vpm bench gravity --method fmm");
    assert!(!stdout(&o).contains("crossover"), "{}", stdout(&o));
}

#[test]
fn bench_gravity_refuses_bad_arguments() {
    for (args, want) in [
        (vec!["--method", "ewald"], "`all-pairs` or `fmm`"),
        (vec!["--accuracy", "0"], "--accuracy 0: must be in (0, 1)"),
        (
            vec!["--softening=-1"],
            "--softening -1: must be finite and ≥ 0",
        ),
        (vec!["--n", "1"], "--n 1: body counts must be at least 2"),
    ] {
        let mut all = vec!["bench", "gravity"];
        all.extend(&args);
        let o = run(&all);
        assert_failed(&o, &all.join(" "));
        let err = stderr(&o);
        assert_no_panic(&err);
        assert!(err.contains(want), "{args:?}: no `{want}` in:\n{err}");
    }
}
