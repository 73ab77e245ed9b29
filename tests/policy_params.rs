//! Params resolved through a binding's paramRef, and namespaceObject.
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::{parse_documents, PolicySet};
use gpu_admission::review::{Operation, Request};
use serde_json::json;
use std::path::Path;

fn set(param_ref: &str, params: &str) -> PolicySet {
    policy_set(
        "object.spec.gpus <= int(params.data.max)",
        "'at most ' + params.data.max + ' (' + params.metadata.name + ')'",
        param_ref,
        params,
    )
}

/// The policy `max-gpus` for pods with one validation, bound with
/// `param_ref`, beside the `params` documents.
fn policy_set(expression: &str, message: &str, param_ref: &str, params: &str) -> PolicySet {
    let yaml = format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: max-gpus}}
spec:
  paramKind: {{apiVersion: v1, kind: ConfigMap}}
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["pods"]
  validations:
  - expression: "{expression}"
    messageExpression: "{message}"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: max-gpus}}
spec:
  policyName: max-gpus
  validationActions: [Deny]
  paramRef:
{param_ref}
{params}"#
    );
    PolicySet::compile(&parse_documents(Path::new("p.yaml"), &yaml).unwrap())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn cm(name: &str, ns: Option<&str>, labels: &str, max: &str) -> String {
    let ns = ns
        .map(|n| format!("  namespace: {n}\n"))
        .unwrap_or_default();
    format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{ns}  labels: {{{labels}}}\ndata: {{max: \"{max}\"}}\n")
}

fn denials(set: &PolicySet, gpus: i64, ns: &str) -> Vec<String> {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns}, "spec": {"gpus": gpus}});
    set.evaluate(
        &Request::for_object(pod, Operation::Create, None),
        &StaticNamespaces::new(),
    )
    .denials
}

#[test]
fn param_ref_by_name_and_namespace() {
    let s = set(
        "    name: limits\n    namespace: gpu-system\n    parameterNotFoundAction: Deny",
        &(cm("limits", Some("gpu-system"), "", "4") + &cm("limits", Some("other"), "", "1")),
    );
    assert_eq!(denials(&s, 5, "ml"), vec!["max-gpus: at most 4 (limits)"]);
    assert!(denials(&s, 4, "ml").is_empty());
}

#[test]
fn param_ref_without_namespace_uses_the_request_namespace() {
    let s = set(
        "    name: limits\n    parameterNotFoundAction: Deny",
        &(cm("limits", Some("team-a"), "", "2") + &cm("limits", Some("team-b"), "", "8")),
    );
    assert_eq!(
        denials(&s, 4, "team-a"),
        vec!["max-gpus: at most 2 (limits)"]
    );
    assert!(denials(&s, 4, "team-b").is_empty());
}

#[test]
fn param_ref_selector_evaluates_once_per_param() {
    let s = set(
        "    namespace: gpu-system\n    selector:\n      matchLabels: {kind: gpu-limit}\n    parameterNotFoundAction: Allow",
        &(cm("a", Some("gpu-system"), "kind: gpu-limit", "2")
            + &cm("b", Some("gpu-system"), "kind: gpu-limit", "3")
            + &cm("c", Some("gpu-system"), "kind: other", "0")),
    );
    assert_eq!(
        denials(&s, 4, "ml"),
        vec!["max-gpus: at most 2 (a)", "max-gpus: at most 3 (b)"]
    );
    assert_eq!(denials(&s, 3, "ml"), vec!["max-gpus: at most 2 (a)"]);
}

#[test]
fn parameter_not_found_action_allow_and_deny() {
    let allow = set(
        "    name: missing\n    namespace: x\n    parameterNotFoundAction: Allow",
        "",
    );
    assert!(denials(&allow, 100, "ml").is_empty());
    let deny = set(
        "    name: missing\n    namespace: x\n    parameterNotFoundAction: Deny",
        "",
    );
    let d = denials(&deny, 0, "ml");
    assert_eq!(d.len(), 1);
    assert!(
        d[0].starts_with(
            "max-gpus: policy error (failurePolicy Fail): no params found for binding max-gpus"
        ),
        "{d:?}"
    );
}

#[test]
fn namespace_object_is_the_request_namespace() {
    let yaml = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: premium-only}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: ["*"]
      apiVersions: ["*"]
      operations: ["CREATE"]
      resources: ["*"]
  validations:
  - expression: "namespaceObject == null || namespaceObject.metadata.?labels.orValue({}).exists(k, k == 'tier')"
    messageExpression: "'namespace ' + namespaceObject.metadata.name + ' has no tier label'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: premium-only}
spec: {policyName: premium-only, validationActions: [Deny]}
"#;
    let s = PolicySet::compile(&parse_documents(Path::new("p.yaml"), yaml).unwrap()).unwrap();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": {}});
    let req = Request::for_object(pod, Operation::Create, None);
    let labelled = StaticNamespaces::new().with(
        "ml",
        [("tier".to_string(), "premium".to_string())]
            .into_iter()
            .collect(),
    );
    assert!(s.evaluate(&req, &labelled).denials.is_empty());
    let bare = StaticNamespaces::new().with("ml", Default::default());
    assert_eq!(
        s.evaluate(&req, &bare).denials,
        vec!["premium-only: namespace ml has no tier label"]
    );
    // Cluster-scoped objects see a null namespaceObject.
    let node = Request::for_object(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}),
        Operation::Create,
        None,
    );
    assert!(s.evaluate(&node, &bare).denials.is_empty());
}

/// Params reach every kind of expression, also in a policy whose
/// validations never read them (only its matchConditions, message and
/// audit annotations do).
#[test]
fn params_read_only_outside_validations_are_there() {
    let yaml = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: msg-params}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}
  matchConditions:
  - {name: enabled, expression: "params.data.enabled == 'yes'"}
  validations:
  - expression: "object.spec.gpus <= 1"
    messageExpression: "'ask ' + params.data.team"
  auditAnnotations:
  - {key: team, valueExpression: "params.data.team"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: msg-params}
spec:
  policyName: msg-params
  validationActions: [Deny]
  paramRef: {name: p, namespace: gpu-system, parameterNotFoundAction: Deny}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: p, namespace: gpu-system}
data: {enabled: "yes", team: platform}
"#;
    let set = PolicySet::compile(&parse_documents(Path::new("p.yaml"), yaml).unwrap())
        .unwrap_or_else(|e| panic!("{e}"));
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": {"gpus": 2}});
    let v = set.evaluate(
        &Request::for_object(pod, Operation::Create, None),
        &StaticNamespaces::new(),
    );
    assert_eq!(v.denials, ["msg-params: ask platform"]);
    assert_eq!(v.audit_annotations["msg-params.team"], "platform");
}

/// A part of an expression that reads only params is worked out once per
/// params object (see `cel::fold`): each params object a selector finds
/// still gets its own answer, and one for which the part fails (its data
/// has no such key) fails as it would evaluated whole.
#[test]
fn parts_on_params_alone_are_worked_out_per_params_object() {
    let allowed = |name: &str, data: &str| {
        format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: gpu-system, labels: {{kind: allowed}}}}\ndata: {data}\n")
    };
    let exempt = |params: &str| {
        policy_set(
            "object.metadata.namespace in params.data.allowed.split(',').map(n, n.trim())",
            "'namespace not in ' + params.metadata.name",
            "    namespace: gpu-system\n    selector: {matchLabels: {kind: allowed}}\n    parameterNotFoundAction: Allow",
            params,
        )
    };
    let s = exempt(
        &(allowed("one", r#"{allowed: "ml, research"}"#)
            + &allowed("two", r#"{allowed: "ml,batch "}"#)),
    );
    assert!(denials(&s, 0, "ml").is_empty());
    assert_eq!(
        denials(&s, 0, "research"),
        ["max-gpus: namespace not in two"]
    );
    assert_eq!(denials(&s, 0, "batch"), ["max-gpus: namespace not in one"]);
    assert_eq!(
        denials(&s, 0, "other"),
        [
            "max-gpus: namespace not in one",
            "max-gpus: namespace not in two"
        ]
    );

    // A ConfigMap whose data has no such key: the part fails for it, and
    // the expression, evaluated whole, fails as before.
    let s = exempt(&allowed("one", r#"{other: "x"}"#));
    let d = denials(&s, 0, "ml");
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].starts_with("max-gpus: policy error (failurePolicy Fail): ")
            && d[0].contains("allowed"),
        "{d:?}"
    );
}
