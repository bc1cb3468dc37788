//! PNG plots from a `vpm` run directory.
//!
//! A run directory holds one subdirectory per solver, `spectral/` (always)
//! and `vortex/` (when the vortex particle method ran), each with
//!
//! * `energy.csv`: one row per step, columns including `t`, `K` (kinetic
//!   energy) and `T` (eddy turnover time);
//! * `spectra.csv`: columns `t`, `k`, `E`, one row per wavenumber shell at
//!   each kept time.
//!
//! [`plot_run`] reads them and writes `energy.png` (K/K0 against t/T0,
//! log–log) and `spectrum.png` (E(k), log–log) into the run directory,
//! overlaying the solvers that are present. The files may still be growing
//! while they are read (see [`read_csv_columns`]), and the PNGs are replaced
//! atomically, so plotting a live run is safe.
//!
//! Text is drawn with an embedded copy of DejaVu Sans, so no system fonts
//! are needed.

#![warn(missing_docs)]

mod axis;
mod plots;
mod render;
mod table;

pub use plots::{
    draw_energy, draw_spectra, EnergyCurve, Solver, SolverSpectra, Spectrum, ENERGY_SIZE,
    MAX_SPECTRUM_TIMES, SPECTRUM_SIZE,
};
pub use table::{read_csv_columns, Table};

use anyhow::Result;
use std::path::{Path, PathBuf};

/// File name of the energy-decay plot inside the run directory.
pub const ENERGY_PNG: &str = "energy.png";
/// File name of the spectrum plot inside the run directory.
pub const SPECTRUM_PNG: &str = "spectrum.png";

/// Draw every plot for a run directory; returns the PNG paths written.
///
/// Reads `<run_dir>/spectral/{energy,spectra}.csv` and, if the `vortex/`
/// subdirectory exists, `<run_dir>/vortex/{energy,spectra}.csv`, then writes
/// `<run_dir>/energy.png` and `<run_dir>/spectrum.png` (in that order in
/// the returned vector). `title` starts each plot's title.
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
pub fn plot_run(run_dir: &Path, title: &str) -> Result<Vec<PathBuf>> {
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
