//! The simulator's audit log: every mutating request with its time, verb,
//! object and response code, for tests and benchmarks to read; every
//! request with its user, for footprint measurements; and every question
//! put to the authorizer, with its answer.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// One mutating request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditEntry {
    /// Wall-clock time, RFC 3339 with microseconds.
    pub time: String,
    /// Milliseconds since the simulator started (monotonic).
    pub t_ms: u64,
    /// create, update, patch, delete, evict, deletecollection.
    pub verb: String,
    /// plural.group, or plural for the core group.
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: String,
    pub name: String,
    /// The HTTP status code of the response.
    pub code: u16,
    pub user_agent: String,
    /// The uid of the object acted on, where known (pods: which incarnation
    /// was evicted).
    pub uid: Option<String>,
    /// The store's resourceVersion right after the request: a logical clock
    /// to order requests against watch events (whose objects carry theirs).
    pub rv: u64,
}

/// One request of any kind, for counting.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RequestRecord {
    pub t_ms: u64,
    pub method: String,
    pub path: String,
    pub watch: bool,
    pub user_agent: String,
    /// Who made it ("" when its credentials were refused).
    pub user: String,
    pub code: u16,
}

/// One authorization decision: who asked to do what, and whether RBAC let
/// them. A request can need more than one (an apply that creates its
/// object needs `patch` and `create`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AuthorizationRecord {
    pub user: String,
    pub verb: String,
    /// Empty for a request that names no resource (then see `path`).
    pub group: String,
    /// The resource as rules name it: `pods`, `pods/eviction`.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub path: String,
    pub allowed: bool,
}

pub struct Audit {
    started: Instant,
    entries: Mutex<Vec<AuditEntry>>,
    requests: Mutex<Vec<RequestRecord>>,
    authorizations: Mutex<Vec<AuthorizationRecord>>,
    /// Bytes and watch events sent, per user agent.
    sent: Mutex<BTreeMap<String, Sent>>,
    /// The same, per user agent and resource (the plural in the path).
    sent_by_resource: Mutex<BTreeMap<(String, String), Sent>>,
    file: Option<Mutex<File>>,
}

/// What the server sent one client (by user agent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// Response bytes, watch streams included.
    pub bytes: u64,
    /// Watch events and bookmarks.
    pub watch_events: u64,
}

impl Audit {
    pub fn new(path: Option<PathBuf>) -> Self {
        let file = path.and_then(|p| match File::create(&p) {
            Ok(f) => Some(Mutex::new(f)),
            Err(e) => {
                tracing::warn!(path = %p.display(), error = %e, "cannot write the audit log file; keeping it in memory only");
                None
            }
        });
        Audit {
            started: Instant::now(),
            entries: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
            authorizations: Mutex::new(Vec::new()),
            sent: Mutex::default(),
            sent_by_resource: Mutex::default(),
            file,
        }
    }

    pub fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub fn record(&self, mut entry: AuditEntry) {
        entry.t_ms = self.elapsed_ms();
        entry.time = super::meta::now_micro();
        if let Some(f) = &self.file {
            let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
            if let Ok(line) = serde_json::to_string(&entry) {
                let _ = writeln!(f, "{line}");
            }
        }
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(entry);
    }

    pub fn record_request(&self, mut rec: RequestRecord) {
        rec.t_ms = self.elapsed_ms();
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(rec);
    }

    pub fn record_authorization(&self, rec: AuthorizationRecord) {
        self.authorizations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(rec);
    }

    /// Every authorization decision so far.
    pub fn authorizations(&self) -> Vec<AuthorizationRecord> {
        self.authorizations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Counts what was sent to `user_agent` for `resource`: `bytes`, and
    /// one watch event if `event`.
    pub fn record_sent(&self, user_agent: &str, resource: &str, bytes: usize, event: bool) {
        let add = |s: &mut Sent| {
            s.bytes += bytes as u64;
            s.watch_events += u64::from(event);
        };
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        add(sent.entry(user_agent.to_string()).or_default());
        drop(sent);
        let mut by = self
            .sent_by_resource
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        add(by
            .entry((user_agent.to_string(), resource.to_string()))
            .or_default());
    }

    /// What was sent so far, per user agent and resource.
    pub fn sent_by_resource(&self) -> BTreeMap<(String, String), Sent> {
        self.sent_by_resource
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What was sent so far, per user agent.
    pub fn sent(&self) -> BTreeMap<String, Sent> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A copy of the audit log so far.
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A copy of every request so far.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many requests so far `matching` holds for.
    pub fn count_requests(&self, matching: impl Fn(&RequestRecord) -> bool) -> usize {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|r| matching(r))
            .count()
    }

    /// Requests per user agent.
    pub fn request_counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for r in self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            *out.entry(r.user_agent.clone()).or_default() += 1;
        }
        out
    }
}
