//! matchConstraints and binding matchResources, as kube-apiserver matches.
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::{parse_documents, PolicySet};
use gpu_admission::review::{GroupVersionResource, Operation, Request};
use serde_json::{json, Value};
use std::path::Path;

/// A policy that always fails with `constraints` as its matchConstraints,
/// bound with `binding_match` as the binding's matchResources.
fn deny_all(constraints: &str, binding_match: &str) -> PolicySet {
    let yaml = format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: p}}
spec:
  matchConstraints:
{constraints}
  validations:
  - expression: 'false'
    message: matched
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: b}}
spec:
  policyName: p
  validationActions: [Deny]
{binding_match}
"#
    );
    let docs = parse_documents(Path::new("m.yaml"), &yaml).unwrap();
    PolicySet::compile(&docs).unwrap_or_else(|e| panic!("{e}"))
}

fn pod(labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "i"}]}})
}

fn matched(set: &PolicySet, req: &Request) -> bool {
    matched_in(set, req, &StaticNamespaces::new())
}

fn matched_in(set: &PolicySet, req: &Request, ns: &StaticNamespaces) -> bool {
    !set.evaluate(req, ns).denials.is_empty()
}

fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const PODS_CREATE: &str = r#"    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["pods"]"#;

#[test]
fn operations_must_match() {
    let set = deny_all(PODS_CREATE, "");
    assert!(matched(
        &set,
        &Request::for_object(pod(json!({})), Operation::Create, None)
    ));
    let mut update = Request::for_object(pod(json!({})), Operation::Update, None);
    update.old_object = update.object.clone();
    assert!(!matched(&set, &update));
}

#[test]
fn delete_and_connect_only_when_asked() {
    let set = deny_all(PODS_CREATE, "");
    assert!(!matched(
        &set,
        &Request::for_object(pod(json!({})), Operation::Delete, None)
    ));
    let all = deny_all(&PODS_CREATE.replace("[\"CREATE\"]", "[\"*\"]"), "");
    let del = Request::for_object(pod(json!({})), Operation::Delete, None);
    assert!(del.object.is_none() && del.old_object.is_some());
    assert!(matched(&all, &del));
    let connect = deny_all(
        &PODS_CREATE
            .replace("CREATE", "CONNECT")
            .replace("[\"pods\"]", "[\"pods/exec\"]"),
        "",
    );
    let mut exec = Request::for_object(pod(json!({})), Operation::Connect, None);
    exec.sub_resource = Some("exec".into());
    assert!(matched(&connect, &exec));
}

#[test]
fn api_groups_and_versions_must_match() {
    let set = deny_all(PODS_CREATE, "");
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ml"}, "spec": {}});
    assert!(!matched(
        &set,
        &Request::for_object(deploy.clone(), Operation::Create, None)
    ));
    let star = deny_all(
        &PODS_CREATE
            .replace("[\"\"]", "[\"*\"]")
            .replace("[\"pods\"]", "[\"*\"]"),
        "",
    );
    assert!(matched(
        &star,
        &Request::for_object(deploy, Operation::Create, None)
    ));
}

#[test]
fn subresources_need_a_subresource_pattern() {
    let mut status = Request::for_object(pod(json!({})), Operation::Create, None);
    status.sub_resource = Some("status".into());
    assert!(!matched(&deny_all(PODS_CREATE, ""), &status));
    assert!(matched(
        &deny_all(&PODS_CREATE.replace("[\"pods\"]", "[\"pods/*\"]"), ""),
        &status
    ));
    assert!(matched(
        &deny_all(&PODS_CREATE.replace("[\"pods\"]", "[\"pods/status\"]"), ""),
        &status
    ));
    assert!(!matched(
        &deny_all(&PODS_CREATE.replace("[\"pods\"]", "[\"*\"]"), ""),
        &status
    ));
    assert!(matched(
        &deny_all(&PODS_CREATE.replace("[\"pods\"]", "[\"*/*\"]"), ""),
        &status
    ));
}

#[test]
fn resource_names_limit_the_rule() {
    let named = format!("{PODS_CREATE}\n      resourceNames: [\"other\"]");
    assert!(!matched(
        &deny_all(&named, ""),
        &Request::for_object(pod(json!({})), Operation::Create, None)
    ));
    let named = format!("{PODS_CREATE}\n      resourceNames: [\"trainer\"]");
    assert!(matched(
        &deny_all(&named, ""),
        &Request::for_object(pod(json!({})), Operation::Create, None)
    ));
}

#[test]
fn scope_separates_cluster_and_namespaced() {
    let rules = |scope: &str| {
        format!("    resourceRules:\n    - apiGroups: [\"*\"]\n      apiVersions: [\"*\"]\n      operations: [\"*\"]\n      resources: [\"*\"]\n      scope: {scope}")
    };
    let node = Request::for_object(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
        Operation::Create,
        None,
    );
    let p = Request::for_object(pod(json!({})), Operation::Create, None);
    let mut namespace = Request::for_object(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}),
        Operation::Create,
        None,
    );
    namespace.namespace = Some("ml".into());
    let cluster = deny_all(&rules("Cluster"), "");
    assert!(matched(&cluster, &node) && !matched(&cluster, &p) && matched(&cluster, &namespace));
    let namespaced = deny_all(&rules("Namespaced"), "");
    assert!(
        !matched(&namespaced, &node)
            && matched(&namespaced, &p)
            && !matched(&namespaced, &namespace)
    );
}

#[test]
fn namespace_selector_uses_namespace_labels() {
    let sel = format!("{PODS_CREATE}\n    namespaceSelector:\n      matchLabels: {{tier: gpu}}");
    let set = deny_all(&sel, "");
    let req = Request::for_object(pod(json!({})), Operation::Create, None);
    assert!(matched_in(
        &set,
        &req,
        &StaticNamespaces::new().with("ml", labels(&[("tier", "gpu")]))
    ));
    assert!(!matched_in(
        &set,
        &req,
        &StaticNamespaces::new().with("ml", labels(&[("tier", "cpu")]))
    ));
    assert!(!matched_in(&set, &req, &StaticNamespaces::new()));
}

#[test]
fn object_selector_matches_object_or_old_object() {
    let sel = format!("{}\n    objectSelector:\n      matchExpressions:\n      - {{key: gpu, operator: In, values: [\"yes\"]}}", PODS_CREATE.replace("[\"CREATE\"]", "[\"CREATE\", \"UPDATE\"]"));
    let set = deny_all(&sel, "");
    assert!(matched(
        &set,
        &Request::for_object(pod(json!({"gpu": "yes"})), Operation::Create, None)
    ));
    assert!(!matched(
        &set,
        &Request::for_object(pod(json!({"gpu": "no"})), Operation::Create, None)
    ));
    let mut update = Request::for_object(pod(json!({})), Operation::Update, None);
    update.old_object = Some(pod(json!({"gpu": "yes"})));
    assert!(
        matched(&set, &update),
        "label removed on update still matches through oldObject"
    );
}

#[test]
fn exclude_resource_rules_win() {
    let rules = format!("{PODS_CREATE}\n    excludeResourceRules:\n    - apiGroups: [\"\"]\n      apiVersions: [\"v1\"]\n      operations: [\"CREATE\"]\n      resources: [\"pods\"]\n      resourceNames: [\"trainer\"]");
    assert!(!matched(
        &deny_all(&rules, ""),
        &Request::for_object(pod(json!({})), Operation::Create, None)
    ));
}

#[test]
fn match_policy_exact_uses_the_requested_resource() {
    let rules = PODS_CREATE.replace("[\"v1\"]", "[\"v1beta1\"]");
    let mut req = Request::for_object(pod(json!({})), Operation::Create, None);
    req.request_resource = Some(GroupVersionResource {
        group: String::new(),
        version: "v1beta1".into(),
        resource: "pods".into(),
    });
    assert!(
        matched(&deny_all(&rules, ""), &req),
        "Equivalent also matches the requested version"
    );
    let exact = format!("{PODS_CREATE}\n    matchPolicy: Exact");
    assert!(
        !matched(&deny_all(&exact, ""), &req),
        "Exact only matches the requested version"
    );
    assert!(matched(
        &deny_all(&format!("{rules}\n    matchPolicy: Exact"), ""),
        &req
    ));
}

#[test]
fn binding_match_resources_narrow() {
    let narrow = "  matchResources:\n    namespaceSelector:\n      matchLabels: {team: a}";
    let set = deny_all(PODS_CREATE, narrow);
    let req = Request::for_object(pod(json!({})), Operation::Create, None);
    assert!(matched_in(
        &set,
        &req,
        &StaticNamespaces::new().with("ml", labels(&[("team", "a")]))
    ));
    assert!(!matched_in(
        &set,
        &req,
        &StaticNamespaces::new().with("ml", labels(&[("team", "b")]))
    ));
    // The binding cannot widen what the policy matches.
    let wide = "  matchResources:\n    resourceRules:\n    - apiGroups: [\"*\"]\n      apiVersions: [\"*\"]\n      operations: [\"*\"]\n      resources: [\"*\"]";
    let node = Request::for_object(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}),
        Operation::Create,
        None,
    );
    assert!(!matched(&deny_all(PODS_CREATE, wide), &node));
}
