//! The token store: one JSON file per server and authorization server (issuer) under `oauth.token_store`,
//! mode 0600 in a 0700 folder, replaced atomically (a new file renamed over the old one), and a lock file
//! beside it that serialises refreshes across processes (two `ptc-mcp` instances sharing a rotating refresh
//! token must not both spend it).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How long a refresh waits for another process's refresh to finish (a token request is bounded at 30 s).
const LOCK_WAIT: Duration = Duration::from_secs(60);
const LOCK_POLL: Duration = Duration::from_millis(20);

/// What one token file holds besides rmcp's credentials.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Grant {
    /// The server's name and URL, and the authorization server that issued the tokens.
    pub server: String,
    pub url: String,
    pub issuer: String,
    /// The redirect URI the client was registered with (a dynamically registered client knows only that one).
    #[serde(default)]
    pub redirect_uri: String,
    /// A secret the authorization server gave a dynamically registered client (a configured secret is never
    /// copied here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// Scopes the server asked for beyond the grant (`403 insufficient_scope`): the next login asks for them too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wanted_scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<StoredCredentials>,
}

/// Why the token store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a token file ptc-mcp can read ({why}); delete it and log in again")]
    Unreadable { path: PathBuf, why: String },
    #[error("another ptc-mcp held the lock of {path} for over {}s", LOCK_WAIT.as_secs())]
    LockTimeout { path: PathBuf },
}

impl From<StoreError> for AuthError {
    fn from(error: StoreError) -> AuthError {
        AuthError::CredentialStoreError(error.to_string())
    }
}

/// The token file of one server at one authorization server. Clones share nothing but the path.
#[derive(Clone)]
pub struct TokenFile {
    path: Arc<Path>,
}

impl TokenFile {
    /// The file for `server` at `issuer` in `dir`: its name shows the server, and a hash of both binds it to
    /// that issuer (tokens are never offered to another authorization server).
    pub fn new(dir: &Path, server: &str, issuer: &str) -> TokenFile {
        let digest = Sha256::digest(format!("{server}\n{issuer}").as_bytes());
        let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        TokenFile { path: dir.join(format!("{}-{hash}.json", file_stem(server))).into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's grant, `None` when there is no file.
    pub fn read(&self) -> Result<Option<Grant>, StoreError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StoreError::Io { what: "read", path: self.path.to_path_buf(), source }),
        };
        // serde_json's error names a line and column, never the text around it (which holds tokens).
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| StoreError::Unreadable { path: self.path.to_path_buf(), why: e.to_string() })
    }

    /// Replaces the file with `grant`: written to a new 0600 file in the same folder, flushed, then renamed
    /// over the old one, so a reader sees the old grant or the new one, never half of either.
    pub fn write(&self, grant: &Grant) -> Result<(), StoreError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        create_private_dir(dir)?;
        let io = |what, source| StoreError::Io { what, path: self.path.to_path_buf(), source };
        let text = serde_json::to_vec_pretty(grant).expect("a grant serialises");
        let temporary = dir.join(format!(
            ".{}.{}-{:016x}.tmp",
            self.path.file_name().and_then(|n| n.to_str()).unwrap_or("tokens"),
            std::process::id(),
            fastrand::u64(..)
        ));
        let written = (|| {
            let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temporary)?;
            file.write_all(&text)?;
            file.sync_all()?;
            std::fs::rename(&temporary, &self.path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(io("write", e));
        }
        // The rename is durable once the folder is: best effort.
        if let Ok(folder) = File::open(dir) {
            let _ = folder.sync_all();
        }
        Ok(())
    }

    /// Reads, changes and writes the grant (an empty one if there is no file).
    pub fn update(&self, change: impl FnOnce(&mut Grant)) -> Result<(), StoreError> {
        let mut grant = self.read()?.unwrap_or_default();
        change(&mut grant);
        self.write(&grant)
    }

    /// Deletes the file; `false` when there was none.
    pub fn delete(&self) -> Result<bool, StoreError> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(StoreError::Io { what: "delete", path: self.path.to_path_buf(), source }),
        }
    }

    /// Takes the file's lock (shared with every process using the same store), waiting for another holder
    /// at most [`LOCK_WAIT`]. Released when the guard is dropped.
    pub async fn lock(&self) -> Result<FileLock, StoreError> {
        let lock_path = self.path.with_extension("lock");
        let io = |source| StoreError::Io { what: "lock", path: lock_path.clone(), source };
        create_private_dir(lock_path.parent().unwrap_or(Path::new(".")))?;
        let file =
            OpenOptions::new().write(true).create(true).truncate(false).mode(0o600).open(&lock_path).map_err(io)?;
        let deadline = tokio::time::Instant::now() + LOCK_WAIT;
        loop {
            if try_flock(&file).map_err(io)? {
                return Ok(FileLock { _file: file });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StoreError::LockTimeout { path: lock_path });
            }
            tokio::time::sleep(LOCK_POLL).await;
        }
    }

    /// The token files of `server` in `dir`, whatever their issuer.
    pub fn all_of(dir: &Path, server: &str) -> Vec<TokenFile> {
        let prefix = format!("{}-", file_stem(server));
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                name.starts_with(&prefix) && name.ends_with(".json")
            })
            .map(|path| TokenFile { path: path.into() })
            .filter(|file| file.read().ok().flatten().is_some_and(|grant| grant.server == server))
            .collect()
    }
}

/// What the token files of `server` in `dir` look like from outside (names, sizes, modification times):
/// changes when a login or logout writes them.
pub fn snapshot(dir: &Path, server: &str) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>)> {
    let prefix = format!("{}-", file_stem(server));
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_str().unwrap_or("");
            name.starts_with(&prefix) && name.ends_with(".json")
        })
        .filter_map(|entry| {
            let metadata = entry.metadata().ok()?;
            Some((entry.path(), metadata.len(), metadata.modified().ok()))
        })
        .collect();
    files.sort();
    files
}

/// Only the path: never the tokens.
impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenFile").field("path", &self.path).finish()
    }
}

/// A held lock of a token file.
pub struct FileLock {
    _file: File,
}

fn try_flock(file: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this function borrows.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) { Ok(false) } else { Err(error) }
}

fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|source| StoreError::Io {
        what: "create the folder",
        path: dir.to_path_buf(),
        source,
    })
}

/// A file-name-safe form of a server name.
fn file_stem(server: &str) -> String {
    server.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// rmcp's view of the file: its credentials, read and written inside the rest of the grant.
#[async_trait::async_trait]
impl CredentialStore for TokenFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self.read()?.and_then(|grant| grant.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        Ok(self.update(|grant| grant.credentials = Some(credentials))?)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.update(|grant| grant.credentials = None)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn files_are_private_replaced_whole_and_named_by_server_and_issuer() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let file = TokenFile::new(&store, "git hub", "https://github.com/login/oauth");
        assert_eq!(file.read().unwrap().map(|g| g.server), None);
        let grant =
            Grant { server: "git hub".into(), issuer: "https://github.com/login/oauth".into(), ..Grant::default() };
        file.write(&grant).unwrap();
        let name = file.path().file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with("git_hub-") && name.ends_with(".json"), "{name}");
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(file.path()), 0o600);
        assert_eq!(mode(&store), 0o700);
        file.update(|g| g.wanted_scopes = vec!["repo".into()]).unwrap();
        assert_eq!(file.read().unwrap().unwrap().wanted_scopes, ["repo"]);
        // Nothing but the file itself is left in the folder (no temporary files).
        assert_eq!(std::fs::read_dir(&store).unwrap().count(), 1);
        let other_issuer = TokenFile::new(&store, "git hub", "https://evil.example");
        assert_ne!(other_issuer.path(), file.path());
        assert_eq!(TokenFile::all_of(&store, "git hub").len(), 1);
        assert!(TokenFile::all_of(&store, "git_hub").is_empty(), "the name inside decides, not the file name");
        assert!(file.delete().unwrap());
        assert!(!file.delete().unwrap());
    }

    #[test]
    fn a_damaged_file_is_named_without_its_text() {
        let dir = tempfile::tempdir().unwrap();
        let file = TokenFile::new(dir.path(), "s", "i");
        std::fs::write(file.path(), "{\"server\": \"s\", \"access_token\": \"tok-s3cret").unwrap();
        let error = file.read().unwrap_err().to_string();
        assert!(error.contains("is not a token file ptc-mcp can read"), "{error}");
        assert!(!error.contains("s3cret"), "{error}");
    }

    #[tokio::test]
    async fn the_lock_is_exclusive_across_open_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = TokenFile::new(dir.path(), "s", "i");
        let held = file.lock().await.unwrap();
        let other = OpenOptions::new().write(true).open(file.path().with_extension("lock")).unwrap();
        assert!(!try_flock(&other).unwrap(), "a second open file cannot take it");
        drop(held);
        assert!(try_flock(&other).unwrap());
    }
}
