//! The `gpu` CEL variable: what an object asks of GPUs, computed once per
//! request in Rust so policies stay short.
//!
//! For Pods and pod templates (Deployment, StatefulSet, DaemonSet,
//! ReplicaSet, Job, CronJob, PodTemplate) it describes the pod's GPU
//! requests, tolerations and node selection; for capacity objects
//! (NodePool, Workspace, InferenceSet, RAGEngine, ManagedClustersAgentPool,
//! ManagedCluster, CAPZ machine pools) it adds `pool`. A pod's DRA claims count their GPU devices (see
//! [`super::claims`]); a ResourceClaim or ResourceClaimTemplate judged on
//! its own gets the devices it asks for. Every other object gets the same
//! keys with empty values, so `gpu.requested` is always safe to read.
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

use super::capacity::CapacityRequest;
use super::catalog::Catalog;
use super::claims::{request_devices, ClaimGpuRequest};
use super::fit::{FitFacts, PodResources};
use super::mig::MigFacts;
use super::pools::CapacityFacts;
use super::request::{
    add_into, ephemeral_container_requests, int, parse_count, pod_gpu_request, ContainerGpuRequest,
    GpuQuantity, PodGpuRequest,
};
use super::selection::{SkuRequirement, SkuSelection};
use super::taints::{tolerates_every_taint, tolerates_gpu_taint};
use super::visibility::{pod_access, ContainerAccess, PodContext};
use super::{GpuResources, SkuList};
use crate::k8s::claims::{
    claim_spec, container_claims, pod_claims, ClaimKind, ClaimLookup, NoClaims, PodClaim,
};
use crate::k8s::json::{items, scalar_string, str_at};
use crate::k8s::workloads::{pod_metadata, pod_spec};
use crate::k8s::NodeSelection;

/// The `gpu` variable (see docs/cel-extensions.md). Integers are `i64` so
/// that CEL sees `int`, as it does for numbers of the object itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuFacts {
    pub requested: bool,
    pub total: i64,
    /// GPUs per resource the pod holds while it runs.
    pub resources: BTreeMap<String, i64>,
    pub containers: Vec<ContainerFacts>,
    /// `spec.ephemeralContainers` (`kubectl debug`), type
    /// `ephemeralContainer`; not counted in `requested` or `total`.
    pub ephemeral_containers: Vec<ContainerFacts>,
    pub tolerates: bool,
    pub tolerates_all: bool,
    pub shared_by_scheduler: bool,
    /// For a share asked through the `gpu-fraction` / `gpu-memory`
    /// annotation: the container it goes to (`gpu-fraction-container-name`,
    /// else the first); empty otherwise.
    pub shared_container: String,
    /// Its own node selection (nodeSelector, required node affinity,
    /// `spec.nodeName`) picks GPU nodes and no other node: by labels only
    /// GPU nodes carry, or, with the nodes known, by any label.
    pub selects_gpu_nodes: bool,
    /// A preferred node-affinity term picks GPU nodes and no other node,
    /// and the pod can land on them (it tolerates their taints).
    pub prefers_gpu_nodes: bool,
    /// `spec.nodeName` (empty when the scheduler places the pod).
    pub node_name: String,
    /// With the nodes known: the GPU nodes the pod can land on (its
    /// selection allows them and it tolerates their taints, or it names
    /// one), at most [`REACHABLE_SHOWN`]; empty when none, or unknown.
    pub reachable_gpu_nodes: Vec<String>,
    /// Whether the cluster's nodes were known when this was worked out.
    pub nodes_known: bool,
    /// With the nodes known, for a GPU pod: the nodes it names
    /// ([`super::reach::named_nodes`]) whose GPUs are reported unhealthy
    /// ([`super::health`]).
    pub unhealthy_nodes: Vec<UnhealthyNode>,
    pub skus_constrained: bool,
    /// Catalog SKUs the pod's node selection allows, in catalog order
    /// (when that is every SKU, the catalog's own list, shared).
    #[serde(serialize_with = "super::write_sku_list")]
    pub skus: SkuList,
    pub max_sku_gpus: i64,
    /// Whether the pod's CPU and memory fit the sizes in `skus` (see
    /// [`super::fit`]); left at its default in facts worked out for
    /// placement alone ([`Detail::Placement`]).
    pub fit: FitFacts,
    /// Whether the pod's MIG slices fit the sizes its node selection
    /// allows (see [`super::mig`]).
    pub mig: MigFacts,
    /// The pod's DRA claims (or the ResourceClaim / ResourceClaimTemplate
    /// itself) and the GPU devices each asks for.
    pub claims: Vec<ClaimFacts>,
    /// Every container (init, regular, ephemeral) and the GPUs it can
    /// reach beyond its own (see [`super::visibility`]).
    pub access: Vec<ContainerAccess>,
    /// Capacity objects only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<CapacityFacts>,
    /// How placement sees the pod (set by admission; empty otherwise).
    pub placement: PlacementFacts,
    /// The pods and GPUs of the whole workload: a Pod's own, or the sum
    /// over a workload's templates (set by admission; zero otherwise).
    pub workload: WorkloadFacts,
    /// The pod's GPU request as read, for the Rust side (placement, audit).
    #[serde(skip)]
    pub request: PodGpuRequest,
    /// Who the facts were worked out for.
    #[serde(skip)]
    pub detail: Detail,
}

/// Who a pod's facts are worked out for: the policies (the `gpu`
/// variable, every fact), or placement alone, which reads neither `fit`
/// nor what it is worked out from, so `/mutate` spends nothing on them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Detail {
    #[default]
    Policies,
    Placement,
}

/// One container of the pod.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ContainerFacts {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub gpus: BTreeMap<String, i64>,
    pub total: i64,
    pub problems: Vec<String>,
}

/// A node whose GPUs are reported unhealthy, with the conditions that say so.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnhealthyNode {
    pub name: String,
    pub conditions: Vec<crate::k8s::NodeCondition>,
}

/// One DRA claim of the pod.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimFacts {
    /// The pod's name for the claim (the object's name for a claim or
    /// template judged on its own).
    pub name: String,
    /// `ResourceClaim` or `ResourceClaimTemplate` (empty when the pod's
    /// entry names neither).
    pub kind: &'static str,
    /// The name of that ResourceClaim or ResourceClaimTemplate.
    pub source: String,
    /// Whether its spec was found; a claim not found counts no device.
    pub found: bool,
    /// GPU devices per device class.
    pub devices: BTreeMap<String, i64>,
    pub total: i64,
    /// Some request takes every matching device of the node
    /// (`allocationMode: All`), counted as described in docs/dra.md.
    pub allocates_all: bool,
}

/// `gpu.placement`: the placement profile that serves the pod and, when
/// the pod's own node selection excludes every node that profile allows,
/// why (empty otherwise).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PlacementFacts {
    pub profile: String,
    pub conflict: String,
    /// The catalog SKUs the profile's own required terms allow, when they
    /// narrow the catalog at all (empty otherwise): what a pod is held to
    /// by placement rather than by anything its author wrote. Shared with
    /// the placement profiles, which work it out once.
    #[serde(serialize_with = "super::write_sku_list")]
    pub skus: SkuList,
}

/// `gpu.workload`: what a whole workload holds. For a Pod, itself; for a
/// Deployment, Job, RayCluster, PyTorchJob... the sum over its templates
/// of replicas × GPUs per pod, and the same with the replicas it may scale
/// up to (`maxReplicas` where the kind autoscales).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadFacts {
    pub pods: i64,
    pub max_pods: i64,
    pub gpus: i64,
    pub max_gpus: i64,
}

impl WorkloadFacts {
    /// The sum over `(replicas, max replicas, GPUs per pod)`.
    pub fn of(templates: impl IntoIterator<Item = (i64, i64, i64)>) -> WorkloadFacts {
        templates
            .into_iter()
            .fold(WorkloadFacts::default(), |w, (replicas, max, gpus)| {
                WorkloadFacts {
                    pods: w.pods.saturating_add(replicas),
                    max_pods: w.max_pods.saturating_add(max),
                    gpus: w.gpus.saturating_add(replicas.saturating_mul(gpus)),
                    max_gpus: w.max_gpus.saturating_add(max.saturating_mul(gpus)),
                }
            })
    }
}

impl GpuFacts {
    /// The facts of `object`: a Pod, an object with a pod template, a
    /// capacity object, or anything else (every key, empty values).
    /// A pod's DRA claims are not looked up: each counts no device (see
    /// [`GpuFacts::claiming`]).
    pub fn of(object: &Value, catalog: &Catalog, resources: &GpuResources) -> GpuFacts {
        GpuFacts::claiming(object, &NoClaims, catalog, resources)
    }

    /// [`GpuFacts::of`], the pod's DRA claims looked up in `lookup` in its
    /// namespace (`metadata.namespace`).
    pub fn claiming(
        object: &Value,
        lookup: &dyn ClaimLookup,
        catalog: &Catalog,
        resources: &GpuResources,
    ) -> GpuFacts {
        GpuFacts::claiming_for(object, lookup, catalog, resources, Detail::Policies)
    }

    /// [`GpuFacts::claiming`], worked out for `detail`'s readers.
    pub fn claiming_for(
        object: &Value,
        lookup: &dyn ClaimLookup,
        catalog: &Catalog,
        resources: &GpuResources,
        detail: Detail,
    ) -> GpuFacts {
        let namespace = str_at(object, "/metadata/namespace");
        let claims = pod_spec(object)
            .map(|spec| pod_claims(spec, namespace, lookup))
            .unwrap_or_default();
        GpuFacts::with_claims_for(object, &claims, catalog, resources, detail)
    }

    /// [`GpuFacts::of`], with the pod's DRA claims already looked up
    /// ([`pod_claims`]).
    pub fn with_claims(
        object: &Value,
        claims: &[PodClaim],
        catalog: &Catalog,
        resources: &GpuResources,
    ) -> GpuFacts {
        GpuFacts::with_claims_for(object, claims, catalog, resources, Detail::Policies)
    }

    /// [`GpuFacts::with_claims`], worked out for `detail`'s readers.
    pub fn with_claims_for(
        object: &Value,
        claims: &[PodClaim],
        catalog: &Catalog,
        resources: &GpuResources,
        detail: Detail,
    ) -> GpuFacts {
        let mut facts = match pod_spec(object) {
            Some(spec) => pod_facts(
                spec,
                pod_metadata(object).and_then(|m| m.get("annotations")),
                claims,
                catalog,
                resources,
                detail,
            ),
            None => claim_object_facts(object, resources).unwrap_or_default(),
        };
        facts.pool = CapacityRequest::from_object(object).map(|pool| pool.facts(catalog));
        facts
    }

    /// On an UPDATE from `old`: the capacity pools `object` leaves as they
    /// were are not `changed` (see [`CapacityRequest::compare_with`]).
    pub fn compare_pools(&mut self, object: &Value, old: &Value, catalog: &Catalog) {
        if self.pool.is_some() {
            self.pool = CapacityRequest::from_object(object).map(|mut pool| {
                pool.compare_with(object, old);
                pool.facts(catalog)
            });
        }
    }
}

impl GpuFacts {
    /// The facts of a pod (or pod template) judged against the cluster's
    /// `nodes`: which GPU nodes it can land on, whether its selection (any
    /// label, `spec.nodeName`) or its preferred affinity picks GPU nodes
    /// only, and, for a pod bound to a node by name, that node's size in
    /// place of what its selection allows. The nodes Karpenter NodePools
    /// could create count like nodes that exist.
    pub fn with_nodes(
        mut self,
        object: &Value,
        set: &super::reach::GpuNodes,
        catalog: &Catalog,
    ) -> GpuFacts {
        let Some(spec) = pod_spec(object) else {
            return self;
        };
        self.nodes_known = set.listed;
        // A GPU pod belongs on GPU nodes: only the node it may name matters.
        let reach = if !set.listed {
            // No node listed yet (or refused): judged by labels, as without
            // a node cache, except that a pod that asks for no GPU and names
            // its node is taken as bound to a GPU node (fail closed).
            let named = super::reach::named_nodes(spec);
            let mut reach = super::reach::NodeReach::default();
            if !(self.requested || self.shared_by_scheduler || named.is_empty()) {
                reach.aims = true;
                reach.reachable = named
                    .into_iter()
                    .map(|n| format!("{n}, which may be a GPU node: the server has not listed the cluster's nodes"))
                    .collect();
            }
            reach
        } else if self.requested || self.shared_by_scheduler {
            let named = super::reach::named_nodes(spec);
            self.unhealthy_nodes = (named.iter().filter_map(|n| set.named(n)))
                .map(|(node, _)| UnhealthyNode {
                    name: node.name.clone(),
                    conditions: super::health::gpu_problems(node)
                        .into_iter()
                        .cloned()
                        .collect(),
                })
                .filter(|n| !n.conditions.is_empty())
                .collect();
            let mut reach = super::reach::NodeReach::default();
            if let Some((node, gpu)) = super::reach::node_name(spec).and_then(|n| set.named(n)) {
                reach.bound_to = Some(node.clone());
                if gpu {
                    reach.reachable.push(node.name.clone());
                }
            } else {
                self.narrow_to_named(spec, set, catalog);
            }
            reach
        } else {
            super::reach::reach(spec, set)
        };
        self.selects_gpu_nodes |= reach.aims;
        self.prefers_gpu_nodes |= reach.prefers;
        self.reachable_gpu_nodes = reach.reachable.into_iter().take(REACHABLE_SHOWN).collect();
        if let Some(node) = &reach.bound_to {
            // Bound by name: the node's own size is the only one possible.
            let size = super::reach::node_size(node);
            self.narrow_to(
                size.and_then(|s| catalog.get(s)).into_iter().collect(),
                catalog,
            );
        }
        // Aimed at GPU nodes by what the pod wrote (an untainted GPU node a
        // pod can reach without asking is the node pool's gap, not its).
        if reach.aims || reach.prefers {
            let context = PodContext {
                asks_gpu: self.request.requested(),
                bound_for_gpu_nodes: true,
                debug_hidden: self.request.requested() || self.tolerates || self.tolerates_all,
            };
            let containers = &self.containers;
            self.access = pod_access(
                spec,
                pod_metadata(object).and_then(|m| m.get("annotations")),
                context,
                |kind, name| asks_gpu(containers, kind, name),
            );
        }
        self
    }
}

impl GpuFacts {
    /// The request placement places the pod by: its own or, for a share of
    /// a GPU that a sharing scheduler hands out without a GPU resource
    /// ([`SHARING_SCHEDULERS`]), one `nvidia.com/gpu` (they share NVIDIA
    /// GPUs), so the pod gets the GPU toleration and GPU nodes.
    pub fn placed_request(&self) -> std::borrow::Cow<'_, PodGpuRequest> {
        if !self.shared_by_scheduler || self.request.requested() {
            return std::borrow::Cow::Borrowed(&self.request);
        }
        let mut share = self.request.clone();
        share.effective.insert("nvidia.com/gpu".to_string(), 1);
        std::borrow::Cow::Owned(share)
    }

    /// The sizes the pod can land on are `skus` alone (known from nodes).
    /// Narrowed to the sizes of the node pools or nodes the pod's selection
    /// (of pod spec `spec`) names, when the nodes `set` holds carry them,
    /// whatever else it selects ([`super::reach::GpuNodes::sizes_selected`]).
    pub fn narrow_to_named(
        &mut self,
        spec: &Value,
        set: &super::reach::GpuNodes,
        catalog: &Catalog,
    ) {
        if let Some(sizes) = set.sizes_selected(&NodeSelection::from_pod_spec(spec)) {
            self.narrow_to(
                sizes.iter().filter_map(|s| catalog.get(s)).collect(),
                catalog,
            );
        }
    }

    fn narrow_to(&mut self, skus: Vec<&super::catalog::Sku>, catalog: &Catalog) {
        self.skus_constrained = true;
        self.max_sku_gpus = (skus.iter().map(|s| i64::from(s.gpu_devices)).max()).unwrap_or(0);
        if self.detail == Detail::Policies {
            self.fit = FitFacts::of(self.fit.requested, &skus, self.request.total());
        }
        self.mig = MigFacts::of(&self.request, &skus, true, catalog);
        self.skus = catalog.list_of(&skus);
    }
}

/// Does a preferred node-affinity term pick GPU nodes by labels only GPU
/// nodes carry?
fn prefers_gpu_labels(spec: &Value, catalog: &Catalog) -> bool {
    super::reach::preferred_terms(spec)
        .any(|t| (t.requirements.iter()).any(|r| r.requires_gpu_node(catalog)))
}

/// At most this many GPU node names are kept in `reachableGpuNodes`.
pub const REACHABLE_SHOWN: usize = 5;

/// The `gpu` variable for `object` as JSON.
pub fn facts(object: &Value, catalog: &Catalog, resources: &GpuResources) -> Value {
    serde_json::to_value(GpuFacts::of(object, catalog, resources)).unwrap_or(Value::Null)
}

/// Annotations through which a GPU-sharing scheduler (KAI Scheduler,
/// Run:ai) gives a pod part of a GPU without a GPU resource.
pub const SHARED_GPU_ANNOTATIONS: [&str; 2] = ["gpu-fraction", "gpu-memory"];

/// The `schedulerName`s of the schedulers that act on
/// [`SHARED_GPU_ANNOTATIONS`]: any other scheduler (the default one
/// included) ignores them, so they make no GPU pod of their own.
pub const SHARING_SCHEDULERS: [&str; 2] = ["kai-scheduler", "runai-scheduler"];

/// Resource name prefixes of GPU shares that device plugins of sharing
/// schedulers advertise on GPU nodes only (Volcano's vGPU and GPU-share
/// plugins): a pod asking for one is a GPU pod whatever its scheduler.
pub const SHARED_GPU_RESOURCE_PREFIXES: [&str; 2] = ["volcano.sh/vgpu-", "volcano.sh/gpu-"];

/// The container a share asked by annotation goes to, as KAI Scheduler
/// picks it: `gpu-fraction-container-name`, else the first container;
/// empty without a `gpu-fraction` / `gpu-memory` annotation.
fn share_container(spec: &Value, annotations: Option<&Value>) -> String {
    let asked = |a: &&serde_json::Map<String, Value>| {
        SHARED_GPU_ANNOTATIONS.iter().any(|k| a.contains_key(*k))
    };
    let Some(annotations) = annotations.and_then(Value::as_object).filter(asked) else {
        return String::new();
    };
    annotations
        .get("gpu-fraction-container-name")
        .and_then(Value::as_str)
        .unwrap_or_else(|| str_at(spec, "/containers/0/name"))
        .to_string()
}

/// Does the pod ask a GPU-sharing scheduler for part of a GPU: a
/// `gpu-fraction` or `gpu-memory` annotation with a scheduler that reads
/// it ([`SHARING_SCHEDULERS`]), or a GPU-share resource
/// ([`SHARED_GPU_RESOURCE_PREFIXES`]) in some container?
fn shared_by_scheduler(spec: &Value, annotations: Option<&Value>) -> bool {
    let scheduler = str_at(spec, "/schedulerName");
    let annotated = annotations.and_then(Value::as_object).is_some_and(|a| {
        SHARED_GPU_ANNOTATIONS.iter().any(|k| {
            a.get(*k)
                .and_then(Value::as_str)
                .is_some_and(|v| !v.trim().is_empty())
        })
    });
    (annotated && SHARING_SCHEDULERS.contains(&scheduler)) || asks_shared_resource(spec)
}

/// Some container or init container asks for a GPU-share resource.
fn asks_shared_resource(spec: &Value) -> bool {
    items(spec.get("initContainers"))
        .chain(items(spec.get("containers")))
        .any(|c| {
            ["limits", "requests"].iter().any(|field| {
                c.get("resources")
                    .and_then(|r| r.get(*field))
                    .and_then(Value::as_object)
                    .is_some_and(|list| {
                        list.iter().any(|(name, quantity)| {
                            SHARED_GPU_RESOURCE_PREFIXES
                                .iter()
                                .any(|p| name.starts_with(p))
                                && scalar_string(quantity)
                                    .is_some_and(|q| parse_count(&q).is_ok_and(|n| n > 0))
                        })
                    })
            })
        })
}

/// Whether the container `name` of `kind` (as `gpu.access` names kinds)
/// asks for GPUs itself, by its facts.
fn asks_gpu(containers: &[ContainerFacts], kind: &str, name: &str) -> bool {
    containers.iter().any(|c| {
        // Restartable init containers are `sidecar` there.
        let same_kind = c.kind == kind || (kind == "initContainer" && c.kind == "sidecar");
        same_kind && c.name == name && c.total > 0
    })
}

fn pod_facts(
    spec: &Value,
    annotations: Option<&Value>,
    claims: &[PodClaim],
    catalog: &Catalog,
    resources: &GpuResources,
    detail: Detail,
) -> GpuFacts {
    let mut request = pod_gpu_request(spec, resources);
    let selection = NodeSelection::from_pod_spec(spec);
    let mut skus = selection.skus(catalog);
    // Judged on every size the selection allows: one without MIG is named.
    let mig = MigFacts::of(&request, &skus, skus.len() < catalog.len(), catalog);
    // MIG slices exist only on sizes whose GPUs support MIG.
    if request.asks_for_mig() {
        skus.retain(|s| s.mig);
    }
    let skus_constrained = skus.len() < catalog.len();
    let max_sku_gpus = skus.iter().map(|s| s.gpu_devices).max().unwrap_or(0);
    // `allocationMode: All` gets the node's GPUs: known only when the pod's
    // selection narrows the SKUs; otherwise it counts as one device.
    let all_devices = if skus_constrained {
        u64::from(max_sku_gpus)
    } else {
        0
    };
    request.add_claims(
        claims
            .iter()
            .map(|c| ClaimGpuRequest::of_pod_claim(c, resources, all_devices))
            .collect(),
    );
    let containers = container_claim_devices(spec, &request.claims);
    let own_containers: Vec<ContainerFacts> = request
        .containers
        .iter()
        .map(|c| container_facts(c, containers.get(&c.name)))
        .collect();
    let tolerates = spec.get("tolerations").is_some_and(tolerates_gpu_taint);
    let tolerates_all = spec.get("tolerations").is_some_and(tolerates_every_taint);
    let shared = shared_by_scheduler(spec, annotations);
    let selects_gpu_nodes = selection.targets_gpu_nodes(catalog);
    let prefers_gpu_nodes = (tolerates || tolerates_all) && prefers_gpu_labels(spec, catalog);
    let context = PodContext {
        asks_gpu: request.requested(),
        bound_for_gpu_nodes: request.requested()
            || shared
            || tolerates
            || tolerates_all
            || selects_gpu_nodes
            || prefers_gpu_nodes,
        debug_hidden: request.requested() || tolerates || tolerates_all,
    };
    let access = pod_access(spec, annotations, context, |kind, name| {
        asks_gpu(&own_containers, kind, name)
    });
    let fit = match detail {
        Detail::Policies => FitFacts::of(PodResources::of(spec), &skus, request.total()),
        Detail::Placement => FitFacts::default(),
    };
    GpuFacts {
        containers: own_containers,
        ephemeral_containers: ephemeral_container_requests(spec, resources)
            .iter()
            .map(|c| container_facts(c, None))
            .collect(),
        tolerates,
        tolerates_all,
        shared_by_scheduler: shared,
        shared_container: if shared {
            share_container(spec, annotations)
        } else {
            String::new()
        },
        selects_gpu_nodes,
        prefers_gpu_nodes,
        node_name: super::reach::node_name(spec)
            .unwrap_or_default()
            .to_string(),
        skus_constrained,
        skus: if skus_constrained {
            catalog.list_of(&skus)
        } else {
            catalog.names().clone()
        },
        max_sku_gpus: i64::from(max_sku_gpus),
        fit,
        mig,
        access,
        detail,
        ..counted(request)
    }
}

/// The facts of what `request` counts, every other key empty.
fn counted(request: PodGpuRequest) -> GpuFacts {
    GpuFacts {
        requested: request.requested(),
        total: int(request.total()),
        resources: (request.effective.iter())
            .map(|(k, v)| (k.clone(), int(*v)))
            .collect(),
        claims: request.claims.iter().map(claim_facts).collect(),
        request,
        ..GpuFacts::default()
    }
}

/// The facts of a ResourceClaim or ResourceClaimTemplate judged on its
/// own: the GPU devices it asks for (`All` counts one: no node is known).
fn claim_object_facts(object: &Value, resources: &GpuResources) -> Option<GpuFacts> {
    let kind = ClaimKind::of(object)?;
    let name = str_at(object, "/metadata/name").to_string();
    let claim = ClaimGpuRequest {
        name: name.clone(),
        source: Some((kind, name)),
        found: true,
        requests: claim_spec(object)
            .map(|spec| request_devices(spec, resources, 0))
            .unwrap_or_default(),
    };
    let mut request = PodGpuRequest::default();
    request.add_claims(vec![claim]);
    Some(counted(request))
}

fn claim_facts(c: &ClaimGpuRequest) -> ClaimFacts {
    let (kind, source) = match &c.source {
        Some((kind, name)) => (kind.as_str(), name.clone()),
        None => ("", String::new()),
    };
    ClaimFacts {
        name: c.name.clone(),
        kind,
        source,
        found: c.found,
        devices: c.devices().into_iter().map(|(k, v)| (k, int(v))).collect(),
        total: int(c.total()),
        allocates_all: c.allocates_all(),
    }
}

/// GPU devices per container name, from the claims each container uses
/// (`resources.claims`, a whole claim or one request of it).
fn container_claim_devices(
    spec: &Value,
    claims: &[ClaimGpuRequest],
) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let containers = items(spec.get("initContainers")).chain(items(spec.get("containers")));
    for c in containers {
        let name = str_at(c, "/name");
        for (claim, request) in container_claims(c) {
            let Some(claim) = claims.iter().find(|k| k.name == claim) else {
                continue;
            };
            let entry = out.entry(name.to_string()).or_default();
            add_into(entry, &claim.devices_of(request.as_deref()));
        }
    }
    out
}

fn container_facts(
    c: &ContainerGpuRequest,
    claimed: Option<&BTreeMap<String, u64>>,
) -> ContainerFacts {
    let mut gpus = c.gpus();
    add_into(&mut gpus, claimed.unwrap_or(&BTreeMap::new()));
    gpus.retain(|_, n| *n > 0);
    let total = gpus.values().fold(0u64, |a, n| a.saturating_add(*n));
    ContainerFacts {
        name: c.name.clone(),
        kind: c.kind.as_str(),
        gpus: gpus.into_iter().map(|(k, v)| (k, int(v))).collect(),
        total: int(total),
        problems: c
            .resources
            .iter()
            .filter_map(|(name, q)| quantity_problem(name, q))
            .collect(),
    }
}

/// What is wrong with one GPU resource of a container, if anything:
/// Kubernetes wants GPUs in limits, requests equal to limits, whole numbers.
fn quantity_problem(name: &str, q: &GpuQuantity) -> Option<String> {
    match (&q.limit, &q.request) {
        (None, Some(r)) => return Some(format!("{name} is in requests ({r}) but not in limits")),
        (Some(l), Some(r)) => match (parse_count(l), parse_count(r)) {
            (Ok(a), Ok(b)) if a != b => {
                return Some(format!("{name} request {r} differs from limit {l}"));
            }
            (Ok(_), Err(e)) => return Some(format!("{name} request {e}")),
            _ => {}
        },
        _ => {}
    }
    q.count.as_ref().err().map(|e| format!("{name} {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::assert_fields;
    use serde_json::json;

    fn gpu(object: Value) -> Value {
        facts(&object, &Catalog::embedded(), &GpuResources::default())
    }

    pub(super) fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn shared_mig_slices_count_like_their_unshared_kind() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb.shared": "3"}}},
            {"name": "b", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "2"}}}
        ]}});
        let g = gpu(pod);
        assert_fields(&g, json!({"requested": true, "total": 5}));
        assert_eq!(g["resources"]["nvidia.com/mig-1g.10gb.shared"], 3);
        assert_eq!(
            g["containers"][0]["gpus"]["nvidia.com/mig-1g.10gb.shared"],
            3
        );
        // MIG, shared or not, lands only on sizes whose GPUs support it.
        let skus = g["skus"].as_array().unwrap();
        assert!(!skus.is_empty());
        let catalog = Catalog::embedded();
        assert!((skus.iter()).all(|s| catalog.get(s.as_str().unwrap()).unwrap().mig));
    }

    #[test]
    fn gpu_pod_counts_and_containers() {
        let g = gpu(pod(json!({
            "initContainers": [{"name": "fetch", "image": "busybox"}],
            "containers": [
                {"name": "train", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "4"}}},
                {"name": "log", "image": "fluent-bit"}
            ],
            "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
        })));
        let want = json!({"requested": true, "total": 2,
            "resources": {"nvidia.com/gpu": 2}, "tolerates": true});
        assert_fields(&g, want);
        let cs = g["containers"].as_array().unwrap();
        assert_eq!(cs.len(), 3);
        assert_eq!(cs[0]["type"], "initContainer");
        let train = json!({"name": "train", "type": "container", "gpus": {"nvidia.com/gpu": 2}, "total": 2, "problems": []});
        assert_eq!(cs[1], train);
        assert_eq!(cs[2]["total"], 0);
        // No selector: every SKU, the largest has 8 GPUs.
        let want = json!({"skusConstrained": false, "maxSkuGpus": 8,
            "selectsGpuNodes": false});
        assert_fields(&g, want);
        assert!(g.get("pool").is_none());
    }

    #[test]
    fn cpu_pod_has_every_key_with_empty_values() {
        let g = gpu(pod(json!({"containers": [{"name": "web"}]})));
        let want = json!({"requested": false, "total": 0, "tolerates": false});
        assert_fields(&g, want);
        let other = gpu(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {}}));
        let keys = "requested total resources containers ephemeralContainers tolerates \
            toleratesAll sharedByScheduler sharedContainer selectsGpuNodes skus skusConstrained maxSkuGpus claims";
        for key in keys.split_whitespace() {
            assert!(other.get(key).is_some(), "{key}");
        }
    }

    #[test]
    fn ephemeral_containers_are_listed_apart_and_ask_for_nothing() {
        let g = gpu(pod(json!({
            "containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "ephemeralContainers": [
                {"name": "debugger-x7k2p", "image": "busybox", "targetContainerName": "train"},
                {"name": "odd", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
            ]
        })));
        assert_eq!(
            g["total"], 1,
            "ephemeral containers hold no GPUs of the pod"
        );
        assert_eq!(g["containers"].as_array().unwrap().len(), 1);
        let want = json!([
            {"name": "debugger-x7k2p", "type": "ephemeralContainer", "gpus": {}, "total": 0, "problems": []},
            {"name": "odd", "type": "ephemeralContainer", "gpus": {"nvidia.com/gpu": 2}, "total": 2, "problems": []}
        ]);
        assert_eq!(g["ephemeralContainers"], want);
        let cpu = gpu(pod(json!({"containers": [{"name": "web"}]})));
        assert_eq!(cpu["ephemeralContainers"], json!([]));
    }

    #[test]
    fn selection_narrows_skus_and_max_gpus() {
        let g = gpu(pod(json!({
            "nodeSelector": {"karpenter.azure.com/sku-gpu-name": "T4"},
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]
        })));
        let want = json!({"skusConstrained": true, "selectsGpuNodes": true,
            "maxSkuGpus": 4, "total": 8});
        assert_fields(&g, want);
        assert_eq!(g["skus"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn fit_shows_the_request_and_the_size_with_most_room() {
        let g = gpu(pod(json!({
            "nodeSelector": {"node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3"},
            "containers": [{"name": "train", "resources": {
                "limits": {"nvidia.com/gpu": "1", "cpu": "32", "memory": "500Gi"}}}]
        })));
        let want = json!({"cpu": 32_000, "memory": 500_i64 << 30, "fits": false,
            "cpuPerGpu": 32_000, "maxCpuPerGpu": 4_000});
        assert_fields(&g["fit"], want);
        let want = json!({"name": "Standard_NC4as_T4_v3", "vcpus": 4,
            "memoryGiB": 28.0, "cpu": 3860, "reservedCpu": 140});
        assert_fields(&g["fit"]["largest"], want);
        // Any catalog size: the pod fits; a CPU pod or another object has
        // nothing to fit.
        let loose = gpu(pod(json!({"containers": [{"name": "c", "resources": {
            "limits": {"nvidia.com/gpu": "1", "cpu": "32", "memory": "500Gi"}}}]})));
        assert_eq!(loose["fit"]["fits"], true);
        let other = gpu(json!({"apiVersion": "v1", "kind": "ConfigMap"}));
        assert_fields(&other["fit"], json!({"fits": true, "largest": null}));
    }

    #[test]
    fn malformed_requests_are_reported_per_container() {
        let g = gpu(pod(json!({"containers": [
            {"name": "a", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
            {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "2"}}},
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "500m"}}},
            {"name": "d", "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}}
        ]})));
        let problems: Vec<&Value> = (g["containers"].as_array().unwrap().iter())
            .map(|c| &c["problems"])
            .collect();
        let want = json!([
            ["nvidia.com/gpu is in requests (1) but not in limits"],
            ["nvidia.com/gpu request 2 differs from limit 1"],
            ["nvidia.com/gpu \"500m\" is not a whole number of devices"],
            []
        ]);
        assert_eq!(
            problems,
            want.as_array().unwrap().iter().collect::<Vec<_>>()
        );
        assert_eq!(g["requested"], true);
    }

    #[test]
    fn templates_of_every_controller_are_read() {
        let tpl = json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
        for (api, kind) in [
            ("apps/v1", "Deployment"),
            ("apps/v1", "StatefulSet"),
            ("apps/v1", "DaemonSet"),
            ("apps/v1", "ReplicaSet"),
            ("batch/v1", "Job"),
        ] {
            let g = gpu(json!({"apiVersion": api, "kind": kind, "spec": {"template": tpl}}));
            assert_eq!(g["total"], 1, "{kind}");
        }
        for other in [
            json!({"apiVersion": "batch/v1", "kind": "CronJob",
                "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": tpl}}}}),
            json!({"apiVersion": "v1", "kind": "ReplicationController", "spec": {"template": tpl}}),
            json!({"apiVersion": "v1", "kind": "PodTemplate", "template": tpl}),
        ] {
            assert_eq!(gpu(other.clone())["total"], 1, "{other}");
        }
        // A Service has no pod template.
        let svc = gpu(json!({"apiVersion": "v1", "kind": "Service", "spec": {"template": tpl}}));
        assert_eq!(svc["total"], 0);
    }

    #[test]
    fn gpu_share_through_a_scheduler_annotation() {
        let share = |annotations: Value, scheduler: Value| {
            let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
            if !scheduler.is_null() {
                spec["schedulerName"] = scheduler;
            }
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "annotations": annotations}, "spec": spec})
        };
        let g = gpu(share(
            json!({"gpu-fraction": "0.5"}),
            json!("kai-scheduler"),
        ));
        assert_fields(&g, json!({"sharedByScheduler": true, "requested": false}));
        // The default scheduler ignores the annotation: the pod gets no GPU.
        let (kai, default) = (json!("kai-scheduler"), json!("default-scheduler"));
        for (annotations, scheduler, shared) in [
            (json!({"gpu-memory": "2000"}), kai.clone(), true),
            (json!({"gpu-fraction": "0.5"}), json!(null), false),
            (json!({"gpu-fraction": "0.5"}), default.clone(), false),
            (json!({"gpu-fraction": ""}), kai.clone(), false),
            (json!({"other": "1"}), kai.clone(), false),
        ] {
            let g = gpu(share(annotations.clone(), scheduler));
            assert_eq!(g["sharedByScheduler"], shared, "{annotations}");
        }
        // Pod templates carry the annotation on the template.
        let template = json!({"metadata": {"annotations": {"gpu-fraction": "0.25"}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}});
        let d = gpu(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "spec": {"template": template}}));
        assert_eq!(d["sharedByScheduler"], true);
        assert_eq!(d["sharedContainer"], "c");
        let worker = json!({"gpu-memory": "2000", "gpu-fraction-container-name": "worker"});
        assert_eq!(gpu(share(worker, kai))["sharedContainer"], "worker");
        let not_shared = gpu(share(json!({"gpu-fraction": "0.5"}), default));
        assert_eq!(not_shared["sharedContainer"], "");
        let c = gpu(json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "spec": {"jobTemplate": {"spec": {"template": template}}}}));
        assert_eq!(c["sharedByScheduler"], true);
    }

    #[test]
    fn a_share_is_placed_as_one_nvidia_gpu() {
        let (catalog, resources) = (Catalog::embedded(), GpuResources::default());
        let facts = |annotations: Value, limits: Value| {
            GpuFacts::of(
                &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": annotations},
                    "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c",
                        "resources": {"limits": limits}}]}}),
                &catalog,
                &resources,
            )
        };
        let share = facts(json!({"gpu-fraction": "0.5"}), json!({}));
        assert!(!share.request.requested());
        let placed = share.placed_request();
        assert_eq!(placed.resources(), ["nvidia.com/gpu"]);
        // Its own GPUs, or no share: placed by what it asks.
        let whole = facts(json!({}), json!({"amd.com/gpu": "1"}));
        assert_eq!(whole.placed_request().resources(), ["amd.com/gpu"]);
        let none = facts(json!({}), json!({}));
        assert!(none.placed_request().resources().is_empty());
    }

    #[test]
    fn capacity_objects_get_pool() {
        let g = gpu(
            json!({"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace",
            "resource": {"instanceType": "Standard_NC24ads_A100_v4"}}),
        );
        let want = json!({"skus": ["Standard_NC24ads_A100_v4"], "gpuCapable": true});
        assert_fields(&g["pool"], want);
        assert_eq!(g["requested"], false);
    }

    fn claim_template(name: &str, class: &str, exactly: Value) -> Value {
        let mut exactly = exactly;
        exactly["deviceClassName"] = json!(class);
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}})
    }

    /// The facts of `object` with the claims made from `templates`
    /// (name, device class, `exactly`) in namespace `ml`.
    fn with_claims(object: Value, templates: &[(&str, &str, Value)]) -> Value {
        let mut lookup = crate::k8s::StaticClaims::new();
        for (name, class, exactly) in templates {
            lookup.insert(&claim_template(name, class, exactly.clone()), "ml");
        }
        let claims = pod_claims(pod_spec(&object).unwrap(), "ml", &lookup);
        let (catalog, resources) = (Catalog::embedded(), GpuResources::default());
        let facts = GpuFacts::with_claims(&object, &claims, &catalog, &resources);
        serde_json::to_value(facts).unwrap()
    }

    #[test]
    fn dra_claims_of_gpu_classes_count_their_devices() {
        let g = with_claims(
            pod(json!({
                "resourceClaims": [
                    {"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
                    {"name": "net", "resourceClaimTemplateName": "nic"}
                ],
                "containers": [
                    {"name": "train", "resources": {"claims": [{"name": "gpus"}, {"name": "net"}]}},
                    {"name": "probe", "resources": {"claims": [{"name": "gpus", "request": "gpu"}]}},
                    {"name": "log"}
                ],
                "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
            })),
            &[
                ("two-gpus", "gpu.nvidia.com", json!({"count": 2})),
                ("nic", "rdma.example.com", json!({"count": 1})),
            ],
        );
        // A shared claim counts once for the pod.
        let want = json!({"requested": true, "total": 2,
            "resources": {"gpu.nvidia.com": 2}, "tolerates": true});
        assert_fields(&g, want);
        let cs = g["containers"].as_array().unwrap();
        assert_eq!(cs[0]["gpus"], json!({"gpu.nvidia.com": 2}));
        assert_eq!(cs[1]["total"], 2);
        assert_eq!(cs[2]["total"], 0);
        let gpus = json!({"name": "gpus", "kind": "ResourceClaimTemplate", "source": "two-gpus",
            "found": true, "devices": {"gpu.nvidia.com": 2}, "total": 2, "allocatesAll": false});
        assert_eq!(g["claims"][0], gpus);
        assert_fields(&g["claims"][1], json!({"total": 0, "found": true}));
    }

    #[test]
    fn claims_of_other_classes_or_not_found_ask_for_no_gpu() {
        let g = with_claims(
            pod(json!({
                "resourceClaims": [
                    {"name": "net", "resourceClaimTemplateName": "nic"},
                    {"name": "gone", "resourceClaimName": "not-created-yet"}
                ],
                "containers": [{"name": "web", "resources": {"claims": [{"name": "net"}]}}]
            })),
            &[("nic", "rdma.example.com", json!({"count": 1}))],
        );
        assert_fields(&g, json!({"requested": false, "total": 0}));
        let want = json!({"found": false, "kind": "ResourceClaim"});
        assert_fields(&g["claims"][1], want);
        // Without a lookup the claims are listed, not found.
        let g = gpu(pod(json!({
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}],
            "containers": [{"name": "c"}]
        })));
        assert_fields(&g, json!({"requested": false}));
        assert_eq!(g["claims"][0]["found"], false);
    }

    #[test]
    fn allocation_mode_all_counts_the_gpus_of_the_selected_sku() {
        let judged = |selector: Value| {
            let pod = pod(json!({
                "nodeSelector": selector,
                "resourceClaims": [{"name": "all", "resourceClaimTemplateName": "node"}],
                "containers": [{"name": "c", "resources": {"claims": [{"name": "all"}]}}]
            }));
            let all = json!({"allocationMode": "All"});
            with_claims(pod, &[("node", "gpu.nvidia.com", all)])
        };
        let g = judged(json!({"node.kubernetes.io/instance-type": "Standard_NC96ads_A100_v4"}));
        assert_eq!(g["total"], 4);
        assert_eq!(g["claims"][0]["allocatesAll"], true);
        // No SKU known: at least one device.
        assert_fields(&judged(json!({})), json!({"total": 1, "requested": true}));
    }

    #[test]
    fn claim_objects_judged_on_their_own() {
        let g = gpu(claim_template(
            "big",
            "gpu.nvidia.com",
            json!({"count": 16}),
        ));
        let want = json!({"requested": true, "total": 16,
            "resources": {"gpu.nvidia.com": 16}});
        assert_fields(&g, want);
        let want = json!({"kind": "ResourceClaimTemplate", "name": "big"});
        assert_fields(&g["claims"][0], want);
        let claim = gpu(
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "shared"},
            "spec": {"devices": {"requests": [{"name": "m", "exactly": {"deviceClassName": "mig.nvidia.com", "count": 3}}]}}}),
        );
        assert_eq!(claim["resources"], json!({"mig.nvidia.com": 3}));
        let cpu = gpu(claim_template("nic", "rdma.example.com", json!({})));
        assert_eq!(cpu["requested"], false);
        assert_eq!(cpu["claims"][0]["total"], 0);
    }

    #[test]
    fn odd_shapes_never_panic() {
        for obj in [
            json!(null),
            json!([]),
            json!({"kind": "Pod"}),
            json!({"kind": "Pod", "spec": "x"}),
            json!({"kind": "Pod", "spec": {"containers": "x", "nodeSelector": [1], "tolerations": {}}}),
        ] {
            assert_eq!(gpu(obj)["requested"], false);
        }
    }

    #[test]
    fn a_gpu_pod_naming_a_node_with_gpu_problems_is_told_which_and_why() {
        use crate::gpu::reach::NodeSnapshot;
        let node = |name: &str, status: &str| {
            crate::k8s::NodeInfo::from_value(&json!({"metadata": {"name": name,
                "labels": {"kubernetes.io/hostname": name, "kubernetes.azure.com/accelerator": "nvidia"}},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "XIDErrors", "status": status, "reason": "XIDErrors", "message": "XID 79"}]}}))
        };
        let snapshot = NodeSnapshot::new(
            vec![node("bad", "True"), node("good", "False")],
            Vec::new(),
            &crate::gpu::DraDevices::default(),
        );
        let (catalog, resources) = (Catalog::embedded(), GpuResources::default());
        let set = snapshot.gpu_nodes(&resources, &catalog);
        let judged = |spec: Value| {
            let pod = pod(spec);
            GpuFacts::of(&pod, &catalog, &resources).with_nodes(&pod, &set, &catalog)
        };
        let gpu = json!([{"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]);
        let by_name = judged(json!({"nodeName": "bad", "containers": gpu}));
        assert_eq!(by_name.unhealthy_nodes.len(), 1);
        assert_eq!(by_name.unhealthy_nodes[0].name, "bad");
        assert_eq!(by_name.unhealthy_nodes[0].conditions[0].kind, "XIDErrors");
        let by_affinity = judged(json!({"containers": gpu, "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["good", "bad"]}]}]}}}}));
        let names: Vec<&str> = (by_affinity.unhealthy_nodes.iter())
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(names, ["bad"]);
        assert!(judged(json!({"nodeName": "good", "containers": gpu}))
            .unhealthy_nodes
            .is_empty());
        let cpu =
            judged(json!({"nodeName": "bad", "containers": [{"name": "c", "image": "busybox"}]}));
        assert!(
            cpu.unhealthy_nodes.is_empty(),
            "a CPU pod's GPUs do not matter"
        );
    }

    #[test]
    fn placement_alone_gets_every_fact_but_fit() {
        use crate::gpu::reach::NodeSnapshot;
        // Nodes of an A100 pool: a pod naming the pool is narrowed to them.
        let node = |name: &str| {
            crate::k8s::NodeInfo::from_value(&json!({"metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.azure.com/agentpool": "gpupool",
                "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4",
                "kubernetes.azure.com/accelerator": "nvidia"}},
                "status": {"allocatable": {"nvidia.com/gpu": "1"}}}))
        };
        let listed = NodeSnapshot::new(vec![node("a"), node("b")], Vec::new(), &Default::default());
        let (catalog, resources) = (Catalog::embedded(), GpuResources::default());
        let set = listed.gpu_nodes(&resources, &catalog);
        let gpu = json!([{"name": "c", "image": "cuda", "resources": {
            "requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]);
        // Each pod, and the sizes the listed nodes narrow it to, if any.
        let specs = [
            (json!({"containers": gpu}), None),
            (
                json!({"containers": gpu, "nodeSelector": {"kubernetes.azure.com/agentpool": "gpupool"}}),
                Some("Standard_NC24ads_A100_v4"),
            ),
            (
                json!({"containers": gpu, "nodeSelector": {"node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3"}}),
                None,
            ),
            (
                json!({"containers": [{"name": "c", "image": "busybox"}]}),
                None,
            ),
        ];
        for (spec, narrowed) in specs {
            let pod = pod(spec);
            let facts = |detail| {
                let facts = GpuFacts::with_claims_for(&pod, &[], &catalog, &resources, detail);
                [facts.clone(), facts.with_nodes(&pod, &set, &catalog)]
            };
            let (all, placement) = (facts(Detail::Policies), facts(Detail::Placement));
            if let Some(size) = narrowed {
                assert_eq!(&*all[1].skus, [size], "{pod}");
                assert_eq!(&*placement[1].skus, [size], "{pod}");
            }
            for (mut placement, all) in placement.into_iter().zip(all) {
                assert_eq!(placement.fit, FitFacts::default(), "{pod}");
                assert!(all.fit.cpu > 0 || !all.requested, "{pod}");
                placement.fit = all.fit.clone();
                placement.detail = Detail::Policies;
                assert_eq!(placement, all, "{pod}");
            }
        }
    }

    #[test]
    fn a_pod_tolerating_every_taint() {
        let g = gpu(pod(json!({
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "node-exporter", "image": "quay.io/prometheus/node-exporter:v1.8.2"}]
        })));
        assert_fields(&g, json!({"toleratesAll": true, "tolerates": false}));
    }
}

#[cfg(test)]
mod unlisted_tests {
    use super::*;
    use crate::gpu::reach::NodeSnapshot;
    use serde_json::json;

    fn judged(spec: Value) -> GpuFacts {
        let pod = tests::pod(spec);
        let (catalog, resources) = (Catalog::embedded(), GpuResources::default());
        let snapshot = NodeSnapshot::unlisted();
        let nodes = snapshot.gpu_nodes(&resources, &catalog);
        GpuFacts::of(&pod, &catalog, &resources).with_nodes(&pod, &nodes, &catalog)
    }

    #[test]
    fn with_no_node_listed_a_cpu_pod_that_names_its_node_is_taken_as_bound_to_a_gpu_node() {
        let bound = judged(json!({"nodeName": "aks-system-1",
            "containers": [{"name": "c", "image": "busybox"}]}));
        assert!(bound.selects_gpu_nodes);
        assert!(!bound.nodes_known);
        assert_eq!(bound.reachable_gpu_nodes.len(), 1);
        assert!(bound.reachable_gpu_nodes[0].starts_with("aks-system-1, which may be a GPU node"));
        // A GPU pod is placed by its GPUs; a pod naming no node is judged
        // by its labels alone, as without a node cache.
        let gpu_pod = judged(json!({"nodeName": "aks-gpu-1", "containers": [{"name": "c",
            "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}));
        assert!(gpu_pod.reachable_gpu_nodes.is_empty());
        let by_label = judged(
            json!({"nodeSelector": {"kubernetes.azure.com/accelerator": "nvidia"},
            "containers": [{"name": "c", "image": "busybox"}]}),
        );
        assert!(by_label.selects_gpu_nodes);
        assert!(by_label.reachable_gpu_nodes.is_empty());
        let free = judged(json!({"containers": [{"name": "c", "image": "busybox"}]}));
        assert!(!free.selects_gpu_nodes);
    }
}
