//! Pod-template evaluation never changes a native policy's decision by
//! surprise: a policy that names a controller kind judges that controller
//! once, as kube-apiserver would, and the `gpu-admission.io/pod-templates`
//! annotation turns template evaluation off.
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::{parse_documents, NoticeLevel, PolicySet};
use gpu_admission::review::{Operation, Request};
use serde_json::{json, Value};
use std::path::Path;

/// A policy denying any workload whose (template's) first container runs
/// the image `bad`, matching `resources` of `groups`, bound with Deny.
fn no_bad_image(rules: &str, annotations: &str) -> PolicySet {
    let yaml = format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: no-bad-image
{annotations}
spec:
  matchConstraints:
    resourceRules:
{rules}
  variables:
  - name: containers
    expression: >
      object.kind == 'Pod' ? object.spec.containers
      : object.kind == 'CronJob' ? object.spec.jobTemplate.spec.template.spec.containers
      : object.spec.template.spec.containers
  validations:
  - expression: "variables.containers.all(c, c.image != 'bad')"
    messageExpression: "object.kind + ' ' + object.metadata.name + ' runs a bad image'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: no-bad-image}}
spec:
  policyName: no-bad-image
  validationActions: [Deny]
"#
    );
    let docs = parse_documents(Path::new("p.yaml"), &yaml).unwrap();
    PolicySet::compile(&docs).unwrap_or_else(|e| panic!("{e}"))
}

const PODS: &str = r#"    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["pods"]}"#;
const PODS_AND_CONTROLLERS: &str = r#"    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["pods"]}
    - {apiGroups: ["apps"], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["deployments", "daemonsets"]}
    - {apiGroups: ["batch"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["jobs"]}"#;

fn deployment(image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ml"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": image}]}}}})
}

fn statefulset(image: &str) -> Value {
    let mut d = deployment(image);
    d["kind"] = json!("StatefulSet");
    d
}

fn job(image: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": image}]}}}})
}

fn denials(set: &PolicySet, object: Value, op: Operation) -> Vec<String> {
    let mut req = Request::for_object(object, op, None);
    if op == Operation::Update {
        // The template changed: the old object ran another image.
        let mut old = req.object.clone().unwrap();
        old["spec"]["template"]["spec"]["containers"][0]["image"] = json!("old");
        req.old_object = Some(old);
    }
    set.evaluate(&req, &StaticNamespaces::new()).denials
}

#[test]
fn a_policy_naming_the_controller_kind_judges_it_once() {
    let set = no_bad_image(PODS_AND_CONTROLLERS, "");
    let d = denials(&set, deployment("bad"), Operation::Create);
    assert_eq!(d, vec!["no-bad-image: Deployment web runs a bad image"]);
    let d = denials(&set, job("bad"), Operation::Create);
    assert_eq!(d, vec!["no-bad-image: Job train runs a bad image"]);
    assert!(denials(&set, deployment("good"), Operation::Create).is_empty());
}

#[test]
fn a_named_kind_is_not_judged_through_its_template_even_when_the_operation_is_not_matched() {
    // Jobs are matched on CREATE only: kube-apiserver does not run the
    // policy on a Job UPDATE, and neither does the template.
    let set = no_bad_image(PODS_AND_CONTROLLERS, "");
    assert!(denials(&set, job("bad"), Operation::Update).is_empty());
}

#[test]
fn kinds_the_policy_does_not_name_are_judged_through_their_template() {
    let set = no_bad_image(PODS_AND_CONTROLLERS, "");
    let d = denials(&set, statefulset("bad"), Operation::Create);
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].starts_with("no-bad-image: StatefulSet web: Pod web runs a bad image"),
        "{d:?}"
    );
    let pods_only = no_bad_image(PODS, "");
    let d = denials(&pods_only, deployment("bad"), Operation::Create);
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].contains("Deployment web"), "{d:?}");
}

#[test]
fn the_annotation_turns_template_evaluation_off() {
    let annotations = "  annotations:\n    gpu-admission.io/pod-templates: \"false\"";
    let set = no_bad_image(PODS, annotations);
    assert!(denials(&set, deployment("bad"), Operation::Create).is_empty());
    assert!(denials(&set, statefulset("bad"), Operation::Create).is_empty());
    // Pods themselves are still judged.
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [{"name": "c", "image": "bad"}]}});
    assert_eq!(
        denials(&set, pod, Operation::Create),
        vec!["no-bad-image: Pod p runs a bad image"]
    );
    assert!(
        set.pod_template_notes().is_empty(),
        "{:?}",
        set.pod_template_notes()
    );
}

#[test]
fn a_bad_annotation_value_is_a_load_error() {
    let yaml = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: p
  annotations: {gpu-admission.io/pod-templates: "no"}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
  validations: [{expression: "true"}]
"#;
    let docs = parse_documents(Path::new("p.yaml"), yaml).unwrap();
    let err = PolicySet::compile(&docs).unwrap_err().to_string();
    assert!(
        err.contains("metadata.annotations[gpu-admission.io/pod-templates]: must be \"true\" or \"false\", not \"no\""),
        "{err}"
    );
}

#[test]
fn lint_notes_name_the_kinds_a_policy_is_run_on_through_templates() {
    let set = no_bad_image(PODS_AND_CONTROLLERS, "");
    let notes: Vec<String> = set
        .pod_template_notes()
        .iter()
        .filter(|n| n.level == NoticeLevel::Note)
        .map(|n| n.to_string())
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains(
            "policy no-bad-image matches Pod CREATE, so it is also run on the pod templates of \
             StatefulSet, ReplicaSet, ReplicationController, CronJob"
        ),
        "{notes:?}"
    );
}
