//! The FMM in whole runs, against the direct sum (docs/physics.md §8):
//!
//! * the named `ring` case (Γ = R = 1, σ/R = 0.1, 7 176 particles, free space) run to t = 0.5
//!   with `evaluator = "fmm"` at accuracy 1e-6 and with `"direct"`, both on the CPU in f64: the
//!   ring's speed, position and radius in `vortex/ring.csv` agree to 1e-5 relative at every
//!   output (the position relative to the distance travelled; measured: ≤ 1e-9, and ≤ 1e-11 at
//!   accuracy 1e-8, which costs more);
//! * the tiny two-ring case of `coaxial-rings` with the FMM: `vortex/rings.csv` agrees with the
//!   direct run the same way, ring by ring.
//!
//! Both go through the same driver as `vpm run` (outputs, checkpoints, plots).

mod common;
use common::{col, quiet_run_options, read_csv};
use postprocess::layout::{RINGS_CSV, RING_CSV};
use std::path::Path;
use std::time::Instant;
use vpm::config::{resolve_case, Cadence, Case, DeviceRequest, EvaluatorKind};
use vpm::run::RunEnd;

/// The FMM's requested accuracy in these runs.
const FMM_ACCURACY: f64 = 1e-6;
/// Largest relative difference allowed between the FMM and the direct run.
const AGREEMENT: f64 = 1e-5;

/// `case` on the CPU with `evaluator` (the FMM at [`FMM_ACCURACY`], checked against the direct
/// sum at its first evaluation only), to `t_end` with outputs every 0.1; returns the wall time.
fn run_with(mut case: Case, evaluator: EvaluatorKind, t_end: f64, dir: &Path) -> f64 {
    case.device = DeviceRequest::Cpu;
    case.time.t_end = t_end;
    case.output.cadence = Cadence::Time(0.1);
    case.checkpoint.cadence = Cadence::Time(t_end);
    let vortex = case.vortex.as_mut().expect("[vortex]");
    vortex.device = None;
    vortex.evaluator = evaluator;
    if evaluator == EvaluatorKind::Fmm {
        vortex.accuracy = FMM_ACCURACY;
        vortex.accuracy_check_every = Some(0);
    }
    std::fs::create_dir_all(dir).unwrap();
    let start = Instant::now();
    let mut run = vpm::run::start(case, dir, quiet_run_options(), None).expect("start");
    assert_eq!(run.run_to_end().expect("run"), RunEnd::Finished);
    start.elapsed().as_secs_f64()
}

/// Relative difference of `b` from `a`, in units of `scale`.
fn rel(a: f64, b: f64, scale: f64) -> f64 {
    (b - a).abs() / scale.abs()
}

/// The `ring` case to t = 0.5 (20 steps of 0.025, 6 outputs): FMM and direct agree on the ring
/// speed, the impulse radius and the position (relative to the distance travelled, ≈ 0.14) to
/// 1e-5.
#[test]
fn ring_with_the_fmm_moves_as_with_the_direct_sum() {
    let (case, _) = resolve_case("ring").expect("named case");
    let tmp = tempfile::tempdir().unwrap();
    let (direct, fmm) = (tmp.path().join("direct"), tmp.path().join("fmm"));
    let t_direct = run_with(case.clone(), EvaluatorKind::Direct, 0.5, &direct);
    let t_fmm = run_with(case, EvaluatorKind::Fmm, 0.5, &fmm);
    eprintln!("ring to t = 0.5: direct {t_direct:.1} s, fmm {t_fmm:.1} s");
    let (h, rows_d) = read_csv(&direct.join(RING_CSV));
    let (h_f, rows_f) = read_csv(&fmm.join(RING_CSV));
    assert_eq!(h, h_f);
    assert_eq!(rows_d.len(), 6, "outputs at t = 0, 0.1, …, 0.5");
    assert_eq!(rows_f.len(), rows_d.len());
    let (t, z, u, r) = (
        col(&h, "t"),
        col(&h, "z"),
        col(&h, "speed"),
        col(&h, "radius"),
    );
    let z0 = rows_d[0][z];
    let mut worst = [0.0f64; 3];
    for (d, f) in rows_d.iter().zip(&rows_f) {
        assert_eq!(d[t], f[t]);
        let errs = [
            rel(d[u], f[u], d[u]),
            rel(d[r], f[r], d[r]),
            // At t = 0 both runs have the same particles: the positions agree exactly.
            if d[t] == 0.0 {
                rel(d[z], f[z], 1.0)
            } else {
                rel(d[z], f[z], d[z] - z0)
            },
        ];
        for (w, e) in worst.iter_mut().zip(errs) {
            *w = w.max(e);
        }
        assert!(
            errs.iter().all(|&e| e <= AGREEMENT),
            "t = {}: speed {} vs {}, radius {} vs {}, z {} vs {} (relative {errs:?})",
            d[t],
            d[u],
            f[u],
            d[r],
            f[r],
            d[z],
            f[z]
        );
    }
    eprintln!(
        "largest relative differences: speed {:.2e}, radius {:.2e}, position {:.2e}",
        worst[0], worst[1], worst[2]
    );
}

/// Two coaxial rings (R = 1 at z = 0 and 1, core 0.3, n = 32: ~3 000 particles), 4 steps of
/// 0.05: each ring's speed, radius and position from the FMM agree with the direct run to 1e-5,
/// and so do the totals' impulse.
#[test]
fn coaxial_rings_with_the_fmm_agree_with_the_direct_sum() {
    let text = include_str!("data/two-rings.toml");
    let case = Case::from_toml_str(text, "<two rings>").expect("two-ring case");
    let tmp = tempfile::tempdir().unwrap();
    let (direct, fmm) = (tmp.path().join("direct"), tmp.path().join("fmm"));
    run_with(case.clone(), EvaluatorKind::Direct, 0.2, &direct);
    run_with(case, EvaluatorKind::Fmm, 0.2, &fmm);
    let (h, rows_d) = read_csv(&direct.join(RINGS_CSV));
    let (_, rows_f) = read_csv(&fmm.join(RINGS_CSV));
    assert_eq!(rows_d.len(), 2 * 3, "two rings at t = 0, 0.1, 0.2");
    assert_eq!(rows_f.len(), rows_d.len());
    let c = |name: &str| col(&h, name);
    for (i, (d, f)) in rows_d.iter().zip(&rows_f).enumerate() {
        assert_eq!(d[c("ring")], f[c("ring")]);
        assert_eq!(d[c("particles")], f[c("particles")]);
        let z0 = rows_d[i % 2][c("z")];
        let travelled = d[c("z")] - z0;
        let errs = [
            rel(d[c("speed")], f[c("speed")], d[c("speed")]),
            rel(d[c("radius")], f[c("radius")], d[c("radius")]),
            rel(d[c("impulse_z")], f[c("impulse_z")], d[c("impulse_z")]),
            if travelled == 0.0 {
                rel(d[c("z")], f[c("z")], 1.0)
            } else {
                rel(d[c("z")], f[c("z")], travelled)
            },
        ];
        assert!(
            errs.iter().all(|&e| e <= AGREEMENT),
            "row {i}: relative differences {errs:?}\n direct {d:?}\n fmm    {f:?}"
        );
    }
}
