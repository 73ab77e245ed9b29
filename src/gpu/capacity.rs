//! The capacity objects that create GPU nodes, as values: which kind an
//! object is, and what it (or one pool of it) asks for. Reading an object
//! into a [`CapacityRequest`] is [`super::pools`]'s work.
use serde::Serialize;
use serde_json::Value;

use crate::k8s::{NodeSelection, Taint};

/// The kinds of object that create GPU nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// `karpenter.sh` NodePool.
    NodePool,
    /// `kaito.sh` Workspace.
    Workspace,
    /// `kaito.sh` InferenceSet.
    InferenceSet,
    /// `kaito.sh` RAGEngine.
    RagEngine,
    /// `containerservice.azure.com` ManagedClustersAgentPool.
    AgentPool,
    /// `containerservice.azure.com` ManagedCluster: a pool per
    /// `spec.agentPoolProfiles[]` entry.
    ManagedCluster,
    /// `infrastructure.cluster.x-k8s.io` AzureManagedMachinePool (CAPZ).
    MachinePool,
    /// `infrastructure.cluster.x-k8s.io` AzureASOManagedMachinePool: the
    /// ManagedClustersAgentPools among its `spec.resources[]`.
    AsoMachinePool,
    /// `infrastructure.cluster.x-k8s.io` AzureASOManagedControlPlane: the
    /// inline agent pools of the ManagedCluster among its `spec.resources[]`.
    AsoControlPlane,
    /// `kueue.x-k8s.io` ResourceFlavor: creates no node, but every pod
    /// Kueue admits on it gets its `nodeLabels` as a nodeSelector and its
    /// tolerations.
    ResourceFlavor,
}

impl PoolKind {
    /// Recognizes a capacity object by API group and kind (any version).
    pub fn of(object: &Value) -> Option<PoolKind> {
        let api_version = object.get("apiVersion")?.as_str()?;
        let group = api_version.split('/').next().unwrap_or("");
        let kind = object.get("kind")?.as_str()?;
        Some(match (group, kind) {
            ("karpenter.sh", "NodePool") => PoolKind::NodePool,
            ("kaito.sh", "Workspace") => PoolKind::Workspace,
            ("kaito.sh", "InferenceSet") => PoolKind::InferenceSet,
            ("kaito.sh", "RAGEngine") => PoolKind::RagEngine,
            ("containerservice.azure.com", "ManagedClustersAgentPool") => PoolKind::AgentPool,
            ("containerservice.azure.com", "ManagedCluster") => PoolKind::ManagedCluster,
            ("infrastructure.cluster.x-k8s.io", "AzureManagedMachinePool") => PoolKind::MachinePool,
            ("infrastructure.cluster.x-k8s.io", "AzureASOManagedMachinePool") => {
                PoolKind::AsoMachinePool
            }
            ("infrastructure.cluster.x-k8s.io", "AzureASOManagedControlPlane") => {
                PoolKind::AsoControlPlane
            }
            ("kueue.x-k8s.io", "ResourceFlavor") => PoolKind::ResourceFlavor,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PoolKind::NodePool => "NodePool",
            PoolKind::Workspace => "Workspace",
            PoolKind::InferenceSet => "InferenceSet",
            PoolKind::RagEngine => "RAGEngine",
            PoolKind::AgentPool => "ManagedClustersAgentPool",
            PoolKind::ManagedCluster => "ManagedCluster",
            PoolKind::MachinePool => "AzureManagedMachinePool",
            PoolKind::AsoMachinePool => "AzureASOManagedMachinePool",
            PoolKind::AsoControlPlane => "AzureASOManagedControlPlane",
            PoolKind::ResourceFlavor => "ResourceFlavor",
        }
    }

    /// Its objects hold pools (inline or embedded) rather than being one.
    pub fn holds_pools(self) -> bool {
        matches!(
            self,
            PoolKind::ManagedCluster | PoolKind::AsoMachinePool | PoolKind::AsoControlPlane
        )
    }
}

/// What a capacity object, or one pool of it, asks for. Serialized
/// (camelCase) as the pool's own part of `gpu.pool`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityRequest {
    #[serde(serialize_with = "kind_name")]
    pub kind: PoolKind,
    /// The pool's name: the object's (`metadata.name`; a CAPZ machine
    /// pool's `spec.name` when set), or an inline pool's own
    /// (`agentPoolProfiles[].name`, an embedded agent pool's `metadata.name`).
    pub name: String,
    /// Where an inline or embedded pool is written in its object
    /// (`spec.agentPoolProfiles[gpu1]`, `spec.resources[gpu1]`); empty when
    /// the object is the pool.
    pub path: String,
    /// Where its own fields are written: `spec` (KAITO Workspace: empty),
    /// an inline pool's path, an embedded agent pool's `spec`
    /// (`spec.resources[gpu1].spec`).
    pub spec_field: String,
    /// Where its sizes are written (`spec.vmSize`, `spec.sku`,
    /// `spec.agentPoolProfiles[gpu1].vmSize`, ...), for messages.
    pub sizes_field: String,
    /// Where its taints are written (`spec.nodeTaints`, `spec.taints`,
    /// `spec.agentPoolProfiles[gpu1].nodeTaints`, ...), for messages.
    pub taints_field: String,
    /// On an UPDATE, the pool is new or changed (see
    /// [`CapacityRequest::compare_with`]); always true otherwise.
    pub changed: bool,
    /// VM sizes named outright (Workspace instanceType, agent pool vmSize and
    /// every size under `virtualMachinesProfile.scale`, a CAPZ machine
    /// pool's sku, the values of a NodePool's `In` requirements on the
    /// instance type), GPU or not.
    pub sizes: Vec<String>,
    /// NodePool requirements (`spec.template.spec.requirements`).
    #[serde(skip)]
    pub selection: Option<NodeSelection>,
    #[serde(serialize_with = "taint_strings")]
    pub taints: Vec<Taint>,
    /// A toleration of its own tolerates a GPU taint (a ResourceFlavor's
    /// `spec.tolerations`, which Kueue adds to the pods it admits on it).
    pub tolerates_gpu: bool,
    /// NodePool `spec.limits["nvidia.com/gpu"]` (or `amd.com/gpu`), when a
    /// whole number.
    pub gpu_limit: Option<i64>,
    /// Nodes asked for: Workspace `resource.count`, agent pool
    /// `count`/`maxCount`, CAPZ `scaling.maxSize`, NodePool `replicas`.
    pub count: Option<i64>,
    /// NodePool `replicas` is set (a static pool, as KAITO generates).
    #[serde(rename = "static")]
    pub static_pool: bool,
    /// Generated by KAITO (NodePool label `karpenter.kaito.sh/workspace-name`).
    pub kaito_managed: bool,
    pub consolidation_policy: Option<String>,
    pub consolidate_after: Option<String>,
    /// `disruption.budgets[].nodes`.
    pub budget_nodes: Vec<String>,
    pub os_type: Option<String>,
    pub orchestrator_version: Option<String>,
    /// Agent pool `spec.osSKU` (`Ubuntu`, `AzureLinux`, ...).
    pub os_sku: Option<String>,
    /// Agent pool `spec.gpuProfile.driver`: `Install`, or `None` when the
    /// GPU Operator (or another) installs the driver.
    pub gpu_driver: Option<String>,
    /// Agent pool `spec.gpuProfile.nvidia.managementMode` (managed GPU
    /// preview): `Managed` installs the driver whatever `driver` says.
    pub gpu_management_mode: Option<String>,
    /// Agent pool `spec.gpuInstanceProfile` (`MIG1g` ... `MIG7g`).
    pub gpu_instance_profile: Option<String>,
    /// Agent pool autoscaling is on (`spec.enableAutoScaling`, sizes under
    /// `spec.virtualMachinesProfile.scale.autoscale`, a CAPZ `scaling`).
    pub autoscaling: bool,
    /// Nodes the autoscaler keeps: agent pool `spec.minCount`, else the sum
    /// of `minCount` under `spec.virtualMachinesProfile.scale.autoscale`;
    /// CAPZ `scaling.minSize`.
    pub min_count: Option<i64>,
    /// Agent pool `spec.virtualMachinesProfile.scale` entries: each size
    /// with the most nodes of it (`maxCount` when autoscaled, else `count`).
    #[serde(skip)]
    pub scale: Vec<(String, i64)>,
    /// The pools of an object that holds several ([`PoolKind::holds_pools`]);
    /// empty when the object is the pool.
    #[serde(skip)]
    pub pools: Vec<CapacityRequest>,
}

impl CapacityRequest {
    /// A request of `kind` named `name` that asks for nothing yet.
    pub(crate) fn empty(kind: PoolKind, name: &str) -> CapacityRequest {
        CapacityRequest {
            kind,
            name: name.to_string(),
            path: String::new(),
            spec_field: String::new(),
            sizes_field: String::new(),
            taints_field: String::new(),
            changed: true,
            sizes: Vec::new(),
            selection: None,
            taints: Vec::new(),
            tolerates_gpu: false,
            gpu_limit: None,
            count: None,
            static_pool: false,
            kaito_managed: false,
            consolidation_policy: None,
            consolidate_after: None,
            budget_nodes: Vec::new(),
            os_type: None,
            orchestrator_version: None,
            os_sku: None,
            gpu_driver: None,
            gpu_management_mode: None,
            gpu_instance_profile: None,
            autoscaling: false,
            min_count: None,
            scale: Vec::new(),
            pools: Vec::new(),
        }
    }

    /// The pools it creates: the inline or embedded ones of an object that
    /// holds several, else itself.
    pub fn pools(&self) -> &[CapacityRequest] {
        if self.kind.holds_pools() {
            &self.pools
        } else {
            std::slice::from_ref(self)
        }
    }
}

fn kind_name<S: serde::Serializer>(kind: &PoolKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind.as_str())
}

/// Taints in the `key=value:Effect` form.
fn taint_strings<S: serde::Serializer>(taints: &[Taint], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(taints.iter().map(Taint::to_string))
}
