//! The scenario on the real control plane (scripts/control-plane): N KWOK
//! nodes, their bare pods and a DaemonSet, deploy/ installed, and N agents
//! in this process, each with its own client, a token of deploy/'s
//! ServiceAccount bound to its Node (the TokenRequest API), and a counter
//! around its client. First the cluster idle without agents (the
//! baseline), then idle with them (once they have sent nothing but
//! watches for 10 s), then the rolling reboot, the bench
//! playing the updater (a node's reboot is a new boot ID after
//! `MAINTD_SCALE_REBOOT_MS`; KWOK keeps the node Ready meanwhile).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use maintd::agent::Agent;
use maintd::config::Config;
use maintd::report::conditions::MAINTD_DRAIN;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::mirror::{Mirror, Sample, Window, is_ready, out_of_room, standing};
use super::rollout::Rollout;
use super::sim::{cpu_split, rss_kib};
use super::usage::Usage;
use super::watch::Watch;
use super::{Settings, scenario};
use crate::cluster::{ControlPlane, wait_until};
use crate::counting::{Counter, Counts};

/// The agents' runtime's threads: their CPU is measured apart from the
/// bench's own (setup, watches, looks).
pub const AGENT_THREAD: &str = "agents";

/// One N on the real control plane.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct RealRow {
    pub n: usize,
    pub pods_per_node: usize,
    /// deploy/api-priority/ was installed with deploy/.
    #[serde(default)]
    pub api_priority: bool,
    /// Nodes and pods created and Ready, seconds.
    pub setup_secs: f64,
    /// From the first agent started to every NodeDrain written, seconds.
    pub agents_start_secs: f64,
    /// The cluster with its nodes and pods, no agent.
    pub base: Window,
    /// The API server's CPU seconds a minute in each half of the baseline
    /// and of the idle window: how much it moves with nothing changing.
    pub base_halves: (f64, f64),
    pub idle_halves: (f64, f64),
    /// The same with the agents, idle.
    pub idle: Window,
    pub idle_usage: Usage,
    /// From the NodeMaintenance created to the last node back.
    pub drain: Window,
    pub drain_usage: Usage,
    pub rollout: Rollout,
    pub done: usize,
    /// Watches open per agent at the end of the idle window, and the most
    /// one agent had open at once.
    pub watches_idle: f64,
    pub watches_most: i64,
    /// Sockets this process opened for its agents.
    pub agent_sockets: u64,
    pub agents_cpu_idle: f64,
    pub agents_cpu_drain: f64,
    pub rss_before_agents_kib: u64,
    pub rss_with_agents_kib: u64,
    pub largest_nm: usize,
    pub largest_nd: usize,
    pub load_start: String,
    pub load_end: String,
}

fn sockets() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count() as u64
        })
        .unwrap_or(0)
}

fn total(counters: &[Arc<Counter>]) -> Counts {
    let mut all = Counts::default();
    for c in counters {
        let s = c.snapshot();
        for (k, v) in s.calls {
            *all.calls.entry(k).or_insert(0) += v;
        }
        for (k, v) in s.conflicts {
            *all.conflicts.entry(k).or_insert(0) += v;
        }
        for (k, v) in s.bytes {
            *all.bytes.entry(k).or_insert(0) += v;
        }
        all.throttled += s.throttled;
        for (k, v) in s.throttled_by {
            *all.throttled_by.entry(k).or_insert(0) += v;
        }
        all.events += s.events;
        all.watches_open += s.watches_open;
        all.watches_most = all.watches_most.max(s.watches_most);
    }
    all
}

fn nodedrain_resource() -> ApiResource {
    ApiResource {
        group: "maintd.io".into(),
        version: "v1alpha1".into(),
        api_version: "maintd.io/v1alpha1".into(),
        kind: "NodeDrain".into(),
        plural: "nodedrains".into(),
    }
}

fn nodemaintenance_resource() -> ApiResource {
    ApiResource {
        group: "maintd.io".into(),
        version: "v1alpha1".into(),
        api_version: "maintd.io/v1alpha1".into(),
        kind: "NodeMaintenance".into(),
        plural: "nodemaintenances".into(),
    }
}

/// Creates `objects` through `api`, 32 at a time; panics on a refusal.
async fn create_all<K>(api: Api<K>, objects: Vec<Value>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    futures::stream::iter(objects)
        .map(|o| {
            let api = api.clone();
            async move {
                let obj: K = serde_json::from_value(o).expect("a well-formed object");
                api.create(&PostParams::default(), &obj).await
            }
        })
        .buffer_unordered(32)
        .for_each(|r| async move {
            if let Err(e) = r {
                panic!("creating the scenario's objects: {e}");
            }
        })
        .await;
}

/// The node's reboot: a new boot ID, as its kubelet reports one after a
/// reboot (KWOK keeps what the Node says).
async fn reboot(admin: kube::Client, node: String, after: Duration) {
    tokio::time::sleep(after).await;
    let api: Api<Node> = Api::all(admin);
    let boot = format!("{node}-boot-2");
    let patch = json!({"status": {"nodeInfo": {"bootID": boot}}});
    if let Err(e) = api
        .patch_status(&node, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        eprintln!("  rebooting {node}: {e}");
    }
}

/// Requests other than watches the agents have sent so far, all of them.
fn not_watches(counters: &[Arc<Counter>]) -> f64 {
    Usage::of_counts(&total(counters), 1).not_watches()
}

/// How long the agents send nothing but watches before the bench calls
/// them idle, and how long it waits for that at most.
const SETTLED_AFTER: Duration = Duration::from_secs(10);
const SETTLED_AT_MOST: Duration = Duration::from_secs(300);

/// Waits, once every agent has written its NodeDrain, until every Node
/// shows its agent's condition and the agents have sent nothing but
/// watches for [`SETTLED_AFTER`]: at 2,000 nodes the last agents'
/// start-up writes of their Node's conditions, retried after 429s (up to
/// a minute apart), came after every NodeDrain was written, twice even
/// after 10 s of nothing but watches, and the idle window counted them.
/// Past [`SETTLED_AT_MOST`] the idle window starts anyway, and the bench
/// says so: what the agents still send is then theirs.
fn settle(cp: &ControlPlane, n: usize, counters: &[Arc<Counter>], nodes: &Mirror) {
    let began = Instant::now();
    let mut sent = not_watches(counters);
    let mut quiet_since = Instant::now();
    let told = |node: &Value| {
        node["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == MAINTD_DRAIN))
    };
    while quiet_since.elapsed() < SETTLED_AFTER {
        if began.elapsed() >= SETTLED_AT_MOST {
            eprintln!(
                "  N={n}: {} of {n} Nodes show their agent's condition, and the agents still sent requests other than watches {} s after every NodeDrain was written; idle is measured from here",
                nodes.count(told),
                SETTLED_AT_MOST.as_secs()
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
        stop_if_out_of_room(cp, n);
        let now = not_watches(counters);
        if now != sent || nodes.count(told) < n {
            sent = now;
            quiet_since = Instant::now();
        }
    }
    eprintln!(
        "  N={n}: the agents sent only watches for {} s, {:.0} s after every NodeDrain was written; {}",
        SETTLED_AFTER.as_secs(),
        began.elapsed().as_secs_f64(),
        standing(cp)
    );
}

/// Ends the run, saying where it stopped, when the machine cannot hold it.
fn stop_if_out_of_room(cp: &ControlPlane, n: usize) {
    if let Some(why) = out_of_room(cp) {
        panic!("N={n} DOES NOT FIT THIS MACHINE: {why}; {}", standing(cp));
    }
}

/// How long a rolling reboot may go without a node rebooting or finishing
/// its turn before the bench calls it stopped: several turns' worth at
/// any N that moves at all, and a reboot's own time twice over (every
/// slot's node may be rebooting at once).
fn stalled_after(reboot: Duration) -> Duration {
    Duration::from_secs(600) + reboot * 2
}

/// The three things the NodeDrains of nodes not idle say most often (their
/// error, or what they wait for), with how many say each: where a
/// stopped rollout stands, in the agents' words.
fn what_drains_say(drains: &[Arc<Value>]) -> String {
    let mut said: std::collections::BTreeMap<String, usize> = Default::default();
    for d in drains {
        let st = &d["status"];
        if st["phase"].as_str().is_none_or(|p| p == "Idle") {
            continue;
        }
        let words = st["lastError"]
            .as_str()
            .or(st["waiting"].as_str())
            .unwrap_or("nothing");
        let words: String = words.chars().take(160).collect();
        *said
            .entry(format!("{} ({words})", st["phase"].as_str().unwrap_or("")))
            .or_default() += 1;
    }
    let mut said: Vec<(String, usize)> = said.into_iter().collect();
    said.sort_by_key(|(_, c)| std::cmp::Reverse(*c));
    let top: Vec<String> = said
        .iter()
        .take(3)
        .map(|(w, c)| format!("{c}× {w}"))
        .collect();
    if top.is_empty() {
        "none is past Idle".to_string()
    } else {
        top.join("; ")
    }
}

/// How long one phase of an N may take before the bench calls it dead
/// (the cluster's setup, the agents' start, the rolling reboot): 1,800 s
/// up to 1,000 nodes, and 1.8 s a node beyond, as a rollout through a
/// tenth of the nodes at a time does about as many turns per slot at
/// every N while this machine's two cores serve ever more of them.
fn allowance(n: usize) -> Duration {
    Duration::from_millis(1_800_000u64.max(n as u64 * 1_800))
}

pub fn run(
    bench: &tokio::runtime::Runtime,
    agents: &tokio::runtime::Runtime,
    n: usize,
    settings: &Settings,
) -> RealRow {
    let load_start = crate::cluster::load_average();
    let started = Instant::now();
    let cp = ControlPlane::up("scale").unwrap_or_else(|e| panic!("N={n}: {e}"));
    let component = settings.api_priority.then_some("api-priority");
    cp.install_deploy_with(component)
        .unwrap_or_else(|e| panic!("N={n}: installing deploy/: {e}"));
    let admin = bench.block_on(cp.admin());
    let _in_bench = bench.enter();
    let nodes = Mirror::start(&admin, &ApiResource::erase::<Node>(&()), None);
    let drains = Mirror::start(&admin, &nodedrain_resource(), None);
    let leases = Mirror::start(&admin, &ApiResource::erase::<Lease>(&()), Some("maintd"));
    let pods = Mirror::start(
        &admin,
        &ApiResource::erase::<Pod>(&()),
        Some(scenario::NAMESPACE),
    );

    // The cluster: nodes first (KWOK makes them Ready), then their pods
    // and the DaemonSet (its controller makes a pod a node).
    let orders = settings.orders;
    let node_objects: Vec<Value> = (0..n)
        .map(|i| {
            let name = scenario::node_name(i);
            json!({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": name, "labels": scenario::node_labels(i, n, orders),
                                "annotations": {"kwok.x-k8s.io/node": "fake"}},
                   "status": {"nodeInfo": {"bootID": format!("{name}-boot-1")}}})
        })
        .collect();
    bench.block_on(create_all(Api::<Node>::all(admin.clone()), node_objects));
    let pod_objects: Vec<Value> = (0..n)
        .flat_map(|i| (0..settings.pods).map(move |p| scenario::bare_pod(i, p)))
        .collect();
    bench.block_on(create_all(
        Api::<Pod>::namespaced(admin.clone(), scenario::NAMESPACE),
        pod_objects,
    ));
    let (ok, _, err) = cp.kubectl(
        &["apply", "-f", "-"],
        Some(&scenario::daemonset().to_string()),
    );
    assert!(ok, "N={n}: creating the DaemonSet: {err}");
    let want_pods = n * (settings.pods + 1);
    bench.block_on(wait_until("every node and pod Ready", allowance(n), || {
        stop_if_out_of_room(&cp, n);
        let (ready_nodes, ready_pods) = (nodes.count(is_ready), pods.count(is_ready));
        let how = format!(
            "{ready_nodes} of {n} nodes, {ready_pods} of {want_pods} pods; {}",
            standing(&cp)
        );
        async move { (ready_nodes == n && ready_pods == want_pods, how) }
    }));
    let setup_secs = started.elapsed().as_secs_f64();
    eprintln!(
        "  N={n}: cluster ready after {setup_secs:.0} s; {}",
        standing(&cp)
    );
    pods.stop();
    std::thread::sleep(Duration::from_secs(10));

    // The baseline: the same nodes and pods, no agent.
    let idle_for = Duration::from_secs(settings.idle_secs);
    let b0 = Sample::now(&cp);
    std::thread::sleep(idle_for / 2);
    let bm = Sample::now(&cp);
    std::thread::sleep(idle_for / 2);
    let b1 = Sample::now(&cp);
    let base = Window::between(&b0, &b1);
    let halves = |a, m, b| {
        (
            Window::between(a, m).apiserver_cpu_per_min(),
            Window::between(m, b).apiserver_cpu_per_min(),
        )
    };
    let base_halves = halves(&b0, &bm, &b1);

    // The agents, each with a token bound to its node.
    let sockets_before = sockets();
    let rss_before_agents_kib = rss_kib();
    let named: Vec<(String, String)> = (0..n)
        .map(|i| {
            let name = scenario::node_name(i);
            let uid = nodes
                .get(&format!("/{name}"))
                .and_then(|o| o["metadata"]["uid"].as_str().map(String::from));
            (name, uid.unwrap_or_default())
        })
        .collect();
    let tokens = bench.block_on(cp.agent_tokens(&admin, &named));
    let stop = CancellationToken::new();
    let agents_started = Instant::now();
    let counters: Vec<Arc<Counter>> = agents.block_on(async {
        let mut counters = Vec::new();
        for ((node, _), token) in named.iter().zip(&tokens) {
            let counter = Arc::new(Counter::default());
            let client = cp.agent_client(node, token, counter.clone()).await;
            let agent = Agent::new(
                Config::for_node(node, "/nonexistent/manifests".into()),
                client,
            );
            tokio::spawn(agent.run(stop.clone()));
            counters.push(counter);
        }
        counters
    });
    bench.block_on(wait_until(
        "every agent wrote its NodeDrain",
        allowance(n),
        || {
            stop_if_out_of_room(&cp, n);
            let have = drains.len();
            let how = format!("{have} of {n} NodeDrains; {}", standing(&cp));
            async move { (have == n, how) }
        },
    ));
    let agents_start_secs = agents_started.elapsed().as_secs_f64();
    settle(&cp, n, &counters, &nodes);
    let rss_with_agents_kib = rss_kib();
    let agent_sockets = sockets().saturating_sub(sockets_before);

    // Idle, with the agents.
    let (c0, a0, s0) = (
        total(&counters),
        cpu_split(AGENT_THREAD).0,
        Sample::now(&cp),
    );
    std::thread::sleep(idle_for / 2);
    stop_if_out_of_room(&cp, n);
    let sm = Sample::now(&cp);
    std::thread::sleep(idle_for / 2);
    let (c1, a1, s1) = (
        total(&counters),
        cpu_split(AGENT_THREAD).0,
        Sample::now(&cp),
    );
    let idle = Window::between(&s0, &s1);
    let idle_halves = halves(&s0, &sm, &s1);
    let idle_usage = Usage::of_counts(&c1, n).since(Usage::of_counts(&c0, n));
    let watches_idle = c1.watches_open as f64 / n as f64;
    eprintln!("  N={n}: idle measured; {}", standing(&cp));

    // The rolling reboot.
    let slots = (n / 10).max(1);
    let nms: Api<DynamicObject> = Api::all_with(admin.clone(), &nodemaintenance_resource());
    let t = Instant::now();
    let obj: DynamicObject = serde_json::from_value(scenario::rolling(slots, settings.ahead))
        .expect("a NodeMaintenance");
    let made = bench
        .block_on(nms.create(&PostParams::default(), &obj))
        .expect("the NodeMaintenance is created");
    let uid = made.metadata.uid.expect("the NodeMaintenance has a uid");
    let mut watch = Watch::new(t);
    let (mut largest_nm, mut largest_nd, mut polls) = (0usize, 0usize, 0u64);
    let mut said = Instant::now();
    let size = |v: &Value| serde_json::to_vec(v).map(|b| b.len()).unwrap_or(0);
    let allowed = allowance(n);
    let deadline = Instant::now() + allowed;
    let reboot_after = Duration::from_millis(settings.reboot_ms);
    let (mut progress, mut moved) = ((0, 0), Instant::now());
    let stalled = stalled_after(reboot_after);
    loop {
        let all = drains.all();
        if polls.is_multiple_of(20) {
            largest_nd = all
                .iter()
                .map(|d| size(d))
                .max()
                .unwrap_or(0)
                .max(largest_nd);
            if let Some(o) = bench.block_on(nms.get_opt("rolling")).ok().flatten() {
                largest_nm = largest_nm.max(serde_json::to_vec(&o).map(|b| b.len()).unwrap_or(0));
            }
        }
        polls += 1;
        let over = watch.look(&nodes.all(), &all, &leases.all(), &uid, |node| {
            bench.spawn(reboot(admin.clone(), node.to_string(), reboot_after));
            true
        });
        if over {
            break;
        }
        let now_progress = (watch.done_count(), watch.rebooted_count());
        if now_progress != progress {
            (progress, moved) = (now_progress, Instant::now());
        }
        assert!(
            moved.elapsed() < stalled,
            "N={n}: THE ROLLING REBOOT STOPPED GOING: no node rebooted or finished its turn for {} s: {} of {n} turns done, {} rebooted, {} unschedulable now, {} slots held; what the agents' NodeDrains say: {}; {}. No figures for a dead rollout.",
            stalled.as_secs(),
            watch.done_count(),
            watch.rebooted_count(),
            watch.unschedulable_now,
            watch.holders_now().len(),
            what_drains_say(&all),
            standing(&cp)
        );
        assert!(
            Instant::now() < deadline,
            "N={n}: THE ROLLING REBOOT DID NOT FINISH within {} s: {} of {n} turns done, {} rebooted, {} unschedulable now; slot holders now: {:?}; {}. No figures for a dead rollout.",
            allowed.as_secs(),
            watch.done_count(),
            watch.rebooted_count(),
            watch.unschedulable_now,
            watch.holders_now(),
            standing(&cp)
        );
        if said.elapsed() > Duration::from_secs(10) {
            stop_if_out_of_room(&cp, n);
            eprintln!(
                "  N={n}: {} of {n} turns done, {} unschedulable now, {} rebooted, after {:.0}s; {}",
                watch.done_count(),
                watch.unschedulable_now,
                watch.rebooted_count(),
                t.elapsed().as_secs_f64(),
                standing(&cp)
            );
            said = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for u in &watch.unslotted {
        // As the bench's own watches saw it: on a loaded API server its
        // Node watch can lag its Lease watch by seconds, so the audit log
        // (who wrote what when) says whether the agent gave the slot back
        // before its uncordon.
        eprintln!(
            "  N={n}: CORDONED WITH NO SLOT (as the bench's watches show it; check the audit log's order of the uncordon and the Lease's give-back): {u}"
        );
    }
    let rollout = watch.summary(slots, settings.ahead, settings.reboot_ms, orders);
    rollout.check(n);
    // The last aggregates and NodeDrain writes land within a few seconds.
    std::thread::sleep(Duration::from_secs(6));
    let (c2, a2, s2) = (
        total(&counters),
        cpu_split(AGENT_THREAD).0,
        Sample::now(&cp),
    );
    let drain = Window::between(&s1, &s2);
    let drain_usage = Usage::of_counts(&c2, n).since(Usage::of_counts(&c1, n));
    stop.cancel();
    std::thread::sleep(Duration::from_secs(1));
    RealRow {
        n,
        pods_per_node: settings.pods,
        api_priority: settings.api_priority,
        setup_secs,
        agents_start_secs,
        base,
        base_halves,
        idle_halves,
        idle,
        idle_usage,
        drain,
        drain_usage,
        done: watch.done_count(),
        rollout,
        watches_idle,
        watches_most: c2.watches_most,
        agent_sockets,
        agents_cpu_idle: a1 - a0,
        agents_cpu_drain: a2 - a1,
        rss_before_agents_kib,
        rss_with_agents_kib,
        largest_nm,
        largest_nd,
        load_start,
        load_end: crate::cluster::load_average(),
    }
}
