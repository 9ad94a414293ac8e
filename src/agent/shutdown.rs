//! The agent's side of the shutdown trigger: what logind's events mean for
//! the drain, and letting go of the lock.

use std::time::Duration;

use tokio::time::Instant;

use crate::bounds::{later, seconds};

use super::Agent;
use super::reconcile::Reconciler;
use crate::drain::progress::EventKind;
use crate::inhibitor::ShutdownEvent;
use crate::trigger::Desired;
use crate::trigger::shutdown::ShutdownTrigger;

impl Agent {
    /// What logind told us, as progress events; a shutdown's budget is
    /// compared with what the node's pods need.
    pub(super) fn on_logind(&self, sd: &mut ShutdownTrigger, ev: &ShutdownEvent) {
        sd.on_event(ev);
        let p = self.progress();
        let mut out = p.event(EventKind::Warning);
        match ev {
            ShutdownEvent::Preparing {
                budget,
                already_in_progress,
            } => {
                out.event = EventKind::ShutdownPreparing;
                out.message = format!(
                    "logind announced a shutdown{}; draining within {:.1}s of its {:.1}s delay budget",
                    if *already_in_progress {
                        " (already under way at start)"
                    } else {
                        ""
                    },
                    sd.active()
                        .map(|a| a
                            .deadline
                            .saturating_duration_since(tokio::time::Instant::now())
                            .as_secs_f64())
                        .unwrap_or(0.0),
                    budget.as_secs_f64()
                );
                p.emit(out);
                let plan = self.drainer.plan(&self.options(&Desired::default()));
                let need: i64 = plan
                    .stages
                    .iter()
                    .map(|s| s.slowest_grace_seconds())
                    .fold(0, i64::saturating_add);
                if need as f64 > budget.as_secs_f64() {
                    self.warn(format!("logind's delay budget ({:.0}s) is shorter than the {need}s the pods' grace periods add up to over the drain's stages; raise InhibitDelayMaxSec (see systemd/) or the slowest stages will be cut short", budget.as_secs_f64()));
                }
            }
            ShutdownEvent::PreparingSleep { budget } => {
                out.event = EventKind::ShutdownPreparing;
                out.message = format!(
                    "logind announced a suspend; draining within its {:.1}s delay budget",
                    budget.as_secs_f64()
                );
                p.emit(out);
            }
            ShutdownEvent::Cancelled => {
                out.event = EventKind::ShutdownCancelled;
                out.message = "the shutdown was cancelled; the lock is taken again".into();
                p.emit(out);
            }
            ShutdownEvent::Resumed => {
                out.event = EventKind::ShutdownCancelled;
                out.message =
                    "the node resumed from suspend; the lock is taken again and the drain undone"
                        .into();
                p.emit(out);
            }
            ShutdownEvent::LockHeld => tracing::info!("holding logind's shutdown delay lock"),
            ShutdownEvent::LockLost { reason } => {
                out.message = format!(
                    "logind's shutdown lock is lost ({reason}); a shutdown now would not wait for the drain"
                );
                p.emit(out);
            }
            ShutdownEvent::CompetingInhibitor { who, why } => {
                out.message = format!(
                    "another shutdown delay lock is held by {who:?} ({why}): the kubelet's graceful node shutdown kills pods as soon as the shutdown is announced, beside maintd's drain and past every disruption budget; set the kubelet's shutdownGracePeriod to 0s (see docs/reboots.md)"
                );
                p.emit(out);
            }
        }
    }
}

/// When a file was moved into the stash: its inode's change time (a rename
/// sets it), as an Instant of this process.
/// When a stashed manifest was moved (so its pod was told to stop).
fn moved_at(m: &crate::drain::static_pods::Manifest) -> Option<Instant> {
    Instant::now().checked_sub(Duration::from_millis(m.changed_ago_ms?))
}

/// With no answer from the API server for this long during a shutdown,
/// the agent asks it directly (a GET of its Node), at most this often.
const PROBE_AFTER: Duration = Duration::from_secs(5);

/// A shutdown the agent handles without the API server: the static pods
/// are stopped from their manifests, and the lock goes once their grace
/// is over.
pub(super) struct Offline {
    pub(super) release_at: Instant,
}

impl Reconciler {
    /// Lets the lock go when the drain's state says it may: the node is
    /// drained, the deadline is reached, or the API server has been out of
    /// reach for the configured time and the static pods had their grace.
    pub(super) async fn shutdown_step(&mut self) {
        let Some(active) = self.shutdown.as_ref().and_then(ShutdownTrigger::active) else {
            self.offline = None;
            return;
        };
        if !self.shutdown_pending() {
            return;
        }
        let now = Instant::now();
        if now >= active.deadline {
            let agent = &self.agent;
            let left = agent.progress().status().pods_remaining;
            let mut ev = agent.progress().event(EventKind::DrainFailed);
            ev.message = format!(
                "the shutdown budget is nearly spent with {left} pods left; releasing the lock so the shutdown is not held past logind's limit"
            );
            agent
                .progress()
                .update(|st| st.last_error = Some(ev.message.clone()));
            agent.progress().emit(ev);
            self.release("the drain's share of the shutdown budget ran out")
                .await;
            return;
        }
        if self.drained_for_shutdown() {
            self.release("the node is drained").await;
            return;
        }
        let last_ok = self.last_answer();
        let unreachable = self.agent.config.api.unreachable_release;
        if self.offline.is_none() && now.saturating_duration_since(last_ok) >= unreachable {
            self.offline = Some(self.go_offline(active.deadline, now - last_ok));
        }
        if let Some(off) = &self.offline
            && now >= off.release_at
        {
            self.release("the API server is out of reach and the static pods had their grace")
                .await;
            return;
        }
        self.probe_if_quiet(now, last_ok);
    }

    /// When the loop must look at the shutdown again at the latest.
    pub(super) fn shutdown_timer(&self) -> Option<Instant> {
        let active = self.shutdown.as_ref().and_then(ShutdownTrigger::active)?;
        if !self.shutdown_pending() {
            return None;
        }
        let now = Instant::now();
        let last_ok = self.last_answer();
        let unreachable_at =
            (self.offline.is_none()).then(|| last_ok + self.agent.config.api.unreachable_release);
        let probe_at = (self.probe.is_none()).then(|| {
            (last_ok + PROBE_AFTER)
                .max(self.probe_not_before.unwrap_or(now))
                .max(now)
        });
        [
            Some(active.deadline),
            self.drained_at().filter(|t| *t > now),
            self.offline.as_ref().map(|o| o.release_at),
            unreachable_at,
            probe_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// When the API server last answered this agent (its start, if never).
    fn last_answer(&self) -> Instant {
        self.agent
            .health
            .last_ok()
            .map_or(self.started, |t| t.max(self.started))
    }

    /// Whether the running drain has nothing left to wait for, judged from
    /// the pods the agent sees now and the stash on disk (not from an event
    /// that could be lost): every pod of the plan is gone, or what is left
    /// are static pods whose manifests were moved out at least their grace
    /// period ago (the kubelet has stopped them; on a single control-plane
    /// node their mirror pods can no longer vanish, the API server being
    /// one of them); or the drain did all it could (Failed).
    fn drained_for_shutdown(&self) -> bool {
        self.drained_at().is_some_and(|t| t <= Instant::now())
    }

    /// When the running drain has nothing left to wait for (see
    /// [`Self::drained_for_shutdown`]), if that is known now.
    fn drained_at(&self) -> Option<Instant> {
        let agent = &self.agent;
        let running = self.running.as_ref()?;
        if !agent.drainer.pods.synced() {
            return None;
        }
        if agent.progress().status().phase == crate::drain::progress::Phase::Failed {
            return Some(Instant::now());
        }
        let opts = agent.options(&running.desired);
        let plan = agent.drainer.plan(&opts);
        let left: Vec<_> = plan.stages.iter().flat_map(|s| &s.pods).collect();
        if left.is_empty() {
            // The drained pods' volumes detach before the reboot, within
            // the deadline.
            if agent.drainer.volumes_pending(&opts) {
                return None;
            }
            return Some(Instant::now());
        }
        if left
            .iter()
            .any(|p| p.pod_type != crate::drain::plan::PodType::Static)
        {
            return None;
        }
        let stash = agent.drainer.stash.as_ref()?;
        let stashed = stash.stashed_manifests().ok()?;
        let mut done = Instant::now();
        for pod in left {
            let m = stashed
                .iter()
                .find(|m| crate::drain::executor::is_manifest_of(m, pod, &agent.config.node))?;
            let moved = moved_at(m)?;
            done = done.max(later(moved, seconds(pod.grace_seconds)));
        }
        Some(done)
    }

    /// Stops the static pods from their manifests (the kubelet gives them
    /// their grace) and sets when the lock goes: once every static pod
    /// stopped now or earlier in the drain has had its grace, and before
    /// the deadline.
    fn go_offline(&self, deadline: Instant, quiet: Duration) -> Offline {
        let agent = &self.agent;
        let now = Instant::now();
        let mut grace = 0;
        let mut what = "no static pod directory".to_string();
        // Manifests the drain already moved: their pods may still be within
        // their grace.
        let mut earlier_done = now;
        if let Some(stash) = &agent.drainer.stash {
            match stash.stashed_manifests() {
                // Moved when is not known: their grace counts from now.
                Ok(stashed) => {
                    for m in stashed {
                        let moved = moved_at(&m).unwrap_or(now);
                        earlier_done = earlier_done.max(later(moved, seconds(m.grace_seconds)));
                    }
                }
                // The stash cannot be read (the node helper away): pods it
                // holds may be within their grace, the kubelet's default
                // of it at least.
                Err(_) => {
                    earlier_done = later(
                        now,
                        seconds(crate::drain::static_pods::DEFAULT_GRACE_SECONDS),
                    );
                }
            }
            match stash.manifests() {
                Ok(manifests) => {
                    grace = manifests.iter().map(|m| m.grace_seconds).max().unwrap_or(0);
                    match stash.stash(None) {
                        Ok(r) => {
                            what = format!(
                                "moved {} static pod manifests out of {}",
                                r.stashed.len(),
                                stash.manifest_dir.display()
                            )
                        }
                        Err(e) => what = format!("static pods could not be stopped: {e}"),
                    }
                }
                Err(e) => what = format!("static pods could not be stopped: {e}"),
            }
        }
        let release_at = later(now, seconds(grace)).max(earlier_done).min(deadline);
        let message = format!(
            "the API server has not answered for {}s during the shutdown: nothing more can be evicted; {what}; releasing the lock in {}s, after their grace",
            quiet.as_secs(),
            release_at.saturating_duration_since(now).as_secs()
        );
        agent
            .progress()
            .update(|st| st.last_error = Some(message.clone()));
        let mut ev = agent.progress().event(EventKind::DrainFailed);
        ev.message = message;
        agent.progress().emit(ev);
        Offline { release_at }
    }

    /// Asks the API server for this agent's Node when nothing has been
    /// heard from it for a while, so a quiet but healthy API server is not
    /// taken for an unreachable one.
    fn probe_if_quiet(&mut self, now: Instant, last_ok: Instant) {
        if self.probe.is_some()
            || now.saturating_duration_since(last_ok) < PROBE_AFTER
            || self.probe_not_before.is_some_and(|t| now < t)
        {
            return;
        }
        self.probe_not_before = Some(now + PROBE_AFTER / 2);
        let ops = self.agent.drainer.ops.clone();
        self.probe = Some(tokio::spawn(async move {
            // The guarded client tells the agent's health either way.
            let _ = ops.get_node().await;
        }));
    }

    async fn release(&mut self, why: &str) {
        let Some(sd) = self.shutdown.as_mut() else {
            return;
        };
        // Bounded: the lock holder answers at once unless it is itself
        // waiting on D-Bus; the release is queued then and happens anyway.
        match tokio::time::timeout(Duration::from_secs(1), sd.release()).await {
            Ok(Ok(true)) => {
                let mut ev = self.agent.progress().event(EventKind::ShutdownReleased);
                ev.message = format!("released logind's shutdown lock: {why}");
                self.agent.progress().emit(ev);
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => self
                .agent
                .warn(format!("releasing logind's shutdown lock: {e}")),
            Err(_) => self.agent.warn(format!(
                "releasing logind's shutdown lock ({why}): the lock holder is busy; the release is queued"
            )),
        }
    }
}
