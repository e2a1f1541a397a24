//! How long one message from a downstream may be, on every transport (a stdio line, an HTTP body, an SSE
//! event).

/// Size limits for messages from downstream servers.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest JSON-RPC message accepted; a longer answer fails its request at once.
    pub max_message_bytes: usize,
}

impl Limits {
    /// Room for a tool result of `max_tool_result_bytes` (the registry enforces that limit with a clear
    /// message) sent twice, as some servers do (as text and as structured content), plus 1 MiB for JSON
    /// escaping and the envelope; never below rmcp's default of 16 MiB, so that other large messages (a long
    /// tool list) still fit when the result limit is small.
    pub fn for_results(max_tool_result_bytes: usize) -> Limits {
        let roomy = max_tool_result_bytes.saturating_mul(2).saturating_add(1 << 20);
        Limits { max_message_bytes: roomy.max(16 << 20) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_limits_leave_room_for_a_doubled_payload_and_keep_rmcps_floor() {
        assert_eq!(Limits::for_results(1000).max_message_bytes, 16 << 20);
        assert_eq!(Limits::for_results(64 << 20).max_message_bytes, (128 << 20) + (1 << 20));
    }
}
