//! The webhook endpoints over real TLS: answers, errors, limits, timeouts,
//! concurrency, metrics.
use crate::common;

use axum::http::StatusCode;
use common::http::{client_config, client_config_versions, Client};
use common::{config, fixture, SlowWebhook, TestServer};
use gpu_admission::review::{Request, Response};
use gpu_admission::server::{Answer, Endpoint, OnError, PolicyResult, ServeConfig, Step, Webhook};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_readiness_on_both_listeners() {
    let server = TestServer::start(config()).await;
    assert_eq!(
        server.get("/healthz").await,
        (StatusCode::OK, "ok\n".into())
    );
    assert_eq!(server.get("/readyz").await, (StatusCode::OK, "ok\n".into()));
    assert_eq!(
        server.get_metrics_listener("/healthz").await.0,
        StatusCode::OK
    );
    assert_eq!(
        server.get_metrics_listener("/readyz").await.0,
        StatusCode::OK
    );
    assert_eq!(server.get("/nowhere").await.0, StatusCode::NOT_FOUND);
    server.stop().await;
}

/// The probe listener answers the kubelet's two paths and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_listener_serves_only_the_probes() {
    // A shutdown delay keeps the listeners up once shutdown begins (as in
    // a cluster), so the last probe always finds one to answer it.
    let server = TestServer::start(ServeConfig {
        shutdown_delay: Duration::from_secs(30),
        ..config()
    })
    .await;
    assert_eq!(
        server.get_health_listener("/healthz").await,
        (StatusCode::OK, "ok\n".into())
    );
    assert_eq!(
        server.get_health_listener("/readyz").await,
        (StatusCode::OK, "ok\n".into())
    );
    for path in ["/metrics", "/report", "/mutate"] {
        assert_eq!(
            server.get_health_listener(path).await.0,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    server.shutdown.trigger();
    assert_eq!(
        server.get_health_listener("/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE,
        "not ready once shutting down"
    );
}

/// `Expect: 100-continue` with a declared body over the limit gets 413 at
/// once, never `100 Continue`; within the limit the body is asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_continue_over_the_limit_gets_413_without_continue() {
    let server = TestServer::start(config()).await;
    let mut client = server.connect().await;
    client
        .write_raw(
            b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 8388608\r\nExpect: 100-continue\r\n\r\n",
        )
        .await
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(2), client.read_response())
        .await
        .expect("answered without waiting for the body")
        .unwrap();
    assert_eq!(response.status, 413, "{}", response.text());

    let body = serde_json::to_vec(&fixture("pod-create-gpu.json")).unwrap();
    let mut client = server.connect().await;
    client
        .write_raw(
            format!(
                "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let interim = client.read_response().await.unwrap();
    assert_eq!(interim.status, 100, "the body is asked for");
    client.write_raw(&body).await.unwrap();
    let response = client.read_response().await.unwrap();
    assert_eq!(response.status, 200, "{}", response.text());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_uid_is_echoed_on_both_endpoints() {
    let server = TestServer::start(config()).await;
    let review = fixture("pod-create-gpu.json");
    for path in ["/mutate", "/validate"] {
        let response = server
            .post_raw(path, &serde_json::to_vec(&review).unwrap())
            .await;
        assert_eq!(response.status, 200, "{path}: {}", response.text());
        assert_eq!(response.header("content-type"), Some("application/json"));
        let body: Value = serde_json::from_slice(&response.body).unwrap();
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1", "{path}");
        assert_eq!(body["kind"], "AdmissionReview", "{path}");
        assert_eq!(
            body["response"]["uid"], "3f1c2a9e-7b4d-4e1a-9c55-0d6e2b8f4a11",
            "{path}"
        );
        assert_eq!(body["response"]["allowed"], true, "{path}");
        assert!(body.get("request").is_none(), "{path}: request not echoed");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_reviews_get_400_with_a_plain_message() {
    let server = TestServer::start(config()).await;
    let mut pod = fixture("pod-create-gpu.json");
    pod["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{not json".to_vec(), "not JSON"),
        (
            serde_json::to_vec(&pod).unwrap(),
            "admission.k8s.io/v1beta1",
        ),
        (
            serde_json::to_vec(
                &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            )
            .unwrap(),
            "no request",
        ),
        (Vec::new(), "not JSON"),
    ];
    for path in ["/mutate", "/validate"] {
        for (body, expected) in &cases {
            let response = server.post_raw(path, body).await;
            assert_eq!(response.status, 400, "{path} {expected}");
            assert!(
                response
                    .header("content-type")
                    .is_some_and(|t| t.starts_with("text/plain")),
                "{:?}",
                response.headers
            );
            assert!(response.text().contains(expected), "{}", response.text());
        }
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_the_limit_gets_413() {
    let server = TestServer::start(config()).await;
    let mut review = fixture("pod-create-gpu.json");
    review["request"]["object"]["metadata"]["annotations"]["big"] =
        json!("x".repeat(8 * 1024 * 1024));
    let body = serde_json::to_vec(&review).unwrap();
    let response = server.post_raw("/validate", &body).await;
    assert_eq!(response.status, 413, "{}", response.text());
    assert!(response.text().contains("7 MiB"), "{}", response.text());

    // Just under the limit is read and answered.
    review["request"]["object"]["metadata"]["annotations"]["big"] =
        json!("x".repeat(6 * 1024 * 1024));
    let (status, body) = server.post_review("/validate", &review).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["response"]["allowed"], true);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_and_connect_are_allowed_untouched() {
    let server = TestServer::start(config()).await;
    for (name, uid) in [
        ("pod-delete.json", "9a0e4c77-2d1b-4b8e-8f3a-6c5d4e3b2a19"),
        (
            "pod-exec-connect.json",
            "c4d2a8b1-6e3f-4a0d-b7c9-1f2e3d4c5b6a",
        ),
    ] {
        for path in ["/mutate", "/validate"] {
            let (status, body) = server.post_review(path, &fixture(name)).await;
            assert_eq!(status, StatusCode::OK, "{name} {path}: {body}");
            let response = &body["response"];
            assert_eq!(response["uid"], uid);
            assert_eq!(response["allowed"], true, "{name} {path}");
            assert!(response.get("patch").is_none(), "{name} {path}");
            assert!(response.get("status").is_none(), "{name} {path}");
        }
    }
    server.stop().await;
}

fn denying(delay: Duration) -> SlowWebhook {
    let mut webhook = SlowWebhook::new(delay);
    webhook.answer.response = Response::deny("test-policy: always denies");
    webhook
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exempt_namespaces_are_allowed_without_evaluation() {
    let webhook = Arc::new(denying(Duration::ZERO));
    let server = TestServer::start_with(
        gpu_admission::server::ServeConfig {
            exempt_namespaces: vec!["ml".into()],
            ..config()
        },
        webhook.clone(),
    )
    .await;
    let (_, body) = server
        .post_review("/validate", &fixture("pod-create-gpu.json"))
        .await;
    assert_eq!(body["response"]["allowed"], true, "namespace ml is exempt");
    assert_eq!(webhook.calls.load(Ordering::SeqCst), 0);

    let (_, body) = server
        .post_review("/validate", &fixture("deployment-update.json"))
        .await;
    assert_eq!(
        body["response"]["allowed"], false,
        "namespace serving is not"
    );
    assert_eq!(
        body["response"]["status"]["message"],
        "test-policy: always denies"
    );
    assert_eq!(webhook.calls.load(Ordering::SeqCst), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_before_the_apiserver_timeout() {
    let server = TestServer::start_with(config(), Arc::new(denying(Duration::from_secs(3)))).await;
    let review = fixture("pod-create-gpu.json");

    let started = Instant::now();
    let (status, body) = server.post_review("/validate?timeout=1s", &review).await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::OK);
    assert!(took < Duration::from_secs(1), "answered after {took:?}");
    let response = &body["response"];
    assert_eq!(response["uid"], "3f1c2a9e-7b4d-4e1a-9c55-0d6e2b8f4a11");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 504);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{response}"
    );

    let started = Instant::now();
    let (status, body) = server.post_review("/mutate?timeout=1s", &review).await;
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(status, StatusCode::OK);
    let response = &body["response"];
    assert_eq!(
        response["allowed"], false,
        "a slow mutation never admits a GPU pod unplaced"
    );
    assert_eq!(response["status"]["code"], 504);
    assert_eq!(response["status"]["reason"], "Timeout");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("timed out"), "{message}");
    assert!(message.contains("can be retried"), "{message}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_arrives_times_out() {
    let server = TestServer::start(config()).await;
    let mut client = server.connect().await;
    client
        .write_raw(b"POST /validate?timeout=1s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"apiVersion\"")
        .await
        .unwrap();
    let started = Instant::now();
    let response = client.read_response().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(response.status, 408, "{}", response.text());
    assert!(response.text().contains("not received in time"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluation_concurrency_is_bounded() {
    let webhook = Arc::new(SlowWebhook::new(Duration::from_millis(200)));
    let server = Arc::new(
        TestServer::start_with(
            gpu_admission::server::ServeConfig {
                max_concurrency: 2,
                ..config()
            },
            webhook.clone(),
        )
        .await,
    );
    let review = fixture("pod-create-gpu.json");
    let requests: Vec<_> = (0..6)
        .map(|_| {
            let server = server.clone();
            let review = review.clone();
            tokio::spawn(async move { server.post_review("/validate", &review).await })
        })
        .collect();
    for r in requests {
        let (status, body) = r.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["response"]["allowed"], true);
    }
    assert_eq!(webhook.calls.load(Ordering::SeqCst), 6);
    assert_eq!(webhook.max_running.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    let server = TestServer::start(ServeConfig {
        header_read_timeout: Duration::from_millis(500),
        ..config()
    })
    .await;
    let timed_out =
        r#"gpu_admission_connections_closed_total{listener="webhook",reason="header_timeout"}"#;
    // Headers never finished: the server closes the connection, after the
    // timeout (the upper bound is generous slack for a busy machine).
    // The timeout runs from the accept, so the clock starts before connecting.
    let started = Instant::now();
    let mut client = server.connect().await;
    client
        .write_raw(b"POST /validate HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let read = tokio::time::timeout(Duration::from_secs(5), client.read_eof())
        .await
        .expect("connection closed within 5 s");
    let waited = started.elapsed();
    // A close with or without TLS close_notify, and no answer: not a reset.
    assert!(
        matches!(&read, Ok(0))
            || matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof),
        "{read:?}"
    );
    assert!(
        waited >= Duration::from_millis(500),
        "closed after {waited:?}"
    );
    assert_eq!(server.metric(timed_out).await, 1.0);

    // TLS handshake never started: the same, before any TLS byte.
    use tokio::io::AsyncReadExt;
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
        .await
        .expect("connection closed within 5 s");
    let waited = started.elapsed();
    assert_eq!(read.unwrap(), 0, "closed by the server, nothing sent");
    assert!(
        waited >= Duration::from_millis(500),
        "closed after {waited:?}"
    );
    assert_eq!(server.metric(timed_out).await, 2.0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_versions_and_http2_are_offered() {
    let server = TestServer::start(config()).await;
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let tls = client_config_versions(&server.ca_pem, &[b"http/1.1"], &[version]);
        let mut client = Client::connect(server.addr, tls, "localhost")
            .await
            .unwrap();
        assert_eq!(client.protocol_version(), Some(version.version));
        let response = client.request("GET", "/healthz", b"").await.unwrap();
        assert_eq!(response.status, 200);
    }
    let h2 = client_config(&server.ca_pem, &[b"h2", b"http/1.1"]);
    let client = Client::connect(server.addr, h2, "127.0.0.1").await.unwrap();
    assert_eq!(client.alpn_protocol().as_deref(), Some(&b"h2"[..]));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_connection_serves_many_reviews() {
    let server = TestServer::start(config()).await;
    let mut client = server.connect().await;
    let body = serde_json::to_vec(&fixture("pod-create-gpu.json")).unwrap();
    for _ in 0..20 {
        let response = client.request("POST", "/validate", &body).await.unwrap();
        assert_eq!(response.status, 200);
    }
    server.stop().await;
}

/// Panics on an answering thread.
struct PanickingWebhook;

impl Webhook for PanickingWebhook {
    fn answer(self: Arc<Self>, endpoint: Endpoint, _: &Arc<Request>, _: Instant) -> Step {
        Step::Resume(Box::new(move |_| match endpoint {
            Endpoint::Mutate => panic!("placement bug"),
            Endpoint::Validate => panic!("policy bug"),
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_webhook_still_gets_an_answer() {
    let server = TestServer::start_with(config(), Arc::new(PanickingWebhook)).await;
    let review = fixture("pod-create-gpu.json");
    let (status, body) = server.post_review("/validate", &review).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["response"]["allowed"], false);
    assert_eq!(body["response"]["status"]["code"], 500);
    // A GPU pod admitted without placement could never schedule: deny,
    // and say it can be retried.
    let (status, body) = server.post_review("/mutate", &review).await;
    assert_eq!(status, StatusCode::OK);
    let response = &body["response"];
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 500);
    assert_eq!(response["status"]["reason"], "InternalError");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("could not place"), "{message}");
    assert!(message.contains("can be retried"), "{message}");
    // The server is still healthy.
    assert_eq!(server.get("/healthz").await.0, StatusCode::OK);
    server.stop().await;

    // --mutate-on-error allow keeps the old answer: admitted, with a warning.
    let allowing = ServeConfig {
        mutate_on_error: OnError::Allow,
        ..config()
    };
    let server = TestServer::start_with(allowing, Arc::new(PanickingWebhook)).await;
    let (_, body) = server.post_review("/mutate", &review).await;
    assert_eq!(body["response"]["allowed"], true);
    assert!(body["response"]["warnings"][0]
        .as_str()
        .unwrap()
        .contains("internal error"));
    server.stop().await;
}

fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_and_latency() {
    let server = TestServer::start_with(config(), Arc::new(denying(Duration::ZERO))).await;
    let (_, before) = server.get_metrics_listener("/metrics").await;
    let denied = r#"gpu_admission_requests_total{endpoint="validate",kind="Pod",operation="CREATE",decision="denied"}"#;
    let mutate = r#"gpu_admission_requests_total{endpoint="mutate",kind="Pod",operation="CREATE",decision="denied"}"#;
    let other = r#"gpu_admission_requests_total{endpoint="validate",kind="other",operation="CONNECT",decision="denied"}"#;
    let invalid = r#"gpu_admission_requests_total{endpoint="validate",kind="other",operation="other",decision="invalid"}"#;
    let latency_denied =
        r#"gpu_admission_request_duration_seconds_count{endpoint="validate",decision="denied"}"#;
    let latency_invalid =
        r#"gpu_admission_request_duration_seconds_count{endpoint="validate",decision="invalid"}"#;
    assert_eq!(metric_value(&before, denied), 0.0);

    let pod = fixture("pod-create-gpu.json");
    server.post_review("/validate", &pod).await;
    server.post_review("/validate", &pod).await;
    server.post_review("/mutate", &pod).await;
    server
        .post_review("/validate", &fixture("pod-exec-connect.json"))
        .await;
    server.post_raw("/validate", b"nope").await;

    let (status, text) = server.get_metrics_listener("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(metric_value(&text, denied), 2.0, "{text}");
    assert_eq!(metric_value(&text, mutate), 1.0, "{text}");
    assert_eq!(
        metric_value(&text, other),
        1.0,
        "PodExecOptions is other: {text}"
    );
    assert_eq!(metric_value(&text, invalid), 1.0, "{text}");
    assert_eq!(metric_value(&text, latency_denied), 3.0, "{text}");
    assert_eq!(metric_value(&text, latency_invalid), 1.0, "{text}");
    assert!(text.contains("gpu_admission_policies_loaded"), "{text}");
    assert!(
        text.contains("gpu_admission_policy_reload_failures_total"),
        "{text}"
    );
    assert!(!text.contains("not JSON"), "no error text in labels");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_policy_evaluations_and_mutations() {
    let mut webhook = SlowWebhook::new(Duration::ZERO);
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/spec/nodeSelector", "value": {"sku": "gpu"}}
    ]))
    .unwrap();
    webhook.answer = Answer {
        response: Response::allow().with_patch(patch),
        profile: Some("aks-gpu".into()),
        policies: vec![
            PolicyResult {
                policy: "gpu-limits".into(),
                result: "pass",
                duration: Duration::from_micros(40),
            },
            PolicyResult {
                policy: "gpu-keepalive".into(),
                result: "warn",
                duration: Duration::from_micros(15),
            },
        ],
    };
    let server = TestServer::start_with(config(), Arc::new(webhook)).await;
    let pod = fixture("pod-create-gpu.json");
    let (_, body) = server.post_review("/mutate", &pod).await;
    assert_eq!(body["response"]["patchType"], "JSONPatch");
    server.post_review("/mutate", &pod).await;

    let (_, text) = server.get_metrics_listener("/metrics").await;
    for (series, value) in [
        (
            r#"gpu_admission_requests_total{endpoint="mutate",kind="Pod",operation="CREATE",decision="patched"}"#,
            2.0,
        ),
        (r#"gpu_admission_mutations_total{profile="aks-gpu"}"#, 2.0),
        (
            r#"gpu_admission_policy_evaluations_total{policy="gpu-limits",result="pass"}"#,
            2.0,
        ),
        (
            r#"gpu_admission_policy_evaluations_total{policy="gpu-keepalive",result="warn"}"#,
            2.0,
        ),
        (
            r#"gpu_admission_policy_evaluation_duration_seconds_count{policy="gpu-limits"}"#,
            2.0,
        ),
    ] {
        assert_eq!(metric_value(&text, series), value, "{series} in\n{text}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_over_http2() {
    use http_body_util::BodyExt as _;
    let server = TestServer::start(config()).await;
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(client_config(&server.ca_pem, &[b"h2"]))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let body = serde_json::to_vec(&fixture("pod-create-gpu.json")).unwrap();
    // Several streams at once on the one connection, as the apiserver does.
    let mut pending = Vec::new();
    for path in ["/mutate", "/validate", "/mutate", "/validate"] {
        let request = hyper::Request::post(format!("https://localhost{path}?timeout=10s"))
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(axum::body::Bytes::from(
                body.clone(),
            )))
            .unwrap();
        pending.push(sender.send_request(request));
    }
    for response in pending {
        let response = response.await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.version(), hyper::Version::HTTP_2);
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let review: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            review["response"]["uid"],
            "3f1c2a9e-7b4d-4e1a-9c55-0d6e2b8f4a11"
        );
    }
    server.stop().await;
}
