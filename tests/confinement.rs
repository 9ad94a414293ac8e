//! Each node's agent confined to its node: with deploy/'s ServiceAccount,
//! roles and node-confinement policy installed, a token bound to node-a can
//! do to node-a what the agent does, and nothing of it to node-b; every
//! refusal reads as the API server's.

use crate::common;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use maintd::testbed;
use maintd_sim::SimCluster;
use serde_json::{Value, json};

use common::endpoint::{EndpointAgent, request};
use common::kubectl::Kubectl;
use common::{create_pod, eventually, raw_as, scenario, taint, two_nodes};
use k8s_openapi::api::rbac::v1::ClusterRole;

/// node-a and node-b, one pod on each, deploy/'s rights installed, and
/// node-a's agent client.
async fn cluster() -> (SimCluster, kube::Client) {
    let sim = two_nodes().await;
    for node in ["node-a", "node-b"] {
        create_pod(
            &sim.client(),
            "default",
            &format!("app-{node}"),
            node,
            json!({}),
        )
        .await;
    }
    let agent = testbed::agent_client(&sim, "node-a");
    (sim, agent)
}

/// The API server's refusal of `result`: (code, reason, message).
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String, String) {
    match result {
        Err(kube::Error::Api(s)) => (s.code, s.reason, s.message),
        other => panic!("expected the API server to refuse, got {other:?}"),
    }
}

async fn patch_node(agent: &kube::Client, node: &str, patch: Value) -> Result<Node, kube::Error> {
    Api::<Node>::all(agent.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// Adds taint `maintd.io/draining` as the agent does: the list as read,
/// plus its own, guarded by the resourceVersion read, read again when the
/// node changed meanwhile (the node lifecycle controller answers a cordon
/// with a taint of its own).
async fn add_taint(agent: &kube::Client, node: &str) -> Result<Node, kube::Error> {
    let mut attempt = 0;
    loop {
        match add_taint_once(agent, node).await {
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < 5 => attempt += 1,
            other => return other,
        }
    }
}

async fn add_taint_once(agent: &kube::Client, node: &str) -> Result<Node, kube::Error> {
    let current = Api::<Node>::all(agent.clone()).get(node).await?;
    let mut taints = current
        .spec
        .and_then(|s| s.taints)
        .map(|t| serde_json::to_value(t).unwrap())
        .unwrap_or(json!([]));
    taints
        .as_array_mut()
        .unwrap()
        .push(json!({"key": "maintd.io/draining", "effect": "NoSchedule"}));
    let rv = current.metadata.resource_version;
    patch_node(
        agent,
        node,
        json!({"metadata": {"resourceVersion": rv}, "spec": {"taints": taints}}),
    )
    .await
}

fn denied(policy_words: &str) -> String {
    format!(
        "ValidatingAdmissionPolicy 'maintd-node-confinement' with binding \
         'maintd-node-confinement' denied request: {policy_words}"
    )
}

#[tokio::test]
async fn an_agent_cordons_and_taints_its_own_node_and_no_other() {
    let (sim, agent) = cluster().await;
    let cordon = json!({"spec": {"unschedulable": true}});
    patch_node(&agent, "node-a", cordon.clone())
        .await
        .expect("node-a's agent cordons node-a");
    add_taint(&agent, "node-a")
        .await
        .expect("and taints it with its own taint");

    let refused = [
        patch_node(&agent, "node-b", cordon).await,
        add_taint(&agent, "node-b").await,
    ];
    for result in refused {
        let (code, reason, message) = refusal(result);
        assert_eq!((code, reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            message,
            format!(
                "nodes \"node-b\" is forbidden: {}",
                denied("maintd on node node-a may change only its own Node, not node-b")
            )
        );
    }
    let b: Node = Api::all(sim.client()).get("node-b").await.unwrap();
    let spec = b.spec.unwrap_or_default();
    assert_eq!(spec.unschedulable, None, "node-b was not cordoned");
    assert_eq!(spec.taints, None, "node-b was not tainted");
}

#[tokio::test]
async fn on_its_own_node_an_agent_changes_only_what_maintd_changes() {
    let (sim, agent) = cluster().await;
    let cases = [
        (
            json!({"metadata": {"labels": {"role": "ingress"}}}),
            "maintd may not change its Node's labels",
        ),
        (
            json!({"metadata": {"annotations": {"example.io/x": "1"}}}),
            "maintd may change only its own annotations (maintd.io/cordoned, maintd.io/reboot-turn, maintd.io/turns-done) on its Node",
        ),
        (
            json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoExecute"}]}}),
            "maintd may add or remove only its own taint (maintd.io/draining) on its Node",
        ),
    ];
    for (patch, words) in cases {
        let (code, _, message) = refusal(patch_node(&agent, "node-a", patch.clone()).await);
        assert_eq!(code, 403, "{patch}");
        assert!(message.ends_with(&denied(words)), "{patch}: {message}");
    }
    // An operator's taint stays when the agent adds and removes its own.
    let admin_taint =
        json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}});
    patch_node(&sim.client(), "node-a", admin_taint)
        .await
        .unwrap();
    let both = json!({"spec": {"taints": [
        {"key": "dedicated", "value": "db", "effect": "NoSchedule"},
        {"key": "maintd.io/draining", "effect": "NoSchedule"},
    ]}});
    patch_node(&agent, "node-a", both)
        .await
        .expect("adding its own taint beside another");
    let dropped =
        json!({"spec": {"taints": [{"key": "maintd.io/draining", "effect": "NoSchedule"}]}});
    refusal(patch_node(&agent, "node-a", dropped).await);
    for key in [
        "maintd.io/cordoned",
        "maintd.io/reboot-turn",
        "maintd.io/turns-done",
    ] {
        let annotate = json!({"metadata": {"annotations": {key: "x"}}});
        patch_node(&agent, "node-a", annotate)
            .await
            .expect("its own annotation");
    }
    // A lookalike is someone else's.
    let lookalike = json!({"metadata": {"annotations": {"maintd.io/turns-done-x": "x"}}});
    refusal(patch_node(&agent, "node-a", lookalike).await);
}

#[tokio::test]
async fn an_agent_sets_its_condition_on_its_own_node_only_and_no_other_condition() {
    let (_sim, agent) = cluster().await;
    let nodes: Api<Node> = Api::all(agent.clone());
    let condition = |kind: &str| {
        json!({"apiVersion": "v1", "kind": "Node", "status": {"conditions": [{
            "type": kind, "status": "True", "reason": "Draining", "message": "m",
            "lastTransitionTime": "2026-11-25T10:00:00Z",
        }]}})
    };
    let apply = PatchParams::apply("maintd").force();
    let mine = nodes
        .patch_status("node-a", &apply, &Patch::Apply(condition("MaintdDrain")))
        .await
        .expect("its own condition on its own node");
    let types: Vec<String> = mine
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert!(types.contains(&"Ready".to_string()) && types.contains(&"MaintdDrain".to_string()));
    // KEP-5683's lifecycle conditions are the agent's to write too.
    for kind in [
        "MaintenancePlanned",
        "MaintenanceInProgress",
        "DrainInProgress",
        "Drained",
        "GracefulNodeShutdownInProgress",
    ] {
        nodes
            .patch_status("node-a", &apply, &Patch::Apply(condition(kind)))
            .await
            .unwrap_or_else(|e| panic!("{kind} on its own node: {e}"));
    }

    let (code, _, message) = refusal(
        nodes
            .patch_status("node-b", &apply, &Patch::Apply(condition("MaintdDrain")))
            .await,
    );
    assert_eq!(code, 403);
    assert!(
        message.contains("may change only its own Node, not node-b"),
        "{message}"
    );
    for other in ["DiskPressure", "Ready", "DrainsInProgress"] {
        let (code, _, message) = refusal(
            nodes
                .patch_status("node-a", &apply, &Patch::Apply(condition(other)))
                .await,
        );
        assert_eq!(code, 403, "{other}: {message}");
    }
    let (code, _, message) = refusal(
        nodes
            .patch_status("node-a", &apply, &Patch::Apply(condition("DiskPressure")))
            .await,
    );
    assert_eq!(code, 403);
    assert!(
        message.ends_with(&denied(
            "maintd may set only its own condition types on its Node"
        )),
        "{message}"
    );
}

#[tokio::test]
async fn an_agent_deletes_pods_on_its_own_node_only() {
    let (sim, agent) = cluster().await;
    let pods: Api<Pod> = Api::namespaced(agent.clone(), "default");
    let (code, reason, message) =
        refusal(pods.delete("app-node-b", &DeleteParams::default()).await);
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        message,
        format!(
            "pods \"app-node-b\" is forbidden: {}",
            denied(
                "maintd on node node-a may delete only pods bound to its own node, not default/app-node-b"
            )
        )
    );
    assert!(
        Api::<Pod>::namespaced(sim.client(), "default")
            .get_opt("app-node-b")
            .await
            .unwrap()
            .is_some()
    );
    pods.delete("app-node-a", &DeleteParams::default())
        .await
        .expect("a pod on its own node");
}

#[tokio::test]
async fn an_agent_writes_its_own_nodedrain_only() {
    let (sim, agent) = cluster().await;
    install_nodedrain_crd(&sim).await;
    let drains: Api<maintd::api::nodedrain::NodeDrain> = Api::all(agent.clone());
    let body = |node: &str| json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeDrain", "metadata": {"name": node}, "spec": {}});
    let apply = PatchParams::apply("maintd").force();
    drains
        .patch("node-a", &apply, &Patch::Apply(body("node-a")))
        .await
        .expect("its own NodeDrain is created by apply");
    let (code, _, message) = refusal(
        drains
            .patch("node-b", &apply, &Patch::Apply(body("node-b")))
            .await,
    );
    assert_eq!(code, 403);
    assert_eq!(
        message,
        format!(
            "nodedrains.maintd.io \"node-b\" is forbidden: {}",
            denied("maintd on node node-a may write only the NodeDrain node-a, not node-b")
        )
    );
    assert!(
        Api::<maintd::api::nodedrain::NodeDrain>::all(sim.client())
            .get_opt("node-b")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn an_agent_takes_and_gives_back_reboot_slots_only_as_itself() {
    let (sim, agent) = cluster().await;
    let as_a = maintd::coordination::RebootSlots::new(
        agent.clone(),
        testbed::NAMESPACE,
        "workers",
        1,
        std::time::Duration::from_secs(600),
    );
    // As itself: taken and given back.
    assert!(matches!(
        as_a.try_acquire("node-a").await.expect("node-a's slot"),
        maintd::coordination::Acquisition::Acquired(_)
    ));
    assert!(as_a.release("node-a").await.expect("given back"));

    // Claiming to be node-b: refused.
    let err = as_a
        .try_acquire("node-b")
        .await
        .expect_err("node-a's agent cannot take a slot as node-b");
    assert!(
        err.to_string()
            .contains("may hold a Lease only as node-a, and give back only its own"),
        "{err}"
    );

    // node-b's slot cannot be given back by node-a.
    let as_b = maintd::coordination::RebootSlots::new(
        testbed::agent_client(&sim, "node-b"),
        testbed::NAMESPACE,
        "workers",
        1,
        std::time::Duration::from_secs(600),
    );
    assert!(matches!(
        as_b.try_acquire("node-b").await.unwrap(),
        maintd::coordination::Acquisition::Acquired(_)
    ));
    let err = as_a
        .release("node-b")
        .await
        .expect_err("node-a cannot give back node-b's slot");
    assert!(err.to_string().contains("forbidden"), "{err}");
    assert_eq!(
        as_b.holders("node-b").await.unwrap().len(),
        1,
        "node-b still holds its slot"
    );
}

#[tokio::test]
async fn a_token_bound_to_no_node_is_refused_every_write() {
    let (sim, _) = cluster().await;
    testbed::install_rights(&sim, false).unwrap();
    let token = sim.service_account_token(testbed::NAMESPACE, testbed::SERVICE_ACCOUNT, None);
    let unbound = SimCluster::build(sim.client_config_as(&token));
    let (code, reason, message) =
        refusal(patch_node(&unbound, "node-a", json!({"spec": {"unschedulable": true}})).await);
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert!(
        message.contains("maintd's ServiceAccount token names no node"),
        "{message}"
    );
    // Reads are not confined.
    Api::<Node>::all(unbound)
        .get("node-b")
        .await
        .expect("reads stay open");
}

#[tokio::test]
async fn what_roles_do_not_grant_is_refused_as_the_api_server_refuses_it() {
    let (sim, _) = cluster().await;
    let token = testbed::agent_token(&sim, "node-a");
    let cases = [
        (
            "DELETE",
            "/api/v1/nodes/node-a",
            "cannot delete resource \"nodes\" in API group \"\" at the cluster scope",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/secrets",
            "cannot list resource \"secrets\" in API group \"\" in the namespace \"default\"",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/default/pods",
            "cannot deletecollection resource \"pods\" in API group \"\" in the namespace \"default\"",
        ),
        (
            "PUT",
            "/api/v1/nodes/node-a/status",
            "cannot update resource \"nodes/status\" in API group \"\" at the cluster scope",
        ),
    ];
    for (method, path, words) in cases {
        let (code, status) = raw_as(
            &sim,
            Some(&token),
            method,
            path,
            "application/json",
            b"{}".to_vec(),
        )
        .await;
        assert_eq!(code, 403, "{method} {path}: {status}");
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "Forbidden");
        let message = status["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!(
                "User \"system:serviceaccount:maintd:maintd\" {words}"
            )),
            "{method} {path}: {message}"
        );
    }
    let (code, _) = raw_as(
        &sim,
        Some("not-a-token"),
        "GET",
        "/api/v1/nodes",
        "application/json",
        vec![],
    )
    .await;
    assert_eq!(code, 401);
}

#[tokio::test]
async fn kubectl_acting_as_node_as_agent_is_refused_node_b_and_says_why() {
    let (sim, _) = cluster().await;
    testbed::install_rights(&sim, false).unwrap();
    let as_a = Kubectl::impersonating(
        &sim,
        "system:serviceaccount:maintd:maintd",
        &[("authentication.kubernetes.io/node-name", "node-a")],
    );
    as_a.ok(&["cordon", "node-a"]).await;
    // kubectl cordon exits 0 when its patch is refused: the words and the
    // Node itself say what happened.
    let (_, _, err) = as_a.run(&["cordon", "node-b"]).await;
    assert!(
        err.contains("nodes \"node-b\" is forbidden")
            && err.contains("maintd on node node-a may change only its own Node, not node-b"),
        "{err}"
    );
    let (ok, _, err) = as_a.run(&["label", "node", "node-a", "role=db"]).await;
    assert!(!ok);
    assert!(
        err.contains("maintd may not change its Node's labels"),
        "{err}"
    );
    let (ok, _, err) = as_a
        .run(&["-n", "default", "delete", "pod", "app-node-b"])
        .await;
    assert!(!ok);
    assert!(
        err.contains("may delete only pods bound to its own node"),
        "{err}"
    );
    let node_b = Api::<Node>::all(sim.client()).get("node-b").await.unwrap();
    assert_ne!(node_b.spec.and_then(|s| s.unschedulable), Some(true));
    // The same kubectl as the admin is not confined.
    Kubectl::new(&sim).ok(&["cordon", "node-b"]).await;
}

async fn install_nodedrain_crd(sim: &SimCluster) {
    let crds: Api<CustomResourceDefinition> = Api::all(sim.client());
    crds.create(
        &PostParams::default(),
        &maintd::api::nodedrain_crd().unwrap(),
    )
    .await
    .unwrap();
}

/// The ClusterRole as an older deploy/ had it: NodeDrains without `create`.
async fn drop_nodedrain_create(sim: &SimCluster) {
    let roles = Api::<ClusterRole>::all(sim.client());
    let mut role = roles.get("maintd").await.unwrap();
    for rule in role.rules.iter_mut().flatten() {
        if rule
            .resources
            .as_ref()
            .is_some_and(|r| r == &["nodedrains"])
        {
            rule.verbs.retain(|v| v != "create");
        }
    }
    roles
        .replace("maintd", &PostParams::default(), &role)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_missing_a_rule_is_said_in_words_in_readyz_and_the_status_until_it_is_granted() {
    let sim = scenario("small.yaml").await;
    install_nodedrain_crd(&sim).await;
    testbed::install_rights(&sim, false).unwrap();
    drop_nodedrain_create(&sim).await;
    let agent = EndpointAgent::start(&sim, "node-a").await;
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("reboot")).await;

    let readonly = agent.readonly;
    let said = |text: &str| {
        text.contains("the API server refused PATCH /apis/maintd.io/")
            && text.contains("cannot create resource \"nodedrains\" in API group \"maintd.io\"")
            && text.contains("ClusterRole maintd")
            && !text.contains("ErrorResponse")
    };
    eventually(
        "/readyz says which call is refused and what to fix",
        || async move {
            let (code, body) = request(readonly, "GET", "/readyz", "").await;
            let why: Value = serde_json::from_str(&body).unwrap_or_default();
            code == 503 && said(why["why"].as_str().unwrap_or_default())
        },
    )
    .await;
    let status = agent.status().await;
    let last_error = status["drain"]["last_error"].as_str().unwrap_or_default();
    assert!(said(last_error), "{status:#}");
    let refusals = status["api_refusals"].as_array().unwrap();
    assert_eq!(
        refusals.len(),
        1,
        "one refusal, however often retried: {status:#}"
    );

    // The drain itself goes on: the refusal is of its status object only.
    agent
        .wait_status("node-a drained", |s| s["drain"]["phase"] == "Drained")
        .await;

    // Granted again (kubectl apply -k deploy/): the NodeDrain is written and
    // the agent is ready.
    let roles = Api::<ClusterRole>::all(sim.client());
    roles
        .delete("maintd", &DeleteParams::default())
        .await
        .unwrap();
    testbed::install_rights(&sim, false).unwrap();
    eventually("the NodeDrain is written once granted", || async {
        let path = "/apis/maintd.io/v1alpha1/nodedrains/node-a";
        raw_as(&sim, None, "GET", path, "application/json", vec![])
            .await
            .0
            == 200
    })
    .await;
    eventually("ready again", || async move {
        request(readonly, "GET", "/readyz", "").await.0 == 200
    })
    .await;
    agent.stop().await;
}

#[tokio::test]
async fn an_agent_holds_medik8s_lease_of_its_own_node_only_and_only_as_node_maintenance() {
    let (sim, agent) = cluster().await;
    testbed::install_rights(&sim, true).unwrap();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(agent.clone(), "medik8s-leases");
    let lease = |name: &str, holder: &str| {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "medik8s-leases"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3600},
        }))
        .unwrap()
    };
    let pp = kube::api::PostParams::default();
    for (name, holder) in [
        ("node-node-b", "node-maintenance"),
        ("node-node-a", "node-healthcheck"),
        ("node-node-a", "node-b"),
    ] {
        let (code, _, message) = refusal(leases.create(&pp, &lease(name, holder)).await);
        assert_eq!(code, 403, "{name} as {holder}: {message}");
    }
    let mut mine = leases
        .create(&pp, &lease("node-node-a", "node-maintenance"))
        .await
        .expect("its own node's, as node-maintenance");
    // Given back: its holder cleared.
    mine.spec.as_mut().unwrap().holder_identity = None;
    leases
        .replace("node-node-a", &pp, &mine)
        .await
        .expect("given back");
}
