//! Holds maintd's logind delay lock on shutdown and turns logind's signals
//! into [`ShutdownEvent`]s for the shutdown trigger.
//!
//! Timing contract (from logind, not from us): after `PrepareForShutdown(true)`
//! logind waits for delay locks at most `InhibitDelayMaxUSec` — the
//! [`ShutdownEvent::Preparing`] `budget` — and then shuts down even while our
//! fd is still open. A drain must therefore finish, and call
//! [`InhibitorHandle::release`], within that budget; holding the lock longer
//! buys nothing. A shutdown already waiting on delay locks cannot be
//! cancelled by us either: releasing is the only lever.
//!
//! The lock holder runs in its own task: losing D-Bus or logind never stops
//! the other triggers, it only produces [`ShutdownEvent::LockLost`].

mod remote;
mod runner;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};

use crate::logind::BusAddress;

/// Which operations the lock delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InhibitWhat {
    /// Shutdown and reboot only.
    #[default]
    Shutdown,
    /// Shutdown and suspend: the agent also drains before sleep.
    ShutdownSleep,
}

impl InhibitWhat {
    /// logind's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            InhibitWhat::Shutdown => "shutdown",
            InhibitWhat::ShutdownSleep => "shutdown:sleep",
        }
    }
}

/// How the inhibitor behaves. [`InhibitorConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct InhibitorConfig {
    /// Where logind is.
    pub bus: BusAddress,
    /// What to delay.
    pub what: InhibitWhat,
    /// The `who` logind shows, `maintd`.
    pub who: String,
    /// The node name, shown in `why`.
    pub node: String,
    /// Unique per agent run; identifies our lock in `ListInhibitors`, where
    /// the pid logind shows is the host's, not the one we see in a pod.
    pub token: String,
    /// Budget assumed when the agent finds a shutdown already under way: we
    /// do not know when logind's clock started, so we take at most this.
    pub in_progress_budget: Duration,
    /// Budget used when `InhibitDelayMaxUSec` cannot be read.
    pub fallback_budget: Duration,
    /// After logind reappears on the bus, how long to look for our restored
    /// lock before taking a new one (well under a second).
    pub restore_grace: Duration,
    /// First reconnect delay after the bus is lost; doubles per failure.
    pub reconnect_initial: Duration,
    /// Cap of the reconnect delay.
    pub reconnect_max: Duration,
    /// The node helper holds the lock for us (the agent has no system bus
    /// in the DaemonSet): its socket. None: talk to logind directly.
    pub helper: Option<std::path::PathBuf>,
}

impl InhibitorConfig {
    /// Defaults for `node`, with a fresh random token.
    pub fn new(node: &str) -> Self {
        InhibitorConfig {
            bus: BusAddress::System,
            what: InhibitWhat::Shutdown,
            who: "maintd".to_string(),
            node: node.to_string(),
            token: format!("{:016x}", rand::random::<u64>()),
            in_progress_budget: Duration::from_secs(5),
            fallback_budget: Duration::from_secs(5),
            restore_grace: Duration::from_millis(250),
            reconnect_initial: Duration::from_millis(200),
            reconnect_max: Duration::from_secs(30),
            helper: None,
        }
    }

    /// The `why` text logind shows; it carries the token.
    pub fn why(&self) -> String {
        format!(
            "Draining node {} before shutdown (maintd token {})",
            self.node, self.token
        )
    }
}

/// What the shutdown trigger learns from logind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShutdownEvent {
    /// Our delay lock is (again) held: logind will wait for us.
    LockHeld,
    /// A shutdown started. `budget` is logind's `InhibitDelayMaxUSec`: it
    /// proceeds after that long even if we still hold the lock. With
    /// `already_in_progress` the shutdown began before we could watch it,
    /// and `budget` is the conservative `in_progress_budget`.
    Preparing {
        /// Time left before logind stops waiting, at most.
        budget: Duration,
        /// The shutdown was under way when the agent (re)connected.
        already_in_progress: bool,
    },
    /// The shutdown was cancelled (`PrepareForShutdown(false)`); the lock is
    /// taken again if it had been released.
    Cancelled,
    /// Suspend is starting (only with [`InhibitWhat::ShutdownSleep`]).
    PreparingSleep {
        /// logind's delay budget.
        budget: Duration,
    },
    /// Resumed from suspend; the lock is taken again if it had been released.
    Resumed,
    /// logind will not wait for us (bus gone, logind gone, lock refused).
    LockLost {
        /// What happened, for the operator.
        reason: String,
    },
    /// The kubelet's graceful node shutdown holds a delay lock too: it will
    /// kill pods in parallel with our drain unless configured to cooperate.
    CompetingInhibitor {
        /// `who` of the other lock.
        who: String,
        /// `why` of the other lock.
        why: String,
    },
}

/// Another delay lock on shutdown, for the status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompetingInhibitor {
    /// `who` as logind shows it.
    pub who: String,
    /// `why` as logind shows it.
    pub why: String,
}

/// Snapshot for `/v1/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InhibitorStatus {
    /// logind will wait for us right now.
    pub held: bool,
    /// logind is preparing a shutdown.
    pub preparing: bool,
    /// The last budget read from logind (`InhibitDelayMaxUSec`), in seconds
    /// on the wire. logind does not wait longer than this.
    #[serde(
        rename = "budget_seconds",
        serialize_with = "serialize_secs",
        deserialize_with = "deserialize_secs"
    )]
    pub budget: Option<Duration>,
    /// Our token in `why`.
    pub token: String,
    /// The kubelet's delay locks seen last time we looked.
    pub competing: Vec<CompetingInhibitor>,
    /// The last failure, cleared when the lock is held again.
    pub last_error: Option<String>,
}

fn serialize_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

fn deserialize_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let secs = Option::<f64>::deserialize(d)?;
    secs.map(|s| {
        Duration::try_from_secs_f64(s)
            .map_err(|_| serde::de::Error::custom(format!("{s} is not a number of seconds")))
    })
    .transpose()
}

/// Errors of the handle.
#[derive(Debug, thiserror::Error)]
pub enum InhibitorError {
    /// The task is gone (it only stops when the handle is dropped).
    #[error("the shutdown inhibitor task has stopped; restart the agent")]
    Stopped,
}

pub(crate) enum Command {
    Release(oneshot::Sender<()>),
}

/// Starts the lock holder.
pub struct ShutdownInhibitor;

impl ShutdownInhibitor {
    /// Spawns the task: it subscribes to `PrepareForShutdown` first, then
    /// takes the delay lock. Must be called inside a tokio runtime.
    pub fn start(config: InhibitorConfig) -> (InhibitorHandle, mpsc::Receiver<ShutdownEvent>) {
        let (events_tx, events_rx) = mpsc::channel(64);
        let (cmd_tx, cmd_rx) = mpsc::channel(8);
        let (status_tx, status_rx) = watch::channel(InhibitorStatus {
            held: false,
            preparing: false,
            budget: None,
            token: config.token.clone(),
            competing: Vec::new(),
            last_error: None,
        });
        let task = match config.helper.clone() {
            Some(socket) => tokio::spawn(
                remote::Remote {
                    cfg: config,
                    helper: crate::node_helper::HelperClient::new(socket),
                    events: events_tx,
                    status: status_tx,
                    commands: cmd_rx,
                }
                .run(),
            ),
            None => tokio::spawn(runner::Runner::new(config, events_tx, status_tx, cmd_rx).run()),
        };
        (
            InhibitorHandle {
                commands: cmd_tx,
                status: status_rx,
                task,
            },
            events_rx,
        )
    }
}

/// Controls the running lock holder. Dropping it stops the task and closes
/// the fd, so an exiting agent never blocks a shutdown.
#[derive(Debug)]
pub struct InhibitorHandle {
    commands: mpsc::Sender<Command>,
    status: watch::Receiver<InhibitorStatus>,
    task: tokio::task::JoinHandle<()>,
}

impl InhibitorHandle {
    /// Closes the lock's fd (the drain is done); returns once it is closed.
    /// The lock is taken again after [`ShutdownEvent::Cancelled`] or
    /// [`ShutdownEvent::Resumed`].
    pub async fn release(&self) -> Result<(), InhibitorError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Release(tx))
            .await
            .map_err(|_| InhibitorError::Stopped)?;
        rx.await.map_err(|_| InhibitorError::Stopped)
    }

    /// The current state.
    pub fn status(&self) -> InhibitorStatus {
        self.status.borrow().clone()
    }

    /// A receiver that sees every status change.
    pub fn watch_status(&self) -> watch::Receiver<InhibitorStatus> {
        self.status.clone()
    }
}

impl Drop for InhibitorHandle {
    fn drop(&mut self) {
        // Aborting drops the task's future, and with it the lock's fd.
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_names_what_it_delays_as_logind_spells_it() {
        assert_eq!(InhibitWhat::Shutdown.as_str(), "shutdown");
        assert_eq!(InhibitWhat::ShutdownSleep.as_str(), "shutdown:sleep");
    }

    #[test]
    fn why_carries_node_and_token() {
        let cfg = InhibitorConfig::new("node-a");
        assert_eq!(cfg.token.len(), 16);
        assert!(cfg.why().contains("node-a"));
        assert!(cfg.why().contains(&cfg.token));
        assert_ne!(cfg.token, InhibitorConfig::new("node-a").token);
    }

    #[test]
    fn status_json_gives_budget_in_seconds() {
        let status = InhibitorStatus {
            held: true,
            preparing: false,
            budget: Some(Duration::from_millis(1500)),
            token: "t".into(),
            competing: vec![CompetingInhibitor {
                who: "kubelet".into(),
                why: "Kubelet needs time to handle node shutdown".into(),
            }],
            last_error: None,
        };
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["budget_seconds"], 1.5);
        assert_eq!(json["held"], true);
        assert_eq!(json["competing"][0]["who"], "kubelet");
        assert!(json["last_error"].is_null());
    }
}
