//! Policies as deep as the limits allow, on objects as deep as a review may
//! be, evaluate without running out of stack: in the server, whose own
//! answering threads run them whatever runtime serves the connections (here
//! a test's, with small stacks), and in the offline commands.
use crate::common;

use common::hostile::review_of;
use common::{config, NoNamespaces, TestServer};
use gpu_admission::admission::Admission;
use gpu_admission::bundle;
use gpu_admission::cli::evaluate::{self, EvaluateArgs, Format, OperationArg};
use gpu_admission::cli::policy_args::PolicyArgs;
use gpu_admission::gpu::catalog::Catalog;
use gpu_admission::policy::parse_documents;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;

/// Levels of `x` under `spec.nested`: with the review around it, just
/// within the decoder's depth limit of 100.
const OBJECT_DEPTH: usize = 90;
/// Levels of `.x` each expression selects: with the rest of it, within
/// the compile limit of 48 levels. Two variables reach 80 levels down, the
/// validation the rest.
const SELECT_DEPTH: usize = 40;

/// A Deny policy on pods: the value at the bottom of the nesting must be 2.
fn deep_policy() -> String {
    let path = ".x".repeat(SELECT_DEPTH);
    let rest = ".x".repeat(OBJECT_DEPTH - 2 * SELECT_DEPTH);
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: deep}}
spec:
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}}
  variables:
  - name: half
    expression: "object.spec.nested{path}"
  - name: most
    expression: "variables.half{path}"
  validations:
  - expression: "variables.most{rest} == 2"
    message: the value at the bottom is not 2
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: deep}}
spec: {{policyName: deep, validationActions: [Deny]}}
"#
    )
}

/// A pod whose `spec.nested` holds `OBJECT_DEPTH` levels of `x`, ending
/// in 1.
fn deep_pod() -> Value {
    let mut nested = json!(1);
    for _ in 0..OBJECT_DEPTH {
        nested = json!({ "x": nested });
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "deep", "namespace": "ml"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "nested": nested}
    })
}

#[tokio::test]
async fn deep_policies_on_deep_objects_evaluate_on_the_answering_threads() {
    let docs = parse_documents(Path::new("deep.yaml"), &deep_policy()).expect("parses");
    let loaded = bundle::from_documents(docs, Catalog::embedded_arc()).expect("compiles");
    let admission = Admission::new(loaded.bundle, Arc::new(NoNamespaces));
    let server = TestServer::start_with(config(), Arc::new(admission)).await;
    let answer = server
        .post_raw("/validate", &review_of("CREATE", deep_pod(), Value::Null))
        .await;
    let body = common::body_value(&answer);
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let message = body["response"]["status"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("deep: the value at the bottom is not 2"),
        "{body}"
    );
    server.stop().await;
}

/// `gpu-admission evaluate`, called from a test's small-stack thread.
#[test]
fn the_offline_commands_evaluate_deep_objects() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("deep.yaml"), deep_policy()).unwrap();
    let manifest = dir.path().join("pod.json");
    std::fs::write(&manifest, deep_pod().to_string()).unwrap();
    let args = EvaluateArgs {
        file: manifest,
        policies: PolicyArgs {
            policies: Some(policies),
            catalog: None,
        },
        namespace: None,
        namespace_labels: None,
        cluster: Vec::new(),
        operation: OperationArg::Create,
        old_filename: None,
        user: "gpu-admission-cli".to_string(),
        groups: Vec::new(),
        output: Format::Json,
        fail_on_deny: false,
        authz: None,
        at: None,
    };
    let results = evaluate::evaluate(&args).unwrap();
    assert_eq!(results.len(), 1);
    assert!(!results[0].allowed);
    assert!(
        results[0]
            .denials
            .iter()
            .any(|d| d.contains("deep: the value at the bottom is not 2")),
        "{:?}",
        results[0].denials
    );
}
