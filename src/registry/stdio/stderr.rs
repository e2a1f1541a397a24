//! A downstream's stderr, drained for as long as it is open, whatever bytes it holds: a server whose stderr
//! is not read blocks once the pipe is full (many log a line per request), so nothing it writes may end the
//! drain. Each line is logged at debug level, cut to [`MAX_LINE_BYTES`]; its last non-blank line is kept to
//! explain why it stopped.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt};

/// The longest part of a line that is kept (and logged); the rest is counted and dropped.
const MAX_LINE_BYTES: usize = 4096;
/// The longest last line kept to explain why a server stopped, in characters.
const LAST_LINE_CHARS: usize = 300;
const READ_CHUNK: usize = 8192;

/// The last non-blank line a downstream wrote to its stderr; shared with the task that drains it.
#[derive(Clone, Default)]
pub struct LastLine(Arc<Mutex<Option<String>>>);

impl LastLine {
    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, line: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(line);
    }
}

/// Reads `stderr` to its end (or a read error), logging each line for `server` and keeping the last
/// non-blank one in `last`. Memory stays bounded whatever the lines' length.
pub async fn drain(server: String, mut stderr: impl AsyncRead + Unpin, last: LastLine) {
    let mut chunk = vec![0; READ_CHUNK];
    let mut line = Line::default();
    loop {
        let read = match stderr.read(&mut chunk).await {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) => {
                tracing::debug!(server, "reading stderr failed: {error}");
                break;
            }
        };
        for piece in chunk[..read].split_inclusive(|&byte| byte == b'\n') {
            match piece.strip_suffix(b"\n") {
                Some(end) => {
                    line.push(end);
                    line.finish(&server, &last);
                }
                None => line.push(piece),
            }
        }
    }
    line.finish(&server, &last);
}

/// The line being read: its first [`MAX_LINE_BYTES`] and how many bytes more it had.
#[derive(Default)]
struct Line {
    kept: Vec<u8>,
    dropped: usize,
}

impl Line {
    fn push(&mut self, bytes: &[u8]) {
        let room = MAX_LINE_BYTES - self.kept.len();
        let (kept, dropped) = bytes.split_at(bytes.len().min(room));
        self.kept.extend_from_slice(kept);
        self.dropped += dropped.len();
    }

    /// Logs the line and keeps it as the last one if it is not blank; starts the next one.
    fn finish(&mut self, server: &str, last: &LastLine) {
        let text = String::from_utf8_lossy(&self.kept);
        let text = text.trim();
        if self.dropped > 0 {
            tracing::debug!(server, "stderr: {text} … ({} more bytes)", self.dropped);
        } else if !text.is_empty() {
            tracing::debug!(server, "stderr: {text}");
        }
        if !text.is_empty() {
            last.set(text.chars().take(LAST_LINE_CHARS).collect());
        }
        self.kept.clear();
        self.dropped = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn last_line_of(stderr: &[u8]) -> Option<String> {
        let last = LastLine::default();
        drain("t".into(), stderr, last.clone()).await;
        last.get()
    }

    #[tokio::test]
    async fn bytes_that_are_not_utf_8_neither_end_the_drain_nor_the_line() {
        let stderr = b"first\n\xff\xfe broken \xc3\n\nlast \xe2\x9c\x93 line\r\n  \n";
        assert_eq!(last_line_of(stderr).await.as_deref(), Some("last \u{2713} line"));
        assert_eq!(last_line_of(b"only \xff").await.as_deref(), Some("only \u{fffd}"));
    }

    #[tokio::test]
    async fn lines_of_any_length_are_cut_and_the_last_one_is_kept_short() {
        let mut stderr = vec![b'x'; 10 << 20];
        stderr.extend_from_slice(b"\n");
        stderr.extend(std::iter::repeat_n(b'y', 1000));
        let last = last_line_of(&stderr).await.unwrap();
        assert_eq!(last, "y".repeat(LAST_LINE_CHARS));
    }

    #[test]
    fn a_long_line_keeps_its_start_and_counts_the_rest() {
        let mut line = Line::default();
        line.push(&[b'a'; MAX_LINE_BYTES - 1]);
        line.push(b"bcd");
        assert_eq!(line.kept.len(), MAX_LINE_BYTES);
        assert_eq!((line.kept.last(), line.dropped), (Some(&b'b'), 2));
        line.finish("t", &LastLine::default());
        assert_eq!((line.kept.len(), line.dropped), (0, 0));
    }
}
