//! Pods that can never fit, as a cluster running the shipped configuration
//! treats them: the `deploy/base/` webhook configurations decide what
//! reaches the server, then `/mutate` and `/validate` over TLS.
use crate::common;

use common::webhooks::{Cluster, Review};
use serde_json::{json, Value};

/// 1 GPU with 32 CPU and 500Gi, pinned to the 4-vCPU, 28 GiB T4 size.
fn probe_spec() -> Value {
    json!({
        "nodeSelector": {"node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3"},
        "containers": [{
            "name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "resources": {
                "requests": {"cpu": "32", "memory": "500Gi"},
                "limits": {"nvidia.com/gpu": "1", "cpu": "32", "memory": "500Gi"}
            }
        }]
    })
}

const PROBE_DENIAL: &str =
    "pod asks for 32 CPU and 500 GiB memory, but the only size it may land on, \
    Standard_NC4as_T4_v3, has 4 vCPU and 28 GiB (at most 3.86 CPU and 27.66 GiB left for pods \
    after the node reserve of 140m CPU and 338 MiB)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_cannot_fit_their_size_are_denied_through_the_shipped_webhooks() {
    let cluster = Cluster::start().await;
    let labels = [("gpu-admission.io/tier", "default")];

    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": probe_spec()
    });
    let outcome = cluster
        .admit(&Review::create(pod).namespace_labels(&labels))
        .await;
    assert!(!outcome.allowed, "probe pod allowed");
    assert!(
        outcome.message().contains(PROBE_DENIAL),
        "{}",
        outcome.message()
    );
    assert!(
        outcome.message().contains("gpu-pod-fit"),
        "{}",
        outcome.message()
    );

    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "train"}},
            "template": {"metadata": {"labels": {"app": "train"}}, "spec": probe_spec()}}
    });
    let outcome = cluster
        .admit(&Review::create(deployment).namespace_labels(&labels))
        .await;
    assert!(!outcome.allowed, "probe Deployment allowed");
    assert!(
        outcome.message().contains("Deployment train: ")
            && outcome.message().contains(PROBE_DENIAL),
        "{}",
        outcome.message()
    );

    // The same pod asking for what the size leaves is allowed.
    let mut fits = probe_spec();
    fits["containers"][0]["resources"] = json!({
        "requests": {"cpu": "3", "memory": "24Gi"},
        "limits": {"nvidia.com/gpu": "1", "cpu": "3", "memory": "24Gi"}
    });
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "infer", "namespace": "ml"},
        "spec": fits
    });
    let outcome = cluster
        .admit(&Review::create(pod).namespace_labels(&labels))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    cluster.stop().await;
}

/// 8 × `mig-1g.10gb` pinned to one A100 80GB (7 of that profile per GPU).
fn mig_spec(count: &str) -> Value {
    json!({
        "nodeSelector": {"node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"},
        "containers": [{
            "name": "infer", "image": "nvcr.io/nvidia/tritonserver:24.08-py3",
            "resources": {"limits": {"nvidia.com/mig-1g.10gb": count, "cpu": "4", "memory": "16Gi"}}
        }]
    })
}

const MIG_DENIAL: &str =
    "gpu-pod-fit: pod asks for 8 nvidia.com/mig-1g.10gb, but the only size it \
    may land on, Standard_NC24ads_A100_v4 (1 × A100 80GB), holds at most 7 nvidia.com/mig-1g.10gb \
    (7 per GPU × 1 GPU), not 8";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_slices_beyond_the_size_are_denied_through_the_shipped_webhooks() {
    let cluster = Cluster::start().await;
    let labels = [
        ("gpu-admission.io/tier", "premium"),
        ("gpu-admission.io/premium-gpus", "true"),
    ];
    let pod = |name: &str, count: &str| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": mig_spec(count)
        })
    };
    let outcome = cluster
        .admit(&Review::create(pod("eight", "8")).namespace_labels(&labels))
        .await;
    assert!(!outcome.allowed, "8 slices on one A100 allowed");
    assert!(
        outcome.message().contains(MIG_DENIAL),
        "{}",
        outcome.message()
    );

    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "eight", "namespace": "ml"},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "nodeSelector": mig_spec("8")["nodeSelector"].clone(),
            "containers": mig_spec("8")["containers"].clone()
        }}}
    });
    let outcome = cluster
        .admit(&Review::create(job).namespace_labels(&labels))
        .await;
    assert!(!outcome.allowed, "Job of 8 slices on one A100 allowed");
    assert!(
        outcome
            .message()
            .contains("Job eight: pod asks for 8 nvidia.com/mig-1g.10gb"),
        "{}",
        outcome.message()
    );

    // Seven fit.
    let outcome = cluster
        .admit(&Review::create(pod("seven", "7")).namespace_labels(&labels))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    cluster.stop().await;
}
