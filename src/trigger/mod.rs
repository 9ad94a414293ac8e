//! Triggers: everything that can ask for this node to be drained. Each one
//! becomes the same request to the drain engine.

pub mod local;
pub mod maintenance;
pub mod medik8s;
pub mod shutdown;
pub mod taint;

use crate::drain::plan::PlanEntry;

/// How a local drain request shows among the triggers.
pub const LOCAL_PREFIX: &str = "local: ";
/// How a FleetLock drain (a local request made by the FleetLock handler,
/// which takes its own slot) shows among the triggers.
pub const FLEETLOCK_PREFIX: &str = "fleetlock: ";

/// What the triggers together want for the node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Desired {
    /// Why, one line per active trigger (e.g. "taint maintd.io/drain").
    pub sources: Vec<String>,
    /// Evict pods (false: cordon and taint only).
    pub evict: bool,
    /// The plan entries to use; None for the default plan.
    pub entries: Option<Vec<PlanEntry>>,
    /// A shutdown is waiting: everything must be done by then.
    pub deadline: Option<tokio::time::Instant>,
    /// A NodeMaintenance's stageTimeoutSeconds, overriding the agent's.
    pub stage_timeout: Option<std::time::Duration>,
    /// Slots planned triggers ask the drain to hold before it evicts (a
    /// local drain's reboot slot, a NodeMaintenance's drain slot).
    pub slot_asks: Vec<SlotAsk>,
    /// Sources that ask for nothing while the drain waits: a rolling
    /// NodeMaintenance (`maxConcurrentDrains`) cordons a node when it takes
    /// its drain slot, not before, so the nodes waiting their turn keep
    /// taking pods.
    pub stand_down_while_waiting: Vec<String>,
    /// A trigger wants the node drained now, slots or not: a shutdown, a
    /// taint, a NodeMaintenance without a limit, medik8s, FleetLock (which
    /// took its slot itself).
    pub urgent: bool,
    /// A planned trigger asks the drain to wait for the agent's policy
    /// (window, blocking pods, alerts): a local drain, a NodeMaintenance
    /// marked `planned`.
    pub policy: bool,
}

/// A slot a planned drain must hold before it evicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotAsk {
    /// The slot group: Leases `maintd-reboot-<group>-<i>`.
    pub group: String,
    /// How many nodes may hold a slot of the group at once.
    pub max: u32,
    /// Give the slot back once the node is drained, for the next node (a
    /// NodeMaintenance's concurrent drains); otherwise it is held until
    /// the request ends (a reboot: the node is out of service until then).
    pub release_when_drained: bool,
    /// A rolling NodeMaintenance whose turns end with a reboot: the slot
    /// is held, and the node cordoned, until the node has booted again.
    pub turn: Option<crate::api::turns::RebootTurn>,
    /// What the slot is, for the status: "a reboot slot".
    pub what: String,
    /// A rolling NodeMaintenance's `cordonAhead`: the node first takes one
    /// of this many places in line, and is cordoned while it waits for
    /// the slot with it (0: no line; the node waits uncordoned).
    pub ahead: u32,
}

impl SlotAsk {
    /// The places in line before this drain slot, when there is a line: a
    /// group of its own beside the slots' (`nm.ahead.<name>` beside
    /// `nm-<name>`: no object name makes one the other).
    ///
    /// With `cordonAhead`, its places are the nodes cordoned ahead of
    /// their turn. Without it, a NodeMaintenance with more than two drain
    /// slots still has a line, as many places as slots up to
    /// [`LINE_WITHOUT_CORDON`], whose nodes stay schedulable: each
    /// waiting node watches only two of the slots (see
    /// `RebootSlots::candidates`), so without a line the last nodes queue
    /// behind the slots they were dealt while others stand empty; the
    /// nodes in line take whichever slot frees first.
    pub fn line(&self) -> Option<SlotAsk> {
        let name = self.group.strip_prefix("nm-")?;
        let max = line_size(self.max, self.ahead)?;
        let what = if self.ahead > 0 {
            format!(
                "a place in line for {} ({} nodes are cordoned ahead of their turn)",
                self.what, self.ahead
            )
        } else {
            format!(
                "a place in line for {} (the next {max} nodes take whichever slot frees first)",
                self.what
            )
        };
        Some(SlotAsk {
            group: format!("{AHEAD_PREFIX}{name}"),
            max,
            release_when_drained: true,
            turn: None,
            what,
            ahead: 0,
        })
    }

    /// Whether a node holding a place in line before this slot is
    /// cordoned meanwhile (`cordonAhead`).
    pub fn cordons_ahead(&self) -> bool {
        self.ahead > 0
    }
}

/// The most places in line before a NodeMaintenance's drain slots when it
/// sets no `cordonAhead`; there are as many as slots up to this. Each
/// waiting node watches two places, so fewer places would mean more
/// watchers per place, every one of them woken as its place changes
/// hands; each node in line hears of every slot's turns for as long as it
/// stays there, so more places would mean longer stays.
pub const LINE_WITHOUT_CORDON: u32 = 100;

/// How many places in line a NodeMaintenance with `max` drain slots and
/// `cordonAhead: ahead` keeps (see [`SlotAsk::line`]); None: no line.
pub fn line_size(max: u32, ahead: u32) -> Option<u32> {
    if ahead > 0 {
        Some(ahead)
    } else if max > 2 {
        Some(max.min(LINE_WITHOUT_CORDON))
    } else {
        None
    }
}

/// How the groups of places in line begin (see [`SlotAsk::line`]).
pub const AHEAD_PREFIX: &str = "nm.ahead.";

impl Desired {
    pub fn active(&self) -> bool {
        !self.sources.is_empty()
    }

    /// The slot the drain must hold before it evicts: when every trigger
    /// that evicts is a planned one (a local drain, a NodeMaintenance with
    /// `maxConcurrentDrains`). A reboot slot goes first: it is held longest.
    pub fn slot(&self) -> Option<&SlotAsk> {
        if !self.evict || self.urgent {
            return None;
        }
        self.slot_asks
            .iter()
            .find(|a| !a.release_when_drained)
            .or(self.slot_asks.first())
    }

    /// Whether the drain must wait for the agent's policy: every trigger
    /// that evicts is a planned one that asks for it.
    pub fn waits_for_policy(&self) -> bool {
        self.evict && !self.urgent && self.policy
    }

    /// What may happen while a planned drain waits: nothing of a local
    /// drain (a node waiting its turn to reboot keeps serving), nothing of
    /// a rolling NodeMaintenance (the node is cordoned when its turn
    /// comes); any other NodeMaintenance's node is cordoned, as its stage
    /// says, and evicts nothing yet.
    pub fn while_waiting(mut self) -> Desired {
        self.evict = false;
        let stand_down = std::mem::take(&mut self.stand_down_while_waiting);
        self.sources
            .retain(|s| !s.starts_with(LOCAL_PREFIX) && !stand_down.contains(s));
        self
    }

    /// What may happen while a node holds a place in line before its
    /// drain slot (`cordonAhead`): it is cordoned and tainted, as stage
    /// `Cordon` would, and evicts nothing yet; a local drain still waits
    /// for its reboot slot unseen.
    pub fn cordoned_ahead(mut self) -> Desired {
        self.evict = false;
        self.stand_down_while_waiting.clear();
        self.sources.retain(|s| !s.starts_with(LOCAL_PREFIX));
        self
    }

    /// Whether `other` asks for the same drain (same plan, same deadline),
    /// whichever triggers ask for it: a drain under way then goes on.
    pub fn same_drain(&self, other: &Desired) -> bool {
        self.evict == other.evict
            && self.entries == other.entries
            && self.deadline == other.deadline
            && self.stage_timeout == other.stage_timeout
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::drain::plan::PodType;

    fn ask(group: &str, release_when_drained: bool) -> SlotAsk {
        SlotAsk {
            group: group.into(),
            max: 1,
            release_when_drained,
            turn: None,
            what: format!("a slot of {group}"),
            ahead: 0,
        }
    }

    /// A planned drain (evicting, nothing urgent) with the given asks.
    fn planned(asks: Vec<SlotAsk>) -> Desired {
        Desired {
            sources: vec!["local: reboot".into()],
            evict: true,
            slot_asks: asks,
            policy: true,
            ..Desired::default()
        }
    }

    #[test]
    fn a_planned_drain_holds_the_reboot_slot_before_a_drain_slot() {
        let drain_slot = ask("nm-x", true);
        let reboot_slot = ask("workers", false);
        let both = planned(vec![drain_slot.clone(), reboot_slot.clone()]);
        assert_eq!(both.slot(), Some(&reboot_slot), "held longest, taken first");
        assert_eq!(planned(vec![drain_slot.clone()]).slot(), Some(&drain_slot));
        assert_eq!(planned(vec![]).slot(), None);
        // Nothing to hold a slot for: no eviction, or an urgent trigger
        // (a shutdown does not wait its turn).
        let cordon_only = Desired {
            evict: false,
            ..both.clone()
        };
        assert_eq!(cordon_only.slot(), None);
        let urgent = Desired {
            urgent: true,
            ..both
        };
        assert_eq!(urgent.slot(), None);
    }

    #[test]
    fn only_a_planned_eviction_that_asks_for_it_waits_for_the_policy() {
        let d = planned(vec![]);
        assert!(d.waits_for_policy());
        for other in [
            Desired {
                evict: false,
                ..d.clone()
            },
            Desired {
                urgent: true,
                ..d.clone()
            },
            Desired {
                policy: false,
                ..d.clone()
            },
        ] {
            assert!(!other.waits_for_policy(), "{other:?}");
        }
    }

    #[test]
    fn while_waiting_nothing_is_evicted_and_only_local_requests_stand_down() {
        let d = Desired {
            sources: vec![
                "local: reboot".into(),
                "fleetlock: zincati".into(),
                "NodeMaintenance m (stage Drain)".into(),
            ],
            stage_timeout: Some(Duration::from_secs(60)),
            ..planned(vec![ask("workers", false)])
        };
        let w = d.clone().while_waiting();
        assert!(!w.evict);
        assert_eq!(
            w.sources,
            ["fleetlock: zincati", "NodeMaintenance m (stage Drain)"]
        );
        assert_eq!(w.slot_asks, d.slot_asks);
        assert_eq!(w.stage_timeout, d.stage_timeout);
        assert!(w.policy);
    }

    #[test]
    fn a_rolling_maintenance_asks_nothing_while_its_node_waits_its_turn() {
        let rolling = "NodeMaintenance roll (stage Drain)".to_string();
        let d = Desired {
            sources: vec![rolling.clone(), "NodeMaintenance all (stage Cordon)".into()],
            stand_down_while_waiting: vec![rolling],
            ..planned(vec![ask("nm-roll", true)])
        };
        let w = d.clone().while_waiting();
        assert_eq!(
            w.sources,
            ["NodeMaintenance all (stage Cordon)"],
            "another object still cordons"
        );
        let alone = Desired {
            sources: vec![d.sources[0].clone()],
            ..d
        };
        assert!(
            !alone.clone().while_waiting().active(),
            "nothing: not even a cordon"
        );
        // Holding a place in line, the same node is cordoned (stage Cordon's
        // request) and evicts nothing; a local drain still waits unseen.
        let ahead = Desired {
            sources: vec!["local: reboot".into(), alone.sources[0].clone()],
            ..alone
        }
        .cordoned_ahead();
        assert!(ahead.active() && !ahead.evict);
        assert_eq!(ahead.sources, ["NodeMaintenance roll (stage Drain)"]);
    }

    #[test]
    fn the_same_drain_is_the_same_plan_deadline_and_timeout_whoever_asks() {
        let d = planned(vec![]);
        let other_sources = Desired {
            sources: vec!["taint maintd.io/drain".into()],
            urgent: true,
            ..d.clone()
        };
        assert!(d.same_drain(&other_sources));
        let entries = Some(vec![PlanEntry {
            pod_type: PodType::Default,
            pod_priority: 0,
            pod_selector: None,
        }]);
        let deadline = Some(tokio::time::Instant::now() + Duration::from_secs(30));
        for changed in [
            Desired {
                evict: false,
                ..d.clone()
            },
            Desired {
                entries,
                ..d.clone()
            },
            Desired {
                deadline,
                ..d.clone()
            },
            Desired {
                stage_timeout: Some(Duration::from_secs(5)),
                ..d.clone()
            },
        ] {
            assert!(!d.same_drain(&changed), "{changed:?}");
            assert!(!changed.same_drain(&d), "{changed:?}");
        }
    }
}
