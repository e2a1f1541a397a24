//! The bearer token of one server, for its connections: kept in memory while fresh, renewed before it
//! expires and when the server rejects it, with one renewal at a time however many calls need it (in this
//! process by a mutex, across processes by the token file's lock; a caller that waited finds the token the
//! first one got). A renewal that cannot succeed without a person (no tokens, a rejected refresh token) is
//! [`TokenError::NeedsLogin`], at once, never retried in a loop.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use oauth2::TokenResponse;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, ClientCredentialsConfig, OAuthClientConfig, OAuthTokenResponse, StoredCredentials,
};

use super::discover::discover;
use super::store::{self, Grant, TokenFile};
use super::{OAuthError, login_hint};
use crate::config::{AuthConfig, ServerConfig};

/// A token is renewed once less than this much of its life is left (or half its life, if that is shorter).
const RENEW_MARGIN: Duration = Duration::from_secs(30);

/// How often a server that needs login looks for a login's token file.
const LOGIN_POLL: Duration = Duration::from_millis(500);

/// Why no token can be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenError {
    /// Only a person can fix it: `ptc-mcp login NAME`.
    #[error("{why}")]
    NeedsLogin { why: String },
    /// The authorization server could not be reached or failed; a later attempt may work.
    #[error("{0}")]
    Unavailable(String),
    /// The authorization server refused the configured client credentials.
    #[error("the authorization server refused the client credentials: {0}")]
    Refused(String),
}

/// An access token and when to renew it.
#[derive(Clone)]
struct Token {
    access: Arc<str>,
    renew_at: Option<SystemTime>,
}

impl Token {
    fn from_response(response: &OAuthTokenResponse, received: SystemTime) -> Token {
        let renew_at = response.expires_in().map(|life| received + life - RENEW_MARGIN.min(life / 2));
        Token { access: response.access_token().secret().as_str().into(), renew_at }
    }

    fn from_stored(credentials: &StoredCredentials) -> Option<Token> {
        let response = credentials.token_response.as_ref()?;
        let received = UNIX_EPOCH + Duration::from_secs(credentials.token_received_at.unwrap_or(0));
        Some(Token::from_response(response, received))
    }

    fn fresh(&self) -> bool {
        self.renew_at.is_none_or(|at| SystemTime::now() < at)
    }
}

/// What renewals need, set up once (discovery, the client's identity).
struct Prepared {
    manager: AuthorizationManager,
    /// `None` for client credentials (their tokens stay in memory: the secret buys another).
    file: Option<TokenFile>,
    client_id: String,
}

/// The bearer token source of one server.
pub struct Credentials {
    server: String,
    url: String,
    auth: AuthConfig,
    store: Option<PathBuf>,
    current: Mutex<Option<Token>>,
    renewal: tokio::sync::Mutex<Option<Prepared>>,
    /// The token file found by the last discovery (where wanted scopes are recorded).
    file: Mutex<Option<TokenFile>>,
    /// The last reason logged, so that a reason is logged once, not on every attempt.
    last_logged: Mutex<Option<String>>,
}

impl Credentials {
    /// The token source of `config`'s server, `None` without `auth`. Tokens live in `store`.
    pub fn of(config: &ServerConfig, store: Option<PathBuf>) -> Option<Arc<Credentials>> {
        let auth = config.auth.clone()?;
        Some(Arc::new(Credentials {
            server: config.name.clone(),
            url: config.url.clone().unwrap_or_default(),
            auth,
            store,
            current: Mutex::new(None),
            renewal: tokio::sync::Mutex::new(None),
            file: Mutex::new(None),
            last_logged: Mutex::new(None),
        }))
    }

    /// Whether a person can log in for this server (the authorization code flow).
    pub fn is_interactive(&self) -> bool {
        matches!(self.auth, AuthConfig::OAuth(_))
    }

    /// The folder of the token files, if there is one.
    pub fn store(&self) -> Option<&std::path::Path> {
        self.store.as_deref()
    }

    /// A token to send: the current one while it is fresh, else a renewed one.
    pub async fn bearer(&self) -> Result<Arc<str>, TokenError> {
        if let Some(token) = self.current() {
            return Ok(token.access);
        }
        self.renew(None).await
    }

    /// The server rejected `sent`: a token other than that one (renewed by this call, or by another that
    /// got there first).
    pub async fn rejected(&self, sent: &str) -> Result<Arc<str>, TokenError> {
        self.renew(Some(sent)).await
    }

    /// The server asked for `required` (space-separated scopes) beyond the grant: the next login asks for
    /// the union.
    pub async fn want_scopes(&self, required: &str) {
        // The token lacks them: the next request asks the file again (where a new login's token goes).
        self.forget();
        let Some(file) = self.file.lock().unwrap_or_else(|e| e.into_inner()).clone() else { return };
        let Ok(_lock) = file.lock().await else { return };
        let added = file.update(|grant| {
            for scope in required.split_whitespace().filter(|s| !s.is_empty()) {
                if !grant.wanted_scopes.iter().any(|s| s == scope) {
                    grant.wanted_scopes.push(scope.to_string());
                }
            }
        });
        if let Err(e) = added {
            tracing::warn!(server = %self.server, "cannot record the scopes the server asks for: {e}");
        }
    }

    /// Waits until the server's token files change (a login in another process wrote them); the token
    /// kept in memory is then forgotten, for the login's.
    pub async fn wait_for_login(&self) {
        let Some(store) = self.store.clone() else { return std::future::pending().await };
        let before = store::snapshot(&store, &self.server);
        loop {
            tokio::time::sleep(LOGIN_POLL).await;
            if store::snapshot(&store, &self.server) != before {
                self.forget();
                return;
            }
        }
    }

    fn current(&self) -> Option<Token> {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).clone().filter(Token::fresh)
    }

    fn keep(&self, token: Token) -> Arc<str> {
        let access = Arc::clone(&token.access);
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(token);
        *self.last_logged.lock().unwrap_or_else(|e| e.into_inner()) = None;
        access
    }

    fn forget(&self) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    async fn renew(&self, rejected: Option<&str>) -> Result<Arc<str>, TokenError> {
        let mut renewal = self.renewal.lock().await;
        // Renewed by the caller we waited for.
        if let Some(token) = self.current()
            && rejected != Some(&*token.access)
        {
            return Ok(token.access);
        }
        let result = self.renew_locked(&mut renewal, rejected).await;
        if let Err(error) = &result {
            self.forget();
            self.log_once(error);
        }
        result
    }

    async fn renew_locked(
        &self,
        renewal: &mut Option<Prepared>,
        rejected: Option<&str>,
    ) -> Result<Arc<str>, TokenError> {
        if renewal.is_none() {
            *renewal = Some(self.prepare().await?);
        }
        let prepared = renewal.as_mut().expect("prepared above");
        let Some(file) = prepared.file.clone() else {
            return self.buy_with_client_credentials(&prepared.manager).await;
        };
        let _lock = file.lock().await.map_err(|e| TokenError::Unavailable(e.to_string()))?;
        let grant = self.grant(&file)?;
        let stored = grant.credentials.as_ref().ok_or_else(|| self.no_tokens())?;
        // Another process (or a login) may have stored a token since ours.
        if let Some(token) = Token::from_stored(stored)
            && token.fresh()
            && rejected != Some(&*token.access)
        {
            return Ok(self.keep(token));
        }
        if stored.client_id != prepared.client_id {
            configure_client(&mut prepared.manager, &self.auth, &grant)?;
            prepared.client_id = stored.client_id.clone();
        }
        let received = SystemTime::now();
        match prepared.manager.refresh_token().await {
            Ok(response) => Ok(self.keep(Token::from_response(&response, received))),
            Err(AuthError::AuthorizationRequired) => Err(TokenError::NeedsLogin {
                why: "the stored tokens have expired and there is no refresh token".into(),
            }),
            Err(AuthError::TokenRefreshRejected(why)) => Err(TokenError::NeedsLogin {
                why: format!("the authorization server rejected the refresh token ({why})"),
            }),
            Err(other) => Err(TokenError::Unavailable(format!("the token could not be refreshed: {other}"))),
        }
    }

    /// Discovery and the client's identity, for the stored tokens' authorization server.
    async fn prepare(&self) -> Result<Prepared, TokenError> {
        let discovered = discover(&self.server, &self.url).await.map_err(|e| match e {
            OAuthError::NoMetadata { .. } => TokenError::NeedsLogin { why: e.to_string() },
            other => TokenError::Unavailable(other.to_string()),
        })?;
        let mut manager = discovered.manager;
        if let Some(config) = self.client_credentials() {
            let refused = |e: AuthError| TokenError::Refused(e.to_string());
            manager.validate_client_credentials_metadata(&config).map_err(refused)?;
            manager.configure_client_credentials(&config).map_err(refused)?;
            return Ok(Prepared { manager, file: None, client_id: String::new() });
        }
        let store = self.store.as_deref().ok_or_else(|| TokenError::NeedsLogin {
            why: "there is no folder for tokens (HOME is not set); set oauth.token_store".into(),
        })?;
        let file = TokenFile::new(store, &self.server, &discovered.issuer);
        manager.set_credential_store(file.clone());
        *self.file.lock().unwrap_or_else(|e| e.into_inner()) = Some(file.clone());
        let grant = self.grant(&file)?;
        let credentials = grant.credentials.as_ref().ok_or_else(|| self.no_tokens())?;
        configure_client(&mut manager, &self.auth, &grant)?;
        Ok(Prepared { manager, file: Some(file), client_id: credentials.client_id.clone() })
    }

    /// The file's grant, if it was made for this server's URL.
    fn grant(&self, file: &TokenFile) -> Result<Grant, TokenError> {
        let grant = file.read().map_err(|e| TokenError::Unavailable(e.to_string()))?.ok_or_else(|| self.no_tokens())?;
        if grant.url != self.url {
            return Err(TokenError::NeedsLogin {
                why: format!("the stored tokens were issued for {}, not for {}", grant.url, self.url),
            });
        }
        Ok(grant)
    }

    fn no_tokens(&self) -> TokenError {
        TokenError::NeedsLogin { why: "no tokens are stored for it".into() }
    }

    async fn buy_with_client_credentials(&self, manager: &AuthorizationManager) -> Result<Arc<str>, TokenError> {
        let config = self.client_credentials().expect("only client credentials lack a token file");
        let received = SystemTime::now();
        let response = manager.exchange_client_credentials(&config).await.map_err(|e| match e {
            AuthError::ClientCredentialsError(why) => TokenError::Refused(why),
            other => TokenError::Unavailable(other.to_string()),
        })?;
        Ok(self.keep(Token::from_response(&response, received)))
    }

    fn client_credentials(&self) -> Option<ClientCredentialsConfig> {
        let AuthConfig::ClientCredentials(client) = &self.auth else { return None };
        Some(ClientCredentialsConfig::ClientSecret {
            client_id: client.client_id.clone(),
            client_secret: client.client_secret.expose().to_string(),
            scopes: client.scopes.clone(),
            resource: Some(self.url.clone()),
        })
    }

    fn log_once(&self, error: &TokenError) {
        let why = error.to_string();
        let mut last = self.last_logged.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_deref() != Some(why.as_str()) {
            match error {
                TokenError::NeedsLogin { .. } => {
                    tracing::warn!(server = %self.server, "needs login: {why}; run `{}`", login_hint(&self.server))
                }
                TokenError::Unavailable(_) | TokenError::Refused(_) => {
                    tracing::warn!(server = %self.server, "no token: {why}")
                }
            }
            *last = Some(why);
        }
    }
}

/// Points rmcp's client at the stored client identity (a configured secret, else the one registration gave).
fn configure_client(manager: &mut AuthorizationManager, auth: &AuthConfig, grant: &Grant) -> Result<(), TokenError> {
    let credentials = grant
        .credentials
        .as_ref()
        .ok_or_else(|| TokenError::NeedsLogin { why: "no tokens are stored for it".into() })?;
    let configured_secret = match auth {
        AuthConfig::OAuth(client) if client.client_id.as_deref() == Some(credentials.client_id.as_str()) => {
            client.client_secret.as_ref().map(|s| s.expose().to_string())
        }
        _ => None,
    };
    let mut config = OAuthClientConfig::new(credentials.client_id.clone(), grant.redirect_uri.clone());
    if let Some(secret) = configured_secret.or_else(|| grant.client_secret.clone()) {
        config = config.with_client_secret(secret);
    }
    manager.configure_client(config).map_err(|e| TokenError::Unavailable(e.to_string()))
}
