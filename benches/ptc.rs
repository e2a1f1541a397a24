//! Benchmarks of ptc-mcp against floors measured in the same run (`cargo bench --bench ptc`, or
//! `ci/bench.sh`). Each figure is reported beside its baseline and the ratio; each measured row is the median
//! of at least five runs; per-call figures stand against a raw direct call (JSON-RPC lines written straight
//! to the same downstream, no SDK) and an rmcp client's direct call. Nothing here fails on a slow machine. Runs once per sandbox backend that is available here (`PTC_BENCH_SANDBOXES`, default
//! `none,landlock`; `docker` uses the image from ci/docker-setup.sh, `docker:runsc` the same with the OCI runtime
//! `runsc`, gVisor), then compares each one's per-run start-up with `none`'s and each docker runtime's runs and
//! calls with the engine's default runtime's, and times the check before running (`execution.precheck`) on a 200-line program;
//! last, a soak: 10,000 runs with tool calls in one server (`PTC_BENCH_SOAK_RUNS`), its memory and open files
//! along the way. `PTC_BENCH_BINARY` measures another build of the server with the same rows.
//!
//! Then `import pandas` in a run with and without `execution.preload`, and what preloading adds to a runner's
//! start, per sandbox (the venv of `PTC_TEST_PACKAGES_PYTHON` from ci/test-deps.sh; under docker the image
//! `PTC_BENCH_DOCKER_PACKAGES_IMAGE`, default `ptc-mcp-runner:packages` from ci/docker-setup.sh).
//!
//! Then, per sandbox, a session's second `print(1)` against a fresh run's (same server, pool on), and the
//! memory (peak RSS) one idle session's interpreter holds against a bare interpreter's.
//!
//! Then, for `none` and `landlock`, a runner's start from the zygote against a fresh interpreter's (the backend
//! driven directly: spawn to `ready`), `print(1)` sent back to back 200 times on one connection with the
//! zygote and without, and 8 clients over `serve --http` running `print(1)` in a loop (runs/s, p95).
//!
//! Words after the command choose sections: `precheck`, `sandboxes`, `preload`, `sessions`, `zygote`, `soak`
//! (`ci/bench.sh soak` runs the soak alone); none runs them all.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// The server measured: this build's, or `PTC_BENCH_BINARY` (another build, e.g. the one before a change,
/// measured with the same rows).
fn binary() -> String {
    std::env::var("PTC_BENCH_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_ptc-mcp").to_string())
}

fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

struct Server {
    client: RunningService<RoleClient, ()>,
    child: Child,
    _dir: tempfile::TempDir,
}

fn mock_entry() -> String {
    format!(
        "  - name: mock\n    command: python3\n    args: [{}]\n",
        json!(repo("tests/servers/mock_server.py").display().to_string())
    )
}

/// A sandbox as `PTC_BENCH_SANDBOXES` names it, and the OCI runtime after a colon (`docker:runsc`).
fn kind_and_runtime(sandbox: &str) -> (&str, Option<&str>) {
    sandbox.split_once(':').map_or((sandbox, None), |(kind, runtime)| (kind, Some(runtime)))
}

fn docker_image() -> String {
    std::env::var("PTC_BENCH_DOCKER_IMAGE").unwrap_or_else(|_| "ptc-mcp-runner:local".to_string())
}

/// `execution` keys a sandbox needs here: for `docker`, `image` (the runner image ci/docker-setup.sh builds,
/// `PTC_BENCH_DOCKER_IMAGE`, default `ptc-mcp-runner:local`), and the runtime if one is named.
fn sandbox_keys(sandbox: &str, image: &str) -> String {
    match kind_and_runtime(sandbox) {
        ("docker", runtime) => {
            let runtime = runtime.map(|runtime| format!("    runtime: {runtime}\n")).unwrap_or_default();
            format!("  docker:\n    image: {image}\n{runtime}")
        }
        _ => String::new(),
    }
}

async fn start(sandbox: &str, execution: &str) -> (Server, Duration) {
    start_in(sandbox, execution, &docker_image()).await
}

/// [`start`], with `image` as the docker sandbox's.
async fn start_in(sandbox: &str, execution: &str, image: &str) -> (Server, Duration) {
    start_with(sandbox, &mock_entry(), execution, image).await
}

/// A server with these `servers` entries, and `image` as the docker sandbox's.
async fn start_with(sandbox: &str, servers: &str, execution: &str, image: &str) -> (Server, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let kind = kind_and_runtime(sandbox).0;
    let keys = sandbox_keys(sandbox, image);
    let text = format!("servers:\n{servers}execution:\n  sandbox: {kind}\n{keys}{execution}");
    std::fs::write(&config, text).unwrap();
    let started = Instant::now();
    let mut command = Command::new(binary());
    command.arg("--config").arg(&config).env("RUST_LOG", "error");
    let (client, child) = connect(command).await;
    let ready = started.elapsed();
    (Server { client, child, _dir: dir }, ready)
}

/// Starts an MCP server command and connects a client to its stdio.
async fn connect(mut command: Command) -> (RunningService<RoleClient, ()>, Child) {
    let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).kill_on_drop(true).spawn().unwrap();
    let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    (().serve(transport).await.unwrap(), child)
}

impl Server {
    /// Runs a program that must succeed; its structured result.
    async fn execute(&self, code: &str) -> Value {
        let result = self.call(code).await;
        assert_ne!(result.is_error, Some(true), "benchmark program failed: {result:?}");
        result.structured_content.unwrap()
    }

    async fn call(&self, code: &str) -> CallToolResult {
        self.call_with(json!({"code": code})).await
    }

    /// `execute_program` with these arguments.
    async fn call_with(&self, arguments: Value) -> CallToolResult {
        let params =
            CallToolRequestParams::new("execute_program").with_arguments(arguments.as_object().unwrap().clone());
        self.client.peer().call_tool(params).await.unwrap()
    }

    /// The CPU time the server process and its main thread (the runtime's only thread) have used so far.
    fn cpu(&self) -> (Duration, Duration) {
        let pid = self.child.id().unwrap();
        let ticks = |stat: String| {
            // utime and stime: fields 14 and 15 of the line, 12 and 13 of what follows the command name.
            let fields: Vec<&str> = stat.rsplit_once(") ").map_or("", |(_, rest)| rest).split(' ').collect();
            let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
            // SAFETY: plain libc call.
            let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
            Duration::from_secs_f64((field(11) + field(12)) as f64 / per_second)
        };
        let read = |path: String| std::fs::read_to_string(path).unwrap_or_default();
        (ticks(read(format!("/proc/{pid}/stat"))), ticks(read(format!("/proc/{pid}/task/{pid}/stat"))))
    }

    /// How many files the server process has open.
    fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id().unwrap())).map_or(0, |fds| fds.count())
    }

    /// VmRSS and VmHWM of the server process, in MiB.
    fn memory(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id().unwrap())).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
                .unwrap_or(0.0)
                / 1024.0
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

/// How many times each measured row is repeated; the median is reported.
const REPEATS: usize = 5;

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn row(name: &str, value: String, baseline: String, ratio: f64) {
    println!("| {name} | {value} | {baseline} | {ratio:.2}x |");
}

/// Median time to start the real interpreter (not a PATH shim) and import what the runner needs: the floor
/// of a run without a pool of ready runners.
async fn bare_interpreter_start() -> Duration {
    let which =
        Command::new("python3").args(["-I", "-S", "-c", "import sys; print(sys.executable)"]).output().await.unwrap();
    let python = String::from_utf8(which.stdout).unwrap().trim().to_string();
    let mut samples = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let status =
            Command::new(&python).args(["-I", "-S", "-c", "import asyncio, json; print(1)"]).output().await.unwrap();
        assert!(status.status.success());
        samples.push(started.elapsed());
    }
    percentile(&mut samples, 0.5)
}

/// Median time of the Docker CLI running the same import in a throwaway container of the bench's image (no
/// network, no logs), with `runtime` (else the engine's default): the floor of a run in the `docker` sandbox.
/// `None` without the CLI.
async fn bare_docker_run(runtime: Option<&str>) -> Option<Duration> {
    let image = docker_image();
    let runtime: Vec<&str> = runtime.map(|runtime| vec!["--runtime", runtime]).unwrap_or_default();
    let mut samples = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let status = Command::new("docker")
            .args(["run", "--rm", "--network", "none", "--log-driver", "none"])
            .args(&runtime)
            .arg(&image)
            .args(["python3", "-I", "-S", "-c", "import asyncio, json; print(1)"])
            .output()
            .await
            .ok()?;
        if !status.status.success() {
            return None;
        }
        samples.push(started.elapsed());
    }
    Some(percentile(&mut samples, 0.5))
}

/// `count` calls of `tool` made to the mock server through the official Rust SDK client (rmcp), without
/// ptc-mcp.
async fn sdk_direct_calls(tool: &str, arguments: Value, count: usize) -> Duration {
    let mut command = Command::new("python3");
    command.arg(repo("tests/servers/mock_server.py"));
    let (client, _child) = connect(command).await;
    let started = Instant::now();
    for _ in 0..count {
        let params =
            CallToolRequestParams::new(tool.to_string()).with_arguments(arguments.as_object().unwrap().clone());
        client.peer().call_tool(params).await.unwrap();
    }
    started.elapsed()
}

/// `count` calls of `tool` written straight to the mock server's stdin as JSON-RPC lines, each answer read
/// as one line and parsed: the floor for per-call overhead (no SDK on our side).
async fn raw_direct_calls(tool: &str, arguments: Value, count: usize) -> Duration {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut child = Command::new("python3")
        .arg(repo("tests/servers/mock_server.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut exchange = async |message: Value, answered: bool| {
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(b'\n');
        stdin.write_all(&bytes).await.unwrap();
        if answered {
            line.clear();
            stdout.read_line(&mut line).await.unwrap();
            let answer: Value = serde_json::from_str(&line).unwrap();
            assert!(answer.get("result").is_some(), "the mock server failed: {line}");
        }
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}});
    exchange(initialize, true).await;
    exchange(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), false).await;
    let started = Instant::now();
    for id in 1..=count {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        exchange(call, true).await;
    }
    started.elapsed()
}

/// Bursts of 8 concurrent 0.5 s programs a second apart (a model's round trip): the first burst's time and
/// the median of [`REPEATS`].
async fn eight_concurrent_programs(server: &Server) -> (Duration, Duration) {
    let mut samples = Vec::new();
    for _ in 0..REPEATS {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let started = Instant::now();
        futures::future::join_all((0..8).map(|_| server.execute("import time\ntime.sleep(0.5)"))).await;
        samples.push(started.elapsed());
    }
    let first = samples[0];
    (first, percentile(&mut samples, 0.5))
}

/// The figures of one sandbox that the comparisons after all sandboxes use.
struct Figures {
    /// Median `execute` of `print(1)`, with the default pool and without one.
    print_pool_on: Duration,
    print_pool_off: Duration,
    /// Median time of one of 500 sequential tool calls from a program.
    per_call: Duration,
}

/// Benchmarks one sandbox; returns the figures the comparisons between sandboxes use.
async fn bench_backend(sandbox: &str) -> Option<Figures> {
    let (server, cold_start) = start(sandbox, "  timeout_seconds: 60\n  max_tool_calls: 1000\n").await;
    let probe = server.call("print(1)").await;
    if probe.is_error == Some(true) {
        let why = probe.structured_content.map(|result| result["error"].to_string()).unwrap_or_default();
        println!("\n{sandbox}: unavailable here ({why}), skipped");
        return None;
    }
    let (idle_rss, _) = server.memory();
    println!("\n### sandbox: {sandbox}\n\n| measure | ptc-mcp | baseline | ratio |\n|---|---|---|---|");

    let floor = bare_interpreter_start().await;
    let (mut pool_on_p50, mut pool_off_p50) = (Duration::ZERO, Duration::ZERO);
    // `server` has the default pool (2).
    let (without_pool, _) = start(sandbox, "  pool_size: 0\n").await;
    without_pool.execute("print(1)").await;
    for (label, server, cold) in [("pool on", &server, false), ("pool off", &without_pool, true)] {
        let mut samples = Vec::new();
        for _ in 0..20 {
            // Programs arrive a model round trip apart; give the pool the time to refill that it has in use.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let started = Instant::now();
            server.execute("print(1)").await;
            samples.push(started.elapsed());
        }
        let p50 = percentile(&mut samples, 0.5);
        let p95 = percentile(&mut samples, 0.95);
        if cold {
            pool_off_p50 = p50;
        } else {
            pool_on_p50 = p50;
        }
        let baseline = format!("{} (bare interpreter start + asyncio import)", ms(floor));
        row(&format!("execute `print(1)` p50, {label}"), ms(p50), baseline, p50.as_secs_f64() / floor.as_secs_f64());
        row(&format!("execute `print(1)` p95, {label}"), ms(p95), ms(floor), p95.as_secs_f64() / floor.as_secs_f64());
        if let ("docker", runtime) = kind_and_runtime(sandbox)
            && cold
            && let Some(docker_floor) = bare_docker_run(runtime).await
        {
            let baseline = format!("{} (`docker run --rm` of the image, same import)", ms(docker_floor));
            row("execute `print(1)` p50, pool off", ms(p50), baseline, p50.as_secs_f64() / docker_floor.as_secs_f64());
        }
    }

    let calls = 500;
    let (mut through, mut raw, mut sdk) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..REPEATS {
        raw.push(raw_direct_calls("echo", json!({"i": 1}), calls).await);
        sdk.push(sdk_direct_calls("echo", json!({"i": 1}), calls).await);
        let run = server
            .execute(&format!("import time\nt = time.perf_counter()\nfor i in range({calls}):\n    await mcp__mock__echo(i=i)\nemit(time.perf_counter() - t)"))
            .await;
        through.push(Duration::from_secs_f64(run["result"].as_f64().unwrap()));
    }
    let per_call = |samples: &mut Vec<Duration>| percentile(samples, 0.5).as_secs_f64() / calls as f64;
    let (through, raw, sdk) = (per_call(&mut through), per_call(&mut raw), per_call(&mut sdk));
    let per_call_through = Duration::from_secs_f64(through);
    let micros = |seconds: f64| format!("{:.0} µs", seconds * 1e6);
    row(
        &format!("{calls} sequential calls, per call"),
        micros(through),
        format!("{} raw direct call", micros(raw)),
        through / raw,
    );
    row(
        &format!("{calls} sequential calls, per call, against an SDK client"),
        micros(through),
        format!("{} direct call through rmcp", micros(sdk)),
        through / sdk,
    );

    let mut gathered = Vec::new();
    for _ in 0..REPEATS {
        let run = server
            .execute("import asyncio, time\nt = time.perf_counter()\nawait asyncio.gather(*[mcp__mock__sleep(seconds=0.05) for _ in range(64)])\nemit(time.perf_counter() - t)")
            .await;
        gathered.push(Duration::from_secs_f64(run["result"].as_f64().unwrap()));
    }
    let gathered = percentile(&mut gathered, 0.5);
    row("64 gathered 50 ms calls, concurrency 8", ms(gathered), "400 ms ideal".into(), gathered.as_secs_f64() / 0.4);
    // Idle again, after programs that called tools (each went through the server's check of its calls too).
    let (used_rss, _) = server.memory();

    let size = 8 * 1024 * 1024;
    let (mut through, mut parses, mut directs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..REPEATS {
        let run = server
            .execute(&format!(
                "import json, time\nt = time.perf_counter()\nr = await mcp__mock__huge(size={size})\nelapsed = time.perf_counter() - t\n\
                 text = json.dumps(r)\nt = time.perf_counter()\njson.loads(text)\nemit([elapsed, time.perf_counter() - t])"
            ))
            .await;
        through.push(Duration::from_secs_f64(run["result"][0].as_f64().unwrap()));
        parses.push(Duration::from_secs_f64(run["result"][1].as_f64().unwrap()));
        directs.push(raw_direct_calls("huge", json!({"size": size}), 1).await);
    }
    let (result_time, parse_time, direct) =
        (percentile(&mut through, 0.5), percentile(&mut parses, 0.5), percentile(&mut directs, 0.5));
    let parse_floor = format!("{} json.loads", ms(parse_time));
    row(
        "8 MiB result into a program",
        ms(result_time),
        parse_floor.clone(),
        result_time.as_secs_f64() / parse_time.as_secs_f64(),
    );
    // Most of that is the downstream producing 8 MiB; what ptc-mcp adds is the difference to a direct call.
    let added = result_time.saturating_sub(direct);
    row(
        "8 MiB result: added over a direct call",
        format!("{} (direct {})", ms(added), ms(direct)),
        parse_floor,
        added.as_secs_f64() / parse_time.as_secs_f64(),
    );
    let (_, peak_rss) = server.memory();

    // The pool sized to the concurrency: no run pays an interpreter start.
    let (sized, _) = start(sandbox, "  pool_size: 8\n").await;
    sized.execute("print(1)").await;
    for (label, server) in [("default pool", &server), ("pool_size 8", &sized)] {
        let (first, median) = eight_concurrent_programs(server).await;
        row(
            &format!("8 concurrent 0.5 s programs, {label} (first burst {})", ms(first)),
            ms(median),
            "500 ms ideal".into(),
            median.as_secs_f64() / 0.5,
        );
    }

    row("server RSS idle", format!("{idle_rss:.1} MiB"), "-".into(), 1.0);
    row("server RSS idle after tool-calling programs", format!("{used_rss:.1} MiB"), "-".into(), 1.0);
    row(
        "server RSS peak (after the 8 MiB result)",
        format!("{peak_rss:.1} MiB"),
        "8 MiB result".into(),
        peak_rss / 8.0,
    );
    row(
        "server RSS peak over idle",
        format!("{:.1} MiB", peak_rss - idle_rss),
        "8 MiB result".into(),
        (peak_rss - idle_rss) / 8.0,
    );
    row("cold start to initialize answered", ms(cold_start), "-".into(), 1.0);
    structured_result_peak(sandbox).await;
    structured_result_peak_over_http(sandbox).await;
    Some(Figures { print_pool_on: pool_on_p50, print_pool_off: pool_off_p50, per_call: per_call_through })
}

const SDK_ROWS_PROGRAM: &str =
    "import json\nr = await mcp__mock__sdk_rows(count=110_000)\nemit(len(json.dumps(r, separators=(',', ':'))))";

/// A fresh server through one program that emits the size of its result.
struct Through {
    /// The result's size, MiB.
    size: f64,
    /// The server's RSS after one small run and its peak RSS after the program, MiB.
    idle_rss: f64,
    peak_rss: f64,
    /// Its CPU times (see [`Server::cpu`]) before and after the program.
    cpu_before: (Duration, Duration),
    cpu_after: (Duration, Duration),
}

async fn peak_through(server: &Server, program: &str) -> Through {
    server.execute("print(1)").await;
    let (idle_rss, _) = server.memory();
    let cpu_before = server.cpu();
    let run = server.execute(program).await;
    let cpu_after = server.cpu();
    let size = run["result"].as_f64().unwrap() / (1024.0 * 1024.0);
    let (_, peak_rss) = server.memory();
    Through { size, idle_rss, peak_rss, cpu_before, cpu_after }
}

/// The same structured result from our HTTP mock (tests/servers/http_fault_server.py) over streamable
/// HTTP, in a JSON body and as an SSE event: a fresh server's peak RSS through it.
async fn structured_result_peak_over_http(sandbox: &str) {
    use tokio::io::AsyncBufReadExt;
    for (framing, flags) in [("SSE event", &["--response", "sse"][..]), ("JSON body", &[][..])] {
        let mut downstream = Command::new("python3")
            .arg(repo("tests/servers/http_fault_server.py"))
            .args(flags)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut announced = String::new();
        tokio::io::BufReader::new(downstream.stdout.take().unwrap()).read_line(&mut announced).await.unwrap();
        let port = announced.trim().strip_prefix("PORT ").expect("the HTTP mock announces its port");
        let entry = format!("  - name: mock\n    transport: http\n    url: http://127.0.0.1:{port}/mcp\n");
        let (server, _) = start_with(sandbox, &entry, "  timeout_seconds: 120\n", &docker_image()).await;
        let Through { size, idle_rss, peak_rss, .. } = peak_through(&server, SDK_ROWS_PROGRAM).await;
        row(
            &format!("server RSS peak, the same over streamable HTTP ({framing})"),
            format!("{peak_rss:.1} MiB (idle {idle_rss:.1})"),
            format!("{size:.1} MiB structured result"),
            peak_rss / size,
        );
    }
}

/// The peak memory and CPU time of a fresh server through one structured result of 110,000 small rows, sent
/// as the official SDK sends a list (structured content, one text per row, an output schema to validate
/// against); then, through the same once more, how long the server took to answer other requests
/// (`list_callable_tools`, back to back): the result is read off the runtime thread, which the stdio server
/// has only one of.
async fn structured_result_peak(sandbox: &str) {
    let (server, _) = start(sandbox, "  timeout_seconds: 120\n").await;
    let Through { size, idle_rss, peak_rss, cpu_before, cpu_after } = peak_through(&server, SDK_ROWS_PROGRAM).await;
    let ((cpu_before, runtime_before), (cpu_after, runtime_after)) = (cpu_before, cpu_after);
    let result = format!("{size:.1} MiB structured result");
    row(
        "server RSS peak (after a structured result of 110,000 rows)",
        format!("{peak_rss:.1} MiB"),
        result.clone(),
        peak_rss / size,
    );
    row(
        "server RSS peak over idle (the same)",
        format!("{:.1} MiB", peak_rss - idle_rss),
        result.clone(),
        (peak_rss - idle_rss) / size,
    );
    let (cpu, runtime) = (cpu_after - cpu_before, runtime_after - runtime_before);
    row(
        "server CPU through the same: its runtime thread / all its threads",
        format!("{} / {}", ms(runtime), ms(cpu)),
        result,
        runtime.as_secs_f64() / cpu.as_secs_f64().max(1e-9),
    );
    let started = Instant::now();
    let large = server.execute(SDK_ROWS_PROGRAM);
    tokio::pin!(large);
    let mut slowest_other = Duration::ZERO;
    loop {
        let asked = Instant::now();
        let other = server.client.peer().call_tool(CallToolRequestParams::new("list_callable_tools"));
        tokio::select! {
            _ = &mut large => break,
            _ = other => slowest_other = slowest_other.max(asked.elapsed()),
        }
    }
    let took = started.elapsed();
    row(
        "slowest answer to another request through the same",
        ms(slowest_other),
        format!("the result's run {}", ms(took)),
        slowest_other.as_secs_f64() / took.as_secs_f64(),
    );
}

/// A 200-line program of the kind models write: calls with literal and computed arguments, loops,
/// comprehensions, gathers, prints.
fn two_hundred_lines() -> String {
    let block = "tickers = [\"AMZN\", \"MSFT\", \"GOOG\"]\n\
                 rows = await mcp__financial_data__query_financials(ticker=\"AMZN\", statement=\"income\", limit=4)\n\
                 totals = {}\n\
                 for t in tickers:\n    \
                     data = await mcp__financial_data__query_financials(ticker=t, period=\"annual\", limit=2)\n    \
                     totals[t] = sum(q[\"revenue\"] for q in data)\n\
                 calls = [mcp__financial_data__query_financials(ticker=t, statement=\"balance\") for t in tickers]\n\
                 balances = await asyncio.gather(*calls)\n\
                 graph = await mcp__memory__read_graph()\n\
                 names = [e[\"name\"] for e in graph[\"entities\"] if e[\"entityType\"] == \"company\"]\n\
                 now = await mcp__time__get_current_time(timezone=\"Europe/Paris\")\n\
                 print(now[\"datetime\"], len(names), max(totals, key=totals.get))\n\
                 if not names:\n    \
                     await mcp__memory__create_entities(entities=[{\"name\": \"AMZN\", \"entityType\": \"company\", \"observations\": []}])\n\
                 print({t: round(v / 1e9, 1) for t, v in totals.items()}, len(balances))\n";
    let mut program = String::from("import asyncio\n");
    while program.lines().count() + block.lines().count() <= 200 {
        program.push_str(block);
    }
    while program.lines().count() < 200 {
        program.push_str("print(\"done\")\n");
    }
    program
}

/// The CPU time of the runner's check (backends/src/checks.py) over a 200-line program against the tools of
/// the recorded third-party servers and the demo, beside compiling the same program alone: the fastest of 50
/// runs each (on a shared machine the others measure the neighbours).
async fn precheck_cost() {
    let fixtures = repo("tests/fixtures/tools");
    let mut entries = Vec::new();
    for server in ["financial-data", "memory", "time", "everything", "filesystem"] {
        let text = std::fs::read_to_string(fixtures.join(format!("{server}.json"))).unwrap();
        let tools: Vec<rmcp::model::Tool> = serde_json::from_str(&text).unwrap();
        entries
            .extend(tools.into_iter().map(|tool| std::sync::Arc::new(ptc_mcp::registry::ToolEntry::new(server, tool))));
    }
    let catalog = std::sync::Arc::new(ptc_mcp::registry::Catalog::build(entries, &ptc_mcp::config::ToolFilter::All));
    let program = two_hundred_lines();
    // What a run pays: the server's check on its own thread. It proves every call sound, so the runner skips
    // its check and compiles the source as it would without one.
    assert!(ptc_mcp::precheck::proves_sound(&program, &catalog).await, "the benchmark program is sound");
    let mut server_check = Duration::MAX;
    for _ in 0..50 {
        let start = Instant::now();
        ptc_mcp::precheck::proves_sound(&program, &catalog).await;
        server_check = server_check.min(start.elapsed());
    }
    // The check parses the program once for itself and for compiling it: what it adds to a run is its own
    // time, plus compiling the tree, less compiling the source.
    let script = "import ast, json, sys, time\n\
                  sys.path.insert(0, sys.argv[1])\n\
                  import checks\n\
                  tools, code = json.loads(sys.stdin.read())\n\
                  box = checks.Toolbox(tools, {}, {})\n\
                  findings, tree = checks.precheck(code, box)\n\
                  assert findings == [], findings\n\
                  flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT\n\
                  def fastest(f):\n    \
                      samples = []\n    \
                      for _ in range(50):\n        \
                          t = time.process_time(); f(); samples.append(time.process_time() - t)\n    \
                      return min(samples) * 1000\n\
                  check = fastest(lambda: checks.precheck(code, box))\n\
                  from_tree = fastest(lambda: compile(tree, 'p', 'exec', flags=flags))\n\
                  from_source = fastest(lambda: compile(code, 'p', 'exec', flags=flags))\n\
                  speed = fastest(lambda: sum(range(1000))) * 1000\n\
                  print(json.dumps([check, check + from_tree - from_source, from_source, speed, len(tools)]))";
    let mut child = Command::new("python3")
        .args(["-I", "-S", "-c", script])
        .arg(repo("backends/src"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let tools: Value = serde_json::from_str(catalog.runner_tools().get()).unwrap();
    let input = serde_json::to_vec(&json!([tools, program])).unwrap();
    tokio::io::AsyncWriteExt::write_all(child.stdin.as_mut().unwrap(), &input).await.unwrap();
    drop(child.stdin.take());
    let output = child.wait_with_output().await.unwrap();
    let [check, added, compile, speed, tools]: [f64; 5] =
        serde_json::from_slice(&output.stdout).expect("the timing script's answer");
    println!("\n### the check before running\n\n| measure | ptc-mcp | baseline | ratio |\n|---|---|---|---|");
    let server_ms = server_check.as_secs_f64() * 1000.0;
    row(
        &format!("precheck of a 200-line program, {tools} tools: added to a run (the server's check, own thread)"),
        format!("{server_ms:.2} ms"),
        format!("5 ms budget; compiling the program alone {compile:.2} ms"),
        server_ms / 5.0,
    );
    row(
        "the runner's check, when the server cannot prove the calls sound (parse + check)",
        format!("{check:.2} ms"),
        "5 ms budget".to_string(),
        check / 5.0,
    );
    row(
        "the runner's check: added to a run (the compile reuses its tree)",
        format!("{added:.2} ms"),
        "5 ms budget".to_string(),
        added / 5.0,
    );
    // The same check takes several times longer on a slow or busy machine: this says how fast Python runs here.
    row("Python here: sum(range(1000)), CPU time", format!("{speed:.1} µs"), "-".into(), 1.0);
}

/// `runs` programs that each call a tool, one after another, in one server (sandbox `none`: what is measured
/// is the server): its resident memory and open files after the first run, the 1,000th and the last. Flat
/// when nothing a run leaves behind accumulates.
async fn soak(runs: usize) {
    let (server, _) = start("none", "").await;
    let program = "r = await mcp__mock__echo(i=1)\nprint(r['i'])";
    let checkpoints = [1, 1_000, runs];
    // After each checkpoint's run: (run, RSS in MiB, open fds).
    let mut figures: Vec<(usize, f64, usize)> = Vec::new();
    let started = Instant::now();
    for run in 1..=runs {
        let result = server.execute(program).await;
        assert_eq!(result["output"], json!("1\n"), "run {run}");
        if checkpoints.contains(&run) && figures.last().is_none_or(|&(last, ..)| last != run) {
            figures.push((run, server.memory().0, server.open_fds()));
        }
        if run % 1_000 == 0 {
            eprintln!("soak: {run} of {runs} runs");
        }
    }
    let per_run = started.elapsed() / runs as u32;
    println!(
        "\n### soak: {runs} runs with a tool call, one server (sandbox none)\n\n| measure | ptc-mcp | baseline | ratio |\n|---|---|---|---|"
    );
    let (_, first_rss, first_fds) = figures[0];
    for &(run, rss, fds) in &figures {
        row(
            &format!("server RSS after run {run}"),
            format!("{rss:.1} MiB"),
            format!("{first_rss:.1} MiB after run 1"),
            rss / first_rss,
        );
        row(
            &format!("server open fds after run {run}"),
            fds.to_string(),
            format!("{first_fds} after run 1"),
            fds as f64 / first_fds as f64,
        );
    }
    row("soak: time per run (sequential, a tool call each)", ms(per_run), "-".into(), 1.0);
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes the words after the command, and `--bench`.
    let words: Vec<String> = std::env::args().skip(1).filter(|word| !word.starts_with('-')).collect();
    let wanted = |section: &str| words.is_empty() || words.iter().any(|word| word == section);
    println!("# ptc-mcp benchmarks ({} cores)", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    if wanted("precheck") {
        precheck_cost().await;
    }
    if wanted("sandboxes") {
        sandboxes().await;
    }
    if wanted("preload") {
        preload_cost().await;
    }
    if wanted("sessions") {
        session_cost().await;
    }
    if wanted("zygote") {
        zygote_cost().await;
    }
    if wanted("soak") {
        let runs = std::env::var("PTC_BENCH_SOAK_RUNS")
            .map_or(10_000, |runs| runs.parse().expect("PTC_BENCH_SOAK_RUNS: a number"));
        soak(runs).await;
    }
}

/// Every sandbox of `PTC_BENCH_SANDBOXES` that runs here, then what each adds per run against `none`.
async fn sandboxes() {
    let sandboxes = std::env::var("PTC_BENCH_SANDBOXES").unwrap_or_else(|_| "none,landlock".to_string());
    let mut measured = Vec::new();
    for sandbox in sandboxes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if let Some(figures) = bench_backend(sandbox).await {
            measured.push((sandbox.to_string(), figures));
        }
    }
    // What a sandbox adds to every run (its cold start), against `none` measured in the same run.
    if let Some((_, none)) = measured.iter().find(|(s, _)| s == "none") {
        let none = none.print_pool_off;
        println!(
            "\n### per-run start-up against none (pool off)\n\n| sandbox | execute `print(1)` p50 | none p50 | added per run |\n|---|---|---|---|"
        );
        for (sandbox, figures) in measured.iter().filter(|(s, _)| s != "none") {
            let p50 = figures.print_pool_off;
            println!("| {sandbox} | {} | {} | {} |", ms(p50), ms(none), ms(p50.saturating_sub(none)));
        }
    }
    // Each named docker runtime (e.g. gVisor's runsc) against the engine's default, measured in the same run.
    if let Some((_, default)) = measured.iter().find(|(s, _)| s == "docker") {
        let others: Vec<_> = measured.iter().filter(|(s, _)| s.starts_with("docker:")).collect();
        if !others.is_empty() {
            println!(
                "\n### docker runtimes against the engine's default (docker)\n\n| sandbox | measure | it | docker | ratio |\n|---|---|---|---|---|"
            );
        }
        for (sandbox, figures) in others {
            let measures = [
                ("execute `print(1)` p50, pool on", figures.print_pool_on, default.print_pool_on),
                ("execute `print(1)` p50, pool off", figures.print_pool_off, default.print_pool_off),
                ("per call (500 sequential)", figures.per_call, default.per_call),
            ];
            for (measure, it, default) in measures {
                let ratio = it.as_secs_f64() / default.as_secs_f64().max(1e-9);
                println!("| {sandbox} | {measure} | {} | {} | {ratio:.2}x |", ms(it), ms(default));
            }
        }
    }
}

/// The docker image with numpy and pandas (ci/docker-setup.sh builds it from the venv).
fn docker_packages_image() -> String {
    std::env::var("PTC_BENCH_DOCKER_PACKAGES_IMAGE").unwrap_or_else(|_| "ptc-mcp-runner:packages".to_string())
}

/// Starts a server whose programs see numpy and pandas, in `sandbox` (with `extra` keys), if pandas imports
/// there; otherwise says why and gives `None`.
async fn packages_server(sandbox: &str, extra: &str) -> Option<Server> {
    let (server, _) = if kind_and_runtime(sandbox).0 == "docker" {
        start_in(sandbox, &format!("  site_packages: true\n{extra}"), &docker_packages_image()).await
    } else {
        let Ok(python) = std::env::var("PTC_TEST_PACKAGES_PYTHON") else {
            println!("\n{sandbox}: PTC_TEST_PACKAGES_PYTHON is not set (eval \"$(ci/test-deps.sh)\"), skipped");
            return None;
        };
        start(sandbox, &format!("  python: {python}\n  site_packages: true\n{extra}")).await
    };
    let probe = server.call("import pandas").await;
    if probe.is_error == Some(true) {
        let why = probe.structured_content.map(|result| result["error"].to_string()).unwrap_or_default();
        println!("\n{sandbox}: pandas cannot be imported here ({why}), skipped");
        return None;
    }
    Some(server)
}

/// Medians of `runs` programs `code` (a pause before each, as between a model's calls), whole and as the
/// program timed itself (it prints seconds).
async fn timed_runs(server: &Server, code: &str, pause: Duration) -> (Duration, Duration) {
    let (mut whole, mut inside) = (Vec::new(), Vec::new());
    for _ in 0..REPEATS.max(7) {
        tokio::time::sleep(pause).await;
        let started = Instant::now();
        let result = server.execute(code).await;
        whole.push(started.elapsed());
        let printed = result["output"].as_str().unwrap_or_default().trim().parse::<f64>().unwrap_or(0.0);
        inside.push(Duration::from_secs_f64(printed));
    }
    (percentile(&mut whole, 0.5), percentile(&mut inside, 0.5))
}

/// `import pandas` in a run with `execution.preload: [pandas]` against without (same sandbox, same run,
/// `site_packages` on for both), and what the preload adds to starting a runner (the pool off: every run
/// starts one).
async fn preload_cost() {
    let sandboxes = std::env::var("PTC_BENCH_SANDBOXES").unwrap_or_else(|_| "none,landlock".to_string());
    let import = "import time\nt = time.perf_counter()\nimport pandas\nprint(time.perf_counter() - t)";
    for sandbox in sandboxes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (Some(plain), Some(preloaded)) =
            (packages_server(sandbox, "").await, packages_server(sandbox, "  preload: [pandas]\n").await)
        else {
            continue;
        };
        // The pool (2) refills between runs: a preloading runner takes the import's time to get ready.
        let pause = Duration::from_millis(2500);
        let (plain_run, plain_import) = timed_runs(&plain, import, pause).await;
        let (preloaded_run, preloaded_import) = timed_runs(&preloaded, import, pause).await;
        drop((plain, preloaded));
        let (Some(plain_cold), Some(preloaded_cold)) = (
            packages_server(sandbox, "  pool_size: 0\n").await,
            packages_server(sandbox, "  pool_size: 0\n  preload: [pandas]\n").await,
        ) else {
            continue;
        };
        let (plain_start, _) = timed_runs(&plain_cold, "print(0)", Duration::from_millis(100)).await;
        let (preloaded_start, _) = timed_runs(&preloaded_cold, "print(0)", Duration::from_millis(100)).await;
        println!("\n### preload: {sandbox}\n\n| measure | preload: [pandas] | no preload | ratio |\n|---|---|---|---|");
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
        let rows = [
            ("`import pandas` inside the run, p50", preloaded_import, plain_import),
            ("execute `import pandas` p50 (pool on)", preloaded_run, plain_run),
            ("execute `print(0)` p50, pool off (a runner's start)", preloaded_start, plain_start),
        ];
        for (name, with, without) in rows {
            let ms = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1000.0);
            println!("| {name} | {} | {} | {:.3}x |", ms(with), ms(without), ratio(with, without));
        }
    }
}

/// What a program prints of its own interpreter's peak resident set, in KiB (from getrusage: every sandbox
/// has it, where `landlock` shows no /proc).
const OWN_RSS: &str = "import resource\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)";

/// The p50 of 20 runs of `arguments` (300 ms apart, as a model's calls arrive) that must succeed.
async fn p50_of_runs(server: &Server, arguments: Value) -> Duration {
    let mut samples = Vec::new();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        let result = server.call_with(arguments.clone()).await;
        assert_ne!(result.is_error, Some(true), "benchmark program failed: {result:?}");
        samples.push(started.elapsed());
    }
    percentile(&mut samples, 0.5)
}

/// A session's later `print(1)` against a fresh run's, and an idle session's memory against a bare
/// interpreter's, per sandbox.
async fn session_cost() {
    let sandboxes = std::env::var("PTC_BENCH_SANDBOXES").unwrap_or_else(|_| "none,landlock".to_string());
    let bare = Command::new("python3").args(["-I", "-S", "-c", OWN_RSS]).output().await.unwrap();
    let bare_rss: f64 = String::from_utf8_lossy(&bare.stdout).trim().parse().unwrap_or(0.0);
    for sandbox in sandboxes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (server, _) = start(sandbox, "").await;
        let probe = server.call("print(1)").await;
        if probe.is_error == Some(true) {
            println!("\n{sandbox}: unavailable here, sessions skipped");
            continue;
        }
        let fresh = p50_of_runs(&server, json!({"code": "print(1)"})).await;
        server.call_with(json!({"code": "x = 1", "session": "bench"})).await;
        let kept = p50_of_runs(&server, json!({"code": "print(1)", "session": "bench"})).await;
        let rss = server.call_with(json!({"code": OWN_RSS, "session": "bench"})).await;
        let text = rss.structured_content.map(|result| result["output"].as_str().unwrap_or_default().to_string());
        let rss: f64 = text.unwrap_or_default().trim().parse().unwrap_or(0.0);
        println!("\n### sessions: {sandbox}\n\n| measure | session | baseline | ratio |\n|---|---|---|---|");
        let ratio = kept.as_secs_f64() / fresh.as_secs_f64().max(1e-9);
        row("execute `print(1)` p50: a session's later run / a fresh run (pool on)", ms(kept), ms(fresh), ratio);
        let mib = |kib: f64| format!("{:.1} MiB", kib / 1024.0);
        row(
            "an idle session's interpreter, peak RSS / a bare `python3 -I -S`'s",
            mib(rss),
            mib(bare_rss),
            rss / bare_rss.max(1.0),
        );
    }
}

/// The zygote against fresh starts, per host sandbox: a runner's start, runs back to back, 8 HTTP clients.
async fn zygote_cost() {
    for sandbox in ["none", "landlock"] {
        let (Some(forked), Some(fresh)) = (runner_starts(sandbox, true).await, runner_starts(sandbox, false).await)
        else {
            println!("\n{sandbox}: unavailable here, zygote skipped");
            continue;
        };
        println!("\n### zygote: {sandbox}\n\n| measure | zygote | fresh interpreter | ratio |\n|---|---|---|---|");
        percentile_rows("a runner's start (spawn to `ready`)", forked, fresh);
        let (with, _) = start(sandbox, "").await;
        let (without, _) = start(sandbox, "  zygote: false\n").await;
        let (with, without) = (back_to_back(&with, 200).await, back_to_back(&without, 200).await);
        percentile_rows("`print(1)` 200 times back to back", with.clone(), without.clone());
        let slow = |samples: &[Duration]| samples.iter().filter(|d| **d > Duration::from_millis(20)).count();
        row("... of them over 20 ms", slow(&with).to_string(), slow(&without).to_string(), 1.0);
        for zygote in [true, false] {
            let (rate, p95) = http_clients(sandbox, zygote, 8, Duration::from_secs(6)).await;
            let label = if zygote { "zygote" } else { "fresh interpreters" };
            row(
                &format!("8 clients over serve --http, `print(1)` in a loop ({label})"),
                format!("{rate:.0} runs/s, p95 {}", ms(p95)),
                "200 runs/s, p95 20 ms (goal)".into(),
                rate / 200.0,
            );
        }
    }
}

/// The p50 and p95 of `measure` and of its `baseline`, as rows.
fn percentile_rows(measure: &str, mut it: Vec<Duration>, mut baseline: Vec<Duration>) {
    for (label, p) in [("p50", 0.5), ("p95", 0.95)] {
        let (a, b) = (percentile(&mut it, p), percentile(&mut baseline, p));
        row(&format!("{measure}, {label}"), ms(a), ms(b), a.as_secs_f64() / b.as_secs_f64());
    }
}

/// 30 runners' starts (spawn until `ready`) through the backend itself, after one to warm up (it starts the
/// zygote); `None` where the backend is unavailable.
async fn runner_starts(sandbox: &str, zygote: bool) -> Option<Vec<Duration>> {
    use tokio::io::AsyncBufReadExt;
    let settings = ptc_backends::BackendSettings {
        python: "python3".into(),
        helper: binary().into(),
        docker: Default::default(),
        kubernetes: Default::default(),
        limits: Default::default(),
        allow_degraded: false,
        zygote,
        mounts: Vec::new(),
        packages: Default::default(),
    };
    let kind =
        if sandbox == "landlock" { ptc_backends::SandboxKind::Landlock } else { ptc_backends::SandboxKind::None };
    let backend = ptc_backends::select(kind, &settings);
    if !backend.probe().await.is_usable() {
        return None;
    }
    let request = ptc_backends::SpawnRequest { limits: Default::default(), timeout: Duration::from_secs(60) };
    let mut samples = Vec::new();
    for i in 0..31 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        let runner = backend.spawn(&request).await.ok()?;
        let mut ready = String::new();
        tokio::io::BufReader::new(runner.from_runner).read_line(&mut ready).await.ok()?;
        let elapsed = started.elapsed();
        assert!(ready.contains("\"ready\""), "a runner said {ready:?} first");
        let mut control = runner.control;
        control.kill().await;
        if i > 0 {
            samples.push(elapsed);
        }
    }
    backend.shutdown().await;
    Some(samples)
}

/// `count` runs of `print(1)`, each sent as soon as the one before was answered.
async fn back_to_back(server: &Server, count: usize) -> Vec<Duration> {
    server.execute("print(1)").await;
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        server.execute("print(1)").await;
        samples.push(started.elapsed());
    }
    samples
}

/// `clients` rmcp clients of one `serve --http` server, each running `print(1)` in a loop for `period`:
/// runs per second over all, and the p95 of a run.
async fn http_clients(sandbox: &str, zygote: bool, clients: usize, period: Duration) -> (f64, Duration) {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    const TOKEN: &str = "bench-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let text = format!(
        "servers:\n{}execution:\n  sandbox: {sandbox}\n  zygote: {zygote}\nserve:\n  http:\n    token: {TOKEN}\n    max_concurrent_runs: {clients}\n",
        mock_entry()
    );
    std::fs::write(&config, text).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let _server = Command::new(binary())
        .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--config"])
        .arg(&config)
        .env("RUST_LOG", "error")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut sessions = Vec::new();
    for _ in 0..clients {
        let config = StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(TOKEN);
        let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
        sessions.push(().serve(transport).await.unwrap());
    }
    let call = |client: &RunningService<RoleClient, ()>| {
        let params = CallToolRequestParams::new("execute_program")
            .with_arguments(json!({"code": "print(1)"}).as_object().unwrap().clone());
        let peer = client.peer().clone();
        async move {
            let result = peer.call_tool(params).await.unwrap();
            assert_ne!(result.is_error, Some(true), "benchmark program failed: {result:?}");
        }
    };
    for client in &sessions {
        call(client).await;
    }
    let started = Instant::now();
    let loops = sessions.iter().map(|client| async move {
        let mut samples = Vec::new();
        while started.elapsed() < period {
            let run = Instant::now();
            call(client).await;
            samples.push(run.elapsed());
        }
        samples
    });
    let mut samples: Vec<Duration> = futures::future::join_all(loops).await.into_iter().flatten().collect();
    let rate = samples.len() as f64 / started.elapsed().as_secs_f64();
    (rate, percentile(&mut samples, 0.95))
}
