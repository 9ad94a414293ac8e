//! `maintd node-helper`: serves the agent's requests (see the module
//! documentation of [`crate::node_helper`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Mutex, Semaphore};
use tokio_util::sync::CancellationToken;

use super::{
    FileOp, HoldRequest, MAX_REQUEST, Reply, Request, SessionCommand, SessionMessage,
    decode_request, next_caller, read_line, write_line,
};
use crate::drain::static_pods::StaticPodStash;
use crate::inhibitor::{InhibitWhat, InhibitorConfig, ShutdownInhibitor};
use crate::logind::BusAddress;

/// At most this many agent connections at once (the agent makes one hold
/// session and one request at a time; the rest is room for a restart).
const MAX_CONNECTIONS: usize = 16;
/// A request line must arrive within this long of the connection.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How the helper runs.
#[derive(Debug, Clone)]
pub struct HelperConfig {
    /// Where the agent reaches the helper (in a volume the pod shares).
    pub socket: PathBuf,
    /// The agent's user: it and root are the only callers answered.
    pub agent_uid: u32,
    /// The agent's group: the socket is made the group's (0660). The helper
    /// must be a member (the pod's supplementalGroups): it keeps no
    /// capability, so it cannot give a file away to another user.
    pub agent_gid: u32,
    /// The static pod directory and its stash.
    pub stash: StaticPodStash,
    /// Where logind is.
    pub bus: BusAddress,
    /// The host's socket for `maintd drain`, and the agent's socket it is
    /// passed through to (None: not served).
    pub relay: Option<(PathBuf, PathBuf)>,
}

/// Serves the agent until `stop`. Fails only when its socket cannot be
/// made.
pub async fn serve(config: HelperConfig, stop: CancellationToken) -> std::io::Result<()> {
    let listener = bind(&config.socket, config.agent_gid)?;
    tracing::info!(socket = %config.socket.display(), agent_uid = config.agent_uid,
        static_pods = %config.stash.manifest_dir.display(), "node helper listening");
    if let Some((host, agent)) = &config.relay {
        super::relay::start(host.clone(), agent.clone(), &stop)?;
    }
    let helper = Arc::new(Helper {
        config,
        files: Mutex::new(()),
        hold: std::sync::Mutex::new(None),
    });
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    while let Some((stream, uid)) = next_caller(&listener, "an agent connection", &stop).await {
        if !uid.is_some_and(|u| u == 0 || u == helper.config.agent_uid) {
            tracing::warn!(
                ?uid,
                "refused a connection from a user that is not maintd's agent"
            );
            continue;
        }
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            tracing::warn!("too many agent connections; one refused");
            continue;
        };
        let helper = helper.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = helper.connection(stream) => {}
                _ = stop.cancelled() => {}
            }
            drop(permit);
        });
    }
    Ok(())
}

/// Binds the helper's socket, mode 0660, in the agent's group.
fn bind(path: &std::path::Path, agent_gid: u32) -> std::io::Result<UnixListener> {
    let listener = crate::http::bind_socket_mode(path, 0o660)?;
    nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(agent_gid))).map_err(|e| {
        std::io::Error::other(format!(
            "cannot give {} to the agent's group {agent_gid}: {e}; the node helper must be a member of that group (the pod's supplementalGroups)",
            path.display()
        ))
    })?;
    Ok(listener)
}

struct Helper {
    config: HelperConfig,
    /// One file operation at a time: the stash's journal is one file.
    files: Mutex<()>,
    /// Stops the hold session in place, when a new one replaces it.
    hold: std::sync::Mutex<Option<CancellationToken>>,
}

impl Helper {
    async fn connection(self: &Arc<Self>, stream: UnixStream) {
        let (read, mut write) = stream.into_split();
        let mut read = BufReader::new(read);
        let line =
            match tokio::time::timeout(REQUEST_TIMEOUT, read_line(&mut read, MAX_REQUEST)).await {
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None)) => return,
                Ok(Err(e)) => {
                    let _ = write_line(&mut write, &Reply::Error(e)).await;
                    return;
                }
                Err(_) => return,
            };
        let request = match decode_request(&line) {
            Ok(r) => r,
            Err(why) => {
                tracing::warn!("{why}");
                let _ = write_line(&mut write, &Reply::Error(why)).await;
                return;
            }
        };
        match request {
            Request::Hold(hold) => self.hold(hold, read, write).await,
            Request::Files(op) => {
                let reply = self.file_request(op).await;
                let _ = write_line(&mut write, &reply).await;
            }
        }
    }

    /// Runs a stash request in a blocking thread (it renames and fsyncs).
    async fn file_request(self: &Arc<Self>, op: FileOp) -> Reply {
        let _one = self.files.lock().await;
        let stash = self.config.stash.clone();
        let done = tokio::task::spawn_blocking(move || {
            let value = match op {
                FileOp::Manifests => stash.manifests().map(to_value),
                FileOp::StashedManifests => stash.stashed_manifests().map(to_value),
                FileOp::Stashed => stash.stashed().map(to_value),
                FileOp::Stash { files } => stash.stash(files.as_deref()).map(to_value),
                FileOp::Restore => stash.restore().map(to_value),
            };
            match value {
                Ok(v) => Reply::Ok(v),
                Err(e) => Reply::Error(e.to_string()),
            }
        })
        .await;
        done.unwrap_or_else(|e| Reply::Error(format!("the file operation failed: {e}")))
    }

    /// Holds logind's lock while the agent stays connected. A newer session
    /// (a restarted agent) replaces this one.
    async fn hold(
        self: &Arc<Self>,
        hold: HoldRequest,
        mut read: BufReader<impl AsyncRead + Unpin>,
        mut write: impl AsyncWriteExt + Unpin,
    ) {
        let mine = CancellationToken::new();
        if let Some(old) = self
            .hold
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(mine.clone())
        {
            tracing::info!("a new agent session replaces the one holding the lock");
            old.cancel();
        }
        let mut cfg = InhibitorConfig::new(&hold.node);
        cfg.bus = self.config.bus.clone();
        cfg.token = hold.token;
        if hold.sleep {
            cfg.what = InhibitWhat::ShutdownSleep;
        }
        tracing::info!(node = %hold.node, "agent connected: taking the shutdown lock for it");
        let (handle, mut events) = ShutdownInhibitor::start(cfg);
        let mut status = handle.watch_status();
        status.mark_changed();
        loop {
            let out = tokio::select! {
                _ = mine.cancelled() => break,
                changed = status.changed() => match changed {
                    Ok(()) => SessionMessage::Status(status.borrow_and_update().clone()),
                    Err(_) => break,
                },
                event = events.recv() => match event {
                    Some(e) => SessionMessage::Event(e),
                    None => break,
                },
                line = read_line(&mut read, MAX_REQUEST) => match line.map(|l| l.map(|l| serde_json::from_str::<SessionCommand>(&l))) {
                    Ok(Some(Ok(SessionCommand::Release))) => {
                        let _ = handle.release().await;
                        SessionMessage::Released
                    }
                    Ok(Some(Err(e))) => {
                        tracing::warn!(error = %e, "the agent sent a command the node helper does not know; ignored");
                        continue;
                    }
                    // The agent is gone: so is the lock (dropping the handle).
                    Ok(None) | Err(_) => break,
                },
            };
            if write_line(&mut write, &out).await.is_err() {
                break;
            }
        }
        tracing::info!("agent session ended: the shutdown lock is let go");
        drop(handle);
        let mut slot = self.hold.lock().unwrap_or_else(|e| e.into_inner());
        if slot
            .as_ref()
            .is_some_and(|t| t.is_cancelled() || *t == mine)
        {
            *slot = None;
        }
    }
}

fn to_value<T: serde::Serialize>(v: T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}
