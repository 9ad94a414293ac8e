//! The soak's invariants, but for the budgets (audit.rs): checked on a
//! sample every half second while the round runs (a read that fails while
//! the API server is away is skipped, not counted), and once the
//! maintenance is over.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;
use maintd::coordination::lease_holder;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::nodedrain;
use super::plan::{Kind, Plan};
use super::round::turn_done;
use super::world::World;

/// How long a node may keep its slot once its turn is over (its agent
/// may have been killed just then, and takes a moment to start again and
/// give it back).
const LINGER: Duration = Duration::from_secs(45);

/// How many times each invariant was checked.
#[derive(Debug, Default, Clone)]
pub struct Checks(pub BTreeMap<&'static str, usize>);

impl Checks {
    pub fn add(&mut self, what: &'static str, n: usize) {
        *self.0.entry(what).or_default() += n;
    }

    pub fn merge(&mut self, other: &Checks) {
        for (k, v) in &other.0 {
            self.add(k, *v);
        }
    }
}

/// What the checks need of a round.
#[derive(Debug, Clone)]
pub struct Watched {
    pub kind: Kind,
    pub uid: String,
    pub pool: Vec<String>,
    /// The slot Leases' group: `nm-<name>`.
    pub group: String,
    /// Per pool node: its static pod directory and stash.
    pub dirs: Vec<(PathBuf, PathBuf)>,
    pub manifest: (String, Vec<u8>),
}

impl Watched {
    pub fn new(plan: &Plan, world: &World, uid: &str) -> Watched {
        Watched {
            kind: plan.kind,
            uid: uid.to_string(),
            pool: world.pool.clone(),
            group: format!("nm-{}", world.maintenance),
            dirs: world
                .agents
                .iter()
                .map(|a| (a.manifests.clone(), a.stash.clone()))
                .collect(),
            manifest: world.manifest.clone(),
        }
    }
}

/// What the sampling found.
#[derive(Debug, Default)]
pub struct Samples {
    pub checks: Checks,
    pub violations: Vec<String>,
}

/// Samples the invariants every half second until `stop`.
pub fn watch(
    admin: kube::Client,
    w: Watched,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Samples> {
    tokio::spawn(async move {
        let mut out = Samples::default();
        // When each holder was first seen holding a slot past its turn.
        let mut past_turn: BTreeMap<String, Instant> = BTreeMap::new();
        while !stop.is_cancelled() {
            manifests(&w, &mut out);
            if let Some((held, cordoned)) = slots_and_cordons(&admin, &w).await {
                out.checks.add("slots and cordons sampled", 1);
                judge_slots(&admin, &w, &held, cordoned, &mut past_turn, &mut out).await;
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
        out.violations.sort();
        out.violations.dedup();
        out
    })
}

/// Each static pod manifest is in the kubelet's directory or in the stash,
/// whole, at every moment. A move between the two reads of a sample can
/// make a manifest look absent from both: it is looked for again.
fn manifests(w: &Watched, out: &mut Samples) {
    let (name, bytes) = &w.manifest;
    for (dir, stash) in &w.dirs {
        let found = (0..3).find_map(|_| {
            [dir, stash]
                .iter()
                .find_map(|d| std::fs::read(d.join(name)).ok())
        });
        out.checks.add("static pod manifests sampled", 1);
        match found {
            Some(b) if &b == bytes => {}
            Some(_) => out.violations.push(format!(
                "{} changed on its way to or from the stash",
                dir.join(name).display()
            )),
            None => out.violations.push(format!(
                "{name} is neither in {} nor in {}: lost",
                dir.display(),
                stash.display()
            )),
        }
    }
}

/// The held slot Leases of the round's group (name, holder) and how many
/// pool nodes are cordoned; None if the API server did not answer.
async fn slots_and_cordons(
    admin: &kube::Client,
    w: &Watched,
) -> Option<(Vec<(String, String)>, usize)> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "maintd");
    let label = format!("{}={}", maintd::coordination::GROUP_LABEL, w.group);
    let list = leases
        .list(&ListParams::default().labels(&label))
        .await
        .ok()?;
    let held = list
        .items
        .iter()
        .filter_map(|l| {
            let holder = lease_holder(l)?;
            Some((
                l.metadata.name.clone().unwrap_or_default(),
                holder.to_string(),
            ))
        })
        .collect();
    let nodes: Api<Node> = Api::all(admin.clone());
    let mut cordoned = 0;
    for n in &w.pool {
        let node = nodes.get(n).await.ok()?;
        if node.spec.and_then(|s| s.unschedulable) == Some(true) {
            cordoned += 1;
        }
    }
    Some((held, cordoned))
}

/// A rolling maintenance never has more slots held than it has; only its
/// own nodes hold them, and only in their turn (a node whose turn is over
/// gives its slot back within [`LINGER`]); when turns end with a reboot, a
/// node stays cordoned only in its turn, so no more nodes are out of
/// scheduling at once than there are slots.
async fn judge_slots(
    admin: &kube::Client,
    w: &Watched,
    held: &[(String, String)],
    cordoned: usize,
    past_turn: &mut BTreeMap<String, Instant>,
    out: &mut Samples,
) {
    let Kind::Rolling { slots, reboot } = w.kind else {
        if !held.is_empty() {
            out.violations.push(format!(
                "a one-node maintenance holds slot Leases: {held:?}"
            ));
        }
        return;
    };
    if held.len() > slots as usize {
        out.violations.push(format!(
            "{} slots held at once, the maintenance has {slots}: {held:?}",
            held.len()
        ));
    }
    if reboot && cordoned > slots as usize {
        out.violations.push(format!(
            "{cordoned} nodes out of scheduling at once, the maintenance has {slots} slots"
        ));
    }
    for (lease, holder) in held {
        let index_ok = lease
            .rsplit('-')
            .next()
            .and_then(|i| i.parse::<u32>().ok())
            .is_some_and(|i| i < slots);
        if !index_ok {
            out.violations.push(format!(
                "slot Lease {lease} is not one of the maintenance's {slots}"
            ));
        }
        if !w.pool.contains(holder) {
            out.violations.push(format!(
                "slot Lease {lease} is held by {holder}, which the maintenance does not select"
            ));
            continue;
        }
        let over = if reboot {
            turn_done(admin, holder, &w.uid).await
        } else {
            nodedrain(admin, holder)
                .await
                .is_some_and(|d| d["status"]["phase"] == "Drained")
        };
        if !over {
            past_turn.remove(holder);
            continue;
        }
        let since = *past_turn.entry(holder.clone()).or_insert_with(Instant::now);
        if since.elapsed() > LINGER {
            out.violations.push(format!(
                "{holder} still holds slot Lease {lease} {LINGER:?} after its turn was over"
            ));
        }
    }
}

/// Where the maintenance stands now: every node it drains is drained (or
/// its turn over), or its NodeDrain names the pods that hold it.
pub async fn finished_or_named(
    admin: &kube::Client,
    plan: &Plan,
    world: &World,
    uid: &str,
    checks: &mut Checks,
    violations: &mut Vec<String>,
) {
    let nodes: Vec<&String> = match plan.kind {
        Kind::Drain => vec![&world.pool[0]],
        Kind::Rolling { .. } => world.pool.iter().collect(),
    };
    for n in nodes {
        checks.add("drains finished or held by a named pod", 1);
        if turn_done(admin, n, uid).await {
            continue;
        }
        let Some(d) = nodedrain(admin, n).await else {
            violations.push(format!("{n} has no NodeDrain"));
            continue;
        };
        let st = &d["status"];
        let phase = st["phase"].as_str().unwrap_or_default();
        let named = st["blockers"].as_array().is_some_and(|b| {
            !b.is_empty()
                && b.iter()
                    .all(|b| b["reason"].as_str().is_some_and(|r| !r.is_empty()))
        });
        let waiting = matches!(plan.kind, Kind::Rolling { .. }) && phase == "Idle";
        if phase != "Drained" && !named && !waiting {
            violations.push(format!(
                "{n}'s drain is {phase} and names nothing that holds it: {st}"
            ));
        }
    }
}

/// Once the maintenance is deleted, within `patience`: every pool node
/// schedulable and without maintd's taints, every manifest back whole in
/// the kubelet's directory, no slot held.
pub async fn undone(
    admin: &kube::Client,
    w: &Watched,
    patience: Duration,
    checks: &mut Checks,
    violations: &mut Vec<String>,
) {
    let deadline = Instant::now() + patience;
    loop {
        let left = leftovers(admin, w).await;
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            violations.extend(
                left.into_iter()
                    .map(|l| format!("{patience:?} after the maintenance was deleted: {l}")),
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    checks.add("nodes back in service at the end", w.pool.len());
    checks.add("manifests back at the end", w.dirs.len());
    checks.add("slots given back at the end", 1);
}

async fn leftovers(admin: &kube::Client, w: &Watched) -> Vec<String> {
    let mut left = Vec::new();
    let nodes: Api<Node> = Api::all(admin.clone());
    for n in &w.pool {
        match nodes.get(n).await {
            Ok(node) => {
                let spec = node.spec.unwrap_or_default();
                if spec.unschedulable == Some(true) {
                    left.push(format!("{n} is cordoned"));
                }
                for t in spec.taints.unwrap_or_default() {
                    if t.key.starts_with("maintd.io/") {
                        left.push(format!("{n} has taint {}:{}", t.key, t.effect));
                    }
                }
            }
            Err(e) => left.push(format!("{n} cannot be read: {e}")),
        }
    }
    let (name, bytes) = &w.manifest;
    for (dir, stash) in &w.dirs {
        if std::fs::read(dir.join(name)).ok().as_ref() != Some(bytes) {
            left.push(format!(
                "{} is not back as it was",
                dir.join(name).display()
            ));
        }
        if stash.join(name).exists() {
            left.push(format!("{} is still stashed", stash.join(name).display()));
        }
    }
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "maintd");
    let label = format!("{}={}", maintd::coordination::GROUP_LABEL, w.group);
    match leases.list(&ListParams::default().labels(&label)).await {
        Ok(list) => {
            for l in &list.items {
                if let Some(h) = lease_holder(l) {
                    left.push(format!(
                        "slot Lease {} is held by {h}",
                        l.metadata.name.clone().unwrap_or_default()
                    ));
                }
            }
        }
        Err(e) => left.push(format!("the slot Leases cannot be listed: {e}")),
    }
    left
}
