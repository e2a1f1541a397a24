//! Starting a session with a downstream, however long it takes to answer: find its protocol era with our
//! own `server/discover` probe (a 2026-07-28 server answers it, a 2025-era server answers with an error),
//! waiting for the answer as long as the server may take to start, then hand the same transport to rmcp for
//! the handshake of that era. (rmcp's own `Auto` mode gives up on the probe after a fixed 10 s, sends
//! `initialize` on the same connection and then fails on the late answer, so a slow starter never connects.)
//! Failures are told in words, never as rmcp's error names.

use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientJsonRpcMessage, ClientRequest, DiscoverRequest, DiscoverRequestParams,
    ErrorCode, ErrorData, Implementation, ProtocolVersion, RequestId, RequestMetaObject, ServerJsonRpcMessage,
    ServerResult,
};
use rmcp::service::{ClientInitializeError, RoleClient, RunningService, Service};
use rmcp::transport::Transport;
use rmcp::{ClientLifecycleMode, ClientServiceExt};

/// Our probe's request id: rmcp numbers its own requests from 0, so a string can never be confused with one.
const PROBE_ID: &str = "ptc-mcp-discover";

/// Why a session could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("closed the connection during the handshake")]
    Closed,
    #[error("the handshake could not be sent: {0}")]
    Send(String),
    #[error("refused the handshake: {message} (JSON-RPC error {code})")]
    Refused { message: String, code: i32 },
    #[error("answered the handshake with a message that does not belong to it")]
    Unexpected,
    #[error("supports none of the protocol versions ptc-mcp speaks (it offers {0})")]
    NoCommonVersion(String),
    #[error("the handshake failed: {0}")]
    Other(String),
}

/// The client's identity and capabilities, offered in either era. The legacy offer is 2025-11-25 (rmcp's
/// default would offer 2026-07-28 inside `initialize`).
pub fn client_info() -> ClientConfig {
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("ptc-mcp", env!("CARGO_PKG_VERSION")))
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
}

/// Runs the handshake of `era` (found by [`probe`] on the same transport) with `service`.
pub async fn handshake<S, T>(service: S, transport: T, era: Era) -> Result<RunningService<RoleClient, S>, StartError>
where
    S: Service<RoleClient>,
    T: Transport<RoleClient> + 'static,
{
    let lifecycle = match era {
        Era::Modern => ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
        // `service` offers 2025-11-25 in `initialize` (see `client_info`).
        Era::Legacy => ClientLifecycleMode::Initialize,
    };
    service.serve_with_lifecycle(transport, lifecycle).await.map_err(StartError::from)
}

/// A server's protocol era.
#[derive(Debug, PartialEq)]
pub enum Era {
    /// It answered `server/discover` (or rejected it the way only a 2026-07-28 server does).
    Modern,
    /// It answered with an error (or something else): a 2025-era server, to be initialized.
    Legacy,
}

/// Sends `server/discover` and waits for its answer, however long it takes (the caller bounds it), skipping
/// whatever else arrives first (log notifications, pings: a server may send them before the handshake).
pub async fn probe<T: Transport<RoleClient> + 'static>(transport: &mut T) -> Result<Era, StartError> {
    let info = client_info();
    let mut discover = DiscoverRequest::new(DiscoverRequestParams {});
    discover.extensions.insert(RequestMetaObject::with_client_context(
        ProtocolVersion::V_2026_07_28,
        info.client_info,
        info.capabilities,
    ));
    let id = RequestId::String(PROBE_ID.into());
    let request = ClientJsonRpcMessage::request(ClientRequest::DiscoverRequest(discover), id.clone());
    transport.send(request).await.map_err(|e| StartError::Send(e.to_string()))?;
    loop {
        match transport.receive().await.ok_or(StartError::Closed)? {
            ServerJsonRpcMessage::Response(response) if response.id == id => {
                return Ok(match response.result {
                    ServerResult::DiscoverResult(_) => Era::Modern,
                    _ => Era::Legacy,
                });
            }
            // An error without an id is an answer too: a server that could not read the request omits it.
            ServerJsonRpcMessage::Error(error) if error.id.as_ref().is_none_or(|e| *e == id) => {
                return Ok(if is_modern_rejection(&error.error) { Era::Modern } else { Era::Legacy });
            }
            other => tracing::debug!("before the handshake, ignored: {other:?}"),
        }
    }
}

/// Errors only a 2026-07-28 server gives to `server/discover` (version negotiation, missing capabilities,
/// header mismatch): rmcp's discovery handles them (or reports them) itself.
fn is_modern_rejection(error: &ErrorData) -> bool {
    [ErrorCode::UNSUPPORTED_PROTOCOL_VERSION, ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY, ErrorCode::HEADER_MISMATCH]
        .contains(&error.code)
}

impl From<ClientInitializeError> for StartError {
    fn from(error: ClientInitializeError) -> StartError {
        match error {
            ClientInitializeError::ConnectionClosed(_) => StartError::Closed,
            ClientInitializeError::TransportError { error, .. } => StartError::Send(innermost(&error)),
            ClientInitializeError::JsonRpcError(error) => {
                StartError::Refused { message: error.message.into_owned(), code: error.code.0 }
            }
            ClientInitializeError::ExpectedInitResponse(_)
            | ClientInitializeError::ExpectedInitResult(_)
            | ClientInitializeError::ConflictInitResponseId(..)
            | ClientInitializeError::UncorrelatedErrorResponse { .. } => StartError::Unexpected,
            ClientInitializeError::NoCompatibleProtocolVersion { server_supported, .. } => {
                let offered: Vec<String> = server_supported.iter().map(ToString::to_string).collect();
                StartError::NoCommonVersion(if offered.is_empty() { "none".into() } else { offered.join(", ") })
            }
            ClientInitializeError::LegacyFallbackFailed { fallback, .. } => StartError::from(*fallback),
            ClientInitializeError::Cancelled => StartError::Other("it was cancelled".to_string()),
            other => StartError::Other(other.to_string()),
        }
    }
}

/// The innermost cause's message: the part of a wrapped transport error that says what happened.
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

#[cfg(test)]
mod tests {
    use rmcp::model::{DiscoverResult, ServerCapabilities};
    use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
    use tokio::sync::mpsc;

    use super::*;

    /// A transport that records what is sent and delivers canned messages, then reports the connection closed.
    struct Scripted {
        sent: Vec<TxJsonRpcMessage<RoleClient>>,
        incoming: mpsc::UnboundedReceiver<RxJsonRpcMessage<RoleClient>>,
    }

    impl Transport<RoleClient> for Scripted {
        type Error = std::io::Error;

        fn send(
            &mut self,
            item: TxJsonRpcMessage<RoleClient>,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
            self.sent.push(item);
            std::future::ready(Ok(()))
        }

        async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
            self.incoming.recv().await
        }

        async fn close(&mut self) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    fn scripted(messages: Vec<RxJsonRpcMessage<RoleClient>>) -> Scripted {
        let (tx, incoming) = mpsc::unbounded_channel();
        for message in messages {
            tx.send(message).unwrap();
        }
        Scripted { sent: Vec::new(), incoming }
    }

    fn probe_id() -> RequestId {
        RequestId::String(PROBE_ID.into())
    }

    fn discover_result() -> ServerResult {
        ServerResult::DiscoverResult(DiscoverResult::new(
            vec![ProtocolVersion::V_2026_07_28],
            ServerCapabilities::default(),
        ))
    }

    #[tokio::test]
    async fn a_discover_answer_means_2026_and_earlier_messages_are_skipped() {
        let ping = serde_json::from_value(serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "ping"})).unwrap();
        let late_other = ServerJsonRpcMessage::response(ServerResult::empty(()), RequestId::Number(0));
        let mut transport =
            scripted(vec![ping, late_other, ServerJsonRpcMessage::response(discover_result(), probe_id())]);
        assert_eq!(probe(&mut transport).await.unwrap(), Era::Modern);
        let sent = serde_json::to_value(&transport.sent[0]).unwrap();
        assert_eq!(sent["method"], "server/discover");
        assert_eq!(sent["id"], PROBE_ID);
        assert_eq!(sent["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
    }

    #[tokio::test]
    async fn an_error_answer_means_2025_unless_only_a_2026_server_would_give_it() {
        let error =
            |code: ErrorCode, id: Option<RequestId>| ServerJsonRpcMessage::error(ErrorData::new(code, "no", None), id);
        let cases = [
            (error(ErrorCode::METHOD_NOT_FOUND, Some(probe_id())), Era::Legacy),
            (error(ErrorCode::INVALID_REQUEST, None), Era::Legacy),
            (error(ErrorCode::UNSUPPORTED_PROTOCOL_VERSION, Some(probe_id())), Era::Modern),
            (ServerJsonRpcMessage::response(ServerResult::empty(()), probe_id()), Era::Legacy),
        ];
        for (answer, era) in cases {
            assert_eq!(probe(&mut scripted(vec![answer])).await.unwrap(), era);
        }
        let uncorrelated = error(ErrorCode::METHOD_NOT_FOUND, Some(RequestId::Number(5)));
        assert!(matches!(probe(&mut scripted(vec![uncorrelated])).await, Err(StartError::Closed)));
    }

    #[test]
    fn rmcp_errors_are_told_in_words() {
        let refused = ClientInitializeError::JsonRpcError(ErrorData::new(ErrorCode(-32000), "not now", None));
        assert_eq!(StartError::from(refused).to_string(), "refused the handshake: not now (JSON-RPC error -32000)");
        let conflict = ClientInitializeError::ConflictInitResponseId(RequestId::Number(1), RequestId::Number(0));
        assert_eq!(
            StartError::from(conflict).to_string(),
            "answered the handshake with a message that does not belong to it"
        );
        let closed = ClientInitializeError::ConnectionClosed("initialize response".into());
        assert_eq!(StartError::from(closed).to_string(), "closed the connection during the handshake");
        let versions = ClientInitializeError::NoCompatibleProtocolVersion {
            client_supported: vec![ProtocolVersion::V_2026_07_28],
            server_supported: vec![ProtocolVersion::V_2025_06_18],
        };
        assert_eq!(
            StartError::from(versions).to_string(),
            "supports none of the protocol versions ptc-mcp speaks (it offers 2025-06-18)"
        );
    }
}
