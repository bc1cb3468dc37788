//! When something happens: schedules in the Oceananigans sense (an interval of steps, an
//! interval of simulated time, or a list of times), and the round-off rule that decides whether
//! the clock has reached an event time.
//!
//! Time-based schedules carry a counter (the index of their next event) that is saved in every
//! checkpoint, so a resumed run fires exactly the events an uninterrupted one would.

use crate::config::Cadence;

/// Whether time `t` has reached the event time `event`, up to round-off relative to the
/// event's scale (its interval, or t_end). Event times are computed as index × interval, so two
/// events that coincide in exact arithmetic (3 × 0.1 and 0.3) may differ in the last bit; the
/// clock lands on one of them exactly, and both must count as reached there.
pub fn reached(t: f64, event: f64, scale: f64) -> bool {
    t >= event - 1e-9 * scale
}

/// When a callback runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// Every N steps (at steps 0, N, 2N, …).
    IterationInterval(u64),
    /// Every T of simulated time (at 0, T, 2T, …); the clock lands on these times.
    TimeInterval(f64),
    /// At the listed times (sorted); the clock lands on them. `scale` is the scale of the
    /// round-off rule of [`reached`] (t_end).
    SpecifiedTimes { times: Vec<f64>, scale: f64 },
}

impl From<Cadence> for Schedule {
    fn from(c: Cadence) -> Schedule {
        match c {
            Cadence::Steps(n) => Schedule::IterationInterval(n),
            Cadence::Time(d) => Schedule::TimeInterval(d),
        }
    }
}

/// A schedule with its counter and whether it also fires at t_end.
#[derive(Debug, Clone, PartialEq)]
pub struct Scheduled {
    pub schedule: Schedule,
    /// Index of the next time-based event (unused for [`Schedule::IterationInterval`]).
    pub next: u64,
    /// Also fire when the run reaches t_end (outputs and checkpoints do, snapshots don't).
    pub at_end: bool,
}

impl Scheduled {
    pub fn new(schedule: Schedule, at_end: bool) -> Scheduled {
        Scheduled {
            schedule,
            next: 0,
            at_end,
        }
    }

    /// The time of the next event the clock must land on, if this schedule is time-based and
    /// has one left.
    pub fn next_time(&self) -> Option<f64> {
        match &self.schedule {
            Schedule::IterationInterval(_) => None,
            Schedule::TimeInterval(d) => Some(self.next as f64 * d),
            Schedule::SpecifiedTimes { times, .. } => times.get(self.next as usize).copied(),
        }
    }

    /// Whether the event is due at (t, step); `at_end` says the run has reached t_end.
    pub fn is_due(&self, t: f64, step: u64, at_end: bool) -> bool {
        if at_end && self.at_end {
            return true;
        }
        match &self.schedule {
            Schedule::IterationInterval(n) => step.is_multiple_of(*n),
            Schedule::TimeInterval(d) => reached(t, self.next as f64 * d, *d),
            Schedule::SpecifiedTimes { times, scale } => times
                .get(self.next as usize)
                .is_some_and(|&ts| reached(t, ts, *scale)),
        }
    }

    /// Moves the counter past time t (after the event fired there).
    pub fn advance_past(&mut self, t: f64) {
        match &self.schedule {
            Schedule::IterationInterval(_) => {}
            Schedule::TimeInterval(d) => self.next = (t / d + 1e-9).floor() as u64 + 1,
            Schedule::SpecifiedTimes { times, scale } => {
                while times
                    .get(self.next as usize)
                    .is_some_and(|&ts| reached(t, ts, *scale))
                {
                    self.next += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_interval_lands_and_advances() {
        let mut s = Scheduled::new(Schedule::TimeInterval(0.1), false);
        assert_eq!(s.next_time(), Some(0.0));
        assert!(s.is_due(0.0, 0, false));
        s.advance_past(0.0);
        assert_eq!(s.next_time(), Some(0.1));
        assert!(!s.is_due(0.05, 1, false));
        // 3 × 0.1 ≠ 0.3 in binary, and both count as reached.
        s.next = 3;
        assert!(s.is_due(0.3, 7, false));
        s.advance_past(0.3);
        assert_eq!(s.next, 4);
    }

    #[test]
    fn steps_and_end() {
        let s = Scheduled::new(Schedule::IterationInterval(5), true);
        assert!(s.is_due(0.0, 10, false));
        assert!(!s.is_due(0.0, 11, false));
        assert!(s.is_due(0.0, 11, true));
        assert_eq!(s.next_time(), None);
        let s = Scheduled::new(Schedule::IterationInterval(5), false);
        assert!(!s.is_due(0.0, 11, true));
    }

    #[test]
    fn specified_times_skip_coincident() {
        let mut s = Scheduled::new(
            Schedule::SpecifiedTimes {
                times: vec![0.0, 0.5, 0.5 + 1e-12, 1.0],
                scale: 1.0,
            },
            false,
        );
        s.advance_past(0.0);
        assert_eq!(s.next_time(), Some(0.5));
        assert!(s.is_due(0.5, 3, false));
        s.advance_past(0.5);
        assert_eq!(s.next_time(), Some(1.0));
        s.advance_past(1.0);
        assert_eq!(s.next_time(), None);
        assert!(!s.is_due(2.0, 9, false));
    }
}
