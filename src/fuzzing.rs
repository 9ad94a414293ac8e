//! Doors into the agent's readers of outside input for the fuzz targets in
//! `fuzz/` (see docs/fuzzing.md). Each one calls the code the agent runs,
//! unchanged; most readers are public already and are not repeated here.
//! Not an API: nothing else should call these.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::drain::static_pods::Manifest;
use crate::http::{Endpoint, Peer, Role};
use crate::node_helper::{Request, SessionCommand, SessionMessage};
use crate::policy::alerts::answer;

/// The `staticPodPath` a kubelet config file's text sets (see
/// [`crate::drain::static_path::resolve`]); the error says why it is not YAML.
pub fn kubelet_static_pod_path(text: &str) -> Result<Option<PathBuf>, String> {
    crate::drain::static_path::static_pod_path_of(text)
}

/// What the static pod directory's file `file`, holding `text`, says.
pub fn static_pod_manifest(file: &str, text: &str) -> Manifest {
    crate::drain::static_pods::manifest_of(file.to_string(), Ok(text.to_string()), None)
}

/// What the stash's journal, holding `text`, says was interrupted.
pub fn stash_journal(text: &str) -> String {
    crate::drain::static_pods::journal_says(text)
}

/// The node helper reading the agent's request line.
pub fn node_helper_request(line: &str) -> Result<Request, String> {
    crate::node_helper::decode_request(line)
}

/// The node helper reading a command line of a hold session.
pub fn node_helper_session_command(line: &str) -> Result<SessionCommand, String> {
    serde_json::from_str(line).map_err(|e| e.to_string())
}

/// The agent reading the helper's reply line to a file operation.
pub fn node_helper_reply<T: serde::de::DeserializeOwned>(
    line: &str,
) -> Result<Result<T, String>, String> {
    crate::node_helper::decode_reply(line)
}

/// The agent reading a message line of a hold session.
pub fn node_helper_session_message(line: &str) -> Result<SessionMessage, String> {
    serde_json::from_str(line).map_err(|e| e.to_string())
}

/// One line of the node helper's protocol from `bytes`, at most `limit`
/// bytes long, as either side reads it.
pub async fn node_helper_read_line(bytes: &[u8], limit: u64) -> Result<Option<String>, String> {
    let mut read = tokio::io::BufReader::new(bytes);
    crate::node_helper::read_line(&mut read, limit).await
}

/// A NodeDrain as the status writer keeps it: what the aggregates read.
pub fn trim_node_drain(o: &mut Value) {
    crate::report::writer::keep_what_aggregates_read(o)
}

/// The alert gate's verdict on an answer of `/api/v1/alerts`: `Ok(Some)`
/// holds drains with that reason, `Ok(None)` lets them go, `Err` is why
/// the answer cannot be used.
pub fn prometheus_alerts(
    url: &str,
    body: &[u8],
    filter: Option<&regex::Regex>,
    match_only: bool,
    firing_only: bool,
) -> Result<Option<String>, String> {
    match answer::parse_alerts(body) {
        Ok(alerts) => {
            let blocking = answer::blocking(&alerts, filter, match_only, firing_only);
            Ok(answer::alerts_reason(url, &blocking))
        }
        Err(e) => Err(answer::unusable_reason(url, "GET /api/v1/alerts", &e)),
    }
}

/// The alert gate's verdict on an answer of `/api/v1/query` for `query`,
/// as [`prometheus_alerts`].
pub fn prometheus_query(url: &str, query: &str, body: &[u8]) -> Result<Option<String>, String> {
    match answer::parse_query(body) {
        Ok(series) => Ok(answer::query_reason(url, query, &series)),
        Err(e) => {
            let asked = format!("the PromQL query {}", answer::quote(query));
            Err(answer::unusable_reason(url, &asked, &e))
        }
    }
}

/// Whether `body` is Prometheus' own error answer.
pub fn prometheus_error(body: &[u8]) -> bool {
    answer::is_prometheus_error(body)
}

/// What the drain makes of PodDisruptionBudget `budget` for pods with
/// `labels`: whether it selects them, and, for each of `pods` (name, uid)
/// asking in turn against its status, whether the pod may ask (`Ok(true)`
/// with a disruption taken, `Ok(false)` without one: the status says
/// nothing yet) or waits, with the API server's words.
pub fn budget_claims(
    budget: &Value,
    labels: &BTreeMap<String, String>,
    pods: &[(String, String)],
) -> (bool, Vec<Result<bool, String>>) {
    use crate::drain::budget_watches::{Claimant, selects, take_ticket};
    let selected = selects(budget, labels);
    let index = crate::index::Index::new();
    let mut ledgers = BTreeMap::new();
    let claims = pods
        .iter()
        .map(|(name, uid)| {
            let pod = Claimant {
                name: name.clone(),
                uid: uid.clone(),
            };
            match take_ticket(budget, &pod, &index, &mut ledgers) {
                Ok(taken) => Ok(taken.is_some()),
                Err((_, words)) => Err(words),
            }
        })
        .collect();
    (selected, claims)
}

/// An endpoint of `role` for node `node` with nothing going on: no drain,
/// no shutdown lock, no FleetLock.
pub fn http_endpoint(role: Role, node: &str) -> Endpoint {
    Endpoint {
        node: node.to_string(),
        progress: crate::drain::progress::Progress::new(node),
        pods: crate::index::Index::new(),
        node_index: crate::index::Index::new(),
        views: Arc::new(Vec::new),
        inhibitor: None,
        role,
        local_requests: crate::trigger::local::LocalRequests::new(),
        metrics: crate::metrics::Metrics::new(),
        fleetlock: None,
        static_pods: crate::drain::static_path::StaticPodDir::given(PathBuf::from(
            "/nonexistent/maintd-fuzz",
        )),
        api: crate::index::ApiHealth::default(),
        listen_errors: Default::default(),
    }
}

/// Serves one connection of `endpoint` on `stream`, from `peer`, as the
/// listeners do, until the client is done.
pub async fn serve_http<S>(endpoint: Endpoint, stream: S, peer: Peer)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let permit = Arc::new(tokio::sync::Semaphore::new(1))
        .try_acquire_owned()
        .ok();
    if let Some(permit) = permit {
        crate::http::serve_connection(Arc::new(endpoint), stream, peer, permit).await;
    }
}

/// The label value a reboot group or a holder is written as on a slot
/// Lease.
pub fn lease_label_value(text: &str) -> String {
    crate::coordination::lease::label_value(text)
}

/// Reads of a slot Lease as the agent makes them, and what it writes back
/// when it takes, renews, notes a boot on, and gives back the slot:
/// `(holder, boot, taken over by holder, renewed, with boot, released)`.
#[allow(clippy::type_complexity)]
pub fn slot_lease(
    lease: &k8s_openapi::api::coordination::v1::Lease,
    holder: &str,
    boot: Option<&str>,
    now: jiff::Timestamp,
) -> (
    Option<String>,
    Option<String>,
    k8s_openapi::api::coordination::v1::Lease,
    k8s_openapi::api::coordination::v1::Lease,
    k8s_openapi::api::coordination::v1::Lease,
    k8s_openapi::api::coordination::v1::Lease,
) {
    use crate::coordination::lease as l;
    let duration = std::time::Duration::from_secs(60);
    (
        l::holder(lease).map(str::to_string),
        l::boot_of(lease).map(str::to_string),
        l::taken_over(lease, holder, duration, now),
        l::renewed(lease, now),
        l::with_boot(lease.clone(), boot),
        l::released(lease),
    )
}

/// The holder `lease` names, as the agent reads it.
pub fn lease_holder(lease: &k8s_openapi::api::coordination::v1::Lease) -> Option<&str> {
    crate::coordination::lease::holder(lease)
}

/// The boot ID a slot Lease notes, as the agent reads it.
pub fn lease_boot(lease: &k8s_openapi::api::coordination::v1::Lease) -> Option<&str> {
    crate::coordination::lease::boot_of(lease)
}

/// What the agent does with medik8s' Lease of a node, as it reads
/// `current`: the step (in words) when the node is or is not held, and
/// the Lease it writes to hold it and to give it back.
pub fn medik8s_lease(
    current: &k8s_openapi::api::coordination::v1::Lease,
    node: &str,
    node_uid: &str,
    now: jiff::Timestamp,
) -> (
    [String; 2],
    k8s_openapi::api::coordination::v1::Lease,
    k8s_openapi::api::coordination::v1::Lease,
) {
    use crate::agent::medik8s_lease as m;
    let clock = crate::coordination::LeaseClock::new();
    let steps =
        [true, false].map(|want| format!("{:?}", m::step(Some(current), &clock, want, now)));
    (
        steps,
        m::held(Some(current), node, node_uid, now),
        m::given_back(current),
    )
}

/// The holder medik8s' operator writes in its Leases.
pub const MEDIK8S_HOLDER: &str = crate::agent::medik8s_lease::HOLDER;
