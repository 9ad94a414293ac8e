//! Undoing a drain: the node goes back to what it was before maintd
//! touched it.

use super::Drainer;
use crate::drain::progress::{EventKind, Phase};

impl Drainer {
    /// Ends maintenance: removes maintd's taint, uncordons what maintd
    /// cordoned, puts static pod manifests back.
    pub async fn undo(&self) -> Result<(), String> {
        let p = &self.progress;
        // The drain is over: the next one starts afresh.
        *self.book() = Default::default();
        p.emit(p.event(EventKind::UndoStarted));
        let mut errors = Vec::new();
        match self.ops.unmark(&self.taint).await {
            Ok(change) => {
                let mut ev = p.event(EventKind::NodeUnmarked);
                ev.message = format!(
                    "{}{}",
                    if change.untainted {
                        "taint removed; "
                    } else {
                        ""
                    },
                    if change.uncordoned {
                        "uncordoned"
                    } else {
                        "left cordon as it was"
                    }
                );
                p.emit(ev);
            }
            Err(e) => errors.push(e.to_string()),
        }
        // Requests of pods still here are withdrawn (and deleted once
        // final): their responders stop, as kubectl uncordon stops nothing.
        match self.requests.withdraw_all().await {
            Ok(0) => {}
            Ok(n) => {
                let mut ev = p.event(EventKind::NodeUnmarked);
                ev.message = format!("withdrew {n} EvictionRequests");
                p.emit(ev);
            }
            Err(e) => errors.push(e),
        }
        if let Some(stash) = &self.stash {
            match stash.restore() {
                Ok(report) => {
                    if !report.restored.is_empty() || !report.conflicts.is_empty() {
                        let mut ev = p.event(EventKind::StaticPodsRestored);
                        ev.message = format!("restored {}", report.restored.join(", "));
                        if !report.conflicts.is_empty() {
                            ev.message.push_str(&format!(
                                "; already back, both copies kept (the stashed ones as {})",
                                report.conflicts.join(", ")
                            ));
                        }
                        p.emit(ev);
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        if errors.is_empty() {
            p.update(|st| {
                st.phase = Phase::Idle;
                st.current_stage = None;
                st.blockers.clear();
                st.last_error = None;
            });
            p.emit(p.event(EventKind::UndoCompleted));
            Ok(())
        } else {
            let msg = errors.join("; ");
            p.update(|st| st.last_error = Some(msg.clone()));
            let mut ev = p.event(EventKind::Warning);
            ev.message = msg.clone();
            p.emit(ev);
            Err(msg)
        }
    }
}
