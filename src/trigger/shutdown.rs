//! The shutdown trigger: maintd holds a logind delay lock on shutdown; when
//! logind announces a shutdown (PrepareForShutdown(true)) the node is
//! drained against logind's delay budget and the lock is released as soon
//! as the drain is done — and always before the budget runs out, since
//! logind goes ahead then anyway (fail open). A cancelled shutdown ends the
//! trigger; the lock is taken again.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::inhibitor::{
    InhibitorConfig, InhibitorHandle, InhibitorStatus, ShutdownEvent, ShutdownInhibitor,
};

/// How much of logind's budget the drain may use: the budget less a safety
/// margin (at most a quarter of the budget), so the lock is released
/// before logind stops waiting.
pub fn drain_window(budget: Duration, margin: Duration) -> Duration {
    budget.saturating_sub(margin.min(budget / 4))
}

/// A shutdown (or, with `--inhibit-sleep`, a suspend) being waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveShutdown {
    pub budget: Duration,
    /// A suspend, not a shutdown: the node comes back with its pods gone,
    /// and the drain is undone on resume.
    pub sleep: bool,
    /// Release the lock by then at the latest.
    pub deadline: Instant,
}

pub struct ShutdownTrigger {
    handle: InhibitorHandle,
    events: mpsc::Receiver<ShutdownEvent>,
    margin: Duration,
    active: Option<ActiveShutdown>,
    released: bool,
}

impl ShutdownTrigger {
    /// Starts holding the lock (its own task reconnects and re-takes it).
    pub fn start(config: InhibitorConfig, margin: Duration) -> Self {
        let (handle, events) = ShutdownInhibitor::start(config);
        ShutdownTrigger {
            handle,
            events,
            margin,
            active: None,
            released: false,
        }
    }

    /// The next event from logind (pending forever once the inhibitor task
    /// is gone).
    pub async fn next(&mut self) -> ShutdownEvent {
        match self.events.recv().await {
            Some(ev) => ev,
            None => std::future::pending().await,
        }
    }

    /// Takes an event into account; returns whether the trigger changed.
    /// A suspend is handled like a shutdown (drain, release before the
    /// budget) and a resume like a cancelled shutdown (the lock is taken
    /// again, the drain undone).
    pub fn on_event(&mut self, ev: &ShutdownEvent) -> bool {
        let (budget, sleep) = match ev {
            ShutdownEvent::Preparing { budget, .. } => (*budget, false),
            ShutdownEvent::PreparingSleep { budget } => (*budget, true),
            ShutdownEvent::Cancelled | ShutdownEvent::Resumed => {
                self.released = false;
                return self.active.take().is_some();
            }
            _ => return false,
        };
        if self.active.is_some() {
            return false;
        }
        self.released = false;
        self.active = Some(ActiveShutdown {
            budget,
            sleep,
            deadline: crate::bounds::later(Instant::now(), drain_window(budget, self.margin)),
        });
        true
    }

    pub fn active(&self) -> Option<ActiveShutdown> {
        self.active
    }

    /// The time by which the lock must be released, while it still is held
    /// for a shutdown.
    pub fn release_deadline(&self) -> Option<Instant> {
        self.active.filter(|_| !self.released).map(|a| a.deadline)
    }

    /// Lets logind go ahead: closes the lock's fd. Once per shutdown.
    pub async fn release(&mut self) -> Result<bool, String> {
        if self.released || self.active.is_none() {
            return Ok(false);
        }
        self.released = true;
        self.handle
            .release()
            .await
            .map(|_| true)
            .map_err(|e| e.to_string())
    }

    pub fn status(&self) -> InhibitorStatus {
        self.handle.status()
    }

    pub fn watch_status(&self) -> tokio::sync::watch::Receiver<InhibitorStatus> {
        self.handle.watch_status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logind::BusAddress;

    /// A trigger whose lock holder has no logind to talk to (it keeps
    /// trying to connect): what the trigger decides is its own.
    fn trigger(margin: Duration) -> (ShutdownTrigger, String) {
        let mut cfg = InhibitorConfig::new("node-a");
        cfg.bus = BusAddress::Address("unix:path=/nonexistent/maintd-test-bus".into());
        let token = cfg.token.clone();
        (ShutdownTrigger::start(cfg, margin), token)
    }

    /// A shutdown is taken once, with its deadline inside logind's budget;
    /// the lock is let go once; a cancel ends it and the next shutdown is
    /// a new one. A suspend is handled the same way and ends on resume.
    #[tokio::test(start_paused = true)]
    async fn a_shutdown_is_taken_once_released_once_and_ended_by_a_cancel() {
        let s = Duration::from_secs;
        let (mut t, token) = trigger(s(10));
        assert_eq!(t.status().token, token);
        assert_eq!(t.watch_status().borrow().token, token);
        assert_eq!(t.release().await, Ok(false), "nothing to release yet");
        assert!(!t.on_event(&ShutdownEvent::LockHeld));
        assert!(t.active().is_none());

        let at = Instant::now();
        let preparing = |budget| ShutdownEvent::Preparing {
            budget,
            already_in_progress: false,
        };
        assert!(t.on_event(&preparing(s(300))));
        let want = ActiveShutdown {
            budget: s(300),
            sleep: false,
            deadline: at + s(290),
        };
        assert_eq!(t.active(), Some(want));
        assert_eq!(t.release_deadline(), Some(at + s(290)));
        // The same shutdown announced again (a reconnect) changes nothing.
        assert!(!t.on_event(&preparing(s(30))));
        assert_eq!(t.active(), Some(want));

        assert_eq!(t.release().await, Ok(true));
        assert_eq!(t.release_deadline(), None, "released: no deadline left");
        assert_eq!(t.active(), Some(want), "still shutting down");
        assert_eq!(t.release().await, Ok(false), "once per shutdown");

        assert!(t.on_event(&ShutdownEvent::Cancelled));
        assert!(t.active().is_none());
        assert!(
            !t.on_event(&ShutdownEvent::Cancelled),
            "nothing left to end"
        );

        let at = Instant::now();
        assert!(t.on_event(&ShutdownEvent::PreparingSleep { budget: s(40) }));
        let active = t.active().unwrap();
        assert!(active.sleep);
        assert_eq!(active.deadline, at + s(30));
        assert_eq!(t.release_deadline(), Some(at + s(30)), "a new one");
        assert!(t.on_event(&ShutdownEvent::Resumed));
        assert!(t.active().is_none());

        // A budget no logind gives (the node helper's message is taken as
        // it is sent): a shutdown with a deadline far off, not a crash.
        let at = Instant::now();
        assert!(t.on_event(&preparing(Duration::MAX)));
        assert!(t.active().unwrap().deadline > at + s(365 * 24 * 3600));
    }

    #[test]
    fn the_drain_window_leaves_a_margin_inside_the_budget() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        for (budget, margin, want) in [
            (s(300), s(10), s(290)),
            (s(30), s(10), ms(22_500)),
            (s(5), s(2), ms(3_750)),
            (s(0), s(2), s(0)),
            (s(60), s(0), s(60)),
        ] {
            let w = drain_window(budget, margin);
            assert_eq!(w, want, "budget {budget:?} margin {margin:?}");
            assert!(w <= budget);
        }
    }
}
