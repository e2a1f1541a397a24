//! Telling a lost connection from an error: a wrapper around a remote transport that watches every send
//! and every received message, and reports the first transport-level failure that means the connection is
//! gone (refused, reset, HTTP 5xx, a closed stream, rejected credentials). Errors from a live server (an
//! `isError` result, a JSON-RPC error, bad data) are not losses and are never reported.

use std::sync::Arc;

use rmcp::model::ServerJsonRpcMessage;
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::{DynamicTransportError, Transport};
use tokio::sync::watch;

/// Why a connection is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    pub reason: String,
    pub kind: LossKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossKind {
    /// Unreachable, reset, closed, 5xx: retry with the usual backoff.
    Connection,
    /// HTTP 401/403: the configured credentials were rejected; retrying soon will not help.
    Credentials,
    /// OAuth: no usable tokens; only a person can help (`ptc-mcp login NAME`).
    NeedsLogin,
}

impl Loss {
    /// A lost connection, and why (an error or words).
    pub fn connection(reason: impl std::fmt::Display) -> Loss {
        Loss { reason: reason.to_string(), kind: LossKind::Connection }
    }

    /// A 401/403 from `server`. Says so plainly, and what to check; never includes the header values.
    pub fn credentials(server: &str, status: u16) -> Loss {
        let what = if status == 403 { "403 Forbidden" } else { "401 Unauthorized" };
        Loss {
            reason: format!(
                "server '{server}' rejected the credentials (HTTP {what}); check the `headers` of this server in the config"
            ),
            kind: LossKind::Credentials,
        }
    }
}

impl Loss {
    /// An OAuth server without usable tokens: says which command to run.
    pub fn needs_login(server: &str) -> Loss {
        Loss {
            reason: format!("server '{server}' needs login: run `{}`", crate::oauth::login_hint(server)),
            kind: LossKind::NeedsLogin,
        }
    }

    /// An OAuth server that wants scopes the login did not grant: the next login asks for them.
    pub fn needs_scopes(server: &str, scopes: &str) -> Loss {
        Loss {
            reason: format!(
                "server '{server}' needs login with more scopes ({scopes}): run `{}`",
                crate::oauth::login_hint(server)
            ),
            kind: LossKind::NeedsLogin,
        }
    }
}

/// A transport error that may mean the connection is lost.
pub trait Classify {
    /// `Some` when the error means the connection is gone; `None` for errors a live server can cause.
    fn loss(&self, server: &str) -> Option<Loss>;
}

/// Where a watched transport reports its first loss; cheap to clone.
#[derive(Clone)]
pub struct LossSignal(watch::Sender<Option<Loss>>);

/// The receiving side: the session waits on it; clones see the same loss.
#[derive(Clone)]
pub struct Losses(watch::Receiver<Option<Loss>>);

pub fn channel() -> (LossSignal, Losses) {
    let (tx, rx) = watch::channel(None);
    (LossSignal(tx), Losses(rx))
}

impl LossSignal {
    /// Records `loss` unless an earlier one was recorded: the first cause is the one worth reporting.
    pub fn report(&self, loss: Loss) {
        self.0.send_if_modified(|slot| {
            if slot.is_some() {
                return false;
            }
            *slot = Some(loss);
            true
        });
    }
}

impl Losses {
    /// The loss reported so far, if any.
    pub fn current(&self) -> Option<Loss> {
        self.0.borrow().clone()
    }

    /// Waits until a loss is reported (at once if one already was).
    pub async fn wait(&mut self) -> Loss {
        let loss = self.0.wait_for(Option::is_some).await.ok().and_then(|loss| loss.clone());
        match loss {
            Some(loss) => loss,
            // Every sender is gone: the transport was dropped, which the session notices by other means.
            None => std::future::pending().await,
        }
    }
}

/// An error of a [`Watched`] transport: the transport's own, with the loss it means (if it means one).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct WatchedError {
    loss: Option<Loss>,
    #[source]
    error: Box<dyn std::error::Error + Send + Sync>,
}

impl WatchedError {
    fn new<E: Classify + std::error::Error + Send + Sync + 'static>(error: E, server: &str) -> WatchedError {
        WatchedError { loss: error.loss(server), error: Box::new(error) }
    }
}

/// The loss behind a request that could not be sent, if its transport is watched and the failure means the
/// connection is gone.
pub fn loss_of(error: &DynamicTransportError) -> Option<Loss> {
    error.error.downcast_ref::<WatchedError>()?.loss.clone()
}

/// A transport whose failures are classified and reported to a [`LossSignal`].
pub struct Watched<T> {
    inner: T,
    server: Arc<str>,
    signal: LossSignal,
}

impl<T> Watched<T> {
    pub fn new(inner: T, server: &str, signal: LossSignal) -> Watched<T> {
        Watched { inner, server: server.into(), signal }
    }
}

impl<T> Transport<RoleClient> for Watched<T>
where
    T: Transport<RoleClient>,
    T::Error: Classify,
{
    type Error = WatchedError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let sending = self.inner.send(item);
        let (server, signal) = (Arc::clone(&self.server), self.signal.clone());
        async move {
            let Err(error) = sending.await else {
                return Ok(());
            };
            let error = WatchedError::new(error, &server);
            if let Some(loss) = &error.loss {
                signal.report(loss.clone());
            }
            Err(error)
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        if let Some(message) = &message
            && is_stream_closed_marker(message)
        {
            self.signal.report(Loss::connection("the response stream closed before the final response"));
        }
        message
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await.map_err(|error| WatchedError::new(error, &self.server))
    }
}

/// rmcp's streamable HTTP client turns a response stream that ends before its response into a JSON-RPC
/// error carrying this marker in its data (the call then fails with `TransportClosed`).
fn is_stream_closed_marker(message: &ServerJsonRpcMessage) -> bool {
    match message {
        ServerJsonRpcMessage::Error(error) => {
            error.error.data.as_ref().and_then(|data| data.get("io.modelcontextprotocol/transportClosed")).is_some()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ClientRequest, PingRequest, RequestId};

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("connection refused")]
    struct Refused;

    impl Classify for Refused {
        fn loss(&self, server: &str) -> Option<Loss> {
            Some(Loss::connection(format!("{server}: {self}")))
        }
    }

    /// A transport whose every send is refused.
    struct Unreachable;

    impl Transport<RoleClient> for Unreachable {
        type Error = Refused;

        fn send(
            &mut self,
            _item: TxJsonRpcMessage<RoleClient>,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
            std::future::ready(Err(Refused))
        }

        async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
            None
        }

        async fn close(&mut self) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_failed_send_reports_its_loss_and_the_failed_request_tells_it_too() {
        let (signal, losses) = channel();
        let mut watched = Watched::new(Unreachable, "x", signal);
        let ping = ClientRequest::PingRequest(PingRequest::default());
        let error =
            watched.send(TxJsonRpcMessage::<RoleClient>::request(ping, RequestId::Number(1))).await.unwrap_err();
        assert_eq!(losses.current(), Some(Loss::connection("x: connection refused")));
        // As rmcp hands a failed request back: the transport's error, its type erased.
        let failed = DynamicTransportError::new::<Watched<Unreachable>, RoleClient>(error);
        assert_eq!(failed.error.to_string(), "connection refused");
        assert_eq!(loss_of(&failed), Some(Loss::connection("x: connection refused")));
        let other = DynamicTransportError::new::<Unreachable, RoleClient>(Refused);
        assert_eq!(loss_of(&other), None, "a transport that is not watched reports no loss");
    }

    #[tokio::test]
    async fn the_first_loss_is_kept() {
        let (signal, mut losses) = channel();
        assert_eq!(losses.current(), None);
        signal.report(Loss::connection("first"));
        signal.clone().report(Loss::connection("second"));
        assert_eq!(losses.wait().await.reason, "first");
    }

    #[test]
    fn credential_losses_say_so_plainly_and_never_carry_values() {
        let loss = Loss::credentials("x", 401);
        assert_eq!(loss.kind, LossKind::Credentials);
        assert!(
            loss.reason.starts_with("server 'x' rejected the credentials (HTTP 401 Unauthorized)"),
            "{}",
            loss.reason
        );
        assert!(Loss::credentials("x", 403).reason.contains("403 Forbidden"));
    }
}
