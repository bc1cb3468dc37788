//! PNG plots from a `vpm` run directory.
//!
//! A run directory is one of two kinds.
//!
//! **Turbulence runs** hold one subdirectory per solver, `spectral/`
//! (always) and `vortex/` (when the vortex particle method ran), each with
//!
//! * `energy.csv`: one row per step, columns including `t`, `K` (kinetic
//!   energy) and `T` (eddy turnover time);
//! * `spectra.csv`: columns `t`, `k`, `E`, one row per wavenumber shell at
//!   each kept time.
//!
//! [`plot_run`] reads them and writes `energy.png` (K/K0 against t/T0,
//! log–log) and `spectrum.png` (E(k), log–log) into the run directory,
//! overlaying the solvers that are present. With both solvers each picture
//! has a second panel below: (K_vortex − K_spectral)/K_spectral against
//! t/T0, and E_vortex(k)/E_spectral(k) at the kept times.
//!
//! A turbulence run may also hold 3-D field snapshots,
//! `fields/<solver>-<step:08>.npz` (see [`read_fields`] and [`layout`]).
//! For every step with one, [`plot_run`] also draws
//! `structures-<step:08>.png`, the vortex cores as shaded isosurfaces of Q
//! seen in 3-D (see [`draw_structures`]), and `vorticity-<step:08>.png`,
//! |ω| on the mid-plane z = 0 (see [`draw_vorticity_slice`]), the solvers
//! side by side; [`plot_fields_at`] draws the two pictures of one step.
//!
//! **Particle-only runs** (free-space vortex ring, Lamb–Oseen tube) have no
//! `spectral/` directory; their `vortex/` directory holds one or both of
//!
//! * `ring.csv`: one row per output time, columns `t, step, dt, z, radius,
//!   speed, saffman_speed, core, impulse_x, impulse_y, impulse_z,
//!   total_strength, particles, sigma_max_over_sigma0` (z: ring position
//!   along its axis; speed: ring speed measured from the particles;
//!   saffman_speed: Saffman's U = Γ/(4πR)[ln(8R/σ) − 0.9045] at that time;
//!   core: σ at that time);
//! * `rings.csv` (coaxial rings): one row per ring at each output time,
//!   columns [`layout::RINGS_COLUMNS`] (`ring` numbers the rings; `z`,
//!   `radius`: that ring's axial position and impulse radius);
//! * `lamb_oseen.csv`: columns `t, r, u_theta, u_exact, rel_err`, one row
//!   per radius at each output time.
//!
//! [`plot_run`] then writes `ring.png` (ring position and speed against t,
//! particles against Saffman's formula), `rings.png` (each ring's radius
//! and position against t) and/or `lamb-oseen.png` (u_θ(r) against the
//! exact profile, and the relative error on a log axis).
//! A run directory with neither a `spectral/` directory nor one of these
//! files is an error naming it.
//!
//! Columns are found by name, so extra columns are harmless. The files may
//! still be growing while they are read (see [`read_csv_columns`]), and the
//! PNGs are replaced atomically, so plotting a live run is safe.
//!
//! Text is drawn with an embedded copy of DejaVu Sans, so no system fonts
//! are needed.

#![warn(missing_docs)]

mod axis;
mod chart;
mod fields;
pub mod gravity;
pub mod isosurface;
pub mod layout;
mod particles;
mod plots;
mod raster;
mod render;
mod structures;
mod table;

pub use fields::{field_steps, fields_npz, q_rms, read_fields, FieldPanel, FieldSnapshot};
pub use structures::{
    draw_structures, draw_vorticity_slice, structures_size, vorticity_size, QLevel,
};

pub use particles::{
    draw_lamb_oseen, draw_ring, draw_rings, saffman_position, LambOseenProfiles, OneRing,
    RingHistory, RingsHistory, VelocityProfile, LAMB_OSEEN_SIZE, MAX_PROFILE_TIMES,
    REL_ERR_REFERENCE, RINGS_SIZE, RING_SIZE,
};
pub use plots::{
    draw_energy, draw_spectra, energy_difference, EnergyCurve, Solver, SolverSpectra, Spectrum,
    COMPARISON_PANEL_HEIGHT, ENERGY_COMPARE_SIZE, ENERGY_SIZE, MAX_RATIO, MAX_SPECTRUM_TIMES,
    RATIO_FLOOR, SPECTRUM_COMPARE_SIZE, SPECTRUM_SIZE,
};
pub use table::{read_csv_columns, Table};

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

pub use layout::{
    ENERGY_PNG, LAMB_OSEEN_CSV, LAMB_OSEEN_PNG, RINGS_CSV, RINGS_PNG, RING_CSV, RING_PNG,
    SPECTRUM_PNG,
};

/// The default factor c of the isosurface level Q = c·Q_rms.
pub const DEFAULT_Q_LEVEL: f64 = 1.0;

/// Settings of the plots.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotOptions {
    /// The factor c of the isosurface level in the structures pictures:
    /// both solvers' surfaces are drawn at Q = c·Q_rms, Q_rms = √(mean Q²)
    /// of the spectral solver's field at that time. Default
    /// [`DEFAULT_Q_LEVEL`].
    pub q_level: f64,
    /// Whether [`plot_run_with`] draws the pictures of the field snapshots too (default); a
    /// run that drew them as it wrote the fields leaves them out at its end.
    pub field_pictures: bool,
    /// A gravity run's picture times (`gravity.pictures_times`): the density and galaxies
    /// pictures are drawn at the body snapshots of these times; empty: a few snapshots spread
    /// evenly.
    pub picture_times: Vec<f64>,
}

impl Default for PlotOptions {
    fn default() -> Self {
        Self {
            q_level: DEFAULT_Q_LEVEL,
            field_pictures: true,
            picture_times: Vec::new(),
        }
    }
}

/// Draw every plot for a run directory with the default [`PlotOptions`];
/// returns the PNG paths written. See [`plot_run_with`].
///
/// # Errors
///
/// Those of [`plot_run_with`].
pub fn plot_run(run_dir: &Path, title: &str) -> Result<Vec<PathBuf>> {
    plot_run_with(run_dir, title, &PlotOptions::default())
}

/// Draw every plot for a run directory; returns the PNG paths written.
///
/// A run directory with a `spectral/` subdirectory is a turbulence run:
/// see [`plot_solver_run`], then, unless `options.field_pictures` is off,
/// for every step with a field snapshot in `fields/` (in increasing step
/// order), [`plot_fields_at`]; the paths
/// come in that order (energy, spectrum, then per step the structures and
/// the vorticity picture); `options` sets the isosurface level. Otherwise
/// it is a particle-only run: `<run_dir>/ring.png` is drawn when
/// [`RING_CSV`] exists, `<run_dir>/rings.png` when [`RINGS_CSV`] exists and
/// then `<run_dir>/lamb-oseen.png` when [`LAMB_OSEEN_CSV`] exists, in that
/// order in the returned vector. A gravity run (with `gravity/energy.csv`) gets its pictures
/// from [`gravity::plot_gravity_run`]. `title` starts each plot's title.
///
/// # Errors
///
/// A run directory with none of these files (or none at all) gives an
/// error naming it and the files looked for; the other errors are those
/// of [`plot_solver_run`] and [`plot_particle_run`]; a step whose pictures
/// fail ([`plot_fields_at`]) does not stop the other steps, and the error
/// then lists every step that failed.
pub fn plot_run_with(run_dir: &Path, title: &str, options: &PlotOptions) -> Result<Vec<PathBuf>> {
    if run_dir.join(layout::GRAVITY_CSV).is_file() {
        let steps = if options.picture_times.is_empty() {
            None
        } else {
            Some(gravity::snapshot_steps_at(run_dir, &options.picture_times)?)
        };
        let gravity = gravity::GravityPlotOptions {
            steps,
            ..Default::default()
        };
        return gravity::plot_gravity_run(run_dir, title, &gravity);
    }
    if run_dir.join(Solver::Spectral.dir_name()).is_dir() {
        let mut written = plot_solver_run(run_dir, title)?;
        if !options.field_pictures {
            return Ok(written);
        }
        // A bad snapshot does not stop the pictures of the other steps.
        let mut failed = Vec::new();
        for step in field_steps(run_dir)? {
            match plot_fields_at(run_dir, step, title, options) {
                Ok(paths) => written.extend(paths),
                Err(e) => failed.push(format!("step {step}: {e:#}")),
            }
        }
        if !failed.is_empty() {
            bail!(
                "the pictures of {} field snapshot(s) could not be drawn (the other plots were): {}",
                failed.len(),
                failed.join("; ")
            );
        }
        Ok(written)
    } else {
        plot_particle_run(run_dir, title)
    }
}

/// Draw the two pictures of the field snapshots of one step; returns the
/// PNG paths written: `<run_dir>/structures-<step:08>.png` (see
/// [`draw_structures`]) and `<run_dir>/vorticity-<step:08>.png` (see
/// [`draw_vorticity_slice`]), in that order.
///
/// Reads `<run_dir>/fields/spectral-<step:08>.npz` and
/// `<run_dir>/fields/vortex-<step:08>.npz` (see [`read_fields`]), those
/// that exist, spectral first. The isosurface level is
/// `options.q_level` times Q_rms of the spectral field (of the vortex
/// field when there is no spectral one).
///
/// # Errors
///
/// Neither file exists; a file cannot be read (see [`read_fields`]); the
/// level is not finite (a non-finite `q_level` or Q); drawing or writing
/// fails. Each error names the file concerned.
pub fn plot_fields_at(
    run_dir: &Path,
    step: u64,
    title: &str,
    options: &PlotOptions,
) -> Result<Vec<PathBuf>> {
    let mut snapshots = Vec::new();
    for solver in Solver::ALL {
        let path = fields_npz(run_dir, solver, step);
        if path.is_file() {
            snapshots.push((solver, read_fields(&path)?, path));
        }
    }
    let Some((reference, first, first_path)) = snapshots.first() else {
        bail!(
            "no field snapshot of step {step}: neither {} nor {} exists",
            fields_npz(run_dir, Solver::Spectral, step).display(),
            fields_npz(run_dir, Solver::Vortex, step).display()
        );
    };
    let level = QLevel {
        factor: options.q_level,
        q_rms: q_rms(&first.q),
        reference: *reference,
    };
    if !level.value().is_finite() {
        bail!(
            "{}: the isosurface level is not finite: {} (c = {})",
            first_path.display(),
            level.caption(),
            options.q_level
        );
    }
    let panels: Vec<FieldPanel<'_>> = snapshots
        .iter()
        .map(|(solver, fields, _)| FieldPanel {
            solver: *solver,
            fields,
        })
        .collect();
    let structures = run_dir.join(layout::structures_png(step));
    let vorticity = run_dir.join(layout::vorticity_slice_png(step));
    let named = || {
        snapshots
            .iter()
            .map(|(_, _, p)| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" and ")
    };
    draw_structures(&structures, title, &panels, level)
        .with_context(|| format!("fields from {}", named()))?;
    draw_vorticity_slice(&vorticity, title, &panels)
        .with_context(|| format!("fields from {}", named()))?;
    Ok(vec![structures, vorticity])
}

/// Draw the energy and spectrum plots of a turbulence run; returns the
/// PNG paths written.
///
/// Reads `<run_dir>/spectral/{energy,spectra}.csv` and, if the `vortex/`
/// subdirectory exists, `<run_dir>/vortex/{energy,spectra}.csv`, then writes
/// `<run_dir>/energy.png` and `<run_dir>/spectrum.png` (in that order in
/// the returned vector), each with its comparison panel when `vortex/`
/// exists (see [`draw_energy`], [`draw_spectra`]). `title` starts each
/// plot's title.
///
/// In the energy plot every solver's K is divided by its own first-row K0,
/// and every solver's t by the same T0: the spectral solver's first-row
/// `T` (the vortex solver's when the spectral file has no rows yet). Should
/// a first-row value be zero, negative or not finite, the first usable one
/// further down is taken instead.
///
/// # Errors
///
/// A missing file, a missing required column (`t`, `K` in `energy.csv`, `T`
/// in the file T0 comes from, `t`, `k`, `E` in `spectra.csv`) or a
/// malformed line before the last one gives an error naming the file. Empty
/// tables are not an error: the plot then says there is no data.
pub fn plot_solver_run(run_dir: &Path, title: &str) -> Result<Vec<PathBuf>> {
    let solvers: Vec<Solver> = Solver::ALL
        .into_iter()
        .filter(|&s| s == Solver::Spectral || run_dir.join(s.dir_name()).is_dir())
        .collect();

    let mut energy = Vec::new();
    let mut spectra = Vec::new();
    for &solver in &solvers {
        let dir = run_dir.join(solver.dir_name());
        energy.push((solver, read_csv_columns(dir.join("energy.csv"))?));
        spectra.push(read_csv_columns(dir.join("spectra.csv"))?);
    }

    // One T0 for all solvers so that the time axis means the same thing.
    let reference = energy
        .iter()
        .find(|(_, table)| !table.is_empty())
        .map(|(_, table)| table);
    let t0 = match reference {
        Some(table) => plots::first_positive(table.column("T")?).unwrap_or(f64::NAN),
        None => f64::NAN,
    };
    let curves = energy
        .iter()
        .map(|(solver, table)| EnergyCurve::from_table(*solver, table, t0))
        .collect::<Result<Vec<_>>>()?;
    let series = solvers
        .iter()
        .zip(&spectra)
        .map(|(&solver, table)| SolverSpectra::from_table(solver, table))
        .collect::<Result<Vec<_>>>()?;

    let energy_png = run_dir.join(ENERGY_PNG);
    let spectrum_png = run_dir.join(SPECTRUM_PNG);
    draw_energy(&energy_png, title, &curves)?;
    draw_spectra(&spectrum_png, title, &series)?;
    Ok(vec![energy_png, spectrum_png])
}

/// Draw the plots of a particle-only run: `ring.png` from [`RING_CSV`]
/// (see [`draw_ring`]), `rings.png` from [`RINGS_CSV`] (see
/// [`draw_rings`]) and `lamb-oseen.png` from [`LAMB_OSEEN_CSV`] (see
/// [`draw_lamb_oseen`]), each only when its file exists; returns the PNG
/// paths written, in that order.
///
/// # Errors
///
/// When none of the files exists, an error naming the run directory (or
/// saying that it does not exist). A missing required column or a malformed line
/// before the last one gives an error naming the file. Files without data
/// rows are not an error: the plot then says there is no data.
pub fn plot_particle_run(run_dir: &Path, title: &str) -> Result<Vec<PathBuf>> {
    if !run_dir.is_dir() {
        bail!("{}: no such directory", run_dir.display());
    }
    let ring_csv = run_dir.join(RING_CSV);
    let rings_csv = run_dir.join(RINGS_CSV);
    let lamb_oseen_csv = run_dir.join(LAMB_OSEEN_CSV);
    let mut written = Vec::new();
    if ring_csv.is_file() {
        let ring = RingHistory::from_table(&read_csv_columns(&ring_csv)?)?;
        let png = run_dir.join(RING_PNG);
        draw_ring(&png, title, &ring)?;
        written.push(png);
    }
    if rings_csv.is_file() {
        let rings = RingsHistory::from_table(&read_csv_columns(&rings_csv)?)?;
        let png = run_dir.join(RINGS_PNG);
        draw_rings(&png, title, &rings)?;
        written.push(png);
    }
    if lamb_oseen_csv.is_file() {
        let profiles = LambOseenProfiles::from_table(&read_csv_columns(&lamb_oseen_csv)?)?;
        let png = run_dir.join(LAMB_OSEEN_PNG);
        draw_lamb_oseen(&png, title, &profiles)?;
        written.push(png);
    }
    if written.is_empty() {
        bail!(
            "{}: nothing to plot: found neither spectral/ (with energy.csv and spectra.csv) \
             nor {RING_CSV} nor {RINGS_CSV} nor {LAMB_OSEEN_CSV}",
            run_dir.display()
        );
    }
    Ok(written)
}
