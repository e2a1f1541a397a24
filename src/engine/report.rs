//! What a run produced, and how it is rendered for the model: the original's text format plus the
//! structured content `{ok, output, result, error, tool_calls}`.

use rmcp::model::ContentBlock;
use serde_json::{Value, json};

use super::TimeLimit;
use super::session::SessionInfo;
use super::trace::Trace;
use crate::config::TraceMode;

/// How a run ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    #[default]
    Ok,
    /// The program raised, broke its channel, its interpreter died, or the server refused the run.
    Error,
    /// The sandbox could not run the program (unavailable, or a runner would not start).
    Sandbox,
    Timeout,
    /// The client cancelled the request.
    Cancelled,
    /// Stopped (or never started) because the server is shutting down.
    Killed,
}

impl Outcome {
    /// The name the audit record and the log line use (a sandbox failure is an `error`).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error | Outcome::Sandbox => "error",
            Outcome::Timeout => "timeout",
            Outcome::Cancelled => "cancelled",
            Outcome::Killed => "killed",
        }
    }
}

/// The error of a run stopped at its time limit (`cancelled` says which calls were still running): the
/// original's words, then where the limit is set and how to keep what a long run found.
pub fn timed_out(limit: TimeLimit, cancelled: &str) -> String {
    let TimeLimit { seconds, key } = limit;
    format!(
        "TimeoutError: Execution exceeded {seconds}s limit{cancelled}. The limit is {key} in ptc-mcp's config; \
         print partial results as the program goes: what it printed before the limit comes back"
    )
}

/// The error of a run whose time limit came while its sandbox was still being prepared (`phase`).
pub fn timed_out_before_start(limit: TimeLimit, phase: impl std::fmt::Display) -> String {
    let TimeLimit { seconds, key } = limit;
    format!(
        "TimeoutError: Execution exceeded {seconds}s limit before the program started: {phase}. The limit is {key} \
         in ptc-mcp's config"
    )
}

/// The outcome of one `execute_program`.
#[derive(Debug, Default)]
pub struct RunReport {
    pub outcome: Outcome,
    /// What the program printed: within `max_output_bytes` less the error and the emitted value, keeping the
    /// head and the tail around a marker line when it was more.
    pub output: String,
    /// The last `emit()` value.
    pub result: Option<Value>,
    /// Why the run failed (`TimeoutError: …`, `SandboxError: …`, `ExecutionError: …` or the traceback); set
    /// exactly when `outcome` is not `Ok`.
    pub error: Option<String>,
    pub trace: Trace,
    /// Image and audio blocks the program attached with `show()` and files it attached with `attach()`, in
    /// order.
    pub attachments: Vec<ContentBlock>,
    /// The files among them, in words (`file out/data.csv (text/csv)`).
    pub files: Vec<String>,
    /// The session the run used, if it named one.
    pub session: Option<SessionInfo>,
}

impl RunReport {
    pub fn failed(outcome: Outcome, error: String) -> Self {
        RunReport { outcome, error: Some(error), ..RunReport::default() }
    }

    /// A run that the server's shutdown kept from starting.
    pub fn stopped_before_start() -> Self {
        RunReport::failed(
            Outcome::Killed,
            "ExecutionError: the server is shutting down; the run was not started".into(),
        )
    }

    pub fn ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// The text block, compatible with the original ptc-mcp.
    pub fn text(&self, trace_mode: TraceMode) -> String {
        let output = self.output.trim_end_matches('\n');
        let mut text = match &self.error {
            None => {
                let shown = if output.is_empty() { "(no output)" } else { output };
                let mut text = format!("[Script executed successfully]\n{shown}");
                if let Some(result) = &self.result {
                    let json = serde_json::to_string(result).expect("emitted values are JSON");
                    text.push_str(&format!("\n--- result ---\n{json}"));
                }
                text
            }
            Some(error) => {
                let mut text = format!("[Script execution failed]\n{}", error.trim_end_matches('\n'));
                if !output.is_empty() {
                    text.push_str(&format!("\n\n--- output before the error ---\n{output}"));
                }
                text
            }
        };
        if !self.files.is_empty() {
            text.push_str(&format!("\n[attached: {}]", self.files.join(", ")));
        }
        if let Some(session) = &self.session {
            text.push('\n');
            text.push_str(&session.lines());
        }
        if trace_mode == TraceMode::Summary
            && let Some(summary) = self.trace.summary(self.error.as_deref(), &self.output)
        {
            text.push('\n');
            text.push_str(&summary);
        }
        text
    }

    pub fn structured(&self) -> Value {
        let (listed, not_listed) = self.trace.listed();
        let mut structured = json!({
            "ok": self.ok(),
            "output": self.output,
            "result": self.result,
            "error": self.error,
            "tool_calls": listed,
        });
        if not_listed > 0 {
            // Calls refused for the exhausted budget, and any past the listing's size budget, are counted.
            structured["tool_calls_not_listed"] = not_listed.into();
        }
        if let Some(session) = &self.session {
            structured["session"] = serde_json::to_value(session).expect("session info serialises");
        }
        structured
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    #[test]
    fn success_shows_output_or_says_there_was_none() {
        let report = RunReport { output: "hello\n".into(), ..RunReport::default() };
        assert_eq!(report.text(TraceMode::Summary), "[Script executed successfully]\nhello");
        assert_eq!(RunReport::default().text(TraceMode::Summary), "[Script executed successfully]\n(no output)");
    }

    #[test]
    fn an_emitted_result_follows_the_output() {
        let report = RunReport { output: "x\n".into(), result: Some(json!({"n": 1})), ..RunReport::default() };
        assert_eq!(report.text(TraceMode::Off), "[Script executed successfully]\nx\n--- result ---\n{\"n\":1}");
        assert_eq!(report.structured()["result"], json!({"n": 1}));
    }

    #[test]
    fn failure_shows_the_error_then_the_output_before_it() {
        let report =
            RunReport { output: "step 1\n".into(), ..RunReport::failed(Outcome::Error, "ValueError: bad".into()) };
        assert_eq!(
            report.text(TraceMode::Summary),
            "[Script execution failed]\nValueError: bad\n\n--- output before the error ---\nstep 1"
        );
        assert_eq!(
            report.structured(),
            json!({"ok": false, "output": "step 1\n", "result": null, "error": "ValueError: bad", "tool_calls": []})
        );
    }

    #[test]
    fn attached_files_are_named_on_one_line_after_the_output_or_the_error() {
        let files = vec!["file a.csv (text/csv)".to_string(), "file p.png (image/png)".to_string()];
        let report = RunReport { output: "x\n".into(), files: files.clone(), ..RunReport::default() };
        assert_eq!(
            report.text(TraceMode::Off),
            "[Script executed successfully]\nx\n[attached: file a.csv (text/csv), file p.png (image/png)]"
        );
        let failed = RunReport { files, ..RunReport::failed(Outcome::Error, "ValueError: bad".into()) };
        assert!(
            failed
                .text(TraceMode::Off)
                .ends_with("ValueError: bad\n[attached: file a.csv (text/csv), file p.png (image/png)]")
        );
    }

    #[test]
    fn the_trace_summary_is_the_last_line_only_in_summary_mode() {
        let mut report = RunReport::default();
        let call = report.trace.start("mcp__s__t", &Map::new(), 2);
        report.trace.finish(call, Err("boom"), std::time::Instant::now());
        let text = report.text(TraceMode::Summary);
        assert!(text.starts_with("[Script executed successfully]\n(no output)\n[tool calls: 1, 1 failed; "), "{text}");
        assert!(text.ends_with("\n  failed: mcp__s__t (caught): boom"), "{text}");
        assert_eq!(report.text(TraceMode::Off), "[Script executed successfully]\n(no output)");
    }

    #[test]
    fn the_error_a_failed_call_raised_is_shown_once() {
        let error = "'mcp__s__t' returned an error: boom";
        let mut report =
            RunReport::failed(Outcome::Error, format!("Traceback (most recent call last):\nToolError: {error}"));
        let call = report.trace.start("mcp__s__t", &Map::new(), 2);
        report.trace.finish(call, Err(error), std::time::Instant::now());
        let text = report.text(TraceMode::Summary);
        assert_eq!(text.matches("boom").count(), 1, "{text}");
        assert!(text.ends_with("\n  failed: mcp__s__t: the error above"), "{text}");
        assert_eq!(report.structured()["tool_calls"][0]["error"], json!(error));
    }
}
