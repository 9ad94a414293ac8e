//! FleetLock, the protocol Zincati (Fedora CoreOS' updater) speaks to ask
//! for a reboot slot: request parsing and response bodies, and the two
//! operations, with no HTTP server of its own (http.rs serves
//! `POST /v1/pre-reboot` and `POST /v1/steady-state` on the local listener
//! and hands the headers and body here).
//!
//! Protocol: <https://coreos.github.io/zincati/development/fleetlock/protocol/>.
//! Requests carry the header `fleet-lock-protocol: true` and a body
//! `{"client_params": {"id": "...", "group": "..."}}`; 200 means success,
//! anything else failure, with an error body `{"kind", "value"}` whose
//! kinds are few and fixed (Zincati counts them in metrics).
//!
//! maintd adds the drain: pre-reboot takes a slot for the group, then asks
//! for the node to be drained, and answers success only once it is — until
//! then `drain_in_progress`, and Zincati retries. steady-state undoes the
//! drain and gives the slot back.

use std::future::Future;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::coordination::{Acquisition, CoordinationError, RebootSlots, SlotGuard};

/// The header every FleetLock request carries.
pub const PROTOCOL_HEADER: &str = "fleet-lock-protocol";

/// Largest request body worth reading; a FleetLock body is ~100 bytes.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Error kinds maintd answers with (a small, fixed set, as the protocol asks).
pub mod kind {
    /// Success (200).
    pub const SUCCESS: &str = "success";
    /// The `fleet-lock-protocol: true` header is missing or not `true`.
    pub const MISSING_HEADER: &str = "missing_fleetlock_header";
    /// The body is not the protocol's JSON, or `id`/`group` is empty/invalid.
    pub const BAD_REQUEST: &str = "bad_request";
    /// Every reboot slot of the group is held (the protocol's own example).
    pub const SEMAPHORE_FULL: &str = "failed_lock_semaphore_full";
    /// A control-plane node waits: another control-plane node is NotReady.
    pub const QUORUM_GUARD: &str = "failed_lock_quorum_guard";
    /// The slot is held and the node is draining; retry.
    pub const DRAIN_IN_PROGRESS: &str = "drain_in_progress";
    /// Taking the slot or starting the drain failed.
    pub const FAILED_LOCK: &str = "failed_lock";
    /// Undoing the drain or releasing the slot failed.
    pub const FAILED_UNLOCK: &str = "failed_unlock";
    /// steady-state from a node that has not booted since its pre-reboot:
    /// it stays drained and keeps its slot (until the reboot timeout).
    pub const NOT_REBOOTED: &str = "failed_unlock_not_rebooted";
    /// The agent's policy holds planned drains back now (outside the
    /// maintenance window, a blocking pod runs, an alert fires); `value`
    /// says which and until when.
    pub const POLICY: &str = "failed_lock_policy";
    /// The agent has not seen its own Node yet, so it cannot tell which
    /// slots the node may take (a control-plane node takes its own, behind
    /// the quorum guard); retry.
    pub const NODE_UNKNOWN: &str = "failed_lock_node_unknown";
}

/// The `client_params` of a request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct ClientParams {
    /// The client's identifier (Zincati: an app-specific machine id).
    pub id: String,
    /// The reboot group, `^[a-zA-Z0-9.-]+$`.
    pub group: String,
}

#[derive(Deserialize)]
struct Body {
    client_params: ClientParams,
}

/// An answer: HTTP status and a JSON body `{"kind", "value"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reply {
    #[serde(skip)]
    pub status: u16,
    pub kind: String,
    pub value: String,
}

impl Reply {
    fn new(status: u16, kind: &str, value: impl Into<String>) -> Self {
        Reply {
            status,
            kind: kind.to_string(),
            value: value.into(),
        }
    }

    /// The JSON body to send.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Whether this is the protocol's success (200).
    pub fn is_success(&self) -> bool {
        self.status == 200
    }
}

/// Checks the header and parses the body. The error is the reply to send.
pub fn parse_request(headers: &http::HeaderMap, body: &[u8]) -> Result<ClientParams, Reply> {
    let header_ok = headers
        .get(PROTOCOL_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if !header_ok {
        return Err(Reply::new(
            400,
            kind::MISSING_HEADER,
            "the header fleet-lock-protocol must be set to true",
        ));
    }
    if body.len() > MAX_BODY_BYTES {
        return Err(Reply::new(
            400,
            kind::BAD_REQUEST,
            "the request body is too large",
        ));
    }
    let parsed: Body = serde_json::from_slice(body).map_err(|e| {
        Reply::new(
            400,
            kind::BAD_REQUEST,
            format!("the body is not {{\"client_params\": {{\"id\": ..., \"group\": ...}}}}: {e}"),
        )
    })?;
    let params = parsed.client_params;
    if params.id.trim().is_empty() {
        return Err(Reply::new(
            400,
            kind::BAD_REQUEST,
            "client_params.id is empty",
        ));
    }
    let group_ok = !params.group.is_empty()
        && params
            .group
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    if !group_ok {
        return Err(Reply::new(
            400,
            kind::BAD_REQUEST,
            "client_params.group must match ^[a-zA-Z0-9.-]+$",
        ));
    }
    if params.group.len() > MAX_GROUP_LEN {
        return Err(Reply::new(
            400,
            kind::BAD_REQUEST,
            format!(
                "client_params.group is {} characters long; at most {MAX_GROUP_LEN} are allowed: it labels the group's reboot slot Leases",
                params.group.len()
            ),
        ));
    }
    if !names_leases(&params.group) {
        return Err(Reply::new(
            400,
            kind::BAD_REQUEST,
            "client_params.group must start and end with a letter or digit, with no dot next to another dot or a dash: it names the group's reboot slot Leases",
        ));
    }
    Ok(params)
}

/// The longest reboot group: it is a label value on its slots' Leases.
pub const MAX_GROUP_LEN: usize = 63;

/// Whether `group` (of `[a-zA-Z0-9.-]`) makes Lease names and label values
/// Kubernetes accepts: each dot-separated part of a name starts and ends
/// with a letter or digit, and so does a label value.
fn names_leases(group: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    alnum(group.chars().next())
        && alnum(group.chars().last())
        && !["..", ".-", "-."].iter().any(|p| group.contains(p))
}

/// Where the node's drain stands after asking for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainState {
    /// Every pod the plan drains is gone: the node may reboot.
    Drained,
    /// Still draining; `detail` says where (stage, blockers).
    InProgress { detail: String },
}

/// The agent's side: start (or continue) a drain for a reason and say where
/// it stands, and undo it. Both are idempotent; FleetLock calls them on every
/// retry.
pub trait DrainControl: Send + Sync {
    /// Requests the drain (idempotent) and reports its state.
    fn request_drain(
        &self,
        reason: &str,
    ) -> impl Future<Output = Result<DrainState, String>> + Send;
    /// Ends the FleetLock drain request: untaint, uncordon, restore.
    fn undo(&self) -> impl Future<Output = Result<(), String>> + Send;
    /// Why a planned drain may not start now (the agent's policy), if
    /// anything holds it back. Asked before a slot is taken.
    fn hold(&self) -> Option<String> {
        None
    }
    /// The node's boot ID now (`status.nodeInfo.bootID`), if known.
    fn boot_id(&self) -> Option<String> {
        None
    }
    /// How long after its pre-reboot a node that has not booted again is
    /// still refused its steady-state.
    fn reboot_timeout(&self) -> std::time::Duration {
        DEFAULT_REBOOT_TIMEOUT
    }
    /// Says that a slot is given back without a reboot (a Warning).
    fn overdue(&self, _message: String) {}
}

/// How long a node that has not booted since its pre-reboot keeps its
/// slot and drain, unless the agent is told otherwise.
pub const DEFAULT_REBOOT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Picks the slots for a request's group, when the request comes (the
/// agent maps a control-plane node to its own group here, with
/// [`RebootSlots::for_node`]); Err says why it cannot tell yet (the agent
/// has not seen its Node), and nothing is taken.
pub type SlotsFor = Box<dyn Fn(&str) -> Result<RebootSlots, String> + Send + Sync>;

/// FleetLock for this node: holds the slot between pre-reboot and
/// steady-state and keeps it renewed.
pub struct FleetLock<D> {
    node: String,
    slots_for: SlotsFor,
    drain: D,
    held: tokio::sync::Mutex<Option<SlotGuard>>,
    stop: CancellationToken,
}

impl<D: DrainControl> FleetLock<D> {
    /// FleetLock for `node`; `stop` ends slot renewals (agent shutdown).
    pub fn new(node: &str, slots_for: SlotsFor, drain: D, stop: CancellationToken) -> Self {
        FleetLock {
            node: node.to_string(),
            slots_for,
            drain,
            held: tokio::sync::Mutex::new(None),
            stop,
        }
    }

    /// `POST /v1/pre-reboot`: take a slot, then drain; success once drained.
    pub async fn pre_reboot(&self, headers: &http::HeaderMap, body: &[u8]) -> Reply {
        let params = match parse_request(headers, body) {
            Ok(p) => p,
            Err(reply) => return reply,
        };
        let slots = match (self.slots_for)(&params.group) {
            Ok(slots) => slots,
            Err(why) => return Reply::new(503, kind::NODE_UNKNOWN, why),
        };
        let mut held = self.held.lock().await;
        let keep = held
            .as_ref()
            .is_some_and(|g| g.group() == slots.group() && g.still_held());
        if !keep {
            // Nothing is taken while the policy says no.
            if let Some(why) = self.drain.hold() {
                return Reply::new(409, kind::POLICY, why);
            }
            if let Some(old) = held.take() {
                // A lost slot, or one of another group: give it back first.
                let _ = old.release().await;
            }
            match slots
                .acquire_with_renewal(&self.node, self.stop.clone())
                .await
            {
                Ok(Acquisition::Acquired(guard)) => *held = Some(guard),
                Ok(Acquisition::Full { holders }) => {
                    let names: Vec<String> = holders.into_iter().map(|h| h.holder).collect();
                    return Reply::new(
                        409,
                        kind::SEMAPHORE_FULL,
                        format!(
                            "all reboot slots of group {} are held (by {}); waiting for one",
                            slots.group(),
                            if names.is_empty() {
                                "other nodes".into()
                            } else {
                                names.join(", ")
                            }
                        ),
                    );
                }
                Ok(Acquisition::QuorumBlocked { not_ready })
                | Err(CoordinationError::QuorumBlocked { not_ready }) => {
                    return Reply::new(
                        409,
                        kind::QUORUM_GUARD,
                        format!(
                            "control-plane nodes not Ready: {}; this control-plane node waits until they are",
                            not_ready.join(", ")
                        ),
                    );
                }
                Err(e) => return Reply::new(500, kind::FAILED_LOCK, e.to_string()),
            }
        }
        let reason = format!(
            "FleetLock pre-reboot from {} (group {})",
            params.id, params.group
        );
        match self.drain.request_drain(&reason).await {
            Ok(DrainState::Drained) => Reply::new(
                200,
                kind::SUCCESS,
                format!(
                    "node {} is drained and holds a reboot slot; reboot",
                    self.node
                ),
            ),
            Ok(DrainState::InProgress { detail }) => Reply::new(
                503,
                kind::DRAIN_IN_PROGRESS,
                format!(
                    "node {} holds a reboot slot and is draining: {detail}",
                    self.node
                ),
            ),
            Err(e) => Reply::new(500, kind::FAILED_LOCK, format!("starting the drain: {e}")),
        }
    }

    /// `POST /v1/steady-state`: undo the drain, then give the slot back.
    /// Idempotent: with nothing held it answers success. After a reboot the
    /// agent holds no guard, so the slot is released by name.
    pub async fn steady_state(&self, headers: &http::HeaderMap, body: &[u8]) -> Reply {
        let params = match parse_request(headers, body) {
            Ok(p) => p,
            Err(reply) => return reply,
        };
        let mut held = self.held.lock().await;
        let slots = match (self.slots_for)(&params.group) {
            Ok(slots) => slots,
            Err(why) => return Reply::new(503, kind::NODE_UNKNOWN, why),
        };
        // Honoured once the node booted since its pre-reboot; before that,
        // only past the reboot timeout, and said. A boot ID not known (not
        // noted when the slot was taken, or not reported now) proves no
        // reboot: the request waits as if the node had not rebooted.
        let held_at = match slots.held_at(&self.node).await {
            Ok(h) => h,
            Err(e) => {
                return Reply::new(
                    503,
                    kind::FAILED_UNLOCK,
                    format!("reading this node's reboot slot: {e}"),
                );
            }
        };
        let mut without_reboot = None;
        let now = self.drain.boot_id();
        if let Some((then, since)) = held_at
            && !matches!((&then, &now), (Some(t), Some(n)) if t != n)
        {
            let boot = match (&then, &now) {
                (Some(t), Some(n)) if t == n => format!("boot ID still {n}"),
                _ => "its boot ID, then or now, is not known".to_string(),
            };
            let timeout = self.drain.reboot_timeout();
            let until = since.and_then(|t| {
                t.checked_add(jiff::SignedDuration::try_from(timeout).ok()?)
                    .ok()
            });
            match until {
                Some(until) if jiff::Timestamp::now() < until => {
                    return Reply::new(
                        409,
                        kind::NOT_REBOOTED,
                        format!(
                            "node {} has not been seen to boot since its pre-reboot ({boot}): it stays drained and keeps its reboot slot until it has, or until {until}",
                            self.node
                        ),
                    );
                }
                _ => {
                    let message = format!(
                        "FleetLock steady-state from node {} without a reboot seen ({boot}) more than {} s after its pre-reboot: the drain is undone and the reboot slot given back",
                        self.node,
                        timeout.as_secs()
                    );
                    self.drain.overdue(message.clone());
                    without_reboot = Some(message);
                }
            }
        }
        // The slot stays held until the drain is undone, so that the next
        // node does not start while this one is still cordoned.
        if let Err(e) = self.drain.undo().await {
            return Reply::new(500, kind::FAILED_UNLOCK, format!("undoing the drain: {e}"));
        }
        let released = match held.take() {
            Some(guard) => guard.release().await,
            None => slots.release(&self.node).await,
        };
        match released {
            Ok(_) => Reply::new(
                200,
                kind::SUCCESS,
                match without_reboot {
                    Some(why) => format!("node {} holds no reboot slot; {why}", self.node),
                    None => format!("node {} holds no reboot slot", self.node),
                },
            ),
            Err(e) => Reply::new(500, kind::FAILED_UNLOCK, e.to_string()),
        }
    }

    /// After an agent restart (the reboot FleetLock drained for), resumes
    /// renewing the slot this node still holds in `group`, so the hold does
    /// not lapse before Zincati's steady-state releases it. The groups come
    /// from [`groups_held_by`](crate::coordination::groups_held_by).
    /// Returns whether a slot was resumed.
    pub async fn resume(&self, group: &str) -> Result<bool, CoordinationError> {
        let slots = (self.slots_for)(group).map_err(CoordinationError::NodeUnknown)?;
        if !slots
            .holders(&self.node)
            .await?
            .iter()
            .any(|h| h.holder == self.node)
        {
            return Ok(false);
        }
        let mut held = self.held.lock().await;
        let acquired = slots
            .acquire_with_renewal(&self.node, self.stop.clone())
            .await?;
        if let Acquisition::Acquired(guard) = acquired {
            *held = Some(guard);
            return Ok(true);
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: Option<&str>) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        if let Some(v) = value {
            h.insert(PROTOCOL_HEADER, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn parsing() {
        let good =
            br#"{"client_params": {"id": "c988d2509fdf4cdcbed39037c56406fb", "group": "default"}}"#;
        assert_eq!(
            parse_request(&headers(Some("true")), good),
            Ok(ClientParams {
                id: "c988d2509fdf4cdcbed39037c56406fb".into(),
                group: "default".into()
            })
        );
        let cases: [(Option<&str>, &[u8], &str); 9] = [
            (None, good, kind::MISSING_HEADER),
            (Some("false"), good, kind::MISSING_HEADER),
            (Some("true"), b"{not json", kind::BAD_REQUEST),
            (Some("true"), b"{}", kind::BAD_REQUEST),
            (
                Some("true"),
                br#"{"client_params": {"group": "g"}}"#,
                kind::BAD_REQUEST,
            ),
            (
                Some("true"),
                br#"{"client_params": {"id": "", "group": "g"}}"#,
                kind::BAD_REQUEST,
            ),
            (
                Some("true"),
                br#"{"client_params": {"id": "a", "group": ""}}"#,
                kind::BAD_REQUEST,
            ),
            (
                Some("true"),
                br#"{"client_params": {"id": "a", "group": "a b"}}"#,
                kind::BAD_REQUEST,
            ),
            (Some("true"), &[b' '; MAX_BODY_BYTES + 1], kind::BAD_REQUEST),
        ];
        for (i, (header, body, want)) in cases.into_iter().enumerate() {
            let reply = parse_request(&headers(header), body).unwrap_err();
            assert_eq!((reply.status, reply.kind.as_str()), (400, want), "case {i}");
            assert!(!reply.value.is_empty(), "case {i}: the value explains");
        }
    }

    #[test]
    fn a_group_that_cannot_name_its_slot_leases_is_refused() {
        let body = |group: &str| {
            serde_json::json!({"client_params": {"id": "a", "group": group}}).to_string()
        };
        for group in [
            "a..b",
            ".a",
            "a.",
            "-a",
            "a-",
            "a.-b",
            "a-.b",
            &"g".repeat(MAX_GROUP_LEN + 1),
        ] {
            let reply =
                parse_request(&headers(Some("true")), body(group).as_bytes()).expect_err(group);
            assert_eq!(reply.kind, kind::BAD_REQUEST, "{group}");
            assert!(
                reply.value.contains("client_params.group"),
                "{}",
                reply.value
            );
        }
        for group in ["default", "Workers.eu-1", "a", &"g".repeat(MAX_GROUP_LEN)] {
            let params = parse_request(&headers(Some("true")), body(group).as_bytes()).unwrap();
            let name = crate::coordination::slot_name(&params.group, 12);
            assert!(
                name.split('.').all(|part| {
                    part.starts_with(|c: char| c.is_ascii_alphanumeric())
                        && part.ends_with(|c: char| c.is_ascii_alphanumeric())
                }),
                "{name}"
            );
            assert_eq!(
                crate::coordination::lease::label_value(&params.group),
                params.group
            );
        }
    }

    #[test]
    fn error_body_is_kind_and_value() {
        let reply = Reply::new(409, kind::SEMAPHORE_FULL, "full");
        let body: serde_json::Value = serde_json::from_slice(&reply.body()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"kind": "failed_lock_semaphore_full", "value": "full"})
        );
    }
}
