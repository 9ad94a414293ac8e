//! Per-node status at scale: each node's NodeDrain is its own small object,
//! owned by its Node; a NodeMaintenance over thousands of nodes gets
//! aggregates of a bounded size from the one status writer.

use crate::common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, DeleteParams, PostParams};
use maintd::agent::Agent;
use maintd::config::Config;
use maintd::report::writer::StatusWriter;
use maintd::trigger::maintenance::MaintenanceTrigger;
use maintd_sim::SimCluster;
use maintd_sim::resources::Gr;
use maintd_sim::verbs::{self, Writer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

async fn install(client: &kube::Client) {
    install_crds(client).await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "maintd"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// Writes `n` NodeDrain objects straight into the simulator's store, as
/// `n` agents would have: a third Blocked, the rest Drained, all selected
/// by `fleet`.
fn seed_drains(sim: &SimCluster, n: usize) {
    let def = sim
        .state
        .store()
        .resource(&Gr::new("maintd.io", "nodedrains"))
        .expect("the NodeDrain CRD is served");
    for i in 0..n {
        let node = format!("node-{i:05}");
        let blocked = i % 3 == 0;
        let obj = json!({
            "apiVersion": "maintd.io/v1alpha1", "kind": "NodeDrain",
            "metadata": {"name": node}, "spec": {},
            "status": {
                "nodeName": node,
                "phase": if blocked { "Blocked" } else { "Drained" },
                "podsTotal": 12, "podsRemaining": if blocked { 2 } else { 0 },
                "progress": if blocked { "10/12" } else { "12/12" },
                "blockers": if blocked {
                    json!([{"namespace": "shop", "pod": format!("web-{i}"), "reason": "The disruption budget web needs 3 healthy pods and has 3 currently"}])
                } else { json!([]) },
                "blockersTotal": i64::from(blocked),
                "maintenances": ["fleet"],
            },
        });
        let writer = Writer {
            manager: format!("maintd/{node}"),
            force: true,
            user: None,
        };
        verbs::create(&sim.state, &def, None, obj, &writer, true).expect("NodeDrain stored");
    }
}

/// Waits until node-a's NodeDrain exists and reads Idle, as kubectl
/// shows it.
async fn first_idle(k: &common::kubectl::Kubectl) {
    eventually("node-a's NodeDrain reads Idle", || async move {
        let (ok, out, _) = k.run(&["get", "nodedrain", "node-a", "-o", "json"]).await;
        ok && serde_json::from_str::<Value>(&out).is_ok_and(|d| d["status"]["phase"] == "Idle")
    })
    .await;
}

/// The small scenario with both CRDs and node-a's agent running.
async fn small_with_agent() -> (SimCluster, CancellationToken) {
    let sim = scenario("small.yaml").await;
    install(&sim.client()).await;
    let agent = Agent::new(
        Config::for_node("node-a", sim.static_pod_dir("node-a").unwrap()),
        maintd::testbed::agent_client(&sim, "node-a"),
    );
    let stop = CancellationToken::new();
    tokio::spawn(agent.run(stop.clone()));
    (sim, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_over_3000_nodes_gets_right_aggregates_of_a_bounded_size() {
    let sim = sim().await;
    let client = sim.client();
    install(&client).await;
    let k = common::kubectl::Kubectl::new(&sim);
    k.apply_yaml(
        "apiVersion: maintd.io/v1alpha1\nkind: NodeMaintenance\nmetadata:\n  name: fleet\nspec:\n  nodeSelector: {}\n  stage: Drain\n",
    )
    .await;
    seed_drains(&sim, 3000);
    // One agent's status writer, on a node of its own: it takes the Lease
    // and aggregates.
    common::create_node(&client, "node-00000").await;
    let maintenance = MaintenanceTrigger::new();
    let stop = CancellationToken::new();
    let agent_client = maintd::testbed::agent_client(&sim, "node-00000");
    tokio::spawn(
        maintenance
            .clone()
            .run(agent_client.clone(), Default::default(), stop.clone()),
    );
    let writer = StatusWriter {
        client: agent_client,
        leases: Default::default(),
        node: "node-00000".into(),
        namespace: "maintd".into(),
        maintenance,
        guard: Default::default(),
        writes: Default::default(),
        holding: Default::default(),
        objects: Default::default(),
        clock: Default::default(),
    };
    tokio::spawn(writer.run(stop.clone()));
    let k_ref = &k;
    eventually("the aggregates cover 3000 nodes", || async move {
        k_ref.json(&["get", "nm", "fleet"]).await["status"]["selectedNodes"] == 3000
    })
    .await;
    let obj = k.json(&["get", "nm", "fleet"]).await;
    let st = &obj["status"];
    assert_eq!(
        (
            &st["blockedNodes"],
            &st["drainedNodes"],
            &st["attentionTotal"]
        ),
        (&json!(1000), &json!(2000), &json!(1000))
    );
    let attention = st["attention"].as_array().unwrap();
    assert_eq!(attention.len(), 50, "a bounded list of who needs attention");
    assert_eq!(attention[0]["nodeName"], "node-00000");
    assert_eq!(attention[1]["nodeName"], "node-00003");
    assert!(
        attention[0]["blocker"]
            .as_str()
            .unwrap()
            .starts_with("shop/web-0: The disruption budget web"),
        "{}",
        attention[0]
    );
    let size = serde_json::to_vec(&obj).unwrap().len();
    println!("NodeMaintenance over 3000 nodes: {size} bytes");
    assert!(size < 64 * 1024, "{size} bytes");
    let table = k.ok(&["get", "nodemaintenances"]).await;
    let row: Vec<_> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..4], ["fleet", "Drain", "3000", "2000"], "{table}");
    // The writer holds the Lease; one writer manages the status.
    let lease = k
        .json(&["get", "lease", "maintd-status-writer", "-n", "maintd"])
        .await;
    assert_eq!(lease["spec"]["holderIdentity"], "node-00000");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_nodedrain_is_written_by_its_agent_and_goes_with_the_node() {
    let (sim, stop) = small_with_agent().await;
    let client = sim.client();
    let k = common::kubectl::Kubectl::new(&sim);
    let k_ref = &k;
    first_idle(k_ref).await;
    taint(&client, "node-a", "maintd.io/drain", Some("kernel")).await;
    eventually("node-a's NodeDrain reads Drained", || async move {
        k_ref.json(&["get", "nodedrain", "node-a"]).await["status"]["phase"] == "Drained"
    })
    .await;
    let d = k.json(&["get", "nodedrain", "node-a"]).await;
    assert_eq!(
        d["status"]["triggers"][0],
        "taint maintd.io/drain=kernel:NoSchedule"
    );
    stop.cancel();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Deleting the Node deletes its NodeDrain (owner reference).
    Api::<Node>::all(client.clone())
        .delete("node-a", &DeleteParams::default())
        .await
        .unwrap();
    eventually("node-a's NodeDrain is gone with the Node", || async move {
        !k_ref.run(&["get", "nodedrain", "node-a"]).await.0
    })
    .await;
}

/// How many times node-a's agent read one NodeMaintenance by name.
fn gets_of(sim: &SimCluster, name: &str) -> usize {
    let path = format!("{}/{name}", maintd::api::NODEMAINTENANCES_PATH);
    sim.state.audit.count_requests(|r| {
        r.user_agent.contains("node-a") && r.method == "GET" && !r.watch && r.path == path
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_writes_cost_agents_a_metadata_event_and_only_a_spec_change_a_read() {
    let (sim, stop) = small_with_agent().await;
    let k = common::kubectl::Kubectl::new(&sim);
    k.apply_yaml(
        "apiVersion: maintd.io/v1alpha1\nkind: NodeMaintenance\nmetadata:\n  name: fence\nspec:\n  nodeName: node-a\n  stage: Cordon\n",
    )
    .await;
    let k_ref = &k;
    eventually("the aggregates count node-a cordoned", || async move {
        k_ref.json(&["get", "nm", "fence"]).await["status"]["cordonedNodes"] == 1
    })
    .await;
    // More status writes, as a status writer makes them: the agent's
    // metadata watch sees a new resourceVersion, not a new generation.
    for i in 0..3 {
        let (code, out) = raw(
            &sim,
            "PATCH",
            &format!("{}/fence/status", maintd::api::NODEMAINTENANCES_PATH),
            "application/merge-patch+json",
            serde_json::to_vec(&json!({"status": {"attentionTotal": i}})).unwrap(),
        )
        .await;
        assert_eq!(code, 200, "{out}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(gets_of(&sim, "fence"), 1, "read once, when it appeared");
    // A spec change is read, and acted on.
    k.apply_yaml(
        "apiVersion: maintd.io/v1alpha1\nkind: NodeMaintenance\nmetadata:\n  name: fence\nspec:\n  nodeName: node-a\n  stage: Drain\n",
    )
    .await;
    eventually("node-a drains for the new stage", || async move {
        k_ref.json(&["get", "nodedrain", "node-a"]).await["status"]["phase"] == "Drained"
    })
    .await;
    assert_eq!(gets_of(&sim, "fence"), 2, "read again for its new spec");
    stop.cancel();
}

/// Every write to a Node goes to everything watching Nodes: the agent
/// writes its condition on phase transitions only. A drain whose budget
/// paces it (the small scenario's web pods go one at a time, so the drain
/// goes Blocked and Draining again and again) costs the Node the same few
/// writes as any other: Draining, Drained, and back to Idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_condition_is_written_on_phase_transitions_only() {
    let (sim, stop) = small_with_agent().await;
    let client = sim.client();
    let k = common::kubectl::Kubectl::new(&sim);
    let k_ref = &k;
    first_idle(k_ref).await;
    let at_start = node_status_writes(&sim, "node-a");
    assert!(at_start <= 1, "one write of Idle at most: {at_start}");
    taint(&client, "node-a", "maintd.io/drain", Some("kernel")).await;
    eventually("node-a's NodeDrain reads Drained", || async move {
        k_ref.json(&["get", "nodedrain", "node-a"]).await["status"]["phase"] == "Drained"
    })
    .await;
    // The web pods waited their turn behind their budget (the drain's
    // own evictions took what it allows): a turn, not a block, so no
    // EvictionBlocked Event; the ReplicaSet is told its pods moved.
    let c = &client;
    eventually("the web ReplicaSet is told", || async move {
        Api::<k8s_openapi::api::events::v1::Event>::all(c.clone())
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("Evicted")
                    && e.regarding.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some("ReplicaSet") && r.name.as_deref() == Some("web")
                    })
            })
    })
    .await;
    taint(&client, "node-a", "maintd.io/drain", None).await;
    eventually("node-a's NodeDrain reads Idle again", || async move {
        k_ref.json(&["get", "nodedrain", "node-a"]).await["status"]["phase"] == "Idle"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = node_status_writes(&sim, "node-a") - at_start;
    // Cordoned, Draining, Drained, then Cordoned or Idle on the way back.
    assert!(
        (3..=5).contains(&writes),
        "{writes} writes of the Node for one drain and its undo"
    );
    let node = k.json(&["get", "node", "node-a"]).await;
    let condition = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "MaintdDrain")
        .cloned()
        .unwrap();
    assert_eq!(condition["reason"], "Idle", "{condition}");
    stop.cancel();
}

/// An agent whose view of its Node arrives late (a slow list) still writes
/// the node's NodeDrain once it knows the Node: the status writer's first
/// rounds, without a Node to own the object, must not count as done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_seen_late_still_gets_its_nodedrain() {
    let sim = sim().await;
    let client = sim.client();
    install(&client).await;
    create_node(&client, "node-late").await;
    // The agent's list of its Node takes 3 s; everything else is quick.
    let proxy = common::slow_proxy::SlowProxy::start(
        sim.url(),
        std::sync::Arc::new(|method, path| {
            (method == http::Method::GET && path == "/api/v1/nodes")
                .then_some(Duration::from_secs(3))
        }),
    )
    .await;
    let agent = Agent::new(
        Config::for_node("node-late", "/nonexistent/manifests".into()),
        proxy.agent_client(&sim, "node-late"),
    );
    let stop = CancellationToken::new();
    tokio::spawn(agent.run(stop.clone()));
    let k = common::kubectl::Kubectl::new(&sim);
    let k_ref = &k;
    eventually("node-late's NodeDrain reads Idle", || async move {
        let (ok, out, _) = k_ref
            .run(&["get", "nodedrain", "node-late", "-o", "json"])
            .await;
        ok && serde_json::from_str::<Value>(&out).is_ok_and(|d| d["status"]["phase"] == "Idle")
    })
    .await;
    stop.cancel();
}

/// A status write the agent gave up on (no answer within its 10 s) may
/// still land: an API server under load finishes what it accepted. Such a
/// late write carries an old status and must not land over a newer one,
/// or the node's NodeDrain would go on saying Draining for a drain long
/// undone. Here the API server holds every NodeDrain status write for
/// 20 s; two writes of the drain are held when the drain is called off,
/// and the writes the agent sends after the fault is lifted must be what
/// the NodeDrain says in the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_that_lands_after_its_timeout_does_not_overwrite_a_newer_one() {
    let (sim, stop) = small_with_agent().await;
    let client = sim.client();
    let k = common::kubectl::Kubectl::new(&sim);
    let k_ref = &k;
    first_idle(k_ref).await;
    let faults = &sim.state.faults;
    let status_path = format!("{}/node-a/status", maintd::api::nodedrain::NODEDRAINS_PATH);
    faults.commit_late(&status_path, Duration::from_secs(20));
    taint(&client, "node-a", "maintd.io/drain", Some("kernel")).await;
    // The first write times out after 10 s and the next goes out a second
    // later: both say the drain is on.
    eventually("two NodeDrain writes are held", || async move {
        faults.held_writes() >= 2
    })
    .await;
    taint(&client, "node-a", "maintd.io/drain", None).await;
    faults.clear();
    eventually("every held write was answered", || async move {
        faults.held_writes() == 0
    })
    .await;
    assert!(
        nodedrain_status_writes(&sim, "node-a").contains(&409),
        "a held write found the NodeDrain changed and was refused"
    );
    eventually("node-a's NodeDrain reads Idle again", || async move {
        let d = k_ref.json(&["get", "nodedrain", "node-a"]).await;
        d["status"]["phase"] == "Idle"
            && d["status"]["triggers"].as_array().is_none_or(Vec::is_empty)
    })
    .await;
    // And stays so: nothing held is left to land.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let d = k.json(&["get", "nodedrain", "node-a"]).await;
    assert_eq!(d["status"]["phase"], "Idle", "{}", d["status"]);
    stop.cancel();
}
