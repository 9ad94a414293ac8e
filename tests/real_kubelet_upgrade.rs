//! Upgrading and uninstalling deploy/ on a real node (scripts/real-node).
//! A new image (maintd's rebuilt, under a new tag) is rolled out while a
//! drain is held up by a budget: the new pod takes the drain over where
//! the old one left it — the node stays cordoned and tainted, the static
//! pods are not touched early, logind never sees two maintd locks — and,
//! the budget gone, finishes it and undoes it. Then `kubectl delete -k`
//! of the overlay, with nothing draining, leaves the node schedulable and
//! every manifest in the kubelet's directory.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;

use crate::real_kubelet::node::{PATIENCE, RealNode, image_archive};
use crate::real_kubelet::scenario::{self, App, Kind};
use crate::real_kubelet::timeline::{self, LockLog, MAINTD, secs};

/// `batch` goes first; `pinned` is held by its budget (one pod, at least
/// one available) until the test deletes the budget; then the static pod.
const APPS: [App; 3] = [
    App {
        name: "batch",
        kind: Kind::Deployment(2, None),
        class: None,
        stop: 1,
    },
    App {
        name: "pinned",
        kind: Kind::Deployment(1, Some(1)),
        class: Some("e2e-low"),
        stop: 1,
    },
    App {
        name: "static-a",
        kind: Kind::Static,
        class: None,
        stop: 1,
    },
];

/// The agent's status document, from its endpoint on the node's address.
async fn status(node: &RealNode) -> serde_json::Value {
    let (_, body) = node.endpoint("/v1/status").await;
    serde_json::from_str(&body).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_image_takes_the_drain_over_and_uninstalling_leaves_the_node_in_service() {
    let (node, client) = scenario::installed(Default::default()).await;
    let _pods = scenario::run_apps(&node, &client, &APPS).await;
    let manifests = scenario::manifests(&node, &APPS);
    let rebuilt = node.rebuilt_image(&image_archive()).await;

    // A drain held up by pinned's budget.
    scenario::taint(&node, "maintd.io/drain=upgrade:NoSchedule");
    let n = &node;
    crate::common::eventually_within(
        "the drain is blocked by pinned's budget",
        PATIENCE,
        || async move {
            let st = status(n).await;
            st["drain"]["phase"] == "Blocked"
                && st["drain"]["blockers"][0]["pod"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("pinned-"))
        },
    )
    .await;
    let old_pod = node.maintd_pod(&client, PATIENCE).await;
    let old_helper = node.logind.inhibitors();

    // The new image rolled out.
    let locks = LockLog::start(&node.logind);
    let t = Instant::now();
    let rollout = Timestamp::now();
    // Whether the node was ever out of maintd's hands during the rollout.
    let released_node = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watching = {
        let (c, name, flag) = (client.clone(), node.name.clone(), released_node.clone());
        tokio::spawn(async move {
            loop {
                let (cordoned, taints) = scenario::cordon_and_taints(&c, &name).await;
                if !cordoned || !taints.contains(&"maintd.io/draining:NoSchedule".into()) {
                    flag.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    node.import_maintd(&rebuilt, "e2e-next").await;
    node.apply("e2e-next");
    let new_pod = loop {
        let pod = node.maintd_pod(&client, PATIENCE).await;
        let image = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers[0].image.clone());
        if image.as_deref() == Some("localhost/maintd:e2e-next") {
            break pod;
        }
        assert!(t.elapsed() < PATIENCE, "the new image did not roll out");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let rolled_out = t.elapsed();
    assert_ne!(old_pod.metadata.name, new_pod.metadata.name);
    // The new agent has the drain where the old one left it, and its own
    // lock.
    crate::common::eventually_within("the new agent holds its lock", PATIENCE, || async move {
        let st = status(n).await;
        st["inhibitor"]["held"] == true && st["drain"]["phase"] == "Blocked"
    })
    .await;
    watching.abort();
    assert!(
        !released_node.load(std::sync::atomic::Ordering::SeqCst),
        "the node stayed cordoned and tainted through the rollout"
    );
    assert_eq!(
        scenario::files(&node.manifests()),
        manifests,
        "the static pod is not stashed early"
    );
    let new_lock: Vec<_> = node
        .logind
        .inhibitors()
        .into_iter()
        .filter(|i| i.who == "maintd")
        .collect();
    assert_eq!(new_lock.len(), 1);
    assert!(
        !old_helper
            .iter()
            .any(|i| i.who == "maintd" && i.pid == new_lock[0].pid),
        "the lock is the new node helper's: {new_lock:?}, before {old_helper:?}"
    );
    assert_eq!(
        locks.most_held("maintd"),
        1,
        "logind never saw two maintd locks: {:?}",
        locks.changes()
    );
    let released = locks
        .released("maintd", rollout)
        .expect("the old lock went with the old pod");
    let retaken = locks
        .changes()
        .into_iter()
        .find(|(at, h)| *at > released && h.iter().any(|x| x.starts_with("maintd ")))
        .map(|(at, _)| at)
        .expect("the new pod took the lock again");
    // What the old agent had done is not done again: batch's pods were
    // evicted once, before the rollout.
    let writes = timeline::writes(&node.audit_log());
    let evictions_after: Vec<String> = writes
        .iter()
        .filter(|w| w.user == MAINTD && w.subresource == "eviction" && w.at > rollout)
        .map(|w| format!("{} {}", w.name, w.code))
        .collect();
    assert!(
        evictions_after.iter().all(|e| e.starts_with("pinned-")),
        "after the rollout the new agent asks only for pinned: {evictions_after:?}"
    );
    eprintln!(
        "rolled out in {rolled_out:?}; no maintd lock for {:.2}s (old pod's went, new pod's came)",
        secs(released, retaken)
    );

    // The budget gone, the new agent finishes the drain, static pod too.
    Api::<PodDisruptionBudget>::namespaced(client.clone(), scenario::NS)
        .delete("pinned", &Default::default())
        .await
        .expect("pinned's budget is deleted");
    let c = client.clone();
    let name = node.name.clone();
    crate::common::eventually_within("the node reads Drained", PATIENCE, || {
        let (c, name) = (c.clone(), name.clone());
        async move {
            scenario::condition(&c, &name, "Drained").await
                == Some(("True".into(), "DrainCompleted".into()))
        }
    })
    .await;
    assert_eq!(
        scenario::files(&node.stash()),
        manifests,
        "the new node helper stashed the manifest"
    );

    // The maintenance ends; then maintd is uninstalled while nothing drains.
    scenario::taint(&node, "maintd.io/drain-");
    let dir = node.manifests();
    let want = manifests.clone();
    crate::common::eventually_within("the drain undone", PATIENCE, || {
        let (c, name, dir, want) = (c.clone(), name.clone(), dir.clone(), want.clone());
        async move {
            let (cordoned, taints) = scenario::cordon_and_taints(&c, &name).await;
            !cordoned && taints.is_empty() && scenario::files(&dir) == want
        }
    })
    .await;
    let t = Instant::now();
    let overlay = node.overlay("e2e-next");
    node.kubectl_ok(&[
        "delete",
        "-k",
        &overlay.to_string_lossy(),
        "--wait=true",
        "--timeout=120s",
    ]);
    let uninstalled = t.elapsed();
    let (cordoned, taints) = scenario::cordon_and_taints(&client, &node.name).await;
    assert!(
        !cordoned && taints.is_empty(),
        "the node is schedulable: {taints:?}"
    );
    assert_eq!(
        scenario::files(&node.manifests()),
        manifests,
        "every manifest is in the kubelet's directory"
    );
    assert!(
        scenario::files(&node.stash()).is_empty(),
        "nothing stays in the stash"
    );
    assert!(
        !node.logind.inhibitors().iter().any(|i| i.who == "maintd"),
        "maintd's lock went with it"
    );
    let mirror = format!("static-a-{}", node.name);
    let c2 = client.clone();
    crate::common::eventually_within("the static pod runs", PATIENCE, || {
        let (c, mirror) = (c2.clone(), mirror.clone());
        async move {
            Api::<k8s_openapi::api::core::v1::Pod>::namespaced(c, scenario::NS)
                .get_opt(&mirror)
                .await
                .ok()
                .flatten()
                .is_some_and(|p| crate::common::is_ready(&p))
        }
    })
    .await;
    let (_, left, _) = node.kubectl(&["get", "namespace", "maintd", "-o", "name"]);
    assert!(
        left.trim().is_empty(),
        "the maintd namespace is gone: {left}"
    );
    eprintln!("uninstalled in {uninstalled:?}");
}
