//! The Helm chart (charts/maintd) installs what deploy/ installs: `helm
//! lint` passes, and `helm template` with the default values gives the
//! objects `kubectl kustomize deploy/` gives, each optional part the
//! objects of its overlay, every field alike except where a case names the
//! difference and why. Helm is built from Go modules by scripts/build-helm.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn chart() -> PathBuf {
    root().join("charts/maintd")
}

/// The helm binary scripts/build-helm made (built now, once, when it is
/// not there yet: scripts/test builds it first).
pub fn helm() -> &'static Path {
    static HELM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = HELM.get_or_init(|| {
        let out = Command::new(root().join("scripts/build-helm"))
            .output()
            .map_err(|e| format!("running scripts/build-helm: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        match stdout.lines().last() {
            Some(path) if out.status.success() => Ok(PathBuf::from(path.trim())),
            _ => Err(format!(
                "scripts/build-helm failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    });
    match built {
        Ok(path) => path,
        Err(why) => panic!("helm: {why}"),
    }
}

/// helm with `args`, its state in `home` (nothing of the machine's own
/// Helm settings); (success, stdout, stderr).
pub fn run_helm(home: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(helm())
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("helm runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn documents(what: &str, text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text)
        .unwrap_or_else(|e| panic!("{what} does not render to YAML: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `helm template RELEASE charts/maintd -n NAMESPACE --include-crds` with
/// `--set` of each of `set`: its objects.
pub fn template(release: &str, namespace: &str, set: &[&str]) -> Vec<Value> {
    let home = tempfile::tempdir().expect("a directory for helm");
    let chart = chart();
    let mut args = vec![
        "template",
        release,
        chart.to_str().expect("a UTF-8 path"),
        "--namespace",
        namespace,
        "--include-crds",
    ];
    for s in set {
        args.extend(["--set", s]);
    }
    let (ok, out, err) = run_helm(home.path(), &args);
    assert!(ok, "helm {}: {err}", args.join(" "));
    documents(&format!("helm template with {set:?}"), &out)
}

fn kustomize(dir: &Path) -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl is installed on this machine (it renders deploy/)");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    documents(
        &dir.display().to_string(),
        &String::from_utf8_lossy(&out.stdout),
    )
}

/// What `kubectl kustomize` makes of deploy/ with `component` on top, as
/// an operator's own kustomization puts it (a directory of this test's).
fn kustomize_with_component(component: &str) -> Vec<Value> {
    kustomize(&crate::common::overlay_with_component(component))
}

fn key(o: &Value) -> String {
    format!(
        "{} {}/{}",
        o["kind"].as_str().unwrap_or("?"),
        o["metadata"]["namespace"].as_str().unwrap_or(""),
        o["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// The labels Helm's convention adds to everything a release makes (which
/// chart and release made it, which version), and the release's instance
/// in selectors so that two releases never select each other's pods.
/// deploy/ has none of them.
const HELM_LABELS: &[&str] = &[
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
];

/// `chart`'s object as deploy/'s `twin` would be, once what differs on
/// purpose is taken out; both with their env sorted.
fn normalized(chart: &Value, twin: &Value) -> (Value, Value) {
    let (mut c, mut d) = (chart.clone(), twin.clone());
    for path in [
        "/metadata/labels",
        "/spec/selector/matchLabels",
        "/spec/template/metadata/labels",
    ] {
        let had_name = d
            .pointer(path)
            .is_some_and(|l| l.get("app.kubernetes.io/name").is_some());
        if let Some(labels) = c.pointer_mut(path).and_then(Value::as_object_mut) {
            for l in HELM_LABELS {
                labels.remove(*l);
            }
            // The chart names every object it makes with the chart's name;
            // deploy/ labels only some.
            if !had_name {
                labels.remove("app.kubernetes.io/name");
            }
            if labels.is_empty() {
                remove(&mut c, path);
            }
        }
    }
    // The order of env matters only for $(VAR) references (checked apart:
    // `env_refers_only_back`); deploy/prometheus' patch puts its entries
    // first, the chart keeps one order.
    for o in [&mut c, &mut d] {
        if let Some(containers) = o
            .pointer_mut("/spec/template/spec/containers")
            .and_then(Value::as_array_mut)
        {
            for container in containers {
                if let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) {
                    env.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
                }
            }
        }
    }
    // The policy's CEL is written in folded YAML with more-indented lines,
    // which kustomize's YAML parser reads with an empty line more than
    // Helm's: the same expressions to CEL, which skips whitespace.
    if chart["kind"] == "ValidatingAdmissionPolicy" {
        for o in [&mut c, &mut d] {
            collapse_cel_whitespace(o);
        }
    }
    (c, d)
}

fn collapse_cel_whitespace(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                match v {
                    Value::String(s) if k == "expression" || k == "messageExpression" => {
                        *s = s.split_whitespace().collect::<Vec<_>>().join(" ");
                    }
                    _ => collapse_cel_whitespace(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(collapse_cel_whitespace),
        _ => {}
    }
}

fn remove(v: &mut Value, path: &str) {
    let (parent, last) = path.rsplit_once('/').expect("a path");
    if let Some(obj) = v.pointer_mut(parent).and_then(Value::as_object_mut) {
        obj.remove(last);
    }
}

/// Every object of `chart` is its twin in `deploy` and the reverse, but
/// for the kinds/namespaces/names in `only_deploy` (each a difference the
/// caller names).
fn assert_same(what: &str, chart: &[Value], deploy: &[Value], only_deploy: &[&str]) {
    let chart_keys: Vec<String> = chart.iter().map(key).collect();
    let deploy_keys: Vec<String> = deploy.iter().map(key).collect();
    let mut want: Vec<String> = deploy_keys
        .iter()
        .filter(|k| !only_deploy.contains(&k.as_str()))
        .cloned()
        .collect();
    let mut have = chart_keys.clone();
    want.sort();
    have.sort();
    assert_eq!(
        have, want,
        "{what}: the chart's objects (left) are not deploy/'s (right)"
    );
    for c in chart {
        let twin = deploy
            .iter()
            .find(|d| key(d) == key(c))
            .expect("a twin, by the keys above");
        let (c, d) = normalized(c, twin);
        if let Some(diff) = difference(&c, &d, "") {
            panic!("{what}: {} differs from deploy/'s at {diff}", key(&c));
        }
    }
}

/// Where `chart` and `deploy` first differ: the path, and each side's
/// value there.
fn difference(chart: &Value, deploy: &Value, path: &str) -> Option<String> {
    match (chart, deploy) {
        (Value::Object(c), Value::Object(d)) => {
            let mut keys: Vec<&String> = c.keys().chain(d.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let (cv, dv) = (
                    c.get(k).unwrap_or(&Value::Null),
                    d.get(k).unwrap_or(&Value::Null),
                );
                difference(cv, dv, &format!("{path}/{k}"))
            })
        }
        (Value::Array(c), Value::Array(d)) if c.len() == d.len() => c
            .iter()
            .zip(d)
            .enumerate()
            .find_map(|(i, (cv, dv))| difference(cv, dv, &format!("{path}/{i}"))),
        // kustomize writes 1000.0 as 1000; Helm passes crds/ on as written.
        (Value::Number(c), Value::Number(d)) if c.as_f64() == d.as_f64() => None,
        _ if chart == deploy => None,
        _ => Some(format!(
            "{}:\n  chart:   {}\n  deploy/: {}",
            if path.is_empty() { "/" } else { path },
            serde_json::to_string(chart).unwrap_or_default(),
            serde_json::to_string(deploy).unwrap_or_default()
        )),
    }
}

/// The Namespace deploy/ makes for the agent: a Helm release lives in a
/// namespace made before it (`helm install --create-namespace`, or
/// kubectl), which the chart cannot own, since Helm keeps the release's
/// own record there. docs/helm.md says how to label it as deploy/ does.
const AGENT_NAMESPACE: &str = "Namespace /maintd";

/// Every container's env, in the chart's order, refers with $(VAR) only
/// to a variable defined before it (Kubernetes expands nothing else).
fn env_refers_only_back(objects: &[Value]) {
    let ds = objects
        .iter()
        .find(|o| o["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    let refs = regex::Regex::new(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)").expect("a regex");
    for container in ds["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mut defined = Vec::new();
        for e in container["env"].as_array().into_iter().flatten() {
            let value = e["value"].as_str().unwrap_or("");
            for r in refs.captures_iter(value) {
                assert!(
                    defined.contains(&r[1].to_string()),
                    "{}: {} refers to $({}) before it is defined",
                    container["name"],
                    e["name"],
                    &r[1]
                );
            }
            defined.push(e["name"].as_str().unwrap_or("").to_string());
        }
    }
}

#[test]
fn helm_lint_passes() {
    let home = tempfile::tempdir().expect("a directory for helm");
    let chart = chart();
    let chart = chart.to_str().expect("a UTF-8 path");
    for set in [
        vec![],
        vec![
            "--set",
            "medik8s.enabled=true,fleetlock.enabled=true,prometheus.podMonitor.enabled=true,\
             prometheus.rules.enabled=true,grafana.dashboard.enabled=true,apiPriority.enabled=true",
        ],
        vec!["--set", "nodeConfinement.enabled=false"],
    ] {
        let mut args = vec!["lint", "--strict", chart];
        args.extend(set.iter().copied());
        let (ok, out, err) = run_helm(home.path(), &args);
        assert!(ok, "helm {}:\n{out}\n{err}", args.join(" "));
        assert!(
            out.contains("0 chart(s) failed") && !out.contains("[WARNING]"),
            "helm {}:\n{out}",
            args.join(" ")
        );
    }
}

#[test]
fn default_values_install_what_deploy_installs() {
    let chart = template("maintd", "maintd", &[]);
    let deploy = kustomize(&root().join("deploy"));
    assert_same("default values", &chart, &deploy, &[AGENT_NAMESPACE]);
    env_refers_only_back(&chart);
}

#[test]
fn without_confinement_is_deploy_without_confinement() {
    let chart = template("maintd", "maintd", &["nodeConfinement.enabled=false"]);
    let deploy = kustomize(&root().join("deploy/without-confinement"));
    assert_same(
        "nodeConfinement.enabled=false",
        &chart,
        &deploy,
        &[AGENT_NAMESPACE],
    );
    assert!(
        !chart
            .iter()
            .any(|o| o["kind"].as_str().unwrap_or("").contains("AdmissionPolicy")),
        "no admission policy without confinement"
    );
}

#[test]
fn medik8s_is_deploy_medik8s() {
    let chart = template("maintd", "maintd", &["medik8s.enabled=true"]);
    let deploy = kustomize(&root().join("deploy/medik8s"));
    assert_same("medik8s.enabled=true", &chart, &deploy, &[AGENT_NAMESPACE]);
}

#[test]
fn prometheus_is_deploy_prometheus() {
    let chart = template(
        "maintd",
        "maintd",
        &[
            "prometheus.podMonitor.enabled=true",
            "prometheus.rules.enabled=true",
        ],
    );
    let deploy = kustomize_with_component("prometheus");
    assert_same("prometheus", &chart, &deploy, &[AGENT_NAMESPACE]);
    env_refers_only_back(&chart);
}

#[test]
fn api_priority_is_deploy_api_priority() {
    let chart = template("maintd", "maintd", &["apiPriority.enabled=true"]);
    let deploy = kustomize_with_component("api-priority");
    assert_same("api-priority", &chart, &deploy, &[AGENT_NAMESPACE]);
    // Named after the release, for the release's ServiceAccount.
    let other = template("other", "elsewhere", &["apiPriority.enabled=true"]);
    let schema = other
        .iter()
        .find(|o| o["kind"] == "FlowSchema")
        .expect("the chart's FlowSchema");
    assert_eq!(schema["metadata"]["name"], "other-maintd");
    assert_eq!(
        schema["spec"]["priorityLevelConfiguration"]["name"],
        "other-maintd"
    );
    let subject = &schema["spec"]["rules"][0]["subjects"][0]["serviceAccount"];
    assert_eq!(subject["namespace"], "elsewhere");
    assert_eq!(subject["name"], "other-maintd");
}

#[test]
fn grafana_is_deploy_grafana() {
    let chart = template("maintd", "maintd", &["grafana.dashboard.enabled=true"]);
    let deploy = kustomize_with_component("grafana");
    assert_same("grafana", &chart, &deploy, &[AGENT_NAMESPACE]);
}

fn agent_env(objects: &[Value]) -> Vec<Value> {
    objects
        .iter()
        .find(|o| o["kind"] == "DaemonSet")
        .and_then(|ds| ds["spec"]["template"]["spec"]["containers"][0]["env"].as_array())
        .cloned()
        .expect("the agent container's env")
}

/// FleetLock has no overlay: deploy/ carries it as a commented line of the
/// DaemonSet. Turned on, the agent gets that one variable, nothing else.
#[test]
fn fleetlock_adds_its_listener_and_nothing_else() {
    let off = agent_env(&template("maintd", "maintd", &[]));
    let on = template("maintd", "maintd", &["fleetlock.enabled=true"]);
    let on_env = agent_env(&on);
    let added: Vec<&Value> = on_env.iter().filter(|e| !off.contains(e)).collect();
    assert_eq!(
        added,
        vec![&json!({"name": "MAINTD_LISTEN_FLEETLOCK", "value": "127.0.0.1:9478"})]
    );
    assert_eq!(
        on_env.len(),
        off.len() + 1,
        "nothing taken away: {on_env:?}"
    );
    let daemonset = std::fs::read_to_string(root().join("deploy/base/daemonset.yaml"))
        .expect("deploy/'s DaemonSet");
    assert!(
        daemonset
            .contains("# - name: MAINTD_LISTEN_FLEETLOCK\n            #   value: 127.0.0.1:9478"),
        "deploy/'s commented FleetLock line is the chart's default"
    );
}

/// A release with another name makes objects that clash with none of
/// deploy/'s (the cluster-scoped ones included), and its node confinement
/// policy applies to its own ServiceAccount.
#[test]
fn another_release_clashes_with_nothing_of_deploy() {
    let everything = [
        "medik8s.enabled=true",
        "medik8s.createLeaseNamespace=false",
        "prometheus.podMonitor.enabled=true",
        "prometheus.rules.enabled=true",
        "grafana.dashboard.enabled=true",
        "apiPriority.enabled=true",
    ];
    let chart = template("edge", "edge-system", &everything);
    let deploy = kustomize(&root().join("deploy/medik8s"));
    let deploy_keys: Vec<String> = deploy.iter().map(key).collect();
    for o in chart
        .iter()
        .filter(|o| o["kind"] != "CustomResourceDefinition")
    {
        assert!(
            !deploy_keys.contains(&key(o)),
            "{} is deploy/'s too",
            key(o)
        );
        assert!(
            o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("edge-maintd")),
            "{} is not named after the release",
            key(o)
        );
    }
    let policy = chart
        .iter()
        .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .expect("the node confinement policy");
    assert_eq!(
        policy["spec"]["matchConditions"][0]["expression"],
        "request.userInfo.username == 'system:serviceaccount:edge-system:edge-maintd'"
    );
    let binding = chart
        .iter()
        .find(|o| o["kind"] == "ValidatingAdmissionPolicyBinding")
        .expect("its binding");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    for o in chart.iter().filter(|o| {
        o["kind"]
            .as_str()
            .is_some_and(|k| k.ends_with("Binding") && k != "ValidatingAdmissionPolicyBinding")
    }) {
        assert_eq!(
            o["subjects"],
            json!([{"kind": "ServiceAccount", "name": "edge-maintd", "namespace": "edge-system"}]),
            "{}",
            key(o)
        );
    }
}

/// The values an operator sets for where and how the agent runs reach the
/// DaemonSet.
#[test]
fn scheduling_and_resources_reach_the_daemonset() {
    let chart = template(
        "maintd",
        "maintd",
        &[
            "nodeSelector.kubernetes\\.io/os=linux",
            "tolerations[0].key=dedicated,tolerations[0].operator=Exists",
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=maintd.io/skip,affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=DoesNotExist",
            "priorityClassName=maintd-critical",
            "agent.resources.limits.memory=256Mi",
            "agent.extraArgs[0]=--reboot-slots=2",
            "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "nodeHelper.staticPodDir=/var/lib/rancher/k3s/agent/pod-manifests",
        ],
    );
    let ds = chart
        .iter()
        .find(|o| o["kind"] == "DaemonSet")
        .expect("the DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "dedicated", "operator": "Exists"}])
    );
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0],
        json!({"key": "maintd.io/skip", "operator": "DoesNotExist"})
    );
    assert_eq!(pod["priorityClassName"], "maintd-critical");
    let (agent, helper) = (&pod["containers"][0], &pod["containers"][1]);
    assert_eq!(agent["resources"]["limits"]["memory"], "256Mi");
    assert_eq!(agent["args"], json!(["run", "--reboot-slots=2"]));
    for c in [agent, helper] {
        assert_eq!(
            c["image"],
            "ghcr.io/maintd/maintd@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        );
        assert!(
            c["env"].as_array().into_iter().flatten().any(|e| e
                == &json!({"name": "MAINTD_STATIC_POD_DIR", "value": "/var/lib/rancher/k3s/agent/pod-manifests"})),
            "{}: {}",
            c["name"],
            c["env"]
        );
    }
    let static_pods = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "static-pods")
        .expect("the static pod volume");
    assert_eq!(
        static_pods["hostPath"]["path"],
        "/var/lib/rancher/k3s/agent/pod-manifests"
    );
}

/// On a cluster older than 1.30 the node confinement policy cannot work:
/// the install stops and says what to set, instead of leaving the agents
/// unconfined unasked.
#[test]
fn confinement_on_an_old_cluster_is_refused_in_words() {
    let home = tempfile::tempdir().expect("a directory for helm");
    let chart = chart();
    let chart = chart.to_str().expect("a UTF-8 path");
    let (ok, _, err) = run_helm(
        home.path(),
        &["template", "maintd", chart, "--kube-version", "1.29.4"],
    );
    assert!(!ok, "rendered for Kubernetes 1.29");
    assert!(
        err.contains("needs Kubernetes 1.30 or later")
            && err.contains("--set nodeConfinement.enabled=false"),
        "{err}"
    );
    let (ok, out, err) = run_helm(
        home.path(),
        &[
            "template",
            "maintd",
            chart,
            "--kube-version",
            "1.29.4",
            "--set",
            "nodeConfinement.enabled=false",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("kind: DaemonSet"), "{out}");
}

/// The chart's CRDs, alerts, dashboard and policy are deploy/'s, byte for
/// byte, and its CRDs are what `maintd crd` prints: nothing drifts.
#[test]
fn the_charts_copies_are_deploys() {
    let read = |p: &str| {
        std::fs::read_to_string(root().join(p)).unwrap_or_else(|e| panic!("reading {p}: {e}"))
    };
    let crd = maintd::api::crd_yaml().expect("the CRDs");
    assert!(
        read("charts/maintd/crds/maintd.io.yaml") == crd,
        "charts/maintd/crds/maintd.io.yaml is not what `maintd crd` prints; regenerate it with \
         `cargo run -- crd > charts/maintd/crds/maintd.io.yaml`"
    );
    for (copy, source) in [
        ("charts/maintd/crds/maintd.io.yaml", "deploy/base/crd.yaml"),
        (
            "charts/maintd/files/node-confinement.yaml",
            "deploy/node-confinement/policy.yaml",
        ),
        (
            "charts/maintd/files/prometheusrule.yaml",
            "deploy/prometheus/prometheusrule.yaml",
        ),
        (
            "charts/maintd/files/dashboard.json",
            "deploy/grafana/dashboard.json",
        ),
    ] {
        assert!(
            read(copy) == read(source),
            "{copy} is not {source}: copy it again (cp {source} {copy})"
        );
    }
}

/// The chart's version and its image's tag are the agent's (Cargo.toml),
/// as deploy/'s image tag is.
#[test]
fn the_chart_is_the_agents_version() {
    let chart = std::fs::read_to_string(chart().join("Chart.yaml")).expect("Chart.yaml");
    let chart: Value = serde_saphyr::from_str(&chart).expect("Chart.yaml parses");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["version"], version);
    assert_eq!(chart["appVersion"], version);
    let objects = template("maintd", "maintd", &[]);
    let ds = objects
        .iter()
        .find(|o| o["kind"] == "DaemonSet")
        .expect("the DaemonSet");
    assert_eq!(
        ds["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("ghcr.io/maintd/maintd:{version}")
    );
}
