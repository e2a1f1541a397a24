//! Property tests for the parsers that read untrusted input (programs, downstream lines, event streams,
//! config): generated inputs, each checked for no panic, no hang and bounded memory, plus whatever else the
//! parser promises. Stable Rust, no fuzzing engine: a seeded generator (`fastrand`), a watchdog per case, an
//! allocation meter, and a shrinker that reports a small failing input.
//!
//! Each test runs a modest number of cases so `cargo test` stays fast. `PTC_FUZZ_CASES=<n>` runs n cases per
//! property instead; `PTC_FUZZ_SEED=<seed>` starts from that seed (a failure says how to replay its case).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt::Debug;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub use fastrand::Rng;

/// How long one case may take before it counts as a hang: far beyond any case's real time in a debug build on
/// a busy machine, far below a test run's patience.
const PATIENCE: Duration = Duration::from_secs(20);
/// The case thread's stack: room for the deepest inputs a parser accepts (the server's check needs 32 MiB).
const STACK_BYTES: usize = 64 * 1024 * 1024;
/// Candidates tried while shrinking a failing input, and time spent on it, at most.
const SHRINK_TRIES: usize = 4000;
const SHRINK_TIME: Duration = Duration::from_secs(10);
/// The longest rendering of an input a failure message shows.
const SHOWN_CHARS: usize = 4000;
/// The name of the thread that runs the cases: its panics are caught and reported, not printed (the
/// shrinker's candidates fail by design, and would bury the failure that matters).
const CASE_THREAD: &str = "fuzz-case";

/// A property: `cases` inputs from `generate`, each passed to `check`, which panics when the property fails.
/// `shrink` gives smaller variants of an input (see [`smaller_bytes`]), tried to find a small failing one.
pub fn check<T, G, S, I, C>(name: &str, cases: usize, generate: G, shrink: S, check: C)
where
    T: Clone + Debug + Send + 'static,
    G: Fn(&mut Rng) -> T + Send + 'static,
    S: Fn(&T) -> I + Send + 'static,
    I: IntoIterator<Item = T>,
    C: Fn(&T) + Send + 'static,
{
    let cases = env_number("PTC_FUZZ_CASES").map_or(cases, |n| n as usize);
    let seed = env_number("PTC_FUZZ_SEED").unwrap_or_else(|| fastrand::u64(..));
    let (report, reports) = mpsc::channel();
    capture_panics_of_cases();
    let worker = std::thread::Builder::new().name(CASE_THREAD.into()).stack_size(STACK_BYTES).spawn(move || {
        for case in 0..cases {
            let input = generate(&mut Rng::with_seed(seed.wrapping_add(case as u64)));
            let _ = report.send(Report::Started(case, input.clone()));
            if let Some(failure) = failure_of(&check, &input) {
                let _ = report.send(Report::Shrinking);
                let (smallest, failure) = shrunk(input, failure, &shrink, &check);
                let _ = report.send(Report::Failed(smallest, failure));
                return;
            }
        }
        let _ = report.send(Report::Done);
    });
    worker.expect("the property's thread starts");
    let replay = |case: usize| format!("PTC_FUZZ_SEED={} PTC_FUZZ_CASES=1 replays it", seed.wrapping_add(case as u64));
    let (mut running, mut shrinking) = (None, false);
    loop {
        match (reports.recv_timeout(PATIENCE), running.take()) {
            (Ok(Report::Started(case, input)), _) => running = Some((case, input)),
            (Ok(Report::Shrinking), case) => (running, shrinking) = (case, true),
            (Ok(Report::Done), _) => return,
            (Ok(Report::Failed(input, failure)), case) => {
                let case = case.map_or(0, |(case, _)| case);
                panic!(
                    "property {name} fails at case {case} ({}): {failure}\nsmallest input found: {}",
                    replay(case),
                    shown(&input)
                )
            }
            (Err(_), Some((case, input))) if shrinking => {
                panic!(
                    "property {name} fails at case {case} ({}), shrinking did not end: {}",
                    replay(case),
                    shown(&input)
                )
            }
            (Err(_), Some((case, input))) => {
                panic!(
                    "property {name}: case {case} ({}) did not end within {PATIENCE:?}: {}",
                    replay(case),
                    shown(&input)
                )
            }
            (Err(_), None) => panic!("property {name}: no case started within {PATIENCE:?}"),
        }
    }
}

enum Report<T> {
    Started(usize, T),
    /// The case failed; the smallest failing input is being looked for.
    Shrinking,
    Failed(T, String),
    Done,
}

/// How `check` fails on `input` (its panic and where), if it does.
fn failure_of<T>(check: &impl Fn(&T), input: &T) -> Option<String> {
    catch_unwind(AssertUnwindSafe(|| check(input))).err().map(|_| LAST_PANIC.take())
}

/// The smallest variant of `input` that still fails, by greedy descent over `shrink`'s candidates, and how.
fn shrunk<T, S, I, C>(input: T, failure: String, shrink: &S, check: &C) -> (T, String)
where
    S: Fn(&T) -> I,
    I: IntoIterator<Item = T>,
    C: Fn(&T),
{
    let (mut smallest, mut how) = (input, failure);
    let (mut tries, started) = (0, Instant::now());
    'descent: loop {
        for candidate in shrink(&smallest) {
            if tries == SHRINK_TRIES || started.elapsed() > SHRINK_TIME {
                break 'descent;
            }
            tries += 1;
            if let Some(failure) = failure_of(check, &candidate) {
                (smallest, how) = (candidate, failure);
                continue 'descent;
            }
        }
        break;
    }
    (smallest, how)
}

/// Smaller variants of `bytes`, made one at a time: halves, then ever shorter runs removed, then (in short
/// inputs) letters and digits made `a`.
pub fn smaller_bytes(bytes: &[u8]) -> impl Iterator<Item = Vec<u8>> + use<> {
    let bytes = bytes.to_vec();
    let len = bytes.len();
    let runs = std::iter::successors(Some(len / 2), |run| Some(run / 2)).take_while(|&run| run > 0);
    let removals = runs.flat_map(move |run| (0..len).step_by(run).map(move |start| (start, (start + run).min(len))));
    let plain = (0..if len <= 1000 { len } else { 0 }).map(|at| (at, at));
    removals.chain(plain).filter_map(move |(start, end)| {
        if start < end {
            return Some([&bytes[..start], &bytes[end..]].concat());
        }
        let byte = bytes[start];
        (byte != b'a' && byte.is_ascii_alphanumeric()).then(|| {
            let mut plain = bytes.clone();
            plain[start] = b'a';
            plain
        })
    })
}

/// [`smaller_bytes`] for text: the variants that are still UTF-8.
pub fn smaller_text(text: &str) -> impl Iterator<Item = String> + use<> {
    smaller_bytes(text.as_bytes()).filter_map(|bytes| String::from_utf8(bytes).ok())
}

/// Bytes that show as a byte string (`b"{\"id\":1}\n"`) in failure messages, not as a list of numbers.
#[derive(Clone, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// `f`'s result and the most memory it held allocated at once, beyond what its thread held when it started
/// (allocations of other threads are not counted).
pub fn peak_allocated<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let start = LIVE.get();
    let outer_peak = PEAK.replace(start);
    let result = f();
    let peak = PEAK.get();
    PEAK.set(outer_peak.max(peak));
    (result, usize::try_from(peak - start).unwrap_or(0))
}

/// A cheap pick from `choices`.
pub fn pick<'a, T: ?Sized>(rng: &mut Rng, choices: &[&'a T]) -> &'a T {
    choices[rng.usize(..choices.len())]
}

/// A length that is usually small and now and then large: most bugs show on short inputs, some only past a
/// buffer's size.
pub fn length(rng: &mut Rng, usual: usize, rare: usize) -> usize {
    if rng.u8(..) < 16 { rng.usize(..=rare) } else { rng.usize(..=usual) }
}

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(value.parse().unwrap_or_else(|_| panic!("{name} must be a whole number, not {value:?}")))
}

fn shown(input: &impl Debug) -> String {
    let text = format!("{input:?}");
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((end, _)) => format!("{}... ({} chars)", &text[..end], text.chars().count()),
        None => text,
    }
}

/// Panics on the case thread are kept in [`LAST_PANIC`] (message and place) instead of being printed.
fn capture_panics_of_cases() {
    static CAPTURE: Once = Once::new();
    CAPTURE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(CASE_THREAD) {
                LAST_PANIC.set(info.to_string());
            } else {
                previous(info);
            }
        }));
    });
}

thread_local! {
    /// The last panic of a case thread, as the panic hook words it.
    static LAST_PANIC: Cell<String> = const { Cell::new(String::new()) };
    /// Bytes this thread has allocated and not freed (frees of other threads' allocations count too).
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// The most `LIVE` has been since the innermost [`peak_allocated`] began.
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// The system allocator, counting each thread's live bytes for [`peak_allocated`].
struct Counting;

// SAFETY: every call is passed to the system allocator unchanged; the counters are plain thread-local cells.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as isize);
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        grew(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn grew(bytes: isize) {
    // `try_with`: a thread's last frees can come after its thread-locals are gone.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + bytes;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meter_sees_what_a_closure_holds_at_once() {
        let ((), peak) = peak_allocated(|| {
            let big = vec![0u8; 1 << 20];
            drop(big);
            let small = vec![0u8; 1 << 10];
            drop(small);
        });
        assert!((1 << 20..(1 << 20) + 4096).contains(&peak), "{peak}");
    }

    #[test]
    fn a_failing_property_is_reported_with_a_small_input() {
        let failure = std::thread::spawn(|| {
            check(
                "no-x",
                200,
                |rng| (0..rng.usize(50..100)).map(|_| if rng.u8(..) < 8 { b'x' } else { b'-' }).collect::<Vec<u8>>(),
                |bytes| smaller_bytes(bytes),
                |bytes| assert!(!bytes.contains(&b'x'), "an x"),
            )
        })
        .join()
        .unwrap_err();
        let message = failure.downcast::<String>().unwrap();
        assert!(message.contains("src/fuzzing.rs"), "the place of the failure: {message}");
        assert!(message.ends_with("an x\nsmallest input found: [120]"), "{message}");
    }
}
