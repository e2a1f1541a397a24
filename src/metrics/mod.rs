//! What `serve --http` reports at `/metrics`: runs by outcome and how long they took, and tool calls by
//! server and outcome, counted from each run's record as it ends (the record its log line and audit line are
//! made from); and gauges read when scraped (the pool's runners, sessions, connections). Tool names are
//! never labels: a program chooses them, and each would be a series of its own.

pub mod exposition;

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use exposition::{Exposition, Histogram, Kind};

/// The outcomes of runs, as the audit file names them.
const RUN_OUTCOMES: [&str; 5] = ["ok", "error", "timeout", "cancelled", "killed"];
/// Upper bounds of the run duration buckets, in seconds: from a pooled `print(1)` to the longest timeouts.
const DURATION_BOUNDS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// How one tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CallOutcome {
    Ok,
    Error,
    /// Still running when its run ended.
    Cancelled,
}

impl CallOutcome {
    const ALL: [CallOutcome; 3] = [CallOutcome::Ok, CallOutcome::Error, CallOutcome::Cancelled];

    fn name(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::Error => "error",
            CallOutcome::Cancelled => "cancelled",
        }
    }
}

/// The counts kept since the server started.
pub struct RunMetrics {
    counts: Mutex<Counts>,
}

struct Counts {
    runs: BTreeMap<&'static str, u64>,
    durations: Histogram,
    /// By configured server name (`""`: a tool no configured server has) and outcome.
    calls: BTreeMap<(String, CallOutcome), u64>,
}

/// What is read at each scrape.
#[derive(Debug, Default, Clone, Copy)]
pub struct Gauges {
    pub pool_ready: usize,
    pub pool_starting: usize,
    pub sessions: usize,
    pub connections: usize,
    /// Named sessions of `execute_program` live now.
    pub program_sessions: usize,
}

impl RunMetrics {
    /// Counts from zero, with a series for every run outcome and for each of `servers` (the configured ones)
    /// by call outcome, so that rates exist before the first event.
    pub fn new(servers: impl IntoIterator<Item = String>) -> RunMetrics {
        let calls =
            servers.into_iter().flat_map(|server| CallOutcome::ALL.map(|outcome| ((server.clone(), outcome), 0)));
        let counts = Counts {
            runs: RUN_OUTCOMES.iter().map(|outcome| (*outcome, 0)).collect(),
            durations: Histogram::new(DURATION_BOUNDS),
            calls: calls.collect(),
        };
        RunMetrics { counts: Mutex::new(counts) }
    }

    /// Counts a finished run and its tool calls, each named by its server.
    pub fn record_run(
        &self,
        outcome: &'static str,
        duration: Duration,
        calls: impl IntoIterator<Item = (String, CallOutcome)>,
    ) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        *counts.runs.entry(outcome).or_default() += 1;
        counts.durations.observe(duration.as_secs_f64());
        for call in calls {
            *counts.calls.entry(call).or_default() += 1;
        }
    }

    /// The text `/metrics` answers with.
    pub fn render(&self, gauges: &Gauges) -> String {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = Exposition::default();
        text.family("ptc_runs_total", Kind::Counter, "Programs run to their end, by outcome.");
        for (outcome, count) in &counts.runs {
            text.sample("ptc_runs_total", &[("outcome", outcome)], *count);
        }
        text.family("ptc_run_duration_seconds", Kind::Histogram, "How long runs took, waiting for a slot included.");
        text.histogram("ptc_run_duration_seconds", &[], &counts.durations);
        text.family(
            "ptc_tool_calls_total",
            Kind::Counter,
            "Tool calls programs made, by server (empty: a tool no configured server has) and outcome.",
        );
        for ((server, outcome), count) in &counts.calls {
            text.sample("ptc_tool_calls_total", &[("server", server), ("outcome", outcome.name())], *count);
        }
        drop(counts);
        text.family("ptc_pool_runners", Kind::Gauge, "Runners in the pool: ready for a program, or starting.");
        text.sample("ptc_pool_runners", &[("state", "ready")], gauges.pool_ready as u64);
        text.sample("ptc_pool_runners", &[("state", "starting")], gauges.pool_starting as u64);
        text.family("ptc_http_sessions", Kind::Gauge, "MCP sessions of 2025-era clients open now.");
        text.sample("ptc_http_sessions", &[], gauges.sessions as u64);
        text.family("ptc_http_connections", Kind::Gauge, "HTTP connections open now.");
        text.sample("ptc_http_connections", &[], gauges.connections as u64);
        text.family("ptc_program_sessions", Kind::Gauge, "Named sessions of execute_program live now.");
        text.sample("ptc_program_sessions", &[], gauges.program_sessions as u64);
        text.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_calls_are_counted_by_outcome_and_server_with_zeros_from_the_start() {
        let metrics = RunMetrics::new(["fs".to_string()]);
        metrics.record_run(
            "ok",
            Duration::from_millis(40),
            [
                ("fs".to_string(), CallOutcome::Ok),
                ("fs".to_string(), CallOutcome::Ok),
                (String::new(), CallOutcome::Error),
            ],
        );
        metrics.record_run("timeout", Duration::from_secs(31), [("fs".to_string(), CallOutcome::Cancelled)]);
        let gauges = Gauges { pool_ready: 2, pool_starting: 1, sessions: 3, connections: 4, program_sessions: 5 };
        let text = metrics.render(&gauges);
        let samples: Vec<&str> = text.lines().filter(|line| !line.starts_with('#')).collect();
        let expected = [
            r#"ptc_runs_total{outcome="cancelled"} 0"#,
            r#"ptc_runs_total{outcome="error"} 0"#,
            r#"ptc_runs_total{outcome="killed"} 0"#,
            r#"ptc_runs_total{outcome="ok"} 1"#,
            r#"ptc_runs_total{outcome="timeout"} 1"#,
        ];
        assert_eq!(samples[..5], expected);
        assert!(samples.contains(&r#"ptc_run_duration_seconds_bucket{le="0.025"} 0"#), "{text}");
        assert!(samples.contains(&r#"ptc_run_duration_seconds_bucket{le="0.05"} 1"#), "{text}");
        assert!(samples.contains(&r#"ptc_run_duration_seconds_bucket{le="30"} 1"#), "{text}");
        assert!(samples.contains(&r#"ptc_run_duration_seconds_bucket{le="60"} 2"#), "{text}");
        assert!(samples.contains(&"ptc_run_duration_seconds_count 2"), "{text}");
        let calls: Vec<&str> = samples.iter().copied().filter(|s| s.starts_with("ptc_tool_calls_total")).collect();
        assert_eq!(
            calls,
            [
                r#"ptc_tool_calls_total{server="",outcome="error"} 1"#,
                r#"ptc_tool_calls_total{server="fs",outcome="ok"} 2"#,
                r#"ptc_tool_calls_total{server="fs",outcome="error"} 0"#,
                r#"ptc_tool_calls_total{server="fs",outcome="cancelled"} 1"#,
            ]
        );
        let gauges: Vec<&str> =
            samples.iter().copied().filter(|s| !s.starts_with("ptc_r") && !s.starts_with("ptc_t")).collect();
        assert_eq!(
            gauges,
            [
                r#"ptc_pool_runners{state="ready"} 2"#,
                r#"ptc_pool_runners{state="starting"} 1"#,
                "ptc_http_sessions 3",
                "ptc_http_connections 4",
                "ptc_program_sessions 5",
            ]
        );
    }
}
