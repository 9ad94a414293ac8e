//! What is worth a notification, and what it says: plain decisions over
//! the drain's events, no clock of its own and no client.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::drain::progress::{DrainEvent, DrainStatus, EventKind};

/// The kinds of notification, in the order a drain's life gives them.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    Started,
    Blocked,
    Drained,
    Failed,
    Undone,
}

/// One notification, as the JSON document receivers get.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Notice {
    pub kind: NoticeKind,
    pub node: String,
    /// When it happened (RFC 3339, UTC).
    pub time: String,
    /// One line for people; also what chat receivers show.
    pub text: String,
    /// What asks for the drain ("taint maintd.io/drain=kernel:NoSchedule").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<String>,
    /// The blocked pod, namespace/name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Why: what blocks, or why the drain failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub pods_total: usize,
    pub pods_remaining: usize,
    /// Blockers seen since the last blocked notification that were not
    /// notified (the rate limit).
    #[serde(skip_serializing_if = "is_zero")]
    pub blocked_not_notified: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Blocked notifications allowed in a burst, and how fast that allowance
/// comes back: a drain held by thirty budgets says so in a few messages,
/// not thirty.
pub const BLOCKED_BURST: u32 = 5;
pub const BLOCKED_REFILL: Duration = Duration::from_secs(12);

/// A pod refused, not yet notified: it is, if still blocked after the
/// wait (a budget pacing a drain for a second is no news).
#[derive(Debug)]
struct Pending {
    /// namespace/name
    pod: String,
    /// The budget, or the pod itself.
    blocker: String,
    message: String,
    since: Instant,
}

/// Decides the notifications of one node's drains.
#[derive(Debug)]
pub struct Noticer {
    node: String,
    /// How long a pod stays refused before it is notified.
    blocked_after: Duration,
    pending: Vec<Pending>,
    /// Started and not yet undone: a drain resumed with a new plan is the
    /// same drain.
    active: bool,
    /// The last outcome notified (drained or failed), not said twice.
    outcome: Option<NoticeKind>,
    /// Blockers already notified in this drain (a budget, or a pod).
    blockers: HashSet<String>,
    tokens: u32,
    refilled: Option<Instant>,
    not_notified: u64,
}

impl Noticer {
    pub fn new(node: &str, blocked_after: Duration) -> Noticer {
        Noticer {
            node: node.to_string(),
            blocked_after,
            pending: Vec::new(),
            active: false,
            outcome: None,
            blockers: HashSet::new(),
            tokens: BLOCKED_BURST,
            refilled: None,
            not_notified: 0,
        }
    }

    /// The notification `ev` is worth, if any; `status` is the drain's
    /// status as the event left it, `now` the time it is seen.
    pub fn notice(
        &mut self,
        ev: &DrainEvent,
        status: &DrainStatus,
        now: Instant,
    ) -> Option<Notice> {
        let node = self.node.clone();
        let (kind, text, pod, reason) = match ev.event {
            EventKind::DrainStarted if !self.active => {
                self.active = true;
                self.outcome = None;
                self.blockers.clear();
                self.pending.clear();
                let why = if status.triggers.is_empty() {
                    String::new()
                } else {
                    format!(" for {}", status.triggers.join(", "))
                };
                (
                    NoticeKind::Started,
                    format!("maintd started draining node {node}{why}"),
                    None,
                    None,
                )
            }
            EventKind::PodBlocked => {
                let ns = ev.namespace.as_deref().unwrap_or_default();
                let pod = format!("{ns}/{}", ev.pod.as_deref().unwrap_or_default());
                // One blocker is a budget (whichever of its pods is asked),
                // or the pod itself when no budget is named.
                let blocker = match crate::drain::executor::blocking_budget(&ev.message) {
                    Some(budget) => format!("budget {ns}/{budget}"),
                    None => format!("pod {pod}"),
                };
                self.pending.retain(|p| p.pod != pod);
                self.pending.push(Pending {
                    pod,
                    blocker,
                    message: ev.message.clone(),
                    since: now,
                });
                return self.due(status, now).into_iter().next();
            }
            EventKind::PodEvicted | EventKind::PodGone | EventKind::PodDeleted => {
                let ns = ev.namespace.as_deref().unwrap_or_default();
                let pod = format!("{ns}/{}", ev.pod.as_deref().unwrap_or_default());
                self.pending.retain(|p| p.pod != pod);
                return None;
            }
            EventKind::DrainCompleted => {
                self.pending.clear();
                if !self.set_outcome(NoticeKind::Drained) {
                    return None;
                }
                (
                    NoticeKind::Drained,
                    format!("node {node} is drained: {}", ev.message),
                    None,
                    None,
                )
            }
            EventKind::DrainFailed => {
                self.pending.clear();
                if !self.set_outcome(NoticeKind::Failed) {
                    return None;
                }
                (
                    NoticeKind::Failed,
                    format!("draining node {node} failed: {}", ev.message),
                    None,
                    Some(ev.message.clone()),
                )
            }
            EventKind::UndoCompleted => {
                self.pending.clear();
                self.active = false;
                self.outcome = None;
                self.blockers.clear();
                (
                    NoticeKind::Undone,
                    format!("maintenance of node {node} is over: uncordoned, pods may come back"),
                    None,
                    None,
                )
            }
            _ => return None,
        };
        Some(self.make(kind, text, pod, reason, status))
    }

    fn make(
        &mut self,
        kind: NoticeKind,
        text: String,
        pod: Option<String>,
        reason: Option<String>,
        status: &DrainStatus,
    ) -> Notice {
        let blocked_not_notified = if kind == NoticeKind::Blocked {
            std::mem::take(&mut self.not_notified)
        } else {
            0
        };
        Notice {
            kind,
            node: self.node.clone(),
            time: crate::drain::progress::now_time(),
            text,
            triggers: status.triggers.clone(),
            pod,
            reason,
            pods_total: status.pods_total,
            pods_remaining: status.pods_remaining,
            blocked_not_notified,
        }
    }

    /// When a refused pod is next due to be looked at again, if one waits.
    pub fn next_due(&self) -> Option<Instant> {
        self.pending
            .iter()
            .map(|p| p.since + self.blocked_after)
            .min()
    }

    /// Blocked notifications due by `now`: pods refused for the wait and
    /// still blocked in `status`, each blocker once per drain.
    pub fn due(&mut self, status: &DrainStatus, now: Instant) -> Vec<Notice> {
        let wait = self.blocked_after;
        let (ripe, waiting): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| now.saturating_duration_since(p.since) >= wait);
        self.pending = waiting;
        let mut out = Vec::new();
        for p in ripe {
            let still = status
                .blockers
                .iter()
                .any(|b| format!("{}/{}", b.namespace, b.pod) == p.pod);
            if !still || self.blockers.contains(&p.blocker) {
                continue;
            }
            self.blockers.insert(p.blocker);
            if !self.take_token(now) {
                continue;
            }
            let node = self.node.clone();
            let text = format!(
                "draining node {node} is blocked: {} cannot be evicted: {}",
                p.pod, p.message
            );
            out.push(self.make(
                NoticeKind::Blocked,
                text,
                Some(p.pod),
                Some(p.message),
                status,
            ));
        }
        out
    }

    fn set_outcome(&mut self, kind: NoticeKind) -> bool {
        let new = self.outcome != Some(kind);
        self.outcome = Some(kind);
        new
    }

    /// Whether a blocked notification may go now (a token bucket); one
    /// that may not is counted for the next that goes.
    fn take_token(&mut self, now: Instant) -> bool {
        let since = self.refilled.get_or_insert(now);
        let earned = now.saturating_duration_since(*since).as_millis() / BLOCKED_REFILL.as_millis();
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(earned).min(BLOCKED_BURST);
            *since += BLOCKED_REFILL * earned;
        }
        if self.tokens == 0 {
            self.not_notified += 1;
            return false;
        }
        self.tokens -= 1;
        true
    }
}

/// The body posted for `notice`: the notice itself, or for Slack's incoming
/// webhooks the `text` Slack shows (the other fields as a line under it).
pub fn body(notice: &Notice, slack: bool) -> Value {
    if slack {
        let mut text = format!("*{}*: {}", kind_word(notice.kind), notice.text);
        if notice.blocked_not_notified > 0 {
            text.push_str(&format!(
                " ({} more blockers not notified)",
                notice.blocked_not_notified
            ));
        }
        return json!({ "text": text });
    }
    let mut doc = serde_json::to_value(notice).unwrap_or_else(|_| json!({}));
    if let Some(map) = doc.as_object_mut() {
        map.insert("source".into(), "maintd".into());
    }
    doc
}

fn kind_word(kind: NoticeKind) -> &'static str {
    match kind {
        NoticeKind::Started => "Drain started",
        NoticeKind::Blocked => "Drain blocked",
        NoticeKind::Drained => "Drained",
        NoticeKind::Failed => "Drain failed",
        NoticeKind::Undone => "Undone",
    }
}
