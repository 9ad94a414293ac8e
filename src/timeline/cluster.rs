//! The cluster's view of a node's drain: the Events (events.k8s.io/v1)
//! maintd's agent recorded on the Node, read back as drain events for
//! `maintd timeline --node`. They say less than the agent's own log: when
//! each stage started, which evictions a budget refused, the stash, the
//! time-outs and how the drain ended, at the API server's clock; so the
//! picture is one row per stage, each ending when the next began.

use http::Request;
use serde_json::Value;

use super::TimelineError;
use crate::drain::progress::{DrainEvent, EventKind};

/// The agent's `reportingController`.
const CONTROLLER: &str = "maintd.io/agent";
/// Events read per request, and pages at most.
const PAGE: usize = 500;
const MAX_PAGES: usize = 20;

/// The maintd Events on `node`, oldest first (bounded: at most
/// [`PAGE`] × [`MAX_PAGES`]).
pub async fn node_events(client: &kube::Client, node: &str) -> Result<Vec<Value>, TimelineError> {
    // It goes into the query as it is.
    if node.is_empty()
        || !node
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    {
        return Err(TimelineError::Events {
            node: node.to_string(),
            why: "not a node name (lower-case letters, digits, '-' and '.')".into(),
        });
    }
    let mut items = Vec::new();
    let mut cont = String::new();
    for _ in 0..MAX_PAGES {
        let url = format!(
            "/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector=regarding.kind%3DNode%2Cregarding.name%3D{node}&limit={PAGE}{cont}"
        );
        let req = Request::get(url)
            .body(Vec::new())
            .map_err(|e| TimelineError::Events {
                node: node.to_string(),
                why: e.to_string(),
            })?;
        let list: Value = client
            .request(req)
            .await
            .map_err(|e| TimelineError::Events {
                node: node.to_string(),
                why: crate::preflight::describe(&e, "the API server"),
            })?;
        items.extend(
            list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["reportingController"] == CONTROLLER)
                .cloned(),
        );
        match list["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => {
                cont = format!("&continue={}", crate::outbound::url::encode(c))
            }
            _ => break,
        }
    }
    Ok(items)
}

/// The drain events `items` (Events as the API serves them) tell, in time
/// order, with times in ms since the first. A stage ends when the next one
/// (or the drain) does; a refused pod belongs to the stage running then.
pub fn drain_events(node: &str, items: &[Value]) -> Vec<DrainEvent> {
    let mut timed: Vec<(jiff::Timestamp, &Value)> = items
        .iter()
        .filter_map(|e| {
            let t = e["eventTime"]
                .as_str()
                .or(e["deprecatedFirstTimestamp"].as_str())?;
            Some((t.parse().ok()?, e))
        })
        .collect();
    timed.sort_by_key(|(t, _)| *t);
    let Some((first, _)) = timed.first().copied() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut stage: Option<usize> = None;
    for (t, e) in timed {
        let t_ms = u64::try_from(t.duration_since(first).as_millis()).unwrap_or(0);
        let note = e["note"].as_str().unwrap_or_default();
        let event = |kind: EventKind, stage: Option<usize>, message: &str| DrainEvent {
            t_ms,
            event: kind,
            node: node.to_string(),
            namespace: None,
            pod: None,
            pod_type: None,
            priority: None,
            stage,
            message: message.to_string(),
            owner: None,
        };
        let end_stage = |out: &mut Vec<DrainEvent>, stage: Option<usize>| {
            if stage.is_some() {
                out.push(event(EventKind::StageCompleted, stage, ""));
            }
        };
        match e["reason"].as_str().unwrap_or_default() {
            "DrainStarted" => {
                stage = None;
                out.push(event(EventKind::DrainStarted, None, note));
            }
            "DrainStageStarted" => {
                end_stage(&mut out, stage);
                // "stage 3: DaemonSet ≤ 1000 (1 pods)"
                let (n, label) = note
                    .strip_prefix("stage ")
                    .and_then(|r| r.split_once(": "))
                    .and_then(|(n, l)| Some((n.parse::<usize>().ok()?, l)))
                    .unwrap_or((stage.map_or(1, |s| s.saturating_add(1)), note));
                stage = Some(n);
                out.push(event(EventKind::StageStarted, stage, label));
            }
            "EvictionBlocked" => {
                // "eviction of shop/web-1 refused: <why>", or a budget
                // holding the stage's pods back: "evictions wait for the
                // disruption budget shop/web: <why>"
                let Some((pod, why)) = note
                    .strip_prefix("eviction of ")
                    .and_then(|r| r.split_once(" refused: "))
                    .or_else(|| {
                        note.strip_prefix("evictions wait for the disruption budget ")?
                            .split_once(": ")
                    })
                else {
                    continue;
                };
                let mut ev = event(EventKind::PodBlocked, stage, why);
                if let Some((ns, name)) = pod.split_once('/') {
                    ev.namespace = Some(ns.to_string());
                    ev.pod = Some(name.to_string());
                }
                out.push(ev);
            }
            // A stage of static pods is said by its stash:
            // "stage 9: Static ≤ 2000001000 (1 pods): moved ..."
            "StaticPodsStashed" => {
                let started = note
                    .strip_prefix("stage ")
                    .and_then(|r| r.split_once(": "))
                    .and_then(|(n, rest)| Some((n.parse::<usize>().ok()?, rest)))
                    .and_then(|(n, rest)| {
                        let (label, what) = rest.split_once(" pods): ")?;
                        Some((n, format!("{label} pods)"), what))
                    });
                match started {
                    Some((n, label, what)) if stage != Some(n) => {
                        end_stage(&mut out, stage);
                        stage = Some(n);
                        out.push(event(EventKind::StageStarted, stage, &label));
                        out.push(event(EventKind::StaticPodsStashed, stage, what));
                    }
                    _ => out.push(event(EventKind::StaticPodsStashed, stage, note)),
                }
            }
            "DrainStageTimedOut" => out.push(event(EventKind::StageTimedOut, stage, note)),
            reason @ ("Drained" | "DrainFailed") => {
                end_stage(&mut out, stage.take());
                let kind = if reason == "Drained" {
                    EventKind::DrainCompleted
                } else {
                    EventKind::DrainFailed
                };
                out.push(event(kind, None, note));
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(time: &str, reason: &str, note: &str) -> Value {
        json!({"eventTime": time, "reason": reason, "note": note, "reportingController": CONTROLLER})
    }

    /// (t_ms, kind, stage, pod, message)
    type Seen = (u64, EventKind, Option<usize>, Option<String>, String);

    #[test]
    fn node_events_become_a_drain_by_stage() {
        // Out of order, as a list may come.
        let items = vec![
            ev(
                "2026-01-01T00:00:03.000000Z",
                "DrainStageStarted",
                "stage 2: DaemonSet ≤ 0 (1 pods)",
            ),
            ev(
                "2026-01-01T00:00:00.000000Z",
                "DrainStarted",
                "maintd started draining the node: taint",
            ),
            ev(
                "2026-01-01T00:00:00.100000Z",
                "DrainStageStarted",
                "stage 1: Default ≤ 0 (3 pods)",
            ),
            ev(
                "2026-01-01T00:00:00.200000Z",
                "EvictionBlocked",
                "eviction of shop/web-1 refused: budget web allows 0",
            ),
            ev(
                "2026-01-01T00:00:04.000000Z",
                "Drained",
                "maintd drained the node: 4 pods",
            ),
            ev(
                "2026-01-01T00:00:05.000000Z",
                "Undrained",
                "maintenance over",
            ),
            json!({"reason": "DrainStarted", "note": "no time: left out"}),
        ];
        let got: Vec<Seen> = drain_events("node-a", &items)
            .into_iter()
            .map(|e| (e.t_ms, e.event, e.stage, e.pod, e.message))
            .collect();
        use EventKind::*;
        let want = vec![
            (
                0,
                DrainStarted,
                None,
                None,
                "maintd started draining the node: taint".to_string(),
            ),
            (
                100,
                StageStarted,
                Some(1),
                None,
                "Default ≤ 0 (3 pods)".into(),
            ),
            (
                200,
                PodBlocked,
                Some(1),
                Some("web-1".into()),
                "budget web allows 0".into(),
            ),
            (3_000, StageCompleted, Some(1), None, String::new()),
            (
                3_000,
                StageStarted,
                Some(2),
                None,
                "DaemonSet ≤ 0 (1 pods)".into(),
            ),
            (4_000, StageCompleted, Some(2), None, String::new()),
            (
                4_000,
                DrainCompleted,
                None,
                None,
                "maintd drained the node: 4 pods".into(),
            ),
        ];
        assert_eq!(got, want);
        let chart = crate::timeline::build(
            "node-a",
            &drain_events("node-a", &items),
            0,
            None,
            crate::timeline::model::Rows::Stages,
        )
        .unwrap();
        let rows: Vec<(&str, u64, Option<u64>, usize)> = chart
            .rows
            .iter()
            .map(|r| (r.label.as_str(), r.from_ms, r.to_ms, r.blocked.len()))
            .collect();
        assert_eq!(
            rows,
            vec![
                ("1 · Default ≤ 0", 100, Some(3_000), 1),
                ("2 · DaemonSet ≤ 0", 3_000, Some(4_000), 0)
            ]
        );
        // The refusal lasts until its stage ended.
        assert_eq!(chart.rows[0].blocked[0].to_ms, 3_000);
    }

    /// Events that follow a drain's end (a stage said started again, years
    /// later) are not drawn with it: every bar ends after it starts. Found
    /// by the `timeline` fuzz target.
    #[test]
    fn what_follows_the_end_of_a_drain_is_not_drawn_with_it() {
        let items = vec![
            ev("2026-01-01T00:00:00Z", "DrainStarted", "draining"),
            ev(
                "2026-01-01T00:00:01Z",
                "DrainStageStarted",
                "stage 1: Default ≤ 0 (3 pods)",
            ),
            ev(
                "2026-01-01T00:00:05Z",
                "DrainStageStarted",
                "stage 2: DaemonSet ≤ 0 (1 pods)",
            ),
            ev("2026-01-01T00:00:09Z", "Drained", "drained in 9 s"),
            ev(
                "2036-01-01T00:00:05Z",
                "DrainStageStarted",
                "stage 2: DaemonSet ≤ 0 (1 pods)",
            ),
        ];
        let events = drain_events("node-a", &items);
        let chart = crate::timeline::build(
            "node-a",
            &events,
            0,
            None,
            super::super::model::Rows::Stages,
        )
        .expect("a drain");
        let bars: Vec<(u64, Option<u64>)> =
            chart.rows.iter().map(|r| (r.from_ms, r.to_ms)).collect();
        assert_eq!(bars, vec![(1_000, Some(5_000)), (5_000, Some(9_000))]);
        assert_eq!(chart.end_ms, 9_000);
    }

    /// A stage's number is read from its Event's note, which anyone who
    /// can write Events sets: the largest number followed by a note that
    /// says none is taken as the last stage again, not one past it.
    #[test]
    fn a_stage_number_at_its_largest_is_not_counted_past() {
        let items = vec![
            ev("2026-01-01T00:00:00Z", "DrainStarted", "draining"),
            ev(
                "2026-01-01T00:00:01Z",
                "DrainStageStarted",
                &format!("stage {}: Default ≤ 0 (3 pods)", usize::MAX),
            ),
            ev("2026-01-01T00:00:02Z", "DrainStageStarted", "a stage"),
        ];
        let stages: Vec<Option<usize>> = drain_events("node-a", &items)
            .iter()
            .filter(|e| e.event == EventKind::StageStarted)
            .map(|e| e.stage)
            .collect();
        assert_eq!(stages, vec![Some(usize::MAX), Some(usize::MAX)]);
    }

    #[test]
    fn no_events_no_drain() {
        assert!(drain_events("node-a", &[]).is_empty());
    }

    #[test]
    fn a_continue_token_is_escaped() {
        assert_eq!(crate::outbound::url::encode("eyJ2+/=a"), "eyJ2%2B%2F%3Da");
    }
}
