//! Test harness: the real server on 127.0.0.1:0 with a test CA, called
//! over real TLS.
#![allow(dead_code)]

pub mod configmap;
pub mod crd_schema;
pub mod fake_apiserver;
pub mod hostile;
pub mod http;
pub mod in_cluster;
pub mod prometheus;
pub mod shared_data;
pub mod webhooks;

use axum::http::StatusCode;
use gpu_admission::admission::{Admission, Bundle};
use gpu_admission::k8s::NamespaceLookup;
use gpu_admission::review::{Request, Response};
use gpu_admission::server::{
    Answer, Endpoint, Hints, Metrics, ServeConfig, Server, ShutdownHandle, Step, Webhook,
};
use http::{client_config, Client, HttpResponse};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What `gpu-admission` prints on standard output, run with `args`; the
/// run must succeed.
pub fn run_cli<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// A config for tests: loopback listeners on free ports, short timeouts.
pub fn config() -> ServeConfig {
    ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        health_listen: Some("127.0.0.1:0".parse().unwrap()),
        header_read_timeout: Duration::from_secs(2),
        drain_window: Duration::from_secs(1),
        drain_timeout: Duration::from_secs(10),
        ..ServeConfig::default()
    }
}

/// A running server and what a client needs to reach it.
pub struct TestServer {
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub health_addr: Option<SocketAddr>,
    /// The CA the serving certificate chains to (PEM).
    pub ca_pem: String,
    /// Directory holding ca.crt (and, when self-generated, tls.crt/tls.key).
    pub certs_dir: PathBuf,
    pub shutdown: ShutdownHandle,
    pub task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _tmp: Option<tempfile::TempDir>,
}

impl TestServer {
    /// Starts the server with an empty policy bundle.
    pub async fn start(config: ServeConfig) -> TestServer {
        TestServer::start_with(config, Arc::new(empty_admission())).await
    }

    /// Starts the server answering with `webhook`. Without TLS files in
    /// `config`, certificates are generated into a temporary `certs_dir`;
    /// with them, `config.certs_dir` must hold the CA as `ca.crt`.
    pub async fn start_with(config: ServeConfig, webhook: Arc<dyn Webhook>) -> TestServer {
        TestServer::start_with_metrics(config, webhook, Metrics::new()).await
    }

    /// [`TestServer::start_with`], exporting `metrics` (which may carry
    /// families of its own) on /metrics.
    pub async fn start_with_metrics(
        mut config: ServeConfig,
        webhook: Arc<dyn Webhook>,
        metrics: Metrics,
    ) -> TestServer {
        let tmp = if config.tls_cert.is_none() {
            let tmp = tempfile::tempdir().unwrap();
            config.certs_dir = tmp.path().join("certs");
            Some(tmp)
        } else {
            None
        };
        let certs_dir = config.certs_dir.clone();
        let shutdown = ShutdownHandle::new();
        let server = Server::bind(config, webhook, metrics, shutdown.clone())
            .await
            .expect("server binds");
        let addr = server.local_addr();
        let metrics_addr = server.metrics_addr();
        let health_addr = server.health_addr();
        let ca_pem = std::fs::read_to_string(certs_dir.join("ca.crt")).expect("ca.crt");
        let task = tokio::spawn(server.run());
        TestServer {
            addr,
            metrics_addr,
            health_addr,
            ca_pem,
            certs_dir,
            shutdown,
            task,
            _tmp: tmp,
        }
    }

    /// A new keep-alive HTTP/1.1 connection, verifying the server as `localhost`.
    pub async fn connect(&self) -> Client {
        self.try_connect().await.expect("connects")
    }

    pub async fn try_connect(&self) -> std::io::Result<Client> {
        Client::connect(
            self.addr,
            client_config(&self.ca_pem, &[b"http/1.1"]),
            "localhost",
        )
        .await
    }

    /// POSTs an AdmissionReview; the body is parsed as JSON when it is JSON
    /// and returned as a string otherwise.
    pub async fn post_review(&self, path: &str, review: &Value) -> (StatusCode, Value) {
        let body = serde_json::to_vec(review).unwrap();
        let response = self.post_raw(path, &body).await;
        (status(&response), body_value(&response))
    }

    pub async fn post_raw(&self, path: &str, body: &[u8]) -> HttpResponse {
        let mut client = self.connect().await;
        client.request("POST", path, body).await.expect("response")
    }

    pub async fn get(&self, path: &str) -> (StatusCode, String) {
        let mut client = self.connect().await;
        let response = client.request("GET", path, b"").await.expect("response");
        (status(&response), response.text())
    }

    /// GET on the plain-HTTP metrics listener.
    pub async fn get_metrics_listener(&self, path: &str) -> (StatusCode, String) {
        let addr = self.metrics_addr.expect("metrics listener");
        plain_get(addr, path).await
    }

    /// GET `path` on the probe listener.
    pub async fn get_health_listener(&self, path: &str) -> (StatusCode, String) {
        let addr = self.health_addr.expect("probe listener");
        plain_get(addr, path).await
    }

    /// The value of the sample `name` (with its labels, as exported) on
    /// /metrics; 0 when absent.
    pub async fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.get_metrics_listener("/metrics").await;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }

    /// Waits (at most 20 s) until the sample `name` is above `floor`, and
    /// returns it.
    pub async fn wait_for_metric_above(&self, name: &str, floor: f64) -> f64 {
        for _ in 0..200 {
            let value = self.metric(name).await;
            if value > floor {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{name} stayed at {floor} or below for 20 s");
    }

    /// Starts draining and waits for the server to exit.
    pub async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(15), self.task)
            .await
            .expect("server stops")
            .unwrap()
            .unwrap();
    }
}

pub fn status(response: &HttpResponse) -> StatusCode {
    StatusCode::from_u16(response.status).unwrap()
}

pub fn body_value(response: &HttpResponse) -> Value {
    serde_json::from_slice(&response.body).unwrap_or_else(|_| Value::String(response.text()))
}

/// A GET over plain HTTP/1.1 (metrics listener).
pub async fn plain_get(addr: SocketAddr, path: &str) -> (StatusCode, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    tcp.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let code: u16 = text.split(' ').nth(1).unwrap().parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (StatusCode::from_u16(code).unwrap(), body)
}

/// Loads `tests/fixtures/reviews/<name>`.
pub fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/reviews")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// An AdmissionReview v1 as kube-apiserver sends it for `operation`
/// (`CREATE`, `UPDATE`) of `object` (for UPDATE, over `old`), made by
/// `username`. The resource is the kind's lower-case plural; the namespace
/// is the object's (absent for cluster-scoped objects).
pub fn admission_review(
    uid: &str,
    operation: &str,
    object: &Value,
    old: Option<&Value>,
    username: &str,
) -> Value {
    let kind = object["kind"].as_str().unwrap_or("Pod");
    let api_version = object["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = format!("{}s", kind.to_ascii_lowercase());
    let options_kind = if operation == "UPDATE" {
        "UpdateOptions"
    } else {
        "CreateOptions"
    };
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": object["metadata"]["name"].as_str().unwrap_or(""),
            "namespace": object["metadata"].get("namespace").cloned().unwrap_or(Value::Null),
            "operation": operation,
            "userInfo": {"username": username, "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind}
        }
    })
}

/// The JSON patch of an AdmissionReview response, decoded from its base64
/// string; `None` when it has none.
pub fn review_patch(response: &Value) -> Option<json_patch::Patch> {
    use base64::Engine as _;
    let encoded = response["response"]["patch"].as_str()?;
    assert_eq!(response["response"]["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("base64 patch");
    Some(serde_json::from_slice(&bytes).expect("RFC 6902 patch"))
}

/// An Admission with no policies and no placement profiles.
pub fn empty_admission() -> Admission {
    Admission::new(Bundle::default(), Arc::new(NoNamespaces))
}

pub struct NoNamespaces;

impl NamespaceLookup for NoNamespaces {
    fn namespace(&self, _name: &str) -> Option<Arc<Value>> {
        None
    }
}

/// A webhook that takes `delay` per answer (a slow evaluation is the
/// behaviour under test: its sleep paces nothing the test waits for),
/// counts calls and the most calls seen at once, and answers with `answer`.
pub struct SlowWebhook {
    pub delay: Duration,
    pub answer: Answer,
    pub running: AtomicUsize,
    pub max_running: AtomicUsize,
    pub calls: AtomicUsize,
}

impl SlowWebhook {
    pub fn new(delay: Duration) -> SlowWebhook {
        SlowWebhook {
            delay,
            answer: Response::allow().into(),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
        }
    }

    fn answer_slowly(&self) -> Answer {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.answer.clone()
    }
}

/// Answers on an answering thread, with the production kind labels.
impl Webhook for SlowWebhook {
    fn hints(&self) -> Hints {
        Hints {
            metric_kinds: gpu_admission::admission::METRIC_KINDS,
            ..Hints::default()
        }
    }

    fn answer(self: Arc<Self>, _: Endpoint, _: &Arc<Request>, _: std::time::Instant) -> Step {
        Step::Resume(Box::new(move |_| self.answer_slowly()))
    }
}

/// The documents of every ```yaml block of the page.
pub fn yaml_documents(markdown: &str) -> Vec<Value> {
    let mut documents = Vec::new();
    let mut block: Option<String> = None;
    for line in markdown.lines() {
        match (&mut block, line.trim_start()) {
            (None, "```yaml") => block = Some(String::new()),
            (Some(text), "```") => {
                for doc in serde_yaml::Deserializer::from_str(text) {
                    let value = <Value as serde::Deserialize>::deserialize(doc)
                        .unwrap_or_else(|e| panic!("a YAML block does not parse: {e}\n{text}"));
                    documents.push(value);
                }
                block = None;
            }
            (Some(text), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(block.is_none(), "a ```yaml block is not closed");
    documents
}
