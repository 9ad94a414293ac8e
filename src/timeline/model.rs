//! What the timeline shows, from a drain's events: one row per stage (or
//! per pod when the node has few), each a bar from when it started to when
//! its pods were gone, the stretches a budget held a pod back, and marks
//! for escalations, time-outs and the static pod stash. No clock, no
//! client: times are the events' own, in milliseconds since the drain
//! started.

use std::collections::BTreeMap;

use crate::drain::plan::PodType;
use crate::drain::progress::{DrainEvent, EventKind};

/// At most this many pods get a row each; more are drawn by stage.
pub const MAX_POD_ROWS: usize = 30;

/// A drawn drain.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub node: String,
    pub outcome: Outcome,
    /// When the last event came: the end of a finished drain.
    pub end_ms: u64,
    /// Everything had to be done by then (may be past `end_ms`, or
    /// negative when the drain started late).
    pub deadline_ms: Option<i64>,
    pub rows: Vec<Row>,
    /// Events of the drain the agent did not keep (a bounded log).
    pub not_kept: usize,
}

/// How the drain stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Running,
    Completed,
    Failed,
    Cancelled,
}

/// One row: a stage, or a pod of a stage.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub label: String,
    pub stage: usize,
    pub pod_type: Option<PodType>,
    /// The bar: from start to gone; `to_ms` None while not yet gone.
    pub from_ms: u64,
    pub to_ms: Option<u64>,
    /// Stretches in which an eviction was refused, each with why (the
    /// budget's name).
    pub blocked: Vec<Span>,
    pub marks: Vec<Mark>,
    /// What the row's bar says on hover.
    pub note: String,
    /// A few words after the bar ("12/12 pods · 3.1 s").
    pub caption: String,
}

/// A stretch of a row.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub from_ms: u64,
    pub to_ms: u64,
    pub note: String,
}

/// A moment on a row.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub at_ms: u64,
    pub kind: MarkKind,
    pub note: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    /// A pod deleted (not evicted) to meet the deadline.
    Escalated,
    /// The stage's time ran out with pods left.
    TimedOut,
    /// The static pods' manifests were moved away.
    Stashed,
}

/// Whether `kind` ends a drain.
pub fn is_end(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::DrainCompleted | EventKind::DrainFailed | EventKind::DrainCancelled
    )
}

/// One pod as the events tell it.
#[derive(Default)]
struct PodTrack {
    stage: usize,
    pod_type: Option<PodType>,
    from: Option<u64>,
    gone: Option<u64>,
    /// The open refusal: since when, and why.
    blocked_since: Option<(u64, String)>,
    blocked: Vec<Span>,
    marks: Vec<Mark>,
}

/// One stage as the events tell it.
#[derive(Default)]
struct StageTrack {
    label: String,
    pod_type: Option<PodType>,
    from: Option<u64>,
    to: Option<u64>,
    marks: Vec<Mark>,
}

/// What a row stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// A row per pod when there are at most [`MAX_POD_ROWS`], else per stage.
    Auto,
    /// A row per stage (when the events do not follow every pod).
    Stages,
}

/// The chart of the drain in `events` (the last DrainStarted and what
/// follows it); None without a DrainStarted.
pub fn build(
    node: &str,
    events: &[DrainEvent],
    not_kept: usize,
    deadline_ms: Option<i64>,
    by: Rows,
) -> Option<Chart> {
    let start = events
        .iter()
        .rposition(|e| e.event == EventKind::DrainStarted)?;
    let t0 = events[start].t_ms;
    let mut stages: BTreeMap<usize, StageTrack> = BTreeMap::new();
    let mut pods: BTreeMap<(usize, String), PodTrack> = BTreeMap::new();
    let mut outcome = Outcome::Running;
    let mut end_ms = 0;
    for ev in &events[start..] {
        // What comes after the drain's end is not this drain's (the
        // cluster's Events of a node hold whatever anyone wrote).
        if outcome != Outcome::Running {
            break;
        }
        let t = ev.t_ms.saturating_sub(t0);
        end_ms = end_ms.max(t);
        outcome = match ev.event {
            EventKind::DrainCompleted => Outcome::Completed,
            EventKind::DrainFailed => Outcome::Failed,
            EventKind::DrainCancelled => Outcome::Cancelled,
            _ => outcome,
        };
        let Some(n) = ev.stage else { continue };
        let stage = stages.entry(n).or_default();
        stage.pod_type = stage.pod_type.or(ev.pod_type);
        match ev.event {
            EventKind::StageStarted => {
                // Started again: running again, from now.
                stage.from = Some(t);
                stage.to = None;
                stage.label = without_count(&ev.message).to_string();
            }
            EventKind::StageCompleted | EventKind::StageTimedOut => stage.to = Some(t),
            _ => {}
        }
        let mark = |kind| Mark {
            at_ms: t,
            kind,
            note: ev.message.clone(),
        };
        match ev.event {
            EventKind::StageTimedOut => stage.marks.push(mark(MarkKind::TimedOut)),
            EventKind::StaticPodsStashed => stage.marks.push(mark(MarkKind::Stashed)),
            _ => {}
        }
        let (Some(ns), Some(name)) = (&ev.namespace, &ev.pod) else {
            continue;
        };
        let pod = pods.entry((n, format!("{ns}/{name}"))).or_default();
        pod.stage = n;
        pod.pod_type = pod.pod_type.or(ev.pod_type);
        pod.from.get_or_insert(t);
        // A new event of the pod ends the refusal before it.
        if let Some((since, why)) = pod.blocked_since.take() {
            pod.blocked.push(Span {
                from_ms: since,
                to_ms: t,
                note: why,
            });
        }
        match ev.event {
            EventKind::PodBlocked | EventKind::PodQueued => {
                pod.blocked_since = Some((t, ev.message.clone()))
            }
            EventKind::PodGone => pod.gone = Some(t),
            EventKind::StageEscalated => pod.marks.push(mark(MarkKind::Escalated)),
            _ => {}
        }
    }
    // A refusal still open lasts until its stage ended, or to the end of
    // what is known.
    for pod in pods.values_mut() {
        if let Some((since, why)) = pod.blocked_since.take() {
            let to = stages.get(&pod.stage).and_then(|s| s.to).unwrap_or(end_ms);
            pod.blocked.push(Span {
                from_ms: since,
                to_ms: to.max(since),
                note: why,
            });
        }
    }
    let rows = if by == Rows::Auto && pods.len() <= MAX_POD_ROWS && !pods.is_empty() {
        pod_rows(&stages, pods)
    } else {
        stage_rows(stages, pods)
    };
    Some(Chart {
        node: node.to_string(),
        outcome,
        end_ms,
        deadline_ms,
        rows,
        not_kept,
    })
}

/// A row per pod, in stage order; a stage's stash and time-out are on its
/// pods' rows.
fn pod_rows(
    stages: &BTreeMap<usize, StageTrack>,
    pods: BTreeMap<(usize, String), PodTrack>,
) -> Vec<Row> {
    pods.into_iter()
        .map(|((n, name), mut pod)| {
            let stage = stages.get(&n);
            // A static pod's bar starts when its stage does: the stash is
            // what makes it go.
            let from = stage
                .and_then(|s| s.from)
                .filter(|_| pod.pod_type == Some(PodType::Static))
                .or(pod.from)
                .unwrap_or(0);
            // A bar never ends before it starts (a stage started again
            // after its pod was gone).
            let from = pod.gone.map_or(from, |gone| from.min(gone));
            if let Some(s) = stage {
                pod.marks.extend(s.marks.iter().cloned());
            }
            let took = pod.gone.map(|gone| seconds(gone.saturating_sub(from)));
            let note = match &took {
                Some(took) => format!("{name}: gone after {took}"),
                None => format!("{name}: not gone"),
            };
            Row {
                label: format!("{n} · {name}"),
                stage: n,
                pod_type: pod.pod_type,
                from_ms: from,
                to_ms: pod.gone,
                blocked: pod.blocked,
                marks: pod.marks,
                note,
                caption: took.unwrap_or_default(),
            }
        })
        .collect()
}

/// A row per stage: its bar from start to completion, its pods' refusals
/// and escalations on it.
fn stage_rows(
    stages: BTreeMap<usize, StageTrack>,
    pods: BTreeMap<(usize, String), PodTrack>,
) -> Vec<Row> {
    let mut rows: BTreeMap<usize, Row> = stages
        .into_iter()
        .map(|(n, s)| {
            let from = s.from.unwrap_or(0);
            let label = if s.label.is_empty() {
                format!("stage {n}")
            } else {
                format!("{n} · {}", s.label)
            };
            let row = Row {
                label,
                stage: n,
                pod_type: s.pod_type,
                from_ms: from,
                to_ms: s.to,
                blocked: Vec::new(),
                marks: s.marks,
                note: String::new(),
                caption: String::new(),
            };
            (n, row)
        })
        .collect();
    let mut counts: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    for ((n, _), pod) in pods {
        let c = counts.entry(n).or_default();
        c.0 += 1;
        c.1 += usize::from(pod.gone.is_some());
        if let Some(row) = rows.get_mut(&n) {
            row.blocked.extend(pod.blocked);
            row.marks.extend(pod.marks);
        }
    }
    for row in rows.values_mut() {
        let (pods, gone) = counts.get(&row.stage).copied().unwrap_or_default();
        let took = row.to_ms.map(|to| seconds(to.saturating_sub(row.from_ms)));
        row.note = format!(
            "{}: {gone} of {pods} pods gone{}",
            row.label,
            took.as_deref()
                .map(|t| format!(" in {t}"))
                .unwrap_or_default()
        );
        row.caption = match took {
            Some(t) => format!("{gone}/{pods} pods · {t}"),
            None => format!("{gone}/{pods} pods"),
        };
    }
    rows.into_values().collect()
}

/// A StageStarted message without its " (12 pods)": the row's caption
/// counts the pods.
fn without_count(message: &str) -> &str {
    match message.rsplit_once(" (") {
        Some((label, count))
            if count.ends_with(" pods)")
                && count
                    .trim_end_matches(" pods)")
                    .chars()
                    .all(|c| c.is_ascii_digit()) =>
        {
            label
        }
        _ => message,
    }
}

/// Milliseconds as seconds to read ("1.2 s").
pub fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
