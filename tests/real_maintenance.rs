//! NodeMaintenance on the real control plane (Kubernetes 1.37): objects
//! selecting nodes by label, their aggregates written by the one status
//! writer, each node's NodeDrain, the agent's Events as `kubectl describe`
//! shows them, and a rolling maintenance whose turns end with a reboot,
//! never more nodes out of scheduling than it has slots. Every agent runs
//! with deploy/'s rights and a token bound to its node.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use common::agent::RunningAgent;
use common::real::{PATIENCE, Real};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use maintd::drain::progress::Phase;
use serde_json::{Value, json};

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

fn nodedrain(real: &Real, node: &str) -> Value {
    let (ok, out, _) = real.kubectl(&[
        "get",
        "nodedrain",
        node,
        "-o",
        "json",
        "--show-managed-fields",
    ]);
    if !ok {
        return Value::Null;
    }
    serde_json::from_str(&out).unwrap_or(Value::Null)
}

fn maintenance(real: &Real, name: &str) -> Value {
    let (ok, out, _) = real.kubectl(&[
        "get",
        "nodemaintenance",
        name,
        "-o",
        "json",
        "--show-managed-fields",
    ]);
    if !ok {
        return Value::Null;
    }
    serde_json::from_str(&out).unwrap_or(Value::Null)
}

/// `names` KWOK nodes labelled `pool=<pool>`, each with `pods` bare pods
/// in namespace `ns`, and an agent on each.
async fn pool(
    real: &Real,
    admin: &kube::Client,
    ns: &str,
    names: &[String],
    pods: usize,
) -> HashMap<String, (RunningAgent, tempfile::TempDir)> {
    real.namespace(admin, ns).await;
    let mut agents = HashMap::new();
    for n in names {
        real.node(admin, n, json!({"pool": ns})).await;
        for i in 0..pods {
            real.pod(admin, ns, &format!("{n}-p{i}"), n, 0).await;
        }
        agents.insert(n.clone(), crate::real_drain::agent(real, n).await);
    }
    agents
}

async fn cleanup(real: &Real, admin: &kube::Client, ns: &str, names: &[String], objects: &[&str]) {
    for o in objects {
        real.kubectl(&["delete", "nodemaintenance", o, "--wait=false"]);
    }
    real.remove_nodes(admin, names).await;
    real.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}

/// One object selecting two nodes by label: Cordon, then Drain, then
/// Complete. Each node's NodeDrain follows it, written by its own agent;
/// the object's aggregates are written by the status writer alone; the
/// agents' Events are what `kubectl describe node` and `kubectl get
/// events` show (one store for core/v1 and events.k8s.io/v1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodemaintenance_by_selector_cordons_drains_and_completes_with_its_aggregates() {
    let real = Real::get();
    let admin = real.admin().await;
    let ns = "real-nm";
    let names: Vec<String> = ["real-nm-a", "real-nm-b"].map(String::from).to_vec();
    let agents = pool(&real, &admin, ns, &names, 2).await;
    let nms = nodemaintenances(&admin);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": "real-nm"},
        "spec": {
            "nodeSelector": {"matchLabels": {"pool": ns}},
            "stage": "Cordon",
            "reason": "kernel upgrade",
        },
    }))
    .unwrap();
    nms.create(&Default::default(), &obj).await.unwrap();

    let real_ref = &real;
    common::eventually_within(
        "both nodes cordoned, nothing evicted",
        PATIENCE,
        || async move {
            ["real-nm-a", "real-nm-b"]
                .iter()
                .all(|n| nodedrain(real_ref, n)["status"]["phase"] == "Cordoned")
        },
    )
    .await;
    for n in &names {
        assert!(common::is_cordoned(&admin, n).await);
        assert_eq!(
            common::pods_on(&admin, n).await.len(),
            2,
            "Cordon evicts nothing"
        );
    }
    nms.patch(
        "real-nm",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"stage": "Drain"}})),
    )
    .await
    .unwrap();
    for (n, (agent, _)) in &agents {
        agent
            .wait_for_within(&format!("{n} drained"), PATIENCE, |_| {
                agent.progress.status().phase == Phase::Drained
            })
            .await;
    }
    common::eventually_within(
        "the aggregates count both nodes drained",
        PATIENCE,
        || async move {
            let st = &maintenance(real_ref, "real-nm")["status"];
            st["selectedNodes"] == 2 && st["drainedNodes"] == 2
        },
    )
    .await;
    let obj = maintenance(&real, "real-nm");
    let managers: Vec<&str> = obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["subresource"] == "status")
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["maintd/status-writer"], "{obj:#}");
    for n in &names {
        let d = nodedrain(&real, n);
        assert_eq!(d["status"]["phase"], "Drained", "{d:#}");
        assert_eq!(d["status"]["maintenances"], json!(["real-nm"]));
        assert_eq!(d["metadata"]["ownerReferences"][0]["kind"], "Node");
        let managers: Vec<&str> = d["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["manager"].as_str())
            .collect();
        assert!(
            managers.iter().all(|m| *m == format!("maintd/{n}")),
            "{managers:?}"
        );
    }
    // The Events, as kubectl shows them: the API server keeps core/v1 and
    // events.k8s.io/v1 Events in one store.
    common::eventually_within(
        "kubectl describe node shows the drain's Events",
        PATIENCE,
        || async move {
            let (_, out, _) = real_ref.kubectl(&["describe", "node", "real-nm-a"]);
            out.contains("DrainStarted") && out.contains("Drained")
        },
    )
    .await;
    let (_, pod_events, _) = real.kubectl(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        "reason=Evicted",
        "-o",
        "json",
    ]);
    let pod_events: Value = serde_json::from_str(&pod_events).unwrap_or_default();
    assert!(
        pod_events["items"]
            .as_array()
            .is_some_and(|i| !i.is_empty()),
        "the evicted pods' Events, through core/v1: {pod_events}"
    );

    nms.patch(
        "real-nm",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"stage": "Complete"}})),
    )
    .await
    .unwrap();
    let c = admin.clone();
    common::eventually_within("both nodes back in service", PATIENCE, || {
        let c = c.clone();
        async move {
            !common::is_cordoned(&c, "real-nm-a").await
                && !common::is_cordoned(&c, "real-nm-b").await
        }
    })
    .await;
    common::eventually_within("the NodeDrains say Idle", PATIENCE, || async move {
        ["real-nm-a", "real-nm-b"]
            .iter()
            .all(|n| nodedrain(real_ref, n)["status"]["phase"] == "Idle")
    })
    .await;
    for (_, (a, _)) in agents {
        a.stop().await;
    }
    cleanup(&real, &admin, ns, &names, &["real-nm"]).await;
}

/// The most nodes of `names` a watch saw unschedulable at once, from now
/// until the task is aborted.
fn most_unschedulable(
    client: &kube::Client,
    names: &[String],
) -> (Arc<Mutex<usize>>, tokio::task::JoinHandle<()>) {
    let most = Arc::new(Mutex::new(0));
    let api: Api<Node> = Api::all(client.clone());
    let (m, names) = (most.clone(), names.to_vec());
    let task = tokio::spawn(async move {
        let mut now: BTreeMap<String, bool> = BTreeMap::new();
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            if let Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = ev {
                let name = n.metadata.name.clone().unwrap_or_default();
                if names.contains(&name) {
                    let out = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
                    now.insert(name, out);
                    let count = now.values().filter(|u| **u).count();
                    let mut most = m.lock().unwrap();
                    *most = (*most).max(count);
                }
            }
        }
    });
    (most, task)
}

/// Four nodes, two slots, turns that end with a reboot: each node is
/// cordoned as it takes a slot, drained, waits for its reboot (the test
/// plays the updater: a new boot ID), is uncordoned, and only then does
/// its slot go to the next node. A Node watch never sees more than two
/// unschedulable at once; every node is drained once and done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_maintenance_reboots_each_node_in_turn_through_its_slots() {
    let real = Real::get();
    let admin = real.admin().await;
    let ns = "real-roll";
    let names: Vec<String> = (0..4).map(|i| format!("real-roll-{i}")).collect();
    let (most, watching) = most_unschedulable(&admin, &names);
    let agents = pool(&real, &admin, ns, &names, 2).await;
    let nms = nodemaintenances(&admin);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": "real-roll"},
        "spec": {
            "nodeSelector": {"matchLabels": {"pool": ns}},
            "stage": "Drain",
            "maxConcurrentDrains": 2,
            "waitForReboot": {"timeoutSeconds": 600},
        },
    }))
    .unwrap();
    let made = nms.create(&Default::default(), &obj).await.unwrap();
    let uid = made.metadata.uid.unwrap();

    let nodes: Api<Node> = Api::all(admin.clone());
    let mut rebooted: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE * 3;
    loop {
        let mut done = 0;
        for n in &names {
            let node = serde_json::to_value(nodes.get(n).await.unwrap()).unwrap();
            if maintd::api::turns::done(&node).contains(&uid) {
                done += 1;
                continue;
            }
            // The updater reboots a node once it is drained and holds its
            // turn (the turn started at the boot ID it has now).
            let drained = agents[n].0.progress.status().phase == Phase::Drained;
            let turn = maintd::api::turns::record(&node);
            if drained
                && !rebooted.contains(n)
                && turn.is_some_and(|t| {
                    t.uid == uid && Some(t.boot_id.as_str()) == maintd::api::turns::boot_id(&node)
                })
            {
                real.reboot(&admin, n).await;
                rebooted.push(n.clone());
            }
        }
        if done == names.len() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the rollout did not finish: rebooted {rebooted:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let c = admin.clone();
    let n2 = names.clone();
    common::eventually_within("every node back in service", PATIENCE, || {
        let (c, n2) = (c.clone(), n2.clone());
        async move {
            for n in &n2 {
                if common::is_cordoned(&c, n).await {
                    return false;
                }
            }
            true
        }
    })
    .await;
    watching.abort();
    let most = *most.lock().unwrap();
    assert!(
        (1..=2).contains(&most),
        "never more nodes unschedulable than slots: {most}"
    );
    assert_eq!(rebooted.len(), 4, "each node rebooted once: {rebooted:?}");
    for n in &names {
        assert!(
            common::pods_on(&admin, n).await.is_empty(),
            "{n} was drained"
        );
    }
    for (_, (a, _)) in agents {
        a.stop().await;
    }
    cleanup(&real, &admin, ns, &names, &["real-roll"]).await;
}
