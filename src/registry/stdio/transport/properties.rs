//! Property tests of the stdio transport's reading over generated downstream output (src/fuzzing.rs):
//! whatever the lines (answers, notifications, garbage, overlong lines, byte order marks, CRs), every message
//! it gives is whole, an answer to a pending call comes as serde_json reads its result, the stream's end is
//! seen, and memory per message is bounded by the line limit.

use rmcp::model::{CallToolRequest, CallToolRequestParams, ContentBlock};
use serde_json::json;

use super::*;
use crate::fuzzing::{self, Bytes, Rng, length, pick};

/// Whether `given` is `expected`: itself, or a stand-in for a held result (a large one with structured content)
/// whose texts, other blocks, structured content and flags are `expected`'s.
fn same_result(given: &CallToolResult, expected: &CallToolResult) -> bool {
    let Some(held) = crate::registry::held::take(given) else { return given == expected };
    let texts: Vec<String> = held.texts().map(|text| text.into_owned()).collect();
    let expected_texts: Vec<String> =
        expected.content.iter().filter_map(|block| block.as_text().map(|text| text.text.clone())).collect();
    let others: Vec<&ContentBlock> = expected.content.iter().filter(|block| block.as_text().is_none()).collect();
    let structured: Value = serde_json::from_str(held.structured().get()).expect("held structured content is JSON");
    texts == expected_texts
        && held.others().iter().collect::<Vec<_>>() == others
        && Some(structured) == expected.structured_content
        && held.is_error == expected.is_error
        && held.meta == expected.meta
}

/// Cases in a plain `cargo test` (`PTC_FUZZ_CASES` for more).
const CASES: usize = 200;
/// Our pending calls are 1..=CALLS; answers go to those and a few others. Broken lines name none of them
/// (whether one counts as an answer is another property's business).
const CALLS: i64 = 4;
const NOT_OURS: i64 = 99;

#[derive(Clone, Debug)]
struct Output {
    lines: Vec<Bytes>,
    max_line: usize,
}

/// A tool result as servers write them.
fn tool_result(rng: &mut Rng) -> Value {
    let text = pick(rng, &["hi", "", "a \"quoted\"\nline", "é😀", "\u{0}"]).repeat(length(rng, 3, 30_000));
    let mut result = json!({"content": [{"type": "text", "text": text}]});
    if rng.bool() {
        result["structuredContent"] = json!({"rows": (0..rng.usize(0..20)).collect::<Vec<_>>(), "n": null});
    }
    if rng.bool() {
        result["isError"] = json!(rng.bool());
    }
    result
}

fn line(rng: &mut Rng) -> Vec<u8> {
    let id = rng.i64(1..=CALLS + 2);
    let message = match rng.u8(..12) {
        0..=4 => json!({"jsonrpc": "2.0", "id": id, "result": tool_result(rng)}).to_string(),
        5 => json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": "no"}}).to_string(),
        6 => json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}).to_string(),
        7 => json!({"jsonrpc": "2.0", "id": id, "result": {"content": "not a list"}}).to_string(),
        8 => format!(
            "{{\"jsonrpc\":\"2.0\",\"result\":{{\"t\":\"{}\"}},\"id\":{id}}}",
            "x".repeat(length(rng, 10, 200_000))
        ),
        9 => pick(rng, &["", "   ", "not json", "[1,2]", "{", "{\"id\":1}", "null", "\u{feff}{}"]).to_string(),
        _ => {
            let result = tool_result(rng);
            let mut bytes = json!({"jsonrpc": "2.0", "id": NOT_OURS, "result": result}).to_string().into_bytes();
            for _ in 0..rng.usize(1..4) {
                let at = rng.usize(..=bytes.len());
                bytes.insert(at, *pick(rng, &[&b'"', &b'\\', &b'}', &b',', &0xff, &b'\r']));
            }
            return bytes;
        }
    };
    let prefix = if rng.u8(..) < 16 { &b"\xEF\xBB\xBF"[..] } else { b"" };
    let suffix = if rng.u8(..) < 32 { &b"\r"[..] } else { b"" };
    [prefix, message.as_bytes(), suffix].concat()
}

fn output(rng: &mut Rng) -> Output {
    let lines = (0..rng.usize(0..10)).map(|_| Bytes(line(rng))).collect();
    Output { lines, max_line: *pick(rng, &[&100, &4096, &(64 * 1024), &(1 << 20)]) }
}

/// The answers the transport must give: for each pending call, the first line that answers it (a message
/// with its id and a `result`, or an overlong line with its id), when that holds a sound tool result.
fn expected_answers(lines: &[Bytes], max_line: usize) -> Vec<(RequestId, CallToolResult)> {
    let mut answered = Vec::new();
    let mut expected = Vec::new();
    for line in lines {
        let message = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        let message = message.strip_suffix(b"\r").unwrap_or(message);
        let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(message) else { continue };
        let id = match message.get("id").and_then(Value::as_i64) {
            Some(id) if (1..=CALLS).contains(&id) && !answered.contains(&id) => id,
            _ => continue,
        };
        let Some(result) = message.remove("result").filter(|_| line.len() <= max_line) else {
            if line.len() > max_line {
                answered.push(id);
            }
            continue;
        };
        answered.push(id);
        if let Ok(result) = serde_json::from_value::<CallToolResult>(result) {
            expected.push((RequestId::Number(id), result));
        }
    }
    expected
}

#[test]
fn any_output_gives_whole_messages_and_sound_answers_as_serde_json_reads_them_in_bounded_memory() {
    fuzzing::check(
        "stdio-transport",
        CASES,
        output,
        |output| {
            let output = output.clone();
            (0..output.lines.len()).map(move |drop| {
                let mut lines = output.lines.clone();
                lines.remove(drop);
                Output { lines, ..output.clone() }
            })
        },
        |output| {
            let input: Vec<u8> = output.lines.iter().flat_map(|line| [&line[..], b"\n"].concat()).collect();
            let expected = expected_answers(&output.lines, output.max_line);
            let longest = output.lines.iter().map(|line| line.len()).max().unwrap_or(0);
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let mut transport = LineTransport::new(
                std::io::Cursor::new(input),
                tokio::io::sink(),
                output.max_line,
                Duration::from_secs(60),
            );
            for id in 1..=CALLS {
                let call = CallToolRequest::new(CallToolRequestParams::new("t"));
                let request =
                    ClientJsonRpcMessage::request(ClientRequest::CallToolRequest(call), RequestId::Number(id));
                runtime.block_on(transport.send(request)).unwrap();
            }
            let mut answers = Vec::new();
            loop {
                let (message, peak) =
                    fuzzing::peak_allocated(|| runtime.block_on(Transport::<RoleClient>::receive(&mut transport)));
                let bound = 8 * longest.min(output.max_line) + 4 * (64 << 10) + (1 << 20);
                assert!(peak <= bound, "{peak} bytes held for one message, lines up to {longest} bytes");
                let Some(message) = message else { break };
                serde_json::to_value(&message).expect("a whole message");
                if let ServerJsonRpcMessage::Response(response) = message
                    && let ServerResult::CallToolResult(result) = response.result
                {
                    answers.push((response.id, result));
                }
            }
            for (id, result) in &expected {
                let given = answers.iter().find(|(answered, _)| answered == id).map(|(_, result)| result);
                let sound = given.is_some_and(|given| same_result(given, result));
                assert!(sound, "call {id:?}: {given:?}, serde_json reads {result:?}");
            }
        },
    );
}
