//! medik8s compatibility (`--medik8s`): a medik8s NodeMaintenance
//! (nodemaintenance.medik8s.io/v1beta1) naming the node drains it, its
//! status is written in medik8s' own fields, and deleting it undoes — also
//! when the agent was down at the time. Objects are created and read with
//! kubectl, as an operator would.

use crate::common;

use common::kubectl::Kubectl;
use common::*;
use maintd::agent::Agent;
use maintd::config::Config;
use maintd::drain::progress::{Phase, Progress};
use maintd_sim::SimCluster;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const RESOURCE: &str = "nodemaintenances.nodemaintenance.medik8s.io";
const CRD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/medik8s-crd.yaml"
);

async fn install_medik8s_crd(k: &Kubectl) {
    k.ok(&["apply", "-f", CRD]).await;
}

/// Starts an agent for `node`, with or without `--medik8s`.
fn start_agent(sim: &SimCluster, node: &str, medik8s: bool, stop: &CancellationToken) -> Progress {
    let mut config = Config::for_node(node, sim.static_pod_dir(node).unwrap());
    config.medik8s = medik8s;
    // With deploy/medik8s/'s rights on top of deploy/'s.
    maintd::testbed::install_rights(sim, medik8s).expect("deploy/medik8s installs");
    let agent = Agent::new(config, maintd::testbed::agent_client(sim, node));
    let progress = agent.progress().clone();
    tokio::spawn(agent.run(stop.clone()));
    progress
}

/// `kubectl apply` of a medik8s NodeMaintenance for `node`.
async fn request(k: &Kubectl, name: &str, node: &str) {
    request_with_finalizers(k, name, node, &[]).await
}

/// The same, with finalizers (medik8s' operator puts its own on the objects
/// it handled).
async fn request_with_finalizers(k: &Kubectl, name: &str, node: &str, finalizers: &[&str]) {
    let out = k
        .apply_yaml(&format!(
            "apiVersion: nodemaintenance.medik8s.io/v1beta1\nkind: NodeMaintenance\n\
             metadata:\n  name: {name}\n  finalizers: {finalizers:?}\n\
             spec:\n  nodeName: {node}\n  reason: disk replacement\n"
        ))
        .await;
    assert!(out.contains("created"), "{out}");
}

async fn status_of(k: &Kubectl, name: &str) -> Value {
    k.json(&["get", RESOURCE, name]).await["status"].clone()
}

async fn node_spec(k: &Kubectl, node: &str) -> Value {
    k.json(&["get", "node", node]).await["spec"].clone()
}

/// Sets the web budget's minAvailable (3: no disruption allowed).
async fn set_min_available(k: &Kubectl, n: u32) {
    let patch = format!(r#"{{"spec":{{"minAvailable":{n}}}}}"#);
    k.ok(&[
        "patch", "pdb", "web", "-n", "default", "--type", "merge", "-p", &patch,
    ])
    .await;
}

fn cordoned_and_tainted(spec: &Value) -> bool {
    spec["unschedulable"] == true
        && spec["taints"]
            .as_array()
            .is_some_and(|ts| ts.iter().any(|t| t["key"] == "maintd.io/draining"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_medik8s_object_drains_its_node_and_reads_like_medik8s() {
    let sim = scenario("small.yaml").await;
    let k = Kubectl::new(&sim);
    install_medik8s_crd(&k).await;
    // The budget first allows nothing, so the status must show the block.
    set_min_available(&k, 3).await;
    let stop = CancellationToken::new();
    let progress = start_agent(&sim, "node-a", true, &stop);
    // node-b's agent runs without the flag: medik8s objects are not its business.
    start_agent(&sim, "node-b", false, &stop);
    request(&k, "other-node", "node-b").await;
    // As medik8s' operator left it when maintd took over.
    request_with_finalizers(&k, "disk", "node-a", &["foregroundDeleteNodeMaintenance"]).await;

    let k_ref = &k;
    eventually(
        "the status shows the drain held up by the budget",
        || async move {
            let st = status_of(k_ref, "disk").await;
            st["phase"] == "Running"
                && st["lastError"]
                    .as_str()
                    .is_some_and(|e| e.contains("disruption budget web"))
                && st["pendingPods"].as_array().is_some_and(|p| {
                    p.iter()
                        .any(|n| n.as_str().is_some_and(|n| n.starts_with("web-")))
                })
        },
    )
    .await;
    assert!(cordoned_and_tainted(&node_spec(&k, "node-a").await));
    let st = status_of(&k, "disk").await;
    assert!(
        st.get("pendingPodsRefs").is_none(),
        "this CRD has no pendingPodsRefs: the status leaves it out: {st}"
    );
    let (total, eviction) = (
        st["totalpods"].as_i64().unwrap(),
        st["evictionPods"].as_i64().unwrap(),
    );
    assert!(
        eviction > 0 && total > eviction,
        "the opted-out pod is counted in totalpods only: {st}"
    );
    assert!(st["drainProgress"].as_i64().unwrap() < 100, "{st}");
    assert!(st["lastUpdate"].is_string(), "{st}");

    set_min_available(&k, 2).await;
    eventually("the status says Succeeded", || async move {
        let st = status_of(k_ref, "disk").await;
        st["phase"] == "Succeeded" && st["drainProgress"] == 100
    })
    .await;
    let st = status_of(&k, "disk").await;
    assert!(
        st["pendingPods"].as_array().is_none_or(|p| p.is_empty()),
        "{st}"
    );
    assert!(
        st["lastError"].is_null(),
        "the error went with the block: {st}"
    );
    assert_eq!(st["evictionPods"].as_i64(), Some(eviction));
    let left: Vec<_> = pods_on(&sim.client(), "node-a")
        .await
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(left, ["pinned"]);
    assert_eq!(progress.status().phase, Phase::Drained);
    // The status is maintd's own write, under the node's field manager.
    let obj = k
        .json(&["get", RESOURCE, "disk", "--show-managed-fields"])
        .await;
    let managers: Vec<_> = obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["subresource"] == "status")
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["maintd/node-a"]);
    // The Node condition names the request.
    let node = k.json(&["get", "node", "node-a"]).await;
    let condition = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "MaintdDrain")
        .cloned()
        .unwrap();
    assert!(
        condition["message"]
            .as_str()
            .unwrap()
            .contains("medik8s NodeMaintenance disk"),
        "{condition}"
    );
    // The agent without the flag did nothing with node-b's object.
    assert!(status_of(&k, "other-node").await.is_null());
    assert_ne!(node_spec(&k, "node-b").await["unschedulable"], true);

    // Deleting the object ends the maintenance; once the node is back in
    // service maintd takes medik8s' finalizer off, and the object goes.
    k.ok(&["delete", RESOURCE, "disk", "--wait=false"]).await;
    eventually(
        "node-a is back in service and the object gone",
        || async move {
            let spec = node_spec(k_ref, "node-a").await;
            let (found, _, err) = k_ref.run(&["get", RESOURCE, "disk"]).await;
            spec["unschedulable"] != true
                && !cordoned_and_tainted(&spec)
                && !found
                && err.contains("NotFound")
        },
    )
    .await;
    stop.cancel();
}

/// small.yaml with medik8s' CRD and `others` medik8s objects for nodes of
/// a larger fleet: their list takes a while, and an agent that judged before
/// it arrived would undo the drain it should resume.
async fn fleet_with_medik8s(others: usize) -> SimCluster {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut scenario = maintd_sim::scenario::load(&dir.join("small.yaml")).unwrap();
    scenario
        .objects
        .push(serde_saphyr::from_str(&std::fs::read_to_string(CRD).unwrap()).unwrap());
    scenario.objects.extend((0..others).map(|i| {
        serde_json::json!({
            "apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
            "metadata": {"name": format!("fleet-{i}")},
            "spec": {"nodeName": format!("node-{i}"), "reason": "firmware"},
        })
    }));
    let sim = SimCluster::start_with_scenario(Default::default(), &scenario)
        .await
        .unwrap();
    sim.wait_settled(std::time::Duration::from_secs(60))
        .await
        .unwrap();
    sim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_keeps_the_drain_and_undoes_an_object_deleted_while_it_was_down() {
    let sim = fleet_with_medik8s(3000).await;
    let k = Kubectl::new(&sim);
    request(&k, "disk", "node-a").await;
    let first = CancellationToken::new();
    let progress = start_agent(&sim, "node-a", true, &first);
    eventually("drained", || {
        let p = progress.clone();
        async move { p.status().phase == Phase::Drained }
    })
    .await;
    first.cancel();

    // Restarted with the object still there: the node stays as it is.
    let patches_of_node = |sim: &SimCluster| {
        sim.state
            .audit
            .entries()
            .iter()
            .filter(|e| e.resource == "nodes" && e.subresource.is_none() && e.verb == "patch")
            .count()
    };
    let before = patches_of_node(&sim);
    let second = CancellationToken::new();
    let progress = start_agent(&sim, "node-a", true, &second);
    eventually("the restarted agent finds the drain done", || {
        let p = progress.clone();
        async move { p.status().phase == Phase::Drained }
    })
    .await;
    assert_eq!(
        patches_of_node(&sim),
        before,
        "a restart neither undoes nor redoes the cordon"
    );
    assert!(cordoned_and_tainted(&node_spec(&k, "node-a").await));
    second.cancel();

    // Deleted while no agent runs: the next one finds its cordon record
    // and no request, and undoes.
    k.ok(&["delete", RESOURCE, "disk"]).await;
    let third = CancellationToken::new();
    start_agent(&sim, "node-a", true, &third);
    let k_ref = &k;
    eventually("node-a is back in service", || async move {
        let spec = node_spec(k_ref, "node-a").await;
        spec["unschedulable"] != true && !cordoned_and_tainted(&spec)
    })
    .await;
    third.cancel();
}

/// medik8s' coordination Lease of `node`, as kubectl reads it (None: none).
async fn medik8s_lease(k: &Kubectl, node: &str) -> Option<Value> {
    let (ok, out, _) = k
        .run(&[
            "get",
            "lease",
            "-n",
            "medik8s-leases",
            &format!("node-{node}"),
            "-o",
            "json",
        ])
        .await;
    ok.then(|| serde_json::from_str(&out).unwrap())
}

/// While a medik8s object holds the node, its agent holds medik8s' own
/// Lease as medik8s' operator would, so medik8s' remediation operators
/// see the node under maintenance; it gives it back when the object goes.
/// A Lease another holder keeps valid is not taken over, and said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_holds_medik8s_lease_while_a_medik8s_object_names_it() {
    let sim = scenario("small.yaml").await;
    let k = Kubectl::new(&sim);
    install_medik8s_crd(&k).await;
    let stop = CancellationToken::new();
    let progress = start_agent(&sim, "node-a", true, &stop);
    let progress_b = start_agent(&sim, "node-b", true, &stop);
    let events_b = common::agent::collect_events(&progress_b);
    // A third node for the pods both drains move. With only two nodes,
    // both cordoned, the web budget's one disruption goes to whichever
    // agent asks first, and the other drain waits for good.
    k.apply_yaml("apiVersion: v1\nkind: Node\nmetadata:\n  name: node-c\n")
        .await;
    // Someone else's valid hold on node-b's Lease (a remediation under way).
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    k.apply_yaml(&format!(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: node-node-b\n  namespace: medik8s-leases\n\
         spec:\n  holderIdentity: node-healthcheck\n  leaseDurationSeconds: 3600\n  renewTime: \"{now}\"\n  acquireTime: \"{now}\"\n"
    ))
    .await;
    request(&k, "disk", "node-a").await;
    request(&k, "fans", "node-b").await;

    let k_ref = &k;
    eventually(
        "node-a's medik8s Lease is held by node-maintenance",
        || async move {
            medik8s_lease(k_ref, "node-a")
                .await
                .is_some_and(|l| l["spec"]["holderIdentity"] == "node-maintenance")
        },
    )
    .await;
    let lease = medik8s_lease(&k, "node-a").await.unwrap();
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 3600);
    assert!(lease["spec"]["renewTime"].is_string() && lease["spec"]["acquireTime"].is_string());
    let owner = &lease["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["name"].as_str()),
        (Some("Node"), Some("node-a"))
    );
    let node_uid = k.json(&["get", "node", "node-a"]).await["metadata"]["uid"].clone();
    assert_eq!(owner["uid"], node_uid);

    // node-b's is someone else's: left as it is, and the agent says so.
    eventually(
        "node-b's agent says whose the Lease is (a Warning Event)",
        || {
            let warned = events_b.lock().unwrap().iter().any(|e| {
                e.event == maintd::drain::progress::EventKind::Warning
                    && e.message.contains("held by node-healthcheck")
            });
            async move { warned }
        },
    )
    .await;
    let lease_b = medik8s_lease(&k, "node-b").await.unwrap();
    assert_eq!(lease_b["spec"]["holderIdentity"], "node-healthcheck");
    // Its drain goes on all the same.
    let b = progress_b.clone();
    eventually("node-b is drained", || {
        let drained = b.status().phase == Phase::Drained;
        async move { drained }
    })
    .await;

    k.ok(&["delete", RESOURCE, "disk"]).await;
    eventually("node-a's Lease is given back", || async move {
        medik8s_lease(k_ref, "node-a")
            .await
            .is_some_and(|l| l["spec"]["holderIdentity"].is_null())
    })
    .await;
    let p = progress.clone();
    eventually("node-a is back in service", || {
        let idle = p.status().phase == Phase::Idle;
        async move { idle }
    })
    .await;
    stop.cancel();
}

/// A newer medik8s CRD has `status.pendingPodsRefs` (namespace and name):
/// the agent writes it there, beside the names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_pods_refs_are_written_where_the_crd_has_them() {
    let sim = scenario("small.yaml").await;
    let k = Kubectl::new(&sim);
    install_medik8s_crd(&k).await;
    let refs = r#"[{"op": "add", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/pendingPodsRefs", "value": {"type": "array", "items": {"type": "object", "properties": {"namespace": {"type": "string"}, "name": {"type": "string"}}}}}]"#;
    k.ok(&["patch", "crd", RESOURCE, "--type=json", "-p", refs])
        .await;
    set_min_available(&k, 3).await;
    let stop = CancellationToken::new();
    start_agent(&sim, "node-a", true, &stop);
    request(&k, "disk", "node-a").await;
    let k_ref = &k;
    eventually(
        "the status names the blocked pods with their namespace",
        || async move {
            let st = status_of(k_ref, "disk").await;
            st["pendingPodsRefs"].as_array().is_some_and(|refs| {
                refs.iter().any(|r| {
                    r["namespace"] == "default"
                        && r["name"].as_str().is_some_and(|n| n.starts_with("web-"))
                })
            })
        },
    )
    .await;
    let st = status_of(&k, "disk").await;
    assert_eq!(
        st["pendingPodsRefs"].as_array().unwrap().len(),
        st["pendingPods"].as_array().unwrap().len(),
        "the same pods: {st}"
    );
    stop.cancel();
}
