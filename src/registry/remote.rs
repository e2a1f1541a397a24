//! What the two HTTP transports share: one HTTP client (rustls with the `ring` provider), the configured
//! headers as sensitive header values, and short descriptions of request failures that never carry a
//! header value or a URL's path and query (either may hold a secret).

use std::sync::OnceLock;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::liveness::Loss;
use crate::config::ServerConfig;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
const MAX_REDIRECTS: usize = 10;

/// Why the HTTP client could not be set up.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot set up the HTTP client: {0}")]
pub struct ClientSetupError(String);

/// The shared HTTP client. `Err` if TLS could not be set up.
pub fn client() -> Result<reqwest::Client, ClientSetupError> {
    static CLIENT: OnceLock<Result<reqwest::Client, ClientSetupError>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // reqwest is built without a default crypto provider; `ring` builds much faster than aws-lc. An
            // error only means a provider is already installed, which is just as good.
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .tcp_keepalive(TCP_KEEPALIVE)
                // As rmcp's own client: reusing idle connections can stall ~40 ms on delayed ACKs.
                .pool_max_idle_per_host(0)
                .redirect(same_origin_redirects())
                .build()
                .map_err(|e| ClientSetupError(innermost(&e)))
        })
        .clone()
}

/// Follows only same-origin 307/308 redirects (they keep the method and body); anything else comes back
/// to the caller as the redirect response, so headers are never replayed to another host.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt.previous().first().is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

/// The configured headers, marked sensitive so that no `Debug` output shows their values.
pub fn headers(config: &ServerConfig) -> Result<HeaderMap, Loss> {
    let mut map = HeaderMap::new();
    for (name, value) in &config.headers {
        // Both were validated with the config; a failure here names the header, never the value.
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| Loss::connection(format!("header name '{name}' is not a valid HTTP header name")))?;
        let mut value = HeaderValue::from_str(&value.as_text())
            .map_err(|_| Loss::connection(format!("the value of header '{name}' is not a valid HTTP header value")))?;
        value.set_sensitive(true);
        map.insert(header, value);
    }
    Ok(map)
}

/// `scheme://host:port` of a URL: enough to say where, without a path or query that may hold a secret.
pub fn origin(url: &reqwest::Url) -> String {
    url.origin().ascii_serialization()
}

/// A short description of a failed request: what failed and the root cause, never the URL's path or query.
pub fn describe(error: &reqwest::Error) -> String {
    let root = innermost(error);
    let at = error.url().map(|url| format!(" to {}", origin(url))).unwrap_or_default();
    if error.is_connect() {
        format!("cannot connect{at}: {root}")
    } else if error.is_timeout() {
        format!("the request{at} timed out")
    } else if error.is_body() || error.is_decode() {
        format!("the response{at} broke off: {root}")
    } else {
        format!("the request{at} failed: {root}")
    }
}

/// The innermost cause's message (e.g. "Connection refused (os error 111)"), without reqwest's URL.
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    while let Some(source) = current.source() {
        current = source;
    }
    match current.downcast_ref::<reqwest::Error>() {
        Some(reqwest_error) => reqwest_error.to_string().split(" for url (").next().unwrap_or_default().to_string(),
        None => current.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::{Scalar, TransportKind};

    fn server_with_header(name: &str, value: &str) -> ServerConfig {
        ServerConfig {
            name: "x".into(),
            transport: TransportKind::Http,
            command: None,
            args: vec![],
            env: BTreeMap::new(),
            url: Some("http://127.0.0.1:1/mcp".into()),
            headers: BTreeMap::from([(name.to_string(), Scalar::Text(value.to_string()))]),
            auth: None,
            connect_timeout_seconds: 60.0,
        }
    }

    #[test]
    fn header_values_are_sensitive_and_absent_from_debug_output() {
        let map = headers(&server_with_header("Authorization", "Bearer s3cret")).unwrap();
        assert!(map["authorization"].is_sensitive());
        assert!(!format!("{map:?}").contains("s3cret"));
    }

    #[test]
    fn a_bad_header_value_is_named_without_its_value() {
        let loss = headers(&server_with_header("X-Key", "line\nbreak-s3cret")).unwrap_err();
        assert_eq!(loss.reason, "the value of header 'X-Key' is not a valid HTTP header value");
    }

    #[tokio::test]
    async fn a_refused_connection_is_described_by_origin_and_cause() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let error =
            client().unwrap().get(format!("http://127.0.0.1:{port}/secret/path?token=t")).send().await.unwrap_err();
        let text = describe(&error);
        assert!(text.starts_with(&format!("cannot connect to http://127.0.0.1:{port}: ")), "{text}");
        assert!(!text.contains("secret") && !text.contains("token"), "{text}");
    }
}
