//! `transport: http`: rmcp's streamable HTTP client (JSON and SSE-framed responses, session ids, the empty
//! priming event, 2025-era and 2026-07-28 servers), with the configured headers, bounded stream
//! resumption, and a classification of its errors into lost connections and everything else.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::auth::AuthError;
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};

use super::http_held::Holding;
use super::limits::Limits;
use super::liveness::LossKind;
use super::liveness::{Classify, Loss, LossSignal, Watched};
use super::remote;
use crate::config::ServerConfig;
use crate::oauth::{Authorized, Credentials};

/// rmcp's error for this transport.
type HttpError = StreamableHttpError<reqwest::Error>;

/// The transport; its client is the shared HTTP client, or that client with a server's OAuth tokens, holding
/// large answers to `tools/call`.
pub type HttpTransport<C = reqwest::Client> = Watched<StreamableHttpClientTransport<Holding<C>>>;

/// How often a dropped SSE stream is resumed (with `Last-Event-ID`) before the request fails. rmcp's
/// default retries forever, which leaves a call to a dead server hanging.
const STREAM_RESUME_ATTEMPTS: usize = 2;
const STREAM_RESUME_FIRST_DELAY: Duration = Duration::from_millis(200);
const STREAM_RESUME_MAX_DELAY: Duration = Duration::from_secs(1);

/// The transport for one connection attempt; failures are reported to `signal`.
pub fn transport(config: &ServerConfig, limits: Limits, signal: LossSignal) -> Result<HttpTransport, Loss> {
    let client = remote::client().map_err(Loss::connection)?;
    Ok(Watched::new(
        StreamableHttpClientTransport::with_client(Holding(client), settings(config, limits)?),
        &config.name,
        signal,
    ))
}

/// [`transport`] with bearer tokens from `credentials` (`auth` in the config).
pub fn authorized_transport(
    config: &ServerConfig,
    limits: Limits,
    signal: LossSignal,
    credentials: Arc<Credentials>,
) -> Result<HttpTransport<Authorized>, Loss> {
    let client = Authorized::new(remote::client().map_err(Loss::connection)?, credentials);
    Ok(Watched::new(
        StreamableHttpClientTransport::with_client(Holding(client), settings(config, limits)?),
        &config.name,
        signal,
    ))
}

fn settings(config: &ServerConfig, limits: Limits) -> Result<StreamableHttpClientTransportConfig, Loss> {
    let headers: HashMap<_, _> = remote::headers(config)?.into_iter().filter_map(|(k, v)| Some((k?, v))).collect();
    let mut resume = ExponentialBackoff::default();
    resume.max_times = Some(STREAM_RESUME_ATTEMPTS);
    resume.base_duration = STREAM_RESUME_FIRST_DELAY;
    resume.max_delay = Some(STREAM_RESUME_MAX_DELAY);
    let mut settings = StreamableHttpClientTransportConfig::with_uri(config.url.clone().unwrap_or_default())
        .custom_headers(headers)
        .max_json_response_size(limits.max_message_bytes)
        .max_sse_event_size(limits.max_message_bytes);
    settings.retry_config = Arc::new(resume);
    Ok(settings)
}

impl Classify for HttpError {
    fn loss(&self, server: &str) -> Option<Loss> {
        match self {
            StreamableHttpError::Client(error) => Some(Loss::connection(remote::describe(error))),
            StreamableHttpError::Io(error) => Some(Loss::connection(format!("the connection failed: {error}"))),
            StreamableHttpError::Sse(error) => Some(Loss::connection(format!("the event stream failed: {error}"))),
            StreamableHttpError::HttpStatus(status) if status.status >= 500 => {
                Some(Loss::connection(format!("the server answered HTTP {}", status_text(status.status))))
            }
            StreamableHttpError::Auth(error) => Some(oauth_loss(server, error)),
            StreamableHttpError::AuthRequired(_) => Some(Loss::credentials(server, 401)),
            StreamableHttpError::InsufficientScope(_) => Some(Loss::credentials(server, 403)),
            // A 401/403 without a `WWW-Authenticate` challenge arrives as a plain unexpected response.
            StreamableHttpError::UnexpectedServerResponse(text) if text.starts_with("HTTP 401") => {
                Some(Loss::credentials(server, 401))
            }
            StreamableHttpError::UnexpectedServerResponse(text) if text.starts_with("HTTP 403") => {
                Some(Loss::credentials(server, 403))
            }
            StreamableHttpError::UnexpectedEndOfStream => {
                Some(Loss::connection("the response stream ended unexpectedly"))
            }
            StreamableHttpError::TransportChannelClosed => Some(Loss::connection("the HTTP transport stopped")),
            StreamableHttpError::SessionExpired
            | StreamableHttpError::SessionRecoveryTimeout
            | StreamableHttpError::ReinitializationFailed(_) => {
                Some(Loss::connection("the server dropped the session and it could not be re-established"))
            }
            // Rate limits, bad content, oversized bodies, timeouts of control messages: the server is there.
            _ => None,
        }
    }
}

/// What a token problem (an `auth` server's, see [`Authorized`]) means for the connection.
fn oauth_loss(server: &str, error: &AuthError) -> Loss {
    match error {
        AuthError::AuthorizationRequired => Loss::needs_login(server),
        AuthError::InsufficientScope { required_scope, .. } => Loss::needs_scopes(server, required_scope),
        AuthError::ClientCredentialsError(why) => Loss {
            reason: format!("server '{server}': the authorization server refused the client credentials: {why}"),
            kind: LossKind::Credentials,
        },
        AuthError::TokenRefreshFailed(why) => Loss::connection(format!("no token: {why}")),
        other => Loss::connection(format!("no token: {other}")),
    }
}

fn status_text(status: u16) -> String {
    match reqwest::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()) {
        Some(reason) => format!("{status} {reason}"),
        None => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use rmcp::transport::streamable_http_client::{AuthRequiredError, HttpStatusError};

    use super::*;

    #[test]
    fn server_errors_are_losses_and_rate_limits_or_bad_content_are_not() {
        let loss = HttpError::HttpStatus(HttpStatusError::new(502, None)).loss("x").unwrap();
        assert_eq!(loss.reason, "the server answered HTTP 502 Bad Gateway");
        assert_eq!(HttpError::HttpStatus(HttpStatusError::new(429, None)).loss("x"), None);
        assert_eq!(HttpError::UnexpectedContentType(Some("text/html".into())).loss("x"), None);
        assert_eq!(HttpError::ResponseBodyTooLarge { max_size: 1 }.loss("x"), None);
    }

    #[test]
    fn rejected_credentials_are_recognised_with_or_without_a_challenge() {
        let challenged = HttpError::AuthRequired(AuthRequiredError::new("Bearer".into())).loss("x").unwrap();
        assert_eq!(challenged.kind, LossKind::Credentials);
        let plain = HttpError::UnexpectedServerResponse("HTTP 403 Forbidden: no".into()).loss("x").unwrap();
        assert_eq!(plain, Loss::credentials("x", 403));
        assert_eq!(HttpError::UnexpectedServerResponse("HTTP 400 Bad Request: no".into()).loss("x"), None);
    }
}
