//! Issue 10's Windows GPU false denial (`microsoft.com/directx`, the
//! resource of AKS Windows GPU node pools) as a cluster running the shipped
//! configuration treats it: the `deploy/base/` webhook configurations
//! decide which webhooks the Job and its pod are sent to, then `/mutate`
//! places the pod with the `aks-windows` profile and `/validate` judges it,
//! over TLS.
use crate::common;

use common::webhooks::{Cluster, Review};
use serde_json::{json, Value};

const JOB_CONTROLLER: &str = "system:serviceaccount:kube-system:job-controller";

/// The pod template of the AKS documentation's Windows GPU Job: a Windows
/// Server Core image asking for one DirectX device, on Windows nodes.
fn template() -> Value {
    json!({
        "metadata": {"labels": {"app": "samples-ml-inference-win"}},
        "spec": {
            "restartPolicy": "OnFailure",
            "nodeSelector": {"kubernetes.io/os": "windows"},
            "containers": [{
                "name": "samples-ml-inference-win",
                "image": "mcr.microsoft.com/windows/servercore:ltsc2022",
                "command": ["powershell.exe", "-Command", "C:\\samples\\run-inference.ps1 -Steps 500"],
                "resources": {
                    "requests": {"cpu": "2", "memory": "8Gi"},
                    "limits": {"cpu": "2", "memory": "8Gi", "microsoft.com/directx": "1"}
                }
            }]
        }
    })
}

fn job() -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "samples-ml-inference-win", "namespace": "ml",
            "labels": {"app": "samples-ml-inference-win"}},
        "spec": {"backoffLimit": 2, "activeDeadlineSeconds": 3600, "template": template()}
    })
}

/// The pod the Job controller creates from the template.
fn job_pod() -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "samples-ml-inference-win-7xk2p",
            "generateName": "samples-ml-inference-win-",
            "namespace": "ml",
            "labels": {
                "app": "samples-ml-inference-win",
                "batch.kubernetes.io/controller-uid": "0f3c1e52-4b7a-4d8e-9c1a-2b6e8f0d7a43",
                "batch.kubernetes.io/job-name": "samples-ml-inference-win"
            },
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "samples-ml-inference-win",
                "uid": "0f3c1e52-4b7a-4d8e-9c1a-2b6e8f0d7a43",
                "controller": true, "blockOwnerDeletion": true
            }]
        }
    });
    pod["spec"] = template()["spec"].clone();
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aks_windows_gpu_job_is_allowed_and_its_pod_placed_on_windows_gpu_nodes() {
    let cluster = Cluster::start().await;

    // The Job: its template is judged by workloads.validate, nothing mutates it.
    let outcome = cluster.admit(&Review::create(job())).await;
    assert!(outcome.mutated_by.is_empty(), "{:?}", outcome.mutated_by);
    assert_eq!(
        outcome.validated_by,
        ["workloads.validate.gpu-admission.io"]
    );
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    assert_eq!(outcome.object.as_ref(), Some(&job()));

    // Its pod, made by the Job controller: placed and allowed.
    let outcome = cluster
        .admit(&Review::create(job_pod()).by(JOB_CONTROLLER, &["system:serviceaccounts"]))
        .await;
    assert_eq!(outcome.mutated_by, ["pods.mutate.gpu-admission.io"]);
    assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    let object = outcome.object.unwrap();
    assert_eq!(
        object["metadata"]["annotations"]["gpu-admission.io/placement-profile"],
        "aks-windows"
    );
    assert_eq!(
        object["spec"]["tolerations"],
        json!([{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}])
    );
    // The pod's own nodeSelector is kept; the required term selects Windows
    // nodes of the default tier's sizes.
    assert_eq!(
        object["spec"]["nodeSelector"],
        json!({"kubernetes.io/os": "windows"})
    );
    let terms = &object["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    assert_eq!(terms.as_array().map(Vec::len), Some(1), "{terms}");
    let expressions = terms[0]["matchExpressions"].as_array().unwrap();
    assert_eq!(
        expressions[0],
        json!({"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]})
    );
    assert_eq!(expressions.len(), 2, "{expressions:?}");
    assert_eq!(expressions[1]["key"], "node.kubernetes.io/instance-type");
    assert_eq!(expressions[1]["operator"], "In");
    assert_eq!(
        expressions[1]["values"],
        json!([
            "Standard_NC4as_T4_v3",
            "Standard_NC8as_T4_v3",
            "Standard_NC16as_T4_v3",
            "Standard_NC64as_T4_v3",
            "Standard_NV36ads_A10_v5",
            "Standard_NV72ads_A10_v5"
        ])
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windows_cpu_pod_is_sent_to_no_webhook() {
    let iis = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "iis", "namespace": "web", "labels": {"app": "iis"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/os": "windows"},
            "containers": [{
                "name": "iis",
                "image": "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {
                    "requests": {"cpu": "500m", "memory": "512Mi"},
                    "limits": {"cpu": "1", "memory": "1Gi"}
                }
            }]
        }
    });
    let cluster = Cluster::start().await;
    let outcome = cluster.admit(&Review::create(iis.clone())).await;
    assert!(!outcome.sent(), "{outcome:?}");
    assert!(outcome.allowed);
    assert_eq!(outcome.object, Some(iis), "not mutated");
    cluster.stop().await;
}
