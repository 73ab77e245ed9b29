//! The cluster's GPU nodes as the audit sees them: per pool (AKS agent
//! pool, Karpenter NodePool) and size, the GPUs allocatable, requested by
//! pods bound there, idle, and unusable (reported unhealthy: see
//! [`crate::gpu::health`]); and findings on the nodes themselves (no GPU
//! taint, a retired or AKS-unsupported size, nothing requesting a GPU,
//! GPUs reported unhealthy).
//! Pods are read once, a page at a time, into a [`PodLedger`]; Nodes are
//! few and read whole.
use crate::gpu::catalog::Catalog;
use crate::gpu::health::{gpu_count, gpu_problems, unhealthy_devices};
use crate::gpu::reach::is_gpu_node;
use crate::gpu::request::pod_gpu_request;
use crate::gpu::taints::is_gpu_taint;
use crate::gpu::{DraDevices, GpuResources};
use crate::k8s::json::Pointer as _;
use crate::k8s::workloads::{controller_ref, controller_uid};
use crate::k8s::workloads::{pod_is_bound, pod_is_finished};
use crate::k8s::{NodeCondition, NodeInfo};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// Node labels that name a node's pool, most specific first.
pub const POOL_LABELS: [&str; 3] = [
    "kubernetes.azure.com/agentpool",
    "agentpool",
    "karpenter.sh/nodepool",
];
/// The pool of a node that carries none of [`POOL_LABELS`].
pub const NO_POOL: &str = "(no pool label)";
const SIZE_LABELS: [&str; 2] = [
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
];
const REGION_LABEL: &str = "topology.kubernetes.io/region";

/// A pod that holds GPUs: bound to a node, or running, and not finished.
/// The one GPU pod type of the audit: the node section and the idle GPU
/// pods section both read it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldPod {
    pub namespace: String,
    pub name: String,
    /// `spec.nodeName`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub gpus: i64,
    /// `status.startTime`, seconds since the epoch (read by the idle GPU
    /// pods section).
    #[serde(skip)]
    pub started_at: Option<i64>,
    /// The kind of its workload: its root controller's where the run read
    /// it (a Deployment, not its ReplicaSet), else its own controller's;
    /// none for a bare pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_kind: Option<String>,
    /// Its own controller's uid, by which the run finds the root.
    #[serde(skip)]
    pub controller_uid: Option<String>,
}

/// What the pods of a cluster say about its nodes, pod by pod.
#[derive(Clone, Debug, Default)]
pub struct PodLedger {
    /// GPUs requested by unfinished pods bound to each node.
    requested: BTreeMap<String, i64>,
    /// The latest end of a finished GPU pod on each node (RFC 3339).
    last_gpu_end: BTreeMap<String, Timestamp>,
    /// Every pod holding GPUs, controlled or not.
    held: Vec<HeldPod>,
}

impl PodLedger {
    /// Takes one Pod into account, and says how many GPUs it asks for;
    /// other objects are ignored (0).
    pub fn add(&mut self, pod: &Value, resources: &GpuResources) -> i64 {
        if !crate::k8s::workloads::is_pod(pod) {
            return 0;
        }
        let spec = pod.get("spec").unwrap_or(&Value::Null);
        let gpus = i64::try_from(pod_gpu_request(spec, resources).total()).unwrap_or(i64::MAX);
        if gpus == 0 {
            return 0;
        }
        let node = spec
            .get("nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        if pod_is_finished(pod) {
            if let (Some(node), Some(end)) = (node, finished_at(pod)) {
                let last = self.last_gpu_end.entry(node.to_string()).or_insert(end);
                *last = (*last).max(end);
            }
            return gpus;
        }
        let running = pod.at("/status/phase").and_then(Value::as_str) == Some("Running");
        if let Some(node) = node {
            *self.requested.entry(node.to_string()).or_default() += gpus;
        }
        if running || pod_is_bound(pod) {
            self.held.push(HeldPod {
                namespace: crate::k8s::json::str_at(pod, "/metadata/namespace").to_string(),
                name: crate::k8s::json::str_at(pod, "/metadata/name").to_string(),
                node: node.map(str::to_string),
                gpus,
                started_at: pod
                    .at("/status/startTime")
                    .and_then(Value::as_str)
                    .and_then(|t| t.parse::<Timestamp>().ok())
                    .map(|t| t.as_second()),
                workload_kind: controller_ref(pod)
                    .and_then(|o| Some(o.get("kind")?.as_str()?.to_string())),
                controller_uid: controller_uid(pod).map(str::to_string),
            });
        }
        gpus
    }

    /// Adds what another ledger saw.
    pub fn merge(&mut self, other: PodLedger) {
        for (node, gpus) in other.requested {
            *self.requested.entry(node).or_default() += gpus;
        }
        for (node, end) in other.last_gpu_end {
            let last = self.last_gpu_end.entry(node).or_insert(end);
            *last = (*last).max(end);
        }
        self.held.extend(other.held);
    }

    /// Every pod holding GPUs.
    pub fn held(&self) -> &[HeldPod] {
        &self.held
    }

    pub fn into_held(self) -> Vec<HeldPod> {
        self.held
    }
}

/// The latest `finishedAt` of a finished pod's containers.
fn finished_at(pod: &Value) -> Option<Timestamp> {
    pod.at("/status/containerStatuses")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(|c| c.at("/state/terminated/finishedAt")?.as_str()?.parse().ok())
        .max()
}

/// The GPU nodes of a cluster, per pool and size, with their findings.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    /// When the node ages and idle times are measured (RFC 3339).
    pub as_of: String,
    /// Nodes read, GPU or not.
    pub nodes: usize,
    pub gpu_nodes: usize,
    /// GPUs the GPU nodes offer (`status.allocatable`).
    pub gpus_allocatable: i64,
    /// GPUs requested by unfinished pods bound to them.
    pub gpus_requested: i64,
    /// Allocatable GPUs no pod requests, on nodes whose GPUs work.
    pub gpus_idle: i64,
    /// GPUs reported unhealthy, and no pod requests.
    pub gpus_unusable: i64,
    pub pools: Vec<PoolRow>,
    pub gpu_node_list: Vec<GpuNode>,
    /// The GPU nodes with GPUs reported unhealthy.
    pub unhealthy_nodes: Vec<UnhealthyNode>,
    pub findings: Vec<NodeFinding>,
}

/// A GPU node with GPUs reported unhealthy.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyNode {
    pub node: String,
    pub pool: String,
    pub size: String,
    /// Node Problem Detector's GPU conditions that are `True`: every GPU
    /// of the node is unusable.
    pub conditions: Vec<NodeCondition>,
    /// GPUs in `status.capacity` the device plugin no longer offers in
    /// `status.allocatable`.
    pub unhealthy_devices: i64,
    pub gpus_unusable: i64,
}

/// One pool and size.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    pub pool: String,
    /// `node.kubernetes.io/instance-type`; empty when the nodes do not say.
    pub size: String,
    pub gpu_nodes: usize,
    pub gpus_allocatable: i64,
    pub gpus_requested: i64,
    pub gpus_idle: i64,
    pub gpus_unusable: i64,
    /// GPU nodes with no GPU taint.
    pub untainted_nodes: usize,
}

/// One GPU node.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuNode {
    pub name: String,
    pub pool: String,
    pub size: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    pub gpus_allocatable: i64,
    /// The GPUs the node has: `status.capacity` with those DRA serves.
    pub gpus_capacity: i64,
    pub gpus_requested: i64,
    pub gpus_idle: i64,
    /// Reported unhealthy, and requested by no pod: every one when a GPU
    /// condition is `True`, else those the device plugin dropped.
    pub gpus_unusable: i64,
    pub gpu_tainted: bool,
    /// Since when nothing has requested a GPU on it, when nothing does:
    /// its creation, or the end of the last GPU pod the cluster still shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<String>,
}

/// A finding on a node: its rule, and what it says.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFinding {
    /// `gpu-node-untainted`, `gpu-node-retired-size`,
    /// `gpu-node-unsupported-size`, `gpu-node-idle` or
    /// `gpu-node-unhealthy`.
    pub rule: &'static str,
    pub node: String,
    pub pool: String,
    pub size: String,
    /// The node's idle GPUs for `gpu-node-idle`, its unusable ones for
    /// `gpu-node-unhealthy`, else its allocatable GPUs.
    pub gpus: i64,
    pub message: String,
}

pub const UNTAINTED: &str = "gpu-node-untainted";
pub const RETIRED_SIZE: &str = "gpu-node-retired-size";
pub const UNSUPPORTED_SIZE: &str = "gpu-node-unsupported-size";
pub const IDLE: &str = "gpu-node-idle";
pub const UNHEALTHY: &str = "gpu-node-unhealthy";

/// The report on `nodes` (Node objects, with the GPUs `devices` serves
/// on them), given what `ledger` saw of the pods, measured at `now`.
pub fn account(
    nodes: &[Value],
    devices: &DraDevices,
    ledger: &PodLedger,
    catalog: &Catalog,
    resources: &GpuResources,
    now: Timestamp,
) -> NodeReport {
    let mut report = NodeReport {
        as_of: format!("{now:.0}"),
        nodes: nodes.len(),
        ..NodeReport::default()
    };
    let mut pools: BTreeMap<(String, String), PoolRow> = BTreeMap::new();
    for node in nodes {
        let mut info = NodeInfo::from_value(node);
        devices.add_to(&mut info);
        if !is_gpu_node(&info, resources, catalog) {
            continue;
        }
        let (gpu, unhealthy) = gpu_node(node, &info, ledger, resources);
        let row = pools
            .entry((gpu.pool.clone(), gpu.size.clone()))
            .or_insert_with(|| PoolRow {
                pool: gpu.pool.clone(),
                size: gpu.size.clone(),
                ..PoolRow::default()
            });
        row.gpu_nodes += 1;
        row.gpus_allocatable += gpu.gpus_allocatable;
        row.gpus_requested += gpu.gpus_requested;
        row.gpus_idle += gpu.gpus_idle;
        row.gpus_unusable += gpu.gpus_unusable;
        row.untainted_nodes += usize::from(!gpu.gpu_tainted);
        report
            .findings
            .extend(findings(&gpu, unhealthy.as_ref(), catalog, now));
        report.gpu_nodes += 1;
        report.gpus_allocatable += gpu.gpus_allocatable;
        report.gpus_requested += gpu.gpus_requested;
        report.gpus_idle += gpu.gpus_idle;
        report.gpus_unusable += gpu.gpus_unusable;
        report.unhealthy_nodes.extend(unhealthy);
        report.gpu_node_list.push(gpu);
    }
    report.pools = pools.into_values().collect();
    report
}

/// The node, and what makes its GPUs unusable when something does.
fn gpu_node(
    node: &Value,
    info: &NodeInfo,
    ledger: &PodLedger,
    resources: &GpuResources,
) -> (GpuNode, Option<UnhealthyNode>) {
    let label = |keys: &[&str]| keys.iter().find_map(|k| info.label(k)).map(str::to_string);
    let allocatable = gpu_count(&info.allocatable, resources);
    let unhealthy_devices = unhealthy_devices(node, resources);
    let conditions: Vec<NodeCondition> = gpu_problems(info).into_iter().cloned().collect();
    let capacity = allocatable.saturating_add(unhealthy_devices);
    let requested = ledger.requested.get(&info.name).copied().unwrap_or(0);
    let idle_since = (requested == 0).then(|| {
        let created: Option<Timestamp> = node
            .at("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| t.parse().ok());
        let last_end = ledger.last_gpu_end.get(&info.name).copied();
        created.max(last_end).map(|t| format!("{t:.0}"))
    });
    let (idle, unusable) = if conditions.is_empty() {
        ((allocatable - requested).max(0), unhealthy_devices)
    } else {
        (0, (capacity - requested).max(0))
    };
    let gpu = GpuNode {
        name: info.name.clone(),
        pool: label(&POOL_LABELS).unwrap_or_else(|| NO_POOL.to_string()),
        size: label(&SIZE_LABELS).unwrap_or_default(),
        region: label(&[REGION_LABEL]),
        gpus_allocatable: allocatable,
        gpus_capacity: capacity,
        gpus_requested: requested,
        gpus_idle: idle,
        gpus_unusable: unusable,
        gpu_tainted: info.taints.iter().any(is_gpu_taint),
        idle_since: idle_since.flatten(),
    };
    let unhealthy = (!conditions.is_empty() || unhealthy_devices > 0).then(|| UnhealthyNode {
        node: gpu.name.clone(),
        pool: gpu.pool.clone(),
        size: gpu.size.clone(),
        conditions,
        unhealthy_devices,
        gpus_unusable: unusable,
    });
    (gpu, unhealthy)
}

fn findings(
    node: &GpuNode,
    unhealthy: Option<&UnhealthyNode>,
    catalog: &Catalog,
    now: Timestamp,
) -> Vec<NodeFinding> {
    let mut out = Vec::new();
    let mut push = |rule: &'static str, gpus: i64, message: String| {
        out.push(NodeFinding {
            rule,
            node: node.name.clone(),
            pool: node.pool.clone(),
            size: node.size.clone(),
            gpus,
            message,
        })
    };
    if !node.gpu_tainted {
        push(
            UNTAINTED,
            node.gpus_allocatable,
            format!(
                "GPU node of pool {} has no GPU taint (sku=gpu:NoSchedule): pods that ask for no GPU can be scheduled on it and keep it from scaling down",
                node.pool
            ),
        );
    }
    if let Some(sku) = catalog.get(&node.size) {
        if sku.retired {
            let on = sku
                .retired_on
                .as_deref()
                .map(|d| format!(" on {d}"))
                .unwrap_or_default();
            push(
                RETIRED_SIZE,
                node.gpus_allocatable,
                format!(
                    "size {} was retired{on}: move pool {} to a current size",
                    sku.name, node.pool
                ),
            );
        } else if !sku.aks_supported {
            push(
                UNSUPPORTED_SIZE,
                node.gpus_allocatable,
                format!("size {} is not supported for GPU nodes on AKS", sku.name),
            );
        }
    }
    if let Some(u) = unhealthy {
        let mut why: Vec<String> = (u.conditions.iter())
            .map(|c| match c.message.as_str() {
                "" => format!("{} ({})", c.kind, c.reason),
                message => format!("{} ({message})", c.kind),
            })
            .collect();
        if u.unhealthy_devices > 0 {
            why.push(format!(
                "the device plugin offers {} of its {} GPUs",
                node.gpus_allocatable, node.gpus_capacity
            ));
        }
        push(
            UNHEALTHY,
            u.gpus_unusable,
            format!(
                "GPUs reported unhealthy: {}; {} unusable and paid for: drain and repair or replace the node, and move pods pinned to it",
                why.join(", "),
                match u.gpus_unusable {
                    1 => "1 GPU is".to_string(),
                    n => format!("{n} GPUs are"),
                }
            ),
        );
    }
    // A node whose every free GPU is unusable is not idle.
    if node.gpus_requested == 0 && (node.gpus_idle > 0 || node.gpus_unusable == 0) {
        let since = match node
            .idle_since
            .as_deref()
            .and_then(|t| t.parse::<Timestamp>().ok())
        {
            Some(since) => {
                let hours = (now.as_second() - since.as_second()).max(0) / 3600;
                format!(" for {} (since {since:.0})", duration(hours))
            }
            None => String::new(),
        };
        push(
            IDLE,
            node.gpus_idle,
            format!(
                "no pod has requested a GPU on it{since}: {} paid for and unused",
                match node.gpus_allocatable {
                    1 => "its GPU is".to_string(),
                    n => format!("its {n} GPUs are"),
                }
            ),
        );
    }
    out
}

/// `hours` as `5 h` or `3 d 4 h`.
fn duration(hours: i64) -> String {
    match (hours / 24, hours % 24) {
        (0, h) => format!("{h} h"),
        (d, 0) => format!("{d} d"),
        (d, h) => format!("{d} d {h} h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resources() -> GpuResources {
        GpuResources::new(["nvidia.com/gpu"]).unwrap()
    }

    fn node(name: &str, pool: &str, size: &str, gpus: &str, taint: bool) -> Value {
        let mut n = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "creationTimestamp": "2026-11-28T00:00:00Z",
                "labels": {"kubernetes.azure.com/agentpool": pool, "node.kubernetes.io/instance-type": size}},
            "spec": {},
            "status": {"allocatable": {"cpu": "23", "nvidia.com/gpu": gpus}}});
        if taint {
            n["spec"]["taints"] = json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]);
        }
        n
    }

    fn pod(name: &str, node: &str, gpus: &str, phase: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": phase, "containerStatuses": [{"state": {"terminated": {"finishedAt": "2026-11-29T06:00:00Z"}}}]}})
    }

    fn account_now(nodes: &[Value], devices: &DraDevices, ledger: &PodLedger) -> NodeReport {
        let now = "2026-11-30T00:00:00Z".parse().unwrap();
        account(
            nodes,
            devices,
            ledger,
            Catalog::embedded_shared(),
            &resources(),
            now,
        )
    }

    #[test]
    fn gpus_dra_serves_count_as_the_nodes_allocatable_gpus() {
        let mut dra = node("dra-1", "gpunp", "Standard_NC48ads_A100_v4", "0", true);
        dra["status"]["allocatable"] = json!({"cpu": "23"});
        let devices = DraDevices::read(&[
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"extendedResourceName": "nvidia.com/gpu",
                    "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}),
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": "dra-1", "pool": {"name": "dra-1", "generation": 1},
                    "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}}),
        ]);
        let mut ledger = PodLedger::default();
        ledger.add(&pod("p1", "dra-1", "1", "Running"), &resources());
        let report = account_now(&[dra], &devices, &ledger);
        assert_eq!(report.gpu_nodes, 1);
        assert_eq!(
            (
                report.gpus_allocatable,
                report.gpus_requested,
                report.gpus_idle
            ),
            (2, 1, 1)
        );
    }

    #[test]
    fn pools_sum_allocatable_requested_and_idle_per_size() {
        let nodes = [
            node("a1", "a100", "Standard_NC48ads_A100_v4", "2", true),
            node("a2", "a100", "Standard_NC48ads_A100_v4", "2", true),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu", "labels": {"agentpool": "system"}},
                "status": {"allocatable": {"cpu": "4"}}}),
        ];
        let mut ledger = PodLedger::default();
        for p in [
            pod("p1", "a1", "2", "Running"),
            pod("p2", "a2", "1", "Pending"),
            pod("p3", "a2", "1", "Succeeded"),
        ] {
            ledger.add(&p, &resources());
        }
        let report = account_now(&nodes, &DraDevices::default(), &ledger);
        assert_eq!((report.nodes, report.gpu_nodes), (3, 2));
        assert_eq!(
            report.pools,
            vec![PoolRow {
                pool: "a100".into(),
                size: "Standard_NC48ads_A100_v4".into(),
                gpu_nodes: 2,
                gpus_allocatable: 4,
                gpus_requested: 3,
                gpus_idle: 1,
                gpus_unusable: 0,
                untainted_nodes: 0,
            }]
        );
        assert!(report.findings.is_empty(), "{:?}", report.findings);
        assert_eq!(ledger.held().len(), 2, "the running pod and the bound one");
    }

    #[test]
    fn untainted_retired_and_idle_nodes_are_findings() {
        let nodes = [
            node("t4", "t4", "Standard_NC4as_T4_v3", "1", false),
            node("v100", "old", "Standard_NC6s_v3", "1", true),
        ];
        let mut ledger = PodLedger::default();
        ledger.add(&pod("done", "v100", "1", "Succeeded"), &resources());
        ledger.add(&pod("run", "t4", "1", "Running"), &resources());
        let report = account_now(&nodes, &DraDevices::default(), &ledger);
        let rules = report.findings.iter().map(|f| (f.rule, f.node.as_str()));
        assert_eq!(
            rules.collect::<Vec<_>>(),
            [(UNTAINTED, "t4"), (RETIRED_SIZE, "v100"), (IDLE, "v100")]
        );
        let idle = &report.findings[2];
        assert_eq!(idle.gpus, 1);
        assert!(
            idle.message
                .contains("for 18 h (since 2026-11-29T06:00:00Z)"),
            "{}",
            idle.message
        );
        let v100 = &report.gpu_node_list[1];
        assert_eq!(
            v100.idle_since.as_deref(),
            Some("2026-11-29T06:00:00Z"),
            "the last GPU pod's end, after the node's creation"
        );
    }

    #[test]
    fn gpus_reported_unhealthy_are_unusable_not_idle() {
        let nd = "Standard_ND96asr_v4";
        let mut xid = node("nd-1", "ndv4", nd, "8", true);
        xid["status"]["conditions"] = json!([
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            {"type": "XIDErrors", "status": "True", "reason": "XIDErrors", "message": "XID 79 on GPU 3"},
            {"type": "GPUMissing", "status": "False", "reason": "NoGPUMissing"}]);
        let mut dropped = node("nd-2", "ndv4", nd, "6", true);
        dropped["status"]["capacity"] = json!({"nvidia.com/gpu": "8"});
        let mut healthy = node("nd-3", "ndv4", nd, "8", true);
        healthy["status"]["conditions"] = json!([{"type": "XIDErrors", "status": "False"}]);
        let mut ledger = PodLedger::default();
        ledger.add(&pod("p1", "nd-1", "1", "Running"), &resources());
        ledger.add(&pod("p3", "nd-3", "8", "Running"), &resources());
        let report = account_now(&[xid, dropped, healthy], &DraDevices::default(), &ledger);
        let figures = |n: &GpuNode| {
            (
                n.gpus_allocatable,
                n.gpus_capacity,
                n.gpus_requested,
                n.gpus_idle,
                n.gpus_unusable,
            )
        };
        let nodes: Vec<_> = report.gpu_node_list.iter().map(figures).collect();
        assert_eq!(nodes, [(8, 8, 1, 0, 7), (6, 8, 0, 6, 2), (8, 8, 8, 0, 0)]);
        assert_eq!(
            (
                report.gpus_allocatable,
                report.gpus_requested,
                report.gpus_idle,
                report.gpus_unusable
            ),
            (22, 9, 6, 9)
        );
        assert_eq!(
            (report.pools[0].gpus_idle, report.pools[0].gpus_unusable),
            (6, 9)
        );
        let unhealthy = &report.unhealthy_nodes;
        assert_eq!(unhealthy.len(), 2);
        assert_eq!(
            (unhealthy[0].node.as_str(), unhealthy[0].gpus_unusable),
            ("nd-1", 7)
        );
        assert_eq!(unhealthy[0].conditions.len(), 1);
        assert_eq!(unhealthy[0].conditions[0].message, "XID 79 on GPU 3");
        assert_eq!(
            (unhealthy[1].unhealthy_devices, unhealthy[1].gpus_unusable),
            (2, 2)
        );
        assert!(unhealthy[1].conditions.is_empty());
        let rules: Vec<_> = report
            .findings
            .iter()
            .map(|f| (f.rule, f.node.as_str(), f.gpus))
            .collect();
        assert_eq!(
            rules,
            [
                (UNHEALTHY, "nd-1", 7),
                (UNHEALTHY, "nd-2", 2),
                (IDLE, "nd-2", 6)
            ]
        );
        let why = [
            "XIDErrors (XID 79 on GPU 3)",
            "the device plugin offers 6 of its 8 GPUs",
        ];
        for (finding, why) in report.findings.iter().zip(why) {
            assert!(finding.message.contains(why), "{}", finding.message);
        }
    }

    #[test]
    fn a_node_whose_free_gpus_are_all_unusable_is_not_idle() {
        let mut down = node("nd-1", "ndv4", "Standard_ND96asr_v4", "0", true);
        down["status"]["capacity"] = json!({"nvidia.com/gpu": "8"});
        down["status"]["conditions"] = json!([{"type": "UnhealthyNvidiaDevicePlugin", "status": "True",
            "reason": "NVIDIA device plugin service is not active"}]);
        let report = account_now(&[down], &DraDevices::default(), &PodLedger::default());
        assert_eq!((report.gpus_idle, report.gpus_unusable), (0, 8));
        let rules: Vec<_> = report.findings.iter().map(|f| f.rule).collect();
        assert_eq!(rules, [UNHEALTHY]);
        assert!(report.findings[0].message.contains(
            "UnhealthyNvidiaDevicePlugin (NVIDIA device plugin service is not active), the device plugin offers 0 of its 8 GPUs"
        ), "{}", report.findings[0].message);
    }

    #[test]
    fn durations_read_in_days_and_hours() {
        assert_eq!(duration(5), "5 h");
        assert_eq!(duration(48), "2 d");
        assert_eq!(duration(50), "2 d 2 h");
    }
}
