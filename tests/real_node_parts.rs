//! What else the agent writes, on the real control plane (Kubernetes 1.37)
//! with deploy/'s rights: medik8s' NodeMaintenance and its coordination
//! Lease, and static pods, whose mirror pods a stand-in for the kubelet
//! keeps as the kubelet does (made and removed with the node's own
//! credentials, from the manifests in the directory the agent stashes).

use crate::common;

use common::mirror_pods::MirrorPods;
use common::real::{PATIENCE, Real};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use maintd::config::Config;
use maintd::drain::progress::Phase;
use serde_json::{Value, json};

/// A medik8s NodeMaintenance naming the node drains it (the agent started
/// with `--medik8s`): its status reads as medik8s writes it, the node is
/// held in medik8s' Lease as node-maintenance; deleted, the node is back
/// in service and the Lease given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_medik8s_object_drains_the_node_and_holds_medik8s_lease() {
    let real = Real::get();
    let admin = real.admin().await;
    let (ns, node) = ("real-medik8s", "real-medik8s-a".to_string());
    real.namespace(&admin, ns).await;
    real.namespace(&admin, "medik8s-leases").await;
    real.node(&admin, &node, json!({})).await;
    for i in 0..2 {
        real.pod(&admin, ns, &format!("app-{i}"), &node, 0).await;
    }
    let manifests = tempfile::tempdir().unwrap();
    let mut config = Config::for_node(&node, manifests.path().to_path_buf());
    config.medik8s = true;
    let agent = common::agent::RunningAgent::start_with(config, real.agent_client(&node).await);

    let obj = json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
        "metadata": {"name": "real-medik8s"},
        "spec": {"nodeName": node, "reason": "disk replacement"},
    });
    crate::real_drain::create(&real, &obj);
    agent
        .wait_for_within("drained for medik8s", PATIENCE, |_| {
            agent.progress.status().phase == Phase::Drained
        })
        .await;
    let real_ref = &real;
    common::eventually_within(
        "the status reads as medik8s writes it",
        PATIENCE,
        || async move {
            let (_, out, _) = real_ref.kubectl(&[
                "get",
                "nodemaintenances.nodemaintenance.medik8s.io",
                "real-medik8s",
                "-o",
                "json",
            ]);
            let st = serde_json::from_str::<Value>(&out).unwrap_or_default()["status"].clone();
            st["phase"] == "Succeeded" && st["totalpods"] == 2 && st["evictionPods"] == 2
        },
    )
    .await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "medik8s-leases");
    let lease = leases
        .get(&format!("node-{node}"))
        .await
        .expect("medik8s' Lease");
    let spec = lease.spec.unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some("node-maintenance"));
    assert_eq!(spec.lease_duration_seconds, Some(3600));
    assert_eq!(
        lease.metadata.owner_references.unwrap_or_default()[0].kind,
        "Node"
    );

    real.kubectl_ok(&[
        "delete",
        "nodemaintenances.nodemaintenance.medik8s.io",
        "real-medik8s",
        "--wait=false",
    ]);
    let c = admin.clone();
    let n = node.clone();
    common::eventually_within("the node back in service", PATIENCE, || {
        let (c, n) = (c.clone(), n.clone());
        async move { !common::is_cordoned(&c, &n).await }
    })
    .await;
    let l = leases.clone();
    let name = format!("node-{node}");
    common::eventually_within("medik8s' Lease given back", PATIENCE, || {
        let (l, name) = (l.clone(), name.clone());
        async move {
            l.get(&name)
                .await
                .is_ok_and(|l| l.spec.and_then(|s| s.holder_identity).is_none())
        }
    })
    .await;
    agent.stop().await;
    real.remove_nodes(&admin, &[node]).await;
    real.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}

/// Two static pods beside an ordinary one: drained last, by moving their
/// manifests out of the kubelet's directory (the mirror pods go as the
/// kubelet sees them go); the maintenance over, the manifests are back and
/// so are the mirror pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pods_leave_last_and_come_back_on_a_real_control_plane() {
    let real = Real::get();
    let admin = real.admin().await;
    let (ns, node) = ("real-static", "real-static-a".to_string());
    real.namespace(&admin, ns).await;
    real.node(&admin, &node, json!({})).await;
    real.pod(&admin, ns, "app", &node, 0).await;
    let dir = tempfile::tempdir().unwrap();
    for name in ["etcd", "kube-proxy"] {
        std::fs::write(
            dir.path().join(format!("{name}.yaml")),
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n\
                 spec:\n  containers:\n  - name: c\n    image: registry.example/{name}:1\n"
            ),
        )
        .unwrap();
    }
    let before = common::dir_files(dir.path());
    let mirrors = MirrorPods::start(real.node_client(&node).await, &node, dir.path());
    let c = admin.clone();
    let n = node.clone();
    common::eventually_within("two mirror pods beside the app", PATIENCE, || {
        let (c, n) = (c.clone(), n.clone());
        async move { common::pods_on(&c, &n).await.len() == 3 }
    })
    .await;

    let agent = common::agent::RunningAgent::start_with(
        Config::for_node(&node, dir.path().to_path_buf()),
        real.agent_client(&node).await,
    );
    let patch = json!({"spec": {"taints": [{"key": "maintd.io/drain", "effect": "NoSchedule"}]}});
    Api::<k8s_openapi::api::core::v1::Node>::all(admin.clone())
        .patch(&node, &Default::default(), &kube::api::Patch::Merge(patch))
        .await
        .unwrap();
    agent
        .wait_for_within("drained, static pods too", PATIENCE, |_| {
            agent.progress.status().phase == Phase::Drained
        })
        .await;
    assert!(common::pods_on(&admin, &node).await.is_empty());
    assert!(
        common::dir_files(dir.path()).is_empty(),
        "the manifests left the directory"
    );
    let order: Vec<String> = agent
        .events()
        .iter()
        .filter(|e| e.event == maintd::drain::progress::EventKind::PodGone)
        .filter_map(|e| e.pod.clone())
        .collect();
    assert_eq!(order.first().map(String::as_str), Some("app"), "{order:?}");

    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(admin.clone());
    let current = nodes.get(&node).await.unwrap();
    let kept: Vec<Value> = current
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != "maintd.io/drain")
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    nodes
        .patch(
            &node,
            &Default::default(),
            &kube::api::Patch::Merge(json!({
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "spec": {"taints": kept},
            })),
        )
        .await
        .unwrap();
    let d = dir.path().to_path_buf();
    common::eventually_within("the manifests are back", PATIENCE, || {
        let d = d.clone();
        let before = before.clone();
        async move { common::dir_files(&d) == before }
    })
    .await;
    let c = admin.clone();
    let n = node.clone();
    common::eventually_within("the mirror pods are back, the node in service", PATIENCE, || {
        let (c, n) = (c.clone(), n.clone());
        async move {
            common::pods_on(&c, &n).await.len() == 2 && !common::is_cordoned(&c, &n).await
        }
    })
    .await;
    agent.stop().await;
    mirrors.stop().await;
    real.remove_nodes(&admin, &[node]).await;
    real.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}
