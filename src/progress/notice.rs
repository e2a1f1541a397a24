//! What each progress notification says. `progress` is the tool calls finished so far plus the notifications
//! that carried printed lines or a `progress()` message: each notification reports something new, so it
//! always grows (MCP asks that), and a run that prints nothing and never calls `progress()` reports exactly its
//! calls finished. After `progress(message, fraction)`, `total` is set so that `progress / total` is that
//! fraction (until the next `progress()`; none for a fraction of 0).

use super::printed::Printed;
use crate::engine::RunProgress;

/// The longest message a notification carries, in bytes.
pub(super) const MAX_MESSAGE: usize = 2048;

/// One notification's content.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Notice {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: String,
}

/// What has happened since the last notification, and what that one reported.
#[derive(Debug, Default)]
pub(super) struct News {
    printed: Printed,
    calls: u64,
    said: u64,
    /// Notifications so far that carried printed lines or a program's message.
    notes: u64,
}

impl News {
    /// News from `now` on, after `notes` sent before: what a run reported to an earlier request is not news.
    pub(super) fn since(now: &RunProgress, notes: u64) -> News {
        News { calls: now.finished, said: now.said, notes, ..News::default() }
    }

    /// Notifications so far that carried a note.
    pub(super) fn notes(&self) -> u64 {
        self.notes
    }

    pub(super) fn print(&mut self, chunk: &str) {
        self.printed.push(chunk);
    }

    pub(super) fn has_printed(&self) -> bool {
        !self.printed.is_empty()
    }

    /// The next notification, given how far the run is now: the lines printed since the last one, then the
    /// program's new `progress()` message; without either, the calls finished. `None` if nothing is new.
    pub(super) fn next(&mut self, now: &RunProgress) -> Option<Notice> {
        // The loop that reads the runner keeps a message within MAX_PROGRESS_MESSAGE (1 KiB): the printed lines
        // get the rest.
        let said = (now.said > self.said).then_some(now.message.as_str());
        let room = MAX_MESSAGE.saturating_sub(said.map_or(0, |message| message.len() + 1));
        let printed = self.printed.take(room);
        let carries_note = printed.is_some() || said.is_some();
        let message = match (printed, said) {
            (Some(printed), Some(said)) => format!("{printed}\n{said}"),
            (Some(printed), None) => printed,
            (None, Some(said)) => said.to_string(),
            (None, None) if now.finished > self.calls => {
                format!("{} tool calls finished; last: {}", now.finished, now.last_tool)
            }
            (None, None) => return None,
        };
        self.notes += u64::from(carries_note);
        self.calls = now.finished;
        self.said = now.said;
        let progress = (now.finished + self.notes) as f64;
        let total = now.fraction.filter(|fraction| *fraction > 0.0).map(|fraction| progress / fraction);
        Some(Notice { progress, total, message })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(finished: u64, said: u64, message: &str, fraction: Option<f64>) -> RunProgress {
        RunProgress { finished, last_tool: "mcp__s__t".into(), said, message: message.into(), fraction }
    }

    #[test]
    fn calls_alone_are_reported_as_before() {
        let mut news = News::default();
        assert_eq!(news.next(&at(0, 0, "", None)), None);
        let notice = news.next(&at(3, 0, "", None)).unwrap();
        assert_eq!((notice.progress, notice.total), (3.0, None));
        assert_eq!(notice.message, "3 tool calls finished; last: mcp__s__t");
        assert_eq!(news.next(&at(3, 0, "", None)), None, "nothing new");
    }

    #[test]
    fn printed_lines_and_messages_make_progress_grow_and_a_fraction_sets_the_total() {
        let mut news = News::default();
        news.print("a\n");
        let first = news.next(&at(0, 0, "", None)).unwrap();
        assert_eq!((first.progress, first.message.as_str()), (1.0, "a"));
        let said = news.next(&at(0, 1, "half", Some(0.5))).unwrap();
        assert_eq!((said.progress, said.total, said.message.as_str()), (2.0, Some(4.0), "half"));
        news.print("b\n");
        let both = news.next(&at(1, 2, "most", Some(0.8))).unwrap();
        assert_eq!(both.message, "b\nmost");
        assert_eq!(both.progress, 4.0, "one call and one note more");
        assert!((both.progress / both.total.unwrap() - 0.8).abs() < 1e-9);
        let call = news.next(&at(2, 2, "most", Some(0.0))).unwrap();
        assert_eq!((call.progress, call.total), (5.0, None), "a fraction of 0 gives no total");
    }

    #[test]
    fn a_message_with_lines_stays_within_the_bound() {
        let mut news = News::default();
        news.print(&"line\n".repeat(10_000));
        let said = "m".repeat(ptc_backends::protocol::MAX_PROGRESS_MESSAGE);
        let notice = news.next(&at(0, 1, &said, None)).unwrap();
        assert!(notice.message.len() <= MAX_MESSAGE, "{} bytes", notice.message.len());
        assert!(notice.message.starts_with('[') && notice.message.ends_with(&said));
    }
}
