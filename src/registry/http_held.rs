//! `transport: http`: a large answer to `tools/call` that arrives as an SSE event is held as the event's
//! own bytes (see [`HeldResult`]) before rmcp's transport parses it: rmcp reads a stand-in of a few bytes.
//!
//! rmcp's streamable HTTP client parses each event's data into a message, a `serde_json::Value` tree of the
//! whole structured content and a `ContentBlock` per block: 110,000 small rows (3.4 MB) peaked at 240 MB.
//! [`Holding`] wraps the HTTP client that rmcp drives; every request goes through it unchanged, and only the
//! events of a `tools/call` POST's own stream are looked at. (An answer in a plain JSON body is parsed by
//! the HTTP client itself, and an answer on a resumed stream is not known to be a tool result: both are
//! read by rmcp as before.)

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, RequestId, ServerJsonRpcMessage, ServerResult};
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};

use super::held::HeldResult;
use super::limits::OFF_THREAD_BYTES;
use super::stdio::Answer;

/// An HTTP client for rmcp's streamable HTTP transport that holds large answers to `tools/call`.
#[derive(Clone)]
pub struct Holding<C>(pub C);

type PostResult<E> = Result<StreamableHttpPostResponse, StreamableHttpError<E>>;

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for Holding<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> PostResult<Self::Error> {
        self.0.post_message(uri, message, session_id, auth_header, custom_headers).await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> PostResult<Self::Error> {
        let posted = self.0.post_message_with_max_sse_event_size(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        );
        posted.await
    }

    /// What rmcp's transport posts every message with.
    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> PostResult<Self::Error> {
        let call = called(&message);
        let posted =
            self.0.post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits);
        held(call, posted.await)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0.delete_session(uri, session_id, auth_header, custom_headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        self.0.get_stream(uri, session_id, last_event_id, auth_header, custom_headers).await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        let stream = self.0.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        );
        stream.await
    }
}

/// The id of a `tools/call` request.
fn called(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        ClientJsonRpcMessage::Request(request) if matches!(request.request, ClientRequest::CallToolRequest(_)) => {
            Some(request.id.clone())
        }
        _ => None,
    }
}

/// The answer to a POST: for a `tools/call`, its event stream with a large answer to the call held.
fn held<E: std::error::Error + Send + Sync + 'static>(call: Option<RequestId>, posted: PostResult<E>) -> PostResult<E> {
    match (call, posted) {
        (Some(id), Ok(StreamableHttpPostResponse::Sse(events, session))) => {
            let events = events.then(move |event| {
                let id = id.clone();
                async move {
                    let mut event = event?;
                    if let Some(data) = event.data.take_if(|data| data.len() >= OFF_THREAD_BYTES) {
                        // Read off the runtime thread, which serves every other run meanwhile.
                        let read = tokio::task::spawn_blocking(move || stand_in(&id, data)).await;
                        event.data = Some(read.unwrap_or_else(|panic| std::panic::resume_unwind(panic.into_panic())));
                    }
                    Ok(event)
                }
            });
            Ok(StreamableHttpPostResponse::Sse(events.boxed(), session))
        }
        (_, posted) => posted,
    }
}

/// What rmcp reads of an event's `data`: a stand-in naming the held result if it is the answer to call
/// `id` with structured content, else the data as it came.
fn stand_in(id: &RequestId, data: String) -> String {
    let mut bytes = data.into_bytes();
    let result = match serde_json::from_slice::<Answer>(&bytes) {
        Ok(Answer { id: Some(answers), result: Some(result) }) if answers == *id => {
            let at = result.get().as_ptr() as usize - bytes.as_ptr() as usize;
            Some(at..at + result.get().len())
        }
        _ => None,
    };
    // A result rmcp would not read either is left to rmcp, which then fails the call as it always has.
    if let Some(result) = result
        && let Ok(Some(held)) = HeldResult::read(&mut bytes, result)
    {
        let message = ServerJsonRpcMessage::response(ServerResult::CallToolResult(held.hold()), id.clone());
        return serde_json::to_string(&message).expect("messages serialise");
    }
    String::from_utf8(bytes).expect("it was a String")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::registry::held;

    #[test]
    fn the_answer_to_the_call_is_held_and_rmcp_reads_its_stand_in_as_a_tool_result() {
        let id = RequestId::Number(4);
        let answer = json!({"jsonrpc": "2.0", "id": 4, "result": {"content": [], "structuredContent": {"a": [1, 2]}}});
        let read: ServerJsonRpcMessage = serde_json::from_str(&stand_in(&id, answer.to_string())).unwrap();
        let ServerJsonRpcMessage::Response(response) = read else { panic!("{read:?}") };
        assert_eq!(response.id, id);
        let ServerResult::CallToolResult(result) = response.result else { panic!("not a tool result") };
        let held = held::take(&result).expect("held");
        assert_eq!(held.structured().get(), r#"{"a":[1,2]}"#);
    }

    #[test]
    fn other_answers_and_unreadable_results_are_left_as_they_came() {
        let id = RequestId::Number(4);
        let others = [
            json!({"jsonrpc": "2.0", "id": 5, "result": {"structuredContent": {}}}).to_string(),
            json!({"jsonrpc": "2.0", "id": 4, "result": {"content": [{"type": "text", "text": "no structure"}]}})
                .to_string(),
            json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}).to_string(),
            r#"{"jsonrpc": "2.0", "id": 4, "result": {"structuredContent": "\ud800"}}"#.to_string(),
            "not json".to_string(),
        ];
        for data in others {
            assert_eq!(stand_in(&id, data.clone()), data);
        }
    }
}
