//! Which tools a program names: `ptc-mcp run` waits only for the servers of those.

use std::collections::BTreeSet;

use ruff_python_ast::token::TokenKind;
use unicode_normalization::UnicodeNormalization;

use crate::naming::PREFIX;

/// The helpers that show tools whatever their server: a program that calls one may reach any.
const HELPERS: [&str; 3] = ["list_callable_tools", "inspect_tool", "server_status"];

/// The tools a program may call, as far as its text tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolsNamed {
    /// Only these `mcp__` names, each as the program writes it (the program may not call them all).
    Only(BTreeSet<String>),
    /// Any tool: the program lists or inspects tools, builds a tool's name at run time (a string holding
    /// `mcp__`, as `globals()[f"mcp__{server}__read"]` needs), or could not be read here.
    Any,
}

/// [`ToolsNamed`] of `code`, from ruff's parse (on the caller's thread: see `precheck::tools_named`).
pub(super) fn tools_named(code: &str) -> ToolsNamed {
    let Ok(parsed) = ruff_python_parser::parse_module(code) else {
        return ToolsNamed::Any;
    };
    let mut named = BTreeSet::new();
    for token in parsed.tokens().iter() {
        let (kind, range) = token.as_tuple();
        let text = &code[range];
        // Python reads names NFKC-normalised: `ｍcp__fs__read` calls `mcp__fs__read`.
        let name = if kind == TokenKind::Name && !text.is_ascii() { text.nfkc().collect() } else { text.to_string() };
        match kind {
            TokenKind::Comment => {}
            TokenKind::Name if HELPERS.contains(&name.as_str()) => return ToolsNamed::Any,
            TokenKind::Name if name.starts_with(PREFIX) => {
                named.insert(name);
            }
            _ if text.contains(PREFIX) => return ToolsNamed::Any,
            _ => {}
        }
    }
    ToolsNamed::Only(named)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn only(names: &[&str]) -> ToolsNamed {
        ToolsNamed::Only(names.iter().map(|name| name.to_string()).collect())
    }

    #[test]
    fn tools_called_by_name_are_named_and_comments_do_not_count() {
        let code = "# mcp__notes__write is for later\nr = await mcp__fs__read(path='a')\n\
                    for x in r:\n    print(await mcp__fs__stat(path=x), mcp__git__log)\n";
        assert_eq!(tools_named(code), only(&["mcp__fs__read", "mcp__fs__stat", "mcp__git__log"]));
        assert_eq!(tools_named("print('hi')\n"), only(&[]));
        assert_eq!(tools_named("await ｍcp__fs__read(path='a')\n"), only(&["mcp__fs__read"]));
        assert_eq!(tools_named("await ｌist_callable_tools()\n"), ToolsNamed::Any);
    }

    #[test]
    fn helpers_names_built_at_run_time_and_unreadable_programs_may_reach_any_tool() {
        for code in [
            "print(list_callable_tools())",
            "print(await inspect_tool(tool_name='mcp__fs__read'))",
            "print(server_status())",
            "f = globals()['mcp__' + name]",
            "f = globals()[f'mcp__{server}__read']",
            "print(await mcp__fs__read(path='a')",
        ] {
            assert_eq!(tools_named(code), ToolsNamed::Any, "{code}");
        }
    }
}
