//! The commands an operator runs from a workstation against the whole
//! fleet, as with kubectl: `maintd get` (every node's drain, from the
//! NodeDrain objects the agents write), `maintd drain NODE` and `maintd
//! undrain NODE` (a NodeMaintenance for that one node, made and removed).
//!
//! - [`table`]: NodeDrain objects → kubectl-style rows (pure).
//! - [`follow`]: one collection listed, then watched, change by change,
//!   resumed after a dropped watch and listed again after a 410.
//! - [`get`], [`drain`], [`wait`]: the commands.

pub mod drain;
pub mod follow;
pub mod get;
pub mod table;
pub mod wait;

use std::path::Path;
use std::time::Duration;

use crate::preflight::one_line;

/// The NodeDrain collection.
pub const NODEDRAINS: &str = crate::api::nodedrain::NODEDRAINS_PATH;
/// The NodeMaintenance collection.
pub const NODEMAINTENANCES: &str = crate::api::NODEMAINTENANCES_PATH;

/// How long `drain --wait` and `undrain --wait` wait by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);
/// The longest wait `--timeout` accepts: a week.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long one API call of these commands may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// What went wrong, in words an operator acts on. Nothing of it is a
/// panic: every answer of the API server, good or bad, ends here or in
/// output.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error(
        "no cluster credentials: no kubeconfig found ({0}); pass --kubeconfig FILE or set KUBECONFIG"
    )]
    NoCredentials(String),
    #[error("{0}")]
    Kubeconfig(String),
    #[error(
        "{what}: the API server at {server} refused the credentials (401 Unauthorized){detail}: check the kubeconfig's user (its token or certificate may have expired)"
    )]
    Unauthorized {
        what: String,
        server: String,
        detail: String,
    },
    #[error(
        "{what}: forbidden (403){detail}: the kubeconfig's user needs {need} (ask for a role that grants it)"
    )]
    Forbidden {
        what: String,
        need: String,
        detail: String,
    },
    #[error(
        "{what}: the API server at {server} does not serve {resource} (404): maintd's CRDs are not installed (kubectl apply -k deploy/, or `maintd crd | kubectl apply -f -`)"
    )]
    NoCrd {
        what: String,
        server: String,
        resource: String,
    },
    #[error("{what}: {why}")]
    Api { what: String, why: String },
    #[error(
        "{what}: the API server at {server} could not be reached for {secs}s: {why}",
        secs = .gave_up_after.as_secs()
    )]
    Unreachable {
        what: String,
        server: String,
        why: String,
        gave_up_after: Duration,
    },
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Usage(String),
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

impl FleetError {
    /// An API call's failure: a definite answer (401, 403, a missing CRD)
    /// in the words that say what to fix, anything else as the server
    /// said it. `need` is the right the call takes ("list and watch on
    /// nodedrains.maintd.io").
    pub fn from_api(what: &str, need: &str, server: &str, e: &kube::Error) -> FleetError {
        if let kube::Error::Api(s) = e {
            let detail = if s.message.trim().is_empty() {
                String::new()
            } else {
                format!(": {}", one_line(&s.message))
            };
            match s.code {
                401 => {
                    return FleetError::Unauthorized {
                        what: what.into(),
                        server: server.into(),
                        detail,
                    };
                }
                403 => {
                    return FleetError::Forbidden {
                        what: what.into(),
                        need: need.into(),
                        detail,
                    };
                }
                _ => {}
            }
        }
        FleetError::Api {
            what: what.into(),
            why: crate::preflight::describe(e, server),
        }
    }

    /// Whether retrying the call could help: no answer, or a 429 or 5xx
    /// (an API server restarting, overloaded, or behind a proxy that
    /// lost its backend).
    pub fn is_transient(e: &kube::Error) -> bool {
        match e {
            kube::Error::Api(s) => s.code == 429 || s.code >= 500,
            kube::Error::HyperError(_) | kube::Error::Service(_) => true,
            _ => false,
        }
    }
}

/// The HTTP code of an API error, if the server answered.
pub fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// A client for these commands: an explicit kubeconfig, or what kube's
/// inference finds (KUBECONFIG, ~/.kube/config, in-cluster), with connect
/// and read timeouts, every call bounded by [`CALL_TIMEOUT`], and a
/// User-Agent naming the command. Also returns the API server's address,
/// for messages.
pub async fn connect(
    kubeconfig: Option<&Path>,
    command: &str,
) -> Result<(kube::Client, String), FleetError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                FleetError::Kubeconfig(format!(
                    "reading kubeconfig {}: {}",
                    path.display(),
                    one_line(&e.to_string())
                ))
            })?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| {
                    FleetError::Kubeconfig(format!(
                        "using kubeconfig {}: {}",
                        path.display(),
                        one_line(&e.to_string())
                    ))
                })?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| FleetError::NoCredentials(one_line(&e.to_string())))?,
    };
    let server = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let mut config = crate::client::with_connection_timeouts(config);
    let ua = format!("maintd/{} ({command})", env!("CARGO_PKG_VERSION"));
    if let Ok(ua) = http::HeaderValue::from_str(&ua) {
        config.headers.push((http::header::USER_AGENT, ua));
    }
    let client = crate::client::builder(config)
        .map(|b| b.build())
        .map_err(|e| {
            FleetError::Kubeconfig(format!(
                "building the API client for {server}: {}",
                one_line(&e.to_string())
            ))
        })?;
    let client = crate::client::guarded(client, CALL_TIMEOUT, Default::default());
    Ok((client, server))
}

/// `maintd drain NODE [--wait]`: the NodeMaintenance made (or found),
/// then with `wait` a line per step until the node is drained.
pub async fn drain_node(
    kubeconfig: Option<&Path>,
    node: &str,
    reason: &str,
    wait: bool,
    timeout: Option<&str>,
) -> Result<(), FleetError> {
    let timeout = bound(timeout)?;
    let name = drain::maintenance_name(node)?;
    let (client, server) = connect(kubeconfig, "maintd drain").await?;
    let mut out = std::io::stdout();
    drain::drain(&client, &server, node, reason, &mut out).await?;
    if wait {
        wait::until_drained(&client, &server, node, &name, timeout, &mut out).await?;
    }
    Ok(())
}

/// `maintd undrain NODE [--wait]`: the NodeMaintenance of `maintd drain`
/// deleted, then with `wait` a line per step until the node takes pods.
pub async fn undrain_node(
    kubeconfig: Option<&Path>,
    node: &str,
    wait: bool,
    timeout: Option<&str>,
) -> Result<(), FleetError> {
    let timeout = bound(timeout)?;
    let name = drain::maintenance_name(node)?;
    let (client, server) = connect(kubeconfig, "maintd undrain").await?;
    let mut out = std::io::stdout();
    drain::undrain(&client, &server, node, &mut out).await?;
    if wait {
        wait::until_undrained(&client, &server, node, &name, timeout, &mut out).await?;
    }
    Ok(())
}

/// `maintd get`: until done, or with `-w` until Ctrl-C or the output is
/// closed.
pub async fn get_drains(
    kubeconfig: Option<&Path>,
    opts: &get::GetOptions,
) -> Result<(), FleetError> {
    let (client, server) = connect(kubeconfig, "maintd get").await?;
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    get::run(&client, &server, opts, &mut out, &mut err).await
}

/// `--timeout`, or [`DEFAULT_TIMEOUT`].
fn bound(timeout: Option<&str>) -> Result<Duration, FleetError> {
    timeout
        .map(parse_timeout)
        .transpose()
        .map_err(FleetError::Usage)
        .map(|t| t.unwrap_or(DEFAULT_TIMEOUT))
}

/// Parses a wait's bound as kubectl writes one: `90s`, `15m`, `1h`,
/// `1h30m`, `2d`; a bare number is seconds. Zero and more than a week are
/// refused: every wait has a bound, and one longer than a week is a
/// mistake.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = |why: &str| format!("--timeout {text:?}: {why}; write it as 90s, 15m, 1h or 1h30m");
    if t.is_empty() {
        return Err(bad("empty"));
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    let mut chars = t.chars().peekable();
    let mut any_unit = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let mut unit = c.to_string();
        if c == 'm' && chars.peek() == Some(&'s') {
            unit.push('s');
            chars.next();
        }
        let n: u64 = digits
            .parse()
            .map_err(|_| bad("a number must come before each unit"))?;
        digits.clear();
        let ms_per: u64 = match unit.as_str() {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad(&format!("{unit:?} is not a unit (ms, s, m, h, d)"))),
        };
        any_unit = true;
        total = n
            .checked_mul(ms_per)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| bad("too long"))?;
    }
    if !digits.is_empty() {
        if any_unit {
            return Err(bad("a number at the end has no unit"));
        }
        total = digits
            .parse::<u64>()
            .ok()
            .and_then(|s| s.checked_mul(1_000))
            .ok_or_else(|| bad("too long"))?;
    }
    let d = Duration::from_millis(total);
    if d.is_zero() {
        return Err(bad("a wait must have a bound above zero"));
    }
    if d > MAX_TIMEOUT {
        return Err(bad("longer than a week"));
    }
    Ok(d)
}

/// Writes to the output; a reader that went away (`| head`) is not an
/// error of the command.
pub fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_read_as_kubectl_writes_them_and_are_bounded() {
        for (text, secs) in [
            ("90s", 90),
            ("15m", 900),
            ("1h", 3600),
            ("1h30m", 5400),
            ("2d", 172_800),
            ("45", 45),
            (" 10m ", 600),
            ("1m30s", 90),
        ] {
            assert_eq!(parse_timeout(text), Ok(Duration::from_secs(secs)), "{text}");
        }
        assert_eq!(parse_timeout("1500ms"), Ok(Duration::from_millis(1500)));
        for bad in [
            "",
            "0",
            "0s",
            "h",
            "1x",
            "1h30",
            "8d",
            "-5m",
            "1.5h",
            "99999999999999999999d",
        ] {
            let e = parse_timeout(bad).unwrap_err();
            assert!(e.contains("--timeout"), "{bad}: {e}");
        }
    }

    #[test]
    fn api_refusals_say_what_to_fix() {
        let status = |code: u16, message: &str| {
            kube::Error::Api(Box::new(
                serde_json::from_value(serde_json::json!({
                    "status": "Failure", "message": message, "code": code, "reason": "",
                }))
                .unwrap(),
            ))
        };
        let e = FleetError::from_api(
            "listing NodeDrains",
            "list on nodedrains.maintd.io",
            "https://api:6443",
            &status(403, "user \"bob\" cannot list resource \"nodedrains\""),
        );
        let text = e.to_string();
        assert!(
            text.starts_with("listing NodeDrains: forbidden (403): user \"bob\" cannot list")
                && text.contains("needs list on nodedrains.maintd.io"),
            "{text}"
        );
        let e = FleetError::from_api("x", "y", "https://api:6443", &status(401, ""));
        assert!(
            e.to_string()
                .contains("at https://api:6443 refused the credentials (401")
        );
        assert!(FleetError::is_transient(&status(503, "")));
        assert!(FleetError::is_transient(&status(429, "")));
        assert!(!FleetError::is_transient(&status(403, "")));
    }
}
