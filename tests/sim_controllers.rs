//! The simulated cluster behaves like one, seen through kube-rs: graceful
//! deletion, DaemonSet and ReplicaSet controllers, PDB-paced eviction,
//! static pods, and the shipped scenarios. Waits are on watch events; the
//! timeouts only keep a broken build from hanging.

use std::path::Path;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{
    Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, WatchEvent, WatchParams,
};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{WatchStreamExt, watcher};
use maintd_sim::scenario::Scenario;
use maintd_sim::{SimCluster, SimConfig};

const LIMIT: Duration = Duration::from_secs(60);

async fn cluster(scenario_yaml: &str) -> SimCluster {
    let scenario = Scenario::from_yaml(scenario_yaml).unwrap();
    start(&scenario).await
}

async fn start(scenario: &Scenario) -> SimCluster {
    let config = SimConfig {
        static_pod_poll: Duration::from_millis(50),
        ..SimConfig::default()
    };
    let sim = SimCluster::start_with_scenario(config, scenario)
        .await
        .unwrap();
    sim.wait_settled(LIMIT).await.unwrap();
    sim
}

fn shipped(name: &str) -> Scenario {
    maintd_sim::scenario::load(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/scenarios")
            .join(name),
    )
    .unwrap()
}

fn ready(p: &Pod) -> bool {
    let conds = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conds.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn pods_on(api: &Api<Pod>, node: &str, labels: &str) -> Vec<Pod> {
    let lp = ListParams::default()
        .fields(&format!("spec.nodeName={node}"))
        .labels(labels);
    api.list(&lp).await.unwrap().items
}

/// Waits for the first pod matching `labels` that satisfies `pred`.
async fn first_pod(api: &Api<Pod>, labels: &str, pred: impl Fn(&Pod) -> bool + Send + Sync) -> Pod {
    let stream = watcher(api.clone(), watcher::Config::default().labels(labels)).applied_objects();
    let mut found = stream.try_filter(|p| std::future::ready(pred(p))).boxed();
    tokio::time::timeout(LIMIT, found.try_next())
        .await
        .expect("timed out")
        .unwrap()
        .expect("stream ended")
}

async fn next<S>(events: &mut S) -> WatchEvent<Pod>
where
    S: futures::Stream<Item = Result<WatchEvent<Pod>, kube::Error>> + Unpin,
{
    let ev = tokio::time::timeout(LIMIT, events.try_next()).await;
    ev.expect("timed out").unwrap().expect("watch ended")
}

const TWO_NODES: &str = "
objects:
- {apiVersion: v1, kind: Node, metadata: {name: node-a}}
- {apiVersion: v1, kind: Node, metadata: {name: node-b}}
- apiVersion: v1
  kind: Pod
  metadata: {name: slow, annotations: {sim.maintd.io/shutdown-seconds: '600'}}
  spec: {nodeName: node-a}
- apiVersion: v1
  kind: Pod
  metadata: {name: quick, annotations: {sim.maintd.io/shutdown-seconds: '0.3'}}
  spec: {nodeName: node-a}
";

#[tokio::test]
async fn graceful_deletion_is_seen_through_a_watch() {
    let sim = cluster(TWO_NODES).await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let quick = pods.get("quick").await.unwrap();
    assert_eq!(
        quick.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert!(
        quick
            .status
            .as_ref()
            .unwrap()
            .pod_ip
            .as_deref()
            .unwrap()
            .starts_with("10.244.")
    );

    for (name, second_grace) in [("quick", None), ("slow", Some(1))] {
        let rv = pods
            .get(name)
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let wp = WatchParams::default().fields(&format!("metadata.name={name}"));
        let mut events = pods.watch(&wp, &rv).await.unwrap().boxed();
        pods.delete(name, &DeleteParams::default()).await.unwrap();
        let WatchEvent::Modified(marked) = next(&mut events).await else {
            panic!("expected MODIFIED")
        };
        assert!(
            marked.metadata.deletion_timestamp.is_some(),
            "{name} is marked for deletion first"
        );
        assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(30));
        if let Some(grace) = second_grace {
            // 600 s of shutdown time and 30 s of grace: only a second,
            // shorter delete lets the pod go within the test's limit.
            pods.delete(name, &DeleteParams::default().grace_period(grace))
                .await
                .unwrap();
            let WatchEvent::Modified(shorter) = next(&mut events).await else {
                panic!("expected MODIFIED")
            };
            assert_eq!(
                shorter.metadata.deletion_grace_period_seconds,
                Some(grace as i64)
            );
        }
        match next(&mut events).await {
            WatchEvent::Deleted(gone) => assert_eq!(gone.metadata.uid, marked.metadata.uid),
            other => panic!("expected DELETED for {name}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn daemonset_pods_come_back_unless_an_untolerated_taint_forbids() {
    let sim = start(&shipped("small.yaml")).await;
    let client = sim.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let sets: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
    let nodes: Api<Node> = Api::all(client);
    let old = pods_on(&pods, "node-b", "app=agent").await.remove(0);
    let old_uid = old.metadata.uid.clone().unwrap();
    pods.delete(
        old.metadata.name.as_ref().unwrap(),
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    let new = first_pod(&pods, "app=agent", |p| {
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("node-b")
            && p.metadata.uid.as_ref() != Some(&old_uid)
            && ready(p)
    })
    .await;
    assert!(new.metadata.name.unwrap().starts_with("agent-"));

    // A cordon alone does not stop it (DaemonSet pods tolerate it)...
    nodes
        .patch(
            "node-b",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    // ...a NoSchedule taint the pod does not tolerate does.
    let taint = serde_json::json!({"spec": {"taints": [{"key": "maintd.io/draining", "effect": "NoSchedule"}]}});
    nodes
        .patch("node-b", &PatchParams::default(), &Patch::Merge(taint))
        .await
        .unwrap();
    let current = pods_on(&pods, "node-b", "app=agent").await.remove(0);
    pods.delete(
        current.metadata.name.as_ref().unwrap(),
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    // The controller has seen the deletion once nothing is misscheduled; had
    // it recreated the pod on node-b, that pod would count as misscheduled.
    let settled = await_condition(sets.clone(), "agent", |ds: Option<&DaemonSet>| {
        let st = ds.and_then(|d| d.status.as_ref());
        st.is_some_and(|s| {
            s.number_misscheduled == 0
                && s.desired_number_scheduled == 1
                && s.current_number_scheduled == 1
        })
    });
    tokio::time::timeout(LIMIT, settled).await.unwrap().unwrap();
    assert!(
        pods_on(&pods, "node-b", "app=agent").await.is_empty(),
        "not recreated on the tainted node"
    );
    assert_eq!(pods_on(&pods, "node-a", "app=agent").await.len(), 1);
}

const PDB_PACED: &str = "
objects:
- {apiVersion: v1, kind: Node, metadata: {name: node-a}}
- {apiVersion: v1, kind: Node, metadata: {name: node-b}}
- apiVersion: apps/v1
  kind: ReplicaSet
  metadata: {name: web, annotations: {sim.maintd.io/initial-node: node-a}}
  spec:
    replicas: 2
    template:
      metadata:
        labels: {app: web}
        annotations: {sim.maintd.io/startup-seconds: '3', sim.maintd.io/shutdown-seconds: '0.5'}
- apiVersion: policy/v1
  kind: PodDisruptionBudget
  metadata: {name: web-pdb}
  spec: {maxUnavailable: 1, selector: {matchLabels: {app: web}}}
";

#[tokio::test]
async fn replacement_on_another_node_lets_the_next_pdb_paced_eviction_through() {
    let sim = cluster(PDB_PACED).await;
    let client = sim.client_with(false);
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client);
    let originals: Vec<String> = pods_on(&pods, "node-a", "app=web")
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(originals.len(), 2, "both replicas start on node-a");
    // The disruption controller catches up after its lag, as on a cluster.
    eventually("the budget allows one disruption", || {
        let pdbs = pdbs.clone();
        async move {
            pdbs.get("web-pdb")
                .await
                .unwrap()
                .status
                .is_some_and(|s| s.disruptions_allowed == Some(1))
        }
    })
    .await;

    nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    pods.evict(&originals[0], &EvictParams::default())
        .await
        .unwrap();
    let err = pods
        .evict(&originals[1], &EvictParams::default())
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}")
    };
    assert_eq!(
        (status.code, status.reason.as_str()),
        (429, "TooManyRequests")
    );
    let causes = status.details.unwrap().causes;
    assert_eq!(causes[0].reason, "DisruptionBudget");
    // The count is the status the disruption controller last wrote: it
    // may not have seen the first eviction yet (2) or may have (1).
    assert!(
        causes[0]
            .message
            .starts_with("The disruption budget web-pdb needs 1 healthy pods and has "),
        "{}",
        causes[0].message
    );

    let replacement = first_pod(&pods, "app=web", |p| {
        !originals.contains(p.metadata.name.as_ref().unwrap()) && ready(p)
    })
    .await;
    assert_eq!(
        replacement.spec.unwrap().node_name.as_deref(),
        Some("node-b"),
        "the cordoned node is avoided"
    );
    // The API server decides from the budget's status: once the
    // controller has counted the replacement, one disruption is allowed.
    eventually("the budget counts the replacement", || {
        let pdbs = pdbs.clone();
        async move {
            pdbs.get("web-pdb")
                .await
                .unwrap()
                .status
                .is_some_and(|s| s.disruptions_allowed == Some(1))
        }
    })
    .await;
    pods.evict(&originals[1], &EvictParams::default())
        .await
        .unwrap();
}

/// The API server takes a disruption from the budget's status before it
/// deletes the pod, in two steps. A disruption controller pass that falls
/// between them sees the pod still there and recorded as disrupted, and
/// plans to look again when that record expires (two minutes). The pod's
/// deletion and its replacement must still bring the budget up to date at
/// once, as upstream re-syncs a budget on every change of its pods.
#[tokio::test]
async fn a_budget_seen_between_an_evictions_two_steps_catches_up_when_the_pod_goes() {
    let sim = cluster(PDB_PACED).await;
    let client = sim.client_with(false);
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client);
    let allows = |n: i32| {
        let pdbs = pdbs.clone();
        async move {
            pdbs.get("web-pdb")
                .await
                .unwrap()
                .status
                .is_some_and(|s| s.disruptions_allowed == Some(n))
        }
    };
    eventually("the budget allows one disruption", || allows(1)).await;
    let victim = pods_on(&pods, "node-a", "app=web").await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    // The eviction's first step, alone: the disruption is taken and the pod
    // recorded, the pod not deleted yet.
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    pdbs.patch_status(
        "web-pdb",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {
            "disruptionsAllowed": 0,
            "disruptedPods": {victim.clone(): now},
        }})),
    )
    .await
    .unwrap();
    // The controller passes over it, and keeps the record: the pod is live.
    eventually("the controller has seen the recorded disruption", || {
        let pdbs = pdbs.clone();
        async move {
            let st = pdbs.get("web-pdb").await.unwrap().status.unwrap();
            st.disruptions_allowed == Some(0) && st.current_healthy == Some(1)
        }
    })
    .await;
    // The second step.
    pods.delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the replacement is counted long before the record expires",
        || allows(1),
    )
    .await;
}

/// Waits (bounded) until `check` holds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..600 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

#[tokio::test]
async fn static_pod_follows_its_manifest_file() {
    let sim = start(&shipped("small.yaml")).await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "kube-system");
    let mirror = pods.get("node-proxy-node-a").await.unwrap();
    let annotations = mirror.metadata.annotations.clone().unwrap();
    assert_eq!(annotations["kubernetes.io/config.source"], "file");
    assert_eq!(
        annotations["kubernetes.io/config.mirror"],
        annotations["kubernetes.io/config.hash"]
    );
    let owner = &mirror.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Node", "node-a", Some(true))
    );
    assert_eq!(mirror.spec.as_ref().unwrap().priority, Some(2_000_001_000));

    let root = sim.state.config.static_pod_root.clone().unwrap();
    let (manifest, stash) = (
        root.join("node-a/node-proxy.yaml"),
        root.join("node-proxy.yaml.stash"),
    );
    std::fs::rename(&manifest, &stash).unwrap();
    let uid = mirror.metadata.uid.clone().unwrap();
    tokio::time::timeout(
        LIMIT,
        await_condition(
            pods.clone(),
            "node-proxy-node-a",
            conditions::is_deleted(&uid),
        ),
    )
    .await
    .unwrap()
    .unwrap();

    std::fs::rename(&stash, &manifest).unwrap();
    let back = first_pod(&pods, "component=node-proxy", ready).await;
    assert_eq!(back.metadata.name.as_deref(), Some("node-proxy-node-a"));

    // Deleted through the API while its file is there: the kubelet recreates it.
    let back_uid = back.metadata.uid.clone().unwrap();
    pods.evict("node-proxy-node-a", &EvictParams::default())
        .await
        .unwrap();
    let again = first_pod(&pods, "component=node-proxy", |p| {
        p.metadata.uid.as_ref() != Some(&back_uid) && ready(p)
    })
    .await;
    assert_eq!(again.metadata.name.as_deref(), Some("node-proxy-node-a"));
}

#[tokio::test]
async fn realistic_scenario_settles_with_a_full_node_a() {
    let sim = start(&shipped("realistic.yaml")).await;
    let pods: Api<Pod> = Api::all(sim.client());
    let on_a = pods_on(&pods, "node-a", "").await;
    assert_eq!(on_a.len(), 110);
    let mirrors = on_a
        .iter()
        .filter(|p| {
            p.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
        })
        .count();
    let owned_by = |kind: &str| {
        on_a.iter()
            .filter(|p| {
                p.metadata
                    .owner_references
                    .as_ref()
                    .is_some_and(|o| o.iter().any(|r| r.kind == kind))
            })
            .count()
    };
    assert_eq!(
        (mirrors, owned_by("DaemonSet"), owned_by("ReplicaSet")),
        (3, 4, 103)
    );
    for node in ["node-b", "node-c"] {
        let n = pods_on(&pods, node, "").await.len();
        assert!((4..=10).contains(&n), "{node} carries a few pods, not {n}");
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(sim.client(), "shop");
    // The disruption controller catches up after its lag, as on a cluster.
    eventually(
        "the web-frontend budget reads 20 expected, 15 desired, 5 allowed",
        || {
            let pdbs = pdbs.clone();
            async move {
                pdbs.get("web-frontend")
                    .await
                    .unwrap()
                    .status
                    .is_some_and(|w| {
                        (w.expected_pods, w.desired_healthy, w.disruptions_allowed)
                            == (Some(20), Some(15), Some(5))
                    })
            }
        },
    )
    .await;
}
