//! The node most real-node tests start from: deploy/ installed, and a
//! namespace of workloads of every kind maintd's plan orders, at several
//! priorities, each process taking its own time to stop.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use super::node::{NodeOptions, PATIENCE, RealNode, image_archive};
use super::workloads::{self, GRACE_SECONDS, create, create_cluster};

/// The workloads' namespace.
pub const NS: &str = "work";

/// How one app runs.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A Deployment of this many pods, with a budget keeping this many.
    Deployment(i32, Option<i32>),
    DaemonSet,
    /// A manifest in the kubelet's static pod directory.
    Static,
}

/// One app of the node: its pods leave in one stage of maintd's plan.
#[derive(Debug, Clone, Copy)]
pub struct App {
    pub name: &'static str,
    pub kind: Kind,
    pub class: Option<&'static str>,
    /// Seconds its process takes to stop after SIGTERM.
    pub stop: u32,
}

/// The priority classes the apps use.
pub const CLASSES: [(&str, i32); 2] = [("e2e-low", 1000), ("e2e-high", 100_000)];

/// The node's apps in the order maintd's default plan drains them:
/// ordinary pods by priority (a budget on `web`), DaemonSet pods, static
/// pods by priority.
pub const APPS: [App; 6] = [
    App {
        name: "batch",
        kind: Kind::Deployment(2, None),
        class: None,
        stop: 2,
    },
    App {
        name: "web",
        kind: Kind::Deployment(2, Some(1)),
        class: Some("e2e-low"),
        stop: 3,
    },
    App {
        name: "db",
        kind: Kind::Deployment(1, None),
        class: Some("e2e-high"),
        stop: 2,
    },
    App {
        name: "logs",
        kind: Kind::DaemonSet,
        class: None,
        stop: 2,
    },
    App {
        name: "static-a",
        kind: Kind::Static,
        class: None,
        stop: 2,
    },
    App {
        name: "static-b",
        kind: Kind::Static,
        class: Some("e2e-high"),
        stop: 1,
    },
];

/// A node with deploy/ installed (image tag `e2e`) and maintd's pod ready.
pub async fn installed(options: NodeOptions) -> (RealNode, kube::Client) {
    let node = RealNode::start(options).await;
    let client = node.admin().await;
    node.import_maintd(&image_archive(), "e2e").await;
    node.apply("e2e");
    node.maintd_pod(&client, PATIENCE).await;
    (node, client)
}

/// The static pod manifests `apps` put in the kubelet's directory: file
/// name → bytes.
pub fn manifests(node: &RealNode, apps: &[App]) -> BTreeMap<String, Vec<u8>> {
    apps.iter()
        .filter(|a| matches!(a.kind, Kind::Static))
        .map(|a| {
            let text = workloads::static_pod(NS, a.name, a.class, &node.busybox, a.stop);
            (format!("{}.yaml", a.name), text.into_bytes())
        })
        .collect()
}

/// Runs `apps` on the node; returns once every pod is Ready there, with
/// each app's pods (`namespace/name`).
pub async fn run_apps(
    node: &RealNode,
    client: &kube::Client,
    apps: &[App],
) -> BTreeMap<&'static str, Vec<String>> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("the workloads' namespace");
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
    crate::common::eventually_within("the namespace's default ServiceAccount", PATIENCE, || {
        let sa = sa.clone();
        async move { sa.get_opt("default").await.is_ok_and(|s| s.is_some()) }
    })
    .await;
    for (name, value) in CLASSES {
        create_cluster(client, &workloads::priority_class(name, value)).await;
    }
    for app in apps {
        match app.kind {
            Kind::Deployment(replicas, budget) => {
                let d = workloads::deployment(
                    NS,
                    app.name,
                    replicas,
                    app.class,
                    &node.busybox,
                    app.stop,
                );
                create(client, &d).await;
                if let Some(min) = budget {
                    create(client, &workloads::budget(NS, app.name, min)).await;
                }
            }
            Kind::DaemonSet => {
                create(
                    client,
                    &workloads::daemonset(NS, app.name, &node.busybox, app.stop),
                )
                .await
            }
            Kind::Static => {}
        }
    }
    for (file, bytes) in manifests(node, apps) {
        std::fs::write(node.manifests().join(file), bytes).expect("a static pod manifest");
    }
    let want: BTreeMap<&str, usize> = apps
        .iter()
        .map(|a| {
            let n = match a.kind {
                Kind::Deployment(r, _) => r as usize,
                Kind::DaemonSet | Kind::Static => 1,
            };
            (a.name, n)
        })
        .collect();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let lp = ListParams::default().fields(&format!("spec.nodeName={}", node.name));
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let all = pods.list(&lp).await.map(|l| l.items).unwrap_or_default();
        let mut by_app: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
        for p in &all {
            let app = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .and_then(|a| apps.iter().find(|x| x.name == a.as_str()));
            if let Some(app) = app
                && crate::common::is_ready(p)
            {
                by_app.entry(app.name).or_default().push(format!(
                    "{NS}/{}",
                    p.metadata.name.clone().unwrap_or_default()
                ));
            }
        }
        if want
            .iter()
            .all(|(a, n)| by_app.get(a).map_or(0, Vec::len) == *n)
        {
            return by_app;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the apps are not all Ready on {}: {by_app:?}, want {want:?}\n{}",
            node.name,
            node.kubectl(&["get", "pods", "-A", "-o", "wide"]).1
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Puts a taint on the node (`kubectl taint`).
pub fn taint(node: &RealNode, taint: &str) {
    node.kubectl_ok(&["taint", "node", &node.name, taint]);
}

/// The node's condition `type` as (status, reason).
pub async fn condition(client: &kube::Client, node: &str, type_: &str) -> Option<(String, String)> {
    let node: Node = Api::all(client.clone()).get(node).await.ok()?;
    node.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason.unwrap_or_default()))
}

/// Whether the node is cordoned, and maintd's taints on it.
pub async fn cordon_and_taints(client: &kube::Client, node: &str) -> (bool, Vec<String>) {
    let node: Node = Api::all(client.clone()).get(node).await.expect("the node");
    let spec = node.spec.unwrap_or_default();
    (
        spec.unschedulable == Some(true),
        spec.taints
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.key.starts_with("maintd.io/"))
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect(),
    )
}

/// Files directly in `dir` (not its dot-directories): name → bytes.
pub fn files(dir: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().is_file())
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        std::fs::read(e.path()).unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A static pod's mirror pod (`namespace/name`): named after the node.
pub fn mirror(app: &App, node: &str) -> String {
    format!("{NS}/{}-{node}", app.name)
}

/// Checks, from the API server's audit log, that `apps` (their pods
/// `pods`) left the node in plan order: maintd evicted the ordinary and
/// DaemonSet pods (never deleted them), each gone (the kubelet's final
/// delete) in at least the time its process takes to stop and within its
/// grace period; each stage started only once the previous one was gone,
/// the static pods' too. Returns the timeline, for the log.
pub fn assert_left_in_plan_order(
    node: &RealNode,
    pods: &BTreeMap<&'static str, Vec<String>>,
    apps: &[App],
) -> Vec<String> {
    let lives = super::timeline::pod_lives(&node.audit_log(), &node.name);
    let mut report = Vec::new();
    let mut previous_gone = None;
    for app in apps {
        let keys = match app.kind {
            Kind::Static => vec![mirror(app, &node.name)],
            _ => pods[app.name].clone(),
        };
        let mut stage_gone = None;
        for key in &keys {
            let life = lives.get(key).cloned().unwrap_or_default();
            assert!(
                life.deleted_by_maintd.is_empty(),
                "{key}: maintd evicts, it does not delete"
            );
            let gone = life
                .gone
                .unwrap_or_else(|| panic!("{key}: the kubelet never deleted it"));
            let started = match app.kind {
                Kind::Static => {
                    assert!(life.evicted.is_none(), "{key}: a static pod is not evicted");
                    // Stashed once the previous stage was gone.
                    previous_gone
                }
                _ => {
                    let evicted = life
                        .evicted
                        .unwrap_or_else(|| panic!("{key}: never evicted"));
                    if let Some(prev) = previous_gone {
                        assert!(
                            evicted >= prev,
                            "{key} was evicted at {evicted}, before the previous stage was gone ({prev})"
                        );
                    }
                    Some(evicted)
                }
            };
            if let Some(started) = started {
                let took = super::timeline::secs(started, gone);
                assert!(
                    took >= f64::from(app.stop) && took < GRACE_SECONDS as f64,
                    "{key} was gone {took:.2}s after its stage reached it; its process takes {}s to stop",
                    app.stop
                );
            }
            report.push(format!(
                "{key}: evicted {}, gone {gone} (refused {}x)",
                life.evicted.map_or("-".into(), |t| t.to_string()),
                life.refused
            ));
            stage_gone = stage_gone.max(Some(gone));
        }
        previous_gone = stage_gone;
    }
    report
}
