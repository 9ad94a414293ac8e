//! What `maintd run` checks before it starts, and API errors put in words a
//! person reads (kube's own Display of an API error is a Debug dump of the
//! whole `Status`).
//!
//! The checks stop the agent only on a definite answer from the API server
//! (404, 401, 403): a node booting while the control plane is away must still
//! start, take its shutdown lock and serve /healthz, so a timeout, a refused
//! connection or a 5xx is a warning and the agent starts as usual.

use std::time::Duration;

use http::Request;
use serde_json::Value;

/// deploy/'s namespace: where an agent outside a pod keeps its reboot-slot
/// Leases (the agent's default when POD_NAMESPACE is unset).
pub const DEFAULT_NAMESPACE: &str = "maintd";

/// The start-up checks together take at most this long.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// A definite "this cannot work", with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "node {node} does not exist in the cluster at {server} (404): check --node or NODE_NAME (`kubectl get nodes` lists the names)"
    )]
    NoNode { node: String, server: String },
    #[error(
        "namespace {namespace} not found (404) in the cluster at {server}: apply deploy/ first: kubectl apply -k deploy/"
    )]
    NoNamespace { namespace: String, server: String },
    #[error(
        "the API server at {server} refused maintd's credentials (401 Unauthorized){message}: check the kubeconfig, or the service account token in the pod"
    )]
    Unauthorized { server: String, message: String },
    #[error(
        "maintd may not read node {node} (403 Forbidden){message}: apply deploy/'s RBAC (kubectl apply -k deploy/) and run as its service account"
    )]
    Forbidden { node: String, message: String },
    /// Only from [`node_exists`]: `maintd plan` has nothing to go on without
    /// an answer.
    #[error("{0}")]
    Unanswered(String),
}

/// What one GET told: the object is there, is not, or no definite answer.
enum Answer {
    Found,
    Status { code: u16, message: String },
    Unsure(String),
}

async fn get(client: &kube::Client, path: &str, server: &str) -> Answer {
    let req = match Request::get(path).body(Vec::new()) {
        Ok(r) => r,
        Err(e) => return Answer::Unsure(e.to_string()),
    };
    match client.request::<Value>(req).await {
        Ok(_) => Answer::Found,
        Err(kube::Error::Api(s)) => Answer::Status {
            code: s.code,
            message: s.message.clone(),
        },
        Err(e) => Answer::Unsure(describe(&e, server)),
    }
}

/// `: <message>` when the server said more than the code.
fn detail(message: &str) -> String {
    if message.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", message.trim())
    }
}

/// Turns a non-2xx answer about `node` into a definite error, or None when
/// it is not definite (5xx, 429 and the like).
fn node_answer(code: u16, message: &str, node: &str, server: &str) -> Option<PreflightError> {
    match code {
        404 => Some(PreflightError::NoNode {
            node: node.into(),
            server: server.into(),
        }),
        401 => Some(PreflightError::Unauthorized {
            server: server.into(),
            message: detail(message),
        }),
        403 => Some(PreflightError::Forbidden {
            node: node.into(),
            message: detail(message),
        }),
        _ => None,
    }
}

/// `maintd run`'s checks: the node exists and the credentials are accepted;
/// outside a pod (`namespace_to_check`), that deploy/'s namespace exists.
/// Ok(warnings) when the agent should start; the warnings say what could not
/// be checked.
pub async fn check(
    client: &kube::Client,
    server: &str,
    node: &str,
    namespace_to_check: Option<&str>,
) -> Result<Vec<String>, PreflightError> {
    let checks = async {
        let mut warnings = Vec::new();
        match get(client, &format!("/api/v1/nodes/{node}"), server).await {
            Answer::Found => {}
            Answer::Status { code, message } => match node_answer(code, &message, node, server) {
                Some(e) => return Err(e),
                None => warnings.push(format!(
                    "could not check node {node}: the API server at {server} answered {code}{}",
                    detail(&message)
                )),
            },
            // Unreachable now: the agent starts anyway and keeps trying.
            Answer::Unsure(why) => {
                warnings.push(format!("could not check node {node}: {why}"));
                return Ok(warnings);
            }
        }
        if let Some(ns) = namespace_to_check {
            // deploy/'s RBAC does not grant reading namespaces, so a 403
            // here says nothing: only a 404 stops the agent.
            if let Answer::Status { code: 404, .. } =
                get(client, &format!("/api/v1/namespaces/{ns}"), server).await
            {
                return Err(PreflightError::NoNamespace {
                    namespace: ns.into(),
                    server: server.into(),
                });
            }
        }
        Ok(warnings)
    };
    match tokio::time::timeout(TIMEOUT, checks).await {
        Ok(r) => r,
        Err(_) => Ok(vec![format!(
            "the API server at {server} did not answer within {}s; not checked whether node {node} exists",
            TIMEOUT.as_secs()
        )]),
    }
}

/// For `maintd plan`: the node must exist, and any failure to find out is
/// an error too.
pub async fn node_exists(
    client: &kube::Client,
    server: &str,
    node: &str,
) -> Result<(), PreflightError> {
    let answer = tokio::time::timeout(
        TIMEOUT,
        get(client, &format!("/api/v1/nodes/{node}"), server),
    )
    .await
    .unwrap_or_else(|_| {
        Answer::Unsure(format!(
            "the API server at {server} did not answer within {}s",
            TIMEOUT.as_secs()
        ))
    });
    match answer {
        Answer::Found => Ok(()),
        Answer::Status { code, message } => Err(node_answer(code, &message, node, server)
            .unwrap_or_else(|| {
                PreflightError::Unanswered(format!(
                    "reading node {node}: the API server at {server} answered {code}{}",
                    detail(&message)
                ))
            })),
        Answer::Unsure(why) => Err(PreflightError::Unanswered(why)),
    }
}

/// A kube error as one line a person reads: an API error by its message and
/// code, a connection failure by its root cause and the server's address.
pub fn describe(e: &kube::Error, server: &str) -> String {
    match e {
        kube::Error::HyperError(_) | kube::Error::Service(_) => {
            format!("cannot reach the API server at {server}: {}", root_cause(e))
        }
        other => crate::client::explain(other),
    }
}

/// The innermost source of an error: "Connection refused (os error 111)"
/// rather than "client error (Connect)".
pub fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    one_line(&cause.to_string())
}

/// Joins lines, so that an error is one line of a log or a terminal.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_definite_answers_about_the_node_stop_the_agent() {
        for (code, stops) in [
            (404, true),
            (401, true),
            (403, true),
            (500, false),
            (503, false),
            (429, false),
        ] {
            assert_eq!(
                node_answer(code, "", "n", "s").is_some(),
                stops,
                "HTTP {code}"
            );
        }
    }

    #[test]
    fn an_api_error_reads_without_the_status_dump() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": "namespaces \"maintd\" not found",
            "reason": "NotFound", "code": 404
        }))
        .unwrap();
        let text = describe(&kube::Error::Api(Box::new(status)), "https://x");
        assert_eq!(text, "namespaces \"maintd\" not found (404 NotFound)");
    }
}
