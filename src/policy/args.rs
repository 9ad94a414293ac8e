//! The policy's flags (`maintd run`), named after what they do; the
//! README maps kured's flags to them.

use super::{BlockingPods, Policy, Window};

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
        Ok(Policy { window, blocking })
    }
}
