//! Named sessions (`execute_program(code, session=NAME)`): a runner kept alive between the runs of one
//! client, so that its globals, imports and scratch directory carry over to the next run with the name.
//!
//! A session belongs to the client that made it (its key holds the owner: another client's run with the same
//! name is another session). Its runs are serialised. At most `execution.sessions.max` are live over every
//! client: past it the least recently used idle one ends to make room, and a run is refused when none is
//! idle. A session ends when it is idle for `idle_timeout_seconds`, when a run ends its interpreter (the run's
//! time limit, the client's cancel, a crash), or when the server stops; the next run with its name then starts
//! a new one and says why the old one is gone, never silently.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::OwnedMutexGuard;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

use super::pool::ReadyRunner;
use super::report::{Outcome, RunReport};
use crate::config::SessionsConfig;

/// The longest session name.
pub const MAX_NAME: usize = 64;
/// A session's interpreter gets this many runs' worth of CPU time over its whole life (each run gets at most
/// one run's worth of it).
pub const CPU_RUNS: u32 = 16;
/// Sessions remembered as ended (their key and why), the oldest forgotten first.
const REMEMBERED_ENDINGS: usize = 256;
/// The most of a run's error a session's ending quotes.
const MAX_QUOTED_ERROR: usize = 200;

/// A session: the client it belongs to, and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    owner: String,
    name: String,
}

/// A session name the tool refuses.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("execute_program: session must be 1 to {MAX_NAME} characters of A-Z, a-z, 0-9, '_' and '-', got {0}")]
pub struct BadName(String);

impl SessionKey {
    /// The session `name` of the client `owner`.
    pub fn new(owner: String, name: &str) -> Result<SessionKey, BadName> {
        let valid = (1..=MAX_NAME).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            let shown: String = name.chars().take(MAX_NAME + 1).collect();
            return Err(BadName(format!("{shown:?}")));
        }
        Ok(SessionKey { owner, name: name.to_string() })
    }
}

/// What a run's answer says about its session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionInfo {
    pub name: String,
    /// The run started the session: nothing from earlier runs is there.
    pub new: bool,
    /// The session's runs so far, this one included.
    pub runs: u64,
    /// Why the earlier session of this name ended, when this run had to start a new one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_ended: Option<String>,
    /// Why this run ended the session (the next run with the name starts a new one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
}

impl SessionInfo {
    /// The lines the answer's text ends with.
    pub fn lines(&self) -> String {
        let name = &self.name;
        let mut lines = match (&self.previous_ended, self.new) {
            (_, false) => format!("[session '{name}': kept, run {}]", self.runs),
            (None, true) => format!("[session '{name}': new]"),
            (Some(why), true) => format!(
                "[session '{name}': new; the earlier session of this name ended ({why}): its variables and files \
                 are gone]"
            ),
        };
        if let Some(why) = &self.ended {
            lines.push_str(&format!("\n[session '{name}' ended: {why}; the next run with this name starts anew]"));
        }
        lines
    }
}

/// Every client's sessions.
pub struct Sessions {
    inner: Arc<Inner>,
}

struct Inner {
    max: usize,
    idle: Duration,
    slots: Mutex<HashMap<SessionKey, Arc<Slot>>>,
    endings: Mutex<VecDeque<(SessionKey, String)>>,
    /// Where ended sessions' runners are killed and their scratch removed (waited for at shutdown).
    cleanups: TaskTracker,
}

/// One session. Its lock is held by the run using it, and serialises its runs.
struct Slot {
    state: Arc<tokio::sync::Mutex<SlotState>>,
    last_used: Mutex<Instant>,
}

enum SlotState {
    /// Made for a run that has not given it a runner yet.
    Starting,
    /// Between runs.
    Kept(Box<Kept>),
    /// Ended and out of the table: a run that waited for it looks the name up again.
    Ended,
}

struct Kept {
    runner: ReadyRunner,
    runs: u64,
    /// Ends the session once it is idle for too long; dropped (aborted) when a run takes the runner.
    idle_timer: Option<AbortOnDropHandle<()>>,
}

/// No room for another session.
#[derive(Debug, thiserror::Error)]
#[error(
    "ExecutionError: {0} sessions are live (execution.sessions.max) and each is running a program; wait for one \
     to finish, or run without session"
)]
pub struct Full(usize);

impl Sessions {
    pub fn new(settings: &SessionsConfig, cleanups: TaskTracker) -> Sessions {
        Sessions {
            inner: Arc::new(Inner {
                max: settings.max,
                idle: settings.idle_timeout(),
                slots: Mutex::default(),
                endings: Mutex::default(),
                cleanups,
            }),
        }
    }

    /// The session `key` for one run, once no other run uses it (as long as the caller waits).
    pub async fn claim(&self, key: SessionKey) -> Result<Claim, Full> {
        loop {
            let slot = self.inner.slot(&key)?;
            let mut state = Arc::clone(&slot.state).lock_owned().await;
            *lock(&slot.last_used) = Instant::now();
            let (runner, runs, previous_ended) = match std::mem::replace(&mut *state, SlotState::Starting) {
                SlotState::Ended => {
                    *state = SlotState::Ended;
                    continue;
                }
                SlotState::Starting => (None, 0, self.inner.take_ending(&key)),
                SlotState::Kept(mut kept) => {
                    if kept.runner.control.has_exited() {
                        let why = format!("its interpreter ended while idle after run {}", kept.runs);
                        self.inner.retire(kept.runner);
                        (None, 0, Some(why))
                    } else {
                        (Some(kept.runner), kept.runs, None)
                    }
                }
            };
            let info = SessionInfo {
                name: key.name.clone(),
                new: runner.is_none(),
                runs: runs + 1,
                previous_ended,
                ended: None,
            };
            return Ok(Claim { inner: Arc::clone(&self.inner), key, slot, state, runner, info, finished: false });
        }
    }

    /// Sessions live now (those being started included).
    pub fn live(&self) -> usize {
        lock(&self.inner.slots).len()
    }

    /// At shutdown, once no run is under way and before the clean-ups are waited for: ends every session,
    /// killing its runner.
    pub async fn close(&self) {
        let slots: Vec<Arc<Slot>> = lock(&self.inner.slots).drain().map(|(_, slot)| slot).collect();
        for slot in slots {
            let mut state = slot.state.lock().await;
            if let SlotState::Kept(kept) = std::mem::replace(&mut *state, SlotState::Ended) {
                self.inner.retire(kept.runner);
            }
        }
    }
}

impl Inner {
    /// The slot of `key`, made (and counted) if the session is not live.
    fn slot(&self, key: &SessionKey) -> Result<Arc<Slot>, Full> {
        let mut slots = lock(&self.slots);
        if let Some(slot) = slots.get(key) {
            return Ok(Arc::clone(slot));
        }
        if slots.len() >= self.max {
            self.evict_idle(&mut slots)?;
        }
        let slot = Arc::new(Slot {
            state: Arc::new(tokio::sync::Mutex::new(SlotState::Starting)),
            last_used: Mutex::new(Instant::now()),
        });
        slots.insert(key.clone(), Arc::clone(&slot));
        Ok(slot)
    }

    /// Ends the least recently used idle session to make room; `Full` when every session is running.
    fn evict_idle(&self, slots: &mut HashMap<SessionKey, Arc<Slot>>) -> Result<(), Full> {
        let idle = slots
            .iter()
            .filter_map(|(key, slot)| {
                let state = Arc::clone(&slot.state).try_lock_owned().ok()?;
                matches!(*state, SlotState::Kept(_)).then(|| (*lock(&slot.last_used), key.clone(), state))
            })
            .min_by_key(|(last_used, ..)| *last_used);
        let Some((_, key, mut state)) = idle else {
            return Err(Full(self.max));
        };
        if let SlotState::Kept(kept) = std::mem::replace(&mut *state, SlotState::Ended) {
            self.retire(kept.runner);
        }
        slots.remove(&key);
        let why = format!(
            "it was the least recently used idle session when another needed room (execution.sessions.max is {})",
            self.max
        );
        self.record_ending(key, why);
        Ok(())
    }

    /// Ends the session of `key` if it is still idle with the runner it had after run `runs`.
    fn expire(&self, key: &SessionKey, slot: &Arc<Slot>, runs: u64) {
        let mut slots = lock(&self.slots);
        if !slots.get(key).is_some_and(|live| Arc::ptr_eq(live, slot)) {
            return;
        }
        let Ok(mut state) = slot.state.try_lock() else {
            return; // a run is using it
        };
        if !matches!(&*state, SlotState::Kept(kept) if kept.runs == runs) {
            return;
        }
        if let SlotState::Kept(mut kept) = std::mem::replace(&mut *state, SlotState::Ended) {
            // This runs on the timer's own task: let it finish rather than abort itself.
            kept.idle_timer.take().map(AbortOnDropHandle::detach);
            self.retire(kept.runner);
        }
        slots.remove(key);
        let why = format!("it was idle for {}s (execution.sessions.idle_timeout_seconds)", self.idle.as_secs_f64());
        self.record_ending(key.clone(), why);
    }

    /// Kills an ended session's runner and removes its scratch, in the background, as a run's end does.
    fn retire(&self, runner: ReadyRunner) {
        super::run::retire(runner.control, &self.cleanups);
    }

    fn record_ending(&self, key: SessionKey, why: String) {
        let mut endings = lock(&self.endings);
        endings.retain(|(ended, _)| *ended != key);
        if endings.len() >= REMEMBERED_ENDINGS {
            endings.pop_front();
        }
        endings.push_back((key, why));
    }

    fn take_ending(&self, key: &SessionKey) -> Option<String> {
        let mut endings = lock(&self.endings);
        let at = endings.iter().position(|(ended, _)| ended == key)?;
        endings.remove(at).map(|(_, why)| why)
    }
}

/// One run's hold on its session, from before it starts until [`Claim::finish`].
pub struct Claim {
    inner: Arc<Inner>,
    key: SessionKey,
    slot: Arc<Slot>,
    state: OwnedMutexGuard<SlotState>,
    runner: Option<ReadyRunner>,
    info: SessionInfo,
    finished: bool,
}

impl Claim {
    /// The session's runner, unless the run starts the session.
    pub fn take_runner(&mut self) -> Option<ReadyRunner> {
        self.runner.take()
    }

    /// The run is over: the session keeps `runner` (handed back by a run that ended as programs do), or ends.
    /// What the run's answer says about the session.
    pub fn finish(mut self, runner: Option<ReadyRunner>, report: &RunReport) -> SessionInfo {
        self.finished = true;
        let runs = self.info.runs;
        match runner {
            Some(runner) => {
                let (inner, key, slot) = (Arc::clone(&self.inner), self.key.clone(), Arc::clone(&self.slot));
                let idle = self.inner.idle;
                let timer = tokio::spawn(async move {
                    tokio::time::sleep(idle).await;
                    inner.expire(&key, &slot, runs);
                });
                let kept = Kept { runner, runs, idle_timer: Some(AbortOnDropHandle::new(timer)) };
                *self.state = SlotState::Kept(Box::new(kept));
            }
            None => {
                let why = why_it_ended(report, runs);
                self.end(Some(why.clone()));
                self.info.ended = Some(why);
            }
        }
        self.info.clone()
    }

    /// Takes the session out of the table, remembering `why` it ended for the next run with its name.
    fn end(&mut self, why: Option<String>) {
        *self.state = SlotState::Ended;
        let mut slots = lock(&self.inner.slots);
        if slots.get(&self.key).is_some_and(|live| Arc::ptr_eq(live, &self.slot)) {
            slots.remove(&self.key);
        }
        drop(slots);
        if let Some(why) = why {
            self.inner.record_ending(self.key.clone(), why);
        }
    }
}

impl Drop for Claim {
    /// A run that ended before its program started (no runner, an expiry), or was dropped: a session it was to
    /// start is not made (why an earlier one ended is kept for the next run), one it used ends.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Some(runner) = self.runner.take() {
            self.inner.retire(runner);
        }
        let why = if self.info.new {
            self.info.previous_ended.take()
        } else {
            Some(format!("run {} was stopped before it finished", self.info.runs))
        };
        self.end(why);
    }
}

/// Why a run that did not hand its runner back ended its session.
fn why_it_ended(report: &RunReport, run: u64) -> String {
    match report.outcome {
        Outcome::Timeout => format!("run {run} reached its time limit"),
        Outcome::Cancelled => format!("run {run} was cancelled"),
        Outcome::Killed => "the server stopped".to_string(),
        Outcome::Ok => format!("its interpreter stopped reading after run {run}"),
        _ => {
            let error = report.error.as_deref().unwrap_or_default();
            let first_line: String = error.lines().next().unwrap_or_default().chars().take(MAX_QUOTED_ERROR).collect();
            format!("run {run} ended its interpreter: {first_line}")
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_1_to_64_plain_characters_and_a_refused_one_is_shown() {
        for good in ["a", "data-2026_q1", &"x".repeat(MAX_NAME)] {
            assert!(SessionKey::new("stdio".into(), good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "../x", "é", &"x".repeat(MAX_NAME + 1)] {
            let refused = SessionKey::new("stdio".into(), bad).unwrap_err().to_string();
            assert!(
                refused.contains(&format!("{:?}", bad.chars().take(MAX_NAME + 1).collect::<String>())),
                "{refused}"
            );
        }
        assert_ne!(SessionKey::new("a".into(), "s"), SessionKey::new("b".into(), "s"), "the owner is part of it");
    }

    #[test]
    fn the_answer_says_whether_the_session_is_new_kept_or_ended_and_why() {
        let info = |new, runs, previous_ended: Option<&str>, ended: Option<&str>| SessionInfo {
            name: "s".into(),
            new,
            runs,
            previous_ended: previous_ended.map(str::to_string),
            ended: ended.map(str::to_string),
        };
        assert_eq!(info(true, 1, None, None).lines(), "[session 's': new]");
        assert_eq!(info(false, 3, None, None).lines(), "[session 's': kept, run 3]");
        assert_eq!(
            info(true, 1, Some("it was idle"), None).lines(),
            "[session 's': new; the earlier session of this name ended (it was idle): its variables and files are gone]"
        );
        assert_eq!(
            info(false, 2, None, Some("run 2 was cancelled")).lines(),
            "[session 's': kept, run 2]\n[session 's' ended: run 2 was cancelled; the next run with this name starts \
             anew]"
        );
    }

    #[test]
    fn an_ending_names_the_run_and_quotes_only_the_first_line_of_its_error() {
        let report = |outcome, error: &str| RunReport { outcome, error: Some(error.into()), ..RunReport::default() };
        assert_eq!(why_it_ended(&report(Outcome::Timeout, "TimeoutError: …"), 4), "run 4 reached its time limit");
        assert_eq!(why_it_ended(&report(Outcome::Cancelled, "x"), 1), "run 1 was cancelled");
        let crash = report(Outcome::Error, &format!("ExecutionError: it ended {}\nmore", "y".repeat(500)));
        let why = why_it_ended(&crash, 2);
        assert!(why.starts_with("run 2 ended its interpreter: ExecutionError: it ended yyy"), "{why}");
        assert!(!why.contains("more") && why.len() < 260, "{why}");
    }

    #[test]
    fn endings_are_remembered_once_each_and_only_so_many() {
        let sessions = Sessions::new(&SessionsConfig::default(), TaskTracker::new());
        let key = |i: usize| SessionKey::new("o".into(), &format!("s{i}")).unwrap();
        for i in 0..REMEMBERED_ENDINGS + 10 {
            sessions.inner.record_ending(key(i), format!("why {i}"));
        }
        sessions.inner.record_ending(key(20), "again".into());
        assert_eq!(lock(&sessions.inner.endings).len(), REMEMBERED_ENDINGS);
        assert_eq!(sessions.inner.take_ending(&key(0)), None, "the oldest were forgotten");
        assert_eq!(sessions.inner.take_ending(&key(20)).as_deref(), Some("again"), "the latest ending of a key");
        assert_eq!(sessions.inner.take_ending(&key(20)), None, "said once");
        assert_eq!(sessions.inner.take_ending(&key(REMEMBERED_ENDINGS + 9)).as_deref(), Some("why 265"));
    }

    #[tokio::test]
    async fn a_claim_dropped_before_its_run_started_leaves_no_session_behind() {
        let sessions = Sessions::new(&SessionsConfig { max: 1, ..SessionsConfig::default() }, TaskTracker::new());
        let key = SessionKey::new("o".into(), "s").unwrap();
        sessions.inner.record_ending(key.clone(), "it was idle".into());
        let claim = sessions.claim(key.clone()).await.unwrap();
        assert_eq!(claim.info.previous_ended.as_deref(), Some("it was idle"));
        drop(claim);
        assert!(lock(&sessions.inner.slots).is_empty());
        let again = sessions.claim(key).await.unwrap();
        assert_eq!(again.info.previous_ended.as_deref(), Some("it was idle"), "still said by the run that starts it");
        let other = SessionKey::new("o".into(), "t").unwrap();
        assert!(matches!(sessions.claim(other).await, Err(Full(1))), "the one live session is not idle");
    }
}
