//! Issue 10's Dynamic Resource Allocation false denial (`resource.k8s.io/v1`
//! claims of a GPU device class) as a cluster running the shipped
//! configuration treats it: the `deploy/base/` webhook configurations
//! decide which webhooks a claim template or a claiming pod is sent to,
//! then `/mutate` and `/validate` answer over TLS, the server resolving a
//! pod's claims from its claim cache.
use crate::common;

use common::webhooks::{Cluster, Review};
use gpu_admission::k8s::StaticClaims;
use serde_json::{json, Value};

const PODS_MUTATE: &str = "pods.mutate.gpu-admission.io";
const PODS_VALIDATE: &str = "pods.validate.gpu-admission.io";
const CLAIMS_VALIDATE: &str = "resourceclaims.validate.gpu-admission.io";

/// A ResourceClaimTemplate in `ml` asking for `count` devices of `class`,
/// as NVIDIA's DRA driver examples write them.
fn claim_template(name: &str, class: &str, count: u64) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [{
            "name": "gpu",
            "exactly": {"deviceClassName": class, "allocationMode": "ExactCount", "count": count}
        }]}}}
    })
}

/// A pod in `ml` whose container uses the claim made from `template`.
fn claiming_pod(name: &str, template: &str, tolerations: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": {"app": name}},
        "spec": {
            "tolerations": tolerations,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{
                "name": "serve",
                "image": "nvcr.io/nvidia/tritonserver:24.08-py3",
                "args": ["tritonserver", "--model-repository=/models"],
                "resources": {
                    "requests": {"cpu": "2", "memory": "8Gi"},
                    "limits": {"memory": "8Gi"},
                    "claims": [{"name": "gpu"}]
                }
            }]
        }
    })
}

fn gpu_toleration() -> Value {
    json!({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
}

/// The claim templates the namespace holds: one GPU, and a NIC of a
/// device class that is no GPU.
async fn cluster() -> Cluster {
    let mut claims = StaticClaims::new();
    for template in [
        claim_template("single-gpu", "gpu.nvidia.com", 1),
        claim_template("rdma-nic", "rdma.mellanox.com", 1),
    ] {
        assert!(claims.insert(&template, "ml"));
    }
    Cluster::start_with_claims(claims).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_claiming_a_gpu_through_a_template_is_placed_and_allowed() {
    let cluster = cluster().await;
    let outcome = cluster
        .admit(&Review::create(claiming_pod(
            "triton",
            "single-gpu",
            json!([]),
        )))
        .await;
    assert_eq!(outcome.mutated_by, [PODS_MUTATE]);
    assert_eq!(outcome.validated_by, [PODS_VALIDATE]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    let object = outcome.object.unwrap();
    assert_eq!(
        object["metadata"]["annotations"]["gpu-admission.io/placement-profile"],
        "aks-nvidia"
    );
    assert_eq!(object["spec"]["tolerations"], json!([gpu_toleration()]));
    let terms = object["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        .as_array()
        .expect("node affinity added")
        .clone();
    assert_eq!(terms.len(), 2, "{terms:?}");
    assert_eq!(
        terms[0]["matchExpressions"][0],
        json!({"key": "kubernetes.azure.com/accelerator", "operator": "In", "values": ["nvidia"]})
    );
    assert_eq!(
        terms[1]["matchExpressions"][0],
        json!({"key": "karpenter.azure.com/sku-gpu-manufacturer", "operator": "In", "values": ["nvidia"]})
    );
    for term in &terms {
        assert_eq!(
            term["matchExpressions"][1]["key"], "node.kubernetes.io/instance-type",
            "the default tier's pin: {term}"
        );
        assert_eq!(
            term["matchExpressions"][1]["values"][0],
            "Standard_NC4as_T4_v3"
        );
    }
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_templates_go_to_the_claims_webhook_and_sixteen_gpus_are_denied() {
    let cluster = cluster().await;
    let outcome = cluster
        .admit(&Review::create(claim_template(
            "single-gpu",
            "gpu.nvidia.com",
            1,
        )))
        .await;
    assert!(outcome.mutated_by.is_empty(), "{:?}", outcome.mutated_by);
    assert_eq!(outcome.validated_by, [CLAIMS_VALIDATE]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);

    let outcome = cluster
        .admit(&Review::create(claim_template(
            "sixteen-gpus",
            "gpu.nvidia.com",
            16,
        )))
        .await;
    assert_eq!(outcome.validated_by, [CLAIMS_VALIDATE]);
    assert!(!outcome.allowed, "a 16-GPU claim template allowed");
    assert_eq!(outcome.denied_by.as_deref(), Some(CLAIMS_VALIDATE));
    assert!(
        outcome.message().contains(
            "gpu-count-limits: ResourceClaimTemplate sixteen-gpus asks for 16 GPUs; at most 8 per pod"
        ),
        "{}",
        outcome.message()
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_claiming_a_non_gpu_device_and_tolerating_the_gpu_taint_is_denied() {
    let cluster = cluster().await;
    let pod = claiming_pod("nccl-proxy", "rdma-nic", json!([gpu_toleration()]));
    let outcome = cluster.admit(&Review::create(pod.clone())).await;
    // Sent (it has resource claims), but not placed: no GPU device class.
    // It can land on GPU nodes, so its GPUs are hidden (and it is denied).
    assert_eq!(outcome.mutated_by, [PODS_MUTATE]);
    assert_eq!(outcome.validated_by, [PODS_VALIDATE]);
    let mut hidden = pod;
    hidden["spec"]["containers"][0]["env"] =
        json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]);
    assert_eq!(outcome.object, Some(hidden), "{:?}", outcome.patch);
    assert!(!outcome.allowed, "a NIC claim counted as a GPU");
    assert_eq!(outcome.denied_by.as_deref(), Some(PODS_VALIDATE));
    assert!(
        outcome
            .message()
            .contains("gpu-node-isolation: pod asks for no GPU but tolerates the GPU node taint"),
        "{}",
        outcome.message()
    );
    cluster.stop().await;
}
