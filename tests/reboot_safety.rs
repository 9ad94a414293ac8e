//! Reboot coordination where it can go wrong, through the agent's own
//! paths (its FleetLock endpoint, its local socket, its loop) and with the
//! rights deploy/ gives it: a node that does not know yet what it is takes
//! no slot; a control-plane node waits for its peers whatever asks for the
//! reboot; a node with nothing to evict still takes its turn; a drain
//! taint that would kill pods at once is warned of.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::endpoint::{EndpointAgent, request, send_raw};
use common::*;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use maintd::coordination::CONTROL_PLANE_LABEL;
use maintd_sim::SimCluster;
use serde_json::{Value, json};

/// A node labelled as `labels` says, Ready or not.
async fn node_with(client: &kube::Client, name: &str, labels: Value, ready: bool) {
    let mut body = node_json(name);
    for (k, v) in labels.as_object().into_iter().flatten() {
        body["metadata"]["labels"][k] = v.clone();
    }
    Api::<Node>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(body).unwrap(),
        )
        .await
        .unwrap();
    set_ready(client, name, ready).await;
}

async fn control_plane(client: &kube::Client, name: &str, ready: bool) {
    node_with(client, name, json!({CONTROL_PLANE_LABEL: ""}), ready).await;
}

async fn set_ready(client: &kube::Client, name: &str, ready: bool) {
    let status = if ready { "True" } else { "False" };
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": status}]}});
    Api::<Node>::all(client.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Zincati's pre-reboot for this node, over the agent's FleetLock listener.
async fn pre_reboot(agent: &EndpointAgent, id: &str) -> (u16, Value) {
    let addr = agent.fleetlock;
    let body = json!({"client_params": {"id": id, "group": "default"}}).to_string();
    let raw = format!(
        "POST /v1/pre-reboot HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nfleet-lock-protocol: true\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (code, text) = send_raw(addr, raw.as_bytes()).await;
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Every slot Lease held now, as (holder, Lease name).
async fn held_slots(client: &kube::Client) -> Vec<(String, String)> {
    Api::<Lease>::namespaced(client.clone(), "maintd")
        .list(&ListParams::default().labels("maintd.io/reboot-group"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|l| {
            let holder = l.spec?.holder_identity.filter(|h| !h.is_empty())?;
            Some((holder, l.metadata.name?))
        })
        .collect()
}

async fn two_pods_on(sim: &SimCluster, node: &str) {
    for i in 0..2 {
        let pod = pod_json("default", &format!("{node}-app-{i}"), node, json!({}));
        post_pod(sim, &pod).await;
    }
}

/// The agent of control-plane node cp-1 is asked for a reboot by Zincati
/// before it has seen its Node (its Node watch fails), and again after,
/// while another control-plane node is NotReady: it takes no slot and
/// cordons nothing, first because it does not know what it is, then by
/// the quorum guard. Once the peer is Ready, the same request takes the
/// control-plane slot and drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_fleetlock_request_waits_for_its_node_then_for_its_peers() {
    let sim = sim().await;
    let client = sim.client();
    install_crds(&client).await;
    for (name, ready) in [("cp-1", true), ("cp-2", true), ("cp-3", false)] {
        control_plane(&client, name, ready).await;
    }
    node_with(&client, "worker", json!({}), true).await;
    two_pods_on(&sim, "cp-1").await;
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();

    // The agent cannot read its Node yet.
    sim.state.faults.fail_reads("/api/v1/nodes", 503);
    let agent = EndpointAgent::start(&sim, "cp-1").await;
    let (code, reply) = pre_reboot(&agent, "cp-1-machine").await;
    assert_eq!(
        (code, reply["kind"].as_str()),
        (503, Some("failed_lock_node_unknown")),
        "{reply}"
    );
    assert!(reply["value"].as_str().unwrap().contains("cp-1"), "{reply}");
    sim.state.faults.clear();

    // Zincati retries; once the Node is known, the quorum guard answers.
    let mut replies = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let (code, reply) = pre_reboot(&agent, "cp-1-machine").await;
        let kind = reply["kind"].as_str().unwrap_or_default().to_string();
        replies.push((code, kind.clone()));
        if kind == "failed_lock_quorum_guard" {
            assert_eq!(code, 409);
            assert!(reply["value"].as_str().unwrap().contains("cp-3"), "{reply}");
            break;
        }
        assert_eq!(
            kind, "failed_lock_node_unknown",
            "before the guard answers, only 'not known yet': {replies:?}"
        );
        assert!(tokio::time::Instant::now() < deadline, "{replies:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Asked again later, the same answer: nothing taken, nothing cordoned.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, reply) = pre_reboot(&agent, "cp-1-machine").await;
    assert_eq!(reply["kind"], "failed_lock_quorum_guard", "{reply}");
    assert!(held_slots(&client).await.is_empty());
    assert!(!is_cordoned(&client, "cp-1").await);
    assert_eq!(pods_on(&client, "cp-1").await.len(), 2);

    set_ready(&client, "cp-3", true).await;
    let agent_ref = &agent;
    eventually(
        "the pre-reboot succeeds once cp-3 is Ready",
        || async move { pre_reboot(agent_ref, "cp-1-machine").await.0 == 200 },
    )
    .await;
    assert_eq!(
        held_slots(&client).await,
        [(
            "cp-1".to_string(),
            "maintd-reboot-control-plane-0".to_string()
        )]
    );
    assert!(is_cordoned(&client, "cp-1").await);
    assert!(pods_on(&client, "cp-1").await.is_empty(), "drained");
    agent.stop().await;
}

/// Two control-plane nodes ask for a reboot at the same moment, one by
/// Zincati's FleetLock, the other by a local `maintd drain`: one holds the
/// control-plane slot and drains; the other waits, says for whom, and is
/// not cordoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_control_plane_nodes_asking_at_once_reboot_one_at_a_time() {
    let sim = sim().await;
    let client = sim.client();
    install_crds(&client).await;
    for name in ["cp-1", "cp-2", "cp-3"] {
        control_plane(&client, name, true).await;
        two_pods_on(&sim, name).await;
    }
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();
    let (a, b) = tokio::join!(
        EndpointAgent::start(&sim, "cp-1"),
        EndpointAgent::start(&sim, "cp-2")
    );
    // Ready: each agent has seen its Node and its pods.
    let (a_ref, b_ref) = (&a, &b);
    eventually("both agents are ready", || async move {
        request(a_ref.readonly, "GET", "/readyz", "").await.0 == 200
            && request(b_ref.readonly, "GET", "/readyz", "").await.0 == 200
    })
    .await;

    let drain = r#"{"reason": "os update"}"#;
    let (fleetlock, local) = tokio::join!(
        pre_reboot(&a, "cp-1-machine"),
        request(&b.local, "POST", "/v1/drain", drain)
    );
    assert_eq!(local.0, 202, "{local:?}");
    let c = client.clone();
    eventually("one of them holds the control-plane slot", || {
        let c = c.clone();
        async move { held_slots(&c).await.len() == 1 }
    })
    .await;
    let holder = held_slots(&client).await[0].clone();
    assert_eq!(holder.1, "maintd-reboot-control-plane-0");
    let (winner, loser) = if holder.0 == "cp-1" {
        (&a, "cp-2")
    } else {
        (&b, "cp-1")
    };
    winner
        .wait_status("the holder drains", |st| st["drain"]["phase"] == "Drained")
        .await;
    // The other waits, and says for whom.
    if loser == "cp-1" {
        let mut reply = fleetlock.1;
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while reply["kind"] != "failed_lock_semaphore_full" {
            assert!(tokio::time::Instant::now() < deadline, "{reply}");
            tokio::time::sleep(Duration::from_millis(200)).await;
            reply = pre_reboot(&a, "cp-1-machine").await.1;
        }
        assert!(reply["value"].as_str().unwrap().contains("cp-2"), "{reply}");
    } else {
        b.wait_status("cp-2 waits and names the holder", |st| {
            st["drain"]["waiting"]
                .as_str()
                .is_some_and(|w| w.contains("held by cp-1"))
        })
        .await;
    }
    assert_eq!(held_slots(&client).await, [holder]);
    assert!(
        !is_cordoned(&client, loser).await,
        "{loser} stays in service"
    );
    assert_eq!(pods_on(&client, loser).await.len(), 2);
    a.stop().await;
    b.stop().await;
}

/// What a watch of the Nodes and of the slot Leases saw, in the order the
/// API server made the changes (its resourceVersion): when each node
/// became unschedulable, and which slots each node held then.
#[derive(Default)]
struct Timeline {
    /// (resourceVersion, what changed)
    changes: Vec<(u64, Change)>,
}

enum Change {
    Node {
        name: String,
        unschedulable: bool,
    },
    Slot {
        lease: String,
        holder: Option<String>,
    },
}

/// Watches the Nodes and the slot Leases of namespace maintd into a
/// timeline, until the returned task is aborted.
fn record_timeline(client: &kube::Client) -> (Arc<Mutex<Timeline>>, tokio::task::JoinHandle<()>) {
    let timeline: Arc<Mutex<Timeline>> = Arc::default();
    let rv = |m: &kube::api::ObjectMeta| {
        m.resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let nodes = watcher(Api::<Node>::all(client.clone()), watcher::Config::default());
    let leases = watcher(
        Api::<Lease>::namespaced(client.clone(), "maintd"),
        watcher::Config::default(),
    );
    let (t1, t2) = (timeline.clone(), timeline.clone());
    let task = tokio::spawn(async move {
        let nodes = nodes.for_each(move |ev| {
            if let Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = ev {
                let change = Change::Node {
                    name: n.metadata.name.clone().unwrap_or_default(),
                    unschedulable: n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true),
                };
                t1.lock().unwrap().changes.push((rv(&n.metadata), change));
            }
            std::future::ready(())
        });
        let leases = leases.for_each(move |ev| {
            if let Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) = ev
                && l.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("maintd-reboot-"))
            {
                let change = Change::Slot {
                    lease: l.metadata.name.clone().unwrap_or_default(),
                    holder: l
                        .spec
                        .as_ref()
                        .and_then(|s| s.holder_identity.clone())
                        .filter(|h| !h.is_empty()),
                };
                t2.lock().unwrap().changes.push((rv(&l.metadata), change));
            }
            std::future::ready(())
        });
        tokio::join!(nodes, leases);
    });
    (timeline, task)
}

impl Timeline {
    /// Each time a node became unschedulable: (node, the slot Leases it
    /// held at that moment).
    fn cordons(&self) -> Vec<(String, Vec<String>)> {
        let mut changes: Vec<&(u64, Change)> = self.changes.iter().collect();
        changes.sort_by_key(|(rv, _)| *rv);
        let mut holders: BTreeMap<String, String> = BTreeMap::new();
        let mut cordoned: BTreeMap<String, bool> = BTreeMap::new();
        let mut out = Vec::new();
        for (_, change) in changes {
            match change {
                Change::Slot { lease, holder } => match holder {
                    Some(h) => {
                        holders.insert(lease.clone(), h.clone());
                    }
                    None => {
                        holders.remove(lease);
                    }
                },
                Change::Node {
                    name,
                    unschedulable,
                } => {
                    let was = cordoned.insert(name.clone(), *unschedulable);
                    if *unschedulable && was == Some(false) {
                        let held = holders
                            .iter()
                            .filter(|(_, h)| *h == name)
                            .map(|(l, _)| l.clone())
                            .collect();
                        out.push((name.clone(), held));
                    }
                }
            }
        }
        out
    }
}

fn nodemaintenances(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &kube::discovery::ApiResource {
            group: "maintd.io".into(),
            version: "v1alpha1".into(),
            api_version: "maintd.io/v1alpha1".into(),
            kind: "NodeMaintenance".into(),
            plural: "nodemaintenances".into(),
        },
    )
}

/// A rolling NodeMaintenance (one drain slot) over nodes with no pod to
/// evict: each node is cordoned only while it holds a slot, so never more
/// at once than the slots allow, and the empty control-plane node waits
/// for its NotReady peer like one with pods would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_without_pods_take_their_turn_and_a_control_plane_one_waits_for_its_peers() {
    let sim = sim().await;
    let client = sim.client();
    install_crds(&client).await;
    create_namespace(&sim, "maintd").await;
    let workers: Vec<String> = (0..4).map(|i| format!("empty-{i}")).collect();
    for w in &workers {
        node_with(&client, w, json!({"pool": "blue"}), true).await;
    }
    node_with(
        &client,
        "cp-1",
        json!({"pool": "blue", CONTROL_PLANE_LABEL: ""}),
        true,
    )
    .await;
    control_plane(&client, "cp-2", false).await;
    let (timeline, recording) = record_timeline(&client);
    let mut agents = Vec::new();
    for n in workers.iter().chain(["cp-1".to_string()].iter()) {
        agents.push((n.clone(), common::agent::RunningAgent::start(&sim, n, None)));
    }
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": "empty-roll"},
        "spec": {
            "nodeSelector": {"matchLabels": {"pool": "blue"}},
            "stage": "Drain",
            "maxConcurrentDrains": 1,
        },
    }))
    .unwrap();
    nodemaintenances(&client)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();

    let c = client.clone();
    let names = workers.clone();
    eventually("every empty worker is cordoned, one at a time", || {
        let (c, names) = (c.clone(), names.clone());
        async move {
            for n in &names {
                if !is_cordoned(&c, n).await {
                    return false;
                }
            }
            true
        }
    })
    .await;
    let cp = &agents.last().unwrap().1;
    cp.wait_for("cp-1 waits for its NotReady peer", |_| {
        cp.progress
            .status()
            .waiting
            .is_some_and(|w| w.contains("NotReady") && w.contains("cp-2"))
    })
    .await;
    assert!(
        !is_cordoned(&client, "cp-1").await,
        "not while cp-2 is NotReady"
    );

    set_ready(&client, "cp-2", true).await;
    let c = client.clone();
    eventually("cp-1 takes its turn once cp-2 is Ready", || {
        let c = c.clone();
        async move { is_cordoned(&c, "cp-1").await }
    })
    .await;
    // Let the watches catch up with the last writes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    recording.abort();
    let cordons = timeline.lock().unwrap().cordons();
    let mut seen: Vec<&str> = cordons.iter().map(|(n, _)| n.as_str()).collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        ["cp-1", "empty-0", "empty-1", "empty-2", "empty-3"],
        "each node cordoned once: {:?}",
        cordons
            .iter()
            .map(|(n, s)| format!("{n} holding {s:?}"))
            .collect::<Vec<_>>()
    );
    for (node, slots) in &cordons {
        let want = if node == "cp-1" {
            "maintd-reboot-control-plane-0"
        } else {
            "maintd-reboot-nm-empty-roll-0"
        };
        assert_eq!(
            slots,
            &[want.to_string()],
            "{node} was cordoned while holding {slots:?}"
        );
    }
    for (_, a) in agents {
        a.stop().await;
    }
}

/// A drain taint with the NoExecute effect lets Kubernetes delete every pod
/// at once: the agent says so, in a Warning Event on the Node and in its
/// status, and says to use NoSchedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_execute_drain_taint_is_warned_of() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    let agent = EndpointAgent::start(&sim, "node-a").await;
    let patch = json!({"spec": {"taints": [
        {"key": "maintd.io/drain", "effect": "NoExecute"},
    ]}});
    Api::<Node>::all(client.clone())
        .patch("node-a", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    let st = agent
        .wait_status("the status warns of NoExecute", |st| {
            st["drain"]["warnings"].as_array().is_some_and(|w| {
                w.iter()
                    .any(|w| w.as_str().is_some_and(|w| w.contains("NoExecute")))
            })
        })
        .await;
    let warning = st["drain"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|w| w.as_str().filter(|w| w.contains("NoExecute")))
        .unwrap()
        .to_string();
    assert!(warning.contains("NoSchedule"), "{warning}");
    let sim_ref = &sim;
    eventually("a Warning Event on the Node says it", || async move {
        let (_, list) = raw(sim_ref, "GET", "/apis/events.k8s.io/v1/events", "", vec![]).await;
        list["items"].as_array().into_iter().flatten().any(|e| {
            e["type"] == "Warning"
                && e["regarding"]["kind"] == "Node"
                && e["regarding"]["name"] == "node-a"
                && e["note"].as_str().is_some_and(|n| n.contains("NoExecute"))
        })
    })
    .await;
    agent.stop().await;
}
