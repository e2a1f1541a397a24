//! The shell commands: `check`, `tools`, `run`, `login`, `logout`, `sandbox-profile` and `--check-sandbox`. Results go to stdout, logs to stderr;
//! each returns the process's exit status, and each shuts down what it started however it ended: done, its
//! output's reader gone (`| head -1`), or stopped by SIGINT or SIGTERM.

use std::io::Write;

use tokio_util::sync::CancellationToken;

use crate::app::{App, SHUTDOWN_LIMIT};
use crate::config::Config;

mod check;
mod listen;
mod login;
mod run;
mod sandbox;
mod sandbox_profile;
mod tools;

pub use check::check;
pub use listen::{NotAnAddress, listen_address};
pub use login::{login, logout};
pub use run::run;
pub use sandbox::check_sandbox;
pub use sandbox_profile::sandbox_profile;
pub use tools::{ToolsArgs, tools};

/// Exit status: all is well.
pub const SUCCESS: u8 = 0;
/// Exit status: the check found a problem, the program failed.
pub const FAILURE: u8 = 1;
/// Exit status: the config (or the sandbox, for `run`) cannot be used.
pub const CONFIG_ERROR: u8 = 2;
/// Exit status: stopped by SIGINT or SIGTERM before it was done (as shells report an interrupt).
pub const INTERRUPTED: u8 = 130;

/// Starts the servers and the sandbox, runs `command` with them and a token cancelled on SIGINT or SIGTERM
/// (each command decides what stopping early means for it), then shuts everything down. No runner is kept
/// ready (`execution.pool_size`): a command runs one program at most.
async fn with_app(config: &Config, command: impl AsyncFnOnce(&App, &CancellationToken) -> u8) -> u8 {
    let mut config = config.clone();
    config.execution.pool_size = 0;
    let app = match App::start(&config, None) {
        Ok(app) => app,
        Err(e) => {
            print_err(&format!("ptc-mcp: {e}\n"));
            return CONFIG_ERROR;
        }
    };
    let stop = CancellationToken::new();
    let command = command(&app, &stop);
    tokio::pin!(command);
    let status = tokio::select! {
        status = &mut command => status,
        () = crate::stop::requested() => {
            stop.cancel();
            command.await
        }
    };
    app.shutdown(SHUTDOWN_LIMIT).await;
    status
}

/// Writes `text` to stdout. A reader that stopped early (`| head -1`) is no error of ours: the rest goes
/// nowhere, quietly, and the command still shuts down as usual.
pub fn print_out(text: &str) {
    write_quietly(&mut std::io::stdout().lock(), text);
}

/// Writes `text` to stderr, quietly when nobody reads it any more.
pub fn print_err(text: &str) {
    write_quietly(&mut std::io::stderr().lock(), text);
}

fn write_quietly(stream: &mut impl Write, text: &str) {
    let written = stream.write_all(text.as_bytes()).and_then(|()| stream.flush());
    if let Err(e) = written
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        tracing::warn!("cannot write the output: {e}");
    }
}
