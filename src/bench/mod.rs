//! Benchmarks (`vpm bench …`): medians after warm-up (wall clock, or CUDA events around the GPU
//! launches where a benchmark says so), with the hardware stated. Each prints a table and can
//! write JSON. One module per subcommand; the evaluators' inputs are the seeded fixtures of
//! [`crate::summation::verify`] and accuracy checks use its error measures.

pub mod direct;
pub mod ewald;
pub mod fmm;
pub mod gravity;
pub mod kernel;
pub mod spectral;
pub mod step;

pub use direct::{
    bench_direct, bench_direct_gravity, bench_direct_gravity_cpu, DirectBenchRow,
    GravityBenchOptions, GravityBenchRow,
};
pub use ewald::{bench_ewald, EwaldBenchRow, EwaldGpuBenchRow};
pub use fmm::{bench_fmm, FmmBenchOptions, FmmBenchReport, FmmBenchRow, FmmTuning};
pub use gravity::{bench_gravity, NBodyBenchOptions, NBodyBenchReport, NBodyBenchRow};
pub use kernel::{bench_kernel, KernelBenchRow, FLOPS_PER_INTERACTION};
pub use spectral::{bench_spectral, SpectralBenchRow};
pub use step::{bench_step, StepBenchOptions, StepBenchRow};

use crate::kernel::StretchingScheme;
use crate::output::{cpu_model, write_atomic};
use crate::summation::verify::{self, Errors, Particles};
use crate::summation::{Evaluation, Extra, Request, Summation};
use anyhow::Result;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// Median seconds of `repeats` calls of `f`, after one warm-up call.
pub(crate) fn median_seconds<E>(
    repeats: usize,
    mut f: impl FnMut() -> Result<(), E>,
) -> Result<f64, E> {
    f()?;
    let mut t = Vec::with_capacity(repeats.max(1));
    for _ in 0..repeats.max(1) {
        let s = Instant::now();
        f()?;
        t.push(s.elapsed().as_secs_f64());
    }
    Ok(median(t))
}

/// Prints the first line of a CPU benchmark: `title`, then the CPU model, the threads and the
/// repeats.
pub(crate) fn cpu_banner(title: &str, repeats: usize) {
    let cpu = cpu_model();
    let threads = rayon::current_num_threads();
    crate::out!("{title}: {cpu}, {threads} threads, median of {repeats} after warm-up");
}

/// Median seconds (of `repeats`, after a warm-up) of one velocity evaluation of `ev` on the
/// particles `p` (targets = sources), and of one velocity + classical stretching evaluation.
pub(crate) fn time_velocity_and_stretching(
    ev: &mut impl Summation,
    p: &Particles,
    repeats: usize,
) -> Result<(f64, f64)> {
    let src = p.sources();
    let mut out = Evaluation::default();
    let mut time =
        |extra: Extra| median_seconds(repeats, || ev.evaluate(&src, &p.x, extra, &mut out));
    let tv = time(Extra::None)?;
    let ts = time(Extra::Stretching {
        alpha: &p.alpha,
        scheme: StretchingScheme::Classical,
    })?;
    Ok((tv, ts))
}

/// Writes a benchmark's JSON report atomically to `json` when given: `fields` (the benchmark's
/// name and what else it states) with the CPU model, threads, version and rows; returns the rows.
pub(crate) fn finish_report<R: Serialize>(
    json: Option<&Path>,
    fields: serde_json::Value,
    rows: Vec<R>,
) -> Result<Vec<R>> {
    let Some(path) = json else {
        return Ok(rows);
    };
    let mut report = serde_json::json!({
        "cpu": cpu_model(),
        "threads": rayon::current_num_threads(),
        "vpm_version": env!("CARGO_PKG_VERSION"),
        "rows": rows,
    });
    if let (Some(all), serde_json::Value::Object(extra)) = (report.as_object_mut(), fields) {
        all.extend(extra);
    }
    write_atomic(path, serde_json::to_string_pretty(&report)?.as_bytes())?;
    crate::out!("wrote {}", path.display());
    Ok(rows)
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Prints a table's header line: the column names (separated by `|`) right-aligned to their
/// widths, one space apart, as the rows print their values.
pub(crate) fn print_header(names: &str, widths: &[usize]) {
    let cells: Vec<String> = names
        .split('|')
        .zip(widths)
        .map(|(name, &w)| format!("{name:>w$}"))
        .collect();
    crate::out!("{}", cells.join(" "));
}

/// The accuracy of a benchmarked evaluation on a random sample of its targets.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SampleCheck {
    /// Relative L2 difference of the velocity from the reference evaluator on the sampled
    /// targets, or null when not checked.
    pub rel_l2_velocity: Option<f64>,
    /// The same for the stretching (or gradient).
    pub rel_l2_stretching: Option<f64>,
    /// Targets in the accuracy sample (0: not checked).
    pub accuracy_sample: usize,
}

impl SampleCheck {
    /// `out`, the evaluation of `extra` at `targets` from `sources`, against `reference` on
    /// `sample` of the targets drawn with `seed`; not checked (and no errors) without a
    /// reference or when `sample` is 0.
    pub(crate) fn run(
        out: &Evaluation,
        reference: Option<&mut dyn Summation>,
        request: Request,
        (sample, seed): (usize, u64),
    ) -> Result<(Self, Option<Errors>)> {
        let Some(reference) = reference.filter(|_| sample > 0) else {
            return Ok((Self::default(), None));
        };
        let idx = verify::sample(request.targets.len(), sample, seed);
        let e = verify::errors_on_sample(
            out,
            reference,
            request.sources,
            request.targets,
            request.extra,
            &idx,
        )?;
        let check = SampleCheck {
            rel_l2_velocity: Some(e.velocity.rel_l2),
            rel_l2_stretching: e.extra.map(|s| s.rel_l2),
            accuracy_sample: idx.len(),
        };
        Ok((check, Some(e)))
    }

    /// [`SampleCheck::run`] for velocity + classical stretching of the particles `p` at
    /// themselves, what the evaluator benchmarks time.
    pub(crate) fn of_particles(
        out: &Evaluation,
        reference: &mut dyn Summation,
        p: &Particles,
        sample: (usize, u64),
    ) -> Result<(Self, Option<Errors>)> {
        let request = Request {
            sources: &p.sources(),
            targets: &p.x,
            extra: Extra::Stretching {
                alpha: &p.alpha,
                scheme: StretchingScheme::Classical,
            },
        };
        Self::run(out, Some(reference), request, sample)
    }
}

/// Formats an optional error for the tables ("-" when not checked).
pub(crate) fn fmt_error(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.2e}"))
}
