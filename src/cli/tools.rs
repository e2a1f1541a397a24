//! `ptc-mcp tools`: the callable tools, as `list_callable_tools` gives them.

use crate::app::App;
use crate::config::Config;

use super::{CONFIG_ERROR, SUCCESS};

#[derive(Debug, Clone, Default)]
pub struct ToolsArgs {
    pub query: Option<String>,
    pub signatures: bool,
    pub json: bool,
}

/// Prints the callable tools, one name a line (or the JSON array with `json`); servers that are missing
/// are named on stderr.
pub async fn tools(config: &Config, args: &ToolsArgs) -> u8 {
    if args.query.is_some() || args.signatures {
        eprintln!(
            "ptc-mcp: tools --query and --signatures need tool search and Python signatures (issue 11), which \
             this build does not have yet; run ptc-mcp tools without them"
        );
        return CONFIG_ERROR;
    }
    let app = match App::start(config, None) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("ptc-mcp: {e}");
            return CONFIG_ERROR;
        }
    };
    app.wait_for_servers().await;
    let names = app.registry.catalog().names();
    if args.json {
        println!("{}", serde_json::to_string(&names).expect("names serialise"));
    } else {
        for name in &names {
            println!("{name}");
        }
    }
    let mut problems = app.registry.unavailable();
    problems.extend(app.registry.catalog().collisions.iter().cloned());
    for problem in problems {
        eprintln!("ptc-mcp: missing tools: {problem}");
    }
    app.shutdown().await;
    SUCCESS
}
