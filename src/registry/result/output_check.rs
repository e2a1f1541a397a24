//! A tool's output schema, checked against structured content that is JSON text, without a tree of the
//! whole document where the schema allows it.
//!
//! The official SDK declares a list result as `{"type": "object", "properties": {"result": {"type":
//! "array", "items": {"$ref": "#/$defs/Row"}}}, "required": ["result"], "$defs": {…}}`. Such a list is
//! checked one element at a time against its items' schema (compiled on its own, with the root's
//! definitions), and the object around it with the list emptied: together exactly what the whole schema
//! asks. Only a schema whose every keyword is known to look at nothing else is split so; any other is
//! checked whole. A value that does not match is checked whole again, for the mismatch a whole check reports
//! first.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::raw;

/// Keywords of the root schema that say nothing about a listed property's elements.
const ROOT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "title",
    "description",
    "$schema",
    "$defs",
    "definitions",
];
/// Keywords of a listed property's schema that may stand beside `items`.
const LIST_KEYWORDS: &[&str] = &["type", "items", "title", "description"];
/// Keywords that would mean something else at the root of the items' own schema.
const ROOT_ONLY: &[&str] = &["$id", "$schema", "$defs", "definitions", "$anchor", "$dynamicAnchor", "$recursiveAnchor"];

/// A compiled output schema.
pub struct OutputCheck {
    whole: jsonschema::Validator,
    /// The properties that are lists checked an element at a time, with their items' schema.
    lists: Vec<(String, jsonschema::Validator)>,
}

/// Where a value first fails its schema, and how.
#[derive(Debug, PartialEq)]
pub struct Mismatch {
    /// The JSON pointer of the mismatch, empty for the whole value.
    pub at: String,
    pub message: String,
}

impl OutputCheck {
    pub fn compile(schema: &Map<String, Value>) -> Result<OutputCheck, jsonschema::ValidationError<'static>> {
        let whole = jsonschema::validator_for(&Value::Object(schema.clone()))?;
        let lists = list_items(schema)
            .into_iter()
            .filter_map(|(key, items)| Some((key, jsonschema::validator_for(&items).ok()?)))
            .collect();
        Ok(OutputCheck { whole, lists })
    }

    /// Checks `structured`, JSON text that serde_json has read (every string, every number).
    pub fn check(&self, structured: &RawValue) -> Result<(), Mismatch> {
        if !self.lists.is_empty() && self.holds_in_parts(structured) {
            return Ok(());
        }
        let tree: Value = serde_json::from_str(structured.get())
            .map_err(|error| Mismatch { at: String::new(), message: error.to_string() })?;
        self.whole
            .validate(&tree)
            .map_err(|error| Mismatch { at: error.instance_path().to_string(), message: error.to_string() })
    }

    /// Whether `structured` matches, checked with each listed property's elements one at a time; false
    /// also where it cannot be checked so (it is no object, a listed property is no list).
    fn holds_in_parts(&self, structured: &RawValue) -> bool {
        let Some(entries) = raw::entries(structured) else { return false };
        let mut shell = Map::new();
        let mut lists = Vec::new();
        for (key, value) in entries {
            let items = self.lists.iter().find(|(list, _)| *list == key).map(|(_, items)| items);
            match (items, raw::elements(value)) {
                (Some(items), Some(elements)) => {
                    shell.insert(key.into_owned(), Value::Array(Vec::new()));
                    lists.push((items, elements));
                }
                _ => match serde_json::from_str(value.get()) {
                    Ok(value) => {
                        shell.insert(key.into_owned(), value);
                    }
                    Err(_) => return false,
                },
            }
        }
        self.whole.is_valid(&Value::Object(shell))
            && lists.iter().all(|(items, elements)| {
                elements.iter().all(|element| {
                    serde_json::from_str::<Value>(element.get()).is_ok_and(|element| items.is_valid(&element))
                })
            })
    }
}

/// The properties of `schema` whose lists can be checked an element at a time, each with its items'
/// schema made to stand alone (the root's definitions and dialect beside it); none unless every keyword of
/// the root is one of [`ROOT_KEYWORDS`] (or an `x-` extension) and every reference a definition.
fn list_items(schema: &Map<String, Value>) -> Vec<(String, Value)> {
    let known = |keyword: &String| ROOT_KEYWORDS.contains(&keyword.as_str()) || keyword.starts_with("x-");
    let definitions = ["$defs", "definitions"].map(|key| schema.get(key));
    if !schema.keys().all(known)
        || schema.get("type").is_some_and(|kind| kind != "object")
        || !definitions.iter().flatten().all(|defined| refers_only_to_definitions(defined))
    {
        return Vec::new();
    }
    let Some(Value::Object(properties)) = schema.get("properties") else { return Vec::new() };
    properties
        .iter()
        .filter_map(|(key, property)| {
            let property = property.as_object()?;
            let Some(Value::Object(items)) = property.get("items") else { return None };
            let listed = property.keys().all(|keyword| LIST_KEYWORDS.contains(&keyword.as_str()))
                && property.get("type").is_none_or(|kind| kind == "array")
                && !items.keys().any(|keyword| ROOT_ONLY.contains(&keyword.as_str()))
                && refers_only_to_definitions(&Value::Object(items.clone()));
            if !listed {
                return None;
            }
            let mut alone = items.clone();
            for key in ["$schema", "$defs", "definitions"] {
                if let Some(value) = schema.get(key) {
                    alone.insert(key.to_string(), value.clone());
                }
            }
            Some((key.clone(), Value::Object(alone)))
        })
        .collect()
}

/// Whether every reference in `schema` is to one of the root's definitions (`#/$defs/…`,
/// `#/definitions/…`), which the items' own schema has too. (A property named `$ref` counts as one.)
fn refers_only_to_definitions(schema: &Value) -> bool {
    match schema {
        Value::Object(object) => object.iter().all(|(key, value)| match key.as_str() {
            "$ref" => value.as_str().is_some_and(|to| to.starts_with("#/$defs/") || to.starts_with("#/definitions/")),
            "$dynamicRef" | "$recursiveRef" => false,
            _ => refers_only_to_definitions(value),
        }),
        Value::Array(items) => items.iter().all(refers_only_to_definitions),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn compile(schema: Value) -> OutputCheck {
        OutputCheck::compile(schema.as_object().unwrap()).unwrap()
    }

    fn sdk_list() -> Value {
        json!({
            "type": "object", "required": ["result"], "title": "rowsOutput",
            "properties": {"result": {"type": "array", "title": "Result", "items": {"$ref": "#/$defs/Row"}}},
            "$defs": {"Row": {"type": "object", "required": ["id"], "properties": {
                "id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}}}
        })
    }

    fn check(check: &OutputCheck, json: &str) -> Result<(), Mismatch> {
        check.check(serde_json::from_str(json).unwrap())
    }

    /// The mismatch a check of the whole tree reports.
    fn whole(schema: &Value, json: &str) -> Result<(), Mismatch> {
        let validator = jsonschema::validator_for(schema).unwrap();
        validator
            .validate(&serde_json::from_str(json).unwrap())
            .map_err(|error| Mismatch { at: error.instance_path().to_string(), message: error.to_string() })
    }

    #[test]
    fn the_official_sdks_list_schema_is_checked_an_element_at_a_time_and_reports_as_a_whole_check() {
        let schema = sdk_list();
        let checked = compile(schema.clone());
        assert_eq!(checked.lists.len(), 1);
        let documents = [
            r#"{"result": [{"id": 1, "tags": ["a"]}, {"id": 2}]}"#,
            r#"{"result": []}"#,
            r#"{"result": [{"id": 1}, {"id": "2"}]}"#,
            r#"{"result": [{"id": 1}, {"tags": [3]}]}"#,
            r#"{"result": {"id": 1}}"#,
            r#"{"other": 1}"#,
            r#"[1]"#,
            r#"{"result": [{"id": 1}], "result": [{"id": "x"}]}"#,
        ];
        for document in documents {
            assert_eq!(check(&checked, document), whole(&schema, document), "{document}");
        }
        assert!(check(&checked, documents[0]).is_ok());
        assert_eq!(check(&checked, documents[2]).unwrap_err().at, "/result/1/id");
    }

    #[test]
    fn schemas_whose_keywords_could_look_into_a_list_are_checked_whole() {
        let mut unsplit = Vec::new();
        for (path, keyword) in [
            ("", json!({"minProperties": 1})),
            ("", json!({"allOf": [{"required": ["result"]}]})),
            ("/properties/result", json!({"minItems": 1})),
            ("/properties/result", json!({"uniqueItems": true})),
            ("/properties/result/items", json!({"$anchor": "rows"})),
            ("/$defs/Row", json!({"$ref": "#/properties"})),
            ("/$defs/Row", json!({"$dynamicRef": "#/$defs/Row"})),
        ] {
            let mut schema = sdk_list();
            let at = schema.pointer_mut(path).unwrap().as_object_mut().unwrap();
            at.extend(keyword.as_object().unwrap().clone());
            unsplit.push(compile(schema).lists.len());
        }
        assert_eq!(unsplit, [0; 7]);
        let mut extended = sdk_list();
        extended["x-fastmcp-wrap-result"] = json!(true);
        assert_eq!(compile(extended).lists.len(), 1);
    }
}
