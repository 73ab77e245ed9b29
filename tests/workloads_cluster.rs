//! Controllers of GPU pods (Deployments, Jobs, DaemonSets) and pods with
//! init containers, as a cluster running the shipped
//! configuration treats them: the `deploy/base/` webhook configurations
//! decide what reaches the server, then `/mutate` and `/validate` over TLS.
use crate::common;

use common::webhooks::{Cluster, Review};
use serde_json::{json, Value};

const DAEMON_SET_CONTROLLER: &str = "system:serviceaccount:kube-system:daemon-set-controller";

fn deployment(replicas: i64, container: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "llm-serve", "namespace": "inference", "labels": {"app": "llm-serve"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "llm-serve"}},
            "template": {"metadata": {"labels": {"app": "llm-serve"}},
                "spec": {"containers": [container]}}}
    })
}

fn vllm(privileged: bool) -> Value {
    let mut c = json!({
        "name": "vllm", "image": "vllm/vllm-openai:v0.6.3",
        "resources": {"requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
            "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}}
    });
    if privileged {
        c["securityContext"] = json!({"privileged": true});
    }
    c
}

fn daemonset(name: &str, namespace: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_updates_through_the_shipped_webhooks() {
    let cluster = Cluster::start().await;

    let plain = deployment(2, vllm(false));
    let privileged = deployment(2, vllm(true));
    let outcome = cluster
        .admit(&Review::update(plain.clone(), privileged.clone()))
        .await;
    assert_eq!(
        outcome.validated_by,
        ["workloads.validate.gpu-admission.io"]
    );
    assert!(!outcome.allowed, "privileged template update allowed");
    assert!(
        outcome
            .message()
            .contains("gpu-privileged: Deployment llm-serve: container vllm is privileged"),
        "{}",
        outcome.message()
    );

    // Scaled while its template would be denied: not even sent (the
    // template is unchanged), so an outage cannot block it; allowed.
    let outcome = cluster
        .admit(&Review::update(
            privileged.clone(),
            deployment(0, vllm(true)),
        ))
        .await;
    assert!(
        outcome.validated_by.is_empty(),
        "{:?}",
        outcome.validated_by
    );
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);

    // Labels of the controller only: not sent either.
    let mut relabelled = privileged.clone();
    relabelled["metadata"]["labels"]["cost-center"] = json!("4711");
    let outcome = cluster
        .admit(&Review::update(privileged.clone(), relabelled))
        .await;
    assert!(
        outcome.validated_by.is_empty(),
        "{:?}",
        outcome.validated_by
    );
    assert!(outcome.allowed, "{}", outcome.message());

    // A DaemonSet updated to leak every GPU of its nodes.
    let agent = |env: Value| {
        daemonset(
            "node-metrics",
            "monitoring",
            json!({
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "exporter", "image": "quay.io/prometheus/node-exporter:v1.8.2", "env": env}]
            }),
        )
    };
    let outcome = cluster
        .admit(&Review::update(
            agent(json!([])),
            agent(json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
        ))
        .await;
    assert_eq!(
        outcome.validated_by,
        ["workloads.validate.gpu-admission.io"]
    );
    assert!(!outcome.allowed, "DaemonSet leak update allowed");
    assert!(
        outcome
            .message()
            .contains("gpu-visible-devices-leak: DaemonSet node-metrics: container exporter"),
        "{}",
        outcome.message()
    );

    // A CronJob whose jobTemplate becomes privileged.
    let cron = |privileged: bool| {
        json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "nightly-eval", "namespace": "inference"},
            "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": {"activeDeadlineSeconds": 7200,
                "template": {"spec": {"restartPolicy": "Never", "containers": [vllm(privileged)]}}}}}
        })
    };
    let outcome = cluster
        .admit(&Review::update(cron(false), cron(true)))
        .await;
    assert_eq!(outcome.validated_by, ["cronjobs.validate.gpu-admission.io"]);
    assert!(!outcome.allowed, "CronJob jobTemplate update allowed");
    assert!(
        outcome
            .message()
            .contains("gpu-privileged: CronJob nightly-eval: container vllm is privileged"),
        "{}",
        outcome.message()
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_stack_and_node_agents_through_the_shipped_webhooks() {
    let cluster = Cluster::start().await;
    let gpu_toleration =
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
    let leak = json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]);

    // The device plugin by digest, in a namespace no admin marked: its
    // image alone exempts nothing, and the denial says how to mark it.
    let plugin = daemonset(
        "nvidia-device-plugin-daemonset",
        "kube-gpu",
        json!({
            "tolerations": gpu_toleration,
            "containers": [{"name": "nvidia-device-plugin-ctr",
                "image": "nvcr.io/nvidia/k8s-device-plugin@sha256:7d2c6d4b8a3e1f0c9b5a2e6d4f8c1b3a5e7d9f0b2c4a6e8d0f1b3c5a7e9d2f4b6",
                "env": leak}]
        }),
    );
    let outcome = cluster.admit(&Review::create(plugin.clone())).await;
    assert_eq!(
        outcome.validated_by,
        ["workloads.validate.gpu-admission.io"]
    );
    assert!(!outcome.allowed, "an image exempted a DaemonSet");
    assert!(
        outcome
            .message()
            .contains("kubectl label namespace kube-gpu gpu-admission.io/gpu-infrastructure=true"),
        "{}",
        outcome.message()
    );
    // In a namespace an admin labelled as GPU infrastructure: allowed.
    let outcome = cluster
        .admit(
            &Review::create(plugin)
                .namespace_labels(&[("gpu-admission.io/gpu-infrastructure", "true")]),
        )
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);

    // A look-alike image, and a device-plugin sidecar next to a leaking container.
    let miner = daemonset(
        "k8s-device-plugin",
        "kube-gpu",
        json!({
            "tolerations": gpu_toleration,
            "containers": [{"name": "plugin", "image": "docker.io/someone/k8s-device-plugin-miner:latest", "env": leak}]
        }),
    );
    let outcome = cluster.admit(&Review::create(miner)).await;
    assert!(!outcome.allowed, "look-alike image exempt");
    assert!(
        outcome
            .message()
            .contains("container plugin sets NVIDIA_VISIBLE_DEVICES"),
        "{}",
        outcome.message()
    );
    let sidecar = daemonset(
        "nvidia-device-plugin-daemonset",
        "kube-gpu",
        json!({
            "tolerations": gpu_toleration,
            "containers": [
                {"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"},
                {"name": "helper", "image": "python:3.12-slim", "env": leak}
            ]
        }),
    );
    let outcome = cluster.admit(&Review::create(sidecar)).await;
    assert!(!outcome.allowed, "device-plugin sidecar exempted its pod");
    assert!(
        outcome
            .message()
            .contains("container helper sets NVIDIA_VISIBLE_DEVICES"),
        "{}",
        outcome.message()
    );

    // A bare pod that copies the device plugin and writes a DaemonSet owner.
    let forged = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nvidia-device-plugin-x7k2p", "namespace": "ml",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                "name": "nvidia-device-plugin-daemonset", "uid": "5b0c0a57-8f1e-4c1e-9d55-0b6c2f1f6e21",
                "controller": true}]},
        "spec": {"tolerations": gpu_toleration, "containers": [{"name": "nvidia-device-plugin-ctr",
            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0", "env": leak}]}
    });
    let outcome = cluster.admit(&Review::create(forged.clone())).await;
    assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
    assert!(!outcome.allowed, "forged ownerReference exempted the pod");
    // The same pod made by the DaemonSet controller is not validated (its
    // DaemonSet was); /mutate leaves the variable it names as it is.
    let outcome = cluster
        .admit(&Review::create(forged).by(DAEMON_SET_CONTROLLER, &["system:serviceaccounts"]))
        .await;
    assert!(
        outcome.validated_by.is_empty() && outcome.allowed,
        "{outcome:?}"
    );
    assert!(outcome.patch.is_empty(), "{outcome:?}");

    // A log agent tolerating the GPU taints by key: allowed, one warning.
    let fluent_bit = daemonset(
        "fluent-bit",
        "logging",
        json!({
            "tolerations": [
                {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [{"name": "fluent-bit", "image": "cr.fluentbit.io/fluent/fluent-bit:3.1.9"}]
        }),
    );
    let outcome = cluster.admit(&Review::create(fluent_bit)).await;
    assert_eq!(
        outcome.validated_by,
        ["workloads.validate.gpu-admission.io"]
    );
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(
        outcome.warnings.len() == 1
            && outcome.warnings[0]
                .starts_with("gpu-node-isolation-daemonset: DaemonSet fluent-bit:"),
        "{:?}",
        outcome.warnings
    );

    // The NVIDIA DRA kubelet plugin, selecting GPU nodes: allowed, no warning.
    let dra = daemonset(
        "nvidia-dra-driver-gpu-kubelet-plugin",
        "nvidia-dra-driver-gpu",
        json!({
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "tolerations": gpu_toleration,
            "containers": [
                {"name": "compute-domains", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0",
                 "securityContext": {"privileged": true}},
                {"name": "gpus", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0",
                 "securityContext": {"privileged": true}}
            ]
        }),
    );
    let outcome = cluster.admit(&Review::create(dra)).await;
    assert!(outcome.sent());
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);

    // JupyterHub's GPU notebook with its privileged iptables init container:
    // placed by /mutate, allowed with a warning by /validate.
    let notebook = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "jupyter-alice", "namespace": "jhub"},
        "spec": {
            "initContainers": [{"name": "block-cloud-metadata",
                "image": "quay.io/jupyterhub/k8s-network-tools:4.0.0",
                "command": ["iptables", "--append", "OUTPUT", "--protocol", "tcp", "--destination",
                    "169.254.169.254", "--destination-port", "80", "--jump", "DROP"],
                "securityContext": {"privileged": true, "runAsUser": 0}}],
            "containers": [{"name": "notebook", "image": "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07",
                "resources": {"requests": {"cpu": "2", "memory": "8Gi"},
                    "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}}]
        }
    });
    let outcome = cluster
        .admit(&Review::create(notebook).by("system:serviceaccount:jhub:hub", &[]))
        .await;
    assert_eq!(outcome.mutated_by, ["pods.mutate.gpu-admission.io"]);
    assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(!outcome.patch.is_empty(), "the GPU notebook is placed");
    assert!(
        outcome
            .warnings
            .iter()
            .any(|w| w.starts_with("gpu-privileged-init: init container block-cloud-metadata")),
        "{:?}",
        outcome.warnings
    );
    cluster.stop().await;
}

/// A GPU pod (or Deployment) with a long env list, admitted when created,
/// can still be updated: an UPDATE carries the object twice (`object` and
/// `oldObject`), and each is held to what one created object may take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_admitted_when_created_can_still_be_updated() {
    let cluster = Cluster::start().await;
    let env: Vec<Value> = (0..10_000)
        .map(|i| json!({"name": format!("SETTING_{i}"), "value": format!("value-{i}")}))
        .collect();
    let mut container = vllm(false);
    container["env"] = json!(env);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "llm-serve-0", "namespace": "inference",
            "finalizers": ["example.com/drain"]},
        "spec": {"containers": [container.clone()]}
    });
    let created = cluster.admit(&Review::create(pod)).await;
    assert!(created.allowed, "{}", created.message());
    let stored = created.object.expect("the created pod");
    let mut finalized = stored.clone();
    finalized["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("finalizers");
    let updated = cluster.admit(&Review::update(stored, finalized)).await;
    assert_eq!(updated.validated_by, ["pods.validate.gpu-admission.io"]);
    assert!(updated.allowed, "{}", updated.message());

    let deployment = deployment(2, container);
    let created = cluster.admit(&Review::create(deployment.clone())).await;
    assert!(created.allowed, "{}", created.message());
    let mut restarted = deployment.clone();
    restarted["spec"]["template"]["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/restartedAt": "2026-12-01T23:50:00Z"});
    let updated = cluster.admit(&Review::update(deployment, restarted)).await;
    assert_eq!(
        updated.validated_by,
        ["workloads.validate.gpu-admission.io"]
    );
    assert!(updated.allowed, "{}", updated.message());
    cluster.stop().await;
}

/// Kubernetes lets an update add tolerations to a pod: a CPU pod given the
/// GPU toleration that way is denied as it would be when created, and an
/// update that leaves the tolerations alone is not judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_pod_given_the_gpu_toleration_by_an_update_is_denied() {
    let cluster = Cluster::start().await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "report", "namespace": "shop"},
        "spec": {"containers": [{"name": "report", "image": "ghcr.io/example/report:1.0",
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}
    });
    let created = cluster.admit(&Review::create(pod.clone())).await;
    assert!(created.allowed, "{}", created.message());
    let mut tolerating = created.object.clone().expect("stored pod");
    tolerating["spec"]["tolerations"] =
        json!([{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);
    let outcome = cluster
        .admit(&Review::update(
            created.object.clone().unwrap(),
            tolerating.clone(),
        ))
        .await;
    assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
    assert!(!outcome.allowed, "the GPU toleration added by an update");
    assert!(
        outcome
            .message()
            .contains("gpu-node-isolation: pod asks for no GPU but tolerates the GPU node taint"),
        "{}",
        outcome.message()
    );
    // A pod that already tolerates it (made before the policy) can still
    // have its labels changed.
    let mut relabelled = tolerating.clone();
    relabelled["metadata"]["labels"] = json!({"team": "finance"});
    let outcome = cluster.admit(&Review::update(tolerating, relabelled)).await;
    assert!(outcome.allowed, "{}", outcome.message());
    cluster.stop().await;
}
