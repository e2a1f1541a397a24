//! `serve.http`: what `ptc-mcp serve --http` enforces.

use serde::Deserialize;

use super::expand;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    pub http: HttpConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Every request must carry `Authorization: Bearer <token>`. `${VAR}` expands.
    pub token: Option<Secret>,
    /// Browser origins admitted besides loopback ones, e.g. `https://app.example`.
    pub allowed_origins: Vec<String>,
    /// Programs running at once across all clients; more wait for a slot.
    pub max_concurrent_runs: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig { token: None, allowed_origins: Vec::new(), max_concurrent_runs: 8 }
    }
}

/// A value never shown in logs or `Debug` output.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// An origin as browsers send it: `scheme://host[:port]`, nothing after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

impl Origin {
    /// Parses `scheme://host[:port]` (http or https; the port defaults to the scheme's). `None` for
    /// anything else, paths and `null` included.
    pub fn parse(text: &str) -> Option<Origin> {
        let (scheme, rest) = text.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        let authority: http::uri::Authority = rest.parse().ok()?;
        if authority.as_str() != rest || rest.contains('@') || authority.host().is_empty() {
            return None;
        }
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        Some(Origin { scheme, host, port: authority.port_u16().unwrap_or(default_port) })
    }
}

impl HttpConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.max_concurrent_runs == 0 {
            return Err("serve.http.max_concurrent_runs: must be at least 1".to_string());
        }
        for (i, origin) in self.allowed_origins.iter().enumerate() {
            if Origin::parse(origin).is_none() {
                return Err(format!(
                    "serve.http.allowed_origins[{i}]: '{origin}' is not an origin; write scheme://host[:port] \
                     with http or https and nothing after, e.g. https://app.example"
                ));
            }
        }
        Ok(())
    }

    /// Expands `${VAR}` in the token and checks what it became (never naming its value).
    pub(super) fn expand_token(&mut self, lookup: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
        let Some(token) = &self.token else { return Ok(()) };
        let token = expand::expand(token.expose(), lookup).map_err(|e| format!("serve.http.token: {e}"))?;
        if token.trim().is_empty() {
            return Err("serve.http.token: is empty (after ${VAR} expansion); set a long random value".to_string());
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("serve.http.token: must be printable ASCII without spaces (after ${VAR} expansion)".to_string());
        }
        self.token = Some(Secret(token));
        Ok(())
    }
}
