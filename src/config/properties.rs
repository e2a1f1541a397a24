//! Property tests of the config parser over generated documents (src/fuzzing.rs): any text, config-shaped or
//! broken, anchors and aliases included, is accepted or refused with a one-line error, in time and memory
//! bounded whatever the aliases repeat.

use super::*;
use crate::fuzzing::{self, Rng, length, pick};

/// Cases in a plain `cargo test` (`PTC_FUZZ_CASES` for more).
const CASES: usize = 400;

fn env(name: &str) -> Option<String> {
    (name == "TOKEN").then(|| "s3cret".to_string())
}

/// A value where the config may or may not want one: scalars of every YAML kind, `${VAR}` references, lists,
/// maps, and aliases of anchors defined before.
fn value(rng: &mut Rng, anchors: &mut Vec<String>, depth: usize) -> String {
    match rng.u8(..12) {
        0 if depth > 0 => {
            let items: Vec<String> = (0..length(rng, 3, 40)).map(|_| value(rng, anchors, depth - 1)).collect();
            format!("[{}]", items.join(", "))
        }
        1 if depth > 0 => {
            let members: Vec<String> =
                (0..length(rng, 3, 20)).map(|_| format!("{}: {}", key(rng), value(rng, anchors, depth - 1))).collect();
            format!("{{{}}}", members.join(", "))
        }
        2 if depth > 0 => {
            let name = format!("a{}", anchors.len());
            let anchored = format!("&{name} {}", value(rng, anchors, depth - 1));
            anchors.push(name);
            anchored
        }
        3 if !anchors.is_empty() => format!("*{}", anchors[rng.usize(..anchors.len())]),
        _ => pick(
            rng,
            &[
                "x",
                "''",
                "~",
                "null",
                "true",
                "sometimes",
                "0",
                "-1",
                "1e400",
                ".nan",
                ".inf",
                "-.inf",
                "0x10",
                "120",
                "0.5",
                "99999999999999999999",
                "\"${TOKEN}\"",
                "${UNSET}",
                "${UNSET:-d}",
                "\"${\"",
                "${A B}",
                "\"a\\nb\"",
                "!!binary aGk=",
                "!custom 1",
                "'mcp__*__x'",
                "\"a[\"",
                "stdio",
                "http",
                "sse",
                "https://h/mcp",
                "landlock",
                "none",
                "summary",
                "\"\\u0000\"",
                "|\n  block\n",
            ],
        )
        .to_string(),
    }
}

fn key(rng: &mut Rng) -> &'static str {
    pick(
        rng,
        &[
            "servers",
            "tools",
            "execution",
            "serve",
            "logging",
            "name",
            "transport",
            "command",
            "args",
            "env",
            "url",
            "headers",
            "connect_timeout_seconds",
            "allow",
            "block",
            "confirm",
            "confirm_timeout_seconds",
            "timeout_seconds",
            "max_output_bytes",
            "sandbox",
            "max_tool_calls",
            "precheck",
            "pool_size",
            "http",
            "token",
            "audit_file",
            "bogus",
            "? complex",
            "<<",
        ],
    )
}

/// A config-shaped document: top-level keys with values, a server list, now and then a pile of aliases each
/// repeating the one before (a few hundred bytes that stand for millions of values), and a few bytes
/// changed.
fn document(rng: &mut Rng) -> String {
    let mut anchors = Vec::new();
    let mut text = String::new();
    for _ in 0..rng.usize(0..5) {
        match rng.u8(..16) {
            0..=3 => {
                text.push_str("servers:\n");
                for _ in 0..rng.usize(0..3) {
                    text.push_str(&format!("  - name: {}\n", value(rng, &mut anchors, 0)));
                    for _ in 0..rng.usize(0..4) {
                        text.push_str(&format!("    {}: {}\n", key(rng), value(rng, &mut anchors, 2)));
                    }
                }
            }
            4 => {
                let (levels, width) = (rng.usize(1..5), rng.usize(1..60));
                let base = anchors.len();
                text.push_str(&format!("k{base}: &a{base} [{}]\n", vec!["x"; width].join(", ")));
                for level in 1..levels {
                    let aliases = vec![format!("*a{}", base + level - 1); width].join(", ");
                    text.push_str(&format!("k{}: &a{} [{aliases}]\n", base + level, base + level));
                }
                anchors.extend((base..base + levels).map(|n| format!("a{n}")));
            }
            _ => text.push_str(&format!("{}: {}\n", key(rng), value(rng, &mut anchors, 3))),
        }
    }
    if rng.u8(..) < 64 {
        for _ in 0..rng.usize(1..4) {
            let mut at = rng.usize(..=text.len());
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.insert_str(
                at,
                pick(rng, &[":", "- ", "\n", "  ", "&b ", "*b", "[", "{", "'", "\"", "#", "\t", "\u{0}"]),
            );
        }
    }
    text
}

#[test]
fn any_document_is_accepted_or_refused_in_one_line_in_bounded_time_and_memory() {
    fuzzing::check(
        "config",
        CASES,
        document,
        |text| fuzzing::smaller_text(text),
        |text| {
            let (parsed, peak) = fuzzing::peak_allocated(|| Config::parse(text, &env));
            if let Err(error) = parsed {
                let message = error.to_string();
                assert!(!message.contains('\n'), "an error of more than one line: {message:?}");
                assert!(!message.contains("s3cret"), "an error that shows a variable's value: {message:?}");
            }
            let bound = (16 << 20) + 4096 * text.len();
            assert!(peak <= bound, "{peak} bytes held to read a config of {} bytes", text.len());
        },
    );
}
