//! The host's drain socket (`/run/maintd/maintd.sock`, for `maintd drain`
//! on the host), served by the helper for root callers only and passed
//! through byte for byte to the agent's own socket inside the pod.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// At most this many drain requests passed through at once.
const MAX_RELAYED: usize = 16;
/// A relayed connection is closed after this long, whatever it carries
/// (`maintd drain --wait` polls with short requests).
const RELAY_LIMIT: Duration = Duration::from_secs(60);

/// Binds `host` and starts passing root's connections to `agent`.
pub(super) fn start(
    host: PathBuf,
    agent: PathBuf,
    stop: &CancellationToken,
) -> std::io::Result<()> {
    let listener = crate::http::bind_socket(&host)?;
    tracing::info!(host = %host.display(), agent = %agent.display(), "passing drain requests from the host to the agent");
    tokio::spawn(run(listener, agent, stop.clone()));
    Ok(())
}

/// Answers a caller that is not root with a 403 that says why.
async fn refuse(mut caller: UnixStream, uid: Option<u32>) {
    use tokio::io::AsyncWriteExt;
    let body = serde_json::json!({"error": format!(
        "only root may use this socket; this caller is uid {}",
        uid.map_or("unknown".to_string(), |u| u.to_string())
    )})
    .to_string();
    let response = format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        caller.write_all(response.as_bytes()),
    )
    .await;
}

async fn run(listener: UnixListener, agent: PathBuf, stop: CancellationToken) {
    let limit = Arc::new(Semaphore::new(MAX_RELAYED));
    while let Some((mut caller, uid)) =
        super::next_caller(&listener, "a drain request", &stop).await
    {
        // Only the host's root may ask for a drain: the agent trusts the
        // helper's connections as root's.
        if uid != Some(0) {
            tracing::warn!(?uid, "refused a drain request from a user that is not root");
            tokio::spawn(refuse(caller, uid));
            continue;
        }
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            continue;
        };
        let agent = agent.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let pass = async {
                let mut to_agent = UnixStream::connect(&agent).await?;
                tokio::io::copy_bidirectional(&mut caller, &mut to_agent).await
            };
            tokio::select! {
                r = tokio::time::timeout(RELAY_LIMIT, pass) => {
                    if let Ok(Err(e)) = r {
                        tracing::debug!(error = %e, "a drain request could not be passed to the agent");
                    }
                }
                _ = stop.cancelled() => {}
            }
            drop(permit);
        });
    }
}
