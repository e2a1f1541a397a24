//! `ptc-mcp logout NAME`: revoke the stored tokens where the authorization server offers revocation
//! (RFC 7009; the refresh token first, which most servers take as revoking its access tokens too), then
//! delete the server's token files, whatever their issuer.

use std::path::Path;
use std::time::Duration;

use oauth2::TokenResponse;

use super::OAuthError;
use super::discover::discover;
use super::store::{Grant, TokenFile};
use crate::config::{AuthConfig, ServerConfig};
use crate::registry::{describe_request_error, http_client};

/// How long one revocation request may take.
const REVOKE_TIMEOUT: Duration = Duration::from_secs(15);

/// What a logout did.
#[derive(Debug, Default)]
pub struct LoggedOut {
    /// The token files deleted.
    pub deleted: usize,
    /// What revocation did, in words (`revoked at ...`, or why not).
    pub revocation: Option<String>,
}

/// Logs `config`'s server out: revocation where offered, then its token files deleted.
pub async fn logout(config: &ServerConfig, store: &Path) -> Result<LoggedOut, OAuthError> {
    let files = TokenFile::all_of(store, &config.name);
    if files.is_empty() {
        return Ok(LoggedOut::default());
    }
    let url = config.url.clone().unwrap_or_default();
    let revocation = match discover(&config.name, &url).await {
        Ok(discovered) => {
            let endpoint = discovered.metadata.additional_fields.get("revocation_endpoint").and_then(|v| v.as_str());
            let file =
                files.iter().find(|file| file.path() == TokenFile::new(store, &config.name, &discovered.issuer).path());
            match (endpoint, file.and_then(|f| f.read().ok().flatten())) {
                (Some(endpoint), Some(grant)) => Some(revoke_grant(endpoint, &grant, config).await),
                (None, Some(_)) => {
                    Some("the authorization server offers no revocation; the tokens were only deleted".into())
                }
                (_, None) => None,
            }
        }
        Err(e) => Some(format!("not revoked ({e}); the tokens were only deleted")),
    };
    let mut deleted = 0;
    for file in &files {
        let _lock = file.lock().await?;
        if file.delete()? {
            deleted += 1;
        }
    }
    Ok(LoggedOut { deleted, revocation })
}

/// Revokes the refresh token, then the access token; says what happened.
async fn revoke_grant(endpoint: &str, grant: &Grant, config: &ServerConfig) -> String {
    let Some(credentials) = &grant.credentials else { return "no tokens to revoke".into() };
    let Some(response) = &credentials.token_response else { return "no tokens to revoke".into() };
    let configured_secret = match &config.auth {
        Some(AuthConfig::OAuth(client)) if client.client_id.as_deref() == Some(credentials.client_id.as_str()) => {
            client.client_secret.as_ref().map(|s| s.expose().to_string())
        }
        _ => None,
    };
    let secret = configured_secret.or_else(|| grant.client_secret.clone());
    let mut tokens = Vec::new();
    if let Some(refresh) = response.refresh_token() {
        tokens.push((refresh.secret().as_str(), "refresh_token"));
    }
    tokens.push((response.access_token().secret().as_str(), "access_token"));
    let mut revoked = Vec::new();
    for (token, hint) in tokens {
        match revoke_one(endpoint, token, hint, &credentials.client_id, secret.as_deref()).await {
            Ok(()) => revoked.push(hint.replace('_', " ")),
            Err(why) => {
                return format!("revoking the {} failed ({why}); the tokens were deleted", hint.replace('_', " "));
            }
        }
    }
    let origin = reqwest::Url::parse(endpoint).map(|u| u.origin().ascii_serialization()).unwrap_or_default();
    format!("revoked the {} at {origin}", revoked.join(" and "))
}

async fn revoke_one(
    endpoint: &str,
    token: &str,
    hint: &str,
    client_id: &str,
    secret: Option<&str>,
) -> Result<(), String> {
    match post_revocation(endpoint, token, hint, client_id, secret).await {
        // The MCP Python SDK's endpoint (FastMCP's servers) requires a `client_secret` field even of a public
        // client, and answers 400 without one: send it empty, once.
        Err(RevokeFailure::BadRequest) if secret.is_none() => {
            post_revocation(endpoint, token, hint, client_id, Some("")).await.map_err(|e| e.to_string())
        }
        other => other.map_err(|e| e.to_string()),
    }
}

#[derive(Debug, thiserror::Error)]
enum RevokeFailure {
    #[error("HTTP 400 Bad Request")]
    BadRequest,
    #[error("{0}")]
    Other(String),
}

async fn post_revocation(
    endpoint: &str,
    token: &str,
    hint: &str,
    client_id: &str,
    secret: Option<&str>,
) -> Result<(), RevokeFailure> {
    let client = http_client().map_err(|e| RevokeFailure::Other(e.to_string()))?;
    let mut form = vec![("token", token), ("token_type_hint", hint), ("client_id", client_id)];
    if let Some(secret) = secret {
        form.push(("client_secret", secret));
    }
    let request = client.post(endpoint).form(&form).send();
    let response = tokio::time::timeout(REVOKE_TIMEOUT, request)
        .await
        .map_err(|_| RevokeFailure::Other(format!("no answer within {}s", REVOKE_TIMEOUT.as_secs())))?
        .map_err(|e| RevokeFailure::Other(describe_request_error(&e)))?;
    // RFC 7009 §2.2: 200 also for a token the server no longer knows.
    match response.status() {
        status if status.is_success() => Ok(()),
        reqwest::StatusCode::BAD_REQUEST => Err(RevokeFailure::BadRequest),
        status => Err(RevokeFailure::Other(format!("HTTP {status}"))),
    }
}
