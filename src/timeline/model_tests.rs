//! The chart of hand-written drains: what rows, bars, refusals and marks a
//! reader gets.

use super::*;

/// An event at `t` ms: (kind, stage, pod, type, message).
fn ev(
    t: u64,
    event: EventKind,
    stage: Option<usize>,
    pod: Option<&str>,
    pod_type: Option<PodType>,
    message: &str,
) -> DrainEvent {
    DrainEvent {
        t_ms: t,
        event,
        node: "node-a".into(),
        namespace: pod.map(|_| "shop".into()),
        pod: pod.map(String::from),
        pod_type,
        priority: None,
        stage,
        message: message.into(),
        owner: None,
    }
}

use EventKind::*;
const D: Option<PodType> = Some(PodType::Default);
const S: Option<PodType> = Some(PodType::Static);

/// A small drain: web-1 goes at once, web-2 is refused by the web budget
/// for 2 s, then the static stage stashes etcd.
fn small() -> Vec<DrainEvent> {
    vec![
        ev(5_000, DrainStarted, None, None, None, ""),
        ev(5_010, StageStarted, Some(1), None, D, "Default ≤ 0"),
        ev(5_020, PodEvicting, Some(1), Some("web-1"), D, ""),
        ev(5_030, PodEvicting, Some(1), Some("web-2"), D, ""),
        ev(
            5_040,
            PodBlocked,
            Some(1),
            Some("web-2"),
            D,
            "budget web allows 0",
        ),
        ev(5_500, PodGone, Some(1), Some("web-1"), D, ""),
        ev(7_040, PodEvicted, Some(1), Some("web-2"), D, ""),
        ev(7_500, PodGone, Some(1), Some("web-2"), D, ""),
        ev(7_510, StageCompleted, Some(1), None, D, ""),
        ev(
            7_520,
            StageStarted,
            Some(2),
            None,
            S,
            "Static ≤ 0 (system-node-critical)",
        ),
        ev(7_530, StaticPodsStashed, Some(2), None, S, "etcd.yaml"),
        ev(8_000, PodGone, Some(2), Some("etcd"), S, ""),
        ev(8_010, StageCompleted, Some(2), None, S, ""),
        ev(8_020, DrainCompleted, None, None, None, ""),
    ]
}

#[test]
fn without_a_drain_start_there_is_nothing_to_draw() {
    assert_eq!(build("node-a", &small()[1..], 0, None, Rows::Auto), None);
}

/// A row as a reader sees it: (label, from, to, refused stretches, marks).
type RowView<'a> = (&'a str, u64, Option<u64>, usize, Vec<MarkKind>);

#[test]
fn a_small_drain_gets_a_row_per_pod_in_stage_order() {
    let c = build("node-a", &small(), 0, Some(60_000), Rows::Auto).unwrap();
    assert_eq!(c.outcome, Outcome::Completed);
    assert_eq!(c.end_ms, 3_020);
    assert_eq!(c.deadline_ms, Some(60_000));
    let rows: Vec<RowView> = c
        .rows
        .iter()
        .map(|r| {
            (
                r.label.as_str(),
                r.from_ms,
                r.to_ms,
                r.blocked.len(),
                r.marks.iter().map(|m| m.kind).collect(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("1 · shop/web-1", 20, Some(500), 0, vec![]),
            ("1 · shop/web-2", 30, Some(2_500), 1, vec![]),
            // A static pod's bar starts with its stage.
            (
                "2 · shop/etcd",
                2_520,
                Some(3_000),
                0,
                vec![MarkKind::Stashed]
            ),
        ]
    );
    let refused = &c.rows[1].blocked[0];
    assert_eq!(
        (refused.from_ms, refused.to_ms, refused.note.as_str()),
        (40, 2_040, "budget web allows 0")
    );
}

#[test]
fn a_big_drain_gets_a_row_per_stage_with_its_pods_refusals_and_escalations() {
    let mut events = vec![
        ev(0, DrainStarted, None, None, None, ""),
        ev(10, StageStarted, Some(1), None, D, "Default ≤ 0 (32 pods)"),
    ];
    for i in 0..=MAX_POD_ROWS {
        let pod = format!("web-{i}");
        events.push(ev(20, PodEvicting, Some(1), Some(&pod), D, ""));
        events.push(ev(900, PodGone, Some(1), Some(&pod), D, ""));
    }
    events.extend([
        ev(
            30,
            PodBlocked,
            Some(1),
            Some("db-0"),
            D,
            "budget db allows 0",
        ),
        ev(5_000, StageEscalated, Some(1), Some("db-0"), D, "deleting"),
        ev(
            5_000,
            StageTimedOut,
            Some(1),
            None,
            D,
            "1 pods still present",
        ),
        ev(6_000, DrainFailed, None, None, None, "out of time"),
    ]);
    let c = build("node-a", &events, 7, Some(5_000), Rows::Auto).unwrap();
    assert_eq!(c.outcome, Outcome::Failed);
    assert_eq!(c.not_kept, 7);
    assert_eq!(c.rows.len(), 1, "{:?}", c.rows);
    let row = &c.rows[0];
    assert_eq!(row.label, "1 · Default ≤ 0");
    assert_eq!((row.from_ms, row.to_ms), (10, Some(5_000)));
    // The refusal ends with the escalation, the pod's next event.
    assert_eq!(
        row.blocked
            .iter()
            .map(|b| (b.from_ms, b.to_ms))
            .collect::<Vec<_>>(),
        vec![(30, 5_000)]
    );
    let mut marks: Vec<MarkKind> = row.marks.iter().map(|m| m.kind).collect();
    marks.sort_by_key(|m| format!("{m:?}"));
    assert_eq!(marks, vec![MarkKind::Escalated, MarkKind::TimedOut]);
    assert!(row.note.contains("31 of 32 pods gone"), "{}", row.note);
}

#[test]
fn a_running_drain_leaves_unfinished_bars_and_open_refusals_open_to_the_last_event() {
    let c = build("node-a", &small()[..6], 0, None, Rows::Auto).unwrap();
    assert_eq!(c.outcome, Outcome::Running);
    let web2 = &c.rows[1];
    assert_eq!(web2.to_ms, None);
    assert_eq!(
        web2.blocked.iter().map(|b| b.to_ms).collect::<Vec<_>>(),
        vec![500]
    );
}

#[test]
fn only_the_last_drain_is_drawn() {
    let mut events = small();
    events.extend([
        ev(20_000, DrainStarted, None, None, None, ""),
        ev(20_100, StageStarted, Some(1), None, D, "Default ≤ 0"),
    ]);
    let c = build("node-a", &events, 0, None, Rows::Auto).unwrap();
    assert_eq!(
        (c.outcome, c.end_ms, c.rows.len()),
        (Outcome::Running, 100, 1)
    );
    assert_eq!(c.rows[0].label, "1 · Default ≤ 0");
}

#[test]
fn the_svg_names_every_row_the_refusal_and_the_total() {
    let c = build("node-a", &small(), 0, Some(6_000), Rows::Auto).unwrap();
    let svg = crate::timeline::svg::render(&c);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    for want in [
        "node-a drained in 3.0 s; deadline at 6.0 s",
        "1 · shop/web-1",
        "2 · shop/etcd",
        "refused for 2.0 s: budget web allows 0",
        "static pods stashed at 2.5 s: etcd.yaml",
        "deadline",
    ] {
        assert!(svg.contains(want), "{want} missing:\n{svg}");
    }
    let html = crate::timeline::svg::page(&svg);
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains(&svg));
}

#[test]
fn a_deadline_is_drawn_to_scale_only_when_near_the_drain() {
    // (deadline, dashed line drawn, named at the right edge)
    for (deadline, line, edge) in [
        (Some(5_000), true, false),
        (Some(9_000), true, false),
        (Some(600_000), false, true),
        (None, false, false),
    ] {
        let c = build("node-a", &small(), 0, deadline, Rows::Auto).unwrap();
        let svg = crate::timeline::svg::render(&c);
        assert_eq!(
            (
                svg.contains("stroke-dasharray"),
                svg.contains("deadline at 600.0 s →")
            ),
            (line, edge),
            "deadline {deadline:?}"
        );
    }
}

#[test]
fn a_stage_label_loses_its_pod_count_only() {
    for (message, label) in [
        ("Default ≤ 0 (12 pods)", "Default ≤ 0"),
        (
            "Static ≤ 2000001000 (system-node-critical) (2 pods)",
            "Static ≤ 2000001000 (system-node-critical)",
        ),
        (
            "Static ≤ 0 (system-node-critical)",
            "Static ≤ 0 (system-node-critical)",
        ),
        ("Default ≤ 0 (many pods)", "Default ≤ 0 (many pods)"),
        ("", ""),
    ] {
        assert_eq!(without_count(message), label);
    }
}
