//! The lock holder's task: one D-Bus session at a time, reconnecting with a
//! capped backoff when the bus goes away.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::{
    Command, CompetingInhibitor, InhibitWhat, InhibitorConfig, InhibitorStatus, ShutdownEvent,
};
use crate::index::sleep_until;
use crate::logind::{Inhibitor, InhibitorLock, Logind, LogindError};

type BoolStream = Pin<Box<dyn Stream<Item = bool> + Send>>;

/// Why a session ended.
enum Exit {
    /// The handle was dropped.
    Stop,
    /// The bus (or our subscription) is gone.
    Reconnect(String),
}

impl From<LogindError> for Exit {
    fn from(e: LogindError) -> Self {
        Exit::Reconnect(e.to_string())
    }
}

pub(super) struct Runner {
    cfg: InhibitorConfig,
    why: String,
    events: mpsc::Sender<ShutdownEvent>,
    status: watch::Sender<InhibitorStatus>,
    commands: mpsc::Receiver<Command>,
    /// The fd; kept across bus outages because a restarted logind may
    /// re-attach it from its state in /run.
    lock: Option<InhibitorLock>,
    /// The consumer released the lock for the current shutdown; it is taken
    /// again only after a cancel or resume.
    released: bool,
    preparing: bool,
    /// LockLost was already sent for the current outage.
    lost_reported: bool,
    /// logind refused the lock (not a lost bus): when to ask again, and
    /// the pause after that, doubling up to `reconnect_max`.
    lock_retry: Option<Instant>,
    lock_backoff: Duration,
    competing_seen: BTreeSet<(String, String)>,
}

impl Runner {
    pub(super) fn new(
        cfg: InhibitorConfig,
        events: mpsc::Sender<ShutdownEvent>,
        status: watch::Sender<InhibitorStatus>,
        commands: mpsc::Receiver<Command>,
    ) -> Self {
        Runner {
            lock_backoff: cfg.reconnect_initial,
            why: cfg.why(),
            cfg,
            events,
            status,
            commands,
            lock: None,
            released: false,
            preparing: false,
            lost_reported: false,
            lock_retry: None,
            competing_seen: BTreeSet::new(),
        }
    }

    pub(super) async fn run(mut self) {
        let mut backoff = self.cfg.reconnect_initial;
        loop {
            let mut connected = false;
            let reason = match self.session(&mut connected).await {
                Exit::Stop => return,
                Exit::Reconnect(reason) => reason,
            };
            if connected {
                backoff = self.cfg.reconnect_initial;
            }
            tracing::warn!(%reason, retry_in = ?backoff, "logind connection lost");
            self.mark_lost(format!("D-Bus: {reason}")).await;
            let deadline = Instant::now() + backoff;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => break,
                    cmd = self.commands.recv() => match cmd {
                        None => return,
                        Some(cmd) => self.command(cmd),
                    },
                }
            }
            backoff = (backoff * 2).min(self.cfg.reconnect_max);
        }
    }

    async fn session(&mut self, connected: &mut bool) -> Exit {
        let logind = match Logind::connect(&self.cfg.bus).await {
            Ok(l) => l,
            Err(e) => return e.into(),
        };
        // Subscribe before taking the lock, so no PrepareForShutdown can
        // slip between the two.
        let mut shutdown: BoolStream = match logind.receive_prepare_for_shutdown().await {
            Ok(s) => Box::pin(s),
            Err(e) => return e.into(),
        };
        let mut sleep: BoolStream = match self.cfg.what {
            InhibitWhat::ShutdownSleep => match logind.receive_prepare_for_sleep().await {
                Ok(s) => Box::pin(s),
                Err(e) => return e.into(),
            },
            InhibitWhat::Shutdown => Box::pin(futures::stream::pending()),
        };
        let mut owner = match logind.receive_owner_changed().await {
            Ok(s) => s,
            Err(e) => return e.into(),
        };
        *connected = true;
        self.lock_retry = None;

        if let Err(exit) = self.sync_preparing(&logind).await {
            return exit;
        }
        if let Err(exit) = self.reconcile(&logind, false).await {
            return exit;
        }

        loop {
            let step = tokio::select! {
                s = shutdown.next() => match s {
                    None => return Exit::Reconnect("PrepareForShutdown subscription ended".into()),
                    Some(true) => self.on_prepare(&logind, false).await,
                    Some(false) => self.on_finish(&logind, ShutdownEvent::Cancelled).await,
                },
                s = sleep.next() => match s {
                    None => return Exit::Reconnect("PrepareForSleep subscription ended".into()),
                    Some(true) => self.on_prepare(&logind, true).await,
                    Some(false) => self.on_finish(&logind, ShutdownEvent::Resumed).await,
                },
                o = owner.next() => match o {
                    None => return Exit::Reconnect("NameOwnerChanged subscription ended".into()),
                    Some(None) => {
                        // Keep the fd: a restarted logind may restore this lock.
                        if self.lock.is_some() {
                            self.mark_lost("logind left the bus".into()).await;
                        } else {
                            self.note_error("logind left the bus".into());
                        }
                        Ok(())
                    }
                    Some(Some(new_owner)) => {
                        tracing::info!(%new_owner, "logind (re)appeared on the bus");
                        match self.sync_preparing(&logind).await {
                            Ok(()) => self.reconcile(&logind, true).await,
                            Err(exit) => Err(exit),
                        }
                    }
                },
                cmd = self.commands.recv() => match cmd {
                    None => return Exit::Stop,
                    Some(cmd) => { self.command(cmd); Ok(()) }
                },
                () = sleep_until(self.lock_retry) => {
                    self.lock_retry = None;
                    self.reconcile(&logind, false).await
                }
            };
            if let Err(exit) = step {
                return exit;
            }
        }
    }

    /// Reads `PreparingForShutdown` when we may have missed its signals
    /// (start, reconnect, logind restart): a shutdown already under way
    /// gets the conservative budget, as we cannot know when logind's clock
    /// started; one that ended meanwhile counts as cancelled.
    async fn sync_preparing(&mut self, logind: &Logind) -> Result<(), Exit> {
        match logind.preparing_for_shutdown().await {
            Ok(true) if !self.preparing => {
                self.preparing = true;
                let budget = self.read_budget(logind).await?;
                let budget = budget.min(self.cfg.in_progress_budget);
                self.status.send_modify(|s| s.preparing = true);
                self.set_budget(budget);
                self.emit(ShutdownEvent::Preparing {
                    budget,
                    already_in_progress: true,
                })
                .await;
            }
            Ok(false) if self.preparing => {
                self.preparing = false;
                self.released = false;
                self.status.send_modify(|s| s.preparing = false);
                self.emit(ShutdownEvent::Cancelled).await;
            }
            Ok(_) => {}
            Err(e) if e.is_disconnect() => return Err(e.into()),
            Err(e) => self.note_error(e.to_string()),
        }
        Ok(())
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Release(ack) => {
                // Dropping the fd is what releases the lock.
                self.lock = None;
                self.released = true;
                self.status.send_modify(|s| s.held = false);
                tracing::info!("shutdown inhibitor released");
                let _ = ack.send(());
            }
        }
    }

    async fn on_prepare(&mut self, logind: &Logind, sleep: bool) -> Result<(), Exit> {
        let budget = self.read_budget(logind).await?;
        self.set_budget(budget);
        if sleep {
            self.emit(ShutdownEvent::PreparingSleep { budget }).await;
        } else {
            self.preparing = true;
            self.status.send_modify(|s| s.preparing = true);
            self.emit(ShutdownEvent::Preparing {
                budget,
                already_in_progress: false,
            })
            .await;
        }
        Ok(())
    }

    async fn on_finish(&mut self, logind: &Logind, event: ShutdownEvent) -> Result<(), Exit> {
        if event == ShutdownEvent::Cancelled {
            self.preparing = false;
            self.status.send_modify(|s| s.preparing = false);
        }
        self.emit(event).await;
        self.released = false;
        self.reconcile(logind, false).await
    }

    /// Reads `InhibitDelayMaxUSec`; an unreadable value is reported and the
    /// fallback used, since a shutdown is coming either way.
    async fn read_budget(&mut self, logind: &Logind) -> Result<Duration, Exit> {
        match logind.inhibit_delay_max().await {
            Ok(b) => Ok(b),
            Err(e) if e.is_disconnect() => Err(e.into()),
            Err(e) => {
                tracing::warn!(error = %e, fallback = ?self.cfg.fallback_budget, "using fallback shutdown budget");
                self.note_error(e.to_string());
                Ok(self.cfg.fallback_budget)
            }
        }
    }

    /// Makes sure exactly one lock of ours exists, unless released. With
    /// `after_restart`, a missing lock gets `restore_grace` to reappear
    /// first: a restarted logind may still be restoring its state.
    async fn reconcile(&mut self, logind: &Logind, after_restart: bool) -> Result<(), Exit> {
        let mut ours = self.count_ours(logind).await?;
        if ours == Some(0) && after_restart && self.lock.is_some() && !self.released {
            tokio::time::sleep(self.cfg.restore_grace).await;
            ours = self.count_ours(logind).await?;
        }
        if self.released {
            return Ok(());
        }
        match ours {
            None if self.lock.is_some() => {
                // Keep the fd (it may still count) but don't claim it does.
                let reason = self.status.borrow().last_error.clone();
                self.mark_lost(reason.unwrap_or_else(|| "cannot list inhibitors".into()))
                    .await;
                return Ok(());
            }
            Some(n) if n > 0 && self.lock.is_some() => {
                if n > 1 {
                    tracing::warn!(n, token = %self.cfg.token, "logind lists more than one lock with our token");
                }
                self.mark_held().await;
                return Ok(());
            }
            Some(n) if n > 0 => {
                tracing::warn!(token = %self.cfg.token, "logind lists a lock with our token that we hold no fd for");
            }
            _ => {}
        }
        // Whatever fd we still have belongs to a lock logind forgot.
        self.lock = None;
        match logind
            .inhibit(self.cfg.what.as_str(), &self.cfg.who, &self.why, "delay")
            .await
        {
            Ok(lock) => {
                self.lock = Some(lock);
                self.mark_held().await;
                Ok(())
            }
            Err(e) if e.is_disconnect() => Err(e.into()),
            Err(e) => {
                // Refused (too many inhibitors, not allowed, a shutdown
                // already running): asked again after a pause, so a
                // refusal that passes does not leave the node unguarded.
                let retry_in = self.lock_backoff;
                self.lock_backoff = (retry_in * 2).min(self.cfg.reconnect_max);
                self.lock_retry = Some(Instant::now() + retry_in);
                tracing::warn!(error = %e, ?retry_in, "cannot take the shutdown delay lock");
                self.mark_lost(e.to_string()).await;
                Ok(())
            }
        }
    }

    /// Lists inhibitors, reports kubelet's, and counts ours; `None` when
    /// logind could not be asked (the error is in the status).
    async fn count_ours(&mut self, logind: &Logind) -> Result<Option<usize>, Exit> {
        let list = match logind.list_inhibitors().await {
            Ok(l) => l,
            Err(e) if e.is_disconnect() => return Err(e.into()),
            Err(e) => {
                self.note_error(e.to_string());
                return Ok(None);
            }
        };
        self.report_competing(&list).await;
        Ok(Some(
            list.iter()
                .filter(|i| i.why.contains(&self.cfg.token))
                .count(),
        ))
    }

    async fn report_competing(&mut self, list: &[Inhibitor]) {
        let competing: Vec<CompetingInhibitor> = list
            .iter()
            .filter(|i| {
                i.delays_shutdown()
                    && i.who.eq_ignore_ascii_case("kubelet")
                    && !i.why.contains(&self.cfg.token)
            })
            .map(|i| CompetingInhibitor {
                who: i.who.clone(),
                why: i.why.clone(),
            })
            .collect();
        for c in &competing {
            if self.competing_seen.insert((c.who.clone(), c.why.clone())) {
                tracing::warn!(who = %c.who, why = %c.why,
                    "the kubelet's graceful node shutdown holds a delay lock: it kills pods as soon as a shutdown is announced, beside maintd's drain; set the kubelet's shutdownGracePeriod to 0s");
                self.emit(ShutdownEvent::CompetingInhibitor {
                    who: c.who.clone(),
                    why: c.why.clone(),
                })
                .await;
            }
        }
        self.status.send_modify(|s| s.competing = competing);
    }

    async fn mark_held(&mut self) {
        let was_held = self.status.borrow().held;
        self.lost_reported = false;
        self.lock_retry = None;
        self.lock_backoff = self.cfg.reconnect_initial;
        self.status.send_modify(|s| {
            s.held = true;
            s.last_error = None;
        });
        if !was_held {
            tracing::info!(token = %self.cfg.token, "shutdown delay lock held");
            self.emit(ShutdownEvent::LockHeld).await;
        }
    }

    /// Reports the lock as lost once per outage; later failures only
    /// update `last_error`.
    async fn mark_lost(&mut self, reason: String) {
        let was_held = self.status.borrow().held;
        self.status.send_modify(|s| {
            s.held = false;
            s.last_error = Some(reason.clone());
        });
        if was_held || !self.lost_reported {
            self.lost_reported = true;
            self.emit(ShutdownEvent::LockLost { reason }).await;
        }
    }

    fn note_error(&self, error: String) {
        self.status.send_modify(|s| s.last_error = Some(error));
    }

    fn set_budget(&self, budget: Duration) {
        self.status.send_modify(|s| s.budget = Some(budget));
    }

    async fn emit(&self, event: ShutdownEvent) {
        // A consumer that went away is not our failure; keep holding the lock.
        let _ = self.events.send(event).await;
    }
}
