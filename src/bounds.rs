//! Moments built from input. A number read from an object, a manifest or a
//! D-Bus reply can be as large as its type allows (a pod's grace period of
//! i64::MAX seconds passes the API server's validation); a moment built
//! from it saturates instead of panicking the task that computes it.

use std::time::Duration;

use tokio::time::Instant;

/// Longer than any process lives: a wait this long is a wait without end.
pub const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `at + d`, with `d` no longer than [`FAR`].
pub fn later(at: Instant, d: Duration) -> Instant {
    at.checked_add(d.min(FAR)).unwrap_or(at)
}

/// Whole seconds from input as a duration: a negative number is none, and
/// more than [`FAR`] is [`FAR`].
pub fn seconds(s: i64) -> Duration {
    Duration::from_secs(s.max(0).unsigned_abs()).min(FAR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_inputs_give_moments_not_panics() {
        let now = Instant::now();
        assert_eq!(seconds(-5), Duration::ZERO);
        assert_eq!(seconds(30), Duration::from_secs(30));
        assert_eq!(seconds(i64::MAX), FAR);
        assert_eq!(later(now, Duration::MAX), now + FAR);
        assert_eq!(later(now, seconds(i64::MAX)), now + FAR);
        assert_eq!(
            later(now, Duration::from_secs(2)),
            now + Duration::from_secs(2)
        );
    }
}
