//! The pictures of one output step's 3-D fields: Q isosurfaces (vortex
//! structures) and |ω| on the mid-plane z = 0, the solvers side by side.

use crate::axis::{format_number, LinearAxis};
use crate::chart::Scale;
use crate::fields::{mean_square, FieldPanel, FieldSnapshot};
use crate::isosurface::PeriodicGrid;
use crate::plots::Solver;
use crate::raster::render_isosurface;
use crate::render::{plot_err, render_png, write_atomic, Canvas, FAMILY};
use anyhow::{bail, Context, Result};
use plotters::prelude::*;
use plotters::style::colors::colormaps::{ColorMap, ViridisRGB};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::f64::consts::PI;
use std::path::Path;

/// Width of one panel of the structures picture, in pixels.
const STRUCTURES_PANEL_W: u32 = 760;
/// Height of the 3-D viewport of a structures panel.
const STRUCTURES_VIEW_H: u32 = 700;
/// Heights of the title band, the panel-title band and the caption band.
const TITLE_H: u32 = 56;
const SUBTITLE_H: u32 = 40;
const CAPTION_H: u32 = 56;

/// Width of one panel of the vorticity picture, and of its colour bar.
const SLICE_PANEL_W: u32 = 640;
const COLORBAR_W: u32 = 170;
/// Height of the vorticity picture.
const SLICE_H: u32 = 704;

/// Pixel size (width, height) of `structures-<step>.png` with `panels`
/// panels side by side (one per solver; at least one is counted).
pub fn structures_size(panels: usize) -> (u32, u32) {
    (
        STRUCTURES_PANEL_W * panels.max(1) as u32,
        TITLE_H + SUBTITLE_H + STRUCTURES_VIEW_H + CAPTION_H,
    )
}

/// Pixel size (width, height) of `vorticity-<step>.png` with `panels`
/// panels side by side (at least one is counted) and the colour bar.
pub fn vorticity_size(panels: usize) -> (u32, u32) {
    (SLICE_PANEL_W * panels.max(1) as u32 + COLORBAR_W, SLICE_H)
}

/// The isosurface level of the structures picture: Q = `factor` ·
/// `q_rms`, the same level for every panel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QLevel {
    /// The factor c (see [`crate::PlotOptions::q_level`]).
    pub factor: f64,
    /// √(mean Q²) of the reference solver's field.
    pub q_rms: f64,
    /// The solver whose Q gave `q_rms` (the spectral one when present).
    pub reference: Solver,
}

impl QLevel {
    /// The level c · Q_rms.
    pub fn value(&self) -> f64 {
        self.factor * self.q_rms
    }

    /// The caption printed under the picture, e.g.
    /// `isosurface Q = c·Q_rms(spectral) = 1.5 × 0.3062 = 0.4592`.
    pub fn caption(&self) -> String {
        format!(
            "isosurface Q = c·Q_rms({}) = {} × {} = {}",
            self.reference.dir_name(),
            format_number(self.factor, 4),
            format_number(self.q_rms, 4),
            format_number(self.value(), 4)
        )
    }
}

/// Surface colour of a solver: a blue for the spectral solver, an orange
/// red for vortex particles (lighter versions of the energy plot's lines,
/// so that the shading shows).
fn surface_color(solver: Solver) -> [u8; 3] {
    match solver {
        Solver::Spectral => [70, 125, 215],
        Solver::Vortex => [225, 100, 55],
    }
}

const GREY_TEXT: RGBColor = RGBColor(70, 70, 70);

pub(crate) fn centred(px: u32) -> TextStyle<'static> {
    (FAMILY, px)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Center))
}

/// Draw `text` centred at `at` in a font of `px` pixels, or smaller (down
/// to 14) when it would be wider than `max_w`.
pub(crate) fn draw_fitted(
    root: &Canvas<'_>,
    text: &str,
    at: (i32, i32),
    px: u32,
    max_w: i32,
) -> Result<()> {
    let mut size = px;
    while size > 14 {
        let (w, _) = root
            .estimate_text_size(text, &centred(size))
            .map_err(plot_err)?;
        if w as i32 <= max_w {
            break;
        }
        size -= 1;
    }
    root.draw(&Text::new(text.to_string(), at, centred(size)))
        .map_err(plot_err)
}

/// Check the panels, naming the solver of a bad one.
fn check_panels(panels: &[FieldPanel<'_>]) -> Result<()> {
    if panels.is_empty() {
        bail!("no fields to draw");
    }
    for p in panels {
        p.fields
            .check()
            .with_context(|| format!("{} fields", p.solver.dir_name()))?;
    }
    Ok(())
}

/// "t = 1.234, step 125" of a snapshot.
fn time_label(f: &FieldSnapshot) -> String {
    format!("t = {}, step {}", format_number(f.t, 5), f.step)
}

/// The title's time: the first panel's, and the other panels' in their
/// own titles when they differ.
fn differs_in_time(a: &FieldSnapshot, b: &FieldSnapshot) -> bool {
    a.step != b.step || (a.t - b.t).abs() > 1e-9 * a.t.abs().max(b.t.abs())
}

/// Draw the Q isosurfaces of `panels` side by side (each the surface
/// Q = `level` of its own field, shaded, seen by the same fixed camera in
/// the box [−π, π]³) and write the PNG ([`structures_size`]) atomically
/// to `png`. `title` starts the picture's title, which gives the time and
/// step of the first panel; the caption gives the level
/// ([`QLevel::caption`]). A panel whose surface is empty says so.
///
/// # Errors
///
/// No panels, a panel whose arrays do not fit its `n` (see
/// [`FieldSnapshot::check`]), a non-finite level, or a failure to draw or
/// write: an error naming `png`.
pub fn draw_structures(
    png: &Path,
    title: &str,
    panels: &[FieldPanel<'_>],
    level: QLevel,
) -> Result<()> {
    let result = (|| {
        check_panels(panels)?;
        let value = level.value();
        if !value.is_finite() || !(value as f32).is_finite() {
            bail!(
                "the isosurface level {} is not a finite number ({})",
                format_number(value, 4),
                level.caption()
            );
        }
        let bytes = render_png(structures_size(panels.len()), |root| {
            draw_structures_on(root, title, panels, level)
        })?;
        write_atomic(png, &bytes)
    })();
    result.with_context(|| format!("cannot draw {}", png.display()))
}

fn draw_structures_on(
    root: &Canvas<'_>,
    title: &str,
    panels: &[FieldPanel<'_>],
    level: QLevel,
) -> Result<()> {
    let (w, h) = structures_size(panels.len());
    let first = panels[0].fields;
    draw_fitted(
        root,
        &format!("{title}: Q isosurfaces, {}", time_label(first)),
        ((w / 2) as i32, (TITLE_H / 2) as i32 + 4),
        28,
        w as i32 - 20,
    )?;
    // A flow without vortex structures (a shear flow, say) has Q = 0 up to round-off, and a
    // surface at c·Q_rms would trace that noise: no surface is drawn when Q_rms is below
    // 1e-6 of ⟨|ω|²⟩ (the scale of ‖Ω‖², hence of Q) of the reference field.
    let negligible = level.q_rms <= 1e-6 * mean_square(&first.vorticity) * 3.0;
    let level_f32 = if negligible {
        f32::INFINITY
    } else {
        level.value() as f32
    };
    let view_top = (TITLE_H + SUBTITLE_H) as i32;
    for (index, panel) in panels.iter().enumerate() {
        let f = panel.fields;
        let x0 = (index as u32 * STRUCTURES_PANEL_W) as i32;
        let xc = x0 + (STRUCTURES_PANEL_W / 2) as i32;
        let mut subtitle = format!("{} (n = {})", panel.solver.label(), f.n);
        if differs_in_time(first, f) {
            subtitle.push_str(&format!(", {}", time_label(f)));
        }
        root.draw(&Text::new(
            subtitle,
            (xc, (TITLE_H + SUBTITLE_H / 2) as i32),
            centred(22),
        ))
        .map_err(plot_err)?;

        let grid = PeriodicGrid::new(f.n, &f.q)?;
        let picture = render_isosurface(
            (STRUCTURES_PANEL_W, STRUCTURES_VIEW_H),
            &grid,
            level_f32,
            surface_color(panel.solver),
        );
        let (pw, ph) = picture.size;
        let image =
            BitMapElement::with_owned_buffer((x0, view_top), (pw as u32, ph as u32), picture.rgb)
                .context("internal error: panel image of the wrong size")?;
        root.draw(&image).map_err(plot_err)?;
        let label_style = (FAMILY, 17)
            .into_font()
            .color(&GREY_TEXT)
            .pos(Pos::new(HPos::Center, VPos::Center));
        for label in &picture.labels {
            root.draw(&Text::new(
                label.text,
                (x0 + label.at.0, view_top + label.at.1),
                label_style.clone(),
            ))
            .map_err(plot_err)?;
        }
        if picture.triangles == 0 {
            let above = f.q.iter().any(|&q| q > level_f32);
            let note = if negligible {
                "no structures: Q ≈ 0 everywhere (Q_rms ≪ ⟨|ω|²⟩)"
            } else if above {
                "no surface: Q > level everywhere"
            } else {
                "no surface: Q ≤ level everywhere"
            };
            root.draw(&Text::new(
                note,
                (xc, view_top + (STRUCTURES_VIEW_H / 2) as i32),
                centred(24).color(&RGBColor(90, 90, 90)),
            ))
            .map_err(plot_err)?;
        }
        if index > 0 {
            root.draw(&PathElement::new(
                vec![
                    (x0, view_top - SUBTITLE_H as i32 + 6),
                    (x0, view_top + STRUCTURES_VIEW_H as i32),
                ],
                RGBColor(200, 200, 200).stroke_width(1),
            ))
            .map_err(plot_err)?;
        }
    }
    root.draw(&Text::new(
        level.caption(),
        ((w / 2) as i32, (h - CAPTION_H / 2) as i32),
        centred(21).color(&GREY_TEXT),
    ))
    .map_err(plot_err)?;
    Ok(())
}

/// |ω| of a snapshot on the node plane nearest z = 0, as (k, z_k, values
/// indexed i·n + j).
fn mid_plane(f: &FieldSnapshot) -> (usize, f64, Vec<f32>) {
    let n = f.n;
    let k = n / 2;
    let z = -PI + k as f64 * 2.0 * PI / n as f64;
    let z = if 2 * k == n { 0.0 } else { z };
    let mut values = Vec::with_capacity(n * n);
    for i in 0..n {
        for j in 0..n {
            let base = ((i * n + j) * n + k) * 3;
            let w = &f.vorticity[base..base + 3];
            let m = (f64::from(w[0]).powi(2) + f64::from(w[1]).powi(2) + f64::from(w[2]).powi(2))
                .sqrt();
            values.push(m as f32);
        }
    }
    (k, z, values)
}

/// Label of a multiple of π/2 on the slice axes.
fn pi_label(v: f64) -> String {
    let halves = (v / (PI / 2.0)).round() as i64;
    match halves {
        0 => "0".into(),
        1 => "π/2".into(),
        -1 => "−π/2".into(),
        2 => "π".into(),
        -2 => "−π".into(),
        m => format!("{m}π/2"),
    }
}

/// Draw |ω| on the node plane nearest z = 0 (z = 0 itself for even n) of
/// each panel side by side, with one viridis colour scale from 0 to the
/// largest value over all panels and a colour bar, and write the PNG
/// ([`vorticity_size`]) atomically to `png`. Values between nodes are
/// interpolated bilinearly (periodically). `title` starts the picture's
/// title, which gives the time and step of the first panel and the plane.
///
/// # Errors
///
/// No panels, a panel whose arrays do not fit its `n` (see
/// [`FieldSnapshot::check`]), or a failure to draw or write: an error
/// naming `png`.
pub fn draw_vorticity_slice(png: &Path, title: &str, panels: &[FieldPanel<'_>]) -> Result<()> {
    let result = (|| {
        check_panels(panels)?;
        let bytes = render_png(vorticity_size(panels.len()), |root| {
            draw_vorticity_on(root, title, panels)
        })?;
        write_atomic(png, &bytes)
    })();
    result.with_context(|| format!("cannot draw {}", png.display()))
}

fn draw_vorticity_on(root: &Canvas<'_>, title: &str, panels: &[FieldPanel<'_>]) -> Result<()> {
    let slices: Vec<(usize, f64, Vec<f32>)> = panels.iter().map(|p| mid_plane(p.fields)).collect();
    let vmax = slices
        .iter()
        .flat_map(|s| s.2.iter())
        .filter(|v| v.is_finite())
        .fold(0.0f32, |m, &v| m.max(v));
    let all_zero = vmax <= 0.0;
    let vmax = if all_zero { 1.0 } else { f64::from(vmax) };
    let same_plane = slices.iter().all(|s| s.1 == slices[0].1);
    let plane = match (same_plane, slices[0].1) {
        (true, 0.0) => "on z = 0".to_string(),
        (true, z) => format!("on z = {}", format_number(z, 4)),
        (false, _) => "near z = 0".to_string(),
    };
    let first = panels[0].fields;
    let (w, _) = root.dim_in_pixel();
    draw_fitted(
        root,
        &format!("{title}: |ω| {plane}, {}", time_label(first)),
        ((w / 2) as i32, (TITLE_H / 2) as i32),
        28,
        w as i32 - 20,
    )?;
    let (_, area) = root.split_vertically(TITLE_H as i32);
    let (aw, ah) = area.dim_in_pixel();
    let (panels_area, bar_area) = area.split_horizontally(aw as i32 - COLORBAR_W as i32);
    let areas = panels_area.split_evenly((1, panels.len()));

    // The square plotting area: the same in every panel.
    let (pw, _) = areas[0].dim_in_pixel();
    let (y_label, x_label) = (80u32, 56u32);
    let side = pw
        .saturating_sub(y_label + 30)
        .min(ah.saturating_sub(SUBTITLE_H + x_label + 20))
        .max(2);
    let mut plot_rows = 0..0;
    for (index, (panel, sub)) in panels.iter().zip(&areas).enumerate() {
        let f = panel.fields;
        let (k, z, values) = &slices[index];
        let mut subtitle = format!("{} (n = {})", panel.solver.label(), f.n);
        if *z != 0.0 {
            subtitle.push_str(&format!(", nodes k = {k} at z = {}", format_number(*z, 4)));
        }
        if differs_in_time(first, f) {
            subtitle.push_str(&format!(", {}", time_label(f)));
        }
        let (sw, _) = sub.dim_in_pixel();
        let (top, rest) = sub.split_vertically(SUBTITLE_H as i32);
        top.draw(&Text::new(
            subtitle,
            ((sw / 2) as i32, (SUBTITLE_H / 2) as i32),
            centred(20),
        ))
        .map_err(plot_err)?;
        let (rw, rh) = rest.dim_in_pixel();
        let ml = rw.saturating_sub(y_label + side) / 2;
        let axis = || {
            <crate::axis::Linear as Scale>::base(-PI, PI).with_key_points(vec![
                -PI,
                -PI / 2.0,
                0.0,
                PI / 2.0,
                PI,
            ])
        };
        let mut chart = ChartBuilder::on(&rest)
            .margin_top(10)
            .margin_left(ml)
            .margin_right(rw.saturating_sub(y_label + side + ml))
            .margin_bottom(rh.saturating_sub(x_label + side + 10))
            .x_label_area_size(x_label)
            .y_label_area_size(y_label)
            .build_cartesian_2d(axis(), axis())
            .map_err(plot_err)?;
        let fmt = |v: &f64| pi_label(*v);
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("x")
            .y_desc("y")
            .axis_desc_style((FAMILY, 22))
            .label_style((FAMILY, 18))
            .x_label_formatter(&fmt)
            .y_label_formatter(&fmt)
            .axis_style(BLACK.stroke_width(1))
            .draw()
            .map_err(plot_err)?;
        let (px, py) = chart.plotting_area().get_pixel_range();
        plot_rows = py.clone();
        let (w, h) = ((px.end - px.start) as usize, (py.end - py.start) as usize);
        let image = slice_image(f.n, values, (w, h), vmax);
        let element =
            BitMapElement::with_owned_buffer((px.start, py.start), (w as u32, h as u32), image)
                .context("internal error: slice image of the wrong size")?;
        root.draw(&element).map_err(plot_err)?;
        root.draw(&Rectangle::new(
            [(px.start - 1, py.start - 1), (px.end, py.end)],
            BLACK.stroke_width(1),
        ))
        .map_err(plot_err)?;
    }
    let note = if all_zero {
        "ω = 0".to_string()
    } else {
        format!("max {}", format_number(vmax, 4))
    };
    let bar = ColorBar {
        lo: 0.0,
        hi: vmax,
        label: "|ω|",
        note,
        color: &|v| viridis(v, vmax),
    };
    draw_colorbar(root, &bar_area, plot_rows, &bar)
}

/// The viridis colour (matplotlib's perceptually uniform map, plotters' [`ViridisRGB`]) of `v`
/// on 0..`vmax`; grey for NaN.
pub(crate) fn viridis(v: f64, vmax: f64) -> [u8; 3] {
    if !v.is_finite() {
        return [150, 150, 150];
    }
    let RGBColor(r, g, b) = ViridisRGB.get_color((v / vmax).clamp(0.0, 1.0));
    [r, g, b]
}

/// RGB pixels (`size` = width, height) of the periodic bilinear
/// interpolation of `values` (n × n, index i·n + j for (x_i, y_j)) over
/// [−π, π]², x to the right, y up.
fn slice_image(n: usize, values: &[f32], size: (usize, usize), vmax: f64) -> Vec<u8> {
    let (w, h) = size;
    let mut rgb = Vec::with_capacity(w * h * 3);
    let at = |i: usize, j: usize| f64::from(values[(i % n) * n + j % n]);
    for py in 0..h {
        // Grid coordinate of the pixel centre: y = π at the top.
        let v = (1.0 - (py as f64 + 0.5) / h as f64) * n as f64;
        let j0 = (v.floor() as usize).min(n - 1);
        let fy = v - j0 as f64;
        for px in 0..w {
            let u = (px as f64 + 0.5) / w as f64 * n as f64;
            let i0 = (u.floor() as usize).min(n - 1);
            let fx = u - i0 as f64;
            let value = (1.0 - fx) * ((1.0 - fy) * at(i0, j0) + fy * at(i0, j0 + 1))
                + fx * ((1.0 - fy) * at(i0 + 1, j0) + fy * at(i0 + 1, j0 + 1));
            rgb.extend_from_slice(&viridis(value, vmax));
        }
    }
    rgb
}

/// A colour bar: the values `lo` (bottom) to `hi` (top) in the colours of `color`, with `label`
/// above the bar and `note` below it.
pub(crate) struct ColorBar<'a> {
    pub lo: f64,
    pub hi: f64,
    pub label: &'a str,
    pub note: String,
    pub color: &'a dyn Fn(f64) -> [u8; 3],
}

/// Draw the colour bar `bar` over the pixel rows `rows` of `root`, in `area`, with labelled
/// ticks.
pub(crate) fn draw_colorbar(
    root: &Canvas<'_>,
    area: &Canvas<'_>,
    rows: std::ops::Range<i32>,
    bar: &ColorBar<'_>,
) -> Result<()> {
    let (ax, _) = area.get_pixel_range();
    let x0 = ax.start + 20;
    let bar_w = 28usize;
    let h = (rows.end - rows.start).max(2) as usize;
    let span = bar.hi - bar.lo;
    let mut rgb = Vec::with_capacity(bar_w * h * 3);
    for py in 0..h {
        let c = (bar.color)(bar.lo + (1.0 - py as f64 / (h - 1) as f64) * span);
        for _ in 0..bar_w {
            rgb.extend_from_slice(&c);
        }
    }
    let element = BitMapElement::with_owned_buffer((x0, rows.start), (bar_w as u32, h as u32), rgb)
        .context("internal error: colour bar of the wrong size")?;
    root.draw(&element).map_err(plot_err)?;
    let x1 = x0 + bar_w as i32;
    root.draw(&Rectangle::new(
        [(x0 - 1, rows.start - 1), (x1, rows.start + h as i32)],
        BLACK.stroke_width(1),
    ))
    .map_err(plot_err)?;
    let axis = LinearAxis::covering([bar.lo, bar.hi], 0.0);
    let tick_style = (FAMILY, 17)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for &v in &axis.major {
        if !(bar.lo - 1e-9 * span..=bar.hi + 1e-9 * span).contains(&v) {
            continue;
        }
        let y = rows.start + ((1.0 - (v - bar.lo) / span) * (h - 1) as f64).round() as i32;
        root.draw(&PathElement::new(
            vec![(x1, y), (x1 + 6, y)],
            BLACK.stroke_width(1),
        ))
        .map_err(plot_err)?;
        root.draw(&Text::new(axis.label(v), (x1 + 10, y), tick_style.clone()))
            .map_err(plot_err)?;
    }
    root.draw(&Text::new(
        bar.label.to_string(),
        (x0 + bar_w as i32 / 2, rows.start - 22),
        centred(20),
    ))
    .map_err(plot_err)?;
    root.draw(&Text::new(
        bar.note.clone(),
        (x0, rows.end + 24),
        tick_style.color(&GREY_TEXT),
    ))
    .map_err(plot_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caption_and_labels() {
        let level = QLevel {
            factor: 1.5,
            q_rms: 0.30616,
            reference: Solver::Spectral,
        };
        assert_eq!(
            level.caption(),
            "isosurface Q = c·Q_rms(spectral) = 1.5 × 0.3062 = 0.4592"
        );
        assert_eq!(pi_label(-PI), "−π");
        assert_eq!(pi_label(PI / 2.0), "π/2");
        assert_eq!(pi_label(1e-17), "0");
    }

    #[test]
    fn sizes() {
        assert_eq!(structures_size(0), structures_size(1));
        assert_eq!(structures_size(2).0, 2 * structures_size(1).0);
        assert!(vorticity_size(2).0 > vorticity_size(1).0);
    }
}
