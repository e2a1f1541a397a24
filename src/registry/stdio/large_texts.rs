//! Parsing a downstream's line with the large texts of a tool result read straight into their `String`s.
//!
//! serde_json reads a string that has escapes (a JSON document sent as text has one at every quote) into a
//! scratch buffer and then copies it into the `String`: while a result of n bytes is parsed, the line
//! (~1.1 n), the scratch (n) and the string (n) are all held. Here each large `result.content[i].text` is
//! unescaped once, straight into its string, and the rest of the line is parsed as usual: the line and the
//! texts only. The value is the one `serde_json::from_slice` gives, whatever the line holds.

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// Texts shorter than this (as escaped in the line) are left to serde_json: the gain is in large ones.
const LARGE: usize = 64 * 1024;

/// The part of a message that can hold large texts; everything else is skipped unread. (serde rejects a
/// repeated field here, so a line whose value would depend on which duplicate wins goes the usual way.)
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    result: Option<ResultTexts<'a>>,
}

#[derive(Deserialize)]
struct ResultTexts<'a> {
    #[serde(borrow, default)]
    content: Vec<Block<'a>>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

/// `line` as JSON, exactly as `serde_json::from_slice(line)` reads it.
pub fn parse(line: &[u8]) -> serde_json::Result<Value> {
    if line.len() >= LARGE
        && let Some(value) = with_large_texts(line)
    {
        return Ok(value);
    }
    serde_json::from_slice(line)
}

/// The value of a line that holds large texts, or None to read it the usual way.
fn with_large_texts(line: &[u8]) -> Option<Value> {
    let message: Message = serde_json::from_slice(line).ok()?;
    let mut rest = Vec::new();
    let mut copied = 0;
    let mut texts = Vec::new();
    for (index, block) in message.result.map(|result| result.content).unwrap_or_default().iter().enumerate() {
        let Some(literal) = block.text.map(RawValue::get).filter(|literal| literal.len() >= LARGE) else {
            continue;
        };
        texts.push((index, unescape(literal.as_bytes())?));
        // The raw value borrows from `line`: its offset there is where the literal starts.
        let at = literal.as_ptr() as usize - line.as_ptr() as usize;
        rest.extend_from_slice(&line[copied..at]);
        rest.extend_from_slice(b"\"\"");
        copied = at + literal.len();
    }
    if texts.is_empty() {
        return None;
    }
    rest.extend_from_slice(&line[copied..]);
    let mut value: Value = serde_json::from_slice(&rest).ok()?;
    for (index, text) in texts {
        *value.get_mut("result")?.get_mut("content")?.get_mut(index)?.get_mut("text")? = Value::String(text);
    }
    Some(value)
}

/// The text of a JSON string literal (its quotes included) that serde_json has validated; None where
/// serde_json would not read it into a `String` (a lone surrogate, a bad escape).
fn unescape(literal: &[u8]) -> Option<String> {
    let mut rest = literal.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    let mut text = Vec::with_capacity(rest.len());
    // A plain loop finds the next escape: they come every few bytes in a JSON document sent as text, too
    // close together for memchr's set-up to pay.
    while let Some(at) = rest.iter().position(|&byte| byte == b'\\') {
        text.extend_from_slice(&rest[..at]);
        let (&escape, after) = rest[at + 1..].split_first()?;
        rest = after;
        let unescaped = match escape {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => b'\x08',
            b'f' => b'\x0c',
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let (c, after) = unicode_escape(rest)?;
                rest = after;
                text.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                continue;
            }
            _ => return None,
        };
        text.push(unescaped);
    }
    text.extend_from_slice(rest);
    String::from_utf8(text).ok()
}

/// The character of a `\u` escape whose `\u` was just read (a surrogate pair takes two), and what follows.
fn unicode_escape(bytes: &[u8]) -> Option<(char, &[u8])> {
    let (first, rest) = hex4(bytes)?;
    match first {
        0xD800..=0xDBFF => {
            let (second, rest) = hex4(rest.strip_prefix(b"\\u")?)?;
            if !(0xDC00..=0xDFFF).contains(&second) {
                return None;
            }
            let c = 0x1_0000 + ((u32::from(first) - 0xD800) << 10) + (u32::from(second) - 0xDC00);
            Some((char::from_u32(c)?, rest))
        }
        // A lone trailing surrogate is no character (`from_u32` says so).
        _ => Some((char::from_u32(first.into())?, rest)),
    }
}

fn hex4(bytes: &[u8]) -> Option<(u16, &[u8])> {
    let (digits, rest) = bytes.split_at_checked(4)?;
    if !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    Some((u16::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()?, rest))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn literals_unescape_as_serde_json_reads_them_and_what_it_rejects_is_rejected() {
        let literals = [
            r#""""#,
            r#""plain text, é and 😀 unescaped""#,
            r#""quotes \" backslash \\ slash \/ controls \b\f\n\r\t""#,
            r#""\u0041\u00e9\u20ac\ud83d\ude00 at the end\u0000""#,
            r#""\\u0041 is not an escape""#,
            r#""lone leading \ud800 x""#,
            r#""lone leading at the end \ud800""#,
            r#""lone trailing \udc00""#,
            r#""leading then not trailing \ud800\u0041""#,
            r#""two leading \ud800\ud800""#,
            r#""bad escape \x""#,
            r#""short \u12""#,
            r#""sign \u+123""#,
            r#""trailing backslash \"#,
        ];
        for literal in literals {
            let expected = serde_json::from_str::<String>(literal).ok();
            assert_eq!(unescape(literal.as_bytes()), expected, "{literal}");
        }
        assert_eq!(unescape(b"no quotes"), None);
    }

    fn tool_answer(texts: &[String]) -> String {
        let content: Vec<Value> =
            texts.iter().map(|text| json!({"type": "text", "text": text, "annotations": {"priority": 1}})).collect();
        json!({"jsonrpc": "2.0", "id": 7, "result": {"content": content, "isError": false}}).to_string()
    }

    #[test]
    fn lines_with_large_texts_parse_to_the_same_value_as_with_serde_json() {
        let document =
            json!({"rows": (0..4000).map(|i| json!({"name": format!("row \"{i}\" é"), "n": i})).collect::<Vec<_>>()});
        let large = serde_json::to_string(&document).unwrap();
        let lines = [
            tool_answer(std::slice::from_ref(&large)),
            tool_answer(&["small".into(), large.clone(), "😀\n".repeat(30_000), large.clone()]),
            // Large lines that hold no large text, or not where a tool result has it.
            tool_answer(&vec!["x".repeat(1000); 100]),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"structuredContent": {"text": large}}}).to_string(),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "image", "data": large}]}}).to_string(),
        ];
        for line in &lines {
            assert!(line.len() >= LARGE);
            assert_eq!(parse(line.as_bytes()).unwrap(), serde_json::from_str::<Value>(line).unwrap());
        }
        assert!(with_large_texts(lines[0].as_bytes()).is_some(), "the large text is read by hand");
        assert!(with_large_texts(lines[2].as_bytes()).is_none());
    }

    #[test]
    fn lines_the_shortcut_cannot_read_are_read_or_rejected_as_serde_json_does() {
        let large = "x".repeat(LARGE);
        let lines = [
            // The last of a repeated key wins.
            format!(
                r#"{{"id":1,"result":{{"content":[{{"type":"text","text":"{large}"}}]}},"result":{{"content":[]}}}}"#
            ),
            format!(r#"{{"id":1,"result":{{"content":[{{"type":"text","text":"{large}","text":"short"}}]}}}}"#),
            format!(r#"{{"id":1,"result":{{"content":"{large}"}}}}"#),
            format!(r#"{{"id":1,"result":{{"content":[{{"type":"text","text":"{large}\ud800"}}]}}}}"#),
            format!(r#"{{"id":1,"result":{{"content":[{{"type":"text","text":"{large}"}}]}}"#),
            format!("[\"{large}\"]"),
        ];
        for line in &lines {
            let ours = parse(line.as_bytes()).map_err(|e| e.to_string());
            let serde = serde_json::from_str::<Value>(line).map_err(|e| e.to_string());
            assert_eq!(ours.is_ok(), serde.is_ok(), "{}", &line[line.len() - 40..]);
            if let (Ok(ours), Ok(serde)) = (ours, serde) {
                assert_eq!(ours, serde);
            }
        }
    }
}
