//! What an operator sees from alert gating, without a Prometheus: filter
//! semantics (kured's), answers of every shape, reason strings, URLs.

use std::time::Duration;

use regex::Regex;

use super::answer::{
    ActiveAlert, AlertState, AnswerError, BlockingAlert, QuerySeries, alerts_reason, blocking,
    is_prometheus_error, parse_alerts, parse_query, query_reason, shorten, unusable_reason,
};
use super::{AlertGate, AlertSettings};
use crate::outbound::url;

fn alert(name: &str, state: &str) -> ActiveAlert {
    let state = match state {
        "firing" => AlertState::Firing,
        "pending" => AlertState::Pending,
        "inactive" => AlertState::Inactive,
        other => AlertState::Other(other.into()),
    };
    ActiveAlert {
        name: name.into(),
        state,
    }
}

fn names(alerts: &[BlockingAlert]) -> Vec<&str> {
    alerts.iter().map(|a| a.name.as_str()).collect()
}

#[test]
fn which_alerts_block_follows_kureds_filters() {
    let active = [
        alert("KubeNodeNotReady", "firing"),
        alert("RebootRequired", "firing"),
        alert("TargetDown", "pending"),
        alert("Resolved", "inactive"),
    ];
    // (filter, match_only, firing_only, alerts that block)
    let cases: &[(Option<&str>, bool, bool, &[&str])] = &[
        (
            None,
            false,
            false,
            &["KubeNodeNotReady", "RebootRequired", "TargetDown"],
        ),
        (None, false, true, &["KubeNodeNotReady", "RebootRequired"]),
        // Without a filter, match_only has nothing to match: all count.
        (
            None,
            true,
            false,
            &["KubeNodeNotReady", "RebootRequired", "TargetDown"],
        ),
        // Exclude: kured's default filter leaves its own alert out.
        (
            Some("^RebootRequired$"),
            false,
            false,
            &["KubeNodeNotReady", "TargetDown"],
        ),
        (Some("^RebootRequired$"), false, true, &["KubeNodeNotReady"]),
        // Match only: just the matching alerts count.
        (Some("^Kube"), true, false, &["KubeNodeNotReady"]),
        (Some("^Target"), true, false, &["TargetDown"]),
        (Some("^Target"), true, true, &[]),
        (Some("^Nothing$"), true, false, &[]),
        // Unanchored, as Go's MatchString: "Down" matches TargetDown.
        (
            Some("Down"),
            false,
            false,
            &["KubeNodeNotReady", "RebootRequired"],
        ),
        (Some("."), false, false, &[]),
    ];
    for (filter, match_only, firing_only, want) in cases {
        let filter = filter.map(|f| Regex::new(f).unwrap());
        let got = blocking(&active, filter.as_ref(), *match_only, *firing_only);
        assert_eq!(
            names(&got),
            *want,
            "filter {filter:?} match_only {match_only} firing_only {firing_only}"
        );
    }
}

#[test]
fn alerts_are_one_per_name_firing_first() {
    let active = [
        alert("Zeta", "firing"),
        alert("Alpha", "pending"),
        alert("Crash", "pending"),
        alert("Crash", "firing"),
        alert("Crash", "firing"),
        alert("Odd", "silenced-someday"),
    ];
    let got = blocking(&active, None, false, false);
    let shown: Vec<(&str, &str, usize)> = got
        .iter()
        .map(|a| (a.name.as_str(), a.state.as_str(), a.instances))
        .collect();
    assert_eq!(
        shown,
        [
            ("Crash", "firing", 3),
            ("Zeta", "firing", 1),
            ("Alpha", "pending", 1),
            ("Odd", "silenced-someday", 1),
        ]
    );
    // A state this code does not know counts even with firing_only.
    let got = blocking(&active, None, false, true);
    assert_eq!(names(&got), ["Crash", "Zeta", "Odd"]);
}

#[test]
fn alerts_answer_is_read() {
    let body = br#"{"status":"success","data":{"alerts":[
        {"labels":{"alertname":"NodeOnFire","severity":"critical"},"annotations":{},
         "state":"firing","activeAt":"2024-01-01T00:00:00Z","value":"1e+00"},
        {"labels":{"alertname":"DiskSlowlyFilling"},"state":"pending"},
        {"labels":{},"state":"firing"}]}}"#;
    assert_eq!(
        parse_alerts(body),
        Ok(vec![
            alert("NodeOnFire", "firing"),
            alert("DiskSlowlyFilling", "pending"),
            alert("<no alertname>", "firing"),
        ])
    );
    let empty = br#"{"status":"success","data":{"alerts":[]}}"#;
    assert_eq!(parse_alerts(empty), Ok(vec![]));
}

#[test]
fn answers_that_are_not_prometheus_are_errors_not_panics() {
    let not_prometheus: &[&[u8]] = &[
        b"",
        b"<html><body>Grafana</body></html>",
        b"{\"status\":\"success\"",
        b"{}",
        b"[]",
        b"null",
        br#"{"status":"success"}"#,
        br#"{"status":"success","data":{}}"#,
        br#"{"status":"success","data":{"alerts":null}}"#,
        br#"{"status":"success","data":{"alerts":[{"labels":{"alertname":7},"state":"firing"}]}}"#,
        br#"{"status":"success","data":{"alerts":[{"labels":{"alertname":"X"}}]}}"#,
        br#"{"status":"maybe","data":{"alerts":[]}}"#,
        br#"{"status":3}"#,
        b"\xff\xfe\x00",
    ];
    for body in not_prometheus {
        let got = parse_alerts(body);
        assert!(
            matches!(got, Err(AnswerError::NotPrometheus(_))),
            "{:?}: {got:?}",
            String::from_utf8_lossy(body)
        );
        assert!(!is_prometheus_error(body));
    }
    // Nesting deeper than serde_json's limit is an error too.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(parse_alerts(deep.as_bytes()).is_err());
    assert!(parse_query(deep.as_bytes()).is_err());
}

#[test]
fn prometheus_error_answers_say_what_prometheus_said() {
    let body = br#"{"status":"error","errorType":"bad_data",
        "error":"invalid parameter \"query\": 1:5: parse error:\n unclosed left parenthesis"}"#;
    assert!(is_prometheus_error(body));
    let err = parse_query(body).unwrap_err();
    assert_eq!(
        unusable_reason("http://p:9090", "the PromQL query `sum(`", &err),
        "Prometheus at http://p:9090 answered the PromQL query `sum(` with an error: bad_data: \
         invalid parameter \"query\": 1:5: parse error: unclosed left parenthesis"
    );
    let bare = br#"{"status":"error"}"#;
    assert_eq!(
        parse_alerts(bare).unwrap_err().to_string(),
        "unknown: no message"
    );
}

#[test]
fn unusable_answers_say_what_was_asked_and_what_to_check() {
    let url = "http://grafana:3000";
    let html = parse_alerts(b"<html>").unwrap_err();
    assert_eq!(
        unusable_reason(url, "GET /api/v1/alerts", &html),
        "Prometheus at http://grafana:3000 answered GET /api/v1/alerts with something that is \
         not Prometheus' JSON (expected value at line 1 column 1): is the URL the Prometheus \
         server's own (the one its web UI is at)?"
    );
    let scalar = AnswerError::NotSeries("scalar".into());
    let reason = unusable_reason(url, "the PromQL query `1 + 1`", &scalar);
    assert!(
        reason.starts_with("the PromQL query `1 + 1` returns a scalar, not series"),
        "{reason}"
    );
}

#[test]
fn query_answers_count_series() {
    let vector = br#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"__name__":"up","job":"etcd","instance":"10.0.0.1:2379"},"value":[1,"0"]},
        {"metric":{"__name__":"up","job":"etcd","instance":"10.0.0.2:2379"},"value":[1,"0"]}]}}"#;
    assert_eq!(
        parse_query(vector),
        Ok(QuerySeries {
            count: 2,
            first: Some(r#"up{instance="10.0.0.1:2379",job="etcd"}"#.into()),
        })
    );
    let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
    assert_eq!(
        parse_query(empty),
        Ok(QuerySeries {
            count: 0,
            first: None
        })
    );
    let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[
        {"metric":{},"values":[[1,"1"],[2,"1"]]}]}}"#;
    assert_eq!(parse_query(matrix).map(|s| s.count), Ok(1));
    // A scalar always has a value: it cannot tell "wait" from "go".
    let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}"#;
    let err = parse_query(scalar).unwrap_err();
    assert!(
        matches!(err, AnswerError::NotSeries(ref t) if t == "scalar"),
        "{err:?}"
    );
    let bad = br#"{"status":"success","data":{"resultType":"vector","result":{"a":1}}}"#;
    assert!(matches!(
        parse_query(bad),
        Err(AnswerError::NotPrometheus(_))
    ));
}

#[test]
fn alert_reasons_name_the_alerts_and_count_the_rest() {
    let url = "http://prometheus.monitoring:9090";
    assert_eq!(alerts_reason(url, &[]), None);
    let one = blocking(&[alert("NodeOnFire", "firing")], None, false, false);
    assert_eq!(
        alerts_reason(url, &one).unwrap(),
        "1 alert active in Prometheus at http://prometheus.monitoring:9090: NodeOnFire (firing)"
    );
    let many: Vec<ActiveAlert> = (1..=8)
        .map(|i| {
            alert(
                &format!("Alert{i}"),
                if i % 2 == 0 { "firing" } else { "pending" },
            )
        })
        .chain([alert("Alert2", "firing")])
        .collect();
    let reason = alerts_reason(url, &blocking(&many, None, false, false)).unwrap();
    assert_eq!(
        reason,
        "8 alerts active in Prometheus at http://prometheus.monitoring:9090: \
         Alert2 (firing, 2 instances), Alert4 (firing), Alert6 (firing), Alert8 (firing), \
         Alert1 (pending), and 3 more"
    );
}

/// Names and messages in an answer are Prometheus' (or whoever answers at
/// the URL): a reason repeats them cut short, so it stays a line a status
/// and an Event can carry. Found by the `prometheus` fuzz target.
#[test]
fn reasons_stay_short_whatever_the_answer_says() {
    let url = "http://prometheus:9090";
    let long = "x".repeat(5000);
    let error = format!(r#"{{"status":"error","errorType":"execution","error":"{long}"}}"#);
    let rejected = parse_alerts(error.as_bytes()).unwrap_err();
    let not_json = format!(r#"{{"status":"success","data":{{"alerts":"{long}"}}}}"#);
    let garbled = parse_alerts(not_json.as_bytes()).unwrap_err();
    let named = alerts_reason(
        url,
        &blocking(
            &[alert(&long, "firing"), alert("B", &long)],
            None,
            false,
            false,
        ),
    )
    .unwrap();
    for reason in [
        unusable_reason(url, "GET /api/v1/alerts", &rejected),
        unusable_reason(url, "GET /api/v1/alerts", &garbled),
        named,
    ] {
        assert!(
            reason.chars().count() < 1000,
            "{} characters",
            reason.chars().count()
        );
        assert!(reason.contains('…'), "cut, and says so: {reason}");
    }
}

#[test]
fn query_reasons_quote_the_query_on_one_line() {
    let url = "http://p:9090";
    let none = QuerySeries {
        count: 0,
        first: None,
    };
    assert_eq!(query_reason(url, "up == 0", &none), None);
    let some = QuerySeries {
        count: 3,
        first: Some(r#"up{job="etcd"}"#.into()),
    };
    assert_eq!(
        query_reason(url, "up{job=\"etcd\"}\n  == 0", &some).unwrap(),
        "the PromQL query `up{job=\"etcd\"} == 0` returns 3 series in Prometheus at http://p:9090 \
         (first: up{job=\"etcd\"}); planned drains wait until it returns none"
    );
    let long = "x".repeat(1000);
    let reason = query_reason(url, &long, &some).unwrap();
    assert!(reason.len() < 400, "{reason}");
    assert_eq!(shorten("ééé", 2), "é…");
}

#[test]
fn urls_are_read_with_credentials_kept_out_of_sight() {
    let u = url::parse(" http://prometheus.monitoring:9090/ ").unwrap();
    assert_eq!(u.base, "http://prometheus.monitoring:9090");
    assert!(!u.tls);
    assert_eq!(u.credentials, None);
    let u = url::parse("HTTPS://ops:s%3Acret@thanos.example/prometheus/").unwrap();
    assert_eq!(u.base, "https://thanos.example/prometheus");
    assert!(u.tls);
    assert_eq!(u.credentials, Some(("ops".into(), "s:cret".into())));
    for bad in [
        "prometheus:9090",
        "ftp://p:21",
        "",
        "http://",
        "http://p:9090/?x=1",
        "http://a b",
    ] {
        assert!(url::parse(bad).is_err(), "{bad:?} was accepted");
    }
    let err = url::parse("ftp://ops:hunter2@p/").unwrap_err();
    assert!(!err.contains("hunter2"), "{err}");
    assert!(err.contains("http:// or https://"), "{err}");
    assert_eq!(
        url::redact("http://u:pw@h:1/x?q"),
        "http://***@h:1/x?q".to_string()
    );
    assert_eq!(
        url::encode("up{a=\"b\"} == 0"),
        "up%7Ba%3D%22b%22%7D%20%3D%3D%200"
    );
    assert_eq!(url::encode("rate(x[5m])~_.-"), "rate%28x%5B5m%5D%29~_.-");
}

fn settings(url: &str) -> AlertSettings {
    AlertSettings {
        url: url.into(),
        filter: None,
        match_only: false,
        firing_only: false,
        query: None,
        timeout: Duration::from_secs(2),
    }
}

#[tokio::test]
async fn a_url_that_cannot_be_used_blocks_and_says_why() {
    let gate = AlertGate::new(settings("prometheus.monitoring:9090"));
    let reason = gate.check().await.unwrap();
    assert!(reason.starts_with("cannot ask Prometheus: "), "{reason}");
    assert!(reason.contains("http:// or https://"), "{reason}");
    let gate = AlertGate::new(settings("gopher://ops:hunter2@p:70"));
    let reason = gate.check().await.unwrap();
    assert!(!reason.contains("hunter2"), "{reason}");
    assert!(!format!("{gate:?}").contains("hunter2"));
    let gate = AlertGate::new(settings("http://ops:hunter2@127.0.0.1:9"));
    assert!(!format!("{gate:?}").contains("hunter2"));
}
