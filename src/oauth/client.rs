//! rmcp's streamable HTTP client with OAuth bearer tokens: every request carries the server's current token
//! (renewed before it expires); a `401` renews it once (shared with every other request that got the same
//! `401`) and the request is sent again; a `403 insufficient_scope` records the scopes for the next login.
//! (rmcp's own `AuthClient` refreshes once per rejected request, so concurrent calls would each spend a
//! rotating refresh token.)

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::AuthError;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Error as SseError, Sse};

use super::tokens::{Credentials, TokenError};

type Error = StreamableHttpError<reqwest::Error>;

/// The shared HTTP client, with the tokens of one server.
#[derive(Clone)]
pub struct Authorized {
    inner: reqwest::Client,
    credentials: Arc<Credentials>,
}

impl Authorized {
    pub fn new(inner: reqwest::Client, credentials: Arc<Credentials>) -> Authorized {
        Authorized { inner, credentials }
    }

    /// Runs `call` with the current token, and once more with a renewed one if the server rejects it.
    async fn with_token<T, F, Fut>(&self, call: F) -> Result<T, Error>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let token = self.credentials.bearer().await.map_err(auth_error)?;
        match call(Some(token.to_string())).await {
            Err(StreamableHttpError::AuthRequired(_)) => {
                let renewed = self.credentials.rejected(&token).await.map_err(auth_error)?;
                match call(Some(renewed.to_string())).await {
                    // A token just issued and still refused: only a new login can help.
                    Err(StreamableHttpError::AuthRequired(_)) => Err(Error::Auth(AuthError::AuthorizationRequired)),
                    other => self.scope_error(other).await,
                }
            }
            other => self.scope_error(other).await,
        }
    }

    /// A `403 insufficient_scope` names what the server wants: the next login asks for it too.
    async fn scope_error<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        let Err(StreamableHttpError::InsufficientScope(insufficient)) = &result else { return result };
        let required = insufficient.required_scope.clone().unwrap_or_default();
        self.credentials.want_scopes(&required).await;
        Err(Error::Auth(AuthError::InsufficientScope { required_scope: required, upgrade_url: None }))
    }
}

/// What a token problem is to the transport: a login needed, or the authorization server unavailable.
fn auth_error(error: TokenError) -> Error {
    Error::Auth(match error {
        TokenError::NeedsLogin { .. } => AuthError::AuthorizationRequired,
        TokenError::Unavailable(why) => AuthError::TokenRefreshFailed(why),
        TokenError::Refused(why) => AuthError::ClientCredentialsError(why),
    })
}

impl StreamableHttpClient for Authorized {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.with_token(|token| {
            let (uri, message, session_id, headers) =
                (uri.clone(), message.clone(), session_id.clone(), custom_headers.clone());
            async move { self.inner.post_message(uri, message, session_id, token, headers).await }
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.with_token(|token| {
            let (uri, message, session_id, headers) =
                (uri.clone(), message.clone(), session_id.clone(), custom_headers.clone());
            async move {
                self.inner
                    .post_message_with_max_sse_event_size(uri, message, session_id, token, headers, max_sse_event_size)
                    .await
            }
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        self.with_token(|token| {
            let (uri, message, session_id, headers) =
                (uri.clone(), message.clone(), session_id.clone(), custom_headers.clone());
            async move {
                self.inner.post_message_with_response_limits(uri, message, session_id, token, headers, limits).await
            }
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        self.with_token(|token| {
            let (uri, session_id, headers) = (uri.clone(), session_id.clone(), custom_headers.clone());
            async move { self.inner.delete_session(uri, session_id, token, headers).await }
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.with_token(|token| {
            let (uri, session_id, last, headers) =
                (uri.clone(), session_id.clone(), last_event_id.clone(), custom_headers.clone());
            async move { self.inner.get_stream(uri, session_id, last, token, headers).await }
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Error> {
        self.with_token(|token| {
            let (uri, session_id, last, headers) =
                (uri.clone(), session_id.clone(), last_event_id.clone(), custom_headers.clone());
            async move {
                self.inner
                    .get_stream_with_max_sse_event_size(uri, session_id, last, token, headers, max_sse_event_size)
                    .await
            }
        })
        .await
    }
}
