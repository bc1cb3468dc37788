//! Benchmarks (`vpm bench …`): wall-clock medians after warm-up, on fresh random inputs, with the
//! hardware stated. Each prints a table and can write JSON. One module per subcommand; the
//! inputs are the seeded fixtures of [`crate::summation::verify`] and accuracy checks use its
//! error measures.

pub mod direct;
pub mod ewald;
pub mod kernel;
pub mod spectral;

pub use direct::{bench_direct, DirectBenchRow};
pub use ewald::{bench_ewald, EwaldBenchRow, EwaldGpuBenchRow};
pub use kernel::{bench_kernel, KernelBenchRow, FLOPS_PER_INTERACTION};
pub use spectral::{bench_spectral, SpectralBenchRow};

use crate::output::write_atomic;
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

/// Writes a benchmark's JSON report (name, hardware, threads, version, rows) atomically.
pub(crate) fn write_report<R: Serialize>(
    path: &Path,
    benchmark: &str,
    cpu: &str,
    rows: &[R],
) -> Result<()> {
    let report = serde_json::json!({
        "benchmark": benchmark,
        "cpu": cpu,
        "threads": rayon::current_num_threads(),
        "vpm_version": env!("CARGO_PKG_VERSION"),
        "rows": rows,
    });
    write_atomic(path, serde_json::to_string_pretty(&report)?.as_bytes())?;
    println!("wrote {}", path.display());
    Ok(())
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

/// Formats an optional error for the tables ("-" when not checked).
pub(crate) fn fmt_error(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.2e}"))
}
