//! GPU pods pinned to a node whose GPUs AKS's Node Problem Detector reports
//! unhealthy: the server's node cache watches the Nodes of a fake API
//! server (conditions as NPD writes them, with heartbeats), and the shipped
//! webhook configurations send `/mutate` and `/validate` over TLS. A pod or
//! a workload template pinned there by `spec.nodeName` or by
//! `kubernetes.io/hostname` is allowed with a warning naming the node, the
//! conditions and what to do; a pod pinned to a healthy node, or a CPU pod,
//! gets none; a condition that clears takes the warning with it.
use crate::common;

use common::fake_apiserver::{wait_until, FakeApiServer, NODES};
use common::webhooks::{Cluster, Outcome, Review};
use gpu_admission::cluster::watch::{CacheMetrics, Settings};
use gpu_admission::cluster::ClusterNodes;
use gpu_admission::gpu::NodeLookup;
use serde_json::{json, Value};

const BROKEN: &str = "aks-ndv4-38491027-vmss000002";
const HEALTHY: &str = "aks-ndv4-38491027-vmss000003";
const WARNING: &str = "gpu-pod-unhealthy-node";

/// An ND96asr_v4 node of pool ndv4 as the API server lists it, with the
/// conditions NPD keeps on it; `xid` sets its `XIDErrors` condition True.
fn node(name: &str, xid: bool) -> Value {
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": "2026-12-05T09:58:12Z", "lastTransitionTime": "2026-12-05T07:41:03Z"})
    };
    let xid = if xid {
        condition(
            "XIDErrors",
            "True",
            "XIDErrors",
            "XID 79 (GPU has fallen off the bus) on GPU 00000001:00:00.0",
        )
    } else {
        condition("XIDErrors", "False", "NoXIDErrors", "no XID errors")
    };
    json!({"apiVersion": "v1", "kind": "Node",
    "metadata": {"name": name, "labels": {
        "kubernetes.azure.com/agentpool": "ndv4", "kubernetes.azure.com/accelerator": "nvidia",
        "node.kubernetes.io/instance-type": "Standard_ND96asr_v4",
        "kubernetes.io/os": "linux", "kubernetes.io/hostname": name}},
    "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
    "status": {
        "capacity": {"cpu": "96", "memory": "900Gi", "nvidia.com/gpu": "8"},
        "allocatable": {"cpu": "95", "memory": "880Gi", "nvidia.com/gpu": "8"},
        "conditions": [
            condition("GPUMissing", "False", "NoGPUMissing", "GPU count matches"),
            xid,
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")
        ]}})
}

fn trainer(gpus: &str) -> Value {
    json!({"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "resources": {"requests": {"cpu": "8", "memory": "64Gi"},
            "limits": {"nvidia.com/gpu": gpus, "cpu": "8", "memory": "64Gi"}}})
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"}, "spec": spec})
}

fn hostname_affinity(node: &str) -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}})
}

/// The namespace may use ND-series GPUs (gpu-sku-allowlist).
const PREMIUM: [(&str, &str); 2] = [
    ("gpu-admission.io/tier", "premium"),
    ("gpu-admission.io/premium-gpus", "true"),
];

async fn admit(cluster: &Cluster, object: Value) -> Outcome {
    let review = Review::create(object).namespace_labels(&PREMIUM);
    cluster.admit(&review).await
}

fn warning(outcome: &Outcome) -> Option<&String> {
    assert!(outcome.allowed, "{}", outcome.message());
    outcome.warnings.iter().find(|w| w.contains(WARNING))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_pods_pinned_to_a_node_with_unhealthy_gpus_are_warned() {
    let fake = FakeApiServer::start(vec![NODES]).await;
    fake.change(|c| {
        c.apply(node(BROKEN, true));
        c.apply(node(HEALTHY, false));
    });
    let (nodes, task) =
        ClusterNodes::start(fake.client(), Settings::default(), CacheMetrics::default());
    let listed = |n: &ClusterNodes| n.nodes().is_some_and(|s| s.listed && s.nodes.len() == 2);
    wait_until("the node cache to list both nodes", || listed(&nodes)).await;
    let cluster = Cluster::start_with_nodes(nodes.clone()).await;

    let outcome = admit(
        &cluster,
        pod(
            "by-name",
            json!({"nodeName": BROKEN, "containers": [trainer("8")]}),
        ),
    )
    .await;
    let by_name = warning(&outcome).expect("a warning for spec.nodeName");
    assert_eq!(
        by_name,
        &format!(
            "{WARNING}: pod is pinned (spec.nodeName) to node {BROKEN}, whose GPUs Node Problem \
            Detector reports unhealthy: XIDErrors (XID 79 (GPU has fallen off the bus) on GPU \
            00000001:00:00.0); its GPUs are unusable and the pod would fail or crawl there; pick a \
            healthy node, or remove the pin and let the scheduler choose"
        )
    );

    let outcome = admit(
        &cluster,
        pod(
            "by-hostname",
            json!({"affinity": hostname_affinity(BROKEN), "containers": [trainer("1")]}),
        ),
    )
    .await;
    let by_hostname = warning(&outcome).expect("a warning for hostname affinity");
    assert!(
        by_hostname.contains(&format!(
            "pinned (kubernetes.io/hostname in its nodeSelector / node affinity) to node {BROKEN}, whose GPUs"
        )),
        "{by_hostname}"
    );

    // A Job's template pinned by a hostname nodeSelector: warned, named.
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "finetune", "namespace": "ml"},
        "spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": BROKEN}, "containers": [trainer("2")]}}}});
    let outcome = admit(&cluster, job).await;
    let templated = warning(&outcome).expect("a warning for the Job's template");
    assert!(
        templated.contains("Job finetune") && templated.contains(BROKEN),
        "{templated}"
    );

    // The healthy twin, and a CPU pod on the broken node: no warning.
    for pinned in [
        pod(
            "healthy",
            json!({"nodeName": HEALTHY, "containers": [trainer("8")]}),
        ),
        pod(
            "healthy-hostname",
            json!({"affinity": hostname_affinity(HEALTHY), "containers": [trainer("1")]}),
        ),
    ] {
        let outcome = admit(&cluster, pinned).await;
        assert_eq!(warning(&outcome), None, "{:?}", outcome.warnings);
    }
    let outcome = admit(
        &cluster,
        pod(
            "cpu",
            json!({"affinity": hostname_affinity(BROKEN),
                "containers": [{"name": "c", "image": "busybox:1.36"}]}),
        ),
    )
    .await;
    assert!(
        !outcome.warnings.iter().any(|w| w.contains(WARNING)),
        "{:?}",
        outcome.warnings
    );

    // NPD clears the condition once the node is repaired: the cache follows.
    fake.change(|c| c.apply(node(BROKEN, false)));
    let repaired = |n: &ClusterNodes| {
        n.nodes()
            .is_some_and(|s| s.nodes.iter().all(|n| n.conditions.is_empty()))
    };
    wait_until("the node cache to see the repair", || repaired(&nodes)).await;
    let outcome = admit(
        &cluster,
        pod(
            "after-repair",
            json!({"nodeName": BROKEN, "containers": [trainer("8")]}),
        ),
    )
    .await;
    assert_eq!(warning(&outcome), None, "{:?}", outcome.warnings);
    cluster.stop().await;
    task.abort();
}
