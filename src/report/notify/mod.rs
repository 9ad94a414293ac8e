//! Notifications (`--notify-url`, repeatable): a small JSON document posted
//! to each URL when a drain starts, is blocked (a pod still refused after
//! `--notify-blocked-after`; once per blocker, a few a minute at most), is
//! drained, fails, and is undone; Slack's incoming
//! webhooks get a body Slack shows. Each URL has its own sender and a
//! bounded queue: a slow, failing or hanging receiver loses notifications
//! and is counted, it never delays a drain or a shutdown.

mod notice;
#[cfg(test)]
mod tests;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use notice::{Notice, NoticeKind, Noticer, body};

use crate::drain::progress::Progress;
use crate::outbound::{Target, root_cause, url};

/// Bound on one POST, connection included.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Tries per notification; the waits between them double from 1 s.
const ATTEMPTS: u32 = 4;
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Notifications waiting for one receiver; more are dropped (counted).
const QUEUE: usize = 32;
/// Longest notification URL taken.
const MAX_URL: usize = 2048;

/// One receiver of notifications, checked.
pub struct Webhook {
    /// scheme://host[:port]/… — the path is left out of logs and status, as
    /// webhook paths often are the secret (Slack's are).
    pub shown: String,
    /// Where to POST: scheme://host[:port]/path?query, no credentials.
    uri: String,
    slack: bool,
    target: Target,
}

impl Webhook {
    /// Reads a `--notify-url`; the error says what is wrong with it.
    pub fn parse(raw: &str) -> Result<Webhook, String> {
        let raw = raw.trim();
        if raw.len() > MAX_URL {
            return Err(format!("the URL is longer than {MAX_URL} characters"));
        }
        if !raw.contains("://") {
            return Err(format!(
                "the URL `{}` must start with http:// or https://",
                url::redact(raw)
            ));
        }
        let uri: http::Uri = raw
            .parse()
            .map_err(|e| format!("the URL `{}` cannot be read ({e})", url::redact(raw)))?;
        // The base checks scheme, host and credentials; the path and query
        // are kept exactly as given (a webhook's trailing slash matters).
        let without_query = raw.split('?').next().unwrap_or(raw);
        let base = url::parse(without_query)?;
        let host = uri
            .authority()
            .map(|a| {
                a.as_str()
                    .rsplit('@')
                    .next()
                    .unwrap_or_default()
                    .to_string()
            })
            .unwrap_or_default();
        let scheme = if base.tls { "https" } else { "http" };
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let slack = host.eq_ignore_ascii_case("hooks.slack.com");
        let target = Target::new(base, SEND_TIMEOUT)?;
        Ok(Webhook {
            shown: format!("{scheme}://{host}/…"),
            uri: format!("{scheme}://{host}{path}"),
            slack,
            target,
        })
    }

    /// One POST of `notice`: Ok when the receiver took it, else why not and
    /// whether trying again may help.
    async fn post(&self, notice: &Notice) -> Result<(), (String, bool)> {
        let bytes = body(notice, self.slack).to_string();
        let mut request = http::Request::post(&self.uri)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(
                http::header::USER_AGENT,
                concat!("maintd/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(authorization) = &self.target.authorization {
            request = request.header(http::header::AUTHORIZATION, authorization.clone());
        }
        let request = request
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|e| (format!("not a valid request ({e})"), false))?;
        let exchange = async {
            let response = self
                .target
                .send(request)
                .await
                .map_err(|e| (format!("could not be reached ({})", root_cause(&e)), true))?;
            let status = response.status();
            // The answer is not read: a receiver says all in its status.
            drop(response);
            if status.is_success() {
                Ok(())
            } else {
                // A refusal (bad token, gone) stays one; the receiver's own
                // trouble or its rate limit may pass.
                let again = status.is_server_error()
                    || status == http::StatusCode::TOO_MANY_REQUESTS
                    || status == http::StatusCode::REQUEST_TIMEOUT;
                Err((format!("answered HTTP {status}"), again))
            }
        };
        tokio::time::timeout(SEND_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| Err((format!("did not answer within {SEND_TIMEOUT:?}"), true)))
    }
}

/// Sends this node's notifications.
pub struct Notifier {
    pub node: String,
    pub progress: Progress,
    pub webhooks: Vec<Webhook>,
    /// How long a pod stays refused before it is notified as blocked.
    pub blocked_after: Duration,
    /// `maintd_notifications_total` by outcome: sent, failed, dropped.
    pub counted: Family<Vec<(String, String)>, Counter>,
}

impl Notifier {
    /// Starts the notifier: every drain event from now on is seen (the
    /// subscription is taken before this returns). Nothing is started
    /// without a webhook.
    pub fn spawn(self, stop: CancellationToken) {
        if self.webhooks.is_empty() {
            return;
        }
        let mut events = self.progress.subscribe();
        let mut queues = Vec::new();
        for hook in self.webhooks {
            let (tx, rx) = mpsc::channel(QUEUE);
            tokio::spawn(deliver(hook, rx, self.counted.clone(), stop.clone()));
            queues.push(tx);
        }
        let counted = self.counted;
        let progress = self.progress;
        let mut noticer = Noticer::new(&self.node, self.blocked_after);
        tokio::spawn(async move {
            let send = |notice: Notice| {
                for queue in &queues {
                    // Never waits: a full queue is a receiver far behind.
                    if queue.try_send(notice.clone()).is_err() {
                        count(&counted, "dropped");
                    }
                }
            };
            loop {
                // Woken by the drain's events, and by a refused pod's wait
                // ending (no timer while none waits).
                let due = noticer.next_due();
                let ev = tokio::select! {
                    ev = events.recv() => ev,
                    _ = async {
                        match due {
                            Some(at) => tokio::time::sleep_until(at.into()).await,
                            None => std::future::pending().await,
                        }
                    } => {
                        let status = progress.status();
                        for notice in noticer.due(&status, std::time::Instant::now()) {
                            send(notice);
                        }
                        continue;
                    }
                    _ = stop.cancelled() => return,
                };
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(RecvError::Lagged(n)) => {
                        tracing::warn!(
                            missed = n,
                            "the notifier fell behind the drain; some notifications were not sent"
                        );
                        continue;
                    }
                    Err(RecvError::Closed) => return,
                };
                let status = progress.status();
                if let Some(notice) = noticer.notice(&ev, &status, std::time::Instant::now()) {
                    send(notice);
                }
            }
        });
    }
}

fn count(counted: &Family<Vec<(String, String)>, Counter>, outcome: &str) {
    counted
        .get_or_create(&vec![("outcome".into(), outcome.into())])
        .inc();
}

/// Posts one receiver's notifications in order, each tried a few times.
async fn deliver(
    hook: Webhook,
    mut queue: mpsc::Receiver<Notice>,
    counted: Family<Vec<(String, String)>, Counter>,
    stop: CancellationToken,
) {
    loop {
        let notice = tokio::select! {
            n = queue.recv() => match n { Some(n) => n, None => return },
            _ = stop.cancelled() => return,
        };
        let mut wait = FIRST_RETRY;
        for attempt in 1..=ATTEMPTS {
            let result = tokio::select! {
                r = hook.post(&notice) => r,
                _ = stop.cancelled() => return,
            };
            match result {
                Ok(()) => {
                    count(&counted, "sent");
                    break;
                }
                Err((why, again)) if again && attempt < ATTEMPTS => {
                    tracing::debug!(url = %hook.shown, kind = ?notice.kind, attempt, "notification not taken: {why}; trying again");
                    let jittered = wait.mul_f64(rand::random_range(1.0..1.5));
                    tokio::select! {
                        _ = tokio::time::sleep(jittered) => {}
                        _ = stop.cancelled() => return,
                    }
                    wait *= 2;
                }
                Err((why, _)) => {
                    tracing::warn!(url = %hook.shown, kind = ?notice.kind, "notification not sent after {attempt} tries: the receiver {why}");
                    count(&counted, "failed");
                    break;
                }
            }
        }
    }
}
