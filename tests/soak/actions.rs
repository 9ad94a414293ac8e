//! What happens in a soak round, as a list drawn from its seed: triggers
//! that start a maintenance and the cancels that end it, agent kills, API
//! faults and an admin's cordons, each after a short pause. A list replays
//! as it is, or with actions left out when a failure is shrunk.

use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;

use super::world::NODES;

/// A NodeMaintenance's stage, as the soak sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Cordon,
    Drain,
    Complete,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Cordon => "Cordon",
            Stage::Drain => "Drain",
            Stage::Complete => "Complete",
        }
    }
}

/// Which nodes a NodeMaintenance selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Node(usize),
    /// Every node labelled with this pool.
    Pool(&'static str),
}

/// A fault of the simulated API server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// This share of requests answered with this code.
    Errors(f64, u16),
    /// Every answer delayed this many milliseconds.
    Delay(u64),
    /// Nothing answers, open or new connections, until cleared.
    BlackHole,
    /// Every open connection goes silent for good.
    Freeze,
    /// The API server restarts: connections close, watches get 410.
    Restart,
    /// Evictions are forbidden (RBAC taken away).
    ForbidEvictions,
}

/// One thing the soak does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Taint(usize),
    Untaint(usize),
    /// Creates NodeMaintenance `soak-<n>`.
    Maintenance(usize, Target, Stage),
    SetStage(usize, Stage),
    DeleteMaintenance(usize),
    /// `POST /v1/drain` on the node's local endpoint, with a deadline in
    /// seconds, or none.
    LocalDrain(usize, Option<u64>),
    LocalUndrain(usize),
    /// `systemctl reboot` through the node's logind.
    Shutdown(usize),
    CancelShutdown(usize),
    /// The agent's task aborted and a fresh agent started.
    Kill(usize),
    Fault(Fault),
    ClearFaults,
    AdminCordon(usize),
    AdminUncordon(usize),
}

/// An action and the pause before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub pause_ms: u64,
    pub action: Action,
}

/// Draws a round's steps: one to three maintenances, each started by a
/// trigger, with chaos around them; the round's end cancels what is left.
pub fn generate(rng: &mut StdRng) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut maintenances = 0;
    for _ in 0..rng.random_range(1..=3) {
        let node = rng.random_range(0..NODES);
        let start = trigger(rng, node, &mut maintenances);
        push(rng, &mut steps, start.clone());
        for _ in 0..rng.random_range(0..=3) {
            let a = chaos(rng, maintenances);
            push(rng, &mut steps, a);
        }
        if rng.random_bool(0.5)
            && let Some(end) = cancel(rng, &start)
        {
            push(rng, &mut steps, end);
        }
    }
    steps
}

/// How many maintenances (trigger starts) the steps hold.
pub fn maintenances(steps: &[Step]) -> usize {
    steps
        .iter()
        .filter(|s| {
            matches!(
                s.action,
                Action::Taint(_)
                    | Action::Maintenance(..)
                    | Action::LocalDrain(..)
                    | Action::Shutdown(_)
            )
        })
        .count()
}

fn push(rng: &mut StdRng, steps: &mut Vec<Step>, action: Action) {
    let pause_ms = *[0u64, 50, 200, 500, 1000].choose(rng).unwrap_or(&200);
    steps.push(Step { pause_ms, action });
}

fn trigger(rng: &mut StdRng, node: usize, maintenances: &mut usize) -> Action {
    match rng.random_range(0..4) {
        0 => Action::Taint(node),
        1 => {
            let target = if rng.random_bool(0.7) {
                Target::Node(node)
            } else {
                Target::Pool(["a", "b"].choose(rng).unwrap_or(&"a"))
            };
            let stage = if rng.random_bool(0.8) {
                Stage::Drain
            } else {
                Stage::Cordon
            };
            *maintenances += 1;
            Action::Maintenance(*maintenances - 1, target, stage)
        }
        2 => {
            let deadline = rng.random_bool(0.3).then(|| rng.random_range(2..=4));
            Action::LocalDrain(node, deadline)
        }
        _ => Action::Shutdown(node),
    }
}

/// The cancel of a trigger, if it has one.
fn cancel(rng: &mut StdRng, start: &Action) -> Option<Action> {
    Some(match start {
        Action::Taint(n) => Action::Untaint(*n),
        Action::Maintenance(m, ..) if rng.random_bool(0.5) => Action::DeleteMaintenance(*m),
        Action::Maintenance(m, ..) => Action::SetStage(*m, Stage::Complete),
        Action::LocalDrain(n, _) => Action::LocalUndrain(*n),
        Action::Shutdown(n) => Action::CancelShutdown(*n),
        _ => return None,
    })
}

fn chaos(rng: &mut StdRng, maintenances: usize) -> Action {
    let node = rng.random_range(0..NODES);
    match rng.random_range(0..9) {
        0 | 1 => Action::Kill(node),
        2 => Action::Fault(Fault::Errors(
            *[0.2, 0.5].choose(rng).unwrap_or(&0.2),
            *[500u16, 503, 429].choose(rng).unwrap_or(&500),
        )),
        3 => Action::Fault(
            *[
                Fault::Delay(200),
                Fault::BlackHole,
                Fault::Freeze,
                Fault::Restart,
                Fault::ForbidEvictions,
            ]
            .choose(rng)
            .unwrap_or(&Fault::Freeze),
        ),
        4 => Action::ClearFaults,
        5 => Action::AdminCordon(node),
        6 => Action::AdminUncordon(node),
        7 if maintenances > 0 => Action::SetStage(
            rng.random_range(0..maintenances),
            *[Stage::Cordon, Stage::Drain]
                .choose(rng)
                .unwrap_or(&Stage::Drain),
        ),
        _ => Action::Kill(node),
    }
}
