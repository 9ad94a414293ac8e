//! The lock holder when the node helper holds logind's lock for the agent
//! (the agent has no system bus): one hold session at a time, reconnecting
//! with a capped backoff, passing on what the helper sends.

use std::time::Duration;

use tokio::io::BufReader;
use tokio::sync::{mpsc, oneshot, watch};

use super::{Command, InhibitorConfig, InhibitorStatus, ShutdownEvent};
use crate::node_helper::{
    HelperClient, HoldRequest, Request, SessionCommand, SessionMessage, read_line, write_line,
};

/// The longest message line read from the helper.
const MAX_MESSAGE: u64 = 64 * 1024;

pub(super) struct Remote {
    pub(super) cfg: InhibitorConfig,
    pub(super) helper: HelperClient,
    pub(super) events: mpsc::Sender<ShutdownEvent>,
    pub(super) status: watch::Sender<InhibitorStatus>,
    pub(super) commands: mpsc::Receiver<Command>,
}

/// Why a session ended.
enum Exit {
    Stop,
    Lost(String),
}

impl Remote {
    pub(super) async fn run(mut self) {
        let mut backoff = self.cfg.reconnect_initial;
        let mut lost_reported = false;
        loop {
            let mut connected = false;
            let reason = match self.session(&mut connected).await {
                Exit::Stop => return,
                Exit::Lost(reason) => reason,
            };
            if connected {
                backoff = self.cfg.reconnect_initial;
                lost_reported = false;
            }
            tracing::warn!(%reason, retry_in = ?backoff, "no shutdown lock: the node helper session ended");
            let was_held = self.status.borrow().held;
            self.status.send_modify(|s| {
                s.held = false;
                s.last_error = Some(reason.clone());
            });
            if was_held || !lost_reported {
                lost_reported = true;
                let _ = self.events.send(ShutdownEvent::LockLost { reason }).await;
            }
            if !self.pause(backoff).await {
                return;
            }
            backoff = (backoff * 2).min(self.cfg.reconnect_max);
        }
    }

    /// Waits `d`, answering commands meanwhile; false when the handle is gone.
    async fn pause(&mut self, d: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return true,
                cmd = self.commands.recv() => match cmd {
                    // Without a session there is no lock to let go.
                    Some(Command::Release(ack)) => { let _ = ack.send(()); }
                    None => return false,
                },
            }
        }
    }

    async fn session(&mut self, connected: &mut bool) -> Exit {
        let stream = match self.helper.connect().await {
            Ok(s) => s,
            Err(e) => return Exit::Lost(e.to_string()),
        };
        let (read, mut write) = stream.into_split();
        let mut read = BufReader::new(read);
        let hold = Request::Hold(HoldRequest {
            sleep: self.cfg.what == super::InhibitWhat::ShutdownSleep,
            node: self.cfg.node.clone(),
            token: self.cfg.token.clone(),
        });
        if let Err(e) = write_line(&mut write, &hold).await {
            return Exit::Lost(format!("node helper: {e}"));
        }
        *connected = true;
        let mut pending: Vec<oneshot::Sender<()>> = Vec::new();
        let exit = loop {
            tokio::select! {
                line = read_line(&mut read, MAX_MESSAGE) => match line {
                    Ok(Some(line)) => match serde_json::from_str::<SessionMessage>(&line) {
                        Ok(SessionMessage::Status(mut st)) => {
                            st.token = self.cfg.token.clone();
                            self.status.send_replace(st);
                        }
                        Ok(SessionMessage::Event(e)) => { let _ = self.events.send(e).await; }
                        Ok(SessionMessage::Released) => {
                            for ack in pending.drain(..) { let _ = ack.send(()); }
                        }
                        Err(e) => tracing::warn!(error = %e, "the node helper sent a message maintd cannot read; ignored"),
                    },
                    Ok(None) => break Exit::Lost("the node helper closed the session".into()),
                    Err(e) => break Exit::Lost(format!("node helper: {e}")),
                },
                cmd = self.commands.recv() => match cmd {
                    None => break Exit::Stop,
                    Some(Command::Release(ack)) => {
                        if let Err(e) = write_line(&mut write, &SessionCommand::Release).await {
                            let _ = ack.send(());
                            break Exit::Lost(format!("node helper: {e}"));
                        }
                        pending.push(ack);
                    }
                },
            }
        };
        // The session is gone, and with it the helper's lock.
        for ack in pending {
            let _ = ack.send(());
        }
        exit
    }
}
