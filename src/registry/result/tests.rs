use serde_json::json;

use super::*;

const MAX: usize = 1 << 20;

fn result(value: Value) -> CallToolResult {
    serde_json::from_value(value).unwrap()
}

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

/// Interprets with no output schema and no wrapping.
fn read(value: Value) -> Result<Value, String> {
    read_with(value, &ResultShape::default())
}

/// As the program sees it: the value, or the `ToolError` message of a call to `mcp__s__t`.
fn read_with(value: Value, shape: &ResultShape) -> Result<Value, String> {
    interpret(&mut result(value), shape, MAX)
        .map(|raw| serde_json::from_str(raw.get()).unwrap())
        .map_err(|error| format!("'mcp__s__t' {error}"))
}

#[test]
fn an_error_result_becomes_a_tool_error_with_its_text() {
    let err = read(json!({"content": [text("something broke")], "isError": true})).unwrap_err();
    assert_eq!(err, "'mcp__s__t' returned an error: something broke");
    let err = read(json!({"content": [], "isError": true})).unwrap_err();
    assert_eq!(err, "'mcp__s__t' returned an error: (no details given)");
}

#[test]
fn a_text_that_is_json_is_parsed_and_prose_stays_a_string() {
    assert_eq!(read(json!({"content": [text(r#"{"a": [1, 2]}"#)]})).unwrap(), json!({"a": [1, 2]}));
    assert_eq!(read(json!({"content": [text("42")]})).unwrap(), json!(42));
    assert_eq!(read(json!({"content": [text("hello world")]})).unwrap(), json!("hello world"));
    assert_eq!(read(json!({"content": [text("{\"unclosed\": \"é\n")]})).unwrap(), json!("{\"unclosed\": \"é\n"));
    assert_eq!(read(json!({"content": []})).unwrap(), json!(""));
}

#[test]
fn one_json_text_among_prose_keeps_the_prose_as_notes() {
    let value = read(json!({"content": [text("Found 2 items"), text(r#"{"items": [1, 2]}"#)]})).unwrap();
    assert_eq!(value, json!({"items": [1, 2], "_notes": ["Found 2 items"]}));
}

#[test]
fn several_json_texts_become_a_list() {
    let value = read(json!({"content": [text("1"), text("2"), text("note")]})).unwrap();
    assert_eq!(value, json!({"result": [1, 2], "_notes": ["note"]}));
}

#[test]
fn several_prose_texts_are_joined() {
    assert_eq!(read(json!({"content": [text("a"), text("b")]})).unwrap(), json!("a\nb"));
}

#[test]
fn structured_content_is_used_directly_and_extra_prose_kept_as_notes() {
    let value = read(json!({
        "content": [text(r#"{"value": 1}"#), text("EMPTY RESULT warning: nothing matched")],
        "structuredContent": {"value": 1}
    }))
    .unwrap();
    assert_eq!(value, json!({"value": 1, "_notes": ["EMPTY RESULT warning: nothing matched"]}));
    let rendered_differently =
        read(json!({"content": [text("{\n  \"value\": 1\n}")], "structuredContent": {"value": 1}}));
    assert_eq!(rendered_differently.unwrap(), json!({"value": 1}));
}

#[test]
fn a_text_that_restates_one_field_is_not_a_note() {
    // server-filesystem: the file's text, again as the structured content's only field.
    for file in ["line 1\nline 2", "{\"a\": 1}", "42"] {
        let value = read(json!({"content": [text(file)], "structuredContent": {"content": file}}));
        assert_eq!(value.unwrap(), json!({"content": file}));
    }
    // server-memory: an array field as pretty-printed JSON; a message field verbatim.
    let entities = json!([{"name": "ptc", "entityType": "project", "observations": ["in Rust"]}]);
    let pretty = serde_json::to_string_pretty(&entities).unwrap();
    let value = read(json!({"content": [text(&pretty)], "structuredContent": {"entities": entities}}));
    assert_eq!(value.unwrap(), json!({"entities": entities}));
    let deleted = json!({"success": true, "message": "Entities deleted successfully"});
    let value = read(json!({"content": [text("Entities deleted successfully")], "structuredContent": deleted}));
    assert_eq!(value.unwrap(), deleted);
    // A field of the unwrapped value counts too.
    let shape = ResultShape { wrapped: true, ..Default::default() };
    let value = read_with(json!({"content": [text("x")], "structuredContent": {"result": {"a": "x", "b": 2}}}), &shape);
    assert_eq!(value.unwrap(), json!({"a": "x", "b": 2}));
}

#[test]
fn a_text_that_says_more_than_a_field_stays_a_note() {
    let value =
        read(json!({"content": [text("read 2 lines"), text("a\nb")], "structuredContent": {"content": "a\nb"}}));
    assert_eq!(value.unwrap(), json!({"content": "a\nb", "_notes": ["read 2 lines"]}));
}

#[test]
fn official_sdk_lists_are_unwrapped_and_their_per_element_texts_are_not_notes() {
    let shape = ResultShape { wrapped: true, ..Default::default() };
    let value = read_with(
        json!({"content": [text("1"), text("2"), text("3")], "structuredContent": {"result": [1, 2, 3]}}),
        &shape,
    );
    assert_eq!(value.unwrap(), json!([1, 2, 3]));
}

/// Each text is looked up, not compared with each element: this took minutes.
#[test]
fn a_list_of_100_000_elements_with_a_text_each_has_no_notes() {
    let rows: Vec<Value> = (0..100_000).map(|i| json!({"id": i, "name": format!("row {i}")})).collect();
    let content: Vec<Value> = rows.iter().map(|row| text(&row.to_string())).collect();
    let mut result = result(json!({"content": content, "structuredContent": {"result": rows}}));
    let shape = ResultShape { wrapped: true, ..ResultShape::default() };
    let value = interpret(&mut result, &shape, usize::MAX).unwrap();
    assert_eq!(serde_json::from_str::<Value>(value.get()).unwrap(), json!(rows));
}

#[test]
fn fastmcp_wrapped_scalars_are_unwrapped_and_their_plain_text_is_not_a_note() {
    let shape = ResultShape { wrapped: true, ..Default::default() };
    let value = read_with(json!({"content": [text("hello")], "structuredContent": {"result": "hello"}}), &shape);
    assert_eq!(value.unwrap(), json!("hello"));
}

#[test]
fn the_result_meta_marker_of_standalone_fastmcp_unwraps_too() {
    let value = read(json!({
        "content": [text("[4, 5]")],
        "structuredContent": {"result": [4, 5]},
        "_meta": {"fastmcp": {"wrap_result": true}}
    }));
    assert_eq!(value.unwrap(), json!([4, 5]));
}

#[test]
fn an_unmarked_result_object_is_not_unwrapped() {
    let value = read(json!({"content": [], "structuredContent": {"result": 7}}));
    assert_eq!(value.unwrap(), json!({"result": 7}));
}

#[test]
fn non_text_content_leaves_a_placeholder_note() {
    let value = read(json!({"content": [
        text("chart attached"),
        {"type": "image", "data": "AAAA", "mimeType": "image/png"},
        {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "x"}},
        {"type": "resource_link", "uri": "file:///b", "name": "b"}
    ]}));
    assert_eq!(
        value.unwrap(),
        json!({"result": "chart attached", "_notes": [
            "[non-text content omitted: image (image/png)]",
            "[non-text content omitted: audio (audio/wav)]",
            "[non-text content omitted: resource file:///a.txt (text/plain)]",
            "[non-text content omitted: resource link file:///b]"
        ]})
    );
    let only_image = read(json!({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]}));
    assert_eq!(only_image.unwrap(), json!({"_notes": ["[non-text content omitted: image (image/png)]"]}));
}

#[test]
fn a_result_that_breaks_the_output_schema_is_a_tool_error() {
    let schema = json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]});
    let validator = OutputCheck::compile(schema.as_object().unwrap()).unwrap();
    let shape = ResultShape { validator: Some(&validator), declares_output_schema: true, wrapped: false };
    let err = read_with(json!({"content": [], "structuredContent": {"count": "many"}}), &shape).unwrap_err();
    assert!(
        err.starts_with("'mcp__s__t' returned a result that does not match its output schema at /count: "),
        "{err}"
    );
    assert_eq!(
        read_with(json!({"content": [], "structuredContent": {"count": 3}}), &shape).unwrap(),
        json!({"count": 3})
    );
    let err = read_with(json!({"content": [text("{}")]}), &shape).unwrap_err();
    assert!(err.contains("declares an output schema but returned no structured content"), "{err}");
}

#[test]
fn a_result_over_the_size_limit_is_a_tool_error_that_suggests_asking_for_less() {
    let big = "x".repeat(100);
    let err = interpret(&mut result(json!({"content": [text(&big)]})), &ResultShape::default(), 50).unwrap_err();
    assert_eq!(
        err.to_string(),
        "returned 100 bytes, more than max_tool_result_bytes (50); ask it for less (filter, paginate or limit the query)"
    );
    let structured = json!({"content": [], "structuredContent": {"data": big}});
    let err = interpret(&mut result(structured), &ResultShape::default(), 50).unwrap_err();
    assert!(matches!(err, ResultError::TooLarge { bytes: 111, max: 50 }), "{err:?}");
}

#[test]
fn a_json_text_is_passed_through_verbatim() {
    let raw = interpret(&mut result(json!({"content": [text(" {\"a\":  1}\n")]})), &ResultShape::default(), MAX);
    assert_eq!(raw.unwrap().get(), "{\"a\":  1}", "as it is, but for the whitespace around it");
}

#[test]
fn image_and_audio_blocks_are_kept_with_their_placeholders() {
    let image = json!({"type": "image", "data": "aGk=", "mimeType": "image/png"});
    let audio = json!({"type": "audio", "data": "AAAA", "mimeType": "audio/wav"});
    let link = json!({"type": "resource_link", "uri": "file:///x", "name": "x"});
    let mut raw = result(json!({"content": [text("chart"), image.clone(), link, audio.clone()]}));
    let value = interpret(&mut raw, &ResultShape::default(), MAX).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(value.get()).unwrap()["_notes"],
        json!([
            "[non-text content omitted: image (image/png)]",
            "[non-text content omitted: resource link file:///x]",
            "[non-text content omitted: audio (audio/wav)]"
        ])
    );
    let kept = media(raw);
    let placeholders: Vec<String> = kept.iter().map(Media::placeholder).collect();
    assert_eq!(
        placeholders,
        ["[non-text content omitted: image (image/png)]", "[non-text content omitted: audio (audio/wav)]"]
    );
    assert_eq!(kept[0].block, serde_json::from_value::<ContentBlock>(image).unwrap());
    assert_eq!((kept[0].bytes(), kept[1].bytes()), (4, 4));
}

#[test]
fn texts_are_quoted_in_place_as_serde_json_quotes_them() {
    let ascii: String = (0..128u8).map(char::from).collect();
    for text in ["", "plain", "\"", "\\", "a\nb\r\tc\u{8}\u{c}", "é😀\u{7f}\u{1f}\u{0}", &ascii, &ascii.repeat(3)] {
        assert_eq!(quote_in_place(text.to_string()), serde_json::to_string(text).unwrap(), "{text:?}");
    }
}
