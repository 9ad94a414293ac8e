//! The static stage's one action: moving its pods' manifests out of the
//! kubelet's directory. A static pod whose manifest cannot be moved keeps
//! the stage open, so it is named, with why, rather than waited on in
//! silence.

use std::collections::HashMap;

use super::Drainer;
use crate::drain::plan::{PlannedPod, PodType};
use crate::drain::progress::EventKind;
use crate::drain::static_pods::{Manifest, StashError, StaticPodStash};

impl Drainer {
    /// Moves the manifests of this stage's static pods out of the kubelet's
    /// directory, so the kubelet stops them. Returns, by pod uid, why a
    /// pod's manifest could not be moved.
    pub(super) fn stash_static(
        &self,
        number: usize,
        pods: &[PlannedPod],
    ) -> HashMap<String, String> {
        let p = &self.progress;
        let mut ev = p.event(EventKind::StaticPodsStashed);
        ev.stage = Some(number);
        ev.pod_type = Some(PodType::Static);
        let all = |why: &str| -> HashMap<String, String> {
            pods.iter()
                .map(|x| (x.uid.clone(), why.to_string()))
                .collect()
        };
        let Some(stash) = &self.stash else {
            ev.event = EventKind::Warning;
            ev.message = "static pods are on the node but no static pod directory is configured; they cannot be drained".into();
            p.emit(ev);
            return all(
                "no manifest for this mirror pod: no static pod directory is configured (--static-pod-dir)",
            );
        };
        let dir = stash.manifest_dir.display().to_string();
        let manifests = match stash.manifests() {
            Ok(m) => m,
            Err(e) => {
                ev.event = EventKind::Warning;
                ev.message = e.to_string();
                p.emit(ev);
                return all(&match e {
                    StashError::ManifestDirMissing(_) => format!(
                        "no manifest for this mirror pod in {dir}: the directory does not exist (set --static-pod-dir to the kubelet's staticPodPath)"
                    ),
                    e => format!("no manifest for this mirror pod could be read in {dir}: {e}"),
                });
            }
        };
        // A drain resumed after the move finds its manifests in the stash:
        // those pods are on their way out, not blocked. Unreadable, the
        // stash only costs that knowledge.
        let stashed = stash.stashed_manifests().unwrap_or_default();
        let node = self.ops.node();
        let mut files = Vec::new();
        let mut unstashable = HashMap::new();
        for pod in pods {
            if let Some(m) = manifests.iter().find(|m| is_manifest_of(m, pod, node)) {
                files.push(m.file.clone());
            } else if !stashed.iter().any(|m| is_manifest_of(m, pod, node)) {
                unstashable.insert(
                    pod.uid.clone(),
                    format!("no manifest for this mirror pod in {dir}"),
                );
            }
        }
        match stash.stash(Some(&files)) {
            Ok(_) => {
                ev.message = format!(
                    "moved {} manifests out of the kubelet's directory: {}",
                    files.len(),
                    files.join(", ")
                );
            }
            Err(e) => {
                ev.event = EventKind::Warning;
                ev.message = e.to_string();
                for pod in pods {
                    if manifests.iter().any(|m| is_manifest_of(m, pod, node)) {
                        unstashable.insert(
                            pod.uid.clone(),
                            format!("its manifest could not be moved out of {dir}: {e}"),
                        );
                    }
                }
            }
        }
        p.emit(ev);
        unstashable
    }
}

/// Whether `m` is the manifest the kubelet made this mirror pod from.
pub(crate) fn is_manifest_of(m: &Manifest, pod: &PlannedPod, node: &str) -> bool {
    m.pod_name
        .as_deref()
        .is_some_and(|n| StaticPodStash::mirror_pod_name(n, node) == pod.name)
        && m.namespace.as_deref().unwrap_or("default") == pod.namespace
}
