//! The agent's side of the shutdown trigger: what logind's events mean for
//! the drain, and letting go of the lock.

use super::Agent;
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
                let need: i64 = plan.stages.iter().map(|s| s.slowest_grace_seconds()).sum();
                if need as f64 > budget.as_secs_f64() {
                    self.warn(format!("logind's delay budget ({:.0}s) is shorter than the {need}s the pods' grace periods add up to over the drain's stages; raise InhibitDelayMaxSec (see systemd/) or the slowest stages will be cut short", budget.as_secs_f64()));
                }
            }
            ShutdownEvent::Cancelled => {
                out.event = EventKind::ShutdownCancelled;
                out.message = "the shutdown was cancelled; the lock is taken again".into();
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
                    "another shutdown delay lock is held by {who:?} ({why}): the kubelet's graceful node shutdown kills pods in parallel with maintd's drain; set the kubelet's shutdownGracePeriod to 0 or below maintd's margin (see README)"
                );
                p.emit(out);
            }
            _ => {}
        }
    }

    pub(super) async fn release(&self, sd: &mut ShutdownTrigger, why: &str) {
        match sd.release().await {
            Ok(true) => {
                let mut ev = self.progress().event(EventKind::ShutdownReleased);
                ev.message = format!("released logind's shutdown lock: {why}");
                self.progress().emit(ev);
            }
            Ok(false) => {}
            Err(e) => self.warn(format!("releasing logind's shutdown lock: {e}")),
        }
    }
}
