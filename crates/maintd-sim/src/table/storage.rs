//! The columns a real apiserver prints for PersistentVolumes,
//! PersistentVolumeClaims and VolumeAttachments (kubernetes'
//! pkg/printers/internalversion), and the cells of one object's row.

use serde_json::{Value, json};

use super::builtin::{Col, age, col};
use crate::meta;

/// The columns of `plural` in `group`, if it is one of the three.
pub(super) fn columns(group: &str, plural: &str) -> Option<Vec<Col>> {
    Some(match (group, plural) {
        ("", "persistentvolumes") => vec![
            col("Name", 0),
            col("Capacity", 0),
            col("Access Modes", 0),
            col("Reclaim Policy", 0),
            col("Status", 0),
            col("Claim", 0),
            col("StorageClass", 0),
            col("VolumeAttributesClass", 0),
            col("Reason", 0),
            col("Age", 0),
            col("VolumeMode", 1),
        ],
        ("", "persistentvolumeclaims") => vec![
            col("Name", 0),
            col("Status", 0),
            col("Volume", 0),
            col("Capacity", 0),
            col("Access Modes", 0),
            col("StorageClass", 0),
            col("VolumeAttributesClass", 0),
            col("Age", 0),
            col("VolumeMode", 1),
        ],
        ("storage.k8s.io", "volumeattachments") => vec![
            col("Name", 0),
            Col {
                format: "name",
                ..col("Attacher", 0)
            },
            col("PV", 0),
            col("Node", 0),
            col("Attached", 0),
            col("Age", 0),
        ],
        _ => return None,
    })
}

/// The cells of `o`'s row, if it is one of the three.
pub(super) fn cells(group: &str, plural: &str, o: &Value) -> Option<Vec<Value>> {
    let (sp, st) = (&o["spec"], &o["status"]);
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let or_unset = |v: &Value| v.as_str().unwrap_or("<unset>").to_string();
    let phase = || {
        if meta::is_terminating(o) {
            "Terminating".to_string()
        } else {
            text(&st["phase"])
        }
    };
    let name = json!(meta::name(o));
    Some(match (group, plural) {
        ("", "persistentvolumes") => {
            let r = &sp["claimRef"];
            let claim = if r.is_null() {
                String::new()
            } else {
                format!("{}/{}", text(&r["namespace"]), text(&r["name"]))
            };
            vec![
                name,
                json!(text(&sp["capacity"]["storage"])),
                json!(access_modes(&sp["accessModes"])),
                json!(text(&sp["persistentVolumeReclaimPolicy"])),
                json!(phase()),
                json!(claim),
                json!(text(&sp["storageClassName"])),
                json!(or_unset(&sp["volumeAttributesClassName"])),
                json!(text(&st["reason"])),
                json!(age(o)),
                json!(or_unset(&sp["volumeMode"])),
            ]
        }
        ("", "persistentvolumeclaims") => {
            // Capacity and modes are shown once the claim names a volume.
            let bound = !text(&sp["volumeName"]).is_empty();
            let (capacity, modes) = if bound {
                (
                    text(&st["capacity"]["storage"]),
                    access_modes(&st["accessModes"]),
                )
            } else {
                (String::new(), String::new())
            };
            vec![
                name,
                json!(phase()),
                json!(text(&sp["volumeName"])),
                json!(capacity),
                json!(modes),
                json!(text(&sp["storageClassName"])),
                json!(or_unset(&sp["volumeAttributesClassName"])),
                json!(age(o)),
                json!(or_unset(&sp["volumeMode"])),
            ]
        }
        ("storage.k8s.io", "volumeattachments") => {
            let source = &sp["source"];
            let pv = source["persistentVolumeName"]
                .as_str()
                .or(source["inlineVolumeSpec"]["csi"]["volumeHandle"].as_str())
                .unwrap_or("");
            vec![
                name,
                json!(text(&sp["attacher"])),
                json!(pv),
                json!(text(&sp["nodeName"])),
                json!(st["attached"].as_bool().unwrap_or(false)),
                json!(age(o)),
            ]
        }
        _ => return None,
    })
}

/// Access modes the way kubectl abbreviates them: `RWO,ROX,RWX,RWOP`.
fn access_modes(modes: &Value) -> String {
    let has = |m: &str| modes.as_array().is_some_and(|l| l.iter().any(|x| x == m));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(m, _)| has(m))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}
