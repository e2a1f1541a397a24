//! What load balancers and orchestrators ask `serve --http`: `/healthz` (the process serves: 200),
//! `/readyz` (it should be given new work: 200, else 503 with a reason in a few words) and `/metrics`
//! (Prometheus text; behind the same checks as `/mcp`, the token included). The two probes need no token and
//! no `Origin`, take GET or HEAD only, and say nothing about the server beyond ready or not (no names, no
//! versions, no sandbox details: those are in its log).
//!
//! Ready means: not stopping, and the sandbox's check found it usable (the pool can start runners).
//! Downstream servers do not count: every replica shares them, so one that is down would take every replica
//! out at once, while programs that do not need it keep working (and those that do are told why it is
//! missing).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Method, StatusCode, header};
use http_body_util::{BodyExt, Full};

use super::guard::Reply;
use crate::engine::Engine;
use crate::metrics::exposition::CONTENT_TYPE as METRICS_CONTENT_TYPE;

pub const HEALTH_PATH: &str = "/healthz";
pub const READY_PATH: &str = "/readyz";
pub const METRICS_PATH: &str = "/metrics";

/// Whether this server should be given new work.
pub struct Readiness {
    engine: Arc<Engine>,
    stopping: AtomicBool,
}

/// Why it should not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    #[error("stopping")]
    Stopping,
    #[error("the sandbox check is under way")]
    SandboxChecking,
    #[error("the sandbox cannot run programs")]
    SandboxUnusable,
}

impl Readiness {
    pub fn new(engine: Arc<Engine>) -> Readiness {
        Readiness { engine, stopping: AtomicBool::new(false) }
    }

    /// From now on the server is not ready: it is stopping.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Never waits: a sandbox check under way (or due again) answers "not yet".
    pub fn check(&self) -> Result<(), NotReady> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(NotReady::Stopping);
        }
        match self.engine.sandbox_usable_now() {
            Some(true) => Ok(()),
            Some(false) => Err(NotReady::SandboxUnusable),
            None => Err(NotReady::SandboxChecking),
        }
    }
}

/// The answer to `/healthz` (`Ok`) or `/readyz`: 200 `ok`, or 503 `not ready: <reason>`.
pub fn probe(method: &Method, state: Result<(), NotReady>) -> Reply {
    let (status, text) = match state {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    };
    read_only(method, status, "text/plain; charset=utf-8", text)
}

/// The answer to an admitted `/metrics` request with `text`.
pub fn metrics(method: &Method, text: String) -> Reply {
    read_only(method, StatusCode::OK, METRICS_CONTENT_TYPE, text)
}

/// `text` for GET, its head alone for HEAD, 405 for any other method.
fn read_only(method: &Method, status: StatusCode, content_type: &str, text: String) -> Reply {
    let response = http::Response::builder().header(header::CACHE_CONTROL, "no-store");
    let (response, body) = match *method {
        Method::GET => (response.status(status).header(header::CONTENT_TYPE, content_type), text),
        Method::HEAD => (response.status(status).header(header::CONTENT_TYPE, content_type), String::new()),
        _ => (
            response
                .status(StatusCode::METHOD_NOT_ALLOWED)
                .header(header::ALLOW, "GET, HEAD")
                .header(header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            "method not allowed: use GET or HEAD\n".to_string(),
        ),
    };
    response.body(Full::new(Bytes::from(body)).boxed()).expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(reply: Reply) -> String {
        String::from_utf8(reply.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn probes_answer_get_and_head_with_a_reason_and_refuse_other_methods() {
        let ok = probe(&Method::GET, Ok(()));
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(body(ok).await, "ok\n");
        let stopping = probe(&Method::GET, Err(NotReady::Stopping));
        assert_eq!(stopping.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body(stopping).await, "not ready: stopping\n");
        let head = probe(&Method::HEAD, Err(NotReady::SandboxChecking));
        assert_eq!(head.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body(head).await, "");
        let post = probe(&Method::POST, Ok(()));
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(post.headers()[header::ALLOW], "GET, HEAD");
        let scrape = metrics(&Method::GET, "x 1\n".into());
        assert_eq!(scrape.headers()[header::CONTENT_TYPE], "text/plain; version=0.0.4; charset=utf-8");
        assert_eq!(body(scrape).await, "x 1\n");
    }
}
