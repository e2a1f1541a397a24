//! Whether the text blocks of a result only restate its structured content, so that they are no notes.
//!
//! Every text is compared with every part of the content, so the parts are indexed by a hash of their
//! value: the official SDK sends a list with one text per element, and comparing each text with each element
//! kept the server busy for minutes on a list of 100,000 rows.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};

use serde_json::Value;

/// What a text may restate: the whole structured content, the unwrapped value, one element of either (as
/// the official SDK sends lists) or one field of either (as server-filesystem and server-memory do).
pub struct Restated<'a> {
    strings: HashSet<&'a str>,
    /// Each part with the hash of its value, sorted by hash.
    values: Vec<(u64, &'a Value)>,
    /// Keys unknown to a downstream, so that it cannot make its parts collide.
    state: RandomState,
}

impl<'a> Restated<'a> {
    pub fn new(structured: &'a Value, value: &'a Value) -> Self {
        let mut parts = vec![structured, value];
        for whole in [structured, value] {
            match whole {
                Value::Object(object) => parts.extend(object.values()),
                Value::Array(items) => parts.extend(items),
                _ => {}
            }
        }
        let state = RandomState::new();
        let strings = parts.iter().filter_map(|part| part.as_str()).collect();
        let mut values: Vec<(u64, &Value)> = parts.into_iter().map(|part| (hash(&state, part), part)).collect();
        values.sort_unstable_by_key(|(hash, _)| *hash);
        Restated { strings, values, state }
    }

    /// Whether `text` renders one of the parts: a string verbatim, or any value as JSON (compact or
    /// pretty-printed: compared parsed).
    pub fn by(&self, text: &str) -> bool {
        if self.strings.contains(text) {
            return true;
        }
        let Ok(parsed) = serde_json::from_str::<Value>(text) else {
            return false;
        };
        let hash = hash(&self.state, &parsed);
        let first = self.values.partition_point(|(other, _)| *other < hash);
        self.values[first..].iter().take_while(|(other, _)| *other == hash).any(|(_, part)| **part == parsed)
    }
}

fn hash(state: &RandomState, value: &Value) -> u64 {
    let mut hasher = state.build_hasher();
    feed(state, value, &mut hasher);
    hasher.finish()
}

/// Feeds `value` to `hasher` so that values equal as serde_json compares them hash alike (an object's
/// entries in any order).
fn feed(state: &RandomState, value: &Value, hasher: &mut impl Hasher) {
    match value {
        Value::Null => hasher.write_u8(0),
        Value::Bool(b) => (1u8, b).hash(hasher),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => (2u8, u).hash(hasher),
            (None, Some(i)) => (3u8, i).hash(hasher),
            (None, None) => (4u8, n.as_f64().map(f64::to_bits)).hash(hasher),
        },
        Value::String(s) => (5u8, s).hash(hasher),
        Value::Array(items) => {
            (6u8, items.len()).hash(hasher);
            for item in items {
                feed(state, item, hasher);
            }
        }
        Value::Object(object) => {
            // Each entry hashed on its own and the hashes added: the order of the entries does not count.
            let entries = object.iter().map(|(key, value)| {
                let mut entry = state.build_hasher();
                key.hash(&mut entry);
                feed(state, value, &mut entry);
                entry.finish()
            });
            (7u8, object.len(), entries.fold(0u64, u64::wrapping_add)).hash(hasher);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn equal_values_hash_alike_whatever_the_order_of_their_keys() {
        let state = RandomState::new();
        let a = json!({"x": [1, -2, 2.5, null, true], "y": {"p": "q", "r": {}}});
        let b: Value = serde_json::from_str(r#"{"y": {"r": {}, "p": "q"}, "x": [1, -2, 2.5, null, true]}"#).unwrap();
        assert_eq!(a, b);
        assert_eq!(hash(&state, &a), hash(&state, &b));
        assert_ne!(hash(&state, &json!([1, 2])), hash(&state, &json!([2, 1])));
    }

    #[test]
    fn texts_that_render_a_part_are_found_and_others_are_not() {
        let structured = json!({"result": [{"id": 1, "name": "a"}, "plain", 3]});
        let value = &structured["result"];
        let restated = Restated::new(&structured, value);
        for text in [r#"{"name": "a", "id": 1}"#, "plain", "3", "[{\"id\":1,\"name\":\"a\"},\"plain\",3]"] {
            assert!(restated.by(text), "{text}");
        }
        for text in [r#"{"id": 1}"#, "3.0", "\"plain\" and more", "[3, \"plain\", {\"id\": 1, \"name\": \"a\"}]"] {
            assert!(!restated.by(text), "{text}");
        }
    }
}
