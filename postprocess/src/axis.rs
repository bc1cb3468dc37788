//! Axis ranges (logarithmic and linear), tick positions and tick labels.
//!
//! plotters' own log-axis ticks give no tick at all on ranges shorter than a
//! decade and print raw `f64` debug output, so the plots choose their ticks
//! here and hand them over with `with_key_points`; linear axes do the same
//! so that their labels look alike.

use std::marker::PhantomData;

/// An axis range with the ticks to draw on it; `S` ([`Log`] or [`Linear`])
/// is its scale, which decides how the range and the ticks are chosen.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Axis<S> {
    pub lo: f64,
    pub hi: f64,
    /// Labelled ticks (also drawn as the darker grid lines).
    pub major: Vec<f64>,
    /// Unlabelled faint grid lines (between the major ones).
    pub minor: Vec<f64>,
    /// Significant digits that keep all major labels distinct.
    pub digits: usize,
    scale: PhantomData<S>,
}

/// The scale of a logarithmic [`Axis`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Log;

/// The scale of a linear [`Axis`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Linear;

/// A positive range for a log axis, with the ticks to draw on it.
pub(crate) type LogAxis = Axis<Log>;

/// A finite range for a linear axis, with the ticks to draw on it.
pub(crate) type LinearAxis = Axis<Linear>;

impl<S> Axis<S> {
    fn with_ticks(lo: f64, hi: f64, major: Vec<f64>, minor: Vec<f64>) -> Self {
        let digits = distinct_digits(&major);
        Self {
            lo,
            hi,
            major,
            minor,
            digits,
            scale: PhantomData,
        }
    }

    /// Whether `v` can be drawn inside this axis.
    pub fn contains(&self, v: f64) -> bool {
        v.is_finite() && v >= self.lo && v <= self.hi
    }

    /// The label for a tick value.
    pub fn label(&self, v: f64) -> String {
        format_number(v, self.digits)
    }
}

/// The smallest and largest of the `values` that pass `keep`, or `None`
/// when none does.
fn bounds(values: impl IntoIterator<Item = f64>, keep: impl Fn(f64) -> bool) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.into_iter().filter(|&v| keep(v)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    (lo <= hi).then_some((lo, hi))
}

/// The range used when there is nothing to plot.
const EMPTY_RANGE: (f64, f64) = (1.0, 10.0);

impl LogAxis {
    /// An axis covering the positive finite values of `values`, padded by a
    /// small fraction of the span on each side. Degenerate inputs give a
    /// usable range: no values give 1..10, all-equal values a decade
    /// around them.
    pub fn covering(values: impl IntoIterator<Item = f64>) -> Self {
        match bounds(values, |v| v.is_finite() && v > 0.0) {
            Some((lo, hi)) => Self::padded(lo, hi),
            None => Self::from_range(EMPTY_RANGE.0, EMPTY_RANGE.1),
        }
    }

    /// An axis padded around `[lo, hi]`, with `0 < lo <= hi` finite.
    pub fn padded(lo: f64, hi: f64) -> Self {
        let (l, h) = (lo.log10(), hi.log10());
        let span = h - l;
        let pad = if span < 1e-9 { 0.5 } else { 0.04 * span };
        let (l, h) = (l - pad, h + pad);
        // Keep within what f64 can hold even for extreme data.
        let lo = 10f64.powf(l.max(-300.0));
        let hi = 10f64.powf(h.min(300.0));
        Self::from_range(lo, hi)
    }

    fn from_range(lo: f64, hi: f64) -> Self {
        let (major, minor) = log_ticks(lo, hi);
        Self::with_ticks(lo, hi, major, minor)
    }
}

impl LinearAxis {
    /// An axis covering the finite values of `values`, widened by `pad`
    /// times their span on each side (0 for a tight axis).
    ///
    /// Degenerate inputs give a usable range: no values give 0..1, and
    /// values that are all equal (to 1e-6 relative) a range of ±10 % of
    /// the value around it (±1 around zero), so that a constant curve does
    /// not collapse the axis.
    pub fn covering(values: impl IntoIterator<Item = f64>, pad: f64) -> Self {
        let Some((lo, hi)) = bounds(values, f64::is_finite) else {
            return Self::from_range(0.0, 1.0);
        };
        // Spans this close to the f64 limit are halved first so that the
        // padded bounds stay finite.
        let (lo, hi) = (lo.clamp(-1e300, 1e300), hi.clamp(-1e300, 1e300));
        let span = hi - lo;
        let scale = lo.abs().max(hi.abs());
        if span <= 1e-6 * scale || span == 0.0 {
            let mid = 0.5 * (lo + hi);
            let half = if scale > 0.0 { 0.1 * scale } else { 1.0 };
            return Self::from_range(mid - half, mid + half);
        }
        let pad = pad.max(0.0) * span;
        Self::from_range(lo - pad, hi + pad)
    }

    fn from_range(lo: f64, hi: f64) -> Self {
        let (major, minor) = match axis_step(lo, hi) {
            Some(step) => (multiples(lo, hi, step), multiples(lo, hi, minor_step(step))),
            None => (vec![lo, hi], Vec::new()),
        };
        Self::with_ticks(lo, hi, major, minor)
    }
}

/// The multiples of `step` inside `[lo, hi]`, with values within round-off
/// of zero written as zero.
fn multiples(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last)
        .map(|i| {
            let v = i as f64 * step;
            if v.abs() < 1e-9 * step {
                0.0
            } else {
                v
            }
        })
        .collect()
}

/// A "nice" step (1, 2 or 5 times a power of ten) giving about five ticks
/// on `[lo, hi]`; `None` when the range is too narrow for its magnitude to
/// be split into a handful of distinct f64 values.
fn tick_step(lo: f64, hi: f64) -> Option<f64> {
    let raw = (hi - lo) / 5.0;
    if !(raw.is_finite() && raw > 0.0) {
        return None;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let usable = step > 1e-9 * lo.abs().max(hi.abs())
        && (lo / step).abs() < 1e15
        && (hi / step).abs() < 1e15;
    usable.then_some(step)
}

/// The largest "nice" step (1, 2 or 5 times a power of ten) that puts at
/// least four ticks on `[lo, hi]` (then at most about ten); `None` when the range is too
/// narrow for its magnitude to be split into distinct f64 values.
fn axis_step(lo: f64, hi: f64) -> Option<f64> {
    let span = hi - lo;
    if !(span.is_finite() && span > 0.0) {
        return None;
    }
    let e = span.log10().floor();
    // A step of a tenth of the span's decade always gives 10 ticks or more,
    // so the search ends within two decades.
    let step = [0.0, -1.0]
        .iter()
        .flat_map(|de| [5.0, 2.0, 1.0].map(|m| m * 10f64.powf(e + de)))
        .find(|&s| (hi / s).floor() - (lo / s).ceil() + 1.0 >= 4.0)?;
    let usable = step > 1e-9 * lo.abs().max(hi.abs())
        && (lo / step).abs() < 1e15
        && (hi / step).abs() < 1e15;
    usable.then_some(step)
}

/// Step of the faint grid lines for a major step of 1, 2 or 5 times a
/// power of ten: five per interval, four for the 2s.
fn minor_step(step: f64) -> f64 {
    let mantissa = step / 10f64.powf(step.log10().floor());
    if (mantissa - 2.0).abs() < 0.1 {
        step / 4.0
    } else {
        step / 5.0
    }
}

/// Major (labelled) and minor tick positions for a log axis on `[lo, hi]`.
fn log_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let e_lo = lo.log10().floor() as i32;
    let e_hi = hi.log10().ceil() as i32;
    let decades = hi.log10() - lo.log10();
    let in_range = |v: &f64| *v >= lo * (1.0 - 1e-12) && *v <= hi * (1.0 + 1e-12);
    let with_mantissas = |ms: &[f64]| -> Vec<f64> {
        (e_lo..=e_hi)
            .flat_map(|e| ms.iter().map(move |m| m * 10f64.powi(e)))
            .filter(in_range)
            .collect()
    };
    let all_minor = || with_mantissas(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);

    if decades >= 2.5 {
        // Powers of ten, thinned so that at most ~14 carry a label.
        let step = ((decades / 14.0).ceil() as i32).max(1);
        let major: Vec<f64> = (e_lo..=e_hi)
            .filter(|e| e.rem_euclid(step) == 0)
            .map(|e| 10f64.powi(e))
            .filter(in_range)
            .collect();
        let minor = if step == 1 && decades <= 8.0 {
            all_minor()
        } else {
            (e_lo..=e_hi)
                .map(|e| 10f64.powi(e))
                .filter(in_range)
                .collect()
        };
        return (major, minor);
    }
    for ms in [
        &[1.0, 2.0, 5.0][..],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    ] {
        let major = with_mantissas(ms);
        if major.len() >= 3 {
            return (major, all_minor());
        }
    }
    // Shorter than a factor of ~3: evenly spaced ticks.
    let major = linear_ticks(lo, hi);
    (major.clone(), major)
}

/// About five "nice" (1, 2, 5 times a power of ten) ticks inside `[lo, hi]`.
fn linear_ticks(lo: f64, hi: f64) -> Vec<f64> {
    match tick_step(lo, hi) {
        Some(step) => multiples(lo, hi, step),
        None => vec![lo, hi],
    }
}

/// The fewest significant digits (at least 1, at most 8) for which the
/// labels of `ticks` are all different and each reads back as its tick
/// (to a millionth of the smallest gap between ticks): 0, 0.5, 1, 1.5 need
/// two digits, or 1.5 would be labelled "2".
fn distinct_digits(ticks: &[f64]) -> usize {
    let gap = ticks
        .windows(2)
        .map(|w| (w[1] - w[0]).abs())
        .filter(|g| *g > 0.0)
        .fold(f64::INFINITY, f64::min);
    let tolerance = if gap.is_finite() { 1e-6 * gap } else { 0.0 };
    (1..=8)
        .find(|&d| {
            let labels: Vec<String> = ticks.iter().map(|&v| format_number(v, d)).collect();
            let exact = ticks.iter().zip(&labels).all(|(&v, label)| {
                label
                    .parse::<f64>()
                    .is_ok_and(|back| (back - v).abs() <= tolerance.max(1e-12 * v.abs()))
            });
            exact && labels.windows(2).all(|w| w[0] != w[1])
        })
        .unwrap_or(8)
}

/// Format `v` with `digits` significant digits, trailing zeros dropped:
/// plain decimals between 1e-3 and 1e5 (`0.002`, `0.5`, `12`, `2500`),
/// `1e-5` / `2.5e6` style outside that.
pub(crate) fn format_number(v: f64, digits: usize) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    if !v.is_finite() {
        return format!("{v}");
    }
    let digits = digits.max(1);
    // Rounding first settles the exponent (9.99 -> 1.0e1).
    let sci = format!("{:.*e}", digits - 1, v);
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` output has an 'e'");
    let exp: i32 = exp.parse().expect("`{:e}` exponent is an integer");
    if (-3..5).contains(&exp) {
        let decimals = (digits as i32 - 1 - exp).max(0) as usize;
        trim_zeros(&format!("{v:.decimals$}"))
    } else {
        format!("{}e{exp}", trim_zeros(mantissa))
    }
}

fn trim_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_format() {
        assert_eq!(format_number(1.0, 1), "1");
        assert_eq!(format_number(0.1, 1), "0.1");
        assert_eq!(format_number(10.0, 1), "10");
        assert_eq!(format_number(1e-3, 1), "0.001");
        assert_eq!(format_number(1e-4, 1), "1e-4");
        assert_eq!(format_number(1e5, 1), "1e5");
        assert_eq!(format_number(20000.0, 1), "20000");
        assert_eq!(format_number(2.5e-7, 2), "2.5e-7");
        assert_eq!(format_number(0.3, 1), "0.3");
        assert_eq!(format_number(1.02, 3), "1.02");
        assert_eq!(format_number(9.99, 2), "10");
        assert_eq!(format_number(-0.25, 2), "-0.25");
        assert_eq!(format_number(1.234567, 4), "1.235");
    }

    #[test]
    fn ticks_many_decades() {
        let a = LogAxis::padded(1e-12, 1.0);
        assert!(a.major.contains(&1e-12) && a.major.contains(&1.0));
        assert!(a.major.len() <= 14);
        assert_eq!(a.label(1e-6), "1e-6");
        let a = LogAxis::padded(1e-30, 1e10);
        assert!(a.major.len() >= 3 && a.major.len() <= 15, "{:?}", a.major);
    }

    #[test]
    fn ticks_short_ranges() {
        let a = LogAxis::padded(0.3, 0.9);
        assert!(a.major.len() >= 3, "{:?}", a.major);
        let a = LogAxis::padded(0.98, 1.02);
        assert!(a.major.len() >= 2, "{:?}", a.major);
        let labels: Vec<String> = a.major.iter().map(|&v| a.label(v)).collect();
        for w in labels.windows(2) {
            assert_ne!(w[0], w[1]);
        }
    }

    #[test]
    fn linear_ticks_and_padding() {
        let a = LinearAxis::covering([0.0, 1.0, f64::NAN], 0.0);
        assert_eq!((a.lo, a.hi), (0.0, 1.0));
        let labels: Vec<String> = a.major.iter().map(|&v| a.label(v)).collect();
        assert_eq!(labels, ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        // At least four labelled ticks, however the span falls.
        for hi in [0.13, 0.3, 0.31, 0.5, 0.7, 0.99, 1.2, 2.9, 7.0] {
            let a = LinearAxis::covering([0.0, hi], 0.0);
            assert!((4..=10).contains(&a.major.len()), "{hi}: {:?}", a.major);
        }
        assert!(a.minor.len() > a.major.len());
        let a = LinearAxis::covering([0.2, 0.3], 0.1);
        assert!((a.lo - 0.19).abs() < 1e-12 && (a.hi - 0.31).abs() < 1e-12);
        let labels: Vec<String> = a.major.iter().map(|&v| a.label(v)).collect();
        assert!(labels.len() >= 3, "{labels:?}");
        for w in labels.windows(2) {
            assert_ne!(w[0], w[1]);
        }
        // Half steps get their digit: 1.5 is not rounded to "2".
        let a = LinearAxis::covering([0.0, 1.9764], 0.0);
        let labels: Vec<String> = a.major.iter().map(|&v| a.label(v)).collect();
        assert_eq!(labels, ["0", "0.5", "1", "1.5"]);
        // Ticks straddling zero include an exact zero.
        let a = LinearAxis::covering([-0.3, 0.7], 0.0);
        assert!(a.major.contains(&0.0), "{:?}", a.major);
    }

    #[test]
    fn linear_degenerate_inputs() {
        let a = LinearAxis::covering([], 0.1);
        assert_eq!((a.lo, a.hi), (0.0, 1.0));
        let a = LinearAxis::covering([f64::NAN, f64::INFINITY], 0.1);
        assert_eq!((a.lo, a.hi), (0.0, 1.0));
        // Constant values do not collapse the axis.
        let a = LinearAxis::covering([0.25, 0.25, 0.25], 0.1);
        assert!(a.lo < 0.25 && a.hi > 0.25 && a.major.len() >= 2, "{a:?}");
        assert!((a.hi - a.lo - 0.05).abs() < 1e-12);
        let a = LinearAxis::covering([0.0, 0.0], 0.1);
        assert_eq!((a.lo, a.hi), (-1.0, 1.0));
        let a = LinearAxis::covering([-1e308, 1e308], 0.1);
        assert!(a.lo.is_finite() && a.hi.is_finite() && a.lo < a.hi);
        assert!(a.major.len() >= 2, "{a:?}");
        // A span too narrow for its magnitude counts as constant.
        let a = LinearAxis::covering([1e6, 1e6 + 1e-3], 0.0);
        assert!(a.lo < 1e6 - 1e4 && a.hi > 1e6 + 1e4, "{a:?}");
        // Just above that, the labels still differ.
        let a = LinearAxis::covering([1.0, 1.000002], 0.0);
        let labels: Vec<String> = a.major.iter().map(|&v| a.label(v)).collect();
        assert!(labels.len() >= 2, "{labels:?}");
        for w in labels.windows(2) {
            assert_ne!(w[0], w[1]);
        }
    }

    #[test]
    fn degenerate_inputs() {
        let a = LogAxis::covering([]);
        assert_eq!((a.lo, a.hi), (1.0, 10.0));
        let a = LogAxis::covering([f64::NAN, -1.0, 0.0, f64::INFINITY]);
        assert_eq!((a.lo, a.hi), (1.0, 10.0));
        let a = LogAxis::covering([2.0, 2.0]);
        assert!(a.lo < 2.0 && a.hi > 2.0 && a.major.len() >= 2);
        let a = LogAxis::covering([1e-300, 1e300]);
        assert!(a.lo > 0.0 && a.hi.is_finite());
    }
}
