//! Property tests of the server's check over generated programs (src/fuzzing.rs): whatever it proves sound,
//! the runner's check finds nothing wrong with (the promise the shortcut rests on); and any text, however
//! broken, gets a verdict without a panic, in memory bounded by its length.

use super::tests::{catalog, runner_findings};
use super::*;
use crate::fuzzing::{self, Rng, pick};

/// Programs per batch (the runner's check of a batch is one Python process) and batches per test.
const BATCH: usize = 60;
const BATCHES: usize = 4;
/// Cases of the property that needs no Python.
const CASES: usize = 400;

/// A tool's name as a program may spell it: a tool of the catalog or not, now and then in characters that
/// Python reads as ASCII ones (NFKC).
fn tool(rng: &mut Rng) -> String {
    let name = pick(
        rng,
        &["mcp__demo__query", "mcp__demo__list", "mcp__demo__open", "mcp__demo__rows", "mcp__demo__qurey", "mcp__x__y"],
    );
    compatible(rng, name)
}

/// `name` with, now and then, a letter or `_` written as a character that NFKC makes it.
fn compatible(rng: &mut Rng, name: &str) -> String {
    if rng.u8(..) >= 48 {
        return name.to_string();
    }
    let at = rng.usize(..name.len());
    name.char_indices()
        .map(|(i, c)| match c {
            _ if i != at => c.to_string(),
            // Fullwidth forms (U+FF01..) of ASCII letters and `_`; a mathematical bold small m.
            'a'..='z' | '_' => char::from_u32(c as u32 - 0x20 + 0xFF00).map_or(c.to_string(), String::from),
            _ => c.to_string(),
        })
        .map(|c| if c == "\u{ff4d}" && rng.bool() { "\u{1d426}".to_string() } else { c })
        .collect()
}

fn argument(rng: &mut Rng) -> String {
    if rng.bool() {
        return format!("{}='A'", compatible(rng, "ticker"));
    }
    let keyword = pick(
        rng,
        &["ticker", "tickr", "statement", "limit", "ratio", "flag", "from_", "size", "items", "filter", "whatever"],
    );
    let value = pick(
        rng,
        &[
            "'A'",
            "5",
            "2.5",
            "2.0",
            "True",
            "None",
            "[1]",
            "(1,)",
            "{'a': 1}",
            "b'x'",
            "1j",
            "...",
            "-3",
            "+2.5",
            "1 + 1",
            "-True",
            "123456789012345678901234567890",
            "n",
            "f(x)",
            "'income'",
            "'incme'",
            "'balance'",
            "float('nan')",
            "1e400",
            "-0.0",
            "not x",
            "{1}",
            "f'{n}'",
            "'\u{e9}'",
        ],
    );
    match rng.u8(..12) {
        0 => format!("*{value}"),
        1 => "**k".into(),
        2 => value.to_string(),
        _ => format!("{}={value}", compatible(rng, keyword)),
    }
}

fn call(rng: &mut Rng) -> String {
    let arguments: Vec<String> = (0..rng.usize(0..4)).map(|_| argument(rng)).collect();
    format!("{}({})", tool(rng), arguments.join(", "))
}

/// One statement (or a few lines) of the shapes models write, and of the shapes that trip a check.
fn statement(rng: &mut Rng) -> String {
    let (t, c) = (tool(rng), call(rng));
    match rng.u8(..30) {
        0..=5 => format!("print(await {c})"),
        6..=8 => format!("r = await {c}"),
        9 => c,
        10 => format!("x = {c}\nprint(x['a'])"),
        11 => format!("x = {c}\nprint(await x)"),
        12 => format!("import asyncio\nprint(await asyncio.gather({c}, *[{c} for _ in 'ab']))"),
        13 => format!("print({c}['x'])"),
        14 => format!("print({c}.y)"),
        15 => format!("for r in {c}:\n    pass"),
        16 => format!("print([r for r in {c}])"),
        17 => format!("f = {t}\nprint(await f())"),
        18 => format!("{t} = print\n{t}(1)"),
        19 => format!("def g({t}):\n    return {t}"),
        20 => format!("import json as {t}"),
        21 => format!("f = lambda: {c}\nprint(await f())"),
        22 => format!("print(x.{t})"),
        23 => format!("try:\n    f = {t}\nexcept NameError:\n    f = None"),
        24 => format!("print(await globals()['{t}']())"),
        25 => format!("match x:\n    case {t}:\n        pass"),
        26 => format!("async def g():\n    return await {c}\nprint(await g())"),
        27 => format!("del {t}"),
        28 => format!("s = '{t}'  # {c}"),
        _ => pick(rng, &["x = (", "n = 'many'", "k = {'ticker': 'A'}", "print(1)", "if x:\n    pass", "\u{ff4e} = 1"])
            .to_string(),
    }
}

fn program(rng: &mut Rng) -> String {
    let statements: Vec<String> = (0..rng.usize(1..4)).map(|_| statement(rng)).collect();
    statements.join("\n")
}

/// Smaller variants of a batch: each program alone, then one of its lines removed.
fn smaller_batch(batch: &[String]) -> Vec<Vec<String>> {
    if batch.len() > 1 {
        return batch.iter().map(|program| vec![program.clone()]).collect();
    }
    let lines: Vec<&str> = batch[0].lines().collect();
    (0..lines.len())
        .map(|drop| {
            let kept: Vec<&str> = lines.iter().enumerate().filter(|(i, _)| *i != drop).map(|(_, line)| *line).collect();
            vec![kept.join("\n")]
        })
        .collect()
}

#[test]
fn what_the_server_proves_sound_of_generated_programs_the_runners_check_passes() {
    fuzzing::check(
        "precheck-vs-runner",
        BATCHES,
        |rng| (0..BATCH).map(|_| program(rng)).collect::<Vec<String>>(),
        |batch| smaller_batch(batch),
        |batch| {
            let catalog = catalog();
            let programs: Vec<&str> = batch.iter().map(String::as_str).collect();
            let findings = runner_findings(&catalog, &programs);
            for (code, findings) in programs.iter().zip(&findings) {
                if calls_are_sound(code, &catalog) {
                    assert!(findings.is_empty(), "proven sound, but the runner finds {findings:?}:\n{code}");
                }
            }
        },
    );
}

/// Any text: a program cut, spliced and sprinkled with bytes that matter to a tokenizer; now and then one
/// nested deeply.
fn broken_program(rng: &mut Rng) -> String {
    let mut code = program(rng);
    if rng.u8(..) < 8 {
        let (open, close) =
            pick(rng, &[&("(", ")"), &("[", "]"), &("-", ""), &("f\"{", "}\""), &("x.", ""), &("{1: ", "}")]);
        let depth = rng.usize(..(MAX_PROGRAM_BYTES - code.len()) / (open.len() + close.len()));
        code = format!("{code}\nx = {}1{}\n", open.repeat(depth), close.repeat(depth));
    }
    for _ in 0..rng.usize(0..6) {
        let mut at = rng.usize(..=code.len());
        while !code.is_char_boundary(at) {
            at -= 1;
        }
        let piece = pick(
            rng,
            &[
                "(",
                ")",
                "[",
                "{",
                "\"",
                "'",
                "'''",
                "f'{",
                "}",
                "\\",
                "\n",
                "\r",
                "\t",
                " ",
                "#",
                ":",
                "=",
                "await ",
                "lambda ",
                "mcp__",
                "\u{ff4d}cp__",
                "\u{0}",
                "\u{feff}",
                "\u{2028}",
                "\u{e9}",
                "\u{301}",
                "case ",
                "*",
            ],
        );
        match rng.u8(..3) {
            0 => code.truncate(at),
            _ => code.insert_str(at, piece),
        }
    }
    code
}

#[test]
fn any_text_gets_a_verdict_without_panic_in_memory_bounded_by_its_length() {
    fuzzing::check(
        "precheck-any-text",
        CASES,
        broken_program,
        |code| fuzzing::smaller_text(code),
        |code| {
            let catalog = catalog();
            let (_, peak) = fuzzing::peak_allocated(|| calls_are_sound(code, &catalog));
            // The parser's tree: up to ~90 bytes per byte of a program nested as deeply as it can be.
            let bound = 256 * code.len() + (1 << 20);
            assert!(peak <= bound, "{peak} bytes held to check {} bytes", code.len());
        },
    );
}
