//! What a downstream connection may cost, on every transport: how long one message may be (a stdio line, an
//! HTTP body, an SSE event) and how long a call is waited for.

use std::time::Duration;

use crate::config::ExecutionConfig;

/// Messages and results from this size on are parsed and read on a blocking thread (handing work over
/// costs far less), so that the runtime thread keeps serving every other run meanwhile.
pub const OFF_THREAD_BYTES: usize = 256 * 1024;

/// Limits for downstream connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest JSON-RPC message accepted; a longer answer fails its request at once.
    pub max_message_bytes: usize,
    /// How long a call waits for its answer (`tool_call_timeout_seconds`): after that, nobody reads it.
    pub call_wait: Duration,
}

impl Limits {
    pub fn new(execution: &ExecutionConfig) -> Limits {
        Limits {
            max_message_bytes: max_message_bytes(execution.max_tool_result_bytes),
            call_wait: execution.tool_call_timeout(),
        }
    }
}

/// Room for a tool result of `max_tool_result_bytes` (the registry enforces that limit with a clear message)
/// sent twice, as some servers do (as text and as structured content), plus 1 MiB for JSON escaping and the
/// envelope; never below rmcp's default of 16 MiB, so that other large messages (a long tool list) still fit
/// when the result limit is small.
fn max_message_bytes(max_tool_result_bytes: usize) -> usize {
    let roomy = max_tool_result_bytes.saturating_mul(2).saturating_add(1 << 20);
    roomy.max(16 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_limits_leave_room_for_a_doubled_payload_and_keep_rmcps_floor() {
        assert_eq!(max_message_bytes(1000), 16 << 20);
        assert_eq!(max_message_bytes(64 << 20), (128 << 20) + (1 << 20));
    }
}
