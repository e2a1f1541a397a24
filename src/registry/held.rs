//! Large tool results with structured content, held as the downstream's own bytes from the transport that
//! read them to the registry that interprets them.
//!
//! rmcp carries a result as a `CallToolResult`: structured content as a `serde_json::Value` tree, each
//! block as a `ContentBlock`. For the official SDK's list of 110,000 small rows (structured content and one
//! text per row) that took ~85 MB of tree and ~42 MB of blocks for an answer of 20 MB. A transport instead
//! keeps the answer's bytes with where its texts and structured content lie ([`HeldResult`]), and gives rmcp
//! a stand-in result that names it by a random token in its `_meta`; the registry takes it back by that
//! token ([`take`]). The token never leaves the server, so a downstream cannot name another's result.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde::Deserialize;
use serde::de::{Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use super::stdio::tool_result::Wire;

/// The key of the stand-in result's `_meta` that names the held result.
const TOKEN_KEY: &str = "ptc-mcp/heldResult";
/// A held result nobody took this long after it was read is dropped (its call was given up meanwhile).
const UNCLAIMED_FOR: Duration = Duration::from_secs(60);

/// Held results by token, with when each was read.
static HELD: Mutex<Option<HashMap<String, (Instant, HeldResult)>>> = Mutex::new(None);

/// A tool result with structured content, read from a downstream's answer and kept as its bytes.
#[derive(Debug)]
pub struct HeldResult {
    /// The answer.
    bytes: Vec<u8>,
    /// Where each text block's text lies in `bytes`, as a JSON string literal, in order.
    texts: Vec<Range<usize>>,
    /// The blocks that are not text, in order.
    others: Vec<ContentBlock>,
    /// Where the structured content lies in `bytes`.
    structured: Range<usize>,
    pub is_error: Option<bool>,
    pub meta: Option<MetaObject>,
}

/// The literal of a text block's text, as the answer has it.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

impl HeldResult {
    /// The tool result at `result` in `answer` held as its bytes (taken), if it has structured content:
    /// `Ok(None)` for a result without (or another kind of result); an error where rmcp would not read it.
    pub fn read(answer: &mut Vec<u8>, result: Range<usize>) -> serde_json::Result<Option<HeldResult>> {
        let Some(wire) = serde_json::from_slice::<Wire<&RawValue, &RawValue>>(&answer[result])?.complete()? else {
            return Ok(None);
        };
        let Some(structured) = wire.structured_content else { return Ok(None) };
        // Every string read as a tree would read it: a result that rmcp would reject is rejected here too.
        serde_json::from_str::<Checked>(structured.get())?;
        let at = |raw: &RawValue| raw.get().as_ptr() as usize - answer.as_ptr() as usize;
        let span = |raw: &RawValue| at(raw)..at(raw) + raw.get().len();
        let (mut texts, mut others) = (Vec::new(), Vec::new());
        for raw in wire.content.unwrap_or_default() {
            // Each block read typed, as rmcp reads it, only to be checked (a text's string then dropped).
            let block: ContentBlock = serde_json::from_str(raw.get())?;
            let literal = serde_json::from_str::<Block>(raw.get())?;
            match (block, literal.text) {
                (ContentBlock::Text(_), Some(text)) => texts.push(span(text)),
                (ContentBlock::Text(_), None) => {
                    return Err(serde_json::Error::custom("a text block without its text"));
                }
                (other, _) => others.push(other),
            }
        }
        let structured = span(structured);
        let (is_error, meta) = (wire.is_error, wire.meta);
        Ok(Some(HeldResult { bytes: std::mem::take(answer), texts, others, structured, is_error, meta }))
    }

    /// The texts of the text blocks, in order.
    pub fn texts(&self) -> impl Iterator<Item = Cow<'_, str>> {
        self.texts.iter().map(|literal| {
            let literal: &RawValue = serde_json::from_slice(&self.bytes[literal.clone()]).expect("checked when read");
            super::result::raw::string(literal).expect("checked when read")
        })
    }

    /// The blocks that are not text, in order.
    pub fn others(&self) -> &[ContentBlock] {
        &self.others
    }

    /// The part at `part` of the structured content's text, moved to the start of the answer's bytes,
    /// which are cut to it (the rest let go of). The result holds nothing else then.
    pub fn take_structured_part(&mut self, part: Range<usize>) -> String {
        let mut bytes = std::mem::take(&mut self.bytes);
        let start = self.structured.start + part.start;
        bytes.copy_within(start..start + part.len(), 0);
        bytes.truncate(part.len());
        bytes.shrink_to_fit();
        self.texts.clear();
        self.structured = 0..0;
        String::from_utf8(bytes).expect("a part of JSON text that serde_json read")
    }

    /// A result of the blocks that are not text (where [`super::result::media`] finds its images).
    pub fn into_others(self) -> CallToolResult {
        let mut result = CallToolResult::default();
        result.content = self.others;
        result
    }

    /// The structured content as the downstream sent it.
    pub fn structured(&self) -> &RawValue {
        serde_json::from_slice(&self.bytes[self.structured.clone()]).expect("checked when read")
    }

    /// Keeps it until [`take`] asks for it; the stand-in result that names it.
    pub fn hold(self) -> CallToolResult {
        let mut token = [0u8; 16];
        getrandom::fill(&mut token).expect("the OS's random source works");
        let token: String = token.iter().map(|byte| format!("{byte:02x}")).collect();
        let mut stand_in = CallToolResult::default();
        stand_in.is_error = self.is_error;
        stand_in.meta =
            Some(MetaObject(serde_json::Map::from_iter([(TOKEN_KEY.to_string(), Value::from(token.clone()))])));
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        let held = held.get_or_insert_with(HashMap::new);
        forget_unclaimed(held);
        held.insert(token, (Instant::now(), self));
        stand_in
    }
}

/// The result a stand-in from [`HeldResult::hold`] names (taken: a second call gives `None`).
pub fn take(result: &CallToolResult) -> Option<HeldResult> {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let held = held.as_mut()?;
    forget_unclaimed(held);
    let token = result.meta.as_ref()?.0.get(TOKEN_KEY)?.as_str()?;
    held.remove(token).map(|(_, result)| result)
}

/// Drops the results whose call was given up before it got them.
fn forget_unclaimed(held: &mut HashMap<String, (Instant, HeldResult)>) {
    let now = Instant::now();
    held.retain(|_, (read, _)| now.duration_since(*read) < UNCLAIMED_FOR);
}

/// A JSON value read to the end of each of its strings, escapes decoded (as a tree reads them), and kept
/// nowhere.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_entry::<Checked, Checked>()?.is_some() {}
        Ok(Checked)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::registry::result::{OutputCheck, ResultShape, interpret, interpret_held, media};
    use crate::registry::stdio::tool_result;

    const MAX: usize = 1 << 20;

    /// An answer carrying `result`, and where the result lies in it.
    fn answer(result: &str) -> (Vec<u8>, Range<usize>) {
        let head = r#"{"jsonrpc":"2.0","id":7,"result":"#;
        (format!("{head}{result}}}").into_bytes(), head.len()..head.len() + result.len())
    }

    /// What a program gets from `result` read as a tree and read held: its value as JSON text (or the
    /// error's words) and its images.
    fn both(result: &str, shape: &ResultShape) -> [(Result<String, String>, usize); 2] {
        let (mut bytes, at) = answer(result);
        let mut tree = tool_result::read(&bytes[at.clone()]).unwrap().unwrap();
        let value = interpret(&mut tree, shape, MAX).map(|raw| raw.get().to_string()).map_err(|e| e.to_string());
        let from_tree = (value, media(tree).len());
        let mut held = HeldResult::read(&mut bytes, at).unwrap().expect("held");
        assert!(bytes.is_empty(), "the answer was taken");
        let value = interpret_held(&mut held, shape, MAX).map(|raw| raw.get().to_string()).map_err(|e| e.to_string());
        [from_tree, (value, media(held.into_others()).len())]
    }

    #[test]
    fn a_held_result_gives_what_its_tree_gives() {
        let rows: Vec<Value> =
            (0..50).map(|i| json!({"id": i, "name": format!("row {i}"), "score": i as f64 / 2.0})).collect();
        let texts: Vec<Value> = rows.iter().map(|row| json!({"type": "text", "text": row.to_string()})).collect();
        let image = json!({"type": "image", "data": "AAAA", "mimeType": "image/png"});
        let mut odd = texts.clone();
        odd.insert(3, json!({"type": "text", "text": "Found 50 rows \"quoted\"\n"}));
        let results = [
            json!({"content": texts, "structuredContent": {"result": rows}}).to_string(),
            json!({"content": odd, "structuredContent": {"result": rows}}).to_string(),
            json!({"content": [image, {"type": "text", "text": "{\"a\": 1}"}], "structuredContent": {"a": 1}}).to_string(),
            json!({"content": [{"type": "text", "text": "it broke"}], "structuredContent": {}, "isError": true}).to_string(),
            json!({"content": [], "structuredContent": {"result": [1, 2]}, "_meta": {"fastmcp": {"wrap_result": true}}})
                .to_string(),
            r#"{"content": [], "structuredContent": null}"#.to_string(),
            r#"{"structuredContent": {"result": [1E2, 18446744073709551616, "\u00e9"], "result": [2]}}"#.to_string(),
            "{\n  \"content\": [{\"type\": \"text\", \"text\": \"[1, 2]\"}],\n  \"structuredContent\": {\"result\": [1, 2]}\n}"
                .to_string(),
        ];
        let schema = json!({"type": "object", "required": ["result"],
            "properties": {"result": {"type": "array", "items": {"$ref": "#/$defs/Row"}}},
            "$defs": {"Row": {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}}});
        let check = OutputCheck::compile(schema.as_object().unwrap()).unwrap();
        let shapes = [
            ResultShape::default(),
            ResultShape { wrapped: true, ..ResultShape::default() },
            ResultShape { validator: Some(&check), declares_output_schema: true, wrapped: true },
        ];
        let mut errors = 0;
        for result in &results {
            for shape in &shapes {
                let [tree, held] = both(result, shape);
                assert_eq!(held, tree, "{result}");
                errors += usize::from(tree.0.is_err());
            }
        }
        assert!(errors >= 3, "mismatches and failures were compared too ({errors})");
    }

    #[test]
    fn results_without_structured_content_are_not_held_and_bad_ones_fail_as_rmcp_fails_them() {
        for result in [r#"{"content": [{"type": "text", "text": "hi"}]}"#, r#"{"resultType": "task", "task": {}}"#] {
            let (mut bytes, at) = answer(result);
            assert!(HeldResult::read(&mut bytes, at).unwrap().is_none(), "{result}");
            assert!(!bytes.is_empty(), "the answer stays with the caller");
        }
        for result in [
            r#"{"structuredContent": {"a": "\ud800"}}"#,
            r#"{"structuredContent": {}, "content": [{"type": "text"}]}"#,
            r#"{"structuredContent": {}, "content": [{"type": "image"}]}"#,
            r#"{"structuredContent": [1e400]}"#,
        ] {
            let (mut bytes, at) = answer(result);
            assert!(tool_result::read(&bytes[at.clone()]).is_err(), "{result}");
            assert!(HeldResult::read(&mut bytes, at).is_err(), "{result}");
        }
    }

    #[test]
    fn a_held_result_is_taken_once_by_its_stand_in() {
        let (mut bytes, at) = answer(r#"{"structuredContent": {"a": 1}}"#);
        let stand_in = HeldResult::read(&mut bytes, at).unwrap().unwrap().hold();
        assert!(stand_in.content.is_empty() && stand_in.structured_content.is_none());
        assert!(take(&stand_in).is_some());
        assert!(take(&stand_in).is_none());
        let mut forged = CallToolResult::default();
        forged.meta = Some(MetaObject(serde_json::Map::from_iter([(TOKEN_KEY.to_string(), json!("00"))])));
        assert!(take(&forged).is_none());
    }
}
