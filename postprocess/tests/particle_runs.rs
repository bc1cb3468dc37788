//! End-to-end tests of particle-only runs (no `spectral/` directory):
//! synthetic `vortex/ring.csv` and `vortex/lamb_oseen.csv` in, decoded PNGs
//! checked.
//!
//! Set `POSTPROCESS_DEMO_DIR` to a directory to get copies of the plots of
//! the main tests there, for looking at them.

mod common;

use common::{
    check_png, check_pngs, count_color, demo_copy, dir_names, plot_error, plot_expecting, replot,
    write_run_file, write_solver,
};
use postprocess::{plot_run, LAMB_OSEEN_SIZE, RING_SIZE};
use std::f64::consts::PI;
use std::fmt::Write as _;
use std::path::Path;

const RING_HEADER: &str = "t,step,dt,z,radius,speed,saffman_speed,core,impulse_x,impulse_y,\
                           impulse_z,total_strength,particles,sigma_max_over_sigma0";
const LAMB_OSEEN_HEADER: &str = "t,r,u_theta,u_exact,rel_err";

/// The line colours of the ring plot (particles, Saffman).
const BLUE: [u8; 3] = [25, 80, 170];
const RED: [u8; 3] = [205, 45, 35];

/// A ring of circulation 1 and radius 1 whose core grows viscously; the
/// "measured" speed is Saffman's plus a small wobble, and z its integral.
fn ring_csv(rows: usize, dt: f64) -> String {
    let (gamma, radius, sigma0, nu) = (1.0, 1.0, 0.1, 2e-3);
    let saffman = |t: f64| {
        let core = (sigma0 * sigma0 + 4.0 * nu * t).sqrt();
        let u = gamma / (4.0 * PI * radius) * ((8.0 * radius / core).ln() - 0.9045);
        (core, u)
    };
    let mut s = format!("{RING_HEADER}\n");
    let mut z = 0.25;
    for n in 0..rows {
        let t = n as f64 * dt;
        let (core, u_s) = saffman(t);
        let speed = u_s * (1.0 + 0.03 * (0.7 * t).sin());
        if n > 0 {
            // Midpoint rule for the particles: close to, not equal to, the
            // trapezoid the plot uses for Saffman.
            let tm = t - 0.5 * dt;
            z += dt * saffman(tm).1 * (1.0 + 0.03 * (0.7 * tm).sin());
        }
        writeln!(
            s,
            "{t:.16e},{n},{dt:.16e},{z:.16e},{radius:.16e},{speed:.16e},{u_s:.16e},{core:.16e},\
             0,0,{:.16e},{gamma:.16e},4096,{:.16e}",
            PI * radius * radius,
            core / sigma0,
        )
        .unwrap();
    }
    s
}

/// Lamb–Oseen profiles at `times` on `radii` (r = 0 gives a NaN error),
/// particles off by an error that grows with time and falls with r.
fn lamb_oseen_csv(times: &[f64], radii: &[f64]) -> String {
    let (gamma, nu, t0) = (1.0, 1e-2, 5.0);
    let mut s = format!("{LAMB_OSEEN_HEADER}\n");
    for &t in times {
        for &r in radii {
            let exact = if r > 0.0 {
                gamma / (2.0 * PI * r) * (1.0 - (-r * r / (4.0 * nu * (t + t0))).exp())
            } else {
                0.0
            };
            let eps = (1e-4 + 2e-3 * t) * (1.0 + 5.0 * (-r).exp());
            let u = exact * (1.0 + eps);
            let rel = (u - exact) / exact;
            writeln!(s, "{t:.16e},{r:.16e},{u:.16e},{exact:.16e},{rel:.16e}").unwrap();
        }
    }
    s
}

fn write_vortex_file(run: &Path, name: &str, text: &str) {
    write_run_file(run, "vortex", name, text);
}

fn radii() -> Vec<f64> {
    (0..=12).map(|i| f64::from(i) * 0.1).collect()
}

#[test]
fn vortex_ring_run() {
    let run = tempfile::tempdir().unwrap();
    write_vortex_file(run.path(), "ring.csv", &ring_csv(81, 0.25));
    let written = plot_expecting(run.path(), "ring test", &["ring.png"]);
    check_png(&written[0], RING_SIZE);
    // Both curves of both panels are drawn.
    assert!(count_color(&written[0], RING_SIZE, BLUE) > 1000);
    assert!(count_color(&written[0], RING_SIZE, RED) > 500);
    let names = dir_names(run.path());
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    assert!(!names.iter().any(|n| n == "lamb-oseen.png"), "{names:?}");
    demo_copy(&written, "");
}

#[test]
fn lamb_oseen_run_with_many_times() {
    let run = tempfile::tempdir().unwrap();
    let times: Vec<f64> = (0..20).map(f64::from).collect();
    write_vortex_file(
        run.path(),
        "lamb_oseen.csv",
        &lamb_oseen_csv(&times, &radii()),
    );
    let written = plot_expecting(run.path(), "tube test", &["lamb-oseen.png"]);
    check_png(&written[0], LAMB_OSEEN_SIZE);
    demo_copy(&written, "");
}

#[test]
fn both_particle_files() {
    let run = tempfile::tempdir().unwrap();
    write_vortex_file(run.path(), "ring.csv", &ring_csv(5, 0.5));
    write_vortex_file(
        run.path(),
        "lamb_oseen.csv",
        &lamb_oseen_csv(&[0.0, 1.0], &radii()),
    );
    let written = plot_expecting(run.path(), "both", &["ring.png", "lamb-oseen.png"]);
    check_pngs(&written, &[RING_SIZE, LAMB_OSEEN_SIZE]);
    demo_copy(&written, "few-");

    replot(run.path(), "both", &written, &[RING_SIZE, LAMB_OSEEN_SIZE]);
}

#[test]
fn spectral_runs_ignore_the_particle_files() {
    let run = tempfile::tempdir().unwrap();
    let spectra = "t,k,E\n0,1,1\n0,2,0.3\n";
    write_solver(run.path(), "spectral", "t,K,T\n0,1,1\n1,0.5,1\n", spectra);
    // With spectral/, vortex/ is the vortex solver of a turbulence run.
    write_solver(run.path(), "vortex", "t,K,T\n0,1,1\n1,0.6,1\n", spectra);
    write_vortex_file(run.path(), "ring.csv", &ring_csv(5, 0.5));
    plot_expecting(run.path(), "spectral", &["energy.png", "spectrum.png"]);
    assert!(!run.path().join("ring.png").exists());
}

#[test]
fn nothing_to_plot_names_the_directory() {
    let run = tempfile::tempdir().unwrap();
    let dir = run.path().display().to_string();
    plot_error(
        run.path(),
        &[&dir, "ring.csv", "lamb_oseen.csv", "spectral"],
    );

    // A vortex/ directory without the particle-run files is no better.
    write_vortex_file(run.path(), "energy.csv", "t,K,T\n0,1,1\n");
    plot_error(run.path(), &[&dir, "nothing to plot"]);
    assert!(dir_names(run.path()).iter().all(|n| !n.ends_with(".png")));

    let missing = run.path().join("no-such-run");
    plot_error(
        &missing,
        &[&missing.display().to_string(), "no such directory"],
    );
}

#[test]
fn missing_column_is_named() {
    let run = tempfile::tempdir().unwrap();
    write_vortex_file(run.path(), "ring.csv", "t,z,speed\n0,0,1\n");
    plot_error(run.path(), &["ring.csv", "saffman_speed"]);
}

#[test]
fn zero_rows_give_empty_axes() {
    let run = tempfile::tempdir().unwrap();
    write_vortex_file(run.path(), "ring.csv", &format!("{RING_HEADER}\n"));
    write_vortex_file(
        run.path(),
        "lamb_oseen.csv",
        &format!("{LAMB_OSEEN_HEADER}\n"),
    );
    let written = plot_run(run.path(), "empty").unwrap();
    assert_eq!(written.len(), 2);
    check_pngs(&written, &[RING_SIZE, LAMB_OSEEN_SIZE]);
    assert_eq!(count_color(&written[0], RING_SIZE, BLUE), 0);
    demo_copy(&written, "empty-");

    // A header cut short lacks columns: an error naming the file, no panic.
    write_vortex_file(run.path(), "ring.csv", "t,step,dt,z");
    plot_error(run.path(), &["ring.csv"]);
}

#[test]
fn degenerate_and_growing_files() {
    let run = tempfile::tempdir().unwrap();

    // Constant speeds, a NaN row, a single-row profile, a partial last line.
    let mut ring = format!("{RING_HEADER}\n");
    for n in 0..6 {
        let t = f64::from(n) * 0.5;
        let z = if n == 2 { f64::NAN } else { 0.3 * t };
        let speed = if n == 4 { f64::NAN } else { 0.3 };
        writeln!(ring, "{t},{n},0.5,{z},1,{speed},0.3,0.1,0,0,3.14,1,100,1").unwrap();
    }
    ring.push_str("3.0,6,0.5,0.9,1,0.3");
    write_vortex_file(run.path(), "ring.csv", &ring);

    let mut lo = lamb_oseen_csv(&[0.0], &[0.0, 0.5]);
    lo.push_str("1.0,0.5,NaN,0.1,inf\n");
    lo.push_str(&lamb_oseen_csv(&[2.0], &[0.5, 1.0]).replace(LAMB_OSEEN_HEADER, ""));
    lo.push_str("3.0,0.5,0.1");
    write_vortex_file(run.path(), "lamb_oseen.csv", &lo);

    let written = plot_run(run.path(), "degenerate").unwrap();
    check_pngs(&written, &[RING_SIZE, LAMB_OSEEN_SIZE]);
    assert!(count_color(&written[0], RING_SIZE, BLUE) > 100);
    demo_copy(&written, "degenerate-");

    // Exact agreement: every error is zero, so the log panel has nothing
    // to draw and says so.
    let exact = "t,r,u_theta,u_exact,rel_err\n0,0.5,0.2,0.2,0\n0,1,0.1,0.1,0\n";
    write_vortex_file(run.path(), "lamb_oseen.csv", exact);
    let written = plot_run(run.path(), "exact").unwrap();
    check_png(&written[1], LAMB_OSEEN_SIZE);
}
