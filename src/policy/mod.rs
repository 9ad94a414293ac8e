//! Policy for planned drains, the rules operators know from kured: a
//! planned drain (a local `maintd drain`, FleetLock, a NodeMaintenance
//! marked `planned`) starts only inside the maintenance window, while no
//! pod matching the blocking selector runs on the node, and while no alert
//! fires. A shutdown or a drain taint is never held back: it is already
//! happening, or an admin asked for it now.
//!
//! Each rule answers synchronously from what the agent already has (the
//! clock, its pods, the last answer from Prometheus), so the agent's loop
//! never waits on them.

pub mod alerts;
pub mod args;
pub mod selector;
pub mod window;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

pub use window::Window;

/// Which rule holds a planned drain back (the metrics' label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HoldKind {
    Window,
    BlockingPods,
    Alerts,
    /// Waiting for a reboot or drain slot (not a policy rule, but a
    /// reason to wait all the same).
    Slot,
}

impl HoldKind {
    /// Every kind, for gauges that must show zeros too.
    pub const ALL: [HoldKind; 4] = [
        HoldKind::Window,
        HoldKind::BlockingPods,
        HoldKind::Alerts,
        HoldKind::Slot,
    ];

    /// The metrics label value.
    pub fn label(self) -> &'static str {
        match self {
            HoldKind::Window => "window",
            HoldKind::BlockingPods => "blocking_pods",
            HoldKind::Alerts => "alerts",
            HoldKind::Slot => "slot",
        }
    }
}

/// Why a planned drain does not start now.
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    pub kind: HoldKind,
    /// One line a person reads.
    pub reason: String,
    /// When it will pass by itself (the window's opening), if known.
    pub until: Option<Timestamp>,
}

/// A blocking-pod selector, as given and as parsed.
#[derive(Debug, Clone)]
pub struct BlockingPods {
    pub text: String,
    pub selector: LabelSelector,
}

impl BlockingPods {
    pub fn parse(text: &str) -> Result<Self, selector::SelectorError> {
        Ok(BlockingPods {
            text: text.to_string(),
            selector: selector::parse(text)?,
        })
    }

    /// The pods of `pods` (this node's) that match and still run: not
    /// finished, not being deleted.
    pub fn matching(&self, pods: &[Arc<Value>]) -> Vec<String> {
        let mut names: Vec<String> = pods
            .iter()
            .map(|p| crate::drain::plan::PodInfo::from_json(p))
            .filter(|p| {
                !matches!(p.phase.as_str(), "Succeeded" | "Failed" | "Unknown") && !p.deleting
            })
            .filter(|p| {
                crate::drain::plan::selector_matches(&self.selector, &p.labels).unwrap_or(false)
            })
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect();
        names.sort();
        names
    }
}

/// Alert gating as the agent keeps it: the gate, how often it is asked
/// while a planned drain waits, and its last answer, which
/// [`Policy::hold`] reads without waiting on the network.
#[derive(Debug, Clone)]
pub struct Alerts {
    pub gate: alerts::AlertGate,
    /// Time between questions while a planned drain waits.
    pub every: Duration,
    /// Bound on one question (the gate's own timeout).
    pub timeout: Duration,
    last: Arc<tokio::sync::watch::Sender<Option<Answer>>>,
}

/// One answer from Prometheus, and when it came.
#[derive(Debug, Clone)]
pub struct Answer {
    at: tokio::time::Instant,
    /// Why drains must wait (None: nothing blocks).
    holds: Option<String>,
}

impl Alerts {
    pub fn new(settings: alerts::AlertSettings, every: Duration) -> Alerts {
        Alerts {
            timeout: settings.timeout,
            gate: alerts::AlertGate::new(settings),
            every,
            last: Arc::new(tokio::sync::watch::channel(None).0),
        }
    }

    /// Changes when an answer comes in.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<Option<Answer>> {
        self.last.subscribe()
    }

    /// Records an answer (what [`Alerts::keep_asking`] does with each).
    pub fn record(&self, holds: Option<String>) {
        self.last.send_replace(Some(Answer {
            at: tokio::time::Instant::now(),
            holds,
        }));
    }

    /// Asks now, then every `every`, until `stop`.
    pub async fn keep_asking(self, stop: tokio_util::sync::CancellationToken) {
        loop {
            let answer = tokio::select! {
                a = self.gate.check() => a,
                _ = stop.cancelled() => return,
            };
            self.record(answer);
            tokio::select! {
                _ = tokio::time::sleep(self.every) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// What the last answer says, if it is recent enough to go by: one
    /// older than a question's interval and timeout (the asking stopped,
    /// or hangs) holds the drain as no answer does.
    fn hold(&self) -> Option<Hold> {
        let fresh = self
            .every
            .saturating_add(self.timeout)
            .saturating_add(Duration::from_secs(1));
        let reason = match &*self.last.borrow() {
            Some(a) if a.at.elapsed() <= fresh => a.holds.clone()?,
            _ => format!(
                "asking Prometheus at {} whether alerts fire",
                self.gate.url()
            ),
        };
        Some(Hold {
            kind: HoldKind::Alerts,
            reason,
            until: None,
        })
    }
}

/// The rules of one agent.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub window: Option<Window>,
    /// Each selector blocks on its own.
    pub blocking: Vec<BlockingPods>,
    /// Prometheus to ask, if any.
    pub alerts: Option<Alerts>,
}

impl Policy {
    /// What holds a planned drain back at `now`, given the node's pods:
    /// the window first (it says until when), then blocking pods, then
    /// alerts (Prometheus' last answer).
    /// [`Self::hold`] before the node's pods are listed (None): a
    /// blocking-pod selector cannot be answered yet, so it holds.
    pub fn hold_if_known(&self, pods: Option<&[Arc<Value>]>, now: Timestamp) -> Option<Hold> {
        match pods {
            Some(pods) => self.hold(pods, now),
            None if self.blocking.is_empty() => self.hold(&[], now),
            None => Some(
                self.hold(&[], now)
                    .filter(|h| h.kind == HoldKind::Window)
                    .unwrap_or_else(|| Hold {
                        kind: HoldKind::BlockingPods,
                        reason: "the node's pods are not listed yet: whether a pod matching a blocking selector runs on it is not known".into(),
                        until: None,
                    }),
            ),
        }
    }

    pub fn hold(&self, pods: &[Arc<Value>], now: Timestamp) -> Option<Hold> {
        if let Some((reason, until)) = self.window.as_ref().and_then(|w| w.hold(now)) {
            return Some(Hold {
                kind: HoldKind::Window,
                reason,
                until,
            });
        }
        for b in &self.blocking {
            let names = b.matching(pods);
            if !names.is_empty() {
                let shown: Vec<&str> = names.iter().take(5).map(String::as_str).collect();
                let more = names.len().saturating_sub(5);
                return Some(Hold {
                    kind: HoldKind::BlockingPods,
                    reason: format!(
                        "pods matching the blocking selector {:?} run on the node: {}{}",
                        b.text,
                        shown.join(", "),
                        if more > 0 {
                            format!(" and {more} more")
                        } else {
                            String::new()
                        }
                    ),
                    until: None,
                });
            }
        }
        self.alerts.as_ref().and_then(Alerts::hold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, labels: Value, phase: &str) -> Arc<Value> {
        Arc::new(json!({
            "metadata": {"name": name, "namespace": "batch", "labels": labels},
            "status": {"phase": phase},
        }))
    }

    #[test]
    fn a_running_pod_that_matches_the_blocking_selector_holds_the_drain() {
        let policy = Policy {
            blocking: vec![BlockingPods::parse("app=backup").unwrap()],
            ..Policy::default()
        };
        let now: Timestamp = "2026-11-24T12:00:00Z".parse().unwrap();
        let pods = vec![
            pod("backup-1", json!({"app": "backup"}), "Running"),
            pod("backup-0", json!({"app": "backup"}), "Succeeded"),
            pod("web", json!({"app": "web"}), "Running"),
        ];
        let hold = policy.hold(&pods, now).expect("held");
        assert_eq!(hold.kind, HoldKind::BlockingPods);
        assert!(hold.reason.contains("batch/backup-1"), "{}", hold.reason);
        assert!(
            !hold.reason.contains("backup-0"),
            "finished pods do not block"
        );
        assert!(policy.hold(&pods[1..], now).is_none());
        // Pods not listed yet: not known, so held.
        let unknown = policy.hold_if_known(None, now).expect("held");
        assert_eq!(unknown.kind, HoldKind::BlockingPods);
        assert!(
            unknown.reason.contains("not listed yet"),
            "{}",
            unknown.reason
        );
        assert!(policy.hold_if_known(Some(&pods[1..]), now).is_none());
    }

    #[test]
    fn the_window_is_said_before_the_pods() {
        let policy = Policy {
            window: Some(Window::parse("sat", "02:00", "04:00", "UTC").unwrap()),
            blocking: vec![BlockingPods::parse("app=backup").unwrap()],
            alerts: None,
        };
        let pods = vec![pod("backup-1", json!({"app": "backup"}), "Running")];
        let tuesday: Timestamp = "2026-11-24T12:00:00Z".parse().unwrap();
        assert_eq!(policy.hold(&pods, tuesday).unwrap().kind, HoldKind::Window);
        let saturday: Timestamp = "2026-11-28T03:00:00Z".parse().unwrap();
        assert_eq!(
            policy.hold(&pods, saturday).unwrap().kind,
            HoldKind::BlockingPods
        );
        assert!(policy.hold(&[], saturday).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn alerts_hold_after_the_pods_and_an_old_answer_holds_as_none_does() {
        let alerts = Alerts::new(
            alerts::AlertSettings {
                url: "http://prometheus.monitoring:9090".into(),
                filter: None,
                match_only: false,
                firing_only: false,
                query: None,
                timeout: Duration::from_secs(10),
            },
            Duration::from_secs(60),
        );
        let policy = Policy {
            blocking: vec![BlockingPods::parse("app=backup").unwrap()],
            alerts: Some(alerts.clone()),
            ..Policy::default()
        };
        let now: Timestamp = "2026-11-24T12:00:00Z".parse().unwrap();
        let pods = vec![pod("backup-1", json!({"app": "backup"}), "Running")];
        assert_eq!(
            policy.hold(&pods, now).unwrap().kind,
            HoldKind::BlockingPods
        );

        let hold = policy.hold(&[], now).expect("no answer yet holds");
        assert_eq!(hold.kind, HoldKind::Alerts);
        assert_eq!(
            hold.reason,
            "asking Prometheus at http://prometheus.monitoring:9090 whether alerts fire"
        );
        alerts.record(Some("1 alert active: NodeOnFire (firing)".into()));
        assert_eq!(
            policy.hold(&[], now).unwrap().reason,
            "1 alert active: NodeOnFire (firing)"
        );
        alerts.record(None);
        assert!(policy.hold(&[], now).is_none(), "a clear answer lets it go");
        tokio::time::advance(Duration::from_secs(60 + 10 + 2)).await;
        assert!(
            policy.hold(&[], now).unwrap().reason.starts_with("asking"),
            "an answer older than a question's interval and timeout counts for nothing"
        );
    }
}
