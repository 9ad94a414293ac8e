//! The node helper: the part of maintd that holds host privilege and no
//! API credentials.
//!
//! In the DaemonSet the agent runs as a non-root user with the
//! ServiceAccount token and no host mounts. What needs root on the host is
//! done for it by `maintd node-helper`, a second container of the same pod
//! that runs as root with the system bus socket and the static pod
//! directory, and no token. The two speak over a unix socket in a volume
//! only the pod shares:
//!
//! - **the shutdown lock**: the agent opens a hold session; the helper takes
//!   logind's delay lock for as long as that session lasts, sends logind's
//!   signals (a shutdown starting, cancelled, a suspend) and the lock's
//!   state, and lets the lock go when the agent says its drain is done.
//!   When the agent goes away (its connection closes), the lock goes with
//!   it: a node is never held for an agent that cannot drain it.
//! - **static pod manifests**: list, stash, restore. The helper works only
//!   in the directory it was started with; requests carry no paths, so a
//!   compromised agent can move manifests between the static pod directory
//!   and its stash and nothing else.
//! - **drain requests from the host**: `maintd drain` on the host talks to
//!   the host's `/run/maintd/maintd.sock`, which the helper serves for root
//!   callers only and passes through to the agent's own socket.
//!
//! The helper answers only root and the agent's user (`SO_PEERCRED`).
//! Every request and reply is one line of JSON, bounded in size.

mod client;
mod relay;
mod server;

pub use client::{HelperClient, HelperError};
pub use server::{HelperConfig, serve};

use serde::{Deserialize, Serialize};

/// The longest request line the helper reads.
const MAX_REQUEST: u64 = 64 * 1024;
/// The longest reply line the agent reads (a listing of many manifests).
const MAX_REPLY: u64 = 4 * 1024 * 1024;

/// What the agent asks the helper: one file operation per connection, or a
/// hold session that lasts as long as the connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// A static pod manifest operation.
    Files(FileOp),
    /// Hold logind's delay lock for as long as this connection lasts.
    Hold(HoldRequest),
}

/// The static pod manifest operations, in the helper's own directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileOp {
    /// The manifests in the static pod directory.
    Manifests,
    /// The manifests in the stash.
    StashedManifests,
    /// The file names in the stash.
    Stashed,
    /// Move these manifests (all with None) into the stash.
    Stash {
        /// File names within the static pod directory.
        files: Option<Vec<String>>,
    },
    /// Move every stashed manifest back.
    Restore,
}

/// What a hold session delays and how the lock is named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HoldRequest {
    /// Also delay suspend.
    pub sleep: bool,
    /// The node, shown in logind's `why`.
    pub node: String,
    /// The agent run's token, shown in logind's `why`.
    pub token: String,
}

/// What the agent says during a hold session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionCommand {
    /// The drain is done: let the lock go now.
    Release,
}

/// What the helper sends during a hold session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMessage {
    /// The lock's state changed.
    Status(crate::inhibitor::InhibitorStatus),
    /// Something logind did.
    Event(crate::inhibitor::ShutdownEvent),
    /// The lock was let go, as asked.
    Released,
}

/// A reply to a one-shot request: `{"ok": …}` or `{"error": "…"}`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Reply {
    Ok(serde_json::Value),
    Error(String),
}

/// Reads a request line from the agent; the error says why it is not one.
pub(crate) fn decode_request(line: &str) -> Result<Request, String> {
    serde_json::from_str::<Request>(line)
        .map_err(|e| format!("not a request the node helper knows: {e}"))
}

/// Reads the helper's reply line to a file operation: its result as `T`,
/// the helper's own error, or why the reply cannot be read.
pub(crate) fn decode_reply<T: serde::de::DeserializeOwned>(
    line: &str,
) -> Result<Result<T, String>, String> {
    match serde_json::from_str::<Reply>(line).map_err(|e| e.to_string())? {
        Reply::Ok(v) => serde_json::from_value(v).map(Ok).map_err(|e| e.to_string()),
        // A failure is said in words even when the helper sent none.
        Reply::Error(e) if e.trim().is_empty() => Ok(Err(
            "the node helper failed without saying why; see its log".to_string(),
        )),
        Reply::Error(e) => Ok(Err(e)),
    }
}

/// The next connection on `listener` and its caller's uid (as the kernel
/// says), waiting after an accept fails (out of file descriptors: the loop
/// must not spin), longer each time in a row; None once `stop`.
pub(crate) async fn next_caller(
    listener: &tokio::net::UnixListener,
    what: &str,
    stop: &tokio_util::sync::CancellationToken,
) -> Option<(tokio::net::UnixStream, Option<u32>)> {
    let mut backoff = std::time::Duration::from_millis(50);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.cancelled() => return None,
        };
        match accepted {
            Ok((stream, _)) => {
                let uid = stream.peer_cred().ok().map(|c| c.uid());
                return Some((stream, uid));
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting {what} failed; waiting {backoff:?}");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.cancelled() => return None,
                }
                backoff = (backoff * 2).min(std::time::Duration::from_secs(1));
            }
        }
    }
}

/// One line, at most `limit` bytes; None at the end of the stream.
pub(crate) async fn read_line(
    read: &mut (impl tokio::io::AsyncBufRead + Unpin),
    limit: u64,
) -> Result<Option<String>, String> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let mut line = String::new();
    let n = read
        .take(limit + 1)
        .read_line(&mut line)
        .await
        .map_err(|e| format!("reading a line: {e}"))?;
    if n == 0 {
        return Ok(None);
    }
    if !line.ends_with('\n') {
        return Err(format!(
            "a line longer than {limit} bytes, or one cut short"
        ));
    }
    Ok(Some(line))
}

/// Writes `msg` as one line of JSON.
pub(crate) async fn write_line(
    write: &mut (impl tokio::io::AsyncWrite + Unpin),
    msg: &impl serde::Serialize,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    body.push(b'\n');
    write.write_all(&body).await?;
    write.flush().await
}

#[cfg(test)]
mod tests;
