//! `auth` of an `http`/`sse` server (MCP authorization: OAuth 2.1 with PKCE, or client credentials) and the
//! top-level `oauth` section (where tokens are kept).

use std::path::PathBuf;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, de::value::MapAccessDeserializer};

use super::Secret;
use super::expand::{self, ExpandError};

/// How ptc-mcp gets the bearer token of a server.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthConfig {
    /// The authorization code flow: a person logs in once (`ptc-mcp login NAME`), tokens are refreshed.
    OAuth(OAuthClient),
    /// Machine-to-machine: the client's own credentials buy a token, no person involved.
    ClientCredentials(ClientCredentials),
}

/// `auth: oauth`, or its mapping form: what ptc-mcp tells the authorization server about itself.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthClient {
    /// A client registered ahead with the provider (e.g. a GitHub OAuth app); without it ptc-mcp uses a client
    /// ID metadata document (`client_metadata_url`) or registers itself dynamically.
    pub client_id: Option<String>,
    pub client_secret: Option<Secret>,
    /// Scopes to ask for; without them, what the server's challenge or metadata names.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The loopback port of the redirect URI (`http://127.0.0.1:PORT/callback`); 0: any free port. A
    /// pre-registered client needs the port it was registered with.
    #[serde(default)]
    pub callback_port: u16,
    /// The HTTPS URL of ptc-mcp's client ID metadata document, used when the authorization server supports them.
    pub client_metadata_url: Option<String>,
}

/// `auth: {type: client_credentials, ...}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientCredentials {
    pub client_id: String,
    pub client_secret: Secret,
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// The mapping form, tagged by `type`.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Tagged {
    #[serde(rename = "oauth")]
    OAuth(OAuthClient),
    ClientCredentials(ClientCredentials),
}

impl<'de> Deserialize<'de> for AuthConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<AuthConfig, D::Error> {
        struct AuthVisitor;

        impl<'de> Visitor<'de> for AuthVisitor {
            type Value = AuthConfig;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("`oauth`, or a mapping with `type: oauth` or `type: client_credentials`")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<AuthConfig, E> {
                match value {
                    "oauth" => Ok(AuthConfig::OAuth(OAuthClient::default())),
                    "client_credentials" => Err(E::custom(
                        "client_credentials needs the mapping form: {type: client_credentials, client_id: ..., \
                         client_secret: ...}",
                    )),
                    other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
                }
            }

            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<AuthConfig, M::Error> {
                Ok(match Tagged::deserialize(MapAccessDeserializer::new(map))? {
                    Tagged::OAuth(client) => AuthConfig::OAuth(client),
                    Tagged::ClientCredentials(credentials) => AuthConfig::ClientCredentials(credentials),
                })
            }
        }

        deserializer.deserialize_any(AuthVisitor)
    }
}

/// An `auth` entry that cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthConfigError {
    #[error("auth.client_secret: needs auth.client_id, the client the secret belongs to")]
    SecretWithoutId,
    #[error("auth.{0}: must not be empty")]
    Empty(&'static str),
    #[error("auth.client_metadata_url: must be an https:// URL with a path (the client ID metadata document)")]
    MetadataUrl,
    #[error("auth: replaces the `Authorization` header; remove that header (other headers may stay)")]
    WithAuthorizationHeader,
    #[error("auth.{key}: {source}")]
    Variable {
        key: &'static str,
        #[source]
        source: ExpandError,
    },
}

impl AuthConfig {
    pub(super) fn validate(&self) -> Result<(), AuthConfigError> {
        match self {
            AuthConfig::OAuth(client) => {
                if client.client_secret.is_some() && client.client_id.is_none() {
                    return Err(AuthConfigError::SecretWithoutId);
                }
                if client.scopes.iter().any(|s| s.trim().is_empty()) {
                    return Err(AuthConfigError::Empty("scopes"));
                }
            }
            AuthConfig::ClientCredentials(credentials) => {
                if credentials.client_id.trim().is_empty() {
                    return Err(AuthConfigError::Empty("client_id"));
                }
                if credentials.scopes.iter().any(|s| s.trim().is_empty()) {
                    return Err(AuthConfigError::Empty("scopes"));
                }
            }
        }
        Ok(())
    }

    /// Expands `${VAR}` in the client's identity and secret, then checks what only expanded values show.
    pub(super) fn expand(&mut self, lookup: &dyn Fn(&str) -> Option<String>) -> Result<(), AuthConfigError> {
        let expand_one = |key: &'static str, text: &str| {
            expand::expand(text, lookup).map_err(|source| AuthConfigError::Variable { key, source })
        };
        match self {
            AuthConfig::OAuth(client) => {
                if let Some(id) = &client.client_id {
                    client.client_id = Some(expand_one("client_id", id)?).filter(|id| !id.is_empty());
                }
                if let Some(secret) = &client.client_secret {
                    let secret = expand_one("client_secret", secret.expose())?;
                    client.client_secret = (!secret.is_empty()).then(|| Secret::new(secret));
                }
                if let Some(url) = &client.client_metadata_url {
                    let url = expand_one("client_metadata_url", url)?;
                    if !is_https_url_with_path(&url) {
                        return Err(AuthConfigError::MetadataUrl);
                    }
                    client.client_metadata_url = Some(url);
                }
                if client.client_secret.is_some() && client.client_id.is_none() {
                    return Err(AuthConfigError::SecretWithoutId);
                }
            }
            AuthConfig::ClientCredentials(credentials) => {
                credentials.client_id = expand_one("client_id", &credentials.client_id)?;
                credentials.client_secret =
                    Secret::new(expand_one("client_secret", credentials.client_secret.expose())?);
                if credentials.client_id.is_empty() {
                    return Err(AuthConfigError::Empty("client_id"));
                }
                if credentials.client_secret.expose().is_empty() {
                    return Err(AuthConfigError::Empty("client_secret"));
                }
            }
        }
        Ok(())
    }
}

fn is_https_url_with_path(text: &str) -> bool {
    reqwest::Url::parse(text).is_ok_and(|url| url.scheme() == "https" && url.has_host() && url.path() != "/")
}

/// The top-level `oauth` section.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OAuthConfig {
    /// The folder of the token files; default: a `ptc-mcp` folder in the user's config directory.
    pub token_store: Option<PathBuf>,
}

impl OAuthConfig {
    /// Where token files live: `token_store`, else `$XDG_CONFIG_HOME/ptc-mcp` (`~/.config/ptc-mcp`), or
    /// `~/Library/Application Support/ptc-mcp` on macOS. `None` when there is no home to find it in.
    pub fn token_store(&self) -> Option<PathBuf> {
        if let Some(path) = &self.token_store {
            return Some(path.clone());
        }
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        let config_dir = if cfg!(target_os = "macos") {
            home.map(|home| home.join("Library/Application Support"))
        } else {
            std::env::var_os("XDG_CONFIG_HOME")
                .filter(|dir| !dir.is_empty())
                .map(PathBuf::from)
                .or_else(|| home.map(|home| home.join(".config")))
        };
        config_dir.map(|dir| dir.join("ptc-mcp"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<AuthConfig, String> {
        serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn the_word_and_the_mapping_forms_parse() {
        assert_eq!(parse("oauth").unwrap(), AuthConfig::OAuth(OAuthClient::default()));
        let mapped = parse("{type: oauth, client_id: abc, scopes: [repo], callback_port: 8976}").unwrap();
        let AuthConfig::OAuth(client) = mapped else { panic!("{mapped:?}") };
        assert_eq!(client.client_id.as_deref(), Some("abc"));
        assert_eq!((client.scopes, client.callback_port), (vec!["repo".to_string()], 8976));
        let machine = parse("{type: client_credentials, client_id: m, client_secret: s}").unwrap();
        assert!(matches!(machine, AuthConfig::ClientCredentials(c) if c.client_id == "m"));
    }

    #[test]
    fn unknown_words_keys_and_types_are_errors_that_say_what_is_expected() {
        assert!(parse("token").unwrap_err().contains("expected `oauth`, or a mapping"), "{:?}", parse("token"));
        assert!(parse("{type: oauth, client: x}").unwrap_err().contains("unknown field `client`"));
        assert!(parse("{type: saml}").unwrap_err().contains("unknown variant `saml`"));
        assert!(parse("{type: client_credentials, client_id: m}").unwrap_err().contains("client_secret"));
        assert!(parse("client_credentials").unwrap_err().contains("needs the mapping form"));
    }

    #[test]
    fn secrets_expand_and_a_secret_needs_its_client() {
        let env = |name: &str| (name == "SECRET").then(|| "s3cret".to_string());
        let mut auth = parse("{type: oauth, client_id: abc, client_secret: '${SECRET}'}").unwrap();
        auth.expand(&env).unwrap();
        let AuthConfig::OAuth(client) = &auth else { unreachable!() };
        assert_eq!(client.client_secret.as_ref().map(Secret::expose), Some("s3cret"));
        assert!(!format!("{auth:?}").contains("s3cret"));
        let lone = parse("{type: oauth, client_secret: x}").unwrap();
        assert_eq!(lone.validate(), Err(AuthConfigError::SecretWithoutId));
        let mut bad_url = parse("{type: oauth, client_metadata_url: 'http://example.com/client.json'}").unwrap();
        assert_eq!(bad_url.expand(&env), Err(AuthConfigError::MetadataUrl));
    }
}
