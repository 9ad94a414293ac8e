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

pub mod args;
pub mod selector;
pub mod window;

use std::collections::BTreeMap;
use std::sync::Arc;

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
            .filter(|p| {
                !matches!(
                    p["status"]["phase"].as_str(),
                    Some("Succeeded" | "Failed" | "Unknown")
                ) && p["metadata"]["deletionTimestamp"].is_null()
            })
            .filter(|p| {
                let labels: BTreeMap<String, String> = p["metadata"]["labels"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                            .collect()
                    })
                    .unwrap_or_default();
                crate::drain::plan::selector_matches(&self.selector, &labels).unwrap_or(false)
            })
            .map(|p| {
                format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap_or(""),
                    p["metadata"]["name"].as_str().unwrap_or("")
                )
            })
            .collect();
        names.sort();
        names
    }
}

/// The rules of one agent.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub window: Option<Window>,
    /// Each selector blocks on its own.
    pub blocking: Vec<BlockingPods>,
}

impl Policy {
    /// What holds a planned drain back at `now`, given the node's pods:
    /// the window first (it says until when), then blocking pods.
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
        None
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
    }

    #[test]
    fn the_window_is_said_before_the_pods() {
        let policy = Policy {
            window: Some(Window::parse("sat", "02:00", "04:00", "UTC").unwrap()),
            blocking: vec![BlockingPods::parse("app=backup").unwrap()],
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
}
