//! The agent as a real process, killed (SIGKILL, no cleanup) at several
//! points of a drain and started again: the drain completes, no static pod
//! manifest is lost, and the node carries maintd's taint once.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use maintd_sim::SimCluster;

fn spawn_agent(kubeconfig: &Path, static_dir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_maintd"))
        .args([
            "run",
            "--node",
            "node-a",
            "--listen",
            "",
            "--listen-local",
            "",
        ])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--static-pod-dir")
        .arg(static_dir)
        .env("MAINTD_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the maintd binary starts")
}

fn evictions(sim: &SimCluster) -> usize {
    sim.state
        .audit
        .entries()
        .iter()
        .filter(|e| e.verb == "evict" && e.code == 201)
        .count()
}

async fn drain_taints(client: &kube::Client) -> usize {
    let node = Api::<Node>::all(client.clone())
        .get("node-a")
        .await
        .unwrap();
    node.spec
        .unwrap()
        .taints
        .unwrap_or_default()
        .iter()
        .filter(|t| t.key == "maintd.io/draining")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_drain_resumes_and_loses_no_manifest() {
    let sim = scenario("realistic.yaml").await;
    let client = sim.client();
    // What deploy/ creates: `maintd run` checks for its namespace.
    create_namespace(&sim, "maintd").await;
    let dir = sim.static_pod_dir("node-a").unwrap();
    let stash = dir.join(".maintd-stash");
    let original = dir_files(&dir);
    assert_eq!(original.len(), 3);
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        kubeconfig.path(),
        maintd::testbed::agent_kubeconfig(&sim, "node-a"),
    )
    .unwrap();

    taint(&client, "node-a", "maintd.io/drain", Some("reboot")).await;
    // Kill points: early in the ordinary pods, deep into them, and while
    // static manifests are being moved.
    let mut agent = spawn_agent(kubeconfig.path(), &dir);
    for target in [3usize, 60] {
        eventually(&format!("{target} evictions"), || async {
            evictions(&sim) >= target
        })
        .await;
        agent.kill().unwrap();
        agent.wait().unwrap();
        agent = spawn_agent(kubeconfig.path(), &dir);
    }
    eventually("a static manifest left the kubelet's directory", || async {
        dir_files(&dir).len() < 3
    })
    .await;
    agent.kill().unwrap();
    agent.wait().unwrap();
    // Whatever moment it died at, every manifest is whole in one place.
    let mut both: Vec<_> = dir_files(&dir);
    both.extend(dir_files(&stash));
    both.sort();
    assert_eq!(both, original, "no manifest lost or damaged by the kill");

    let mut agent = spawn_agent(kubeconfig.path(), &dir);
    eventually("node-a drained", || async {
        let left = pods_on(&client, "node-a").await;
        left.iter().all(|p| {
            p.metadata
                .name
                .as_deref()
                .unwrap_or("")
                .starts_with("kube-proxy-")
        })
    })
    .await;
    assert!(dir_files(&dir).is_empty());
    assert_eq!(
        dir_files(&stash),
        original,
        "all three manifests wait in the stash"
    );
    assert_eq!(
        drain_taints(&client).await,
        1,
        "maintd's taint is on the node once"
    );

    // The maintenance ends while the agent is down; it undoes on start.
    agent.kill().unwrap();
    agent.wait().unwrap();
    taint(&client, "node-a", "maintd.io/drain", None).await;
    let mut agent = spawn_agent(kubeconfig.path(), &dir);
    eventually("the manifests are back", || async {
        dir_files(&dir) == original
    })
    .await;
    eventually("maintd's taint is gone", || async {
        drain_taints(&client).await == 0
    })
    .await;
    let node = Api::<Node>::all(client.clone())
        .get("node-a")
        .await
        .unwrap();
    assert_ne!(
        node.spec.unwrap().unschedulable,
        Some(true),
        "uncordoned: maintd cordoned it"
    );
    agent.kill().unwrap();
    agent.wait().unwrap();
}
