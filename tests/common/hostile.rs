//! Hostile AdmissionReview bodies sent to a real `gpu-admission serve`
//! process, and the process's resident memory read from /proc. Shared by
//! the memory test and the memory benchmark.
#![allow(dead_code)]

use super::http::{client_config, Client};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Just under the server's 7 MiB body limit.
pub const HOSTILE_BODY_BYTES: usize = 7 * 1024 * 1024 - 4096;

/// The two shapes a hostile body takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A GPU pod whose container has ~230,000 small env entries.
    EnvEntries,
    /// A GPU pod whose env list is ~900,000 one-key objects `{"a":0}`.
    OneKeyObjects,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::EnvEntries => "env entries",
            Shape::OneKeyObjects => "one-key objects",
        }
    }
}

/// A GPU pod review whose container env list is the given JSON items.
pub fn pod_review(env: &str) -> Vec<u8> {
    let head = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "6a0c3b1e-9f7d-4a52-8e1b-2d4c6f8a0b13",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "trainer",
            "namespace": "ml",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "trainer", "namespace": "ml"},
                "spec": {"containers": [{
                    "name": "train",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    "env": "ENV"
                }]}
            },
            "oldObject": null,
            "dryRun": false
        }
    })
    .to_string();
    head.replace("\"ENV\"", env).into_bytes()
}

/// An AdmissionReview of `operation` on `object` (and `old`, or null) in
/// namespace `ml`, with kind and resource from the object.
pub fn review_of(operation: &str, object: Value, old: Value) -> Vec<u8> {
    let kind = object["kind"].as_str().unwrap().to_string();
    let api_version = object["apiVersion"].as_str().unwrap().to_string();
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0f9e8d7c-6b5a-4c3d-9e2f-1a0b9c8d7e6f",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "name": object["metadata"]["name"],
            "namespace": "ml",
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": false
        }
    }))
    .unwrap()
}

/// A review of `shape` whose body is `HOSTILE_BODY_BYTES` long, give or
/// take one item.
pub fn hostile_review(shape: Shape) -> Vec<u8> {
    let frame = pod_review("[]").len();
    let room = HOSTILE_BODY_BYTES - frame;
    let mut env = String::with_capacity(room + 64);
    env.push('[');
    let mut i = 0usize;
    while env.len() < room - 40 {
        if i > 0 {
            env.push(',');
        }
        match shape {
            Shape::EnvEntries => env.push_str(&format!(r#"{{"name":"E{i}","value":"1"}}"#)),
            Shape::OneKeyObjects => env.push_str(r#"{"a":0}"#),
        }
        i += 1;
    }
    env.push(']');
    let body = pod_review(&env);
    assert!(body.len() <= HOSTILE_BODY_BYTES, "{}", body.len());
    body
}

/// A `gpu-admission serve` child process on loopback ports.
pub struct ServerProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub health_addr: SocketAddr,
    pub ca_pem: String,
    _certs: tempfile::TempDir,
}

impl ServerProcess {
    /// Starts `binary serve` with the built-in policies and `extra` flags,
    /// and waits until it listens.
    pub fn start(binary: &Path, extra: &[&str]) -> ServerProcess {
        let certs = tempfile::tempdir().unwrap();
        let mut child = Command::new(binary)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
                "--health-listen",
                "127.0.0.1:0",
            ])
            .args(["--log-format", "json", "--certs-dir"])
            .arg(certs.path())
            .args(extra)
            .env("RUST_LOG", "warn,gpu_admission::server=info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // Keeps draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let (mut metrics, mut health) = (None, None);
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if sent {
                    continue;
                }
                let Ok(entry) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let field = |name: &str| {
                    entry["fields"][name]
                        .as_str()
                        .map(|a| a.parse::<SocketAddr>().unwrap())
                };
                metrics = metrics.or(field("metrics_addr"));
                health = health.or(field("health_addr"));
                if let Some(addr) = field("addr") {
                    let _ = tx.send((addr, metrics, health));
                    sent = true;
                }
            }
        });
        let (addr, metrics_addr, health_addr) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("server logs its address");
        let ca_pem = std::fs::read_to_string(certs.path().join("ca.crt")).unwrap();
        ServerProcess {
            child,
            addr,
            metrics_addr: metrics_addr.expect("server logs its metrics address"),
            health_addr: health_addr.expect("server logs its probe address"),
            ca_pem,
            _certs: certs,
        }
    }

    /// Resident memory now and at its peak (VmRSS, VmHWM), in bytes.
    pub fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|kib| kib.parse::<u64>().ok())
                .map(|kib| kib * 1024)
                .unwrap_or_else(|| panic!("{name} in /proc/<pid>/status"))
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Posts `body` to `path` on a new connection; the status and the JSON
    /// answer (Null when the answer is not JSON).
    pub async fn post(&self, path: &str, body: &[u8]) -> (u16, Value) {
        let tls = client_config(&self.ca_pem, &[b"http/1.1"]);
        let mut client = Client::connect(self.addr, tls, "localhost").await.unwrap();
        let response = client.request("POST", path, body).await.unwrap();
        let json = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
        (response.status, json)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The largest review of one-key objects the default limits still decode:
/// the worst body that gets past sizing, as far as memory goes.
pub fn near_limit_review() -> Vec<u8> {
    let limits = gpu_admission::review::Limits::default();
    let fits = |n: usize| {
        let body = pod_review(&format!("[{}]", vec![r#"{"a":0}"#; n].join(",")));
        let envelope = gpu_admission::review::open(&body).unwrap();
        envelope.measure(&limits).is_ok().then_some(body)
    };
    let (mut low, mut high) = (1usize, 1usize << 20);
    while high - low > 1 {
        let mid = (low + high) / 2;
        if fits(mid).is_some() {
            low = mid;
        } else {
            high = mid;
        }
    }
    fits(low).unwrap()
}

/// [`near_limit_review`] as an UPDATE whose object and oldObject are both
/// that largest object: the largest request sizing lets through.
pub fn near_limit_update() -> Vec<u8> {
    let mut review: Value = serde_json::from_slice(&near_limit_review()).unwrap();
    review["request"]["operation"] = serde_json::json!("UPDATE");
    review["request"]["oldObject"] = review["request"]["object"].clone();
    serde_json::to_vec(&review).unwrap()
}

/// Peak resident memory of one server for hostile bodies of `shape` sent
/// to `path`: (peak after warm-up, peak after one body, peak after four at
/// once), in bytes, and the answers to the bodies.
pub async fn measure(binary: &Path, path: &str, shape: Shape) -> (Figures, Vec<(u16, Value)>) {
    measure_body(binary, path, &hostile_review(shape)).await
}

/// [`measure`] for any body.
pub async fn measure_body(binary: &Path, path: &str, body: &[u8]) -> (Figures, Vec<(u16, Value)>) {
    let server = ServerProcess::start(binary, &[]);
    let normal = pod_review(r#"[{"name":"NCCL_DEBUG","value":"INFO"}]"#);
    for path in ["/mutate", "/validate"] {
        let (status, _) = server.post(path, &normal).await;
        assert_eq!(status, 200);
    }
    let baseline = server.memory().1;
    let mut answers = vec![server.post(path, body).await];
    let one = server.memory().1;
    let (a, b, c, d) = tokio::join!(
        server.post(path, body),
        server.post(path, body),
        server.post(path, body),
        server.post(path, body)
    );
    answers.extend([a, b, c, d]);
    let four = server.memory().1;
    (
        Figures {
            baseline,
            one,
            four,
        },
        answers,
    )
}

/// Peak resident memory, in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Figures {
    pub baseline: u64,
    pub one: u64,
    pub four: u64,
}

impl Figures {
    pub fn mib(bytes: u64) -> f64 {
        bytes as f64 / (1024.0 * 1024.0)
    }
}

/// A GPU pod review of about `bytes`, most of it in env values of 32 KiB
/// (few JSON values, as a large real pod is: its size is in its text).
pub fn large_pod_review(bytes: usize) -> Vec<u8> {
    const VALUE: usize = 32 * 1024;
    let entries: Vec<String> = (0..bytes / VALUE)
        .map(|i| format!(r#"{{"name":"CONFIG_{i}","value":"{}"}}"#, "x".repeat(VALUE)))
        .collect();
    pod_review(&format!("[{}]", entries.join(",")))
}

/// What one review of a [`burst`] got: its HTTP status and the answer
/// (Null when not JSON), or why it got none.
pub type BurstAnswer = Result<(u16, Value), String>;

/// `n` copies of `body` posted to `path` at once from one address
/// (loopback), as kube-apiserver sends a burst: over HTTP/1, each on a
/// connection of its own, or over HTTP/2, spread over `http2_connections`
/// connections. Each waits at most `within` for its answer.
pub async fn burst(
    addr: SocketAddr,
    ca_pem: &str,
    path: &str,
    body: &[u8],
    n: usize,
    http2_connections: Option<usize>,
    within: Duration,
) -> Vec<BurstAnswer> {
    use http_body_util::{BodyExt as _, Full};
    use hyper::body::Bytes;
    let body = Bytes::copy_from_slice(body);
    let mut tasks = Vec::new();
    match http2_connections {
        None => {
            let tls = client_config(ca_pem, &[b"http/1.1"]);
            for _ in 0..n {
                let (tls, body, path) = (tls.clone(), body.clone(), path.to_string());
                tasks.push(tokio::spawn(async move {
                    let exchange = async {
                        let mut client = Client::connect(addr, tls, "localhost").await?;
                        client.request("POST", &path, &body).await
                    };
                    match tokio::time::timeout(within, exchange).await {
                        Err(_) => Err(format!("no answer within {within:?}")),
                        Ok(Err(e)) => Err(e.to_string()),
                        Ok(Ok(response)) => Ok((
                            response.status,
                            serde_json::from_slice(&response.body).unwrap_or(Value::Null),
                        )),
                    }
                }));
            }
        }
        Some(connections) => {
            let tls = client_config(ca_pem, &[b"h2"]);
            let mut senders = Vec::new();
            for _ in 0..connections {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                tcp.set_nodelay(true).unwrap();
                let stream = tokio_rustls::TlsConnector::from(tls.clone())
                    .connect("localhost".try_into().unwrap(), tcp)
                    .await
                    .unwrap();
                let (sender, conn) = hyper::client::conn::http2::handshake(
                    hyper_util::rt::TokioExecutor::new(),
                    hyper_util::rt::TokioIo::new(stream),
                )
                .await
                .unwrap();
                tokio::spawn(conn);
                senders.push(sender);
            }
            for i in 0..n {
                let mut sender = senders[i % connections].clone();
                let request = hyper::Request::post(format!("https://localhost{path}"))
                    .header("content-type", "application/json")
                    .body(Full::new(body.clone()))
                    .unwrap();
                tasks.push(tokio::spawn(async move {
                    let exchange = async {
                        sender.ready().await?;
                        let response = sender.send_request(request).await?;
                        let status = response.status().as_u16();
                        let bytes = response.into_body().collect().await?.to_bytes();
                        Ok::<_, hyper::Error>((status, bytes))
                    };
                    match tokio::time::timeout(within, exchange).await {
                        Err(_) => Err(format!("no answer within {within:?}")),
                        Ok(Err(e)) => Err(e.to_string()),
                        Ok(Ok((status, bytes))) => Ok((
                            status,
                            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                        )),
                    }
                }));
            }
        }
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

/// Counts of a [`burst`]'s answers: allowed reviews, and every other
/// outcome with how often it came (status and reason or message).
pub fn tally(answers: &[BurstAnswer]) -> (usize, std::collections::BTreeMap<String, usize>) {
    let mut allowed = 0;
    let mut other = std::collections::BTreeMap::new();
    for answer in answers {
        let what = match answer {
            Ok((200, review)) if review["response"]["allowed"] == true => {
                allowed += 1;
                continue;
            }
            Ok((200, review)) => format!(
                "200 denied: {}",
                review["response"]["status"]["message"]
                    .as_str()
                    .unwrap_or("")
            ),
            Ok((status, _)) => format!("HTTP {status}"),
            Err(e) => e.clone(),
        };
        *other.entry(what).or_insert(0) += 1;
    }
    (allowed, other)
}
