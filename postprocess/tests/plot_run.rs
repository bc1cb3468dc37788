//! End-to-end tests: synthetic run directories in, decoded PNGs checked.
//!
//! Set `POSTPROCESS_DEMO_DIR` to a directory to get copies of the plots of
//! the main test there, for looking at them.

mod common;

use common::{
    check_png, check_pngs, decode_png, demo_copy, dir_names, plot_error, plot_expecting, replot,
    write_solver,
};
use postprocess::{
    draw_energy, draw_spectra, energy_difference, plot_run, read_csv_columns, EnergyCurve, Solver,
    SolverSpectra, Spectrum, COMPARISON_PANEL_HEIGHT, ENERGY_COMPARE_SIZE, ENERGY_SIZE,
    SPECTRUM_COMPARE_SIZE, SPECTRUM_SIZE,
};
use std::fmt::Write as _;
use std::fs;

const ENERGY_HEADER: &str = "step,t,dt,K,Z,eps,minus_dKdt,u_rms,L,T,lambda,Re_lambda,max_div";

/// Energy rows with K = k0 exp(-rate t) and a slowly growing turnover time.
fn energy_csv(k0: f64, rate: f64, steps: usize, dt: f64) -> String {
    let mut s = format!("{ENERGY_HEADER}\n");
    for n in 0..=steps {
        let t = n as f64 * dt;
        let k = k0 * (-rate * t).exp();
        let u = (2.0 * k / 3.0).sqrt();
        let l = 1.0 + 0.05 * t;
        writeln!(
            s,
            "{n},{t:.16e},{dt:.16e},{k:.16e},{:.16e},{:.16e},{:.16e},{u:.16e},{l:.16e},{:.16e},0.3,40,1e-15",
            10.0 * k,
            rate * k,
            rate * k,
            l / u,
        )
        .unwrap();
    }
    s
}

/// k^-5/3 spectra with a dissipative cut-off and a round-off tail, shell
/// k = 0 included with E = 0.
fn spectra_csv(times: &[f64], kmax: usize, scale: f64) -> String {
    let mut s = String::from("t,k,E\n");
    for &t in times {
        let amp = scale * (-0.3 * t).exp();
        let kd = 30.0 / (1.0 + 0.2 * t);
        for k in 0..=kmax {
            let kf = k as f64;
            let e = if k == 0 {
                0.0
            } else {
                (amp * kf.powf(-5.0 / 3.0) * (-(kf / kd).powi(2)).exp()).max(1e-32)
            };
            writeln!(s, "{t:.16e},{kf},{e:.16e}").unwrap();
        }
    }
    s
}

#[test]
fn both_solvers_overlaid() {
    let run = tempfile::tempdir().unwrap();
    let times = [0.0, 2.5, 5.0, 10.0];
    write_solver(
        run.path(),
        "spectral",
        &energy_csv(1.5, 0.3, 400, 0.025),
        &spectra_csv(&times, 42, 1.0),
    );
    // Vortex columns in another order, plus an unknown one.
    let mut vortex_energy = String::from("K,extra,t,T\n");
    for n in 0..=80 {
        let t = n as f64 * 0.125;
        let k = 1.45 * (-0.33 * t).exp();
        writeln!(vortex_energy, "{k:.16e},7,{t:.16e},1.1").unwrap();
    }
    write_solver(
        run.path(),
        "vortex",
        &vortex_energy,
        &spectra_csv(&times, 30, 0.9),
    );

    let written = plot_expecting(run.path(), "test run", &["energy.png", "spectrum.png"]);
    // Both solvers: each picture has its comparison panel below.
    let sizes = [ENERGY_COMPARE_SIZE, SPECTRUM_COMPARE_SIZE];
    check_pngs(&written, &sizes);
    // No temporary files left behind.
    let names = dir_names(run.path());
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    demo_copy(&written, "");

    // Drawn again: the same bytes.
    let bytes: Vec<Vec<u8>> = written.iter().map(|p| fs::read(p).unwrap()).collect();
    replot(run.path(), "test run", &written, &sizes);
    for (path, before) in written.iter().zip(&bytes) {
        assert!(
            fs::read(path).unwrap() == *before,
            "{} changed",
            path.display()
        );
    }
}

/// The reference line's colour in the comparison panels.
const REFERENCE: [u8; 3] = [90, 90, 90];
/// The vortex solver's colour (also that of the energy difference).
const RED: [u8; 3] = [205, 45, 35];

/// The comparison panel of a picture of `size` (its bottom
/// [`COMPARISON_PANEL_HEIGHT`] rows): the row of its reference line (the
/// row with the most [`REFERENCE`] pixels, which must cross most of the
/// width) and the rows of its pixels that pass `pick`.
fn comparison_panel(
    path: &std::path::Path,
    size: (u32, u32),
    pick: impl Fn([u8; 3]) -> bool,
) -> (usize, Vec<usize>) {
    let pixels = decode_png(path, size);
    let (w, h) = (size.0 as usize, size.1 as usize);
    let top = h - COMPARISON_PANEL_HEIGHT as usize;
    let rows = || (top..h).map(|y| (y, &pixels[y * w..(y + 1) * w]));
    let (reference, count) = rows()
        .map(|(y, row)| (y, row.iter().filter(|&&p| p == REFERENCE).count()))
        .max_by_key(|&(y, n)| (n, std::cmp::Reverse(y)))
        .unwrap();
    assert!(
        count > w / 2,
        "{}: reference line {count} px",
        path.display()
    );
    let picked = rows()
        .flat_map(|(y, row)| row.iter().filter(|&&p| pick(p)).map(move |_| y))
        .collect();
    (reference, picked)
}

/// A run whose vortex K is the spectral K times `factor` at every time, and
/// whose vortex spectra are the spectral ones times `ratio` (at t = 0, 2
/// and 10; the spectral solver also has t = 5).
fn scaled_compare_run(factor: f64, ratio: f64) -> tempfile::TempDir {
    let run = tempfile::tempdir().unwrap();
    write_solver(
        run.path(),
        "spectral",
        &energy_csv(1.5, 0.3, 100, 0.1),
        &spectra_csv(&[0.0, 2.0, 5.0, 10.0], 24, 1.0),
    );
    write_solver(
        run.path(),
        "vortex",
        &energy_csv(1.5 * factor, 0.3, 100, 0.1),
        &spectra_csv(&[0.0, 2.0, 10.0], 24, ratio),
    );
    run
}

#[test]
fn comparison_panels_show_the_difference() {
    for (factor, ratio) in [(1.02, 0.5), (0.97, 2.0)] {
        let run = scaled_compare_run(factor, ratio);
        let written = plot_run(run.path(), "compare").unwrap();
        check_pngs(&written, &[ENERGY_COMPARE_SIZE, SPECTRUM_COMPARE_SIZE]);
        demo_copy(&written, &format!("compare-{factor}-"));

        // (K_v − K_s)/K_s = factor − 1 at every time: a flat red line on the
        // side of the zero line that its sign says.
        let (zero, red) = comparison_panel(&written[0], ENERGY_COMPARE_SIZE, |p| p == RED);
        assert!(red.len() > 500, "{} red pixels", red.len());
        let (lo, hi) = (red.iter().min().unwrap(), red.iter().max().unwrap());
        assert!(hi - lo <= 4, "not flat: rows {lo}..{hi}");
        if factor > 1.0 {
            assert!(*hi < zero, "+2 % drawn at rows {lo}..{hi}, zero at {zero}");
        } else {
            assert!(*lo > zero, "−3 % drawn at rows {lo}..{hi}, zero at {zero}");
        }

        // E_v/E_s = ratio at the times both have: coloured lines all on one
        // side of the line ratio = 1.
        let coloured = |p: [u8; 3]| p.iter().max().unwrap() - p.iter().min().unwrap() > 80;
        let (one, lines) = comparison_panel(&written[1], SPECTRUM_COMPARE_SIZE, coloured);
        assert!(lines.len() > 500, "{} coloured pixels", lines.len());
        if ratio < 1.0 {
            assert!(
                lines.iter().all(|&y| y > one),
                "ratio {ratio} above 1 (row {one})"
            );
        } else {
            assert!(
                lines.iter().all(|&y| y < one),
                "ratio {ratio} below 1 (row {one})"
            );
        }
    }
}

#[test]
fn energy_difference_at_shared_and_interpolated_times() {
    let curve = |solver, t: &[f64], k: &[f64], k0| EnergyCurve {
        solver,
        t_over_t0: t.to_vec(),
        k_over_k0: k.to_vec(),
        k0,
    };
    // K_s = 2, 2, 1 at t = 1, 2, 3 (K0 = 2); K_v at 1.5 (interpolated K_s = 2), 3 (shared),
    // 0.5 and 4 (outside the spectral times), NaN (left out).
    let spectral = curve(Solver::Spectral, &[1.0, 2.0, 3.0], &[1.0, 1.0, 0.5], 2.0);
    let vortex = curve(
        Solver::Vortex,
        &[0.5, 1.5, 3.0, 4.0, f64::NAN],
        &[1.0, 1.1, 1.0, 1.0, 1.0],
        2.0,
    );
    let diff = energy_difference(&spectral, &vortex);
    assert_eq!(diff.len(), 2, "{diff:?}");
    assert_eq!(diff[0].0, 1.5);
    assert!((diff[0].1 - 0.1).abs() < 1e-15, "{diff:?}");
    assert_eq!(diff[1], (3.0, 1.0));
    // No usable K0 on one side: nothing to compare.
    let empty = curve(Solver::Vortex, &[], &[], f64::NAN);
    assert!(energy_difference(&spectral, &empty).is_empty());
}

#[test]
fn spectral_only_with_many_times() {
    let run = tempfile::tempdir().unwrap();
    let times: Vec<f64> = (0..30).map(|i| f64::from(i) * 0.5).collect();
    write_solver(
        run.path(),
        "spectral",
        &energy_csv(2.0, 0.2, 300, 0.05),
        &spectra_csv(&times, 64, 1.0),
    );
    let written = plot_run(run.path(), "only spectral").unwrap();
    // One solver: the plots alone, no comparison panel.
    check_pngs(&written, &[ENERGY_SIZE, SPECTRUM_SIZE]);
    demo_copy(&written, "many-");
}

#[test]
fn missing_energy_csv_is_named() {
    let run = tempfile::tempdir().unwrap();
    write_solver(
        run.path(),
        "spectral",
        &energy_csv(1.0, 0.3, 10, 0.1),
        &spectra_csv(&[0.0], 8, 1.0),
    );
    let energy = run.path().join("spectral").join("energy.csv");
    fs::remove_file(&energy).unwrap();
    plot_error(run.path(), &[&energy.display().to_string()]);

    // A missing column is named together with its file.
    fs::write(&energy, "t,T,Z\n0,1,1\n").unwrap();
    plot_error(run.path(), &["\"K\"", "energy.csv"]);

    // An empty run directory (no spectral/, nothing of a particle run)
    // names what was looked for.
    let empty = tempfile::tempdir().unwrap();
    plot_error(empty.path(), &["spectral", "energy.csv"]);
}

#[test]
fn partial_last_line_is_ignored() {
    let run = tempfile::tempdir().unwrap();
    let mut energy = energy_csv(1.0, 0.3, 50, 0.1);
    energy.push_str("51,5.1000000000000000e0,1.0e-1,4.1");
    let mut spectra = spectra_csv(&[0.0, 2.0], 16, 1.0);
    spectra.push_str("4.0000000000000000e0,3,1.2e-");
    write_solver(run.path(), "spectral", &energy, &spectra);
    let table = read_csv_columns(run.path().join("spectral/energy.csv")).unwrap();
    assert_eq!(table.len(), 51);
    let written = plot_run(run.path(), "partial").unwrap();
    check_pngs(&written, &[ENERGY_SIZE, SPECTRUM_SIZE]);
}

#[test]
fn empty_and_degenerate_data() {
    // Header-only files: a run that has just started.
    let run = tempfile::tempdir().unwrap();
    let just_started =
        |solver| write_solver(run.path(), solver, &format!("{ENERGY_HEADER}\n"), "t,k,E\n");
    just_started("spectral");
    let written = plot_run(run.path(), "empty").unwrap();
    check_pngs(&written, &[ENERGY_SIZE, SPECTRUM_SIZE]);

    // A compare run that has just started: both panels, each saying so.
    just_started("vortex");
    let written = plot_run(run.path(), "empty compare").unwrap();
    check_pngs(&written, &[ENERGY_COMPARE_SIZE, SPECTRUM_COMPARE_SIZE]);
    demo_copy(&written, "empty-compare-");
    fs::remove_dir_all(run.path().join("vortex")).unwrap();

    // Only the t = 0 row: nothing fits on a log axis, still a plot.
    write_solver(
        run.path(),
        "spectral",
        &energy_csv(1.0, 0.3, 0, 0.1),
        &spectra_csv(&[0.0], 1, 1.0),
    );
    let written = plot_run(run.path(), "single row").unwrap();
    check_png(&written[0], ENERGY_SIZE);
    demo_copy(&written, "single-");

    // Constant values, NaN, inf, negatives, a single point.
    let dir = tempfile::tempdir().unwrap();
    let curves = [
        EnergyCurve {
            solver: Solver::Spectral,
            t_over_t0: vec![0.0, 1.0, 2.0, f64::NAN, 3.0, f64::INFINITY],
            k_over_k0: vec![1.0, 1.0, 1.0, 1.0, f64::NAN, 1.0],
            k0: 1.0,
        },
        EnergyCurve {
            solver: Solver::Vortex,
            t_over_t0: vec![2.0],
            k_over_k0: vec![-1.0],
            k0: 1.0,
        },
    ];
    let path = dir.path().join("flat.png");
    draw_energy(&path, "flat", &curves).unwrap();
    check_png(&path, ENERGY_COMPARE_SIZE);

    let series = [SolverSpectra {
        solver: Solver::Vortex,
        spectra: vec![Spectrum {
            t: 1.0,
            k: vec![1.0, 2.0, f64::NAN],
            e: vec![0.5, 0.5, 1.0],
        }],
    }];
    let path = dir.path().join("flat-spectrum.png");
    draw_spectra(&path, "flat", &series).unwrap();
    check_png(&path, SPECTRUM_SIZE);
}
