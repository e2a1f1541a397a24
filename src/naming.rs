//! How downstream tools are named inside programs: `mcp__<server>__<tool>`, every character that cannot
//! appear in a Python identifier mapped to `_`.

/// What every tool's name in programs starts with.
pub const PREFIX: &str = "mcp__";

/// Maps a server or tool name to identifier characters (ASCII letters, digits, `_`).
pub fn identifier_part(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

/// The name a downstream tool has in programs, `list_callable_tools` and `inspect_tool`.
pub fn namespaced(server: &str, tool: &str) -> String {
    format!("{}{}", server_prefix(server), identifier_part(tool))
}

/// What the names of a server's tools start with: `mcp__<server>__`.
pub fn server_prefix(server: &str) -> String {
    format!("{PREFIX}{}__", identifier_part(server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_identifier_characters_become_underscores() {
        assert_eq!(namespaced("financial-data", "query_financials"), "mcp__financial_data__query_financials");
        assert_eq!(namespaced("a.b", "get-item/v2"), "mcp__a_b__get_item_v2");
        assert_eq!(namespaced("s", "héllo wörld"), "mcp__s__h_llo_w_rld");
    }

    #[test]
    fn distinct_names_can_collide_after_mapping() {
        assert_eq!(identifier_part("dup-name"), identifier_part("dup_name"));
    }
}
