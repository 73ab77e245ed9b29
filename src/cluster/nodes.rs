//! The cluster's Nodes (with Karpenter NodePools, and the DRA
//! DeviceClasses and ResourceSlices that serve GPUs on nodes) as the GPU
//! boundary reads them, kept current by watches. Everything else a Node carries
//! (images, addresses, annotations, every condition but the GPU problems of
//! [`crate::gpu::health`]) is dropped before it is stored, so the cache
//! stays small on clusters of thousands of nodes.
use super::watch::{self, CacheMetrics, Event, Kind, Relisted, Settings, Watched};
use crate::gpu::reach::node_size;
use crate::gpu::{DraDevices, NodeLookup, NodeSnapshot};
use crate::k8s::json::Pointer;
use crate::k8s::NodeInfo;
use k8s_openapi::api::core::v1::Node;
use serde_json::Value;
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
    /// DRA DeviceClasses and ResourceSlices, as far as [`DraDevices`]
    /// reads them.
    classes: Relisted<Value>,
    slices: Relisted<Value>,
    /// Of all, shared by requests until one changes.
    snapshot: Option<Arc<NodeSnapshot>>,
}

/// Where a kind watched beside the nodes is held, and how one is read.
type Held = fn(&mut Known) -> &mut Relisted<Value>;
type Read = fn(&kube::api::DynamicObject) -> Option<(String, Value)>;

impl ClusterNodes {
    /// Starts watching Nodes with `client`; the task runs until aborted. A
    /// cluster that refuses the server the list (RBAC) is judged by labels
    /// rather than left without a ready replica (every GPU pod would then
    /// wait on this webhook); the log says what to grant.
    pub fn start(
        client: kube::Client,
        settings: Settings,
        metrics: CacheMetrics,
    ) -> (ClusterNodes, tokio::task::JoinHandle<()>) {
        let kind = Kind::new("nodes", "", "v1", "nodes").forbidden_is_empty(
            "get, list and watch on nodes (deploy/base/rbac.yaml), or pass --node-cache=off",
        );
        let lookup = ClusterNodes::default();
        let writer = lookup.clone();
        let (watched, task) = watch::start(
            client,
            kind,
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

    /// The VM size of node `name` ([`node_size`]), while the cache holds it.
    pub fn size_of(&self, name: &str) -> Option<String> {
        let known = self.inner.read().unwrap_or_else(|e| e.into_inner());
        node_size(known.nodes.held.get(name)?).map(str::to_string)
    }

    /// Takes one watch event into the cache.
    pub fn apply(&self, event: Event<Node>) {
        let read = |node: &Node| {
            let info = NodeInfo::from_value(&serde_json::to_value(node).ok()?);
            Some((info.name.clone(), info))
        };
        self.take(|k| &mut k.nodes, read, event);
    }

    /// Also watches Karpenter's `karpenter.sh/v1` NodePools with `client`
    /// into this cache: a cluster without Karpenter, or that refuses the
    /// list, has none. The task runs until aborted.
    pub fn watch_node_pools(
        &self,
        client: kube::Client,
        settings: Settings,
        metrics: CacheMetrics,
    ) -> (Watched, tokio::task::JoinHandle<()>) {
        let rbac = "get, list and watch on nodepools.karpenter.sh (deploy/base/rbac.yaml)";
        let kind = Kind::new("node pools", "karpenter.sh", "v1", "nodepools");
        let kind = kind.forbidden_is_empty(rbac);
        self.watch_into(
            client,
            kind,
            settings,
            metrics,
            |k| &mut k.pools,
            pool_value,
        )
    }

    /// Also watches `resource.k8s.io/v1` DeviceClasses and ResourceSlices
    /// (KEP-5004: a class may serve `nvidia.com/gpu` from the slices'
    /// devices) with `client` into this cache: a cluster before Kubernetes
    /// 1.34, or that refuses the list, has none. The tasks run until
    /// aborted.
    pub fn watch_devices(
        &self,
        client: kube::Client,
        settings: Settings,
        metrics: CacheMetrics,
    ) -> [(Watched, tokio::task::JoinHandle<()>); 2] {
        let rbac = "get, list and watch on deviceclasses and resourceslices.resource.k8s.io (deploy/base/rbac.yaml)";
        let kinds: [(&str, &str, Held, Read); 2] = [
            (
                "device classes",
                "deviceclasses",
                |k| &mut k.classes,
                |o| device_value("DeviceClass", o),
            ),
            (
                "resource slices",
                "resourceslices",
                |k| &mut k.slices,
                |o| device_value("ResourceSlice", o),
            ),
        ];
        kinds.map(|(name, plural, held, read)| {
            let kind = Kind::new(name, "resource.k8s.io", "v1", plural).forbidden_is_empty(rbac);
            self.watch_into(client.clone(), kind, settings, metrics.clone(), held, read)
        })
    }

    /// Watches `kind` into the objects `held` picks, each read by `read`.
    fn watch_into(
        &self,
        client: kube::Client,
        kind: Kind,
        settings: Settings,
        metrics: CacheMetrics,
        held: Held,
        read: Read,
    ) -> (Watched, tokio::task::JoinHandle<()>) {
        let this = self.clone();
        let sink = watch::sink(move |event| this.take(held, read, event));
        watch::start(client, kind, settings, metrics, sink)
    }

    /// Takes one watch event into the objects `held` picks; a change
    /// drops the shared snapshot.
    fn take<K, V: PartialEq>(
        &self,
        held: impl FnOnce(&mut Known) -> &mut Relisted<V>,
        read: impl Fn(&K) -> Option<(String, V)>,
        event: Event<K>,
    ) {
        let mut known = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if held(&mut known).take(event, read) {
            known.snapshot = None;
        }
    }
}

/// What a NodePool is judged by: its name and `spec.template`.
fn pool_value(pool: &kube::api::DynamicObject) -> Option<(String, Value)> {
    let name = pool.metadata.name.clone()?;
    let template = pool
        .data
        .at("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    Some((
        name.clone(),
        serde_json::json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name}, "spec": {"template": template}}),
    ))
}

/// What [`DraDevices`] reads of a DeviceClass or ResourceSlice (`kind`):
/// its name, creation time and the spec fields that say which devices
/// serve which nodes; device attributes, capacities and counters, and a
/// class's configuration, are dropped.
fn device_value(kind: &str, object: &kube::api::DynamicObject) -> Option<(String, Value)> {
    const KEPT: [&str; 9] = [
        "extendedResourceName",
        "selectors",
        "driver",
        "pool",
        "nodeName",
        "nodeSelector",
        "allNodes",
        "perDeviceNodeSelection",
        "devices",
    ];
    let name = object.metadata.name.clone()?;
    let mut spec = object.data.get("spec").cloned().unwrap_or_default();
    if let Some(spec) = spec.as_object_mut() {
        spec.retain(|k, _| KEPT.contains(&k.as_str()));
        for device in spec
            .get_mut("devices")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(device) = device.as_object_mut() {
                device.retain(|k, _| KEPT[4..8].contains(&k.as_str()) || k == "name");
            }
        }
    }
    let created = &object.metadata.creation_timestamp;
    Some((
        name.clone(),
        serde_json::json!({"apiVersion": "resource.k8s.io/v1", "kind": kind,
            "metadata": {"name": name, "creationTimestamp": created}, "spec": spec}),
    ))
}

/// Keeps only what [`NodeInfo`] reads, and of the conditions the GPU
/// problems present (their times dropped: a heartbeat changes nothing).
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
        let mut conditions = status.conditions.take().unwrap_or_default();
        conditions.retain(|c| crate::gpu::health::is_gpu_problem(&c.type_, &c.status));
        for c in &mut conditions {
            (c.last_heartbeat_time, c.last_transition_time) = (None, None);
        }
        *status = Default::default();
        status.allocatable = allocatable;
        status.conditions = Some(conditions).filter(|c| !c.is_empty());
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
        let devices = DraDevices::read(
            known
                .classes
                .held
                .values()
                .chain(known.slices.held.values()),
        );
        let snapshot = Arc::new(NodeSnapshot::new(
            known.nodes.held.values().cloned().collect(),
            known.pools.held.values().cloned().collect(),
            &devices,
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
    fn the_gpus_dra_serves_on_a_node_follow_the_device_watches() {
        let nodes = ClusterNodes::default();
        nodes.apply(Event::Init);
        nodes.apply(Event::InitApply(node("dra-1", json!({}))));
        nodes.apply(Event::InitDone);
        let class = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com", "creationTimestamp": "2026-09-01T10:00:00Z"},
            "spec": {"extendedResourceName": "nvidia.com/gpu",
                "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
                "config": [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {}}}]}});
        let slice = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "dra-1-gpu.nvidia.com-x"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "dra-1",
                "pool": {"name": "dra-1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0", "attributes": {"productName": {"string": "NVIDIA A100"}},
                    "capacity": {"memory": {"value": "80Gi"}}}]}});
        let dynamic =
            |v: &Value| serde_json::from_value::<kube::api::DynamicObject>(v.clone()).unwrap();
        let gpus = || {
            nodes.nodes().unwrap().nodes[0]
                .allocatable
                .get("nvidia.com/gpu")
                .cloned()
        };
        assert_eq!(gpus(), None);
        let classes = |o: &_| device_value("DeviceClass", o);
        nodes.take(|k| &mut k.classes, classes, Event::Apply(dynamic(&class)));
        let slices = |o: &_| device_value("ResourceSlice", o);
        nodes.take(|k| &mut k.slices, slices, Event::Apply(dynamic(&slice)));
        assert_eq!(gpus().as_deref(), Some("1"));
        // Only what is read is kept.
        let known = nodes.inner.read().unwrap();
        assert_eq!(
            known.slices.held["dra-1-gpu.nvidia.com-x"]["spec"]["devices"],
            json!([{"name": "gpu-0"}])
        );
        assert_eq!(
            known.classes.held["gpu.nvidia.com"]["spec"].get("config"),
            None
        );
        drop(known);
        nodes.take(|k| &mut k.slices, slices, Event::Delete(dynamic(&slice)));
        assert_eq!(gpus(), None);
    }

    #[test]
    fn only_what_is_read_is_kept() {
        let mut node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n", "labels": {"a": "b"}, "annotations": {"big": "x"}},
            "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}], "providerID": "azure:///x"},
            "status": {"allocatable": {"cpu": "4"}, "images": [{"names": ["x"], "sizeBytes": 1}],
                "conditions": [{"type": "Ready", "status": "True"},
                    {"type": "GPUMissing", "status": "False", "reason": "NoGPUMissing"},
                    {"type": "XIDErrors", "status": "True", "reason": "XIDErrors", "message": "XID 79",
                        "lastHeartbeatTime": "2026-12-01T10:00:00Z", "lastTransitionTime": "2026-12-01T09:00:00Z"}]}
        }))
        .unwrap();
        trim(&mut node);
        let v = serde_json::to_value(&node).unwrap();
        assert_eq!(v["metadata"].get("annotations"), None);
        assert_eq!(
            v["status"],
            json!({"allocatable": {"cpu": "4"}, "conditions": [
                {"type": "XIDErrors", "status": "True", "reason": "XIDErrors", "message": "XID 79"}]})
        );
        assert_eq!(NodeInfo::from_value(&v).taints.len(), 1);
    }
}
