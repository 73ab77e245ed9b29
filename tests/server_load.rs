//! Saturation at the edge: `/mutate` has evaluation slots of its own, so a
//! flood of slow validations never delays placement; a request that waits
//! for in-flight memory past its deadline gets the same answer as any
//! timeout; and both show in the metrics.
use crate::common;

use common::{config, fixture, TestServer};
use gpu_admission::review::{Request, Response};
use gpu_admission::server::{Answer, Endpoint, ServeConfig, Step, Webhook};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Both endpoints answer on answering threads: validations block until the
/// gate opens, mutations answer at once.
#[derive(Default)]
struct Gated {
    open: Mutex<bool>,
    opened: Condvar,
    validating: AtomicUsize,
    validated: AtomicUsize,
}

impl Gated {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    async fn wait_validating(&self, n: usize) {
        for _ in 0..500 {
            if self.validating.load(Ordering::SeqCst) >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{n} validations never started");
    }
}

impl Webhook for Gated {
    fn answer(self: Arc<Self>, endpoint: Endpoint, _: &Arc<Request>, _: Instant) -> Step {
        Step::Resume(Box::new(move |_| match endpoint {
            Endpoint::Mutate => Response::allow().into(),
            Endpoint::Validate => self.validate(),
        }))
    }
}

impl Gated {
    fn validate(&self) -> Answer {
        self.validating.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
        self.validated.fetch_add(1, Ordering::SeqCst);
        Response::allow().into()
    }
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validation_flood_never_delays_placement() {
    let webhook = Arc::new(Gated::default());
    let server = Arc::new(
        TestServer::start_with(
            ServeConfig {
                max_concurrency: 1,
                ..config()
            },
            webhook.clone(),
        )
        .await,
    );
    let review = fixture("pod-create-gpu.json");
    let flood: Vec<_> = (0..6)
        .map(|_| {
            let server = server.clone();
            let review = review.clone();
            tokio::spawn(async move { server.post_review("/validate?timeout=30s", &review).await })
        })
        .collect();
    webhook.wait_validating(1).await;

    // Every validation slot is taken and five more wait; placement answers.
    for _ in 0..3 {
        let (status, body) = server.post_review("/mutate", &review).await;
        assert_eq!(status, 200);
        assert_eq!(body["response"]["allowed"], true);
    }
    assert_eq!(webhook.validated.load(Ordering::SeqCst), 0, "still flooded");
    let (_, text) = server.get_metrics_listener("/metrics").await;
    assert_eq!(
        metric(
            &text,
            r#"gpu_admission_evaluation_slots_in_use{endpoint="validate"}"#
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            r#"gpu_admission_queue_wait_seconds_count{endpoint="mutate",queue="slot"}"#
        ),
        3.0
    );

    webhook.open();
    for answer in flood {
        let (status, body) = answer.await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(body["response"]["allowed"], true);
    }
    let (_, text) = server.get_metrics_listener("/metrics").await;
    assert_eq!(
        metric(
            &text,
            r#"gpu_admission_queue_wait_seconds_count{endpoint="validate",queue="slot"}"#
        ),
        6.0
    );
    assert_eq!(
        metric(
            &text,
            r#"gpu_admission_evaluation_slots_in_use{endpoint="validate"}"#
        ),
        0.0
    );
    Arc::into_inner(server).unwrap().stop().await;
}

/// A review whose decoded estimate is several MiB: a pod with many one-key
/// objects.
/// An UPDATE of a pod with a long env list: the object twice.
fn heavy_review(uid: &str) -> Value {
    let mut review = fixture("pod-create-gpu.json");
    review["request"]["uid"] = json!(uid);
    review["request"]["operation"] = json!("UPDATE");
    review["request"]["object"]["spec"]["containers"][0]["env"] =
        Value::Array(vec![json!({"a": 0}); 5_000]);
    review["request"]["oldObject"] = review["request"]["object"].clone();
    review
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_memory_past_the_deadline_is_a_timeout() {
    let webhook = Arc::new(Gated::default());
    // Each object of the heavy review within one object's limit, and room
    // for decoded requests (two thirds of the budget, at least two
    // objects' worth) that holds one heavy review but not two.
    let unlimited = gpu_admission::review::Limits {
        max_decoded_bytes: usize::MAX / 4,
        ..Default::default()
    };
    let body = serde_json::to_vec(&heavy_review("sized")).unwrap();
    let heavy = gpu_admission::review::measure_request(&body, &unlimited)
        .unwrap()
        .decoded_bytes;
    let per_object = (heavy / 2).next_multiple_of(1 << 20) + (1 << 20);
    let bodies = per_object.max(7 << 20);
    let decoded = 2 * bodies;
    assert!(heavy <= decoded && 2 * heavy > decoded, "{heavy} bytes");
    let limits = gpu_admission::review::Limits {
        max_decoded_bytes: per_object,
        ..Default::default()
    };
    let server = Arc::new(
        TestServer::start_with(
            ServeConfig {
                in_flight_bytes: bodies + decoded,
                decode_limits: limits,
                ..config()
            },
            webhook.clone(),
        )
        .await,
    );
    let first = {
        let server = server.clone();
        tokio::spawn(async move {
            server
                .post_review("/validate?timeout=30s", &heavy_review("first"))
                .await
        })
    };
    webhook.wait_validating(1).await;

    let (status, body) = server
        .post_review("/validate?timeout=1s", &heavy_review("second"))
        .await;
    assert_eq!(status, 200);
    let response = &body["response"];
    assert_eq!(response["uid"], "second", "answered as a review");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 504);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("timed out"), "{message}");
    assert_eq!(
        webhook.validating.load(Ordering::SeqCst),
        1,
        "never evaluated"
    );
    let (_, text) = server.get_metrics_listener("/metrics").await;
    assert_eq!(
        metric(
            &text,
            r#"gpu_admission_rejected_requests_total{endpoint="validate",reason="memory_wait"}"#
        ),
        1.0
    );
    assert!(
        metric(
            &text,
            r#"gpu_admission_memory_reserved_bytes{pool="decoded"}"#
        ) > 8e6
    );

    webhook.open();
    let (status, body) = first.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body["response"]["allowed"], true);
    let (_, text) = server.get_metrics_listener("/metrics").await;
    assert_eq!(
        metric(
            &text,
            r#"gpu_admission_memory_reserved_bytes{pool="decoded"}"#
        ),
        0.0,
        "every reservation returned"
    );
    Arc::into_inner(server).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_that_cannot_hold_one_request_is_refused() {
    let limits = gpu_admission::review::Limits {
        max_decoded_bytes: 64 << 20,
        ..Default::default()
    };
    let config = ServeConfig {
        in_flight_bytes: 32 << 20,
        decode_limits: limits,
        ..config()
    };
    let err = gpu_admission::server::Server::bind(
        config,
        Arc::new(Gated::default()),
        gpu_admission::server::Metrics::new(),
        gpu_admission::server::ShutdownHandle::new(),
    )
    .await
    .err()
    .expect("refused");
    assert!(err.to_string().contains("--max-in-flight-memory"), "{err}");
}
