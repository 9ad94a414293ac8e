//! The CustomResourceDefinition of [`NodeMaintenance`]: what the derive
//! generates, plus the schema rules it cannot express.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::{
    MAX_CONCURRENT_DRAINS, MAX_NODE_NAME_LEN, MAX_PLAN_ENTRIES, MAX_REASON_LEN,
    MAX_STAGE_TIMEOUT_SECONDS, NodeMaintenance,
};

/// Why the CRD could not be produced (a bug in the types, not user input).
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("the generated NodeMaintenance CRD does not round-trip through JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the generated NodeMaintenance CRD has no {0}; the schema layout changed")]
    Missing(&'static str),
    #[error("rendering the NodeMaintenance CRD as YAML: {0}")]
    Yaml(String),
}

/// The CRD, with:
/// - CEL: exactly one of `nodeName` and `nodeSelector`;
/// - `status.nodes` a list-map keyed by `nodeName` (so each agent's
///   server-side apply owns its own entry), `status.conditions` keyed by `type`;
/// - size limits on `drainPlan`, `reason` and `nodeName`, and ranges for
///   `stageTimeoutSeconds` and `maxConcurrentDrains`: the agent checks the
///   same, for clusters that apply an older CRD.
pub fn crd() -> Result<CustomResourceDefinition, CrdError> {
    let mut v = serde_json::to_value(NodeMaintenance::crd())?;
    drop_null_enum_values(&mut v);
    let schema = v
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
        .ok_or(CrdError::Missing("openAPIV3Schema"))?;
    schema["description"] = json!(
        "A request to take one node, or every node a selector matches, out of service: \
         cordon, or cordon and drain by a plan. Each node's maintd agent reports in its NodeDrain; \
         status holds the aggregates."
    );
    let root = v
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties")
        .ok_or(CrdError::Missing("openAPIV3Schema properties"))?;
    let spec = root
        .pointer_mut("/spec")
        .ok_or(CrdError::Missing("spec schema"))?;
    spec["x-kubernetes-validations"] = json!([{
        "rule": "has(self.nodeName) != has(self.nodeSelector)",
        "message": "set exactly one of nodeName and nodeSelector",
    }]);
    let props = spec
        .pointer_mut("/properties")
        .ok_or(CrdError::Missing("spec properties"))?;
    set(props, "drainPlan", "maxItems", json!(MAX_PLAN_ENTRIES))?;
    set(props, "reason", "maxLength", json!(MAX_REASON_LEN))?;
    set(props, "stageTimeoutSeconds", "minimum", json!(1))?;
    set(
        props,
        "stageTimeoutSeconds",
        "maximum",
        json!(MAX_STAGE_TIMEOUT_SECONDS),
    )?;
    set(props, "maxConcurrentDrains", "minimum", json!(1))?;
    set(
        props,
        "maxConcurrentDrains",
        "maximum",
        json!(MAX_CONCURRENT_DRAINS),
    )?;
    set(props, "cordonAhead", "minimum", json!(0))?;
    set(
        props,
        "cordonAhead",
        "maximum",
        json!(super::MAX_CORDON_AHEAD),
    )?;
    set(props, "nodeName", "minLength", json!(1))?;
    if let Some(reboot) = props.pointer_mut("/waitForReboot/properties") {
        set(
            reboot,
            "timeoutSeconds",
            "minimum",
            json!(super::MIN_REBOOT_TIMEOUT_SECONDS),
        )?;
        set(
            reboot,
            "timeoutSeconds",
            "maximum",
            json!(super::MAX_REBOOT_TIMEOUT_SECONDS),
        )?;
    }
    set(props, "nodeName", "maxLength", json!(MAX_NODE_NAME_LEN))?;
    // Not nullable: a null is pruned, so `has()` in the CEL rule means "set".
    for field in ["nodeName", "nodeSelector", "stageTimeoutSeconds"] {
        if let Some(f) = props.get_mut(field).and_then(Value::as_object_mut) {
            f.remove("nullable");
        }
    }
    let status = root
        .pointer_mut("/status/properties")
        .ok_or(CrdError::Missing("status properties"))?;
    set(status, "attention", "x-kubernetes-list-type", json!("map"))?;
    set(
        status,
        "attention",
        "x-kubernetes-list-map-keys",
        json!(["nodeName"]),
    )?;
    set(
        status,
        "attention",
        "maxItems",
        json!(super::status::MAX_ATTENTION),
    )?;
    set(
        status,
        "drainOrderNodes",
        "maxItems",
        json!(super::status::MAX_ORDER_NODES),
    )?;
    set(status, "conditions", "x-kubernetes-list-type", json!("map"))?;
    set(
        status,
        "conditions",
        "x-kubernetes-list-map-keys",
        json!(["type"]),
    )?;
    Ok(serde_json::from_value(v)?)
}

/// schemars lists `null` among the values of an optional enum; the API
/// server expresses that with `nullable` alone.
fn drop_null_enum_values(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Array(values)) = m.get_mut("enum") {
                values.retain(|x| !x.is_null());
            }
            m.values_mut().for_each(drop_null_enum_values);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_null_enum_values),
        _ => {}
    }
}

fn set(props: &mut Value, field: &'static str, key: &str, value: Value) -> Result<(), CrdError> {
    let f = props
        .get_mut(field)
        .filter(|f| f.is_object())
        .ok_or(CrdError::Missing(field))?;
    f[key] = value;
    Ok(())
}

/// The NodeDrain CRD: one small object per node, its status written only
/// by that node's agent.
pub fn nodedrain_crd() -> Result<CustomResourceDefinition, CrdError> {
    let mut v = serde_json::to_value(super::nodedrain::NodeDrain::crd())?;
    drop_null_enum_values(&mut v);
    let schema = v
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
        .ok_or(CrdError::Missing("openAPIV3Schema"))?;
    schema["description"] = json!(
        "One node's drain status, written only by that node's maintd agent; named after the node \
         and deleted with it."
    );
    let status = v
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/status/properties")
        .ok_or(CrdError::Missing("status properties"))?;
    set(
        status,
        "blockers",
        "maxItems",
        json!(super::nodedrain::MAX_BLOCKERS),
    )?;
    Ok(serde_json::from_value(v)?)
}

/// The CRDs as YAML, as `maintd crd` prints them and `deploy/base/crd.yaml`
/// holds them: NodeMaintenance, then NodeDrain.
pub fn crd_yaml() -> Result<String, CrdError> {
    let mut out =
        "# Generated by `maintd crd` from src/api; do not edit (a test fails on drift).\n"
            .to_string();
    for (i, crd) in [crd()?, nodedrain_crd()?].iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_saphyr::to_string(crd).map_err(|e| CrdError::Yaml(e.to_string()))?);
    }
    Ok(out)
}
