//! Pod controllers: the pod a Deployment, Job, CronJob... would create.
use serde_json::{json, Map, Value};

/// The pod template inside a controller object, if `object` is one of the
/// controllers whose pods policies judge: Deployment, StatefulSet,
/// DaemonSet, ReplicaSet, ReplicationController, Job (`spec.template`) or
/// CronJob (`spec.jobTemplate.spec.template`).
pub fn pod_template(object: &Value) -> Option<&Value> {
    let api = object.get("apiVersion")?.as_str()?;
    let kind = object.get("kind")?.as_str()?;
    let pointer = match (api, kind) {
        (
            "apps/v1" | "apps/v1beta1" | "apps/v1beta2" | "extensions/v1beta1",
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet",
        ) => "/spec/template",
        ("v1", "ReplicationController") => "/spec/template",
        ("batch/v1", "Job") => "/spec/template",
        ("batch/v1" | "batch/v1beta1", "CronJob") => "/spec/jobTemplate/spec/template",
        _ => return None,
    };
    object.pointer(pointer).filter(|t| t.is_object())
}

/// A Pod built from the template of a pod controller: the template's labels
/// and annotations, the controller's name and namespace, and the template's
/// spec. `None` when `object` is not a controller or has no template.
pub fn pod_from_template(object: &Value) -> Option<Value> {
    let template = pod_template(object)?;
    let mut metadata = Map::new();
    if let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str) {
        metadata.insert("name".into(), json!(name));
    }
    if let Some(ns) = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        metadata.insert("namespace".into(), json!(ns));
    }
    for key in ["labels", "annotations"] {
        if let Some(v) = template.pointer(&format!("/metadata/{key}")) {
            metadata.insert(key.into(), v.clone());
        }
    }
    Some(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": Value::Object(metadata),
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_spec() -> Value {
        json!({"containers": [{"name": "train", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]})
    }

    #[test]
    fn builds_pods_from_every_controller() {
        let template = json!({"metadata": {"labels": {"app": "web"}}, "spec": pod_spec()});
        for (api, kind) in [
            ("apps/v1", "Deployment"),
            ("apps/v1", "StatefulSet"),
            ("apps/v1", "DaemonSet"),
            ("apps/v1", "ReplicaSet"),
            ("batch/v1", "Job"),
        ] {
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
    }
}
