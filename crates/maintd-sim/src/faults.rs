//! Network and server faults the simulated apiserver can be told to have,
//! so the agent is tested against a cluster as unkind as a real one:
//!
//! - **half-open connections**: every open connection stops answering
//!   without closing (no FIN, no RST), as when a NAT or load balancer drops
//!   the flow; the client sees nothing but silence;
//! - **black hole**: every connection, open or new, is accepted and then
//!   never answered, as when the API server's address is unreachable;
//! - **errors and delays**: a share of requests answered with 500, 503 or
//!   429, or answered only after a delay; every read of one object or
//!   collection answered with an error while the rest of the API works;
//! - **late commits**: a write is received at once but committed only
//!   after a delay, whether or not its client is still waiting, as an API
//!   server under load finishes a write whose client already timed out;
//! - **lagging watches**: the watches of a collection (or of one object by
//!   name) send each event late, as an API server under load does;
//! - **restart**: every connection is closed and the watch cache starts
//!   afresh, so a watch resumed from before the restart gets 410 Gone.
//!
//! A connection frozen once stays frozen (a dropped flow does not come
//! back); only new connections see a fault lifted.

use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

#[derive(Debug, Default, Clone)]
struct Settings {
    /// Connections with an id below this are frozen.
    frozen_below: u64,
    black_hole: bool,
    /// (share of requests, status code)
    errors: Option<(f64, u16)>,
    delay: Duration,
    /// Requests to paths starting with one of these get 403 Forbidden.
    forbidden: Vec<String>,
    /// GETs of paths starting with the prefix get the status code.
    failing_reads: Vec<(String, u16)>,
    /// The next writes to paths starting with the prefix get the status
    /// code, as many times as the count says.
    failing_writes: Vec<(String, u16, usize)>,
    /// Writes to paths starting with the prefix commit after the delay.
    late_commits: Vec<(String, Duration)>,
    /// Watches of the collection path (of one object by name, if given)
    /// send each event after the delay.
    lagging_watches: Vec<(String, Option<String>, Duration)>,
}

/// The faults of one simulated cluster (`SimState::faults`).
#[derive(Debug)]
pub struct Faults {
    settings: Mutex<Settings>,
    next_conn: AtomicU64,
    /// Bumped by [`Faults::restart`]; connections close when it changes.
    restarts: watch::Sender<u64>,
    /// Writes held by [`Faults::commit_late`] and not yet committed.
    held: AtomicUsize,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            settings: Mutex::default(),
            next_conn: AtomicU64::new(0),
            restarts: watch::channel(0).0,
            held: AtomicUsize::new(0),
        }
    }
}

impl Faults {
    fn settings(&self) -> std::sync::MutexGuard<'_, Settings> {
        self.settings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every connection open now stops answering, for good, without being
    /// closed. New connections work.
    pub fn freeze_open_connections(&self) {
        let next = self.next_conn.load(Ordering::SeqCst);
        self.settings().frozen_below = next;
    }

    /// While on, every connection (open or new) is silent; turned off, new
    /// connections work again and the ones frozen meanwhile stay dead.
    pub fn black_hole(&self, on: bool) {
        let mut s = self.settings();
        if on {
            s.frozen_below = u64::MAX;
        } else if s.black_hole {
            // Only a black hole that was on leaves dead connections behind:
            // lifting one that was off (as `clear` does) kills nothing.
            s.frozen_below = self.next_conn.load(Ordering::SeqCst);
        }
        s.black_hole = on;
    }

    /// Answers `share` (0 to 1) of requests with `code` (500, 503, 429...).
    pub fn fail_requests(&self, share: f64, code: u16) {
        self.settings().errors = (share > 0.0).then_some((share.min(1.0), code));
    }

    /// Answers every request to a path starting with `prefix` with 403
    /// Forbidden, as missing RBAC would.
    pub fn forbid(&self, prefix: &str) {
        self.settings().forbidden.push(prefix.to_string());
    }

    /// Answers every GET of a path starting with `prefix` (one object, or a
    /// collection and its objects) with `code`; writes to it still work.
    pub fn fail_reads(&self, prefix: &str, code: u16) {
        self.settings()
            .failing_reads
            .push((prefix.to_string(), code));
    }

    /// Answers the next `times` writes (anything but GET) to a path
    /// starting with `prefix` with `code`, before they reach the store:
    /// a 409 here is a write that lost a race with another writer.
    pub fn fail_writes(&self, prefix: &str, code: u16, times: usize) {
        self.settings()
            .failing_writes
            .push((prefix.to_string(), code, times));
    }

    /// Answers every request only after `delay`.
    pub fn delay_requests(&self, delay: Duration) {
        self.settings().delay = delay;
    }

    /// Writes (anything but GET) to a path starting with `prefix` are read
    /// at once and committed only after `delay`, even when the client gave
    /// up meanwhile: a timeout on the client does not mean nothing landed.
    pub fn commit_late(&self, prefix: &str, delay: Duration) {
        self.settings()
            .late_commits
            .push((prefix.to_string(), delay));
    }

    /// Watches of the collection at `path` (only those of the object
    /// named `name`, when given: a field selector on `metadata.name`) send
    /// each event `delay` after it happened, as an API server under load
    /// delivers them late: a watcher's view lags the writes it made itself.
    pub fn lag_watches(&self, path: &str, name: Option<&str>, delay: Duration) {
        self.settings()
            .lagging_watches
            .push((path.to_string(), name.map(str::to_string), delay));
    }

    /// How late a watch of the collection at `path` (of the object `name`,
    /// if it watches one by name) sends its events now.
    pub fn watch_lag(&self, path: &str, name: Option<&str>) -> Duration {
        self.settings()
            .lagging_watches
            .iter()
            .filter(|(p, n, _)| p == path && (n.is_none() || n.as_deref() == name))
            .map(|(_, _, d)| *d)
            .max()
            .unwrap_or_default()
    }

    /// How long a write of `method` to `path` waits before it is committed.
    pub fn late_commit(&self, method: &http::Method, path: &str) -> Option<Duration> {
        if method == http::Method::GET {
            return None;
        }
        let s = self.settings();
        s.late_commits
            .iter()
            .find(|(p, _)| path.starts_with(p.as_str()))
            .map(|(_, d)| *d)
    }

    /// How many writes are held for a late commit now.
    pub fn held_writes(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Counts a write held (`true`) or committed (`false`).
    pub fn hold(&self, held: bool) {
        if held {
            self.held.fetch_add(1, Ordering::SeqCst);
        } else {
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Lifts the error, delay and late-commit faults and the black hole
    /// (frozen connections stay frozen; writes already held still land).
    pub fn clear(&self) {
        self.black_hole(false);
        let mut s = self.settings();
        s.errors = None;
        s.delay = Duration::ZERO;
        s.forbidden.clear();
        s.failing_reads.clear();
        s.failing_writes.clear();
        s.late_commits.clear();
        s.lagging_watches.clear();
    }

    /// Closes every connection, as an API server restart does. The caller
    /// also resets the watch history (see `SimState::restart`).
    pub fn close_all_connections(&self) {
        self.restarts.send_modify(|n| *n += 1);
    }

    /// A receiver that changes on every restart.
    pub fn restarts(&self) -> watch::Receiver<u64> {
        self.restarts.subscribe()
    }

    /// A new connection's id.
    pub fn register_connection(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::SeqCst)
    }

    fn frozen(&self, conn: u64) -> bool {
        let s = self.settings();
        s.black_hole || conn < s.frozen_below
    }

    /// What to do with a `method` request for `path` now: answer it with an
    /// error code, and how long to wait first.
    pub fn for_request(&self, method: &http::Method, path: &str) -> (Option<u16>, Duration) {
        let mut s = self.settings();
        if s.forbidden.iter().any(|p| path.starts_with(p.as_str())) {
            return (Some(403), s.delay);
        }
        if method == http::Method::GET
            && let Some((_, code)) = s
                .failing_reads
                .iter()
                .find(|(p, _)| path.starts_with(p.as_str()))
        {
            return (Some(*code), s.delay);
        }
        if method != http::Method::GET
            && let Some((_, code, left)) = s
                .failing_writes
                .iter_mut()
                .find(|(p, _, left)| *left > 0 && path.starts_with(p.as_str()))
        {
            *left -= 1;
            let code = *code;
            return (Some(code), s.delay);
        }
        let code = s
            .errors
            .filter(|(share, _)| rand::random::<f64>() < *share)
            .map(|(_, code)| code);
        (code, s.delay)
    }
}

/// A server-side connection that goes silent when its [`Faults`] say so:
/// reads and writes stay pending forever, and nothing is closed.
pub struct FaultyIo<T> {
    inner: T,
    conn: u64,
    faults: std::sync::Arc<Faults>,
    dead: bool,
}

impl<T> FaultyIo<T> {
    pub fn new(inner: T, faults: std::sync::Arc<Faults>) -> Self {
        let conn = faults.register_connection();
        FaultyIo {
            inner,
            conn,
            faults,
            dead: false,
        }
    }

    /// Whether the connection has gone silent (checked on every I/O).
    fn silent(&mut self) -> bool {
        if !self.dead && self.faults.frozen(self.conn) {
            self.dead = true;
        }
        self.dead
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for FaultyIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.silent() {
            // Never woken: the flow is gone, the socket stays open.
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for FaultyIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.silent() {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.silent() {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.silent() {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
