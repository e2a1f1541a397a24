use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::config::ToolFilter;
use crate::registry::ToolEntry;
use crate::signatures;

/// The tools of backends/tests/test_checks.py, from schemas.
pub(super) fn catalog() -> Arc<Catalog> {
    let tools = [
        json!({"name": "query", "inputSchema": {"type": "object", "required": ["ticker"], "properties": {
            "ticker": {"type": "string"},
            "statement": {"enum": ["income", "balance"], "default": "income"},
            "limit": {"type": "integer", "default": 4},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "from": {"type": "string"},
            "size": {"enum": [1, 2.5, true, null]}}}}),
        json!({"name": "open", "inputSchema": {"type": "object", "additionalProperties": true}}),
        json!({"name": "list", "inputSchema": {"type": "object", "additionalProperties": false}}),
        json!({"name": "rows", "inputSchema": {"type": "object", "properties": {
            "items": {"type": "array"}, "filter": {"type": "object"}}}}),
    ];
    let entries = tools.into_iter().map(|tool| Arc::new(ToolEntry::new("demo", serde_json::from_value(tool).unwrap())));
    Arc::new(Catalog::build(entries, &ToolFilter::All))
}

/// Programs whose tool calls are all sound, of the shapes models write.
const SOUND: &[&str] = &[
    "print(1)",
    "r = await mcp__demo__query(ticker='A')\nprint(r['x'])",
    "r = await mcp__demo__query(ticker='A', statement='balance', limit=2, ratio=1, flag=False, from_='2020')",
    "print(await mcp__demo__query(ticker='A', limit=2.0, ratio=-1.5, size=1.0))",
    "print(await mcp__demo__query(ticker='A', size=True))\nprint(await mcp__demo__query(ticker='A', size=None))",
    "print(await mcp__demo__query(ticker='A', limit=-3, size=+2.5))",
    "import asyncio\nr = await asyncio.gather(mcp__demo__query(ticker='A'), *[mcp__demo__query(ticker=t) for t in 'BC'])",
    "import asyncio\nt = asyncio.create_task(mcp__demo__query(ticker='A'))\nprint(await t)",
    "import asyncio\ncalls = []\nfor t in 'AB':\n    calls.append(mcp__demo__query(ticker=t))\nprint(await asyncio.gather(*calls))",
    "def make():\n    return mcp__demo__query(ticker='A')\nprint(await make())",
    "f = lambda t: mcp__demo__query(ticker=t)\nprint(await f('A'))",
    "args = {'tickr': 'A'}\nprint(await mcp__demo__query(**args))",
    "n = 'many'\nprint(await mcp__demo__query(ticker='A', limit=n, statement=n))",
    "print(await mcp__demo__open(whatever=1, more=[2]))",
    "print(await mcp__demo__list())",
    "print(await mcp__demo__rows(items=[1, 2], filter={'a': 1}))\nprint(await mcp__demo__rows(items=(1,)))",
    "async def main():\n    async with x:\n        return [await mcp__demo__query(ticker=t) for t in 'AB']\nprint(await main())",
    "tool = mcp__demo__list\nprint(await tool())",
    "print(f'{(await mcp__demo__query(ticker=\"A\"))[\"x\"]}')",
    "s = 'mcp__demo__nothing'\nprint(s)  # mcp__demo__nothing either",
    "print(await mcp__demo__query(ticker='A', ratio=1j, limit=...))",
    // Python reads identifiers NFKC-normalised: a fullwidth letter is its ASCII one, in a name or a keyword.
    "print(await \u{ff4d}cp__demo__query(\u{ff54}icker='A'))\nprint(await mcp\u{ff3f}_demo__list())",
    "print('\u{e9}t\u{e9}', '\u{ff4d}cp__demo__nothing')",
];

/// Mistakes: the runner's check reports each, so the server must not prove any sound.
const MISTAKES: &[&str] = &[
    "a = await mcp__demo__qurey(ticker='A')",
    "b = await mcp__demo__query(tickr='A')",
    "c = await mcp__demo__query(ticker=5)",
    "c = await mcp__demo__query(ticker='A', statement='incme')",
    "c = await mcp__demo__query(ticker='A', statement=b'income')",
    "c = await mcp__demo__query(ticker='A', statement=['income'])",
    "c = await mcp__demo__query(ticker='A', limit='many')",
    "c = await mcp__demo__query(ticker='A', limit=2.5)",
    "c = await mcp__demo__query(ticker='A', limit=1e400)",
    "c = await mcp__demo__query(ticker='A', limit=True)",
    "c = await mcp__demo__query(ticker='A', ratio=float('nan'), size=1.5)",
    "c = await mcp__demo__query(ticker='A', size=False)",
    "c = await mcp__demo__query(ticker='A', size=2)",
    "c = await mcp__demo__query(ticker='A', size=1.0000001)",
    "c = await mcp__demo__query(ticker='A', flag=1)",
    "d = await mcp__demo__query('A')",
    "f = await mcp__demo__query(limit=1)",
    "mcp__demo__query(ticker='A')",
    "e = mcp__demo__query(ticker='A')\nprint(e['revenue'])",
    "e: object = mcp__demo__query(ticker='A')",
    "print(mcp__demo__query(ticker='A')['x'])",
    "print(mcp__demo__query(ticker='A').result)",
    "for row in mcp__demo__query(ticker='A'):\n    pass",
    "print([r for r in mcp__demo__query(ticker='A')])",
    "await mcp__demo__secret()",
    "await mcp__demo__list(x=1)",
    "print(await mcp__demo__rows(items={'a': 1}))",
    "await \u{ff4d}cp__demo__query(tickr='A')",
    "print(await mcp__demo__list())\nawait \u{ff4d}cp__demo__qurey()",
    "c = await mcp__demo__query(\u{ff54}ickr='A')",
    "e = mcp\u{ff3f}_demo__query(ticker='A')\nprint(e['x'])",
];

/// Sound or not, only the runner's check can tell: its names bound, arguments it evaluates itself.
const FOR_THE_RUNNER: &[&str] = &[
    "c = await mcp__demo__query(ticker='A', limit=-True)",
    "c = await mcp__demo__query(ticker='A', limit=1 + 1)",
    "c = await mcp__demo__query(ticker='A', limit=123456789012345678901234567890)",
    "d = await mcp__demo__query(*['A'])",
    "async def mcp__demo__query(*a):\n    return a\nprint(await mcp__demo__query(1))",
    "import json as mcp__mine__json\nprint(mcp__mine__json.dumps(1))",
    "def f(mcp__mine__a):\n    return mcp__mine__a",
    "def f():\n    global mcp__mine__g\n    mcp__mine__g = 1",
    "try:\n    f = mcp__demo__maybe\nexcept NameError:\n    f = None",
    "mcp__demo__query = print\nmcp__demo__query(1)",
    "del mcp__demo__list",
    "print(x.mcp__demo__list)",
    "x = (mcp__demo__list",
    "print(x.\u{ff4d}cp__demo__list)",
    "\u{ff4d}cp__demo__list = print",
];

fn sound(code: &str) -> bool {
    calls_are_sound(code, &catalog())
}

#[test]
fn programs_of_the_usual_shapes_are_proven_sound() {
    for code in SOUND {
        assert!(sound(code), "not proven sound:\n{code}");
    }
}

#[test]
fn mistakes_and_what_only_the_runner_judges_are_left_to_it() {
    for code in MISTAKES.iter().chain(FOR_THE_RUNNER) {
        assert!(!sound(code), "proven sound:\n{code}");
    }
}

#[test]
fn a_program_longer_than_the_bound_is_left_to_the_runner() {
    let call = "print(await mcp__demo__list())\n";
    let long = call.repeat(MAX_PROGRAM_BYTES / call.len() + 1);
    assert!(!sound(&long));
    assert!(sound(&call.repeat(MAX_PROGRAM_BYTES / call.len())));
}

/// The promise the shortcut rests on: whatever the server proves sound, the runner's check finds nothing
/// wrong with. Every program here, sound or not, goes through both.
#[test]
fn what_the_server_proves_sound_the_runners_check_passes() {
    let catalog = catalog();
    let programs: Vec<&str> = SOUND.iter().chain(MISTAKES).chain(FOR_THE_RUNNER).copied().collect();
    let findings = runner_findings(&catalog, &programs);
    for (code, findings) in programs.iter().zip(&findings) {
        if calls_are_sound(code, &catalog) {
            assert!(findings.is_empty(), "proven sound, but the runner finds {findings:?}:\n{code}");
        }
    }
    // The comparison has teeth: the runner does report each mistake.
    for (code, findings) in programs.iter().zip(&findings).skip(SOUND.len()).take(MISTAKES.len()) {
        assert!(!findings.is_empty(), "the runner finds nothing wrong with:\n{code}");
    }
}

/// The runner's check (backends/src/checks.py) of each program, with the catalog's tools.
pub(super) fn runner_findings(catalog: &Catalog, programs: &[&str]) -> Vec<Vec<String>> {
    let script = "import json, sys\n\
                  sys.path.insert(0, sys.argv[1])\n\
                  import checks\n\
                  tools, programs = json.loads(sys.stdin.read())\n\
                  box = checks.Toolbox(tools, {}, {})\n\
                  print(json.dumps([checks.precheck(code, box)[0] for code in programs]))";
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/backends/src");
    let mut child = Command::new("python3")
        .args(["-I", "-S", "-c", script, source])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let tools: Value = serde_json::from_str(catalog.runner_tools().get()).unwrap();
    let input = serde_json::to_vec(&json!([tools, programs])).unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), &input).unwrap();
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    serde_json::from_slice(&output.stdout).unwrap()
}

/// A hostile program nested as deeply as its length allows: the check's own thread has the stack for it
/// (each is waited for to the end, past the patience of a run).
#[tokio::test]
async fn the_deepest_programs_within_the_bound_are_checked_without_harm() {
    let catalog = catalog();
    let room = MAX_PROGRAM_BYTES - 64;
    let shapes = [
        ("(", ")"),
        ("[", "]"),
        ("-", ""),
        ("not ", ""),
        ("1 if 1 else ", ""),
        ("lambda: ", ""),
        ("await ", ""),
        ("f(", ")"),
        ("1 + ", ""),
        ("2 ** ", ""),
        ("x.", ""),
        ("{1: ", "}"),
        ("-(", ")"),
        ("~", ""),
        ("f\"{", "}\""),
    ];
    for (open, close) in shapes {
        let depth = room / (open.len() + close.len());
        let code = format!("mcp__demo__list\nx = {}1{}\n", open.repeat(depth), close.repeat(depth));
        // Sound or not does not matter here: the thread must come to a verdict.
        check_on_own_thread(&code, &catalog).unwrap().await.unwrap();
    }
    let depth = room / 2;
    let pattern =
        format!("mcp__demo__list\nmatch x:\n    case {}_{}:\n        pass\n", "[".repeat(depth), "]".repeat(depth));
    check_on_own_thread(&pattern, &catalog).unwrap().await.unwrap();
    assert!(proves_sound("print(await mcp__demo__list())", &catalog).await);
}

/// The recorded tools of the third-party servers (tests/fixtures/tools), and a program of the kind models
/// write against them: proven sound, and the runner's check agrees; each planted mistake is left to it.
#[test]
fn a_realistic_program_against_real_servers_tools_is_proven_sound() {
    let entries = ["financial-data", "memory", "time", "everything", "filesystem"].into_iter().flat_map(|server| {
        signatures::tests::entries(&signatures::tests::fixtures().join(format!("tools/{server}.json")), server)
    });
    let catalog = Catalog::build(entries.map(Arc::new), &ToolFilter::All);
    let program = r#"import asyncio
tickers = ["AMZN", "MSFT"]
rows = await mcp__financial_data__query_financials(ticker="AMZN", statement="cashflow", period="quarter", limit=4)
balances = await asyncio.gather(*[mcp__financial_data__query_financials(ticker=t, limit=2) for t in tickers])
now = await mcp__time__get_current_time(timezone="Europe/Paris")
then = await mcp__time__convert_time(source_timezone="UTC", time="16:30", target_timezone="Asia/Tokyo")
graph = await mcp__memory__read_graph()
if not graph["entities"]:
    await mcp__memory__create_entities(entities=[{"name": "AMZN", "entityType": "company", "observations": []}])
tree = await mcp__filesystem__directory_tree(path="/data", excludePatterns=["*.log"])
head = await mcp__filesystem__read_text_file(path="/data/a.txt", head=10)
total = await mcp__everything__get_sum(a=1, b=2.5)
note = await mcp__everything__get_annotated_message(messageType="success", includeImage=False)
print(len(rows), len(balances), now["datetime"], then, total, note)
"#;
    let mistakes = [
        "await mcp__financial_data__query_financials(ticker=\"AMZN\", period=\"yearly\")",
        "await mcp__time__get_current_time(tz=\"UTC\")",
        "await mcp__memory__create_entities(entities={\"name\": \"AMZN\"})",
        "await mcp__filesystem__read_text_file(path=\"/a\", head=\"10\")",
        "await mcp__everything__get_sum(a=1)",
    ];
    assert!(calls_are_sound(program, &catalog));
    let mut programs = vec![program.to_string()];
    for mistake in mistakes {
        let code = format!("{program}{mistake}\n");
        assert!(!calls_are_sound(&code, &catalog), "proven sound:\n{mistake}");
        programs.push(code);
    }
    let findings = runner_findings(&catalog, &programs.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(findings[0], Vec::<String>::new());
    assert!(findings[1..].iter().all(|f| !f.is_empty()), "{findings:?}");
}
