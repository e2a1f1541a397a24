//! `ptc-mcp run FILE|-`: one program through the same engine and sandbox as `execute_program`.

use std::io::Read;
use std::path::Path;

use crate::config::Config;
use crate::engine::{Caller, Outcome};

use super::{CONFIG_ERROR, FAILURE, INTERRUPTED, SUCCESS, print_err, print_out, with_app};

/// Runs the program in `file` (`-`: stdin) and prints exactly the `execute_program` text. Exit status 0
/// on success, 1 on a failed run, 2 on a config or sandbox error. SIGINT or SIGTERM cancels the run (its
/// text says what it had done).
pub async fn run(config: &Config, file: &Path) -> u8 {
    let code = match read_program(file) {
        Ok(code) => code,
        Err(e) => {
            print_err(&format!("ptc-mcp: cannot read the program from {}: {e}\n", file.display()));
            return CONFIG_ERROR;
        }
    };
    with_app(config, async |app, stop| {
        tokio::select! {
            () = app.wait_for_servers() => {}
            () = stop.cancelled() => return INTERRUPTED,
        }
        let caller = Caller { session: "cli".to_string(), cancel: stop.clone(), progress: None, approver: None };
        let report = app.engine.execute(&code, caller).await;
        print_out(&format!("{}\n", report.text(config.execution.trace)));
        match report.outcome {
            Outcome::Ok => SUCCESS,
            Outcome::Sandbox => CONFIG_ERROR,
            _ => FAILURE,
        }
    })
    .await
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
