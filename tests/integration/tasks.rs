//! Programs as tasks (the 2026-07-28 `io.modelcontextprotocol/tasks` extension), driven with raw JSON-RPC
//! over stdio and HTTP (the official Python SDK has no tasks client): a client that declares the extension
//! gets a task at once, polls its status and output so far, cancels it (its runner killed, its calls
//! cancelled) or collects exactly the result a direct call answers — over HTTP on a new connection for every
//! request. Approvals inside a task go through `input_required` and `tasks/update`; a task may outlast
//! `timeout_seconds` (its own runner, with a CPU-time limit to match); finished tasks are kept for their TTL
//! and bounded per client; without the extension nothing changes. Each step is logged to stderr with its
//! time, as a transcript.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::common::*;
use crate::http::{HttpPtc, TOKEN, token_keys};

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// How a test client reaches the server.
enum Wire {
    Stdio {
        _child: Child,
        stdin: ChildStdin,
        lines: Lines<BufReader<ChildStdout>>,
        _dir: tempfile::TempDir,
    },
    /// `serve --http` on `port`: the one `server` started, or a proxy in front of replicas.
    Http {
        port: u16,
        server: Option<HttpPtc>,
    },
}

/// A 2026-07-28 client speaking raw JSON-RPC, declaring the tasks extension or not.
pub struct Client {
    wire: Wire,
    pub tasks: bool,
    next_id: u64,
    started: Instant,
}

impl Client {
    async fn stdio(config_text: &str, tmp: Option<&std::path::Path>) -> Client {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, config_text).unwrap();
        let mut command = Command::new(binary());
        command.arg("--config").arg(&path).current_dir(dir.path()).env("RUST_LOG", "warn");
        if let Some(tmp) = tmp {
            command.env("TMPDIR", tmp);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        let wire = Wire::Stdio { _child: child, stdin, lines: BufReader::new(stdout).lines(), _dir: dir };
        Client { wire, tasks: true, next_id: 0, started: Instant::now() }
    }

    async fn http(config_text: &str) -> Client {
        let ptc = HttpPtc::start(config_text, &token_keys()).await;
        Client {
            wire: Wire::Http { port: ptc.port(), server: Some(ptc) },
            tasks: true,
            next_id: 0,
            started: Instant::now(),
        }
    }

    /// A client of the `serve --http` (with the test token) or proxy on `port`.
    pub fn at_port(port: u16) -> Client {
        Client { wire: Wire::Http { port, server: None }, tasks: true, next_id: 0, started: Instant::now() }
    }

    fn name(&self) -> &'static str {
        match self.wire {
            Wire::Stdio { .. } => "stdio",
            Wire::Http { .. } => "http",
        }
    }

    /// Sends one request (with the per-request `_meta` of a 2026-07-28 client) and returns the whole response.
    pub async fn request(&mut self, method: &str, mut params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let capabilities = if self.tasks { json!({"extensions": {TASKS: {}}}) } else { json!({}) };
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw-tasks", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        });
        let name = params.get("name").or_else(|| params.get("taskId")).and_then(Value::as_str).map(str::to_string);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        match &mut self.wire {
            Wire::Stdio { stdin, lines, .. } => {
                stdin.write_all(format!("{message}\n").as_bytes()).await.unwrap();
                loop {
                    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
                        .await
                        .expect("the server answers within a minute")
                        .unwrap()
                        .expect("the server is still there");
                    let answer: Value = serde_json::from_str(&line).unwrap();
                    if answer["id"] == json!(id) {
                        return answer;
                    }
                }
            }
            Wire::Http { port, .. } => {
                let bearer = format!("Bearer {TOKEN}");
                let mut headers = vec![
                    ("Authorization", bearer.as_str()),
                    ("MCP-Protocol-Version", "2026-07-28"),
                    ("Mcp-Method", method),
                ];
                if let Some(name) = &name {
                    headers.push(("Mcp-Name", name));
                }
                // A new connection each time: the client reconnects between any two requests.
                let (status, response) = crate::http::raw(*port, "/mcp", &headers, &message).await;
                assert_eq!(status, 200, "{response}");
                json_rpc_answer(&response)
            }
        }
    }

    fn note(&self, what: &str) {
        eprintln!("[{} {:6.2}s] {what}", self.name(), self.started.elapsed().as_secs_f64());
    }

    /// `execute_program`: the result (a task, or a tool result).
    pub async fn execute(&mut self, code: &str) -> Value {
        self.execute_with(json!({"code": code})).await
    }

    /// `execute_program` with these arguments.
    pub async fn execute_with(&mut self, arguments: Value) -> Value {
        let answer = self.request("tools/call", json!({"name": "execute_program", "arguments": arguments})).await;
        let result = answer["result"].clone();
        assert!(result.is_object(), "{answer}");
        match result["resultType"].as_str() {
            Some("task") => self.note(&format!("tools/call -> task {} {}", short(&result["taskId"]), result["status"])),
            _ => self.note(&format!("tools/call -> result isError={}", result["isError"])),
        }
        result
    }

    /// Starts `code` as a task; its id, or `None` (skipped) when the sandbox cannot run programs.
    pub async fn start(&mut self, code: &str) -> String {
        self.start_with(json!({"code": code})).await
    }

    /// Starts `execute_program` with these arguments as a task; its id.
    pub async fn start_with(&mut self, arguments: Value) -> String {
        let task = self.execute_with(arguments).await;
        assert_eq!(task["resultType"], "task", "{task}");
        assert_eq!(task["status"], "working", "{task}");
        for key in ["createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"] {
            assert!(!task[key].is_null(), "{key}: {task}");
        }
        task["taskId"].as_str().unwrap().to_string()
    }

    pub async fn get(&mut self, task: &str) -> Value {
        let answer = self.request("tasks/get", json!({"taskId": task})).await;
        let got = answer["result"].clone();
        assert_eq!(got["resultType"], "complete", "{answer}");
        assert_eq!(got["taskId"], task, "{answer}");
        got
    }

    pub async fn cancel(&mut self, task: &str) {
        let answer = self.request("tasks/cancel", json!({"taskId": task})).await;
        assert_eq!(answer["result"], json!({"resultType": "complete"}), "{answer}");
        self.note(&format!("tasks/cancel {} -> ack", short(&json!(task))));
    }

    async fn update(&mut self, task: &str, responses: Value) {
        let answer = self.request("tasks/update", json!({"taskId": task, "inputResponses": responses})).await;
        assert_eq!(answer["result"], json!({"resultType": "complete"}), "{answer}");
        self.note(&format!("tasks/update {} {responses} -> ack", short(&json!(task))));
    }

    /// Polls the task until `check` holds (then its state), for at most `limit`; fails the test past it.
    async fn poll_until(&mut self, task: &str, limit: Duration, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + limit;
        let mut last_note = String::new();
        loop {
            let got = self.get(task).await;
            let note = format!("tasks/get -> {} {:?}", got["status"], got["statusMessage"].as_str().unwrap_or(""));
            if note != last_note {
                self.note(&note);
                last_note = note;
            }
            if check(&got) {
                return got;
            }
            assert!(Instant::now() < deadline, "the task never got there: {got}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Polls until the task is over; its last state.
    pub async fn finished(&mut self, task: &str) -> Value {
        self.poll_until(task, Duration::from_secs(120), |got| {
            ["completed", "cancelled", "failed"].contains(&got["status"].as_str().unwrap_or(""))
        })
        .await
    }
}

/// The JSON-RPC message of a raw HTTP response: a JSON body, or the event of an SSE one that answers.
fn json_rpc_answer(response: &str) -> Value {
    let (head, body) = response.split_once("\r\n\r\n").expect("a response with a body");
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { unchunk(body) } else { body.into() };
    if head.to_ascii_lowercase().contains("text/event-stream") {
        let answers = body.lines().filter_map(|line| line.strip_prefix("data:")).map(str::trim);
        let answers: Vec<Value> = answers.filter_map(|data| serde_json::from_str(data).ok()).collect();
        return answers.into_iter().rfind(|message| message.get("id").is_some()).expect("an answer in the stream");
    }
    serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{e}: {response}"))
}

fn unchunk(body: &str) -> String {
    let mut rest = body;
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

/// The first characters of a task id, for the transcript.
fn short(id: &Value) -> String {
    id.as_str().unwrap_or_default().chars().take(8).collect::<String>() + "…"
}

/// A config for tasks, with the mock downstream and extra `execution` keys.
fn task_config(execution: &str) -> String {
    config(&[mock_server("mock", &[])], execution)
}

/// Whether the sandbox cannot run programs here (the test is then skipped, or fails where it is required).
pub fn unusable(got: &Value) -> bool {
    let text = got.to_string();
    text.contains("SandboxError") && sandbox_unusable(&text).is_none()
}

/// The text of a tool result, without the time its calls took.
fn result_text(result: &Value) -> String {
    without_call_time(result["content"][0]["text"].as_str().unwrap_or_default())
}

/// Prints, calls a tool that takes a while, reports progress and emits: three steps of about 0.4 s.
const STEPS: &str = "import time\nfor step in range(3):\n    print('step', step)\n    progress(f'step {step}', (step + 1) / 3)\n    \
                     await mcp__mock__sleep(seconds=0.4)\nemit({'steps': 3})";

async fn a_task_shows_its_output_as_it_goes_and_ends_with_exactly_the_direct_result(mut client: Client) {
    let task = client.start(STEPS).await;
    let seen = client
        .poll_until(&task, Duration::from_secs(60), |got| {
            let message = got["statusMessage"].as_str().unwrap_or_default();
            got["status"] != "working" || message.contains("step 1")
        })
        .await;
    if unusable(&seen) {
        return;
    }
    if seen["status"] == "working" {
        let message = seen["statusMessage"].as_str().unwrap();
        assert!(message.starts_with("running for "), "{message}");
        assert!(message.contains("output so far:\nstep 0\nstep 1"), "{message}");
        assert!(message.contains("progress: step 1 (67%)") || message.contains("progress: step 2"), "{message}");
    }
    let done = client.finished(&task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(done["statusMessage"].as_str().unwrap().starts_with("finished after "), "{done}");
    let result = &done["result"];
    assert_eq!(result["isError"], false, "{done}");
    assert_eq!(result["structuredContent"]["result"], json!({"steps": 3}));
    // The same program answered directly (a client without the extension): the same result.
    client.tasks = false;
    let direct = client.execute(STEPS).await;
    assert_eq!(direct.get("taskId"), None, "{direct}");
    assert_eq!(result_text(result), result_text(&direct));
    let (mut with_task, mut without) = (result["structuredContent"].clone(), direct["structuredContent"].clone());
    for calls in [&mut with_task["tool_calls"], &mut without["tool_calls"]] {
        for call in calls.as_array_mut().unwrap() {
            call.as_object_mut().unwrap().retain(|key, _| key == "tool" || key == "ok");
        }
    }
    assert_eq!(with_task, without);
    assert_eq!(result["content"].as_array().unwrap().len(), direct["content"].as_array().unwrap().len());
}

#[apply(integration_test!)]
async fn over_stdio_a_task_shows_its_output_as_it_goes_and_ends_with_exactly_the_direct_result() {
    let client = Client::stdio(&task_config(""), None).await;
    a_task_shows_its_output_as_it_goes_and_ends_with_exactly_the_direct_result(client).await;
}

#[apply(integration_test!)]
async fn over_http_a_task_is_collected_on_new_connections_with_exactly_the_direct_result() {
    let client = Client::http(&task_config("")).await;
    a_task_shows_its_output_as_it_goes_and_ends_with_exactly_the_direct_result(client).await;
}

/// Prints that it started, then waits on a call that takes a minute.
const WAITS_ON_A_CALL: &str = "print('started', flush=True)\nawait mcp__mock__sleep(seconds=60)\nprint('never')";

async fn cancelling_a_task_kills_its_runner_cancels_its_calls_and_says_so(mut client: Client, tmp: &std::path::Path) {
    let task = client.start(WAITS_ON_A_CALL).await;
    let seen = client
        .poll_until(&task, Duration::from_secs(60), |got| {
            got["status"] != "working" || got["statusMessage"].as_str().unwrap_or_default().contains("started")
        })
        .await;
    if unusable(&seen) {
        return;
    }
    assert_eq!(seen["status"], "working", "{seen}");
    let host_backend = ["none", "landlock"].contains(&sandbox_under_test().as_str());
    if host_backend {
        assert_eq!(runners_under(tmp).len(), 1, "the task's runner runs");
    }
    let asked = Instant::now();
    client.cancel(&task).await;
    let done = client.finished(&task).await;
    assert!(asked.elapsed() < Duration::from_secs(30), "the cancel took {:?}", asked.elapsed());
    assert_eq!(done["status"], "cancelled", "{done}");
    assert_eq!(done.get("result"), None, "{done}");
    let message = done["statusMessage"].as_str().unwrap();
    assert!(message.starts_with("cancelled after "), "{message}");
    assert!(
        message.contains(
            "ExecutionError: the client cancelled the run; 1 tool call(s) still running were cancelled\noutput so far:\n\
             started"
        ),
        "{message}"
    );
    if host_backend {
        let gone = eventually(Duration::from_secs(30), || runners_under(tmp).is_empty()).await;
        assert!(gone, "the runner outlived the cancel: {:?}", runners_under(tmp));
    }
    // Cancelling again, or a finished task, changes nothing.
    client.cancel(&task).await;
    assert_eq!(client.get(&task).await["status"], "cancelled");
}

#[apply(integration_test!)]
async fn over_stdio_cancelling_a_task_kills_its_runner_cancels_its_calls_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    // No pool: the one runner under the temp directory is the task's.
    let client = Client::stdio(&task_config("  pool_size: 0\n"), Some(tmp.path())).await;
    cancelling_a_task_kills_its_runner_cancels_its_calls_and_says_so(client, tmp.path()).await;
}

#[apply(integration_test!)]
async fn over_http_cancelling_a_task_kills_its_runner_cancels_its_calls_and_says_so() {
    let client = Client::http(&task_config("  pool_size: 0\n")).await;
    let Wire::Http { server: Some(ptc), .. } = &client.wire else { unreachable!() };
    let tmp = ptc.tmp();
    cancelling_a_task_kills_its_runner_cancels_its_calls_and_says_so(client, &tmp).await;
}

#[apply(integration_test!)]
async fn a_task_outlasts_timeout_seconds_and_its_cpu_time_within_task_timeout_seconds() {
    // Three seconds of CPU time: past the CPU-time limit a runner of the pool has with a 1 s time limit (2 s).
    let burn = "import time\nwhile time.process_time() < 3:\n    pass\nprint('burnt', time.process_time() >= 3)";
    let tmp = tempfile::tempdir().unwrap();
    let keys = "  timeout_seconds: 1\n  task_timeout_seconds: 120\n  pool_size: 1\n";
    let mut client = Client::stdio(&task_config(keys), Some(tmp.path())).await;
    // The first task's runner is started for it; the second's comes from the pool of task runners, once it has
    // one ready beside the pool of other runs (seen under the temp directory with the host backends).
    for attempt in 1..=2 {
        if attempt == 2 && ["none", "landlock"].contains(&sandbox_under_test().as_str()) {
            let ready = eventually(Duration::from_secs(60), || runners_under(tmp.path()).len() == 2).await;
            assert!(ready, "a task runner is kept ready: {:?}", runners_under(tmp.path()));
        }
        let task = client.start(burn).await;
        let done = client.finished(&task).await;
        if unusable(&done) {
            return;
        }
        assert_eq!(done["status"], "completed", "attempt {attempt}: {done}");
        assert_eq!(result_text(&done["result"]), "[Script executed successfully]\nburnt True", "{done}");
    }
    client.tasks = false;
    let direct = client.execute(burn).await;
    assert!(result_text(&direct).contains("TimeoutError: Execution exceeded 1s limit"), "{direct}");
    assert!(result_text(&direct).contains("execution.timeout_seconds"), "{direct}");
}

#[apply(integration_test!)]
async fn a_task_ends_at_task_timeout_seconds_saying_which_limit_it_hit() {
    // Long enough for the runner to start on a busy machine, so that the program is what the limit stops.
    let mut client = Client::stdio(&task_config("  task_timeout_seconds: 8\n"), None).await;
    let task = client.start("import time\nprint('sleeping')\ntime.sleep(60)").await;
    let done = client.finished(&task).await;
    if unusable(&done) {
        return;
    }
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");
    let text = result_text(&done["result"]);
    assert!(
        text.starts_with(
            "[Script execution failed]\nTimeoutError: Execution exceeded 8s limit. The limit is \
             execution.task_timeout_seconds in ptc-mcp's config"
        ),
        "{text}"
    );
    assert!(text.ends_with("--- output before the error ---\nsleeping"), "{text}");
}

#[apply(integration_test!)]
async fn an_approval_inside_a_task_is_asked_through_input_required_and_answered_by_tasks_update() {
    let confirm = "tools:\n  confirm: [\"mcp__mock__add\"]\n  confirm_timeout_seconds: 60\n";
    let mut client = Client::http(&format!("{}{confirm}", task_config(""))).await;
    let code = "for a in (1, 2):\n    try:\n        print('sum', (await mcp__mock__add(a=a, b=2))['sum'])\n    except \
                ToolError as e:\n        print('ToolError:', e)";
    let task = client.start(code).await;
    for (key, answer, then) in [("approval-1", "accept", "sum 3"), ("approval-2", "decline", "ToolError: declined")] {
        let asking =
            client.poll_until(&task, Duration::from_secs(60), |got| got["status"] != "working" || unusable(got)).await;
        if unusable(&asking) {
            return;
        }
        assert_eq!(asking["status"], "input_required", "{asking}");
        let requests = asking["inputRequests"].as_object().unwrap();
        assert_eq!(requests.keys().collect::<Vec<_>>(), [key], "each question has a key of its own: {asking}");
        assert_eq!(requests[key]["method"], "elicitation/create", "{asking}");
        let question = requests[key]["params"]["message"].as_str().unwrap();
        assert!(question.contains("A program wants to call mcp__mock__add (line 3 of the program)"), "{question}");
        assert!(
            asking["statusMessage"].as_str().unwrap().contains("waiting for the user's approval of mcp__mock__add")
        );
        // An answer to a key not asked is ignored.
        client.update(&task, json!({"approval-9": {"action": "accept"}})).await;
        assert_eq!(client.get(&task).await["status"], "input_required");
        client.update(&task, json!({key: {"action": answer}})).await;
        client
            .poll_until(&task, Duration::from_secs(60), |got| {
                got["statusMessage"].as_str().unwrap_or_default().contains(then) || got["status"] == "completed"
            })
            .await;
    }
    let done = client.finished(&task).await;
    let text = result_text(&done["result"]);
    let expected = "[Script executed successfully]\nsum 3\nToolError: declined by the user\n[tool calls: 2, 1 failed; Ts]\n  \
                    failed: mcp__mock__add {\"a\":2,\"b\":2} (caught): printed above";
    assert_eq!(text, expected, "{done}");
}

#[apply(integration_test!)]
async fn finished_tasks_are_kept_for_their_ttl_and_a_client_has_at_most_max_tasks_per_client() {
    let keys = "  max_tasks_per_client: 2\n  task_ttl_seconds: 3\n";
    let mut client = Client::http(&task_config(keys)).await;
    let first = client.start("import time\ntime.sleep(60)").await;
    let second = client.start("print('quick')").await;
    let quick = client.finished(&second).await;
    if unusable(&quick) {
        return;
    }
    // Two tasks kept: a third takes the finished one's place.
    let third = client.start("import time\ntime.sleep(60)").await;
    let gone = client.request("tasks/get", json!({"taskId": second})).await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    // Both running: a fourth is refused, saying why.
    let refused = client.execute("print('fourth')").await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(
        result_text(&refused),
        "[Script execution failed]\nExecutionError: this client has 2 tasks running (execution.max_tasks_per_client \
         is 2); wait for one to finish or cancel one with tasks/cancel"
    );
    client.cancel(&first).await;
    assert_eq!(client.finished(&first).await["status"], "cancelled");
    let kept_until = Instant::now() + Duration::from_secs(3);
    // Forgotten once its TTL has passed, without any request to make it happen.
    tokio::time::sleep(kept_until.saturating_duration_since(Instant::now()) + Duration::from_secs(2)).await;
    let forgotten = client.request("tasks/get", json!({"taskId": first})).await;
    assert_eq!(forgotten["error"]["code"], -32602, "{forgotten}");
    assert!(forgotten["error"]["message"].as_str().unwrap().contains("tasks are kept 3s"), "{forgotten}");
    client.cancel(&third).await;
}

#[apply(integration_test!)]
async fn without_the_extension_nothing_changes_and_tasks_requests_are_refused() {
    let mut client = Client::stdio(&task_config(""), None).await;
    client.tasks = false;
    let direct = client.execute("print('direct')").await;
    if unusable(&direct) {
        return;
    }
    assert_eq!(direct["resultType"], "complete", "{direct}");
    assert_eq!(result_text(&direct), "[Script executed successfully]\ndirect");
    let refused = client.request("tasks/get", json!({"taskId": "0123456789abcdef0123456789abcdef"})).await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    // The extension is offered to 2026-07-28 clients, never in a 2025-era handshake's answer.
    let discovered = client.request("server/discover", json!({})).await;
    assert_eq!(discovered["result"]["capabilities"]["extensions"], json!({TASKS: {}}), "{discovered}");
    let Wire::Stdio { stdin, lines, .. } = &mut client.wire else { unreachable!() };
    let initialize = r#"{"jsonrpc":"2.0","id":99,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    stdin.write_all(format!("{initialize}\n").as_bytes()).await.unwrap();
    let answer: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(answer["result"]["capabilities"], json!({"tools": {}}), "{answer}");
    // And a server with tasks turned off answers a client that declares them directly.
    let mut off = Client::stdio(&task_config("  max_tasks_per_client: 0\n"), None).await;
    let answered = off.execute("print('direct')").await;
    assert_eq!(result_text(&answered), "[Script executed successfully]\ndirect", "{answered}");
}

#[apply(integration_test!)]
async fn a_task_runs_in_its_named_session_like_a_direct_run() {
    let mut client = Client::stdio(&task_config(""), None).await;
    let first = client.start_with(json!({"code": "x = 41", "session": "s"})).await;
    let done = client.finished(&first).await;
    if unusable(&done) {
        return;
    }
    assert_eq!(done["result"]["structuredContent"]["session"], json!({"name": "s", "new": true, "runs": 1}), "{done}");
    let second = client.start_with(json!({"code": "print(x + 1)", "session": "s"})).await;
    let done = client.finished(&second).await;
    let structured = &done["result"]["structuredContent"];
    assert_eq!(structured["output"], json!("42\n"), "{done}");
    assert_eq!(structured["session"], json!({"name": "s", "new": false, "runs": 2}));
    client.tasks = false;
    let direct = client.execute_with(json!({"code": "print(x)", "session": "s"})).await;
    assert_eq!(direct["structuredContent"]["output"], json!("41\n"), "a direct run finds the same session: {direct}");
}
