//! Pod annotations that make a node hand devices to containers outside the
//! device plugin: read once, resolved to the GPU devices they name, for the
//! device visibility model ([`super::visibility`], reach `cdi`).
//!
//! Who reads what (see docs/threat-model.md for the sources):
//!
//! | prefix | read by | scope | value |
//! |---|---|---|---|
//! | `cdi.k8s.io/` | the container runtime (containerd 1.7+, CRI-O) | every container | CDI names, comma-separated |
//! | `nvidia.cdi.k8s.io` | the NVIDIA Container Toolkit's NRI plugin (GPU Operator 25.10+ with CDI) | `/container.<name>`, `/container.*`, `/pod` or the bare key | CDI names, comma-separated |
//! | `cdi.nri.io` | NVIDIA's earlier NRI CDI injector | `/container.<name>`, `/pod` | CDI names, comma-separated |
//! | `cdi-devices.noderesource.dev`, `cdi-devices.nri.io` | containerd's NRI device injector | `/container.<name>`, `/pod` or the bare key | CDI names, a YAML list |
//! | `devices.noderesource.dev`, `devices.nri.io` | containerd's NRI device injector | `/container.<name>`, `/pod` or the bare key | device nodes, a YAML list of `path`, `type`, `major`, `minor` |
//!
//! A key of a scoped family that is not `container.<name>` is taken as
//! pod-wide (what the NVIDIA runtime's CDI mode does with any key under
//! its configured annotation prefixes). Where several annotations could
//! apply to one container, all of them count: what the most specific one
//! names is a subset of what they name together.
use serde::Serialize;
use serde_json::Value;

/// One annotation family: a key prefix and who acts on it.
#[derive(Clone, Copy, Debug)]
pub struct Family {
    /// The key itself, or what comes before its `/`.
    pub prefix: &'static str,
    /// Who injects the devices, for a message.
    pub reader: &'static str,
    /// `container.<name>` keys name one container.
    scoped: bool,
    /// The value lists device nodes, not CDI device names.
    device_nodes: bool,
}

const RUNTIME: &str = "the container runtime";
const NVIDIA_NRI: &str = "the NVIDIA Container Toolkit's NRI plugin";
const DEVICE_INJECTOR: &str = "containerd's NRI device injector";

/// Every family, in the order messages name them.
pub const FAMILIES: [Family; 7] = [
    Family {
        prefix: "cdi.k8s.io",
        reader: RUNTIME,
        scoped: false,
        device_nodes: false,
    },
    Family {
        prefix: "nvidia.cdi.k8s.io",
        reader: NVIDIA_NRI,
        scoped: true,
        device_nodes: false,
    },
    Family {
        prefix: "cdi.nri.io",
        reader: NVIDIA_NRI,
        scoped: true,
        device_nodes: false,
    },
    Family {
        prefix: "cdi-devices.noderesource.dev",
        reader: DEVICE_INJECTOR,
        scoped: true,
        device_nodes: false,
    },
    Family {
        prefix: "cdi-devices.nri.io",
        reader: DEVICE_INJECTOR,
        scoped: true,
        device_nodes: false,
    },
    Family {
        prefix: "devices.noderesource.dev",
        reader: DEVICE_INJECTOR,
        scoped: true,
        device_nodes: true,
    },
    Family {
        prefix: "devices.nri.io",
        reader: DEVICE_INJECTOR,
        scoped: true,
        device_nodes: true,
    },
];

/// The family of an annotation key: the prefix itself, or the prefix and a
/// `/`.
pub fn family(key: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| {
        key.strip_prefix(f.prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Whether `key` is an annotation some runtime or NRI plugin turns into
/// devices (the `gpu-relevant` matchCondition sends such pods).
pub fn is_injection_key(key: &str) -> bool {
    family(key).is_some()
}

/// Which containers an annotation reaches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Pod,
    Container(String),
}

impl Scope {
    fn of(key: &str, family: &Family) -> Scope {
        if !family.scoped {
            return Scope::Pod;
        }
        let rest = key[family.prefix.len()..].trim_start_matches('/');
        match rest.strip_prefix("container.") {
            // NVIDIA's plugin takes `container.*` for every container.
            Some("*") | None => Scope::Pod,
            Some(name) => Scope::Container(name.to_string()),
        }
    }

    /// Whether it reaches the container named `name`.
    pub fn reaches(&self, name: &str) -> bool {
        match self {
            Scope::Pod => true,
            Scope::Container(n) => n == name,
        }
    }
}

/// One annotation that names GPU devices (`gpu.access[].injected[]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Injection {
    /// The annotation's key.
    pub annotation: String,
    /// Who injects the devices.
    pub reader: &'static str,
    /// The GPU devices it names, as written (`nvidia.com/gpu=all`,
    /// `/dev/nvidia0`).
    pub devices: Vec<String>,
    /// What they resolve to: `every GPU`, `GPU 0`, `GPU GPU-3f2a...`,
    /// `MIG device 0:1`, ...; one per device.
    pub gpus: Vec<String>,
    /// Some device is every GPU of the node.
    pub all: bool,
    /// The devices and what they are, for a message:
    /// `nvidia.com/gpu=all (every GPU of the node)`.
    pub named: String,
}

/// Every annotation of `annotations` that names GPU devices, with the
/// containers it reaches.
pub fn injections(annotations: Option<&Value>) -> Vec<(Scope, Injection)> {
    let Some(map) = annotations.and_then(Value::as_object) else {
        return Vec::new();
    };
    map.iter()
        .filter_map(|(key, value)| {
            let family = family(key)?;
            let text = value.as_str()?;
            let named: Vec<(String, String)> = if family.device_nodes {
                device_nodes(text)
            } else {
                cdi_names(text)
                    .filter_map(|name| gpu_of_cdi_name(name).map(|g| (name.to_string(), g)))
                    .collect()
            };
            if named.is_empty() {
                return None;
            }
            let all = named.iter().any(|(_, g)| g == EVERY_GPU);
            let text = named
                .iter()
                .map(|(d, g)| format!("{d} ({g})"))
                .collect::<Vec<_>>()
                .join(", ");
            let (devices, gpus) = named.into_iter().unzip();
            Some((
                Scope::of(key, family),
                Injection {
                    annotation: key.clone(),
                    reader: family.reader,
                    devices,
                    gpus,
                    all,
                    named: text,
                },
            ))
        })
        .collect()
}

const EVERY_GPU: &str = "every GPU of the node";

/// The CDI device names of a value: comma-separated (CRI, NVIDIA's
/// plugin) or a YAML list, block or flow (containerd's device injector).
fn cdi_names(text: &str) -> impl Iterator<Item = &str> {
    text.split([',', '\n'])
        .map(|t| {
            t.trim()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
                .trim_start_matches('-')
                .trim()
                .trim_matches(|c| c == '"' || c == '\'')
                .trim()
        })
        .filter(|t| !t.is_empty())
}

/// What a CDI device name gives of GPUs, or None when it is no GPU: an
/// NVIDIA kind (`nvidia.com` or a subdomain, as the GPU Operator's
/// `management.nvidia.com`) of class `gpu`, `mig`, `mig-<profile>`,
/// `pgpu`, `vgpu` or `device` (the DRA driver's), or an AMD `gpu`.
pub fn gpu_of_cdi_name(name: &str) -> Option<String> {
    let (kind, device) = name.split_once('=')?;
    let (vendor, class) = kind.split_once('/')?;
    let of = |domain: &str| {
        vendor == domain
            || vendor
                .strip_suffix(domain)
                .is_some_and(|sub| sub.ends_with('.'))
    };
    let nvidia = of("nvidia.com")
        && (matches!(class, "gpu" | "mig" | "pgpu" | "vgpu" | "device")
            || class.starts_with("mig-"));
    let amd = of("amd.com") && class == "gpu";
    if !(nvidia || amd) {
        return None;
    }
    let device = device.trim();
    let mig_class = class == "mig" || class.starts_with("mig-");
    Some(if device == "all" {
        EVERY_GPU.to_string()
    } else if let Some(uuid) = device.strip_prefix("MIG-") {
        format!("MIG device MIG-{uuid}")
    } else if device.starts_with("GPU-") {
        format!("GPU {device}")
    } else if mig_class || device.contains(':') {
        format!("MIG device {}", device.trim_start_matches("mig"))
    } else if let Some(index) = device
        .strip_prefix("gpu")
        .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
    {
        format!("GPU {index}")
    } else if !device.is_empty() && device.bytes().all(|b| b.is_ascii_digit()) {
        format!("GPU {device}")
    } else {
        format!("GPU device {device}")
    })
}

/// NVIDIA's character device major number (`/dev/nvidia<minor>`; 254 and
/// 255 are `nvidia-modeset` and `nvidiactl`, which name no GPU).
const NVIDIA_MAJOR: i64 = 195;

/// The GPU device nodes of a device-injector value (a YAML list of
/// `path`, `type`, `major`, `minor`), with what each is.
fn device_nodes(text: &str) -> Vec<(String, String)> {
    let entries: Vec<Value> = match serde_yaml::from_str::<Value>(text) {
        Ok(Value::Array(list)) => list,
        Ok(one @ Value::Object(_)) => vec![one],
        // Not YAML the injector reads either; still say what it names.
        _ => text
            .lines()
            .filter_map(|l| l.split_once("path:"))
            .map(|(_, p)| serde_json::json!({"path": p.trim().trim_matches(|c| c == '"' || c == '\'')}))
            .collect(),
    };
    entries
        .iter()
        .filter_map(|e| {
            let path = e.get("path").and_then(Value::as_str).unwrap_or("");
            let number = |k: &str| {
                e.get(k).and_then(|v| {
                    v.as_i64()
                        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
                })
            };
            gpu_of_device_node(path, number("major"), number("minor"))
                .map(|g| (path.to_string(), g))
        })
        .collect()
}

/// What a device node is of GPUs: `/dev/nvidia<N>` (or NVIDIA's major
/// with a GPU's minor), `/dev/nvidia-caps/*` (MIG access), `/dev/dri/*`
/// and `/dev/kfd` (AMD GPUs); None for control nodes and anything else.
pub fn gpu_of_device_node(path: &str, major: Option<i64>, minor: Option<i64>) -> Option<String> {
    if let Some(index) = path
        .strip_prefix("/dev/nvidia")
        .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
    {
        return Some(format!("GPU {index}"));
    }
    if path.starts_with("/dev/nvidia-caps/") {
        return Some(format!("MIG access {path}"));
    }
    if path == "/dev/kfd" {
        return Some("every AMD GPU of the node".to_string());
    }
    if path.starts_with("/dev/dri/") {
        return Some(format!("GPU {path}"));
    }
    match (major, minor) {
        (Some(NVIDIA_MAJOR), Some(m)) if (0..254).contains(&m) => Some(format!("GPU {m}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(annotations: Value) -> Vec<(Scope, Injection)> {
        injections(Some(&annotations))
    }

    #[test]
    fn families_are_told_apart_by_prefix() {
        for key in [
            "cdi.k8s.io/gpu",
            "nvidia.cdi.k8s.io/container.probe",
            "nvidia.cdi.k8s.io",
            "cdi.nri.io/pod",
            "cdi-devices.nri.io/container.c",
            "cdi-devices.noderesource.dev",
            "devices.nri.io/pod",
            "devices.noderesource.dev/container.c",
        ] {
            assert!(is_injection_key(key), "{key}");
        }
        for key in [
            "x.cdi.k8s.io/gpu",
            "cdi.k8s.iox/gpu",
            "mounts.nri.io/pod",
            "devices.nri.iox",
            "gpu-fraction",
        ] {
            assert!(!is_injection_key(key), "{key}");
        }
        for prefix in ["cdi-devices.nri.io", "devices.nri.io"] {
            assert_eq!(family(&format!("{prefix}/pod")).unwrap().prefix, prefix);
        }
    }

    #[test]
    fn scopes_follow_each_plugin() {
        let scope = |k: &str| Scope::of(k, family(k).unwrap());
        let container = |name: &str| Scope::Container(name.into());
        let probe = scope("nvidia.cdi.k8s.io/container.probe");
        assert_eq!(probe, container("probe"));
        for pod_wide in [
            "nvidia.cdi.k8s.io/container.*",
            "nvidia.cdi.k8s.io/pod",
            "nvidia.cdi.k8s.io",
            "nvidia.cdi.k8s.io/anything",
            // CRI: every container.
            "cdi.k8s.io/container.probe",
        ] {
            assert_eq!(scope(pod_wide), Scope::Pod, "{pod_wide}");
        }
        assert_eq!(scope("devices.nri.io/container.c-0"), container("c-0"));
    }

    #[test]
    fn cdi_names_resolve_to_gpus() {
        let gpu = |n: &str| gpu_of_cdi_name(n);
        for (name, named) in [
            ("nvidia.com/gpu=all", EVERY_GPU),
            ("management.nvidia.com/gpu=all", EVERY_GPU),
            ("nvidia.com/gpu=0", "GPU 0"),
            ("nvidia.com/gpu=gpu1", "GPU 1"),
            ("nvidia.com/gpu=GPU-3f2a0c1e", "GPU GPU-3f2a0c1e"),
            ("nvidia.com/gpu=0:1", "MIG device 0:1"),
            ("nvidia.com/gpu=mig0:1", "MIG device 0:1"),
            ("nvidia.com/gpu=MIG-5c1f", "MIG device MIG-5c1f"),
            ("nvidia.com/mig-1g.10gb=0", "MIG device 0"),
            ("k8s.gpu.nvidia.com/device=c1-gpu-0", "GPU device c1-gpu-0"),
            ("amd.com/gpu=all", EVERY_GPU),
        ] {
            assert_eq!(gpu(name).unwrap(), named, "{name}");
        }
        for not_gpu in [
            "vendor.com/nic=0",
            "nvidia.com/imex-channel=0",
            "evilnvidia.com/gpu=all",
            "nvidia.com/gpu",
            "amd.com/xilinx=0",
        ] {
            assert_eq!(gpu(not_gpu), None, "{not_gpu}");
        }
    }

    #[test]
    fn values_in_every_spelling_are_read() {
        let probe =
            json!({"nvidia.cdi.k8s.io/container.probe": "vendor.com/nic=0, nvidia.com/gpu=all"});
        let a = one(probe);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].0, Scope::Container("probe".into()));
        assert_eq!(a[0].1.devices, ["nvidia.com/gpu=all"]);
        assert!(a[0].1.all);
        assert_eq!(a[0].1.reader, NVIDIA_NRI);
        let yaml =
            one(json!({"cdi-devices.nri.io/pod": "- nvidia.com/gpu=0\n- \"nvidia.com/gpu=1\"\n"}));
        assert_eq!(yaml[0].1.gpus, ["GPU 0", "GPU 1"]);
        let flow = one(json!({"cdi-devices.noderesource.dev": "[nvidia.com/gpu=GPU-1]"}));
        assert_eq!(flow[0].1.gpus, ["GPU GPU-1"]);
        let nic = json!({"cdi.k8s.io/nic": "vendor.com/nic=0", "other": "nvidia.com/gpu=all"});
        assert!(one(nic).is_empty());
    }

    #[test]
    fn device_nodes_name_gpus_by_path_or_number() {
        let nodes = json!({"devices.nri.io/container.c": "- path: /dev/nvidia0\n  type: c\n  major: 195\n  minor: 0\n- path: /dev/nvidiactl\n  type: c\n  major: 195\n  minor: 255\n"});
        let a = one(nodes);
        assert_eq!(a[0].1.devices, ["/dev/nvidia0"]);
        assert_eq!(a[0].1.gpus, ["GPU 0"]);
        let renamed =
            json!({"devices.nri.io/pod": "- {path: /dev/accel, type: c, major: 195, minor: 3}"});
        assert_eq!(one(renamed)[0].1.gpus, ["GPU 3"]);
        let null =
            json!({"devices.nri.io/pod": "- path: /dev/null\n  type: c\n  major: 1\n  minor: 3\n"});
        assert!(one(null).is_empty());
        assert!(one(json!({"devices.nri.io/pod": "- path: /dev/nvidiactl\n  type: c\n  major: 195\n  minor: 255\n"})).is_empty());
        let broken =
            one(json!({"devices.noderesource.dev/pod": "path: /dev/nvidia1\n  bad: [yaml"}));
        assert_eq!(broken[0].1.gpus, ["GPU 1"]);
        assert!(gpu_of_device_node("/dev/kfd", None, None).is_some());
        assert!(gpu_of_device_node("/dev/nvidia-caps/nvidia-cap21", None, None).is_some());
        assert!(gpu_of_device_node("/dev/nvidia-uvm", Some(510), Some(0)).is_none());
    }
}
