//! Denials a developer can act on in one go, through the shipped webhook
//! configurations over TLS: every offending container in one denial (the
//! first three by name, then how many more), the infrastructure fix for a
//! container that is GPU infrastructure, and the GPU-like resource no
//! placement profile knows, named with where to add it.
use crate::common;

use common::webhooks::{Cluster, Review};
use serde_json::{json, Value};

fn gpu_container(name: &str) -> Value {
    json!({"name": name, "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "command": ["torchrun", "train.py"],
        "securityContext": {"privileged": true},
        "resources": {"limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}}})
}

/// An init container that asks for no GPU and runs a shell, privileged.
fn privileged_init() -> Value {
    json!({"name": "fetch-weights", "image": "mcr.microsoft.com/azure-cli:2.67.0",
        "command": ["sh", "-c", "az storage blob download-batch -d /models -s weights"],
        "securityContext": {"privileged": true}})
}

fn pod_spec() -> Value {
    json!({"restartPolicy": "Never",
        "initContainers": [privileged_init()],
        "containers": [gpu_container("train")]})
}

/// The one denial line of `policy` in `message`, which must name both
/// privileged containers.
fn names_both(message: &str, policy: &str) {
    let lines: Vec<&str> = message
        .lines()
        .filter(|l| l.starts_with(&format!("{policy}: ")))
        .collect();
    assert_eq!(lines.len(), 1, "{message}");
    assert!(
        lines[0].contains(
            "init container fetch-weights and container train are privileged in a GPU pod and would see every GPU of the node for as long as they run; remove securityContext.privileged (the GPU device plugin already gives the container its GPUs; an init step that only changes the network can run iptables, ip or sysctl directly, with capabilities.add [NET_ADMIN])"
        ),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobset_and_a_pod_with_two_privileged_containers_are_told_of_both_at_once() {
    let cluster = Cluster::start().await;
    let jobset = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "finetune", "namespace": "ml"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1,
            "template": {"spec": {"template": {"spec": pod_spec()}}}}]}});
    let outcome = cluster.admit(&Review::create(jobset)).await;
    assert_eq!(
        outcome.denied_by.as_deref(),
        Some("workload-kinds.validate.gpu-admission.io"),
        "{}",
        outcome.message()
    );
    names_both(outcome.message(), "gpu-privileged");
    assert!(
        outcome
            .message()
            .contains("gpu-privileged: JobSet ml/finetune replicatedJobs[workers]: "),
        "{}",
        outcome.message()
    );

    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "finetune-0", "namespace": "ml"}, "spec": pod_spec()});
    let outcome = cluster.admit(&Review::create(pod)).await;
    assert_eq!(
        outcome.denied_by.as_deref(),
        Some("pods.validate.gpu-admission.io"),
        "{}",
        outcome.message()
    );
    names_both(outcome.message(), "gpu-privileged");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_privileged_containers_are_named_three_at_a_time_with_a_count() {
    let cluster = Cluster::start().await;
    let containers: Vec<Value> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|n| gpu_container(n))
        .collect();
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "fleet", "namespace": "ml"},
        "spec": {"containers": containers}});
    let outcome = cluster.admit(&Review::create(pod)).await;
    assert!(!outcome.allowed);
    assert!(
        outcome
            .message()
            .contains("gpu-privileged: containers a, b, c and 2 more are privileged in a GPU pod"),
        "{}",
        outcome.message()
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_exporter_in_an_unmarked_namespace_is_told_the_infrastructure_fix() {
    let cluster = Cluster::start().await;
    let exporter = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "dcgm-exporter", "namespace": "monitoring"},
        "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "dcgm-exporter"}},
            "template": {"metadata": {"labels": {"app.kubernetes.io/name": "dcgm-exporter"}},
                "spec": {"nodeSelector": {"kubernetes.azure.com/accelerator": "nvidia"},
                    "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                    "containers": [{"name": "dcgm-exporter",
                        "image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",
                        "env": [{"name": "DCGM_EXPORTER_LISTEN", "value": ":9400"},
                            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]}}}});
    let outcome = cluster.admit(&Review::create(exporter.clone())).await;
    let message = outcome.message();
    assert!(!outcome.allowed);
    assert!(
        message.contains("gpu-visible-devices-leak: DaemonSet dcgm-exporter: container dcgm-exporter runs nvcr.io/nvidia/k8s/dcgm-exporter, GPU infrastructure that must see every GPU"),
        "{message}"
    );
    assert!(
        message.contains(
            "kubectl label namespace monitoring gpu-admission.io/gpu-infrastructure=true"
        ),
        "{message}"
    );
    // Not told to hide the GPUs it exists to watch, nor the fix twice.
    assert!(!message.contains("remove the variable"), "{message}");
    assert_eq!(message.matches("exemptNamespaces").count(), 1, "{message}");

    // Once an admin marks the namespace, the same DaemonSet is admitted.
    let outcome = cluster
        .admit(
            &Review::create(exporter)
                .namespace_labels(&[("gpu-admission.io/gpu-infrastructure", "true")]),
        )
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_resource_no_profile_knows_is_named_with_where_to_add_it() {
    let cluster = Cluster::start().await;
    let pod = |limits: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "vgpu-infer", "namespace": "ml"},
            "spec": {"tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                "containers": [{"name": "infer", "image": "vllm/vllm-openai:v0.6.3",
                    "resources": {"limits": limits}}]}})
    };
    let outcome = cluster
        .admit(&Review::create(pod(
            json!({"nvidia.com/vgpu": "1", "cpu": "2", "memory": "8Gi"}),
        )))
        .await;
    let message = outcome.message();
    assert!(!outcome.allowed);
    assert!(
        message
            .contains("gpu-node-isolation: pod asks for no GPU but tolerates the GPU node taint"),
        "{message}"
    );
    assert!(
        message.contains("; container infer asks for nvidia.com/vgpu, which no placement profile knows as a GPU resource: if it counts GPUs, add it to the resources: list of a placement profile (policies/placement/aks-nvidia.yaml)"),
        "{message}"
    );

    // A GPU asked as zero is not an unknown resource.
    let outcome = cluster
        .admit(&Review::create(pod(json!({"nvidia.com/gpu": "0"}))))
        .await;
    assert!(!outcome.allowed);
    assert!(
        !outcome.message().contains("no placement profile knows"),
        "{}",
        outcome.message()
    );
    cluster.stop().await;
}
