//! Status of medik8s' NodeMaintenance objects naming this node, in medik8s'
//! own fields (see [`crate::api::medik8s`]). Applied by the same reporter,
//! coalesced the same way, under the same field manager `maintd/<node>`.

use std::collections::BTreeMap;

use crate::api::medik8s::{self, Medik8sStatus};
use crate::drain::progress::now_time;

use super::StatusReporter;

impl StatusReporter {
    /// Applies the status of every medik8s object asking for this node,
    /// skipping one identical to the last written to that object (by uid,
    /// so a recreated object of the same name is written afresh). Returns
    /// false if a write failed.
    pub(super) async fn write_medik8s(
        &self,
        written: &mut BTreeMap<String, Medik8sStatus>,
    ) -> bool {
        let Some(trigger) = &self.medik8s else {
            return true;
        };
        let objs = trigger.index.all();
        written.retain(|uid, _| objs.iter().any(|o| o["metadata"]["uid"] == uid.as_str()));
        let status = medik8s::status(&self.progress.status());
        let mut ok = true;
        for obj in &objs {
            let Some(name) = medik8s::request_for(obj, &self.node) else {
                continue;
            };
            let uid = obj["metadata"]["uid"].as_str().unwrap_or(name).to_string();
            if written.get(&uid) == Some(&status) {
                continue;
            }
            let body = medik8s::apply_body(name, &status, &now_time());
            let path = format!(
                "{}/{name}/status?fieldManager=maintd/{}&force=true",
                medik8s::PATH,
                self.node
            );
            if self.patch_apply(path, &body).await {
                written.insert(uid, status.clone());
            } else {
                ok = false;
            }
        }
        ok
    }
}
