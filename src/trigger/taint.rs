//! The drain taint trigger: an admin or a tool puts a taint with one of the
//! configured keys (default `maintd.io/drain`, any effect) on the node; the
//! agent drains while it is there and undoes when it goes.

use serde_json::Value;

/// The drain taint found on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainTaint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

impl DrainTaint {
    /// One line for status and events.
    pub fn describe(&self) -> String {
        if self.value.is_empty() {
            format!("taint {}:{}", self.key, self.effect)
        } else {
            format!("taint {}={}:{}", self.key, self.value, self.effect)
        }
    }

    /// A value that reads like "don't" is still a drain request (the taint's
    /// presence is what counts); say so rather than guess.
    pub fn odd_value_warning(&self) -> Option<String> {
        let v = self.value.to_ascii_lowercase();
        matches!(v.as_str(), "false" | "no" | "0" | "off" | "disabled").then(|| {
            format!(
                "the drain taint {} has the value {:?}; the taint's presence requests a drain whatever its value — remove the taint to stop the drain",
                self.key, self.value
            )
        })
    }
}

impl DrainTaint {
    /// A drain taint with the `NoExecute` effect evicts nothing gracefully:
    /// Kubernetes' taint manager deletes every pod that does not tolerate
    /// it at once, before maintd can evict in order behind budgets.
    pub fn no_execute_warning(&self) -> Option<String> {
        (self.effect == "NoExecute").then(|| {
            format!(
                "the drain taint {} has the effect NoExecute: Kubernetes' taint manager deletes every pod that does not tolerate it at once, past PodDisruptionBudgets and out of maintd's order, before maintd evicts anything; use the effect NoSchedule (kubectl taint node <node> {}=:NoSchedule)",
                self.key, self.key
            )
        })
    }

    /// Every warning this taint calls for.
    pub fn warnings(&self) -> Vec<String> {
        [self.odd_value_warning(), self.no_execute_warning()]
            .into_iter()
            .flatten()
            .collect()
    }
}

/// The first drain taint on the node, if any. Malformed taint entries are
/// ignored.
pub fn find(node: &Value, keys: &[String]) -> Option<DrainTaint> {
    node["spec"]["taints"].as_array()?.iter().find_map(|t| {
        let key = t["key"].as_str()?;
        keys.iter().any(|k| k == key).then(|| DrainTaint {
            key: key.to_string(),
            value: t["value"].as_str().unwrap_or("").to_string(),
            effect: t["effect"].as_str().unwrap_or("").to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys() -> Vec<String> {
        vec!["maintd.io/drain".into(), "example.com/maintenance".into()]
    }

    #[test]
    fn finds_any_effect_and_ignores_other_and_malformed_taints() {
        let cases = [
            (json!({"spec": {}}), None),
            (json!({"spec": {"taints": "garbage"}}), None),
            (
                json!({"spec": {"taints": [{"key": 5}, {"key": "other", "effect": "NoSchedule"}]}}),
                None,
            ),
            (
                json!({"spec": {"taints": [{"key": "maintd.io/drain", "effect": "NoExecute"}]}}),
                Some("taint maintd.io/drain:NoExecute"),
            ),
            (
                json!({"spec": {"taints": [{"key": "example.com/maintenance", "value": "kernel", "effect": "PreferNoSchedule"}]}}),
                Some("taint example.com/maintenance=kernel:PreferNoSchedule"),
            ),
        ];
        for (node, want) in cases {
            assert_eq!(
                find(&node, &keys()).map(|t| t.describe()).as_deref(),
                want,
                "{node}"
            );
        }
    }

    #[test]
    fn odd_values_are_reported_not_obeyed() {
        let node = json!({"spec": {"taints": [{"key": "maintd.io/drain", "value": "false", "effect": "NoSchedule"}]}});
        let t = find(&node, &keys()).expect("still a drain request");
        assert!(t.odd_value_warning().unwrap().contains("remove the taint"));
        let plain = DrainTaint {
            key: "k".into(),
            value: "kernel-upgrade".into(),
            effect: "NoSchedule".into(),
        };
        assert_eq!(plain.odd_value_warning(), None);
        assert!(plain.warnings().is_empty());
    }

    #[test]
    fn a_no_execute_drain_taint_is_warned_of() {
        let node = json!({"spec": {"taints": [{"key": "maintd.io/drain", "effect": "NoExecute"}]}});
        let t = find(&node, &keys()).expect("still a drain request");
        let w = t.no_execute_warning().expect("warned");
        assert!(w.contains("NoExecute") && w.contains("NoSchedule"), "{w}");
        assert_eq!(t.warnings(), [w]);
        for effect in ["NoSchedule", "PreferNoSchedule"] {
            let node = json!({"spec": {"taints": [{"key": "maintd.io/drain", "effect": effect}]}});
            assert_eq!(find(&node, &keys()).unwrap().no_execute_warning(), None);
        }
    }
}
