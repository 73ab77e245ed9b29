//! The policy engine end to end: folders of ValidatingAdmissionPolicy
//! documents, compiled once and evaluated against requests.
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::{
    parse_documents, read_documents, EvaluationResult, PolicySet, VALIDATION_FAILURE_ANNOTATION,
};
use gpu_admission::review::{Operation, Request};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

fn fixtures(dir: &str) -> PolicySet {
    let docs = read_documents(&Path::new("tests/fixtures/policies").join(dir)).unwrap();
    PolicySet::compile(&docs).unwrap()
}

fn set(yaml: &str) -> PolicySet {
    let docs = parse_documents(Path::new("inline.yaml"), yaml).unwrap();
    PolicySet::compile(&docs).unwrap_or_else(|e| panic!("{e}"))
}

fn ns(name: &str, labels: &[(&str, &str)]) -> StaticNamespaces {
    StaticNamespaces::new().with(
        name,
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    )
}

fn deployment(replicas: i64, ns: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "train", "image": "pytorch",
                "resources": {"limits": {"nvidia.com/gpu": "16"}}}]}}}})
}

fn gpu_pod(gpus: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {"containers": [
            {"name": "sidecar", "image": "envoy"},
            {"name": "train", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}})
}

fn create(obj: Value) -> Request {
    Request::for_object(obj, Operation::Create, None)
}

#[test]
fn replica_limit_example_denies_in_test_namespaces() {
    let set = fixtures("replica-limit");
    assert_eq!(set.len(), 2);
    let test_ns = ns("default", &[("environment", "test")]);
    let v = set.evaluate(&create(deployment(5, "default")), &test_ns);
    assert_eq!(
        v.denials,
        vec!["gpu-replica-cap.gpu-admission.io: at most 3 replicas may share the GPU pool here"]
    );
    assert_eq!(v.reason.as_deref(), Some("Invalid"));
    assert!(v.warnings.is_empty());
    let v = set.evaluate(&create(deployment(2, "default")), &test_ns);
    assert!(v.denials.is_empty(), "{:?}", v.denials);
}

#[test]
fn replica_limit_example_warns_elsewhere() {
    let set = fixtures("replica-limit");
    let prod = ns("default", &[("environment", "prod")]);
    let v = set.evaluate(&create(deployment(500, "default")), &prod);
    assert!(v.denials.is_empty());
    assert_eq!(
        v.warnings,
        vec!["gpu-replica-cap.gpu-admission.io: at most 100 replicas may share the GPU pool here"]
    );
    assert!(v
        .evaluations
        .iter()
        .any(|e| e.result == EvaluationResult::Warn));
}

#[test]
fn configmap_params_with_audit_write_the_kubernetes_annotation() {
    let set = fixtures("replica-limit");
    let prod = ns("default", &[("environment", "prod")]);
    let v = set.evaluate(&create(deployment(7, "default")), &prod);
    let raw = &v.audit_annotations[VALIDATION_FAILURE_ANNOTATION];
    let parsed: Value = serde_json::from_str(raw).unwrap();
    assert_eq!(
        parsed,
        json!([{"message": "more replicas than the GPU pool's audit threshold",
            "policy": "gpu-replica-audit.gpu-admission.io", "binding": "gpu-replica-audit",
            "expressionIndex": 0, "validationActions": ["Audit"]}])
    );
    assert!(v.denials.is_empty());
}

#[test]
fn quantity_and_lists_through_the_engine() {
    let set = fixtures("gpu");
    let none = StaticNamespaces::new();
    let v = set.evaluate(&create(gpu_pod("9")), &none);
    assert_eq!(
        v.denials,
        vec!["gpu-limits: container \"train\" asks for more than 8 GPUs"]
    );
    let v = set.evaluate(&create(gpu_pod("4")), &none);
    assert!(v.denials.is_empty(), "{:?}", v.denials);
    assert_eq!(v.audit_annotations["gpu-limits.gpus"], "4");
}

#[test]
fn pod_templates_of_controllers_are_judged() {
    let set = fixtures("gpu");
    let v = set.evaluate(&create(deployment(1, "ml")), &StaticNamespaces::new());
    assert_eq!(
        v.denials,
        vec!["gpu-limits: Deployment web: container \"train\" asks for more than 8 GPUs"]
    );
    let mut job = deployment(1, "ml");
    job["apiVersion"] = json!("batch/v1");
    job["kind"] = json!("Job");
    let v = set.evaluate(&create(job), &StaticNamespaces::new());
    assert_eq!(v.denials.len(), 1);
    assert!(
        v.denials[0].starts_with("gpu-limits: Job web: "),
        "{:?}",
        v.denials
    );
    // A controller named by generateName is still judged.
    let mut generated = deployment(1, "ml");
    generated["metadata"] = json!({"generateName": "web-", "namespace": "ml"});
    let mut req = create(generated);
    req.name = String::new();
    let v = set.evaluate(&req, &StaticNamespaces::new());
    assert_eq!(v.denials.len(), 1);
    assert!(
        v.denials[0].starts_with("gpu-limits: Deployment web-*: "),
        "{:?}",
        v.denials
    );
    // DELETE of a controller does not judge its template.
    let del = Request::for_object(deployment(1, "ml"), Operation::Delete, None);
    assert!(set
        .evaluate(&del, &StaticNamespaces::new())
        .denials
        .is_empty());
}

const POD_RULES: &str = r#"
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["pods"]
"#;

fn policy(name: &str, spec_tail: &str, actions: &str) -> String {
    format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: {name}\nspec:{POD_RULES}{spec_tail}\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: {name}-binding\nspec:\n  policyName: {name}\n  validationActions: {actions}\n"
    )
}

#[test]
fn default_message_is_the_failed_expression() {
    let set = set(&policy(
        "p",
        "  validations:\n  - expression: \"object.metadata.name == 'x'\"",
        "[Deny]",
    ));
    let v = set.evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert_eq!(
        v.denials,
        vec!["p: failed expression: object.metadata.name == 'x'"]
    );
}

#[test]
fn message_expression_falls_back_to_message_on_error_or_empty() {
    let tail = "  validations:\n  - expression: 'false'\n    message: static text\n    messageExpression: 'object.nope'\n  - expression: 'false'\n    message: second\n    messageExpression: \"'  '\"";
    let set = set(&policy("p", tail, "[Deny]"));
    let v = set.evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert_eq!(v.denials, vec!["p: static text", "p: second"]);
}

#[test]
fn reason_is_taken_from_the_validation() {
    let tail = "  validations:\n  - expression: 'false'\n    reason: Forbidden";
    let v =
        set(&policy("p", tail, "[Deny]")).evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert_eq!(v.reason.as_deref(), Some("Forbidden"));
}

#[test]
fn match_conditions_false_skips_and_error_applies_failure_policy() {
    let skip = "  matchConditions:\n  - name: never\n    expression: 'false'\n  - name: broken\n    expression: 'object.nope == 1'\n  validations:\n  - expression: 'false'";
    let v =
        set(&policy("p", skip, "[Deny]")).evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert!(v.denials.is_empty() && v.evaluations.is_empty(), "{v:?}");
    let err = "  matchConditions:\n  - name: broken\n    expression: 'object.nope == 1'\n  validations:\n  - expression: 'true'";
    let v =
        set(&policy("p", err, "[Deny]")).evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert_eq!(
        v.denials,
        vec![
            "p: policy error (failurePolicy Fail): matchConditions[0] (broken): no such key: nope"
        ]
    );
    let ignore = format!("  failurePolicy: Ignore\n{err}");
    let v = set(&policy("p", &ignore, "[Deny]"))
        .evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert!(v.denials.is_empty());
    assert_eq!(v.evaluations[0].result, EvaluationResult::Error);
}

#[test]
fn validation_errors_apply_failure_policy() {
    let tail = "  validations:\n  - expression: \"object.spec.replicas > 1\"";
    let v =
        set(&policy("p", tail, "[Deny]")).evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert_eq!(
        v.denials,
        vec!["p: policy error (failurePolicy Fail): validations[0]: no such key: replicas"]
    );
    let warn =
        set(&policy("p", tail, "[Warn]")).evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert!(warn.denials.is_empty());
    assert_eq!(warn.warnings.len(), 1);
}

#[test]
fn variables_are_lazy_and_may_use_earlier_ones() {
    // `broken` is never referenced, so its error never surfaces.
    let tail = "  variables:\n  - name: broken\n    expression: '1/0 == 1'\n  - name: names\n    expression: 'object.spec.containers.map(c, c.name)'\n  - name: count\n    expression: 'size(variables.names)'\n  validations:\n  - expression: 'variables.count < 2'\n    messageExpression: \"'has ' + string(variables.count) + ' containers: ' + variables.names.join(', ')\"";
    let v =
        set(&policy("p", tail, "[Deny]")).evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert_eq!(v.denials, vec!["p: has 2 containers: sidecar, train"]);
    let tail = "  variables:\n  - name: broken\n    expression: '1/0 == 1'\n  validations:\n  - expression: 'true || variables.broken'\n  - expression: 'variables.broken'";
    let v =
        set(&policy("p", tail, "[Deny]")).evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert_eq!(
        v.denials,
        vec!["p: policy error (failurePolicy Fail): validations[1]: variables.broken: division by zero"]
    );
}

#[test]
fn variables_read_whole_by_name_or_shadowed_agree() {
    // `has(variables.x)`, a computed key and optional selection read the
    // map; a comprehension may bind the name `variables` itself.
    let tail = "  variables:\n  - name: names\n    expression: 'object.spec.containers.map(c, c.name)'\n  - name: key\n    expression: \"'names'\"\n  validations:\n  - expression: 'has(variables.names) && has(variables.key)'\n    message: has\n  - expression: 'variables[variables.key] == variables.names'\n    message: computed key\n  - expression: \"[['x']].all(variables, variables == ['x']) && variables['names'].size() == 2\"\n    message: shadowed\n  - expression: \"variables.?names.hasValue() && variables[?'key'].orValue('') == 'names'\"\n    message: optional\n  - expression: 'variables.names.size() == 1'\n    message: by name";
    let v =
        set(&policy("p", tail, "[Deny]")).evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert_eq!(v.denials, vec!["p: by name"]);
}

/// Only what expressions can reach of `object` and `oldObject` is converted
/// for CEL: what is read whole is whole, and each object has its own reach.
#[test]
fn what_expressions_reach_of_the_objects_is_all_they_see() {
    let tail = "  validations:\n  - expression: 'object.metadata.labels == oldObject.metadata.labels'\n    message: labels changed\n  - expression: 'size(object.metadata) == 4'\n    message: metadata whole\n  - expression: \"oldObject.status.phase == 'Running' && !has(object.status)\"\n    message: status\n  - expression: 'object.spec.containers.all(c, size(c) == 3)'\n    message: containers whole\n  - expression: \"[{'x': 1}].all(oldObject, size(oldObject) == 1)\"\n    message: shadowed";
    let pod = |labels: Value, status: Option<Value>| {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml", "labels": labels,
                "managedFields": [{"manager": "kubectl", "operation": "Update",
                    "fieldsV1": {"f:metadata": {"f:labels": {}}}}]},
            "spec": {"containers": [{"name": "c", "image": "i",
                "env": [{"name": "A", "value": "1"}]}]}});
        if let Some(status) = status {
            pod["status"] = status;
        }
        pod
    };
    let mut update =
        Request::for_object(pod(json!({"a": "1"}), None), Operation::Update, Some("ml"));
    update.old_object = Some(pod(json!({"a": "2"}), Some(json!({"phase": "Running"}))));
    let v = set(&policy("p", tail, "[Deny]")).evaluate(&update, &StaticNamespaces::new());
    assert_eq!(v.denials, vec!["p: labels changed"]);
}

#[test]
fn audit_annotations_skip_null_and_empty() {
    let tail = "  validations:\n  - expression: 'true'\n  auditAnnotations:\n  - key: name\n    valueExpression: \"'pod ' + object.metadata.name\"\n  - key: none\n    valueExpression: 'null'\n  - key: empty\n    valueExpression: \"''\"";
    let v = set(&policy("p", tail, "[Audit]"))
        .evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert_eq!(
        v.audit_annotations,
        [("p.name".to_string(), "pod trainer".to_string())]
            .into_iter()
            .collect()
    );
}

/// As kube-apiserver writes a policy's audit annotations: the value
/// trimmed (blank writes nothing), then cut to 10 KiB.
#[test]
fn audit_annotation_values_are_trimmed_and_cut_at_10_kib() {
    let tail = "  validations:\n  - expression: 'true'\n  auditAnnotations:\n  - key: note\n    valueExpression: \"object.metadata.annotations['note']\"";
    let set = set(&policy("p", tail, "[Audit]"));
    let with_note = |note: &str| {
        let mut pod = gpu_pod("1");
        pod["metadata"]["annotations"] = json!({ "note": note });
        set.evaluate(&create(pod), &StaticNamespaces::new())
            .audit_annotations
    };
    assert_eq!(with_note("  a100 \n")["p.note"], "a100");
    assert!(with_note(" \n ").is_empty());
    let long = format!("  {}", "x".repeat(20 * 1024));
    assert_eq!(with_note(&long)["p.note"], "x".repeat(10 * 1024));
}

#[test]
fn request_variable_has_the_kubernetes_shape() {
    let tail = "  validations:\n  - expression: \"request.operation == 'CREATE' && request.kind.kind == 'Pod' && request.resource.resource == 'pods' && request.userInfo.username == 'gpu-admission-cli' && request.namespace == 'ml' && request.name == 'trainer' && !has(request.subResource) && !request.dryRun && oldObject == null && namespaceObject.metadata.name == 'ml' && !has(request.uid)\"";
    let v =
        set(&policy("p", tail, "[Deny]")).evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert!(v.denials.is_empty(), "{:?}", v.denials);
}

/// kube-apiserver hands CEL the `AdmissionRequest` as unstructured JSON, so
/// what Go leaves out when empty is absent: an unguarded read of it is an
/// error (failurePolicy decides), as it would be in the cluster.
#[test]
fn request_fields_empty_in_kubernetes_are_absent_not_empty() {
    let guarded = "  validations:\n  - expression: \"!has(request.subResource) && !has(request.requestSubResource) && !has(request.userInfo.uid) && !has(request.userInfo.extra) && !has(request.userInfo.groups) && request.userInfo.username == 'gpu-admission-cli'\"";
    let v = set(&policy("p", guarded, "[Deny]"))
        .evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert!(v.denials.is_empty(), "{:?}", v.denials);

    let unguarded =
        "  validations:\n  - expression: \"request.subResource != 'ephemeralcontainers'\"";
    let v = set(&policy("p", unguarded, "[Deny]"))
        .evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    assert_eq!(v.denials.len(), 1, "{:?}", v.denials);
    assert!(
        v.denials[0].starts_with("p: policy error (failurePolicy Fail): validations[0]:"),
        "{:?}",
        v.denials
    );
}

#[test]
fn runaway_expression_stops_quickly_with_a_cost_error() {
    let tail = "  validations:\n  - expression: 'object.items.all(a, object.items.all(b, object.items.all(c, a + b + c >= 0)))'";
    let set = set(&policy("p", tail, "[Deny]"));
    let items: Vec<i64> = (0..1000).collect();
    let mut pod = gpu_pod("1");
    pod["items"] = json!(items);
    // 1,000,000 units take about a tenth of a second optimised; an
    // unoptimised test build on a busy machine is several times slower.
    let bound = if cfg!(debug_assertions) {
        std::time::Duration::from_secs(4)
    } else {
        std::time::Duration::from_millis(500)
    };
    let start = std::time::Instant::now();
    let v = set.evaluate(&create(pod), &StaticNamespaces::new());
    assert!(start.elapsed() < bound, "{:?}", start.elapsed());
    assert_eq!(v.denials.len(), 1);
    assert!(
        v.denials[0].starts_with(
            "p: policy error (failurePolicy Fail): validations[0]: cost limit exceeded"
        ),
        "{}",
        v.denials[0]
    );
}

struct ThreadName(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl gpu_admission::cel::Extension for ThreadName {
    fn register_functions(&self, ctx: &mut gpu_admission::cel::Context<'static>) {
        let seen = std::sync::Arc::clone(&self.0);
        ctx.add_function("recordThread", move || {
            let name = std::thread::current().name().unwrap_or("").to_string();
            seen.lock().unwrap().push(name);
            true
        });
    }
}

/// The engine never hands evaluation to another thread: whoever calls it
/// (the server's answering threads, the offline commands) decides where it
/// runs and gives it the stack.
#[test]
fn evaluation_runs_on_the_calling_thread() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let tail = "  validations:\n  - expression: 'recordThread()'";
    let docs = parse_documents(Path::new("t.yaml"), &policy("p", tail, "[Deny]")).unwrap();
    let set = PolicySet::compile_with(
        &docs,
        gpu_admission::cel::Extensions::new().with(ThreadName(std::sync::Arc::clone(&seen))),
    )
    .unwrap();
    let other = set.clone();
    let here = std::thread::current().name().unwrap_or("").to_string();
    set.evaluate(&create(gpu_pod("1")), &StaticNamespaces::new());
    std::thread::Builder::new()
        .name("caller".into())
        .stack_size(gpu_admission::policy::EVALUATION_STACK)
        .spawn(move || other.evaluate(&create(gpu_pod("1")), &StaticNamespaces::new()))
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), [here, "caller".to_string()]);
}

/// A pod policy judging a controller's template still sees who is asking:
/// `request.userInfo` is the user who applies the Deployment.
#[test]
fn pod_templates_keep_the_requesting_user() {
    let set = set(&policy(
        "no-ci-gpus",
        "  validations:\n  - expression: \"request.userInfo.username != 'ci-bot'\"\n    message: ci-bot may not run GPU pods",
        "[Deny]",
    ));
    let mut req = create(deployment(1, "ml"));
    req.user_info = json!({"username": "ci-bot", "groups": ["system:authenticated"]});
    let v = set.evaluate(&req, &StaticNamespaces::new());
    assert_eq!(
        v.denials,
        vec!["no-ci-gpus: Deployment web: ci-bot may not run GPU pods"]
    );
    req.user_info = json!({"username": "alice", "groups": ["system:authenticated"]});
    assert!(set
        .evaluate(&req, &StaticNamespaces::new())
        .denials
        .is_empty());
}

#[test]
fn evaluation_stops_at_the_deadline_and_says_so() {
    let set = set(r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: slow}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  validations:
    - expression: "object.spec.containers.all(c, c.name != '')"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: slow}
spec: {policyName: slow, validationActions: [Deny]}
"#);
    let req = create(gpu_pod("1"));
    let namespaces = StaticNamespaces::new();
    let done = set.evaluate_until(&req, &namespaces, None);
    assert!(!done.timed_out);
    assert_eq!(done.evaluations.len(), 1);
    let past = std::time::Instant::now() - std::time::Duration::from_millis(1);
    let late = set.evaluate_until(&req, &namespaces, Some(past));
    assert!(late.timed_out, "the verdict is marked incomplete");
    assert!(late.evaluations.is_empty(), "no binding started after it");
    let future = std::time::Instant::now() + std::time::Duration::from_secs(3600);
    assert!(
        !set.evaluate_until(&req, &namespaces, Some(future))
            .timed_out
    );
}

/// What the server's first call gives for a `/validate` of `req` that may
/// work until `slice_end`: the answer, or `None` when it is left to resume.
fn validate_started(
    admission: &std::sync::Arc<gpu_admission::admission::Admission>,
    req: &Request,
    slice_end: std::time::Instant,
) -> Option<gpu_admission::server::Answer> {
    use gpu_admission::server::{Endpoint, Step, Webhook};
    let req = std::sync::Arc::new(req.clone());
    match admission
        .clone()
        .answer(Endpoint::Validate, &req, slice_end)
    {
        Step::Done(answer) => Some(answer),
        Step::Resume(_) => None,
    }
}

/// `/validate` is answered at once, without a slice (allowed, nothing
/// evaluated), exactly when no binding of the shipped set could match the
/// request or the pod of its template, and that answer is the one
/// evaluation would give.
#[test]
fn requests_no_binding_could_match_are_answered_at_once() {
    use gpu_admission::admission::Admission;
    use gpu_admission::bundle::{self, PolicySource};
    use std::sync::Arc;
    use std::time::Instant;
    let bundle = bundle::load(&PolicySource::Embedded).unwrap().bundle;
    let admission = Arc::new(Admission::new(bundle, Arc::new(StaticNamespaces::new())));
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "ml"}, "data": {"a": "b"}});
    let mut delete = create(gpu_pod("1"));
    delete.operation = Operation::Delete;
    delete.old_object = delete.object.take();
    for req in [create(config_map), delete] {
        let at_once = validate_started(&admission, &req, Instant::now()).unwrap_or_else(|| {
            panic!(
                "{} {:?} should be answered at once",
                req.kind.kind, req.operation
            )
        });
        assert!(at_once.response.allowed);
        let evaluated = admission.validate(&req);
        assert!(evaluated.response.allowed);
        assert!(
            evaluated.evaluations.is_empty(),
            "{:?}",
            evaluated.evaluations
        );
    }
    // A GPU pod, and a Deployment whose template pod the pod policies judge.
    assert!(validate_started(&admission, &create(gpu_pod("1")), Instant::now()).is_none());
    assert!(validate_started(&admission, &create(deployment(1, "ml")), Instant::now()).is_none());
}

/// Namespace selectors see `kubernetes.io/metadata.name`, which
/// kube-apiserver puts on every Namespace, also for a namespace the lookup
/// does not know.
#[test]
fn namespace_selectors_see_the_namespace_name_label() {
    let set = set(r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: not-in-ml}
spec:
  matchConstraints:
    namespaceSelector:
      matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: In, values: [ml]}
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}
  validations:
  - {expression: "false", message: no pods in ml}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: not-in-ml}
spec: {policyName: not-in-ml, validationActions: [Deny]}
"#);
    let pod_in = |namespace: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace}, "spec": {}});
    let none = StaticNamespaces::new();
    let denied = set.evaluate(&create(pod_in("ml")), &none).denials;
    assert_eq!(denied, ["not-in-ml: no pods in ml"]);
    assert!(set
        .evaluate(&create(pod_in("web")), &none)
        .denials
        .is_empty());
}

/// `/validate` within a slice (what the server tries on the connection's
/// thread): the same answer as a full evaluation when it finishes in time,
/// and nothing at all, never a partial verdict, when it does not; what is
/// resumed then gives the full answer.
#[test]
fn validation_within_a_slice_is_whole_or_nothing() {
    use gpu_admission::admission::{Admission, Bundle};
    use gpu_admission::server::{Endpoint, Step, Webhook};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let admission = |yaml: &str| {
        let bundle = Bundle {
            policies: set(yaml),
            ..Bundle::default()
        };
        Arc::new(Admission::new(bundle, Arc::new(StaticNamespaces::new())))
    };
    let cheap = admission(&policy(
        "p",
        "  validations:\n  - expression: \"object.metadata.name == 'x'\"",
        "[Deny]",
    ));
    let req = create(gpu_pod("1"));
    let full = cheap.validate(&req);
    let within = validate_started(&cheap, &req, Instant::now() + Duration::from_secs(60))
        .expect("finished long before the end of the slice");
    assert!(!full.response.allowed);
    assert_eq!(within.response, full.response);
    assert_eq!(within.policies.len(), full.evaluations.len());
    let Step::Resume(resume) =
        cheap
            .clone()
            .answer(Endpoint::Validate, &Arc::new(req.clone()), Instant::now())
    else {
        panic!("a slice already over finishes nothing");
    };
    let resumed = resume(Instant::now() + Duration::from_secs(60));
    assert_eq!(resumed.response, full.response);
    assert_eq!(resumed.policies.len(), full.evaluations.len());

    let tail = "  validations:\n  - expression: 'object.items.all(a, object.items.all(b, object.items.all(c, a + b + c >= 0)))'";
    let runaway = admission(&policy("p", tail, "[Deny]"));
    let mut pod = gpu_pod("1");
    pod["items"] = json!((0..1000).collect::<Vec<i64>>());
    // Its full evaluation ends in a cost-limit denial; within a
    // millisecond it gives nothing, so it stopped at the slice's end.
    assert!(!runaway.validate(&create(pod.clone())).response.allowed);
    assert!(validate_started(
        &runaway,
        &create(pod),
        Instant::now() + Duration::from_millis(1)
    )
    .is_none());

    // A set that asks the authorizer (a SubjectAccessReview that may wait
    // on the cluster) is never tried within a slice, however cheap.
    let asks = admission(&policy(
        "p",
        "  validations:\n  - expression: \"authorizer.group('').resource('pods').namespace('ml').check('create').allowed() || true\"",
        "[Deny]",
    ));
    assert!(asks.validate(&req).response.allowed);
    assert!(validate_started(&asks, &req, Instant::now() + Duration::from_secs(60)).is_none());
}

/// A review that runs out of its slice is started again on an answering
/// thread, and the slice's work is lost: after two such reviews of a
/// resource, the next is not tried within a slice at all, while other
/// resources still are, and one resumed that again takes longer than a
/// slice keeps it so.
#[test]
fn a_resource_that_outgrew_its_slice_starts_on_an_answering_thread() {
    use gpu_admission::admission::{Admission, Bundle};
    use gpu_admission::server::{Endpoint, Step, Webhook};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let tail = "  validations:\n  - expression: 'object.items.all(a, object.items.all(b, object.items.all(c, a + b + c >= 0)))'";
    let bundle = Bundle {
        policies: set(&policy("p", tail, "[Deny]")),
        ..Bundle::default()
    };
    let admission = Arc::new(Admission::new(bundle, Arc::new(StaticNamespaces::new())));
    let mut pod = gpu_pod("1");
    pod["items"] = json!((0..1000).collect::<Vec<i64>>());
    let runaway = create(pod);
    let long = || Instant::now() + Duration::from_secs(600);
    // Before any review ran out, a generous slice is used whole: a
    // Deployment (its template pod judged, and cheap) and a pod are both
    // answered there.
    let cheap = create(gpu_pod("1"));
    assert!(validate_started(&admission, &cheap, long()).is_some());
    assert!(validate_started(&admission, &create(deployment(1, "ml")), long()).is_some());
    // The runaway pod runs out of a millisecond's slice: once moves
    // nothing (a cheap pod between that fits starts the count again), two
    // in a row do.
    let slice = || Instant::now() + Duration::from_millis(1);
    for _ in 0..2 {
        assert!(validate_started(&admission, &runaway, slice()).is_none());
        assert!(validate_started(&admission, &cheap, long()).is_some());
    }
    assert!(validate_started(&admission, &runaway, slice()).is_none());
    assert!(validate_started(&admission, &runaway, slice()).is_none());
    // Now even a cheap pod is not started within a generous slice, and a
    // Deployment still is.
    assert!(validate_started(&admission, &cheap, long()).is_none());
    assert!(validate_started(&admission, &create(deployment(1, "ml")), long()).is_some());
    // The runaway pod, resumed, takes longer than a slice: pods stay on
    // the answering threads, and what they answer is the evaluation's.
    let Step::Resume(resume) =
        (admission.clone()).answer(Endpoint::Validate, &Arc::new(runaway.clone()), long())
    else {
        panic!("a pod is not started within a slice after one ran out");
    };
    let resumed = resume(long());
    assert_eq!(resumed.response, admission.validate(&runaway).response);
    assert!(!resumed.response.allowed);
    assert!(validate_started(&admission, &cheap, long()).is_none());
}
