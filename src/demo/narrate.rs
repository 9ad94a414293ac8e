//! How `maintd demo` tells its story: one JSON object per event (`--json`),
//! plain lines when stdout is a file or a pipe, and on a terminal the same
//! lines with a live progress bar for the running stage in place of one
//! line per pod evicted.

use std::io::Write;

use tokio::sync::broadcast;

use super::Style;
use crate::drain::progress::{DrainEvent, EventKind, PodState, Progress};

/// Pods of one workload and priority evicted in the running stage.
struct Evicted {
    workload: String,
    /// The first pod's name, said when it is the only one.
    first: String,
    priority: i32,
    pods: usize,
}

/// Prints the demo's events; remembers whether a live bar is on screen.
pub struct Narrator {
    /// Standard output, or a buffer in tests.
    out: Box<dyn Write + Send>,
    style: Style,
    /// Draw a live bar (stdout is a terminal).
    live: bool,
    /// The stage whose bar is drawn on the last line, not yet ended.
    bar: Option<usize>,
    /// Off a terminal, the running stage's evictions by workload and
    /// priority, in the order first seen: said as one line each when the
    /// stage ends, not one line per pod.
    evicted: Vec<Evicted>,
    /// The running stage's budget refusals already said: the same refusal
    /// of the next pod of that workload says nothing new.
    refusals_said: std::collections::BTreeSet<String>,
}

impl Narrator {
    pub fn new(style: Style, live: bool) -> Narrator {
        Self::to(Box::new(std::io::stdout()), style, live)
    }

    /// A narrator writing to `out`.
    fn to(out: Box<dyn Write + Send>, style: Style, live: bool) -> Narrator {
        Narrator {
            out,
            style,
            live: live && style == Style::Human,
            bar: None,
            evicted: Vec::new(),
            refusals_said: Default::default(),
        }
    }

    /// Prints events until `until` (included), or until the agent is gone.
    pub async fn follow(
        &mut self,
        events: &mut broadcast::Receiver<std::sync::Arc<DrainEvent>>,
        progress: &Progress,
        until: EventKind,
    ) {
        loop {
            match events.recv().await {
                Ok(ev) => {
                    self.event(&ev, progress);
                    if ev.event == until {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    fn event(&mut self, ev: &DrainEvent, progress: &Progress) {
        if self.style == Style::Json {
            if let Ok(line) = serde_json::to_string(ev) {
                let _ = writeln!(self.out, "{line}");
            }
            return;
        }
        let pod = match (&ev.namespace, &ev.pod) {
            (Some(ns), Some(p)) => format!("{ns}/{p}"),
            _ => String::new(),
        };
        let t = ev.t_ms as f64 / 1000.0;
        let stage = ev.stage.unwrap_or(0);
        if matches!(
            ev.event,
            EventKind::StageCompleted
                | EventKind::StageTimedOut
                | EventKind::StageEscalated
                | EventKind::DrainCompleted
                | EventKind::DrainFailed
                | EventKind::DrainCancelled
                | EventKind::ShutdownReleased
        ) {
            self.say_evicted(t);
        }
        let line = match ev.event {
            EventKind::DrainStarted => format!("{t:7.2}s  drain started: {}", ev.message),
            EventKind::NodeMarked => format!("{t:7.2}s  node: {}", ev.message),
            EventKind::StageStarted => {
                self.say(&format!("\n{t:7.2}s  stage {stage} — {}", ev.message));
                if self.live {
                    self.bar = Some(stage);
                    self.draw(progress, "");
                }
                return;
            }
            // On a terminal the bar counts evictions; elsewhere, a line each.
            EventKind::PodEvicted if self.live => {
                self.draw(progress, &pod);
                return;
            }
            EventKind::PodGone if self.live => {
                self.draw(progress, "");
                return;
            }
            EventKind::PodEvicted => {
                let workload = workload(&pod).to_string();
                let priority = ev.priority.unwrap_or(0);
                match self
                    .evicted
                    .iter_mut()
                    .find(|e| e.workload == workload && e.priority == priority)
                {
                    Some(e) => e.pods += 1,
                    None => self.evicted.push(Evicted {
                        workload,
                        first: pod,
                        priority,
                        pods: 1,
                    }),
                }
                return;
            }
            EventKind::PodBlocked | EventKind::PodQueued => {
                if !self.refusals_said.insert(ev.message.clone()) {
                    return;
                }
                format!("{t:7.2}s    waiting   {pod}: {}", ev.message)
            }
            EventKind::PodError => format!("{t:7.2}s    error     {pod}: {}", ev.message),
            EventKind::PodDeleted => format!("{t:7.2}s    deleted   {pod}: {}", ev.message),
            EventKind::StaticPodsStashed => format!("{t:7.2}s    static pods: {}", ev.message),
            EventKind::StageCompleted => {
                self.refusals_said.clear();
                let (done, total) = stage_counts(progress, stage);
                // Said over the bar (erasing it), which then ends.
                self.say(&format!(
                    "{t:7.2}s  stage {stage} done {}",
                    bar(done, total)
                ));
                self.bar = None;
                return;
            }
            EventKind::StageTimedOut
            | EventKind::StageEscalated
            | EventKind::Warning
            | EventKind::DrainFailed => format!("{t:7.2}s  ! {}", ev.message),
            EventKind::VolumesDetaching | EventKind::VolumesDetached => {
                format!("{t:7.2}s  volumes: {}", ev.message)
            }
            EventKind::DrainCompleted => format!("\n{t:7.2}s  node drained: {}", ev.message),
            EventKind::UndoStarted => format!("{t:7.2}s  maintenance over: undoing"),
            EventKind::DrainWaiting if !ev.message.is_empty() => {
                format!("{t:7.2}s  waiting: {}", ev.message)
            }
            EventKind::NodeUnmarked => format!("{t:7.2}s  node: {}", ev.message),
            EventKind::StaticPodsRestored => format!("{t:7.2}s  static pods: {}", ev.message),
            EventKind::UndoCompleted => format!("{t:7.2}s  done: the node is back in service"),
            EventKind::ShutdownPreparing => format!(
                "{t:7.2}s  logind: PrepareForShutdown(true) — {}",
                ev.message
            ),
            EventKind::ShutdownReleased | EventKind::ShutdownCancelled => {
                format!("{t:7.2}s  {}", ev.message)
            }
            _ => return,
        };
        self.say(&line);
        self.draw(progress, "");
    }

    /// The stage's evictions, one line per workload and priority.
    fn say_evicted(&mut self, t: f64) {
        for e in std::mem::take(&mut self.evicted) {
            let what = if e.pods == 1 {
                e.first
            } else {
                format!("{} pods of {}", e.pods, e.workload)
            };
            self.say(&format!(
                "{t:7.2}s    evicted   {what}  (priority {})",
                e.priority
            ));
        }
    }

    /// A line of the story, above the bar if one is drawn.
    fn say(&mut self, line: &str) {
        let out = &mut self.out;
        if self.bar.is_some() {
            // Carriage return and erase line: the bar is redrawn below.
            let _ = write!(out, "\r\x1b[2K");
        }
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    /// Redraws the running stage's bar on the last line.
    fn draw(&mut self, progress: &Progress, last: &str) {
        let Some(stage) = self.bar else {
            return;
        };
        let (done, total) = stage_counts(progress, stage);
        let out = &mut self.out;
        let _ = write!(out, "\r\x1b[2K           {} {last}", bar(done, total));
        let _ = out.flush();
    }
}

/// The workload a pod belongs to, as its name says: `ns/web-7d9f8-x2x4k`
/// is of `ns/web-7d9f8` (the generated suffix dropped).
fn workload(pod: &str) -> &str {
    pod.rsplit_once('-').map_or(pod, |(w, _)| w)
}

/// Pods of `stage` (1-based) gone, and all its pods.
fn stage_counts(progress: &Progress, stage: usize) -> (usize, usize) {
    let st = progress.status();
    st.stages
        .iter()
        .find(|s| s.stage == stage)
        .map(|s| {
            let gone = s.pods.iter().filter(|p| p.state == PodState::Gone).count();
            (gone, s.pods.len())
        })
        .unwrap_or((0, 0))
}

/// `[##########----------] 55/110`
pub fn bar(done: usize, total: usize) -> String {
    let width = 30;
    let filled = (done.min(total) * width)
        .checked_div(total)
        .unwrap_or(width);
    format!(
        "[{}{}] {done}/{total}",
        "#".repeat(filled),
        "-".repeat(width - filled)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer the narrator writes to and the test reads.
    #[derive(Clone, Default)]
    struct Screen(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Screen {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn on_a_terminal_a_stage_ends_on_a_line_of_its_own_over_its_bar() {
        let screen = Screen::default();
        let mut n = Narrator::to(Box::new(screen.clone()), Style::Human, true);
        let progress = Progress::new("node-a");
        let ev = |kind: EventKind| {
            let mut e = progress.event(kind);
            e.stage = Some(1);
            e.namespace = Some("shop".into());
            e.pod = Some("web-1".into());
            e
        };
        for kind in [
            EventKind::StageStarted,
            EventKind::PodEvicted,
            EventKind::StageCompleted,
        ] {
            let e = ev(kind);
            n.event(&e, &progress);
        }
        let text = String::from_utf8(screen.0.lock().unwrap().clone()).unwrap();
        let done = text.find("stage 1 done").expect("the stage's end is told");
        // The bar is erased, and only the line's time stands before it.
        let erased = text[..done].rfind("\x1b[2K").expect("the bar is erased") + 4;
        let prefix = &text[erased..done];
        assert!(!prefix.contains('#') && !prefix.contains('/'), "{text:?}");
        // The stage's line ends the output: no bar is drawn again.
        assert!(
            text[done..].ends_with('\n') && !text[done..].contains('\r'),
            "{text:?}"
        );
    }

    #[test]
    fn the_bar_fills_with_the_stage() {
        assert_eq!(bar(0, 4), format!("[{}] 0/4", "-".repeat(30)));
        assert_eq!(
            bar(2, 4),
            format!("[{}{}] 2/4", "#".repeat(15), "-".repeat(15))
        );
        assert_eq!(bar(0, 0), format!("[{}] 0/0", "#".repeat(30)));
    }
}
