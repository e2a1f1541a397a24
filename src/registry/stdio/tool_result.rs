//! A downstream's tool result, read typed from its answer, its structured content as a JSON tree without
//! spare capacity.
//!
//! serde_json grows each object and array of a tree as it reads it: an object of four keys gets room for
//! seven (with `preserve_order` every entry is ~100 bytes), a list of two gets room for four. A structured
//! result of many small rows (the official SDK's `list[Row]`) took ~1.3 KB per 75-byte row that way; read
//! tight it takes ~0.9 KB. The tree is needed: output-schema validation reads it.

use std::fmt;

use rmcp::model::{CallToolResult, ContentBlock, MetaObject, ResultType};
use serde::Deserialize;
use serde::de::{Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A tool result as it is on the wire (as rmcp reads one), its content blocks read as `C` and its
/// structured content as `S`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "C: Deserialize<'de>, S: Deserialize<'de>"))]
pub struct Wire<C, S> {
    pub result_type: Option<ResultType>,
    pub content: Option<Vec<C>>,
    /// Present even when `null` (which is structured content of its own).
    #[serde(default, deserialize_with = "present")]
    pub structured_content: Option<S>,
    pub is_error: Option<bool>,
    #[serde(rename = "_meta")]
    pub meta: Option<MetaObject>,
}

impl<C, S> Wire<C, S> {
    /// `None` if it is another kind of result (a task handle, say); an error where rmcp would not read it.
    pub fn complete(self) -> serde_json::Result<Option<Self>> {
        if self.result_type.as_ref().is_some_and(|kind| !kind.is_complete()) {
            return Ok(None);
        }
        if self.content.is_none() && self.structured_content.is_none() && self.is_error.is_none() {
            return Err(serde_json::Error::custom("it has none of content, structuredContent and isError"));
        }
        Ok(Some(self))
    }
}

/// The tool result in `json`, the `result` of an answer; `None` if it is another kind of result (a task
/// handle, say).
pub fn read(json: &[u8]) -> serde_json::Result<Option<CallToolResult>> {
    let Some(wire) = serde_json::from_slice::<Wire<ContentBlock, Tight>>(json)?.complete()? else {
        return Ok(None);
    };
    let mut result = CallToolResult::default();
    result.result_type = wire.result_type;
    result.content = wire.content.unwrap_or_default();
    result.structured_content = wire.structured_content.map(|Tight(value)| value);
    result.is_error = wire.is_error;
    result.meta = wire.meta;
    Ok(Some(result))
}

/// For `#[serde(default, deserialize_with = "present")]`: a field that is there is `Some`, even when `null`.
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// A JSON value whose objects and arrays hold no spare capacity; otherwise as serde_json reads it.
struct Tight(Value);

impl<'de> Deserialize<'de> for Tight {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TightVisitor).map(Tight)
    }
}

struct TightVisitor;

impl<'de> Visitor<'de> for TightVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Tight(item)) = seq.next_element()? {
            items.push(item);
        }
        items.shrink_to_fit();
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        // Gathered first: a map's capacity is only exact when it is made for a known number of entries.
        let mut entries = Vec::new();
        while let Some((key, Tight(value))) = map.next_entry::<String, Tight>()? {
            entries.push((key, value));
        }
        let mut object = Map::with_capacity(entries.len());
        // A repeated key keeps its first place and its last value, as in serde_json's own tree.
        object.extend(entries);
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tight_trees_are_the_trees_serde_json_reads() {
        let documents = [
            r#"{"b": 1, "a": [1, -2, 3.5, 1e300, "x\"y", null, true, {}], "c": {"d": [], "e": {"f": 18446744073709551615}}}"#,
            r#"{"k": 1, "other": 2, "k": 3}"#,
            r#"[[], [[]], {"": ""}]"#,
            "-0.0",
            r#""plain""#,
        ];
        for document in documents {
            let Tight(tight) = serde_json::from_str(document).unwrap();
            let serde: Value = serde_json::from_str(document).unwrap();
            assert_eq!(tight, serde, "{document}");
            assert_eq!(tight.to_string(), serde.to_string(), "keys in the same order: {document}");
        }
    }

    #[test]
    fn results_read_as_rmcp_reads_them_and_other_kinds_are_no_tool_results() {
        let results = [
            json!({"content": [{"type": "text", "text": "hi"}], "isError": false, "_meta": {"m": 1}}),
            json!({"structuredContent": {"rows": [{"id": 1, "tags": ["a", "b"]}]}, "resultType": "complete"}),
            json!({"structuredContent": null}),
            json!({"isError": true}),
        ];
        for result in results {
            let ours = read(result.to_string().as_bytes()).unwrap().expect("a tool result");
            assert_eq!(ours, serde_json::from_value::<CallToolResult>(result).unwrap());
        }
        assert!(read(br#"{"resultType": "task", "task": {"taskId": "t"}}"#).unwrap().is_none());
        for invalid in [&br#"{"_meta": {}}"#[..], br#"{"content": "not a list"}"#, b"null", b"[]"] {
            let error = read(invalid).unwrap_err();
            assert!(serde_json::from_slice::<CallToolResult>(invalid).is_err(), "{error}");
        }
    }
}
