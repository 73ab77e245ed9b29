//! GPUs asked for through Dynamic Resource Allocation: the devices of GPU
//! device classes a ResourceClaimSpec requests.
//!
//! Counting: `exactly` with `allocationMode: ExactCount` (the default)
//! counts `count` devices (default 1). `allocationMode: All` takes every
//! matching device of the node, which admission cannot see: it counts the
//! node's GPUs when the SKUs the pod may land on are known (the largest
//! among them), else 1 (at least one device). `firstAvailable` counts its
//! largest GPU subrequest: the most the claim may be given.
use super::GpuResources;
use crate::k8s::claims::{ClaimKind, PodClaim};
use crate::k8s::json::Pointer as _;
use crate::k8s::json::{items, str_at};
use serde_json::Value;
use std::collections::BTreeMap;

/// The GPU devices one claim asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimGpuRequest {
    /// The pod's name for the claim (for a ResourceClaim or template judged
    /// on its own: the object's name).
    pub name: String,
    /// What the claim comes from, and its name.
    pub source: Option<(ClaimKind, String)>,
    /// Whether the claim's spec was found (a pod's claim the lookup does
    /// not know counts no device).
    pub found: bool,
    /// GPU devices per request of the claim, in spec order.
    pub requests: Vec<RequestDevices>,
}

/// The GPU devices of one request of a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestDevices {
    pub name: String,
    pub device_class: String,
    pub count: u64,
    /// `allocationMode: All`: `count` is an estimate (see the module docs).
    pub all: bool,
}

impl ClaimGpuRequest {
    /// The claim of a pod, counted. `all_devices` is what an `All` request
    /// counts as.
    pub fn of_pod_claim(
        claim: &PodClaim,
        resources: &GpuResources,
        all_devices: u64,
    ) -> ClaimGpuRequest {
        ClaimGpuRequest {
            name: claim.name.clone(),
            source: claim.source.clone(),
            found: claim.spec.is_some(),
            requests: claim
                .spec
                .as_ref()
                .map(|spec| request_devices(spec, resources, all_devices))
                .unwrap_or_default(),
        }
    }

    /// GPU devices per device class.
    pub fn devices(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for r in &self.requests {
            let n = out.entry(r.device_class.clone()).or_insert(0u64);
            *n = n.saturating_add(r.count);
        }
        out
    }

    /// GPU devices per device class of the named request only, or of every
    /// request when `request` is `None` (a container's `resources.claims`).
    pub fn devices_of(&self, request: Option<&str>) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for r in self
            .requests
            .iter()
            .filter(|r| request.is_none_or(|n| n == r.name))
        {
            let n = out.entry(r.device_class.clone()).or_insert(0u64);
            *n = n.saturating_add(r.count);
        }
        out
    }

    pub fn total(&self) -> u64 {
        self.requests
            .iter()
            .fold(0, |a, r| a.saturating_add(r.count))
    }

    /// Whether some request takes every matching device (`All`).
    pub fn allocates_all(&self) -> bool {
        self.requests.iter().any(|r| r.all)
    }
}

/// The GPU requests of a ResourceClaimSpec (`devices.requests`): requests
/// of other device classes are left out.
pub fn request_devices(
    spec: &Value,
    resources: &GpuResources,
    all_devices: u64,
) -> Vec<RequestDevices> {
    let mut out = Vec::new();
    for request in items(spec.at("/devices/requests")).filter(|r| r.is_object()) {
        let name = str_at(request, "/name").to_string();
        let choices: Vec<&Value> = if let Some(exact) = request.get("exactly") {
            vec![exact]
        } else if let Some(Value::Array(subs)) = request.get("firstAvailable") {
            subs.iter().collect()
        } else {
            // resource.k8s.io/v1beta1 put the fields on the request itself.
            vec![request]
        };
        let best = choices
            .into_iter()
            .filter(|c| resources.is_gpu_device_class(str_at(c, "/deviceClassName")))
            .map(|c| {
                let all = str_at(c, "/allocationMode") == "All";
                let count = if all {
                    all_devices.max(1)
                } else {
                    c.get("count")
                        .and_then(Value::as_u64)
                        .filter(|n| *n > 0)
                        .unwrap_or(1)
                };
                (str_at(c, "/deviceClassName").to_string(), count, all)
            })
            .fold(None::<(String, u64, bool)>, |best, c| match best {
                Some(b) if b.1 >= c.1 => Some(b),
                _ => Some(c),
            });
        if let Some((device_class, count, all)) = best {
            out.push(RequestDevices {
                name,
                device_class,
                count,
                all,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GPU: &str = "gpu.nvidia.com";

    fn devices(spec: Value, all: u64) -> Vec<RequestDevices> {
        request_devices(&spec, &GpuResources::default(), all)
    }

    #[test]
    fn exact_counts_default_to_one_and_other_classes_are_left_out() {
        let spec = json!({"devices": {"requests": [
            {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
            {"name": "one", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
            {"name": "slice", "exactly": {"deviceClassName": "mig.nvidia.com", "allocationMode": "ExactCount", "count": 3}},
            {"name": "nic", "exactly": {"deviceClassName": "rdma.example.com", "count": 4}}
        ]}});
        let got: Vec<String> = (devices(spec, 8).iter())
            .map(|d| format!("{} {} {}", d.name, d.device_class, d.count))
            .collect();
        let want = "gpus gpu.nvidia.com 2, one gpu.nvidia.com 1, slice mig.nvidia.com 3";
        assert_eq!(got.join(", "), want);
    }

    #[test]
    fn all_counts_the_node_gpus_given_else_one() {
        let spec = json!({"devices": {"requests": [
            {"name": "node", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}
        ]}});
        assert_eq!(devices(spec.clone(), 4)[0].count, 4);
        assert!(devices(spec.clone(), 4)[0].all);
        assert_eq!(devices(spec, 0)[0].count, 1);
    }

    #[test]
    fn first_available_counts_its_largest_gpu_subrequest() {
        let spec = json!({"devices": {"requests": [{"name": "pick", "firstAvailable": [
            {"name": "cpu", "deviceClassName": "cpu.example.com", "count": 16},
            {"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2},
            {"name": "slices", "deviceClassName": "mig.nvidia.com", "count": 1}
        ]}]}});
        let r = devices(spec, 0);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].device_class.as_str(), r[0].count), (GPU, 2));
    }

    #[test]
    fn v1beta1_requests_and_odd_shapes() {
        let old = json!({"devices": {"requests": [{"name": "old", "deviceClassName": "gpu.nvidia.com", "count": 2}]}});
        assert_eq!(devices(old, 0)[0].count, 2);
        for odd in [
            json!(null),
            json!({"devices": "x"}),
            json!({"devices": {"requests": [1, {"exactly": "x"}]}}),
        ] {
            assert!(devices(odd, 0).is_empty());
        }
    }

    #[test]
    fn claims_sum_per_class_and_per_request() {
        let claim = PodClaim {
            name: "gpu".into(),
            source: Some((ClaimKind::ResourceClaimTemplate, "two".into())),
            spec: Some(json!({"devices": {"requests": [
                {"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
                {"name": "b", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
            ]}})),
        };
        let c = ClaimGpuRequest::of_pod_claim(&claim, &GpuResources::default(), 0);
        assert!(c.found);
        assert_eq!(c.total(), 3);
        assert_eq!(c.devices(), BTreeMap::from([(GPU.into(), 3)]));
        assert_eq!(c.devices_of(Some("b")), BTreeMap::from([(GPU.into(), 1)]));
        let missing = PodClaim {
            spec: None,
            ..claim
        };
        let c = ClaimGpuRequest::of_pod_claim(&missing, &GpuResources::default(), 0);
        assert!(!c.found);
        assert_eq!(c.total(), 0);
    }
}
