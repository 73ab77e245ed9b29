//! Fit and reach counted as the scheduler counts them, through the shipped
//! webhook configurations over TLS: pod-level resources, workload
//! templates judged against the nodes that exist, node selections no node
//! can meet, and GPU shares a sharing scheduler hands out through
//! annotations. The server watches four pools: system (CPU), gpupool (T4),
//! a100 and h100, the GPU pools tainted `sku=gpu:NoSchedule`.
use crate::common;

use common::webhooks::{Cluster, Outcome, Review};
use gpu_admission::gpu::StaticNodes;
use serde_json::{json, Value};

const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const T4: &str = "Standard_NC4as_T4_v3";
const A100: &str = "Standard_NC24ads_A100_v4";
const H100: &str = "Standard_ND96isr_H100_v5";

/// A Node as the API server lists it: an AKS pool's labels, and on GPU
/// pools the accelerator label, the GPU taint and GPUs in allocatable.
fn node(name: &str, pool: &str, size: &str, gpus: u32) -> Value {
    let mut node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.azure.com/agentpool": pool, INSTANCE_TYPE: size,
            "kubernetes.io/os": "linux", "kubernetes.io/hostname": name}},
        "spec": {}, "status": {"allocatable": {"cpu": "3860m", "memory": "27Gi"}}});
    if gpus > 0 {
        node["metadata"]["labels"]["kubernetes.azure.com/accelerator"] = json!("nvidia");
        node["spec"]["taints"] = json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]);
        node["status"]["allocatable"]["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    node
}

async fn cluster() -> Cluster {
    let nodes = [
        node(
            "aks-system-31415926-vmss000000",
            "system",
            "Standard_D4s_v5",
            0,
        ),
        node("aks-gpupool-27182818-vmss000000", "gpupool", T4, 1),
        node("aks-a100-16180339-vmss000000", "a100", A100, 1),
        node("aks-h100-14142135-vmss000000", "h100", H100, 8),
    ];
    Cluster::start_with_nodes(StaticNodes::of_objects(
        &nodes,
        Vec::new(),
        &Default::default(),
    ))
    .await
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"}, "spec": spec})
}

/// A Job as `kubectl apply` sends it, its pods described by `spec`.
fn job(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"backoffLimit": 2, "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
}

/// A training container asking for one NVIDIA GPU and, unless `sized` is
/// false, for CPU and memory of its own.
fn trainer(sized: bool) -> Value {
    let mut c = json!({"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["python", "train.py"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}}});
    if sized {
        c["resources"]["requests"] = json!({"cpu": "2", "memory": "8Gi"});
    }
    c
}

fn denied_with(outcome: &Outcome, texts: &[&str]) {
    assert!(!outcome.allowed, "allowed: {outcome:?}");
    for text in texts {
        assert!(
            outcome.message().contains(text),
            "{text:?} not in: {}",
            outcome.message()
        );
    }
}

fn allowed(outcome: &Outcome) {
    assert!(outcome.allowed, "{}", outcome.message());
}

fn warned(outcome: &Outcome, text: &str) -> bool {
    outcome.warnings.iter().any(|w| w.contains(text))
}

/// `spec.resources` (pod-level resources, beta and on by default since
/// Kubernetes 1.34): the scheduler counts them in place of the sum of the
/// containers', so 40 CPU never fit a 4-vCPU size, and a pod that sizes
/// itself there is not one that "requests no CPU or memory".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_level_resources_count_as_the_scheduler_counts_them() {
    let c = cluster().await;
    let sized_at_pod_level = |cpu: &str| {
        pod(
            "pod-level",
            json!({"nodeSelector": {INSTANCE_TYPE: T4},
                "resources": {"requests": {"cpu": cpu, "memory": "8Gi"}, "limits": {"memory": "8Gi"}},
                "containers": [trainer(false)]}),
        )
    };
    let outcome = c.admit(&Review::create(sized_at_pod_level("40"))).await;
    assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
    denied_with(
        &outcome,
        &["gpu-pod-fit: pod asks for 40 CPU", T4, "never schedule"],
    );
    assert!(
        !warned(&outcome, "requests no CPU"),
        "{:?}",
        outcome.warnings
    );

    let outcome = c.admit(&Review::create(sized_at_pod_level("2"))).await;
    allowed(&outcome);
    assert!(!warned(&outcome, "requests no"), "{:?}", outcome.warnings);

    // Limits alone at pod level: the API server defaults the requests to them.
    let mut limits_only = sized_at_pod_level("2");
    limits_only["spec"]["resources"] = json!({"limits": {"cpu": "40", "memory": "8Gi"}});
    denied_with(
        &c.admit(&Review::create(limits_only)).await,
        &["gpu-pod-fit: pod asks for 40 CPU"],
    );

    // A Job's template is judged the same way.
    let mut spec = sized_at_pod_level("40")["spec"].clone();
    spec["restartPolicy"] = json!("Never");
    denied_with(
        &c.admit(&Review::create(job("pod-level", spec))).await,
        &["gpu-pod-fit", "40 CPU"],
    );
    c.stop().await;
}

/// With the node cache on, a template is judged as its pods will be: a
/// Job whose pods select the H100 pool in a default-tier namespace is
/// refused once at apply, not pod after pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_are_judged_against_the_nodes_that_exist() {
    let c = cluster().await;
    let pinned_to = |pool: &str| {
        json!({"restartPolicy": "Never",
            "nodeSelector": {"kubernetes.azure.com/agentpool": pool},
            "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            "containers": [trainer(true)]})
    };
    let outcome = c
        .admit(&Review::create(job("h100", pinned_to("h100"))))
        .await;
    assert_eq!(
        outcome.validated_by,
        ["workloads.validate.gpu-admission.io"]
    );
    denied_with(&outcome, &["Job h100: ", "gpu-sku-allowlist", H100]);
    // Its pod, as the Job controller would create it, the same.
    let outcome = c
        .admit(&Review::create(pod("h100", pinned_to("h100"))))
        .await;
    denied_with(&outcome, &["gpu-sku-allowlist", H100]);
    // The T4 pool is in the tier.
    allowed(
        &c.admit(&Review::create(job("t4", pinned_to("gpupool"))))
            .await,
    );
    allowed(
        &c.admit(&Review::create(pod("t4", pinned_to("gpupool"))))
            .await,
    );
    // A pool with no node yet (scaled to zero) is not judged by nodes.
    allowed(
        &c.admit(&Review::create(job("new", pinned_to("newpool"))))
            .await,
    );
    c.stop().await;
}

/// JobSet's merge of two Kueue flavors on resume: the nodeSelector names
/// the A100 size, the required node affinity the T4 size. No node has
/// both: denied as never schedulable, naming both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selection_no_node_can_meet_is_denied_naming_the_contradiction() {
    let c = cluster().await;
    let both = |terms: Value| {
        json!({"restartPolicy": "Never",
            "nodeSelector": {INSTANCE_TYPE: A100},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms}}},
            "containers": [trainer(true)]})
    };
    let t4_only =
        json!([{"matchExpressions": [{"key": INSTANCE_TYPE, "operator": "In", "values": [T4]}]}]);
    let want = [
        "gpu-placement",
        "never",
        &format!("nodeSelector {INSTANCE_TYPE}={A100}"),
        &format!("{INSTANCE_TYPE} In [{T4}]"),
    ];
    let mut child = job("trainer-0", both(t4_only.clone()));
    child["metadata"]["labels"] = json!({"jobset.sigs.k8s.io/jobset-name": "trainer"});
    let outcome = c.admit(&Review::create(child)).await;
    denied_with(&outcome, &want);
    let outcome = c.admit(&Review::create(pod("both", both(t4_only)))).await;
    denied_with(&outcome, &want);

    // Terms are ORed: one the nodeSelector meets keeps the pod schedulable
    // (on the A100, which tier default does not allow: that is the denial).
    let either = json!([
        {"matchExpressions": [{"key": INSTANCE_TYPE, "operator": "In", "values": [T4]}]},
        {"matchExpressions": [{"key": INSTANCE_TYPE, "operator": "In", "values": [A100, T4]}]}
    ]);
    let outcome = c.admit(&Review::create(pod("either", both(either)))).await;
    denied_with(&outcome, &["gpu-sku-allowlist"]);
    assert!(
        !outcome.message().contains("never"),
        "{}",
        outcome.message()
    );
    // Different keys a node has together: allowed.
    let t4 = json!({"restartPolicy": "Never",
        "nodeSelector": {"kubernetes.azure.com/agentpool": "gpupool"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": INSTANCE_TYPE, "operator": "In", "values": [T4]},
                {"key": "kubernetes.io/os", "operator": "NotIn", "values": ["windows"]}]}]}}},
        "containers": [trainer(true)]});
    allowed(&c.admit(&Review::create(pod("t4", t4.clone()))).await);
    allowed(&c.admit(&Review::create(job("t4", t4))).await);
    c.stop().await;
}

/// KAI Scheduler's GPU share: the `gpu-fraction` annotation on a pod whose
/// scheduler is `kai-scheduler`, no GPU resource. It is a GPU pod: sent to
/// `/mutate`, placed on GPU nodes (toleration included), and judged as one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kai_fraction_pods_are_placed_and_judged_as_gpu_pods() {
    let c = cluster().await;
    let kai = |scheduler: &str, command: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "gpu-sharing", "namespace": "ml",
                "labels": {"kai.scheduler/queue": "default-queue"},
                "annotations": {"gpu-fraction": "0.5"}},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "gpu-workload",
                "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "command": command,
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}})
    };
    let outcome = c
        .admit(&Review::create(kai(
            "kai-scheduler",
            json!(["python", "serve.py"]),
        )))
        .await;
    assert_eq!(outcome.mutated_by, ["pods.mutate.gpu-admission.io"]);
    allowed(&outcome);
    let stored = outcome.object.as_ref().expect("object");
    let tolerations = stored["spec"]["tolerations"]
        .as_array()
        .expect("tolerations");
    assert!(
        tolerations
            .iter()
            .any(|t| t["key"] == "sku" && t["value"] == "gpu"),
        "{tolerations:?}"
    );
    assert!(
        stored
            .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")
            .is_some(),
        "{stored}"
    );
    // Its container holds the share: a keep-alive is warned as on a GPU pod.
    let outcome = c
        .admit(&Review::create(kai(
            "kai-scheduler",
            json!(["sleep", "infinity"]),
        )))
        .await;
    allowed(&outcome);
    assert!(warned(&outcome, "gpu-keep-alive"), "{:?}", outcome.warnings);

    // The default scheduler ignores the annotation: no GPU, not sent.
    let outcome = c
        .admit(&Review::create(kai(
            "default-scheduler",
            json!(["sleep", "infinity"]),
        )))
        .await;
    assert!(outcome.mutated_by.is_empty(), "{:?}", outcome.mutated_by);
    allowed(&outcome);
    assert!(
        !warned(&outcome, "gpu-keep-alive"),
        "{:?}",
        outcome.warnings
    );
    c.stop().await;
}
