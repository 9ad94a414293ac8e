//! What the agent reads of the EvictionRequest API, as plain data: the
//! responders a pod declares, where a request stands from its conditions
//! and its Eviction, and the active responder's words. Requests and
//! Evictions are read through k8s-openapi's `v1_37` types; a pod is read
//! leniently as JSON, as the drain plan reads it.

use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::Value;

use super::DEFAULT_RESPONDER;
use crate::outbound::shorten;

/// The most of a responder's message a blocker carries.
const MESSAGE_MAX: usize = 240;

/// Where one request stands, from its conditions and its Eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Nothing has acted on the request: it has no condition and no status,
    /// and there is no Eviction for its pod. Kubernetes 1.37 serves the API
    /// without the controller that would, so a request can stay so forever.
    Untouched,
    /// Something acts on it; what the active responder reports.
    Pending(String),
    /// `TargetEvicted=True`: the pod has been deleted or reached its end.
    Evicted,
    /// `Failed=True` with reason `CanceledDueToNoRequesters`: every
    /// requester withdrew (or deleted its request).
    Canceled,
    /// `Failed=True` for any other reason: no responder could evict it, or
    /// the request was invalid.
    Failed { reason: String, message: String },
    /// There is no such request (deleted by someone else).
    Missing,
}

/// The reason of a `Failed` condition that means the eviction was canceled
/// (the API has no `Canceled` condition).
pub const CANCELED: &str = "CanceledDueToNoRequesters";

/// The responders a pod declares other than the default evictor, higher
/// priority first, as the Eviction API orders them: on equal priority by
/// domain, compared label by label from the top-level domain down, then by
/// the key. A responder without a priority goes last.
pub fn own_responders(pod: &Value) -> Vec<String> {
    let mut found: Vec<(i64, &str)> = Vec::new();
    for r in pod["spec"]["evictionResponders"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(n) = r["name"].as_str()
            && !n.is_empty()
            && n != DEFAULT_RESPONDER
            && !found.iter().any(|(_, m)| *m == n)
        {
            found.push((r["priority"].as_i64().unwrap_or(i64::MIN), n));
        }
    }
    found.sort_by(|(pa, a), (pb, b)| pb.cmp(pa).then_with(|| rank(a).cmp(&rank(b))));
    found.into_iter().map(|(_, n)| n.to_string()).collect()
}

/// A responder name's tie-break order: its domain's labels from the top
/// down, then its key.
fn rank(name: &str) -> (Vec<&str>, &str) {
    let (domain, key) = name.split_once('/').unwrap_or((name, ""));
    (domain.rsplit('.').collect(), key)
}

fn holds<'a>(conditions: &'a [Condition], kind: &str) -> Option<&'a Condition> {
    conditions
        .iter()
        .find(|c| c.type_ == kind && c.status == "True")
}

/// The final state conditions show (an EvictionRequest's or an
/// Eviction's), if any.
pub fn final_state(conditions: &[Condition]) -> Option<State> {
    if holds(conditions, "TargetEvicted").is_some() {
        return Some(State::Evicted);
    }
    let failed = holds(conditions, "Failed")?;
    if failed.reason == CANCELED {
        return Some(State::Canceled);
    }
    Some(State::Failed {
        reason: failed.reason.clone(),
        message: failed.message.clone(),
    })
}

fn request_conditions(r: &EvictionRequest) -> &[Condition] {
    r.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

fn eviction_conditions(e: &Eviction) -> &[Condition] {
    e.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// Where a request stands, given the Evictions made for its pod (any
/// order; the last one not final is followed).
pub fn state_of(request: &EvictionRequest, evictions: &[Eviction]) -> State {
    if let Some(done) = final_state(request_conditions(request)) {
        return done;
    }
    let touched = request.status.as_ref().is_some_and(|s| {
        s.observed_generation.is_some() || !request_conditions(request).is_empty()
    });
    if evictions.is_empty() && !touched {
        return State::Untouched;
    }
    let open = evictions
        .iter()
        .rev()
        .find(|e| final_state(eviction_conditions(e)).is_none());
    State::Pending(progress(open))
}

/// What the active responder of an Eviction reports: its name, its
/// message, and when it expects to be done.
pub fn progress(eviction: Option<&Eviction>) -> String {
    let Some(status) = eviction.and_then(|e| e.status.as_ref()) else {
        return "EvictionRequest made; no Eviction has been made of it yet".into();
    };
    let active = status
        .target_responders
        .iter()
        .flatten()
        .find(|r| r.state == "Active");
    let Some(active) = active else {
        return "EvictionRequest made; no responder is active yet".into();
    };
    let entry = status
        .responders
        .iter()
        .flatten()
        .find(|r| r.name == active.name);
    // The responder's words go into the NodeDrain and Events: one line,
    // bounded.
    let mut out = format!("EvictionRequest: responder {}", shorten(&active.name, 120));
    match entry
        .and_then(|e| e.message.as_deref())
        .filter(|m| !m.trim().is_empty())
    {
        Some(m) => {
            out.push_str(": ");
            out.push_str(shorten(m, MESSAGE_MAX).trim_end_matches('.'));
        }
        None => out.push_str(" is at work"),
    }
    if let Some(t) = entry.and_then(|e| e.expected_completion_time.as_ref()) {
        out.push_str(&format!(" (expected done by {})", t.0));
    }
    out
}

/// Whether an APIResourceList lists `evictionrequests`.
pub fn serves_requests(list: &Value) -> bool {
    list["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["name"] == "evictionrequests")
}

#[cfg(test)]
mod tests;
