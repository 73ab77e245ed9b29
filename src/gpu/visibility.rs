//! Which GPUs each container of a pod can reach, and why: the device
//! visibility model the GPU boundary policies judge (see
//! docs/threat-model.md).
//!
//! The device plugin gives a container the GPUs the scheduler counted for
//! it. Everything else that can hand a container GPU devices on a node
//! whose default runtime is NVIDIA's (AKS GPU nodes) is read here, once:
//!
//! - `NVIDIA_VISIBLE_DEVICES` in the container's `env`: its last entry
//!   decides. An empty value, `void` or `none` hides every GPU and is never
//!   a leak (MPI launchers and sharing schedulers use them); any other
//!   value, or a value read from elsewhere (`valueFrom`), reaches GPUs the
//!   scheduler did not count. On a GPU container too: kubelet puts the
//!   pod's environment after the device plugin's, so the pod's value wins.
//! - `envFrom` a ConfigMap or Secret whose keys may include the variable
//!   (no prefix, or a prefix of the name): unread here, so it may carry it.
//! - the image: CUDA base images set `NVIDIA_VISIBLE_DEVICES=all` in their
//!   image config, and a container of a pod on a GPU node whose own
//!   environment says nothing inherits it; an image not known to be one of
//!   them may still be built on one.
//! - pod annotations naming GPU devices that the node injects outside the
//!   device plugin: `cdi.k8s.io/*` (the container runtime, every
//!   container), `nvidia.cdi.k8s.io/container.<name>` and its pod-wide
//!   forms (the NVIDIA Container Toolkit's NRI plugin), containerd's NRI
//!   device injector (`devices.nri.io/`, `cdi-devices.nri.io/` and their
//!   `noderesource.dev` twins); see [`super::injection`].
//! - mounts at `/var/run/nvidia-container-devices` (the device list the
//!   NVIDIA runtime reads in volume-mounts mode).
//! - `securityContext.privileged`: every device node of the node.
//!
//! Two of these are closed by `/mutate` rather than denied: a container
//! that asks for no GPU in a pod that does gets `NVIDIA_VISIBLE_DEVICES=void`
//! pinned in its `env` (which wins over `envFrom` and the image), unless it
//! already names the variable ([`needs_hiding`]).
use super::injection::{injections, Injection};
use crate::k8s::images;
use crate::k8s::json::{items, str_at, Pointer};
use serde::Serialize;
use serde_json::Value;

/// The variable the NVIDIA container runtime reads.
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

/// The value `/mutate` pins on containers that must see no GPU.
pub const HIDDEN: &str = "void";

/// Values of `NVIDIA_VISIBLE_DEVICES` that give a container no GPU.
pub const HIDING_VALUES: [&str; 3] = ["", "void", "none"];

/// Where the NVIDIA runtime reads the device list in volume-mounts mode
/// (`/var/run` is `/run` in most images, so both are read).
pub const DEVICE_LIST_DIRS: [&str; 2] = [
    "/var/run/nvidia-container-devices",
    "/run/nvidia-container-devices",
];

/// Image repositories, and repository prefixes ending in `/`, whose image
/// config sets `NVIDIA_VISIBLE_DEVICES` (CUDA base images and what NVIDIA
/// and the common frameworks build on them).
pub const GPU_IMAGES: &[&str] = &[
    "nvcr.io/nvidia/",
    "nvcr.io/nim/",
    "docker.io/nvidia/",
    "docker.io/pytorch/pytorch",
    "docker.io/tensorflow/tensorflow",
    "docker.io/vllm/vllm-openai",
    "docker.io/rayproject/ray-ml",
    "docker.io/huggingface/text-generation-inference",
    "ghcr.io/huggingface/text-generation-inference",
    "docker.io/ollama/ollama",
    "docker.io/rocm/",
    "mcr.microsoft.com/aks/kaito/",
];

/// Why a container can reach GPUs the scheduler did not count for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Reach {
    /// `NVIDIA_VISIBLE_DEVICES` set to a value that names GPUs.
    Env,
    /// `NVIDIA_VISIBLE_DEVICES` read from a ConfigMap, Secret or field.
    EnvValueFrom,
    /// `envFrom` that may carry the variable, in a container that asks for
    /// no GPU of a pod bound for GPU nodes.
    EnvFrom,
    /// An image known to set the variable, in a container that asks for no
    /// GPU of a pod bound for GPU nodes.
    Image,
    /// An image not known to be clean, in a container that asks for no GPU
    /// of a pod that asks for GPUs (the NVIDIA runtime is the default on
    /// its nodes).
    RuntimeDefault,
    /// A pod annotation naming GPU devices that the runtime or an NRI
    /// plugin injects into the container (`cdi.k8s.io/`,
    /// `nvidia.cdi.k8s.io/`, `devices.nri.io/`...).
    Cdi,
    /// A mount at the NVIDIA runtime's device list.
    DeviceListMount,
    /// A privileged container of a pod bound for GPU nodes.
    Privileged,
}

impl Reach {
    /// How a denial names it.
    pub fn describe(self) -> &'static str {
        match self {
            Reach::Env => "sets NVIDIA_VISIBLE_DEVICES to GPUs",
            Reach::EnvValueFrom => "reads NVIDIA_VISIBLE_DEVICES from valueFrom",
            Reach::EnvFrom => "may get NVIDIA_VISIBLE_DEVICES through envFrom",
            Reach::Image => "runs an image that sets NVIDIA_VISIBLE_DEVICES",
            Reach::RuntimeDefault => "runs an image that may set NVIDIA_VISIBLE_DEVICES",
            Reach::Cdi => "gets GPU devices from a device-injection annotation",
            Reach::DeviceListMount => "mounts the NVIDIA device list",
            Reach::Privileged => "is privileged",
        }
    }
}

/// What the pod as a whole says about where it runs, as far as device
/// visibility cares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodContext {
    /// Some container asks for a GPU (so the pod runs on GPU nodes, and
    /// `/mutate` hides GPUs from its other containers).
    pub asks_gpu: bool,
    /// The pod can run on GPU nodes at all: it asks for GPUs, a sharing
    /// scheduler gives it part of one, or it tolerates or selects GPU nodes.
    pub bound_for_gpu_nodes: bool,
    /// The debug containers `kubectl debug` adds to this pod are sent to
    /// `/mutate`, which hides GPUs from them: the pod asks for GPUs or
    /// tolerates a GPU taint (or every taint), as the shipped mutating
    /// webhook routes them.
    pub debug_hidden: bool,
}

/// One container's access to GPU devices (`gpu.access[]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerAccess {
    pub name: String,
    /// `container`, `initContainer` or `ephemeralContainer`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The container asks for GPUs itself (resources or DRA claims).
    pub asks_gpu: bool,
    /// Its `env` hides every GPU (`NVIDIA_VISIBLE_DEVICES` empty, `void`
    /// or `none`).
    pub hidden: bool,
    /// Why it can reach GPUs the scheduler did not count for it; empty
    /// when it cannot.
    pub reaches: Vec<Reach>,
    /// A GPU container with `envFrom` that may carry the variable: what it
    /// sees depends on an object the webhook does not read.
    pub unverified: bool,
    /// The annotations that inject GPU devices into this container (reach
    /// `cdi`), each with what it names.
    pub injected: Vec<Injection>,
}

impl ContainerAccess {
    /// The container can reach GPUs it was not given.
    pub fn leaks(&self) -> bool {
        !self.reaches.is_empty()
    }

    /// What it reaches them through, for a message.
    pub fn describe(&self) -> String {
        let reasons: Vec<&str> = self.reaches.iter().map(|r| r.describe()).collect();
        reasons.join(", ")
    }
}

/// What the container's own `env` says of the variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EnvSetting {
    Absent,
    Hides,
    Names,
    ValueFrom,
}

fn env_setting(container: &Value) -> EnvSetting {
    // Kubernetes keeps the last of repeated names.
    let Some(entry) = items(container.get("env"))
        .filter(|e| str_at(e, "/name") == VISIBLE_DEVICES)
        .last()
    else {
        return EnvSetting::Absent;
    };
    if entry.get("valueFrom").is_some_and(|v| !v.is_null()) {
        return EnvSetting::ValueFrom;
    }
    // No `value` (MPI launchers serialise `value: ""` this way) is empty.
    let value = entry.get("value").and_then(Value::as_str).unwrap_or("");
    if HIDING_VALUES.contains(&value) {
        EnvSetting::Hides
    } else {
        EnvSetting::Names
    }
}

/// Whether `envFrom` may put the variable in the container: a ConfigMap or
/// Secret source whose prefix (none, or a prefix of the name) lets one of
/// its keys become `NVIDIA_VISIBLE_DEVICES`.
fn env_from_may_carry(container: &Value) -> bool {
    items(container.get("envFrom")).any(|source| {
        let prefix = str_at(source, "/prefix");
        VISIBLE_DEVICES.starts_with(prefix)
            && (source.get("configMapRef").is_some() || source.get("secretRef").is_some())
    })
}

/// Whether the image is known to set the variable in its config.
pub fn is_gpu_image(image: &str) -> bool {
    let repository = images::repository(image);
    !repository.is_empty()
        && GPU_IMAGES
            .iter()
            .any(|known| match known.strip_suffix('/') {
                Some(prefix) => repository
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('/')),
                None => repository == *known,
            })
}

/// A mount path at or below one of the device-list directories, however
/// it is spelled (`//`, `/./`, a trailing `/`).
pub fn is_device_list_path(path: &str) -> bool {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    let normal = format!("/{}", parts.join("/"));
    DEVICE_LIST_DIRS.iter().any(|dir| {
        normal == *dir
            || normal
                .strip_prefix(dir)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

fn privileged(container: &Value) -> bool {
    container
        .at("/securityContext/privileged")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The access of one container (`kind` as in `gpu.containers[].type`),
/// whose own GPU request is `asks_gpu`.
pub fn container_access(
    container: &Value,
    kind: &'static str,
    asks_gpu: bool,
    pod: PodContext,
    injected: Vec<Injection>,
) -> ContainerAccess {
    let setting = env_setting(container);
    let mut reaches = Vec::new();
    match setting {
        EnvSetting::Names => reaches.push(Reach::Env),
        EnvSetting::ValueFrom => reaches.push(Reach::EnvValueFrom),
        EnvSetting::Hides => {}
        EnvSetting::Absent => {
            // The device plugin's own value wins over the image's; nothing
            // to inherit for a GPU container. A debug container joins a pod
            // already on its node: it counts where /mutate hides GPUs from
            // it (so the validating side never sees it without the pin).
            let bound = if kind == EPHEMERAL {
                pod.debug_hidden
            } else {
                pod.bound_for_gpu_nodes
            };
            let hideable = !asks_gpu && bound;
            if hideable && env_from_may_carry(container) {
                reaches.push(Reach::EnvFrom);
            }
            let image = str_at(container, "/image");
            if hideable && is_gpu_image(image) {
                reaches.push(Reach::Image);
            } else if !asks_gpu && (pod.asks_gpu || (kind == EPHEMERAL && pod.debug_hidden)) {
                reaches.push(Reach::RuntimeDefault);
            }
        }
    }
    if !injected.is_empty() {
        reaches.push(Reach::Cdi);
    }
    if items(container.get("volumeMounts")).any(|m| is_device_list_path(str_at(m, "/mountPath"))) {
        reaches.push(Reach::DeviceListMount);
    }
    if pod.bound_for_gpu_nodes && privileged(container) {
        reaches.push(Reach::Privileged);
    }
    ContainerAccess {
        name: str_at(container, "/name").to_string(),
        kind,
        asks_gpu,
        hidden: setting == EnvSetting::Hides,
        reaches,
        unverified: asks_gpu && setting == EnvSetting::Absent && env_from_may_carry(container),
        injected,
    }
}

const EPHEMERAL: &str = "ephemeralContainer";

/// Every container of a pod spec (init, regular, ephemeral, in that order)
/// with its access. `asks_gpu(kind, name)` says whether that container
/// asks for GPUs itself.
pub fn pod_access(
    spec: &Value,
    annotations: Option<&Value>,
    pod: PodContext,
    asks_gpu: impl Fn(&str, &str) -> bool,
) -> Vec<ContainerAccess> {
    let injections = injections(annotations);
    [
        ("initContainers", "initContainer"),
        ("containers", "container"),
        ("ephemeralContainers", EPHEMERAL),
    ]
    .into_iter()
    .flat_map(|(field, kind)| items(spec.get(field)).map(move |c| (c, kind)))
    .map(|(c, kind)| {
        let name = str_at(c, "/name");
        let asks = asks_gpu(kind, name);
        let injected = injections
            .iter()
            .filter(|(scope, _)| scope.reaches(name))
            .map(|(_, i)| i.clone())
            .collect();
        container_access(c, kind, asks, pod, injected)
    })
    .collect()
}

/// Whether `/mutate` pins `NVIDIA_VISIBLE_DEVICES=void` on this container:
/// it asks for no GPU, names the variable nowhere in its `env`, and its pod
/// asks for GPUs (or, for a debug container, is bound for GPU nodes).
pub fn needs_hiding(access: &ContainerAccess) -> bool {
    !access.asks_gpu
        && !access.hidden
        && access
            .reaches
            .iter()
            .any(|r| matches!(r, Reach::EnvFrom | Reach::Image | Reach::RuntimeDefault))
        && !access
            .reaches
            .iter()
            .any(|r| matches!(r, Reach::Env | Reach::EnvValueFrom))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GPU_POD: PodContext = PodContext {
        asks_gpu: true,
        bound_for_gpu_nodes: true,
        debug_hidden: true,
    };
    const CPU_POD: PodContext = PodContext {
        asks_gpu: false,
        bound_for_gpu_nodes: false,
        debug_hidden: false,
    };
    /// A pod that asks for no GPU but can land on GPU nodes.
    const BOUND_CPU_POD: PodContext = PodContext {
        bound_for_gpu_nodes: true,
        debug_hidden: true,
        ..CPU_POD
    };

    fn access(container: Value, asks_gpu: bool, pod: PodContext) -> ContainerAccess {
        container_access(&container, "container", asks_gpu, pod, Vec::new())
    }

    #[test]
    fn empty_void_and_none_hide_and_the_last_entry_decides() {
        for value in [json!(""), json!("void"), json!("none")] {
            let c = json!({"name": "c", "env": [{"name": VISIBLE_DEVICES, "value": value}]});
            let a = access(c, false, GPU_POD);
            assert!(a.hidden && !a.leaks(), "{value}");
        }
        // MPI launchers: the entry without a value.
        let launcher = json!({"name": "launcher", "image": "mpioperator/openmpi", "env": [{"name": VISIBLE_DEVICES}]});
        let launcher = access(launcher, false, GPU_POD);
        assert!(launcher.hidden && !launcher.leaks());
        let last = json!({"name": "c", "env": [
            {"name": VISIBLE_DEVICES, "value": "void"},
            {"name": VISIBLE_DEVICES, "value": "all"}]});
        let last = access(last, false, CPU_POD);
        assert_eq!(last.reaches, [Reach::Env]);
        let why = "an explicit value is never overridden";
        assert!(!needs_hiding(&last), "{why}");
    }

    #[test]
    fn a_gpu_container_naming_gpus_leaks_and_valuefrom_is_unverifiable() {
        let own = json!({"name": "train", "env": [{"name": VISIBLE_DEVICES, "value": "all"}]});
        assert_eq!(access(own, true, GPU_POD).reaches, [Reach::Env]);
        let from = json!({"name": "c", "env": [{"name": VISIBLE_DEVICES, "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k"}}}]});
        assert_eq!(access(from, true, GPU_POD).reaches, [Reach::EnvValueFrom]);
    }

    #[test]
    fn env_from_and_images_count_in_gpu_bound_pods_only() {
        let sidecar = json!({"name": "s", "image": "busybox", "envFrom": [{"configMapRef": {"name": "cfg"}}]});
        let a = access(sidecar.clone(), false, GPU_POD);
        assert_eq!(a.reaches, [Reach::EnvFrom, Reach::RuntimeDefault]);
        assert!(needs_hiding(&a));
        assert!(!access(sidecar.clone(), false, CPU_POD).leaks());
        // A prefix that cannot make the name.
        let prefixed = json!({"name": "s", "image": "busybox", "envFrom": [{"prefix": "APP_", "configMapRef": {"name": "cfg"}}]});
        let prefixed = access(prefixed, false, GPU_POD);
        assert_eq!(prefixed.reaches, [Reach::RuntimeDefault]);
        let tricky =
            json!({"name": "s", "envFrom": [{"prefix": "NVIDIA_", "secretRef": {"name": "s"}}]});
        let tricky = access(tricky, false, GPU_POD);
        assert!(tricky.reaches.contains(&Reach::EnvFrom));
        // The GPU container itself: unverified, not a leak.
        let own = access(sidecar, true, GPU_POD);
        assert!(!own.leaks() && own.unverified);

        let cuda = json!({"name": "agent", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"});
        let image = access(cuda.clone(), false, BOUND_CPU_POD);
        assert_eq!(image.reaches, [Reach::Image]);
        let unknown = json!({"name": "agent", "image": "fluent/fluent-bit"});
        let unknown = access(unknown, false, BOUND_CPU_POD);
        let why = "an unknown image of a pod that asks no GPU is not judged";
        assert!(!unknown.leaks(), "{why}");
        assert!(!access(cuda.clone(), true, GPU_POD).leaks());
        assert!(!access(cuda, false, CPU_POD).leaks());
    }

    #[test]
    fn gpu_images_are_matched_by_repository() {
        for image in [
            "nvcr.io/nvidia/pytorch:24.05-py3",
            "nvidia/cuda:12.2.0-runtime-ubuntu22.04",
            "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
        ] {
            assert!(is_gpu_image(image), "{image}");
        }
        for image in [
            "nvcr.io/nvidiax/thing",
            "example.com/nvcr.io/nvidia/cuda",
            "busybox",
            "",
        ] {
            assert!(!is_gpu_image(image), "{image}");
        }
    }

    #[test]
    fn device_list_mounts_are_found_however_spelled() {
        for path in [
            "/var/run/nvidia-container-devices",
            "/var/run/nvidia-container-devices/all",
            "//var/run/./nvidia-container-devices/",
            "/run/nvidia-container-devices/GPU-1",
            "/var/x/../run/nvidia-container-devices",
        ] {
            assert!(is_device_list_path(path), "{path}");
        }
        for path in ["/var/run/nvidia-container-devices-x", "/var/run", "/data"] {
            assert!(!is_device_list_path(path), "{path}");
        }
        let c = json!({"name": "c", "volumeMounts": [{"name": "v", "mountPath": "/var/run/nvidia-container-devices/all"}]});
        assert_eq!(access(c, true, GPU_POD).reaches, [Reach::DeviceListMount]);
    }

    #[test]
    fn cdi_annotations_naming_gpus_reach_every_container() {
        let gpu = json!({"cdi.k8s.io/x": "nvidia.com/gpu=all"});
        let mig = json!({"cdi.k8s.io/y": "vendor.com/nic=0, nvidia.com/mig-1g.10gb=0"});
        for (annotations, names_gpus) in [
            (&gpu, true),
            (&mig, true),
            (&json!({"cdi.k8s.io/y": "vendor.com/nic=0"}), false),
            (&json!({"other": "nvidia.com/gpu=all"}), false),
        ] {
            let injected = injections(Some(annotations));
            assert_eq!(!injected.is_empty(), names_gpus, "{annotations}");
        }
        let spec = json!({"containers": [{"name": "a"}, {"name": "b"}]});
        let all = pod_access(&spec, Some(&gpu), GPU_POD, |_, n| n == "a");
        assert!(all.iter().all(|c| c.reaches.contains(&Reach::Cdi)));
        assert_eq!(all[0].injected[0].annotation, "cdi.k8s.io/x");
    }

    #[test]
    fn nri_annotations_reach_the_containers_they_name() {
        let spec = json!({
            "initContainers": [{"name": "setup"}],
            "containers": [{"name": "probe"}, {"name": "app"}],
            "ephemeralContainers": [{"name": "debugger"}]
        });
        let by_name = json!({"nvidia.cdi.k8s.io/container.probe": "nvidia.com/gpu=all"});
        let all = pod_access(&spec, Some(&by_name), BOUND_CPU_POD, |_, _| false);
        let leaking: Vec<&str> = (all.iter().filter(|a| a.reaches.contains(&Reach::Cdi)))
            .map(|a| a.name.as_str())
            .collect();
        assert_eq!(leaking, ["probe"]);
        let named = &all[1].injected[0].named;
        assert_eq!(named, "nvidia.com/gpu=all (every GPU of the node)");
        // Pod-wide forms reach every container, the debug container too.
        for key in [
            "nvidia.cdi.k8s.io/pod",
            "nvidia.cdi.k8s.io/container.*",
            "cdi-devices.nri.io",
        ] {
            let a = json!({ key: "nvidia.com/gpu=0" });
            let all = pod_access(&spec, Some(&a), CPU_POD, |_, _| false);
            assert!(all.iter().all(|c| c.reaches == [Reach::Cdi]), "{key}");
        }
        // A GPU container is not let through: the device it names need not
        // be the one the device plugin gave it.
        let own = json!({"devices.nri.io/container.app": "- path: /dev/nvidia1\n  type: c\n  major: 195\n  minor: 1\n"});
        let all = pod_access(&spec, Some(&own), GPU_POD, |_, n| n == "app");
        assert_eq!(all[2].reaches, [Reach::Cdi]);
        assert!(!all[1].reaches.contains(&Reach::Cdi));
    }

    #[test]
    fn privileged_counts_where_the_pod_can_meet_gpus() {
        let c = json!({"name": "init", "securityContext": {"privileged": true}});
        let init = container_access(&c, "initContainer", false, GPU_POD, Vec::new());
        assert_eq!(init.reaches, [Reach::RuntimeDefault, Reach::Privileged]);
        assert!(!access(c, false, CPU_POD).leaks());
    }

    #[test]
    fn debug_containers_of_gpu_bound_pods_are_hidden() {
        let spec = json!({
            "containers": [{"name": "train", "image": "busybox"}],
            "ephemeralContainers": [{"name": "debugger", "image": "nvidia/cuda:12.4.1-base"}]
        });
        let bound = BOUND_CPU_POD;
        let all = pod_access(&spec, None, bound, |_, _| false);
        assert_eq!(all[1].kind, EPHEMERAL);
        assert_eq!(all[1].reaches, [Reach::Image]);
        assert!(needs_hiding(&all[1]));
        let plain = json!({"ephemeralContainers": [{"name": "d", "image": "busybox"}]});
        let plain = pod_access(&plain, None, bound, |_, _| false);
        assert_eq!(plain[0].reaches, [Reach::RuntimeDefault]);
        // A pod that selects GPU nodes but tolerates no GPU taint: its
        // debug containers are not sent to /mutate, and not judged so.
        let selecting = PodContext {
            debug_hidden: false,
            ..bound
        };
        assert!(!pod_access(&spec, None, selecting, |_, _| false)[1].leaks());
    }
}
