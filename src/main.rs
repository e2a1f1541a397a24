//! The `ptc-mcp` binary: parse the command line, load the config, and serve MCP or run a shell command.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ptc_mcp::cli::{self, CONFIG_ERROR, ToolsArgs, print_err};
use ptc_mcp::config::Config;
use ptc_mcp::serve;

/// Programmatic tool calling for any MCP client: the model writes one Python program, ptc-mcp runs it in a
/// sandboxed interpreter where every downstream MCP tool is an async function, and only what the program
/// prints comes back. Without a command it serves MCP over stdio. Results go to stdout; logs go to stderr
/// (level from RUST_LOG; default info, or warn for check, tools, run and the sandbox commands when stderr is a
/// terminal).
#[derive(Debug, Parser)]
#[command(name = "ptc-mcp", version)]
struct Cli {
    /// The YAML config. Without it: $PTC_MCP_CONFIG, else ./config.yaml, else built-in defaults (no servers).
    #[arg(long, value_name = "PATH", global = true)]
    config: Option<PathBuf>,

    /// Check whether a sandbox (auto, seatbelt, landlock, docker, kubernetes or none) can run programs here,
    /// print what it enforces and what that guarantees, or why it cannot run, and exit (status 0 when it can).
    /// Uses execution.python, execution.docker, execution.kubernetes and execution.allow_degraded from the
    /// config.
    #[arg(long, value_name = "SANDBOX")]
    check_sandbox: Option<String>,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve MCP: on stdio (the default), or with --http as streamable HTTP at http://ADDR:PORT/mcp for
    /// several clients, with /healthz, /readyz and /metrics beside it (see serve.http in the config: token,
    /// allowed_origins, max_concurrent_runs, the bounds on connections and sessions, drain_seconds).
    Serve {
        /// Listen on this address: PORT (on 127.0.0.1), localhost:PORT, or ADDR:PORT (e.g. 0.0.0.0:8765).
        /// Needs serve.http.token (e.g. token: ${PTC_MCP_TOKEN}).
        #[arg(long, value_name = "[ADDR:]PORT", value_parser = cli::listen_address)]
        http: Option<std::net::SocketAddr>,
    },
    /// Validate the config, probe the sandbox and connect every server (waiting up to its
    /// connect_timeout_seconds); print one row per server. Exit status 0 only when all is well, else 1 (130
    /// when stopped by Ctrl-C or SIGTERM).
    Check,
    /// List the tools programs can call, one name a line (servers that are missing are named on stderr).
    Tools {
        /// Only the tools matching this search, best first (as list_callable_tools(query=...) ranks them).
        #[arg(long, value_name = "Q")]
        query: Option<String>,
        /// Their Python signatures instead of their names (list_callable_tools(detail="signatures")).
        #[arg(long)]
        signatures: bool,
        /// JSON: an array of names, or the signatures as one string.
        #[arg(long)]
        json: bool,
    },
    /// Run one program (a file, or - for stdin) through the same engine and sandbox as execute_program,
    /// waiting only for the servers whose tools it names (all of them if it lists or inspects tools). Its
    /// output shows as it arrives; then the rest of the execute_program text (all of it less that output).
    /// Exit status 0 on success, 1 when the run failed, 2 on a config or sandbox error, 130 when Ctrl-C or
    /// SIGTERM stopped it.
    Run {
        #[arg(value_name = "FILE|-")]
        file: PathBuf,
    },
    /// Log in to a server with `auth: oauth`: print its authorization URL, open it in $BROWSER (else the
    /// platform's opener), wait up to 5 minutes for the browser to come back to a loopback port, and store the
    /// tokens (mode 0600, under oauth.token_store). Running ptc-mcp instances pick them up at once.
    Login {
        /// The server's name in the config.
        #[arg(value_name = "NAME")]
        name: String,
        /// Only print the URL (open it on any machine whose browser can reach this one's 127.0.0.1).
        #[arg(long)]
        no_browser: bool,
    },
    /// Log out of a server with `auth: oauth`: revoke its tokens where the server supports revocation, and
    /// delete them.
    Logout {
        /// The server's name in the config.
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// Print the seatbelt profile exactly as a run would use it (the text `sandbox-exec -p` gets, after
    /// comments that give its -D parameters), for execution.python; works on any OS, so the profile can be
    /// read and checked without a Mac.
    SandboxProfile {
        /// The sandbox whose profile to print: seatbelt.
        #[arg(value_name = "SANDBOX")]
        sandbox: String,
    },
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    ptc_backends::run_helper_if_requested(&args);
    return_large_buffers_at_once();
    let cli = Cli::parse_from(args);
    init_logging(default_log_level(&cli));
    let (config, source) = match Config::load(cli.config.as_deref()) {
        Ok(loaded) => loaded,
        Err(e) => {
            print_err(&format!("ptc-mcp: {e}\n"));
            return ExitCode::from(CONFIG_ERROR);
        }
    };
    if let ptc_mcp::config::ConfigSource::File(path) = &source {
        ptc_mcp::oauth::set_config_file(path);
    }
    protect_from_same_user_processes();
    let runtime = match runtime_for(cli.command.as_ref()) {
        Ok(runtime) => runtime,
        Err(e) => {
            print_err(&format!("ptc-mcp: cannot start the async runtime: {e}\n"));
            return ExitCode::FAILURE;
        }
    };
    if let Some(sandbox) = cli.check_sandbox {
        return ExitCode::from(runtime.block_on(cli::check_sandbox(&sandbox, &config)));
    }
    let code = runtime.block_on(async {
        match cli.command {
            None | Some(Command::Serve { http: None }) => serve::serve_stdio(config, source).await,
            Some(Command::Serve { http: Some(addr) }) => serve::serve_http(config, source, addr).await,
            Some(Command::Check) => cli::check(&config, &source).await,
            Some(Command::Tools { query, signatures, json }) => {
                cli::tools(&config, &ToolsArgs { query, signatures, json }).await
            }
            Some(Command::Run { file }) => cli::run(&config, &file).await,
            Some(Command::Login { name, no_browser }) => cli::login(&config, &name, !no_browser).await,
            Some(Command::Logout { name }) => cli::logout(&config, &name).await,
            Some(Command::SandboxProfile { sandbox }) => cli::sandbox_profile(&sandbox, &config).await,
        }
    });
    // A pending read of stdin cannot be cancelled, so leave without waiting for the runtime to wind down.
    std::process::exit(i32::from(code));
}

/// The stdio server and the shell commands serve one client from one thread: a tool call passes between the
/// run's tasks and the downstream's connection several times, and on one thread each pass is a function call,
/// not a wake-up of another thread (the server's CPU time per tool call halved, measured with perf, when it
/// left the multi-threaded runtime).
/// Serving HTTP takes a worker per core, for concurrent clients.
fn runtime_for(command: Option<&Command>) -> std::io::Result<tokio::runtime::Runtime> {
    match command {
        Some(Command::Serve { http: Some(_) }) => tokio::runtime::Builder::new_multi_thread().enable_all().build(),
        _ => tokio::runtime::Builder::new_current_thread().enable_all().build(),
    }
}

/// `warn` for a shell command whose logs go to a terminal, where they would mix with what it prints (`RUST_LOG`
/// still rules); `info` for the servers, whose logs are a record.
fn default_log_level(cli: &Cli) -> &'static str {
    let serves = matches!(cli.command, None | Some(Command::Serve { .. })) && cli.check_sandbox.is_none();
    if !serves && std::io::stderr().is_terminal() { "warn" } else { "info" }
}

fn init_logging(level: &str) {
    // rmcp's HTTP worker logs every failed connection attempt at ERROR, with the full URL (whose query may
    // hold a secret); the registry already says why a server is unavailable, once per distinct reason. So
    // it stays off unless RUST_LOG names it. rmcp's OAuth module logs authorization codes at DEBUG: it
    // never goes below INFO, whatever RUST_LOG says.
    const WORKER: &str = "rmcp::transport::worker";
    let default = format!("{level},rmcp=warn");
    let requested = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.clone());
    let mut directives = ptc_mcp::oauth::clamp_log_directives(&requested);
    if !directives.contains(WORKER) {
        directives.push_str(&format!(",{WORKER}=off"));
    }
    let fallback = ptc_mcp::oauth::clamp_log_directives(&format!("{default},{WORKER}=off"));
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(fallback));
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).with_ansi(false).init();
}

/// Children run as the same user: make this process undumpable so they cannot read its memory or environ
/// through /proc or ptrace.
fn protect_from_same_user_processes() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0);
    }
}

/// Large results pass through buffers of their size. glibc serves a block from its heap, not a fresh mapping,
/// once a block that large has been freed (its mmap threshold follows the largest freed block, up to 32 MiB),
/// and a heap keeps freed memory: a fixed threshold maps every block over 128 KiB afresh and unmaps it when it
/// is freed. (Peak memory over idle after 8 MiB results went from 4 to 3 times the result.)
fn return_large_buffers_at_once() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt with integer arguments, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}
