//! The `scale` subresource of Deployments, ReplicaSets and StatefulSets: an
//! autoscaling/v1 `Scale` view of `spec.replicas`, which `kubectl scale`
//! patches. A change of replicas is written to the object itself, through
//! the same patch path as any other write.

use serde_json::{Value, json};

use super::errors::ApiError;
use super::patch;
use super::resources::ResourceDef;
use super::state::SimState;
use super::verbs::{self, Part, PatchType, Writer};

/// Whether the resource has a `scale` subresource.
pub fn serves(def: &ResourceDef) -> bool {
    def.group == "apps"
        && ["deployments", "replicasets", "statefulsets"].contains(&def.plural.as_str())
}

/// The `Scale` of an object.
pub fn get(sim: &SimState, def: &ResourceDef, ns: &str, name: &str) -> Result<Value, ApiError> {
    let obj = sim
        .store()
        .get(&def.gr(), ns, name)
        .ok_or_else(|| ApiError::not_found(&def.gr(), name))?;
    Ok(scale_of(&obj))
}

/// Patches an object's `Scale` and writes its replicas to the object.
pub fn patch(
    sim: &SimState,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    kind: PatchType,
    body: &Value,
    writer: &Writer,
) -> Result<Value, ApiError> {
    let mut scale = get(sim, def, ns, name)?;
    let rv = scale["metadata"]["resourceVersion"].clone();
    scale["metadata"]
        .as_object_mut()
        .map(|m| m.remove("resourceVersion"));
    // A Scale has no lists, so a strategic merge is a merge.
    let res = match kind {
        PatchType::Merge | PatchType::Strategic => patch::merge_patch(&mut scale, body),
        PatchType::Json => patch::json_patch(&mut scale, body),
        PatchType::Apply => {
            return Err(ApiError::bad_request(
                "the simulator does not apply to the scale subresource: patch it (kubectl scale) instead",
            ));
        }
    };
    res.map_err(|e| match e {
        patch::PatchError::BadRequest(m) | patch::PatchError::Invalid(m) => {
            ApiError::bad_request(m)
        }
        patch::PatchError::Conflict { message, .. } => ApiError::bad_request(message),
    })?;
    // A resourceVersion the patch sets is a precondition; none is none.
    if scale["metadata"]["resourceVersion"].is_null() {
        scale["metadata"]["resourceVersion"] = rv;
    }
    update(sim, def, ns, name, &scale, writer)
}

/// Writes the replicas of a `Scale` to the object (PUT of the
/// subresource), honouring its resourceVersion.
pub fn update(
    sim: &SimState,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    scale: &Value,
    writer: &Writer,
) -> Result<Value, ApiError> {
    let replicas = scale["spec"]["replicas"]
        .as_i64()
        .filter(|r| (0..=i64::from(i32::MAX)).contains(r))
        .ok_or_else(|| {
            ApiError::invalid(
                &def.gr(),
                name,
                "Scale",
                vec![(
                    "spec.replicas".into(),
                    format!(
                        "Invalid value: {}: must be greater than or equal to 0",
                        scale["spec"]["replicas"]
                    ),
                )],
            )
        })?;
    let mut change = json!({"spec": {"replicas": replicas}});
    if let Some(rv) = scale["metadata"]["resourceVersion"]
        .as_str()
        .filter(|rv| !rv.is_empty())
    {
        change["metadata"] = json!({"resourceVersion": rv});
    }
    let obj = verbs::patch(
        sim,
        def,
        ns,
        name,
        Part::Main,
        PatchType::Merge,
        &change,
        writer,
    )?;
    Ok(scale_of(&obj))
}

fn scale_of(obj: &Value) -> Value {
    let md = &obj["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": md["name"],
            "namespace": md["namespace"],
            "uid": md["uid"],
            "resourceVersion": md["resourceVersion"],
            "creationTimestamp": md["creationTimestamp"],
        },
        "spec": {"replicas": obj["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {
            "replicas": obj["status"]["replicas"].as_i64().unwrap_or(0),
            "selector": selector_string(&obj["spec"]["selector"]),
        },
    })
}

/// A label selector in its string form, as `metav1.FormatLabelSelector`
/// writes it for `Scale.status.selector`.
fn selector_string(selector: &Value) -> String {
    let mut parts: Vec<String> = selector["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    for e in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        parts.push(match e["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            _ => format!("!{key}"),
        });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selector_reads_as_kubectl_writes_it() {
        let s = json!({
            "matchLabels": {"app": "web", "tier": "front"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["a", "b"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ],
        });
        assert_eq!(
            selector_string(&s),
            "app=web,tier=front,env in (a,b),!canary"
        );
    }
}
