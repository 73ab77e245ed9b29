//! Start-up and resident memory of the release binary: `gpu-admission
//! serve` with built-in policies and certificates already in its
//! --certs-dir, timed from spawn until /readyz on the metrics port answers
//! 200; then VmRSS at idle and after N reviews of the GPU pod fixture
//! (alternately /mutate and /validate, over one TLS connection). Several
//! runs; prints the median, the fastest and the slowest.
//!
//! `cargo bench --bench startup`; GPU_ADMISSION_BENCH_RUNS (default 10) and
//! GPU_ADMISSION_BENCH_REVIEWS (default 200) tune it, GPU_ADMISSION_BIN
//! measures another build. Without `--bench` it runs once with 10 reviews.

#[allow(dead_code)]
#[path = "../tests/common/http.rs"]
mod http;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let (runs, reviews) = if benching {
        (
            env_usize("GPU_ADMISSION_BENCH_RUNS", 10),
            env_usize("GPU_ADMISSION_BENCH_REVIEWS", 200),
        )
    } else {
        (1, 10)
    };
    let binary = std::env::var_os("GPU_ADMISSION_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gpu-admission")));
    let certs = tempfile::tempdir().expect("temp dir");
    let ensured = gpu_admission::certs::ensure_for_serving(certs.path()).expect("certificates");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let body = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reviews/pod-create-gpu.json"),
    )
    .expect("fixture");

    println!("binary: {}", binary.display());
    let mut ready = Vec::new();
    let mut idle = Vec::new();
    let mut served = Vec::new();
    for _ in 0..runs {
        let (listen, metrics) = (free_port(), free_port());
        let started = Instant::now();
        let child = Command::new(&binary)
            .args(["serve", "--listen", &listen.to_string()])
            .args([
                "--metrics-listen",
                &metrics.to_string(),
                "--health-listen",
                "off",
            ])
            .arg("--certs-dir")
            .arg(certs.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve starts");
        let server = Running(child);
        wait_ready(metrics, &server);
        ready.push(started.elapsed());
        std::thread::sleep(Duration::from_millis(500));
        idle.push(server.rss());
        runtime.block_on(review(listen, &ensured.ca_pem, &body, reviews));
        std::thread::sleep(Duration::from_millis(200));
        served.push(server.rss());
    }
    let ready_ms: Vec<f64> = ready.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    let mib = |v: &[u64]| -> Vec<f64> { v.iter().map(|b| *b as f64 / 1048576.0).collect() };
    println!("{runs} runs (median, fastest, slowest)");
    print_row("start to ready", &ready_ms, "ms");
    print_row("VmRSS at idle", &mib(&idle), "MiB");
    print_row(
        &format!("VmRSS after {reviews} reviews"),
        &mib(&served),
        "MiB",
    );
}

/// Sends `count` reviews, alternately to /mutate and /validate, checking
/// each answer echoes the uid.
async fn review(addr: SocketAddr, ca_pem: &str, body: &[u8], count: usize) {
    let tls = http::client_config(ca_pem, &[b"http/1.1"]);
    let mut client = http::Client::connect(addr, tls, "localhost")
        .await
        .expect("TLS connection");
    let mutate = http::request_bytes("POST", "/mutate?timeout=10s", body);
    let validate = http::request_bytes("POST", "/validate?timeout=10s", body);
    for i in 0..count {
        let request = if i % 2 == 0 { &mutate } else { &validate };
        let response = client.send(request).await.expect("answer");
        let review: serde_json::Value =
            serde_json::from_slice(&response.body).expect("AdmissionReview");
        assert_eq!(response.status, 200);
        assert_eq!(
            review["response"]["uid"],
            "3f1c2a9e-7b4d-4e1a-9c55-0d6e2b8f4a11"
        );
    }
}

struct Running(Child);

impl Running {
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id()))
            .expect("/proc/<pid>/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .expect("VmRSS")
            * 1024
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls plain-HTTP /readyz every millisecond until it answers 200.
fn wait_ready(metrics: SocketAddr, server: &Running) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if readyz(metrics).unwrap_or(false) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("pid {} not ready after 30 s", server.0.id());
}

fn readyz(addr: SocketAddr) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect(addr)?;
    stream.write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    Ok(answer.starts_with(b"HTTP/1.1 200"))
}

fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

fn print_row(label: &str, values: &[f64], unit: &str) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    println!(
        "{label:28} {:>8.1} {unit}  ({:.1} to {:.1})",
        sorted[sorted.len() / 2],
        sorted[0],
        sorted[sorted.len() - 1]
    );
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}
