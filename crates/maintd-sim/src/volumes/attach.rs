//! kube-controller-manager's attach/detach controller and the CSI
//! external-attacher, played together. The controller wants a
//! VolumeAttachment for every CSI volume that a pod bound to a node uses
//! (through a Bound claim), from the time the pod is bound until it is
//! gone from the store or terminal (a terminating pod still uses its
//! volumes); it creates what is wanted and deletes what is not. The
//! attacher puts its finalizer on each attachment and marks it attached at
//! once; on a deleted attachment it takes the volume's detach time
//! ([`super::DETACH_ANNOTATION`], or `SimConfig::volume_detach`) before
//! it removes its finalizer, and only then is the attachment gone.
//!
//! It runs on the store's changes to volumes, claims, attachments and pods
//! that use claims, batched like the other simulated controllers, and
//! wakes for the next detach that is due.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::binder::{self, names_claim};
use super::{CONTROLLER_MANAGER, attacher_finalizer, attachment_name, detach_delay, write};
use crate::meta;
use crate::resources::Gr;
use crate::state::SimState;
use crate::store::StoreEvent;
use crate::verbs::{self, DeleteOptions, Part, Writer};

/// The field manager of the simulated external-attacher.
const ATTACHER: &str = "csi-attacher";

/// How long changes are gathered before the controllers look at them.
const BATCH: Duration = Duration::from_millis(20);

/// An attachment the controller wants: which volume, on which node, by
/// which driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Wanted {
    pub(super) pv: String,
    pub(super) node: String,
    pub(super) driver: String,
}

/// Starts the binder and the attach/detach controller; they run until
/// `stop`.
pub fn start(sim: Arc<SimState>, stop: CancellationToken) {
    let mut rx = sim.store().subscribe();
    tokio::spawn(async move {
        // attachment uid → when its detach began.
        let mut detaching: HashMap<String, Instant> = HashMap::new();
        let mut batch = Some(Instant::now());
        let mut due: Option<Instant> = None;
        loop {
            let wake = match (batch, due) {
                (Some(b), Some(d)) => Some(b.min(d)),
                (b, d) => b.or(d),
            };
            tokio::select! {
                ev = rx.recv() => match ev {
                    Ok(ev) if concerns(&ev) => {
                        batch.get_or_insert_with(|| Instant::now() + BATCH);
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        batch.get_or_insert_with(|| Instant::now() + BATCH);
                    }
                    Err(RecvError::Closed) => return,
                },
                _ = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {
                    batch = None;
                    binder::bind(&sim);
                    due = reconcile(&sim, &mut detaching);
                }
                _ = stop.cancelled() => return,
            }
        }
    });
}

/// Whether a change can matter to binding or attaching: any volume, claim
/// or attachment, and pods that use claims.
fn concerns(ev: &StoreEvent) -> bool {
    if [Gr::pvs(), Gr::pvcs(), Gr::volume_attachments()].contains(&ev.gr) {
        return true;
    }
    let uses_claims = |pod: &Value| {
        pod["spec"]["volumes"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|v| v["persistentVolumeClaim"].is_object()))
    };
    ev.gr == Gr::pods() && (uses_claims(&ev.object) || ev.prev.as_deref().is_some_and(uses_claims))
}

/// The attachments the pods in the store want, by name.
pub(super) fn wanted(
    pods: &[Arc<Value>],
    claims: &[Arc<Value>],
    pvs: &[Arc<Value>],
) -> BTreeMap<String, Wanted> {
    let mut out = BTreeMap::new();
    for pod in pods {
        let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
        let terminal = matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        );
        if node.is_empty() || terminal {
            continue;
        }
        let ns = meta::namespace(pod);
        for vol in pod["spec"]["volumes"].as_array().into_iter().flatten() {
            let Some(claim_name) = vol["persistentVolumeClaim"]["claimName"].as_str() else {
                continue;
            };
            // As the controller does: only a Bound claim, and a volume
            // bound to that very claim.
            let claim = claims
                .iter()
                .find(|c| meta::namespace(c) == ns && meta::name(c) == claim_name)
                .filter(|c| c["status"]["phase"] == "Bound");
            let Some(claim) = claim else { continue };
            let volume = claim["spec"]["volumeName"].as_str().unwrap_or("");
            let pv = pvs.iter().find(|pv| meta::name(pv) == volume).filter(|pv| {
                names_claim(pv, claim)
                    && pv["spec"]["claimRef"]["uid"].as_str() == Some(meta::uid(claim))
            });
            let Some(pv) = pv else { continue };
            let csi = &pv["spec"]["csi"];
            let (Some(driver), Some(handle)) =
                (csi["driver"].as_str(), csi["volumeHandle"].as_str())
            else {
                continue;
            };
            out.insert(
                attachment_name(handle, driver, node),
                Wanted {
                    pv: meta::name(pv).into(),
                    node: node.into(),
                    driver: driver.into(),
                },
            );
        }
    }
    out
}

/// One pass of the controller and the attacher; returns when the next
/// detach is due.
fn reconcile(sim: &SimState, detaching: &mut HashMap<String, Instant>) -> Option<Instant> {
    let (pods, claims, pvs, attachments) = {
        let store = sim.store();
        (
            store.list(&Gr::pods(), None),
            store.list(&Gr::pvcs(), None),
            store.list(&Gr::pvs(), None),
            store.list(&Gr::volume_attachments(), None),
        )
    };
    let wanted = wanted(&pods, &claims, &pvs);
    let def = sim.store().resource(&Gr::volume_attachments())?;
    for (name, w) in &wanted {
        if attachments.iter().any(|a| meta::name(a) == name) {
            continue;
        }
        let body = json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": name},
            "spec": {"attacher": w.driver, "nodeName": w.node, "source": {"persistentVolumeName": w.pv}},
        });
        let writer = Writer {
            manager: CONTROLLER_MANAGER.into(),
            force: false,
            user: None,
        };
        if let Err(e) = verbs::create(sim, &def, None, body, &writer, false) {
            tracing::debug!(%name, error = %e.message, "the simulated attach/detach controller could not create a VolumeAttachment");
        }
    }
    for a in &attachments {
        if !wanted.contains_key(meta::name(a)) && !meta::is_terminating(a) {
            let _ = verbs::delete(sim, &def, "", meta::name(a), &DeleteOptions::default());
        }
    }
    // The attacher works on what is there now.
    let attachments = sim.store().list(&Gr::volume_attachments(), None);
    let now = Instant::now();
    let mut next: Option<Instant> = None;
    detaching.retain(|uid, _| {
        attachments
            .iter()
            .any(|a| meta::uid(a) == uid && meta::is_terminating(a))
    });
    for a in &attachments {
        let finalizer = attacher_finalizer(a["spec"]["attacher"].as_str().unwrap_or(""));
        let has_finalizer = a["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == finalizer.as_str()));
        if !meta::is_terminating(a) {
            attach(sim, a, &finalizer, has_finalizer);
            continue;
        }
        if !has_finalizer {
            continue;
        }
        let began = *detaching.entry(meta::uid(a).to_string()).or_insert(now);
        let pv = a["spec"]["source"]["persistentVolumeName"]
            .as_str()
            .unwrap_or("");
        let default = sim.config.volume_detach;
        let delay = pvs
            .iter()
            .find(|v| meta::name(v) == pv)
            .map_or(default, |v| detach_delay(v, default));
        let at = began + delay;
        if at > now {
            next = Some(next.map_or(at, |n| n.min(at)));
            continue;
        }
        write(
            sim,
            &Gr::volume_attachments(),
            a,
            Part::Main,
            ATTACHER,
            |o| {
                if let Some(f) = o["metadata"]["finalizers"].as_array_mut() {
                    f.retain(|x| *x != finalizer.as_str());
                }
            },
        );
    }
    next
}

/// The attacher's side of a live attachment: its finalizer first, then
/// `status.attached`.
fn attach(sim: &SimState, a: &Arc<Value>, finalizer: &str, has_finalizer: bool) {
    let mut current = a.clone();
    if !has_finalizer {
        let Some(written) = write(
            sim,
            &Gr::volume_attachments(),
            a,
            Part::Main,
            ATTACHER,
            |o| {
                let mut list = o["metadata"]["finalizers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                list.push(json!(finalizer));
                o["metadata"]["finalizers"] = Value::Array(list);
            },
        ) else {
            return;
        };
        current = written;
    }
    if current["status"]["attached"] != true {
        write(
            sim,
            &Gr::volume_attachments(),
            &current,
            Part::Status,
            ATTACHER,
            |o| {
                o["status"]["attached"] = json!(true);
            },
        );
    }
}
