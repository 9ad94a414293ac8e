//! deploy/api-priority/ on a real API server: once it is applied, every
//! request of an agent (its own token, bound to its node) is judged by
//! maintd's FlowSchema at maintd's priority level, as the API server's own
//! answer headers say, and nobody else's requests are.

use crate::common;

use std::time::Duration;

use common::real::{PATIENCE, Real};
use serde_json::json;

/// The FlowSchema and priority level (their uids) the API server judged
/// one GET of `node` by, from its answer's headers.
async fn judged_by(client: &kube::Client, node: &str) -> (String, String) {
    let req = http::Request::get(format!("/api/v1/nodes/{node}"))
        .body(kube::client::Body::empty())
        .expect("a request");
    let resp = client.send(req).await.expect("an answer");
    assert!(resp.status().is_success(), "GET {node}: {}", resp.status());
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    (
        header("X-Kubernetes-PF-FlowSchema-UID"),
        header("X-Kubernetes-PF-PriorityLevel-UID"),
    )
}

fn uid(real: &Real, kind: &str, name: &str) -> String {
    real.kubectl_ok(&["get", kind, name, "-o", "jsonpath={.metadata.uid}"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_requests_go_to_maintds_own_priority_level() {
    let real = Real::get();
    let admin = real.admin().await;
    let node = "priority-a";
    real.node(&admin, node, json!({})).await;
    let agent = real.agent_client(node).await;
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/api-priority/flowcontrol.yaml");
    let file = file.to_string_lossy();

    // Without it, the fleet is one flow of the built-in service-accounts
    // schema.
    let (schema, _) = judged_by(&agent, node).await;
    assert_eq!(schema, uid(&real, "flowschema", "service-accounts"));

    real.kubectl_ok(&["apply", "--server-side", "-f", &file]);
    let ours = (
        uid(&real, "flowschema", "maintd"),
        uid(&real, "prioritylevelconfiguration", "maintd"),
    );
    // The API server takes a new FlowSchema in shortly after it is written.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let now = judged_by(&agent, node).await;
        if now == ours {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent's request is still judged by {now:?}, not maintd's {ours:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Another identity's requests are not maintd's.
    let kubelet = real.node_client(node).await;
    let (theirs, _) = judged_by(&kubelet, node).await;
    assert_ne!(theirs, ours.0, "the node's kubelet is not in maintd's flow");

    real.kubectl_ok(&["delete", "-f", &file]);
    real.remove_nodes(&admin, &[node.to_string()]).await;
}
