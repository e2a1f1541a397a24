//! The record of one run, kept whatever the client: one `info` log line, and the JSON line the audit file
//! gets (`time`, `run_id`, `session`, `code_sha256`, `code`, `backend`, `duration_ms`, `outcome`,
//! `output_bytes`, `calls`).

use std::time::{Duration, Instant, SystemTime};

use ptc_backends::SandboxKind;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::report::RunReport;
use super::trace::CallStatus;
use crate::audit::AuditRecord;
use crate::config::TraceMode;
use crate::metrics::{CallOutcome, RunMetrics};

/// A run under way: its id, its client and when it started.
pub(super) struct Started {
    id: String,
    session: String,
    time: SystemTime,
    at: Instant,
}

impl Started {
    pub fn now(session: String) -> Self {
        Started {
            id: format!("{:016x}", getrandom::u64().expect("the OS's random source answers")),
            session,
            time: SystemTime::now(),
            at: Instant::now(),
        }
    }

    pub fn finish<'a>(
        self,
        code: &'a str,
        backend: SandboxKind,
        report: &'a RunReport,
        trace: TraceMode,
    ) -> RunRecord<'a> {
        RunRecord {
            duration: self.at.elapsed(),
            output_bytes: report.text(trace).len(),
            started: self,
            code,
            backend,
            report,
        }
    }
}

/// A finished run, as logged and audited.
pub struct RunRecord<'a> {
    started: Started,
    code: &'a str,
    backend: SandboxKind,
    duration: Duration,
    /// The bytes of the `execute_program` text returned.
    output_bytes: usize,
    report: &'a RunReport,
}

/// One line of the audit file.
#[derive(Serialize)]
struct AuditLine<'a> {
    time: String,
    run_id: &'a str,
    session: &'a str,
    code_sha256: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'a str>,
    backend: &'static str,
    duration_ms: u64,
    outcome: &'static str,
    output_bytes: usize,
    calls: Vec<AuditCall<'a>>,
}

#[derive(Serialize)]
struct AuditCall<'a> {
    tool: &'a str,
    /// When the call started, in ms after the run did.
    start_ms: u64,
    ms: u64,
    ok: bool,
    error: Option<&'a str>,
    /// The size of the result handed to the program (as JSON).
    bytes: usize,
}

impl RunRecord<'_> {
    /// The one `info` line about the run.
    pub fn log(&self) {
        let trace = &self.report.trace;
        tracing::info!(
            run = %self.started.id,
            backend = %self.backend,
            duration_ms = millis(self.duration),
            calls = trace.count(),
            failed_calls = trace.failed_count(),
            outcome = self.report.outcome.name(),
            bytes_returned = self.output_bytes,
            "run finished"
        );
    }
}

impl RunRecord<'_> {
    /// Counts the run and its tool calls in `metrics`, each call under the server `server_of` names (`""`:
    /// none).
    pub fn count(&self, metrics: &RunMetrics, server_of: impl Fn(&str) -> Option<String>) {
        let calls = self.report.trace.calls().iter().filter_map(|call| {
            let outcome = match call.status {
                CallStatus::Ok => CallOutcome::Ok,
                CallStatus::Failed => CallOutcome::Error,
                CallStatus::Cancelled => CallOutcome::Cancelled,
                // The trace marks every call still in flight as cancelled when its run ends.
                CallStatus::InFlight => return None,
            };
            Some((server_of(&call.tool).unwrap_or_default(), outcome))
        });
        metrics.record_run(self.report.outcome.name(), self.duration, calls);
    }
}

impl AuditRecord for RunRecord<'_> {
    fn audit_line(&self, with_code: bool) -> Vec<u8> {
        let calls = self
            .report
            .trace
            .calls()
            .iter()
            .map(|call| AuditCall {
                tool: &call.tool,
                start_ms: millis(call.started().saturating_duration_since(self.started.at)),
                ms: millis(call.duration()),
                ok: call.status == CallStatus::Ok,
                error: match call.status {
                    CallStatus::Cancelled => Some("cancelled: still running when the run ended"),
                    _ => call.error.as_deref(),
                },
                bytes: call.result_bytes,
            })
            .collect();
        let line = AuditLine {
            time: humantime::format_rfc3339_millis(self.started.time).to_string(),
            run_id: &self.started.id,
            session: &self.started.session,
            code_sha256: hex(&Sha256::digest(self.code.as_bytes())),
            code: with_code.then_some(self.code),
            backend: self.backend.name(),
            duration_ms: millis(self.duration),
            outcome: self.report.outcome.name(),
            output_bytes: self.output_bytes,
            calls,
        };
        let mut bytes = serde_json::to_vec(&line).expect("audit lines serialise");
        bytes.push(b'\n');
        bytes
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value, json};

    use super::*;
    use crate::engine::report::Outcome;

    fn line(report: &RunReport, with_code: bool) -> Value {
        let record = Started::now("s1".into()).finish("print(1)", SandboxKind::None, report, TraceMode::Summary);
        let bytes = record.audit_line(with_code);
        assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 1, "one line");
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn an_audit_line_has_every_field_and_the_code_only_when_asked() {
        let mut report = RunReport { output: "1\n".into(), ..RunReport::default() };
        let ok = report.trace.start("mcp__s__ok", &Map::new(), 2);
        report.trace.finish(ok, Ok(17), Instant::now());
        let failed = report.trace.start("mcp__s__bad", &Map::new(), 2);
        report.trace.finish(failed, Err("boom"), Instant::now());
        let value = line(&report, false);
        let keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["time", "run_id", "session", "code_sha256", "backend", "duration_ms", "outcome", "output_bytes", "calls"]
        );
        assert_eq!(value["session"], "s1");
        assert_eq!(value["code_sha256"], "d287bb7f9d15abdc5b6e98536263815744b6ef21c8f3c839fc434ca70d8efe99");
        assert_eq!(value["backend"], "none");
        assert_eq!(value["outcome"], "ok");
        assert_eq!(value["output_bytes"], report.text(TraceMode::Summary).len());
        let calls: Vec<Value> = value["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| json!([c["tool"], c["ok"], c["error"], c["bytes"], c["start_ms"].is_u64(), c["ms"].is_u64()]))
            .collect();
        assert_eq!(
            calls,
            [json!(["mcp__s__ok", true, null, 17, true, true]), json!(["mcp__s__bad", false, "boom", 0, true, true])]
        );
        assert!(value["time"].as_str().unwrap().ends_with('Z'), "{value}");
        assert_eq!(line(&report, true)["code"], "print(1)");
    }

    #[test]
    fn outcomes_are_named_as_the_audit_file_documents() {
        let names: Vec<&str> =
            [Outcome::Ok, Outcome::Error, Outcome::Sandbox, Outcome::Timeout, Outcome::Cancelled, Outcome::Killed]
                .iter()
                .map(|o| o.name())
                .collect();
        assert_eq!(names, ["ok", "error", "error", "timeout", "cancelled", "killed"]);
        let report = RunReport::failed(Outcome::Killed, "ExecutionError: the server is shutting down".into());
        assert_eq!(line(&report, false)["outcome"], "killed");
    }
}
