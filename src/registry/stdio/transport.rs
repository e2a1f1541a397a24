//! The MCP transport over a downstream's stdin/stdout: one JSON-RPC message per line, read with the
//! project's cancellation-safe [`LineReader`] and parsed into rmcp's message types.
//!
//! Unlike rmcp's own stdio transport, which drops a line over its limit without a word (the caller then
//! waits out its timeout), an overlong answer to one of our requests becomes a JSON-RPC error for that
//! request at once, marked so the registry can say how large it was. The connection stays usable.
//!
//! Answers to `tools/call` are read as a tool result directly, moving each string out of the parsed JSON.
//! (rmcp's generic reading tries every result type in turn through serde's untagged buffering, which holds
//! several copies of a large text at once: the server's peak memory was ~5.7 times a 60 MB result, and is
//! ~2.9 times this way, ~2.1 times once [`large_texts`] read large texts without serde_json's scratch copy,
//! and about the result's size once since the largest text is read in place and moved on to the runner.)

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::model::{
    CallToolResult, ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorCode, ErrorData, RequestId,
    ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

use super::large_texts;
use crate::lines::{Line, LineReader};

/// The key in the `data` of a synthesized error that carries the size of the dropped message.
const OVERSIZED: &str = "ptc-mcp/oversizedMessageBytes";
/// RFC 8259 allows a parser to skip a leading UTF-8 byte order mark; some servers send one.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Newline-delimited JSON-RPC over a reader and a writer (a child's stdout and stdin).
pub struct LineTransport<R, W> {
    reader: LineReader<R>,
    /// Shared with the futures `send` returns (they must be `'static`); `None` once closed.
    writer: Arc<Mutex<Option<W>>>,
    max_line: usize,
    /// Our `tools/call` requests that are not answered (or cancelled) yet.
    calls: HashSet<RequestId>,
}

impl<R: AsyncRead + Unpin, W> LineTransport<R, W> {
    /// Lines longer than `max_line` bytes are not kept (see [`oversized_bytes`]).
    pub fn new(reader: R, writer: W, max_line: usize) -> Self {
        LineTransport {
            reader: LineReader::new(reader, max_line),
            writer: Arc::new(Mutex::new(Some(writer))),
            max_line,
            calls: HashSet::new(),
        }
    }
}

/// The size of the message that a JSON-RPC error from [`LineTransport`] stands for, if it stands for one
/// that was too long to accept.
pub fn oversized_bytes(error: &ErrorData) -> Option<usize> {
    usize::try_from(error.data.as_ref()?.get(OVERSIZED)?.as_u64()?).ok()
}

impl<R, W> Transport<RoleClient> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        match &item {
            ClientJsonRpcMessage::Request(request) if matches!(request.request, ClientRequest::CallToolRequest(_)) => {
                self.calls.insert(request.id.clone());
            }
            // A cancelled call may never be answered.
            ClientJsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) = &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.calls.remove(id);
                }
            }
            _ => {}
        }
        let writer = Arc::clone(&self.writer);
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            // One lock per message: concurrent sends never interleave their lines.
            let mut writer = writer.lock().await;
            let writer = writer
                .as_mut()
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotConnected, "the transport is closed"))?;
            writer.write_all(&line).await?;
            writer.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            match self.reader.next_line().await {
                Ok(Line::Complete(_)) => {
                    // Taken, not borrowed: a large result's text is read into the line's own buffer.
                    if let Some(message) = parse(self.reader.take_line(), &mut self.calls) {
                        return Some(message);
                    }
                }
                Ok(Line::TooLong { len, id }) => match id.and_then(|id| serde_json::from_value::<RequestId>(id).ok()) {
                    Some(id) => {
                        self.calls.remove(&id);
                        return Some(oversized(id, len, self.max_line));
                    }
                    None => tracing::warn!(
                        "a downstream sent a message of {len} bytes without a request id, more than the {} accepted; \
                         it was dropped",
                        self.max_line
                    ),
                },
                Ok(Line::End) => return None,
                Err(error) => {
                    tracing::debug!("a downstream's output ended: {error}");
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Dropping the writer closes the child's stdin: the polite way to ask a stdio server to stop.
        self.writer.lock().await.take();
        Ok(())
    }
}

/// One line as a message; blank lines and lines that are not a JSON-RPC message are skipped (as rmcp and
/// the other SDKs do: answering garbage can start an error storm). `calls` are the ids of our unanswered
/// `tools/call` requests.
fn parse(mut line: Vec<u8>, calls: &mut HashSet<RequestId>) -> Option<RxJsonRpcMessage<RoleClient>> {
    if line.ends_with(b"\r") {
        line.pop();
    }
    if line.starts_with(UTF8_BOM) {
        line.drain(..UTF8_BOM.len());
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    // Kept for the log: parsing consumes the line.
    let start = line[..line.len().min(200)].to_vec();
    let ignored = |e: serde_json::Error| {
        let start = String::from_utf8_lossy(&start);
        tracing::debug!("ignored a line from a downstream that is not a JSON-RPC message ({e}): {start}");
    };
    let mut value = large_texts::parse(line).map_err(ignored).ok()?;
    if let Some(id) = answered_call(&value, calls) {
        calls.remove(&id);
        if let Some(result) = value.get_mut("result").filter(|result| is_complete(result)).map(Value::take) {
            return Some(tool_result(id, result));
        }
    }
    serde_json::from_value(value).map_err(ignored).ok()
}

/// The id of the message if it answers one of our `tools/call` requests.
fn answered_call(message: &Value, calls: &HashSet<RequestId>) -> Option<RequestId> {
    let id = serde_json::from_value::<RequestId>(message.get("id")?.clone()).ok()?;
    calls.contains(&id).then_some(id)
}

/// Whether a result is a complete one (not, say, a task handle): only those are tool results.
fn is_complete(result: &Value) -> bool {
    result.get("resultType").is_none_or(|kind| kind == "complete")
}

/// The answer to `tools/call` `id`: its tool result, or an error saying why `result` is not one.
fn tool_result(id: RequestId, result: Value) -> RxJsonRpcMessage<RoleClient> {
    match serde_json::from_value::<CallToolResult>(result) {
        Ok(result) => ServerJsonRpcMessage::response(ServerResult::CallToolResult(result), id),
        Err(e) => ServerJsonRpcMessage::error(
            ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                format!("the server answered with an invalid tool result: {e}"),
                None,
            ),
            Some(id),
        ),
    }
}

/// The error that answers request `id` in place of a message of `len` bytes that was not accepted.
fn oversized(id: RequestId, len: usize, max_line: usize) -> RxJsonRpcMessage<RoleClient> {
    let message = format!("the server sent a message of {len} bytes, more than the {max_line} this connection accepts");
    let data: Value = json!({ OVERSIZED: len });
    ServerJsonRpcMessage::error(ErrorData::new(ErrorCode::INTERNAL_ERROR, message, Some(data)), Some(id))
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolRequest, CallToolRequestParams, PingRequest};
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn received(input: &[u8], max_line: usize) -> Vec<Value> {
        let mut transport = LineTransport::new(std::io::Cursor::new(input.to_vec()), tokio::io::sink(), max_line);
        let mut out = Vec::new();
        while let Some(message) = Transport::<RoleClient>::receive(&mut transport).await {
            out.push(serde_json::to_value(message).unwrap());
        }
        out
    }

    #[tokio::test]
    async fn messages_are_parsed_and_a_bom_blank_lines_and_garbage_are_tolerated() {
        let input = b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\r\n\n   \nnot json\n[1,2]\n\
                      {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}";
        let got = received(input, 1000).await;
        assert_eq!(
            got,
            [
                json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
                json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            ]
        );
    }

    #[tokio::test]
    async fn an_overlong_answer_becomes_an_error_for_its_request_and_the_next_message_still_arrives() {
        let long = format!("{{\"jsonrpc\":\"2.0\",\"result\":{{\"t\":\"{}\"}},\"id\":\"r-7\"}}", "x".repeat(500));
        let input = format!("{long}\n{}\n{{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{{}}}}\n", "y".repeat(300));
        let got = received(input.as_bytes(), 100).await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0]["id"], json!("r-7"));
        let error: ErrorData = serde_json::from_value(got[0]["error"].clone()).unwrap();
        assert_eq!(oversized_bytes(&error), Some(long.len()));
        assert_eq!(
            error.message,
            format!("the server sent a message of {} bytes, more than the 100 this connection accepts", long.len())
        );
        assert_eq!(got[1], json!({"jsonrpc": "2.0", "id": 8, "result": {}}));
        assert_eq!(oversized_bytes(&ErrorData::internal_error("other", None)), None);
    }

    #[tokio::test]
    async fn answers_to_tools_call_are_read_as_tool_results_or_fail_their_call() {
        let answers = concat!(
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":\"not a list\"}}\n",
        );
        let mut transport = LineTransport::new(std::io::Cursor::new(answers.as_bytes()), tokio::io::sink(), 1000);
        for id in [1, 2] {
            let call = CallToolRequest::new(CallToolRequestParams::new("t"));
            let request = ClientJsonRpcMessage::request(ClientRequest::CallToolRequest(call), RequestId::Number(id));
            transport.send(request).await.unwrap();
        }
        match Transport::<RoleClient>::receive(&mut transport).await {
            Some(ServerJsonRpcMessage::Response(response)) => match response.result {
                ServerResult::CallToolResult(result) => assert_eq!(result.content[0].as_text().unwrap().text, "hi"),
                other => panic!("not a tool result: {other:?}"),
            },
            other => panic!("not a response: {other:?}"),
        }
        match Transport::<RoleClient>::receive(&mut transport).await {
            Some(ServerJsonRpcMessage::Error(error)) => {
                assert_eq!(error.id, Some(RequestId::Number(2)));
                assert!(error.error.message.starts_with("the server answered with an invalid tool result"));
            }
            other => panic!("not an error: {other:?}"),
        }
        assert!(transport.calls.is_empty(), "answered calls are forgotten");
    }

    #[tokio::test]
    async fn sent_messages_are_whole_lines_and_close_shuts_the_writer() {
        let (writer, mut peer) = tokio::io::duplex(1 << 16);
        let mut transport = LineTransport::new(tokio::io::empty(), writer, 1000);
        let ping = TxJsonRpcMessage::<RoleClient>::request(
            ClientRequest::PingRequest(PingRequest::default()),
            RequestId::Number(3),
        );
        transport.send(ping.clone()).await.unwrap();
        Transport::<RoleClient>::close(&mut transport).await.unwrap();
        assert!(transport.send(ping).await.is_err());
        let mut written = String::new();
        peer.read_to_string(&mut written).await.unwrap();
        assert_eq!(written, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n");
    }
}
