//! NodeDrain objects as `kubectl get` prints a table: a header, one row
//! per node, columns padded to their widest cell and three spaces apart,
//! `<none>` for what is not set, ages as kubectl writes them (5s, 3m,
//! 2h, 4d). Plain functions over the objects' JSON, no client, no clock
//! of their own: `now` is passed in.

use jiff::Timestamp;
use serde_json::Value;

/// The columns of `maintd get`.
pub const HEADERS: [&str; 6] = [
    "NODE",
    "PHASE",
    "TRIGGER",
    "PODS LEFT",
    "BLOCKED BY",
    "SINCE",
];
/// What `-o wide` adds after them.
pub const WIDE_HEADERS: [&str; 5] = [
    "STAGE",
    "SLOT",
    "NODEMAINTENANCE",
    "SHUTDOWN LOCK",
    "VERSION",
];

/// What kubectl prints for a cell with nothing in it.
pub const NONE: &str = "<none>";

/// The longest TRIGGER cell, before its "(+N)".
const TRIGGER_WIDTH: usize = 64;
/// The longest BLOCKED BY cell, before its "(+N more)".
const BLOCKED_WIDTH: usize = 64;
/// The longest STAGE and NODEMAINTENANCE cells.
const WIDE_WIDTH: usize = 40;

/// The column names, wide or not.
pub fn headers(wide: bool) -> Vec<String> {
    let mut h: Vec<String> = HEADERS.iter().map(|s| s.to_string()).collect();
    if wide {
        h.extend(WIDE_HEADERS.iter().map(|s| s.to_string()));
    }
    h
}

/// One NodeDrain's row.
pub fn cells(obj: &Value, now: Timestamp, wide: bool) -> Vec<String> {
    let st = &obj["status"];
    let mut row = vec![
        text(&obj["metadata"]["name"]),
        text(&st["phase"]),
        trigger(st),
        st["podsRemaining"]
            .as_i64()
            .map_or(NONE.to_string(), |n| n.to_string()),
        blocked_by(st),
        since(obj, now),
    ];
    if wide {
        let maintenances: Vec<&str> = st["maintenances"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        row.extend([
            shorten(&text(&st["stage"]), WIDE_WIDTH),
            text(&st["pendingTurn"]),
            if maintenances.is_empty() {
                NONE.to_string()
            } else {
                shorten(&maintenances.join(","), WIDE_WIDTH)
            },
            match st["lockHeld"].as_bool() {
                Some(true) => "held".to_string(),
                Some(false) => "not held".to_string(),
                None => NONE.to_string(),
            },
            text(&st["agentVersion"]),
        ]);
    }
    row
}

/// A string field, or `<none>`.
fn text(v: &Value) -> String {
    match v.as_str() {
        Some(s) if !s.trim().is_empty() => one_line(s),
        _ => NONE.to_string(),
    }
}

/// A cell keeps to one line whatever a field holds.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first trigger, and how many more there are.
pub fn trigger(st: &Value) -> String {
    let all: Vec<&str> = st["triggers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match all.split_first() {
        None => NONE.to_string(),
        Some((first, [])) => shorten(&one_line(first), TRIGGER_WIDTH),
        Some((first, rest)) => format!(
            "{} (+{})",
            shorten(&one_line(first), TRIGGER_WIDTH),
            rest.len()
        ),
    }
}

/// What holds the drain up: the first pod refused eviction (and how many
/// more are), else what it waits for (its turn, a slot, a window), else
/// a failed drain's error.
pub fn blocked_by(st: &Value) -> String {
    if let Some(b) = st["blockers"].as_array().and_then(|a| a.first()) {
        let first = format!(
            "{}/{}: {}",
            b["namespace"].as_str().unwrap_or("?"),
            b["pod"].as_str().unwrap_or("?"),
            b["reason"].as_str().unwrap_or("")
        );
        let listed = st["blockers"].as_array().map_or(0, Vec::len);
        let total = st["blockersTotal"]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(listed)
            .max(listed);
        let first = shorten(&one_line(&first), BLOCKED_WIDTH);
        return if total > 1 {
            format!("{first} (+{} more)", total - 1)
        } else {
            first
        };
    }
    if let Some(w) = st["waiting"].as_str().filter(|w| !w.trim().is_empty()) {
        return shorten(&one_line(w), BLOCKED_WIDTH);
    }
    if st["phase"] == "Failed"
        && let Some(e) = st["lastError"].as_str().filter(|e| !e.trim().is_empty())
    {
        return shorten(&one_line(e), BLOCKED_WIDTH);
    }
    NONE.to_string()
}

/// How long the node has been where it is: since its drain started
/// (Cordoned, Draining, Blocked), since it ended (Drained, Failed), since
/// its agent last changed what it reports (Idle); since the object was
/// made when the agent has not said.
pub fn since(obj: &Value, now: Timestamp) -> String {
    let st = &obj["status"];
    let field = match st["phase"].as_str() {
        Some("Cordoned" | "Draining" | "Blocked") => "startedAt",
        Some("Drained" | "Failed") => "finishedAt",
        _ => "updatedAt",
    };
    let at = st[field]
        .as_str()
        .or_else(|| obj["metadata"]["creationTimestamp"].as_str());
    match at.and_then(|t| t.parse::<Timestamp>().ok()) {
        Some(t) => age(now.as_second().saturating_sub(t.as_second())),
        None => "<unknown>".to_string(),
    }
}

/// A duration in seconds as kubectl writes an age (apimachinery's
/// `duration.HumanDuration`): seconds below 2 minutes, minutes (with
/// seconds below 10) below 3 hours, hours (with minutes below 8) below 2
/// days, days (with hours below 8) below 2 years, then years. A time
/// more than a second ahead (a skewed clock) is `<invalid>`.
pub fn age(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".to_string();
    }
    let s = secs.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let minutes = s / 60;
    if minutes < 10 {
        return match s % 60 {
            0 => format!("{minutes}m"),
            rest => format!("{minutes}m{rest}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = s / 3600;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            rest => format!("{hours}h{rest}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if days < 8 {
        return match hours % 24 {
            0 => format!("{days}d"),
            rest => format!("{days}d{rest}h"),
        };
    }
    if days < 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if years < 8 {
        return match days % 365 {
            0 => format!("{years}y"),
            rest => format!("{years}y{rest}d"),
        };
    }
    format!("{years}y")
}

/// At most `max` characters, the cut marked with "...". Counted in
/// characters, not bytes, so a name in any script is cut whole.
pub fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let kept: String = s.chars().take(max.saturating_sub(3)).collect();
    format!("{}...", kept.trim_end())
}

/// Each column's width: its widest cell or header.
pub fn widths(headers: &[String], rows: &[Vec<String>]) -> Vec<usize> {
    headers
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .chain([h.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// One line of the table: cells padded to `widths`, three spaces apart,
/// no trailing space.
pub fn line(cells: &[String], widths: &[usize]) -> String {
    let mut out = String::new();
    for (i, c) in cells.iter().enumerate() {
        out.push_str(c);
        if i + 1 < cells.len() {
            let w = widths.get(i).copied().unwrap_or(0);
            let pad = w.saturating_sub(c.chars().count()) + 3;
            out.extend(std::iter::repeat_n(' ', pad));
        }
    }
    out.trim_end().to_string()
}

/// The objects' rows sorted by node, each a line, under a header line.
pub fn render(objects: &[Value], now: Timestamp, wide: bool) -> (String, Vec<usize>) {
    let mut rows: Vec<Vec<String>> = objects.iter().map(|o| cells(o, now, wide)).collect();
    rows.sort_by(|a, b| a[0].cmp(&b[0]));
    let headers = headers(wide);
    let widths = widths(&headers, &rows);
    let mut out = line(&headers, &widths);
    out.push('\n');
    for r in &rows {
        out.push_str(&line(r, &widths));
        out.push('\n');
    }
    (out, widths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ages_read_as_kubectl_writes_them() {
        for (secs, want) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (150, "2m30s"),
            (599, "9m59s"),
            (600, "10m"),
            (179 * 60 + 59, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 25 * 60, "3h25m"),
            (8 * 3600 + 59 * 60, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (4 * 86400 + 5 * 3600, "4d5h"),
            (8 * 86400, "8d"),
            (729 * 86400, "729d"),
            (730 * 86400, "2y"),
            (3 * 365 * 86400 + 10 * 86400, "3y10d"),
            (9 * 365 * 86400 + 10 * 86400, "9y"),
        ] {
            assert_eq!(age(secs), want, "{secs}s");
        }
    }

    fn drain(name: &str, status: Value) -> Value {
        json!({"metadata": {"name": name, "creationTimestamp": "2030-01-01T00:00:00Z"}, "status": status})
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn since_counts_from_the_moment_the_phase_is_about() {
        let now = at("2030-01-01T01:00:00Z");
        let cases = [
            (
                json!({"phase": "Blocked", "startedAt": "2030-01-01T00:57:00Z", "updatedAt": "2030-01-01T00:59:59Z"}),
                "3m",
            ),
            (
                json!({"phase": "Drained", "startedAt": "2030-01-01T00:10:00Z", "finishedAt": "2030-01-01T00:59:55Z"}),
                "5s",
            ),
            (
                json!({"phase": "Idle", "finishedAt": "2030-01-01T00:00:00Z", "updatedAt": "2030-01-01T00:30:00Z"}),
                "30m",
            ),
            (json!({"phase": "Idle"}), "60m"),
            (
                json!({"phase": "Draining", "startedAt": "yesterday"}),
                "<unknown>",
            ),
        ];
        for (status, want) in cases {
            assert_eq!(since(&drain("n", status.clone()), now), want, "{status}");
        }
    }

    #[test]
    fn blocked_by_names_the_first_blocker_then_the_wait_then_the_error() {
        let blocked = json!({"phase": "Blocked", "blockersTotal": 12, "blockers": [
            {"namespace": "shop", "pod": "web-1", "reason": "The disruption budget web needs 3 healthy pods and has 3 currently"},
            {"namespace": "shop", "pod": "web-2", "reason": "same"}]});
        let cell = blocked_by(&blocked);
        assert!(
            cell.starts_with("shop/web-1: The disruption budget web"),
            "{cell}"
        );
        assert!(cell.ends_with("... (+11 more)"), "{cell}");
        assert!(cell.chars().count() <= BLOCKED_WIDTH + " (+11 more)".len());
        let one = json!({"blockers": [{"namespace": "a", "pod": "b", "reason": "c"}]});
        assert_eq!(blocked_by(&one), "a/b: c");
        let waiting = json!({"phase": "Idle", "waiting": "waiting for a drain slot, next in line"});
        assert_eq!(
            blocked_by(&waiting),
            "waiting for a drain slot, next in line"
        );
        let failed = json!({"phase": "Failed", "lastError": "2 pods left after\nevery stage's time ran out"});
        assert_eq!(
            blocked_by(&failed),
            "2 pods left after every stage's time ran out"
        );
        let drained_with_old_error = json!({"phase": "Drained", "lastError": "an old refusal"});
        assert_eq!(blocked_by(&drained_with_old_error), NONE);
    }

    #[test]
    fn a_table_lines_up_sorted_by_node_with_none_for_what_is_unset() {
        let now = at("2030-01-01T00:10:00Z");
        let objects = [
            drain(
                "node-b",
                json!({"phase": "Drained", "podsRemaining": 0, "finishedAt": "2030-01-01T00:09:00Z",
                    "triggers": ["NodeMaintenance drain-node-b (stage Drain)", "taint maintd.io/drain=x:NoSchedule"],
                    "maintenances": ["drain-node-b", "rack-7"], "lockHeld": true, "agentVersion": "0.1.0"}),
            ),
            drain("node-a", json!({"phase": "Idle", "podsRemaining": 0})),
            drain("node-c", json!(null)),
        ];
        let (table, widths) = render(&objects, now, false);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines,
            [
                "NODE     PHASE     TRIGGER                                           PODS LEFT   BLOCKED BY   SINCE",
                "node-a   Idle      <none>                                            0           <none>       10m",
                "node-b   Drained   NodeMaintenance drain-node-b (stage Drain) (+1)   0           <none>       60s",
                "node-c   <none>    <none>                                            <none>      <none>       10m",
            ]
        );
        assert_eq!(widths.len(), HEADERS.len());
        let (wide, _) = render(&objects[..1], now, true);
        let row = wide.lines().nth(1).unwrap();
        assert!(
            row.ends_with("<none>   drain-node-b,rack-7   held            0.1.0"),
            "{wide}"
        );
    }

    #[test]
    fn cells_are_cut_on_characters_and_stay_on_one_line() {
        assert_eq!(shorten("abcdef", 6), "abcdef");
        assert_eq!(shorten("abcdefg", 6), "abc...");
        assert_eq!(shorten("ééééééé", 5), "éé...");
        let st = json!({"triggers": ["local: a reason\nover two lines"]});
        assert_eq!(trigger(&st), "local: a reason over two lines");
        assert_eq!(trigger(&json!({"triggers": "not a list"})), NONE);
    }
}
