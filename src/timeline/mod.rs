//! A drain you can see: the current or last drain's events, kept by the
//! agent ([`EventLog`]), drawn as a picture (`GET /v1/timeline.svg`,
//! `maintd timeline`, the demo's `timeline.svg`). Building the picture is
//! plain Rust over plain data: [`model`] turns events and a deadline into
//! rows, spans and marks; [`svg`] writes them as SVG.

use std::sync::{Arc, Mutex};

use crate::drain::progress::{DrainEvent, EventKind};

pub mod cluster;
pub mod model;
pub mod svg;

pub use model::{Chart, build};

/// The most events kept of one drain: about 2 MB at worst; a drain of a
/// node's few hundred pods sends a few thousand.
pub const MAX_EVENTS: usize = 10_000;

/// Why a timeline could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    #[error(
        "no drain to draw: the agent has not drained this node since it started (`maintd status` says where it stands)"
    )]
    NoDrain,
    #[error(
        "no drain to draw: the cluster holds no Event of maintd's agent draining node {node} (Events last an hour by default)"
    )]
    NoDrainEvents { node: String },
    #[error("reading the Events of node {node}: {why}")]
    Events { node: String, why: String },
    #[error("writing the timeline to {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// The events of the current or last drain, from its DrainStarted to its
/// end (completed, failed or cancelled). Nothing is kept before the first
/// drain or between drains, so an idle agent does not grow; a new drain
/// replaces the last one's events.
#[derive(Clone, Default)]
pub struct EventLog {
    kept: Arc<Mutex<Recorded>>,
}

/// What the log holds now.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Recorded {
    pub events: Vec<DrainEvent>,
    /// Events of this drain beyond [`MAX_EVENTS`], not kept.
    pub not_kept: usize,
    /// When the drain started, by the wall clock (to place a deadline).
    pub started_at: Option<jiff::Timestamp>,
    /// The drain has ended: later events are not its own.
    #[serde(skip)]
    ended: bool,
}

impl EventLog {
    /// Keeps `ev` if it belongs to the current drain.
    pub fn record(&self, ev: &DrainEvent) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if ev.event == EventKind::DrainStarted {
            *kept = Recorded {
                started_at: Some(jiff::Timestamp::now()),
                ..Recorded::default()
            };
        } else if kept.started_at.is_none() || kept.ended {
            return;
        }
        // The end is kept whatever the cap: it says how the drain ended.
        if kept.events.len() >= MAX_EVENTS && !model::is_end(ev.event) {
            kept.not_kept += 1;
        } else {
            kept.events.push(ev.clone());
        }
        kept.ended = model::is_end(ev.event);
    }

    /// A copy of what is kept.
    pub fn recorded(&self) -> Recorded {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The chart of what `log` holds; `deadline` is the status's (RFC 3339),
/// when the drain has one.
pub fn chart(
    node: &str,
    recorded: &Recorded,
    deadline: Option<&str>,
) -> Result<Chart, TimelineError> {
    let deadline_ms = match (recorded.started_at, deadline) {
        (Some(start), Some(d)) => deadline_after(start, d),
        _ => None,
    };
    build(
        node,
        &recorded.events,
        recorded.not_kept,
        deadline_ms,
        model::Rows::Auto,
    )
    .ok_or(TimelineError::NoDrain)
}

/// The chart of `node`'s last drain from the cluster's Events (a row per
/// stage; no deadline: the Events do not carry it).
pub async fn chart_from_cluster(client: &kube::Client, node: &str) -> Result<Chart, TimelineError> {
    let items = cluster::node_events(client, node).await?;
    let events = cluster::drain_events(node, &items);
    build(node, &events, 0, None, model::Rows::Stages).ok_or_else(|| TimelineError::NoDrainEvents {
        node: node.to_string(),
    })
}

/// Writes the current or last drain of `progress` as SVG to `path`.
pub fn write_svg(
    progress: &crate::drain::progress::Progress,
    path: &std::path::Path,
) -> Result<(), TimelineError> {
    let status = progress.status();
    let chart = chart(
        &progress.node,
        &progress.recorded(),
        status.deadline.as_deref(),
    )?;
    std::fs::write(path, svg::render(&chart)).map_err(|source| TimelineError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Milliseconds from `start` to the RFC 3339 `deadline`; None when it does
/// not parse (the status writes it, so it does).
fn deadline_after(start: jiff::Timestamp, deadline: &str) -> Option<i64> {
    let d: jiff::Timestamp = deadline.parse().ok()?;
    i64::try_from(d.duration_since(start).as_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::progress::Progress;

    #[test]
    fn the_log_keeps_one_drain_and_nothing_while_idle() {
        let p = Progress::new("node-a");
        let log = EventLog::default();
        // Before any drain: nothing kept.
        log.record(&p.event(EventKind::Warning));
        assert!(log.recorded().events.is_empty());
        log.record(&p.event(EventKind::DrainStarted));
        log.record(&p.event(EventKind::StageStarted));
        log.record(&p.event(EventKind::DrainCompleted));
        // The undo is not the drain's.
        log.record(&p.event(EventKind::UndoStarted));
        assert_eq!(log.recorded().events.len(), 3);
        log.record(&p.event(EventKind::DrainStarted));
        assert_eq!(log.recorded().events.len(), 1);
    }

    #[test]
    fn the_log_counts_what_it_does_not_keep() {
        let p = Progress::new("node-a");
        let log = EventLog::default();
        log.record(&p.event(EventKind::DrainStarted));
        for _ in 0..MAX_EVENTS + 5 {
            log.record(&p.event(EventKind::PodBlocked));
        }
        let r = log.recorded();
        assert_eq!((r.events.len(), r.not_kept), (MAX_EVENTS, 6));
    }

    #[test]
    fn a_deadline_is_placed_from_the_drain_start() {
        let start: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(deadline_after(start, "2026-01-01T00:01:30Z"), Some(90_000));
        assert_eq!(deadline_after(start, "not a time"), None);
    }
}
