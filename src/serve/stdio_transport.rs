//! The MCP transport on our own stdin/stdout: one JSON-RPC message per line. rmcp's stdio transport drops a
//! line that is not JSON (a lone surrogate escape in a string is enough) and answers well-formed JSON it
//! cannot decode with an error that has no `id`, so the client waits for its request forever; here such a
//! request is answered with a JSON-RPC error for its own `id` (see [`super::undecodable`]).

use std::io;
use std::sync::Arc;

use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::undecodable::{Undecodable, decode};
use crate::lines::{Line, LineReader};

/// The longest line read (as rmcp's stdio transport had it); a longer one is answered as too long.
const MAX_LINE: usize = 16 * 1024 * 1024;
/// RFC 8259 allows a parser to skip a leading UTF-8 byte order mark.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

pub struct StdioTransport<R, W> {
    reader: LineReader<R>,
    /// Shared with the futures `send` returns (they must be `'static`); `None` once closed.
    writer: Arc<Mutex<Option<W>>>,
    /// Cancelled when stdin ends: the server stops then, without waiting for rmcp to give up on the
    /// requests still in hand.
    ended: CancellationToken,
}

impl<R: AsyncRead + Unpin, W> StdioTransport<R, W> {
    pub fn new(reader: R, writer: W) -> Self {
        StdioTransport {
            reader: LineReader::new(reader, MAX_LINE),
            writer: Arc::new(Mutex::new(Some(writer))),
            ended: CancellationToken::new(),
        }
    }

    /// Cancelled once stdin has ended (or failed).
    pub fn input_ended(&self) -> CancellationToken {
        self.ended.clone()
    }
}

impl<R, W> Transport<RoleServer> for StdioTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = Arc::clone(&self.writer);
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            let mut writer = writer.lock().await;
            let writer =
                writer.as_mut().ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "stdout is closed"))?;
            writer.write_all(&line).await?;
            writer.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let undecodable = match self.reader.next_line().await {
                Ok(Line::End) => {
                    self.ended.cancel();
                    return None;
                }
                Err(e) => {
                    tracing::error!("stdin: {e}");
                    self.ended.cancel();
                    return None;
                }
                Ok(Line::TooLong { len, id }) => Undecodable::too_long(len, MAX_LINE, id),
                Ok(Line::Complete(line)) => {
                    let line = line.strip_prefix(UTF8_BOM).unwrap_or(line);
                    if line.trim_ascii().is_empty() {
                        continue;
                    }
                    match decode(line) {
                        Ok(message) => return Some(message),
                        Err(undecodable) if undecodable.is_notification() => continue,
                        Err(undecodable) => undecodable,
                    }
                }
            };
            // Written whole on its own task: this future may be dropped at its next await.
            tokio::spawn(self.send(undecodable.answer()));
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.writer.lock().await.take();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, BufReader};

    use super::*;

    #[tokio::test]
    async fn a_request_that_does_not_decode_is_answered_and_the_next_one_still_read() {
        let input = concat!(
            "\u{feff}\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","arguments":{"code":"\ud800"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":5}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
            "\n",
        );
        let (output, mut answers) = tokio::io::duplex(4096);
        let mut transport = StdioTransport::new(input.as_bytes(), output);
        let message = transport.receive().await.expect("the ping");
        assert_eq!(serde_json::to_value(&message).unwrap()["id"], 3);
        assert!(transport.receive().await.is_none(), "the input ended");
        drop(transport);
        let mut lines = BufReader::new(&mut answers).lines();
        let answer: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (json!(2), json!(-32700)));
        assert!(lines.next_line().await.unwrap().is_none(), "the notification is not answered");
    }
}
