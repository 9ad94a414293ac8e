//! What the bench sees of a drain on the real control plane, through its
//! own watches: each pod of the node evicted (its deletionTimestamp
//! appears) and gone, and each budget's `disruptionsAllowed` over time;
//! from these, maintd's lower bound and whether it drained in priority
//! order.

use std::collections::BTreeMap;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::runtime::watcher;
use maintd::drain::plan::{self, PlanOptions, PodInfo, PodType};
use serde_json::Value;

#[derive(Default)]
struct PodSeen {
    pod: Value,
    evicted: Option<Instant>,
    gone: Option<Instant>,
}

#[derive(Default)]
struct State {
    pods: BTreeMap<String, PodSeen>,
    /// Each budget (namespace/name): its object, and (when, allowed).
    budgets: BTreeMap<String, (Value, Vec<(Instant, i64)>)>,
}

/// A stage's lower bound.
#[derive(Debug, Default, Clone)]
pub struct StageBound {
    pub label: String,
    pub secs: f64,
    /// Times a budget of the stage allowed nothing while its pods waited.
    pub waits: usize,
    /// After each, how long until the budget's next pod was evicted.
    pub reactions: Vec<f64>,
}

pub struct Following {
    state: std::sync::Arc<std::sync::Mutex<State>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What a run showed, in seconds since the drain's start.
pub struct Seen {
    state: State,
    start: Instant,
}

fn key(v: &Value) -> String {
    format!(
        "{}/{}",
        v["metadata"]["namespace"].as_str().unwrap_or(""),
        v["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// Starts watching `node`'s pods and every budget.
pub fn follow(admin: kube::Client, node: &str) -> Following {
    let state = std::sync::Arc::new(std::sync::Mutex::new(State::default()));
    let pods: Api<Pod> = Api::all(admin.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let s = state.clone();
    let pod_task = tokio::spawn(async move {
        let mut events = watcher(pods, cfg).boxed();
        while let Some(ev) = events.next().await {
            let now = Instant::now();
            let mut st = s.lock().unwrap_or_else(|e| e.into_inner());
            match ev {
                Ok(watcher::Event::InitApply(p) | watcher::Event::Apply(p)) => {
                    let v = serde_json::to_value(&p).unwrap_or_default();
                    let seen = st.pods.entry(key(&v)).or_default();
                    if p.metadata.deletion_timestamp.is_some() && seen.evicted.is_none() {
                        seen.evicted = Some(now);
                    }
                    if seen.pod.is_null() {
                        seen.pod = v;
                    }
                }
                Ok(watcher::Event::Delete(p)) => {
                    let v = serde_json::to_value(&p).unwrap_or_default();
                    let seen = st.pods.entry(key(&v)).or_default();
                    seen.evicted.get_or_insert(now);
                    seen.gone.get_or_insert(now);
                }
                _ => {}
            }
        }
    });
    let budgets: Api<PodDisruptionBudget> = Api::all(admin);
    let s = state.clone();
    let pdb_task = tokio::spawn(async move {
        let mut events = watcher(budgets, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            let now = Instant::now();
            if let Ok(watcher::Event::InitApply(b) | watcher::Event::Apply(b)) = ev {
                let v = serde_json::to_value(&b).unwrap_or_default();
                let allowed = b
                    .status
                    .as_ref()
                    .and_then(|s| s.disruptions_allowed)
                    .map_or(0, i64::from);
                let mut st = s.lock().unwrap_or_else(|e| e.into_inner());
                let entry = st.budgets.entry(key(&v)).or_insert((v, Vec::new()));
                entry.1.push((now, allowed));
            }
        }
    });
    // The watches' first lists are in before the drain starts.
    std::thread::sleep(std::time::Duration::from_secs(2));
    Following {
        state,
        tasks: vec![pod_task, pdb_task],
    }
}

impl Following {
    /// Stops watching; `start` is the drain's start.
    pub async fn finish(self, start: Instant) -> Seen {
        // The last deletions reach the watch within moments.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        for t in &self.tasks {
            t.abort();
        }
        let state = std::mem::take(&mut *self.state.lock().unwrap_or_else(|e| e.into_inner()));
        Seen { state, start }
    }
}

impl Seen {
    /// The times `budget` allowed no disruption, after the drain began,
    /// from an eviction taking its last one to its status allowing one
    /// again, that ended before `until` (while pods of it still waited):
    /// (their sum, how many).
    fn waits(&self, budget: &str, until: Instant) -> (f64, Vec<Instant>) {
        let Some((_, history)) = self.state.budgets.get(budget) else {
            return (0.0, Vec::new());
        };
        let mut exhausted: Option<Instant> = None;
        let (mut sum, mut ends) = (0.0, Vec::new());
        for (when, allowed) in history
            .iter()
            .filter(|(w, _)| *w >= self.start && *w <= until)
        {
            match (*allowed, exhausted) {
                (0, None) => exhausted = Some(*when),
                (a, Some(from)) if a > 0 => {
                    sum += (*when - from).as_secs_f64();
                    ends.push(*when);
                    exhausted = None;
                }
                _ => {}
            }
        }
        (sum, ends)
    }

    /// maintd's lower bound for its ordinary pods, stage by stage (see the
    /// module above), and how many pods it evicted before a lower-priority
    /// ordinary pod was gone. A stage lasts at least as long as its
    /// slowest pod without a budget took from eviction to removal, and as
    /// long as each budget's pods stood waiting for it to allow a
    /// disruption, added up, plus the API server's time to grant each of
    /// its evictions, plus its last evicted pod's own removal.
    /// `grant` is the least time the API server took to grant one
    /// eviction in this run: it grants those under one budget one at a
    /// time (each reads the budget and writes its status back; one that
    /// overlaps another is refused a conflict inside the API server and
    /// tries again 500 ms later), so a budget's pods take at least that
    /// each, outside its waits.
    pub fn bound_and_order(&self, grant: f64) -> (Vec<StageBound>, usize) {
        let pods: Vec<(&PodSeen, PodInfo)> = self
            .state
            .pods
            .values()
            .filter(|s| !s.pod.is_null())
            .map(|s| (s, PodInfo::from_json(&s.pod)))
            .collect();
        let infos: Vec<PodInfo> = pods.iter().map(|(_, i)| i.clone()).collect();
        let plan = plan::build_plan(&infos, None, &PlanOptions::default());
        let by_uid: BTreeMap<&str, &PodSeen> =
            pods.iter().map(|(s, i)| (i.uid.as_str(), *s)).collect();
        let shutdown = |s: &PodSeen| match (s.evicted, s.gone) {
            (Some(e), Some(g)) => (g - e).as_secs_f64(),
            _ => 0.0,
        };
        let mut stages = Vec::new();
        for stage in plan
            .stages
            .iter()
            .filter(|s| s.pod_type == PodType::Default)
        {
            let mut groups: BTreeMap<String, Vec<&PodSeen>> = BTreeMap::new();
            for p in &stage.pods {
                let Some(seen) = by_uid.get(p.uid.as_str()) else {
                    continue;
                };
                let budget = self.state.budgets.iter().find(|(_, (b, _))| {
                    b["metadata"]["namespace"] == seen.pod["metadata"]["namespace"]
                        && maintd_sim::select::selector_object_matches(
                            &b["spec"]["selector"],
                            &seen.pod,
                        )
                });
                let group = budget.map_or_else(|| format!("solo {}", p.uid), |(k, _)| k.clone());
                groups.entry(group).or_default().push(seen);
            }
            let mut bound = StageBound {
                label: stage.label.clone(),
                ..Default::default()
            };
            for (group, members) in &groups {
                let time = if group.starts_with("solo ") {
                    members.iter().map(|s| shutdown(s)).fold(0.0, f64::max)
                } else {
                    let last = members
                        .iter()
                        .filter(|s| s.evicted.is_some())
                        .max_by_key(|s| s.evicted);
                    let Some(last) = last else { continue };
                    let (waited, ends) = self.waits(group, last.evicted.unwrap_or(self.start));
                    if super::trace() {
                        let at = |i: Instant| i.saturating_duration_since(self.start).as_secs_f64();
                        let h: Vec<String> = self.state.budgets[group]
                            .1
                            .iter()
                            .filter(|(w, _)| *w >= self.start)
                            .map(|(w, a)| format!("{:.2}:{a}", at(*w)))
                            .collect();
                        let mut ev: Vec<(f64, f64)> = members
                            .iter()
                            .map(|s| (s.evicted.map_or(-1.0, at), s.gone.map_or(-1.0, at)))
                            .collect();
                        ev.sort_by(|a, b| a.0.total_cmp(&b.0));
                        eprintln!(
                            "TRACE {group}: allowed {}\n  evicted/gone {:?}",
                            h.join(" "),
                            ev.iter()
                                .map(|(e, g)| format!("{e:.2}/{g:.2}"))
                                .collect::<Vec<_>>()
                        );
                    }
                    bound.waits += ends.len();
                    // How soon the next pod of the budget was evicted
                    // after each wait ended (maintd's reaction).
                    for end in ends {
                        let next = members
                            .iter()
                            .filter_map(|s| s.evicted)
                            .filter(|e| *e >= end)
                            .min();
                        if let Some(next) = next {
                            bound.reactions.push((next - end).as_secs_f64());
                        }
                    }
                    let granted = members.iter().filter(|s| s.evicted.is_some()).count();
                    waited + grant * granted as f64 + shutdown(last)
                };
                bound.secs = bound.secs.max(time);
            }
            stages.push(bound);
        }
        // Priority order: no ordinary pod evicted before every ordinary pod
        // of a lower priority was gone.
        let ordinary: Vec<(&PodSeen, i32)> = pods
            .iter()
            .filter(|(_, i)| {
                plan.stages.iter().any(|s| {
                    s.pod_type == PodType::Default && s.pods.iter().any(|p| p.uid == i.uid)
                })
            })
            .map(|(s, i)| (*s, i.priority))
            .collect();
        let out_of_order = ordinary
            .iter()
            .filter(|(q, prio)| {
                q.evicted.is_some_and(|e| {
                    ordinary
                        .iter()
                        .any(|(p, lower)| lower < prio && p.gone.is_none_or(|g| g > e))
                })
            })
            .count();
        (stages, out_of_order)
    }
}
