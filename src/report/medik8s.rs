//! Status of medik8s' NodeMaintenance objects naming this node, in medik8s'
//! own fields (see [`crate::api::medik8s`]). Applied by the same reporter,
//! under the same field manager `maintd/<node>`, but paced harder: every
//! agent watches every medik8s object (one per node), so each write goes to
//! every node. A phase change is written at once; progress at most once
//! every [`PROGRESS_EVERY`] per object (issue 11).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::medik8s::{self, Medik8sStatus};
use crate::drain::progress::now_time;

use super::StatusReporter;

/// At most one progress write per medik8s object this often.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// The last status written to one medik8s object, and when.
#[derive(Debug, Clone)]
pub(super) struct Written {
    status: Medik8sStatus,
    at: Instant,
}

/// Whether to write `status` to an object now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pace {
    /// It is new, or its phase changed, or enough time passed.
    Write,
    /// It is what the object already says.
    Same,
    /// Progress only, too soon after the last write: write it then.
    Later(Instant),
}

/// Paces the writes to one object: a first write or a phase change goes at
/// once, any other change no sooner than [`PROGRESS_EVERY`] after the last
/// write.
pub(super) fn pace(last: Option<&Written>, status: &Medik8sStatus, now: Instant) -> Pace {
    let Some(last) = last else {
        return Pace::Write;
    };
    if last.status == *status {
        return Pace::Same;
    }
    let due = last.at + PROGRESS_EVERY;
    if last.status.phase != status.phase || now >= due {
        Pace::Write
    } else {
        Pace::Later(due)
    }
}

/// How a round of medik8s writes went.
pub(super) struct Medik8sRound {
    /// Every write that was due succeeded.
    pub ok: bool,
    /// Some progress waits for its turn: the reporter must come back.
    pub deferred: bool,
}

impl StatusReporter {
    /// Applies the status of every medik8s object asking for this node,
    /// paced by [`pace`] (by uid, so a recreated object of the same name is
    /// written afresh).
    pub(super) async fn write_medik8s(
        &self,
        written: &mut BTreeMap<String, Written>,
        refs: &mut bool,
        now: Instant,
    ) -> Medik8sRound {
        let mut round = Medik8sRound {
            ok: true,
            deferred: false,
        };
        let Some(trigger) = &self.medik8s else {
            return round;
        };
        let objs = trigger.index.all();
        // By uid, else name (as for maintd's own objects).
        let key_of = |o: &serde_json::Value| {
            let meta = &o["metadata"];
            meta["uid"]
                .as_str()
                .or(meta["name"].as_str())
                .unwrap_or_default()
                .to_string()
        };
        written.retain(|key, _| objs.iter().any(|o| key_of(o) == *key));
        let status = medik8s::status(&self.progress.status().as_told());
        for obj in &objs {
            let Some(name) = medik8s::request_for(obj, &self.node) else {
                continue;
            };
            let key = key_of(obj);
            match pace(written.get(&key), &status, now) {
                Pace::Same => continue,
                Pace::Later(_) => {
                    round.deferred = true;
                    continue;
                }
                Pace::Write => {}
            }
            // Based on the object as last seen, so a late write of an old
            // status cannot land over a newer one.
            let rv = super::apply::rv_of(obj);
            let object_path = format!("{}/{name}", medik8s::PATH);
            let mut outcome = super::apply::Applied::Failed;
            for _ in 0..2 {
                let body = medik8s::apply_body(name, &status, &now_time(), *refs);
                outcome = self
                    .write(medik8s::PATH, name, Some(&object_path), &body, rv)
                    .await;
                match &outcome {
                    // An older medik8s CRD: its status has no
                    // pendingPodsRefs. Said once, and left out from now on.
                    super::apply::Applied::Undeclared(why)
                        if *refs && why.contains("pendingPodsRefs") =>
                    {
                        tracing::info!(
                            "medik8s' NodeMaintenance CRD has no status.pendingPodsRefs (an older node-maintenance-operator); writing pendingPods only"
                        );
                        *refs = false;
                    }
                    _ => break,
                }
            }
            if matches!(outcome, super::apply::Applied::Written(_)) {
                let status = status.clone();
                written.insert(key, Written { status, at: now });
            } else {
                round.ok = false;
            }
        }
        round
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::medik8s::MaintenancePhase;

    fn st(phase: MaintenancePhase, progress: i64) -> Medik8sStatus {
        Medik8sStatus {
            phase,
            drain_progress: progress,
            total_pods: 10,
            eviction_pods: 8,
            pending_pods: vec![],
            pending_pods_refs: vec![],
            last_error: None,
        }
    }

    fn written(status: Medik8sStatus, at: Instant) -> Written {
        Written { status, at }
    }

    #[test]
    fn phase_changes_go_at_once_and_progress_every_ten_seconds() {
        use MaintenancePhase::{Failed, Running, Succeeded};
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let last = written(st(Running, 10), t0);
        // (what is written now, how long after the last write, expected)
        let cases = [
            (st(Running, 10), s(0), Pace::Same),
            (st(Running, 10), s(60), Pace::Same),
            (st(Running, 20), s(1), Pace::Later(t0 + s(10))),
            (st(Running, 20), s(9), Pace::Later(t0 + s(10))),
            (st(Running, 20), s(10), Pace::Write),
            (st(Running, 20), s(11), Pace::Write),
            (st(Succeeded, 100), s(0), Pace::Write),
            (st(Failed, 10), s(1), Pace::Write),
        ];
        for (status, after, want) in cases {
            assert_eq!(
                pace(Some(&last), &status, t0 + after),
                want,
                "{status:?} {after:?} after the last write"
            );
        }
        // A blocker, or pods listed, is progress too: paced, not dropped.
        let mut blocked = st(Running, 10);
        blocked.last_error = Some("default/web-1: The disruption budget web ...".into());
        assert_eq!(
            pace(Some(&last), &blocked, t0 + s(2)),
            Pace::Later(t0 + s(10))
        );
        // Nothing written yet: at once.
        assert_eq!(pace(None, &st(Running, 0), t0), Pace::Write);
    }

    #[test]
    fn a_busy_drain_writes_an_object_at_most_once_per_ten_seconds_between_phases() {
        // Progress changing every 600 ms for a minute, then Succeeded half a
        // second after a progress write.
        let t0 = Instant::now();
        let mut last: Option<Written> = None;
        let mut writes = Vec::new();
        for tick in 0..=605u64 {
            let now = t0 + Duration::from_millis(tick * 100);
            let status = if tick == 605 {
                st(MaintenancePhase::Succeeded, 100)
            } else {
                st(MaintenancePhase::Running, (tick / 6) as i64)
            };
            if pace(last.as_ref(), &status, now) == Pace::Write {
                writes.push((now - t0, status.phase));
                last = Some(written(status, now));
            }
        }
        // The first write, one every 10 s after it, and the phase change.
        assert_eq!(writes.len(), 1 + 6 + 1, "{writes:?}");
        for pair in writes.windows(2) {
            let gap = pair[1].0 - pair[0].0;
            assert!(
                gap >= PROGRESS_EVERY || pair[1].1 != pair[0].1,
                "{writes:?}"
            );
        }
        assert_eq!(
            writes.last().map(|w| w.1),
            Some(MaintenancePhase::Succeeded)
        );
    }
}
