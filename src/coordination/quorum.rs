//! The control-plane quorum guard: a control-plane node does not start a
//! planned drain while another control-plane node is NotReady, the check
//! Cluster API makes before remediating a control-plane machine.

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;

use super::CoordinationError;

/// The label that marks a control-plane node.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// Every role label that makes a node a member of the control plane's
/// quorum: today's, the one clusters set up before Kubernetes 1.24 still
/// carry, and the etcd role of distributions that run etcd on nodes of
/// its own (RKE2, k3s).
pub const CONTROL_PLANE_LABELS: [&str; 3] = [
    CONTROL_PLANE_LABEL,
    "node-role.kubernetes.io/master",
    "node-role.kubernetes.io/etcd",
];

/// Whether `node` carries a control-plane role label.
pub fn is_control_plane(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| CONTROL_PLANE_LABELS.iter().any(|k| l.contains_key(*k)))
}

/// [`is_control_plane`] of a Node as raw JSON.
pub fn is_control_plane_json(node: &serde_json::Value) -> bool {
    let labels = &node["metadata"]["labels"];
    CONTROL_PLANE_LABELS
        .iter()
        .any(|k| labels.get(*k).is_some())
}

/// Whether the Node's Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The control-plane nodes among `nodes`, other than `me`, that are not
/// Ready (sorted by name).
pub fn not_ready_peers(nodes: &[Node], me: &str) -> Vec<String> {
    let mut names: Vec<String> = nodes
        .iter()
        .filter(|n| is_control_plane(n) && !is_ready(n))
        .filter_map(|n| n.metadata.name.clone())
        .filter(|name| name != me)
        .collect();
    names.sort();
    names
}

/// Refuses (`QuorumBlocked`) a planned drain of control-plane node `node`
/// while another control-plane node is NotReady. Asked only for a node
/// that takes the control-plane slot, so it checks the peers whatever a
/// new read of the node itself would say. One LIST of the control-plane
/// nodes per call: it runs when a planned drain is about to start, not in
/// a loop.
pub async fn quorum_guard(client: kube::Client, node: &str) -> Result<(), CoordinationError> {
    let nodes: Api<Node> = Api::all(client);
    let mut peers: Vec<Node> = Vec::new();
    // One small LIST per role label (a selector cannot OR them).
    for label in CONTROL_PLANE_LABELS {
        let found = nodes
            .list(&ListParams::default().labels(label))
            .await
            .map_err(|e| CoordinationError::Quorum {
                node: node.to_string(),
                message: format!(
                    "listing the control-plane nodes ({label}): {}",
                    crate::client::explain(&e)
                ),
            })?;
        peers.extend(found.items);
    }
    let mut not_ready = not_ready_peers(&peers, node);
    not_ready.dedup();
    if not_ready.is_empty() {
        Ok(())
    } else {
        Err(CoordinationError::QuorumBlocked { not_ready })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, control_plane: bool, ready: Option<&str>) -> Node {
        let mut v = serde_json::json!({"metadata": {"name": name, "labels": {}}});
        if control_plane {
            // Each role label counts, the legacy ones too.
            let label = CONTROL_PLANE_LABELS[name.len() % CONTROL_PLANE_LABELS.len()];
            v["metadata"]["labels"][label] = "".into();
        }
        if let Some(status) = ready {
            v["status"]["conditions"] = serde_json::json!([{"type": "Ready", "status": status}]);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_other_not_ready_control_plane_nodes_block() {
        let nodes = [
            node("cp-1", true, Some("True")),
            node("cp-2", true, Some("False")),
            node("cp-3", true, Some("Unknown")),
            node("cp-4", true, None),
            node("worker", false, Some("False")),
        ];
        assert_eq!(not_ready_peers(&nodes, "cp-1"), ["cp-2", "cp-3", "cp-4"]);
        assert_eq!(not_ready_peers(&nodes, "cp-2"), ["cp-3", "cp-4"]);
        assert!(not_ready_peers(&nodes[..1], "cp-1").is_empty());
        assert!(is_control_plane(&nodes[0]) && !is_control_plane(&nodes[4]));
    }
}
