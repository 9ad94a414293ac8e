//! PodDisruptionBudget watches that exist only while a drain's stage
//! evicts pods in their namespace, or a pod of this node is blocked by a
//! budget.
//!
//! A stage watches the budgets of each namespace it evicts in, from before
//! its first eviction to its end: a pod asks only while the budget that
//! selects it has a disruption no other pod of this node has taken, and
//! otherwise waits for the budget's next status (twenty pods behind a
//! budget allowing one were nineteen refused evictions). A refused eviction
//! is asked again as soon as its budget allows a disruption again (or is
//! deleted); a timer of 30 s or more is only the backstop for a missed
//! event. Watching every budget of the cluster all the time would send
//! every PDB status write to every node (issue 11); instead the watches are
//! scoped to a namespace (or to the budget a 429 named, when no stage
//! watches its namespace), and a watch ends when the last stage or blocked
//! pod holding it lets go. An idle agent holds no budget watch at all.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::drain::plan::selector_matches;
use crate::index::{Index, WatchGuard, WatchTarget};

/// What one watch covers: a namespace, and one budget in it if known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Scope {
    namespace: String,
    name: Option<String>,
}

impl Scope {
    fn describe(&self) -> String {
        match &self.name {
            Some(n) => format!("poddisruptionbudget {}/{n}", self.namespace),
            None => format!("poddisruptionbudgets in {}", self.namespace),
        }
    }
}

struct Open {
    index: Index,
    holders: usize,
    stop: CancellationToken,
    tickets: Tickets,
}

/// The disruptions this agent's pods have taken of each budget (by uid)
/// that the budget's status, as the watch last showed it, does not count
/// yet: pods about to ask or asking, and pods whose eviction was granted
/// until a status shows them among its `disruptedPods` (the eviction's own
/// write of the budget puts them there). A status allowing `k` lets `k`
/// pods go, less these, not every pod waiting on the budget: the others
/// would only be refused (twenty pods behind a budget that allows one were
/// nineteen refused evictions a round), and counting afresh at each new
/// status let a pod ask for a disruption another had just been granted.
type Tickets = Arc<Mutex<BTreeMap<String, Ledger>>>;

/// One budget's disruptions taken and not yet counted by its status.
#[derive(Default)]
pub(crate) struct Ledger {
    next: u64,
    taken: Vec<Taken>,
    /// The resourceVersion of a status the API server refused an eviction
    /// under: it allows nothing more, whatever it says.
    exhausted: Option<String>,
    /// When this agent last had an eviction under the budget granted.
    last_granted: Option<tokio::time::Instant>,
    /// Held by the eviction under the budget that is being asked: one at
    /// a time (see `Ticket::turn`).
    turn: Arc<tokio::sync::Mutex<()>>,
    /// How long this agent's last evictions under the budget took until
    /// their write of it showed (or their answer came), newest last.
    recent: std::collections::VecDeque<Duration>,
}

/// How many of a budget's last evictions [`Ticket::usual`] goes by.
const RECENT: usize = 8;

struct Taken {
    id: u64,
    /// The resourceVersion of the status it was taken under.
    rv: String,
    /// The pod that took it (its name is what `disruptedPods` lists).
    pod: Claimant,
    /// When its eviction was granted; None while it is to ask or asking.
    granted: Option<tokio::time::Instant>,
    /// The pod's resourceVersion once it was seen deleted (the eviction's
    /// write of the budget came before).
    deleted_rv: Option<u64>,
}

/// How long a granted eviction counts against its budget when no status
/// is seen listing it (a watch that relisted past it): the disruption
/// controller forgets `disruptedPods` entries after two minutes too.
const GRANTED_COUNTS_FOR: Duration = Duration::from_secs(120);

#[derive(Default)]
struct Inner {
    open: BTreeMap<Scope, Open>,
    /// The agent's stop: every watch ends with it.
    parent: Option<CancellationToken>,
}

/// The budget watches of one agent, shared by its drains. Cheap to clone.
#[derive(Clone)]
pub struct BudgetWatches {
    client: kube::Client,
    guard: WatchGuard,
    inner: Arc<Mutex<Inner>>,
    /// The node's pods (by uid), to tell when a pod whose eviction was
    /// granted has been deleted (see [`take_one`]).
    pods: Index,
}

impl BudgetWatches {
    /// Watches made through `client`, guarded by `guard` like every other
    /// watch of the agent.
    pub fn new(client: kube::Client, guard: WatchGuard) -> Self {
        BudgetWatches {
            client,
            guard,
            inner: Arc::default(),
            pods: Index::new(),
        }
    }

    /// The same watches, told the node's pods (the agent's own view of
    /// them), so that a granted eviction stops counting against its budget
    /// once its pod is on its way out and the budget has a newer status.
    pub fn with_pods(mut self, pods: Index) -> Self {
        self.pods = pods;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends every watch made from now on when `stop` fires (the agent
    /// calls this before it drains anything).
    pub fn stop_with(&self, stop: &CancellationToken) {
        self.lock().parent = Some(stop.clone());
    }

    /// Holds a watch of the budgets of `namespace` (only `name` if given)
    /// until the returned hold is dropped; the first holder starts it.
    pub fn hold(&self, namespace: &str, name: Option<&str>, pod: &Claimant) -> BudgetHold {
        let wide = Scope {
            namespace: namespace.to_string(),
            name: None,
        };
        let mut inner = self.lock();
        // A watch of the whole namespace (a stage's, see `watch_namespace`)
        // already sees the budget named: no second watch.
        let scope = if inner.open.contains_key(&wide) {
            wide
        } else {
            Scope {
                namespace: namespace.to_string(),
                name: name.map(str::to_string),
            }
        };
        let parent = inner.parent.clone();
        let open = inner.open.entry(scope.clone()).or_insert_with(|| {
            let stop = parent.map_or_else(CancellationToken::new, |p| p.child_token());
            let index = Index::new();
            let target = WatchTarget::new(
                format!("/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"),
                name.map(|n| format!("metadata.name={n}")),
                self.guard.clone(),
            );
            tracing::debug!(scope = %scope.describe(), "a pod is blocked: watching its budget");
            tokio::spawn(index.clone().run(self.client.clone(), target, stop.clone()));
            Open {
                index,
                holders: 0,
                stop,
                tickets: Tickets::default(),
            }
        });
        open.holders += 1;
        BudgetHold {
            index: open.index.clone(),
            tickets: open.tickets.clone(),
            watches: self.clone(),
            scope,
            budget: name.map(str::to_string),
            pod: pod.clone(),
            seen: Mutex::default(),
        }
    }

    /// Holds a watch of every budget of `namespace` (a stage about to evict
    /// pods there), and waits at most `bound` for its first list, so that
    /// the stage's pods know their budgets before the first of them asks;
    /// not once `cancel` ends the stage.
    pub async fn watch_namespace(
        &self,
        namespace: &str,
        bound: Duration,
        cancel: &CancellationToken,
    ) -> BudgetHold {
        let hold = self.hold(namespace, None, &Claimant::default());
        let index = hold.index.clone();
        tokio::select! {
            _ = tokio::time::timeout(bound, index.wait_until(Index::synced)) => {}
            _ = cancel.cancelled() => {}
        }
        hold
    }

    fn release(&self, scope: &Scope) {
        let mut inner = self.lock();
        let Some(open) = inner.open.get_mut(scope) else {
            return;
        };
        open.holders = open.holders.saturating_sub(1);
        if open.holders == 0 {
            open.stop.cancel();
            inner.open.remove(scope);
            tracing::debug!(scope = %scope.describe(), "nothing blocked there any more: budget watch ended");
        }
    }

    /// What a pod with `labels` may do before it asks to be evicted, by the
    /// budgets this agent watches. `Ask` when none of them selects it, or
    /// when the one that does has a disruption left that no other pod has
    /// taken (the pod takes it). `Wait` when that budget's newest status, of
    /// its current spec, leaves nothing: the Eviction API would refuse the
    /// pod with the words given, so it waits for the budget's next status
    /// instead, holding its watch. Twenty pods behind a blocked budget
    /// were twenty refused evictions before any of them waited.
    pub fn claim(
        &self,
        namespace: &str,
        pod: &Claimant,
        labels: &BTreeMap<String, String>,
    ) -> Claim {
        let pods = self.pods.clone();
        let mut inner = self.lock();
        let found = inner
            .open
            .iter()
            .filter(|(scope, _)| scope.namespace == namespace)
            .find_map(|(scope, open)| {
                // Subscribed before the status is read: a status that comes
                // after this read wakes the pod even if it comes before the
                // pod starts waiting.
                let seen = open.index.changes();
                let mut tickets = open.tickets.lock().unwrap_or_else(|e| e.into_inner());
                open.index.all().iter().find_map(|b| {
                    let in_scope = b["metadata"]["namespace"] == namespace
                        && scope
                            .name
                            .as_deref()
                            .is_none_or(|n| b["metadata"]["name"] == n);
                    if !in_scope || !selects(b, labels) {
                        return None;
                    }
                    let name = b["metadata"]["name"].as_str().unwrap_or_default();
                    Some(match take_ticket(b, pod, &pods, &mut tickets) {
                        Ok(taken) => Ok(taken.map(|(budget, id)| Ticket {
                            tickets: open.tickets.clone(),
                            index: open.index.clone(),
                            budget,
                            id,
                            settled: false,
                        })),
                        Err((paced, why)) => {
                            Err((scope.clone(), name.to_string(), why, paced, seen.clone()))
                        }
                    })
                })
            });
        let (scope, budget, why, paced, seen) = match found {
            None => return Claim::Ask(None),
            Some(Ok(ticket)) => return Claim::Ask(ticket),
            Some(Err(wait)) => wait,
        };
        let Some(open) = inner.open.get_mut(&scope) else {
            return Claim::Ask(None);
        };
        open.holders += 1;
        Claim::Wait(
            Box::new(BudgetHold {
                index: open.index.clone(),
                tickets: open.tickets.clone(),
                watches: self.clone(),
                scope,
                budget: Some(budget),
                pod: pod.clone(),
                seen: Mutex::new(Some(seen)),
            }),
            why,
            paced,
        )
    }

    /// The changes of the watch of all of `namespace`'s budgets, if one is
    /// open, as of now: taken before a pod asks, so that a status coming
    /// between a refusal and the wait for the next status is not missed
    /// (see [`BudgetHold::seen_from`]).
    pub fn changes_of(&self, namespace: &str) -> Option<watch::Receiver<u64>> {
        let inner = self.lock();
        let open = inner.open.get(&Scope {
            namespace: namespace.to_string(),
            name: None,
        })?;
        Some(open.index.changes())
    }

    /// The open watches' views, by what they cover (for status and
    /// readiness: a watch that does not exist has no view to go stale).
    pub fn views(&self) -> Vec<(String, Index)> {
        self.lock()
            .open
            .iter()
            .map(|(scope, open)| (scope.describe(), open.index.clone()))
            .collect()
    }
}

/// Whether budget `b` selects a pod with `labels`: a budget with no
/// selector selects nothing, an empty one every pod of its namespace
/// (policy/v1), a malformed one is left to the API server.
pub(crate) fn selects(b: &Value, labels: &BTreeMap<String, String>) -> bool {
    match b["spec"].get("selector") {
        None | Some(Value::Null) => false,
        Some(sel) => serde_json::from_value::<LabelSelector>(sel.clone())
            .ok()
            .and_then(|sel| selector_matches(&sel, labels).ok())
            .unwrap_or(false),
    }
}

/// Takes one of the disruptions budget `b`'s status allows for a pod about
/// to ask (None), or, when every one is taken already (`tickets`: per
/// budget, the status they were counted against and how many), the API
/// server's refusal. A status of an older spec says nothing: the pod asks.
pub(crate) fn take_ticket(
    b: &Value,
    pod: &Claimant,
    pods: &Index,
    tickets: &mut BTreeMap<String, Ledger>,
) -> Result<Option<(String, u64)>, (bool, String)> {
    let status = &b["status"];
    let observed = status["observedGeneration"].as_i64();
    if observed.is_none() || observed != b["metadata"]["generation"].as_i64() {
        return Ok(None);
    }
    if let Some(taken) = take_one(b, pod, pods, tickets) {
        return Ok(Some(taken));
    }
    // This agent's own pods took what it allows (asking now, or granted
    // a moment ago): the pod waits its turn.
    let paced = tickets
        .get(b["metadata"]["uid"].as_str().unwrap_or_default())
        .is_some_and(|l| {
            !l.taken.is_empty()
                || l.last_granted
                    .is_some_and(|at| at.elapsed() < GRANTED_COUNTS_FOR)
        });
    Err((
        paced,
        format!(
            "The disruption budget {} needs {} healthy pods and has {} currently",
            b["metadata"]["name"].as_str().unwrap_or_default(),
            status["desiredHealthy"].as_i64().unwrap_or_default(),
            status["currentHealthy"].as_i64().unwrap_or_default(),
        ),
    ))
}

/// One of a budget's disruptions, taken by a pod about to ask: given back
/// when dropped unless the API server's answer settled it
/// ([`Ticket::granted`], [`Ticket::refused`]). A pod that never asked (its
/// stage cancelled or re-planned), or whose eviction failed for any reason
/// but the budget (a 503, a timeout), would otherwise leave the
/// disruption taken until a status counted it, which no eviction is coming
/// to write: the pods waiting on it would sit until their backstop.
/// Giving it back wakes them.
pub struct Ticket {
    tickets: Tickets,
    /// The watch whose waiters a disruption given back wakes.
    index: Index,
    budget: String,
    id: u64,
    settled: bool,
}

impl Ticket {
    /// The API server granted the eviction: the disruption stays taken
    /// until a status of the budget lists the pod among its
    /// `disruptedPods` (or a while has passed).
    pub fn granted(mut self) {
        self.settled = true;
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = tickets.get_mut(&self.budget) {
            let now = tokio::time::Instant::now();
            l.last_granted = Some(now);
            if let Some(t) = l.taken.iter_mut().find(|t| t.id == self.id) {
                t.granted = Some(now);
            }
        }
    }

    /// The budget refused the eviction: the status it was counted under
    /// was behind the API server's; the disruption is not taken, and the
    /// pod waits for the next status like any other.
    pub fn refused(mut self) {
        self.settled = true;
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = tickets.get_mut(&self.budget) {
            if let Some(t) = l.taken.iter().find(|t| t.id == self.id) {
                l.exhausted = Some(t.rv.clone());
            }
            l.taken.retain(|t| t.id != self.id);
        }
    }

    /// Waits until no other eviction under this ticket's budget is being
    /// asked, and holds the turn until the guard is dropped. The API
    /// server decides evictions under one budget one at a time: each
    /// reads the budget and writes its status back with the disruption
    /// taken, and of two sent together the one whose write comes second
    /// is refused a conflict and read again 500 ms later (its
    /// EvictionsRetry). Asked one after the other, each is answered in
    /// one round trip (Kubernetes 1.37: five sent together under a budget
    /// allowing five were granted over 0.76 s; one at a time, over about
    /// half that). The turn passes on once the budget's watch shows the
    /// eviction's own write ([`Ticket::counted`]) and then no write for a
    /// moment ([`Ticket::still_for`]: the disruption controller's answers
    /// to it), or once the API server has held the eviction well past
    /// what the budget's evictions usually take (a conflict with the
    /// controller's own write; see the executor's `turn_held_at_most`).
    pub async fn turn(&self) -> tokio::sync::OwnedMutexGuard<()> {
        let turn = {
            let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
            tickets.entry(self.budget.clone()).or_default().turn.clone()
        };
        turn.lock_owned().await
    }

    /// Notes how long this eviction took until its write of the budget
    /// showed, or its answer came.
    pub fn took(&self, time: Duration) {
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        let recent = &mut tickets.entry(self.budget.clone()).or_default().recent;
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(time);
    }

    /// How long this agent's evictions under the budget usually take
    /// until their write of it shows (the median of the last few), if it
    /// has sent any.
    pub fn usual(&self) -> Option<Duration> {
        let tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        let mut recent: Vec<Duration> = tickets.get(&self.budget)?.recent.iter().copied().collect();
        recent.sort();
        recent.get(recent.len() / 2).copied()
    }

    /// Resolves once the budget's status, as its watch shows it, lists
    /// `pod` among its `disruptedPods`: the eviction's own write of the
    /// budget has landed (the pod's deletion and the answer come after
    /// it), so the next eviction under the budget reads that write and
    /// cannot conflict with it (only with what answers it).
    pub fn counted(&self, pod: &str) -> impl Future<Output = ()> + use<> {
        let index = self.index.clone();
        let (budget, pod) = (self.budget.clone(), pod.to_string());
        async move {
            index
                .wait_until(|i| {
                    i.get(&budget)
                        .is_some_and(|b| b["status"]["disruptedPods"].get(&pod).is_some())
                })
                .await;
        }
    }

    /// Resolves once the budget's status has not changed for `quiet`.
    /// After an eviction's write, the disruption controller writes the
    /// status again (it drops the pod from `disruptedPods` once it sees it
    /// deleted, once or twice within a few tens of milliseconds); the next
    /// eviction sent into those writes is refused a conflict and read
    /// again 500 ms later.
    pub fn still_for(&self, quiet: Duration) -> impl Future<Output = ()> + Send + use<> {
        let index = self.index.clone();
        let budget = self.budget.clone();
        async move {
            let version = |i: &Index| {
                i.get(&budget).and_then(|b| {
                    b["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_string)
                })
            };
            loop {
                let mut changes = index.changes();
                let seen = version(&index);
                let idle = tokio::time::sleep(quiet);
                tokio::pin!(idle);
                loop {
                    tokio::select! {
                        () = &mut idle => return,
                        changed = changes.changed() => {
                            if changed.is_err() {
                                return;
                            }
                            if version(&index) != seen {
                                break;
                            }
                        }
                    }
                }
            }
        }
    }

    fn give_back(&self, wake: bool) {
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = tickets.get_mut(&self.budget) {
            l.taken.retain(|t| t.id != self.id);
        }
        drop(tickets);
        if wake {
            self.index.touch();
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.settled {
            self.give_back(true);
        }
    }
}

/// Takes one of the disruptions budget `b`'s status allows for `pod`, if
/// one is left once the disruptions its status does not count yet are
/// taken off (see [`Tickets`]). Returns the budget's uid and the ticket's
/// id in its ledger.
///
/// A granted eviction is counted by the status once it lists the pod among
/// its `disruptedPods` (the eviction's own write of the budget does), or
/// once the pod is on its way out (deleted, or gone) and the status is not
/// the one the disruption was taken under: a watch shows the newest status
/// only, and the disruption controller drops a pod from `disruptedPods`
/// as soon as it sees it deleted, counting it out of the healthy pods
/// instead.
fn take_one(
    b: &Value,
    pod: &Claimant,
    pods: &Index,
    tickets: &mut BTreeMap<String, Ledger>,
) -> Option<(String, u64)> {
    let allowed = b["status"]["disruptionsAllowed"].as_i64().unwrap_or(0);
    let uid = b["metadata"]["uid"].as_str().unwrap_or_default();
    let rv = b["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    let counted = &b["status"]["disruptedPods"];
    let ledger = tickets.entry(uid.to_string()).or_default();
    if ledger.exhausted.as_deref() == Some(rv) {
        return None;
    }
    let seen_rv = rv.parse::<u64>().ok();
    ledger.taken.retain_mut(|t| {
        let Some(at) = t.granted else {
            return true;
        };
        let pod = pods.get(&t.pod.uid);
        if let Some(p) = &pod
            && !p["metadata"]["deletionTimestamp"].is_null()
            && t.deleted_rv.is_none()
        {
            t.deleted_rv = p["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok());
        }
        let listed = counted.get(&t.pod.name).is_some();
        // Written after the pod was seen deleted, so after the eviction's
        // own write: it counts the eviction. Where versions do not compare
        // (the pod gone before it was seen deleted), a status other than
        // the one the disruption was taken under.
        let after = match (t.deleted_rv, seen_rv) {
            (Some(deleted), Some(seen)) => seen > deleted,
            _ => pod.is_none() && t.rv != rv,
        };
        !listed && !after && at.elapsed() < GRANTED_COUNTS_FOR
    });
    let uncounted = i64::try_from(ledger.taken.len()).unwrap_or(i64::MAX);
    if allowed.saturating_sub(uncounted) <= 0 {
        return None;
    }
    ledger.next += 1;
    let id = ledger.next;
    ledger.taken.push(Taken {
        id,
        rv: rv.to_string(),
        pod: pod.clone(),
        granted: None,
        deleted_rv: None,
    });
    Some((uid.to_string(), id))
}

/// The pod a claim or a hold is for: its name (what a budget's
/// `disruptedPods` lists) and uid (what the agent's pod view is keyed by).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claimant {
    pub name: String,
    pub uid: String,
}

/// What a pod may do before it asks to be evicted (see
/// [`BudgetWatches::claim`]).
pub enum Claim {
    /// Ask the Eviction API, with the budget's disruption taken if one
    /// was.
    Ask(Option<Ticket>),
    /// Wait for the budget held, which would refuse with these words;
    /// whether this drain's own evictions took what it allows (the pod
    /// waits its turn, rather than being blocked).
    Wait(Box<BudgetHold>, String, bool),
}

/// A blocked pod's claim on a budget watch; dropping it lets the watch go.
pub struct BudgetHold {
    index: Index,
    tickets: Tickets,
    watches: BudgetWatches,
    scope: Scope,
    /// The budget the pod waits on, if known; else any of the scope's.
    budget: Option<String>,
    /// The pod that waits (none for a stage's hold).
    pod: Claimant,
    /// The view's changes as of the status the hold was decided on, for
    /// its first wait (else as of the wait's start).
    seen: Mutex<Option<watch::Receiver<u64>>>,
}

impl BudgetHold {
    /// Makes the next wait count changes from `seen` (from
    /// [`BudgetWatches::changes_of`] before the pod asked) rather than from
    /// its start. Only for a hold on a namespace's watch, whose changes
    /// `seen` are.
    pub fn seen_from(&self, seen: Option<watch::Receiver<u64>>) {
        if self.scope.name.is_none() && seen.is_some() {
            *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = seen;
        }
    }

    /// Whether this hold covers `namespace` and `name`.
    pub fn covers(&self, namespace: &str, name: Option<&str>) -> bool {
        self.scope.namespace == namespace && self.budget.as_deref() == name
    }

    /// Resolves once a watched budget allows a disruption to this pod, or
    /// the budget named is gone, seen in a change after this call (for the
    /// first wait of a hold from [`BudgetWatches::claim`], after the status
    /// it was decided on, so a change in between is not missed): the
    /// status seen before may still count the disruption that was just
    /// refused. A status that allows `k` disruptions lets `k` waiting pods
    /// go; the rest wait for the next status (the evictions it allowed
    /// change it). The disruption taken comes with it, None when the
    /// budget is gone.
    pub fn allows(&self) -> impl Future<Output = Option<Ticket>> + use<> {
        let budgets = self.index.clone();
        let tickets = self.tickets.clone();
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut changes = seen.unwrap_or_else(|| budgets.changes());
        let ns = self.scope.namespace.clone();
        let name = self.budget.clone();
        let pod = self.pod.clone();
        let pods = self.watches.pods.clone();
        async move {
            loop {
                if changes.changed().await.is_err() {
                    return std::future::pending().await;
                }
                let all = budgets.all();
                let watched: Vec<_> = all
                    .iter()
                    .filter(|b| {
                        b["metadata"]["namespace"] == ns.as_str()
                            && name.as_deref().is_none_or(|n| b["metadata"]["name"] == n)
                    })
                    .collect();
                if name.is_some() && watched.is_empty() {
                    return None;
                }
                let taken = {
                    let mut taken = tickets.lock().unwrap_or_else(|e| e.into_inner());
                    watched
                        .into_iter()
                        .find_map(|b| take_one(b, &pod, &pods, &mut taken))
                };
                if let Some((budget, id)) = taken {
                    return Some(Ticket {
                        tickets,
                        index: budgets,
                        budget,
                        id,
                        settled: false,
                    });
                }
            }
        }
    }
}

impl Drop for BudgetHold {
    fn drop(&mut self) {
        self.watches.release(&self.scope);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn who(name: &str) -> Claimant {
        Claimant {
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    /// Watches whose client reaches no API server: their views are fed by
    /// the test.
    fn watches() -> BudgetWatches {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        BudgetWatches::new(
            kube::Client::try_from(config).unwrap(),
            WatchGuard::default(),
        )
    }

    fn budget(namespace: &str, name: &str, allowed: i64) -> serde_json::Value {
        json!({
            "metadata": {"uid": format!("{namespace}/{name}"), "namespace": namespace, "name": name},
            "status": {"disruptionsAllowed": allowed},
        })
    }

    /// Pods blocked in one scope share one watch, which lasts until the
    /// last of them lets go; a scope is a namespace, or one budget in it.
    #[tokio::test]
    async fn blocked_pods_share_a_watch_per_scope_until_the_last_lets_go() {
        let w = watches();
        let web = w.hold("shop", Some("web"), &who("p"));
        assert!(web.covers("shop", Some("web")));
        assert!(!web.covers("shop", None));
        assert!(!web.covers("shop", Some("db")));
        assert!(!web.covers("other", Some("web")));
        let again = w.hold("shop", Some("web"), &who("p"));
        let all = w.hold("shop", None, &who("p"));
        assert!(all.covers("shop", None));
        let scopes =
            |w: &BudgetWatches| -> Vec<String> { w.views().into_iter().map(|(s, _)| s).collect() };
        assert_eq!(
            scopes(&w),
            [
                "poddisruptionbudgets in shop",
                "poddisruptionbudget shop/web"
            ]
        );
        drop(again);
        drop(all);
        assert_eq!(
            scopes(&w),
            ["poddisruptionbudget shop/web"],
            "web still held"
        );
        drop(web);
        assert!(scopes(&w).is_empty());
    }

    /// A hold wakes its pod once a change after it began waiting shows its
    /// own budget allowing a disruption; not for what it saw before, nor
    /// for other budgets.
    #[tokio::test]
    async fn a_hold_wakes_only_when_its_own_budget_allows_a_disruption() {
        let w = watches();
        let web = w.hold("shop", Some("web"), &who("p"));
        web.index.upsert(budget("shop", "web", 1));
        let mut allows = Box::pin(web.allows());
        assert!(
            futures::poll!(&mut allows).is_pending(),
            "seen before: stale"
        );
        for (ns, name, allowed) in [
            ("shop", "web", 0),
            ("other", "web", 5),
            ("shop", "db", 3),
            ("shop", "web", 0),
            ("shop", "web", -1),
        ] {
            web.index.upsert(budget(ns, name, allowed));
            assert!(
                futures::poll!(&mut allows).is_pending(),
                "{ns}/{name} allowing {allowed}"
            );
        }
        web.index.upsert(budget("shop", "web", 1));
        assert!(futures::poll!(&mut allows).is_ready());

        // A namespace-wide hold wakes for any budget of its namespace.
        let all = w.hold("shop", None, &who("p"));
        let mut allows = Box::pin(all.allows());
        all.index.upsert(budget("other", "db", 2));
        assert!(futures::poll!(&mut allows).is_pending());
        all.index.upsert(budget("shop", "db", 2));
        assert!(futures::poll!(&mut allows).is_ready());
    }

    /// A status allowing k disruptions wakes k of the pods waiting on the
    /// budget, not all of them; the next status wakes the next ones.
    #[tokio::test]
    async fn a_status_allowing_k_disruptions_wakes_k_pods() {
        let w = watches();
        let holds: Vec<BudgetHold> = (0..3)
            .map(|i| w.hold("shop", Some("web"), &who(&format!("web-{i}"))))
            .collect();
        let index = holds[0].index.clone();
        let mut waiting: Vec<_> = holds.iter().map(|h| Some(Box::pin(h.allows()))).collect();
        let with_rv = |allowed: i64, rv: &str| {
            let mut b = budget("shop", "web", allowed);
            b["metadata"]["resourceVersion"] = json!(rv);
            b
        };
        // Each pod woken asks, and its eviction is granted.
        async fn wake(
            waiting: &mut [Option<std::pin::Pin<Box<impl Future<Output = Option<Ticket>>>>>],
        ) -> usize {
            let mut woken = 0;
            for slot in waiting.iter_mut() {
                if let Some(w) = slot
                    && let std::task::Poll::Ready(ticket) = futures::poll!(w)
                {
                    ticket.expect("the budget is there").granted();
                    *slot = None;
                    woken += 1;
                }
            }
            woken
        }
        index.upsert(with_rv(1, "2"));
        let woken = wake(&mut waiting).await;
        assert_eq!(woken, 1, "one disruption allowed: one pod goes");
        // The eviction it allowed (its write lists the pod it let go),
        // then the controller's next status.
        let mut evicted = with_rv(0, "3");
        evicted["status"]["disruptedPods"] = json!({"web-0": "2026-11-27T10:00:00Z"});
        index.upsert(evicted);
        index.upsert(with_rv(2, "4"));
        let woken_now = wake(&mut waiting).await;
        assert_eq!(woken_now, 2, "two allowed: the two others go");
    }

    /// A disruption given back (its eviction failed with a 503, say) wakes
    /// a pod waiting on the budget at once, which takes it: the status that
    /// counted it will not change, since no eviction happened.
    #[tokio::test]
    async fn a_disruption_given_back_wakes_a_waiting_pod() {
        let w = watches();
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        let stage = w.hold("shop", None, &who("p"));
        stage.index.upsert(json!({
            "metadata": {"uid": "u-web", "namespace": "shop", "name": "web",
                         "generation": 1, "resourceVersion": "5"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 1, "observedGeneration": 1},
        }));
        let Claim::Ask(Some(first)) = w.claim("shop", &who("p"), &labels) else {
            panic!("one disruption: the first pod takes it");
        };
        let Claim::Wait(second, _, _) = w.claim("shop", &who("p"), &labels) else {
            panic!("none left: the second pod waits");
        };
        let mut wakes = Box::pin(second.allows());
        assert!(futures::poll!(&mut wakes).is_pending());
        drop(first);
        let std::task::Poll::Ready(Some(taken)) = futures::poll!(&mut wakes) else {
            panic!("given back: the waiting pod wakes with it");
        };
        assert!(
            matches!(w.claim("shop", &who("p"), &labels), Claim::Wait(..)),
            "the woken pod holds it"
        );
        drop(taken);
        assert!(matches!(
            w.claim("shop", &who("p"), &labels),
            Claim::Ask(Some(_))
        ));
    }

    /// The eviction's own write of the budget (its pod listed among the
    /// disrupted) is what lets the next eviction under the budget go
    /// before the answer: a status without it, or listing another pod,
    /// is not.
    #[tokio::test]
    async fn an_eviction_is_counted_once_the_budget_lists_its_pod() {
        let w = watches();
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        let stage = w.hold("shop", None, &who("p"));
        let web = |rv: &str, disrupted: Value| {
            json!({
                "metadata": {"uid": "u-web", "namespace": "shop", "name": "web",
                             "generation": 1, "resourceVersion": rv},
                "spec": {"selector": {"matchLabels": {"app": "web"}}},
                "status": {"disruptionsAllowed": 2, "observedGeneration": 1,
                           "disruptedPods": disrupted},
            })
        };
        stage.index.upsert(web("5", json!({})));
        let Claim::Ask(Some(ticket)) = w.claim("shop", &who("a"), &labels) else {
            panic!("the budget allows two: the pod takes one");
        };
        let mut counted = Box::pin(ticket.counted("a"));
        assert!(futures::poll!(&mut counted).is_pending());
        stage
            .index
            .upsert(web("6", json!({"b": "2026-11-29T07:00:00Z"})));
        assert!(
            futures::poll!(&mut counted).is_pending(),
            "another pod's disruption is not this eviction's"
        );
        stage
            .index
            .upsert(web("7", json!({"a": "2026-11-29T07:00:01Z"})));
        assert!(futures::poll!(&mut counted).is_ready());
        // What the budget's evictions usually take: the median of the
        // last few.
        assert_eq!(ticket.usual(), None);
        for ms in [40, 900, 60, 50, 70] {
            ticket.took(Duration::from_millis(ms));
        }
        assert_eq!(ticket.usual(), Some(Duration::from_millis(60)));
        for _ in 0..RECENT {
            ticket.took(Duration::from_millis(300));
        }
        assert_eq!(ticket.usual(), Some(Duration::from_millis(300)));
    }

    /// The turn passes on once the budget's status has stood still for a
    /// while: every write (the eviction's, the disruption controller's
    /// answers to it) starts the wait again; another budget's does not.
    #[tokio::test(start_paused = true)]
    async fn a_budget_is_still_once_no_write_came_for_a_while() {
        let w = watches();
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        let stage = w.hold("shop", None, &who("p"));
        let budget = |name: &str, rv: &str| {
            json!({
                "metadata": {"uid": format!("u-{name}"), "namespace": "shop", "name": name,
                             "generation": 1, "resourceVersion": rv},
                "spec": {"selector": {"matchLabels": {"app": name}}},
                "status": {"disruptionsAllowed": 2, "observedGeneration": 1},
            })
        };
        stage.index.upsert(budget("web", "5"));
        let Claim::Ask(Some(ticket)) = w.claim("shop", &who("a"), &labels) else {
            panic!("the budget allows two: the pod takes one");
        };
        let quiet = Duration::from_millis(25);
        let still = tokio::spawn(ticket.still_for(quiet));
        let step = |ms| tokio::time::sleep(Duration::from_millis(ms));
        step(15).await;
        stage.index.upsert(budget("web", "6"));
        step(20).await;
        stage.index.upsert(budget("db", "7"));
        assert!(!still.is_finished(), "written 20 ms ago");
        step(10).await;
        assert!(still.is_finished(), "nothing written to it for 30 ms");
    }

    /// The budget that refused is deleted: nothing holds the pod any more,
    /// so it is asked again at once, not at the backstop.
    #[tokio::test]
    async fn a_hold_wakes_when_its_budget_is_deleted() {
        let w = watches();
        let web = w.hold("shop", Some("web"), &who("p"));
        web.index.upsert(budget("shop", "web", 0));
        let mut allows = Box::pin(web.allows());
        web.index.upsert(budget("shop", "db", 0));
        assert!(futures::poll!(&mut allows).is_pending());
        web.index.remove("shop/web");
        assert!(futures::poll!(&mut allows).is_ready());
    }

    /// A stage cancelled while it waits for its budgets' first list (the
    /// API server out of reach here) stops waiting at once, still holding
    /// the watch for what comes next.
    #[tokio::test]
    async fn a_cancelled_stage_does_not_wait_for_its_first_budget_list() {
        let w = watches();
        let cancel = CancellationToken::new();
        let mut opening = Box::pin(w.watch_namespace("shop", Duration::from_secs(3600), &cancel));
        assert!(futures::poll!(&mut opening).is_pending(), "no list yet");
        cancel.cancel();
        let std::task::Poll::Ready(hold) = futures::poll!(&mut opening) else {
            panic!("cancelled: the wait ends");
        };
        assert!(hold.covers("shop", None));
        assert_eq!(w.views().len(), 1);
    }

    /// A pod selected by a watched budget asks while the budget's status,
    /// of its current spec, has a disruption that no other pod has taken,
    /// and takes it; once none is left it waits without asking, holding the
    /// watch, until the next status gives one. Pods of other budgets, or of
    /// none, ask.
    #[tokio::test]
    async fn a_pod_asks_only_while_its_watched_budget_has_a_disruption_to_give() {
        let w = watches();
        let labels = |app: &str| BTreeMap::from([("app".to_string(), app.to_string())]);
        let web = |allowed: i64, observed: i64, rv: &str| {
            json!({
                "metadata": {"uid": "u-web", "namespace": "shop", "name": "web",
                             "generation": 2, "resourceVersion": rv},
                "spec": {"selector": {"matchLabels": {"app": "web"}}},
                "status": {"disruptionsAllowed": allowed, "observedGeneration": observed,
                           "desiredHealthy": 3, "currentHealthy": 4},
            })
        };
        let asks = |c: Claim| matches!(c, Claim::Ask(_));
        assert!(
            asks(w.claim("shop", &who("p"), &labels("web"))),
            "nothing watched"
        );
        let stage = w.hold("shop", None, &who("p"));
        stage.index.upsert(web(0, 1, "7"));
        assert!(
            asks(w.claim("shop", &who("p"), &labels("web"))),
            "a status of an older spec"
        );
        stage.index.upsert(web(1, 2, "8"));
        let Claim::Ask(Some(taken)) = w.claim("shop", &who("p"), &labels("web")) else {
            panic!("one disruption: the first pod takes it");
        };
        assert!(matches!(
            w.claim("shop", &who("p"), &labels("web")),
            Claim::Wait(..)
        ));
        // A pod that took it but never asked (its stage ended) gives it back.
        drop(taken);
        let Claim::Ask(Some(taken)) = w.claim("shop", &who("p"), &labels("web")) else {
            panic!("given back: the next pod takes it");
        };
        taken.granted();
        let Claim::Wait(second, why, paced) = w.claim("shop", &who("p"), &labels("web")) else {
            panic!("the one disruption is taken: the next pod waits");
        };
        assert!(paced, "its own eviction took it: the pod waits its turn");
        assert_eq!(
            why,
            "The disruption budget web needs 3 healthy pods and has 4 currently"
        );
        assert!(second.covers("shop", Some("web")));
        assert!(
            asks(w.claim("shop", &who("p"), &labels("db"))),
            "no budget selects it"
        );
        assert!(
            asks(w.claim("other", &who("p"), &labels("web"))),
            "another namespace"
        );

        // A refusal naming the budget joins the namespace's watch.
        let refused = w.hold("shop", Some("web"), &who("p"));
        assert_eq!(w.views().len(), 1, "one watch: {:?}", w.views().len());
        assert!(refused.covers("shop", Some("web")));

        // The next status gives one more: the waiting pod wakes and takes
        // it, and a new pod waits again.
        let mut wakes = Box::pin(second.allows());
        stage.index.upsert(web(1, 2, "9"));
        let std::task::Poll::Ready(Some(woken)) = futures::poll!(&mut wakes) else {
            panic!("the next status wakes the waiting pod");
        };
        woken.granted();
        assert!(
            matches!(w.claim("shop", &who("p"), &labels("web")), Claim::Wait(..)),
            "the status that allowed it does not count it yet"
        );
        // A status that comes between the decision to wait and the wait
        // itself still wakes the pod.
        let Claim::Wait(third, _, _) = w.claim("shop", &who("p"), &labels("web")) else {
            panic!("nothing left: the next pod waits");
        };
        stage.index.upsert(web(1, 2, "10"));
        let mut wakes = Box::pin(third.allows());
        assert!(
            futures::poll!(&mut wakes).is_ready(),
            "the status after the decision is not missed"
        );
        drop(third);
        drop((stage, second, refused));
        // A budget this agent has had nothing from blocks: not its turn
        // that is awaited.
        let w = watches();
        let stage = w.hold("shop", None, &who("p"));
        stage.index.upsert(web(0, 2, "30"));
        let Claim::Wait(_, _, paced) = w.claim("shop", &who("x"), &labels("web")) else {
            panic!("nothing allowed");
        };
        assert!(!paced);
        drop(stage);
        // What a granted eviction leaves counted, by what a status shows.
        let w = watches();
        let stage = w.hold("shop", None, &who("p"));
        let pods = w.pods.clone();
        pods.upsert(json!({"metadata": {"uid": "uid-a", "name": "a", "namespace": "shop"}}));
        stage.index.upsert(web(2, 2, "20"));
        let Claim::Ask(Some(a)) = w.claim("shop", &who("a"), &labels("web")) else {
            panic!("two allowed");
        };
        a.granted();
        // A newer status that does not list it, its pod not yet deleted:
        // written before the eviction landed; it still counts.
        stage.index.upsert(web(2, 2, "21"));
        let Claim::Ask(Some(b)) = w.claim("shop", &who("b"), &labels("web")) else {
            panic!("one left of two");
        };
        assert!(matches!(
            w.claim("shop", &who("c"), &labels("web")),
            Claim::Wait(..)
        ));
        drop(b);
        // The eviction's own write lists it: counted by the status now.
        let mut listed = web(1, 2, "22");
        listed["status"]["disruptedPods"] = json!({"a": "2026-11-27T10:00:00Z"});
        stage.index.upsert(listed);
        let Claim::Ask(Some(_c)) = w.claim("shop", &who("c"), &labels("web")) else {
            panic!("listed: the one it allows is free");
        };
        drop(_c);
        // Another granted eviction whose own write of the budget this
        // watch never showed (a newest status only): its pod seen deleted
        // at version 25, a status of version 24 does not count it; one of
        // version 26 does (the controller counts the deleted pod out of
        // the healthy ones).
        let Claim::Ask(Some(d)) = w.claim("shop", &who("d"), &labels("web")) else {
            panic!("one allowed");
        };
        d.granted();
        pods.upsert(
            json!({"metadata": {"uid": "uid-d", "name": "d", "namespace": "shop",
            "resourceVersion": "25", "deletionTimestamp": "2026-11-27T10:00:01Z"}}),
        );
        stage.index.upsert(web(1, 2, "24"));
        assert!(matches!(
            w.claim("shop", &who("e"), &labels("web")),
            Claim::Wait(..)
        ));
        stage.index.upsert(web(1, 2, "26"));
        assert!(matches!(
            w.claim("shop", &who("e"), &labels("web")),
            Claim::Ask(Some(_))
        ));
        drop(stage);
        assert!(w.views().is_empty(), "the watch ends with its last holder");
        assert!(asks(w.claim("shop", &who("p"), &labels("web"))));
    }
}
