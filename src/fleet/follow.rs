//! One collection, listed and then watched, change by change: what `get
//! -w` prints and what `drain --wait` decides from.
//!
//! A watch that breaks (a dropped connection, an API server restarting)
//! is made again from the last resourceVersion seen, so no change is
//! missed; one that the server ends (its timeout) is made again at once;
//! one whose resourceVersion the server no longer has (410 Gone) is
//! replaced by a new list, handed out whole so the caller can tell what
//! changed meanwhile. One that stays silent past [`IDLE`] (a half-open
//! connection; a healthy watch gets a bookmark every minute) is treated
//! as broken. A refusal (401, 403, 404) ends it with the error, and so
//! does an API server out of reach for [`GIVE_UP`].

use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream::BoxStream};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::{ObjectList, Request};
use serde_json::Value;
use tokio::time::Instant;

use super::FleetError;
use crate::index::Backoff;

/// A watch silent this long is dead.
pub const IDLE: Duration = Duration::from_secs(150);
/// How long the API server may stay out of reach before following fails.
pub const GIVE_UP: Duration = Duration::from_secs(120);

/// What changed.
#[derive(Debug)]
pub enum Change {
    /// Every object there is now: the first list, or a list made again
    /// after the watch's history ran out (410).
    Listed(Vec<Value>),
    /// An object was added or changed.
    Applied(Value),
    /// An object was deleted (its last state).
    Deleted(Value),
}

type Events = BoxStream<'static, Result<WatchEvent<Value>, kube::Error>>;

/// Follows one collection (optionally narrowed by a field selector).
pub struct Follower {
    client: kube::Client,
    server: String,
    path: String,
    field_selector: Option<String>,
    /// For messages: "NodeDrains", "NodeMaintenance drain-node-a".
    what: String,
    /// The rights the calls take, for a refusal's message.
    need: String,
    /// Where the watch resumes; None: list first.
    rv: Option<String>,
    stream: Option<Events>,
    backoff: Backoff,
    /// Since when no call has been answered.
    failing_since: Option<Instant>,
}

impl Follower {
    pub fn new(
        client: kube::Client,
        server: &str,
        path: &str,
        field_selector: Option<String>,
        what: &str,
        need: &str,
    ) -> Follower {
        Follower {
            client,
            server: server.to_string(),
            path: path.to_string(),
            field_selector,
            what: what.to_string(),
            need: need.to_string(),
            rv: None,
            stream: None,
            backoff: Backoff::with(500, 10_000),
            failing_since: None,
        }
    }

    /// The next change. Cancelling it (in a `select!`) loses nothing: the
    /// state moves only once a call has been answered.
    pub async fn next(&mut self) -> Result<Change, FleetError> {
        loop {
            if self.rv.is_none() {
                match self.list().await {
                    Ok((items, rv)) => {
                        self.answered();
                        self.rv = Some(rv);
                        return Ok(Change::Listed(items));
                    }
                    Err(e) => {
                        self.failed(&format!("listing {}", self.what), e).await?;
                        continue;
                    }
                }
            }
            let Some(stream) = self.stream.as_mut() else {
                match self.watch().await {
                    Ok(s) => self.stream = Some(s),
                    Err(e) => self.failed(&format!("watching {}", self.what), e).await?,
                }
                continue;
            };
            let next = tokio::time::timeout(IDLE, stream.try_next()).await;
            match next {
                // Silent too long: a dead connection. Made again.
                Err(_) => self.stream = None,
                // The server ended it (its timeout): made again at once.
                Ok(Ok(None)) => self.stream = None,
                Ok(Ok(Some(ev))) => {
                    self.answered();
                    match ev {
                        WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                            self.rv = rv_of(&o).or(self.rv.take());
                            return Ok(Change::Applied(trimmed(o)));
                        }
                        WatchEvent::Deleted(o) => {
                            self.rv = rv_of(&o).or(self.rv.take());
                            return Ok(Change::Deleted(trimmed(o)));
                        }
                        WatchEvent::Bookmark(b) => {
                            self.rv = Some(b.metadata.resource_version);
                        }
                        // The history from our resourceVersion is gone:
                        // list again.
                        WatchEvent::Error(e) if e.code == 410 => {
                            self.stream = None;
                            self.rv = None;
                        }
                        WatchEvent::Error(e) => {
                            self.stream = None;
                            let e = kube::Error::Api(e);
                            self.failed(&format!("watching {}", self.what), e).await?;
                        }
                    }
                }
                // The connection broke: resumed from the last version.
                Ok(Err(e)) => {
                    self.stream = None;
                    self.failed(&format!("watching {}", self.what), e).await?;
                }
            }
        }
    }

    fn answered(&mut self) {
        self.failing_since = None;
        self.backoff.reset();
    }

    /// A failed call: a definite refusal ends following; anything else is
    /// tried again after a pause, until the API server has been out of
    /// reach for [`GIVE_UP`].
    async fn failed(&mut self, what: &str, e: kube::Error) -> Result<(), FleetError> {
        if !FleetError::is_transient(&e) {
            if super::api_code(&e) == Some(404) {
                return Err(FleetError::NoCrd {
                    what: what.to_string(),
                    server: self.server.clone(),
                    resource: self.path.clone(),
                });
            }
            return Err(FleetError::from_api(what, &self.need, &self.server, &e));
        }
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= GIVE_UP {
            return Err(FleetError::Unreachable {
                what: what.to_string(),
                server: self.server.clone(),
                why: crate::preflight::describe(&e, &self.server),
                gave_up_after: GIVE_UP,
            });
        }
        tokio::time::sleep(self.backoff.next_delay()).await;
        Ok(())
    }

    /// Every object, page by page, and the version to watch from.
    async fn list(&self) -> Result<(Vec<Value>, String), kube::Error> {
        let req = Request::new(self.path.clone());
        let mut lp = ListParams::default().limit(500);
        if let Some(fs) = &self.field_selector {
            lp = lp.fields(fs);
        }
        let mut items = Vec::new();
        loop {
            let http_req = req.list(&lp).map_err(kube::Error::BuildRequest)?;
            let page: ObjectList<Value> = self.client.request(http_req).await?;
            items.extend(page.items.into_iter().map(trimmed));
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp.continue_token = Some(c),
                _ => return Ok((items, page.metadata.resource_version.unwrap_or_default())),
            }
        }
    }

    async fn watch(&self) -> Result<Events, kube::Error> {
        let req = Request::new(self.path.clone());
        // Spread as client-go does, so the server's ends do not line up.
        let mut wp = WatchParams::default().timeout(rand::random_range(240..=300));
        if let Some(fs) = &self.field_selector {
            wp = wp.fields(fs);
        }
        let rv = self.rv.clone().unwrap_or_default();
        let http_req = req.watch(&wp, &rv).map_err(kube::Error::BuildRequest)?;
        Ok(self.client.request_events::<Value>(http_req).await?.boxed())
    }
}

fn rv_of(o: &Value) -> Option<String> {
    o["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_string)
}

/// An object as kubectl shows it: without `metadata.managedFields`.
fn trimmed(mut o: Value) -> Value {
    crate::index::strip_managed_fields(&mut o);
    o
}
