//! `vpm bench kernel`: the GPU all-pairs kernels (f32) on the GPU given, CUDA events, with an
//! accuracy check against the CPU f64 evaluator on a random sample of targets.

use super::{finish_report, fmt_error, median, print_header, SampleCheck};
use crate::device::cuda::Gpu;
use crate::kernel::StretchingScheme;
use crate::summation::direct::tiles::KernelResources;
use crate::summation::direct::{AllPairs, DirectFreeSpace, KernelConfig, Mode};
use crate::summation::verify::Particles;
use crate::summation::{Evaluation, Extra};
use anyhow::Result;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;

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
    /// Against the CPU f64 evaluator on a random sample of the targets (the velocity of the
    /// velocity kernel, the stretching of the velocity + stretching kernel).
    #[serde(flatten)]
    pub check: SampleCheck,
    pub repeats: usize,
}

/// Prints the registers, local memory, shared memory and occupancy of each kernel compiled for
/// `config`; returns them as JSON for the report.
pub(crate) fn report_resources(
    config: KernelConfig,
    kernels: &[KernelResources],
) -> serde_json::Value {
    for k in kernels {
        crate::out!(
            "  {} {}: {} registers, {} B local (spills/stack), {} B shared, {} blocks/SM",
            config,
            k.kernel,
            k.registers,
            k.local_bytes,
            k.static_shared_bytes,
            k.blocks_per_sm
        );
    }
    serde_json::json!({ "config": config.to_string(), "kernels": kernels })
}

/// Tuning: writes the cubins and NVRTC logs of every module compiled on `gpu` into `dir`.
pub(crate) fn dump_modules(gpu: &Gpu, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for (i, (name, m)) in gpu.compiled_modules().iter().enumerate() {
        std::fs::write(dir.join(format!("module{i}.cubin")), &m.cubin)?;
        std::fs::write(
            dir.join(format!("module{i}.log")),
            format!("{name}\n{:?}\n{}", m.options, m.log),
        )?;
    }
    crate::out!("wrote cubins and NVRTC logs to {}", dir.display());
    Ok(())
}

/// Flops per velocity + stretching interaction in the seed's accounting.
pub const FLOPS_PER_INTERACTION: f64 = 133.0;

/// Times the GPU all-pairs kernels (f32) on `gpu` on n particles uniform in [−π, π]^3 with σ = 2π/n^{1/3}
/// and random strengths (fresh for each size): velocity, and velocity + classical stretching.
/// Accuracy against the CPU f64 evaluator on the first `sample` targets (0: not checked).
/// `configs` are launch configurations to compare (the first is reported as the default when
/// empty); `dump` writes the compiled cubins and NVRTC logs there.
pub fn bench_kernel(
    gpu: &Arc<Gpu>,
    sizes: &[usize],
    repeats: usize,
    sample: usize,
    configs: &[KernelConfig],
    json: Option<&Path>,
    dump: Option<&Path>,
) -> Result<Vec<KernelBenchRow>> {
    let info = gpu.info().clone();
    let configs: Vec<KernelConfig> = if configs.is_empty() {
        vec![KernelConfig::default()]
    } else {
        configs.to_vec()
    };
    let mut engines = Vec::new();
    for &c in &configs {
        engines.push(AllPairs::<f32>::new(gpu.clone(), c)?);
    }
    crate::out!(
        "vpm bench kernel (GPU all-pairs, f32): {info}; CUDA events, median of {repeats} after \
         warm-up; accuracy vs CPU f64 on {sample} targets ({} CPU threads)",
        rayon::current_num_threads()
    );
    let mut resources = Vec::new();
    for e in &engines {
        resources.push(report_resources(e.config(), &e.resources()?));
    }
    if let Some(dir) = dump {
        dump_modules(gpu, dir)?;
    }
    print_header(
        "N|config|ms vel|G/s vel|ms vel+str|G/s v+s|TFLOP/s|relL2 vel|relL2 str",
        &[9, 28, 10, 10, 10, 10, 9, 10, 10],
    );
    let mut rows = Vec::new();
    for &n in sizes {
        let p = Particles::free_space(n, 0x6b65_726e ^ n as u64);
        let (x, alpha) = (&p.x, &p.alpha);
        let src = p.sources();
        let stretching = Extra::Stretching {
            alpha,
            scheme: StretchingScheme::Classical,
        };
        for e in engines.iter_mut() {
            e.upload_sources(&src)?;
            e.upload_targets(x, Some(alpha))?;
            // Both timed launches write all n targets; the sampled outputs are compared.
            let mut out = Evaluation::default();
            out.resize_for(n, &stretching);
            let tv = median(e.time_launches(Mode::Velocity, repeats)?);
            for (i, w) in e.last_output().chunks_exact(3).enumerate() {
                out.velocity[i] = [w[0] as f64, w[1] as f64, w[2] as f64];
            }
            let ts = median(e.time_launches(Mode::Classical, repeats)?);
            for (i, w) in e.last_output().chunks_exact(6).enumerate() {
                out.stretching[i] = [w[3] as f64, w[4] as f64, w[5] as f64];
            }
            // The accuracy sample: random targets, the CPU f64 reference at them only.
            let seed = 0x5a3b1e ^ n as u64;
            let (check, _) =
                SampleCheck::of_particles(&out, &mut DirectFreeSpace, &p, (sample, seed))?;
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
                check,
                repeats,
            };
            crate::out!(
                "{:>9} {:>28} {:>10.3} {:>10.1} {:>10.3} {:>10.1} {:>9.1} {:>10} {:>10}",
                n,
                row.config,
                tv,
                gv,
                ts,
                gs,
                row.tflops_equivalent_velocity_stretching,
                fmt_error(check.rel_l2_velocity),
                fmt_error(check.rel_l2_stretching)
            );
            rows.push(row);
        }
    }
    finish_report(
        json,
        serde_json::json!({
            "benchmark": "kernel",
            "gpu": info,
            "precision": "f32",
            "timing": "CUDA events around the kernel launches, median after one warm-up",
            "flops_per_interaction": FLOPS_PER_INTERACTION,
            "resources": resources,
        }),
        rows,
    )
}
