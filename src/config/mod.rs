//! The YAML configuration: where it is found, its keys and defaults (those of the original ptc-mcp plus a
//! few additions), and strict validation whose errors name the key and say what is expected.

mod auth;
mod budget;
mod error;
mod expand;
mod logging;
mod mounts;
#[cfg(test)]
mod properties;
mod serve;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use globset::{Glob, GlobSet, GlobSetBuilder};
pub use ptc_backends::{DockerSettings, KubernetesSettings, Limits, Mount, Packages, SandboxKind};
use serde::Deserialize;

use crate::naming::identifier_part;
pub use auth::{AuthConfig, AuthConfigError, ClientCredentials, OAuthClient, OAuthConfig};
pub use error::{BadSeconds, ConfigError, InvalidConfig};
pub use expand::ExpandError;
pub use logging::{LoggingConfig, LoggingError};
pub use mounts::{MountConfig, MountError};
pub use serve::{HttpConfig, HttpConfigError, Origin, Secret, ServeConfig};

/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "PTC_MCP_CONFIG";
/// Looked for in the working directory when neither `--config` nor the variable is given.
pub const DEFAULT_CONFIG_FILE: &str = "config.yaml";

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub servers: Vec<ServerConfig>,
    #[serde(default)]
    pub tools: ToolsConfig,
    #[serde(default)]
    pub execution: ExecutionConfig,
    #[serde(default)]
    pub serve: ServeConfig,
    #[serde(default)]
    pub logging: LoggingConfig,
    #[serde(default)]
    pub oauth: OAuthConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    #[default]
    Stdio,
    Http,
    Sse,
}

impl TransportKind {
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Stdio => "stdio",
            TransportKind::Http => "http",
            TransportKind::Sse => "sse",
        }
    }
}

/// One downstream MCP server.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub name: String,
    #[serde(default)]
    pub transport: TransportKind,
    /// `stdio`: the program to start, and its arguments.
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// `stdio`: extra environment of the server process (it gets only these plus a minimal safe set and the
    /// proxy and CA variables, which these override).
    #[serde(default)]
    pub env: BTreeMap<String, Scalar>,
    /// `http` / `sse`: the endpoint, and extra request headers (e.g. `Authorization`).
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, Scalar>,
    /// `http` / `sse`: how the bearer token is obtained (OAuth), instead of a static `Authorization` header.
    pub auth: Option<AuthConfig>,
    /// How long the server may take to start: to answer its first message, finish the handshake and list
    /// its tools.
    #[serde(default = "default_connect_timeout_seconds")]
    pub connect_timeout_seconds: f64,
}

fn default_connect_timeout_seconds() -> f64 {
    60.0
}

/// A YAML scalar taken as text, so `PORT: 8080` works as well as `PORT: "8080"`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    Text(String),
    Integer(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    pub fn as_text(&self) -> String {
        match self {
            Scalar::Text(text) => text.clone(),
            Scalar::Integer(n) => n.to_string(),
            Scalar::Float(x) => x.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    /// Glob patterns on namespaced names; only matching tools are callable.
    pub allow: Option<Vec<String>>,
    /// Glob patterns on namespaced names; matching tools are hidden.
    pub block: Option<Vec<String>>,
    /// Glob patterns on namespaced names; a program's call to a matching tool waits for the user's approval.
    pub confirm: Vec<String>,
    /// How long a call waits for that approval.
    pub confirm_timeout_seconds: f64,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig { allow: None, block: None, confirm: Vec::new(), confirm_timeout_seconds: 300.0 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TraceMode {
    #[default]
    Summary,
    Off,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutionConfig {
    pub timeout_seconds: f64,
    pub max_output_bytes: usize,
    pub sandbox: SandboxKind,
    /// Interpreter for the host backends: a name looked up on PATH, or a path.
    pub python: String,
    pub max_tool_calls: usize,
    pub max_concurrent_calls: usize,
    pub tool_call_timeout_seconds: f64,
    pub trace: TraceMode,
    pub max_tool_result_bytes: usize,
    pub limits: Limits,
    /// The fewest runners kept started and ready for the next programs (more after a burst); 0: no pool.
    pub pool_size: usize,
    /// `none` and `landlock`: fork new runners from one warm interpreter (a zygote), each confined on its
    /// own, instead of starting a fresh interpreter for each.
    pub zygote: bool,
    /// The `docker` backend: engine, image and container limits.
    pub docker: DockerSettings,
    /// The `kubernetes` backend: namespace, pod template or warm pool, runtime class, kubeconfig.
    pub kubernetes: KubernetesSettings,
    /// Run programs in the landlock sandbox's degraded mode (no user namespaces: programs can learn which host
    /// files exist). Off: such a machine refuses programs and says why.
    pub allow_degraded: bool,
    /// Check the program's tool calls before it runs (unknown tools and arguments, literal values, calls
    /// never awaited); any finding and nothing runs.
    pub precheck: bool,
    /// How many image/audio blocks (`show()`) and files (`attach()`) one result may carry, and their total
    /// size (base64 text; a text file's text).
    pub max_attachments: usize,
    pub max_attachment_bytes: usize,
    /// The time limit of a program run as a task (2026-07-28 clients with the tasks extension), in place of
    /// `timeout_seconds`.
    pub task_timeout_seconds: f64,
    /// How long a finished task's result is kept for its client.
    pub task_ttl_seconds: f64,
    /// Tasks one client may have at once, running or finished and kept; 0: programs never run as tasks.
    pub max_tasks_per_client: usize,
    /// Host folders programs see as `./NAME` in their working directory, read-only unless writable.
    pub mounts: BTreeMap<String, MountConfig>,
    /// Programs see the installed packages of `python` (read-only).
    pub site_packages: bool,
    /// Modules runners import before their program arrives.
    pub preload: Vec<String>,
    /// Named sessions: runners kept alive between the runs of one client.
    pub sessions: SessionsConfig,
}

/// `execution.sessions`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// Live sessions at once, over every client; 0 turns sessions off.
    pub max: usize,
    /// A session no run used for this long ends.
    pub idle_timeout_seconds: f64,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig { max: 8, idle_timeout_seconds: 900.0 }
    }
}

impl SessionsConfig {
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.idle_timeout_seconds)
    }
}

impl Default for ExecutionConfig {
    fn default() -> Self {
        ExecutionConfig {
            timeout_seconds: 120.0,
            max_output_bytes: 65536,
            sandbox: SandboxKind::Auto,
            python: "python3".to_string(),
            max_tool_calls: 100,
            max_concurrent_calls: 8,
            tool_call_timeout_seconds: 60.0,
            trace: TraceMode::Summary,
            max_tool_result_bytes: 64 * 1024 * 1024,
            limits: Limits::default(),
            pool_size: 2,
            zygote: true,
            docker: DockerSettings::default(),
            kubernetes: KubernetesSettings::default(),
            allow_degraded: false,
            precheck: true,
            max_attachments: 4,
            max_attachment_bytes: 10 * 1024 * 1024,
            task_timeout_seconds: 3600.0,
            task_ttl_seconds: 3600.0,
            max_tasks_per_client: 16,
            mounts: BTreeMap::new(),
            site_packages: false,
            preload: Vec::new(),
            sessions: SessionsConfig::default(),
        }
    }
}

impl ExecutionConfig {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_seconds)
    }

    pub fn tool_call_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.tool_call_timeout_seconds)
    }

    pub fn task_ttl(&self) -> Duration {
        Duration::from_secs_f64(self.task_ttl_seconds)
    }

    /// `mounts` as the backends take them.
    pub fn backend_mounts(&self) -> Vec<Mount> {
        self.mounts
            .iter()
            .map(|(name, mount)| Mount { name: name.clone(), path: mount.path.clone(), writable: mount.writable })
            .collect()
    }

    /// `site_packages` and `preload` as the backends take them.
    pub fn packages(&self) -> Packages {
        Packages { site_packages: self.site_packages, preload: self.preload.clone() }
    }
}

/// Where the config came from, for the start-up log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    File(PathBuf),
    /// No `--config`, no `$PTC_MCP_CONFIG` and no `./config.yaml`: the empty config.
    Defaults,
}

impl ConfigSource {
    /// Where the config came from, in words.
    pub fn describe(&self) -> String {
        match self {
            ConfigSource::File(path) => path.display().to_string(),
            ConfigSource::Defaults => format!("none found (no --config, ${CONFIG_ENV} or ./{DEFAULT_CONFIG_FILE})"),
        }
    }
}

impl Config {
    /// Loads the config: `explicit` (from `--config`), else `$PTC_MCP_CONFIG`, else `./config.yaml`. Only the
    /// last may be missing (then the defaults apply); a named file that does not exist is an error.
    pub fn load(explicit: Option<&Path>) -> Result<(Config, ConfigSource), ConfigError> {
        let named = explicit.map(Path::to_path_buf).or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from));
        let path = match named {
            Some(path) => path,
            None if Path::new(DEFAULT_CONFIG_FILE).exists() => PathBuf::from(DEFAULT_CONFIG_FILE),
            None => return Ok((Config::default(), ConfigSource::Defaults)),
        };
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
        let lookup = |name: &str| std::env::var(name).ok();
        let config = Config::parse(&text, &lookup)
            .map_err(|problem| ConfigError::Invalid { path: path.display().to_string(), problem: Box::new(problem) })?;
        Ok((config, ConfigSource::File(path)))
    }

    /// Parses and validates config text, expanding `${VAR}` with `lookup`. The error shows as one line that
    /// names the key.
    pub fn parse(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Config, InvalidConfig> {
        budget::check(text).map_err(InvalidConfig::Document)?;
        let document: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).map_err(InvalidConfig::Document)?;
        if document.is_null() {
            return Ok(Config::default());
        }
        let mut config: Config = serde_path_to_error::deserialize(document).map_err(|e| {
            let path = e.path().to_string();
            let source = e.into_inner();
            if path == "." { InvalidConfig::Document(source) } else { InvalidConfig::Value { path, source } }
        })?;
        config.validate()?;
        config.expand_variables(lookup)?;
        for (i, server) in config.servers.iter().enumerate() {
            server.validate_remote(&format!("servers[{i}] ('{}')", server.name))?;
        }
        Ok(config)
    }

    fn validate(&self) -> Result<(), InvalidConfig> {
        let mut seen: BTreeMap<String, &str> = BTreeMap::new();
        for (i, server) in self.servers.iter().enumerate() {
            let key = format!("servers[{i}]");
            server.validate(&key)?;
            let prefix = identifier_part(&server.name);
            if let Some(other) = seen.insert(prefix.clone(), &server.name) {
                return Err(InvalidConfig::SamePrefix {
                    key,
                    name: server.name.clone(),
                    other: other.to_string(),
                    prefix,
                });
            }
        }
        if self.tools.allow.is_some() && self.tools.block.is_some() {
            return Err(InvalidConfig::AllowAndBlock);
        }
        self.tools.filter()?;
        self.tools.confirm_set()?;
        check_seconds("tools.confirm_timeout_seconds", self.tools.confirm_timeout_seconds)?;
        self.execution.validate()?;
        self.serve.http.validate()?;
        Ok(self.logging.validate()?)
    }

    fn expand_variables(&mut self, lookup: &dyn Fn(&str) -> Option<String>) -> Result<(), InvalidConfig> {
        self.serve.http.expand_token(lookup)?;
        mounts::resolve_paths(&mut self.execution.mounts, lookup)?;
        for (i, server) in self.servers.iter_mut().enumerate() {
            let name = server.name.clone();
            let expand_one = |key: &str, text: &str| {
                expand::expand(text, lookup).map_err(|source| InvalidConfig::Variable {
                    server: name.clone(),
                    key: key.to_string(),
                    source,
                })
            };
            if let Some(command) = &server.command {
                server.command = Some(expand_one("command", command)?);
            }
            for arg in &mut server.args {
                *arg = expand_one("args", arg)?;
            }
            if let Some(url) = &server.url {
                server.url = Some(expand_one("url", url)?);
            }
            for (key, value) in server.env.iter_mut().chain(server.headers.iter_mut()) {
                *value = Scalar::Text(expand_one(key, &value.as_text())?);
            }
            if let Some(auth) = &mut server.auth {
                auth.expand(lookup)
                    .map_err(|source| InvalidConfig::Auth { key: format!("servers[{i}] ('{name}')"), source })?;
            }
        }
        if let Some(path) = &self.oauth.token_store {
            let text = path.to_string_lossy();
            let mut expanded = expand::expand(&text, lookup).map_err(InvalidConfig::TokenStoreVariable)?;
            if let Some(rest) = expanded.strip_prefix("~/") {
                let home =
                    lookup("HOME").ok_or(InvalidConfig::TokenStoreVariable(ExpandError::Unset("HOME".into())))?;
                expanded = format!("{home}/{rest}");
            }
            if expanded.is_empty() {
                return Err(InvalidConfig::EmptyTokenStore);
            }
            self.oauth.token_store = Some(PathBuf::from(expanded));
        }
        Ok(())
    }
}

impl ServerConfig {
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.connect_timeout_seconds)
    }

    fn validate(&self, key: &str) -> Result<(), InvalidConfig> {
        if self.name.trim().is_empty() {
            return Err(InvalidConfig::EmptyName { key: key.to_string() });
        }
        let key = format!("{key} ('{}')", self.name);
        check_seconds(&format!("{key}.connect_timeout_seconds"), self.connect_timeout_seconds)?;
        let transport = self.transport.name();
        match self.transport {
            TransportKind::Stdio => {
                if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    return Err(InvalidConfig::Required { key, field: "command", transport });
                }
                let remote_only =
                    [("url", self.url.is_some()), ("headers", !self.headers.is_empty()), ("auth", self.auth.is_some())];
                for (field, set) in remote_only {
                    if set {
                        return Err(InvalidConfig::OnlyRemote { key, field, transport });
                    }
                }
            }
            TransportKind::Http | TransportKind::Sse => {
                if self.url.as_deref().is_none_or(|u| u.trim().is_empty()) {
                    return Err(InvalidConfig::Required { key, field: "url", transport });
                }
                for (field, set) in [
                    ("command", self.command.is_some()),
                    ("args", !self.args.is_empty()),
                    ("env", !self.env.is_empty()),
                ] {
                    if set {
                        return Err(InvalidConfig::OnlyStdio { key, field, transport });
                    }
                }
                if let Some(auth) = &self.auth {
                    auth.validate().map_err(|source| InvalidConfig::Auth { key: key.clone(), source })?;
                    if self.headers.keys().any(|name| name.eq_ignore_ascii_case("authorization")) {
                        return Err(InvalidConfig::Auth { key, source: AuthConfigError::WithAuthorizationHeader });
                    }
                }
            }
        }
        Ok(())
    }
}

/// Headers the HTTP transports set themselves; a configured value would break the protocol.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-protocol-version",
    "mcp-session-id",
    "transfer-encoding",
];

impl ServerConfig {
    /// Checks `url` and `headers` of an `http`/`sse` server once variables are expanded. Errors name the
    /// header, never its value (it is usually a secret).
    fn validate_remote(&self, key: &str) -> Result<(), InvalidConfig> {
        let Some(url) = &self.url else { return Ok(()) };
        match reqwest::Url::parse(url) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.has_host() => {}
            Ok(_) => return Err(InvalidConfig::UrlScheme { key: key.to_string() }),
            Err(source) => return Err(InvalidConfig::Url { key: key.to_string(), source }),
        }
        for (name, value) in &self.headers {
            let (key, name) = (key.to_string(), name.clone());
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(InvalidConfig::HeaderName { key, name });
            }
            if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                return Err(InvalidConfig::ReservedHeader { key, name });
            }
            if reqwest::header::HeaderValue::from_str(&value.as_text()).is_err() {
                return Err(InvalidConfig::HeaderValue { key, name });
            }
        }
        Ok(())
    }
}

/// Which namespaced tools are callable, from `tools.allow` / `tools.block`.
#[derive(Debug, Clone)]
pub enum ToolFilter {
    All,
    Allow(GlobSet),
    Block(GlobSet),
}

impl ToolFilter {
    pub fn permits(&self, namespaced: &str) -> bool {
        self.refusal(namespaced).is_none()
    }

    /// Why the filter hides a tool, in words for the program that names it; `None` when it is callable.
    pub fn refusal(&self, namespaced: &str) -> Option<&'static str> {
        match self {
            ToolFilter::All => None,
            ToolFilter::Allow(set) => (!set.is_match(namespaced)).then_some("it is not in tools.allow"),
            ToolFilter::Block(set) => set.is_match(namespaced).then_some("it is blocked by tools.block"),
        }
    }
}

impl ToolsConfig {
    /// The tools whose calls need the user's approval (`tools.confirm`).
    pub fn confirm_set(&self) -> Result<GlobSet, InvalidConfig> {
        globs("confirm", &self.confirm)
    }

    pub fn confirm_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.confirm_timeout_seconds)
    }

    pub fn filter(&self) -> Result<ToolFilter, InvalidConfig> {
        match (&self.allow, &self.block) {
            (Some(allow), _) => Ok(ToolFilter::Allow(globs("allow", allow)?)),
            (None, Some(block)) => Ok(ToolFilter::Block(globs("block", block)?)),
            (None, None) => Ok(ToolFilter::All),
        }
    }
}

/// The glob patterns under `tools.<key>`, compiled; the error names the pattern.
fn globs(key: &'static str, patterns: &[String]) -> Result<GlobSet, InvalidConfig> {
    let mut builder = GlobSetBuilder::new();
    for (index, pattern) in patterns.iter().enumerate() {
        let glob = Glob::new(pattern).map_err(|source| InvalidConfig::Glob {
            key,
            index,
            pattern: pattern.clone(),
            source,
        })?;
        builder.add(glob);
    }
    builder.build().map_err(|source| InvalidConfig::Globs { key, source })
}

impl ExecutionConfig {
    fn validate(&self) -> Result<(), InvalidConfig> {
        let positive_seconds = [
            ("timeout_seconds", self.timeout_seconds),
            ("tool_call_timeout_seconds", self.tool_call_timeout_seconds),
            ("task_timeout_seconds", self.task_timeout_seconds),
            ("task_ttl_seconds", self.task_ttl_seconds),
            ("sessions.idle_timeout_seconds", self.sessions.idle_timeout_seconds),
        ];
        for (key, value) in positive_seconds {
            check_seconds(&format!("execution.{key}"), value)?;
        }
        let positive_counts = [
            ("max_output_bytes", self.max_output_bytes as u64),
            ("max_tool_calls", self.max_tool_calls as u64),
            ("max_concurrent_calls", self.max_concurrent_calls as u64),
            ("max_tool_result_bytes", self.max_tool_result_bytes as u64),
            ("max_attachments", self.max_attachments as u64),
            ("max_attachment_bytes", self.max_attachment_bytes as u64),
            ("limits.memory_mb", self.limits.memory_mb),
            ("limits.scratch_mb", self.limits.scratch_mb),
            ("limits.open_files", self.limits.open_files),
            ("limits.file_size_mb", self.limits.file_size_mb),
        ];
        for (key, value) in positive_counts {
            if value == 0 {
                return Err(InvalidConfig::Zero { key });
            }
        }
        if self.limits.tasks < 8 {
            return Err(InvalidConfig::TooFewTasks);
        }
        if self.pool_size > 64 {
            return Err(InvalidConfig::PoolSize(self.pool_size));
        }
        if self.python.trim().is_empty() {
            return Err(InvalidConfig::NoPython);
        }
        mounts::check_names(&self.mounts, &self.preload)?;
        if self.sandbox == SandboxKind::Kubernetes {
            let asked = [
                ("mounts", !self.mounts.is_empty()),
                ("site_packages", self.site_packages),
                ("preload", !self.preload.is_empty()),
            ];
            if let Some((key, _)) = asked.into_iter().find(|&(_, set)| set) {
                return Err(InvalidConfig::NotInKubernetes { key });
            }
        }
        self.docker.validate()?;
        Ok(self.kubernetes.validate()?)
    }
}

/// A duration in seconds: above 0 and at most a day (which also keeps `Duration::from_secs_f64` from
/// panicking).
fn check_seconds(key: &str, value: f64) -> Result<(), BadSeconds> {
    if value > 0.0 && value <= MAX_SECONDS {
        return Ok(());
    }
    Err(BadSeconds { key: key.to_string(), value })
}

/// The longest duration a key takes: a day.
const MAX_SECONDS: f64 = 86_400.0;

#[cfg(test)]
mod tests;
