//! A login: discovery, the client's identity (pre-registered → client ID metadata document → dynamic
//! registration → an error asking for `client_id`), the authorization URL (PKCE S256, `state`, `resource`),
//! the person's approval in a browser, the loopback redirect, and the code exchanged for tokens that go to
//! the token file.

use std::path::Path;
use std::time::{Duration, Instant};

use oauth2::TokenResponse;
use rmcp::transport::auth::{
    AuthError, AuthorizationMetadata, AuthorizationRequest, AuthorizationSession, CredentialStore, StoredCredentials,
};

use super::callback::Listener;
use super::discover::discover;
use super::store::{Grant, TokenFile};
use super::{OAuthError, known_provider_page};
use crate::config::{AuthConfig, OAuthClient, ServerConfig};

/// How long a login waits for the person to approve in the browser.
pub const APPROVAL_WAIT: Duration = Duration::from_secs(300);

/// The name ptc-mcp registers under.
const CLIENT_NAME: &str = "ptc-mcp";

/// A login under way: the URL to open, and what finishes it.
pub struct PendingLogin {
    pub authorization_url: String,
    server: String,
    issuer: String,
    session: AuthorizationSession,
    listener: Listener,
    state: String,
    file: TokenFile,
    started: Instant,
}

/// What a finished login got.
#[derive(Debug)]
pub struct LoggedIn {
    pub issuer: String,
    pub scopes: Vec<String>,
    pub expires_in: Option<Duration>,
    pub refresh_token: bool,
    pub token_file: std::path::PathBuf,
    pub took: Duration,
}

impl std::fmt::Display for LoggedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scopes = if self.scopes.is_empty() { "none named".to_string() } else { self.scopes.join(" ") };
        let expiry = match self.expires_in {
            Some(life) => format!("expires in {}", humantime::format_duration(Duration::from_secs(life.as_secs()))),
            None => "no stated expiry".to_string(),
        };
        let refresh = if self.refresh_token {
            "refreshed automatically"
        } else {
            "no refresh token: log in again when it expires"
        };
        write!(
            f,
            "logged in at {}: scopes {scopes}; access token {expiry}, {refresh}; tokens in {} ({:.1}s)",
            self.issuer,
            self.token_file.display(),
            self.took.as_secs_f64()
        )
    }
}

/// Starts a login for `config`'s server: discovery, registration and the authorization URL. `store` is the
/// token folder.
pub async fn start(config: &ServerConfig, store: &Path) -> Result<PendingLogin, OAuthError> {
    let started = Instant::now();
    let server = config.name.clone();
    let client = match &config.auth {
        Some(AuthConfig::OAuth(client)) => client.clone(),
        Some(AuthConfig::ClientCredentials(_)) => return Err(OAuthError::NotInteractive { server }),
        None => return Err(OAuthError::NoAuth { server }),
    };
    let url = config.url.clone().unwrap_or_default();
    let discovered = discover(&server, &url).await?;
    let mut manager = discovered.manager;
    let file = TokenFile::new(store, &server, &discovered.issuer);
    let listener = Listener::bind(client.callback_port).await?;
    let redirect_uri = listener.redirect_uri();
    let previous = file.read().ok().flatten();
    let mut request = AuthorizationRequest::new(redirect_uri.clone()).with_client_name(CLIENT_NAME);
    // The configured scopes and those the server asked for since; else what its challenge or metadata names.
    let mut scopes = client.scopes.clone();
    scopes.extend(previous.iter().flat_map(|grant| grant.wanted_scopes.iter().cloned()));
    if scopes.is_empty() {
        scopes = manager.select_initial_scopes(&[]).await;
    }
    let scopes = dedup(scopes);
    if !scopes.is_empty() {
        request = request.with_scopes(scopes.clone());
    }
    let mut client_secret = None;
    match identity(&client, &discovered.metadata) {
        Identity::PreRegistered { client_id, client_secret: secret } => {
            request = request.with_preregistered_client(client_id);
            if let Some(secret) = secret {
                request = request.with_client_secret(secret);
            }
        }
        Identity::MetadataDocument(document) => request = request.with_client_metadata_url(document),
        Identity::Register => {
            let registered = manager
                .register_client(CLIENT_NAME, &redirect_uri, &scopes.iter().map(String::as_str).collect::<Vec<_>>())
                .await
                .map_err(|e| OAuthError::Registration { server: server.clone(), why: e.to_string() })?;
            request = request.with_preregistered_client(registered.client_id);
            if let Some(secret) = registered.client_secret {
                request = request.with_client_secret(secret.clone());
                client_secret = Some(secret);
            }
        }
        Identity::None => {
            return Err(OAuthError::NoRegistration {
                server,
                issuer: discovered.issuer.clone(),
                page: known_provider_page(&discovered.issuer),
            });
        }
    }
    let mut session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| OAuthError::Authorization { server: server.clone(), why: e.to_string() })?;
    let authorization_url = session.get_authorization_url().to_string();
    let state = reqwest::Url::parse(&authorization_url)
        .ok()
        .and_then(|u| u.query_pairs().find(|(k, _)| k == "state").map(|(_, v)| v.into_owned()))
        .ok_or_else(|| OAuthError::Authorization {
            server: server.clone(),
            why: "the authorization URL has no state".into(),
        })?;
    let grant = Grant {
        server: server.clone(),
        url,
        issuer: discovered.issuer.clone(),
        redirect_uri,
        client_secret,
        wanted_scopes: Vec::new(),
        credentials: None,
    };
    session.auth_manager.set_credential_store(NewGrant { file: file.clone(), grant });
    Ok(PendingLogin { authorization_url, server, issuer: discovered.issuer, session, listener, state, file, started })
}

impl PendingLogin {
    /// Where the browser comes back to: `http://127.0.0.1:PORT/callback`.
    pub fn redirect_uri(&self) -> String {
        self.listener.redirect_uri()
    }

    /// Waits (at most `limit`) for the redirect, exchanges the code and stores the tokens.
    pub async fn finish(self, limit: Duration) -> Result<LoggedIn, OAuthError> {
        let callback = self.listener.wait(&self.state, limit).await?;
        let failed = |e: AuthError| OAuthError::Authorization { server: self.server.clone(), why: e.to_string() };
        let response = self
            .session
            .handle_callback_with_issuer(&callback.code, &callback.state, callback.issuer.as_deref())
            .await
            .map_err(failed)?;
        let stored = self.file.read()?.and_then(|g| g.credentials);
        let scopes =
            stored.map(|c| c.granted_scopes).unwrap_or_default().into_iter().filter(|s| !s.is_empty()).collect();
        Ok(LoggedIn {
            issuer: self.issuer.clone(),
            scopes,
            expires_in: response.expires_in(),
            refresh_token: response.refresh_token().is_some(),
            token_file: self.file.path().to_path_buf(),
            took: self.started.elapsed(),
        })
    }
}

/// Where the login's token exchange saves: the whole new grant, written under the file's lock (a running
/// ptc-mcp refreshing the old tokens at that moment finishes first and then sees the new ones).
struct NewGrant {
    file: TokenFile,
    grant: Grant,
}

#[async_trait::async_trait]
impl CredentialStore for NewGrant {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(None)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let _lock = self.file.lock().await?;
        Ok(self.file.write(&Grant { credentials: Some(credentials), ..self.grant.clone() })?)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        Ok(())
    }
}

/// How ptc-mcp identifies itself to the authorization server.
enum Identity {
    PreRegistered { client_id: String, client_secret: Option<String> },
    MetadataDocument(String),
    Register,
    None,
}

/// The MCP spec's order: a pre-registered client, a client ID metadata document (if the authorization
/// server takes them), dynamic registration (if it offers it).
fn identity(client: &OAuthClient, metadata: &AuthorizationMetadata) -> Identity {
    if let Some(client_id) = &client.client_id {
        return Identity::PreRegistered {
            client_id: client_id.clone(),
            client_secret: client.client_secret.as_ref().map(|s| s.expose().to_string()),
        };
    }
    let takes_documents = metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    if let Some(document) = &client.client_metadata_url
        && takes_documents
    {
        return Identity::MetadataDocument(document.clone());
    }
    if metadata.registration_endpoint.is_some() { Identity::Register } else { Identity::None }
}

fn dedup(scopes: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    scopes.into_iter().filter(|s| seen.insert(s.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(registration: bool, documents: bool) -> AuthorizationMetadata {
        let mut metadata = AuthorizationMetadata::default();
        metadata.registration_endpoint = registration.then(|| "https://as.example/register".to_string());
        if documents {
            metadata.additional_fields.insert("client_id_metadata_document_supported".into(), true.into());
        }
        metadata
    }

    #[test]
    fn the_identity_follows_the_specs_order() {
        let configured = OAuthClient { client_id: Some("app".into()), ..OAuthClient::default() };
        assert!(
            matches!(identity(&configured, &metadata(true, true)), Identity::PreRegistered { client_id, .. } if client_id == "app")
        );
        let document = OAuthClient {
            client_metadata_url: Some("https://me.example/client.json".into()),
            ..OAuthClient::default()
        };
        assert!(matches!(identity(&document, &metadata(true, true)), Identity::MetadataDocument(_)));
        assert!(
            matches!(identity(&document, &metadata(true, false)), Identity::Register),
            "a document only where taken"
        );
        assert!(matches!(identity(&OAuthClient::default(), &metadata(true, false)), Identity::Register));
        assert!(matches!(identity(&OAuthClient::default(), &metadata(false, true)), Identity::None));
    }
}
