//! Pods and the controllers that make them: one table of the kinds whose
//! objects hold a pod template, and the pod a controller would create.
use crate::k8s::json::Pointer as _;
use serde_json::{json, Map, Value};

/// A kind whose objects carry a pod template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TemplateKind {
    /// API groups it is served under (the first is the current one).
    pub groups: &'static [&'static str],
    pub kind: &'static str,
    /// JSON pointer to the pod template (`metadata` + `spec`).
    pub template: &'static str,
    /// Whether the kind's controller creates pods from the template (a
    /// PodTemplate object creates none).
    pub makes_pods: bool,
}

const APPS: &[&str] = &["apps", "extensions"];

/// Every kind with a pod template.
pub const TEMPLATE_KINDS: &[TemplateKind] = &[
    kind(APPS, "Deployment", "/spec/template", true),
    kind(APPS, "StatefulSet", "/spec/template", true),
    kind(APPS, "DaemonSet", "/spec/template", true),
    kind(APPS, "ReplicaSet", "/spec/template", true),
    kind(&[""], "ReplicationController", "/spec/template", true),
    kind(&["batch"], "Job", "/spec/template", true),
    kind(
        &["batch"],
        "CronJob",
        "/spec/jobTemplate/spec/template",
        true,
    ),
    kind(&[""], "PodTemplate", "/template", false),
];

const fn kind(
    groups: &'static [&'static str],
    kind: &'static str,
    template: &'static str,
    makes_pods: bool,
) -> TemplateKind {
    TemplateKind {
        groups,
        kind,
        template,
        makes_pods,
    }
}

/// The API group of an `apiVersion` (`apps/v1` -> `apps`, `v1` -> ``).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The template kind of `group` and `kind`, if it has a pod template.
pub fn template_kind(group: &str, kind: &str) -> Option<&'static TemplateKind> {
    TEMPLATE_KINDS
        .iter()
        .find(|t| t.kind == kind && t.groups.contains(&group))
}

/// The API group and kind of an object, by its `apiVersion` and `kind`.
pub fn group_kind(object: &Value) -> Option<(&str, &str)> {
    let api = object.get("apiVersion")?.as_str()?;
    Some((group_of(api), object.get("kind")?.as_str()?))
}

/// The template kind of an object, by its `apiVersion` and `kind`.
pub fn template_kind_of(object: &Value) -> Option<&'static TemplateKind> {
    let (group, kind) = group_kind(object)?;
    template_kind(group, kind)
}

/// Is the object a core/v1 Pod?
pub fn is_pod(object: &Value) -> bool {
    group_kind(object) == Some(("", "Pod"))
}

/// (held, requested) of a pod: (0, 0) once finished (Succeeded or
/// Failed); (1, 0) while Running or bound to a node (`spec.nodeName`);
/// (0, 1) otherwise (not placed yet). The one holding rule the audit and
/// the GPU budgets share.
pub fn pod_state(pod: &Value) -> (i64, i64) {
    match pod.at("/status/phase").and_then(Value::as_str) {
        Some("Succeeded" | "Failed") => (0, 0),
        Some("Running") => (1, 0),
        _ if pod_is_bound(pod) => (1, 0),
        _ => (0, 1),
    }
}

/// Whether the scheduler (or the pod itself) put the pod on a node.
pub fn pod_is_bound(pod: &Value) -> bool {
    pod.at("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty())
}

/// Whether a pod is done (Succeeded or Failed): it holds nothing.
pub fn pod_is_finished(pod: &Value) -> bool {
    pod_state(pod) == (0, 0)
}

/// The uid of the object's controller (its ownerReference with
/// `controller: true`), if it has one.
pub fn controller_uid(object: &Value) -> Option<&str> {
    controller_ref(object)?.get("uid")?.as_str()
}

/// The owner reference of `object`'s controller (`controller: true`).
pub fn controller_ref(object: &Value) -> Option<&Value> {
    (object.at("/metadata/ownerReferences")?.as_array()?.iter())
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
}

/// The pod template inside a controller object, if `object` is one of the
/// controllers whose pods policies judge: Deployment, StatefulSet,
/// DaemonSet, ReplicaSet, ReplicationController, Job (`spec.template`) or
/// CronJob (`spec.jobTemplate.spec.template`).
pub fn pod_template(object: &Value) -> Option<&Value> {
    let kind = template_kind_of(object).filter(|k| k.makes_pods)?;
    object.at(kind.template).filter(|t| t.is_object())
}

/// The pods a built-in controller runs at once as its spec says:
/// `spec.replicas` (default 1), a Job's `spec.parallelism` (default 1), a
/// CronJob's job's; a DaemonSet counts one (one per node, which the spec
/// does not say). 1 for anything else.
pub fn replicas(object: &Value) -> i64 {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let at = match kind {
        "Deployment" | "StatefulSet" | "ReplicaSet" | "ReplicationController" => "/spec/replicas",
        "Job" => "/spec/parallelism",
        "CronJob" => "/spec/jobTemplate/spec/parallelism",
        _ => return 1,
    };
    object
        .at(at)
        .and_then(crate::k8s::json::int_of)
        .map_or(1, |n| n.max(0))
}

/// Whether an update of a controller changes the pods it makes: its pod
/// template differs from the old object's (compared as sent, so a field
/// one side spells out and the other leaves to its default counts as a
/// change), or the old object has none. Scaling, finalizers, status and the
/// controller's own labels leave the template as it was.
pub fn template_changed(object: &Value, old_object: Option<&Value>) -> bool {
    pod_template(object) != old_object.and_then(pod_template)
}

/// The pod spec of a Pod, or of the template of any kind in
/// [`TEMPLATE_KINDS`] (PodTemplate included).
pub fn pod_spec(object: &Value) -> Option<&Value> {
    let spec = if is_pod(object) {
        object.get("spec")
    } else {
        let kind = template_kind_of(object)?;
        object.at(kind.template)?.get("spec")
    };
    spec.filter(|s| s.is_object())
}

/// The metadata of a Pod, or of the pod template of a kind in
/// [`TEMPLATE_KINDS`].
pub fn pod_metadata(object: &Value) -> Option<&Value> {
    if is_pod(object) {
        return object.get("metadata");
    }
    let kind = template_kind_of(object)?;
    object.at(kind.template)?.get("metadata")
}

/// The Pod that `template` (a pod template: `metadata` and `spec`) of the
/// workload `object` describes: the template's labels and annotations, the
/// workload's name and namespace, and the template's spec (moved, not
/// copied).
pub fn pod_of_template(object: &Value, mut template: Value) -> Value {
    let mut metadata = Map::new();
    if let Some(name) = object.at("/metadata/name").and_then(Value::as_str) {
        metadata.insert("name".into(), name.into());
    }
    if let Some(ns) = object.at("/metadata/namespace").and_then(Value::as_str) {
        metadata.insert("namespace".into(), ns.into());
    }
    if let Some(own) = template.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["labels", "annotations"] {
            if let Some(v) = own.remove(key) {
                metadata.insert(key.into(), v);
            }
        }
    }
    let spec = template
        .get_mut("spec")
        .map(Value::take)
        .filter(|s| !s.is_null())
        .unwrap_or_else(|| json!({}));
    // Built as a map: `json!` would serialize (copy) the spec it is given.
    let mut pod = Map::new();
    pod.insert("apiVersion".into(), "v1".into());
    pod.insert("kind".into(), "Pod".into());
    pod.insert("metadata".into(), Value::Object(metadata));
    pod.insert("spec".into(), spec);
    Value::Object(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_from_template(object: &Value) -> Option<Value> {
        Some(pod_of_template(object, pod_template(object)?.clone()))
    }

    fn pod_spec() -> Value {
        json!({"containers": [{"name": "train", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]})
    }

    #[test]
    fn builds_pods_from_every_controller() {
        let template = json!({"metadata": {"labels": {"app": "web"}}, "spec": pod_spec()});
        for kind in [
            "Deployment",
            "StatefulSet",
            "DaemonSet",
            "ReplicaSet",
            "Job",
        ] {
            let api = if kind == "Job" { "batch/v1" } else { "apps/v1" };
            let obj = json!({"apiVersion": api, "kind": kind,
                "metadata": {"name": "web", "namespace": "ml", "labels": {"owner": "x"}},
                "spec": {"template": template}});
            let pod = pod_from_template(&obj).unwrap();
            assert_eq!(pod["kind"], "Pod", "{kind}");
            assert_eq!(pod["metadata"]["namespace"], "ml");
            assert_eq!(pod["metadata"]["labels"], json!({"app": "web"}));
            assert_eq!(pod["spec"], pod_spec());
        }
        let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"jobTemplate": {"spec": {"template": template}}}});
        assert_eq!(pod_from_template(&cron).unwrap()["spec"], pod_spec());
    }

    #[test]
    fn template_changes_are_told_from_other_updates() {
        let deployment = |replicas: i64, labels: Value, image: &str| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "labels": labels, "finalizers": ["example.com/keep"]},
                "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": image}]}}}})
        };
        let old = deployment(2, json!({"team": "a"}), "vllm/vllm-openai:v0.6.3");
        let scaled = deployment(0, json!({"team": "b"}), "vllm/vllm-openai:v0.6.3");
        let new_image = deployment(2, json!({"team": "a"}), "vllm/vllm-openai:v0.6.4");
        assert!(!template_changed(&scaled, Some(&old)));
        assert!(template_changed(&new_image, Some(&old)));
        assert!(template_changed(&old, None));
        let cron = |schedule: &str, image: &str| {
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
                "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec":
                    {"containers": [{"name": "job", "image": image}]}}}}}})
        };
        let old = cron("0 2 * * *", "batch:1");
        assert!(!template_changed(&cron("0 3 * * *", "batch:1"), Some(&old)));
        assert!(template_changed(&cron("0 2 * * *", "batch:2"), Some(&old)));
    }

    #[test]
    fn other_objects_have_no_pod() {
        assert_eq!(
            pod_from_template(&json!({"apiVersion": "v1", "kind": "Pod", "spec": pod_spec()})),
            None
        );
        assert_eq!(
            pod_from_template(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {}})),
            None
        );
        assert_eq!(pod_from_template(&json!("x")), None);
        // A Deployment of another API group is not the apps Deployment.
        let other = json!({"apiVersion": "example.com/v1", "kind": "Deployment",
            "spec": {"template": {"spec": pod_spec()}}});
        assert_eq!(pod_from_template(&other), None);
        assert_eq!(super::pod_spec(&other), None);
    }

    #[test]
    fn pod_specs_of_pods_templates_and_pod_templates() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"a": "b"}}, "spec": pod_spec()});
        assert_eq!(super::pod_spec(&pod), Some(&pod_spec()));
        assert_eq!(pod_metadata(&pod).unwrap()["labels"]["a"], "b");
        let pt = json!({"apiVersion": "v1", "kind": "PodTemplate",
            "template": {"metadata": {"annotations": {"x": "y"}}, "spec": pod_spec()}});
        assert_eq!(super::pod_spec(&pt), Some(&pod_spec()));
        assert_eq!(pod_metadata(&pt).unwrap()["annotations"]["x"], "y");
        // A PodTemplate makes no pods, so pod policies do not judge it.
        assert_eq!(pod_template(&pt), None);
        let old = json!({"apiVersion": "extensions/v1beta1", "kind": "Deployment",
            "spec": {"template": {"spec": pod_spec()}}});
        assert!(pod_template(&old).is_some());
        assert_eq!(
            template_kind("batch", "CronJob").unwrap().template,
            "/spec/jobTemplate/spec/template"
        );
        assert_eq!(template_kind("example.com", "CronJob"), None);
    }

    #[test]
    fn the_controller_uid_is_the_controlling_owners() {
        let pod = json!({"metadata": {"ownerReferences": [
            {"kind": "Node", "uid": "n-1"},
            {"kind": "ReplicaSet", "uid": "rs-1", "controller": true}
        ]}});
        assert_eq!(controller_uid(&pod), Some("rs-1"));
        let owned = json!({"metadata": {"ownerReferences": [
            {"kind": "ReplicaSet", "uid": "rs-1", "controller": false}
        ]}});
        assert_eq!(controller_uid(&owned), None);
        assert_eq!(controller_uid(&json!({"metadata": {}})), None);
    }
}
