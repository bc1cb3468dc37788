//! The FMM on the GPU (kernels/fmm.cu, src/summation/fmm/cuda.rs) against the f64 direct sum and
//! the CPU FMM: uniform, clustered (Plummer-like) and thin-ring sets, targets at the sources and
//! on cell faces, velocity, both stretching schemes and the gradient; determinism; the accuracy
//! floor. Skipped (with the reason printed) without a GPU.

use vpm::kernel::StretchingScheme;
use vpm::summation::direct::DirectFreeSpace;
use vpm::summation::fmm::{plan_parameters, CudaFmm, Fmm, FmmBackend, FmmFreeSpace};
use vpm::summation::verify::{self, errors_on_sample, gpu_or_skip, poisoned, Particles};
use vpm::summation::{Evaluation, Extra, Summation};

#[test]
fn gpu_fmm_meets_the_requested_accuracy_on_three_sets() {
    let Some(gpu) = gpu_or_skip() else { return };
    let sets = verify::fmm_sets(6000);
    for accuracy in [1e-4, 5e-5] {
        let mut fmm = CudaFmm::new(gpu.clone(), accuracy, 0).unwrap();
        fmm.disable_checks();
        for (name, p) in &sets {
            verify::check_free_space_accuracy(&mut fmm, (name, p), 800, accuracy).unwrap();
        }
    }
}

/// The GPU (f32 near field) and the CPU (f64) with the same parameters agree to f32 rounding;
/// two GPU runs are bit-identical; the outputs are fully written (poisoned before).
#[test]
fn gpu_fmm_matches_cpu_fmm_and_is_deterministic() {
    let Some(gpu) = gpu_or_skip() else { return };
    let p = Particles::plummer(20000, 0.5, 0.02, 4);
    let params = plan_parameters(5e-5, FmmBackend::Cuda).unwrap();
    let mut g = CudaFmm::with_params(gpu, params, 0).unwrap();
    g.disable_checks();
    let mut c = FmmFreeSpace::with_params(params, 0);
    c.disable_checks();
    let extra = Extra::Stretching {
        alpha: &p.alpha,
        scheme: StretchingScheme::Classical,
    };
    let (mut a, mut b, mut r) = (poisoned(p.len()), poisoned(p.len()), Evaluation::default());
    g.evaluate(&p.sources(), &p.x, extra, &mut a).unwrap();
    g.evaluate(&p.sources(), &p.x, extra, &mut b).unwrap();
    assert!(
        a.velocity == b.velocity && a.stretching == b.stretching,
        "not deterministic"
    );
    c.evaluate(&p.sources(), &p.x, extra, &mut r).unwrap();
    let ev = verify::rel_l2(&a.velocity, &r.velocity);
    let es = verify::rel_l2(&a.stretching, &r.stretching);
    println!(
        "GPU vs CPU FMM: velocity {ev:.2e}, stretching {es:.2e}; {:?}",
        g.last_stats()
    );
    assert!(ev < 2e-6 && es < 1e-5, "{ev:e} {es:e}");
}

/// A larger uniform set (2e5) checked on a sample against the direct sum, and the built-in check.
#[test]
fn gpu_fmm_large_uniform_set_on_a_sample() {
    let Some(gpu) = gpu_or_skip() else { return };
    let p = Particles::free_space(200_000, 5);
    let mut fmm = CudaFmm::new(gpu, 1e-4, 0).unwrap();
    let extra = Extra::Stretching {
        alpha: &p.alpha,
        scheme: StretchingScheme::Transposed,
    };
    let mut out = poisoned(p.len());
    fmm.evaluate(&p.sources(), &p.x, extra, &mut out).unwrap();
    let checks = fmm.take_accuracy_checks();
    assert_eq!(checks.len(), 1);
    println!("{}", checks[0]);
    let idx = verify::sample(p.len(), 300, 6);
    let e = errors_on_sample(&out, &mut DirectFreeSpace, &p.sources(), &p.x, extra, &idx).unwrap();
    println!("{e:?}; {:?}", fmm.last_stats());
    assert!(
        e.velocity.rel_l2 <= 1e-4 && e.extra.unwrap().rel_l2 <= 1e-4,
        "{e:?}"
    );
}

/// Accuracies the f32 near field cannot deliver are refused at planning, naming the reason.
#[test]
fn gpu_fmm_refuses_accuracies_below_its_floor() {
    let Some(gpu) = gpu_or_skip() else { return };
    let e = CudaFmm::new(gpu, 1e-5, 0).err().unwrap().to_string();
    assert!(e.contains("f32") && e.contains("5e-5"), "{e}");
}

/// The device form (resident particles, results in device buffers) gives the host form's bits
/// for velocity, both stretching schemes and the gradient.
#[test]
fn gpu_fmm_device_form_matches_host_form() {
    let Some(gpu) = gpu_or_skip() else { return };
    let p = Particles::plummer(20000, 0.5, 0.02, 8);
    let mut fmm = CudaFmm::new(gpu, 1e-4, 0).unwrap();
    fmm.disable_checks();
    for (_, extra) in verify::all_extras(&p.alpha) {
        let (ev, ex) = verify::device_against_host(&mut fmm, &p, extra).unwrap();
        assert!(ev == 0.0 && ex == 0.0, "{extra:?}: {ev:e} {ex:e}");
    }
}

/// Without a GPU, this binary's skipping tests, run by a plain harness (output captured), still
/// show the reason on the standard error, once.
#[test]
fn skip_reason_shows_once_under_a_capturing_harness() {
    if vpm::cuda::availability().is_ok() {
        return; // the GPU tests run here
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["gpu_fmm_", "--test-threads", "2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("GPU tests skipped, no usable GPU"))
        .collect();
    assert_eq!(lines.len(), 1, "stderr:\n{stderr}");
    assert!(lines[0].starts_with("gpu_fmm: "), "{}", lines[0]);
}
