//! A small `text/event-stream` parser (the WHATWG rules the legacy transport needs): lines ending in
//! LF, CRLF or CR, `event`/`data`/`id` fields, comments, multi-line data, a leading BOM, and a bound on the
//! size of one event. Linear in what arrives: each byte is scanned for a line end once, and the lines taken
//! from a chunk are dropped from the buffer together, not one by one.

use bytes::Bytes;
use futures::{Stream, StreamExt};

/// One dispatched event. `event` is `message` when the stream gave no type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub event: String,
    pub data: String,
}

/// Why no event could be read.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum FrameError<E> {
    #[error("an event exceeded {0} bytes")]
    TooLarge(usize),
    /// The stream failed.
    #[error("{0}")]
    Stream(E),
}

/// Events parsed from a byte stream.
pub struct Frames<S> {
    bytes: S,
    buffer: Vec<u8>,
    /// The lines before this index of `buffer` are taken; they are dropped before more bytes are added.
    start: usize,
    limit: usize,
    event: String,
    data: String,
    /// How much of `buffer` after `start` is known to hold no line terminator (so long lines are scanned
    /// once).
    scanned: usize,
    started: bool,
    ended: bool,
}

impl<S, E> Frames<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    /// `limit` bounds one event (its unfinished line plus its data so far), in bytes.
    pub fn new(bytes: S, limit: usize) -> Frames<S> {
        Frames {
            bytes,
            buffer: Vec::new(),
            start: 0,
            limit,
            event: String::new(),
            data: String::new(),
            scanned: 0,
            started: false,
            ended: false,
        }
    }

    /// The next event; `None` when the stream ended; `Err` when it failed or an event was too large.
    pub async fn next(&mut self) -> Option<Result<Event, FrameError<E>>> {
        loop {
            while let Some(line) = self.take_line() {
                if let Some(event) = self.feed(&line) {
                    return Some(Ok(event));
                }
            }
            if self.buffer.len() - self.start + self.data.len() > self.limit {
                return Some(Err(FrameError::TooLarge(self.limit)));
            }
            if self.ended {
                // An unterminated last event is discarded, as the standard says.
                return None;
            }
            self.buffer.drain(..self.start);
            self.start = 0;
            match self.bytes.next().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(&chunk),
                Some(Err(error)) => return Some(Err(FrameError::Stream(error))),
                None => self.ended = true,
            }
        }
    }

    /// Takes the first complete line after `start` (without its terminator).
    fn take_line(&mut self) -> Option<String> {
        if !self.started {
            if self.buffer.len() < 3 && !self.ended && b"\xEF\xBB\xBF".starts_with(&self.buffer) {
                return None;
            }
            if self.buffer.starts_with(b"\xEF\xBB\xBF") {
                self.start = 3;
            }
            self.started = true;
        }
        let from = self.start + self.scanned;
        let Some(offset) = memchr::memchr2(b'\n', b'\r', &self.buffer[from..]) else {
            self.scanned = self.buffer.len() - self.start;
            return None;
        };
        let end = from + offset;
        let terminator = match (self.buffer[end], self.buffer.get(end + 1)) {
            (b'\r', Some(b'\n')) => 2,
            // A CR at the end of what has arrived may be the first half of a CRLF.
            (b'\r', None) if !self.ended => {
                self.scanned = end - self.start;
                return None;
            }
            _ => 1,
        };
        let line = String::from_utf8_lossy(&self.buffer[self.start..end]).into_owned();
        self.start = end + terminator;
        self.scanned = 0;
        Some(line)
    }

    /// Processes one line; returns the event a blank line dispatches.
    fn feed(&mut self, line: &str) -> Option<Event> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            let mut data = std::mem::take(&mut self.data);
            if data.is_empty() {
                return None; // no data line at all
            }
            data.pop(); // the last data line's newline
            let event = if event.is_empty() { "message".to_string() } else { event };
            return Some(Event { event, data });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            _ => {} // id, retry and unknown fields: nothing to do for this transport
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(chunks: &[&[u8]], limit: usize) -> Vec<Result<Event, FrameError<String>>> {
        let chunks: Vec<Result<Bytes, String>> = chunks.iter().map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        let mut frames = Frames::new(futures::stream::iter(chunks), limit);
        let mut events = Vec::new();
        while let Some(event) = frames.next().await {
            let failed = event.is_err();
            events.push(event);
            if failed {
                break;
            }
        }
        events
    }

    fn event(event: &str, data: &str) -> Result<Event, FrameError<String>> {
        Ok(Event { event: event.into(), data: data.into() })
    }

    #[tokio::test]
    async fn endpoint_and_message_events_with_any_line_ending_and_split_anywhere() {
        let stream = "\u{feff}: comment\r\nevent: endpoint\r\ndata: /messages/?session_id=1\r\n\r\nid: 7\ndata:\n\ndata: {\"a\":\ndata:1}\n\nevent:message\rdata:x\r\r";
        for split in [1, 2, 3, 5, 7, 11, stream.len()] {
            let chunks: Vec<&[u8]> = stream.as_bytes().chunks(split).collect();
            let events = parse(&chunks, 1000).await;
            assert_eq!(
                events,
                vec![
                    event("endpoint", "/messages/?session_id=1"),
                    event("message", ""), // a priming event: an id and an empty data field
                    event("message", "{\"a\":\n1}"),
                    event("message", "x")
                ],
                "split every {split} bytes"
            );
        }
    }

    #[tokio::test]
    async fn an_unterminated_last_event_is_dropped_and_the_end_is_reported() {
        assert_eq!(parse(&[b"data: 1\n\ndata: 2\n"], 100).await, vec![event("message", "1")]);
    }

    #[tokio::test]
    async fn an_event_over_the_limit_is_an_error() {
        let events = parse(&[b"data: 12345678901234567890", b"1234567890\n"], 16).await;
        assert_eq!(events, vec![Err(FrameError::TooLarge(16))]);
        assert_eq!(FrameError::<String>::TooLarge(16).to_string(), "an event exceeded 16 bytes");
    }

    #[tokio::test]
    async fn a_failing_stream_is_an_error() {
        let chunks: Vec<Result<Bytes, String>> = vec![Ok(Bytes::from("data: 1\n\n")), Err("reset".into())];
        let mut frames = Frames::new(futures::stream::iter(chunks), 100);
        assert_eq!(frames.next().await, Some(event("message", "1")));
        assert_eq!(frames.next().await, Some(Err(FrameError::Stream("reset".into()))));
    }

    /// A chunk of a million short lines is taken in one pass (each line drained on its own moved the rest
    /// of the buffer every time: hours for this chunk).
    #[tokio::test]
    async fn many_lines_in_one_chunk_take_linear_time() {
        let mut chunk = ":\n".repeat(1_000_000).into_bytes();
        chunk.extend_from_slice(b"data: last\n\n");
        let started = std::time::Instant::now();
        let events = parse(&[&chunk], 4 << 20).await;
        assert_eq!(events, vec![event("message", "last")]);
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
    }
}

#[cfg(test)]
mod properties;
