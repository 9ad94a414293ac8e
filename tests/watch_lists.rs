//! An agent's views come from watches that send the current objects first
//! where the API server serves them (Kubernetes 1.34 and later, the
//! `WatchList` feature): it lists nothing it watches. Where the API server
//! refuses them as invalid (the feature off), the agent lists and watches
//! instead, for the rest of its life, and drains just the same.

use crate::common;

use common::agent::RunningAgent;
use common::*;
use maintd::config::Config;
use maintd::drain::progress::Phase;
use maintd_sim::audit::RequestRecord;
use maintd_sim::{SimCluster, SimConfig};

/// The collections node-a's agent may list or watch in a drain of the
/// small scenario.
const WATCHED: [&str; 4] = [
    "/api/v1/nodes",
    "/api/v1/pods",
    "/apis/maintd.io/v1alpha1/nodemaintenances",
    "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
];

/// Drains node-a by a taint, with its agent's own client; what the agent
/// sent meanwhile.
async fn drain_node_a(sim: &SimCluster) -> Vec<RequestRecord> {
    let dir = sim.static_pod_dir("node-a").unwrap();
    let agent = RunningAgent::start_with(
        Config::for_node("node-a", dir),
        maintd::testbed::agent_client(sim, "node-a"),
    );
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("test")).await;
    let progress = agent.progress.clone();
    eventually("node-a is drained", || {
        let drained = progress.status().phase == Phase::Drained;
        async move { drained }
    })
    .await;
    agent.stop().await;
    sim.state
        .audit
        .requests()
        .into_iter()
        .filter(|r| r.user_agent.contains("(node node-a)"))
        .collect()
}

/// The collections listed, once per list. (The NodeMaintenance
/// collection is listed once as each agent starts, not for a view: for one
/// object at most, to tell whether its CRD is installed.)
fn lists(sent: &[RequestRecord]) -> Vec<String> {
    sent.iter()
        .filter(|r| r.method == "GET" && !r.watch && WATCHED.contains(&r.path.as_str()))
        .map(|r| r.path.clone())
        .collect()
}

fn watched(sent: &[RequestRecord], path: &str) -> Vec<u16> {
    sent.iter()
        .filter(|r| r.watch && r.path == path)
        .map(|r| r.code)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_lists_nothing_it_watches_where_watches_send_the_objects_first() {
    let sim = scenario("small.yaml").await;
    let sent = drain_node_a(&sim).await;
    assert_eq!(
        lists(&sent),
        ["/apis/maintd.io/v1alpha1/nodemaintenances"],
        "only the check that the CRD is installed"
    );
    // (The small scenario has no NodeMaintenance CRD: nothing to watch.)
    for path in [WATCHED[0], WATCHED[1], WATCHED[3]] {
        let codes = watched(&sent, path);
        assert!(
            !codes.is_empty() && codes.iter().all(|c| *c == 200),
            "{path} is watched: {codes:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_lists_and_watches_where_the_api_server_refuses_to_send_the_objects_first() {
    let sim = scenario_with(
        "small.yaml",
        SimConfig {
            watch_list: false,
            ..SimConfig::default()
        },
    )
    .await;
    let sent = drain_node_a(&sim).await;
    // Its first watches were refused, each view was listed instead and
    // then watched.
    assert!(
        sent.iter().any(|r| r.watch && r.code == 422),
        "a watch of the current objects was refused"
    );
    for path in ["/api/v1/nodes", "/api/v1/pods"] {
        assert!(lists(&sent).iter().any(|p| p == path), "{path} is listed");
        assert!(watched(&sent, path).contains(&200), "{path} is watched");
    }
    // The budgets' watch, started later in the drain, is not refused
    // again: the agent asks once.
    let budgets = WATCHED[3];
    assert!(
        lists(&sent).iter().any(|p| p == budgets),
        "the budgets are listed"
    );
    let codes = watched(&sent, budgets);
    assert!(
        !codes.is_empty() && codes.iter().all(|c| *c == 200),
        "the budgets' watch is not refused: {codes:?}"
    );
}
