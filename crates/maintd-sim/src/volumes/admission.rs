//! What the API server checks on PersistentVolumes,
//! PersistentVolumeClaims and VolumeAttachments: required fields, the one
//! volume type, and what may not change once written.

use serde_json::Value;

use super::STORAGE_GROUP;
use crate::errors::ApiError;
use crate::meta;
use crate::resources::ResourceDef;

/// The access modes the API server knows.
const ACCESS_MODES: [&str; 4] = [
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];

/// The volume types of a PersistentVolumeSpec; exactly one is given.
const PV_SOURCES: [&str; 22] = [
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "csi",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "glusterfs",
    "hostPath",
    "iscsi",
    "local",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
];

/// What the API server refuses in a new or changed PersistentVolume,
/// PersistentVolumeClaim or VolumeAttachment, as 422 causes.
pub fn check(def: &ResourceDef, obj: &Value, causes: &mut Vec<(String, String)>) {
    let spec = &obj["spec"];
    let mut required = |field: &str, why: &str| {
        let msg = if why.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {why}")
        };
        causes.push((field.to_string(), msg));
    };
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "PersistentVolume") => {
            match spec["capacity"].as_object() {
                None => required("spec.capacity", ""),
                Some(c) if c.is_empty() => required("spec.capacity", ""),
                Some(c) if !c.contains_key("storage") || c.len() > 1 => causes.push((
                    "spec.capacity".into(),
                    format!(
                        "Unsupported value: {}: supported values: \"storage\"",
                        spec["capacity"]
                    ),
                )),
                Some(_) => {}
            }
            access_modes(spec, "at least 1 access mode is required", causes);
            let sources: Vec<&str> = PV_SOURCES
                .iter()
                .copied()
                .filter(|s| !spec[*s].is_null())
                .collect();
            match sources.as_slice() {
                [] => causes.push((
                    "spec".into(),
                    "Required value: must specify a volume type".into(),
                )),
                [_] => {}
                [_, more @ ..] => causes.push((
                    format!("spec.{}", more[0]),
                    "Forbidden: may not specify more than 1 volume type".into(),
                )),
            }
            if !spec["csi"].is_null() {
                for f in ["driver", "volumeHandle"] {
                    if spec["csi"][f].as_str().is_none_or(str::is_empty) {
                        causes.push((format!("spec.csi.{f}"), "Required value".into()));
                    }
                }
            }
        }
        ("", "PersistentVolumeClaim") => {
            access_modes(spec, "at least 1 access mode is required", causes);
            if spec["resources"]["requests"]["storage"].is_null() {
                causes.push(("spec.resources[storage]".into(), "Required value".into()));
            }
        }
        (STORAGE_GROUP, "VolumeAttachment") => {
            for f in ["attacher", "nodeName"] {
                if spec[f].as_str().is_none_or(str::is_empty) {
                    causes.push((format!("spec.{f}"), "Required value".into()));
                }
            }
            let source = &spec["source"];
            let given = ["persistentVolumeName", "inlineVolumeSpec"]
                .iter()
                .filter(|f| !source[**f].is_null())
                .count();
            let why = "must specify exactly one of inlineVolumeSpec and persistentVolumeName";
            match given {
                0 => causes.push(("spec.source".into(), format!("Required value: {why}"))),
                1 => {}
                _ => causes.push(("spec.source".into(), format!("Forbidden: {why}"))),
            }
        }
        _ => {}
    }
}

fn access_modes(spec: &Value, why: &str, causes: &mut Vec<(String, String)>) {
    let modes = spec["accessModes"].as_array();
    if modes.is_none_or(|m| m.is_empty()) {
        causes.push(("spec.accessModes".into(), format!("Required value: {why}")));
        return;
    }
    for m in modes.into_iter().flatten() {
        let known = m.as_str().is_some_and(|m| ACCESS_MODES.contains(&m));
        if !known {
            causes.push((
                "spec.accessModes".into(),
                format!(
                    "Unsupported value: {m}: supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""
                ),
            ));
        }
    }
}

/// What may not change once written: a volume's source, a claim's spec
/// (but for its requests, its volume attributes class, and the volume it
/// names while it names none), an attachment's spec.
pub fn check_update(def: &ResourceDef, old: &Value, new: &Value) -> Result<(), ApiError> {
    let mut causes: Vec<(String, String)> = Vec::new();
    let (was, is) = (&old["spec"], &new["spec"]);
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "PersistentVolume") if PV_SOURCES.iter().any(|s| was[*s] != is[*s]) => {
            causes.push((
                "spec.persistentvolumesource".into(),
                "Forbidden: spec.persistentvolumesource is immutable after creation".into(),
            ));
        }
        ("", "PersistentVolumeClaim") => {
            let fixed = |spec: &Value, keep_volume: bool| {
                let mut s = spec.clone();
                if let Some(m) = s.as_object_mut() {
                    m.remove("volumeAttributesClassName");
                    if !keep_volume {
                        m.remove("volumeName");
                    }
                }
                if let Some(r) = s["resources"].as_object_mut() {
                    r.remove("requests");
                }
                s
            };
            // The PV controller sets the volume of a claim that names none.
            let keep_volume = was["volumeName"].as_str().is_some_and(|v| !v.is_empty());
            if fixed(was, keep_volume) != fixed(is, keep_volume) {
                causes.push((
                    "spec".into(),
                    "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims".into(),
                ));
            }
        }
        (STORAGE_GROUP, "VolumeAttachment") if was != is => {
            causes.push((
                "spec".into(),
                format!("Invalid value: {is}: field is immutable"),
            ));
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            &def.gr(),
            meta::name(new),
            &def.kind,
            causes,
        ))
    }
}
