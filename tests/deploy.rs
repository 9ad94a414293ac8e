//! deploy/: the CRD matches the Rust types, every manifest parses into the
//! Kubernetes types, and the RBAC grants exactly the calls the agent makes,
//! in both variants (`deploy/`, and `deploy/medik8s/` with medik8s
//! compatibility). The manifests are rendered by `kubectl kustomize`, as
//! `kubectl apply -k` renders them.

use crate::common;

use std::path::{Path, PathBuf};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

#[test]
fn crd_yaml_matches_the_rust_types() {
    let want = maintd::api::crd_yaml().unwrap();
    let have = std::fs::read_to_string(deploy().join("base/crd.yaml")).unwrap();
    assert!(
        have == want,
        "deploy/base/crd.yaml is out of date with src/api; regenerate it with \
         `cargo run -- crd > deploy/base/crd.yaml`"
    );
}

/// Every object of deploy/, typed.
#[derive(Default)]
struct Manifests {
    namespaces: Vec<Namespace>,
    crds: Vec<CustomResourceDefinition>,
    accounts: Vec<ServiceAccount>,
    cluster_roles: Vec<ClusterRole>,
    cluster_bindings: Vec<ClusterRoleBinding>,
    roles: Vec<Role>,
    bindings: Vec<RoleBinding>,
    daemonsets: Vec<DaemonSet>,
    policies: Vec<ValidatingAdmissionPolicy>,
    policy_bindings: Vec<ValidatingAdmissionPolicyBinding>,
}

fn typed<T: serde::de::DeserializeOwned>(file: &str, doc: &Value) -> T {
    serde_json::from_value(doc.clone()).unwrap_or_else(|e| {
        panic!(
            "{file}: {} {} does not parse: {e}",
            doc["kind"], doc["metadata"]["name"]
        )
    })
}

fn pod_spec(ds: &DaemonSet) -> &k8s_openapi::api::core::v1::PodSpec {
    ds.spec.template.spec.as_ref().unwrap()
}

/// The objects `kubectl apply -k deploy/<variant>` would apply, typed.
fn manifests(variant: &str) -> Manifests {
    let dir = deploy().join(variant);
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("kubectl is installed on this machine (it renders deploy/)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let file = format!("deploy/{variant}");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("{file} does not render to YAML: {e}"));
    let mut m = Manifests::default();
    for doc in docs.iter().filter(|d| !d.is_null()) {
        match doc["kind"].as_str().unwrap_or("") {
            "Namespace" => m.namespaces.push(typed(&file, doc)),
            "CustomResourceDefinition" => m.crds.push(typed(&file, doc)),
            "ServiceAccount" => m.accounts.push(typed(&file, doc)),
            "ClusterRole" => m.cluster_roles.push(typed(&file, doc)),
            "ClusterRoleBinding" => m.cluster_bindings.push(typed(&file, doc)),
            "Role" => m.roles.push(typed(&file, doc)),
            "RoleBinding" => m.bindings.push(typed(&file, doc)),
            "DaemonSet" => m.daemonsets.push(typed(&file, doc)),
            "ValidatingAdmissionPolicy" => m.policies.push(typed(&file, doc)),
            "ValidatingAdmissionPolicyBinding" => m.policy_bindings.push(typed(&file, doc)),
            other => panic!("{file}: unexpected kind {other:?}"),
        }
    }
    m
}

/// Every API call the agent makes: (apiGroup, resource, verb, namespace of
/// the object, None for cluster-scoped or all namespaces). See
/// src/index.rs (list/watch), src/cluster.rs (node edits, eviction,
/// deletion) and the NodeMaintenance trigger and reporters.
const AGENT_CALLS: &[(&str, &str, &str, Option<&str>)] = &[
    ("", "pods", "list", None),
    ("", "pods", "watch", None),
    ("", "pods", "delete", None),
    ("", "pods/eviction", "create", None),
    ("", "nodes", "get", None),
    ("", "nodes", "list", None),
    ("", "nodes", "watch", None),
    ("", "nodes", "patch", None),
    ("", "nodes/status", "patch", None),
    // KEP-4563 EvictionRequests (src/drain/eviction_requests.rs).
    ("lifecycle.k8s.io", "evictionrequests", "get", None),
    ("lifecycle.k8s.io", "evictionrequests", "list", None),
    ("lifecycle.k8s.io", "evictionrequests", "create", None),
    ("lifecycle.k8s.io", "evictionrequests", "patch", None),
    ("lifecycle.k8s.io", "evictionrequests", "delete", None),
    ("lifecycle.k8s.io", "evictions", "list", None),
    // Volumes of drained pods, waited for until detached (src/drain/volumes.rs).
    ("", "persistentvolumeclaims", "get", None),
    ("", "persistentvolumes", "get", None),
    ("storage.k8s.io", "volumeattachments", "get", None),
    ("policy", "poddisruptionbudgets", "list", None),
    ("policy", "poddisruptionbudgets", "watch", None),
    ("maintd.io", "nodemaintenances", "get", None),
    ("maintd.io", "nodemaintenances", "list", None),
    ("maintd.io", "nodemaintenances", "watch", None),
    ("maintd.io", "nodemaintenances/status", "patch", None),
    ("maintd.io", "nodedrains", "get", None),
    ("maintd.io", "nodedrains", "list", None),
    ("maintd.io", "nodedrains", "watch", None),
    ("maintd.io", "nodedrains", "create", None),
    ("maintd.io", "nodedrains", "patch", None),
    ("maintd.io", "nodedrains/status", "patch", None),
    ("events.k8s.io", "events", "create", None),
    ("events.k8s.io", "events", "patch", None),
    ("coordination.k8s.io", "leases", "get", Some("maintd")),
    ("coordination.k8s.io", "leases", "list", Some("maintd")),
    ("coordination.k8s.io", "leases", "watch", Some("maintd")),
    ("coordination.k8s.io", "leases", "create", Some("maintd")),
    ("coordination.k8s.io", "leases", "update", Some("maintd")),
];

/// What the agent adds with `--medik8s` (src/trigger/medik8s.rs,
/// src/report/medik8s.rs, and the finalizer in src/agent/mod.rs).
const MEDIK8S_CALLS: &[(&str, &str, &str, Option<&str>)] = &[
    (MEDIK8S, "nodemaintenances", "list", None),
    (MEDIK8S, "nodemaintenances", "watch", None),
    (MEDIK8S, "nodemaintenances", "patch", None),
    (MEDIK8S, "nodemaintenances/status", "patch", None),
    // medik8s' coordination Lease of the node (src/agent/medik8s_lease.rs).
    (COORDINATION, "leases", "get", Some("medik8s-leases")),
    (COORDINATION, "leases", "create", Some("medik8s-leases")),
    (COORDINATION, "leases", "update", Some("medik8s-leases")),
];
const COORDINATION: &str = "coordination.k8s.io";
const MEDIK8S: &str = "nodemaintenance.medik8s.io";

fn grants(rule: &PolicyRule, group: &str, resource: &str, verb: &str) -> bool {
    let has =
        |list: &Option<Vec<String>>, x: &str| list.iter().flatten().any(|v| v == x || v == "*");
    has(&rule.api_groups, group)
        && has(&rule.resources, resource)
        && rule.verbs.iter().any(|v| v == verb || v == "*")
}

/// The rules that apply to the service account, each with the namespace
/// it is limited to (None: cluster-wide).
fn rules_for(m: &Manifests, sa_ns: &str, sa: &str) -> Vec<(PolicyRule, Option<String>)> {
    let is_sa = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount" && s.name == sa && s.namespace.as_deref() == Some(sa_ns)
        })
    };
    let mut out = Vec::new();
    for b in m.cluster_bindings.iter().filter(|b| is_sa(&b.subjects)) {
        assert_eq!(b.role_ref.kind, "ClusterRole");
        let role = m
            .cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(&b.role_ref.name))
            .unwrap_or_else(|| panic!("ClusterRole {} is not in deploy/", b.role_ref.name));
        out.extend(role.rules.iter().flatten().map(|r| (r.clone(), None)));
    }
    for b in m.bindings.iter().filter(|b| is_sa(&b.subjects)) {
        let ns = b.metadata.namespace.clone();
        assert_eq!(b.role_ref.kind, "Role", "RoleBinding {:?}", b.metadata.name);
        let role = m
            .roles
            .iter()
            .find(|r| {
                r.metadata.name.as_deref() == Some(&b.role_ref.name) && r.metadata.namespace == ns
            })
            .unwrap_or_else(|| panic!("Role {} is not in deploy/", b.role_ref.name));
        out.extend(role.rules.iter().flatten().map(|r| (r.clone(), ns.clone())));
    }
    out
}

/// The RBAC of `variant` grants each of `calls` and nothing else.
fn assert_rbac_grants_exactly(variant: &str, calls: &[(&str, &str, &str, Option<&str>)]) {
    let m = manifests(variant);
    let ds = &m.daemonsets[0];
    let sa = pod_spec(ds).service_account_name.clone().unwrap();
    let sa_ns = ds.metadata.namespace.clone().unwrap();
    assert!(
        m.accounts
            .iter()
            .any(|a| a.metadata.name.as_deref() == Some(&sa)
                && a.metadata.namespace.as_deref() == Some(&sa_ns)),
        "the DaemonSet's ServiceAccount {sa_ns}/{sa} is in deploy/"
    );
    let rules = rules_for(&m, &sa_ns, &sa);
    for (group, resource, verb, ns) in calls {
        let allowed = rules.iter().any(|(r, scope)| {
            grants(r, group, resource, verb) && (scope.is_none() || scope.as_deref() == *ns)
        });
        assert!(
            allowed,
            "deploy/{variant}: the agent's call {verb} {resource} (group {group:?}, namespace {ns:?}) is not granted"
        );
    }
    // Least privilege: no wildcard, and every granted verb is a call the agent makes.
    for (rule, scope) in &rules {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    assert!(
                        calls.iter().any(|(g, r, v, ns)| g == group
                            && r == resource
                            && v == verb
                            && (scope.is_none() || scope == &ns.map(str::to_string))),
                        "deploy/{variant} grants {verb} {resource} (group {group:?}, scope {scope:?}), which the agent never uses"
                    );
                }
            }
        }
        assert!(rule.resource_names.is_none() && rule.non_resource_urls.is_none());
    }
}

#[test]
fn rbac_grants_every_call_the_agent_makes_and_nothing_else() {
    assert_rbac_grants_exactly("", AGENT_CALLS);
}

#[test]
fn the_medik8s_variant_grants_exactly_what_the_medik8s_trigger_adds() {
    let calls: Vec<_> = AGENT_CALLS.iter().chain(MEDIK8S_CALLS).copied().collect();
    assert_rbac_grants_exactly("medik8s", &calls);
    let m = manifests("medik8s");
    let env = |ds: &DaemonSet| pod_spec(ds).containers[0].env.clone().unwrap_or_default();
    let on = env(&m.daemonsets[0])
        .into_iter()
        .find(|e| e.name == "MAINTD_MEDIK8S")
        .and_then(|e| e.value);
    assert_eq!(on.as_deref(), Some("true"), "the overlay turns the flag on");
    assert!(
        env(&manifests("").daemonsets[0])
            .iter()
            .all(|e| e.name != "MAINTD_MEDIK8S"),
        "off unless asked for"
    );
    // Everything else is the base, with medik8s' Lease namespace.
    let namespaces: Vec<_> = m
        .namespaces
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    assert!(namespaces.contains(&"medik8s-leases"), "{namespaces:?}");
    assert_eq!(m.crds.len(), 2);
    assert_eq!(m.daemonsets.len(), 1);
}

#[test]
fn daemonset_runs_everywhere_with_what_the_agent_needs_and_little_else() {
    let m = manifests("");
    assert_eq!(m.namespaces[0].metadata.name.as_deref(), Some("maintd"));
    let mut crds: Vec<_> = m
        .crds
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    crds.sort();
    assert_eq!(crds, ["nodedrains.maintd.io", "nodemaintenances.maintd.io"]);
    let ds = &m.daemonsets[0];
    let pod = pod_spec(ds);
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
    assert_eq!(pod.host_network, Some(true));
    let tol = pod.tolerations.as_ref().unwrap();
    assert_eq!(tol.len(), 1);
    assert_eq!(tol[0].operator.as_deref(), Some("Exists"));
    assert!(
        tol[0].key.is_none() && tol[0].effect.is_none(),
        "tolerates every taint"
    );

    // Two containers: no one of them both root and holding API credentials.
    assert_eq!(
        pod.automount_service_account_token,
        Some(false),
        "the token is mounted only where it is needed"
    );
    let volumes = pod.volumes.as_ref().unwrap();
    let volume = |name: &str| volumes.iter().find(|v| v.name == name).unwrap();
    let host_path = |name: &str| volume(name).host_path.as_ref().map(|h| h.path.clone());
    let credentials = |c: &k8s_openapi::api::core::v1::Container| {
        c.volume_mounts.iter().flatten().any(|m| {
            m.mount_path == "/var/run/secrets/kubernetes.io/serviceaccount"
                && volume(&m.name).projected.as_ref().is_some_and(|p| {
                    p.sources
                        .iter()
                        .flatten()
                        .any(|s| s.service_account_token.is_some())
                })
        })
    };
    let user = |c: &k8s_openapi::api::core::v1::Container| {
        c.security_context
            .as_ref()
            .and_then(|s| s.run_as_user)
            .or(pod.security_context.as_ref().and_then(|s| s.run_as_user))
    };
    for c in &pod.containers {
        // No runAsUser is the image's user, root until told otherwise.
        let root = user(c).is_none_or(|u| u == 0);
        assert!(
            !(root && credentials(c)),
            "container {} is root and holds API credentials",
            c.name
        );
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", c.name);
        assert_ne!(sc.privileged, Some(true), "{}", c.name);
        let caps = sc.capabilities.as_ref().unwrap();
        assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert!(caps.add.as_ref().is_none_or(|a| a.is_empty()));
        let req = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert!(req.contains_key("cpu") && req.contains_key("memory"));
    }
    let host_paths: Vec<_> = volumes
        .iter()
        .filter_map(|v| v.host_path.as_ref().map(|h| h.path.as_str()))
        .collect();
    assert!(
        host_paths
            .iter()
            .all(|p| !"/etc/kubernetes/admin.conf".starts_with(p)
                && !"/etc/kubernetes/pki".starts_with(p)),
        "nothing of /etc/kubernetes but the manifests: {host_paths:?}"
    );

    // The agent: credentials, a non-root user, nothing of the host.
    let agent = pod.containers.iter().find(|c| c.name == "maintd").unwrap();
    assert!(credentials(agent));
    let agent_sc = agent.security_context.as_ref().unwrap();
    assert_eq!(agent_sc.run_as_non_root, Some(true));
    let agent_uid = agent_sc.run_as_user.unwrap();
    let agent_gid = agent_sc.run_as_group.unwrap();
    assert_ne!(agent_uid, 0);
    for m in agent.volume_mounts.iter().flatten() {
        assert!(
            host_path(&m.name).is_none(),
            "the agent mounts {} from the host",
            m.mount_path
        );
    }
    let env_of = |c: &k8s_openapi::api::core::v1::Container, name: &str| {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    for (name, path) in [
        ("NODE_NAME", "spec.nodeName"),
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let e = agent
            .env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("{name} is set"));
        let field = e
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .unwrap();
        assert_eq!(field.field_path, path, "{name}");
    }
    assert!(
        env_of(agent, "MAINTD_LISTEN")
            .unwrap()
            .starts_with("127.0.0.1:")
    );
    for probe in [&agent.readiness_probe, &agent.liveness_probe] {
        let get = probe.as_ref().and_then(|p| p.http_get.as_ref()).unwrap();
        assert_eq!(
            get.host.as_deref(),
            Some("127.0.0.1"),
            "probes use loopback"
        );
    }

    // The node helper: the host's bus and static pods, no credentials; it
    // and the agent meet on sockets in a volume of their own.
    let helper = pod
        .containers
        .iter()
        .find(|c| c.args.as_deref() == Some(&["node-helper".to_string()][..]))
        .expect("a node helper container");
    assert!(!credentials(helper));
    let shared = |c: &k8s_openapi::api::core::v1::Container, var: &str| {
        let path = env_of(c, var).unwrap_or_else(|| panic!("{var} set on {}", c.name));
        let m = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| Path::new(&path).starts_with(&m.mount_path))
            .unwrap_or_else(|| panic!("{path} is mounted in {}", c.name));
        assert!(
            volume(&m.name).empty_dir.is_some(),
            "{path} is the pod's own"
        );
        (m.name.clone(), path)
    };
    assert_eq!(
        shared(agent, "MAINTD_NODE_HELPER"),
        shared(helper, "MAINTD_NODE_HELPER")
    );
    assert_eq!(
        shared(agent, "MAINTD_LISTEN_LOCAL"),
        shared(helper, "MAINTD_AGENT_SOCKET")
    );
    assert_eq!(
        env_of(helper, "MAINTD_AGENT_UID"),
        Some(agent_uid.to_string())
    );
    assert_eq!(
        env_of(helper, "MAINTD_AGENT_GID"),
        Some(agent_gid.to_string())
    );
    let groups = pod
        .security_context
        .as_ref()
        .unwrap()
        .supplemental_groups
        .clone();
    assert!(
        groups.unwrap_or_default().contains(&agent_gid),
        "the helper (no capability) is in the agent's group to reach its socket"
    );
    assert_eq!(
        env_of(helper, "MAINTD_HOST_SOCKET").as_deref(),
        Some(maintd::cli::DEFAULT_SOCKET)
    );
    let mounts: Vec<_> = helper
        .volume_mounts
        .iter()
        .flatten()
        .map(|v| (v.name.as_str(), v.mount_path.as_str()))
        .collect();
    // The bus socket, the host's socket directory, and one mount holding
    // both the static pod directory and its stash (renames between two
    // mounts fail with EXDEV). Not /etc/kubernetes: it holds admin.conf
    // and the cluster's keys.
    for path in [
        "/run/dbus/system_bus_socket",
        maintd::cli::DEFAULT_SOCKET,
        "/etc/kubernetes/manifests",
        "/etc/kubernetes/manifests/.maintd-stash",
    ] {
        let (vol, at) = mounts
            .iter()
            .find(|(_, at)| Path::new(path).starts_with(at))
            .unwrap_or_else(|| panic!("{path} is mounted"));
        let host = host_path(vol).unwrap();
        assert_eq!(host, *at, "{path} is the host's own");
    }
    let stash_mount = mounts
        .iter()
        .find(|(_, at)| "/etc/kubernetes/manifests/.maintd-stash".starts_with(at));
    let dir_mount = mounts
        .iter()
        .find(|(_, at)| "/etc/kubernetes/manifests".starts_with(at));
    assert_eq!(
        stash_mount, dir_mount,
        "the static pod directory and its stash share one mount"
    );
    // The kubelet's config, for its staticPodPath: that file only, read-only.
    let kubelet = helper
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == maintd::drain::static_path::KUBELET_CONFIGS[0])
        .expect("the kubelet config is mounted where the helper looks");
    assert_eq!(kubelet.read_only, Some(true));
    assert_eq!(
        host_path(&kubelet.name).as_deref(),
        Some(maintd::drain::static_path::KUBELET_CONFIGS[0])
    );
}

/// Runs one agent (with --medik8s) through every kind of maintenance on
/// the simulated cluster and checks each request it actually made against
/// deploy/'s RBAC and against the lists above: the lists cannot drift from
/// what the code does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_an_agent_makes_is_granted() {
    use common::kubectl::Kubectl;
    use common::{endpoint, eventually, taint};
    use maintd::drain::progress::Phase;

    let sim = common::scenario("small.yaml").await;
    let k = Kubectl::new(&sim);
    k.ok(&["apply", "-k", deploy().join("medik8s").to_str().unwrap()])
        .await;
    let medik8s_crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/medik8s-crd.yaml");
    k.ok(&["apply", "-f", medik8s_crd.to_str().unwrap()]).await;

    let mut config =
        maintd::config::Config::for_node("node-a", sim.static_pod_dir("node-a").unwrap());
    config.medik8s = true;
    let socket_dir = tempfile::tempdir().unwrap();
    let local = socket_dir.path().join("maintd.sock");
    config.listen_local = Some(local.clone());
    let agent = maintd::agent::Agent::new(config, maintd::testbed::agent_client(&sim, "node-a"));
    let progress = agent.progress().clone();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(agent.run(stop.clone()));
    let phase_is = |want: Phase| {
        let p = progress.clone();
        move || {
            let now = p.status().phase;
            async move { now == want }
        }
    };

    // A drain taint, then its removal.
    let client = sim.client();
    taint(&client, "node-a", "maintd.io/drain", Some("kernel")).await;
    eventually("drained for the taint", phase_is(Phase::Drained)).await;
    taint(&client, "node-a", "maintd.io/drain", None).await;
    eventually("undone", phase_is(Phase::Idle)).await;
    // A NodeMaintenance, then its deletion.
    k.apply_yaml(
        "apiVersion: maintd.io/v1alpha1\nkind: NodeMaintenance\nmetadata:\n  name: m\nspec:\n  nodeName: node-a\n  stage: Drain\n",
    )
    .await;
    eventually("drained for the NodeMaintenance", phase_is(Phase::Drained)).await;
    let k_ref = &k;
    eventually("its status written", || async move {
        k_ref
            .json(&["get", "nodemaintenances.maintd.io", "m"])
            .await["status"]["drainedNodes"]
            == 1
    })
    .await;
    k.ok(&["delete", "nodemaintenances.maintd.io", "m"]).await;
    eventually("undone", phase_is(Phase::Idle)).await;
    // A medik8s object its operator had handled, then its deletion.
    k.apply_yaml(
        "apiVersion: nodemaintenance.medik8s.io/v1beta1\nkind: NodeMaintenance\nmetadata:\n  name: m8\n  finalizers: [foregroundDeleteNodeMaintenance]\nspec:\n  nodeName: node-a\n",
    )
    .await;
    eventually("its medik8s status written", || async move {
        k_ref
            .json(&["get", "nodemaintenances.nodemaintenance.medik8s.io", "m8"])
            .await["status"]["phase"]
            == "Succeeded"
    })
    .await;
    k.ok(&[
        "delete",
        "nodemaintenances.nodemaintenance.medik8s.io",
        "m8",
        "--wait=false",
    ])
    .await;
    eventually("the medik8s object is let go", || async move {
        !k_ref
            .run(&["get", "nodemaintenances.nodemaintenance.medik8s.io", "m8"])
            .await
            .0
    })
    .await;
    // A local drain, which takes a reboot slot (a Lease), then undrain.
    let (code, body) =
        endpoint::request(&local, "POST", "/v1/drain", r#"{"reason": "os update"}"#).await;
    assert_eq!(code, 202, "{body}");
    eventually("drained for the local request", phase_is(Phase::Drained)).await;
    let (code, body) = endpoint::request(&local, "POST", "/v1/undrain", "").await;
    assert!(code < 300, "{code} {body}");
    eventually("undone", phase_is(Phase::Idle)).await;
    stop.cancel();

    // What the simulated API server asked its authorizer for the agent's
    // user, derived from each request as the API server derives it (an
    // apply that creates its object asks for create as well as patch).
    let user = format!(
        "system:serviceaccount:{}:{}",
        maintd::testbed::NAMESPACE,
        maintd::testbed::SERVICE_ACCOUNT
    );
    let asked: Vec<_> = sim
        .state
        .audit
        .authorizations()
        .into_iter()
        .filter(|a| a.user == user && !a.resource.is_empty())
        .collect();
    let refused: Vec<_> = asked.iter().filter(|a| !a.allowed).collect();
    assert!(
        refused.is_empty(),
        "the API server refused the agent (deploy/medik8s lacks a rule): {refused:#?}"
    );
    let mut made: Vec<(String, String, String, Option<String>)> = asked
        .iter()
        .map(|a| {
            let ns = (!a.namespace.is_empty()).then(|| a.namespace.clone());
            (a.group.clone(), a.resource.clone(), a.verb.clone(), ns)
        })
        .collect();
    made.sort();
    made.dedup();
    let listed: Vec<_> = AGENT_CALLS.iter().chain(MEDIK8S_CALLS).collect();
    let rules = {
        let m = manifests("medik8s");
        let ds = &m.daemonsets[0];
        let sa = pod_spec(ds).service_account_name.clone().unwrap();
        rules_for(&m, ds.metadata.namespace.as_deref().unwrap(), &sa)
    };
    for (group, resource, verb, ns) in &made {
        assert!(
            listed.iter().any(|(g, r, v, n)| g == group
                && r == resource
                && v == verb
                && n.is_none_or(|n| Some(n) == ns.as_deref())),
            "the agent made {verb} {resource} (group {group:?}, namespace {ns:?}), which the call lists above leave out"
        );
        assert!(
            rules
                .iter()
                .any(|(rule, scope)| grants(rule, group, resource, verb)
                    && (scope.is_none() || scope == ns)),
            "deploy/medik8s does not grant {verb} {resource} (group {group:?}, namespace {ns:?}), which the agent made"
        );
    }
    // It went through everything it was meant to.
    for want in [
        ("", "pods/eviction", "create"),
        ("", "nodes", "patch"),
        ("", "nodes/status", "patch"),
        ("maintd.io", "nodemaintenances/status", "patch"),
        (MEDIK8S, "nodemaintenances/status", "patch"),
        (MEDIK8S, "nodemaintenances", "patch"),
        ("events.k8s.io", "events", "create"),
        ("coordination.k8s.io", "leases", "create"),
        // The first apply of its NodeDrain creates it.
        ("maintd.io", "nodedrains", "create"),
    ] {
        assert!(
            made.iter()
                .any(|(g, r, v, _)| (g.as_str(), r.as_str(), v.as_str()) == want),
            "{want:?} not seen in {made:?}"
        );
    }
}

/// deploy/ and deploy/medik8s/ confine each agent to its node with the
/// admission policy, bound to deny, matching the DaemonSet's own
/// ServiceAccount; deploy/without-confinement/ is the same without it.
#[test]
fn the_node_confinement_policy_is_bound_to_the_agents_service_account() {
    for variant in ["", "medik8s"] {
        let m = manifests(variant);
        let ds = &m.daemonsets[0];
        let sa = format!(
            "system:serviceaccount:{}:{}",
            ds.metadata.namespace.as_deref().unwrap(),
            pod_spec(ds).service_account_name.as_deref().unwrap()
        );
        assert_eq!(m.policies.len(), 1, "deploy/{variant}");
        let policy = &m.policies[0];
        let spec = policy.spec.as_ref().unwrap();
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
        let conditions = spec.match_conditions.as_ref().unwrap();
        assert!(
            conditions
                .iter()
                .any(|c| c.expression.contains(&format!("'{sa}'"))),
            "deploy/{variant}: the policy matches {sa}"
        );
        let binding = &m.policy_bindings[0].spec;
        assert_eq!(Some(&binding.policy_name), policy.metadata.name.as_ref());
        assert_eq!(binding.validation_actions, ["Deny"]);
    }
    let old = manifests("without-confinement");
    let base = manifests("");
    assert!(old.policies.is_empty() && old.policy_bindings.is_empty());
    assert_eq!(old.cluster_roles, base.cluster_roles);
    assert_eq!(old.daemonsets, base.daemonsets);
}
