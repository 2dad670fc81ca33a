//! The wire's epoch times as a person reads them, in UTC: the context's
//! event time in `LANGBOT_CONTEXT.md`, the usage ledger's days, the rows
//! the `host` commands print. One calendar for all of them.

/// `YYYY-MM-DD` of a day counted from 1970-01-01 (Howard Hinnant's
/// civil-from-days: exact for every `i64` day a clock gives).
pub fn date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// `YYYY-MM-DD HH:MM:SS` of an epoch time in seconds.
pub fn date_time(epoch_seconds: i64) -> String {
    let secs = epoch_seconds.rem_euclid(86_400);
    format!(
        "{} {:02}:{:02}:{:02}",
        date(epoch_seconds.div_euclid(86_400)),
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_and_times_are_read_in_utc() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(20_786), "2026-11-29");
        assert_eq!(date(11_016), "2000-02-29");
        assert_eq!(date(-1), "1969-12-31");
        assert_eq!(date_time(1_795_948_591), "2026-11-29 10:36:31");
    }
}
