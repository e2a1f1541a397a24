//! Text a run produces that must fit a byte budget (the program's output, its error): what is kept is the
//! head and the tail, with one marker line between them saying how many bytes were left out — the summary a
//! program prints last survives a flood before it.

use std::collections::VecDeque;

/// Output as it arrives: the first half of the budget is kept as the head, the latest bytes as the tail.
/// Each push costs its own length, however full the tail is.
#[derive(Debug)]
pub struct OutputBuffer {
    head: String,
    /// The latest bytes past the head (at most `tail_cap`); may begin inside a character until finished. A
    /// ring: dropping its oldest bytes moves none of the others.
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    left_out: usize,
    /// `max_output_bytes`, as the marker names it.
    limit: usize,
}

impl OutputBuffer {
    pub fn new(limit: usize) -> Self {
        let head_cap = limit / 2;
        OutputBuffer {
            head: String::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: limit - head_cap,
            left_out: 0,
            limit,
        }
    }

    pub fn push(&mut self, mut data: &str) {
        if self.tail.is_empty() && self.head.len() < self.head_cap {
            let cut = floor_char_boundary(data, self.head_cap - self.head.len());
            self.head.push_str(&data[..cut]);
            data = &data[cut..];
        }
        // Of a push longer than the tail, only its last bytes can stay.
        let skipped = data.len().saturating_sub(self.tail_cap);
        self.left_out += skipped;
        self.tail.extend(&data.as_bytes()[skipped..]);
        let excess = self.tail.len().saturating_sub(self.tail_cap);
        if excess > 0 {
            self.tail.drain(..excess);
            self.left_out += excess;
        }
    }

    /// The output, cut further to at most `budget` bytes (plus the marker) if it holds more.
    pub fn finish(mut self, budget: usize) -> String {
        let mut tail: &[u8] = self.tail.make_contiguous();
        let mut left_out = self.left_out;
        // A tail cut by bytes may start inside a character: drop the partial one.
        while let Some((&byte, rest)) = tail.split_first()
            && left_out > 0
            && is_continuation(byte)
        {
            tail = rest;
            left_out += 1;
        }
        let tail = String::from_utf8_lossy(tail);
        Clipped { head: &self.head, tail: &tail, left_out }.fit(budget).render(Marker::Output, self.limit)
    }
}

/// Which text was cut, for the marker line.
#[derive(Debug, Clone, Copy)]
pub enum Marker {
    Output,
    Error,
}

impl Marker {
    fn line(self, left_out: usize, limit: usize) -> String {
        match self {
            Marker::Output => format!(
                "[output truncated: {left_out} bytes left out here; the program printed more than max_output_bytes \
                 ({limit}); print less, or emit() a summary]"
            ),
            Marker::Error => format!(
                "[error truncated: {left_out} bytes left out here; the error text was longer than max_output_bytes \
                 ({limit})]"
            ),
        }
    }
}

/// `text` cut to at most `budget` bytes (plus the marker line), keeping its head and tail. `limit` is what
/// the marker names as the limit.
pub fn clip(text: &str, budget: usize, limit: usize, marker: Marker) -> String {
    Clipped { head: text, tail: "", left_out: 0 }.fit(budget).render(marker, limit)
}

/// A text's head and tail with what was left out between them.
struct Clipped<'a> {
    head: &'a str,
    tail: &'a str,
    left_out: usize,
}

impl Clipped<'_> {
    /// Leaves out more from the middle until head and tail fit in `budget` bytes together.
    fn fit(self, budget: usize) -> Fitted {
        let total = self.head.len() + self.tail.len();
        if total <= budget {
            return Fitted { head: self.head.to_string(), tail: self.tail.to_string(), left_out: self.left_out };
        }
        let head = &self.head[..floor_char_boundary(self.head, budget / 2)];
        // What the head does not keep runs on into the tail: the kept tail is the last bytes of the two.
        let mut rest = String::with_capacity(total - head.len());
        rest.push_str(&self.head[head.len()..]);
        rest.push_str(self.tail);
        let tail_budget = budget - head.len();
        let tail = &rest[ceil_char_boundary(&rest, rest.len() - tail_budget.min(rest.len()))..];
        let left_out = self.left_out + total - head.len() - tail.len();
        Fitted { head: head.to_string(), tail: tail.to_string(), left_out }
    }
}

/// A clipped text ready to be shown.
struct Fitted {
    head: String,
    tail: String,
    left_out: usize,
}

impl Fitted {
    fn render(self, marker: Marker, limit: usize) -> String {
        if self.left_out == 0 {
            return self.head + &self.tail;
        }
        let separator = if self.head.is_empty() || self.head.ends_with('\n') { "" } else { "\n" };
        format!("{}{separator}{}\n{}", self.head, marker.line(self.left_out, limit), self.tail)
    }
}

fn is_continuation(byte: u8) -> bool {
    byte & 0b1100_0000 == 0b1000_0000
}

/// The largest char boundary of `s` at or below `index`.
fn floor_char_boundary(s: &str, index: usize) -> usize {
    let mut index = index.min(s.len());
    while !s.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// The smallest char boundary of `s` at or above `index`.
fn ceil_char_boundary(s: &str, index: usize) -> usize {
    let mut index = index.min(s.len());
    while !s.is_char_boundary(index) {
        index += 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_under_the_limit_is_kept_whole() {
        let mut out = OutputBuffer::new(10);
        out.push("abc");
        out.push("defg");
        assert_eq!(out.finish(10), "abcdefg");
    }

    #[test]
    fn a_flood_keeps_its_head_and_tail_with_one_marker_line_saying_how_much_is_missing() {
        let mut out = OutputBuffer::new(20);
        for i in 0..1000 {
            out.push(&format!("line {i}\n"));
        }
        let text = out.finish(20);
        let (head, rest) = text.split_once("[output truncated: ").unwrap();
        let (marker, tail) = rest.split_once('\n').unwrap();
        assert_eq!(head, "line 0\nlin\n");
        assert!(
            marker.starts_with("8870 bytes left out here; the program printed more than max_output_bytes (20)"),
            "{marker}"
        );
        assert_eq!(tail, "\nline 999\n", "the last bytes survive");
        let printed: usize = (0..1000).map(|i| format!("line {i}\n").len()).sum();
        assert_eq!("line 0\nlin".len() + tail.len() + 8870, printed);
    }

    #[test]
    fn a_flood_of_small_pushes_takes_time_in_proportion_to_its_size() {
        // 500,000 pushes of 8 bytes past a full 4 MiB tail: moving the tail per push would copy 2 TB.
        let mut out = OutputBuffer::new(8 << 20);
        let started = std::time::Instant::now();
        for i in 0..(8 << 20) / 8 + 500_000 {
            out.push("1234567\n");
            if i % 1000 == 0 {
                assert!(started.elapsed() < std::time::Duration::from_secs(10), "still pushing at push {i}");
            }
        }
        let text = out.finish(8 << 20);
        assert!(text.contains("\n[output truncated: 4000000 bytes left out here") && text.ends_with("1234567\n"));
    }

    #[test]
    fn a_push_longer_than_the_tail_keeps_its_last_bytes() {
        let mut out = OutputBuffer::new(10);
        out.push("01234");
        out.push("abcdefghij");
        assert_eq!(out.finish(10), format!("01234\n{}\nfghij", Marker::Output.line(5, 10)));
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let mut out = OutputBuffer::new(7);
        out.push("ééééé");
        out.push("ü✓ü✓");
        let text = out.finish(7);
        assert!(text.starts_with("é\n[output truncated: 15 bytes left out here"), "{text}");
        assert!(text.ends_with("]\n✓"), "{text}");
    }

    #[test]
    fn a_smaller_budget_at_the_end_cuts_more_from_the_middle() {
        let mut out = OutputBuffer::new(100);
        out.push(&"a".repeat(60));
        out.push(&"b".repeat(60));
        let text = out.finish(10);
        assert_eq!(text, format!("aaaaa\n{}\nbbbbb", Marker::Output.line(110, 100)));
        assert_eq!(OutputBuffer::new(100).finish(0), "");
    }

    #[test]
    fn clip_keeps_short_text_and_cuts_long_text_in_the_middle() {
        assert_eq!(clip("short", 10, 10, Marker::Error), "short");
        let text = clip(&format!("Traceback\n{}\nValueError: boom", "x".repeat(1000)), 40, 40, Marker::Error);
        assert!(text.starts_with("Traceback\nxxxxxxxxxx\n[error truncated: "), "{text}");
        assert!(text.ends_with("]\nxxx\nValueError: boom"), "{text}");
    }
}
