//! Waiting for a slot without asking over and over. A node that waits
//! watches its candidate slots' Leases (two at most, by name: see
//! [`RebootSlots::candidates`]) and tries to take one only when a watch
//! shows it free, expired or not yet created, after a random pause: when a
//! slot frees up, its waiting candidates do not all write at once, and
//! those that see it taken meanwhile do not write at all. A thousand
//! waiting nodes cost the API server quiet watches, not a thousand reads
//! every few seconds, and each hears only of its own two slots.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::lease::SlotState;
use super::{Acquisition, Holder, RebootSlots, SlotGuard};
use crate::drain::progress::WaitWords;
use crate::index::{Backoff, Index, WatchGuard, WatchTarget, sleep_until};

/// The longest random pause before trying a slot the watch shows open, on
/// a quick API server (up to five times that on a slow one: see
/// [`RebootSlots::pause_stretch`]).
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// The same pause for a node in line, for a slot near it (see
/// [`RebootSlots::near`]): only the nodes in line near a slot race for it
/// when it frees, and a long pause would leave it empty for most of it.
/// 25 ms for each node in line near a slot (50 ms to 1 s): the first of
/// them tries as soon however many they are, and about as few try before
/// they see the slot taken. A node in line tries a slot not near it after
/// this pause, and a node not in line after twice this.
fn max_pause_ahead(slots: &RebootSlots) -> Duration {
    let near = slots.size().min(super::slots::NEAR);
    let racers = (slots.line_size() * near).div_ceil(slots.size().max(1));
    (Duration::from_millis(25) * racers).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// How long a control-plane node blocked by the quorum guard waits before
/// it looks again (node readiness is not what this watch sees).
const QUORUM_RETRY: Duration = Duration::from_secs(5);

/// What a group's slots look like to `node`, from the Leases a watch holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Availability {
    /// `node` may try now: it holds a slot already (after a restart), or a
    /// slot is free, expired or not created yet.
    pub open: bool,
    /// One of those is a slot `node` goes for first (see
    /// [`RebootSlots::near`]).
    pub near_open: bool,
    /// One of those is the slot of its place in line (see
    /// [`RebootSlots::first_for`]).
    pub own_open: bool,
    /// Who holds the slots (unexpired holds).
    pub holders: Vec<Holder>,
    /// When the first of those holds expires if it is not renewed, by
    /// this agent's monotonic clock.
    pub next_expiry: Option<tokio::time::Instant>,
}

/// The slots of `slots` among `leases`, for `node`, now: each hold judged
/// by how long this agent has seen it unchanged (see
/// [`super::LeaseClock`]).
pub fn availability(slots: &RebootSlots, leases: &[Lease], node: &str) -> Availability {
    let mut open = false;
    let mut near_open = false;
    let mut own_open = false;
    let mut holders = Vec::new();
    let mut next_expiry: Option<tokio::time::Instant> = None;
    for (slot, l) in slots.slots_among(node, leases) {
        // Held by another node, unexpired; otherwise open (not created
        // yet, free, lapsed, or already ours after a restart).
        let other = l.as_ref().and_then(|l| match slots.state(l) {
            SlotState::Held {
                holder,
                expired: false,
            } if holder != node => Some((holder, slots.expires_at(l))),
            _ => None,
        });
        match other {
            Some((holder, expiry)) => {
                if let Some(at) = expiry {
                    next_expiry = Some(next_expiry.map_or(at, |n| n.min(at)));
                }
                holders.push(Holder { holder, slot });
            }
            None => {
                open = true;
                near_open |= slots.is_near(node, &slot);
                own_open |= slots.is_own(&slot);
            }
        }
    }
    Availability {
        open,
        near_open,
        own_open,
        holders,
        next_expiry,
    }
}

/// What the waiting is about, for the status: "waiting for a slot (slot
/// group "g"): its slots are held by a, b", the cluster told up to "held".
fn waiting_message(slots: &RebootSlots, what: &str, holders: &[Holder]) -> WaitWords {
    if slots.takes_any() {
        // Its watches show the free slots, not every holder.
        return format!(
            "waiting for {what} (slot group {:?}): none of its {} slots is free",
            slots.group(),
            slots.size()
        )
        .into();
    }
    let mut names: Vec<&str> = holders.iter().map(|h| h.holder.as_str()).collect();
    names.sort_unstable();
    let shown = names
        .iter()
        .take(10)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    let more = names.len().saturating_sub(10);
    // Who holds them is for the local status: the cluster is told that
    // they are held (see `WaitWords`).
    WaitWords::with_local_part(
        format!(
            "waiting for {what} (slot group {:?}): its slots are held",
            slots.group()
        ),
        &format!(
            " by {shown}{}",
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ),
    )
}

/// A slot to wait for: of these slots, for this node, named so in the
/// status ("a reboot slot").
pub struct SlotRequest {
    pub slots: RebootSlots,
    pub node: String,
    pub what: String,
}

/// Waits until `node` holds a slot of `slots`, and returns its guard (the
/// slot renewed until released, or until `stop`). `what` names the slot for
/// the status ("a reboot slot", "a drain slot of NodeMaintenance x");
/// `report` is told why the node still waits each time that changes. None
/// once `cancel` fires, but never in the middle of taking a slot: a slot
/// taken then is returned, for the caller to give back.
pub async fn wait_for_slot(
    client: kube::Client,
    request: SlotRequest,
    guard: WatchGuard,
    stop: CancellationToken,
    cancel: CancellationToken,
    report: Arc<dyn Fn(WaitWords) + Send + Sync>,
) -> Option<SlotGuard> {
    let SlotRequest { slots, node, what } = request;
    let watching = cancel.child_token();
    let views: Vec<Index> = slots
        .watch_selectors(&node)
        .into_iter()
        .map(|(fields, labels)| {
            let index = Index::new();
            let mut target = WatchTarget::new(slots.leases_path(), fields, guard.clone());
            if let Some(labels) = labels {
                target = target.labelled(labels);
            }
            tokio::spawn(index.clone().run(client.clone(), target, watching.clone()));
            index
        })
        .collect();
    // The watches end with the waiting, whatever ends it.
    let _end_watches = watching.drop_guard();
    let mut changes: Vec<_> = views.iter().map(Index::changes).collect();
    let mut backoff = Backoff::with(1_000, 30_000);
    let mut told: Option<WaitWords> = None;
    let mut tell = |words: WaitWords| {
        if told.as_ref() != Some(&words) {
            report(words.clone());
            told = Some(words);
        }
    };
    loop {
        let ready = views.iter().all(Index::synced);
        let view = availability(&slots, &leases(&views), &node);
        let mut wait_until: Option<tokio::time::Instant> = None;
        if ready && view.open {
            // A random pause: of the nodes that saw the slot open, most
            // see it taken by the first before their own pause ends.
            // Nodes in line go first: their pause is short, and a node
            // behind them waits out the longest of it before its own.
            // The node whose place in line has the freed slot's number
            // goes at once, and every other after its head start: what
            // this agent's slot writes take to land and be seen, at
            // least OWN_HEAD_START. On a slow API server the random
            // pauses stretch with it, so that about as few nodes write
            // before they see the first one's take.
            let ahead = max_pause_ahead(&slots);
            let head = if slots.takes_any() || slots.yields() {
                slots.head_start()
            } else {
                Duration::ZERO
            };
            let max_pause = MAX_PAUSE.mul_f64(slots.pause_stretch());
            let pause = if slots.takes_any() && view.own_open {
                Duration::ZERO
            } else if slots.takes_any() && view.near_open {
                head + ahead.mul_f64(rand::random::<f64>())
            } else if slots.takes_any() {
                head + ahead + ahead.mul_f64(rand::random::<f64>())
            } else if slots.yields() {
                head + ahead * 2 + max_pause.mul_f64(rand::random::<f64>())
            } else {
                max_pause.mul_f64(rand::random::<f64>())
            };
            if sleep_or_stop(pause, &cancel).await {
                return None;
            }
            let mut seen = leases(&views);
            let now_view = availability(&slots, &seen, &node);
            // A pause for the slots near it does not let it try the others:
            // the nodes they are near go first; nor one for its own slot
            // the others.
            if !now_view.open
                || (view.near_open && !now_view.near_open)
                || (view.own_open && !now_view.own_open)
            {
                continue;
            }
            // Its own slot, one of its candidates, is tried first.
            if now_view.near_open || now_view.own_open {
                seen.retain(|l| {
                    l.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| slots.is_near(&node, n) || slots.is_own(n))
                });
            }
            // Not raced against a timeout or the cancel: a write that took
            // the slot must come back as a guard (each call is bounded by
            // the client's own timeout), or the slot would stay held,
            // unrenewed, until it expires.
            // From what the watch shows: a watch behind costs a conflict
            // and a read, a current one saves reading the slots again.
            // Its own slot, tried at once, is the only one tried then:
            // the others' own nodes have their head start.
            let taking = if view.own_open {
                slots.clone().own_alone()
            } else {
                slots.clone()
            };
            match taking
                .acquire_seen_with_renewal(&node, Some(&seen), stop.child_token())
                .await
            {
                Ok(Acquisition::Acquired(g)) => return Some(g),
                // Lost the race: the watch shows the winner shortly.
                Ok(Acquisition::Full { holders }) => {
                    tell(waiting_message(&slots, &what, &holders));
                }
                Ok(Acquisition::QuorumBlocked { not_ready }) => {
                    tell(
                        format!(
                            "waiting for {what}: another control-plane node is NotReady ({}); a control-plane node does not start a planned drain then",
                            not_ready.join(", ")
                        )
                        .into(),
                    );
                    wait_until = Some(tokio::time::Instant::now() + QUORUM_RETRY);
                }
                Err(e) => {
                    tell(format!("waiting for {what}: {e}").into());
                    wait_until = Some(tokio::time::Instant::now() + backoff.next_delay());
                }
            }
            if wait_until.is_none() {
                // Not acquired: wait for the watch to show a change, but
                // never loop faster than the backoff.
                wait_until = Some(tokio::time::Instant::now() + backoff.next_delay());
            }
        } else if ready {
            tell(waiting_message(&slots, &what, &view.holders));
            backoff.reset();
            // A hold that is not renewed expires: look again then.
            wait_until = view
                .next_expiry
                .map(|at| crate::bounds::later(at, Duration::from_millis(100)));
        } else if let Some(e) = views.iter().find_map(Index::last_error) {
            tell(format!("waiting for {what}: reading the slots: {e}").into());
        }
        let changed =
            futures::future::select_all(changes.iter_mut().map(|c| Box::pin(c.changed())));
        tokio::select! {
            _ = changed => {}
            _ = sleep_until(wait_until) => {}
            _ = cancel.cancelled() => return None,
        }
    }
}

/// The slot Leases the watches hold, decoded (one that does not decode is
/// left out: it is no slot maintd wrote).
fn leases(views: &[Index]) -> Vec<Lease> {
    views
        .iter()
        .flat_map(Index::all)
        .filter_map(|v: Arc<Value>| serde_json::from_value((*v).clone()).ok())
        .collect()
}

async fn sleep_or_stop(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.cancelled() => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::lease;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    fn slots(max: u32) -> RebootSlots {
        // Never used to talk to anything: only its names and group.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        RebootSlots::new(client, "maintd", "g", max, Duration::from_secs(300))
    }

    /// Slot `i` held by `holder`, as written at `version`; its renew
    /// time says nothing of whether it lapsed (see `LeaseClock`).
    fn held(i: u32, holder: &str, version: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(lease::slot_name("g", i)),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime("2026-01-01T00:59:00Z".parse().unwrap())),
                lease_duration_seconds: Some(300),
                ..LeaseSpec::default()
            }),
        }
    }

    /// `lease`, watched by `slots` unchanged for its whole duration from
    /// now on: lapsed once the test's paused clock has moved past it.
    async fn watched_lapse(slots: &RebootSlots, leases: &[&Lease]) {
        for l in leases {
            slots.state(l);
        }
        tokio::time::advance(Duration::from_secs(301)).await;
    }

    #[tokio::test]
    async fn each_node_has_two_stable_candidate_slots_and_the_slots_share_the_nodes() {
        let s = slots(100);
        let mut per_slot = [0u32; 100];
        for i in 0..1000 {
            let node = format!("node-{i:05}");
            let c = s.candidates(&node);
            assert_eq!(c.len(), 2);
            assert_ne!(c[0], c[1], "{node}");
            assert!(c.iter().all(|i| *i < 100));
            assert_eq!(c, s.candidates(&node), "the same on every call");
            for i in c {
                per_slot[i as usize] += 1;
            }
        }
        // 2,000 candidacies over 100 slots: 20 each on average, none far off.
        let (lo, hi) = (
            per_slot.iter().min().unwrap(),
            per_slot.iter().max().unwrap(),
        );
        assert!(*lo >= 5 && *hi <= 40, "{lo}..{hi}");
        // With one or two slots, every node may take any of them.
        assert_eq!(slots(1).candidates("n"), [0]);
        assert_eq!(slots(2).candidates("n"), [0, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_is_open_when_missing_free_expired_or_already_ours() {
        let s = slots(2);
        // One slot not created yet.
        assert!(availability(&s, &[held(0, "a", "1")], "n").open);
        // Both held by others, fresh: closed, expiry known.
        let full = [held(0, "a", "1"), held(1, "b", "1")];
        let v = availability(&s, &full, "n");
        assert!(!v.open);
        // Each holder with its own slot, as the waiting message names them.
        let holder = |h: &str, i: u32| Holder {
            holder: h.into(),
            slot: lease::slot_name("g", i),
        };
        assert_eq!(v.holders, [holder("a", 0), holder("b", 1)]);
        assert_eq!(
            v.next_expiry,
            Some(tokio::time::Instant::now() + Duration::from_secs(300))
        );
        // Ours (a restart while holding it).
        assert!(availability(&s, &[held(0, "a", "1"), held(1, "n", "2")], "n").open);
        // Leases of other slot numbers do not count.
        let three = [held(0, "a", "1"), held(1, "b", "3"), held(2, "n", "1")];
        assert_eq!(availability(&s, &three, "n").holders.len(), 2);
        // One this agent has watched go unrenewed for its duration.
        let watcher = slots(2);
        let stale = held(1, "b", "4");
        watched_lapse(&watcher, &[&stale]).await;
        assert!(availability(&watcher, &[held(0, "a", "5"), stale.clone()], "n").open);
        // The same Lease seen by an agent that has not watched it that
        // long (another agent, or one just started) is held.
        assert!(!availability(&slots(2), &[held(0, "a", "5"), stale], "n").open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_in_line_may_take_any_slot_of_its_group() {
        let fresh = "1";
        let s = slots(5).any_slot(5);
        let c = s.candidates("n");
        let other = (0..5).find(|i| !c.contains(i)).unwrap();
        // Its two candidates by name, and one watch of the group's free
        // slots (no holder label): not one watch per slot.
        let selectors = s.watch_selectors("n");
        assert_eq!(selectors.len(), 3);
        assert_eq!(
            selectors[2],
            (
                None,
                Some("maintd.io/reboot-group=g,!maintd.io/reboot-holder".to_string())
            )
        );
        // Its candidates held and nothing else shown: the other slots are
        // held too, since the free slots' watch shows none.
        let both = [held(c[0], "a", fresh), held(c[1], "b", fresh)];
        let v = availability(&s, &both, "n");
        assert!(!v.open);
        assert_eq!(v.holders.len(), 2);
        // Another slot given back shows in the free slots' watch: open.
        let mut free = held(other, "", fresh);
        free.spec.as_mut().unwrap().holder_identity = None;
        let mut seen = both.to_vec();
        seen.push(free.clone());
        assert!(availability(&s, &seen, "n").open);
        let v = availability(&s, &seen, "n");
        assert!(v.open && v.near_open, "five slots: every one is near");
        // A candidate never created, or whose hold lapsed, is open.
        assert!(availability(&s, &both[..1], "n").open);
        let stale = held(c[1], "b", "2");
        watched_lapse(&s, &[&stale]).await;
        assert!(availability(&s, &[held(c[0], "a", "3"), stale], "n").open);
        // Leases of another group whose name starts the same, or past the
        // group's size, are not its slots.
        let mut elsewhere = free.clone();
        elsewhere.metadata.name = Some(lease::slot_name("g-1", other));
        let mut beyond = free;
        beyond.metadata.name = Some(lease::slot_name("g", 7));
        let mut seen = both.to_vec();
        seen.extend([elsewhere, beyond]);
        assert!(!availability(&s, &seen, "n").open);
        // Its status says no slot is free, not who holds the two it sees.
        assert_eq!(
            waiting_message(&s, "a drain slot, next in line", &v.holders),
            WaitWords::from(
                "waiting for a drain slot, next in line (slot group \"g\"): none of its 5 slots is free".to_string()
            )
        );
        // Without it, a node watches its two candidates by name alone.
        let plain = slots(3).watch_selectors("n");
        assert_eq!(plain.len(), 2);
        assert!(plain.iter().all(|(f, l)| {
            f.as_deref()
                .is_some_and(|f| f.starts_with("metadata.name=maintd-reboot-g-"))
                && l.is_none()
        }));
    }

    #[tokio::test]
    async fn a_node_in_line_goes_first_for_ten_slots_and_each_slot_has_about_ten() {
        let s = slots(100).any_slot(100);
        let mut per_slot = [0u32; 100];
        for i in 0..100 {
            let node = format!("node-{i:05}");
            let near = s.near(&node);
            // Its two candidates and its two buckets of five.
            assert!((10..=12).contains(&near.len()), "{near:?}");
            assert_eq!(near[..2], s.candidates(&node)[..], "its candidates first");
            let mut distinct = near.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), near.len(), "{near:?}");
            assert_eq!(near, s.near(&node), "the same on every call");
            // Its free-slot watch selects exactly its buckets' slots.
            let selectors = s.watch_selectors(&node);
            let free = selectors[2].1.as_deref().unwrap();
            let mut buckets: Vec<String> = near[2..].iter().map(|i| (i / 5).to_string()).collect();
            buckets.sort();
            buckets.dedup();
            let (_, listed) = free.split_once("maintd.io/reboot-bucket in (").unwrap();
            let mut listed: Vec<String> = listed
                .trim_end_matches(')')
                .split(',')
                .map(str::to_string)
                .collect();
            listed.sort();
            assert_eq!(listed, buckets, "{free}");
            // At the end of a rollout it watches every free slot.
            let wide = s.clone().widened().watch_selectors(&node);
            let every = wide[2].1.as_deref().unwrap();
            assert!(!every.contains("reboot-bucket"), "{every}");
            assert!(every.contains("!maintd.io/reboot-holder"), "{every}");
            for i in near {
                per_slot[i as usize] += 1;
            }
        }
        // A hundred nodes in line, ten slots each: about ten race for a
        // slot that frees, none far more; every slot is near someone.
        let (lo, hi) = (
            per_slot.iter().min().unwrap(),
            per_slot.iter().max().unwrap(),
        );
        assert!(*lo >= 1 && *hi <= 25, "{lo}..{hi}");
        // A free slot near it lets it try at once; one that is not near
        // it is open too, tried after the nodes near it.
        let near = s.near("n");
        let far = (0..100).find(|i| !near.contains(i)).unwrap();
        let free = |i: u32| {
            let mut l = held(i, "", "2026-01-01T00:59:00Z");
            l.spec.as_mut().unwrap().holder_identity = None;
            l
        };
        let fresh = "2026-01-01T00:59:00Z";
        let with = |l: Lease| [held(near[0], "a", fresh), held(near[1], "b", fresh), l];
        let v = availability(&s, &with(free(near[5])), "n");
        assert!(v.open && v.near_open);
        let v = availability(&s, &with(free(far)), "n");
        assert!(v.open && !v.near_open);
        // Tried in that order: its candidates, near slots, then the rest.
        let order: Vec<String> = s
            .slots_among("n", &[free(far), free(near[5])])
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(
            order,
            [near[0], near[1], near[5], far].map(|i| lease::slot_name("g", i))
        );
    }

    #[tokio::test]
    async fn a_node_in_line_goes_first_for_the_slot_of_its_place() {
        let fresh = "2026-01-01T00:59:00Z";
        let free = |i: u32| {
            let mut l = held(i, "", fresh);
            l.spec.as_mut().unwrap().holder_identity = None;
            l
        };
        let line = slots(100).any_slot(100);
        let c = line.candidates("n");
        // Its place in line is one of its candidates' numbers (the same
        // hash deals both): that slot is its own, and tried first.
        let own = line.clone().first_for(Some(c[1]));
        let order: Vec<String> = own
            .slots_among("n", &[free(c[0]), free(c[1])])
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(order[..2], [c[1], c[0]].map(|i| lease::slot_name("g", i)));
        let v = availability(&own, &[held(c[0], "a", fresh), free(c[1])], "n");
        assert!(v.own_open && v.near_open);
        // Another near slot free, its own held: not its own to go for.
        let v = availability(&own, &[free(c[0]), held(c[1], "b", fresh)], "n");
        assert!(!v.own_open && v.near_open);
        // Without a place, or with one past the slots, nothing is its own.
        assert!(!line.is_own(&lease::slot_name("g", c[1])));
        let past = line.first_for(Some(100));
        assert!(!(0..100).any(|i| past.is_own(&lease::slot_name("g", i))));
    }

    #[tokio::test]
    async fn the_waiting_message_names_a_few_holders_and_counts_the_rest_for_the_local_status() {
        let s = slots(20);
        let holders: Vec<Holder> = (0..13)
            .map(|i| Holder {
                holder: format!("node-{i:02}"),
                slot: lease::slot_name("g", i),
            })
            .collect();
        let m = waiting_message(&s, "a drain slot", &holders);
        assert!(
            m.text.starts_with(
                "waiting for a drain slot (slot group \"g\"): its slots are held by node-00, node-01"
            ),
            "{m:?}"
        );
        assert!(m.text.ends_with("node-09 and 3 more"), "{m:?}");
        // The cluster is told that they are held, not by whom: that
        // changes at every handover.
        let told = m.told.map(|n| &m.text[..n]);
        assert_eq!(
            told,
            Some("waiting for a drain slot (slot group \"g\"): its slots are held")
        );
    }
}
