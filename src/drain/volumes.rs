//! After the last stage: the volumes of the pods drained are detached
//! before the node counts as drained. A pod that is gone from the API has
//! let go of its volumes on the node only once the attach/detach controller
//! and the CSI driver have detached them; a reboot before that races the
//! detach, and the pods' replacements elsewhere fail with multi-attach
//! errors (Cluster API's `nodeVolumeDetachTimeout`, Karpenter's wait, do
//! the same).
//!
//! Which attachments: those of the claims the drained pods mounted, minus
//! claims a pod still on the node mounts (a DaemonSet pod that stays keeps
//! its volume). A claim's PersistentVolume names its CSI driver and volume
//! handle, and from those and the node the VolumeAttachment's name follows
//! as Kubernetes makes it, so each is read by name: nothing lists every
//! attachment of the cluster. Volumes without a CSI driver are not waited
//! for (in-tree plugins are migrated to CSI on current clusters, and their
//! attachment is then a CSI one).
//!
//! The wait is bounded (`--volume-detach-timeout-seconds`, and a
//! shutdown's deadline); each attachment left is named as a blocker, and
//! one still there at the end is reported and left.

use std::collections::BTreeSet;
use std::time::Duration;

use http::Request;
use serde_json::Value;

/// A claim of a drained pod: (namespace, name).
pub type Claim = (String, String);

/// One volume the drain waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    pub claim: Claim,
    pub volume: String,
    pub driver: String,
    /// The VolumeAttachment's name.
    pub attachment: String,
    /// What the attacher last reported going wrong, if anything.
    pub detach_error: Option<String>,
}

impl Attached {
    /// The blocker's words.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "volume {} (claim {}/{}, driver {}) is still attached to the node: VolumeAttachment {}",
            self.volume, self.claim.0, self.claim.1, self.driver, self.attachment
        );
        if let Some(e) = &self.detach_error {
            s.push_str(&format!("; detach error: {e}"));
        }
        s
    }
}

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The claims a pod mounts.
pub fn claims_of(pod: &Value) -> Vec<Claim> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
        .filter(|c| !c.is_empty())
        .map(|c| (ns.to_string(), c.to_string()))
        .collect()
}

/// The claims to wait for: those of drained pods no pod on the node still
/// mounts.
pub fn to_wait_for(drained: &BTreeSet<Claim>, pods_here: &[std::sync::Arc<Value>]) -> Vec<Claim> {
    let kept: BTreeSet<Claim> = pods_here.iter().flat_map(|p| claims_of(p)).collect();
    drained.difference(&kept).cloned().collect()
}

/// The name Kubernetes gives a CSI volume's attachment to a node:
/// `csi-` and the hex SHA-256 of volume handle, driver and node.
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{handle}{driver}{node}").as_bytes(),
    );
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("csi-{hex}")
}

/// What a claim came to, read from the API.
enum Resolved {
    /// A CSI volume, and the attachment to wait for.
    Csi {
        volume: String,
        driver: String,
        attachment: String,
    },
    /// Nothing to wait for: the claim or its volume is gone, unbound, or
    /// not a CSI volume.
    Nothing,
}

/// Reads claims, volumes and attachments for one node.
pub struct Volumes<'a> {
    pub client: &'a kube::Client,
    pub node: &'a str,
}

impl Volumes<'_> {
    /// The attachments of `claims` still on the node; Err names what
    /// could not be read (asked again on the next look).
    pub async fn attached(&self, claims: &[Claim]) -> Result<Vec<Attached>, String> {
        let mut out = Vec::new();
        for claim in claims {
            let Resolved::Csi {
                volume,
                driver,
                attachment,
            } = self.resolve(claim).await?
            else {
                continue;
            };
            let path = format!("/apis/storage.k8s.io/v1/volumeattachments/{attachment}");
            let Some(va) = self.get(&path).await? else {
                continue;
            };
            if va["spec"]["nodeName"] != self.node {
                continue;
            }
            // The attacher's words, one line and bounded.
            let detach_error = va["status"]["detachError"]["message"]
                .as_str()
                .map(|m| crate::outbound::shorten(m, 240));
            out.push(Attached {
                claim: claim.clone(),
                volume,
                driver,
                attachment,
                detach_error,
            });
        }
        Ok(out)
    }

    async fn resolve(&self, (ns, name): &Claim) -> Result<Resolved, String> {
        let pvc = self
            .get(&format!(
                "/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}"
            ))
            .await?;
        let Some(volume) = pvc
            .as_ref()
            .and_then(|c| c["spec"]["volumeName"].as_str())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
        else {
            return Ok(Resolved::Nothing);
        };
        let Some(pv) = self
            .get(&format!("/api/v1/persistentvolumes/{volume}"))
            .await?
        else {
            return Ok(Resolved::Nothing);
        };
        let csi = &pv["spec"]["csi"];
        let (Some(driver), Some(handle)) = (csi["driver"].as_str(), csi["volumeHandle"].as_str())
        else {
            return Ok(Resolved::Nothing);
        };
        Ok(Resolved::Csi {
            attachment: attachment_name(handle, driver, self.node),
            driver: driver.to_string(),
            volume,
        })
    }

    /// The object at `path`; None when it does not exist.
    async fn get(&self, path: &str) -> Result<Option<Value>, String> {
        let req = Request::get(path)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(CALL_TIMEOUT, self.client.request::<Value>(req)).await {
            Err(_) => Err(format!(
                "reading {path}: no answer within {}s",
                CALL_TIMEOUT.as_secs()
            )),
            Ok(Ok(v)) => Ok(Some(v)),
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(None),
            Ok(Err(e)) => Err(format!("reading {path}: {}", crate::client::explain(&e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn the_attachment_is_named_as_kubernetes_names_it() {
        // sha256("vol-1" + "ebs.csi.aws.com" + "node-a"), as Go's
        // fmt.Sprintf("csi-%x", sha256.Sum256(...)) prints it.
        let name = attachment_name("vol-1", "ebs.csi.aws.com", "node-a");
        assert!(name.starts_with("csi-"));
        assert_eq!(name.len(), 4 + 64);
        assert_eq!(
            attachment_name("", "", ""),
            "csi-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_ne!(name, attachment_name("vol-1", "ebs.csi.aws.com", "node-b"));
    }

    #[test]
    fn claims_of_pods_that_stay_are_not_waited_for() {
        let pod = |name: &str, claims: &[&str]| {
            Arc::new(json!({
                "metadata": {"namespace": "db", "name": name},
                "spec": {"volumes": claims.iter().map(|c| json!({"name": "v", "persistentVolumeClaim": {"claimName": c}})).chain([json!({"name": "tmp", "emptyDir": {}})]).collect::<Vec<_>>()}
            }))
        };
        assert_eq!(
            claims_of(&pod("a", &["data", ""])),
            [("db".to_string(), "data".to_string())]
        );
        assert!(claims_of(&json!({"spec": {"volumes": "x"}})).is_empty());
        let drained: BTreeSet<Claim> = [("db", "data"), ("db", "shared")]
            .iter()
            .map(|(n, c)| (n.to_string(), c.to_string()))
            .collect();
        assert_eq!(
            to_wait_for(&drained, &[pod("agent", &["shared"])]),
            [("db".to_string(), "data".to_string())]
        );
    }

    #[test]
    fn a_blocker_names_the_volume_its_claim_and_the_detach_error() {
        let a = Attached {
            claim: ("db".into(), "data".into()),
            volume: "pv-1".into(),
            driver: "csi.example.com".into(),
            attachment: "csi-abc".into(),
            detach_error: Some("rpc error: volume busy".into()),
        };
        assert_eq!(
            a.describe(),
            "volume pv-1 (claim db/data, driver csi.example.com) is still attached to the node: VolumeAttachment csi-abc; detach error: rpc error: volume busy"
        );
    }
}
