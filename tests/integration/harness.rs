//! The integration binary's own test harness, for one thing libtest cannot do: a test that finds a
//! prerequisite missing at run time (a third-party server, a sandbox) is reported as **ignored**, with the
//! reason, in the summary — not as `ok`. Tests are `async fn`s marked `#[apply(integration_test!)]`; each
//! runs on a current-thread tokio runtime, like `#[apply(integration_test!)]`.
//!
//! Command line (a subset of libtest's): name filters (substring; `--exact` for whole names), `--skip NAME`,
//! `--test-threads N` (default: `RUST_TEST_THREADS`, else the machine's parallelism), `--list`. Output is
//! never captured (`--nocapture` is accepted and changes nothing): the servers under test log to stderr.

use std::cell::RefCell;
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// One registered test.
pub struct Case {
    /// `module::name`, as libtest names tests.
    pub path: &'static str,
    pub run: fn() -> Pin<Box<dyn Future<Output = ()>>>,
}

inventory::collect!(Case);

/// Turns `async fn name() { … }` into a registered test.
#[macro_export]
macro_rules! integration_test {
    ($(#[$attr:meta])* async fn $name:ident() $body:block) => {
        $(#[$attr])*
        async fn $name() $body
        // The test's attributes hold for its registration too: a `cfg` leaves out both.
        $(#[$attr])*
        const _: () = {
            inventory::submit! {
                $crate::harness::Case {
                    path: concat!(module_path!(), "::", stringify!($name)),
                    run: || Box::pin($name()),
                }
            }
        };
    };
}

thread_local! {
    /// Why the test running on this thread skipped itself, if it did.
    static SKIPPED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Marks the running test as skipped for `reason`; the test then returns early.
pub fn skip(reason: &str) {
    SKIPPED.with(|skipped| *skipped.borrow_mut() = Some(reason.to_string()));
}

enum Outcome {
    Passed,
    Failed,
    Ignored(String),
}

struct Options {
    filters: Vec<String>,
    skips: Vec<String>,
    exact: bool,
    threads: usize,
    list: bool,
}

fn options() -> Result<Options, String> {
    let default_threads = std::env::var("RUST_TEST_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let mut options =
        Options { filters: Vec::new(), skips: Vec::new(), exact: false, threads: default_threads, list: false };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_string(), Some(value.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| inline.clone().or_else(|| args.next()).ok_or(format!("{name} needs a value"));
        match flag.as_str() {
            "--test-threads" => {
                options.threads = value("--test-threads")?.parse().map_err(|_| "--test-threads needs a number")?;
            }
            "--skip" => options.skips.push(value("--skip")?),
            "--exact" => options.exact = true,
            "--list" => options.list = true,
            // Output is never captured; these change nothing here.
            "--nocapture" | "--no-capture" | "--show-output" | "--quiet" | "-q" | "--include-ignored" => {}
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            _ => options.filters.push(arg),
        }
    }
    options.threads = options.threads.max(1);
    Ok(options)
}

impl Options {
    fn selects(&self, name: &str) -> bool {
        let matches = |pattern: &String| if self.exact { name == pattern } else { name.contains(pattern.as_str()) };
        (self.filters.is_empty() || self.filters.iter().any(matches)) && !self.skips.iter().any(matches)
    }
}

/// Runs the selected tests and exits: status 0 when none failed, 101 (like libtest) otherwise.
pub fn main() -> ! {
    let options = match options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let mut cases: Vec<(String, &Case)> = inventory::iter::<Case>
        .into_iter()
        .map(|case| (case.path.split_once("::").map_or(case.path, |(_, rest)| rest).to_string(), case))
        .collect();
    cases.sort_by(|a, b| a.0.cmp(&b.0));
    let total = cases.len();
    cases.retain(|(name, _)| options.selects(name));
    if options.list {
        for (name, _) in &cases {
            println!("{name}: test");
        }
        std::process::exit(0);
    }
    let started = Instant::now();
    println!("\nrunning {} tests", cases.len());
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(String, Outcome)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..options.threads.min(cases.len()).max(1) {
            scope.spawn(|| {
                while let Some((name, case)) = cases.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let outcome = run(case);
                    let shown = match &outcome {
                        Outcome::Passed => "ok".to_string(),
                        Outcome::Failed => "FAILED".to_string(),
                        Outcome::Ignored(reason) => format!("ignored, {reason}"),
                    };
                    println!("test {name} ... {shown}");
                    let _ = std::io::stdout().flush();
                    results.lock().unwrap_or_else(|e| e.into_inner()).push((name.clone(), outcome));
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    let count = |pick: fn(&Outcome) -> bool| results.iter().filter(|(_, outcome)| pick(outcome)).count();
    let passed = count(|o| matches!(o, Outcome::Passed));
    let failed: Vec<&String> =
        results.iter().filter(|(_, outcome)| matches!(outcome, Outcome::Failed)).map(|(name, _)| name).collect();
    let ignored = count(|o| matches!(o, Outcome::Ignored(_)));
    if !failed.is_empty() {
        println!("\nfailures:");
        for name in &failed {
            println!("    {name}");
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {} failed; {ignored} ignored; 0 measured; {} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len(),
        total - cases.len(),
        started.elapsed().as_secs_f64()
    );
    std::process::exit(if failed.is_empty() { 0 } else { 101 })
}

fn run(case: &Case) -> Outcome {
    SKIPPED.with(|skipped| skipped.borrow_mut().take());
    let finished = std::panic::catch_unwind(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        runtime.block_on((case.run)());
    });
    match (finished, SKIPPED.with(|skipped| skipped.borrow_mut().take())) {
        (Err(_), _) => Outcome::Failed,
        (Ok(()), Some(reason)) => Outcome::Ignored(reason),
        (Ok(()), None) => Outcome::Passed,
    }
}
