//! What a program printed since the last progress notification, as the next one shows it: only its last
//! lines are kept (a bounded amount, whatever the program prints), with a count of the lines left out.

/// Bytes of printed text kept between two notifications: what a message can show, and as much again so that
/// the cut can fall at the start of a line.
const KEPT: usize = 2 * super::notice::MAX_MESSAGE;
/// Room for the line saying how many lines were left out (`[N lines left out]`, up to 20 digits) and the `…`
/// before a line shown only in part.
pub(super) const MARKER_ROOM: usize = 48;

#[derive(Debug, Default, Clone)]
pub(super) struct Printed {
    /// The last of what arrived, starting at a line's start unless `cut_mid_line`.
    text: String,
    /// Lines dropped before `text` since the last notification.
    left_out: u64,
    /// `text` starts in the middle of a line (one longer than what is kept).
    cut_mid_line: bool,
}

impl Printed {
    pub(super) fn push(&mut self, chunk: &str) {
        self.text.push_str(chunk);
        if self.text.len() > KEPT {
            self.drop_all_but(KEPT / 2);
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.text.is_empty() && self.left_out == 0
    }

    /// The text since the last take, within `room` bytes: its last lines, led by how many were left out;
    /// `None` if nothing was printed.
    pub(super) fn take(&mut self, room: usize) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        self.drop_all_but(room.saturating_sub(MARKER_ROOM));
        let Printed { text, left_out, cut_mid_line } = std::mem::take(self);
        let shown = text.strip_suffix('\n').unwrap_or(&text);
        let marker = match left_out {
            0 => String::new(),
            1 => "[1 line left out]\n".to_string(),
            n => format!("[{n} lines left out]\n"),
        };
        let ellipsis = if cut_mid_line { "…" } else { "" };
        Some(format!("{marker}{ellipsis}{shown}"))
    }

    /// Drops the text before its last `keep` bytes: at the next line's start if one follows, else in the line.
    fn drop_all_but(&mut self, keep: usize) {
        let Some(mut cut) = self.text.len().checked_sub(keep) else { return };
        while !self.text.is_char_boundary(cut) {
            cut += 1;
        }
        let at_line_start = cut == 0 || self.text.as_bytes()[cut - 1] == b'\n';
        let cut = match memchr::memchr(b'\n', &self.text.as_bytes()[cut..]) {
            Some(newline) if !at_line_start && cut + newline + 1 < self.text.len() => cut + newline + 1,
            _ => cut,
        };
        if cut == 0 {
            return;
        }
        let dropped = &self.text[..cut];
        self.left_out += memchr::memchr_iter(b'\n', dropped.as_bytes()).count() as u64;
        // A line cut before has now gone whole or is cut again: counted once, when its end is dropped.
        self.cut_mid_line = !dropped.ends_with('\n');
        self.text.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_shown_as_printed_less_its_last_newline() {
        let mut printed = Printed::default();
        assert_eq!(printed.take(1000), None);
        printed.push("first\nsec");
        printed.push("ond\n");
        assert_eq!(printed.take(1000).as_deref(), Some("first\nsecond"));
        assert_eq!(printed.take(1000), None, "taken once");
        printed.push("partial");
        assert_eq!(printed.take(1000).as_deref(), Some("partial"));
    }

    #[test]
    fn only_the_last_whole_lines_that_fit_are_shown_with_a_count_of_the_others() {
        let mut printed = Printed::default();
        for i in 0..1000 {
            printed.push(&format!("line {i}\n"));
        }
        let message = printed.take(100 + MARKER_ROOM).unwrap();
        // Eleven lines of 9 bytes fit in 100.
        assert!(message.starts_with("[989 lines left out]\nline 989\n"), "{message}");
        assert!(message.ends_with("line 999"), "{message}");
        assert!(message.len() <= 100 + MARKER_ROOM, "{} bytes", message.len());
    }

    #[test]
    fn a_flood_keeps_the_text_bounded_and_the_count_exact() {
        let mut printed = Printed::default();
        let chunk = "x".repeat(99) + "\n";
        for _ in 0..100_000 {
            printed.push(&chunk);
            assert!(printed.text.len() <= KEPT + chunk.len());
        }
        let message = printed.take(2048).unwrap();
        let shown = message.lines().skip(1).count() as u64;
        assert_eq!(message.lines().next(), Some(format!("[{} lines left out]", 100_000 - shown).as_str()));
        assert!(message.len() <= 2048);
    }

    #[test]
    fn a_line_longer_than_the_room_shows_its_end_after_an_ellipsis() {
        let mut printed = Printed::default();
        printed.push("short\n");
        printed.push(&"é".repeat(5000));
        printed.push("end\n");
        let message = printed.take(200).unwrap();
        assert!(message.starts_with("[1 line left out]\n…é"), "{message}");
        assert!(message.ends_with("éend"), "{message}");
        assert!(message.len() <= 200);
        printed.push("next\n");
        assert_eq!(printed.take(200).as_deref(), Some("next"), "the next message starts afresh");
    }
}
