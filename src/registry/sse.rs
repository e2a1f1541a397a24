//! `transport: sse`: the legacy HTTP+SSE transport (MCP 2024-11-05), which rmcp 3.x has no client for,
//! written on rmcp's [`Transport`] trait. `GET` the event stream; its `endpoint` event names the URL to
//! `POST` messages to (relative or absolute; `/message?sessionId=` and `/messages/?session_id=` styles
//! both occur); responses and notifications arrive on the stream as `message` events. A stream that ends or
//! fails is a lost connection: the session ends and the supervisor reconnects.

mod frames;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::{StatusCode, Url};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::limits::{Limits, OFF_THREAD_BYTES};
use super::liveness::{Classify, Loss, LossKind, LossSignal, Watched};
use super::remote;
use crate::config::ServerConfig;
use crate::oauth::{Credentials, TokenError};
use frames::Frames;

/// How long the server may take to send the `endpoint` event after the stream opens.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(10);
/// A POST is only a hand-over (the answer comes on the stream), so it should be quick.
const POST_TIMEOUT: Duration = Duration::from_secs(30);
/// Messages read from the stream but not yet taken by the session.
const INCOMING_BUFFER: usize = 64;

pub type SseTransport = Watched<LegacySse>;

/// A failed POST.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("the server answered HTTP {0}")]
    Status(StatusCode),
    #[error("{0}")]
    Request(String),
    #[error("{0}")]
    Token(TokenError),
}

impl Classify for SseError {
    fn loss(&self, server: &str) -> Option<Loss> {
        match self {
            SseError::Status(status) if matches!(status.as_u16(), 401 | 403) => {
                Some(Loss::credentials(server, status.as_u16()))
            }
            SseError::Status(status) if status.is_server_error() => Some(Loss::connection(self.to_string())),
            // The server no longer knows the session id in the endpoint (it restarted, or dropped us).
            SseError::Status(StatusCode::NOT_FOUND) => {
                Some(Loss::connection("the server no longer knows this session (HTTP 404 on POST)"))
            }
            SseError::Status(_) => None,
            SseError::Request(_) => Some(Loss::connection(self.to_string())),
            SseError::Token(error) => Some(token_loss(server, error)),
        }
    }
}

/// What a server's token problem (`auth` in the config) means for the connection.
fn token_loss(server: &str, error: &TokenError) -> Loss {
    match error {
        TokenError::NeedsLogin { .. } => Loss::needs_login(server),
        TokenError::Unavailable(why) => Loss::connection(format!("no token: {why}")),
        TokenError::Refused(_) => Loss { reason: format!("server '{server}': {error}"), kind: LossKind::Credentials },
    }
}

/// The client side of one legacy SSE session.
pub struct LegacySse {
    client: reqwest::Client,
    endpoint: Url,
    headers: HeaderMap,
    credentials: Option<Arc<Credentials>>,
    incoming: mpsc::Receiver<ServerJsonRpcMessage>,
    reader: JoinHandle<()>,
}

/// Opens the event stream and waits for the `endpoint` event. Stream failures later are reported to
/// `signal`; so are failed POSTs (through the [`Watched`] wrapper).
pub async fn connect(
    config: &ServerConfig,
    limits: Limits,
    signal: LossSignal,
    credentials: Option<Arc<Credentials>>,
) -> Result<SseTransport, Loss> {
    let server = config.name.as_str();
    let client = remote::client().map_err(Loss::connection)?;
    let headers = remote::headers(config)?;
    let url = Url::parse(config.url.as_deref().unwrap_or_default())
        .map_err(|e| Loss::connection(format!("the url is not valid: {e}")))?;
    let open = client.get(url.clone()).headers(headers.clone()).header(ACCEPT, "text/event-stream");
    let response = send_with_token(open, credentials.as_deref()).await.map_err(|e| match e.loss(server) {
        Some(loss) => loss,
        None => Loss::connection(e.to_string()),
    })?;
    let status = response.status();
    if matches!(status.as_u16(), 401 | 403) {
        return Err(Loss::credentials(server, status.as_u16()));
    }
    if !status.is_success() {
        return Err(Loss::connection(format!("GET of the event stream answered HTTP {status}")));
    }
    let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !content_type.trim_start().to_ascii_lowercase().starts_with("text/event-stream") {
        return Err(Loss::connection(format!(
            "the url answered with content type '{content_type}', not an event stream; if this server speaks \
             streamable HTTP, use `transport: http`"
        )));
    }
    let mut frames = Frames::new(response.bytes_stream().boxed(), limits.max_message_bytes);
    let endpoint = tokio::time::timeout(ENDPOINT_TIMEOUT, endpoint_event(&mut frames)).await.map_err(|_| {
        Loss::connection(format!("no `endpoint` event within {}s of opening the stream", ENDPOINT_TIMEOUT.as_secs()))
    })??;
    let endpoint = resolve_endpoint(&url, &endpoint).map_err(Loss::connection)?;
    let (tx, incoming) = mpsc::channel(INCOMING_BUFFER);
    let reader = tokio::spawn(read_messages(frames, tx, server.to_string(), signal.clone()));
    let transport = LegacySse { client, endpoint, headers, credentials, incoming, reader };
    Ok(Watched::new(transport, server, signal))
}

type ByteFrames = Frames<futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>>;

async fn endpoint_event(frames: &mut ByteFrames) -> Result<String, Loss> {
    loop {
        match frames.next().await {
            Some(Ok(event)) if event.event == "endpoint" => return Ok(event.data),
            Some(Ok(event)) => tracing::debug!("ignoring a '{}' event before the endpoint event", event.event),
            Some(Err(error)) => return Err(Loss::connection(format!("the event stream failed: {error}"))),
            None => return Err(Loss::connection("the event stream closed before its `endpoint` event")),
        }
    }
}

/// Why the `endpoint` event cannot be used.
#[derive(Debug, thiserror::Error)]
enum EndpointError {
    #[error("the `endpoint` event is not a valid URL: {0}")]
    Invalid(String),
    #[error("the `endpoint` event points to another origin ({0}); refusing to send the configured headers there")]
    OtherOrigin(String),
}

/// The POST URL from the `endpoint` event, relative to the stream's URL. It must stay on the same origin:
/// the configured headers (credentials) go with every POST.
fn resolve_endpoint(stream_url: &Url, endpoint: &str) -> Result<Url, EndpointError> {
    let resolved = stream_url.join(endpoint.trim()).map_err(|e| EndpointError::Invalid(e.to_string()))?;
    if resolved.origin() != stream_url.origin() {
        return Err(EndpointError::OtherOrigin(remote::origin(&resolved)));
    }
    Ok(resolved)
}

/// Forwards `message` events to the session until the stream ends, then reports the loss.
async fn read_messages(
    mut frames: ByteFrames,
    tx: mpsc::Sender<ServerJsonRpcMessage>,
    server: String,
    signal: LossSignal,
) {
    let loss = loop {
        match frames.next().await {
            // An empty data field (a priming event) carries no message.
            Some(Ok(event)) if event.event == "message" && event.data.trim().is_empty() => {}
            Some(Ok(event)) if event.event == "message" => match parse_message(event.data).await {
                Ok(message) => {
                    if tx.send(message).await.is_err() {
                        return; // the session is gone
                    }
                }
                Err(error) => tracing::warn!(server, "ignoring a message that is not JSON-RPC: {error}"),
            },
            Some(Ok(event)) => tracing::debug!(server, "ignoring a '{}' event", event.event),
            Some(Err(error)) => break Loss::connection(format!("the event stream failed: {error}")),
            None => break Loss::connection("the server closed the event stream"),
        }
    };
    signal.report(loss);
}

/// A `message` event's data as a JSON-RPC message; a long one is parsed on a blocking thread, off the
/// runtime thread that serves every run.
async fn parse_message(data: String) -> serde_json::Result<ServerJsonRpcMessage> {
    if data.len() < OFF_THREAD_BYTES {
        return serde_json::from_str(&data);
    }
    let parsing = tokio::task::spawn_blocking(move || serde_json::from_str(&data));
    parsing.await.unwrap_or_else(|panic| std::panic::resume_unwind(panic.into_panic()))
}

impl Transport<RoleClient> for LegacySse {
    type Error = SseError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let request = serde_json::to_vec(&item).map(|body| {
            self.client
                .post(self.endpoint.clone())
                .headers(self.headers.clone())
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .timeout(POST_TIMEOUT)
                .body(body)
        });
        let credentials = self.credentials.clone();
        async move {
            let request = request.map_err(|e| SseError::Request(format!("cannot encode the message: {e}")))?;
            let response = send_with_token(request, credentials.as_deref()).await?;
            match response.status() {
                status if status.is_success() => Ok(()),
                status => Err(SseError::Status(status)),
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        self.incoming.close();
        Ok(())
    }
}

/// Sends `request`, with the server's bearer token if it has `auth`; a `401` renews the token once and sends
/// it again.
async fn send_with_token(
    request: reqwest::RequestBuilder,
    credentials: Option<&Credentials>,
) -> Result<reqwest::Response, SseError> {
    let send = |request: reqwest::RequestBuilder| async move {
        request.send().await.map_err(|e| SseError::Request(remote::describe(&e)))
    };
    let Some(credentials) = credentials else { return send(request).await };
    let retry = request.try_clone();
    let token = credentials.bearer().await.map_err(SseError::Token)?;
    let response = send(request.bearer_auth(&token)).await?;
    let (StatusCode::UNAUTHORIZED, Some(retry)) = (response.status(), retry) else { return Ok(response) };
    let renewed = credentials.rejected(&token).await.map_err(SseError::Token)?;
    let response = send(retry.bearer_auth(&renewed)).await?;
    if response.status() == StatusCode::UNAUTHORIZED {
        return Err(SseError::Token(TokenError::NeedsLogin { why: "a token just issued was refused".into() }));
    }
    Ok(response)
}

impl Drop for LegacySse {
    fn drop(&mut self) {
        // Closes the GET stream, which ends the session on the server.
        self.reader.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_resolve_relative_to_the_stream_url_in_both_styles() {
        let stream = Url::parse("http://127.0.0.1:8000/sse").unwrap();
        let ts = resolve_endpoint(&stream, "/message?sessionId=abc").unwrap();
        assert_eq!(ts.as_str(), "http://127.0.0.1:8000/message?sessionId=abc");
        let python = resolve_endpoint(&stream, "/messages/?session_id=9f\n").unwrap();
        assert_eq!(python.as_str(), "http://127.0.0.1:8000/messages/?session_id=9f");
        let nested = Url::parse("http://h:1/api/v1/sse").unwrap();
        assert_eq!(resolve_endpoint(&nested, "messages?s=1").unwrap().as_str(), "http://h:1/api/v1/messages?s=1");
        let absolute = resolve_endpoint(&stream, "http://127.0.0.1:8000/other?x=1").unwrap();
        assert_eq!(absolute.as_str(), "http://127.0.0.1:8000/other?x=1");
    }

    #[test]
    fn an_endpoint_on_another_origin_is_refused() {
        let stream = Url::parse("https://mcp.example.com/sse").unwrap();
        let error = resolve_endpoint(&stream, "https://elsewhere.example.net/messages?s=1").unwrap_err();
        assert!(error.to_string().contains("another origin (https://elsewhere.example.net)"), "{error}");
    }

    #[test]
    fn post_failures_are_classified() {
        assert_eq!(SseError::Status(StatusCode::UNAUTHORIZED).loss("x"), Some(Loss::credentials("x", 401)));
        assert!(SseError::Status(StatusCode::BAD_GATEWAY).loss("x").is_some());
        assert!(SseError::Status(StatusCode::NOT_FOUND).loss("x").is_some());
        assert_eq!(SseError::Status(StatusCode::BAD_REQUEST).loss("x"), None);
        assert!(SseError::Request("cannot connect".into()).loss("x").is_some());
    }
}
