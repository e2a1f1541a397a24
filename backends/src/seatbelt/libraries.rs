//! The shared libraries an interpreter loads: its own library, and what its standard extension modules link
//! (Homebrew's `_ssl` links OpenSSL from another keg, conda's link the environment's `lib/`). A sandbox that
//! names only the interpreter's prefix would break those imports, so the interpreter is asked, once,
//! outside any sandbox: it imports every extension module of its standard library and lists what is mapped
//! (dyld's image list on macOS, `/proc/self/maps` elsewhere).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

/// Importing every extension module takes a few hundred milliseconds; a hung import must not hold the
/// server's start.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Prints one line per mapped file: its path's bytes in hex (paths need not be UTF-8), after a marker line
/// (an extension module may print on import).
const PROBE_SCRIPT: &str = r#"
import importlib, importlib.machinery, os, sys, sysconfig
names = set()
for key in ('stdlib', 'platstdlib'):
    directory = os.path.join(sysconfig.get_path(key), 'lib-dynload')
    for entry in (os.listdir(directory) if os.path.isdir(directory) else []):
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if entry.endswith(suffix):
                names.add(entry[:-len(suffix)])
for name in sorted(names):
    try:
        importlib.import_module(name)
    except BaseException:
        pass
if sys.platform == 'darwin':
    import ctypes
    loader = ctypes.CDLL(None)
    loader._dyld_get_image_name.restype = ctypes.c_char_p
    paths = [loader._dyld_get_image_name(i) for i in range(loader._dyld_image_count())]
else:
    with open('/proc/self/maps', 'rb') as maps:
        paths = [line.split(None, 5)[5].rstrip(b'\n') for line in maps if len(line.split(None, 5)) == 6]
print('ptc-libraries')
for path in sorted({p for p in paths if p and p.startswith(b'/')}):
    print(path.hex())
"#;
const MARKER: &str = "ptc-libraries";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LibrariesError {
    #[error("could not run {interpreter} to list the libraries it loads: {why}")]
    Run { interpreter: String, why: String },
    #[error("{interpreter} did not list the libraries it loads: {why}")]
    Answer { interpreter: String, why: String },
}

/// The files `interpreter` maps once every standard extension module is imported, as the loader names them.
pub async fn loaded_by(interpreter: &Path) -> Result<Vec<PathBuf>, LibrariesError> {
    let name = interpreter.display().to_string();
    let run = Command::new(interpreter)
        .args(crate::python::isolated_args(PROBE_SCRIPT))
        .env_clear()
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(PROBE_TIMEOUT, run)
        .await
        .map_err(|_| LibrariesError::Run { interpreter: name.clone(), why: "no answer within 30s".into() })?
        .map_err(|e| LibrariesError::Run { interpreter: name.clone(), why: e.to_string() })?;
    parse(&output.stdout).ok_or_else(|| LibrariesError::Answer {
        interpreter: name,
        why: format!("{}: {}", output.status, String::from_utf8_lossy(&output.stderr).trim()),
    })
}

/// The paths after the marker line; `None` without the marker or with a line that is not hex.
fn parse(stdout: &[u8]) -> Option<Vec<PathBuf>> {
    use std::os::unix::ffi::OsStringExt;
    let text = std::str::from_utf8(stdout).ok()?;
    let (_, listed) = text.split_once(&format!("{MARKER}\n"))?;
    listed.lines().map(|line| hex(line).map(|bytes| PathBuf::from(std::ffi::OsString::from_vec(bytes)))).collect()
}

fn hex(line: &str) -> Option<Vec<u8>> {
    if !line.len().is_multiple_of(2) {
        return None;
    }
    (0..line.len()).step_by(2).map(|i| u8::from_str_radix(line.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_read_after_the_marker_whatever_the_bytes_of_the_paths() {
        let stdout = format!("noise from an import\n{MARKER}\n{}\n{}\n", hex_of(b"/usr/lib/a.so"), hex_of(b"/x/\xff"));
        let paths = parse(stdout.as_bytes()).unwrap();
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(paths[0], PathBuf::from("/usr/lib/a.so"));
        assert_eq!(paths[1].as_os_str().as_bytes(), b"/x/\xff");
        assert_eq!(parse(b"no marker\n"), None);
        assert_eq!(parse(format!("{MARKER}\nzz\n").as_bytes()), None);
    }

    fn hex_of(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[tokio::test]
    async fn this_machines_python_names_its_extension_modules_libraries() {
        let python = crate::python::resolve_python("python3").await.unwrap();
        let libraries = loaded_by(&python.executable).await.unwrap();
        // _ssl and _hashlib are extension modules everywhere but in a few static builds; whatever the build,
        // the C library itself is mapped.
        assert!(
            libraries
                .iter()
                .any(|l| l.to_string_lossy().contains("libc.so") || l.to_string_lossy().contains("libSystem")),
            "{libraries:?}"
        );
        assert!(libraries.iter().all(|l| l.is_absolute()));
    }
}
