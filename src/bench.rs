//! Benchmarks (`vpm bench …`): wall-clock medians after warm-up, on fresh random inputs, with the
//! hardware stated. Each prints a table and can write JSON.

use crate::config::InitialCondition;
use crate::init::initial_modes;
use crate::output::{cpu_model, write_atomic};
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

/// One row of `vpm bench kernel`.
#[derive(Debug, Clone, Serialize)]
pub struct KernelBenchRow {
    pub n: usize,
    /// Launch configuration (block × targets per thread, unroll).
    pub config: String,
    /// Median milliseconds of one all-pairs velocity evaluation (n targets, n sources), CUDA
    /// events around the kernel launches.
    pub ms_velocity: f64,
    /// Median milliseconds of one velocity + classical stretching evaluation.
    pub ms_velocity_stretching: f64,
    /// 10^9 pair interactions per second, velocity only.
    pub ginteractions_per_s_velocity: f64,
    /// 10^9 pair interactions per second, velocity + stretching.
    pub ginteractions_per_s_velocity_stretching: f64,
    /// Equivalent TFLOP/s of velocity + stretching at 133 flops per interaction (the seed's
    /// count).
    pub tflops_equivalent_velocity_stretching: f64,
    /// Relative L2 difference from the CPU f64 evaluator on the sampled targets (velocity
    /// kernel), or null when not checked.
    pub rel_l2_velocity: Option<f64>,
    /// The same for the stretching of the velocity + stretching kernel.
    pub rel_l2_stretching: Option<f64>,
    /// Targets in the accuracy sample.
    pub accuracy_sample: usize,
    pub repeats: usize,
}

/// Flops per velocity + stretching interaction in the seed's accounting.
pub const FLOPS_PER_INTERACTION: f64 = 133.0;

/// Relative L2 difference ‖a − b‖/‖b‖ over vectors.
fn rel_l2(a: &[[f64; 3]], b: &[[f64; 3]]) -> f64 {
    let (mut e, mut n) = (0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        for c in 0..3 {
            e += (x[c] - y[c]).powi(2);
            n += y[c] * y[c];
        }
    }
    (e / n).sqrt()
}

/// Times the GPU all-pairs kernels (f32) on n particles uniform in [−π, π]^3 with σ = 2π/n^{1/3}
/// and random strengths (fresh for each size): velocity, and velocity + classical stretching.
/// Accuracy against the CPU f64 evaluator on the first `sample` targets (0: not checked).
/// `configs` are launch configurations to compare (the first is reported as the default when
/// empty); `dump` writes the compiled cubins and NVRTC logs there.
pub fn bench_kernel(
    sizes: &[usize],
    repeats: usize,
    sample: usize,
    configs: &[crate::cuda::biot_savart::KernelConfig],
    json: Option<&Path>,
    dump: Option<&Path>,
) -> Result<Vec<KernelBenchRow>> {
    use crate::cuda::biot_savart::{AllPairs, KernelConfig, Mode};
    use crate::kernel::StretchingScheme;
    use crate::summation::direct::DirectFreeSpace;
    use crate::summation::{Evaluation, Extra, Sources, Summation};
    use rand::{Rng, SeedableRng};
    let gpu = crate::cuda::gpu()
        .map_err(|e| anyhow::anyhow!("vpm bench kernel needs a CUDA GPU: {e}"))?;
    let info = gpu.info().clone();
    let configs: Vec<KernelConfig> = if configs.is_empty() {
        vec![KernelConfig::default()]
    } else {
        configs.to_vec()
    };
    let mut engines = Vec::new();
    for &c in &configs {
        engines.push(AllPairs::<f32>::new(c)?);
    }
    println!(
        "vpm bench kernel (GPU all-pairs, f32): {info}; CUDA events, median of {repeats} after \
         warm-up; accuracy vs CPU f64 on {sample} targets ({} CPU threads)",
        rayon::current_num_threads()
    );
    let mut resources = Vec::new();
    for e in &engines {
        let r = e.resources()?;
        for k in &r {
            println!(
                "  {} {}: {} registers, {} B local (spills/stack), {} B shared, {} blocks/SM",
                e.config(),
                k.kernel,
                k.registers,
                k.local_bytes,
                k.static_shared_bytes,
                k.blocks_per_sm
            );
        }
        resources.push(serde_json::json!({ "config": e.config().to_string(), "kernels": r }));
    }
    if let Some(dir) = dump {
        std::fs::create_dir_all(dir)?;
        for (i, (name, m)) in gpu.compiled_modules().iter().enumerate() {
            std::fs::write(dir.join(format!("module{i}.cubin")), &m.cubin)?;
            std::fs::write(
                dir.join(format!("module{i}.log")),
                format!("{name}\n{:?}\n{}", m.options, m.log),
            )?;
        }
        println!("wrote cubins and NVRTC logs to {}", dir.display());
    }
    println!(
        "{:>9} {:>28} {:>10} {:>10} {:>10} {:>10} {:>9} {:>10} {:>10}",
        "N",
        "config",
        "ms vel",
        "G/s vel",
        "ms vel+str",
        "G/s v+s",
        "TFLOP/s",
        "relL2 vel",
        "relL2 str"
    );
    let mut rows = Vec::new();
    for &n in sizes {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x6b65_726e ^ n as u64);
        let sigma = std::f64::consts::TAU / (n as f64).cbrt();
        let pi = std::f64::consts::PI;
        let x: Vec<[f64; 3]> = (0..n)
            .map(|_| std::array::from_fn(|_| rng.random_range(-pi..pi)))
            .collect();
        let alpha: Vec<[f64; 3]> = (0..n)
            .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
            .collect();
        let sig = vec![sigma; n];
        let src = Sources {
            x: &x,
            alpha: &alpha,
            sigma: &sig,
        };
        let ns = sample.min(n);
        let reference = if ns > 0 {
            let mut r = Evaluation::default();
            DirectFreeSpace.evaluate(
                &src,
                &x[..ns],
                Extra::Stretching {
                    alpha: &alpha[..ns],
                    scheme: StretchingScheme::Classical,
                },
                &mut r,
            )?;
            Some(r)
        } else {
            None
        };
        for e in engines.iter_mut() {
            e.upload_sources(&src)?;
            e.upload_targets(&x, Some(&alpha))?;
            let tv = median(e.time_launches(Mode::Velocity, repeats)?);
            let vel: Vec<[f64; 3]> = e.last_output()[..3 * ns]
                .chunks_exact(3)
                .map(|w| [w[0] as f64, w[1] as f64, w[2] as f64])
                .collect();
            let ts = median(e.time_launches(Mode::Classical, repeats)?);
            let st: Vec<[f64; 3]> = e.last_output()[..6 * ns]
                .chunks_exact(6)
                .map(|w| [w[3] as f64, w[4] as f64, w[5] as f64])
                .collect();
            let (ev, es) = match &reference {
                Some(r) => (
                    Some(rel_l2(&vel, &r.velocity)),
                    Some(rel_l2(&st, &r.stretching)),
                ),
                None => (None, None),
            };
            let pairs = (n as f64) * (n as f64);
            let gv = pairs / (tv * 1e-3) / 1e9;
            let gs = pairs / (ts * 1e-3) / 1e9;
            let row = KernelBenchRow {
                n,
                config: e.config().to_string(),
                ms_velocity: tv,
                ms_velocity_stretching: ts,
                ginteractions_per_s_velocity: gv,
                ginteractions_per_s_velocity_stretching: gs,
                tflops_equivalent_velocity_stretching: gs * FLOPS_PER_INTERACTION / 1e3,
                rel_l2_velocity: ev,
                rel_l2_stretching: es,
                accuracy_sample: ns,
                repeats,
            };
            let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2e}"));
            println!(
                "{:>9} {:>28} {:>10.3} {:>10.1} {:>10.3} {:>10.1} {:>9.1} {:>10} {:>10}",
                n,
                row.config,
                tv,
                gv,
                ts,
                gs,
                row.tflops_equivalent_velocity_stretching,
                fmt(ev),
                fmt(es)
            );
            rows.push(row);
        }
    }
    if let Some(path) = json {
        let report = serde_json::json!({
            "benchmark": "kernel",
            "gpu": info,
            "precision": "f32",
            "timing": "CUDA events around the kernel launches, median after one warm-up",
            "flops_per_interaction": FLOPS_PER_INTERACTION,
            "cpu": cpu_model(),
            "threads": rayon::current_num_threads(),
            "vpm_version": env!("CARGO_PKG_VERSION"),
            "resources": resources,
            "rows": rows,
        });
        write_atomic(path, serde_json::to_string_pretty(&report)?.as_bytes())?;
        println!("wrote {}", path.display());
    }
    Ok(rows)
}

/// One row of `vpm bench ewald --backend cuda`.
#[derive(Debug, Clone, Serialize)]
pub struct EwaldGpuBenchRow {
    /// Particles (an n^3 lattice).
    pub particles: usize,
    pub accuracy: f64,
    /// Median device milliseconds of one velocity evaluation (CUDA events from the first upload
    /// to the end of the download: everything the trait call does on the GPU).
    pub ms_velocity: f64,
    /// The same for velocity + classical stretching.
    pub ms_velocity_stretching: f64,
    /// Median wall-clock milliseconds of the trait call (host work and checks included).
    pub wall_ms_velocity: f64,
    pub wall_ms_velocity_stretching: f64,
    /// Particles per second (targets = sources) from the device times.
    pub particles_per_second_velocity: f64,
    pub particles_per_second_velocity_stretching: f64,
    /// Device milliseconds per phase of the median velocity + stretching evaluation.
    pub phases_velocity_stretching: crate::cuda::ewald::GpuEwaldTimings,
    /// Relative L2 difference from the CPU f64 evaluator (same accuracy) on the sampled
    /// particles, or null when not checked.
    pub rel_l2_velocity: Option<f64>,
    pub rel_l2_stretching: Option<f64>,
    /// Particles in the accuracy sample (evenly strided).
    pub accuracy_sample: usize,
    pub parameters: String,
    pub repeats: usize,
}

/// Times the GPU periodic Ewald evaluator on lattice particles (σ = h, random zero-sum
/// strengths, fresh for each size; the layout of `vpm bench ewald` on the CPU), velocity and
/// velocity + classical stretching, CUDA events, median of `repeats` after one warm-up. Accuracy
/// against the CPU f64 evaluator on `sample` particles (0: not checked).
pub fn bench_ewald_gpu(
    lattice: &[usize],
    accuracy: f64,
    repeats: usize,
    sample: usize,
    json: Option<&Path>,
) -> Result<Vec<EwaldGpuBenchRow>> {
    use crate::kernel::StretchingScheme;
    use crate::summation::cuda_ewald::CudaEwald;
    use crate::summation::ewald::EwaldPeriodic;
    use crate::summation::{Evaluation, Extra, Sources, Summation};
    use crate::vortex::lattice_nodes;
    use rand::{Rng, SeedableRng};
    let mut ew = CudaEwald::new(accuracy)?;
    let info = ew.device().gpu().info().clone();
    println!(
        "vpm bench ewald (GPU, f32, accuracy {accuracy:e}): {info}; CUDA events, median of \
         {repeats} after warm-up; accuracy vs CPU f64 on {sample} particles ({} CPU threads)",
        rayon::current_num_threads()
    );
    println!(
        "{:>10} {:>5} {:>3} {:>9} {:>14} {:>9} {:>16} {:>10} {:>10}",
        "particles",
        "M",
        "P",
        "ms vel",
        "particles/s",
        "ms v+s",
        "particles/s v+s",
        "err vel",
        "err str"
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
        let stretching = Extra::Stretching {
            alpha: &alpha,
            scheme: StretchingScheme::Classical,
        };
        let mut out = Evaluation::default();
        let mut time = |extra: Extra| -> Result<(f64, f64, crate::cuda::ewald::GpuEwaldTimings)> {
            ew.evaluate(&src, &x, extra, &mut out)?; // warm-up: compile, plans, buffers
            let mut runs = Vec::with_capacity(repeats.max(1));
            for _ in 0..repeats.max(1) {
                let t = Instant::now();
                ew.evaluate(&src, &x, extra, &mut out)?;
                let wall = t.elapsed().as_secs_f64() * 1e3;
                let phases = ew.timings();
                runs.push((phases.total_ms(), wall, phases));
            }
            runs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let walls = median(runs.iter().map(|r| r.1).collect());
            let mid = runs[runs.len() / 2];
            Ok((mid.0, walls, mid.2))
        };
        let (tv, wv, _) = time(Extra::None)?;
        let (ts, ws, phases) = time(stretching)?;
        let params = ew.parameters().map_or(String::new(), |p| p.to_string());
        let (grid, support) = ew.parameters().map_or((0, 0), |p| (p.grid, p.support));
        // Accuracy on an evenly strided sample (the output of the last timed call).
        let ns = sample.min(x.len());
        let (ev, es) = if let Some(stride) = x.len().checked_div(ns) {
            let idx: Vec<usize> = (0..ns).map(|k| k * stride).collect();
            let tx: Vec<[f64; 3]> = idx.iter().map(|&i| x[i]).collect();
            let ta: Vec<[f64; 3]> = idx.iter().map(|&i| alpha[i]).collect();
            let mut r = Evaluation::default();
            EwaldPeriodic::new(accuracy).evaluate(
                &src,
                &tx,
                Extra::Stretching {
                    alpha: &ta,
                    scheme: StretchingScheme::Classical,
                },
                &mut r,
            )?;
            let gv: Vec<[f64; 3]> = idx.iter().map(|&i| out.velocity[i]).collect();
            let gs: Vec<[f64; 3]> = idx.iter().map(|&i| out.stretching[i]).collect();
            (
                Some(rel_l2(&gv, &r.velocity)),
                Some(rel_l2(&gs, &r.stretching)),
            )
        } else {
            (None, None)
        };
        let row = EwaldGpuBenchRow {
            particles: x.len(),
            accuracy,
            ms_velocity: tv,
            ms_velocity_stretching: ts,
            wall_ms_velocity: wv,
            wall_ms_velocity_stretching: ws,
            particles_per_second_velocity: np / (tv * 1e-3),
            particles_per_second_velocity_stretching: np / (ts * 1e-3),
            phases_velocity_stretching: phases,
            rel_l2_velocity: ev,
            rel_l2_stretching: es,
            accuracy_sample: ns,
            parameters: params,
            repeats,
        };
        let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2e}"));
        println!(
            "{:>10} {:>5} {:>3} {:>9.2} {:>14.3e} {:>9.2} {:>16.3e} {:>10} {:>10}",
            row.particles,
            grid,
            support,
            tv,
            row.particles_per_second_velocity,
            ts,
            row.particles_per_second_velocity_stretching,
            fmt(ev),
            fmt(es)
        );
        println!(
            "           v+s phases (ms): upload {:.2}, sort+spread {:.2}, FFTs {:.2}, gather {:.2}, \
             real space {:.2}, download {:.2}; wall {:.1} ms (vel {:.1} ms); {}",
            phases.upload_ms,
            phases.spread_ms,
            phases.transforms_ms,
            phases.gather_ms,
            phases.real_space_ms,
            phases.download_ms,
            ws,
            wv,
            row.parameters
        );
        rows.push(row);
    }
    if let Some(path) = json {
        let report = serde_json::json!({
            "benchmark": "ewald",
            "backend": "cuda",
            "gpu": info,
            "precision": "f32 sums, f64 inputs and outputs",
            "timing": "CUDA events from the first upload to the end of the download, median \
                       after one warm-up",
            "cpu": cpu_model(),
            "threads": rayon::current_num_threads(),
            "vpm_version": env!("CARGO_PKG_VERSION"),
            "rows": rows,
        });
        write_atomic(path, serde_json::to_string_pretty(&report)?.as_bytes())?;
        println!("wrote {}", path.display());
    }
    Ok(rows)
}
