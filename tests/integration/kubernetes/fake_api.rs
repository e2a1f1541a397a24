//! A fake Kubernetes API server for the `kubernetes` backend's tests: plain HTTP on a loopback port, the paths
//! and JSON shapes the kube client sends and reads (pods, their `exec` subresource, agent-sandbox claims,
//! sandboxes and warm pools, API discovery, `Status` errors), a kubeconfig pointing at it, and behind each
//! `exec` the command run as a local process, its stdio multiplexed over a websocket in the
//! `v5.channel.k8s.io` (or `v4.channel.k8s.io`) stream protocol: binary frames of a channel byte (0 stdin,
//! 1 stdout, 2 stderr, 3 the status, 255 a channel's end under v5) and the data.
//!
//! What it plays of a cluster: a created pod is `Pending` when first read, then `Running`; the exec'd process
//! sees the pod's environment with its `/scratch` as a directory of its own; when the exec'd process ends
//! (a runner whose stream closed reads the end of its input) the pod ends `Succeeded`, as the keeper ends it
//! in a real pod; deleting a pod kills its processes and cuts its streams without a status. Each request is
//! authorized by the Role in `deploy/kubernetes/runners.yaml` (a verb it does not grant is refused, 403), so
//! the tests fail if the shipped Role lacks what the server does. Everything asked is recorded for the tests
//! to look at.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

pub const NAMESPACE: &str = "ptc-runners";
pub const TOKEN: &str = "fake-token";
pub const WARM_POOL: &str = "python-pool";

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub body: Value,
    /// The websocket subprotocols the client offered, for an exec.
    pub protocols: String,
}

impl Recorded {
    pub fn query_values(&self, key: &str) -> Vec<String> {
        self.query.iter().filter(|(k, _)| k == key).map(|(_, v)| v.clone()).collect()
    }
}

/// What the fake does differently from a cluster that just works.
#[derive(Debug, Clone, Default)]
pub struct Behaviour {
    /// Answer requests whose method and path start like this with this status code and `Status` message.
    pub refuse: Option<(String, String, u16, String)>,
    /// Offer only the v4 stream protocol (an older API server).
    pub v4_only: bool,
    /// The agent-sandbox CRDs are installed, with warm pool [`WARM_POOL`] whose pods are like this.
    pub warm_pool: Option<Value>,
    /// Namespaces other than [`NAMESPACE`] do not exist; with this, neither does that one.
    pub no_namespace: bool,
    /// Reset every exec's connection as soon as it is upgraded (as a failing proxy or API server cuts it): no
    /// status, no close frame.
    pub reset_execs: bool,
}

struct FakePod {
    object: Value,
    reads: u32,
    /// The local processes exec'd in it.
    processes: Vec<u32>,
    scratch: PathBuf,
}

#[derive(Default)]
struct State {
    requests: Vec<Recorded>,
    pods: BTreeMap<String, FakePod>,
    claims: BTreeMap<String, Value>,
    claim_reads: HashMap<String, u32>,
    next_uid: u64,
}

pub struct FakeKube {
    pub url: String,
    pub kubeconfig: PathBuf,
    dir: TempDir,
    state: Arc<Mutex<State>>,
    behaviour: Arc<Mutex<Behaviour>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.server.abort();
        let state = self.state.lock().unwrap();
        for pod in state.pods.values() {
            kill_all(&pod.processes);
        }
    }
}

fn kill_all(pids: &[u32]) {
    for pid in pids {
        // SAFETY: a plain syscall on a pid this fake started.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
}

impl FakeKube {
    pub async fn start(behaviour: Behaviour) -> FakeKube {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_text(&url, TOKEN)).unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let behaviour = Arc::new(Mutex::new(behaviour));
        let fake = Fake {
            state: state.clone(),
            behaviour: behaviour.clone(),
            scratch: dir.path().to_path_buf(),
            granted: Arc::new(shipped_role()),
        };
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let fake = fake.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let fake = fake.clone();
                        async move { Ok::<_, std::convert::Infallible>(fake.handle(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        FakeKube { url, kubeconfig, dir, state, behaviour, server }
    }

    /// A kubeconfig for this fake with another token.
    pub fn kubeconfig_with_token(&self, token: &str) -> PathBuf {
        let path = self.dir.path().join(format!("kubeconfig-{token}"));
        std::fs::write(&path, kubeconfig_text(&self.url, token)).unwrap();
        path
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The requests with this method whose path ends with `suffix`.
    pub fn requests_to(&self, method: &str, suffix: &str) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.method == method && r.path.ends_with(suffix)).collect()
    }

    pub fn pod_names(&self) -> Vec<String> {
        self.state.lock().unwrap().pods.keys().cloned().collect()
    }

    pub fn claim_names(&self) -> Vec<String> {
        self.state.lock().unwrap().claims.keys().cloned().collect()
    }

    /// The local processes exec'd in pods that still exist.
    pub fn processes(&self) -> Vec<u32> {
        self.state.lock().unwrap().pods.values().flat_map(|p| p.processes.clone()).collect()
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        self.state.lock().unwrap().pods.get(name).map(|p| p.object.clone())
    }

    /// Adds a pod as another server left it.
    pub fn add_pod(&self, object: Value) {
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let scratch = self.dir.path().join(&name);
        let pod = FakePod { object, reads: 10, processes: Vec::new(), scratch };
        self.state.lock().unwrap().pods.insert(name, pod);
    }

    pub fn set(&self, change: impl FnOnce(&mut Behaviour)) {
        change(&mut self.behaviour.lock().unwrap());
    }
}

fn kubeconfig_text(url: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\nusers:\n- name: fake\n  \
         user:\n    token: {token}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    \
         namespace: {NAMESPACE}\ncurrent-context: fake\n"
    )
}

type Reply = Response<Full<Bytes>>;

fn reply(code: u16, body: &Value) -> Reply {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// A `Status` error as the API server sends it.
fn status(code: u16, reason: &str, message: &str, kind: &str) -> Reply {
    reply(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                "reason": reason, "details": {"kind": kind}, "code": code}),
    )
}

fn not_found(kind: &str, name: &str) -> Reply {
    status(404, "NotFound", &format!("{kind} \"{name}\" not found"), kind)
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A query string's value: `+` is a space, `%XX` a byte.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).expect("a percent escape"));
                i += 2;
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8(out).expect("UTF-8 query values")
}

/// Whether an object's labels match a selector of `key=value` and `key` (exists) terms.
fn matches(object: &Value, selector: &str) -> bool {
    let labels = &object["metadata"]["labels"];
    selector.split(',').filter(|term| !term.is_empty()).all(|term| match term.split_once('=') {
        Some((key, value)) => labels[key].as_str() == Some(value),
        None => labels.get(term).is_some(),
    })
}

#[derive(Clone)]
struct Fake {
    state: Arc<Mutex<State>>,
    behaviour: Arc<Mutex<Behaviour>>,
    scratch: PathBuf,
    /// (API group, resource, verb) the shipped Role grants.
    granted: Arc<Vec<(String, String, String)>>,
}

/// What the Role in `deploy/kubernetes/runners.yaml` grants.
fn shipped_role() -> Vec<(String, String, String)> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(crate::common::repo_path("deploy/kubernetes/runners.yaml")).unwrap();
    let role = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|document| Value::deserialize(document).unwrap())
        .find(|document| document["kind"] == "Role")
        .expect("runners.yaml has a Role");
    let strings = |value: &Value| -> Vec<String> {
        value.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
    };
    let mut granted = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    granted.push((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    granted
}

/// The API group, resource (with its subresource) and verb a namespaced request is authorized as.
fn authorized_as(method: &str, group: &str, rest: &[&str]) -> (String, String, String) {
    let (resource, verb) = match (method, rest) {
        (_, [resource, _, sub]) => (format!("{resource}/{sub}"), "create"),
        ("GET", [resource]) => (resource.to_string(), "list"),
        ("POST", [resource]) => (resource.to_string(), "create"),
        ("GET", [resource, _]) => (resource.to_string(), "get"),
        ("DELETE", [resource, _]) => (resource.to_string(), "delete"),
        (method, rest) => (rest.first().unwrap_or(&"").to_string(), method),
    };
    (group.to_string(), resource, verb.to_string())
}

impl Fake {
    async fn handle(&self, request: Request<Incoming>) -> Reply {
        let method = request.method().to_string();
        let path = request.uri().path().to_string();
        let query: Vec<(String, String)> = request
            .uri()
            .query()
            .map(|q| {
                q.split('&').filter_map(|pair| pair.split_once('=')).map(|(k, v)| (decode(k), decode(v))).collect()
            })
            .unwrap_or_default();
        let protocols = request
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let authorized =
            request.headers().get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {TOKEN}"));
        let is_upgrade = request.headers().contains_key("upgrade");
        let (parts, body) = request.into_parts();
        let body =
            if is_upgrade { Bytes::new() } else { body.collect().await.map(|b| b.to_bytes()).unwrap_or_default() };
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let recorded = Recorded {
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            body: body.clone(),
            protocols,
        };
        self.state.lock().unwrap().requests.push(recorded.clone());
        if !authorized {
            return status(401, "Unauthorized", "Unauthorized", "");
        }
        let behaviour = self.behaviour.lock().unwrap().clone();
        if let Some((refused_method, prefix, code, message)) = &behaviour.refuse
            && *refused_method == method
            && path.starts_with(prefix.as_str())
        {
            return status(*code, if *code == 403 { "Forbidden" } else { "InternalError" }, message, "pods");
        }
        let parts_of: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let namespaced = match parts_of.as_slice() {
            ["api", "v1", "namespaces", _, rest @ ..] => Some(authorized_as(&method, "", rest)),
            ["apis", group, _, "namespaces", _, rest @ ..] => Some(authorized_as(&method, group, rest)),
            _ => None,
        };
        if let Some(asked) = namespaced
            && !self.granted.contains(&asked)
        {
            let (group, resource, verb) = asked;
            let message = format!(
                "{resource} is forbidden: User \"system:serviceaccount:default:ptc-mcp\" cannot {verb} resource \"{resource}\" in API group \"{group}\""
            );
            return status(403, "Forbidden", &message, &resource);
        }
        match parts_of.as_slice() {
            ["api", "v1", "namespaces", ns, rest @ ..] => {
                if behaviour.no_namespace || *ns != NAMESPACE {
                    return status(404, "NotFound", &format!("namespaces \"{ns}\" not found"), "namespaces");
                }
                self.core(&method, rest, &query, body, parts, &recorded).await
            }
            ["apis", "extensions.agents.x-k8s.io", "v1beta1"] if behaviour.warm_pool.is_some() => reply(
                200,
                &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "extensions.agents.x-k8s.io/v1beta1",
                        "resources": [{"name": "sandboxclaims", "singularName": "sandboxclaim", "namespaced": true, "kind": "SandboxClaim", "verbs": ["create", "delete", "get", "list"]},
                                      {"name": "sandboxwarmpools", "singularName": "sandboxwarmpool", "namespaced": true, "kind": "SandboxWarmPool", "verbs": ["get"]}]}),
            ),
            ["apis", "extensions.agents.x-k8s.io", "v1beta1", "namespaces", ns, rest @ ..]
                if *ns == NAMESPACE && behaviour.warm_pool.is_some() =>
            {
                self.extensions(&method, rest, &query, body, behaviour.warm_pool.clone().unwrap())
            }
            ["apis", "agents.x-k8s.io", "v1beta1", "namespaces", ns, "sandboxes", name]
                if *ns == NAMESPACE && behaviour.warm_pool.is_some() =>
            {
                self.sandbox(name)
            }
            // What a path of an API that is not installed gets: not a Status.
            _ => Response::builder().status(404).body(Full::new(Bytes::from_static(b"404 page not found"))).unwrap(),
        }
    }

    async fn core(
        &self,
        method: &str,
        rest: &[&str],
        query: &[(String, String)],
        body: Value,
        parts: hyper::http::request::Parts,
        recorded: &Recorded,
    ) -> Reply {
        match (method, rest) {
            ("GET", ["pods"]) => {
                let selector = query.iter().find(|(k, _)| k == "labelSelector").map(|(_, v)| v.as_str()).unwrap_or("");
                let items: Vec<Value> = self
                    .state
                    .lock()
                    .unwrap()
                    .pods
                    .values()
                    .map(|p| p.object.clone())
                    .filter(|o| matches(o, selector))
                    .collect();
                reply(
                    200,
                    &json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}),
                )
            }
            ("POST", ["pods"]) => self.create_pod(body),
            ("GET", ["pods", name]) => self.read_pod(name),
            ("DELETE", ["pods", name]) => match self.delete_pod(name) {
                Some(object) => reply(200, &object),
                None => not_found("pods", name),
            },
            ("GET", ["pods", name, "exec"]) => self.exec(name, parts, recorded).await,
            _ => status(405, "MethodNotAllowed", "not played by the fake", ""),
        }
    }

    fn create_pod(&self, mut object: Value) -> Reply {
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let mut state = self.state.lock().unwrap();
        if state.pods.contains_key(&name) {
            return status(409, "AlreadyExists", &format!("pods \"{name}\" already exists"), "pods");
        }
        state.next_uid += 1;
        object["metadata"]["namespace"] = json!(NAMESPACE);
        object["metadata"]["uid"] = json!(format!("uid-{}", state.next_uid));
        object["metadata"]["creationTimestamp"] = json!(now());
        object["status"] = json!({"phase": "Pending"});
        let scratch = self.scratch.join(&name);
        state.pods.insert(name, FakePod { object: object.clone(), reads: 0, processes: Vec::new(), scratch });
        reply(201, &object)
    }

    /// Pending at the first read, then running (or failing to pull an image named `missing/...`).
    fn read_pod(&self, name: &str) -> Reply {
        let mut state = self.state.lock().unwrap();
        let Some(pod) = state.pods.get_mut(name) else { return not_found("pods", name) };
        pod.reads += 1;
        let phase = pod.object["status"]["phase"].as_str().unwrap_or("Pending").to_string();
        if phase == "Pending" && pod.reads > 1 {
            let image = pod.object["spec"]["containers"][0]["image"].as_str().unwrap_or_default().to_string();
            let container = pod.object["spec"]["containers"][0]["name"].clone();
            pod.object["status"] = if image.starts_with("missing/") {
                json!({"phase": "Pending", "containerStatuses": [{"name": container, "ready": false, "restartCount": 0, "image": image, "imageID": "",
                        "state": {"waiting": {"reason": "ErrImagePull", "message": format!("failed to pull image \"{image}\": not found")}}}]})
            } else {
                json!({"phase": "Running", "containerStatuses": [{"name": container, "ready": true, "restartCount": 0, "image": image, "imageID": "",
                        "state": {"running": {"startedAt": now()}}}]})
            };
        }
        reply(200, &pod.object)
    }

    fn delete_pod(&self, name: &str) -> Option<Value> {
        let pod = self.state.lock().unwrap().pods.remove(name)?;
        kill_all(&pod.processes);
        Some(pod.object)
    }

    /// Upgrades to a websocket and runs the command behind it.
    async fn exec(&self, name: &str, parts: hyper::http::request::Parts, recorded: &Recorded) -> Reply {
        let (env, scratch, image) = {
            let state = self.state.lock().unwrap();
            let Some(pod) = state.pods.get(name) else { return not_found("pods", name) };
            if pod.object["status"]["phase"] != "Running" {
                return status(400, "BadRequest", "pod is not running", "pods");
            }
            let container = &pod.object["spec"]["containers"][0];
            (container["env"].clone(), pod.scratch.clone(), container["image"].as_str().unwrap_or_default().to_string())
        };
        let offered: Vec<&str> = recorded.protocols.split(',').map(str::trim).collect();
        let Behaviour { v4_only, reset_execs, .. } = self.behaviour.lock().unwrap().clone();
        let protocol = if offered.contains(&"v5.channel.k8s.io") && !v4_only {
            "v5.channel.k8s.io"
        } else if offered.contains(&"v4.channel.k8s.io") {
            "v4.channel.k8s.io"
        } else {
            return status(400, "BadRequest", "no supported stream protocol offered", "");
        };
        let Some(key) = parts.headers.get("sec-websocket-key").cloned() else {
            return status(400, "BadRequest", "not a websocket upgrade", "");
        };
        let command = recorded.query_values("command");
        std::fs::create_dir_all(&scratch).unwrap();
        // An image named nopython/... has no python3: the runtime's exec fails, as the status channel says.
        let program = if image.starts_with("nopython/") { "/nonexistent/python3" } else { command[0].as_str() };
        let mut process = tokio::process::Command::new(program);
        process.args(&command[1..]).env_clear().current_dir(&scratch);
        for var in env.as_array().cloned().unwrap_or_default() {
            let value = var["value"].as_str().unwrap_or_default().replace("/scratch", &scratch.to_string_lossy());
            process.env(var["name"].as_str().unwrap(), value);
        }
        process
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = process.kill_on_drop(true).spawn().ok();
        if let (Some(pod), Some(child)) = (self.state.lock().unwrap().pods.get_mut(name), &child) {
            pod.processes.push(child.id().unwrap());
        }
        let request = Request::from_parts(parts, ());
        let fake = self.clone();
        let pod = name.to_string();
        let v5 = protocol.starts_with("v5");
        tokio::spawn(async move {
            let Ok(upgraded) = hyper::upgrade::on(request).await else { return };
            if reset_execs {
                drop(child);
                reset(upgraded);
                fake.exec_ended(&pod);
                return;
            }
            let socket =
                tokio_tungstenite::WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
            match child {
                Some(child) => {
                    stream(socket, child, v5).await;
                    fake.exec_ended(&pod);
                }
                None => not_started(socket, &command[0]).await,
            }
        });
        Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header("upgrade", "websocket")
            .header("connection", "Upgrade")
            .header(
                "sec-websocket-accept",
                tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()),
            )
            .header("sec-websocket-protocol", protocol)
            .body(Full::new(Bytes::new()))
            .unwrap()
    }

    /// An exec'd process ended: with none left, the pod ends (as the keeper ends a real one).
    fn exec_ended(&self, pod: &str) {
        let mut state = self.state.lock().unwrap();
        let Some(pod) = state.pods.get_mut(pod) else { return };
        pod.processes.retain(|pid| std::fs::metadata(format!("/proc/{pid}")).is_ok() && !is_zombie(*pid));
        if pod.processes.is_empty() {
            pod.object["status"]["phase"] = json!("Succeeded");
        }
    }

    fn extensions(
        &self,
        method: &str,
        rest: &[&str],
        query: &[(String, String)],
        body: Value,
        pool_pod: Value,
    ) -> Reply {
        match (method, rest) {
            ("GET", ["sandboxwarmpools", name]) if *name == WARM_POOL => reply(
                200,
                &json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
                        "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"replicas": 2, "sandboxTemplateRef": {"name": "python"}}}),
            ),
            ("GET", ["sandboxwarmpools", name]) => not_found("sandboxwarmpools.extensions.agents.x-k8s.io", name),
            ("GET", ["sandboxclaims"]) => {
                let selector = query.iter().find(|(k, _)| k == "labelSelector").map(|(_, v)| v.as_str()).unwrap_or("");
                let items: Vec<Value> =
                    self.state.lock().unwrap().claims.values().filter(|c| matches(c, selector)).cloned().collect();
                reply(
                    200,
                    &json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaimList", "metadata": {}, "items": items}),
                )
            }
            ("POST", ["sandboxclaims"]) => self.create_claim(body, pool_pod),
            ("GET", ["sandboxclaims", name]) => {
                let mut state = self.state.lock().unwrap();
                let reads = {
                    let reads = state.claim_reads.entry(name.to_string()).or_default();
                    *reads += 1;
                    *reads
                };
                let Some(claim) = state.claims.get_mut(*name) else {
                    return not_found("sandboxclaims.extensions.agents.x-k8s.io", name);
                };
                // The controller binds the claim to a sandbox after a moment.
                if reads > 1 {
                    claim["status"] = json!({"sandbox": {"name": format!("sandbox-{name}")},
                                             "conditions": [{"type": "Ready", "status": "True", "reason": "SandboxReady", "message": "", "lastTransitionTime": now()}]});
                }
                reply(200, claim)
            }
            ("DELETE", ["sandboxclaims", name]) => {
                let Some(claim) = self.state.lock().unwrap().claims.remove(*name) else {
                    return not_found("sandboxclaims.extensions.agents.x-k8s.io", name);
                };
                // The sandbox and its pod go with the claim.
                self.delete_pod(&format!("warm-{name}"));
                reply(200, &claim)
            }
            _ => status(405, "MethodNotAllowed", "not played by the fake", ""),
        }
    }

    /// A claim adopts a warm pod: the pool's pod spec, labelled with the claim's `additionalPodMetadata`.
    fn create_claim(&self, mut claim: Value, pool_pod: Value) -> Reply {
        let name = claim["metadata"]["name"].as_str().unwrap_or_default().to_string();
        claim["metadata"]["namespace"] = json!(NAMESPACE);
        claim["metadata"]["creationTimestamp"] = json!(now());
        let mut pod = pool_pod;
        pod["metadata"]["name"] = json!(format!("warm-{name}"));
        pod["metadata"]["labels"] = claim["spec"]["additionalPodMetadata"]["labels"].clone();
        pod["metadata"]["creationTimestamp"] = json!(now());
        let image = pod["spec"]["containers"][0]["image"].clone();
        let container = pod["spec"]["containers"][0]["name"].clone();
        pod["status"] = json!({"phase": "Running", "containerStatuses": [{"name": container, "ready": true, "restartCount": 0, "image": image, "imageID": "", "state": {"running": {"startedAt": now()}}}]});
        let mut state = self.state.lock().unwrap();
        let scratch = self.scratch.join(format!("warm-{name}"));
        state.pods.insert(format!("warm-{name}"), FakePod { object: pod, reads: 10, processes: Vec::new(), scratch });
        state.claims.insert(name, claim.clone());
        reply(201, &claim)
    }

    fn sandbox(&self, name: &str) -> Reply {
        let claim = name.trim_start_matches("sandbox-");
        if !self.state.lock().unwrap().claims.contains_key(claim) {
            return not_found("sandboxes.agents.x-k8s.io", name);
        }
        reply(
            200,
            &json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                    "metadata": {"name": name, "namespace": NAMESPACE, "annotations": {"agents.x-k8s.io/pod-name": format!("warm-{claim}")}},
                    "spec": {"podTemplate": {"spec": {"containers": []}}},
                    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady", "message": "", "lastTransitionTime": now()}]}}),
        )
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// Closes an upgraded connection with a TCP reset.
fn reset(upgraded: hyper::upgrade::Upgraded) {
    let parts = upgraded.downcast::<TokioIo<tokio::net::TcpStream>>().expect("the fake serves plain TCP");
    parts.io.inner().set_zero_linger().unwrap();
}

/// What the stream carries when the runtime cannot start the command: the status, as runc words it.
async fn not_started(mut socket: tokio_tungstenite::WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>, program: &str) {
    let message = format!(
        "OCI runtime exec failed: exec failed: unable to start container process: exec: \"{program}\": executable file \
         not found in $PATH: unknown"
    );
    let body = json!({"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError",
                      "details": {"causes": [{"message": message}]}, "code": 500});
    let mut frame = vec![3];
    frame.extend_from_slice(body.to_string().as_bytes());
    let _ = socket.send(Message::binary(frame)).await;
    let _ = socket.close(None).await;
}

/// Carries the process's stdio over the websocket until it ends; then the status on channel 3 (under v5 a
/// client's stdin end arrives as 255 0; under v4 it closes the socket). A process killed (its pod deleted)
/// ends the stream without a status.
async fn stream(
    socket: tokio_tungstenite::WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>,
    mut child: tokio::process::Child,
    v5: bool,
) {
    let (mut sink, mut incoming) = socket.split();
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    // As the API server does: one empty frame per channel first.
    for channel in [1u8, 2, 3] {
        let _ = sink.send(Message::binary(vec![channel])).await;
    }
    let (mut out_open, mut err_open, mut incoming_open) = (true, true, true);
    let (mut out_buffer, mut err_buffer) = (vec![0; 32 * 1024], vec![0; 8 * 1024]);
    while out_open || err_open {
        tokio::select! {
            read = stdout.read(&mut out_buffer), if out_open => match read {
                Ok(n @ 1..) => {
                    let mut frame = vec![1];
                    frame.extend_from_slice(&out_buffer[..n]);
                    if sink.send(Message::binary(frame)).await.is_err() { break }
                }
                _ => out_open = false,
            },
            read = stderr.read(&mut err_buffer), if err_open => match read {
                Ok(n @ 1..) => {
                    let mut frame = vec![2];
                    frame.extend_from_slice(&err_buffer[..n]);
                    if sink.send(Message::binary(frame)).await.is_err() { break }
                }
                _ => err_open = false,
            },
            message = incoming.next(), if incoming_open => match message {
                Some(Ok(Message::Binary(data))) if data.first() == Some(&0) => {
                    if let Some(pipe) = stdin.as_mut()
                        && pipe.write_all(&data[1..]).await.is_err()
                    {
                        stdin = None;
                    }
                }
                Some(Ok(Message::Binary(data))) if v5 && data.as_ref() == [255, 0] => stdin = None,
                Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_) | Message::Text(_) | Message::Frame(_))) => {}
                // The client went away: the process reads the end of its input.
                Some(Ok(Message::Close(_)) | Err(_)) | None => {
                    stdin = None;
                    incoming_open = false;
                    if !v5 {
                        // v4 has no half-close: the stream is over for the client too.
                        break;
                    }
                }
            },
        }
    }
    drop(stdin);
    let Ok(status) = child.wait().await else { return };
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(libc::SIGKILL)) => return, // killed by a pod deletion: the stream just ends
        (None, Some(signal)) => 128 + signal,
        (None, None) => return,
    };
    let body = if code == 0 {
        json!({"metadata": {}, "status": "Success"})
    } else {
        json!({"metadata": {}, "status": "Failure", "message": format!("command terminated with non-zero exit code: exit status {code}"),
               "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
    };
    let mut frame = vec![3];
    frame.extend_from_slice(body.to_string().as_bytes());
    let _ = sink.send(Message::binary(frame)).await;
    let _ = sink.close().await;
}
