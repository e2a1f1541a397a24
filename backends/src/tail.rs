//! The last few KiB a runner wrote to stderr: kept for diagnostics (why it failed to start or died), never
//! shown as program output.

use std::sync::{Arc, Mutex};

/// How much of a runner's stderr is kept.
const TAIL_BYTES: usize = 4096;

/// A shared, bounded buffer: the reading task pushes, the runner's control reads.
#[derive(Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<Vec<u8>>>);

impl StderrTail {
    pub fn push(&self, bytes: &[u8]) {
        let mut tail = self.0.lock().unwrap_or_else(|e| e.into_inner());
        tail.extend_from_slice(bytes);
        let excess = tail.len().saturating_sub(TAIL_BYTES);
        tail.drain(..excess);
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_bytes_are_kept() {
        let tail = StderrTail::default();
        tail.push(&[b'a'; TAIL_BYTES]);
        tail.push(b"end");
        let text = tail.text();
        assert_eq!(text.len(), TAIL_BYTES);
        assert!(text.ends_with("aend"));
    }
}
