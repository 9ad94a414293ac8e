//! Persistent volumes in the simulated cluster: the resources
//! (PersistentVolumeClaims, PersistentVolumes, VolumeAttachments), what the
//! API server checks on them, and the controllers that act on them — the
//! PV controller's binding of pre-bound claims and volumes (`binder`), and
//! kube-controller-manager's attach/detach controller together with a CSI
//! external-attacher (`attach`). This file holds the names, the
//! defaults and a builder for tests; `admission` holds the checks.
//!
//! Where it differs from a cluster: no dynamic provisioning and no
//! matching of a claim to a free volume by size or class (a claim binds
//! only to the volume it names, or to a volume that names it); no
//! `pvc-protection`/`pv-protection` finalizers; the Node's
//! `status.volumesAttached`/`volumesInUse` are not written; attaching is
//! immediate.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::meta;
use super::patch::{ListKind, ListSchema};
use super::resources::{Gr, ResourceDef};
use super::state::SimState;
use super::verbs::{self, Part, Writer};

mod admission;
mod attach;
mod binder;
#[cfg(test)]
mod tests;

pub use admission::{check, check_update};
pub use attach::start;

/// The API group of VolumeAttachments.
pub const STORAGE_GROUP: &str = "storage.k8s.io";

/// On a PersistentVolume: how many seconds detaching it from a node takes
/// once no pod there uses it (a float, at most [`LONGEST_DETACH_SECS`];
/// malformed or negative: `SimConfig::volume_detach`). Read again on every
/// change, so lowering it releases a volume already detaching.
pub const DETACH_ANNOTATION: &str = "sim.maintd.io/detach-seconds";

/// The longest detach [`DETACH_ANNOTATION`] can ask for; larger values are
/// held to it. An hour outlasts any test: "a volume left attached".
pub const LONGEST_DETACH_SECS: f64 = 3600.0;

/// The field manager of the simulated kube-controller-manager's writes.
const CONTROLLER_MANAGER: &str = "kube-controller-manager";

/// The name Kubernetes' CSI attacher gives the attachment of a volume to a
/// node: `csi-` and the hex SHA-256 of volume handle, driver and node name
/// written one after the other (`getAttachmentName` in
/// pkg/volume/csi/csi_attacher.go).
pub fn attachment_name(volume_handle: &str, driver: &str, node: &str) -> String {
    let input = format!("{volume_handle}{driver}{node}");
    let digest = ring::digest::digest(&ring::digest::SHA256, input.as_bytes());
    let mut name = String::with_capacity(4 + 64);
    name.push_str("csi-");
    for b in digest.as_ref() {
        name.push_str(&format!("{b:02x}"));
    }
    name
}

/// The finalizer the CSI external-attacher puts on the attachments it
/// handles: `external-attacher/` and the driver's name with every
/// character other than a letter, digit or `-` made a `-` (and an `X`
/// after a trailing `-`), as its `SanitizeDriverName` does.
pub fn attacher_finalizer(driver: &str) -> String {
    let mut name: String = driver
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() || name.ends_with('-') {
        name.push('X');
    }
    format!("external-attacher/{name}")
}

/// How long detaching `pv` takes: its [`DETACH_ANNOTATION`], held to
/// [`LONGEST_DETACH_SECS`], or `default` when it has none or a malformed
/// one.
pub fn detach_delay(pv: &Value, default: Duration) -> Duration {
    meta::seconds_annotation(pv, DETACH_ANNOTATION)
        .map(|s| s.min(LONGEST_DETACH_SECS))
        .map_or(default, Duration::from_secs_f64)
}

/// A CSI volume of `driver` bound to claim `namespace`/`claim`, as the
/// pair (PersistentVolume `pv`, PersistentVolumeClaim `claim`) to create:
/// 1Gi, ReadWriteOnce, volume handle `<pv>-handle`, each naming the other
/// (pre-bound, so the binder makes both Bound). Add [`DETACH_ANNOTATION`]
/// to the PV's annotations to slow its detach.
pub fn csi_volume(namespace: &str, claim: &str, pv: &str, driver: &str) -> (Value, Value) {
    let volume = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": pv},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace, "name": claim},
            "csi": {"driver": driver, "volumeHandle": format!("{pv}-handle")},
        },
    });
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "",
            "volumeName": pv,
        },
    });
    (volume, claim)
}

/// The three resources; every cluster serves them.
pub fn resources() -> Vec<ResourceDef> {
    let conditions = || ListKind::Map(vec!["type".to_string()]);
    let def =
        |group: &str, plural: &str, kind: &str, namespaced: bool, short: &[&str]| ResourceDef {
            group: group.into(),
            versions: vec!["v1".into()],
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            namespaced,
            status_subresource: true,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            categories: vec![],
            list_schema: Arc::new(
                ListSchema::builtin(group, kind).with(&["status", "conditions"], conditions()),
            ),
            printer_columns: vec![],
            custom: false,
        };
    vec![
        def(
            "",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            &["pvc"],
        ),
        def("", "persistentvolumes", "PersistentVolume", false, &["pv"]),
        def(
            STORAGE_GROUP,
            "volumeattachments",
            "VolumeAttachment",
            false,
            &[],
        ),
    ]
}

/// What the API server fills in on create (its defaulting functions).
pub fn default_new(def: &ResourceDef, obj: &mut Value) {
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "PersistentVolume") => {
            if obj["spec"].is_object() {
                fill(&mut obj["spec"], "persistentVolumeReclaimPolicy", "Retain");
                fill(&mut obj["spec"], "volumeMode", "Filesystem");
            }
            if !obj["status"].is_object() {
                obj["status"] = json!({});
            }
            if obj["status"]["phase"].is_null() {
                obj["status"]["phase"] = json!("Pending");
                obj["status"]["lastPhaseTransitionTime"] = json!(meta::now_time());
            }
        }
        ("", "PersistentVolumeClaim") => {
            if obj["spec"].is_object() {
                fill(&mut obj["spec"], "volumeMode", "Filesystem");
            }
            if !obj["status"].is_object() {
                obj["status"] = json!({});
            }
            if obj["status"]["phase"].is_null() {
                obj["status"]["phase"] = json!("Pending");
            }
        }
        _ => {}
    }
}

fn fill(spec: &mut Value, key: &str, value: &str) {
    if spec[key].is_null() {
        spec[key] = json!(value);
    }
}

/// A conflict-checked write of `obj` changed by `edit`, as `manager`;
/// None when it failed (a newer version exists, and its event brings the
/// controller back to work from that one).
fn write(
    sim: &SimState,
    gr: &Gr,
    obj: &Value,
    part: Part,
    manager: &str,
    edit: impl FnOnce(&mut Value),
) -> Option<Arc<Value>> {
    let def = sim.store().resource(gr)?;
    let mut next = obj.clone();
    edit(&mut next);
    if next == *obj {
        return Some(Arc::new(next));
    }
    let writer = Writer {
        manager: manager.into(),
        force: false,
        user: None,
    };
    let (ns, name) = (meta::namespace(obj), meta::name(obj));
    verbs::update(sim, &def, ns, name, part, next, &writer)
        .inspect_err(|e| tracing::debug!(%gr, %name, error = %e.message, "a simulated volume controller could not write"))
        .ok()
}
