//! The spectral solver across several GPUs (src/spectral/gpu_slab.rs, kernels/spectral_slab.cu,
//! src/device/nccl.rs), ranks as threads of this process, one per GPU (docs/physics.md §5.6).
//!
//! Each test prints why and passes when fewer than 2 GPUs or no NCCL are present (CPU-only CI
//! stays green). On a machine with 2 GPUs it runs with P = 2, with 4 or more GPUs with P = 2 and
//! P = 4, and checks:
//! - the transpose places every chunk exactly: known values in every pencil field, the exchange
//!   buffer poisoned with NaN, every slab value where slab.rs says (bitwise), and the pencils
//!   rebuilt exactly by the transpose back;
//! - the distributed transforms: the right-hand side N(û) (pencil gather, x lines, transpose,
//!   (y, z) planes, u × ω, and back) equals the CPU solver's `rhs_at_current` to 1e-12 of its
//!   largest mode, and the velocity on the N grid the one-GPU solver's to 1e-12, both rules;
//! - Taylor–Green 128³ (ν = 1/1600, Δt = 0.01) for 100 steps: K and ε at every 10th step equal
//!   the one-GPU `GpuSpectralSolver`'s to 1e-12 relative, both rules (128³ with the 3/2 rule:
//!   product grid 192, splits over 2 and 4), with the diagnostics' maxima and the device memory
//!   against `SlabRank::device_bytes`;
//! - two runs bit-identical, and the sums identical on every rank; runs with the transposes
//!   between the transforms (`set_exchange_chunk(0)`) or beside them 2 or 3 fields at a time
//!   bit-identical to the default;
//! - scatter then gather of a random field returns it bit for bit;
//! - an abort signal raised while the ranks are inside a step (one rank stopped taking part)
//!   makes every rank's call return `Err` within 10 s (named `zz_…` so that it runs last: it
//!   leaves aborted communicators behind).
//!
//! Run with `cargo test --release --test gpu_slab -- --nocapture --test-threads=1` to see the
//! measured figures (the tests also serialise themselves on a lock).

use num_complex::Complex64;
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};
use vpm::config::{Dealias, InitialCondition};
use vpm::device::cuda::{gpu_at, Gpu};
use vpm::device::nccl::{disable_nvls_unless_set, nccl_available, AbortSignal, NcclComm, NcclId};
use vpm::diagnostics::FlowStats;
use vpm::init::initial_modes;
use vpm::spectral::gpu_slab::{SlabRank, DEFAULT_EXCHANGE_CHUNK};
use vpm::spectral::solver::make_real_solenoidal;
use vpm::spectral::{GpuSpectralSolver, SpectralGrid, SpectralSolver, VectorModes};

const TG: InitialCondition = InitialCondition::TaylorGreen { amplitude: 1.0 };
const RULES: [Dealias; 2] = [Dealias::TwoThirds, Dealias::ThreeHalves];

/// One GPU test at a time in this process (each uses every GPU).
static LOCK: Mutex<()> = Mutex::new(());

/// The lock of the GPU tests and the usable GPUs when there are at least 2 and NCCL loads;
/// otherwise prints why and `None`.
fn gpus_or_skip(test: &str) -> Option<(MutexGuard<'static, ()>, Vec<Arc<Gpu>>)> {
    let lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    static ENV: Once = Once::new();
    ENV.call_once(disable_nvls_unless_set);
    let mut gpus = Vec::new();
    while let Ok(g) = gpu_at(gpus.len()) {
        gpus.push(g);
        if gpus.len() == 64 {
            break;
        }
    }
    if gpus.len() < 2 {
        let why = gpu_at(gpus.len())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        eprintln!(
            "{test}: skipped, {} usable GPU(s) (2 needed): {why}",
            gpus.len()
        );
        return None;
    }
    if let Err(e) = nccl_available() {
        eprintln!("{test}: skipped, NCCL is not usable: {e}");
        return None;
    }
    Some((lock, gpus))
}

/// Runs `body(gpus, P)` for every rank count to test, holding the lock; prints why and does
/// nothing when fewer than 2 GPUs or no NCCL.
fn with_rank_counts(test: &str, mut body: impl FnMut(&[Arc<Gpu>], usize)) {
    let Some((_lock, gpus)) = gpus_or_skip(test) else {
        return;
    };
    for ranks in rank_counts(&gpus) {
        body(&gpus, ranks);
    }
}

/// The rank counts to test: 2, and 4 when there are 4 GPUs.
fn rank_counts(gpus: &[Arc<Gpu>]) -> Vec<usize> {
    [2, 4].into_iter().filter(|&p| p <= gpus.len()).collect()
}

/// Runs `f` on ranks 0..P as threads, one per GPU (communicators made concurrently), with a
/// shared abort signal; the results in rank order.
fn on_ranks<T: Send>(
    gpus: &[Arc<Gpu>],
    ranks: usize,
    abort: &AbortSignal,
    f: impl Fn(Arc<NcclComm>) -> T + Sync,
) -> Vec<T> {
    let id = NcclId::new().expect("an NCCL id");
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..ranks)
            .map(|r| {
                let (gpu, id, abort, f) = (&gpus[r], &id, abort.clone(), &f);
                s.spawn(move || {
                    let comm = NcclComm::init(gpu, id, r, ranks, abort).expect("NCCL init");
                    f(Arc::new(comm))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a rank panicked"))
            .collect()
    })
}

/// Rank `comm.rank()`'s solver for `grid` holding `u0` (given on rank 0).
fn started(comm: Arc<NcclComm>, grid: SpectralGrid, nu: f64, u0: &VectorModes) -> SlabRank {
    let r = comm.rank();
    let mut rank = SlabRank::new(comm, grid, nu).unwrap();
    rank.scatter_modes((r == 0).then_some(u0)).unwrap();
    rank
}

/// The projected initial field of `ic` on `grid` (what the distributed driver scatters).
fn projected(grid: SpectralGrid, ic: &InitialCondition) -> VectorModes {
    let mut u = initial_modes(ic, &grid.layout()).unwrap();
    make_real_solenoidal(&grid.layout(), &mut u);
    u
}

/// A random solenoidal field with every class of mode excited.
fn random_field(grid: SpectralGrid, seed: u64) -> VectorModes {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    let len = grid.layout().len();
    let mut u: VectorModes =
        std::array::from_fn(|_| (0..len).map(|_| Complex64::new(next(), next())).collect());
    make_real_solenoidal(&grid.layout(), &mut u);
    u
}

/// Whether two fields are equal bit for bit.
fn same_bits(a: &VectorModes, b: &VectorModes) -> bool {
    let bits = |z: &Complex64| (z.re.to_bits(), z.im.to_bits());
    (0..3).all(|c| a[c].len() == b[c].len() && a[c].iter().map(bits).eq(b[c].iter().map(bits)))
}

fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        ((a - b) / b).abs()
    }
}

fn stats(s: &vpm::spectral::gpu_slab::SlabSums, nu: f64) -> FlowStats {
    FlowStats::from_mode_sums(s.sums[0], s.sums[1], s.sums[2], nu)
}

#[test]
fn the_transpose_places_every_chunk_exactly() {
    with_rank_counts("the_transpose_places_every_chunk_exactly", |gpus, ranks| {
        // 2/3 on 24³ (K = 7) and 3/2 on 16³ (product grid 24, K = 7): 8 k_z values.
        for grid in [
            SpectralGrid::new(24, Dealias::TwoThirds),
            SpectralGrid::new(16, Dealias::ThreeHalves),
        ] {
            let fields = 6;
            let abort = AbortSignal::new();
            let out = on_ranks(gpus, ranks, &abort, |comm| {
                let r = comm.rank();
                let mut rank = SlabRank::new(comm, grid, 0.01).unwrap();
                let s = rank.slabs();
                // Value of (field, x, iy, kz): distinct for every position of every rank.
                let mut pencil = Vec::with_capacity(fields * s.pencil_len(r));
                for f in 0..fields {
                    for x in 0..s.m {
                        for iy in 0..s.side() {
                            for kz in s.kz_range(r) {
                                pencil.push(value(f, x, iy, kz));
                            }
                        }
                    }
                }
                let (ex, back) = rank.transpose_probe(&pencil, fields).unwrap();
                (s, ex, back == pencil)
            });
            let s = out[0].0;
            let mut checked = 0usize;
            for (q, (_, ex, round_trip)) in out.iter().enumerate() {
                assert!(
                    *round_trip,
                    "P = {ranks}: rank {q}'s pencils changed in the round trip"
                );
                for f in 0..fields {
                    for xl in 0..s.planes() {
                        for iy in 0..s.side() {
                            for kz in 0..=s.kmax {
                                let got = ex[f * s.exchange_len() + s.exchange_index(xl, iy, kz)];
                                let want = value(f, q * s.planes() + xl, iy, kz);
                                assert!(
                                    got.re.to_bits() == want.re.to_bits()
                                        && got.im.to_bits() == want.im.to_bits(),
                                    "P = {ranks}, {grid:?}: slab {q} field {f} x_local {xl} iy \
                                     {iy} kz {kz}: {got} instead of {want}"
                                );
                                checked += 1;
                            }
                        }
                    }
                }
            }
            println!(
                "transpose P = {ranks}, n = {} {}: {checked} values placed exactly, pencils \
                 rebuilt exactly",
                grid.n, grid.dealias
            );
        }
    });
}

/// The probe value of pencil position (field, x, iy, kz).
fn value(f: usize, x: usize, iy: usize, kz: usize) -> Complex64 {
    Complex64::new((f * 1_000_000 + x * 1000 + iy) as f64, kz as f64 + 0.25)
}

#[test]
fn the_distributed_transforms_equal_the_one_gpu_ones() {
    let Some((_lock, gpus)) = gpus_or_skip("the_distributed_transforms_equal_the_one_gpu_ones")
    else {
        return;
    };
    for dealias in RULES {
        let grid = SpectralGrid::new(32, dealias);
        let nu = 0.01;
        let u0 = random_field(grid, 7);
        let mut cpu = SpectralSolver::new(grid, nu);
        cpu.restore_velocity_modes(u0.clone());
        let want_rhs = cpu.rhs_at_current().clone();
        let scale = want_rhs
            .iter()
            .flat_map(|c| c.iter().map(|z| z.norm()))
            .fold(0.0, f64::max);
        let mut one = GpuSpectralSolver::new(gpus[0].clone(), grid, nu).unwrap();
        one.restore_velocity_modes(u0.clone()).unwrap();
        let want_u = one.velocity_on_grid().unwrap();
        let want_div = one.max_divergence().unwrap();
        let want_vort = one.max_vorticity().unwrap();
        let want_speed = one.speed_sum_max().unwrap();
        drop(one);
        for ranks in rank_counts(&gpus) {
            let abort = AbortSignal::new();
            let out = on_ranks(&gpus, ranks, &abort, |comm| {
                let mut rank = started(comm, grid, nu, &u0);
                let rhs = rank.rhs_modes().unwrap();
                let speed = rank.speed_sum_max().unwrap();
                let div = rank.max_divergence().unwrap();
                let vort = rank.max_vorticity().unwrap();
                let u = rank.velocity_on_grid().unwrap();
                (rhs, u, speed, div, vort)
            });
            let (rhs, u, speed, div, vort) = &out[0];
            let rhs = rhs.as_ref().expect("rank 0 gathers");
            let mut worst = 0.0f64;
            for c in 0..3 {
                for (a, b) in rhs[c].iter().zip(&want_rhs[c]) {
                    worst = worst.max((a - b).norm() / scale);
                }
            }
            let u = u.as_ref().expect("rank 0 gathers");
            let umax = want_u.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
            let mut worst_u = 0.0f64;
            for c in 0..3 {
                for (a, b) in u[c].iter().zip(&want_u[c]) {
                    worst_u = worst_u.max((a - b).abs() / umax);
                }
            }
            println!(
                "transforms P = {ranks}, n = 32 {dealias}: N(û) vs CPU {worst:.2e} of max \
                 {scale:.3e}; velocity on grid vs one GPU {worst_u:.2e}; speed {:.2e}, max div \
                 {div:.2e} (one GPU {want_div:.2e}), max |ω| {:.2e}",
                rel(*speed, want_speed),
                rel(*vort, want_vort)
            );
            assert!(
                worst < 1e-12,
                "P = {ranks} {dealias}: N(û) off by {worst:e}"
            );
            assert!(
                worst_u < 1e-12,
                "P = {ranks} {dealias}: velocity off by {worst_u:e}"
            );
            assert!(rel(*speed, want_speed) < 1e-12);
            assert!(rel(*vort, want_vort) < 1e-12);
            assert!(*div < 1e-10 && want_div < 1e-10, "{div} {want_div}");
            // Every rank has the same reduced values.
            for (r, o) in out.iter().enumerate() {
                assert_eq!(o.2.to_bits(), speed.to_bits(), "rank {r}'s speed");
                assert_eq!(o.4.to_bits(), vort.to_bits(), "rank {r}'s max |ω|");
            }
        }
    }
}

/// (K, ε) at every 10th step of `steps` steps of Taylor–Green from the projected field.
type Series = Vec<(f64, f64)>;

fn one_gpu_series(gpu: &Arc<Gpu>, grid: SpectralGrid, nu: f64, dt: f64, steps: usize) -> Series {
    let mut s = GpuSpectralSolver::new(gpu.clone(), grid, nu).unwrap();
    s.restore_velocity_modes(projected(grid, &TG)).unwrap();
    let mut out = Vec::new();
    for i in 0..=steps {
        if i % 10 == 0 {
            let st = s.flow_stats().unwrap();
            out.push((st.energy, st.dissipation));
        }
        if i < steps {
            s.step(dt).unwrap();
        }
    }
    out
}

/// The same on `ranks` GPUs: every rank's series, the final modes (rank 0), the step times and
/// (resident, estimated) device bytes of each rank. The transposes run `chunk` fields at a
/// time beside the transforms (0: between them; `SlabRank::set_exchange_chunk`).
#[allow(clippy::type_complexity)]
fn slab_series(
    gpus: &[Arc<Gpu>],
    ranks: usize,
    grid: SpectralGrid,
    nu: f64,
    dt: f64,
    steps: usize,
    chunk: usize,
) -> Vec<(Series, Option<VectorModes>, f64, (u64, u64))> {
    let u0 = projected(grid, &TG);
    let abort = AbortSignal::new();
    on_ranks(gpus, ranks, &abort, |comm| {
        let mut rank = started(comm, grid, nu, &u0);
        rank.set_exchange_chunk(chunk);
        let mut out = Vec::new();
        let t0 = Instant::now();
        for i in 0..=steps {
            if i % 10 == 0 {
                let st = stats(&rank.sums().unwrap(), nu);
                out.push((st.energy, st.dissipation));
            }
            if i < steps {
                rank.step(dt).unwrap();
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let bytes = (rank.resident_bytes(), SlabRank::device_bytes(grid, ranks));
        (out, rank.gather_modes().unwrap(), secs, bytes)
    })
}

#[test]
fn taylor_green_128_matches_one_gpu_for_both_rules_and_repeats_bit_for_bit() {
    let Some((_lock, gpus)) =
        gpus_or_skip("taylor_green_128_matches_one_gpu_for_both_rules_and_repeats_bit_for_bit")
    else {
        return;
    };
    let (nu, dt, steps) = (1.0 / 1600.0, 0.01, 100);
    for dealias in RULES {
        let grid = SpectralGrid::new(128, dealias);
        let want = one_gpu_series(&gpus[0], grid, nu, dt, steps);
        for ranks in rank_counts(&gpus) {
            let a = slab_series(&gpus, ranks, grid, nu, dt, steps, DEFAULT_EXCHANGE_CHUNK);
            let (mut wk, mut we) = (0.0f64, 0.0f64);
            for ((k, e), (k1, e1)) in a[0].0.iter().zip(&want) {
                wk = wk.max(rel(*k, *k1));
                we = we.max(rel(*e, *e1));
            }
            println!(
                "Taylor–Green 128³ {dealias} P = {ranks}: {steps} steps in {:.2} s (incl. sums); \
                 K(t = 1) = {:.15e} (one GPU {:.15e}), worst rel. K {wk:.2e}, ε {we:.2e}; \
                 rank 0 device bytes resident {} MiB, estimated {} MiB",
                a[0].2,
                a[0].0.last().unwrap().0,
                want.last().unwrap().0,
                a[0].3 .0 >> 20,
                a[0].3 .1 >> 20
            );
            assert_eq!(a[0].0.len(), want.len());
            assert!(wk < 1e-12 && we < 1e-12, "K {wk:e}, ε {we:e}");
            for (r, o) in a.iter().enumerate() {
                assert_eq!(o.0, a[0].0, "rank {r}'s sums differ from rank 0's");
                assert!(
                    o.3 .0 <= o.3 .1,
                    "rank {r}: resident {} > estimate {}",
                    o.3 .0,
                    o.3 .1
                );
                assert_eq!(o.1.is_some(), r == 0);
            }
            // A second run: bit-identical sums and modes; and runs with the transposes between
            // the transforms, or beside them in chunks of 2 and 3 fields: the same bits again.
            let bits = |s: &Series| -> Vec<(u64, u64)> {
                s.iter().map(|(k, e)| (k.to_bits(), e.to_bits())).collect()
            };
            for (chunk, what) in [
                (DEFAULT_EXCHANGE_CHUNK, "two runs"),
                (0, "serial and overlapped"),
                (2, "chunks of 2 and the default"),
                (3, "chunks of 3 and the default"),
            ] {
                let b = slab_series(&gpus, ranks, grid, nu, dt, steps, chunk);
                assert_eq!(bits(&a[0].0), bits(&b[0].0), "P = {ranks}: {what} differ");
                let (ma, mb) = (a[0].1.as_ref().unwrap(), b[0].1.as_ref().unwrap());
                assert!(
                    same_bits(ma, mb),
                    "P = {ranks}: the final modes of {what} differ"
                );
                println!(
                    "Taylor–Green 128³ {dealias} P = {ranks}: {what} bit-identical ({:.2} s)",
                    b[0].2
                );
            }
        }
    }
}

#[test]
fn scatter_then_gather_returns_the_field_bit_for_bit() {
    with_rank_counts(
        "scatter_then_gather_returns_the_field_bit_for_bit",
        |gpus, ranks| {
            for grid in [
                SpectralGrid::new(36, Dealias::TwoThirds),
                SpectralGrid::new(24, Dealias::ThreeHalves),
            ] {
                let u = random_field(grid, 11);
                let abort = AbortSignal::new();
                let out = on_ranks(gpus, ranks, &abort, |comm| {
                    started(comm, grid, 0.01, &u).gather_modes().unwrap()
                });
                let back = out[0].as_ref().expect("rank 0 gathers");
                assert!(out[1..].iter().all(Option::is_none));
                assert!(
                    same_bits(back, &u),
                    "P = {ranks}, {grid:?}: the round trip changed the field"
                );
                println!(
                    "scatter/gather P = {ranks}, n = {} {}: {} modes back bit for bit",
                    grid.n,
                    grid.dealias,
                    3 * u[0].len()
                );
            }
        },
    );
}

#[test]
fn zz_an_abort_mid_step_stops_every_rank_within_10_s() {
    // One rank count only (the largest: 4 where there are 4 GPUs): the aborted communicators'
    // GPUs are not used again in this process.
    with_rank_counts(
        "zz_an_abort_mid_step_stops_every_rank_within_10_s",
        |gpus, ranks| {
            if ranks != *rank_counts(gpus).last().expect("2 or more") {
                return;
            }
            let grid = SpectralGrid::new(64, Dealias::TwoThirds);
            let (nu, dt) = (1.0 / 1600.0, 0.01);
            let u0 = projected(grid, &TG);
            let abort = AbortSignal::new();
            let raised: Mutex<Option<Instant>> = Mutex::new(None);
            let idle = ranks - 1;
            let out = std::thread::scope(|s| {
                // The supervisor: raises the signal once the working ranks are stuck in a step.
                let (abort2, raised) = (abort.clone(), &raised);
                s.spawn(move || {
                    std::thread::sleep(Duration::from_secs(3));
                    *raised.lock().unwrap() = Some(Instant::now());
                    abort2.raise(format!("test: rank {idle} stopped taking part"));
                });
                on_ranks(gpus, ranks, &abort, |comm| {
                    let r = comm.rank();
                    let mut rank = started(comm, grid, nu, &u0);
                    for _ in 0..3 {
                        rank.step(dt).unwrap();
                    }
                    if r == idle {
                        // This rank stops taking part until the signal is raised, then calls once.
                        while rank.comm().abort_signal().reason().is_none() {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                    let mut steps = 0;
                    let err = loop {
                        match rank.step(dt) {
                            Ok(()) => steps += 1,
                            Err(e) => break e.to_string(),
                        }
                        assert!(steps < 100_000, "rank {r} never stopped");
                    };
                    let at = Instant::now();
                    // Whether the stream drains once the communicator is aborted (reported,
                    // not required; polled for at most 10 s so that a stuck kernel cannot hang
                    // the test).
                    let gpu = rank.comm().gpu().clone();
                    let ev = gpu.event().unwrap();
                    ev.record(gpu.stream()).unwrap();
                    let drained = (0..10_000).any(|_| {
                        std::thread::sleep(Duration::from_millis(1));
                        ev.try_is_complete().unwrap_or(true)
                    });
                    (at, format!("{err} (stream drained afterwards: {drained})"))
                })
            });
            let t = raised.lock().unwrap().expect("raised");
            for (r, (at, err)) in out.iter().enumerate() {
                let after = at.saturating_duration_since(t);
                println!(
                    "abort P = {ranks}: rank {r} returned Err {after:?} after the signal: {err}"
                );
                assert!(after < Duration::from_secs(10), "rank {r} took {after:?}");
                assert!(err.contains("stopped"), "rank {r}: {err}");
            }
        },
    );
}

/// Timing (ignored in CI; for the lead on the multi-GPU machines, about 1 min): 512³ with 2/3
/// truncation (256³ when `VPM_SLAB_N=256`), Taylor–Green state: ms per RK4 step on one GPU
/// and on P = 2 and 4, the transpose of six fields (ms and the bytes each rank sends, with the
/// achieved rate), device memory per rank. Run: `cargo test --release --test gpu_slab --
/// --ignored --nocapture timing`.
#[test]
#[ignore]
fn timing_of_a_step_and_of_the_transpose() {
    let Some((_lock, gpus)) = gpus_or_skip("timing_of_a_step_and_of_the_transpose") else {
        return;
    };
    let n = std::env::var("VPM_SLAB_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    let grid = SpectralGrid::new(n, Dealias::TwoThirds);
    let (nu, dt, repeats) = (1.0 / 1600.0, 1e-3, 10);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let one = {
        let mut s = GpuSpectralSolver::new(gpus[0].clone(), grid, nu).unwrap();
        s.restore_velocity_modes(projected(grid, &TG)).unwrap();
        median(s.time_steps(dt, repeats).unwrap())
    };
    println!("timing n = {n} 2/3: one GPU {one:.2} ms per step");
    let u0 = projected(grid, &TG);
    for ranks in rank_counts(&gpus) {
        let abort = AbortSignal::new();
        let out = on_ranks(&gpus, ranks, &abort, |comm| {
            let mut rank = started(comm, grid, nu, &u0);
            let (t6, sent) = rank.time_transpose(6, repeats).unwrap();
            rank.set_exchange_chunk(0);
            let serial = median(rank.time_steps(dt, repeats).unwrap());
            rank.set_exchange_chunk(DEFAULT_EXCHANGE_CHUNK);
            let steps = rank.time_steps(dt, repeats).unwrap();
            (t6, sent, median(steps), rank.resident_bytes(), serial)
        });
        let (t6, sent, ms, bytes, serial) = out[0];
        let slowest = out.iter().map(|o| o.2).fold(0.0, f64::max);
        println!(
            "timing n = {n} 2/3 P = {ranks}: {ms:.2} ms per step on rank 0 (slowest rank \
             {slowest:.2}; {serial:.2} with the transposes between the transforms), efficiency vs one GPU {:.0} %; transpose of 6 fields {t6:.2} ms, \
             {:.1} MiB sent per rank, {:.0} GB/s per rank; rank 0 holds {} MiB",
            100.0 * one / (ranks as f64 * slowest),
            sent as f64 / (1 << 20) as f64,
            sent as f64 / (t6 * 1e-3) / 1e9,
            bytes >> 20
        );
    }
}
