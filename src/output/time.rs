//! UTC wall-clock timestamps in the two spellings vpm writes (through `jiff`).

use jiff::Timestamp;

/// `YYYYMMDDTHHMMSSZ` (default run-directory names).
const COMPACT: &str = "%Y%m%dT%H%M%SZ";
/// ISO-8601 `YYYY-MM-DDTHH:MM:SSZ` (manifests, the run-directory lock).
const ISO8601: &str = "%Y-%m-%dT%H:%M:%SZ";

/// `ts` in UTC with the `strftime` pattern `format`, whole seconds.
fn format_utc(ts: Timestamp, format: &str) -> String {
    ts.strftime(format).to_string()
}

/// The current UTC time as ISO-8601, e.g. `2025-03-01T12:34:56Z`.
pub fn utc_now_iso8601() -> String {
    format_utc(Timestamp::now(), ISO8601)
}

/// The current UTC time as `YYYYMMDDTHHMMSSZ`, e.g. `20250301T123456Z`.
pub fn utc_now_compact() -> String {
    format_utc(Timestamp::now(), COMPACT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64, format: &str) -> String {
        format_utc(Timestamp::from_second(secs).unwrap(), format)
    }

    #[test]
    fn known_instants() {
        assert_eq!(at(0, ISO8601), "1970-01-01T00:00:00Z");
        // 2000-02-29 (leap day in a 400-year leap year) 12:00:00
        assert_eq!(at(951_825_600, ISO8601), "2000-02-29T12:00:00Z");
        assert_eq!(at(1_735_689_599, COMPACT), "20241231T235959Z");
        assert_eq!(at(1_735_689_600, ISO8601), "2025-01-01T00:00:00Z");
        // 2100-03-01 (2100 is not a leap year)
        assert_eq!(at(4_107_542_400, ISO8601), "2100-03-01T00:00:00Z");
        // sub-second parts are dropped, not rounded
        let ts = Timestamp::new(1_735_689_599, 999_999_999).unwrap();
        assert_eq!(format_utc(ts, COMPACT), "20241231T235959Z");
    }

    #[test]
    fn now_is_well_formed() {
        let s = utc_now_compact();
        assert_eq!(s.len(), 16);
        assert!(s.ends_with('Z') && s.as_bytes()[8] == b'T');
        let s = utc_now_iso8601();
        assert_eq!(s.len(), 20);
        assert_eq!(&s[4..5], "-");
    }
}
