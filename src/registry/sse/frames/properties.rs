//! Property tests of the event-stream parser over generated streams (src/fuzzing.rs): the events a plain
//! reading of the whole stream gives, however it is split into chunks; under a small bound, a prefix of them
//! and then an error; memory bounded by the bound and the chunks, not by the stream.

use bytes::Bytes;

use super::*;
use crate::fuzzing::{self, Rng, length, pick};

/// Cases in a plain `cargo test` (`PTC_FUZZ_CASES` for more).
const CASES: usize = 300;

#[derive(Clone, Debug)]
struct Stream {
    bytes: fuzzing::Bytes,
    /// Where the stream is cut into chunks.
    cuts: Vec<usize>,
    limit: usize,
}

fn stream(rng: &mut Rng) -> Stream {
    let mut bytes = Vec::new();
    if rng.u8(..) < 32 {
        bytes.extend_from_slice(pick(rng, &[&b"\xEF\xBB\xBF"[..], b"\xEF\xBB", b"\xEF\xBB\xBF\xEF\xBB\xBF"]));
    }
    for _ in 0..length(rng, 12, 200) {
        let line: Vec<u8> = match rng.u8(..10) {
            0..=3 => [&b"data"[..], pick(rng, &[&b": "[..], b":", b"", b":  "]), &text(rng)].concat(),
            4 => [&b"event: "[..], pick(rng, &[&b"message"[..], b"endpoint", b"", b"x y"])].concat(),
            5 => [&b": "[..], &text(rng)].concat(),
            6 => pick(rng, &[&b"id: 7"[..], b"retry: 10", b"data", b"event", b"unknown: x", b":"]).to_vec(),
            7 => (0..length(rng, 10, 100)).map(|_| rng.u8(..)).collect(),
            _ => Vec::new(),
        };
        bytes.extend_from_slice(&line);
        bytes.extend_from_slice(pick(rng, &[&b"\n"[..], b"\r\n", b"\r", b"\n"]));
    }
    if rng.bool() {
        bytes.extend_from_slice(pick(rng, &[&b"data: unterminated"[..], b"\r", b"\n", b"\r\n\r\n"]));
    }
    let mut cuts: Vec<usize> = (0..rng.usize(0..12)).map(|_| rng.usize(..=bytes.len())).collect();
    cuts.sort_unstable();
    let limit = if rng.bool() { usize::MAX } else { rng.usize(..200) };
    Stream { bytes: fuzzing::Bytes(bytes), cuts, limit }
}

fn text(rng: &mut Rng) -> Vec<u8> {
    // A lone 0xC3 is the first half of a character: broken UTF-8 inside a line.
    let pieces: [&[u8]; 6] = [b"x", b"{\"a\":1}", b" ", b":", "é".as_bytes(), b"\xC3"];
    (0..length(rng, 4, 2000)).flat_map(|_| pieces[rng.usize(..pieces.len())]).copied().collect()
}

/// The events of the whole stream read plainly: lines split at CRLF, LF or CR, the standard's fields, and
/// the unterminated end dropped.
fn expected_events(bytes: &[u8]) -> Vec<Event> {
    let mut rest = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let (mut events, mut event, mut data) = (Vec::new(), String::new(), None::<String>);
    while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
        let line = String::from_utf8_lossy(&rest[..end]);
        rest = &rest[end + if rest[end..].starts_with(b"\r\n") { 2 } else { 1 }..];
        if line.is_empty() {
            if let Some(data) = data.take() {
                let event = if event.is_empty() { "message".into() } else { std::mem::take(&mut event) };
                events.push(Event { event, data });
            }
            event.clear();
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((&line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = value.to_string(),
            "data" => match &mut data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => data = Some(value.to_string()),
            },
            _ => {}
        }
    }
    events
}

fn chunks(stream: &Stream) -> Vec<Result<Bytes, std::io::Error>> {
    let mut starts = vec![0];
    starts.extend(&stream.cuts);
    starts.push(stream.bytes.len());
    starts.windows(2).map(|cut| Ok(Bytes::copy_from_slice(&stream.bytes[cut[0]..cut[1]]))).collect()
}

#[test]
fn events_come_as_a_plain_reading_gives_them_however_the_stream_is_cut_in_memory_bounded_by_the_limit() {
    fuzzing::check(
        "sse-frames",
        CASES,
        stream,
        |stream| {
            let stream = stream.clone();
            let fewer_cuts = (0..stream.cuts.len()).map({
                let stream = stream.clone();
                move |drop| {
                    let mut cuts = stream.cuts.clone();
                    cuts.remove(drop);
                    Stream { cuts, ..stream.clone() }
                }
            });
            let smaller = fuzzing::smaller_bytes(&stream.bytes).map(move |bytes| Stream {
                cuts: stream.cuts.iter().map(|&cut| cut.min(bytes.len())).collect(),
                bytes: fuzzing::Bytes(bytes),
                limit: stream.limit,
            });
            fewer_cuts.chain(smaller)
        },
        |stream| {
            let expected = expected_events(&stream.bytes);
            let chunks = chunks(stream);
            let largest_chunk = chunks.iter().map(|chunk| chunk.as_ref().map_or(0, Bytes::len)).max().unwrap_or(0);
            let (got, peak) = fuzzing::peak_allocated(|| {
                let mut frames = Frames::new(futures::stream::iter(chunks), stream.limit);
                let mut got = Vec::new();
                let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
                runtime.block_on(async {
                    while let Some(event) = frames.next().await {
                        let failed = event.is_err();
                        got.push(event.ok());
                        if failed {
                            break;
                        }
                    }
                });
                got
            });
            let (events, failed) = match got.split_last() {
                Some((None, events)) => (events, true),
                _ => (&got[..], false),
            };
            let events: Vec<Event> = events.iter().flatten().cloned().collect();
            if stream.limit == usize::MAX {
                assert!(!failed, "an error without a bound");
                assert_eq!(events, expected);
            } else {
                assert_eq!(events[..], expected[..events.len().min(expected.len())], "not a prefix of the events");
                let bound = 4 * (stream.limit + largest_chunk) + (1 << 20);
                assert!(
                    peak <= bound,
                    "{peak} bytes held with a bound of {} and chunks up to {largest_chunk}",
                    stream.limit
                );
            }
        },
    );
}
