//! Which GPU nodes a pod can land on, judged against the nodes that exist
//! (see docs/threat-model.md): the taints it tolerates and the node
//! selection it has (nodeSelector, required and preferred node affinity,
//! any label) or the node it names (`spec.nodeName`, which skips the
//! scheduler and its taints).
use super::catalog::Catalog;
use super::request::parse_count;
use super::selection::SkuRequirement;
use super::{DraDevices, GpuResources};
use crate::k8s::json::{items, str_at, Pointer};
use crate::k8s::{
    NodeInfo, NodeSelection, NodeSelectorOperator as Operator, NodeSelectorRequirement,
    NodeSelectorTerm, Toleration,
};
use arc_swap::ArcSwapOption;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;

/// A node with GPUs: a GPU resource in its allocatable resources (a
/// device plugin's, or served by DRA: [`NodeSnapshot::new`]), or a
/// label only GPU nodes carry (AKS's accelerator label, a GPU size,
/// Karpenter's GPU count, the GPU Operator's and feature discovery's own).
pub fn is_gpu_node(node: &NodeInfo, resources: &GpuResources, catalog: &Catalog) -> bool {
    node.allocatable
        .iter()
        .any(|(name, q)| resources.matches(name) && parse_count(q).is_ok_and(|n| n > 0))
        || node
            .labels
            .iter()
            .any(|(k, v)| NodeSelectorRequirement::equals(k, v).requires_gpu_node(catalog))
}

/// How a pod meets the GPU nodes of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeReach {
    /// GPU nodes the pod can run on: its required selection (or nodeName)
    /// allows them and it tolerates their NoSchedule and NoExecute taints
    /// (a pod bound by nodeName skips the scheduler: taints do not keep it
    /// off). Names, in node order.
    pub reachable: Vec<String>,
    /// Its own nodeName, nodeSelector or required node affinity picks GPU
    /// nodes and no other node.
    pub aims: bool,
    /// A preferred node-affinity term picks GPU nodes and no other node,
    /// and the pod can run on one of them.
    pub prefers: bool,
    /// The node `spec.nodeName` names, when it exists.
    pub bound_to: Option<NodeInfo>,
}

/// `spec.nodeName`, when set.
pub fn node_name(spec: &Value) -> Option<&str> {
    Some(str_at(spec, "/nodeName")).filter(|n| !n.is_empty())
}

/// The nodes a pod names: `spec.nodeName`, the `kubernetes.io/hostname`
/// of its nodeSelector and the values of `kubernetes.io/hostname In` in its
/// required node affinity. Judged against no listed node, each may be a
/// GPU node.
pub fn named_nodes(spec: &Value) -> Vec<String> {
    const HOSTNAME: &str = "kubernetes.io/hostname";
    let mut names: Vec<String> = node_name(spec).map(str::to_string).into_iter().collect();
    if let Some(name) = spec.at("/nodeSelector").and_then(|s| s.get(HOSTNAME)) {
        names.extend(name.as_str().map(str::to_string));
    }
    let terms = spec.at(
        "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms",
    );
    for term in items(terms) {
        for expression in items(term.get("matchExpressions")) {
            if str_at(expression, "/key") == HOSTNAME && str_at(expression, "/operator") == "In" {
                names.extend(
                    items(expression.get("values")).filter_map(|v| v.as_str().map(str::to_string)),
                );
            }
        }
    }
    names.retain(|n| !n.is_empty());
    names.dedup();
    names
}

/// The nodes Karpenter NodePools could create, as nodes: one with GPUs
/// for a pool that can launch GPU sizes, one without for a pool that can
/// launch other sizes, each with the labels every node of the pool carries
/// (`karpenter.sh/nodepool`, the template's labels, the values of
/// single-valued `In` requirements) and the template's taints. Named
/// `NodePool/<name>`.
pub fn pool_nodes(pools: &[Value], catalog: &Catalog) -> Vec<NodeInfo> {
    let mut out = Vec::new();
    for pool in pools {
        let Some(request) = super::capacity::CapacityRequest::from_object(pool) else {
            continue;
        };
        let name = str_at(pool, "/metadata/name");
        let template = pool.at("/spec/template");
        let mut labels: std::collections::BTreeMap<String, String> = template
            .and_then(|t| t.at("/metadata/labels"))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        for r in items(template.and_then(|t| t.at("/spec/requirements"))) {
            let values: Vec<&str> = items(r.get("values")).filter_map(Value::as_str).collect();
            if str_at(r, "/operator") == "In" && values.len() == 1 {
                labels.insert(str_at(r, "/key").to_string(), values[0].to_string());
            }
        }
        labels.insert("karpenter.sh/nodepool".to_string(), name.to_string());
        let taints: Vec<crate::k8s::Taint> = items(template.and_then(|t| t.at("/spec/taints")))
            .filter_map(crate::k8s::Taint::from_value)
            .collect();
        let node = |gpu: bool| NodeInfo {
            name: format!("NodePool/{name}"),
            labels: labels.clone(),
            taints: taints.clone(),
            allocatable: [("nvidia.com/gpu".to_string(), "1".to_string())]
                .into_iter()
                .filter(|_| gpu)
                .collect(),
            conditions: Vec::new(),
        };
        if !request.gpu_skus(catalog).is_empty() {
            out.push(node(true));
        }
        if !request.gpu_only(catalog) {
            out.push(node(false));
        }
    }
    out
}

/// One snapshot of the node cache: the nodes and the Karpenter NodePools
/// (as JSON with their name and `spec.template`: the nodes they could
/// create count like nodes that exist). Every request that sees it shares
/// it, and with it its GPU classification ([`NodeSnapshot::gpu_nodes`]).
#[derive(Debug)]
pub struct NodeSnapshot {
    pub nodes: Vec<NodeInfo>,
    pub pools: Vec<Value>,
    /// False while the node cache has never held a whole list of the
    /// cluster's nodes (or is refused them): then no node is known, and a
    /// node a pod names may be a GPU node ([`GpuNodes::listed`]).
    pub listed: bool,
    /// Worked out on first use; replaced when a reload brings another
    /// catalog or other GPU resources.
    classified: ArcSwapOption<Classification>,
}

/// Which nodes of a snapshot, and of those its NodePools could create
/// ([`pool_nodes`]), are GPU nodes, and what that was worked out with.
#[derive(Debug)]
struct Classification {
    more: Vec<NodeInfo>,
    /// For the snapshot's nodes then `more`, in order.
    gpu: Vec<bool>,
    catalog: super::SkuList,
    resources: GpuResources,
}

/// The nodes of a snapshot, each told GPU node or not.
pub struct GpuNodes<'a> {
    nodes: &'a [NodeInfo],
    classified: Arc<Classification>,
    /// See [`NodeSnapshot::listed`].
    pub listed: bool,
}

impl NodeSnapshot {
    /// `nodes`, each with the extended resources DRA serves on it
    /// ([`DraDevices::add_to`]), and Karpenter `pools`.
    pub fn new(mut nodes: Vec<NodeInfo>, pools: Vec<Value>, devices: &DraDevices) -> NodeSnapshot {
        for node in &mut nodes {
            devices.add_to(node);
        }
        NodeSnapshot {
            nodes,
            pools,
            listed: true,
            classified: ArcSwapOption::empty(),
        }
    }

    /// No node known yet: the node cache is on but has not listed the
    /// cluster's nodes. Pods are judged by labels, and a pod bound to a
    /// node by name is judged as bound to a GPU node (fail closed).
    pub fn unlisted() -> NodeSnapshot {
        NodeSnapshot {
            listed: false,
            ..NodeSnapshot::new(Vec::new(), Vec::new(), &DraDevices::default())
        }
    }

    /// The snapshot's nodes classified with `resources` and `catalog`:
    /// worked out once, then shared by every request that uses the same.
    pub fn gpu_nodes(&self, resources: &GpuResources, catalog: &Catalog) -> GpuNodes<'_> {
        let known = self.classified.load_full();
        let classified = match known {
            Some(c) if &c.catalog == catalog.names() && &c.resources == resources => c,
            _ => {
                let more = pool_nodes(&self.pools, catalog);
                let gpu = (self.nodes.iter().chain(&more))
                    .map(|n| is_gpu_node(n, resources, catalog))
                    .collect();
                let made = Arc::new(Classification {
                    more,
                    gpu,
                    catalog: catalog.names().clone(),
                    resources: resources.clone(),
                });
                self.classified.store(Some(made.clone()));
                made
            }
        };
        GpuNodes {
            nodes: &self.nodes,
            classified,
            listed: self.listed,
        }
    }
}

/// Labels every node of a group carrying one value of has the same size:
/// an AKS node pool (one VM size per pool) and one node.
const ONE_SIZE_KEYS: [&str; 3] = [
    "kubernetes.azure.com/agentpool",
    "agentpool",
    "kubernetes.io/hostname",
];

/// The size label of a node, as AKS and Karpenter write it.
pub fn node_size(node: &NodeInfo) -> Option<&str> {
    [
        "node.kubernetes.io/instance-type",
        "beta.kubernetes.io/instance-type",
        "karpenter.azure.com/sku-name",
    ]
    .iter()
    .find_map(|k| node.label(k))
}

impl GpuNodes<'_> {
    /// The sizes a pod's selection lands it on, known from the nodes that
    /// exist: when each of its alternatives names node pools or nodes
    /// ([`ONE_SIZE_KEYS`] `In`), the sizes of the nodes that carry them.
    /// `None` when some pool or node it names has no node listed (a pool
    /// scaled to zero may come back at any size the catalog has), or a
    /// node has no size label: then its labels alone say where it lands.
    pub fn sizes_selected(&self, selection: &NodeSelection) -> Option<BTreeSet<&str>> {
        let names = |reqs: &[NodeSelectorRequirement]| -> Vec<(String, String)> {
            reqs.iter()
                .filter(|r| r.operator == Operator::In && ONE_SIZE_KEYS.contains(&r.key.as_str()))
                .flat_map(|r| r.values.iter().map(|v| (r.key.clone(), v.clone())))
                .collect()
        };
        let mut named = names(&selection.required);
        if named.is_empty() {
            for term in selection.terms.iter().flatten() {
                let own = names(&term.requirements);
                if own.is_empty() && !term.matches_nothing {
                    return None;
                }
                named.extend(own);
            }
        }
        if !self.listed || named.is_empty() {
            return None;
        }
        let mut sizes = BTreeSet::new();
        for (key, value) in &named {
            let mut carrying = self
                .nodes
                .iter()
                .filter(|n| n.label(key) == Some(value))
                .peekable();
            carrying.peek()?;
            for node in carrying {
                sizes.insert(node_size(node)?);
            }
        }
        Some(sizes)
    }

    /// Every node with whether it is a GPU node.
    fn all(&self) -> impl Iterator<Item = (&NodeInfo, bool)> {
        (self.nodes.iter().chain(&self.classified.more)).zip(self.classified.gpu.iter().copied())
    }

    /// The node named `name` (nodes that exist only), and whether it is a
    /// GPU node.
    pub fn named(&self, name: &str) -> Option<(&NodeInfo, bool)> {
        (self.nodes.iter().zip(self.classified.gpu.iter().copied())).find(|(n, _)| n.name == name)
    }
}

/// The nodes a request is judged against.
pub trait NodeLookup: Send + Sync {
    /// The current snapshot, or `None` when nodes are not known at all (no
    /// cluster, or the cache is switched off): callers then judge by
    /// labels alone.
    fn nodes(&self) -> Option<Arc<NodeSnapshot>>;
}

/// No node known: judged by labels alone.
pub struct NoNodes;

impl NodeLookup for NoNodes {
    fn nodes(&self) -> Option<Arc<NodeSnapshot>> {
        None
    }
}

/// A fixed set of nodes and NodePools (tests, offline evaluation).
#[derive(Clone, Debug)]
pub struct StaticNodes(Arc<NodeSnapshot>);

impl StaticNodes {
    pub fn new(nodes: Vec<NodeInfo>) -> StaticNodes {
        StaticNodes::with_pools(nodes, Vec::new())
    }

    /// Nodes, Karpenter NodePools and the devices DRA serves on them, as a
    /// cluster's list or a dump of it gives them.
    pub fn of_objects(nodes: &[Value], pools: Vec<Value>, devices: &DraDevices) -> StaticNodes {
        let nodes = nodes.iter().map(NodeInfo::from_value).collect();
        StaticNodes(Arc::new(NodeSnapshot::new(nodes, pools, devices)))
    }

    /// [`StaticNodes::new`] with these Karpenter NodePools too.
    pub fn with_pools(nodes: Vec<NodeInfo>, pools: Vec<Value>) -> StaticNodes {
        StaticNodes(Arc::new(NodeSnapshot::new(
            nodes,
            pools,
            &DraDevices::default(),
        )))
    }
}

impl NodeLookup for StaticNodes {
    fn nodes(&self) -> Option<Arc<NodeSnapshot>> {
        Some(self.0.clone())
    }
}

/// How the pod of `spec` meets the GPU nodes of `set`.
pub fn reach(spec: &Value, set: &GpuNodes) -> NodeReach {
    let tolerations: Vec<Toleration> = items(spec.get("tolerations"))
        .map(Toleration::from_value)
        .collect();
    let tolerated = |node: &NodeInfo| {
        node.taints
            .iter()
            .filter(|t| t.repels())
            .all(|t| tolerations.iter().any(|tol| tol.tolerates(t)))
    };
    let mut out = NodeReach::default();
    if let Some(name) = node_name(spec) {
        if let Some((node, gpu)) = set.named(name) {
            out.bound_to = Some(node.clone());
            if gpu {
                out.aims = true;
                out.reachable.push(node.name.clone());
            }
        }
        return out;
    }
    let selection = NodeSelection::from_pod_spec(spec);
    let fields = required_field_names(spec);
    let allowed = |node: &NodeInfo| {
        selection.matches(|k| node.label(k))
            && fields
                .as_ref()
                .is_none_or(|names| names.contains(&node.name))
    };
    let mut picks_other = false;
    let mut picks_gpu = false;
    for (node, is_gpu) in set.all() {
        if !allowed(node) {
            continue;
        }
        if is_gpu {
            picks_gpu = true;
            if tolerated(node) {
                out.reachable.push(node.name.clone());
            }
        } else {
            picks_other = true;
        }
    }
    let selects = !selection.is_empty() || fields.is_some();
    out.aims = selects && picks_gpu && !picks_other;
    out.prefers = preferred_terms(spec).any(|term| {
        let mut picks_gpu = false;
        for (node, is_gpu) in set.all() {
            if term.matches(|k| node.label(k)) {
                if !is_gpu {
                    return false;
                }
                picks_gpu |= out.reachable.contains(&node.name);
            }
        }
        picks_gpu
    });
    out
}

/// The preferred node-affinity terms of a pod spec that can match a node.
pub fn preferred_terms(spec: &Value) -> impl Iterator<Item = NodeSelectorTerm> + '_ {
    items(spec.at("/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution"))
        .filter_map(|p| p.get("preference"))
        .map(NodeSelectorTerm::from_value)
        .filter(|t| !t.matches_nothing && !t.requirements.is_empty())
}

/// Node names the required terms allow through `matchFields` on
/// `metadata.name` (`In` only), when every term names some; `None` when a
/// term does not restrict names.
fn required_field_names(spec: &Value) -> Option<Vec<String>> {
    let terms = spec
        .at("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)?;
    let mut names = Vec::new();
    for term in terms {
        let fields: Vec<&Value> = items(term.get("matchFields"))
            .filter(|f| str_at(f, "/key") == "metadata.name" && str_at(f, "/operator") == "In")
            .collect();
        if fields.is_empty() {
            return None;
        }
        for f in fields {
            names.extend(
                items(f.get("values"))
                    .filter_map(Value::as_str)
                    .map(String::from),
            );
        }
    }
    (!terms.is_empty()).then_some(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::with_terms;
    use crate::k8s::Taint;
    use serde_json::json;

    fn node(name: &str, labels: &[(&str, &str)], gpus: u32, tainted: bool) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .chain([
                    ("kubernetes.io/hostname".to_string(), name.to_string()),
                    ("kubernetes.io/os".to_string(), "linux".to_string()),
                ])
                .collect(),
            taints: if tainted {
                vec![Taint::parse("sku=gpu:NoSchedule").unwrap()]
            } else {
                Vec::new()
            },
            allocatable: [("nvidia.com/gpu".to_string(), gpus.to_string())]
                .into_iter()
                .filter(|_| gpus > 0)
                .collect(),
            conditions: Vec::new(),
        }
    }

    /// A system node, two tainted GPU nodes, an untainted GPU node.
    fn cluster() -> Vec<NodeInfo> {
        const AGENTPOOL: &str = "kubernetes.azure.com/agentpool";
        let pool = |name, pool, gpus, tainted| node(name, &[(AGENTPOOL, pool)], gpus, tainted);
        vec![
            pool("aks-system-1", "system", 0, false),
            pool("aks-gpupool-1", "gpupool", 1, true),
            pool("aks-gpupool-2", "gpupool", 1, true),
            pool("aks-bare-1", "bare", 2, false),
        ]
    }

    fn judge(spec: Value) -> NodeReach {
        let snapshot = NodeSnapshot::new(cluster(), Vec::new(), &DraDevices::default());
        let catalog = Catalog::embedded();
        let nodes = snapshot.gpu_nodes(&GpuResources::default(), &catalog);
        reach(&spec, &nodes)
    }

    #[test]
    fn gpu_nodes_are_known_by_resources_or_labels() {
        let (r, c) = (GpuResources::default(), Catalog::embedded());
        let gpu =
            |labels: &[(&str, &str)], gpus| is_gpu_node(&node("a", labels, gpus, false), &r, &c);
        assert!(gpu(&[], 1));
        assert!(gpu(&[("nvidia.com/gpu.deploy.dcgm-exporter", "true")], 0));
        let size = "node.kubernetes.io/instance-type";
        assert!(gpu(&[(size, "Standard_NC24ads_A100_v4")], 0));
        assert!(!gpu(&[(size, "Standard_D4s_v5")], 0));
    }

    #[test]
    fn a_node_whose_gpus_dra_serves_is_a_gpu_node_with_that_many() {
        let objects = [
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"extendedResourceName": "nvidia.com/gpu",
                    "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}),
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": "dra-1-gpu"},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": "dra-1",
                    "pool": {"name": "dra-1", "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}}),
        ];
        let mut nodes = cluster();
        nodes.push(node("dra-1", &[], 0, false));
        let catalog = Catalog::embedded();
        let resources = GpuResources::default();
        let plain = NodeSnapshot::new(nodes.clone(), Vec::new(), &DraDevices::default());
        let served = NodeSnapshot::new(nodes, Vec::new(), &DraDevices::read(&objects));
        let bound = json!({"nodeName": "dra-1"});
        let unserved = reach(&bound, &plain.gpu_nodes(&resources, &catalog));
        assert!(unserved.reachable.is_empty());
        let set = served.gpu_nodes(&resources, &catalog);
        let r = reach(&bound, &set);
        assert!(r.aims);
        assert_eq!(r.reachable, ["dra-1"]);
        assert_eq!(r.bound_to.unwrap().allocatable["nvidia.com/gpu"], "2");
        // Untainted: any pod the scheduler places can land there.
        let anywhere = reach(&json!({}), &set).reachable;
        assert!(anywhere.contains(&"dra-1".to_string()));
    }

    #[test]
    fn the_agent_pool_name_picks_gpu_nodes_once_the_nodes_are_known() {
        let r = judge(json!({"nodeSelector": {"kubernetes.azure.com/agentpool": "gpupool"}}));
        assert!(r.aims);
        assert!(r.reachable.is_empty(), "the taint still keeps it off");
        let r = judge(
            json!({"nodeSelector": {"kubernetes.azure.com/agentpool": "gpupool"},
            "tolerations": [{"operator": "Exists"}]}),
        );
        assert_eq!(r.reachable, ["aks-gpupool-1", "aks-gpupool-2"]);
        // A selection that also picks CPU nodes does not aim at GPU nodes.
        let r = judge(json!({"nodeSelector": {"kubernetes.io/os": "linux"}}));
        assert!(!r.aims);
        let why = "an untainted GPU node takes anything";
        assert_eq!(r.reachable, ["aks-bare-1"], "{why}");
        assert!(!judge(json!({})).aims);
    }

    #[test]
    fn the_nodes_a_pod_names() {
        assert_eq!(named_nodes(&json!({"nodeName": "a"})), ["a"]);
        assert_eq!(
            named_nodes(&json!({"nodeSelector": {"kubernetes.io/hostname": "b"},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["c", "d"]},
                        {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["e"]}]}]}}}})),
            ["b", "c", "d"]
        );
        // A DaemonSet's pod names its node in matchFields: not a name that
        // binds it (the scheduler still applies taints).
        let fields = with_terms(
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["f"]}]}]),
        );
        assert!(named_nodes(&fields).is_empty());
        assert!(named_nodes(&json!({"nodeName": ""})).is_empty());
    }

    #[test]
    fn node_name_skips_taints() {
        let r = judge(json!({"nodeName": "aks-gpupool-1"}));
        assert!(r.aims);
        assert_eq!(r.reachable, ["aks-gpupool-1"]);
        assert_eq!(r.bound_to.unwrap().name, "aks-gpupool-1");
        let r = judge(json!({"nodeName": "aks-system-1"}));
        assert!(!r.aims && r.reachable.is_empty());
        assert!(judge(json!({"nodeName": "gone"})).bound_to.is_none());
    }

    #[test]
    fn preferred_affinity_counts_where_the_pod_can_land() {
        let prefer = json!({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
            "preference": {"matchExpressions": [{"key": "kubernetes.azure.com/agentpool", "operator": "In", "values": ["gpupool"]}]}}]});
        assert!(!judge(json!({"affinity": {"nodeAffinity": prefer.clone()}})).prefers);
        let r = judge(
            json!({"affinity": {"nodeAffinity": prefer}, "tolerations": [{"operator": "Exists"}]}),
        );
        assert!(r.prefers && !r.aims);
    }

    #[test]
    fn a_nodepool_counts_for_the_nodes_it_could_create() {
        let catalog = Catalog::embedded();
        let pools_json = vec![
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
                    "spec": {"template": {"metadata": {"labels": {"team": "ml"}}, "spec": {
                        "requirements": [{"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["N"]}],
                        "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]}}}}),
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"},
                    "spec": {"template": {"spec": {"requirements": [
                        {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["D"]}]}}}}),
        ];
        let snapshot = NodeSnapshot::new(cluster(), pools_json, &DraDevices::default());
        let set = snapshot.gpu_nodes(&GpuResources::default(), &catalog);
        let pools = &set.classified.more;
        assert_eq!(pools.len(), 2, "{pools:?}");
        assert_eq!(pools[0].label("karpenter.sh/nodepool"), Some("gpu"));
        assert_eq!(pools[0].label("team"), Some("ml"));
        let judge = |spec: Value| reach(&spec, &set);
        // A pool that scales from zero: no node yet, but the pod would get one.
        let r = judge(
            json!({"nodeSelector": {"karpenter.sh/nodepool": "gpu"}, "tolerations": [{"operator": "Exists"}]}),
        );
        assert!(r.aims);
        assert_eq!(r.reachable, ["NodePool/gpu"]);
        let r = judge(json!({"nodeSelector": {"team": "ml"}}));
        assert!(r.aims && r.reachable.is_empty());
        assert!(!judge(json!({"nodeSelector": {"karpenter.sh/nodepool": "general"}})).aims);
    }

    #[test]
    fn the_pools_and_nodes_a_selection_names_give_its_sizes() {
        const SIZE: &str = "node.kubernetes.io/instance-type";
        const POOL: &str = "kubernetes.azure.com/agentpool";
        let sized = |name, pool, size| node(name, &[(POOL, pool), (SIZE, size)], 1, true);
        let snapshot = NodeSnapshot::new(
            vec![
                sized("aks-h100-1", "h100", "Standard_ND96isr_H100_v5"),
                sized("aks-t4-1", "t4", "Standard_NC4as_T4_v3"),
                node("aks-bare-1", &[(POOL, "bare")], 1, true),
            ],
            Vec::new(),
            &DraDevices::default(),
        );
        let catalog = Catalog::embedded();
        let nodes = snapshot.gpu_nodes(&GpuResources::default(), &catalog);
        let sizes = |spec: Value| {
            let sizes = nodes.sizes_selected(&NodeSelection::from_pod_spec(&spec));
            sizes.map(|s| s.into_iter().collect::<Vec<_>>().join(" "))
        };
        let term = |key: &str, values: &[&str]| json!({"matchExpressions": [{"key": key, "operator": "In", "values": values}]});
        let h100 = "Standard_ND96isr_H100_v5";
        let both = Some(format!("Standard_NC4as_T4_v3 {h100}"));
        let one = Some(h100.to_string());
        assert_eq!(sizes(json!({"nodeSelector": {POOL: "h100"}})), one);
        let by_name = json!({"nodeSelector": {"kubernetes.io/hostname": "aks-h100-1"}});
        assert_eq!(sizes(by_name), one);
        let pools = term(POOL, &["h100", "t4"]);
        assert_eq!(sizes(with_terms(json!([pools]))), both);
        let by_host = term("kubernetes.io/hostname", &["aks-t4-1"]);
        assert_eq!(
            sizes(with_terms(json!([term(POOL, &["h100"]), by_host]))),
            both
        );
        // Unknown: a pool with no node (scaled to zero), a node without a
        // size label, a term that names no pool, no pool named at all.
        for spec in [
            json!({"nodeSelector": {POOL: "zero"}}),
            json!({"nodeSelector": {POOL: "bare"}}),
            with_terms(json!([pools, term(SIZE, &[h100])])),
            json!({"nodeSelector": {SIZE: h100}}),
            json!({}),
        ] {
            assert_eq!(sizes(spec.clone()), None, "{spec}");
        }
        let unlisted = NodeSnapshot::unlisted();
        let none = unlisted.gpu_nodes(&GpuResources::default(), &catalog);
        let spec = json!({"nodeSelector": {POOL: "h100"}});
        assert_eq!(
            none.sizes_selected(&NodeSelection::from_pod_spec(&spec)),
            None
        );
    }

    #[test]
    fn a_classification_is_shared_while_the_snapshots_are_the_same() {
        let (r, c) = (GpuResources::default(), Catalog::embedded());
        let lookup = StaticNodes::new(cluster());
        // Two requests on one snapshot share its classification.
        let (one, two) = (lookup.nodes().unwrap(), lookup.nodes().unwrap());
        let first = one.gpu_nodes(&r, &c).classified;
        assert!(Arc::ptr_eq(&first, &two.gpu_nodes(&r, &c).classified));
        // A new snapshot with the same content: worked out again.
        let again = StaticNodes::new(cluster()).nodes().unwrap();
        let second = again.gpu_nodes(&r, &c).classified;
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(first.gpu, second.gpu);
        assert_eq!(second.gpu, [false, true, true, true]);
    }

    #[test]
    fn a_reload_with_other_resources_or_catalog_classifies_the_snapshot_again() {
        let (r, c) = (GpuResources::default(), Catalog::embedded());
        let mut amd = node("amd", &[], 0, false);
        amd.allocatable.insert("amd.com/gpu".into(), "1".into());
        let a100 = [(
            "node.kubernetes.io/instance-type",
            "Standard_NC24ads_A100_v4",
        )];
        let snapshot = NodeSnapshot::new(
            vec![amd, node("a100", &a100, 0, false)],
            Vec::new(),
            &DraDevices::default(),
        );
        assert_eq!(snapshot.gpu_nodes(&r, &c).classified.gpu, [true, true]);
        let nvidia = GpuResources::new(["nvidia.com/gpu"]).unwrap();
        let by_nvidia = snapshot.gpu_nodes(&nvidia, &c).classified;
        assert_eq!(by_nvidia.gpu, [false, true]);
        let csv = include_str!("../../data/azure-gpu-skus.csv");
        let t4_only: Vec<&str> = (csv.lines())
            .filter(|l| !l.starts_with("Standard_") || l.starts_with("Standard_NC4as_T4_v3,"))
            .collect();
        let t4_only = Catalog::from_csv_str(&t4_only.join("\n"), "t4.csv").unwrap();
        let reloaded = snapshot.gpu_nodes(&r, &t4_only).classified;
        assert_eq!(reloaded.gpu, [true, false]);
        // The reload's classification is the one kept.
        let again = snapshot.gpu_nodes(&r, &t4_only).classified;
        assert!(Arc::ptr_eq(&reloaded, &again));
    }

    #[test]
    fn match_fields_name_nodes() {
        let r = judge(with_terms(
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["aks-bare-1"]}]}]),
        ));
        assert!(r.aims);
        assert_eq!(r.reachable, ["aks-bare-1"]);
    }
}
