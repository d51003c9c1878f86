//! The task timeline: when each task ran, on which worker, written as Chrome trace events.
//!
//! Owns: [`Trace`], [`TraceEvent`] and the recorder a runtime carries. Invariant: recording is
//! off by default and then costs one relaxed atomic load per task; when on, every task that
//! ran its kernel (or skipped it on a poisoned input) adds exactly one event, with start and
//! end measured on the worker that ran it, relative to the moment recording was switched on.

use crate::error::TaskId;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One task on the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// The task.
    pub task: TaskId,
    /// The name it was scheduled under.
    pub name: &'static str,
    /// The worker (pool thread index) that ran it, or [`TraceEvent::HOST`] for a task that
    /// ran on a host thread (an eager task ready at enrollment, or a sequential task that a
    /// waiting host ran).
    pub worker: usize,
    /// When it started, from the start of recording.
    pub start: Duration,
    /// How long it ran.
    pub duration: Duration,
    /// Whether the kernel was skipped or failed (the task's outputs were poisoned).
    pub failed: bool,
}

impl TraceEvent {
    /// The `worker` of a task that ran on a host thread (its track in the Chrome trace).
    pub const HOST: usize = usize::MAX;
}

/// A recorded timeline.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The events, in the order tasks finished.
    pub events: Vec<TraceEvent>,
}

impl Trace {
    /// The timeline as Chrome trace-event JSON (complete events, microseconds), which
    /// Perfetto and `chrome://tracing` open: one track per worker.
    pub fn to_chrome_json(&self) -> String {
        let mut out = String::from("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
        for (k, e) in self.events.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"name\":\"{}\",\"cat\":\"task\",\"ph\":\"X\",\"pid\":1,\"tid\":{},\
                 \"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"task\":{},\"failed\":{}}}}}",
                escape(e.name),
                e.worker,
                e.start.as_secs_f64() * 1e6,
                e.duration.as_secs_f64() * 1e6,
                e.task.0,
                e.failed
            );
        }
        out.push_str("]}");
        out
    }

    /// Writes [`Trace::to_chrome_json`] to `path`.
    pub fn write_chrome(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_chrome_json())
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The recorder of one runtime.
#[derive(Default)]
pub(crate) struct Recorder {
    on: AtomicBool,
    state: std::sync::Mutex<Option<(Instant, Vec<TraceEvent>)>>,
}

impl Recorder {
    /// Whether tasks should be timed now (the only cost when recording is off).
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub(crate) fn start(&self) {
        *crate::primitive::lock(&self.state) = Some((Instant::now(), Vec::new()));
        self.on.store(true, Ordering::Relaxed);
    }

    pub(crate) fn stop(&self) -> Trace {
        self.on.store(false, Ordering::Relaxed);
        let events = crate::primitive::lock(&self.state)
            .take()
            .map(|(_, e)| e)
            .unwrap_or_default();
        Trace { events }
    }

    /// Adds one task that ran from `start` to now.
    pub(crate) fn record(&self, task: TaskId, name: &'static str, start: Instant, failed: bool) {
        let end = Instant::now();
        if let Some((origin, events)) = crate::primitive::lock(&self.state).as_mut() {
            events.push(TraceEvent {
                task,
                name,
                worker: rayon::current_thread_index().unwrap_or(TraceEvent::HOST),
                start: start.saturating_duration_since(*origin),
                duration: end.saturating_duration_since(start),
                failed,
            });
        }
    }
}
