//! Calls the API server refuses (403): said once, in words a person acts
//! on, instead of a warning every time the call is retried.
//!
//! A refusal is not an outage: the API server answered, and it will answer
//! the same until someone changes a role or a policy. So the agent's client
//! notes each refused call here: the first refusal of a call is logged as a
//! warning with which call, the API server's own reason and what to fix;
//! the same refusal again is not logged again. While it is recent, it is
//! listed by `/readyz` and the status, and is the status's last error when
//! the drain has none of its own. A call that is allowed again is
//! forgotten, and that is logged too.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a refusal keeps the agent not ready after it was last seen: a
/// call refused once and never made again (one pod's delete) stops counting
/// after this.
pub const RECENT: Duration = Duration::from_secs(300);

/// At most this many distinct refused calls are remembered (the oldest goes
/// first): a policy refusing a delete per pod must not grow the agent.
const MAX_KEPT: usize = 8;

/// The refusals an agent's client met. Cheap to clone.
#[derive(Clone, Default)]
pub struct Refusals {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    /// (call, words, last seen), oldest first.
    kept: Vec<(String, String, Instant)>,
}

impl std::fmt::Debug for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refusals")
            .field("recent", &self.recent())
            .finish()
    }
}

impl Refusals {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `method` on `path` was refused with the API server's `message`.
    /// Returns whether this refusal is new (and was logged).
    pub fn refused(&self, method: &str, path: &str, message: &str) -> bool {
        let call = format!("{method} {path}");
        let words = words(method, path, message);
        let mut inner = self.lock();
        let now = Instant::now();
        if let Some(seen) = inner
            .kept
            .iter_mut()
            .find(|(c, w, _)| *c == call && *w == words)
        {
            seen.2 = now;
            return false;
        }
        inner.kept.retain(|(c, _, _)| *c != call);
        if inner.kept.len() >= MAX_KEPT {
            inner.kept.remove(0);
        }
        inner.kept.push((call, words.clone(), now));
        drop(inner);
        tracing::warn!("{words}");
        true
    }

    /// `method` on `path` was allowed: a refusal of it is over.
    pub fn allowed(&self, method: &str, path: &str) {
        let call = format!("{method} {path}");
        let mut inner = self.lock();
        let before = inner.kept.len();
        inner.kept.retain(|(c, _, _)| *c != call);
        if inner.kept.len() != before {
            tracing::info!("the API server now allows {call}");
        }
    }

    /// The words of each refusal seen within [`RECENT`], oldest first.
    pub fn recent(&self) -> Vec<String> {
        let inner = self.lock();
        inner
            .kept
            .iter()
            .filter(|(_, _, at)| at.elapsed() < RECENT)
            .map(|(_, w, _)| w.clone())
            .collect()
    }
}

/// Whether an error is a refusal (403): the client has said it once
/// already, so a caller that retries logs it only at debug level.
pub fn is_refusal(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// Logs that `what` failed and will be retried: in words, and a refusal
/// only at debug level (see [`Refusals`]).
pub fn log_retry(what: &str, e: &kube::Error) {
    let error = crate::client::explain(e);
    if is_refusal(e) {
        tracing::debug!(%error, "{what}");
    } else {
        tracing::warn!(%error, "{what}");
    }
}

/// What a person reads about one refused call: the call, the API server's
/// reason, and what to change. An admission policy's refusal names the
/// policy; any other 403 is the roles'.
fn words(method: &str, path: &str, message: &str) -> String {
    let message = crate::preflight::one_line(message);
    let fix = if message.contains("ValidatingAdmissionPolicy") {
        "an admission policy refused it: if the call is for this node's own objects, the \
         node-confinement policy in the cluster does not match this maintd version \
         (apply deploy/node-confinement/ of this release)"
    } else {
        "grant it to maintd's ServiceAccount in the ClusterRole maintd or the Role maintd \
         (deploy/base/rbac.yaml of this release; kubectl apply -k deploy/)"
    };
    format!("the API server refused {method} {path}: {message}; {fix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const RBAC: &str = "nodedrains.maintd.io \"n1\" is forbidden: User \"system:serviceaccount:maintd:maintd\" cannot create resource \"nodedrains\" in API group \"maintd.io\" at the cluster scope";

    #[test]
    fn a_refusal_is_kept_once_until_it_is_allowed() {
        let r = Refusals::default();
        let path = "/apis/maintd.io/v1alpha1/nodedrains/n1";
        let logged: Vec<bool> = (0..5).map(|_| r.refused("PATCH", path, RBAC)).collect();
        assert_eq!(logged, [true, false, false, false, false], "said once");
        let recent = r.recent();
        assert_eq!(recent.len(), 1);
        assert!(
            recent[0].contains("cannot create resource \"nodedrains\""),
            "{}",
            recent[0]
        );
        assert!(recent[0].contains("deploy/base/rbac.yaml"), "{}", recent[0]);
        r.allowed("PATCH", path);
        assert!(r.recent().is_empty());
        assert!(
            r.refused("PATCH", path, RBAC),
            "said again once refused after being allowed"
        );
    }

    #[test]
    fn a_policy_refusal_points_at_the_policy_and_many_calls_keep_few() {
        let r = Refusals::default();
        for i in 0..20 {
            r.refused(
                "DELETE",
                &format!("/api/v1/namespaces/default/pods/p{i}"),
                "pods \"p\" is forbidden: ValidatingAdmissionPolicy 'maintd-node-confinement' \
                 with binding 'maintd-node-confinement' denied request: maintd may delete only pods bound to its own node",
            );
        }
        let recent = r.recent();
        assert_eq!(recent.len(), MAX_KEPT);
        assert!(
            recent[0].contains("/pods/p12"),
            "the oldest went first: {}",
            recent[0]
        );
        assert!(
            recent[0].contains("deploy/node-confinement/"),
            "{}",
            recent[0]
        );
        assert!(!recent[0].contains("rbac.yaml"), "{}", recent[0]);
    }
}
