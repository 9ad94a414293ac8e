//! Prometheus' answers, read and judged. No I/O and no clock, so every shape
//! an answer can take is a cheap unit test.

use std::collections::BTreeMap;

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

/// How many alert names one reason lists before it says "and N more".
const NAMES_SHOWN: usize = 5;
/// Longest query or series text a reason quotes: it is one line in a status.
const QUOTE_MAX: usize = 160;
/// Longest of Prometheus' own words (an error, an alert's name or state) a
/// reason repeats.
const SAID_MAX: usize = 300;

/// The state of one alert instance, as `/api/v1/alerts` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AlertState {
    Firing,
    Pending,
    Inactive,
    /// A state this code does not know (a newer Prometheus): it counts, since
    /// it may well be firing.
    Other(String),
}

impl AlertState {
    fn parse(s: &str) -> AlertState {
        match s {
            "firing" => AlertState::Firing,
            "pending" => AlertState::Pending,
            "inactive" => AlertState::Inactive,
            other => AlertState::Other(other.to_string()),
        }
    }
}

/// One alert instance: its name and state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActiveAlert {
    pub name: String,
    pub state: AlertState,
}

/// The series a query returned: how many, and the first one to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QuerySeries {
    pub count: usize,
    pub first: Option<String>,
}

/// Why an answer could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AnswerError {
    /// Not JSON, or JSON of another shape: the URL points elsewhere.
    #[error("not Prometheus' JSON ({0})")]
    NotPrometheus(String),
    /// Prometheus' own error answer (a query it cannot run, a timeout).
    #[error("{error_type}: {error}")]
    Rejected { error_type: String, error: String },
    /// A query whose result is a scalar or a string, which is never empty.
    #[error("a {0}, not series")]
    NotSeries(String),
}

/// The reason an unusable answer holds drains. `asked` is what was asked:
/// "GET /api/v1/alerts", or the query quoted.
pub(crate) fn unusable_reason(url: &str, asked: &str, e: &AnswerError) -> String {
    // Prometheus' words (or a decoder's, quoting the answer) go into the
    // status and an Event: each is cut to a readable length.
    let said = |text: &str| shorten(text, SAID_MAX);
    match e {
        AnswerError::NotPrometheus(why) => format!(
            "Prometheus at {url} answered {asked} with something that is not Prometheus' JSON ({}): is the URL the Prometheus server's own (the one its web UI is at)?",
            said(why)
        ),
        AnswerError::Rejected { error_type, error } => {
            format!(
                "Prometheus at {url} answered {asked} with an error: {}: {}",
                said(error_type),
                said(error)
            )
        }
        AnswerError::NotSeries(kind) => format!(
            "{asked} returns a {}, not series, so it cannot tell drains to wait or go: write a query that returns series only while drains must wait, e.g. `up{{job=\"etcd\"}} == 0`",
            said(kind)
        ),
    }
}

/// The envelope of every Prometheus API answer.
#[derive(Deserialize)]
struct Envelope {
    status: Option<String>,
    data: Option<Value>,
    #[serde(rename = "errorType")]
    error_type: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
struct AlertsData {
    alerts: Vec<RawAlert>,
}

#[derive(Deserialize)]
struct RawAlert {
    #[serde(default)]
    labels: BTreeMap<String, String>,
    state: String,
}

#[derive(Deserialize)]
struct QueryData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Value,
}

#[derive(Deserialize)]
struct RawSeries {
    #[serde(default)]
    metric: BTreeMap<String, String>,
}

/// The `data` of a successful answer, or why there is none.
fn data(body: &[u8]) -> Result<Value, AnswerError> {
    let not_prometheus = |why: String| AnswerError::NotPrometheus(why);
    let envelope: Envelope =
        serde_json::from_slice(body).map_err(|e| not_prometheus(e.to_string()))?;
    match envelope.status.as_deref() {
        Some("success") => envelope
            .data
            .ok_or_else(|| not_prometheus("\"status\": \"success\" without \"data\"".into())),
        Some("error") => Err(AnswerError::Rejected {
            error_type: one_line(envelope.error_type.as_deref().unwrap_or("unknown")),
            error: one_line(envelope.error.as_deref().unwrap_or("no message")),
        }),
        Some(other) => Err(not_prometheus(format!(
            "\"status\": {}",
            quote(&one_line(other))
        ))),
        None => Err(not_prometheus("no \"status\"".into())),
    }
}

/// Whether `body` is Prometheus' own error answer (sent with 400, 422, 503),
/// which says more than the HTTP status does.
pub(crate) fn is_prometheus_error(body: &[u8]) -> bool {
    matches!(data(body), Err(AnswerError::Rejected { .. }))
}

/// Reads an answer of `GET /api/v1/alerts`.
pub(crate) fn parse_alerts(body: &[u8]) -> Result<Vec<ActiveAlert>, AnswerError> {
    let data: AlertsData = serde_json::from_value(data(body)?)
        .map_err(|e| AnswerError::NotPrometheus(format!("data: {e}")))?;
    Ok(data
        .alerts
        .into_iter()
        .map(|a| ActiveAlert {
            // Prometheus always sets alertname; an alert without one still
            // counts, under a name that says what is missing.
            name: a
                .labels
                .get("alertname")
                .cloned()
                .unwrap_or_else(|| "<no alertname>".into()),
            state: AlertState::parse(&a.state),
        })
        .collect())
}

/// Reads an answer of `GET /api/v1/query`. Only vectors and matrices have
/// series; a scalar or a string always "has a result", so it cannot gate.
pub(crate) fn parse_query(body: &[u8]) -> Result<QuerySeries, AnswerError> {
    let data: QueryData = serde_json::from_value(data(body)?)
        .map_err(|e| AnswerError::NotPrometheus(format!("data: {e}")))?;
    if data.result_type != "vector" && data.result_type != "matrix" {
        return Err(AnswerError::NotSeries(one_line(&data.result_type)));
    }
    let series: Vec<RawSeries> = serde_json::from_value(data.result)
        .map_err(|e| AnswerError::NotPrometheus(format!("data.result: {e}")))?;
    Ok(QuerySeries {
        count: series.len(),
        first: series.first().map(|s| series_text(&s.metric)),
    })
}

/// The blocking alerts of one name, for a reason string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlockingAlert {
    pub name: String,
    /// "firing" when any instance fires, else the state of the instances.
    pub state: String,
    pub instances: usize,
}

/// Which alerts hold planned drains, kured's way: without a filter, every
/// active alert; with one, those whose name does not match it, or with
/// `match_only` only those whose name matches. `firing_only` leaves pending
/// alerts out. One entry per alert name, firing ones first.
pub(crate) fn blocking(
    alerts: &[ActiveAlert],
    filter: Option<&Regex>,
    match_only: bool,
    firing_only: bool,
) -> Vec<BlockingAlert> {
    let mut by_name: BTreeMap<&str, (String, usize)> = BTreeMap::new();
    for alert in alerts {
        let state = match &alert.state {
            AlertState::Inactive => continue,
            AlertState::Pending if firing_only => continue,
            AlertState::Firing => "firing".to_string(),
            AlertState::Pending => "pending".to_string(),
            AlertState::Other(s) => shorten(s, QUOTE_MAX),
        };
        if let Some(filter) = filter
            && filter.is_match(&alert.name) != match_only
        {
            continue;
        }
        let entry = by_name
            .entry(alert.name.as_str())
            .or_insert_with(|| (state.clone(), 0));
        entry.1 += 1;
        if state == "firing" {
            entry.0 = state;
        }
    }
    let mut out: Vec<BlockingAlert> = by_name
        .into_iter()
        .map(|(name, (state, instances))| BlockingAlert {
            name: name.to_string(),
            state,
            instances,
        })
        .collect();
    // Stable: names stay in order within each group.
    out.sort_by_key(|a| a.state != "firing");
    out
}

/// "2 alerts active in Prometheus at URL: A (firing), B (pending)".
pub(crate) fn alerts_reason(url: &str, alerts: &[BlockingAlert]) -> Option<String> {
    if alerts.is_empty() {
        return None;
    }
    let shown: Vec<String> = alerts
        .iter()
        .take(NAMES_SHOWN)
        .map(|a| match a.instances {
            1 => format!("{} ({})", shorten(&a.name, QUOTE_MAX), a.state),
            n => format!(
                "{} ({}, {n} instances)",
                shorten(&a.name, QUOTE_MAX),
                a.state
            ),
        })
        .collect();
    let more = match alerts.len().saturating_sub(NAMES_SHOWN) {
        0 => String::new(),
        n => format!(", and {n} more"),
    };
    let count = match alerts.len() {
        1 => "1 alert".to_string(),
        n => format!("{n} alerts"),
    };
    Some(format!(
        "{count} active in Prometheus at {url}: {}{more}",
        shown.join(", ")
    ))
}

/// "the PromQL query `q` returns 3 series in Prometheus at URL (first: ...)".
pub(crate) fn query_reason(url: &str, query: &str, series: &QuerySeries) -> Option<String> {
    if series.count == 0 {
        return None;
    }
    let first = series
        .first
        .as_deref()
        .map(|s| format!(" (first: {s})"))
        .unwrap_or_default();
    Some(format!(
        "the PromQL query {} returns {} series in Prometheus at {url}{first}; planned drains wait until it returns none",
        quote(query),
        series.count
    ))
}

/// A series as PromQL writes it: `name{label="value",...}`, shortened.
fn series_text(metric: &BTreeMap<String, String>) -> String {
    let name = metric.get("__name__").map(String::as_str).unwrap_or("");
    let labels: Vec<String> = metric
        .iter()
        .filter(|(k, _)| k.as_str() != "__name__")
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    shorten(&format!("{name}{{{}}}", labels.join(",")), QUOTE_MAX)
}

/// A query quoted for a one-line reason.
pub(crate) fn quote(text: &str) -> String {
    format!("`{}`", shorten(text, QUOTE_MAX))
}

pub(crate) use crate::outbound::{one_line, shorten};
