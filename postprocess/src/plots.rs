//! The two figures of runs with a spectral solver: kinetic-energy decay
//! and energy spectra.

use crate::axis::{format_number, LogAxis};
use crate::chart::{
    build_chart, draw_line, no_data_note, positive_points, thin_evenly, time_color, BLUE, RED,
};
use crate::render::{
    draw_legend, plot_err, render_png, write_atomic, Anchor, Canvas, LegendEntry, Stroke, FAMILY,
};
use crate::table::Table;
use anyhow::Result;
use plotters::prelude::*;
use std::path::Path;

/// Pixel size (width, height) of `energy.png`.
pub const ENERGY_SIZE: (u32, u32) = (1000, 750);
/// Pixel size (width, height) of `spectrum.png` (the extra width holds the
/// legend, which can be long).
pub const SPECTRUM_SIZE: (u32, u32) = (1200, 750);
/// At most this many spectrum times are drawn; beyond it the times are
/// thinned evenly (first and last kept) so the lines stay distinguishable.
pub const MAX_SPECTRUM_TIMES: usize = 12;

/// The solvers whose output a run directory can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Solver {
    /// The pseudo-spectral reference solver, in `<run>/spectral/`.
    Spectral,
    /// The vortex particle method, in `<run>/vortex/`.
    Vortex,
}

impl Solver {
    /// All solvers, in plotting order.
    pub const ALL: [Solver; 2] = [Solver::Spectral, Solver::Vortex];

    /// Subdirectory of the run directory holding this solver's files.
    pub fn dir_name(self) -> &'static str {
        match self {
            Solver::Spectral => "spectral",
            Solver::Vortex => "vortex",
        }
    }

    /// Name used in plot legends.
    pub fn label(self) -> &'static str {
        match self {
            Solver::Spectral => "spectral",
            Solver::Vortex => "vortex particles",
        }
    }

    fn stroke(self) -> Stroke {
        match self {
            Solver::Spectral => Stroke::Solid,
            Solver::Vortex => Stroke::Dashed,
        }
    }

    /// Line colour in the energy plot.
    fn energy_color(self) -> RGBColor {
        match self {
            Solver::Spectral => BLUE,
            Solver::Vortex => RED,
        }
    }
}

/// Normalised kinetic-energy history of one solver.
#[derive(Clone, Debug, PartialEq)]
pub struct EnergyCurve {
    /// Which solver produced it (sets label and line style).
    pub solver: Solver,
    /// Time over the initial eddy turnover time, t / T0.
    pub t_over_t0: Vec<f64>,
    /// Kinetic energy over its initial value, K / K0.
    pub k_over_k0: Vec<f64>,
}

impl EnergyCurve {
    /// Build the curve from an `energy.csv` table (columns `t` and `K`).
    ///
    /// K0 is `K` in the first row (or the first positive finite `K` if
    /// that one is unusable). `t0` is the turnover time to divide by; when
    /// it is not positive and finite the curve is empty.
    pub fn from_table(solver: Solver, table: &Table, t0: f64) -> Result<Self> {
        let [t, k] = table.columns(["t", "K"])?;
        let k0 = first_positive(k);
        let (t_over_t0, k_over_k0) = match k0 {
            Some(k0) if t0.is_finite() && t0 > 0.0 => (
                t.iter().map(|t| t / t0).collect(),
                k.iter().map(|k| k / k0).collect(),
            ),
            _ => (Vec::new(), Vec::new()),
        };
        Ok(Self {
            solver,
            t_over_t0,
            k_over_k0,
        })
    }
}

/// The first value of `v` when it is positive and finite, else the first
/// positive finite value further on.
pub(crate) fn first_positive(v: &[f64]) -> Option<f64> {
    v.iter().copied().find(|x| x.is_finite() && *x > 0.0)
}

/// One energy spectrum E(k) at time `t`.
#[derive(Clone, Debug, PartialEq)]
pub struct Spectrum {
    /// Simulation time of the spectrum.
    pub t: f64,
    /// Shell wavenumbers.
    pub k: Vec<f64>,
    /// Shell energies, same length as `k`.
    pub e: Vec<f64>,
}

/// All kept spectra of one solver, in increasing time.
#[derive(Clone, Debug, PartialEq)]
pub struct SolverSpectra {
    /// Which solver produced them (sets label and line style).
    pub solver: Solver,
    /// The spectra, sorted by time.
    pub spectra: Vec<Spectrum>,
}

impl SolverSpectra {
    /// Group the rows of a `spectra.csv` table (columns `t`, `k`, `E`) by
    /// time. Rows with a non-finite `t` are dropped.
    pub fn from_table(solver: Solver, table: &Table) -> Result<Self> {
        let [t, k, e] = table.columns(["t", "k", "E"])?;
        let mut spectra: Vec<Spectrum> = Vec::new();
        for i in 0..t.len() {
            if !t[i].is_finite() {
                continue;
            }
            // Rows of one time are normally consecutive: check the last first.
            let idx = match spectra.iter().rposition(|s| s.t == t[i]) {
                Some(idx) => idx,
                None => {
                    spectra.push(Spectrum {
                        t: t[i],
                        k: Vec::new(),
                        e: Vec::new(),
                    });
                    spectra.len() - 1
                }
            };
            spectra[idx].k.push(k[i]);
            spectra[idx].e.push(e[i]);
        }
        spectra.sort_by(|a, b| a.t.total_cmp(&b.t));
        Ok(Self { solver, spectra })
    }
}

/// Draw K/K0 against t/T0 on log–log axes, one line per curve, and write
/// the PNG ([`ENERGY_SIZE`]) atomically to `path`.
///
/// Points that cannot go on log axes (t = 0, non-positive, NaN, inf) are
/// skipped; with no drawable point at all the axes carry a "no data" note.
pub fn draw_energy(path: &Path, title: &str, curves: &[EnergyCurve]) -> Result<()> {
    let png = render_png(ENERGY_SIZE, |root| draw_energy_on(root, title, curves))?;
    write_atomic(path, &png)
}

fn draw_energy_on(root: &Canvas<'_>, title: &str, curves: &[EnergyCurve]) -> Result<()> {
    let points: Vec<Vec<(f64, f64)>> = curves
        .iter()
        .map(|c| positive_points(&c.t_over_t0, &c.k_over_k0))
        .collect();
    let xa = LogAxis::covering(points.iter().flatten().map(|p| p.0));
    let ya = LogAxis::covering(points.iter().flatten().map(|p| p.1));
    let area = root
        .titled(&format!("{title}: kinetic energy decay"), (FAMILY, 28))
        .map_err(plot_err)?;
    let mut chart = build_chart(&area, &xa, &ya, "t / T0", "K / K0")?;

    let mut legend = Vec::new();
    for (curve, pts) in curves.iter().zip(&points) {
        if pts.is_empty() {
            continue;
        }
        let style = curve.solver.energy_color().stroke_width(3);
        draw_line(&mut chart, pts, &xa, &ya, style, curve.solver.stroke())?;
        legend.push(LegendEntry {
            label: curve.solver.label().to_string(),
            style,
            stroke: curve.solver.stroke(),
        });
    }
    let (px, py) = chart.plotting_area().get_pixel_range();
    if points.iter().all(Vec::is_empty) {
        no_data_note(root, &px, &py)?;
    }
    draw_legend(
        root,
        Anchor::TopRight(px.end - 12, py.start + 12),
        &legend,
        None,
        18,
        26,
    )
}

/// Draw E(k) on log–log axes, one line per time and solver (colour by
/// time, solid for the spectral solver, dashed for vortex particles), and
/// write the PNG ([`SPECTRUM_SIZE`]) atomically to `path`.
///
/// The E axis reaches at most 12 decades below the largest value so that
/// round-off tails do not squash the plot. Non-positive k or E, NaN and inf
/// are skipped. Times that agree to 1e-9 relative are treated as the same
/// time (same colour) across solvers. More than [`MAX_SPECTRUM_TIMES`]
/// distinct times are thinned evenly.
pub fn draw_spectra(path: &Path, title: &str, series: &[SolverSpectra]) -> Result<()> {
    let png = render_png(SPECTRUM_SIZE, |root| draw_spectra_on(root, title, series))?;
    write_atomic(path, &png)
}

/// One line of the spectrum plot.
struct SpectrumLine {
    solver: Solver,
    /// Index into the drawn times (sets the colour).
    time: usize,
    points: Vec<(f64, f64)>,
}

fn same_time(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(f64::MIN_POSITIVE)
}

fn draw_spectra_on(root: &Canvas<'_>, title: &str, series: &[SolverSpectra]) -> Result<()> {
    // Distinct times over all solvers, then the ones that will be drawn.
    let mut times: Vec<f64> = series
        .iter()
        .flat_map(|s| s.spectra.iter().map(|sp| sp.t))
        .filter(|t| t.is_finite())
        .collect();
    times.sort_by(f64::total_cmp);
    times.dedup_by(|a, b| same_time(*a, *b));
    let total_times = times.len();
    let times = thin_evenly(&times, MAX_SPECTRUM_TIMES);

    let mut lines: Vec<SpectrumLine> = Vec::new();
    for s in series {
        for sp in &s.spectra {
            if let Some(ti) = times.iter().position(|&t| same_time(t, sp.t)) {
                lines.push(SpectrumLine {
                    solver: s.solver,
                    time: ti,
                    points: positive_points(&sp.k, &sp.e),
                });
            }
        }
    }

    let xa = LogAxis::covering(lines.iter().flat_map(|l| l.points.iter().map(|p| p.0)));
    let e_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(f64::NEG_INFINITY, f64::max);
    let ya = LogAxis::covering(
        lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .filter(|&e| e >= e_max * 1e-12),
    );

    let area = root
        .titled(&format!("{title}: energy spectrum"), (FAMILY, 28))
        .map_err(plot_err)?;
    let legend_w = 250;
    let (plot_area, _) = area.split_horizontally(area.dim_in_pixel().0 as i32 - legend_w);
    let mut chart = build_chart(&plot_area, &xa, &ya, "k", "E(k)")?;

    // With both solvers, the spectral lines become wide pale bands so that
    // the dashed vortex lines stay visible where the two agree.
    let overlay = lines
        .iter()
        .any(|l| l.solver == Solver::Vortex && !l.points.is_empty());
    let mut legend = Vec::new();
    for solver in Solver::ALL {
        for line in lines
            .iter()
            .filter(|l| l.solver == solver && !l.points.is_empty())
        {
            let color = time_color(line.time, times.len());
            let style = match solver {
                Solver::Spectral if overlay => color.mix(0.45).stroke_width(5),
                _ => color.stroke_width(2),
            };
            draw_line(&mut chart, &line.points, &xa, &ya, style, solver.stroke())?;
            legend.push(LegendEntry {
                label: format!(
                    "{} t={}",
                    solver.label(),
                    format_number(times[line.time], 4)
                ),
                style,
                stroke: solver.stroke(),
            });
        }
    }
    let (px, py) = chart.plotting_area().get_pixel_range();
    if lines.iter().all(|l| l.points.is_empty()) {
        no_data_note(root, &px, &py)?;
    }
    let note = (times.len() < total_times)
        .then(|| format!("({} of {} times shown)", times.len(), total_times));
    // Rows shrink when there are many entries so the box fits the height.
    let rows = legend.len() + usize::from(note.is_some());
    let line_px = ((py.end - py.start - 20) / rows.max(1) as i32).clamp(12, 24);
    let font_px = (line_px as u32 * 3 / 4).clamp(10, 16);
    draw_legend(
        root,
        Anchor::TopLeft(px.end + 20, py.start),
        &legend,
        note.as_deref(),
        font_px,
        line_px,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spectra_grouped_by_time() {
        let table = Table {
            path: "s.csv".into(),
            headers: vec!["t".into(), "k".into(), "E".into()],
            columns: vec![
                vec![1.0, 1.0, 0.0, 0.0, f64::NAN],
                vec![1.0, 2.0, 1.0, 2.0, 1.0],
                vec![0.5, 0.25, 1.0, 0.5, 1.0],
            ],
        };
        let s = SolverSpectra::from_table(Solver::Spectral, &table).unwrap();
        assert_eq!(s.spectra.len(), 2);
        assert_eq!(s.spectra[0].t, 0.0);
        assert_eq!(s.spectra[0].e, vec![1.0, 0.5]);
        assert_eq!(s.spectra[1].k, vec![1.0, 2.0]);
    }
}
