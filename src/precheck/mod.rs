//! The server's own check of a program's tool calls, so the runner can skip its check (`execution.precheck`).
//!
//! The runner's check (backends/src/checks.py) builds CPython's syntax tree of the whole program: several
//! milliseconds on every run that calls a tool. Nearly every program's calls are sound, and proving that with
//! ruff's parser takes a tenth of that. So the server parses first, and only when it cannot prove every
//! statically visible tool call sound does the runner run its check, which finds and words the mistakes.
//!
//! The proof is deliberately stricter than the runner's check: whatever it cannot judge for certain
//! (a name bound to an `mcp__` name, a call assigned without `await`, an argument it cannot evaluate, a
//! program it cannot parse) counts as unproven. So skipping the runner's check never lets through a mistake
//! that check would have reported, and a program is never rejected here: this side only ever says "sound"
//! or "ask the runner".
//!
//! The same parse tells `ptc-mcp run` which tools a program names ([`tools_named`]), so that it waits only for
//! their servers.

mod literal;
mod named;
#[cfg(test)]
mod properties;
mod walk;

#[cfg(test)]
mod tests;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use ruff_python_ast::token::{TokenKind, Tokens};
use ruff_python_ast::visitor::Visitor;
use tokio::sync::oneshot;
use unicode_normalization::UnicodeNormalization;

use crate::naming::PREFIX;
use crate::registry::Catalog;
pub use named::ToolsNamed;

/// Larger programs are left to the runner. The parse's recursion (and the syntax tree's depth) is bounded by
/// the program's length, so this bound keeps it inside [`STACK_BYTES`]; and some hostile shapes parse in time
/// that grows with the square of their length (nested f-strings: 0.2 s for 32 KiB here).
const MAX_PROGRAM_BYTES: usize = 32 * 1024;

/// The check thread's stack, eight times what the deepest programs within the bound need in a debug build
/// (tests.rs: 4 MiB hold them, 2 MiB do not). Reserved, not resident: only the pages a deep program reaches are
/// touched, and they go back when the thread ends.
const STACK_BYTES: usize = 32 * 1024 * 1024;

/// How long a run waits for the verdict: a program that takes longer is checked by the runner as if the server
/// had not proven it (the verdict comes later, unheard). A hundred times what a 200-line program takes.
const PATIENCE: Duration = Duration::from_millis(50);

/// Whether every statically visible tool call of `code` is sound against `catalog`: parsed on a thread of its
/// own (a long program takes milliseconds, which the server's runtime thread must not spend).
pub async fn proves_sound(code: &str, catalog: &Arc<Catalog>) -> bool {
    if let Some(verdict) = verdict_without_parsing(code) {
        return verdict;
    }
    match check_on_own_thread(code, catalog) {
        Ok(verdict) => matches!(tokio::time::timeout(PATIENCE, verdict).await, Ok(Ok(true))),
        Err(e) => {
            tracing::warn!("cannot start the precheck thread, the runner checks the program: {e}");
            false
        }
    }
}

fn check_on_own_thread(code: &str, catalog: &Arc<Catalog>) -> std::io::Result<oneshot::Receiver<bool>> {
    let (answer, verdict) = oneshot::channel();
    let (code, catalog) = (code.to_owned(), Arc::clone(catalog));
    std::thread::Builder::new().name("ptc-precheck".into()).stack_size(STACK_BYTES).spawn(move || {
        // A parser bug must cost the shortcut, not the server.
        let sound = catch_unwind(AssertUnwindSafe(|| parsed_and_sound(&code, &catalog))).unwrap_or(false);
        let _ = answer.send(sound);
    })?;
    Ok(verdict)
}

/// The tools `code` names (see [`ToolsNamed`]), read on a thread of its own with the stack a parse needs.
/// Blocks until it is read: for a command that reads one program before it starts anything.
pub fn tools_named(code: &str) -> ToolsNamed {
    if code.len() > MAX_PROGRAM_BYTES {
        return ToolsNamed::Any;
    }
    let code = code.to_owned();
    let thread = std::thread::Builder::new()
        .name("ptc-precheck".into())
        .stack_size(STACK_BYTES)
        .spawn(move || named::tools_named(&code));
    match thread.map(|thread| thread.join()) {
        Ok(Ok(named)) => named,
        // No thread, or a parser bug: what the program names is unknown.
        _ => ToolsNamed::Any,
    }
}

/// [`proves_sound`] on the calling thread (for tests: the longest programs need a stack like [`STACK_BYTES`]).
#[cfg(test)]
fn calls_are_sound(code: &str, catalog: &Catalog) -> bool {
    verdict_without_parsing(code).unwrap_or_else(|| parsed_and_sound(code, catalog))
}

/// The verdict when the text decides it: no tool named (nothing to check), or too long to parse here. Python
/// reads identifiers NFKC-normalised (`ｍcp__` is `mcp__`), so only an ASCII text without `mcp__` names
/// no tool; any other is parsed, and the syntax tree's names are normalised as Python's are.
fn verdict_without_parsing(code: &str) -> Option<bool> {
    if code.is_ascii() && !code.contains(PREFIX) {
        Some(true)
    } else if code.len() > MAX_PROGRAM_BYTES {
        Some(false)
    } else {
        None
    }
}

fn parsed_and_sound(code: &str, catalog: &Catalog) -> bool {
    let Ok(parsed) = ruff_python_parser::parse_module(code) else {
        return false;
    };
    let mut walk = walk::Soundness::new(catalog);
    walk.visit_body(&parsed.syntax().body);
    // Every `mcp__` identifier must have been a name the walk read: one anywhere else (bound by an assignment,
    // a `def`, an import, a parameter, `global`, a pattern; a keyword's name) is a case the runner judges.
    walk.is_sound() && walk.tool_names_read() == mcp_identifiers(parsed.tokens(), code)
}

fn mcp_identifiers(tokens: &Tokens, code: &str) -> usize {
    tokens
        .iter()
        .filter(|token| {
            let (kind, range) = token.as_tuple();
            kind == TokenKind::Name && names_a_tool(&code[range])
        })
        .count()
}

/// Whether the identifier `text` is an `mcp__` name as Python reads it.
fn names_a_tool(text: &str) -> bool {
    if text.is_ascii() { text.starts_with(PREFIX) } else { text.nfkc().take(PREFIX.len()).eq(PREFIX.chars()) }
}
