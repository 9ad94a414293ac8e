//! A drain that cannot finish says why, a drain that is no longer wanted
//! stops sending, and a drain that is still wanted for the same plan is not
//! started over: read back from the agent's status and events and the
//! simulator's audit log.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::agent::RunningAgent;
use common::slow_proxy::SlowProxy;
use common::*;
use maintd::config::Config;
use maintd::drain::executor::TimeoutPolicy;
use maintd::drain::progress::{EventKind, Phase, PodState, StageState};
use maintd::trigger::local::LocalSource;
use maintd_sim::SimCluster;
use serde_json::{Value, json};

/// Reboot slots of local drains live in the `maintd` namespace.
async fn maintd_namespace(sim: &SimCluster) {
    create_namespace(sim, "maintd").await;
}

fn bare_pod(name: &str, priority: i32, labels: Value) -> Value {
    let mut pod = pod_json("default", name, "node-a", labels);
    pod["spec"]["priority"] = json!(priority);
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_pod_with_no_manifest_in_the_directory_is_a_named_blocker() {
    let sim = scenario("small.yaml").await;
    // The agent looks in a directory that exists but holds no manifest for
    // the node's mirror pod (the kubelet was pointed elsewhere).
    let root = tempfile::tempdir().unwrap();
    let empty = root.path().join("manifests");
    std::fs::create_dir(&empty).unwrap();
    // The node's NodeDrain is where the cluster reads the blocker.
    kube::Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(sim.client())
        .create(&Default::default(), &maintd::api::nodedrain_crd().unwrap())
        .await
        .unwrap();
    let agent = RunningAgent::start(&sim, "node-a", Some(empty.clone()));
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("x")).await;
    let want = format!("no manifest for this mirror pod in {}", empty.display());
    let progress = agent.progress.clone();
    eventually(
        "the mirror pod is a named blocker and the drain Blocked",
        || {
            let st = progress.status();
            let want = want.clone();
            async move {
                st.phase == Phase::Blocked
                    && st.blockers.iter().any(|b| {
                        b.namespace == "kube-system"
                            && b.pod == "node-proxy-node-a"
                            && b.reason == want
                    })
            }
        },
    )
    .await;
    assert_eq!(
        agent.progress.status().current_stage.map(|s| s > 1),
        Some(true)
    );
    let k = common::kubectl::Kubectl::new(&sim);
    let k = &k;
    let want = &want;
    eventually(
        "the NodeDrain says Blocked and names the mirror pod",
        || async move {
            let d = k.json(&["get", "nodedrain", "node-a"]).await;
            d["status"]["phase"] == "Blocked"
                && d["status"]["blockers"].as_array().is_some_and(|bs| {
                    bs.iter()
                        .any(|b| b["pod"] == "node-proxy-node-a" && b["reason"] == want.as_str())
                })
        },
    )
    .await;
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_stuck_terminating_past_its_grace_is_a_named_blocker() {
    let sim = scenario("small.yaml").await;
    // Evicted, it has a 1 s grace period; a finalizer nobody removes keeps
    // it on the node after that.
    let mut stuck = bare_pod("stuck", -10, json!({}));
    stuck["metadata"]["finalizers"] = json!(["example.com/never"]);
    stuck["spec"]["terminationGracePeriodSeconds"] = json!(1);
    post_pod(&sim, &stuck).await;
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();
    let agent = RunningAgent::start(&sim, "node-a", None);
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("x")).await;
    let progress = agent.progress.clone();
    eventually("the stuck pod is a named blocker", || {
        let st = progress.status();
        async move {
            st.phase == Phase::Blocked
                && st.blockers.iter().any(|b| {
                    b.pod == "stuck"
                        && b.reason.contains("still terminating past its grace period")
                        && b.reason.contains("example.com/never")
                })
        }
    })
    .await;
    assert_eq!(agent.progress.status().current_stage, Some(1));
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_trigger_sends_none_of_the_evictions_still_queued() {
    let sim = sim().await;
    create_node(&sim.client(), "node-a").await;
    for i in 0..100 {
        post_pod(&sim, &bare_pod(&format!("p-{i:03}"), 0, json!({}))).await;
    }
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();
    // Every eviction keeps its caller waiting 300 ms after the API took it,
    // so at concurrency 1 the other 99 queue behind it.
    let proxy = SlowProxy::start(
        sim.url(),
        Arc::new(|method, path| {
            (method == http::Method::POST && path.ends_with("/eviction"))
                .then_some(Duration::from_millis(300))
        }),
    )
    .await;
    let mut config = Config::for_node("node-a", "/nonexistent/manifests".into());
    config.concurrency = 1;
    let agent = RunningAgent::start_with(config, proxy.agent_client(&sim, "node-a"));
    let client = sim.client();
    taint(&client, "node-a", "maintd.io/drain", Some("x")).await;
    let evictions = |from: usize| {
        sim.state.audit.entries()[from..]
            .iter()
            .filter(|e| e.verb == "evict")
            .count()
    };
    eventually("three evictions went out", || {
        let n = evictions(0);
        async move { n >= 3 }
    })
    .await;
    let progress = agent.progress.clone();
    eventually("two pods are gone", || {
        let left = progress.status().pods_remaining;
        async move { left <= 98 }
    })
    .await;
    // The pods waiting their turn hold nothing up: none is a blocker.
    assert_eq!(agent.progress.status().blockers, []);
    taint(&client, "node-a", "maintd.io/drain", None).await;
    // The agent hears of the end through its watch and stops the drain.
    // The audit log is in the API's order: everything from here on came
    // after the drain was stopped.
    agent.wait_event(EventKind::DrainCancelled).await;
    let ended = sim.state.audit.entries().len();
    agent.wait_event(EventKind::UndoCompleted).await;
    let before = evictions(0) - evictions(ended);
    assert!(
        (3..100).contains(&before),
        "{before} evictions before the end"
    );
    assert_eq!(
        evictions(ended),
        0,
        "no eviction is sent once the trigger has ended"
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_triggers_for_the_same_plan_do_not_restart_the_drain() {
    let sim = scenario("small.yaml").await;
    maintd_namespace(&sim).await;
    // Above every other Default pod: the stages before it finish, then it
    // blocks the drain for good.
    unmovable_budget(&sim, "guarded").await;
    post_pod(&sim, &bare_pod("guarded", 1500, json!({"app": "guarded"}))).await;
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();
    let agent = RunningAgent::start(&sim, "node-a", None);
    agent.local.request(LocalSource::Request, "os update", None);
    let progress = agent.progress.clone();
    eventually("the guarded pod blocks the drain", || {
        let st = progress.status();
        async move { st.phase == Phase::Blocked && st.blockers.iter().any(|b| b.pod == "guarded") }
    })
    .await;
    let before = agent.progress.status();
    let done: Vec<usize> = before
        .stages
        .iter()
        .filter(|s| s.state == StageState::Done)
        .map(|s| s.stage)
        .collect();
    assert!(!done.is_empty(), "stages before the guarded pod's are done");

    // Another trigger for the same drain, then the local request re-sent.
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;
    agent
        .local
        .request(LocalSource::Request, "kernel update", None);
    eventually("the status lists both triggers", || {
        let st = progress.status();
        async move {
            st.triggers.len() == 2 && st.triggers.iter().any(|t| t == "local: kernel update")
        }
    })
    .await;
    // A retried eviction of the guarded pod after the change: a restart,
    // which the change would have caused at once, would be behind us. Its
    // budget never changes, so the retry is the backstop's, 30 to 45 s
    // after the refusal.
    let seen = agent.events().len();
    agent
        .wait_for_within(
            "the guarded pod's eviction retried",
            Duration::from_secs(60),
            |evs| {
                evs[seen..].iter().any(|e| {
                    e.event == EventKind::PodEvicting && e.pod.as_deref() == Some("guarded")
                })
            },
        )
        .await;
    assert_eq!(
        agent.count(EventKind::DrainStarted),
        1,
        "the drain was not started over"
    );
    let after = agent.progress.status();
    assert_eq!(after.started_at, before.started_at);
    assert_eq!(after.phase, Phase::Blocked);
    assert_eq!(after.blockers, before.blockers, "the blockers carry over");
    for n in &done {
        assert_eq!(
            after.stages[n - 1].state,
            StageState::Done,
            "stage {n} stays done"
        );
    }
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_deadline_re_plans_and_keeps_what_the_drain_learned() {
    let sim = scenario("small.yaml").await;
    maintd_namespace(&sim).await;
    unmovable_budget(&sim, "guarded").await;
    post_pod(&sim, &bare_pod("guarded", 1500, json!({"app": "guarded"}))).await;
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();
    let agent = RunningAgent::start(&sim, "node-a", None);
    agent.local.request(LocalSource::Request, "os update", None);
    let progress = agent.progress.clone();
    eventually("the guarded pod blocks the drain", || {
        let st = progress.status();
        async move { st.phase == Phase::Blocked && st.blockers.iter().any(|b| b.pod == "guarded") }
    })
    .await;
    let before = agent.progress.status();
    // A deadline far enough away that nothing is deleted yet.
    agent.local.request(
        LocalSource::Request,
        "os update",
        Some(Duration::from_secs(3600)),
    );
    agent
        .wait_for("the drain re-planned", |evs| {
            evs.iter()
                .filter(|e| e.event == EventKind::DrainStarted)
                .count()
                == 2
        })
        .await;
    // Its budget never changes: the retry is the backstop's, 30 to 45 s
    // after the refusal.
    let seen = agent.events().len();
    agent
        .wait_for_within(
            "the guarded pod's eviction retried",
            Duration::from_secs(60),
            |evs| {
                evs[seen..].iter().any(|e| {
                    e.event == EventKind::PodEvicting && e.pod.as_deref() == Some("guarded")
                })
            },
        )
        .await;
    let replanned = agent
        .events()
        .into_iter()
        .filter(|e| e.event == EventKind::DrainStarted)
        .nth(1)
        .unwrap();
    assert!(
        replanned.message.starts_with("re-planned"),
        "{}",
        replanned.message
    );
    let after = agent.progress.status();
    assert_eq!(after.started_at, before.started_at, "not started afresh");
    assert_eq!(after.blockers, before.blockers, "the blockers carry over");
    for s in before.stages.iter().filter(|s| s.state == StageState::Done) {
        assert_eq!(
            after.stages[s.stage - 1].state,
            StageState::Done,
            "stage {} stays done",
            s.stage
        );
    }
    assert_eq!(
        agent.count(EventKind::PodEvicted),
        before_evictions(&before),
        "nothing evicted twice"
    );
    agent.stop().await;
}

/// Pods the status shows gone: each was evicted once.
fn before_evictions(st: &maintd::drain::progress::DrainStatus) -> usize {
    st.stages
        .iter()
        .flat_map(|s| &s.pods)
        .filter(|p| p.state == maintd::drain::progress::PodState::Gone)
        .count()
}

/// A drain under a deadline gives up on a pod it could not get off in
/// time; once no deadline applies any more (the deadline is withdrawn while
/// a taint still asks for the drain), that pod is tried again and blocks
/// the drain by name: the node is not reported Drained with it still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_given_up_on_for_a_deadline_are_tried_again_when_it_is_withdrawn() {
    let sim = scenario("small.yaml").await;
    maintd_namespace(&sim).await;
    unmovable_budget(&sim, "stuck").await;
    let mut stuck = bare_pod("stuck", 1500, json!({"app": "stuck"}));
    // A finalizer nobody removes: neither eviction nor deletion gets it off.
    stuck["metadata"]["finalizers"] = json!(["example.com/never"]);
    post_pod(&sim, &stuck).await;
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();
    let agent = RunningAgent::start(&sim, "node-a", None);
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;
    agent.local.request(
        LocalSource::Request,
        "reboot soon",
        Some(Duration::from_secs(6)),
    );
    agent.wait_event(EventKind::DrainFailed).await;
    let blockers = agent.progress.status().blockers;
    assert!(
        blockers.iter().any(|b| b.pod == "stuck"
            && b.reason == "still on the node when its deletion's grace period ran out; held by finalizers example.com/never"),
        "the pod given up on is named, with why: {blockers:?}"
    );
    // The stages after its own still ran, each under a number of its own;
    // its stage ended out of time and says the pod is still there. The
    // taint may start the drain before the deadline arrives, and the
    // deadline then re-plans it: the stages counted are the last plan's.
    let events = agent.events();
    let last_plan = events
        .iter()
        .rposition(|e| e.event == EventKind::DrainStarted)
        .expect("the drain started");
    let starts: Vec<usize> = events[last_plan..]
        .iter()
        .filter(|e| e.event == EventKind::StageStarted)
        .filter_map(|e| e.stage)
        .collect();
    assert!(
        starts.len() >= 2 && starts.windows(2).all(|w| w[0] < w[1]),
        "{starts:?}"
    );
    let st = agent.progress.status();
    assert!(st.deadline.is_some(), "the status shows the deadline");
    assert_eq!(
        st.triggers,
        [
            "taint maintd.io/drain=kernel:NoSchedule",
            "local: reboot soon"
        ]
    );
    let stage = st
        .stages
        .iter()
        .find(|s| s.pods.iter().any(|p| p.name == "stuck"))
        .expect("its stage is listed");
    assert_eq!(stage.state, StageState::TimedOut, "{stage:?}");
    let pod = stage.pods.iter().find(|p| p.name == "stuck").unwrap();
    assert_ne!(pod.state, PodState::Gone, "{pod:?}");

    // The deadline goes; the taint still wants the node drained.
    let seen = agent.events().len();
    agent.local.clear();
    agent
        .wait_for("the drain re-planned without a deadline", |evs| {
            evs[seen..]
                .iter()
                .any(|e| e.event == EventKind::DrainStarted && e.message.starts_with("re-planned"))
        })
        .await;
    let progress = agent.progress.clone();
    eventually("the pod blocks the drain by name again", || {
        let st = progress.status();
        async move { st.phase == Phase::Blocked && st.blockers.iter().any(|b| b.pod == "stuck") }
    })
    .await;
    assert!(
        agent.events()[seen..]
            .iter()
            .all(|e| e.event != EventKind::DrainCompleted),
        "never reported drained while the pod is on the node"
    );

    // Once it is really gone, the drain completes.
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(sim.client(), "default");
    pods.patch(
        "stuck",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    agent.wait_event(EventKind::DrainCompleted).await;
    agent.stop().await;
}

/// A static pod whose kubelet does not stop it once its manifest has been
/// moved out (here: the kubelet reads another directory, as one that is
/// down reads none) is named as a blocker past its grace period, with the
/// directory and the question an operator would ask next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pod_its_kubelet_does_not_stop_is_a_named_blocker() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    // A static pod with a 1 s grace period, run by the simulated kubelet
    // from its own directory.
    let manifest = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "quick", "namespace": "kube-system"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": "i"}]},
    })
    .to_string();
    let kubelet_dir = sim.static_pod_dir("node-a").unwrap();
    std::fs::write(kubelet_dir.join("quick.json"), &manifest).unwrap();
    eventually("the kubelet runs it", || async {
        pods_on(&client, "node-a")
            .await
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("quick-node-a"))
    })
    .await;
    // The agent's directory, which that kubelet never reads, holds the
    // same manifest.
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    std::fs::write(manifests.join("quick.json"), &manifest).unwrap();
    let agent = RunningAgent::start_with(
        Config::for_node("node-a", manifests.clone()),
        maintd::testbed::agent_client(&sim, "node-a"),
    );
    taint(&client, "node-a", "maintd.io/drain", Some("x")).await;
    let progress = agent.progress.clone();
    eventually("the static pod is a named blocker", || {
        let st = progress.status();
        async move {
            st.blockers.iter().any(|b| {
                b.pod == "quick-node-a"
                    && b.reason.contains(
                        "kubelet has not stopped it within its 1s grace period; is the kubelet running?",
                    )
            })
        }
    })
    .await;
    assert!(
        !manifests.join("quick.json").exists(),
        "its manifest was moved out"
    );
    agent.stop().await;
}

/// A stage that runs past `--stage-timeout` is reported, with how many
/// pods it still has: with `--on-stage-timeout=wait` the drain goes on
/// waiting for its pod, by name; with `skip` that pod is left behind and
/// the later stages run, so the node ends drained of everything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_past_its_timeout_is_reported_and_waits_or_skips_as_configured() {
    for policy in [TimeoutPolicy::Wait, TimeoutPolicy::Skip] {
        let sim = scenario("small.yaml").await;
        unmovable_budget(&sim, "stuck").await;
        post_pod(&sim, &bare_pod("stuck", -100, json!({"app": "stuck"}))).await;
        sim.wait_settled(Duration::from_secs(30)).await.unwrap();
        let mut config = Config::for_node("node-a", sim.static_pod_dir("node-a").unwrap());
        config.stage_timeout = Some(Duration::from_secs(2));
        config.on_stage_timeout = policy;
        let agent = RunningAgent::start_with(config, maintd::testbed::agent_client(&sim, "node-a"));
        taint(&sim.client(), "node-a", "maintd.io/drain", Some("x")).await;
        agent.wait_event(EventKind::StageTimedOut).await;
        let timed_out = agent
            .events()
            .into_iter()
            .find(|e| e.event == EventKind::StageTimedOut)
            .unwrap();
        assert_eq!(timed_out.stage, Some(1), "{policy:?}");
        assert_eq!(timed_out.message, "1 pods still present after 2s");
        let started = agent
            .events()
            .into_iter()
            .find(|e| e.event == EventKind::StageStarted && e.stage == Some(1))
            .unwrap();
        // Not before its time (the clock is read in whole milliseconds).
        assert!(
            timed_out.t_ms >= started.t_ms + 1_900,
            "timed out {} ms into the stage",
            timed_out.t_ms - started.t_ms
        );
        match policy {
            TimeoutPolicy::Wait => {
                let progress = agent.progress.clone();
                eventually("the drain still waits for the pod, by name", || {
                    let st = progress.status();
                    async move {
                        st.phase == Phase::Blocked
                            && st.current_stage == Some(1)
                            && st.stages[0].state == StageState::TimedOut
                            && st.blockers.iter().any(|b| b.pod == "stuck")
                    }
                })
                .await;
                assert_eq!(
                    agent.count(EventKind::StageStarted),
                    1,
                    "no later stage ran"
                );
                assert_eq!(agent.count(EventKind::StageTimedOut), 1, "said once");
                // Ended before the static pods' stage: nothing to put back.
                let dir = sim.static_pod_dir("node-a").unwrap();
                let manifests = std::fs::read_dir(&dir).unwrap().count();
                taint(&sim.client(), "node-a", "maintd.io/drain", None).await;
                agent.wait_event(EventKind::UndoCompleted).await;
                assert_eq!(agent.count(EventKind::StaticPodsRestored), 0);
                assert_eq!(std::fs::read_dir(&dir).unwrap().count(), manifests);
            }
            TimeoutPolicy::Skip => {
                agent.wait_event(EventKind::DrainCompleted).await;
                let st = agent.progress.status();
                assert_eq!(st.stages[0].state, StageState::TimedOut);
                assert!(
                    agent.count(EventKind::StageStarted) > 1,
                    "the later stages ran"
                );
                let left: Vec<String> = pods_on(&sim.client(), "node-a")
                    .await
                    .into_iter()
                    .filter_map(|p| p.metadata.name)
                    .collect();
                // What else stays is what the plan skips by design.
                let skipped: Vec<&str> = st.skipped.iter().map(|s| s.pod.as_str()).collect();
                assert!(
                    left.iter()
                        .all(|n| n == "stuck" || skipped.contains(&n.as_str())),
                    "left {left:?}, skipped {skipped:?}"
                );
                assert!(left.iter().any(|n| n == "stuck"));
                // Left behind, not waited for: not a blocker.
                assert!(
                    st.blockers.iter().all(|b| b.pod != "stuck"),
                    "{:?}",
                    st.blockers
                );
            }
        }
        agent.stop().await;
    }
}

/// Only pods the drain waits on for a reason are blockers: a pod whose
/// eviction went through and that is shutting down is not listed, while
/// another pod of its stage is held by its budget and is, with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_shutting_down_is_not_a_blocker_beside_one_that_is() {
    let sim = sim().await;
    create_node(&sim.client(), "node-a").await;
    unmovable_budget(&sim, "held").await;
    post_pod(&sim, &bare_pod("held", 0, json!({"app": "held"}))).await;
    let mut slow = bare_pod("slow", 0, json!({}));
    slow["metadata"]["annotations"] = json!({maintd_sim::kubelet::SHUTDOWN_ANNOTATION: "4"});
    post_pod(&sim, &slow).await;
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();
    let config = Config::for_node("node-a", "/nonexistent/manifests".into());
    let agent = RunningAgent::start_with(config, maintd::testbed::agent_client(&sim, "node-a"));
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("x")).await;
    let progress = agent.progress.clone();
    let state_of = move |pod: &str| {
        progress
            .status()
            .stages
            .iter()
            .flat_map(|s| s.pods.iter())
            .find(|p| p.name == pod)
            .map(|p| p.state)
    };
    eventually("slow shuts down while held is blocked", || {
        let both = (state_of("slow"), state_of("held"));
        async move { both == (Some(PodState::Terminating), Some(PodState::Blocked)) }
    })
    .await;
    // The blocked pod's eviction is retried meanwhile, and each retry
    // lists the blockers again.
    for _ in 0..40 {
        let blockers = agent.progress.status().blockers;
        assert!(
            blockers
                .iter()
                .all(|b| b.pod == "held" && !b.reason.is_empty()),
            "{blockers:?}"
        );
        if state_of("slow") != Some(PodState::Terminating) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        agent
            .progress
            .status()
            .blockers
            .iter()
            .any(|b| b.pod == "held")
    );
    agent.stop().await;
}
