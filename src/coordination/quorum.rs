//! The control-plane quorum guard: a control-plane node does not start a
//! planned drain while another control-plane node is NotReady, the check
//! Cluster API makes before remediating a control-plane machine.

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;

use super::CoordinationError;

/// The label that marks a control-plane node.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// Whether `node` carries the control-plane role label.
pub fn is_control_plane(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL))
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
/// while another control-plane node is NotReady. Other nodes always pass.
/// One LIST of the control-plane nodes per call: it runs when a planned
/// drain is about to start, not in a loop.
pub async fn quorum_guard(client: kube::Client, node: &str) -> Result<(), CoordinationError> {
    let nodes: Api<Node> = Api::all(client);
    let err = |action: &str, e: kube::Error| CoordinationError::Quorum {
        node: node.to_string(),
        message: format!("{action}: {}", crate::client::explain(&e)),
    };
    let me = nodes
        .get_opt(node)
        .await
        .map_err(|e| err("reading the node", e))?;
    if !me.as_ref().is_some_and(is_control_plane) {
        return Ok(());
    }
    let peers = nodes
        .list(&ListParams::default().labels(CONTROL_PLANE_LABEL))
        .await
        .map_err(|e| err("listing the control-plane nodes", e))?;
    let not_ready = not_ready_peers(&peers.items, node);
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
            v["metadata"]["labels"][CONTROL_PLANE_LABEL] = "".into();
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
