//! `gpu-admission evaluate --cluster DUMP` judges where pods land, their
//! namespace tiers and their fit as `serve` does in the cluster the dump
//! was taken from: the same pods, sent to `serve` (watching a fake API
//! server that holds the cluster, `/mutate` then `/validate` of the
//! patched pod, as kube-apiserver calls them) and to `evaluate` with a
//! dump of the same Nodes, NodePools and Namespaces, get the same verdicts
//! and the same messages.
use crate::common;

use common::fake_apiserver::{FakeApiServer, NAMESPACES, NODEPOOLS, NODES};
use common::in_cluster::InCluster;
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn namespace(name: &str, labels: &[(&str, &str)]) -> Value {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels}, "status": {"phase": "Active"}})
}

/// An AKS node of agent pool `pool`: a CPU node, or a GPU node of `size`
/// (tainted `sku=gpu`).
fn node(name: &str, pool: &str, size: Option<&str>) -> Value {
    let mut labels = json!({"kubernetes.azure.com/agentpool": pool, "agentpool": pool,
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": "Standard_D4s_v5"});
    let mut taints = json!([]);
    let mut allocatable = json!({"cpu": "3860m", "memory": "14Gi"});
    if let Some(size) = size {
        labels["kubernetes.azure.com/accelerator"] = json!("nvidia");
        labels["node.kubernetes.io/instance-type"] = json!(size);
        taints = json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]);
        allocatable["nvidia.com/gpu"] = json!("1");
    }
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints, "providerID": format!("azure:///{name}")},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}})
}

fn cluster_objects() -> Vec<Value> {
    vec![
        namespace("apps", &[]),
        namespace("research", &[("gpu-admission.io/tier", "standard")]),
        namespace(
            "llm",
            &[
                ("gpu-admission.io/tier", "premium"),
                ("gpu-admission.io/premium-gpus", "true"),
            ],
        ),
        node("aks-system-12345678-vmss000000", "system", None),
        node(
            "aks-gpunp-12345678-vmss000000",
            "gpunp",
            Some("Standard_NC4as_T4_v3"),
        ),
        node(
            "aks-a100-12345678-vmss000000",
            "a100",
            Some("Standard_NC24ads_A100_v4"),
        ),
        // A GPU NodePool that scales from zero: no node of it exists yet.
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "h100-spot"},
            "spec": {"template": {"metadata": {"labels": {"workload": "llm"}}, "spec": {
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                    "values": ["Standard_ND96isr_H100_v5"]}],
                "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]}}}}),
    ]
}

const GPU_NODE: &str = "aks-gpunp-12345678-vmss000000";
const A100_NODE: &str = "aks-a100-12345678-vmss000000";
const CPU_NODE: &str = "aks-system-12345678-vmss000000";

fn pod(name: &str, namespace: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec})
}

fn cpu(extra: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "app", "image": "python:3.12",
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    spec
}

fn gpu(extra: Value, limits: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "resources": {"limits": limits}}]});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    spec
}

/// The pods judged, each with whether `serve` should allow it.
fn cases() -> Vec<(Value, bool)> {
    let all = json!([{"operator": "Exists"}]);
    let one_gpu = json!({"nvidia.com/gpu": "1", "cpu": "2", "memory": "8Gi"});
    vec![
        // nodeName
        (
            pod("by-name", "apps", cpu(json!({"nodeName": GPU_NODE}))),
            false,
        ),
        (
            pod("by-name-cpu", "apps", cpu(json!({"nodeName": CPU_NODE}))),
            true,
        ),
        // kubernetes.io/hostname
        (
            pod(
                "by-host",
                "apps",
                cpu(
                    json!({"nodeSelector": {"kubernetes.io/hostname": GPU_NODE}, "tolerations": all}),
                ),
            ),
            false,
        ),
        (
            pod(
                "by-host-cpu",
                "apps",
                cpu(json!({"nodeSelector": {"kubernetes.io/hostname": CPU_NODE}})),
            ),
            true,
        ),
        // agent pool, by either label
        (
            pod(
                "by-pool",
                "apps",
                cpu(
                    json!({"nodeSelector": {"kubernetes.azure.com/agentpool": "gpunp"}, "tolerations": all}),
                ),
            ),
            false,
        ),
        (
            pod(
                "by-legacy-pool",
                "apps",
                cpu(
                    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "agentpool", "operator": "In", "values": ["gpunp"]}]}]}}},
                    "tolerations": all}),
                ),
            ),
            false,
        ),
        (
            pod(
                "by-pool-cpu",
                "apps",
                cpu(json!({"nodeSelector": {"kubernetes.azure.com/agentpool": "system"}})),
            ),
            true,
        ),
        // A NodePool with no node yet.
        (
            pod(
                "by-nodepool",
                "apps",
                cpu(
                    json!({"nodeSelector": {"karpenter.sh/nodepool": "h100-spot"}, "tolerations": all}),
                ),
            ),
            false,
        ),
        // Tiers: the A100 node's size, bound by name.
        (
            pod(
                "a100-default",
                "apps",
                gpu(json!({"nodeName": A100_NODE}), one_gpu.clone()),
            ),
            false,
        ),
        (
            pod(
                "a100-standard",
                "research",
                gpu(json!({"nodeName": A100_NODE}), one_gpu.clone()),
            ),
            false,
        ),
        (
            pod(
                "a100-premium",
                "llm",
                gpu(json!({"nodeName": A100_NODE}), one_gpu.clone()),
            ),
            true,
        ),
        (
            pod(
                "t4-default",
                "apps",
                gpu(
                    json!({"nodeSelector": {"kubernetes.azure.com/agentpool": "gpunp"}}),
                    one_gpu,
                ),
            ),
            true,
        ),
        // Fit against the node's size: CPU, and MIG slices.
        (
            pod(
                "t4-too-big",
                "apps",
                gpu(
                    json!({"nodeName": GPU_NODE}),
                    json!({"nvidia.com/gpu": "1", "cpu": "16", "memory": "8Gi"}),
                ),
            ),
            false,
        ),
        (
            pod(
                "mig-eight",
                "llm",
                gpu(
                    json!({"nodeName": A100_NODE}),
                    json!({"nvidia.com/mig-1g.10gb": "8", "cpu": "2", "memory": "8Gi"}),
                ),
            ),
            false,
        ),
    ]
}

fn review(object: &Value, uid: &str) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "name": object["metadata"]["name"], "namespace": object["metadata"]["namespace"],
        "operation": "CREATE",
        "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
        "object": object, "oldObject": null, "dryRun": false}})
}

/// What `serve` answers for the CREATE of `pod`: `/mutate`, then
/// `/validate` of the patched pod.
async fn serve_verdict(server: &InCluster, pod: &Value) -> (bool, String) {
    let (status, body) = server
        .request(
            "POST",
            "/mutate",
            &serde_json::to_vec(&review(pod, "m")).unwrap(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    if body["response"]["allowed"] != true {
        let message = body["response"]["status"]["message"].as_str().unwrap_or("");
        return (false, message.to_string());
    }
    let mut patched = pod.clone();
    if let Some(patch) = common::review_patch(&body) {
        json_patch::patch(&mut patched, &patch).unwrap();
    }
    server.validate(&review(&patched, "v")).await
}

/// What `evaluate` answers for each pod of `pods`, with `extra` flags.
fn evaluate(dir: &std::path::Path, pods: &[Value], extra: &[&str]) -> Vec<(bool, String)> {
    let manifest = dir.join("pods.json");
    std::fs::write(
        &manifest,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": pods})).unwrap(),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["evaluate", "-o", "json", "--as", "alice@example.com"])
        .args(["--as-group", "system:authenticated", "-f"])
        .arg(&manifest)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    results
        .iter()
        .map(|r| {
            let denials: Vec<&str> = r["denials"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_str().unwrap())
                .collect();
            (r["allowed"] == true, denials.join("\n"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluate_with_a_cluster_dump_judges_node_reach_tiers_and_fit_as_serve_does() {
    let fake = FakeApiServer::start(vec![NAMESPACES, NODES, NODEPOOLS]).await;
    fake.change(|cluster| {
        for object in cluster_objects() {
            cluster.apply(object);
        }
    });
    let server = InCluster::serve(&fake);
    server.wait_until_ready().await;
    // NodePools are watched beside the nodes: wait until serve sees it.
    let (by_nodepool, _) = cases()
        .into_iter()
        .find(|(p, _)| p["metadata"]["name"] == "by-nodepool")
        .unwrap();
    server
        .denial_eventually(&review(&by_nodepool, "np"), "the NodePool")
        .await;

    // The dump, as `kubectl get nodes,nodepools,namespaces -o json` gives
    // it: the objects the fake serves.
    let mut items = fake.read(|c| c.objects(&NODES));
    items.extend(fake.read(|c| c.objects(&NODEPOOLS)));
    items.extend(fake.read(|c| c.objects(&NAMESPACES)));
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("cluster.json");
    std::fs::write(
        &dump,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": items})).unwrap(),
    )
    .unwrap();

    let cases = cases();
    let pods: Vec<Value> = cases.iter().map(|(p, _)| p.clone()).collect();
    let offline = evaluate(dir.path(), &pods, &["--cluster", dump.to_str().unwrap()]);
    assert_eq!(offline.len(), cases.len());
    for ((pod, expected), (allowed, message)) in cases.iter().zip(&offline) {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let (served, served_message) = serve_verdict(&server, pod).await;
        assert_eq!(served, *expected, "serve, {name}: {served_message}");
        assert_eq!(*allowed, served, "evaluate, {name}: {message}");
        assert_eq!(message, &served_message, "{name}");
    }
    // The messages name the nodes and sizes of the cluster.
    let message = |name: &str| {
        let i = cases
            .iter()
            .position(|(p, _)| p["metadata"]["name"] == name)
            .unwrap();
        offline[i].1.clone()
    };
    assert!(
        message("by-name").contains(&format!("bound by spec.nodeName to GPU node {GPU_NODE}")),
        "{}",
        message("by-name")
    );
    assert!(
        message("by-pool").contains(&format!("(it can land on {GPU_NODE})")),
        "{}",
        message("by-pool")
    );
    assert!(
        message("mig-eight").contains("Standard_NC24ads_A100_v4 (1 × A100 80GB), holds at most 7"),
        "{}",
        message("mig-eight")
    );

    // Without the dump, evaluate judges by labels alone: a CPU pod that
    // names a GPU node, its host name or its pool passes.
    let alone = evaluate(dir.path(), &pods, &[]);
    for name in ["by-name", "by-host", "by-pool", "by-legacy-pool"] {
        let i = cases
            .iter()
            .position(|(p, _)| p["metadata"]["name"] == name)
            .unwrap();
        assert!(alone[i].0, "{name} denied without the dump: {}", alone[i].1);
    }
}
