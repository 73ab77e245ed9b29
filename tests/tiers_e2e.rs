//! Namespace SKU tiers, AMD and Windows GPU pods as kube-apiserver sends
//! them: real TLS, AdmissionReview v1 JSON, the shipped policies and
//! profiles, namespaces with the tier labels. `/mutate` first, its patch
//! applied, then `/validate` on the patched object, as the apiserver does.
use crate::common;

use common::{config, TestServer};
use gpu_admission::admission::Admission;
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::k8s::namespaces::StaticNamespaces;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const DEFAULT_SIZES: [&str; 6] = [
    "Standard_NC4as_T4_v3",
    "Standard_NC8as_T4_v3",
    "Standard_NC16as_T4_v3",
    "Standard_NC64as_T4_v3",
    "Standard_NV36ads_A10_v5",
    "Standard_NV72ads_A10_v5",
];

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `ml` has no labels (tier default); `research` is in tier standard
/// without the premium opt-in; `llm` is in tier premium with it.
async fn server() -> TestServer {
    let loaded = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
    let namespaces = StaticNamespaces::new()
        .with("ml", labels(&[]))
        .with("research", labels(&[("gpu-admission.io/tier", "standard")]))
        .with(
            "llm",
            labels(&[
                ("gpu-admission.io/tier", "premium"),
                ("gpu-admission.io/premium-gpus", "true"),
            ]),
        );
    let admission = Admission::new(loaded.bundle, Arc::new(namespaces));
    TestServer::start_with(config(), Arc::new(admission)).await
}

fn review(uid: &str, object: &Value) -> Value {
    common::admission_review(uid, "CREATE", object, None, "dev@example.com")
}

use common::review_patch as patch_of;

/// What the apiserver ends up with for a pod: the patched pod (checked to
/// need no second patch) and the `/validate` answer on it.
async fn admit(server: &TestServer, pod: &Value) -> (Value, Value) {
    let name = pod["metadata"]["name"].as_str().unwrap();
    let (status, mutated) = server.post_review("/mutate", &review(name, pod)).await;
    assert_eq!(status, 200);
    assert_eq!(mutated["response"]["allowed"], true, "{name}: {mutated}");
    let mut patched = pod.clone();
    if let Some(patch) = patch_of(&mutated) {
        json_patch::patch(&mut patched, &patch).unwrap();
    }
    serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(patched.clone())
        .unwrap_or_else(|e| panic!("{name}: not a Pod: {e}"));
    let (_, again) = server
        .post_review("/mutate", &review(&format!("{name}-again"), &patched))
        .await;
    assert!(
        patch_of(&again).is_none(),
        "{name}: second /mutate patched: {again}"
    );
    let (status, validated) = server
        .post_review("/validate", &review(name, &patched))
        .await;
    assert_eq!(status, 200);
    (patched, validated)
}

fn gpu_pod(name: &str, namespace: &str, resource: &str, extra: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                "command": ["python", "train.py"],
                "resources": {
                    "requests": {"cpu": "4", "memory": "16Gi", resource: "1"},
                    "limits": {"cpu": "4", "memory": "16Gi", resource: "1"}
                }
            }]
        }
    });
    if let (Some(spec), Some(extra)) = (pod["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    pod
}

fn terms(pod: &Value) -> Vec<Value> {
    pod.pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The values of a term's `key In [...]` requirements.
fn values_of(term: &Value, key: &str) -> Vec<Vec<String>> {
    term["matchExpressions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["key"] == key && e["operator"] == "In")
        .map(|e| {
            e["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

fn message(answer: &Value) -> String {
    answer["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_tier_pins_a_plain_gpu_pod_to_its_sizes_in_every_term() {
    let server = server().await;
    let pod = gpu_pod("resnet", "ml", "nvidia.com/gpu", json!({}));
    let (patched, validated) = admit(&server, &pod).await;
    assert_eq!(validated["response"]["allowed"], true, "{validated}");
    let terms = terms(&patched);
    assert_eq!(terms.len(), 2, "classic node pools and NAP nodes");
    for term in &terms {
        assert_eq!(values_of(term, INSTANCE_TYPE), vec![DEFAULT_SIZES.to_vec()]);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pods_own_terms_are_intersected_never_widened() {
    let server = server().await;
    // Either a T4 by Karpenter's GPU-name label, or an A100 by instance type:
    // in tier default only the T4 alternative may remain.
    let pod = gpu_pod(
        "either",
        "ml",
        "nvidia.com/gpu",
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "karpenter.azure.com/sku-gpu-name", "operator": "In", "values": ["T4"]}]},
            {"matchExpressions": [{"key": INSTANCE_TYPE, "operator": "In", "values": ["Standard_NC24ads_A100_v4"]}]}
        ]}}}}),
    );
    let (patched, validated) = admit(&server, &pod).await;
    assert_eq!(validated["response"]["allowed"], true, "{validated}");
    let t4_sizes = &DEFAULT_SIZES[..4];
    let terms = terms(&patched);
    for term in &terms {
        let sizes = values_of(term, INSTANCE_TYPE);
        // Every term carries the tier's T4 sizes; the A100 term is thereby
        // one no node can meet, and nothing was added beside it.
        assert!(
            sizes.contains(&t4_sizes.iter().map(|s| s.to_string()).collect()),
            "{term}"
        );
    }
    // Each pod term ANDed with each of the profile's two alternatives.
    assert_eq!(terms.len(), 4);
    let a100_terms = terms
        .iter()
        .filter(|t| {
            values_of(t, INSTANCE_TYPE).contains(&vec!["Standard_NC24ads_A100_v4".to_string()])
        })
        .count();
    assert_eq!(
        a100_terms, 2,
        "the A100 alternative is kept, and can never be met"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_tier_without_opt_in_keeps_premium_sizes_out() {
    let server = server().await;
    let pod = gpu_pod(
        "a10-or-any",
        "research",
        "nvidia.com/gpu",
        json!({"nodeSelector": {"kubernetes.azure.com/accelerator": "nvidia"}}),
    );
    let (patched, validated) = admit(&server, &pod).await;
    assert_eq!(validated["response"]["allowed"], true, "{validated}");
    let terms = terms(&patched);
    assert!(!terms.is_empty());
    for term in &terms {
        let sizes = values_of(term, INSTANCE_TYPE);
        assert_eq!(sizes.len(), 1, "{term}");
        assert_eq!(
            sizes[0],
            DEFAULT_SIZES.to_vec(),
            "standard lists A100/H100, premium without the opt-in"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn premium_tier_with_opt_in_adds_no_size_requirement() {
    let server = server().await;
    let pod = gpu_pod("llama", "llm", "nvidia.com/gpu", json!({}));
    let (patched, validated) = admit(&server, &pod).await;
    assert_eq!(validated["response"]["allowed"], true, "{validated}");
    assert!(!patched.to_string().contains(INSTANCE_TYPE), "{patched}");
    assert_eq!(terms(&patched).len(), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_product_label_is_judged_like_the_instance_type() {
    let server = server().await;
    let by_product = gpu_pod(
        "by-product",
        "ml",
        "nvidia.com/gpu",
        json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe"}}),
    );
    let by_size = gpu_pod(
        "by-size",
        "ml",
        "nvidia.com/gpu",
        json!({"nodeSelector": {INSTANCE_TYPE: "Standard_NC24ads_A100_v4"}}),
    );
    // The four A100 80GB sizes, or the one named.
    for (pod, skus) in [
        (&by_product, "(4 SKUs)"),
        (&by_size, "(Standard_NC24ads_A100_v4)"),
    ] {
        let (patched, validated) = admit(&server, pod).await;
        // No size requirement that would hide the A100 from /validate.
        assert!(
            !patched["spec"]["affinity"]
                .to_string()
                .contains(INSTANCE_TYPE),
            "{patched}"
        );
        assert_eq!(validated["response"]["allowed"], false, "{validated}");
        let message = message(&validated);
        assert!(message.contains("gpu-sku-allowlist: pod selects only GPU SKUs that namespace tier \"default\" does not allow"), "{message}");
        assert!(message.contains(skus), "{message}");
        assert!(
            message.contains(
                "change its nodeSelector / node affinity to one of: Standard_NC4as_T4_v3"
            ),
            "{message}"
        );
    }
    // With the opt-in in the premium tier the A100 product is fine.
    let mut allowed = by_product.clone();
    allowed["metadata"]["namespace"] = json!("llm");
    let (_, validated) = admit(&server, &allowed).await;
    assert_eq!(validated["response"]["allowed"], true, "{validated}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_amd_pod_in_an_unlabelled_namespace_is_placed_and_allowed() {
    let server = server().await;
    let mut pod = gpu_pod("rocm-smoke", "ml", "amd.com/gpu", json!({}));
    pod["spec"]["containers"][0]["image"] =
        json!("rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0");
    let (patched, validated) = admit(&server, &pod).await;
    assert_eq!(validated["response"]["allowed"], true, "{validated}");
    assert_eq!(
        patched["metadata"]["annotations"]["gpu-admission.io/placement-profile"],
        "aks-amd"
    );
    let terms = terms(&patched);
    assert_eq!(terms.len(), 2);
    assert_eq!(
        values_of(&terms[0], "karpenter.azure.com/sku-gpu-manufacturer"),
        vec![vec!["amd".to_string()]]
    );
    assert_eq!(terms[1]["matchExpressions"][0]["key"], "amd.com/gpu.family");
    assert!(
        !patched.to_string().contains(INSTANCE_TYPE),
        "no size pinned: {patched}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aks_windows_gpu_job_is_allowed_and_its_pod_placed_on_windows_gpu_nodes() {
    let server = server().await;
    let template = json!({
        "metadata": {"labels": {"app": "sample-ml-workload-win"}},
        "spec": {
            "restartPolicy": "OnFailure",
            "nodeSelector": {"kubernetes.io/os": "windows"},
            "containers": [{
                "name": "sample-ml-workload",
                "image": "mcr.microsoft.com/windows/servercore:ltsc2022",
                "command": ["powershell.exe", "-Command", "C:\\app\\run-inference.ps1"],
                "resources": {
                    "requests": {"cpu": "2", "memory": "8Gi"},
                    "limits": {"cpu": "2", "memory": "8Gi", "microsoft.com/directx": "1"}
                }
            }]
        }
    });
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sample-ml-workload-win", "namespace": "ml"},
        "spec": {"activeDeadlineSeconds": 3600, "template": template}
    });
    let (_, answer) = server.post_review("/validate", &review("job", &job)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(answer["response"]["warnings"].is_null(), "{answer}");

    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sample-ml-workload-win-x7k2p", "namespace": "ml",
            "labels": {"app": "sample-ml-workload-win", "batch.kubernetes.io/job-name": "sample-ml-workload-win"}},
    });
    pod["spec"] = template["spec"].clone();
    let (patched, validated) = admit(&server, &pod).await;
    assert_eq!(validated["response"]["allowed"], true, "{validated}");
    assert_eq!(
        patched["metadata"]["annotations"]["gpu-admission.io/placement-profile"],
        "aks-windows"
    );
    assert_eq!(
        patched["spec"]["tolerations"],
        json!([{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}])
    );
    let terms = terms(&patched);
    assert_eq!(terms.len(), 1);
    assert_eq!(
        values_of(&terms[0], "kubernetes.io/os"),
        vec![vec!["windows".to_string()]]
    );
    assert_eq!(
        values_of(&terms[0], INSTANCE_TYPE),
        vec![DEFAULT_SIZES.to_vec()]
    );
    server.stop().await;
}

/// The shipped policy folder plus one team profile that pins the pods of
/// the LLM team to H100 nodes.
fn policies_with_h100_profile() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    copy_dir(&shipped, dir.path());
    std::fs::write(
        dir.path().join("placement/llm-h100.yaml"),
        r#"apiVersion: gpu-admission.io/v1alpha1
kind: PlacementProfile
metadata:
  name: llm-h100
spec:
  description: the LLM team's pods run on the H100 pool
  resources: [nvidia.com/gpu]
  priority: 10
  podSelector:
    matchLabels: {team: llm}
  tolerations:
    - {key: sku, operator: Equal, value: gpu, effect: NoSchedule}
  requiredNodeSelectorTerms:
    - matchExpressions:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [Standard_ND96isr_H100_v5]}
"#,
    )
    .unwrap();
    dir
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            if path.file_name().unwrap() != "tests" {
                std::fs::create_dir_all(&target).unwrap();
                copy_dir(&path, &target);
            }
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_outside_the_tier_is_named_and_the_pods_author_is_not_asked_to_change_it() {
    let dir = policies_with_h100_profile();
    let loaded = bundle::load(&PolicySource::Dir(dir.path().to_path_buf())).unwrap();
    let namespaces = StaticNamespaces::new()
        .with("ml", labels(&[]))
        .with("research", labels(&[("gpu-admission.io/tier", "premium")]));
    let admission = Admission::new(loaded.bundle, Arc::new(namespaces));
    let server = TestServer::start_with(config(), Arc::new(admission)).await;

    let mut pod = gpu_pod("llama-finetune", "ml", "nvidia.com/gpu", json!({}));
    pod["metadata"]["labels"]["team"] = json!("llm");
    let (patched, validated) = admit(&server, &pod).await;
    assert_eq!(
        patched["metadata"]["annotations"]["gpu-admission.io/placement-profile"],
        "llm-h100"
    );
    assert_eq!(validated["response"]["allowed"], false, "{validated}");
    let denial = message(&validated);
    assert!(
        denial.contains("gpu-sku-allowlist: placement profile llm-h100 places this pod only on GPU SKUs that namespace tier \"default\" does not allow (Standard_ND96isr_H100_v5); ask the platform team for a namespace tier that allows them"),
        "{denial}"
    );
    assert!(!denial.contains("change its nodeSelector"), "{denial}");

    // Tier premium lists it, but H100 is premium and the namespace has no opt-in.
    pod["metadata"]["namespace"] = json!("research");
    let (_, validated) = admit(&server, &pod).await;
    let denial = message(&validated);
    assert!(
        denial.contains("gpu-sku-allowlist: placement profile llm-h100 places this pod only on premium GPU SKUs (H100); ask the platform team to label the namespace gpu-admission.io/premium-gpus=true"),
        "{denial}"
    );
    assert!(!denial.contains("select a smaller GPU"), "{denial}");
    server.stop().await;
}
