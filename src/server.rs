//! The MCP server clients talk to: three tools, `list_callable_tools`, `inspect_tool` and
//! `execute_program`, with descriptions written for a model.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock, GetTaskParams,
    GetTaskResult, Implementation, InitializeRequestParams, InitializeResult, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, TASKS_EXTENSION_ID, Tool, ToolAnnotations,
    UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};

use crate::config::{ConfigSource, ExecutionConfig, TraceMode};
use crate::discovery::{
    EXECUTE_ARGUMENTS, InspectRequest, Inspection, ListRequest, Listing, RequestError, check_names, no_servers,
};
use crate::engine::{Caller, Engine, Outcome, RunOptions, RunReport, SessionKey};
use crate::input_required::{self, Parked, Resume};
use crate::owner::Owner;
use crate::progress::{Feed, Reporter};
use crate::registry::{FIRST_CONNECT_WAIT, Registry};
use crate::tasks::{self, Tasks};

pub const LIST_TOOL: &str = "list_callable_tools";
pub const INSPECT_TOOL: &str = "inspect_tool";
pub const EXECUTE_TOOL: &str = "execute_program";

pub struct PtcServer {
    registry: Arc<Registry>,
    engine: Arc<Engine>,
    tools: Vec<Tool>,
    held: Held,
    /// Where the config came from, for a listing without a config file.
    source: Arc<ConfigSource>,
}

/// What outlives the request that started it, for every session and request of one server.
#[derive(Clone)]
pub struct Held {
    /// Runs of 2026-07-28 clients waiting for an approval between requests.
    parked: Arc<Parked>,
    /// Programs run as tasks.
    tasks: Arc<Tasks>,
}

impl Held {
    pub fn new(engine: &Engine) -> Self {
        Held { parked: Arc::default(), tasks: Arc::new(Tasks::new(engine)) }
    }
}

impl PtcServer {
    pub fn new(registry: Arc<Registry>, engine: Arc<Engine>, source: Arc<ConfigSource>) -> Self {
        let tools = tool_definitions(engine.settings());
        let held = Held::new(&engine);
        PtcServer { registry, engine, tools, held, source }
    }

    /// Shares what outlives requests with other instances (over HTTP, each session and each stateless request
    /// has its own instance).
    pub fn sharing(mut self, held: Held) -> Self {
        self.held = held;
        self
    }

    async fn list_callable_tools(&self, arguments: &JsonObject) -> CallToolResult {
        let request = match ListRequest::parse(arguments) {
            Ok(request) => request,
            Err(error) => return refused(&error),
        };
        self.registry.wait_for_first_attempts(FIRST_CONNECT_WAIT).await;
        let catalog = self.registry.catalog();
        let listing = request.list(&catalog);
        let no_match = listing.no_match_note(&request, &catalog);
        let listing = match listing {
            Listing::Names(names) => serde_json::to_string(&names).expect("names serialise"),
            Listing::Signatures(text) => text,
        };
        let mut content = vec![ContentBlock::text(listing)];
        content.extend(no_match.map(ContentBlock::text));
        // An empty listing says why when no config file was found (a config without servers is a choice).
        if *self.source == ConfigSource::Defaults && self.registry.statuses().is_empty() {
            content.push(ContentBlock::text(no_servers(&self.source)));
        }
        let mut problems = self.registry.unavailable();
        problems.extend(catalog.collisions.iter().cloned());
        if !problems.is_empty() {
            content.push(ContentBlock::text(format!(
                "Some tools are missing:\n- {}\nTheir tools come back when the server reconnects.",
                problems.join("\n- ")
            )));
        }
        content.extend(catalog.task_only_note().map(ContentBlock::text));
        CallToolResult::success(content)
    }

    async fn inspect_tool(&self, arguments: &JsonObject) -> CallToolResult {
        let request = match InspectRequest::parse(arguments) {
            Ok(request) => request,
            Err(error) => return refused(&error),
        };
        self.registry.wait_for_first_attempts(FIRST_CONNECT_WAIT).await;
        match request.inspect(&self.registry.catalog()) {
            Ok(Inspection::Json(inspection)) => CallToolResult::success(vec![ContentBlock::text(
                serde_json::to_string_pretty(&inspection).expect("inspections serialise"),
            )]),
            Ok(Inspection::Python(signature)) => CallToolResult::success(vec![ContentBlock::text(signature)]),
            Err(not_found) => refused(&not_found),
        }
    }

    async fn execute_program(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let arguments = request.arguments.as_ref();
        if let Err(unexpected) = arguments.map_or(Ok(()), |a| check_names(EXECUTE_TOOL, a, EXECUTE_ARGUMENTS)) {
            return refused(&unexpected).into();
        }
        let Some(Value::String(code)) = arguments.and_then(|arguments| arguments.get("code")) else {
            let what = "the Python program to run, as a string";
            return refused(&RequestError::Missing { tool: EXECUTE_TOOL, argument: "code", what }).into();
        };
        let named_session = match named_session(arguments, context, self.engine.settings()) {
            Ok(named_session) => named_session,
            Err(why) => return CallToolResult::error(vec![ContentBlock::text(why)]).into(),
        };
        let trace = self.engine.settings().trace;
        if tasks::applies(context, self.engine.settings()) {
            let render = move |report: &RunReport| execute_result(report, trace);
            let (owner, session) = (Owner::of(context), session_of(context));
            return match self.held.tasks.start(&self.engine, code, owner, session, named_session, render) {
                Ok(task) => CallToolResponse::Task(task),
                Err(refused) => execute_result(&RunReport::failed(Outcome::Error, refused.to_string()), trace).into(),
            };
        }
        if input_required::applies(context, &self.engine) {
            let resume = Resume {
                code,
                named_session,
                request_state: request.request_state,
                input_responses: request.input_responses,
            };
            let render = |report: &RunReport| execute_result(report, trace).into();
            return match self.held.parked.execute(&self.engine, resume, session_of(context), context, render).await {
                Ok(response) => response,
                Err(why) => CallToolResult::error(vec![ContentBlock::text(why.to_string())]).into(),
            };
        }
        let (feed, reporter) = Reporter::start(context).unzip();
        let (progress, printed) = feed.map(|Feed { progress, printed }| (progress, printed)).unzip();
        let caller = Caller {
            session: session_of(context),
            cancel: context.ct.clone(),
            progress,
            approver: Some(crate::elicit::approver_for(context)),
            named_session,
        };
        let options = RunOptions { printed, ..RunOptions::default() };
        let report = self.engine.execute_with(code, caller, options).await;
        if let Some(reporter) = reporter {
            reporter.finish().await;
        }
        execute_result(&report, trace).into()
    }
}

/// The session `execute_program` was asked to keep its interpreter in, if any. A session belongs to the client:
/// its owner (over HTTP, its credential's digest) and, over HTTP, the MCP session it came through (2026-07-28
/// clients have none: theirs follow the credential).
fn named_session(
    arguments: Option<&JsonObject>,
    context: &RequestContext<RoleServer>,
    settings: &ExecutionConfig,
) -> Result<Option<SessionKey>, String> {
    let name = match arguments.and_then(|arguments| arguments.get("session")) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(name)) => name,
        Some(_) => return Err("execute_program: session must be a string (a name of your choice)".to_string()),
    };
    if settings.sessions.max == 0 {
        return Err(
            "execute_program: sessions are off here (execution.sessions.max is 0); run without session".to_string()
        );
    }
    let owner = Owner::of(context);
    let owner = match context.extensions.get::<HttpSession>() {
        Some(HttpSession(id)) => format!("{}/{id}", owner.as_str()),
        None => owner.as_str().to_string(),
    };
    SessionKey::new(owner, name).map(Some).map_err(|bad| bad.to_string())
}

/// A tool's answer to a request it cannot serve.
fn refused(why: &RequestError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(why.to_string())])
}

/// The `execute_program` result: the text, and the structured content.
fn execute_result(report: &RunReport, trace: TraceMode) -> CallToolResult {
    // What show() and attach() attached follows the text.
    let mut content = vec![ContentBlock::text(report.text(trace))];
    content.extend(report.attachments.iter().cloned());
    let mut result = if report.ok() { CallToolResult::success(content) } else { CallToolResult::error(content) };
    result.structured_content = Some(report.structured());
    result
}

impl ServerHandler for PtcServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools();
        let capabilities =
            if self.engine.settings().max_tasks_per_client > 0 { capabilities.enable_tasks() } else { capabilities };
        ServerConfig::new(capabilities.build())
            .with_server_info(Implementation::new("ptc-mcp", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Programmatic tool calling: write one Python program that calls the downstream MCP tools as async \
                 functions and prints only what you need. Find tools with list_callable_tools (query=\"what you \
                 need\", detail=\"signatures\" shows their arguments), then run the program with execute_program.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name == EXECUTE_TOOL {
            return Ok(self.execute_program(request, &context).await);
        }
        let arguments = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            LIST_TOOL => self.list_callable_tools(&arguments).await,
            INSPECT_TOOL => self.inspect_tool(&arguments).await,
            other => {
                return Err(McpError::invalid_params(
                    format!("unknown tool '{other}'; this server has {LIST_TOOL}, {INSPECT_TOOL} and {EXECUTE_TOOL}"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    async fn on_initialized(&self, _context: NotificationContext<RoleServer>) {}

    /// The handshake of 2025-era clients, answered as before tasks: the extension is for 2026-07-28 clients.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let mut info = self.negotiate_initialize(&request)?;
        if let Some(extensions) = info.capabilities.extensions.as_mut() {
            extensions.remove(TASKS_EXTENSION_ID);
            if extensions.is_empty() {
                info.capabilities.extensions = None;
            }
        }
        Ok(info)
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.held.tasks.get(&Owner::of(&context), &request.task_id).map_err(no_such_task)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let owner = Owner::of(&context);
        self.held.tasks.update(&owner, &request.task_id, &request.input_responses).map_err(no_such_task)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.held.tasks.cancel(&Owner::of(&context), &request.task_id).map_err(no_such_task)
    }
}

/// The extension's answer for a task id that names no task of the client: invalid params.
fn no_such_task(why: tasks::NoSuchTask) -> McpError {
    McpError::invalid_params(why.to_string(), None)
}

/// The MCP session an HTTP request came through, as the HTTP layer that issued it tells (never a header the
/// client chose).
#[derive(Debug, Clone)]
pub struct HttpSession(pub Arc<str>);

/// Which client a request came from, for the run's record: the HTTP session it came through (`http` for a
/// request outside any session: 2026-07-28 clients have none), or `stdio`.
fn session_of(context: &RequestContext<RoleServer>) -> String {
    if let Some(HttpSession(id)) = context.extensions.get::<HttpSession>() {
        return id.to_string();
    }
    let over_http = context.extensions.get::<http::request::Parts>().is_some();
    if over_http { "http" } else { "stdio" }.to_string()
}

fn tool_definitions(settings: &ExecutionConfig) -> Vec<Tool> {
    let read_only = ToolAnnotations::new().read_only(true).destructive(false).open_world(false);
    let mut execute_arguments = json!({"code": {"type": "string", "description": "The Python program to run."}});
    if settings.sessions.max > 0 {
        execute_arguments["session"] = json!({"type": "string"});
    }
    vec![
        Tool::new(
            LIST_TOOL,
            LIST_DESCRIPTION,
            object_schema(json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What the tool should do, e.g. \"quarterly revenue\""},
                    "detail": {"enum": ["names", "signatures"], "default": "names"},
                    "limit": {"type": "integer", "minimum": 1}
                }
            })),
        )
        .with_annotations(read_only.clone()),
        Tool::new(
            INSPECT_TOOL,
            INSPECT_DESCRIPTION,
            object_schema(json!({
                "type": "object",
                "properties": {
                    "tool_name": {"type": "string", "description": "A name from list_callable_tools"},
                    "format": {"enum": ["json", "python"], "default": "json"}
                },
                "required": ["tool_name"]
            })),
        )
        .with_annotations(read_only),
        Tool::new(
            EXECUTE_TOOL,
            execute_description(settings),
            object_schema(json!({
                "type": "object",
                "properties": execute_arguments,
                "required": ["code"]
            })),
        )
        .with_raw_output_schema(Arc::new(object_schema(json!({
            "type": "object",
            "properties": {
                "ok": {"type": "boolean"},
                "output": {"type": "string", "description": "What the program printed."},
                "result": {"description": "The last value passed to emit(), or null."},
                "error": {"type": ["string", "null"]},
                "tool_calls": {"type": "array", "items": {"type": "object"}}
            },
            "required": ["ok", "output", "result", "error", "tool_calls"]
        })))),
    ]
}

fn object_schema(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => unreachable!("schemas are written as objects"),
    }
}

const LIST_DESCRIPTION: &str = "List the downstream MCP tools that execute_program can call, as a JSON array of \
names like mcp__<server>__<tool>. query ranks them by relevance (best first); detail=\"signatures\" shows their \
Python signatures (arguments, types, descriptions) instead. If a server is unavailable, a second block names it \
and why.";

const INSPECT_DESCRIPTION: &str = "Show one callable tool's description, input schema (its keyword arguments) and \
output schema, or with format=\"python\" its Python signature.";

fn execute_description(s: &ExecutionConfig) -> String {
    let precheck = if s.precheck {
        "\n- Tool calls are checked before anything runs (names, keywords, literal values, a missing await)."
    } else {
        ""
    };
    let session =
        if s.sessions.max > 0 { " unless session=\"name\" keeps it and the globals for the next run" } else { "" };
    format!(
        "Run a Python program in which every downstream MCP tool is an async function. Prefer it over calling \
tools one at a time when a task needs several calls, loops, or filtering of large results: intermediate results \
stay in the program and only what it prints comes back.
- Call tools (mcp__<server>__<tool>, see list_callable_tools) with keyword arguments and await them: \
rows = await mcp__db__query(sql=\"...\"). Top-level await works; asyncio.gather runs calls concurrently.{precheck}
- Results are parsed JSON; extra text or non-text content is kept under \"_notes\"; \
show(result) attaches its images and audio, attach(path) a file of the working directory.
- A failing call raises ToolError; catch it to carry on.
- Only printed output comes back (at most {max_output} bytes); emit(value) also returns one JSON value. \
progress(message, fraction=None) tells the client how far the run is. list_callable_tools(), inspect_tool() \
and server_status() work inside programs too.
- Limits: {timeout}s, {calls} tool calls, {concurrent} at a time. Standard library only; empty environment; \
the working directory is a scratch directory deleted afterwards{session}.",
        max_output = s.max_output_bytes,
        timeout = s.timeout_seconds,
        calls = s.max_tool_calls,
        concurrent = s.max_concurrent_calls,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::{INSPECT_ARGUMENTS, LIST_ARGUMENTS};

    /// The definitions are in the client's context on every turn: they must stay small.
    #[test]
    fn the_three_definitions_stay_under_3000_bytes() {
        let tools = tool_definitions(&ExecutionConfig::default());
        let size = serde_json::to_vec(&tools).unwrap().len();
        assert!(size < 3000, "the tools/list entries take {size} bytes");
        let without_precheck = tool_definitions(&ExecutionConfig { precheck: false, ..ExecutionConfig::default() });
        assert!(serde_json::to_vec(&without_precheck).unwrap().len() < size);
    }

    /// Each tool takes exactly the arguments its schema names (and refuses others, naming those).
    #[test]
    fn every_input_schema_names_the_arguments_the_tool_takes() {
        let takes = [LIST_ARGUMENTS, INSPECT_ARGUMENTS, EXECUTE_ARGUMENTS];
        for (tool, takes) in tool_definitions(&ExecutionConfig::default()).iter().zip(takes) {
            let schema = &tool.input_schema;
            let properties: Vec<&str> = schema["properties"].as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(properties, takes, "{}", tool.name);
        }
    }

    #[test]
    fn the_definitions_name_every_new_argument() {
        let tools = tool_definitions(&ExecutionConfig::default());
        let text = serde_json::to_string(&tools).unwrap();
        for needle in [
            "\"query\"",
            "\"detail\"",
            "\"limit\"",
            "\"format\"",
            "signatures",
            "show(result)",
            "attach(path)",
            "checked before",
            "progress(",
        ] {
            assert!(text.contains(needle), "{needle} missing");
        }
    }
}
