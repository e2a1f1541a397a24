//! MCP authorization for hosted servers (`auth: oauth`, `auth: {type: client_credentials}`): a person logs in
//! once (`ptc-mcp login NAME`), the tokens live in a private file, and every connection to the server gets a
//! fresh bearer token without the program, the model or a log ever seeing one.
//!
//! rmcp's `auth` feature does the protocol; what was found when probing rmcp 3.11 before relying on it:
//! - **Discovery**: `resolve_metadata_from_challenge` reads the challenge's `resource_metadata`, else the
//!   well-known protected-resource metadata (path-inserted, then root), then RFC 8414 and OpenID metadata
//!   of the authorization server it names, checking the metadata's `issuer` against the URL it came from.
//!   When nothing is found it makes up `/authorize`, `/token` and `/register` under the server's origin
//!   (`LegacyEndpointFallback`): [`discover`] refuses that (a server without metadata does not speak MCP
//!   authorization, and a made-up endpoint would be sent a code). Metadata hosts on loopback or private
//!   addresses are accepted only for a server on one (its resolver filters them).
//! - **`resource`** (RFC 8707): sent on the authorization request, the code exchange and every refresh; its
//!   value is the protected-resource metadata's `resource`, else the server URL. rmcp's client credentials
//!   grant needs it passed in: we pass the server URL.
//! - **PKCE**: always S256; rmcp refuses an authorization server that lists methods without S256 but only
//!   warns when the list is missing, which the MCP spec says to refuse: [`discover`] does (and refuses
//!   authorization-server endpoints that are not HTTPS, loopback excepted).
//! - **Client authentication**: with a secret, rmcp sends it by HTTP Basic when the metadata lists Basic
//!   and post; [`discover`] makes it post (the MCP Python SDK's servers read `client_id` from the body).
//! - **`state`**: rmcp keys its PKCE verifier by it; the loopback listener ([`callback`]) also refuses any
//!   redirect whose `state` is not this login's (and keeps waiting), before rmcp sees it.
//! - **`iss`** (RFC 9207): checked against the metadata's issuer when the redirect carries it, and required
//!   when the metadata says `authorization_response_iss_parameter_supported`.
//! - **Client ID metadata documents**: used by rmcp only when the authorization server advertises
//!   `client_id_metadata_document_supported` and the URL is https with a path; the URL becomes the client id.
//!   The order (pre-registered → document → dynamic registration → a clear error) is decided in [`login`],
//!   which also registers dynamically itself, to keep a secret the registration may return.
//! - **Storage**: rmcp keeps tokens behind its `CredentialStore` trait (in memory by default) and loads them
//!   on every request; a refresh stores the rotated refresh token (or keeps the old one when none comes
//!   back) before returning. [`store`] is our file store. rmcp's own `AuthClient` refreshes once per rejected
//!   request and its `configure_client_id` drops a client secret, so [`tokens`] and [`client`] replace both.
//! - **Logging**: rmcp logs the authorization code at DEBUG (`rmcp::transport::auth`): the log filter keeps
//!   that target at INFO or quieter whatever `RUST_LOG` says ([`LOG_CLAMP`]).
//! - **Revocation** (RFC 7009) is not in rmcp: [`revoke`] posts to the metadata's `revocation_endpoint`.

mod callback;
mod client;
mod discover;
pub mod login;
mod revoke;
mod store;
mod tokens;

pub use callback::CallbackError;
pub use client::Authorized;
pub use login::{LoggedIn, PendingLogin};
pub use revoke::{LoggedOut, logout};
pub use store::StoreError;
pub use tokens::{Credentials, TokenError};

/// rmcp's OAuth module, which logs authorization codes and token responses at DEBUG and TRACE.
const RMCP_AUTH: &str = "rmcp::transport::auth";
/// The directive that keeps it at INFO at most.
pub const LOG_CLAMP: &str = "rmcp::transport::auth=info";

/// `directives` (an `EnvFilter` string, e.g. `RUST_LOG`) with rmcp's OAuth module at INFO or quieter: a
/// directive of the user's that would let it log more is dropped, and [`LOG_CLAMP`] (more specific than any
/// directive for `rmcp` or everything) is added unless the user asked for it to be quieter still.
pub fn clamp_log_directives(directives: &str) -> String {
    let mut quieter = false;
    let mut kept: Vec<&str> = Vec::new();
    for directive in directives.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (target, level) = directive.split_once('=').unwrap_or((directive, "trace"));
        let target = target.split('[').next().unwrap_or(target);
        if target.starts_with(RMCP_AUTH) {
            match level.trim().to_ascii_lowercase().as_str() {
                "off" | "error" | "warn" | "info" if target == RMCP_AUTH => quieter = true,
                "off" | "error" | "warn" | "info" => {}
                _ => continue,
            }
        }
        kept.push(directive);
    }
    if !quieter {
        kept.push(LOG_CLAMP);
    }
    kept.join(",")
}

/// Why a login, a logout or a discovery failed. Never holds a token.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("no server named '{0}' in the config")]
    UnknownServer(String),
    #[error("server '{server}' has no `auth: oauth` in the config, so there is nothing to log in to")]
    NoAuth { server: String },
    #[error("server '{server}' uses client credentials: it gets its tokens itself, no login needed")]
    NotInteractive { server: String },
    #[error(
        "server '{server}' publishes no OAuth metadata (no protected-resource or authorization-server metadata was \
         found): it does not use MCP authorization; give it a static token in `headers` instead"
    )]
    NoMetadata { server: String },
    #[error("cannot find the authorization server of '{server}': {why}")]
    Discovery { server: String, why: String },
    #[error(
        "the authorization server of '{server}' ({issuer}) offers no dynamic client registration and takes no client \
         ID metadata documents: register an OAuth app with the provider{}, with the redirect URI \
         http://127.0.0.1:PORT/callback, then set auth.client_id (and client_secret, callback_port: PORT) for this \
         server", .page.map(|p| format!(" ({p})")).unwrap_or_default()
    )]
    NoRegistration { server: String, issuer: String, page: Option<&'static str> },
    #[error("dynamic client registration with the authorization server of '{server}' failed: {why}")]
    Registration { server: String, why: String },
    #[error("the login to '{server}' failed: {why}")]
    Authorization { server: String, why: String },
    #[error("there is no folder for tokens (HOME is not set): set oauth.token_store in the config")]
    NoStore,
    #[error(transparent)]
    Callback(#[from] CallbackError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The config file this process loaded, for [`login_hint`] (set once, at start).
static CONFIG_FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Records the config file this process loaded: the login command it suggests names it, so that it works
/// from any shell (a client such as Claude Code may have started ptc-mcp with `--config` elsewhere).
pub fn set_config_file(path: &std::path::Path) {
    let _ = CONFIG_FILE.set(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
}

/// The command that fixes a server that needs login.
pub fn login_hint(server: &str) -> String {
    let config =
        CONFIG_FILE.get().map(|path| format!(" --config {}", shell_word(&path.to_string_lossy()))).unwrap_or_default();
    format!("ptc-mcp login {}{config}", shell_word(server))
}

/// `word` as a shell reads it back: as it is when it is plain, else in single quotes.
fn shell_word(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c)) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// Where a known provider without dynamic registration lets people register an OAuth app.
fn known_provider_page(issuer: &str) -> Option<&'static str> {
    let host = reqwest::Url::parse(issuer).ok()?.host_str()?.to_ascii_lowercase();
    let pages: &[(&str, &str)] = &[
        ("github.com", "https://github.com/settings/developers"),
        ("gitlab.com", "https://gitlab.com/-/user_settings/applications"),
        ("accounts.google.com", "https://console.cloud.google.com/apis/credentials"),
        ("login.microsoftonline.com", "https://entra.microsoft.com (App registrations)"),
        ("slack.com", "https://api.slack.com/apps"),
    ];
    pages.iter().find(|(known, _)| host == *known || host.ends_with(&format!(".{known}"))).map(|(_, page)| *page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_is_a_command_a_shell_takes_as_it_is() {
        assert_eq!(login_hint("linear"), "ptc-mcp login linear");
        assert_eq!(login_hint("my server"), "ptc-mcp login 'my server'");
        assert_eq!(shell_word("/home/me/my config.yaml"), "'/home/me/my config.yaml'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }

    #[test]
    fn rmcps_oauth_module_never_logs_below_info() {
        assert_eq!(clamp_log_directives("info,rmcp=warn"), "info,rmcp=warn,rmcp::transport::auth=info");
        assert_eq!(clamp_log_directives("trace"), "trace,rmcp::transport::auth=info");
        assert_eq!(clamp_log_directives("rmcp::transport::auth=debug,x=info"), "x=info,rmcp::transport::auth=info");
        assert_eq!(clamp_log_directives("rmcp::transport::auth"), "rmcp::transport::auth=info");
        assert_eq!(clamp_log_directives("rmcp::transport::auth=warn"), "rmcp::transport::auth=warn");
        let filter = tracing_subscriber::EnvFilter::try_new(clamp_log_directives("debug,rmcp::transport::auth=trace"));
        assert!(filter.is_ok());
    }

    #[test]
    fn known_providers_name_their_registration_page() {
        assert_eq!(
            known_provider_page("https://github.com/login/oauth"),
            Some("https://github.com/settings/developers")
        );
        assert_eq!(known_provider_page("https://mcp.example.com/"), None);
    }
}
