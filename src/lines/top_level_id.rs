//! Finding the `"id"` of a JSON object that is too large to keep: a streaming scan that remembers only where
//! it is (nesting, strings, escapes) and the bytes of the top-level `"id"` value, wherever in the object that
//! key comes (SDKs put it first or last).

use serde_json::Value;

/// The longest `"id"` value kept (JSON-RPC ids are short numbers or strings).
const MAX_ID_BYTES: usize = 256;
/// The longest key kept as written: room for `id` with both letters escaped (`\u0069\u0064`).
const MAX_KEY_BYTES: usize = 16;

/// What the scanner expects next at the object's top level.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Expect {
    /// The opening `{`.
    #[default]
    Start,
    Key,
    Colon,
    /// A value, up to the `,` or `}` that ends it.
    Value,
    /// The object ended, or the input is not an object.
    Done,
}

#[derive(Debug, Default)]
pub struct IdScanner {
    expect: Expect,
    /// Nesting inside the top-level object's values (0: at its top level).
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The key being read, as written (escapes too); only its first bytes matter.
    key: Vec<u8>,
    /// The raw bytes of the `"id"` value while it is being read.
    capture: Option<Vec<u8>>,
    found: Option<Vec<u8>>,
}

/// The top-level `"id"` of the JSON object in `bytes`, found without parsing the rest: for a message that
/// does not parse (cut short, or with bytes that are not UTF-8) but may still say whom it answers.
pub fn top_level_id(bytes: &[u8]) -> Option<Value> {
    let mut scanner = IdScanner::default();
    scanner.feed(bytes);
    scanner.finish()
}

impl IdScanner {
    pub fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if self.expect == Expect::Done {
                return;
            }
            self.step(byte);
        }
    }

    /// The `"id"` value, if the object had a number or string there.
    pub fn finish(self) -> Option<Value> {
        let raw = self.found?;
        match serde_json::from_slice(&raw).ok()? {
            id @ (Value::Number(_) | Value::String(_)) => Some(id),
            _ => None,
        }
    }

    fn step(&mut self, byte: u8) {
        if let Some(capture) = &mut self.capture
            && capture.len() <= MAX_ID_BYTES
        {
            capture.push(byte);
        }
        if self.in_string {
            let closing = !self.escaped && byte == b'"';
            self.escaped = !self.escaped && byte == b'\\';
            if self.depth == 0 && self.expect == Expect::Key {
                if closing {
                    self.expect = Expect::Colon;
                } else if self.key.len() <= MAX_KEY_BYTES {
                    self.key.push(byte);
                }
            }
            self.in_string = !closing;
            return;
        }
        if byte.is_ascii_whitespace() {
            return;
        }
        match (self.expect, byte) {
            (Expect::Start, b'{') => self.expect = Expect::Key,
            (Expect::Start, _) => self.expect = Expect::Done,
            (Expect::Key, b'"') => {
                self.key.clear();
                self.in_string = true;
            }
            (Expect::Key, b'}') => self.expect = Expect::Done,
            (Expect::Colon, b':') => {
                self.expect = Expect::Value;
                if self.key_is_id() {
                    // The last `"id"` counts, as serde_json reads a repeated key.
                    self.found = None;
                    self.capture = Some(Vec::new());
                }
            }
            (Expect::Value, _) => self.value_byte(byte),
            _ => self.expect = Expect::Done,
        }
    }

    /// Whether the key just read is `id`, however it is written (`"\u0069d"` is `"id"` too; `"i\\d"` is not).
    fn key_is_id(&self) -> bool {
        if !self.key.contains(&b'\\') {
            return self.key == b"id";
        }
        self.key.len() <= MAX_KEY_BYTES
            && serde_json::from_slice::<String>(&[b"\"", &self.key[..], b"\""].concat()).is_ok_and(|key| key == "id")
    }

    /// A byte (outside strings) of a top-level value.
    fn value_byte(&mut self, byte: u8) {
        match byte {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' if self.depth > 0 => self.depth -= 1,
            b',' | b'}' if self.depth == 0 => {
                if let Some(mut capture) = self.capture.take()
                    && capture.len() <= MAX_ID_BYTES
                {
                    capture.pop(); // the separator itself
                    self.found = Some(capture);
                }
                self.expect = if byte == b',' { Expect::Key } else { Expect::Done };
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scan(pieces: &[&str]) -> Option<Value> {
        let mut scanner = IdScanner::default();
        for piece in pieces {
            scanner.feed(piece.as_bytes());
        }
        scanner.finish()
    }

    #[test]
    fn the_id_is_found_first_last_or_split_across_pieces() {
        assert_eq!(scan(&[r#"{"jsonrpc":"2.0","id":12,"result":{"a":[1,2]}}"#]), Some(json!(12)));
        assert_eq!(scan(&[r#"{"result":{"id":1,"t":"}\"id\":3"},"jsonrpc":"2.0","id":"abc"}"#]), Some(json!("abc")));
        assert_eq!(scan(&[r#"{"result": {"x": "y"}, "i"#, r#"d" :  4"#, "2 }"]), Some(json!(42)));
    }

    /// Found by the property test (properties.rs): `"i\\d"` was read as `id` and `"\u0069d"` was not.
    #[test]
    fn a_key_is_read_with_its_escapes() {
        assert_eq!(scan(&[r#"{"\u0069d":9,"x":1}"#]), Some(json!(9)));
        assert_eq!(scan(&[r#"{"\u0069\u0064":9}"#]), Some(json!(9)));
        assert_eq!(scan(&[r#"{"id":7,"i\\d":5}"#]), Some(json!(7)));
        assert_eq!(scan(&[r#"{"id":7,"i\"d":5}"#]), Some(json!(7)));
        assert_eq!(scan(&[r#"{"id":7,"\u0069\u0064\u0020":5}"#]), Some(json!(7)));
        assert_eq!(scan(&[r#"{"id":7,"i\u0064":{"a":1}}"#]), None, "the last id counts");
    }

    #[test]
    fn the_id_of_a_message_that_does_not_parse_is_found_in_one_piece() {
        assert_eq!(top_level_id(b"{\"id\":3,\"result\":{\"t\":\"bad \xff\"}}"), Some(json!(3)));
        assert_eq!(
            top_level_id(br#"{"jsonrpc":"2.0","id":"x","result":{"content":[{"text":"cut sho"#),
            Some(json!("x"))
        );
        assert_eq!(top_level_id(br#"{"jsonrpc":"2.0","result":{"content":[],"id":4"#), None);
    }

    #[test]
    fn nested_ids_strings_that_look_like_keys_and_non_objects_give_nothing() {
        assert_eq!(scan(&[r#"{"result":{"id":5},"note":"\"id\":6"}"#]), None);
        assert_eq!(scan(&[r#"["id", 1]"#]), None);
        assert_eq!(scan(&[r#"{"id":{"nested":1}}"#]), None);
        assert_eq!(scan(&[r#"{"id":"#, &"9".repeat(1000), "}"]), None);
    }
}
