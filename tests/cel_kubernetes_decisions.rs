//! Policies whose decision depends on a point of CEL semantics, on Pods as
//! kube-apiserver receives them. Each expectation is the decision
//! kube-apiserver (cel-go) makes for the same policy and object.
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::{parse_documents, PolicySet};
use gpu_admission::review::{Operation, Request};
use serde_json::{json, Value};
use std::path::Path;

/// One ValidatingAdmissionPolicy on pod creation with its binding.
fn policy(expression: &str, failure_policy: &str) -> PolicySet {
    let yaml = format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: semantics}}
spec:
  failurePolicy: {failure_policy}
  matchConstraints:
    resourceRules: [{{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}}]
  validations:
  - expression: {expression:?}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: semantics}}
spec:
  policyName: semantics
  validationActions: [Deny]
"#
    );
    let docs = parse_documents(Path::new("inline.yaml"), &yaml).unwrap();
    PolicySet::compile(&docs).unwrap_or_else(|e| panic!("{e}"))
}

fn pod(containers: Value, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": labels},
        "spec": {"containers": containers}})
}

/// Whether the policy denies the pod.
fn denied(set: &PolicySet, object: Value) -> bool {
    let request = Request::for_object(object, Operation::Create, None);
    let verdict = set.evaluate(&request, &StaticNamespaces::new());
    !verdict.denials.is_empty()
}

/// `exists` with an error on one container and a privileged one later:
/// the spec folds `||`, so the privileged container decides (true) and the
/// pod is denied even with `failurePolicy: Ignore`, which only applies to
/// errors. Stopping at the first error made the policy fail open.
#[test]
fn exists_is_decided_by_a_privileged_container_after_one_without_security_context() {
    let set = policy(
        "!object.spec.containers.exists(c, c.securityContext.privileged)",
        "Ignore",
    );
    let privileged_second = pod(
        json!([
            {"name": "plain", "image": "busybox"},
            {"name": "root", "image": "busybox", "securityContext": {"privileged": true}}
        ]),
        json!({}),
    );
    assert!(denied(&set, privileged_second.clone()));
    // The other order gives the same decision.
    let mut reversed = privileged_second;
    let containers = reversed["spec"]["containers"].as_array_mut().unwrap();
    containers.reverse();
    assert!(denied(&set, reversed));
    // Nothing privileged: the error stands and `Ignore` lets the pod in.
    let unprivileged = pod(json!([{"name": "plain", "image": "busybox"}]), json!({}));
    assert!(!denied(&set, unprivileged));
}

/// `all` likewise: a container that decides `false` wins over an error.
#[test]
fn all_is_decided_by_a_failing_container_after_an_error() {
    let set = policy(
        "object.spec.containers.all(c, c.securityContext.runAsNonRoot)",
        "Ignore",
    );
    let object = pod(
        json!([
            {"name": "plain", "image": "busybox"},
            {"name": "root", "image": "busybox", "securityContext": {"runAsNonRoot": false}}
        ]),
        json!({}),
    );
    assert!(denied(&set, object));
}

/// A typo that selects a field of a bool is an error, not `false`: with
/// `failurePolicy: Fail` the pod is denied (kube-apiserver denies it);
/// answering `false` made `!...enabled` true and let a `hostNetwork` pod in.
#[test]
fn a_field_of_a_scalar_is_an_error_not_false() {
    let set = policy("!object.spec.hostNetwork.enabled", "Fail");
    let mut object = pod(json!([{"name": "c", "image": "busybox"}]), json!({}));
    object["spec"]["hostNetwork"] = json!(true);
    assert!(denied(&set, object));
}

/// Optional chaining through a pod without `securityContext` gives the
/// default instead of an error.
#[test]
fn optional_chaining_reaches_the_default_on_a_pod_without_security_context() {
    let set = policy(
        "object.spec.containers.all(c, !c.?securityContext.privileged.orValue(false))",
        "Fail",
    );
    let plain = pod(json!([{"name": "c", "image": "busybox"}]), json!({}));
    assert!(!denied(&set, plain));
    let privileged = pod(
        json!([{"name": "c", "image": "busybox", "securityContext": {"privileged": true}}]),
        json!({}),
    );
    assert!(denied(&set, privileged));
}

/// `size()` counts code points: `substring(0, size(s))` of a non-ASCII
/// label is the label (it failed on the byte count).
#[test]
fn substring_to_the_size_of_a_non_ascii_label_is_the_label() {
    let set = policy(
        "object.metadata.labels.team.substring(0, size(object.metadata.labels.team)) == 'équipe-ü'",
        "Fail",
    );
    let object = pod(
        json!([{"name": "c", "image": "busybox"}]),
        json!({"team": "équipe-ü"}),
    );
    assert!(!denied(&set, object));
}

/// A label key quoted with backticks is the key between them: `has()`
/// finds it and the field reads its value.
#[test]
fn a_backtick_quoted_label_key_is_found() {
    let set = policy(
        "has(object.metadata.labels.`app.kubernetes.io/name`) && object.metadata.labels.`app.kubernetes.io/name` == 'trainer'",
        "Fail",
    );
    let labelled = pod(
        json!([{"name": "c", "image": "busybox"}]),
        json!({"app.kubernetes.io/name": "trainer"}),
    );
    assert!(!denied(&set, labelled));
    let unlabelled = pod(json!([{"name": "c", "image": "busybox"}]), json!({}));
    assert!(denied(&set, unlabelled));
}

/// Numbers of different types compare equal: a GPU count read as an int
/// is found in a list of doubles (params often hold numbers as doubles).
#[test]
fn an_int_is_found_among_doubles() {
    let set = policy(
        "!has(object.metadata.labels.gpus) || int(object.metadata.labels.gpus) in [1.0, 2.0, 4.0, 8.0]",
        "Fail",
    );
    let ok = pod(
        json!([{"name": "c", "image": "busybox"}]),
        json!({"gpus": "4"}),
    );
    assert!(!denied(&set, ok));
    let odd = pod(
        json!([{"name": "c", "image": "busybox"}]),
        json!({"gpus": "3"}),
    );
    assert!(denied(&set, odd));
}
