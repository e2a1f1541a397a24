//! The server's own record of every tool call a program made: what was called, how it ended, how long it
//! took. It is built from what the server did, never from what the runner claims, and its size is bounded
//! whatever the program does: calls past the budget are counted, not stored, and long texts are shortened.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Map, Value};

/// Arguments larger than this (as JSON) are shown as a size only, to keep results small.
const MAX_SHOWN_ARGUMENTS: usize = 1024;
/// Arguments shown over the whole trace; once spent, every further call's arguments are shown as a size only.
const SHOWN_ARGUMENTS_BUDGET: usize = 16 * 1024;
/// A call's error as the trace keeps it (the program itself gets the whole message).
const MAX_KEPT_ERROR: usize = 1024;
/// A failure's error as the summary line shows it.
const MAX_SUMMARY_ERROR: usize = 300;
/// A tool's name as the summary line shows it (real names are short; a forged one may not be).
const MAX_SUMMARY_TOOL: usize = 120;
/// JSON bytes of calls the structured result lists; calls past it are counted instead.
pub const LISTED_CALLS_BUDGET: usize = 32 * 1024;
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
    /// The size of the result handed to the program (as JSON); 0 unless the call succeeded.
    pub result_bytes: usize,
    started: Instant,
    duration: Option<Duration>,
}

impl CallRecord {
    pub fn started(&self) -> Instant {
        self.started
    }

    /// How long the call took (so far, while in flight).
    pub fn duration(&self) -> Duration {
        self.duration.unwrap_or_else(|| self.started.elapsed())
    }
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
    /// Calls refused because the budget was spent: counted (all failed), not stored.
    over_budget: usize,
    /// The budget they were refused for (`execution.max_tool_calls`).
    budget: usize,
    /// Bytes of arguments shown so far.
    shown_arguments: usize,
}

impl Trace {
    /// Records a call that starts now, with arguments of `size` bytes as JSON; returns its index for
    /// [`Trace::finish`].
    pub fn start(&mut self, tool: &str, arguments: &Map<String, Value>, size: usize) -> usize {
        let arguments = self.shown_arguments(arguments, size);
        self.calls.push(CallRecord {
            tool: tool.to_string(),
            arguments,
            status: CallStatus::InFlight,
            error: None,
            result_bytes: 0,
            started: Instant::now(),
            duration: None,
        });
        self.calls.len() - 1
    }

    /// Counts a call refused because the program had made `budget` calls already.
    pub fn count_over_budget(&mut self, budget: usize) {
        self.over_budget += 1;
        self.budget = budget;
    }

    /// Records how call `index` ended, at `ended`: the size of its result, or the error the program got. A
    /// call already marked cancelled stays so.
    pub fn finish(&mut self, index: usize, result: Result<usize, &str>, ended: Instant) {
        let Some(call) = self.calls.get_mut(index).filter(|call| call.status == CallStatus::InFlight) else {
            return;
        };
        match result {
            Ok(bytes) => {
                call.status = CallStatus::Ok;
                call.result_bytes = bytes;
            }
            Err(error) => {
                call.status = CallStatus::Failed;
                call.error = Some(shorten(error, MAX_KEPT_ERROR));
            }
        }
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

    /// Calls made, refused ones included.
    pub fn count(&self) -> usize {
        self.calls.len() + self.over_budget
    }

    /// Calls that failed, were cancelled, or were refused for the exhausted budget.
    pub fn failed_count(&self) -> usize {
        self.failures().count() + self.over_budget
    }

    fn failures(&self) -> impl Iterator<Item = &CallRecord> {
        self.calls.iter().filter(|c| matches!(c.status, CallStatus::Failed | CallStatus::Cancelled))
    }

    /// The calls as the structured result lists them, in order, as many as fit in [`LISTED_CALLS_BUDGET`]
    /// bytes of JSON, and how many were left out (those past the budget included).
    pub fn listed(&self) -> (Value, usize) {
        let mut listed = Vec::new();
        let mut size = 0;
        for call in &self.calls {
            let view = serde_json::to_value(CallView {
                tool: &call.tool,
                arguments: &call.arguments,
                ok: call.status == CallStatus::Ok,
                duration: round_ms(call.duration()),
                error: call.error.as_deref(),
                cancelled: call.status == CallStatus::Cancelled,
            })
            .expect("trace entries always serialise");
            size += view.to_string().len() + 1;
            if size > LISTED_CALLS_BUDGET {
                break;
            }
            listed.push(view);
        }
        let not_listed = self.count() - listed.len();
        (Value::Array(listed), not_listed)
    }

    /// The seed's summary: `[tool calls: N, F failed; X.Xs]`, then up to five failures (cancelled calls
    /// included), how many more there were, and one line for the calls refused for the budget. `None` when
    /// no call was made. The time is the wall-clock time during which at least one call was in flight.
    /// `error_above` is the run's error as the answer shows it before the summary: a failure whose message it
    /// already shows as an uncaught `ToolError` is listed without that message.
    pub fn summary(&self, error_above: Option<&str>) -> Option<String> {
        if self.count() == 0 {
            return None;
        }
        let failures: Vec<&CallRecord> = self.failures().collect();
        let failed_count = self.failed_count();
        let failed = if failed_count == 0 { String::new() } else { format!(", {failed_count} failed") };
        let mut out = format!("[tool calls: {}{failed}; {:.1}s]", self.count(), self.busy_time().as_secs_f64());
        for call in failures.iter().take(MAX_LISTED_FAILURES) {
            match call.status {
                CallStatus::Cancelled => out.push_str(&format!(
                    "\n  cancelled: {} (still running when the run ended)",
                    shorten(&call.tool, MAX_SUMMARY_TOOL)
                )),
                _ => {
                    let tool = shorten(&call.tool, MAX_SUMMARY_TOOL);
                    let error = call.error.as_deref().unwrap_or("unknown error");
                    if error_above.is_some_and(|above| shows_uncaught(above, error)) {
                        out.push_str(&format!("\n  failed: {tool} (the ToolError above)"));
                    } else {
                        out.push_str(&format!("\n  failed: {tool}: {}", shorten(error, MAX_SUMMARY_ERROR)));
                    }
                }
            }
        }
        if failures.len() > MAX_LISTED_FAILURES {
            out.push_str(&format!("\n  ... {} more failures", failures.len() - MAX_LISTED_FAILURES));
        }
        if self.over_budget > 0 {
            let calls = if self.over_budget == 1 { "call" } else { "calls" };
            out.push_str(&format!("\n  refused: {} {calls}: {}", self.over_budget, budget_exhausted(self.budget)));
        }
        Some(out)
    }

    /// The union of all calls' time intervals.
    fn busy_time(&self) -> Duration {
        let mut spans: Vec<(Instant, Instant)> =
            self.calls.iter().map(|c| (c.started, c.started + c.duration())).collect();
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

/// Whether a run's error text shows `message` as an uncaught `ToolError` (whole lines of the traceback).
fn shows_uncaught(error: &str, message: &str) -> bool {
    format!("\n{error}\n").contains(&format!("\nToolError: {message}\n"))
}

impl Trace {
    /// The arguments as the trace shows them: whole while small and while the trace's budget lasts.
    fn shown_arguments(&mut self, arguments: &Map<String, Value>, size: usize) -> Value {
        if size <= MAX_SHOWN_ARGUMENTS && self.shown_arguments + size <= SHOWN_ARGUMENTS_BUDGET {
            self.shown_arguments += size;
            Value::Object(arguments.clone())
        } else {
            Value::String(format!("({size} bytes of arguments, not shown)"))
        }
    }
}

/// Why a call past the budget is refused: the program's `ToolError` and the summary say the same.
pub fn budget_exhausted(budget: usize) -> String {
    format!("tool call budget exhausted: a program may make at most {budget} tool calls (execution.max_tool_calls)")
}

/// `text` cut to at most `max` bytes (on a character boundary), with an ellipsis when cut.
pub fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = max.saturating_sub(3);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &text[..cut])
}

fn round_ms(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn start(trace: &mut Trace, tool: &str, arguments: Value) -> usize {
        let size = serde_json::to_vec(&arguments).unwrap().len();
        trace.start(tool, arguments.as_object().unwrap(), size)
    }

    #[test]
    fn no_calls_means_no_summary() {
        assert_eq!(Trace::default().summary(None), None);
    }

    #[test]
    fn the_summary_counts_failures_and_lists_at_most_five() {
        let mut trace = Trace::default();
        let ok = start(&mut trace, "mcp__s__ok", json!({}));
        trace.finish(ok, Ok(2), Instant::now());
        for i in 0..7 {
            let i = start(&mut trace, &format!("mcp__s__f{i}"), json!({}));
            trace.finish(i, Err("boom"), Instant::now());
        }
        let summary = trace.summary(None).unwrap();
        let lines: Vec<&str> = summary.lines().collect();
        assert!(lines[0].starts_with("[tool calls: 8, 7 failed; ") && lines[0].ends_with("s]"), "{summary}");
        assert_eq!(lines[1], "  failed: mcp__s__f0: boom");
        assert_eq!(lines.len(), 7);
        assert_eq!(lines[6], "  ... 2 more failures");
    }

    #[test]
    fn successful_calls_show_no_failed_count() {
        let mut trace = Trace::default();
        let i = start(&mut trace, "t", json!({"a": 1}));
        trace.finish(i, Ok(2), Instant::now());
        assert_eq!(trace.summary(None).unwrap(), "[tool calls: 1; 0.0s]");
        assert_eq!(
            trace.listed().0,
            json!([{"tool": "t", "arguments": {"a": 1}, "ok": true, "duration": trace.listed().0[0]["duration"], "error": null}])
        );
    }

    #[test]
    fn in_flight_calls_are_reported_as_cancelled() {
        let mut trace = Trace::default();
        start(&mut trace, "mcp__s__slow", json!({}));
        assert_eq!(trace.cancel_in_flight(), 1);
        assert!(
            trace.summary(None).unwrap().contains("\n  cancelled: mcp__s__slow (still running when the run ended)")
        );
        assert_eq!(trace.listed().0[0]["cancelled"], json!(true));
        assert_eq!(trace.listed().0[0]["ok"], json!(false));
    }

    #[test]
    fn calls_past_the_budget_are_counted_as_failures_but_not_stored() {
        let mut trace = Trace::default();
        let i = start(&mut trace, "t", json!({}));
        trace.finish(i, Ok(2), Instant::now());
        for _ in 0..3 {
            trace.count_over_budget(1);
        }
        assert_eq!(trace.calls().len(), 1);
        let summary = trace.summary(None).unwrap();
        assert!(summary.starts_with("[tool calls: 4, 3 failed; "), "{summary}");
        let refused = "refused: 3 calls: tool call budget exhausted: a program may make at most 1 tool calls \
                       (execution.max_tool_calls)";
        assert_eq!(summary.lines().skip(1).collect::<Vec<_>>(), [format!("  {refused}")], "{summary}");
    }

    #[test]
    fn refused_calls_follow_the_listed_failures_and_their_count() {
        let mut trace = Trace::default();
        for i in 0..7 {
            let call = start(&mut trace, &format!("mcp__s__f{i}"), json!({}));
            trace.finish(call, Err("boom"), Instant::now());
        }
        trace.count_over_budget(7);
        let summary = trace.summary(None).unwrap();
        let lines: Vec<&str> = summary.lines().collect();
        assert!(lines[0].starts_with("[tool calls: 8, 8 failed; "), "{summary}");
        assert_eq!(lines.len(), 8, "{summary}");
        assert_eq!(lines[6], "  ... 2 more failures");
        assert!(lines[7].starts_with("  refused: 1 call: tool call budget exhausted: "), "{summary}");
    }

    #[test]
    fn long_errors_are_shortened_in_the_trace_and_more_in_the_summary() {
        let mut trace = Trace::default();
        let i = start(&mut trace, "t", json!({}));
        trace.finish(i, Err(&"é".repeat(5000)), Instant::now());
        assert!(trace.calls()[0].error.as_ref().unwrap().len() <= MAX_KEPT_ERROR);
        let summary = trace.summary(None).unwrap();
        let line = summary.lines().nth(1).unwrap();
        assert!(line.starts_with("  failed: t: ééé") && line.ends_with("...") && line.len() < 330, "{line}");
    }

    #[test]
    fn a_failure_the_error_above_shows_as_uncaught_is_listed_without_its_message() {
        let mut trace = Trace::default();
        for (tool, error) in [("mcp__s__a", "'mcp__s__a' returned an error: boom"), ("mcp__s__b", "boom")] {
            let i = start(&mut trace, tool, json!({}));
            trace.finish(i, Err(error), Instant::now());
        }
        let above = "Traceback (most recent call last):\n  File \"<program>\", line 1, in <module>\n    \
                     await mcp__s__a()\nToolError: 'mcp__s__a' returned an error: boom\n";
        let summary = trace.summary(Some(above)).unwrap();
        let lines: Vec<&str> = summary.lines().skip(1).collect();
        assert_eq!(lines, ["  failed: mcp__s__a (the ToolError above)", "  failed: mcp__s__b: boom"]);
        // Only the whole uncaught line counts: a message the traceback quotes elsewhere is still listed.
        let summary = trace.summary(Some("ValueError: boom\n")).unwrap();
        assert!(summary.ends_with("\n  failed: mcp__s__b: boom"), "{summary}");
    }

    #[test]
    fn a_late_finish_does_not_undo_a_cancellation() {
        let mut trace = Trace::default();
        let i = start(&mut trace, "t", json!({}));
        trace.cancel_in_flight();
        trace.finish(i, Ok(2), Instant::now());
        assert_eq!(trace.calls()[0].status, CallStatus::Cancelled);
        trace.finish(99, Ok(2), Instant::now()); // an index the trace never gave out: ignored
    }

    #[test]
    fn shown_arguments_stop_once_their_budget_is_spent() {
        let mut trace = Trace::default();
        for _ in 0..30 {
            start(&mut trace, "t", json!({"blob": "x".repeat(900)}));
        }
        let whole = trace.calls().iter().filter(|c| c.arguments.is_object()).count();
        assert_eq!(whole, SHOWN_ARGUMENTS_BUDGET / 911);
    }

    #[test]
    fn the_listed_calls_stop_at_their_byte_budget_and_the_rest_are_counted() {
        let mut trace = Trace::default();
        for i in 0..2000 {
            let call = start(&mut trace, &format!("mcp__server__tool_{i}"), json!({"i": i}));
            trace.finish(call, Err(&"e".repeat(500)), Instant::now());
        }
        trace.count_over_budget(2000);
        let (listed, not_listed) = trace.listed();
        let listed = listed.as_array().unwrap().len();
        assert!(listed > 10 && listed < 100, "{listed}");
        assert_eq!(listed + not_listed, 2001);
        assert!(trace.listed().0.to_string().len() <= LISTED_CALLS_BUDGET);
    }

    #[test]
    fn large_arguments_are_shown_by_size_only() {
        let mut trace = Trace::default();
        start(&mut trace, "t", json!({"blob": "x".repeat(2000)}));
        assert_eq!(trace.calls()[0].arguments, json!("(2011 bytes of arguments, not shown)"));
    }
}
