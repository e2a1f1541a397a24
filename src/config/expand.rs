//! `${VAR}` and `${VAR:-default}` expansion in the config values that may carry secrets or paths.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    #[error("environment variable {0} is not set (use ${{{0}:-default}} to give a default)")]
    Unset(String),
    #[error("unterminated '${{' (expected '${{NAME}}' or '${{NAME:-default}}')")]
    Unterminated,
    #[error("'${{{0}}}' is not a valid variable reference (names are letters, digits and '_')")]
    BadName(String),
}

/// Expands every `${NAME}` / `${NAME:-default}` in `text`, looking names up with `lookup`. A `$` not followed
/// by `{` is kept as it is. Defaults are taken literally (no nested expansion).
pub fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or(ExpandError::Unterminated)?;
        let reference = &after[..end];
        let (name, default) = match reference.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (reference, None),
        };
        if !is_variable_name(name) {
            return Err(ExpandError::BadName(reference.to_string()));
        }
        match (lookup(name), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => return Err(ExpandError::Unset(name.to_string())),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn references_are_replaced_and_defaults_apply_only_when_unset() {
        assert_eq!(expand("Bearer ${TOKEN}", &env).unwrap(), "Bearer s3cret");
        assert_eq!(expand("${MISSING:-fallback}/x", &env).unwrap(), "fallback/x");
        assert_eq!(expand("${TOKEN:-fallback}", &env).unwrap(), "s3cret");
        assert_eq!(expand("${EMPTY:-fallback}", &env).unwrap(), "");
        assert_eq!(expand("${MISSING:-}", &env).unwrap(), "");
        assert_eq!(expand("a${TOKEN}b${TOKEN}c", &env).unwrap(), "as3cretbs3cretc");
    }

    #[test]
    fn text_without_references_is_unchanged() {
        assert_eq!(expand("cost $5 and $HOME", &env).unwrap(), "cost $5 and $HOME");
    }

    #[test]
    fn bad_references_are_errors_that_name_the_problem() {
        assert_eq!(expand("${MISSING}", &env), Err(ExpandError::Unset("MISSING".into())));
        assert_eq!(expand("x ${TOKEN", &env), Err(ExpandError::Unterminated));
        assert_eq!(expand("${A B}", &env), Err(ExpandError::BadName("A B".into())));
        assert_eq!(expand("${}", &env), Err(ExpandError::BadName("".into())));
    }
}
