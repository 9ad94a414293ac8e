//! A rolling NodeMaintenance whose turns end with a reboot
//! (`maxConcurrentDrains` with `waitForReboot`): a node is cordoned when it
//! takes its slot, keeps it until it has booted again and is Ready, and is
//! uncordoned before the slot goes to the next node. The agents run with
//! the rights deploy/ gives them; the Node watch is kubectl's.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use common::agent::RunningAgent;
use common::kubectl::Kubectl;
use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use maintd::drain::progress::{EventKind, Phase};
use maintd_sim::SimCluster;
use serde_json::{Value, json};

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

/// `n` nodes labelled pool=blue, each with two pods that stop in 0.2 s,
/// maintd's CRDs and namespace.
async fn pool(n: usize) -> (SimCluster, Vec<String>) {
    let sim = sim().await;
    let client = sim.client();
    install_crds(&client).await;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "maintd"}})).unwrap(),
        )
        .await
        .unwrap();
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("node-{i}");
        let mut node = node_json(&name);
        node["metadata"]["labels"]["pool"] = json!("blue");
        Api::<Node>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(node).unwrap(),
            )
            .await
            .unwrap();
        for p in 0..2 {
            let mut pod = pod_json("default", &format!("{name}-p{p}"), &name, json!({}));
            pod["metadata"]["annotations"] = json!({"sim.maintd.io/shutdown-seconds": "0.2"});
            post_pod(&sim, &pod).await;
        }
        names.push(name);
    }
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();
    (sim, names)
}

/// A rolling NodeMaintenance `name` of the blue pool, stage Drain, whose
/// turns end with a reboot: `spec` adds to its spec.
async fn create_roll(client: &kube::Client, name: &str, spec: Value) -> String {
    let mut obj = json!({
        "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {"pool": "blue"}},
            "stage": "Drain",
        },
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        obj["spec"][k] = v.clone();
    }
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    let made = nodemaintenances(client)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
    made.metadata.uid.unwrap()
}

async fn node(client: &kube::Client, name: &str) -> Value {
    serde_json::to_value(Api::<Node>::all(client.clone()).get(name).await.unwrap()).unwrap()
}

fn unschedulable(node: &Value) -> bool {
    node["spec"]["unschedulable"] == true
}

fn done_for(node: &Value, uid: &str) -> bool {
    maintd::api::turns::done(node).iter().any(|u| u == uid)
}

/// Who holds the slot Leases of NodeMaintenance `name` now.
async fn slot_holders(client: &kube::Client, name: &str) -> Vec<String> {
    holders(client, &format!("nm-{name}")).await
}

/// Who holds the places in line of NodeMaintenance `name`.
async fn place_holders(client: &kube::Client, name: &str) -> Vec<String> {
    holders(client, &place_group(name)).await
}

/// The slot group of NodeMaintenance `name`'s places in line.
fn place_group(name: &str) -> String {
    format!("nm.ahead.{name}")
}

/// Who holds the Leases of slot group `group` now.
async fn holders(client: &kube::Client, group: &str) -> Vec<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "maintd");
    leases
        .list(&ListParams::default().labels(&format!("maintd.io/reboot-group={group}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|l| l.spec.and_then(|s| s.holder_identity))
        .collect()
}

/// The most nodes a `kubectl get nodes --watch` saw unschedulable at once.
fn most_unschedulable_at_once(seen: &[Value]) -> usize {
    let mut now: BTreeMap<String, bool> = BTreeMap::new();
    let mut most = 0;
    for o in seen {
        let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
        now.insert(name, unschedulable(o));
        most = most.max(now.values().filter(|u| **u).count());
    }
    most
}

/// A rollout under way: kubectl (its kubeconfig lives as long as this)
/// watching the Nodes, the agents, the object's uid.
struct Roll {
    _kubectl: Kubectl,
    watch: common::kubectl::KubectlWatch,
    agents: HashMap<String, RunningAgent>,
    uid: String,
}

/// The agents of `names` started, a `kubectl get nodes --watch` on, and
/// the rolling object `name` made with `spec` (see [`create_roll`]).
async fn start_roll(sim: &SimCluster, names: &[String], name: &str, spec: Value) -> Roll {
    let kubectl = Kubectl::new(sim);
    let watch = kubectl.watch_json(&["nodes"]);
    let agents = names
        .iter()
        .map(|n| (n.clone(), RunningAgent::start(sim, n, None)))
        .collect();
    let uid = create_roll(&sim.client(), name, spec).await;
    Roll {
        _kubectl: kubectl,
        watch,
        agents,
        uid,
    }
}

/// The pods evicted so far (granted evictions), by name.
fn granted_evictions(sim: &SimCluster) -> Vec<String> {
    sim.state
        .audit
        .entries()
        .into_iter()
        .filter(|e| e.verb == "evict" && e.code == 201)
        .map(|e| e.name)
        .collect()
}

/// How the nodes of a rollout reboot in a test: with their agent running
/// on (`failed_writes` 0), or half of them as a real node does, their
/// agent dying with them and a new one starting, each node's first
/// `failed_writes` writes after its reboot failing (its uncordon comes
/// late).
#[derive(Clone, Copy)]
struct Restart {
    failed_writes: usize,
}

impl Restart {
    const NONE: Restart = Restart { failed_writes: 0 };
    const SLOW: Restart = Restart { failed_writes: 2 };
    /// Slow enough that the uncordon lands seconds after the reboot.
    const SLOWER: Restart = Restart { failed_writes: 8 };
}

/// The updater's part: reboots each node once it is drained and holds its
/// turn (its boot ID is the one its turn started at), until every node is
/// done with the object `name` (uid `uid`). With `restart`, the even
/// nodes reboot as a real node does (their agent dies with them and a new
/// one starts), and each node's first writes after its reboot fail, so its
/// uncordon is slow to land. Returns each node's new boot ID.
async fn reboot_each_in_turn(
    sim: &SimCluster,
    names: &[String],
    agents: &mut HashMap<String, RunningAgent>,
    uid: &str,
    name: &str,
    restart: Restart,
) -> HashMap<String, String> {
    let client = sim.client();
    let mut rebooted: HashMap<String, String> = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mut all_done = true;
        for node_name in names {
            let n = node(&client, node_name).await;
            if done_for(&n, uid) {
                continue;
            }
            all_done = false;
            let turn = maintd::api::turns::record(&n);
            let drained = agents[node_name].progress.status().phase == Phase::Drained;
            if drained
                && !rebooted.contains_key(node_name)
                && turn.as_ref().is_some_and(|t| {
                    t.uid == uid && Some(t.boot_id.as_str()) == maintd::api::turns::boot_id(&n)
                })
            {
                let dies = restart.failed_writes > 0 && node_name.ends_with(['0', '2', '4', '6']);
                if dies {
                    agents.remove(node_name).unwrap().stop().await;
                }
                if restart.failed_writes > 0 {
                    // The node's first writes after its reboot fail: its
                    // uncordon comes late, and the slot must wait for it.
                    sim.state.faults.fail_writes(
                        &format!("/api/v1/nodes/{node_name}"),
                        500,
                        restart.failed_writes,
                    );
                }
                let boot = sim
                    .reboot_node(node_name, Duration::from_millis(300))
                    .unwrap();
                rebooted.insert(node_name.clone(), boot);
                if dies {
                    agents.insert(node_name.clone(), RunningAgent::start(sim, node_name, None));
                }
            }
        }
        if all_done {
            return rebooted;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the rollout did not finish: rebooted {:?}; holders {:?}",
            rebooted.keys().collect::<Vec<_>>(),
            slot_holders(&client, name).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The rest of rollout `name` (uid `uid`): each node rebooted in turn, its
/// agent running on; then every node uncordoned, no slot or place in line
/// held, and each node drained once (its two pods evicted). Returns what
/// kubectl's Node watch saw.
async fn finish_roll(
    sim: &SimCluster,
    names: &[String],
    agents: &mut HashMap<String, RunningAgent>,
    watch: &common::kubectl::KubectlWatch,
    uid: &str,
    name: &str,
    restart: Restart,
) -> Vec<Value> {
    let client = sim.client();
    let rebooted = reboot_each_in_turn(sim, names, agents, uid, name, restart).await;
    assert_eq!(
        rebooted.len(),
        names.len(),
        "every node rebooted once: {rebooted:?}"
    );
    eventually("every node is uncordoned and nothing is held", || {
        let (c, names, name) = (client.clone(), names.to_vec(), name.to_string());
        async move {
            let mut all = slot_holders(&c, &name).await.is_empty()
                && place_holders(&c, &name).await.is_empty();
            for n in &names {
                all &= !unschedulable(&node(&c, n).await);
            }
            all
        }
    })
    .await;
    assert_eq!(
        granted_evictions(sim).len(),
        2 * names.len(),
        "each node drained once"
    );
    watch.seen.lock().unwrap().clone()
}

/// Eight nodes, two slots: each node is cordoned as it takes a slot, is
/// drained, waits for its reboot, and is uncordoned before the slot goes
/// on; the Node watch never sees more than two unschedulable. Half the
/// nodes reboot as a real node does (their agent dies with them and a new
/// one starts), half with their agent running on. Each node's first writes
/// after its reboot fail, so its uncordon is slow to land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_maintenance_over_eight_nodes_keeps_at_most_two_unschedulable_and_reboots_each() {
    let (sim, names) = pool(8).await;
    let client = sim.client();
    let Roll {
        _kubectl,
        watch,
        mut agents,
        uid,
    } = start_roll(
        &sim,
        &names,
        "roll",
        json!({"maxConcurrentDrains": 2, "waitForReboot": {"timeoutSeconds": 600}}),
    )
    .await;

    let rebooted =
        reboot_each_in_turn(&sim, &names, &mut agents, &uid, "roll", Restart::SLOW).await;
    assert_eq!(rebooted.len(), 8, "every node rebooted once: {rebooted:?}");
    // Every node is back in scheduling, its turn recorded done, no slot held.
    eventually("every node is uncordoned and no slot is held", || {
        let (c, names) = (client.clone(), names.clone());
        async move {
            let mut all = slot_holders(&c, "roll").await.is_empty();
            for name in &names {
                let n = node(&c, name).await;
                all &= !unschedulable(&n) && maintd::api::turns::record(&n).is_none();
            }
            all
        }
    })
    .await;
    // Each node was drained: its pods were evicted.
    let evicted = granted_evictions(&sim);
    assert_eq!(evicted.len(), 16, "{evicted:?}");
    // The agents that ran on through the reboot said it.
    for name in ["node-1", "node-3", "node-5", "node-7"] {
        let a = &agents[name];
        assert_eq!(a.count(EventKind::AwaitingReboot), 1, "{name}");
        assert_eq!(a.count(EventKind::RebootConfirmed), 1, "{name}");
    }
    // A node back after its reboot did not start another turn.
    for name in ["node-0", "node-2", "node-4", "node-6"] {
        assert_eq!(agents[name].count(EventKind::AwaitingReboot), 0, "{name}");
    }
    // kubectl's Node watch never saw more than two out of scheduling.
    let seen = watch.seen.lock().unwrap().clone();
    assert!(
        seen.iter().filter(|o| unschedulable(o)).count() >= 8,
        "the watch saw the cordons: {}",
        seen.len()
    );
    let most = most_unschedulable_at_once(&seen);
    assert!(
        (1..=2).contains(&most),
        "at most 2 unschedulable at once, saw {most}"
    );
    // A node taking its slot is cordoned and shows its turn under way in
    // one write: no version of a Node shows one without the other. (Once
    // it has booted again, its uncordon and its turn recorded done are
    // two writes.)
    let apart: Vec<String> = seen
        .iter()
        .filter(|n| {
            let rec = maintd::api::turns::record(n).filter(|t| t.uid == uid);
            let not_rebooted = rec
                .as_ref()
                .is_some_and(|t| Some(t.boot_id.as_str()) == maintd::api::turns::boot_id(n));
            (not_rebooted && !unschedulable(n))
                || (unschedulable(n) && rec.is_none() && !done_for(n, &uid))
        })
        .map(|n| {
            format!(
                "{} at {}: unschedulable {}, turn under way {}",
                n["metadata"]["name"],
                n["metadata"]["resourceVersion"],
                unschedulable(n),
                maintd::api::turns::record(n).is_some()
            )
        })
        .collect();
    assert!(apart.is_empty(), "{apart:#?}");
    for (_, a) in agents {
        a.stop().await;
    }
}

/// Six nodes, two drain slots, one cordoned ahead (`cordonAhead: 1`): while
/// two nodes drain and wait for their reboot, a third is cordoned, evicts
/// nothing and holds the one place in line; the rest stay schedulable. Its
/// agent restarted then takes up its place again, not queueing anew. Each
/// node drains and reboots in turn, and the Node watch never sees more than
/// slots + cordonAhead = 3 nodes unschedulable at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_maintenance_cordons_the_next_node_ahead_and_no_more() {
    let (sim, names) = pool(6).await;
    let client = sim.client();
    let Roll {
        _kubectl,
        watch,
        mut agents,
        uid,
    } = start_roll(
        &sim,
        &names,
        "ahead",
        json!({"maxConcurrentDrains": 2, "cordonAhead": 1, "waitForReboot": {"timeoutSeconds": 600}}),
    )
    .await;

    // Nothing reboots yet: two nodes drain and wait for it, and one more
    // takes the place in line and is cordoned.
    let ahead = |agents: &HashMap<String, RunningAgent>| {
        agents.iter().find_map(|(n, a)| {
            a.progress
                .status()
                .waiting
                .is_some_and(|w| w.contains("cordoned ahead of its turn"))
                .then(|| n.clone())
        })
    };
    eventually("two nodes drained and a third cordoned ahead", || {
        let drained = agents
            .values()
            .filter(|a| a.progress.status().phase == Phase::Drained)
            .count();
        let next = ahead(&agents);
        let c = client.clone();
        async move {
            let Some(next) = next else { return false };
            drained == 2
                && unschedulable(&node(&c, &next).await)
                && place_holders(&c, "ahead").await == [next.clone()]
        }
    })
    .await;
    let next = ahead(&agents).unwrap();
    let mut drained: Vec<String> = slot_holders(&client, "ahead").await;
    drained.sort();
    assert_eq!(drained.len(), 2, "{drained:?}");
    assert!(
        !drained.contains(&next),
        "the node cordoned ahead holds no slot"
    );
    // It evicted nothing: its pods are still on it.
    let evicted = granted_evictions(&sim);
    assert!(
        evicted.iter().all(|p| !p.starts_with(&format!("{next}-"))),
        "{next} evicted nothing yet: {evicted:?}"
    );
    // The other three wait uncordoned.
    for n in names.iter().filter(|n| **n != next && !drained.contains(n)) {
        assert!(
            !unschedulable(&node(&client, n).await),
            "{n} stays schedulable"
        );
    }
    // And each says it waits for a place in line (once its look at a place
    // that was free a moment ago is over).
    eventually("the others wait for a place in line", || {
        let all = names
            .iter()
            .filter(|n| **n != next && !drained.contains(n))
            .all(|n| {
                agents[n]
                    .progress
                    .status()
                    .waiting
                    .is_some_and(|w| w.contains("waiting for a place in line"))
            });
        async move { all }
    })
    .await;
    // Its agent restarts: the new one takes up the same place.
    agents.remove(&next).unwrap().stop().await;
    agents.insert(next.clone(), RunningAgent::start(&sim, &next, None));
    eventually("the restarted agent holds its place again", || {
        let w = agents[&next].progress.status().waiting;
        let (c, next) = (client.clone(), next.clone());
        async move {
            w.is_some_and(|w| w.contains("cordoned ahead of its turn"))
                && place_holders(&c, "ahead").await == [next]
        }
    })
    .await;

    let seen = finish_roll(
        &sim,
        &names,
        &mut agents,
        &watch,
        &uid,
        "ahead",
        Restart::NONE,
    )
    .await;
    assert_eq!(
        most_unschedulable_at_once(&seen),
        3,
        "two draining and one cordoned ahead, never more: {:?}",
        seen.iter()
            .map(|n| format!(
                "{} {} {}",
                n["metadata"]["name"],
                n["metadata"]["resourceVersion"],
                unschedulable(n)
            ))
            .collect::<Vec<_>>()
    );
    // The node cordoned ahead stayed cordoned across its agent's restart:
    // it was uncordoned once, after its reboot.
    let states: Vec<bool> = seen
        .iter()
        .filter(|o| o["metadata"]["name"] == next.as_str())
        .map(unschedulable)
        .collect();
    let uncordons = states.windows(2).filter(|w| w[0] && !w[1]).count();
    assert_eq!(uncordons, 1, "{next}: {states:?}");
    for (_, a) in agents {
        a.stop().await;
    }
}

/// Seven nodes, three drain slots, no `cordonAhead`: while three nodes
/// drain and wait for their reboot, the next ones wait in line for
/// whichever slot frees first, schedulable and evicting nothing. Each node
/// drains and reboots in turn, and the Node watch never sees more than the
/// three slots' nodes unschedulable at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_next_in_line_stay_schedulable_without_cordon_ahead() {
    let (sim, names) = pool(7).await;
    let client = sim.client();
    let Roll {
        _kubectl,
        watch,
        mut agents,
        uid,
    } = start_roll(
        &sim,
        &names,
        "line",
        json!({"maxConcurrentDrains": 3, "waitForReboot": {"timeoutSeconds": 600}}),
    )
    .await;

    let in_line = |agents: &HashMap<String, RunningAgent>| -> Vec<String> {
        let mut v: Vec<String> = agents
            .iter()
            .filter(|(_, a)| {
                a.progress
                    .status()
                    .waiting
                    .is_some_and(|w| w.contains("next in line"))
            })
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    };
    eventually("three nodes drained and others next in line", || {
        let drained = agents
            .values()
            .filter(|a| a.progress.status().phase == Phase::Drained)
            .count();
        let line = in_line(&agents);
        let c = client.clone();
        async move {
            let mut places = place_holders(&c, "line").await;
            places.sort();
            drained == 3 && !line.is_empty() && places == line
        }
    })
    .await;
    let line = in_line(&agents);
    let drained = slot_holders(&client, "line").await;
    assert_eq!(drained.len(), 3, "{drained:?}");
    // A node asks for a place in line once it found no slot free: the
    // first three took theirs at once, so (a race lost to a conflict
    // aside) none of them took a place the nodes behind then waited for.
    let places_taken = places_written_by(&sim, "line", &drained);
    assert!(
        places_taken.len() <= 1,
        "slot holders that also took a place in line: {places_taken:?}"
    );
    let evicted = granted_evictions(&sim);
    for n in &line {
        assert!(!drained.contains(n), "{n} in line holds no slot");
        assert!(
            !unschedulable(&node(&client, n).await),
            "{n} in line stays schedulable"
        );
        assert!(
            evicted.iter().all(|p| !p.starts_with(&format!("{n}-"))),
            "{n} in line evicted nothing yet: {evicted:?}"
        );
    }

    let seen = finish_roll(
        &sim,
        &names,
        &mut agents,
        &watch,
        &uid,
        "line",
        Restart::NONE,
    )
    .await;
    assert_eq!(
        most_unschedulable_at_once(&seen),
        3,
        "the three slots' nodes, never those in line"
    );
    // Each slot and place was renewed and given back from the agent's
    // own last write of it: read by name only after a write was refused.
    for (agent, (reads, refused)) in slot_reads(&sim) {
        assert!(
            reads <= refused,
            "{agent} read its slots {reads} times by name, after {refused} refused writes"
        );
    }
    for (_, a) in agents {
        a.stop().await;
    }
}

/// On an API server slow to answer slot writes (each committed 1.5 s
/// after it arrived), a node in line does not race the node whose place
/// has a freed slot's number: it waits for what its own slot writes took
/// before it tries, and sees the slot taken. Before, it tried after 0.3 s,
/// while the first node's take was still on its way, and was refused: on
/// a real API server under 1,000 agents, five refused writes a handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_slow_api_server_nodes_in_line_let_the_freed_slots_own_node_take_it() {
    let (sim, names) = pool(12).await;
    const LATE: Duration = Duration::from_millis(1500);
    sim.state.faults.commit_late(
        "/apis/coordination.k8s.io/v1/namespaces/maintd/leases",
        LATE,
    );
    let Roll {
        _kubectl,
        watch,
        mut agents,
        uid,
    } = start_roll(
        &sim,
        &names,
        "slow",
        json!({"maxConcurrentDrains": 3, "waitForReboot": {"timeoutSeconds": 600}}),
    )
    .await;
    finish_roll(
        &sim,
        &names,
        &mut agents,
        &watch,
        &uid,
        "slow",
        Restart::NONE,
    )
    .await;
    let (slot, place) = (lease_prefix("nm-slow"), lease_prefix(&place_group("slow")));
    let (slot, place) = (slot.as_str(), place.as_str());
    let entries = sim.state.audit.entries();
    // A node is in line from its place's take until its slot's: each
    // takes one slot in the rollout, and gives its place back after. A
    // take of it refused lost to the node that wrote the slot last before.
    // It did not wait if it sent its take before that node's landed, that
    // node holding the place of the slot's number since before the slot
    // was given back.
    let place_taken = |agent: &str, place_name: &str| {
        entries
            .iter()
            .find(|e| e.user_agent == agent && e.name == place_name && e.code < 300)
            .map(|e| e.t_ms)
    };
    let mut refused = Vec::new();
    let mut lined = 0;
    for n in &names {
        let agent = maintd::cluster::user_agent(n);
        let mine: Vec<_> = entries.iter().filter(|e| e.user_agent == agent).collect();
        let Some(in_line) = mine
            .iter()
            .find(|e| lease_write(e, place) && e.code < 300)
            .map(|e| e.t_ms)
        else {
            continue;
        };
        lined += 1;
        let took = mine
            .iter()
            .find(|e| lease_write(e, slot) && e.code < 300)
            .map_or(u64::MAX, |e| e.t_ms);
        for e in mine
            .iter()
            .filter(|e| lease_write(e, slot) && e.code == 409 && e.t_ms > in_line && e.t_ms <= took)
        {
            let written: Vec<_> = entries
                .iter()
                .filter(|w| w.name == e.name && w.code < 300 && w.t_ms <= e.t_ms)
                .collect();
            let [.., given_back, winner] = written[..] else {
                continue;
            };
            let own_place = format!("{place}{}", &e.name[slot.len()..]);
            let sent = e.t_ms.saturating_sub(LATE.as_millis() as u64);
            if place_taken(&winner.user_agent, &own_place).is_some_and(|t| t < given_back.t_ms)
                && sent < winner.t_ms
            {
                refused.push(format!(
                    "{n} at {} ms (in line from {in_line} ms): {} given back at {} ms, taken at {} ms by {} holding {own_place}",
                    e.t_ms, e.name, given_back.t_ms, winner.t_ms, winner.user_agent
                ));
            }
        }
    }
    assert!(lined >= 2, "nodes waited in line: {lined}");
    assert!(
        refused.is_empty(),
        "slot takes of nodes in line sent before the slot's own node's take landed: {refused:?}"
    );
    for (_, a) in agents {
        a.stop().await;
    }
}

/// What the names of slot group `group`'s Leases begin with (the slot's
/// number follows).
fn lease_prefix(group: &str) -> String {
    let first = maintd::coordination::slot_name(group, 0);
    first.trim_end_matches('0').to_string()
}

/// Whether audit entry `e` is a create or replace of a Lease whose name
/// begins with `prefix`, whatever its answer.
fn lease_write(e: &maintd_sim::audit::AuditEntry, prefix: &str) -> bool {
    e.resource == "leases.coordination.k8s.io"
        && (e.verb == "create" || e.verb == "update")
        && e.name.starts_with(prefix)
}

/// Which of `nodes` created or took over a place in line of
/// NodeMaintenance `name`.
fn places_written_by(sim: &SimCluster, name: &str, nodes: &[String]) -> Vec<String> {
    let prefix = lease_prefix(&place_group(name));
    let entries = sim.state.audit.entries();
    let mut wrote: Vec<String> = nodes
        .iter()
        .filter(|n| {
            let agent = maintd::cluster::user_agent(n);
            entries
                .iter()
                .any(|e| lease_write(e, &prefix) && e.code < 300 && e.user_agent == agent)
        })
        .cloned()
        .collect();
    wrote.sort();
    wrote
}

/// Per agent: how often it read a slot or place Lease by name, and how
/// many of its writes of them were refused as conflicts.
fn slot_reads(sim: &SimCluster) -> BTreeMap<String, (usize, usize)> {
    let leases = "/apis/coordination.k8s.io/v1/namespaces/maintd/leases";
    let mut by_agent: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for r in sim.state.audit.requests() {
        let Some(rest) = r.path.strip_prefix(leases) else {
            continue;
        };
        let rest = rest.split('?').next().unwrap_or_default();
        let named_slot = rest.starts_with("/maintd-reboot-");
        let e = by_agent.entry(r.user_agent).or_default();
        if r.method == "GET" && !r.watch && named_slot {
            e.0 += 1;
        }
        if (r.method == "PUT" || r.method == "POST") && r.code == 409 {
            e.1 += 1;
        }
    }
    by_agent
}

/// A node that does not boot again in time: with `onTimeout: Hold` it
/// stays cordoned and keeps its slot (the next node waits), with a Warning
/// naming the object; once the object says `Release`, it is uncordoned
/// and the next node takes its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_does_not_reboot_in_time_holds_the_rollout_or_lets_it_go_as_configured() {
    let (sim, names) = pool(2).await;
    let client = sim.client();
    let agents: Vec<RunningAgent> = names
        .iter()
        .map(|n| RunningAgent::start(&sim, n, None))
        .collect();
    let uid = create_roll(
        &client,
        "slow",
        json!({"maxConcurrentDrains": 1, "waitForReboot": {"timeoutSeconds": 5}}),
    )
    .await;
    // Whichever node takes the slot first drains, then waits for a reboot
    // that never comes.
    let warned = |a: &RunningAgent| {
        a.events().iter().any(|e| {
            e.event == EventKind::RebootOverdue
                && e.message.contains("has not booted again within 5 s")
                && e.message.contains("NodeMaintenance slow")
                && e.message.contains("onTimeout: Hold")
        })
    };
    eventually("one node says its reboot is overdue", || {
        let found = agents.iter().any(warned);
        async move { found }
    })
    .await;
    let (first, second) = if warned(&agents[0]) { (0, 1) } else { (1, 0) };
    let (first_name, second_name) = (&names[first], &names[second]);
    assert!(
        unschedulable(&node(&client, first_name).await),
        "held cordoned"
    );
    assert_eq!(
        slot_holders(&client, "slow").await,
        vec![first_name.clone()]
    );
    assert!(
        !unschedulable(&node(&client, second_name).await),
        "the next waits, schedulable"
    );
    assert_eq!(agents[first].progress.status().phase, Phase::Drained);
    assert!(
        agents[second]
            .progress
            .status()
            .waiting
            .as_deref()
            .is_some_and(|w| w.contains("held by")),
        "{:?}",
        agents[second].progress.status()
    );
    assert!(
        agents[first]
            .progress
            .status()
            .last_error
            .is_some_and(|e| e.contains("no reboot within 5 s"))
    );

    // Release: the held node lets go without a reboot, and the next one
    // takes its turn.
    nodemaintenances(&client)
        .patch(
            "slow",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"waitForReboot": {"timeoutSeconds": 5, "onTimeout": "Release"}}}),
            ),
        )
        .await
        .unwrap();
    let c = client.clone();
    let (f, s) = (first_name.clone(), second_name.clone());
    let u = uid.clone();
    eventually("the held node is let go and the next one drains", || {
        let (c, f, s, u) = (c.clone(), f.clone(), s.clone(), u.clone());
        async move {
            let fnode = node(&c, &f).await;
            done_for(&fnode, &u) && !unschedulable(&fnode) && unschedulable(&node(&c, &s).await)
        }
    })
    .await;
    // The second node's own turn runs out the same way, and the rollout
    // ends with both uncordoned and no slot held.
    let c = client.clone();
    eventually_within("both turns over", Duration::from_secs(40), || {
        let (c, u, names) = (c.clone(), uid.clone(), names.clone());
        async move {
            let mut all = true;
            for n in &names {
                let v = node(&c, n).await;
                all &= done_for(&v, &u) && !unschedulable(&v);
            }
            all && slot_holders(&c, "slow").await.is_empty()
        }
    })
    .await;
    assert_eq!(agents[first].count(EventKind::RebootConfirmed), 0);
    for a in agents {
        a.stop().await;
    }
}

/// Seven nodes in three drain orders (`maintd.io/drain-order`: two of
/// order 0, one of them unlabelled; three of 5; two of 9; mixed so that
/// name order is not theirs), three slots. While the two nodes of order 0
/// take their turns, the third slot stays free: the nodes of order 5 say
/// they wait for order 0, and the object's status names it. kubectl's
/// Node watch sees no node cordoned before every node of a lower order is
/// back in scheduling, and every node reboots once. Half the nodes reboot
/// as a real node does (their agent dies with them and a new one starts),
/// and each node's first eight writes after its reboot fail, so its
/// uncordon lands seconds late while the third slot is free: the node's
/// turn counts until it is back in scheduling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_maintenance_takes_its_nodes_group_by_group_by_drain_order() {
    let (sim, names) = pool(7).await;
    let client = sim.client();
    let orders: BTreeMap<&str, i64> = BTreeMap::from([
        ("node-0", 5),
        ("node-1", 0),
        ("node-2", 5),
        ("node-3", 9),
        ("node-4", 5),
        ("node-5", 0),
        ("node-6", 9),
    ]);
    for (n, o) in &orders {
        if *n == "node-5" {
            continue;
        }
        Api::<Node>::all(client.clone())
            .patch(
                n,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"labels": {"maintd.io/drain-order": o.to_string()}}}),
                ),
            )
            .await
            .unwrap();
    }
    let Roll {
        _kubectl,
        watch,
        mut agents,
        uid,
    } = start_roll(
        &sim,
        &names,
        "ordered",
        json!({"maxConcurrentDrains": 3, "waitForReboot": {"timeoutSeconds": 600}}),
    )
    .await;

    // Order 0 drains; the free slot waits for it, not for order 5.
    eventually("order 0 drained and order 5 waiting for it", || {
        let first_drained = ["node-1", "node-5"]
            .iter()
            .all(|n| agents[*n].progress.status().phase == Phase::Drained);
        let next_wait = ["node-0", "node-2", "node-4"].iter().all(|n| {
            agents[*n]
                .progress
                .status()
                .waiting
                .is_some_and(|w| w.contains("nodes of drain order 0"))
        });
        let c = client.clone();
        async move {
            let status = nodemaintenances(&c).get("ordered").await.unwrap().data["status"].clone();
            first_drained
                && next_wait
                && status["drainOrder"] == 0
                && status["drainOrderNodesLeft"] == 2
                && status["drainOrderNodes"] == json!(["node-1", "node-5"])
        }
    })
    .await;
    let mut holders = slot_holders(&client, "ordered").await;
    holders.sort();
    assert_eq!(holders, ["node-1", "node-5"], "the third slot stays free");
    for n in ["node-0", "node-2", "node-3", "node-4", "node-6"] {
        assert!(
            !unschedulable(&node(&client, n).await),
            "{n} is not cordoned yet"
        );
    }

    let seen = finish_roll(
        &sim,
        &names,
        &mut agents,
        &watch,
        &uid,
        "ordered",
        Restart::SLOWER,
    )
    .await;
    // Each node's cordon and uncordon (the first change seen back in
    // scheduling after it, not the node's later writes), in the order the
    // watch saw them.
    let mut cordoned: BTreeMap<String, usize> = BTreeMap::new();
    let mut back: BTreeMap<String, usize> = BTreeMap::new();
    for (i, o) in seen.iter().enumerate() {
        let n = o["metadata"]["name"].as_str().unwrap_or("").to_string();
        if unschedulable(o) {
            cordoned.entry(n).or_insert(i);
        } else if cordoned.contains_key(&n) {
            back.entry(n).or_insert(i);
        }
    }
    assert_eq!(cordoned.len(), 7, "every node was cordoned: {cordoned:?}");
    for (a, oa) in &orders {
        for (b, ob) in &orders {
            if oa < ob {
                assert!(
                    back[*a] < cordoned[*b],
                    "{b} (order {ob}) was cordoned before {a} (order {oa}) was back in scheduling"
                );
            }
        }
    }
    assert!(most_unschedulable_at_once(&seen) <= 3);
    for (_, a) in agents {
        a.stop().await;
    }
}

/// A node drained and waiting for its reboot whose turn record someone
/// removes (the record its cordon carried): the agent writes it again,
/// at the same boot, so the reboot still ends the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_record_removed_while_the_node_waits_for_its_reboot_is_written_again() {
    let (sim, names) = pool(1).await;
    let client = sim.client();
    let agent = RunningAgent::start(&sim, &names[0], None);
    let uid = create_roll(
        &client,
        "roll",
        json!({"maxConcurrentDrains": 1, "waitForReboot": {"timeoutSeconds": 600}}),
    )
    .await;
    agent.wait_event(EventKind::AwaitingReboot).await;
    let before = maintd::api::turns::record(&node(&client, &names[0]).await)
        .expect("the turn is recorded under way");
    Api::<Node>::all(client.clone())
        .patch(
            &names[0],
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                maintd::api::turns::TURN_ANNOTATION: null}}})),
        )
        .await
        .unwrap();
    eventually("the turn's record is back", || {
        let c = client.clone();
        let name = names[0].clone();
        async move { maintd::api::turns::record(&node(&c, &name).await).is_some() }
    })
    .await;
    let again = maintd::api::turns::record(&node(&client, &names[0]).await).unwrap();
    assert_eq!(
        (again.uid.as_str(), again.boot_id.as_str()),
        (uid.as_str(), before.boot_id.as_str())
    );
    assert!(
        unschedulable(&node(&client, &names[0]).await),
        "still cordoned"
    );
    agent.stop().await;
}

/// Two nodes, one slot, and each agent's watch of its Node a second and a
/// half behind the writes, as an API server under load delivers them: the
/// agent does not take the view's lag for a turn not yet recorded. Each
/// node's turn is recorded once (the boot and the time it started at are
/// never written over), and the agent writes its Node no more than the turn
/// needs. (Before, each time its last write ended the agent wrote the
/// turn's start again with a new time, until its view showed one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_recorded_once_while_the_agents_view_of_its_node_lags() {
    let (sim, names) = pool(2).await;
    for n in &names {
        sim.state
            .faults
            .lag_watches("/api/v1/nodes", Some(n), Duration::from_millis(1500));
    }
    // Someone else writes the Nodes all the time, as kubelets' status
    // heartbeats do: the agent's writes from its lagging view are often
    // refused, and it writes from a fresh read, which its view shows only
    // when the watch brings it.
    let heartbeats = {
        let (client, names) = (sim.client(), names.clone());
        tokio::spawn(async move {
            for beat in 0u64.. {
                for n in &names {
                    let _ = Api::<Node>::all(client.clone())
                        .patch(
                            n,
                            &PatchParams::default(),
                            &Patch::Merge(
                                json!({"metadata": {"labels": {"beat": beat.to_string()}}}),
                            ),
                        )
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let Roll {
        _kubectl,
        watch,
        mut agents,
        uid,
    } = start_roll(
        &sim,
        &names,
        "lagging",
        json!({"maxConcurrentDrains": 1, "waitForReboot": {"timeoutSeconds": 600}}),
    )
    .await;
    let seen = finish_roll(
        &sim,
        &names,
        &mut agents,
        &watch,
        &uid,
        "lagging",
        Restart::NONE,
    )
    .await;
    heartbeats.abort();
    let audit = sim.state.audit.entries();
    for n in &names {
        let records: std::collections::BTreeSet<&str> = seen
            .iter()
            .filter(|o| o["metadata"]["name"] == n.as_str())
            .filter_map(|o| {
                o["metadata"]["annotations"][maintd::api::turns::TURN_ANNOTATION].as_str()
            })
            .collect();
        assert_eq!(
            records.len(),
            1,
            "{n}'s turn was recorded once: {records:?}"
        );
        let agent = maintd::cluster::user_agent(n);
        let writes: Vec<(u16, Option<String>)> = audit
            .iter()
            .filter(|e| e.resource == "nodes" && e.name == *n && e.user_agent == agent)
            .map(|e| (e.code, e.subresource.clone()))
            .collect();
        // Its cordon and taint, the turn's start, its end, its uncordon:
        // a write each, whatever the view said meanwhile.
        let landed = writes
            .iter()
            .filter(|(code, sub)| *code == 200 && sub.is_none())
            .count();
        assert!(
            landed <= 4,
            "{n}: the agent wrote its Node {landed} times: {writes:?}"
        );
    }
    for (_, a) in agents {
        a.stop().await;
    }
}

/// The agent's writes of its Node go one at a time, each from the last
/// one's answer: as a node takes its turn it taints itself and records the
/// turn at once, and neither loses a race to the other (before, both
/// started from the same version of the Node and the second was refused a
/// conflict, then read the Node and wrote again). The node is cordoned by
/// an admin already, so the node controller's taint of a cordon does not
/// come in between. With the agent's own client and rights.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_writes_of_its_node_do_not_race_one_another() {
    let (sim, names) = pool(1).await;
    let node_name = &names[0];
    Api::<Node>::all(sim.client())
        .patch(
            node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    sim.wait_settled(Duration::from_secs(10)).await.unwrap();
    let client = maintd::testbed::agent_client(&sim, node_name);
    let view = maintd::index::Index::new();
    let stop = tokio_util::sync::CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    tokio::spawn(view.clone().run(
        client.clone(),
        maintd::index::WatchTarget::new(
            "/api/v1/nodes",
            Some(format!("metadata.name={node_name}")),
            maintd::index::WatchGuard::default(),
        ),
        stop,
    ));
    // The node controller's taint of the cordon is in before the agent
    // writes: nobody else writes the Node from here on.
    view.wait_until(|v| {
        v.by_name(node_name).is_some_and(|n| {
            n["spec"]["taints"].as_array().is_some_and(|ts| {
                ts.iter()
                    .any(|t| t["key"] == "node.kubernetes.io/unschedulable")
            })
        })
    })
    .await;
    let ops = maintd::cluster::ClusterOps::new(client, node_name).with_view(view);
    let taint = maintd::cluster::TaintSpec::draining();
    let before = sim.state.audit.entries().len();
    for round in 0..5 {
        // A stand-in for the turn's record: only maintd's own annotations
        // are its to change.
        let record = format!("round {round}");
        let (marked, annotated) = tokio::join!(
            ops.mark(&taint, true),
            ops.annotate(|n| {
                (n["metadata"]["annotations"][maintd::api::turns::TURN_ANNOTATION] != record)
                    .then(|| json!({maintd::api::turns::TURN_ANNOTATION: record}))
            }),
        );
        marked.unwrap();
        annotated.unwrap();
        ops.unmark(&taint).await.unwrap();
    }
    let audit = sim.state.audit.entries();
    let writes: Vec<(u16, &str)> = audit[before..]
        .iter()
        .filter(|e| e.resource == "nodes" && e.name == *node_name)
        .map(|e| (e.code, e.user_agent.as_str()))
        .collect();
    assert_eq!(
        writes,
        vec![(200, maintd::cluster::user_agent(node_name).as_str()); 15],
        "the agent's three writes a round, none refused a conflict, and no one else's"
    );
}

/// The lists of slot Leases each agent sent so far, by agent.
fn lease_lists(sim: &SimCluster) -> BTreeMap<String, usize> {
    let mut by_agent = BTreeMap::new();
    for r in sim.state.audit.requests() {
        if r.method == "GET" && !r.watch && r.path.ends_with("/namespaces/maintd/leases") {
            *by_agent.entry(r.user_agent).or_default() += 1;
        }
    }
    by_agent
}

/// A rollout whose object appeared after its agents started: no slot of
/// it can be one a node took before them, and no node looks for one. Each
/// agent lists the slot Leases once, as it starts (for the reboot slots it
/// held before a restart); its waits for the new object's turns add no
/// list, where in a fleet's first wave every node sent two, all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_started_after_its_agents_adds_no_look_for_slots_held_before() {
    let (sim, names) = pool(4).await;
    let mut agents: HashMap<String, RunningAgent> = names
        .iter()
        .map(|n| (n.clone(), RunningAgent::start(&sim, n, None)))
        .collect();
    let sim_ref = &sim;
    let agents_ref = &agents;
    eventually(
        "every agent knows there is no NodeMaintenance yet and has looked for the slots it held",
        || async move {
            agents_ref.values().all(|a| a.agent.maintenance.ready())
                && lease_lists(sim_ref).len() == 4
        },
    )
    .await;
    let before = lease_lists(&sim);
    let uid = create_roll(
        &sim.client(),
        "late",
        json!({"maxConcurrentDrains": 1, "waitForReboot": {"timeoutSeconds": 600}}),
    )
    .await;
    let rebooted =
        reboot_each_in_turn(&sim, &names, &mut agents, &uid, "late", Restart::NONE).await;
    assert_eq!(rebooted.len(), 4, "every node took its turn: {rebooted:?}");
    assert_eq!(lease_lists(&sim), before, "the turns added no list");
}
