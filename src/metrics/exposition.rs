//! The Prometheus text exposition format (version 0.0.4), written by hand: a family's `# HELP` and `# TYPE`
//! lines, then its samples, label values escaped (`\\`, `\"`, `\n`) so that a name from the config can never
//! end a line or a label early.

use std::fmt::Write;

/// The `Content-Type` of the text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a family's samples are.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Observations counted into buckets of fixed upper bounds (seconds, say), with their sum.
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket, not cumulated: `counts[i]` fell in `(bounds[i-1], bounds[i]]`; the last one
    /// is past every bound.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    /// `bounds` ascending.
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, counts: vec![0; bounds.len() + 1], sum: 0.0 }
    }

    pub fn observe(&mut self, value: f64) {
        let bucket = self.bounds.iter().position(|bound| value <= *bound).unwrap_or(self.bounds.len());
        self.counts[bucket] += 1;
        self.sum += value;
    }
}

/// The text being written.
#[derive(Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// Starts a family: what it means and what kind it is.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let help = help.replace('\\', r"\\").replace('\n', r"\n");
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {}", kind.name());
    }

    /// One sample of a counter or gauge.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        let _ = writeln!(self.text, "{name}{} {value}", label_set(labels, None));
    }

    /// A histogram's samples: the cumulative `_bucket`s (`+Inf` last), `_sum` and `_count`.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], histogram: &Histogram) {
        let mut cumulative = 0;
        let bounds = histogram.bounds.iter().map(|bound| number(*bound)).chain(["+Inf".to_string()]);
        for (bound, count) in bounds.zip(&histogram.counts) {
            cumulative += count;
            let _ = writeln!(self.text, "{name}_bucket{} {cumulative}", label_set(labels, Some(&bound)));
        }
        let _ = writeln!(self.text, "{name}_sum{} {}", label_set(labels, None), number(histogram.sum));
        let _ = writeln!(self.text, "{name}_count{} {cumulative}", label_set(labels, None));
    }

    pub fn finish(self) -> String {
        self.text
    }
}

/// `{a="x",b="y"}` (with `le` last, for a bucket), or nothing without labels.
fn label_set(labels: &[(&str, &str)], le: Option<&str>) -> String {
    let pairs: Vec<String> = labels
        .iter()
        .copied()
        .chain(le.map(|bound| ("le", bound)))
        .map(|(name, value)| format!("{name}=\"{}\"", escape_label_value(value)))
        .collect();
    if pairs.is_empty() { String::new() } else { format!("{{{}}}", pairs.join(",")) }
}

fn escape_label_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str(r"\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str(r"\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// A float as the format reads it: the shortest text that reads back the same (`0.5`, `1`), `+Inf`.
fn number(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    format!("{value}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_have_help_type_and_labelled_samples_with_values_escaped() {
        let mut text = Exposition::default();
        text.family("ptc_things_total", Kind::Counter, "Things.\nBackslash \\ kept");
        text.sample("ptc_things_total", &[("server", "a\"b\\c\nd"), ("outcome", "ok")], 3);
        text.family("ptc_open", Kind::Gauge, "Open now.");
        text.sample("ptc_open", &[], 0);
        assert_eq!(
            text.finish(),
            "# HELP ptc_things_total Things.\\nBackslash \\\\ kept\n# TYPE ptc_things_total counter\n\
             ptc_things_total{server=\"a\\\"b\\\\c\\nd\",outcome=\"ok\"} 3\n\
             # HELP ptc_open Open now.\n# TYPE ptc_open gauge\nptc_open 0\n"
        );
    }

    #[test]
    fn a_histogram_has_cumulative_buckets_ending_at_inf_and_its_sum_and_count() {
        let mut histogram = Histogram::new(&[0.125, 1.0, 10.0]);
        for value in [0.0625, 0.125, 0.5, 20.0] {
            histogram.observe(value);
        }
        let mut text = Exposition::default();
        text.family("d_seconds", Kind::Histogram, "Durations.");
        text.histogram("d_seconds", &[("k", "v")], &histogram);
        assert_eq!(
            text.finish(),
            "# HELP d_seconds Durations.\n# TYPE d_seconds histogram\n\
             d_seconds_bucket{k=\"v\",le=\"0.125\"} 2\n\
             d_seconds_bucket{k=\"v\",le=\"1\"} 3\n\
             d_seconds_bucket{k=\"v\",le=\"10\"} 3\n\
             d_seconds_bucket{k=\"v\",le=\"+Inf\"} 4\n\
             d_seconds_sum{k=\"v\"} 20.6875\n\
             d_seconds_count{k=\"v\"} 4\n"
        );
        let empty = Histogram::new(&[1.0]);
        let mut text = Exposition::default();
        text.histogram("e", &[], &empty);
        assert_eq!(text.finish(), "e_bucket{le=\"1\"} 0\ne_bucket{le=\"+Inf\"} 0\ne_sum 0\ne_count 0\n");
    }
}
