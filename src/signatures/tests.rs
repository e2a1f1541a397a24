//! Snapshot tests: every tool of `tests/fixtures/tools/*.json` (the `tools/list` of real third-party servers,
//! recorded with `tests/fixtures/tools/record.py`) and of `tests/fixtures/signatures/edge_cases.json` is
//! rendered and compared with the golden `tests/fixtures/signatures/<name>.py`. `PTC_UPDATE_GOLDEN=1`
//! rewrites the golden files instead; review the diff.

use std::path::{Path, PathBuf};

use rmcp::model::Tool;
use serde_json::{Value, json};

use super::*;
use crate::registry::ToolEntry;

pub(crate) fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The tools of a fixture as the catalog holds them, under `server`.
pub(crate) fn entries(path: &Path, server: &str) -> Vec<ToolEntry> {
    let text = std::fs::read_to_string(path).unwrap();
    let tools: Vec<Tool> = serde_json::from_str(&text).unwrap();
    tools.into_iter().map(|tool| ToolEntry::new(server, tool)).collect()
}

/// Every fixture: its golden file's name and its tools.
fn all_fixtures() -> Vec<(String, Vec<ToolEntry>)> {
    let mut out = vec![("edge_cases".to_string(), entries(&fixtures().join("signatures/edge_cases.json"), "edge"))];
    let mut servers: Vec<PathBuf> = std::fs::read_dir(fixtures().join("tools"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    servers.sort();
    for path in servers {
        let server = path.file_stem().unwrap().to_string_lossy().into_owned();
        out.push((server.clone(), entries(&path, &server)));
    }
    out
}

fn rendered(tools: &[ToolEntry]) -> String {
    tools.iter().map(|entry| entry.signature().render()).collect::<Vec<_>>().join("\n\n")
}

#[test]
fn signatures_match_their_golden_files() {
    let update = std::env::var_os("PTC_UPDATE_GOLDEN").is_some();
    let mut stale = Vec::new();
    for (name, tools) in all_fixtures() {
        let golden = fixtures().join(format!("signatures/{name}.py"));
        let actual = rendered(&tools);
        if update {
            std::fs::write(&golden, &actual).unwrap();
        } else if std::fs::read_to_string(&golden).ok().as_deref() != Some(actual.as_str()) {
            stale.push(golden.display().to_string());
        }
    }
    assert!(stale.is_empty(), "signatures differ from {stale:?}; PTC_UPDATE_GOLDEN=1 rewrites them (review the diff)");
}

/// Parses every source with Python's `ast.parse`; fails naming those that do not parse.
fn assert_parses(sources: &[String]) {
    let check = "import ast, json, sys\n\
                 bad = []\n\
                 for source in json.load(sys.stdin):\n\
                 \x20   try:\n\
                 \x20       ast.parse(source)\n\
                 \x20   except SyntaxError as e:\n\
                 \x20       bad.append(f'{e}:\\n{source}')\n\
                 print(len(bad)); print('\\n\\n'.join(bad))";
    let mut child = std::process::Command::new("python3")
        .args(["-I", "-S", "-c", check])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs (the runner needs it too)");
    serde_json::to_writer(child.stdin.take().unwrap(), sources).unwrap();
    let output = child.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && report.starts_with("0\n"), "{report}");
}

#[test]
fn every_signature_is_valid_python() {
    let sources: Vec<String> =
        all_fixtures().iter().flat_map(|(_, tools)| tools.iter().map(|t| t.signature().render())).collect();
    assert!(sources.len() > 60, "only {} signatures checked", sources.len());
    assert_parses(&sources);
}

/// Schemas made of the text that breaks generated code (quotes, backslashes, line breaks, NUL, keywords,
/// brackets) in every place a schema can put text: still valid Python, every one.
#[test]
fn hostile_schemas_still_give_valid_python() {
    const PIECES: &[&str] = &[
        "\"", "'", "\\", "\n", "\r", "\t", "\0", "#", "\u{2028}", "\u{85}", "\u{7f}", "é", "{", "}", "\"\"\"", "a",
        "_", " ", "-", "1", "class", "from", "None", ":", ")", "(", "*", "=", "$ref", "#/$defs/",
    ];
    let mut rng = fastrand::Rng::with_seed(11);
    let mut text = || (0..rng.usize(0..10)).map(|_| PIECES[rng.usize(..PIECES.len())]).collect::<String>();
    let mut sources = Vec::new();
    for _ in 0..300 {
        let (def, key, nested_key) = (text(), text(), text());
        let property = json!({
            "description": text(), "title": text(), "pattern": text(), "format": text(),
            "enum": [text(), text(), 1, null], "default": text(),
        });
        let schema = json!({
            "type": "object",
            "$defs": {def.clone(): {"type": "object", "description": text(), "properties": {nested_key.clone(): {"type": "string", "description": text()}}}},
            "properties": {
                key.clone(): property,
                text(): {"$ref": format!("#/$defs/{def}"), "description": text()},
                text(): {"type": "object", "description": text(), "properties": {nested_key: {"const": text()}}},
                text(): {"anyOf": [{"type": "string"}, {"$ref": format!("#/$defs/{}", text())}, {"const": text()}]},
            },
            "required": [key],
        });
        let output = json!({"type": "object", "description": text(), "properties": {text(): {"description": text()}}});
        let tool = json!({"name": text(), "title": text(), "description": text(), "inputSchema": schema, "outputSchema": output});
        sources.push(ToolEntry::new(&text(), serde_json::from_value(tool).unwrap()).signature().render());
    }
    assert_parses(&sources);
}

fn tool(value: Value) -> ToolEntry {
    ToolEntry::new("s", serde_json::from_value(value).unwrap())
}

#[test]
fn the_demo_tool_reads_as_its_schema_says() {
    let demo = entries(&fixtures().join("tools/financial-data.json"), "financial-data");
    let query = demo.iter().find(|t| t.tool.name == "query_financials").unwrap().signature();
    let text = query.render();
    assert!(
        text.starts_with(
            "async def mcp__financial_data__query_financials(\n    *,\n    ticker: str,  # Stock ticker, e.g. AMZN; see \
             list_tickers.\n    statement: Literal[\"income\", \"balance\", \"cashflow\"] = \"income\",  # income: "
        ),
        "{text}"
    );
    assert!(text.contains("    limit: int = 4,  # Number of periods to return. (>= 1, <= 20)\n"), "{text}");
    assert!(text.contains(") -> Any:  # no output schema: inspect the result\n    \"\"\"Fetch recent"), "{text}");
    let limit = &query.params[3];
    assert_eq!((limit.required, &limit.default), (false, &Some(json!(4))));
    assert_eq!(limit.accepts, Accepts { types: Some(vec!["integer"]), values: None });
    assert_eq!(query.params[1].accepts.values, Some(vec![json!("income"), json!("balance"), json!("cashflow")]));
}

#[test]
fn mapped_names_keep_their_keys_and_never_collide() {
    let entry = tool(json!({"name": "t", "inputSchema": {"type": "object", "properties": {
        "from": {"type": "string"}, "from_": {"type": "string"}, "a-b": {}, "a_b": {}}}}));
    let names: Vec<(&str, &str)> = entry.signature().params.iter().map(|p| (p.name.as_str(), p.key.as_str())).collect();
    assert_eq!(names, [("from__", "from"), ("from_", "from_"), ("a_b_", "a-b"), ("a_b", "a_b")]);
}

#[test]
fn only_schemas_that_allow_more_keys_take_extra_keywords() {
    let extra = |schema: Value| {
        let signature = tool(json!({"name": "t", "inputSchema": schema})).signature().clone();
        signature.extra.map(|e| format!("**{}: {}", e.name, e.annotation))
    };
    let any = Some("**extra: Any".to_string());
    assert_eq!(extra(json!({"type": "object", "properties": {"a": {}}})), None);
    assert_eq!(extra(json!({"type": "object", "properties": {}})), None);
    assert_eq!(extra(json!({"type": "object"})), any);
    assert_eq!(extra(json!({"type": "object", "properties": {}, "additionalProperties": true})), any);
    assert_eq!(
        extra(json!({"type": "object", "properties": {}, "additionalProperties": {"type": "integer"}})),
        Some("**extra: int".into())
    );
    assert_eq!(extra(json!({"type": "object", "additionalProperties": false})), None);
    assert_eq!(
        extra(json!({"type": "object", "properties": {"extra": {}}, "additionalProperties": true})),
        Some("**extra_: Any".into())
    );
}

#[test]
fn what_literal_arguments_may_be_follows_types_enums_and_unions() {
    let accepts = |property: Value| {
        let entry = tool(json!({"name": "t", "inputSchema": {"type": "object", "properties": {"p": property},
            "$defs": {"E": {"enum": ["x", "y"]}}}}));
        entry.signature().params[0].accepts.clone()
    };
    let types = |t: &[&'static str]| Accepts { types: Some(t.to_vec()), values: None };
    assert_eq!(accepts(json!({"type": ["string", "null"]})), types(&["string", "null"]));
    assert_eq!(accepts(json!({"type": "string", "nullable": true})), types(&["string", "null"]));
    assert_eq!(accepts(json!({"anyOf": [{"type": "integer"}, {"type": "null"}]})), types(&["integer", "null"]));
    assert_eq!(accepts(json!({"anyOf": [{"type": "integer"}, {}]})), Accepts::default());
    assert_eq!(accepts(json!({"anyOf": [{"type": "integer"}, {"const": "auto"}]})), types(&["integer", "string"]));
    assert_eq!(
        accepts(json!({"anyOf": [{"$ref": "#/$defs/E"}, {"const": null}]})),
        Accepts { types: None, values: Some(vec![json!("x"), json!("y"), json!(null)]) }
    );
    assert_eq!(accepts(json!({"type": "frobnicate"})), Accepts::default());
}

#[test]
fn the_runner_gets_the_parameters_and_the_rendered_signature() {
    let entry = tool(json!({"name": "t", "description": "Does t.", "inputSchema": {"type": "object",
        "properties": {"from": {"type": "string", "enum": ["a"]}, "n": {"type": "integer", "default": 2}},
        "required": ["from"]}}));
    let spec = serde_json::to_value(entry.signature().runner_spec()).unwrap();
    assert_eq!(
        spec,
        json!({
            "name": "mcp__s__t",
            "params": [
                {"name": "from_", "key": "from", "annotation": "Literal[\"a\"]", "required": true, "values": ["a"]},
                {"name": "n", "annotation": "int", "required": false, "default": 2, "types": ["integer"]}
            ],
            "returns": "Any",
            "doc": "async def mcp__s__t(\n    *,\n    from_: Literal[\"a\"],  # key \"from\"\n    n: int = 2,\n) -> Any:  \
                    # no output schema: inspect the result\n    \"\"\"Does t.\"\"\"\n"
        })
    );
}

#[test]
fn observed_results_replace_the_missing_return_type_and_stay_valid_python() {
    let plain = tool(json!({"name": "ls", "inputSchema": {"type": "object", "properties": {}}}));
    let observed = Shape::of_json(r#"[{"path": "a", "size": 1}]"#).unwrap().observed_return();
    let text = plain.signature().render_observed(Some(&observed));
    assert!(
        text.contains("async def mcp__s__ls() -> list[dict]:  # observed: [{'path': str, 'size': int}]\n"),
        "{text}"
    );
    let text_only = Shape::of_json(r#""hello""#).unwrap().observed_return();
    let text_result = plain.signature().render_observed(Some(&text_only));
    assert!(text_result.contains("async def mcp__s__ls() -> str:  # observed\n"), "{text_result}");
    assert_parses(&[text, text_result]);
    let typed = tool(json!({"name": "n", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}}));
    assert_eq!(typed.signature().render_observed(Some(&observed)), typed.signature().render(), "a schema wins");
}
