//! JSON Schema to Python type annotations: `str`, `int`, `Literal[...]`, `list[...]`, `dict[str, ...]`,
//! unions, and `TypedDict`s for objects with properties (named after their `$defs` entry or their property,
//! defined once, recursive ones included). Anything the schema does not pin down is `Any`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::python::{comment_text, identifier, is_plain_identifier, literal, string_literal};

/// Nesting beyond this is shown as `Any` (schemas from servers are data, not trusted to be shallow).
const MAX_DEPTH: usize = 24;

/// One key of an object schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The key as the server spells it.
    pub key: String,
    pub annotation: String,
    pub required: bool,
    /// Description, bounds and formats, on one line (may be empty).
    pub comment: String,
    pub default: Option<Value>,
    /// The key's schema, `$ref` resolved.
    pub schema: Value,
}

/// A `TypedDict` the annotations refer to.
#[derive(Debug, Clone)]
pub struct TypedDictDef {
    pub name: String,
    pub fields: Vec<Field>,
    pub description: String,
}

/// Converts the schemas of one tool, collecting the `TypedDict`s they need. `$ref`s resolve against the
/// schema they were found in (`#/$defs/...`, `#/definitions/...`, or any JSON pointer into it).
pub struct Converter<'a> {
    root: &'a Value,
    /// Class names taken (the tool's own names too, so nothing shadows them).
    taken: BTreeSet<String>,
    /// `$ref` → the class defined for it; a recursive reference finds its class here.
    by_ref: BTreeMap<String, String>,
    /// `$ref`s being expanded inline (non-object targets): a cycle through them becomes `Any`.
    expanding: BTreeSet<String>,
    pub typed_dicts: Vec<TypedDictDef>,
}

impl<'a> Converter<'a> {
    pub fn new(root: &'a Value) -> Self {
        let taken = ["Any", "Literal", "TypedDict", "NotRequired", "None"].map(String::from).into();
        Converter { root, taken, by_ref: BTreeMap::new(), expanding: BTreeSet::new(), typed_dicts: Vec::new() }
    }

    /// Uses another root for `$ref`s (the output schema after the input schema), keeping the classes.
    pub fn with_root(self, root: &'a Value) -> Converter<'a> {
        Converter { root, by_ref: BTreeMap::new(), expanding: BTreeSet::new(), ..self }
    }

    /// The annotation for `schema`; `hint` names a `TypedDict` made for it (e.g. the property's name).
    pub fn annotation(&mut self, schema: &Value, hint: &str) -> String {
        self.convert(schema, hint, 0)
    }

    /// The fields of an object schema (`properties` and `required`), `$ref` and `allOf` resolved.
    pub fn fields(&mut self, schema: &Value, hint: &str) -> Vec<Field> {
        self.fields_at(schema, hint, 0)
    }

    /// Resolves `schema` if it is a `$ref` (following chains, at most a few steps).
    pub fn resolve<'s>(&self, schema: &'s Value) -> &'s Value
    where
        'a: 's,
    {
        let mut current = schema;
        for _ in 0..8 {
            match current.get("$ref").and_then(Value::as_str).and_then(|r| self.target(r)) {
                Some(target) => current = target,
                None => break,
            }
        }
        current
    }

    fn target(&self, reference: &str) -> Option<&'a Value> {
        let pointer = reference.strip_prefix('#')?;
        if pointer.is_empty() {
            return Some(self.root);
        }
        self.root.pointer(pointer)
    }

    fn convert(&mut self, schema: &Value, hint: &str, depth: usize) -> String {
        if depth > MAX_DEPTH {
            return "Any".to_string();
        }
        let Value::Object(map) = schema else { return "Any".to_string() };
        if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
            return self.convert_ref(reference, hint, depth);
        }
        let mut annotation = self.convert_plain(map, hint, depth);
        if map.get("nullable") == Some(&Value::Bool(true)) {
            annotation = union(vec![annotation, "None".to_string()]);
        }
        annotation
    }

    fn convert_ref(&mut self, reference: &str, hint: &str, depth: usize) -> String {
        if let Some(name) = self.by_ref.get(reference) {
            return name.clone();
        }
        let Some(target) = self.target(reference) else { return "Any".to_string() };
        let def_name = reference.rsplit('/').next().filter(|last| !last.is_empty() && *last != "#").unwrap_or(hint);
        if is_object_with_properties(target) {
            let name = self.class_name(def_name);
            self.by_ref.insert(reference.to_string(), name.clone());
            self.define(&name, target, depth);
            return name;
        }
        if !self.expanding.insert(reference.to_string()) {
            return "Any".to_string();
        }
        let annotation = self.convert(target, def_name, depth + 1);
        self.expanding.remove(reference);
        annotation
    }

    fn convert_plain(&mut self, map: &Map<String, Value>, hint: &str, depth: usize) -> String {
        if let Some(value) = map.get("const") {
            return literal_type(std::slice::from_ref(value)).unwrap_or_else(|| "Any".to_string());
        }
        if let Some(Value::Array(values)) = map.get("enum")
            && let Some(annotation) = literal_type(values)
        {
            return annotation;
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(variants)) = map.get(key) {
                let hint = |i: usize| if variants.len() == 1 { hint.to_string() } else { format!("{hint}{}", i + 1) };
                let annotations = variants.iter().enumerate().map(|(i, v)| self.convert(v, &hint(i), depth + 1));
                return union(annotations.collect());
            }
        }
        if let Some(Value::Array(parts)) = map.get("allOf") {
            return match parts.as_slice() {
                [only] if map.get("type").is_none() => self.convert(only, hint, depth + 1),
                _ if is_object_with_properties(&Value::Object(map.clone()))
                    || parts.iter().any(|p| self.has_fields(p)) =>
                {
                    self.define_new(hint, &Value::Object(map.clone()), depth)
                }
                _ => "Any".to_string(),
            };
        }
        match map.get("type") {
            Some(Value::String(kind)) => self.convert_type(kind, map, hint, depth),
            Some(Value::Array(kinds)) => {
                let annotations =
                    kinds.iter().filter_map(Value::as_str).map(|k| self.convert_type(k, map, hint, depth));
                union(annotations.collect())
            }
            _ if map.contains_key("properties") => self.convert_type("object", map, hint, depth),
            _ if map.contains_key("items") || map.contains_key("prefixItems") => {
                self.convert_type("array", map, hint, depth)
            }
            _ => "Any".to_string(),
        }
    }

    fn convert_type(&mut self, kind: &str, map: &Map<String, Value>, hint: &str, depth: usize) -> String {
        match kind {
            "string" => "str".to_string(),
            "integer" => "int".to_string(),
            "number" => "float".to_string(),
            "boolean" => "bool".to_string(),
            "null" => "None".to_string(),
            "array" => self.convert_array(map, hint, depth),
            "object" => self.convert_object(map, hint, depth),
            _ => "Any".to_string(),
        }
    }

    fn convert_array(&mut self, map: &Map<String, Value>, hint: &str, depth: usize) -> String {
        let item_hint = format!("{hint}Item");
        let tuple = match (map.get("prefixItems"), map.get("items")) {
            (Some(Value::Array(prefix)), _) | (None, Some(Value::Array(prefix))) => Some(prefix),
            _ => None,
        };
        if let Some(prefix) = tuple {
            let items: Vec<String> = prefix.iter().map(|item| self.convert(item, &item_hint, depth + 1)).collect();
            return if items.is_empty() { "list[Any]".to_string() } else { format!("tuple[{}]", items.join(", ")) };
        }
        match map.get("items") {
            Some(items) => format!("list[{}]", self.convert(items, &item_hint, depth + 1)),
            None => "list[Any]".to_string(),
        }
    }

    fn convert_object(&mut self, map: &Map<String, Value>, hint: &str, depth: usize) -> String {
        if matches!(map.get("properties"), Some(Value::Object(p)) if !p.is_empty()) {
            return self.define_new(hint, &Value::Object(map.clone()), depth);
        }
        match map.get("additionalProperties") {
            Some(values @ Value::Object(_)) => {
                format!("dict[str, {}]", self.convert(values, &format!("{hint}Value"), depth + 1))
            }
            _ => "dict[str, Any]".to_string(),
        }
    }

    /// A `TypedDict` named after `hint` for `schema`; returns its name. One with the same fields and
    /// description (an output repeating an input's shape) is used again instead.
    fn define_new(&mut self, hint: &str, schema: &Value, depth: usize) -> String {
        let fields = self.fields_at(schema, &camel_case(hint), depth + 1);
        let description = description_of(schema);
        if let Some(same) = self.typed_dicts.iter().find(|t| t.fields == fields && t.description == description) {
            return same.name.clone();
        }
        let name = self.class_name(hint);
        self.typed_dicts.push(TypedDictDef { name: name.clone(), fields, description });
        name
    }

    /// Defines the `TypedDict` `name` (already taken: a recursive `$ref` may refer to it) for `schema`.
    fn define(&mut self, name: &str, schema: &Value, depth: usize) {
        let fields = self.fields_at(schema, name, depth + 1);
        let description = description_of(schema);
        self.typed_dicts.push(TypedDictDef { name: name.to_string(), fields, description });
    }

    fn has_fields(&self, schema: &Value) -> bool {
        is_object_with_properties(self.resolve(schema))
    }

    fn fields_at(&mut self, schema: &Value, owner: &str, depth: usize) -> Vec<Field> {
        let mut properties: Vec<(String, Value)> = Vec::new();
        let mut required: BTreeSet<String> = BTreeSet::new();
        self.collect_properties(schema, &mut properties, &mut required, 0);
        properties
            .into_iter()
            .map(|(key, property)| {
                let hint = format!("{owner}{}", camel_case(&key));
                let annotation = self.convert(&property, &hint, depth + 1);
                let comment = describe(&property, self);
                let schema = self.resolve(&property).clone();
                let default = property.get("default").or_else(|| schema.get("default")).cloned();
                Field { required: required.contains(&key), key, annotation, comment, default, schema }
            })
            .collect()
    }

    /// `properties` and `required` of `schema`, merged over `$ref` and `allOf` (first definition wins).
    fn collect_properties(
        &self,
        schema: &Value,
        properties: &mut Vec<(String, Value)>,
        required: &mut BTreeSet<String>,
        depth: usize,
    ) {
        if depth > MAX_DEPTH {
            return;
        }
        let schema = self.resolve(schema);
        if let Some(Value::Object(props)) = schema.get("properties") {
            for (key, property) in props {
                if !properties.iter().any(|(k, _)| k == key) {
                    properties.push((key.clone(), property.clone()));
                }
            }
        }
        if let Some(Value::Array(names)) = schema.get("required") {
            required.extend(names.iter().filter_map(Value::as_str).map(String::from));
        }
        if let Some(Value::Array(parts)) = schema.get("allOf") {
            for part in parts {
                self.collect_properties(part, properties, required, depth + 1);
            }
        }
    }

    /// A class name from `hint`, unique among the tool's names.
    fn class_name(&mut self, hint: &str) -> String {
        let mut base = camel_case(hint);
        if !is_plain_identifier(&base) {
            base = identifier(&base);
        }
        let mut name = base.clone();
        let mut n = 2;
        while self.taken.contains(&name) {
            name = format!("{base}{n}");
            n += 1;
        }
        self.taken.insert(name.clone());
        name
    }
}

fn description_of(schema: &Value) -> String {
    schema.get("description").and_then(Value::as_str).unwrap_or_default().to_string()
}

fn is_object_with_properties(schema: &Value) -> bool {
    matches!(schema.get("properties"), Some(Value::Object(p)) if !p.is_empty())
}

/// `Literal[...]` of values Python can write as literals (strings, integers, booleans, None), or `None`
/// when some value is not one of those.
fn literal_type(values: &[Value]) -> Option<String> {
    if values.is_empty()
        || !values
            .iter()
            .all(|v| matches!(v, Value::String(_) | Value::Bool(_) | Value::Null) || v.is_i64() || v.is_u64())
    {
        return None;
    }
    Some(format!("Literal[{}]", values.iter().map(literal).collect::<Vec<_>>().join(", ")))
}

/// `A | B`, duplicates removed, `Any` absorbing everything.
fn union(annotations: Vec<String>) -> String {
    let mut unique: Vec<String> = Vec::new();
    for annotation in annotations {
        if annotation == "Any" {
            return annotation;
        }
        if !unique.contains(&annotation) {
            unique.push(annotation);
        }
    }
    if unique.is_empty() { "Any".to_string() } else { unique.join(" | ") }
}

/// `shipping-address` → `ShippingAddress`, `QueryFinancials` stays.
pub fn camel_case(text: &str) -> String {
    let mut out = String::new();
    let mut upper = true;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(if upper { c.to_ascii_uppercase() } else { c });
            upper = false;
        } else {
            upper = true;
        }
    }
    out
}

/// A schema's description, bounds and formats on one line: `Number of periods. (>= 1, <= 20)`. For a
/// nullable `anyOf` (pydantic's `Optional[int]`), the constraints of the non-null variant count too.
pub fn describe(schema: &Value, converter: &Converter<'_>) -> String {
    let schema = converter.resolve(schema);
    let description = schema.get("description").and_then(Value::as_str).map(comment_text).unwrap_or_default();
    let mut constraints = constraints_of(schema);
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(variants)) = schema.get(key) {
            let non_null: Vec<&Value> = variants
                .iter()
                .map(|v| converter.resolve(v))
                .filter(|v| v.get("type") != Some(&"null".into()))
                .collect();
            if let [only] = non_null.as_slice() {
                constraints.extend(constraints_of(only));
            }
        }
    }
    match (description.is_empty(), constraints.is_empty()) {
        (_, true) => description,
        (true, false) => constraints.join(", "),
        (false, false) => format!("{description} ({})", constraints.join(", ")),
    }
}

fn constraints_of(schema: &Value) -> Vec<String> {
    let number = |key: &str| schema.get(key).filter(|v| v.is_number()).map(Value::to_string);
    let mut out = Vec::new();
    if let Some(format) = schema.get("format").and_then(Value::as_str) {
        out.push(format!("format {}", comment_text(format)));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        out.push(format!("pattern {}", string_literal(&comment_text(pattern))));
    }
    let exclusive = |key: &str| schema.get(key) == Some(&Value::Bool(true));
    if let Some(min) = number("minimum") {
        out.push(format!("{} {min}", if exclusive("exclusiveMinimum") { ">" } else { ">=" }));
    }
    if let Some(min) = number("exclusiveMinimum") {
        out.push(format!("> {min}"));
    }
    if let Some(max) = number("maximum") {
        out.push(format!("{} {max}", if exclusive("exclusiveMaximum") { "<" } else { "<=" }));
    }
    if let Some(max) = number("exclusiveMaximum") {
        out.push(format!("< {max}"));
    }
    if let Some(step) = number("multipleOf") {
        out.push(format!("multiple of {step}"));
    }
    for (key, what) in
        [("minLength", "length >="), ("maxLength", "length <="), ("minItems", "items >="), ("maxItems", "items <=")]
    {
        if let Some(n) = number(key) {
            out.push(format!("{what} {n}"));
        }
    }
    if schema.get("uniqueItems") == Some(&Value::Bool(true)) {
        out.push("unique items".to_string());
    }
    if schema.get("deprecated") == Some(&Value::Bool(true)) {
        out.push("deprecated".to_string());
    }
    out
}
