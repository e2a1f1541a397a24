//! Escapes through `execution.mounts`: a read-only folder `./ro` and a writable one `./rw`, beside a file
//! `secret.txt` outside both, in a host directory of the test's. Nothing outside a folder may be reachable
//! through it (`..`, symlinks inside it that lead out, symlinks a program plants, hard links and renames across
//! it, binds), and nothing in the read-only one may change. Under `none` a mount is a plain symlink: every
//! attempt gets through there (and says so). A hard link the folder already holds is the file itself, in the
//! folder as much as anywhere: no attempt here; the README says so.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{EXECUTION, Expect, Outcome, UnderNone, attempt_in};
use crate::common::*;

/// The secret's text: a read that returns it is an escape.
const SECRET: &str = "ptc-mount-secret";

/// The host side: `ro/` (with `inside.txt` and symlinks `rel_out -> ../secret.txt`, `abs_out -> <secret>`),
/// `rw/` (with `f.txt`) and `secret.txt`, readable and writable by everyone, so that only the sandbox
/// stands between a program and them (under a root server programs run as nobody).
struct Folders {
    dir: tempfile::TempDir,
}

impl Folders {
    fn new() -> Folders {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mode = |path: &Path, mode: u32| std::fs::set_permissions(path, PermissionsExt::from_mode(mode)).unwrap();
        mode(root, 0o755);
        std::fs::create_dir(root.join("ro")).unwrap();
        std::fs::create_dir(root.join("rw")).unwrap();
        mode(&root.join("ro"), 0o777);
        mode(&root.join("rw"), 0o777);
        for (file, text, bits) in
            [("secret.txt", SECRET, 0o644), ("ro/inside.txt", "inside", 0o666), ("rw/f.txt", "f", 0o666)]
        {
            std::fs::write(root.join(file), text).unwrap();
            mode(&root.join(file), bits);
        }
        std::os::unix::fs::symlink("../secret.txt", root.join("ro/rel_out")).unwrap();
        std::os::unix::fs::symlink(root.join("secret.txt"), root.join("ro/abs_out")).unwrap();
        Folders { dir }
    }

    fn root(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).unwrap()
    }

    fn execution(&self) -> String {
        let root = self.root();
        format!(
            "{EXECUTION}  mounts:\n    ro: {{path: {}}}\n    rw: {{path: {}, writable: true}}\n",
            root.join("ro").display(),
            root.join("rw").display()
        )
    }

    /// Every entry of the host side: its kind, mode and content (or target).
    fn snapshot(&self) -> BTreeMap<String, String> {
        fn walk(dir: &Path, root: &Path, into: &mut BTreeMap<String, String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let name = path.strip_prefix(root).unwrap().display().to_string();
                let mode = meta.permissions().mode();
                let what = if meta.file_type().is_symlink() {
                    format!("link {}", std::fs::read_link(&path).unwrap().display())
                } else if meta.is_dir() {
                    walk(&path, root, into);
                    "dir".to_string()
                } else {
                    format!("file {:?}", std::fs::read(&path).unwrap())
                };
                into.insert(name, format!("{mode:o} {what}"));
            }
        }
        let mut entries = BTreeMap::new();
        walk(&self.root(), &self.root(), &mut entries);
        entries
    }
}

/// Runs one attempt with the two folders mounted (`ROOT` and `SECRET` in `code` are the host paths); with
/// `evidence`, the host side must be unchanged when it is blocked and changed when it escaped.
async fn mount_attempt(name: &str, expect: impl Into<Expect>, code: &str, evidence: bool) {
    let folders = Folders::new();
    let ptc = Ptc::start(&config(&[], &folders.execution())).await;
    let root = folders.root();
    let code = code
        .replace("ROOT", &format!("{:?}", root.display().to_string()))
        .replace("SECRET", &format!("{:?}", root.join("secret.txt").display().to_string()));
    let before = folders.snapshot();
    let outcome = attempt_in(&ptc, name, expect.into(), &format!("{SECRET_CHECK}\n{code}")).await;
    let after = folders.snapshot();
    match outcome {
        Some(Outcome::Blocked) => assert_eq!(after, before, "{name}: blocked, but the host folders changed"),
        Some(Outcome::Escaped) if evidence => assert_ne!(after, before, "{name}: escaped, but nothing changed"),
        _ => {}
    }
}

/// One test per attempt: `mount_attempt!(name, under none: Expectation [evidence], "python code")`; with
/// `[evidence]` the attempt changes the host side when it gets through, and must leave it as it was otherwise.
macro_rules! mount_attempt {
    ($(#[$doc:meta])* $name:ident, under none: $none:ident [evidence], $code:expr) => {
        mount_attempt!(@test $(#[$doc])* $name, $none, true, $code);
    };
    ($(#[$doc:meta])* $name:ident, under none: $none:ident, $code:expr) => {
        mount_attempt!(@test $(#[$doc])* $name, $none, false, $code);
    };
    (@test $(#[$doc:meta])* $name:ident, $none:ident, $evidence:literal, $code:expr) => {
        $(#[$doc])*
        #[apply(integration_test!)]
        async fn $name() {
            mount_attempt(stringify!($name), UnderNone::$none, $code, $evidence).await;
        }
    };
}

/// `secret(path)`: what `path` reads, if it is the secret (else `Blocked`).
const SECRET_CHECK: &str = r#"
def secret(path):
    with open(path) as f:
        data = f.read()
    if data != 'ptc-mount-secret':
        raise Blocked(f'{path} holds something else')
    return f'read the secret through {path}'
"#;

mount_attempt!(
    dot_dot_out_of_a_mount_reaches_nothing_beside_its_folder, under none: Escapes, r#"
probe(secret, 'ro/../secret.txt', 'rw/../secret.txt', 'ro/' + '../' * 16 + SECRET.lstrip('/'), SECRET)
"#
);

mount_attempt!(
    a_symlink_in_a_folder_that_leads_out_of_it_leads_nowhere, under none: Escapes, "probe(secret, 'ro/rel_out', 'ro/abs_out')"
);

mount_attempt!(
    a_symlink_a_program_plants_in_a_writable_folder_leads_nowhere, under none: Escapes, r#"
def planted(target):
    link = f'rw/planted-{os.getpid()}'
    os.symlink(target, link)
    try:
        return secret(link)
    finally:
        os.remove(link)
probe(planted, SECRET, '../secret.txt')
"#
);

mount_attempt!(
    /// The first change that works leaves its mark (an escape must change the host side).
    /// (Times are not in the evidence: an escape by utime alone would still be seen as one by the probe.)
    nothing_in_a_read_only_folder_can_change, under none: Escapes [evidence], r#"
def append(): open('ro/inside.txt', 'a').write('escaped'); return 'appended to ro/inside.txt'
def create(): open('ro/new.txt', 'x').write('escaped'); return 'created ro/new.txt'
def remove(): os.remove('ro/inside.txt'); return 'removed ro/inside.txt'
def rename(): os.rename('ro/inside.txt', 'ro/renamed.txt'); return 'renamed ro/inside.txt'
def chmod(): os.chmod('ro/inside.txt', 0o600); return 'changed the mode of ro/inside.txt'
def utime(): os.utime('ro/inside.txt', (0, 0)); return 'changed the times of ro/inside.txt'
def mkdir(): os.mkdir('ro/d'); return 'made ro/d'
def symlink(): os.symlink('x', 'ro/l'); return 'made ro/l'
CHANGES = {f.__name__: f for f in (append, create, remove, rename, chmod, utime, mkdir, symlink)}
def change(name):
    return CHANGES[name]()
probe(change, *CHANGES)
"#
);

mount_attempt!(
    a_read_only_file_cannot_be_hard_linked_to_a_writable_place, under none: Escapes [evidence], r#"
def link_and_write(destination):
    os.link('ro/inside.txt', destination)
    with open(destination, 'a') as f:
        f.write('escaped')
    return f'linked ro/inside.txt to {destination} and wrote through it'
probe(link_and_write, 'rw/linked', 'linked')
"#
);

mount_attempt!(
    a_file_cannot_be_renamed_out_of_a_writable_folder, under none: Escapes [evidence], r#"
def move_out(destination):
    os.rename('rw/f.txt', destination)
    return f'moved rw/f.txt to {destination}'
probe(move_out, 'rw/../moved.txt', ROOT + '/moved.txt')
"#
);

mount_attempt!(
    /// mount(2) with MS_BIND (4096) of ./ro onto a scratch directory, then a write through it; unmounted after.
    a_read_only_folder_cannot_be_bound_again_writable, under none: EscapesAsRoot, r#"
def bind_and_write():
    os.mkdir('b')
    syscall(165, b'ro', b'b', None, 4096, None)
    try:
        open('b/bound.txt', 'x').write('escaped')
        os.remove('b/bound.txt')
        return 'bound ./ro at ./b and wrote in it'
    finally:
        syscall(166, b'b', 2)
probe(bind_and_write, strict=True)
"#
);
