//! The program's output as the server keeps it: counted in bytes and cut at `max_output_bytes`.

#[derive(Debug)]
pub struct OutputBuffer {
    text: String,
    limit: usize,
    truncated: bool,
}

impl OutputBuffer {
    pub fn new(limit: usize) -> Self {
        OutputBuffer { text: String::new(), limit, truncated: false }
    }

    pub fn push(&mut self, data: &str) {
        if self.truncated {
            return;
        }
        let room = self.limit - self.text.len();
        if data.len() <= room {
            self.text.push_str(data);
            return;
        }
        let mut cut = room;
        while !data.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&data[..cut]);
        self.truncated = true;
    }

    /// The output, with a closing marker when it was cut.
    pub fn finish(self) -> String {
        if !self.truncated {
            return self.text;
        }
        format!(
            "{}\n[output truncated: the program printed more than max_output_bytes ({}); print less, or emit() a \
             summary]\n",
            self.text, self.limit
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_under_the_limit_is_kept_whole() {
        let mut out = OutputBuffer::new(10);
        out.push("abc");
        out.push("defg");
        assert_eq!(out.finish(), "abcdefg");
    }

    #[test]
    fn output_over_the_limit_is_cut_on_a_character_boundary_and_marked() {
        let mut out = OutputBuffer::new(5);
        out.push("abcdé");
        out.push("more");
        let text = out.finish();
        assert!(
            text.starts_with("abcd\n[output truncated: the program printed more than max_output_bytes (5)"),
            "{text}"
        );
    }
}
