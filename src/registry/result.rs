//! Turning a downstream `CallToolResult` into the value a program receives (README, "Inside a program").
//!
//! The value is produced as serialised JSON ([`RawValue`]) so that the common case — one text block that is
//! JSON — is validated once and passed to the runner without a parse/serialise round trip.

use std::borrow::Cow;
use std::ops::Range;

use rmcp::model::{CallToolResult, ContentBlock, MetaObject, ResourceContents};
use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value};

use super::held::HeldResult;
use super::limits::OFF_THREAD_BYTES;
pub use output_check::OutputCheck;
use restated::Restated;

/// A result with this many blocks, or structured content of this many values, is large to read.
const MANY_PARTS: usize = 4096;

/// What the registry knows about a tool that shapes how its results are read.
#[derive(Default)]
pub struct ResultShape<'a> {
    /// The compiled `outputSchema`, when the tool declares one that compiles.
    pub validator: Option<&'a OutputCheck>,
    /// Whether the tool declares an `outputSchema` at all (results must then carry structured content).
    pub declares_output_schema: bool,
    /// Whether structured results come wrapped as `{"result": v}` (FastMCP / official SDK style).
    pub wrapped: bool,
}

/// An image or audio block of a result: `show()` in the program can attach it to the run's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Media {
    /// What it is, e.g. `image (image/png)`.
    pub what: String,
    pub block: ContentBlock,
}

impl Media {
    /// Its placeholder in the value's `_notes`, e.g. `[non-text content omitted: image (image/png)]`.
    pub fn placeholder(&self) -> String {
        placeholder_for(&self.what)
    }

    /// The size that counts against `max_attachment_bytes`: the base64 text.
    pub fn bytes(&self) -> usize {
        match &self.block {
            ContentBlock::Image(image) => image.data.len(),
            ContentBlock::Audio(audio) => audio.data.len(),
            _ => 0,
        }
    }
}

/// The image and audio blocks of a result (taken out of it), in order, each with its placeholder.
pub fn media(result: CallToolResult) -> Vec<Media> {
    result
        .content
        .into_iter()
        .filter(|block| matches!(block, ContentBlock::Image(_) | ContentBlock::Audio(_)))
        .filter_map(|block| Some(Media { what: what(&block)?, block }))
        .collect()
}

/// Why a result gives the program no value. Its words follow the tool's name in the `ToolError` message.
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    /// The tool said it failed (`isError`), with its texts.
    #[error("returned an error: {0}")]
    ToolFailed(String),
    #[error(
        "returned {bytes} bytes, more than max_tool_result_bytes ({max}); ask it for less (filter, paginate or \
         limit the query)"
    )]
    TooLarge { bytes: usize, max: usize },
    /// `at` is the JSON pointer of the first mismatch, empty for the whole value.
    #[error("returned a result that does not match its output schema{}: {message}", at_path(at))]
    SchemaMismatch { at: String, message: String },
    #[error("declares an output schema but returned no structured content; the server is at fault")]
    NoStructuredContent,
    #[error("returned unusable JSON: {0}")]
    UnusableJson(#[from] serde_json::Error),
}

/// ` at /a/0` for a mismatch inside the value.
fn at_path(at: &str) -> String {
    if at.is_empty() { String::new() } else { format!(" at {at}") }
}

/// Whether reading `result` is work enough to be done on a blocking thread: long texts, many blocks or a
/// large structured tree (validated, compared with the texts, serialised and freed).
pub fn is_large(result: &CallToolResult) -> bool {
    let text_bytes: usize = result.content.iter().filter_map(|block| block.as_text()).map(|text| text.text.len()).sum();
    text_bytes >= OFF_THREAD_BYTES
        || result.content.len() >= MANY_PARTS
        || result.structured_content.as_ref().is_some_and(|tree| has_values(tree, MANY_PARTS))
}

/// Whether `tree` holds at least `count` values (counted only that far).
fn has_values(tree: &Value, count: usize) -> bool {
    let mut seen = 0;
    let mut pending = vec![tree];
    while let Some(value) = pending.pop() {
        seen += 1;
        if seen >= count {
            return true;
        }
        match value {
            Value::Array(items) => pending.extend(items.iter().take(count)),
            Value::Object(object) => pending.extend(object.values().take(count)),
            _ => {}
        }
    }
    false
}

/// Reads `result`. A result that is one text block and nothing else gives up its text (moved into the
/// value, not copied: it can be megabytes).
pub fn interpret(
    result: &mut CallToolResult,
    shape: &ResultShape,
    max_bytes: usize,
) -> Result<Box<RawValue>, ResultError> {
    if result.is_error != Some(true)
        && result.structured_content.is_none()
        && !shape.declares_output_schema
        && let [ContentBlock::Text(only)] = result.content.as_mut_slice()
    {
        check_size(only.text.len(), max_bytes)?;
        return Ok(text_value(std::mem::take(&mut only.text)));
    }
    let texts: Vec<&str> =
        result.content.iter().filter_map(|block| block.as_text().map(|text| text.text.as_str())).collect();
    if result.is_error == Some(true) {
        return Err(failed(texts.iter().copied()));
    }
    let text_bytes: usize = texts.iter().map(|t| t.len()).sum();
    check_size(text_bytes, max_bytes)?;
    let mut notes: Vec<String> = result.content.iter().filter_map(placeholder).collect();
    let value = match &result.structured_content {
        Some(structured) => {
            let texts = texts.iter().map(|text| Cow::Borrowed(*text));
            let wrapped = shape.wrapped || meta_says_wrapped(result.meta.as_ref());
            let structured = to_raw_value(structured)?;
            return match structured_value(&structured, texts, notes, shape, wrapped)? {
                Structured::Plain(value) => plain_value(&structured.get()[value], max_bytes),
                Structured::WithNotes(value) => Ok(value),
            };
        }
        None if shape.declares_output_schema => return Err(ResultError::NoStructuredContent),
        None => {
            let parsed: Vec<(&str, Option<&RawValue>)> =
                texts.iter().map(|text| (*text, serde_json::from_str::<&RawValue>(text).ok())).collect();
            let json: Vec<&RawValue> = parsed.iter().filter_map(|(_, raw)| *raw).collect();
            let prose = parsed.iter().filter(|(_, raw)| raw.is_none()).map(|(text, _)| text.to_string());
            match json.as_slice() {
                [] if notes.is_empty() => return Ok(as_json_string(texts.join("\n"))),
                [] if texts.is_empty() => Value::Null,
                [] => Value::String(texts.join("\n")),
                // A sole text block was handled above: notes or prose come with this one.
                [only] => {
                    notes.extend(prose);
                    serde_json::from_str(only.get())?
                }
                several => {
                    notes.extend(prose);
                    Value::Array(several.iter().map(|raw| serde_json::from_str(raw.get())).collect::<Result<_, _>>()?)
                }
            }
        }
    };
    let with_notes = attach_notes(value, notes);
    Ok(to_raw_value(&with_notes)?)
}

/// Reads a held result (which has structured content): as [`interpret`] reads the same result.
/// The answer's bytes are let go of before the value is written out: it is held once at a time.
pub fn interpret_held(
    held: &mut HeldResult,
    shape: &ResultShape,
    max_bytes: usize,
) -> Result<Box<RawValue>, ResultError> {
    if held.is_error == Some(true) {
        return Err(failed(held.texts()));
    }
    check_size(held.texts().map(|text| text.len()).sum(), max_bytes)?;
    let notes = held.others().iter().filter_map(placeholder).collect();
    let wrapped = shape.wrapped || meta_says_wrapped(held.meta.as_ref());
    match structured_value(held.structured(), held.texts(), notes, shape, wrapped)? {
        Structured::Plain(value) => plain_value(&held.take_structured_part(value), max_bytes),
        Structured::WithNotes(value) => Ok(value),
    }
}

/// The value of a result with structured content, as [`structured_value`] finds it.
enum Structured {
    /// It is this part of the structured content's text, to be written out as it is.
    Plain(Range<usize>),
    /// It has notes: written out with them.
    WithNotes(Box<RawValue>),
}

/// `json` as the value a program receives: in canonical form, within the size limit.
fn plain_value(json: &str, max_bytes: usize) -> Result<Box<RawValue>, ResultError> {
    let value = raw::canonical(json)?;
    check_size(value.get().len(), max_bytes)?;
    Ok(value)
}

/// The error of a result that says the tool failed, with its texts.
fn failed(texts: impl Iterator<Item = impl AsRef<str>>) -> ResultError {
    let texts: Vec<_> = texts.collect();
    let detail = if texts.is_empty() {
        "(no details given)".to_string()
    } else {
        texts.iter().map(AsRef::as_ref).collect::<Vec<&str>>().join("\n")
    };
    ResultError::ToolFailed(detail)
}

/// The value of a result with structured content (JSON text): checked against the output schema,
/// unwrapped, with the texts that do not restate it and the placeholders in `notes` as its `_notes`.
fn structured_value<'t>(
    structured: &RawValue,
    texts: impl Iterator<Item = Cow<'t, str>>,
    mut notes: Vec<String>,
    shape: &ResultShape,
    wrapped: bool,
) -> Result<Structured, ResultError> {
    if let Some(check) = shape.validator {
        check
            .check(structured)
            .map_err(|output_check::Mismatch { at, message }| ResultError::SchemaMismatch { at, message })?;
    }
    let entries = raw::entries(structured);
    let value = match entries.as_deref() {
        Some([(key, only)]) if wrapped && key == "result" => only,
        _ => structured,
    };
    let restated = Restated::new(structured, value);
    notes.extend(texts.filter(|text| !restated.by(text)).map(Cow::into_owned));
    if notes.is_empty() {
        let start = value.get().as_ptr() as usize - structured.get().as_ptr() as usize;
        return Ok(Structured::Plain(start..start + value.get().len()));
    }
    let value: Value = serde_json::from_str(value.get())?;
    Ok(Structured::WithNotes(to_raw_value(&attach_notes(value, notes))?))
}

fn check_size(bytes: usize, max: usize) -> Result<(), ResultError> {
    if bytes > max {
        return Err(ResultError::TooLarge { bytes, max });
    }
    Ok(())
}

/// A placeholder note for content a program cannot receive.
fn placeholder(block: &ContentBlock) -> Option<String> {
    what(block).map(|what| placeholder_for(&what))
}

fn placeholder_for(what: &str) -> String {
    format!("[non-text content omitted: {what}]")
}

/// What a block a program cannot receive is, in words: `image (image/png)`; `None` for text.
fn what(block: &ContentBlock) -> Option<String> {
    Some(match block {
        ContentBlock::Text(_) => return None,
        ContentBlock::Image(image) => format!("image ({})", image.mime_type),
        ContentBlock::Audio(audio) => format!("audio ({})", audio.mime_type),
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { uri, mime_type, .. }
            | ResourceContents::BlobResourceContents { uri, mime_type, .. } => {
                format!("resource {uri} ({})", mime_type.as_deref().unwrap_or("unknown type"))
            }
            _ => "resource".to_string(),
        },
        ContentBlock::ResourceLink(link) => format!("resource link {}", link.uri),
        _ => "unknown content type".to_string(),
    })
}

/// Standalone fastmcp marks wrapped results in the result's `_meta.fastmcp.wrap_result`.
fn meta_says_wrapped(meta: Option<&MetaObject>) -> bool {
    meta.and_then(|meta| meta.0.get("fastmcp")).and_then(|f| f.get("wrap_result")) == Some(&Value::Bool(true))
}

fn attach_notes(value: Value, notes: Vec<String>) -> Value {
    if notes.is_empty() {
        return value;
    }
    let notes = Value::Array(notes.into_iter().map(Value::String).collect());
    match value {
        Value::Object(mut object) => {
            object.insert("_notes".to_string(), notes);
            Value::Object(object)
        }
        Value::Null => Value::Object(Map::from_iter([("_notes".to_string(), notes)])),
        other => Value::Object(Map::from_iter([("result".to_string(), other), ("_notes".to_string(), notes)])),
    }
}

/// `text` as a JSON string, made in its own buffer (see [`quote_in_place`]).
fn as_json_string(text: String) -> Box<RawValue> {
    RawValue::from_string(quote_in_place(text)).expect("a quoted string is JSON")
}

/// `text` as a JSON string literal, escaped as serde_json escapes it, in place: the buffer grows by what the
/// quotes and escapes add and is filled from the end, so no byte is overwritten before it is read. A large
/// text is not held twice.
fn quote_in_place(text: String) -> String {
    let added: usize = 2 + text.bytes().filter_map(escape).map(|(_, len)| len - 1).sum::<usize>();
    let mut bytes = text.into_bytes();
    let mut read = bytes.len();
    bytes.resize(read + added, b'"');
    // Where the next byte from the end goes: the closing quote is in place already.
    let mut write = bytes.len() - 1;
    while let Some(at) = bytes[..read].iter().rposition(|&byte| escape(byte).is_some()) {
        write -= read - (at + 1);
        bytes.copy_within(at + 1..read, write);
        let (escaped, len) = escape(bytes[at]).expect("found by its escape");
        write -= len;
        bytes[write..write + len].copy_from_slice(&escaped[..len]);
        read = at;
    }
    debug_assert_eq!(write, read + 1, "what is left goes right after the opening quote");
    bytes.copy_within(..read, 1);
    bytes[0] = b'"';
    String::from_utf8(bytes).expect("escapes and quotes are ASCII and replace ASCII")
}

/// How serde_json escapes `byte` in a string (and the escape's length), if it does.
fn escape(byte: u8) -> Option<([u8; 6], usize)> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = match byte {
        b'"' => b'"',
        b'\\' => b'\\',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        0x08 => b'b',
        0x0c => b'f',
        0..0x20 => {
            return Some(([b'\\', b'u', b'0', b'0', HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 15)]], 6));
        }
        _ => return None,
    };
    Some(([b'\\', short, 0, 0, 0, 0], 2))
}

/// The value of a result's only text: the JSON it holds (whitespace around it trimmed), else the text as a
/// string.
fn text_value(text: String) -> Box<RawValue> {
    if serde_json::from_str::<&RawValue>(&text).is_err() {
        return as_json_string(text);
    }
    RawValue::from_string(text).expect("the text was just read as JSON")
}

/// Whether a tool's declared output schema says its structured results are wrapped as `{"result": v}`:
/// fastmcp's `x-fastmcp-wrap-result` marker, or the official SDK's single-property `result` object.
pub fn schema_says_wrapped(output_schema: &Map<String, Value>) -> bool {
    if output_schema.get("x-fastmcp-wrap-result") == Some(&Value::Bool(true)) {
        return true;
    }
    matches!(output_schema.get("properties"), Some(Value::Object(p)) if p.len() == 1 && p.contains_key("result"))
}

/// Whether a tool's `_meta` carries fastmcp's `wrap_result` marker.
pub fn tool_meta_says_wrapped(meta: Option<&Map<String, Value>>) -> bool {
    meta.and_then(|m| m.get("fastmcp")).and_then(|f| f.get("wrap_result")) == Some(&Value::Bool(true))
}

mod output_check;
pub mod raw;
mod restated;
#[cfg(test)]
mod tests;
