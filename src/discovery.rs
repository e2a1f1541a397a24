//! What `list_callable_tools` and `inspect_tool` answer, for the MCP tools and the helpers inside programs
//! alike: the same arguments, checked the same way, and the same listings. With no arguments beyond the
//! original ptc-mcp's, the answers are the original's.

use serde_json::{Map, Value};

use crate::config::{CONFIG_ENV, ConfigSource, DEFAULT_CONFIG_FILE};
use crate::registry::Catalog;
use crate::suggest::closest_tools;

pub const LIST_ARGUMENTS: &[&str] = &["query", "detail", "limit"];
pub const INSPECT_ARGUMENTS: &[&str] = &["tool_name", "format"];
pub const EXECUTE_ARGUMENTS: &[&str] = &["code", "session"];
/// Names longer than this are no tool's and are cut in messages (a program can send any length).
const MAX_NAME_SHOWN: usize = 1024;

/// Why a request to one of the three tools cannot be answered: the words the caller gets (the MCP tool's
/// error, or a program's `ToolError`).
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum RequestError {
    #[error("{tool} got an unexpected argument '{name}'; it takes {}", takes.join(", "))]
    Unexpected { tool: &'static str, name: String, takes: &'static [&'static str] },
    #[error("{tool} needs {argument}: {what}")]
    Missing { tool: &'static str, argument: &'static str, what: &'static str },
    #[error("{tool}: {argument} must be {expected}, got {got}")]
    Invalid { tool: &'static str, argument: &'static str, expected: &'static str, got: Value },
    /// The original ptc-mcp's `[Tool not found]`, with why or what was meant where that is known.
    #[error("[Tool not found] '{name}' {why}")]
    NotFound { name: String, why: String },
}

/// `list_callable_tools(query=None, detail="names", limit=None)`.
#[derive(Debug, Default, PartialEq)]
pub struct ListRequest {
    pub query: Option<String>,
    pub signatures: bool,
    pub limit: Option<usize>,
}

/// What `list_callable_tools` lists.
#[derive(Debug, PartialEq)]
pub enum Listing {
    /// Sorted, or best first for a query.
    Names(Vec<String>),
    /// The Python signatures of those tools, one after the other.
    Signatures(String),
}

impl ListRequest {
    /// Reads the arguments; `Err` says what is wrong and what is expected.
    pub fn parse(arguments: &Map<String, Value>) -> Result<ListRequest, RequestError> {
        const TOOL: &str = "list_callable_tools";
        check_names(TOOL, arguments, LIST_ARGUMENTS)?;
        let invalid = |argument, expected, got: &Value| RequestError::Invalid {
            tool: TOOL,
            argument,
            expected,
            got: got.clone(),
        };
        let query = match arguments.get("query") {
            None | Some(Value::Null) => None,
            Some(Value::String(query)) if query.trim().is_empty() => None,
            Some(Value::String(query)) => Some(query.clone()),
            Some(other) => return Err(invalid("query", "a string", other)),
        };
        let signatures = match arguments.get("detail") {
            None | Some(Value::Null) => false,
            Some(Value::String(detail)) if detail == "names" => false,
            Some(Value::String(detail)) if detail == "signatures" => true,
            Some(other) => return Err(invalid("detail", "\"names\" or \"signatures\"", other)),
        };
        let limit = match arguments.get("limit") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= 1) => n.as_u64().map(saturating_usize),
            Some(other) => return Err(invalid("limit", "an integer of at least 1", other)),
        };
        Ok(ListRequest { query, signatures, limit })
    }

    /// The listing of `catalog`: every callable tool's name sorted, or for a query the matching ones best
    /// first; at most `limit`; as names or signatures.
    pub fn list(&self, catalog: &Catalog) -> Listing {
        let mut names = match &self.query {
            Some(query) => catalog.search(query),
            None => catalog.names(),
        };
        if let Some(limit) = self.limit {
            names.truncate(limit);
        }
        if !self.signatures {
            return Listing::Names(names);
        }
        if names.is_empty() {
            return Listing::Signatures(match &self.query {
                Some(query) => format!("# {}", nothing_matches(query, catalog.tools.len())),
                None => "# no callable tool".to_string(),
            });
        }
        let signatures: Vec<String> =
            names.iter().filter_map(|name| catalog.tools.get(name)).map(|entry| entry.python()).collect();
        Listing::Signatures(signatures.join("\n\n"))
    }
}

impl Listing {
    /// What a search that listed no names says besides its `[]` (which stays, for whoever reads it as
    /// JSON): that nothing matched, and how many tools there are. `None` for any other listing.
    pub fn no_match_note(&self, request: &ListRequest, catalog: &Catalog) -> Option<String> {
        let query = request.query.as_deref()?;
        matches!(self, Listing::Names(names) if names.is_empty()).then(|| nothing_matches(query, catalog.tools.len()))
    }

    /// As JSON for a program: the list of names, or the text of the signatures.
    pub fn into_value(self) -> Value {
        match self {
            Listing::Names(names) => Value::from(names),
            Listing::Signatures(text) => Value::String(text),
        }
    }
}

/// `inspect_tool(tool_name, format="json")`.
#[derive(Debug, PartialEq)]
pub struct InspectRequest {
    pub tool_name: String,
    pub python: bool,
}

/// What `inspect_tool` shows.
#[derive(Debug, PartialEq)]
pub enum Inspection {
    /// The original ptc-mcp's `{name, description, inputSchema, outputSchema, note?}` (plus title and annotations).
    Json(Value),
    /// The tool's Python signature.
    Python(String),
}

impl InspectRequest {
    pub fn parse(arguments: &Map<String, Value>) -> Result<InspectRequest, RequestError> {
        const TOOL: &str = "inspect_tool";
        check_names(TOOL, arguments, INSPECT_ARGUMENTS)?;
        let Some(Value::String(tool_name)) = arguments.get("tool_name") else {
            let what = "one of the names list_callable_tools returns";
            return Err(RequestError::Missing { tool: TOOL, argument: "tool_name", what });
        };
        let python = match arguments.get("format") {
            None | Some(Value::Null) => false,
            Some(Value::String(format)) if format == "json" => false,
            Some(Value::String(format)) if format == "python" => true,
            Some(other) => {
                let expected = "\"json\" or \"python\"";
                return Err(RequestError::Invalid { tool: TOOL, argument: "format", expected, got: other.clone() });
            }
        };
        Ok(InspectRequest { tool_name: tool_name.clone(), python })
    }

    /// The tool's description; `Err` is the original's `[Tool not found]`, saying why the tool is not
    /// callable (the filter, a collision) or which tools the name most likely meant, as a program's call of it
    /// would.
    pub fn inspect(&self, catalog: &Catalog) -> Result<Inspection, RequestError> {
        let Some(entry) = catalog.tools.get(&self.tool_name) else {
            let why = match catalog.refused.get(&self.tool_name) {
                Some(why) => format!("is not callable: {why}"),
                None => match closest_tools(&self.tool_name, catalog.tools.keys().map(String::as_str)).as_slice() {
                    [] => "is not a callable tool; list_callable_tools gives the exact names".to_string(),
                    close => format!("is not a callable tool; did you mean '{}'?", close.join("' or '")),
                },
            };
            return Err(RequestError::NotFound { name: shown(&self.tool_name), why });
        };
        Ok(if self.python { Inspection::Python(entry.python()) } else { Inspection::Json(entry.inspection()) })
    }
}

impl Inspection {
    /// As JSON for a program: the inspection object, or the signature's text.
    pub fn into_value(self) -> Value {
        match self {
            Inspection::Json(value) => value,
            Inspection::Python(text) => Value::String(text),
        }
    }
}

/// Rejects arguments the tool does not take, naming those it does.
pub fn check_names(
    tool: &'static str,
    arguments: &Map<String, Value>,
    takes: &'static [&'static str],
) -> Result<(), RequestError> {
    match arguments.keys().find(|key| !takes.contains(&key.as_str())) {
        Some(unknown) => Err(RequestError::Unexpected { tool, name: shown(unknown), takes }),
        None => Ok(()),
    }
}

/// Why `list_callable_tools` lists nothing when no server is configured: where the config was looked for.
pub fn no_servers(source: &ConfigSource) -> String {
    match source {
        ConfigSource::File(path) => format!("no servers configured in {}", path.display()),
        ConfigSource::Defaults => {
            let looked_at = std::env::current_dir().map_or_else(
                |_| format!("./{DEFAULT_CONFIG_FILE}"),
                |dir| dir.join(DEFAULT_CONFIG_FILE).display().to_string(),
            );
            format!(
                "no servers configured (no config file found at {looked_at}; name one with --config PATH or \
                 ${CONFIG_ENV})"
            )
        }
    }
}

/// That a search for `query` found none of the `tools` callable tools, and what lists them all.
fn nothing_matches(query: &str, tools: usize) -> String {
    let tools = if tools == 1 { "1 tool".to_string() } else { format!("{tools} tools") };
    format!("no tool matches '{}' ({tools}; list_callable_tools() lists them all)", one_line(&shown(query)))
}

/// `text` cut to [`MAX_NAME_SHOWN`] characters.
fn shown(text: &str) -> String {
    text.chars().take(MAX_NAME_SHOWN).collect()
}

fn one_line(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

fn saturating_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list(arguments: Value) -> Result<ListRequest, RequestError> {
        ListRequest::parse(arguments.as_object().unwrap())
    }

    #[test]
    fn list_arguments_default_to_the_seed_listing() {
        assert_eq!(list(json!({})), Ok(ListRequest::default()));
        assert_eq!(list(json!({"query": " ", "detail": "names", "limit": null})), Ok(ListRequest::default()));
        assert_eq!(
            list(json!({"query": "revenue", "detail": "signatures", "limit": 2})),
            Ok(ListRequest { query: Some("revenue".into()), signatures: true, limit: Some(2) })
        );
    }

    #[test]
    fn bad_list_arguments_say_what_is_expected() {
        let errors = [
            (
                json!({"detail": "full"}),
                "list_callable_tools: detail must be \"names\" or \"signatures\", got \"full\"",
            ),
            (json!({"limit": 0}), "list_callable_tools: limit must be an integer of at least 1, got 0"),
            (json!({"limit": 2.5}), "list_callable_tools: limit must be an integer of at least 1, got 2.5"),
            (json!({"query": 3}), "list_callable_tools: query must be a string, got 3"),
            (
                json!({"qurey": "x"}),
                "list_callable_tools got an unexpected argument 'qurey'; it takes query, detail, limit",
            ),
        ];
        for (arguments, error) in errors {
            assert_eq!(list(arguments).map_err(|e| e.to_string()), Err(error.to_string()));
        }
    }

    #[test]
    fn inspect_arguments_take_a_format() {
        let parse = |v: Value| InspectRequest::parse(v.as_object().unwrap());
        assert_eq!(parse(json!({"tool_name": "t"})), Ok(InspectRequest { tool_name: "t".into(), python: false }));
        assert_eq!(
            parse(json!({"tool_name": "t", "format": "python"})),
            Ok(InspectRequest { tool_name: "t".into(), python: true })
        );
        assert_eq!(
            parse(json!({"tool_name": "t", "format": "yaml"})).unwrap_err().to_string(),
            "inspect_tool: format must be \"json\" or \"python\", got \"yaml\""
        );
        assert!(parse(json!({})).unwrap_err().to_string().starts_with("inspect_tool needs tool_name"));
    }

    #[test]
    fn an_unknown_name_suggests_near_ones_or_says_why_a_listed_tool_is_not_callable() {
        use crate::config::ToolFilter;
        use crate::registry::ToolEntry;
        use std::sync::Arc;
        let tool = |name: &str| {
            let tool = json!({"name": name, "description": "", "inputSchema": {"type": "object"}});
            Arc::new(ToolEntry::new("fs", serde_json::from_value(tool).unwrap()))
        };
        let block = globset::GlobSetBuilder::new().add(globset::Glob::new("*write*").unwrap()).build().unwrap();
        let catalog =
            Catalog::build(["read_file", "read_text_file", "write_file"].map(tool), &ToolFilter::Block(block));
        let not_found = |name: &str| {
            let request = InspectRequest { tool_name: name.to_string(), python: false };
            request.inspect(&catalog).unwrap_err().to_string()
        };
        assert_eq!(
            not_found("mcp__fs__read_fil"),
            "[Tool not found] 'mcp__fs__read_fil' is not a callable tool; did you mean 'mcp__fs__read_file' or \
             'mcp__fs__read_text_file'?"
        );
        assert_eq!(
            not_found("mcp__fs__write_file"),
            "[Tool not found] 'mcp__fs__write_file' is not callable: it is blocked by tools.block"
        );
        assert_eq!(
            not_found("mcp__git__log"),
            "[Tool not found] 'mcp__git__log' is not a callable tool; list_callable_tools gives the exact names"
        );
    }

    #[test]
    fn a_search_that_matches_nothing_says_so_and_how_many_tools_there_are() {
        use crate::config::ToolFilter;
        use crate::registry::ToolEntry;
        use std::sync::Arc;
        let tool = |name: &str| {
            let tool = json!({"name": name, "description": "Reads a file.", "inputSchema": {"type": "object"}});
            Arc::new(ToolEntry::new("fs", serde_json::from_value(tool).unwrap()))
        };
        let catalog = Catalog::build(["read_file", "stat"].map(tool), &ToolFilter::All);
        let search = |query: &str, signatures: bool| {
            let request = ListRequest { query: Some(query.to_string()), signatures, limit: None };
            let listing = request.list(&catalog);
            let note = listing.no_match_note(&request, &catalog);
            (listing, note)
        };
        let note = "no tool matches 'weather now' (2 tools; list_callable_tools() lists them all)";
        assert_eq!(search("weather\nnow", false), (Listing::Names(vec![]), Some(note.to_string())));
        assert_eq!(search("weather\nnow", true), (Listing::Signatures(format!("# {note}")), None));
        assert_eq!(search("read", false).1, None);
        let everything = ListRequest::default();
        assert_eq!(everything.list(&catalog).no_match_note(&everything, &catalog), None);
        let one = Catalog::build(["stat"].map(tool), &ToolFilter::All);
        let request = ListRequest { query: Some("x".to_string()), signatures: false, limit: None };
        assert_eq!(
            request.list(&one).no_match_note(&request, &one).unwrap(),
            "no tool matches 'x' (1 tool; list_callable_tools() lists them all)"
        );
    }

    #[test]
    fn no_servers_names_the_file_or_where_one_was_looked_for() {
        let file = ConfigSource::File("/etc/ptc/config.yaml".into());
        assert_eq!(no_servers(&file), "no servers configured in /etc/ptc/config.yaml");
        let looked_at = std::env::current_dir().unwrap().join("config.yaml");
        assert_eq!(
            no_servers(&ConfigSource::Defaults),
            format!(
                "no servers configured (no config file found at {}; name one with --config PATH or \
                 $PTC_MCP_CONFIG)",
                looked_at.display()
            )
        );
    }
}
