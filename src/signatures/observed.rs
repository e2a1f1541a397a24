//! The shape of the results a tool without an output schema has returned: JSON types and key names, never a
//! value, merged over calls (a key some results lack is optional, differing types are a union) and shown as
//! the signature's return type, e.g. `-> list[dict]:  # observed: [{'path': str, 'tags'?: list[str]}]`.
//!
//! Everything is bounded: how deep a shape goes, how many keys a dict and a whole shape keep, how many list
//! elements are read, and the rendered text. A dict with more keys, or with a key too long to be a name, is
//! taken for a mapping (`dict[str, int]`): its keys are data.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::python::comment_text;

/// How many levels of lists and dicts a shape describes; below that only `list` or `dict`.
const MAX_DEPTH: usize = 4;
/// How many keys one dict keeps before it is taken for a mapping.
const MAX_KEYS: usize = 12;
/// How many keys a whole shape keeps: beyond it the deepest levels are forgotten.
const MAX_TOTAL_KEYS: usize = 40;
/// A key longer than this is data, not a name.
const MAX_KEY_CHARS: usize = 40;
/// How many elements of one list are read (the rest are skipped unread).
const MAX_ITEMS: usize = 100;
/// The longest text shown after `# observed: `; a longer one shows fewer levels or keys.
const MAX_TEXT_BYTES: usize = 300;

/// The JSON types seen at one place in results, each at most once (a union).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shape {
    dict: Option<Keys>,
    /// The shape of the elements (empty when only empty lists were seen, or below the depth limit).
    list: Option<Box<Shape>>,
    string: bool,
    int: bool,
    float: bool,
    boolean: bool,
    null: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Keys {
    /// Keys by name, in the order first seen.
    Named(Vec<Key>),
    /// A dict whose keys are data: the shape of its values (empty below the depth limit).
    Mapping(Box<Shape>),
}

#[derive(Debug, Clone, PartialEq)]
struct Key {
    name: String,
    shape: Shape,
    /// Missing from some of the results.
    optional: bool,
}

/// What a signature shows for a tool's observed results.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedReturn {
    /// The return annotation, e.g. `list[dict]`.
    pub annotation: String,
    /// The shape in full, e.g. `[{'path': str, 'size'?: int}]` (at most [`MAX_TEXT_BYTES`]).
    pub detail: String,
}

impl Shape {
    /// The shape of the JSON text `json` (a program's value, as the runner gets it), read without keeping
    /// any value.
    pub fn of_json(json: &str) -> Result<Shape, serde_json::Error> {
        let mut deserializer = serde_json::Deserializer::from_str(json);
        let mut shape = Reader { depth: 0 }.deserialize(&mut deserializer)?;
        deserializer.end()?;
        shape.bound();
        Ok(shape)
    }

    /// Adds what `other` saw, within the bounds.
    pub fn merge(&mut self, other: Shape) {
        self.merge_unbounded(other);
        self.bound();
    }

    /// The return annotation and full text for a signature.
    pub fn observed_return(&self) -> ObservedReturn {
        let annotation = self.annotation();
        // Fewer levels first, then fewer keys; one level (the types of a list's elements only) last.
        let keys = [MAX_KEYS, MAX_KEYS / 2, MAX_KEYS / 4, 1];
        let limits = keys
            .into_iter()
            .flat_map(|keys| (2..=MAX_DEPTH).rev().map(move |depth| Limits { depth, keys }))
            .chain([Limits { depth: 1, keys: 1 }]);
        let detail = limits
            .map(|limits| self.render(limits, 0))
            .find(|text| text.len() <= MAX_TEXT_BYTES)
            .unwrap_or_else(|| annotation.clone());
        ObservedReturn { annotation, detail }
    }

    fn merge_unbounded(&mut self, other: Shape) {
        self.string |= other.string;
        self.int |= other.int;
        self.float |= other.float;
        self.boolean |= other.boolean;
        self.null |= other.null;
        match (&mut self.list, other.list) {
            (Some(items), Some(more)) => items.merge_unbounded(*more),
            (mine, theirs) => *mine = mine.take().or(theirs),
        }
        match (&mut self.dict, other.dict) {
            (Some(keys), Some(more)) => keys.merge(more),
            (mine, theirs) => *mine = mine.take().or(theirs),
        }
    }

    /// Forgets the deepest levels until at most [`MAX_TOTAL_KEYS`] keys are left.
    fn bound(&mut self) {
        let mut depth = MAX_DEPTH;
        while self.key_count() > MAX_TOTAL_KEYS {
            depth -= 1;
            self.forget_below(depth);
        }
    }

    fn key_count(&self) -> usize {
        let inner = self.list.as_ref().map_or(0, |items| items.key_count());
        inner
            + match &self.dict {
                Some(Keys::Named(keys)) => keys.len() + keys.iter().map(|key| key.shape.key_count()).sum::<usize>(),
                Some(Keys::Mapping(values)) => values.key_count(),
                None => 0,
            }
    }

    /// Keeps only the types of lists and dicts `depth` levels down.
    fn forget_below(&mut self, depth: usize) {
        if let Some(items) = &mut self.list {
            if depth == 0 { **items = Shape::default() } else { items.forget_below(depth - 1) }
        }
        match &mut self.dict {
            Some(keys) if depth == 0 => *keys = Keys::Mapping(Box::default()),
            Some(Keys::Named(keys)) => keys.iter_mut().for_each(|key| key.shape.forget_below(depth - 1)),
            Some(Keys::Mapping(values)) => values.forget_below(depth - 1),
            None => {}
        }
    }

    fn is_empty(&self) -> bool {
        *self == Shape::default()
    }

    /// The return annotation: the types, a list's with its elements' types (`list[dict]`, `int | None`).
    fn annotation(&self) -> String {
        let list = self
            .list
            .as_ref()
            .map(|items| if items.is_empty() { "list".to_string() } else { format!("list[{}]", items.types()) });
        self.union(self.dict.as_ref().map(|_| "dict".to_string()), list)
    }

    /// The bare types: `dict | str`.
    fn types(&self) -> String {
        self.union(self.dict.as_ref().map(|_| "dict".to_string()), self.list.as_ref().map(|_| "list".to_string()))
    }

    /// The shape as text, lists and dicts described down to `limits.depth` levels (this one is `depth`).
    fn render(&self, limits: Limits, depth: usize) -> String {
        let shown = depth < limits.depth;
        let dict = self.dict.as_ref().map(|keys| match keys {
            Keys::Named(keys) if shown => render_keys(keys, limits, depth),
            Keys::Mapping(values) if shown && !values.is_empty() => {
                format!("dict[str, {}]", values.render(limits, depth + 1))
            }
            _ => "dict".to_string(),
        });
        let list = self.list.as_ref().map(|items| {
            if !shown || items.is_empty() {
                return "list".to_string();
            }
            let text = items.render(limits, depth + 1);
            if items.types() == "dict" && text.starts_with('{') { format!("[{text}]") } else { format!("list[{text}]") }
        });
        self.union(dict, list)
    }

    /// The types joined with ` | `, dict and list as given.
    fn union(&self, dict: Option<String>, list: Option<String>) -> String {
        let scalars = [(self.string, "str"), (self.int, "int"), (self.float, "float"), (self.boolean, "bool")];
        let scalars = scalars.into_iter().filter(|(seen, _)| *seen).map(|(_, name)| name.to_string());
        let null = self.null.then(|| "None".to_string());
        let parts: Vec<String> = dict.into_iter().chain(list).chain(scalars).chain(null).collect();
        if parts.is_empty() { "Any".to_string() } else { parts.join(" | ") }
    }

    fn only(set: impl FnOnce(&mut Shape)) -> Shape {
        let mut shape = Shape::default();
        set(&mut shape);
        shape
    }
}

impl Keys {
    fn merge(&mut self, other: Keys) {
        match (&mut *self, other) {
            (Keys::Named(keys), Keys::Named(more)) => {
                for key in keys.iter_mut() {
                    key.optional |= !more.iter().any(|other| other.name == key.name);
                }
                for other in more {
                    match keys.iter_mut().find(|key| key.name == other.name) {
                        Some(key) => {
                            key.optional |= other.optional;
                            key.shape.merge_unbounded(other.shape);
                        }
                        None => keys.push(Key { optional: true, ..other }),
                    }
                }
                if keys.len() > MAX_KEYS {
                    self.become_mapping();
                }
            }
            (Keys::Mapping(values), other) => values.merge_unbounded(other.values()),
            (Keys::Named(_), other @ Keys::Mapping(_)) => {
                self.become_mapping();
                self.merge(other);
            }
        }
    }

    fn become_mapping(&mut self) {
        let values = std::mem::replace(self, Keys::Mapping(Box::default())).values();
        *self = Keys::Mapping(Box::new(values));
    }

    /// The shape of all values.
    fn values(self) -> Shape {
        match self {
            Keys::Mapping(values) => *values,
            Keys::Named(keys) => keys.into_iter().fold(Shape::default(), |mut all, key| {
                all.merge_unbounded(key.shape);
                all
            }),
        }
    }
}

/// How much of a shape a text shows.
#[derive(Clone, Copy)]
struct Limits {
    depth: usize,
    keys: usize,
}

fn render_keys(keys: &[Key], limits: Limits, depth: usize) -> String {
    let mut parts: Vec<String> = keys
        .iter()
        .take(limits.keys)
        .map(|key| {
            let name = comment_text(&key.name).replace('\\', "\\\\").replace('\'', "\\'");
            let optional = if key.optional { "?" } else { "" };
            format!("'{name}'{optional}: {}", key.shape.render(limits, depth + 1))
        })
        .collect();
    if keys.len() > limits.keys {
        parts.push("...".to_string());
    }
    format!("{{{}}}", parts.join(", "))
}

/// Reads a JSON value as its shape, `depth` levels down.
struct Reader {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Reader {
    type Value = Shape;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Shape, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Reader {
    type Value = Shape;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Shape, E> {
        Ok(Shape::only(|s| s.null = true))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
        Ok(Shape::only(|s| s.boolean = true))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
        Ok(Shape::only(|s| s.int = true))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Shape, E> {
        Ok(Shape::only(|s| s.int = true))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::only(|s| s.float = true))
    }

    fn visit_str<E>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::only(|s| s.string = true))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        let mut items = Shape::default();
        if self.depth < MAX_DEPTH {
            for _ in 0..MAX_ITEMS {
                match seq.next_element_seed(Reader { depth: self.depth + 1 })? {
                    Some(item) => items.merge_unbounded(item),
                    None => return Ok(Shape::only(|s| s.list = Some(Box::new(items)))),
                }
            }
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Shape::only(|s| s.list = Some(Box::new(items))))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
        if self.depth >= MAX_DEPTH {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(Shape::only(|s| s.dict = Some(Keys::Mapping(Box::default()))));
        }
        let mut keys = Keys::Named(Vec::new());
        while let Some(name) = map.next_key_seed(KeyName)? {
            let shape = map.next_value_seed(Reader { depth: self.depth + 1 })?;
            match (&mut keys, name) {
                (Keys::Named(named), Some(name)) if named.len() < MAX_KEYS || named.iter().any(|k| k.name == name) => {
                    match named.iter_mut().find(|key| key.name == name) {
                        Some(key) => key.shape.merge_unbounded(shape),
                        None => named.push(Key { name, shape, optional: false }),
                    }
                }
                (Keys::Named(_), _) => {
                    keys.become_mapping();
                    keys.merge(Keys::Mapping(Box::new(shape)));
                }
                (Keys::Mapping(values), _) => values.merge_unbounded(shape),
            }
        }
        Ok(Shape::only(|s| s.dict = Some(keys)))
    }
}

/// Reads a key: `Some` its name, `None` when it is too long to be one (nothing is kept of it).
struct KeyName;

impl<'de> DeserializeSeed<'de> for KeyName {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<String>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyName {
    type Value = Option<String>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a key")
    }

    fn visit_str<E>(self, key: &str) -> Result<Option<String>, E> {
        Ok((key.chars().count() <= MAX_KEY_CHARS).then(|| key.to_string()))
    }
}

#[cfg(test)]
mod tests;
