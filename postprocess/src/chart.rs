//! Chart helpers shared by all figures: axes with hand-picked ticks, the
//! mesh style, lines broken at the axis limits, the "no data" note, time
//! colours and legend placement.

use crate::axis::{Axis, Linear, Log};
use crate::render::{plot_err, Anchor, Canvas, Stroke, DASH, FAMILY};
use anyhow::Result;
use plotters::coord::combinators::{LogCoord, WithKeyPoints};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::ops::Range;

/// Colour of the first line of a two-line plot (spectral solver, particles).
pub(crate) const BLUE: RGBColor = RGBColor(25, 80, 170);
/// Colour of the second line of a two-line plot (vortex solver, a
/// prediction).
pub(crate) const RED: RGBColor = RGBColor(205, 45, 35);

/// An axis whose range, ticks and labels are chosen here rather than by
/// plotters.
pub(crate) trait ChartAxis {
    /// The plotters coordinate for this axis, ticks included.
    type Coord: Ranged<ValueType = f64> + ValueFormatter<f64>;
    /// Build the plotters coordinate.
    fn coord(&self) -> Self::Coord;
    /// Whether `v` can be drawn inside the axis.
    fn contains(&self, v: f64) -> bool;
    /// The label for a tick value.
    fn label(&self, v: f64) -> String;
}

/// How a scale turns an axis range into plotters' coordinate (before the
/// ticks are added).
pub(crate) trait Scale {
    /// plotters' coordinate for a range on this scale.
    type Base: Ranged<ValueType = f64, FormatOption = DefaultFormatting>;
    /// The coordinate for `lo..hi`.
    fn base(lo: f64, hi: f64) -> Self::Base;
}

impl Scale for Log {
    type Base = LogCoord<f64>;

    fn base(lo: f64, hi: f64) -> Self::Base {
        (lo..hi).log_scale().into()
    }
}

/// plotters' linear f64 coordinate, with the default value formatting
/// that [`WithKeyPoints`] needs to be usable in a mesh (the labels are
/// formatted by [`ChartAxis::label`] anyway).
pub(crate) struct LinearCoord(RangedCoordf64);

impl Ranged for LinearCoord {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.0.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        self.0.key_points(hint)
    }

    fn range(&self) -> Range<f64> {
        self.0.range()
    }
}

impl Scale for Linear {
    type Base = LinearCoord;

    fn base(lo: f64, hi: f64) -> Self::Base {
        LinearCoord((lo..hi).into())
    }
}

impl<S: Scale> ChartAxis for Axis<S> {
    type Coord = WithKeyPoints<S::Base>;

    fn coord(&self) -> Self::Coord {
        S::base(self.lo, self.hi)
            .with_key_points(self.major.clone())
            .with_light_points(self.minor.clone())
    }

    fn contains(&self, v: f64) -> bool {
        Axis::contains(self, v)
    }

    fn label(&self, v: f64) -> String {
        Axis::label(self, v)
    }
}

/// A chart on the bitmap backend with axes `X` and `Y`.
pub(crate) type Chart<'a, 'b, X, Y> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<<X as ChartAxis>::Coord, <Y as ChartAxis>::Coord>,
>;

/// A chart on `area` with the common margins, label areas, fonts and grid
/// colours, its mesh already drawn.
pub(crate) fn build_chart<'a, 'b, X: ChartAxis, Y: ChartAxis>(
    area: &'a Canvas<'b>,
    xa: &X,
    ya: &Y,
    x_desc: &str,
    y_desc: &str,
) -> Result<Chart<'a, 'b, X, Y>> {
    let mut chart = ChartBuilder::on(area)
        .margin(15)
        .margin_right(30)
        .x_label_area_size(65)
        .y_label_area_size(95)
        .build_cartesian_2d(xa.coord(), ya.coord())
        .map_err(plot_err)?;
    let x_fmt = |v: &f64| xa.label(*v);
    let y_fmt = |v: &f64| ya.label(*v);
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .axis_desc_style((FAMILY, 22))
        .label_style((FAMILY, 18))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .bold_line_style(RGBColor(205, 205, 205))
        .light_line_style(RGBColor(238, 238, 238))
        .axis_style(BLACK.stroke_width(1))
        .draw()
        .map_err(plot_err)?;
    Ok(chart)
}

/// Series with at most this many points also get a marker at each point.
pub(crate) const SPARSE_POINTS: usize = 15;

/// Draw `pts` as a line, broken wherever a point falls outside the axes.
/// Isolated points, and all points of sparse series, get a marker too
/// (filled for solid lines, hollow for dashed ones).
pub(crate) fn draw_line<X: ChartAxis, Y: ChartAxis>(
    chart: &mut Chart<'_, '_, X, Y>,
    pts: &[(f64, f64)],
    xa: &X,
    ya: &Y,
    style: ShapeStyle,
    stroke: Stroke,
) -> Result<()> {
    let visible = |p: &&(f64, f64)| xa.contains(p.0) && ya.contains(p.1);
    let sparse = pts.len() <= SPARSE_POINTS;
    for run in pts.split(|p| !visible(&p)).filter(|r| !r.is_empty()) {
        if run.len() >= 2 {
            match stroke {
                Stroke::Solid => chart.draw_series(LineSeries::new(run.iter().copied(), style)),
                Stroke::Dashed => chart.draw_series(DashedLineSeries::new(
                    run.iter().copied(),
                    DASH.0,
                    DASH.1,
                    style,
                )),
            }
            .map_err(plot_err)?;
        }
        if sparse || run.len() == 1 {
            let marker = match stroke {
                Stroke::Solid => style.color.filled(),
                Stroke::Dashed => style.color.stroke_width(2),
            };
            chart
                .draw_series(run.iter().map(|&p| Circle::new(p, 4, marker)))
                .map_err(plot_err)?;
        }
    }
    Ok(())
}

/// "no data to plot yet", centred on the plotting area whose pixel ranges
/// are `px` and `py`.
pub(crate) fn no_data_note(root: &Canvas<'_>, px: &Range<i32>, py: &Range<i32>) -> Result<()> {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let style = (FAMILY, 24)
        .into_font()
        .color(&RGBColor(90, 90, 90))
        .pos(Pos::new(HPos::Center, VPos::Center));
    root.draw(&Text::new(
        "no data to plot yet",
        ((px.start + px.end) / 2, (py.start + py.end) / 2),
        style,
    ))
    .map_err(plot_err)
}

/// Up to `max` of `v`, evenly spread, first and last included.
pub(crate) fn thin_evenly(v: &[f64], max: usize) -> Vec<f64> {
    if v.len() <= max {
        return v.to_vec();
    }
    if max < 2 {
        return v.iter().copied().take(max).collect();
    }
    (0..max)
        .map(|i| v[(i * (v.len() - 1) + (max - 1) / 2) / (max - 1)])
        .collect()
}

/// Colour of time number `i` of `n`: blue (early) through green and olive
/// to red (late), dark enough to read on white.
pub(crate) fn time_color(i: usize, n: usize) -> RGBColor {
    let f = if n > 1 {
        i as f64 / (n - 1) as f64
    } else {
        0.0
    };
    let (r, g, b) = HSLColor(0.67 * (1.0 - f), 0.85, 0.42).rgb();
    RGBColor(r, g, b)
}

/// The (x, y) pairs with both coordinates positive and finite.
pub(crate) fn positive_points(x: &[f64], y: &[f64]) -> Vec<(f64, f64)> {
    x.iter()
        .zip(y)
        .map(|(&x, &y)| (x, y))
        .filter(|&(x, y)| x.is_finite() && x > 0.0 && y.is_finite() && y > 0.0)
        .collect()
}

/// The (x, y) pairs with both coordinates finite.
pub(crate) fn finite_points(x: &[f64], y: &[f64]) -> Vec<(f64, f64)> {
    x.iter()
        .zip(y)
        .map(|(&x, &y)| (x, y))
        .filter(|&(x, y)| x.is_finite() && y.is_finite())
        .collect()
}

/// Pixel positions along the drawn parts of `series` (the points inside
/// the axes and the straight segments between neighbours), for finding an
/// empty spot for the legend.
pub(crate) fn pixel_samples<X: ChartAxis, Y: ChartAxis>(
    chart: &Chart<'_, '_, X, Y>,
    series: &[&[(f64, f64)]],
    xa: &X,
    ya: &Y,
) -> Vec<(i32, i32)> {
    // One sample every few pixels along each segment.
    const SPACING: i32 = 4;
    let mut out = Vec::new();
    for pts in series {
        let visible = |p: &&(f64, f64)| xa.contains(p.0) && ya.contains(p.1);
        for run in pts.split(|p| !visible(&p)) {
            let px: Vec<(i32, i32)> = run.iter().map(|p| chart.backend_coord(p)).collect();
            out.extend(px.first());
            for w in px.windows(2) {
                let ((x0, y0), (x1, y1)) = (w[0], w[1]);
                let steps = ((x1 - x0).abs().max((y1 - y0).abs()) / SPACING).max(1);
                out.extend(
                    (1..=steps).map(|k| (x0 + (x1 - x0) * k / steps, y0 + (y1 - y0) * k / steps)),
                );
            }
        }
    }
    out
}

/// How close (pixels) a sample from [`pixel_samples`] may come to a box
/// before it counts as covered by it: line widths and markers included.
pub(crate) const SAMPLE_MARGIN: i32 = 8;

/// The corner of the plotting area (pixel ranges `px`, `py`) where a legend
/// box of `size` pixels, inset by `inset`, covers the fewest of `samples`.
/// Ties go to top right, then top left, bottom right, bottom left.
pub(crate) fn emptiest_corner(
    px: &Range<i32>,
    py: &Range<i32>,
    size: (i32, i32),
    inset: i32,
    samples: &[(i32, i32)],
) -> Anchor {
    let (w, h) = size;
    let (left, right) = (px.start + inset, px.end - inset);
    let (top, bottom) = (py.start + inset, py.end - inset);
    let candidates = [
        (Anchor::TopRight(right, top), (right - w, top)),
        (Anchor::TopLeft(left, top), (left, top)),
        (Anchor::BottomRight(right, bottom), (right - w, bottom - h)),
        (Anchor::BottomLeft(left, bottom), (left, bottom - h)),
    ];
    // A margin so that lines and markers just grazing the box count.
    let margin = SAMPLE_MARGIN;
    let covered = |(x0, y0): (i32, i32)| {
        samples
            .iter()
            .filter(|&&(x, y)| {
                x >= x0 - margin && x <= x0 + w + margin && y >= y0 - margin && y <= y0 + h + margin
            })
            .count()
    };
    let mut best: Option<(Anchor, usize)> = None;
    for (anchor, corner) in candidates {
        let n = covered(corner);
        if best.as_ref().is_none_or(|(_, m)| n < *m) {
            best = Some((anchor, n));
        }
    }
    best.map_or(Anchor::TopRight(right, top), |(a, _)| a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_ends() {
        let v: Vec<f64> = (0..40).map(f64::from).collect();
        let t = thin_evenly(&v, 12);
        assert_eq!(t.len(), 12);
        assert_eq!(t[0], 0.0);
        assert_eq!(t[11], 39.0);
        assert!(t.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(thin_evenly(&v[..5], 12), v[..5].to_vec());
        assert!(thin_evenly(&[], 12).is_empty());
        let t = thin_evenly(&v, 6);
        assert_eq!((t.len(), t[0], t[5]), (6, 0.0, 39.0));
    }

    #[test]
    fn legend_avoids_the_data() {
        let (px, py) = (0..400, 0..300);
        let size = (100, 60);
        // Data along the top: a bottom corner wins.
        let top: Vec<(i32, i32)> = (0..400).map(|x| (x, 20)).collect();
        assert!(matches!(
            emptiest_corner(&px, &py, size, 10, &top),
            Anchor::BottomRight(..)
        ));
        // A rising diagonal leaves top left and bottom right free.
        let diag: Vec<(i32, i32)> = (0..300).map(|i| (i * 4 / 3, 299 - i)).collect();
        assert!(matches!(
            emptiest_corner(&px, &py, size, 10, &diag),
            Anchor::TopLeft(..)
        ));
        // Nothing drawn: top right, as in the other plots.
        assert!(matches!(
            emptiest_corner(&px, &py, size, 10, &[]),
            Anchor::TopRight(..)
        ));
    }
}
