//! When to try a call again and how long to wait first: exponential back-off with jitter, or
//! the server's `Retry-After` (delay-seconds or an HTTP date), within the call's deadline.

use std::time::{Duration, SystemTime};

/// The back-off before retry `n` (1-based): `initial · 2^(n-1)` capped at `max`, then a random
/// share of it between half and all (`unit` in `[0, 1)` picks it), so that callers refused
/// together do not come back together.
pub fn backoff(n: u32, initial: Duration, max: Duration, unit: f64) -> Duration {
    let factor = 2u32.saturating_pow(n.saturating_sub(1));
    let full = initial.saturating_mul(factor).min(max);
    full.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0))
}

/// A `Retry-After` value as a wait from `now`: delay-seconds (`"2"`, also `"1.5"` as some
/// servers send) or an HTTP date (a date in the past is no wait). `None` when it is neither.
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0)
            .then(|| Duration::try_from_secs_f64(secs).ok())
            .flatten();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter_between_half_and_all() {
        let (i, m) = (Duration::from_millis(100), Duration::from_millis(1000));
        assert_eq!(backoff(1, i, m, 1.0), Duration::from_millis(100));
        assert_eq!(backoff(2, i, m, 1.0), Duration::from_millis(200));
        assert_eq!(backoff(3, i, m, 0.0), Duration::from_millis(200));
        assert_eq!(backoff(5, i, m, 1.0), Duration::from_millis(1000));
        assert_eq!(backoff(40, i, m, 1.0), Duration::from_millis(1000));
        for k in 0..100 {
            let d = backoff(2, i, m, fastrand::f64());
            assert!(
                d >= Duration::from_millis(100) && d <= Duration::from_millis(200),
                "{k}: {d:?}"
            );
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(" 1.5 ", now), Some(Duration::from_millis(1500)));
        // RFC 9110's example date is 784111777.
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:40 GMT", now),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:30 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("-1", now), None);
        assert_eq!(retry_after("soon", now), None);
    }
}
