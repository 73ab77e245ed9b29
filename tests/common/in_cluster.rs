//! `gpu-admission serve` as a process in a cluster (KUBERNETES_SERVICE_HOST
//! set) whose kubeconfig points at a [`FakeApiServer`]; called over real
//! TLS, its JSON log kept; killed when dropped.
use super::fake_apiserver::FakeApiServer;
use super::webhooks::Review;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct InCluster {
    child: std::process::Child,
    pub addr: SocketAddr,
    /// The metrics listener's address, unless `--metrics-listen off`.
    pub metrics_addr: Option<SocketAddr>,
    ca_pem: String,
    logs: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl InCluster {
    /// Serves with no metrics listener.
    pub fn serve(fake: &FakeApiServer) -> InCluster {
        InCluster::serve_with(fake, &["--metrics-listen", "off"])
    }

    /// [`InCluster::serve`] with `extra` flags (and the metrics listener
    /// on 127.0.0.1:9090 unless they say otherwise).
    pub fn serve_with(fake: &FakeApiServer, extra: &[&str]) -> InCluster {
        use std::io::BufRead as _;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = fake.kubeconfig(dir.path());
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
            .args(["serve", "--listen", "127.0.0.1:0", "--health-listen", "off"])
            .args(extra)
            .args(["--log-format", "json", "--certs-dir"])
            .arg(dir.path().join("certs"))
            .env("KUBECONFIG", &kubeconfig)
            .env("KUBERNETES_SERVICE_HOST", fake.addr.ip().to_string())
            .env("KUBERNETES_SERVICE_PORT", fake.addr.port().to_string())
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let kept = logs.clone();
        // Keeps draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let entry: Value = serde_json::from_str(&line).unwrap_or_default();
                for field in ["metrics_addr", "addr"] {
                    if let Some(addr) = entry["fields"][field].as_str() {
                        let _ = tx.send((field, addr.parse::<SocketAddr>().unwrap()));
                    }
                }
                kept.lock().unwrap().push(line);
            }
        });
        let mut metrics_addr = None;
        let addr = loop {
            match rx
                .recv_timeout(Duration::from_secs(30))
                .expect("serve logs its address")
            {
                ("addr", addr) => break addr,
                (_, addr) => metrics_addr = Some(addr),
            }
        };
        let ca_pem = std::fs::read_to_string(dir.path().join("certs/ca.crt")).unwrap();
        InCluster {
            child,
            addr,
            metrics_addr,
            ca_pem,
            logs,
            _dir: dir,
        }
    }

    pub async fn request(&self, method: &str, path: &str, body: &[u8]) -> (u16, String) {
        let config = super::http::client_config(&self.ca_pem, &[b"http/1.1"]);
        let mut client = super::http::Client::connect(self.addr, config, "localhost")
            .await
            .expect("connects");
        let response = client.request(method, path, body).await.unwrap();
        (response.status, response.text())
    }

    /// Waits (at most 30 s) until /readyz answers ok.
    pub async fn wait_until_ready(&self) {
        self.wait_for_readyz((200, "ok\n")).await;
    }

    /// Waits (at most 30 s) until /readyz answers `expected`.
    pub async fn wait_for_readyz(&self, expected: (u16, &str)) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.request("GET", "/readyz", b"").await;
            if (got.0, got.1.as_str()) == expected {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "/readyz never answered {expected:?}; last {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The message of /validate's denial of `review`, waiting (at most
    /// 30 s) for what the server watches to bring it about.
    pub async fn denial_eventually(&self, review: &Value, what: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (allowed, message) = self.validate(review).await;
            if !allowed {
                return message;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what} never reached /validate"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether /validate allows `review`, and its message.
    pub async fn validate(&self, review: &Value) -> (bool, String) {
        let (status, body) = self
            .request("POST", "/validate", &serde_json::to_vec(review).unwrap())
            .await;
        assert_eq!(status, 200, "{body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        let response = &body["response"];
        let message = response["status"]["message"].as_str().unwrap_or_default();
        (response["allowed"] == true, message.to_string())
    }

    /// Whether /validate allows the CREATE of `pod`, and its message.
    pub async fn validate_pod(&self, pod: &Value) -> (bool, String) {
        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": Review::create(pod.clone()).request("1b7e1a9c-52d4-4e0c-8a52-5f0c7a1d2e31"),
        });
        self.validate(&review).await
    }

    /// Whether a log line contains `text`.
    pub fn logged(&self, text: &str) -> bool {
        self.logs.lock().unwrap().iter().any(|l| l.contains(text))
    }

    /// The first log line that contains `text`, as JSON.
    pub fn log_line(&self, text: &str) -> Option<Value> {
        let logs = self.logs.lock().unwrap();
        let line = logs.iter().find(|l| l.contains(text))?;
        serde_json::from_str(line).ok()
    }

    /// The value of the sample `name` (with its labels, as exposed) on the
    /// metrics listener; 0 when absent.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = self.metrics_get("/metrics").await;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }

    /// The answer (status line, headers and body) to `GET path` on the
    /// metrics listener (`/metrics`, `/report`).
    pub async fn metrics_get(&self, path: &str) -> String {
        let addr = self.metrics_addr.expect("the metrics listener is on");
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).await.unwrap();
        text
    }

    /// Sends SIGTERM and waits (at most 20 s) for the server to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("serve still runs 20 s after SIGTERM");
    }
}

impl Drop for InCluster {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
