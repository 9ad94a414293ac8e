//! Alert gating: a planned drain asks Prometheus before it takes a slot, and
//! again while it waits, whether the cluster is healthy enough to lose a
//! node — kured's `--prometheus-url` with its alert filters, plus a PromQL
//! query of the operator's own. Prometheus that cannot be asked holds the
//! drain (fail safe): a planned drain can wait, a drain during an outage
//! nobody can see cannot be undone.

pub(crate) mod answer;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};

use crate::outbound::{Target, root_cause, url};

use answer::{alerts_reason, blocking, parse_alerts, parse_query, query_reason, unusable_reason};

/// Largest answer read from Prometheus: far above any real alert list, and
/// a bound on what a wrong URL or a broken proxy can make the agent buffer.
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// What to ask Prometheus before a planned drain.
#[derive(Debug, Clone)]
pub struct AlertSettings {
    /// Base URL of the Prometheus HTTP API, e.g. http://prometheus.monitoring:9090
    pub url: String,
    /// Alert names to leave out (or, with match_only, the only ones that count).
    pub filter: Option<regex::Regex>,
    /// The filter names the only alerts that count, instead of those left out.
    pub match_only: bool,
    /// Count only firing alerts, not pending ones.
    pub firing_only: bool,
    /// A PromQL query whose non-empty result blocks (e.g. a cluster health check).
    pub query: Option<String>,
    /// Bound on each HTTP call.
    pub timeout: Duration,
}

/// Asks one Prometheus whether planned drains must wait. Cheap to clone: the
/// clones share one connection pool.
#[derive(Clone)]
pub struct AlertGate {
    inner: Arc<Gate>,
}

struct Gate {
    settings: AlertSettings,
    /// The URL without credentials, as reasons show it.
    shown: String,
    /// Where to send requests, or why none can be sent (the reason `check`
    /// gives every time, so a bad URL holds drains and says why).
    target: Result<Target, String>,
}

/// What one question to Prometheus came to.
enum Verdict {
    Clear,
    Blocks(String),
    /// Prometheus could not be asked, or its answer could not be read.
    CannotAsk(String),
}

impl std::fmt::Debug for AlertGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertGate")
            .field("url", &self.inner.shown)
            .field("filter", &self.inner.settings.filter)
            .field("match_only", &self.inner.settings.match_only)
            .field("firing_only", &self.inner.settings.firing_only)
            .field("query", &self.inner.settings.query)
            .finish()
    }
}

/// Whether `raw` can be used as the Prometheus URL, and why not.
pub fn check_url(raw: &str) -> Result<(), String> {
    url::parse(raw).map(|_| ())
}

impl AlertGate {
    /// A gate for `settings.url`. Never fails: a URL that cannot be used is
    /// the reason every `check` gives.
    pub fn new(settings: AlertSettings) -> AlertGate {
        let (shown, target) = match url::parse(&settings.url) {
            Ok(url) => {
                let shown = url.base.clone();
                let target = Target::new(url, settings.timeout);
                (shown, target)
            }
            Err(why) => (url::redact(settings.url.trim()), Err(why)),
        };
        AlertGate {
            inner: Arc::new(Gate {
                settings,
                shown,
                target,
            }),
        }
    }

    /// The URL asked, without credentials.
    pub fn url(&self) -> &str {
        &self.inner.shown
    }

    /// Asks Prometheus now. None: nothing blocks. Some(reason): a planned
    /// drain must wait, and why, in one line a person reads — the alerts that
    /// block, or the query and how many series it returned, or that
    /// Prometheus could not be asked and why (unreachable blocks).
    pub async fn check(&self) -> Option<String> {
        let gate = &self.inner;
        let target = match &gate.target {
            Ok(target) => target,
            Err(why) => return Some(format!("cannot ask Prometheus: {why}")),
        };
        let query = async {
            match &gate.settings.query {
                Some(query) => gate.query_verdict(target, query).await,
                None => Verdict::Clear,
            }
        };
        let (alerts, query) = tokio::join!(gate.alerts_verdict(target), query);
        let reasons: Vec<String> = match (alerts, query) {
            // Both failing is almost always one cause (Prometheus is down):
            // say it once.
            (Verdict::CannotAsk(a), Verdict::CannotAsk(_)) => vec![a],
            (a, q) => [a, q]
                .into_iter()
                .filter_map(|v| match v {
                    Verdict::Clear => None,
                    Verdict::Blocks(r) | Verdict::CannotAsk(r) => Some(r),
                })
                .collect(),
        };
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }
}

impl Gate {
    async fn alerts_verdict(&self, target: &Target) -> Verdict {
        let path = "/api/v1/alerts";
        let body = match self.get(target, path).await {
            Ok(body) => body,
            Err(reason) => return Verdict::CannotAsk(reason),
        };
        match parse_alerts(&body) {
            Ok(alerts) => {
                let s = &self.settings;
                let blocking = blocking(&alerts, s.filter.as_ref(), s.match_only, s.firing_only);
                match alerts_reason(&self.shown, &blocking) {
                    Some(reason) => Verdict::Blocks(reason),
                    None => Verdict::Clear,
                }
            }
            Err(e) => Verdict::CannotAsk(unusable_reason(&self.shown, &format!("GET {path}"), &e)),
        }
    }

    async fn query_verdict(&self, target: &Target, query: &str) -> Verdict {
        let path = format!("/api/v1/query?query={}", url::encode(query));
        let body = match self.get(target, &path).await {
            Ok(body) => body,
            Err(reason) => return Verdict::CannotAsk(reason),
        };
        match parse_query(&body) {
            Ok(series) => match query_reason(&self.shown, query, &series) {
                Some(reason) => Verdict::Blocks(reason),
                None => Verdict::Clear,
            },
            Err(e) => {
                let asked = format!("the PromQL query {}", answer::quote(query));
                Verdict::CannotAsk(unusable_reason(&self.shown, &asked, &e))
            }
        }
    }

    /// GET `path` (with its query string) under the base URL: the body of a
    /// Prometheus answer, or the reason there is none. An answer with an
    /// HTTP error status is still returned when it is Prometheus' own error
    /// JSON, which says more than the status.
    async fn get(&self, target: &Target, path: &str) -> Result<Bytes, String> {
        let asked = format!("GET {}", path.split('?').next().unwrap_or(path));
        let cannot = |why: String| format!("Prometheus at {} {why}", self.shown);
        let mut request = http::Request::get(format!("{}{path}", target.base))
            .header(http::header::ACCEPT, "application/json");
        if let Some(authorization) = &target.authorization {
            request = request.header(http::header::AUTHORIZATION, authorization.clone());
        }
        let request = request
            .body(Full::new(Bytes::new()))
            .map_err(|e| cannot(format!("cannot be asked: not a valid request URL ({e})")))?;
        let timeout = self.settings.timeout;
        let exchange = async {
            let response = target.send(request).await.map_err(|e| {
                cannot(format!(
                    "could not be reached ({}); planned drains wait until it answers",
                    root_cause(&e)
                ))
            })?;
            let status = response.status();
            // A redirect is not followed (the base URL should be Prometheus'
            // own), but where it points tells the operator the right URL.
            let location = response
                .headers()
                .get(http::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .map(|l| format!(" (to {})", answer::shorten(l, 160)))
                .unwrap_or_default();
            let body = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| {
                    if e.downcast_ref::<LengthLimitError>().is_some() {
                        cannot(format!(
                            "answered {asked} with more than {} MiB; not read",
                            MAX_ANSWER / (1024 * 1024)
                        ))
                    } else {
                        cannot(format!(
                            "broke off its answer to {asked} ({})",
                            root_cause(&*e)
                        ))
                    }
                })?
                .to_bytes();
            if status.is_success() || answer::is_prometheus_error(&body) {
                return Ok(body);
            }
            let said = match answer::shorten(&String::from_utf8_lossy(&body), 160) {
                said if said.is_empty() => said,
                said => format!(": {said}"),
            };
            Err(cannot(format!(
                "answered {asked} with HTTP {status}{location}{said}"
            )))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(cannot(format!(
                    "did not answer {asked} within {timeout:?}; planned drains wait until it answers"
                )))
            })
    }
}
