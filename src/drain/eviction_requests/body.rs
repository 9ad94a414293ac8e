//! What the agent writes to the EvictionRequest API, built from
//! k8s-openapi's `v1_37` types so that every field name is the one
//! Kubernetes generated (`spec.requester`, not the KEP draft's
//! `requesterName`).

use std::collections::BTreeMap;

use k8s_openapi::api::lifecycle::v1alpha1::{
    EvictionRequest, EvictionRequestPodReference, EvictionRequestSpec, EvictionRequestTarget,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use serde_json::Value;

use super::{NODE_LABEL, REQUESTER, name};

/// `spec.intent` of a requester that wants the pod evicted.
pub const EVICTION: &str = "Eviction";
/// `spec.intent` of a requester that no longer does.
pub const WITHDRAWN: &str = "Withdrawn";

/// The EvictionRequest for one pod of `node`'s drain.
pub fn request(namespace: &str, pod: &str, uid: &str, node: &str) -> EvictionRequest {
    EvictionRequest {
        metadata: ObjectMeta {
            name: Some(name(uid)),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(NODE_LABEL.to_string(), node.to_string())])),
            ..ObjectMeta::default()
        },
        spec: EvictionRequestSpec {
            requester: REQUESTER.to_string(),
            intent: EVICTION.to_string(),
            target: EvictionRequestTarget {
                pod: Some(EvictionRequestPodReference {
                    name: pod.to_string(),
                    uid: uid.to_string(),
                }),
            },
        },
        status: None,
    }
}

/// A delete that only removes the request of this uid (not a newer one
/// of the same name).
pub fn delete_options(uid: Option<String>) -> DeleteOptions {
    DeleteOptions {
        preconditions: uid.map(|u| Preconditions {
            uid: Some(u),
            resource_version: None,
        }),
        ..DeleteOptions::default()
    }
}

/// The JSON sent for a typed object.
pub fn json<T: serde::Serialize>(obj: &T) -> Result<Value, String> {
    serde_json::to_value(obj).map_err(|e| format!("could not encode the request body: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const UID: &str = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";

    #[test]
    fn the_request_sent_is_the_merged_api_and_nothing_else() {
        let sent = json(&request("default", "vm-1", UID, "node-a")).unwrap();
        assert_eq!(
            sent,
            json!({
                "apiVersion": "lifecycle.k8s.io/v1alpha1",
                "kind": "EvictionRequest",
                "metadata": {
                    "name": format!("maintd-{UID}"),
                    "namespace": "default",
                    "labels": {"maintd.io/node": "node-a"},
                },
                "spec": {
                    "requester": "maintd.io/drain",
                    "intent": "Eviction",
                    "target": {"pod": {"name": "vm-1", "uid": UID}},
                },
            })
        );
        // k8s-openapi ignores fields it does not know: a body that decodes
        // and encodes back to itself has none left over that Kubernetes
        // 1.37 would drop (or refuse under strict field validation).
        let typed: EvictionRequest = serde_json::from_value(sent.clone()).unwrap();
        assert_eq!(json(&typed).unwrap(), sent);
        assert_eq!(typed.spec.requester, REQUESTER);
    }

    #[test]
    fn a_delete_is_bound_to_the_request_first_seen() {
        assert_eq!(
            json(&delete_options(Some("abc".into()))).unwrap(),
            json!({"preconditions": {"uid": "abc"}})
        );
        assert_eq!(json(&delete_options(None)).unwrap(), json!({}));
    }
}
