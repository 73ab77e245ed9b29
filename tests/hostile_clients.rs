//! Small hostile clients cannot stop admission. Each test runs a real
//! `gpu-admission serve` process with its shipped defaults, starts one
//! attack from its own loopback addresses (127.0.0.2 and up), and while it
//! runs sends what the cluster sends: `/mutate` and `/validate` reviews with
//! `?timeout=10s`, each on a new connection (so a new connection is served
//! whatever the attack holds), and the kubelet's probes on the probe
//! listener. Every review must get its answer within its timeout, every
//! probe within 2 s, and the process's peak resident memory must stay under
//! the Deployment's 256 MiB limit with the attack at its worst.
//!
//! Timing matters here, so the tests run against a release build:
//! `cargo test --release --test release_checks hostile_clients:: --
//! --test-threads=1` (`.ci/run` does); a debug build lists them as ignored. Each prints the attack's size and the
//! figures measured; docs/server.md records them.
use crate::common;

use common::hostile::{burst, large_pod_review, pod_review, tally, ServerProcess};
use common::http::{client_config, request_bytes, Client};
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;

const MIB: u64 = 1024 * 1024;
/// The Deployment's memory limit.
const MEMORY_LIMIT: u64 = 256 * MIB;
/// The apiserver's timeout on every review sent here.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// The kubelet's probe timeout in the Deployment.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long legitimate traffic runs beside an attack.
const OBSERVED: Duration = Duration::from_secs(8);
const DECLARED_BODY: usize = 7 * 1024 * 1024;

/// A server with the shipped defaults, and its peak resident memory once
/// it has answered a review on each endpoint (before any attack).
async fn server() -> (ServerProcess, u64) {
    let server = ServerProcess::start(Path::new(env!("CARGO_BIN_EXE_gpu-admission")), &[]);
    let body = pod_review(r#"[{"name":"NCCL_DEBUG","value":"INFO"}]"#);
    for path in ["/mutate", "/validate"] {
        assert_eq!(server.post(path, &body).await.0, 200);
    }
    let rest = server.memory().1;
    (server, rest)
}

/// A TCP connection to `to` from loopback address `from`.
async fn tcp_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    let tcp = socket.connect(to).await?;
    tcp.set_nodelay(true)?;
    Ok(tcp)
}

/// A TLS connection to the webhook from `from`, offering `alpn`.
async fn tls_from(
    server: &ServerProcess,
    from: IpAddr,
    alpn: &[u8],
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = tcp_from(from, server.addr).await?;
    tokio_rustls::TlsConnector::from(client_config(&server.ca_pem, &[alpn]))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
}

fn attacker(n: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, n])
}

/// What the legitimate clients saw.
#[derive(Default)]
struct Seen {
    answered: AtomicUsize,
    worst_millis: AtomicU64,
    failures: std::sync::Mutex<Vec<String>>,
}

impl Seen {
    fn record(&self, took: Duration, failure: Option<String>) {
        self.worst_millis
            .fetch_max(took.as_millis() as u64, Ordering::Relaxed);
        match failure {
            None => {
                self.answered.fetch_add(1, Ordering::Relaxed);
            }
            Some(failure) => self.failures.lock().unwrap().push(failure),
        }
    }

    fn check(&self, what: &str, within: Duration) -> (usize, u64) {
        let failures = self.failures.lock().unwrap();
        let answered = self.answered.load(Ordering::Relaxed);
        let worst = self.worst_millis.load(Ordering::Relaxed);
        assert!(
            failures.is_empty(),
            "{} of {} {what} failed: {:?}",
            failures.len(),
            failures.len() + answered,
            &failures[..failures.len().min(5)]
        );
        assert!(answered > 0, "no {what} was sent");
        assert!(
            worst <= within.as_millis() as u64,
            "the slowest {what} took {worst} ms"
        );
        (answered, worst)
    }
}

/// Reviews as kube-apiserver sends them, one at a time per endpoint, each
/// on a new connection, for `OBSERVED`.
async fn reviews(server: &ServerProcess, seen: Arc<Seen>) {
    let body = pod_review(r#"[{"name":"NCCL_DEBUG","value":"INFO"}]"#);
    let config = client_config(&server.ca_pem, &[b"http/1.1"]);
    let until = Instant::now() + OBSERVED;
    let one = |path: &'static str| {
        let (seen, body, config, addr) = (seen.clone(), body.clone(), config.clone(), server.addr);
        async move {
            while Instant::now() < until {
                let started = Instant::now();
                let exchange = async {
                    let mut client = Client::connect(addr, config.clone(), "localhost").await?;
                    client
                        .request("POST", &format!("{path}?timeout=10s"), &body)
                        .await
                };
                let failure = match tokio::time::timeout(REVIEW_TIMEOUT, exchange).await {
                    Err(_) => Some(format!("{path}: no answer within {REVIEW_TIMEOUT:?}")),
                    Ok(Err(err)) => Some(format!("{path}: {err}")),
                    Ok(Ok(response)) => {
                        let answer: Value =
                            serde_json::from_slice(&response.body).unwrap_or_default();
                        if response.status != 200 || answer["response"]["uid"].is_null() {
                            Some(format!("{path}: {} {}", response.status, response.text()))
                        } else {
                            None
                        }
                    }
                };
                seen.record(started.elapsed(), failure);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    tokio::join!(one("/mutate"), one("/validate"));
}

/// The kubelet's probes: a new plain-HTTP connection each, every 250 ms,
/// for `OBSERVED`.
async fn probes(addr: SocketAddr, seen: Arc<Seen>) {
    let until = Instant::now() + OBSERVED;
    while Instant::now() < until {
        for path in ["/readyz", "/healthz"] {
            let started = Instant::now();
            let failure = match tokio::time::timeout(PROBE_TIMEOUT, plain_get(addr, path)).await {
                Err(_) => Some(format!("{path}: no answer within {PROBE_TIMEOUT:?}")),
                Ok(Err(err)) => Some(format!("{path}: {err}")),
                Ok(Ok(head)) if head.starts_with("HTTP/1.1 200") => None,
                Ok(Ok(head)) => Some(format!("{path}: {head}")),
            };
            seen.record(started.elapsed(), failure);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `GET path` over plain HTTP/1.1 with `Connection: close`; the answer's
/// first line.
async fn plain_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: probe\r\nUser-Agent: kube-probe/1.33\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await?;
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer);
    Ok(text.lines().next().unwrap_or("").to_string())
}

/// Runs the cluster's traffic beside an attack that is already under way;
/// checks it and the memory, and prints the figures under `attack`, with
/// the peak's growth over `rest` per attacking connection.
async fn cluster_traffic_survives(
    server: &ServerProcess,
    rest: u64,
    connections: usize,
    attack: &str,
) {
    let (review_seen, probe_seen) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
    tokio::join!(
        reviews(server, review_seen.clone()),
        probes(server.health_addr, probe_seen.clone())
    );
    let (_, peak) = server.memory();
    let (reviews, worst_review) = review_seen.check("review", REVIEW_TIMEOUT);
    let (probes, worst_probe) = probe_seen.check("probe", PROBE_TIMEOUT);
    eprintln!(
        "{attack}: {reviews} reviews answered (slowest {worst_review} ms), {probes} probes (slowest {worst_probe} ms), peak RSS {:.1} MiB ({:.1} MiB before the attack, {:.1} KiB more per attacking connection)",
        peak as f64 / MIB as f64,
        rest as f64 / MIB as f64,
        peak.saturating_sub(rest) as f64 / 1024.0 / connections as f64
    );
    assert!(
        peak < MEMORY_LIMIT,
        "{attack}: peak RSS {:.1} MiB",
        peak as f64 / MIB as f64
    );
}

/// The counter `series` on the metrics listener.
async fn metric(server: &ServerProcess, series: &str) -> f64 {
    let mut tcp = TcpStream::connect(server.metrics_addr).await.unwrap();
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    tcp.read_to_string(&mut text).await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// On one HTTP/2 connection, stream after stream to `path`, each declaring
/// a 7 MiB body and sending one byte of it, until the connection fails.
async fn declare_bodies(
    mut send: h2::client::SendRequest<hyper::body::Bytes>,
    path: &str,
    streams: Arc<AtomicUsize>,
) -> Result<std::convert::Infallible, h2::Error> {
    loop {
        send = send.ready().await?;
        let request = hyper::Request::post(format!("https://localhost{path}?timeout=30s"))
            .header("content-type", "application/json")
            .header("content-length", DECLARED_BODY.to_string())
            .body(())
            .unwrap();
        let (response, mut body) = send.send_request(request, false)?;
        body.send_data(hyper::body::Bytes::from_static(b"{"), false)?;
        streams.fetch_add(1, Ordering::Relaxed);
        let _ = response.await;
    }
}

/// Attack 1a: HTTP/2 streams each declaring a 7 MiB body and sending one
/// byte of it, 16 at a time (the server's stream limit) on each of 8
/// connections, a new stream as soon as one is refused, for the whole run.
/// Memory is taken as bytes arrive, so they hold next to nothing, and each
/// is cut once it falls behind the body pace (2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(debug_assertions, ignore = "timing: run with --release")]
async fn bodies_declared_and_never_sent_hold_nothing() {
    const CONNECTIONS: usize = 8;
    let (server, rest) = server().await;
    let stop = Arc::new(tokio::sync::Notify::new());
    let streams = Arc::new(AtomicUsize::new(0));
    let mut attack = Vec::new();
    for c in 0..CONNECTIONS {
        let tls = tls_from(&server, attacker(2), b"h2").await.unwrap();
        let (send, connection) = h2::client::handshake(tls).await.unwrap();
        tokio::spawn(connection);
        for s in 0..16 {
            let (send, streams, stop) = (send.clone(), streams.clone(), stop.clone());
            let path = if (c + s) % 2 == 0 {
                "/validate"
            } else {
                "/mutate"
            };
            attack.push(tokio::spawn(async move {
                let round = declare_bodies(send, path, streams);
                tokio::select! {
                    _ = round => {}
                    _ = stop.notified() => {}
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster_traffic_survives(
        &server,
        rest,
        CONNECTIONS,
        "declared 7 MiB bodies never sent",
    )
    .await;
    stop.notify_waiters();
    let opened = streams.load(Ordering::Relaxed);
    let cut = metric(
        &server,
        r#"gpu_admission_rejected_requests_total{endpoint="validate",reason="body_timeout"}"#,
    )
    .await;
    eprintln!(
        "attack: {CONNECTIONS} HTTP/2 connections, {opened} streams declaring {} MiB each ({:.0} GiB declared), one body byte each; {cut} /validate bodies cut for pace",
        DECLARED_BODY >> 20,
        (opened * DECLARED_BODY) as f64 / (1u64 << 30) as f64
    );
    assert!(opened >= CONNECTIONS * 16, "{opened} streams");
    assert!(
        cut > 0.0,
        "the cut bodies are counted where the shedding alert looks"
    );
    for task in attack {
        task.abort();
    }
}

/// Attack 1b: 300 HTTP/1 connections each declaring a 7 MiB body and
/// trickling it at a byte a second; each cut one reconnects at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(debug_assertions, ignore = "timing: run with --release")]
async fn bodies_trickled_a_byte_a_second_are_cut_and_hold_nothing() {
    const CONNECTIONS: usize = 300;
    let (server, rest) = server().await;
    let sent = Arc::new(AtomicUsize::new(0));
    let rounds = Arc::new(AtomicUsize::new(0));
    let mut attack = Vec::new();
    for i in 0..CONNECTIONS {
        let (sent, rounds) = (sent.clone(), rounds.clone());
        let (addr, ca) = (server.addr, server.ca_pem.clone());
        let from = attacker(3 + (i % 4) as u8);
        attack.push(tokio::spawn(async move {
            loop {
                let Ok(tcp) = tcp_from(from, addr).await else {
                    continue;
                };
                let Ok(mut tls) = tokio_rustls::TlsConnector::from(client_config(&ca, &[b"http/1.1"]))
                    .connect("localhost".try_into().unwrap(), tcp)
                    .await
                else {
                    continue;
                };
                rounds.fetch_add(1, Ordering::Relaxed);
                let head = format!(
                    "POST /validate?timeout=30s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {DECLARED_BODY}\r\n\r\n"
                );
                if tls.write_all(head.as_bytes()).await.is_err() {
                    continue;
                }
                sent.fetch_add(head.len(), Ordering::Relaxed);
                loop {
                    if tls.write_all(b" ").await.is_err() || tls.flush().await.is_err() {
                        break;
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    let mut byte = [0u8; 1];
                    // An answer (the 408) or a close ends this round.
                    if let Ok(Ok(_)) =
                        tokio::time::timeout(Duration::from_secs(1), tls.read(&mut byte)).await
                    {
                        break;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster_traffic_survives(&server, rest, CONNECTIONS, "bodies trickled at 1 byte/s").await;
    for task in &attack {
        task.abort();
    }
    let cut = metric(
        &server,
        r#"gpu_admission_rejected_requests_total{endpoint="validate",reason="body_timeout"}"#,
    )
    .await;
    eprintln!(
        "attack: {CONNECTIONS} connections from 4 addresses, {} rounds, {} bytes sent; {cut} bodies cut for pace",
        rounds.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed)
    );
    assert!(cut >= CONNECTIONS as f64, "each trickle is cut: {cut}");
}

/// One HTTP/2 HEADERS frame, `GET /healthz`, ending stream `id`.
fn healthz_headers(id: u32) -> Vec<u8> {
    let mut block = vec![0x82, 0x87]; // :method GET, :scheme https
    block.push(0x04); // :path, literal without indexing
    block.push(8);
    block.extend_from_slice(b"/healthz");
    block.push(0x01); // :authority, literal without indexing
    block.push(9);
    block.extend_from_slice(b"localhost");
    let mut frame = Vec::with_capacity(9 + block.len());
    frame.extend_from_slice(&(block.len() as u32).to_be_bytes()[1..]);
    frame.push(0x1); // HEADERS
    frame.push(0x1 | 0x4); // END_STREAM | END_HEADERS
    frame.extend_from_slice(&id.to_be_bytes());
    frame.extend_from_slice(&block);
    frame
}

/// Attack 2a: 800 HTTP/2 connections (past the cap of 700) each asking 250
/// `GET /healthz` in one write and never reading an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(debug_assertions, ignore = "timing: run with --release")]
async fn http2_answers_never_read_stay_bounded() {
    const CONNECTIONS: usize = 800;
    const STREAMS: u32 = 250;
    let (server, rest) = server().await;
    let mut request = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    request.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]); // SETTINGS
    for s in 0..STREAMS {
        request.extend(healthz_headers(2 * s + 1));
    }
    let mut held = Vec::new();
    let started = Instant::now();
    for i in 0..CONNECTIONS {
        let mut tls = tls_from(&server, attacker(10 + (i % 8) as u8), b"h2")
            .await
            .unwrap();
        tls.write_all(&request).await.unwrap();
        tls.flush().await.unwrap();
        held.push(tls);
    }
    eprintln!(
        "attack: {CONNECTIONS} HTTP/2 connections from 8 addresses, {STREAMS} GET /healthz each ({} bytes each) in {:.1} s, never read",
        request.len(),
        started.elapsed().as_secs_f64()
    );
    cluster_traffic_survives(&server, rest, CONNECTIONS, "HTTP/2 answers never read").await;
    drop(held);
}

/// Attack 2b: 800 HTTP/1 connections (past the cap of 700) pipelining reviews whose
/// uid is the longest accepted, writing for as long as the server reads,
/// and never reading an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(debug_assertions, ignore = "timing: run with --release")]
async fn pipelined_answers_never_read_stay_bounded() {
    const CONNECTIONS: usize = 800;
    let (server, rest) = server().await;
    let mut review: Value = serde_json::from_slice(&pod_review("[]")).unwrap();
    review["request"]["uid"] = Value::from("u".repeat(gpu_admission::review::MAX_UID_BYTES));
    let one = request_bytes(
        "POST",
        "/validate?timeout=10s",
        &serde_json::to_vec(&review).unwrap(),
    );
    let batch: Vec<u8> = one.repeat(16);
    let sent = Arc::new(AtomicUsize::new(0));
    let mut attack = Vec::new();
    for i in 0..CONNECTIONS {
        let mut tls = tls_from(&server, attacker(20 + (i % 8) as u8), b"http/1.1")
            .await
            .unwrap();
        let (batch, sent) = (batch.clone(), sent.clone());
        attack.push(tokio::spawn(async move {
            // Keeps writing while the server reads; a write that blocks
            // for a second means the server stopped reading from it.
            while let Ok(Ok(())) =
                tokio::time::timeout(Duration::from_secs(1), tls.write_all(&batch)).await
            {
                sent.fetch_add(batch.len(), Ordering::Relaxed);
            }
            // Held, unread, until the test ends.
            std::future::pending::<()>().await;
            drop(tls);
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster_traffic_survives(&server, rest, CONNECTIONS, "pipelined answers never read").await;
    let cut = metric(
        &server,
        r#"gpu_admission_connections_closed_total{listener="webhook",reason="write_timeout"}"#,
    )
    .await;
    eprintln!(
        "attack: {CONNECTIONS} HTTP/1 connections from 8 addresses, {:.1} MiB of pipelined reviews ({} bytes each, uid of {} bytes); {cut} connections cut for the write timeout",
        sent.load(Ordering::Relaxed) as f64 / MIB as f64,
        one.len(),
        gpu_admission::review::MAX_UID_BYTES
    );
    for task in attack {
        task.abort();
    }
}

/// Attack 3: 1,500 keep-alive connections, one request each, then idle,
/// opened as fast as the server takes them: beyond the cap (700) each
/// new one makes the quietest leave, and new connections are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(debug_assertions, ignore = "timing: run with --release")]
async fn idle_connections_at_the_cap_make_room_for_new_ones() {
    const CONNECTIONS: usize = 1500;
    let (server, rest) = server().await;
    let config = client_config(&server.ca_pem, &[b"http/1.1"]);
    let started = Instant::now();
    let opened = Arc::new(AtomicUsize::new(0));
    let mut held = Vec::new();
    for chunk in 0..CONNECTIONS / 100 {
        let mut batch = Vec::new();
        for i in 0..100 {
            let (config, addr, opened) = (config.clone(), server.addr, opened.clone());
            let from = attacker(30 + ((chunk * 100 + i) % 8) as u8);
            batch.push(tokio::spawn(async move {
                let tcp = tcp_from(from, addr).await.ok()?;
                let mut tls = tokio_rustls::TlsConnector::from(config)
                    .connect("localhost".try_into().unwrap(), tcp)
                    .await
                    .ok()?;
                tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    .await
                    .ok()?;
                let mut answer = [0u8; 512];
                let n = tls.read(&mut answer).await.ok()?;
                (n > 0).then(|| opened.fetch_add(1, Ordering::Relaxed))?;
                Some(tls)
            }));
        }
        for task in batch {
            if let Ok(Some(tls)) = task.await {
                held.push(tls);
            }
        }
    }
    eprintln!(
        "attack: {CONNECTIONS} keep-alive connections from 8 addresses, {} served once in {:.1} s, then idle",
        opened.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        opened.load(Ordering::Relaxed),
        CONNECTIONS,
        "every connection was served, past the cap too"
    );
    cluster_traffic_survives(
        &server,
        rest,
        CONNECTIONS,
        "1,500 idle keep-alive connections",
    )
    .await;
    let evicted = metric(
        &server,
        r#"gpu_admission_connections_closed_total{listener="webhook",reason="evicted"}"#,
    )
    .await;
    assert!(evicted >= 500.0, "{evicted} idle connections made room");
    drop(held);
}

/// Attack 4: the metrics listener's 64 connections and the probe
/// listener's 16 held idle, and as many again trickling request heads:
/// the kubelet's probes still answer within their timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(debug_assertions, ignore = "timing: run with --release")]
async fn probes_answer_whatever_holds_the_other_listeners() {
    let (server, rest) = server().await;
    let mut held = Vec::new();
    for (addr, n) in [(server.metrics_addr, 64 * 2), (server.health_addr, 16 * 2)] {
        for i in 0..n {
            let Ok(mut tcp) = tcp_from(attacker(40 + (i % 4) as u8), addr).await else {
                continue;
            };
            let head: &[u8] = if i % 2 == 0 {
                b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            } else {
                b"GET /healthz HTTP/1.1\r\nHo"
            };
            let _ = tcp.write_all(head).await;
            held.push(tcp);
        }
    }
    eprintln!(
        "attack: {} plain connections held on the metrics and probe listeners (128 and 32: twice their caps), half idle, half mid-head",
        held.len()
    );
    cluster_traffic_survives(
        &server,
        rest,
        held.len(),
        "metrics and probe listeners held",
    )
    .await;
    drop(held);
}

/// Not an attack: kube-apiserver's burst. It is one address (or a few),
/// and sends many large reviews at once: 50 GPU pod reviews of 3 MiB from
/// one address, far past its share of body memory (about 35 MiB), over
/// HTTP/1 (a connection each) and over HTTP/2 (4 connections). The
/// bodies that do not fit wait for memory, held back by TCP and HTTP/2
/// flow control, and every review is allowed within its timeout; none is
/// refused for the address's share, and memory stays under the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(debug_assertions, ignore = "timing: run with --release")]
async fn a_burst_of_large_reviews_from_one_address_waits_for_memory() {
    const REVIEWS: usize = 50;
    let (server, rest) = server().await;
    let body = large_pod_review(3 << 20);
    for (what, http2) in [("HTTP/1", None), ("HTTP/2 on 4 connections", Some(4))] {
        let started = Instant::now();
        let answers = burst(
            server.addr,
            &server.ca_pem,
            "/validate?timeout=10s",
            &body,
            REVIEWS,
            http2,
            REVIEW_TIMEOUT,
        )
        .await;
        let (allowed, other) = tally(&answers);
        eprintln!(
            "burst over {what}: {allowed} of {REVIEWS} reviews of {:.1} MiB allowed in {:.2} s, others {other:?}",
            body.len() as f64 / MIB as f64,
            started.elapsed().as_secs_f64()
        );
        assert_eq!(allowed, REVIEWS, "{what}: {other:?}");
    }
    let refused = metric(
        &server,
        r#"gpu_admission_rejected_requests_total{endpoint="validate",reason="client_share"}"#,
    )
    .await;
    assert_eq!(refused, 0.0);
    let (_, peak) = server.memory();
    eprintln!(
        "burst: peak RSS {:.1} MiB ({:.1} MiB at rest)",
        peak as f64 / MIB as f64,
        rest as f64 / MIB as f64
    );
    assert!(
        peak < MEMORY_LIMIT,
        "peak RSS {:.1} MiB",
        peak as f64 / MIB as f64
    );
}
