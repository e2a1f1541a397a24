//! Finding tools by what they do: `list_callable_tools(query=...)` ranks tools with BM25 over their names,
//! titles, descriptions and parameters (a field's words weigh more in a name than in a description, and a
//! query word in the tool's own name adds its weight again), after the tools whose name is the query or
//! starts with it. A deprecated tool comes after the others of its rank, and keeps the rank of its name only
//! for a query written as one (no spaces): `read file` finds a replacement before a deprecated `read_file`.
//! The tools are described to it as [`Document`]s: it knows nothing else about them.

use std::collections::{HashMap, HashSet};

/// BM25's term-frequency saturation and length normalisation (the usual values).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// How much a word counts in each field.
const NAME_WEIGHT: f64 = 3.0;
const TITLE_WEIGHT: f64 = 2.0;
const PARAMETER_WEIGHT: f64 = 2.0;
const DESCRIPTION_WEIGHT: f64 = 1.0;
const PARAMETER_DESCRIPTION_WEIGHT: f64 = 0.5;

/// Words too common in tool descriptions to tell tools apart.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "if", "in", "into", "is", "it", "its", "of", "on",
    "or", "that", "the", "this", "to", "with",
];

/// What a tool is found by.
pub struct Document<'a> {
    /// Its namespaced name: what [`Index::rank`] gives back.
    pub name: &'a str,
    /// Its name as its server lists it.
    pub own_name: &'a str,
    pub title: &'a str,
    pub description: &'a str,
    pub parameters: Vec<Parameter<'a>>,
    /// Whether its server marks it deprecated.
    pub deprecated: bool,
}

pub struct Parameter<'a> {
    pub name: &'a str,
    pub description: &'a str,
    /// The values it accepts, when they are a list.
    pub values: Vec<&'a str>,
}

/// The words of every tool, for ranking queries against them.
pub struct Index {
    docs: Vec<Doc>,
    /// In how many tools each word appears.
    frequency: HashMap<String, usize>,
    average_length: f64,
}

struct Doc {
    /// The namespaced name.
    name: String,
    /// Names a query may equal or start with (see [`normalised`]): namespaced, and the tool's own name.
    names: [String; 2],
    /// The words of the tool's own name.
    name_terms: HashSet<String>,
    /// Weighted count of each word.
    terms: HashMap<String, f64>,
    length: f64,
    deprecated: bool,
}

impl Index {
    pub fn new<'a>(tools: impl IntoIterator<Item = Document<'a>>) -> Index {
        let docs: Vec<Doc> = tools.into_iter().map(Doc::new).collect();
        let mut frequency: HashMap<String, usize> = HashMap::new();
        for doc in &docs {
            for term in doc.terms.keys() {
                *frequency.entry(term.clone()).or_default() += 1;
            }
        }
        let average_length = docs.iter().map(|d| d.length).sum::<f64>() / docs.len().max(1) as f64;
        Index { docs, frequency, average_length }
    }

    /// The names of the tools that match `query`, best first: a name equal to the query, then names that
    /// start with it, then by relevance; in each, deprecated tools last (ties by name). Tools that share no
    /// word with the query are left out.
    pub fn rank(&self, query: &str) -> Vec<String> {
        let whole = normalised(query);
        let written_as_name = !query.trim().contains(char::is_whitespace);
        let words = terms(query);
        let mut hits: Vec<(u8, bool, f64, &str)> = self
            .docs
            .iter()
            .filter_map(|doc| {
                let by_name = written_as_name || !doc.deprecated;
                let tier = if by_name && doc.names.contains(&whole) {
                    0
                } else if by_name && whole.len() >= 2 && doc.names.iter().any(|n| n.starts_with(&whole)) {
                    1
                } else {
                    2
                };
                let score = self.score(doc, &words);
                (tier < 2 || score > 0.0).then_some((tier, doc.deprecated, score, doc.name.as_str()))
            })
            .collect();
        hits.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)).then(b.2.total_cmp(&a.2)).then(a.3.cmp(b.3)));
        hits.into_iter().map(|(_, _, _, name)| name.to_string()).collect()
    }

    fn score(&self, doc: &Doc, words: &[String]) -> f64 {
        let total = self.docs.len() as f64;
        words
            .iter()
            .filter_map(|word| {
                let tf = *doc.terms.get(word)?;
                let df = self.frequency.get(word).copied().unwrap_or(0) as f64;
                let idf = (1.0 + (total - df + 0.5) / (df + 0.5)).ln();
                let in_name = if doc.name_terms.contains(word) { idf } else { 0.0 };
                Some(idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * doc.length / self.average_length)) + in_name)
            })
            .sum()
    }
}

impl Doc {
    fn new(document: Document) -> Doc {
        let mut terms: HashMap<String, f64> = HashMap::new();
        let mut add = |text: &str, weight: f64| {
            for term in self::terms(text) {
                *terms.entry(term).or_default() += weight;
            }
        };
        add(document.name, NAME_WEIGHT);
        add(document.title, TITLE_WEIGHT);
        add(document.description, DESCRIPTION_WEIGHT);
        for parameter in &document.parameters {
            add(parameter.name, PARAMETER_WEIGHT);
            add(parameter.description, PARAMETER_DESCRIPTION_WEIGHT);
            for value in &parameter.values {
                add(value, PARAMETER_DESCRIPTION_WEIGHT);
            }
        }
        let length = terms.values().sum();
        let names = [normalised(document.name), normalised(document.own_name)];
        let name_terms = self::terms(document.own_name).into_iter().collect();
        Doc { name: document.name.to_string(), names, name_terms, terms, length, deprecated: document.deprecated }
    }
}

/// A name or query compared whole: lower case, every run of other characters than letters and digits one
/// `_` (so `delete relations` and `delete-relations` find `delete_relations`).
fn normalised(text: &str) -> String {
    let lower = text.trim().to_lowercase();
    let mut out = String::with_capacity(lower.len());
    for c in lower.chars() {
        if c.is_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out
}

/// The words of `text`, lower-cased and stemmed: split at anything but letters and digits and at
/// camelCase humps (`queryFinancials` → `query`, `financial`), stop words left out.
fn terms(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if (!c.is_alphanumeric() || (c.is_uppercase() && previous_lower)) && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
    }
    if !word.is_empty() {
        words.push(word);
    }
    words.into_iter().filter(|w| !STOP_WORDS.contains(&w.as_str())).map(|w| stem(&w)).collect()
}

/// A light English stemmer: plural and verb endings (`queries` → `query`, `listing` → `list`,
/// `financials` → `financial`), so a query's wording need not match the description's.
fn stem(word: &str) -> String {
    let long_enough = |stem: &str| stem.chars().count() >= 3;
    if let Some(stem) = word.strip_suffix("ies").filter(|s| long_enough(s)) {
        return format!("{stem}y");
    }
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(stem) = word.strip_suffix(suffix).filter(|s| long_enough(s) && !s.ends_with('s')) {
            return stem.to_string();
        }
    }
    word.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document<'a>(name: &'a str, description: &'a str, parameters: Vec<Parameter<'a>>) -> Document<'a> {
        let own_name = name.rsplit("__").next().unwrap();
        Document { name, own_name, title: "", description, parameters, deprecated: false }
    }

    #[test]
    fn words_are_split_lowered_and_stemmed() {
        assert_eq!(terms("queryFinancials of the get-tiny_image"), ["query", "financial", "get", "tiny", "image"]);
        assert_eq!(terms("Queries listing entities"), ["query", "list", "entity"]);
        assert_eq!(terms("HTTPServer v2 class"), ["httpserver", "v2", "class"]);
    }

    #[test]
    fn names_then_prefixes_then_relevance_and_unrelated_documents_are_left_out() {
        let index = Index::new([
            document("mcp__s__read_file", "Read a file from disk.", vec![]),
            document("mcp__s__read", "Read anything.", vec![]),
            document("mcp__s__write_file", "Write a file; the file is created if missing.", vec![]),
            document("mcp__s__zone", "Convert times.", vec![]),
        ]);
        assert_eq!(index.rank("read"), ["mcp__s__read", "mcp__s__read_file"]);
        assert_eq!(index.rank("file"), ["mcp__s__write_file", "mcp__s__read_file"]);
        assert!(index.rank("weather").is_empty());
    }

    #[test]
    fn deprecated_tools_come_after_the_others_of_their_rank() {
        let deprecated = |name, description| Document { deprecated: true, ..document(name, description, vec![]) };
        let index = Index::new([
            deprecated("mcp__s__read_file", "Read a file as text. DEPRECATED: Use read_text_file instead."),
            document("mcp__s__read_text_file", "Read a file as text.", vec![]),
            deprecated("mcp__s__get_time", "Get the time."),
            document("mcp__s__now", "Get the time.", vec![]),
        ]);
        assert_eq!(index.rank("time"), ["mcp__s__now", "mcp__s__get_time"]);
        assert_eq!(index.rank("read"), ["mcp__s__read_text_file", "mcp__s__read_file"]);
        assert_eq!(index.rank("read file"), ["mcp__s__read_text_file", "mcp__s__read_file"]);
        assert_eq!(index.rank("read_file")[0], "mcp__s__read_file", "asked for by its name");
    }

    #[test]
    fn parameters_and_the_values_they_accept_are_searched() {
        let timezone = Parameter { name: "timezone", description: "", values: vec![] };
        let unit = Parameter { name: "unit", description: "", values: vec!["celsius", "fahrenheit"] };
        let index = Index::new([
            document("mcp__s__a", "", vec![timezone]),
            document("mcp__s__b", "", vec![unit]),
            document("mcp__s__c", "", vec![]),
        ]);
        assert_eq!(index.rank("time zone timezone"), ["mcp__s__a"]);
        assert_eq!(index.rank("fahrenheit"), ["mcp__s__b"]);
    }
}
