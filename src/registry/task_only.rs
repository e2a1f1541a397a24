//! Downstream tools that their server runs only as tasks (`execution.taskSupport: required`). ptc-mcp calls
//! downstream tools directly, so such a tool is left out of the catalog with the reason, never listed to
//! fail when called. The stdio transport reads the listing itself and keeps the tool's `taskSupport` in its
//! `_meta` (rmcp's `Tool` has no `execution`); over HTTP and SSE, where rmcp reads the listing, the first
//! call's refusal says it, and the tool is left out from then on.

use rmcp::ServiceError;
use rmcp::model::{CallToolResult, ErrorCode, TASKS_EXTENSION_ID, Tool};
use serde_json::Value;

/// Where a transport that reads the listing itself keeps a tool's `execution.taskSupport`, in its `_meta`.
pub const META: &str = "ptc-mcp/taskSupport";

/// Why such a tool is not callable.
pub const WHY: &str = "its server runs it only as an MCP task (execution.taskSupport: required), and ptc-mcp \
                       calls downstream tools directly; call it from an MCP client";

/// The words servers refuse a direct call of such a tool with (the TypeScript SDK's, for 2025-11-25).
const REFUSAL_WORDS: &str = "requires task augmentation";

/// Whether the listing of `tool` says it runs only as a task.
pub fn listed(tool: &Tool) -> bool {
    tool.meta.as_ref().and_then(|meta| meta.0.get(META)).and_then(Value::as_str) == Some("required")
}

/// Whether a call failed because the tool runs only as a task: a 2026-07-28 server's "missing required
/// client capability" naming the tasks extension, or a 2025-11-25 server's refusal in words.
pub fn refused_with(error: &ServiceError) -> bool {
    let ServiceError::McpError(error) = error else { return false };
    let names_tasks = error.data.as_ref().is_some_and(|data| data.to_string().contains(TASKS_EXTENSION_ID));
    (error.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY && names_tasks)
        || error.message.contains(REFUSAL_WORDS)
}

/// Whether an error result says the tool runs only as a task (servers that answer a refusal as one).
pub fn refused_in(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
        && result.content.iter().filter_map(|block| block.as_text()).any(|text| text.text.contains(REFUSAL_WORDS))
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ContentBlock, ErrorData};
    use serde_json::json;

    use super::*;

    #[test]
    fn refusals_are_recognised_from_2026_and_2025_servers_and_nothing_else_is() {
        let missing = |data| {
            ServiceError::McpError(ErrorData::new(ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY, "missing", data))
        };
        assert!(refused_with(&missing(Some(
            json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION_ID: {}}}})
        ))));
        assert!(!refused_with(&missing(Some(json!({"requiredCapabilities": {"elicitation": {}}})))));
        let words = "Tool simulate-research-query requires task augmentation (taskSupport: 'required')";
        assert!(refused_with(&ServiceError::McpError(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, words, None))));
        let refusal = CallToolResult::error(vec![ContentBlock::text(format!("MCP error -32601: {words}"))]);
        assert!(refused_in(&refusal));
        assert!(!refused_in(&CallToolResult::success(vec![ContentBlock::text(words)])), "not an error");
        assert!(!refused_in(&CallToolResult::error(vec![ContentBlock::text("no such row")])));
    }
}
