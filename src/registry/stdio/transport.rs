//! The MCP transport over a downstream's stdin/stdout: one JSON-RPC message per line, read with the
//! project's cancellation-safe [`LineReader`] and parsed into rmcp's message types.
//!
//! Unlike rmcp's own stdio transport, which drops a line it cannot take without a word (the caller then
//! waits out its timeout), an answer to one of our calls that is too long or cannot be read becomes a
//! JSON-RPC error for that call at once, marked so the registry can say what was wrong (see [`BadAnswer`]).
//! The connection stays usable.
//!
//! Answers to `tools/call` are read as a tool result directly from the line, typed, with no JSON tree of
//! the whole message in between. (rmcp's generic reading tries every result type in turn through serde's
//! untagged buffering, which holds several copies of a large text at once: the server's peak memory was ~5.7
//! times a 60 MB result; large texts now cost their size once, see [`Cut`]. An 8 MB structured result of
//! 110,000 small rows peaked at 275 MB read as a tree of the whole message and then rebuilt; 184 MB read
//! typed, its tree without spare capacity, see [`tool_result`].) A long line is parsed on a blocking thread:
//! the runtime thread serves every other run meanwhile.

use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

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
use tokio::task::JoinHandle;

use super::super::held::HeldResult;
use super::super::limits::OFF_THREAD_BYTES;
use super::super::task_only;
use super::calls::Calls;
use super::large_texts::Cut;
use super::tool_result;
use crate::lines::{Line, LineReader, top_level_id};

/// The key in the `data` of a synthesized error that carries the size of the dropped message.
const OVERSIZED: &str = "ptc-mcp/oversizedMessageBytes";
/// The key in the `data` of a synthesized error for an answer that could not be read.
const UNREADABLE: &str = "ptc-mcp/unreadableAnswer";
/// RFC 8259 allows a parser to skip a leading UTF-8 byte order mark; some servers send one.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

type Received = RxJsonRpcMessage<RoleClient>;

/// Newline-delimited JSON-RPC over a reader and a writer (a child's stdout and stdin).
pub struct LineTransport<R, W> {
    reader: LineReader<R>,
    /// Shared with the futures `send` returns (they must be `'static`); `None` once closed.
    writer: Arc<tokio::sync::Mutex<Option<W>>>,
    max_line: usize,
    /// Our `tools/call` requests that may still be answered; shared with a line parsed on a blocking thread.
    calls: Arc<Mutex<Calls>>,
    /// A long line being parsed on a blocking thread. Kept here, not in `receive`'s future: rmcp drops that
    /// future whenever something else happens first, and the next `receive` picks the parse up again.
    parsing: Option<JoinHandle<Option<Received>>>,
}

impl<R: AsyncRead + Unpin, W> LineTransport<R, W> {
    /// Lines longer than `max_line` bytes are not kept (see [`BadAnswer::TooLong`]); a call is waited for
    /// at most `call_wait` (see [`Calls`]).
    pub fn new(reader: R, writer: W, max_line: usize, call_wait: Duration) -> Self {
        LineTransport {
            reader: LineReader::new(reader, max_line),
            writer: Arc::new(tokio::sync::Mutex::new(Some(writer))),
            max_line,
            calls: Arc::new(Mutex::new(Calls::new(call_wait))),
            parsing: None,
        }
    }

    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What was wrong with an answer that the transport failed its call for.
#[derive(Debug, PartialEq)]
pub enum BadAnswer {
    /// It was longer than the connection accepts: its size.
    TooLong { bytes: usize },
    /// It could not be read (not JSON, not a tool result): why, in words.
    Unreadable(String),
}

impl BadAnswer {
    /// What a JSON-RPC error from [`LineTransport`] stands for, if the transport made it.
    pub fn of(error: &ErrorData) -> Option<BadAnswer> {
        let data = error.data.as_ref()?;
        if let Some(bytes) = data.get(OVERSIZED).and_then(Value::as_u64) {
            return Some(BadAnswer::TooLong { bytes: usize::try_from(bytes).ok()? });
        }
        data.get(UNREADABLE).map(|_| BadAnswer::Unreadable(error.message.to_string()))
    }
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
                self.calls().sent(request.id.clone());
            }
            // A cancelled call may never be answered.
            ClientJsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) = &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.calls().take(id);
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

    async fn receive(&mut self) -> Option<Received> {
        loop {
            if let Some(parsing) = &mut self.parsing {
                let parsed = parsing.await;
                self.parsing = None;
                match parsed {
                    Ok(Some(message)) => return Some(message),
                    Ok(None) => {}
                    Err(error) => tracing::error!("parsing a line from a downstream failed: {error}"),
                }
            }
            match self.reader.next_line().await {
                Ok(Line::Complete(_)) => {
                    // Taken, not borrowed: a large result's text is read into the line's own buffer.
                    let line = self.reader.take_line();
                    if line.len() >= OFF_THREAD_BYTES {
                        let calls = Arc::clone(&self.calls);
                        self.parsing = Some(tokio::task::spawn_blocking(move || parse(line, &calls)));
                    } else if let Some(message) = parse(line, &self.calls) {
                        return Some(message);
                    }
                }
                Ok(Line::TooLong { len, id }) => match id.and_then(|id| serde_json::from_value::<RequestId>(id).ok()) {
                    Some(id) => {
                        self.calls().take(&id);
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
/// the other SDKs do: answering garbage can start an error storm), unless they answer one of our `calls`.
fn parse(mut line: Vec<u8>, calls: &Mutex<Calls>) -> Option<Received> {
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
    match answered_call(unlarge, calls) {
        Answered::Call { id, result: at } => {
            // A large result with structured content and no large text is held as the line itself, for the
            // registry to read in place.
            let held = match cut {
                None if line.len() >= OFF_THREAD_BYTES => HeldResult::read(&mut line, at.clone()),
                _ => Ok(None),
            };
            let read = match held {
                Ok(Some(held)) => Ok(Some(held.hold())),
                Ok(None) => tool_result::read(&cut.as_ref().map_or(line.as_slice(), Cut::rest)[at]),
                Err(error) => Err(error),
            };
            match read {
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
        Answered::Unreadable { id, error } => {
            return Some(unreadable(id, &format!("it is not valid JSON ({error})")));
        }
        Answered::Other => {}
    }
    read_message(&line)
        .map_err(|e| {
            let start = String::from_utf8_lossy(&line[..line.len().min(200)]);
            tracing::debug!("ignored a line from a downstream that is not a JSON-RPC message ({e}): {start}");
        })
        .ok()
}

/// Any message but an answer to one of our calls. rmcp's `Tool` has no `execution`: a tool listing that says
/// how its tools run as tasks keeps that in each tool's `_meta`, under [`task_only::META`].
fn read_message(line: &[u8]) -> serde_json::Result<Received> {
    if memchr::memmem::find(line, b"\"taskSupport\"").is_none() {
        return serde_json::from_slice(line);
    }
    let mut message: Value = serde_json::from_slice(line)?;
    if let Some(tools) = message.pointer_mut("/result/tools").and_then(Value::as_array_mut) {
        for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
            let Some(support) = tool.get("execution").and_then(|e| e.get("taskSupport")).cloned() else { continue };
            let meta = tool.entry("_meta").or_insert_with(|| json!({}));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert(task_only::META.to_string(), support);
            }
        }
    }
    serde_json::from_value(message)
}

/// The fields of a message that say whether it answers one of our `tools/call` requests.
#[derive(Deserialize)]
pub struct Answer<'a> {
    pub id: Option<RequestId>,
    /// Present even when `null` (which is no tool result, so the call fails at once).
    #[serde(default, borrow, deserialize_with = "tool_result::present")]
    pub result: Option<&'a RawValue>,
}

/// Whether a line answers one of our calls.
enum Answered {
    /// It does, with a result at this range of the line.
    Call { id: RequestId, result: Range<usize> },
    /// Its top-level id is one of our calls', but it does not parse.
    Unreadable { id: RequestId, error: serde_json::Error },
    /// It is some other message (or an answer without a result).
    Other,
}

/// Whether `line` answers one of our `calls` (which then forget it), and where its result lies in it.
fn answered_call(line: &[u8], calls: &Mutex<Calls>) -> Answered {
    // A message is an object (serde would read these fields from an array too).
    if line.trim_ascii_start().first() != Some(&b'{') {
        return Answered::Other;
    }
    let take = |id: &RequestId| calls.lock().unwrap_or_else(|e| e.into_inner()).take(id);
    match serde_json::from_slice::<Answer>(line) {
        Ok(Answer { id: Some(id), result: Some(result) }) if take(&id) => {
            let result = result.get();
            let at = result.as_ptr() as usize - line.as_ptr() as usize;
            Answered::Call { id, result: at..at + result.len() }
        }
        Ok(_) => Answered::Other,
        // Cut short, or with bytes that are not UTF-8: its id may still say which call it answers.
        Err(error) => match top_level_id(line).and_then(|id| serde_json::from_value::<RequestId>(id).ok()) {
            Some(id) if take(&id) => Answered::Unreadable { id, error },
            _ => Answered::Other,
        },
    }
}

/// The answer to `tools/call` `id`: its tool result, or an error saying why it has none.
fn answer(id: RequestId, result: serde_json::Result<CallToolResult>) -> Received {
    match result {
        Ok(result) => ServerJsonRpcMessage::response(ServerResult::CallToolResult(result), id),
        Err(e) => unreadable(id, &format!("it is not a valid tool result ({e})")),
    }
}

/// The error that answers call `id` in place of an answer that could not be read, and says `why`.
fn unreadable(id: RequestId, why: &str) -> Received {
    let data: Value = json!({ UNREADABLE: true });
    ServerJsonRpcMessage::error(ErrorData::new(ErrorCode::INTERNAL_ERROR, why.to_string(), Some(data)), Some(id))
}

/// The error that answers request `id` in place of a message of `len` bytes that was not accepted.
fn oversized(id: RequestId, len: usize, max_line: usize) -> Received {
    let message = format!("the server sent a message of {len} bytes, more than the {max_line} this connection accepts");
    let data: Value = json!({ OVERSIZED: len });
    ServerJsonRpcMessage::error(ErrorData::new(ErrorCode::INTERNAL_ERROR, message, Some(data)), Some(id))
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolRequest, CallToolRequestParams, PingRequest};
    use tokio::io::AsyncReadExt;

    use super::*;

    const WAIT: Duration = Duration::from_secs(60);

    #[test]
    fn a_listing_keeps_each_tools_task_support_in_its_meta() {
        let line = br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[
            {"name":"a","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"},"_meta":{"k":1}},
            {"name":"b","inputSchema":{"type":"object"},"execution":{"taskSupport":"forbidden"}},
            {"name":"c","inputSchema":{"type":"object"}}]}}"#;
        let ServerJsonRpcMessage::Response(response) = read_message(line).unwrap() else { panic!("a response") };
        let ServerResult::ListToolsResult(listing) = response.result else { panic!("{:?}", response.result) };
        let metas: Vec<Option<Value>> =
            listing.tools.iter().map(|tool| tool.meta.as_ref().map(|meta| Value::Object(meta.0.clone()))).collect();
        assert_eq!(
            metas,
            [Some(json!({"k": 1, task_only::META: "required"})), Some(json!({task_only::META: "forbidden"})), None]
        );
    }

    fn transport(
        input: impl Into<Vec<u8>>,
        max_line: usize,
    ) -> LineTransport<std::io::Cursor<Vec<u8>>, tokio::io::Sink> {
        LineTransport::new(std::io::Cursor::new(input.into()), tokio::io::sink(), max_line, WAIT)
    }

    async fn received(input: &[u8], max_line: usize) -> Vec<Value> {
        let mut transport = transport(input, max_line);
        let mut out = Vec::new();
        while let Some(message) = Transport::<RoleClient>::receive(&mut transport).await {
            out.push(serde_json::to_value(message).unwrap());
        }
        out
    }

    /// Sends `tools/call` requests with these ids, as rmcp would.
    async fn call<R, W>(transport: &mut LineTransport<R, W>, ids: impl IntoIterator<Item = i64>)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        for id in ids {
            let call = CallToolRequest::new(CallToolRequestParams::new("t"));
            let request = ClientJsonRpcMessage::request(ClientRequest::CallToolRequest(call), RequestId::Number(id));
            transport.send(request).await.unwrap();
        }
    }

    fn text(message: Option<Received>) -> String {
        match message {
            Some(ServerJsonRpcMessage::Response(response)) => match response.result {
                ServerResult::CallToolResult(result) => result.content[0].as_text().unwrap().text.clone(),
                other => panic!("not a tool result: {other:?}"),
            },
            other => panic!("not a response: {other:?}"),
        }
    }

    /// The id and what was wrong, of the error the transport made for an answer.
    fn bad_answer(message: Option<Received>) -> (Option<RequestId>, BadAnswer) {
        match message {
            Some(ServerJsonRpcMessage::Error(error)) => (error.id, BadAnswer::of(&error.error).expect("ours")),
            other => panic!("not an error: {other:?}"),
        }
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
        assert_eq!(BadAnswer::of(&error), Some(BadAnswer::TooLong { bytes: long.len() }));
        assert_eq!(
            error.message,
            format!("the server sent a message of {} bytes, more than the 100 this connection accepts", long.len())
        );
        assert_eq!(got[1], json!({"jsonrpc": "2.0", "id": 8, "result": {}}));
        assert_eq!(BadAnswer::of(&ErrorData::internal_error("other", None)), None);
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
        let mut transport = transport(input, 1 << 20);
        call(&mut transport, 1..=5).await;
        assert_eq!(text(Transport::<RoleClient>::receive(&mut transport).await), "hi");
        for id in [2, 3] {
            let (answers, BadAnswer::Unreadable(why)) =
                bad_answer(Transport::<RoleClient>::receive(&mut transport).await)
            else {
                panic!("not unreadable")
            };
            assert_eq!(answers, Some(RequestId::Number(id)));
            assert!(why.starts_with("it is not a valid tool result ("), "{why}");
        }
        assert_eq!(text(Transport::<RoleClient>::receive(&mut transport).await), large);
        // Not a tool result: read as any other message, not failed as an invalid one.
        let task = Transport::<RoleClient>::receive(&mut transport).await;
        assert!(!matches!(task, Some(ServerJsonRpcMessage::Error(_))), "{task:?}");
        assert_eq!(transport.calls().len(), 0, "answered calls are forgotten");
    }

    #[tokio::test]
    async fn an_answer_to_a_call_that_does_not_parse_fails_that_call_at_once() {
        let not_utf8 =
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"\xff\"}]}}";
        let cut_short = br#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hal"#;
        let not_ours = br#"{"jsonrpc":"2.0","id":9,"result":{"content":["#;
        let mut large = br#"{"id":3,"result":{"content":[{"type":"text","text":""#.to_vec();
        large.extend(std::iter::repeat_n(b'x', 2 * OFF_THREAD_BYTES));
        let input =
            [&not_utf8[..], cut_short, not_ours, &large, br#"{"jsonrpc":"2.0","id":4,"result":{}}"#].join(&b'\n');
        let mut transport = transport(input, 1 << 20);
        call(&mut transport, 1..=3).await;
        for id in 1..=3 {
            let (answers, BadAnswer::Unreadable(why)) =
                bad_answer(Transport::<RoleClient>::receive(&mut transport).await)
            else {
                panic!("not unreadable")
            };
            assert_eq!(answers, Some(RequestId::Number(id)));
            assert!(why.starts_with("it is not valid JSON ("), "{why}");
        }
        // A line for no call of ours is still skipped; what follows arrives.
        let next = Transport::<RoleClient>::receive(&mut transport).await;
        assert_eq!(serde_json::to_value(next).unwrap(), json!({"jsonrpc": "2.0", "id": 4, "result": {}}));
        assert_eq!(transport.calls().len(), 0);
    }

    #[tokio::test]
    async fn a_large_answer_with_structured_content_is_held_whatever_its_texts() {
        let long = "x\"y".repeat(100_000);
        let answers = [
            json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": long}],
                "structuredContent": {"text": long}}}),
            json!({"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "row"}],
                "structuredContent": {"rows": vec!["row"; 100_000]}}}),
            json!({"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": long}]}}),
        ];
        let input: String = answers.iter().map(|answer| format!("{answer}\n")).collect();
        let mut transport = transport(input, 16 << 20);
        call(&mut transport, 1..=3).await;
        for held in [true, true, false] {
            let Some(ServerJsonRpcMessage::Response(response)) = Transport::<RoleClient>::receive(&mut transport).await
            else {
                panic!("no answer")
            };
            let ServerResult::CallToolResult(result) = response.result else { panic!("not a tool result") };
            assert_eq!(super::super::super::held::take(&result).is_some(), held, "{:?}", response.id);
        }
    }

    /// rmcp drops `receive`'s future whenever another event comes first: a long line parsed on a blocking
    /// thread meanwhile is neither lost nor delivered twice, and what follows it comes after it.
    #[tokio::test]
    async fn a_long_line_parsed_off_the_runtime_thread_survives_a_dropped_receive() {
        let long = "y".repeat(4 * OFF_THREAD_BYTES);
        let answers = [
            json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": long}]}}),
            json!({"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "short"}]}}),
        ];
        let input: String = answers.iter().map(|answer| format!("{answer}\n")).collect();
        let mut transport = transport(input, 16 << 20);
        call(&mut transport, 1..=2).await;
        let mut texts = Vec::new();
        while texts.len() < 2 {
            // Gives up at once unless the message is there: every parse of the long line is interrupted.
            let receiving = Transport::<RoleClient>::receive(&mut transport);
            if let Some(message) = futures::FutureExt::now_or_never(receiving) {
                texts.push(text(message));
            } else {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(texts, [long, "short".to_string()]);
    }

    #[tokio::test]
    async fn sent_messages_are_whole_lines_and_close_shuts_the_writer() {
        let (writer, mut peer) = tokio::io::duplex(1 << 16);
        let mut transport = LineTransport::new(tokio::io::empty(), writer, 1000, WAIT);
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
