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

use crate::drain::plan::PodType;
use crate::drain::progress::{DrainEvent, EventKind, Progress};

mod owners;
use owners::{Record, Tally, Target};

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
    /// An Event on each evicted pod too (`--pod-events`), beside the one
    /// per owning workload.
    pub pod_events: bool,
}

/// (namespace, regarding kind, regarding name, reason, note) of an Event.
type Key = (String, String, String, String, String);

/// Why the drain ran, as the owners' Events say it: " for NodeMaintenance
/// rack-7 (stage Drain)".
fn why(progress: &Progress) -> String {
    let triggers = progress.status().triggers;
    if triggers.is_empty() {
        String::new()
    } else {
        format!(" for {}", triggers.join(", "))
    }
}

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
fn regarding(t: &Target) -> Value {
    let mut r = json!({"apiVersion": t.api_version, "kind": t.kind, "name": t.name});
    if t.kind == "Node" {
        r["namespace"] = json!("");
        r["uid"] = json!(t.name);
    } else {
        r["namespace"] = json!(t.namespace);
        if !t.uid.is_empty() {
            r["uid"] = json!(t.uid);
        }
    }
    r
}

/// What an agent event becomes on its own, if anything: an Event on the
/// Node, or (with `pod_events`) on the pod evicted. The Events for the
/// workloads whose pods were evicted come from [`owners::Tally`].
/// `stage_label` is the label of the event's stage, as its start said it.
fn translate(
    node: &str,
    ev: &DrainEvent,
    pod_events: bool,
    stage_label: Option<&str>,
) -> Option<Record> {
    let on_node = |reason: &'static str, type_: &'static str, note: String| {
        Some(Record {
            target: Target {
                api_version: "v1".into(),
                kind: "Node".into(),
                namespace: "default".into(),
                name: node.to_string(),
                uid: node.to_string(),
            },
            reason,
            type_,
            note,
        })
    };
    let (ns, name) = (
        ev.namespace.clone().unwrap_or_default(),
        ev.pod.clone().unwrap_or_default(),
    );
    match ev.event {
        EventKind::DrainStarted => on_node(
            "DrainStarted",
            "Normal",
            format!("maintd started draining the node: {}", ev.message),
        ),
        // A stage of static pods is said by its StaticPodsStashed, which
        // names it.
        EventKind::StageStarted if ev.pod_type == Some(PodType::Static) => None,
        EventKind::StageStarted => on_node(
            "DrainStageStarted",
            "Normal",
            format!("stage {}: {}", ev.stage.unwrap_or(0), ev.message),
        ),
        // A budget holding pods back is one story, however many pods it
        // holds: one Event per budget, its series counting each pod held
        // (the NodeDrain, the status and the timeline name each pod).
        EventKind::PodBlocked => match crate::drain::executor::blocking_budget(&ev.message) {
            Some(budget) => on_node(
                "EvictionBlocked",
                "Warning",
                format!(
                    "evictions wait for the disruption budget {ns}/{budget}: its pods leave only as it allows ({})",
                    ev.message.split_once(" needs ").map_or(
                        "it allows none now".to_string(),
                        |(_, rest)| format!(
                            "it needs {}",
                            rest.split(" and has ").next().unwrap_or(rest)
                        )
                    )
                ),
            ),
            None => on_node(
                "EvictionBlocked",
                "Warning",
                format!("eviction of {ns}/{name} refused: {}", ev.message),
            ),
        },
        EventKind::DrainCompleted => on_node(
            "Drained",
            "Normal",
            format!("maintd drained the node: {}", ev.message),
        ),
        EventKind::DrainFailed => on_node("DrainFailed", "Warning", ev.message.clone()),
        EventKind::PodError => on_node(
            "EvictionFailed",
            "Warning",
            format!("evicting {ns}/{name} failed: {}", ev.message),
        ),
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
        EventKind::StaticPodsStashed => on_node(
            "StaticPodsStashed",
            "Normal",
            match (ev.stage, stage_label) {
                (Some(n), Some(label)) => format!("stage {n}: {label}: {}", ev.message),
                _ => ev.message.clone(),
            },
        ),
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
        EventKind::PodEvicted if pod_events => Some(Record {
            target: Target {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: ns,
                name,
                uid: String::new(),
            },
            reason: "Evicted",
            type_: "Normal",
            note: format!("evicted by maintd draining node {node}"),
        }),
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
        mut rx: tokio::sync::broadcast::Receiver<std::sync::Arc<DrainEvent>>,
        stop: CancellationToken,
    ) {
        let mut seen: HashMap<Key, Recorded> = HashMap::new();
        let mut tally = Tally::default();
        // Each stage's label, as its start said it.
        let mut labels: HashMap<usize, String> = HashMap::new();
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
            tally.note(&ev);
            if ev.event == EventKind::StageStarted
                && let Some(n) = ev.stage
            {
                labels.insert(n, ev.message.clone());
            }
            if ev.event == EventKind::DrainStarted {
                labels.clear();
            }
            let label = ev.stage.and_then(|n| labels.get(&n)).map(String::as_str);
            let mut records: Vec<Record> = translate(&self.node, &ev, self.pod_events, label)
                .into_iter()
                .collect();
            if let Some(stage) = owners::due(&ev) {
                records.extend(tally.finish(stage, &self.node, &why(&self.progress)));
            }
            for r in records {
                self.record(r, &mut seen).await;
            }
        }
    }

    /// Writes `r` as an Event, or counts it in the series of the same Event
    /// written within the window.
    async fn record(&self, r: Record, seen: &mut HashMap<Key, Recorded>) {
        let ns = r.target.namespace.clone();
        if ns.is_empty() || r.target.name.is_empty() {
            return;
        }
        let key: Key = (
            ns.clone(),
            r.target.kind.clone(),
            r.target.name.clone(),
            r.reason.to_string(),
            r.note.clone(),
        );
        if let Some(rec) = seen.get_mut(&key)
            && rec.first.elapsed() < SERIES_WINDOW
        {
            rec.count += 1;
            if rec.written.elapsed() >= self.series_every {
                self.write_series(&ns, rec).await;
            }
            return;
        }
        let event_name = format!("{}.{:016x}", r.target.name, rand::random::<u64>());
        let body = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": event_name, "namespace": ns},
            "eventTime": micro_now(),
            "reportingController": "maintd.io/agent",
            "reportingInstance": format!("maintd-{}", self.node),
            "action": "Drain",
            "reason": r.reason,
            "type": r.type_,
            "note": r.note.chars().take(1024).collect::<String>(),
            "regarding": regarding(&r.target),
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
    fn what_the_drain_does_becomes_events_on_the_node() {
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
            // A budget holds pods back: one story per budget, whichever pod.
            (
                EventKind::PodBlocked,
                Some("web-1"),
                "The disruption budget web needs 2 healthy pods and has 2 currently",
                Some((
                    "Node",
                    "EvictionBlocked",
                    "Warning",
                    "evictions wait for the disruption budget shop/web: its pods leave only as it allows (it needs 2 healthy pods)",
                )),
            ),
            (
                EventKind::PodBlocked,
                Some("web-1"),
                "its manifest was moved but the kubelet has not stopped it",
                Some((
                    "Node",
                    "EvictionBlocked",
                    "Warning",
                    "shop/web-1 refused: its manifest",
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
            // One per pod only with --pod-events (below); the owners'
            // Events come from the tally.
            (EventKind::PodEvicted, Some("web-1"), "", None),
            // Too fine-grained for Events: the status and the log carry them.
            (EventKind::PodEvicting, Some("web-1"), "", None),
            (EventKind::PodGone, Some("web-1"), "", None),
            (EventKind::StageCompleted, None, "", None),
        ];
        for (kind, pod, message, want) in cases {
            let got = translate("node-a", &event(kind, pod, message), false, None);
            match (got, want) {
                (None, None) => {}
                (Some(r), Some((w_regarding, w_reason, w_type, w_note))) => {
                    assert_eq!(
                        (r.target.kind.as_str(), r.reason, r.type_),
                        (w_regarding, w_reason, w_type),
                        "{kind:?}"
                    );
                    assert!(r.note.contains(w_note), "{kind:?}: {}", r.note);
                    assert_eq!(
                        (r.target.name.as_str(), r.target.namespace.as_str()),
                        ("node-a", "default"),
                        "{kind:?}"
                    );
                    let about = regarding(&r.target);
                    assert_eq!(about["uid"], "node-a", "kubectl describe node finds it");
                }
                (got, want) => panic!("{kind:?}: got {got:?}, want {want:?}"),
            }
        }
        let pod = translate(
            "node-a",
            &event(EventKind::PodEvicted, Some("web-1"), ""),
            true,
            None,
        )
        .expect("with --pod-events, one on the pod");
        assert_eq!(
            (
                pod.target.kind.as_str(),
                pod.target.name.as_str(),
                pod.reason
            ),
            ("Pod", "web-1", "Evicted")
        );
    }
}
