//! The budget judge: from the API server's audit log alone (every write to
//! a pod with the pod as the API server answered it, e2e/audit-policy-soak.yaml),
//! which pods of a namespace were healthy at every moment, and for every
//! eviction and delete of maintd's that went through, whether the pod's
//! budget allowed it then.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;

use super::plan::Workload;

/// maintd's ServiceAccount, as the audit log names it.
pub const MAINTD: &str = "system:serviceaccount:maintd:maintd";

/// Where the audit log ends now: a round reads what comes after.
pub fn end_of(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// What the judge found in one namespace.
#[derive(Debug, Default)]
pub struct Verdict {
    /// maintd's evictions and deletes that went through, each judged.
    pub judged: usize,
    /// Of them, evictions.
    pub evictions: usize,
    /// Its evictions a budget refused (429).
    pub refused: usize,
    /// Its requests the API server's priority and fairness refused (429),
    /// anywhere in the cluster.
    pub throttled: usize,
    pub violations: Vec<String>,
}

#[derive(Debug, Clone, Default)]
struct PodState {
    labels: BTreeMap<String, String>,
    ready: bool,
    leaving: bool,
    /// The resourceVersion this state is from.
    version: u64,
}

impl PodState {
    fn healthy(&self) -> bool {
        self.ready && !self.leaving
    }
}

fn pod_state(pod: &Value) -> PodState {
    let labels = pod["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let ready = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    PodState {
        labels,
        ready,
        leaving: !pod["metadata"]["deletionTimestamp"].is_null(),
        version: pod["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    }
}

/// Judges every eviction and delete maintd made in `namespace`, from the
/// audit log at `path` after byte `from`. A budget is the workload's pods
/// (label `app=<name>`) and its rule.
pub fn judge(path: &Path, from: u64, namespace: &str, workloads: &[Workload]) -> Verdict {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.seek(SeekFrom::Start(from));
        let _ = f.read_to_string(&mut text);
    }
    let all: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let mut verdict = Verdict {
        throttled: all
            .iter()
            .filter(|e| e["user"]["username"] == MAINTD && e["responseStatus"]["code"] == 429)
            .filter(|e| !refused_by_budget(e))
            .count(),
        ..Verdict::default()
    };
    let mut events: Vec<(String, Value)> = all
        .into_iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "pods" && e["objectRef"]["namespace"] == namespace
        })
        .filter_map(|e| Some((e["stageTimestamp"].as_str()?.to_string(), e)))
        .collect();
    // RFC 3339 with microseconds, all in UTC: the text sorts as the time.
    events.sort_by(|a, b| a.0.cmp(&b.0));

    let mut pods: BTreeMap<String, PodState> = BTreeMap::new();
    for (at, e) in &events {
        let name = e["objectRef"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let sub = e["objectRef"]["subresource"].as_str().unwrap_or_default();
        let verb = e["verb"].as_str().unwrap_or_default();
        let code = e["responseStatus"]["code"].as_u64().unwrap_or(0);
        let by_maintd = e["user"]["username"] == MAINTD;
        if sub == "eviction" {
            if verb == "create" && by_maintd && refused_by_budget(e) {
                verdict.refused += 1;
            }
            if verb == "create" && (200..300).contains(&code) {
                if by_maintd {
                    verdict.judged += 1;
                    verdict.evictions += 1;
                    judge_one(&pods, &name, at, "eviction", workloads, &mut verdict);
                }
                if let Some(p) = pods.get_mut(&name) {
                    p.leaving = true;
                }
            }
            continue;
        }
        if verb == "delete" && (200..300).contains(&code) && by_maintd {
            verdict.judged += 1;
            judge_one(&pods, &name, at, "delete", workloads, &mut verdict);
        }
        let answer = &e["responseObject"];
        if answer["kind"] == "Pod" {
            let mut now = pod_state(answer);
            if verb == "delete" && (200..300).contains(&code) {
                now.leaving = true;
            }
            let known = pods.get(&name).map_or(0, |p| p.version);
            if now.version >= known {
                // Once leaving, a pod never comes back healthy.
                let was_leaving = pods.get(&name).is_some_and(|p| p.leaving);
                now.leaving |= was_leaving;
                pods.insert(name, now);
            }
        } else if verb == "delete"
            && (200..300).contains(&code)
            && let Some(p) = pods.get_mut(&name)
        {
            p.leaving = true;
        }
    }
    verdict
}

/// Whether an audit event is an eviction a disruption budget refused (the
/// other 429s are the API server's priority and fairness).
fn refused_by_budget(e: &Value) -> bool {
    e["responseStatus"]["code"] == 429
        && e["objectRef"]["subresource"] == "eviction"
        && e["responseStatus"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("disruption budget"))
}

/// Whether taking pod `name` away at `at` kept every budget it is under,
/// as the disruption controller counts: healthy pods are Ready and not
/// being deleted; a healthy pod may go while its budget keeps its desired
/// healthy count without it, an unhealthy one while the budget has its
/// count (the default unhealthyPodEvictionPolicy, IfHealthyBudget).
fn judge_one(
    pods: &BTreeMap<String, PodState>,
    name: &str,
    at: &str,
    how: &str,
    workloads: &[Workload],
    verdict: &mut Verdict,
) {
    let Some(pod) = pods.get(name) else {
        return; // not a pod this round made (its creation was not seen)
    };
    if pod.leaving {
        return; // already going: taking it again changes no count
    }
    for w in workloads {
        if pod.labels.get("app").map(String::as_str) != Some(w.name) {
            continue;
        }
        let healthy = pods
            .values()
            .filter(|p| p.labels.get("app").map(String::as_str) == Some(w.name))
            .filter(|p| p.healthy())
            .count() as i32;
        let left = if pod.healthy() { healthy - 1 } else { healthy };
        if left < w.desired_healthy() {
            verdict.violations.push(format!(
                "the {how} of pod {name} at {at} left {left} healthy pods of {} (its budget wants {})",
                w.name,
                w.desired_healthy()
            ));
        }
    }
}
