//! The host mirror of the spectral solver across ranks (src/spectral/slab_host.rs,
//! docs/physics.md §5.6) against the one-rank solver: P = 1–4 host ranks, both dealiasing
//! rules, a Taylor–Green and a random solenoidal field; the chunk placement of the transposes;
//! rank-order reductions independent of repeats and thread counts; resuming on another number
//! of ranks; a dead rank; the refused splits.

use num_complex::Complex64;
use vpm::config::{Dealias, InitialCondition};
use vpm::init::initial_modes;
use vpm::spectral::slab::{SlabError, SlabLayout};
use vpm::spectral::slab_host::{run_ranks, transpose, Direction, HostSlabSolver};
use vpm::spectral::{ModeLayout, SpectralGrid, SpectralSolver, SpectralStepper, VectorModes};
use vpm::summation::verify;

const NU: f64 = 0.02;
/// The step for the fields of a grid: 0.04, or less where the CFL number would pass 0.5.
fn step_for(grid: SpectralGrid, init: &VectorModes) -> f64 {
    let mut s = SpectralSolver::new(grid, NU);
    s.set_velocity_modes(init.clone());
    s.cfl_dt(0.5).min(0.04)
}
const STEPS: usize = 3;

/// A smooth random field with every retained mode nonzero (projected by the solvers).
fn random_modes(layout: &ModeLayout, seed: u64) -> VectorModes {
    let mut state = seed;
    let mut next = move || {
        // splitmix64, to a uniform value in [−1, 1).
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    };
    let mut out: VectorModes =
        std::array::from_fn(|_| vec![Complex64::new(0.0, 0.0); layout.len()]);
    layout.for_each_mode(|i, k| {
        let amp = 2.0 / (1.0 + (k[0] * k[0] + k[1] * k[1] + k[2] * k[2]) as f64);
        for c in out.iter_mut() {
            c[i] = Complex64::new(next(), next()) * amp;
        }
    });
    out
}

/// Everything the run core reads from a stepper after a few steps.
struct Observed {
    modes: VectorModes,
    energy: f64,
    dissipation: f64,
    spectrum: Vec<f64>,
    dkdt: f64,
    cfl_dt: f64,
    max_div: f64,
    max_vort: f64,
    velocity: [Vec<f64>; 3],
}

fn observe(s: &mut dyn SpectralStepper, init: &VectorModes, dt: f64) -> Observed {
    s.set_velocity_modes(init.clone()).unwrap();
    for _ in 0..STEPS {
        s.step(dt).unwrap();
    }
    let stats = s.flow_stats().unwrap();
    Observed {
        modes: s.velocity_modes().unwrap().clone(),
        energy: stats.energy,
        dissipation: stats.dissipation,
        spectrum: s.shell_spectrum().unwrap(),
        dkdt: s.dkdt_from_rhs().unwrap(),
        cfl_dt: s.cfl_dt(0.5).unwrap(),
        max_div: s.max_divergence().unwrap(),
        max_vort: s.max_vorticity().unwrap(),
        velocity: s.velocity_on_grid().unwrap(),
    }
}

fn mode_bits(v: &VectorModes) -> Vec<u64> {
    v.iter()
        .flatten()
        .flat_map(|z| [z.re.to_bits(), z.im.to_bits()])
        .collect()
}

fn max_abs<'a>(v: impl Iterator<Item = &'a Complex64>) -> f64 {
    v.fold(0.0, |a, z| a.max(z.norm()))
}

fn assert_close(what: &str, a: f64, b: f64, scale: f64) {
    let e = (a - b).abs() / scale;
    assert!(e <= 1e-12, "{what}: {a} vs {b} (relative {e:.2e})");
}

fn compare(label: &str, one: &Observed, many: &Observed) {
    let scale = max_abs(one.modes.iter().flatten());
    let diff = one
        .modes
        .iter()
        .flatten()
        .zip(many.modes.iter().flatten())
        .fold(0.0f64, |a, (x, y)| a.max((x - y).norm()));
    assert!(
        diff <= 1e-12 * scale,
        "{label}: modes differ by {diff:.2e} (max |û| {scale})"
    );
    assert_close(&format!("{label}: K"), one.energy, many.energy, one.energy);
    assert_close(
        &format!("{label}: ε"),
        one.dissipation,
        many.dissipation,
        one.dissipation,
    );
    assert_close(
        &format!("{label}: dK/dt"),
        one.dkdt,
        many.dkdt,
        one.dkdt.abs(),
    );
    assert_close(
        &format!("{label}: cfl dt"),
        one.cfl_dt,
        many.cfl_dt,
        one.cfl_dt,
    );
    assert_close(
        &format!("{label}: max |ω|"),
        one.max_vort,
        many.max_vort,
        one.max_vort,
    );
    // Both divergences are round-off: compare against the vorticity's scale.
    assert_close(
        &format!("{label}: max div"),
        one.max_div,
        many.max_div,
        one.max_vort,
    );
    assert!(
        many.max_div < 1e-12 * one.max_vort,
        "{label}: max div {}",
        many.max_div
    );
    assert_eq!(one.spectrum.len(), many.spectrum.len());
    for (s, (a, b)) in one.spectrum.iter().zip(&many.spectrum).enumerate() {
        assert_close(&format!("{label}: E({s})"), *a, *b, one.energy);
    }
    for c in 0..3 {
        assert_eq!(one.velocity[c].len(), many.velocity[c].len());
        let vs = one.velocity[c]
            .iter()
            .fold(0.0f64, |a, x| a.max(x.abs()))
            .max(1.0);
        for (p, (a, b)) in one.velocity[c].iter().zip(&many.velocity[c]).enumerate() {
            assert_close(&format!("{label}: u_{c} at node {p}"), *a, *b, vs);
        }
    }
}

/// Modes after three steps, K, ε, the spectrum, dK/dt, the CFL step, max |∇·u|, max |ω| and
/// the velocity on the grid of P = 1–4 host ranks equal the one-rank solver's to 1e-12, for
/// both rules (2/3 on 12³ with one k_z per rank at P = 4 and an uneven split at P = 3, 2/3 on
/// 24³, 3/2 on 24³ with its 36³ product grid) and both fields.
#[test]
fn host_ranks_match_the_one_rank_solver() {
    for (dealias, n) in [
        (Dealias::TwoThirds, 12),
        (Dealias::TwoThirds, 24),
        (Dealias::ThreeHalves, 24),
    ] {
        let grid = SpectralGrid::new(n, dealias);
        let layout = grid.layout();
        let fields = [
            (
                "Taylor–Green",
                initial_modes(&InitialCondition::TaylorGreen { amplitude: 1.0 }, &layout).unwrap(),
            ),
            ("random", random_modes(&layout, 28)),
        ];
        for (name, init) in &fields {
            let dt = step_for(grid, init);
            let one = observe(&mut SpectralSolver::new(grid, NU), init, dt);
            let mut first_bits = None;
            for ranks in 1..=4 {
                let label = format!("{name}, {dealias} on {n}³, {ranks} ranks");
                let mut s = HostSlabSolver::new(grid, NU, ranks).unwrap();
                assert_eq!(s.ranks(), ranks);
                let many = observe(&mut s, init, dt);
                compare(&label, &one, &many);
                // Each line is transformed and each mode updated alike whatever the split:
                // the state is the same to the bit for every number of ranks.
                let bits = mode_bits(&many.modes);
                assert_eq!(
                    first_bits.get_or_insert_with(|| bits.clone()),
                    &bits,
                    "{label}"
                );
            }
        }
    }
}

/// Every value of every pencil buffer lands where slab.rs says (poisoned exchange buffers,
/// known values), and the transpose back restores the pencil buffers exactly.
#[test]
fn transposes_place_every_chunk_exactly() {
    for (m, kmax, ranks, fields) in [(12, 3, 4, 2), (18, 8, 3, 3), (36, 11, 4, 6), (8, 3, 1, 1)] {
        let s = SlabLayout::new(m, kmax, ranks).unwrap();
        // The value at (field f, x, iy, k_z): all distinct.
        let value = |f: usize, x: usize, iy: usize, kz: usize| {
            Complex64::new((f * 1000 + x) as f64, (iy * 1000 + kz) as f64)
        };
        let pencils: Vec<Vec<Complex64>> = (0..ranks)
            .map(|r| {
                let mut p = vec![Complex64::new(f64::NAN, f64::NAN); fields * s.pencil_len(r)];
                for f in 0..fields {
                    for x in 0..m {
                        for iy in 0..s.side() {
                            for (kzl, kz) in s.kz_range(r).enumerate() {
                                p[f * s.pencil_len(r) + s.pencil_index(r, x, iy, kzl)] =
                                    value(f, x, iy, kz);
                            }
                        }
                    }
                }
                p
            })
            .collect();
        let poison = Complex64::new(f64::NAN, 0.0);
        let mut exchanges = vec![vec![poison; fields * s.exchange_len()]; ranks];
        transpose(&s, (fields, Direction::ToSlabs), &pencils, &mut exchanges);
        for (q, ex) in exchanges.iter().enumerate() {
            for f in 0..fields {
                for (xl, x) in s.x_range(q).enumerate() {
                    for iy in 0..s.side() {
                        for kz in 0..=kmax {
                            let got = ex[f * s.exchange_len() + s.exchange_index(xl, iy, kz)];
                            assert_eq!(
                                got,
                                value(f, x, iy, kz),
                                "m {m} P {ranks}: slab {q} field {f} x {x} iy {iy} kz {kz}"
                            );
                        }
                    }
                }
            }
        }
        let mut back: Vec<Vec<Complex64>> = (0..ranks)
            .map(|r| vec![poison; fields * s.pencil_len(r)])
            .collect();
        transpose(&s, (fields, Direction::ToPencils), &exchanges, &mut back);
        let bits = |v: &[Vec<Complex64>]| mode_bits(&[v.concat(), vec![], vec![]]);
        assert_eq!(bits(&back), bits(&pencils), "m {m} P {ranks}: round trip");
    }
}

/// The rank-order reductions and the state are bit-identical across repeats and rayon thread
/// counts.
#[test]
fn host_ranks_are_bit_identical_across_repeats_and_thread_counts() {
    let grid = SpectralGrid::new(24, Dealias::TwoThirds);
    let init = random_modes(&grid.layout(), 5);
    let run = |threads: usize| {
        verify::on_threads(threads, || {
            let mut s = HostSlabSolver::new(grid, NU, 3).unwrap();
            SpectralStepper::set_velocity_modes(&mut s, init.clone()).unwrap();
            for _ in 0..2 {
                s.step(0.01).unwrap();
            }
            let sums = s.sums();
            let mut bits: Vec<u64> = sums
                .sums
                .iter()
                .chain(&sums.spectrum)
                .map(|x| x.to_bits())
                .collect();
            for x in [s.speed_sum_max(), s.max_divergence(), s.max_vorticity()] {
                bits.push(x.to_bits());
            }
            let modes = SpectralStepper::velocity_modes(&mut s).unwrap();
            bits.extend(
                modes
                    .iter()
                    .flatten()
                    .flat_map(|z| [z.re.to_bits(), z.im.to_bits()]),
            );
            bits
        })
    };
    let first = run(1);
    assert_eq!(first, run(1), "two repeats");
    assert_eq!(first, run(2), "one and two threads");
}

/// A step whose result is not finite is committed on no rank: the state stays the last good
/// one and the error is the solver's.
#[test]
fn a_non_finite_step_is_committed_on_no_rank() {
    let grid = SpectralGrid::new(12, Dealias::TwoThirds);
    let mut s = HostSlabSolver::new(grid, NU, 3).unwrap();
    let mut init = random_modes(&grid.layout(), 9);
    for c in init.iter_mut() {
        for z in c.iter_mut() {
            *z *= 1e160;
        }
    }
    SpectralStepper::set_velocity_modes(&mut s, init).unwrap();
    let before = SpectralStepper::velocity_modes(&mut s).unwrap().clone();
    let e = SpectralStepper::step(&mut s, 0.01).unwrap_err();
    assert!(e.to_string().contains("non-finite"), "{e}");
    assert_eq!(SpectralStepper::velocity_modes(&mut s).unwrap(), &before);
}

/// Splits that do not work are refused with the reason, before any work.
#[test]
fn bad_splits_are_refused() {
    // 3/2 on 16³: the 24³ product grid splits over 3 ranks, the 16³ grid does not.
    let e = HostSlabSolver::new(SpectralGrid::new(16, Dealias::ThreeHalves), NU, 3)
        .err()
        .unwrap();
    assert_eq!(e, SlabError::SolutionPlanesNotDivisible { n: 16, ranks: 3 });
    assert!(e.to_string().contains("16 is not divisible by 3"), "{e}");
    // 3/2 on 18³: the 27³ product grid does not split over 2 ranks.
    let e = HostSlabSolver::new(SpectralGrid::new(18, Dealias::ThreeHalves), NU, 2)
        .err()
        .unwrap();
    assert_eq!(e, SlabError::PlanesNotDivisible { m: 27, ranks: 2 });
    // 2/3 on 12³ keeps K = 3: four k_z values, not enough for 6 ranks.
    let e = HostSlabSolver::new(SpectralGrid::new(12, Dealias::TwoThirds), NU, 6)
        .err()
        .unwrap();
    assert!(matches!(e, SlabError::TooFewModes { ranks: 6, .. }), "{e}");
}

/// A host rank that dies makes the others fail at their next collective instead of waiting
/// for it forever, and the failure reaches the caller.
#[test]
fn a_dead_rank_fails_every_rank_instead_of_hanging() {
    let start = std::time::Instant::now();
    let mut states = vec![0usize; 3];
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_ranks(&mut states, |comm, r, st| {
            assert_ne!(r, 1, "rank 1 fails on purpose");
            *st = 1;
            comm.all_max(r, 1.0)
        })
    }));
    let e = out.unwrap_err();
    assert_eq!(
        e.downcast_ref::<String>().map(String::as_str),
        Some("assertion `left != right` failed: rank 1 fails on purpose\n  left: 1\n right: 1"),
        "the failing rank's own panic is passed on"
    );
    assert!(start.elapsed().as_secs() < 10);
    // The same ranks with no failure complete.
    assert_eq!(
        run_ranks(&mut states, |comm, r, _| comm.all_max(r, r as f64)),
        vec![2.0; 3]
    );
}

/// The global modes a checkpoint holds resume on any number of ranks: 2 ranks for two steps,
/// then 3 (or 1) ranks from the gathered modes, end where 2 ranks do after a third step.
#[test]
fn a_state_gathered_on_some_ranks_resumes_on_others() {
    let grid = SpectralGrid::new(24, Dealias::ThreeHalves);
    let init = random_modes(&grid.layout(), 11);
    let dt = step_for(grid, &init);
    let mut two = HostSlabSolver::new(grid, NU, 2).unwrap();
    SpectralStepper::set_velocity_modes(&mut two, init).unwrap();
    for _ in 0..2 {
        two.step(dt).unwrap();
    }
    let saved = SpectralStepper::velocity_modes(&mut two).unwrap().clone();
    two.step(dt).unwrap();
    let want = mode_bits(SpectralStepper::velocity_modes(&mut two).unwrap());
    for ranks in [3, 1] {
        let mut s = HostSlabSolver::new(grid, NU, ranks).unwrap();
        SpectralStepper::restore_velocity_modes(&mut s, saved.clone()).unwrap();
        assert_eq!(SpectralStepper::velocity_modes(&mut s).unwrap(), &saved);
        s.step(dt).unwrap();
        let got = mode_bits(SpectralStepper::velocity_modes(&mut s).unwrap());
        assert_eq!(got, want, "resumed on {ranks} ranks");
    }
}
