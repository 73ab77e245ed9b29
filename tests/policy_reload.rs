//! Hot reload of a policy folder mounted the way the kubelet mounts a
//! ConfigMap: files are symlinks through `..data`, and an update swaps the
//! `..data` symlink in one rename. A broken update keeps the last good set.
use gpu_admission::admission::Admission;
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::cli::serve::watch_policies;
use gpu_admission::namespaces::StaticNamespaces;
use gpu_admission::offline::build_request;
use gpu_admission::review::Operation;
use gpu_admission::server::Metrics;
use serde_json::json;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: gpu-cap
spec:
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["pods"]
  validations:
    - expression: "gpu.total <= MAX"
      messageExpression: "'asks for ' + string(gpu.total) + ' GPUs; at most MAX per pod'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: gpu-cap
spec:
  policyName: gpu-cap
  validationActions: [Deny]
"#;

/// Writes a new ConfigMap payload and swaps `..data` to it, as the kubelet does.
fn publish(volume: &Path, generation: u32, text: &str) {
    let payload = volume.join(format!("..2026_11_29_{generation:02}"));
    std::fs::create_dir(&payload).unwrap();
    std::fs::write(payload.join("gpu-cap.yaml"), text).unwrap();
    let tmp = volume.join("..data_tmp");
    symlink(payload.file_name().unwrap(), &tmp).unwrap();
    std::fs::rename(&tmp, volume.join("..data")).unwrap();
    if !volume.join("gpu-cap.yaml").exists() {
        symlink("..data/gpu-cap.yaml", volume.join("gpu-cap.yaml")).unwrap();
    }
}

fn pod_with_gpus(n: u32) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "resources": {"limits": {"nvidia.com/gpu": n.to_string()}}}]}
    })
}

fn allowed(admission: &Admission, gpus: u32) -> bool {
    let req = build_request(pod_with_gpus(gpus), None, Operation::Create, None);
    admission.validate(&req).response.allowed
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn reload_failures(metrics: &Metrics) -> u64 {
    metrics
        .encode()
        .lines()
        .find(|l| l.starts_with("gpu_admission_policy_reload_failures_total"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn configmap_swaps_reload_and_a_broken_update_keeps_the_last_good_set() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = tmp.path();
    publish(volume, 1, &POLICY.replace("MAX", "2"));

    let source = PolicySource::Dir(volume.to_path_buf());
    let loaded = bundle::load(&source).expect("first generation loads");
    let admission = Arc::new(Admission::new(
        loaded.bundle,
        Arc::new(StaticNamespaces::new()),
    ));
    let metrics = Metrics::new();
    let _watcher = watch_policies(
        volume,
        gpu_admission::gpu::catalog::Catalog::embedded_arc(),
        admission.clone(),
        metrics.clone(),
    )
    .expect("watch starts");
    assert!(allowed(&admission, 2));
    assert!(!allowed(&admission, 4), "4 GPUs denied under a cap of 2");

    // A broken update: the old policies stay in force, and the failure is counted.
    publish(volume, 2, &POLICY.replace("MAX", "2 +"));
    wait_for("the reload failure", || reload_failures(&metrics) >= 1);
    assert!(!allowed(&admission, 4), "last good set still enforced");
    assert!(allowed(&admission, 2));

    // A good update takes over.
    publish(volume, 3, &POLICY.replace("MAX", "8"));
    wait_for("the new cap", || allowed(&admission, 4));
    assert!(!allowed(&admission, 9));
    assert!(metrics.encode().contains("gpu_admission_policies_loaded 1"));
}
