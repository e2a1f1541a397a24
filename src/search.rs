//! Finding tools by what they do: `list_callable_tools(query=...)` ranks tools with BM25 over their names,
//! titles, descriptions and parameters (a field's words weigh more in a name than in a description, and a
//! query word in the tool's own name adds its weight again), after the tools whose name is the query or
//! starts with it.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::registry::ToolEntry;

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
}

impl Index {
    pub fn new<'a>(tools: impl IntoIterator<Item = &'a ToolEntry>) -> Index {
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
    /// start with it, then by relevance (ties by name). Tools that share no word with the query are left out.
    pub fn rank(&self, query: &str) -> Vec<String> {
        let whole = normalised(query);
        let words = terms(query);
        let mut hits: Vec<(u8, f64, &str)> = self
            .docs
            .iter()
            .filter_map(|doc| {
                let tier = if doc.names.contains(&whole) {
                    0
                } else if whole.len() >= 2 && doc.names.iter().any(|n| n.starts_with(&whole)) {
                    1
                } else {
                    2
                };
                let score = self.score(doc, &words);
                (tier < 2 || score > 0.0).then_some((tier, score, doc.name.as_str()))
            })
            .collect();
        hits.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)).then(a.2.cmp(b.2)));
        hits.into_iter().map(|(_, _, name)| name.to_string()).collect()
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
    fn new(entry: &ToolEntry) -> Doc {
        let mut terms: HashMap<String, f64> = HashMap::new();
        let mut add = |text: &str, weight: f64| {
            for term in self::terms(text) {
                *terms.entry(term).or_default() += weight;
            }
        };
        add(&entry.namespaced, NAME_WEIGHT);
        add(entry.tool.title.as_deref().unwrap_or_default(), TITLE_WEIGHT);
        add(entry.tool.description.as_deref().unwrap_or_default(), DESCRIPTION_WEIGHT);
        for param in &entry.signature().params {
            add(&param.key, PARAMETER_WEIGHT);
            add(&param.comment, PARAMETER_DESCRIPTION_WEIGHT);
            if let Some(values) = &param.accepts.values {
                values.iter().filter_map(Value::as_str).for_each(|value| add(value, PARAMETER_DESCRIPTION_WEIGHT));
            }
        }
        let length = terms.values().sum();
        let names = [normalised(&entry.namespaced), normalised(&entry.tool.name)];
        let name_terms = self::terms(&entry.tool.name).into_iter().collect();
        Doc { name: entry.namespaced.clone(), names, name_terms, terms, length }
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
    use serde_json::json;

    fn entry(server: &str, value: Value) -> ToolEntry {
        ToolEntry::new(server, serde_json::from_value(value).unwrap())
    }

    fn fixtures() -> Vec<ToolEntry> {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tools/memory.json"));
        let mut tools: Vec<ToolEntry> = serde_json::from_str::<Vec<rmcp::model::Tool>>(&text.unwrap())
            .unwrap()
            .into_iter()
            .map(|tool| ToolEntry::new("memory", tool))
            .collect();
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tools/financial-data.json"));
        tools.extend(
            serde_json::from_str::<Vec<rmcp::model::Tool>>(&text.unwrap())
                .unwrap()
                .into_iter()
                .map(|tool| ToolEntry::new("financial-data", tool)),
        );
        tools
    }

    #[test]
    fn words_are_split_lowered_and_stemmed() {
        assert_eq!(terms("queryFinancials of the get-tiny_image"), ["query", "financial", "get", "tiny", "image"]);
        assert_eq!(terms("Queries listing entities"), ["query", "list", "entity"]);
        assert_eq!(terms("HTTPServer v2 class"), ["httpserver", "v2", "class"]);
    }

    #[test]
    fn relevant_tools_come_first_and_unrelated_ones_are_left_out() {
        let tools = fixtures();
        let index = Index::new(&tools);
        assert_eq!(index.rank("quarterly revenue")[..1], ["mcp__financial_data__query_financials"]);
        let relations = index.rank("remove a relation from the graph");
        assert_eq!(relations[0], "mcp__memory__delete_relations", "{relations:?}");
        assert!(index.rank("weather forecast").is_empty());
    }

    #[test]
    fn exact_names_then_prefixes_come_before_relevance() {
        let tools = fixtures();
        let index = Index::new(&tools);
        assert_eq!(index.rank("read_graph")[0], "mcp__memory__read_graph");
        assert_eq!(index.rank("mcp__memory__open_nodes")[0], "mcp__memory__open_nodes");
        assert_eq!(index.rank("Delete relations")[0], "mcp__memory__delete_relations");
        let mut deletes = index.rank("delete")[..3].to_vec();
        deletes.sort();
        assert_eq!(
            deletes,
            ["mcp__memory__delete_entities", "mcp__memory__delete_observations", "mcp__memory__delete_relations"]
        );
    }

    #[test]
    fn parameter_names_are_searched() {
        let tools = [
            entry("s", json!({"name": "a", "inputSchema": {"type": "object", "properties": {"timezone": {}}}})),
            entry("s", json!({"name": "b", "inputSchema": {"type": "object", "properties": {"path": {}}}})),
        ];
        assert_eq!(Index::new(&tools).rank("time zone timezone"), ["mcp__s__a"]);
    }
}
