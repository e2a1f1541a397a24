use super::*;

fn shape(json: &str) -> Shape {
    Shape::of_json(json).unwrap()
}

fn merged(results: &[&str]) -> Shape {
    let mut shapes = results.iter().map(|json| shape(json));
    let mut all = shapes.next().unwrap();
    shapes.for_each(|more| all.merge(more));
    all
}

fn shown(shape: &Shape) -> (String, String) {
    let observed = shape.observed_return();
    (observed.annotation, observed.detail)
}

#[test]
fn keys_missing_from_some_results_are_optional_and_differing_types_a_union() {
    let shape = merged(&[
        r#"[{"path": "a", "size": 1}, {"path": "b", "size": 2, "tags": ["x"]}]"#,
        r#"[{"path": "c", "size": "big"}]"#,
    ]);
    assert_eq!(
        shown(&shape),
        ("list[dict]".to_string(), "[{'path': str, 'size': str | int, 'tags'?: list[str]}]".to_string())
    );
}

#[test]
fn a_key_seen_first_in_a_later_result_is_optional_too() {
    let shape = merged(&[r#"{"a": 1}"#, r#"{"a": 2.5, "b": null}"#]);
    assert_eq!(shown(&shape), ("dict".to_string(), "{'a': int | float, 'b'?: None}".to_string()));
}

#[test]
fn scalars_and_unions_of_kinds_show_as_types() {
    assert_eq!(shown(&shape(r#""hello""#)), ("str".to_string(), "str".to_string()));
    assert_eq!(
        shown(&merged(&["[]", r#"{"k": true}"#, "3"])),
        ("dict | list | int".to_string(), "{'k': bool} | list | int".to_string())
    );
    assert_eq!(
        shown(&shape("[1, \"a\", null]")),
        ("list[str | int | None]".to_string(), "list[str | int | None]".to_string())
    );
}

#[test]
fn no_value_is_ever_kept() {
    let secret = "sk-live-4242-do-not-show";
    let shape = merged(&[
        &format!(r#"{{"token": "{secret}", "items": ["{secret}", {{"v": "{secret}"}}], "n": 4242}}"#),
        &format!(r#"["{secret}", 4242, {{"v": "{secret}"}}]"#),
    ]);
    let (annotation, detail) = shown(&shape);
    assert!(!format!("{shape:?}{annotation}{detail}").contains("4242"), "{shape:?}");
}

#[test]
fn dicts_with_many_keys_or_long_keys_are_mappings() {
    let many: Vec<String> = (0..MAX_KEYS + 1).map(|i| format!(r#""file{i}.txt": {i}"#)).collect();
    assert_eq!(shown(&shape(&format!("{{{}}}", many.join(",")))).1, "dict[str, int]");
    let long = "k".repeat(MAX_KEY_CHARS + 1);
    assert_eq!(shown(&shape(&format!(r#"{{"a": "x", "{long}": 1}}"#))).1, "dict[str, str | int]");
    let few: Vec<String> = (0..MAX_KEYS).map(|i| format!(r#""k{i}": {i}"#)).collect();
    let merged = merged(&[&format!("{{{}}}", few.join(",")), r#"{"other": 1}"#]);
    assert_eq!(shown(&merged).1, "dict[str, int]", "merging past the key bound makes a mapping too");
}

#[test]
fn depth_is_bounded_when_read() {
    let deep = format!("{}1{}", "[".repeat(MAX_DEPTH + 3), "]".repeat(MAX_DEPTH + 3));
    assert_eq!(shown(&shape(&deep)).1, "list[list[list[list[list]]]]");
    let dicts = format!("{}1{}", r#"{"a":"#.repeat(MAX_DEPTH + 3), "}".repeat(MAX_DEPTH + 3));
    assert_eq!(shown(&shape(&dicts)).1, "{'a': {'a': {'a': {'a': dict}}}}");
}

#[test]
fn a_whole_shape_keeps_a_bounded_number_of_keys() {
    let row: Vec<String> = (0..MAX_KEYS).map(|i| format!(r#""k{i}": {{"a": 1, "b": 2, "c": {{"d": 1}}}}"#)).collect();
    let shape = shape(&format!("{{{}}}", row.join(",")));
    assert!(shape.key_count() <= MAX_TOTAL_KEYS, "{}", shape.key_count());
    assert!(shown(&shape).1.starts_with("{'k0': dict, 'k1': dict"), "{}", shown(&shape).1);
}

#[test]
fn the_text_stays_short_by_showing_fewer_keys() {
    let key = |i: usize| format!("a_rather_long_key_name_number_{i:02}");
    let nested: Vec<String> = (0..MAX_KEYS).map(|i| format!(r#""{}": {{"x": 1}}"#, key(i))).collect();
    let detail = shown(&shape(&format!("[{{{}}}]", nested.join(",")))).1;
    assert!(detail.len() <= MAX_TEXT_BYTES, "{detail}");
    assert!(detail.starts_with("[{'a_rather_long_key_name_number_00': {'x': int}, "), "{detail}");
    assert!(detail.ends_with(", ...}]"), "{detail}");
}

#[test]
fn key_names_cannot_break_out_of_the_comment() {
    let detail = shown(&shape(r#"{"a\nb": 1, "it's": 2}"#)).1;
    assert_eq!(detail, r"{'a b': int, 'it\'s': int}");
}

#[test]
fn only_the_first_elements_of_a_long_list_are_read() {
    let mut items: Vec<String> = (0..MAX_ITEMS).map(|_| "1".to_string()).collect();
    items.push(r#""late""#.to_string());
    assert_eq!(shown(&shape(&format!("[{}]", items.join(",")))).1, "list[int]");
}

#[test]
fn text_that_is_no_json_is_refused() {
    assert!(Shape::of_json("[1, 2").is_err());
    assert!(Shape::of_json("1 2").is_err());
}
