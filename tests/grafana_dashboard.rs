//! The Grafana dashboard shipped in deploy/grafana/: its panels ask the
//! chosen Prometheus, the node view follows `$node`, every metric a panel
//! reads is one the agent exports (or a recording rule of
//! deploy/prometheus/ makes), the component ships the file as the Grafana
//! sidecar's ConfigMap, and every panel's query, asked of a real Prometheus
//! that scraped a real agent through a drain a budget blocked, runs and
//! returns series.

use crate::prometheus;

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use common::endpoint::{EndpointAgent, request};
use common::*;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{Patch, PatchParams};
use prometheus::Prometheus;
use serde_json::{Value, json};

const NODE: &str = "node-a";
/// Prometheus starts, scrapes and evaluates rules every second: a few
/// cycles, with room for a loaded CI machine.
const PROMETHEUS_PATIENCE: Duration = Duration::from_secs(60);
/// Labels every series carries in a cluster: the scrape's own, and the
/// node the PodMonitor relabels onto it.
const TARGET_LABELS: [&str; 5] = ["node", "pod", "namespace", "job", "instance"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn dashboard_text() -> String {
    std::fs::read_to_string(root().join("deploy/grafana/dashboard.json")).unwrap()
}

fn dashboard() -> Value {
    serde_json::from_str(&dashboard_text()).expect("dashboard.json is JSON")
}

/// One query of a panel, with the row (view) the panel sits in.
struct Query {
    view: String,
    panel: String,
    expr: String,
}

/// Every query of every panel, in the dashboard's order.
fn queries(dashboard: &Value) -> Vec<Query> {
    let mut view = String::new();
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            view = panel["title"].as_str().unwrap().to_string();
            continue;
        }
        for target in panel["targets"].as_array().unwrap() {
            out.push(Query {
                view: view.clone(),
                panel: panel["title"].as_str().unwrap().to_string(),
                expr: target["expr"].as_str().unwrap_or_default().to_string(),
            });
        }
    }
    out
}

/// The recording and alerting rules of deploy/prometheus/, as a rule file
/// (the PrometheusRule's spec; JSON is YAML too).
fn rule_file() -> Value {
    let text =
        std::fs::read_to_string(root().join("deploy/prometheus/prometheusrule.yaml")).unwrap();
    let rule: Value = serde_saphyr::from_str(&text).unwrap();
    json!({"groups": rule["spec"]["groups"]})
}

/// The query as Grafana sends it, its variables replaced: the node view
/// for `node`, rates over a minute, the dashboard's time range an hour.
fn as_sent(expr: &str, node: &str) -> String {
    let sent = expr
        .replace("$__rate_interval", "1m")
        .replace("$__interval", "15s")
        .replace("$__range", "1h")
        .replace("${node}", node)
        .replace("$node", node);
    assert!(
        !sent.contains('$'),
        "a variable the test does not know in `{expr}`"
    );
    sent
}

#[test]
fn the_dashboard_has_a_fleet_and_a_node_view_and_every_panel_asks_the_chosen_prometheus() {
    let d = dashboard();
    assert_eq!(d["uid"], "maintd");
    let variables = d["templating"]["list"].as_array().unwrap();
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no ${name} variable"))
    };
    assert_eq!(variable("datasource")["type"], "datasource");
    assert_eq!(variable("datasource")["query"], "prometheus");
    let node = variable("node");
    assert_eq!(node["datasource"]["uid"], "${datasource}");
    assert!(
        node["definition"]
            .as_str()
            .unwrap()
            .starts_with("label_values(maintd_"),
        "{node}"
    );

    let panels = d["panels"].as_array().unwrap();
    let rows: Vec<&str> = panels
        .iter()
        .filter(|p| p["type"] == "row")
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    assert_eq!(rows, ["Fleet", "Node"]);
    let ids: BTreeSet<u64> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().unwrap();
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title} has no query");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
                "{title} has a query without an expr"
            );
        }
        let g = &p["gridPos"];
        assert!(
            g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24,
            "{title} fits the grid"
        );
    }

    let queries = queries(&d);
    for view in ["Fleet", "Node"] {
        assert!(
            queries.iter().filter(|q| q.view == view).count() >= 8,
            "the {view} view has its panels"
        );
    }
    for q in &queries {
        let filtered = q.expr.contains(r#"node=~"$node""#);
        match q.view.as_str() {
            "Node" => assert!(filtered, "{}: `{}` ignores $node", q.panel, q.expr),
            _ => assert!(!filtered, "{}: a fleet panel filtered by $node", q.panel),
        }
    }
}

#[test]
fn every_metric_and_label_the_panels_read_is_one_the_agent_exports_or_a_rule_records() {
    let exported = common::exported_metrics();
    let recorded: BTreeSet<String> = rule_file()["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .filter_map(|r| r["record"].as_str().map(str::to_string))
        .collect();
    let labels: BTreeSet<String> = regex::Regex::new(r"([a-z_]+)=")
        .unwrap()
        .captures_iter(&exported)
        .map(|c| c[1].to_string())
        .chain(TARGET_LABELS.map(str::to_string))
        .collect();

    let names = regex::Regex::new(r"\bmaintd[_:][a-z_:0-9]*").unwrap();
    let grouping = regex::Regex::new(r"by \(([^)]*)\)").unwrap();
    let mut read = BTreeSet::new();
    for q in queries(&dashboard()) {
        for m in names.find_iter(&q.expr) {
            let name = m.as_str();
            read.insert(name.to_string());
            if name.contains(':') {
                assert!(
                    recorded.contains(name),
                    "{}: {name} is recorded by no rule of deploy/prometheus/ ({recorded:?})",
                    q.panel
                );
            } else {
                assert!(
                    exported.lines().any(|l| l.starts_with(&format!("{name} "))
                        || l.starts_with(&format!("{name}{{"))),
                    "{}: the agent does not export {name}:\n{exported}",
                    q.panel
                );
            }
        }
        for group in grouping.captures_iter(&q.expr) {
            for label in group[1].split(',').map(str::trim) {
                assert!(
                    labels.contains(label),
                    "{}: no series carries the label {label} (`{}`)",
                    q.panel,
                    q.expr
                );
            }
        }
    }
    assert!(read.len() >= 15, "{read:?}");
}

#[test]
fn the_component_ships_the_dashboard_file_as_the_grafana_sidecar_configmap() {
    let docs: Vec<Value> = common::kustomize_with_component("grafana");
    let maps: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "maintd-dashboard")
        .collect();
    assert_eq!(maps.len(), 1, "one maintd-dashboard ConfigMap: {docs:?}");
    let map = maps[0];
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(map["metadata"]["namespace"], "maintd");
    assert_eq!(
        map["data"]["maintd.json"].as_str(),
        Some(dashboard_text().as_str()),
        "the ConfigMap holds deploy/grafana/dashboard.json as it is"
    );
    assert!(
        docs.iter().any(|d| d["kind"] == "DaemonSet"),
        "deploy/ is still there"
    );
}

/// Asks Prometheus an instant query, at `at` (Unix seconds) or now, and
/// returns its whole answer.
async fn query(prom: &Prometheus, expr: &str, at: Option<f64>) -> Value {
    let addr: SocketAddr = prom.url.trim_start_matches("http://").parse().unwrap();
    let mut path = format!("/api/v1/query?query={}", url_encoded(expr));
    if let Some(t) = at {
        path.push_str(&format!("&time={t}"));
    }
    let (code, body) = request(addr, "GET", &path, "").await;
    serde_json::from_str(&body)
        .unwrap_or_else(|_| json!({"status": "no answer", "error": format!("HTTP {code}: {body}")}))
}

fn url_encoded(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The series of a successful answer (none for any other).
fn series(answer: &Value) -> Vec<Value> {
    answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Waits until `expr` returns at least one series; returns them.
async fn until_series(prom: &Prometheus, what: &str, expr: &str) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + PROMETHEUS_PATIENCE;
    loop {
        let answer = query(prom, expr, None).await;
        let found = series(&answer);
        if !found.is_empty() {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what} (`{expr}`); last answer: {answer}\n\
             Prometheus' log:\n{}",
            prom.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn value(series: &Value) -> f64 {
    series["value"][1].as_str().unwrap().parse().unwrap()
}

async fn set_web_budget(sim: &maintd_sim::SimCluster, min_available: i32) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(sim.client(), "default");
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": min_available}})),
    )
    .await
    .expect("patch the web budget");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_query_returns_series_from_prometheus_scraping_an_agent_through_a_drain() {
    let sim = scenario("small.yaml").await;
    // As many healthy web pods as there are: the budget refuses every
    // eviction until the test lowers it.
    set_web_budget(&sim, 3).await;
    let agent = EndpointAgent::start(&sim, NODE).await;
    // The node label the PodMonitor relabels onto the series in a cluster.
    let scrape = format!(
        "  - job_name: maintd\n    static_configs:\n      - targets: ['{}']\n        labels: {{node: {NODE}}}\n",
        agent.readonly
    );
    let prom = Prometheus::scraping(&scrape, &rule_file().to_string()).await;
    until_series(
        &prom,
        "Prometheus has scraped the agent",
        &format!(r#"maintd_build_info{{node="{NODE}"}}"#),
    )
    .await;
    let addr: SocketAddr = prom.url.trim_start_matches("http://").parse().unwrap();
    let (code, body) = request(
        addr,
        "GET",
        "/api/v1/label/node/values?match[]=maintd_build_info",
        "",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let values: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        values["data"],
        json!([NODE]),
        "$node offers the agent's node"
    );

    let (code, body) = request(
        &agent.local,
        "POST",
        "/v1/drain",
        r#"{"reason": "dashboard"}"#,
    )
    .await;
    assert_eq!(code, 202, "{body}");
    let blocked = until_series(
        &prom,
        "Prometheus has scraped the drain blocked by the web budget",
        &format!(r#"maintd_drain_phase{{node="{NODE}", phase="Blocked"}} == 1"#),
    )
    .await;
    let blocked_at = blocked[0]["value"][0].as_f64().unwrap();

    set_web_budget(&sim, 2).await;
    agent
        .wait_status("the node is drained", |st| {
            st["drain"]["phase"] == "Drained"
        })
        .await;
    until_series(
        &prom,
        "Prometheus has scraped the finished drain and recorded the phases",
        &format!(
            r#"maintd_drain_duration_seconds_count{{node="{NODE}"}} >= 1 and on () maintd:nodes_by_phase:count{{phase="Drained"}}"#
        ),
    )
    .await;

    let d = dashboard();
    let all = queries(&d);
    for q in &all {
        let sent = as_sent(&q.expr, NODE);
        let answer = query(&prom, &sent, None).await;
        assert_eq!(
            answer["status"], "success",
            "{} ({}): `{sent}` fails: {answer}",
            q.panel, q.view
        );
        until_series(
            &prom,
            &format!("{} ({}) shows data", q.panel, q.view),
            &sent,
        )
        .await;
    }

    // What an operator reads off the panels, during and after the drain.
    let expr = |view: &str, panel: &str| {
        let q = all
            .iter()
            .find(|q| q.view == view && q.panel == panel)
            .unwrap_or_else(|| panic!("no panel {panel} in the {view} view"));
        as_sent(&q.expr, NODE)
    };
    let at = |e: String, t: Option<f64>| {
        let prom = &prom;
        async move { series(&query(prom, &e, t).await) }
    };
    let during = at(expr("Fleet", "Drains blocked"), Some(blocked_at)).await;
    assert_eq!(
        value(&during[0]),
        1.0,
        "the blocked drain counted: {during:?}"
    );
    let during = at(expr("Fleet", "Drains in progress"), Some(blocked_at)).await;
    assert_eq!(value(&during[0]), 1.0, "{during:?}");
    let by_budget = at(expr("Fleet", "Blocked pods, by budget"), Some(blocked_at)).await;
    assert!(
        by_budget
            .iter()
            .any(|s| s["metric"]["budget"] == "web" && value(s) >= 1.0),
        "the budget that blocks is named: {by_budget:?}"
    );
    let now = at(expr("Fleet", "Drains blocked"), None).await;
    assert_eq!(value(&now[0]), 0.0, "{now:?}");
    let by_budget = at(expr("Node", "Blocked pods, by budget"), None).await;
    assert!(
        by_budget.iter().all(|s| value(s) == 0.0),
        "none blocked once drained: {by_budget:?}"
    );
    let now = at(expr("Fleet", "Nodes held drained"), None).await;
    assert_eq!(value(&now[0]), 1.0, "{now:?}");
    let phase = at(expr("Node", "Phase"), None).await;
    assert_eq!(phase.len(), 1, "{phase:?}");
    assert_eq!(phase[0]["metric"]["phase"], "Drained", "{phase:?}");
    let buckets = at(expr("Node", "Drains in the time range, by duration"), None).await;
    let infinite = buckets
        .iter()
        .find(|s| s["metric"]["le"] == "+Inf")
        .unwrap_or_else(|| panic!("no +Inf bucket: {buckets:?}"));
    assert!(
        value(infinite) >= 0.5,
        "one drain in the range: {buckets:?}"
    );

    agent.stop().await;
}
