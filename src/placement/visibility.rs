//! Hiding GPUs from the containers of a GPU pod that ask for none:
//! `NVIDIA_VISIBLE_DEVICES=void` pinned in their `env`, which wins over
//! `envFrom` and the image's own environment (KAI Scheduler does the same).
//! Idempotent: a container that names the variable in its `env` is left as
//! it is, whatever the value (a value that names GPUs is denied by
//! `gpu-visible-devices-leak`, never rewritten).
use crate::gpu::visibility::{needs_hiding, ContainerAccess, HIDDEN, VISIBLE_DEVICES};
use crate::k8s::json::{items, str_at};
use crate::k8s::patch::{Patch, ShapeError};
use json_patch::PatchOperation;
use serde_json::{json, Value};

/// The operations that pin the variable on every container of `pod` whose
/// access says it needs hiding; `only_new_ephemeral_of`, when given (the
/// `pods/ephemeralcontainers` subresource), limits them to the ephemeral
/// containers that pod (the old object) does not have yet.
pub fn hide_unrequested(
    pod: &Value,
    access: &[ContainerAccess],
    only_new_ephemeral_of: Option<&Value>,
) -> Result<Vec<PatchOperation>, ShapeError> {
    let mut patch = Patch::new(pod);
    let fields = [
        ("initContainers", "initContainer"),
        ("containers", "container"),
        ("ephemeralContainers", "ephemeralContainer"),
    ];
    for (field, kind) in fields {
        if only_new_ephemeral_of.is_some() && kind != "ephemeralContainer" {
            continue;
        }
        let existing: Vec<&str> = only_new_ephemeral_of
            .map(|old| {
                items(old.pointer("/spec/ephemeralContainers"))
                    .map(|c| str_at(c, "/name"))
                    .collect()
            })
            .unwrap_or_default();
        for (index, container) in items(pod.pointer(&format!("/spec/{field}"))).enumerate() {
            let name = str_at(container, "/name");
            if existing.contains(&name) {
                continue;
            }
            let hide = access
                .iter()
                .any(|a| a.kind == kind && a.name == name && needs_hiding(a));
            if hide {
                let index = index.to_string();
                patch.append(
                    &["spec", field, &index, "env"],
                    vec![json!({"name": VISIBLE_DEVICES, "value": HIDDEN})],
                )?;
            }
        }
    }
    Ok(patch.into_operations())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::visibility::{pod_access, PodContext};

    fn ops(pod: &Value, old: Option<&Value>) -> Vec<PatchOperation> {
        let spec = &pod["spec"];
        let gpu = |_: &str, name: &str| name == "train";
        let context = PodContext {
            asks_gpu: true,
            bound_for_gpu_nodes: true,
            debug_hidden: true,
        };
        let access = pod_access(spec, None, context, gpu);
        hide_unrequested(pod, &access, old).unwrap()
    }

    fn apply(pod: &Value, ops: Vec<PatchOperation>) -> Value {
        let mut out = pod.clone();
        json_patch::patch(&mut out, &json_patch::Patch(ops)).unwrap();
        out
    }

    #[test]
    fn sidecars_of_a_gpu_pod_get_void_once() {
        let pod = json!({"spec": {
        "initContainers": [{"name": "fetch", "image": "busybox"}],
        "containers": [
            {"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3"},
            {"name": "log", "image": "fluent-bit", "env": [{"name": "A", "value": "1"}]},
            {"name": "launcher", "env": [{"name": VISIBLE_DEVICES}]},
            {"name": "leak", "env": [{"name": VISIBLE_DEVICES, "value": "all"}]}
        ]}});
        let patched = apply(&pod, ops(&pod, None));
        let env = |path: &str| patched.pointer(path).cloned().unwrap_or(Value::Null);
        assert_eq!(
            env("/spec/initContainers/0/env"),
            json!([{"name": VISIBLE_DEVICES, "value": "void"}])
        );
        assert_eq!(
            env("/spec/containers/0/env"),
            Value::Null,
            "the GPU container"
        );
        assert_eq!(
            env("/spec/containers/1/env"),
            json!([{"name": "A", "value": "1"}, {"name": VISIBLE_DEVICES, "value": "void"}])
        );
        assert_eq!(
            env("/spec/containers/2/env"),
            json!([{"name": VISIBLE_DEVICES}])
        );
        assert_eq!(
            env("/spec/containers/3/env"),
            json!([{"name": VISIBLE_DEVICES, "value": "all"}]),
            "an explicit value is judged, not rewritten"
        );
        assert!(
            ops(&patched, None).is_empty(),
            "a second pass changes nothing"
        );
    }

    #[test]
    fn on_the_subresource_only_new_debug_containers_are_pinned() {
        let old = json!({"spec": {
            "containers": [{"name": "train"}, {"name": "side"}],
            "ephemeralContainers": [{"name": "old-debug", "image": "busybox"}]}});
        let mut pod = old.clone();
        pod["spec"]["ephemeralContainers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "debugger", "image": "nvidia/cuda:12.4.1-base"}));
        let patched = apply(&pod, ops(&pod, Some(&old)));
        assert_eq!(
            patched["spec"]["ephemeralContainers"][1]["env"],
            json!([{"name": VISIBLE_DEVICES, "value": "void"}])
        );
        assert_eq!(patched["spec"]["ephemeralContainers"][0].get("env"), None);
        assert_eq!(patched["spec"]["containers"][1].get("env"), None);
    }
}
