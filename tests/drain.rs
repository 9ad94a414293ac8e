//! The agent draining a node of the simulated cluster, read back from what
//! a user would see: the sim's audit log and watch, the API, the agent's
//! status and events.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::agent::RunningAgent;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use maintd::drain::plan::{self, PlanOptions, PodInfo, PodType};
use maintd::drain::progress::{EventKind, Phase, PodState, StageState};
use maintd_sim::{SimCluster, SimConfig};
use serde_json::json;

/// The plan the agent will run, from the pods on the node now.
async fn plan_now(sim: &SimCluster, node: &str) -> plan::DrainPlan {
    let pods = pods_on(&sim.client(), node).await;
    let infos: Vec<PodInfo> = pods
        .iter()
        .map(|p| PodInfo::from_json(&serde_json::to_value(p).unwrap()))
        .collect();
    plan::build_plan(&infos, None, &PlanOptions::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stages_run_in_order_each_waiting_for_the_last_to_be_gone() {
    drains_in_order(scenario("realistic.yaml").await, PATIENCE).await;
}

/// On a busy cluster the disruption controller lags: a budget's status
/// says a replacement is not counted yet for seconds after it is Ready.
/// The drain still finishes, stage after stage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_disruption_controller_two_seconds_behind_the_drain_still_completes_in_order() {
    let config = SimConfig {
        disruption_lag: std::time::Duration::from_secs(2),
        ..SimConfig::default()
    };
    // Each budget-paced round waits up to 2 s more for the controller.
    let patience = std::time::Duration::from_secs(180);
    let started = std::time::Instant::now();
    drains_in_order(scenario_with("realistic.yaml", config).await, patience).await;
    println!(
        "drained in {:.1}s with a 2 s disruption lag",
        started.elapsed().as_secs_f64()
    );
}

/// Drains node-a of `sim` and checks that every stage's pods were gone
/// before the next stage's first eviction, and that every planned pod went.
async fn drains_in_order(sim: SimCluster, patience: std::time::Duration) {
    let client = sim.client();
    let plan = plan_now(&sim, "node-a").await;
    assert!(
        plan.stages.len() >= 8,
        "{:#?}",
        plan.stages.iter().map(|s| &s.label).collect::<Vec<_>>()
    );
    let stage_of: HashMap<String, usize> = plan
        .stages
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.pods.iter().map(move |p| (p.name.clone(), i)))
        .collect();

    // Every deletion of a node-a pod, with the resourceVersion it happened at.
    let pods: Api<Pod> = Api::all(client.clone());
    let start_rv = pods
        .list(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let deleted: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let sink = deleted.clone();
    let mut stream = pods
        .watch(
            &WatchParams::default().fields("spec.nodeName=node-a"),
            &start_rv,
        )
        .await
        .unwrap()
        .boxed();
    tokio::spawn(async move {
        while let Some(Ok(ev)) = stream.next().await {
            if let WatchEvent::Deleted(p) = ev {
                let rv: u64 = p.metadata.resource_version.unwrap().parse().unwrap();
                sink.lock().unwrap().insert(p.metadata.name.unwrap(), rv);
            }
        }
    });

    let agent = RunningAgent::start(&sim, "node-a", None);
    taint(&client, "node-a", "maintd.io/drain", Some("kernel")).await;
    agent
        .wait_for_within("DrainCompleted", patience, |evs| {
            evs.iter().any(|e| e.event == EventKind::DrainCompleted)
        })
        .await;

    // Evictions, in the API's own order (the store's resourceVersion). A
    // granted eviction writes, so its rv is its own; a refused one (429)
    // writes nothing and carries the store's rv at the time, which equals
    // the rv of the last write before it: it came after that write.
    let evictions: Vec<(String, u64, bool)> = sim
        .state
        .audit
        .entries()
        .into_iter()
        .filter(|e| e.verb == "evict")
        .map(|e| (e.name, e.rv, e.code < 300))
        .collect();
    let deleted = deleted.lock().unwrap().clone();
    for k in 0..plan.stages.len() - 1 {
        let last_gone = plan.stages[k]
            .pods
            .iter()
            .filter_map(|p| deleted.get(&p.name))
            .max()
            .copied();
        let Some(last_gone) = last_gone else { continue };
        for (name, rv, granted) in evictions
            .iter()
            .filter(|(n, _, _)| stage_of.get(n) == Some(&(k + 1)))
        {
            let after = if *granted {
                *rv > last_gone
            } else {
                *rv >= last_gone
            };
            assert!(
                after,
                "stage {} pod {name} evicted (rv {rv}, granted {granted}) before stage {} was gone (rv {last_gone})",
                k + 2,
                k + 1
            );
        }
        // Static pods are not evicted: their mirror pods go after the stage before.
        for p in &plan.stages[k + 1].pods {
            if let Some(rv) = deleted.get(&p.name) {
                assert!(
                    *rv > last_gone,
                    "{} went before stage {} was gone",
                    p.name,
                    k + 1
                );
            }
        }
    }
    // Every planned pod went, DaemonSet and static pods included.
    for s in &plan.stages {
        for p in &s.pods {
            assert!(
                deleted.contains_key(&p.name),
                "{} ({:?}) is still on the node",
                p.name,
                p.pod_type
            );
        }
    }
    // The agent's events list stages in plan order: Default < DaemonSet < Static, priorities ascending.
    let starts: Vec<(PodType, i32)> = agent
        .events()
        .iter()
        .filter(|e| e.event == EventKind::StageStarted)
        .map(|e| (e.pod_type.unwrap(), e.priority.unwrap()))
        .collect();
    let mut sorted = starts.clone();
    sorted.sort();
    assert_eq!(starts, sorted);
    // The status a user reads once it is over: the stages numbered from 1
    // in order, each done, every pod of each gone.
    let st = agent.progress.status();
    assert_eq!(st.phase, Phase::Drained);
    let numbers: Vec<usize> = st.stages.iter().map(|s| s.stage).collect();
    assert_eq!(numbers, (1..=st.stages.len()).collect::<Vec<_>>());
    assert_eq!(st.stages.len(), starts.len(), "one per stage started");
    let planned: usize = plan.stages.iter().map(|s| s.pods.len()).sum();
    assert_eq!((st.pods_total, st.pods_remaining), (planned, 0));
    for s in &st.stages {
        assert_eq!(s.state, StageState::Done, "stage {}", s.stage);
        assert!(
            s.pods
                .iter()
                .all(|p| p.state == PodState::Gone && p.blocker.is_none()),
            "stage {}: {:?}",
            s.stage,
            s.pods
        );
    }
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_eviction_names_its_budget_and_drains_once_a_replacement_is_ready() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    let agent = RunningAgent::start(&sim, "node-a", None);
    taint(&client, "node-a", "maintd.io/drain", Some("")).await;
    agent
        .wait_for("a web pod blocked by its budget", |evs| {
            // The count is the budget's status as last recomputed by the
            // disruption controller, which lags the evictions (2 or 3 here,
            // as on a real cluster); the agent reports the server's words.
            // Its turn behind the budget its own evictions used (queued),
            // or refused by the budget (blocked): either names it.
            evs.iter().any(|e| {
                matches!(e.event, EventKind::PodBlocked | EventKind::PodQueued)
                    && e.message
                        .starts_with("The disruption budget web needs 2 healthy pods and has ")
            })
        })
        .await;
    agent.wait_event(EventKind::DrainCompleted).await;
    let left = pods_on(&client, "node-a").await;
    assert!(
        left.iter()
            .all(|p| !p.metadata.name.as_deref().unwrap_or("").starts_with("web-")),
        "web pods left node-a"
    );
    let web_elsewhere = pods_on(&client, "node-b")
        .await
        .into_iter()
        .filter(|p| owner_kind(p).as_deref() == Some("ReplicaSet"))
        .count();
    assert!(web_elsewhere >= 3, "the replacements run on node-b");
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_pods_do_not_come_back_and_undo_keeps_an_admins_cordon() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    let nodes: Api<Node> = Api::all(client.clone());
    // An admin cordoned the node before the maintenance.
    nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let agent = RunningAgent::start(&sim, "node-a", None);
    taint(&client, "node-a", "maintd.io/drain", Some("x")).await;
    agent.wait_event(EventKind::DrainCompleted).await;

    // The DaemonSet controller has seen node-a with maintd's taint and does
    // not count it any more; no DaemonSet pod runs there.
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
    eventually("the DaemonSet leaves node-a out", || {
        let dss = dss.clone();
        async move {
            dss.get("agent")
                .await
                .unwrap()
                .status
                .unwrap()
                .desired_number_scheduled
                == 1
        }
    })
    .await;
    let left = pods_on(&client, "node-a").await;
    assert!(
        left.iter()
            .all(|p| owner_kind(p).as_deref() != Some("DaemonSet")),
        "no DaemonSet pod on node-a"
    );
    let names: Vec<_> = left
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["pinned"], "only the opted-out pod stays");

    taint(&client, "node-a", "maintd.io/drain", None).await;
    agent.wait_event(EventKind::UndoCompleted).await;
    let node = nodes.get("node-a").await.unwrap();
    assert_eq!(
        node.spec.as_ref().unwrap().unschedulable,
        Some(true),
        "the admin's cordon stays"
    );
    let taints = node.spec.unwrap().taints.unwrap_or_default();
    assert!(
        taints.iter().all(|t| t.key != "maintd.io/draining"),
        "maintd's taint is gone"
    );
    // The node lifecycle controller's taint of the admin's cordon is not
    // maintd's to take.
    assert!(
        taints
            .iter()
            .any(|t| t.key == "node.kubernetes.io/unschedulable" && t.effect == "NoSchedule"),
        "{taints:?}"
    );
    assert!(
        !node
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("maintd.io/cordoned")
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_manifests_are_stashed_and_restored_byte_for_byte() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    let dir = sim.static_pod_dir("node-a").unwrap();
    let before: Vec<(String, Vec<u8>)> = dir_files(&dir);
    assert_eq!(before.len(), 1);
    let agent = RunningAgent::start(&sim, "node-a", None);
    taint(&client, "node-a", "maintd.io/drain", Some("x")).await;
    agent.wait_event(EventKind::DrainCompleted).await;
    assert!(
        dir_files(&dir).is_empty(),
        "the manifest left the kubelet's directory"
    );
    assert!(
        pods_on(&client, "node-a")
            .await
            .iter()
            .all(|p| !is_mirror(p)),
        "the mirror pod is gone"
    );
    let stash = dir.join(".maintd-stash");
    assert!(
        stash.is_dir(),
        "the stash is a dot-directory inside the manifest directory"
    );

    taint(&client, "node-a", "maintd.io/drain", None).await;
    agent.wait_event(EventKind::UndoCompleted).await;
    assert_eq!(
        dir_files(&dir),
        before,
        "the manifests are back, byte for byte"
    );
    let restored: Vec<String> = agent
        .events()
        .into_iter()
        .filter(|e| e.event == EventKind::StaticPodsRestored)
        .map(|e| e.message)
        .collect();
    assert_eq!(
        restored,
        [format!("restored {}", before[0].0)],
        "the restore is said once, naming the manifest"
    );
    eventually("the mirror pod is back", || {
        let c = client.clone();
        async move { pods_on(&c, "node-a").await.iter().any(is_mirror) }
    })
    .await;
    agent.stop().await;
}

/// Pods a real API server accepts but the agent must read with care: an
/// opt-out with the wrong value (drained, and said so), an owner of a kind
/// the agent does not know (drained like any controlled pod). And a static
/// pod directory that is not there: the mirror pod is a named blocker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_pods_and_a_missing_manifest_dir_are_reported_and_the_rest_drains() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    for (name, extra) in [
        (
            "odd-optout",
            json!({"metadata": {"annotations": {"maintd.io/drain": "Skip"}}}),
        ),
        (
            "widget-owned",
            json!({"metadata": {"ownerReferences": [{
                "apiVersion": "example.com/v1", "kind": "Widget", "name": "w",
                "uid": "7f0c1a52-0d7e-4b8e-9a55-0c2b5d1f9e01", "controller": true,
            }]}}),
        ),
    ] {
        let mut pod = pod_json("default", name, "node-a", json!({}));
        json_patch::merge(&mut pod, &extra);
        post_pod(&sim, &pod).await;
    }
    let agent = RunningAgent::start(
        &sim,
        "node-a",
        Some("/nonexistent/maintd-test/manifests".into()),
    );
    taint(&client, "node-a", "maintd.io/drain", Some("x")).await;
    // Everything but the static pod and the opted-out one drains.
    eventually(
        "every pod but the static one and the opted-out one is gone",
        || async {
            pods_on(&client, "node-a")
                .await
                .iter()
                .all(|p| is_mirror(p) || p.metadata.name.as_deref() == Some("pinned"))
        },
    )
    .await;
    agent
        .wait_for("a warning about the static pod directory", |evs| {
            evs.iter().any(|e| {
                e.event == EventKind::Warning
                    && e.message.contains("/nonexistent/maintd-test/manifests")
            })
        })
        .await;
    // It does not stall in silence: the mirror pod is a named blocker that
    // says where its manifest was looked for, and the drain is Blocked.
    let progress = agent.progress.clone();
    eventually("the static pod is a named blocker", || {
        let st = progress.status();
        async move {
            st.phase == Phase::Blocked
                && st.blockers.iter().any(|b| {
                    b.namespace == "kube-system"
                        && b.pod == "node-proxy-node-a"
                        && b.reason.contains(
                            "no manifest for this mirror pod in /nonexistent/maintd-test/manifests",
                        )
                })
        }
    })
    .await;
    let st = agent.progress.status();
    assert!(
        st.warnings
            .iter()
            .any(|w| w.contains("odd-optout")
                && w.contains("maintd.io/drain=\"Skip\" does not opt out")),
        "{:?}",
        st.warnings
    );
    assert!(!agent.task.is_finished(), "the agent is still running");
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_completed_pod_is_not_evicted_and_its_stage_ends_when_it_completes() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    // A batch pod (priority 0, so in the first stage with the web pods)
    // that asks, as Cluster API's label does, to be left to finish.
    let mut job = pod_json(
        "default",
        "nightly-report",
        "node-a",
        json!({"cluster.x-k8s.io/drain": "wait-completed"}),
    );
    job["spec"]["restartPolicy"] = json!("Never");
    post_pod(&sim, &job).await;
    let plan = plan_now(&sim, "node-a").await;
    let planned = plan
        .pods()
        .find(|p| p.name == "nightly-report")
        .expect("the pod is in the plan");
    assert_eq!(planned.action, plan::PodAction::WaitCompleted);
    let stage_of = |name: &str| {
        plan.stages
            .iter()
            .position(|s| s.pods.iter().any(|p| p.name == name))
    };

    let agent = RunningAgent::start(&sim, "node-a", None);
    taint(&client, "node-a", "maintd.io/drain", Some("")).await;
    agent
        .wait_for("the batch pod named as what the drain waits for", |evs| {
            evs.iter().any(|e| {
                e.event == EventKind::PodBlocked
                    && e.pod.as_deref() == Some("nightly-report")
                    && e.message
                        == "not evicted (label cluster.x-k8s.io/drain=wait-completed): \
                            the drain waits for it to complete"
            })
        })
        .await;
    // Its stage's other pods go; the next stage does not start.
    let first = stage_of("nightly-report").unwrap();
    eventually(
        "the rest of its stage gone, as the agent sees it",
        || async {
            let left = pods_on(&client, "node-a").await;
            let st = agent.progress.status();
            left.iter().all(|p| {
                let name = p.metadata.name.as_deref().unwrap_or("");
                name == "nightly-report" || stage_of(name).is_none_or(|s| s != first)
            }) && st.stages[first]
                .pods
                .iter()
                .all(|p| p.name == "nightly-report" || p.state == PodState::Gone)
        },
    )
    .await;
    let st = agent.progress.status();
    assert_eq!(st.phase, Phase::Blocked, "{st:?}");
    assert_eq!(st.current_stage, Some(first + 1));
    // The stages before it are done, it runs, the ones after wait.
    let states: Vec<StageState> = st.stages.iter().map(|s| s.state).collect();
    let mut want = vec![StageState::Done; first];
    want.push(StageState::Running);
    want.resize(st.stages.len(), StageState::Pending);
    assert_eq!(states, want);
    let blocking: Vec<&str> = st.blockers.iter().map(|b| b.pod.as_str()).collect();
    assert_eq!(blocking, ["nightly-report"], "it alone holds the drain");
    let listed = st
        .stages
        .iter()
        .flat_map(|s| &s.pods)
        .filter(|p| p.state != PodState::Gone)
        .count();
    assert_eq!(
        st.pods_remaining, listed,
        "the count matches the pods listed"
    );
    // The status still says what asked for the drain once it is running.
    assert_eq!(st.triggers, ["taint maintd.io/drain:NoSchedule"]);
    assert!(
        st.blockers.iter().any(|b| b.pod == "nightly-report"),
        "the status names it: {:?}",
        st.blockers
    );
    assert!(
        !sim.state
            .audit
            .entries()
            .iter()
            .any(|e| e.verb == "evict" && e.name == "nightly-report"),
        "it is never evicted"
    );

    // The job finishes, as its kubelet reports.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.patch_status(
        "nightly-report",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
    )
    .await
    .expect("the kubelet's status update");
    agent.wait_event(EventKind::DrainCompleted).await;
    // Completed, it holds nothing: it is deleted, with one request.
    eventually("the completed pod is deleted", || async {
        pods.get_opt("nightly-report").await.unwrap().is_none()
    })
    .await;
    let deletes = sim
        .state
        .audit
        .entries()
        .into_iter()
        .filter(|e| e.verb == "delete" && e.name == "nightly-report")
        .count();
    assert_eq!(deletes, 1);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_flag_the_kubelets_static_pod_path_is_followed() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    let dir = sim.static_pod_dir("node-a").unwrap();
    // A k3s-style kubelet drop-in naming the sim's directory for node-a.
    let etc = tempfile::tempdir().unwrap();
    let kubelet_config = etc.path().join("00-k3s-defaults.conf");
    std::fs::write(
        &kubelet_config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: {}\n",
            dir.display()
        ),
    )
    .unwrap();
    let mut config = maintd::config::Config::for_node("node-a", "/etc/kubernetes/manifests".into());
    config.static_pods = maintd::drain::static_path::resolve(None, Some(&kubelet_config));
    assert_eq!(config.static_pods.dir, dir);
    let agent = RunningAgent::start_with(config, maintd::testbed::agent_client(&sim, "node-a"));
    taint(&client, "node-a", "maintd.io/drain", Some("x")).await;
    agent.wait_event(EventKind::DrainCompleted).await;
    assert!(
        dir_files(&dir).is_empty(),
        "the manifest left the directory the kubelet's config names"
    );
    assert!(
        pods_on(&client, "node-a")
            .await
            .iter()
            .all(|p| !is_mirror(p))
    );
    agent.stop().await;
}

/// Without budgets, nothing refuses an eviction: the drain sends exactly
/// one per pod, and waits for each pod to be gone rather than asking again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_without_budgets_sends_exactly_one_eviction_per_pod() {
    let sim = scenario("realistic.yaml").await;
    let client = sim.client();
    let budgets: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> = Api::all(client.clone());
    for b in budgets.list(&Default::default()).await.unwrap() {
        let ns = b.metadata.namespace.unwrap();
        let api: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
            Api::namespaced(client.clone(), &ns);
        api.delete(&b.metadata.name.unwrap(), &Default::default())
            .await
            .unwrap();
    }
    let plan = plan_now(&sim, "node-a").await;
    let evicted: Vec<String> = plan
        .pods()
        .filter(|p| p.action == plan::PodAction::Evict && p.pod_type != PodType::Static)
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    assert!(evicted.len() > 50, "{}", evicted.len());

    let agent = RunningAgent::start(&sim, "node-a", None);
    taint(&client, "node-a", "maintd.io/drain", Some("kernel")).await;
    agent.wait_event(EventKind::DrainCompleted).await;
    let mut sent: HashMap<String, usize> = HashMap::new();
    for e in sim.state.audit.entries() {
        if e.verb == "evict" {
            *sent
                .entry(format!("{}/{}", e.namespace, e.name))
                .or_default() += 1;
        }
    }
    let more_than_once: Vec<_> = sent.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        more_than_once.is_empty(),
        "evicted more than once: {more_than_once:?}"
    );
    let mut sent: Vec<String> = sent.into_keys().collect();
    sent.sort();
    let mut want = evicted;
    want.sort();
    assert_eq!(
        sent, want,
        "one eviction for each planned pod, and no other"
    );
    agent.stop().await;
}

/// An admin who uncordons and cordons again while maintd's drain holds the
/// node makes the cordon theirs (the Node's managedFields say who set it):
/// ending the maintenance leaves it cordoned. Found by the chaos soak.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_who_cordons_again_mid_maintenance_keeps_the_node_cordoned_after_it() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    let agent = RunningAgent::start(&sim, "node-a", None);
    taint(&client, "node-a", "maintd.io/drain", Some("x")).await;
    agent.wait_event(EventKind::DrainCompleted).await;
    assert!(is_cordoned(&client, "node-a").await);
    // Meanwhile the agent is restarting (so nothing cordons in between).
    agent.stop().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let admin = PatchParams {
        field_manager: Some("kubectl-cordon".into()),
        ..Default::default()
    };
    for on in [false, true] {
        nodes
            .patch(
                "node-a",
                &admin,
                &Patch::Merge(json!({"spec": {"unschedulable": on}})),
            )
            .await
            .unwrap();
    }
    let agent = RunningAgent::start(&sim, "node-a", None);
    agent.wait_event(EventKind::DrainCompleted).await;
    taint(&client, "node-a", "maintd.io/drain", None).await;
    agent.wait_event(EventKind::UndoCompleted).await;
    let node = nodes.get("node-a").await.unwrap();
    assert_eq!(
        node.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "the admin's cordon stays"
    );
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints.iter().all(|t| !t.key.starts_with("maintd.io/")),
        "maintd's own marks are gone: {taints:?}"
    );
    assert!(
        node.metadata
            .annotations
            .unwrap_or_default()
            .keys()
            .all(|k| !k.starts_with("maintd.io/")),
        "and its note"
    );
    agent.stop().await;
}
