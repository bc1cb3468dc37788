//! UTC wall-clock formatting with the standard library only.

use std::time::{SystemTime, UNIX_EPOCH};

/// A broken-down UTC time (proleptic Gregorian calendar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Utc {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: u32) -> i64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(year) => 29,
        _ => 28,
    }
}

impl Utc {
    /// Convert seconds since the Unix epoch (1970-01-01T00:00:00Z) to a UTC date and time.
    /// Times before the epoch are clamped to the epoch (a wrong clock should not fail a run).
    pub(crate) fn from_unix(secs: i64) -> Utc {
        let secs = secs.max(0);
        let mut days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let mut year = 1970;
        loop {
            let len = if is_leap(year) { 366 } else { 365 };
            if days < len {
                break;
            }
            days -= len;
            year += 1;
        }
        let mut month = 1;
        loop {
            let len = days_in_month(year, month);
            if days < len {
                break;
            }
            days -= len;
            month += 1;
        }
        Utc {
            year,
            month,
            day: days as u32 + 1,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
        }
    }

    pub(crate) fn now() -> Utc {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Utc::from_unix(secs)
    }

    /// `YYYYMMDDTHHMMSSZ` (used in default run-directory names).
    pub(crate) fn compact(&self) -> String {
        format!(
            "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// ISO-8601 `YYYY-MM-DDTHH:MM:SSZ`.
    pub(crate) fn iso8601(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// The current UTC time as ISO-8601, e.g. `2025-03-01T12:34:56Z`.
pub fn utc_now_iso8601() -> String {
    Utc::now().iso8601()
}

/// The current UTC time as `YYYYMMDDTHHMMSSZ`, e.g. `20250301T123456Z`.
pub fn utc_now_compact() -> String {
    Utc::now().compact()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(Utc::from_unix(0).iso8601(), "1970-01-01T00:00:00Z");
        // 2000-02-29 (leap day in a 400-year leap year) 12:00:00
        assert_eq!(
            Utc::from_unix(951_825_600).iso8601(),
            "2000-02-29T12:00:00Z"
        );
        // 2024-12-31T23:59:59Z
        assert_eq!(Utc::from_unix(1_735_689_599).compact(), "20241231T235959Z");
        // 2025-01-01T00:00:00Z
        assert_eq!(
            Utc::from_unix(1_735_689_600).iso8601(),
            "2025-01-01T00:00:00Z"
        );
        // 2100-03-01 (2100 is not a leap year)
        assert_eq!(
            Utc::from_unix(4_107_542_400).iso8601(),
            "2100-03-01T00:00:00Z"
        );
    }

    #[test]
    fn now_is_well_formed() {
        let s = utc_now_compact();
        assert_eq!(s.len(), 16);
        assert!(s.ends_with('Z'));
        assert_eq!(utc_now_iso8601().len(), 20);
    }
}
