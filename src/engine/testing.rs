//! A sandbox backend for the engine's unit tests, whose probe and runner starts misbehave as a test asks:
//! they hang (a Docker engine that accepts and never answers) or panic.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use ptc_backends::{Availability, RunnerProcess, SandboxBackend, SandboxKind, SpawnError, SpawnRequest};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Answers,
    Hangs,
    Panics,
}

pub struct FakeBackend {
    probe: Behaviour,
    spawn: Behaviour,
    spawns: AtomicUsize,
    /// The time limit of each start asked for.
    timeouts: Mutex<Vec<Duration>>,
}

impl FakeBackend {
    /// A backend whose probe does `probe` (answering: available) and whose starts do `spawn` (answering: a
    /// start error).
    pub fn new(probe: Behaviour, spawn: Behaviour) -> Self {
        FakeBackend { probe, spawn, spawns: AtomicUsize::new(0), timeouts: Mutex::default() }
    }

    /// Runner starts asked for so far.
    pub fn spawns(&self) -> usize {
        self.spawns.load(Ordering::SeqCst)
    }

    /// The time limit of each start asked for so far.
    pub fn timeouts(&self) -> Vec<Duration> {
        self.timeouts.lock().unwrap().clone()
    }
}

async fn behave(behaviour: Behaviour) {
    match behaviour {
        Behaviour::Answers => {}
        Behaviour::Hangs => std::future::pending().await,
        Behaviour::Panics => panic!("the fake backend panics, as asked"),
    }
}

#[async_trait]
impl SandboxBackend for FakeBackend {
    fn kind(&self) -> SandboxKind {
        SandboxKind::None
    }

    async fn probe(&self) -> Availability {
        behave(self.probe).await;
        Availability::Available { detail: "fake".into() }
    }

    async fn spawn(&self, request: &SpawnRequest) -> Result<RunnerProcess, SpawnError> {
        self.spawns.fetch_add(1, Ordering::SeqCst);
        self.timeouts.lock().unwrap().push(request.timeout);
        behave(self.spawn).await;
        Err(SpawnError::Start { program: "fake".into(), source: std::io::Error::other("the fake starts nothing") })
    }
}
