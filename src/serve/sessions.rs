//! The MCP sessions of 2025-era clients over HTTP: rmcp's in-memory sessions, at most `serve.http.max_sessions`
//! of them, each ended once it has had no request in flight and no open event stream for
//! `serve.http.session_idle_timeout_seconds`. (rmcp's own idle timeout counts only messages, so it would end a
//! session in the middle of a long run, or one whose client listens on its event stream.) Every request that
//! comes through a session is tagged with it ([`HttpSession`]): the run's record names the session we issued,
//! never a header a client chose.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, LocalSessionManagerError};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId, SessionManager};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::HttpConfig;
use crate::server::HttpSession;

pub struct Sessions {
    inner: LocalSessionManager,
    max: usize,
    idle_timeout: Duration,
    activity: Arc<Mutex<HashMap<SessionId, Activity>>>,
    /// Held while a session is created, so that two at once cannot both take the last place.
    admission: tokio::sync::Mutex<()>,
}

/// What keeps a session alive.
#[derive(Debug)]
struct Activity {
    /// Responses and event streams being sent.
    open_streams: usize,
    /// When the session last had something open or received a message.
    idle_since: Instant,
}

#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    #[error(transparent)]
    Session(#[from] LocalSessionManagerError),
    #[error(
        "too many MCP sessions: {max} are open (serve.http.max_sessions) and none has been idle for {}s; end the \
         sessions of clients you no longer use, or raise serve.http.max_sessions",
        .idle_timeout.as_secs()
    )]
    Full { max: usize, idle_timeout: Duration },
}

impl Sessions {
    pub fn new(http: &HttpConfig) -> Sessions {
        let mut inner = LocalSessionManager::default();
        // Idle sessions are ended here, by what they have open rather than by when their last message came.
        inner.session_config.keep_alive = None;
        Sessions {
            inner,
            max: http.max_sessions,
            idle_timeout: http.session_idle_timeout(),
            activity: Arc::default(),
            admission: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether an `initialize` would get a session now (after ending the idle ones); `Err` says why not.
    pub async fn admit(&self) -> Result<(), SessionsError> {
        self.end_idle().await;
        if self.open() < self.max { Ok(()) } else { Err(self.full()) }
    }

    /// Ends idle sessions every so often, until `stop`.
    pub fn expire_idle(self: &Arc<Self>, stop: CancellationToken) {
        let sessions = Arc::clone(self);
        let period = (self.idle_timeout / 4).min(Duration::from_secs(60));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticks.tick() => sessions.end_idle().await,
                    () = stop.cancelled() => return,
                }
            }
        });
    }

    async fn end_idle(&self) {
        let mut idle = Vec::new();
        self.lock().retain(|id, activity| {
            let keep = activity.open_streams > 0 || activity.idle_since.elapsed() < self.idle_timeout;
            if !keep {
                idle.push(id.clone());
            }
            keep
        });
        for id in idle {
            tracing::debug!("ending MCP session {id}: idle for {}s", self.idle_timeout.as_secs());
            if let Err(e) = self.inner.close_session(&id).await {
                tracing::warn!("ending idle MCP session {id} failed: {e}");
            }
        }
    }

    /// Sessions alive now.
    pub fn open(&self) -> usize {
        self.lock().len()
    }

    fn full(&self) -> SessionsError {
        SessionsError::Full { max: self.max, idle_timeout: self.idle_timeout }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Activity>> {
        self.activity.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn touch(&self, id: &SessionId) {
        if let Some(activity) = self.lock().get_mut(id) {
            activity.idle_since = Instant::now();
        }
    }

    /// Counts `stream` as open in session `id` until it ends or is dropped.
    fn track<S>(&self, id: &SessionId, stream: S) -> Tracked<S> {
        if let Some(activity) = self.lock().get_mut(id) {
            activity.open_streams += 1;
        }
        Tracked { stream, id: id.clone(), activity: Arc::clone(&self.activity) }
    }
}

/// Tags a message that came through session `id` with it.
fn tagged(id: &SessionId, mut message: ClientJsonRpcMessage) -> ClientJsonRpcMessage {
    message.insert_extension(HttpSession(Arc::clone(id)));
    message
}

impl SessionManager for Sessions {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let _admission = self.admission.lock().await;
        self.admit().await?;
        let (id, transport) = self.inner.create_session().await?;
        self.lock().insert(id.clone(), Activity { open_streams: 0, idle_since: Instant::now() });
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.touch(id);
        Ok(self.inner.initialize_session(id, tagged(id, message)).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.lock().remove(id);
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        let stream = self.inner.create_stream(id, tagged(id, message)).await?;
        Ok(self.track(id, stream))
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        self.touch(id);
        Ok(self.inner.accept_message(id, tagged(id, message)).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.create_standalone_stream(id).await?;
        Ok(self.track(id, stream))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.resume(id, last_event_id).await?;
        Ok(self.track(id, stream))
    }
}

/// A stream a session has open; when it ends or is dropped, the session's idle time starts again.
struct Tracked<S> {
    stream: S,
    id: SessionId,
    activity: Arc<Mutex<HashMap<SessionId, Activity>>>,
}

impl<S> Drop for Tracked<S> {
    fn drop(&mut self) {
        let mut sessions = self.activity.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(activity) = sessions.get_mut(&self.id) {
            activity.open_streams = activity.open_streams.saturating_sub(1);
            activity.idle_since = Instant::now();
        }
    }
}

impl<S: Stream + Unpin> Stream for Tracked<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        Pin::new(&mut self.stream).poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ClientNotification, GetExtensions, InitializedNotification};

    use super::*;

    fn sessions(max: usize, idle_seconds: u64) -> Sessions {
        let text =
            format!("serve:\n  http:\n    max_sessions: {max}\n    session_idle_timeout_seconds: {idle_seconds}\n");
        Sessions::new(&crate::config::Config::parse(&text, &|_| None).unwrap().serve.http)
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_cap_a_session_is_refused_until_one_has_been_idle_long_enough() {
        let sessions = sessions(2, 60);
        let (first, _) = sessions.create_session().await.unwrap();
        let (second, _) = sessions.create_session().await.unwrap();
        let refused = sessions.create_session().await.map(|(id, _)| id).unwrap_err();
        assert!(refused.to_string().starts_with("too many MCP sessions: 2 are open (serve.http.max_sessions)"));
        assert!(sessions.admit().await.is_err());
        // The first one listens on an event stream: never idle while it does.
        let listening = sessions.track(&first, futures::stream::pending::<ServerSseMessage>());
        tokio::time::advance(Duration::from_secs(61)).await;
        sessions.admit().await.expect("the second one was idle for 60 s and is ended");
        assert!(!sessions.has_session(&second).await.unwrap());
        assert!(sessions.has_session(&first).await.unwrap());
        // Its stream closed, its idle time starts again.
        drop(listening);
        tokio::time::advance(Duration::from_secs(59)).await;
        sessions.end_idle().await;
        assert!(sessions.has_session(&first).await.unwrap());
        tokio::time::advance(Duration::from_secs(1)).await;
        sessions.end_idle().await;
        assert!(!sessions.has_session(&first).await.unwrap());
    }

    #[test]
    fn a_message_through_a_session_names_that_session() {
        let id: SessionId = "issued-by-us".into();
        let notification = ClientJsonRpcMessage::notification(ClientNotification::InitializedNotification(
            InitializedNotification::default(),
        ));
        let ClientJsonRpcMessage::Notification(tagged) = tagged(&id, notification) else { unreachable!() };
        let HttpSession(named) = tagged.notification.extensions().get::<HttpSession>().unwrap();
        assert_eq!(named.as_ref(), "issued-by-us");
    }
}
