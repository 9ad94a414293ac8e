//! One pod asked to leave through an EvictionRequest (KEP-4563): made or
//! adopted, followed until its responders have evicted the pod, and given
//! up (withdrawn, then deleted) when the pod is deleted instead, when the
//! request fails, or when nothing acts on it within the operator's bound
//! (Kubernetes 1.37 serves the API without a controller); in the last two
//! the Eviction API takes over. A pod is never asked through both at once.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Drainer;
use crate::drain::eviction_requests::{self, Asked, ProgressBound, State};
use crate::drain::plan::PlannedPod;
use crate::drain::progress::{EventKind, PodState};
use crate::index::{Backoff, sleep_until};

/// How a request for one pod ended.
pub(super) enum Requested {
    /// The pod is evicted or on its way out: wait for it to be gone.
    Going,
    /// The drain was cancelled (undone or re-planned); the request stays
    /// for an undo to withdraw or the next run to adopt.
    Cancelled,
    /// Use the Eviction API for this pod (the request failed, or could not
    /// be made); any request made has been withdrawn first.
    Evict,
}

/// How often a request is looked at while its responders work: from this
/// to [`POLL_CAP`], doubling, reset when the responder's words change.
const POLL_FIRST: u64 = 1_000;
const POLL_CAP: u64 = 10_000;
/// A request cancelled by someone else is made again at most this often.
const REMAKE_AFTER: Duration = Duration::from_secs(5);

impl Drainer {
    /// Asks for the pod's eviction with an EvictionRequest and follows it.
    /// `responders` are the pod's own, for the events.
    pub(super) async fn request_eviction(
        &self,
        number: usize,
        pod: &PlannedPod,
        responders: &[String],
        cancel: &CancellationToken,
        stop_evicting: &CancellationToken,
    ) -> Requested {
        let p = &self.progress;
        let event = |kind: EventKind, message: String| {
            super::evict::pod_event(p, number, pod, kind, message)
        };
        let requests = &self.requests;
        let request_name = eviction_requests::name(&pod.uid);
        // From the first ask: a request made again after someone else
        // deleted it does not start the bound over.
        let mut bound = ProgressBound::new(Instant::now(), requests.progress_timeout());
        'ask: loop {
            match requests.request(&pod.namespace, &pod.name, &pod.uid).await {
                Asked::Requested => {}
                Asked::NotServed => return Requested::Evict,
                Asked::Refused(why) => {
                    p.emit(event(
                    EventKind::PodError,
                    format!("could not make EvictionRequest {request_name} ({why}); evicting through the Eviction API"),
                ));
                    return Requested::Evict;
                }
            }
            p.emit(event(
                EventKind::PodEvicting,
                format!(
                    "through EvictionRequest {request_name} (responders: {})",
                    crate::outbound::shorten(&responders.join(", "), 240)
                ),
            ));
            let mut poll = Backoff::with(POLL_FIRST, POLL_CAP);
            let mut said: Option<String> = None;
            loop {
                if cancel.is_cancelled() {
                    return Requested::Cancelled;
                }
                if stop_evicting.is_cancelled() {
                    // Deleted instead (a shutdown's deadline): the request has
                    // nothing left to do.
                    requests.give_up(&pod.namespace, &pod.uid).await;
                    return Requested::Going;
                }
                if !self.pods.contains(&pod.uid) {
                    requests.retire(&pod.namespace, &pod.uid);
                    return Requested::Going;
                }
                let state = requests.state(&pod.namespace, &pod.uid).await;
                let unattended = state.as_ref().is_ok_and(|s| bound.step(s, Instant::now()));
                if unattended {
                    requests.give_up_untouched(&pod.namespace, &pod.uid).await;
                    let why = bound.why(&request_name);
                    let warning = format!("pod {}/{}: {why}", pod.namespace, pod.name);
                    p.update(|st| {
                        if !st.warnings.contains(&warning) {
                            st.warnings.push(warning);
                        }
                    });
                    p.emit(event(EventKind::PodError, why));
                    return Requested::Evict;
                }
                match state {
                    Ok(State::Evicted) => {
                        requests.retire(&pod.namespace, &pod.uid);
                        self.set_pod(&pod.uid, PodState::Terminating, None);
                        p.emit(event(
                            EventKind::PodEvicted,
                            format!("EvictionRequest {request_name}: evicted by its responders"),
                        ));
                        return Requested::Going;
                    }
                    Ok(State::Failed { reason, message }) => {
                        requests.give_up(&pod.namespace, &pod.uid).await;
                        p.emit(event(
                        EventKind::PodError,
                        format!("EvictionRequest {request_name} failed ({reason}: {message}); evicting through the Eviction API"),
                    ));
                        return Requested::Evict;
                    }
                    Ok(State::Canceled | State::Missing) => {
                        // Not this drain's doing (it withdraws only on undo):
                        // ask again, with a fresh request.
                        requests.give_up(&pod.namespace, &pod.uid).await;
                        let blocker = format!(
                            "EvictionRequest {request_name} was cancelled or deleted by someone else; asking again"
                        );
                        self.set_pod(&pod.uid, PodState::Blocked, Some(blocker.clone()));
                        self.refresh_blockers();
                        p.emit(event(EventKind::PodBlocked, blocker));
                        tokio::select! {
                            biased;
                            _ = cancel.cancelled() => return Requested::Cancelled,
                            _ = tokio::time::sleep(REMAKE_AFTER) => {}
                        }
                        continue 'ask;
                    }
                    Ok(State::Untouched) => {
                        let words = bound.waiting(&request_name);
                        self.set_pod(&pod.uid, PodState::Blocked, Some(words.clone()));
                        self.refresh_blockers();
                        if said.as_deref() != Some(words.as_str()) {
                            said = Some(words.clone());
                            p.emit(event(EventKind::PodBlocked, words));
                        }
                    }
                    Ok(State::Pending(words)) => {
                        self.set_pod(&pod.uid, PodState::Blocked, Some(words.clone()));
                        self.refresh_blockers();
                        // An event when the responder changes, not for every
                        // word of its progress.
                        let who = responder_of(&words);
                        if said.as_deref() != Some(who) {
                            said = Some(who.to_string());
                            poll.reset();
                            p.emit(event(EventKind::PodBlocked, words));
                        }
                    }
                    Err(why) => {
                        self.set_pod(
                            &pod.uid,
                            PodState::Blocked,
                            Some(format!(
                                "could not read EvictionRequest {request_name}: {why}"
                            )),
                        );
                        self.refresh_blockers();
                    }
                }
                let pods = self.pods.clone();
                let uid = pod.uid.clone();
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Requested::Cancelled,
                    _ = stop_evicting.cancelled() => {}
                    _ = tokio::time::sleep(poll.next_delay()) => {}
                    // Past the bound, a request not read (an error) waits
                    // for the next poll, not in a loop.
                    _ = sleep_until(bound.wake_at().filter(|t| *t > Instant::now())) => {}
                    _ = pods.wait_until(move |i| !i.contains(&uid)) => {}
                }
            }
        }
    }
}

/// The responder a progress line names ("EvictionRequest: responder X: …"),
/// or the whole line.
fn responder_of(words: &str) -> &str {
    words
        .strip_prefix("EvictionRequest: responder ")
        .and_then(|r| r.split([':', ' ']).next())
        .unwrap_or(words)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_responder_is_read_from_a_progress_line() {
        assert_eq!(
            super::responder_of("EvictionRequest: responder a.io/b: moving (expected done by t)"),
            "a.io/b"
        );
        assert_eq!(
            super::responder_of("EvictionRequest: responder a.io/b is at work"),
            "a.io/b"
        );
        assert_eq!(super::responder_of("other"), "other");
    }
}
