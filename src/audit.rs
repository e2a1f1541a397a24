//! The audit file (`logging.audit_file`): one JSON line per run, appended when the run ends. It is opened
//! append-only, each line goes out in one write (so a crash of the server loses no finished run's line and
//! never leaves half a line), and it is reopened on request (SIGHUP), so the OS's log rotation can move it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::config::LoggingConfig;
use crate::engine::RunRecord;

#[derive(Debug, thiserror::Error)]
#[error("logging.audit_file: cannot open {path} for appending: {source}; fix the path or its permissions")]
pub struct AuditError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

pub struct AuditLog {
    path: PathBuf,
    with_code: bool,
    file: Mutex<File>,
}

impl AuditLog {
    /// Opens the configured audit file; `None` when there is none.
    pub fn open(config: &LoggingConfig) -> Result<Option<AuditLog>, AuditError> {
        let Some(path) = &config.audit_file else { return Ok(None) };
        let file = open_append(path)?;
        Ok(Some(AuditLog { path: path.clone(), with_code: config.audit_code, file: Mutex::new(file) }))
    }

    /// Appends the run's line. A failed write is logged, never fatal to the run.
    pub fn append(&self, record: &RunRecord<'_>) {
        let line = record.audit_line(self.with_code);
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = file.write_all(&line) {
            tracing::warn!("could not append to the audit file {}: {e}", self.path.display());
        }
    }

    /// Opens the file at its path again (after the OS rotated it away); on failure, keeps writing to the
    /// one it has.
    pub fn reopen(&self) {
        match open_append(&self.path) {
            Ok(file) => {
                *self.file.lock().unwrap_or_else(|e| e.into_inner()) = file;
                tracing::info!("audit file {} reopened", self.path.display());
            }
            Err(e) => tracing::warn!("{e}; still writing to the file opened before"),
        }
    }
}

fn open_append(path: &Path) -> Result<File, AuditError> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| AuditError { path: path.to_path_buf(), source })
}
