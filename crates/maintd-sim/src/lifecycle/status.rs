//! The Eviction's status as the eviction request controller moves it on,
//! and the conditions it copies into EvictionRequests: plain JSON in and
//! out, no store and no clock but the times given.

use serde_json::{Value, json};

use super::{HEARTBEAT_DEADLINE_SECS, IMPERATIVE_EVICTOR, IMPERATIVE_EVICTOR_PRIORITY};

pub const FAILED: &str = "Failed";
pub const TARGET_EVICTED: &str = "TargetEvicted";

/// Where the target pod is, as the controller's lister sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Running,
    Terminal,
    Gone,
}

/// A condition the controller writes: type, status, reason, message.
pub type Cond<'a> = (&'a str, &'a str, &'a str, String);

/// A requester as the Eviction tracks it: name and intent.
pub type Requester = (String, String);

/// The first status of an Eviction: the pod's responders and the
/// imperative evictor (priority 100), higher priority first; the first is
/// Active from the start (validation wants the highest-priority responder
/// Active when the lists are first set), the rest Inactive.
pub fn initial(pod: &Value, requesters: &[Requester], now: &str) -> Value {
    let mut found: Vec<(String, i64)> = Vec::new();
    for r in pod["spec"]["evictionResponders"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let (Some(n), Some(p)) = (r["name"].as_str(), r["priority"].as_i64())
            && !n.is_empty()
            && n != IMPERATIVE_EVICTOR
            && !found.iter().any(|(m, _)| m == n)
            && found.len() < super::MAX_POD_RESPONDERS
        {
            found.push((n.to_string(), p));
        }
    }
    found.push((IMPERATIVE_EVICTOR.to_string(), IMPERATIVE_EVICTOR_PRIORITY));
    sort_responders(&mut found);
    let state = |i: usize| if i == 0 { "Active" } else { "Inactive" };
    let mut status = json!({
        "observedGeneration": 1,
        "requesters": requesters.iter().map(|(n, i)| json!({"name": n, "intent": i})).collect::<Vec<_>>(),
        "targetResponders": found.iter().enumerate()
            .map(|(i, (n, p))| json!({"name": n, "priority": p, "state": state(i)}))
            .collect::<Vec<_>>(),
        "responders": found.iter().enumerate()
            .map(|(i, (n, _))| if i == 0 { json!({"name": n, "startTime": now}) } else { json!({"name": n}) })
            .collect::<Vec<_>>(),
        "conditions": [],
    });
    let awaiting = "The target is scheduled for an eviction.".to_string();
    set_conditions(
        &mut status["conditions"],
        &[
            (FAILED, "False", "AwaitingEviction", awaiting.clone()),
            (TARGET_EVICTED, "False", "AwaitingEviction", awaiting),
        ],
        1,
        now,
    );
    status
}

/// Upstream's `SortTargetResponders`: higher priority first; on equal
/// priority by domain, compared label by label from the top-level domain
/// down, then by the key.
pub fn sort_responders(list: &mut [(String, i64)]) {
    fn rank(name: &str) -> (Vec<&str>, &str) {
        let (domain, key) = name.split_once('/').unwrap_or((name, ""));
        (domain.rsplit('.').collect(), key)
    }
    list.sort_by(|(a, pa), (b, pb)| pb.cmp(pa).then_with(|| rank(a).cmp(&rank(b))));
}

/// The Eviction's lookup labels: each participant's name as a key, valued
/// by its role (`EvictionParticipantRole`).
pub fn roles(requesters: &[String], responders: &[String]) -> Vec<(String, &'static str)> {
    let mut out: Vec<(String, &'static str)> = Vec::new();
    for n in requesters.iter().chain(responders) {
        if out.iter().any(|(m, _)| m == n) {
            continue;
        }
        let role = match (requesters.contains(n), responders.contains(n)) {
            (true, true) => "requester-responder",
            (true, false) => "requester",
            _ => "responder",
        };
        out.push((n.clone(), role));
    }
    out
}

/// Whether a condition of `status` is True.
pub fn holds(status: &Value, kind: &str) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// An Eviction whose Failed or TargetEvicted is True is done for good.
pub fn is_final(status: &Value) -> bool {
    holds(status, FAILED) || holds(status, TARGET_EVICTED)
}

/// The Eviction's next status: requesters tracked (never removed), the
/// target's fate recorded, a cancellation when no requester wants the
/// eviction any more, and the active responder handed on when it
/// completed or went silent. `age` gives the seconds since a timestamp.
pub fn advance(
    status: &Value,
    requesters: &[Requester],
    target: Target,
    now: &str,
    age: &dyn Fn(&str) -> Option<i64>,
) -> Value {
    let mut next = if status.is_object() {
        status.clone()
    } else {
        json!({})
    };
    if is_final(status) {
        return next;
    }
    track_requesters(&mut next, requesters);
    let generation = next["observedGeneration"].as_i64().unwrap_or(1);
    let active = position(&next, "Active");
    if target != Target::Running {
        if let Some(i) = active {
            next["targetResponders"][i]["state"] = json!("Completed");
        }
        let (reason, message) = match target {
            Target::Terminal => (
                "PodTerminal",
                "The target pod has reached a terminal phase.",
            ),
            _ => ("PodDeleted", "The target pod has been deleted."),
        };
        set_conditions(
            &mut next["conditions"],
            &[
                (TARGET_EVICTED, "True", reason, message.into()),
                (
                    FAILED,
                    "False",
                    "Succeeded",
                    "The target has been evicted.".into(),
                ),
            ],
            generation,
            now,
        );
        return next;
    }
    if !requesters.iter().any(|(_, intent)| intent == "Eviction") {
        if let Some(i) = active {
            next["targetResponders"][i]["state"] = json!("Canceled");
        }
        let why = "No EvictionRequest for this target has the Eviction intent.".to_string();
        set_conditions(
            &mut next["conditions"],
            &[(FAILED, "True", "CanceledDueToNoRequesters", why)],
            generation,
            now,
        );
        return next;
    }
    let count = next["targetResponders"].as_array().map_or(0, Vec::len);
    let pick = match active {
        Some(i) => {
            let r = &next["responders"][i];
            let last_sign = r["heartbeatTime"].as_str().or(r["startTime"].as_str());
            let ended = if !r["completionTime"].is_null() {
                Some("Completed")
            } else if last_sign
                .and_then(age)
                .is_some_and(|s| s > HEARTBEAT_DEADLINE_SECS)
            {
                Some("Interrupted")
            } else {
                None
            };
            match ended {
                None => return next,
                Some(state) => {
                    next["targetResponders"][i]["state"] = json!(state);
                    i + 1
                }
            }
        }
        // Nothing started yet: the first responder goes first. (Once all
        // have ended, the eviction has already failed.)
        None if position(&next, "Inactive") == Some(0) => 0,
        None => count,
    };
    if pick < count {
        next["targetResponders"][pick]["state"] = json!("Active");
        if let Some(r) = next["responders"]
            .get_mut(pick)
            .and_then(Value::as_object_mut)
        {
            r.insert("startTime".into(), json!(now));
        }
    } else {
        set_conditions(
            &mut next["conditions"],
            &[(
                FAILED,
                "True",
                "NoFurtherResponder",
                "No responder evicted the target and no further responder is available.".into(),
            )],
            generation,
            now,
        );
    }
    next
}

/// The index of the first target responder in `state`.
pub fn position(status: &Value, state: &str) -> Option<usize> {
    status["targetResponders"]
        .as_array()?
        .iter()
        .position(|r| r["state"] == state)
}

/// `.status.requesters`: current intents, and a requester whose
/// EvictionRequest is gone counts as Withdrawn. Items are never removed.
fn track_requesters(status: &mut Value, requesters: &[Requester]) {
    let mut list: Vec<Value> = status["requesters"].as_array().cloned().unwrap_or_default();
    for r in list.iter_mut() {
        let name = r["name"].as_str().unwrap_or("");
        let intent = requesters
            .iter()
            .find(|(n, _)| n == name)
            .map_or("Withdrawn", |(_, i)| i.as_str());
        r["intent"] = json!(intent);
    }
    for (name, intent) in requesters {
        if !list.iter().any(|r| r["name"] == name.as_str()) {
            list.push(json!({"name": name, "intent": intent}));
        }
    }
    status["requesters"] = Value::Array(list);
}

/// An EvictionRequest's status with `conds` in it and its generation
/// observed.
pub fn request(old: &Value, conds: &[Cond<'_>], generation: i64, now: &str) -> Value {
    let mut next = if old.is_object() {
        old.clone()
    } else {
        json!({})
    };
    if !next["conditions"].is_array() {
        next["conditions"] = json!([]);
    }
    set_conditions(&mut next["conditions"], conds, generation, now);
    next["observedGeneration"] = json!(generation);
    next
}

/// The Failed and TargetEvicted conditions of an Eviction, to copy.
pub fn outcome(eviction_status: &Value) -> Vec<Cond<'static>> {
    let mut out = Vec::new();
    for kind in [FAILED, TARGET_EVICTED] {
        let found = eviction_status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == kind);
        if let Some(c) = found {
            let status = if c["status"] == "True" {
                "True"
            } else {
                "False"
            };
            let reason = match c["reason"].as_str().unwrap_or("") {
                "PodDeleted" => "PodDeleted",
                "PodTerminal" => "PodTerminal",
                "CanceledDueToNoRequesters" => "CanceledDueToNoRequesters",
                "NoFurtherResponder" => "NoFurtherResponder",
                "Succeeded" => "Succeeded",
                "EvictionInvalid" => "EvictionInvalid",
                "EvictionFailed" => "EvictionFailed",
                _ => "AwaitingEviction",
            };
            out.push((
                kind,
                status,
                reason,
                c["message"].as_str().unwrap_or("").to_string(),
            ));
        }
    }
    out
}

/// Sets conditions, keeping a condition's lastTransitionTime while its
/// status stays the same.
fn set_conditions(list: &mut Value, conds: &[Cond<'_>], generation: i64, now: &str) {
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(items) = list.as_array_mut() else {
        return;
    };
    for (kind, status, reason, message) in conds {
        let fresh = json!({
            "type": kind, "status": status, "reason": reason, "message": message,
            "observedGeneration": generation, "lastTransitionTime": now,
        });
        match items.iter_mut().find(|c| c["type"] == *kind) {
            Some(c) => {
                let since = if c["status"] == *status {
                    c["lastTransitionTime"].clone()
                } else {
                    json!(now)
                };
                *c = fresh;
                c["lastTransitionTime"] = since;
            }
            None => items.push(fresh),
        }
    }
}
