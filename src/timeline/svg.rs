//! The chart as SVG: a time axis, a bar per row coloured by pod type, the
//! refused stretches hatched red (the budget named on hover), marks for
//! escalations (▼), time-outs (✕) and the static pod stash (◆), the
//! deadline as a dashed line and the total in the title. `html` wraps it in
//! a page for a browser.

use std::fmt::Write;

use super::model::{Chart, MarkKind, Outcome, Row, seconds};
use crate::drain::plan::PodType;
use crate::outbound::shorten;

const WIDTH: u64 = 1180;
const LABEL_W: u64 = 400;
/// Room on the right for the last bar's caption.
const PLOT_W: u64 = WIDTH - LABEL_W - 120;
const TOP: u64 = 64;
const ROW_H: u64 = 22;
const BAR_H: u64 = 14;

/// The chart as a standalone SVG document.
pub fn render(chart: &Chart) -> String {
    let end = chart.end_ms.max(1000);
    // A deadline far beyond the drain would squash it: it is then named at
    // the right edge instead of drawn to scale.
    let deadline = chart.deadline_ms.map(|d| d.max(0) as u64);
    let span = match deadline {
        Some(d) if d <= end.saturating_mul(3) => end.max(d),
        _ => end,
    };
    let x = |ms: u64| LABEL_W as f64 + (ms.min(span) as f64 / span as f64) * PLOT_W as f64;
    let plot_h = chart.rows.len() as u64 * ROW_H;
    let height = TOP + plot_h + 70;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">
<defs><pattern id="refused" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#f6c7c3"/><rect width="3" height="6" fill="#d0392b"/></pattern></defs>
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="16" y="26" font-size="16" font-weight="bold">{}</text>
"##,
        esc(&title(chart))
    );
    if chart.not_kept > 0 {
        let _ = writeln!(
            s,
            r##"<text x="16" y="44" fill="#a05a00">{} events not kept: the agent keeps at most {} of a drain</text>"##,
            chart.not_kept,
            super::MAX_EVENTS
        );
    }
    axis(&mut s, span, plot_h, &x);
    for (i, row) in chart.rows.iter().enumerate() {
        draw_row(&mut s, row, TOP + i as u64 * ROW_H, chart.end_ms, &x);
    }
    match deadline {
        Some(d) if d > span => {
            let _ = writeln!(
                s,
                r##"<text x="{}" y="{}" fill="#d0392b" text-anchor="end">deadline at {} →</text>"##,
                WIDTH - 16,
                TOP - 12,
                seconds(d)
            );
        }
        Some(d) => deadline_line(&mut s, d, x(d), plot_h),
        None => {}
    }
    legend(&mut s, TOP + plot_h + 44);
    s.push_str("</svg>\n");
    s
}

/// The deadline as a dashed line at `dx`.
fn deadline_line(s: &mut String, d: u64, dx: f64, plot_h: u64) {
    let _ = writeln!(
        s,
        r##"<g><title>deadline: everything done within {}</title><line x1="{dx:.1}" y1="{}" x2="{dx:.1}" y2="{}" stroke="#d0392b" stroke-width="2" stroke-dasharray="6 4"/><text x="{dx:.1}" y="{}" fill="#d0392b" text-anchor="end">deadline</text></g>"##,
        seconds(d),
        TOP - 8,
        TOP + plot_h,
        TOP - 12
    );
}

/// An SVG document in a minimal page.
pub fn page(svg: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>maintd: a drain's timeline</title></head>\n<body style=\"margin:0;background:#fff\">\n{svg}</body></html>\n"
    )
}

/// "node-a drained in 12.3 s; deadline at 60.0 s".
fn title(chart: &Chart) -> String {
    let took = seconds(chart.end_ms);
    let what = match chart.outcome {
        Outcome::Completed => format!("drained in {took}"),
        Outcome::Failed => format!("drain failed after {took}"),
        Outcome::Cancelled => format!("drain cancelled after {took}"),
        Outcome::Running => format!("draining for {took} so far"),
    };
    let deadline = chart
        .deadline_ms
        .map(|d| format!("; deadline at {}", seconds(d.max(0) as u64)))
        .unwrap_or_default();
    format!("{} {what}{deadline}", chart.node)
}

fn axis(s: &mut String, span: u64, plot_h: u64, x: &impl Fn(u64) -> f64) {
    let step = tick_step(span);
    let mut t = 0;
    while t <= span {
        let tx = x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{tx:.1}" y1="{}" x2="{tx:.1}" y2="{}" stroke="#e3e3e3"/><text x="{tx:.1}" y="{}" fill="#666" text-anchor="middle">{}</text>"##,
            TOP - 4,
            TOP + plot_h,
            TOP + plot_h + 16,
            seconds(t)
        );
        t += step;
    }
}

/// A step giving 5 to 10 ticks: 1, 2 or 5 times a power of ten ms.
fn tick_step(span: u64) -> u64 {
    let mut unit = 100;
    loop {
        for m in [1, 2, 5] {
            if span / (unit * m) <= 10 {
                return unit * m;
            }
        }
        unit = unit.saturating_mul(10);
    }
}

fn draw_row(s: &mut String, row: &Row, y: u64, end_ms: u64, x: &impl Fn(u64) -> f64) {
    let (fill, _) = colour(row.pod_type);
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="end">{}</text>"##,
        LABEL_W - 8,
        y + BAR_H - 2,
        esc(&shorten(&row.label, 60))
    );
    let (x1, x2) = (x(row.from_ms), x(row.to_ms.unwrap_or(end_ms)));
    // An unfinished bar fades out: its pods are not gone yet.
    let opacity = if row.to_ms.is_some() { "1" } else { "0.45" };
    let _ = writeln!(
        s,
        r##"<g><title>{}</title><rect x="{x1:.1}" y="{y}" width="{:.1}" height="{BAR_H}" rx="2" fill="{fill}" fill-opacity="{opacity}"/></g>"##,
        esc(&row.note),
        (x2 - x1).max(2.0)
    );
    if !row.caption.is_empty() {
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{}" fill="#555" font-size="11">{}</text>"##,
            x1.max(x2) + 6.0,
            y + BAR_H - 3,
            esc(&row.caption)
        );
    }
    for b in &row.blocked {
        let (b1, b2) = (x(b.from_ms), x(b.to_ms));
        let _ = writeln!(
            s,
            r##"<g><title>refused for {}: {}</title><rect x="{b1:.1}" y="{}" width="{:.1}" height="{}" fill="url(#refused)"/></g>"##,
            seconds(b.to_ms.saturating_sub(b.from_ms)),
            esc(&b.note),
            y + 2,
            (b2 - b1).max(2.0),
            BAR_H - 4
        );
    }
    for m in &row.marks {
        let mx = x(m.at_ms);
        let (glyph, colour, what) = match m.kind {
            MarkKind::Escalated => ("▼", "#b00020", "escalated"),
            MarkKind::TimedOut => ("✕", "#b00020", "stage timed out"),
            MarkKind::Stashed => ("◆", "#6a1b9a", "static pods stashed"),
        };
        let _ = writeln!(
            s,
            r##"<g><title>{what} at {}: {}</title><text x="{mx:.1}" y="{}" fill="{colour}" text-anchor="middle" font-size="13">{glyph}</text></g>"##,
            seconds(m.at_ms),
            esc(&m.note),
            y + BAR_H - 2
        );
    }
}

fn legend(s: &mut String, y: u64) {
    let mut lx = 16;
    for t in [
        Some(PodType::Default),
        Some(PodType::DaemonSet),
        Some(PodType::Static),
    ] {
        let (fill, name) = colour(t);
        let _ = writeln!(
            s,
            r##"<rect x="{lx}" y="{}" width="14" height="10" fill="{fill}"/><text x="{}" y="{y}">{name}</text>"##,
            y - 9,
            lx + 18
        );
        lx += 40 + 7 * name.len() as u64;
    }
    let _ = writeln!(
        s,
        r##"<rect x="{lx}" y="{}" width="14" height="10" fill="url(#refused)"/><text x="{}" y="{y}">refused by a budget</text>"##,
        y - 9,
        lx + 18
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{y}" fill="#333">▼ escalated   ✕ timed out   ◆ static pods stashed   ┆ deadline</text>"##,
        lx + 160
    );
}

/// A row's colour, and the legend's name for it.
fn colour(t: Option<PodType>) -> (&'static str, &'static str) {
    match t {
        Some(PodType::Default) | None => ("#3b7dd8", "pods"),
        Some(PodType::DaemonSet) => ("#2e9d5b", "DaemonSet pods"),
        Some(PodType::Static) => ("#e08a1e", "static pods"),
    }
}

/// Text made safe inside XML.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_few_and_round() {
        for (span, step) in [
            (1000, 100),
            (2500, 500),
            (9_000, 1000),
            (60_000, 10_000),
            (95_000, 10_000),
        ] {
            assert_eq!(tick_step(span), step, "span {span}");
        }
    }

    #[test]
    fn text_cannot_break_the_markup() {
        assert_eq!(esc("a<b>&\"c'\u{7}"), "a&lt;b&gt;&amp;&quot;c&apos; ");
        assert_eq!(shorten("abcdef", 4), "abc…");
    }
}
