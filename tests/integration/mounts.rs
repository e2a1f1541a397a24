//! `execution.mounts`: host folders a program sees as `./NAME` in its working directory, read-only unless
//! `writable` (enforced by every real sandbox; `none` only links them), what bounds writes to a writable one,
//! and the strict checks of the config. The escapes through them are in the escape suite (`escape::mounts`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::common::*;

/// A host folder for a test, readable and writable by everyone: under a root server programs run as nobody,
/// and only the sandbox may stand between a program and the folder.
fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o777)).unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, PermissionsExt::from_mode(0o666)).unwrap();
    }
    dir
}

fn real(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap()
}

/// A server whose programs see `data` read-only and `out` writable (and the `execution` keys in `extra`).
async fn ptc(data: &Path, out: &Path, extra: &str) -> Option<Ptc> {
    let execution = format!(
        "  mounts:\n    data: {{path: {}}}\n    out: {{path: {}, writable: true}}\n{extra}",
        data.display(),
        out.display()
    );
    let ptc = Ptc::start(&config(&[], &execution)).await;
    require_backend(&ptc).await.map(|()| ptc)
}

#[apply(integration_test!)]
async fn a_folder_appears_as_its_name_in_the_working_directory_and_only_a_writable_one_takes_writes() {
    let data = folder(&[("rows.csv", "day,temp\nMon,21\n")]);
    let out = folder(&[]);
    let Some(ptc) = ptc(data.path(), out.path(), "").await else { return };
    let code = r#"
import csv, errno, os
print(sorted(os.listdir('.')))
print(list(csv.DictReader(open('data/rows.csv'))))
with open('out/report.txt', 'w') as f:
    f.write('21 degrees')
try:
    open('data/new.txt', 'w').write('x')
    print('data: written')
except OSError as e:
    # A read-only mount (EROFS), or Landlock's rule for it where there is no mount (degraded: EACCES).
    print('data:', 'refused' if e.errno in (errno.EROFS, errno.EACCES) else errno.errorcode[e.errno])
"#;
    let printed = ptc.execute(code).await.expect_output();
    let data_write = if sandbox_under_test() == "none" {
        // `none` only links the folder: nothing keeps a program from writing there.
        "data: written"
    } else {
        "data: refused"
    };
    assert_eq!(printed, format!("['data', 'out']\n[{{'day': 'Mon', 'temp': '21'}}]\n{data_write}\n"));
    assert_eq!(std::fs::read_to_string(out.path().join("report.txt")).unwrap(), "21 degrees");
    let data_files: Vec<_> = std::fs::read_dir(data.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    if sandbox_under_test() != "none" {
        assert_eq!(data_files, ["rows.csv"], "nothing new in the read-only folder");
    }
}

#[apply(integration_test!)]
async fn what_a_run_writes_in_a_writable_folder_is_there_for_the_next_run_and_the_host() {
    let (data, out) = (folder(&[]), folder(&[]));
    let Some(ptc) = ptc(data.path(), out.path(), "").await else { return };
    ptc.execute("import os\nos.makedirs('out/a/b')\nopen('out/a/b/n.txt', 'w').write('1')").await.expect_ok();
    let second = ptc.execute("n = int(open('out/a/b/n.txt').read())\nopen('out/a/b/n.txt', 'w').write(str(n + 1))");
    second.await.expect_ok();
    assert_eq!(std::fs::read_to_string(out.path().join("a/b/n.txt")).unwrap(), "2");
    // The run's own files go with its scratch directory; the folder's stay.
    let printed = ptc
        .execute("import os\nopen('mine.txt', 'w').write('x')\nprint(sorted(os.listdir('.')))")
        .await
        .expect_output();
    assert_eq!(printed, "['data', 'mine.txt', 'out']\n");
    assert_eq!(ptc.execute("import os\nprint(sorted(os.listdir('.')))").await.expect_output(), "['data', 'out']\n");
}

#[apply(integration_test!)]
async fn writes_to_a_writable_folder_are_bounded_by_the_file_size_limit_not_by_scratch() {
    let (data, out) = (folder(&[]), folder(&[]));
    let limits = "  limits:\n    scratch_mb: 1\n    file_size_mb: 2\n";
    let Some(ptc) = ptc(data.path(), out.path(), limits).await else { return };
    let code = r#"
import errno
def write(path, mib):
    try:
        with open(path, 'wb') as f:
            for _ in range(mib):
                f.write(b'x' * (1 << 20))
        return 'written'
    except OSError as e:
        return errno.errorcode[e.errno]
print('out, 3 files of 1 MiB:', write('out/a', 1), write('out/b', 1), write('out/c', 1))
print('out, 3 MiB:', write('out/big', 3))
"#;
    assert_eq!(
        ptc.execute(code).await.expect_output(),
        "out, 3 files of 1 MiB: written written written\nout, 3 MiB: EFBIG\n"
    );
    let size = |name: &str| std::fs::metadata(out.path().join(name)).unwrap().len();
    assert_eq!([size("a"), size("b"), size("c"), size("big")], [1 << 20, 1 << 20, 1 << 20, 2 << 20]);
}

#[apply(integration_test!)]
async fn a_folder_that_is_missing_or_no_folder_or_named_badly_is_a_config_error_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), "").unwrap();
    let root = real(dir.path());
    let cases = [
        (
            format!("data: {{path: {}/missing}}", root.display()),
            format!("execution.mounts.data.path: cannot use '{}/missing': No such file or directory", root.display()),
        ),
        (
            format!("data: {{path: {}/file}}", root.display()),
            format!(
                "execution.mounts.data.path: '{}/file' is not a directory (a mount shows a folder)",
                root.display()
            ),
        ),
        (
            "data: {path: relative/dir}".to_string(),
            "execution.mounts.data.path: must be an absolute path (after ${VAR} expansion), got 'relative/dir'"
                .to_string(),
        ),
        (format!("../up: {{path: {}}}", root.display()), "execution.mounts.'../up' is not a plain name".to_string()),
        (
            "data: {path: \"${PTC_TEST_NO_SUCH_VARIABLE}/x\"}".to_string(),
            "execution.mounts.data.path: environment variable PTC_TEST_NO_SUCH_VARIABLE is not set".to_string(),
        ),
        (
            format!("data: {{path: {}, mode: rw}}", root.display()),
            "execution.mounts.data.mode: unknown field `mode`, expected `path` or `writable`".into(),
        ),
    ];
    for (mount, expected) in cases {
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, format!("execution:\n  sandbox: none\n  mounts:\n    {mount}\n")).unwrap();
        let output = std::process::Command::new(binary()).arg("check").arg("--config").arg(&config).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{mount}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(&expected), "{mount}: expected {expected:?} in {stderr:?}");
    }
}

#[apply(integration_test!)]
async fn a_folder_path_may_name_environment_variables() {
    let (data, out) = (folder(&[("hello.txt", "hi")]), folder(&[]));
    let execution = format!(
        "  mounts:\n    data: {{path: \"${{PTC_TEST_DATA}}\"}}\n    out: {{path: \"${{PTC_TEST_UNSET:-{}}}\", writable: true}}\n",
        out.path().display()
    );
    let ptc = Ptc::start_with_env(&config(&[], &execution), &[("PTC_TEST_DATA", data.path().to_str().unwrap())]).await;
    if require_backend(&ptc).await.is_none() {
        return;
    }
    let printed =
        ptc.execute("print(open('data/hello.txt').read())\nopen('out/o', 'w').write('o')").await.expect_output();
    assert_eq!(printed, "hi\n");
    assert!(out.path().join("o").exists());
}

#[apply(integration_test!)]
async fn a_file_of_a_folder_can_be_attached_by_its_path_in_the_working_directory() {
    let (data, out) = (folder(&[("rows.csv", "day,temp\nMon,21\n")]), folder(&[]));
    let Some(ptc) = ptc(data.path(), out.path(), "").await else { return };
    let run = ptc.execute("open('out/sum.txt', 'w').write('21')\nattach('data/rows.csv')\nattach('out/sum.txt')").await;
    assert_eq!(
        run.expect_ok(),
        "[Script executed successfully]\n(no output)\n[attached: file data/rows.csv (text/csv), file out/sum.txt (text/plain)]"
    );
    let uris: Vec<String> = run
        .0
        .content
        .iter()
        .filter_map(|block| match block {
            rmcp::model::ContentBlock::Resource(embedded) => match &embedded.resource {
                rmcp::model::ResourceContents::TextResourceContents { uri, text, .. } => {
                    Some(format!("{uri} {text:?}"))
                }
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(
        uris,
        ["ptc-mcp://attachments/data/rows.csv \"day,temp\\nMon,21\\n\"", "ptc-mcp://attachments/out/sum.txt \"21\""]
    );
}
