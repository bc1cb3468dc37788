//! `vpm bench spectral`: RK4 steps and 3-D transforms of the pseudo-spectral solver.

use super::{cpu_banner, finish_report, median};
use crate::config::InitialCondition;
use crate::init::initial_modes;
use crate::spectral::Dealias;
use crate::spectral::{Fft3d, SpectralGrid, SpectralSolver};
use anyhow::Result;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// One row of `vpm bench spectral`.
#[derive(Debug, Clone, Serialize)]
pub struct SpectralBenchRow {
    pub n: usize,
    pub dealias: String,
    /// Points per dimension of the product grid (3N/2 or N).
    pub product_grid: usize,
    /// Median milliseconds of one RK4 step (four right-hand sides, 36 3-D transforms).
    pub ms_per_rk4_step: f64,
    /// Median milliseconds of one 3-D transform (mean of an inverse and a forward) on the
    /// product grid.
    pub ms_per_transform: f64,
    pub repeats: usize,
}
/// Times RK4 steps and 3-D transforms for each (N, dealiasing).
pub fn bench_spectral(
    sizes: &[usize],
    rules: &[Dealias],
    repeats: usize,
    json: Option<&Path>,
) -> Result<Vec<SpectralBenchRow>> {
    cpu_banner("vpm bench spectral", repeats);
    println!(
        "{:>6} {:>7} {:>8} {:>16} {:>18}",
        "N", "dealias", "grid", "ms / RK4 step", "ms / 3-D transform"
    );
    let mut rows = Vec::new();
    for &n in sizes {
        for &rule in rules {
            let grid = SpectralGrid::new(n, rule);
            let mut solver = SpectralSolver::new(grid, 0.01);
            // Fresh random input: an isotropic field with a new seed for each measurement set.
            let ic = InitialCondition::Isotropic {
                kp: 4.0,
                u0: 1.0,
                seed: 0x5eed ^ n as u64,
                k_cut: (grid.kmax() as f64).min(12.0),
            };
            solver.set_velocity_modes(initial_modes(&ic, &grid.layout())?);
            let dt = 1e-3;
            solver.step(dt)?; // warm-up: plans, scratch, page faults
            let mut step_ms = Vec::new();
            for _ in 0..repeats.max(1) {
                let t = Instant::now();
                solver.step(dt)?;
                step_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let m = grid.product_grid();
            let mut fft = Fft3d::new(m, grid.layout());
            let modes = solver.velocity_modes()[0].clone();
            let mut phys = vec![0.0; m * m * m];
            let mut back = modes.clone();
            fft.inverse(&modes, &mut phys);
            fft.forward(&mut phys, &mut back);
            let mut tr_ms = Vec::new();
            for _ in 0..repeats.max(1) {
                let t = Instant::now();
                fft.inverse(&modes, &mut phys);
                fft.forward(&mut phys, &mut back);
                tr_ms.push(t.elapsed().as_secs_f64() * 1e3 / 2.0);
            }
            let row = SpectralBenchRow {
                n,
                dealias: rule.as_str().to_string(),
                product_grid: m,
                ms_per_rk4_step: median(step_ms),
                ms_per_transform: median(tr_ms),
                repeats,
            };
            println!(
                "{:>6} {:>7} {:>8} {:>16.1} {:>18.2}",
                row.n, row.dealias, row.product_grid, row.ms_per_rk4_step, row.ms_per_transform
            );
            rows.push(row);
        }
    }
    finish_report(json, serde_json::json!({ "benchmark": "spectral" }), rows)
}
