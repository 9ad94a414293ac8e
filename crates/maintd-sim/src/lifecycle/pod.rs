//! The Pod's part of the API: `spec.evictionResponders` (`k8s.io/api`
//! v0.37.2 `core/v1`, validated by `pkg/apis/core/validation`): at most
//! ten responders, each a domain-prefixed key outside the reserved
//! domains with a priority of 1000 to 100000, unique by name; set only at
//! creation; not with `spec.schedulingGroup`; dropped on write while the
//! feature gate is off.

use serde_json::Value;

use super::MAX_POD_RESPONDERS;
use super::validation::{RESERVED, domain_prefixed_path, priority, reserved};
use crate::errors::ApiError;
use crate::meta;
use crate::resources::ResourceDef;
use crate::store::Store;

/// Where a pod spec lists its responders.
const FIELD: &str = "spec.evictionResponders";

/// A pod spec's responders as 422 causes.
pub fn check_pod(spec: &Value, causes: &mut Vec<(String, String)>) {
    let Some(list) = spec["evictionResponders"].as_array() else {
        return;
    };
    if list.is_empty() {
        return;
    }
    if list.len() > MAX_POD_RESPONDERS {
        causes.push((
            FIELD.into(),
            format!(
                "Too many: {}: must have at most {MAX_POD_RESPONDERS} items",
                list.len()
            ),
        ));
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, r) in list.iter().enumerate() {
        let at = |f: &str| format!("{FIELD}[{i}].{f}");
        match r["name"].as_str() {
            None | Some("") => causes.push((at("name"), "Required value".into())),
            Some(n) => {
                if let Err(whys) = domain_prefixed_path(n) {
                    for why in whys {
                        causes.push((at("name"), format!("Invalid value: {n:?}: {why}")));
                    }
                } else if reserved(n) {
                    causes.push((at("name"), format!("Invalid value: {n:?}: {RESERVED}")));
                }
                if seen.contains(&n) {
                    // The list is a map keyed by name: the item is named.
                    causes.push((format!("{FIELD}[{i}]"), format!("Duplicate value: {r}")));
                }
                seen.push(n);
            }
        }
        match r["priority"].as_i64() {
            None => causes.push((at("priority"), "Required value".into())),
            Some(p) => {
                if let Err(why) = priority(r["name"].as_str().unwrap_or(""), p) {
                    causes.push((at("priority"), format!("Invalid value: {p}: {why}")));
                }
            }
        }
    }
    if !spec["schedulingGroup"].is_null() {
        causes.push((
            "spec.schedulingGroup".into(),
            "Forbidden: may not be set when evictionResponders is set".into(),
        ));
    }
}

/// With the feature gate off (the API not served), a pod's responders are
/// dropped on write, unless the pod already had them.
pub fn drop_disabled(store: &Store, def: &ResourceDef, old: Option<&Value>, new: &mut Value) {
    if !(def.group.is_empty() && def.kind == "Pod")
        || store.resource(&super::eviction_requests()).is_some()
        || old.is_some_and(|o| !o["spec"]["evictionResponders"].is_null())
    {
        return;
    }
    if let Some(spec) = new["spec"].as_object_mut() {
        spec.remove("evictionResponders");
    }
}

/// A pod's responders are set at creation and never change.
pub(super) fn check_update(def: &ResourceDef, old: &Value, new: &Value) -> Result<(), ApiError> {
    let (was, is) = (
        &old["spec"]["evictionResponders"],
        &new["spec"]["evictionResponders"],
    );
    if was == is {
        return Ok(());
    }
    Err(ApiError::invalid(
        &def.gr(),
        meta::name(new),
        &def.kind,
        vec![(
            FIELD.into(),
            format!("Invalid value: {is}: field is immutable"),
        )],
    ))
}
