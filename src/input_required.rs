//! Approval for 2026-07-28 clients, whose revision forbids requests from the server: a run that needs the
//! user's approval answers `execute_program` with an `input_required` result (an elicitation and an opaque
//! `requestState`), and goes on waiting; the client asks its user and sends `execute_program` again with the
//! answer and the state, which resumes the run where it waits. The run lives on between the two requests,
//! parked here under its state (128 random bits, never derived from the program). A parked run the client
//! does not come back for within `confirm_timeout_seconds` and a few seconds is cancelled and forgotten then,
//! by a timer of its own: it holds a run slot until it ends.

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
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::engine::{
    ApprovalRequest, Approver, Caller, Engine, Refusal, RunOptions, RunProgress, RunReport, SessionKey,
};
use crate::progress::{Relay, Reporter};

/// The key of the one input request an `input_required` result carries.
const APPROVAL_KEY: &str = "approval";
/// How long past the approval timeout a parked run is kept for its client: time for an answer given at the
/// last moment to arrive.
const EXPIRY_MARGIN: Duration = Duration::from_secs(10);

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
    run: Run,
    answer: oneshot::Sender<bool>,
    /// Cancels and forgets the run when its client is late; stopped when it comes back.
    _expiry: AbortOnDropHandle<()>,
}

type Runs = Arc<Mutex<HashMap<String, ParkedRun>>>;

/// The runs parked for their clients, shared by every session and request.
#[derive(Default)]
pub struct Parked {
    runs: Runs,
}

/// Why a request could not resume a run: the text of its error result.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("requestState belongs to another program: send the same code with it")]
    OtherProgram,
    #[error("requestState names no run waiting for an answer (it ended, or expired); run the program again")]
    NoSuchRun,
    #[error("ExecutionError: the run ended without a result")]
    NoResult,
}

/// The request's part of the conversation.
pub struct Resume<'a> {
    pub code: &'a str,
    /// The named session the run keeps its interpreter in.
    pub named_session: Option<SessionKey>,
    pub request_state: Option<String>,
    pub input_responses: Option<InputResponses>,
}

impl Parked {
    /// Runs `code`, or resumes the run `request_state` names with the answer in `input_responses`, until it
    /// ends (the result) or asks for an approval (an `input_required` result). `Err` is for an error result
    /// (an unknown or expired state).
    pub async fn execute(
        &self,
        engine: &Arc<Engine>,
        resume: Resume<'_>,
        session: String,
        context: &RequestContext<RoleServer>,
        render: impl Fn(&RunReport) -> CallToolResponse,
    ) -> Result<CallToolResponse, ResumeError> {
        let Run { mut events, mut progress, relay, cancel } = match resume.request_state {
            None => start(engine, resume.code, session, resume.named_session),
            Some(state) => {
                let parked = self.take(&state, resume.code)?;
                let accepted = resume
                    .input_responses
                    .as_ref()
                    .and_then(|responses| responses.get(APPROVAL_KEY))
                    .is_some_and(accepts);
                // The run may have stopped waiting (the approval timed out): it has moved on without it.
                let _ = parked.answer.send(accepted);
                parked.run
            }
        };
        // Each request reports the progress made while it waits.
        let reporter = Reporter::attach(context, progress.clone(), &relay);
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
                let input = approval_input(&request);
                // The next request reports from here on: what this one may have reported is not sent again
                // (progress must increase with each notification).
                progress.borrow_and_update();
                let run = Run { events, progress, relay, cancel };
                let keep_for = engine.confirm_timeout().unwrap_or_default() + EXPIRY_MARGIN;
                let state = self.park(resume.code.to_string(), run, answer, keep_for);
                Ok(InputRequiredResult::new(Some(input), Some(state)).into())
            }
            None => Err(ResumeError::NoResult),
        }
    }

    /// Keeps `run` for its client under a new state (returned) for `keep_for`; then cancels and forgets it.
    fn park(&self, code: String, run: Run, answer: oneshot::Sender<bool>, keep_for: Duration) -> String {
        let state = new_state();
        let (runs, key) = (Arc::clone(&self.runs), state.clone());
        let expiry = tokio::spawn(async move {
            tokio::time::sleep(keep_for).await;
            let expired = lock(&runs).remove(&key);
            if let Some(parked) = expired {
                parked.run.cancel.cancel();
            }
        });
        let parked = ParkedRun { code, run, answer, _expiry: AbortOnDropHandle::new(expiry) };
        lock(&self.runs).insert(state.clone(), parked);
        state
    }

    fn take(&self, state: &str, code: &str) -> Result<ParkedRun, ResumeError> {
        let mut runs = lock(&self.runs);
        match runs.remove(state) {
            Some(parked) if parked.code == code => Ok(parked),
            Some(parked) => {
                runs.insert(state.to_string(), parked);
                Err(ResumeError::OtherProgram)
            }
            None => Err(ResumeError::NoSuchRun),
        }
    }
}

fn lock(runs: &Runs) -> std::sync::MutexGuard<'_, HashMap<String, ParkedRun>> {
    runs.lock().unwrap_or_else(|e| e.into_inner())
}

/// A run under way, as the requests that follow it see it.
struct Run {
    events: mpsc::Receiver<RunEvent>,
    progress: watch::Receiver<RunProgress>,
    /// What it prints, to the request reporting on it.
    relay: Relay,
    cancel: CancellationToken,
}

/// Starts the run on its own task (it outlives this request when it parks).
fn start(engine: &Arc<Engine>, code: &str, session: String, named_session: Option<SessionKey>) -> Run {
    let (events_tx, events) = mpsc::channel(4);
    let (progress_tx, progress) = watch::channel(RunProgress::default());
    let cancel = CancellationToken::new();
    let approver: Arc<dyn Approver> = Arc::new(AskThroughResult { events: events_tx.clone() });
    let caller = Caller {
        session,
        cancel: cancel.clone(),
        progress: Some(progress_tx),
        approver: Some(approver),
        named_session,
    };
    let relay = Relay::default();
    let options = RunOptions { printed: Some(relay.feed()), ..RunOptions::default() };
    let (engine, code) = (Arc::clone(engine), code.to_string());
    tokio::spawn(async move {
        let report = engine.execute_with(&code, caller, options).await;
        let _ = events_tx.send(RunEvent::Done(report)).await;
    });
    Run { events, progress, relay, cancel }
}

/// Asks by handing the question to the request waiting for the run, and waits for the next request's answer.
struct AskThroughResult {
    events: mpsc::Sender<RunEvent>,
}

#[async_trait]
impl Approver for AskThroughResult {
    async fn approve(&self, request: &ApprovalRequest) -> Result<(), Refusal> {
        let (answer, answered) = oneshot::channel();
        let gone = || Refusal::ClientGone { tool: request.tool.clone() };
        self.events.send(RunEvent::Ask { request: request.clone(), answer }).await.map_err(|_| gone())?;
        match answered.await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Refusal::Declined),
            Err(_) => Err(gone()),
        }
    }
}

/// A fresh `requestState` (or task id): whoever holds it can answer for the run, so it is 128 bits from the
/// OS's random source, never from a generator that one value (or the clock) gives away.
pub fn new_state() -> String {
    let mut bytes = [0; 16];
    getrandom::fill(&mut bytes).expect("the OS's random source answers");
    format!("{:032x}", u128::from_be_bytes(bytes))
}

fn approval_input(request: &ApprovalRequest) -> InputRequests {
    InputRequests::from([(APPROVAL_KEY.to_string(), approval_elicitation(request))])
}

/// The question of an approval, as an input request (of an `input_required` result, or of a task).
pub fn approval_elicitation(request: &ApprovalRequest) -> InputRequest {
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: request.question(),
        requested_schema: ElicitationSchema::new(Default::default()),
    };
    InputRequest::Elicitation(ElicitRequest::new(params))
}

/// Whether the client's response to an approval's elicitation says yes.
pub fn accepts(response: &serde_json::Value) -> bool {
    response.get("action").is_some_and(|action| action == "accept")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run as parked, and its cancel.
    fn run() -> (Run, oneshot::Sender<bool>, CancellationToken) {
        let (_, events) = mpsc::channel(1);
        let (_, progress) = watch::channel(RunProgress::default());
        let (answer, _) = oneshot::channel();
        let cancel = CancellationToken::new();
        (Run { events, progress, relay: Relay::default(), cancel: cancel.clone() }, answer, cancel)
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
        let (run, answer, _) = run();
        let state = store.park("print(1)".into(), run, answer, Duration::from_secs(60));
        assert!(matches!(store.take(&state, "print(2)"), Err(ResumeError::OtherProgram)));
        assert!(store.take(&state, "print(1)").is_ok());
        assert!(matches!(store.take(&state, "print(1)"), Err(ResumeError::NoSuchRun)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_whose_client_never_comes_back_is_cancelled_and_forgotten_when_its_time_is_up() {
        let store = Parked::default();
        let keep_for = Duration::from_secs(300) + EXPIRY_MARGIN;
        let (late, answer, late_cancel) = run();
        let late = store.park("a".into(), late, answer, keep_for);
        let (back, answer, back_cancel) = run();
        let back = store.park("b".into(), back, answer, keep_for);
        tokio::time::sleep(keep_for - Duration::from_secs(1)).await;
        let resumed = store.take(&back, "b").ok().unwrap();
        assert!(!late_cancel.is_cancelled() && lock(&store.runs).contains_key(&late));
        // No request comes: the timer alone ends the late one, and only that one.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(late_cancel.is_cancelled() && lock(&store.runs).is_empty());
        assert!(!back_cancel.is_cancelled());
        drop(resumed);
    }
}
