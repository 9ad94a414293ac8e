//! `maintd demo --json`, run as a user would run it: it exits 0 and its
//! events show the drain in plan order; with `--shutdown`, a reboot that
//! waited for the drain, within logind's budget.

use std::process::Command;

use serde_json::Value;

fn demo(args: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_maintd"))
        .arg("demo")
        .args(args)
        .env("MAINTD_LOG", "warn")
        .output()
        .expect("maintd runs");
    assert!(
        out.status.success(),
        "maintd demo {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn rank(e: &Value) -> (u8, i64) {
    let t = match e["pod_type"].as_str() {
        Some("Default") => 0,
        Some("DaemonSet") => 1,
        _ => 2,
    };
    (t, e["priority"].as_i64().unwrap())
}

#[test]
fn the_demo_drains_in_plan_order_and_undoes() {
    let evs = demo(&["--json"]);
    for e in &evs {
        for key in [
            "t_ms",
            "event",
            "node",
            "namespace",
            "pod",
            "pod_type",
            "priority",
            "stage",
        ] {
            assert!(e.get(key).is_some(), "{key} missing in {e}");
        }
    }
    let gone: Vec<(u8, i64)> = evs
        .iter()
        .filter(|e| e["event"] == "pod_gone")
        .map(rank)
        .collect();
    assert!(gone.len() >= 100, "{} pods drained", gone.len());
    let mut sorted = gone.clone();
    sorted.sort();
    assert_eq!(
        gone, sorted,
        "Default < DaemonSet < Static, priorities ascending within each"
    );
    let kinds: Vec<&str> = evs.iter().map(|e| e["event"].as_str().unwrap()).collect();
    let done = kinds
        .iter()
        .position(|k| *k == "drain_completed")
        .expect("drained");
    let undone = kinds
        .iter()
        .position(|k| *k == "undo_completed")
        .expect("undone");
    assert!(done < undone);
}

#[test]
fn the_shutdown_demo_waits_for_the_drain_within_the_budget() {
    let evs = demo(&["--json", "--shutdown"]);
    let kinds: Vec<&str> = evs.iter().map(|e| e["event"].as_str().unwrap()).collect();
    let preparing = kinds
        .iter()
        .position(|k| *k == "shutdown_preparing")
        .expect("PrepareForShutdown");
    let released = kinds
        .iter()
        .position(|k| *k == "shutdown_released")
        .expect("lock released");
    let evicted: Vec<usize> = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| **k == "pod_evicted")
        .map(|(i, _)| i)
        .collect();
    assert!(!evicted.is_empty() && evicted.iter().all(|i| preparing < *i && *i < released));
    let gone: Vec<(u8, i64)> = evs
        .iter()
        .filter(|e| e["event"] == "pod_gone")
        .map(rank)
        .collect();
    let mut sorted = gone.clone();
    sorted.sort();
    assert_eq!(gone, sorted);
    let shutdown = evs.last().unwrap();
    assert_eq!(shutdown["event"], "shutdown");
    assert_eq!(shutdown["timed_out"], false);
    assert!(shutdown["delayed_ms"].as_u64().unwrap() <= shutdown["budget_ms"].as_u64().unwrap());
}
