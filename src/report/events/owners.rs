//! What the drain tells application owners: one Event per owning workload
//! per stage, on the workload itself (the ReplicaSet, StatefulSet,
//! DaemonSet, Job…), so that `kubectl describe` of an object that still
//! exists says why its pods moved: "maintd evicted 15 of its pods from
//! node-a for NodeMaintenance rack-7". A pod without an owner gets the
//! Event itself; a static pod's owner is its Node, whose own Events say
//! what became of it. One Event for a workload's pods, not one per pod:
//! a fleet's rollout at 5,000 nodes of 110 pods wrote 825,000 Events.

use std::collections::BTreeMap;

use crate::drain::plan::OwnerRef;
use crate::drain::progress::{DrainEvent, EventKind};

/// An object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// Where known: `kubectl describe` finds an object's Events by it.
    pub uid: String,
}

/// An Event to write: about `target`, its reason, type and note.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub target: Target,
    pub reason: &'static str,
    pub type_: &'static str,
    pub note: String,
}

/// The pods evicted so far in each stage, by the workload they belong to.
#[derive(Default)]
pub struct Tally {
    by_stage: BTreeMap<usize, BTreeMap<Target, u32>>,
}

impl Tally {
    /// Counts a pod the drain evicted (other events pass by).
    pub fn note(&mut self, ev: &DrainEvent) {
        if ev.event != EventKind::PodEvicted {
            return;
        }
        let (Some(ns), Some(pod)) = (&ev.namespace, &ev.pod) else {
            return;
        };
        let target = match &ev.owner {
            // A static pod: its Node's Events say what became of it.
            Some(o) if o.kind == "Node" => return,
            Some(o) => owner_target(o, ns),
            None => Target {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: ns.clone(),
                name: pod.clone(),
                uid: String::new(),
            },
        };
        let stage = self.by_stage.entry(ev.stage.unwrap_or(0)).or_default();
        *stage.entry(target).or_default() += 1;
    }

    /// The owners' Events of stage `stage` (None: of every stage counted),
    /// now that it is over: evicted from `node` for `why` (the drain's
    /// triggers).
    pub fn finish(&mut self, stage: Option<usize>, node: &str, why: &str) -> Vec<Record> {
        let stages: Vec<usize> = match stage {
            Some(s) => vec![s],
            None => self.by_stage.keys().copied().collect(),
        };
        let mut out = Vec::new();
        for s in stages {
            for (target, n) in self.by_stage.remove(&s).unwrap_or_default() {
                let note = if target.kind == "Pod" {
                    format!("maintd evicted this pod from node {node}{why}")
                } else {
                    format!("maintd evicted {n} of its pods from node {node}{why}")
                };
                out.push(Record {
                    target,
                    reason: "Evicted",
                    type_: "Normal",
                    note,
                });
            }
        }
        out
    }
}

/// Whether the stage's Events for owners are due with this event: its
/// stage is over, or the drain is (every stage counted so far).
pub fn due(ev: &DrainEvent) -> Option<Option<usize>> {
    match ev.event {
        EventKind::StageCompleted | EventKind::StageTimedOut => Some(ev.stage),
        EventKind::DrainCompleted | EventKind::DrainFailed | EventKind::DrainCancelled => {
            Some(None)
        }
        _ => None,
    }
}

fn owner_target(o: &OwnerRef, ns: &str) -> Target {
    Target {
        api_version: o.api_version.clone(),
        kind: o.kind.clone(),
        namespace: ns.to_string(),
        name: o.name.clone(),
        uid: o.uid.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::progress::Progress;

    fn evicted(pod: &str, stage: usize, owner: Option<(&str, &str)>) -> DrainEvent {
        let p = Progress::new("node-a");
        let mut ev = p.event(EventKind::PodEvicted);
        ev.namespace = Some("shop".into());
        ev.pod = Some(pod.into());
        ev.stage = Some(stage);
        ev.owner = owner.map(|(kind, name)| OwnerRef {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: true,
        });
        ev
    }

    #[test]
    fn one_event_per_owner_per_stage_on_the_owner() {
        let mut t = Tally::default();
        for i in 0..15 {
            t.note(&evicted(
                &format!("web-{i}"),
                1,
                Some(("ReplicaSet", "web")),
            ));
        }
        t.note(&evicted("db-0", 1, Some(("StatefulSet", "db"))));
        t.note(&evicted("lonely", 1, None));
        t.note(&evicted("etcd-node-a", 1, Some(("Node", "node-a"))));
        t.note(&evicted("proxy-x", 2, Some(("DaemonSet", "proxy"))));
        // Other events are not counted.
        let mut gone = evicted("web-0", 1, Some(("ReplicaSet", "web")));
        gone.event = EventKind::PodGone;
        t.note(&gone);

        let why = " for NodeMaintenance rack-7";
        let first = t.finish(Some(1), "node-a", why);
        let said: Vec<(String, String, String)> = first
            .iter()
            .map(|r| (r.target.kind.clone(), r.target.name.clone(), r.note.clone()))
            .collect();
        assert_eq!(
            said,
            [
                (
                    "ReplicaSet".to_string(),
                    "web".to_string(),
                    "maintd evicted 15 of its pods from node node-a for NodeMaintenance rack-7"
                        .to_string()
                ),
                (
                    "StatefulSet".into(),
                    "db".into(),
                    "maintd evicted 1 of its pods from node node-a for NodeMaintenance rack-7"
                        .into()
                ),
                (
                    "Pod".into(),
                    "lonely".into(),
                    "maintd evicted this pod from node node-a for NodeMaintenance rack-7".into()
                ),
            ]
        );
        let web = &first[0].target;
        assert_eq!(
            (
                web.api_version.as_str(),
                web.uid.as_str(),
                web.namespace.as_str()
            ),
            ("apps/v1", "uid-web", "shop")
        );
        assert!(t.finish(Some(1), "node-a", why).is_empty(), "said once");
        // The rest when the drain is over.
        let rest = t.finish(None, "node-a", why);
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].target.kind, "DaemonSet");
    }

    #[test]
    fn the_owners_events_are_due_when_a_stage_or_the_drain_ends() {
        let p = Progress::new("node-a");
        let mut ev = p.event(EventKind::StageCompleted);
        ev.stage = Some(3);
        assert_eq!(due(&ev), Some(Some(3)));
        assert_eq!(due(&p.event(EventKind::DrainCompleted)), Some(None));
        assert_eq!(due(&p.event(EventKind::PodEvicted)), None);
    }
}
