//! Events: one store served by two APIs. Kubernetes keeps core/v1 Events
//! (`/api/v1/.../events`) and events.k8s.io/v1 Events as one resource (the
//! events.k8s.io group's REST storage is the core Events' own), so an Event
//! written through one API is read through the other, converted field by
//! field (k8s.io/kubernetes pkg/apis/events/v1/conversion.go). The
//! simulator keeps them as core/v1 objects, and events.k8s.io/v1 is a
//! [`View`] of them. RBAC and admission still see the group a client
//! wrote to, as on a cluster.
//!
//! The real API server prints the zero values of the Go structs
//! (`reportingComponent: ""`, `firstTimestamp: null`, `deprecatedSource:
//! {}`) in every Event it serves; the simulator, which keeps objects as
//! written rather than decoding them into Go types, converts only the
//! fields an Event has (and keeps an empty string it was given, which the
//! API server omits): a client decodes a missing field and its zero value
//! alike.
//!
//! Not simulated yet: the API server validates an Event by the API it is
//! written through (pkg/apis/core/validation/events.go): through
//! events.k8s.io/v1 `eventTime`, `reportingController`,
//! `reportingInstance`, `action` and `reason` are required, the
//! `deprecated*` fields must stay unset, and an update may change little
//! but the series; the simulator checks an Event's name only. Its tests
//! write Events those rules admit. Nor does it expire Events after the
//! API server's hour (`--event-ttl`).

use serde_json::{Map, Value};

use super::resources::Gr;
use super::store::View;

/// The events.k8s.io group.
pub const GROUP: &str = "events.k8s.io";

/// The fields whose names differ: (events.k8s.io/v1, core/v1). The others
/// (`eventTime`, `series`, `related`, `reportingInstance`, `action`,
/// `reason`, `type`, `metadata`) have the same name and form in both.
const RENAMED: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// The field selectors core/v1 Events support besides `metadata.name` and
/// `metadata.namespace` (pkg/apis/core/v1/conversion.go
/// `AddFieldLabelConversionsForEvent`).
pub const CORE_FIELDS: [&str; 11] = [
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// The field selectors events.k8s.io/v1 Events support besides
/// `metadata.name` and `metadata.namespace` (pkg/apis/events/v1/conversion.go
/// `AddFieldLabelConversionsForEvent`). Each selects what its core/v1
/// counterpart does; there is no `source` here.
pub const EVENTS_FIELDS: [&str; 10] = [
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
];

/// The value of the core/v1 field selector `source`: the source component,
/// or else the reporting controller (pkg/registry/core/event/strategy.go
/// `ToSelectableFields`), so an Event written through events.k8s.io is
/// found by the controller that reported it.
pub fn source_field(core_event: &Value) -> String {
    [
        &core_event["source"]["component"],
        &core_event["reportingComponent"],
    ]
    .into_iter()
    .filter_map(Value::as_str)
    .find(|s| !s.is_empty())
    .unwrap_or_default()
    .to_string()
}

/// events.k8s.io/v1 as a view of the core Events.
pub fn view() -> (Gr, View) {
    (
        Gr::new(GROUP, "events"),
        View {
            home: Gr::new("", "events"),
            to_home: to_core,
            from_home: from_core,
        },
    )
}

/// An events.k8s.io/v1 Event as a core/v1 one.
pub fn to_core(event: Value) -> Value {
    rename(event, "v1", RENAMED.iter().map(|&(e, c)| (e, c)))
}

/// A core/v1 Event as an events.k8s.io/v1 one.
pub fn from_core(event: &Value) -> Value {
    rename(
        event.clone(),
        "events.k8s.io/v1",
        RENAMED.iter().map(|&(e, c)| (c, e)),
    )
}

/// Moves each `from` field to its `to` name. A `to` name already there is
/// a field the source API does not have, which the API server would have
/// dropped when it decoded the body: it goes.
fn rename<'a>(
    event: Value,
    api_version: &str,
    pairs: impl Iterator<Item = (&'a str, &'a str)>,
) -> Value {
    let Value::Object(mut fields) = event else {
        return event;
    };
    let mut moved = Map::new();
    for (from, to) in pairs {
        fields.remove(to);
        if let Some(v) = fields.remove(from) {
            moved.insert(to.to_string(), v);
        }
    }
    fields.extend(moved);
    fields.insert("apiVersion".into(), Value::String(api_version.into()));
    Value::Object(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every field of one API has its place in the other, and back.
    #[test]
    fn every_field_converts_both_ways_and_back() {
        let events = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "n.1", "namespace": "default"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "series": {"count": 3, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
            "reportingController": "maintd.io/agent",
            "reportingInstance": "maintd-n",
            "action": "Drain", "reason": "Drained", "type": "Normal",
            "regarding": {"kind": "Node", "name": "n", "uid": "n"},
            "related": {"kind": "Pod", "name": "p", "namespace": "default"},
            "note": "done",
            "deprecatedSource": {"component": "kubelet", "host": "n"},
            "deprecatedFirstTimestamp": "2026-01-01T00:00:00Z",
            "deprecatedLastTimestamp": "2026-01-01T00:01:00Z",
            "deprecatedCount": 3,
        });
        let core = to_core(events.clone());
        assert_eq!(
            core,
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "n.1", "namespace": "default"},
                "eventTime": "2026-01-01T00:00:00.000000Z",
                "series": {"count": 3, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
                "reportingComponent": "maintd.io/agent",
                "reportingInstance": "maintd-n",
                "action": "Drain", "reason": "Drained", "type": "Normal",
                "involvedObject": {"kind": "Node", "name": "n", "uid": "n"},
                "related": {"kind": "Pod", "name": "p", "namespace": "default"},
                "message": "done",
                "source": {"component": "kubelet", "host": "n"},
                "firstTimestamp": "2026-01-01T00:00:00Z",
                "lastTimestamp": "2026-01-01T00:01:00Z",
                "count": 3,
            })
        );
        assert_eq!(from_core(&core), events);
    }

    /// A name of the other API is not a field of this one.
    #[test]
    fn the_other_apis_names_are_dropped() {
        let core = to_core(json!({"note": "kept", "message": "dropped"}));
        assert_eq!(core, json!({"apiVersion": "v1", "message": "kept"}));
    }

    #[test]
    fn source_falls_back_to_the_reporting_controller() {
        let from_kubelet = json!({"source": {"component": "kubelet"}, "reportingComponent": "x"});
        assert_eq!(source_field(&from_kubelet), "kubelet");
        let from_agent = to_core(json!({"reportingController": "maintd.io/agent"}));
        assert_eq!(source_field(&from_agent), "maintd.io/agent");
        assert_eq!(source_field(&json!({})), "");
    }
}
