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

/// Which of the open slots a waiting node goes for, and so how long it
/// lets the others try first (see the waiter's pauses).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Going {
    /// Its own, the slot of its place in line: at once.
    Own,
    /// One that no node goes first for (see [`RebootSlots::has_own_node`]):
    /// without a head start, a near one before a far one.
    Unowned { near: bool },
    /// One near it, after the head start of the slots' own nodes.
    Near,
    /// Any: a node in line after the nodes near it, any other node after
    /// the nodes in line.
    Any,
}

impl Going {
    fn of(slots: &RebootSlots, view: &Availability) -> Going {
        if !slots.takes_any() {
            return Going::Any;
        }
        match view.unowned {
            _ if view.own_open => Going::Own,
            Some((_, true)) => Going::Unowned { near: true },
            _ if view.near_open => Going::Near,
            Some((_, false)) => Going::Unowned { near: false },
            None => Going::Any,
        }
    }

    /// Whether `now`, after the pause, still shows what it went for.
    fn still(self, now: &Availability) -> bool {
        match self {
            Going::Own => now.own_open,
            Going::Unowned { near: true } => now.unowned.is_some_and(|(_, near)| near),
            Going::Unowned { near: false } => now.unowned.is_some(),
            Going::Near => now.near_open,
            Going::Any => true,
        }
    }
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
    /// The first of those in the order they are tried (its own, the near
    /// ones, then the others: a near one if any) that no node in line
    /// goes first for (see [`RebootSlots::has_own_node`]), and whether it
    /// is near; for a node in line only.
    pub unowned: Option<(u32, bool)>,
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
    availability_placed(slots, leases, &[], node)
}

/// [`availability`], with the free places in line a watch shows (see
/// [`RebootSlots::placed_in`]): which open slot has no node that goes
/// first for it.
pub fn availability_placed(
    slots: &RebootSlots,
    leases: &[Lease],
    free_places: &[Lease],
    node: &str,
) -> Availability {
    let mut open = false;
    let mut near_open = false;
    let mut own_open = false;
    let mut unowned = None;
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
                let near = slots.is_near(node, &slot);
                near_open |= near;
                own_open |= slots.is_own(&slot);
                if unowned.is_none()
                    && slots.takes_any()
                    && !slots.has_own_node(&slot, free_places)
                    && let Some(i) = slots.index_of(&slot)
                {
                    unowned = Some((i, near));
                }
            }
        }
    }
    Availability {
        open,
        near_open,
        own_open,
        unowned,
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
    // The free places in line of its buckets, for a node in line: which
    // freed slots have no node that goes first for them.
    let places: Option<Index> = slots.place_selector(&node).map(|labels| {
        let index = Index::new();
        let target = WatchTarget::new(slots.leases_path(), None, guard.clone()).labelled(labels);
        tokio::spawn(index.clone().run(client.clone(), target, watching.clone()));
        index
    });
    // The watches end with the waiting, whatever ends it.
    let _end_watches = watching.drop_guard();
    let mut changes: Vec<_> = views
        .iter()
        .chain(places.iter())
        .map(Index::changes)
        .collect();
    let seen_now = |views: &[Index]| {
        let free_places = places
            .as_ref()
            .map_or_else(Vec::new, |p| leases(std::slice::from_ref(p)));
        availability_placed(&slots, &leases(views), &free_places, &node)
    };
    let mut backoff = Backoff::with(1_000, 30_000);
    let mut told: Option<WaitWords> = None;
    let mut tell = |words: WaitWords| {
        if told.as_ref() != Some(&words) {
            report(words.clone());
            told = Some(words);
        }
    };
    loop {
        // The places' watch is waited for too, unless it fails: without
        // it every slot counts as having its own node.
        let places_known = places
            .as_ref()
            .is_none_or(|p| p.synced() || p.last_error().is_some());
        let ready = views.iter().all(Index::synced) && places_known;
        let view = seen_now(&views);
        let mut wait_until: Option<tokio::time::Instant> = None;
        if ready && view.open {
            // A random pause: of the nodes that saw the slot open, most
            // see it taken by the first before their own pause ends.
            // Nodes in line go first: their pause is short, and a node
            // behind them waits out the longest of it before its own.
            // The node whose place in line has the freed slot's number
            // goes at once, and every other after its head start: what
            // this agent's slot writes take to land and be seen, at
            // least OWN_HEAD_START; a slot whose place in line is empty
            // has no such node, and the nodes near it try it at once. On
            // a slow API server the random pauses stretch with it, so
            // that about as few nodes write before they see the first
            // one's take.
            let ahead = max_pause_ahead(&slots);
            let head = if slots.takes_any() || slots.yields() {
                slots.head_start()
            } else {
                Duration::ZERO
            };
            let max_pause = MAX_PAUSE.mul_f64(slots.pause_stretch());
            let going = Going::of(&slots, &view);
            let pause = match going {
                Going::Own => Duration::ZERO,
                // No node goes first for it (its place in line is empty):
                // no head start to wait out.
                Going::Unowned { near: true } => ahead.mul_f64(rand::random::<f64>()),
                Going::Unowned { near: false } => ahead + ahead.mul_f64(rand::random::<f64>()),
                Going::Near => head + ahead.mul_f64(rand::random::<f64>()),
                Going::Any if slots.takes_any() => {
                    head + ahead + ahead.mul_f64(rand::random::<f64>())
                }
                Going::Any if slots.yields() => {
                    head + ahead * 2 + max_pause.mul_f64(rand::random::<f64>())
                }
                Going::Any => max_pause.mul_f64(rand::random::<f64>()),
            };
            match pause_before_take(pause, going, &cancel, &mut changes, || {
                seen_now(&views).own_open
            })
            .await
            {
                Paused::Cancelled => return None,
                // Its own slot freed meanwhile: it goes for that one now.
                Paused::OwnOpened => continue,
                Paused::Over => {}
            }
            let mut seen = leases(&views);
            let now_view = seen_now(&views);
            // What it paused for must still be open: a pause for the
            // slots near it does not let it try the others (the nodes
            // they are near go first), a pause for its own slot does not
            // let it try any other, and a pause for a slot no node went
            // first for does not let it try one whose place in line was
            // taken meanwhile.
            if !now_view.open || !going.still(&now_view) {
                continue;
            }
            // A slot nobody goes first for, seen now (its place's watch may
            // have caught up meanwhile), is tried alone (below).
            let unowned = match (going, Going::of(&slots, &now_view)) {
                (Going::Own, _) => None,
                (_, Going::Unowned { .. }) => now_view.unowned.map(|(i, _)| i),
                _ => None,
            };
            // Its own slot, one of its candidates, is tried first.
            if unowned.is_none() && (now_view.near_open || now_view.own_open) {
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
            // the others' own nodes have their head start; and a slot
            // nobody goes first for, tried before their head start ends,
            // the only one then.
            let taking = match (going, unowned) {
                (Going::Own, _) => slots.clone().own_alone(),
                (_, Some(i)) => slots.clone().alone(i),
                _ => slots.clone(),
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
        tokio::select! {
            _ = any_change(&mut changes) => {}
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

/// Waits for a change of any of `changes` (never, with none), so a wait
/// wakes on whichever of its views moves.
async fn any_change(
    changes: &mut [tokio::sync::watch::Receiver<u64>],
) -> Result<(), tokio::sync::watch::error::RecvError> {
    if changes.is_empty() {
        return std::future::pending().await;
    }
    let (r, _, _) =
        futures::future::select_all(changes.iter_mut().map(|c| Box::pin(c.changed()))).await;
    r
}

/// How a pause before a take ended.
#[derive(Debug, PartialEq)]
enum Paused {
    Over,
    /// The node's own slot was seen free before the pause was over.
    OwnOpened,
    Cancelled,
}

/// Waits out `pause` before trying what `going` names, unless `cancel`
/// fires, or the node pauses for another slot than its own and its own is
/// seen free meanwhile (`own_open`, looked at on each of `changes`): a
/// pause for a slot near it lasts the head start of that slot's own node,
/// up to seconds on a busy API server, and a node that slept through its
/// own slot's give-back found it taken by another node after the head
/// start that was its own.
async fn pause_before_take(
    pause: Duration,
    going: Going,
    cancel: &CancellationToken,
    changes: &mut [tokio::sync::watch::Receiver<u64>],
    own_open: impl Fn() -> bool,
) -> Paused {
    let until = tokio::time::Instant::now() + pause;
    // Its own slot's pause is the one not cut short by its own slot.
    let looks = going != Going::Own;
    loop {
        if looks && own_open() {
            return Paused::OwnOpened;
        }
        let changed = async {
            // A view gone (its sender dropped) tells no more: the rest of
            // the pause is slept out.
            if looks && any_change(changes).await.is_ok() {
                return;
            }
            std::future::pending::<()>().await
        };
        tokio::select! {
            _ = tokio::time::sleep_until(until) => return Paused::Over,
            _ = cancel.cancelled() => return Paused::Cancelled,
            _ = changed => {}
        }
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
    async fn a_freed_slot_whose_place_in_line_is_empty_has_no_node_to_let_go_first() {
        let fresh = "2026-01-01T00:59:00Z";
        let free = |group: &str, i: u32| {
            let mut l = held(i, "", fresh);
            l.metadata.name = Some(lease::slot_name(group, i));
            l.spec.as_mut().unwrap().holder_identity = None;
            l
        };
        // Forty slots, every one held but those freed; a line of thirty.
        let with_free = |freed: &[u32]| -> Vec<Lease> {
            (0..40)
                .map(|i| {
                    if freed.contains(&i) {
                        free("g", i)
                    } else {
                        held(i, &format!("h-{i}"), fresh)
                    }
                })
                .collect()
        };
        let line = slots(40).any_slot(30).placed_in("g.places");
        let near: Vec<u32> = line.near("n").into_iter().filter(|i| *i < 30).collect();
        let (a, b) = (near[0], near[1]);
        // Both free; the place of the first is not seen free (its node
        // may be taking it), the second's is: the second has no own node.
        let both = with_free(&[a, b]);
        let v = availability_placed(&line, &both, &[free("g.places", b)], "n");
        assert!(v.open && v.near_open && !v.own_open);
        assert_eq!(v.unowned, Some((b, true)));
        assert_eq!(Going::of(&line, &v), Going::Unowned { near: true });
        // Neither place seen free: both may have their node; the node
        // near them waits out the head start.
        let v = availability_placed(&line, &both, &[], "n");
        assert_eq!(v.unowned, None);
        assert_eq!(Going::of(&line, &v), Going::Near);
        // A place seen held is not free.
        let mut taken = free("g.places", b);
        taken.spec.as_mut().unwrap().holder_identity = Some("m".into());
        assert_eq!(
            availability_placed(&line, &both, &[taken], "n").unowned,
            None
        );
        // A slot past the line has no place at all: nobody goes first.
        for past in 30..40 {
            let v = availability_placed(&line, &with_free(&[past]), &[], "n");
            let is_near = line.is_near("n", &lease::slot_name("g", past));
            assert_eq!(v.unowned, Some((past, is_near)));
            assert_eq!(Going::of(&line, &v), Going::Unowned { near: is_near });
        }
        // Its own slot stays its own, whatever its place's watch shows.
        let own = line.clone().first_for(Some(a));
        let v = availability_placed(&own, &both, &[free("g.places", a)], "n");
        assert_eq!(Going::of(&own, &v), Going::Own);
        // A node not in line goes for any slot, as before.
        let plain = slots(40);
        let v = availability_placed(&plain, &both, &[free("g.places", b)], "n");
        assert_eq!((v.unowned, Going::of(&plain, &v)), (None, Going::Any));
    }

    #[tokio::test]
    async fn a_node_in_line_watches_the_free_places_of_its_own_buckets() {
        let line = slots(100).any_slot(100).placed_in("g.places");
        for i in 0..20 {
            let node = format!("node-{i:05}");
            let places = line.place_selector(&node).unwrap();
            // The places' group, free ones, in the buckets of every slot
            // near it: its two buckets and its two candidates'.
            let (group, listed) = places.split_once(",maintd.io/reboot-bucket in (").unwrap();
            assert_eq!(
                group,
                "maintd.io/reboot-group=g.places,!maintd.io/reboot-holder"
            );
            let listed: Vec<u32> = listed
                .trim_end_matches(')')
                .split(',')
                .map(|b| b.parse().unwrap())
                .collect();
            let mut want: Vec<u32> = line.near(&node).iter().map(|i| i / 5).collect();
            want.sort_unstable();
            want.dedup();
            assert_eq!(listed, want, "{node}: {places}");
            assert!((2..=4).contains(&listed.len()), "{places}");
            let wide = line.clone().widened().place_selector(&node).unwrap();
            assert_eq!(
                wide,
                "maintd.io/reboot-group=g.places,!maintd.io/reboot-holder"
            );
        }
        // Without a line's group, or not in line, no watch of places.
        assert_eq!(slots(100).any_slot(100).place_selector("n"), None);
        assert_eq!(slots(100).placed_in("g.places").place_selector("n"), None);
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

    /// A node pausing for another slot than its own, with one view whose
    /// changes it looks at: what the pause returns, and when by the
    /// test's virtual clock.
    async fn pausing(going: Going, own_opens_after: Option<Duration>) -> (Paused, Duration) {
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        let own = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (o, start) = (own.clone(), tokio::time::Instant::now());
        let changer = tokio::spawn(async move {
            // Changes that do not free its own slot (another slot taken,
            // renewed) come first and end nothing.
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                tx.send_modify(|g| *g += 1);
            }
            if let Some(after) = own_opens_after {
                tokio::time::sleep_until(start + after).await;
                o.store(true, std::sync::atomic::Ordering::SeqCst);
                tx.send_modify(|g| *g += 1);
            }
            // The view lives on until the pause is over.
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(tx);
        });
        let mut changes = vec![rx];
        let paused = pause_before_take(
            Duration::from_secs(4),
            going,
            &CancellationToken::new(),
            &mut changes,
            || own.load(std::sync::atomic::Ordering::SeqCst),
        )
        .await;
        changer.abort();
        (paused, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_for_another_slot_ends_when_the_nodes_own_slot_frees() {
        for going in [Going::Near, Going::Unowned { near: true }, Going::Any] {
            let (paused, after) = pausing(going, Some(Duration::from_millis(700))).await;
            assert_eq!(paused, Paused::OwnOpened, "{going:?}");
            assert_eq!(after, Duration::from_millis(700), "{going:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_is_slept_out_when_only_other_slots_change() {
        let (paused, after) = pausing(Going::Near, None).await;
        assert_eq!(paused, Paused::Over);
        assert_eq!(after, Duration::from_secs(4));
        // Its own slot's pause is not cut short by its own slot: it is
        // what the pause was for.
        let (paused, after) = pausing(Going::Own, Some(Duration::from_millis(700))).await;
        assert_eq!(paused, Paused::Over);
        assert_eq!(after, Duration::from_secs(4));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_ends_at_once_when_the_wait_is_cancelled() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let (_tx, rx) = tokio::sync::watch::channel(0u64);
        let paused = pause_before_take(
            Duration::from_secs(4),
            Going::Near,
            &cancel,
            &mut [rx],
            || false,
        )
        .await;
        assert_eq!(paused, Paused::Cancelled);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_whose_views_are_gone_is_slept_out() {
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        drop(tx);
        let start = tokio::time::Instant::now();
        let paused = pause_before_take(
            Duration::from_secs(4),
            Going::Near,
            &CancellationToken::new(),
            &mut [rx],
            || false,
        )
        .await;
        assert_eq!(paused, Paused::Over);
        assert_eq!(start.elapsed(), Duration::from_secs(4));
    }
}
