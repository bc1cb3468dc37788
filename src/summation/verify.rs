//! Verification of evaluators (in the spirit of exafmm's `verify`): seeded particle fixtures in
//! the periodic box or in free space, and the error of an evaluator's velocity, stretching or
//! gradient against a reference evaluator, over all targets or a random sample of them.
//!
//! Errors follow docs/physics.md §8: the relative L2 error √(Σ|u − u_ref|² / Σ|u_ref|²) over the
//! targets (all components), and the maximum of |u − u_ref| (largest component difference)
//! over the rms of u_ref, where cell-boundary artefacts show. Used by the tests (`tests/ewald.rs`,
//! `tests/fmm.rs`, `tests/gpu*.rs`), by the FMM's built-in check ([`super::fmm::check`]) and by
//! `vpm bench`.

use super::{Evaluation, Extra, Sources, Summation, SummationError};
use crate::kernel::StretchingScheme;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::f64::consts::{PI, TAU};

/// GPU 0 when it is usable; otherwise `None`, so GPU tests pass on machines without one, after
/// saying so: "`test`: skipped, no usable GPU: reason" (captured by the test harness; the test
/// is named by its thread, as the harness names it), and once per process "`binary`: GPU tests
/// skipped, no usable GPU: reason" written straight to the standard error, which the harness
/// does not capture, so a plain `cargo test` shows it. Both hold the words
/// scripts/gpu-check.sh looks for on a GPU machine.
pub fn gpu_or_skip() -> Option<std::sync::Arc<crate::device::cuda::Gpu>> {
    static SAID: std::sync::Once = std::sync::Once::new();
    match crate::device::cuda::gpu_at(0) {
        Ok(g) => Some(g),
        Err(e) => {
            let thread = std::thread::current();
            let test = thread
                .name()
                .filter(|&n| n != "main")
                .unwrap_or("a GPU test");
            eprintln!("{test}: skipped, no usable GPU: {e}");
            SAID.call_once(|| {
                let exe = std::env::current_exe().unwrap_or_default();
                let stem = exe.file_stem().unwrap_or_default().to_string_lossy();
                // A test binary is named `name-<hash>`.
                let binary = stem.rsplit_once('-').map_or(&*stem, |(name, _)| name);
                let line = format!("{binary}: GPU tests skipped, no usable GPU: {e}\n");
                // Not eprintln!, which the harness captures: a direct write is not.
                let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            });
            None
        }
    }
}

/// Particles owned by a fixture: positions, strengths, core radii.
#[derive(Debug, Clone, Default)]
pub struct Particles {
    pub x: Vec<[f64; 3]>,
    pub alpha: Vec<[f64; 3]>,
    pub sigma: Vec<f64>,
}

impl Particles {
    pub fn sources(&self) -> Sources<'_> {
        Sources {
            x: &self.x,
            alpha: &self.alpha,
            sigma: &self.sigma,
        }
    }

    pub fn len(&self) -> usize {
        self.x.len()
    }

    pub fn is_empty(&self) -> bool {
        self.x.is_empty()
    }

    /// `n` particles uniform in [−`spread`·π, `spread`·π)³ (spread > 1 puts some outside the box:
    /// the periodic evaluators wrap them), strengths uniform in [−1, 1]³ with the mean removed
    /// (Σα = 0, as the periodic velocity needs, docs/physics.md §4), cores uniform in [smin, smax].
    /// Draws, in order: all positions, all strengths, all cores.
    pub fn random_in_box(n: usize, spread: f64, smin: f64, smax: f64, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let x = uniform_points(&mut rng, n, spread * PI);
        let mut alpha: Vec<[f64; 3]> = (0..n)
            .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
            .collect();
        remove_mean(&mut alpha);
        let sigma = (0..n).map(|_| rng.random_range(smin..=smax)).collect();
        Particles { x, alpha, sigma }
    }

    /// The n³ lattice of [`super::lattice::lattice_nodes`] with σ = h = 2π/n, positions moved by
    /// up to `jitter`·h per coordinate (no draws when `jitter` is 0), strengths uniform in
    /// [−h³, h³]³ with the mean removed: the layout of a vortex run in the box.
    pub fn lattice(n: usize, jitter: f64, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let h = TAU / n as f64;
        let mut x = super::lattice::lattice_nodes(n);
        if jitter != 0.0 {
            for p in &mut x {
                *p = p.map(|v| v + jitter * h * rng.random_range(-1.0..1.0));
            }
        }
        let mut alpha: Vec<[f64; 3]> = (0..x.len())
            .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0) * h * h * h))
            .collect();
        remove_mean(&mut alpha);
        let sigma = vec![h; x.len()];
        Particles { x, alpha, sigma }
    }

    /// `n` particles uniform in [−π, π)³ in free space, strengths uniform in [−1, 1]³ (no mean
    /// removed), equal cores σ = 2π/n^{1/3} (about one spacing): the benchmarks' layout.
    pub fn free_space(n: usize, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let x = uniform_points(&mut rng, n, PI);
        let alpha = (0..n)
            .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
            .collect();
        let sigma = vec![TAU / (n.max(1) as f64).cbrt(); n];
        Particles { x, alpha, sigma }
    }

    /// A Plummer-like cluster (the FMM's clustered set): density ∝ (1 + r²/a²)^{−5/2} truncated
    /// at 8a, strengths uniform in [−1, 1]³, equal cores `sigma`.
    pub fn plummer(n: usize, a: f64, sigma: f64, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut x = Vec::with_capacity(n);
        while x.len() < n {
            let u: f64 = rng.random_range(1e-6..1.0);
            let r = a / (u.powf(-2.0 / 3.0) - 1.0).sqrt();
            if r > 8.0 * a {
                continue;
            }
            let z: f64 = rng.random_range(-1.0..1.0);
            let phi: f64 = rng.random_range(0.0..TAU);
            let s = (1.0 - z * z).sqrt();
            x.push([r * s * phi.cos(), r * s * phi.sin(), r * z]);
        }
        let alpha = (0..n)
            .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
            .collect();
        Particles {
            x,
            alpha,
            sigma: vec![sigma; n],
        }
    }

    /// A thin ring (the FMM's sheet-like set): radius 1 about the z axis, particles within 0.05
    /// of the centre line, azimuthal strengths of total circulation about 1, cores 0.02.
    pub fn thin_ring(n: usize, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let w = TAU / n.max(1) as f64;
        let mut x = Vec::with_capacity(n);
        let mut alpha = Vec::with_capacity(n);
        for _ in 0..n {
            let th: f64 = rng.random_range(0.0..TAU);
            let (dr, dz): (f64, f64) =
                (rng.random_range(-0.05..0.05), rng.random_range(-0.05..0.05));
            x.push([(1.0 + dr) * th.cos(), (1.0 + dr) * th.sin(), dz]);
            alpha.push([-th.sin() * w, th.cos() * w, 0.0]);
        }
        Particles {
            x,
            alpha,
            sigma: vec![0.02; n],
        }
    }
}

/// `count` targets on cell faces of an octree over `p` (the bounding cube's mid-planes and the
/// planes of its level-2 and level-3 subdivisions), elsewhere uniform over 90 % of the cube:
/// where cell-boundary artefacts of a tree method would show.
pub fn cell_face_targets(p: &Particles, count: usize, seed: u64) -> Vec<[f64; 3]> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut lo, mut hi) = ([f64::INFINITY; 3], [f64::NEG_INFINITY; 3]);
    for q in &p.x {
        for k in 0..3 {
            lo[k] = lo[k].min(q[k]);
            hi[k] = hi[k].max(q[k]);
        }
    }
    let c: [f64; 3] = std::array::from_fn(|k| 0.5 * (lo[k] + hi[k]));
    let half = (0..3).map(|k| hi[k] - lo[k]).fold(0.0f64, f64::max) * 0.5;
    (0..count)
        .map(|i| {
            let mut t: [f64; 3] =
                std::array::from_fn(|k| c[k] + half * rng.random_range(-0.9..0.9));
            let cells = 1usize << (1 + i % 3);
            let j = rng.random_range(1..cells);
            let k = i % 3;
            t[k] = c[k] - half + 2.0 * half * j as f64 / cells as f64;
            t
        })
        .collect()
}

/// `n` points uniform in [−π, π)³.
pub fn random_points(n: usize, seed: u64) -> Vec<[f64; 3]> {
    uniform_points(&mut ChaCha8Rng::seed_from_u64(seed), n, PI)
}

fn uniform_points(rng: &mut ChaCha8Rng, n: usize, half: f64) -> Vec<[f64; 3]> {
    (0..n)
        .map(|_| std::array::from_fn(|_| rng.random_range(-half..half)))
        .collect()
}

/// Subtracts the mean vector.
pub fn remove_mean(v: &mut [[f64; 3]]) {
    let n = v.len() as f64;
    let mean: [f64; 3] = std::array::from_fn(|c| v.iter().map(|a| a[c]).sum::<f64>() / n);
    for a in v {
        for c in 0..3 {
            a[c] -= mean[c];
        }
    }
}

/// `count` distinct indices of 0..n drawn at random (seeded), in increasing order; all of them
/// when count ≥ n.
pub fn sample(n: usize, count: usize, seed: u64) -> Vec<usize> {
    if count >= n {
        return (0..n).collect();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut idx: Vec<usize> = (0..n).collect();
    for k in 0..count {
        let j = rng.random_range(k..n);
        idx.swap(k, j);
    }
    idx.truncate(count);
    idx.sort_unstable();
    idx
}

/// Relative L2 difference ‖a − b‖/‖b‖ over all components.
pub fn rel_l2<const K: usize>(a: &[[f64; K]], b: &[[f64; K]]) -> f64 {
    assert_eq!(a.len(), b.len(), "rel_l2 of different lengths");
    let (mut e, mut n) = (0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        for k in 0..K {
            e += (x[k] - y[k]).powi(2);
            n += y[k] * y[k];
        }
    }
    (e / n).sqrt()
}

/// Largest component difference max |a − b| over the rms component of b.
pub fn max_rel<const K: usize>(a: &[[f64; K]], b: &[[f64; K]]) -> f64 {
    assert_eq!(a.len(), b.len(), "max_rel of different lengths");
    let (mut worst, mut n) = (0.0f64, 0.0);
    for (x, y) in a.iter().zip(b) {
        for k in 0..K {
            worst = worst.max((x[k] - y[k]).abs());
            n += y[k] * y[k];
        }
    }
    let rms = (n / (K * a.len().max(1)) as f64).sqrt();
    worst / rms
}

/// Row-major flattening of 3×3 gradients (for [`rel_l2`]).
pub fn flat9(g: &[[[f64; 3]; 3]]) -> Vec<[f64; 9]> {
    g.iter()
        .map(|m| std::array::from_fn(|k| m[k / 3][k % 3]))
        .collect()
}

/// Whether every value is finite (a GPU output fully written: its buffers are poisoned with NaN).
pub fn all_finite<const K: usize>(v: &[[f64; K]]) -> bool {
    v.iter().flatten().all(|x| x.is_finite())
}

/// Host outputs full of NaN for `n` targets, so a missing write shows.
pub fn poisoned(n: usize) -> Evaluation {
    Evaluation {
        velocity: vec![[f64::NAN; 3]; n],
        stretching: vec![[f64::NAN; 3]; n],
        gradient: vec![[[f64::NAN; 3]; 3]; n],
    }
}

/// Relative L2 and maximum error of one quantity.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct ErrorStats {
    pub rel_l2: f64,
    pub max_rel: f64,
}

impl ErrorStats {
    pub fn of<const K: usize>(a: &[[f64; K]], b: &[[f64; K]]) -> Self {
        ErrorStats {
            rel_l2: rel_l2(a, b),
            max_rel: max_rel(a, b),
        }
    }

    /// Whether the relative L2 error is within `accuracy` and the largest within
    /// `max_factor` × `accuracy`.
    pub fn within(&self, accuracy: f64, max_factor: f64) -> bool {
        self.rel_l2 <= accuracy && self.max_rel <= max_factor * accuracy
    }
}

/// Errors of one evaluation: the velocity and, when asked, the stretching or the gradient.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Errors {
    pub velocity: ErrorStats,
    /// Stretching or gradient (whichever `extra` asked), `None` for velocity only.
    pub extra: Option<ErrorStats>,
}

/// Errors of `out` (a candidate's evaluation at all of `targets` with `extra`) on the sample of
/// targets listed in `idx` (indices into `targets`), against `reference` evaluated at those
/// targets only (the stretching strengths of `extra` taken at the same indices): how the
/// benchmarks check a large evaluation at the cost of a small one.
pub fn errors_on_sample(
    out: &Evaluation,
    reference: &mut dyn Summation,
    sources: &Sources,
    targets: &[[f64; 3]],
    extra: Extra,
    idx: &[usize],
) -> Result<Errors, SummationError> {
    let pick = |v: &[[f64; 3]]| -> Vec<[f64; 3]> { idx.iter().map(|&i| v[i]).collect() };
    let tx = pick(targets);
    let talpha;
    let sub_extra = match extra {
        Extra::Stretching { alpha, scheme } => {
            talpha = pick(alpha);
            Extra::Stretching {
                alpha: &talpha,
                scheme,
            }
        }
        e => e,
    };
    let mut r = Evaluation::default();
    reference.evaluate(sources, &tx, sub_extra, &mut r)?;
    let velocity = ErrorStats::of(&pick(&out.velocity), &r.velocity);
    let extra = match extra {
        Extra::None => None,
        Extra::Stretching { .. } => Some(ErrorStats::of(&pick(&out.stretching), &r.stretching)),
        Extra::Gradient => {
            let g: Vec<[[f64; 3]; 3]> = idx.iter().map(|&i| out.gradient[i]).collect();
            Some(ErrorStats::of(&flat9(&g), &flat9(&r.gradient)))
        }
    };
    Ok(Errors { velocity, extra })
}

/// Evaluates `candidate` and `reference` at all `targets` with `extra` and returns the
/// candidate's errors (the candidate's output starts poisoned; a value left unwritten is an
/// error).
pub fn compare(
    candidate: &mut dyn Summation,
    reference: &mut dyn Summation,
    sources: &Sources,
    targets: &[[f64; 3]],
    extra: Extra,
) -> Result<Errors, SummationError> {
    let mut out = poisoned(targets.len());
    candidate.evaluate(sources, targets, extra, &mut out)?;
    let written = all_finite(&out.velocity)
        && match extra {
            Extra::None => true,
            Extra::Stretching { .. } => all_finite(&out.stretching),
            Extra::Gradient => all_finite(&flat9(&out.gradient)),
        };
    if !written {
        return Err(SummationError::Device(format!(
            "{}: not every output value was written",
            candidate.name()
        )));
    }
    let all: Vec<usize> = (0..targets.len()).collect();
    errors_on_sample(&out, reference, sources, targets, extra, &all)
}

/// Everything an evaluator computes besides the velocity, with its name: nothing ("velocity"),
/// classical and transposed stretching of the target strengths `alpha`, the gradient.
pub fn all_extras(alpha: &[[f64; 3]]) -> [(&'static str, Extra<'_>); 4] {
    let stretching = |scheme| Extra::Stretching { alpha, scheme };
    [
        ("velocity", Extra::None),
        ("classical", stretching(StretchingScheme::Classical)),
        ("transposed", stretching(StretchingScheme::Transposed)),
        ("gradient", Extra::Gradient),
    ]
}

/// The FMM's test sets of `n` particles (seeds 1, 2, 3): uniform, clustered (Plummer-like) and
/// sheet-like (a thin ring).
pub fn fmm_sets(n: usize) -> [(&'static str, Particles); 3] {
    [
        ("uniform", Particles::free_space(n, 1)),
        ("plummer", Particles::plummer(n, 0.3, 0.01, 2)),
        ("ring", Particles::thin_ring(n, 3)),
    ]
}

/// `candidate` against the direct sum on the set `p` (named `name`), at its sources and at
/// `faces` targets on cell faces (target strengths the sources' in turn): `Err` with the
/// errors unless, for velocity, both stretching schemes and the gradient, the relative L2
/// error is within `accuracy` and the largest within 30× of it (docs/physics.md §8). Prints
/// the errors.
pub fn check_free_space_accuracy(
    candidate: &mut dyn Summation,
    (name, p): (&str, &Particles),
    faces: usize,
    accuracy: f64,
) -> Result<(), String> {
    for (where_, targets) in [
        ("sources", p.x.clone()),
        ("faces", cell_face_targets(p, faces, 9)),
    ] {
        let talpha: Vec<[f64; 3]> = (0..targets.len()).map(|i| p.alpha[i % p.len()]).collect();
        let direct = &mut super::direct::DirectFreeSpace;
        let (v, x, line) = compare_all_extras(candidate, direct, &p.sources(), &targets, &talpha)
            .map_err(|e| e.to_string())?;
        let line = format!("{name} {where_} {accuracy:e}: {line}");
        println!("{line}");
        if !(v.within(accuracy, 30.0) && x.within(accuracy, 30.0)) {
            return Err(line);
        }
    }
    Ok(())
}

/// `f` run on a pool of `threads` threads (for checks that results do not depend on the thread
/// count).
pub fn on_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool")
        .install(f)
}

/// The worst errors over velocity only, both stretching schemes (target strengths `talpha`) and
/// the gradient: (worst velocity, worst stretching/gradient), each the largest of the four
/// evaluations, and a line describing each.
pub fn compare_all_extras(
    candidate: &mut dyn Summation,
    reference: &mut dyn Summation,
    sources: &Sources,
    targets: &[[f64; 3]],
    talpha: &[[f64; 3]],
) -> Result<(ErrorStats, ErrorStats, String), SummationError> {
    let mut worst_v = ErrorStats::default();
    let mut worst_x = ErrorStats::default();
    let mut line = String::new();
    for (name, extra) in all_extras(talpha) {
        let e = compare(candidate, reference, sources, targets, extra)?;
        worst_v.rel_l2 = worst_v.rel_l2.max(e.velocity.rel_l2);
        worst_v.max_rel = worst_v.max_rel.max(e.velocity.max_rel);
        line += &format!("{name}: u {:.2e}", e.velocity.rel_l2);
        if let Some(x) = e.extra {
            worst_x.rel_l2 = worst_x.rel_l2.max(x.rel_l2);
            worst_x.max_rel = worst_x.max_rel.max(x.max_rel);
            line += &format!(" extra {:.2e}", x.rel_l2);
        }
        line += "; ";
    }
    Ok((worst_v, worst_x, line))
}

/// The device form of `evaluator` ([`Summation::device_form`]) against its host form on the same
/// particles, targets = sources, with `extra` (stretching of the particles' own strengths, the
/// gradient, or the velocity only): the largest absolute difference of the velocity and of the
/// extra over all components (0 when the two are bit-identical). The particles are copied to
/// the evaluator's GPU once, the device results back once (to compare). An error when the
/// evaluator has no device form.
pub fn device_against_host(
    evaluator: &mut dyn Summation,
    p: &Particles,
    extra: Extra,
) -> Result<(f64, f64), SummationError> {
    use super::{DeviceEvaluation, DeviceExtra, DeviceSources, DeviceTargets, DeviceWork};
    use crate::device::buffer::DeviceBuffer;
    let mut host = Evaluation::default();
    evaluator.evaluate(&p.sources(), &p.x, extra, &mut host)?;
    let name = evaluator.name();
    let dev = evaluator
        .device_form()
        .ok_or_else(|| SummationError::Unsupported(format!("{name} has no device form")))?;
    let gpu = dev.gpu().clone();
    let stream = gpu.stream().clone();
    let (mut x, mut alpha, mut sigma) = (
        DeviceBuffer::new(),
        DeviceBuffer::new(),
        DeviceBuffer::new(),
    );
    x.upload(&stream, p.x.as_flattened(), "positions")?;
    alpha.upload(&stream, p.alpha.as_flattened(), "strengths")?;
    sigma.upload(&stream, &p.sigma, "cores")?;
    let sigma_max = p.sigma.iter().cloned().fold(0.0, f64::max);
    let sources = DeviceSources {
        x: &x,
        alpha: &alpha,
        sigma: &sigma,
        n: p.len(),
        sigma_max,
        equal_cores: p.sigma.iter().all(|&s| s == sigma_max),
    };
    let dextra = match extra {
        Extra::None => DeviceExtra::None,
        Extra::Stretching { scheme, .. } => DeviceExtra::Stretching {
            alpha: None,
            scheme,
        },
        Extra::Gradient => DeviceExtra::Gradient,
    };
    let mut out = DeviceEvaluation::default();
    let work = DeviceWork {
        sources: &sources,
        targets: &DeviceTargets::Sources,
        extra: &dextra,
    };
    dev.evaluate_on_device(work, &mut out)?;
    let n = p.len();
    let mut u = vec![0.0; 3 * n];
    out.velocity.download(&gpu, &mut u, "velocity")?;
    let (ex_buf, ex_host): (_, Vec<f64>) = match extra {
        Extra::None => (None, Vec::new()),
        Extra::Stretching { .. } => (
            Some(&out.stretching),
            host.stretching.as_flattened().to_vec(),
        ),
        Extra::Gradient => (
            Some(&out.gradient),
            host.gradient.as_flattened().as_flattened().to_vec(),
        ),
    };
    let mut ex = vec![0.0; ex_host.len()];
    if let Some(b) = ex_buf {
        b.download(&gpu, &mut ex, "extra")?;
    }
    let diff = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| match (x - y).abs() {
                _ if x == y => 0.0,
                d if d.is_nan() => f64::INFINITY,
                d => d.max(f64::MIN_POSITIVE),
            })
            .fold(0.0, f64::max)
    };
    Ok((diff(&u, host.velocity.as_flattened()), diff(&ex, &ex_host)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summation::direct::DirectFreeSpace;

    #[test]
    fn an_evaluator_against_itself_has_zero_error() {
        let p = Particles::free_space(50, 1);
        let t = random_points(20, 2);
        let (v, x, _) = compare_all_extras(
            &mut DirectFreeSpace,
            &mut DirectFreeSpace,
            &p.sources(),
            &t,
            &p.alpha[..20],
        )
        .unwrap();
        assert_eq!(
            (v.rel_l2, v.max_rel, x.rel_l2, x.max_rel),
            (0.0, 0.0, 0.0, 0.0)
        );
    }

    #[test]
    fn fixtures_are_seeded_and_zero_sum() {
        let a = Particles::random_in_box(100, 1.0, 0.2, 0.3, 5);
        let b = Particles::random_in_box(100, 1.0, 0.2, 0.3, 5);
        assert_eq!(a.x, b.x);
        let s: f64 = a.alpha.iter().map(|v| v[0] + v[1] + v[2]).sum();
        assert!(s.abs() < 1e-12);
        let l = Particles::lattice(4, 0.0, 1);
        assert_eq!(l.x, super::super::lattice::lattice_nodes(4));
        let s = sample(1000, 10, 3);
        assert_eq!(s.len(), 10);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn errors_measure_what_they_say() {
        let b = vec![[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]];
        let a = vec![[1.1, 0.0, 0.0], [0.0, 1.0, 0.0]];
        assert!((rel_l2(&a, &b) - (0.01f64 / 2.0).sqrt()).abs() < 1e-12);
        // max |a − b| = 0.1 over the rms component (1/√3).
        assert!((max_rel(&a, &b) - 0.1 * 3f64.sqrt()).abs() < 1e-12);
    }
}
