//! Shutdown: readiness turns false, in-flight requests finish, new
//! connections are refused, a second trigger exits at once; the real binary
//! exits cleanly on SIGTERM.
use crate::common;

use axum::http::StatusCode;
use common::{config, fixture, SlowWebhook, TestServer};
use gpu_admission::server::ServeConfig;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_requests_finish_while_draining() {
    let webhook = Arc::new(SlowWebhook::new(Duration::from_millis(1500)));
    let server = Arc::new(
        TestServer::start_with(
            ServeConfig {
                shutdown_delay: Duration::from_millis(600),
                ..config()
            },
            webhook.clone(),
        )
        .await,
    );
    // An idle keep-alive connection must not hold the exit up.
    let mut idle = server.connect().await;
    assert_eq!(
        idle.request("GET", "/healthz", b"").await.unwrap().status,
        200
    );

    let in_flight = tokio::spawn({
        let server = server.clone();
        async move {
            server
                .post_review("/validate", &fixture("pod-create-gpu.json"))
                .await
        }
    });
    wait_until_running(&webhook).await;
    let started = Instant::now();
    server.shutdown.trigger();

    // Readiness is false at once, on both listeners, while still accepting.
    assert_eq!(
        server.get_metrics_listener("/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        server.get("/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(server.get("/healthz").await.0, StatusCode::OK);

    // After the delay the listener is closed: new connections are refused,
    // not before the delay.
    for _ in 0..100 {
        if server.try_connect().await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let closed = started.elapsed();
    assert!(
        server.try_connect().await.is_err(),
        "new connections refused"
    );
    assert!(
        closed >= Duration::from_millis(600),
        "closed after {closed:?}"
    );

    let (status, body) = in_flight.await.unwrap();
    assert_eq!(status, StatusCode::OK, "in-flight request answered");
    assert_eq!(
        body["response"]["uid"],
        "3f1c2a9e-7b4d-4e1a-9c55-0d6e2b8f4a11"
    );
    assert_eq!(webhook.calls.load(Ordering::SeqCst), 1);

    let server = Arc::try_unwrap(server).ok().expect("sole owner");
    tokio::time::timeout(Duration::from_secs(5), server.task)
        .await
        .expect("exits once drained")
        .unwrap()
        .unwrap();
    // The idle connection was closed by the server, with no answer.
    let read = tokio::time::timeout(Duration::from_secs(2), idle.read_eof())
        .await
        .expect("idle connection closed");
    assert!(
        matches!(&read, Ok(0))
            || matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof),
        "{read:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_trigger_exits_without_draining() {
    let webhook = Arc::new(SlowWebhook::new(Duration::from_secs(4)));
    let server = Arc::new(TestServer::start_with(config(), webhook.clone()).await);
    let _in_flight = tokio::spawn({
        let server = server.clone();
        async move {
            server
                .post_review("/validate", &fixture("pod-create-gpu.json"))
                .await
        }
    });
    wait_until_running(&webhook).await;
    server.shutdown.trigger();
    // Draining has begun once readiness says so.
    for _ in 0..100 {
        if server.get_metrics_listener("/readyz").await.0 == StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        server.get_metrics_listener("/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    // The second trigger ends it well before the 4 s request would have.
    let started = Instant::now();
    server.shutdown.trigger();
    while !server.task.is_finished() {
        assert!(started.elapsed() < Duration::from_secs(3), "did not abort");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (at most 10 s) until the webhook is answering a request.
async fn wait_until_running(webhook: &SlowWebhook) {
    for _ in 0..500 {
        if webhook.running.load(Ordering::SeqCst) >= 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the request never reached the webhook");
}

#[test]
fn binary_exits_cleanly_on_sigterm() {
    let certs = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
            "--health-listen",
            "off",
        ])
        .args(["--log-format", "json", "--certs-dir"])
        .arg(certs.path())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = Vec::new();
    let addr = loop {
        let line = lines.next().expect("server logs its address").unwrap();
        log.push(line.clone());
        let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
        if let Some(addr) = entry["fields"]["addr"].as_str() {
            break addr.parse::<std::net::SocketAddr>().unwrap();
        }
    };
    assert!(
        log.iter().any(|l| l.contains("ca.crt")),
        "logs where the CA is: {log:?}"
    );

    let ca = std::fs::read_to_string(certs.path().join("ca.crt")).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let status = runtime.block_on(async {
        let tls = common::http::client_config(&ca, &[b"http/1.1"]);
        let mut client = common::http::Client::connect(addr, tls, "localhost")
            .await
            .unwrap();
        client.request("GET", "/readyz", b"").await.unwrap().status
    });
    assert_eq!(status, 200);

    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let started = Instant::now();
    let exit = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("still running 10s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit:?}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(
        rest.iter().any(|l| l.contains("drained")),
        "logs the drain: {rest:?}"
    );
}
