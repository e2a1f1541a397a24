//! The line protocol between the server and the runner (see `backends/PROTOCOL.md`). Every line from the
//! runner is untrusted: parsing is strict and a bad line ends only that run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Bumped whenever a message changes shape; checked in the runner's `ready` message.
pub const PROTOCOL_VERSION: u32 = 4;

/// The longest `progress()` message, in bytes of UTF-8: the runner refuses longer ones; a longer one on the
/// channel can only be forged.
pub const MAX_PROGRESS_MESSAGE: usize = 1024;

/// The runner's parts, joined: installed packages and preloaded modules (`packages.py`, run alone by the
/// sandbox probes), the call checks (`checks.py`, also importable alone by its tests and the benchmark), what
/// errors add for the model (`explain.py`), then the runner itself.
macro_rules! runner_parts {
    () => {
        concat!(
            include_str!("packages.py"),
            "\n",
            include_str!("checks.py"),
            "\n",
            include_str!("explain.py"),
            "\n",
            include_str!("runner.py")
        )
    };
}

/// The runner, run as `python -I -S -c RUNNER_SOURCE [OPTIONS]`.
pub const RUNNER_SOURCE: &str = runner_parts!();

/// The zygote (`none`, `landlock`): the runner's source, not started (`AS_ZYGOTE`), then the zygote that forks
/// runners from it. Run as `python -I -S -c ZYGOTE_SOURCE <runner options> <confinement>`.
pub const ZYGOTE_SOURCE: &str = concat!("AS_ZYGOTE = True\n", runner_parts!(), "\n", include_str!("zygote.py"));

/// A message from the runner.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum FromRunner {
    Ready {
        version: u32,
    },
    Output {
        data: String,
    },
    Call {
        id: u64,
        tool: String,
        args: Map<String, Value>,
        /// The program's line the call was made on (for the approval question), when the runner knows it.
        #[serde(default)]
        line: Option<u32>,
    },
    Helper {
        id: u64,
        name: String,
        args: Map<String, Value>,
    },
    /// `show()`: attach these blocks (indices into the call's `media`) of the result of call `call`.
    Show {
        id: u64,
        call: u64,
        blocks: BlockIndices,
    },
    /// `attach()`: a file of the working directory, `name` its path there. `data` is its bytes in base64,
    /// absent when the file (`size` bytes) is larger than `max_attachment_bytes`.
    Attach {
        id: u64,
        name: String,
        mime_type: String,
        size: u64,
        #[serde(default)]
        data: Option<String>,
    },
    Emit {
        value: Value,
    },
    /// `progress(message, fraction)`, sent only when the client wants progress; `fraction` from 0 to 1.
    Progress {
        message: String,
        #[serde(default)]
        fraction: Option<f64>,
    },
    Done {
        error: Option<ProgramError>,
    },
}

/// The block indices of a `show`: at most [`BlockIndices::MAX`] are kept; more can only be forged, and the
/// rest are read and dropped, so a line full of indices costs no more memory than a short one.
#[derive(Debug, PartialEq, Default)]
pub struct BlockIndices(pub Vec<usize>);

impl BlockIndices {
    pub const MAX: usize = 1024;
}

impl<'de> Deserialize<'de> for BlockIndices {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Indices;
        impl<'de> serde::de::Visitor<'de> for Indices {
            type Value = BlockIndices;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of block indices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<BlockIndices, A::Error> {
                let mut kept = Vec::new();
                while kept.len() < BlockIndices::MAX {
                    match seq.next_element()? {
                        Some(index) => kept.push(index),
                        None => return Ok(BlockIndices(kept)),
                    }
                }
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(BlockIndices(kept))
            }
        }
        deserializer.deserialize_seq(Indices)
    }
}

/// Why a program failed, as the runner saw it.
#[derive(Debug, Deserialize, PartialEq, Clone)]
#[serde(deny_unknown_fields)]
pub struct ProgramError {
    /// The exception's class name, e.g. `ZeroDivisionError`.
    pub kind: String,
    /// The traceback, with only the program's own frames.
    pub message: String,
}

/// What a session's `run` adds: the runner stays up after it, and re-arms its CPU-time limit.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SessionRun {
    /// CPU seconds the run may use beyond what the interpreter used before it (within the session's hard
    /// limit).
    pub cpu_seconds: u64,
}

/// A message to the runner.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToRunner<'a> {
    Run {
        code: &'a str,
        /// A JSON array with one object per callable tool: its name, keyword parameters and rendered
        /// signature (PROTOCOL.md).
        tools: &'a RawValue,
        /// Namespaced names that are no callable tool, and why (a filter, a collision).
        not_callable: &'a BTreeMap<String, String>,
        /// `mcp__<server>__` of each server that is not connected, and why.
        down: &'a BTreeMap<String, String>,
        /// Check the program's tool calls before running it.
        precheck: bool,
        /// The client wants progress: `progress()` sends its message (otherwise it only checks its arguments).
        progress: bool,
        max_output_bytes: usize,
        /// The most `attach()` sends of a file: a larger one goes without its data.
        max_attachment_bytes: usize,
        /// A session's run: the runner keeps its interpreter for the next `run` after its `done`.
        #[serde(skip_serializing_if = "Option::is_none")]
        session: Option<SessionRun>,
    },
    /// The answer to one `call`, `helper`, `show` or `attach`: `value` (already-serialised JSON, passed through without
    /// another parse) when `ok`, else `error`; for a call, `media` lists the placeholders of the image and
    /// audio blocks its result carries, in order. Built with [`ToRunner::success`] and [`ToRunner::failure`].
    Result {
        id: u64,
        ok: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        value: Option<&'a RawValue>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a str>,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        media: &'a [String],
    },
}

impl<'a> ToRunner<'a> {
    pub fn success(id: u64, value: &'a RawValue) -> Self {
        ToRunner::Result { id, ok: true, value: Some(value), error: None, media: &[] }
    }

    /// A call's successful result as one protocol line in three parts, to be written one after the other:
    /// the message up to its value, the value (moved, not copied: a result can be megabytes) and the end.
    /// The value may be a downstream's JSON text as it was sent, pretty-printed: its newlines would end the
    /// line early (and what follows could pass for an answer to another call), so they become spaces, which
    /// mean the same in JSON (a newline can only be whitespace there: a string cannot hold one raw).
    pub fn success_parts(id: u64, value: Box<RawValue>, media: &[String]) -> [Vec<u8>; 3] {
        let mut head = ToRunner::Result { id, ok: true, value: None, error: None, media }.to_line();
        // `{…}\n` becomes `{…,"value":`: the value goes last.
        head.truncate(head.len() - 2);
        head.extend_from_slice(b",\"value\":");
        let mut value = String::from(Box::<str>::from(value)).into_bytes();
        for byte in value.iter_mut().filter(|byte| **byte == b'\n') {
            *byte = b' ';
        }
        [head, value, b"}\n".to_vec()]
    }

    pub fn failure(id: u64, error: &'a str) -> Self {
        ToRunner::Result { id, ok: false, value: None, error: Some(error), media: &[] }
    }

    /// The message as one protocol line, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        // Sized up front: a multi-megabyte result is copied into the line once, not regrown into it.
        let mut line = Vec::with_capacity(self.payload_len() + 128);
        serde_json::to_writer(&mut line, self).expect("protocol messages always serialise");
        line.push(b'\n');
        line
    }

    /// The bytes of the message's variable parts (escaping may add some).
    fn payload_len(&self) -> usize {
        match self {
            ToRunner::Run { code, tools, not_callable, down, .. } => {
                let map_len =
                    |map: &BTreeMap<String, String>| map.iter().map(|(k, v)| k.len() + v.len() + 6).sum::<usize>();
                code.len() + tools.get().len() + map_len(not_callable) + map_len(down)
            }
            ToRunner::Result { value, error, media, .. } => {
                value.map_or(0, |value| value.get().len())
                    + error.map_or(0, |error| error.len())
                    + media.iter().map(|m| m.len() + 3).sum::<usize>()
            }
        }
    }
}

impl FromRunner {
    pub fn parse(line: &[u8]) -> Result<FromRunner, serde_json::Error> {
        serde_json::from_slice(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn runner_messages_parse_into_their_variants() {
        let cases = [
            (r#"{"type":"ready","version":3}"#, FromRunner::Ready { version: 3 }),
            (
                r#"{"type":"show","id":4,"call":3,"blocks":[0,2]}"#,
                FromRunner::Show { id: 4, call: 3, blocks: BlockIndices(vec![0, 2]) },
            ),
            (r#"{"type":"output","data":"hi\n"}"#, FromRunner::Output { data: "hi\n".into() }),
            (
                r#"{"type":"attach","id":5,"name":"out/a.csv","mime_type":"text/csv","size":2,"data":"YSwK"}"#,
                FromRunner::Attach {
                    id: 5,
                    name: "out/a.csv".into(),
                    mime_type: "text/csv".into(),
                    size: 2,
                    data: Some("YSwK".into()),
                },
            ),
            (
                r#"{"type":"attach","id":6,"name":"big.bin","mime_type":"application/octet-stream","size":99}"#,
                FromRunner::Attach {
                    id: 6,
                    name: "big.bin".into(),
                    mime_type: "application/octet-stream".into(),
                    size: 99,
                    data: None,
                },
            ),
            (
                r#"{"type":"call","id":3,"tool":"mcp__a__b","args":{"x":1}}"#,
                FromRunner::Call {
                    id: 3,
                    tool: "mcp__a__b".into(),
                    args: json!({"x": 1}).as_object().unwrap().clone(),
                    line: None,
                },
            ),
            (
                r#"{"type":"call","id":4,"tool":"mcp__a__b","args":{},"line":12}"#,
                FromRunner::Call { id: 4, tool: "mcp__a__b".into(), args: Map::new(), line: Some(12) },
            ),
            (r#"{"type":"emit","value":[1,2]}"#, FromRunner::Emit { value: json!([1, 2]) }),
            (
                r#"{"type":"progress","message":"half","fraction":0.5}"#,
                FromRunner::Progress { message: "half".into(), fraction: Some(0.5) },
            ),
            (
                r#"{"type":"progress","message":"","fraction":null}"#,
                FromRunner::Progress { message: String::new(), fraction: None },
            ),
            (r#"{"type":"done","error":null}"#, FromRunner::Done { error: None }),
            (
                r#"{"type":"done","error":{"kind":"ValueError","message":"ValueError: x"}}"#,
                FromRunner::Done {
                    error: Some(ProgramError { kind: "ValueError".into(), message: "ValueError: x".into() }),
                },
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(FromRunner::parse(line.as_bytes()).unwrap(), expected, "{line}");
        }
    }

    /// Backends pass the runner as one argument of `python -c` (after the docker prologue, ~10 KiB): Linux
    /// refuses an argument over 128 KiB (MAX_ARG_STRLEN). Past this bound, the runner must arrive another way.
    #[test]
    fn the_runner_fits_in_one_command_line_argument() {
        assert!(RUNNER_SOURCE.len() < 112 * 1024, "the runner source is {} bytes", RUNNER_SOURCE.len());
        assert!(ZYGOTE_SOURCE.len() < 124 * 1024, "the zygote source is {} bytes", ZYGOTE_SOURCE.len());
    }

    #[test]
    fn a_show_keeps_at_most_1024_indices_however_many_it_names() {
        let indices: Vec<String> = (0..100_000).map(|i| (i % 7).to_string()).collect();
        let line = format!(r#"{{"type":"show","id":1,"call":1,"blocks":[{}]}}"#, indices.join(","));
        let Ok(FromRunner::Show { blocks, .. }) = FromRunner::parse(line.as_bytes()) else { panic!("parses") };
        assert_eq!(blocks.0.len(), BlockIndices::MAX);
        assert!(FromRunner::parse(br#"{"type":"show","id":1,"call":1,"blocks":[1,"x"]}"#).is_err());
    }

    #[test]
    fn malformed_runner_lines_are_rejected() {
        for line in [
            "not json",
            r#"{"type":"nope"}"#,
            r#"{"type":"call","id":1,"tool":"t","args":[1]}"#,
            r#"{"type":"call","id":-1,"tool":"t","args":{}}"#,
            r#"{"type":"ready","version":3,"extra":true}"#,
            r#"{"type":"show","id":1,"call":1,"blocks":[-1]}"#,
            r#"{"type":"attach","id":1,"name":"a","mime_type":"text/plain","size":-1}"#,
            r#"{"type":"attach","id":1,"name":"a","size":1,"data":""}"#,
            r#"{"type":"progress","message":7}"#,
            r#"{"type":"progress","message":"x","fraction":"half"}"#,
        ] {
            assert!(FromRunner::parse(line.as_bytes()).is_err(), "{line}");
        }
    }

    #[test]
    fn server_messages_have_the_documented_shape() {
        let tools = RawValue::from_string(r#"[{"name":"mcp__a__b","params":[]}]"#.into()).unwrap();
        let not_callable = BTreeMap::from([("mcp__a__c".to_string(), "it is blocked by tools.block".to_string())]);
        let down = BTreeMap::from([("mcp__d__".to_string(), "server 'd' is unavailable: gone".to_string())]);
        let run = ToRunner::Run {
            code: "print(1)",
            tools: &tools,
            not_callable: &not_callable,
            down: &down,
            precheck: true,
            progress: false,
            max_output_bytes: 10,
            max_attachment_bytes: 20,
            session: None,
        };
        assert_eq!(
            String::from_utf8(run.to_line()).unwrap(),
            "{\"type\":\"run\",\"code\":\"print(1)\",\"tools\":[{\"name\":\"mcp__a__b\",\"params\":[]}],\
             \"not_callable\":{\"mcp__a__c\":\"it is blocked by tools.block\"},\
             \"down\":{\"mcp__d__\":\"server 'd' is unavailable: gone\"},\"precheck\":true,\"progress\":false,\
             \"max_output_bytes\":10,\"max_attachment_bytes\":20}\n"
        );
        let session_run = ToRunner::Run {
            code: "x",
            tools: &tools,
            not_callable: &not_callable,
            down: &down,
            precheck: false,
            progress: false,
            max_output_bytes: 10,
            max_attachment_bytes: 20,
            session: Some(SessionRun { cpu_seconds: 31 }),
        };
        let line = String::from_utf8(session_run.to_line()).unwrap();
        assert!(line.ends_with(",\"max_attachment_bytes\":20,\"session\":{\"cpu_seconds\":31}}\n"), "{line}");
        let media = ["[non-text content omitted: image (image/png)]".to_string()];
        let with_media = ToRunner::success_parts(5, tools.clone(), &media);
        assert_eq!(
            String::from_utf8(with_media.concat()).unwrap(),
            "{\"type\":\"result\",\"id\":5,\"ok\":true,\"media\":[\"[non-text content omitted: image (image/png)]\"],\
             \"value\":[{\"name\":\"mcp__a__b\",\"params\":[]}]}\n"
        );
        let value = RawValue::from_string("{\"k\": 1}".into()).unwrap();
        let ok = ToRunner::success(7, &value).to_line();
        assert_eq!(ok, b"{\"type\":\"result\",\"id\":7,\"ok\":true,\"value\":{\"k\": 1}}\n");
        assert_eq!(ToRunner::success_parts(7, value, &[]).concat(), ok, "a result without media");
        let pretty = "[\n  {\"type\": \"result\", \"id\": 2, \"ok\": true, \"value\": \"a\\nb\"}\r\n]";
        let line = ToRunner::success_parts(9, RawValue::from_string(pretty.into()).unwrap(), &[]).concat();
        assert_eq!(
            line.iter().filter(|byte| **byte == b'\n').count(),
            1,
            "one line: {}",
            String::from_utf8_lossy(&line)
        );
        let message: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(message["value"], serde_json::from_str::<serde_json::Value>(pretty).unwrap());
        let err = ToRunner::failure(8, "boom");
        assert_eq!(err.to_line(), b"{\"type\":\"result\",\"id\":8,\"ok\":false,\"error\":\"boom\"}\n");
    }
}
