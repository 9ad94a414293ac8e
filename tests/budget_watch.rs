//! Budget watches exist only while a drain's stage evicts pods in their
//! namespace, or a pod of the node is blocked by a budget, scoped to that
//! namespace (issue 11): read from what the simulated API server serves,
//! not from the agent's insides. An idle agent watches no budget.

use crate::common;

use common::agent::RunningAgent;
use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use maintd::config::Config;
use maintd::drain::progress::EventKind;
use maintd_sim::SimCluster;
use serde_json::json;

const PDB: &str = "poddisruptionbudgets";

/// An agent for node-a with the agent's own client, so its requests carry
/// its User-Agent.
fn start(sim: &SimCluster) -> RunningAgent {
    let dir = sim.static_pod_dir("node-a").unwrap();
    RunningAgent::start_with(
        Config::for_node("node-a", dir),
        maintd::testbed::agent_client(sim, "node-a"),
    )
}

/// Paths of the budget watches node-a's agent asked for so far.
fn budget_watches_asked(sim: &SimCluster) -> Vec<String> {
    sim.state
        .audit
        .requests()
        .into_iter()
        .filter(|r| r.watch && r.path.contains(PDB) && r.user_agent.contains("(node node-a)"))
        .map(|r| r.path)
        .collect()
}

fn budget_views(agent: &RunningAgent) -> Vec<String> {
    agent
        .agent
        .views()
        .into_iter()
        .map(|(name, _)| name)
        .filter(|n| n.contains("poddisruptionbudget"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_holds_no_budget_watch() {
    let sim = scenario("small.yaml").await;
    let agent = start(&sim);
    // Its other watches are open: it is up and has settled.
    eventually("the agent watches its node and its pods", || {
        let open = sim.state.watches.snapshot();
        async move { open.contains_key("/api/v1/pods") && open.contains_key("/api/v1/nodes") }
    })
    .await;
    // The agent starts its standing watches together; give any that would
    // come with them time to show (a bounded pause, not a timing claim).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(agent.progress.status().triggers.is_empty());
    assert_eq!(
        sim.state.watches.count(PDB),
        0,
        "{:?}",
        sim.state.watches.snapshot()
    );
    assert_eq!(budget_watches_asked(&sim), Vec::<String>::new());
    let lists = sim
        .state
        .audit
        .requests()
        .into_iter()
        .filter(|r| r.path.contains(PDB))
        .count();
    assert_eq!(lists, 0, "no budget is even listed");
    assert_eq!(budget_views(&agent), Vec::<String>::new());
    agent.stop().await;
}

/// Sets the web budget's minAvailable (3 of 3 replicas: nothing may go).
async fn web_budget_min_available(client: &kube::Client, n: i32) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": n}})),
    )
    .await
    .expect("the web budget is patched");
}

/// node-a's agent draining it while the web budget allows nothing (until
/// the test says so): its web pods are blocked.
async fn drain_against_a_closed_web_budget(sim: &SimCluster) -> RunningAgent {
    let client = sim.client();
    web_budget_min_available(&client, 3).await;
    let agent = start(sim);
    taint(&client, "node-a", "maintd.io/drain", Some("kernel")).await;
    agent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_are_watched_only_while_pods_are_evicted_or_blocked() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    let agent = drain_against_a_closed_web_budget(&sim).await;
    agent
        .wait_for("a web pod blocked by its budget", |evs| {
            evs.iter().any(|e| {
                e.event == EventKind::PodBlocked && e.message.contains("disruption budget web")
            })
        })
        .await;
    // The stage holds one watch, of the budgets of the namespace it
    // evicts in, and only that.
    eventually("a watch of default's budgets is open", || {
        let n = sim
            .state
            .watches
            .count("/namespaces/default/poddisruptionbudgets");
        async move { n == 1 }
    })
    .await;
    assert_eq!(sim.state.watches.count(PDB), 1);
    let asked = budget_watches_asked(&sim);
    assert!(
        asked
            .iter()
            .all(|p| p == "/apis/policy/v1/namespaces/default/poddisruptionbudgets"),
        "{asked:?}"
    );
    assert_eq!(budget_views(&agent), ["poddisruptionbudgets in default"]);

    // One blocked pod goes another way (an admin deletes it): the others
    // are still blocked, and the watch they share stays open for them.
    let gone = first_web_pod(&client).await;
    Api::<Pod>::namespaced(client.clone(), "default")
        .delete(&gone, &DeleteParams::default())
        .await
        .expect("the admin deletes a blocked pod");
    agent
        .wait_for("the deleted pod gone", |evs| {
            evs.iter()
                .any(|e| e.event == EventKind::PodGone && e.pod.as_deref() == Some(gone.as_str()))
        })
        .await;
    // Give a watch that would end time to end (a bounded pause, not a
    // timing claim).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        sim.state.watches.count(PDB),
        1,
        "the pods still blocked keep their watch"
    );
    assert_eq!(budget_views(&agent), ["poddisruptionbudgets in default"]);

    // The budget allows a disruption again: the pods go, the watch with them.
    web_budget_min_available(&client, 2).await;
    agent.wait_event(EventKind::DrainCompleted).await;
    assert!(
        pods_on(&client, "node-a").await.iter().all(|p| !p
            .metadata
            .name
            .as_deref()
            .unwrap_or("")
            .starts_with("web-")),
        "the web pods left node-a"
    );
    eventually("no budget watch is open once nothing is blocked", || {
        let n = sim.state.watches.count(PDB);
        async move { n == 0 }
    })
    .await;
    assert_eq!(budget_views(&agent), Vec::<String>::new());
    agent.stop().await;
}

/// A web pod on node-a.
async fn first_web_pod(client: &kube::Client) -> String {
    pods_on(client, "node-a")
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .find(|n| n.starts_with("web-"))
        .expect("a web pod on node-a")
}

/// An agent that stops while a pod is blocked ends its budget watch with
/// it: a watch left behind would be held against the API server by an
/// agent that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_agent_leaves_no_budget_watch_behind() {
    let sim = scenario("small.yaml").await;
    let agent = drain_against_a_closed_web_budget(&sim).await;
    eventually("a watch of default's budgets is open", || {
        let n = sim.state.watches.count(PDB);
        async move { n == 1 }
    })
    .await;
    agent.stop().await;
    eventually("the budget watch ends with the agent", || {
        let n = sim.state.watches.count(PDB);
        async move { n == 0 }
    })
    .await;
}

/// A pod its budget never lets go is asked again when the budget changes,
/// not on a timer: its stage watches the budget, sees it has nothing to
/// give and does not ask; over 50 s the pod is asked once or twice, by the
/// backstop (30 to 45 s, then at least 30 s more) — at 500 draining nodes
/// with 30 blocked pods each, a retry every 3 s was 5,000 refused evictions
/// a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_its_budget_never_allows_is_asked_at_most_every_30_seconds() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    let agent = drain_against_a_closed_web_budget(&sim).await;
    agent
        .wait_for("a web pod blocked by its budget", |evs| {
            evs.iter().any(|e| {
                e.event == EventKind::PodBlocked && e.message.contains("disruption budget web")
            })
        })
        .await;
    let web = first_web_pod(&client).await;
    let evictions = || {
        let path = format!("/api/v1/namespaces/default/pods/{web}/eviction");
        sim.state
            .audit
            .count_requests(|r| r.method == "POST" && r.path == path && r.code == 429)
    };
    // Watching for what must not happen takes time: a bounded pause.
    tokio::time::sleep(std::time::Duration::from_secs(50)).await;
    let n = evictions();
    assert!(
        (1..=2).contains(&n),
        "{n} evictions of {web} in 50 s against a budget that never allows one"
    );
    agent.stop().await;
}

/// An operator labels the web budget: a write of it like any other.
async fn label_web_budget(client: &kube::Client) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "shop"}}})),
    )
    .await
    .unwrap();
}

/// Makes the web budget allow its three pods to go at once, and waits
/// until its status says so.
async fn three_web_pods_may_go(client: &kube::Client) {
    web_budget_min_available(client, 0).await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    eventually("the web budget allows its three pods to go", || {
        let pdbs = pdbs.clone();
        async move {
            pdbs.get("web")
                .await
                .ok()
                .and_then(|b| b.status)
                .is_some_and(|s| s.disruptions_allowed == Some(3))
        }
    })
    .await;
}

/// An eviction the API server holds (as it holds one whose write of the
/// budget's status lost to the disruption controller's, for 500 ms) does
/// not hold up the other pods its budget allows: they are asked meanwhile,
/// not once it is answered or its call has timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_the_api_server_holds_does_not_hold_up_the_others_its_budget_allows() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    three_web_pods_may_go(&client).await;
    // Every eviction of a web pod is answered a minute after it is sent.
    let faults = &sim.state.faults;
    faults.commit_late(
        "/api/v1/namespaces/default/pods/web-",
        std::time::Duration::from_secs(60),
    );
    let agent = start(&sim);
    taint(&client, "node-a", "maintd.io/drain", Some("")).await;
    eventually("all three web pods' evictions are sent", || async {
        faults.held_writes() >= 3
    })
    .await;
    // The first was still unanswered, and none had failed.
    let failed: Vec<_> = agent
        .events()
        .into_iter()
        .filter(|e| e.event == EventKind::PodError)
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    agent.stop().await;
}

/// After each eviction the disruption controller writes the budget's
/// status again (it sees the pod going); the agent sends the next
/// eviction under the budget once those writes are done, not into them,
/// where the API server would refuse it a conflict and make it wait half
/// a second. Here the controller answers within 20 ms and an eviction
/// takes 30 ms from its read of the budget to its write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_eviction_under_a_budget_waits_for_the_controllers_answer_to_the_last() {
    let config = maintd_sim::SimConfig {
        eviction_window: std::time::Duration::from_millis(30),
        disruption_lag: std::time::Duration::ZERO,
        ..maintd_sim::SimConfig::default()
    };
    let sim = scenario_with("small.yaml", config).await;
    assert_eq!(
        races_draining_three_web_pods(&sim).await,
        (0, 0, 0),
        "evictions lost to another eviction, the controller, anyone else"
    );
}

/// Drains node-a with the agent, its web budget allowing all three web
/// pods to go, until they are evicted; returns the races their evictions
/// lost inside the API server: to another eviction, to the disruption
/// controller, to anyone else.
async fn races_draining_three_web_pods(sim: &SimCluster) -> (u64, u64, u64) {
    let client = sim.client();
    three_web_pods_may_go(&client).await;
    let agent = start(sim);
    taint(&client, "node-a", "maintd.io/drain", Some("kernel")).await;
    agent
        .wait_for("the three web pods evicted", |evs| {
            evs.iter()
                .filter(|e| {
                    e.event == EventKind::PodEvicted
                        && e.pod.as_deref().is_some_and(|p| p.starts_with("web-"))
                })
                .count()
                == 3
        })
        .await;
    agent.stop().await;
    let races = |r: &std::sync::atomic::AtomicU64| r.load(std::sync::atomic::Ordering::SeqCst);
    let s = &sim.state;
    (
        races(&s.eviction_races),
        races(&s.controller_races),
        races(&s.other_races),
    )
}

/// The simulator, as Kubernetes 1.37: an eviction of a running pod reads
/// the namespace's budgets from the API server's watch cache once the
/// cache has caught up with etcd, which it learns at its next progress
/// answer (every 100 ms while a read waits) or from a write of a budget
/// that reaches it first. Here the answers are an hour apart: the
/// eviction waits until an operator labels the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_reads_its_budget_once_the_api_servers_cache_has_caught_up() {
    let config = maintd_sim::SimConfig {
        cache_progress: std::time::Duration::from_secs(3600),
        disruption_lag: std::time::Duration::ZERO,
        ..maintd_sim::SimConfig::default()
    };
    let sim = scenario_with("small.yaml", config).await;
    let client = sim.client();
    three_web_pods_may_go(&client).await;
    let web = first_web_pod(&client).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let evicting = tokio::spawn(async move { pods.evict(&web, &Default::default()).await });
    // Watching for what must not happen takes time: a bounded pause.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        !evicting.is_finished(),
        "answered before its read was served"
    );
    assert_eq!(
        sim.state
            .evictions_in_window
            .load(std::sync::atomic::Ordering::SeqCst),
        0,
        "read its budget before the cache caught up"
    );
    label_web_budget(&client).await;
    evicting
        .await
        .unwrap()
        .expect("granted once the budget's write reached the cache");
}

/// An eviction of a web pod, sent by hand, that has read its budget and
/// not written it back yet: the simulator holds it there for five
/// seconds (its eviction window), room for another write of the budget.
struct Racing {
    sim: SimCluster,
    pods: Api<Pod>,
    web: Vec<String>,
    evicting: tokio::task::JoinHandle<kube::Result<kube::core::response::Status>>,
}

impl Racing {
    async fn start() -> Racing {
        let config = maintd_sim::SimConfig {
            eviction_window: std::time::Duration::from_secs(5),
            disruption_lag: std::time::Duration::ZERO,
            ..maintd_sim::SimConfig::default()
        };
        let sim = scenario_with("small.yaml", config).await;
        let client = sim.client();
        three_web_pods_may_go(&client).await;
        let web: Vec<String> = pods_on(&client, "node-a")
            .await
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .filter(|n| n.starts_with("web-"))
            .collect();
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let evicting = {
            let (pods, name) = (pods.clone(), web[0].clone());
            tokio::spawn(async move { pods.evict(&name, &Default::default()).await })
        };
        let sim_state = sim.state.clone();
        eventually("the eviction has read its budget", || {
            let state = sim_state.clone();
            async move {
                state
                    .evictions_in_window
                    .load(std::sync::atomic::Ordering::SeqCst)
                    == 1
            }
        })
        .await;
        Racing {
            sim,
            pods,
            web,
            evicting,
        }
    }

    /// Waits for the eviction's answer: granted, after the one retry the
    /// race cost it, and lost to whom (evictions, the disruption
    /// controller, anyone else).
    async fn granted(self) -> (u64, u64, u64) {
        self.evicting
            .await
            .unwrap()
            .expect("the eviction is granted after its retry");
        let evicted = self
            .pods
            .get(&self.web[0])
            .await
            .map(|p| p.metadata.deletion_timestamp.is_some());
        assert!(
            !matches!(evicted, Ok(false)),
            "the evicted pod is on its way out or gone"
        );
        let races = |r: &std::sync::atomic::AtomicU64| r.load(std::sync::atomic::Ordering::SeqCst);
        let s = &self.sim.state;
        (
            races(&s.eviction_races),
            races(&s.controller_races),
            races(&s.other_races),
        )
    }
}

/// The simulator, as Kubernetes: an eviction whose budget's status the
/// disruption controller writes between the eviction's read of it and
/// its own write loses the race and reads the budget again 500 ms later,
/// then is granted. (The simulator used to make evictions race only one
/// another.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_the_disruption_controller_races_is_granted_after_the_retry() {
    let racing = Racing::start().await;
    // Another web pod goes: the controller writes the budget's status.
    racing
        .pods
        .delete(&racing.web[1], &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(racing.granted().await, (0, 1, 0));
}

/// The simulator, as Kubernetes: the eviction's write of its budget is
/// conditional on the version it read, so any write of the budget in
/// between costs it the retry, not only the controller's and other
/// evictions': here an operator labels the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_whose_budget_is_edited_meanwhile_is_granted_after_the_retry() {
    let racing = Racing::start().await;
    label_web_budget(&racing.sim.client()).await;
    assert_eq!(racing.granted().await, (0, 0, 1));
}

/// A budget that allows three web pods to go at once: the agent asks for
/// them one after the other, each as soon as the last was answered, so
/// none is refused a conflict by the API server and made to wait its
/// half-second retry (the simulator makes an eviction that raced another
/// for the same budget's status wait, as Kubernetes does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_under_one_budget_are_asked_one_at_a_time() {
    let sim = scenario("small.yaml").await;
    let (evictions, _, _) = races_draining_three_web_pods(&sim).await;
    assert_eq!(
        evictions, 0,
        "evictions under the web budget raced one another for its status"
    );
}
