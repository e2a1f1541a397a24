//! `ptc-mcp run FILE|-`: one program through the same engine and sandbox as `execute_program`.

use std::io::Read;
use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::engine::{Caller, Outcome};

use super::{CONFIG_ERROR, FAILURE, SUCCESS, start_app};

/// Runs the program in `file` (`-`: stdin) and prints exactly the `execute_program` text. Exit status 0
/// on success, 1 on a failed run, 2 on a config or sandbox error. SIGINT or SIGTERM cancels the run.
pub async fn run(config: &Config, file: &Path) -> u8 {
    let code = match read_program(file) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ptc-mcp: cannot read the program from {}: {e}", file.display());
            return CONFIG_ERROR;
        }
    };
    let app = match start_app(config) {
        Ok(app) => app,
        Err(status) => return status,
    };
    app.wait_for_servers().await;
    let cancel = CancellationToken::new();
    let execute = app
        .engine
        .execute(&code, Caller { session: "cli".to_string(), cancel: cancel.clone(), progress: None, approver: None });
    tokio::pin!(execute);
    let report = tokio::select! {
        report = &mut execute => report,
        () = crate::serve::stop_requested() => {
            cancel.cancel();
            execute.await
        }
    };
    println!("{}", report.text(config.execution.trace));
    app.shutdown().await;
    match report.outcome {
        Outcome::Ok => SUCCESS,
        Outcome::Sandbox => CONFIG_ERROR,
        _ => FAILURE,
    }
}

fn read_program(file: &Path) -> std::io::Result<String> {
    if file == Path::new("-") {
        let mut code = String::new();
        std::io::stdin().read_to_string(&mut code)?;
        Ok(code)
    } else {
        std::fs::read_to_string(file)
    }
}
