//! `maintd plan`: the drain plan for a node, computed from the cluster
//! without acting.

use http::Request;
use kube::core::ObjectList;
use serde_json::Value;

use crate::drain::plan::{self, DrainPlan, PlanOptions, PodInfo};

/// Lists the node's pods once and builds the default plan for them.
pub async fn plan_for_node(client: &kube::Client, node: &str) -> Result<DrainPlan, kube::Error> {
    let req = Request::get(format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"))
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    let pods: ObjectList<Value> = client.request(req).await?;
    let infos: Vec<PodInfo> = pods.items.iter().map(PodInfo::from_json).collect();
    let opts = PlanOptions {
        own_pod: None,
        drain_taint_key: "maintd.io/draining".into(),
        drain_taint_effect: "NoSchedule".into(),
    };
    Ok(plan::build_plan(&infos, None, &opts))
}

/// The plan as a person reads it.
pub fn render(plan: &DrainPlan) -> String {
    let mut out = String::new();
    let total: usize = plan.stages.iter().map(|s| s.pods.len()).sum();
    out.push_str(&format!(
        "{} stages, {} pods to drain\n",
        plan.stages.len(),
        total
    ));
    for (i, stage) in plan.stages.iter().enumerate() {
        out.push_str(&format!(
            "\nstage {}: {} ({} pods)\n",
            i + 1,
            stage.label,
            stage.pods.len()
        ));
        for p in &stage.pods {
            // What kubectl drain would warn of (no controller, emptyDir
            // data, a malformed field) is said on the pod's own line.
            let notes = if p.notes.is_empty() {
                String::new()
            } else {
                let said: Vec<String> = p.notes.iter().map(ToString::to_string).collect();
                format!("  ({})", said.join("; "))
            };
            out.push_str(&format!(
                "  {}/{}  priority {}  {:?}{notes}\n",
                p.namespace, p.name, p.priority, p.action
            ));
        }
    }
    if !plan.completed.is_empty() {
        out.push_str(&format!(
            "\ncompleted pods, deleted first: {}\n",
            plan.completed.len()
        ));
    }
    if !plan.skipped.is_empty() {
        out.push_str("\nnot drained:\n");
        for s in &plan.skipped {
            out.push_str(&format!("  {}/{}  {}\n", s.namespace, s.name, s.reason));
        }
    }
    for w in &plan.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}
