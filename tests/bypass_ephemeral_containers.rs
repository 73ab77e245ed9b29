//! `kubectl debug` adds ephemeral containers through the
//! `pods/ephemeralcontainers` subresource: the containers it adds are judged
//! as the pod's own containers were, and nothing else about the pod is. On
//! a pod bound for GPU nodes, `/mutate` first hides the node's GPUs from
//! each debug container it adds (`NVIDIA_VISIBLE_DEVICES=void`).
use crate::common;

use common::webhooks::{Cluster, Review};
use serde_json::{json, Value};

const WEBHOOK: &str = "ephemeralcontainers.validate.gpu-admission.io";
const MUTATING: &str = "ephemeralcontainers.mutate.gpu-admission.io";

/// A running pod as the apiserver holds it (placed, scheduled).
fn running_pod(gpus: Option<&str>, ephemeral: Value) -> Value {
    let resources = match gpus {
        Some(n) => json!({"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": n},
                          "limits": {"memory": "16Gi", "nvidia.com/gpu": n}}),
        None => json!({"requests": {"cpu": "500m", "memory": "512Mi"}}),
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer-0", "namespace": "ml", "uid": "8f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b",
                     "resourceVersion": "48213"},
        "spec": {
            "containers": [{"name": "pytorch", "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                            "command": ["python", "train.py"], "resources": resources}],
            "ephemeralContainers": ephemeral,
            "nodeName": "aks-gpu-12345678-vmss000000",
            "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
        },
        "status": {"phase": "Running"}
    })
}

/// What `kubectl debug -it trainer-0 --image=busybox:1.36 --target=pytorch`
/// adds, with `extra` merged in (a profile's securityContext, env).
fn debugger(name: &str, extra: Value) -> Value {
    let mut c = json!({
        "name": name,
        "image": "busybox:1.36",
        "imagePullPolicy": "IfNotPresent",
        "stdin": true,
        "tty": true,
        "targetContainerName": "pytorch",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File"
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

fn debug(old: Value, new: Value) -> Review {
    Review::update(old, new).subresource("ephemeralcontainers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_privileged_debug_container_in_a_gpu_pod_is_denied() {
    let cluster = Cluster::start().await;
    let old = running_pod(Some("1"), json!([]));
    let sysadmin = debugger(
        "debugger-x7k2p",
        json!({"securityContext": {"privileged": true}}),
    );
    let new = running_pod(Some("1"), json!([sysadmin]));
    let outcome = cluster.admit(&debug(old, new)).await;
    assert_eq!(outcome.validated_by, [WEBHOOK], "{outcome:?}");
    assert_eq!(outcome.mutated_by, [MUTATING]);
    assert!(!outcome.allowed);
    let message = outcome.message();
    assert!(
        message.contains(
            "gpu-privileged: ephemeral container debugger-x7k2p is privileged in a GPU pod"
        ),
        "{message}"
    );
    assert!(message.contains("--profile=general"), "{message}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debug_container_given_every_gpu_is_denied() {
    let cluster = Cluster::start().await;
    let all_gpus = json!({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]});
    // In a CPU pod and in a GPU pod alike: the debug container holds no GPU.
    for gpus in [None, Some("1")] {
        let old = running_pod(gpus, json!([]));
        let new = running_pod(gpus, json!([debugger("debugger-q9w8e", all_gpus.clone())]));
        let outcome = cluster.admit(&debug(old, new)).await;
        assert_eq!(outcome.validated_by, [WEBHOOK], "{outcome:?}");
        assert!(!outcome.allowed, "{gpus:?}: {outcome:?}");
        assert!(
            outcome.message().contains(
                "gpu-visible-devices-leak: ephemeral container debugger-q9w8e sets NVIDIA_VISIBLE_DEVICES"
            ),
            "{}",
            outcome.message()
        );
    }
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordinary_debugging_and_containers_added_earlier_are_let_through() {
    let cluster = Cluster::start().await;
    // kubectl debug with the default profile on a GPU pod: the debug
    // container gets the GPUs hidden from it, and is let through.
    let old = running_pod(Some("1"), json!([]));
    let new = running_pod(Some("1"), json!([debugger("debugger-a1b2c", json!({}))]));
    let outcome = cluster.admit(&debug(old, new)).await;
    assert_eq!(outcome.mutated_by, [MUTATING], "{outcome:?}");
    assert!(outcome.allowed, "{}", outcome.message());
    let object = outcome.object.clone().unwrap();
    assert_eq!(
        object["spec"]["ephemeralContainers"][0]["env"],
        json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}])
    );
    assert_eq!(object["spec"]["containers"][0].get("env"), None);

    // On a CPU pod off the GPU nodes: not even sent.
    let mut cpu = running_pod(None, json!([]));
    cpu["spec"].as_object_mut().unwrap().remove("tolerations");
    cpu["spec"]["nodeName"] = json!("aks-system-12345678-vmss000000");
    let mut with_debugger = cpu.clone();
    with_debugger["spec"]["ephemeralContainers"] = json!([debugger("debugger-c3d4e", json!({}))]);
    let outcome = cluster.admit(&debug(cpu, with_debugger)).await;
    assert!(!outcome.sent(), "{outcome:?}");
    assert!(outcome.allowed);

    // A privileged debug container added before (when the webhook was not
    // routing the subresource) does not block the next, harmless one: only
    // what the request adds is judged.
    let earlier = debugger(
        "debugger-old11",
        json!({"securityContext": {"privileged": true}}),
    );
    let hidden = debugger(
        "debugger-d4e5f",
        json!({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}),
    );
    let old = running_pod(Some("1"), json!([earlier.clone()]));
    let new = running_pod(Some("1"), json!([earlier, hidden]));
    let outcome = cluster.admit(&debug(old, new)).await;
    assert_eq!(outcome.validated_by, [WEBHOOK], "{outcome:?}");
    assert!(outcome.allowed, "{}", outcome.message());

    // A privileged debug container in a CPU pod is not a GPU matter.
    let old = running_pod(None, json!([]));
    let new = running_pod(
        None,
        json!([debugger(
            "debugger-z9y8x",
            json!({"securityContext": {"privileged": true}})
        )]),
    );
    let outcome = cluster.admit(&debug(old, new)).await;
    assert!(outcome.allowed, "{}", outcome.message());
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cuda_debug_container_gets_the_gpus_hidden_and_a_device_list_mount_is_denied() {
    let cluster = Cluster::start().await;
    // A CUDA image sets NVIDIA_VISIBLE_DEVICES=all in its own environment;
    // on the GPU node the NVIDIA runtime would hand it every GPU.
    let cuda = debugger(
        "debugger-cuda1",
        json!({"image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}),
    );
    let old = running_pod(Some("1"), json!([]));
    let new = running_pod(Some("1"), json!([cuda]));
    let outcome = cluster.admit(&debug(old.clone(), new)).await;
    assert_eq!(outcome.mutated_by, [MUTATING], "{outcome:?}");
    assert_eq!(outcome.validated_by, [WEBHOOK]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert_eq!(
        outcome.object.unwrap()["spec"]["ephemeralContainers"][0]["env"],
        json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}])
    );

    // The device list the NVIDIA runtime reads in volume-mounts mode.
    let mounted = debugger(
        "debugger-mnt22",
        json!({"volumeMounts": [{"name": "scratch", "mountPath": "/var/run/nvidia-container-devices/all"}]}),
    );
    let new = running_pod(Some("1"), json!([mounted]));
    let outcome = cluster.admit(&debug(old, new)).await;
    assert!(!outcome.allowed);
    assert!(
        outcome.message().contains(
            "gpu-visible-devices-leak: ephemeral container debugger-mnt22 mounts a volume at /var/run/nvidia-container-devices"
        ),
        "{}",
        outcome.message()
    );
    cluster.stop().await;
}
