//! How an agent holds its connection to a real API server. Its calls and
//! watches share one HTTP/2 connection (a connection each over HTTP/1.1:
//! at 5,000 nodes, tens of thousands of TLS connections for the API server
//! to hold), and when that connection goes half-open (a load balancer or a
//! NAT lost it without a word) its pings find out, and every watch carries
//! on over a new one.

use crate::common;

use std::time::Duration;

use common::real::{PATIENCE, Real};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use maintd::index::{Index, WatchGuard, WatchTarget};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Waits, at most [`PATIENCE`], until `done` holds; `what` names it in the
/// failure.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {PATIENCE:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The label `key` of the agent's view of its Node, as the watch has it.
fn label(view: &Index, key: &str) -> Option<String> {
    view.all()
        .first()
        .and_then(|n| n["metadata"]["labels"][key].as_str().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_holds_one_connection_and_replaces_a_half_open_one() {
    let real = Real::get();
    let admin = real.admin().await;
    let node = "conn-a";
    real.node(&admin, node, json!({})).await;
    let proxy = real.fault_proxy().await;
    let client = real
        .agent_client_to(node, &format!("https://{}", proxy.addr))
        .await;

    // As the agent starts: its checks first, one call at a time (here the
    // first of them, its own Node), which opens the connection. Watches
    // started together on a fresh client each open one before any speaks
    // HTTP/2, and a watch that lands on one keeps it open until it ends.
    Api::<Node>::all(client.clone())
        .get(node)
        .await
        .expect("the agent's first check reads its own Node");
    // The agent's kinds of watch, with its own rights: its Node, its
    // pods, the slot Leases.
    let stop = CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    let watch = |path: &str, fields: Option<String>| {
        let view = Index::new();
        let target = WatchTarget::new(path, fields, WatchGuard::default());
        tokio::spawn(view.clone().run(client.clone(), target, stop.clone()));
        view
    };
    let own = watch("/api/v1/nodes", Some(format!("metadata.name={node}")));
    let pods = watch("/api/v1/pods", Some(format!("spec.nodeName={node}")));
    let leases = watch(
        "/apis/coordination.k8s.io/v1/namespaces/maintd/leases",
        None,
    );
    let views = [&own, &pods, &leases];
    until("the agent's watches list and start", || {
        views.iter().all(|v| v.synced())
    })
    .await;
    // Calls beside the watches, ten at once.
    let nodes: Api<Node> = Api::all(client.clone());
    let gets = (0..10).map(|_| nodes.get(node));
    for got in futures::future::join_all(gets).await {
        got.expect("the agent reads its own Node");
    }
    // All of them over the one connection.
    until("one connection carries every watch and call", || {
        proxy.open() == 1
    })
    .await;

    // The connection goes half-open: nothing comes back, nothing is closed.
    proxy.abandon_all();
    let patch = json!({"metadata": {"labels": {"maintd.test/seen": "after"}}});
    Api::<Node>::all(admin.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the admin labels the node");
    // Found by its pings (well before a watch's own idle guard of 120 s
    // would give up on it), and the watch carries on over a new one.
    until(
        "the agent's watch sees the change after the connection went half-open",
        || label(&own, "maintd.test/seen").as_deref() == Some("after"),
    )
    .await;
    until(
        "the half-open connection is closed; one new one carries on",
        || proxy.open() == 1,
    )
    .await;
    let nodes: Api<Node> = Api::all(client);
    nodes.get(node).await.expect("a call after the reconnect");
    real.remove_nodes(&admin, &[node.to_string()]).await;
}
