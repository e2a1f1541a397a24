//! Whether the text blocks of a result only restate its structured content, so that they are no notes.
//!
//! Every text may restate any part of the content. The official SDK sends a list with one text per element,
//! in order: each text is first compared with the element after the one the last text restated, and only
//! a text that is not that element is looked up among all parts, which are then indexed by a hash of their
//! value (comparing each text with each element kept the server busy for minutes on a list of 100,000
//! rows; hashing every row took a quarter of the time of reading such a list).

use std::cell::{Cell, OnceCell};
use std::collections::HashSet;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};

use serde_json::Value;

/// What a text may restate: the whole structured content, the unwrapped value, one element of either (as
/// the official SDK sends lists) or one field of either (as server-filesystem and server-memory do).
pub struct Restated<'a> {
    parts: Vec<&'a Value>,
    /// The elements of the unwrapped value, in order, and the one the next text most likely restates.
    in_order: &'a [Value],
    next: Cell<usize>,
    /// The parts that are strings; built for the first text that is not the next element verbatim.
    strings: OnceCell<HashSet<&'a str>>,
    /// Every part by its value; built for the first text that is not the next element.
    values: OnceCell<Values<'a>>,
}

/// Parts found by a hash of their value.
struct Values<'a> {
    /// Each part with the hash of its value, sorted by hash.
    hashed: Vec<(u64, &'a Value)>,
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
        let in_order = value.as_array().map_or(&[][..], Vec::as_slice);
        Restated { parts, in_order, next: Cell::new(0), strings: OnceCell::new(), values: OnceCell::new() }
    }

    /// Whether `text` renders one of the parts: a string verbatim, or any value as JSON (compact or
    /// pretty-printed: compared parsed).
    pub fn by(&self, text: &str) -> bool {
        let next = self.in_order.get(self.next.get());
        let is_next = |restated: bool| {
            if restated {
                self.next.set(self.next.get() + 1);
            }
            restated
        };
        if is_next(next.is_some_and(|next| next.as_str() == Some(text))) {
            return true;
        }
        let strings = self.strings.get_or_init(|| self.parts.iter().filter_map(|part| part.as_str()).collect());
        if strings.contains(text) {
            return true;
        }
        let Ok(parsed) = serde_json::from_str::<Value>(text) else {
            return false;
        };
        is_next(next == Some(&parsed)) || self.values.get_or_init(|| Values::new(&self.parts)).hold(&parsed)
    }
}

impl<'a> Values<'a> {
    fn new(parts: &[&'a Value]) -> Self {
        let state = RandomState::new();
        let mut hashed: Vec<(u64, &Value)> = parts.iter().map(|part| (hash(&state, part), *part)).collect();
        hashed.sort_unstable_by_key(|(hash, _)| *hash);
        Values { hashed, state }
    }

    fn hold(&self, parsed: &Value) -> bool {
        let hash = hash(&self.state, parsed);
        let first = self.hashed.partition_point(|(other, _)| *other < hash);
        self.hashed[first..].iter().take_while(|(other, _)| *other == hash).any(|(_, part)| *part == parsed)
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
    fn texts_in_the_order_of_the_elements_are_found_without_hashing_any() {
        let structured = json!({"result": [{"id": 1}, "two", {"id": 3}, [4]]});
        let value = &structured["result"];
        let restated = Restated::new(&structured, value);
        for text in [r#"{"id": 1}"#, "two", "{\n  \"id\": 3\n}", "[4]"] {
            assert!(restated.by(text), "{text}");
        }
        assert!(restated.values.get().is_none(), "no index was built");
        assert!(!restated.by(r#"{"id": 2}"#));
        assert!(restated.by(r#"{"id": 1}"#), "out of order, found by its hash");
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
