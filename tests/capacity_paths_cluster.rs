//! Every path that makes AKS GPU capacity, as a cluster running the shipped
//! configuration treats it: an ASO ManagedCluster's inline
//! agentPoolProfiles, Cluster API Azure's AzureManagedMachinePool and
//! AzureASOManagedMachinePool. The `deploy/base/` webhook configurations
//! send them to `capacity.validate`, whose policies judge each GPU pool as
//! an agent pool and name the one that fails; an UPDATE that leaves the GPU
//! pools as they were is never denied.
use crate::common;

use common::webhooks::{Cluster, Review};
use serde_json::{json, Value};

const PLATFORM: &str = "platform-admin@example.com";
const CAPACITY_VALIDATE: &str = "capacity.validate.gpu-admission.io";

/// An ASO ManagedCluster in namespace `aks-infra` with a system pool and
/// `profiles` after it.
fn managed_cluster(name: &str, profiles: Value) -> Value {
    let mut all = vec![json!({
        "name": "system", "mode": "System", "vmSize": "Standard_D4s_v5",
        "count": 3, "osType": "Linux", "osSKU": "Ubuntu"
    })];
    all.extend(profiles.as_array().unwrap().iter().cloned());
    json!({
        "apiVersion": "containerservice.azure.com/v1api20240901",
        "kind": "ManagedCluster",
        "metadata": {"name": name, "namespace": "aks-infra"},
        "spec": {
            "location": "westus3",
            "owner": {"name": "aks-rg"},
            "dnsPrefix": name,
            "kubernetesVersion": "1.30.4",
            "identity": {"type": "SystemAssigned"},
            "networkProfile": {"networkPlugin": "azure", "networkPluginMode": "overlay"},
            "agentPoolProfiles": all
        }
    })
}

/// A CAPZ AzureManagedMachinePool of `sku` with `taints`.
fn machine_pool(name: &str, sku: &str, taints: Value) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "AzureManagedMachinePool",
        "metadata": {"name": name, "namespace": "capi-clusters"},
        "spec": {
            "mode": "User",
            "sku": sku,
            "osDiskSizeGB": 128,
            "scaling": {"minSize": 0, "maxSize": 3},
            "nodeLabels": {"workload": "gpu"},
            "taints": taints
        }
    })
}

/// A CAPZ AzureASOManagedMachinePool embedding one ASO agent pool `spec`.
fn aso_machine_pool(name: &str, spec: Value) -> Value {
    let mut agent_pool = json!({
        "azureName": "gpu", "owner": {"name": "capz-prod"}, "mode": "User", "count": 1
    });
    agent_pool
        .as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "AzureASOManagedMachinePool",
        "metadata": {"name": name, "namespace": "capi-clusters"},
        "spec": {"resources": [{
            "apiVersion": "containerservice.azure.com/v1api20231001",
            "kind": "ManagedClustersAgentPool",
            "metadata": {"name": name, "annotations": {"serviceoperator.azure.com/credential-from": "capz-identity"}},
            "spec": agent_pool
        }]}
    })
}

async fn admit(cluster: &Cluster, review: Review) -> common::webhooks::Outcome {
    let outcome = cluster.admit(&review.by(PLATFORM, &[])).await;
    assert_eq!(outcome.validated_by, [CAPACITY_VALIDATE]);
    outcome
}

fn denied_with(outcome: &common::webhooks::Outcome, text: &str) {
    assert!(!outcome.allowed, "allowed, wanted a denial with {text:?}");
    assert_eq!(outcome.denied_by.as_deref(), Some(CAPACITY_VALIDATE));
    assert!(outcome.message().contains(text), "{}", outcome.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_cluster_gpu_profiles_are_judged_one_by_one() {
    let cluster = Cluster::start().await;

    let untainted = managed_cluster(
        "aks-prod",
        json!([{"name": "gpu1", "mode": "User", "vmSize": "Standard_NC4as_T4_v3", "count": 2}]),
    );
    let outcome = admit(&cluster, Review::create(untainted.clone())).await;
    denied_with(
        &outcome,
        "gpu-aso-agentpool: ManagedCluster aks-prod spec.agentPoolProfiles[gpu1] has GPU size Standard_NC4as_T4_v3 but no GPU taint",
    );

    let retired = managed_cluster(
        "aks-prod",
        json!([{"name": "v100", "vmSize": "Standard_NC6s_v3", "count": 1,
                "nodeTaints": ["sku=gpu:NoSchedule"]}]),
    );
    let outcome = admit(&cluster, Review::create(retired)).await;
    denied_with(
        &outcome,
        "ManagedCluster aks-prod (spec.agentPoolProfiles[v100].vmSize) uses Standard_NC6s_v3",
    );

    let good = managed_cluster(
        "aks-prod",
        json!([{"name": "gpu1", "mode": "User", "vmSize": "Standard_NC4as_T4_v3", "count": 2,
                "nodeTaints": ["sku=gpu:NoSchedule"], "nodeLabels": {"workload": "gpu"}}]),
    );
    let outcome = admit(&cluster, Review::create(good)).await;
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);

    let cpu = managed_cluster(
        "aks-cpu",
        json!([{"name": "apps", "mode": "User", "vmSize": "Standard_D8s_v5",
                "enableAutoScaling": true, "minCount": 1, "maxCount": 10}]),
    );
    let outcome = admit(&cluster, Review::create(cpu)).await;
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);

    // A cluster whose untainted GPU pool predates the policies: ASO's
    // annotation, a version upgrade and a new CPU pool leave gpu1 alone and
    // are allowed; scaling gpu1 is judged.
    let mut upgraded = untainted.clone();
    upgraded["metadata"]["annotations"] = json!({"serviceoperator.azure.com/resource-id": "/subscriptions/0/resourceGroups/aks-rg/providers/Microsoft.ContainerService/managedClusters/aks-prod"});
    upgraded["spec"]["kubernetesVersion"] = json!("1.31.2");
    upgraded["spec"]["agentPoolProfiles"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "apps", "mode": "User", "vmSize": "Standard_D8s_v5", "count": 2}));
    let outcome = admit(
        &cluster,
        Review::update(untainted.clone(), upgraded.clone()),
    )
    .await;
    assert!(outcome.allowed, "{}", outcome.message());
    let outcome = admit(
        &cluster,
        Review::update(untainted.clone(), untainted.clone()),
    )
    .await;
    assert!(outcome.allowed, "{}", outcome.message());
    let mut scaled = upgraded.clone();
    scaled["spec"]["agentPoolProfiles"][1]["count"] = json!(6);
    let outcome = admit(&cluster, Review::update(upgraded, scaled)).await;
    denied_with(&outcome, "spec.agentPoolProfiles[gpu1] has GPU size");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capz_machine_pools_are_judged_as_agent_pools() {
    let cluster = Cluster::start().await;

    let soft = machine_pool(
        "capz-t4",
        "Standard_NC4as_T4_v3",
        json!([{"key": "sku", "value": "gpu", "effect": "PreferNoSchedule"}]),
    );
    let outcome = admit(&cluster, Review::create(soft.clone())).await;
    denied_with(
        &outcome,
        "gpu-aso-agentpool: AzureManagedMachinePool capz-t4 has GPU size Standard_NC4as_T4_v3 but no GPU taint",
    );
    assert!(
        outcome.message().contains("to spec.taints"),
        "{}",
        outcome.message()
    );

    let retired = machine_pool(
        "capz-v100",
        "Standard_NC6s_v3",
        json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]),
    );
    let outcome = admit(&cluster, Review::create(retired)).await;
    denied_with(
        &outcome,
        "AzureManagedMachinePool capz-v100 (spec.sku) uses Standard_NC6s_v3",
    );

    let good = machine_pool(
        "capz-t4",
        "Standard_NC4as_T4_v3",
        json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]),
    );
    let outcome = admit(&cluster, Review::create(good)).await;
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);

    // CAPZ adds its finalizer and labels to a pool made before the policies.
    let mut finalized = soft.clone();
    finalized["metadata"]["finalizers"] =
        json!(["azuremanagedmachinepools.infrastructure.cluster.x-k8s.io"]);
    finalized["metadata"]["ownerReferences"] = json!([{"apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachinePool", "name": "capz-t4", "uid": "3c2c6a1e-7d0b-4a5e-9f3b-0d6f1f7e6a11"}]);
    let outcome = admit(&cluster, Review::update(soft, finalized)).await;
    assert!(outcome.allowed, "{}", outcome.message());

    let untainted = aso_machine_pool("capz-gpu", json!({"vmSize": "Standard_NC4as_T4_v3"}));
    let outcome = admit(&cluster, Review::create(untainted.clone())).await;
    denied_with(
        &outcome,
        "AzureASOManagedMachinePool capz-gpu spec.resources[capz-gpu] has GPU size Standard_NC4as_T4_v3 but no GPU taint",
    );
    let retired = aso_machine_pool(
        "capz-old",
        json!({"vmSize": "Standard_NC6s_v3", "nodeTaints": ["sku=gpu:NoSchedule"]}),
    );
    let outcome = admit(&cluster, Review::create(retired)).await;
    denied_with(
        &outcome,
        "AzureASOManagedMachinePool capz-old (spec.resources[capz-old].spec.vmSize) uses Standard_NC6s_v3",
    );
    let good = aso_machine_pool(
        "capz-gpu",
        json!({"vmSize": "Standard_NC4as_T4_v3", "nodeTaints": ["sku=gpu:NoSchedule"]}),
    );
    let outcome = admit(&cluster, Review::create(good)).await;
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);

    let mut relabelled = untainted.clone();
    relabelled["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "capz-prod"});
    let outcome = admit(&cluster, Review::update(untainted, relabelled)).await;
    assert!(outcome.allowed, "{}", outcome.message());
    cluster.stop().await;
}
