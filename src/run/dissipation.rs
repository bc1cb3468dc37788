//! The particle method's numerical dissipation, measured by every run with particles alongside
//! the spectral solver (docs/physics.md §3.6).
//!
//! K is that of the particle velocity on the spectral grid, computed as the output rows compute
//! it. Every `vortex.dissipation_every`-th reinitialisation is measured: K just before and just
//! after it. From each measured one, the stretch of steps to the next reinitialisation is
//! measured too (K just before that one, measured for it), and compared with the viscous loss
//! over the stretch, ∫2νZ dt by the trapezoid of its two ends. Over the output rows the meter
//! forms −dK/dt by differences and ∫2νZ dt by the trapezoid, and from them the run's K budget:
//! the total change, the viscous loss, the change by reinitialisation (the measured mean times
//! the count) and what is left, the change by stepping beyond the viscous loss.
//!
//! [`DissipationMeter`] holds the sums; it is saved in checkpoints, so a resumed run writes the
//! rows an uninterrupted one writes.

use crate::output::NumericalDissipation;
use serde::{Deserialize, Serialize};

/// K and ε = 2νZ of the particle field at one state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Measure {
    pub energy: f64,
    pub dissipation: f64,
}

/// What to measure around the reinitialisation that is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeasurePlan {
    /// K just before it (a measured reinitialisation, or the end of a measured stretch).
    pub before: bool,
    /// K just after it (a measured reinitialisation).
    pub after: bool,
}

/// Sums over reinitialisations and over the stretches of steps after the measured ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
struct Sums {
    /// Reinitialisations done.
    reinits: u64,
    /// Reinitialisations measured.
    measured: u64,
    /// Σ (K_after − K_before) over the measured ones.
    change: f64,
    /// Σ (K_after − K_before)/K_before over the measured ones.
    relative: f64,
    /// Stretches measured.
    stretches: u64,
    /// Σ (K_end − K_start + ∫2νZ dt)/K_start over the measured stretches.
    stepping_excess: f64,
}

impl Sums {
    fn mean(sum: f64, count: u64) -> f64 {
        if count > 0 {
            sum / count as f64
        } else {
            f64::NAN
        }
    }
}

/// A stretch of steps from a measured reinitialisation, open until the next one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Stretch {
    /// K and ε just after the reinitialisation that opened it.
    start: Measure,
    /// Its duration so far.
    elapsed: f64,
}

/// The output rows seen: the first and the latest, and ∫2νZ dt between them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Outputs {
    t_start: f64,
    initial_energy: f64,
    t: f64,
    latest: Measure,
    /// ∫2νZ dt from `t_start` to `t`, trapezoid over the rows.
    viscous: f64,
}

/// The numerical-dissipation figures of one `vortex/energy.csv` row: `minus_dKdt` and
/// [`postprocess::layout::VORTEX_DISSIPATION_COLUMNS`] (their docs say what each is).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowReport {
    /// (K_prev − K)/(t − t_prev) over the previous row; NaN in the first.
    pub minus_dkdt: f64,
    pub reinits: u64,
    pub measured: u64,
    pub change: f64,
    pub mean_relative_change: f64,
    pub energy_before: f64,
    pub mean_stepping_excess: f64,
}

impl RowReport {
    /// The fields of the row after its `minus_dKdt`, in column order.
    pub fn dissipation_fields(&self) -> Vec<String> {
        let f = crate::output::format_f64;
        vec![
            self.reinits.to_string(),
            self.measured.to_string(),
            f(self.change),
            f(self.mean_relative_change),
            f(self.energy_before),
            f(self.mean_stepping_excess),
        ]
    }
}

/// The sums of the measurements (module docs), for the rows, the manifest and checkpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DissipationMeter {
    /// `vortex.dissipation_every` (from the case, not the checkpoint: it may change on resume).
    #[serde(skip)]
    every: u64,
    /// Over the run.
    run: Sums,
    /// The run's sums at its latest output row (what the summary covers).
    at_output: Sums,
    /// Since the latest output row.
    row: Sums,
    /// K just before the last reinitialisation measured since the latest output row.
    row_energy_before: Option<f64>,
    /// The stretch after the last measured reinitialisation, until the next one.
    open: Option<Stretch>,
    outputs: Option<Outputs>,
}

/// a/b, or 0 where b is not positive (a field at rest), so that the sums stay finite.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

impl DissipationMeter {
    /// A meter measuring every `every`-th reinitialisation (`every` ≥ 1).
    pub fn new(every: u64) -> DissipationMeter {
        DissipationMeter {
            every: every.max(1),
            run: Sums::default(),
            at_output: Sums::default(),
            row: Sums::default(),
            row_energy_before: None,
            open: None,
            outputs: None,
        }
    }

    /// The sums of a checkpoint (saved as JSON by serde), measuring every `every`-th
    /// reinitialisation from now on.
    pub fn restored(value: serde_json::Value, every: u64) -> serde_json::Result<Self> {
        let mut m: DissipationMeter = serde_json::from_value(value)?;
        m.every = every.max(1);
        Ok(m)
    }

    /// `vortex.dissipation_every`: every this many reinitialisations are measured.
    pub fn every(&self) -> u64 {
        self.every
    }

    /// A step of `dt` was taken.
    pub fn advance(&mut self, dt: f64) {
        if let Some(s) = &mut self.open {
            s.elapsed += dt;
        }
    }

    /// What to measure around the reinitialisation that is due now.
    pub fn plan(&self) -> MeasurePlan {
        let measured = (self.run.reinits + 1).is_multiple_of(self.every);
        MeasurePlan {
            before: measured || self.open.is_some(),
            after: measured,
        }
    }

    /// Records a reinitialisation with what was measured as [`DissipationMeter::plan`] asked:
    /// K just before (`before`) closes the open stretch; with K just after, it is a measured
    /// reinitialisation, which opens the next stretch.
    pub fn record(&mut self, before: Option<Measure>, after: Option<Measure>) {
        let sums = [&mut self.run, &mut self.row];
        let stretch = match (before, self.open.take()) {
            (Some(b), Some(s)) => Some(ratio(
                b.energy - s.start.energy + 0.5 * (s.start.dissipation + b.dissipation) * s.elapsed,
                s.start.energy,
            )),
            _ => None,
        };
        let measured = before.zip(after);
        for s in sums {
            s.reinits += 1;
            if let Some(x) = stretch {
                s.stretches += 1;
                s.stepping_excess += x;
            }
            if let Some((b, a)) = measured {
                s.measured += 1;
                s.change += a.energy - b.energy;
                s.relative += ratio(a.energy - b.energy, b.energy);
            }
        }
        if let Some((b, a)) = measured {
            self.row_energy_before = Some(b.energy);
            self.open = Some(Stretch {
                start: a,
                elapsed: 0.0,
            });
        }
    }

    /// The figures of an output row at time `t` of the state measured as `m`; starts the sums
    /// of the next row.
    pub fn row(&mut self, t: f64, m: Measure) -> RowReport {
        let minus_dkdt = match &mut self.outputs {
            Some(o) if t > o.t => {
                let dt = t - o.t;
                let d = (o.latest.energy - m.energy) / dt;
                o.viscous += 0.5 * (o.latest.dissipation + m.dissipation) * dt;
                o.t = t;
                o.latest = m;
                d
            }
            Some(_) => f64::NAN,
            None => {
                self.outputs = Some(Outputs {
                    t_start: t,
                    initial_energy: m.energy,
                    t,
                    latest: m,
                    viscous: 0.0,
                });
                f64::NAN
            }
        };
        let row = std::mem::take(&mut self.row);
        self.at_output = self.run;
        RowReport {
            minus_dkdt,
            reinits: row.reinits,
            measured: row.measured,
            change: row.change,
            mean_relative_change: Sums::mean(row.relative, row.measured),
            energy_before: self.row_energy_before.take().unwrap_or(f64::NAN),
            mean_stepping_excess: Sums::mean(row.stepping_excess, row.stretches),
        }
    }

    /// The summary over the output rows so far (`None` before the first).
    pub fn summary(&self) -> Option<NumericalDissipation> {
        let o = self.outputs?;
        let s = self.at_output;
        let finite = |x: f64| x.is_finite().then_some(x);
        let k0 = o.initial_energy;
        let of_k0 = |x: f64| finite(ratio(x, k0)).filter(|_| k0 > 0.0);
        let reinit_change = if s.reinits == 0 {
            Some(0.0)
        } else {
            of_k0(Sums::mean(s.change, s.measured) * s.reinits as f64)
        };
        let total_change = of_k0(o.latest.energy - k0);
        let viscous_change = of_k0(-o.viscous);
        let stepping_excess = match (total_change, reinit_change, viscous_change) {
            (Some(t), Some(r), Some(v)) => finite(t - r - v),
            _ => None,
        };
        Some(NumericalDissipation {
            dissipation_every: self.every,
            t_start: o.t_start,
            t: o.t,
            initial_energy: finite(k0),
            reinitialisations: s.reinits,
            measured: s.measured,
            mean_change_per_reinit: finite(Sums::mean(s.relative, s.measured)),
            reinit_change,
            stepping_stretches: s.stretches,
            mean_stepping_excess_per_stretch: finite(Sums::mean(s.stepping_excess, s.stretches)),
            total_change,
            viscous_change,
            stepping_excess,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(energy: f64, dissipation: f64) -> Measure {
        Measure {
            energy,
            dissipation,
        }
    }

    /// Runs `meter` through a reinitialisation as it plans, with `k(before)` the K measured.
    fn reinit(meter: &mut DissipationMeter, before: f64, after: f64) -> MeasurePlan {
        let plan = meter.plan();
        meter.record(
            plan.before.then(|| m(before, 0.2)),
            plan.after.then(|| m(after, 0.2)),
        );
        plan
    }

    #[test]
    fn every_reinitialisation_measured_with_its_stretches() {
        let mut meter = DissipationMeter::new(1);
        let r = meter.row(0.0, m(1.0, 0.2));
        assert!(r.minus_dkdt.is_nan() && r.mean_relative_change.is_nan());
        assert_eq!((r.reinits, r.measured, r.change), (0, 0, 0.0));
        // Two steps of 0.5 then a reinitialisation: K 0.9 → 0.89; no stretch before it.
        meter.advance(0.5);
        meter.advance(0.5);
        let plan = reinit(&mut meter, 0.9, 0.89);
        assert_eq!(
            plan,
            MeasurePlan {
                before: true,
                after: true
            }
        );
        // One step of 0.5, the next reinitialisation: K 0.88 → 0.875. Its stretch lost 0.01
        // of 0.89 against ∫2νZ dt = 0.2 · 0.5 = 0.1: an excess of (−0.01 + 0.1)/0.89.
        meter.advance(0.5);
        reinit(&mut meter, 0.88, 0.875);
        let r = meter.row(1.5, m(0.875, 0.2));
        assert_eq!((r.reinits, r.measured), (2, 2));
        assert!((r.change - (-0.01 - 0.005)).abs() < 1e-15, "{}", r.change);
        let rel = (-0.01 / 0.9 - 0.005 / 0.88) / 2.0;
        assert!((r.mean_relative_change - rel).abs() < 1e-15);
        assert_eq!(r.energy_before, 0.88);
        assert!((r.mean_stepping_excess - 0.09 / 0.89).abs() < 1e-15);
        // −dK/dt over the rows: (1 − 0.875)/1.5, the central difference at t = 0.75.
        assert!((r.minus_dkdt - 0.125 / 1.5).abs() < 1e-15);
        // The next row starts afresh.
        let r = meter.row(2.0, m(0.87, 0.2));
        assert_eq!((r.reinits, r.measured), (0, 0));
        assert!(r.energy_before.is_nan() && r.mean_stepping_excess.is_nan());
        assert!((r.minus_dkdt - 0.01).abs() < 1e-14);
        // The summary over t = 0 … 2: K0 = 1; 2 reinitialisations, each measured, −0.015 in
        // all; ∫2νZ dt = 0.4; the rest of the K change (−0.13) is stepping: −0.13 + 0.015 + 0.4.
        let s = meter.summary().unwrap();
        assert_eq!(
            (s.t_start, s.t, s.reinitialisations, s.measured),
            (0.0, 2.0, 2, 2)
        );
        assert_eq!(s.stepping_stretches, 1);
        let close = |x: Option<f64>, y: f64| (x.unwrap() - y).abs() < 1e-14;
        assert!(close(s.reinit_change, -0.015));
        assert!(close(s.total_change, -0.13));
        assert!(close(s.viscous_change, -0.4));
        assert!(close(s.stepping_excess, -0.13 + 0.015 + 0.4));
        assert!(close(s.mean_change_per_reinit, rel));
    }

    #[test]
    fn every_third_measured_and_its_stretch_closed_by_the_next() {
        let mut meter = DissipationMeter::new(3);
        meter.row(0.0, m(1.0, 0.0));
        let plans: Vec<MeasurePlan> = (0..7).map(|_| reinit(&mut meter, 0.5, 0.4)).collect();
        let both = MeasurePlan {
            before: true,
            after: true,
        };
        let none = MeasurePlan {
            before: false,
            after: false,
        };
        let closing = MeasurePlan {
            before: true,
            after: false,
        };
        assert_eq!(
            plans,
            [none, none, both, closing, none, both, closing],
            "the 3rd and 6th are measured, the 4th and 7th close their stretches"
        );
        let r = meter.row(1.0, m(0.4, 0.0));
        assert_eq!((r.reinits, r.measured), (7, 2));
        assert!((r.change + 0.2).abs() < 1e-15);
        // The mean change of the measured ones, times all 7, of K0 = 1.
        let s = meter.summary().unwrap();
        assert!((s.reinit_change.unwrap() + 0.7).abs() < 1e-15);
        assert_eq!(s.stepping_stretches, 2);
    }

    #[test]
    fn no_reinitialisation_and_a_field_at_rest_stay_finite() {
        let mut meter = DissipationMeter::new(2);
        assert!(meter.summary().is_none());
        meter.row(0.0, m(0.0, 0.0));
        meter.row(1.0, m(0.0, 0.0));
        let s = meter.summary().unwrap();
        assert_eq!(s.reinit_change, Some(0.0));
        assert_eq!((s.total_change, s.stepping_excess), (None, None));
        // Nothing measured: the estimate by reinitialisation is absent.
        let mut meter = DissipationMeter::new(5);
        meter.row(0.0, m(1.0, 0.0));
        reinit(&mut meter, 0.9, 0.9);
        meter.row(1.0, m(0.9, 0.0));
        let s = meter.summary().unwrap();
        assert_eq!((s.reinit_change, s.stepping_excess), (None, None));
        assert!((s.total_change.unwrap() + 0.1).abs() < 1e-15);
    }

    #[test]
    fn a_restored_meter_continues_as_the_saved_one() {
        let mut meter = DissipationMeter::new(2);
        meter.row(0.0, m(1.0, 0.1));
        reinit(&mut meter, 0.9, 0.8);
        reinit(&mut meter, 0.7, 0.6);
        meter.advance(0.25);
        let json = serde_json::to_value(&meter).unwrap();
        let text = serde_json::to_string(&json).unwrap();
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut restored = DissipationMeter::restored(back, 2).unwrap();
        assert_eq!(restored, meter);
        for x in [&mut meter, &mut restored] {
            reinit(x, 0.55, 0.5);
        }
        assert_eq!(restored.row(1.0, m(0.5, 0.1)), meter.row(1.0, m(0.5, 0.1)));
        assert_eq!(restored.summary(), meter.summary());
    }
}
