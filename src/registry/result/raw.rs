//! Structured content read as serialised JSON, never as a tree of the whole document: its top-level parts,
//! equality and a hash as serde_json's `Value` would have them, and its canonical (compact) form.
//!
//! A `Value` costs ~72 bytes a value and ~104 an object entry (with `preserve_order`): the tree of an 8 MB
//! list of 110,000 small rows took ~85 MB. Each function here reads the text once per level it looks at.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Number, Value};

/// From this many entries on, an object's keys are found through a map (below, by a linear search).
const INDEXED_KEYS: usize = 16;

/// An object's entries as serde_json's map holds them: a repeated key keeps its first place and its last
/// value.
struct Entries<'de, V> {
    entries: Vec<(Cow<'de, str>, V)>,
    index: HashMap<Cow<'de, str>, usize>,
    repeated: bool,
}

impl<'de, V> Entries<'de, V> {
    fn new() -> Self {
        Entries { entries: Vec::new(), index: HashMap::new(), repeated: false }
    }

    fn insert(&mut self, key: Cow<'de, str>, value: V) {
        let at = if self.entries.len() < INDEXED_KEYS {
            self.entries.iter().position(|(other, _)| *other == key)
        } else {
            if self.index.is_empty() {
                self.index = self.entries.iter().enumerate().map(|(at, (key, _))| (key.clone(), at)).collect();
            }
            match self.index.entry(key.clone()) {
                Entry::Occupied(at) => Some(*at.get()),
                Entry::Vacant(vacant) => {
                    vacant.insert(self.entries.len());
                    None
                }
            }
        };
        match at {
            Some(at) => {
                self.entries[at].1 = value;
                self.repeated = true;
            }
            None => self.entries.push((key, value)),
        }
    }
}

/// An object key, borrowed from the text unless it has escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A JSON text's string, borrowed unless it has escapes; `None` if the text is another kind of value.
pub fn string(raw: &RawValue) -> Option<Cow<'_, str>> {
    if !raw.get().starts_with('"') {
        return None;
    }
    serde_json::from_str::<Key>(raw.get()).ok().map(|Key(string)| string)
}

/// The entries of an object (see [`Entries`]), `None` if `raw` is no object.
pub fn entries(raw: &RawValue) -> Option<Vec<(Cow<'_, str>, &RawValue)>> {
    struct EntriesVisitor;
    impl<'de> Visitor<'de> for EntriesVisitor {
        type Value = Vec<(Cow<'de, str>, &'de RawValue)>;
        fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
            formatter.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut entries = Entries::new();
            while let Some((Key(key), value)) = map.next_entry::<Key, &RawValue>()? {
                entries.insert(key, value);
            }
            Ok(entries.entries)
        }
    }
    if !raw.get().starts_with('{') {
        return None;
    }
    let mut deserializer = serde_json::Deserializer::from_str(raw.get());
    deserializer.deserialize_map(EntriesVisitor).ok()
}

/// The elements of an array, `None` if `raw` is no array.
pub fn elements(raw: &RawValue) -> Option<Vec<&RawValue>> {
    if !raw.get().starts_with('[') {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// Whether two JSON texts hold equal values, as serde_json's `Value`s compare (an object's entries in any
/// order, numbers of different kinds unequal). Only scalars are read into values.
pub fn equal(a: &RawValue, b: &RawValue) -> bool {
    let (x, y) = (a.get().as_bytes()[0], b.get().as_bytes()[0]);
    match (x, y) {
        (b'{', b'{') => {
            let (Some(a), Some(b)) = (entries(a), entries(b)) else { return false };
            if a.len() != b.len() {
                return false;
            }
            let b: HashMap<&str, &RawValue> = b.iter().map(|(key, value)| (key.as_ref(), *value)).collect();
            a.iter().all(|(key, value)| b.get(key.as_ref()).is_some_and(|other| equal(value, other)))
        }
        (b'[', b'[') => {
            let (Some(a), Some(b)) = (elements(a), elements(b)) else { return false };
            a.len() == b.len() && a.iter().zip(&b).all(|(a, b)| equal(a, b))
        }
        (b'{' | b'[', _) | (_, b'{' | b'[') => false,
        _ => matches!(
            (serde_json::from_str::<Value>(a.get()), serde_json::from_str::<Value>(b.get())),
            (Ok(a), Ok(b)) if a == b
        ),
    }
}

/// A hash of the value of a JSON text: texts of [`equal`] values hash alike. Keyed by `state`, unknown to a
/// downstream, so that it cannot make values collide.
pub fn hash(state: &RandomState, json: &str) -> serde_json::Result<u64> {
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let hash = Hashing(state).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(hash)
}

#[derive(Clone, Copy)]
struct Hashing<'s>(&'s RandomState);

impl Hashing<'_> {
    fn of(self, value: impl Hash) -> u64 {
        self.0.hash_one(value)
    }

    fn number(self, number: &Number) -> u64 {
        match (number.as_u64(), number.as_i64()) {
            (Some(u), _) => self.of((2u8, u)),
            (None, Some(i)) => self.of((3u8, i)),
            (None, None) => self.of((4u8, number.as_f64().map(f64::to_bits))),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Hashing<'_> {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<u64, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Hashing<'_> {
    type Value = u64;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<u64, E> {
        Ok(self.of(0u8))
    }

    fn visit_bool<E>(self, value: bool) -> Result<u64, E> {
        Ok(self.of((1u8, value)))
    }

    fn visit_u64<E>(self, value: u64) -> Result<u64, E> {
        Ok(self.number(&value.into()))
    }

    fn visit_i64<E>(self, value: i64) -> Result<u64, E> {
        Ok(self.number(&value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<u64, E> {
        // As a tree holds it: a number that is not finite is null.
        Ok(Number::from_f64(value).map_or_else(|| self.of(0u8), |number| self.number(&number)))
    }

    fn visit_str<E>(self, value: &str) -> Result<u64, E> {
        Ok(self.of((5u8, value)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let mut hasher = self.0.build_hasher();
        let mut len = 0usize;
        while let Some(item) = seq.next_element_seed(self)? {
            item.hash(&mut hasher);
            len += 1;
        }
        (6u8, len).hash(&mut hasher);
        Ok(hasher.finish())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut entries = Entries::new();
        while let Some(Key(key)) = map.next_key()? {
            let value = map.next_value_seed(self)?;
            entries.insert(key, value);
        }
        // Each entry hashed on its own and the hashes added: the order of the entries does not count.
        let sum = entries.entries.iter().map(|(key, value)| self.of((key, value))).fold(0u64, u64::wrapping_add);
        Ok(self.of((7u8, entries.entries.len(), sum)))
    }
}

/// The value of a JSON text in the form `serde_json::to_string` gives its tree: compact, numbers and
/// strings written as serde_json writes them, an object's repeated key written once (first place, last
/// value). Reading it also checks the whole text as a tree would (every string's escapes).
pub fn canonical(json: &str) -> serde_json::Result<Box<RawValue>> {
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let mut out = Vec::with_capacity(json.len());
    let repeated = Cell::new(false);
    let written = Canonical { out: &mut out, repeated: &repeated }.deserialize(&mut deserializer);
    match written.and_then(|()| deserializer.end()) {
        Ok(()) => out.shrink_to_fit(),
        // Rare: written again from a tree, which keeps one entry per key.
        Err(_) if repeated.get() => out = serde_json::to_vec(&serde_json::from_str::<Value>(json)?)?,
        Err(error) => return Err(error),
    }
    let text = String::from_utf8(out).map_err(|_| serde_json::Error::custom("not UTF-8"))?;
    RawValue::from_string(text)
}

/// Writes what it reads in canonical form; stops at an object's repeated key, which it notes.
struct Canonical<'o> {
    out: &'o mut Vec<u8>,
    repeated: &'o Cell<bool>,
}

impl Canonical<'_> {
    fn write<E: serde::de::Error>(self, value: impl Serialize) -> Result<(), E> {
        serde_json::to_writer(&mut *self.out, &value).map_err(E::custom)
    }

    fn inner(&mut self) -> Canonical<'_> {
        Canonical { out: self.out, repeated: self.repeated }
    }
}

impl<'de> DeserializeSeed<'de> for Canonical<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Canonical<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.write(())
    }

    fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<(), E> {
        self.write(value)
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<(), E> {
        self.write(value)
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<(), E> {
        self.write(value)
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<(), E> {
        // As a tree holds it: a number that is not finite is null.
        self.write(Number::from_f64(value))
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<(), E> {
        self.write(value)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.out.push(b'[');
        let empty = self.out.len();
        loop {
            if self.out.len() > empty {
                self.out.push(b',');
            }
            if seq.next_element_seed(self.inner())?.is_none() {
                break;
            }
        }
        // A comma after the last element: the loop's last turn wrote it.
        if self.out.len() > empty {
            self.out.pop();
        }
        self.out.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut keys = Entries::new();
        self.out.push(b'{');
        let empty = self.out.len();
        while let Some(Key(key)) = map.next_key()? {
            if self.out.len() > empty {
                self.out.push(b',');
            }
            serde_json::to_writer(&mut *self.out, key.as_ref()).map_err(A::Error::custom)?;
            self.out.push(b':');
            keys.insert(key, ());
            if keys.repeated {
                self.repeated.set(true);
                return Err(A::Error::custom("a repeated key"));
            }
            map.next_value_seed(self.inner())?;
        }
        self.out.push(b'}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCUMENTS: [&str; 9] = [
        r#"{"b": 1, "a": [1, -2, 3.5, 1e300, "x\"y\u00e9\ud83d\ude00", null, true, {}], "c": {"d": [], "e": {"f": 18446744073709551615}}}"#,
        r#"{"k": 1, "other": [2, {"k": 5, "k": 6}], "k": 3}"#,
        r#"[[], [[]], {"": ""}, [1,2 , 3]]"#,
        "-0.0",
        "1E2",
        "-12",
        r#""plain""#,
        "18446744073709551616",
        "\t[ true ,false ]\n",
    ];

    fn raw(json: &str) -> &RawValue {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn canonical_forms_are_what_serde_json_writes_of_its_tree() {
        for document in DOCUMENTS {
            let tree: Value = serde_json::from_str(document).unwrap();
            assert_eq!(canonical(document).unwrap().get(), tree.to_string(), "{document}");
        }
        for invalid in [r#""\ud800""#, "[1,", "{} {}", r#"{"a" 1}"#] {
            assert!(canonical(invalid).is_err(), "{invalid}");
        }
    }

    #[test]
    fn equal_values_are_equal_and_hash_alike_whatever_their_text() {
        let state = RandomState::new();
        let pairs = [
            (
                r#"{"x": [1, -2, 2.5, null, true], "y": {"p": "q", "r": {}}}"#,
                r#"{"y":{"r":{},"p":"q"},"x":[1,-2,2.5,null,true]}"#,
            ),
            (r#"{"a": 1, "a": 2}"#, r#"{"a": 2}"#),
            (r#""\u0041""#, r#""A""#),
            ("1E2", "100.0"),
        ];
        for (a, b) in pairs {
            assert_eq!(serde_json::from_str::<Value>(a).unwrap(), serde_json::from_str::<Value>(b).unwrap());
            assert!(equal(raw(a), raw(b)), "{a} {b}");
            assert_eq!(hash(&state, a).unwrap(), hash(&state, b).unwrap(), "{a} {b}");
        }
        for (a, b) in [("[1, 2]", "[2, 1]"), ("1", "1.0"), (r#"{"a": 1}"#, r#"{"a": 1, "b": 1}"#), ("[[]]", "[{}]")] {
            assert!(!equal(raw(a), raw(b)), "{a} {b}");
            assert_ne!(hash(&state, a).unwrap(), hash(&state, b).unwrap(), "{a} {b}");
        }
    }

    #[test]
    fn parts_are_an_objects_entries_or_an_arrays_elements() {
        let object = raw(r#"{"k": 1, "other": [2], "k": "3"}"#);
        let read: Vec<(String, &str)> =
            entries(object).unwrap().into_iter().map(|(key, value)| (key.into_owned(), value.get())).collect();
        assert_eq!(read, [("k".to_string(), r#""3""#), ("other".to_string(), "[2]")]);
        assert_eq!(
            elements(raw("[1, {\"a\": 2}]")).unwrap().iter().map(|e| e.get()).collect::<Vec<_>>(),
            ["1", "{\"a\": 2}"]
        );
        assert!(entries(raw("[1]")).is_none() && elements(raw("{}")).is_none());
        assert_eq!(string(raw(r#""a\nb""#)).as_deref(), Some("a\nb"));
        assert_eq!(string(raw("1")), None);
    }
}
