//! Events as the cluster sees them: a drain event repeated many times is
//! one Event whose series counts the repeats, written in batches rather than
//! once per repeat.

use crate::common;

use std::time::Duration;

use common::*;
use maintd::drain::progress::{EventKind, Progress};
use maintd::report::events::EventRecorder;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

async fn events(sim: &maintd_sim::SimCluster) -> Vec<Value> {
    let (_, list) = raw(sim, "GET", "/apis/events.k8s.io/v1/events", "", vec![]).await;
    list["items"].as_array().cloned().unwrap_or_default()
}

fn writes_to_events(sim: &maintd_sim::SimCluster) -> usize {
    sim.state.audit.count_requests(|r| {
        r.path.contains("/events") && (r.method == "POST" || r.method == "PATCH")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_block_is_one_event_whose_series_counts_every_repeat() {
    let sim = sim().await;
    create_node(&sim.client(), "node-a").await;
    let progress = Progress::new("node-a");
    let stop = CancellationToken::new();
    let recorder = EventRecorder {
        client: sim.client(),
        node: "node-a".into(),
        progress: progress.clone(),
        series_every: Duration::from_millis(300),
        pod_events: false,
    };
    recorder.spawn(stop.clone());
    let before = writes_to_events(&sim);
    for _ in 0..40 {
        let mut ev = progress.event(EventKind::PodBlocked);
        ev.namespace = Some("shop".into());
        ev.pod = Some("web-1".into());
        ev.message = "The disruption budget web needs 2 healthy pods and has 2 currently".into();
        progress.emit(ev);
    }
    let sim_ref = &sim;
    eventually("the series counts all 40", || async move {
        let items = events(sim_ref).await;
        items.len() == 1 && items[0]["series"]["count"] == 40
    })
    .await;
    let e = &events(&sim).await[0];
    assert_eq!(
        (
            e["reason"].as_str(),
            e["type"].as_str(),
            e["regarding"]["kind"].as_str()
        ),
        (Some("EvictionBlocked"), Some("Warning"), Some("Node"))
    );
    assert!(
        e["note"]
            .as_str()
            .unwrap()
            .contains("disruption budget shop/web")
    );
    let writes = writes_to_events(&sim) - before;
    assert!(
        writes < 10,
        "40 repeats cost {writes} writes; the count is written in batches"
    );
    // A different note is an Event of its own.
    let mut ev = progress.event(EventKind::DrainCompleted);
    ev.message = "12 pods".into();
    progress.emit(ev);
    eventually("a second Event", || async move {
        events(sim_ref).await.len() == 2
    })
    .await;
    stop.cancel();
}
