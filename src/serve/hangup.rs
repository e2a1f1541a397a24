//! SIGHUP: the audit file is reopened (log rotation) and the config read again from where it was found. A
//! serving ptc-mcp applies its config only at start, so a config that changed is named with what changed
//! and "restart ptc-mcp to apply it", and one that cannot be read says why; either way the config in force
//! stays, and the server goes on serving (the signal's default action would end it).

use std::sync::Arc;

use crate::audit::AuditLog;
use crate::config::{Config, ConfigSource};

/// Listens for SIGHUP for as long as the process runs.
pub fn listen(audit: Option<Arc<AuditLog>>, source: ConfigSource, in_force: Config) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: the audit file will not be reopened after rotation");
        return;
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            if let Some(audit) = &audit {
                audit.reopen();
            }
            // Reading may touch a slow disk; the runtime thread serves the runs meanwhile.
            let source = source.clone();
            let read = tokio::task::spawn_blocking(move || reread(&source)).await;
            match read.unwrap_or_else(|panic| std::panic::resume_unwind(panic.into_panic())) {
                Err(error) => tracing::warn!(
                    "SIGHUP: the config cannot be used ({error}); the config read at start stays in force"
                ),
                Ok((config, source)) => match changes(&in_force, &config) {
                    changed if changed.is_empty() => {
                        tracing::info!("SIGHUP: the config ({}) is as it was at start", source.describe())
                    }
                    changed => tracing::warn!(
                        "SIGHUP: the config ({}) changed: {}; restart ptc-mcp to apply it (it reads its config \
                         once, at start)",
                        source.describe(),
                        changed.join("; ")
                    ),
                },
            }
        }
    });
}

/// The config as `source` holds it now (a server that started with no config file looks for one as at start).
fn reread(source: &ConfigSource) -> Result<(Config, ConfigSource), crate::config::ConfigError> {
    match source {
        ConfigSource::File(path) => Config::load(Some(path)),
        ConfigSource::Defaults => Config::load(None),
    }
}

/// What differs from `old` in `new`, in words: servers added, removed or changed (by name), then the other
/// sections that changed. Never a value (a header or a token may be a secret).
fn changes(old: &Config, new: &Config) -> Vec<String> {
    let names = |config: &Config| config.servers.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    let (old_names, new_names) = (names(old), names(new));
    let find = |config: &Config, name: &str| config.servers.iter().find(|s| s.name == name).cloned();
    let mut out = Vec::new();
    let mut list = |what: &str, servers: Vec<&String>| {
        if !servers.is_empty() {
            let quoted: Vec<String> = servers.iter().map(|name| format!("'{name}'")).collect();
            out.push(format!("servers {what}: {}", quoted.join(", ")));
        }
    };
    list("added", new_names.iter().filter(|name| !old_names.contains(name)).collect());
    list("removed", old_names.iter().filter(|name| !new_names.contains(name)).collect());
    list(
        "changed",
        old_names.iter().filter(|name| new_names.contains(name) && find(old, name) != find(new, name)).collect(),
    );
    let sections = [
        ("tools", old.tools != new.tools),
        ("execution", old.execution != new.execution),
        ("serve", old.serve != new.serve),
        ("logging", old.logging != new.logging),
    ];
    out.extend(sections.iter().filter(|(_, changed)| *changed).map(|(name, _)| format!("section '{name}'")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Config {
        Config::parse(text, &|name| (name == "KEY").then(|| "s3cret".to_string())).unwrap()
    }

    #[test]
    fn changes_name_servers_and_sections_never_values() {
        let old = parse(
            "servers:\n  - name: a\n    command: x\n  - name: b\n    command: y\n    env: {K: '${KEY}'}\n\
             execution:\n  timeout_seconds: 5\n",
        );
        assert_eq!(changes(&old, &old.clone()), Vec::<String>::new());
        let new = parse(
            "servers:\n  - name: b\n    command: y\n    env: {K: other}\n  - name: c\n    command: z\n\
             execution:\n  timeout_seconds: 5\ntools:\n  block: ['mcp__b__*']\n",
        );
        let changed = changes(&old, &new);
        assert_eq!(
            changed,
            ["servers added: 'c'", "servers removed: 'a'", "servers changed: 'b'", "section 'tools'"],
            "{changed:?}"
        );
        assert!(!changed.join(" ").contains("s3cret"));
        let reordered = parse(
            "execution:\n  timeout_seconds: 5\nservers:\n  - name: b\n    command: y\n    env: {K: '${KEY}'}\n  \
             - name: a\n    command: x\n",
        );
        assert_eq!(changes(&old, &reordered), Vec::<String>::new(), "the order of servers is not a change");
    }
}
