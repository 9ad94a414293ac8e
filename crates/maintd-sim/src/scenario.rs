//! Scenarios: YAML files that seed a simulated cluster with Kubernetes
//! objects of any served kind (nodes, namespaces, priority classes,
//! DaemonSets, ReplicaSets, PodDisruptionBudgets, PersistentVolumes and
//! their claims, pods) and each node's static pod manifests.
//!
//! ```yaml
//! objects:
//!   - {apiVersion: v1, kind: Node, metadata: {name: node-a}}
//!   - apiVersion: apps/v1
//!     kind: ReplicaSet
//!     metadata: {name: web, namespace: default, annotations: {sim.maintd.io/initial-node: node-a}}
//!     spec: {replicas: 3, selector: {matchLabels: {app: web}}, template: {...}}
//! staticPods:
//!   node-a:
//!     - {apiVersion: v1, kind: Pod, metadata: {name: etcd, namespace: kube-system}, spec: {...}}
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use super::resources::Gr;
use super::state::SimState;
use super::verbs::{self, Writer};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub objects: Vec<Value>,
    /// node name → pod manifests written into that node's static pod
    /// directory.
    #[serde(default)]
    pub static_pods: BTreeMap<String, Vec<Value>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("reading scenario {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("parsing scenario: {0}")]
    Parse(String),
    #[error("object {index} ({kind} {name}): {message}")]
    Object {
        index: usize,
        kind: String,
        name: String,
        message: String,
    },
    #[error("writing static pod manifest {path}: {error}")]
    Manifest { path: String, error: std::io::Error },
}

/// Reads a scenario file.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|error| ScenarioError::Read {
        path: path.display().to_string(),
        error,
    })?;
    Scenario::from_yaml(&text)
}

fn order(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "PriorityClass" => 1,
        "CustomResourceDefinition" => 2,
        "Node" => 3,
        "Pod" => 6,
        "DaemonSet" | "ReplicaSet" | "StatefulSet" | "Deployment" => 5,
        _ => 4,
    }
}

impl Scenario {
    pub fn from_yaml(text: &str) -> Result<Scenario, ScenarioError> {
        serde_saphyr::from_str(text).map_err(|e| ScenarioError::Parse(e.to_string()))
    }

    /// Creates the scenario's objects in dependency order and writes its
    /// static pod manifests under `static_root`.
    pub fn apply(&self, sim: &SimState, static_root: Option<&Path>) -> Result<(), ScenarioError> {
        let mut objects: Vec<(usize, &Value)> = self.objects.iter().enumerate().collect();
        objects.sort_by_key(|(i, o)| (order(o["kind"].as_str().unwrap_or("")), *i));
        let writer = Writer {
            manager: "scenario".into(),
            force: false,
            user: None,
        };
        for (index, obj) in objects {
            let kind = obj["kind"].as_str().unwrap_or("").to_string();
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            let err = |message: String| ScenarioError::Object {
                index,
                kind: kind.clone(),
                name: name.clone(),
                message,
            };
            let group = obj["apiVersion"]
                .as_str()
                .unwrap_or("v1")
                .rsplit_once('/')
                .map(|(g, _)| g)
                .unwrap_or("");
            let def = sim
                .store()
                .lookup_kind(group, &kind)
                .ok_or_else(|| err(format!("no resource of kind {kind} in group {group:?}")))?;
            let mut obj = obj.clone();
            with_default_container(&mut obj);
            let ns = obj["metadata"]["namespace"].as_str().map(str::to_string);
            let ns = if def.namespaced {
                Some(ns.unwrap_or_else(|| "default".into()))
            } else {
                None
            };
            let missing = ns
                .as_ref()
                .is_some_and(|ns| sim.store().get(&Gr::namespaces(), "", ns).is_none());
            let nsdef = sim.store().resource(&Gr::namespaces());
            if let Some(ns) = &ns
                && missing
                && let Some(nsdef) = nsdef
            {
                let _ = verbs::create(
                    sim,
                    &nsdef,
                    None,
                    json!({"metadata": {"name": ns}}),
                    &writer,
                    false,
                );
            }
            verbs::create(sim, &def, ns.as_deref(), obj, &writer, true)
                .map_err(|e| err(e.message))?;
        }
        if let Some(root) = static_root {
            for (node, pods) in &self.static_pods {
                let dir = root.join(node);
                std::fs::create_dir_all(&dir).map_err(|error| ScenarioError::Manifest {
                    path: dir.display().to_string(),
                    error,
                })?;
                for pod in pods {
                    let mut pod = pod.clone();
                    with_default_container(&mut pod);
                    let name = pod["metadata"]["name"]
                        .as_str()
                        .unwrap_or("static")
                        .to_string();
                    let path = dir.join(format!("{name}.yaml"));
                    let text = serde_saphyr::to_string(&pod)
                        .map_err(|e| ScenarioError::Parse(e.to_string()))?;
                    std::fs::write(&path, text).map_err(|error| ScenarioError::Manifest {
                        path: path.display().to_string(),
                        error,
                    })?;
                }
            }
        }
        Ok(())
    }
}

/// Pods and pod templates need a container; scenarios may leave it out.
fn with_default_container(obj: &mut Value) {
    let spec = match obj["kind"].as_str() {
        Some("Pod") => &mut obj["spec"],
        Some("ReplicaSet" | "DaemonSet" | "Deployment" | "StatefulSet") => {
            &mut obj["spec"]["template"]["spec"]
        }
        _ => return,
    };
    if spec["containers"].as_array().is_none_or(|c| c.is_empty()) {
        spec["containers"] = json!([{"name": "app", "image": "registry.example/app:1"}]);
    }
}
