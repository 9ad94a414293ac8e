//! `maintd get`, `maintd drain NODE` and `maintd undrain NODE`, the
//! binary run as an operator runs it from a workstation, against agents
//! draining nodes of a simulated cluster through their own path (the
//! NodeMaintenance `maintd drain` makes, the NodeDrain each agent writes).

use crate::common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use common::agent::RunningAgent;
use common::*;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use maintd_sim::SimCluster;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// node-a: two web pods whose budget allows no disruption (its drain
/// stays Blocked); node-b: two api pods, free to go; node-c: nothing, and
/// the green pool.
const THREE_NODES: &str = r#"
objects:
- {apiVersion: v1, kind: Node, metadata: {name: node-a, labels: {pool: blue, kubernetes.io/hostname: node-a}}}
- {apiVersion: v1, kind: Node, metadata: {name: node-b, labels: {pool: blue, kubernetes.io/hostname: node-b}}}
- {apiVersion: v1, kind: Node, metadata: {name: node-c, labels: {pool: green, kubernetes.io/hostname: node-c}}}
- {apiVersion: apps/v1, kind: ReplicaSet, metadata: {name: web, namespace: default, annotations: {sim.maintd.io/initial-node: node-a}},
   spec: {replicas: 2, selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}, spec: {containers: [{name: web, image: registry.example/web:1}]}}}}
- {apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: web, namespace: default}, spec: {maxUnavailable: 0, selector: {matchLabels: {app: web}}}}
- {apiVersion: apps/v1, kind: ReplicaSet, metadata: {name: api, namespace: default, annotations: {sim.maintd.io/initial-node: node-b}},
   spec: {replicas: 2, selector: {matchLabels: {app: api}}, template: {metadata: {labels: {app: api}}, spec: {containers: [{name: api, image: registry.example/api:1}]}}}}
"#;

/// A settled cluster from `yaml`, with maintd's CRDs.
async fn cluster(yaml: &str) -> SimCluster {
    let scenario = maintd_sim::scenario::Scenario::from_yaml(yaml).unwrap();
    let sim = SimCluster::start_with_scenario(Default::default(), &scenario)
        .await
        .unwrap();
    sim.wait_settled(Duration::from_secs(60))
        .await
        .expect("the scenario settles");
    install_crds(&sim.client()).await;
    sim
}

/// The `maintd` binary with a kubeconfig of its own, as on a workstation.
struct Maintd {
    kubeconfig: tempfile::NamedTempFile,
    home: tempfile::TempDir,
}

/// What one run said.
struct Ran {
    ok: bool,
    code: Option<i32>,
    out: String,
    err: String,
}

impl Maintd {
    fn new(sim: &SimCluster) -> Maintd {
        Self::with_kubeconfig(&sim.kubeconfig())
    }

    fn with_kubeconfig(text: &str) -> Maintd {
        let kubeconfig = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(kubeconfig.path(), text).unwrap();
        Maintd {
            kubeconfig,
            home: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_maintd"));
        cmd.args(args)
            .env("KUBECONFIG", self.kubeconfig.path())
            .env("HOME", self.home.path())
            .env("USER", "ops")
            .env("MAINTD_LOG", "warn")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// Runs to the end (bounded: a command that hangs fails the test).
    async fn run(&self, args: &[&str]) -> Ran {
        let run = self.command(args).output();
        let out = tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .unwrap_or_else(|_| panic!("maintd {args:?} did not end within 120s"))
            .expect("maintd runs");
        Ran {
            ok: out.status.success(),
            code: out.status.code(),
            out: String::from_utf8_lossy(&out.stdout).into_owned(),
            err: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    async fn ok(&self, args: &[&str]) -> String {
        let r = self.run(args).await;
        assert!(r.ok, "maintd {args:?} failed:\n{}\n{}", r.out, r.err);
        r.out
    }

    /// Fails, with exit code 1 and an `error:` line; returns the line.
    async fn fails(&self, args: &[&str]) -> String {
        let r = self.run(args).await;
        assert_eq!(r.code, Some(1), "maintd {args:?}:\n{}\n{}", r.out, r.err);
        let line = r
            .err
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("no error line: {}", r.err));
        assert!(!r.err.contains("panicked"), "{}", r.err);
        line.to_string()
    }
}

/// A table's rows as column → cell, cut where the header's columns start.
fn rows(table: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = table.lines();
    let header: Vec<char> = lines.next().unwrap_or("").chars().collect();
    let mut starts = Vec::new();
    for (i, c) in header.iter().enumerate() {
        // A column starts after three spaces (or at 0).
        if *c != ' ' && (i == 0 || (i >= 3 && header[i - 3..i].iter().all(|c| *c == ' '))) {
            starts.push(i);
        }
    }
    let name = |k: usize| -> String {
        let end = starts.get(k + 1).copied().unwrap_or(header.len());
        header[starts[k]..end]
            .iter()
            .collect::<String>()
            .trim()
            .to_string()
    };
    lines
        .map(|l| {
            let chars: Vec<char> = l.chars().collect();
            (0..starts.len())
                .map(|k| {
                    let from = starts[k].min(chars.len());
                    let to = starts
                        .get(k + 1)
                        .copied()
                        .unwrap_or(chars.len())
                        .min(chars.len());
                    (
                        name(k),
                        chars[from..to]
                            .iter()
                            .collect::<String>()
                            .trim()
                            .to_string(),
                    )
                })
                .collect()
        })
        .collect()
}

fn nodedrains(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource {
            group: "maintd.io".into(),
            version: "v1alpha1".into(),
            api_version: "maintd.io/v1alpha1".into(),
            kind: "NodeDrain".into(),
            plural: "nodedrains".into(),
        },
    )
}

fn nodemaintenances(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource {
            group: "maintd.io".into(),
            version: "v1alpha1".into(),
            api_version: "maintd.io/v1alpha1".into(),
            kind: "NodeMaintenance".into(),
            plural: "nodemaintenances".into(),
        },
    )
}

/// The phase `node`'s agent reports, as the API has it now.
async fn phase(client: &kube::Client, node: &str) -> Option<String> {
    let d = nodedrains(client).get_opt(node).await.ok()??;
    let d = serde_json::to_value(d).ok()?;
    d["status"]["phase"].as_str().map(str::to_string)
}

async fn wait_phase(client: &kube::Client, node: &str, want: &str) {
    eventually(&format!("{node}'s NodeDrain says {want}"), || async move {
        phase(client, node).await.as_deref() == Some(want)
    })
    .await;
}

/// Whether an age reads as kubectl writes one (5s, 3m, 2h, 4d5h).
fn is_age(s: &str) -> bool {
    !s.is_empty()
        && s.chars().next().is_some_and(|c| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_digit() || "smhdy".contains(c))
        && s.chars().last().is_some_and(|c| "smhdy".contains(c))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_shows_each_nodes_drain_as_kubectl_shows_a_resource() {
    let sim = cluster(THREE_NODES).await;
    let client = sim.client();
    let cli = Maintd::new(&sim);
    let agents: Vec<RunningAgent> = ["node-a", "node-b", "node-c"]
        .into_iter()
        .map(|n| RunningAgent::start(&sim, n, None))
        .collect();
    for node in ["node-a", "node-c"] {
        wait_phase(&client, node, "Idle").await;
    }
    // Drains asked the way an operator asks them; node-c is left alone.
    for node in ["node-a", "node-b"] {
        let out = cli.ok(&["drain", node, "--reason", "kernel 6.12"]).await;
        assert_eq!(
            out,
            format!("nodemaintenance.maintd.io/drain-{node} created\n")
        );
    }
    wait_phase(&client, "node-b", "Drained").await;
    wait_phase(&client, "node-a", "Blocked").await;
    eventually("node-a's agent reports both web pods refused", || async {
        let d = nodedrains(&client).get("node-a").await.unwrap();
        serde_json::to_value(d).unwrap()["status"]["blockersTotal"] == 2
    })
    .await;

    let table = cli.ok(&["get"]).await;
    let header = table.lines().next().unwrap();
    let columns: Vec<&str> = header
        .split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        columns,
        [
            "NODE",
            "PHASE",
            "TRIGGER",
            "PODS LEFT",
            "BLOCKED BY",
            "SINCE"
        ],
        "{table}"
    );
    let got = rows(&table);
    let field = |i: usize, k: &str| got[i][k].clone();
    assert_eq!(
        (0..3)
            .map(|i| (field(i, "NODE"), field(i, "PHASE")))
            .collect::<Vec<_>>(),
        [
            ("node-a".to_string(), "Blocked".to_string()),
            ("node-b".to_string(), "Drained".to_string()),
            ("node-c".to_string(), "Idle".to_string()),
        ],
        "sorted by node, each in its phase:\n{table}"
    );
    assert_eq!(
        field(0, "TRIGGER"),
        "NodeMaintenance drain-node-a (stage Drain)",
        "{table}"
    );
    assert_eq!(field(0, "PODS LEFT"), "2", "{table}");
    let blocked = field(0, "BLOCKED BY");
    assert!(
        blocked.starts_with("default/web-") && blocked.contains("disruption budget web"),
        "node-a names the pod and the budget that hold it: {table}"
    );
    assert!(
        blocked.ends_with("(+1 more)"),
        "the other web pod is counted: {table}"
    );
    assert_eq!(field(1, "PODS LEFT"), "0", "{table}");
    assert_eq!(field(1, "BLOCKED BY"), "<none>", "{table}");
    assert_eq!(field(2, "TRIGGER"), "<none>", "{table}");
    for i in 0..3 {
        assert!(is_age(&field(i, "SINCE")), "{table}");
    }

    let wide = rows(&cli.ok(&["get", "-o", "wide"]).await);
    assert_eq!(wide[0]["NODEMAINTENANCE"], "drain-node-a");
    assert!(wide[0]["STAGE"].starts_with("1/"), "{:?}", wide[0]);
    assert_eq!(wide[2]["STAGE"], "<none>");
    for r in &wide {
        assert_eq!(r["VERSION"], env!("CARGO_PKG_VERSION"), "{r:?}");
    }

    // One node by name, and by the Nodes' labels.
    let one = rows(&cli.ok(&["get", "node-b"]).await);
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["PHASE"], "Drained");
    let blue = rows(&cli.ok(&["get", "-l", "pool=blue"]).await);
    let names: Vec<&str> = blue.iter().map(|r| r["NODE"].as_str()).collect();
    assert_eq!(names, ["node-a", "node-b"]);
    let r = cli.run(&["get", "-l", "pool=purple"]).await;
    assert!(r.ok && r.out.is_empty(), "{}", r.out);
    assert_eq!(r.err.trim(), "No resources found.");

    // The objects, as the API has them: a List in JSON, the same in YAML.
    let json: Value = serde_json::from_str(&cli.ok(&["get", "-o", "json"]).await).unwrap();
    assert_eq!(
        (&json["apiVersion"], &json["kind"]),
        (&json!("v1"), &json!("List"))
    );
    let api: Vec<Value> = nodedrains(&client)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect();
    let identity = |items: &[Value]| -> Vec<(Value, Value, Value, Value)> {
        items
            .iter()
            .map(|o| {
                (
                    o["metadata"]["name"].clone(),
                    o["metadata"]["uid"].clone(),
                    o["status"]["phase"].clone(),
                    o["status"]["triggers"].clone(),
                )
            })
            .collect()
    };
    let items = json["items"].as_array().unwrap();
    assert_eq!(identity(items), identity(&api));
    assert!(
        items
            .iter()
            .all(|o| o["metadata"]["managedFields"].is_null()),
        "as kubectl shows them, without managedFields"
    );
    let yaml: Value = serde_saphyr::from_str(&cli.ok(&["get", "-o", "yaml"]).await).unwrap();
    assert_eq!(yaml["kind"], "List");
    assert_eq!(identity(yaml["items"].as_array().unwrap()), identity(&api));
    let single: Value =
        serde_saphyr::from_str(&cli.ok(&["get", "node-a", "-o", "yaml"]).await).unwrap();
    assert_eq!(single["kind"], "NodeDrain");
    assert_eq!(single["status"]["phase"], "Blocked");

    let e = cli.fails(&["get", "node-zz"]).await;
    assert!(
        e.contains("nodedrain \"node-zz\" not found") && e.contains("no node node-zz"),
        "{e}"
    );
    for a in agents {
        a.stop().await;
    }
}

/// Reads the child's lines until one satisfies `want`, for at most
/// [`PATIENCE`]; returns it. The panic shows every line read.
async fn line_until(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    seen: &mut Vec<String>,
    what: &str,
    want: impl Fn(&str) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let next = tokio::time::timeout_at(deadline, lines.next_line()).await;
        match next {
            Ok(Ok(Some(l))) => {
                seen.push(l.clone());
                if want(&l) {
                    return l;
                }
            }
            other => panic!(
                "no line {what} ({other:?}); the lines were:\n{}",
                seen.join("\n")
            ),
        }
    }
}

/// `maintd get`'s requests for the NodeDrains: (lists, watches).
fn get_requests(sim: &SimCluster) -> (usize, usize) {
    let mine: Vec<_> = sim
        .state
        .audit
        .requests()
        .into_iter()
        .filter(|r| r.user_agent.contains("(maintd get)") && r.path.ends_with("/nodedrains"))
        .collect();
    let watches = mine.iter().filter(|r| r.watch).count();
    (mine.len() - watches, watches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_prints_a_line_per_change_through_a_dropped_watch_and_a_restart() {
    let sim = cluster(
        "objects:\n\
         - {apiVersion: v1, kind: Node, metadata: {name: node-a}}\n\
         - {apiVersion: v1, kind: Node, metadata: {name: node-b}}\n",
    )
    .await;
    let client = sim.client();
    let cli = Maintd::new(&sim);
    let agents: Vec<RunningAgent> = ["node-a", "node-b"]
        .into_iter()
        .map(|n| RunningAgent::start(&sim, n, None))
        .collect();
    for node in ["node-a", "node-b"] {
        wait_phase(&client, node, "Idle").await;
    }
    let mut child = cli
        .command(&["get", "-w"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let row = |node: &'static str, phase: &'static str| {
        move |l: &str| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.first() == Some(&node) && f.get(1) == Some(&phase)
        }
    };
    line_until(&mut lines, &mut seen, "the header", |l| {
        l.starts_with("NODE ")
    })
    .await;
    line_until(&mut lines, &mut seen, "node-a Idle", row("node-a", "Idle")).await;
    line_until(&mut lines, &mut seen, "node-b Idle", row("node-b", "Idle")).await;
    assert_eq!(get_requests(&sim).0, 1, "one list");

    cli.ok(&["drain", "node-b"]).await;
    let drained = line_until(
        &mut lines,
        &mut seen,
        "node-b Drained",
        row("node-b", "Drained"),
    )
    .await;
    assert!(
        drained.contains("NodeMaintenance drain-node-b (stage Drain)"),
        "{drained}"
    );

    // Every connection dropped: the watch is made again from where it
    // was, so the undrain is seen without listing again.
    sim.state.faults.close_all_connections();
    cli.ok(&["undrain", "node-b"]).await;
    line_until(
        &mut lines,
        &mut seen,
        "node-b Idle again",
        row("node-b", "Idle"),
    )
    .await;
    let (lists, watches) = get_requests(&sim);
    assert_eq!(lists, 1, "resumed, not listed again");
    assert!(watches >= 2, "a watch made again: {watches}");

    // An API server restart: the history is gone (410), so it lists again
    // and prints what changed.
    // (A write first, so the watch's version is older than the restart.)
    let tick: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "tick"}})).unwrap();
    Api::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &tick)
        .await
        .unwrap();
    sim.state.restart();
    cli.ok(&["drain", "node-a"]).await;
    line_until(
        &mut lines,
        &mut seen,
        "node-a Drained",
        row("node-a", "Drained"),
    )
    .await;
    eventually("maintd get listed again after the restart", || async {
        get_requests(&sim).0 >= 2
    })
    .await;

    // Ctrl-C ends it, as it ends kubectl get -w.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}; lines:\n{}", seen.join("\n"));
    for a in agents {
        a.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_wait_ends_once_the_agent_drained_the_node_and_undrain_wait_brings_it_back() {
    let sim = cluster(
        "objects:\n\
         - {apiVersion: v1, kind: Node, metadata: {name: node-a}}\n\
         - {apiVersion: v1, kind: Node, metadata: {name: node-b}}\n\
         - {apiVersion: apps/v1, kind: ReplicaSet, metadata: {name: api, namespace: default, annotations: {sim.maintd.io/initial-node: node-a}},\n\
         \x20  spec: {replicas: 3, selector: {matchLabels: {app: api}}, template: {metadata: {labels: {app: api}}, spec: {containers: [{name: api, image: registry.example/api:1}]}}}}\n",
    )
    .await;
    let client = sim.client();
    let cli = Maintd::new(&sim);
    let agent = RunningAgent::start(&sim, "node-a", None);
    wait_phase(&client, "node-a", "Idle").await;

    let out = cli
        .ok(&[
            "drain",
            "node-a",
            "--wait",
            "--timeout",
            "2m",
            "--reason",
            "kernel 6.12",
        ])
        .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0], "nodemaintenance.maintd.io/drain-node-a created",
        "{out}"
    );
    assert_eq!(lines.last(), Some(&"node/node-a drained"), "{out}");
    assert!(
        lines[1..lines.len() - 1]
            .iter()
            .all(|l| l.starts_with('[') && l.contains("s] node-a: ")),
        "a line per step, timed: {out}"
    );
    assert!(lines.iter().any(|l| l.contains("node-a: Drained")), "{out}");
    assert!(
        pods_on(&client, "node-a").await.iter().all(|p| !p
            .metadata
            .name
            .as_deref()
            .unwrap_or("")
            .starts_with("api-")),
        "the api pods left node-a"
    );
    let nm =
        serde_json::to_value(nodemaintenances(&client).get("drain-node-a").await.unwrap()).unwrap();
    assert_eq!(nm["spec"]["nodeName"], "node-a");
    assert_eq!(nm["spec"]["reason"], "kernel 6.12");
    assert_eq!(
        nm["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "maintd-drain"
    );
    assert!(
        nm["metadata"]["annotations"]["maintd.io/requested-by"]
            .as_str()
            .is_some_and(|w| w.starts_with("ops@")),
        "says who asked: {nm}"
    );
    assert!(is_cordoned(&client, "node-a").await);
    // Asked again: nothing new, and it says so.
    let again = cli.ok(&["drain", "node-a", "--wait"]).await;
    assert!(
        again.starts_with("nodemaintenance.maintd.io/drain-node-a unchanged\n"),
        "{again}"
    );
    assert!(again.ends_with("node/node-a drained\n"), "{again}");

    let out = cli
        .ok(&["undrain", "node-a", "--wait", "--timeout", "2m"])
        .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0], "nodemaintenance.maintd.io \"drain-node-a\" deleted",
        "{out}"
    );
    assert_eq!(lines.last(), Some(&"node/node-a uncordoned"), "{out}");
    assert!(!is_cordoned(&client, "node-a").await);
    assert_eq!(phase(&client, "node-a").await.as_deref(), Some("Idle"));
    assert!(
        nodemaintenances(&client)
            .get_opt("drain-node-a")
            .await
            .unwrap()
            .is_none()
    );
    let nothing = cli.ok(&["undrain", "node-a"]).await;
    assert!(nothing.contains("nothing to undo"), "{nothing}");

    // A node without an agent never drains: the wait ends at its bound,
    // saying where it stood.
    let r = cli
        .run(&["drain", "node-b", "--wait", "--timeout", "2s"])
        .await;
    assert_eq!(r.code, Some(1), "{}\n{}", r.out, r.err);
    assert!(
        r.out
            .contains("node-b: no NodeDrain yet: is maintd running on node-b?"),
        "{}",
        r.out
    );
    assert!(
        r.err
            .contains("error: timed out after 2s: node node-b is not drained"),
        "{}",
        r.err
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_maintd_drain_did_not_make_or_may_not_do_is_refused_in_words() {
    let sim = cluster(THREE_NODES).await;
    let client = sim.client();
    let cli = Maintd::new(&sim);
    let agent = RunningAgent::start(&sim, "node-c", None);
    wait_phase(&client, "node-c", "Idle").await;
    let nms = nodemaintenances(&client);
    for (name, node) in [("drain-node-b", "node-b"), ("rack-7", "node-c")] {
        let obj = json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
            "metadata": {"name": name}, "spec": {"nodeName": node, "stage": "Cordon"}});
        nms.create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .unwrap();
    }

    // An object of that name that maintd drain did not make.
    let e = cli.fails(&["undrain", "node-b"]).await;
    assert!(
        e.contains("NodeMaintenance drain-node-b was not made by `maintd drain node-b`")
            && e.contains("maintd undrain leaves it alone"),
        "{e}"
    );
    let e = cli.fails(&["drain", "node-b"]).await;
    assert!(
        e.contains("NodeMaintenance drain-node-b was not made"),
        "{e}"
    );
    // Another object that selects the node: named, and left alone.
    eventually("node-c's agent reports rack-7", || async {
        let d = nodedrains(&client).get("node-c").await.unwrap();
        serde_json::to_value(d).unwrap()["status"]["maintenances"] == json!(["rack-7"])
    })
    .await;
    let e = cli.fails(&["undrain", "node-c"]).await;
    assert!(e.contains("rack-7 still selects it"), "{e}");
    for name in ["drain-node-b", "rack-7"] {
        assert!(
            nms.get_opt(name).await.unwrap().is_some(),
            "{name} is still there"
        );
    }

    // A node that does not exist: refused before anything is written.
    let drain_writes = || {
        sim.state
            .audit
            .entries()
            .into_iter()
            .filter(|w| w.user_agent.contains("(maintd drain)"))
            .count()
    };
    let before = drain_writes();
    let e = cli.fails(&["drain", "node-zz"]).await;
    assert!(
        e.contains("node node-zz not found") && e.contains("nothing was written"),
        "{e}"
    );
    assert_eq!(drain_writes(), before, "nothing written");
    let e = cli.fails(&["drain", "Node_ZZ"]).await;
    assert!(e.contains("\"Node_ZZ\" is not a node name"), "{e}");
    let e = cli
        .fails(&["drain", "node-a", "--wait", "--timeout", "0s"])
        .await;
    assert!(
        e.contains("--timeout \"0s\"") && e.contains("bound above zero"),
        "{e}"
    );

    // Credentials the API server does not take, and a user RBAC gives
    // nothing: what to fix, in words.
    let stranger = Maintd::with_kubeconfig(&sim.kubeconfig_as("not-a-token"));
    let e = stranger.fails(&["get"]).await;
    assert!(
        e.contains("refused the credentials (401 Unauthorized)"),
        "{e}"
    );
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "nobody"}})).unwrap();
    Api::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let nobody = Maintd::with_kubeconfig(
        &sim.kubeconfig_as(&sim.service_account_token("default", "nobody", None)),
    );
    let e = nobody.fails(&["get"]).await;
    assert!(
        e.contains("listing NodeDrains: forbidden (403)")
            && e.contains("needs list and watch on nodedrains.maintd.io"),
        "{e}"
    );
    let agent_creds =
        Maintd::with_kubeconfig(&sim.kubeconfig_as(&maintd::testbed::agent_token(&sim, "node-a")));
    let e = agent_creds.fails(&["drain", "node-a"]).await;
    assert!(
        e.contains("creating NodeMaintenance drain-node-a: forbidden (403)")
            && e.contains("create"),
        "{e}"
    );
    // No kubeconfig at all.
    let r = cli
        .command(&["get"])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("error: no cluster credentials"), "{err}");
    agent.stop().await;
}
