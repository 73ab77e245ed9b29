//! Issue 10, bypass 6 (SKU tier) and the AMD false denial, as a cluster
//! running the shipped configuration treats them: the `deploy/base/`
//! webhook configurations decide which webhooks a pod is sent to, then
//! `/mutate` places it (the tier's `node.kubernetes.io/instance-type` pin
//! included) and `/validate` judges the placed pod, over TLS.
use crate::common;

use common::webhooks::{Cluster, Outcome, Review};
use serde_json::{json, Value};

const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const PROFILE: &str = "gpu-admission.io/placement-profile";
const PODS_MUTATE: &str = "pods.mutate.gpu-admission.io";
const PODS_VALIDATE: &str = "pods.validate.gpu-admission.io";
/// Tier `default` of policies/gpu-sku-allowlist.yaml.
const DEFAULT_SIZES: [&str; 6] = [
    "Standard_NC4as_T4_v3",
    "Standard_NC8as_T4_v3",
    "Standard_NC16as_T4_v3",
    "Standard_NC64as_T4_v3",
    "Standard_NV36ads_A10_v5",
    "Standard_NV72ads_A10_v5",
];

/// A training pod asking for one GPU of `resource`, as `kubectl apply`
/// sends it (quantities as strings).
fn gpu_pod(name: &str, namespace: &str, image: &str, resource: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "train",
                "image": image,
                "command": ["python", "train.py", "--epochs", "10"],
                "resources": {
                    "requests": {"cpu": "4", "memory": "16Gi", resource: "1"},
                    "limits": {"cpu": "4", "memory": "16Gi", resource: "1"}
                }
            }]
        }
    })
}

fn nvidia_pod(name: &str, namespace: &str) -> Value {
    gpu_pod(
        name,
        namespace,
        "nvcr.io/nvidia/pytorch:24.08-py3",
        "nvidia.com/gpu",
    )
}

/// The required node-selector terms of the stored pod.
fn terms(outcome: &Outcome) -> Vec<Value> {
    outcome
        .object
        .as_ref()
        .expect("object")
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The values of each `key In [...]` requirement of `term`.
fn values_of(term: &Value, key: &str) -> Vec<Vec<String>> {
    term["matchExpressions"]
        .as_array()
        .expect("matchExpressions")
        .iter()
        .filter(|e| e["key"] == key && e["operator"] == "In")
        .map(|e| {
            e["values"]
                .as_array()
                .expect("values")
                .iter()
                .map(|v| v.as_str().expect("string value").to_string())
                .collect()
        })
        .collect()
}

/// Every required term of the stored pod pins it to exactly `sizes`.
fn assert_pinned(outcome: &Outcome, sizes: &[&str]) {
    let terms = terms(outcome);
    assert!(!terms.is_empty(), "no required terms");
    for term in &terms {
        assert_eq!(values_of(term, INSTANCE_TYPE), [strings(sizes)], "{term}");
    }
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|s| s.to_string()).collect()
}

fn gpu_toleration() -> Value {
    json!({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_gpu_pod_in_an_unlabelled_namespace_is_pinned_to_the_default_sizes() {
    let cluster = Cluster::start().await;
    let outcome = cluster
        .admit(&Review::create(nvidia_pod("resnet50", "ml")))
        .await;
    assert_eq!(outcome.mutated_by, [PODS_MUTATE]);
    assert_eq!(outcome.validated_by, [PODS_VALIDATE]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);

    let object = outcome.object.clone().unwrap();
    assert_eq!(object["metadata"]["annotations"][PROFILE], "aks-nvidia");
    assert_eq!(object["spec"]["tolerations"], json!([gpu_toleration()]));
    // Both kinds of NVIDIA capacity, each pinned to the tier's sizes.
    let terms = terms(&outcome);
    assert_eq!(terms.len(), 2, "{terms:?}");
    assert_eq!(
        values_of(&terms[0], "kubernetes.azure.com/accelerator"),
        [strings(&["nvidia"])]
    );
    assert_eq!(
        values_of(&terms[1], "karpenter.azure.com/sku-gpu-manufacturer"),
        [strings(&["nvidia"])]
    );
    for term in &terms {
        assert_eq!(
            values_of(term, INSTANCE_TYPE),
            [strings(&DEFAULT_SIZES)],
            "{term}"
        );
    }

    // The placed pod, created again (a controller's retry, another
    // mutating webhook's reinvocation): /mutate has nothing to add.
    let again = cluster.admit(&Review::create(object.clone())).await;
    assert_eq!(again.mutated_by, [PODS_MUTATE]);
    assert!(again.patch.is_empty(), "{:?}", again.patch);
    assert_eq!(again.object.as_ref(), Some(&object));
    assert!(again.allowed, "{}", again.message());
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_premium_tier_with_the_opt_in_is_not_pinned() {
    let cluster = Cluster::start().await;
    let outcome = cluster
        .admit(
            &Review::create(nvidia_pod("llama-finetune", "llm")).namespace_labels(&[
                ("gpu-admission.io/tier", "premium"),
                ("gpu-admission.io/premium-gpus", "true"),
            ]),
        )
        .await;
    assert_eq!(outcome.mutated_by, [PODS_MUTATE]);
    assert_eq!(outcome.validated_by, [PODS_VALIDATE]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    let object = outcome.object.clone().unwrap();
    assert_eq!(object["spec"]["tolerations"], json!([gpu_toleration()]));
    let terms = terms(&outcome);
    assert_eq!(terms.len(), 2, "{terms:?}");
    for term in &terms {
        assert_eq!(term["matchExpressions"].as_array().unwrap().len(), 1);
        assert!(values_of(term, INSTANCE_TYPE).is_empty(), "{term}");
    }
    assert!(!object.to_string().contains(INSTANCE_TYPE), "{object}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a100_selected_by_gpu_product_in_the_default_tier_is_denied_with_the_tier_message() {
    let cluster = Cluster::start().await;
    let mut pod = nvidia_pod("bert-large", "ml");
    pod["spec"]["nodeSelector"] = json!({"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe"});
    let outcome = cluster.admit(&Review::create(pod)).await;
    assert_eq!(outcome.mutated_by, [PODS_MUTATE]);
    assert_eq!(outcome.validated_by, [PODS_VALIDATE]);
    assert!(!outcome.allowed, "an A100 by product in tier default");
    assert_eq!(outcome.denied_by.as_deref(), Some(PODS_VALIDATE));
    let message = outcome.message();
    assert!(
        message.contains(
            "gpu-sku-allowlist: pod selects only GPU SKUs that namespace tier \"default\" does not allow (4 SKUs); change its nodeSelector / node affinity to one of: Standard_NC4as_T4_v3, Standard_NC8as_T4_v3"
        ),
        "{message}"
    );
    // Placed, but not given a size requirement no node could meet.
    let object = outcome.object.clone().unwrap();
    assert_eq!(object["spec"]["tolerations"], json!([gpu_toleration()]));
    assert!(
        !object["spec"]["affinity"]
            .to_string()
            .contains(INSTANCE_TYPE),
        "{object}"
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_amd_pod_in_an_unlabelled_namespace_is_placed_on_amd_nodes() {
    let cluster = Cluster::start().await;
    let pod = gpu_pod(
        "rocm-bench",
        "ml",
        "rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0",
        "amd.com/gpu",
    );
    let outcome = cluster.admit(&Review::create(pod)).await;
    assert_eq!(outcome.mutated_by, [PODS_MUTATE]);
    assert_eq!(outcome.validated_by, [PODS_VALIDATE]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    let object = outcome.object.clone().unwrap();
    assert_eq!(object["metadata"]["annotations"][PROFILE], "aks-amd");
    assert_eq!(object["spec"]["tolerations"], json!([gpu_toleration()]));
    let terms = terms(&outcome);
    assert_eq!(
        terms,
        [
            json!({"matchExpressions": [{"key": "karpenter.azure.com/sku-gpu-manufacturer", "operator": "In", "values": ["amd"]}]}),
            json!({"matchExpressions": [{"key": "amd.com/gpu.family", "operator": "Exists"}]}),
        ],
        "AMD nodes, no size of the NVIDIA-only default tier"
    );

    let again = cluster.admit(&Review::create(object.clone())).await;
    assert!(again.patch.is_empty(), "{:?}", again.patch);
    assert!(again.allowed, "{}", again.message());
    cluster.stop().await;
}

/// The premium tier without the opt-in leaves an AMD pod no size AKS can
/// run it on but MI300X, which is premium (the other AMD sizes are retired
/// or not supported for GPU nodes): it is not pinned to sizes it could
/// never run on (and then denied for a selection placement wrote), but
/// placed by the AMD profile alone, as docs/tiers.md says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amd_pod_is_never_pinned_to_sizes_it_cannot_run_on() {
    let cluster = Cluster::start().await;
    let pod = gpu_pod(
        "rocm-bench",
        "ml",
        "rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0",
        "amd.com/gpu",
    );
    let review = Review::create(pod).namespace_labels(&[("gpu-admission.io/tier", "premium")]);
    let outcome = cluster.admit(&review).await;
    assert_eq!(outcome.mutated_by, [PODS_MUTATE]);
    assert!(outcome.allowed, "{}", outcome.message());
    let object = outcome.object.clone().unwrap();
    assert_eq!(object["metadata"]["annotations"][PROFILE], "aks-amd");
    assert_eq!(
        terms(&outcome),
        [
            json!({"matchExpressions": [{"key": "karpenter.azure.com/sku-gpu-manufacturer", "operator": "In", "values": ["amd"]}]}),
            json!({"matchExpressions": [{"key": "amd.com/gpu.family", "operator": "Exists"}]}),
        ],
        "no pin to retired or unsupported AMD sizes"
    );
    cluster.stop().await;
}

/// A required term met by a Karpenter label's absence (`DoesNotExist`,
/// `NotIn`) matches nodes of classic node pools of any size, which carry no
/// such label: it neither takes a pod out of its tier nor out of the checks
/// of the sizes it can land on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_met_by_a_missing_karpenter_label_keeps_the_tier() {
    let cluster = Cluster::start().await;
    let absent = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "karpenter.azure.com/sku-gpu-count", "operator": "DoesNotExist"}
    ]}]}}});

    // An H100 in tier default stays denied.
    let mut pinned = nvidia_pod("h100-job", "ml");
    pinned["spec"]["nodeSelector"] = json!({INSTANCE_TYPE: "Standard_ND96isr_H100_v5"});
    pinned["spec"]["affinity"] = absent.clone();
    let outcome = cluster.admit(&Review::create(pinned)).await;
    assert_eq!(outcome.validated_by, [PODS_VALIDATE]);
    assert!(!outcome.allowed, "an H100 in tier default");
    assert!(
        outcome.message().contains("gpu-sku-allowlist: pod selects only GPU SKUs that namespace tier \"default\" does not allow"),
        "{}",
        outcome.message()
    );

    // A plain GPU pod with the term is pinned to the tier's sizes.
    let mut plain = nvidia_pod("classic-only", "ml");
    plain["spec"]["affinity"] = absent;
    let outcome = cluster.admit(&Review::create(plain)).await;
    assert!(outcome.allowed, "{}", outcome.message());
    assert_pinned(&outcome, &DEFAULT_SIZES);
    cluster.stop().await;
}

/// MIG slices exist only on sizes whose GPUs support MIG: a MIG pod is
/// pinned to the tier's MIG sizes alone, and in a tier with none it is
/// denied (it would otherwise be pinned to sizes it cannot run on and stay
/// pending).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mig_pod_is_pinned_to_mig_sizes_only() {
    let cluster = Cluster::start().await;
    let mig_pod = |namespace: &str| {
        gpu_pod(
            "mig-infer",
            namespace,
            "nvcr.io/nvidia/tritonserver:24.08-py3",
            "nvidia.com/mig-1g.10gb",
        )
    };
    let outcome = cluster
        .admit(&Review::create(mig_pod("research")).namespace_labels(&[
            ("gpu-admission.io/tier", "standard"),
            ("gpu-admission.io/premium-gpus", "true"),
        ]))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    assert_pinned(
        &outcome,
        &[
            "Standard_NC24ads_A100_v4",
            "Standard_NC48ads_A100_v4",
            "Standard_NC96ads_A100_v4",
            "Standard_NC40ads_H100_v5",
            "Standard_NC80adis_H100_v5",
        ],
    );

    let outcome = cluster.admit(&Review::create(mig_pod("ml"))).await;
    assert!(!outcome.allowed, "a MIG pod in tier default");
    assert!(
        outcome
            .message()
            .contains("gpu-sku-allowlist: pod asks for MIG slices"),
        "{}",
        outcome.message()
    );
    assert!(
        !outcome.object.unwrap()["spec"]["affinity"]
            .to_string()
            .contains(INSTANCE_TYPE),
        "not pinned to sizes without MIG"
    );
    cluster.stop().await;
}
