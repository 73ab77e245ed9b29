//! The memory estimate a review is sized by before decoding bounds what
//! answering it really allocates: decoding, converting to CEL values, the
//! pod built from a controller's template, every shipped policy. Counted
//! exactly by a global allocator that records peak heap use, so the check
//! is deterministic. One test function: the allocator is process-wide.

// Tests read fixtures with `Value::pointer`: clippy.toml keeps it out of
// the crate itself, where objects under admission are read per request.
#![allow(clippy::disallowed_methods)]
mod common;

use common::hostile::review_of;
use gpu_admission::admission::Admission;
use gpu_admission::cli::serve::load_bundle;
use gpu_admission::daemon::DaemonConfig;
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::review;
use peak_alloc::PeakAlloc;
use serde_json::{json, Value};
use std::sync::Arc;

#[global_allocator]
static HEAP: PeakAlloc = PeakAlloc;

fn gpu_container(name: &str, env: Vec<Value>) -> Value {
    json!({
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["torchrun", "--nproc-per-node=1", "train.py"],
        "env": env,
        "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"}}
    })
}

fn env(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"name": format!("SETTING_{i}"), "value": format!("value-{i}")}))
        .collect()
}

fn pod(containers: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml", "labels": {"app": "trainer"}},
        "spec": {"containers": containers, "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}
    })
}

fn deployment(containers: Vec<Value>) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "trainer"}},
            "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": {"containers": containers}}}
    })
}

/// On a thread with the evaluation stack, as `serve`'s answering threads
/// answer (the request evaluated where it is, not copied).
#[test]
fn the_estimate_bounds_what_answering_allocates() {
    std::thread::Builder::new()
        .stack_size(gpu_admission::policy::EVALUATION_STACK)
        .spawn(measure_cases)
        .unwrap()
        .join()
        .unwrap();
}

fn measure_cases() {
    let bundle = load_bundle(&DaemonConfig::default()).expect("built-in policies");
    let admission = Admission::new(bundle, Arc::new(StaticNamespaces::new()));
    let one_key: Vec<Value> = vec![json!({"a": 0}); 15_000];
    let cases = [
        (
            "pod with 5,000 env entries",
            review_of(
                "CREATE",
                pod(vec![gpu_container("train", env(5_000))]),
                Value::Null,
            ),
        ),
        (
            "pod with 15,000 one-key objects",
            review_of(
                "CREATE",
                pod(vec![gpu_container("train", one_key.clone())]),
                Value::Null,
            ),
        ),
        (
            "Deployment with 50 containers",
            review_of(
                "CREATE",
                deployment(
                    (0..50)
                        .map(|i| gpu_container(&format!("w{i}"), env(20)))
                        .collect(),
                ),
                Value::Null,
            ),
        ),
        (
            "Deployment UPDATE, 2,000 env entries in each template",
            review_of(
                "UPDATE",
                deployment(vec![gpu_container("train", env(2_000))]),
                deployment(vec![gpu_container("train", env(2_000))]),
            ),
        ),
        (
            "Deployment of one-key objects",
            review_of(
                "CREATE",
                deployment(vec![gpu_container("train", one_key)]),
                Value::Null,
            ),
        ),
    ];
    // Warm up lazily built state (catalog, regex caches, thread pools).
    let warm = review::decode(&cases[0].1).unwrap();
    admission.mutate(&warm);
    admission.validate(&warm);
    drop(warm);

    for (name, body) in &cases {
        let before = HEAP.current_usage();
        HEAP.reset_peak_usage();
        let envelope = review::open(body).unwrap();
        let shape = envelope.measure(&review::Limits::default()).unwrap();
        let request = envelope.decode().unwrap();
        let mutated = admission.mutate(&request);
        let validated = admission.validate(&request);
        let used = HEAP.peak_usage() - before;
        drop((request, mutated, validated));
        eprintln!(
            "{name}: {} values, estimate {:.1} MiB, peak heap {:.1} MiB",
            shape.nodes,
            shape.decoded_bytes as f64 / 1048576.0,
            used as f64 / 1048576.0
        );
        assert!(
            used <= shape.decoded_bytes,
            "{name}: answering took {used} bytes, more than the estimate {}",
            shape.decoded_bytes
        );
        assert!(
            shape.decoded_bytes <= used * 6,
            "{name}: the estimate {} is far above the {used} bytes used, which wastes the budget",
            shape.decoded_bytes
        );
    }
}
