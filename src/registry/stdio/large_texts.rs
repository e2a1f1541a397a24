//! A tool result's large texts, cut out of a downstream's line so that each is read straight into its
//! `String`.
//!
//! serde_json reads a string that has escapes (a JSON document sent as text has one at every quote) into a
//! scratch buffer and then copies it into the `String`: while a result of n bytes is parsed, the line
//! (~1.1 n), the scratch (n) and the string (n) are all held. Here the large `result.content[i].text`s are
//! cut out of the line (each replaced by `""`) and the rest is parsed as usual; the largest text is then
//! unescaped in place, to the start of the line's own buffer, which becomes its string, and the others are
//! unescaped once, straight into theirs. A result's text then costs its size once.

use std::ops::Range;

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Deserialize;
use serde::de::Error as _;
use serde_json::value::RawValue;

/// Texts shorter than this (as escaped in the line) are left to serde_json: the gain is in large ones.
const LARGE: usize = 64 * 1024;

/// The part of a message that can hold large texts; everything else is skipped unread. (serde rejects a
/// repeated field here, so a line whose value would depend on which duplicate wins is not cut.)
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    result: Option<ResultTexts<'a>>,
}

#[derive(Deserialize)]
struct ResultTexts<'a> {
    #[serde(borrow, default)]
    content: Vec<Block<'a>>,
    #[serde(borrow, default, rename = "structuredContent")]
    structured: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

/// A line with its large texts cut out.
pub struct Cut {
    /// The line with each large text replaced by `""`.
    rest: Vec<u8>,
    /// The large texts but the largest, unescaped, by the index of their block.
    copied: Vec<(usize, String)>,
    /// The largest text: its block's index and where its literal lies in the line.
    largest: (usize, Range<usize>),
}

impl Cut {
    /// None if the line holds no large text where a tool result has its texts.
    pub fn of(line: &[u8]) -> Option<Cut> {
        if line.len() < LARGE || !may_hold_a_large_string(line) {
            return None;
        }
        let message: Message = serde_json::from_slice(line).ok()?;
        // A result with structured content is held as its line instead, texts and all (see HeldResult).
        if message.result.as_ref().is_some_and(|result| result.structured.is_some()) {
            return None;
        }
        let blocks = message.result.map(|result| result.content).unwrap_or_default();
        // Each large text's block index and where its literal lies (a raw value borrows from `line`).
        let large: Vec<(usize, Range<usize>)> = blocks
            .iter()
            .enumerate()
            .filter_map(|(index, block)| {
                let literal = block.text.map(RawValue::get).filter(|literal| literal.len() >= LARGE)?;
                let at = literal.as_ptr() as usize - line.as_ptr() as usize;
                Some((index, at..at + literal.len()))
            })
            .collect();
        let largest = large.iter().max_by_key(|(_, literal)| literal.len())?.clone();
        let mut rest = Vec::new();
        let mut copied = Vec::new();
        let mut done = 0;
        for (index, literal) in large {
            if index != largest.0 {
                copied.push((index, unescape(&line[literal.clone()])?));
            }
            rest.extend_from_slice(&line[done..literal.start]);
            rest.extend_from_slice(b"\"\"");
            done = literal.end;
        }
        rest.extend_from_slice(&line[done..]);
        Some(Cut { rest, copied, largest })
    }

    /// The line with its large texts cut out.
    pub fn rest(&self) -> &[u8] {
        &self.rest
    }

    /// Puts the texts back into `result` (read from [`Cut::rest`]); the largest is unescaped in place in
    /// `line`, the line this was cut from. A text in a block that is not a text block is no part of the
    /// result and is dropped.
    pub fn fill(self, result: &mut CallToolResult, mut line: Vec<u8>) -> serde_json::Result<()> {
        let (index, literal) = self.largest;
        // serde_json accepted the literal as part of the line, so only what it rejects in a `String` fails.
        let invalid = || serde_json::Error::custom("a large text in the line is not a valid string");
        let largest = match result.content.get(index) {
            Some(ContentBlock::Text(_)) => {
                let len = unescape_to_start(&mut line, literal).ok_or_else(invalid)?;
                line.truncate(len);
                line.shrink_to_fit();
                String::from_utf8(line).map_err(|_| invalid())?
            }
            _ => String::new(),
        };
        for (index, text) in self.copied.into_iter().chain([(index, largest)]) {
            if let Some(ContentBlock::Text(block)) = result.content.get_mut(index) {
                block.text = text;
            }
        }
        Ok(())
    }
}

/// Whether a string literal in `line` may be `LARGE` bytes long: whether two quotes that are not escaped
/// lie that far apart. A result of many small values (a list of rows) is then not parsed once more for
/// nothing: memchr finds the quotes many times faster than serde_json reads the line.
fn may_hold_a_large_string(line: &[u8]) -> bool {
    let mut opening = None;
    for at in memchr::memchr_iter(b'"', line) {
        // Escaped by an odd number of backslashes; each run of them is looked at once, by the quote after it.
        let backslashes = line[..at].iter().rev().take_while(|&&byte| byte == b'\\').count();
        if backslashes % 2 == 1 {
            continue;
        }
        match opening.take() {
            Some(start) if at + 1 - start >= LARGE => return true,
            Some(_) => {}
            None => opening = Some(at),
        }
    }
    false
}

/// The text of a JSON string literal (its quotes included) that serde_json has validated; None where
/// serde_json would not read it into a `String` (a lone surrogate, a bad escape).
fn unescape(literal: &[u8]) -> Option<String> {
    let mut text = literal.to_vec();
    let len = unescape_to_start(&mut text, 0..literal.len())?;
    text.truncate(len);
    String::from_utf8(text).ok()
}

/// Unescapes the string literal at `literal` in `buf` (quotes included) to the start of `buf` and gives the
/// text's length; None where serde_json would not read the literal into a `String`. In place: every escape
/// is longer than what it stands for, so the text never overtakes the literal it is read from.
fn unescape_to_start(buf: &mut [u8], literal: Range<usize>) -> Option<usize> {
    let quoted = buf.get(literal.clone())?;
    if quoted.len() < 2 || quoted[0] != b'"' || quoted[quoted.len() - 1] != b'"' {
        return None;
    }
    let (mut read, end, mut written) = (literal.start + 1, literal.end - 1, 0);
    // A plain loop finds the next escape: they come every few bytes in a JSON document sent as text, too
    // close together for memchr's set-up to pay.
    while let Some(at) = buf[read..end].iter().position(|&byte| byte == b'\\') {
        buf.copy_within(read..read + at, written);
        written += at;
        read += at + 1;
        let escape = *buf[read..end].first()?;
        read += 1;
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
                let (c, rest) = unicode_escape(&buf[read..end])?;
                read = end - rest.len();
                let encoded = c.len_utf8();
                c.encode_utf8(&mut buf[written..written + encoded]);
                written += encoded;
                continue;
            }
            _ => return None,
        };
        buf[written] = unescaped;
        written += 1;
    }
    buf.copy_within(read..end, written);
    Some(written + end - read)
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
    use serde_json::{Value, json};

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

    #[test]
    fn only_a_line_with_quotes_far_enough_apart_may_hold_a_large_string() {
        let rows: Vec<Value> = (0..10_000).map(|i| json!({"id": i, "name": format!("row \"{i}\"")})).collect();
        let rows = json!({"result": {"structuredContent": rows}}).to_string();
        assert!(rows.len() > 4 * LARGE && !may_hold_a_large_string(rows.as_bytes()));
        let document = serde_json::to_string(&rows).unwrap();
        assert!(may_hold_a_large_string(document.as_bytes()), "escaped quotes do not end a string");
        let numbers = format!("[{}]", "1,".repeat(LARGE));
        assert!(!may_hold_a_large_string(numbers.as_bytes()), "no string at all");
        let short_strings_far_apart = format!(r#"["a",{}"b"]"#, "1,".repeat(LARGE));
        assert!(!may_hold_a_large_string(short_strings_far_apart.as_bytes()));
        let exactly = format!("\"{}\"", "x".repeat(LARGE - 2));
        assert!(may_hold_a_large_string(exactly.as_bytes()) && !may_hold_a_large_string(&exactly.as_bytes()[1..]));
    }

    fn tool_answer(texts: &[String]) -> String {
        let content: Vec<Value> =
            texts.iter().map(|text| json!({"type": "text", "text": text, "annotations": {"priority": 1}})).collect();
        json!({"jsonrpc": "2.0", "id": 7, "result": {"content": content, "isError": false}}).to_string()
    }

    #[derive(Deserialize)]
    struct Answer {
        result: CallToolResult,
    }

    /// A line's tool result as the transport reads it: cut, read, filled.
    fn read(line: &str) -> serde_json::Result<CallToolResult> {
        let Some(cut) = Cut::of(line.as_bytes()) else {
            return serde_json::from_str::<Answer>(line).map(|answer| answer.result);
        };
        let mut answer: Answer = serde_json::from_slice(cut.rest())?;
        cut.fill(&mut answer.result, line.as_bytes().to_vec())?;
        Ok(answer.result)
    }

    /// Reading `line` cut gives what serde_json gives: the same result or an error.
    fn assert_read_as_serde_json_reads(line: &str) {
        let ours = read(line).map_err(|e| e.to_string());
        let serde = serde_json::from_str::<Answer>(line).map(|answer| answer.result).map_err(|e| e.to_string());
        assert_eq!(ours.is_ok(), serde.is_ok(), "{ours:?} {serde:?}: {}", &line[line.len() - 40..]);
        if let (Ok(ours), Ok(serde)) = (ours, serde) {
            assert!(ours == serde, "{}", &line[line.len() - 40..]);
        }
    }

    #[test]
    fn lines_with_large_texts_read_as_with_serde_json() {
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
            // A large text in a block that is no text block is no part of the result.
            json!({"id": 1, "result": {"content": [{"type": "image", "data": "x", "mimeType": "a/b", "text": large}]}})
                .to_string(),
        ];
        for line in &lines {
            assert!(line.len() >= LARGE);
            assert_read_as_serde_json_reads(line);
        }
        assert!(Cut::of(lines[0].as_bytes()).is_some(), "the large text is read by hand");
        assert!(Cut::of(lines[1].as_bytes()).is_some_and(|cut| cut.copied.len() == 2));
        assert!(Cut::of(lines[2].as_bytes()).is_none());
        assert!(Cut::of(lines[5].as_bytes()).is_some());
    }

    #[test]
    fn lines_the_cut_cannot_read_are_read_or_rejected_as_serde_json_does() {
        let large = "x".repeat(LARGE);
        let lines = [
            format!(
                r#"{{"id":1,"result":{{"content":[{{"type":"text","text":"{large}"}}]}},"result":{{"content":[]}}}}"#
            ),
            format!(r#"{{"id":1,"result":{{"content":[{{"type":"text","text":"{large}","text":"short"}}]}}}}"#),
            format!(r#"{{"id":1,"result":{{"content":"{large}"}}}}"#),
            format!(r#"{{"id":1,"result":{{"content":[{{"type":"text","text":"{large}\ud800"}}]}}}}"#),
            format!(r#"{{"id":1,"result":{{"content":[{{"type":"text","text":"{large}"}}]}}"#),
            format!("[\"{large}\"]"),
            // serde reads a struct from an array too.
            format!(r#"[{{"content":[{{"type":"text","text":"{large}"}}]}}]"#),
            format!(r#"{{"id":1,"result":[[{{"type":"text","text":"{large}"}}]]}}"#),
            format!(r#"{{"id":1,"result":{{"content":[["{large}"]]}}}}"#),
            format!(r#"{{"id":1,"result":{{"content":[["text", "{large}"]]}}}}"#),
        ];
        for line in &lines {
            assert_read_as_serde_json_reads(line);
        }
    }
}

#[cfg(test)]
mod properties;
