//! Logarithmic axis ranges, tick positions and tick labels.
//!
//! plotters' own log-axis ticks give no tick at all on ranges shorter than a
//! decade and print raw `f64` debug output, so the plots choose their ticks
//! here and hand them over with `with_key_points`.

/// A positive range for a log axis, with the ticks to draw on it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LogAxis {
    pub lo: f64,
    pub hi: f64,
    /// Labelled ticks (also drawn as the darker grid lines).
    pub major: Vec<f64>,
    /// Unlabelled faint grid lines.
    pub minor: Vec<f64>,
    /// Significant digits that keep all major labels distinct.
    pub digits: usize,
}

/// The range used when there is nothing to plot.
const EMPTY_RANGE: (f64, f64) = (1.0, 10.0);

impl LogAxis {
    /// An axis covering the positive finite values of `values`, padded by a
    /// small fraction of the span on each side. Degenerate inputs give a
    /// usable range: no values give 1..10, all-equal values a decade
    /// around them.
    pub fn covering(values: impl IntoIterator<Item = f64>) -> Self {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values {
            if v.is_finite() && v > 0.0 {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
        if lo > hi {
            return Self::from_range(EMPTY_RANGE.0, EMPTY_RANGE.1);
        }
        Self::padded(lo, hi)
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
        let digits = distinct_digits(&major);
        Self {
            lo,
            hi,
            major,
            minor,
            digits,
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
    let raw = (hi - lo) / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// The fewest significant digits (at least 1, at most 8) for which the
/// labels of `ticks` are all different.
fn distinct_digits(ticks: &[f64]) -> usize {
    (1..=8)
        .find(|&d| {
            let labels: Vec<String> = ticks.iter().map(|&v| format_number(v, d)).collect();
            labels.windows(2).all(|w| w[0] != w[1])
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
