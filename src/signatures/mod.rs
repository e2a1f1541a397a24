//! Python signatures for downstream tools, generated from their input and output schemas: what
//! `inspect_tool(format="python")` and `list_callable_tools(detail="signatures")` show, and the parameter
//! list the runner builds each tool function's `inspect.Signature` from and checks calls against.
//!
//! Tools take keyword arguments only, so every parameter is keyword-only and they keep the schema's order
//! (required and optional ones mixed). A key that is no Python identifier (`from`, `user-id`) gets a mapped
//! name (`from_`, `user_id`) that the runner maps back on the call.

mod observed;
mod python;
mod types;

use std::collections::BTreeSet;

use rmcp::model::Tool;
use serde::Serialize;
use serde_json::Value;

pub use observed::{ObservedReturn, Shape};
use python::{comment_text, docstring, identifier, is_plain_identifier, literal, string_literal};
use types::{Converter, Field, TypedDictDef, camel_case};

/// What a signature says in place of a return type when the tool declares no output schema.
const NO_OUTPUT_SCHEMA: &str = "# no output schema: inspect the result";

/// A tool as a Python function.
#[derive(Debug, Clone)]
pub struct Signature {
    /// The namespaced name, `mcp__<server>__<tool>`.
    pub name: String,
    pub description: String,
    pub params: Vec<Param>,
    /// `**extra`, when the schema allows keys it does not list.
    pub extra: Option<Extra>,
    /// The return annotation, `None` without an output schema (then `Any`, with a note).
    pub returns: Option<String>,
    typed_dicts: Vec<TypedDictDef>,
}

/// The `**` parameter of a tool that takes keys its schema does not list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Extra {
    /// `extra`, with `_`s added if a parameter has that name.
    pub name: String,
    pub annotation: String,
}

/// One keyword argument.
#[derive(Debug, Clone)]
pub struct Param {
    /// Its name in Python.
    pub name: String,
    /// The key sent to the server.
    pub key: String,
    pub annotation: String,
    pub required: bool,
    pub default: Option<Value>,
    /// Description, bounds and formats, on one line.
    pub comment: String,
    /// What a literal argument must be, for the check before a program runs.
    pub accepts: Accepts,
}

/// The JSON a literal argument may be: `types` (JSON type names) and `values` (an enum), each `None`
/// when the schema does not restrict it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Accepts {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub types: Option<Vec<&'static str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<Value>>,
}

impl Signature {
    /// The signature of `tool` under its namespaced `name`. `wrapped`: its structured results arrive
    /// unwrapped from `{"result": v}`, so the return type is that of `result`.
    pub fn of(name: &str, tool: &Tool, wrapped: bool) -> Signature {
        let input = Value::Object(tool.input_schema.as_ref().clone());
        let mut converter = Converter::new(&input);
        let fields = converter.fields(&input, "");
        let params = parameters(fields, &converter);
        let extra = extra_keys(&input, &converter).map(|schema| {
            let mut name = "extra".to_string();
            while params.iter().any(|p| p.name == name) {
                name.push('_');
            }
            Extra { name, annotation: converter.annotation(&schema, "Extra") }
        });
        let output = tool.output_schema.as_ref().map(|schema| Value::Object(schema.as_ref().clone()));
        let mut converter = converter.with_root(output.as_ref().unwrap_or(&Value::Null));
        let returns = output.as_ref().map(|schema| {
            let hint = format!("{}Result", camel_case(&tool.name));
            match schema.pointer("/properties/result") {
                Some(result) if wrapped => converter.annotation(result, &hint),
                _ => converter.annotation(schema, &hint),
            }
        });
        let description = tool.description.as_deref().or(tool.title.as_deref()).unwrap_or_default().to_string();
        Signature { name: name.to_string(), description, params, extra, returns, typed_dicts: converter.typed_dicts }
    }

    /// The signature as Python source: the `TypedDict`s it uses, then `async def ...` with one parameter
    /// a line, each followed by its comment, and the description as docstring.
    pub fn render(&self) -> String {
        self.render_observed(None)
    }

    /// [`Signature::render`], with the return type `observed` in results when the tool declares none.
    pub fn render_observed(&self, observed: Option<&ObservedReturn>) -> String {
        let mut out = String::new();
        for typed_dict in &self.typed_dicts {
            render_typed_dict(typed_dict, &mut out);
            out.push('\n');
        }
        out.push_str("async def ");
        out.push_str(&self.name);
        if self.params.is_empty() && self.extra.is_none() {
            out.push_str("()");
        } else {
            // A bare `*` must be followed by a named parameter.
            out.push_str(if self.params.is_empty() { "(\n" } else { "(\n    *,\n" });
            for param in &self.params {
                out.push_str("    ");
                out.push_str(&param.name);
                out.push_str(": ");
                out.push_str(&param.annotation);
                if !param.required {
                    out.push_str(" = ");
                    out.push_str(&param.default.as_ref().map_or_else(|| "...".to_string(), literal));
                }
                out.push(',');
                push_comment(&mut out, &param_comment(param));
                out.push('\n');
            }
            if let Some(extra) = &self.extra {
                out.push_str(&format!("    **{}: {},  # more keys are allowed\n", extra.name, extra.annotation));
            }
            out.push(')');
        }
        match (&self.returns, observed) {
            (Some(returns), _) => out.push_str(&format!(" -> {returns}:\n")),
            (None, Some(observed)) if observed.detail == observed.annotation => {
                out.push_str(&format!(" -> {}:  # observed\n", observed.annotation));
            }
            (None, Some(observed)) => {
                out.push_str(&format!(" -> {}:  # observed: {}\n", observed.annotation, observed.detail));
            }
            (None, None) => out.push_str(&format!(" -> Any:  {NO_OUTPUT_SCHEMA}\n")),
        }
        out.push_str("    ");
        if self.description.trim().is_empty() {
            out.push_str("...");
        } else {
            out.push_str(&docstring(&self.description, "    "));
        }
        out.push('\n');
        out
    }

    /// What the runner needs to give the tool function its signature, check calls and map names back.
    pub fn runner_spec(&self) -> RunnerTool<'_> {
        RunnerTool {
            name: &self.name,
            params: self
                .params
                .iter()
                .map(|p| RunnerParam {
                    name: &p.name,
                    key: (p.key != p.name).then_some(p.key.as_str()),
                    annotation: &p.annotation,
                    required: p.required,
                    default: p.default.as_ref(),
                    accepts: &p.accepts,
                })
                .collect(),
            extra: self.extra.as_ref(),
            returns: self.returns.as_deref().unwrap_or("Any"),
            doc: self.render(),
        }
    }
}

/// A tool as the runner's `run` message carries it (PROTOCOL.md).
#[derive(Debug, Serialize)]
pub struct RunnerTool<'a> {
    pub name: &'a str,
    pub params: Vec<RunnerParam<'a>>,
    /// `**extra` (its name and annotation), when the tool takes keys it does not list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra: Option<&'a Extra>,
    pub returns: &'a str,
    /// The rendered signature: the function's `__doc__` and what `help()` prints.
    pub doc: String,
}

#[derive(Debug, Serialize)]
pub struct RunnerParam<'a> {
    pub name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<&'a str>,
    pub annotation: &'a str,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<&'a Value>,
    #[serde(flatten)]
    pub accepts: &'a Accepts,
}

/// The parameters for the input schema's fields: unique Python names (identifiers kept, others mapped, a
/// `_` added until no two are the same), and what each accepts.
fn parameters(fields: Vec<Field>, converter: &Converter<'_>) -> Vec<Param> {
    let mut taken: BTreeSet<String> =
        fields.iter().filter(|f| is_plain_identifier(&f.key)).map(|f| f.key.clone()).collect();
    fields
        .into_iter()
        .map(|field| {
            let name = if is_plain_identifier(&field.key) {
                field.key.clone()
            } else {
                let mut name = identifier(&field.key);
                while !taken.insert(name.clone()) {
                    name.push('_');
                }
                name
            };
            Param {
                accepts: accepts(&field.schema, converter),
                name,
                key: field.key,
                annotation: field.annotation,
                default: if field.required { None } else { field.default },
                required: field.required,
                comment: field.comment,
            }
        })
        .collect()
}

/// The schema of keys the input schema allows beyond those it lists, if it allows any: an
/// `additionalProperties` of `true` or a schema, `patternProperties`, a root `anyOf`/`oneOf` (its keys
/// vary), or no `properties` at all (a schema that says nothing about its keys).
fn extra_keys(input: &Value, converter: &Converter<'_>) -> Option<Value> {
    let input = converter.resolve(input);
    match input.get("additionalProperties") {
        Some(Value::Bool(false)) => return None,
        Some(schema @ Value::Object(_)) => return Some(schema.clone()),
        Some(Value::Bool(true)) => return Some(Value::Bool(true)),
        _ => {}
    }
    let lists_keys = input.get("properties").is_some()
        || input.get("allOf").is_some_and(|parts| parts.as_array().is_some_and(|p| !p.is_empty()));
    let open = input.get("patternProperties").is_some()
        || input.get("anyOf").is_some()
        || input.get("oneOf").is_some()
        || !lists_keys;
    open.then_some(Value::Bool(true))
}

/// What a literal argument for `schema` may be.
fn accepts(schema: &Value, converter: &Converter<'_>) -> Accepts {
    accepts_at(schema, converter, 0)
}

/// Unions of `$ref`s can refer to each other: beyond a few levels nothing is restricted.
const MAX_UNION_DEPTH: usize = 8;

fn accepts_at(schema: &Value, converter: &Converter<'_>, depth: usize) -> Accepts {
    if depth > MAX_UNION_DEPTH {
        return Accepts::default();
    }
    let schema = converter.resolve(schema);
    let Value::Object(map) = schema else { return Accepts::default() };
    let nullable = map.get("nullable") == Some(&Value::Bool(true));
    let mut accepts = if let Some(value) = map.get("const") {
        Accepts { types: None, values: Some(vec![value.clone()]) }
    } else if let Some(Value::Array(values)) = map.get("enum") {
        Accepts { types: None, values: Some(values.clone()) }
    } else if let Some(variants) = map.get("anyOf").or_else(|| map.get("oneOf")).and_then(Value::as_array) {
        union_of(variants.iter().map(|v| accepts_at(v, converter, depth + 1)).collect())
    } else {
        let types = match map.get("type") {
            Some(Value::String(kind)) => known_type(kind).map(|t| vec![t]),
            Some(Value::Array(kinds)) => kinds.iter().map(|k| k.as_str().and_then(known_type)).collect(),
            _ => None,
        };
        Accepts { types, values: None }
    };
    if nullable {
        if let Some(types) = &mut accepts.types {
            types.push("null");
        }
        if let Some(values) = &mut accepts.values {
            values.push(Value::Null);
        }
    }
    accepts
}

/// What a value matching one of the variants may be: the values of all of them if each is an enum, else
/// the types of all of them if each restricts its type (an enum restricting it to its values' types).
fn union_of(variants: Vec<Accepts>) -> Accepts {
    let values: Option<Vec<Vec<Value>>> = variants.iter().map(|a| a.values.clone()).collect();
    if let Some(values) = values {
        return Accepts { types: None, values: Some(values.concat()) };
    }
    let types: Option<Vec<Vec<&'static str>>> = variants
        .iter()
        .map(|a| a.types.clone().or_else(|| a.values.as_ref().map(|v| v.iter().map(json_type).collect())))
        .collect();
    Accepts { types: types.map(|t| t.concat()), values: None }
}

fn known_type(kind: &str) -> Option<&'static str> {
    ["string", "integer", "number", "boolean", "null", "array", "object"].into_iter().find(|k| *k == kind)
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A parameter's comment: the key it is sent as when its name differs, then its description and bounds.
fn param_comment(param: &Param) -> String {
    let comment = param.comment.clone();
    if param.name == param.key {
        return comment;
    }
    let key = format!("key {}", string_literal(&comment_text(&param.key)));
    if comment.is_empty() { key } else { format!("{key}; {comment}") }
}

fn push_comment(out: &mut String, comment: &str) {
    if !comment.is_empty() {
        out.push_str("  # ");
        out.push_str(comment);
    }
}

/// A field's comment, with its default (a `TypedDict` cannot show one).
fn field_comment(field: &Field) -> String {
    match &field.default {
        Some(default) if field.comment.is_empty() => format!("default {}", literal(default)),
        Some(default) => format!("{} (default {})", field.comment, literal(default)),
        None => field.comment.clone(),
    }
}

fn render_typed_dict(typed_dict: &TypedDictDef, out: &mut String) {
    let field_type = |field: &Field| {
        if field.required { field.annotation.clone() } else { format!("NotRequired[{}]", field.annotation) }
    };
    if typed_dict.fields.iter().all(|f| is_plain_identifier(&f.key)) {
        out.push_str(&format!("class {}(TypedDict):\n", typed_dict.name));
        if !typed_dict.description.trim().is_empty() {
            out.push_str(&format!("    {}\n", docstring(&typed_dict.description, "    ")));
        } else if typed_dict.fields.is_empty() {
            out.push_str("    pass\n");
        }
        for field in &typed_dict.fields {
            out.push_str(&format!("    {}: {}", field.key, field_type(field)));
            push_comment(out, &field.comment);
            out.push('\n');
        }
        return;
    }
    // Keys that are no identifiers need the functional form.
    if !typed_dict.description.trim().is_empty() {
        out.push_str(&format!("# {}\n", comment_text(&typed_dict.description)));
    }
    out.push_str(&format!("{} = TypedDict({}, {{\n", typed_dict.name, string_literal(&typed_dict.name)));
    for field in &typed_dict.fields {
        out.push_str(&format!("    {}: {},", string_literal(&field.key), field_type(field)));
        push_comment(out, &field_comment(field));
        out.push('\n');
    }
    out.push_str("})\n");
}

#[cfg(test)]
pub(crate) mod tests;
