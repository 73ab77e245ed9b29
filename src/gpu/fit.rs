//! Whether a pod's CPU and memory fit the sizes it may land on: what the
//! pod asks for (its effective request, as kube-scheduler counts it), what
//! a node of each size leaves for pods after AKS's node reserve, and the
//! size with the most room for this pod. `gpu.fit` shows it.
use serde::Serialize;
use serde_json::Value;

use super::catalog::{Allocatable, Sku};
use super::request::{int, parse_amount};
use crate::k8s::json::{items, scalar_string, Pointer};
use std::cmp::Ordering;

/// The CPU (millicores) and memory (bytes) a pod asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodResources {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

impl PodResources {
    /// The effective request of a pod spec, as kube-scheduler computes it:
    /// the larger of the app containers and sidecars together and, for
    /// each init container in order, its own request plus the sidecars
    /// started before it; plus `spec.overhead`. A container's request is
    /// its `requests` entry, else its `limits` entry (what the API server
    /// defaults it to). An amount that cannot be read counts nothing.
    /// Pod-level resources (`spec.resources`, on by default since
    /// Kubernetes 1.34) replace the containers' sum for each resource they
    /// name: the request, else the limit when no container asks for that
    /// resource (the API server's defaulting), as kube-scheduler reads them.
    pub fn of(spec: &Value) -> PodResources {
        let mut running = PodResources::default();
        let mut sidecars = PodResources::default();
        let mut init_peak = PodResources::default();
        for c in items(spec.get("initContainers")) {
            let own = container_request(c);
            if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
                running = running.plus(own);
                sidecars = sidecars.plus(own);
            } else {
                init_peak = init_peak.max(sidecars.plus(own));
            }
        }
        for c in items(spec.get("containers")) {
            running = running.plus(container_request(c));
        }
        let overhead = spec
            .get("overhead")
            .map_or_else(PodResources::default, |o| PodResources {
                cpu_millis: amount(o.get("cpu"), 3),
                memory_bytes: amount(o.get("memory"), 0),
            });
        let containers = running.max(init_peak);
        let pod = spec.get("resources");
        let pod_level = |name: &str, scale: u32, summed: u64| {
            let request = pod.and_then(|r| r.get("requests")?.get(name));
            let limit = pod.and_then(|r| r.get("limits")?.get(name));
            match (request, limit) {
                (Some(r), _) => amount(Some(r), scale),
                (None, Some(l)) if summed == 0 => amount(Some(l), scale),
                _ => summed,
            }
        };
        PodResources {
            cpu_millis: pod_level("cpu", 3, containers.cpu_millis),
            memory_bytes: pod_level("memory", 0, containers.memory_bytes),
        }
        .plus(overhead)
    }

    fn plus(self, other: PodResources) -> PodResources {
        PodResources {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
        }
    }

    fn max(self, other: PodResources) -> PodResources {
        PodResources {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
        }
    }
}

fn container_request(c: &Value) -> PodResources {
    let requests = c.at("/resources/requests");
    let limits = c.at("/resources/limits");
    let pick = |name: &str| {
        requests
            .and_then(|r| r.get(name))
            .or_else(|| limits.and_then(|l| l.get(name)))
    };
    PodResources {
        cpu_millis: amount(pick("cpu"), 3),
        memory_bytes: amount(pick("memory"), 0),
    }
}

fn amount(v: Option<&Value>, scale: u32) -> u64 {
    v.and_then(scalar_string)
        .and_then(|q| parse_amount(&q, scale).ok())
        .unwrap_or(0)
}

/// How a size's room (the catalog's) takes a pod's request.
impl Allocatable {
    /// The pod's request fits on an empty node of the size (memory
    /// unknown fits).
    pub fn holds(&self, pod: PodResources) -> bool {
        pod.cpu_millis <= self.cpu_millis && self.memory_bytes.is_none_or(|m| pod.memory_bytes <= m)
    }

    /// The share of the pod's request the size can hold, the lesser of
    /// CPU and memory (infinite for what the pod does not ask or the
    /// catalog does not know).
    fn share_of(&self, pod: PodResources) -> f64 {
        let share = |room: u64, asked: u64| {
            if asked == 0 {
                f64::INFINITY
            } else {
                room as f64 / asked as f64
            }
        };
        let cpu = share(self.cpu_millis, pod.cpu_millis);
        let memory = self
            .memory_bytes
            .map_or(f64::INFINITY, |m| share(m, pod.memory_bytes));
        cpu.min(memory)
    }
}

/// `gpu.fit` (see docs/cel-extensions.md). Integers are `i64` for CEL.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FitFacts {
    /// CPU the pod asks for, in millicores.
    pub cpu: i64,
    /// Memory the pod asks for, in bytes.
    pub memory: i64,
    /// Some size the pod may land on holds its CPU and memory after the
    /// node reserve; true when no size is known to it.
    pub fits: bool,
    /// The size the pod may land on with the most room for it (the
    /// largest share of its request, the lesser of CPU and memory; ties
    /// to more vCPUs, then more memory); `None` when no size is known.
    pub largest: Option<SizeRoom>,
    /// CPU millicores the pod asks for per GPU it asks for (0 without GPUs).
    pub cpu_per_gpu: i64,
    /// The most vCPU millicores per GPU device among the sizes the pod may
    /// land on (0 when no size is known).
    pub max_cpu_per_gpu: i64,
    #[serde(skip)]
    pub requested: PodResources,
}

impl Default for FitFacts {
    fn default() -> FitFacts {
        FitFacts::of(PodResources::default(), &[], 0)
    }
}

/// One size and its room, as `gpu.fit.largest` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SizeRoom {
    pub name: String,
    pub vcpus: i64,
    /// The VM's memory in GiB (absent when the catalog does not know it,
    /// as are `memory` and `reservedMemory`).
    #[serde(rename = "memoryGiB", skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<f64>,
    /// Millicores left for pods after the node reserve.
    pub cpu: i64,
    /// Bytes left for pods after the node reserve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<i64>,
    pub reserved_cpu: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_memory: Option<i64>,
}

impl FitFacts {
    /// The fit of a pod asking `requested` and `gpus` GPUs on `skus`, the
    /// sizes it may land on.
    pub fn of(requested: PodResources, skus: &[&Sku], gpus: u64) -> FitFacts {
        // One pass over the sizes, each one's room as the catalog keeps it
        // and its share of the request worked out once.
        let mut fits = skus.is_empty();
        let mut largest: Option<(&Sku, f64)> = None;
        let mut max_cpu_per_gpu = 0;
        for &sku in skus {
            let share = sku.room.share_of(requested);
            fits = fits || sku.room.holds(requested);
            // Ties go to more vCPUs, then more memory; of equals, the last
            // (as `Iterator::max_by` picks).
            let wins = largest.is_none_or(|(best, best_share)| {
                let order = best_share
                    .total_cmp(&share)
                    .then(best.vcpus.cmp(&sku.vcpus))
                    .then(gib(best).total_cmp(&gib(sku)));
                order != Ordering::Greater
            });
            if wins {
                largest = Some((sku, share));
            }
            let per_gpu = u64::from(sku.vcpus) * 1000 / u64::from(sku.gpu_devices.max(1));
            max_cpu_per_gpu = max_cpu_per_gpu.max(per_gpu);
        }
        FitFacts {
            cpu: int(requested.cpu_millis),
            memory: int(requested.memory_bytes),
            fits,
            largest: largest.map(|(sku, _)| SizeRoom {
                name: sku.name.clone(),
                vcpus: i64::from(sku.vcpus),
                memory_gib: sku.memory_gib,
                cpu: int(sku.room.cpu_millis),
                memory: sku.room.memory_bytes.map(int),
                reserved_cpu: int(sku.room.reserved_cpu_millis),
                reserved_memory: sku.room.reserved_memory_bytes.map(int),
            }),
            cpu_per_gpu: int(requested.cpu_millis.checked_div(gpus).unwrap_or(0)),
            max_cpu_per_gpu: int(max_cpu_per_gpu),
            requested,
        }
    }
}

/// A size's memory in GiB for ordering sizes (unknown as none).
fn gib(sku: &Sku) -> f64 {
    sku.memory_gib.unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::super::catalog::Catalog;
    use super::*;
    use serde_json::json;

    const A100: &str = "Standard_NC24ads_A100_v4";

    fn pod(cpu_millis: u64, memory_bytes: u64) -> PodResources {
        PodResources {
            cpu_millis,
            memory_bytes,
        }
    }

    fn asks(spec: Value) -> PodResources {
        PodResources::of(&spec)
    }

    #[test]
    fn effective_request_follows_kube_scheduler() {
        let r = asks(json!({
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"name": "fetch", "resources": {"requests": {"cpu": "6", "memory": "1Gi"}}}
            ],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "2", "memory": "8Gi"}}},
                {"name": "b", "resources": {"limits": {"cpu": 1, "memory": "4Gi"}}},
                {"name": "c"}
            ],
            "overhead": {"cpu": "250m", "memory": "120Mi"}
        }));
        // CPU: the init container (6) with the sidecar before it (0.5)
        // beats the running pod (3.5); memory: the running pod (13Gi).
        assert_eq!(r.cpu_millis, 6500 + 250);
        assert_eq!(r.memory_bytes, (13 << 30) + (120 << 20));
        // Pod-level resources replace the containers' sum per resource;
        // a pod-level limit alone counts when no container asks for it.
        let pod_level = |resources: Value| {
            asks(json!({"resources": resources, "containers": [
                {"name": "a", "resources": {"requests": {"memory": "2Gi"}}}]}))
        };
        let r = pod_level(json!({"requests": {"cpu": "40"}}));
        assert_eq!((r.cpu_millis, r.memory_bytes), (40_000, 2 << 30));
        let r = pod_level(json!({"limits": {"cpu": "8", "memory": "16Gi"}}));
        assert_eq!((r.cpu_millis, r.memory_bytes), (8000, 2 << 30));
        // Unreadable amounts count nothing.
        for spec in [
            json!({"containers": [{"name": "c"}]}),
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots", "memory": true}}}]}),
        ] {
            assert_eq!(asks(spec.clone()), PodResources::default(), "{spec}");
        }
    }

    #[test]
    fn memory_unknown_holds_any_request() {
        let unknown = Allocatable::of_size(4, None);
        assert!(unknown.holds(pod(1000, u64::MAX)));
        assert!(!unknown.holds(pod(4000, 0)));
    }

    #[test]
    fn largest_is_the_size_with_most_room_for_the_pod() {
        let c = Catalog::embedded();
        let sizes: Vec<&Sku> = [
            "Standard_NC24lds_xl_RTXPRO6000BSE_v6",
            "Standard_NC16as_T4_v3",
            A100,
        ]
        .iter()
        .map(|n| c.get(n).unwrap())
        .collect();
        // 150 GiB: only the A100 size has the memory.
        let big_memory = pod(4000, 150 << 30);
        let f = FitFacts::of(big_memory, &sizes, 1);
        assert!(f.fits);
        assert_eq!(f.largest.unwrap().name, A100);
        assert_eq!(f.cpu_per_gpu, 4000);
        assert_eq!(f.max_cpu_per_gpu, 24_000);
        // 30 CPU fits none; the 24-vCPU size with more memory is nearest.
        let f = FitFacts::of(pod(30_000, 0), &sizes, 2);
        assert!(!f.fits);
        let largest = f.largest.unwrap();
        assert_eq!((largest.name.as_str(), largest.vcpus), (A100, 24));
        assert_eq!(f.cpu_per_gpu, 15_000);
        // Sizes of the same room tie on vCPUs and memory too: the last of
        // them in the order given is named.
        let (h100, ncc) = (
            c.get("Standard_NC40ads_H100_v5").unwrap(),
            c.get("Standard_NCC40ads_H100_v5").unwrap(),
        );
        assert_eq!((h100.room, h100.vcpus), (ncc.room, ncc.vcpus));
        let named = |skus: &[&Sku]| {
            FitFacts::of(pod(8000, 64 << 30), skus, 1)
                .largest
                .unwrap()
                .name
        };
        assert_eq!(named(&[h100, ncc]), ncc.name);
        assert_eq!(named(&[ncc, h100]), h100.name);
        assert_eq!(named(&[sizes[1], ncc, h100, sizes[1]]), h100.name);
        // No size known: nothing to judge.
        let none = FitFacts::of(big_memory, &[], 1);
        assert!(none.fits && none.largest.is_none());
        assert_eq!(FitFacts::default().cpu, 0);
    }
}
