//! The `ptc-mcp` binary: parse the command line, load the config, and serve MCP over stdio.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use ptc_backends::{BackendSettings, SandboxKind, guarantees};
use ptc_mcp::config::{CONFIG_ENV, Config, ConfigSource};
use ptc_mcp::engine::Engine;
use ptc_mcp::registry::Registry;
use ptc_mcp::server::PtcServer;
use rmcp::ServiceExt;

/// Exit status for a config that cannot be used.
const CONFIG_ERROR: u8 = 2;
/// How long the sandbox backend may take to clean up when the server stops.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Programmatic tool calling for any MCP client: the model writes one Python program, ptc-mcp runs it in a
/// sandboxed interpreter where every downstream MCP tool is an async function, and only what the program
/// prints comes back. Serves MCP over stdio; logs go to stderr (level from RUST_LOG, default info).
#[derive(Debug, Parser)]
#[command(name = "ptc-mcp", version)]
struct Cli {
    /// The YAML config. Without it: $PTC_MCP_CONFIG, else ./config.yaml, else built-in defaults (no servers).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,

    /// Check whether a sandbox (auto, seatbelt, landlock, docker or none) can run programs here, print what
    /// it enforces and what that guarantees, or why it cannot run, and exit (status 0 when it can). Uses
    /// execution.python, execution.docker and execution.allow_degraded from the config.
    #[arg(long, value_name = "SANDBOX")]
    check_sandbox: Option<String>,
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    ptc_backends::run_helper_if_requested(&args);
    let cli = Cli::parse_from(args);
    init_logging();
    let (config, source) = match Config::load(cli.config.as_deref()) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("ptc-mcp: {e}");
            return ExitCode::from(CONFIG_ERROR);
        }
    };
    protect_from_same_user_processes();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ptc-mcp: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(sandbox) = cli.check_sandbox {
        return runtime.block_on(check_sandbox(&sandbox, &config));
    }
    let code = runtime.block_on(serve(config, source));
    // A pending read of stdin cannot be cancelled, so leave without waiting for the runtime to wind down.
    std::process::exit(code);
}

/// `--check-sandbox`: probe one backend and report.
async fn check_sandbox(sandbox: &str, config: &Config) -> ExitCode {
    let kind: SandboxKind = match serde_yaml_ng::from_str(sandbox) {
        Ok(kind) => kind,
        Err(_) => {
            eprintln!("ptc-mcp: unknown sandbox '{sandbox}'; expected auto, seatbelt, landlock, docker or none");
            return ExitCode::from(CONFIG_ERROR);
        }
    };
    let Some(settings) = backend_settings(config) else {
        return ExitCode::FAILURE;
    };
    let availability = ptc_backends::select(kind, &settings).probe().await;
    let mut report = format!("{}: {}\n", kind.resolve_auto(), availability.describe());
    if let Some(mode) = guarantees::mode_of(kind, &availability) {
        let what = if availability.is_usable() {
            "what it guarantees here"
        } else {
            "what it would guarantee with execution.allow_degraded: true"
        };
        report.push_str(&format!("{what} ({}, README \"Sandboxes\"):\n", guarantees::name(mode).replace('`', "")));
        for line in guarantees::lines(mode) {
            report.push_str(&format!("  {}\n", line.replace('`', "")));
        }
    }
    // A reader that stopped early (`| head -1`) is no error of ours.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), report.as_bytes());
    if availability.is_usable() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn backend_settings(config: &Config) -> Option<BackendSettings> {
    match std::env::current_exe() {
        Ok(helper) => Some(BackendSettings {
            python: config.execution.python.clone(),
            helper,
            docker: config.execution.docker.clone(),
            allow_degraded: config.execution.allow_degraded,
        }),
        Err(e) => {
            eprintln!("ptc-mcp: cannot find its own executable (needed to start sandboxes): {e}");
            None
        }
    }
}

async fn serve(config: Config, source: ConfigSource) -> i32 {
    let registry = match Registry::start(&config) {
        Ok(registry) => registry,
        Err(e) => {
            eprintln!("ptc-mcp: config error: {e}");
            return i32::from(CONFIG_ERROR);
        }
    };
    let Some(settings) = backend_settings(&config) else {
        return 1;
    };
    let backend = ptc_backends::select(config.execution.sandbox, &settings);
    let engine = Arc::new(Engine::new(backend, Arc::clone(&registry), config.execution.clone()));
    tokio::spawn(announce(Arc::clone(&engine), config, source));
    let serving = PtcServer::new(registry, Arc::clone(&engine)).serve(rmcp::transport::stdio());
    tokio::select! {
        served = serving => match served {
            Ok(server) => {
                tokio::select! {
                    _ = server.waiting() => {}
                    _ = shutdown_signal() => {}
                }
            }
            Err(e) => tracing::info!("no MCP session: {e}"),
        },
        _ = shutdown_signal() => {}
    }
    // Runs still going are abandoned with the process; ready runners and what the backend keeps outside the
    // process go now.
    if tokio::time::timeout(SHUTDOWN_GRACE, engine.shutdown()).await.is_err() {
        tracing::warn!("the sandbox backend did not shut down within {}s", SHUTDOWN_GRACE.as_secs());
    }
    0
}

/// The one start-up line: version, sandbox and its availability, configured servers.
async fn announce(engine: Arc<Engine>, config: Config, source: ConfigSource) {
    let availability = engine.availability().await.describe();
    let servers: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
    let servers = if servers.is_empty() { "none".to_string() } else { servers.join(", ") };
    let source = match source {
        ConfigSource::File(path) => path.display().to_string(),
        ConfigSource::Defaults => format!("none found (no --config, ${CONFIG_ENV} or ./config.yaml)"),
    };
    tracing::info!(
        "ptc-mcp {} serving MCP on stdio; config: {source}; sandbox {}: {availability}; servers: {servers}",
        env!("CARGO_PKG_VERSION"),
        engine.backend_kind(),
    );
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

fn init_logging() {
    // rmcp's HTTP worker logs every failed connection attempt at ERROR, with the full URL (whose query may
    // hold a secret); the registry already says why a server is unavailable, once per distinct reason. So
    // it stays off unless RUST_LOG names it.
    const WORKER: &str = "rmcp::transport::worker";
    let mut directives =
        std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| "info,rmcp=warn".to_string());
    if !directives.contains(WORKER) {
        directives.push_str(&format!(",{WORKER}=off"));
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("info,rmcp=warn,{WORKER}=off")));
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
