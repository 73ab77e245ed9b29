//! GPUs hidden by default, through the shipped webhook configurations over
//! TLS (patches applied as kube-apiserver applies them, RFC 6902): a pod
//! that asks for no GPU but can land on GPU nodes gets
//! `NVIDIA_VISIBLE_DEVICES=void` pinned on its containers, so what only a
//! pin could leak (the image's own ENV, `envFrom`) is allowed hidden,
//! and a DaemonSet is admitted as its pods will be, pins included. What a
//! pin cannot fix (an explicit value) is still denied, and GPU
//! infrastructure by identity is never pinned.
use crate::common;

use common::webhooks::{Cluster, Outcome, Review};
use serde_json::{json, Value};

const DAEMONSET_CONTROLLER: &str = "system:serviceaccount:kube-system:daemon-set-controller";
const HIDE: &str = "hide.mutate.gpu-admission.io";
const VOID: &str = "void";

fn gpu_toleration() -> Value {
    json!({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
}

fn daemonset(namespace: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
}

/// The pod the DaemonSet controller makes of `ds` for one node.
fn daemon_pod(ds: &Value) -> Value {
    let mut spec = ds["spec"]["template"]["spec"].clone();
    spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
            "values": ["aks-gpupool-27182818-vmss000000"]}]}]}}});
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{}-x7k2p", ds["metadata"]["name"].as_str().unwrap()),
            "namespace": ds["metadata"]["namespace"],
            "labels": ds["spec"]["template"]["metadata"]["labels"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                "name": ds["metadata"]["name"], "uid": "0c7c1b3e", "controller": true}]},
        "spec": spec})
}

fn by_controller(pod: Value) -> Review {
    Review::create(pod).by(DAEMONSET_CONTROLLER, &["system:serviceaccounts"])
}

fn visible_devices(outcome: &Outcome, field: &str, index: usize) -> Option<String> {
    let env = outcome
        .object
        .as_ref()?
        .pointer(&format!("/spec/{field}/{index}/env"))?;
    env.as_array()?
        .iter()
        .rev()
        .find(|e| e["name"] == "NVIDIA_VISIBLE_DEVICES")
        .map(|e| e["value"].as_str().unwrap_or("").to_string())
}

fn allowed(outcome: &Outcome) {
    assert!(outcome.allowed, "{}", outcome.message());
}

fn denied_by(outcome: &Outcome, text: &str) {
    assert!(!outcome.allowed, "allowed: {outcome:?}");
    assert!(
        outcome.message().contains(text),
        "{text:?} not in: {}",
        outcome.message()
    );
}

fn cuda_prepull() -> Value {
    daemonset(
        "platform",
        "cuda-prepull",
        json!({
            "tolerations": [gpu_toleration()],
            "nodeSelector": {"kubernetes.azure.com/accelerator": "nvidia"},
            "initContainers": [{"name": "pull", "image": "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04",
                "command": ["sh", "-c", "true"]}],
            "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]
        }),
    )
}

fn log_agent() -> Value {
    daemonset(
        "logging",
        "fluent-bit",
        json!({
            "tolerations": [gpu_toleration()],
            "containers": [{"name": "fluent-bit", "image": "cr.fluentbit.io/fluent/fluent-bit:3.1.9",
                "envFrom": [{"secretRef": {"name": "fluent-bit-outputs"}}],
                "volumeMounts": [{"name": "varlog", "mountPath": "/var/log"}]}],
            "volumes": [{"name": "varlog", "hostPath": {"path": "/var/log"}}]
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cuda_prepull_daemonset_is_admitted_and_its_pods_are_pinned() {
    let c = Cluster::start().await;
    let ds = cuda_prepull();
    // At apply, judged as its pods will be: pinned, so no leak.
    let outcome = c.admit(&Review::create(ds.clone())).await;
    allowed(&outcome);
    assert!(
        outcome
            .warnings
            .iter()
            .any(|w| w.starts_with("gpu-node-isolation-daemonset:")),
        "{:?}",
        outcome.warnings
    );
    assert!(outcome.patch.is_empty(), "templates are never mutated");
    // Its pods get the pin from /mutate, on the init container too.
    let outcome = c.admit(&by_controller(daemon_pod(&ds))).await;
    allowed(&outcome);
    assert_eq!(outcome.mutated_by, [HIDE]);
    assert!(
        outcome.validated_by.is_empty(),
        "DaemonSet pods are not validated"
    );
    assert_eq!(
        visible_devices(&outcome, "initContainers", 0).as_deref(),
        Some(VOID)
    );
    assert_eq!(
        visible_devices(&outcome, "containers", 0).as_deref(),
        Some(VOID)
    );
    // A second call adds nothing (reinvocation).
    let again = c
        .admit(&by_controller(outcome.object.clone().unwrap()))
        .await;
    assert!(again.patch.is_empty(), "{:?}", again.patch);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_agent_taking_env_from_a_secret_is_admitted_and_pinned() {
    let c = Cluster::start().await;
    let ds = log_agent();
    let outcome = c.admit(&Review::create(ds.clone())).await;
    allowed(&outcome);
    let outcome = c.admit(&by_controller(daemon_pod(&ds))).await;
    allowed(&outcome);
    assert_eq!(outcome.mutated_by, [HIDE]);
    assert_eq!(
        visible_devices(&outcome, "containers", 0).as_deref(),
        Some(VOID)
    );
    // envFrom is kept: the explicit entry wins over it.
    assert_eq!(
        outcome.object.as_ref().unwrap()["spec"]["containers"][0]["envFrom"],
        ds["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    );
    // The same agent tolerating every taint (the usual way such agents are
    // installed) is pinned as well.
    let mut everywhere = ds.clone();
    everywhere["spec"]["template"]["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    allowed(&c.admit(&Review::create(everywhere.clone())).await);
    let outcome = c.admit(&by_controller(daemon_pod(&everywhere))).await;
    assert_eq!(
        visible_devices(&outcome, "containers", 0).as_deref(),
        Some(VOID)
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tolerate_all_pod_with_a_cuda_image_is_pinned_not_denied() {
    let c = Cluster::start().await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "operator", "namespace": "tools"},
        "spec": {"tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "tool", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                "command": ["sh", "-c", "exec /manager"]}]}});
    let outcome = c.admit(&Review::create(pod)).await;
    allowed(&outcome);
    assert_eq!(outcome.mutated_by, [HIDE]);
    assert_eq!(
        visible_devices(&outcome, "containers", 0).as_deref(),
        Some(VOID)
    );
    assert!(
        outcome
            .warnings
            .iter()
            .any(|w| w.starts_with("gpu-tolerate-all:")),
        "{:?}",
        outcome.warnings
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_visible_devices_all_is_still_denied_and_never_overwritten() {
    let c = Cluster::start().await;
    let mut ds = log_agent();
    ds["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]);
    let outcome = c.admit(&Review::create(ds.clone())).await;
    denied_by(
        &outcome,
        "container fluent-bit sets NVIDIA_VISIBLE_DEVICES but asks for no GPU",
    );
    // Its pods, were they made: the user's entry is kept as written.
    let outcome = c.admit(&by_controller(daemon_pod(&ds))).await;
    assert_eq!(
        visible_devices(&outcome, "containers", 0).as_deref(),
        Some("all")
    );
    assert!(outcome.patch.is_empty(), "{:?}", outcome.patch);
    // A bare pod the same: pinned nowhere, denied.
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent", "namespace": "logging"},
        "spec": {"tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "agent", "image": "busybox:1.36",
                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
                {"name": "side", "image": "busybox:1.36"}]}});
    let outcome = c.admit(&Review::create(pod)).await;
    denied_by(
        &outcome,
        "container agent sets NVIDIA_VISIBLE_DEVICES but asks for no GPU",
    );
    c.stop().await;
}

fn device_plugin(namespace: &str) -> Value {
    daemonset(
        namespace,
        "nvidia-device-plugin",
        json!({
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                gpu_toleration()],
            "nodeSelector": {"kubernetes.azure.com/accelerator": "nvidia"},
            "containers": [{"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_infrastructure_is_never_pinned() {
    let c = Cluster::start().await;
    // In a listed namespace: admitted, and its pods keep every GPU.
    let ds = device_plugin("gpu-operator");
    allowed(&c.admit(&Review::create(ds.clone())).await);
    let outcome = c.admit(&by_controller(daemon_pod(&ds))).await;
    allowed(&outcome);
    assert!(outcome.patch.is_empty(), "{:?}", outcome.patch);
    assert_eq!(visible_devices(&outcome, "containers", 0), None);
    // In a namespace an admin labelled, a sidecar of another image too:
    // the namespace is the identity.
    let mut labelled = device_plugin("gpu-stack");
    labelled["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "sidecar", "image": "busybox:1.36"}));
    let outcome = c
        .admit(
            &by_controller(daemon_pod(&labelled))
                .namespace_labels(&[("gpu-admission.io/gpu-infrastructure", "true")]),
        )
        .await;
    assert!(outcome.patch.is_empty(), "{:?}", outcome.patch);
    // An infrastructure image elsewhere is not silently blinded: it is
    // judged, and the denial says where GPU infrastructure belongs.
    let elsewhere = device_plugin("monitoring");
    let outcome = c.admit(&Review::create(elsewhere.clone())).await;
    denied_by(&outcome, "GPU infrastructure that must see every GPU");
    denied_by(
        &outcome,
        "kubectl label namespace monitoring gpu-admission.io/gpu-infrastructure=true",
    );
    let outcome = c.admit(&by_controller(daemon_pod(&elsewhere))).await;
    assert_eq!(visible_devices(&outcome, "containers", 0), None);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_cannot_reach_gpu_nodes_and_mirror_pods_are_not_sent() {
    let c = Cluster::start().await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"containers": [{"name": "web", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}]}});
    let outcome = c.admit(&Review::create(pod)).await;
    allowed(&outcome);
    assert!(outcome.mutated_by.is_empty(), "{:?}", outcome.mutated_by);
    let mirror = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "static-web-aks-gpupool-27182818-vmss000000", "namespace": "shop",
            "annotations": {"kubernetes.io/config.mirror": "0f3b"}},
        "spec": {"nodeName": "aks-gpupool-27182818-vmss000000",
            "containers": [{"name": "web", "image": "busybox:1.36"}]}});
    let outcome = c
        .admit(&Review::create(mirror).by(
            "system:node:aks-gpupool-27182818-vmss000000",
            &["system:nodes"],
        ))
        .await;
    assert!(outcome.mutated_by.is_empty(), "{:?}", outcome.mutated_by);
    c.stop().await;
}
