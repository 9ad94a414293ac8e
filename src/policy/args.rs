//! The policy's flags (`maintd run`), named after what they do;
//! docs/policy.md maps kured's flags to them.

use std::time::Duration;

use super::alerts::AlertSettings;
use super::{Alerts, BlockingPods, Policy, Window};

/// Flags of the rules for planned drains.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PolicyArgs {
    /// Days a planned drain may start on, comma-separated (mon,tue,... or
    /// full names). Setting any --window-* flag turns the window on; unset
    /// days mean every day.
    #[arg(long, env = "MAINTD_WINDOW_DAYS")]
    pub window_days: Option<String>,
    /// When the window opens each allowed day, 24-hour HH:MM (default
    /// 00:00).
    #[arg(long, env = "MAINTD_WINDOW_START")]
    pub window_start: Option<String>,
    /// When it closes, HH:MM; earlier than the start: the next day; equal
    /// to it: after 24 hours (default 00:00, a whole day).
    #[arg(long, env = "MAINTD_WINDOW_END")]
    pub window_end: Option<String>,
    /// The window's time zone, an IANA name (default UTC).
    #[arg(long, env = "MAINTD_WINDOW_TIME_ZONE")]
    pub window_time_zone: Option<String>,
    /// A label selector (as for kubectl -l): while a pod matching it runs
    /// on the node, planned drains wait. May be given more than once.
    #[arg(long = "blocking-pod-selector", env = "MAINTD_BLOCKING_POD_SELECTOR")]
    pub blocking_pod_selectors: Vec<String>,
    /// Prometheus to ask before a planned drain starts, e.g.
    /// http://prometheus.monitoring:9090 (user:password@ in the URL is sent
    /// as basic auth). While an alert is active, or Prometheus cannot be
    /// asked, planned drains wait.
    #[arg(long, env = "MAINTD_PROMETHEUS_URL")]
    pub prometheus_url: Option<String>,
    /// A regular expression over alert names: matching alerts do not
    /// count (with --alert-filter-match-only: only they count).
    #[arg(long, env = "MAINTD_ALERT_FILTER")]
    pub alert_filter: Option<String>,
    /// --alert-filter names the only alerts that count.
    #[arg(long, env = "MAINTD_ALERT_FILTER_MATCH_ONLY")]
    pub alert_filter_match_only: bool,
    /// Only firing alerts count, not pending ones.
    #[arg(long, env = "MAINTD_ALERT_FIRING_ONLY")]
    pub alert_firing_only: bool,
    /// A PromQL query of your own: while it returns any series, planned
    /// drains wait (e.g. a cluster health check).
    #[arg(long, env = "MAINTD_ALERT_QUERY")]
    pub alert_query: Option<String>,
    /// How often Prometheus is asked while a planned drain waits, in
    /// seconds.
    #[arg(long, env = "MAINTD_ALERT_CHECK_INTERVAL", default_value_t = 60)]
    pub alert_check_interval: u64,
    /// Bound on each question to Prometheus, in seconds.
    #[arg(long, env = "MAINTD_PROMETHEUS_TIMEOUT", default_value_t = 10)]
    pub prometheus_timeout: u64,
}

/// A policy flag that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid setting {name}: {why}")]
pub struct PolicyError {
    pub name: &'static str,
    pub why: String,
}

impl PolicyArgs {
    /// The validated rules.
    pub fn into_policy(self) -> Result<Policy, PolicyError> {
        let window = if self.window_days.is_some()
            || self.window_start.is_some()
            || self.window_end.is_some()
            || self.window_time_zone.is_some()
        {
            let w = Window::parse(
                self.window_days.as_deref().unwrap_or(""),
                self.window_start.as_deref().unwrap_or("00:00"),
                self.window_end.as_deref().unwrap_or("00:00"),
                self.window_time_zone.as_deref().unwrap_or("UTC"),
            )
            .map_err(|e| PolicyError {
                name: "--window-*",
                why: e.to_string(),
            })?;
            Some(w)
        } else {
            None
        };
        let blocking = self
            .blocking_pod_selectors
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| BlockingPods::parse(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PolicyError {
                name: "--blocking-pod-selector",
                why: e.to_string(),
            })?;
        let alerts = match self.prometheus_url.filter(|u| !u.trim().is_empty()) {
            Some(url) => {
                super::alerts::check_url(&url).map_err(|why| PolicyError {
                    name: "--prometheus-url",
                    why,
                })?;
                let filter = self
                    .alert_filter
                    .filter(|f| !f.is_empty())
                    .map(|f| regex::Regex::new(&f))
                    .transpose()
                    .map_err(|e| PolicyError {
                        name: "--alert-filter",
                        why: e.to_string(),
                    })?;
                let day = 24 * 3600;
                if !(1..=day).contains(&self.alert_check_interval)
                    || !(1..=day).contains(&self.prometheus_timeout)
                {
                    return Err(PolicyError {
                        name: "--alert-check-interval/--prometheus-timeout",
                        why: format!("must be between 1 and {day} seconds (a day)"),
                    });
                }
                let settings = AlertSettings {
                    url,
                    filter,
                    match_only: self.alert_filter_match_only,
                    firing_only: self.alert_firing_only,
                    query: self.alert_query.filter(|q| !q.trim().is_empty()),
                    timeout: Duration::from_secs(self.prometheus_timeout),
                };
                Some(Alerts::new(
                    settings,
                    Duration::from_secs(self.alert_check_interval),
                ))
            }
            None if self.alert_filter.is_some() || self.alert_query.is_some() => {
                return Err(PolicyError {
                    name: "--alert-filter/--alert-query",
                    why: "given without --prometheus-url, so nothing would be asked".into(),
                });
            }
            None => None,
        };
        Ok(Policy {
            window,
            blocking,
            alerts,
        })
    }
}
