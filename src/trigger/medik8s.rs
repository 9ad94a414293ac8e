//! medik8s' NodeMaintenance as a trigger (opt-in, `--medik8s`): an object
//! naming this node asks for a full drain with the default plan, for as
//! long as it exists. It is watched by a [`MaintenanceTrigger::medik8s`].
//!
//! [`MaintenanceTrigger::medik8s`]: super::maintenance::MaintenanceTrigger::medik8s

use std::sync::Arc;

use serde_json::Value;

use super::Desired;
use crate::api::medik8s::request_for;

/// The names of the objects asking `node` to be drained, sorted.
pub fn requests(objs: &[Arc<Value>], node: &str) -> Vec<String> {
    let mut names: Vec<String> = objs
        .iter()
        .filter_map(|o| request_for(o, node))
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

/// Adds one source line per request; any request evicts. The plan stays
/// whatever another trigger chose (a maintd NodeMaintenance's drainPlan),
/// else the default.
pub fn contribute(requests: &[String], desired: &mut Desired) {
    for name in requests {
        desired.sources.push(describe(name));
        desired.evict = true;
        desired.urgent = true;
    }
}

/// How a request shows among the triggers (status, Node condition, Events).
pub fn describe(name: &str) -> String {
    format!("medik8s NodeMaintenance {name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_request_naming_the_node_evicts_without_changing_the_plan() {
        let objs: Vec<Arc<Value>> = [
            json!({"metadata": {"name": "b"}, "spec": {"nodeName": "node-a"}}),
            json!({"metadata": {"name": "other"}, "spec": {"nodeName": "node-b"}}),
            json!({"metadata": {"name": "a"}, "spec": {"nodeName": "node-a", "reason": "disk"}}),
            json!({"kind": "garbage"}),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let names = requests(&objs, "node-a");
        assert_eq!(names, ["a", "b"]);

        let mut d = Desired::default();
        contribute(&[], &mut d);
        assert!(!d.active());
        contribute(&names, &mut d);
        assert!(d.evict && d.entries.is_none());
        assert_eq!(
            d.sources,
            ["medik8s NodeMaintenance a", "medik8s NodeMaintenance b"]
        );
    }
}
