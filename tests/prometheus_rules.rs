//! The alerts shipped in deploy/prometheus/: Prometheus' own tool checks
//! them and runs their unit tests (every alert firing when it should and
//! quiet when it should not); every metric they read is one the agent
//! exports; every alert has its runbook; and the component, put on top of
//! deploy/, makes the agents scrapeable.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common;

const PROMTOOL: &str = "/usr/bin/promtool";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rule_groups() -> Value {
    let rule = yaml(&root().join("deploy/prometheus/prometheusrule.yaml"));
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"]["groups"].clone()
}

fn rules() -> Vec<Value> {
    rule_groups()
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect()
}

fn alerts() -> Vec<String> {
    rules()
        .iter()
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect()
}

fn promtool(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(PROMTOOL)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool runs (the prometheus package; scripts/install-test-deps installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn promtool_checks_the_rules_and_every_unit_test_passes() {
    let dir = tempfile::tempdir().unwrap();
    // The PrometheusRule's spec is a rule file (JSON is YAML too).
    let file = serde_json::json!({"groups": rule_groups()});
    std::fs::write(dir.path().join("rules.yaml"), file.to_string()).unwrap();
    std::fs::copy(
        root().join("tests/fixtures/prometheus/rules-test.yaml"),
        dir.path().join("rules-test.yaml"),
    )
    .unwrap();
    let checked = promtool(dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", rules().len())),
        "{checked}"
    );
    let tested = promtool(dir.path(), &["test", "rules", "rules-test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

#[test]
fn every_alert_has_a_unit_test_where_it_fires_and_one_where_it_is_quiet() {
    let tests = yaml(&root().join("tests/fixtures/prometheus/rules-test.yaml"));
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for t in tests["tests"].as_array().unwrap() {
        for a in t["alert_rule_test"].as_array().into_iter().flatten() {
            let name = a["alertname"].as_str().unwrap().to_string();
            if a["exp_alerts"].as_array().is_some_and(|e| !e.is_empty()) {
                fires.insert(name);
            } else {
                quiet.insert(name);
            }
        }
    }
    for alert in alerts() {
        assert!(fires.contains(&alert), "no unit test where {alert} fires");
        assert!(
            quiet.contains(&alert),
            "no unit test where {alert} stays quiet"
        );
    }
}

#[test]
fn every_metric_the_rules_read_is_one_the_agent_exports() {
    let exported = common::exported_metrics();
    let names = regex::Regex::new(r"maintd_[a-z_]+").unwrap();
    let mut read = BTreeSet::new();
    for r in rules() {
        let expr = r["expr"].as_str().unwrap();
        for m in names.find_iter(expr) {
            read.insert(m.as_str().to_string());
        }
    }
    assert!(read.len() >= 8, "{read:?}");
    for metric in read {
        assert!(
            exported
                .lines()
                .any(|l| l.starts_with(&format!("{metric} "))
                    || l.starts_with(&format!("{metric}{{"))),
            "the rules read {metric}, which the agent does not export:\n{exported}"
        );
    }
}

#[test]
fn every_alert_names_its_node_and_links_its_runbook() {
    let runbooks = std::fs::read_to_string(root().join("docs/alerts.md")).unwrap();
    for r in rules().iter().filter(|r| r["alert"].is_string()) {
        let alert = r["alert"].as_str().unwrap();
        assert!(
            runbooks.contains(&format!("\n## {alert}\n")),
            "docs/alerts.md has no section for {alert}"
        );
        let url = r["annotations"]["runbook_url"].as_str().unwrap();
        assert!(
            url.ends_with(&format!("docs/alerts.md#{}", alert.to_lowercase())),
            "{alert}: {url}"
        );
        assert!(
            r["labels"]["severity"].is_string(),
            "{alert} has a severity"
        );
        let per_node = r["expr"].as_str().unwrap().contains("by (node");
        if per_node {
            assert!(
                r["annotations"]["summary"]
                    .as_str()
                    .unwrap()
                    .contains("{{ $labels.node }}"),
                "{alert} is per node and names it"
            );
        }
    }
}

#[test]
fn the_component_makes_every_agent_scrapeable_by_its_node_address() {
    let docs: Vec<Value> = common::kustomize_with_component("prometheus");
    let kinds: BTreeSet<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(kinds.contains("PrometheusRule") && kinds.contains("PodMonitor"));
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let agent = ds["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "maintd")
        .unwrap();
    let env = agent["env"].as_array().unwrap();
    let listen = env
        .iter()
        .position(|e| e["name"] == "MAINTD_LISTEN")
        .unwrap();
    let pod_ip = env.iter().position(|e| e["name"] == "POD_IP").unwrap();
    assert_eq!(env[listen]["value"], "$(POD_IP):9477");
    assert!(pod_ip < listen, "POD_IP is defined before it is used");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert!(
            agent[probe]["httpGet"].get("host").is_none(),
            "the {probe} asks the pod's address, where the agent listens"
        );
    }
    let monitor = docs.iter().find(|d| d["kind"] == "PodMonitor").unwrap();
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    let port = agent["ports"][0]["name"].as_str().unwrap();
    assert_eq!(endpoint["port"], port);
    assert_eq!(
        endpoint["relabelings"][0]["targetLabel"], "node",
        "series carry the node the alerts name"
    );
}
