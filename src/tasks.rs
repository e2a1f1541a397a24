//! Programs as tasks, for 2026-07-28 clients that declare the `io.modelcontextprotocol/tasks` extension on
//! their `execute_program` request: the request is answered at once with a task, and the run goes on without
//! it, within `execution.task_timeout_seconds` (on a runner of its own, whose CPU-time limit follows that
//! limit). `tasks/get` shows the task's status, its last printed lines and `progress()` message, and once it
//! is over the result, exactly what the request would have answered; `tasks/cancel` stops the run (its
//! runner killed, its calls cancelled), and the cancelled task says so; an approval (`tools.confirm`) makes the
//! task `input_required` with the question, answered by `tasks/update`.
//!
//! A task belongs to the client that started it ([`Owner`]): another client's request for it is answered as
//! for a task that does not exist. A client has at most `execution.max_tasks_per_client` at once: a new one
//! takes the place of its oldest finished one, or is refused when all of them still run. A finished task is
//! kept for `execution.task_ttl_seconds`, then forgotten by a timer of its own. Task ids are 128 bits from the
//! OS's random source. `notifications/tasks` are not sent (rmcp cannot route them yet): clients poll.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, InputRequests, InputResponses, JsonObject,
    ProtocolVersion, Task, TaskPayload, TaskStatus,
};
use rmcp::service::{RequestContext, RoleServer};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::config::ExecutionConfig;
use crate::engine::{
    ApprovalRequest, Approver, Caller, Engine, Outcome, Refusal, RunOptions, RunProgress, RunReport, SessionKey,
    TimeLimit,
};
use crate::input_required::{accepts, approval_elicitation, new_state};
use crate::owner::Owner;
use crate::progress::OutputSoFar;

/// The most bytes of printed output a status message shows.
const SHOWN_OUTPUT: usize = 2048;
/// Output chunks on their way into a task's [`OutputSoFar`], which takes them as they come.
const PRINTED_QUEUE: usize = 16;

/// Whether this request's `execute_program` runs as a task: a 2026-07-28 client that declared the extension
/// on it, and tasks not turned off.
pub fn applies(context: &RequestContext<RoleServer>, settings: &ExecutionConfig) -> bool {
    settings.max_tasks_per_client > 0
        && context.protocol_version().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
        && context.client_capabilities().is_some_and(|capabilities| capabilities.supports_tasks())
}

type Entries = Arc<Mutex<HashMap<String, Arc<Entry>>>>;

/// The tasks of every client, shared by every session and request.
pub struct Tasks {
    entries: Entries,
    max_per_client: usize,
    ttl: Duration,
    limit: TimeLimit,
    /// How much waits for approvals may add to the time limit (`tools.confirm_timeout_seconds`).
    allowance: Duration,
}

/// Why a task was not started: the text of the error result.
#[derive(Debug, thiserror::Error)]
pub enum StartRefused {
    #[error(
        "ExecutionError: this client has {0} tasks running (execution.max_tasks_per_client is {0}); wait for one \
         to finish or cancel one with tasks/cancel"
    )]
    TooMany(usize),
}

/// Why a `tasks/*` request names no task of its client (the same answer for another client's task).
#[derive(Debug, thiserror::Error)]
#[error("no task '{0}' of this client: it was never started, or it finished and was forgotten (tasks are kept {1}s)")]
pub struct NoSuchTask(String, f64);

/// One task.
struct Entry {
    owner: Owner,
    created_at: SystemTime,
    created: Instant,
    /// Ends the run (`tasks/cancel`).
    cancel: CancellationToken,
    progress: watch::Receiver<RunProgress>,
    output: Mutex<OutputSoFar>,
    state: Mutex<State>,
}

impl Entry {
    /// A task of `owner` created now, whose run reports how far it is to `progress`.
    fn new(owner: Owner, progress: watch::Receiver<RunProgress>) -> Arc<Entry> {
        Arc::new(Entry {
            owner,
            created_at: SystemTime::now(),
            created: Instant::now(),
            cancel: CancellationToken::new(),
            progress,
            output: Mutex::default(),
            state: Mutex::default(),
        })
    }
}

#[derive(Default)]
struct State {
    done: Option<Done>,
    updated_at: Option<SystemTime>,
    /// The approvals the run waits for, by their input request's key.
    asking: BTreeMap<String, Asked>,
    /// Input request keys issued so far: each is used once in a task's life.
    keys_issued: u64,
    /// Forgets the task once its time is up.
    _expiry: Option<AbortOnDropHandle<()>>,
}

struct Done {
    /// The result the request would have answered.
    result: JsonObject,
    /// Why it was cancelled, if it was.
    cancelled: Option<String>,
    after: Duration,
}

struct Asked {
    request: ApprovalRequest,
    answer: oneshot::Sender<bool>,
}

impl Tasks {
    pub fn new(engine: &Engine) -> Self {
        let settings = engine.settings();
        Tasks {
            entries: Arc::default(),
            max_per_client: settings.max_tasks_per_client,
            ttl: settings.task_ttl(),
            limit: TimeLimit::of_tasks(settings),
            allowance: engine.confirm_timeout().unwrap_or_default(),
        }
    }

    /// Starts `code` as a task of `owner`: the answer to its request. `render` makes the run's result.
    pub fn start(
        &self,
        engine: &Arc<Engine>,
        code: &str,
        owner: Owner,
        session: String,
        named_session: Option<SessionKey>,
        render: impl FnOnce(&RunReport) -> CallToolResult + Send + 'static,
    ) -> Result<CreateTaskResult, StartRefused> {
        let (progress_tx, progress) = watch::channel(RunProgress::default());
        let entry = Entry::new(owner, progress);
        let id = new_state();
        self.admit(&id, &entry)?;
        let (printed, mut arriving) = mpsc::channel::<String>(PRINTED_QUEUE);
        let collector = Arc::clone(&entry);
        tokio::spawn(async move {
            while let Some(chunk) = arriving.recv().await {
                lock(&collector.output).push(&chunk);
            }
        });
        let approver: Arc<dyn Approver> = Arc::new(AskThroughTask { entry: Arc::clone(&entry) });
        let caller = Caller {
            session,
            cancel: entry.cancel.clone(),
            progress: Some(progress_tx),
            approver: Some(approver),
            named_session,
        };
        let options = RunOptions { printed: Some(printed), time_limit: Some(self.limit), ..RunOptions::default() };
        let (engine, code, entries, ttl) = (Arc::clone(engine), code.to_string(), Arc::clone(&self.entries), self.ttl);
        let seed = self.describe(&id, &entry).task;
        let running = Arc::clone(&entry);
        tokio::spawn(async move {
            let report = engine.execute_with(&code, caller, options).await;
            let cancelled = (report.outcome == Outcome::Cancelled).then(|| report.error.clone().unwrap_or_default());
            let result = serde_json::to_value(render(&report)).expect("results serialise");
            let serde_json::Value::Object(result) = result else { unreachable!("a result is an object") };
            let forget = tokio::spawn(async move {
                tokio::time::sleep(ttl).await;
                lock(&entries).remove(&id);
            });
            let mut state = lock(&running.state);
            state.done = Some(Done { result, cancelled, after: running.created.elapsed() });
            state.updated_at = Some(SystemTime::now());
            state._expiry = Some(AbortOnDropHandle::new(forget));
        });
        Ok(CreateTaskResult::new(seed))
    }

    /// Files the new task under `id`, making room among its owner's: the oldest finished one goes.
    fn admit(&self, id: &str, entry: &Arc<Entry>) -> Result<(), StartRefused> {
        let mut entries = lock(&self.entries);
        let owned: Vec<(&String, &Arc<Entry>)> = entries.iter().filter(|(_, e)| e.owner == entry.owner).collect();
        if owned.len() >= self.max_per_client {
            let oldest_finished = owned
                .iter()
                .filter(|(_, e)| lock(&e.state).done.is_some())
                .min_by_key(|(_, e)| e.created)
                .map(|(id, _)| (*id).clone());
            match oldest_finished {
                Some(oldest) => {
                    entries.remove(&oldest);
                }
                None => return Err(StartRefused::TooMany(self.max_per_client)),
            }
        }
        entries.insert(id.to_string(), Arc::clone(entry));
        Ok(())
    }

    /// `tasks/get`.
    pub fn get(&self, owner: &Owner, id: &str) -> Result<GetTaskResult, NoSuchTask> {
        let entry = self.find(owner, id)?;
        Ok(GetTaskResult::new(self.describe(id, &entry)))
    }

    /// `tasks/cancel`: the run ends soon (a finished task stays as it is).
    pub fn cancel(&self, owner: &Owner, id: &str) -> Result<(), NoSuchTask> {
        self.find(owner, id)?.cancel.cancel();
        Ok(())
    }

    /// `tasks/update`: answers the approvals the responses name; keys not waiting for an answer are ignored.
    pub fn update(&self, owner: &Owner, id: &str, responses: &InputResponses) -> Result<(), NoSuchTask> {
        let entry = self.find(owner, id)?;
        let mut state = lock(&entry.state);
        for (key, response) in responses {
            if let Some(asked) = state.asking.remove(key) {
                // The run may have stopped waiting (the approval timed out) a moment ago.
                let _ = asked.answer.send(accepts(response));
                state.updated_at = Some(SystemTime::now());
            }
        }
        Ok(())
    }

    fn find(&self, owner: &Owner, id: &str) -> Result<Arc<Entry>, NoSuchTask> {
        match lock(&self.entries).get(id) {
            Some(entry) if entry.owner == *owner => Ok(Arc::clone(entry)),
            _ => Err(NoSuchTask(id.to_string(), self.ttl.as_secs_f64())),
        }
    }

    /// The task as `tasks/get` shows it now.
    fn describe(&self, id: &str, entry: &Entry) -> DetailedTask {
        let state = lock(&entry.state);
        let age = entry.created.elapsed();
        let output = lock(&entry.output).show(SHOWN_OUTPUT);
        let (payload, message, ttl) = match &state.done {
            Some(Done { cancelled: Some(why), after, .. }) => {
                let message = with_output(format!("cancelled after {:.1}s: {why}", after.as_secs_f64()), output);
                (TaskPayload::Cancelled, message, *after + self.ttl)
            }
            Some(Done { result, after, .. }) => {
                let message = format!("finished after {:.1}s", after.as_secs_f64());
                (TaskPayload::Completed { result: result.clone() }, message, *after + self.ttl)
            }
            None => {
                let progress = entry.progress.borrow().clone();
                let mut message = format!("running for {}s; {}", age.as_secs(), calls(&progress));
                if progress.said > 0 {
                    message.push_str(&format!("; progress: {}", progress.message));
                    if let Some(fraction) = progress.fraction {
                        message.push_str(&format!(" ({:.0}%)", fraction * 100.0));
                    }
                }
                let payload = if state.asking.is_empty() {
                    TaskPayload::Working
                } else {
                    let waiting: Vec<&str> = state.asking.values().map(|asked| asked.request.tool.as_str()).collect();
                    message.push_str(&format!("; waiting for the user's approval of {}", waiting.join(", ")));
                    let input_requests: InputRequests = state
                        .asking
                        .iter()
                        .map(|(key, asked)| (key.clone(), approval_elicitation(&asked.request)))
                        .collect();
                    TaskPayload::InputRequired { input_requests }
                };
                // The longest it can run (its time limit and the waits for approvals), and then the time it is kept.
                (payload, with_output(message, output), self.limit.duration() + self.allowance + self.ttl)
            }
        };
        let updated_at = state.updated_at.unwrap_or(entry.created_at);
        let task = Task::new(id, TaskStatus::Working, timestamp(entry.created_at), timestamp(updated_at))
            .with_status_message(message)
            .with_ttl_ms(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
            .with_poll_interval_ms(poll_interval(age).as_millis() as u64);
        DetailedTask::new(task, payload)
    }
}

/// How often a client should poll a task of this age: twice a second at first, then less often, at most every
/// 5 s (a ten-minute run is polled about 150 times).
fn poll_interval(age: Duration) -> Duration {
    (age / 5).clamp(Duration::from_millis(500), Duration::from_secs(5))
}

fn calls(progress: &RunProgress) -> String {
    match progress.finished {
        0 => "no tool calls finished yet".to_string(),
        1 => format!("1 tool call finished (last: {})", progress.last_tool),
        n => format!("{n} tool calls finished (last: {})", progress.last_tool),
    }
}

fn with_output(message: String, output: Option<String>) -> String {
    match output {
        Some(output) => format!("{message}\noutput so far:\n{output}"),
        None => message,
    }
}

fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Asks by making the task `input_required` with the question, and waits for `tasks/update`.
struct AskThroughTask {
    entry: Arc<Entry>,
}

/// Takes an approval's question back off the task once the run no longer waits for it (answered, timed out,
/// or the run ended).
struct Withdraw<'a> {
    entry: &'a Entry,
    key: String,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.entry.state);
        if state.asking.remove(&self.key).is_some() {
            state.updated_at = Some(SystemTime::now());
        }
    }
}

#[async_trait]
impl Approver for AskThroughTask {
    async fn approve(&self, request: &ApprovalRequest) -> Result<(), Refusal> {
        let (answer, answered) = oneshot::channel();
        let key = {
            let mut state = lock(&self.entry.state);
            state.keys_issued += 1;
            let key = format!("approval-{}", state.keys_issued);
            state.asking.insert(key.clone(), Asked { request: request.clone(), answer });
            state.updated_at = Some(SystemTime::now());
            key
        };
        let _withdraw = Withdraw { entry: &self.entry, key };
        match answered.await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Refusal::Declined),
            Err(_) => Err(Refusal::ClientGone { tool: request.tool.clone() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tasks(max_per_client: usize) -> Tasks {
        Tasks {
            entries: Arc::default(),
            max_per_client,
            ttl: Duration::from_secs(60),
            limit: TimeLimit { seconds: 10.0, key: "execution.task_timeout_seconds" },
            allowance: Duration::ZERO,
        }
    }

    fn entry(owner: &str) -> Arc<Entry> {
        Entry::new(Owner::named(owner), watch::channel(RunProgress::default()).1)
    }

    fn finish(entry: &Entry) {
        lock(&entry.state).done = Some(Done { result: JsonObject::new(), cancelled: None, after: Duration::ZERO });
    }

    fn status(tasks: &Tasks, id: &str) -> TaskStatus {
        tasks.get(&Owner::named("alice"), id).unwrap().task.status()
    }

    #[test]
    fn a_task_is_found_by_its_owner_only_and_another_client_is_told_what_it_would_be_for_none() {
        let tasks = tasks(4);
        tasks.admit("t1", &entry("alice")).unwrap();
        assert!(tasks.get(&Owner::named("alice"), "t1").is_ok());
        let theirs = tasks.get(&Owner::named("bob"), "t1").unwrap_err().to_string();
        let none = tasks.get(&Owner::named("bob"), "t2").unwrap_err().to_string();
        assert_eq!(theirs.replace("t1", "t2"), none);
        assert!(tasks.cancel(&Owner::named("bob"), "t1").is_err());
        assert!(!lock(&tasks.entries)["t1"].cancel.is_cancelled());
    }

    #[test]
    fn a_client_at_its_bound_makes_room_from_its_oldest_finished_task_or_is_refused() {
        let tasks = tasks(2);
        let (running, finished) = (entry("alice"), entry("alice"));
        tasks.admit("running", &running).unwrap();
        tasks.admit("finished", &finished).unwrap();
        finish(&finished);
        tasks.admit("third", &entry("alice")).unwrap();
        assert!(tasks.get(&Owner::named("alice"), "finished").is_err(), "the finished one made room");
        assert!(matches!(tasks.admit("fourth", &entry("alice")), Err(StartRefused::TooMany(2))));
        tasks.admit("bobs", &entry("bob")).expect("the bound is per client");
        assert_eq!(status(&tasks, "running"), TaskStatus::Working);
    }

    #[tokio::test]
    async fn an_approval_is_asked_under_a_key_of_its_own_and_withdrawn_when_the_run_stops_waiting() {
        let tasks = tasks(4);
        let task = entry("alice");
        tasks.admit("t", &task).unwrap();
        let approver = AskThroughTask { entry: Arc::clone(&task) };
        let request = ApprovalRequest { tool: "mcp__db__drop".into(), arguments: Default::default(), line: Some(2) };
        let keys = |tasks: &Tasks| match tasks.get(&Owner::named("alice"), "t").unwrap().task.payload {
            TaskPayload::InputRequired { input_requests } => input_requests.into_keys().collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        // The run stops waiting (the approval timed out): the question goes.
        let timed_out = tokio::time::timeout(Duration::from_millis(50), approver.approve(&request));
        let (waited, ()) = tokio::join!(timed_out, async { assert_eq!(keys(&tasks), ["approval-1"]) });
        assert!(waited.is_err());
        assert_eq!(status(&tasks, "t"), TaskStatus::Working);
        // The next question has a new key; an answer to the old one is ignored.
        let (answer, ()) = tokio::join!(approver.approve(&request), async {
            tokio::task::yield_now().await;
            assert_eq!(keys(&tasks), ["approval-2"]);
            let owner = Owner::named("alice");
            let accept = serde_json::json!({"action": "accept"});
            tasks.update(&owner, "t", &InputResponses::from([("approval-1".into(), accept.clone())])).unwrap();
            assert_eq!(keys(&tasks), ["approval-2"]);
            tasks.update(&owner, "t", &InputResponses::from([("approval-2".into(), accept)])).unwrap();
        });
        assert!(answer.is_ok());
        assert_eq!(status(&tasks, "t"), TaskStatus::Working);
    }

    #[test]
    fn clients_are_asked_to_poll_twice_a_second_at_first_and_every_five_seconds_at_most() {
        assert_eq!(poll_interval(Duration::ZERO), Duration::from_millis(500));
        assert_eq!(poll_interval(Duration::from_secs(10)), Duration::from_secs(2));
        assert_eq!(poll_interval(Duration::from_secs(600)), Duration::from_secs(5));
    }
}
