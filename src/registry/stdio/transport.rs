//! The MCP transport over a downstream's stdin/stdout: one JSON-RPC message per line, read with the
//! project's cancellation-safe [`LineReader`] and parsed into rmcp's message types.
//!
//! Unlike rmcp's own stdio transport, which drops a line over its limit without a word (the caller then
//! waits out its timeout), an overlong answer to one of our requests becomes a JSON-RPC error for that
//! request at once, marked so the registry can say how large it was. The connection stays usable.
//!
//! Answers to `tools/call` are read as a tool result directly from the line, typed, with no JSON tree of
//! the whole message in between. (rmcp's generic reading tries every result type in turn through serde's
//! untagged buffering, which holds several copies of a large text at once: the server's peak memory was ~5.7
//! times a 60 MB result; large texts now cost their size once, see [`Cut`]. An 8 MB structured result of
//! 110,000 small rows peaked at 275 MB read as a tree of the whole message and then rebuilt; 184 MB read
//! typed, its tree without spare capacity, see [`tool_result`].)

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use rmcp::model::{
    CallToolResult, ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorCode, ErrorData, RequestId,
    ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

use super::large_texts::Cut;
use super::tool_result;
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
    let cut = Cut::of(&line);
    let unlarge = cut.as_ref().map_or(line.as_slice(), Cut::rest);
    if let Some((id, at)) = answered_call(unlarge, calls) {
        calls.remove(&id);
        match tool_result::read(&unlarge[at]) {
            Ok(Some(mut result)) => {
                let filled = match cut {
                    Some(cut) => cut.fill(&mut result, line).map(|()| result),
                    None => Ok(result),
                };
                return Some(answer(id, filled));
            }
            // Not a tool result (a task handle, say): read as any other message.
            Ok(None) => {}
            Err(error) => return Some(answer(id, Err(error))),
        }
    }
    serde_json::from_slice(&line)
        .map_err(|e| {
            let start = String::from_utf8_lossy(&line[..line.len().min(200)]);
            tracing::debug!("ignored a line from a downstream that is not a JSON-RPC message ({e}): {start}");
        })
        .ok()
}

/// The fields of a message that say whether it answers one of our `tools/call` requests.
#[derive(Deserialize)]
struct Answer<'a> {
    id: Option<RequestId>,
    /// Present even when `null` (which is no tool result, so the call fails at once).
    #[serde(default, borrow, deserialize_with = "tool_result::present")]
    result: Option<&'a RawValue>,
}

/// The id of the message if it answers one of our `tools/call` requests, and where its result lies in it.
fn answered_call(line: &[u8], calls: &HashSet<RequestId>) -> Option<(RequestId, Range<usize>)> {
    // A message is an object (serde would read these fields from an array too).
    if line.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let answer: Answer = serde_json::from_slice(line).ok()?;
    let id = answer.id.filter(|id| calls.contains(id))?;
    let result = answer.result?.get();
    let at = result.as_ptr() as usize - line.as_ptr() as usize;
    Some((id, at..at + result.len()))
}

/// The answer to `tools/call` `id`: its tool result, or an error saying why it has none.
fn answer(id: RequestId, result: serde_json::Result<CallToolResult>) -> RxJsonRpcMessage<RoleClient> {
    match result {
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
        let large = "a \"quoted\" line\n".repeat(10_000);
        let answers = [
            json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "hi"}]}}),
            json!({"jsonrpc": "2.0", "id": 2, "result": {"content": "not a list"}}),
            json!({"jsonrpc": "2.0", "id": 3, "result": null}),
            json!({"jsonrpc": "2.0", "id": 4, "result": {"content": [{"type": "text", "text": large}]}}),
            json!({"jsonrpc": "2.0", "id": 5, "result": {"resultType": "task", "task": {}}}),
        ];
        let input: String = answers.iter().map(|answer| format!("{answer}\n")).collect();
        let mut transport = LineTransport::new(std::io::Cursor::new(input.into_bytes()), tokio::io::sink(), 1 << 20);
        for id in 1..=5 {
            let call = CallToolRequest::new(CallToolRequestParams::new("t"));
            let request = ClientJsonRpcMessage::request(ClientRequest::CallToolRequest(call), RequestId::Number(id));
            transport.send(request).await.unwrap();
        }
        let text = |message: Option<RxJsonRpcMessage<RoleClient>>| match message {
            Some(ServerJsonRpcMessage::Response(response)) => match response.result {
                ServerResult::CallToolResult(result) => result.content[0].as_text().unwrap().text.clone(),
                other => panic!("not a tool result: {other:?}"),
            },
            other => panic!("not a response: {other:?}"),
        };
        assert_eq!(text(Transport::<RoleClient>::receive(&mut transport).await), "hi");
        for id in [2, 3] {
            match Transport::<RoleClient>::receive(&mut transport).await {
                Some(ServerJsonRpcMessage::Error(error)) => {
                    assert_eq!(error.id, Some(RequestId::Number(id)));
                    assert!(error.error.message.starts_with("the server answered with an invalid tool result"));
                }
                other => panic!("not an error: {other:?}"),
            }
        }
        assert_eq!(text(Transport::<RoleClient>::receive(&mut transport).await), large);
        // Not a tool result: read as any other message, not failed as an invalid one.
        let task = Transport::<RoleClient>::receive(&mut transport).await;
        assert!(!matches!(task, Some(ServerJsonRpcMessage::Error(_))), "{task:?}");
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

#[cfg(test)]
mod properties;
