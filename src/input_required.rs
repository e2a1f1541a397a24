//! Approval for 2026-07-28 clients, whose revision forbids requests from the server: a run that needs the
//! user's approval answers `execute_program` with an `input_required` result (an elicitation and an opaque
//! `requestState`), and goes on waiting; the client asks its user and sends `execute_program` again with the
//! answer and the state, which resumes the run where it waits. The run lives on between the two requests,
//! parked here under its state (128 random bits, never derived from the program); a parked run the client
//! does not come back for within `confirm_timeout_seconds` and a minute is cancelled and forgotten.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{
    CallToolResponse, ElicitRequest, ElicitRequestParams, ElicitationSchema, InputRequest, InputRequests,
    InputRequiredResult, InputResponses, ProtocolVersion,
};
use rmcp::service::{RequestContext, RoleServer};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::elicit::DECLINED;
use crate::engine::{ApprovalRequest, Approver, Caller, Engine, RunProgress, RunReport};
use crate::progress::Reporter;

/// The key of the one input request an `input_required` result carries.
const APPROVAL_KEY: &str = "approval";
/// How long past the approval timeout a parked run is kept for its client.
const EXPIRY_MARGIN: Duration = Duration::from_secs(60);

/// Whether this request's run asks through `input_required`: a 2026-07-28 client, and calls to approve.
pub fn applies(context: &RequestContext<RoleServer>, engine: &Engine) -> bool {
    engine.confirm_timeout().is_some()
        && context.protocol_version().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// What a run under way tells the request waiting for it.
enum RunEvent {
    Ask { request: ApprovalRequest, answer: oneshot::Sender<bool> },
    Done(RunReport),
}

/// A run waiting for its client to come back with an answer.
struct ParkedRun {
    code: String,
    events: mpsc::Receiver<RunEvent>,
    progress: watch::Receiver<RunProgress>,
    answer: oneshot::Sender<bool>,
    cancel: CancellationToken,
    since: Instant,
}

/// The runs parked for their clients, shared by every session and request.
#[derive(Default)]
pub struct Parked {
    runs: Mutex<HashMap<String, ParkedRun>>,
}

/// The request's part of the conversation.
pub struct Resume<'a> {
    pub code: &'a str,
    pub request_state: Option<String>,
    pub input_responses: Option<InputResponses>,
}

impl Parked {
    /// Runs `code`, or resumes the run `request_state` names with the answer in `input_responses`, until it
    /// ends (the result) or asks for an approval (an `input_required` result). `Err` is a message for an
    /// error result (an unknown or expired state).
    pub async fn execute(
        &self,
        engine: &Arc<Engine>,
        resume: Resume<'_>,
        session: String,
        context: &RequestContext<RoleServer>,
        render: impl Fn(&RunReport) -> CallToolResponse,
    ) -> Result<CallToolResponse, String> {
        self.sweep(engine);
        let Run { mut events, mut progress, cancel } = match resume.request_state {
            None => start(engine, resume.code, session),
            Some(state) => {
                let parked = self.take(&state, resume.code)?;
                let accepted = resume
                    .input_responses
                    .as_ref()
                    .and_then(|responses| responses.get(APPROVAL_KEY))
                    .and_then(|answer| answer.get("action"))
                    .is_some_and(|action| action == "accept");
                // The run may have stopped waiting (the approval timed out): it has moved on without it.
                let _ = parked.answer.send(accepted);
                Run { events: parked.events, progress: parked.progress, cancel: parked.cancel }
            }
        };
        // Each request reports the progress made while it waits.
        let reporter = Reporter::attach(context, progress.clone());
        let event = tokio::select! {
            event = events.recv() => event,
            () = context.ct.cancelled() => {
                cancel.cancel();
                events.recv().await
            }
        };
        if let Some(reporter) = reporter {
            reporter.finish().await;
        }
        match event {
            Some(RunEvent::Done(report)) => Ok(render(&report)),
            Some(RunEvent::Ask { request, answer }) => {
                let state = new_state();
                let input = approval_input(&request);
                // The next request reports from here on: what this one may have reported is not sent again
                // (progress must increase with each notification).
                progress.borrow_and_update();
                let code = resume.code.to_string();
                let parked = ParkedRun { code, events, progress, answer, cancel, since: Instant::now() };
                self.runs.lock().unwrap_or_else(|e| e.into_inner()).insert(state.clone(), parked);
                Ok(InputRequiredResult::new(Some(input), Some(state)).into())
            }
            None => Err("ExecutionError: the run ended without a result".to_string()),
        }
    }

    fn take(&self, state: &str, code: &str) -> Result<ParkedRun, String> {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        match runs.remove(state) {
            Some(parked) if parked.code == code => Ok(parked),
            Some(parked) => {
                runs.insert(state.to_string(), parked);
                Err("requestState belongs to another program: send the same code with it".to_string())
            }
            None => Err("requestState names no run waiting for an answer (it ended, or expired); run the program \
                         again"
                .to_string()),
        }
    }

    /// Cancels and forgets the runs whose clients did not come back in time.
    fn sweep(&self, engine: &Engine) {
        self.sweep_older_than(engine.confirm_timeout().unwrap_or_default() + EXPIRY_MARGIN);
    }

    fn sweep_older_than(&self, expiry: Duration) {
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, parked| {
            let keep = parked.since.elapsed() < expiry;
            if !keep {
                parked.cancel.cancel();
            }
            keep
        });
    }
}

/// A run under way, as the requests that follow it see it.
struct Run {
    events: mpsc::Receiver<RunEvent>,
    progress: watch::Receiver<RunProgress>,
    cancel: CancellationToken,
}

/// Starts the run on its own task (it outlives this request when it parks).
fn start(engine: &Arc<Engine>, code: &str, session: String) -> Run {
    let (events_tx, events) = mpsc::channel(4);
    let (progress_tx, progress) = watch::channel(RunProgress::default());
    let cancel = CancellationToken::new();
    let approver: Arc<dyn Approver> = Arc::new(AskThroughResult { events: events_tx.clone() });
    let caller = Caller { session, cancel: cancel.clone(), progress: Some(progress_tx), approver: Some(approver) };
    let (engine, code) = (Arc::clone(engine), code.to_string());
    tokio::spawn(async move {
        let report = engine.execute(&code, caller).await;
        let _ = events_tx.send(RunEvent::Done(report)).await;
    });
    Run { events, progress, cancel }
}

/// Asks by handing the question to the request waiting for the run, and waits for the next request's answer.
struct AskThroughResult {
    events: mpsc::Sender<RunEvent>,
}

#[async_trait]
impl Approver for AskThroughResult {
    async fn approve(&self, request: &ApprovalRequest) -> Result<(), String> {
        let (answer, answered) = oneshot::channel();
        let gone = || format!("'{}' needs the user's approval (tools.confirm), but the client went away", request.tool);
        self.events.send(RunEvent::Ask { request: request.clone(), answer }).await.map_err(|_| gone())?;
        match answered.await {
            Ok(true) => Ok(()),
            Ok(false) => Err(DECLINED.to_string()),
            Err(_) => Err(gone()),
        }
    }
}

/// A fresh `requestState`: whoever holds it can answer for the run, so it is 128 bits from the OS's random
/// source, never from a generator that one value (or the clock) gives away.
fn new_state() -> String {
    let mut bytes = [0; 16];
    getrandom::fill(&mut bytes).expect("the OS's random source answers");
    format!("{:032x}", u128::from_be_bytes(bytes))
}

fn approval_input(request: &ApprovalRequest) -> InputRequests {
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: request.question(),
        requested_schema: ElicitationSchema::new(Default::default()),
    };
    InputRequests::from([(APPROVAL_KEY.to_string(), InputRequest::Elicitation(ElicitRequest::new(params)))])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parked(code: &str, since: Instant) -> (ParkedRun, CancellationToken) {
        let (_, events) = mpsc::channel(1);
        let (_, progress) = watch::channel(RunProgress::default());
        let (answer, _) = oneshot::channel();
        let cancel = CancellationToken::new();
        (ParkedRun { code: code.into(), events, progress, answer, cancel: cancel.clone(), since }, cancel)
    }

    #[test]
    fn states_come_from_the_os_not_from_a_generator_that_can_be_replayed() {
        fastrand::seed(7);
        let first = new_state();
        fastrand::seed(7);
        let second = new_state();
        assert_ne!(first, second);
        assert!(first.len() == 32 && first.chars().all(|c| c.is_ascii_hexdigit()), "{first}");
    }

    #[tokio::test]
    async fn a_state_resumes_only_its_own_program_and_only_once() {
        let store = Parked::default();
        let (run, _) = parked("print(1)", Instant::now());
        store.runs.lock().unwrap().insert("s".into(), run);
        let other = store.take("s", "print(2)").err().unwrap();
        assert!(other.starts_with("requestState belongs to another program"), "{other}");
        assert!(store.take("s", "print(1)").is_ok());
        let again = store.take("s", "print(1)").err().unwrap();
        assert!(again.starts_with("requestState names no run waiting for an answer"), "{again}");
    }

    #[tokio::test(start_paused = true)]
    async fn runs_whose_client_never_came_back_are_cancelled_and_forgotten() {
        let store = Parked::default();
        let (old, old_cancel) = parked("a", Instant::now());
        tokio::time::advance(EXPIRY_MARGIN + Duration::from_secs(1)).await;
        let (fresh, fresh_cancel) = parked("b", Instant::now());
        store.runs.lock().unwrap().extend([("old".to_string(), old), ("fresh".to_string(), fresh)]);
        store.sweep_older_than(EXPIRY_MARGIN);
        assert!(old_cancel.is_cancelled() && !fresh_cancel.is_cancelled());
        assert_eq!(store.runs.lock().unwrap().keys().collect::<Vec<_>>(), ["fresh"]);
    }
}
