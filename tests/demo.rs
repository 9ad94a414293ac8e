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
    // The lock went because the node was drained, not because time ran
    // out: the reboot waited only as long as the drain needed.
    assert!(
        evs[released]["message"]
            .as_str()
            .is_some_and(|m| m.contains("drained")),
        "{}",
        evs[released]
    );
    assert!(
        !kinds.contains(&"drain_failed"),
        "nothing was cut short by the budget"
    );
    let last_gone = kinds.iter().rposition(|k| *k == "pod_gone").unwrap();
    assert!(last_gone < released, "every pod gone before the release");
    let shutdown = evs.last().unwrap();
    assert_eq!(shutdown["event"], "shutdown");
    assert_eq!(shutdown["timed_out"], false);
    assert!(shutdown["delayed_ms"].as_u64().unwrap() <= shutdown["budget_ms"].as_u64().unwrap());
}

/// `maintd demo` as a newcomer runs it (stdout a pipe, the default log
/// level): the story alone, short enough to read (evictions said per
/// workload, a budget's refusal once), no log line on either stream, the
/// stages in order, each pod evicted inside its own stage; the agent's log
/// is in the file it names.
#[test]
fn the_demo_prints_its_story_in_stage_order_and_logs_to_a_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_maintd"))
        .arg("demo")
        .env_remove("MAINTD_LOG")
        .output()
        .expect("maintd runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "maintd demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in stdout.lines() {
        // tracing's lines: a level word and an RFC 3339 time, or colours.
        let log_like = [" INFO ", " WARN ", " DEBUG ", " ERROR ", "\x1b["]
            .iter()
            .any(|w| line.contains(w))
            || line.get(..4).is_some_and(|y| y.parse::<u16>().is_ok()) && line.contains('T');
        assert!(!log_like, "a log line in the story: {line}");
    }
    // Stage headers 1..n, each closed by its "done" line before the next.
    let mut open: Option<u64> = None;
    let mut last = 0;
    let mut evicted_in_stage = 0;
    for line in stdout.lines().map(str::trim) {
        let stage_no = |rest: &str| rest.split_whitespace().next().and_then(|n| n.parse().ok());
        if let Some(rest) = line.split_once("stage ").map(|(_, r)| r) {
            let n: Option<u64> = stage_no(rest);
            if rest.contains(" — ") {
                assert_eq!(open, None, "stage {n:?} starts before {open:?} is done");
                assert_eq!(n, Some(last + 1), "stages out of order:\n{stdout}");
                open = n;
            } else if rest.contains(" done ") {
                assert_eq!(n, open, "stage {n:?} done while {open:?} runs");
                last = n.unwrap_or(0);
                open = None;
            }
        } else if let Some((_, what)) = line.split_once("evicted ") {
            assert!(open.is_some(), "an eviction outside a stage: {line}");
            // "25 pods of default/batch-worker", or one pod's name.
            evicted_in_stage += what
                .trim()
                .split_once(" pods of ")
                .and_then(|(n, _)| n.parse::<usize>().ok())
                .unwrap_or(1);
        }
    }
    let lines = stdout.lines().count();
    assert!(lines <= 150, "{lines} lines:\n{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains(" WARN ") && !stderr.contains(" INFO "),
        "log lines on stderr:\n{stderr}"
    );
    assert!(last >= 4, "{last} stages:\n{stdout}");
    assert!(evicted_in_stage >= 100, "{evicted_in_stage} evictions");
    let drained = stdout.find("node drained").expect("drained");
    let back = stdout.find("back in service").expect("undone");
    assert!(drained < back);
    let log = stdout
        .lines()
        .find_map(|l| l.strip_prefix("the agent's log: "))
        .expect("the story names the log file");
    let logged = std::fs::read_to_string(log).expect("the log file exists");
    assert!(logged.contains("INFO"), "the log file has the agent's log");
    let _ = std::fs::remove_file(log);
    let picture = stdout
        .lines()
        .find_map(|l| l.strip_prefix("the drain as a picture: "))
        .expect("the story names the drain's picture");
    let svg = std::fs::read_to_string(picture).expect("the picture exists");
    assert!(
        svg.starts_with("<svg") && svg.contains("node-a drained in"),
        "{svg}"
    );
    let _ = std::fs::remove_file(picture);
}
