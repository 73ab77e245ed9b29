//! A real Prometheus (Debian's `prometheus` package; `.ci/run` installs
//! it) on a loopback port, queried through its HTTP API; killed when
//! dropped.
use serde_json::Value;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `name` on PATH; none, saying the test is skipped, when absent.
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        println!("skipped: no `{name}` on PATH (Debian's prometheus package; .ci/run installs it)");
    }
    found
}

pub struct Prometheus {
    child: Child,
    pub url: String,
}

impl Prometheus {
    /// Runs `binary` with the configuration `config` (YAML; JSON is YAML)
    /// and its TSDB in `data`, its files and log in `dir`; returns once
    /// it is ready.
    pub fn start(binary: &Path, dir: &Path, data: &Path, config: &str) -> Prometheus {
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg("--storage.tsdb.retention.time=30d")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let mut prometheus = Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        // A bound on the wait, not an assertion on speed.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok((200, _)) = get(port, "/-/ready") {
                break;
            }
            if let Ok(Some(status)) = prometheus.child.try_wait() {
                panic!(
                    "prometheus exited ({status}): {}",
                    std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "prometheus never got ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        prometheus
    }

    pub fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// `GET /api/v1/<api>` with the query `pairs`: its `data`, the call
    /// having succeeded.
    pub fn api(&self, api: &str, pairs: &[(&str, &str)]) -> Value {
        let query = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish();
        let (status, body) = get(self.port(), &format!("/api/v1/{api}?{query}")).unwrap();
        assert_eq!(status, 200, "{api} {pairs:?}: {body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["status"], "success", "{body}");
        answer["data"].clone()
    }

    /// The series (labels and value) of the instant query `promql` now.
    pub fn query(&self, promql: &str) -> Vec<Value> {
        let data = self.api("query", &[("query", promql)]);
        data["result"].as_array().cloned().unwrap_or_default()
    }

    pub fn stop(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` on loopback: (status, body).
pub fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.to_string()))
}
