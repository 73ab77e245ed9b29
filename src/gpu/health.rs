//! Whether a node's GPUs can be used: the node conditions AKS's Node
//! Problem Detector (NPD) sets on GPU nodes, and the GPUs a device plugin
//! counts in `status.capacity` but no longer offers in `status.allocatable`
//! (devices it reports unhealthy). A GPU on such a node is paid for and
//! cannot be used; a pod pinned there fails or crawls.
//!
//! The conditions, from MicrosoftDocs/azure-aks-docs
//! `articles/aks/node-problem-detector.md` ("Node conditions", the `GPU
//! only` rows) and `articles/aks/gpu-health-monitoring.md`:
//!
//! | condition type | what NPD found |
//! |---|---|
//! | `GPUMissing` | observed GPU count does not match expected GPU count |
//! | `XIDErrors` (`GPUXIDErrors` in the health page) | XID errors present in kernel log |
//! | `NVLinkStatusInactive` | NVLink inactive |
//! | `GPUClockThrottling` | problematic GPU clock throttling detected |
//! | `UnhealthyNvidiaDevicePlugin` | NVIDIA device plugin service is not active |
//!
//! `IBLinkFlapping` (InfiniBand link flapping) is left out: it slows
//! traffic between nodes, the node's GPUs still work. NPD sets a problem
//! condition `True` while the problem lasts and `False` otherwise.
use super::request::parse_count;
use super::GpuResources;
use crate::k8s::json::{string_map, Pointer};
use crate::k8s::{NodeCondition, NodeInfo};
use serde_json::Value;
use std::collections::BTreeMap;

/// The NPD condition types that say a node's GPUs cannot be used.
pub const GPU_CONDITIONS: [&str; 6] = [
    "GPUMissing",
    "XIDErrors",
    "GPUXIDErrors",
    "NVLinkStatusInactive",
    "GPUClockThrottling",
    "UnhealthyNvidiaDevicePlugin",
];

/// Whether a node condition of type `kind` and `status` says a GPU
/// problem is present.
pub fn is_gpu_problem(kind: &str, status: &str) -> bool {
    status == "True" && GPU_CONDITIONS.contains(&kind)
}

/// The GPU problems the conditions of `node` report.
pub fn gpu_problems(node: &NodeInfo) -> Vec<&NodeCondition> {
    (node.conditions.iter())
        .filter(|c| is_gpu_problem(&c.kind, &c.status))
        .collect()
}

/// The GPUs (any of `resources`) a resource list (`status.capacity`,
/// `status.allocatable`) holds.
pub fn gpu_count(list: &BTreeMap<String, String>, resources: &GpuResources) -> i64 {
    (list.iter())
        .filter(|(name, _)| resources.matches(name))
        .filter_map(|(_, q)| parse_count(q).ok())
        .map(|n| i64::try_from(n).unwrap_or(i64::MAX))
        .fold(0, i64::saturating_add)
}

/// The GPUs of a Node (as JSON) its device plugin reports unhealthy: in
/// `status.capacity` and not in `status.allocatable`.
pub fn unhealthy_devices(node: &Value, resources: &GpuResources) -> i64 {
    let count = |field| gpu_count(&string_map(node.at(field)), resources);
    (count("/status/capacity") - count("/status/allocatable")).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(conditions: Value) -> Value {
        json!({"metadata": {"name": "aks-nd96-1"}, "status": {
            "capacity": {"cpu": "96", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "95", "nvidia.com/gpu": "6"},
            "conditions": conditions}})
    }

    #[test]
    fn gpu_conditions_that_are_true_are_problems() {
        let n = node(json!([
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            {"type": "XIDErrors", "status": "True", "reason": "XIDErrors", "message": "XID 79 on GPU 3"},
            {"type": "GPUMissing", "status": "False", "reason": "NoGPUMissing"},
            {"type": "IBLinkFlapping", "status": "True", "reason": "IBLinkFlapping"},
            {"type": "UnhealthyNvidiaDevicePlugin", "status": "Unknown"},
            {"type": "GPUClockThrottling", "status": "True", "reason": "HwSlowdown"}
        ]));
        let info = NodeInfo::from_value(&n);
        let kinds: Vec<&str> = gpu_problems(&info)
            .iter()
            .map(|c| c.kind.as_str())
            .collect();
        assert_eq!(kinds, ["XIDErrors", "GPUClockThrottling"]);
        assert_eq!(gpu_problems(&info)[0].message, "XID 79 on GPU 3");
        assert!(gpu_problems(&NodeInfo::from_value(&node(json!([])))).is_empty());
    }

    #[test]
    fn gpus_in_capacity_and_not_allocatable_are_unhealthy_devices() {
        let resources = GpuResources::new(["nvidia.com/gpu"]).unwrap();
        assert_eq!(unhealthy_devices(&node(json!([])), &resources), 2);
        let healthy = json!({"status": {"capacity": {"nvidia.com/gpu": "2"}, "allocatable": {"nvidia.com/gpu": "2"}}});
        assert_eq!(unhealthy_devices(&healthy, &resources), 0);
        // DRA-served GPUs are in neither list.
        assert_eq!(unhealthy_devices(&json!({"status": {}}), &resources), 0);
    }
}
