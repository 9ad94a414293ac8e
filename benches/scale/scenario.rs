//! The objects of the scale scenario, the same on both API servers: N
//! nodes labelled `pool=all`, a few bare pods on each, one DaemonSet (a
//! pod on every node, drained after the node carries maintd's NoSchedule
//! taint, and made again by its controller once the node is back), and the
//! NodeMaintenance of the rolling reboot.

use serde_json::{Value, json};

/// How long the scenario's pods take to stop, as both API servers read it
/// (`sim.maintd.io/shutdown-seconds`; KWOK's Stages round it up to whole
/// seconds and cap it at the deletion's grace).
pub const SHUTDOWN_SECONDS: &str = "0.2";

/// The namespace of the scenario's pods and DaemonSet.
pub const NAMESPACE: &str = "default";

/// Node `i`'s name.
pub fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

/// The labels of node `i` of `n` in `orders` drain orders.
pub fn node_labels(i: usize, n: usize, orders: usize) -> Value {
    let node = node_name(i);
    let mut labels =
        json!({"pool": "all", "kubernetes.io/hostname": node, "kubernetes.io/os": "linux"});
    if orders > 1 {
        labels["maintd.io/drain-order"] =
            json!(super::watch::drain_order(i, n, orders).to_string());
    }
    labels
}

/// Bare pod `p` of node `i`: no controller, so evicted it is gone.
pub fn bare_pod(i: usize, p: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": format!("app-{i:05}-{p}"), "namespace": NAMESPACE,
                        "annotations": {"sim.maintd.io/shutdown-seconds": SHUTDOWN_SECONDS}},
           "spec": {"nodeName": node_name(i), "terminationGracePeriodSeconds": 30,
                    "containers": [{"name": "c", "image": "registry.example/app:1"}]}})
}

/// The DaemonSet: one pod a node.
pub fn daemonset() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
           "metadata": {"name": "node-agent", "namespace": NAMESPACE, "labels": {"app": "node-agent"}},
           "spec": {"selector": {"matchLabels": {"app": "node-agent"}},
                    "template": {"metadata": {"labels": {"app": "node-agent"},
                                              "annotations": {"sim.maintd.io/shutdown-seconds": SHUTDOWN_SECONDS}},
                                 "spec": {"terminationGracePeriodSeconds": 30,
                                          "containers": [{"name": "node-agent", "image": "registry.example/node-agent:1"}]}}}})
}

/// The rolling reboot: every node, `slots` at a time, each turn ending
/// with the node's reboot.
pub fn rolling(slots: usize, ahead: usize) -> Value {
    json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
           "metadata": {"name": "rolling"},
           "spec": {"nodeSelector": {"matchLabels": {"pool": "all"}}, "stage": "Drain",
                    "maxConcurrentDrains": slots,
                    "cordonAhead": ahead,
                    "waitForReboot": {"timeoutSeconds": 600}}})
}
