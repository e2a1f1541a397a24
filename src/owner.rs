//! Who a request comes from, for state that outlives one request (tasks; named sessions follow the same
//! rule): a client sees only what it started, and a client that reconnects sees it again.
//!
//! Over HTTP the owner is the SHA-256 of the request's `Authorization` value, so a client keeps its tasks
//! across connections and reconnects (2026-07-28 clients have no MCP session) while a client with another
//! credential never sees them; only the digest is kept, never the credential. Over stdio the one client on
//! the pipe owns everything.

use rmcp::service::{RequestContext, RoleServer};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(String);

impl Owner {
    /// The owner of what `context`'s request starts.
    pub fn of(context: &RequestContext<RoleServer>) -> Owner {
        match context.extensions.get::<http::request::Parts>() {
            Some(parts) => Owner::over_http(parts.headers.get(http::header::AUTHORIZATION).map(|v| v.as_bytes())),
            None => Owner("stdio".to_string()),
        }
    }

    /// The owner as text (never the credential itself).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// An owner by name, for tests.
    #[cfg(test)]
    pub fn named(name: &str) -> Owner {
        Owner(name.to_string())
    }

    /// The owner of an HTTP request with this `Authorization` value (none: every such request is one
    /// client, which only a server without a token on loopback admits).
    fn over_http(authorization: Option<&[u8]>) -> Owner {
        let digest = Sha256::digest(authorization.unwrap_or_default());
        Owner(format!("http:{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_owner_is_its_credential_s_digest_never_the_credential() {
        let alice = Owner::over_http(Some(b"Bearer alice-secret"));
        assert_eq!(alice, Owner::over_http(Some(b"Bearer alice-secret")), "the same client after a reconnect");
        assert_ne!(alice, Owner::over_http(Some(b"Bearer bob-secret")));
        assert_ne!(alice, Owner::over_http(None));
        assert!(!alice.0.contains("alice"), "{alice:?}");
        assert_ne!(Owner::over_http(None), Owner("stdio".into()));
    }
}
