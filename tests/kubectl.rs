//! kubectl, a real and independent client, drives the simulated cluster:
//! get, apply, cordon, and a full `kubectl drain` of the busy node of the
//! realistic scenario.

use crate::common;

use common::kubectl::Kubectl;

use std::path::Path;
use std::time::Duration;

use maintd::drain::progress::EventKind;
use maintd_sim::{SimCluster, SimConfig, scenario};

async fn realistic() -> SimCluster {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/realistic.yaml");
    let scenario = scenario::load(&path).expect("the realistic scenario loads");
    let sim = SimCluster::start_with_scenario(SimConfig::default(), &scenario)
        .await
        .unwrap();
    sim.wait_settled(Duration::from_secs(60))
        .await
        .expect("the scenario settles");
    sim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_applies_cordons_and_drains() {
    let sim = realistic().await;
    let k = Kubectl::new(&sim);

    let nodes = k.ok(&["get", "nodes"]).await;
    for n in ["node-a", "node-b", "node-c"] {
        assert!(nodes.contains(n), "{nodes}");
    }
    assert!(nodes.contains("Ready"), "{nodes}");
    let wide = k.ok(&["get", "pods", "-A", "-o", "wide"]).await;
    assert!(wide.lines().next().unwrap().contains("NODE"), "{wide}");
    let on_a = wide.lines().filter(|l| l.contains(" node-a ")).count();
    assert_eq!(on_a, 110, "{wide}");

    let pdb = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: from-kubectl\n  namespace: default\nspec:\n  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app: nothing-yet\n";
    let applied = k.apply_yaml(pdb).await;
    assert!(
        applied.contains("poddisruptionbudget.policy/from-kubectl created"),
        "{applied}"
    );
    let again = k.apply_yaml(pdb).await;
    assert!(
        again.contains("unchanged") || again.contains("configured"),
        "{again}"
    );
    let pdbs = k.ok(&["get", "pdb", "-n", "default"]).await;
    assert!(pdbs.contains("from-kubectl"), "{pdbs}");

    // A cordon brings the node lifecycle controller's taint; an uncordon
    // takes it away.
    let unschedulable_taint = |node: &serde_json::Value| {
        node["spec"]["taints"].as_array().is_some_and(|ts| {
            ts.iter().any(|t| {
                t["key"] == "node.kubernetes.io/unschedulable" && t["effect"] == "NoSchedule"
            })
        })
    };
    k.ok(&["cordon", "node-b"]).await;
    let b = k.json(&["get", "node", "node-b"]).await;
    assert_eq!(b["spec"]["unschedulable"], true);
    let k_ref = &k;
    common::eventually("node-b carries the unschedulable taint", || async move {
        unschedulable_taint(&k_ref.json(&["get", "node", "node-b"]).await)
    })
    .await;
    k.ok(&["uncordon", "node-b"]).await;
    common::eventually("node-b's unschedulable taint is gone", || async move {
        !unschedulable_taint(&k_ref.json(&["get", "node", "node-b"]).await)
    })
    .await;

    let out = k
        .ok(&[
            "drain",
            "node-a",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=120s",
        ])
        .await;
    assert!(out.contains("node/node-a drained"), "{out}");
    let left = k
        .json(&[
            "get",
            "pods",
            "-A",
            "--field-selector",
            "spec.nodeName=node-a",
        ])
        .await;
    for pod in left["items"].as_array().unwrap() {
        let owner = pod["metadata"]["ownerReferences"][0]["kind"]
            .as_str()
            .unwrap_or("");
        let mirror = pod["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string();
        assert!(
            owner == "DaemonSet" || mirror,
            "only DaemonSet and mirror pods stay: {}",
            pod["metadata"]["name"]
        );
    }
}

async fn small() -> SimCluster {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/small.yaml");
    let scenario = scenario::load(&path).expect("the small scenario loads");
    let sim = SimCluster::start_with_scenario(SimConfig::default(), &scenario)
        .await
        .unwrap();
    sim.wait_settled(Duration::from_secs(60))
        .await
        .expect("the scenario settles");
    sim
}

/// kubectl's typed `create` commands send their object as protobuf
/// (`application/vnd.kubernetes.protobuf`); each one creates what it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_kubectl_create_commands_create_their_objects() {
    let sim = small().await;
    let k = Kubectl::new(&sim);

    let out = k.ok(&["create", "namespace", "x"]).await;
    assert!(out.contains("namespace/x created"), "{out}");
    let ns = k.json(&["get", "namespace", "x"]).await;
    assert_eq!(ns["metadata"]["name"], "x");
    assert_eq!(ns["status"]["phase"], "Active");

    // Only the Deployment object is checked: its pods are the Deployment
    // controller's work, not the protobuf body's.
    let out = k
        .ok(&[
            "create",
            "deployment",
            "web",
            "--image=registry.example/web:1",
            "--port=8080",
            "-n",
            "x",
        ])
        .await;
    assert!(out.contains("deployment.apps/web created"), "{out}");
    let table = k.ok(&["get", "deploy", "-n", "x"]).await;
    assert!(table.lines().any(|l| l.starts_with("web ")), "{table}");
    let deploy = k.json(&["get", "deploy", "web", "-n", "x"]).await;
    assert_eq!(deploy["spec"]["replicas"], 1);
    assert_eq!(deploy["spec"]["selector"]["matchLabels"]["app"], "web");
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "registry.example/web:1");
    assert_eq!(container["ports"][0]["containerPort"], 8080);
    let out = k
        .ok(&["scale", "deployment", "web", "-n", "x", "--replicas=3"])
        .await;
    assert!(out.contains("deployment.apps/web scaled"), "{out}");
    let scale = k
        .ok(&[
            "get",
            "--raw",
            "/apis/apps/v1/namespaces/x/deployments/web/scale",
        ])
        .await;
    let scale: serde_json::Value = serde_json::from_str(&scale).unwrap();
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], "app=web");
    // A pointer's zero is not dropped: zero replicas stay zero.
    k.ok(&[
        "create",
        "deployment",
        "idle",
        "--image=registry.example/web:1",
        "--replicas=0",
        "-n",
        "x",
    ])
    .await;
    let idle = k.json(&["get", "deploy", "idle", "-n", "x"]).await;
    assert_eq!(idle["spec"]["replicas"], 0);

    k.ok(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=mode=fast",
        "-n",
        "x",
    ])
    .await;
    let cm = k.json(&["get", "configmap", "settings", "-n", "x"]).await;
    assert_eq!(cm["data"]["mode"], "fast");

    k.ok(&[
        "create",
        "secret",
        "generic",
        "token",
        "--from-literal=key=s3cret",
        "-n",
        "x",
    ])
    .await;
    let secret = k.json(&["get", "secret", "token", "-n", "x"]).await;
    assert_eq!(secret["data"]["key"], "czNjcmV0", "base64 of s3cret");

    k.ok(&["create", "serviceaccount", "builder", "-n", "x"])
        .await;
    k.ok(&["get", "serviceaccount", "builder", "-n", "x"]).await;
    k.ok(&[
        "create",
        "service",
        "clusterip",
        "web",
        "--tcp=80:8080",
        "-n",
        "x",
    ])
    .await;
    let svc = k.json(&["get", "service", "web", "-n", "x"]).await;
    assert_eq!(svc["spec"]["ports"][0]["port"], 80);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);

    k.ok(&["create", "priorityclass", "batch-low", "--value=-10"])
        .await;
    let pc = k.json(&["get", "priorityclass", "batch-low"]).await;
    assert_eq!(pc["value"], -10);

    k.ok(&[
        "create",
        "poddisruptionbudget",
        "web",
        "--selector=app=web",
        "--max-unavailable=25%",
        "-n",
        "x",
    ])
    .await;
    let pdb = k.json(&["get", "pdb", "web", "-n", "x"]).await;
    assert_eq!(pdb["spec"]["maxUnavailable"], "25%");

    k.ok(&[
        "create",
        "clusterrole",
        "reader",
        "--verb=get,list",
        "--resource=pods",
    ])
    .await;
    k.ok(&[
        "create",
        "rolebinding",
        "read",
        "--clusterrole=reader",
        "--serviceaccount=x:builder",
        "-n",
        "x",
    ])
    .await;
    let rb = k.json(&["get", "rolebinding", "read", "-n", "x"]).await;
    assert_eq!(rb["roleRef"]["name"], "reader");
    assert_eq!(rb["subjects"][0]["name"], "builder");
}

/// The everyday commands against a node and its pods: get, label, taint and
/// its removal, cordon, apply, describe and drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_taints_describes_and_drains_a_node() {
    let sim = small().await;
    let k = Kubectl::new(&sim);

    let nodes = k.ok(&["get", "nodes", "-o", "wide"]).await;
    assert!(
        nodes.contains("node-a") && nodes.contains("node-b"),
        "{nodes}"
    );

    let out = k
        .ok(&["taint", "node", "node-a", "dedicated=batch:NoSchedule"])
        .await;
    assert!(out.contains("node/node-a tainted"), "{out}");
    let node = k.json(&["get", "node", "node-a"]).await;
    assert!(
        node["spec"]["taints"].as_array().is_some_and(|t| t
            .iter()
            .any(|t| t["key"] == "dedicated"
                && t["value"] == "batch"
                && t["effect"] == "NoSchedule")),
        "{}",
        node["spec"]
    );
    let described = k.ok(&["describe", "node", "node-a"]).await;
    assert!(
        described.contains("dedicated=batch:NoSchedule"),
        "{described}"
    );
    let out = k
        .ok(&["taint", "node", "node-a", "dedicated=batch:NoSchedule-"])
        .await;
    assert!(out.contains("node/node-a untainted"), "{out}");
    let node = k.json(&["get", "node", "node-a"]).await;
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(taints.iter().all(|t| t["key"] != "dedicated"), "{taints:?}");

    k.ok(&["label", "node", "node-b", "pool=spare"]).await;
    let labelled = k.ok(&["get", "nodes", "-l", "pool=spare"]).await;
    assert!(
        labelled.contains("node-b") && !labelled.contains("node-a"),
        "{labelled}"
    );

    k.ok(&["cordon", "node-b"]).await;
    assert_eq!(
        k.json(&["get", "node", "node-b"]).await["spec"]["unschedulable"],
        true
    );
    k.ok(&["uncordon", "node-b"]).await;

    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  namespace: default\ndata:\n  a: \"1\"\n";
    let out = k.apply_yaml(cm).await;
    assert!(out.contains("configmap/applied created"), "{out}");
    let out = k.apply_yaml(&cm.replace("\"1\"", "\"2\"")).await;
    assert!(out.contains("configmap/applied configured"), "{out}");
    assert_eq!(k.json(&["get", "cm", "applied"]).await["data"]["a"], "2");

    // describe lists the node's pods (fieldSelector spec.nodeName) and the
    // events of the object (fieldSelector involvedObject.*).
    let described = k.ok(&["describe", "node", "node-a"]).await;
    for want in [
        "Name:               node-a",
        "Non-terminated Pods:",
        "bare",
        "Events:",
    ] {
        assert!(described.contains(want), "{want}: {described}");
    }
    // The pod's node is shown with the node's own address, and a running
    // pod's container is ready.
    let node = k.json(&["get", "node", "node-a"]).await;
    let ip = node["status"]["addresses"][0]["address"].as_str().unwrap();
    let described = k.ok(&["describe", "pod", "bare", "-n", "default"]).await;
    for want in [
        "Name:         bare",
        &format!("Node:         node-a/{ip}"),
        "Status:       Running",
        "Ready:          True",
        "Events:",
    ] {
        assert!(described.contains(want), "{want}: {described}");
    }

    // There are no containers, and kubectl says so rather than "not found".
    let (ok, _, err) = k.run(&["logs", "bare", "-n", "default"]).await;
    assert!(!ok && err.contains("not simulated"), "{err}");

    let out = k
        .ok(&[
            "drain",
            "node-a",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            "--timeout=120s",
        ])
        .await;
    assert!(out.contains("node/node-a drained"), "{out}");
    let left = k
        .json(&[
            "get",
            "pods",
            "-A",
            "--field-selector",
            "spec.nodeName=node-a",
        ])
        .await;
    for pod in left["items"].as_array().unwrap() {
        let owner = pod["metadata"]["ownerReferences"][0]["kind"]
            .as_str()
            .unwrap_or("");
        let mirror = pod["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string();
        let done = pod["status"]["phase"] == "Succeeded";
        assert!(
            owner == "DaemonSet" || mirror || done,
            "only DaemonSet, mirror and finished pods stay: {}",
            pod["metadata"]["name"]
        );
    }
}

/// A Deployment and a StatefulSet applied with kubectl roll out, and
/// kubectl says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_workloads_and_watches_them_roll_out() {
    let sim = SimCluster::start(SimConfig::default()).await.unwrap();
    let k = Kubectl::new(&sim);
    for node in ["node-a", "node-b"] {
        let yaml = format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: {node}\n");
        k.apply_yaml(&yaml).await;
    }
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\n  labels:\n    app: web\nspec:\n  replicas: 3\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: nginx\n        image: nginx\n";
    let applied = k.apply_yaml(deployment).await;
    assert!(applied.contains("deployment.apps/web created"), "{applied}");
    let out = k
        .ok(&["rollout", "status", "deployment/web", "--timeout=60s"])
        .await;
    assert!(
        out.contains("deployment \"web\" successfully rolled out"),
        "{out}"
    );
    let table = k.ok(&["get", "deploy"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..4], ["web", "3/3", "3", "3"], "{table}");
    let rs = k.json(&["get", "rs", "-l", "app=web"]).await;
    let items = rs["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{rs}");
    assert_eq!(
        items[0]["metadata"]["ownerReferences"][0]["kind"],
        "Deployment"
    );
    let pods = k.ok(&["get", "pods", "-l", "app=web", "-o", "name"]).await;
    assert_eq!(pods.lines().count(), 3, "{pods}");

    // A StatefulSet too: its pods by ordinal, its rollout watched.
    let statefulset = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\n  namespace: default\nspec:\n  replicas: 2\n  serviceName: db\n  selector:\n    matchLabels:\n      app: db\n  template:\n    metadata:\n      labels:\n        app: db\n    spec:\n      containers:\n      - name: db\n        image: postgres\n";
    k.apply_yaml(statefulset).await;
    let out = k
        .ok(&["rollout", "status", "statefulset/db", "--timeout=60s"])
        .await;
    assert!(
        out.contains("partitioned roll out complete") || out.contains("rolling update complete"),
        "{out}"
    );
    let sts = k.ok(&["get", "sts", "db"]).await;
    assert!(
        sts.lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().nth(1) == Some("2/2")),
        "{sts}"
    );
    let pods = k.ok(&["get", "pods", "-l", "app=db", "-o", "name"]).await;
    assert_eq!(
        pods.lines().collect::<Vec<_>>(),
        ["pod/db-0", "pod/db-1"],
        "{pods}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncordon_mid_drain_is_undone_with_a_warning_event() {
    let sim = common::scenario("small.yaml").await;
    let k = Kubectl::new(&sim);
    // A budget that allows no disruption keeps the drain going.
    k.apply_yaml(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: api, namespace: default}\n\
         spec: {maxUnavailable: 0, selector: {matchLabels: {app: api}}}\n",
    )
    .await;
    let agent = common::agent::RunningAgent::start(&sim, "node-a", None);
    common::taint(&sim.client(), "node-a", "maintd.io/drain", Some("")).await;
    agent
        .wait_for("the api pods blocked by their budget", |evs| {
            evs.iter().any(|e| {
                e.event == EventKind::PodBlocked
                    && e.pod.as_deref().is_some_and(|p| p.starts_with("api-"))
            })
        })
        .await;
    assert!(common::is_cordoned(&sim.client(), "node-a").await);

    // kubectl uncordon removes the field, which leaves no owner to name.
    k.ok(&["uncordon", "node-a"]).await;
    agent.wait_event(EventKind::NodeRecordoned).await;
    assert!(
        common::is_cordoned(&sim.client(), "node-a").await,
        "cordoned again"
    );
    // What `kubectl get events` shows on a real cluster (the agent writes
    // events.k8s.io/v1 Events; the API server serves them as core/v1 too).
    let recorded = || async {
        let (_, list) = common::raw(&sim, "GET", "/apis/events.k8s.io/v1/events", "", vec![]).await;
        let mut notes: Vec<String> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["reason"] == "Recordoned")
            .filter_map(|e| e["note"].as_str().map(String::from))
            .collect();
        notes.sort();
        notes
    };
    // (Naming the owner of `unschedulable: false`, when a client wrote
    // one, is covered by the unit test in src/agent/cordon.rs.)
    common::eventually("the Recordoned Event recorded", || async {
        !recorded().await.is_empty()
    })
    .await;
    let notes = recorded().await;
    assert!(
        notes.iter().any(|n| n.starts_with(
            "the node was uncordoned (by a client the Node's managedFields do not name"
        )),
        "{notes:?}"
    );
    agent.stop().await;
}
