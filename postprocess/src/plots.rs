//! The two figures of runs with a spectral solver: kinetic-energy decay
//! and energy spectra.

use crate::axis::{format_number, LinearAxis, LogAxis};
use crate::chart::{
    build_chart, draw_line, finite_points, no_data_note, positive_points, thin_evenly, time_color,
    ChartAxis, BLUE, RED,
};
use crate::render::{
    draw_legend, plot_err, render_png, write_atomic, Anchor, Canvas, LegendEntry, Stroke, FAMILY,
};
use crate::table::Table;
use anyhow::Result;
use plotters::prelude::*;
use std::path::Path;

/// Pixel size (width, height) of `energy.png` of a run with one solver.
pub const ENERGY_SIZE: (u32, u32) = (1000, 750);
/// Pixel size (width, height) of `spectrum.png` of a run with one solver
/// (the extra width holds the legend, which can be long).
pub const SPECTRUM_SIZE: (u32, u32) = (1200, 750);
/// Pixel height added below the plot of a run with both solvers for the
/// comparison panel (the relative difference of K, the ratio of E(k)).
pub const COMPARISON_PANEL_HEIGHT: u32 = 330;
/// Pixel size (width, height) of `energy.png` of a run with both solvers:
/// [`ENERGY_SIZE`] with the panel of (K_vortex − K_spectral)/K_spectral below.
pub const ENERGY_COMPARE_SIZE: (u32, u32) =
    (ENERGY_SIZE.0, ENERGY_SIZE.1 + COMPARISON_PANEL_HEIGHT);
/// Pixel size (width, height) of `spectrum.png` of a run with both solvers:
/// [`SPECTRUM_SIZE`] with the panel of E_vortex(k)/E_spectral(k) below.
pub const SPECTRUM_COMPARE_SIZE: (u32, u32) =
    (SPECTRUM_SIZE.0, SPECTRUM_SIZE.1 + COMPARISON_PANEL_HEIGHT);
/// The ratio axis of the spectrum's comparison panel reaches at most about
/// this factor below and above 1 (a small margin added); ratios beyond the
/// axis are not drawn.
pub const MAX_RATIO: f64 = 1e3;
/// The spectrum's comparison panel shows E_vortex/E_spectral at the shells
/// where both are at least this fraction of the spectral peak at that time.
pub const RATIO_FLOOR: f64 = 1e-8;
/// Colour of the reference line of a comparison panel (zero difference,
/// ratio one).
const REFERENCE: RGBColor = RGBColor(90, 90, 90);
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
    /// The K0 that `k_over_k0` is divided by (NaN when the table has no
    /// usable K), so that K = k_over_k0 · k0.
    pub k0: f64,
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
        let (t_over_t0, k_over_k0, k0) = match k0 {
            Some(k0) if t0.is_finite() && t0 > 0.0 => (
                t.iter().map(|t| t / t0).collect(),
                k.iter().map(|k| k / k0).collect(),
                k0,
            ),
            _ => (Vec::new(), Vec::new(), f64::NAN),
        };
        Ok(Self {
            solver,
            t_over_t0,
            k_over_k0,
            k0,
        })
    }

    /// The (t/T0, K) pairs with both finite, in increasing time.
    fn energies(&self) -> Vec<(f64, f64)> {
        let k: Vec<f64> = self.k_over_k0.iter().map(|k| k * self.k0).collect();
        let mut points = finite_points(&self.t_over_t0, &k);
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        points
    }
}

/// The relative difference (K_vortex − K_spectral)/K_spectral at the times
/// of `vortex`, as (t/T0, difference) pairs in increasing time: the
/// spectral K is taken at the same time, interpolated linearly between its
/// two neighbouring rows when no row has exactly that time (both solvers of
/// a run write their rows at the same times). Times outside the spectral
/// curve's range, and points where either K is not finite or the spectral
/// K is not positive, are left out. Both curves must share T0, as those of
/// one run do.
pub fn energy_difference(spectral: &EnergyCurve, vortex: &EnergyCurve) -> Vec<(f64, f64)> {
    let reference = spectral.energies();
    let mut out = Vec::new();
    for (t, k_vortex) in vortex.energies() {
        let i = reference.partition_point(|p| p.0 < t);
        let k_spectral = match (reference.get(i), i.checked_sub(1).map(|j| reference[j])) {
            (Some(&(ta, ka)), _) if ta == t => ka,
            (Some(&(tb, kb)), Some((ta, ka))) => ka + (kb - ka) * (t - ta) / (tb - ta),
            _ => continue,
        };
        if k_spectral.is_finite() && k_spectral > 0.0 {
            out.push((t, (k_vortex - k_spectral) / k_spectral));
        }
    }
    out
}

/// The first spectral and the first vortex item of `items` (`solver_of`
/// says whose an item is), when both solvers have one.
fn pair_of<T>(items: &[T], solver_of: impl Fn(&T) -> Solver) -> Option<(&T, &T)> {
    let find = |s: Solver| items.iter().find(|x| solver_of(x) == s);
    find(Solver::Spectral).zip(find(Solver::Vortex))
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
/// the PNG atomically to `path`.
///
/// With a spectral and a vortex curve the picture ([`ENERGY_COMPARE_SIZE`])
/// has a second panel below, on the same t/T0 axis: the relative difference
/// (K_vortex − K_spectral)/K_spectral ([`energy_difference`]) on a linear
/// axis that includes zero, with the zero line drawn. Otherwise it is the
/// plot alone ([`ENERGY_SIZE`]).
///
/// Points that cannot go on log axes (t = 0, non-positive, NaN, inf) are
/// skipped; with no drawable point at all the axes carry a "no data" note.
pub fn draw_energy(path: &Path, title: &str, curves: &[EnergyCurve]) -> Result<()> {
    let size = match pair_of(curves, |c| c.solver) {
        Some(_) => ENERGY_COMPARE_SIZE,
        None => ENERGY_SIZE,
    };
    let png = render_png(size, |root| draw_energy_on(root, title, curves))?;
    write_atomic(path, &png)
}

/// The area below a figure's title, split into the main plot and, when
/// `compare`, the comparison panel of [`COMPARISON_PANEL_HEIGHT`] below it.
fn split_panels<'a>(area: Canvas<'a>, compare: bool) -> (Canvas<'a>, Option<Canvas<'a>>) {
    if !compare {
        return (area, None);
    }
    let height = area.dim_in_pixel().1 as i32;
    let (upper, lower) = area.split_vertically(height - COMPARISON_PANEL_HEIGHT as i32);
    (upper, Some(lower))
}

/// One line of a comparison panel: its points and its style.
type PanelLine = (Vec<(f64, f64)>, ShapeStyle);

/// Draw a comparison panel on `panel`: the x axis `xa` of the plot above
/// (same pixel columns: the same margins and label areas), the y axis `ya`
/// described by `y_desc`, a reference line at y = `reference`, then the
/// `lines` (solid). Without any point the panel says so instead of drawing
/// the reference line (the note is drawn on `root`).
fn draw_comparison_panel<Y: ChartAxis>(
    root: &Canvas<'_>,
    panel: &Canvas<'_>,
    (xa, x_desc): (&LogAxis, &str),
    (ya, y_desc): (&Y, &str),
    reference: f64,
    lines: &[PanelLine],
) -> Result<()> {
    let mut chart = build_chart(panel, xa, ya, x_desc, y_desc)?;
    if lines.iter().all(|(points, _)| points.is_empty()) {
        let (px, py) = chart.plotting_area().get_pixel_range();
        return no_data_note(root, &px, &py);
    }
    chart
        .draw_series(LineSeries::new(
            [(xa.lo, reference), (xa.hi, reference)],
            REFERENCE.stroke_width(2),
        ))
        .map_err(plot_err)?;
    for (points, style) in lines {
        draw_line(&mut chart, points, xa, ya, *style, Stroke::Solid)?;
    }
    Ok(())
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
    let pair = pair_of(curves, |c| c.solver);
    let (upper, lower) = split_panels(area, pair.is_some());
    if let (Some((spectral, vortex)), Some(lower)) = (pair, &lower) {
        // Only the points that can go on the log t axis.
        let diff: Vec<(f64, f64)> = energy_difference(spectral, vortex)
            .into_iter()
            .filter(|p| p.0 > 0.0)
            .collect();
        let da = LinearAxis::covering(diff.iter().map(|p| p.1).chain([0.0]), 0.08);
        let style = RED.stroke_width(2);
        draw_comparison_panel(
            root,
            lower,
            (&xa, "t / T0"),
            (&da, "(K_v − K_s)/K_s"),
            0.0,
            &[(diff, style)],
        )?;
    }
    let mut chart = build_chart(&upper, &xa, &ya, "t / T0", "K / K0")?;

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
/// write the PNG atomically to `path`.
///
/// The E axis reaches at most 12 decades below the largest value so that
/// round-off tails do not squash the plot. Non-positive k or E, NaN and inf
/// are skipped. Times that agree to 1e-9 relative are treated as the same
/// time (same colour) across solvers. More than [`MAX_SPECTRUM_TIMES`]
/// distinct times are thinned evenly.
///
/// With both solvers the picture ([`SPECTRUM_COMPARE_SIZE`]) has a second
/// panel below, on the same k axis: E_vortex(k)/E_spectral(k) at every drawn
/// time both have (same colours), on a log axis with the line ratio = 1,
/// at the shells where both spectra are at least [`RATIO_FLOOR`] times the
/// spectral peak of that time (below it they are noise: round-off, the
/// particle evaluator's error); the ratio axis reaches at most about
/// [`MAX_RATIO`] either side of 1. Otherwise it is the plot alone
/// ([`SPECTRUM_SIZE`]).
pub fn draw_spectra(path: &Path, title: &str, series: &[SolverSpectra]) -> Result<()> {
    let size = match pair_of(series, |s| s.solver) {
        Some(_) => SPECTRUM_COMPARE_SIZE,
        None => SPECTRUM_SIZE,
    };
    let png = render_png(size, |root| draw_spectra_on(root, title, series))?;
    write_atomic(path, &png)
}

/// E_vortex(k)/E_spectral(k) of one time, from (k, E) pairs with E positive,
/// as (k, ratio) pairs in the order of `vortex`: at the wavenumbers both
/// have (same k) where both E are at least [`RATIO_FLOOR`] times the
/// largest spectral E.
fn spectrum_ratio(spectral: &[(f64, f64)], vortex: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let floor = RATIO_FLOOR * spectral.iter().fold(0.0, |m: f64, p| m.max(p.1));
    vortex
        .iter()
        .filter(|p| p.1 >= floor)
        .filter_map(|&(k, e_vortex)| {
            let &(_, e_spectral) = spectral.iter().find(|p| p.0 == k && p.1 >= floor)?;
            Some((k, e_vortex / e_spectral))
        })
        .collect()
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
    let plot_width = area.dim_in_pixel().0 as i32 - legend_w;
    let (upper, lower) = split_panels(area, pair_of(series, |s| s.solver).is_some());
    if let Some(lower) = lower {
        // The ratio at each time both solvers have.
        let points = |solver: Solver, ti: usize| {
            let line = lines.iter().find(|l| l.solver == solver && l.time == ti)?;
            Some(line.points.as_slice())
        };
        let ratios: Vec<PanelLine> = (0..times.len())
            .filter_map(|ti| {
                let ratio =
                    spectrum_ratio(points(Solver::Spectral, ti)?, points(Solver::Vortex, ti)?);
                Some((ratio, time_color(ti, times.len()).stroke_width(2)))
            })
            .collect();
        let ra = LogAxis::covering(
            ratios
                .iter()
                .flat_map(|(pts, _)| pts.iter().map(|p| p.1.clamp(1.0 / MAX_RATIO, MAX_RATIO)))
                .chain([1.0]),
        );
        let (lower_plot, _) = lower.split_horizontally(plot_width);
        draw_comparison_panel(
            root,
            &lower_plot,
            (&xa, "k"),
            (&ra, "E_v/E_s"),
            1.0,
            &ratios,
        )?;
    }
    let (plot_area, _) = upper.split_horizontally(plot_width);
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

    #[test]
    fn spectrum_ratio_above_the_floor() {
        // Shell 4 is in the vortex spectrum only, shell 3 below the floor in
        // the spectral one, shell 5 in the vortex one.
        let spectral = [(1.0, 1.0), (2.0, 0.5), (3.0, 1e-9)];
        let vortex = [(1.0, 0.5), (2.0, 0.75), (3.0, 0.1), (4.0, 0.1), (5.0, 1e-9)];
        assert_eq!(
            spectrum_ratio(&spectral, &vortex),
            vec![(1.0, 0.5), (2.0, 1.5)]
        );
        assert!(spectrum_ratio(&[], &vortex).is_empty());
    }
}
