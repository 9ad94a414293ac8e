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

/// How many of a scope's blocked pods a budget's status has let go: per
/// budget (by uid), the resourceVersion of the status that allowed `k`
/// disruptions and how many pods it has woken. A status allowing `k` wakes
/// `k` pods, not every pod waiting on the budget: the others would only be
/// refused again (twenty pods behind a budget that allows one were nineteen
/// refused evictions a round).
type Tickets = Arc<Mutex<BTreeMap<String, (String, i64)>>>;

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
}

impl BudgetWatches {
    /// Watches made through `client`, guarded by `guard` like every other
    /// watch of the agent.
    pub fn new(client: kube::Client, guard: WatchGuard) -> Self {
        BudgetWatches {
            client,
            guard,
            inner: Arc::default(),
        }
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
    pub fn hold(&self, namespace: &str, name: Option<&str>) -> BudgetHold {
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
        let hold = self.hold(namespace, None);
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
    pub fn claim(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Claim {
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
                    Some(match take_ticket(b, &mut tickets) {
                        Ok(taken) => Ok(taken.map(|(budget, rv)| Ticket {
                            tickets: open.tickets.clone(),
                            index: open.index.clone(),
                            budget,
                            rv,
                            used: false,
                        })),
                        Err(why) => Err((scope.clone(), name.to_string(), why, seen.clone())),
                    })
                })
            });
        let (scope, budget, why, seen) = match found {
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
                seen: Mutex::new(Some(seen)),
            }),
            why,
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
fn selects(b: &Value, labels: &BTreeMap<String, String>) -> bool {
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
fn take_ticket(
    b: &Value,
    tickets: &mut BTreeMap<String, (String, i64)>,
) -> Result<Option<(String, String)>, String> {
    let status = &b["status"];
    let observed = status["observedGeneration"].as_i64();
    if observed.is_none() || observed != b["metadata"]["generation"].as_i64() {
        return Ok(None);
    }
    if let Some(taken) = take_one(b, tickets) {
        return Ok(Some(taken));
    }
    Err(format!(
        "The disruption budget {} needs {} healthy pods and has {} currently",
        b["metadata"]["name"].as_str().unwrap_or_default(),
        status["desiredHealthy"].as_i64().unwrap_or_default(),
        status["currentHealthy"].as_i64().unwrap_or_default(),
    ))
}

/// One of a budget's disruptions, taken by a pod about to ask: given back
/// when dropped unless [`Ticket::used`] says the API server counted it.
/// A pod that never asked (its stage cancelled or re-planned), or whose
/// eviction failed for any reason but the budget (a 503, a timeout), would
/// otherwise leave the disruption taken until the budget's next status,
/// which no eviction is coming to cause: the pods waiting on it would sit
/// until their backstop. Giving it back wakes them.
pub struct Ticket {
    tickets: Tickets,
    /// The watch whose waiters a disruption given back wakes.
    index: Index,
    budget: String,
    rv: String,
    used: bool,
}

impl Ticket {
    /// The API server granted the eviction, or refused it by the budget
    /// (the status it was counted under is behind; the next one counts
    /// afresh): the disruption stays taken.
    pub fn used(mut self) {
        self.used = true;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.used {
            return;
        }
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((rv, taken)) = tickets.get_mut(&self.budget)
            && *rv == self.rv
            && *taken > 0
        {
            *taken -= 1;
            drop(tickets);
            self.index.touch();
        }
    }
}

/// Takes one of the disruptions budget `b`'s status allows, if one is
/// left: `tickets` count, per budget, how many were taken under its status
/// of that resourceVersion (a new status starts again from none). Returns
/// the budget's uid and the resourceVersion it was counted under.
fn take_one(b: &Value, tickets: &mut BTreeMap<String, (String, i64)>) -> Option<(String, String)> {
    let allowed = b["status"]["disruptionsAllowed"].as_i64().unwrap_or(0);
    let uid = b["metadata"]["uid"].as_str().unwrap_or_default();
    let rv = b["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    let entry = tickets
        .entry(uid.to_string())
        .or_insert_with(|| (rv.to_string(), 0));
    if entry.0 != rv {
        *entry = (rv.to_string(), 0);
    }
    if entry.1 >= allowed {
        return None;
    }
    entry.1 += 1;
    Some((uid.to_string(), rv.to_string()))
}

/// What a pod may do before it asks to be evicted (see
/// [`BudgetWatches::claim`]).
pub enum Claim {
    /// Ask the Eviction API, with the budget's disruption taken if one
    /// was.
    Ask(Option<Ticket>),
    /// Wait for the budget held, which would refuse with these words.
    Wait(Box<BudgetHold>, String),
}

/// A blocked pod's claim on a budget watch; dropping it lets the watch go.
pub struct BudgetHold {
    index: Index,
    tickets: Tickets,
    watches: BudgetWatches,
    scope: Scope,
    /// The budget the pod waits on, if known; else any of the scope's.
    budget: Option<String>,
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
                    watched.into_iter().find_map(|b| take_one(b, &mut taken))
                };
                if let Some((budget, rv)) = taken {
                    return Some(Ticket {
                        tickets,
                        index: budgets,
                        budget,
                        rv,
                        used: false,
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
        let web = w.hold("shop", Some("web"));
        assert!(web.covers("shop", Some("web")));
        assert!(!web.covers("shop", None));
        assert!(!web.covers("shop", Some("db")));
        assert!(!web.covers("other", Some("web")));
        let again = w.hold("shop", Some("web"));
        let all = w.hold("shop", None);
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
        let web = w.hold("shop", Some("web"));
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
        let all = w.hold("shop", None);
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
        let holds: Vec<BudgetHold> = (0..3).map(|_| w.hold("shop", Some("web"))).collect();
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
                    ticket.expect("the budget is there").used();
                    *slot = None;
                    woken += 1;
                }
            }
            woken
        }
        index.upsert(with_rv(1, "2"));
        let woken = wake(&mut waiting).await;
        assert_eq!(woken, 1, "one disruption allowed: one pod goes");
        // The eviction it allowed, then the controller's next status.
        index.upsert(with_rv(0, "3"));
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
        let stage = w.hold("shop", None);
        stage.index.upsert(json!({
            "metadata": {"uid": "u-web", "namespace": "shop", "name": "web",
                         "generation": 1, "resourceVersion": "5"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 1, "observedGeneration": 1},
        }));
        let Claim::Ask(Some(first)) = w.claim("shop", &labels) else {
            panic!("one disruption: the first pod takes it");
        };
        let Claim::Wait(second, _) = w.claim("shop", &labels) else {
            panic!("none left: the second pod waits");
        };
        let mut wakes = Box::pin(second.allows());
        assert!(futures::poll!(&mut wakes).is_pending());
        drop(first);
        let std::task::Poll::Ready(Some(taken)) = futures::poll!(&mut wakes) else {
            panic!("given back: the waiting pod wakes with it");
        };
        assert!(
            matches!(w.claim("shop", &labels), Claim::Wait(..)),
            "the woken pod holds it"
        );
        drop(taken);
        assert!(matches!(w.claim("shop", &labels), Claim::Ask(Some(_))));
    }

    /// The budget that refused is deleted: nothing holds the pod any more,
    /// so it is asked again at once, not at the backstop.
    #[tokio::test]
    async fn a_hold_wakes_when_its_budget_is_deleted() {
        let w = watches();
        let web = w.hold("shop", Some("web"));
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
        assert!(asks(w.claim("shop", &labels("web"))), "nothing watched");
        let stage = w.hold("shop", None);
        stage.index.upsert(web(0, 1, "7"));
        assert!(
            asks(w.claim("shop", &labels("web"))),
            "a status of an older spec"
        );
        stage.index.upsert(web(1, 2, "8"));
        let Claim::Ask(Some(taken)) = w.claim("shop", &labels("web")) else {
            panic!("one disruption: the first pod takes it");
        };
        assert!(matches!(w.claim("shop", &labels("web")), Claim::Wait(..)));
        // A pod that took it but never asked (its stage ended) gives it back.
        drop(taken);
        let Claim::Ask(Some(taken)) = w.claim("shop", &labels("web")) else {
            panic!("given back: the next pod takes it");
        };
        taken.used();
        let Claim::Wait(second, why) = w.claim("shop", &labels("web")) else {
            panic!("the one disruption is taken: the next pod waits");
        };
        assert_eq!(
            why,
            "The disruption budget web needs 3 healthy pods and has 4 currently"
        );
        assert!(second.covers("shop", Some("web")));
        assert!(asks(w.claim("shop", &labels("db"))), "no budget selects it");
        assert!(asks(w.claim("other", &labels("web"))), "another namespace");

        // A refusal naming the budget joins the namespace's watch.
        let refused = w.hold("shop", Some("web"));
        assert_eq!(w.views().len(), 1, "one watch: {:?}", w.views().len());
        assert!(refused.covers("shop", Some("web")));

        // The next status gives one more: the waiting pod wakes and takes
        // it, and a new pod waits again.
        let mut wakes = Box::pin(second.allows());
        stage.index.upsert(web(1, 2, "9"));
        let std::task::Poll::Ready(Some(_woken)) = futures::poll!(&mut wakes) else {
            panic!("the next status wakes the waiting pod");
        };
        assert!(matches!(w.claim("shop", &labels("web")), Claim::Wait(..)));
        // A status that comes between the decision to wait and the wait
        // itself still wakes the pod.
        let Claim::Wait(third, _) = w.claim("shop", &labels("web")) else {
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
        assert!(w.views().is_empty(), "the watch ends with its last holder");
        assert!(asks(w.claim("shop", &labels("web"))));
    }
}
