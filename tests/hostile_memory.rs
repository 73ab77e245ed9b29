//! Hostile bodies cannot run the server out of memory: one 7 MiB review of
//! tiny JSON objects raises the process's peak resident memory by at most
//! 64 MiB, and four at once keep the whole process under 256 MiB (the
//! Deployment's limit), for /mutate and /validate and for both shapes. Each
//! case runs its own `gpu-admission serve` process and reads its VmHWM.
//! A burst of large reviews from one address waits for memory rather than
//! being refused.

// Tests read fixtures with `Value::pointer`: clippy.toml keeps it out of
// the crate itself, where objects under admission are read per request.
#![allow(clippy::disallowed_methods)]
mod common;

use common::hostile::{
    burst, large_pod_review, measure, measure_body, near_limit_review, near_limit_update,
    pod_review, review_of, tally, Figures, ServerProcess, Shape,
};
use common::{config, TestServer};
use gpu_admission::server::ServeConfig;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const MIB: u64 = 1024 * 1024;

async fn bounded(path: &str, shape: Shape) {
    let binary = Path::new(env!("CARGO_BIN_EXE_gpu-admission"));
    let (figures, answers) = measure(binary, path, shape).await;
    let Figures {
        baseline,
        one,
        four,
    } = figures;
    eprintln!(
        "{path} {}: peak RSS {:.1} MiB at rest, {:.1} MiB after one body, {:.1} MiB after four at once",
        shape.name(),
        Figures::mib(baseline),
        Figures::mib(one),
        Figures::mib(four)
    );
    for (status, answer) in &answers {
        assert_eq!(*status, 200, "a refused review is still answered");
        let response = &answer["response"];
        assert_eq!(response["uid"], "6a0c3b1e-9f7d-4a52-8e1b-2d4c6f8a0b13");
        assert_eq!(response["allowed"], false, "{response}");
        assert_eq!(response["status"]["code"], 413);
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains("too large to evaluate"), "{message}");
    }
    assert!(
        one.saturating_sub(baseline) <= 64 * MIB,
        "one hostile body raised peak memory by {:.1} MiB",
        Figures::mib(one - baseline)
    );
    assert!(
        four < 256 * MIB,
        "four hostile bodies took the process to {:.1} MiB",
        Figures::mib(four)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutate_env_entries() {
    bounded("/mutate", Shape::EnvEntries).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutate_one_key_objects() {
    bounded("/mutate", Shape::OneKeyObjects).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_env_entries() {
    bounded("/validate", Shape::EnvEntries).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_one_key_objects() {
    bounded("/validate", Shape::OneKeyObjects).await;
}

/// `body`, sent to each endpoint, is decoded and evaluated (not refused)
/// within the bounds hostile bodies are held to.
async fn decoded_within_bounds(what: &str, body: &[u8]) {
    let binary = Path::new(env!("CARGO_BIN_EXE_gpu-admission"));
    for path in ["/mutate", "/validate"] {
        let (figures, answers) = measure_body(binary, path, body).await;
        eprintln!(
            "{path} {what} ({} KiB): peak RSS {:.1} MiB at rest, {:.1} MiB after one, {:.1} MiB after four at once",
            body.len() / 1024,
            Figures::mib(figures.baseline),
            Figures::mib(figures.one),
            Figures::mib(figures.four)
        );
        for (status, answer) in &answers {
            assert_eq!(*status, 200);
            assert_ne!(
                answer["response"]["status"]["code"], 413,
                "decoded, not refused: {}",
                answer["response"]
            );
        }
        assert!(figures.one.saturating_sub(figures.baseline) <= 64 * MIB);
        assert!(figures.four < 256 * MIB);
    }
}

/// The worst body sizing lets through is decoded and evaluated within the
/// same bounds: the estimate it is sized by covers what it really takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_body_still_decoded_stays_within_bounds() {
    decoded_within_bounds("largest decodable body", &near_limit_review()).await;
}

/// The same for an UPDATE whose object and oldObject are each the largest
/// object sizing lets through: the request as a whole may take twice what
/// one object may, and is decoded and evaluated within the same bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_update_still_decoded_stays_within_bounds() {
    let body = near_limit_update();
    let limits = gpu_admission::review::Limits::default();
    let shape = gpu_admission::review::measure_request(&body, &limits).unwrap();
    assert!(
        shape.nodes > limits.max_nodes || shape.decoded_bytes > limits.max_decoded_bytes,
        "more than one object may take: {shape:?}"
    );
    decoded_within_bounds("largest decodable UPDATE", &body).await;
}

/// Real objects far larger than usual are not refused: a pod with 5,000
/// env entries, a Deployment with 50 containers, a 1 MiB custom resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_legitimate_objects_are_evaluated() {
    let server = ServerProcess::start(Path::new(env!("CARGO_BIN_EXE_gpu-admission")), &[]);
    let env: Vec<_> = (0..5_000)
        .map(|i| json!({"name": format!("SETTING_{i}"), "value": format!("value-{i}")}))
        .collect();
    let pod = pod_review(&serde_json::to_string(&env).unwrap());
    let (status, answer) = server.post("/mutate", &pod).await;
    assert_eq!(status, 200);
    assert_eq!(
        answer["response"]["allowed"], true,
        "{}",
        answer["response"]
    );
    assert!(
        answer["response"]["patch"].is_string(),
        "the GPU pod is placed"
    );
    let (status, answer) = server.post("/validate", &pod).await;
    assert_eq!(status, 200);
    assert_eq!(
        answer["response"]["allowed"], true,
        "{}",
        answer["response"]
    );

    let containers: Vec<_> = (0..50)
        .map(|i| {
            json!({
                "name": format!("worker-{i}"),
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "command": ["python", "train.py", "--shard", i.to_string()],
                "env": (0..20).map(|j| json!({"name": format!("E{j}"), "value": "x"})).collect::<Vec<_>>(),
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
            })
        })
        .collect();
    let deployment = review_of(
        "CREATE",
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "workers", "namespace": "ml"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "workers"}},
                "template": {
                    "metadata": {"labels": {"app": "workers"}},
                    "spec": {"containers": containers, "volumes": [{"name": "data", "emptyDir": {}}]}
                }
            }
        }),
        serde_json::Value::Null,
    );
    let (status, answer) = server.post("/validate", &deployment).await;
    assert_eq!(status, 200);
    assert_eq!(
        answer["response"]["allowed"], true,
        "{}",
        answer["response"]
    );

    let entries: serde_json::Map<String, serde_json::Value> = (0..10_000)
        .map(|i| (format!("key-{i:05}"), json!("v".repeat(90))))
        .collect();
    let custom = review_of(
        "CREATE",
        json!({
            "apiVersion": "example.com/v1",
            "kind": "Dataset",
            "metadata": {"name": "shards", "namespace": "ml"},
            "spec": {"entries": entries}
        }),
        serde_json::Value::Null,
    );
    assert!(custom.len() > 1 << 20, "{} bytes", custom.len());
    let (status, answer) = server.post("/validate", &custom).await;
    assert_eq!(status, 200);
    assert_eq!(
        answer["response"]["allowed"], true,
        "{}",
        answer["response"]
    );
}

/// kube-apiserver is one address (or a few): a burst of large reviews
/// from it, far past its share of body memory, waits for memory (the
/// bodies not yet read are held back by TCP or HTTP/2 flow control)
/// instead of being refused, over HTTP/1 and over HTTP/2. Here 24 reviews
/// of 2 MiB at once from one address, whose share holds five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_from_one_address_waits_for_memory() {
    const REVIEWS: usize = 24;
    // Bodies get 16 MiB (an address, and /validate, two thirds of it; a
    // connection 7 MiB, the largest body); decoded requests 32 MiB.
    let server = TestServer::start(ServeConfig {
        in_flight_bytes: 48 << 20,
        decode_limits: gpu_admission::review::Limits {
            max_decoded_bytes: 16 << 20,
            ..Default::default()
        },
        ..config()
    })
    .await;
    let body = large_pod_review(2 << 20);
    for (what, http2) in [("HTTP/1", None), ("HTTP/2 on 2 connections", Some(2))] {
        let answers = burst(
            server.addr,
            &server.ca_pem,
            "/validate?timeout=30s",
            &body,
            REVIEWS,
            http2,
            Duration::from_secs(60),
        )
        .await;
        let (allowed, other) = tally(&answers);
        eprintln!("{what}: {allowed} of {REVIEWS} reviews of 2 MiB allowed, others {other:?}");
        assert_eq!(allowed, REVIEWS, "{what}: {other:?}");
    }
    let refused = server
        .metric(
            r#"gpu_admission_rejected_requests_total{endpoint="validate",reason="client_share"}"#,
        )
        .await;
    assert_eq!(refused, 0.0, "none refused for the address's share");
    server.stop().await;
}
