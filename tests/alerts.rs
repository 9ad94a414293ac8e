//! Alert gating against a real Prometheus (the Debian package's
//! /usr/bin/prometheus): the test serves a metric Prometheus scrapes every
//! second, rules alert on it, and flipping the metric makes a real alert fire
//! and clear. Nothing here imitates Prometheus, except the last tests'
//! servers, which stand for the wrong things a URL can point at.

use crate::prometheus;

use crate::common;

use std::time::Duration;

use common::endpoint::{EndpointAgent, request};
use common::*;
use maintd::policy::Alerts;
use maintd::policy::alerts::{AlertGate, AlertSettings};
use prometheus::{Canned, Prometheus, free_port, holds, regex, settings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_alert_holds_drains_and_clearing_it_lets_them_proceed() {
    let mut prom = Prometheus::start().await;
    let gate = AlertGate::new(prom.gate());
    prom.until(&gate, "a healthy answer", Option::is_none).await;

    prom.exporter.set_metrics(true, false);
    let reason = prom
        .until(&gate, "NodeOnFire firing", |a| {
            holds(a, "NodeOnFire (firing)")
        })
        .await
        .unwrap();
    assert_eq!(
        reason,
        format!(
            "1 alert active in Prometheus at {}: NodeOnFire (firing)",
            prom.url
        )
    );

    // kured's filters, asked of the same Prometheus while the alert fires.
    let excluded = AlertGate::new(AlertSettings {
        filter: regex("^NodeOn"),
        ..prom.gate()
    });
    assert_eq!(
        excluded.check().await,
        None,
        "an excluded alert holds drains"
    );
    let only_others = AlertGate::new(AlertSettings {
        filter: regex("^KubeNodeNotReady$"),
        match_only: true,
        ..prom.gate()
    });
    assert_eq!(
        only_others.check().await,
        None,
        "a non-matching alert holds drains"
    );
    let only_this = AlertGate::new(AlertSettings {
        filter: regex("Fire"),
        match_only: true,
        ..prom.gate()
    });
    assert!(holds(&only_this.check().await, "NodeOnFire (firing)"));

    prom.exporter.set_metrics(false, false);
    prom.until(&gate, "the alert to clear", Option::is_none)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_alert_holds_drains_unless_only_firing_ones_count() {
    let mut prom = Prometheus::start().await;
    let gate = AlertGate::new(prom.gate());
    prom.exporter.set_metrics(false, true);
    prom.until(&gate, "DiskSlowlyFilling pending", |a| {
        holds(a, "DiskSlowlyFilling (pending)")
    })
    .await;
    let firing_only = AlertGate::new(AlertSettings {
        firing_only: true,
        ..prom.gate()
    });
    assert_eq!(
        firing_only.check().await,
        None,
        "a pending alert holds drains"
    );

    // A firing alert still counts for that gate, and is listed first.
    prom.exporter.set_metrics(true, true);
    let reason = prom
        .until(&gate, "both alerts", |a| holds(a, "NodeOnFire"))
        .await
        .unwrap();
    assert!(
        reason.contains("2 alerts active")
            && reason.contains("NodeOnFire (firing), DiskSlowlyFilling (pending)"),
        "{reason}"
    );
    let reason = firing_only.check().await.unwrap();
    assert!(!reason.contains("DiskSlowlyFilling"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promql_query_with_series_holds_drains_and_an_empty_one_does_not() {
    let mut prom = Prometheus::start().await;
    // No alert may count here (an empty name matches none): only the query.
    let base = prom.gate();
    let query = |q: &str| {
        AlertGate::new(AlertSettings {
            filter: regex("^$"),
            match_only: true,
            query: Some(q.into()),
            ..base.clone()
        })
    };
    // Once Prometheus has scraped, the bare metric has one series...
    let scraped = query("maintd_test_fire");
    prom.until(&scraped, "the first scrape", |a| {
        holds(a, "returns 1 series")
    })
    .await;
    // ...and a health check over it returns none.
    let on_fire = query("maintd_test_fire > 0");
    assert_eq!(on_fire.check().await, None);

    prom.exporter.set_metrics(true, false);
    let reason = prom
        .until(&on_fire, "the query to return a series", Option::is_some)
        .await
        .unwrap();
    let target = prom.exporter.url.trim_start_matches("http://");
    assert_eq!(
        reason,
        format!(
            "the PromQL query `maintd_test_fire > 0` returns 1 series in Prometheus at {} \
             (first: maintd_test_fire{{instance=\"{target}\",job=\"fixture\"}}); \
             planned drains wait until it returns none",
            prom.url
        )
    );

    // A query Prometheus cannot run holds drains with Prometheus' own words.
    let reason = query("sum(").check().await.unwrap();
    assert!(
        reason.starts_with(&format!(
            "Prometheus at {} answered the PromQL query `sum(` with an error: bad_data: ",
            prom.url
        )),
        "{reason}"
    );
    let reason = query("1 + 1").check().await.unwrap();
    assert!(
        reason.starts_with("the PromQL query `1 + 1` returns a scalar, not series"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_stopped_holds_drains_and_says_it_cannot_be_reached() {
    let mut prom = Prometheus::start().await;
    let gate = AlertGate::new(AlertSettings {
        query: Some("up == 0".into()),
        ..prom.gate()
    });
    prom.until(&gate, "a healthy answer", Option::is_none).await;

    prom.kill();
    let reason = gate.check().await.expect("Prometheus down lets drains go");
    assert!(
        reason.starts_with(&format!(
            "Prometheus at {} could not be reached (",
            prom.url
        )),
        "{reason}"
    );
    assert!(
        reason.contains("planned drains wait until it answers"),
        "{reason}"
    );
    // Both questions failed for one cause: it is said once.
    assert_eq!(
        reason.matches("could not be reached").count(),
        1,
        "{reason}"
    );
}

#[tokio::test]
async fn nothing_listening_holds_drains() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let gate = AlertGate::new(settings(&url, Duration::from_secs(5)));
    let reason = gate
        .check()
        .await
        .expect("nothing listening lets drains go");
    assert!(
        reason.starts_with(&format!("Prometheus at {url} could not be reached (")),
        "{reason}"
    );
    assert!(
        reason.to_lowercase().contains("connection refused"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_url_that_is_not_prometheus_holds_drains_with_the_reason() {
    let t = Duration::from_secs(5);
    let grafana = Canned::start(200, "text/html", "<html>Grafana</html>").await;
    let reason = AlertGate::new(settings(&grafana.url, t))
        .check()
        .await
        .unwrap();
    assert!(
        reason.starts_with(&format!(
            "Prometheus at {} answered GET /api/v1/alerts with something that is not Prometheus' JSON",
            grafana.url
        )),
        "{reason}"
    );

    let proxy = Canned::start(502, "text/plain", "upstream\nconnect error").await;
    let reason = AlertGate::new(settings(&proxy.url, t))
        .check()
        .await
        .unwrap();
    assert!(
        reason.ends_with(
            "answered GET /api/v1/alerts with HTTP 502 Bad Gateway: upstream connect error"
        ),
        "{reason}"
    );

    let moved = Canned::start(301, "text/html", "").await;
    let reason = AlertGate::new(settings(&moved.url, t))
        .check()
        .await
        .unwrap();
    assert!(
        reason.ends_with(
            "answered GET /api/v1/alerts with HTTP 301 Moved Permanently \
             (to https://prometheus.example/api/v1/alerts)"
        ),
        "{reason}"
    );

    let huge = format!(
        "{{\"status\":\"success\",\"data\":{{\"alerts\":[{}]}}}}",
        "{\"labels\":{\"alertname\":\"X\"},\"state\":\"firing\"},".repeat(120_000)
    );
    let flood = Canned::start(200, "application/json", huge).await;
    let reason = AlertGate::new(settings(&flood.url, t))
        .check()
        .await
        .unwrap();
    assert!(reason.contains("with more than 4 MiB"), "{reason}");

    // https to a server that speaks plain HTTP: the TLS handshake fails.
    let https = grafana.url.replace("http://", "https://");
    let reason = AlertGate::new(settings(&https, t)).check().await.unwrap();
    assert!(reason.contains("could not be reached"), "{reason}");
}

#[tokio::test]
async fn a_server_that_never_answers_holds_drains_after_the_timeout() {
    // Accepts connections and says nothing, like a half-open proxy.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let gate = AlertGate::new(AlertSettings {
        query: Some("up == 0".into()),
        ..settings(&url, Duration::from_millis(300))
    });
    let reason = gate.check().await.unwrap();
    assert_eq!(
        reason,
        format!(
            "Prometheus at {url} did not answer GET /api/v1/alerts within 300ms; \
             planned drains wait until it answers"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_alert_holds_a_planned_drain_and_its_clearing_lets_it_start() {
    let mut prom = Prometheus::start().await;
    prom.exporter.set_metrics(true, false);
    let gate = AlertGate::new(prom.gate());
    prom.until(&gate, "NodeOnFire firing", |a| {
        holds(a, "NodeOnFire (firing)")
    })
    .await;

    let sim = scenario("small.yaml").await;
    let settings = prom.gate();
    let a = EndpointAgent::start_with(&sim, "node-a", move |c| {
        c.policy.alerts = Some(Alerts::new(settings, Duration::from_secs(1)));
    })
    .await;
    let (code, _) = request(&a.local, "POST", "/v1/drain", r#"{"reason": "os update"}"#).await;
    assert_eq!(code, 202);
    let st = a
        .wait_status("the drain says the alert holds it", |st| {
            st["drain"]["waiting"]
                .as_str()
                .is_some_and(|w| w.contains("NodeOnFire (firing)"))
        })
        .await;
    assert_eq!(st["drain"]["phase"], "Idle", "{st}");
    assert!(
        !is_cordoned(&sim.client(), "node-a").await,
        "not even a cordon"
    );
    let (_, metrics) = request(a.readonly, "GET", "/metrics", "").await;
    assert!(
        metrics.contains(r#"maintd_planned_drain_waiting{reason="alerts"} 1"#),
        "{metrics}"
    );
    assert!(
        !sim.state.audit.entries().iter().any(|e| e.verb == "evict"),
        "nothing is evicted while the alert fires"
    );

    prom.exporter.set_metrics(false, false);
    a.wait_status("drained once the alert cleared", |st| {
        st["drain"]["phase"] == "Drained"
    })
    .await;
    assert!(a.status().await["drain"]["waiting"].is_null());
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_out_of_reach_holds_a_planned_drain_but_never_a_taint() {
    let sim = scenario("small.yaml").await;
    let url = format!("http://127.0.0.1:{}", free_port());
    let settings = settings(&url, Duration::from_secs(2));
    let a = EndpointAgent::start_with(&sim, "node-a", move |c| {
        c.policy.alerts = Some(Alerts::new(settings, Duration::from_secs(1)));
    })
    .await;
    let (code, _) = request(&a.local, "POST", "/v1/drain", r#"{"reason": "os update"}"#).await;
    assert_eq!(code, 202);
    a.wait_status("the drain says Prometheus cannot be reached", |st| {
        st["drain"]["waiting"]
            .as_str()
            .is_some_and(|w| w.contains("could not be reached"))
    })
    .await;
    assert!(!is_cordoned(&sim.client(), "node-a").await);

    // An admin's taint is not a planned drain: it goes at once.
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("now")).await;
    a.wait_status("drained for the taint", |st| {
        st["drain"]["phase"] == "Drained"
    })
    .await;
    a.stop().await;
}
