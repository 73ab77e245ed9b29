//! End-to-end load: the webhook server in-process on loopback, driven over
//! N keep-alive TLS connections with AdmissionReviews of a GPU pod, against
//! a bare TLS server with the same TLS stack that answers a fixed 200 (the
//! floor). Prints requests/s and latency percentiles for both, and the ratio.
//!
//! `cargo bench --bench e2e`; tune with GPU_ADMISSION_BENCH_CONNECTIONS
//! (default 16) and GPU_ADMISSION_BENCH_REQUESTS (default 20000). Without
//! `--bench` (as under `cargo test --benches`) it runs a short smoke pass.
#[allow(dead_code)]
#[path = "../tests/common/http.rs"]
mod http;

use gpu_admission::admission::Admission;
use gpu_admission::cli::serve::load_bundle;
use gpu_admission::policy::NamespaceLookup;
use gpu_admission::server::{tls, Metrics, ServeConfig, Server, ShutdownHandle};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// No run takes longer than this, whatever the request count.
const TIME_LIMIT: Duration = Duration::from_secs(60);

struct NoNamespaces;

impl NamespaceLookup for NoNamespaces {
    fn namespace(&self, _name: &str) -> Option<serde_json::Value> {
        None
    }
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let (connections, requests) = if benching {
        (
            env_usize("GPU_ADMISSION_BENCH_CONNECTIONS", 16),
            env_usize("GPU_ADMISSION_BENCH_REQUESTS", 20_000),
        )
    } else {
        (2, 200)
    };
    // As `serve` builds it: evaluation runs inline on the blocking threads.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(gpu_admission::policy::EVALUATION_STACK)
        .on_thread_start(gpu_admission::policy::mark_evaluation_thread)
        .build()
        .expect("runtime");
    runtime.block_on(run(connections, requests));
}

async fn run(connections: usize, requests: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let names = vec!["localhost".to_string()];
    let ensured = gpu_admission::certs::ensure(dir.path(), &names).expect("certificates");
    let client_tls = http::client_config(&ensured.ca_pem, &[b"http/1.1"]);

    // The webhook, with the shipped policy folder when there is one.
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let config = ServeConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        metrics_listen: None,
        tls_cert: Some(ensured.paths.cert.clone()),
        tls_key: Some(ensured.paths.key.clone()),
        policies: policies.is_dir().then_some(policies),
        ..ServeConfig::default()
    };
    let bundle = load_bundle(&config).expect("policy bundle");
    let admission = Arc::new(Admission::new(bundle, Arc::new(NoNamespaces)));
    let shutdown = ShutdownHandle::new();
    let server = Server::bind(config, admission, Metrics::new(), shutdown.clone())
        .await
        .expect("server binds");
    let webhook_addr = server.local_addr();
    let server_task = tokio::spawn(server.run());

    let floor_addr = start_floor(&ensured.paths.cert, &ensured.paths.key).await;

    let body = serde_json::to_vec(&gpu_pod_review()).expect("review");
    let request = http::request_bytes("POST", "/validate?timeout=10s", &body);
    let mutate_request = http::request_bytes("POST", "/mutate?timeout=10s", &body);
    println!(
        "e2e: {connections} keep-alive TLS connections, {requests} requests of {} bytes each",
        body.len()
    );
    // Warm both up (handshakes, allocator, caches).
    drive(
        floor_addr,
        &client_tls,
        &request,
        connections,
        requests / 10 + 1,
    )
    .await;
    drive(
        webhook_addr,
        &client_tls,
        &request,
        connections,
        requests / 10 + 1,
    )
    .await;

    let floor = drive(floor_addr, &client_tls, &request, connections, requests).await;
    floor.print("floor (bare TLS, fixed 200)");
    let mutate = drive(
        webhook_addr,
        &client_tls,
        &mutate_request,
        connections,
        requests,
    )
    .await;
    mutate.print("webhook /mutate");
    let webhook = drive(webhook_addr, &client_tls, &request, connections, requests).await;
    webhook.print("webhook /validate");
    println!(
        "ratio webhook/floor: throughput {:.2}, p50 {:.2}, p99 {:.2}",
        webhook.rate / floor.rate,
        ratio(webhook.p(50.0), floor.p(50.0)),
        ratio(webhook.p(99.0), floor.p(99.0)),
    );
    println!(
        "ratio mutate/floor: throughput {:.2}, p50 {:.2}, p99 {:.2}",
        mutate.rate / floor.rate,
        ratio(mutate.p(50.0), floor.p(50.0)),
        ratio(mutate.p(99.0), floor.p(99.0)),
    );
    if webhook.failed + mutate.failed + floor.failed > 0 {
        println!(
            "failed requests: validate {}, mutate {}, floor {}",
            webhook.failed, mutate.failed, floor.failed
        );
    }
    shutdown.trigger();
    let _ = tokio::time::timeout(Duration::from_secs(5), server_task).await;
}

/// A bare TLS server with the webhook's TLS stack answering a fixed 200.
async fn start_floor(cert: &Path, key: &Path) -> SocketAddr {
    let certified = tls::load_certified_key(cert, key).expect("certificate");
    let resolver = Arc::new(tls::CertResolver::new(certified));
    let config = tls::server_config(resolver).expect("TLS config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let builder = Arc::new(hyper_util::server::conn::auto::Builder::new(
            TokioExecutor::new(),
        ));
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let builder = builder.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        use http_body_util::BodyExt as _;
                        let _ = req.into_body().collect().await;
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Full::new(axum::body::Bytes::from_static(
                                b"{\"ok\":true}",
                            )),
                        ))
                    },
                );
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

struct Run {
    latencies: Vec<Duration>,
    rate: f64,
    failed: usize,
}

impl Run {
    fn p(&self, percentile: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((percentile / 100.0) * (self.latencies.len() - 1) as f64).round() as usize;
        self.latencies[rank.min(self.latencies.len() - 1)]
    }

    fn print(&self, label: &str) {
        println!(
            "{label:30} {:>9.0} req/s  p50 {:>8.3} ms  p90 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms",
            self.rate,
            ms(self.p(50.0)),
            ms(self.p(90.0)),
            ms(self.p(99.0)),
            ms(self.latencies.last().copied().unwrap_or_default()),
        );
    }
}

async fn drive(
    addr: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    request: &[u8],
    connections: usize,
    total: usize,
) -> Run {
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let request: Arc<[u8]> = request.into();
    let deadline = Instant::now() + TIME_LIMIT;
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (next, failed, request, tls) =
                (next.clone(), failed.clone(), request.clone(), tls.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut client = None;
                while next.fetch_add(1, Ordering::Relaxed) < total && Instant::now() < deadline {
                    if client.is_none() {
                        client = http::Client::connect(addr, tls.clone(), "localhost")
                            .await
                            .ok();
                    }
                    let Some(c) = client.as_mut() else {
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let sent = Instant::now();
                    match c.send(&request).await {
                        Ok(r) if r.status == 200 => latencies.push(sent.elapsed()),
                        _ => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            client = None;
                        }
                    }
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(total);
    for task in tasks {
        latencies.extend(task.await.unwrap_or_default());
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    Run {
        rate: latencies.len() as f64 / elapsed.as_secs_f64(),
        latencies,
        failed: failed.load(Ordering::Relaxed),
    }
}

fn gpu_pod_review() -> serde_json::Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reviews/pod-create-gpu.json");
    let text = std::fs::read_to_string(path).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn ratio(a: Duration, b: Duration) -> f64 {
    if b.is_zero() {
        0.0
    } else {
        a.as_secs_f64() / b.as_secs_f64()
    }
}
