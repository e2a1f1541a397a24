//! `serve.http`: what `ptc-mcp serve --http` enforces.

use std::time::Duration;

use serde::Deserialize;

use super::BadSeconds;
use super::expand::{self, ExpandError};

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    pub http: HttpConfig,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Every request must carry `Authorization: Bearer <token>`; `serve --http` refuses to start without one.
    /// `${VAR}` expands; empty after expansion (`${PTC_MCP_TOKEN:-}` with the variable unset) counts as none.
    pub token: Option<Secret>,
    /// Browser origins admitted besides loopback ones, e.g. `https://app.example`.
    pub allowed_origins: Vec<String>,
    /// Programs running at once across all clients; more wait for a slot.
    pub max_concurrent_runs: usize,
    /// Connections open at once; more wait to be accepted until one closes.
    pub max_connections: usize,
    /// How long a client may take to send a request's head (from the connection's start, or from the first
    /// byte of a later request on it).
    pub header_read_timeout_seconds: f64,
    /// How long a connection with no request in flight may stay silent between requests.
    pub keep_alive_timeout_seconds: f64,
    /// MCP sessions (2025-era clients) alive at once; an `initialize` past them is refused.
    pub max_sessions: usize,
    /// A session with no request in flight and no open event stream for this long is ended.
    pub session_idle_timeout_seconds: f64,
    /// After SIGTERM or SIGINT, how long runs in flight may go on (readiness already false, connections still
    /// accepted) before the shutdown stops them; 0: stop them at once.
    pub drain_seconds: f64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            token: None,
            allowed_origins: Vec::new(),
            max_concurrent_runs: 8,
            max_connections: 256,
            header_read_timeout_seconds: 10.0,
            keep_alive_timeout_seconds: 60.0,
            max_sessions: 100,
            session_idle_timeout_seconds: 900.0,
            drain_seconds: 0.0,
        }
    }
}

/// A value never shown in logs or `Debug` output.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

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

/// A `serve.http` value that cannot be used (never showing the token).
#[derive(Debug, thiserror::Error)]
pub enum HttpConfigError {
    #[error("serve.http.{key}: must be at least 1")]
    Zero { key: &'static str },
    #[error(transparent)]
    Seconds(#[from] BadSeconds),
    #[error(
        "serve.http.allowed_origins[{index}]: '{origin}' is not an origin; write scheme://host[:port] with http or \
         https and nothing after, e.g. https://app.example"
    )]
    Origin { index: usize, origin: String },
    #[error("serve.http.drain_seconds: must be 0 (no drain) or a number of seconds up to {max}, got {value}")]
    Drain { value: f64, max: f64 },
    #[error("serve.http.token: {0}")]
    TokenVariable(#[source] ExpandError),
    #[error("serve.http.token: must be printable ASCII without spaces (after ${{VAR}} expansion)")]
    TokenNotPrintable,
}

impl HttpConfig {
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.header_read_timeout_seconds)
    }

    pub fn keep_alive_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.keep_alive_timeout_seconds)
    }

    pub fn session_idle_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.session_idle_timeout_seconds)
    }

    pub fn drain(&self) -> Duration {
        Duration::from_secs_f64(self.drain_seconds)
    }

    pub(super) fn validate(&self) -> Result<(), HttpConfigError> {
        let counts = [
            ("max_concurrent_runs", self.max_concurrent_runs),
            ("max_connections", self.max_connections),
            ("max_sessions", self.max_sessions),
        ];
        for (key, value) in counts {
            if value == 0 {
                return Err(HttpConfigError::Zero { key });
            }
        }
        let durations = [
            ("header_read_timeout_seconds", self.header_read_timeout_seconds),
            ("keep_alive_timeout_seconds", self.keep_alive_timeout_seconds),
            ("session_idle_timeout_seconds", self.session_idle_timeout_seconds),
        ];
        for (key, value) in durations {
            super::check_seconds(&format!("serve.http.{key}"), value)?;
        }
        if !(0.0..=super::MAX_SECONDS).contains(&self.drain_seconds) {
            return Err(HttpConfigError::Drain { value: self.drain_seconds, max: super::MAX_SECONDS });
        }
        for (index, origin) in self.allowed_origins.iter().enumerate() {
            if Origin::parse(origin).is_none() {
                return Err(HttpConfigError::Origin { index, origin: origin.clone() });
            }
        }
        Ok(())
    }

    /// Expands `${VAR}` in the token and checks what it became (never naming its value).
    pub(super) fn expand_token(&mut self, lookup: &dyn Fn(&str) -> Option<String>) -> Result<(), HttpConfigError> {
        let Some(token) = &self.token else { return Ok(()) };
        let token = expand::expand(token.expose(), lookup).map_err(HttpConfigError::TokenVariable)?;
        if token.is_empty() {
            self.token = None;
            return Ok(());
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(HttpConfigError::TokenNotPrintable);
        }
        self.token = Some(Secret(token));
        Ok(())
    }
}
