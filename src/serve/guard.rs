//! What an HTTP request must show before it reaches MCP (or the metrics): a `Host` that is not a foreign
//! DNS name (against DNS rebinding); an `Origin`, if any, that is a loopback origin or one of
//! `serve.http.allowed_origins` (against web pages of other sites); and the bearer token, when one is set.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderMap, StatusCode, Uri, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

use crate::config::{HttpConfig, Origin, Secret};

/// The one path MCP is served at.
pub const MCP_PATH: &str = "/mcp";

/// An HTTP response as rmcp's service gives them.
pub type Reply = http::Response<BoxBody<Bytes, Infallible>>;

pub struct Guard {
    token: Option<Secret>,
    origins: Vec<Origin>,
}

/// Why a request was turned away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NotFound,
    ForeignHost(String),
    ForeignOrigin(String),
    Unauthorized,
}

impl Guard {
    pub fn new(config: &HttpConfig) -> Guard {
        Guard {
            token: config.token.clone(),
            // Validated with the config: every entry parses.
            origins: config.allowed_origins.iter().filter_map(|origin| Origin::parse(origin)).collect(),
        }
    }

    /// Whether a request to `/mcp` or `/metrics` is admitted (the caller routes by path).
    pub fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), Refusal> {
        let host = headers
            .get(header::HOST)
            .and_then(|host| host.to_str().ok())
            .or_else(|| uri.authority().map(|authority| authority.as_str()))
            .unwrap_or_default();
        if !self.host_is_ours(host) {
            return Err(Refusal::ForeignHost(host.to_string()));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let text = String::from_utf8_lossy(origin.as_bytes());
            if !Origin::parse(&text).is_some_and(|origin| is_loopback(&origin.host) || self.origins.contains(&origin)) {
                return Err(Refusal::ForeignOrigin(text.into_owned()));
            }
        }
        match &self.token {
            Some(token) if !bearer_matches(headers, token) => Err(Refusal::Unauthorized),
            _ => Ok(()),
        }
    }

    /// A `Host` is ours when it is an IP address or `localhost` (DNS rebinding needs a name), or the host of
    /// an allowed origin.
    fn host_is_ours(&self, host: &str) -> bool {
        let Ok(authority) = host.parse::<http::uri::Authority>() else { return false };
        let name = authority.host().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        name.parse::<std::net::IpAddr>().is_ok() || is_loopback(&name) || self.origins.iter().any(|o| o.host == name)
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether `Authorization: Bearer <token>` carries the token (compared in constant time).
fn bearer_matches(headers: &HeaderMap, token: &Secret) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else { return false };
    let Some((scheme, given)) = value.trim().split_once(' ') else { return false };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return false;
    }
    let (given, expected) = (given.trim().as_bytes(), token.expose().as_bytes());
    given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
}

impl Refusal {
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::NotFound => StatusCode::NOT_FOUND,
            Refusal::ForeignHost(_) | Refusal::ForeignOrigin(_) => StatusCode::FORBIDDEN,
            Refusal::Unauthorized => StatusCode::UNAUTHORIZED,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::NotFound => format!("not found: ptc-mcp serves MCP at {MCP_PATH}"),
            Refusal::ForeignHost(host) => format!(
                "forbidden: Host '{host}' is not an IP address, localhost or the host of one of \
                 serve.http.allowed_origins (reach the server by address, or list its origin there)"
            ),
            Refusal::ForeignOrigin(origin) => {
                format!("forbidden: Origin '{origin}' is not a loopback origin nor one of serve.http.allowed_origins")
            }
            Refusal::Unauthorized => {
                "unauthorized: send Authorization: Bearer <serve.http.token> with every request".to_string()
            }
        }
    }

    pub fn into_response(self) -> Reply {
        let mut response =
            http::Response::builder().status(self.status()).header(header::CONTENT_TYPE, "text/plain; charset=utf-8");
        if self == Refusal::Unauthorized {
            response = response.header(header::WWW_AUTHENTICATE, "Bearer realm=\"ptc-mcp\"");
        }
        response.body(Full::new(Bytes::from(self.message() + "\n")).boxed()).expect("a valid response")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(token: Option<&str>, origins: &[&str]) -> Guard {
        let text = format!(
            "serve:\n  http:\n    allowed_origins: {}\n{}",
            serde_json::to_string(origins).unwrap(),
            token.map(|t| format!("    token: {t}\n")).unwrap_or_default()
        );
        Guard::new(&crate::config::Config::parse(&text, &|_| None).unwrap().serve.http)
    }

    fn check(guard: &Guard, path: &str, headers: &[(&str, &str)]) -> Result<(), Refusal> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
        }
        guard.check(&path.parse().unwrap(), &map)
    }

    #[test]
    fn hosts_are_admitted_by_address_loopback_name_or_allowed_origin() {
        let g = guard(None, &["https://ptc.example"]);
        for host in ["127.0.0.1:8765", "localhost:8765", "[::1]:8765", "10.1.2.3:80", "LOCALHOST", "ptc.example:8765"] {
            assert_eq!(check(&g, "/mcp", &[("host", host)]), Ok(()), "{host}");
        }
        for host in ["evil.example:8765", "localhost.evil.example", "", "bad host"] {
            assert_eq!(check(&g, "/mcp", &[("host", host)]), Err(Refusal::ForeignHost(host.into())), "{host}");
        }
    }

    #[test]
    fn origins_are_admitted_when_loopback_or_listed_exactly() {
        let g = guard(None, &["https://app.example", "http://tool.example:3000"]);
        let with_origin = |origin: &str| check(&g, "/mcp", &[("host", "127.0.0.1:1"), ("origin", origin)]);
        for ok in [
            "http://localhost:5173",
            "http://127.0.0.1:6274",
            "https://[::1]",
            "https://app.example:443",
            "http://tool.example:3000",
        ] {
            assert_eq!(with_origin(ok), Ok(()), "{ok}");
        }
        for foreign in
            ["https://evil.example", "http://app.example", "http://tool.example", "null", "https://app.example.evil"]
        {
            assert_eq!(with_origin(foreign), Err(Refusal::ForeignOrigin(foreign.into())), "{foreign}");
        }
        assert_eq!(check(&g, "/mcp", &[("host", "127.0.0.1:1")]), Ok(()), "no Origin: not a browser");
    }

    #[test]
    fn the_bearer_token_is_required_exactly_when_set() {
        let g = guard(Some("s3cret-token"), &[]);
        let with_auth = |auth: &str| check(&g, "/mcp", &[("host", "127.0.0.1"), ("authorization", auth)]);
        assert_eq!(with_auth("Bearer s3cret-token"), Ok(()));
        assert_eq!(with_auth("bearer s3cret-token"), Ok(()));
        for wrong in ["Bearer s3cret-tokeN", "Bearer s3cret", "Basic s3cret-token", "s3cret-token", "Bearer "] {
            assert_eq!(with_auth(wrong), Err(Refusal::Unauthorized), "{wrong}");
        }
        assert_eq!(check(&g, "/mcp", &[("host", "127.0.0.1")]), Err(Refusal::Unauthorized));
        assert_eq!(check(&guard(None, &[]), "/mcp", &[("host", "127.0.0.1")]), Ok(()));
        let response = Refusal::Unauthorized.into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer realm=\"ptc-mcp\"");
    }
}
