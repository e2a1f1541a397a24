//! Finding a server's authorization server, as the MCP authorization spec orders it: the `resource_metadata`
//! of the server's `401` challenge, else its well-known protected-resource metadata (RFC 9728), then the
//! authorization server's RFC 8414 or OpenID metadata. rmcp does the reading; this refuses what rmcp would
//! make up when nothing is found (`/authorize`, `/token`, `/register` under the server's origin).

use reqwest::header::{ACCEPT, CONTENT_TYPE, WWW_AUTHENTICATE};
use rmcp::transport::auth::{AuthorizationManager, AuthorizationMetadata};

use super::OAuthError;
use crate::registry::http_client;

/// How long the unauthenticated request that fetches the challenge may take (rmcp bounds its own at 30 s).
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A server's authorization server, found.
pub struct Discovered {
    /// rmcp's manager, its metadata set (and the `resource` of the protected-resource metadata recorded).
    pub manager: AuthorizationManager,
    pub metadata: AuthorizationMetadata,
    /// The issuer that keys the token file (the metadata's, else the authorization endpoint's origin).
    pub issuer: String,
}

/// Discovers the authorization server of `server` at `url`.
pub async fn discover(server: &str, url: &str) -> Result<Discovered, OAuthError> {
    let failed = |error: rmcp::transport::auth::AuthError| OAuthError::Discovery {
        server: server.into(),
        why: error.to_string(),
    };
    let challenge = challenge(server, url).await?;
    let mut manager = AuthorizationManager::new(url).await.map_err(failed)?;
    let resolution = manager.resolve_metadata_from_challenge(challenge.as_deref()).await.map_err(failed)?;
    if !resolution.source.is_discovered() {
        return Err(OAuthError::NoMetadata { server: server.into() });
    }
    let mut metadata = resolution.metadata;
    check_metadata(&metadata).map_err(|why| OAuthError::Discovery { server: server.into(), why })?;
    prefer_secret_in_body(&mut metadata);
    let issuer = metadata.issuer.clone().unwrap_or_else(|| {
        reqwest::Url::parse(&metadata.authorization_endpoint)
            .map(|url| url.origin().ascii_serialization())
            .unwrap_or_else(|_| metadata.authorization_endpoint.clone())
    });
    manager.set_metadata(metadata.clone());
    Ok(Discovered { manager, metadata, issuer })
}

/// The `WWW-Authenticate` challenge an unauthenticated request to the server gets, if it answers 401.
async fn challenge(server: &str, url: &str) -> Result<Option<String>, OAuthError> {
    let unreachable = |why: String| OAuthError::Discovery { server: server.into(), why };
    let client = http_client().map_err(|e| unreachable(e.to_string()))?;
    let ping = serde_json::json!({"jsonrpc": "2.0", "id": "ptc-mcp-auth-probe", "method": "ping"});
    let response = client
        .post(url)
        .header(ACCEPT, "application/json, text/event-stream")
        .header(CONTENT_TYPE, "application/json")
        .body(ping.to_string())
        .timeout(PROBE_TIMEOUT)
        .send()
        .await
        .map_err(|e| unreachable(crate::registry::describe_request_error(&e)))?;
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return Ok(None);
    }
    Ok(response.headers().get(WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()).map(str::to_string))
}

/// What the MCP authorization spec asks a client to refuse: an authorization server that does not say it
/// supports PKCE with S256 (rmcp only warns when the list is missing), and endpoints that are not HTTPS
/// (loopback excepted: a server on this machine).
fn check_metadata(metadata: &AuthorizationMetadata) -> Result<(), String> {
    let methods = metadata.code_challenge_methods_supported.as_deref().unwrap_or_default();
    if !methods.iter().any(|m| m == "S256") {
        return Err("its metadata does not list PKCE method S256 in code_challenge_methods_supported, which MCP \
                    authorization requires"
            .into());
    }
    let endpoints = [
        Some(&metadata.authorization_endpoint),
        Some(&metadata.token_endpoint),
        metadata.registration_endpoint.as_ref(),
    ];
    for endpoint in endpoints.into_iter().flatten() {
        let Ok(url) = reqwest::Url::parse(endpoint) else {
            return Err(format!("its endpoint {endpoint} is not a URL"));
        };
        let host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
        let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if url.scheme() != "https" && !loopback {
            return Err(format!("its endpoint {} is not HTTPS", url.origin().ascii_serialization()));
        }
    }
    Ok(())
}

/// A client with a secret sends it in the token request's body (`client_secret_post`) when the authorization
/// server takes that, rather than in HTTP Basic (rmcp's choice when both are listed): the MCP Python SDK's
/// authorization servers (FastMCP's) read `client_id` from the body even with Basic, and refuse without it.
fn prefer_secret_in_body(metadata: &mut AuthorizationMetadata) {
    const KEY: &str = "token_endpoint_auth_methods_supported";
    let Some(methods) = metadata.additional_fields.get_mut(KEY).and_then(|v| v.as_array_mut()) else { return };
    if methods.iter().any(|m| m == "client_secret_post") {
        methods.retain(|m| m != "client_secret_basic");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(endpoint: &str, methods: Option<&[&str]>) -> AuthorizationMetadata {
        let mut metadata = AuthorizationMetadata::default();
        metadata.authorization_endpoint = format!("{endpoint}/authorize");
        metadata.token_endpoint = format!("{endpoint}/token");
        metadata.code_challenge_methods_supported = methods.map(|m| m.iter().map(|s| s.to_string()).collect());
        metadata
    }

    #[test]
    fn servers_without_s256_or_https_are_refused() {
        assert_eq!(check_metadata(&metadata("https://as.example", Some(&["S256"]))), Ok(()));
        assert_eq!(check_metadata(&metadata("http://127.0.0.1:8000", Some(&["plain", "S256"]))), Ok(()));
        assert!(check_metadata(&metadata("https://as.example", None)).unwrap_err().contains("S256"));
        assert!(check_metadata(&metadata("https://as.example", Some(&["plain"]))).unwrap_err().contains("S256"));
        assert_eq!(
            check_metadata(&metadata("http://as.example", Some(&["S256"]))),
            Err("its endpoint http://as.example is not HTTPS".into())
        );
    }

    #[test]
    fn a_secret_goes_in_the_body_where_the_server_takes_it_there() {
        let mut both = AuthorizationMetadata::default();
        both.additional_fields.insert(
            "token_endpoint_auth_methods_supported".into(),
            serde_json::json!(["client_secret_post", "client_secret_basic", "none"]),
        );
        prefer_secret_in_body(&mut both);
        assert_eq!(
            both.additional_fields["token_endpoint_auth_methods_supported"],
            serde_json::json!(["client_secret_post", "none"])
        );
        let mut basic_only = AuthorizationMetadata::default();
        basic_only
            .additional_fields
            .insert("token_endpoint_auth_methods_supported".into(), serde_json::json!(["client_secret_basic"]));
        prefer_secret_in_body(&mut basic_only);
        assert_eq!(
            basic_only.additional_fields["token_endpoint_auth_methods_supported"],
            serde_json::json!(["client_secret_basic"])
        );
    }
}
