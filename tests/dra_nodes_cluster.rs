//! GPU nodes whose GPUs DRA serves as an extended resource (KEP-5004): a
//! DeviceClass with `extendedResourceName: nvidia.com/gpu`, a ResourceSlice
//! of NVIDIA's driver per node, and no `nvidia.com/gpu` in the node's
//! allocatable resources. `serve` (watching a fake API server that holds
//! the cluster, `/mutate` then `/validate` over TLS), `evaluate --cluster`
//! and `audit` take such a node for a GPU node with as many GPUs as its
//! slices offer: every pod gets the verdict and the message it gets on the
//! twin node whose device plugin reports the same GPUs.
use crate::common;

use common::fake_apiserver::{
    FakeApiServer, Resource, DEVICE_CLASSES, NAMESPACES, NODES, RESOURCE_SLICES,
};
use common::in_cluster::InCluster;
use serde_json::{json, Value};

const PODS: Resource = Resource::new("", "v1", "Pod", "pods", true);

/// An on-premises node (no GPU label, a size the catalog does not know)
/// and an AKS A100 node (2 GPUs, tainted `sku=gpu`), each with its GPUs
/// reported by the device plugin (`plugin`) or served by DRA.
const ONPREM_PLUGIN: &str = "dgx-plugin-01";
const ONPREM_DRA: &str = "dgx-dra-01";
const A100_PLUGIN: &str = "aks-a100plugin-12345678-vmss000000";
const A100_DRA: &str = "aks-a100dra-12345678-vmss000000";
const CPU_NODE: &str = "aks-system-12345678-vmss000000";

fn node(name: &str, size: &str, gpus: Option<u32>, tainted: bool) -> Value {
    let mut allocatable = json!({"cpu": "95", "memory": "400Gi", "pods": "110"});
    if let Some(gpus) = gpus {
        allocatable["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    let taints = if tainted {
        json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}])
    } else {
        json!([])
    };
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": "2026-11-01T00:00:00Z", "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": size}},
        "spec": {"taints": taints},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// NVIDIA's DRA driver's class for whole GPUs, serving `nvidia.com/gpu`.
fn device_class() -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com", "creationTimestamp": "2026-11-01T00:00:00Z"},
        "spec": {"extendedResourceName": "nvidia.com/gpu", "selectors": [{"cel": {"expression":
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}})
}

/// The slice NVIDIA's driver publishes for `gpus` GPUs of node `node`.
fn slice(node: &str, gpus: u32) -> Value {
    let devices: Vec<Value> = (0..gpus)
        .map(|i| {
            json!({"name": format!("gpu-{i}"), "attributes": {
            "type": {"string": "gpu"}, "productName": {"string": "NVIDIA A100 80GB PCIe"},
            "uuid": {"string": format!("GPU-4e0d3f8a-{i:04}")}},
            "capacity": {"memory": {"value": "80Gi"}}})
        })
        .collect();
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-gpu.nvidia.com-x7k2p")},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}})
}

fn cluster_objects() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"},
            "status": {"phase": "Active"}}),
        node(CPU_NODE, "Standard_D4s_v5", None, false),
        node(ONPREM_PLUGIN, "dgxa100", Some(8), false),
        node(ONPREM_DRA, "dgxa100", None, false),
        node(A100_PLUGIN, "Standard_NC48ads_A100_v4", Some(2), true),
        node(A100_DRA, "Standard_NC48ads_A100_v4", None, true),
        device_class(),
        slice(ONPREM_DRA, 8),
        slice(A100_DRA, 2),
    ]
}

fn pod(name: &str, node: &str, gpus: Option<u32>) -> Value {
    let mut resources = json!({"requests": {"cpu": "2", "memory": "8Gi"}});
    if let Some(gpus) = gpus {
        resources["limits"] = json!({"nvidia.com/gpu": gpus.to_string()});
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
        "spec": {"nodeName": node, "containers": [{"name": "main",
            "image": "nvcr.io/nvidia/pytorch:24.08-py3", "resources": resources}]}})
}

/// Pairs of pods, the first bound to a node whose device plugin reports
/// its GPUs, the second to its DRA-served twin, with whether `serve`
/// allows them.
fn cases() -> Vec<(Value, Value, bool)> {
    let pair = |name: &str, plugin: &str, dra: &str, gpus: Option<u32>, allowed: bool| {
        (
            pod(&format!("{name}-plugin"), plugin, gpus),
            pod(&format!("{name}-dra"), dra, gpus),
            allowed,
        )
    };
    vec![
        // A CPU pod bound to a GPU node by name.
        pair("cpu", ONPREM_PLUGIN, ONPREM_DRA, None, false),
        pair("cpu-a100", A100_PLUGIN, A100_DRA, None, false),
        // A GPU pod that fits, and one asking for more GPUs than the node has.
        pair("one-gpu", ONPREM_PLUGIN, ONPREM_DRA, Some(1), true),
        pair("four-gpus", A100_PLUGIN, A100_DRA, Some(4), false),
    ]
}

fn review(object: &Value, uid: &str) -> Value {
    common::admission_review(uid, "CREATE", object, None, "alice@example.com")
}

/// What `serve` answers for the CREATE of `pod`: `/mutate`, then
/// `/validate` of the patched pod; with the patch.
async fn serve_verdict(server: &InCluster, pod: &Value) -> (bool, String, Value) {
    let body = serde_json::to_vec(&review(pod, "m")).unwrap();
    let (status, body) = server.request("POST", "/mutate", &body).await;
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    let patch = common::review_patch(&body).map_or(json!([]), |p| serde_json::to_value(p).unwrap());
    let mut patched = pod.clone();
    if let Some(patch) = common::review_patch(&body) {
        json_patch::patch(&mut patched, &patch).unwrap();
    }
    let (allowed, message) = server.validate(&review(&patched, "v")).await;
    (allowed, message, patch)
}

/// The same message, node names aside.
fn unnamed(message: &str) -> String {
    [
        (ONPREM_DRA, ONPREM_PLUGIN),
        (A100_DRA, A100_PLUGIN),
        ("-dra", "-plugin"),
    ]
    .iter()
    .fold(message.to_string(), |m, (dra, plugin)| {
        m.replace(dra, plugin)
    })
}

/// The JSON `gpu-admission` prints for `args`, `-f` each of `files`,
/// reading the cluster of `kubeconfig` if given.
fn run(args: &[&str], files: &[&std::path::Path], kubeconfig: Option<&std::path::Path>) -> Value {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-admission"));
    command.args(args);
    for file in files {
        command.arg("-f").arg(file);
    }
    if let Some(kubeconfig) = kubeconfig {
        command.env("KUBECONFIG", kubeconfig);
    }
    let out = (command.env_remove("KUBERNETES_SERVICE_HOST"))
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?} ({e}): {stderr}"))
}

fn write_list(path: &std::path::Path, items: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    std::fs::write(path, serde_json::to_vec(&list).unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dra_served_gpu_nodes_are_judged_as_device_plugin_gpu_nodes_by_serve_evaluate_and_audit() {
    let fake = FakeApiServer::start(vec![
        NAMESPACES,
        NODES,
        PODS,
        DEVICE_CLASSES,
        RESOURCE_SLICES,
    ])
    .await;
    fake.change(|cluster| {
        for object in cluster_objects() {
            cluster.apply(object);
        }
    });
    let server = InCluster::serve(&fake);
    server.wait_until_ready().await;
    // The device watches run beside the node watch: wait until serve sees
    // the slices.
    let cpu_dra = cases()[0].1.clone();
    server
        .denial_eventually(&review(&cpu_dra, "dra"), ONPREM_DRA)
        .await;

    let cases = cases();
    for (plugin, dra, expected) in &cases {
        let name = dra["metadata"]["name"].as_str().unwrap();
        let (plugin_allowed, plugin_message, plugin_patch) = serve_verdict(&server, plugin).await;
        let (allowed, message, patch) = serve_verdict(&server, dra).await;
        assert_eq!(
            plugin_allowed, *expected,
            "{name} on the plugin node: {plugin_message}"
        );
        assert_eq!(allowed, *expected, "{name}: {message}");
        assert_eq!(unnamed(&message), plugin_message, "{name}");
        assert_eq!(patch, plugin_patch, "{name}: the same placement and pins");
    }
    let (_, cpu_message, cpu_patch) = serve_verdict(&server, &cases[0].1).await;
    assert!(
        cpu_message.contains(&format!("bound by spec.nodeName to GPU node {ONPREM_DRA}")),
        "{cpu_message}"
    );
    assert!(
        cpu_patch.to_string().contains("NVIDIA_VISIBLE_DEVICES"),
        "{cpu_patch}"
    );
    let (_, four_message, _) = serve_verdict(&server, &cases[3].1).await;
    assert!(
        four_message.contains("pod asks for 4 GPUs but the largest node it can land on"),
        "{four_message}"
    );

    // The dump `kubectl get nodes,namespaces,deviceclasses,resourceslices
    // -o json` gives: `evaluate --cluster` answers as serve does.
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("cluster.json");
    let mut items = Vec::new();
    for kind in [NODES, NAMESPACES, DEVICE_CLASSES, RESOURCE_SLICES] {
        items.extend(fake.read(|c| c.objects(&kind)));
    }
    write_list(&dump, &items);
    let pods: Vec<Value> = cases
        .iter()
        .flat_map(|(p, d, _)| [p.clone(), d.clone()])
        .collect();
    let manifest = dir.path().join("pods.json");
    write_list(&manifest, &pods);
    let cluster = dump.to_str().unwrap();
    let args = [
        "evaluate",
        "-o",
        "json",
        "--as",
        "alice@example.com",
        "--cluster",
        cluster,
    ];
    let offline = run(&args, &[&manifest], None);
    for (pod, result) in pods.iter().zip(offline.as_array().unwrap()) {
        let name = pod["metadata"]["name"].as_str().unwrap();
        let (served, served_message, _) = serve_verdict(&server, pod).await;
        let denials: Vec<&str> = (result["denials"].as_array().unwrap().iter())
            .map(|d| d.as_str().unwrap())
            .collect();
        assert_eq!(
            result["allowed"] == true,
            served,
            "evaluate, {name}: {denials:?}"
        );
        assert_eq!(denials.join("\n"), served_message, "{name}");
    }

    // The audit counts the DRA-served GPUs as the node's allocatable GPUs,
    // from a dump and from the cluster alike.
    let running = {
        let mut p = pod("train-0", ONPREM_DRA, Some(3));
        p["metadata"]["uid"] = json!("uid-train-0");
        p["status"] = json!({"phase": "Running"});
        p
    };
    let pods_file = dir.path().join("running.json");
    write_list(&pods_file, std::slice::from_ref(&running));
    let report = run(&["audit", "-o", "json"], &[&dump, &pods_file], None);
    let nodes = &report["nodes"];
    assert_eq!(nodes["gpuNodes"], 4, "{nodes}");
    assert_eq!(nodes["gpusAllocatable"], 8 + 8 + 2 + 2, "{nodes}");
    assert_eq!(nodes["gpusRequested"], 3, "{nodes}");
    let listed = |report: &Value, name: &str| {
        (report["nodes"]["gpuNodeList"].as_array().unwrap().iter())
            .find(|n| n["name"] == name)
            .cloned()
    };
    let dra = listed(&report, ONPREM_DRA).expect("the DRA node is a GPU node");
    assert_eq!(
        (dra["gpusAllocatable"].clone(), dra["gpusIdle"].clone()),
        (json!(8), json!(5))
    );
    assert_eq!(listed(&report, A100_DRA).unwrap()["gpusAllocatable"], 2);
    // Without its DeviceClass and ResourceSlices, the dump shows no GPU on
    // the on-premises node, and none on the A100 node (a GPU node by its
    // size).
    let bare = dir.path().join("bare.json");
    write_list(&bare, &fake.read(|c| c.objects(&NODES)));
    let report = run(&["audit", "-o", "json"], &[&bare, &pods_file], None);
    assert!(listed(&report, ONPREM_DRA).is_none());
    assert_eq!(listed(&report, A100_DRA).unwrap()["gpusAllocatable"], 0);

    fake.change(|cluster| {
        cluster.apply(running.clone());
    });
    let kubeconfig = fake.kubeconfig(dir.path());
    let args = ["audit", "-o", "json"];
    let report = tokio::task::spawn_blocking(move || run(&args, &[], Some(&kubeconfig)))
        .await
        .unwrap();
    assert_eq!(
        report["nodes"]["gpusAllocatable"], 20,
        "{}",
        report["nodes"]
    );
    assert_eq!(listed(&report, ONPREM_DRA).unwrap()["gpusIdle"], 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_the_dra_api_is_served_as_before() {
    // resource.k8s.io/v1 not served (before Kubernetes 1.34): the device
    // watches are empty and synced, and the node cache judges by nodes.
    let fake = FakeApiServer::start(vec![NAMESPACES, NODES]).await;
    fake.change(|cluster| {
        for object in cluster_objects()
            .into_iter()
            .filter(|o| o["apiVersion"] == "v1")
        {
            cluster.apply(object);
        }
    });
    let server = InCluster::serve(&fake);
    server.wait_until_ready().await;
    let (allowed, message) = server
        .validate(&review(&pod("cpu", ONPREM_PLUGIN, None), "a"))
        .await;
    assert!(!allowed && message.contains(ONPREM_PLUGIN), "{message}");
    let (allowed, message) = server
        .validate(&review(&pod("cpu", ONPREM_DRA, None), "b"))
        .await;
    assert!(allowed, "no slice says the node has GPUs: {message}");
}
