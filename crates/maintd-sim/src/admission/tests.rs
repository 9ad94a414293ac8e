//! Policies evaluated as the API server evaluates them: which requests they
//! match, what their CEL decides, and the errors a denial gives.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::*;
use crate::state::{SimConfig, SimState};

/// A policy object with a uid of its own (compiled policies are cached by
/// uid across every test of the process).
fn policy(name: &str, spec: Value) -> Value {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let uid = format!("admission-test-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    json!({"metadata": {"name": name, "uid": uid}, "spec": spec})
}

fn binding(name: &str, policy: &str, actions: &[&str]) -> Value {
    json!({"metadata": {"name": name}, "spec": {"policyName": policy, "validationActions": actions}})
}

/// A store holding `policy` bound once with Deny, and the node `ns`.
fn store_with(spec: Value) -> Store {
    let mut s = Store::new(16);
    s.insert(&policies(), policy("p", spec)).expect("policy");
    s.insert(&bindings(), binding("b", "p", &["Deny"]))
        .expect("binding");
    s
}

fn node_rules() -> Value {
    json!({"resourceRules": [{
        "apiGroups": [""], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["nodes"],
    }]})
}

fn user(node: Option<&str>) -> UserInfo {
    let mut u = UserInfo {
        username: "system:serviceaccount:maintd:maintd".into(),
        ..UserInfo::default()
    };
    if let Some(n) = node {
        u.extra
            .insert(crate::auth::NODE_NAME_EXTRA.into(), vec![n.into()]);
    }
    u
}

fn node(name: &str, unschedulable: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"a": "1"}},
           "spec": {"unschedulable": unschedulable}})
}

/// Admits an UPDATE of node `name` (unschedulable false → true) by a user
/// whose token names `claim`.
fn update_node(store: &Store, name: &str, sub: &str, claim: Option<&str>) -> Result<(), ApiError> {
    let sim = SimState::new(SimConfig::default());
    let def = sim.store().resource(&Gr::nodes()).expect("nodes served");
    let (old, new) = (node(name, false), node(name, true));
    let u = user(claim);
    admit(
        store,
        &Request {
            operation: Operation::Update,
            def: &def,
            subresource: sub,
            namespace: "",
            name,
            object: Some(&new),
            old_object: Some(&old),
            user: &u,
        },
    )
}

const OWN_NODE: &str =
    "request.userInfo.extra['authentication.kubernetes.io/node-name'][0] == object.metadata.name";

#[test]
fn a_false_validation_denies_with_its_message_and_the_api_servers_words() {
    let s = store_with(json!({
        "matchConstraints": node_rules(),
        "validations": [{"expression": OWN_NODE, "message": "only your own node"}],
    }));
    assert!(update_node(&s, "n1", "", Some("n1")).is_ok());
    let err = update_node(&s, "n2", "", Some("n1")).unwrap_err();
    assert_eq!((err.code, err.reason), (422, "Invalid"));
    assert_eq!(
        err.message,
        "nodes \"n2\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied \
         request: only your own node"
    );
}

#[test]
fn reason_forbidden_is_a_403_and_message_expression_wins_over_message() {
    let s = store_with(json!({
        "matchConstraints": node_rules(),
        "validations": [{
            "expression": OWN_NODE, "reason": "Forbidden", "message": "static",
            "messageExpression": "'node ' + object.metadata.name + ' is not yours'",
        }],
    }));
    let err = update_node(&s, "n2", "", Some("n1")).unwrap_err();
    assert_eq!((err.code, err.reason), (403, "Forbidden"));
    assert!(
        err.message
            .ends_with("denied request: node n2 is not yours"),
        "{}",
        err.message
    );
}

#[test]
fn resource_rules_match_subresources_only_when_named() {
    let deny_all = |resources: Value| {
        store_with(json!({
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": resources,
            }]},
            "validations": [{"expression": "false"}],
        }))
    };
    let cases = [
        (json!(["nodes"]), "", false),
        (json!(["nodes"]), "status", true),
        (json!(["nodes/status"]), "", true),
        (json!(["nodes/status"]), "status", false),
        (json!(["nodes/*"]), "status", false),
        (json!(["*/*"]), "status", false),
        (json!(["pods"]), "", true),
    ];
    for (resources, sub, admitted) in cases {
        let s = deny_all(resources.clone());
        assert_eq!(
            update_node(&s, "n1", sub, Some("n1")).is_ok(),
            admitted,
            "{resources} on subresource {sub:?}"
        );
    }
}

#[test]
fn excluded_rules_operations_and_bindings_without_deny_do_not_apply() {
    let mut rules = node_rules();
    rules["excludeResourceRules"] = json!([{
        "apiGroups": [""], "apiVersions": ["*"], "operations": ["*"], "resources": ["nodes"],
        "resourceNames": ["n2"],
    }]);
    let s =
        store_with(json!({"matchConstraints": rules, "validations": [{"expression": "false"}]}));
    assert!(update_node(&s, "n1", "", None).is_err());
    assert!(update_node(&s, "n2", "", None).is_ok(), "excluded by name");

    let mut create_only = node_rules();
    create_only["resourceRules"][0]["operations"] = json!(["CREATE"]);
    let s = store_with(
        json!({"matchConstraints": create_only, "validations": [{"expression": "false"}]}),
    );
    assert!(
        update_node(&s, "n1", "", None).is_ok(),
        "an UPDATE is not a CREATE"
    );

    let mut s = Store::new(16);
    s.insert(
        &policies(),
        policy(
            "p",
            json!({"matchConstraints": node_rules(), "validations": [{"expression": "false"}]}),
        ),
    )
    .expect("policy");
    s.insert(&bindings(), binding("b", "p", &["Warn", "Audit"]))
        .expect("binding");
    assert!(
        update_node(&s, "n1", "", None).is_ok(),
        "Warn and Audit do not deny"
    );
}

#[test]
fn a_false_match_condition_skips_the_policy() {
    let s = store_with(json!({
        "matchConstraints": node_rules(),
        "matchConditions": [{"name": "agent", "expression": "request.userInfo.username.startsWith('system:serviceaccount:maintd:')"}],
        "validations": [{"expression": "false", "message": "never"}],
    }));
    assert!(update_node(&s, "n1", "", None).is_err());
    let mut other = Store::new(16);
    other
        .insert(
            &policies(),
            policy(
                "p",
                json!({
                    "matchConstraints": node_rules(),
                    "matchConditions": [{"name": "admin", "expression": "request.userInfo.username == 'kubernetes-admin'"}],
                    "validations": [{"expression": "false"}],
                }),
            ),
        )
        .expect("policy");
    other
        .insert(&bindings(), binding("b", "p", &["Deny"]))
        .expect("binding");
    assert!(update_node(&other, "n1", "", None).is_ok());
}

#[test]
fn an_error_denies_under_fail_and_is_ignored_under_ignore() {
    // Without the claim, `extra` is left out of userInfo: reading it fails.
    let spec = |policy: &str| {
        json!({
            "failurePolicy": policy,
            "matchConstraints": node_rules(),
            "validations": [{"expression": OWN_NODE}],
        })
    };
    let err = update_node(&store_with(spec("Fail")), "n1", "", None).unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message
            .contains(&format!("expression '{OWN_NODE}' resulted in error")),
        "{}",
        err.message
    );
    assert!(update_node(&store_with(spec("Ignore")), "n1", "", None).is_ok());
}

#[test]
fn a_failing_variable_fails_only_the_validations_that_read_it() {
    let s = store_with(json!({
        "matchConstraints": node_rules(),
        "variables": [
            {"name": "claim", "expression": "request.userInfo.extra['authentication.kubernetes.io/node-name'][0]"},
            {"name": "mine", "expression": "variables.claim == object.metadata.name"},
        ],
        "validations": [
            {"expression": "object.metadata.labels == oldObject.metadata.labels", "message": "labels"},
            {"expression": "variables.mine", "message": "not yours"},
        ],
    }));
    assert!(update_node(&s, "n1", "", Some("n1")).is_ok());
    let err = update_node(&s, "n2", "", Some("n1")).unwrap_err();
    assert!(
        err.message.ends_with("denied request: not yours"),
        "{}",
        err.message
    );
    let err = update_node(&s, "n1", "", None).unwrap_err();
    assert!(
        err.message.contains("composited variable") && err.message.contains("fails to evaluate"),
        "{}",
        err.message
    );
}

#[test]
fn policies_with_parameters_are_refused() {
    assert!(check_policy(&json!({"spec": {"paramKind": {"kind": "ConfigMap"}}})).is_err());
    assert!(check_policy(&json!({"spec": {}})).is_ok());
}
