//! Reading `\n`-terminated lines from a peer that is not trusted to keep them short: the runner channel and
//! downstream stdio servers.
//!
//! [`LineReader::next_line`] is cancellation-safe, so it can sit in a `select!` beside other branches: all
//! its state lives in the reader, and a read that is dropped half-way resumes where it stopped (a partial line
//! is never lost or read twice). A line longer than the limit is not kept: its bytes are counted and scanned
//! for its top-level JSON `"id"` (so that whoever waits for that message can be told at once), then dropped.

#[cfg(test)]
mod properties;
mod top_level_id;

use tokio::io::{AsyncRead, AsyncReadExt};

use top_level_id::IdScanner;
pub use top_level_id::top_level_id;

/// Bytes asked for per read when no line is in progress.
const READ_CHUNK: usize = 64 * 1024;
/// A buffer that grew past this for one long line is shrunk back once that line is consumed, so a
/// connection does not keep the capacity of its largest message for good.
const KEEP_CAPACITY: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
#[error("reading failed: {0}")]
pub struct ReadError(#[from] pub std::io::Error);

/// What [`LineReader::next_line`] found.
#[derive(Debug, PartialEq)]
pub enum Line<'a> {
    /// A whole line, without its `\n` (a last line without one, at the end of the stream, counts).
    Complete(&'a [u8]),
    /// A line longer than the limit, dropped: its length (without the `\n`) and its top-level JSON `"id"`,
    /// if it was a JSON object that had one.
    TooLong { len: usize, id: Option<serde_json::Value> },
    /// The stream ended.
    End,
}

/// Splits what a reader delivers into lines of at most `max_len` bytes.
pub struct LineReader<R> {
    reader: R,
    buf: Vec<u8>,
    /// The bytes before this index are the line handed out last; they are dropped on the next call.
    consumed: usize,
    /// How much of `buf[consumed..]` has been searched for a newline already.
    scanned: usize,
    max_len: usize,
    /// Set while the rest of an overlong line is being skipped.
    skipping: Option<Skipping>,
    ended: bool,
}

struct Skipping {
    len: usize,
    id: IdScanner,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub fn new(reader: R, max_len: usize) -> Self {
        LineReader { reader, buf: Vec::new(), consumed: 0, scanned: 0, max_len, skipping: None, ended: false }
    }

    /// Changes the longest line accepted from now on.
    pub fn set_max_len(&mut self, max_len: usize) {
        self.max_len = max_len;
    }

    /// The next line. Cancellation-safe.
    pub async fn next_line(&mut self) -> Result<Line<'_>, ReadError> {
        self.drop_consumed();
        loop {
            if let Some(line) = self.take_buffered() {
                return Ok(match line {
                    Taken::Complete(end) => Line::Complete(&self.buf[..end]),
                    Taken::TooLong(skipped) => Line::TooLong { len: skipped.len, id: skipped.id.finish() },
                });
            }
            if self.ended {
                return Ok(self.end_of_stream());
            }
            let want = if self.buf.len() > READ_CHUNK { self.buf.len().min(self.max_len) } else { READ_CHUNK };
            self.buf.reserve(want);
            // `read_buf` is cancellation-safe: either the bytes are appended to `buf`, or nothing was read.
            if self.reader.read_buf(&mut self.buf).await? == 0 {
                self.ended = true;
            }
        }
    }

    /// Lets go of the line handed out last now rather than at the next read (a long line's buffer would
    /// otherwise be held while the caller works on what it parsed from it).
    pub fn release(&mut self) {
        self.drop_consumed();
    }

    /// Takes the line handed out last (without its `\n`) for a caller that keeps it. A long line is moved
    /// out, not copied: what follows it in the buffer (at most one read) is copied into a new buffer instead.
    pub fn take_line(&mut self) -> Vec<u8> {
        // A line ends at a newline, except the last one of the stream, which never ends with one.
        let end = self.consumed - usize::from(self.buf[..self.consumed].ends_with(b"\n"));
        let following = &self.buf[self.consumed..];
        if end <= following.len() {
            let line = self.buf[..end].to_vec();
            self.drop_consumed();
            return line;
        }
        let following = following.to_vec();
        self.consumed = 0;
        let mut line = std::mem::replace(&mut self.buf, following);
        line.truncate(end);
        line
    }

    /// Drops the line handed out last, and the capacity a long line left behind.
    fn drop_consumed(&mut self) {
        if self.consumed == 0 {
            return;
        }
        self.buf.drain(..self.consumed);
        self.consumed = 0;
        if self.buf.capacity() > KEEP_CAPACITY && self.buf.len() < KEEP_CAPACITY / 2 {
            self.buf.shrink_to(READ_CHUNK.max(self.buf.len()));
        }
    }

    /// A line from what is buffered, if a whole one is there; otherwise starts or continues skipping an
    /// overlong one.
    fn take_buffered(&mut self) -> Option<Taken> {
        let newline = memchr::memchr(b'\n', &self.buf[self.scanned..]).map(|i| self.scanned + i);
        if let Some(skipping) = &mut self.skipping {
            let end = newline.unwrap_or(self.buf.len());
            skipping.len += end;
            skipping.id.feed(&self.buf[..end]);
            let Some(newline) = newline else {
                self.buf.clear();
                self.buf.shrink_to(READ_CHUNK);
                self.scanned = 0;
                return None;
            };
            self.consumed = newline + 1;
            self.scanned = 0;
            return self.skipping.take().map(Taken::TooLong);
        }
        match newline {
            Some(end) if end <= self.max_len => {
                self.consumed = end + 1;
                self.scanned = 0;
                Some(Taken::Complete(end))
            }
            Some(_) => {
                // Complete but too long: skip it like one still arriving.
                self.skipping = Some(Skipping { len: 0, id: IdScanner::default() });
                self.take_buffered()
            }
            None if self.buf.len() > self.max_len => {
                self.skipping = Some(Skipping { len: 0, id: IdScanner::default() });
                self.take_buffered()
            }
            None => {
                self.scanned = self.buf.len();
                None
            }
        }
    }

    fn end_of_stream(&mut self) -> Line<'_> {
        if let Some(skipped) = self.skipping.take() {
            return Line::TooLong { len: skipped.len, id: skipped.id.finish() };
        }
        if self.buf.is_empty() {
            return Line::End;
        }
        self.consumed = self.buf.len();
        self.scanned = 0;
        Line::Complete(&self.buf)
    }
}

enum Taken {
    /// A line ends at this index of `buf`.
    Complete(usize),
    TooLong(Skipping),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn lines(input: &[u8], max_len: usize) -> Vec<String> {
        let mut reader = LineReader::new(input, max_len);
        let mut out = Vec::new();
        loop {
            match reader.next_line().await.unwrap() {
                Line::Complete(line) => out.push(String::from_utf8(line.to_vec()).unwrap()),
                Line::TooLong { len, id } => out.push(format!("<{len} bytes, id {id:?}>")),
                Line::End => return out,
            }
        }
    }

    #[tokio::test]
    async fn lines_are_split_and_a_last_unterminated_line_is_kept() {
        assert_eq!(lines(b"ab\ncdefgh\n\nxy", 100).await, ["ab", "cdefgh", "", "xy"]);
        assert!(lines(b"", 100).await.is_empty());
    }

    #[tokio::test]
    async fn an_overlong_line_is_reported_with_its_length_and_id_and_the_next_line_still_arrives() {
        let long = format!("{{\"result\":\"{}\",\"id\":7}}", "x".repeat(300));
        let input = format!("short\n{long}\n{{\"id\":8}}\n");
        let got = lines(input.as_bytes(), 50).await;
        assert_eq!(
            got,
            ["short".to_string(), format!("<{} bytes, id Some(Number(7))>", long.len()), "{\"id\":8}".into()]
        );
    }

    #[tokio::test]
    async fn an_overlong_last_line_without_a_newline_is_reported_too() {
        let got = lines(&[b'a'; 200], 50).await;
        assert_eq!(got, ["<200 bytes, id None>"]);
    }

    /// A reader that delivers one byte per read and is interrupted (its future dropped) between reads.
    #[tokio::test]
    async fn a_read_dropped_half_way_through_a_line_loses_nothing() {
        let (mut tx, rx) = tokio::io::duplex(8);
        let mut reader = LineReader::new(rx, 1000);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for chunk in [&b"{\"a\":"[..], b"1}\n{\"b\"", b":2}\n"] {
                tx.write_all(chunk).await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        });
        let mut got = Vec::new();
        while got.len() < 2 {
            // Each attempt gives up after 1 ms, like a select! whose other branch won.
            if let Ok(line) = tokio::time::timeout(std::time::Duration::from_millis(1), reader.next_line()).await {
                match line.unwrap() {
                    Line::Complete(line) => got.push(serde_json::from_slice::<serde_json::Value>(line).unwrap()),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        writer.await.unwrap();
        assert_eq!(got, [json!({"a": 1}), json!({"b": 2})]);
    }

    #[tokio::test]
    async fn the_buffer_of_a_long_line_is_given_back_once_it_is_consumed() {
        let mut input = vec![b'x'; 8 << 20];
        input.extend_from_slice(b"\nshort\n");
        let mut reader = LineReader::new(&input[..], 16 << 20);
        assert!(matches!(reader.next_line().await.unwrap(), Line::Complete(line) if line.len() == 8 << 20));
        reader.release();
        assert!(reader.buf.capacity() <= KEEP_CAPACITY, "released at once: {}", reader.buf.capacity());
        assert_eq!(reader.next_line().await.unwrap(), Line::Complete(b"short"));
    }

    #[tokio::test]
    async fn a_taken_line_is_moved_out_when_long_and_what_follows_it_is_still_read() {
        let mut input = vec![b'x'; 1 << 20];
        input.extend_from_slice(b"\nab\r\n\ncd");
        let mut reader = LineReader::new(&input[..], 2 << 20);
        assert!(matches!(reader.next_line().await.unwrap(), Line::Complete(line) if line.len() == 1 << 20));
        let buffer = reader.buf.as_ptr();
        let long = reader.take_line();
        assert_eq!((long.len(), long.as_ptr()), (1 << 20, buffer), "the long line keeps its buffer");
        let mut taken = Vec::new();
        while reader.next_line().await.unwrap() != Line::End {
            taken.push(reader.take_line());
        }
        assert_eq!(taken, [&b"ab\r"[..], b"", b"cd"]);
    }
}
