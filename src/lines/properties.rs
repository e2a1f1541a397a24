//! Property tests of the line reader and the `"id"` scanner over generated input (src/fuzzing.rs): lines as a
//! plain split gives them, whatever the reads' sizes and however often a read is dropped half-way; the id
//! serde_json reads, or none, never another; memory bounded by the line limit, not by the input.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::FutureExt;
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

use super::top_level_id::IdScanner;
use super::*;
use crate::fuzzing::{self, Bytes, Rng, length, pick};

/// Cases per property in a plain `cargo test` (`PTC_FUZZ_CASES` for more).
const CASES: usize = 300;

/// A JSON-RPC-like object, valid or (now and then) broken, with `"id"` keys in the places that trip a scanner.
fn json_object(rng: &mut Rng) -> String {
    let mut members = Vec::new();
    for _ in 0..rng.usize(0..6) {
        let key = pick(
            rng,
            &[r#""id""#, r#""i\\d""#, r#""\u0069d""#, r#""i\u0064""#, r#""idx""#, r#""ID""#, r#""result""#, r#""""#],
        );
        members.push(format!("{}{key}{}:{}{}", space(rng), space(rng), space(rng), json_value(rng, 3)));
    }
    let text = format!("{{{}}}", members.join(","));
    if rng.u8(..) < 16 { mutated(rng, text.into_bytes()).into_iter().map(char::from).collect() } else { text }
}

fn json_value(rng: &mut Rng, depth: usize) -> String {
    match rng.u8(..10) {
        0 => pick(rng, &["0", "-7", "12345678901234567890123", "1.5e3", "-0.0", "42"]).to_string(),
        1 => json_string(rng),
        2 => pick(rng, &["true", "null", "false"]).to_string(),
        3 if depth > 0 => {
            let items: Vec<String> = (0..rng.usize(0..4)).map(|_| json_value(rng, depth - 1)).collect();
            format!("[{}]", items.join(","))
        }
        4 if depth > 0 => {
            let members: Vec<String> =
                (0..rng.usize(0..4)).map(|_| format!("{}:{}", json_string(rng), json_value(rng, depth - 1))).collect();
            format!("{{{}}}", members.join(", "))
        }
        _ => rng.u64(..1000).to_string(),
    }
}

fn json_string(rng: &mut Rng) -> String {
    let pieces: Vec<&str> = (0..length(rng, 6, 300))
        .map(|_| {
            pick(rng, &["a", "id", "\\\"", "\\\\", "\\n", "\\u00e9", "\\ud83d\\ude00", "\"id\":", ",", "}", "é", " "])
        })
        .collect();
    // A `"` piece closes the string early: what follows is broken JSON, which the parsers must survive too.
    format!("\"{}\"", pieces.concat().replace("\"id\":", if rng.bool() { "\\\"id\\\":" } else { "\"id\":" }))
}

fn space(rng: &mut Rng) -> &'static str {
    pick(rng, &["", "", " ", "\t", "\r\n "])
}

/// `bytes` with a few bytes changed, inserted or removed.
fn mutated(rng: &mut Rng, mut bytes: Vec<u8>) -> Vec<u8> {
    for _ in 0..rng.usize(1..4) {
        let at = rng.usize(..=bytes.len());
        match rng.u8(..3) {
            0 if at < bytes.len() => bytes[at] = rng.u8(..),
            1 if at < bytes.len() => {
                bytes.remove(at);
            }
            _ => bytes.insert(at, *pick(rng, &[&b'"', &b'\\', &b'{', &b'}', &b',', &b':', &b'\n', &0xff])),
        }
    }
    bytes
}

/// The id serde_json reads from `line`, when it is an object: what the scanner must find, or nothing.
fn serde_id(line: &[u8]) -> Option<Option<Value>> {
    match serde_json::from_slice(line).ok()? {
        Value::Object(object) => {
            Some(object.get("id").filter(|id| matches!(id, Value::Number(_) | Value::String(_))).cloned())
        }
        _ => None,
    }
}

fn scanned(pieces: &[&[u8]]) -> Option<Value> {
    let mut scanner = IdScanner::default();
    for piece in pieces {
        scanner.feed(piece);
    }
    scanner.finish()
}

#[test]
fn the_scanner_finds_the_id_serde_json_reads_and_never_another() {
    fuzzing::check(
        "top-level-id",
        CASES * 4,
        |rng| {
            let line = json_object(rng).into_bytes();
            let split = rng.usize(..=line.len());
            (Bytes(line), split)
        },
        |(line, split)| {
            let split = *split;
            fuzzing::smaller_bytes(line).map(move |line| {
                let split = split.min(line.len());
                (Bytes(line), split)
            })
        },
        |(line, split)| {
            let found = scanned(&[&line[..*split], &line[*split..]]);
            let Some(expected) = serde_id(line) else { return };
            // An id longer than the scanner keeps (256 bytes as written, escapes up to 6 times what they stand
            // for) is not found; JSON-RPC ids are short.
            let short = expected.as_ref().is_none_or(|id| id.to_string().len() < 40);
            assert!(found == expected || (found.is_none() && !short), "found {found:?}, serde_json reads {expected:?}");
        },
    );
}

/// A reader that hands out at most the next of `reads` bytes per read, and is not ready every other poll.
struct Trickle {
    input: Vec<u8>,
    at: usize,
    reads: Vec<usize>,
    next_read: usize,
    ready: bool,
}

impl AsyncRead for Trickle {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let me = &mut *self;
        me.ready = !me.ready;
        if !me.ready {
            // Whoever polls this gives up at once (`now_or_never`): a read dropped half-way, as in a `select!`.
            return Poll::Pending;
        }
        let most = me.reads[me.next_read % me.reads.len()].max(1);
        me.next_read += 1;
        let n = most.min(buf.remaining()).min(me.input.len() - me.at);
        buf.put_slice(&me.input[me.at..me.at + n]);
        me.at += n;
        Poll::Ready(Ok(()))
    }
}

#[derive(Clone, Debug)]
struct Stream {
    input: Bytes,
    max_len: usize,
    reads: Vec<usize>,
    /// Whether each complete line is taken (as the stdio transport does) rather than borrowed.
    take: bool,
}

fn stream(rng: &mut Rng) -> Stream {
    let mut input = Vec::new();
    for _ in 0..rng.usize(0..8) {
        match rng.u8(..4) {
            0 => input.extend(std::iter::repeat_n(b'x', length(rng, 100, 3 << 20))),
            1 => input.extend((0..length(rng, 50, 1000)).map(|_| rng.u8(..))),
            _ => input.extend(json_object(rng).bytes()),
        }
        input.extend_from_slice(pick(rng, &[&b"\n"[..], b"\r\n", b"\n\n", b""]));
    }
    let max_len = *pick(rng, &[&1, &10, &100, &1000, &(64 * 1024), &(1 << 20)]);
    // Reads of a byte or two through megabytes would take the test minutes.
    let fewest = input.len() / 1000;
    let reads = (0..rng.usize(1..5)).map(|_| fewest.max(*pick(rng, &[&1, &7, &100, &4096, &(1 << 20)]))).collect();
    Stream { input: Bytes(input), max_len, reads, take: rng.bool() }
}

/// The lines of `input` as a plain split gives them (a last line without `\n` counts), as the reader must.
fn expected_lines(input: &[u8], max_len: usize) -> Vec<Result<Vec<u8>, usize>> {
    let mut lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
    if lines.last().is_some_and(|last| last.is_empty()) {
        lines.pop();
    }
    lines.into_iter().map(|line| if line.len() <= max_len { Ok(line.to_vec()) } else { Err(line.len()) }).collect()
}

#[test]
fn lines_come_as_a_plain_split_gives_them_however_they_are_read_in_memory_bounded_by_the_limit() {
    fuzzing::check(
        "line-reader",
        CASES,
        stream,
        |case| {
            let case = case.clone();
            fuzzing::smaller_bytes(&case.input).map(move |input| Stream { input: Bytes(input), ..case.clone() })
        },
        |case| {
            let expected = expected_lines(&case.input, case.max_len);
            let trickle =
                Trickle { input: case.input.to_vec(), at: 0, reads: case.reads.clone(), next_read: 0, ready: false };
            let ((), peak) = fuzzing::peak_allocated(|| {
                let mut reader = LineReader::new(trickle, case.max_len);
                let mut expected = expected.iter();
                for index in 0.. {
                    let line = loop {
                        if let Some(line) = reader.next_line().now_or_never() {
                            break line.unwrap();
                        }
                    };
                    let line = match line {
                        Line::End => break,
                        Line::Complete(line) if !case.take => Ok(line.to_vec()),
                        Line::Complete(_) => Ok(reader.take_line()),
                        Line::TooLong { len, id } => {
                            // The id, if any, is the one of that line (the scanner's own property says which).
                            let line = expected.clone().next();
                            assert!(id.is_none() || matches!(line, Some(Err(_))), "an id {id:?} for {line:?}");
                            Err(len)
                        }
                    };
                    assert_eq!(Some(&line), expected.next(), "line {index}");
                }
                assert_eq!(expected.next(), None, "lines missing");
            });
            // What the reader holds: a line up to the limit and a read beyond it, in a buffer that may have
            // doubled (while it grows, the old one too), and the line it hands out; never the input.
            let longest = expected.iter().map(|line| line.as_ref().map_or_else(|&len| len, Vec::len)).max();
            let bound = 5 * (longest.unwrap_or(0).min(case.max_len) + READ_CHUNK) + 64 * 1024;
            assert!(peak <= bound, "{peak} bytes held for lines of at most {longest:?} bytes (bound {bound})");
        },
    );
}
