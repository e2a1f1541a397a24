//! `logging`: where the record of every run goes.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoggingConfig {
    /// One JSON line per run is appended here.
    pub audit_file: Option<PathBuf>,
    /// Whether each line holds the program's text too (its SHA-256 is always there).
    pub audit_code: bool,
}

/// A `logging` section that cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoggingError {
    #[error("logging.audit_file: must be a path (or leave the key out)")]
    EmptyAuditFile,
    #[error("logging.audit_code: needs logging.audit_file, the file the code goes to")]
    CodeWithoutFile,
}

impl LoggingConfig {
    pub(super) fn validate(&self) -> Result<(), LoggingError> {
        if self.audit_file.as_ref().is_some_and(|path| path.as_os_str().is_empty()) {
            return Err(LoggingError::EmptyAuditFile);
        }
        if self.audit_code && self.audit_file.is_none() {
            return Err(LoggingError::CodeWithoutFile);
        }
        Ok(())
    }
}
