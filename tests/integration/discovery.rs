//! Finding tools and learning their arguments: `list_callable_tools(query, detail, limit)`, `inspect_tool(format)`
//! and the same helpers inside programs, against the demo server of config.example.yaml.

use serde_json::{Value, json};

use crate::common::*;

/// ptc-mcp on the demo server (tests/servers/demo_server.py, as config.example.yaml names it).
async fn demo() -> Ptc {
    let entry = format!(
        "  - name: financial-data\n    command: python3\n    args: [{}]\n",
        json!(repo_path("tests/servers/demo_server.py").display().to_string())
    );
    Ptc::start(&config(&[entry], "")).await
}

/// The golden signatures of the demo server's tools (tests/fixtures/signatures/financial-data.py, made from
/// its recorded tools/list by the unit tests), one per tool.
fn golden_signatures() -> Vec<String> {
    let text = std::fs::read_to_string(repo_path("tests/fixtures/signatures/financial-data.py")).unwrap();
    text.split("\n\n\n").map(|s| if s.ends_with('\n') { s.to_string() } else { format!("{s}\n") }).collect()
}

#[apply(integration_test!)]
async fn without_new_arguments_the_listing_is_the_seeds() {
    let ptc = demo().await;
    let result = ptc.call("list_callable_tools", json!({})).await;
    assert_eq!(result.content.len(), 1);
    assert_eq!(
        text_block(&result, 0),
        "[\"mcp__financial_data__list_tickers\",\"mcp__financial_data__query_financials\"]"
    );
    let inspection = ptc.call("inspect_tool", json!({"tool_name": "mcp__financial_data__list_tickers"})).await;
    let value: Value = serde_json::from_str(&text_block(&inspection, 0)).unwrap();
    assert_eq!(value["inputSchema"], json!({"type": "object", "properties": {}}));
}

#[apply(integration_test!)]
async fn a_query_ranks_the_tools_and_signatures_replace_names() {
    let ptc = demo().await;
    let ranked = ptc.call("list_callable_tools", json!({"query": "ticker"})).await;
    assert_eq!(
        text_block(&ranked, 0),
        "[\"mcp__financial_data__list_tickers\",\"mcp__financial_data__query_financials\"]"
    );
    let limited = ptc.call("list_callable_tools", json!({"query": "ticker", "limit": 1})).await;
    assert_eq!(text_block(&limited, 0), "[\"mcp__financial_data__list_tickers\"]");
    let unrelated = ptc.call("list_callable_tools", json!({"query": "weather forecast"})).await;
    assert_eq!(text_block(&unrelated, 0), "[]");

    let signatures = ptc
        .call("list_callable_tools", json!({"query": "quarterly revenue", "detail": "signatures", "limit": 2}))
        .await;
    let golden = golden_signatures();
    assert_eq!(text_block(&signatures, 0), golden[0]);
    let all = ptc.call("list_callable_tools", json!({"detail": "signatures"})).await;
    assert_eq!(text_block(&all, 0), format!("{}\n\n{}", golden[1], golden[0]));
}

#[apply(integration_test!)]
async fn a_search_that_matches_nothing_says_so_and_how_many_tools_there_are() {
    let ptc = demo().await;
    let note = "no tool matches 'weather forecast' (2 tools; list_callable_tools() lists them all)";
    let names = ptc.call("list_callable_tools", json!({"query": "weather forecast"})).await;
    assert_eq!((text_block(&names, 0), text_block(&names, 1)), ("[]".to_string(), note.to_string()));
    let signatures =
        ptc.call("list_callable_tools", json!({"query": "weather forecast", "detail": "signatures"})).await;
    assert_eq!(text_block(&signatures, 0), format!("# {note}"));
    assert_eq!(signatures.content.len(), 1);
}

#[apply(integration_test!)]
async fn deprecated_tools_rank_below_their_replacements() {
    let ptc = Ptc::start(&config(&[mock_server("fs", &["--deprecated"])], "")).await;
    for query in ["read file", "read"] {
        let found: Vec<String> =
            serde_json::from_str(&text_block(&ptc.call("list_callable_tools", json!({"query": query})).await, 0))
                .unwrap();
        let position = |name: &str| found.iter().position(|n| n == name);
        let (old, new) = (position("mcp__fs__read_file"), position("mcp__fs__read_text_file"));
        assert!(new.is_some() && old > new, "{query}: {found:?}");
    }
}

#[apply(integration_test!)]
async fn inspect_tool_shows_the_python_signature_on_request() {
    let ptc = demo().await;
    let result = ptc
        .call("inspect_tool", json!({"tool_name": "mcp__financial_data__query_financials", "format": "python"}))
        .await;
    assert_ne!(result.is_error, Some(true));
    assert_eq!(text_block(&result, 0), golden_signatures()[0]);
}

#[apply(integration_test!)]
async fn bad_discovery_arguments_are_errors_that_say_what_is_expected() {
    let ptc = demo().await;
    let cases = [
        ("list_callable_tools", json!({"detail": "full"}), "detail must be \"names\" or \"signatures\", got \"full\""),
        ("list_callable_tools", json!({"limit": 0}), "limit must be an integer of at least 1, got 0"),
        ("inspect_tool", json!({"tool_name": "x", "format": "yaml"}), "format must be \"json\" or \"python\""),
    ];
    for (tool, arguments, expected) in cases {
        let result = ptc.call(tool, arguments).await;
        assert_eq!(result.is_error, Some(true));
        assert!(text_block(&result, 0).contains(expected), "{}", text_block(&result, 0));
    }
}

#[apply(integration_test!)]
async fn the_helpers_in_programs_take_the_same_arguments() {
    let ptc = demo().await;
    let code = "print(list_callable_tools(query='revenue'))\n\
                sig = await list_callable_tools(query='revenue', detail='signatures')\n\
                print(sig.splitlines()[0])\n\
                print(inspect_tool(tool_name='mcp__financial_data__list_tickers', format='python').splitlines()[0])\n\
                try:\n    list_callable_tools(detail='everything')\nexcept ToolError as e:\n    print(e)";
    let run = ptc.execute(code).await;
    run.expect_ok();
    assert_eq!(
        run.structured()["output"],
        json!(
            "['mcp__financial_data__query_financials']\n\
             async def mcp__financial_data__query_financials(\n\
             async def mcp__financial_data__list_tickers() -> Any:  # no output schema: inspect the result\n\
             list_callable_tools: detail must be \"names\" or \"signatures\", got \"everything\"\n"
        )
    );
}

#[apply(integration_test!)]
async fn the_three_definitions_stay_under_3000_bytes_on_the_wire() {
    let ptc = Ptc::start(&config(&[], "")).await;
    let tools = ptc.client.peer().list_all_tools().await.unwrap();
    let size = serde_json::to_vec(&tools).unwrap().len();
    assert!(size < 3000, "the tools/list entries take {size} bytes");
}

/// What a call costs the model, in bytes: the arguments it writes (compact JSON) and the text it reads back.
async fn cost(ptc: &Ptc, calls: &[(&str, Value)]) -> (usize, usize) {
    let mut written = 0;
    let mut read = 0;
    for (tool, arguments) in calls {
        let result = ptc.call(tool, arguments.clone()).await;
        assert_ne!(result.is_error, Some(true), "{tool}: {}", text_block(&result, 0));
        written += serde_json::to_vec(arguments).unwrap().len();
        read += result.content.iter().filter_map(|b| b.as_text()).map(|t| t.text.len()).sum::<usize>();
    }
    (written, read)
}

/// The measure of discovery's cost: the README task, discovered the original's way (list every name, inspect the tool, run)
/// and with a query for signatures (then run), on the demo server. What comes back costs at most 60 % of
/// today's, and every parameter description is still there.
#[apply(integration_test!)]
async fn the_readme_task_is_discovered_for_at_most_60_percent_of_the_bytes() {
    let ptc = demo().await;
    let code = "tickers = [\"AMZN\", \"MSFT\", \"GOOG\"]\nfor t in tickers:\n    data = await \
                mcp__financial_data__query_financials(ticker=t, statement=\"income\", period=\"quarter\", limit=4)\n    \
                revenues = [q[\"revenue\"] for q in data]\n    print(f\"{t}: \" + \" → \".join(f\"${r/1e9:.1f}B\" for r in revenues))";
    let execute = ("execute_program", json!({"code": code}));
    let name = "mcp__financial_data__query_financials";
    let today = [("list_callable_tools", json!({})), ("inspect_tool", json!({"tool_name": name})), execute.clone()];
    let query = json!({"query": "quarterly revenue", "detail": "signatures", "limit": 2});
    let with_signatures = [("list_callable_tools", query.clone()), execute];
    let (today_written, today_read) = cost(&ptc, &today).await;
    let (new_written, new_read) = cost(&ptc, &with_signatures).await;
    let ratio = new_read as f64 / today_read as f64;
    let with_arguments = (new_written + new_read) as f64 / (today_written + today_read) as f64;
    eprintln!(
        "README task discovery: results {today_read} B -> {new_read} B ({:.1} %); with the arguments written \
         {} B -> {} B ({:.1} %)",
        ratio * 100.0,
        today_written + today_read,
        new_written + new_read,
        with_arguments * 100.0
    );
    assert!(ratio <= 0.6, "{new_read} B is {:.1} % of {today_read} B", ratio * 100.0);

    let listing = text_block(&ptc.call("list_callable_tools", query).await, 0);
    let inspection: Value =
        serde_json::from_str(&text_block(&ptc.call("inspect_tool", json!({"tool_name": name})).await, 0)).unwrap();
    for (key, property) in inspection["inputSchema"]["properties"].as_object().unwrap() {
        let description = property["description"].as_str().unwrap();
        assert!(listing.contains(description), "the description of {key} is missing:\n{listing}");
    }
    assert!(listing.contains(inspection["description"].as_str().unwrap()));
}
