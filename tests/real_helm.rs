//! The chart on the real control plane (Kubernetes 1.37): `helm install`
//! of a release beside deploy/ (which the harness installed, cluster-wide
//! objects included), its objects accepted and its node confinement
//! policy confining its own agent, then `helm uninstall` leaving nothing
//! of it behind.

use crate::common;
use crate::helm::{chart, run_helm};

use std::path::Path;

use common::real::{PATIENCE, Real};
use serde_json::{Value, json};

/// The release, and its namespace: named apart from deploy/'s maintd, so
/// every object it makes (ClusterRoles and the admission policy
/// included) has a name of its own.
const RELEASE: &str = "maintd-helm";
const NAMESPACE: &str = "maintd-helm";

/// Everything the chart offers that this cluster can take: medik8s (the
/// harness installed medik8s' CRD and its Lease namespace, so the release
/// only adds its Role there), FleetLock, the Grafana dashboard. Not the
/// Prometheus Operator's PodMonitor and PrometheusRule: this cluster has
/// no Prometheus Operator, so no such kinds. The DaemonSet runs on no
/// node: the other tests' nodes are theirs alone.
const VALUES: &[&str] = &[
    "medik8s.enabled=true",
    "medik8s.createLeaseNamespace=false",
    "fleetlock.enabled=true",
    "grafana.dashboard.enabled=true",
    "nodeSelector.maintd\\.io/helm-test=no-node",
];

fn helm_ok(home: &Path, args: &[&str]) -> String {
    let (ok, out, err) = run_helm(home, args);
    assert!(ok, "helm {}:\n{out}\n{err}", args.join(" "));
    out
}

/// `kubectl get` arguments for `o`.
fn get_args(o: &Value) -> Vec<String> {
    let kind = o["kind"].as_str().unwrap_or_default();
    let group = o["apiVersion"]
        .as_str()
        .and_then(|v| v.rsplit_once('/'))
        .map(|(g, _)| g)
        .unwrap_or("");
    let resource = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let mut args = vec![
        "get".to_string(),
        resource,
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        "--ignore-not-found".to_string(),
        "-o".to_string(),
        "name".to_string(),
    ];
    if let Some(ns) = o["metadata"]["namespace"].as_str() {
        args.extend(["-n".to_string(), ns.to_string()]);
    }
    args
}

fn exists(real: &Real, o: &Value) -> bool {
    let args = get_args(o);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    !real.kubectl_ok(&args).trim().is_empty()
}

/// A kubeconfig with the release's ServiceAccount and a token bound to
/// `node`, as its agent on that node would have.
fn agent_kubeconfig(real: &Real, node: &str) -> tempfile::NamedTempFile {
    let token = real.kubectl_ok(&[
        "create",
        "token",
        RELEASE,
        "-n",
        NAMESPACE,
        "--bound-object-kind",
        "Node",
        "--bound-object-name",
        node,
        "--duration",
        "1h",
    ]);
    let server = std::fs::read_to_string(real.dir().join("server")).expect("the API's address");
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {}\n    certificate-authority: {}\n\
         contexts:\n- name: agent\n  context:\n    cluster: e2e\n    user: agent\n\
         current-context: agent\nusers:\n- name: agent\n  user:\n    token: {}\n",
        server.trim(),
        real.dir().join("pki/ca.crt").display(),
        token.trim()
    );
    let file = tempfile::NamedTempFile::new().expect("a temporary file");
    std::fs::write(file.path(), config).expect("the agent's kubeconfig is written");
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_installs_beside_deploy_confines_its_agent_and_uninstalls_without_a_trace() {
    let real = Real::get();
    let admin = real.admin().await;
    let (own, other) = ("helm-a".to_string(), "helm-b".to_string());
    for n in [&own, &other] {
        real.node(&admin, n, json!({"test": "helm"})).await;
    }
    let home = tempfile::tempdir().expect("a directory for helm");
    let kubeconfig = real.admin_kubeconfig();
    let kubeconfig = kubeconfig.to_str().expect("a UTF-8 path");
    let chart = chart();
    let chart = chart.to_str().expect("a UTF-8 path");

    let mut install = vec![
        "install",
        RELEASE,
        chart,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--kubeconfig",
        kubeconfig,
        "--wait",
        "--timeout",
        "2m",
    ];
    for v in VALUES {
        install.extend(["--set", v]);
    }
    let said = helm_ok(home.path(), &install);
    assert!(said.contains("STATUS: deployed"), "{said}");
    // The CRDs were there (deploy/'s): Helm leaves them as they are.
    let manifest = helm_ok(
        home.path(),
        &[
            "get",
            "manifest",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            kubeconfig,
        ],
    );
    let objects: Vec<Value> = serde_saphyr::from_multiple::<Value>(&manifest)
        .expect("helm's manifest is YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect();
    let mut kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(
        kinds,
        vec![
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "DaemonSet",
            "Role",
            "RoleBinding",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ],
        "the kinds the release made"
    );
    for o in &objects {
        assert!(
            exists(&real, o),
            "{} {} is not there",
            o["kind"],
            o["metadata"]["name"]
        );
    }

    // The release's agent may change its own node (the chart's RBAC) and
    // no other (the chart's policy, not deploy/'s: that one names deploy/'s
    // ServiceAccount). Dry runs: admission runs, nothing changes. The API
    // server loads a new policy a moment after it is made.
    let agent = agent_kubeconfig(&real, &own);
    let agent = agent.path().to_str().expect("a UTF-8 path").to_string();
    let cordon = r#"{"spec":{"unschedulable":true}}"#;
    let patch = |node: &str| {
        common::real::kubectl(
            Path::new(&agent),
            &["patch", "node", node, "--dry-run=server", "-p", cordon],
            None,
        )
    };
    let policy = format!("{RELEASE}-node-confinement");
    common::eventually_within(
        "the release's policy refuses another node",
        PATIENCE,
        || {
            let (ok, _, err) = patch(&other);
            let refused = !ok
                && err.contains(&format!("ValidatingAdmissionPolicy '{policy}'"))
                && err.contains(&format!(
                    "maintd on node {own} may change only its own Node, not {other}"
                ));
            async move { refused }
        },
    )
    .await;
    let (ok, _, err) = patch(&own);
    assert!(ok, "the release's agent may cordon its own node: {err}");

    let said = helm_ok(
        home.path(),
        &[
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            kubeconfig,
            "--wait",
            "--timeout",
            "2m",
        ],
    );
    assert!(said.contains("uninstalled"), "{said}");
    for o in &objects {
        let (real, o) = (real.clone(), o.clone());
        let what = format!("{} {} is gone", o["kind"], o["metadata"]["name"]);
        common::eventually_within(&what, PATIENCE, || {
            let gone = !exists(&real, &o);
            async move { gone }
        })
        .await;
    }
    // Nor is the release's own record left.
    let (ok, out, err) = run_helm(
        home.path(),
        &[
            "list",
            "--all",
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            kubeconfig,
            "-q",
        ],
    );
    assert!(ok && out.trim().is_empty(), "helm list: {out}{err}");
    let secrets = real.kubectl_ok(&[
        "get",
        "secrets",
        "-n",
        NAMESPACE,
        "-l",
        "owner=helm",
        "-o",
        "name",
    ]);
    assert!(secrets.trim().is_empty(), "release records left: {secrets}");
    // deploy/'s own objects are untouched.
    for (kind, name) in [
        ("clusterrole", "maintd"),
        ("validatingadmissionpolicy", "maintd-node-confinement"),
        ("crd", "nodemaintenances.maintd.io"),
    ] {
        let got = real.kubectl_ok(&["get", kind, name, "-o", "name"]);
        assert!(!got.trim().is_empty(), "deploy/'s {kind} {name} is gone");
    }

    real.kubectl_ok(&["delete", "namespace", NAMESPACE, "--wait=false"]);
    real.remove_nodes(&admin, &[own, other]).await;
}
