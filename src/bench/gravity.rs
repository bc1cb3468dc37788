//! `vpm bench gravity`: the two force methods of gravitational N-body runs on one device (the
//! CPU in f64 with rayon, or one GPU), per body count N:
//!
//! - all pairs: the median time of one evaluation of φ and a at the N bodies (CPU: wall clock,
//!   [`DirectGravity`]; GPU: CUDA events around the f32 tile kernels, [`CudaDirectGravity`]),
//!   interactions per second N²/t and GFLOP/s at 20 flops an interaction (GPU Gems 3's
//!   convention), and on a GPU the f32 sum's error against the f64 one;
//! - the FMM at `--accuracy`: the median wall time of one evaluation (CPU: [`FmmGravity`]; GPU:
//!   the device form [`CudaFmmGravity::evaluate_resident`] on bodies uploaded once, the GPU waited
//!   for), its parameters, and its force error against the f64 all-pairs sum on a random sample
//!   of bodies (relative L2 of the accelerations, and of the potentials);
//! - the leapfrog step with each method (the GPU-resident [`crate::gravity::resident`] stepper on
//!   a GPU, the host one on the CPU; [`crate::gravity::planner::stepper`] builds it): the median
//!   wall time of one step of Δt = 1/128, after one untimed step.
//!
//! Then the crossover N where the FMM becomes faster than all pairs ([`crossover`]: interpolated
//! in log–log between the sizes that bracket it, or extrapolated past the largest size), for one
//! evaluation and for one step, and the constants of [`crate::gravity::planner`] these rows give
//! ([`planner_constants`]). Bodies: [`bench_bodies`], a seed per size.

use super::direct::GRAVITY_FLOPS_PER_INTERACTION;
use super::{cpu_banner, finish_report, fmt_error, median, median_seconds, print_header};
use crate::device::Device;
use crate::gravity::bodies::BodySet;
use crate::gravity::initial::plummer;
use crate::gravity::{planner, GravityError};
use crate::summation::direct::{CudaDirectGravity, DirectGravity};
use crate::summation::fmm::check::check_gravity_sample;
use crate::summation::fmm::{CudaFmmGravity, Fmm, FmmGravity};
use crate::summation::interaction::{Bodies, GravityEvaluation, GravitySummation, PlummerGravity};
use crate::summation::planner::EvaluatorOptions;
use crate::summation::EvaluatorKind;
use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// The leapfrog step the step times are measured with (Hénon units: a Plummer sphere's crossing
/// time is 2√2).
pub const STEP: f64 = 1.0 / 128.0;

/// What `vpm bench gravity` runs besides the sizes and the device.
#[derive(Debug, Clone)]
pub struct NBodyBenchOptions {
    /// The force methods: `Direct` (all pairs) and/or `Fmm`, in the order given.
    pub methods: Vec<EvaluatorKind>,
    /// The FMM's requested relative accuracy.
    pub accuracy: f64,
    /// The Plummer softening ε.
    pub softening: f64,
    /// Timed repetitions per evaluation (the median reported).
    pub repeats: usize,
    /// Bodies checked against the f64 all-pairs sum per size (0: no error columns).
    pub sample: usize,
    /// Timed leapfrog steps per method and size (0: no step times).
    pub steps: usize,
}

/// One row of `vpm bench gravity` (a body count); a method not run leaves its fields null.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NBodyBenchRow {
    pub n: usize,
    /// Median seconds of one all-pairs evaluation of φ and a at the n bodies.
    pub all_pairs_seconds: Option<f64>,
    /// N² / all_pairs_seconds (the self pairs count, as in GPU Gems 3).
    pub interactions_per_second: Option<f64>,
    /// At 20 flops an interaction.
    pub gflops: Option<f64>,
    /// GPU: the f32 accelerations against the f64 sum on the sample (relative L2).
    pub all_pairs_rel_l2_acceleration: Option<f64>,
    /// Median seconds of one FMM evaluation of φ and a at the n bodies.
    pub fmm_seconds: Option<f64>,
    /// The FMM's accelerations against the f64 all-pairs sum on the sample (relative L2).
    pub fmm_rel_l2_acceleration: Option<f64>,
    /// The largest difference of an acceleration component over the rms acceleration.
    pub fmm_max_rel_acceleration: Option<f64>,
    /// The FMM's potentials against the f64 all-pairs sum on the sample (relative L2).
    pub fmm_rel_l2_potential: Option<f64>,
    /// The FMM's parameters (order, θ, leaf size, …).
    pub fmm_parameters: Option<String>,
    /// Bodies in the accuracy sample (0: not checked).
    pub accuracy_sample: usize,
    /// Median seconds of one leapfrog step with all-pairs forces.
    pub step_seconds_all_pairs: Option<f64>,
    /// Median seconds of one leapfrog step with FMM forces.
    pub step_seconds_fmm: Option<f64>,
}

/// Where the FMM becomes faster than all pairs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Crossover {
    /// The body count (an estimate; see `how`).
    pub n: f64,
    /// "interpolated" (log–log, between the two sizes that bracket it), "extrapolated" (past
    /// the largest size, all pairs ∝ N² and the FMM ∝ N) or "at most" (the FMM is faster at
    /// every size; n is the smallest).
    pub how: &'static str,
}

/// What [`bench_gravity`] measured: the rows, the crossovers and the planner's constants.
#[derive(Debug, Clone, Serialize)]
pub struct NBodyBenchReport {
    pub rows: Vec<NBodyBenchRow>,
    /// From the evaluation times (both methods run).
    pub crossover_evaluation: Option<Crossover>,
    /// From the leapfrog step times (both methods run, steps > 0).
    pub crossover_step: Option<Crossover>,
    /// The constants of src/gravity/planner.rs these rows give (name → value).
    pub planner: BTreeMap<&'static str, f64>,
}

/// `method` for `vpm bench gravity --method`: `all-pairs` (or `direct`) and `fmm`.
pub fn parse_method(s: &str) -> Result<EvaluatorKind, String> {
    match s.trim() {
        "all-pairs" | "direct" => Ok(EvaluatorKind::Direct),
        "fmm" => Ok(EvaluatorKind::Fmm),
        other => Err(format!(
            "`{other}`: not a gravity force method; expected `all-pairs` or `fmm`"
        )),
    }
}

/// The bodies of size `n`: a Plummer sphere in Hénon units ([`plummer`], seeded; n ≥ 2).
pub fn bench_bodies(n: usize, seed: u64) -> Result<BodySet, GravityError> {
    plummer(n, seed)
}

/// Runs `vpm bench gravity` on `device` for the body counts `sizes` (module docs), prints the
/// table, the crossovers and the planner constants, and writes the JSON report to `json`.
pub fn bench_gravity(
    device: &Device,
    sizes: &[usize],
    o: &NBodyBenchOptions,
    json: Option<&Path>,
) -> Result<NBodyBenchReport> {
    let gravity = PlummerGravity::new(o.softening)?;
    let has = |m| o.methods.contains(&m);
    let (all_pairs, fmm) = (has(EvaluatorKind::Direct), has(EvaluatorKind::Fmm));
    anyhow::ensure!(
        all_pairs || fmm,
        "vpm bench gravity: no method to time (--method all-pairs,fmm)"
    );
    let title = format!(
        "vpm bench gravity (softening {}, FMM accuracy {:e}, leapfrog Δt = 1/128, {} steps)",
        o.softening, o.accuracy, o.steps
    );
    match device.gpu() {
        None => cpu_banner(&format!("{title}, CPU f64"), o.repeats),
        Some(gpu) => crate::out!(
            "{title}: {}; all pairs f32 (CUDA events), FMM f64 expansions + f32 near field \
             (wall clock, device form), median of {} after warm-up; errors against the CPU f64 \
             all-pairs sum on {} bodies ({} CPU threads)",
            gpu.info(),
            o.repeats,
            o.sample,
            rayon::current_num_threads()
        ),
    }
    print_header(
        "N|all pairs s|interactions/s|GFLOP/s|relL2 a|FMM s|FMM relL2 a|FMM relL2 φ|step AP s|step FMM s",
        &[9, 11, 15, 9, 9, 10, 12, 12, 10, 10],
    );
    let mut rows = Vec::new();
    for &n in sizes {
        let row = bench_one(device, gravity, n, o, (all_pairs, fmm))?;
        let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
        let sci = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3e}"));
        crate::out!(
            "{:>9} {:>11} {:>15} {:>9} {:>9} {:>10} {:>12} {:>12} {:>10} {:>10}",
            n,
            sci(row.all_pairs_seconds),
            sci(row.interactions_per_second),
            opt(row.gflops, 1),
            fmt_error(row.all_pairs_rel_l2_acceleration),
            sci(row.fmm_seconds),
            fmt_error(row.fmm_rel_l2_acceleration),
            fmt_error(row.fmm_rel_l2_potential),
            sci(row.step_seconds_all_pairs),
            sci(row.step_seconds_fmm)
        );
        rows.push(row);
    }
    let times = |ap: fn(&NBodyBenchRow) -> Option<f64>, f: fn(&NBodyBenchRow) -> Option<f64>| {
        let points: Vec<(usize, f64, f64)> = rows
            .iter()
            .filter_map(|r| Some((r.n, ap(r)?, f(r)?)))
            .collect();
        crossover(&points)
    };
    let crossover_evaluation = times(|r| r.all_pairs_seconds, |r| r.fmm_seconds);
    let crossover_step = times(|r| r.step_seconds_all_pairs, |r| r.step_seconds_fmm);
    for (what, c) in [
        ("one evaluation", crossover_evaluation),
        ("one leapfrog step", crossover_step),
    ] {
        if let Some(c) = c {
            crate::out!(
                "crossover ({what}): the FMM is faster from N ≈ {:.3e} ({})",
                c.n,
                c.how
            );
        }
    }
    let threads = rayon::current_num_threads();
    let planner = planner_constants(&rows, device.is_cuda(), threads);
    if !planner.is_empty() {
        let text: Vec<String> = planner
            .iter()
            .map(|(k, v)| format!("{k} = {v:.3e}"))
            .collect();
        crate::out!(
            "src/gravity/planner.rs from these rows: {}",
            text.join(", ")
        );
    }
    let mut header = serde_json::json!({
        "benchmark": "gravity",
        "device": device.label(),
        "softening": o.softening,
        "accuracy": o.accuracy,
        "repeats": o.repeats,
        "steps": o.steps,
        "step": STEP,
        "bodies": "Plummer sphere in Henon units (gravity::initial::plummer), a seed per N",
        "timing": match device {
            Device::Cpu => "wall clock, median after one warm-up",
            Device::Cuda(_) | Device::Group(_) => "all pairs: CUDA events around the tile kernels; FMM: wall \
                                clock of the device form, GPU waited for; steps: wall clock \
                                (each step ends with its finite-flag read); medians after one \
                                warm-up",
        },
        "flops_per_interaction": GRAVITY_FLOPS_PER_INTERACTION,
        "crossover_evaluation": crossover_evaluation,
        "crossover_step": crossover_step,
        "planner": planner,
    });
    if let Device::Cuda(gpu) = device {
        header["gpu"] = serde_json::json!(gpu.info());
    }
    let rows = finish_report(json, header, rows)?;
    Ok(NBodyBenchReport {
        rows,
        crossover_evaluation,
        crossover_step,
        planner,
    })
}

/// One size: each method's evaluation time and error, and its leapfrog step time.
fn bench_one(
    device: &Device,
    gravity: PlummerGravity,
    n: usize,
    o: &NBodyBenchOptions,
    (all_pairs, fmm): (bool, bool),
) -> Result<NBodyBenchRow> {
    let seed = 0x6e62 ^ n as u64;
    let set = bench_bodies(n, seed)?;
    let bodies = Bodies {
        x: &set.x,
        mass: &set.mass,
    };
    let sample = o.sample.min(n);
    // [acceleration L2, acceleration max, potential L2, potential max] on the sample.
    let check = |out: &GravityEvaluation| -> Result<Option<[f64; 4]>> {
        if sample == 0 {
            return Ok(None);
        }
        let reference = &mut DirectGravity::new(gravity);
        let e = check_gravity_sample(reference, &bodies, None, out, sample, seed ^ 0x5a3b)?;
        Ok(Some(e))
    };
    let mut row = NBodyBenchRow {
        n,
        accuracy_sample: sample,
        ..Default::default()
    };
    let mut out = GravityEvaluation::default();
    if all_pairs {
        let seconds = match device.gpu() {
            None => {
                let mut e = DirectGravity::new(gravity);
                median_seconds(o.repeats, || e.evaluate_gravity(&bodies, None, &mut out))?
            }
            Some(gpu) => {
                let mut e = CudaDirectGravity::new(gpu.clone(), gravity)?;
                e.upload(&bodies, None)?;
                let ms = median(e.time_launches(o.repeats)?);
                e.output(&mut out);
                row.all_pairs_rel_l2_acceleration = check(&out)?.map(|e| e[0]);
                ms * 1e-3
            }
        };
        let per_s = (n as f64) * (n as f64) / seconds;
        row.all_pairs_seconds = Some(seconds);
        row.interactions_per_second = Some(per_s);
        row.gflops = Some(per_s * GRAVITY_FLOPS_PER_INTERACTION / 1e9);
    }
    if fmm {
        let (seconds, params) = match device.gpu() {
            None => {
                let mut e = FmmGravity::new(gravity, o.accuracy, 0)?;
                e.disable_checks();
                let t = median_seconds(o.repeats, || e.evaluate_gravity(&bodies, None, &mut out))?;
                (t, *e.params())
            }
            Some(gpu) => {
                let mut e = CudaFmmGravity::new(gpu.clone(), gravity, o.accuracy, 0)?;
                e.disable_checks();
                e.evaluate_gravity(&bodies, None, &mut out)?;
                let t = super::fmm::time_resident_gravity(&mut e, (&bodies, o.repeats))?;
                (t.map_or(f64::NAN, |t| t.0), *e.params())
            }
        };
        let e = check(&out)?;
        row.fmm_seconds = Some(seconds);
        row.fmm_parameters = Some(params.to_string());
        row.fmm_rel_l2_acceleration = e.map(|e| e[0]);
        row.fmm_max_rel_acceleration = e.map(|e| e[1]);
        row.fmm_rel_l2_potential = e.map(|e| e[2]);
    }
    if o.steps > 0 {
        let options = EvaluatorOptions {
            accuracy: o.accuracy,
            check_every: 0,
        };
        let step_time = |method| -> Result<f64> {
            let mut s = planner::stepper(set.clone(), device, method, gravity, &options)?;
            s.step(STEP)?;
            let mut t = Vec::with_capacity(o.steps);
            for _ in 0..o.steps {
                let start = Instant::now();
                s.step(STEP)?;
                t.push(start.elapsed().as_secs_f64());
            }
            Ok(median(t))
        };
        if all_pairs {
            row.step_seconds_all_pairs = Some(step_time(EvaluatorKind::Direct)?);
        }
        if fmm {
            row.step_seconds_fmm = Some(step_time(EvaluatorKind::Fmm)?);
        }
    }
    Ok(row)
}

/// The crossover of `points` = (N, all-pairs seconds, FMM seconds), in increasing N: the
/// smallest N from which the FMM stays faster, interpolated where log(t_FMM / t_all pairs) changes
/// sign (linear in log N between the two sizes); when the FMM is slower at the largest size,
/// extrapolated from it with all pairs ∝ N² and the FMM ∝ N (N · t_FMM/t_all pairs); when it is
/// faster at every size, the smallest ("at most"). `None` without points.
pub fn crossover(points: &[(usize, f64, f64)]) -> Option<Crossover> {
    let ratio = |p: &(usize, f64, f64)| (p.2 / p.1).ln();
    let log_n = |p: &(usize, f64, f64)| (p.0 as f64).ln();
    let last = points.last()?;
    if ratio(last) >= 0.0 {
        return Some(Crossover {
            n: last.0 as f64 * (last.2 / last.1),
            how: "extrapolated",
        });
    }
    // The first point of the run of FMM-faster points that reaches the end.
    let first = points
        .iter()
        .rposition(|p| ratio(p) >= 0.0)
        .map_or(0, |i| i + 1);
    if first == 0 {
        return Some(Crossover {
            n: points[0].0 as f64,
            how: "at most",
        });
    }
    let (a, b) = (&points[first - 1], &points[first]);
    let (ra, rb) = (ratio(a), ratio(b));
    let ln = log_n(a) + ra / (ra - rb) * (log_n(b) - log_n(a));
    Some(Crossover {
        n: ln.exp(),
        how: "interpolated",
    })
}

/// The constants of src/gravity/planner.rs from bench rows (names as there). On a GPU: seconds
/// per pair of all pairs at the largest size, and the FMM's seconds per body and fixed seconds
/// by a least-squares line t = a + b N over the sizes (a ≥ 0; with one size, a = 0). On the CPU
/// (`threads` worker threads): one core's seconds per pair and per body, threads × t / N² and
/// threads × t / N at the largest size.
pub fn planner_constants(
    rows: &[NBodyBenchRow],
    gpu: bool,
    threads: usize,
) -> BTreeMap<&'static str, f64> {
    let mut c = BTreeMap::new();
    let largest = |t: fn(&NBodyBenchRow) -> Option<f64>| {
        rows.iter()
            .filter_map(|r| Some((r.n as f64, t(r)?)))
            .filter(|p| p.1.is_finite())
            .max_by(|a, b| a.0.total_cmp(&b.0))
    };
    let threads = threads.max(1) as f64;
    if let Some((n, t)) = largest(|r| r.all_pairs_seconds) {
        match gpu {
            true => c.insert("GPU_DIRECT_SECONDS_PER_PAIR", t / (n * n)),
            false => c.insert("CPU_DIRECT_SECONDS_PER_PAIR", threads * t / (n * n)),
        };
    }
    if !gpu {
        if let Some((n, t)) = largest(|r| r.fmm_seconds) {
            c.insert("CPU_FMM_SECONDS_PER_BODY", threads * t / n);
        }
        return c;
    }
    let points: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| Some((r.n as f64, r.fmm_seconds?)))
        .filter(|p| p.1.is_finite())
        .collect();
    if let Some((fixed, per_body)) = fit_line(&points) {
        c.insert("GPU_FMM_SECONDS_FIXED", fixed);
        c.insert("GPU_FMM_SECONDS_PER_BODY", per_body);
    }
    c
}

/// The least-squares line t = a + b N through `points` = (N, t) with a ≥ 0 (refitted through the
/// origin when the free fit gives a < 0); one point: a = 0. `None` without points.
fn fit_line(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let k = points.len() as f64;
    let through_origin = || {
        let sxx: f64 = points.iter().map(|p| p.0 * p.0).sum();
        let sxy: f64 = points.iter().map(|p| p.0 * p.1).sum();
        (0.0, sxy / sxx)
    };
    match points.len() {
        0 => None,
        1 => Some(through_origin()),
        _ => {
            let mx = points.iter().map(|p| p.0).sum::<f64>() / k;
            let my = points.iter().map(|p| p.1).sum::<f64>() / k;
            let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
            let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
            if sxx == 0.0 {
                return Some(through_origin());
            }
            let b = sxy / sxx;
            let a = my - b * mx;
            Some(if a >= 0.0 { (a, b) } else { through_origin() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossover_is_interpolated_in_log_log_or_extrapolated() {
        // FMM/all-pairs ratio 4, 1/4 at N = 1e3, 1e5: equal at 1e4 (log–log midpoint).
        let c = crossover(&[(1000, 1.0, 4.0), (100_000, 4.0, 1.0)]).unwrap();
        assert_eq!(c.how, "interpolated");
        assert!((c.n / 1e4 - 1.0).abs() < 1e-12, "{c:?}");
        // Noise below the crossover does not count: the last sign change does.
        let c = crossover(&[
            (100, 1.0, 0.5),
            (1000, 1.0, 4.0),
            (100_000, 4.0, 1.0),
            (1_000_000, 40.0, 1.0),
        ])
        .unwrap();
        assert!((c.n / 1e4 - 1.0).abs() < 1e-12, "{c:?}");
        // Slower everywhere: past the largest size, N · ratio.
        let c = crossover(&[(1000, 1.0, 8.0), (4000, 1.0, 3.0)]).unwrap();
        assert_eq!((c.n, c.how), (12000.0, "extrapolated"));
        // Faster everywhere: at most the smallest.
        let c = crossover(&[(1000, 2.0, 1.0), (4000, 8.0, 1.0)]).unwrap();
        assert_eq!((c.n, c.how), (1000.0, "at most"));
        assert_eq!(crossover(&[]), None);
    }

    #[test]
    fn planner_constants_from_rows() {
        let row = |n: usize, ap: f64, fmm: f64| NBodyBenchRow {
            n,
            all_pairs_seconds: Some(ap),
            fmm_seconds: Some(fmm),
            ..Default::default()
        };
        // FMM: t = 2e-3 + 4e-8 N exactly; all pairs 2e-11 per pair at the largest N.
        let rows = [row(1000, 1.0, 2e-3 + 4e-5), row(100_000, 0.2, 2e-3 + 4e-3)];
        let c = planner_constants(&rows, true, 2);
        assert!((c["GPU_DIRECT_SECONDS_PER_PAIR"] / 2e-11 - 1.0).abs() < 1e-12);
        assert!((c["GPU_FMM_SECONDS_FIXED"] / 2e-3 - 1.0).abs() < 1e-9);
        assert!((c["GPU_FMM_SECONDS_PER_BODY"] / 4e-8 - 1.0).abs() < 1e-9);
        // The CPU: one core's share, at the largest size.
        let c = planner_constants(&rows, false, 2);
        assert!((c["CPU_DIRECT_SECONDS_PER_PAIR"] / 4e-11 - 1.0).abs() < 1e-12);
        assert!((c["CPU_FMM_SECONDS_PER_BODY"] / (2.0 * 6e-3 / 1e5) - 1.0).abs() < 1e-12);
        // A fit with a negative intercept goes through the origin.
        let (a, b) = fit_line(&[(1.0, 1.0), (2.0, 3.0)]).unwrap();
        assert_eq!(a, 0.0);
        assert!((b - 7.0 / 5.0).abs() < 1e-15);
        assert!(planner_constants(&[], true, 1).is_empty());
    }

    #[test]
    fn methods_parse_by_name() {
        assert_eq!(parse_method("all-pairs"), Ok(EvaluatorKind::Direct));
        assert_eq!(parse_method("direct"), Ok(EvaluatorKind::Direct));
        assert_eq!(parse_method(" fmm"), Ok(EvaluatorKind::Fmm));
        let e = parse_method("ewald").unwrap_err();
        assert!(e.contains("`all-pairs` or `fmm`"), "{e}");
    }

    /// The CPU rows: every column of both methods measured, the FMM within its accuracy.
    #[test]
    fn cpu_bench_measures_both_methods() {
        let o = NBodyBenchOptions {
            methods: vec![EvaluatorKind::Direct, EvaluatorKind::Fmm],
            accuracy: 1e-4,
            softening: 0.01,
            repeats: 1,
            sample: 50,
            steps: 1,
        };
        let r = bench_gravity(&Device::Cpu, &[400, 1200], &o, None).unwrap();
        assert_eq!(r.rows.len(), 2);
        for row in &r.rows {
            assert!(row.all_pairs_seconds.unwrap() > 0.0);
            assert!(row.interactions_per_second.unwrap() > 0.0);
            assert!(row.fmm_seconds.unwrap() > 0.0);
            let e = row.fmm_rel_l2_acceleration.unwrap();
            assert!(e < 3.0 * o.accuracy, "{e}");
            assert!(row.step_seconds_all_pairs.unwrap() > 0.0);
            assert!(row.step_seconds_fmm.unwrap() > 0.0);
            assert_eq!(row.all_pairs_rel_l2_acceleration, None);
        }
        assert!(r.crossover_evaluation.is_some() && r.crossover_step.is_some());
        assert!(r.planner.contains_key("CPU_DIRECT_SECONDS_PER_PAIR"));
        assert!(r.planner.contains_key("CPU_FMM_SECONDS_PER_BODY"));
    }
}
