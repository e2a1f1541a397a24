//! What can be wrong with a config: each message names the key and says what is expected, and never shows
//! a header's or the token's value.

use std::path::PathBuf;

use ptc_backends::{DockerSettingsError, KubernetesSettingsError};

use super::auth::AuthConfigError;
use super::expand::ExpandError;
use super::logging::LoggingError;
use super::mounts::MountError;
use super::serve::HttpConfigError;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config {path}: {problem}")]
    Invalid {
        path: String,
        #[source]
        problem: Box<InvalidConfig>,
    },
}

/// What `reqwest::Url::parse` fails with (the `url` crate's error, which reqwest does not re-export).
type UrlError = <reqwest::Url as std::str::FromStr>::Err;

/// Config text that parses to no usable config. `key` is where the value is, e.g. `servers[0] ('db')`.
#[derive(Debug, thiserror::Error)]
pub enum InvalidConfig {
    /// A key the `kubernetes` backend does not carry out: refused rather than ignored.
    #[error(
        "execution.{key}: not available in the kubernetes sandbox (its pods see neither the host's folders nor \
         execution.python's packages); remove it, or use the landlock or docker sandbox"
    )]
    NotInKubernetes { key: &'static str },
    /// Not YAML, or not a mapping of the known sections.
    #[error("{0}")]
    Document(#[source] serde_yaml_ng::Error),
    /// A value that does not fit its key: unknown, of the wrong type, out of its type's range.
    #[error("{path}: {source}")]
    Value {
        path: String,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("{key}.name: must not be empty")]
    EmptyName { key: String },
    #[error("{key}.name: '{name}' and '{other}' both map to the tool prefix 'mcp__{prefix}__'; rename one")]
    SamePrefix { key: String, name: String, other: String, prefix: String },
    #[error("{key}.{field}: required for transport {transport}")]
    Required { key: String, field: &'static str, transport: &'static str },
    #[error("{key}.{field}: only for transports http and sse, not {transport}")]
    OnlyRemote { key: String, field: &'static str, transport: &'static str },
    #[error("{key}.{field}: only for transport stdio, not {transport}")]
    OnlyStdio { key: String, field: &'static str, transport: &'static str },
    #[error("servers '{server}' {key}: {source}")]
    Variable {
        server: String,
        key: String,
        #[source]
        source: ExpandError,
    },
    #[error("{key}.url: must be an http:// or https:// URL")]
    UrlScheme { key: String },
    #[error("{key}.url: not a valid URL ({source})")]
    Url {
        key: String,
        #[source]
        source: UrlError,
    },
    #[error("{key}.headers: '{name}' is not a valid HTTP header name")]
    HeaderName { key: String, name: String },
    #[error("{key}.headers.{name}: set by ptc-mcp itself for this transport; remove it")]
    ReservedHeader { key: String, name: String },
    #[error(
        "{key}.headers.{name}: the value (after ${{VAR}} expansion) is not a valid HTTP header value (line breaks \
         or control characters?)"
    )]
    HeaderValue { key: String, name: String },
    #[error("{key}.{source}")]
    Auth {
        key: String,
        #[source]
        source: AuthConfigError,
    },
    #[error("oauth.token_store: {0}")]
    TokenStoreVariable(#[source] ExpandError),
    #[error("oauth.token_store: must be a path (or leave the key out for the default)")]
    EmptyTokenStore,
    #[error("tools: 'allow' and 'block' are mutually exclusive; use one of them")]
    AllowAndBlock,
    #[error("tools.{key}[{index}]: bad glob '{pattern}': {source}")]
    Glob {
        key: &'static str,
        index: usize,
        pattern: String,
        #[source]
        source: globset::Error,
    },
    #[error("tools.{key}: {source}")]
    Globs {
        key: &'static str,
        #[source]
        source: globset::Error,
    },
    #[error("execution.{key}: must be at least 1")]
    Zero { key: &'static str },
    #[error("execution.limits.tasks: must be at least 8 (the interpreter and its threads)")]
    TooFewTasks,
    #[error("execution.pool_size: at most 64 ready runners, got {0}")]
    PoolSize(usize),
    #[error("execution.python: must name an interpreter (e.g. python3)")]
    NoPython,
    #[error("execution.docker.{0}")]
    Docker(#[from] DockerSettingsError),
    #[error("execution.kubernetes.{0}")]
    Kubernetes(#[from] KubernetesSettingsError),
    #[error(transparent)]
    Seconds(#[from] BadSeconds),
    #[error(transparent)]
    Http(#[from] HttpConfigError),
    #[error(transparent)]
    Logging(#[from] LoggingError),
    #[error(transparent)]
    Mount(#[from] MountError),
}

/// A duration that is not above 0 and at most a day.
#[derive(Debug, thiserror::Error)]
#[error("{key}: must be a number of seconds above 0 and at most {}, got {value}", super::MAX_SECONDS)]
pub struct BadSeconds {
    pub key: String,
    pub value: f64,
}
