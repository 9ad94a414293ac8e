//! The drain's last step: once every pod is gone, wait (bounded) until the
//! volumes the drained pods used are detached from the node, naming each
//! one left as a blocker. See `drain/volumes.rs` for which volumes.

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{DrainOptions, Drainer};
use crate::drain::progress::{Blocker, EventKind, Phase};
use crate::drain::volumes::{self, Attached, Volumes};
use crate::index::Backoff;

/// How the wait ended.
pub(super) enum Ended {
    /// Detached, nothing to wait for, or the wait's time ran out (reported).
    Done,
    /// A pod arrived or changed: re-plan, then come back.
    PodsChanged,
    Cancelled,
}

/// A wait that outlives a re-plan: its start (for the bound) and whether
/// it was announced.
#[derive(Default)]
pub(super) struct Waiting {
    since: Option<Instant>,
    announced: bool,
}

impl Drainer {
    pub(super) async fn wait_for_volumes(
        &self,
        opts: &DrainOptions,
        cancel: &CancellationToken,
        waiting: &mut Waiting,
    ) -> Ended {
        if opts.volume_detach_timeout.is_zero() {
            return Ended::Done;
        }
        let claims = volumes::to_wait_for(&self.book().claims, &self.pods.all());
        if claims.is_empty() {
            return self.settled();
        }
        let since = *waiting.since.get_or_insert_with(Instant::now);
        let mut end = crate::bounds::later(since, opts.volume_detach_timeout);
        if let Some(deadline) = opts.deadline {
            end = end.min(deadline);
        }
        let reader = Volumes {
            client: self.ops.client(),
            node: self.ops.node(),
        };
        let p = &self.progress;
        let mut backoff = Backoff::with(250, 2_000);
        let mut changes = self.pods.changes();
        changes.borrow_and_update();
        let mut left: Vec<Attached> = Vec::new();
        loop {
            match reader.attached(&claims).await {
                Ok(now) => {
                    if now.is_empty() {
                        p.update(|st| st.blockers.clear());
                        if waiting.announced {
                            let mut ev = p.event(EventKind::VolumesDetached);
                            ev.message = format!(
                                "{} volumes detached in {:.1}s",
                                left.len().max(1),
                                since.elapsed().as_secs_f64()
                            );
                            p.emit(ev);
                        }
                        return self.settled();
                    }
                    if !waiting.announced {
                        waiting.announced = true;
                        let mut ev = p.event(EventKind::VolumesDetaching);
                        ev.message = format!(
                            "every pod is gone; waiting up to {}s for {} volumes to detach: {}",
                            end.saturating_duration_since(Instant::now()).as_secs(),
                            now.len(),
                            names(&now)
                        );
                        p.emit(ev);
                    }
                    let blockers: Vec<Blocker> = now
                        .iter()
                        .map(|a| Blocker {
                            namespace: a.claim.0.clone(),
                            pod: String::new(),
                            reason: a.describe(),
                        })
                        .collect();
                    p.update(|st| {
                        st.phase = Phase::Draining;
                        st.current_stage = None;
                        st.blockers = blockers;
                    });
                    left = now;
                }
                Err(why) => {
                    tracing::debug!(%why, "could not read the node's volume attachments; asking again");
                }
            }
            if Instant::now() >= end {
                let mut ev = p.event(EventKind::Warning);
                ev.message = if left.is_empty() {
                    format!(
                        "could not learn whether the drained pods' volumes are detached within {}s; going on",
                        end.saturating_duration_since(since).as_secs()
                    )
                } else {
                    format!(
                        "{} volumes still attached after {}s; going on: {}",
                        left.len(),
                        end.saturating_duration_since(since).as_secs(),
                        left.iter()
                            .map(Attached::describe)
                            .collect::<Vec<_>>()
                            .join("; ")
                    )
                };
                let warning = ev.message.clone();
                p.update(|st| {
                    st.blockers.clear();
                    if !st.warnings.contains(&warning) {
                        st.warnings.push(warning);
                    }
                });
                p.emit(ev);
                return self.settled();
            }
            let wait = backoff
                .next_delay()
                .min(end.saturating_duration_since(Instant::now()));
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ended::Cancelled,
                r = changes.changed() => {
                    if r.is_err() {
                        cancel.cancelled().await;
                        return Ended::Cancelled;
                    }
                    return Ended::PodsChanged;
                }
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

impl Drainer {
    fn settled(&self) -> Ended {
        self.book().volumes_settled = true;
        Ended::Done
    }
}

fn names(list: &[Attached]) -> String {
    list.iter()
        .map(|a| format!("{} ({}/{})", a.volume, a.claim.0, a.claim.1))
        .collect::<Vec<_>>()
        .join(", ")
}
