//! Maintenance windows: the days and hours in which a planned drain may
//! start, in a named time zone (kured's `--reboot-days`, `--start-time`,
//! `--end-time`, `--time-zone`). Pure: no clock is read here.
//!
//! A window opens on each allowed day at its start time and closes at its
//! end time, that day if the end is later, else the next day: "sat,sun
//! 22:00–04:00" includes Sunday 01:00 and Monday 03:00. A start equal to
//! the end is the whole day.

use jiff::civil::{Time, Weekday};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan, Zoned};

/// When planned drains may start.
#[derive(Debug, Clone)]
pub struct Window {
    /// Allowed days, Monday first.
    days: [bool; 7],
    start: Time,
    end: Time,
    tz: TimeZone,
    /// As given, for messages: "mon,tue 02:00-05:00 Europe/Berlin".
    text: String,
}

/// What is wrong with a window setting.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WindowError {
    #[error(
        "{0:?} is not a day of the week; use mon, tue, wed, thu, fri, sat, sun (or full names)"
    )]
    Day(String),
    #[error("{0:?} is not a time of day; use 24-hour HH:MM (or HH:MM:SS), e.g. 02:00")]
    Time(String),
    #[error(
        "{0:?} is not a time zone this agent knows; use an IANA name such as Europe/Berlin or UTC"
    )]
    Zone(String),
}

fn weekday(s: &str) -> Result<Weekday, WindowError> {
    let w = match s.trim().to_ascii_lowercase().as_str() {
        "mo" | "mon" | "monday" => Weekday::Monday,
        "tu" | "tue" | "tuesday" => Weekday::Tuesday,
        "we" | "wed" | "wednesday" => Weekday::Wednesday,
        "th" | "thu" | "thursday" => Weekday::Thursday,
        "fr" | "fri" | "friday" => Weekday::Friday,
        "sa" | "sat" | "saturday" => Weekday::Saturday,
        "su" | "sun" | "sunday" => Weekday::Sunday,
        _ => return Err(WindowError::Day(s.to_string())),
    };
    Ok(w)
}

fn time_of_day(s: &str) -> Result<Time, WindowError> {
    let t = s.trim();
    // "24:00" is the end of the day, as people write it.
    if t == "24:00" || t == "24:00:00" {
        return Ok(Time::MAX);
    }
    let parts: Vec<&str> = t.split(':').collect();
    let num = |p: &str, max: i8| p.parse::<i8>().ok().filter(|v| (0..=max).contains(v));
    let parsed = match parts[..] {
        [h, m] if h.len() <= 2 && m.len() == 2 => {
            num(h, 23).zip(num(m, 59)).map(|(h, m)| (h, m, 0))
        }
        [h, m, s] if h.len() <= 2 && m.len() == 2 && s.len() == 2 => num(h, 23)
            .zip(num(m, 59))
            .zip(num(s, 59))
            .map(|((h, m), s)| (h, m, s)),
        _ => None,
    };
    let (h, m, sec) = parsed.ok_or_else(|| WindowError::Time(s.to_string()))?;
    Time::new(h, m, sec, 0).map_err(|_| WindowError::Time(s.to_string()))
}

impl Window {
    /// A window from the agent's settings: `days` a comma-separated list
    /// (empty: every day), `start` and `end` 24-hour times, `tz` an IANA
    /// name.
    pub fn parse(days: &str, start: &str, end: &str, tz: &str) -> Result<Window, WindowError> {
        let mut allowed = [false; 7];
        let names: Vec<&str> = days.split(',').filter(|d| !d.trim().is_empty()).collect();
        if names.is_empty() {
            allowed = [true; 7];
        }
        for d in &names {
            allowed[weekday(d)?.to_monday_zero_offset() as usize] = true;
        }
        let zone = TimeZone::get(tz.trim()).map_err(|_| WindowError::Zone(tz.to_string()))?;
        let (start_t, end_t) = (time_of_day(start)?, time_of_day(end)?);
        let shown_days = if names.is_empty() {
            "every day".to_string()
        } else {
            names.iter().map(|d| d.trim()).collect::<Vec<_>>().join(",")
        };
        Ok(Window {
            days: allowed,
            start: start_t,
            end: end_t,
            tz: zone,
            text: format!("{shown_days} {}-{} {}", start.trim(), end.trim(), tz.trim()),
        })
    }

    /// The window as its settings said it.
    pub fn describe(&self) -> &str {
        &self.text
    }

    /// How long one opening lasts.
    fn length(&self) -> SignedDuration {
        let span = self.start.duration_until(self.end);
        if span <= SignedDuration::ZERO {
            span + SignedDuration::from_hours(24)
        } else {
            span
        }
    }

    /// The opening that starts on the civil date of `day` (in the window's
    /// zone), if that day is allowed: (opens, closes).
    fn opening_on(&self, day: &Zoned) -> Option<(Timestamp, Timestamp)> {
        if !self.days[day.weekday().to_monday_zero_offset() as usize] {
            return None;
        }
        let opens = day
            .date()
            .to_datetime(self.start)
            .to_zoned(self.tz.clone())
            .ok()?;
        let closes = opens.timestamp().checked_add(self.length()).ok()?;
        Some((opens.timestamp(), closes))
    }

    /// Whether a planned drain may start at `now`.
    pub fn is_open(&self, now: Timestamp) -> bool {
        self.current(now).is_some()
    }

    /// The opening `now` is in, if any: (opens, closes).
    fn current(&self, now: Timestamp) -> Option<(Timestamp, Timestamp)> {
        let today = now.to_zoned(self.tz.clone());
        // An opening that started yesterday may run past midnight.
        [today.yesterday().ok()?, today]
            .iter()
            .filter_map(|d| self.opening_on(d))
            .find(|(opens, closes)| *opens <= now && now < *closes)
    }

    /// When the window next opens after `now` (None: no day is allowed).
    pub fn next_opening(&self, now: Timestamp) -> Option<Timestamp> {
        let mut day = now.to_zoned(self.tz.clone());
        for _ in 0..8 {
            if let Some((opens, _)) = self.opening_on(&day)
                && opens > now
            {
                return Some(opens);
            }
            day = day.checked_add(1.day()).ok()?;
        }
        None
    }

    /// Why a planned drain waits at `now`, naming when the window opens in
    /// the window's own zone; None when it is open.
    pub fn hold(&self, now: Timestamp) -> Option<(String, Option<Timestamp>)> {
        if self.is_open(now) {
            return None;
        }
        let next = self.next_opening(now);
        let when = next
            .map(|t| {
                t.to_zoned(self.tz.clone())
                    .strftime("%a %Y-%m-%d %H:%M %Z")
                    .to_string()
            })
            .unwrap_or_else(|| "never (no day is allowed)".into());
        Some((
            format!(
                "outside the maintenance window ({}): waiting until it opens, {when}",
                self.text
            ),
            next,
        ))
    }
}

#[cfg(test)]
mod tests;
