//! Kubernetes Events (events.k8s.io/v1) for what the drain does: on the
//! Node (drain started, stage started, eviction blocked or failed, drained,
//! drain failed, undone, static pods stashed and restored, shutdown
//! delayed, the agent's warnings) and on each evicted pod. A repeat of the
//! same event within ten minutes counts in the first one's series instead
//! of creating another, as the kubelet's recorder does; the count is
//! written at most every 30 s.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use http::Request;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::drain::progress::{DrainEvent, EventKind, Progress};

const SERIES_WINDOW: Duration = Duration::from_secs(600);
/// A series' count is written at most this often: a pod blocked for an
/// hour costs a write every half minute, not one per retry.
pub const SERIES_WRITE_EVERY: Duration = Duration::from_secs(30);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Records the drain's events as Kubernetes Events.
pub struct EventRecorder {
    pub client: kube::Client,
    pub node: String,
    pub progress: Progress,
    /// How often a series' count is written ([`SERIES_WRITE_EVERY`]).
    pub series_every: Duration,
}

/// (namespace, regarding kind, regarding name, reason, note) of an Event.
type Key = (String, String, String, String, String);

struct Recorded {
    name: String,
    /// Times seen, and times the API was last told.
    count: u64,
    written_count: u64,
    first: Instant,
    written: Instant,
}

/// The object an Event is about. A Node is named by its name in `uid` too,
/// as the kubelet names it in its own Events: `kubectl describe node`
/// finds a Node's Events by the node's uid or by its name there, and by
/// neither without it.
fn regarding(kind: &str, name: &str, ns: &str) -> Value {
    if kind == "Node" {
        json!({"apiVersion": "v1", "kind": kind, "name": name, "namespace": "", "uid": name})
    } else {
        json!({"apiVersion": "v1", "kind": kind, "name": name, "namespace": ns})
    }
}

/// What an agent event becomes: (regarding kind, namespace, name, reason,
/// type, note), or None for events not worth an Event.
fn translate(
    node: &str,
    ev: &DrainEvent,
) -> Option<(
    &'static str,
    String,
    String,
    &'static str,
    &'static str,
    String,
)> {
    let on_node = |reason: &'static str, kind: &'static str, note: String| {
        Some((
            "Node",
            "default".to_string(),
            node.to_string(),
            reason,
            kind,
            note,
        ))
    };
    let pod = || {
        (
            ev.namespace.clone().unwrap_or_default(),
            ev.pod.clone().unwrap_or_default(),
        )
    };
    match ev.event {
        EventKind::DrainStarted => on_node(
            "DrainStarted",
            "Normal",
            format!("maintd started draining the node: {}", ev.message),
        ),
        EventKind::StageStarted => on_node(
            "DrainStageStarted",
            "Normal",
            format!("stage {}: {}", ev.stage.unwrap_or(0), ev.message),
        ),
        EventKind::PodBlocked => {
            let (ns, name) = pod();
            on_node(
                "EvictionBlocked",
                "Warning",
                format!("eviction of {ns}/{name} refused: {}", ev.message),
            )
        }
        EventKind::DrainCompleted => on_node(
            "Drained",
            "Normal",
            format!("maintd drained the node: {}", ev.message),
        ),
        EventKind::DrainFailed => on_node("DrainFailed", "Warning", ev.message.clone()),
        EventKind::PodError => {
            let (ns, name) = pod();
            on_node(
                "EvictionFailed",
                "Warning",
                format!("evicting {ns}/{name} failed: {}", ev.message),
            )
        }
        EventKind::Warning => on_node("DrainWarning", "Warning", ev.message.clone()),
        EventKind::NodeRecordoned => on_node("Recordoned", "Warning", ev.message.clone()),
        EventKind::DrainWaiting if !ev.message.is_empty() => {
            on_node("DrainWaiting", "Normal", ev.message.clone())
        }
        EventKind::NodeUnmarked => on_node(
            "Undrained",
            "Normal",
            format!("maintenance over: {}", ev.message),
        ),
        EventKind::StaticPodsStashed => on_node("StaticPodsStashed", "Normal", ev.message.clone()),
        EventKind::StaticPodsRestored => {
            on_node("StaticPodsRestored", "Normal", ev.message.clone())
        }
        EventKind::ShutdownPreparing => on_node("ShutdownDelayed", "Normal", ev.message.clone()),
        EventKind::VolumesDetaching => on_node("WaitingForVolumes", "Normal", ev.message.clone()),
        EventKind::VolumesDetached => on_node("VolumesDetached", "Normal", ev.message.clone()),
        EventKind::AwaitingReboot => on_node("AwaitingReboot", "Normal", ev.message.clone()),
        EventKind::RebootConfirmed => on_node("RebootConfirmed", "Normal", ev.message.clone()),
        EventKind::RebootOverdue => on_node("RebootOverdue", "Warning", ev.message.clone()),
        EventKind::StageTimedOut => on_node("DrainStageTimedOut", "Warning", ev.message.clone()),
        EventKind::PodEvicted => {
            let (ns, name) = pod();
            Some((
                "Pod",
                ns,
                name,
                "Evicted",
                "Normal",
                format!("evicted by maintd draining node {node}"),
            ))
        }
        _ => None,
    }
}

impl EventRecorder {
    /// Starts recording: every event from now on is seen (the
    /// subscription is taken before this returns).
    pub fn spawn(self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let rx = self.progress.subscribe();
        tokio::spawn(self.run(rx, stop))
    }

    async fn run(
        self,
        mut rx: tokio::sync::broadcast::Receiver<DrainEvent>,
        stop: CancellationToken,
    ) {
        let mut seen: HashMap<Key, Recorded> = HashMap::new();
        let mut flush = tokio::time::interval(self.series_every);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = flush.tick() => {
                    // Repeats not yet counted on the API, now that a while
                    // has passed.
                    for ((ns, ..), r) in seen.iter_mut() {
                        if r.count > r.written_count {
                            self.write_series(ns, r).await;
                        }
                    }
                    seen.retain(|_, r| r.first.elapsed() < SERIES_WINDOW);
                    continue;
                }
                _ = stop.cancelled() => return,
            };
            let ev = match ev {
                Ok(ev) => ev,
                Err(RecvError::Lagged(n)) => {
                    tracing::debug!(
                        missed = n,
                        "event recorder fell behind; some Events were not recorded"
                    );
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            let Some((kind, ns, name, reason, type_, note)) = translate(&self.node, &ev) else {
                continue;
            };
            if ns.is_empty() || name.is_empty() {
                continue;
            }
            let key: Key = (
                ns.clone(),
                kind.to_string(),
                name.clone(),
                reason.to_string(),
                note.clone(),
            );
            if let Some(r) = seen.get_mut(&key)
                && r.first.elapsed() < SERIES_WINDOW
            {
                r.count += 1;
                if r.written.elapsed() >= self.series_every {
                    self.write_series(&ns, r).await;
                }
                continue;
            }
            let event_name = format!("{name}.{:016x}", rand::random::<u64>());
            let body = json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": event_name, "namespace": ns},
                "eventTime": micro_now(),
                "reportingController": "maintd.io/agent",
                "reportingInstance": format!("maintd-{}", self.node),
                "action": "Drain",
                "reason": reason,
                "type": type_,
                "note": note.chars().take(1024).collect::<String>(),
                "regarding": regarding(kind, &name, &ns),
            });
            if self
                .call(
                    Request::post(format!("/apis/events.k8s.io/v1/namespaces/{ns}/events")),
                    "application/json",
                    &body,
                )
                .await
            {
                seen.insert(
                    key,
                    Recorded {
                        name: event_name,
                        count: 1,
                        written_count: 1,
                        first: Instant::now(),
                        written: Instant::now(),
                    },
                );
            }
        }
    }

    /// Writes the series count of an Event seen again.
    async fn write_series(&self, ns: &str, r: &mut Recorded) {
        let patch = json!({"series": {"count": r.count, "lastObservedTime": micro_now()}});
        let path = format!("/apis/events.k8s.io/v1/namespaces/{ns}/events/{}", r.name);
        r.written = Instant::now();
        if self
            .call(Request::patch(path), "application/merge-patch+json", &patch)
            .await
        {
            r.written_count = r.count;
        }
    }

    async fn call(
        &self,
        builder: http::request::Builder,
        content_type: &str,
        body: &Value,
    ) -> bool {
        let Ok(req) = builder
            .header("content-type", content_type)
            .body(serde_json::to_vec(body).unwrap_or_default())
        else {
            return false;
        };
        match tokio::time::timeout(CALL_TIMEOUT, self.client.request::<Value>(req)).await {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "recording an Event failed");
                false
            }
            Err(_) => false,
        }
    }
}

fn micro_now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, pod: Option<&str>, message: &str) -> DrainEvent {
        let p = Progress::new("node-a");
        let mut ev = p.event(kind);
        ev.namespace = pod.map(|_| "shop".to_string());
        ev.pod = pod.map(str::to_string);
        ev.stage = Some(2);
        ev.message = message.into();
        ev
    }

    #[test]
    fn what_the_drain_does_becomes_events_on_the_node_and_the_evicted_pod() {
        // (event, pod, message) → (regarding kind, reason, type, note contains)
        let cases = [
            (
                EventKind::DrainStarted,
                None,
                "taint maintd.io/drain",
                Some(("Node", "DrainStarted", "Normal", "started draining")),
            ),
            (
                EventKind::StageStarted,
                None,
                "DaemonSet pods",
                Some((
                    "Node",
                    "DrainStageStarted",
                    "Normal",
                    "stage 2: DaemonSet pods",
                )),
            ),
            (
                EventKind::PodBlocked,
                Some("web-1"),
                "The disruption budget web needs 2",
                Some((
                    "Node",
                    "EvictionBlocked",
                    "Warning",
                    "shop/web-1 refused: The disruption budget web",
                )),
            ),
            (
                EventKind::PodError,
                Some("web-1"),
                "forbidden: denied by policy",
                Some((
                    "Node",
                    "EvictionFailed",
                    "Warning",
                    "shop/web-1 failed: forbidden",
                )),
            ),
            (
                EventKind::DrainCompleted,
                None,
                "12 pods",
                Some(("Node", "Drained", "Normal", "drained the node")),
            ),
            (
                EventKind::DrainFailed,
                None,
                "the shutdown budget is nearly spent with 3 pods left",
                Some(("Node", "DrainFailed", "Warning", "3 pods left")),
            ),
            (
                EventKind::Warning,
                None,
                "giving back the reboot slot: timeout",
                Some(("Node", "DrainWarning", "Warning", "reboot slot")),
            ),
            (
                EventKind::NodeUnmarked,
                None,
                "uncordoned",
                Some(("Node", "Undrained", "Normal", "uncordoned")),
            ),
            (
                EventKind::ShutdownPreparing,
                None,
                "reboot in 60 s",
                Some(("Node", "ShutdownDelayed", "Normal", "reboot")),
            ),
            (
                EventKind::PodEvicted,
                Some("web-1"),
                "",
                Some((
                    "Pod",
                    "Evicted",
                    "Normal",
                    "evicted by maintd draining node node-a",
                )),
            ),
            // Too fine-grained for Events: the status and the log carry them.
            (EventKind::PodEvicting, Some("web-1"), "", None),
            (EventKind::PodGone, Some("web-1"), "", None),
            (EventKind::StageCompleted, None, "", None),
        ];
        for (kind, pod, message, want) in cases {
            let got = translate("node-a", &event(kind, pod, message));
            match (got, want) {
                (None, None) => {}
                (
                    Some((regarding, ns, name, reason, type_, note)),
                    Some((w_regarding, w_reason, w_type, w_note)),
                ) => {
                    assert_eq!(
                        (regarding, reason, type_),
                        (w_regarding, w_reason, w_type),
                        "{kind:?}"
                    );
                    assert!(note.contains(w_note), "{kind:?}: {note}");
                    let want_name = if regarding == "Pod" {
                        "web-1"
                    } else {
                        "node-a"
                    };
                    assert_eq!(name, want_name, "{kind:?}");
                    assert_eq!(
                        ns,
                        if regarding == "Pod" {
                            "shop"
                        } else {
                            "default"
                        },
                        "{kind:?}"
                    );
                }
                (got, want) => panic!("{kind:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
