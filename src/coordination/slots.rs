//! The counting semaphore itself: `max_holders` slot Leases per group, each
//! taken with a create (the name is the lock) or a resourceVersion-guarded
//! replace, so the apiserver decides every race.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, PostParams};

use super::guard::SlotGuard;
use super::holds::SlotHolds;
use super::lease::GROUP_LABEL;
use super::lease::{self, SlotState};
use super::observed::LeaseClock;
use super::quorum::{is_control_plane, quorum_guard};
use super::{Acquisition, CONTROL_PLANE_GROUP, CoordinationError, Holder};

/// Reboot slots of one group: at most `max_holders` nodes hold one at a
/// time. Cheap to clone; clones share what the agent holds (see
/// [`SlotHolds`]), which keeps one agent from taking two slots by racing
/// itself, or giving back a slot another of its parts holds.
#[derive(Clone)]
pub struct RebootSlots {
    api: Api<Lease>,
    namespace: String,
    group: String,
    max_holders: u32,
    lease_duration: Duration,
    /// Control-plane slots check the quorum guard before taking a slot.
    control_plane: bool,
    /// The taker's boot ID, noted on a slot it takes (see
    /// [`lease::BOOT_ANNOTATION`]).
    boot_id: Option<String>,
    /// Every slot of the group is a candidate, not two (see
    /// [`Self::any_slot`]).
    any: bool,
    /// A node in line watches every free slot of the group, not only its
    /// buckets' (see [`Self::widened`]).
    wide: bool,
    /// Nodes in line wait for these slots too, and go first (see
    /// [`Self::behind_line`]).
    behind: bool,
    /// How many places the line before these slots has (0: no line).
    line: u32,
    /// The slot a node in line goes for before any other: the one of its
    /// place's number (see [`Self::first_for`]).
    own: Option<u32>,
    /// A take tries this slot alone (see [`Self::own_alone`]).
    only: Option<u32>,
    /// The group of the places in line whose numbers are these slots'
    /// (see [`Self::placed_in`]).
    places: Option<String>,
    /// How long this agent has seen each slot's hold unchanged: what
    /// decides that a hold has lapsed (see [`LeaseClock`]).
    clock: LeaseClock,
    /// The guards this agent holds on each slot, and the lock that keeps
    /// its takes and give-backs one at a time.
    holds: SlotHolds,
}

impl RebootSlots {
    /// Slots of `group` (Leases in `namespace`), at most `max_holders`
    /// holders, each hold lasting `lease_duration` past its last renewal.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        group: &str,
        max_holders: u32,
        lease_duration: Duration,
    ) -> Self {
        RebootSlots {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            group: group.to_string(),
            max_holders: max_holders.max(1),
            lease_duration,
            control_plane: false,
            boot_id: None,
            any: false,
            wide: false,
            behind: false,
            line: 0,
            own: None,
            only: None,
            places: None,
            clock: LeaseClock::new(),
            holds: SlotHolds::new(),
        }
    }

    /// Slots judged by `clock`, what this agent has seen of its Leases so
    /// far: an agent passes its own, so that a hold it has watched lapse
    /// counts as lapsed wherever it looks at the slot next.
    pub fn watched_with(mut self, clock: &LeaseClock) -> Self {
        self.clock = clock.clone();
        self
    }

    /// Slots whose takes and give-backs count with `holds`, what every
    /// part of this agent holds: an agent passes its own to every set of
    /// slots it builds, so that giving back one part's hold never ends
    /// another's on the same Lease.
    pub fn held_with(mut self, holds: &SlotHolds) -> Self {
        self.holds = holds.clone();
        self
    }

    /// The key of slot `name` among what the agent holds.
    fn hold_key(&self, name: &str) -> String {
        format!("{}/{name}", self.namespace)
    }

    /// Who holds `lease` now, as this agent has watched it.
    pub fn state(&self, lease: &Lease) -> SlotState {
        self.clock.state(lease)
    }

    /// When `lease`'s hold lapses if nobody renews it (None: it is free
    /// or lapsed), by this agent's monotonic clock.
    pub fn expires_at(&self, lease: &Lease) -> Option<tokio::time::Instant> {
        self.clock.expires_at(lease)
    }

    /// The slots `node` must use: a control-plane node (label
    /// `node-role.kubernetes.io/control-plane`) always uses the
    /// `control-plane` group with one holder, and checks the quorum guard
    /// before taking it; any other node uses `group` with `max_holders`.
    pub fn for_node(
        client: kube::Client,
        namespace: &str,
        node: &Node,
        group: &str,
        max_holders: u32,
        lease_duration: Duration,
    ) -> Self {
        if is_control_plane(node) {
            let mut slots = Self::new(client, namespace, CONTROL_PLANE_GROUP, 1, lease_duration);
            slots.control_plane = true;
            slots
        } else {
            Self::new(client, namespace, group, max_holders, lease_duration)
        }
    }

    /// Slots that note `boot_id` as the taker's boot ID when taken.
    pub fn noting_boot(mut self, boot_id: Option<String>) -> Self {
        self.boot_id = boot_id;
        self
    }

    /// Slots of which `node` may take any, not only its two candidates:
    /// for a node holding one of the `line` places in line, which takes
    /// whichever slot frees first. The free ones are watched with one
    /// watch of the group's label (see [`Self::watch_selectors`]).
    pub fn any_slot(mut self, line: u32) -> Self {
        self.any = true;
        self.line = line;
        self
    }

    /// Slots of which a node holding place `place` in line goes for slot
    /// `place` first, at once when it frees, and the other nodes in line
    /// only after a head start ([`Self::head_start`], see the waiter): each
    /// slot has one node in line that takes it when it frees, where ten
    /// raced for it and nine lost (each loss a refused write; at 1,000
    /// nodes, a hundred slots freeing together cost a thousand). A node's
    /// places and slots are dealt by the same hash, so its place's slot
    /// is one of its two candidates, which it watches by name.
    pub fn first_for(mut self, place: Option<u32>) -> Self {
        self.own = place.filter(|p| *p < self.max_holders);
        self
    }

    /// The same slots, of which a take tries the node's own (see
    /// [`Self::first_for`]) and no other: what a node in line tries at
    /// once when its own slot frees. Were it to lose that race, it would
    /// otherwise go on at once to the next free slot, whose own node is
    /// taking it while the others let it.
    pub fn own_alone(mut self) -> Self {
        self.only = self.own;
        self
    }

    /// The same slots, of which a take tries slot `index` and no other:
    /// what a node in line tries first when a slot that no node goes
    /// first for frees (see [`Self::has_own_node`]).
    pub fn alone(mut self, index: u32) -> Self {
        self.only = Some(index);
        self
    }

    /// Slots whose places in line are the Leases of group `places`, place
    /// `i` the one whose node goes first for slot `i` (see
    /// [`Self::first_for`]). A node in line then watches the free places
    /// of its buckets beside their free slots (see
    /// [`Self::place_selector`]): a slot that frees while its place is
    /// empty has no node to let go first, and the nodes near it try at
    /// once rather than after the head start. At the end of a rollout,
    /// when the places empty one by one, that was most handovers, each a
    /// head start late (two to three seconds at 1,000 nodes).
    pub fn placed_in(mut self, places: &str) -> Self {
        self.places = Some(places.to_string());
        self
    }

    /// Whether a node in line may be about to take slot `name` first, by
    /// what `free_places` (the free places a watch shows) says: its number
    /// has a place in line and that place is not seen free. A slot past
    /// the line has no place, so no node goes first for it; a place not
    /// seen at all (never taken yet, or no watch of them) counts as held.
    pub fn has_own_node(&self, name: &str, free_places: &[Lease]) -> bool {
        let Some(i) = self.index_of(name) else {
            return false;
        };
        if i >= self.line {
            return false;
        }
        let Some(places) = &self.places else {
            return true;
        };
        let place = lease::slot_name(places, i);
        !free_places.iter().any(|l| {
            l.metadata.name.as_deref() == Some(place.as_str()) && lease::holder(l).is_none()
        })
    }

    /// Whether `name` is the slot this node in line goes for first.
    pub fn is_own(&self, name: &str) -> bool {
        self.own.is_some() && self.index_of(name) == self.own
    }

    /// A node in line watching every free slot of the group, not only its
    /// two buckets': at the end of a rollout, when every node still
    /// waiting has a place in line, so that the last nodes take whichever
    /// slot frees rather than wait for their own while others stand empty.
    pub fn widened(mut self) -> Self {
        self.wide = true;
        self
    }

    /// Whether any slot of the group is a candidate ([`Self::any_slot`]).
    pub fn takes_any(&self) -> bool {
        self.any
    }

    /// Slots that the nodes holding the `line` places in line wait for
    /// too: this node lets them try a slot that frees first (see the
    /// waiter's pauses).
    pub fn behind_line(mut self, line: u32) -> Self {
        self.behind = true;
        self.line = line;
        self
    }

    /// Whether this node lets the nodes in line go first.
    pub fn yields(&self) -> bool {
        self.behind
    }

    /// How many places the line before these slots has (0: no line).
    pub fn line_size(&self) -> u32 {
        self.line
    }

    /// How a watch sees `node`'s candidate slots: one watch per field
    /// selector (a slot's name). For [`Self::any_slot`], one more watch of
    /// the group's free slots (its label, without a holder's): a slot
    /// enters that watch when it is given back and leaves it when taken,
    /// so a node in line hears of each slot's turns, not of its renewals,
    /// and starts from the few slots free, not from every slot. Its two
    /// candidates by name show what the free slots' watch cannot: a slot
    /// not created yet, and a hold that lapsed.
    pub fn watch_selectors(&self, node: &str) -> Vec<(Option<String>, Option<String>)> {
        let mut selectors: Vec<_> = self
            .candidates(node)
            .into_iter()
            .map(|i| (Some(format!("metadata.name={}", self.slot_name(i))), None))
            .collect();
        if self.any {
            let buckets = self.buckets(node).map(Vec::from);
            selectors.push((None, Some(self.free_in(&self.group, buckets))));
        }
        selectors
    }

    /// The label selector of `group`'s free Leases in `buckets` (every
    /// bucket when None, or once widened): slots or places, numbered alike.
    fn free_in(&self, group: &str, buckets: Option<Vec<u32>>) -> String {
        let mut free = format!(
            "{GROUP_LABEL}={},!{}",
            lease::label_value(group),
            lease::HOLDER_LABEL
        );
        if let Some(buckets) = buckets.filter(|_| !self.wide) {
            let listed: Vec<String> = buckets.iter().map(u32::to_string).collect();
            free.push_str(&format!(
                ",{} in ({})",
                lease::BUCKET_LABEL,
                listed.join(",")
            ));
        }
        free
    }

    fn group_selector(&self) -> String {
        format!("{GROUP_LABEL}={}", lease::label_value(&self.group))
    }

    /// How a node in line watches the free places of the buckets its near
    /// slots are in (its two buckets, and its candidates'; every free
    /// place once widened): the places whose slots no node goes first for
    /// (see [`Self::placed_in`]). None when it takes no slot of the group
    /// but its own two, or the places are not known.
    pub fn place_selector(&self, node: &str) -> Option<String> {
        let places = self.places.as_deref().filter(|_| self.any)?;
        let buckets = self.buckets(node).map(|_| {
            let mut b: Vec<u32> = self.near(node).iter().map(|i| i / BUCKET).collect();
            b.sort_unstable();
            b.dedup();
            b
        });
        Some(self.free_in(places, buckets))
    }

    /// The group's slot Leases, with the label `also` too if given, in one
    /// LIST.
    async fn list_group(&self, also: Option<&str>) -> Result<Vec<Lease>, CoordinationError> {
        let mut selector = self.group_selector();
        if let Some(also) = also {
            selector = format!("{selector},{also}");
        }
        self.api
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|l| l.items)
            .map_err(|e| {
                self.err(
                    &format!("{}*", self.slot_name(0).trim_end_matches('0')),
                    "listing the slots",
                    crate::client::explain(&e),
                )
            })
    }

    /// The slot `node` holds, if any: the boot ID it was taken at (if
    /// noted) and when it was taken.
    pub async fn held_at(
        &self,
        node: &str,
    ) -> Result<Option<(Option<String>, Option<Timestamp>)>, CoordinationError> {
        Ok(self
            .read_candidates(node)
            .await?
            .into_iter()
            .filter_map(|(_, l)| l)
            .find(|l| lease::holder(l) == Some(node))
            .map(|l| {
                let since = l
                    .spec
                    .as_ref()
                    .and_then(|s| s.acquire_time.as_ref())
                    .map(|t| t.0);
                (lease::boot_of(&l).map(str::to_string), since)
            }))
    }

    /// Whether `node` holds one of these slots (even one whose hold
    /// lapsed, as long as nobody took it over), from one LIST of the
    /// group's Leases labelled with `node` as holder: whatever the
    /// group's size, the answer holds one Lease at most.
    pub async fn held_by(&self, node: &str) -> Result<bool, CoordinationError> {
        let holder = format!("{}={}", lease::HOLDER_LABEL, lease::label_value(node));
        let leases = self.list_group(Some(&holder)).await?;
        Ok(leases.iter().any(|l| {
            l.metadata
                .name
                .as_deref()
                .and_then(|n| self.index_of(n))
                .is_some_and(|i| i < self.max_holders)
                && lease::holder(l) == Some(node)
        }))
    }

    /// How many slots the group has.
    pub fn size(&self) -> u32 {
        self.max_holders
    }

    /// The group these slots belong to.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// How long a hold lasts past its last renewal.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    fn err(&self, slot: &str, action: &str, e: impl std::fmt::Display) -> CoordinationError {
        CoordinationError::Api {
            lease: format!("{}/{slot}", self.namespace),
            message: format!("{action}: {e}"),
        }
    }

    /// The Lease collection the slots live in, for a watch.
    pub fn leases_path(&self) -> String {
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
            self.namespace
        )
    }

    /// The slots `node` may take: two of the group's, picked by a stable
    /// hash of the node's name (every slot when there are two or fewer).
    /// Each slot then has a few candidate nodes whatever the group's size,
    /// so a node waiting for a slot hears only of its two, and a slot that
    /// frees up is raced for by a few nodes, not by all that wait; a node
    /// with two choices waits little longer than with all of them.
    pub fn candidates(&self, node: &str) -> Vec<u32> {
        let max = self.max_holders;
        if max <= 2 {
            return (0..max).collect();
        }
        let first = (fnv1a(node.as_bytes(), 0) % u64::from(max)) as u32;
        let other = (fnv1a(node.as_bytes(), 1) % u64::from(max - 1)) as u32;
        let second = if other >= first { other + 1 } else { other };
        vec![first, second]
    }

    /// The slots a node in line (see [`Self::any_slot`]) goes for, its
    /// near slots: its two candidates and the slots of its two buckets
    /// (see [`Self::buckets`]), about [`NEAR`] in all (every slot of a
    /// group of [`NEAR`] or fewer). With a place in line per slot, a slot
    /// that frees is near about [`NEAR`] nodes in line, and only they race
    /// for it; a node in line hears the turns of its near slots only, so
    /// what it receives while in line does not grow with the slots.
    pub fn near(&self, node: &str) -> Vec<u32> {
        let mut near = self.candidates(node);
        let in_buckets: Vec<u32> = match self.buckets(node) {
            Some(buckets) => (0..self.max_holders)
                .filter(|i| buckets.contains(&(i / BUCKET)))
                .collect(),
            None => (0..self.max_holders).collect(),
        };
        for i in in_buckets {
            if !near.contains(&i) {
                near.push(i);
            }
        }
        near
    }

    /// `node`'s two buckets of [`BUCKET`] neighbouring slots, by a hash of
    /// its name (None when the group has two buckets or fewer: every slot
    /// is near). Two choices, not one, so a bucket's slots are not held
    /// back by the few nodes that chose it alone.
    fn buckets(&self, node: &str) -> Option<[u32; 2]> {
        let count = self.max_holders.div_ceil(BUCKET);
        if count <= 2 {
            return None;
        }
        let first = (fnv1a(node.as_bytes(), 2) % u64::from(count)) as u32;
        let other = (fnv1a(node.as_bytes(), 3) % u64::from(count - 1)) as u32;
        Some([first, if other >= first { other + 1 } else { other }])
    }

    /// The name of slot `index`.
    pub fn slot_name(&self, index: u32) -> String {
        lease::slot_name(&self.group, index)
    }

    /// `node`'s candidate slots with their Leases among `leases`, what its
    /// watches show (None: not created yet). For [`Self::any_slot`], also
    /// every other slot of the group among `leases`: the free ones, as
    /// the watches show only those besides the candidates.
    pub fn slots_among(&self, node: &str, leases: &[Lease]) -> Vec<(String, Option<Lease>)> {
        let mut candidates = self.candidates(node);
        // Its own slot first, when it has one among them.
        candidates.sort_by_key(|i| Some(*i) != self.own);
        let mut out: Vec<(String, Option<Lease>)> = candidates
            .iter()
            .map(|&i| {
                let name = lease::slot_name(&self.group, i);
                let found = leases
                    .iter()
                    .find(|l| l.metadata.name.as_deref() == Some(name.as_str()))
                    .cloned();
                (name, found)
            })
            .collect();
        if self.any {
            // The near ones first: they are the ones tried first.
            let near = self.near(node);
            let mut others: Vec<(bool, String, Option<Lease>)> = self
                .all_among(leases)
                .into_iter()
                .filter_map(|(name, l)| {
                    let i = self.index_of(&name)?;
                    (l.is_some() && !candidates.contains(&i)).then(|| (!near.contains(&i), name, l))
                })
                .collect();
            others.sort_by_key(|(far, _, _)| *far);
            out.extend(others.into_iter().map(|(_, name, l)| (name, l)));
        }
        out
    }

    /// Whether slot `name` is one `node` goes for first (see
    /// [`Self::near`]); every slot it may take is, when not in line.
    pub fn is_near(&self, node: &str, name: &str) -> bool {
        !self.any
            || self
                .index_of(name)
                .is_some_and(|i| self.near(node).contains(&i))
    }

    fn all_among(&self, leases: &[Lease]) -> Vec<(String, Option<Lease>)> {
        let mut found: std::collections::BTreeMap<u32, Lease> = std::collections::BTreeMap::new();
        for l in leases {
            let Some(name) = l.metadata.name.as_deref() else {
                continue;
            };
            // The label holds at most 63 characters of the group: the
            // name says which group a Lease is of.
            if let Some(i) = self.index_of(name)
                && i < self.max_holders
            {
                found.insert(i, l.clone());
            }
        }
        let missing = (0..self.max_holders).find(|i| !found.contains_key(i));
        found
            .into_iter()
            .map(|(i, l)| (self.slot_name(i), Some(l)))
            .chain(missing.map(|i| (self.slot_name(i), None)))
            .collect()
    }

    /// The slot number of the Lease named `name`, if it is one of this
    /// group's.
    pub(super) fn index_of(&self, name: &str) -> Option<u32> {
        let prefix = self.slot_name(0);
        let prefix = prefix.strip_suffix('0')?;
        let i = name.strip_prefix(prefix)?;
        if i.is_empty()
            || !i.bytes().all(|b| b.is_ascii_digit())
            || (i.len() > 1 && i.starts_with('0'))
        {
            return None;
        }
        i.parse().ok()
    }

    /// `node`'s candidate slots, as read now (at most two reads, whatever
    /// the number of slots; one LIST for [`Self::any_slot`]).
    async fn read_candidates(
        &self,
        node: &str,
    ) -> Result<Vec<(String, Option<Lease>)>, CoordinationError> {
        if self.any {
            return Ok(self.all_among(&self.list_group(None).await?));
        }
        let mut out = Vec::new();
        for i in self.candidates(node) {
            let name = self.slot_name(i);
            let lease = self
                .api
                .get_opt(&name)
                .await
                .map_err(|e| self.err(&name, "reading the slot", crate::client::explain(&e)))?;
            out.push((name, lease));
        }
        Ok(out)
    }

    /// Takes a slot for `node` if one is free or expired. Recursive: a node
    /// that already holds a slot gets that slot back (renewed), never a
    /// second one. `Full` lists who holds the slots.
    pub async fn try_acquire(&self, node: &str) -> Result<Acquisition<String>, CoordinationError> {
        self.try_acquire_seen(node, None).await
    }

    /// [`try_acquire`](Self::try_acquire), its first pass from `seen`, the
    /// slot Leases a watch holds, instead of reading them again: at most
    /// one write when the watch is current. A watch behind the slots costs
    /// a conflict (409) and a pass that reads them.
    async fn try_acquire_seen(
        &self,
        node: &str,
        seen: Option<&[Lease]>,
    ) -> Result<Acquisition<String>, CoordinationError> {
        let _one = self.holds.one_at_a_time().await;
        self.acquire_alone(node, seen).await
    }

    /// [`Self::try_acquire_seen`], with the agent's other takes and
    /// give-backs held off by the caller.
    async fn acquire_alone(
        &self,
        node: &str,
        mut seen: Option<&[Lease]>,
    ) -> Result<Acquisition<String>, CoordinationError> {
        for _ in 0..5 {
            if let Some(outcome) = self.acquire_once(node, seen.take()).await? {
                return Ok(outcome);
            }
        }
        Err(self.err(
            &lease::slot_name(&self.group, 0),
            "taking a slot",
            "the slots kept changing under 5 attempts; will retry",
        ))
    }

    /// One pass over the slots; None when this node's own slot changed
    /// between read and renewal (e.g. its renewal task ran): read again.
    async fn acquire_once(
        &self,
        node: &str,
        seen: Option<&[Lease]>,
    ) -> Result<Option<Acquisition<String>>, CoordinationError> {
        let slots = match seen {
            Some(leases) => self.slots_among(node, leases),
            None => self.read_candidates(node).await?,
        };
        let now = Timestamp::now();
        for (name, lease) in &slots {
            if let Some(lease) = lease
                && lease::holder(lease) == Some(node)
            {
                // Ours even if it lapsed: nobody has taken it over yet.
                return match self.replace_slot(name, &lease::renewed(lease, now)).await {
                    Ok(()) => Ok(Some(Acquisition::Acquired(name.clone()))),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
                    Err(e) => Err(self.err(name, "renewing the slot", crate::client::explain(&e))),
                };
            }
        }
        if self.control_plane
            && let Err(blocked) = quorum_guard(self.api_client(), node).await
        {
            return match blocked {
                CoordinationError::QuorumBlocked { not_ready } => {
                    Ok(Some(Acquisition::QuorumBlocked { not_ready }))
                }
                other => Err(other),
            };
        }
        // A slot it holds already was taken up above, whichever it is.
        let mut slots = slots;
        if let Some(only) = self.only {
            let name = self.slot_name(only);
            let lease = slots
                .into_iter()
                .find(|(n, _)| *n == name)
                .and_then(|(_, l)| l);
            // Not among what was seen or read: not created yet.
            slots = vec![(name, lease)];
        }
        let mut holders = Vec::new();
        for (name, lease) in slots {
            let bucket = self.index_of(&name).map_or(0, |i| i / BUCKET);
            let attempt = match &lease {
                None => lease::with_boot(
                    lease::new_held(
                        &name,
                        &self.namespace,
                        &self.group,
                        node,
                        self.lease_duration,
                        now,
                    ),
                    self.boot_id.as_deref(),
                ),
                Some(current) => match self.clock.state(current) {
                    SlotState::Free | SlotState::Held { expired: true, .. } => lease::with_boot(
                        lease::taken_over(current, node, self.lease_duration, now),
                        self.boot_id.as_deref(),
                    ),
                    SlotState::Held { holder, .. } => {
                        holders.push(Holder { holder, slot: name });
                        continue;
                    }
                },
            };
            let attempt = lease::with_bucket(attempt, bucket);
            let result = if lease.is_some() {
                self.replace_slot(&name, &attempt).await
            } else {
                let sent = tokio::time::Instant::now();
                let made = self.api.create(&PostParams::default(), &attempt).await;
                self.timed(sent, &made);
                made.map(|made| self.holds.note_written(self.hold_key(&name), made))
            };
            match result {
                Ok(()) => return Ok(Some(Acquisition::Acquired(name))),
                // Someone else created or changed this slot first: it is
                // theirs; try the next one.
                // A node in line says no holders: it reads none.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    if !self.any
                        && let Ok((_, Some(now_lease))) = self.read_slot(&name).await
                        && let SlotState::Held { holder, .. } = self.clock.state(&now_lease)
                    {
                        holders.push(Holder { holder, slot: name });
                    }
                }
                Err(e) => {
                    return Err(self.err(&name, "taking the slot", crate::client::explain(&e)));
                }
            }
        }
        Ok(Some(Acquisition::Full { holders }))
    }

    async fn read_slot(&self, name: &str) -> Result<(String, Option<Lease>), kube::Error> {
        Ok((name.to_string(), self.api.get_opt(name).await?))
    }

    /// Replaces slot `name` with `lease` (guarded by its resourceVersion)
    /// and notes the answer as this agent's last write of it; a conflict
    /// forgets it, the Lease having changed since.
    async fn replace_slot(&self, name: &str, lease: &Lease) -> Result<(), kube::Error> {
        let key = self.hold_key(name);
        let sent = tokio::time::Instant::now();
        let answer = self.api.replace(name, &PostParams::default(), lease).await;
        self.timed(sent, &answer);
        match answer {
            Ok(written) => {
                self.holds.note_written(key, written);
                Ok(())
            }
            Err(e) => {
                if matches!(&e, kube::Error::Api(s) if s.code == 409) {
                    self.holds.forget_written(&key);
                }
                Err(e)
            }
        }
    }

    /// Notes how long a slot write sent at `sent` took, if the API server
    /// answered it (a refusal is an answer; no answer is not a time).
    fn timed<T>(&self, sent: tokio::time::Instant, answer: &Result<T, kube::Error>) {
        if matches!(answer, Ok(_) | Err(kube::Error::Api(_))) {
            self.holds.write_times().note(sent.elapsed());
        }
    }

    /// How long the other nodes near a freed slot let the node that goes
    /// first take it, from how long this agent's slot writes take (see
    /// [`super::pace`]).
    pub fn head_start(&self) -> std::time::Duration {
        self.holds.write_times().head_start()
    }

    /// How many times longer the random pause before a take lasts than on
    /// a quick API server (see [`super::pace`]).
    pub fn pause_stretch(&self) -> f64 {
        self.holds.write_times().stretch()
    }

    /// Slot `name` as `node` last wrote it and still holds it there, else
    /// as read now: a renewal or give-back starts from the agent's own
    /// write, and reads the Lease only once that write is refused.
    async fn own_or_read(&self, node: &str, name: &str) -> Result<Option<Lease>, kube::Error> {
        if let Some(mine) = self
            .holds
            .last_written(&self.hold_key(name))
            .filter(|l| lease::holder(l) == Some(node))
        {
            return Ok(Some(mine));
        }
        Ok(self.read_slot(name).await?.1)
    }

    fn api_client(&self) -> kube::Client {
        self.api.clone().into_client()
    }

    /// Takes a slot like [`try_acquire`](Self::try_acquire) and, when it got
    /// one, keeps renewing it every third of the lease duration until the
    /// guard is released or dropped, or `stop` is cancelled.
    pub async fn acquire_with_renewal(
        &self,
        node: &str,
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<Acquisition<SlotGuard>, CoordinationError> {
        self.acquire_seen_with_renewal(node, None, stop).await
    }

    /// [`acquire_with_renewal`](Self::acquire_with_renewal), first from the
    /// slot Leases a watch holds (see `try_acquire_seen`).
    pub async fn acquire_seen_with_renewal(
        &self,
        node: &str,
        seen: Option<&[Lease]>,
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<Acquisition<SlotGuard>, CoordinationError> {
        // The guard counts before another part of the agent may give the
        // slot back: a give-back waiting for this take then finds it held.
        let _one = self.holds.one_at_a_time().await;
        Ok(match self.acquire_alone(node, seen).await? {
            Acquisition::Acquired(slot) => {
                let ticket = self.holds.ticket(self.hold_key(&slot));
                Acquisition::Acquired(SlotGuard::start(self.clone(), node, slot, ticket, stop))
            }
            Acquisition::Full { holders } => Acquisition::Full { holders },
            Acquisition::QuorumBlocked { not_ready } => Acquisition::QuorumBlocked { not_ready },
        })
    }

    /// Renews `node`'s hold on `slot`. `Lost` when the slot is no longer
    /// the node's (taken over after it expired, or released).
    pub async fn renew(&self, node: &str, slot: &str) -> Result<(), CoordinationError> {
        for _ in 0..5 {
            let lease = self.own_or_read(node, slot).await.map_err(|e| {
                self.err(
                    slot,
                    "reading the slot to renew it",
                    crate::client::explain(&e),
                )
            })?;
            let now = Timestamp::now();
            let Some(lease) = lease.filter(|l| lease::holder(l) == Some(node)) else {
                return Err(CoordinationError::Lost {
                    node: node.to_string(),
                    lease: format!("{}/{slot}", self.namespace),
                });
            };
            match self.replace_slot(slot, &lease::renewed(&lease, now)).await {
                Ok(()) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => {
                    return Err(self.err(slot, "renewing the slot", crate::client::explain(&e)));
                }
            }
        }
        Err(self.err(
            slot,
            "renewing the slot",
            "it kept changing under 5 attempts; will retry",
        ))
    }

    /// Gives back every slot of this group `node` holds. Idempotent:
    /// releasing nothing is fine. Returns whether a slot was released.
    pub async fn release(&self, node: &str) -> Result<bool, CoordinationError> {
        let _one = self.holds.one_at_a_time().await;
        let mut released = false;
        let mine: Vec<String> = self
            .read_candidates(node)
            .await?
            .into_iter()
            .filter(|(_, l)| l.as_ref().is_some_and(|l| lease::holder(l) == Some(node)))
            .map(|(name, _)| name)
            // A slot a guard of this agent holds is that guard's to give
            // back.
            .filter(|name| !self.holds.held(&self.hold_key(name)))
            .collect();
        for name in mine {
            released |= self.release_one(node, &name).await?;
        }
        Ok(released)
    }

    /// Gives back slot `name` if `node` holds it and no guard of this
    /// agent does (another part of the agent took it up again, and holds
    /// it on): one write from the agent's own last write of it, a read
    /// only if that is refused, whatever the group's size. Returns
    /// whether it was released.
    pub async fn release_slot(&self, node: &str, name: &str) -> Result<bool, CoordinationError> {
        let _one = self.holds.one_at_a_time().await;
        if self.holds.held(&self.hold_key(name)) {
            return Ok(false);
        }
        self.release_one(node, name).await
    }

    async fn release_one(&self, node: &str, name: &str) -> Result<bool, CoordinationError> {
        // A conflict means the Lease changed since the agent's own last
        // write or read of it (a renewal in flight, or a takeover): read
        // it and decide again.
        for attempt in 0.. {
            let Some(current) = self
                .own_or_read(node, name)
                .await
                .map_err(|e| self.err(name, "reading the slot", crate::client::explain(&e)))?
            else {
                return Ok(false);
            };
            if lease::holder(&current) != Some(node) {
                return Ok(false);
            }
            match self.replace_slot(name, &lease::released(&current)).await {
                Ok(()) => {
                    // Given back: the next take starts from what is seen.
                    self.holds.forget_written(&self.hold_key(name));
                    return Ok(true);
                }
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < 5 => continue,
                Err(e) => {
                    return Err(self.err(name, "releasing the slot", crate::client::explain(&e)));
                }
            }
        }
        Ok(false)
    }

    /// Who holds `node`'s candidate slots now (expired holds excluded).
    pub async fn holders(&self, node: &str) -> Result<Vec<Holder>, CoordinationError> {
        Ok(self
            .read_candidates(node)
            .await?
            .into_iter()
            .filter_map(|(slot, lease)| match self.clock.state(lease.as_ref()?) {
                SlotState::Held {
                    holder,
                    expired: false,
                } => Some(Holder { holder, slot }),
                _ => None,
            })
            .collect())
    }
}

/// The groups in which `node` holds an unexpired slot, from one LIST of the
/// slot Leases in `namespace` labelled with the node as holder (so the list
/// holds this node's slots, not every group's): what an agent that
/// restarted (say, across the reboot it drained for) must resume renewing.
pub async fn groups_held_by(
    client: kube::Client,
    namespace: &str,
    node: &str,
) -> Result<Vec<String>, CoordinationError> {
    let api: Api<Lease> = Api::namespaced(client, namespace);
    let leases = api
        .list(&ListParams::default().labels(&format!(
            "{}={}",
            lease::HOLDER_LABEL,
            lease::label_value(node)
        )))
        .await
        .map_err(|e| CoordinationError::Api {
            lease: format!("{namespace}/maintd-reboot-*"),
            message: format!("listing the reboot slots: {}", crate::client::explain(&e)),
        })?;
    let mut groups: Vec<String> = leases
        .items
        .iter()
        .filter(|l| lease::holder(l) == Some(node))
        .filter_map(|l| l.metadata.labels.as_ref()?.get(lease::GROUP_LABEL).cloned())
        .collect();
    groups.sort();
    groups.dedup();
    Ok(groups)
}

/// How many slots a node in line goes for first (see
/// [`RebootSlots::near`]).
pub const NEAR: u32 = 10;

/// How long the other nodes in line let a freed slot's own node (the one
/// holding the place of its number) take it before they try, on a quick
/// API server: about what its write takes to reach their watches. On a
/// slower one, longer by what the agent's own slot writes take (see
/// [`super::pace`]).
pub const OWN_HEAD_START: std::time::Duration = std::time::Duration::from_millis(300);

/// How many neighbouring slots make a bucket: a node's two buckets and its
/// two candidates are its [`NEAR`] slots, give or take the candidates that
/// fall in its buckets.
pub const BUCKET: u32 = NEAR / 2;

/// FNV-1a of `bytes` after a `seed` byte: a hash every agent computes the
/// same, whatever its build (the standard library's may change).
fn fnv1a(bytes: &[u8], seed: u8) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in std::iter::once(seed).chain(bytes.iter().copied()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
