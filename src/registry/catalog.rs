//! The callable tools of all connected servers under their namespaced names, rebuilt whenever a server
//! connects, re-lists or goes down. Name collisions are detected here and reported, never overwritten.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::Tool;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::result::{OutputCheck, ResultShape, schema_says_wrapped, tool_meta_says_wrapped};
use super::task_only;
use crate::config::ToolFilter;
use crate::naming::namespaced;
use crate::search::{Document, Index, Parameter};
use crate::signatures::{Shape, Signature};

/// One callable downstream tool.
pub struct ToolEntry {
    pub namespaced: String,
    /// The configured name of its server.
    pub server: String,
    /// The tool as its server listed it.
    pub tool: Tool,
    /// Compiled at the first result that needs it: most listed tools are never called, and compiling is
    /// the only use of the validator's compiler code (its pages stay out of memory until then).
    validator: OnceLock<Option<OutputCheck>>,
    wrapped: bool,
    signature: Signature,
    /// The tool as the runner's `run` message carries it, serialised once.
    runner_spec: Box<RawValue>,
    /// The shape of its results so far, for a tool without an output schema. It lives as long as this
    /// listing of the tool: a new listing (`tools/list_changed`, a reconnect) starts afresh.
    observed: Mutex<Option<Remembered>>,
    /// Its server refused to call it but as a task, which its listing did not say (or its transport dropped).
    refused_direct_calls: AtomicBool,
}

/// A shape a tool's results had, holding one of the places for one.
struct Remembered {
    shape: Shape,
    _slot: ShapeSlot,
}

/// How many tools' result shapes are remembered at once, across servers and listings.
const MAX_SHAPES_REMEMBERED: usize = 256;

/// The places for remembered result shapes: a tool whose results find none left stays unobserved.
#[derive(Clone, Default)]
pub struct ShapeSlots {
    taken: Arc<AtomicUsize>,
}

/// One taken place, given back when the listing that held it is dropped.
struct ShapeSlot {
    taken: Arc<AtomicUsize>,
}

impl ShapeSlots {
    fn take(&self) -> Option<ShapeSlot> {
        let free = |taken: usize| (taken < MAX_SHAPES_REMEMBERED).then_some(taken + 1);
        self.taken.fetch_update(Ordering::AcqRel, Ordering::Acquire, free).ok()?;
        Some(ShapeSlot { taken: Arc::clone(&self.taken) })
    }
}

impl Drop for ShapeSlot {
    fn drop(&mut self) {
        self.taken.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ToolEntry {
    pub fn new(server: &str, tool: Tool) -> Self {
        let wrapped = tool.output_schema.as_deref().is_some_and(schema_says_wrapped)
            || tool_meta_says_wrapped(tool.meta.as_ref().map(|m| &m.0));
        let namespaced = namespaced(server, &tool.name);
        let signature = Signature::of(&namespaced, &tool, wrapped);
        let runner_spec = serde_json::value::to_raw_value(&signature.runner_spec()).expect("specs serialise");
        let validator = OnceLock::new();
        let observed = Mutex::new(None);
        let refused_direct_calls = AtomicBool::new(false);
        ToolEntry {
            namespaced,
            server: server.to_string(),
            tool,
            validator,
            wrapped,
            signature,
            runner_spec,
            observed,
            refused_direct_calls,
        }
    }

    /// Whether its server runs it only as a task: its listing says so, or it refused a direct call.
    pub fn runs_only_as_a_task(&self) -> bool {
        task_only::listed(&self.tool) || self.refused_direct_calls.load(Ordering::Relaxed)
    }

    /// Its server refused a direct call, saying it runs the tool only as a task.
    pub fn refused_direct_call(&self) {
        self.refused_direct_calls.store(true, Ordering::Relaxed);
    }

    /// The tool as a Python function.
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The signature as Python source, with the shape of the results seen so far as the return type of a
    /// tool without an output schema.
    pub fn python(&self) -> String {
        let observed = self.observed.lock().unwrap_or_else(|e| e.into_inner());
        let returns = observed.as_ref().map(|remembered| remembered.shape.observed_return());
        drop(observed);
        self.signature.render_observed(returns.as_ref())
    }

    /// Adds the shape of `value`, what a program received from a successful call, to what was seen of the
    /// tool's results (a tool with an output schema says what they are already). Reads the whole value:
    /// call it where the result is read, off the runtime thread when it is large.
    pub fn observe(&self, value: &RawValue, slots: &ShapeSlots) {
        if self.tool.output_schema.is_some() {
            return;
        }
        let Ok(shape) = Shape::of_json(value.get()) else { return };
        let mut observed = self.observed.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *observed {
            Some(remembered) => remembered.shape.merge(shape),
            None => *observed = slots.take().map(|_slot| Remembered { shape, _slot }),
        }
    }

    /// What a search finds the tool by.
    fn document(&self) -> Document<'_> {
        let parameters = self.signature.params.iter().map(|param| Parameter {
            name: &param.key,
            description: &param.comment,
            values: param.accepts.values.iter().flatten().filter_map(Value::as_str).collect(),
        });
        Document {
            name: &self.namespaced,
            own_name: &self.tool.name,
            title: self.tool.title.as_deref().unwrap_or_default(),
            description: self.tool.description.as_deref().unwrap_or_default(),
            parameters: parameters.collect(),
            deprecated: is_deprecated(&self.tool),
        }
    }

    pub fn result_shape(&self) -> ResultShape<'_> {
        ResultShape {
            validator: self.validator(),
            declares_output_schema: self.tool.output_schema.is_some(),
            wrapped: self.wrapped,
        }
    }

    /// The compiled output schema, if the tool declares one that compiles.
    fn validator(&self) -> Option<&OutputCheck> {
        let compile = || {
            let schema = self.tool.output_schema.as_ref()?;
            OutputCheck::compile(schema)
                .inspect_err(|e| {
                    let (server, tool) = (&self.server, &self.tool.name);
                    tracing::warn!(server, %tool, "output schema does not compile, results are not validated: {e}");
                })
                .ok()
        };
        self.validator.get_or_init(compile).as_ref()
    }

    /// What `inspect_tool` shows: the original ptc-mcp's `{name, description, inputSchema, outputSchema, note?}` plus the
    /// tool's `title` and `annotations`, kept verbatim.
    pub fn inspection(&self) -> Value {
        let mut out = Map::new();
        out.insert("name".into(), Value::String(self.namespaced.clone()));
        if let Some(title) = &self.tool.title {
            out.insert("title".into(), Value::String(title.clone()));
        }
        out.insert("description".into(), self.tool.description.as_deref().map_or(Value::Null, |d| d.into()));
        out.insert("inputSchema".into(), Value::Object(self.tool.input_schema.as_ref().clone()));
        match &self.tool.output_schema {
            Some(schema) => {
                out.insert("outputSchema".into(), Value::Object(schema.as_ref().clone()));
            }
            None => {
                out.insert("outputSchema".into(), Value::Null);
                out.insert(
                    "note".into(),
                    "No output schema defined by the upstream server. Inspect the return value in your script.".into(),
                );
            }
        }
        if let Some(annotations) = &self.tool.annotations
            && let Ok(annotations) = serde_json::to_value(annotations)
        {
            out.insert("annotations".into(), annotations);
        }
        Value::Object(out)
    }
}

/// Whether a server marks `tool` deprecated: `deprecated: true` in its input schema or its `_meta` (as
/// JSON Schema marks a property), or a description that says so the way servers write it (a sentence
/// that starts with "Deprecated", or "DEPRECATED" anywhere) — not one that merely mentions another's.
fn is_deprecated(tool: &Tool) -> bool {
    let marked =
        |object: Option<&Map<String, Value>>| object.and_then(|o| o.get("deprecated")) == Some(&Value::Bool(true));
    let description = tool.description.as_deref().unwrap_or_default();
    let sentence_says_so = description.split(['.', '!', '?', '\n']).any(|sentence| {
        let start = sentence.trim_start_matches(|c: char| !c.is_alphanumeric());
        start.get(.."deprecated".len()).is_some_and(|word| word.eq_ignore_ascii_case("deprecated"))
    });
    marked(Some(&tool.input_schema))
        || marked(tool.meta.as_ref().map(|meta| &meta.0))
        || sentence_says_so
        || description.contains("DEPRECATED")
}

/// A consistent view of every callable tool.
#[derive(Default)]
pub struct Catalog {
    pub tools: BTreeMap<String, Arc<ToolEntry>>,
    /// One line per name collision: which tools collided and that neither is callable.
    pub collisions: Vec<String>,
    /// Tools a connected server lists that are not callable, and why (the filter, a collision, task mode).
    pub refused: BTreeMap<String, String>,
    /// Tools left out because their server runs them only as tasks.
    pub task_only: Vec<String>,
    /// Built on the first search.
    index: OnceLock<Index>,
    /// The `tools` of the runner's `run` message, built for the first run.
    runner_tools: OnceLock<Box<RawValue>>,
}

impl Catalog {
    /// Builds the catalog from each connected server's listing, keeping only tools the filter permits.
    /// Tools whose namespaced names collide are all left out, and the collision is reported.
    pub fn build(entries: impl IntoIterator<Item = Arc<ToolEntry>>, filter: &ToolFilter) -> Catalog {
        let mut catalog = Catalog::default();
        let mut by_name: BTreeMap<String, Vec<Arc<ToolEntry>>> = BTreeMap::new();
        for entry in entries {
            match filter.refusal(&entry.namespaced) {
                Some(why) => {
                    catalog.refused.insert(entry.namespaced.clone(), why.to_string());
                }
                None if entry.runs_only_as_a_task() => {
                    catalog.refused.insert(entry.namespaced.clone(), task_only::WHY.to_string());
                    catalog.task_only.push(entry.namespaced.clone());
                }
                None => by_name.entry(entry.namespaced.clone()).or_default().push(entry),
            }
        }
        for (name, mut entries) in by_name {
            if entries.len() == 1 {
                catalog.tools.insert(name, entries.pop().expect("one entry"));
                continue;
            }
            let who: Vec<String> =
                entries.iter().map(|e| format!("'{}' of server '{}'", e.tool.name, e.server)).collect();
            catalog.refused.insert(name.clone(), format!("{} all map to it", who.join(", ")));
            catalog.collisions.push(format!("{} all map to '{name}'; none of them is callable", who.join(", ")));
        }
        catalog
    }

    /// What list_callable_tools says of the tools left out because their servers run them only as tasks.
    pub fn task_only_note(&self) -> Option<String> {
        (!self.task_only.is_empty()).then(|| {
            format!(
                "Not callable from programs, because their servers run them only as MCP tasks (execution.taskSupport: \
                 required) and ptc-mcp calls downstream tools directly: {}",
                self.task_only.join(", ")
            )
        })
    }

    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// Every callable tool as the runner's `run` message lists them (a JSON array).
    pub fn runner_tools(&self) -> &RawValue {
        self.runner_tools.get_or_init(|| {
            let specs: Vec<&str> = self.tools.values().map(|entry| entry.runner_spec.get()).collect();
            RawValue::from_string(format!("[{}]", specs.join(","))).expect("an array of JSON objects is JSON")
        })
    }

    /// The names of the tools that match `query`, best first (see [`Index::rank`]).
    pub fn search(&self, query: &str) -> Vec<String> {
        self.index.get_or_init(|| Index::new(self.tools.values().map(|entry| entry.document()))).rank(query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, extra: Value) -> Tool {
        let mut value =
            json!({"name": name, "description": format!("the {name} tool"), "inputSchema": {"type": "object"}});
        value.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(value).unwrap()
    }

    fn entries(tools: &[(&str, &str)]) -> Vec<Arc<ToolEntry>> {
        tools.iter().map(|(server, name)| Arc::new(ToolEntry::new(server, tool(name, json!({}))))).collect()
    }

    #[test]
    fn colliding_names_are_all_left_out_and_reported() {
        let catalog = Catalog::build(entries(&[("s", "dup-name"), ("s", "dup_name"), ("s", "ok")]), &ToolFilter::All);
        assert_eq!(catalog.names(), ["mcp__s__ok"]);
        assert_eq!(
            catalog.refused["mcp__s__dup_name"],
            "'dup-name' of server 's', 'dup_name' of server 's' all map to it"
        );
        assert_eq!(
            catalog.collisions,
            [
                "'dup-name' of server 's', 'dup_name' of server 's' all map to 'mcp__s__dup_name'; none of them is callable"
            ]
        );
    }

    #[test]
    fn collisions_across_servers_are_detected_too() {
        let catalog = Catalog::build(entries(&[("a", "b__c"), ("a__b", "c")]), &ToolFilter::All);
        assert!(catalog.tools.is_empty());
        assert_eq!(catalog.collisions.len(), 1);
    }

    #[test]
    fn the_filter_applies_to_namespaced_names() {
        let config: crate::config::ToolsConfig = serde_yaml_ng::from_str("block: ['mcp__s__secret*']").unwrap();
        let catalog = Catalog::build(entries(&[("s", "secret-thing"), ("s", "public")]), &config.filter().unwrap());
        assert_eq!(catalog.names(), ["mcp__s__public"]);
        assert_eq!(
            catalog.refused,
            BTreeMap::from([("mcp__s__secret_thing".to_string(), "it is blocked by tools.block".to_string())])
        );
        let config: crate::config::ToolsConfig = serde_yaml_ng::from_str("allow: ['mcp__s__p*']").unwrap();
        let catalog = Catalog::build(entries(&[("s", "secret-thing"), ("s", "public")]), &config.filter().unwrap());
        assert_eq!(catalog.refused["mcp__s__secret_thing"], "it is not in tools.allow");
    }

    #[test]
    fn a_tool_its_server_runs_only_as_a_task_is_left_out_saying_why() {
        let required = json!({"_meta": {task_only::META: "required"}});
        let optional = json!({"_meta": {task_only::META: "optional"}});
        let listed = [("only-task", required), ("either", optional), ("plain", json!({}))]
            .map(|(name, extra)| Arc::new(ToolEntry::new("s", tool(name, extra))));
        let catalog = Catalog::build(listed, &ToolFilter::All);
        assert_eq!(catalog.names(), ["mcp__s__either", "mcp__s__plain"]);
        assert_eq!(catalog.task_only, ["mcp__s__only_task"]);
        assert_eq!(catalog.refused["mcp__s__only_task"], task_only::WHY);
        assert!(catalog.task_only_note().unwrap().ends_with("directly: mcp__s__only_task"));
        let plain = entries(&[("s", "plain")]);
        assert_eq!(Catalog::build(plain.clone(), &ToolFilter::All).task_only_note(), None);
        plain[0].refused_direct_call();
        assert_eq!(Catalog::build(plain, &ToolFilter::All).task_only, ["mcp__s__plain"], "a refusal says it too");
    }

    #[test]
    fn inspection_has_the_seed_shape_with_a_note_only_without_output_schema() {
        let plain = ToolEntry::new("s", tool("t", json!({"title": "T", "annotations": {"readOnlyHint": true}})));
        assert_eq!(
            plain.inspection(),
            json!({
                "name": "mcp__s__t", "title": "T", "description": "the t tool", "inputSchema": {"type": "object"},
                "outputSchema": null,
                "note": "No output schema defined by the upstream server. Inspect the return value in your script.",
                "annotations": {"readOnlyHint": true}
            })
        );
        let schema =
            json!({"type": "object", "$defs": {"x": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/x"}}});
        let typed = ToolEntry::new("s", tool("t", json!({"outputSchema": schema.clone()})));
        assert_eq!(typed.inspection()["outputSchema"], schema);
        assert!(typed.inspection().get("note").is_none());
        assert!(typed.validator().is_some());
        let broken = ToolEntry::new("s", tool("t", json!({"outputSchema": {"type": "no such type"}})));
        assert!(broken.validator().is_none(), "results of a tool whose schema does not compile are not validated");
    }

    #[test]
    fn deprecation_is_read_from_markers_and_from_what_the_description_says() {
        let deprecated = |extra: Value| is_deprecated(&tool("t", extra));
        assert!(deprecated(json!({"description": "Read a file. DEPRECATED: Use read_text_file instead."})));
        assert!(deprecated(json!({"description": "[Deprecated] Use now instead."})));
        assert!(deprecated(json!({"description": "Gets the time.\ndeprecated since 2.0"})));
        assert!(deprecated(json!({"inputSchema": {"type": "object", "deprecated": true}})));
        assert!(deprecated(json!({"_meta": {"deprecated": true}})));
        assert!(!deprecated(json!({"description": "Replaces the deprecated get_time tool."})));
        assert!(!deprecated(json!({"_meta": {"deprecated": false}})));
    }

    #[test]
    fn searches_rank_a_deprecated_tool_below_its_replacement() {
        let path = format!("{}/tests/fixtures/tools/filesystem.json", env!("CARGO_MANIFEST_DIR"));
        let tools: Vec<Tool> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let entries = tools.into_iter().map(|tool| Arc::new(ToolEntry::new("filesystem", tool)));
        let catalog = Catalog::build(entries, &ToolFilter::All);
        for query in ["read file", "read a text file", "read"] {
            let found = catalog.search(query);
            let position = |name: &str| found.iter().position(|n| n == name);
            let (old, new) = (position("mcp__filesystem__read_file"), position("mcp__filesystem__read_text_file"));
            assert!(new.is_some() && old > new, "{query}: {found:?}");
        }
        assert_eq!(catalog.search("read_file")[0], "mcp__filesystem__read_file");
    }

    /// The recorded listings of two real servers.
    fn recorded_catalog() -> Catalog {
        let mut entries = Vec::new();
        for server in ["memory", "financial-data"] {
            let path = format!("{}/tests/fixtures/tools/{server}.json", env!("CARGO_MANIFEST_DIR"));
            let tools: Vec<Tool> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            entries.extend(tools.into_iter().map(|tool| Arc::new(ToolEntry::new(server, tool))));
        }
        Catalog::build(entries, &ToolFilter::All)
    }

    #[test]
    fn searches_find_relevant_tools_first_and_leave_unrelated_ones_out() {
        let catalog = recorded_catalog();
        assert_eq!(catalog.search("quarterly revenue")[..1], ["mcp__financial_data__query_financials"]);
        let relations = catalog.search("remove a relation from the graph");
        assert_eq!(relations[0], "mcp__memory__delete_relations", "{relations:?}");
        assert!(catalog.search("weather forecast").is_empty());
    }

    #[test]
    fn searches_put_exact_names_then_prefixes_before_relevance() {
        let catalog = recorded_catalog();
        assert_eq!(catalog.search("read_graph")[0], "mcp__memory__read_graph");
        assert_eq!(catalog.search("mcp__memory__open_nodes")[0], "mcp__memory__open_nodes");
        assert_eq!(catalog.search("Delete relations")[0], "mcp__memory__delete_relations");
        let mut deletes = catalog.search("delete")[..3].to_vec();
        deletes.sort();
        assert_eq!(
            deletes,
            ["mcp__memory__delete_entities", "mcp__memory__delete_observations", "mcp__memory__delete_relations"]
        );
    }

    #[test]
    fn searches_look_at_parameter_names() {
        let schema = |name: &str| json!({"inputSchema": {"type": "object", "properties": {name: {}}}});
        let entries = vec![
            Arc::new(ToolEntry::new("s", tool("a", schema("timezone")))),
            Arc::new(ToolEntry::new("s", tool("b", schema("path")))),
        ];
        assert_eq!(Catalog::build(entries, &ToolFilter::All).search("time zone timezone"), ["mcp__s__a"]);
    }

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_string()).unwrap()
    }

    #[test]
    fn a_tool_without_output_schema_shows_the_shape_of_its_results() {
        let slots = ShapeSlots::default();
        let entry = ToolEntry::new("s", tool("t", json!({})));
        assert!(entry.python().contains("-> Any:  # no output schema"), "{}", entry.python());
        entry.observe(&raw(r#"{"a": 1}"#), &slots);
        entry.observe(&raw(r#"{"a": "x", "b": [true]}"#), &slots);
        assert!(
            entry.python().contains("-> dict:  # observed: {'a': str | int, 'b'?: list[bool]}"),
            "{}",
            entry.python()
        );
        let typed = ToolEntry::new("s", tool("t", json!({"outputSchema": {"type": "object"}})));
        typed.observe(&raw(r#"{"a": 1}"#), &slots);
        assert_eq!(typed.python(), typed.signature().render(), "the output schema says what results are");
        assert_eq!(slots.taken.load(Ordering::Acquire), 1);
        drop(entry);
        assert_eq!(slots.taken.load(Ordering::Acquire), 0, "a dropped listing gives its place back");
    }

    #[test]
    fn only_so_many_tools_remember_shapes() {
        let slots = ShapeSlots::default();
        let entries: Vec<ToolEntry> =
            (0..=MAX_SHAPES_REMEMBERED).map(|i| ToolEntry::new("s", tool(&format!("t{i}"), json!({})))).collect();
        for entry in &entries {
            entry.observe(&raw("1"), &slots);
        }
        assert!(entries[0].python().contains("-> int:  # observed"));
        assert!(entries[MAX_SHAPES_REMEMBERED].python().contains("# no output schema"), "one too many");
        drop(entries);
        assert_eq!(slots.taken.load(Ordering::Acquire), 0);
    }

    #[test]
    fn wrapping_is_recognised_from_schema_markers_and_tool_meta() {
        let sdk = json!({"outputSchema": {"type": "object", "properties": {"result": {"type": "array"}}, "required": ["result"]}});
        let fastmcp = json!({"outputSchema": {"type": "object", "properties": {"result": {}, "other": {}}, "x-fastmcp-wrap-result": true}});
        let meta = json!({"_meta": {"fastmcp": {"wrap_result": true}}});
        let plain = json!({"outputSchema": {"type": "object", "properties": {"a": {}, "b": {}}}});
        assert!(ToolEntry::new("s", tool("t", sdk)).wrapped);
        assert!(ToolEntry::new("s", tool("t", fastmcp)).wrapped);
        assert!(ToolEntry::new("s", tool("t", meta)).wrapped);
        assert!(!ToolEntry::new("s", tool("t", plain)).wrapped);
    }
}
