//! Hostile and heavy clients at the edge: silent and trickling connections
//! are cut after the header timeout on every protocol, a thousand open
//! connections are all served, HTTP/2 rapid reset hurts no one else, at
//! the connection cap the connection idle longest makes room (and busy
//! ones are never closed for it), the metrics listener has the
//! same timeouts, and a shutdown under keep-alive load loses no request.

// Tests read fixtures with `Value::pointer`: clippy.toml keeps it out of
// the crate itself, where objects under admission are read per request.
#![allow(clippy::disallowed_methods)]
mod common;

use axum::body::Bytes;
use common::http::{client_config, Client};
use common::{config, fixture, TestServer};
use gpu_admission::review::{Request, Response};
use gpu_admission::server::{Endpoint, ServeConfig, Step, Webhook};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

const H2: &[u8] = b"h2";
const HTTP1: &[u8] = b"http/1.1";

/// Denies on /validate and allows on /mutate, so an answer shows which
/// endpoint produced it.
struct DenyValidate;

impl Webhook for DenyValidate {
    fn answer(self: Arc<Self>, endpoint: Endpoint, _: &Arc<Request>, _: Instant) -> Step {
        Step::Resume(Box::new(move |_| match endpoint {
            Endpoint::Mutate => Response::allow().into(),
            Endpoint::Validate => Response::deny("validated").into(),
        }))
    }
}

/// A TLS connection to the webhook listener, handshake complete.
async fn tls(server: &TestServer, alpn: &[u8]) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    tokio_rustls::TlsConnector::from(client_config(&server.ca_pem, &[alpn]))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .expect("TLS handshake")
}

/// The GPU pod review with its own uid.
fn review(uid: &str) -> Bytes {
    let mut review = fixture("pod-create-gpu.json");
    review["request"]["uid"] = Value::from(uid);
    Bytes::from(serde_json::to_vec(&review).unwrap())
}

fn post(uri: &str, body: &Bytes) -> hyper::Request<Full<Bytes>> {
    hyper::Request::post(uri)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(body.clone()))
        .unwrap()
}

/// The value of the metric line starting with `series`, if present.
async fn metric(server: &TestServer, series: &str) -> Option<f64> {
    let (_, text) = server.get_metrics_listener("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
}

/// True when a read ends the connection (EOF or error) rather than data.
fn closed(read: &std::io::Result<usize>) -> bool {
    matches!(read, Ok(0) | Err(_))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_tls_connections_are_closed_after_the_header_timeout() {
    let header = Duration::from_secs(2);
    let server = Arc::new(
        TestServer::start(ServeConfig {
            header_read_timeout: header,
            ..config()
        })
        .await,
    );
    // Handshakes a few at a time, so each one finishes well inside the
    // timeout even on a loaded machine; each connection is timed from
    // the end of its own handshake.
    let handshakes = Arc::new(tokio::sync::Semaphore::new(8));
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (server, handshakes) = (server.clone(), handshakes.clone());
        tasks.push(tokio::spawn(async move {
            let permit = handshakes.acquire().await.unwrap();
            // Half offer HTTP/2: neither sends a byte after the handshake.
            let mut stream = tls(&server, if i % 2 == 0 { H2 } else { HTTP1 }).await;
            drop(permit);
            let ready = Instant::now();
            let mut buf = [0u8; 64];
            let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf))
                .await
                .expect("closed by the server");
            (ready.elapsed(), closed(&read))
        }));
    }
    let mut slowest = Duration::ZERO;
    for task in tasks {
        let (elapsed, closed) = task.await.unwrap();
        assert!(closed, "the server sent data to a silent client");
        assert!(
            elapsed <= header + Duration::from_secs(2),
            "a silent connection stayed open {elapsed:?}"
        );
        slowest = slowest.max(elapsed);
    }
    eprintln!("200 silent connections: slowest closed {slowest:?} after its handshake");
    let counted = metric(
        &server,
        r#"gpu_admission_connections_closed_total{listener="webhook",reason="header_timeout"}"#,
    )
    .await;
    assert!(counted >= Some(200.0), "counted {counted:?}");
    // A connection leaves the gauge when its task ends, just after its
    // socket is closed, so the client's end of file can come first: the
    // gauge must reach 0 soon, not at once.
    let mut open = None;
    for _ in 0..50 {
        open = metric(
            &server,
            r#"gpu_admission_open_connections{listener="webhook"}"#,
        )
        .await;
        if open == Some(0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(open, Some(0.0), "still open 5 s after the last close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_headers_are_cut_at_the_header_timeout() {
    let header = Duration::from_secs(2);
    let server = Arc::new(
        TestServer::start(ServeConfig {
            header_read_timeout: header,
            ..config()
        })
        .await,
    );
    // An HTTP/1 head, and an HTTP/2 preface (before protocol detection),
    // each one byte every 500 ms on a connection with no prior request.
    let cases: [(&[u8], &[u8]); 2] = [
        (
            HTTP1,
            b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n",
        ),
        (H2, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    ];
    let mut tasks = Vec::new();
    for (alpn, bytes) in cases {
        let server = server.clone();
        tasks.push(tokio::spawn(async move {
            let stream = tls(&server, alpn).await;
            let started = Instant::now();
            let (mut reader, mut writer) = tokio::io::split(stream);
            let trickle = tokio::spawn(async move {
                for b in bytes {
                    if writer.write_all(&[*b]).await.is_err() || writer.flush().await.is_err() {
                        return;
                    }
                    // Pacing of a client that trickles bytes on purpose.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            });
            let mut buf = [0u8; 64];
            let read = tokio::time::timeout(Duration::from_secs(20), reader.read(&mut buf))
                .await
                .expect("closed by the server");
            let elapsed = started.elapsed();
            let still_trickling = !trickle.is_finished();
            trickle.abort();
            (alpn, elapsed, closed(&read), still_trickling)
        }));
    }
    for task in tasks {
        let (alpn, elapsed, closed, still_trickling) = task.await.unwrap();
        let alpn = String::from_utf8_lossy(alpn);
        assert!(closed, "{alpn}: the server answered a partial head");
        assert!(still_trickling, "{alpn}: the client ran out of bytes first");
        assert!(
            elapsed <= header + Duration::from_millis(1500),
            "{alpn}: a trickling connection stayed open {elapsed:?}"
        );
        eprintln!("{alpn} trickle: cut after {elapsed:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_open_connections_are_all_answered() {
    const CONNECTIONS: usize = 1000;
    let server = Arc::new(
        TestServer::start_with(
            ServeConfig {
                // Held open, silent, while the rest connect.
                header_read_timeout: Duration::from_secs(60),
                max_connections: CONNECTIONS,
                ..config()
            },
            Arc::new(DenyValidate),
        )
        .await,
    );
    let handshakes = Arc::new(tokio::sync::Semaphore::new(32));
    let mut connecting = Vec::new();
    for _ in 0..CONNECTIONS {
        let (server, handshakes) = (server.clone(), handshakes.clone());
        connecting.push(tokio::spawn(async move {
            let _permit = handshakes.acquire().await.unwrap();
            server.connect().await
        }));
    }
    let mut clients: Vec<Client> = Vec::new();
    for task in connecting {
        clients.push(task.await.unwrap());
    }
    let open = metric(
        &server,
        r#"gpu_admission_open_connections{listener="webhook"}"#,
    )
    .await;
    assert_eq!(open, Some(CONNECTIONS as f64));

    let mut answering = Vec::new();
    for (i, mut client) in clients.into_iter().enumerate() {
        answering.push(tokio::spawn(async move {
            let uid = format!("uid-{i}");
            let path = if i % 2 == 0 { "/validate" } else { "/mutate" };
            let response = client
                .request("POST", path, &review(&uid))
                .await
                .expect("answered");
            (i, uid, response)
        }));
    }
    for task in answering {
        let (i, uid, response) = task.await.unwrap();
        assert_eq!(response.status, 200, "connection {i}");
        let body: Value = serde_json::from_slice(&response.body).unwrap();
        assert_eq!(body["response"]["uid"], uid.as_str());
        assert_eq!(body["response"]["allowed"], i % 2 == 1, "connection {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_rapid_reset_does_not_hurt_other_clients() {
    const RESETS: usize = 10_000;
    let server = Arc::new(TestServer::start(config()).await);

    // A well-behaved HTTP/2 client and health probes, for the whole attack.
    let attack_over = Arc::new(AtomicBool::new(false));
    let checker = tokio::spawn({
        let (server, attack_over) = (server.clone(), attack_over.clone());
        async move {
            let (mut sender, conn) = hyper::client::conn::http2::handshake(
                TokioExecutor::new(),
                TokioIo::new(tls(&server, H2).await),
            )
            .await
            .unwrap();
            tokio::spawn(conn);
            let mut answered = 0usize;
            for round in 0.. {
                if attack_over.load(Ordering::SeqCst) && round >= 5 {
                    break;
                }
                let uid = format!("good-{round}");
                let response = tokio::time::timeout(
                    Duration::from_secs(5),
                    sender.send_request(post("https://localhost/validate", &review(&uid))),
                )
                .await
                .expect("answered in time")
                .expect("answered");
                assert_eq!(response.status(), 200);
                let body = response.into_body().collect().await.unwrap().to_bytes();
                let body: Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(body["response"]["uid"], uid.as_str());
                let (status, _) =
                    tokio::time::timeout(Duration::from_secs(5), server.get("/healthz"))
                        .await
                        .expect("healthz in time");
                assert_eq!(status, 200);
                answered += 1;
            }
            answered
        }
    });

    let (client, conn) = h2::client::handshake(tls(&server, H2).await).await.unwrap();
    let driver = tokio::spawn(conn);
    let mut sender = client;
    let mut reset = 0;
    while reset < RESETS {
        sender = match sender.ready().await {
            Ok(ready) => ready,
            Err(_) => break,
        };
        let request = hyper::Request::post("https://localhost/validate")
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        match sender.send_request(request, false) {
            Ok((_response, mut stream)) => {
                stream.send_reset(h2::Reason::CANCEL);
                reset += 1;
            }
            Err(_) => break,
        }
    }
    let attacker_dropped = reset < RESETS;
    attack_over.store(true, Ordering::SeqCst);
    let answered = tokio::time::timeout(Duration::from_secs(30), checker)
        .await
        .expect("checker finishes")
        .expect("every check passed");
    driver.abort();
    let ending = if attacker_dropped {
        "then the server ended the connection"
    } else {
        "the connection stayed open"
    };
    eprintln!("rapid reset: {reset} streams opened and reset, {ending}; {answered} good answers meanwhile");
    assert!(answered >= 5);

    // And after it: a fresh connection is answered.
    let (status, body) = server
        .post_review("/validate", &fixture("pod-create-gpu.json"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body["response"]["uid"],
        "3f1c2a9e-7b4d-4e1a-9c55-0d6e2b8f4a11"
    );
}

/// At the cap a new connection is served: the connection idle longest is
/// closed to make room (nginx reuses its idle keep-alive connections the
/// same way), never one with a request in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_the_connection_idle_longest_makes_room() {
    const CAP: usize = 10;
    let server = TestServer::start(ServeConfig {
        max_connections: CAP,
        header_read_timeout: Duration::from_secs(20),
        ..config()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..CAP {
        let mut client = server.connect().await;
        assert_eq!(
            client.request("GET", "/healthz", b"").await.unwrap().status,
            200
        );
        held.push(client);
    }
    let mut newcomer = tokio::time::timeout(Duration::from_secs(5), server.connect())
        .await
        .expect("a new connection is served at the cap");
    assert_eq!(
        newcomer
            .request("GET", "/healthz", b"")
            .await
            .unwrap()
            .status,
        200
    );
    let oldest = tokio::time::timeout(Duration::from_secs(5), held[0].read_eof()).await;
    assert!(
        matches!(oldest, Ok(Ok(0)) | Ok(Err(_))),
        "the connection idle longest was closed: {oldest:?}"
    );
    for (i, client) in held.iter_mut().enumerate().skip(1) {
        assert_eq!(
            client.request("GET", "/healthz", b"").await.unwrap().status,
            200,
            "connection {i} was left alone"
        );
    }
    assert_eq!(
        metric(
            &server,
            r#"gpu_admission_connections_closed_total{listener="webhook",reason="evicted"}"#
        )
        .await,
        Some(1.0)
    );
}

/// With every connection busy there is nothing to close: a new one waits
/// (the ones after it in the kernel's accept queue) until one is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_with_every_connection_busy_new_ones_wait() {
    const CAP: usize = 4;
    let server = Arc::new(
        TestServer::start(ServeConfig {
            max_connections: CAP,
            header_read_timeout: Duration::from_secs(20),
            body_pace: gpu_admission::server::BodyPace {
                grace: Duration::from_secs(30),
                ..Default::default()
            },
            ..config()
        })
        .await,
    );
    // Each holds a request whose body is still coming. The next is opened
    // only once the server is reading this one's body (its body memory
    // shows), so that none is quiet when the cap is reached.
    const BODY_MEMORY: &str = r#"gpu_admission_memory_reserved_bytes{pool="body"}"#;
    let body = review("busy");
    let mut busy = Vec::new();
    let mut reserved = 0.0;
    for _ in 0..CAP {
        let mut client = server.connect().await;
        let request = common::http::request_bytes("POST", "/validate?timeout=30s", &body);
        client
            .write_raw(&request[..request.len() - 10])
            .await
            .unwrap();
        reserved = server.wait_for_metric_above(BODY_MEMORY, reserved).await;
        busy.push((client, request));
    }
    let waiting = tokio::spawn({
        let server = server.clone();
        async move {
            let mut client = server.try_connect().await.expect("connects once accepted");
            client.request("GET", "/healthz", b"").await.unwrap().status
        }
    });
    let behind = tokio::spawn({
        let server = server.clone();
        async move {
            let mut client = server.try_connect().await.expect("connects once accepted");
            client.request("GET", "/healthz", b"").await.unwrap().status
        }
    });
    match wait_for_accept_queue(server.addr, 1).await {
        Some(queued) => assert_eq!(
            queued, 1,
            "one is taken and waits for a slot, one is queued"
        ),
        None => eprintln!("the kernel's accept queue is not visible here: not checked"),
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished() && !behind.is_finished(),
        "nothing busy was closed"
    );

    // A request finishes; its connection, now idle, makes room.
    let (mut client, request) = busy.pop().unwrap();
    client
        .write_raw(&request[request.len() - 10..])
        .await
        .unwrap();
    assert_eq!(client.read_response().await.unwrap().status, 200);
    let status = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("served once a connection was idle")
        .unwrap();
    assert_eq!(status, 200);
    drop(busy);
    let status = tokio::time::timeout(Duration::from_secs(10), behind)
        .await
        .expect("served once the busy ones left")
        .unwrap();
    assert_eq!(status, 200);
}

/// The accept queue of the IPv4 listening socket on `addr`: the `rx_queue`
/// column of its LISTEN line in /proc/net/tcp.
fn accept_queue(addr: std::net::SocketAddr) -> Option<u64> {
    let port = format!(":{:04X}", addr.port());
    std::fs::read_to_string("/proc/net/tcp")
        .ok()?
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cols| cols.len() > 4 && cols[1].ends_with(&port) && cols[3] == "0A")
        .and_then(|cols| cols[4].split_once(':'))
        .and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok())
}

/// Waits (at most 20 s) until the accept queue on `addr` holds `n`; `None`
/// when /proc/net/tcp does not show the listening socket.
async fn wait_for_accept_queue(addr: std::net::SocketAddr, n: u64) -> Option<u64> {
    for _ in 0..2000 {
        match accept_queue(addr) {
            Some(queued) if queued >= n => return Some(queued),
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    accept_queue(addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_metrics_connections_are_closed_after_the_header_timeout() {
    let header = Duration::from_secs(2);
    let server = TestServer::start(ServeConfig {
        header_read_timeout: header,
        ..config()
    })
    .await;
    let mut tcp = TcpStream::connect(server.metrics_addr.unwrap())
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(20), tcp.read(&mut buf))
        .await
        .expect("closed by the server");
    let elapsed = started.elapsed();
    assert!(closed(&read));
    assert!(
        elapsed <= header + Duration::from_secs(2),
        "an idle metrics connection stayed open {elapsed:?}"
    );
    eprintln!("idle metrics connection closed after {elapsed:?}");
    let counted = metric(
        &server,
        r#"gpu_admission_connections_closed_total{listener="metrics",reason="header_timeout"}"#,
    )
    .await;
    assert_eq!(counted, Some(1.0));
}

/// What keep-alive clients saw across a shutdown.
#[derive(Default)]
struct Tally {
    answered: AtomicUsize,
    answered_after_signal: AtomicUsize,
    /// HTTP/2 streams the server's GOAWAY refused (not processed).
    refused: AtomicUsize,
    /// Sent, and no complete, correct answer came back.
    failed: AtomicUsize,
}

/// An HTTP/2 stream the peer's graceful GOAWAY left unprocessed.
fn refused_by_goaway(err: &hyper::Error) -> bool {
    std::error::Error::source(err)
        .and_then(|e| e.downcast_ref::<h2::Error>())
        .is_some_and(|e| {
            e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_under_keep_alive_load_loses_no_request() {
    let webhook = Arc::new(common::SlowWebhook::new(Duration::from_millis(2)));
    let server = Arc::new(
        TestServer::start_with(
            ServeConfig {
                drain_window: Duration::from_secs(1),
                ..config()
            },
            webhook.clone(),
        )
        .await,
    );
    let tally = Arc::new(Tally::default());
    let signalled = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();

    for i in 0..32 {
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls(&server, HTTP1).await))
                .await
                .unwrap();
        tokio::spawn(conn);
        let (tally, signalled) = (tally.clone(), signalled.clone());
        clients.push(tokio::spawn(async move {
            for n in 0.. {
                // A connection the server is closing is not used again.
                if sender.ready().await.is_err() {
                    return;
                }
                let uid = format!("h1-{i}-{n}");
                let request = post("/validate?timeout=10s", &review(&uid));
                let response = match sender.try_send_request(request).await {
                    Ok(response) => response,
                    Err(err) if err.message().is_some() => return,
                    Err(_) => {
                        tally.failed.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                };
                let close = response
                    .headers()
                    .get("connection")
                    .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
                record(&tally, &signalled, response, &uid).await;
                if close {
                    return;
                }
            }
        }));
    }
    for i in 0..4 {
        let (sender, conn) = hyper::client::conn::http2::handshake(
            TokioExecutor::new(),
            TokioIo::new(tls(&server, H2).await),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        // Two streams at a time on each HTTP/2 connection.
        for lane in 0..2 {
            let mut sender = sender.clone();
            let (tally, signalled) = (tally.clone(), signalled.clone());
            clients.push(tokio::spawn(async move {
                for n in 0.. {
                    if sender.ready().await.is_err() {
                        return;
                    }
                    let uid = format!("h2-{i}-{lane}-{n}");
                    let request = post("https://localhost/validate?timeout=10s", &review(&uid));
                    match sender.try_send_request(request).await {
                        Ok(response) => record(&tally, &signalled, response, &uid).await,
                        // Refused before it was sent (GOAWAY): not lost.
                        Err(err) if err.message().is_some() => return,
                        // Above the last stream the final GOAWAY names: never
                        // processed, and retried elsewhere by HTTP/2 clients.
                        Err(err) if refused_by_goaway(err.error()) => {
                            tally.refused.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        Err(_) => {
                            tally.failed.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    }
                }
            }));
        }
    }

    // Load is running: some requests answered on every kind of connection.
    for _ in 0..300 {
        if tally.answered.load(Ordering::SeqCst) >= 50 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = tally.answered.load(Ordering::SeqCst);
    signalled.store(true, Ordering::SeqCst);
    server.shutdown.trigger();

    for client in clients {
        tokio::time::timeout(Duration::from_secs(15), client)
            .await
            .expect("every connection is closed by the server")
            .unwrap();
    }
    let server = Arc::try_unwrap(server).ok().expect("sole owner");
    tokio::time::timeout(Duration::from_secs(15), server.task)
        .await
        .expect("exits once drained")
        .unwrap()
        .unwrap();
    let answered = tally.answered.load(Ordering::SeqCst);
    let after = tally.answered_after_signal.load(Ordering::SeqCst);
    let failed = tally.failed.load(Ordering::SeqCst);
    let refused = tally.refused.load(Ordering::SeqCst);
    eprintln!("keep-alive drain: {before} answered before the signal, {answered} in all, {after} after it, {refused} refused by GOAWAY, {failed} lost");
    assert!(before > 0, "load was running");
    assert!(after > 0, "requests in flight at the signal were answered");
    assert_eq!(failed, 0, "requests lost across the shutdown");
    // Every review the server evaluated reached its client: a refused
    // stream was never processed.
    assert_eq!(webhook.calls.load(Ordering::SeqCst), answered);
}

/// Counts `response` as answered when it is a whole, correct review answer.
async fn record(
    tally: &Tally,
    signalled: &AtomicBool,
    response: hyper::Response<hyper::body::Incoming>,
    uid: &str,
) {
    let ok = response.status() == 200;
    let body = response.into_body().collect().await.map(|b| b.to_bytes());
    let echoed = body
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .is_some_and(|v| v["response"]["uid"] == uid);
    if ok && echoed {
        tally.answered.fetch_add(1, Ordering::SeqCst);
        if signalled.load(Ordering::SeqCst) {
            tally.answered_after_signal.fetch_add(1, Ordering::SeqCst);
        }
    } else {
        tally.failed.fetch_add(1, Ordering::SeqCst);
    }
}

/// An HTTP/1 keep-alive connection may idle between requests for the idle
/// timeout (longer than the header timeout), as kube-apiserver's client
/// keeps its connections; a later head that starts but trickles is still
/// cut at the header timeout, and one idle past the idle timeout is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_keep_alive_idles_for_the_idle_timeout_but_not_a_slow_head() {
    let header = Duration::from_secs(1);
    let idle = Duration::from_secs(4);
    let server = Arc::new(
        TestServer::start_with(
            ServeConfig {
                header_read_timeout: header,
                idle_timeout: idle,
                ..config()
            },
            Arc::new(DenyValidate),
        )
        .await,
    );

    // Idle for three header timeouts between two requests: still served.
    let mut client = server.connect().await;
    let first = client
        .request("POST", "/mutate", &review("first"))
        .await
        .unwrap();
    assert_eq!(first.status, 200);
    // The idle time is the input under test, not a wait for an event.
    tokio::time::sleep(header * 3).await;
    let second = client
        .request("POST", "/mutate", &review("second"))
        .await
        .expect("the idle keep-alive connection is still open");
    let body: Value = serde_json::from_slice(&second.body).unwrap();
    assert_eq!(body["response"]["uid"], "second");

    // A second head that starts and then trickles (a byte every 250 ms,
    // about 19 s for the whole head) is cut at the header timeout, long
    // before the idle timeout.
    let head =
        b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\r\n";
    let started = Instant::now();
    let mut cut_after = None;
    for b in head {
        if client.write_raw(&[*b]).await.is_err() {
            cut_after = Some(started.elapsed());
            break;
        }
        // Waiting for the next byte doubles as watching for the close.
        if let Ok(read) = tokio::time::timeout(Duration::from_millis(250), client.read_eof()).await
        {
            assert!(
                !matches!(read, Ok(n) if n > 0),
                "the server answered a partial head"
            );
            cut_after = Some(started.elapsed());
            break;
        }
    }
    let cut_after = cut_after.expect("the server cut the trickling head before it was complete");
    assert!(
        cut_after <= header + Duration::from_millis(1500),
        "a trickling second head stayed open {cut_after:?}"
    );
    eprintln!("HTTP/1 second head trickled: cut after {cut_after:?}");

    // Idle past the idle timeout: closed by the server, and counted.
    let mut quiet = server.connect().await;
    assert_eq!(
        quiet.request("GET", "/healthz", b"").await.unwrap().status,
        200
    );
    let started = Instant::now();
    let closed = tokio::time::timeout(idle + Duration::from_secs(5), quiet.read_eof())
        .await
        .expect("an idle connection is closed after the idle timeout");
    let elapsed = started.elapsed();
    assert!(closed.is_ok(), "closed cleanly: {closed:?}");
    assert!(
        elapsed >= idle - Duration::from_millis(200),
        "closed after {elapsed:?}"
    );
    eprintln!("HTTP/1 idle keep-alive: closed after {elapsed:?}");
    assert!(
        metric(
            &server,
            r#"gpu_admission_connections_closed_total{listener="webhook",reason="idle_timeout"}"#
        )
        .await
        .unwrap_or(0.0)
            >= 1.0
    );
}

/// Sends `head` on a new HTTP/1 connection as most clients do, the whole
/// head first and then reading the answer: its status line, or what ended
/// the connection instead.
async fn status_line_for_head(server: &TestServer, head: Vec<u8>) -> String {
    let mut stream = tls(server, HTTP1).await;
    let exchange = async {
        stream.write_all(&head).await?;
        stream.flush().await?;
        let mut answer = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await?;
            answer.extend_from_slice(&chunk[..n]);
            if n == 0 || answer.windows(2).any(|w| w == b"\r\n") {
                return Ok::<_, std::io::Error>(answer);
            }
        }
    };
    match tokio::time::timeout(Duration::from_secs(20), exchange)
        .await
        .expect("answered or closed")
    {
        Ok(answer) if answer.is_empty() => "closed without an answer".into(),
        Ok(answer) => String::from_utf8_lossy(&answer)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string(),
        Err(e) => format!("no answer: {e}"),
    }
}

/// A request head past what the server reads (one header of 1 MiB, or
/// 10,000 small ones) gets 431 Request Header Fields Too Large, not a
/// closed connection, while its sender is still writing it; the server
/// goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_http1_heads_get_431() {
    let server = TestServer::start(config()).await;
    let start = "POST /validate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n";
    let mut huge = start.as_bytes().to_vec();
    huge.extend_from_slice(b"X-Huge: ");
    huge.extend(std::iter::repeat_n(b'a', 1 << 20));
    huge.extend_from_slice(b"\r\nContent-Length: 2\r\n\r\n{}");
    let mut many = start.as_bytes().to_vec();
    for i in 0..10_000 {
        many.extend_from_slice(format!("X-Header-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"Content-Length: 2\r\n\r\n{}");
    for (what, head) in [("a 1 MiB header", huge), ("10,000 headers", many)] {
        let line = status_line_for_head(&server, head).await;
        assert!(
            line.starts_with("HTTP/1.1 431"),
            "{what}: {line:?}, not 431"
        );
    }
    let (status, answer) = server
        .post_review("/validate", &fixture("pod-create-gpu.json"))
        .await;
    assert_eq!(status, axum::http::StatusCode::OK, "{answer}");
    server.stop().await;
}
