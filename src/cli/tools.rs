//! `ptc-mcp tools`: the callable tools, as `list_callable_tools` gives them.

use crate::config::Config;
use crate::discovery::{ListRequest, Listing};

use super::{SUCCESS, start_app};

#[derive(Debug, Clone, Default)]
pub struct ToolsArgs {
    pub query: Option<String>,
    pub signatures: bool,
    pub json: bool,
}

/// Prints the callable tools as `list_callable_tools(query=…, detail=…)` lists them: one name a line (best
/// first for a query), the JSON array with `json`, or the Python signatures; servers that are missing are
/// named on stderr.
pub async fn tools(config: &Config, args: &ToolsArgs) -> u8 {
    let request = ListRequest {
        query: args.query.clone().filter(|q| !q.trim().is_empty()),
        signatures: args.signatures,
        limit: None,
    };
    let app = match start_app(config) {
        Ok(app) => app,
        Err(status) => return status,
    };
    app.wait_for_servers().await;
    match request.list(&app.registry.catalog()) {
        Listing::Names(names) if args.json => println!("{}", serde_json::to_string(&names).expect("names serialise")),
        Listing::Names(names) => names.iter().for_each(|name| println!("{name}")),
        Listing::Signatures(text) if args.json => {
            println!("{}", serde_json::to_string(&text).expect("text serialises"))
        }
        Listing::Signatures(text) => println!("{text}"),
    }
    let mut problems = app.registry.unavailable();
    problems.extend(app.registry.catalog().collisions.iter().cloned());
    for problem in problems {
        eprintln!("ptc-mcp: missing tools: {problem}");
    }
    app.shutdown().await;
    SUCCESS
}
