//! The kubelet's part for static pods, played for a KWOK node on the real
//! control plane: mirror pods made and removed from the manifests in a
//! directory, with the node's own credentials.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The kubelet's part for static pods, played for a KWOK node: for every
/// manifest in `dir` a mirror pod exists (created with the node's own
/// credentials, so NodeRestriction and the mirror-pod admission rules
/// apply as to a kubelet); for every manifest gone, its mirror pod is
/// deleted. Runs until `stop`.
pub struct MirrorPods {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl MirrorPods {
    pub fn start(client: kube::Client, node: &str, dir: &Path) -> MirrorPods {
        let stop = CancellationToken::new();
        let (s, node, dir) = (stop.clone(), node.to_string(), dir.to_path_buf());
        let task = tokio::spawn(async move {
            loop {
                sync_mirrors(&client, &node, &dir).await;
                tokio::select! {
                    _ = s.cancelled() => return,
                    _ = tokio::time::sleep(std::time::Duration::from_millis(300)) => {}
                }
            }
        });
        MirrorPods { stop, task }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

async fn sync_mirrors(client: &kube::Client, node: &str, dir: &Path) {
    let mut wanted: BTreeSet<(String, String)> = BTreeSet::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path: PathBuf = entry.path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(mut pod) = serde_saphyr::from_str::<Value>(&text) else {
            continue;
        };
        let ns = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        // The kubelet names a static pod after its node, and marks its
        // mirror with the manifest's hash and its node as owner.
        let name = format!(
            "{}-{node}",
            pod["metadata"]["name"].as_str().unwrap_or("static")
        );
        wanted.insert((ns.clone(), name.clone()));
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        if pods.get_opt(&name).await.ok().flatten().is_some() {
            continue;
        }
        pod["metadata"]["name"] = json!(name);
        pod["metadata"]["annotations"]["kubernetes.io/config.mirror"] = json!("hash-1");
        pod["metadata"]["annotations"]["kubernetes.io/config.source"] = json!("file");
        pod["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid(client, node).await,
            "controller": true,
        }]);
        pod["spec"]["nodeName"] = json!(node);
        if let Ok(p) = serde_json::from_value::<Pod>(pod) {
            let _ = pods.create(&PostParams::default(), &p).await;
        }
    }
    let all: Api<Pod> = Api::all(client.clone());
    let on_node = all
        .list(&kube::api::ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    for p in on_node {
        let mirror = p
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
        let key = (
            p.metadata.namespace.clone().unwrap_or_default(),
            p.metadata.name.clone().unwrap_or_default(),
        );
        if mirror && !wanted.contains(&key) {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &key.0);
            let _ = pods.delete(&key.1, &DeleteParams::default()).await;
        }
    }
}

async fn node_uid(client: &kube::Client, node: &str) -> String {
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .get(node)
        .await
        .ok()
        .and_then(|n| n.metadata.uid)
        .unwrap_or_default()
}
