//! `maintd drain NODE --wait`, `maintd get` and `maintd undrain NODE
//! --wait` on the real control plane (Kubernetes 1.37): the NodeMaintenance
//! the command makes is one the API server takes, the node's agent drains
//! it, and the NodeDrain it writes reads back through the command as the
//! API server serves it (TLS, field selectors and watches on custom
//! resources).

use crate::common;

use std::process::Command;

use common::real::Real;
use serde_json::Value;

/// `maintd` as cluster-admin; (exit code, stdout, stderr).
fn maintd(real: &Real, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_maintd"))
        .args(args)
        .env("KUBECONFIG", real.admin_kubeconfig())
        .env("MAINTD_LOG", "warn")
        .output()
        .expect("maintd runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`maintd`], off the async threads.
async fn run(real: &Real, args: &[&str]) -> (Option<i32>, String, String) {
    let real = real.clone();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        maintd(&real, &args)
    })
    .await
    .expect("maintd ran")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintd_drain_and_undrain_a_real_node_and_get_shows_it() {
    let real = Real::get();
    let admin = real.admin().await;
    let ns = "real-cli";
    let node = "real-cli-a".to_string();
    real.namespace(&admin, ns).await;
    real.node(&admin, &node, serde_json::json!({})).await;
    for i in 0..2 {
        real.pod(&admin, ns, &format!("p{i}"), &node, 0).await;
    }
    let (agent, _manifests) = crate::real_drain::agent(&real, &node).await;

    let (code, out, err) = run(&real, &["drain", &node, "--wait", "--timeout", "3m"]).await;
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.starts_with("nodemaintenance.maintd.io/drain-real-cli-a created\n"),
        "{out}"
    );
    assert!(out.ends_with("node/real-cli-a drained\n"), "{out}");

    let (code, out, err) = run(&real, &["get", &node, "-o", "json"]).await;
    assert_eq!(code, Some(0), "{err}");
    let drain: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(drain["kind"], "NodeDrain");
    assert_eq!(drain["status"]["phase"], "Drained");
    assert_eq!(drain["status"]["maintenances"][0], "drain-real-cli-a");
    let (_, table, _) = run(&real, &["get", &node]).await;
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        row.get(..2),
        Some(&["real-cli-a", "Drained"][..]),
        "{table}"
    );

    let (code, out, err) = run(&real, &["undrain", &node, "--wait", "--timeout", "3m"]).await;
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.ends_with("node/real-cli-a uncordoned\n"), "{out}");
    let n = real.kubectl_ok(&["get", "node", &node, "-o", "json"]);
    let n: Value = serde_json::from_str(&n).unwrap();
    assert_ne!(n["spec"]["unschedulable"], true, "{n}");

    agent.stop().await;
    real.remove_nodes(&admin, &[node]).await;
    real.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}
