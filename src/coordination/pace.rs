//! How long this agent's slot writes take to be answered, and so how long
//! a node that saw a slot free lets the node that goes first take it.
//!
//! When a slot frees, the node holding the place of its number takes it
//! at once, and the other nodes in line near it try only after a head
//! start. On a quick API server 300 ms is enough for the first node's
//! write to land and reach the others' watches; on a busy one (1,000
//! nodes on two cores: writes answered in 0.4 s on average, one in ten
//! after 1.4 s) the others tried before it landed, and each lost with a
//! conflict: half the handovers went to another node than the first's, at
//! five refused writes each. So the head start follows what the agent's
//! own slot writes take, the way TCP sets its retransmission timer: their
//! smoothed round trip and four times its spread (RFC 6298), the round
//! trip counted twice (the give-back on its way to the first node, its
//! take on its way back), on top of the 300 ms of a quick API server.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::slots::OWN_HEAD_START;

/// The longest head start, however slow the writes: a node that should go
/// first and does not (it stopped, it left the rollout) keeps a freed slot
/// empty no longer than this.
pub const MAX_HEAD_START: Duration = Duration::from_secs(5);

/// The most a slow API server stretches the random pause before a take
/// (see [`WriteTimes::stretch`]). Twice at most was tried at 1,000 nodes:
/// the places in line did not fill again sooner (9.9 s on average, against
/// 9.3 s at five times), and more writes were refused.
const MAX_STRETCH: f64 = 5.0;

/// The round trips of one agent's slot writes (takes, renewals,
/// give-backs; refused ones too: a conflict is answered after the same
/// queue and the same store). Cheap to clone; clones share them.
#[derive(Clone, Default)]
pub struct WriteTimes {
    inner: Arc<Mutex<Option<Smoothed>>>,
}

/// RFC 6298's smoothed round trip and its mean deviation, in seconds.
#[derive(Clone, Copy, Debug)]
struct Smoothed {
    srtt: f64,
    rttvar: f64,
}

impl WriteTimes {
    /// Notes one write answered after `took`.
    pub fn note(&self, took: Duration) {
        let r = took.as_secs_f64();
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *s = Some(match *s {
            None => Smoothed {
                srtt: r,
                rttvar: r / 2.0,
            },
            Some(Smoothed { srtt, rttvar }) => Smoothed {
                rttvar: 0.75 * rttvar + 0.25 * (srtt - r).abs(),
                srtt: 0.875 * srtt + 0.125 * r,
            },
        });
    }

    /// How long the other nodes near a freed slot let the node that goes
    /// first take it: [`OWN_HEAD_START`] plus twice the writes' smoothed
    /// round trip (the give-back reaching the first node, its take
    /// reaching the others: a busy API server is as slow to carry a write
    /// to the watches as to answer it) and four times its spread;
    /// [`OWN_HEAD_START`] alone until a write was answered; at most
    /// [`MAX_HEAD_START`].
    pub fn head_start(&self) -> Duration {
        let s = *self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let extra = s.map_or(0.0, |s| 2.0 * s.srtt + 4.0 * s.rttvar);
        // A NaN or an infinity never gets here: every sample is a finite
        // Duration, and so are their means.
        (OWN_HEAD_START + Duration::from_secs_f64(extra.clamp(0.0, 60.0))).min(MAX_HEAD_START)
    }

    /// How many times longer the random pause before a take is than on a
    /// quick API server: the head start against [`OWN_HEAD_START`], 1 to
    /// 5. Of the nodes that saw a slot free, about as few try before the
    /// first one's write reaches them as on a quick one, where each write
    /// a slow API server refuses costs it more.
    pub fn stretch(&self) -> f64 {
        (self.head_start().as_secs_f64() / OWN_HEAD_START.as_secs_f64()).clamp(1.0, MAX_STRETCH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_quick_api_server_keeps_the_short_head_start() {
        let t = WriteTimes::default();
        assert_eq!(t.head_start(), OWN_HEAD_START, "nothing timed yet");
        assert_eq!(t.stretch(), 1.0);
        for _ in 0..20 {
            t.note(ms(10));
        }
        assert!(t.head_start() < ms(330), "{:?}", t.head_start());
        assert!(t.stretch() < 1.1, "{}", t.stretch());
    }

    #[test]
    fn slow_writes_lengthen_it_past_what_they_take() {
        let t = WriteTimes::default();
        // Writes answered after 700 ms each: the head start covers two
        // (the give-back and the take), however long the series.
        for n in 0..50 {
            t.note(ms(700));
            assert!(
                t.head_start() >= ms(1700),
                "after {n}: {:?}",
                t.head_start()
            );
        }
        // Uneven ones (0.2 s to 1.4 s) lengthen it further.
        let even = t.head_start();
        for n in 0..20 {
            t.note(ms(if n % 2 == 0 { 200 } else { 1400 }));
        }
        assert!(t.head_start() > even, "{:?} <= {even:?}", t.head_start());
        assert!(t.stretch() > 3.0, "{}", t.stretch());
    }

    #[test]
    fn it_is_bounded_and_comes_back_when_the_api_server_does() {
        let t = WriteTimes::default();
        t.note(Duration::from_secs(3600));
        assert_eq!(t.head_start(), MAX_HEAD_START);
        assert_eq!(t.stretch(), MAX_STRETCH);
        for _ in 0..100 {
            t.note(ms(10));
        }
        assert!(t.head_start() < ms(400), "{:?}", t.head_start());
        // Clones share what they noted.
        let c = t.clone();
        c.note(Duration::from_secs(3600));
        assert!(t.head_start() > ms(400));
    }
}
