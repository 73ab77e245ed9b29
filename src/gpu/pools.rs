//! What a GPU capacity object asks for: Karpenter NodePools, KAITO
//! Workspaces / InferenceSets / RAGEngines, Azure Service Operator agent
//! pools and managed clusters, Cluster API Azure machine pools, and the
//! Kueue ResourceFlavors that pin queued workloads to some of these nodes.
//!
//! An object may create several pools (a ManagedCluster's inline
//! `agentPoolProfiles`, the agent pools embedded in a CAPZ
//! `AzureASOManagedMachinePool`): each is a [`CapacityRequest`] of its own,
//! named, so a policy can say which one fails.
//!
//! Read leniently: fields we do not know never matter, and a field of the
//! wrong shape reads as absent (the object's own API server validates it).
use crate::k8s::json::Pointer as _;
use serde::Serialize;
use serde_json::Value;

use super::azure_pools;
use super::capacity::{CapacityRequest, PoolKind};
use super::catalog::Catalog;
use super::selection::SkuSelection;
use super::taints::{is_gpu_taint, tolerates_gpu_taint};
use crate::k8s::json::{int_of, items as list, scalar_string};
use crate::k8s::{NodeSelection, NodeSelectorRequirement, Taint};

impl CapacityRequest {
    /// Reads a capacity object; `None` for any other object. An object
    /// that holds several pools reads as their union ([`Self::pools`]
    /// lists them).
    pub fn from_object(object: &Value) -> Option<CapacityRequest> {
        let kind = PoolKind::of(object)?;
        let name = object
            .at("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut req = CapacityRequest::empty(kind, name);
        let str_at = |p: &str| object.at(p).and_then(Value::as_str).map(str::to_string);
        let int_at = |p: &str| object.at(p).and_then(int_of);
        let spec = object.get("spec").unwrap_or(&Value::Null);
        if kind != PoolKind::Workspace {
            req.spec_field = "spec".into();
        }
        match kind {
            PoolKind::NodePool => {
                let requirements = spec.at("/template/spec/requirements");
                req.select(
                    NodeSelection::from_requirements(requirements.unwrap_or(&Value::Null)),
                    [
                        "spec.template.spec.requirements",
                        "spec.template.spec.taints",
                    ],
                    spec.at("/template/spec/taints"),
                );
                req.gpu_limit = ["nvidia.com/gpu", "amd.com/gpu"]
                    .iter()
                    .filter_map(|r| spec.get("limits")?.get(*r).and_then(int_of))
                    .reduce(|a, b| a + b);
                req.count = spec.get("replicas").and_then(int_of);
                req.static_pool = spec.get("replicas").is_some_and(|r| !r.is_null());
                req.kaito_managed = ["/metadata/labels", "/spec/template/metadata/labels"]
                    .iter()
                    .filter_map(|p| object.at(p))
                    .any(|l| l.get("karpenter.kaito.sh/workspace-name").is_some());
                req.consolidation_policy = str_at("/spec/disruption/consolidationPolicy");
                req.consolidate_after = str_at("/spec/disruption/consolidateAfter");
                req.budget_nodes = list(spec.at("/disruption/budgets"))
                    .filter_map(|b| {
                        b.get("nodes")
                            .filter(|n| !n.is_boolean())
                            .and_then(scalar_string)
                    })
                    .collect();
            }
            PoolKind::Workspace | PoolKind::InferenceSet | PoolKind::RagEngine => {
                let (size, count) = match kind {
                    PoolKind::Workspace => ("/resource/instanceType", "/resource/count"),
                    PoolKind::InferenceSet => {
                        ("/spec/template/resource/instanceType", "/spec/replicas")
                    }
                    _ => ("/spec/compute/instanceType", "/spec/compute/count"),
                };
                req.sizes_field = size[1..].replace('/', ".");
                req.sizes.extend(str_at(size));
                req.count = int_at(count);
            }
            PoolKind::ResourceFlavor => {
                // Written into the pods as their nodeSelector: labels ANDed.
                let labels = spec.get("nodeLabels").and_then(Value::as_object);
                let selection = NodeSelection {
                    required: (labels.into_iter().flatten())
                        .filter_map(|(k, v)| {
                            Some(NodeSelectorRequirement::equals(k, &scalar_string(v)?))
                        })
                        .collect(),
                    terms: None,
                };
                req.select(
                    selection,
                    ["spec.nodeLabels", "spec.nodeTaints"],
                    spec.get("nodeTaints"),
                );
                req.tolerates_gpu = spec.get("tolerations").is_some_and(tolerates_gpu_taint);
            }
            PoolKind::AgentPool => azure_pools::read_agent_pool(&mut req, spec, "spec", None),
            PoolKind::MachinePool => azure_pools::read_machine_pool(&mut req, spec),
            PoolKind::ManagedCluster | PoolKind::AsoMachinePool | PoolKind::AsoControlPlane => {
                req.pools = azure_pools::inline_pools(kind, object);
                for size in req.pools.iter().flat_map(|p| &p.sizes) {
                    if !req.sizes.iter().any(|s| s.eq_ignore_ascii_case(size)) {
                        req.sizes.push(size.clone());
                    }
                }
                req.autoscaling = req.pools.iter().any(|p| p.autoscaling);
                req.count = req
                    .pools
                    .iter()
                    .filter_map(|p| p.count)
                    .reduce(i64::saturating_add);
            }
        }
        req.sizes.retain(|s| !s.trim().is_empty());
        Some(req)
    }

    /// A pool that picks its nodes by `selection` and taints them with
    /// `taints`, read from the fields named by `fields` (sizes, taints).
    fn select(&mut self, selection: NodeSelection, fields: [&str; 2], taints: Option<&Value>) {
        [self.sizes_field, self.taints_field] = fields.map(String::from);
        self.sizes = selection.named_sizes();
        self.selection = Some(selection);
        self.taints = list(taints).filter_map(Taint::from_value).collect();
    }

    /// On an UPDATE from `old` (to `object`, the object this was read from):
    /// marks which pools are new or changed. A pool whose own fields are as
    /// they were (an object's metadata other than labels, its status, a
    /// ManagedCluster's other settings and other pools) is unchanged.
    pub fn compare_with(&mut self, object: &Value, old: &Value) {
        if self.kind.holds_pools() {
            let changed = azure_pools::changed_pools(self.kind, object, old);
            for pool in &mut self.pools {
                pool.changed = changed.contains(&pool.path);
            }
            self.changed = self.pools.iter().any(|p| p.changed);
        } else {
            self.changed = !azure_pools::same_object(object, old);
        }
    }

    /// The catalog GPU SKUs this object can create nodes of.
    pub fn gpu_skus(&self, catalog: &Catalog) -> Vec<String> {
        match &self.selection {
            Some(sel) => sel.skus(catalog).iter().map(|s| s.name.clone()).collect(),
            None => {
                let mut out: Vec<String> = Vec::new();
                let skus = self.sizes.iter().filter_map(|s| catalog.get(s));
                super::extend_new(&mut out, skus.map(|sku| &sku.name));
                out
            }
        }
    }

    /// The most GPUs (devices, as pods request them) the object can bring
    /// up: a NodePool's GPU limit, or for a static NodePool its replicas
    /// times the largest of its GPU sizes; a KAITO object's node count times
    /// its size's GPUs; an agent pool's node count (or each scale entry's)
    /// times its GPU size's; the sum over the pools of an object that holds
    /// several. `None` when nothing bounds it: a dynamic NodePool with GPU
    /// sizes and no GPU limit, a CAPZ machine pool of a GPU size whose node
    /// count is its MachinePool's (no `scaling`). Sizes the catalog does not
    /// list hold no GPUs.
    pub fn launchable_gpus(&self, catalog: &Catalog) -> Option<i64> {
        let devices = |size: &str| catalog.get(size).map_or(0, |s| i64::from(s.gpu_devices));
        match self.kind {
            PoolKind::NodePool => {
                if let Some(limit) = self.gpu_limit {
                    return Some(limit.max(0));
                }
                let largest = self
                    .gpu_skus(catalog)
                    .iter()
                    .map(|s| devices(s))
                    .max()
                    .unwrap_or(0);
                match (self.static_pool, largest) {
                    (_, 0) => Some(0),
                    (true, per_node) => {
                        Some(self.count.unwrap_or(0).max(0).saturating_mul(per_node))
                    }
                    (false, _) => None,
                }
            }
            PoolKind::Workspace | PoolKind::InferenceSet | PoolKind::RagEngine => {
                let per_node = self.sizes.first().map_or(0, |s| devices(s));
                Some(self.count.unwrap_or(1).max(0).saturating_mul(per_node))
            }
            PoolKind::MachinePool => {
                let per_node = self.sizes.first().map_or(0, |s| devices(s));
                match (self.count, per_node) {
                    (_, 0) => Some(0),
                    (Some(nodes), per_node) => Some(nodes.max(0).saturating_mul(per_node)),
                    (None, _) => None,
                }
            }
            PoolKind::AgentPool => {
                let from_scale: i64 = self
                    .scale
                    .iter()
                    .map(|(size, nodes)| nodes.max(&0).saturating_mul(devices(size)))
                    .fold(0, i64::saturating_add);
                let from_vm_size = self
                    .sizes
                    .first()
                    .filter(|_| self.scale.is_empty())
                    .map_or(0, |size| {
                        self.count.unwrap_or(0).max(0).saturating_mul(devices(size))
                    });
                Some(from_scale.saturating_add(from_vm_size))
            }
            // Its nodes are other objects' (and counted there).
            PoolKind::ResourceFlavor => Some(0),
            PoolKind::ManagedCluster | PoolKind::AsoMachinePool | PoolKind::AsoControlPlane => self
                .pools
                .iter()
                .map(|p| p.launchable_gpus(catalog))
                .try_fold(0i64, |sum, gpus| Some(sum.saturating_add(gpus?))),
        }
    }

    /// Every node it creates is a GPU node (a NodePool that can also launch
    /// CPU sizes is GPU-capable but not GPU-only; an object that holds
    /// pools, when every one of them is).
    pub fn gpu_only(&self, catalog: &Catalog) -> bool {
        if self.kind.holds_pools() {
            return !self.pools.is_empty() && self.pools.iter().all(|p| p.gpu_only(catalog));
        }
        match &self.selection {
            Some(sel) => sel.targets_gpu_nodes(catalog),
            None => !self.sizes.is_empty() && self.sizes.iter().all(|s| catalog.is_gpu_sku(s)),
        }
    }

    /// Its nodes carry a GPU taint. KAITO taints the nodes of its
    /// Workspaces, InferenceSets and RAGEngines with `sku=gpu` itself. An
    /// object that holds pools: every one of them does.
    pub fn tainted(&self) -> bool {
        match self.kind {
            PoolKind::Workspace | PoolKind::InferenceSet | PoolKind::RagEngine => true,
            kind if kind.holds_pools() => self.pools.iter().all(CapacityRequest::tainted),
            _ => self.taints.iter().any(is_gpu_taint),
        }
    }

    /// Minor version of `orchestratorVersion` (`1.29.2` -> 29).
    pub fn orchestrator_minor(&self) -> Option<i64> {
        let v = self.orchestrator_version.as_deref()?;
        let v = v.trim().trim_start_matches('v');
        let mut parts = v.split('.');
        if parts.next()? != "1" {
            return None;
        }
        parts.next()?.parse().ok()
    }

    /// The `gpu.pool` facts of the CEL extensions: the request's own
    /// fields, what the catalog says of them, and the same of each pool.
    pub fn facts(mut self, catalog: &Catalog) -> CapacityFacts {
        let pools: Vec<PoolFacts> = if self.kind.holds_pools() {
            std::mem::take(&mut self.pools)
                .iter()
                .map(|p| p.pool_facts(catalog))
                .collect()
        } else {
            vec![self.pool_facts(catalog)]
        };
        let mut own = self.pool_facts(catalog);
        if own.request.kind.holds_pools() {
            // An object that holds pools is GPU-capable through them, and
            // tainted when each GPU-capable one is.
            own.skus = Vec::new();
            super::extend_new(&mut own.skus, pools.iter().flat_map(|p| &p.skus));
            own.gpu_capable = !own.skus.is_empty();
            own.gpu_only = !pools.is_empty() && pools.iter().all(|p| p.gpu_only);
            own.tainted = pools.iter().all(|p| !p.gpu_capable || p.tainted);
        }
        CapacityFacts { own, pools }
    }

    /// The facts of this request alone.
    fn pool_facts(&self, catalog: &Catalog) -> PoolFacts {
        let skus = self.gpu_skus(catalog);
        let mut request = self.clone();
        request.pools = Vec::new();
        PoolFacts {
            gpu_capable: !skus.is_empty(),
            gpu_only: self.gpu_only(catalog),
            skus,
            tainted: self.tainted(),
            orchestrator_minor: self.orchestrator_minor(),
            request,
        }
    }

    /// [`CapacityRequest::facts`] as JSON.
    pub fn to_json(&self, catalog: &Catalog) -> Value {
        serde_json::to_value(self.clone().facts(catalog)).unwrap_or(Value::Null)
    }
}

/// `gpu.pool`: what a capacity object asks for (see docs/cel-extensions.md):
/// its own facts and those of each pool it creates.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CapacityFacts {
    #[serde(flatten)]
    pub own: PoolFacts,
    /// The object's pools (itself, when the object is one pool).
    pub pools: Vec<PoolFacts>,
}

/// The facts of one pool (or of a whole capacity object).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolFacts {
    #[serde(flatten)]
    pub request: CapacityRequest,
    pub gpu_capable: bool,
    pub gpu_only: bool,
    /// The catalog GPU SKUs it can create nodes of.
    pub skus: Vec<String>,
    pub tainted: bool,
    pub orchestrator_minor: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::assert_fields;
    use serde_json::json;

    const FAMILY: &str = "karpenter.azure.com/sku-family";

    fn pool(v: Value) -> Value {
        CapacityRequest::from_object(&v)
            .unwrap()
            .to_json(&Catalog::embedded())
    }

    /// A NodePool of `requirements` with `extra` in its spec.
    fn nodepool(requirements: Value, extra: Value) -> Value {
        let mut spec = json!({"template": {"spec": {"requirements": requirements}}});
        let extra = extra.as_object().unwrap().clone();
        spec.as_object_mut().unwrap().extend(extra);
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "spec": spec})
    }

    /// Requirements that `key` be one of `values`.
    fn is_in(key: &str, values: &[&str]) -> Value {
        json!([{"key": key, "operator": "In", "values": values}])
    }

    fn agent_pool(spec: Value) -> Value {
        json!({"apiVersion": "containerservice.azure.com/v20260501", "kind": "ManagedClustersAgentPool", "spec": spec})
    }

    #[test]
    fn gpu_nodepool_from_aks_docs() {
        let p = pool(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
            "spec": {
                "template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["N"]},
                        {"key": "karpenter.azure.com/sku-gpu-manufacturer", "operator": "In", "values": ["nvidia"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}
                    ],
                    "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
                }},
                "limits": {"cpu": "1000", "nvidia.com/gpu": "16"},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s",
                               "budgets": [{"nodes": "10%"}]}
            }
        }));
        let want = json!({"gpuCapable": true, "gpuOnly": true, "tainted": true,
            "gpuLimit": 16, "consolidateAfter": "30s", "budgetNodes": ["10%"]});
        assert_fields(&p, want);
        let skus = p["skus"].as_array().unwrap();
        assert!(skus.contains(&json!("Standard_NC24ads_A100_v4")));
        assert!(!skus.contains(&json!("Standard_ND96isr_MI300X_v5")));
    }

    #[test]
    fn cpu_nodepool_is_not_gpu_capable() {
        let mut cpu = nodepool(is_in(FAMILY, &["D"]), json!({}));
        cpu["spec"]["template"]["spec"]["startupTaints"] =
            json!([{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]);
        let p = pool(cpu);
        let want = json!({"gpuCapable": false, "gpuOnly": false, "tainted": false,
            "sizes": [], "gpuLimit": null});
        assert_fields(&p, want);
    }

    #[test]
    fn unconstrained_nodepool_is_gpu_capable_but_not_gpu_only() {
        let p = pool(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "spec": {}}));
        assert_fields(&p, json!({"gpuCapable": true, "gpuOnly": false}));
    }

    #[test]
    fn kaito_generated_nodepool() {
        let p = pool(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "ws1", "labels": {"karpenter.kaito.sh/workspace-name": "ws1"}},
            "spec": {
                "replicas": 2,
                "template": {"spec": {
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["Standard_NC24ads_A100_v4"]},
                        {"key": "karpenter.azure.com/placement-scope", "operator": "In", "values": ["regional"]}
                    ],
                    "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]
                }},
                "disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "1", "reasons": ["Drifted"]}]}
            }
        }));
        let want = json!({"skus": ["Standard_NC24ads_A100_v4"],
            "sizes": ["Standard_NC24ads_A100_v4"], "static": true, "kaitoManaged": true,
            "count": 2, "tainted": true});
        assert_fields(&p, want);
    }

    #[test]
    fn workspace_instance_type_is_top_level() {
        let p = pool(json!({
            "apiVersion": "kaito.sh/v1beta1", "kind": "Workspace",
            "resource": {"instanceType": "Standard_NC12s_v3", "count": 2, "labelSelector": {"matchLabels": {"apps": "falcon"}}},
            "tuning": {"preset": {"name": "falcon-7b"}}
        }));
        let want = json!({"skus": ["Standard_NC12s_v3"], "count": 2, "tainted": true});
        assert_fields(&p, want);
        // spec.resource is not where KAITO reads it.
        let q = pool(
            json!({"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace",
            "spec": {"resource": {"instanceType": "Standard_NC12s_v3"}}}),
        );
        assert_fields(&q, json!({"sizes": [], "gpuCapable": false}));
    }

    #[test]
    fn kueue_resource_flavors_select_by_their_node_labels() {
        let flavor = |spec: Value| {
            pool(
                json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                "metadata": {"name": "f"}, "spec": spec}),
            )
        };
        let t4 = flavor(json!({
            "nodeLabels": {"node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3", "team": "a"},
            "nodeTaints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
            "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
        }));
        let want = json!({"kind": "ResourceFlavor", "sizes": ["Standard_NC4as_T4_v3"],
            "skus": ["Standard_NC4as_T4_v3"], "sizesField": "spec.nodeLabels", "tainted": true,
            "toleratesGpu": true, "gpuOnly": true});
        assert_fields(&t4, want);
        let cpu = flavor(
            json!({"nodeLabels": {"node.kubernetes.io/instance-type": "Standard_D8s_v5"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}),
        );
        let want = json!({"sizes": ["Standard_D8s_v5"], "skus": [],
            "toleratesGpu": true, "gpuOnly": false});
        assert_fields(&cpu, want);
        // Kueue's `default` flavor: any node, no GPU of its own.
        let default = flavor(json!({}));
        let want = json!({"sizes": [], "gpuOnly": false, "toleratesGpu": false,
            "tainted": false});
        assert_fields(&default, want);
        let nvidia = flavor(json!({"nodeLabels": {"kubernetes.azure.com/accelerator": "nvidia"}}));
        assert_eq!(nvidia["gpuOnly"], true);
        let skus = nvidia["skus"].as_array().unwrap();
        assert!(!skus.contains(&json!("Standard_ND96isr_MI300X_v5")));
        let a100 = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"}}});
        assert_eq!(launchable(a100), Some(0));
    }

    #[test]
    fn ragengine_compute_instance_type() {
        let p = pool(
            json!({"apiVersion": "kaito.sh/v1alpha1", "kind": "RAGEngine",
            "spec": {"compute": {"instanceType": "Standard_NC6s_v3", "labelSelector": {}}}}),
        );
        let want = json!({"skus": ["Standard_NC6s_v3"], "kind": "RAGEngine"});
        assert_fields(&p, want);
    }

    #[test]
    fn aso_agent_pool_sizes_taints_and_version() {
        let p = pool(json!({
            "apiVersion": "containerservice.azure.com/v20260501", "kind": "ManagedClustersAgentPool",
            "spec": {
                "owner": {"name": "aks"}, "vmSize": "Standard_D4s_v5", "osType": "Windows",
                "orchestratorVersion": "1.28.9", "maxCount": 3, "count": 1,
                "nodeTaints": ["sku=gpu:NoSchedule", "broken"],
                "virtualMachinesProfile": {"scale": {
                    "autoscale": [{"size": "Standard_NC4as_T4_v3", "minCount": 0, "maxCount": 2}],
                    "manual": [{"size": "Standard_NC6s_v3", "count": 1}, {"size": "standard_nc4as_t4_v3", "count": 1}]
                }}
            }
        }));
        let want = json!({
            "sizes": ["Standard_D4s_v5", "Standard_NC4as_T4_v3", "Standard_NC6s_v3"],
            "skus": ["Standard_NC4as_T4_v3", "Standard_NC6s_v3"], "gpuOnly": false,
            "tainted": true, "taints": ["sku=gpu:NoSchedule"], "orchestratorMinor": 28, "count": 3
        });
        assert_fields(&p, want);
    }

    #[test]
    fn aso_agent_pool_gpu_profile_and_autoscaler() {
        let p = pool(json!({
            "apiVersion": "containerservice.azure.com/v20260501", "kind": "ManagedClustersAgentPool",
            "spec": {
                "vmSize": "Standard_NC24ads_A100_v4", "osSKU": "AzureLinux",
                "enableAutoScaling": true, "minCount": 0, "maxCount": 4,
                "gpuInstanceProfile": "MIG1g",
                "gpuProfile": {"driver": "None", "nvidia": {"managementMode": "Unmanaged"}}
            }
        }));
        let want = json!({"osSku": "AzureLinux", "gpuDriver": "None",
            "gpuManagementMode": "Unmanaged", "gpuInstanceProfile": "MIG1g", "autoscaling": true,
            "minCount": 0});
        assert_fields(&p, want);
        // VirtualMachines pools: autoscaling per size, the minimums add up.
        let vm = pool(agent_pool(
            json!({"type": "VirtualMachines", "virtualMachinesProfile": {"scale": {"autoscale": [
                {"size": "Standard_NC4as_T4_v3", "minCount": 1, "maxCount": 3},
                {"size": "Standard_NC8as_T4_v3", "minCount": 2, "maxCount": 3}
            ]}}}),
        ));
        let want = json!({"autoscaling": true, "minCount": 3, "gpuDriver": null});
        assert_fields(&vm, want);
        let manual = agent_pool(json!({"vmSize": "Standard_NC4as_T4_v3", "count": 2}));
        let manual = pool(manual);
        assert_fields(&manual, json!({"autoscaling": false, "minCount": null}));
    }

    #[test]
    fn taint_parsing_and_gpu_taints() {
        assert_eq!(
            Taint::parse("nvidia.com/gpu=present:NoSchedule").unwrap(),
            Taint {
                key: "nvidia.com/gpu".into(),
                value: "present".into(),
                effect: "NoSchedule".into()
            }
        );
        let gpu = |taint| Taint::parse(taint).is_some_and(|t| is_gpu_taint(&t));
        assert!(gpu("nvidia.com/gpu:NoSchedule"));
        assert!(!gpu("sku=gpu:PreferNoSchedule"));
        assert!(!gpu("sku=cpu:NoSchedule"));
        assert!(Taint::parse("no-effect").is_none());
        assert!(Taint::parse(":NoSchedule").is_none());
    }

    #[test]
    fn pool_facts_have_every_documented_key() {
        let agent_pool = json!({"apiVersion": "containerservice.azure.com/v1api20240901",
            "kind": "ManagedClustersAgentPool", "metadata": {"name": "gpu"},
            "spec": {"vmSize": "Standard_NC24ads_A100_v4", "nodeTaints": ["sku=gpu:NoSchedule"],
                     "count": 2, "osType": "Linux", "orchestratorVersion": "1.30.3"}});
        let facts = pool(agent_pool);
        let keys: Vec<&String> = facts.as_object().unwrap().keys().collect();
        let mut keys_want: Vec<&str> =
            "kind name path specField sizesField taintsField changed pools \
            gpuCapable gpuOnly skus sizes tainted taints toleratesGpu gpuLimit count static \
            kaitoManaged consolidationPolicy consolidateAfter budgetNodes osType \
            orchestratorVersion orchestratorMinor osSku gpuDriver gpuManagementMode \
            gpuInstanceProfile autoscaling minCount"
                .split_whitespace()
                .collect();
        keys_want.sort_unstable();
        assert_eq!(keys, keys_want);
        let want = json!({"kind": "ManagedClustersAgentPool",
            "taints": ["sku=gpu:NoSchedule"], "skus": ["Standard_NC24ads_A100_v4"],
            "orchestratorMinor": 30, "gpuLimit": null, "static": false, "name": "gpu", "path": "",
            "sizesField": "spec.vmSize", "taintsField": "spec.nodeTaints", "changed": true});
        assert_fields(&facts, want);
        // An object that is one pool lists itself, with the same keys but
        // `pools`.
        let own = facts["pools"][0].as_object().unwrap();
        assert_eq!(facts["pools"].as_array().unwrap().len(), 1);
        assert_eq!(own.len(), keys_want.len() - 1);
        assert!(!own.contains_key("pools"));
        assert_eq!(own["skus"], facts["skus"]);
    }

    /// An ASO ManagedCluster as the ASO samples write it, with a system
    /// pool and the given GPU profiles.
    fn managed_cluster(gpu_profiles: Value) -> Value {
        let mut profiles = vec![json!({
            "name": "system", "mode": "System", "vmSize": "Standard_D4s_v5",
            "count": 3, "osType": "Linux"
        })];
        profiles.extend(gpu_profiles.as_array().unwrap().iter().cloned());
        json!({
            "apiVersion": "containerservice.azure.com/v1api20240901", "kind": "ManagedCluster",
            "metadata": {"name": "aks-prod", "namespace": "aks-infra"},
            "spec": {
                "location": "westus3", "owner": {"name": "aks-rg"}, "dnsPrefix": "aksprod",
                "kubernetesVersion": "1.30.4",
                "agentPoolProfiles": profiles,
                "identity": {"type": "SystemAssigned"}
            }
        })
    }

    #[test]
    fn managed_cluster_profiles_are_pools() {
        let cluster = managed_cluster(json!([
            {"name": "gpu1", "mode": "User", "vmSize": "Standard_NC24ads_A100_v4",
             "enableAutoScaling": true, "minCount": 0, "maxCount": 2,
             "nodeTaints": ["sku=gpu:NoSchedule"], "nodeLabels": {"workload": "gpu"}},
            {"name": "gpu2", "vmSize": "Standard_NC6s_v3", "count": 1, "osType": "Windows"}
        ]));
        let p = pool(cluster.clone());
        // gpu2 is untainted.
        let want = json!({"kind": "ManagedCluster", "name": "aks-prod", "gpuCapable": true,
            "gpuOnly": false, "tainted": false,
            "skus": ["Standard_NC24ads_A100_v4", "Standard_NC6s_v3"]});
        assert_fields(&p, want);
        let pools = p["pools"].as_array().unwrap();
        assert_eq!(pools.len(), 3);
        assert_fields(&pools[0], json!({"name": "system", "gpuCapable": false}));
        // A profile without orchestratorVersion runs the cluster's version.
        let want = json!({"path": "spec.agentPoolProfiles[gpu1]",
            "sizesField": "spec.agentPoolProfiles[gpu1].vmSize",
            "taintsField": "spec.agentPoolProfiles[gpu1].nodeTaints", "tainted": true,
            "autoscaling": true, "count": 2, "minCount": 0, "orchestratorMinor": 30});
        assert_fields(&pools[1], want);
        assert_fields(&pools[2], json!({"tainted": false, "osType": "Windows"}));
        // 3 D4s_v5 hold none, 2 A100 nodes one each, 1 NC6s_v3 one.
        let request = CapacityRequest::from_object(&cluster).unwrap();
        assert_eq!(request.launchable_gpus(&Catalog::embedded()), Some(3));
        assert_eq!(request.count, Some(6));
    }

    #[test]
    fn cpu_only_and_odd_managed_clusters() {
        let cpu = pool(managed_cluster(json!([])));
        assert_eq!(cpu["gpuCapable"], false);
        assert_eq!(cpu["tainted"], true, "no GPU pool is left untainted");
        // No profiles, profiles of the wrong shape, unnamed profiles: read
        // leniently, named by their index.
        let odd = json!({"apiVersion": "containerservice.azure.com/v20260501", "kind": "ManagedCluster",
            "spec": {"agentPoolProfiles": ["text", 3, {"vmSize": "Standard_NC4as_T4_v3"}, {"vmSize": 7}]}});
        let p = pool(odd);
        let pools = p["pools"].as_array().unwrap();
        assert_eq!(pools.len(), 2);
        let want = json!({"path": "spec.agentPoolProfiles[2]", "name": ""});
        assert_fields(&pools[0], want);
        assert_eq!(pools[1]["sizes"], json!([]));
        let none = pool(json!({"apiVersion": "containerservice.azure.com/v20260501",
            "kind": "ManagedCluster", "spec": {"agentPoolProfiles": {"gpu": 1}}}));
        assert_fields(&none, json!({"pools": [], "gpuOnly": false}));
    }

    #[test]
    fn capz_managed_machine_pool() {
        let ammp = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "AzureManagedMachinePool",
            "metadata": {"name": "capz-gpu", "namespace": "default"},
            "spec": {
                "mode": "User", "name": "gpupool", "sku": "Standard_NC4as_T4_v3", "osDiskSizeGB": 128,
                "scaling": {"minSize": 1, "maxSize": 3},
                "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
                "nodeLabels": {"accelerator": "nvidia"}
            }
        });
        let p = pool(ammp.clone());
        let want = json!({"kind": "AzureManagedMachinePool", "name": "gpupool",
            "sizesField": "spec.sku", "taints": ["sku=gpu:NoSchedule"], "tainted": true,
            "autoscaling": true, "minCount": 1, "count": 3});
        assert_fields(&p, want);
        assert_eq!(launchable(ammp), Some(3));
        // PreferNoSchedule keeps nothing off; the node count is the
        // MachinePool's when there is no scaling.
        let soft = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "AzureManagedMachinePool", "metadata": {"name": "soft"},
            "spec": {"sku": "Standard_NC4as_T4_v3",
                     "taints": [{"key": "sku", "value": "gpu", "effect": "PreferNoSchedule"}, {"key": 3}]}});
        let want = json!({"tainted": false, "name": "soft"});
        assert_fields(&pool(soft.clone()), want);
        assert_eq!(launchable(soft), None);
    }

    #[test]
    fn capz_aso_machine_pool_embeds_agent_pools() {
        let asomp = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "AzureASOManagedMachinePool",
            "metadata": {"name": "capz-gpu"},
            "spec": {"resources": [
                {"apiVersion": "containerservice.azure.com/v1api20231001", "kind": "ManagedClustersAgentPool",
                 "metadata": {"name": "capz-gpu"},
                 "spec": {"azureName": "gpu", "owner": {"name": "capz"}, "mode": "User",
                          "vmSize": "Standard_NC6s_v3", "nodeTaints": ["nvidia.com/gpu=present:NoSchedule"]}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
            ]}
        });
        let p = pool(asomp);
        let pools = p["pools"].as_array().unwrap();
        assert_eq!(pools.len(), 1);
        let want = json!({"name": "gpu", "path": "spec.resources[capz-gpu]",
            "sizesField": "spec.resources[capz-gpu].spec.vmSize", "tainted": true});
        assert_fields(&pools[0], want);
        assert_eq!(p["skus"], json!(["Standard_NC6s_v3"]));
        // A control plane's ManagedCluster: its inline profiles.
        let cp = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "AzureASOManagedControlPlane",
            "metadata": {"name": "capz"},
            "spec": {"resources": [{"apiVersion": "containerservice.azure.com/v1api20240901",
                "kind": "ManagedCluster", "metadata": {"name": "capz"},
                "spec": {"agentPoolProfiles": [{"name": "gpu", "vmSize": "Standard_NC4as_T4_v3"}]}}]}
        });
        let want = json!({"tainted": false,
            "path": "spec.resources[capz].spec.agentPoolProfiles[gpu]"});
        assert_fields(&pool(cp)["pools"][0], want);
    }

    fn changed(old: &Value, new: &Value) -> Value {
        let mut request = CapacityRequest::from_object(new).unwrap();
        request.compare_with(new, old);
        request.to_json(&Catalog::embedded())
    }

    #[test]
    fn an_update_changes_only_the_pools_it_touches() {
        let gpu = json!([{"name": "gpu1", "vmSize": "Standard_NC6s_v3", "count": 1}]);
        let old = managed_cluster(gpu.clone());
        // ASO's annotations, a new CPU pool, another setting: gpu1 unchanged.
        let cpu2 = json!({"name": "cpu2", "vmSize": "Standard_D8s_v5", "count": 2});
        let mut new = managed_cluster(json!([gpu[0], cpu2]));
        new["metadata"]["annotations"] = json!({"serviceoperator.azure.com/resource-id": "/x"});
        new["spec"]["kubernetesVersion"] = json!("1.31.1");
        let facts = changed(&old, &new);
        let flags: Vec<(&str, bool)> = (facts["pools"].as_array().unwrap().iter())
            .map(|p| (p["name"].as_str().unwrap(), p["changed"].as_bool().unwrap()))
            .collect();
        assert_eq!(flags, [("system", false), ("gpu1", false), ("cpu2", true)]);
        assert_eq!(facts["changed"], true);
        // Scaling gpu1 changes it.
        let mut scaled = new.clone();
        scaled["spec"]["agentPoolProfiles"][1]["count"] = json!(3);
        assert_eq!(changed(&new, &scaled)["pools"][1]["changed"], true);
        assert_eq!(changed(&new, &new)["changed"], false);

        // An object that is one pool: its spec and labels count, not its
        // annotations or status.
        let pool = json!({"apiVersion": "containerservice.azure.com/v20260501",
            "kind": "ManagedClustersAgentPool", "metadata": {"name": "gpu"},
            "spec": {"vmSize": "Standard_NC6s_v3", "count": 1}});
        let mut annotated = pool.clone();
        annotated["metadata"]["annotations"] = json!({"a": "b"});
        annotated["metadata"]["finalizers"] = json!(["serviceoperator.azure.com/finalizer"]);
        annotated["status"] = json!({"provisioningState": "Succeeded"});
        assert_eq!(changed(&pool, &annotated)["changed"], false);
        assert_eq!(changed(&pool, &annotated)["pools"][0]["changed"], false);
        let mut labelled = pool.clone();
        labelled["metadata"]["labels"] = json!({"team": "ml"});
        assert_eq!(changed(&pool, &labelled)["changed"], true);
        let mut resized = pool.clone();
        resized["spec"]["count"] = json!(2);
        assert_eq!(changed(&pool, &resized)["changed"], true);
        // KAITO's top-level resource counts too.
        let ws = json!({"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace",
            "resource": {"instanceType": "Standard_NC6s_v3"}});
        let mut ws2 = ws.clone();
        ws2["resource"]["count"] = json!(2);
        assert_eq!(changed(&ws, &ws2)["changed"], true);
        assert_eq!(changed(&ws, &ws)["changed"], false);
        // An old object of another shape: everything changed.
        assert_eq!(changed(&json!("text"), &new)["changed"], true);
    }

    fn launchable(v: Value) -> Option<i64> {
        CapacityRequest::from_object(&v)
            .unwrap()
            .launchable_gpus(&Catalog::embedded())
    }

    #[test]
    fn gpus_a_capacity_object_can_launch() {
        // A NodePool's GPU limit bounds it, whatever sizes it allows.
        let limits = json!({"limits": {"nvidia.com/gpu": "16"}});
        let limited = nodepool(is_in(FAMILY, &["N"]), limits);
        assert_eq!(launchable(limited), Some(16));
        // GPU sizes and no limit: nothing bounds it.
        assert_eq!(launchable(nodepool(is_in(FAMILY, &["N"]), json!({}))), None);
        // A KAITO static pool: replicas times the size's GPUs.
        let nd96 = is_in("node.kubernetes.io/instance-type", &["Standard_ND96asr_v4"]);
        assert_eq!(launchable(nodepool(nd96, json!({"replicas": 2}))), Some(16));
        let cpu = nodepool(is_in(FAMILY, &["D"]), json!({}));
        assert_eq!(launchable(cpu), Some(0));
        let workspace = json!({"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace",
            "resource": {"instanceType": "Standard_NC12s_v3", "count": 3}});
        assert_eq!(launchable(workspace), Some(6));
        let one_node = json!({"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace",
            "resource": {"instanceType": "Standard_NC24ads_A100_v4"}});
        assert_eq!(launchable(one_node), Some(1));
        // An agent pool: its most nodes times the size's GPUs.
        let autoscaled = agent_pool(
            json!({"vmSize": "Standard_NC12s_v3", "enableAutoScaling": true, "minCount": 0, "maxCount": 4}),
        );
        assert_eq!(launchable(autoscaled), Some(8));
        // VirtualMachines pools: every scale entry.
        let vm = agent_pool(
            json!({"type": "VirtualMachines", "virtualMachinesProfile": {"scale": {
            "autoscale": [{"size": "Standard_NC12s_v3", "minCount": 0, "maxCount": 3}],
            "manual": [{"size": "Standard_NC4as_T4_v3", "count": 2}, {"size": "Standard_D4s_v5", "count": 5}]}}}),
        );
        assert_eq!(launchable(vm), Some(3 * 2 + 2));
    }

    #[test]
    fn other_objects_are_not_capacity_objects() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod"});
        for other in [pod, json!({"kind": "NodePool"}), json!("text")] {
            assert!(CapacityRequest::from_object(&other).is_none(), "{other}");
        }
    }
}
