//! Whether the text blocks of a result only restate its structured content, so that they are no notes.
//!
//! Every text may restate any part of the content. The official SDK sends a list with one text per element,
//! in order: each text is first compared with the element after the one the last text restated, and only
//! a text that is not that element is looked up among all parts, which are then indexed by a hash of their
//! value (comparing each text with each element kept the server busy for minutes on a list of 100,000
//! rows; hashing every row took a quarter of the time of reading such a list).

use std::borrow::Cow;
use std::cell::{Cell, OnceCell};
use std::collections::HashSet;
use std::hash::RandomState;
use std::ops::Range;

use serde_json::value::RawValue;

use super::raw;

/// What a text may restate: the whole structured content, the unwrapped value, one element of either (as
/// the official SDK sends lists) or one field of either (as server-filesystem and server-memory do). Each
/// part is read where it lies in the structured content's JSON text.
pub struct Restated<'a> {
    parts: Vec<&'a RawValue>,
    /// Where in `parts` the elements of the unwrapped value lie, in order, and the one the next text most
    /// likely restates.
    in_order: Range<usize>,
    next: Cell<usize>,
    /// The parts that are strings; built for the first text that is not the next element verbatim.
    strings: OnceCell<HashSet<Cow<'a, str>>>,
    /// Every part by its value; built for the first text that is not the next element.
    values: OnceCell<Values<'a>>,
}

/// Parts found by a hash of their value.
struct Values<'a> {
    /// Each part with the hash of its value, sorted by hash.
    hashed: Vec<(u64, &'a RawValue)>,
    /// Keys unknown to a downstream, so that it cannot make its parts collide.
    state: RandomState,
}

impl<'a> Restated<'a> {
    pub fn new(structured: &'a RawValue, value: &'a RawValue) -> Self {
        let mut parts = vec![structured, value];
        let mut in_order = 0..0;
        // The value is the structured content itself unless it was unwrapped: its parts are the same then.
        let wholes = if std::ptr::eq(structured, value) { &[value][..] } else { &[structured, value] };
        for whole in wholes {
            let start = parts.len();
            match raw::entries(whole) {
                Some(entries) => parts.extend(entries.into_iter().map(|(_, part)| part)),
                None => parts.extend(raw::elements(whole).unwrap_or_default()),
            }
            if std::ptr::eq(*whole, value) && value.get().starts_with('[') {
                in_order = start..parts.len();
            }
        }
        Restated { parts, in_order, next: Cell::new(0), strings: OnceCell::new(), values: OnceCell::new() }
    }

    /// Whether `text` renders one of the parts: a string verbatim, or any value as JSON (compact or
    /// pretty-printed: compared as values).
    pub fn by(&self, text: &str) -> bool {
        let next = self.in_order.clone().nth(self.next.get()).map(|at| self.parts[at]);
        let is_next = |restated: bool| {
            if restated {
                self.next.set(self.next.get() + 1);
            }
            restated
        };
        if is_next(next.is_some_and(|next| raw::string(next).as_deref() == Some(text))) {
            return true;
        }
        let strings = self.strings.get_or_init(|| self.parts.iter().filter_map(|part| raw::string(part)).collect());
        if strings.contains(text) {
            return true;
        }
        let Ok(parsed) = serde_json::from_str::<&RawValue>(text) else {
            return false;
        };
        is_next(next.is_some_and(|next| raw::equal(next, parsed)))
            || self.values.get_or_init(|| Values::new(&self.parts)).hold(parsed)
    }
}

impl<'a> Values<'a> {
    fn new(parts: &[&'a RawValue]) -> Self {
        let state = RandomState::new();
        let mut hashed: Vec<(u64, &RawValue)> =
            parts.iter().filter_map(|part| Some((raw::hash(&state, part.get()).ok()?, *part))).collect();
        hashed.sort_unstable_by_key(|(hash, _)| *hash);
        Values { hashed, state }
    }

    fn hold(&self, parsed: &RawValue) -> bool {
        // A text that is no value a tree could hold (a lone surrogate, say) restates nothing.
        let Ok(hash) = raw::hash(&self.state, parsed.get()) else { return false };
        let first = self.hashed.partition_point(|(other, _)| *other < hash);
        self.hashed[first..].iter().take_while(|(other, _)| *other == hash).any(|(_, part)| raw::equal(part, parsed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The structured content and its `result`, as JSON texts.
    fn wrapped(json: &str) -> (&RawValue, &RawValue) {
        let structured: &RawValue = serde_json::from_str(json).unwrap();
        let entries = raw::entries(structured).unwrap();
        let [(_, value)] = entries.as_slice() else { panic!("one entry") };
        (structured, value)
    }

    #[test]
    fn texts_in_the_order_of_the_elements_are_found_without_hashing_any() {
        let (structured, value) = wrapped(r#"{"result": [{"id": 1}, "two", {"id": 3}, [4]]}"#);
        let restated = Restated::new(structured, value);
        for text in [r#"{"id": 1}"#, "two", "{\n  \"id\": 3\n}", "[4]"] {
            assert!(restated.by(text), "{text}");
        }
        assert!(restated.values.get().is_none(), "no index was built");
        assert!(!restated.by(r#"{"id": 2}"#));
        assert!(restated.by(r#"{"id": 1}"#), "out of order, found by its hash");
    }

    #[test]
    fn texts_that_render_a_part_are_found_and_others_are_not() {
        let (structured, value) = wrapped(r#"{"result": [{"id": 1, "name": "a"}, "plain", 3]}"#);
        let restated = Restated::new(structured, value);
        let whole = r#"{"result": [{"id": 1, "name": "a"}, "plain", 3]}"#;
        for text in [r#"{"name": "a", "id": 1}"#, "plain", "3", "[{\"id\":1,\"name\":\"a\"},\"plain\",3]", whole] {
            assert!(restated.by(text), "{text}");
        }
        for text in
            [r#"{"id": 1}"#, "3.0", "\"plain\" and more", "[3, \"plain\", {\"id\": 1, \"name\": \"a\"}]", r#""\ud800""#]
        {
            assert!(!restated.by(text), "{text}");
        }
    }

    #[test]
    fn the_fields_of_structured_content_that_is_not_unwrapped_are_parts() {
        let structured: &RawValue = serde_json::from_str(r#"{"path": "/a", "size": 3, "size": 4}"#).unwrap();
        let restated = Restated::new(structured, structured);
        for text in ["/a", "4", r#"{"size": 4, "path": "/a"}"#] {
            assert!(restated.by(text), "{text}");
        }
        assert!(!restated.by("3"), "a repeated key's last value counts");
    }
}
