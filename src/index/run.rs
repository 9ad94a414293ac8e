//! Keeping an [`Index`] current: the objects first, then a watch from
//! their resourceVersion, for as long as the agent runs.
//!
//! The objects come the way Kubernetes' own clients get them since 1.35
//! (client-go's `WatchListClient`): one watch that sends the current
//! objects first and then a bookmark saying so (`sendInitialEvents`,
//! served from the API server's watch cache since 1.34). That is one
//! request where a list and a watch are two, and a view that is never
//! listed without its watch going with it. An API server that does not
//! serve it (its `WatchList` feature off) refuses the request as invalid:
//! the agent then lists and watches, for the rest of its life.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::{ObjectList, Request};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{ACCEPT_METADATA, ACCEPT_METADATA_LIST, Backoff, Index, WatchTarget};

/// The annotation on the bookmark that ends a watch's current objects.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Whether the API server sends a watch's current objects first: assumed
/// until it refuses, then never asked again. Shared by every watch of one
/// agent (they talk to one API server). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct WatchLists {
    refused: Arc<AtomicBool>,
}

impl WatchLists {
    /// Whether a watch starts with the current objects (else a list).
    pub fn served(&self) -> bool {
        !self.refused.load(Ordering::Relaxed)
    }

    fn refuse(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }
}

type Events = BoxStream<'static, Result<WatchEvent<Value>, kube::Error>>;

/// How a watch that sends the current objects first went.
enum Started {
    /// The objects are in the view: go on with the same watch from `rv`.
    Synced(Events, String),
    /// This API server does not do it: list and watch instead.
    NotServed(String),
    Failed(Failure),
    Stopped,
}

/// Why a watch could not be made, and whether the API server asked the
/// agent to come back later (429).
struct Failure {
    why: String,
    throttled: bool,
}

impl Failure {
    fn of(e: &kube::Error) -> Self {
        Failure {
            why: crate::client::explain(e),
            throttled: matches!(e, kube::Error::Api(s) if s.code == 429),
        }
    }

    fn said(why: impl Into<String>) -> Self {
        Failure {
            why: why.into(),
            throttled: false,
        }
    }

    /// How long to wait before trying again: the backoff's next delay, and
    /// after a 429 at least what the API server asks for, plus a random
    /// part of it (see [`RETRY_AFTER`]).
    fn pause(&self, backoff: &mut Backoff) -> Duration {
        let next = backoff.next_delay();
        if self.throttled {
            next.max(RETRY_AFTER) + spread(RETRY_AFTER)
        } else {
            next
        }
    }
}

impl Index {
    /// Keeps the index current until `stop`: the current objects (from the
    /// API server's watch cache), then their changes, resuming the watch
    /// after each one ends and starting over after a 410. A watch that
    /// stays silent past its idle guard is treated as dead (a half-open
    /// connection) and made again. Failures are retried with jittered,
    /// capped backoff, so many agents do not come back to a restarted API
    /// server at once.
    pub async fn run(self, client: kube::Client, target: WatchTarget, stop: CancellationToken) {
        let req = Request::new(target.path.clone());
        self.lock().stale_after = Some(target.guard.stale_after);
        let health = &target.guard.health;
        let idle = target.guard.idle_timeout;
        let mut backoff = Backoff::with(500, 30_000);
        'relist: loop {
            let (mut rv, mut started) = if target.guard.health.lists.served() {
                match self.start_streamed(&client, &req, &target, &stop).await {
                    Started::Synced(events, rv) => {
                        health.ok();
                        backoff.reset();
                        (rv, Some(events))
                    }
                    Started::NotServed(why) => {
                        tracing::info!(path = %target.path, %why, "the API server does not send a watch's objects first; listing and watching instead");
                        target.guard.health.lists.refuse();
                        continue 'relist;
                    }
                    Started::Failed(e) => {
                        self.note_error(format!("watching {}: {}", target.path, e.why));
                        tracing::debug!(path = %target.path, error = %e.why, "watch of the current objects failed; retrying");
                        if sleep_or_stop(e.pause(&mut backoff), &stop).await {
                            return;
                        }
                        continue 'relist;
                    }
                    Started::Stopped => return,
                }
            } else {
                match self.list(&client, &req, &target, &stop).await {
                    Some(Ok(rv)) => {
                        health.ok();
                        backoff.reset();
                        (rv, None)
                    }
                    Some(Err(())) => {
                        if sleep_or_stop(backoff.next_delay(), &stop).await {
                            return;
                        }
                        continue 'relist;
                    }
                    None => return,
                }
            };
            loop {
                let mut stream = match started.take() {
                    Some(events) => events,
                    None => match self.watch_from(&client, &req, &target, &rv, &stop).await {
                        Some(Ok(events)) => events,
                        Some(Err(e)) => {
                            self.note_error(format!("watching {}: {}", target.path, e.why));
                            if sleep_or_stop(e.pause(&mut backoff), &stop).await {
                                return;
                            }
                            continue;
                        }
                        None => return,
                    },
                };
                loop {
                    let next = tokio::select! {
                        n = tokio::time::timeout(idle, stream.try_next()) => n,
                        _ = stop.cancelled() => return,
                    };
                    let next = match next {
                        Ok(n) => n,
                        Err(_) => {
                            let why = format!(
                                "watch of {} silent for {}s (no event, no bookmark); making it again",
                                target.path,
                                idle.as_secs()
                            );
                            tracing::warn!(path = %target.path, "{why}");
                            health.failed(why.clone());
                            self.note_error(why);
                            break;
                        }
                    };
                    match next {
                        Ok(Some(WatchEvent::Error(e))) if e.code == 410 => {
                            health.ok();
                            // Everyone gets a 410 after an API server restart:
                            // the relists are spread over a few seconds.
                            let pause = backoff.next_delay() + spread(RELIST_SPREAD);
                            if sleep_or_stop(pause, &stop).await {
                                return;
                            }
                            continue 'relist;
                        }
                        Ok(Some(WatchEvent::Error(e))) => {
                            self.note_error(format!("watch of {}: {}", target.path, e.message));
                            if sleep_or_stop(backoff.next_delay(), &stop).await {
                                return;
                            }
                            continue 'relist;
                        }
                        Ok(Some(mut ev)) => {
                            health.ok();
                            backoff.reset();
                            if let Some(new_rv) = event_rv(&ev) {
                                rv = new_rv;
                            }
                            if let WatchEvent::Added(o) | WatchEvent::Modified(o) = &mut ev {
                                (target.trim)(o);
                            }
                            self.apply(ev);
                        }
                        // The server ended the watch (timeout): resume.
                        Ok(None) => break,
                        Err(e) => {
                            let e = crate::client::explain(&e);
                            tracing::debug!(path = %target.path, error = %e, "watch broke; resuming");
                            self.note_error(format!("watch of {} broke: {e}", target.path));
                            // A restart breaks every agent's watches at once.
                            let pause = backoff.next_delay() + spread(REWATCH_SPREAD);
                            if sleep_or_stop(pause, &stop).await {
                                return;
                            }
                            break;
                        }
                    }
                }
            }
        }
    }

    /// One watch that sends the current objects first (from the watch
    /// cache, as a list with resourceVersion 0 would be): they replace the
    /// view once the bookmark that ends them comes, and the same watch
    /// goes on.
    async fn start_streamed(
        &self,
        client: &kube::Client,
        req: &Request,
        target: &WatchTarget,
        stop: &CancellationToken,
    ) -> Started {
        let idle = target.guard.idle_timeout;
        let wp = watch_params(target).initial_events();
        let answer = tokio::select! {
            r = tokio::time::timeout(idle, self.request_watch(client, req, target, &wp, "0")) => r,
            _ = stop.cancelled() => return Started::Stopped,
        };
        let mut events = match answer {
            Ok(Ok(events)) => events,
            Ok(Err(kube::Error::Api(s))) if refuses_initial_events(&s) => {
                return Started::NotServed(s.message);
            }
            Ok(Err(e)) => return Started::Failed(Failure::of(&e)),
            Err(_) => {
                return Started::Failed(Failure::said(format!("no answer in {}s", idle.as_secs())));
            }
        };
        let mut items = Vec::new();
        loop {
            let next = tokio::select! {
                n = tokio::time::timeout(idle, events.try_next()) => n,
                _ = stop.cancelled() => return Started::Stopped,
            };
            match next {
                Err(_) => {
                    return Started::Failed(Failure::said(format!(
                        "no object or bookmark for {}s while the current objects came",
                        idle.as_secs()
                    )));
                }
                Ok(Ok(Some(WatchEvent::Added(mut o)))) => {
                    (target.trim)(&mut o);
                    items.push(o);
                }
                Ok(Ok(Some(WatchEvent::Bookmark(b)))) => {
                    if b.metadata
                        .annotations
                        .get(INITIAL_EVENTS_END)
                        .map(String::as_str)
                        != Some("true")
                    {
                        // A server that knows nothing of it: a plain watch.
                        return Started::NotServed(
                            "a bookmark came before the end of the current objects".into(),
                        );
                    }
                    self.replace_all(items);
                    return Started::Synced(events, b.metadata.resource_version);
                }
                // Changes before the current objects ended: a plain watch.
                Ok(Ok(Some(WatchEvent::Modified(_) | WatchEvent::Deleted(_)))) => {
                    return Started::NotServed(
                        "a change came before the end of the current objects".into(),
                    );
                }
                Ok(Ok(Some(WatchEvent::Error(e)))) => {
                    return Started::Failed(Failure {
                        throttled: e.code == 429,
                        why: e.message,
                    });
                }
                Ok(Ok(None)) => {
                    return Started::Failed(Failure::said(
                        "the watch ended before the current objects did",
                    ));
                }
                Ok(Err(e)) => return Started::Failed(Failure::of(&e)),
            }
        }
    }

    /// Lists the objects into the view; its resourceVersion to watch from.
    /// None: stopped; Err: failed (said in the view).
    async fn list(
        &self,
        client: &kube::Client,
        req: &Request,
        target: &WatchTarget,
        stop: &CancellationToken,
    ) -> Option<Result<String, ()>> {
        let idle = target.guard.idle_timeout;
        let mut lp = ListParams::default().match_any();
        if let Some(fs) = &target.field_selector {
            lp = lp.fields(fs);
        }
        if let Some(ls) = &target.label_selector {
            lp = lp.labels(ls);
        }
        let list = tokio::select! {
            r = tokio::time::timeout(idle, list_all(client, req, &lp, target)) => r,
            _ = stop.cancelled() => return None,
        };
        match list {
            Ok(Ok((items, rv))) => {
                self.replace_all(items);
                Some(Ok(rv))
            }
            failed => {
                let (e, refused) = match failed {
                    Ok(Err(e)) => (crate::client::explain(&e), crate::refusals::is_refusal(&e)),
                    _ => (format!("no answer in {}s", idle.as_secs()), false),
                };
                self.note_error(format!("listing {}: {e}", target.path));
                // A refusal was said once already, in words.
                if refused {
                    tracing::debug!(path = %target.path, error = %e, "list refused; retrying");
                } else {
                    tracing::warn!(path = %target.path, error = %e, "list failed; retrying");
                }
                Some(Err(()))
            }
        }
    }

    /// A watch from `rv`. None: stopped.
    async fn watch_from(
        &self,
        client: &kube::Client,
        req: &Request,
        target: &WatchTarget,
        rv: &str,
        stop: &CancellationToken,
    ) -> Option<Result<Events, Failure>> {
        let idle = target.guard.idle_timeout;
        let wp = watch_params(target);
        let answer = tokio::select! {
            r = tokio::time::timeout(idle, self.request_watch(client, req, target, &wp, rv)) => r,
            _ = stop.cancelled() => return None,
        };
        Some(match answer {
            Ok(Ok(events)) => Ok(events),
            Ok(Err(e)) => Err(Failure::of(&e)),
            Err(_) => Err(Failure::said(format!("no answer in {}s", idle.as_secs()))),
        })
    }

    async fn request_watch(
        &self,
        client: &kube::Client,
        req: &Request,
        target: &WatchTarget,
        wp: &WatchParams,
        rv: &str,
    ) -> Result<Events, kube::Error> {
        let mut http_req = req.watch(wp, rv).map_err(kube::Error::BuildRequest)?;
        if target.metadata_only {
            http_req.headers_mut().insert(
                http::header::ACCEPT,
                http::HeaderValue::from_static(ACCEPT_METADATA),
            );
        }
        Ok(client.request_events::<Value>(http_req).await?.boxed())
    }
}

/// A watch of `target`, ending after a random 30 to 60 minutes, as the API
/// server ends one that names no timeout (its `--min-request-timeout`,
/// 1,800 s, to twice that): spread, so the agents' watches do not all end
/// in the same second. Not sooner: every view of an agent shares its one
/// HTTP/2 connection, so a watch ending moves nothing to another API
/// server, and a dead connection is found by the idle guard (bookmarks
/// come every minute), not by the watch's end. Each end is one more
/// request per view: at 1,000 nodes, a rollout of 8.5 minutes saw each
/// agent's views started again twice when they ended every 4 to 5.
fn watch_params(target: &WatchTarget) -> WatchParams {
    let mut wp = WatchParams::default().timeout(rand::random_range(WATCH_ENDS_AFTER));
    if let Some(fs) = &target.field_selector {
        wp = wp.fields(fs);
    }
    if let Some(ls) = &target.label_selector {
        wp = wp.labels(ls);
    }
    wp
}

/// Whether `status` is an API server refusing a watch that sends the
/// current objects first, as one without the `WatchList` feature does
/// (422: "sendInitialEvents is forbidden for watch unless the WatchList
/// feature gate is enabled").
fn refuses_initial_events(status: &kube::core::Status) -> bool {
    matches!(status.code, 400 | 422)
        && (status.message.contains("sendInitialEvents")
            || status.message.contains("resourceVersionMatch"))
}

/// Lists every object, page by page, each trimmed as its page arrives.
async fn list_all(
    client: &kube::Client,
    req: &Request,
    lp: &ListParams,
    target: &WatchTarget,
) -> Result<(Vec<Value>, String), kube::Error> {
    let mut items = Vec::new();
    let mut lp = lp.clone();
    lp.limit = Some(500);
    loop {
        let mut http_req = req.list(&lp).map_err(kube::Error::BuildRequest)?;
        if target.metadata_only {
            http_req.headers_mut().insert(
                http::header::ACCEPT,
                http::HeaderValue::from_static(ACCEPT_METADATA_LIST),
            );
        }
        let page: ObjectList<Value> = client.request(http_req).await?;
        items.extend(page.items.into_iter().map(|mut o| {
            (target.trim)(&mut o);
            o
        }));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => {
                // Later pages come from the first page's snapshot; the API
                // server refuses a resourceVersion beside a continue token.
                lp.continue_token = Some(c);
                lp.resource_version = None;
                lp.version_match = None;
            }
            _ => return Ok((items, page.metadata.resource_version.unwrap_or_default())),
        }
    }
}

fn event_rv(ev: &WatchEvent<Value>) -> Option<String> {
    match ev {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
            o["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string)
        }
        WatchEvent::Bookmark(b) => Some(b.metadata.resource_version.clone()),
        WatchEvent::Error(_) => None,
    }
}

/// How widely relists after a 410, and watches made again after a broken
/// stream, are spread: an API server restart does both to every agent at
/// the same moment.
const RELIST_SPREAD: Duration = Duration::from_secs(5);
const REWATCH_SPREAD: Duration = Duration::from_secs(1);

/// What the API server asks of a client it refuses with 429 (API Priority
/// and Fairness, or its limit of requests in flight): to come back after
/// its `Retry-After`, which both send as 1 s (client-go waits that long).
/// A watch refused so waits at least that, plus a random part of it: the
/// nodes refused together, in a burst that filled the fleet's queues, do
/// not come back together to be refused again. In a rollout of 2,000
/// nodes, watches of slot Leases made as slots changed hands were 10 of
/// each agent's 24 refusals, each retried after half a second.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A random part of `d`.
fn spread(d: Duration) -> Duration {
    d.mul_f64(rand::random::<f64>())
}

/// Returns true if `stop` fired first.
async fn sleep_or_stop(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.cancelled() => true,
    }
}

/// How long a watch runs before the API server ends it, in seconds (see
/// [`watch_params`]).
const WATCH_ENDS_AFTER: std::ops::RangeInclusive<u32> = 1_800..=3_600;

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": "Too many requests, please try again later.",
            "code": code
        }))
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    /// A watch the API server refused with 429 comes back no sooner than
    /// its Retry-After (1 s), at a random moment of the second after it;
    /// any other failure keeps the backoff's half a second.
    #[test]
    fn a_watch_refused_with_429_waits_what_the_api_server_asks() {
        let throttled = Failure::of(&refused(429));
        assert!(throttled.throttled, "{}", throttled.why);
        let mut pauses = Vec::new();
        for _ in 0..200 {
            let mut backoff = Backoff::with(500, 30_000);
            pauses.push(throttled.pause(&mut backoff));
        }
        assert!(
            pauses
                .iter()
                .all(|p| *p >= RETRY_AFTER && *p < RETRY_AFTER * 2),
            "{pauses:?}"
        );
        let early = pauses.iter().filter(|p| **p < RETRY_AFTER * 3 / 2).count();
        assert!(
            early > 0 && early < pauses.len(),
            "spread over the second: {pauses:?}"
        );

        let other = Failure::of(&refused(500));
        assert!(!other.throttled);
        let mut backoff = Backoff::with(500, 30_000);
        let p = other.pause(&mut backoff);
        assert!(p < RETRY_AFTER, "{p:?}");
        // A long backoff is kept after a 429 too.
        let mut backoff = Backoff::with(8_000, 30_000);
        assert!(throttled.pause(&mut backoff) >= Duration::from_secs(6));
    }
}
