//! `vpm bench direct`: the CPU all-pairs evaluator.

use super::{cpu_banner, finish_report, print_header, time_velocity_and_stretching};
use crate::summation::direct::DirectFreeSpace;
use crate::summation::verify::Particles;
use anyhow::Result;
use serde::Serialize;
use std::path::Path;

/// One row of `vpm bench direct`.
#[derive(Debug, Clone, Serialize)]
pub struct DirectBenchRow {
    pub n: usize,
    /// Median seconds of one all-pairs velocity evaluation (n targets, n sources).
    pub seconds_velocity: f64,
    /// Median seconds of one velocity + classical stretching evaluation.
    pub seconds_velocity_stretching: f64,
    /// Pair interactions per second, velocity only.
    pub interactions_per_second_velocity: f64,
    /// Pair interactions per second, velocity + stretching.
    pub interactions_per_second_velocity_stretching: f64,
    pub repeats: usize,
}

/// Times the CPU all-pairs evaluator on n particles uniform in [−π, π]^3 with σ = 2π/n^{1/3} and
/// random strengths (fresh for each size: [`Particles::free_space`]).
pub fn bench_direct(
    sizes: &[usize],
    repeats: usize,
    json: Option<&Path>,
) -> Result<Vec<DirectBenchRow>> {
    cpu_banner("vpm bench direct (CPU, f64)", repeats);
    print_header(
        "N|s velocity|pairs/s velocity|s vel+str|pairs/s vel+str",
        &[9, 12, 16, 12, 18],
    );
    let mut rows = Vec::new();
    for &n in sizes {
        let p = Particles::free_space(n, 0xbe7c ^ n as u64);
        let (tv, ts) = time_velocity_and_stretching(&mut DirectFreeSpace, &p, repeats)?;
        let pairs = (n * n) as f64;
        let row = DirectBenchRow {
            n,
            seconds_velocity: tv,
            seconds_velocity_stretching: ts,
            interactions_per_second_velocity: pairs / tv,
            interactions_per_second_velocity_stretching: pairs / ts,
            repeats,
        };
        crate::out!(
            "{:>9} {:>12.4} {:>16.3e} {:>12.4} {:>18.3e}",
            n,
            tv,
            row.interactions_per_second_velocity,
            ts,
            row.interactions_per_second_velocity_stretching
        );
        rows.push(row);
    }
    finish_report(json, serde_json::json!({ "benchmark": "direct" }), rows)
}
