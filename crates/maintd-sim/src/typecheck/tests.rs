//! The type check's verdicts and its words, against messages a real API
//! server gives for the same mistakes.

use serde_json::{Value, json};

use super::*;
use crate::resources::builtins;

fn def(kind: &str) -> ResourceDef {
    builtins()
        .into_iter()
        .find(|d| d.kind == kind && d.group != "events.k8s.io")
        .expect("a built-in kind")
}

fn pod(extra: Value) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
    });
    json_patch::merge(&mut p, &extra);
    p
}

fn pod_message(extra: Value) -> String {
    check(&def("Pod"), &pod(extra))
        .expect_err("refused")
        .json_message()
}

#[test]
fn wrong_json_types_are_refused_in_gos_words() {
    let cases = [
        (
            json!({"spec": {"priority": "high"}}),
            "json: cannot unmarshal string into Go struct field PodSpec.spec.priority of type int32",
        ),
        (
            json!({"metadata": {"ownerReferences": "not-a-list"}}),
            "json: cannot unmarshal string into Go struct field ObjectMeta.metadata.ownerReferences of type []v1.OwnerReference",
        ),
        (
            json!({"spec": {"containers": {"name": "app"}}}),
            "json: cannot unmarshal object into Go struct field PodSpec.spec.containers of type []v1.Container",
        ),
        (
            json!({"spec": {"containers": [{"name": "app", "env": [{"name": "N", "value": 9}]}]}}),
            "json: cannot unmarshal number into Go struct field EnvVar.spec.containers.env.value of type string",
        ),
        (
            json!({"spec": {"containers": [{"name": "app", "securityContext": {"runAsUser": "root"}}]}}),
            "json: cannot unmarshal string into Go struct field SecurityContext.spec.containers.securityContext.runAsUser of type int64",
        ),
        (
            json!({"spec": {"tolerations": [{"key": "k", "value": true}]}}),
            "json: cannot unmarshal bool into Go struct field Toleration.spec.tolerations.value of type string",
        ),
        (
            json!({"metadata": {"labels": {"on": true}}}),
            "json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.labels of type string",
        ),
        (
            json!({"spec": {"priority": 1.5}}),
            "json: cannot unmarshal number 1.5 into Go struct field PodSpec.spec.priority of type int32",
        ),
        (
            json!({"spec": {"priority": 3_000_000_000_i64}}),
            "json: cannot unmarshal number 3000000000 into Go struct field PodSpec.spec.priority of type int32",
        ),
        (
            json!({"spec": "none"}),
            "json: cannot unmarshal string into Go struct field Pod.spec of type v1.PodSpec",
        ),
    ];
    for (extra, want) in cases {
        assert_eq!(pod_message(extra.clone()), want, "{extra}");
    }
}

#[test]
fn what_a_real_server_accepts_passes() {
    for extra in [
        // Unknown fields are dropped by the API server, not refused.
        json!({"spec": {"noSuchField": [1, 2]}, "extra": true}),
        // Quantities may be numbers, ports may be numbers or names.
        json!({"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": 1, "memory": "1Gi"}},
            "livenessProbe": {"httpGet": {"port": "http"}}, "readinessProbe": {"tcpSocket": {"port": 8080}}}]}}),
        // null is any field's zero value.
        json!({"spec": {"priority": null, "tolerations": null}}),
        json!({"metadata": {"annotations": {"maintd.io/drain": "Skip please"}}}),
        json!({"metadata": {"ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "1", "controller": true}]}}),
    ] {
        assert_eq!(check(&def("Pod"), &pod(extra.clone())), Ok(()), "{extra}");
    }
}

#[test]
fn other_kinds_are_checked_against_their_own_types() {
    let pdb = json!({"metadata": {"name": "b"}, "spec": {"maxUnavailable": [1]}});
    assert_eq!(
        check(&def("PodDisruptionBudget"), &pdb)
            .unwrap_err()
            .json_message(),
        "json: cannot unmarshal array into Go struct field PodDisruptionBudgetSpec.spec.maxUnavailable of type intstr.IntOrString"
    );
    let node = json!({"metadata": {"name": "n"}, "spec": {"unschedulable": "yes"}});
    assert_eq!(
        check(&def("Node"), &node).unwrap_err().json_message(),
        "json: cannot unmarshal string into Go struct field NodeSpec.spec.unschedulable of type bool"
    );
    let sts = json!({"metadata": {"name": "s"}, "spec": {"replicas": "3"}});
    assert_eq!(
        check(&def("StatefulSet"), &sts).unwrap_err().json_message(),
        "json: cannot unmarshal string into Go struct field StatefulSetSpec.spec.replicas of type int32"
    );
    // A value the schema cannot place is still refused, in serde's words.
    let secret = json!({"metadata": {"name": "s"}, "data": {"k": "not base64!"}});
    assert!(check(&def("Secret"), &secret).is_err());
}

#[test]
fn server_side_apply_words_it_its_own_way() {
    let m = check(&def("Pod"), &pod(json!({"spec": {"priority": "high"}}))).unwrap_err();
    assert_eq!(
        m.apply_message(),
        ".spec.priority: expected numeric (int or float), got string"
    );
    let m = check(
        &def("Pod"),
        &pod(json!({"spec": {"containers": [{"name": "a", "image": 5}]}})),
    )
    .unwrap_err();
    assert_eq!(
        m.apply_message(),
        ".spec.containers[0].image: expected string, got number"
    );
}

#[test]
fn an_eviction_body_is_checked_too() {
    let body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"},
        "deleteOptions": {"gracePeriodSeconds": "soon"}});
    let err = on_eviction(&body).unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            400,
            "Eviction in version \"v1\" cannot be handled as a Eviction: json: cannot unmarshal string into Go struct field DeleteOptions.deleteOptions.gracePeriodSeconds of type int64"
        )
    );
    assert_eq!(on_eviction(&json!({"metadata": {"name": "p"}})), Ok(()));
}
