//! GPU capacity objects as kube-apiserver sends them (real TLS,
//! AdmissionReview v1): Karpenter NodePool limits and Azure Service
//! Operator agent-pool practices, `/mutate` then `/validate` on the
//! patched object, with the shipped policies.
use crate::common;

use common::{config, TestServer};
use gpu_admission::admission::Admission;
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::k8s::namespaces::StaticNamespaces;
use serde_json::{json, Value};
use std::sync::Arc;

async fn server() -> TestServer {
    let loaded = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
    let namespaces = StaticNamespaces::new().with(
        "infra",
        [
            ("gpu-admission.io/tier".to_string(), "premium".to_string()),
            (
                "gpu-admission.io/premium-gpus".to_string(),
                "true".to_string(),
            ),
        ]
        .into(),
    );
    let admission = Admission::new(loaded.bundle, Arc::new(namespaces));
    TestServer::start_with(config(), Arc::new(admission)).await
}

/// A CREATE by a platform engineer; `resource` is the one kube-apiserver
/// names (checked against the kind's plural).
fn review(uid: &str, object: &Value, resource: &str) -> Value {
    let review = common::admission_review(uid, "CREATE", object, None, "platform@example.com");
    assert_eq!(review["request"]["resource"]["resource"], resource);
    review
}

/// `/mutate`, its patch applied, then `/validate`: the final answer.
async fn admit(server: &TestServer, object: &Value, resource: &str) -> Value {
    let name = object["metadata"]["name"].as_str().unwrap();
    let (status, mutated) = server
        .post_review("/mutate", &review(name, object, resource))
        .await;
    assert_eq!(status, 200);
    assert_eq!(mutated["response"]["allowed"], true, "{mutated}");
    let mut patched = object.clone();
    if let Some(patch) = common::review_patch(&mutated) {
        json_patch::patch(&mut patched, &patch).unwrap();
    }
    let (status, validated) = server
        .post_review("/validate", &review(name, &patched, resource))
        .await;
    assert_eq!(status, 200);
    validated
}

fn warnings(answer: &Value) -> Vec<String> {
    answer["response"]["warnings"]
        .as_array()
        .map(|w| w.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn a10_nodepool(name: &str, limits: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "gpu"},
                "requirements": [
                    {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["N"]},
                    {"key": "karpenter.azure.com/sku-gpu-name", "operator": "In", "values": ["A10"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ],
                "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]
            }},
            "limits": limits,
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5m"}
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_nodepool_limited_by_cpu_is_warned_and_unlimited_is_denied() {
    let server = server().await;
    let answer = admit(
        &server,
        &a10_nodepool("a10-cpu-bound", json!({"cpu": "288", "memory": "1152Gi"})),
        "nodepools",
    )
    .await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let warned = warnings(&answer);
    assert!(
        warned.iter().any(|w| w.starts_with("gpu-nodepool-limits: NodePool a10-cpu-bound bounds its GPU nodes only indirectly (spec.limits: cpu, memory)")),
        "{warned:?}"
    );

    let answer = admit(
        &server,
        &a10_nodepool("a10-gpu-bound", json!({"nvidia.com/gpu": "8"})),
        "nodepools",
    )
    .await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(
        warnings(&answer)
            .iter()
            .all(|w| !w.contains("gpu-nodepool-limits")),
        "{answer}"
    );

    let mut unbounded = a10_nodepool("a10-unbounded", json!({}));
    unbounded["spec"].as_object_mut().unwrap().remove("limits");
    let answer = admit(&server, &unbounded, "nodepools").await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("NodePool a10-unbounded launches GPU nodes with no limits at all"),
        "{message}"
    );
    server.stop().await;
}

fn agent_pool(name: &str, spec: Value) -> Value {
    let mut pool = json!({
        "apiVersion": "containerservice.azure.com/v20260501",
        "kind": "ManagedClustersAgentPool",
        "metadata": {"name": name, "namespace": "infra"},
        "spec": {
            "owner": {"name": "aks-cluster"},
            "azureName": name,
            "mode": "User",
            "osType": "Linux",
            "nodeTaints": ["sku=gpu:NoSchedule"]
        }
    });
    pool["spec"]
        .as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    pool
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_pool_practices_over_tls() {
    let server = server().await;
    let resource = "managedclustersagentpools";

    let operator = agent_pool(
        "h100op",
        json!({"vmSize": "Standard_NC40ads_H100_v5",
        "enableAutoScaling": true, "minCount": 0, "maxCount": 4, "gpuProfile": {"driver": "None"}}),
    );
    let answer = admit(&server, &operator, resource).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(
        warnings(&answer)
            .iter()
            .any(|w| w.contains("the GPU Operator needs one GPU node to stay")),
        "{answer}"
    );

    let idle = agent_pool(
        "t4idle",
        json!({"vmSize": "Standard_NC8as_T4_v3",
        "enableAutoScaling": true, "minCount": 2, "maxCount": 5}),
    );
    let answer = admit(&server, &idle, resource).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(
        warnings(&answer)
            .iter()
            .any(|w| w.contains("keeps at least 2 GPU nodes (minCount), which bill while idle")),
        "{answer}"
    );

    let azure_linux = agent_pool(
        "a10azl",
        json!({"vmSize": "Standard_NV36ads_A10_v5", "count": 1, "osSKU": "AzureLinux"}),
    );
    let answer = admit(&server, &azure_linux, resource).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(
        warnings(&answer)
            .iter()
            .any(|w| w.contains("no automatic OS security patches")),
        "{answer}"
    );

    let mig = agent_pool(
        "migt4",
        json!({"vmSize": "Standard_NC16as_T4_v3", "count": 1, "gpuInstanceProfile": "MIG1g"}),
    );
    let answer = admit(&server, &mig, resource).await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("gpuInstanceProfile MIG1g but Standard_NC16as_T4_v3 (T4) has no Multi-Instance GPU support"), "{message}");

    let mig_ok = agent_pool(
        "miga100",
        json!({"vmSize": "Standard_NC24ads_A100_v4", "count": 1, "gpuInstanceProfile": "MIG3g"}),
    );
    let answer = admit(&server, &mig_ok, resource).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(warnings(&answer).is_empty(), "{answer}");
    server.stop().await;
}
