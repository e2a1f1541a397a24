//! A call's arguments in one short line, for the trace summary: compact JSON that keeps every key (of the
//! first few) and cuts the longest values first, so that a failure shows what it was called with — the path of
//! an `EISDIR` — in about one line, whatever the program passed.

use std::io::Write;

use serde_json::{Map, Value};

/// The longest a preview should be, in bytes; only many long keys make it longer.
pub const MAX_PREVIEW: usize = 80;
/// Keys shown; more are marked with `...`.
const MAX_KEYS: usize = 8;
/// A key's name as shown.
const MAX_KEY: usize = 24;
/// The least a cut value keeps, however much the keys take.
const MIN_VALUE: usize = 8;

/// `arguments` as compact JSON, cut to about [`MAX_PREVIEW`] bytes: the first [`MAX_KEYS`] keys, each
/// with its value, the longest values cut (`"/a/very/lo..."`) until the whole fits.
pub fn preview(arguments: &Map<String, Value>) -> String {
    let keys: Vec<String> = arguments.keys().take(MAX_KEYS).map(|key| cut(&json_prefix(key), MAX_KEY)).collect();
    let values: Vec<String> = arguments.values().take(MAX_KEYS).map(json_prefix).collect();
    let more = arguments.len() > MAX_KEYS;
    // Braces, a colon after each key, commas between entries, and ",..." for keys left out.
    let fixed = 2
        + keys.iter().map(|key| key.len() + 1).sum::<usize>()
        + keys.len().saturating_sub(1)
        + if more { 4 } else { 0 };
    let room = MAX_PREVIEW.saturating_sub(fixed).max(MIN_VALUE * values.len());
    let cap = fair_share(values.iter().map(String::len), room);
    let entries: Vec<String> =
        keys.iter().zip(&values).map(|(key, value)| format!("{key}:{}", cut(value, cap))).collect();
    format!("{{{}{}}}", entries.join(","), if more { ",..." } else { "" })
}

/// The largest length such that `lengths`, each cut to it, fit in `room` (unbounded when they fit whole):
/// short values keep all they have and the long ones share the rest equally.
fn fair_share(lengths: impl Iterator<Item = usize>, room: usize) -> usize {
    let mut lengths: Vec<usize> = lengths.collect();
    lengths.sort_unstable();
    let mut left = room;
    for (i, &len) in lengths.iter().enumerate() {
        let share = left / (lengths.len() - i);
        if len > share {
            return share;
        }
        left -= len;
    }
    usize::MAX
}

/// The start of `value`'s compact JSON: a little more than a preview can show, however large the value
/// (serialising stops there).
fn json_prefix<T: serde::Serialize + ?Sized>(value: &T) -> String {
    struct Capped(Vec<u8>);
    impl Write for Capped {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            let room = MAX_PREVIEW + 1 - self.0.len();
            self.0.extend_from_slice(&bytes[..bytes.len().min(room)]);
            if bytes.len() > room { Err(std::io::ErrorKind::WriteZero.into()) } else { Ok(bytes.len()) }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut capped = Capped(Vec::with_capacity(MAX_PREVIEW + 1));
    // A value cut short is an error here, and expected.
    let _ = serde_json::to_writer(&mut capped, value);
    match String::from_utf8(capped.0) {
        Ok(text) => text,
        Err(cut_in_a_character) => {
            let valid = cut_in_a_character.utf8_error().valid_up_to();
            String::from_utf8_lossy(&cut_in_a_character.as_bytes()[..valid]).into_owned()
        }
    }
}

/// JSON text cut to at most `max` bytes with `...` (inside the quotes for a string), never in the middle of a
/// character or of an escape.
fn cut(json: &str, max: usize) -> String {
    if json.len() <= max {
        return json.to_string();
    }
    let quoted = json.starts_with('"');
    let marker = if quoted { "...\"" } else { "..." };
    let mut end = max.saturating_sub(marker.len()).max(usize::from(quoted));
    while !json.is_char_boundary(end) {
        end -= 1;
    }
    let mut kept = &json[..end];
    // An escape is kept whole or left out: `\n`, `\"` or `\u00e9` never ends half-written.
    if quoted
        && let Some(at) = kept.rfind('\\')
        && !escaped(kept, at)
    {
        let escape_len = if kept[at + 1..].starts_with('u') { 6 } else { 2 };
        if at + escape_len > kept.len() {
            kept = &kept[..at];
        }
    }
    format!("{kept}{marker}")
}

/// Whether the backslash at `at` is itself escaped (preceded by an odd number of backslashes).
fn escaped(text: &str, at: usize) -> bool {
    text[..at].bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn preview_of(arguments: Value) -> String {
        preview(arguments.as_object().unwrap())
    }

    #[test]
    fn small_arguments_are_shown_whole_as_compact_json() {
        assert_eq!(preview_of(json!({})), "{}");
        assert_eq!(preview_of(json!({"path": "/tmp/x", "n": 3})), r#"{"path":"/tmp/x","n":3}"#);
    }

    #[test]
    fn the_longest_values_are_cut_and_every_key_is_kept() {
        let shown = preview_of(json!({"path": "/data/reports/2024", "content": "x".repeat(5000), "mode": "w"}));
        assert_eq!(shown, format!(r#"{{"path":"/data/reports/2024","content":"{}...","mode":"w"}}"#, "x".repeat(24)));
        assert_eq!(shown.len(), MAX_PREVIEW);
        let two_long = preview_of(json!({"a": "a".repeat(100), "b": vec!["b"; 100]}));
        assert_eq!(two_long, format!(r#"{{"a":"{}...","b":["b","b","b","b","b","b","b","b...}}"#, "a".repeat(29)));
        assert!(two_long.len() <= MAX_PREVIEW);
    }

    #[test]
    fn many_keys_show_the_first_few_and_long_keys_are_cut() {
        let many: Map<String, Value> = (0..20).map(|i| (format!("k{i:02}"), json!(i))).collect();
        let shown = preview(&many);
        assert!(shown.starts_with(r#"{"k00":0,"k01":1,"#) && shown.ends_with(r#""k07":7,...}"#), "{shown}");
        let long_key = preview_of(json!({"k".repeat(100): 1}));
        assert_eq!(long_key, format!(r#"{{"{}...":1}}"#, "k".repeat(19)));
    }

    #[test]
    fn cuts_never_split_a_character_or_an_escape() {
        for text in ["é".repeat(100), "\n".repeat(100), "a\u{1}".repeat(100), "\\".repeat(100)] {
            let shown = preview_of(json!({"text": text}));
            assert!(shown.ends_with("...\"}") && shown.len() <= MAX_PREVIEW, "{shown}");
            let inner = &shown["{\"text\":\"".len()..shown.len() - "...\"}".len()];
            assert!(serde_json::from_str::<String>(&format!("\"{inner}\"")).is_ok(), "{shown}");
        }
    }

    #[test]
    fn a_huge_value_costs_no_more_than_a_small_one() {
        let shown = preview_of(json!({"blob": vec![1; 1_000_000]}));
        assert!(shown.starts_with(r#"{"blob":[1,1,1"#) && shown.ends_with("...}") && shown.len() <= MAX_PREVIEW);
    }
}
