//! `maintd plan --node N` against a cluster: the stages, their pods, and
//! what is not drained and why — without changing anything.

use crate::common;

use std::process::Command;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_prints_the_stages_and_what_is_skipped_without_acting() {
    let sim = scenario("small.yaml").await;
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), sim.kubeconfig()).unwrap();
    let writes_before = sim.state.audit.entries().len();
    let run = |output: &'static str| {
        let path = kubeconfig.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_maintd"))
                .args(["plan", "--node", "node-a", "-o", output, "--kubeconfig"])
                .arg(path)
                .output()
                .unwrap()
        })
    };
    let text = run("text").await.unwrap();
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("stage 1: Default ≤ -5"), "{text}");
    // The bare pod's line warns as kubectl drain would.
    let bare = text
        .lines()
        .find(|l| l.contains("default/bare"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        bare.contains("no controller: it will not be recreated")
            && bare.contains("emptyDir data will be lost"),
        "{bare}"
    );
    // A skipped pod says why it is left alone.
    let (_, skipped) = text
        .split_once("not drained:")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        skipped.contains("default/pinned  opted out (label maintd.io/drain=skip)"),
        "{text}"
    );
    let json = run("json").await.unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let types: Vec<&str> = plan["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["podType"].as_str().unwrap())
        .collect();
    assert_eq!(types.first(), Some(&"Default"));
    assert_eq!(types.last(), Some(&"Static"));
    assert_eq!(
        sim.state.audit.entries().len(),
        writes_before,
        "planning writes nothing"
    );
}
