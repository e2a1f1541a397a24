//! The files `attach()` returns to the client: each as an embedded resource under
//! `ptc-mcp://attachments/<its path in the working directory>`, text for text types that are UTF-8 and base64
//! otherwise. Everything in the request is the program's word: its path and MIME type are checked here, and
//! its data is decoded before any of it is kept.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rmcp::model::{ContentBlock, ResourceContents};

use super::trace::shorten;

/// The longest path taken, in bytes (the runner refuses longer ones).
pub const MAX_PATH: usize = 4096;
/// The longest side of a MIME type (RFC 6838 allows 127; the runner takes 64).
const MAX_MIME_PART: usize = 64;
/// How much of a path the notes and the result's text show.
const SHOWN_PATH: usize = 200;
/// Where the URIs of attached files start.
const URI_PREFIX: &str = "ptc-mcp://attachments/";

/// A request the runner never sends: only a forged one fails.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("attach(): the path is not a relative path of at most {MAX_PATH} bytes inside the working directory")]
    Path,
    #[error("attach(): {0:?} is not a MIME type (type/subtype)")]
    MimeType(String),
    #[error("attach(): the file's data is not base64")]
    Data,
    #[error("attach(): no data for a file of {0} bytes, which fits max_attachment_bytes")]
    NoData(u64),
}

/// A file the program asked to attach: its path in the working directory and its MIME type, both checked.
#[derive(Debug)]
pub struct File {
    path: String,
    mime_type: String,
}

/// A file's embedded resource, and the bytes it counts against `max_attachment_bytes`: its text, or its
/// base64.
pub struct Resource {
    pub block: ContentBlock,
    pub bytes: usize,
    pub base64: bool,
}

impl File {
    pub fn new(path: String, mime_type: String) -> Result<File, FileError> {
        let clean = path.len() <= MAX_PATH
            && !path.contains('\0')
            && path.split('/').all(|part| !matches!(part, "" | "." | ".."));
        if !clean {
            return Err(FileError::Path);
        }
        if !is_mime_type(&mime_type) {
            return Err(FileError::MimeType(shorten(&mime_type, 2 * MAX_MIME_PART + 1)));
        }
        Ok(File { path, mime_type })
    }

    /// What it is, in words: `file out/data.csv (text/csv)`.
    pub fn what(&self) -> String {
        let path: String = self.path.chars().map(|c| if c.is_control() { '?' } else { c }).collect();
        format!("file {} ({})", shorten(&path, SHOWN_PATH), self.mime_type)
    }

    /// Its resource, from its bytes in base64.
    pub fn resource(self, data: String) -> Result<Resource, FileError> {
        let bytes = STANDARD.decode(&data).map_err(|_| FileError::Data)?;
        let uri = uri(&self.path);
        let text = if is_text(&self.mime_type) { String::from_utf8(bytes).ok() } else { None };
        Ok(match text {
            Some(text) => Resource {
                bytes: text.len(),
                block: ContentBlock::resource(ResourceContents::TextResourceContents {
                    uri,
                    mime_type: Some(self.mime_type),
                    text,
                    meta: None,
                }),
                base64: false,
            },
            None => Resource {
                bytes: data.len(),
                block: ContentBlock::resource(ResourceContents::blob(data, uri).with_mime_type(self.mime_type)),
                base64: true,
            },
        })
    }
}

/// `type/subtype`, each side an RFC 6838 name of at most [`MAX_MIME_PART`] characters.
fn is_mime_type(text: &str) -> bool {
    let name = |part: &str| {
        (1..=MAX_MIME_PART).contains(&part.len())
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    text.split_once('/').is_some_and(|(kind, subtype)| name(kind) && name(subtype))
}

/// Whether a type's files are text: `text/*`, JSON, XML, YAML (and their `+json`-style suffixes), scripts.
fn is_text(mime_type: &str) -> bool {
    let mime_type = mime_type.to_ascii_lowercase();
    let Some((kind, subtype)) = mime_type.split_once('/') else { return false };
    let structured = ["+json", "+xml", "+yaml"].iter().any(|suffix| subtype.ends_with(suffix));
    kind == "text"
        || structured
        || kind == "application"
            && matches!(
                subtype,
                "json" | "xml" | "yaml" | "x-yaml" | "toml" | "javascript" | "x-sh" | "sql" | "x-ndjson" | "csv"
            )
}

/// `ptc-mcp://attachments/` and the path, each byte but unreserved ones and `/` percent-encoded.
fn uri(path: &str) -> String {
    let mut uri = String::with_capacity(URI_PREFIX.len() + path.len());
    uri.push_str(URI_PREFIX);
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(resource: &Resource) -> &ResourceContents {
        let ContentBlock::Resource(embedded) = &resource.block else { panic!("an embedded resource") };
        &embedded.resource
    }

    #[test]
    fn utf8_files_of_text_types_are_text_and_the_rest_base64() {
        let file = File::new("out/data.csv".into(), "text/csv".into()).unwrap();
        assert_eq!(file.what(), "file out/data.csv (text/csv)");
        let text = file.resource(STANDARD.encode("a,é\n")).unwrap();
        assert_eq!((text.bytes, text.base64), (5, false));
        assert_eq!(
            contents(&text),
            &ResourceContents::TextResourceContents {
                uri: "ptc-mcp://attachments/out/data.csv".into(),
                mime_type: Some("text/csv".into()),
                text: "a,é\n".into(),
                meta: None,
            }
        );
        let latin1 = File::new("a b%.txt".into(), "text/plain".into()).unwrap();
        let latin1 = latin1.resource(STANDARD.encode(b"\xe9")).unwrap();
        assert_eq!((latin1.bytes, latin1.base64), (4, true));
        assert_eq!(
            contents(&latin1),
            &ResourceContents::blob("6Q==", "ptc-mcp://attachments/a%20b%25.txt").with_mime_type("text/plain")
        );
        let png = File::new("p.png".into(), "image/png".into()).unwrap();
        let png = png.resource(STANDARD.encode(b"\x89PNG")).unwrap();
        assert!(png.base64 && matches!(contents(&png), ResourceContents::BlobResourceContents { .. }));
        for (mime_type, text) in
            [("application/json", true), ("image/svg+xml", true), ("Text/HTML", true), ("application/pdf", false)]
        {
            assert_eq!(is_text(mime_type), text, "{mime_type}");
        }
    }

    #[test]
    fn forged_paths_types_and_data_are_refused() {
        for path in ["", "/etc/passwd", "a/../../b", "./a", "a//b", "a/", "a\0b", &"x".repeat(MAX_PATH + 1)] {
            assert_eq!(File::new(path.into(), "text/plain".into()).unwrap_err(), FileError::Path, "{path:?}");
        }
        let long = format!("a/{}", "b".repeat(65));
        for mime_type in ["text", "text/", "/plain", "a/b/c", "text/plain; charset=utf-8", "-a/b", &long] {
            assert!(matches!(File::new("a".into(), mime_type.into()), Err(FileError::MimeType(_))), "{mime_type}");
        }
        let file = File::new("a".into(), "application/vnd.example+json".into()).unwrap();
        assert_eq!(file.resource("not base64!".into()).err(), Some(FileError::Data));
        let odd = File::new("tab\there".into(), "text/plain".into()).unwrap();
        assert_eq!(odd.what(), "file tab?here (text/plain)");
    }
}
