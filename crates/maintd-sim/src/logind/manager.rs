//! The D-Bus face of the simulated logind.

use std::sync::Arc;

use nix::fcntl::OFlag;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::Inhibitor;
use super::{Entry, Shared, emit_prepare, wait_and_record};

/// Error replies, named as logind names them.
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop")]
pub(crate) enum LoginError {
    #[zbus(error)]
    ZBus(zbus::Error),
    /// A delay lock on an operation that is already running.
    #[zbus(name = "login1.OperationInProgress")]
    OperationInProgress(String),
    /// Bad `what` or `mode`.
    #[zbus(name = "DBus.Error.InvalidArgs")]
    InvalidArgs(String),
    /// The pipe could not be made.
    #[zbus(name = "DBus.Error.Failed")]
    Failed(String),
    /// logind's InhibitorsMax reached.
    #[zbus(name = "DBus.Error.LimitsExceeded")]
    LimitsExceeded(String),
}

pub(crate) struct Manager {
    shared: Arc<Shared>,
}

impl Manager {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Manager { shared }
    }
}

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl Manager {
    async fn inhibit(
        &self,
        what: String,
        who: String,
        why: String,
        mode: String,
        #[zbus(header)] header: zbus::message::Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<zbus::zvariant::OwnedFd, LoginError> {
        self.shared.state().inhibit_calls += 1;
        const KNOWN: [&str; 6] = [
            "shutdown",
            "sleep",
            "idle",
            "handle-power-key",
            "handle-suspend-key",
            "handle-lid-switch",
        ];
        let ops: Vec<&str> = what.split(':').collect();
        if ops.is_empty() || ops.iter().any(|w| !KNOWN.contains(w)) {
            return Err(LoginError::InvalidArgs(format!("invalid what: {what}")));
        }
        let delays_only = ops.iter().all(|w| *w == "shutdown" || *w == "sleep");
        match mode.as_str() {
            "block" | "block-weak" => {}
            "delay" if delays_only => {}
            _ => {
                return Err(LoginError::InvalidArgs(format!(
                    "invalid mode {mode} for {what}"
                )));
            }
        }
        // logind refuses new delay locks on a shutdown already waiting for locks.
        if mode == "delay" && ops.contains(&"shutdown") && self.shared.state().preparing {
            return Err(LoginError::OperationInProgress(
                "The operation inhibition has been requested for is already running".into(),
            ));
        }
        {
            let state = self.shared.state();
            if let Some(max) = state.inhibitors_max
                && state.entries.len() >= max
            {
                return Err(LoginError::LimitsExceeded(format!(
                    "Too many inhibitors ({}), refusing further inhibitors.",
                    state.entries.len()
                )));
            }
        }
        let (uid, pid) = caller_creds(conn, &header).await;
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
            .map_err(|e| LoginError::Failed(format!("pipe: {e}")))?;
        let read = pipe::Receiver::from_owned_fd(read)
            .map_err(|e| LoginError::Failed(format!("watch pipe: {e}")))?;
        let info = Inhibitor {
            what,
            who,
            why,
            mode,
            uid,
            pid,
        };
        let mut state = self.shared.state();
        let id = state.next_id;
        state.next_id += 1;
        let watcher = tokio::spawn(watch_pipe(self.shared.clone(), id, read));
        state.entries.insert(id, Entry { info, watcher });
        // zbus sends a duplicate and closes ours with the reply, so the
        // caller ends up holding the only write end.
        Ok(write.into())
    }

    #[allow(clippy::type_complexity)]
    async fn list_inhibitors(&self) -> Vec<(String, String, String, String, u32, u32)> {
        let state = self.shared.state();
        state
            .entries
            .values()
            .map(|e| {
                let i = &e.info;
                (
                    i.what.clone(),
                    i.who.clone(),
                    i.why.clone(),
                    i.mode.clone(),
                    i.uid,
                    i.pid,
                )
            })
            .collect()
    }

    async fn reboot(&self, _interactive: bool) {
        begin_shutdown(&self.shared, "reboot").await;
    }

    async fn power_off(&self, _interactive: bool) {
        begin_shutdown(&self.shared, "poweroff").await;
    }

    async fn suspend(&self, _interactive: bool) {
        begin_sleep(&self.shared).await;
    }

    #[zbus(property(emits_changed_signal = "const"), name = "InhibitDelayMaxUSec")]
    async fn inhibit_delay_max_usec(&self) -> u64 {
        u64::try_from(self.shared.state().delay_max.as_micros()).unwrap_or(u64::MAX)
    }

    #[zbus(property(emits_changed_signal = "false"))]
    async fn preparing_for_shutdown(&self) -> bool {
        self.shared.state().preparing
    }

    #[zbus(property(emits_changed_signal = "false"))]
    async fn preparing_for_sleep(&self) -> bool {
        self.shared.state().sleeping
    }
}

/// Starts a shutdown unless one is in progress; returns at once, like
/// logind, while the wait for delay locks runs in the background.
pub(crate) async fn begin_shutdown(shared: &Arc<Shared>, action: &'static str) {
    let cancelled = {
        let mut state = shared.state();
        if state.preparing {
            return;
        }
        state.preparing = true;
        let (tx, rx) = oneshot::channel();
        state.cancel = Some(tx);
        rx
    };
    emit_prepare(shared, true).await;
    tokio::spawn(wait_and_record(
        shared.clone(),
        super::Op::Shutdown,
        action,
        cancelled,
    ));
}

/// Starts a suspend unless one or a shutdown is in progress; returns at
/// once while the wait for delay locks on sleep runs in the background.
pub(crate) async fn begin_sleep(shared: &Arc<Shared>) {
    {
        let mut state = shared.state();
        if state.preparing || state.sleeping {
            return;
        }
        state.sleeping = true;
    }
    super::emit(shared, "PrepareForSleep", true).await;
    tokio::spawn(super::sleep_and_resume(shared.clone()));
}

/// Drops inhibitor `id` once every write end of its pipe is closed (EOF,
/// which epoll reports as readable with HUP).
async fn watch_pipe(shared: Arc<Shared>, id: u64, read: pipe::Receiver) {
    let mut buf = [0u8; 64];
    loop {
        if read.readable().await.is_err() {
            break;
        }
        match read.try_read(&mut buf) {
            // Stray data is not a release; keep waiting for EOF.
            Ok(n) if n > 0 => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            _ => break,
        }
    }
    // Dropping the entry aborts this very task, which only takes effect at
    // its next await; there is none left.
    let removed = shared.state().entries.remove(&id);
    drop(removed);
    shared.changed.notify_waiters();
}

/// The caller's uid and pid as the bus reports them (0 when unknown).
async fn caller_creds(conn: &zbus::Connection, header: &zbus::message::Header<'_>) -> (u32, u32) {
    let Some(sender) = header.sender() else {
        return (0, 0);
    };
    let Ok(dbus) = zbus::fdo::DBusProxy::new(conn).await else {
        return (0, 0);
    };
    let name = zbus::names::BusName::from(sender.to_owned());
    let pid = dbus
        .get_connection_unix_process_id(name.clone())
        .await
        .unwrap_or(0);
    let uid = dbus.get_connection_unix_user(name).await.unwrap_or(0);
    (uid, pid)
}
