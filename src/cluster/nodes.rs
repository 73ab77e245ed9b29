//! The cluster's Nodes (and Karpenter NodePools) as the GPU boundary
//! reads them, kept current by a watch. Everything else a Node carries
//! (images, conditions, addresses, annotations) is dropped before it is
//! stored, so the cache stays small on clusters of thousands of nodes.
use super::watch::{self, CacheMetrics, Event, Kind, Settings, Watched};
use crate::gpu::{NodeLookup, NodeSnapshot};
use crate::k8s::NodeInfo;
use k8s_openapi::api::core::v1::Node;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Nodes of a live cluster, kept current by a watch (needs list and watch
/// on nodes). Empty until the first list completes. Each Node is read into
/// a [`NodeInfo`] once per change that touches what it keeps (status
/// heartbeats change nothing here), and requests share one snapshot until
/// the next such change.
#[derive(Clone)]
pub struct ClusterNodes {
    inner: Arc<std::sync::RwLock<Known>>,
    /// The node watch, once started: while the cluster refuses the list,
    /// requests are judged by labels.
    watched: Arc<std::sync::OnceLock<Watched>>,
    /// The one empty, unlisted snapshot requests share while no node is
    /// known.
    unlisted: Arc<NodeSnapshot>,
}

impl Default for ClusterNodes {
    fn default() -> ClusterNodes {
        ClusterNodes {
            inner: Arc::default(),
            watched: Arc::default(),
            unlisted: Arc::new(NodeSnapshot::unlisted()),
        }
    }
}

#[derive(Default)]
struct Known {
    nodes: Relisted<NodeInfo>,
    /// The NodePools watched.
    pools: Relisted<Value>,
    /// Of both, shared by requests until either changes.
    snapshot: Option<Arc<NodeSnapshot>>,
}

/// Objects by name, as the watch last listed and changed them.
struct Relisted<V> {
    held: BTreeMap<String, V>,
    /// While a (re)list is under way: what it has seen so far.
    relisting: Option<BTreeMap<String, V>>,
}

impl<V> Default for Relisted<V> {
    fn default() -> Self {
        Relisted {
            held: BTreeMap::new(),
            relisting: None,
        }
    }
}

impl<V: PartialEq> Relisted<V> {
    /// Takes one watch event, each object read into its name and value;
    /// whether what is held changed.
    fn take<K: kube::Resource>(
        &mut self,
        event: Event<K>,
        read: impl Fn(&K) -> Option<(String, V)>,
    ) -> bool {
        match event {
            Event::Init => {
                self.relisting = Some(BTreeMap::new());
                false
            }
            Event::InitApply(object) => {
                if let (Some((name, value)), Some(list)) = (read(&object), self.relisting.as_mut())
                {
                    list.insert(name, value);
                }
                false
            }
            Event::InitDone => {
                let list = self.relisting.take().unwrap_or_default();
                let changed = list != self.held;
                self.held = list;
                changed
            }
            Event::Apply(object) => match read(&object) {
                Some((name, value)) if self.held.get(&name) != Some(&value) => {
                    self.held.insert(name, value);
                    true
                }
                _ => false,
            },
            Event::Delete(object) => {
                let name = object.meta().name.clone().unwrap_or_default();
                self.held.remove(&name).is_some()
            }
        }
    }
}

impl ClusterNodes {
    /// The Node kind: a cluster that refuses the server the list (RBAC) is
    /// judged by labels rather than left without a ready replica (every
    /// GPU pod would then wait on this webhook); the log says what to grant.
    pub fn kind() -> Kind {
        Kind::new("nodes", "", "v1", "nodes").forbidden_is_empty(
            "get, list and watch on nodes (deploy/base/rbac.yaml), or pass --node-cache=off",
        )
    }

    /// Karpenter's `karpenter.sh/v1` NodePools: a cluster without
    /// Karpenter, or that refuses the list, has none.
    pub fn pool_kind() -> Kind {
        Kind::new("node pools", "karpenter.sh", "v1", "nodepools").forbidden_is_empty(
            "get, list and watch on nodepools.karpenter.sh (deploy/base/rbac.yaml)",
        )
    }

    /// Starts watching Nodes with `client`; the task runs until aborted.
    pub fn start(
        client: kube::Client,
        settings: Settings,
        metrics: CacheMetrics,
    ) -> (ClusterNodes, tokio::task::JoinHandle<()>) {
        let lookup = ClusterNodes::default();
        let writer = lookup.clone();
        let (watched, task) = watch::start(
            client,
            ClusterNodes::kind(),
            settings,
            metrics,
            watch::sink(move |mut event: Event<Node>| {
                if let Event::InitApply(node) | Event::Apply(node) = &mut event {
                    trim(node);
                }
                writer.apply(event)
            }),
        );
        let _ = lookup.watched.set(watched);
        (lookup, task)
    }

    /// The node watch, once started.
    pub fn watched(&self) -> Option<Watched> {
        self.watched.get().cloned()
    }

    /// Takes one watch event into the cache.
    pub fn apply(&self, event: Event<Node>) {
        let read = |node: &Node| {
            let info = NodeInfo::from_value(&serde_json::to_value(node).ok()?);
            Some((info.name.clone(), info))
        };
        let mut known = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if known.nodes.take(event, read) {
            known.snapshot = None;
        }
    }

    /// Also watches Karpenter's NodePools with `client` into this cache.
    /// The task runs until aborted.
    pub fn watch_node_pools(
        &self,
        client: kube::Client,
        settings: Settings,
        metrics: CacheMetrics,
    ) -> (Watched, tokio::task::JoinHandle<()>) {
        let pools = self.inner.clone();
        watch::start(
            client,
            ClusterNodes::pool_kind(),
            settings,
            metrics,
            watch::sink(move |event| apply_pool(&pools, event)),
        )
    }
}

/// What a NodePool is judged by: its name and `spec.template`.
fn pool_value(pool: &kube::api::DynamicObject) -> Option<(String, Value)> {
    let name = pool.metadata.name.clone()?;
    let template = pool
        .data
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    Some((
        name.clone(),
        serde_json::json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name}, "spec": {"template": template}}),
    ))
}

fn apply_pool(pools: &std::sync::RwLock<Known>, event: Event<kube::api::DynamicObject>) {
    let mut known = pools.write().unwrap_or_else(|e| e.into_inner());
    if known.pools.take(event, pool_value) {
        known.snapshot = None;
    }
}

/// Keeps only what [`NodeInfo`] reads.
fn trim(node: &mut Node) {
    let meta = &mut node.metadata;
    meta.annotations = None;
    meta.owner_references = None;
    meta.finalizers = None;
    if let Some(spec) = node.spec.as_mut() {
        spec.config_source = None;
        spec.pod_cidrs = None;
        spec.pod_cidr = None;
        spec.provider_id = None;
    }
    if let Some(status) = node.status.as_mut() {
        let allocatable = status.allocatable.take();
        *status = Default::default();
        status.allocatable = allocatable;
    }
}

impl NodeLookup for ClusterNodes {
    fn nodes(&self) -> Option<Arc<NodeSnapshot>> {
        // Never listed, refused (or, oddly, not served): no node is known.
        if self.watched.get().is_some_and(|w| !w.holds_list()) {
            return Some(self.unlisted.clone());
        }
        if let Some(snapshot) = &self
            .inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .snapshot
        {
            return Some(snapshot.clone());
        }
        let mut known = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let snapshot = Arc::new(NodeSnapshot::new(
            known.nodes.held.values().cloned().collect(),
            known.pools.held.values().cloned().collect(),
        ));
        known.snapshot = Some(snapshot.clone());
        Some(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, labels: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "4"}}}))
        .unwrap()
    }

    #[test]
    fn the_cache_follows_the_watch_and_shares_a_snapshot_between_changes() {
        let nodes = ClusterNodes::default();
        assert_eq!(nodes.nodes().unwrap().nodes.len(), 0);
        nodes.apply(Event::Init);
        nodes.apply(Event::InitApply(node("a", json!({"pool": "cpu"}))));
        nodes.apply(Event::InitApply(node("b", json!({"pool": "gpu"}))));
        assert_eq!(
            nodes.nodes().unwrap().nodes.len(),
            0,
            "a list counts once it is whole"
        );
        nodes.apply(Event::InitDone);
        let first = nodes.nodes().unwrap();
        assert_eq!(first.nodes.len(), 2);
        // A heartbeat that changes nothing kept: the same snapshot.
        let mut beat = node("a", json!({"pool": "cpu"}));
        beat.status.as_mut().unwrap().capacity = Some(Default::default());
        nodes.apply(Event::Apply(beat));
        assert!(Arc::ptr_eq(&first, &nodes.nodes().unwrap()));
        nodes.apply(Event::Apply(node("a", json!({"pool": "gpu"}))));
        let second = nodes.nodes().unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(second.nodes[0].label("pool"), Some("gpu"));
        nodes.apply(Event::Delete(node("b", json!({}))));
        assert_eq!(nodes.nodes().unwrap().nodes.len(), 1);
        // A relist replaces what was known.
        nodes.apply(Event::Init);
        nodes.apply(Event::InitApply(node("c", json!({}))));
        nodes.apply(Event::InitDone);
        let names: Vec<String> = nodes
            .nodes()
            .unwrap()
            .nodes
            .iter()
            .map(|n| n.name.clone())
            .collect();
        assert_eq!(names, ["c"]);
    }

    #[test]
    fn only_what_is_read_is_kept() {
        let mut node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n", "labels": {"a": "b"}, "annotations": {"big": "x"}},
            "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}], "providerID": "azure:///x"},
            "status": {"allocatable": {"cpu": "4"}, "images": [{"names": ["x"], "sizeBytes": 1}],
                "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        trim(&mut node);
        let v = serde_json::to_value(&node).unwrap();
        assert_eq!(v["metadata"].get("annotations"), None);
        assert_eq!(v["status"], json!({"allocatable": {"cpu": "4"}}));
        assert_eq!(NodeInfo::from_value(&v).taints.len(), 1);
    }
}
