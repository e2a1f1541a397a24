//! The server's side of the golden transcript (`backends/tests/golden_transcript.txt`, PROTOCOL.md): what
//! it writes (`> ` lines) is exactly what [`ToRunner`] serialises, the run's `tools` exactly what the catalog
//! gives the runner for the tool below, and every runner line (`< `) parses. The runner's side is
//! `backends/tests/test_transcript.py`.

use std::collections::BTreeMap;
use std::sync::Arc;

use ptc_backends::protocol::{FromRunner, ToRunner};
use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Value, json};

use crate::config::ToolFilter;
use crate::registry::{Catalog, ToolEntry};

const TRANSCRIPT: &str = include_str!("../../backends/tests/golden_transcript.txt");

fn map(value: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(value.clone()).unwrap()
}

/// What the server writes for a message it sent, built the way the engine builds it.
fn server_line(message: &Value, catalog: &Catalog) -> Vec<u8> {
    match message["type"].as_str().unwrap() {
        "run" => {
            assert_eq!(serde_json::to_value(catalog.runner_tools()).unwrap(), message["tools"]);
            ToRunner::Run {
                code: message["code"].as_str().unwrap(),
                tools: catalog.runner_tools(),
                not_callable: &map(&message["not_callable"]),
                down: &map(&message["down"]),
                precheck: message["precheck"].as_bool().unwrap(),
                progress: message["progress"].as_bool().unwrap(),
                max_output_bytes: message["max_output_bytes"].as_u64().unwrap() as usize,
                max_attachment_bytes: message["max_attachment_bytes"].as_u64().unwrap() as usize,
                session: None,
            }
            .to_line()
        }
        "result" => {
            let id = message["id"].as_u64().unwrap();
            let value: Box<RawValue> = to_raw_value(&message["value"]).unwrap();
            let media: Vec<String> =
                serde_json::from_value(message.get("media").cloned().unwrap_or(json!([]))).unwrap();
            ToRunner::success_parts(id, value, &media).concat()
        }
        other => panic!("the server sends no {other} message"),
    }
}

#[test]
fn the_server_side_of_the_golden_transcript() {
    let tool = json!({"name": "chart", "description": "Draws a chart of n points.",
                      "inputSchema": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
                                      "required": ["n"]}});
    let entry = Arc::new(ToolEntry::new("s", serde_json::from_value(tool).unwrap()));
    let catalog = Catalog::build([entry], &ToolFilter::All);
    let mut runner_lines = 0;
    for (number, line) in TRANSCRIPT.lines().enumerate() {
        let (direction, text) = line.split_at(2);
        match direction {
            "> " => {
                let message: Value = serde_json::from_str(text).unwrap();
                let written = String::from_utf8(server_line(&message, &catalog)).unwrap();
                assert_eq!(written, format!("{text}\n"), "line {}", number + 1);
            }
            "< " => {
                FromRunner::parse(text.as_bytes()).unwrap_or_else(|e| panic!("line {}: {e}", number + 1));
                runner_lines += 1;
            }
            _ => panic!("line {} starts with neither '> ' nor '< '", number + 1),
        }
    }
    assert_eq!(runner_lines, 9);
}
