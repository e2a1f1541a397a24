//! Why a tool call gave the program no value. The words of a [`CallError`] are the `ToolError` message the
//! program sees.

use rmcp::ServiceError;

use super::liveness::{self, Loss, LossKind};
use super::result::ResultError;
use super::stdio::BadAnswer;

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("unknown tool '{0}': it is not callable now (see list_callable_tools())")]
    Unknown(String),
    #[error("server '{server}' is down: {reason}")]
    Down { server: String, reason: String },
    /// An OAuth server without usable tokens; the words name the command that fixes it.
    #[error("{0}")]
    NeedsLogin(String),
    #[error("server '{server}' is starting (for {seconds}s so far)")]
    Starting { server: String, seconds: u64 },
    #[error("'{tool}' timed out after {seconds}s (tool_call_timeout_seconds)")]
    TimedOut { tool: String, seconds: f64 },
    #[error("'{tool}' failed: {failure}")]
    Failed { tool: String, failure: Failure },
    #[error("'{0}' is not callable: {why}; it is no longer listed", why = super::task_only::WHY)]
    TaskOnly(String),
    /// The server answered, but its result gives no value.
    #[error("'{tool}' {error}")]
    Result { tool: String, error: ResultError },
}

/// Why a call to a connected server failed.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The server answered with a JSON-RPC error.
    #[error("{message} (JSON-RPC error {code})")]
    JsonRpc { message: String, code: i32 },
    /// The connection is gone; `reason` is what its transport reported, if anything.
    #[error("the connection to server '{server}' was lost{}", .reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Lost { server: String, reason: Option<String> },
    /// The server rejected the configured credentials (the words say what to check).
    #[error("{0}")]
    Credentials(String),
    #[error("server '{server}' sent an answer that cannot be read: {why}")]
    Unreadable { server: String, why: String },
    #[error("server '{server}' sent a malformed result")]
    Malformed { server: String },
    /// A failure that is no lost connection (e.g. an oversized or malformed HTTP response), in the
    /// transport's own words.
    #[error("{0}")]
    Transport(String),
    #[error("{0}")]
    Other(Box<ServiceError>),
}

impl CallError {
    /// The error for `error` from a call to `tool` of `server`. `loss` is what the session's transport
    /// reported, if anything: a call can fail with a bare "closed" while the session is torn down for that
    /// loss. `max_result_bytes` words an answer too long for the connection as one over the result limit.
    pub fn of(tool: &str, server: &str, error: ServiceError, loss: Option<Loss>, max_result_bytes: usize) -> Self {
        let failed = |failure| CallError::Failed { tool: tool.to_string(), failure };
        let lost = |loss: Option<Loss>| match loss {
            Some(loss) if loss.kind == LossKind::NeedsLogin => CallError::NeedsLogin(loss.reason),
            Some(loss) if loss.kind == LossKind::Credentials => failed(Failure::Credentials(loss.reason)),
            loss => failed(Failure::Lost { server: server.to_string(), reason: loss.map(|loss| loss.reason) }),
        };
        match error {
            ServiceError::McpError(error) => match BadAnswer::of(&error) {
                Some(BadAnswer::TooLong { bytes }) => CallError::Result {
                    tool: tool.to_string(),
                    error: ResultError::TooLarge { bytes, max: max_result_bytes },
                },
                Some(BadAnswer::Unreadable(why)) => failed(Failure::Unreadable { server: server.to_string(), why }),
                None => failed(Failure::JsonRpc { message: error.message.into_owned(), code: error.code.0 }),
            },
            ServiceError::TransportSend(error) => match liveness::loss_of(&error) {
                Some(own) => lost(Some(own)),
                None => failed(Failure::Transport(error.error.to_string())),
            },
            ServiceError::TransportClosed => lost(loss),
            ServiceError::UnexpectedResponse => failed(Failure::Malformed { server: server.to_string() }),
            other => failed(Failure::Other(Box::new(other))),
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ErrorCode, ErrorData};

    use super::*;

    fn words(error: ServiceError, loss: Option<Loss>) -> String {
        CallError::of("mcp__s__t", "s", error, loss, 1000).to_string()
    }

    #[test]
    fn failures_are_told_in_the_programs_words() {
        let rpc = ServiceError::McpError(ErrorData::new(ErrorCode(-32000), "internal failure", None));
        assert_eq!(words(rpc, None), "'mcp__s__t' failed: internal failure (JSON-RPC error -32000)");
        assert_eq!(
            words(ServiceError::TransportClosed, None),
            "'mcp__s__t' failed: the connection to server 's' was lost"
        );
        assert_eq!(
            words(ServiceError::TransportClosed, Some(Loss::connection("the server answered HTTP 502 Bad Gateway"))),
            "'mcp__s__t' failed: the connection to server 's' was lost: the server answered HTTP 502 Bad Gateway"
        );
        let credentials = Loss::credentials("s", 401);
        assert_eq!(
            words(ServiceError::TransportClosed, Some(credentials.clone())),
            format!("'mcp__s__t' failed: {}", credentials.reason)
        );
        assert_eq!(
            words(ServiceError::UnexpectedResponse, None),
            "'mcp__s__t' failed: server 's' sent a malformed result"
        );
    }
}
