use super::*;

fn env(name: &str) -> Option<String> {
    match name {
        "FINANCIAL_DATA_API_KEY" => Some("key-123".into()),
        "INTERNAL_TOKEN" => Some("tok".into()),
        _ => None,
    }
}

fn parse(text: &str) -> Result<Config, String> {
    Config::parse(text, &env).map_err(|e| e.to_string())
}

const SEED_EXAMPLE: &str = r#"
servers:
  - name: financial-data
    transport: stdio
    command: node
    args: ["./financial-data-mcp/dist/index.js"]
    env:
      API_KEY: ${FINANCIAL_DATA_API_KEY}
  - name: internal-apis
    transport: http
    url: "https://internal.example.com/mcp"
    headers:
      Authorization: "Bearer ${INTERNAL_TOKEN}"
tools:
  allow:
    - "mcp__financial_data__*"
execution:
  timeout_seconds: 120
  max_output_bytes: 65536
  sandbox: seatbelt
  max_tool_calls: 100
  max_concurrent_calls: 8
  tool_call_timeout_seconds: 60
  trace: summary
  max_tool_result_bytes: 16777216
"#;

#[test]
fn the_original_readme_example_parses_with_variables_expanded() {
    let config = parse(SEED_EXAMPLE).unwrap();
    assert_eq!(config.servers.len(), 2);
    assert_eq!(config.servers[0].env["API_KEY"], Scalar::Text("key-123".into()));
    assert_eq!(config.servers[1].transport, TransportKind::Http);
    assert_eq!(config.servers[1].headers["Authorization"], Scalar::Text("Bearer tok".into()));
    assert_eq!(config.execution.sandbox, SandboxKind::Seatbelt);
    let filter = config.tools.filter().unwrap();
    assert!(filter.permits("mcp__financial_data__query_financials"));
    assert!(!filter.permits("mcp__internal_apis__get_resource"));
}

#[test]
fn an_empty_document_gives_the_seed_defaults() {
    for text in ["", "# nothing\n", "servers: []\n"] {
        let config = parse(text).unwrap();
        assert!(config.servers.is_empty());
        let e = &config.execution;
        assert_eq!(e.timeout_seconds, 120.0);
        assert_eq!(e.max_output_bytes, 65536);
        assert_eq!(e.sandbox, SandboxKind::Auto);
        assert_eq!(e.python, "python3");
        assert_eq!(e.max_tool_calls, 100);
        assert_eq!(e.max_concurrent_calls, 8);
        assert_eq!(e.tool_call_timeout_seconds, 60.0);
        assert_eq!(e.trace, TraceMode::Summary);
        assert_eq!(e.max_tool_result_bytes, 67_108_864);
        assert_eq!(e.limits, Limits { memory_mb: 1024, scratch_mb: 256, open_files: 256, file_size_mb: 64, tasks: 64 });
        assert_eq!(e.pool_size, 2);
        assert!(!e.allow_degraded);
        assert_eq!(e.docker, DockerSettings::default());
        assert_eq!(
            (e.docker.image.as_str(), e.docker.host.as_deref(), e.docker.runtime.as_deref()),
            ("python:3.12-slim", None, None)
        );
        assert_eq!((e.docker.memory_mb(&e.limits), e.docker.scratch_mb(&e.limits)), (1024 + 256, 256));
        assert_eq!((e.precheck, e.max_attachments, e.max_attachment_bytes), (true, 4, 10 * 1024 * 1024));
    }
}

#[test]
fn the_precheck_and_attachment_bounds_are_configurable() {
    let config = parse("execution:\n  precheck: false\n  max_attachments: 2\n  max_attachment_bytes: 1000\n").unwrap();
    let e = &config.execution;
    assert_eq!((e.precheck, e.max_attachments, e.max_attachment_bytes), (false, 2, 1000));
}

#[test]
fn a_server_may_take_60_seconds_to_start_unless_configured_otherwise() {
    let config =
        parse("servers:\n  - name: a\n    command: c\n  - name: b\n    command: c\n    connect_timeout_seconds: 2.5\n");
    let servers = config.unwrap().servers;
    assert_eq!(servers[0].connect_timeout(), Duration::from_secs(60));
    assert_eq!(servers[1].connect_timeout(), Duration::from_millis(2500));
}

#[test]
fn docker_keys_parse_and_override_the_limits_they_default_from() {
    let text = "execution:\n  sandbox: docker\n  docker:\n    image: ptc-mcp-runner:local\n    host: tcp://10.0.0.5:2375\n    \
                memory_mb: 512\n    pids: 32\n    cpus: 1.5\n    scratch_mb: 64\n    runtime: runsc\n";
    let e = parse(text).unwrap().execution;
    assert_eq!(e.sandbox, SandboxKind::Docker);
    let d = &e.docker;
    assert_eq!((d.image.as_str(), d.host.as_deref()), ("ptc-mcp-runner:local", Some("tcp://10.0.0.5:2375")));
    assert_eq!((d.memory_mb(&e.limits), d.pids(&e.limits), d.cpus, d.scratch_mb(&e.limits)), (512, 32, 1.5, 64));
    assert_eq!(d.runtime.as_deref(), Some("runsc"));
}

#[test]
fn kubernetes_keys_parse_in_every_build() {
    let text = "execution:\n  sandbox: kubernetes\n  kubernetes:\n    namespace: ptc-runners\n    runtime_class: gvisor\n    \
                template: /etc/ptc/pod.yaml\n    kubeconfig: /etc/ptc/kubeconfig\n";
    let e = parse(text).unwrap().execution;
    assert_eq!(e.sandbox, SandboxKind::Kubernetes);
    let k = &e.kubernetes;
    assert_eq!((k.namespace.as_deref(), k.runtime_class.as_deref()), (Some("ptc-runners"), Some("gvisor")));
    assert_eq!(k.template.as_deref(), Some(std::path::Path::new("/etc/ptc/pod.yaml")));
    assert_eq!(k.kubeconfig.as_deref(), Some(std::path::Path::new("/etc/ptc/kubeconfig")));
    assert_eq!(k.warm_pool, None);
}

#[test]
fn errors_name_the_key_and_what_is_expected() {
    let cases = [
        ("execution:\n  timeout: 5\n", "execution.timeout: unknown field `timeout`, expected one of `timeout_seconds`"),
        ("execution:\n  timeout_seconds: soon\n", "execution.timeout_seconds: invalid type"),
        ("execution:\n  max_tool_calls: -1\n", "execution.max_tool_calls: invalid value"),
        ("execution:\n  max_tool_calls: 0\n", "execution.max_tool_calls: must be at least 1"),
        ("execution:\n  timeout_seconds: 0\n", "execution.timeout_seconds: must be a number of seconds above 0"),
        ("execution:\n  limits:\n    memory_mb: 0\n", "execution.limits.memory_mb: must be at least 1"),
        ("execution:\n  limits:\n    tasks: 4\n", "execution.limits.tasks: must be at least 8"),
        ("execution:\n  limits:\n    disk: 1\n", "execution.limits.disk: unknown field `disk`"),
        ("execution:\n  sandbox: jail\n", "execution.sandbox: unknown variant `jail`"),
        ("execution:\n  pool_size: 65\n", "execution.pool_size: at most 64 ready runners"),
        ("execution:\n  docker:\n    socket: x\n", "execution.docker.socket: unknown field `socket`"),
        ("execution:\n  docker:\n    image: ''\n", "execution.docker.image: must name an image"),
        ("execution:\n  docker:\n    host: ssh://box\n", "execution.docker.host: 'ssh://box' is not unix://PATH"),
        ("execution:\n  docker:\n    cpus: 0\n", "execution.docker.cpus: must be between 0.01 and 1024"),
        ("execution:\n  docker:\n    pids: 1\n", "execution.docker.pids: must be at least 8"),
        ("execution:\n  docker:\n    memory_mb: 1\n", "execution.docker.memory_mb: must be at least 16"),
        ("execution:\n  docker:\n    runtime: ' '\n", "execution.docker.runtime: must name an OCI runtime"),
        ("execution:\n  kubernetes:\n    pod: x\n", "execution.kubernetes.pod: unknown field `pod`"),
        (
            "execution:\n  kubernetes:\n    namespace: Ptc\n",
            "execution.kubernetes.namespace: 'Ptc' is not a Kubernetes name",
        ),
        (
            "execution:\n  kubernetes:\n    template: p.yaml\n    warm_pool: w\n",
            "execution.kubernetes.template: not used with warm_pool",
        ),
        ("execution:\n  trace: full\n", "execution.trace: unknown variant `full`"),
        ("execution:\n  precheck: maybe\n", "execution.precheck: invalid type"),
        ("execution:\n  max_attachments: 0\n", "execution.max_attachments: must be at least 1"),
        ("execution:\n  max_attachment_bytes: 0\n", "execution.max_attachment_bytes: must be at least 1"),
        (
            "execution:\n  task_timeout_seconds: 0\n",
            "execution.task_timeout_seconds: must be a number of seconds above 0",
        ),
        ("execution:\n  task_ttl_seconds: 90000\n", "execution.task_ttl_seconds: must be a number of seconds above 0"),
        ("execution:\n  max_tasks_per_client: -1\n", "execution.max_tasks_per_client: invalid value"),
        (
            "execution:\n  sessions:\n    idle_timeout_seconds: 0\n",
            "execution.sessions.idle_timeout_seconds: must be a number of seconds above 0",
        ),
        ("execution:\n  sessions:\n    keep: 3\n", "execution.sessions.keep: unknown field `keep`"),
        ("servers:\n  - name: a\n    transport: stdio\n", "servers[0] ('a').command: required for transport stdio"),
        ("servers:\n  - name: a\n    transport: http\n", "servers[0] ('a').url: required for transport http"),
        (
            "servers:\n  - name: a\n    transport: sse\n    url: u\n    command: c\n",
            "servers[0] ('a').command: only for transport stdio",
        ),
        (
            "servers:\n  - name: a\n    command: c\n    url: u\n",
            "servers[0] ('a').url: only for transports http and sse",
        ),
        ("servers:\n  - name: a\n    command: c\n    colour: red\n", "servers[0].colour: unknown field `colour`"),
        ("servers:\n  - name: ''\n    command: c\n", "servers[0].name: must not be empty"),
        (
            "servers:\n  - name: a\n    command: c\n    connect_timeout_seconds: 0\n",
            "servers[0] ('a').connect_timeout_seconds: must be a number of seconds above 0 and at most 86400, got 0",
        ),
        (
            "servers:\n  - name: a\n    command: c\n    connect_timeout_seconds: 1e9\n",
            "servers[0] ('a').connect_timeout_seconds: must be a number of seconds above 0 and at most 86400",
        ),
        (
            "servers:\n  - name: a\n    command: c\n    connect_timeout_seconds: soon\n",
            "servers[0].connect_timeout_seconds: invalid type",
        ),
        ("tools:\n  allow: ['a']\n  block: ['b']\n", "tools: 'allow' and 'block' are mutually exclusive"),
        ("tools:\n  allow: ['a[']\n", "tools.allow[0]: bad glob 'a['"),
        ("bogus: 1\n", "bogus: unknown field `bogus`"),
    ];
    for (text, expected) in cases {
        let err = parse(text).unwrap_err();
        assert!(err.starts_with(expected), "for {text:?}: got {err:?}, expected it to start with {expected:?}");
        assert!(!err.contains('\n'), "one line only: {err:?}");
    }
}

#[test]
fn server_names_that_map_to_the_same_prefix_are_rejected() {
    let text = "servers:\n  - name: a-b\n    command: x\n  - name: a_b\n    command: y\n";
    assert_eq!(
        parse(text).unwrap_err(),
        "servers[1].name: 'a_b' and 'a-b' both map to the tool prefix 'mcp__a_b__'; rename one"
    );
}

#[test]
fn an_unset_variable_without_default_names_the_variable_and_the_server() {
    let text = "servers:\n  - name: db\n    command: run\n    env:\n      PASSWORD: ${DB_PASSWORD}\n";
    let err = parse(text).unwrap_err();
    assert!(err.contains("DB_PASSWORD") && err.contains("'db'"), "{err}");
}

#[test]
fn variables_expand_in_command_args_env_url_and_headers() {
    let text = r#"
servers:
  - name: s
    command: ${BIN:-/usr/bin/tool}
    args: ["--key=${INTERNAL_TOKEN}", "plain $x"]
    env: { PORT: 8080, DEBUG: true, KEY: "${FINANCIAL_DATA_API_KEY}" }
  - name: h
    transport: sse
    url: "https://${HOST:-example.com}/sse"
    headers: { X-Token: "${INTERNAL_TOKEN}" }
"#;
    let config = parse(text).unwrap();
    let s = &config.servers[0];
    assert_eq!(s.command.as_deref(), Some("/usr/bin/tool"));
    assert_eq!(s.args, ["--key=tok", "plain $x"]);
    assert_eq!(s.env["PORT"].as_text(), "8080");
    assert_eq!(s.env["DEBUG"].as_text(), "true");
    assert_eq!(s.env["KEY"].as_text(), "key-123");
    assert_eq!(config.servers[1].url.as_deref(), Some("https://example.com/sse"));
    assert_eq!(config.servers[1].headers["X-Token"].as_text(), "tok");
}

#[test]
fn remote_urls_and_headers_are_checked_after_expansion_without_showing_values() {
    let server = |url: &str, headers: &str| {
        format!("servers:\n  - name: r\n    transport: http\n    url: \"{url}\"\n    headers: {{ {headers} }}\n")
    };
    let cases = [
        (server("u", ""), "servers[0] ('r').url: not a valid URL (relative URL without a base)"),
        (server("ftp://h/x", ""), "servers[0] ('r').url: must be an http:// or https:// URL"),
        (
            server("http://h/mcp", "\"Bad Name\": x"),
            "servers[0] ('r').headers: 'Bad Name' is not a valid HTTP header name",
        ),
        (server("http://h/mcp", "Accept: x"), "servers[0] ('r').headers.Accept: set by ptc-mcp itself"),
        (
            server("http://h/mcp", "X-Key: \"a\\nsecret\""),
            "servers[0] ('r').headers.X-Key: the value (after ${VAR} expansion) is not",
        ),
    ];
    for (text, expected) in cases {
        let err = parse(&text).unwrap_err();
        assert!(err.starts_with(expected), "for {text:?}: got {err:?}, expected it to start with {expected:?}");
        assert!(!err.contains("secret"), "{err}");
    }
    assert!(parse(&server("https://h:8443/mcp?x=1", "Authorization: \"Bearer ${INTERNAL_TOKEN}\"")).is_ok());
}

#[test]
fn a_named_file_that_does_not_exist_is_an_error() {
    let err = Config::load(Some(Path::new("/nonexistent/ptc.yaml"))).unwrap_err();
    assert!(err.to_string().starts_with("cannot read config /nonexistent/ptc.yaml"), "{err}");
}

#[test]
fn serve_and_logging_keys_parse_with_their_defaults() {
    let config = parse("").unwrap();
    assert_eq!(config.serve.http.token, None);
    assert!(config.serve.http.allowed_origins.is_empty());
    assert_eq!(config.serve.http.max_concurrent_runs, 8);
    assert_eq!((config.serve.http.max_connections, config.serve.http.max_sessions), (256, 100));
    let timeouts = [
        config.serve.http.header_read_timeout(),
        config.serve.http.keep_alive_timeout(),
        config.serve.http.session_idle_timeout(),
    ];
    assert_eq!(timeouts, [Duration::from_secs(10), Duration::from_secs(60), Duration::from_secs(900)]);
    assert_eq!(config.serve.http.drain(), Duration::ZERO, "no drain unless asked");
    assert_eq!(parse("serve:\n  http:\n    drain_seconds: 30\n").unwrap().serve.http.drain(), Duration::from_secs(30));
    assert_eq!((config.logging.audit_file, config.logging.audit_code), (None, false));
    let text = "serve:\n  http:\n    token: ${INTERNAL_TOKEN}-x\n    allowed_origins: [\"https://app.example\", \
                \"http://[::1]:3000\"]\n    max_concurrent_runs: 2\nlogging:\n  audit_file: /var/log/ptc.jsonl\n  \
                audit_code: true\n";
    let config = parse(text).unwrap();
    let http = &config.serve.http;
    assert_eq!(http.token.as_ref().map(Secret::expose), Some("tok-x"));
    assert_eq!(format!("{:?}", http.token), "Some(Secret(..))", "the token never shows in Debug output");
    assert_eq!(http.max_concurrent_runs, 2);
    assert_eq!(
        Origin::parse(&http.allowed_origins[1]),
        Some(Origin { scheme: "http".into(), host: "::1".into(), port: 3000 })
    );
    assert_eq!(
        Origin::parse("HTTPS://App.Example"),
        Some(Origin { scheme: "https".into(), host: "app.example".into(), port: 443 })
    );
    assert_eq!(config.logging.audit_file.as_deref(), Some(Path::new("/var/log/ptc.jsonl")));
    assert!(config.logging.audit_code);
}

#[test]
fn serve_and_logging_errors_name_the_key_and_never_the_token() {
    let cases = [
        ("serve:\n  http:\n    max_concurrent_runs: 0\n", "serve.http.max_concurrent_runs: must be at least 1"),
        ("serve:\n  http:\n    port: 1\n", "serve.http.port: unknown field `port`"),
        ("serve:\n  stdio: {}\n", "serve.stdio: unknown field `stdio`"),
        ("serve:\n  http:\n    token: ${NOPE}\n", "serve.http.token: environment variable NOPE is not set"),
        ("serve:\n  http:\n    max_connections: 0\n", "serve.http.max_connections: must be at least 1"),
        ("serve:\n  http:\n    max_sessions: 0\n", "serve.http.max_sessions: must be at least 1"),
        (
            "serve:\n  http:\n    header_read_timeout_seconds: 0\n",
            "serve.http.header_read_timeout_seconds: must be a number of seconds above 0",
        ),
        (
            "serve:\n  http:\n    keep_alive_timeout_seconds: -1\n",
            "serve.http.keep_alive_timeout_seconds: must be a number of seconds above 0",
        ),
        (
            "serve:\n  http:\n    session_idle_timeout_seconds: 1e9\n",
            "serve.http.session_idle_timeout_seconds: must be a number of seconds above 0",
        ),
        (
            "serve:\n  http:\n    drain_seconds: -1\n",
            "serve.http.drain_seconds: must be 0 (no drain) or a number of seconds up to 86400, got -1",
        ),
        ("serve:\n  http:\n    token: \"  \"\n", "serve.http.token: must be printable ASCII without spaces"),
        ("serve:\n  http:\n    token: \"a secret\"\n", "serve.http.token: must be printable ASCII without spaces"),
        (
            "serve:\n  http:\n    allowed_origins: [\"https://app.example/path\"]\n",
            "serve.http.allowed_origins[0]: 'https://app.example/path' is not an origin",
        ),
        ("serve:\n  http:\n    allowed_origins: [\"app.example\"]\n", "serve.http.allowed_origins[0]: 'app.example'"),
        ("serve:\n  http:\n    allowed_origins: [\"null\"]\n", "serve.http.allowed_origins[0]: 'null'"),
        ("logging:\n  audit_code: true\n", "logging.audit_code: needs logging.audit_file"),
        ("logging:\n  audit_file: ''\n", "logging.audit_file: must be a path"),
        ("logging:\n  level: debug\n", "logging.level: unknown field `level`"),
    ];
    for (text, expected) in cases {
        let err = parse(text).unwrap_err();
        assert!(err.starts_with(expected), "for {text:?}: got {err:?}, expected it to start with {expected:?}");
        assert!(!err.contains("secret"), "{err}");
    }
}

#[test]
fn a_token_that_expands_to_nothing_is_no_token() {
    // `${PTC_MCP_TOKEN:-}` in a config shared by stdio and HTTP: serve --http then refuses to start.
    assert_eq!(parse("serve:\n  http:\n    token: \"${NOPE:-}\"\n").unwrap().serve.http.token, None);
}

#[test]
fn confirm_takes_globs_and_a_timeout() {
    let config = parse("").unwrap();
    assert!(config.tools.confirm.is_empty());
    assert_eq!(config.tools.confirm_timeout(), Duration::from_secs(300));
    let config = parse("tools:\n  confirm: [\"mcp__*__delete_*\"]\n  confirm_timeout_seconds: 30\n").unwrap();
    let set = config.tools.confirm_set().unwrap();
    assert!(set.is_match("mcp__db__delete_rows") && !set.is_match("mcp__db__query"));
    assert_eq!(config.tools.confirm_timeout(), Duration::from_secs(30));
    for (text, expected) in [
        ("tools:\n  confirm: [\"a[\"]\n", "tools.confirm[0]: bad glob 'a['"),
        (
            "tools:\n  confirm_timeout_seconds: 0\n",
            "tools.confirm_timeout_seconds: must be a number of seconds above 0",
        ),
    ] {
        let err = parse(text).unwrap_err();
        assert!(err.starts_with(expected), "got {err:?}, expected {expected:?}");
    }
}

#[test]
fn degraded_sandboxes_are_an_explicit_opt_in() {
    assert!(parse("execution:\n  allow_degraded: true\n").unwrap().execution.allow_degraded);
    let err = parse("execution:\n  allow_degraded: sometimes\n").unwrap_err();
    assert!(err.starts_with("execution.allow_degraded: "), "{err}");
}

/// Found by the property test (properties.rs): a 1 KiB document whose aliases stand for millions of values
/// took minutes and gigabytes to read. This one stands for 216,000 (a second in a debug build before).
#[test]
fn a_document_whose_aliases_stand_for_too_many_values_is_refused_at_once() {
    let text = "k0: &a0 [x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, \
                x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x]\n";
    let text = format!("{text}k1: &a1 [{}]\nservers: [{}]\n", vec!["*a0"; 60].join(", "), vec!["*a1"; 60].join(", "));
    let err = parse(&text).unwrap_err();
    assert!(err.contains("the document stands for more than 100000 values (YAML aliases"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

#[test]
fn auth_is_for_remote_servers_replaces_the_authorization_header_and_expands_its_secrets() {
    let remote = |auth: &str, headers: &str| {
        format!(
            "servers:\n  - name: hosted\n    transport: http\n    url: https://h.example/mcp\n    auth: {auth}\n{headers}"
        )
    };
    let config = parse(&remote("{type: oauth, client_id: app, client_secret: '${INTERNAL_TOKEN}'}", "")).unwrap();
    let Some(AuthConfig::OAuth(client)) = &config.servers[0].auth else { panic!("{config:?}") };
    assert_eq!(client.client_secret.as_ref().map(Secret::expose), Some("tok"));
    let with_header = remote("oauth", "    headers:\n      authorization: Bearer x\n      X-Team: core\n");
    assert_eq!(
        parse(&with_header).unwrap_err(),
        "servers[0] ('hosted').auth: replaces the `Authorization` header; remove that header (other headers may stay)"
    );
    assert!(parse(&remote("oauth", "    headers:\n      X-Team: core\n")).is_ok());
    let stdio = "servers:\n  - name: local\n    command: x\n    auth: oauth\n";
    assert_eq!(parse(stdio).unwrap_err(), "servers[0] ('local').auth: only for transports http and sse, not stdio");
    assert_eq!(
        parse(&remote("{type: oauth, client_id: '${MISSING}'}", "")).unwrap_err(),
        "servers[0] ('hosted').auth.client_id: environment variable MISSING is not set (use ${MISSING:-default} to give a default)"
    );
}

#[test]
fn the_token_store_expands_variables_and_a_leading_tilde() {
    let lookup = |name: &str| (name == "HOME").then(|| "/home/me".to_string());
    let config = Config::parse("oauth:\n  token_store: ~/tokens\n", &lookup).unwrap();
    assert_eq!(config.oauth.token_store(), Some(PathBuf::from("/home/me/tokens")));
    assert_eq!(
        Config::parse("oauth:\n  token_store: ''\n", &lookup).unwrap_err().to_string(),
        "oauth.token_store: must be a path (or leave the key out for the default)"
    );
    assert!(Config::parse("oauth:\n  store: x\n", &lookup).unwrap_err().to_string().contains("unknown field `store`"));
}

#[test]
fn mounts_become_canonical_folders_and_packages_keys_parse() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("data"), dir.path().join("via-link")).unwrap();
    let text = format!(
        "execution:\n  mounts:\n    data: {{path: {0}/via-link}}\n    out: {{path: '{0}/./data', writable: true}}\n  \
         site_packages: true\n  preload: [pandas, numpy.linalg, _private]\n",
        dir.path().display()
    );
    let config = parse(&text).unwrap();
    let real = std::fs::canonicalize(dir.path().join("data")).unwrap();
    assert_eq!(
        config.execution.backend_mounts(),
        [
            Mount { name: "data".into(), path: real.clone(), writable: false },
            Mount { name: "out".into(), path: real, writable: true },
        ]
    );
    assert_eq!(
        config.execution.packages(),
        Packages { site_packages: true, preload: vec!["pandas".into(), "numpy.linalg".into(), "_private".into()] }
    );
    let defaults = parse("").unwrap().execution;
    assert!(defaults.mounts.is_empty() && defaults.packages().is_empty());
}

#[test]
fn mount_and_preload_names_are_checked_with_the_key_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().display();
    let cases = [
        (format!("mounts: {{.hidden: {{path: {path}}}}}"), "execution.mounts.'.hidden' is not a plain name"),
        (format!("mounts: {{'a/b': {{path: {path}}}}}"), "execution.mounts.'a/b' is not a plain name"),
        (
            format!("mounts: {{Data: {{path: {path}}}, data: {{path: {path}}}}}"),
            "execution.mounts: 'Data' and 'data' differ only in case",
        ),
        ("mounts: {data: {writable: true}}".to_string(), "execution.mounts.data: missing field `path`"),
        ("preload: ['os.path', '1x']".to_string(), "execution.preload[1]: '1x' is not a module name"),
        ("preload: ['a..b']".to_string(), "execution.preload[0]: 'a..b' is not a module name"),
        ("preload: [pandas; import os]".to_string(), "execution.preload[0]: 'pandas; import os' is not a module name"),
        ("site_packages: yes".to_string(), "execution.site_packages: invalid type"),
    ];
    for (execution, expected) in cases {
        let error = parse(&format!("execution:\n  {execution}\n")).unwrap_err();
        assert!(error.contains(expected), "{execution}: {error}");
    }
}

#[test]
fn the_kubernetes_sandbox_refuses_mounts_and_packages_rather_than_ignoring_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().display();
    for (key, value) in [
        ("mounts", format!("{{data: {{path: {path}}}}}")),
        ("site_packages", "true".into()),
        ("preload", "[json]".into()),
    ] {
        let error = parse(&format!("execution:\n  sandbox: kubernetes\n  {key}: {value}\n")).unwrap_err();
        assert!(error.starts_with(&format!("execution.{key}: not available in the kubernetes sandbox")), "{error}");
        assert!(parse(&format!("execution:\n  sandbox: docker\n  {key}: {value}\n")).is_ok(), "{key}");
    }
}
