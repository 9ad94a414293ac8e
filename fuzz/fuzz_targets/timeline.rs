//! The timeline from the cluster's Events of a node (`maintd timeline`
//! reads them; anyone who may create Events in the node's namespace can
//! write one that looks like the agent's), and from the agent's own event
//! log built of the same events. Input: the Events' JSON (a list, or a list
//! object with `items`). Checks: the picture is well-formed XML whatever
//! the notes say (nothing in an Event can break out of its text); every bar
//! and stretch ends no earlier than it starts; the log keeps at most its
//! bound.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use maintd::timeline::{self, EventLog, model, svg};

fn check(chart: &model::Chart) {
    for row in &chart.rows {
        if let Some(to) = row.to_ms {
            assert!(
                row.from_ms <= to,
                "row {:?} ends before it starts",
                row.label
            );
        }
        for span in &row.blocked {
            assert!(
                span.from_ms <= span.to_ms,
                "a stretch ends before it starts"
            );
        }
    }
    let picture = svg::render(chart);
    if let Err(e) = roxmltree::Document::parse(&picture) {
        panic!("the timeline is not well-formed XML ({e}):\n{picture}");
    }
    let page = svg::page(&picture);
    assert!(page.contains("<svg"));
}

fuzz_target!(|data: &[u8]| {
    let Some(doc) = common::json(data) else {
        return;
    };
    let items = match doc.get("items") {
        Some(items) => common::values(items),
        None => common::values(&doc),
    };
    if items.len() > 512 {
        return;
    }
    let events = timeline::cluster::drain_events("node-a", &items);
    for w in events.windows(2) {
        assert!(w[0].t_ms <= w[1].t_ms, "events are in time order");
    }
    if let Some(chart) = model::build("node-a", &events, 0, None, model::Rows::Stages) {
        check(&chart);
    }
    let log = EventLog::default();
    for e in &events {
        log.record(e);
    }
    let recorded = log.recorded();
    assert!(recorded.events.len() <= timeline::MAX_EVENTS);
    if let Ok(chart) = timeline::chart("node-a", &recorded, Some("2026-01-01T00:10:00Z")) {
        check(&chart);
    }
});
