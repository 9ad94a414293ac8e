//! What one round of the real fault soak is, drawn from its seed alone:
//! the same seed gives the same nodes, workloads, maintenance and faults
//! at the same offsets (the control plane's own timing is not seeded).

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The maintenance a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One node drained behind budgets (a NodeMaintenance by nodeName).
    Drain,
    /// Every node of the pool through `slots` drain slots; with `reboot`
    /// a turn ends when the node has rebooted (the soak plays the OS
    /// updater), without it when the node is drained.
    Rolling { slots: u32, reboot: bool },
}

/// A PodDisruptionBudget's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    MinAvailable(i32),
    MaxUnavailable(i32),
}

/// A workload of the round: a Deployment behind a budget.
#[derive(Debug, Clone)]
pub struct Workload {
    pub name: &'static str,
    pub replicas: i32,
    pub budget: Budget,
    /// Seconds a pod takes to become Ready, and to stop (KWOK's Stages).
    pub startup: u32,
    pub shutdown: u32,
}

impl Workload {
    /// How many of its pods the budget wants healthy.
    pub fn desired_healthy(&self) -> i32 {
        match self.budget {
            Budget::MinAvailable(n) => n,
            Budget::MaxUnavailable(n) => self.replicas - n,
        }
    }
}

/// The faults the soak injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// kube-apiserver SIGKILLed, started again after `down`.
    ApiServer { down: Duration },
    /// etcd SIGKILLed, started again after `down`.
    Etcd { down: Duration },
    /// The agent of pool node `node` SIGKILLed, started again after `down`.
    Agent { node: usize, down: Duration },
    /// Nothing crosses between the agents and the API server for `secs`;
    /// then the network heals.
    BlackHole { secs: u64 },
    /// Every connection of the agents ends with an RST.
    Reset,
    /// Every connection of the agents goes silent for good (half-open).
    HalfOpen,
    /// The API server's priority and fairness answers every request of
    /// maintd's ServiceAccount 429 for `secs`.
    Throttle { secs: u64 },
}

/// The fault kinds, in the order rounds take them.
pub const FAULT_KINDS: [&str; 7] = [
    "kube-apiserver killed",
    "etcd killed",
    "agent SIGKILLed",
    "network black hole",
    "connections reset",
    "connections half-open",
    "429s from priority and fairness",
];

impl Fault {
    pub fn kind(&self) -> &'static str {
        FAULT_KINDS[match self {
            Fault::ApiServer { .. } => 0,
            Fault::Etcd { .. } => 1,
            Fault::Agent { .. } => 2,
            Fault::BlackHole { .. } => 3,
            Fault::Reset => 4,
            Fault::HalfOpen => 5,
            Fault::Throttle { .. } => 6,
        }]
    }

    fn draw(kind: usize, pool: usize, rng: &mut StdRng) -> Fault {
        let down = |rng: &mut StdRng, ms: std::ops::RangeInclusive<u64>| {
            Duration::from_millis(rng.random_range(ms))
        };
        match kind % FAULT_KINDS.len() {
            0 => Fault::ApiServer {
                down: down(rng, 0..=6_000),
            },
            1 => Fault::Etcd {
                down: down(rng, 0..=6_000),
            },
            2 => Fault::Agent {
                node: rng.random_range(0..pool),
                down: down(rng, 0..=4_000),
            },
            3 => Fault::BlackHole {
                secs: rng.random_range(2..=12),
            },
            4 => Fault::Reset,
            5 => Fault::HalfOpen,
            _ => Fault::Throttle { secs: 5 },
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::ApiServer { down } => write!(f, "kube-apiserver killed, down {down:.1?}"),
            Fault::Etcd { down } => write!(f, "etcd killed, down {down:.1?}"),
            Fault::Agent { node, down } => write!(f, "agent {node} SIGKILLed, down {down:.1?}"),
            Fault::BlackHole { secs } => write!(f, "black hole for {secs} s"),
            Fault::Reset => write!(f, "every agent connection reset"),
            Fault::HalfOpen => write!(f, "every agent connection half-open"),
            Fault::Throttle { secs } => write!(f, "429s for maintd for {secs} s"),
        }
    }
}

/// A fault and when it starts, after the maintenance is made.
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    pub at: Duration,
    pub fault: Fault,
}

/// Everything a round is.
#[derive(Debug, Clone)]
pub struct Plan {
    pub seed: u64,
    pub kind: Kind,
    /// Nodes with an agent that the maintenance selects.
    pub pool: usize,
    pub workloads: Vec<Workload>,
    /// A Deployment whose budget allows no disruption, on the drained
    /// node: the drain must name it and wait (Drain rounds only).
    pub stuck: bool,
    pub faults: Vec<Timed>,
}

impl Plan {
    /// The round of `seed`. Its three faults are of three kinds next to
    /// one another along [`FAULT_KINDS`], starting `3 × seed` along it, so
    /// that any four consecutive seeds try every kind; the round's kind
    /// goes with `seed % 3`.
    pub fn draw(seed: u64) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed);
        let kind = match seed % 3 {
            0 => Kind::Drain,
            1 => Kind::Rolling {
                slots: rng.random_range(1..=2),
                reboot: true,
            },
            _ => Kind::Rolling {
                slots: rng.random_range(1..=2),
                reboot: false,
            },
        };
        let pool = 3;
        let workload = |name, rng: &mut StdRng| {
            let replicas = rng.random_range(3..=6);
            let budget = if rng.random_bool(0.5) {
                Budget::MinAvailable(replicas - rng.random_range(1..=2))
            } else {
                Budget::MaxUnavailable(rng.random_range(1..=2))
            };
            Workload {
                name,
                replicas,
                budget,
                startup: rng.random_range(1..=3),
                shutdown: rng.random_range(0..=2),
            }
        };
        let workloads = vec![workload("web", &mut rng), workload("api", &mut rng)];
        let stuck = kind == Kind::Drain && rng.random_bool(0.4);
        let first = (seed % FAULT_KINDS.len() as u64) as usize * 3;
        let mut faults: Vec<Timed> = (0..3)
            .map(|i| Timed {
                at: Duration::from_millis(rng.random_range(0..=20_000)),
                fault: Fault::draw(first + i, pool, &mut rng),
            })
            .collect();
        faults.sort_by_key(|t| t.at);
        Plan {
            seed,
            kind,
            pool,
            workloads,
            stuck,
            faults,
        }
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Drain => "one node drained".to_string(),
            Kind::Rolling { slots, reboot } => format!(
                "rolling through {slots} slot(s){}",
                if reboot {
                    ", turns end with a reboot"
                } else {
                    ""
                }
            ),
        };
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|t| format!("{} at {:.1}s", t.fault, t.at.as_secs_f64()))
            .collect();
        write!(
            f,
            "seed {}: {kind}{}; faults: {}",
            self.seed,
            if self.stuck {
                ", a budget that allows nothing"
            } else {
                ""
            },
            faults.join(", ")
        )
    }
}
