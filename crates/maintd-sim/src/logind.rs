//! A simulated systemd-logind: the `org.freedesktop.login1.Manager` subset
//! maintd uses, served on a bus given by address (see [`super::dbus`]).
//!
//! Follows logind where it matters for a lock holder: `Inhibit` hands out
//! one end of a pipe and the lock lasts until every copy of it is closed;
//! a delay lock on shutdown is refused while a shutdown is already waiting;
//! `Reboot`/`PowerOff` return at once, emit `PrepareForShutdown(true)` and
//! then wait for delay locks at most `InhibitDelayMaxUSec`. Differences:
//! the "shutdown" is only recorded ([`ShutdownRecord`]) and the sim stays up
//! with `PreparingForShutdown` still true; [`SimLogind::cancel_shutdown`]
//! aborts even a shutdown that waits on locks, which real logind cannot.

mod manager;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;

/// logind's well-known bus name, object path and manager interface, as
/// real logind serves them (the agent has its own copy: the two are
/// independent peers of one protocol).
pub const LOGIND_BUS_NAME: &str = "org.freedesktop.login1";
pub const LOGIND_PATH: &str = "/org/freedesktop/login1";
pub const LOGIND_MANAGER_INTERFACE: &str = "org.freedesktop.login1.Manager";

/// One row of `ListInhibitors`, as logind lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Inhibitor {
    /// Colon-separated operations, e.g. `shutdown:sleep`.
    pub what: String,
    pub who: String,
    pub why: String,
    /// `block` or `delay`.
    pub mode: String,
    pub uid: u32,
    pub pid: u32,
}

impl Inhibitor {
    /// A delay lock on `op` (`shutdown`, `sleep`): one logind waits for.
    pub fn delays(&self, op: &str) -> bool {
        self.mode == "delay" && self.what.split(':').any(|w| w == op)
    }
}

/// Settings of the simulated logind.
#[derive(Debug, Clone)]
pub struct SimLogindConfig {
    /// `InhibitDelayMaxUSec`: the longest a shutdown waits for delay locks.
    pub inhibit_delay_max: Duration,
}

impl Default for SimLogindConfig {
    fn default() -> Self {
        // logind's built-in default.
        SimLogindConfig {
            inhibit_delay_max: Duration::from_secs(5),
        }
    }
}

/// What a simulated shutdown looked like.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShutdownRecord {
    /// `reboot` or `poweroff`.
    pub action: String,
    /// How long it waited on delay locks.
    pub delayed: Duration,
    /// `who` of each delay lock it found when it started waiting.
    pub waited_for: Vec<String>,
    /// It went ahead because `InhibitDelayMaxUSec` ran out, not because
    /// every lock was released.
    pub timed_out: bool,
}

/// How [`SimLogind::restart`] treats the inhibitor table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartMode {
    /// Like logind restoring its state from /run: locks and their fds survive.
    KeepState,
    /// Like a logind that lost /run: every lock is forgotten (and its pipe
    /// closed), and a shutdown in progress is forgotten too.
    LoseState,
    /// Like a logind that answers on the bus before it has read its state
    /// back: for this long its table lists none of the old locks, then
    /// they are back (those whose fd was closed meanwhile stay gone).
    KeepStateLate(Duration),
}

/// Errors of the simulation's own plumbing.
#[derive(Debug, thiserror::Error)]
pub enum SimLogindError {
    /// Could not connect or claim the name.
    #[error("simulated logind cannot serve {LOGIND_BUS_NAME} on {address}: {source}")]
    Serve {
        /// The bus address.
        address: String,
        /// Why.
        #[source]
        source: zbus::Error,
    },
}

pub(crate) struct Entry {
    info: Inhibitor,
    /// Watches the pipe's read end; aborting it closes the pipe.
    watcher: tokio::task::JoinHandle<()>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

pub(crate) struct State {
    delay_max: Duration,
    preparing: bool,
    /// A suspend is waiting for delay locks on sleep.
    sleeping: bool,
    entries: BTreeMap<u64, Entry>,
    next_id: u64,
    records: Vec<ShutdownRecord>,
    cancel: Option<oneshot::Sender<()>>,
    /// logind's InhibitorsMax: more locks than this are refused.
    inhibitors_max: Option<usize>,
    /// Every Inhibit call, granted or refused.
    inhibit_calls: u64,
}

impl State {
    fn delayers(&self, op: Op) -> Vec<String> {
        self.entries
            .values()
            .filter(|e| match op {
                Op::Shutdown => e.info.delays("shutdown"),
                Op::Sleep => e.info.delays("sleep"),
            })
            .map(|e| e.info.who.clone())
            .collect()
    }
}

/// What logind is about to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Shutdown,
    Sleep,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    /// Woken whenever an inhibitor goes away.
    changed: Notify,
    records: watch::Sender<usize>,
    conn: tokio::sync::Mutex<Option<zbus::Connection>>,
    address: String,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not take the simulation down with it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running simulated logind. Dropping it leaves the connection to close
/// with the runtime; call [`SimLogind::stop`] to leave the bus earlier.
#[derive(Clone)]
pub struct SimLogind {
    shared: Arc<Shared>,
}

impl SimLogind {
    /// Serves the Manager object and claims `org.freedesktop.login1`.
    pub async fn start(address: &str, config: SimLogindConfig) -> Result<Self, SimLogindError> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                delay_max: config.inhibit_delay_max,
                preparing: false,
                sleeping: false,
                entries: BTreeMap::new(),
                next_id: 1,
                records: Vec::new(),
                cancel: None,
                inhibitors_max: None,
                inhibit_calls: 0,
            }),
            changed: Notify::new(),
            records: watch::Sender::new(0),
            conn: tokio::sync::Mutex::new(None),
            address: address.to_string(),
        });
        let conn = serve(&shared).await?;
        *shared.conn.lock().await = Some(conn);
        Ok(SimLogind { shared })
    }

    /// The inhibitors it tracks now.
    pub fn inhibitors(&self) -> Vec<Inhibitor> {
        let state = self.shared.state();
        state.entries.values().map(|e| e.info.clone()).collect()
    }

    /// Whether a shutdown was asked for and neither cancelled nor
    /// forgotten (it stays so once recorded, as the sim does not go down).
    pub fn preparing_for_shutdown(&self) -> bool {
        self.shared.state().preparing
    }

    /// Refuses new locks while this many are held, as logind does at its
    /// InhibitorsMax (None: no limit, the default).
    pub fn set_inhibitors_max(&self, max: Option<usize>) {
        self.shared.state().inhibitors_max = max;
    }

    /// How many times `Inhibit` was called, granted or refused.
    pub fn inhibit_calls(&self) -> u64 {
        self.shared.state().inhibit_calls
    }

    /// How many locks `Inhibit` has handed out since start (restarts included).
    pub fn locks_granted(&self) -> u64 {
        self.shared.state().next_id - 1
    }

    /// Every shutdown recorded so far, oldest first.
    pub fn shutdown_records(&self) -> Vec<ShutdownRecord> {
        self.shared.state().records.clone()
    }

    /// Waits until at least `count` shutdowns were recorded; returns them all.
    pub async fn wait_for_shutdowns(&self, count: usize) -> Vec<ShutdownRecord> {
        let mut rx = self.shared.records.subscribe();
        // The sender lives in `shared`, which we hold: this cannot fail.
        let _ = rx.wait_for(|n| *n >= count).await;
        self.shutdown_records()
    }

    /// Changes `InhibitDelayMaxUSec` (as a logind.conf reload would).
    pub fn set_inhibit_delay_max(&self, delay: Duration) {
        self.shared.state().delay_max = delay;
    }

    /// Requests a reboot, as `systemctl reboot` does over D-Bus.
    pub async fn reboot(&self) {
        manager::begin_shutdown(&self.shared, "reboot").await;
    }

    /// Requests a suspend, as `systemctl suspend` does: PrepareForSleep(true),
    /// a wait for delay locks on sleep (at most `InhibitDelayMaxUSec`), a
    /// record with action `suspend`, and at once the resume:
    /// PrepareForSleep(false).
    pub async fn suspend(&self) {
        manager::begin_sleep(&self.shared).await;
    }

    /// Aborts a shutdown in progress and emits `PrepareForShutdown(false)`.
    /// Returns whether one was in progress.
    pub async fn cancel_shutdown(&self) -> bool {
        let cancel = {
            let mut state = self.shared.state();
            if !state.preparing {
                return false;
            }
            state.preparing = false;
            state.cancel.take()
        };
        if let Some(cancel) = cancel {
            let _ = cancel.send(());
        }
        emit_prepare(&self.shared, false).await;
        true
    }

    /// Leaves the bus and comes back under a new unique name, as a logind
    /// restart looks to clients (NameOwnerChanged to none, then to the new one).
    pub async fn restart(&self, mode: RestartMode) -> Result<(), SimLogindError> {
        self.stop().await;
        if mode == RestartMode::LoseState {
            let (forgotten, cancel) = {
                let mut state = self.shared.state();
                state.preparing = false;
                (std::mem::take(&mut state.entries), state.cancel.take())
            };
            // Dropping the entries closes their pipes, as a lost /run would.
            drop(forgotten);
            drop(cancel);
            self.shared.changed.notify_waiters();
        }
        let late = match mode {
            RestartMode::KeepStateLate(after) => {
                Some((after, std::mem::take(&mut self.shared.state().entries)))
            }
            _ => None,
        };
        let conn = serve(&self.shared).await?;
        *self.shared.conn.lock().await = Some(conn);
        if let Some((after, held)) = late {
            tokio::time::sleep(after).await;
            let mut state = self.shared.state();
            // A lock whose fd was closed meanwhile has no watcher left.
            state
                .entries
                .extend(held.into_iter().filter(|(_, e)| !e.watcher.is_finished()));
        }
        Ok(())
    }

    /// Releases the name and closes the connection.
    pub async fn stop(&self) {
        if let Some(conn) = self.shared.conn.lock().await.take() {
            let _ = conn.release_name(LOGIND_BUS_NAME).await;
            let _ = conn.close().await;
        }
    }
}

async fn serve(shared: &Arc<Shared>) -> Result<zbus::Connection, SimLogindError> {
    let err = |source| SimLogindError::Serve {
        address: shared.address.clone(),
        source,
    };
    zbus::connection::Builder::address(shared.address.as_str())
        .map_err(err)?
        .serve_at(LOGIND_PATH, manager::Manager::new(shared.clone()))
        .map_err(err)?
        .name(LOGIND_BUS_NAME)
        .map_err(err)?
        .build()
        .await
        .map_err(err)
}

async fn emit_prepare(shared: &Shared, start: bool) {
    emit(shared, "PrepareForShutdown", start).await;
}

async fn emit(shared: &Shared, signal: &str, start: bool) {
    let conn = shared.conn.lock().await.clone();
    if let Some(conn) = conn {
        let sent = conn
            .emit_signal(
                None::<&str>,
                LOGIND_PATH,
                LOGIND_MANAGER_INTERFACE,
                signal,
                &(start,),
            )
            .await;
        if let Err(e) = sent {
            tracing::warn!(error = %e, "simulated logind could not emit {signal}");
        }
    }
}

/// Waits for delay locks on `op` to go, at most `delay_max`, then records.
/// Returns false if cancelled first.
async fn wait_and_record(
    shared: Arc<Shared>,
    op: Op,
    action: &'static str,
    mut cancelled: oneshot::Receiver<()>,
) -> bool {
    let (started, deadline, waited_for) = {
        let state = shared.state();
        let now = Instant::now();
        (now, now + state.delay_max, state.delayers(op))
    };
    let timed_out = loop {
        let notified = shared.changed.notified();
        tokio::pin!(notified);
        // Register before looking, so a release in between is not missed.
        notified.as_mut().enable();
        if shared.state().delayers(op).is_empty() {
            break false;
        }
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep_until(deadline) => break true,
            _ = &mut cancelled => return false,
        }
    };
    let count = {
        let mut state = shared.state();
        state.cancel = None;
        state.records.push(ShutdownRecord {
            action: action.to_string(),
            delayed: started.elapsed(),
            waited_for,
            timed_out,
        });
        state.records.len()
    };
    shared.records.send_replace(count);
    true
}

/// A suspend: waits for delay locks on sleep, records it, and resumes.
async fn sleep_and_resume(shared: Arc<Shared>) {
    // Nothing cancels a suspend here; the sender lives until it is done.
    let (_keep, never) = oneshot::channel();
    wait_and_record(shared.clone(), Op::Sleep, "suspend", never).await;
    shared.state().sleeping = false;
    emit(&shared, "PrepareForSleep", false).await;
}
