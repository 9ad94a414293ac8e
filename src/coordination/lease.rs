//! What a slot Lease says, decided without I/O: who holds it, whether that
//! hold has expired, and the Lease bodies maintd writes.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

/// Label on every slot Lease: the group it belongs to.
pub const GROUP_LABEL: &str = "maintd.io/reboot-group";

/// Label on a held slot Lease: its holder (as a label value), so an agent
/// finds the slots it holds with one small LIST.
pub const HOLDER_LABEL: &str = "maintd.io/reboot-holder";

/// Label on a slot Lease: its bucket, a few neighbouring slots of the
/// group (see `RebootSlots::near`), so a node in line watches the free
/// slots of its two buckets, not of the whole group.
pub const BUCKET_LABEL: &str = "maintd.io/reboot-bucket";

/// `lease` labelled with its `bucket`.
pub fn with_bucket(mut lease: Lease, bucket: u32) -> Lease {
    lease
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(BUCKET_LABEL.to_string(), bucket.to_string());
    lease
}

/// The Lease name of slot `index` of `group`: `maintd-reboot-<group>-<index>`.
/// Lease names are DNS subdomains, so the group is lowercased and anything
/// outside `[a-z0-9.-]` becomes `-`.
pub fn slot_name(group: &str, index: u32) -> String {
    let group: String = group
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("maintd-reboot-{group}-{index}")
}

/// Who a slot belongs to right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotState {
    /// Nobody holds it (released, or never held).
    Free,
    /// `holder` holds it; `expired` once this agent has seen it go
    /// unrenewed for its duration (see [`super::observed::LeaseClock`]).
    Held { holder: String, expired: bool },
}

/// The holder `lease` names, if any. Whether that hold has lapsed is not
/// read from its times against this node's clock (see
/// [`super::observed::LeaseClock`]).
pub fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .as_deref()
        .filter(|h| !h.is_empty())
}

/// Lease duration in whole seconds, at least one, as the Lease field wants it.
pub fn duration_seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// A new slot Lease held by `holder` from `now`.
pub fn new_held(
    name: &str,
    namespace: &str,
    group: &str,
    holder: &str,
    duration: Duration,
    now: Timestamp,
) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([
                (GROUP_LABEL.to_string(), label_value(group)),
                (HOLDER_LABEL.to_string(), label_value(holder)),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(held_spec(None, holder, duration, now)),
    }
}

/// `current` taken over by `holder` from `now` (a free or expired slot).
/// The resourceVersion stays, so the write is conditional on nobody having
/// changed the Lease since it was read.
pub fn taken_over(current: &Lease, holder: &str, duration: Duration, now: Timestamp) -> Lease {
    let mut lease = current.clone();
    lease.spec = Some(held_spec(current.spec.as_ref(), holder, duration, now));
    lease
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(HOLDER_LABEL.to_string(), label_value(holder));
    lease
}

/// `current` renewed at `now` (same holder; resourceVersion kept).
pub fn renewed(current: &Lease, now: Timestamp) -> Lease {
    let mut lease = current.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.renew_time = Some(MicroTime(now));
    lease
}

/// The annotation a slot taken for a reboot carries: the holder's boot ID
/// (`status.nodeInfo.bootID`) when it took the slot, so that whoever gives
/// the slot back can tell whether the node rebooted since.
pub const BOOT_ANNOTATION: &str = "maintd.io/boot-id";

/// `lease` noting the boot ID its holder took it at (None: none known).
pub fn with_boot(mut lease: Lease, boot: Option<&str>) -> Lease {
    let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    match boot.filter(|b| !b.is_empty()) {
        Some(b) => annotations.insert(BOOT_ANNOTATION.to_string(), b.to_string()),
        None => annotations.remove(BOOT_ANNOTATION),
    };
    lease
}

/// The boot ID `lease`'s holder took it at, if noted.
pub fn boot_of(lease: &Lease) -> Option<&str> {
    lease
        .metadata
        .annotations
        .as_ref()?
        .get(BOOT_ANNOTATION)
        .map(String::as_str)
}

/// `current` with its holder cleared (resourceVersion kept).
pub fn released(current: &Lease) -> Lease {
    let mut lease = with_boot(current.clone(), None);
    if let Some(labels) = lease.metadata.labels.as_mut() {
        labels.remove(HOLDER_LABEL);
    }
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.acquire_time = None;
    spec.renew_time = None;
    lease
}

fn held_spec(
    old: Option<&LeaseSpec>,
    holder: &str,
    duration: Duration,
    now: Timestamp,
) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.to_string()),
        lease_duration_seconds: Some(duration_seconds(duration)),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        // Counts how often the slot changed hands, as leader election does.
        lease_transitions: Some(
            old.and_then(|s| s.lease_transitions)
                .unwrap_or(0)
                .saturating_add(1),
        ),
        ..LeaseSpec::default()
    }
}

/// A label value is at most 63 characters of `[A-Za-z0-9._-]`, starting
/// and ending with a letter or digit (a node name cut at 63 may end with a
/// dot or a dash, which Kubernetes refuses).
pub fn label_value(group: &str) -> String {
    let kept: String = group
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .take(63)
        .collect();
    kept.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn lease(holder: Option<&str>, renew: Option<&str>, secs: Option<i32>) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                renew_time: renew.map(|r| MicroTime(at(r))),
                lease_duration_seconds: secs,
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_new_slot_lease_is_named_placed_labelled_and_held() {
        let now = at("2026-01-01T00:00:00Z");
        let l = new_held(
            "maintd-reboot-nm-x-0",
            "maintd",
            "nm-x",
            "node-a",
            Duration::from_secs(300),
            now,
        );
        assert_eq!(l.metadata.name.as_deref(), Some("maintd-reboot-nm-x-0"));
        assert_eq!(l.metadata.namespace.as_deref(), Some("maintd"));
        let labels = l.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get(GROUP_LABEL).map(String::as_str), Some("nm-x"));
        assert_eq!(labels.get(HOLDER_LABEL).map(String::as_str), Some("node-a"));
        let spec = l.spec.clone().unwrap_or_default();
        assert_eq!(spec.acquire_time, Some(MicroTime(now)));
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
        assert_eq!(spec.lease_duration_seconds, Some(300));
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(holder(&l), Some("node-a"));
    }

    #[test]
    fn label_values_keep_only_what_a_label_may_hold() {
        assert_eq!(label_value("nm/kernel upgrade_2.x"), "nmkernelupgrade_2.x");
        assert_eq!(label_value(&"a".repeat(80)).len(), 63);
    }

    #[test]
    fn the_holder_is_a_named_holder_identity() {
        let cases = [
            (lease(None, None, None), None),
            (
                lease(Some(""), Some("2026-01-01T00:00:59Z"), Some(10)),
                None,
            ),
            (
                lease(Some("a"), Some("2026-01-01T00:00:59Z"), Some(10)),
                Some("a"),
            ),
            // Whatever its times say: the clock decides whether it lapsed.
            (lease(Some("a"), None, None), Some("a")),
        ];
        for (i, (lease, want)) in cases.into_iter().enumerate() {
            assert_eq!(holder(&lease), want, "case {i}");
        }
        assert_eq!(holder(&Lease::default()), None, "no spec");
    }

    #[test]
    fn names_are_valid_lease_names() {
        assert_eq!(slot_name("default", 0), "maintd-reboot-default-0");
        assert_eq!(slot_name("Workers.A", 2), "maintd-reboot-workers.a-2");
        assert_eq!(slot_name("a_b", 1), "maintd-reboot-a-b-1");
    }

    #[test]
    fn take_over_renew_release() {
        let t0 = at("2026-01-01T00:00:00Z");
        let d = Duration::from_secs(15);
        let fresh = new_held("s", "ns", "g", "node-a", d, t0);
        assert_eq!(holder(&fresh), Some("node-a"));
        let late = at("2026-01-01T00:00:20Z");
        let renewed = renewed(&fresh, at("2026-01-01T00:00:10Z"));
        assert_eq!(
            renewed.spec.as_ref().and_then(|s| s.renew_time.clone()),
            Some(MicroTime(at("2026-01-01T00:00:10Z")))
        );
        let free = released(&renewed);
        assert_eq!(holder(&free), None);
        let taken = taken_over(&free, "node-b", d, late);
        assert_eq!(
            taken.spec.as_ref().and_then(|s| s.lease_transitions),
            Some(2)
        );
        assert_eq!(
            serde_json::to_value(&taken).unwrap()["spec"]["renewTime"],
            "2026-01-01T00:00:20.000000Z",
            "MicroTime is written with six fractional digits, as the apiserver expects"
        );
        // A count someone else left at its top stays there: the API server
        // refuses a negative one, and the slot could not be taken again.
        let mut top = free.clone();
        top.spec.as_mut().unwrap().lease_transitions = Some(i32::MAX);
        let taken = taken_over(&top, "node-c", d, late);
        assert_eq!(
            taken.spec.as_ref().and_then(|s| s.lease_transitions),
            Some(i32::MAX)
        );
    }

    #[test]
    fn label_values_are_ones_kubernetes_accepts() {
        // 64 characters: cut at 63, it would end with a dash.
        let long_node = format!("ip-10-0-0-1.eu-west-1.compute.{}-x", "a".repeat(32));
        let cut = format!("ip-10-0-0-1.eu-west-1.compute.{}", "a".repeat(32));
        for (text, want) in [
            ("default", "default"),
            ("-aipod-reboot-default-0", "aipod-reboot-default-0"),
            ("a b/c", "abc"),
            ("..", ""),
            (long_node.as_str(), cut.as_str()),
        ] {
            assert_eq!(label_value(text), want, "{text}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(duration_seconds(Duration::from_millis(10)), 1);
        assert_eq!(duration_seconds(Duration::from_secs(15)), 15);
    }
}
