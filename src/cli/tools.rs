//! `ptc-mcp tools`: the callable tools, as `list_callable_tools` gives them.

use crate::config::Config;
use crate::discovery::{ListRequest, Listing};

use super::{INTERRUPTED, SUCCESS, print_err, print_out, with_app};

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
    with_app(config, async |app, stop| {
        tokio::select! {
            () = app.wait_for_servers() => {}
            () = stop.cancelled() => return INTERRUPTED,
        }
        let catalog = app.registry.catalog();
        let listing = request.list(&catalog);
        if let Some(note) = listing.no_match_note(&request, &catalog) {
            print_err(&format!("ptc-mcp: {note}\n"));
        }
        let out = match listing {
            Listing::Names(names) if args.json => {
                format!("{}\n", serde_json::to_string(&names).expect("names serialise"))
            }
            Listing::Names(names) => names.iter().map(|name| format!("{name}\n")).collect(),
            Listing::Signatures(text) if args.json => {
                format!("{}\n", serde_json::to_string(&text).expect("text serialises"))
            }
            Listing::Signatures(text) => format!("{text}\n"),
        };
        print_out(&out);
        let mut problems = app.registry.unavailable();
        problems.extend(catalog.collisions.iter().cloned());
        for problem in problems {
            print_err(&format!("ptc-mcp: missing tools: {problem}\n"));
        }
        if let Some(note) = catalog.task_only_note() {
            print_err(&format!("ptc-mcp: {note}\n"));
        }
        SUCCESS
    })
    .await
}
