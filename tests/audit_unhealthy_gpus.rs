//! `gpu-admission audit` of a dump (as `kubectl get nodes,pods -o json`
//! gives it) whose GPU nodes carry AKS Node Problem Detector conditions
//! and device plugins that dropped GPUs: those GPUs are unusable, not
//! idle, in JSON, text and HTML, and priced apart. Every expected number is
//! summed by hand:
//!
//! | node | GPUs (capacity / allocatable) | health | requested | idle | unusable |
//! |---|---|---|---|---|---|
//! | nd-xid (ND96asr_v4) | 8 / 8 | XIDErrors True | 1 | 0 | 7 |
//! | nd-dropped (ND96asr_v4) | 8 / 6 | device plugin offers 6 | 0 | 6 | 2 |
//! | nd-plugin-down (ND96asr_v4) | 8 / 0 | UnhealthyNvidiaDevicePlugin True | 0 | 0 | 8 |
//! | nd-healthy (ND96asr_v4) | 8 / 8 | GPUMissing False | 8 | 0 | 0 |
//! | a100-idle (NC24ads_A100_v4) | 1 / 1 | no conditions | 0 | 1 | 0 |
//!
//! Prices: ND96asr_v4 27.2 an hour (3.4 per GPU, over its 8 GPUs whatever
//! the device plugin offers), NC24ads_A100_v4 3.6. Unusable: 17 × 3.4 × 24
//! = 1387.2 a day; idle: 6 × 3.4 × 24 + 3.6 × 24 = 576.
use crate::common;

use regex::Regex;
use serde_json::{json, Value};
use std::ffi::OsStr;
use std::path::Path;

const ND: &str = "Standard_ND96asr_v4";
const A100: &str = "Standard_NC24ads_A100_v4";

fn node(name: &str, size: &str, capacity: u32, allocatable: u32, conditions: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": "2026-11-20T00:00:00Z", "labels": {
            "kubernetes.azure.com/agentpool": if size == ND { "ndv4" } else { "a100" },
            "node.kubernetes.io/instance-type": size, "topology.kubernetes.io/region": "eastus",
            "kubernetes.azure.com/accelerator": "nvidia", "kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "96", "nvidia.com/gpu": capacity.to_string()},
            "allocatable": {"cpu": "95", "nvidia.com/gpu": allocatable.to_string()},
            "conditions": conditions}})
}

fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": "2026-12-05T09:58:12Z", "lastTransitionTime": "2026-12-05T07:41:03Z"})
}

fn pod(name: &str, node: &str, gpus: u32) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {"nodeName": node, "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "resources": {"requests": {"cpu": "8", "memory": "64Gi"},
                    "limits": {"nvidia.com/gpu": gpus.to_string(), "cpu": "8", "memory": "64Gi"}}}]},
        "status": {"phase": "Running", "startTime": "2026-12-01T00:01:00Z"}})
}

fn dump() -> Value {
    let ready = condition(
        "Ready",
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    );
    json!({"apiVersion": "v1", "kind": "List", "items": [
        node("nd-xid", ND, 8, 8, json!([ready,
            condition("XIDErrors", "True", "XIDErrors", "XID 79 (GPU has fallen off the bus) on GPU 3"),
            condition("GPUMissing", "False", "NoGPUMissing", "GPU count matches")])),
        node("nd-dropped", ND, 8, 6, json!([ready])),
        node("nd-plugin-down", ND, 8, 0, json!([ready,
            condition("UnhealthyNvidiaDevicePlugin", "True", "NvidiaDevicePluginUnhealthy",
                "NVIDIA device plugin service is not active")])),
        node("nd-healthy", ND, 8, 8, json!([ready,
            condition("GPUMissing", "False", "NoGPUMissing", "GPU count matches")])),
        node("a100-idle", A100, 1, 1, json!([ready])),
        pod("train-xid", "nd-xid", 1),
        pod("train-healthy", "nd-healthy", 8),
    ]})
}

const PRICES: &str = r#"
date: "2026-12-01"
source: "test prices"
example: true
prices:
  - {region: eastus, size: Standard_ND96asr_v4, perHour: 27.2}
  - {region: eastus, size: Standard_NC24ads_A100_v4, perHour: 3.6}
"#;

/// What `gpu-admission audit -o FORMAT --prices` prints for the dump.
fn audit(format: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (file, prices) = (
        dir.path().join("cluster.json"),
        dir.path().join("prices.yaml"),
    );
    std::fs::write(&file, dump().to_string()).unwrap();
    std::fs::write(&prices, PRICES).unwrap();
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let (file, policies, prices) = (file.as_os_str(), policies.as_os_str(), prices.as_os_str());
    common::run_cli([
        OsStr::new("audit"),
        OsStr::new("-o"),
        OsStr::new(format),
        OsStr::new("-f"),
        file,
        OsStr::new("--policies"),
        policies,
        OsStr::new("--prices"),
        prices,
    ])
}

#[test]
fn unhealthy_gpus_are_counted_unusable_not_idle_in_the_json() {
    let report: Value = serde_json::from_str(&audit("json")).unwrap();
    let nodes = &report["nodes"];
    let totals = [
        "gpuNodes",
        "gpusAllocatable",
        "gpusRequested",
        "gpusIdle",
        "gpusUnusable",
    ]
    .map(|k| nodes[k].as_i64().unwrap());
    assert_eq!(totals, [5, 8 + 6 + 8 + 1, 9, 7, 17]);
    // (name, two counts) of each row of a list.
    let rows = |list: &str, name: &str, counts: [&str; 2]| -> Vec<(String, i64, i64)> {
        (nodes[list].as_array().unwrap().iter())
            .map(|r| {
                (
                    r[name].as_str().unwrap().to_string(),
                    r[counts[0]].as_i64().unwrap(),
                    r[counts[1]].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let pools = rows("pools", "pool", ["gpusIdle", "gpusUnusable"]);
    assert_eq!(pools, [("a100".into(), 1, 0), ("ndv4".into(), 6, 17)]);
    let unhealthy = rows(
        "unhealthyNodes",
        "node",
        ["unhealthyDevices", "gpusUnusable"],
    );
    assert_eq!(
        unhealthy,
        [
            ("nd-xid".into(), 0, 7),
            ("nd-dropped".into(), 2, 2),
            ("nd-plugin-down".into(), 8, 8)
        ]
    );
    assert_eq!(
        nodes["unhealthyNodes"][0]["conditions"],
        json!([{"type": "XIDErrors", "status": "True", "reason": "XIDErrors",
            "message": "XID 79 (GPU has fallen off the bus) on GPU 3"}])
    );
    let findings: Vec<(&str, &str, i64)> = (nodes["findings"].as_array().unwrap().iter())
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap();
            (s("rule"), s("node"), f["gpus"].as_i64().unwrap())
        })
        .filter(|(rule, _, _)| rule.starts_with("gpu-node-unhealthy") || *rule == "gpu-node-idle")
        .collect();
    assert_eq!(
        findings,
        [
            ("gpu-node-unhealthy", "nd-xid", 7),
            ("gpu-node-unhealthy", "nd-dropped", 2),
            ("gpu-node-idle", "nd-dropped", 6),
            ("gpu-node-unhealthy", "nd-plugin-down", 8),
            ("gpu-node-idle", "a100-idle", 1),
        ],
        "a node whose free GPUs are all unusable is not idle"
    );
    // Priced apart: 17 unusable GPUs at 3.4, idle ones at their node's price.
    let money = &report["money"];
    assert_eq!(money["unusableNodesPerDay"].as_f64().unwrap(), 1387.2);
    assert_eq!(money["idleNodesPerDay"].as_f64().unwrap(), 576.0);
    assert_eq!(money["unpricedUnusableGpus"], 0);
    // The running pod on the node with XID errors is a finding of its own.
    let on_broken = (report["findings"].as_array().unwrap().iter())
        .find(|f| f["policy"] == "gpu-pod-unhealthy-node")
        .expect("the pod on nd-xid is warned");
    assert_eq!(on_broken["name"], "train-xid");
}

#[test]
fn the_text_lists_unusable_gpus_and_the_conditions() {
    let text = audit("text");
    assert!(
        text.contains("GPU nodes: 5, 23 GPUs allocatable, 9 requested, 7 idle, 17 unusable (reported unhealthy)"),
        "{text}"
    );
    assert!(
        text.contains(
            "Node nd-xid (ndv4): [gpu-node-unhealthy] GPUs reported unhealthy: XIDErrors (XID 79 (GPU has fallen off the bus) on GPU 3); 7 GPUs are unusable and paid for"
        ),
        "{text}"
    );
    assert!(
        text.contains("[gpu-node-unhealthy] GPUs reported unhealthy: the device plugin offers 6 of its 8 GPUs; 2 GPUs are unusable"),
        "{text}"
    );
    assert!(text.contains("1387.20 USD in unusable node GPUs"), "{text}");
}

#[test]
fn the_page_shows_unhealthy_capacity() {
    let html = audit("html");
    let value = |id: &str| {
        let re = Regex::new(&format!(r#"id="{id}" data-value="([^"]*)""#)).unwrap();
        re.captures(&html).unwrap_or_else(|| panic!("no #{id}"))[1].to_string()
    };
    assert_eq!(value("total-node-gpus-unusable"), "17");
    assert_eq!(value("total-node-gpus-idle"), "7");
    assert_eq!(value("total-gpus-unusable"), "17");
    assert_eq!(value("total-cost-unusable-nodes"), "1387.20");
    assert!(html.contains(r#"data-pool="ndv4" data-size="Standard_ND96asr_v4" data-nodes="4" data-allocatable="22" data-requested="9" data-idle="6" data-unusable="17""#), "pool row");
    for (node, unusable) in [("nd-xid", 7), ("nd-dropped", 2), ("nd-plugin-down", 8)] {
        assert!(
            html.contains(&format!(
                r#"<tr class="unhealthy" data-node="{node}" data-pool="ndv4" data-unusable="{unusable}">"#
            )),
            "{node} listed"
        );
    }
    assert!(html.contains(
        "<code>UnhealthyNvidiaDevicePlugin</code> NVIDIA device plugin service is not active"
    ));
    assert!(!html.contains(r#"data-node="nd-healthy" data-pool="ndv4" data-unusable"#));
}
