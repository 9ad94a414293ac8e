//! A NodeMaintenance object drives the agent: stage Cordon cordons and
//! taints only, Drain runs the plan, Complete undoes.

use crate::common;

use common::*;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use maintd::agent::Agent;
use maintd::config::Config;
use maintd::drain::progress::{EventKind, Phase};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn resource() -> ApiResource {
    ApiResource {
        group: "maintd.io".into(),
        version: "v1alpha1".into(),
        api_version: "maintd.io/v1alpha1".into(),
        kind: "NodeMaintenance".into(),
        plural: "nodemaintenances".into(),
    }
}

/// Both CRDs, and the agents' namespace (where the status writer's Lease
/// lives), as deploy/ installs them.
async fn install_crd(client: &kube::Client) {
    install_crds(client).await;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "maintd"}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// Who manages the status of NodeMaintenance `name`.
async fn status_managers(nms: &Api<DynamicObject>, name: &str) -> Vec<String> {
    let nm = nms.get(name).await.unwrap();
    nm.metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter_map(|m| m.manager)
        .collect()
}

/// The NodeDrain of `node`, as the API has it (Null while there is none).
async fn node_drain(client: &kube::Client, node: &str) -> serde_json::Value {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource {
            group: "maintd.io".into(),
            version: "v1alpha1".into(),
            api_version: "maintd.io/v1alpha1".into(),
            kind: "NodeDrain".into(),
            plural: "nodedrains".into(),
        },
    );
    match api.get(node).await {
        Ok(d) => serde_json::to_value(d).unwrap(),
        Err(_) => serde_json::Value::Null,
    }
}

fn agent_for(sim: &maintd_sim::SimCluster, node: &str) -> Agent {
    Agent::new(
        Config::for_node(node, sim.static_pod_dir(node).unwrap()),
        maintd::testbed::agent_client(sim, node),
    )
}

/// `node`'s agent running until the token is cancelled, and its progress.
fn run_agent(
    sim: &maintd_sim::SimCluster,
    node: &str,
) -> (maintd::drain::progress::Progress, CancellationToken) {
    let agent = agent_for(sim, node);
    let progress = agent.progress().clone();
    let stop = CancellationToken::new();
    tokio::spawn(agent.run(stop.clone()));
    (progress, stop)
}

/// The condition `type_` of `node`, if it has one.
async fn condition(client: &kube::Client, node: &str, type_: &str) -> Option<serde_json::Value> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let n = serde_json::to_value(nodes.get(node).await.expect("the node")).unwrap_or_default();
    n["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

async fn create(nms: &Api<DynamicObject>, name: &str, spec: serde_json::Value) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    nms.create(&PostParams::default(), &obj).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_then_drain_then_complete() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    install_crd(&client).await;
    let (progress, stop) = run_agent(&sim, "node-a");

    let nms: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    create(
        &nms,
        "kernel-upgrade",
        json!({"nodeName": "node-a", "stage": "Cordon", "reason": "kernel upgrade"}),
    )
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    eventually("node-a cordoned and tainted", || {
        let nodes = nodes.clone();
        async move {
            let spec = nodes.get("node-a").await.unwrap().spec.unwrap_or_default();
            spec.unschedulable == Some(true)
                && spec
                    .taints
                    .unwrap_or_default()
                    .iter()
                    .any(|t| t.key == "maintd.io/draining")
        }
    })
    .await;
    assert!(
        sim.state.audit.entries().iter().all(|e| e.verb != "evict"),
        "Cordon evicts nothing"
    );
    assert_eq!(progress.status().phase, Phase::Cordoned);

    let stage = |s: &str| json!({"spec": {"stage": s}});
    nms.patch(
        "kernel-upgrade",
        &PatchParams::default(),
        &Patch::Merge(stage("Drain")),
    )
    .await
    .unwrap();
    let p = progress.clone();
    eventually("node-a drained", || {
        let drained = p.status().phase == Phase::Drained;
        async move { drained }
    })
    .await;
    let left: Vec<_> = pods_on(&client, "node-a")
        .await
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(left, ["pinned"]);
    // The node's own NodeDrain says so, written by its agent alone.
    let c = client.clone();
    eventually("node-a's NodeDrain shows it drained", || {
        let c = c.clone();
        async move {
            let d = node_drain(&c, "node-a").await;
            let st = &d["status"];
            st["phase"] == "Drained"
                && st["podsRemaining"] == 0
                && st["maintenances"] == json!(["kernel-upgrade"])
        }
    })
    .await;
    let d = node_drain(&client, "node-a").await;
    let managers: Vec<_> = d["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap().to_string())
        .collect();
    assert!(
        managers.iter().all(|m| m == "maintd/node-a"),
        "{managers:?}"
    );
    assert_eq!(d["metadata"]["ownerReferences"][0]["kind"], "Node");
    // The maintenance holds the aggregates, from the one status writer.
    let counted = nms.clone();
    eventually("the printer columns' counts", || {
        let api = counted.clone();
        async move {
            let st = api.get("kernel-upgrade").await.unwrap().data["status"].clone();
            st["drainedNodes"] == 1 && st["selectedNodes"] == 1
        }
    })
    .await;
    assert_eq!(
        status_managers(&nms, "kernel-upgrade").await,
        ["maintd/status-writer"]
    );
    // Events say what happened, on the Node and on the evicted pods (the
    // recorder writes them as the drain goes, so wait for them).
    let sim_ref = &sim;
    eventually("the drain's Events are recorded", || async move {
        let (_, events) = raw(sim_ref, "GET", "/apis/events.k8s.io/v1/events", "", vec![]).await;
        let items = events["items"].as_array().cloned().unwrap_or_default();
        let has = |kind: &str, reason: &str| {
            items
                .iter()
                .any(|e| e["regarding"]["kind"] == kind && e["reason"] == reason)
        };
        // The web budget paces the web pods (the drain's own evictions
        // take what it allows): their turn, not a block, is no Event.
        let no_block_for_a_turn = !items.iter().any(|e| e["reason"] == "EvictionBlocked");
        // Each workload whose pods were evicted is told, on itself.
        let owner_told = items.iter().any(|e| {
            e["reason"] == "Evicted"
                && e["regarding"]["kind"] == "ReplicaSet"
                && e["note"].as_str().is_some_and(|n| {
                    n.contains("of its pods from node node-a for NodeMaintenance kernel-upgrade")
                })
        });
        // A pod of a workload gets no Event of its own; one without an
        // owner does.
        let per_pod = |name: &str| {
            items.iter().any(|e| {
                e["regarding"]["kind"] == "Pod"
                    && e["regarding"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(name))
            })
        };
        has("Node", "DrainStarted")
            && has("Node", "Drained")
            && owner_told
            && per_pod("bare")
            && !per_pod("web-")
            && no_block_for_a_turn
    })
    .await;
    // The Node's own condition says the same.
    eventually("the node condition reads Drained", || {
        let nodes = nodes.clone();
        async move {
            let node = nodes.get("node-a").await.unwrap();
            node.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| {
                    c.type_ == "MaintdDrain"
                        && c.status == "True"
                        && c.reason.as_deref() == Some("Drained")
                        && c.message
                            .as_deref()
                            .is_some_and(|m| m.contains("NodeMaintenance kernel-upgrade"))
                })
        }
    })
    .await;

    let mut events = progress.subscribe();
    nms.patch(
        "kernel-upgrade",
        &PatchParams::default(),
        &Patch::Merge(stage("Complete")),
    )
    .await
    .unwrap();
    loop {
        if events.recv().await.unwrap().event == EventKind::UndoCompleted {
            break;
        }
    }
    let spec = nodes.get("node-a").await.unwrap().spec.unwrap_or_default();
    assert_ne!(spec.unschedulable, Some(true), "uncordoned");
    let c = client.clone();
    eventually("the NodeDrain says Idle again", || {
        let c = c.clone();
        async move { node_drain(&c, "node-a").await["status"]["phase"] == "Idle" }
    })
    .await;
    assert!(
        spec.taints
            .unwrap_or_default()
            .iter()
            .all(|t| t.key != "maintd.io/draining")
    );
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_share_one_object_without_overwriting_each_other() {
    let sim = scenario("realistic.yaml").await;
    let client = sim.client();
    install_crd(&client).await;
    let stop = CancellationToken::new();
    for node in ["node-a", "node-b", "node-c"] {
        tokio::spawn(agent_for(&sim, node).run(stop.clone()));
    }
    let nms: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    create(&nms, "fleet-cordon", json!({"nodeSelector": {"matchLabels": {"kubernetes.io/os": "linux"}}, "stage": "Cordon", "reason": "rack move"})).await;
    let c = client.clone();
    eventually("every node's NodeDrain reads Cordoned", || {
        let c = c.clone();
        async move {
            let mut all = true;
            for node in ["node-a", "node-b", "node-c"] {
                all &= node_drain(&c, node).await["status"]["phase"] == "Cordoned";
            }
            all
        }
    })
    .await;
    let api = nms.clone();
    eventually("the maintenance counts three cordoned nodes", || {
        let api = api.clone();
        async move {
            let st = api.get("fleet-cordon").await.unwrap().data["status"].clone();
            st["selectedNodes"] == 3 && st["cordonedNodes"] == 3
        }
    })
    .await;
    // One writer for the shared object, whichever agent it is.
    assert_eq!(
        status_managers(&nms, "fleet-cordon").await,
        ["maintd/status-writer"]
    );
    assert!(
        sim.state.audit.entries().iter().all(|e| e.verb != "evict"),
        "Cordon evicts nothing"
    );
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_objects_get_a_condition_naming_the_problem_cause_no_action_and_hide_nothing() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    install_crd_without_bounds(&client).await;
    let (_, stop) = run_agent(&sim, "node-a");
    let nms: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    // Objects an older CRD (or none) let through; every one asks to drain
    // node-a, and none may. (name, spec, words the condition must carry)
    let huge_plan: Vec<_> = (0..5000)
        .map(|i| json!({"podType": "Default", "podPriority": i}))
        .collect();
    let bad = [
        (
            "both",
            json!({"nodeName": "node-a", "nodeSelector": {"matchLabels": {"a": "b"}}, "stage": "Drain"}),
            vec!["nodeName", "nodeSelector", "exactly one"],
        ),
        (
            "evacuate",
            json!({"nodeName": "node-a", "stage": "Evacuate"}),
            vec!["\"Evacuate\" is not a stage"],
        ),
        (
            "bad-selector",
            json!({"nodeSelector": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "Matches", "values": ["node-a"]}]}, "stage": "Drain"}),
            vec!["operator \"Matches\""],
        ),
        (
            "out-of-order",
            json!({"nodeName": "node-a", "stage": "Drain", "drainPlan": [
                {"podType": "DaemonSet", "podPriority": 0},
                {"podType": "Default", "podPriority": 0}]}),
            vec!["entry 1 (podType Default) comes after entry 0 (podType DaemonSet)"],
        ),
        (
            "huge",
            json!({"nodeName": "node-a", "stage": "Drain", "reason": "x".repeat(100_000), "drainPlan": huge_plan}),
            vec!["5000 entries", "100000 bytes"],
        ),
        (
            "typo",
            json!({"nodeName": "node-a", "stage": "Drain", "drainPlan": [{"podType": "Deployment", "podPriority": 0}]}),
            vec!["does not decode", "Deployment"],
        ),
    ];
    for (name, spec, _) in &bad {
        create(&nms, name, spec.clone()).await;
    }
    // A good object beside them is still served.
    create(
        &nms,
        "fence",
        json!({"nodeName": "node-a", "stage": "Cordon", "reason": "rack work"}),
    )
    .await;
    for (name, _, words) in &bad {
        let api = nms.clone();
        eventually(
            &format!("{name}: the Valid condition says what is wrong"),
            || {
                let api = api.clone();
                let words = words.clone();
                async move {
                    let nm = api.get(name).await.unwrap();
                    nm.data["status"]["conditions"]
                        .as_array()
                        .is_some_and(|cs| {
                            cs.iter().any(|c| {
                                c["type"] == "Valid"
                                    && c["status"] == "False"
                                    && c["message"]
                                        .as_str()
                                        .is_some_and(|m| words.iter().all(|w| m.contains(w)))
                            })
                        })
                }
            },
        )
        .await;
    }
    eventually("the valid object cordons node-a", || async {
        is_cordoned(&client, "node-a").await
    })
    .await;
    let api = nms.clone();
    eventually("the valid object counts node-a cordoned", || {
        let api = api.clone();
        async move { api.get("fence").await.unwrap().data["status"]["cordonedNodes"] == 1 }
    })
    .await;
    assert!(
        sim.state.audit.entries().iter().all(|e| e.verb != "evict"),
        "no invalid object drained anything"
    );
    for (name, _, _) in &bad {
        let nm = nms.get(name).await.unwrap();
        assert!(
            nm.data["status"]["selectedNodes"].is_null(),
            "{name}: no node counted for an object not acted on"
        );
    }
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_follows_a_drain_over_two_nodes_that_progress_independently() {
    let sim = scenario("small.yaml").await;
    let k = common::kubectl::Kubectl::new(&sim);
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy");
    k.ok(&["apply", "-k", deploy]).await;
    let stop = CancellationToken::new();
    for node in ["node-a", "node-b"] {
        tokio::spawn(agent_for(&sim, node).run(stop.clone()));
    }
    // Both nodes at once: node-b has only its DaemonSet pod and drains;
    // node-a's web pods have nowhere to go, so their budget holds node-a.
    k.apply_yaml(
        "apiVersion: maintd.io/v1alpha1\nkind: NodeMaintenance\nmetadata:\n  name: rack-7\n\
         spec:\n  nodeSelector:\n    matchExpressions:\n      - {key: kubernetes.io/hostname, operator: In, values: [node-a, node-b]}\n\
         \x20 stage: Drain\n  reason: rack 7 power work\n",
    )
    .await;

    let k_ref = &k;
    eventually("kubectl shows 2 selected, 1 drained", || async move {
        let table = k_ref.ok(&["get", "nodemaintenances"]).await;
        let row: Vec<String> = table
            .lines()
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_string)
            .collect();
        row.len() >= 4 && row[..4] == ["rack-7", "Drain", "2", "1"]
    })
    .await;
    // Each node's own status, side by side, and the one that needs
    // attention named on the maintenance with its blocker.
    let drains = k.ok(&["get", "nodedrains"]).await;
    let phases: Vec<(String, String)> = drains
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<_> = l.split_whitespace().collect();
            (f[0].to_string(), f[1].to_string())
        })
        .collect();
    assert_eq!(
        phases,
        [
            ("node-a".to_string(), "Blocked".to_string()),
            ("node-b".to_string(), "Drained".to_string())
        ],
        "{drains}"
    );
    let obj = k.json(&["get", "nodemaintenance", "rack-7"]).await;
    let a = &obj["status"]["attention"][0];
    assert_eq!(a["nodeName"], "node-a", "{obj}");
    assert!(
        a["blocker"]
            .as_str()
            .is_some_and(|b| b.contains("web-") && b.contains("disruption budget web")),
        "node-a names the budget that holds it: {a}"
    );
    let d = k.json(&["get", "nodedrain", "node-a"]).await;
    assert!(d["status"]["podsRemaining"].as_i64().unwrap() > 0, "{d}");

    // Deleting the object undoes both.
    k.ok(&["delete", "nodemaintenance", "rack-7"]).await;
    for node in ["node-a", "node-b"] {
        eventually(&format!("{node} is back in service"), || async move {
            let spec = k_ref.json(&["get", "node", node]).await["spec"].clone();
            spec["unschedulable"] != true
                && spec["taints"]
                    .as_array()
                    .is_none_or(|ts| ts.iter().all(|t| t["key"] != "maintd.io/draining"))
        })
        .await;
    }
    stop.cancel();
}

const THREE_NODES: &str = r#"
objects:
- {apiVersion: v1, kind: Node, metadata: {name: node-a, labels: {pool: blue}}}
- {apiVersion: v1, kind: Node, metadata: {name: node-b, labels: {pool: blue}}}
- {apiVersion: v1, kind: Node, metadata: {name: node-c, labels: {pool: blue}}}
"#;

/// The simulator with [`THREE_NODES`] and the CRDs installed, and its
/// admin client.
async fn three_nodes() -> (maintd_sim::SimCluster, kube::Client) {
    let scenario = maintd_sim::scenario::Scenario::from_yaml(THREE_NODES).unwrap();
    let sim = maintd_sim::SimCluster::start_with_scenario(Default::default(), &scenario)
        .await
        .unwrap();
    let client = sim.client();
    install_crd(&client).await;
    (sim, client)
}

/// An agent for `node` whose node has no static pod directory.
fn agent_without_static_pods(sim: &maintd_sim::SimCluster, node: &str) -> Agent {
    Agent::new(
        Config::for_node(node, "/nonexistent/manifests".into()),
        maintd::testbed::agent_client(sim, node),
    )
}

/// A maintenance over three nodes with `maxConcurrentDrains: 1`: one node
/// at a time is cordoned and evicts, each taking the object's drain slot
/// and giving it back once drained; the others keep taking pods and say
/// what they wait for. A budget holds the first node's drain until the
/// waiting has been seen, so the test does not race a drain that is over
/// in a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_limited_to_one_drain_at_a_time_drains_its_nodes_one_after_another() {
    let (sim, client) = three_nodes().await;
    for node in ["node-a", "node-b", "node-c"] {
        for i in 0..3 {
            let mut pod = pod_json("default", &format!("{node}-p{i}"), node, json!({}));
            pod["metadata"]["annotations"] = json!({"sim.maintd.io/shutdown-seconds": "0.5"});
            post_pod(&sim, &pod).await;
        }
        post_pod(
            &sim,
            &pod_json(
                "default",
                &format!("{node}-p3"),
                node,
                json!({"app": "hold"}),
            ),
        )
        .await;
    }
    unmovable_budget(&sim, "hold").await;
    sim.wait_settled(std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    for node in ["node-a", "node-b", "node-c"] {
        tokio::spawn(agent_without_static_pods(&sim, node).run(stop.clone()));
    }
    let nms: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    create(
        &nms,
        "one-at-a-time",
        json!({"nodeSelector": {"matchLabels": {"pool": "blue"}}, "stage": "Drain", "maxConcurrentDrains": 1}),
    )
    .await;

    // While one node drains, the others say why they wait, and are not
    // cordoned: pods evicted from the first can land on them.
    let c = client.clone();
    eventually("both waiting nodes say the slot is held", || {
        let c = c.clone();
        async move {
            let mut waiting = 0;
            for node in ["node-a", "node-b", "node-c"] {
                let d = node_drain(&c, node).await;
                if d["status"]["waiting"].as_str().is_some_and(|w| {
                    w.contains("NodeMaintenance one-at-a-time") && w.ends_with("its slots are held")
                }) {
                    waiting += 1;
                }
            }
            waiting == 2
        }
    })
    .await;
    let mut cordoned = Vec::new();
    for node in ["node-a", "node-b", "node-c"] {
        let d = node_drain(&client, node).await;
        if is_cordoned(&client, node).await {
            cordoned.push(node);
            assert!(
                d["status"]["waiting"].is_null(),
                "{node} holds the slot: {d}"
            );
        } else {
            assert_eq!(d["status"]["phase"], "Idle", "{node} waits: {d}");
        }
    }
    assert_eq!(
        cordoned.len(),
        1,
        "only the slot's holder is cordoned: {cordoned:?}"
    );
    // The cluster is told of a wait once it has lasted a few seconds: the
    // two nodes still waiting have their Event and their Node's condition;
    // the holder, which took the slot in its first seconds, never said it
    // waited anywhere.
    let (_, events) = raw(&sim, "GET", "/apis/events.k8s.io/v1/events", "", vec![]).await;
    let waited: Vec<&str> = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "DrainWaiting")
        .filter_map(|e| e["regarding"]["name"].as_str())
        .collect();
    for node in ["node-a", "node-b", "node-c"] {
        let planned = condition(&client, node, "MaintenancePlanned").await;
        if cordoned.contains(&node) {
            assert!(
                !waited.contains(&node),
                "{node} took the slot at once: {waited:?}"
            );
            assert!(planned.is_none(), "{node}: {planned:?}");
        } else {
            assert!(waited.contains(&node), "{node} waits: {waited:?}");
            assert!(planned.is_some(), "{node} waits, its Node says so");
        }
    }
    // Nothing was drained while the slot's holder was held.
    for node in ["node-a", "node-b", "node-c"] {
        assert_ne!(
            node_drain(&client, node).await["status"]["phase"],
            "Drained"
        );
    }
    let (code, body) = raw(
        &sim,
        "DELETE",
        &format!("{DEFAULT_BUDGETS}/hold"),
        "application/json",
        Vec::new(),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let c = client.clone();
    eventually("every node is drained", || {
        let c = c.clone();
        async move {
            let mut all = true;
            for node in ["node-a", "node-b", "node-c"] {
                all &= node_drain(&c, node).await["status"]["phase"] == "Drained";
            }
            all
        }
    })
    .await;
    for node in ["node-a", "node-b", "node-c"] {
        assert!(is_cordoned(&client, node).await, "{node} stays cordoned");
    }
    // The evictions, in the API server's order, come node by node.
    let order: Vec<String> = sim
        .state
        .audit
        .entries()
        .into_iter()
        .filter(|e| e.verb == "evict" && e.code == 201)
        .map(|e| e.name.split("-p").next().unwrap_or("").to_string())
        .collect();
    assert_eq!(order.len(), 12, "{order:?}");
    let mut runs = order.clone();
    runs.dedup();
    assert_eq!(runs.len(), 3, "one node's evictions at a time: {order:?}");
    // The slot went back each time: nobody holds it now.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "maintd");
    let held: Vec<String> = leases
        .list(&kube::api::ListParams::default().labels("maintd.io/reboot-group"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|l| l.spec.and_then(|s| s.holder_identity))
        .collect();
    assert!(held.is_empty(), "no slot held once drained: {held:?}");
    stop.cancel();
}

/// The NodeMaintenance CRD as a cluster that predates its bounds has it:
/// no ranges, no lengths, no enums, no integer formats (whose range the
/// API server checks too), no CEL rule. What such a CRD lets through
/// reaches every agent.
async fn install_crd_without_bounds(client: &kube::Client) {
    fn strip(v: &mut serde_json::Value) {
        if let Some(m) = v.as_object_mut() {
            for key in [
                "minimum",
                "maximum",
                "maxLength",
                "minLength",
                "maxItems",
                "enum",
                "format",
                "x-kubernetes-validations",
            ] {
                m.remove(key);
            }
            m.values_mut().for_each(strip);
        } else if let Some(a) = v.as_array_mut() {
            a.iter_mut().for_each(strip);
        }
    }
    install_crd(client).await;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let mut crd = serde_json::to_value(maintd::api::crd().unwrap()).unwrap();
    strip(&mut crd["spec"]);
    let name = crd["metadata"]["name"].as_str().unwrap().to_string();
    crd["metadata"]["resourceVersion"] =
        json!(crds.get(&name).await.unwrap().metadata.resource_version);
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    crds.replace(&name, &PostParams::default(), &crd)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_with_extreme_values_crash_nothing_and_a_good_one_beside_them_drains() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    install_crd_without_bounds(&client).await;
    let (progress, stop) = run_agent(&sim, "node-a");
    let nms: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    let on_a = |extra: serde_json::Value| {
        let mut spec = json!({"nodeName": "node-a", "stage": "Drain"});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    };
    // Each asks node-a to drain; none may be acted on, and none may stop
    // the good one.
    let bad = [
        (
            "timeout-max",
            on_a(json!({"stageTimeoutSeconds": i64::MAX})),
            "stageTimeoutSeconds",
        ),
        (
            "timeout-min",
            on_a(json!({"stageTimeoutSeconds": i64::MIN})),
            "stageTimeoutSeconds",
        ),
        (
            "timeout-zero",
            on_a(json!({"stageTimeoutSeconds": 0})),
            "stageTimeoutSeconds",
        ),
        (
            "slots-max",
            on_a(json!({"maxConcurrentDrains": i32::MAX})),
            "maxConcurrentDrains",
        ),
        (
            "slots-negative",
            on_a(json!({"maxConcurrentDrains": -5})),
            "maxConcurrentDrains",
        ),
        (
            "slots-too-big",
            on_a(json!({"maxConcurrentDrains": i64::MAX})),
            "does not decode",
        ),
        (
            "priority-too-big",
            on_a(json!({"drainPlan": [{"podType": "Default", "podPriority": i64::MAX}]})),
            "does not decode",
        ),
        (
            "long-name",
            json!({"nodeName": "n".repeat(100_000), "stage": "Drain"}),
            "spec.nodeName",
        ),
    ];
    for (name, spec, _) in &bad {
        create(&nms, name, spec.clone()).await;
    }
    // Valid, at the edges: a week per stage, more slots than nodes, the
    // lowest and highest priorities, and a selector of a thousand
    // expressions that still selects node-a.
    let many: Vec<_> = (0..1000)
        .map(|i| json!({"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [format!("other-{i}"), "x".repeat(60)]}))
        .collect();
    create(
        &nms,
        "good",
        json!({
            "nodeSelector": {"matchExpressions": many},
            "stage": "Drain",
            "stageTimeoutSeconds": maintd::api::MAX_STAGE_TIMEOUT_SECONDS,
            "maxConcurrentDrains": maintd::api::MAX_CONCURRENT_DRAINS,
            "drainPlan": [
                {"podType": "Default", "podPriority": i32::MIN},
                {"podType": "Default", "podPriority": i32::MAX},
                {"podType": "DaemonSet", "podPriority": i32::MAX},
                {"podType": "Static", "podPriority": i32::MAX},
            ],
        }),
    )
    .await;
    for (name, _, word) in &bad {
        let api = nms.clone();
        eventually(&format!("{name}: the Valid condition names {word}"), || {
            let api = api.clone();
            async move {
                let nm = api.get(name).await.unwrap();
                nm.data["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c["type"] == "Valid"
                                && c["status"] == "False"
                                && c["message"].as_str().is_some_and(|m| m.contains(word))
                        })
                    })
            }
        })
        .await;
    }
    eventually("the good object drains node-a", || {
        let progress = progress.clone();
        async move { progress.status().phase == Phase::Drained }
    })
    .await;
    let left: Vec<String> = pods_on(&client, "node-a")
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(left, ["pinned"], "every pod but the one marked skip left");
    stop.cancel();
}

/// An agent killed after its node was drained but before it gave the
/// object's drain slot back: the agent that comes back finds the node
/// drained and nothing to evict, holds no guard for the slot, and must
/// still give it back from the Lease, or the next node waits until the
/// hold expires in a node's name that is not in its turn (found by the
/// fault soak on the real control plane).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_restarted_on_a_drained_node_gives_back_the_drain_slot_it_held() {
    let (sim, client) = three_nodes().await;
    let run_agent = |stop: &CancellationToken| {
        tokio::spawn(agent_without_static_pods(&sim, "node-a").run(stop.clone()));
    };
    let first = CancellationToken::new();
    run_agent(&first);
    let nms: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    create(
        &nms,
        "slot-after-restart",
        json!({"nodeSelector": {"matchLabels": {"pool": "blue"}}, "stage": "Drain", "maxConcurrentDrains": 1}),
    )
    .await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "maintd");
    let slot = maintd::coordination::slot_name("nm-slot-after-restart", 0);
    let holder = |leases: Api<k8s_openapi::api::coordination::v1::Lease>, slot: String| async move {
        leases
            .get_opt(&slot)
            .await
            .ok()
            .flatten()
            .as_ref()
            .and_then(maintd::coordination::lease_holder)
            .map(str::to_string)
    };
    let c = client.clone();
    eventually("node-a is drained", || {
        let c = c.clone();
        async move { node_drain(&c, "node-a").await["status"]["phase"] == "Drained" }
    })
    .await;
    let (l, s) = (leases.clone(), slot.clone());
    eventually("node-a gives the slot back once drained", || {
        holder(l.clone(), s.clone()).map(|h| h.is_none())
    })
    .await;
    // The agent dies, and the slot reads as it did just before its
    // release: held by node-a, renewed a moment ago.
    first.cancel();
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    leases
        .patch(
            &slot,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"holderIdentity": "node-a", "renewTime": now, "acquireTime": now}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        holder(leases.clone(), slot.clone()).await.as_deref(),
        Some("node-a")
    );
    let second = CancellationToken::new();
    run_agent(&second);
    let (l, s) = (leases.clone(), slot.clone());
    eventually("the restarted agent gives the slot back", || {
        holder(l.clone(), s.clone()).map(|h| h.is_none())
    })
    .await;
    assert!(is_cordoned(&client, "node-a").await, "node-a stays drained");
    second.cancel();
}

/// A node waiting for a slot says so in its NodeDrain, and that the slots
/// are held, not by whom: who holds them changes with every turn of the
/// fleet's other nodes, and each waiting node would write its NodeDrain
/// at every handover (as the kubelet's updates of its Node wake the
/// status writer) to say what its local status and its Event say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_nodes_nodedrain_is_not_written_again_as_the_slots_change_hands() {
    use k8s_openapi::api::coordination::v1::Lease;
    let (sim, client) = three_nodes().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "maintd");
    let slot = maintd::coordination::slot_name("nm-words", 0);
    // The slot is held by a node with no agent here, renewed as it goes.
    let hold = |holder: &str| {
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": slot, "namespace": "maintd",
                         "labels": {"maintd.io/reboot-group": "nm-words"}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 300,
                     "acquireTime": now, "renewTime": now},
        })
    };
    leases
        .create(
            &PostParams::default(),
            &serde_json::from_value(hold("node-b")).unwrap(),
        )
        .await
        .unwrap();
    let agent = agent_without_static_pods(&sim, "node-a");
    let progress = agent.progress().clone();
    let stop = CancellationToken::new();
    tokio::spawn(agent.run(stop.clone()));
    let nms: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    create(
        &nms,
        "words",
        json!({"nodeSelector": {"matchLabels": {"pool": "blue"}}, "stage": "Drain", "maxConcurrentDrains": 1}),
    )
    .await;
    let waiting = |d: &serde_json::Value| d["status"]["waiting"].as_str().map(str::to_string);
    let c = client.clone();
    eventually("node-a's NodeDrain says it waits for a held slot", || {
        let c = c.clone();
        async move {
            node_drain(&c, "node-a").await["status"]["waiting"]
                .as_str()
                .is_some_and(|w| w.ends_with("its slots are held"))
        }
    })
    .await;
    let said = waiting(&node_drain(&client, "node-a").await);
    let writes = || nodedrain_status_writes(&sim, "node-a").len();
    let before = writes();
    let nodes: Api<Node> = Api::all(client.clone());
    // The slot changes hands six times, each time as the agent's own
    // status shows; the Node is updated after each (as its kubelet does).
    for (i, holder) in ["node-c", "node-b", "node-c", "node-b", "node-c", "node-x"]
        .into_iter()
        .enumerate()
    {
        let mut lease: Lease = serde_json::from_value(hold(holder)).unwrap();
        lease.metadata.resource_version =
            leases.get(&slot).await.unwrap().metadata.resource_version;
        leases
            .replace(&slot, &PostParams::default(), &lease)
            .await
            .unwrap();
        let p = progress.clone();
        let words = format!("its slots are held by {holder}");
        eventually("the agent's own status names the new holder", || {
            let seen = p.status().waiting.is_some_and(|w| w.ends_with(&words));
            async move { seen }
        })
        .await;
        nodes
            .patch(
                "node-a",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"example.com/beat": i.to_string()}}}),
                ),
            )
            .await
            .unwrap();
        // Past the NodeDrain's pace for progress (5 s): a write due would
        // have gone out by now. Time here paces the input only.
        tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    }
    assert_eq!(
        writes() - before,
        0,
        "the NodeDrain was written again as the slot changed hands"
    );
    assert_eq!(waiting(&node_drain(&client, "node-a").await), said);
    assert!(!is_cordoned(&client, "node-a").await, "node-a only waits");
    // The Event that told the wait named the holder then.
    let (_, events) = raw(&sim, "GET", "/apis/events.k8s.io/v1/events", "", vec![]).await;
    let told: Vec<&str> = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "DrainWaiting" && e["regarding"]["name"] == "node-a")
        .filter_map(|e| e["note"].as_str())
        .collect();
    assert!(
        told.len() == 1 && told[0].ends_with("its slots are held by node-b"),
        "{told:?}"
    );
    stop.cancel();
}
