//! The wire's epoch times as a person reads them, in UTC: the context's
//! event time in `LANGBOT_CONTEXT.md`, the usage ledger's days, the rows
//! the `host` commands print. One calendar for all of them.

/// `YYYY-MM-DD` of a day counted from 1970-01-01.
pub fn date(days: i64) -> String {
    let (year, month, day) = civil(days);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Year, month and day of a day counted from 1970-01-01 (Howard
/// Hinnant's civil-from-days: exact for every `i64` day a clock gives).
pub fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // Both within 1..=31 by construction.
    (year, month as u32, day as u32)
}

/// The day counted from 1970-01-01 of `year-month-day` (the inverse of
/// [`date`], Howard Hinnant's days-from-civil).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let (month, day) = (i64::from(month), i64::from(day));
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The first day of the month `days` falls in, and the first of the next
/// one (the bounds of a monthly budget).
pub fn month_of(days: i64) -> (i64, i64) {
    let (year, month, _) = civil(days);
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    (
        days_from_civil(year, month, 1),
        days_from_civil(next_year, next_month, 1),
    )
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

    #[test]
    fn a_month_runs_from_its_first_day_to_the_next_ones() {
        assert_eq!(days_from_civil(2026, 11, 29), 20_786);
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 2, 29), 11_016);
        let (first, next) = month_of(20_786);
        assert_eq!(
            (date(first).as_str(), date(next).as_str()),
            ("2026-11-01", "2026-12-01")
        );
        let (first, next) = month_of(days_from_civil(2026, 12, 31));
        assert_eq!(
            (date(first).as_str(), date(next).as_str()),
            ("2026-12-01", "2027-01-01")
        );
        let (first, next) = month_of(11_016);
        assert_eq!(
            (date(first).as_str(), date(next).as_str()),
            ("2000-02-01", "2000-03-01")
        );
    }
}
