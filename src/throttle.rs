//! Refusals reported at most once a second, with a count: what a sender
//! can repeat for free (a wrong token, a connection over the limit, a
//! request from another site) must not cost the bridge a log line or an
//! audit row each time, yet none goes uncounted.

/// Counts refusals and says when a report is due.
#[derive(Debug, Default)]
pub struct RefusalThrottle {
    last_report_ms: i64,
    since: u64,
}

impl RefusalThrottle {
    /// Count one refusal at `now_ms`; `Some(n)` when a report is due,
    /// covering the `n` refusals since the last one.
    pub fn refused(&mut self, now_ms: i64) -> Option<u64> {
        self.since += 1;
        if now_ms - self.last_report_ms < 1000 {
            return None;
        }
        self.last_report_ms = now_ms;
        Some(std::mem::take(&mut self.since))
    }
}

/// A throttle shared by the tasks that refuse.
#[derive(Debug, Default)]
pub struct SharedThrottle(std::sync::Mutex<RefusalThrottle>);

impl SharedThrottle {
    /// A throttle with nothing counted (usable in a `static`).
    pub const fn new() -> Self {
        SharedThrottle(std::sync::Mutex::new(RefusalThrottle {
            last_report_ms: 0,
            since: 0,
        }))
    }

    /// [`RefusalThrottle::refused`], now.
    pub fn refused(&self) -> Option<u64> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .refused(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_report_a_second_with_the_count() {
        let mut throttle = RefusalThrottle::default();
        assert_eq!(throttle.refused(10_000), Some(1));
        assert_eq!(throttle.refused(10_100), None);
        assert_eq!(throttle.refused(10_900), None);
        assert_eq!(throttle.refused(11_000), Some(3));
    }
}
