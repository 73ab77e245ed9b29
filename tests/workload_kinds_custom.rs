//! A platform team's own workload kind: a `PodTemplateSource` for a
//! made-up CRD, added to a policy folder mounted as the kubelet mounts a
//! ConfigMap, is picked up by the running server without a restart, and
//! its objects are then judged at apply over TLS; `lint` names the file,
//! document and field of a path it cannot read.
use crate::common;

use common::configmap::publish_files;
use common::{admission_review, config, TestServer};
use gpu_admission::admission::Admission;
use gpu_admission::bundle::Snapshot;
use gpu_admission::cli::serve::{watch_policies, PolicyReloader};
use gpu_admission::gpu::catalog::Catalog;
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::WatchOptions;
use gpu_admission::server::Metrics;
use serde_json::{json, Value};
use std::process::Command;
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
    - expression: "gpu.total <= 4"
      messageExpression: "'asks for ' + string(gpu.total) + ' GPUs; at most 4 per pod'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: gpu-cap
spec:
  policyName: gpu-cap
  validationActions: [Deny]
"#;

const SOURCE: &str = r#"
apiVersion: gpu-admission.io/v1alpha1
kind: PodTemplateSource
metadata:
  name: example-trainer
spec:
  group: ml.example.com
  kinds:
    - kind: Trainer
      resource: trainers
      templates:
        - path: spec.workers[*].template
          replicas: ["spec.workers[*].count"]
"#;

fn trainer(gpus: u32) -> Value {
    json!({"apiVersion": "ml.example.com/v1", "kind": "Trainer",
        "metadata": {"name": "t", "namespace": "ml"},
        "spec": {"workers": [{"name": "big", "count": 2, "template": {"spec": {"containers": [
            {"name": "train", "image": "nvcr.io/nvidia/pytorch:24.08-py3",
             "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}}}]}})
}

async fn validate(server: &TestServer, object: &Value) -> Value {
    let review = admission_review("u-1", "CREATE", object, None, "alice@example.com");
    let (status, body) = server.post_review("/validate", &review).await;
    assert!(status.is_success(), "{status}");
    body["response"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_added_to_the_folder_judges_its_kind_at_apply_without_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = tmp.path();
    publish_files(volume, 1, &[("gpu-cap.yaml", POLICY)]);
    let snapshot = Snapshot::read(volume).unwrap();
    let loaded = snapshot.load(Catalog::embedded_arc()).expect("loads");
    let admission = Arc::new(Admission::new(
        loaded.bundle,
        Arc::new(StaticNamespaces::new()),
    ));
    let reloader = PolicyReloader::new(
        volume.to_path_buf(),
        Catalog::embedded_arc(),
        admission.clone(),
        Metrics::new(),
    )
    .serving(snapshot.fingerprint());
    let _watcher = watch_policies(reloader, WatchOptions::default()).expect("watch starts");
    let server = TestServer::start_with(config(), admission.clone()).await;

    // Unknown kind: nothing of it is a pod template yet.
    let response = validate(&server, &trainer(8)).await;
    assert_eq!(response["allowed"], true, "{response}");

    publish_files(
        volume,
        2,
        &[("gpu-cap.yaml", POLICY), ("trainer.yaml", SOURCE)],
    );
    let start = Instant::now();
    let response = loop {
        let response = validate(&server, &trainer(8)).await;
        if response["allowed"] == false || start.elapsed() > Duration::from_secs(20) {
            break response;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(response["allowed"], false, "not reloaded: {response}");
    assert_eq!(
        response["status"]["message"],
        "gpu-cap: Trainer ml/t workers[big]: asks for 8 GPUs; at most 4 per pod"
    );
    let response = validate(&server, &trainer(4)).await;
    assert_eq!(response["allowed"], true, "{response}");
    server.stop().await;
}

#[test]
fn lint_names_file_document_and_field_of_a_path_it_cannot_read() {
    let tmp = tempfile::tempdir().unwrap();
    let wrong = SOURCE.replace("spec.workers[*].template", "spec.workers[0].template");
    std::fs::write(tmp.path().join("gpu-cap.yaml"), POLICY).unwrap();
    std::fs::write(tmp.path().join("trainer.yaml"), wrong).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .arg("lint")
        .arg(tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}{stderr}");
    let said = format!("{stdout}{stderr}");
    assert!(
        said.contains("trainer.yaml: document 1 (line ")
            && said.contains("spec.kinds[0].templates[0].path: \"spec.workers[0].template\": only [*] (every element of a list) may follow a field"),
        "{said}"
    );
}
