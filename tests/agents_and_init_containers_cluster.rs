//! Node agents and privileged init containers, which must not be denied,
//! as a cluster running the shipped configuration treats them: the
//! `deploy/base/` webhook configurations decide which webhooks a
//! DaemonSet or a notebook pod is sent to, then `/mutate` and `/validate`
//! answer over TLS. Privileged *regular* containers in GPU pods stay denied.
use crate::common;

use common::webhooks::{Cluster, Review};
use serde_json::{json, Value};

const DAEMON_SET_CONTROLLER: &str = "system:serviceaccount:kube-system:daemon-set-controller";
/// JupyterHub's hub, which spawns the notebook pods (KubeSpawner).
const JUPYTERHUB: &str = "system:serviceaccount:jhub:hub";

fn gpu_taint_toleration() -> Value {
    json!({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
}

/// fluent-bit as its Helm chart deploys it, told to tolerate the GPU pools'
/// `sku=gpu` taint so GPU nodes' logs are shipped too.
fn fluent_bit() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "fluent-bit", "namespace": "logging",
            "labels": {"app.kubernetes.io/name": "fluent-bit", "app.kubernetes.io/instance": "fluent-bit"}},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "fluent-bit", "app.kubernetes.io/instance": "fluent-bit"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "fluent-bit", "app.kubernetes.io/instance": "fluent-bit"}},
                "spec": {
                    "serviceAccountName": "fluent-bit",
                    "tolerations": [gpu_taint_toleration()],
                    "containers": [{
                        "name": "fluent-bit",
                        "image": "cr.fluentbit.io/fluent/fluent-bit:3.1.9",
                        "args": ["--workdir=/fluent-bit/etc", "--config=/fluent-bit/etc/conf/fluent-bit.conf"],
                        "ports": [{"name": "http", "containerPort": 2020, "protocol": "TCP"}],
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                        "volumeMounts": [
                            {"name": "varlog", "mountPath": "/var/log"},
                            {"name": "config", "mountPath": "/fluent-bit/etc/conf"}
                        ]
                    }],
                    "volumes": [
                        {"name": "varlog", "hostPath": {"path": "/var/log"}},
                        {"name": "config", "configMap": {"name": "fluent-bit"}}
                    ]
                }
            }
        }
    })
}

/// The pod the DaemonSet controller makes from fluent-bit's template.
fn fluent_bit_pod() -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "fluent-bit-8zq4m",
            "generateName": "fluent-bit-",
            "namespace": "logging",
            "labels": {"app.kubernetes.io/name": "fluent-bit", "app.kubernetes.io/instance": "fluent-bit"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "fluent-bit",
                "uid": "3f2b8c1d-6e4a-4f0b-9a7c-5d1e2f3a4b6c", "controller": true, "blockOwnerDeletion": true}]
        }
    });
    pod["spec"] = fluent_bit()["spec"]["template"]["spec"].clone();
    pod
}

/// A GPU notebook as JupyterHub's KubeSpawner creates it, with the chart's
/// default `block-cloud-metadata` init container (iptables, privileged).
fn notebook() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "jupyter-alice",
            "namespace": "jhub",
            "labels": {"app": "jupyterhub", "component": "singleuser-server", "hub.jupyter.org/username": "alice"},
            "annotations": {"hub.jupyter.org/username": "alice"}
        },
        "spec": {
            "automountServiceAccountToken": false,
            "initContainers": [{
                "name": "block-cloud-metadata",
                "image": "quay.io/jupyterhub/k8s-network-tools:4.0.0",
                "command": ["iptables", "--append", "OUTPUT", "--protocol", "tcp",
                    "--destination", "169.254.169.254", "--destination-port", "80", "--jump", "DROP"],
                "securityContext": {"privileged": true, "runAsUser": 0,
                    "capabilities": {"add": ["NET_ADMIN"]}}
            }],
            "containers": [{
                "name": "notebook",
                "image": "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07",
                "args": ["jupyterhub-singleuser"],
                "ports": [{"name": "notebook-port", "containerPort": 8888, "protocol": "TCP"}],
                "env": [{"name": "JUPYTERHUB_USER", "value": "alice"}],
                "resources": {
                    "requests": {"cpu": "2", "memory": "8Gi"},
                    "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
                },
                "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": false}
            }],
            "securityContext": {"fsGroup": 100}
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_agent_daemonset_tolerating_the_gpu_taint_is_allowed_with_a_warning() {
    let cluster = Cluster::start().await;
    let outcome = cluster.admit(&Review::create(fluent_bit())).await;
    assert!(outcome.mutated_by.is_empty(), "{:?}", outcome.mutated_by);
    assert_eq!(
        outcome.validated_by,
        ["workloads.validate.gpu-admission.io"]
    );
    assert!(outcome.allowed, "{}", outcome.message());
    assert_eq!(outcome.object, Some(fluent_bit()), "not mutated");
    assert_eq!(outcome.warnings.len(), 1, "{:?}", outcome.warnings);
    assert!(
        outcome.warnings[0].starts_with(
            "gpu-node-isolation-daemonset: DaemonSet fluent-bit: asks for no GPU but tolerates the GPU node taint, so it runs a pod on every GPU node; fine for a node agent"
        ),
        "{:?}",
        outcome.warnings
    );

    // Its pods, made by the DaemonSet controller, are never validated;
    // /mutate hides GPUs from them (they can land on GPU nodes).
    let outcome = cluster
        .admit(
            &Review::create(fluent_bit_pod())
                .by(DAEMON_SET_CONTROLLER, &["system:serviceaccounts"]),
        )
        .await;
    assert_eq!(outcome.mutated_by, ["hide.mutate.gpu-admission.io"]);
    assert!(outcome.validated_by.is_empty(), "{outcome:?}");
    assert!(outcome.allowed);
    for container in outcome.object.unwrap()["spec"]["containers"]
        .as_array()
        .unwrap()
    {
        assert_eq!(
            container["env"].as_array().unwrap().last().unwrap(),
            &json!({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}),
            "{container}"
        );
    }
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_notebook_with_a_privileged_init_container_is_placed_and_allowed_with_a_warning() {
    let cluster = Cluster::start().await;
    let outcome = cluster
        .admit(&Review::create(notebook()).by(JUPYTERHUB, &["system:serviceaccounts"]))
        .await;
    assert_eq!(outcome.mutated_by, ["pods.mutate.gpu-admission.io"]);
    assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
    assert!(outcome.allowed, "{}", outcome.message());
    let object = outcome.object.clone().unwrap();
    assert_eq!(
        object["metadata"]["annotations"]["gpu-admission.io/placement-profile"],
        "aks-nvidia"
    );
    assert_eq!(
        object["spec"]["tolerations"],
        json!([gpu_taint_toleration()])
    );
    assert_eq!(
        object["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{object}"
    );
    assert_eq!(outcome.warnings.len(), 1, "{:?}", outcome.warnings);
    assert!(
        outcome.warnings[0].starts_with(
            "gpu-privileged-init: init container block-cloud-metadata is privileged in a GPU pod; it finishes before the GPU containers start, so it is allowed"
        ),
        "{:?}",
        outcome.warnings
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_notebook_with_a_privileged_regular_container_is_denied() {
    let cluster = Cluster::start().await;
    // The GPU container itself, or a sidecar next to it.
    let mut privileged_notebook = notebook();
    privileged_notebook["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    let mut privileged_sidecar = notebook();
    privileged_sidecar["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({
            "name": "proxy",
            "image": "quay.io/jupyterhub/k8s-network-tools:4.0.0",
            "command": ["sleep", "infinity"],
            "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}},
            "securityContext": {"privileged": true}
        }));
    for (pod, container) in [
        (privileged_notebook, "notebook"),
        (privileged_sidecar, "proxy"),
    ] {
        let outcome = cluster
            .admit(&Review::create(pod).by(JUPYTERHUB, &["system:serviceaccounts"]))
            .await;
        assert_eq!(outcome.mutated_by, ["pods.mutate.gpu-admission.io"]);
        assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
        assert!(
            !outcome.allowed,
            "{container}: privileged container allowed"
        );
        assert_eq!(
            outcome.denied_by.as_deref(),
            Some("pods.validate.gpu-admission.io")
        );
        assert!(
            outcome.message().contains(&format!(
                "gpu-privileged: container {container} is privileged in a GPU pod and would see every GPU of the node"
            )),
            "{container}: {}",
            outcome.message()
        );
    }
    cluster.stop().await;
}
