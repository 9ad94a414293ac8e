//! One server-side apply of a status, bounded by a timeout and based on a
//! resourceVersion.
//!
//! A write whose client timed out may still land later: the API server
//! finishes what it accepted. Written without a precondition, such a late
//! write would put an old status over a newer one and nothing would put it
//! right, since the writer believes the newer one is there. Every status
//! write of the agent therefore carries the resourceVersion it was based on
//! (`metadata.resourceVersion` in the apply body is a precondition): a late
//! write finds the object changed and is refused with 409 Conflict.

use std::time::Duration;

use http::Request;
use prometheus_client::metrics::counter::Counter;
use serde_json::Value;

/// What became of one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// It landed; the object as it left it.
    Written(Value),
    /// The object changed since the resourceVersion the write was based on.
    Stale,
    /// The object is not there (404).
    Gone,
    /// The object's schema does not declare a field of the write (the API
    /// server's words, which name the field).
    Undeclared(String),
    /// Refused otherwise, or no answer in time (logged); it may still land,
    /// which the precondition of the next write takes care of.
    Failed,
}

/// How a writer's status writes go out.
pub struct Applier<'a> {
    pub client: &'a kube::Client,
    /// How long one request may take.
    pub timeout: Duration,
    /// Counts the writes that landed.
    pub writes: &'a Counter,
    /// What is written, for the log.
    pub what: &'a str,
}

impl Applier<'_> {
    /// Applies `body` at `path` (which carries the field manager) based on
    /// `rv`; if the object changed since and `reread` is given, reads its
    /// version there and applies once more based on that. The writer is
    /// the only author of what it writes, so its newest status may go over
    /// whatever is there; only a write sent before the last read may not.
    pub async fn apply_based(
        &self,
        path: &str,
        reread: Option<&str>,
        body: &Value,
        rv: Option<&str>,
    ) -> Applied {
        let first = self.apply(path, &based_on(body.clone(), rv)).await;
        let (Applied::Stale, Some(object_path)) = (&first, reread) else {
            return first;
        };
        match self.read_rv(object_path).await {
            Ok(Some(rv)) => self.apply(path, &based_on(body.clone(), Some(&rv))).await,
            Ok(None) => Applied::Gone,
            Err(()) => Applied::Failed,
        }
    }

    /// One apply of `body` at `path`.
    pub async fn apply(&self, path: &str, body: &Value) -> Applied {
        let what = self.what;
        let req = match Request::patch(path)
            .header("content-type", "application/apply-patch+yaml")
            .body(serde_json::to_vec(body).unwrap_or_default())
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(%path, error = %e, "building the {what} write");
                return Applied::Failed;
            }
        };
        match tokio::time::timeout(self.timeout, self.client.request::<Value>(req)).await {
            Ok(Ok(obj)) => {
                self.writes.inc();
                Applied::Written(obj)
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => {
                tracing::debug!(%path, "{what}: the object changed since it was read");
                Applied::Stale
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => {
                tracing::info!(%path, "{what}: the object is gone");
                Applied::Gone
            }
            Ok(Err(kube::Error::Api(s))) if s.message.contains("field not declared in schema") => {
                Applied::Undeclared(s.message)
            }
            Ok(Err(e)) => {
                crate::refusals::log_retry(&format!("writing {what} at {path}; will retry"), &e);
                Applied::Failed
            }
            Err(_) => {
                tracing::warn!(%path, "writing {what} timed out; will retry");
                Applied::Failed
            }
        }
    }

    /// The resourceVersion of the object at `path`: `Ok(None)` if it is
    /// gone, `Err` if it could not be read (logged).
    async fn read_rv(&self, path: &str) -> Result<Option<String>, ()> {
        let req = Request::get(path).body(Vec::new()).map_err(|_| ())?;
        match tokio::time::timeout(self.timeout, self.client.request::<Value>(req)).await {
            Ok(Ok(obj)) => Ok(rv_of(&obj).map(str::to_string)),
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(None),
            Ok(Err(e)) => {
                crate::refusals::log_retry(
                    &format!("reading the {} version at {path}", self.what),
                    &e,
                );
                Err(())
            }
            Err(_) => {
                tracing::warn!(%path, "reading the {} version timed out", self.what);
                Err(())
            }
        }
    }
}

/// Sets `metadata.resourceVersion` of an apply body to `rv`, the version
/// the write is based on, or leaves it out when none is known.
pub fn based_on(mut body: Value, rv: Option<&str>) -> Value {
    if let Some(rv) = rv {
        body["metadata"]["resourceVersion"] = Value::String(rv.to_string());
    }
    body
}

/// The resourceVersion of an object as read from an index or an answer.
pub fn rv_of(obj: &Value) -> Option<&str> {
    obj["metadata"]["resourceVersion"].as_str()
}
