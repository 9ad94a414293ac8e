//! RBAC decisions from roles and bindings held in a store, and the verbs and
//! refusals the API server gives.

use serde_json::{Value, json};

use super::*;

fn rbac(plural: &str) -> Gr {
    Gr::new("rbac.authorization.k8s.io", plural)
}

fn sa_user(ns: &str, name: &str) -> UserInfo {
    UserInfo {
        username: format!("system:serviceaccount:{ns}:{name}"),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".into(),
        ],
        ..UserInfo::default()
    }
}

fn put(store: &mut Store, plural: &str, obj: Value) {
    store.insert(&rbac(plural), obj).expect("stored");
}

/// A store where ServiceAccount `maintd/agent` has: nodes get/patch
/// cluster-wide, the Lease `slots` by name in `maintd`, and pods/eviction
/// create; group `ops` may list pods in `maintd` through a RoleBinding to a
/// ClusterRole; and `/metrics` get is granted to everyone authenticated.
fn store() -> Store {
    let mut s = Store::new(16);
    put(
        &mut s,
        "clusterroles",
        json!({"metadata": {"name": "agent"}, "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        ]}),
    );
    put(
        &mut s,
        "clusterrolebindings",
        json!({"metadata": {"name": "agent"},
            "roleRef": {"kind": "ClusterRole", "name": "agent"},
            "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "maintd"}]}),
    );
    put(
        &mut s,
        "roles",
        json!({"metadata": {"name": "slots", "namespace": "maintd"}, "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": ["slots"], "verbs": ["get", "update"]},
        ]}),
    );
    put(
        &mut s,
        "rolebindings",
        // No namespace on the subject: the binding's own.
        json!({"metadata": {"name": "slots", "namespace": "maintd"},
            "roleRef": {"kind": "Role", "name": "slots"},
            "subjects": [{"kind": "ServiceAccount", "name": "agent"}]}),
    );
    put(
        &mut s,
        "clusterroles",
        json!({"metadata": {"name": "pod-reader"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        ]}),
    );
    put(
        &mut s,
        "rolebindings",
        json!({"metadata": {"name": "ops", "namespace": "maintd"},
            "roleRef": {"kind": "ClusterRole", "name": "pod-reader"},
            "subjects": [{"kind": "Group", "name": "ops"}]}),
    );
    s
}

fn attrs(verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> Attributes {
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    Attributes {
        verb: verb.into(),
        resource: Some(ResourceAttributes {
            group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: ns.into(),
            name: name.into(),
        }),
        path: String::new(),
    }
}

#[test]
fn verbs_are_read_from_method_name_and_watch_as_the_api_server_does() {
    use http::Method;
    let cases = [
        (Method::GET, true, false, "get"),
        (Method::GET, false, false, "list"),
        (Method::GET, false, true, "watch"),
        (Method::GET, true, true, "watch"),
        (Method::HEAD, true, false, "get"),
        (Method::POST, false, false, "create"),
        (Method::PUT, true, false, "update"),
        (Method::PATCH, true, false, "patch"),
        (Method::DELETE, true, false, "delete"),
        (Method::DELETE, false, false, "deletecollection"),
    ];
    for (method, named, watch, want) in cases {
        assert_eq!(
            verb_of(&method, named, watch),
            want,
            "{method} named={named} watch={watch}"
        );
    }
}

#[test]
fn a_field_selector_on_the_name_names_the_object() {
    assert_eq!(name_from_field_selector("metadata.name=n1"), Some("n1"));
    assert_eq!(
        name_from_field_selector("spec.nodeName=x, metadata.name==n2"),
        Some("n2")
    );
    assert_eq!(name_from_field_selector("spec.nodeName=n1"), None);
}

#[test]
fn rules_allow_exactly_what_they_name() {
    let s = store();
    let agent = sa_user("maintd", "agent");
    let cases = [
        // ClusterRoleBinding: cluster-wide, any namespace, verbs as listed.
        (attrs("get", "", "nodes", "", "n1"), true),
        (attrs("patch", "", "nodes", "", "n1"), true),
        (attrs("list", "", "nodes", "", ""), false),
        (attrs("update", "", "nodes", "", "n1"), false),
        // A subresource is its own resource: nodes does not grant nodes/status.
        (attrs("patch", "", "nodes/status", "", "n1"), false),
        (attrs("create", "", "pods/eviction", "web", "p"), true),
        // Group must match: nodes in another group are not these nodes.
        (attrs("get", "example.io", "nodes", "", "n1"), false),
        // resourceNames: only the named object, and never a collection.
        (
            attrs("get", "coordination.k8s.io", "leases", "maintd", "slots"),
            true,
        ),
        (
            attrs("get", "coordination.k8s.io", "leases", "maintd", "other"),
            false,
        ),
        (
            attrs("get", "coordination.k8s.io", "leases", "maintd", ""),
            false,
        ),
        // A RoleBinding grants in its namespace only.
        (
            attrs("get", "coordination.k8s.io", "leases", "other", "slots"),
            false,
        ),
    ];
    for (a, want) in cases {
        assert_eq!(
            authorize(&s, &agent, &a).is_ok(),
            want,
            "{} {:?}",
            a.verb,
            a.resource
        );
    }
}

#[test]
fn groups_masters_and_other_service_accounts_are_told_apart() {
    let s = store();
    let mut ops = sa_user("tools", "x");
    ops.groups.push("ops".into());
    assert!(authorize(&s, &ops, &attrs("list", "", "pods", "maintd", "")).is_ok());
    assert!(authorize(&s, &ops, &attrs("list", "", "pods", "default", "")).is_err());
    // Same name, other namespace: not the bound ServiceAccount.
    let impostor = sa_user("default", "agent");
    assert!(authorize(&s, &impostor, &attrs("get", "", "nodes", "", "n1")).is_err());
    let admin = UserInfo {
        username: "kubernetes-admin".into(),
        groups: vec![MASTERS.into()],
        ..UserInfo::default()
    };
    assert!(authorize(&s, &admin, &attrs("deletecollection", "", "nodes", "", "")).is_ok());
}

#[test]
fn discovery_is_open_to_the_authenticated_and_other_paths_need_a_rule() {
    let s = store();
    let path = |verb: &str, p: &str| Attributes {
        verb: verb.into(),
        resource: None,
        path: p.into(),
    };
    let someone = sa_user("default", "nobody");
    assert!(authorize(&s, &someone, &path("get", "/apis/maintd.io")).is_ok());
    assert!(authorize(&s, &someone, &path("get", "/version")).is_ok());
    assert!(authorize(&s, &someone, &path("get", "/metrics")).is_err());
    assert!(authorize(&s, &sa_user("maintd", "agent"), &path("get", "/metrics")).is_ok());
    let err = authorize(&s, &someone, &path("get", "/metrics")).unwrap_err();
    assert_eq!(
        err.message,
        "forbidden: User \"system:serviceaccount:default:nobody\" cannot get path \"/metrics\""
    );
}

#[test]
fn a_refusal_reads_as_the_api_servers() {
    let s = store();
    let agent = sa_user("maintd", "agent");
    let err = authorize(&s, &agent, &attrs("update", "", "nodes/status", "", "n1")).unwrap_err();
    assert_eq!(err.code, 403);
    assert_eq!(err.reason, "Forbidden");
    assert_eq!(
        err.message,
        "nodes \"n1\" is forbidden: User \"system:serviceaccount:maintd:agent\" cannot update \
         resource \"nodes/status\" in API group \"\" at the cluster scope"
    );
    let err = authorize(
        &s,
        &agent,
        &attrs("create", "maintd.io", "nodedrains", "", "n1"),
    )
    .unwrap_err();
    assert_eq!(
        err.message,
        "nodedrains.maintd.io \"n1\" is forbidden: User \"system:serviceaccount:maintd:agent\" \
         cannot create resource \"nodedrains\" in API group \"maintd.io\" at the cluster scope"
    );
    let err = authorize(&s, &agent, &attrs("list", "", "pods", "web", "")).unwrap_err();
    assert_eq!(
        err.message,
        "pods is forbidden: User \"system:serviceaccount:maintd:agent\" cannot list resource \
         \"pods\" in API group \"\" in the namespace \"web\""
    );
}
