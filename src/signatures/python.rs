//! Python source text from untrusted strings: identifiers, string literals, docstrings, comments and JSON
//! values as literals. Whatever a downstream server puts in a schema, what these produce parses.

use serde_json::Value;

use crate::naming::identifier_part;

/// Words that cannot name a parameter or a class (`__debug__` cannot be assigned either).
const RESERVED: &[&str] = &[
    "False",
    "None",
    "True",
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "while",
    "with",
    "yield",
    "__debug__",
];

/// Whether `name` can be written as it is where Python expects an identifier that is bound.
pub fn is_plain_identifier(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.contains(&name)
}

/// An identifier for `name`: characters that cannot appear become `_` (as in tool names), a leading digit or
/// an empty name gets a `_` in front, and a keyword a `_` after (`from` → `from_`).
pub fn identifier(name: &str) -> String {
    let mut id = identifier_part(name);
    if id.is_empty() || id.starts_with(|c: char| c.is_ascii_digit()) {
        id.insert(0, '_');
    }
    if RESERVED.contains(&id.as_str()) {
        id.push('_');
    }
    id
}

/// A double-quoted string literal for `text`.
pub fn string_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            _ => push_escaped(&mut out, c),
        }
    }
    out.push('"');
    out
}

/// A triple-quoted docstring for `text`, its continuation lines indented by `indent`. No run of three quotes
/// and no quote at the very end can close it early.
pub fn docstring(text: &str, indent: &str) -> String {
    let text = text.trim();
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str("\"\"\"");
    let mut quotes = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quotes += 1;
                if quotes == 3 || chars.peek().is_none() {
                    out.push_str("\\\"");
                    quotes = 0;
                } else {
                    out.push('"');
                }
                continue;
            }
            '\n' => {
                out.push('\n');
                if chars.peek().is_some_and(|next| *next != '\n') {
                    out.push_str(indent);
                }
            }
            '\t' => out.push('\t'),
            _ => push_escaped(&mut out, c),
        }
        quotes = 0;
    }
    out.push_str("\"\"\"");
    out
}

/// Escapes what may not appear raw in a string literal: backslashes and control characters (a raw carriage
/// return would end the line, a NUL the whole source).
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        // Control characters (Unicode category Cc) all lie below U+0100.
        c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
        c => out.push(c),
    }
}

/// One line of comment text: every line break and control character becomes a space, runs of white space
/// one space.
pub fn comment_text(text: &str) -> String {
    let spaced: String = text.chars().map(|c| if c.is_control() || is_line_separator(c) { ' ' } else { c }).collect();
    spaced.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_line_separator(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}' | '\u{85}')
}

/// A JSON value as a Python literal: `None`, `True`, numbers, strings, lists and dicts.
pub fn literal(value: &Value) -> String {
    match value {
        Value::Null => "None".to_string(),
        Value::Bool(true) => "True".to_string(),
        Value::Bool(false) => "False".to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string_literal(s),
        Value::Array(items) => format!("[{}]", items.iter().map(literal).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter().map(|(k, v)| format!("{}: {}", string_literal(k), literal(v))).collect::<Vec<_>>().join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identifiers_map_keywords_digits_and_other_characters() {
        assert_eq!(identifier("ticker"), "ticker");
        assert_eq!(identifier("from"), "from_");
        assert_eq!(identifier("None"), "None_");
        assert_eq!(identifier("user-id"), "user_id");
        assert_eq!(identifier("2fa"), "_2fa");
        assert_eq!(identifier(""), "_");
        assert_eq!(identifier("héllo"), "h_llo");
        assert!(is_plain_identifier("match") && !is_plain_identifier("class") && !is_plain_identifier("a-b"));
    }

    #[test]
    fn string_literals_escape_quotes_backslashes_and_controls() {
        assert_eq!(string_literal("a\"b\\c\nd\re\tf\u{0}g\u{85}h é"), r#""a\"b\\c\nd\re\tf\x00g\x85h é""#);
    }

    #[test]
    fn docstrings_cannot_be_closed_early() {
        assert_eq!(docstring("say \"\"\"hi\"\"\"", "    "), r#""""say ""\"hi""\"""""#);
        assert_eq!(docstring("ends with a quote\"", ""), r#""""ends with a quote\"""""#);
        assert_eq!(docstring("back\\slash", ""), r#""""back\\slash""""#);
        assert_eq!(docstring("one\ntwo\n\nthree", "  "), "\"\"\"one\n  two\n\n  three\"\"\"");
    }

    #[test]
    fn comments_are_one_line() {
        assert_eq!(comment_text(" a\nb\r\n c\u{2028}d\u{0}e  f "), "a b c d e f");
    }

    #[test]
    fn json_values_become_python_literals() {
        assert_eq!(literal(&json!({"a": [1, 2.5, null, true, "x"]})), r#"{"a": [1, 2.5, None, True, "x"]}"#);
    }
}
