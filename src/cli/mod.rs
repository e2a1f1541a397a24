//! The shell commands: `check`, `tools`, `run` and `sandbox-profile`. Results go to stdout, logs to stderr; each returns the
//! process's exit status.

use crate::app::App;
use crate::config::Config;

mod check;
mod run;
mod sandbox_profile;
mod tools;

pub use check::check;
pub use run::run;
pub use sandbox_profile::sandbox_profile;
pub use tools::{ToolsArgs, tools};

/// Exit status: all is well.
pub const SUCCESS: u8 = 0;
/// Exit status: the check found a problem, the program failed.
pub const FAILURE: u8 = 1;
/// Exit status: the config (or the sandbox, for `run`) cannot be used.
pub const CONFIG_ERROR: u8 = 2;

/// Starts the servers and the sandbox for one command, or says why it cannot (the exit status to return).
fn start_app(config: &Config) -> Result<App, u8> {
    App::start(config, None).map_err(|e| {
        eprintln!("ptc-mcp: {e}");
        CONFIG_ERROR
    })
}
