//! The loopback redirect (RFC 8252 §7.3): a listener on `127.0.0.1` that waits for the browser to come
//! back to `/callback` with the authorization code. A callback whose `state` is not the one this login sent
//! is refused and the wait goes on (a forged redirect cannot end or hijack the login); an `error` from the
//! authorization server ends it.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest request head the listener reads.
const MAX_REQUEST: usize = 16 * 1024;
/// How long one connection may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the browser brought back.
#[derive(Debug, PartialEq, Eq)]
pub struct Callback {
    pub code: String,
    pub state: String,
    /// RFC 9207's `iss`, when the authorization server sends it.
    pub issuer: Option<String>,
}

/// Why no usable callback arrived.
#[derive(Debug, thiserror::Error)]
pub enum CallbackError {
    #[error("cannot listen on 127.0.0.1:{port} for the login's redirect: {source}")]
    Listen {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("the authorization server refused: {error}{}", .description.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Denied { error: String, description: Option<String> },
    #[error("no redirect came back within {0}s; run the login again")]
    TimedOut(u64),
}

/// A listener for one login's redirect.
pub struct Listener {
    listener: TcpListener,
}

impl Listener {
    /// Listens on `127.0.0.1:port` (0: a free port).
    pub async fn bind(port: u16) -> Result<Listener, CallbackError> {
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .await
            .map_err(|source| CallbackError::Listen { port, source })?;
        Ok(Listener { listener })
    }

    /// `http://127.0.0.1:PORT/callback`.
    pub fn redirect_uri(&self) -> String {
        let port = self.listener.local_addr().map(|a| a.port()).unwrap_or_default();
        format!("http://127.0.0.1:{port}/callback")
    }

    /// Waits at most `limit` for a redirect with `state`, answering each request the browser makes.
    pub async fn wait(&self, state: &str, limit: Duration) -> Result<Callback, CallbackError> {
        let waiting = async {
            loop {
                let Ok((stream, _)) = self.listener.accept().await else { continue };
                match tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, state)).await {
                    Ok(Some(outcome)) => return outcome,
                    Ok(None) | Err(_) => continue,
                }
            }
        };
        tokio::time::timeout(limit, waiting).await.map_err(|_| CallbackError::TimedOut(limit.as_secs()))?
    }
}

/// Reads one request and answers it; `Some` when it ends the wait.
async fn answer(mut stream: TcpStream, state: &str) -> Option<Result<Callback, CallbackError>> {
    let target = read_target(&mut stream).await?;
    let (status, page, outcome) = match judge(&target, state) {
        Verdict::Done(callback) => {
            ("200 OK", "Logged in. You can close this tab and return to ptc-mcp.", Some(Ok(callback)))
        }
        Verdict::Denied(denied) => {
            ("400 Bad Request", "The login was refused; see ptc-mcp's output.", Some(Err(denied)))
        }
        Verdict::WrongState => {
            tracing::warn!("refused a login redirect whose state is not this login's");
            ("400 Bad Request", "This redirect does not belong to the login in progress.", None)
        }
        Verdict::NotCallback => ("404 Not Found", "Not found.", None),
    };
    let body = format!("<!doctype html><title>ptc-mcp</title><p>{page}</p>\n");
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\ncache-control: no-store\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
    outcome
}

/// The request target of a `GET`, read within [`MAX_REQUEST`] bytes.
async fn read_target(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buffer).await.ok()?;
        if n == 0 || head.len() + n > MAX_REQUEST {
            return None;
        }
        head.extend_from_slice(&buffer[..n]);
    }
    let line = String::from_utf8_lossy(&head[..head.iter().position(|&b| b == b'\r')?]).into_owned();
    let mut parts = line.split(' ');
    (parts.next() == Some("GET")).then(|| parts.next().map(str::to_string)).flatten()
}

enum Verdict {
    Done(Callback),
    Denied(CallbackError),
    WrongState,
    NotCallback,
}

fn judge(target: &str, state: &str) -> Verdict {
    let Ok(url) = reqwest::Url::parse(&format!("http://127.0.0.1{target}")) else { return Verdict::NotCallback };
    if url.path() != "/callback" {
        return Verdict::NotCallback;
    }
    let param = |name: &str| url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
    // Compared in constant time: the state is what makes a redirect this login's.
    if !param("state").is_some_and(|got| constant_time_eq(got.as_bytes(), state.as_bytes())) {
        return Verdict::WrongState;
    }
    if let Some(error) = param("error") {
        return Verdict::Denied(CallbackError::Denied { error, description: param("error_description") });
    }
    match param("code") {
        Some(code) if !code.is_empty() => {
            Verdict::Done(Callback { code, state: state.to_string(), issuer: param("iss") })
        }
        _ => Verdict::Denied(CallbackError::Denied { error: "the redirect carries no code".into(), description: None }),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_callback_with_this_logins_state_ends_the_wait() {
        let done = judge("/callback?code=c1&state=s1&iss=https%3A%2F%2Fas.example", "s1");
        let Verdict::Done(callback) = done else { panic!("not done") };
        assert_eq!(
            callback,
            Callback { code: "c1".into(), state: "s1".into(), issuer: Some("https://as.example".into()) }
        );
        assert!(matches!(judge("/callback?code=c1&state=forged", "s1"), Verdict::WrongState));
        assert!(matches!(judge("/callback?code=c1", "s1"), Verdict::WrongState));
        assert!(matches!(judge("/favicon.ico", "s1"), Verdict::NotCallback));
        let Verdict::Denied(denied) = judge("/callback?error=access_denied&error_description=no&state=s1", "s1") else {
            panic!("not denied")
        };
        assert_eq!(denied.to_string(), "the authorization server refused: access_denied (no)");
    }

    #[tokio::test]
    async fn the_listener_answers_a_forged_redirect_and_keeps_waiting_for_the_real_one() {
        let listener = Listener::bind(0).await.unwrap();
        let uri = listener.redirect_uri();
        let port: u16 = uri.trim_start_matches("http://127.0.0.1:").trim_end_matches("/callback").parse().unwrap();
        let get = |target: &'static str| async move {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            stream.write_all(format!("GET {target} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes()).await.unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.unwrap();
            answer
        };
        let browser = async {
            let forged = get("/callback?code=evil&state=forged").await;
            let real = get("/callback?code=good&state=s1").await;
            (forged, real)
        };
        let (callback, (forged, real)) = tokio::join!(listener.wait("s1", Duration::from_secs(20)), browser);
        assert!(forged.starts_with("HTTP/1.1 400"), "{forged}");
        assert!(real.starts_with("HTTP/1.1 200"), "{real}");
        assert_eq!(callback.unwrap().code, "good");
    }
}
