//! Benchmarks (`vpm bench …`): wall-clock medians after warm-up, on fresh random inputs, with the
//! hardware stated. Each prints a table and can write JSON.

use crate::config::{Dealias, InitialCondition};
use crate::init::initial_modes;
use crate::output::{cpu_model, write_atomic};
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

/// Median seconds of `repeats` calls of `f`, after one warm-up call.
fn median_seconds<E>(repeats: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
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
fn write_report<R: Serialize>(path: &Path, benchmark: &str, cpu: &str, rows: &[R]) -> Result<()> {
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Times RK4 steps and 3-D transforms for each (N, dealiasing).
pub fn bench_spectral(
    sizes: &[usize],
    rules: &[Dealias],
    repeats: usize,
    json: Option<&Path>,
) -> Result<Vec<SpectralBenchRow>> {
    let threads = rayon::current_num_threads();
    let cpu = cpu_model();
    println!("vpm bench spectral: {cpu}, {threads} threads, median of {repeats} after warm-up");
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
    if let Some(path) = json {
        write_report(path, "spectral", &cpu, &rows)?;
    }
    Ok(rows)
}

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
/// random strengths (fresh for each size).
pub fn bench_direct(
    sizes: &[usize],
    repeats: usize,
    json: Option<&Path>,
) -> Result<Vec<DirectBenchRow>> {
    use crate::kernel::StretchingScheme;
    use crate::particles::ParticleSet;
    use crate::summation::direct::DirectFreeSpace;
    use crate::summation::{Evaluation, Extra, Sources, Summation};
    use rand::{Rng, SeedableRng};
    let threads = rayon::current_num_threads();
    let cpu = cpu_model();
    println!(
        "vpm bench direct (CPU, f64): {cpu}, {threads} threads, median of {repeats} after warm-up"
    );
    println!(
        "{:>9} {:>12} {:>16} {:>12} {:>18}",
        "N", "s velocity", "pairs/s velocity", "s vel+str", "pairs/s vel+str"
    );
    let mut rows = Vec::new();
    for &n in sizes {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0xbe7c ^ n as u64);
        let sigma = std::f64::consts::TAU / (n as f64).cbrt();
        let mut p = ParticleSet::with_capacity(n);
        for _ in 0..n {
            let x = std::array::from_fn(|_| {
                rng.random_range(-std::f64::consts::PI..std::f64::consts::PI)
            });
            let a = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
            p.push(x, a, sigma);
        }
        let mut ev = DirectFreeSpace;
        let mut out = Evaluation::default();
        let mut time = |extra: Extra| {
            median_seconds(repeats, || {
                ev.evaluate(&Sources::of(&p), &p.x, extra, &mut out)
            })
        };
        let tv = time(Extra::None)?;
        let ts = time(Extra::Stretching {
            alpha: &p.alpha,
            scheme: StretchingScheme::Classical,
        })?;
        let pairs = (n * n) as f64;
        let row = DirectBenchRow {
            n,
            seconds_velocity: tv,
            seconds_velocity_stretching: ts,
            interactions_per_second_velocity: pairs / tv,
            interactions_per_second_velocity_stretching: pairs / ts,
            repeats,
        };
        println!(
            "{:>9} {:>12.4} {:>16.3e} {:>12.4} {:>18.3e}",
            n,
            tv,
            row.interactions_per_second_velocity,
            ts,
            row.interactions_per_second_velocity_stretching
        );
        rows.push(row);
    }
    if let Some(path) = json {
        write_report(path, "direct", &cpu, &rows)?;
    }
    Ok(rows)
}

/// One row of `vpm bench ewald`.
#[derive(Debug, Clone, Serialize)]
pub struct EwaldBenchRow {
    /// Particles (an n^3 lattice).
    pub particles: usize,
    pub accuracy: f64,
    pub seconds_velocity: f64,
    pub seconds_velocity_stretching: f64,
    /// Particles per second (targets = sources), velocity only.
    pub particles_per_second_velocity: f64,
    /// Particles per second, velocity + stretching.
    pub particles_per_second_velocity_stretching: f64,
    pub parameters: String,
    pub repeats: usize,
}

/// Times the periodic Ewald evaluator on lattice particles (σ = h, random zero-sum strengths,
/// fresh for each size): the layout of a vortex run in the box.
pub fn bench_ewald(
    lattice: &[usize],
    accuracy: f64,
    repeats: usize,
    json: Option<&Path>,
) -> Result<Vec<EwaldBenchRow>> {
    use crate::kernel::StretchingScheme;
    use crate::summation::ewald::EwaldPeriodic;
    use crate::summation::{Evaluation, Extra, Sources, Summation};
    use crate::vortex::lattice_nodes;
    use rand::{Rng, SeedableRng};
    let threads = rayon::current_num_threads();
    let cpu = cpu_model();
    println!(
        "vpm bench ewald (CPU, f64, accuracy {accuracy:e}): {cpu}, {threads} threads, median of {repeats} after warm-up"
    );
    println!(
        "{:>10} {:>12} {:>16} {:>12} {:>18}",
        "particles", "s velocity", "particles/s vel", "s vel+str", "particles/s vel+str"
    );
    let mut rows = Vec::new();
    for &n in lattice {
        let h = std::f64::consts::TAU / n as f64;
        let x = lattice_nodes(n);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0xe3a1d ^ n as u64);
        let mut alpha: Vec<[f64; 3]> = (0..x.len())
            .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0) * h * h * h))
            .collect();
        let np = x.len() as f64;
        let mean: [f64; 3] = std::array::from_fn(|c| alpha.iter().map(|a| a[c]).sum::<f64>() / np);
        for a in &mut alpha {
            for c in 0..3 {
                a[c] -= mean[c];
            }
        }
        let sigma = vec![h; x.len()];
        let src = Sources {
            x: &x,
            alpha: &alpha,
            sigma: &sigma,
        };
        let mut ew = EwaldPeriodic::new(accuracy);
        let mut out = Evaluation::default();
        let mut time =
            |extra: Extra| median_seconds(repeats, || ew.evaluate(&src, &x, extra, &mut out));
        let tv = time(Extra::None)?;
        let ts = time(Extra::Stretching {
            alpha: &alpha,
            scheme: StretchingScheme::Classical,
        })?;
        let row = EwaldBenchRow {
            particles: x.len(),
            accuracy,
            seconds_velocity: tv,
            seconds_velocity_stretching: ts,
            particles_per_second_velocity: np / tv,
            particles_per_second_velocity_stretching: np / ts,
            parameters: ew.parameters().map_or(String::new(), |p| p.to_string()),
            repeats,
        };
        println!(
            "{:>10} {:>12.4} {:>16.3e} {:>12.4} {:>18.3e}",
            row.particles,
            tv,
            row.particles_per_second_velocity,
            ts,
            row.particles_per_second_velocity_stretching
        );
        rows.push(row);
    }
    if let Some(path) = json {
        write_report(path, "ewald", &cpu, &rows)?;
    }
    Ok(rows)
}
