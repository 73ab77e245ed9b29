//! DaemonSet and mirror pods skip the pods webhook only when the DaemonSet
//! controller or a node makes them: an ownerReference or an annotation
//! written by anyone else exempts nothing.
use crate::common;

use common::webhooks::{Cluster, Review};
use serde_json::{json, Value};

const DAEMON_SET_CONTROLLER: &str = "system:serviceaccount:kube-system:daemon-set-controller";

/// A privileged pod asking for a GPU, with `metadata` merged in.
fn privileged_gpu_pod(metadata: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "miner", "namespace": "ml"},
        "spec": {"containers": [{
            "name": "worker",
            "image": "docker.io/someone/gpu-worker:1.0",
            "securityContext": {"privileged": true},
            "resources": {"limits": {"nvidia.com/gpu": "1"}}
        }]}
    });
    for (k, v) in metadata.as_object().unwrap() {
        pod["metadata"][k] = v.clone();
    }
    pod
}

fn daemonset_owner(controller: bool) -> Value {
    json!([{
        "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "node-agent",
        "uid": "0b6f2a4e-5d7c-4e1a-9d62-2f3c1b0a9e11", "controller": controller,
        "blockOwnerDeletion": true
    }])
}

/// A GPU-stack DaemonSet's pod: no GPU request, tolerates every taint,
/// privileged (as DCGM exporter and the device plugin are).
fn dcgm_pod(metadata: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "dcgm-exporter-7xk2p", "namespace": "gpu-operator"},
        "spec": {
            "containers": [{
                "name": "dcgm-exporter",
                "image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.8-3.6.0-ubuntu22.04",
                "securityContext": {"privileged": true},
                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
            }],
            "tolerations": [{"operator": "Exists"}],
            "nodeSelector": {"kubernetes.azure.com/accelerator": "nvidia"}
        }
    });
    for (k, v) in metadata.as_object().unwrap() {
        pod["metadata"][k] = v.clone();
    }
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_daemonset_owner_reference_exempts_nothing() {
    let cluster = Cluster::start().await;
    for controller in [false, true] {
        let pod = privileged_gpu_pod(json!({"ownerReferences": daemonset_owner(controller)}));
        let outcome = cluster.admit(&Review::create(pod)).await;
        assert_eq!(
            outcome.validated_by,
            ["pods.validate.gpu-admission.io"],
            "{outcome:?}"
        );
        assert!(!outcome.allowed, "controller: {controller}: {outcome:?}");
        assert!(
            outcome.message().contains("container worker is privileged"),
            "{}",
            outcome.message()
        );
    }
    // A forged Node owner (what mirror pods carry) exempts nothing either.
    let node_owner = json!([{"apiVersion": "v1", "kind": "Node", "name": "aks-gpu-1",
        "uid": "6a1d3c2b-0f4e-4b7a-8c5d-9e2f1a3b4c5d", "controller": true}]);
    let pod = privileged_gpu_pod(json!({"ownerReferences": node_owner}));
    let outcome = cluster.admit(&Review::create(pod)).await;
    assert!(!outcome.allowed, "{outcome:?}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_the_daemonset_controller_and_mirror_pods_of_nodes_are_not_validated() {
    let cluster = Cluster::start().await;
    let owned = json!({"ownerReferences": daemonset_owner(true)});

    let real = Review::create(dcgm_pod(owned.clone())).by(
        DAEMON_SET_CONTROLLER,
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
        ],
    );
    let outcome = cluster.admit(&real).await;
    // Never validated; /mutate (which hides GPUs from pods that can land
    // on GPU nodes) leaves GPU infrastructure as it is.
    assert!(outcome.validated_by.is_empty(), "{outcome:?}");
    assert!(outcome.patch.is_empty(), "{outcome:?}");
    assert!(outcome.allowed);

    // Without per-controller service accounts the controller manager makes
    // the pod under its own name; it sets the controller reference itself.
    let outcome = cluster
        .admit(&Review::create(dcgm_pod(owned.clone())).by("system:kube-controller-manager", &[]))
        .await;
    assert!(outcome.validated_by.is_empty(), "{outcome:?}");

    // The same pod made by alice is sent (and judged as any pod).
    let outcome = cluster.admit(&Review::create(dcgm_pod(owned))).await;
    assert_eq!(
        outcome.validated_by,
        ["pods.validate.gpu-admission.io"],
        "{outcome:?}"
    );

    let mirror = json!({
        "name": "gpu-probe-aks-gpu-1",
        "annotations": {
            "kubernetes.io/config.mirror": "3f2b9c0d8e7a6f5b4c3d2e1f0a9b8c7d",
            "kubernetes.io/config.source": "file"
        },
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "aks-gpu-1",
            "uid": "6a1d3c2b-0f4e-4b7a-8c5d-9e2f1a3b4c5d", "controller": true}]
    });
    let from_node =
        Review::create(dcgm_pod(mirror.clone())).by("system:node:aks-gpu-1", &["system:nodes"]);
    let outcome = cluster.admit(&from_node).await;
    assert!(!outcome.sent(), "{outcome:?}");

    // The mirror annotation written by anyone but a node exempts nothing.
    let forged = privileged_gpu_pod(mirror);
    let outcome = cluster.admit(&Review::create(forged)).await;
    assert_eq!(
        outcome.validated_by,
        ["pods.validate.gpu-admission.io"],
        "{outcome:?}"
    );
    assert!(!outcome.allowed, "{outcome:?}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemonset_template_is_still_judged_on_the_workloads_webhook() {
    let daemonset = json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "node-agent", "namespace": "ml"},
        "spec": {
            "selector": {"matchLabels": {"app": "node-agent"}},
            "template": {
                "metadata": {"labels": {"app": "node-agent"}},
                "spec": {"containers": [{
                    "name": "worker",
                    "image": "docker.io/someone/gpu-worker:1.0",
                    "securityContext": {"privileged": true},
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}
                }]}
            }
        }
    });
    let cluster = Cluster::start().await;
    let outcome = cluster.admit(&Review::create(daemonset)).await;
    assert_eq!(
        outcome.validated_by,
        ["workloads.validate.gpu-admission.io"],
        "{outcome:?}"
    );
    assert!(!outcome.allowed, "{outcome:?}");
    assert!(
        outcome.message().contains("DaemonSet node-agent")
            && outcome.message().contains("privileged"),
        "{}",
        outcome.message()
    );
    cluster.stop().await;
}
