//! The figures of particle-only runs (no spectral solver): the free-space
//! vortex ring against Saffman's formula, coaxial rings (leapfrogging) ring
//! by ring, and the Lamb–Oseen tube against its exact velocity profile.

use crate::axis::{format_number, LinearAxis, LogAxis};
use crate::chart::{
    build_chart, draw_line, emptiest_corner, finite_points, no_data_note, pixel_samples,
    thin_evenly, time_color, ChartAxis, BLUE, RED, SAMPLE_MARGIN,
};
use crate::render::{
    draw_legend, legend_size, plot_err, render_png, write_atomic, Anchor, Canvas, LegendEntry,
    Stroke, DASH, FAMILY,
};
use crate::table::Table;
use anyhow::Result;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;
use std::path::Path;

/// Pixel size (width, height) of `ring.png` (two panels side by side).
pub const RING_SIZE: (u32, u32) = (1600, 700);
/// Pixel size (width, height) of `rings.png` (two panels side by side).
pub const RINGS_SIZE: (u32, u32) = (1600, 700);
/// Pixel size (width, height) of `lamb-oseen.png` (two panels side by
/// side).
pub const LAMB_OSEEN_SIZE: (u32, u32) = (1600, 700);
/// At most this many times are drawn in the Lamb–Oseen plot; beyond it the
/// times are thinned evenly (first and last kept).
pub const MAX_PROFILE_TIMES: usize = 6;
/// The relative error marked by a reference line in the Lamb–Oseen plot.
pub const REL_ERR_REFERENCE: f64 = 0.01;

/// Fraction of the data span added above and below on value axes.
const VALUE_PAD: f64 = 0.1;
/// Legend font and row height, as in the energy plot.
const LEGEND_FONT: u32 = 18;
const LEGEND_LINE: i32 = 26;
/// Distance of a legend box from the plotting area's edges.
const LEGEND_INSET: i32 = 12;
/// Grey for reference lines and for legend entries that explain a line
/// style rather than a colour.
const GREY: RGBColor = RGBColor(90, 90, 90);

/// The history of a free-space vortex ring, from `vortex/ring.csv`.
///
/// All vectors have one entry per row of the file.
#[derive(Clone, Debug, PartialEq)]
pub struct RingHistory {
    /// Time.
    pub t: Vec<f64>,
    /// Ring position along its axis, measured from the particles.
    pub z: Vec<f64>,
    /// Position predicted by Saffman's speed, see [`saffman_position`].
    pub z_saffman: Vec<f64>,
    /// Ring speed measured from the particles.
    pub speed: Vec<f64>,
    /// Saffman's speed Γ/(4πR)[ln(8R/σ) − 0.9045] at each time.
    pub saffman_speed: Vec<f64>,
}

impl RingHistory {
    /// Build the history from a `ring.csv` table (columns `t`, `z`,
    /// `speed` and `saffman_speed` are used; the others are ignored).
    pub fn from_table(table: &Table) -> Result<Self> {
        let [t, z, speed, saffman_speed] = table.columns(["t", "z", "speed", "saffman_speed"])?;
        Ok(Self {
            t: t.to_vec(),
            z: z.to_vec(),
            z_saffman: saffman_position(t, z, saffman_speed),
            speed: speed.to_vec(),
            saffman_speed: saffman_speed.to_vec(),
        })
    }
}

/// The ring position Saffman's formula predicts, one value per row (as
/// many as the shortest of the three inputs):
/// z(t₀) + ∫ U_S dt from t₀, the integral being the cumulative trapezoid
/// rule over the rows.
///
/// Rows where `t` or `u_saffman` is not finite are skipped by the integral
/// and get NaN. The start t₀ is the first row where `t`, `z` and
/// `u_saffman` are all finite (normally the first row, z(0)); rows before
/// it that do have a speed get the prediction integrated backwards. With no
/// such row every value is NaN.
pub fn saffman_position(t: &[f64], z: &[f64], u_saffman: &[f64]) -> Vec<f64> {
    let n = t.len().min(z.len()).min(u_saffman.len());
    let usable = |i: usize| t[i].is_finite() && u_saffman[i].is_finite();
    let mut integral = vec![f64::NAN; n];
    let mut prev: Option<usize> = None;
    for i in (0..n).filter(|&i| usable(i)) {
        integral[i] = match prev {
            Some(p) => integral[p] + 0.5 * (u_saffman[p] + u_saffman[i]) * (t[i] - t[p]),
            None => 0.0,
        };
        prev = Some(i);
    }
    match (0..n).find(|&i| usable(i) && z[i].is_finite()) {
        Some(a) => integral.iter().map(|&s| z[a] + (s - integral[a])).collect(),
        None => vec![f64::NAN; n],
    }
}

/// Draw the vortex-ring figure and write the PNG ([`RING_SIZE`])
/// atomically to `path`: (a) the ring position against t from the
/// particles (solid) and from Saffman's speed (dashed, see
/// [`saffman_position`]); (b) the measured ring speed (solid) and Saffman's
/// speed (dashed) against t.
///
/// Both panels share the t axis; the value axes cover both curves with 10 %
/// of their span to spare (±10 % of the value when it is constant). NaN and
/// inf are skipped; a panel with nothing to draw says so.
pub fn draw_ring(path: &Path, title: &str, ring: &RingHistory) -> Result<()> {
    let png = render_png(RING_SIZE, |root| draw_ring_on(root, title, ring))?;
    write_atomic(path, &png)
}

/// One curve of a panel.
pub(crate) struct Curve {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub style: ShapeStyle,
    pub stroke: Stroke,
}

/// All the points of `curves`, curve after curve.
pub(crate) fn points_of<'a, I>(curves: I) -> impl Iterator<Item = (f64, f64)> + use<'a, I>
where
    I: IntoIterator<Item = &'a Curve>,
{
    curves.into_iter().flat_map(|c| c.points.iter().copied())
}

fn draw_ring_on(root: &Canvas<'_>, title: &str, ring: &RingHistory) -> Result<()> {
    let pair = |y_particles: &[f64], y_saffman: &[f64], saffman_label: &str| {
        [
            Curve {
                label: "particles".to_string(),
                points: finite_points(&ring.t, y_particles),
                style: BLUE.stroke_width(3),
                stroke: Stroke::Solid,
            },
            Curve {
                label: saffman_label.to_string(),
                points: finite_points(&ring.t, y_saffman),
                style: RED.stroke_width(3),
                stroke: Stroke::Dashed,
            },
        ]
    };
    let position = pair(&ring.z, &ring.z_saffman, "Saffman: z(0) + ∫U dt");
    let speed = pair(&ring.speed, &ring.saffman_speed, "Saffman");

    let xa = LinearAxis::covering(points_of(position.iter().chain(&speed)).map(|p| p.0), 0.0);
    let area = root
        .titled(&format!("{title}: vortex ring"), (FAMILY, 28))
        .map_err(plot_err)?;
    let panels = area.split_evenly((1, 2));
    for (panel, (curves, y_desc)) in panels
        .iter()
        .zip([(&position, "z"), (&speed, "ring speed U")])
    {
        let ya = LinearAxis::covering(points_of(curves.iter()).map(|p| p.1), VALUE_PAD);
        draw_panel(
            root,
            panel,
            &xa,
            &ya,
            ("t", y_desc),
            curves,
            (Vec::new(), None),
        )?;
    }
    Ok(())
}

/// Draw `curves` on a chart in `panel` (axis descriptions `desc`), then
/// the "no data" note when none has a point, or else a legend in the corner
/// where it hides the least. The legend holds the entries of `legend`
/// (entries first, then the optional note line) followed by one entry per
/// non-empty curve with a label.
pub(crate) fn draw_panel<X: ChartAxis, Y: ChartAxis>(
    root: &Canvas<'_>,
    panel: &Canvas<'_>,
    xa: &X,
    ya: &Y,
    desc: (&str, &str),
    curves: &[Curve],
    legend: (Vec<LegendEntry>, Option<&str>),
) -> Result<()> {
    let mut chart = build_chart(panel, xa, ya, desc.0, desc.1)?;
    let (mut legend, note) = legend;
    for curve in curves.iter().filter(|c| !c.points.is_empty()) {
        draw_line(&mut chart, &curve.points, xa, ya, curve.style, curve.stroke)?;
        if !curve.label.is_empty() {
            legend.push(LegendEntry {
                label: curve.label.clone(),
                style: curve.style,
                stroke: curve.stroke,
            });
        }
    }
    let (px, py) = chart.plotting_area().get_pixel_range();
    if curves.iter().all(|c| c.points.is_empty()) {
        no_data_note(root, &px, &py)?;
        return Ok(());
    }
    let series: Vec<&[(f64, f64)]> = curves.iter().map(|c| c.points.as_slice()).collect();
    let samples = pixel_samples(&chart, &series, xa, ya);
    let size = legend_size(root, &legend, note, LEGEND_FONT, LEGEND_LINE)?;
    let anchor = emptiest_corner(&px, &py, size, LEGEND_INSET, &samples);
    draw_legend(root, anchor, &legend, note, LEGEND_FONT, LEGEND_LINE)
}

/// One ring's history in a coaxial-rings run.
#[derive(Clone, Debug, PartialEq)]
pub struct OneRing {
    /// The ring's number (`ring` column: 1, 2, … in the case's order).
    pub ring: u32,
    /// Time.
    pub t: Vec<f64>,
    /// Axial position (impulse-weighted), one per time.
    pub z: Vec<f64>,
    /// Impulse radius, one per time.
    pub radius: Vec<f64>,
}

/// The history of coaxial rings, from `vortex/rings.csv`: one [`OneRing`]
/// per ring, in increasing ring number.
#[derive(Clone, Debug, PartialEq)]
pub struct RingsHistory {
    /// The rings.
    pub rings: Vec<OneRing>,
}

impl RingsHistory {
    /// Group the rows of a `rings.csv` table by the `ring` column (columns
    /// `t`, `ring`, `z` and `radius` are used; the others are ignored). Rows
    /// whose `ring` is not a positive integer are dropped; within a ring the
    /// rows keep their order.
    pub fn from_table(table: &Table) -> Result<Self> {
        let [t, ring, z, radius] = table.columns(["t", "ring", "z", "radius"])?;
        let mut rings: Vec<OneRing> = Vec::new();
        for i in 0..t.len() {
            let k = ring[i];
            if !(k.is_finite() && k >= 1.0 && k.fract() == 0.0 && k <= u32::MAX as f64) {
                continue;
            }
            let k = k as u32;
            let idx = match rings.iter().position(|r| r.ring == k) {
                Some(idx) => idx,
                None => {
                    rings.push(OneRing {
                        ring: k,
                        t: Vec::new(),
                        z: Vec::new(),
                        radius: Vec::new(),
                    });
                    rings.len() - 1
                }
            };
            let r = &mut rings[idx];
            r.t.push(t[i]);
            r.z.push(z[i]);
            r.radius.push(radius[i]);
        }
        rings.sort_by_key(|r| r.ring);
        Ok(Self { rings })
    }
}

/// Colour of ring `i` of `n`: blue and red for two rings (as in the ring
/// plot), blue through red for more.
fn ring_color(i: usize, n: usize) -> RGBColor {
    match (i, n) {
        (0, _) => BLUE,
        (1, 2) => RED,
        _ => time_color(i, n),
    }
}

/// Draw the coaxial-rings figure and write the PNG ([`RINGS_SIZE`])
/// atomically to `path`: (a) each ring's impulse radius against t; (b) each
/// ring's axial position against t, one colour per ring. When the rings
/// leapfrog, (a) shows the radii swapping (the rear ring shrinks while the
/// front one grows) and (b) the positions crossing as the rear ring passes
/// through the front one.
///
/// Both panels share the t axis; the value axes cover all the curves with
/// 10 % of their span to spare. NaN and inf are skipped; a panel with
/// nothing to draw says so.
pub fn draw_rings(path: &Path, title: &str, history: &RingsHistory) -> Result<()> {
    let png = render_png(RINGS_SIZE, |root| draw_rings_on(root, title, history))?;
    write_atomic(path, &png)
}

fn draw_rings_on(root: &Canvas<'_>, title: &str, history: &RingsHistory) -> Result<()> {
    let n = history.rings.len();
    let curves = |value: fn(&OneRing) -> &[f64]| -> Vec<Curve> {
        history
            .rings
            .iter()
            .enumerate()
            .map(|(i, r)| Curve {
                label: format!("ring {}", r.ring),
                points: finite_points(&r.t, value(r)),
                style: ring_color(i, n).stroke_width(3),
                stroke: Stroke::Solid,
            })
            .collect()
    };
    let radius = curves(|r| &r.radius);
    let position = curves(|r| &r.z);
    let xa = LinearAxis::covering(points_of(radius.iter().chain(&position)).map(|p| p.0), 0.0);
    let area = root
        .titled(&format!("{title}: coaxial vortex rings"), (FAMILY, 28))
        .map_err(plot_err)?;
    let panels = area.split_evenly((1, 2));
    for (panel, (curves, y_desc)) in panels.iter().zip([
        (&radius, "impulse radius R"),
        (&position, "axial position z"),
    ]) {
        let ya = LinearAxis::covering(points_of(curves.iter()).map(|p| p.1), VALUE_PAD);
        draw_panel(
            root,
            panel,
            &xa,
            &ya,
            ("t", y_desc),
            curves,
            (Vec::new(), None),
        )?;
    }
    Ok(())
}

/// The azimuthal velocity of the Lamb–Oseen tube at one time.
#[derive(Clone, Debug, PartialEq)]
pub struct VelocityProfile {
    /// Simulation time of the profile.
    pub t: f64,
    /// Radii, increasing.
    pub r: Vec<f64>,
    /// u_θ from the particles, one per radius.
    pub u_theta: Vec<f64>,
    /// The exact Lamb–Oseen u_θ, one per radius.
    pub u_exact: Vec<f64>,
    /// Relative error of `u_theta`, one per radius.
    pub rel_err: Vec<f64>,
}

/// All velocity profiles of a Lamb–Oseen run, in increasing time.
#[derive(Clone, Debug, PartialEq)]
pub struct LambOseenProfiles {
    /// The profiles, sorted by time.
    pub profiles: Vec<VelocityProfile>,
}

impl LambOseenProfiles {
    /// Group the rows of a `lamb_oseen.csv` table (columns `t`, `r`,
    /// `u_theta`, `u_exact`, `rel_err`) by time, sorting each profile by
    /// radius. Rows with a non-finite `t` are dropped.
    pub fn from_table(table: &Table) -> Result<Self> {
        let [t, r, u, u_exact, rel_err] =
            table.columns(["t", "r", "u_theta", "u_exact", "rel_err"])?;
        let mut profiles: Vec<VelocityProfile> = Vec::new();
        for i in (0..t.len()).filter(|&i| t[i].is_finite()) {
            // Rows of one time are normally consecutive: check the last first.
            let idx = match profiles.iter().rposition(|p| p.t == t[i]) {
                Some(idx) => idx,
                None => {
                    profiles.push(VelocityProfile {
                        t: t[i],
                        r: Vec::new(),
                        u_theta: Vec::new(),
                        u_exact: Vec::new(),
                        rel_err: Vec::new(),
                    });
                    profiles.len() - 1
                }
            };
            let p = &mut profiles[idx];
            p.r.push(r[i]);
            p.u_theta.push(u[i]);
            p.u_exact.push(u_exact[i]);
            p.rel_err.push(rel_err[i]);
        }
        for p in &mut profiles {
            let mut order: Vec<usize> = (0..p.r.len()).collect();
            order.sort_by(|&a, &b| p.r[a].total_cmp(&p.r[b]));
            let pick = |v: &[f64]| order.iter().map(|&i| v[i]).collect::<Vec<_>>();
            (p.r, p.u_theta, p.u_exact, p.rel_err) = (
                pick(&p.r),
                pick(&p.u_theta),
                pick(&p.u_exact),
                pick(&p.rel_err),
            );
        }
        profiles.sort_by(|a, b| a.t.total_cmp(&b.t));
        Ok(Self { profiles })
    }
}

/// Draw the Lamb–Oseen figure and write the PNG ([`LAMB_OSEEN_SIZE`])
/// atomically to `path`: (a) u_θ against r, particles dashed (with markers
/// when there are few radii) over the exact profile as a wide pale solid
/// line of the same colour; (b) |rel_err| against r on a log axis, with a
/// dashed reference line at [`REL_ERR_REFERENCE`] labelled "1 %" (not drawn
/// when there is no error to compare). The legend, to the right of the
/// panels, serves both.
///
/// One colour per time, blue (early) to red (late); more than
/// [`MAX_PROFILE_TIMES`] times are thinned evenly, first and last kept.
/// NaN and inf are skipped, as are zero errors on the log axis, whose range
/// always includes the reference line; a panel with nothing to draw says so.
pub fn draw_lamb_oseen(path: &Path, title: &str, profiles: &LambOseenProfiles) -> Result<()> {
    let png = render_png(LAMB_OSEEN_SIZE, |root| {
        draw_lamb_oseen_on(root, title, profiles)
    })?;
    write_atomic(path, &png)
}

fn draw_lamb_oseen_on(root: &Canvas<'_>, title: &str, all: &LambOseenProfiles) -> Result<()> {
    let times: Vec<f64> = all.profiles.iter().map(|p| p.t).collect();
    let shown = thin_evenly(&times, MAX_PROFILE_TIMES);
    // Times are distinct and sorted, so the thinned ones pick profiles.
    let profiles: Vec<&VelocityProfile> = all
        .profiles
        .iter()
        .filter(|p| shown.contains(&p.t))
        .collect();
    let n = profiles.len();

    let mut velocity = Vec::new();
    let mut error = Vec::new();
    let mut time_entries = Vec::new();
    for (i, p) in profiles.iter().enumerate() {
        let color = time_color(i, n);
        velocity.push(Curve {
            label: String::new(),
            points: finite_points(&p.r, &p.u_exact),
            style: color.mix(0.45).stroke_width(5),
            stroke: Stroke::Solid,
        });
        velocity.push(Curve {
            label: String::new(),
            points: finite_points(&p.r, &p.u_theta),
            style: color.stroke_width(2),
            stroke: Stroke::Dashed,
        });
        let abs_err: Vec<f64> = p.rel_err.iter().map(|e| e.abs()).collect();
        error.push(Curve {
            label: String::new(),
            points: finite_points(&p.r, &abs_err)
                .into_iter()
                .filter(|&(_, e)| e > 0.0)
                .collect(),
            style: color.stroke_width(2),
            stroke: Stroke::Solid,
        });
        time_entries.push(LegendEntry {
            label: format!("t = {}", format_number(p.t, 4)),
            style: color.stroke_width(3),
            stroke: Stroke::Solid,
        });
    }

    let xa = LinearAxis::covering(points_of(velocity.iter().chain(&error)).map(|p| p.0), 0.0);
    let ya_u = LinearAxis::covering(points_of(&velocity).map(|p| p.1), VALUE_PAD);
    // At most 12 decades below the largest error, so that round-off does
    // not squash the plot, and always the reference line.
    let e_max = points_of(&error)
        .map(|p| p.1)
        .fold(REL_ERR_REFERENCE, f64::max);
    let ya_err = LogAxis::covering(
        points_of(&error)
            .map(|p| p.1)
            .filter(|&e| e >= e_max * 1e-12)
            .chain([REL_ERR_REFERENCE]),
    );

    let mut legend = vec![
        LegendEntry {
            label: "exact".to_string(),
            style: GREY.mix(0.45).stroke_width(5),
            stroke: Stroke::Solid,
        },
        LegendEntry {
            label: "particles".to_string(),
            style: GREY.stroke_width(2),
            stroke: Stroke::Dashed,
        },
    ];
    legend.append(&mut time_entries);
    let note = (n < times.len()).then(|| format!("({n} of {} times shown)", times.len()));
    let note = note.as_deref();

    // The legend, shared by both panels, gets a column of its own at the
    // right, as in the spectrum plot: it is tall, and the profiles fill
    // every corner of the panels.
    let area = root
        .titled(&format!("{title}: Lamb–Oseen vortex"), (FAMILY, 28))
        .map_err(plot_err)?;
    let (legend_w, _) = legend_size(root, &legend, note, LEGEND_FONT, LEGEND_LINE)?;
    let (plots, _) = area.split_horizontally(area.dim_in_pixel().0 as i32 - legend_w - 30);
    let panels = plots.split_evenly((1, 2));
    draw_panel(
        root,
        &panels[0],
        &xa,
        &ya_u,
        ("r", "u_θ"),
        &velocity,
        (Vec::new(), None),
    )?;
    let (px, py) = draw_error_panel(root, &panels[1], &xa, &ya_err, &error)?;
    if velocity.iter().chain(&error).all(|c| c.points.is_empty()) {
        return Ok(());
    }
    draw_legend(
        root,
        Anchor::TopLeft(px.end + 20, py.start),
        &legend,
        note,
        LEGEND_FONT,
        LEGEND_LINE,
    )
}

/// Panel (b) of the Lamb–Oseen figure: the error curves and the reference
/// line, labelled in percent ("1 %") at whichever end (above or below the line) hides
/// the least of the curves; with no curve at all, only the "no data" note.
/// Returns the pixel ranges of the plotting area.
fn draw_error_panel(
    root: &Canvas<'_>,
    panel: &Canvas<'_>,
    xa: &LinearAxis,
    ya: &LogAxis,
    curves: &[Curve],
) -> Result<(Range<i32>, Range<i32>)> {
    let mut chart = build_chart(panel, xa, ya, "r", "|relative error|")?;
    let (px, py) = chart.plotting_area().get_pixel_range();
    if curves.iter().all(|c| c.points.is_empty()) {
        no_data_note(root, &px, &py)?;
        return Ok((px, py));
    }
    let reference = [(xa.lo, REL_ERR_REFERENCE), (xa.hi, REL_ERR_REFERENCE)];
    // Not through draw_line, which would mark the ends as data points.
    chart
        .draw_series(DashedLineSeries::new(
            reference,
            DASH.0,
            DASH.1,
            GREY.stroke_width(2),
        ))
        .map_err(plot_err)?;
    for curve in curves.iter().filter(|c| !c.points.is_empty()) {
        draw_line(&mut chart, &curve.points, xa, ya, curve.style, curve.stroke)?;
    }

    let series: Vec<&[(f64, f64)]> = curves.iter().map(|c| c.points.as_slice()).collect();
    let samples = pixel_samples(&chart, &series, xa, ya);
    let label = format!("{} %", format_number(100.0 * REL_ERR_REFERENCE, 3));
    let font = (FAMILY, 18).into_font().color(&GREY);
    let (w, h) = root.estimate_text_size(&label, &font).map_err(plot_err)?;
    let (w, h) = (w as i32, h as i32);
    let y_line = chart.backend_coord(&reference[0]).1;
    let (gap, inset) = (6, 8);
    // Top-left corners of the candidate label boxes, in order of preference.
    let candidates = [
        (px.end - inset - w, y_line - gap - h),
        (px.start + inset, y_line - gap - h),
        (px.end - inset - w, y_line + gap),
        (px.start + inset, y_line + gap),
    ];
    let covered = |&(x0, y0): &(i32, i32)| {
        samples
            .iter()
            .filter(|&&(x, y)| {
                let m = SAMPLE_MARGIN;
                x >= x0 - m && x <= x0 + w + m && y >= y0 - m && y <= y0 + h + m
            })
            .count()
    };
    let mut best = candidates[0];
    for c in &candidates[1..] {
        if covered(c) < covered(&best) {
            best = *c;
        }
    }
    root.draw(&Text::new(
        label,
        best,
        font.pos(Pos::new(HPos::Left, VPos::Top)),
    ))
    .map_err(plot_err)?;
    Ok((px, py))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saffman_position_integrates_by_trapezoids() {
        let t = [0.0, 1.0, 2.0, 4.0];
        let z = [0.5, 9.0, 9.0, 9.0];
        let u = [1.0, 3.0, 3.0, 1.0];
        let p = saffman_position(&t, &z, &u);
        assert_eq!(p, vec![0.5, 2.5, 5.5, 9.5]);
    }

    #[test]
    fn saffman_position_skips_nan() {
        // A missing speed: that row is NaN and the integral bridges it.
        let p = saffman_position(&[0.0, 1.0, 2.0], &[0.0, 1.0, 2.0], &[1.0, f64::NAN, 1.0]);
        assert_eq!(p[0], 0.0);
        assert!(p[1].is_nan());
        assert_eq!(p[2], 2.0);
        // The first z is missing: the start moves to the next row.
        let p = saffman_position(&[0.0, 1.0, 2.0], &[f64::NAN, 3.0, 4.0], &[2.0, 2.0, 2.0]);
        assert_eq!(p, vec![1.0, 3.0, 5.0]);
        // Nothing usable.
        let p = saffman_position(&[0.0, 1.0], &[f64::NAN, f64::NAN], &[1.0, 1.0]);
        assert!(p.iter().all(|v| v.is_nan()));
        assert!(saffman_position(&[], &[], &[]).is_empty());
    }

    #[test]
    fn rings_grouped_by_ring() {
        let table = Table {
            path: "rings.csv".into(),
            headers: ["t", "ring", "z", "radius"].map(String::from).to_vec(),
            columns: vec![
                vec![0.0, 0.0, 1.0, 1.0, 2.0],
                vec![2.0, 1.0, 2.0, 1.0, f64::NAN],
                vec![1.0, 0.0, 1.5, 0.5, 9.0],
                vec![1.0, 1.0, 1.1, 0.9, 9.0],
            ],
        };
        let h = RingsHistory::from_table(&table).unwrap();
        assert_eq!(h.rings.len(), 2);
        assert_eq!(h.rings[0].ring, 1);
        assert_eq!(h.rings[0].t, vec![0.0, 1.0]);
        assert_eq!(h.rings[0].z, vec![0.0, 0.5]);
        assert_eq!(h.rings[1].ring, 2);
        assert_eq!(h.rings[1].radius, vec![1.0, 1.1]);
    }

    #[test]
    fn profiles_grouped_and_sorted() {
        let table = Table {
            path: "lo.csv".into(),
            headers: ["t", "r", "u_theta", "u_exact", "rel_err"]
                .map(String::from)
                .to_vec(),
            columns: vec![
                vec![1.0, 1.0, 0.0, 0.0, f64::NAN],
                vec![2.0, 1.0, 0.5, 0.25, 1.0],
                vec![0.2, 0.1, 0.3, 0.2, 9.0],
                vec![0.2, 0.1, 0.3, 0.2, 9.0],
                vec![0.0, 0.01, 0.0, 0.0, 9.0],
            ],
        };
        let lo = LambOseenProfiles::from_table(&table).unwrap();
        assert_eq!(lo.profiles.len(), 2);
        assert_eq!(lo.profiles[0].t, 0.0);
        assert_eq!(lo.profiles[0].r, vec![0.25, 0.5]);
        assert_eq!(lo.profiles[1].r, vec![1.0, 2.0]);
        assert_eq!(lo.profiles[1].u_theta, vec![0.1, 0.2]);
        assert_eq!(lo.profiles[1].rel_err, vec![0.01, 0.0]);
    }
}
