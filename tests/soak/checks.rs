//! The soak's invariants besides the simulator's own (no eviction takes a
//! budget below its minimum, see `maintd_sim::invariants`):
//!
//! - no static pod manifest is ever lost: each is in the kubelet's
//!   directory or the stash, byte-identical (checked all along);
//! - no shutdown lock is held once the node is drained, nor past logind's
//!   delay limit;
//! - a blocked drain names what blocks it;
//! - once every maintenance has ended and the agent has converged, the node
//!   carries none of maintd's marks and is schedulable unless an admin
//!   cordoned it, and every manifest is back;
//! - an agent deletes a pod past its budget only when a deadline forces it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use maintd::drain::progress::Phase;
use maintd_sim::resources::Gr;
use serde_json::Value;
use tokio::time::Instant;

use super::round::Round;
use crate::common::dir_files;

type Files = Vec<(String, Vec<u8>)>;

/// A check failing this many times in a row is a finding (a manifest
/// being renamed between the two directories is seen in neither once).
const MISSES: u32 = 5;
/// How long a drained node's agent may take to let its lock go.
const LOCK_GRACE: Duration = Duration::from_secs(2);
/// How long a drain may say Blocked without naming a blocker.
const BLOCKER_GRACE: Duration = Duration::from_secs(1);
/// How long the agents may take to converge once the round has ended:
/// a watch that failed under the round's faults retries at most every
/// 30 s, and a view must be whole before anything is undone.
const CONVERGE_WITHIN: Duration = Duration::from_secs(45);

/// What the continuous checks remember between looks.
pub struct Watcher {
    /// Per node: the static manifests the round started with, the
    /// kubelet's directory and the stash.
    manifests: Vec<(Files, PathBuf, PathBuf)>,
    misses: HashMap<usize, u32>,
    drained_held_since: HashMap<usize, Instant>,
    blocked_unnamed_since: HashMap<usize, Instant>,
    pub findings: Vec<String>,
}

impl Watcher {
    pub fn new(round: &Round) -> Watcher {
        let manifests = round
            .nodes
            .iter()
            .map(|rig| {
                let dir = round.sim.static_pod_dir(&rig.name).unwrap_or_default();
                let stash =
                    maintd::drain::static_pods::StaticPodStash::new(dir.clone(), None).stash_dir;
                (dir_files(&dir), dir, stash)
            })
            .collect();
        Watcher {
            manifests,
            misses: HashMap::new(),
            drained_held_since: HashMap::new(),
            blocked_unnamed_since: HashMap::new(),
            findings: Vec::new(),
        }
    }

    fn find(&mut self, what: String) {
        if !self.findings.contains(&what) {
            self.findings.push(what);
        }
    }

    /// One look at everything that must hold at every moment.
    pub fn look(&mut self, round: &Round) {
        for i in 0..round.nodes.len() {
            self.look_at_manifests(round, i);
            self.look_at_lock(round, i);
            self.look_at_blockers(round, i);
        }
    }

    fn look_at_manifests(&mut self, round: &Round, i: usize) {
        let (original, dir, stash) = &self.manifests[i];
        let mut now = dir_files(dir);
        now.extend(dir_files(stash));
        now.sort();
        let misses = self.misses.entry(i).or_default();
        if now == *original {
            *misses = 0;
            return;
        }
        *misses += 1;
        if *misses == MISSES {
            let names = |f: &Files| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
            let what = format!(
                "{}: static manifests lost or changed: started with {:?}, the kubelet's directory and the stash hold {:?}",
                round.nodes[i].name,
                names(original),
                names(&now)
            );
            self.find(what);
        }
    }

    fn look_at_lock(&mut self, round: &Round, i: usize) {
        let rig = &round.nodes[i];
        let (Some(host), Some(agent)) = (&rig.host, &rig.agent) else {
            return;
        };
        for r in host.logind.shutdown_records() {
            if r.timed_out {
                self.find(format!(
                    "{}: logind's delay limit ran out with the shutdown lock still held ({:?})",
                    rig.name, r.waited_for
                ));
            }
        }
        let held = host
            .logind
            .inhibitors()
            .iter()
            .any(|l| l.who == "maintd" && l.mode == "delay");
        let drained = agent.agent.progress().status().phase == Phase::Drained;
        let waiting = host.logind.preparing_for_shutdown()
            && host.logind.shutdown_records().len() == host.rebooted;
        if !(held && drained && waiting) {
            self.drained_held_since.remove(&i);
            return;
        }
        let since = *self
            .drained_held_since
            .entry(i)
            .or_insert_with(Instant::now);
        if since.elapsed() > LOCK_GRACE {
            self.find(format!(
                "{}: the agent still holds its shutdown lock {LOCK_GRACE:?} after the node was drained",
                rig.name
            ));
        }
    }

    fn look_at_blockers(&mut self, round: &Round, i: usize) {
        let Some(agent) = &round.nodes[i].agent else {
            return;
        };
        let st = agent.agent.progress().status();
        let unnamed = st.phase == Phase::Blocked
            && (st.blockers.is_empty() || st.blockers.iter().any(|b| b.reason.is_empty()));
        if !unnamed {
            self.blocked_unnamed_since.remove(&i);
            return;
        }
        let since = *self
            .blocked_unnamed_since
            .entry(i)
            .or_insert_with(Instant::now);
        if since.elapsed() > BLOCKER_GRACE {
            self.find(format!(
                "{}: the drain says Blocked but names no blocker: {:?}",
                round.nodes[i].name, st.blockers
            ));
        }
    }

    /// Waits until every node has converged (bounded); each that has not
    /// is a finding saying what is left.
    pub async fn converge(&mut self, round: &Round) {
        let deadline = Instant::now() + CONVERGE_WITHIN;
        loop {
            self.look(round);
            let left: Vec<String> = (0..round.nodes.len())
                .filter_map(|i| self.leftovers(round, i))
                .collect();
            if left.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                for l in left {
                    self.find(format!(
                        "not converged {CONVERGE_WITHIN:?} after every maintenance ended: {l}"
                    ));
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What of a maintenance is still on node `i`, if anything.
    fn leftovers(&self, round: &Round, i: usize) -> Option<String> {
        let rig = &round.nodes[i];
        let node = round.sim.state.store().get(&Gr::nodes(), "", &rig.name)?;
        let mut left = marks(&node);
        let cordoned = node["spec"]["unschedulable"] == true;
        if cordoned != rig.admin_cordoned {
            left.push(format!(
                "unschedulable is {cordoned}, the admin's cordon {}",
                rig.admin_cordoned
            ));
        }
        let (original, dir, stash) = &self.manifests[i];
        if dir_files(dir) != *original || !dir_files(stash).is_empty() {
            left.push("static manifests not all back in the kubelet's directory".into());
        }
        if let Some(a) = &rig.agent {
            let st = a.agent.progress().status();
            if st.phase != Phase::Idle || !st.triggers.is_empty() {
                left.push(format!(
                    "the agent says {:?} for {:?}",
                    st.phase, st.triggers
                ));
            }
        }
        (!left.is_empty()).then(|| format!("{}: {}", rig.name, left.join("; ")))
    }

    /// Pods the agents deleted past their budgets without a deadline.
    pub fn judge_bypasses(&mut self, round: &Round) {
        for b in round.sim.state.invariants.bypasses() {
            let by = round
                .nodes
                .iter()
                .find(|rig| b.by.ends_with(&format!("(node {})", rig.name)));
            if let Some(rig) = by
                && !rig.had_deadline
            {
                self.find(format!(
                    "{}: the agent deleted {} past budget {} with no deadline forcing it",
                    rig.name, b.pod, b.budget
                ));
            }
        }
    }
}

/// maintd's marks on a Node: its taints, annotations and labels.
fn marks(node: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for t in node["spec"]["taints"].as_array().into_iter().flatten() {
        if t["key"]
            .as_str()
            .is_some_and(|k| k.starts_with("maintd.io/"))
        {
            out.push(format!("taint {}", t["key"]));
        }
    }
    for field in ["annotations", "labels"] {
        for (k, _) in node["metadata"][field].as_object().into_iter().flatten() {
            if k.starts_with("maintd.io/") {
                out.push(format!("{field} {k}"));
            }
        }
    }
    out
}
