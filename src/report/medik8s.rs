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
        // By uid, else name (as for maintd's own objects).
        let key_of = |o: &serde_json::Value| {
            let meta = &o["metadata"];
            meta["uid"]
                .as_str()
                .or(meta["name"].as_str())
                .unwrap_or_default()
                .to_string()
        };
        written.retain(|key, _| objs.iter().any(|o| key_of(o) == *key));
        let status = medik8s::status(&self.progress.status());
        let mut ok = true;
        for obj in &objs {
            let Some(name) = medik8s::request_for(obj, &self.node) else {
                continue;
            };
            let key = key_of(obj);
            if written.get(&key) == Some(&status) {
                continue;
            }
            let body = medik8s::apply_body(name, &status, &now_time());
            if self.apply(medik8s::PATH, name, &self.manager(), body).await {
                written.insert(key, status.clone());
            } else {
                ok = false;
            }
        }
        ok
    }
}
