//! What receivers are told, and when, without a receiver.

use std::time::{Duration, Instant};

use super::notice::{BLOCKED_BURST, BLOCKED_REFILL};
use super::*;
use crate::drain::progress::{Blocker, DrainEvent, DrainStatus, EventKind};

fn event(kind: EventKind, pod: Option<(&str, &str)>, message: &str) -> DrainEvent {
    DrainEvent {
        t_ms: 0,
        event: kind,
        node: "node-a".into(),
        namespace: pod.map(|p| p.0.to_string()),
        pod: pod.map(|p| p.1.to_string()),
        pod_type: None,
        priority: None,
        stage: None,
        message: message.into(),
        owner: None,
    }
}

/// A status whose blockers are these pods (namespace, name).
fn blocked(pods: &[(&str, &str)]) -> DrainStatus {
    DrainStatus {
        triggers: vec!["taint maintd.io/drain=kernel:NoSchedule".into()],
        pods_total: 3,
        pods_remaining: 1,
        blockers: pods
            .iter()
            .map(|(ns, pod)| Blocker {
                namespace: ns.to_string(),
                pod: pod.to_string(),
                reason: "refused".into(),
            })
            .collect(),
        ..Default::default()
    }
}

fn status() -> DrainStatus {
    blocked(&[
        ("shop", "web-1"),
        ("shop", "web-2"),
        ("bank", "web-1"),
        ("shop", "vm"),
    ])
}

fn budget_says(budget: &str) -> String {
    format!("The disruption budget {budget} needs 2 healthy pods and has 2 currently")
}

#[test]
fn a_drain_tells_started_blocked_drained_undone_once_each() {
    let mut n = Noticer::new("node-a", Duration::ZERO);
    let now = Instant::now();
    let st = status();
    let script = [
        (
            event(EventKind::DrainStarted, None, ""),
            Some(NoticeKind::Started),
        ),
        (event(EventKind::StageStarted, None, "x"), None),
        (
            event(
                EventKind::PodBlocked,
                Some(("shop", "web-1")),
                &budget_says("web"),
            ),
            Some(NoticeKind::Blocked),
        ),
        // Another pod of the same budget is the same blocker.
        (
            event(
                EventKind::PodBlocked,
                Some(("shop", "web-2")),
                &budget_says("web"),
            ),
            None,
        ),
        // A budget of the same name elsewhere is another.
        (
            event(
                EventKind::PodBlocked,
                Some(("bank", "web-1")),
                &budget_says("web"),
            ),
            Some(NoticeKind::Blocked),
        ),
        // A refusal naming no budget is the pod's own.
        (
            event(
                EventKind::PodBlocked,
                Some(("shop", "vm")),
                "admission webhook denied",
            ),
            Some(NoticeKind::Blocked),
        ),
        // A drain resumed with a new plan is the same drain.
        (event(EventKind::DrainStarted, None, "resumed"), None),
        (
            event(EventKind::DrainCompleted, None, "3 pods drained"),
            Some(NoticeKind::Drained),
        ),
        (
            event(EventKind::DrainCompleted, None, "3 pods drained"),
            None,
        ),
        (
            event(EventKind::UndoCompleted, None, ""),
            Some(NoticeKind::Undone),
        ),
        // The next drain is a new one, with its blockers told again.
        (
            event(EventKind::DrainStarted, None, ""),
            Some(NoticeKind::Started),
        ),
        (
            event(
                EventKind::PodBlocked,
                Some(("shop", "web-1")),
                &budget_says("web"),
            ),
            Some(NoticeKind::Blocked),
        ),
        (
            event(EventKind::DrainFailed, None, "1 pods left"),
            Some(NoticeKind::Failed),
        ),
        (
            event(EventKind::DrainCompleted, None, "3 pods drained"),
            Some(NoticeKind::Drained),
        ),
    ];
    for (i, (ev, want)) in script.iter().enumerate() {
        let got = n.notice(ev, &st, now).map(|n| n.kind);
        assert_eq!(got, *want, "step {i}: {:?} {}", ev.event, ev.message);
    }
}

#[test]
fn what_a_notice_says() {
    let mut n = Noticer::new("node-a", Duration::ZERO);
    let now = Instant::now();
    let started = n
        .notice(&event(EventKind::DrainStarted, None, ""), &status(), now)
        .unwrap();
    assert_eq!(started.node, "node-a");
    assert!(
        started
            .text
            .contains("started draining node node-a for taint maintd.io/drain"),
        "{}",
        started.text
    );
    assert_eq!(started.triggers, status().triggers);
    let blocked = n
        .notice(
            &event(
                EventKind::PodBlocked,
                Some(("shop", "web-1")),
                &budget_says("web"),
            ),
            &status(),
            now,
        )
        .unwrap();
    assert_eq!(blocked.pod.as_deref(), Some("shop/web-1"));
    assert_eq!(blocked.reason, Some(budget_says("web")));
    assert!(
        blocked
            .text
            .contains("shop/web-1 cannot be evicted: The disruption budget web")
    );
    let doc = body(&blocked, false);
    assert_eq!(doc["kind"], "blocked");
    assert_eq!(doc["source"], "maintd");
    assert_eq!(doc["pods_remaining"], 1);
    assert!(doc.get("blocked_not_notified").is_none());
    let slack = body(&blocked, true);
    assert_eq!(
        slack.as_object().unwrap().len(),
        1,
        "Slack gets its text: {slack}"
    );
    assert!(
        slack["text"]
            .as_str()
            .unwrap()
            .starts_with("*Drain blocked*: draining node node-a")
    );
}

#[test]
fn blocked_notices_are_rate_limited_and_the_rest_counted() {
    let mut n = Noticer::new("node-a", Duration::ZERO);
    let t0 = Instant::now();
    let names: Vec<String> = (0..200).map(|i| format!("p{i}")).collect();
    let all: Vec<(&str, &str)> = names.iter().map(|p| ("shop", p.as_str())).collect();
    let st = blocked(&all);
    n.notice(&event(EventKind::DrainStarted, None, ""), &st, t0);
    let mut blocked = |i: usize, at: Instant| {
        let pod = format!("p{i}");
        let ev = event(
            EventKind::PodBlocked,
            Some(("shop", &pod)),
            &budget_says(&format!("b{i}")),
        );
        n.notice(&ev, &st, at)
    };
    let sent = (0..20).filter(|i| blocked(*i, t0).is_some()).count();
    assert_eq!(sent, BLOCKED_BURST as usize);
    // One allowance comes back after the refill time; the notice says how
    // many were not told.
    let later = t0 + BLOCKED_REFILL + Duration::from_millis(1);
    let next = blocked(100, later).unwrap();
    assert_eq!(next.blocked_not_notified, 15);
    assert!(blocked(101, later).is_none());
    assert!(
        body(&next, true)["text"]
            .as_str()
            .unwrap()
            .contains("15 more blockers not notified")
    );
    // Outcomes are never rate limited.
    let failed = event(EventKind::DrainFailed, None, "x");
    assert!(n.notice(&failed, &st, later).is_some());
}

#[test]
fn notification_urls_are_checked_and_shown_without_their_secret_path() {
    let hook = Webhook::parse("https://hooks.slack.com/services/T0/B0/s3cret").unwrap();
    assert!(hook.slack);
    assert_eq!(hook.shown, "https://hooks.slack.com/…");
    assert_eq!(hook.uri, "https://hooks.slack.com/services/T0/B0/s3cret");
    let hook = Webhook::parse(" http://ops:pw@receiver.example:8080/hook/?token=a%2Cb ").unwrap();
    assert!(!hook.slack);
    assert_eq!(hook.uri, "http://receiver.example:8080/hook/?token=a%2Cb");
    assert!(hook.target.authorization.is_some());
    assert!(!hook.shown.contains("pw") && !hook.shown.contains("token"));
    for bad in [
        "",
        "receiver:80/hook",
        "ftp://h/x",
        "http://",
        &format!("http://h/{}", "a".repeat(3000)),
    ] {
        let err = Webhook::parse(bad)
            .err()
            .unwrap_or_else(|| panic!("{bad:?} was taken"));
        assert!(!err.contains("pw"), "{err}");
    }
    let err = Webhook::parse("ftp://ops:pw@h/x").err().unwrap();
    assert!(
        err.contains("http:// or https://") && !err.contains("pw"),
        "{err}"
    );
}

#[test]
fn a_pod_is_notified_blocked_only_if_still_refused_after_the_wait() {
    let wait = Duration::from_secs(60);
    let mut n = Noticer::new("node-a", wait);
    let t0 = Instant::now();
    let st = blocked(&[("shop", "web-1"), ("shop", "db-0")]);
    n.notice(&event(EventKind::DrainStarted, None, ""), &st, t0);
    assert_eq!(n.next_due(), None, "no timer while no pod waits");
    let web = event(
        EventKind::PodBlocked,
        Some(("shop", "web-1")),
        &budget_says("web"),
    );
    let db = event(
        EventKind::PodBlocked,
        Some(("shop", "db-0")),
        &budget_says("db"),
    );
    let paced = event(
        EventKind::PodBlocked,
        Some(("shop", "api-1")),
        &budget_says("api"),
    );
    assert!(n.notice(&web, &st, t0).is_none(), "not at once");
    assert!(n.notice(&db, &st, t0).is_none());
    assert!(n.notice(&paced, &st, t0).is_none());
    assert_eq!(n.next_due(), Some(t0 + wait));
    // db-0 goes a moment later: its refusal was the budget pacing the drain.
    let gone = event(EventKind::PodGone, Some(("shop", "db-0")), "");
    assert!(n.notice(&gone, &st, t0 + Duration::from_secs(2)).is_none());
    assert!(n.due(&st, t0 + wait - Duration::from_millis(1)).is_empty());
    // At the wait's end: web-1 is still a blocker, api-1 no longer is.
    let due = n.due(&st, t0 + wait);
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].kind, NoticeKind::Blocked);
    assert_eq!(due[0].pod.as_deref(), Some("shop/web-1"));
    assert_eq!(n.next_due(), None);
    // The same budget refusing again is not news.
    assert!(n.notice(&web, &st, t0 + wait * 2).is_none());
    assert!(n.due(&st, t0 + wait * 4).is_empty());
}
