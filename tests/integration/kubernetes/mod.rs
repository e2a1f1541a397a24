//! The `kubernetes` backend against a fake API server (`fake_api`): the real binary with `sandbox:
//! kubernetes`, real programs and tool calls, each runner a local process behind a pod's exec stream. No
//! cluster runs here: what these tests cannot show (a real scheduler, kubelet, runtime class, NetworkPolicy,
//! the agent-sandbox controller) is listed in the README's "The kubernetes sandbox".

mod fake_api;

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::*;
use fake_api::{Behaviour, FakeKube, NAMESPACE, WARM_POOL};

/// Skips unless the binary has the backend (`--features kubernetes`; CI requires it: `PTC_REQUIRE`), and in the
/// runs of the suite under a real sandbox (these tests do not depend on it: they run once).
fn built_with_kubernetes() -> Option<()> {
    if sandbox_under_test() != "none" {
        skip("the kubernetes backend's tests run in the suite's run under none (they use no local sandbox)");
        return None;
    }
    let built = if cfg!(feature = "kubernetes") {
        Ok(())
    } else {
        Err("the binary was built without --features kubernetes".to_string())
    };
    require("kubernetes", built)
}

/// `execution` keys for the fake: its kubeconfig, the namespace, and `extra` keys under `kubernetes`.
fn kube_config(fake: &FakeKube, servers: &[String], execution: &str, extra: &str) -> String {
    let servers =
        if servers.is_empty() { "servers: []\n".to_string() } else { format!("servers:\n{}", servers.concat()) };
    format!(
        "{servers}execution:\n  sandbox: kubernetes\n  kubernetes:\n    kubeconfig: {}\n    namespace: {NAMESPACE}\n{extra}{execution}",
        fake.kubeconfig.display()
    )
}

/// `kubernetes` keys naming a template file (in `dir`) with this text.
fn template_keys(dir: &tempfile::TempDir, text: &str) -> String {
    let path = dir.path().join("pod.yaml");
    std::fs::write(&path, text).unwrap();
    format!("    template: {}\n", path.display())
}

/// The pod bodies the server created.
fn created_pods(fake: &FakeKube) -> Vec<Value> {
    fake.requests_to("POST", &format!("/namespaces/{NAMESPACE}/pods")).into_iter().map(|r| r.body).collect()
}

#[apply(integration_test!)]
async fn programs_run_in_runner_pods_with_their_tool_calls_over_the_exec_stream() {
    let Some(()) = built_with_kubernetes() else { return };
    let fake = FakeKube::start(Behaviour::default()).await;
    let ptc = Ptc::start(&kube_config(&fake, &[mock_server("mock", &[])], "  pool_size: 0\n", "")).await;
    let code = "import os\nr = await mcp__mock__add(a=2, b=3)\nprint(r['sum'], os.getcwd() == os.environ['HOME'])\n\
                open('note.txt', 'w').write('kept in scratch')\nprint(open('note.txt').read())";
    let text = ptc.execute(code).await.expect_ok();
    assert!(text.contains("5 True\nkept in scratch\n"), "{text}");
    let error = ptc.execute("raise ValueError('no')").await.expect_error();
    assert!(error.contains("ValueError: no"), "{error}");
    // The probe's pod and one per run, each deleted once done with.
    let pods = created_pods(&fake);
    assert_eq!(pods.len(), 3, "{pods:?}");
    assert!(
        eventually(Duration::from_secs(20), || fake.pod_names().is_empty()).await,
        "pods left: {:?}",
        fake.pod_names()
    );
    let execs = fake.requests_to("GET", "/exec");
    assert_eq!(execs.len(), 3);
    for exec in &execs {
        assert_eq!(exec.query_values("container"), ["runner"]);
        assert_eq!(exec.query_values("stdin"), ["true"]);
        assert!(exec.protocols.contains("v5.channel.k8s.io") && exec.protocols.contains("v4.channel.k8s.io"));
        // The runner's source arrives on stdin: the command line stays small.
        let command = exec.query_values("command");
        assert_eq!(command[..4], ["python3", "-I", "-S", "-c"]);
        assert!(command.concat().len() < 1024, "{command:?}");
    }
}

#[apply(integration_test!)]
async fn a_runner_pod_is_confined_labelled_and_sized_as_documented() {
    let Some(()) = built_with_kubernetes() else { return };
    let fake = FakeKube::start(Behaviour::default()).await;
    let execution = "  pool_size: 0\n  limits:\n    memory_mb: 300\n    scratch_mb: 20\n";
    let ptc = Ptc::start(&kube_config(&fake, &[], execution, "    runtime_class: gvisor\n")).await;
    ptc.execute("print('ok')").await.expect_ok();
    let pod = created_pods(&fake).pop().unwrap();
    let spec = &pod["spec"];
    assert_eq!(spec["runtimeClassName"], "gvisor");
    assert_eq!(spec["automountServiceAccountToken"], false, "no service-account token");
    assert_eq!(spec["enableServiceLinks"], false);
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(spec["hostname"], "sandbox");
    assert_eq!(spec["dnsPolicy"], "None");
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(spec["securityContext"]["runAsUser"], 65534);
    assert_eq!(spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(spec["containers"].as_array().unwrap().len(), 1);
    let container = &spec["containers"][0];
    assert_eq!(container["name"], "runner");
    assert_eq!(container["image"], "python:3.12-slim");
    let context = &container["securityContext"];
    assert_eq!(context["allowPrivilegeEscalation"], false);
    assert_eq!(context["readOnlyRootFilesystem"], true);
    assert_eq!(context["privileged"], false);
    assert_eq!(context["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(container["resources"]["limits"], json!({"cpu": "1", "memory": "320Mi"}), "memory holds the scratch");
    assert_eq!(container["resources"]["requests"], container["resources"]["limits"]);
    assert_eq!(spec["volumes"], json!([{"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "20Mi"}}]));
    assert_eq!(container["volumeMounts"], json!([{"name": "scratch", "mountPath": "/scratch"}]));
    assert_eq!(container["workingDir"], "/scratch");
    let env: Vec<String> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| format!("{}={}", v["name"].as_str().unwrap(), v["value"].as_str().unwrap()))
        .collect();
    assert_eq!(env, ["HOME=/scratch", "TMPDIR=/scratch", "LOGNAME=ptc", "USER=ptc"]);
    let labels = &pod["metadata"]["labels"];
    assert_eq!(labels["app.kubernetes.io/managed-by"], "ptc-mcp");
    let instance = labels["ptc-mcp.server"].as_str().unwrap();
    assert!(instance.starts_with(&format!("{}-", ptc.child.id().unwrap())), "{instance}");
    assert!(pod["metadata"]["name"].as_str().unwrap().starts_with(&format!("ptc-runner-{instance}-")));
    for key in ["hostNetwork", "hostPID", "hostIPC"] {
        assert_eq!(spec[key], false, "{key}");
    }
}

#[apply(integration_test!)]
async fn a_template_gives_the_image_resources_and_scheduling_and_may_not_loosen_the_pod() {
    let Some(()) = built_with_kubernetes() else { return };
    let fake = FakeKube::start(Behaviour::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let extra = template_keys(
        &dir,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  labels:\n    team: ml\nspec:\n  nodeSelector:\n    pool: sandboxes\n  \
         containers:\n  - image: registry.example/python:3.12\n    resources:\n      limits:\n        cpu: 500m\n        memory: 1Gi\n",
    );
    let ptc = Ptc::start(&kube_config(&fake, &[], "  pool_size: 0\n", &extra)).await;
    ptc.execute("print('ok')").await.expect_ok();
    let pod = created_pods(&fake).pop().unwrap();
    assert_eq!(pod["spec"]["containers"][0]["image"], "registry.example/python:3.12");
    assert_eq!(pod["spec"]["containers"][0]["resources"]["limits"], json!({"cpu": "500m", "memory": "1Gi"}));
    assert_eq!(pod["spec"]["nodeSelector"], json!({"pool": "sandboxes"}));
    assert_eq!(pod["metadata"]["labels"]["team"], "ml");
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);

    let extra = template_keys(&dir, "kind: Pod\nspec:\n  hostNetwork: true\n");
    let ptc = Ptc::start(&kube_config(&fake, &[], "  pool_size: 0\n", &extra)).await;
    let text = ptc.execute("print('ok')").await.expect_error();
    assert!(
        text.contains(&format!("SandboxError: the 'kubernetes' sandbox is unavailable: execution.kubernetes.template {}: spec.hostNetwork: not for a template", dir.path().join("pod.yaml").display())),
        "{text}"
    );
}

#[apply(integration_test!)]
async fn the_older_v4_stream_protocol_carries_runs_too() {
    let Some(()) = built_with_kubernetes() else { return };
    let fake = FakeKube::start(Behaviour { v4_only: true, ..Default::default() }).await;
    let ptc = Ptc::start(&kube_config(&fake, &[mock_server("mock", &[])], "  pool_size: 1\n", "")).await;
    for n in 0..3 {
        let text = ptc.execute(&format!("print((await mcp__mock__add(a={n}, b=1))['sum'])")).await.expect_ok();
        assert!(text.contains(&format!("\n{}\n", n + 1)), "{text}");
    }
}

#[apply(integration_test!)]
async fn a_runaway_program_is_killed_at_its_timeout_with_its_pod() {
    let Some(()) = built_with_kubernetes() else { return };
    let fake = FakeKube::start(Behaviour::default()).await;
    let ptc = Ptc::start(&kube_config(&fake, &[], "  pool_size: 0\n  timeout_seconds: 2\n", "")).await;
    let text = ptc.execute("print('started', flush=True)\nwhile True:\n    pass").await.expect_error();
    assert!(text.contains("TimeoutError"), "{text}");
    assert!(text.contains("started"), "{text}");
    // The pod is deleted just after the result is sent.
    let deleted = || fake.requests_to("DELETE", "").iter().filter(|r| r.path.contains("/pods/ptc-runner-")).count();
    assert!(
        eventually(Duration::from_secs(20), || deleted() >= 2).await,
        "the probe's pod and the run's: {:?}",
        fake.requests()
    );
    assert!(eventually(Duration::from_secs(20), || fake.pod_names().is_empty()).await);
    assert!(fake.processes().is_empty(), "the runner process was killed with its pod");
    // The next run gets a fresh pod.
    ptc.execute("print('again')").await.expect_ok();
}

#[apply(integration_test!)]
async fn pods_left_by_a_killed_server_are_removed_by_the_next_one() {
    let Some(()) = built_with_kubernetes() else { return };
    let fake = FakeKube::start(Behaviour::default()).await;
    let old = |name: &str, instance: &str, phase: &str, age_seconds: u64| {
        let created = std::time::SystemTime::now() - Duration::from_secs(age_seconds);
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": NAMESPACE, "creationTimestamp": humantime::format_rfc3339_seconds(created).to_string(),
                            "labels": {"app.kubernetes.io/managed-by": "ptc-mcp", "ptc-mcp.server": instance}},
               "spec": {"containers": [{"name": "runner", "image": "python:3.12-slim"}]},
               "status": {"phase": phase}})
    };
    fake.add_pod(old("ended", "1-dead", "Succeeded", 30));
    fake.add_pod(old("failed", "1-dead", "Failed", 30));
    fake.add_pod(old("stuck", "1-dead", "Pending", 3600));
    fake.add_pod(old("starting", "2-alive", "Pending", 5));
    fake.add_pod(old("running", "2-alive", "Running", 3600));
    fake.add_pod(
        json!({"metadata": {"name": "unrelated", "labels": {"app": "web"}}, "status": {"phase": "Succeeded"}}),
    );

    // A server killed mid-run: its runner reads the end of its stream and exits, and its pod ends.
    let mut ptc = Ptc::start(&kube_config(&fake, &[], "  pool_size: 2\n", "")).await;
    ptc.execute("print('warm')").await.expect_ok();
    let peer = ptc.client.peer().clone();
    let params = rmcp::model::CallToolRequestParams::new("execute_program")
        .with_arguments(json!({"code": "import time\ntime.sleep(60)"}).as_object().unwrap().clone());
    let run = tokio::spawn(async move { peer.call_tool(params).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // SIGKILL: no clean-up code runs in the server.
    let instance = format!("{}-", ptc.child.id().unwrap());
    ptc.child.start_kill().unwrap();
    ptc.child.wait().await.unwrap();
    run.abort();
    let of_killed_server = || -> Vec<Value> {
        let names = fake.pod_names();
        let pods = names.iter().filter_map(|name| fake.pod(name));
        pods.filter(|p| p["metadata"]["labels"]["ptc-mcp.server"].as_str().is_some_and(|i| i.starts_with(&instance)))
            .collect()
    };
    let all_ended = || {
        let pods = of_killed_server();
        pods.len() >= 2 && pods.iter().all(|p| p["status"]["phase"] == "Succeeded")
    };
    assert!(eventually(Duration::from_secs(20), all_ended).await, "{:?}", of_killed_server());

    let next = Ptc::start(&kube_config(&fake, &[], "  pool_size: 0\n", "")).await;
    next.execute("print('swept')").await.expect_ok();
    // Ended and long-pending runner pods are removed, no others (the new server's own go after its run).
    let expected = ["running", "starting", "unrelated"];
    assert!(eventually(Duration::from_secs(20), || fake.pod_names() == expected).await, "{:?}", fake.pod_names());
    // Only runner pods were ever listed.
    for list in fake.requests_to("GET", &format!("/namespaces/{NAMESPACE}/pods")) {
        assert_eq!(list.query_values("labelSelector"), ["app.kubernetes.io/managed-by=ptc-mcp,ptc-mcp.server"]);
    }
}

#[apply(integration_test!)]
async fn a_stopped_server_deletes_its_pods_and_claims_itself() {
    let Some(()) = built_with_kubernetes() else { return };
    for warm_pool in [false, true] {
        let fake =
            FakeKube::start(Behaviour { warm_pool: warm_pool.then(|| warm_pod(true)), ..Default::default() }).await;
        let extra = if warm_pool { format!("    warm_pool: {WARM_POOL}\n") } else { String::new() };
        let mut ptc = Ptc::start(&kube_config(&fake, &[], "  pool_size: 2\n", &extra)).await;
        ptc.execute("print('warm')").await.expect_ok();
        // The pool's two ready runners, each in a pod; then a run in one of them.
        assert!(eventually(Duration::from_secs(20), || fake.pod_names().len() == 2).await, "{:?}", fake.pod_names());
        let peer = ptc.client.peer().clone();
        let params = rmcp::model::CallToolRequestParams::new("execute_program")
            .with_arguments(json!({"code": "import time\ntime.sleep(60)"}).as_object().unwrap().clone());
        let run = tokio::spawn(async move { peer.call_tool(params).await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!fake.processes().is_empty());
        // SAFETY: kill with a child pid we own.
        unsafe { libc::kill(ptc.child.id().unwrap() as i32, libc::SIGTERM) };
        let status =
            tokio::time::timeout(Duration::from_secs(30), ptc.child.wait()).await.expect("it stops on SIGTERM");
        assert!(status.unwrap().success());
        run.abort();
        // Gone when the server has exited, not left for the next one's sweep.
        assert_eq!((fake.pod_names(), fake.claim_names()), (vec![], vec![]), "with a warm pool: {warm_pool}");
        assert!(fake.processes().is_empty());
    }
}

#[apply(integration_test!)]
async fn api_errors_and_an_unreachable_api_are_sandbox_errors_that_name_the_fix() {
    let Some(()) = built_with_kubernetes() else { return };
    let forbidden = "pods is forbidden: User \"system:serviceaccount:ptc:ptc-mcp\" cannot create resource \"pods\" in API group \"\" in the namespace \"ptc-runners\"";
    let fake = FakeKube::start(Behaviour {
        refuse: Some(("POST".into(), format!("/api/v1/namespaces/{NAMESPACE}/pods"), 403, forbidden.into())),
        ..Default::default()
    })
    .await;
    let ptc = Ptc::start(&kube_config(&fake, &[], "  pool_size: 0\n", "")).await;
    let text = ptc.execute("print(1)").await.expect_error();
    assert!(
        text.contains(&format!(
            "SandboxError: the 'kubernetes' sandbox is unavailable: the Kubernetes API refused to create pods in namespace \
             '{NAMESPACE}': {forbidden}; bind the server's account to the Role in deploy/kubernetes/runners.yaml \
             (kubectl apply -f deploy/kubernetes/runners.yaml)"
        )),
        "{text}"
    );

    fake.set(|b| {
        b.refuse = None;
        b.no_namespace = true;
    });
    let ptc = Ptc::start(&kube_config(&fake, &[], "  pool_size: 0\n", "")).await;
    let text = ptc.execute("print(1)").await.expect_error();
    assert!(
        text.contains("namespace 'ptc-runners' does not exist; create it with deploy/kubernetes/runners.yaml"),
        "{text}"
    );

    fake.set(|b| b.no_namespace = false);
    let config = kube_config(&fake, &[], "  pool_size: 0\n", "")
        .replace(&fake.kubeconfig.display().to_string(), &fake.kubeconfig_with_token("expired").display().to_string());
    let text = Ptc::start(&config).await.execute("print(1)").await.expect_error();
    assert!(
        text.contains(&format!("the Kubernetes API at {}/ did not accept this client's credentials", fake.url)),
        "{text}"
    );
    assert!(text.contains("renew them (a token may have expired)"), "{text}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let config =
        kube_config(&fake, &[], "  pool_size: 0\n", "").replace(&fake.url, &format!("http://127.0.0.1:{port}"));
    let kubeconfig =
        std::fs::read_to_string(&fake.kubeconfig).unwrap().replace(&fake.url, &format!("http://127.0.0.1:{port}"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("kubeconfig"), kubeconfig).unwrap();
    let config =
        config.replace(&fake.kubeconfig.display().to_string(), &dir.path().join("kubeconfig").display().to_string());
    let text = Ptc::start(&config).await.execute("print(1)").await.expect_error();
    assert!(text.contains(&format!("cannot reach the Kubernetes API at http://127.0.0.1:{port}/: ")), "{text}");
    assert!(
        text.contains(
            "check that the cluster is up and reachable from here, and execution.kubernetes.kubeconfig (or KUBECONFIG)"
        ),
        "{text}"
    );

    let missing = dir.path().join("no-such-kubeconfig");
    let config = kube_config(&fake, &[], "  pool_size: 0\n", "")
        .replace(&fake.kubeconfig.display().to_string(), &missing.display().to_string());
    let text = Ptc::start(&config).await.execute("print(1)").await.expect_error();
    assert!(
        text.contains(&format!("cannot load the Kubernetes client configuration ({})", missing.display())),
        "{text}"
    );
}

#[apply(integration_test!)]
async fn an_image_that_cannot_be_pulled_is_a_clear_error() {
    let Some(()) = built_with_kubernetes() else { return };
    let fake = FakeKube::start(Behaviour::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let extra = template_keys(&dir, "kind: Pod\nspec:\n  containers:\n  - image: missing/python:9\n");
    let ptc = Ptc::start(&kube_config(&fake, &[], "  pool_size: 0\n", &extra)).await;
    let text = ptc.execute("print(1)").await.expect_error();
    assert!(
        text.contains("did not start: ErrImagePull: failed to pull image \"missing/python:9\": not found"),
        "{text}"
    );
    assert!(
        eventually(Duration::from_secs(20), || fake.pod_names().is_empty()).await,
        "the pod that never ran is deleted"
    );
}

/// How long a probe that cannot succeed may take to say so: well under its own time limit (60 s), with room for
/// a busy machine.
const PROMPT: Duration = Duration::from_secs(20);

#[apply(integration_test!)]
async fn an_image_without_python_is_a_clear_error() {
    let Some(()) = built_with_kubernetes() else { return };
    let fake = FakeKube::start(Behaviour::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let extra = template_keys(&dir, "kind: Pod\nspec:\n  containers:\n  - image: nopython/debian:12\n");
    let began = std::time::Instant::now();
    let execution = "  pool_size: 0\n  timeout_seconds: 30\n";
    let text = Ptc::start(&kube_config(&fake, &[], execution, &extra)).await.execute("print(1)").await.expect_error();
    assert!(
        text.contains("image 'nopython/debian:12' has no python3 on its PATH; use an image with CPython 3.9 or later"),
        "{text}"
    );
    assert!(began.elapsed() < PROMPT, "{:?}", began.elapsed());
}

#[apply(integration_test!)]
async fn an_exec_stream_cut_without_a_status_is_a_clear_error_at_once() {
    let Some(()) = built_with_kubernetes() else { return };
    let fake = FakeKube::start(Behaviour { reset_execs: true, ..Default::default() }).await;
    let began = std::time::Instant::now();
    let execution = "  pool_size: 0\n  timeout_seconds: 30\n";
    let text = Ptc::start(&kube_config(&fake, &[], execution, "")).await.execute("print(1)").await.expect_error();
    assert!(text.contains("could not start the runner in pod ptc-runner-"), "{text}");
    assert!(text.contains("the exec stream ended without an exit status"), "{text}");
    assert!(text.contains("Connection reset by peer"), "{text}");
    assert!(began.elapsed() < PROMPT, "{:?}", began.elapsed());
}

#[apply(integration_test!)]
async fn check_sandbox_reports_the_backend_and_what_it_asks_of_the_cluster() {
    let Some(()) = built_with_kubernetes() else { return };
    let fake = FakeKube::start(Behaviour::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, kube_config(&fake, &[], "", "    runtime_class: gvisor\n")).unwrap();
    let output = tokio::process::Command::new(binary())
        .args(["--check-sandbox", "kubernetes", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.starts_with(&format!(
        "kubernetes: available: one pod per run from image 'python:3.12-slim' in namespace '{NAMESPACE}' on {}/ with \
         runtime class 'gvisor' (python 3.",
        fake.url
    )), "{stdout}");
    assert!(stdout.contains("no service-account token"), "{stdout}");
    assert!(eventually(Duration::from_secs(10), || fake.pod_names().is_empty()).await, "the probe's pod is removed");
}

/// The pod the SandboxTemplate of `deploy/kubernetes/warm-pool.yaml` makes, with runtime class `gvisor`;
/// unless `confined`, with a service-account token and the container's security context left out.
fn warm_pod(confined: bool) -> Value {
    use serde::Deserialize;
    let text = std::fs::read_to_string(repo_path("deploy/kubernetes/warm-pool.yaml")).unwrap();
    let template = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|document| Value::deserialize(document).unwrap())
        .find(|document| document["kind"] == "SandboxTemplate")
        .unwrap();
    let mut pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": template["spec"]["podTemplate"]["spec"]});
    pod["spec"]["runtimeClassName"] = json!("gvisor");
    if !confined {
        pod["spec"]["automountServiceAccountToken"] = json!(true);
        pod["spec"]["containers"][0]["securityContext"] = json!({});
    }
    pod
}

#[apply(integration_test!)]
async fn with_a_warm_pool_each_runner_is_a_sandbox_claim() {
    let Some(()) = built_with_kubernetes() else { return };
    let fake = FakeKube::start(Behaviour { warm_pool: Some(warm_pod(true)), ..Default::default() }).await;
    let extra = format!("    warm_pool: {WARM_POOL}\n    runtime_class: gvisor\n");
    let ptc = Ptc::start(&kube_config(&fake, &[mock_server("mock", &[])], "  pool_size: 0\n", &extra)).await;
    let text = ptc.execute("print((await mcp__mock__add(a=20, b=22))['sum'])").await.expect_ok();
    assert!(text.contains("\n42\n"), "{text}");
    assert!(created_pods(&fake).is_empty(), "no pod is created: the pool's are claimed");
    let claims: Vec<Value> = fake.requests_to("POST", "/sandboxclaims").into_iter().map(|r| r.body).collect();
    assert_eq!(claims.len(), 2, "the probe's claim and the run's");
    let claim = &claims[1];
    assert_eq!(claim["apiVersion"], "extensions.agents.x-k8s.io/v1beta1");
    assert_eq!(claim["kind"], "SandboxClaim");
    assert_eq!(claim["spec"]["warmPoolRef"], json!({"name": WARM_POOL}));
    assert_eq!(claim["spec"]["lifecycle"]["shutdownPolicy"], "Delete");
    let name = claim["metadata"]["name"].as_str().unwrap();
    assert_eq!(claim["metadata"]["labels"]["app.kubernetes.io/managed-by"], "ptc-mcp");
    assert_eq!(claim["spec"]["additionalPodMetadata"]["labels"]["ptc-mcp.claim"], name);
    // The runner ran in the pod the sandbox's annotation names; the claim (and with it the pod) is deleted.
    let execs = fake.requests_to("GET", "/exec");
    assert!(execs[1].path.ends_with(&format!("/pods/warm-{name}/exec")), "{:?}", execs[1].path);
    assert!(eventually(Duration::from_secs(20), || fake.claim_names().is_empty()).await, "{:?}", fake.claim_names());
    assert!(fake.pod_names().is_empty());
}

#[apply(integration_test!)]
async fn a_warm_pool_is_refused_without_its_crds_without_the_pool_or_with_unconfined_pods() {
    let Some(()) = built_with_kubernetes() else { return };
    let fake = FakeKube::start(Behaviour::default()).await;
    let extra = format!("    warm_pool: {WARM_POOL}\n");
    let text =
        Ptc::start(&kube_config(&fake, &[], "  pool_size: 0\n", &extra)).await.execute("print(1)").await.expect_error();
    assert!(text.contains("the agent-sandbox CRDs (extensions.agents.x-k8s.io/v1beta1) are not installed"), "{text}");
    assert!(text.contains("or leave execution.kubernetes.warm_pool out"), "{text}");

    fake.set(|b| b.warm_pool = Some(warm_pod(true)));
    let text = Ptc::start(&kube_config(&fake, &[], "  pool_size: 0\n", "    warm_pool: other-pool\n"))
        .await
        .execute("print(1)")
        .await
        .expect_error();
    assert!(text.contains(&format!("there is no SandboxWarmPool 'other-pool' in namespace '{NAMESPACE}'")), "{text}");

    fake.set(|b| b.warm_pool = Some(warm_pod(false)));
    let text =
        Ptc::start(&kube_config(&fake, &[], "  pool_size: 0\n", &extra)).await.execute("print(1)").await.expect_error();
    assert!(text.contains(&format!("claimed from SandboxWarmPool '{WARM_POOL}' is not confined as runner pods must be: it lacks automountServiceAccountToken: false, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: drop ALL, add none")), "{text}");
    assert!(fake.requests_to("GET", "/exec").is_empty(), "nothing ran in an unconfined pod");
    assert!(eventually(Duration::from_secs(20), || fake.claim_names().is_empty()).await, "refused claims are deleted");
}

/// The keeper (a runner pod's first process) as pid 1 of a pid namespace of its own, as in a container: it
/// waits for a process to arrive (as an exec'd runner does), ends once that is gone, and ends by itself when
/// none comes within its wait.
#[apply(integration_test!)]
async fn the_keeper_ends_its_pod_once_the_runner_is_gone_or_none_came() {
    let Some(()) = built_with_kubernetes() else { return };
    let works = std::process::Command::new("unshare").args(["--pid", "--fork", "--mount-proc", "true"]).status();
    let Some(()) = require(
        "kubernetes",
        match works {
            Ok(status) if status.success() => Ok(()),
            other => Err(format!("the keeper's test needs `unshare --pid --mount-proc` (root, util-linux): {other:?}")),
        },
    ) else {
        return;
    };
    let keeper = std::fs::read_to_string(repo_path("backends/src/kubernetes/keeper.py")).unwrap();
    let start = |first_wait: &str| {
        tokio::process::Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "--kill-child", "python3", "-I", "-S", "-c", &keeper, first_wait])
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    // Nothing comes: it ends after its wait.
    let began = std::time::Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(30), start("1").wait()).await.unwrap().unwrap();
    assert!(status.success() && began.elapsed() >= Duration::from_secs(1), "{status:?} after {:?}", began.elapsed());

    // A runner comes (nsenter joins the namespace as an exec does) and leaves: it ends after it, not before.
    let mut keeper_process = start("0");
    let unshare_pid = keeper_process.id().unwrap();
    // The keeper is unshare's child, pid 1 inside.
    let inner = loop {
        let children =
            std::fs::read_to_string(format!("/proc/{unshare_pid}/task/{unshare_pid}/children")).unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            break pid.to_string();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(keeper_process.try_wait().unwrap().is_none(), "with no wait limit it waits for its runner");
    let runner =
        tokio::process::Command::new("nsenter").args(["-t", &inner, "--pid", "--mount", "--", "sleep", "2"]).status();
    let ran = std::time::Instant::now();
    let (runner_status, keeper_status) = tokio::join!(runner, async {
        tokio::time::timeout(Duration::from_secs(30), keeper_process.wait()).await.unwrap().unwrap()
    });
    assert!(runner_status.unwrap().success());
    assert!(keeper_status.success() && ran.elapsed() >= Duration::from_secs(2), "it ended with its runner, not before");
}
