//! The bound on a request nothing acts on. Kubernetes 1.37 serves the
//! EvictionRequest API without the evictionrequest-controller that would
//! turn a request into an Eviction and hand it to the pod's responders: a
//! request is accepted, then sits with no status and no Eviction for as
//! long as it exists. A request that shows no sign of progress within the
//! operator's bound (`--eviction-request-progress-timeout-seconds`) is given up and
//! the pod evicted through the Eviction API; one that shows any sign (a
//! condition, an Eviction for its pod) is followed as long as it takes,
//! since its responders are at work.

use std::time::Duration;

use tokio::time::Instant;

use super::State;

/// When the request for one pod is given up if nothing has acted on it.
#[derive(Debug, Clone)]
pub struct ProgressBound {
    within: Duration,
    /// None once something has acted on the request: the bound is lifted.
    deadline: Option<Instant>,
}

impl ProgressBound {
    /// The bound for a request asked for at `asked_at`.
    pub fn new(asked_at: Instant, within: Duration) -> Self {
        ProgressBound {
            within,
            deadline: Some(crate::bounds::later(asked_at, within)),
        }
    }

    /// Takes in what the request shows at `now`; true when it is to be
    /// given up: nothing has ever acted on it and the bound has passed. A
    /// request that went missing says nothing either way.
    pub fn step(&mut self, state: &State, now: Instant) -> bool {
        match state {
            State::Untouched => self.deadline.is_some_and(|d| now >= d),
            State::Missing => false,
            State::Pending(_) | State::Evicted | State::Canceled | State::Failed { .. } => {
                self.deadline = None;
                false
            }
        }
    }

    /// When to look again, for the bound's sake.
    pub fn wake_at(&self) -> Option<Instant> {
        self.deadline
    }

    /// What a pod's blocker says while nothing has acted on its request.
    pub fn waiting(&self, request: &str) -> String {
        format!(
            "EvictionRequest {request} made; no controller has acted on it yet (the Eviction API is used if none has within {} s)",
            seconds(self.within)
        )
    }

    /// Why the request was given up, for the Warning that says so.
    pub fn why(&self, request: &str) -> String {
        format!(
            "no controller acted on its EvictionRequest {request} within {} s (Kubernetes 1.37 serves the API without one); evicting through the Eviction API",
            seconds(self.within)
        )
    }
}

/// Seconds as the operator gave them: `60`, `2.5`.
fn seconds(d: Duration) -> String {
    format!("{}", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_request_nothing_ever_acted_on_is_given_up_and_only_once_the_bound_passed() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let working = || State::Pending("EvictionRequest: responder a.io/b is at work".into());
        // (what was seen, when), and whether the last look gives it up.
        let cases: Vec<(Vec<(State, u64)>, bool)> = vec![
            (vec![(State::Untouched, 0)], false),
            (vec![(State::Untouched, 59)], false),
            (vec![(State::Untouched, 60)], true),
            (vec![(State::Untouched, 3600)], true),
            (vec![(State::Missing, 10), (State::Untouched, 61)], true),
            // Any sign of progress lifts the bound for good.
            (vec![(working(), 5), (State::Untouched, 61)], false),
            (vec![(working(), 70)], false),
            (vec![(State::Canceled, 5), (State::Untouched, 600)], false),
            (
                vec![
                    (
                        State::Failed {
                            reason: "NoFurtherResponder".into(),
                            message: String::new(),
                        },
                        5,
                    ),
                    (State::Untouched, 600),
                ],
                false,
            ),
            (vec![(State::Missing, 61)], false),
        ];
        for (seen, want) in cases {
            let mut bound = ProgressBound::new(t0, s(60));
            let mut last = false;
            for (state, at) in &seen {
                last = bound.step(state, t0 + s(*at));
            }
            assert_eq!(last, want, "{seen:?}");
        }
    }

    #[test]
    fn the_bound_wakes_the_drain_until_something_acts() {
        let t0 = Instant::now();
        let mut bound = ProgressBound::new(t0, Duration::from_secs(60));
        assert_eq!(bound.wake_at(), Some(t0 + Duration::from_secs(60)));
        bound.step(&State::Evicted, t0);
        assert_eq!(bound.wake_at(), None);
        let huge = ProgressBound::new(t0, Duration::MAX);
        assert!(huge.wake_at().is_some(), "saturates instead of panicking");
    }

    #[test]
    fn the_words_name_the_request_and_the_bound() {
        let bound = ProgressBound::new(Instant::now(), Duration::from_secs(60));
        assert_eq!(
            bound.why("maintd-u"),
            "no controller acted on its EvictionRequest maintd-u within 60 s (Kubernetes 1.37 serves the API without one); evicting through the Eviction API"
        );
        let short = ProgressBound::new(Instant::now(), Duration::from_millis(2500));
        assert!(short.waiting("maintd-u").contains("within 2.5 s"));
    }
}
