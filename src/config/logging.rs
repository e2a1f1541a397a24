//! `logging`: where the record of every run goes.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoggingConfig {
    /// One JSON line per run is appended here.
    pub audit_file: Option<PathBuf>,
    /// Whether each line holds the program's text too (its SHA-256 is always there).
    pub audit_code: bool,
}

impl LoggingConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.audit_file.as_ref().is_some_and(|path| path.as_os_str().is_empty()) {
            return Err("logging.audit_file: must be a path (or leave the key out)".to_string());
        }
        if self.audit_code && self.audit_file.is_none() {
            return Err("logging.audit_code: needs logging.audit_file, the file the code goes to".to_string());
        }
        Ok(())
    }
}
