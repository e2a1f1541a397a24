//! Reading the runner's protocol lines with a bound on their length: the runner is untrusted, and a line
//! without end must not grow the server's memory without limit.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("a message from the runner is longer than {0} bytes")]
    TooLong(usize),
    #[error("reading from the runner failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads the next `\n`-terminated line (without the `\n`) into `line`. `Ok(false)` at end of stream; a last
/// line without `\n` is returned as a line.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    max_len: usize,
) -> Result<bool, LineError> {
    line.clear();
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(!line.is_empty());
        }
        let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        if line.len() + chunk.len() > max_len {
            return Err(LineError::TooLong(max_len));
        }
        line.extend_from_slice(chunk);
        let consumed = chunk.len() + usize::from(found);
        reader.consume(consumed);
        if found {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_split_and_a_last_unterminated_line_is_kept() {
        let mut reader = tokio::io::BufReader::with_capacity(4, &b"ab\ncdefgh\n\nxy"[..]);
        let mut line = Vec::new();
        let mut lines = Vec::new();
        while read_line(&mut reader, &mut line, 100).await.unwrap() {
            lines.push(String::from_utf8(line.clone()).unwrap());
        }
        assert_eq!(lines, ["ab", "cdefgh", "", "xy"]);
    }

    #[tokio::test]
    async fn an_overlong_line_is_an_error() {
        let mut reader = tokio::io::BufReader::with_capacity(4, &b"0123456789\n"[..]);
        let mut line = Vec::new();
        assert!(matches!(read_line(&mut reader, &mut line, 5).await, Err(LineError::TooLong(5))));
    }
}
