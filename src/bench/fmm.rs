//! `vpm bench fmm`: the fast multipole evaluator in free space on the device given (the CPU in
//! f64 with rayon, or one GPU), per particle count: the median wall time of one velocity +
//! classical-stretching evaluation (targets = sources, after a warm-up, built-in checks off),
//! its phases, the parameters planned for the accuracy, the tree and list sizes, the error
//! against the direct sum on a random sample of targets, the CPU all-pairs sum timed on that
//! sample and scaled to N² pairs, and the exponent of t ∝ N^k fitted over the sizes from 10^5 to
//! 1.67·10^7 particles. `--theta`, `--leaf-size`, `--order` and `--m2l` override the planned
//! parameters (tuning: [`FmmTuning`]).
//!
//! Particles: [`Particles::free_space`], uniform in [−π, π]³ with σ = 2π/N^{1/3} (about one
//! spacing) and strengths uniform in [−1, 1]³, a seed per size. The GPU evaluator synchronises
//! before it returns. On a GPU each size is timed twice: the host form (host arrays in and out,
//! the transfers included) and the device form on particles uploaded once (what the
//! GPU-resident stepper calls every step); the targets and the fitted exponent use the latter.
//!
//! `--interaction gravity` (either device): [`gravity_bodies`], N bodies of mass 1/N uniform in the unit
//! cube, softening ε a tenth of the mean spacing N^{−1/3}; one evaluation is φ and a at the
//! bodies, checked against [`DirectGravity`] (f64 all pairs) on the sample. The rows keep the
//! Biot–Savart field names: the velocity's fields hold the acceleration, the stretching's the
//! potential.

use super::{cpu_banner, finish_report, fmt_error, median, print_header, SampleCheck};
use crate::device::buffer::DeviceBuffer;
use crate::device::Device;
use crate::kernel::StretchingScheme;
use crate::summation::direct::{DirectFreeSpace, DirectGravity};
use crate::summation::ewald::EwaldPeriodic;
use crate::summation::fmm::check::check_gravity_sample;
use crate::summation::fmm::params::M2lPrecision;
use crate::summation::fmm::{
    params, plan_gravity_parameters, plan_parameters, CudaFmm, CudaFmmGravity, Fmm, FmmBackend,
    FmmFreeSpace, FmmGravity, FmmParams, FmmPeriodic, FmmStats,
};
use crate::summation::interaction::{
    Bodies, GravityEvaluation, GravitySummation, InteractionKind, PlummerGravity,
};
use crate::summation::verify::Particles;
use crate::summation::{
    DeviceEvaluation, DeviceExtra, DeviceSources, DeviceTargets, DeviceWork, Evaluation, Extra,
    Summation,
};
use anyhow::Result;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// Sizes the scaling exponent is fitted over: 10^5 to 1.67·10^7 particles (issue 25), with 5 %
/// slack at both ends.
pub const FIT_RANGE: (f64, f64) = (0.95e5, 1.05 * 16.7e6);

/// The sampled targets' direct sums are capped at about this many pairs (fewer targets at the
/// largest sizes), at least [`MIN_SAMPLE`] targets.
pub const SAMPLE_PAIR_BUDGET: f64 = 2e9;
/// The fewest targets an error is measured on.
pub const MIN_SAMPLE: usize = 16;

/// One target of the issue (issue 25) for the FMM at a requested 1e-4.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FmmTarget {
    pub interaction: InteractionKind,
    pub device: &'static str,
    pub n: f64,
    /// Wall seconds per evaluation (velocity + stretching, or φ + a).
    pub seconds: f64,
    pub what: &'static str,
}

/// The targets, printed and written with the results.
pub const TARGETS: &[FmmTarget] = &[
    FmmTarget {
        interaction: InteractionKind::BiotSavart,
        device: "cuda",
        n: 1e6,
        seconds: 0.060,
        what: "one GPU, 10^6 particles: ≤ 60 ms (aim 40)",
    },
    FmmTarget {
        interaction: InteractionKind::BiotSavart,
        device: "cuda",
        n: 16.7e6,
        seconds: 0.6,
        what: "one GPU, 16.7 M particles: ≤ 0.6 s (aim 0.3)",
    },
    FmmTarget {
        interaction: InteractionKind::BiotSavart,
        device: "cpu",
        n: 1e6,
        seconds: 99.0,
        what: "CPU, 2 threads, 10^6 particles: no slower than before (99 s)",
    },
    FmmTarget {
        interaction: InteractionKind::Gravity,
        device: "cuda",
        n: 1e6,
        seconds: 0.020,
        what: "one GPU, 10^6 bodies: ≤ 20 ms (aim 12)",
    },
    FmmTarget {
        interaction: InteractionKind::Gravity,
        device: "cuda",
        n: 16.7e6,
        seconds: 0.25,
        what: "one GPU, 16.7 M bodies: ≤ 0.25 s",
    },
];

/// The largest scaling exponent over [`FIT_RANGE`].
pub const TARGET_EXPONENT: f64 = 1.05;

/// Overrides of the planned parameters, for tuning (`--theta`, `--leaf-size`, `--order`,
/// `--m2l`): a changed θ re-plans the order from the error model unless `order` is given.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FmmTuning {
    pub theta: Option<f64>,
    pub leaf_size: Option<usize>,
    pub order: Option<usize>,
    /// The M2L's precision instead of the planned one (`--m2l`; the GPU's kernels).
    pub m2l: Option<M2lPrecision>,
}

impl FmmTuning {
    /// `planned` with the overrides; an error for a θ outside (0, 1), a leaf size of 0 or an
    /// order the error model cannot reach.
    pub fn apply(&self, planned: FmmParams) -> Result<FmmParams> {
        let mut p = planned;
        if let Some(theta) = self.theta {
            if !(theta > 0.0 && theta < 1.0) {
                anyhow::bail!("--theta {theta}: must be in (0, 1)");
            }
            p.theta = theta;
            p.order = params::plan_order(p.interaction, p.accuracy, theta, p.backend)
                .map_err(|e| anyhow::anyhow!("--theta {theta}: {e}"))?;
        }
        if let Some(leaf) = self.leaf_size {
            if leaf == 0 {
                anyhow::bail!("--leaf-size 0: must be at least 1");
            }
            p.leaf_size = leaf;
        }
        if let Some(order) = self.order {
            let max = match p.interaction {
                InteractionKind::BiotSavart => params::MAX_ORDER,
                InteractionKind::Gravity => params::cartesian_max_order(p.backend),
            };
            if !(1..=max).contains(&order) {
                anyhow::bail!("--order {order}: must be in 1..={max}");
            }
            p.order = order;
        }
        if let Some(m2l) = self.m2l {
            p.m2l = m2l;
        }
        Ok(p)
    }
}

/// What `vpm bench fmm` measures besides the sizes.
#[derive(Debug, Clone)]
pub struct FmmBenchOptions {
    /// Requested relative accuracy.
    pub accuracy: f64,
    /// Timed evaluations per size (the median is reported), after one warm-up.
    pub repeats: usize,
    /// Targets checked against the direct sum per size (fewer where the pairs would exceed
    /// [`SAMPLE_PAIR_BUDGET`]; 0: no check and no all-pairs estimate).
    pub sample: usize,
    /// The pair interaction: Biot–Savart (velocity + stretching) or gravity (φ and a).
    pub interaction: InteractionKind,
    /// The periodic box (Biot–Savart): the periodic FMM on [`Particles::lattice`] of the cube
    /// number nearest N (jitter 0.3 h, σ = h), checked against the CPU f64 Ewald sum at a tenth
    /// of the accuracy instead of the direct sum.
    pub periodic: bool,
    /// Overrides of the planned parameters.
    pub tuning: FmmTuning,
}

/// `n` bodies of `--interaction gravity` (module docs), seeded: positions uniform in the unit
/// cube, masses 1/n, and the softening a tenth of the mean spacing n^{−1/3}.
pub fn gravity_bodies(n: usize, seed: u64) -> (Vec<[f64; 3]>, Vec<f64>, PlummerGravity) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let x = (0..n)
        .map(|_| std::array::from_fn(|_| rng.random_range(0.0..1.0)))
        .collect();
    let eps = 0.1 / (n.max(1) as f64).cbrt();
    (
        x,
        vec![1.0 / n.max(1) as f64; n],
        PlummerGravity { softening: eps },
    )
}

/// One row of `vpm bench fmm`.
#[derive(Debug, Clone, Serialize)]
pub struct FmmBenchRow {
    pub n: usize,
    pub accuracy: f64,
    /// Median wall seconds of one velocity + classical stretching evaluation of host arrays
    /// (the host form: on a GPU, the uploads and downloads included).
    pub seconds: f64,
    /// On a GPU: the median wall seconds of the device form on resident particles (results
    /// left on the device, the GPU waited for), what a GPU-resident run pays per evaluation;
    /// `None` on the CPU. The targets are judged on it where there is one.
    pub seconds_resident: Option<f64>,
    /// Particles per second (targets = sources).
    pub particles_per_second: f64,
    /// Phases, cells, leaves, depth, M2L pairs, near-field pairs and targets of the median
    /// evaluation (seconds; the GPU fills its phases from CUDA events).
    pub stats: FmmStats,
    /// Near-field (P2P) source particles per target.
    pub p2p_per_target: f64,
    /// The parameters planned for the accuracy, and their sentence.
    pub parameters: FmmParams,
    pub parameters_text: String,
    /// Relative L2 error against the f64 direct sum on a random sample of the targets.
    #[serde(flatten)]
    pub check: SampleCheck,
    /// The largest errors over the rms there (docs/physics.md §8); null when not checked.
    pub max_rel_velocity: Option<f64>,
    pub max_rel_stretching: Option<f64>,
    /// Wall seconds of the CPU f64 all-pairs sum (velocity + stretching) on the sample, and
    /// scaled to all N targets (N² pairs).
    pub direct_seconds_sample: Option<f64>,
    pub direct_seconds_all_pairs: Option<f64>,
    /// All pairs over FMM.
    pub speedup_over_all_pairs: Option<f64>,
    /// The target for this size and device, when it sets one (within 5 % of its size).
    pub target_seconds: Option<f64>,
    pub repeats: usize,
}

/// The rows of `vpm bench fmm` and the fitted exponent.
#[derive(Debug, Clone, Serialize)]
pub struct FmmBenchReport {
    pub rows: Vec<FmmBenchRow>,
    /// k of t ∝ N^k, least squares on (ln N, ln t) over the rows in [`FIT_RANGE`] when there are
    /// at least two.
    pub scaling_exponent: Option<f64>,
}

/// Times the FMM of `device` on [`Particles::free_space`] sets of each size in `sizes` (module
/// docs); prints a table and writes `json` when given.
pub fn bench_fmm(
    device: &Device,
    sizes: &[usize],
    o: &FmmBenchOptions,
    json: Option<&Path>,
) -> Result<FmmBenchReport> {
    let gravity = o.interaction == InteractionKind::Gravity;
    if gravity && o.periodic {
        anyhow::bail!("vpm bench fmm: --periodic is for the Biot–Savart law, not gravity");
    }
    let (backend, gpu_info) = match device.gpu() {
        None => ("cpu", None),
        Some(gpu) => ("cuda", Some(gpu.info().clone())),
    };
    match &gpu_info {
        None => cpu_banner(
            &format!(
                "vpm bench fmm (CPU, f64, accuracy {:e}, {})",
                o.accuracy, o.interaction
            ),
            o.repeats,
        ),
        Some(info) => crate::out!(
            "vpm bench fmm (GPU, f64 expansions, f32 near field, accuracy {:e}, {}): {info}; \
             wall clock of the synchronised call, median of {} after warm-up; tree and lists on \
             the device",
            o.accuracy,
            o.interaction,
            o.repeats,
        ),
    }
    crate::out!(
        "errors against the CPU f64 direct sum on up to {} sampled targets; all pairs = that \
         sum's time scaled to N² pairs",
        o.sample
    );
    if o.periodic {
        crate::out!(
            "the periodic box: the periodic FMM on a jittered lattice (σ = h), the reference the \
             CPU f64 Ewald sum at a tenth of the accuracy (its time in place of the all-pairs \
             sum's)"
        );
    }
    let targets: Vec<&str> = TARGETS
        .iter()
        .filter(|t| t.device == backend && t.interaction == o.interaction)
        .map(|t| t.what)
        .collect();
    let header = if gravity {
        crate::out!(
            "bodies: mass 1/N uniform in the unit cube, softening ε = 0.1 N^(-1/3); one \
             evaluation is φ and a at the bodies"
        );
        "N|s φ+a|bodies/s|p|cells|leaves|depth|M2L pairs|P2P/tgt|err acc|err φ|s all pairs|speedup"
    } else {
        "N|s v+s|particles/s|p|cells|leaves|depth|M2L pairs|P2P/tgt|err vel|err str|s all pairs|speedup"
    };
    crate::out!(
        "issue targets at 1e-4: {}; exponent ≤ {TARGET_EXPONENT}",
        if targets.is_empty() {
            "none".into()
        } else {
            targets.join("; ")
        }
    );
    print_header(header, &[9, 10, 12, 3, 9, 9, 5, 11, 8, 9, 9, 11, 8]);
    let mut rows = Vec::new();
    for &n in sizes {
        let fmm_backend = match device {
            Device::Cpu => FmmBackend::Cpu,
            Device::Cuda(_) | Device::Group(_) => FmmBackend::Cuda,
        };
        let row = match device.gpu() {
            None if gravity => bench_gravity_one(
                n,
                o,
                backend,
                |g| {
                    let p = o
                        .tuning
                        .apply(plan_gravity_parameters(o.accuracy, fmm_backend, g)?)?;
                    Ok(FmmGravity::with_params(g, p, 0))
                },
                |_, _| Ok(None),
            )?,
            Some(gpu) if gravity => bench_gravity_one(
                n,
                o,
                backend,
                |g| {
                    let p = o
                        .tuning
                        .apply(plan_gravity_parameters(o.accuracy, fmm_backend, g)?)?;
                    Ok(CudaFmmGravity::with_params(gpu.clone(), g, p, 0)?)
                },
                time_resident_gravity,
            )?,
            None if o.periodic => {
                let p = o.tuning.apply(plan_parameters(o.accuracy, fmm_backend)?)?;
                bench_one(&mut FmmPeriodic::with_params(p, 0), backend, n, o)?
            }
            Some(gpu) if o.periodic => {
                let p = o.tuning.apply(plan_parameters(o.accuracy, fmm_backend)?)?;
                let mut fmm = CudaFmm::periodic_with_params(gpu.clone(), p, 0)?;
                bench_one(&mut fmm, backend, n, o)?
            }
            None => {
                let p = o.tuning.apply(plan_parameters(o.accuracy, fmm_backend)?)?;
                bench_one(&mut FmmFreeSpace::with_params(p, 0), backend, n, o)?
            }
            Some(gpu) => {
                let p = o.tuning.apply(plan_parameters(o.accuracy, fmm_backend)?)?;
                bench_one(&mut CudaFmm::with_params(gpu.clone(), p, 0)?, backend, n, o)?
            }
        };
        let s = &row.stats;
        crate::out!(
            "{:>9} {:>10.4} {:>12.3e} {:>3} {:>9} {:>9} {:>5} {:>11} {:>8.0} {:>9} {:>9} {:>11} {:>8}",
            n,
            row.seconds,
            row.particles_per_second,
            row.parameters.order,
            s.cells,
            s.leaves,
            s.depth,
            s.m2l_pairs,
            row.p2p_per_target,
            fmt_error(row.check.rel_l2_velocity),
            fmt_error(row.check.rel_l2_stretching),
            row.direct_seconds_all_pairs
                .map_or("-".into(), |t| format!("{t:.3e}")),
            row.speedup_over_all_pairs
                .map_or("-".into(), |x| format!("{x:.0}")),
        );
        crate::out!(
            "          phases (s): tree {:.4}, upward {:.4}, M2L {:.4}, downward {:.4}, P2P + L2P \
             {:.4}; max error {} {}, {} {} on {} targets{}",
            s.tree_seconds,
            s.upward_seconds,
            s.m2l_seconds,
            s.downward_seconds,
            s.p2p_seconds,
            if gravity { "acc" } else { "vel" },
            fmt_error(row.max_rel_velocity),
            if gravity { "φ" } else { "str" },
            fmt_error(row.max_rel_stretching),
            row.check.accuracy_sample,
            row.target_seconds
                .map_or(String::new(), |t| format!("; target ≤ {t} s")),
        );
        if let Some(t) = row.seconds_resident {
            crate::out!(
                "          resident particles (the device form, as a GPU-resident run calls it): \
                 {t:.4} s{}",
                row.target_seconds.map_or(String::new(), |target| format!(
                    " — target {}",
                    if t <= target { "met" } else { "missed" }
                ))
            );
        }
        rows.push(row);
    }
    if let Some(first) = rows.first() {
        crate::out!("parameters: {}", first.parameters_text);
    }
    let exponent = scaling_exponent(&rows);
    match exponent {
        Some(k) => crate::out!(
            "scaling: t ∝ N^{k:.3} over {} ≤ N ≤ {} (least squares on ln t, ln N; target ≤ \
             {TARGET_EXPONENT})",
            FIT_RANGE.0,
            FIT_RANGE.1
        ),
        None => crate::out!(
            "scaling: fewer than two sizes in {} ≤ N ≤ {}, no exponent fitted",
            FIT_RANGE.0,
            FIT_RANGE.1
        ),
    }
    let rows = finish_report(
        json,
        serde_json::json!({
            "benchmark": "fmm",
            "device": device.label(),
            "gpu": gpu_info,
            "accuracy": o.accuracy,
            "interaction": o.interaction,
            "particles": if gravity {
                "bodies of mass 1/N uniform in the unit cube, softening 0.1 N^(-1/3) \
                 (bench::fmm::gravity_bodies)"
            } else {
                "uniform in [-pi, pi]^3, sigma = 2 pi / N^(1/3), strengths uniform in [-1, 1]^3 \
                 (verify::Particles::free_space)"
            },
            "timing": if gravity {
                "wall clock of one potential + acceleration evaluation at the bodies (checks \
                 off), median after one warm-up"
            } else {
                "wall clock of one velocity + classical stretching evaluation (targets = \
                 sources, checks off), median after one warm-up"
            },
            "outputs": if gravity {
                "velocity fields: the acceleration; stretching fields: the potential"
            } else {
                "velocity and classical stretching"
            },
            "reference": "CPU f64 direct sum on the sampled targets",
            "scaling_exponent": exponent,
            "fit_range": [FIT_RANGE.0, FIT_RANGE.1],
            "issue_targets": TARGETS,
            "target_exponent": TARGET_EXPONENT,
            "tuning": {
                "theta": o.tuning.theta,
                "leaf_size": o.tuning.leaf_size,
                "order": o.tuning.order,
                "m2l": o.tuning.m2l,
            },
        }),
        rows,
    )?;
    Ok(FmmBenchReport {
        rows,
        scaling_exponent: exponent,
    })
}

/// The median of `repeats` timed calls of `evaluate` (after one warm-up), with the stats of the
/// median call.
fn time_runs(
    repeats: usize,
    mut evaluate: impl FnMut() -> Result<FmmStats>,
) -> Result<(f64, FmmStats)> {
    evaluate()?; // warm-up
    let mut runs = Vec::with_capacity(repeats.max(1));
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        let stats = evaluate()?;
        runs.push((t.elapsed().as_secs_f64(), stats));
    }
    let seconds = median(runs.iter().map(|r| r.0).collect());
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok((seconds, runs[runs.len() / 2].1))
}

/// Targets checked at size `n`: the request, fewer where the pairs would exceed
/// [`SAMPLE_PAIR_BUDGET`].
fn sample_count(o: &FmmBenchOptions, n: usize) -> usize {
    let budget = (SAMPLE_PAIR_BUDGET / n.max(1) as f64) as usize;
    o.sample.min(budget.max(MIN_SAMPLE)).min(n)
}

/// What one size's sample check measured: [first L2, first max, second L2, second max] (the
/// velocity and stretching, or the acceleration and potential), the targets and the seconds of
/// the direct sum on them.
type Measured = ([f64; 4], usize, f64);

fn bench_one(
    fmm: &mut (impl Fmm + Summation),
    backend: &str,
    n: usize,
    o: &FmmBenchOptions,
) -> Result<FmmBenchRow> {
    fmm.disable_checks();
    let p = match o.periodic {
        true => Particles::lattice((n as f64).cbrt().round() as usize, 0.3, 0xf33 ^ n as u64),
        false => Particles::free_space(n, 0xf33 ^ n as u64),
    };
    let n = p.len();
    let src = p.sources();
    let extra = Extra::Stretching {
        alpha: &p.alpha,
        scheme: StretchingScheme::Classical,
    };
    let mut out = Evaluation::default();
    let timed = time_runs(o.repeats, || {
        fmm.evaluate(&src, &p.x, extra, &mut out)?;
        Ok(*fmm.last_stats())
    })?;
    let resident = time_resident(fmm, &p, o.repeats)?;

    // The error on a sample of targets, and the all-pairs sum timed there.
    let m = sample_count(o, n);
    let t = Instant::now();
    let seed = 0x5a3b ^ n as u64;
    let mut ewald;
    let reference: &mut dyn Summation = match o.periodic {
        true => {
            ewald = EwaldPeriodic::new(0.1 * o.accuracy);
            &mut ewald
        }
        false => &mut DirectFreeSpace,
    };
    let (check, errors) = SampleCheck::of_particles(&out, reference, &p, (m, seed))?;
    let measured = errors.map(|e| {
        let s = e.extra.unwrap_or_default();
        let errors = [e.velocity.rel_l2, e.velocity.max_rel, s.rel_l2, s.max_rel];
        (errors, check.accuracy_sample, t.elapsed().as_secs_f64())
    });
    let mut r = row(n, o, backend, timed, *fmm.params(), measured);
    if let Some((seconds, stats)) = resident {
        r.seconds_resident = Some(seconds);
        r.stats = stats;
    }
    Ok(r)
}

/// The median wall seconds and the phases of the device form of `fmm` (when it has one) on
/// `p` uploaded once: velocity + classical stretching at the sources, results left on the
/// device, the GPU waited for after each call.
fn time_resident(
    fmm: &mut (impl Fmm + Summation),
    p: &Particles,
    repeats: usize,
) -> Result<Option<(f64, FmmStats)>> {
    let Some(dev) = fmm.device_form() else {
        return Ok(None);
    };
    let gpu = dev.gpu().clone();
    let s = gpu.stream().clone();
    let flat = |v: &[[f64; 3]]| v.iter().flatten().copied().collect::<Vec<f64>>();
    let (mut x, mut alpha, mut sigma) = (
        DeviceBuffer::default(),
        DeviceBuffer::default(),
        DeviceBuffer::default(),
    );
    x.upload(&s, &flat(&p.x), "positions")?;
    alpha.upload(&s, &flat(&p.alpha), "strengths")?;
    sigma.upload(&s, &p.sigma, "core radii")?;
    let sigma_max = p.sigma.iter().copied().fold(0.0, f64::max);
    let sources = DeviceSources {
        x: &x,
        alpha: &alpha,
        sigma: &sigma,
        n: p.x.len(),
        sigma_max,
        equal_cores: p.sigma.iter().all(|&v| v == sigma_max),
    };
    let work = DeviceWork {
        sources: &sources,
        targets: &DeviceTargets::Sources,
        extra: &DeviceExtra::Stretching {
            alpha: None,
            scheme: StretchingScheme::Classical,
        },
    };
    let mut out = DeviceEvaluation::default();
    let (seconds, _) = time_runs(repeats, || {
        dev.evaluate_on_device(work, &mut out)?;
        gpu.synchronize("the resident FMM")?;
        Ok(FmmStats::default())
    })?;
    Ok(Some((seconds, *fmm.last_stats())))
}

/// [`bench_one`] for gravity ([`gravity_bodies`]) with the FMM `make` builds for their softening
/// ([`FmmGravity`], [`CudaFmmGravity`]).
fn bench_gravity_one<F: Fmm + GravitySummation>(
    n: usize,
    o: &FmmBenchOptions,
    backend: &str,
    make: impl FnOnce(PlummerGravity) -> Result<F>,
    resident: impl FnOnce(&mut F, (&Bodies, usize)) -> Result<Option<(f64, FmmStats)>>,
) -> Result<FmmBenchRow> {
    let (x, mass, gravity) = gravity_bodies(n, 0x9a7 ^ n as u64);
    let bodies = Bodies { x: &x, mass: &mass };
    let mut fmm = make(gravity)?;
    fmm.disable_checks();
    let mut out = GravityEvaluation::default();
    let timed = time_runs(o.repeats, || {
        fmm.evaluate_gravity(&bodies, None, &mut out)?;
        Ok(*fmm.last_stats())
    })?;
    let m = sample_count(o, n);
    let measured = if m > 0 {
        let t = Instant::now();
        let reference = &mut DirectGravity::new(gravity);
        let e = check_gravity_sample(reference, &bodies, None, &out, m, 0x5a3b ^ n as u64)?;
        Some((e, m, t.elapsed().as_secs_f64()))
    } else {
        None
    };
    let times = resident(&mut fmm, (&bodies, o.repeats))?;
    let mut r = row(n, o, backend, timed, *fmm.params(), measured);
    if let Some((seconds, stats)) = times {
        r.seconds_resident = Some(seconds);
        r.stats = stats;
    }
    Ok(r)
}

/// [`time_resident`] for the GPU gravity FMM: φ and a of the bodies uploaded once
/// ([`CudaFmmGravity::evaluate_resident`], results left on the device).
pub(crate) fn time_resident_gravity(
    fmm: &mut CudaFmmGravity,
    (bodies, repeats): (&Bodies, usize),
) -> Result<Option<(f64, FmmStats)>> {
    let gpu = fmm.gpu().clone();
    let s = gpu.stream().clone();
    let flat: Vec<f64> = bodies.x.iter().flatten().copied().collect();
    let (mut x, mut mass) = (DeviceBuffer::default(), DeviceBuffer::default());
    x.upload(&s, &flat, "positions")?;
    mass.upload(&s, bodies.mass, "masses")?;
    let (mut phi, mut acc) = (DeviceBuffer::default(), DeviceBuffer::default());
    let n = bodies.len();
    let (seconds, _) = time_runs(repeats, || {
        fmm.evaluate_resident(&x, &mass, n, &mut phi, &mut acc)?;
        gpu.synchronize("the resident gravity FMM")?;
        Ok(FmmStats::default())
    })?;
    Ok(Some((seconds, *fmm.last_stats())))
}

/// One row from the timing and the sample check.
fn row(
    n: usize,
    o: &FmmBenchOptions,
    backend: &str,
    (seconds, stats): (f64, FmmStats),
    params: FmmParams,
    measured: Option<Measured>,
) -> FmmBenchRow {
    let direct = measured.map(|m| m.2);
    let all_pairs = measured.map(|(_, m, t)| t * n as f64 / m as f64);
    FmmBenchRow {
        n,
        accuracy: o.accuracy,
        seconds,
        seconds_resident: None,
        particles_per_second: n as f64 / seconds,
        stats,
        p2p_per_target: stats.p2p_per_target(),
        parameters: params,
        parameters_text: params.to_string(),
        check: SampleCheck {
            rel_l2_velocity: measured.map(|m| m.0[0]),
            rel_l2_stretching: measured.map(|m| m.0[2]),
            accuracy_sample: measured.map_or(0, |m| m.1),
        },
        max_rel_velocity: measured.map(|m| m.0[1]),
        max_rel_stretching: measured.map(|m| m.0[3]),
        direct_seconds_sample: direct,
        direct_seconds_all_pairs: all_pairs,
        speedup_over_all_pairs: all_pairs.map(|t| t / seconds),
        target_seconds: TARGETS
            .iter()
            .filter(|t| t.interaction == o.interaction && t.device == backend)
            .find(|t| (n as f64 / t.n - 1.0).abs() <= 0.05)
            .map(|t| t.seconds),
        repeats: o.repeats.max(1),
    }
}

/// The exponent k of t ∝ N^k by least squares on (ln N, ln t) over the rows in [`FIT_RANGE`]
/// (t the resident time where there is one, else the host form's);
/// `None` with fewer than two distinct sizes there.
pub fn scaling_exponent(rows: &[FmmBenchRow]) -> Option<f64> {
    let points: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (r.n, r.seconds_resident.unwrap_or(r.seconds)))
        .filter(|&(n, t)| (FIT_RANGE.0..=FIT_RANGE.1).contains(&(n as f64)) && t > 0.0)
        .map(|(n, t)| ((n as f64).ln(), t.ln()))
        .collect();
    fit_slope(&points)
}

/// The least-squares slope of `points`; `None` with fewer than two distinct abscissae.
fn fit_slope(points: &[(f64, f64)]) -> Option<f64> {
    let k = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / k;
    let my = points.iter().map(|p| p.1).sum::<f64>() / k;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_overrides_and_replans_the_order() {
        let planned = plan_parameters(1e-4, FmmBackend::Cuda).unwrap();
        assert_eq!(FmmTuning::default().apply(planned).unwrap(), planned);
        let wide = FmmTuning {
            theta: Some(0.7),
            leaf_size: Some(64),
            order: None,
            m2l: Some(M2lPrecision::F64),
        }
        .apply(planned)
        .unwrap();
        assert_eq!(
            (wide.theta, wide.leaf_size, wide.m2l),
            (0.7, 64, M2lPrecision::F64)
        );
        assert!(wide.order > planned.order, "{wide:?} against {planned:?}");
        let fixed = FmmTuning {
            theta: Some(0.7),
            order: Some(5),
            ..Default::default()
        };
        assert_eq!(fixed.apply(planned).unwrap().order, 5);
        for bad in [
            FmmTuning {
                theta: Some(1.0),
                ..Default::default()
            },
            FmmTuning {
                leaf_size: Some(0),
                ..Default::default()
            },
            FmmTuning {
                order: Some(0),
                ..Default::default()
            },
        ] {
            assert!(bad.apply(planned).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn slope_of_a_power_law() {
        let pts: Vec<(f64, f64)> = [1e6, 4e6, 16e6]
            .iter()
            .map(|&n: &f64| (n.ln(), (3e-7 * n.powf(1.08)).ln()))
            .collect();
        assert!((fit_slope(&pts).unwrap() - 1.08).abs() < 1e-12);
        assert_eq!(fit_slope(&pts[..1]), None);
        assert_eq!(fit_slope(&[(1.0, 2.0), (1.0, 3.0)]), None);
    }

    /// `vpm bench fmm` of `interaction` on the CPU at N = 3000, accuracy 1e-4, 50 targets
    /// checked: the report, whose one row has measured and checked them all.
    fn bench_3000(interaction: InteractionKind) -> FmmBenchReport {
        let o = FmmBenchOptions {
            accuracy: 1e-4,
            repeats: 1,
            sample: 50,
            interaction,
            periodic: false,
            tuning: FmmTuning::default(),
        };
        let r = bench_fmm(&Device::Cpu, &[3000], &o, None).unwrap();
        let row = &r.rows[0];
        assert_eq!((row.n, row.check.accuracy_sample), (3000, 50));
        r
    }

    /// `--periodic` on the CPU: the periodic FMM on a 10³ lattice, checked against Ewald.
    #[test]
    fn cpu_periodic_rows_measure_and_check() {
        let o = FmmBenchOptions {
            accuracy: 1e-4,
            repeats: 1,
            sample: 30,
            interaction: InteractionKind::BiotSavart,
            periodic: true,
            tuning: FmmTuning::default(),
        };
        let r = bench_fmm(&Device::Cpu, &[1000], &o, None).unwrap();
        let row = &r.rows[0];
        assert_eq!((row.n, row.check.accuracy_sample), (1000, 30));
        let (ev, es) = (row.check.rel_l2_velocity, row.check.rel_l2_stretching);
        assert!(ev.unwrap() <= 1e-4 && es.unwrap() <= 1e-4, "{row:?}");
        let o = FmmBenchOptions {
            interaction: InteractionKind::Gravity,
            ..o
        };
        assert!(bench_fmm(&Device::Cpu, &[1000], &o, None).is_err());
    }

    #[test]
    fn cpu_rows_measure_and_check() {
        let r = bench_3000(InteractionKind::BiotSavart);
        let row = &r.rows[0];
        assert!(row.seconds > 0.0 && row.stats.targets == 3000, "{row:?}");
        assert!(row.check.rel_l2_velocity.unwrap() < 1e-3, "{row:?}");
        assert!(row.check.rel_l2_stretching.unwrap() < 1e-3, "{row:?}");
        assert!(row.direct_seconds_all_pairs.unwrap() > 0.0);
        assert_eq!(r.scaling_exponent, None);
    }

    #[test]
    fn gravity_rows_measure_and_check() {
        let r = bench_3000(InteractionKind::Gravity);
        let row = &r.rows[0];
        assert!(row.stats.targets == 3000 && row.seconds > 0.0, "{row:?}");
        assert!(row.check.rel_l2_velocity.unwrap() < 1e-4, "{row:?}");
        assert!(row.check.rel_l2_stretching.unwrap() < 1e-4, "{row:?}");
        assert_eq!(row.target_seconds, None);
        assert!(TARGETS
            .iter()
            .any(|t| t.interaction == InteractionKind::Gravity));
        assert!(row.parameters_text.contains("softened"), "{row:?}");
    }
}
