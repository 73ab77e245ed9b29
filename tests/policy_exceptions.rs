//! GpuPolicyException documents in a policy set: what they let through,
//! and nothing more, as the engine evaluates requests.
use gpu_admission::exceptions::StaticExceptions;
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::{parse_documents, EvaluationResult, PolicySet, EXCEPTIONS_ANNOTATION};
use gpu_admission::review::{Operation, Request};
use gpu_admission::subject::Subject;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;

const POLICIES: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-privileged}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
    - expression: "!object.spec.containers.exists(c, has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged)"
      message: privileged containers are not allowed
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-privileged}
spec: {policyName: no-privileged, validationActions: [Deny]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: at-most-one-gpu}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
    - expression: "object.spec.containers.all(c, !has(c.resources) || !has(c.resources.limits) || !('nvidia.com/gpu' in c.resources.limits) || int(c.resources.limits['nvidia.com/gpu']) <= 1)"
      message: at most one GPU per container
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: at-most-one-gpu}
spec: {policyName: at-most-one-gpu, validationActions: [Warn]}
"#;

const EXCEPTION: &str = r#"
apiVersion: gpu-admission.io/v1alpha1
kind: GpuPolicyException
metadata: {name: nccl-bench, namespace: research}
spec:
  policies: [no-privileged, at-most-one-gpu]
  match:
    kinds: [Pod]
    names: [nccl-bench]
  reason: NCCL bandwidth benchmark, one day
  expiresAt: "2030-01-01T00:00:00Z"
"#;

fn set(extra: &str) -> PolicySet {
    let docs = parse_documents(Path::new("inline.yaml"), &format!("{POLICIES}---{extra}")).unwrap();
    PolicySet::compile(&docs).unwrap_or_else(|e| panic!("{e}"))
}

fn pod(name: &str, namespace: &str, privileged: bool, gpus: &str) -> Request {
    let object = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "bench", "image": "nccl-tests",
            "securityContext": {"privileged": privileged},
            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}});
    Request::for_object(object, Operation::Create, Some(namespace))
}

fn results(set: &PolicySet, req: &Request) -> Vec<(String, &'static str)> {
    let v = set.evaluate(req, &StaticNamespaces::new());
    v.evaluations
        .iter()
        .map(|e| (e.policy.to_string(), e.result.as_str()))
        .collect()
}

#[test]
fn an_exception_lets_exactly_its_object_through_its_policies() {
    let set = set(EXCEPTION);
    assert_eq!(set.exceptions().len(), 1);
    let v = set.evaluate(
        &pod("nccl-bench", "research", true, "8"),
        &StaticNamespaces::new(),
    );
    assert!(v.denials.is_empty(), "{:?}", v.denials);
    // The requester hears of both, with the exception's reason and end.
    let by = "(allowed by GpuPolicyException research/nccl-bench (NCCL bandwidth benchmark, one day; expires 2030-01-01T00:00:00Z))";
    assert_eq!(
        v.warnings,
        [
            format!("no-privileged: privileged containers are not allowed {by}"),
            format!("at-most-one-gpu: at most one GPU per container {by}"),
        ]
    );
    assert_eq!(v.excepted.len(), 2);
    assert_eq!(
        v.audit_annotations[EXCEPTIONS_ANNOTATION],
        r#"[{"action":"Deny","exception":"research/nccl-bench","policy":"no-privileged"},{"action":"Warn","exception":"research/nccl-bench","policy":"at-most-one-gpu"}]"#
    );
    assert_eq!(
        results(&set, &pod("nccl-bench", "research", true, "8")),
        [
            ("no-privileged".to_string(), "excepted"),
            ("at-most-one-gpu".to_string(), "excepted")
        ]
    );
    // Another object in the same namespace: judged as ever.
    let other = set.evaluate(
        &pod("train", "research", true, "1"),
        &StaticNamespaces::new(),
    );
    assert_eq!(
        other.denials,
        ["no-privileged: privileged containers are not allowed"]
    );
    assert!(other.excepted.is_empty());
    // The same name in another namespace: judged as ever.
    let elsewhere = set.evaluate(
        &pod("nccl-bench", "prod", true, "1"),
        &StaticNamespaces::new(),
    );
    assert_eq!(
        elsewhere.denials,
        ["no-privileged: privileged containers are not allowed"]
    );
}

#[test]
fn an_exception_covers_only_the_policies_it_names() {
    let one = EXCEPTION.replace("[no-privileged, at-most-one-gpu]", "[at-most-one-gpu]");
    let set = set(&one);
    let v = set.evaluate(
        &pod("nccl-bench", "research", true, "8"),
        &StaticNamespaces::new(),
    );
    assert_eq!(
        v.denials,
        ["no-privileged: privileged containers are not allowed"]
    );
    assert_eq!(v.excepted.len(), 1);
    assert_eq!(&*v.excepted[0].policy, "at-most-one-gpu");
}

#[test]
fn an_expired_exception_lets_nothing_through() {
    let expired = EXCEPTION.replace("2030-01-01T00:00:00Z", "2020-01-01T00:00:00Z");
    let set = set(&expired);
    let v = set.evaluate(
        &pod("nccl-bench", "research", true, "1"),
        &StaticNamespaces::new(),
    );
    assert_eq!(
        v.denials,
        ["no-privileged: privileged containers are not allowed"]
    );
    assert!(v.excepted.is_empty());
}

#[test]
fn a_match_expression_sees_the_object_and_the_request() {
    let by_expression = EXCEPTION.replace(
        "    names: [nccl-bench]\n",
        "    expression: \"object.metadata.name.startsWith('nccl-') && request.userInfo.username == 'alice'\"\n",
    );
    let set = set(&by_expression);
    let mut alice = pod("nccl-ring", "research", true, "1");
    alice.user_info = json!({"username": "alice"});
    let v = set.evaluate(&alice, &StaticNamespaces::new());
    assert!(v.denials.is_empty(), "{:?}", v.denials);
    let mut bob = pod("nccl-ring", "research", true, "1");
    bob.user_info = json!({"username": "bob"});
    let v = set.evaluate(&bob, &StaticNamespaces::new());
    assert_eq!(
        v.denials,
        ["no-privileged: privileged containers are not allowed"]
    );
}

#[test]
fn exceptions_of_a_lookup_are_judged_at_its_time() {
    let set = set("");
    let doc: Value = serde_yaml::from_str(EXCEPTION).unwrap();
    let end = gpu_admission::exceptions::parse_time("2030-01-01T00:00:00Z").unwrap();
    let second = std::time::Duration::from_secs(1);
    let req = pod("nccl-bench", "research", true, "1");
    let namespaces = StaticNamespaces::new();
    let verdict_at = |at| {
        let lookup =
            StaticExceptions::new(vec![Arc::new(set.read_exception(&doc).unwrap())]).at(at);
        let subject =
            Subject::new(&req, &namespaces, set.template_sources()).with_exceptions(&lookup);
        set.evaluate_subject(&subject, None)
    };
    assert!(verdict_at(end - second).denials.is_empty());
    assert_eq!(
        verdict_at(end).denials,
        ["no-privileged: privileged containers are not allowed"]
    );
    assert_eq!(
        verdict_at(end).evaluations[0].result,
        EvaluationResult::Deny
    );
}
