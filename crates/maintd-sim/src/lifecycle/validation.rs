//! What the API server refuses in an EvictionRequest or an Eviction, on
//! create and on update, as 422 causes: the rules of `k8s.io/api`
//! v0.37.2's declarative tags and kube-apiserver v1.37.2's custom
//! validation (`pkg/apis/lifecycle`).

use serde_json::Value;

use super::{GROUP, IMPERATIVE_EVICTOR, IMPERATIVE_EVICTOR_PRIORITY, MAX_POD_RESPONDERS};
use crate::errors::ApiError;
use crate::meta;
use crate::resources::ResourceDef;

/// Upstream's words for a name in a reserved domain.
pub(super) const RESERVED: &str = "domain names *.k8s.io, *.kubernetes.io are reserved";
/// The states a target responder can be in.
const STATES: [&str; 5] = ["Inactive", "Active", "Interrupted", "Canceled", "Completed"];

/// What the API server refuses in an EvictionRequest or Eviction (on
/// create and on update), as 422 causes.
pub fn check(def: &ResourceDef, obj: &Value, causes: &mut Vec<(String, String)>) {
    if def.group != GROUP {
        return;
    }
    let spec = &obj["spec"];
    check_target(&spec["target"], causes);
    check_status_shape(&obj["status"], causes);
    if def.kind == "Eviction" {
        check_target_responders(&obj["status"], causes);
        return;
    }
    match spec["requester"].as_str() {
        None | Some("") => causes.push(("spec.requester".into(), "Required value".into())),
        Some(n) => {
            if let Err(whys) = domain_prefixed_path(n) {
                for why in whys {
                    causes.push((
                        "spec.requester".into(),
                        format!("Invalid value: {n:?}: {why}"),
                    ));
                }
            } else if reserved(n) {
                causes.push((
                    "spec.requester".into(),
                    format!("Invalid value: {n:?}: {RESERVED}"),
                ));
            }
        }
    }
    match spec["intent"].as_str() {
        None | Some("") => causes.push(("spec.intent".into(), "Required value".into())),
        Some("Eviction" | "Withdrawn") => {}
        Some(other) => causes.push((
            "spec.intent".into(),
            format!("Unsupported value: {other:?}: supported values: \"Eviction\", \"Withdrawn\""),
        )),
    }
}

/// The status lists are lists of objects (what the Go types decode).
fn check_status_shape(status: &Value, causes: &mut Vec<(String, String)>) {
    if status.is_null() {
        return;
    }
    if !status.is_object() {
        causes.push(("status".into(), "Invalid value: must be an object".into()));
        return;
    }
    for list in ["conditions", "requesters", "targetResponders", "responders"] {
        let v = &status[list];
        if !v.is_null() && !v.as_array().is_some_and(|l| l.iter().all(Value::is_object)) {
            causes.push((
                format!("status.{list}"),
                "Invalid value: must be a list of objects".into(),
            ));
        }
    }
}

/// An Eviction's target responders: at most the pod's ten and the
/// evictor, each named, with a priority in range (0-999 only for
/// `*.k8s.io` names, the evictor exactly 100) and a known state.
fn check_target_responders(status: &Value, causes: &mut Vec<(String, String)>) {
    let Some(list) = status["targetResponders"].as_array() else {
        return;
    };
    if list.len() > MAX_POD_RESPONDERS + 1 {
        causes.push((
            "status.targetResponders".into(),
            format!(
                "Too many: {}: must have at most {} items",
                list.len(),
                MAX_POD_RESPONDERS + 1
            ),
        ));
    }
    for (i, r) in list.iter().enumerate() {
        let at = |f: &str| format!("status.targetResponders[{i}].{f}");
        let name = r["name"].as_str().unwrap_or("");
        if name.is_empty() {
            causes.push((at("name"), "Required value".into()));
        } else if let Err(whys) = domain_prefixed_path(name) {
            for why in whys {
                causes.push((at("name"), format!("Invalid value: {name:?}: {why}")));
            }
        }
        match r["priority"].as_i64() {
            None => causes.push((at("priority"), "Required value".into())),
            Some(p) => {
                if let Err(why) = priority(name, p) {
                    causes.push((at("priority"), format!("Invalid value: {p}: {why}")));
                }
                if name == IMPERATIVE_EVICTOR && p != IMPERATIVE_EVICTOR_PRIORITY {
                    causes.push((
                        at("priority"),
                        format!("Invalid value: {p}: core k8s responder is expected to have priority: 100"),
                    ));
                }
            }
        }
        match r["state"].as_str() {
            None | Some("") => causes.push((at("state"), "Required value".into())),
            Some(s) if !STATES.contains(&s) => causes.push((
                at("state"),
                format!("Unsupported value: {s:?}: supported values: \"Inactive\", \"Active\", \"Interrupted\", \"Canceled\", \"Completed\""),
            )),
            Some(_) => {}
        }
    }
}

/// A responder's priority: 0 to 100000, and 0-999 only for `*.k8s.io`.
pub(super) fn priority(name: &str, p: i64) -> Result<(), &'static str> {
    if p < 0 {
        return Err("must be greater than or equal to 0");
    }
    if p > 100_000 {
        return Err("must be less than or equal to 100000");
    }
    let domain = name.split('/').next().unwrap_or("");
    if p < 1000 && !(domain == "k8s.io" || domain.ends_with(".k8s.io")) {
        return Err("priorities 0-999 are reserved for responders with *.k8s.io suffix");
    }
    Ok(())
}

/// `.spec.target` is a union whose one member, `pod`, must be set.
fn check_target(target: &Value, causes: &mut Vec<(String, String)>) {
    let pod = &target["pod"];
    if !pod.is_object() {
        causes.push((
            "spec.target".into(),
            "Invalid value: \"\": must specify one of: `pod`".into(),
        ));
        return;
    }
    match pod["name"].as_str() {
        None | Some("") => causes.push(("spec.target.pod.name".into(), "Required value".into())),
        Some(n) if !meta::valid_subdomain(n) => causes.push((
            "spec.target.pod.name".into(),
            format!("Invalid value: {n:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
        )),
        Some(_) => {}
    }
    match pod["uid"].as_str() {
        None | Some("") => causes.push(("spec.target.pod.uid".into(), "Required value".into())),
        Some(u) if !lowercase_uuid(u) => causes.push((
            "spec.target.pod.uid".into(),
            format!("Invalid value: {u:?}: must be a lowercase UUID in 8-4-4-4-12 format"),
        )),
        Some(_) => {}
    }
}

/// What may not change once written: the target and the requester of an
/// EvictionRequest, the target of an Eviction, the set of an Eviction's
/// target responders, a responder's start and completion times, and a
/// Pod's eviction responders.
pub fn check_update(def: &ResourceDef, old: &Value, new: &Value) -> Result<(), ApiError> {
    if def.group.is_empty() && def.kind == "Pod" {
        return super::pod::check_update(def, old, new);
    }
    if def.group != GROUP {
        return Ok(());
    }
    let mut causes = Vec::new();
    let mut fixed = vec![(
        "spec.target",
        &old["spec"]["target"],
        &new["spec"]["target"],
    )];
    if def.kind == "EvictionRequest" {
        fixed.push((
            "spec.requester",
            &old["spec"]["requester"],
            &new["spec"]["requester"],
        ));
    }
    for (field, was, is) in fixed {
        if was != is {
            causes.push((
                field.into(),
                format!("Invalid value: {is}: field is immutable"),
            ));
        }
    }
    if def.kind == "Eviction" {
        let names = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|l| {
                    l.iter()
                        .map(|r| r["name"].as_str().unwrap_or("").to_string())
                        .collect()
                })
                .unwrap_or_default()
        };
        let (was, is) = (
            &old["status"]["targetResponders"],
            &new["status"]["targetResponders"],
        );
        if !names(was).is_empty() && names(was) != names(is) {
            causes.push((
                "status.targetResponders".into(),
                "Forbidden: items cannot be added or removed once set".into(),
            ));
        }
        for (i, r) in old["status"]["responders"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let now = new["status"]["responders"]
                .as_array()
                .and_then(|l| l.iter().find(|n| n["name"] == r["name"]));
            for f in ["startTime", "completionTime"] {
                if !r[f].is_null() && now.is_none_or(|n| n[f] != r[f]) {
                    causes.push((
                        format!("status.responders[{i}].{f}"),
                        "Invalid value: field is immutable once set".into(),
                    ));
                }
            }
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            &def.gr(),
            meta::name(new),
            &def.kind,
            causes,
        ))
    }
}

/// A domain-prefixed key (`acme.io/foo`, upstream's
/// `k8s-prefixed-label-key`): a DNS subdomain, a slash and a label name.
/// What is wrong, in apimachinery's words (one cause each).
pub fn domain_prefixed_path(s: &str) -> Result<(), Vec<&'static str>> {
    const NAME_CHARS: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let Some((domain, name)) = s.split_once('/') else {
        return Err(vec!["must include a prefix (e.g. 'example.com/key')"]);
    };
    let mut whys = Vec::new();
    if domain.is_empty() {
        whys.push("prefix part must be non-empty");
    } else if !meta::valid_subdomain(domain) {
        whys.push(
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        );
    }
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty() {
        whys.push("name part must be non-empty");
    } else if name.len() > 63 {
        whys.push("name part must be no more than 63 characters");
    }
    let chars_ok = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && edge_ok(name.chars().next())
        && edge_ok(name.chars().last());
    if !chars_ok {
        whys.push(NAME_CHARS);
    }
    if whys.is_empty() { Ok(()) } else { Err(whys) }
}

/// A name in `k8s.io`, `kubernetes.io` or a subdomain of either.
pub(super) fn reserved(name: &str) -> bool {
    let domain = name.split('/').next().unwrap_or("");
    ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|r| domain == *r || domain.ends_with(&format!(".{r}")))
}

fn lowercase_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| {
            g.len() == n
                && g.chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        })
}

#[cfg(test)]
mod tests;
