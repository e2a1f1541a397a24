//! The tools a misspelt name most likely meant, by the rule the runner's check applies to a program's calls
//! (`closest_tools` in backends/src/checks.py, on Python's `difflib`): `inspect_tool` and a program's call of
//! the same wrong name suggest the same tools. A unit test holds the two to the same answers.

/// How close a tool of the name's own server must be, compared on the tool part.
const SAME_SERVER_CUTOFF: f64 = 0.6;
/// How close any tool must be, compared whole.
const ANY_TOOL_CUTOFF: f64 = 0.75;
/// Suggestions at most.
const MAX_SUGGESTIONS: usize = 3;

/// Up to three tool names close to `name`: its server's tools compared on the tool part (their shared prefix
/// would make every one look close), else any tool compared whole. Best first.
pub fn closest_tools<'a>(name: &str, names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let names: Vec<&str> = names.into_iter().collect();
    // As checks.py slices it: whatever the first five characters are.
    let rest: String = name.chars().skip("mcp__".len()).collect();
    let (server, tool) = rest.split_once("__").unwrap_or((&rest, ""));
    let prefix = format!("mcp__{server}__");
    let same_server: Vec<(&str, &str)> =
        names.iter().filter_map(|n| n.strip_prefix(&prefix).map(|tool| (tool, *n))).collect();
    if !tool.is_empty() && !same_server.is_empty() {
        let close = close_matches(tool, same_server.iter().map(|(tool, _)| *tool), SAME_SERVER_CUTOFF);
        if !close.is_empty() {
            let whole = |tool: &str| same_server.iter().find(|(t, _)| *t == tool).map(|(_, n)| *n);
            return close.into_iter().filter_map(whole).collect();
        }
    }
    close_matches(name, names, ANY_TOOL_CUTOFF)
}

/// `difflib.get_close_matches(word, possibilities, n=3, cutoff)`: the possibilities whose similarity to
/// `word` is at least `cutoff`, best first (ties: the greater string first, as Python's tuple order has it).
fn close_matches<'a>(word: &str, possibilities: impl IntoIterator<Item = &'a str>, cutoff: f64) -> Vec<&'a str> {
    let word: Vec<char> = word.chars().collect();
    let mut scored: Vec<(f64, &str)> = possibilities
        .into_iter()
        .map(|candidate| (ratio(&candidate.chars().collect::<Vec<_>>(), &word), candidate))
        .filter(|(score, _)| *score >= cutoff)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| b.1.cmp(a.1)));
    scored.into_iter().take(MAX_SUGGESTIONS).map(|(_, candidate)| candidate).collect()
}

/// `difflib.SequenceMatcher(None, a, b).ratio()`: twice the characters of the matching blocks over the
/// characters of both.
fn ratio(a: &[char], b: &[char]) -> f64 {
    let total = a.len() + b.len();
    if total == 0 {
        return 1.0;
    }
    let popular = popular_in(b);
    let mut matched = 0;
    let mut queue = vec![(0, a.len(), 0, b.len())];
    while let Some((a_lo, a_hi, b_lo, b_hi)) = queue.pop() {
        let (i, j, k) = longest_match(a, b, &popular, (a_lo, a_hi), (b_lo, b_hi));
        if k == 0 {
            continue;
        }
        matched += k;
        if a_lo < i && b_lo < j {
            queue.push((a_lo, i, b_lo, j));
        }
        if i + k < a_hi && j + k < b_hi {
            queue.push((i + k, a_hi, j + k, b_hi));
        }
    }
    2.0 * matched as f64 / total as f64
}

/// difflib's "autojunk": in a `b` of 200 characters or more, characters that make up more than 1% of it
/// (and one) start no match, though a match may grow over them.
fn popular_in(b: &[char]) -> Vec<char> {
    if b.len() < 200 {
        return Vec::new();
    }
    let most = b.len() / 100 + 1;
    let mut popular: Vec<char> = b.iter().copied().filter(|c| b.iter().filter(|d| *d == c).count() > most).collect();
    popular.sort_unstable();
    popular.dedup();
    popular
}

/// `SequenceMatcher.find_longest_match` without junk: the longest block `a[i..i+k] == b[j..j+k]` in the
/// ranges, the earliest in `a` (then in `b`) of the longest, grown over popular characters at both ends.
fn longest_match(
    a: &[char],
    b: &[char],
    popular: &[char],
    (a_lo, a_hi): (usize, usize),
    (b_lo, b_hi): (usize, usize),
) -> (usize, usize, usize) {
    let (mut best_i, mut best_j, mut best_k) = (a_lo, b_lo, 0);
    // The length of the match ending at each b[b_lo + j] and the previous character of `a`.
    let mut ending = vec![0usize; b_hi - b_lo];
    for (i, &c) in a.iter().enumerate().take(a_hi).skip(a_lo) {
        let mut next = vec![0usize; b_hi - b_lo];
        if !popular.contains(&c) {
            for (j, _) in b[b_lo..b_hi].iter().enumerate().filter(|(_, d)| **d == c) {
                let k = if j > 0 { ending[j - 1] } else { 0 } + 1;
                next[j] = k;
                if k > best_k {
                    (best_i, best_j, best_k) = (i + 1 - k, b_lo + j + 1 - k, k);
                }
            }
        }
        ending = next;
    }
    while best_i > a_lo && best_j > b_lo && a[best_i - 1] == b[best_j - 1] {
        (best_i, best_j, best_k) = (best_i - 1, best_j - 1, best_k + 1);
    }
    while best_i + best_k < a_hi && best_j + best_k < b_hi && a[best_i + best_k] == b[best_j + best_k] {
        best_k += 1;
    }
    (best_i, best_j, best_k)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLS: &[&str] = &[
        "mcp__filesystem__read_file",
        "mcp__filesystem__read_text_file",
        "mcp__filesystem__read_media_file",
        "mcp__filesystem__write_file",
        "mcp__filesystem__list_directory",
        "mcp__memory__read_graph",
        "mcp__memory__search_nodes",
        "mcp__time__get_current_time",
        "mcp__time__convert_time",
        "mcp__git__git_status",
        "mcp__git__git_log",
    ];

    /// Names a model gets wrong, with what they should suggest (checked against checks.py below).
    const CASES: &[(&str, &[&str])] = &[
        ("mcp__memory__read_grph", &["mcp__memory__read_graph"]),
        ("mcp__git__status", &["mcp__git__git_status"]),
        ("mcp__time__current_time", &["mcp__time__get_current_time", "mcp__time__convert_time"]),
        (
            "mcp__filesystem__readfile",
            &["mcp__filesystem__read_file", "mcp__filesystem__read_text_file", "mcp__filesystem__read_media_file"],
        ),
        (
            "mcp__filesystm__read_file",
            &["mcp__filesystem__read_file", "mcp__filesystem__read_text_file", "mcp__filesystem__write_file"],
        ),
        ("mcp__fs__read_file", &["mcp__filesystem__read_file"]),
        ("mcp__memory__nothing_like_it", &[]),
        ("read_graph", &[]),
        ("mcp__time", &[]),
        ("", &[]),
    ];

    #[test]
    fn near_misses_suggest_the_tools_they_most_likely_meant() {
        for (name, expected) in CASES {
            assert_eq!(closest_tools(name, TOOLS.iter().copied()), *expected, "{name}");
        }
    }

    #[test]
    fn ratios_are_difflibs() {
        let chars = |s: &str| s.chars().collect::<Vec<_>>();
        assert_eq!(ratio(&chars("abcd"), &chars("bcde")), 0.75);
        assert_eq!(ratio(&chars("read_file"), &chars("read_fil")), 16.0 / 17.0);
        assert_eq!(ratio(&chars(""), &chars("")), 1.0);
        assert_eq!(ratio(&chars("qabxcd"), &chars("abycdf")), 2.0 * 4.0 / 12.0);
    }

    /// The runner's check and this module give the same answers, long names (difflib's autojunk) included.
    #[test]
    fn the_suggestions_are_those_of_the_runners_check() {
        let long = format!("mcp__s__{}", "ab".repeat(150));
        let long_miss = format!("mcp__s__{}x", "ab".repeat(149));
        let mut names: Vec<String> = TOOLS.iter().map(|s| s.to_string()).collect();
        names.extend([long.clone(), format!("mcp__s__{}", "ba".repeat(150)), "mcp__s__é_tool".to_string()]);
        let mut queries: Vec<String> = CASES.iter().map(|(name, _)| name.to_string()).collect();
        queries.extend([long_miss, long, "mcp__s__e_tool".to_string(), "mcp__x__y__z".to_string()]);
        // Each name with one character left out, here and there.
        for name in TOOLS {
            queries.extend((0..name.len()).step_by(3).map(|at| format!("{}{}", &name[..at], &name[at + 1..])));
        }
        let driver = "import json, sys\nnames, queries = json.load(sys.stdin)\n\
                      print(json.dumps([closest_tools(q, names) for q in queries]))";
        let source = format!("{}\n{driver}", include_str!("../backends/src/checks.py"));
        let mut python = std::process::Command::new("python3")
            .args(["-I", "-S", "-c", &source])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let input = serde_json::to_vec(&(&names, &queries)).unwrap();
        std::io::Write::write_all(&mut python.stdin.take().unwrap(), &input).unwrap();
        let output = python.wait_with_output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stdout));
        let expected: Vec<Vec<String>> = serde_json::from_slice(&output.stdout).unwrap();
        for (query, expected) in queries.iter().zip(expected) {
            assert_eq!(closest_tools(query, names.iter().map(String::as_str)), expected, "{query}");
        }
    }
}
