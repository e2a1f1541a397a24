//! Human approval inside programs (`tools.confirm`): a call to a matching tool goes out only once the
//! person behind the client says yes. The engine decides which calls need it and bounds the wait
//! (`tools.confirm_timeout_seconds`); how to ask is the caller's [`Approver`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use globset::GlobSet;
use serde_json::{Map, Value};

/// Which calls need approval, and how long one may wait for it.
#[derive(Debug, Clone)]
pub struct ConfirmPolicy {
    pub tools: GlobSet,
    pub timeout: Duration,
}

/// One call waiting for approval.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub tool: String,
    pub arguments: Map<String, Value>,
    /// The program's line the call was made on, when known.
    pub line: Option<u32>,
}

impl ApprovalRequest {
    /// What the person is asked.
    pub fn question(&self) -> String {
        let arguments =
            serde_json::to_string_pretty(&Value::Object(self.arguments.clone())).expect("arguments serialise");
        let line = self.line.map_or_else(String::new, |line| format!(" (line {line} of the program)"));
        format!("A program wants to call {}{line} with these arguments:\n{arguments}\nAllow this call?", self.tool)
    }
}

/// Why a call that needs approval was not made; its text is the `ToolError` message the program gets.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("declined by the user")]
    Declined,
    #[error(
        "'{tool}' needs the user's approval (tools.confirm), and nobody can be asked here: run it through an MCP \
         client that supports elicitation, or remove it from tools.confirm"
    )]
    NobodyToAsk { tool: String },
    #[error(
        "'{tool}' needs the user's approval (tools.confirm), but this client does not support MCP elicitation: \
         enable elicitation in the client, or call the tool directly"
    )]
    CannotElicit { tool: String },
    #[error("'{tool}' needs the user's approval (tools.confirm), but asking the client failed: {source}")]
    AskFailed {
        tool: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("'{tool}' needs the user's approval (tools.confirm), but the client went away")]
    ClientGone { tool: String },
    #[error("'{tool}' was not approved within {seconds}s (tools.confirm_timeout_seconds); the call was not made")]
    TimedOut { tool: String, seconds: f64 },
}

/// Asks the person behind the client.
#[async_trait]
pub trait Approver: Send + Sync {
    async fn approve(&self, request: &ApprovalRequest) -> Result<(), Refusal>;

    /// Sends the person to `url` with `message` (MCP URL-mode elicitation, e.g. a hosted server's login);
    /// `true` once they agreed to go. `false` when this client cannot be asked that way or they declined.
    async fn send_to_url(&self, _message: &str, _url: &str) -> bool {
        false
    }
}

/// The approval rules of one run: the policy, and who can be asked (`None`: nobody).
#[derive(Clone)]
pub struct Approval {
    pub policy: ConfirmPolicy,
    pub approver: Option<Arc<dyn Approver>>,
}

impl Approval {
    pub fn needed_for(&self, tool: &str) -> bool {
        self.policy.tools.is_match(tool)
    }

    /// Asks the approver within the policy's timeout.
    pub async fn ask(&self, request: &ApprovalRequest) -> Result<(), Refusal> {
        let tool = || request.tool.clone();
        let Some(approver) = &self.approver else {
            return Err(Refusal::NobodyToAsk { tool: tool() });
        };
        match tokio::time::timeout(self.policy.timeout, approver.approve(request)).await {
            Ok(answer) => answer,
            Err(_) => Err(Refusal::TimedOut { tool: tool(), seconds: self.policy.timeout.as_secs_f64() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_question_names_the_tool_its_line_and_arguments() {
        let request = ApprovalRequest {
            tool: "mcp__db__delete_rows".into(),
            arguments: serde_json::json!({"table": "users"}).as_object().unwrap().clone(),
            line: Some(7),
        };
        assert_eq!(
            request.question(),
            "A program wants to call mcp__db__delete_rows (line 7 of the program) with these arguments:\n{\n  \
             \"table\": \"users\"\n}\nAllow this call?"
        );
    }
}
