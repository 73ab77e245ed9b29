//! The webhook as kube-apiserver calls it: real TLS, AdmissionReview v1 JSON,
//! the shipped policies and placement profiles; the returned patch applied
//! with an RFC 6902 implementation and the result checked as a Pod.
use crate::common;

use common::{config, NoNamespaces, TestServer};
use gpu_admission::admission::Admission;
use gpu_admission::bundle::{self, PolicySource};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn shipped_admission() -> Admission {
    let loaded = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
    Admission::new(loaded.bundle, Arc::new(NoNamespaces))
}

fn review(uid: &str, operation: &str, object: &Value) -> Value {
    common::admission_review(uid, operation, object, None, "alice@example.com")
}

use common::review_patch as patch_of;

fn placement_cases() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/placement");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("pod.json").exists())
        .collect();
    cases.sort();
    cases
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every namespace in the premium tier with the premium opt-in: every SKU
/// allowed, so the fixtures show the profiles' placement alone (tiers have
/// their own tests in tests/tiers_e2e.rs).
struct EverySkuNamespaces;

impl gpu_admission::k8s::NamespaceLookup for EverySkuNamespaces {
    fn namespace(&self, name: &str) -> Option<Arc<Value>> {
        Some(Arc::new(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {
            "gpu-admission.io/tier": "premium", "gpu-admission.io/premium-gpus": "true"}}}),
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_fixtures_over_tls_patch_to_valid_pods_and_are_idempotent() {
    let loaded = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
    let admission = Admission::new(loaded.bundle, Arc::new(EverySkuNamespaces));
    let server = TestServer::start_with(config(), Arc::new(admission)).await;
    let cases = placement_cases();
    assert!(cases.len() >= 10, "placement fixtures present");
    for case in cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let pod = read_json(&case.join("pod.json"));
        let expected = read_json(&case.join("expected.json"));
        let (status, answer) = server
            .post_review("/mutate", &review(&name, "CREATE", &pod))
            .await;
        assert_eq!(status, 200, "{name}");
        assert_eq!(answer["response"]["uid"], name.as_str());
        assert_eq!(answer["response"]["allowed"], true, "{name}: {answer}");
        let mut patched = pod.clone();
        if let Some(patch) = patch_of(&answer) {
            json_patch::patch(&mut patched, &patch).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert_eq!(
            patched, expected,
            "{name}: patched pod differs from expected.json"
        );
        let _: k8s_openapi::api::core::v1::Pod = serde_json::from_value(patched.clone())
            .unwrap_or_else(|e| panic!("{name}: not a Pod: {e}"));
        // Reinvocation: the patched pod needs nothing more.
        let (_, again) = server
            .post_review(
                "/mutate",
                &review(&format!("{name}-again"), "CREATE", &patched),
            )
            .await;
        assert_eq!(patch_of(&again), None, "{name}: second call patched again");
    }
    server.stop().await;
}

fn gpu_deployment(gpus: &str, command: &[&str]) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm-serve", "namespace": "inference"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "llm-serve"}},
            "template": {
                "metadata": {"labels": {"app": "llm-serve"}},
                "spec": {"containers": [{
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.6.3",
                    "command": command,
                    "resources": {
                        "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": gpus},
                        "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": gpus}
                    }
                }]}
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_policies_deny_templates_and_warn_over_tls() {
    let server = TestServer::start_with(config(), Arc::new(shipped_admission())).await;

    let ok = gpu_deployment("1", &["vllm", "serve", "microsoft/phi-4"]);
    let (status, answer) = server
        .post_review("/validate", &review("ok", "CREATE", &ok))
        .await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");

    // 12 GPUs fit on no Azure GPU VM: denied at `kubectl apply`, naming the controller.
    let impossible = gpu_deployment("12", &["vllm", "serve", "meta-llama/Llama-3.3-70B"]);
    let (status, answer) = server
        .post_review("/validate", &review("deny", "CREATE", &impossible))
        .await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["uid"], "deny");
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("Deployment llm-serve"), "{message}");
    assert!(message.contains("12"), "{message}");
    assert!(
        !message.contains("Error {") && !message.contains("Some("),
        "no Rust debris: {message}"
    );

    // A keep-alive command in a GPU container is a warning, not a denial.
    let idle = gpu_deployment("1", &["sleep", "infinity"]);
    let (_, answer) = server
        .post_review("/validate", &review("warn", "CREATE", &idle))
        .await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let warnings = answer["response"]["warnings"].as_array().expect("warnings");
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("sleep")),
        "{warnings:?}"
    );
    server.stop().await;
}

/// A review whose `object` (or `oldObject`) is JSON but no object cannot
/// be judged: both endpoints deny it, echoing its uid, with the shipped
/// policies loaded, and never take it for a review with no object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_whose_object_is_no_object_are_denied_over_tls() {
    let server = TestServer::start_with(config(), Arc::new(shipped_admission())).await;
    let pod = gpu_deployment("1", &["vllm", "serve", "microsoft/phi-4"]);
    let cases = [
        ("object", json!("a string"), "a string"),
        ("object", json!(42), "a number"),
        ("object", json!([pod.clone()]), "an array"),
        ("object", json!(true), "a boolean"),
        ("oldObject", json!("a string"), "a string"),
        ("oldObject", json!([1, 2]), "an array"),
    ];
    for path in ["/validate", "/mutate"] {
        for (field, value, found) in &cases {
            let mut review = review("no-object", "UPDATE", &pod);
            review["request"]["oldObject"] = pod.clone();
            review["request"][*field] = value.clone();
            let (status, answer) = server.post_review(path, &review).await;
            assert_eq!(status, 200, "{path} {field} {found}: {answer}");
            let response = &answer["response"];
            assert_eq!(response["uid"], "no-object", "{path}: {response}");
            assert_eq!(
                response["allowed"], false,
                "{path}: {field} as {found} must not be allowed: {response}"
            );
            assert_eq!(response["status"]["code"], 400, "{response}");
            let message = response["status"]["message"].as_str().unwrap();
            assert!(
                message.contains(&format!("request.{field} is {found}")),
                "{message}"
            );
            assert!(response.get("patch").is_none(), "{response}");
        }
        // A null object is an absent one, as the apiserver sends it for
        // the object a DELETE no longer has: still answered as before.
        let mut delete = review("delete", "DELETE", &pod);
        delete["request"]["oldObject"] = pod.clone();
        delete["request"]["object"] = Value::Null;
        let (status, answer) = server.post_review(path, &delete).await;
        assert_eq!(status, 200);
        assert_eq!(answer["response"]["allowed"], true, "{path}: {answer}");
    }
    server.stop().await;
}

/// The GPU replica cap (tests/fixtures/policies/replica-limit) through the
/// server: Deny under environment=test, Warn elsewhere, Audit into
/// auditAnnotations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_limit_example_over_tls() {
    use gpu_admission::k8s::namespaces::StaticNamespaces;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/policies/replica-limit");
    let loaded = bundle::load(&PolicySource::Dir(dir)).unwrap();
    let namespaces = StaticNamespaces::new()
        .with(
            "staging",
            [("environment".to_string(), "test".to_string())].into(),
        )
        .with(
            "prod",
            [("environment".to_string(), "prod".to_string())].into(),
        );
    let admission = Admission::new(loaded.bundle, Arc::new(namespaces));
    let server = TestServer::start_with(config(), Arc::new(admission)).await;
    let deployment = |ns: &str, replicas: i64| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}
        })
    };

    let (_, answer) = server
        .post_review(
            "/validate",
            &review("staging", "CREATE", &deployment("staging", 4)),
        )
        .await;
    let r = &answer["response"];
    assert_eq!(r["allowed"], false, "{answer}");
    assert_eq!(r["status"]["reason"], "Invalid");
    assert_eq!(
        r["status"]["message"],
        "gpu-replica-cap.gpu-admission.io: at most 3 replicas may share the GPU pool here"
    );

    let (_, answer) = server
        .post_review(
            "/validate",
            &review("prod", "CREATE", &deployment("prod", 150)),
        )
        .await;
    let r = &answer["response"];
    assert_eq!(r["allowed"], true, "{answer}");
    assert_eq!(
        r["warnings"][0],
        "gpu-replica-cap.gpu-admission.io: at most 100 replicas may share the GPU pool here"
    );
    let audit = r["auditAnnotations"]["validation_failure"]
        .as_str()
        .expect("audit annotation");
    let audit: Value = serde_json::from_str(audit).unwrap();
    assert_eq!(audit[0]["policy"], "gpu-replica-audit.gpu-admission.io");
    assert_eq!(audit[0]["expressionIndex"], 0);
    assert_eq!(audit[0]["validationActions"][0], "Audit");
    assert_recorded(r, "workloads.validate.gpu-admission.io");
    server.stop().await;
}

/// A policy's audit annotations through the server: returned under keys
/// kube-apiserver records, `<policy>.<key>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_audit_annotations_over_tls() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/policies/gpu");
    let loaded = bundle::load(&PolicySource::Dir(dir)).unwrap();
    let admission = Admission::new(loaded.bundle, Arc::new(NoNamespaces));
    let server = TestServer::start_with(config(), Arc::new(admission)).await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {"containers": [{"name": "train", "image": "pytorch",
            "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}});
    let (_, answer) = server
        .post_review("/validate", &review("ml", "CREATE", &pod))
        .await;
    let r = &answer["response"];
    assert_eq!(r["allowed"], true, "{answer}");
    assert_eq!(r["auditAnnotations"], json!({"gpu-limits.gpus": "4"}));
    assert_recorded(r, "pods.validate.gpu-admission.io");
    server.stop().await;
}

/// Every audit annotation of the response `r` is one kube-apiserver
/// records for the webhook `webhook`: its `checkKeyFormat` takes
/// `<webhook>/<key>` only as a qualified name (two parts on `/`; the name
/// part at most 63 characters, alphanumerics, `-`, `_`, `.`, alphanumeric
/// at both ends).
fn assert_recorded(r: &Value, webhook: &str) {
    let keys = r["auditAnnotations"]
        .as_object()
        .expect("audit annotations");
    assert!(!keys.is_empty());
    for key in keys.keys() {
        let recorded = format!("{webhook}/{key}");
        let parts: Vec<&str> = recorded.split('/').collect();
        let name = parts[parts.len() - 1].as_bytes();
        let inner = |c: &u8| c.is_ascii_alphanumeric() || b"-_.".contains(c);
        assert!(
            parts.len() == 2
                && (1..=63).contains(&name.len())
                && name[0].is_ascii_alphanumeric()
                && name[name.len() - 1].is_ascii_alphanumeric()
                && name.iter().all(inner),
            "kube-apiserver would drop {recorded}"
        );
    }
}

/// A ResourceClaimTemplate in `ml` asking for `count` devices of `class`.
fn claim_template(name: &str, class: &str, count: u64) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [{
            "name": "dev",
            "exactly": {"deviceClassName": class, "allocationMode": "ExactCount", "count": count}
        }]}}}
    })
}

/// A pod in `ml` naming `template` as its claim `dev`, used by its
/// container, with `tolerations`.
fn claiming_pod(name: &str, template: Option<&str>, tolerations: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "tolerations": tolerations,
            "containers": [{
                "name": "main",
                "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                "command": ["python", "serve.py"],
                "resources": {"requests": {"cpu": "2", "memory": "8Gi"}}
            }]
        }
    });
    if let Some(template) = template {
        pod["spec"]["resourceClaims"] =
            json!([{"name": "dev", "resourceClaimTemplateName": template}]);
        pod["spec"]["containers"][0]["resources"]["claims"] = json!([{"name": "dev"}]);
    }
    pod
}

/// /mutate then /validate on the patched pod, as kube-apiserver runs them:
/// the patched pod and the validation answer.
async fn mutate_then_validate(server: &TestServer, uid: &str, pod: &Value) -> (Value, Value) {
    let (status, mutated) = server
        .post_review("/mutate", &review(uid, "CREATE", pod))
        .await;
    assert_eq!(status, 200, "{uid}");
    assert_eq!(mutated["response"]["allowed"], true, "{uid}: {mutated}");
    let mut patched = pod.clone();
    if let Some(patch) = patch_of(&mutated) {
        json_patch::patch(&mut patched, &patch).unwrap();
    }
    let (status, validated) = server
        .post_review("/validate", &review(uid, "CREATE", &patched))
        .await;
    assert_eq!(status, 200, "{uid}");
    (patched, validated)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dra_gpu_pods_are_placed_and_allowed_over_tls_and_cpu_pods_on_gpu_nodes_still_denied() {
    let mut claims = gpu_admission::k8s::StaticClaims::new();
    claims.insert(&claim_template("single-gpu", "gpu.nvidia.com", 1), "ml");
    claims.insert(&claim_template("rdma-nic", "rdma.mellanox.com", 1), "ml");
    let admission = shipped_admission().with_claims(Arc::new(claims));
    let server = TestServer::start_with(config(), Arc::new(admission)).await;
    let gpu_toleration =
        json!([{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);

    // A pod claiming a GPU through the template: placed like a GPU pod.
    let pod = claiming_pod("dra-serve", Some("single-gpu"), json!([]));
    let (patched, validated) = mutate_then_validate(&server, "dra", &pod).await;
    assert_eq!(patched["spec"]["tolerations"], gpu_toleration);
    assert_eq!(
        patched["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
            ["matchExpressions"][0]["key"],
        "kubernetes.azure.com/accelerator"
    );
    assert_eq!(validated["response"]["allowed"], true, "{validated}");
    assert!(validated["response"]["warnings"].is_null(), "{validated}");
    let _: k8s_openapi::api::core::v1::Pod = serde_json::from_value(patched.clone()).unwrap();

    // One that tolerates the GPU taint itself is a GPU pod too.
    let pod = claiming_pod("dra-tolerates", Some("single-gpu"), gpu_toleration.clone());
    let (_, validated) = mutate_then_validate(&server, "dra-tolerates", &pod).await;
    assert_eq!(validated["response"]["allowed"], true, "{validated}");

    // A CPU pod tolerating the GPU taint is denied as before, and so is a
    // pod whose claim asks for a device class that is not a GPU.
    for (uid, template) in [("cpu", None), ("nic", Some("rdma-nic"))] {
        let pod = claiming_pod(uid, template, gpu_toleration.clone());
        let (patched, validated) = mutate_then_validate(&server, uid, &pod).await;
        // Not placed; its GPUs hidden (it can land on GPU nodes).
        let mut hidden = pod.clone();
        for c in hidden["spec"]["containers"].as_array_mut().unwrap() {
            c["env"] = json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]);
        }
        assert_eq!(patched, hidden, "{uid}: not placed");
        assert_eq!(
            validated["response"]["allowed"], false,
            "{uid}: {validated}"
        );
        let message = validated["response"]["status"]["message"].as_str().unwrap();
        assert!(
            message.contains(
                "gpu-node-isolation: pod asks for no GPU but tolerates the GPU node taint"
            ),
            "{uid}: {message}"
        );
    }

    // The claim template itself is judged by the GPU count limits.
    let (_, answer) = server
        .post_review(
            "/validate",
            &review(
                "big",
                "CREATE",
                &claim_template("sixteen-gpus", "gpu.nvidia.com", 16),
            ),
        )
        .await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("gpu-count-limits: ResourceClaimTemplate sixteen-gpus asks for 16 GPUs; at most 8 per pod"),
        "{message}"
    );
    server.stop().await;
}
