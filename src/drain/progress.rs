//! What a drain tells the world as it goes: a stream of events (for the demo,
//! logs, Events and metrics) and a status snapshot (for the local endpoint,
//! the Node condition and NodeMaintenance status).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use tokio::sync::broadcast;

use super::plan::{DrainPlan, PodType};

/// One thing that happened during a drain or its undo.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DrainEvent {
    /// Milliseconds since the agent started.
    pub t_ms: u64,
    pub event: EventKind,
    pub node: String,
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub pod_type: Option<PodType>,
    pub priority: Option<i32>,
    /// 1-based stage number.
    pub stage: Option<usize>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The workload the pod belongs to, for events about one pod.
    #[serde(skip)]
    pub owner: Option<super::plan::OwnerRef>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    DrainStarted,
    NodeMarked,
    /// Someone uncordoned the node mid-drain and maintd cordoned it again;
    /// the message names who, from the Node's managedFields.
    NodeRecordoned,
    StageStarted,
    PodEvicting,
    PodEvicted,
    PodBlocked,
    /// A pod waits its turn behind a budget this drain is moving pods
    /// through: its own evictions took what the budget allows, and the
    /// next pod goes when their replacements are up. Not a block: the
    /// status and the timeline show it, no Event or notification says it.
    PodQueued,
    PodError,
    PodGone,
    PodDeleted,
    PodSkipped,
    StaticPodsStashed,
    StageCompleted,
    StageTimedOut,
    StageEscalated,
    /// Every pod is gone; the drain waits for the volumes the drained pods
    /// used to be detached from the node (the message names them).
    VolumesDetaching,
    /// Those volumes are detached (or the wait's time ran out: a Warning
    /// says which are left).
    VolumesDetached,
    DrainCompleted,
    /// A rolling maintenance's node is drained and keeps its slot until it
    /// has booted again (`waitForReboot`).
    AwaitingReboot,
    /// That node booted again and is Ready: its turn is over.
    RebootConfirmed,
    /// A node that drained for a reboot has not booted again in time (a
    /// rolling maintenance's turn, a FleetLock slot): what happens is in
    /// the message.
    RebootOverdue,
    /// The drain could not finish in the time it had (a shutdown's budget
    /// ran out with pods left); what is left goes down with the node.
    DrainFailed,
    DrainCancelled,
    /// A planned drain waits for its turn: the message says for what (a
    /// window, blocking pods, alerts, a slot); empty once it no longer
    /// waits. Sent when what it waits for changes, not its every detail.
    DrainWaiting,
    /// A planned drain started waiting: the local status and metrics say
    /// so at once, the cluster once the wait has lasted a few seconds (a
    /// DrainWaiting then), so no Event is written for this one.
    WaitingUntold,
    UndoStarted,
    NodeUnmarked,
    StaticPodsRestored,
    UndoCompleted,
    ShutdownPreparing,
    ShutdownCancelled,
    ShutdownReleased,
    Warning,
}

/// Where a drain stands, as one snapshot.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct DrainStatus {
    pub phase: Phase,
    /// What asks for the drain now, one line per trigger ("taint
    /// maintd.io/drain=kernel:NoSchedule", "NodeMaintenance kernel-upgrade
    /// (Drain)", "shutdown", "local: os update"); empty when idle.
    pub triggers: Vec<String>,
    /// Everything must be done by then (shutdown or a local deadline).
    pub deadline: Option<String>,
    /// Why the drain has not started evicting yet, while it waits for its
    /// turn (a reboot slot, a NodeMaintenance's drain slot).
    pub waiting: Option<String>,
    /// Which rule `waiting` is about (the metrics' label).
    #[serde(skip)]
    pub waiting_for: Option<crate::policy::HoldKind>,
    /// The wait is not told to the cluster yet (its NodeDrain, the Node's
    /// condition, an Event): it is, once it has lasted a few seconds (see
    /// [`DrainStatus::as_told`]). The local status shows it at once.
    #[serde(skip)]
    pub waiting_untold: bool,
    /// Counts the waits: which one a later telling is about.
    #[serde(skip)]
    pub waiting_epoch: u64,
    /// How much of `waiting` the cluster is told (see [`WaitWords`]); all
    /// of it when None.
    #[serde(skip)]
    pub waiting_told: Option<usize>,
    /// 1-based number of the stage running now.
    pub current_stage: Option<usize>,
    pub stages: Vec<StageStatus>,
    pub pods_total: usize,
    pub pods_remaining: usize,
    pub blockers: Vec<Blocker>,
    pub skipped: Vec<SkippedStatus>,
    pub warnings: Vec<String>,
    pub started_at: Option<String>,
    pub updated_at: Option<String>,
    pub finished_at: Option<String>,
    pub last_error: Option<String>,
}

impl DrainStatus {
    /// The status as the cluster is told it: without a wait not told yet.
    pub fn as_told(mut self) -> DrainStatus {
        if self.waiting_untold {
            self.waiting = None;
            self.waiting_for = None;
        }
        if let (Some(w), Some(told)) = (&mut self.waiting, self.waiting_told) {
            w.truncate(told);
        }
        self
    }
}

/// Why a drain waits, in words: all of them for the local status and the
/// Event that tells the wait, the first part for the NodeDrain and the
/// Node's condition. The rest names what changes with every turn of the
/// fleet's other nodes (who holds the slots it waits for): kept in the
/// NodeDrain of each waiting node, it would cost a write of it at every
/// handover, and would be out of date between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitWords {
    pub text: String,
    /// The length of the part the cluster is told (None: all of it).
    pub told: Option<usize>,
}

impl WaitWords {
    /// `told`, then `more` for the local status alone.
    pub fn with_local_part(told: String, more: &str) -> Self {
        let len = told.len();
        WaitWords {
            text: told + more,
            told: Some(len),
        }
    }
}

impl From<String> for WaitWords {
    fn from(text: String) -> Self {
        WaitWords { text, told: None }
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub enum Phase {
    #[default]
    Idle,
    Cordoned,
    Draining,
    Blocked,
    Drained,
    Failed,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StageStatus {
    pub stage: usize,
    pub label: String,
    pub pod_type: PodType,
    pub priority: i32,
    pub state: StageState,
    pub pods: Vec<PodStatus>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StageState {
    Pending,
    Running,
    Done,
    TimedOut,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PodStatus {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub state: PodState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocker: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PodState {
    Pending,
    Evicting,
    Blocked,
    Terminating,
    Gone,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Blocker {
    pub namespace: String,
    pub pod: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SkippedStatus {
    pub namespace: String,
    pub pod: String,
    pub reason: String,
}

/// The shared progress of the agent's drain: events out, snapshot in.
#[derive(Clone)]
pub struct Progress {
    pub node: String,
    started: Instant,
    /// Shared, not copied: each of the channel's slots is a pointer, not
    /// an event (4,096 events of ~250 bytes were a megabyte held for good).
    events: broadcast::Sender<Arc<DrainEvent>>,
    status: Arc<Mutex<DrainStatus>>,
    /// Kinds of events that reach no subscriber (see [`Progress::lose_events`]).
    lost: Arc<Mutex<Vec<EventKind>>>,
    /// The calls the API server refuses of late: the newest is the
    /// status's last error while the drain has none of its own.
    refusals: crate::refusals::Refusals,
    /// The current or last drain's events, for its timeline.
    log: crate::timeline::EventLog,
}

impl Progress {
    pub fn new(node: &str) -> Self {
        let (events, _) = broadcast::channel(4096);
        Progress {
            node: node.to_string(),
            started: Instant::now(),
            events,
            status: Arc::default(),
            lost: Arc::default(),
            refusals: Default::default(),
            log: Default::default(),
        }
    }

    /// The same, its status telling the refusals of this agent's client.
    pub fn with_refusals(node: &str, refusals: crate::refusals::Refusals) -> Self {
        Progress {
            refusals,
            ..Progress::new(node)
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<DrainEvent>> {
        self.events.subscribe()
    }

    /// A new event for this node, to be filled in and sent.
    pub fn event(&self, event: EventKind) -> DrainEvent {
        DrainEvent {
            t_ms: self.started.elapsed().as_millis() as u64,
            event,
            node: self.node.clone(),
            namespace: None,
            pod: None,
            pod_type: None,
            priority: None,
            stage: None,
            message: String::new(),
            owner: None,
        }
    }

    pub fn emit(&self, ev: DrainEvent) {
        // Log lines carry the pod as namespace/name, empty when the event is
        // not about one pod.
        let pod = match (&ev.namespace, &ev.pod) {
            (Some(ns), Some(p)) => format!("{ns}/{p}"),
            _ => String::new(),
        };
        let stage = ev.stage.map(|s| s.to_string()).unwrap_or_default();
        match ev.event {
            EventKind::PodBlocked
            | EventKind::PodError
            | EventKind::Warning
            | EventKind::DrainFailed
            | EventKind::StageTimedOut => {
                tracing::warn!(node = %ev.node, %pod, %stage, message = %ev.message, "{:?}", ev.event)
            }
            _ => {
                tracing::info!(node = %ev.node, %pod, %stage, message = %ev.message, "{:?}", ev.event)
            }
        }
        if self
            .lost
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&ev.event)
        {
            return;
        }
        self.log.record(&ev);
        // Nobody listening is fine.
        let _ = self.events.send(Arc::new(ev));
    }

    /// The current or last drain's events, as kept for its timeline.
    pub fn recorded(&self) -> crate::timeline::Recorded {
        self.log.recorded()
    }

    /// Fault injection for tests: events of `kind` are still logged but
    /// reach no subscriber, as if every subscriber had lagged past them.
    /// Nothing of the agent's may depend on seeing one event.
    pub fn lose_events(&self, kind: EventKind) {
        self.lost
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(kind);
    }

    pub fn status(&self) -> DrainStatus {
        let mut st = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if st.last_error.is_none() {
            st.last_error = self.refusals.recent().pop();
        }
        st
    }

    /// Changes the snapshot and stamps updated_at.
    pub fn update(&self, f: impl FnOnce(&mut DrainStatus)) {
        let mut st = self.status.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut st);
        st.updated_at = Some(now_time());
    }

    /// Records the plan in the snapshot, keeping what is known of each pod.
    /// `finished` are the stages already done, kept so the snapshot shows
    /// the whole drain; the plan's stages are numbered after them.
    pub fn set_plan(
        &self,
        plan: &DrainPlan,
        finished: &[StageStatus],
        gone_or_state: impl Fn(&str) -> (PodState, Option<String>),
    ) {
        let base = finished.len();
        self.update(|st| {
            st.stages = finished.to_vec();
            st.stages
                .extend(plan.stages.iter().enumerate().map(|(i, s)| {
                    StageStatus {
                        stage: base + i + 1,
                        label: s.label.clone(),
                        pod_type: s.pod_type,
                        priority: s.priority,
                        state: match st.current_stage {
                            Some(c) if c == base + i + 1 => StageState::Running,
                            _ => StageState::Pending,
                        },
                        pods: s
                            .pods
                            .iter()
                            .map(|p| {
                                let (state, blocker) = gone_or_state(&p.uid);
                                PodStatus {
                                    uid: p.uid.clone(),
                                    namespace: p.namespace.clone(),
                                    name: p.name.clone(),
                                    state,
                                    blocker,
                                }
                            })
                            .collect(),
                    }
                }));
            st.pods_remaining = plan.stages.iter().map(|s| s.pods.len()).sum();
            let done: usize = finished.iter().map(|s| s.pods.len()).sum();
            st.pods_total = st.pods_total.max(done + st.pods_remaining);
            st.skipped = plan
                .skipped
                .iter()
                .map(|s| SkippedStatus {
                    namespace: s.namespace.clone(),
                    pod: s.name.clone(),
                    reason: s.reason.to_string(),
                })
                .collect();
            // Warnings stay for the whole drain: the pod they are about may
            // be gone already.
            for w in &plan.warnings {
                if !st.warnings.contains(w) {
                    st.warnings.push(w.clone());
                }
            }
        });
    }
}

/// Now as a Kubernetes `Time` (RFC 3339, whole seconds, UTC).
pub fn now_time() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
