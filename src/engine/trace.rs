//! The server's own record of every tool call a program made: what was called, how it ended, how long it
//! took. It is built from what the server did, never from what the runner claims.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Map, Value};

/// Arguments larger than this (as JSON) are shown as a size only, to keep results small.
const MAX_SHOWN_ARGUMENTS: usize = 1024;
/// How many failures the summary spells out.
const MAX_LISTED_FAILURES: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    InFlight,
    Ok,
    Failed,
    /// Still running when the run ended (timeout, crash, or the program finished without awaiting it).
    Cancelled,
}

#[derive(Debug, Clone)]
pub struct CallRecord {
    pub tool: String,
    pub arguments: Value,
    pub status: CallStatus,
    pub error: Option<String>,
    started: Instant,
    duration: Option<Duration>,
}

/// The entry as the structured result shows it.
#[derive(Serialize)]
struct CallView<'a> {
    tool: &'a str,
    arguments: &'a Value,
    ok: bool,
    duration: f64,
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cancelled: bool,
}

#[derive(Debug, Default)]
pub struct Trace {
    calls: Vec<CallRecord>,
}

impl Trace {
    /// Records a call that starts now; returns its index for [`Trace::finish`].
    pub fn start(&mut self, tool: &str, arguments: &Map<String, Value>) -> usize {
        self.calls.push(CallRecord {
            tool: tool.to_string(),
            arguments: shown_arguments(arguments),
            status: CallStatus::InFlight,
            error: None,
            started: Instant::now(),
            duration: None,
        });
        self.calls.len() - 1
    }

    /// Records how call `index` ended, at `ended`.
    pub fn finish(&mut self, index: usize, error: Option<String>, ended: Instant) {
        let call = &mut self.calls[index];
        call.status = if error.is_some() { CallStatus::Failed } else { CallStatus::Ok };
        call.error = error;
        call.duration = Some(ended.saturating_duration_since(call.started));
    }

    /// Marks every call still in flight as cancelled; returns how many there were.
    pub fn cancel_in_flight(&mut self) -> usize {
        let mut count = 0;
        for call in self.calls.iter_mut().filter(|c| c.status == CallStatus::InFlight) {
            call.status = CallStatus::Cancelled;
            call.duration = Some(call.started.elapsed());
            count += 1;
        }
        count
    }

    pub fn calls(&self) -> &[CallRecord] {
        &self.calls
    }

    pub fn to_json(&self) -> Value {
        let views: Vec<CallView> = self
            .calls
            .iter()
            .map(|c| CallView {
                tool: &c.tool,
                arguments: &c.arguments,
                ok: c.status == CallStatus::Ok,
                duration: round_ms(c.duration.unwrap_or_else(|| c.started.elapsed())),
                error: c.error.as_deref(),
                cancelled: c.status == CallStatus::Cancelled,
            })
            .collect();
        serde_json::to_value(views).expect("trace entries always serialise")
    }

    /// The seed's summary: `[tool calls: N, F failed; X.Xs]`, then up to five failures (cancelled calls
    /// included) and how many more there were. `None` when no call was made. The time is the wall-clock
    /// time during which at least one call was in flight.
    pub fn summary(&self) -> Option<String> {
        if self.calls.is_empty() {
            return None;
        }
        let failures: Vec<&CallRecord> =
            self.calls.iter().filter(|c| matches!(c.status, CallStatus::Failed | CallStatus::Cancelled)).collect();
        let failed = if failures.is_empty() { String::new() } else { format!(", {} failed", failures.len()) };
        let mut out = format!("[tool calls: {}{failed}; {:.1}s]", self.calls.len(), self.busy_time().as_secs_f64());
        for call in failures.iter().take(MAX_LISTED_FAILURES) {
            match call.status {
                CallStatus::Cancelled => {
                    out.push_str(&format!("\n  cancelled: {} (still running when the run ended)", call.tool))
                }
                _ => out.push_str(&format!(
                    "\n  failed: {}: {}",
                    call.tool,
                    call.error.as_deref().unwrap_or("unknown error")
                )),
            }
        }
        if failures.len() > MAX_LISTED_FAILURES {
            out.push_str(&format!("\n  ... {} more failures", failures.len() - MAX_LISTED_FAILURES));
        }
        Some(out)
    }

    /// The union of all calls' time intervals.
    fn busy_time(&self) -> Duration {
        let mut spans: Vec<(Instant, Instant)> = self
            .calls
            .iter()
            .map(|c| (c.started, c.started + c.duration.unwrap_or_else(|| c.started.elapsed())))
            .collect();
        spans.sort();
        let mut total = Duration::ZERO;
        let mut current: Option<(Instant, Instant)> = None;
        for (start, end) in spans {
            current = match current {
                Some((s, e)) if start <= e => Some((s, e.max(end))),
                Some((s, e)) => {
                    total += e - s;
                    Some((start, end))
                }
                None => Some((start, end)),
            };
        }
        total + current.map_or(Duration::ZERO, |(s, e)| e - s)
    }
}

fn shown_arguments(arguments: &Map<String, Value>) -> Value {
    let size = serde_json::to_vec(arguments).map(|v| v.len()).unwrap_or(usize::MAX);
    if size <= MAX_SHOWN_ARGUMENTS {
        Value::Object(arguments.clone())
    } else {
        Value::String(format!("({size} bytes of arguments, not shown)"))
    }
}

fn round_ms(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn no_calls_means_no_summary() {
        assert_eq!(Trace::default().summary(), None);
    }

    #[test]
    fn the_summary_counts_failures_and_lists_at_most_five() {
        let mut trace = Trace::default();
        let ok = trace.start("mcp__s__ok", &args(json!({})));
        trace.finish(ok, None, Instant::now());
        for i in 0..7 {
            let i = trace.start(&format!("mcp__s__f{i}"), &args(json!({})));
            trace.finish(i, Some("boom".into()), Instant::now());
        }
        let summary = trace.summary().unwrap();
        let lines: Vec<&str> = summary.lines().collect();
        assert!(lines[0].starts_with("[tool calls: 8, 7 failed; ") && lines[0].ends_with("s]"), "{summary}");
        assert_eq!(lines[1], "  failed: mcp__s__f0: boom");
        assert_eq!(lines.len(), 7);
        assert_eq!(lines[6], "  ... 2 more failures");
    }

    #[test]
    fn successful_calls_show_no_failed_count() {
        let mut trace = Trace::default();
        let i = trace.start("t", &args(json!({"a": 1})));
        trace.finish(i, None, Instant::now());
        assert_eq!(trace.summary().unwrap(), "[tool calls: 1; 0.0s]");
        assert_eq!(
            trace.to_json(),
            json!([{"tool": "t", "arguments": {"a": 1}, "ok": true, "duration": trace.to_json()[0]["duration"], "error": null}])
        );
    }

    #[test]
    fn in_flight_calls_are_reported_as_cancelled() {
        let mut trace = Trace::default();
        trace.start("mcp__s__slow", &args(json!({})));
        assert_eq!(trace.cancel_in_flight(), 1);
        assert!(trace.summary().unwrap().contains("\n  cancelled: mcp__s__slow (still running when the run ended)"));
        assert_eq!(trace.to_json()[0]["cancelled"], json!(true));
        assert_eq!(trace.to_json()[0]["ok"], json!(false));
    }

    #[test]
    fn large_arguments_are_shown_by_size_only() {
        let mut trace = Trace::default();
        trace.start("t", &args(json!({"blob": "x".repeat(2000)})));
        assert_eq!(trace.calls()[0].arguments, json!("(2011 bytes of arguments, not shown)"));
    }
}
