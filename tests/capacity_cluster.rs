//! Issue 10's Karpenter NodePool false denial and its seed practices on
//! Azure Service Operator agent pools, as a cluster running the shipped
//! configuration treats them: the `deploy/base/` webhook configurations
//! decide which webhooks a capacity object is sent to, then `/mutate` and
//! `/validate` answer over TLS.
use crate::common;

use common::webhooks::{Cluster, Review};
use serde_json::{json, Value};

const PLATFORM: &str = "platform-admin@example.com";
const NODEPOOLS_MUTATE: &str = "nodepools.mutate.gpu-admission.io";
const NODEPOOLS_VALIDATE: &str = "nodepools.validate.gpu-admission.io";
const CAPACITY_VALIDATE: &str = "capacity.validate.gpu-admission.io";

/// A node auto-provisioning (Karpenter) NodePool for A10 nodes, tainted
/// as the AKS docs taint GPU pools, with `limits` (none when null).
fn a10_nodepool(name: &str, limits: Value) -> Value {
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"workload": "gpu-inference"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                    "expireAfter": "720h",
                    "requirements": [
                        {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["N"]},
                        {"key": "karpenter.azure.com/sku-gpu-name", "operator": "In", "values": ["A10"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
                    ],
                    "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]
                }
            },
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "10m"}
        }
    });
    if !limits.is_null() {
        pool["spec"]["limits"] = limits;
    }
    pool
}

/// An ASO agent pool of the AKS cluster `aks-prod`, in namespace
/// `aks-infra` (no tier label: tier default), with `spec` added.
fn agent_pool(name: &str, spec: Value) -> Value {
    let mut pool = json!({
        "apiVersion": "containerservice.azure.com/v20260501",
        "kind": "ManagedClustersAgentPool",
        "metadata": {"name": name, "namespace": "aks-infra"},
        "spec": {
            "owner": {"name": "aks-prod"},
            "azureName": name,
            "mode": "User",
            "osType": "Linux",
            "count": 1,
            "nodeTaints": ["sku=gpu:NoSchedule"],
            "nodeLabels": {"workload": "gpu"}
        }
    });
    pool["spec"]
        .as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    pool
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_nodepool_bounded_by_cpu_is_warned_and_one_without_limits_denied() {
    let cluster = Cluster::start().await;

    let bounded = a10_nodepool("gpu-a10", json!({"cpu": "288"}));
    let outcome = cluster
        .admit(&Review::create(bounded.clone()).by(PLATFORM, &[]))
        .await;
    assert_eq!(outcome.mutated_by, [NODEPOOLS_MUTATE]);
    assert_eq!(outcome.validated_by, [NODEPOOLS_VALIDATE]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(
        outcome.patch.is_empty(),
        "already tainted: {:?}",
        outcome.patch
    );
    assert_eq!(outcome.object, Some(bounded));
    assert_eq!(outcome.warnings.len(), 1, "{:?}", outcome.warnings);
    assert!(
        outcome.warnings[0].starts_with(
            "gpu-nodepool-limits: NodePool gpu-a10 bounds its GPU nodes only indirectly (spec.limits: cpu), so how many GPUs it buys depends on the sizes Karpenter picks"
        ),
        "{:?}",
        outcome.warnings
    );
    assert!(
        outcome.warnings[0].contains("set spec.limits[\"nvidia.com/gpu\"]"),
        "{:?}",
        outcome.warnings
    );

    let unbounded = a10_nodepool("gpu-a10-unbounded", Value::Null);
    let outcome = cluster
        .admit(&Review::create(unbounded).by(PLATFORM, &[]))
        .await;
    assert_eq!(outcome.mutated_by, [NODEPOOLS_MUTATE]);
    assert_eq!(outcome.validated_by, [NODEPOOLS_VALIDATE]);
    assert!(!outcome.allowed, "a GPU NodePool without limits allowed");
    assert_eq!(outcome.denied_by.as_deref(), Some(NODEPOOLS_VALIDATE));
    assert!(
        outcome.message().contains(
            "gpu-nodepool: NodePool gpu-a10-unbounded launches GPU nodes with no limits at all, so it may buy GPU nodes without end"
        ),
        "{}",
        outcome.message()
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aso_agent_pools_mig_on_a_t4_denied_and_azure_linux_warned() {
    let cluster = Cluster::start().await;

    let mig_t4 = agent_pool(
        "t4mig",
        json!({"vmSize": "Standard_NC16as_T4_v3", "osSKU": "Ubuntu", "gpuInstanceProfile": "MIG1g"}),
    );
    let outcome = cluster
        .admit(&Review::create(mig_t4).by(PLATFORM, &[]))
        .await;
    assert!(outcome.mutated_by.is_empty(), "{:?}", outcome.mutated_by);
    assert_eq!(outcome.validated_by, [CAPACITY_VALIDATE]);
    assert!(!outcome.allowed, "MIG on a T4 allowed");
    assert_eq!(outcome.denied_by.as_deref(), Some(CAPACITY_VALIDATE));
    assert!(
        outcome.message().contains(
            "gpu-aso-agentpool: agent pool t4mig sets gpuInstanceProfile MIG1g but Standard_NC16as_T4_v3 (T4) has no Multi-Instance GPU support"
        ),
        "{}",
        outcome.message()
    );

    let azure_linux = agent_pool(
        "a10azl",
        json!({"vmSize": "Standard_NV36ads_A10_v5", "osSKU": "AzureLinux"}),
    );
    let outcome = cluster
        .admit(&Review::create(azure_linux).by(PLATFORM, &[]))
        .await;
    assert!(outcome.mutated_by.is_empty(), "{:?}", outcome.mutated_by);
    assert_eq!(outcome.validated_by, [CAPACITY_VALIDATE]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert_eq!(outcome.warnings.len(), 1, "{:?}", outcome.warnings);
    assert!(
        outcome.warnings[0].starts_with(
            "gpu-aso-agentpool-practices: agent pool a10azl runs AzureLinux on GPU sizes, whose nodes get no automatic OS security patches"
        ),
        "{:?}",
        outcome.warnings
    );

    // The same pool on Ubuntu: nothing to say.
    let ubuntu = agent_pool(
        "a10",
        json!({"vmSize": "Standard_NV36ads_A10_v5", "osSKU": "Ubuntu"}),
    );
    let outcome = cluster
        .admit(&Review::create(ubuntu).by(PLATFORM, &[]))
        .await;
    assert_eq!(outcome.validated_by, [CAPACITY_VALIDATE]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    cluster.stop().await;
}
