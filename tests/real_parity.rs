//! The simulator held to the real API server. The same requests the agent
//! makes (its client's calls and its watches), with the agent's own token
//! bound to its node and deploy/'s rights and node-confinement policy, go
//! to the simulator and to Kubernetes 1.37 set up alike; what each
//! answers — the status code, the refusal's reason and words — must be the
//! same. Where the two differ on purpose, the case says why.

use crate::common;

use std::time::Duration;

use common::real::{PATIENCE, Real};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use maintd_sim::SimCluster;
use serde_json::{Value, json};

/// What a cluster answered one request with.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    code: u16,
    /// A refusal's `reason` ("" for a success).
    reason: String,
    /// A refusal's message, with what differs between any two clusters
    /// (uids, resourceVersions) taken out.
    message: String,
    /// Of a refusal's details, each cause's (field, message).
    causes: Vec<(String, String)>,
}

/// One of the two clusters, set up alike: nodes `<p>-a` and `<p>-b`, a pod
/// on each (and `guarded`, behind a budget that allows no disruption, on
/// a), deploy/'s rights, maintd's CRDs and medik8s'.
enum Cluster {
    Sim(SimCluster),
    Real(Real),
}

const P: &str = "parity";

fn a() -> String {
    format!("{P}-a")
}
fn b() -> String {
    format!("{P}-b")
}

impl Cluster {
    async fn admin(&self) -> kube::Client {
        match self {
            Cluster::Sim(s) => s.client(),
            Cluster::Real(r) => r.admin().await,
        }
    }

    async fn agent(&self, node: &str) -> kube::Client {
        match self {
            Cluster::Sim(s) => maintd::testbed::agent_client(s, node),
            Cluster::Real(r) => r.agent_client(node).await,
        }
    }

    async fn set_up() -> (Cluster, Cluster) {
        let sim = common::sim().await;
        let client = sim.client();
        common::install_crds(&client).await;
        maintd::testbed::install_rights(&sim, true).expect("deploy/'s rights");
        let crd = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/medik8s-crd.yaml"),
        )
        .unwrap();
        let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_saphyr::from_str(&crd).unwrap();
        Api::all(client.clone())
            .create(&Default::default(), &crd)
            .await
            .unwrap();
        for ns in [P, "medik8s-leases"] {
            common::create_namespace(&sim, ns).await;
        }
        for n in [a(), b()] {
            let mut node = common::node_json(&n);
            node["metadata"]["labels"]["test"] = json!(P);
            node["status"]["nodeInfo"] = json!({"bootID": format!("{n}-boot-1")});
            let (code, body) = common::raw(
                &sim,
                "POST",
                "/api/v1/nodes",
                "application/json",
                serde_json::to_vec(&node).unwrap(),
            )
            .await;
            assert_eq!(code, 201, "{body}");
        }
        let sim = Cluster::Sim(sim);

        let real = Real::get();
        let admin = real.admin().await;
        real.namespace(&admin, P).await;
        real.namespace(&admin, "medik8s-leases").await;
        for n in [a(), b()] {
            real.node(&admin, &n, json!({"test": P})).await;
        }
        let real = Cluster::Real(real);
        for c in [&sim, &real] {
            c.workload().await;
        }
        (sim, real)
    }

    /// The pods and the budget, created as an admin would, settled.
    async fn workload(&self) {
        let admin = self.admin().await;
        let pods: Api<Pod> = Api::namespaced(admin.clone(), P);
        for (name, node, labels) in [
            ("app-a", a(), json!({})),
            ("app-b", b(), json!({})),
            ("guarded", a(), json!({"app": "guarded"})),
        ] {
            let pod: Pod =
                serde_json::from_value(common::pod_json(P, name, &node, labels)).unwrap();
            pods.create(&Default::default(), &pod).await.unwrap();
        }
        let pdb = json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded", "namespace": P},
            "spec": {"selector": {"matchLabels": {"app": "guarded"}}, "minAvailable": 1},
        });
        let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
            Api::namespaced(admin.clone(), P);
        pdbs.create(&Default::default(), &serde_json::from_value(pdb).unwrap())
            .await
            .unwrap();
        // The disruption controller has counted the guarded pod healthy.
        common::eventually_within("the budget counts its pod", PATIENCE, || {
            let pdbs = pdbs.clone();
            async move {
                pdbs.get("guarded").await.is_ok_and(|p| {
                    let st = serde_json::to_value(p.status).unwrap_or_default();
                    st["currentHealthy"] == 1 && st["disruptionsAllowed"] == 0
                })
            }
        })
        .await;
    }

    /// `req` sent with `client`; what came back.
    async fn ask(client: &kube::Client, req: http::Request<Vec<u8>>) -> Answer {
        let resp = tokio::time::timeout(Duration::from_secs(30), client.send(req.map(Into::into)))
            .await
            .expect("an answer within 30 s")
            .expect("the API server answers");
        let code = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if code < 300 {
            return Answer {
                code,
                reason: String::new(),
                message: String::new(),
                causes: vec![],
            };
        }
        let causes = body["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["field"].as_str().unwrap_or_default().to_string(),
                    normalize(c["message"].as_str().unwrap_or_default()),
                )
            })
            .collect();
        Answer {
            code,
            reason: body["reason"].as_str().unwrap_or_default().to_string(),
            message: normalize(body["message"].as_str().unwrap_or_default()),
            causes,
        }
    }
}

/// A message without what differs between two clusters: uids and
/// resourceVersions.
fn normalize(m: &str) -> String {
    let uid = regex::Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
        .expect("a regex");
    let rv = regex::Regex::new(r"ResourceVersion in object meta: \d+").expect("a regex");
    let m = uid.replace_all(m, "<uid>");
    rv.replace_all(&m, "ResourceVersion in object meta: <rv>")
        .into_owned()
}

fn request(method: &str, path: &str, content_type: &str, body: Value) -> http::Request<Vec<u8>> {
    let bytes = if body.is_null() {
        vec![]
    } else {
        serde_json::to_vec(&body).unwrap()
    };
    http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(bytes)
        .expect("a request")
}

const MERGE: &str = "application/merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";
const JSON: &str = "application/json";

/// The requests, as the agent of node a makes them, in order (some change
/// what later ones see: the cordon, the slot taken).
fn cases() -> Vec<(&'static str, http::Request<Vec<u8>>)> {
    let (a, b) = (a(), b());
    let condition = |kind: &str| {
        json!({"apiVersion": "v1", "kind": "Node", "status": {"conditions": [{
            "type": kind, "status": "True", "reason": "Draining", "message": "m",
            "lastTransitionTime": "2026-11-25T10:00:00Z",
        }]}})
    };
    let event = |about: &str, instance: &str| {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": format!("{about}.{}", instance.trim_start_matches("maintd-")), "namespace": "default"},
            "eventTime": "2026-11-25T10:00:00.000000Z",
            "reportingController": "maintd.io/agent",
            "reportingInstance": instance,
            "action": "Drain", "reason": "DrainStarted", "type": "Normal", "note": "n",
            "regarding": {"apiVersion": "v1", "kind": "Node", "name": about, "uid": about},
        })
    };
    let slot = |holder: &str| {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": format!("maintd-reboot-{P}-{holder}"), "namespace": "maintd",
                         "labels": {"maintd.io/reboot-group": P, "maintd.io/reboot-holder": holder}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 300,
                     "acquireTime": "2026-11-25T10:00:00.000000Z", "renewTime": "2026-11-25T10:00:00.000000Z"},
        })
    };
    let nodedrain = |n: &str| json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeDrain", "metadata": {"name": n}, "spec": {}});
    let eviction = |name: &str, uid: Option<&str>| {
        let mut e = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                           "metadata": {"name": name, "namespace": P}});
        if let Some(uid) = uid {
            e["deleteOptions"] = json!({"preconditions": {"uid": uid}});
        }
        e
    };
    let nodes = "/api/v1/nodes";
    let pods = format!("/api/v1/namespaces/{P}/pods");
    vec![
        // Its views: its node by name, its pods by node, budgets.
        (
            "its node",
            request("GET", &format!("{nodes}/{a}"), JSON, Value::Null),
        ),
        (
            "its node, listed by name",
            request(
                "GET",
                &format!("{nodes}?fieldSelector=metadata.name%3D{a}"),
                JSON,
                Value::Null,
            ),
        ),
        (
            "its pods, by node",
            request(
                "GET",
                &format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{a}"),
                JSON,
                Value::Null,
            ),
        ),
        (
            "budgets",
            request(
                "GET",
                &format!("/apis/policy/v1/namespaces/{P}/poddisruptionbudgets"),
                JSON,
                Value::Null,
            ),
        ),
        (
            "NodeMaintenance objects",
            request(
                "GET",
                "/apis/maintd.io/v1alpha1/nodemaintenances",
                JSON,
                Value::Null,
            ),
        ),
        // Cordon and taint.
        (
            "cordon its node",
            request(
                "PATCH",
                &format!("{nodes}/{a}"),
                MERGE,
                json!({"spec": {"unschedulable": true}}),
            ),
        ),
        (
            "cordon another node",
            request(
                "PATCH",
                &format!("{nodes}/{b}"),
                MERGE,
                json!({"spec": {"unschedulable": true}}),
            ),
        ),
        (
            "taint guarded by a stale resourceVersion",
            request(
                "PATCH",
                &format!("{nodes}/{a}"),
                MERGE,
                json!({"metadata": {"resourceVersion": "1"}, "spec": {"taints": [{"key": "maintd.io/draining", "effect": "NoSchedule"}]}}),
            ),
        ),
        (
            "label its node",
            request(
                "PATCH",
                &format!("{nodes}/{a}"),
                MERGE,
                json!({"metadata": {"labels": {"role": "db"}}}),
            ),
        ),
        (
            "another's annotation on its node",
            request(
                "PATCH",
                &format!("{nodes}/{a}"),
                MERGE,
                json!({"metadata": {"annotations": {"example.io/x": "1"}}}),
            ),
        ),
        (
            "its own annotation",
            request(
                "PATCH",
                &format!("{nodes}/{a}"),
                MERGE,
                json!({"metadata": {"annotations": {"maintd.io/cordoned": "true"}}}),
            ),
        ),
        (
            "another's taint on its node",
            request(
                "PATCH",
                &format!("{nodes}/{a}"),
                MERGE,
                json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoExecute"}]}}),
            ),
        ),
        // Conditions.
        (
            "its condition",
            request(
                "PATCH",
                &format!("{nodes}/{a}/status?fieldManager=maintd&force=true"),
                APPLY,
                condition("MaintdDrain"),
            ),
        ),
        (
            "a lifecycle condition",
            request(
                "PATCH",
                &format!("{nodes}/{a}/status?fieldManager=maintd&force=true"),
                APPLY,
                condition("DrainInProgress"),
            ),
        ),
        (
            "a condition on another node",
            request(
                "PATCH",
                &format!("{nodes}/{b}/status?fieldManager=maintd&force=true"),
                APPLY,
                condition("MaintdDrain"),
            ),
        ),
        (
            "another's condition type",
            request(
                "PATCH",
                &format!("{nodes}/{a}/status?fieldManager=maintd&force=true"),
                APPLY,
                condition("DiskPressure"),
            ),
        ),
        // Evictions and deletions.
        (
            "evict a pod of a stale uid",
            request(
                "POST",
                &format!("{pods}/app-a/eviction"),
                JSON,
                eviction("app-a", Some("00000000-0000-0000-0000-000000000000")),
            ),
        ),
        (
            "evict a pod that is not there",
            request(
                "POST",
                &format!("{pods}/gone/eviction"),
                JSON,
                eviction("gone", None),
            ),
        ),
        (
            "evict a pod its budget protects",
            request(
                "POST",
                &format!("{pods}/guarded/eviction"),
                JSON,
                eviction("guarded", None),
            ),
        ),
        (
            "evict a pod",
            request(
                "POST",
                &format!("{pods}/app-a/eviction"),
                JSON,
                eviction("app-a", None),
            ),
        ),
        (
            "delete a pod on another node",
            request("DELETE", &format!("{pods}/app-b"), JSON, Value::Null),
        ),
        // Its NodeDrain.
        (
            "its NodeDrain",
            request(
                "PATCH",
                &format!(
                    "/apis/maintd.io/v1alpha1/nodedrains/{a}?fieldManager=maintd%2F{a}&force=true"
                ),
                APPLY,
                nodedrain(&a),
            ),
        ),
        (
            "another's NodeDrain",
            request(
                "PATCH",
                &format!(
                    "/apis/maintd.io/v1alpha1/nodedrains/{b}?fieldManager=maintd%2F{a}&force=true"
                ),
                APPLY,
                nodedrain(&b),
            ),
        ),
        // Slots.
        (
            "a slot as itself",
            request(
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/maintd/leases",
                JSON,
                slot(&a),
            ),
        ),
        (
            "a slot as another node",
            request(
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/maintd/leases",
                JSON,
                slot(&b),
            ),
        ),
        // Events.
        (
            "an Event about its node",
            request(
                "POST",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                JSON,
                event(&a, &format!("maintd-{a}")),
            ),
        ),
        (
            "an Event about another node",
            request(
                "POST",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                JSON,
                event(&b, &format!("maintd-{a}")),
            ),
        ),
        (
            "an Event reported as another",
            request(
                "POST",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                JSON,
                event(&a, &format!("maintd-{b}")),
            ),
        ),
        // What its roles do not grant.
        (
            "delete a node",
            request("DELETE", &format!("{nodes}/{a}"), JSON, Value::Null),
        ),
        (
            "list secrets",
            request(
                "GET",
                &format!("/api/v1/namespaces/{P}/secrets"),
                JSON,
                Value::Null,
            ),
        ),
        (
            "update node status",
            request("PUT", &format!("{nodes}/{a}/status"), JSON, json!({})),
        ),
        (
            "delete every pod",
            request("DELETE", &pods, JSON, Value::Null),
        ),
    ]
}

/// Requests the agent makes, each answered alike by the simulator and by
/// Kubernetes 1.37: the same code, reason and words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_answers_the_agents_requests_as_kubernetes_does() {
    let (sim, real) = Cluster::set_up().await;
    let (sim_agent, real_agent) = (sim.agent(&a()).await, real.agent(&a()).await);
    let mut differ = Vec::new();
    let mut answered = Vec::new();
    for ((what, sim_req), (_, real_req)) in cases().into_iter().zip(cases()) {
        let s = Cluster::ask(&sim_agent, sim_req).await;
        let r = Cluster::ask(&real_agent, real_req).await;
        if s != r {
            differ.push(format!("{what}:\n  simulator: {s:?}\n  Kubernetes: {r:?}"));
        }
        answered.push((what, r));
    }
    // What Kubernetes answered is what the cases expect of it: success
    // where the agent may, refusal where it may not.
    for (what, r) in &answered {
        let allowed = !what.contains("another")
            && !what.contains("stale")
            && !what.contains("not there")
            && !what.contains("protects")
            && !what.contains("label")
            && ![
                "delete a node",
                "list secrets",
                "update node status",
                "delete every pod",
            ]
            .contains(what);
        assert_eq!(r.code < 300, allowed, "{what}: Kubernetes answered {r:?}");
    }
    assert!(
        differ.is_empty(),
        "the simulator differs:\n{}",
        differ.join("\n")
    );
    if let Cluster::Real(real) = &real {
        let admin = real.admin().await;
        real.remove_nodes(&admin, &[a(), b()]).await;
        real.kubectl(&["delete", "namespace", P, "--wait=false"]);
        real.kubectl(&[
            "delete",
            "lease",
            "-n",
            "maintd",
            "-l",
            &format!("maintd.io/reboot-group={P}"),
        ]);
    }
}

/// Every install deploy/ offers, the DaemonSet included, is accepted by
/// Kubernetes 1.37 as `kubectl apply -k` sends it (a server-side dry run:
/// admission, validation, the admission policy's CEL compiled by the API
/// server's own environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_install_of_deploy_is_accepted_by_kubernetes() {
    let real = Real::get();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // The standalone installs (prometheus/ and grafana/ are components
    // added to one of them, and need the Prometheus Operator's and
    // Grafana's objects), and deploy/ with its api-priority/ component.
    let with_priority = common::overlay_with_component("api-priority");
    for dir in [
        root.join("deploy"),
        root.join("deploy/medik8s"),
        root.join("deploy/without-confinement"),
        with_priority,
    ] {
        let overlay = dir.strip_prefix(root).unwrap_or(&dir).display().to_string();
        let (ok, out, err) = real.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "-k",
            &dir.to_string_lossy(),
        ]);
        assert!(ok, "{overlay}: {err}");
        assert!(
            out.contains("serverside-applied") || out.contains("(server dry run)"),
            "{overlay}: {out}"
        );
    }
}
