//! Hiding GPUs from containers that ask for none:
//! `NVIDIA_VISIBLE_DEVICES=void` pinned in their `env`, which wins over
//! `envFrom` and the image's own environment (KAI Scheduler does the same).
//! Pinned on the containers of a GPU pod that ask for no GPU, on the debug
//! containers added to a pod bound for GPU nodes, and (hidden by default)
//! on the containers of a pod that asks for no GPU but can land on GPU
//! nodes.
//! Idempotent: a container that names the variable in its `env` is left as
//! it is, whatever the value: an explicit entry is the user's, and the pin
//! never overwrites it (a value that names GPUs is denied by
//! `gpu-visible-devices-leak`, never rewritten).
use crate::gpu::visibility::{needs_hiding, ContainerAccess, Reach, HIDDEN, VISIBLE_DEVICES};
use crate::k8s::json::{items, str_at, Pointer};
use crate::k8s::patch::{Patch, ShapeError};
use json_patch::PatchOperation;
use serde_json::{json, Value};

const FIELDS: [(&str, &str); 3] = [
    ("initContainers", "initContainer"),
    ("containers", "container"),
    ("ephemeralContainers", "ephemeralContainer"),
];

/// The operations that pin the variable on every container of `pod` whose
/// access says it needs hiding; `only_new_ephemeral_of`, when given (the
/// `pods/ephemeralcontainers` subresource), limits them to the ephemeral
/// containers that pod (the old object) does not have yet.
pub fn hide_unrequested(
    pod: &Value,
    access: &[ContainerAccess],
    only_new_ephemeral_of: Option<&Value>,
) -> Result<Vec<PatchOperation>, ShapeError> {
    let existing: Vec<&str> = only_new_ephemeral_of
        .map(|old| {
            items(old.at("/spec/ephemeralContainers"))
                .map(|c| str_at(c, "/name"))
                .collect()
        })
        .unwrap_or_default();
    pin(pod, |field, container| {
        if only_new_ephemeral_of.is_some() && field != "ephemeralContainers" {
            return false;
        }
        let name = str_at(container, "/name");
        !existing.contains(&name) && access_of(access, field, name).is_some_and(needs_hiding)
    })
}

/// The operations that hide GPUs by default: the variable pinned on every
/// container and init container of `pod` (a pod that asks for no GPU but
/// can land on GPU nodes) that asks for no GPU and names the variable
/// nowhere in its `env`, unless its image is GPU infrastructure
/// (`infrastructure_image`): such a container is judged, not silently
/// blinded.
pub fn hide_by_default(
    pod: &Value,
    access: &[ContainerAccess],
    infrastructure_image: impl Fn(&str) -> bool,
) -> Result<Vec<PatchOperation>, ShapeError> {
    pin(pod, |field, container| {
        field != "ephemeralContainers"
            && !infrastructure_image(str_at(container, "/image"))
            && access_of(access, field, str_at(container, "/name")).is_some_and(|a| {
                !a.asks_gpu
                    && !a.hidden
                    && !a
                        .reaches
                        .iter()
                        .any(|r| matches!(r, Reach::Env | Reach::EnvValueFrom))
            })
    })
}

fn access_of<'a>(
    access: &'a [ContainerAccess],
    field: &str,
    name: &str,
) -> Option<&'a ContainerAccess> {
    let kind = FIELDS.iter().find(|(f, _)| *f == field)?.1;
    access.iter().find(|a| a.kind == kind && a.name == name)
}

/// `NVIDIA_VISIBLE_DEVICES=void` appended to the `env` of each container
/// `hide(field, container)` picks.
fn pin(
    pod: &Value,
    hide: impl Fn(&str, &Value) -> bool,
) -> Result<Vec<PatchOperation>, ShapeError> {
    let mut patch = Patch::new(pod);
    for (field, _) in FIELDS {
        for (index, container) in items(pod.get("spec").and_then(|s| s.get(field))).enumerate() {
            if hide(field, container) {
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
        let access = pod_access(spec, None, context(true), gpu);
        hide_unrequested(pod, &access, old).unwrap()
    }

    /// A pod bound for GPU nodes that asks for GPUs or not.
    fn context(asks_gpu: bool) -> PodContext {
        PodContext {
            asks_gpu,
            bound_for_gpu_nodes: true,
            debug_hidden: true,
        }
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
        let env = |path: &str| patched.at(path).cloned().unwrap_or(Value::Null);
        // The GPU container is left alone; an explicit value is judged, not
        // rewritten.
        for case in [
            json!(["/spec/initContainers/0/env", [{"name": VISIBLE_DEVICES, "value": "void"}]]),
            json!(["/spec/containers/0/env", null]),
            json!(["/spec/containers/1/env", [{"name": "A", "value": "1"}, {"name": VISIBLE_DEVICES, "value": "void"}]]),
            json!(["/spec/containers/2/env", [{"name": VISIBLE_DEVICES}]]),
            json!(["/spec/containers/3/env", [{"name": VISIBLE_DEVICES, "value": "all"}]]),
        ] {
            let path = case[0].as_str().unwrap();
            assert_eq!(env(path), case[1], "{path}");
        }
        let why = "a second pass changes nothing";
        assert!(ops(&patched, None).is_empty(), "{why}");
    }

    #[test]
    fn on_the_subresource_only_new_debug_containers_are_pinned() {
        let old = json!({"spec": {
            "containers": [{"name": "train"}, {"name": "side"}],
            "ephemeralContainers": [{"name": "old-debug", "image": "busybox"}]}});
        let mut pod = old.clone();
        let debugger = json!({"name": "debugger", "image": "nvidia/cuda:12.4.1-base"});
        pod["spec"]["ephemeralContainers"] =
            json!([old["spec"]["ephemeralContainers"][0], debugger]);
        let patched = apply(&pod, ops(&pod, Some(&old)));
        let void = json!([{"name": VISIBLE_DEVICES, "value": "void"}]);
        assert_eq!(patched["spec"]["ephemeralContainers"][1]["env"], void);
        assert_eq!(patched["spec"]["ephemeralContainers"][0].get("env"), None);
        assert_eq!(patched["spec"]["containers"][1].get("env"), None);
    }

    #[test]
    fn hidden_by_default_except_gpu_containers_explicit_entries_and_infrastructure() {
        let pod = json!({"spec": {
        "initContainers": [{"name": "prepull", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}],
        "containers": [
            {"name": "agent", "image": "fluent/fluent-bit:3.1", "envFrom": [{"secretRef": {"name": "creds"}}]},
            {"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"},
            {"name": "leak", "env": [{"name": VISIBLE_DEVICES, "value": "all"}]},
            {"name": "from", "env": [{"name": VISIBLE_DEVICES, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
            {"name": "launcher", "env": [{"name": VISIBLE_DEVICES, "value": ""}]}
        ]}});
        let context = context(false);
        let access = pod_access(&pod["spec"], None, context, |_, _| false);
        let infrastructure = |image: &str| image.starts_with("nvcr.io/nvidia/k8s-device-plugin");
        let hidden = hide_by_default(&pod, &access, infrastructure).unwrap();
        let patched = apply(&pod, hidden);
        let void = json!([{"name": VISIBLE_DEVICES, "value": "void"}]);
        assert_eq!(patched["spec"]["initContainers"][0]["env"], void);
        assert_eq!(patched["spec"]["containers"][0]["env"], void);
        let plugin = &patched["spec"]["containers"][1];
        assert_eq!(plugin.get("env"), None, "infrastructure image");
        for (i, original) in [(2, "leak"), (3, "from"), (4, "launcher")] {
            assert_eq!(
                patched["spec"]["containers"][i]["env"], pod["spec"]["containers"][i]["env"],
                "{original}: an explicit entry is never overwritten"
            );
        }
        let again = pod_access(&patched["spec"], None, context, |_, _| false);
        let twice = hide_by_default(&patched, &again, infrastructure).unwrap();
        assert!(twice.is_empty());
    }
}
