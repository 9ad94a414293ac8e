//! How the agent gets what it watches from a real API server: Kubernetes
//! 1.37 sends a watch's current objects first (`sendInitialEvents`, the
//! `WatchList` feature, on by default since 1.34), so the agent lists
//! none of what it watches. One request per view where a list and a
//! watch were two; across a fleet's first wave, thousands fewer.

use crate::common;

use common::agent::RunningAgent;
use common::real::{PATIENCE, Real};
use common::recorded::{Recorded, Sent};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use maintd::config::Config;
use serde_json::json;

/// The collections the agent keeps a view of while idle.
const WATCHED: [&str; 4] = [
    "/api/v1/nodes",
    "/api/v1/pods",
    "/apis/maintd.io/v1alpha1/nodemaintenances",
    "/apis/coordination.k8s.io/v1/namespaces/maintd/leases",
];

/// A selector of a request, as its query gives it.
fn selector<'a>(s: &'a Sent, key: &str) -> Option<&'a str> {
    s.query
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// The lists of what a watch of the same path and selectors keeps: what
/// a view cost before watches sent their objects first. (Two lists are
/// not views: the check that NodeMaintenance's CRD is installed, of one
/// object at most, and the look for slots held from before a restart, by
/// their holder's label.)
fn lists(sent: &[Sent]) -> Vec<&Sent> {
    let key = |s: &Sent| {
        (
            s.path.clone(),
            selector(s, "fieldSelector").map(str::to_string),
            selector(s, "labelSelector").map(str::to_string),
        )
    };
    let watches: Vec<_> = sent.iter().filter(|s| s.is_watch()).map(key).collect();
    sent.iter()
        .filter(|s| s.method == "GET" && !s.is_watch() && WATCHED.contains(&s.path.as_str()))
        .filter(|s| !s.query.split('&').any(|kv| kv == "limit=1"))
        .filter(|s| watches.contains(&key(s)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_lists_nothing_it_watches_on_kubernetes() {
    let real = Real::get();
    let admin = real.admin().await;
    let node = "watch-list-a";
    real.node(&admin, node, json!({})).await;
    real.pod(&admin, "default", "watch-list-a-p", node, 0).await;
    let recorded = Recorded::default();
    let client = real.recorded_agent_client(node, &recorded).await;
    let manifests = tempfile::tempdir().expect("a static pod directory");
    let agent = RunningAgent::start_with(
        Config::for_node(node, manifests.path().to_path_buf()),
        client,
    );
    let views = agent.agent.views();
    common::eventually_within("every view of the agent's is filled", PATIENCE, || {
        let synced = views.iter().all(|(_, v)| v.synced());
        async move { synced }
    })
    .await;
    let view = |name: &str| {
        views
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .expect("the agent has that view")
    };
    // What the views hold came by the watches: its Node and its pod.
    assert!(view("node").by_name(node).is_some());
    assert!(view("pods").by_name("watch-list-a-p").is_some());

    // The same watches go on: a change of the Node arrives by them.
    let nodes: Api<Node> = Api::all(admin.clone());
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"watched": "yes"}}})),
        )
        .await
        .expect("the Node is labelled");
    let own = view("node");
    common::eventually_within("the label reaches the agent's view", PATIENCE, || {
        let seen = own
            .by_name(node)
            .is_some_and(|n| n["metadata"]["labels"]["watched"] == "yes");
        async move { seen }
    })
    .await;

    let sent = recorded.all();
    assert_eq!(
        lists(&sent).len(),
        0,
        "nothing it watches is listed: {:?}",
        lists(&sent)
    );
    for path in &WATCHED[..3] {
        let first = sent
            .iter()
            .find(|s| s.is_watch() && s.path == *path)
            .unwrap_or_else(|| panic!("a watch of {path}: {sent:?}"));
        assert!(
            first.sends_initial_events() && first.status == 200,
            "the API server sends {path}'s current objects first: {first:?}"
        );
    }
    assert!(
        sent.iter().all(|s| s.status != 422),
        "nothing is refused as invalid: {sent:?}"
    );
    agent.stop().await;
    real.kubectl(&[
        "delete",
        "pod",
        "-n",
        "default",
        "watch-list-a-p",
        "--wait=false",
    ]);
    real.remove_nodes(&admin, &[node.to_string()]).await;
}
