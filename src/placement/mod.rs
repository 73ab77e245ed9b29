//! Mutation of GPU pods: tolerations and node affinity from placement
//! profiles, as an RFC 6902 patch against the raw object.
//!
//! A pod that asks for a GPU (see [`crate::gpu::request`]) gets the
//! tolerations and node affinity of the one profile that matches it best.
//! The patch only ever adds: what the pod already says is kept, and what it
//! already says is not said again, so a second call returns no patch.
//!
//! A Karpenter NodePool that launches only GPU nodes gets its profile's
//! `nodePoolTaint` when it carries no GPU taint.
pub mod infrastructure;
mod nodepool;
mod plan;
mod profile;
pub mod tiers;
pub mod visibility;

pub use infrastructure::Infrastructure;
pub use plan::PROFILE_ANNOTATION;
pub use profile::{NodePoolTaintPolicy, PreferredTerm, Profile, ProfileError, API_VERSION, KIND};
pub use tiers::SkuTiers;

use crate::gpu::catalog::{Catalog, Sku};
use crate::gpu::facts::GpuFacts;
use crate::gpu::selection::SkuRequirement;
use crate::gpu::{pod_gpu_request, GpuResources, PodGpuRequest, SkuList};
use crate::k8s::json::labels_of;
use crate::k8s::NodeSelectorTerm as Term;
use crate::review::{Operation, Request};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

pub use crate::k8s::namespaces::NAMESPACE_NAME_LABEL;

/// The placement profiles loaded from the policy folder.
#[derive(Clone, Debug, Default)]
pub struct ProfileSet {
    /// Highest priority first, then by name.
    profiles: Vec<Profile>,
    gpu_resources: GpuResources,
    /// The SKU catalog that says which node pools launch GPU nodes; `None`
    /// for the built-in one.
    catalog: Option<Arc<Catalog>>,
    /// The namespace SKU tiers GPU pods are kept to; `None`: no tiers.
    tiers: Option<SkuTiers>,
    /// Per profile (same order): the catalog SKUs its required terms allow
    /// ([`profile_skus`]), worked out when the catalog is set, not per
    /// request.
    profile_skus: Vec<SkuList>,
    /// Per tier, without and with the premium opt-in: the sizes
    /// [`SkuTiers::allowed_in`] gives (`None`: every SKU) and what they make
    /// of each profile's terms, worked out when the tiers, the catalog or
    /// the profiles are set, not per request.
    tier_skus: BTreeMap<String, [Option<TierSizes>; 2]>,
    /// GPU infrastructure known by identity (the `gpu-node-isolation`
    /// params); `None`: GPUs are hidden only in GPU pods (see
    /// [`plan`]).
    infrastructure: Option<Infrastructure>,
}

/// The sizes one tier allows (with or without the premium opt-in).
#[derive(Clone, Debug)]
struct TierSizes {
    /// Their catalog positions, in catalog order.
    positions: Vec<usize>,
    /// Per profile (same order as the profiles) and per set of GPU makers
    /// ([`tiers::MAKER_SETS`]): the profile's required terms narrowed to
    /// these sizes ([`tiers::narrow`]) for a pod whose own node selection
    /// leaves every SKU open, as most GPU pods' does.
    narrowed: Vec<[Option<Arc<[Term]>>; 4]>,
}

/// A pod as placement reads it: its GPU facts and the namespace it goes
/// into.
#[derive(Clone, Copy)]
pub struct PodFacts<'a> {
    pub facts: &'a GpuFacts,
    pub namespace: Option<&'a str>,
    pub namespace_labels: &'a BTreeMap<String, String>,
    /// The sizes to keep a GPU pod to instead of its tier's (`/mutate`'s
    /// budget narrowing: those of the sizes it may land on with room left);
    /// `None`: its tier's.
    pub room: Option<&'a [&'a Sku]>,
}

/// What placement does to one request.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Name of the profile whose patch this is; `None` when nothing changes.
    pub profile: Option<String>,
    pub patch: json_patch::Patch,
    /// Warnings for the admission response (`gpu-placement: ...`).
    pub warnings: Vec<String>,
}

impl ProfileSet {
    /// Orders the profiles by precedence; names must be unique. The GPU
    /// resources detected are the default set plus every profile's resources.
    pub fn new(profiles: Vec<Profile>) -> Result<ProfileSet, ProfileError> {
        let mut profiles = profiles;
        profiles.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
        let mut names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
        names.sort_unstable();
        if let Some(dup) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(ProfileError {
                profile: Some(dup[0].to_string()),
                field: "metadata.name".into(),
                message: "another PlacementProfile has the same name".into(),
            });
        }
        let gpu_resources = profiles
            .iter()
            .fold(GpuResources::default(), |acc, p| acc.union(&p.resources));
        Ok(ProfileSet {
            profiles,
            gpu_resources,
            catalog: None,
            tiers: None,
            profile_skus: Vec::new(),
            tier_skus: BTreeMap::new(),
            infrastructure: None,
        }
        .with_profile_skus())
    }

    /// Works out [`ProfileSet::profile_skus`] and
    /// [`ProfileSet::tier_skus`] over the current catalog.
    fn with_profile_skus(mut self) -> ProfileSet {
        let catalog = self.catalog();
        let skus = self
            .profiles
            .iter()
            .map(|p| profile_skus(p, catalog).into())
            .collect();
        let mut tier_skus = BTreeMap::new();
        if let Some(tiers) = &self.tiers {
            let all = catalog.skus();
            let position = |sku: &Sku| all.iter().position(|s| std::ptr::eq(s, sku));
            for tier in tiers.names() {
                let sizes = [false, true].map(|premium| {
                    let allowed = tiers.allowed_in(catalog, tier, premium)?;
                    let narrowed = self
                        .profiles
                        .iter()
                        .map(|p| {
                            tiers::MAKER_SETS.map(|makers| {
                                tiers::narrow_for(&p.required, None, makers, &allowed, catalog)
                                    .map(Arc::from)
                            })
                        })
                        .collect();
                    Some(TierSizes {
                        positions: allowed.into_iter().filter_map(position).collect(),
                        narrowed,
                    })
                });
                tier_skus.insert(tier.to_string(), sizes);
            }
        }
        self.profile_skus = skus;
        self.tier_skus = tier_skus;
        self
    }

    /// The SKU lists that outlive a request, which the GPU facts of pods
    /// share: every SKU of the catalog, and what each profile's required
    /// terms allow.
    pub fn sku_lists(&self) -> Vec<SkuList> {
        let every = std::iter::once(self.catalog().names().clone());
        every.chain(self.profile_skus.iter().cloned()).collect()
    }

    /// The catalog SKUs a namespace with `namespace_labels` may use, in
    /// catalog order ([`SkuTiers::allowed`], looked up rather than worked
    /// out); `None` when that is every SKU or no tier applies.
    pub fn tier_allowed(&self, namespace_labels: &BTreeMap<String, String>) -> Option<Vec<&Sku>> {
        let (tier, premium) = self.tiers.as_ref()?.tier_of(namespace_labels)?;
        let sizes = self.tier_skus.get(tier)?[usize::from(premium)].as_ref()?;
        Some(self.at_positions(&sizes.positions))
    }

    /// The tier whose list applies to a namespace with `namespace_labels`;
    /// `None` when no tiers are loaded or none applies.
    pub fn tier_name(&self, namespace_labels: &BTreeMap<String, String>) -> Option<&str> {
        Some(self.tiers.as_ref()?.tier_of(namespace_labels)?.0)
    }

    fn at_positions(&self, positions: &[usize]) -> Vec<&Sku> {
        let all = self.catalog().skus();
        positions.iter().filter_map(|&i| all.get(i)).collect()
    }

    /// The catalog SKUs `profile`'s required terms allow, when fewer than
    /// every SKU (empty otherwise); shared, not copied.
    fn skus_of(&self, profile: &Profile) -> SkuList {
        self.index_of(profile)
            .and_then(|i| self.profile_skus.get(i))
            .cloned()
            .unwrap_or_default()
    }

    /// The position of `profile`, one of this set's, in the set.
    fn index_of(&self, profile: &Profile) -> Option<usize> {
        self.profiles.iter().position(|p| std::ptr::eq(p, profile))
    }

    /// Keeps GPU pods on the sizes their namespace's tier allows.
    pub fn with_tiers(mut self, tiers: SkuTiers) -> ProfileSet {
        self.tiers = Some(tiers);
        self.with_profile_skus()
    }

    /// Hides GPUs by default from the containers of pods that ask for
    /// none but can land on GPU nodes, except GPU infrastructure as
    /// `infrastructure` knows it.
    pub fn with_infrastructure(mut self, infrastructure: Infrastructure) -> ProfileSet {
        self.infrastructure = Some(infrastructure);
        self
    }

    /// GPU infrastructure by identity, when hiding by default is on.
    pub fn infrastructure(&self) -> Option<&Infrastructure> {
        self.infrastructure.as_ref()
    }

    /// Uses `catalog` (the one the policies were loaded with) instead of the
    /// built-in SKU catalog to tell GPU node pools from others.
    pub fn with_catalog(mut self, catalog: Arc<Catalog>) -> ProfileSet {
        self.catalog = Some(catalog);
        self.with_profile_skus()
    }

    /// The SKU catalog node pools are judged with.
    pub fn catalog(&self) -> &Catalog {
        match &self.catalog {
            Some(c) => c,
            None => Catalog::embedded_shared(),
        }
    }

    /// Replaces the default GPU resource names with `base` (the profiles'
    /// resources are still added), e.g. from a command-line setting.
    pub fn with_gpu_resources(mut self, base: GpuResources) -> ProfileSet {
        self.gpu_resources = self
            .profiles
            .iter()
            .fold(base, |acc, p| acc.union(&p.resources));
        self
    }

    pub fn len(&self) -> usize {
        self.profiles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.profiles.is_empty()
    }

    /// The profiles, in precedence order (highest priority first, then name).
    pub fn profiles(&self) -> &[Profile] {
        &self.profiles
    }

    pub fn get(&self, name: &str) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    /// The resource names that make a pod a GPU pod.
    pub fn gpu_resources(&self) -> &GpuResources {
        &self.gpu_resources
    }

    /// The profile for a pod: among those serving one of the GPU resources
    /// it asks for and whose selectors match, the highest priority, ties
    /// going to the name that sorts first.
    pub fn select(
        &self,
        request: &PodGpuRequest,
        pod_labels: &BTreeMap<String, String>,
        namespace_labels: &BTreeMap<String, String>,
    ) -> Option<&Profile> {
        let resources = request.resources();
        self.profiles.iter().find(|p| {
            p.serves(resources.iter().copied())
                && p.namespace_selector
                    .as_ref()
                    .is_none_or(|s| s.matches(namespace_labels))
                && p.pod_selector
                    .as_ref()
                    .is_none_or(|s| s.matches(pod_labels))
        })
    }
}

/// Plans the mutation of a request (`pod`: its pod's facts, for a Pod): a Pod on
/// CREATE gets its profile's tolerations and node affinity, a Karpenter
/// NodePool (CREATE or UPDATE) its profile's taint. GPUs are hidden
/// (`NVIDIA_VISIBLE_DEVICES=void`, [`visibility`]) from the containers of
/// a GPU pod that ask for no GPU, from the debug containers a
/// `pods/ephemeralcontainers` update adds to a pod bound for GPU nodes,
/// and, with the infrastructure lists loaded ([`hides_by_default`]), from
/// every container of a pod that asks for no GPU but can land on GPU
/// nodes.
pub fn plan(profiles: &ProfileSet, req: &Request, pod: Option<PodFacts>) -> Plan {
    if nodepool::is_node_pool(req) {
        return nodepool::plan_request(profiles, req);
    }
    let (Some(placed), Some(pod)) = (pod, &req.object) else {
        return Plan::default();
    };
    let sub_resource = req.sub_resource.as_deref().unwrap_or_default();
    let debug = sub_resource == "ephemeralcontainers" && req.operation == Operation::Update;
    if !debug && (!sub_resource.is_empty() || req.operation != Operation::Create) {
        return Plan::default();
    }
    let facts = placed.facts;
    let mut plan = if debug || profiles.is_empty() {
        Plan::default()
    } else {
        plan_pod(profiles, pod, &facts.placed_request(), &placed)
    };
    let old = if debug { req.old_object.as_ref() } else { None };
    let hidden = if debug {
        // Debug containers added to pods bound for GPU nodes.
        match old {
            Some(old) => visibility::hide_unrequested(pod, &facts.access, Some(old)),
            None => return plan,
        }
    } else if facts.request.requested() {
        visibility::hide_unrequested(pod, &facts.access, None)
    } else if let Some(infrastructure) = hides_by_default(profiles, &placed) {
        visibility::hide_by_default(pod, &facts.access, |image| infrastructure.is_image(image))
    } else {
        return plan;
    };
    match hidden {
        Ok(ops) => plan.patch.0.extend(ops),
        Err(e) => tracing::warn!(error = %e, "GPUs not hidden: unexpected shape"),
    }
    plan
}

/// Whether `/mutate` hides GPUs from the containers of a pod that asks for
/// none (`facts` are its own): it can land on GPU nodes (it tolerates a
/// GPU taint or every taint, selects or prefers GPU nodes, or names a node
/// that is one or may be one), no GPU-sharing scheduler hands it part of a
/// GPU (that scheduler sets the variable), and it is not GPU
/// infrastructure by identity (a namespace an admin listed or labelled).
/// The infrastructure lists it returns spare the containers running an
/// infrastructure image elsewhere: hiding GPUs from an exporter or a
/// device plugin would break it silently, so it is judged (and denied, with
/// the way to exempt it) instead. `None` also when the lists are not
/// loaded: then nothing is hidden by default.
pub fn hides_by_default<'a>(
    profiles: &'a ProfileSet,
    pod: &PodFacts,
) -> Option<&'a Infrastructure> {
    let infrastructure = profiles.infrastructure()?;
    let facts = pod.facts;
    let may_land = facts.tolerates
        || facts.tolerates_all
        || facts.selects_gpu_nodes
        || facts.prefers_gpu_nodes
        || (!facts.node_name.is_empty() && !facts.nodes_known);
    let spared = infrastructure.is_namespace(pod.namespace, pod.namespace_labels);
    (!facts.requested && !facts.shared_by_scheduler && may_land && !spared)
        .then_some(infrastructure)
}

/// The profile's tolerations and node affinity for a GPU pod (`request`
/// read from it), as a patch against the pod.
fn plan_pod(
    profiles: &ProfileSet,
    pod: &Value,
    request: &PodGpuRequest,
    placed: &PodFacts,
) -> Plan {
    let labels = placed.namespace_labels;
    let Some(profile) = applicable_profile(profiles, pod, request, labels) else {
        return Plan::default();
    };
    let narrowed = tier_terms(profiles, profile, pod, request, labels, placed.room);
    let required = narrowed.as_deref().unwrap_or(&profile.required);
    match plan::plan_profile(profile, required, pod) {
        Ok(plan::Placed::Patch(ops)) if !ops.is_empty() => Plan {
            profile: Some(profile.name.clone()),
            patch: json_patch::Patch(ops),
            warnings: Vec::new(),
        },
        Ok(_) => Plan::default(),
        Err(e) => {
            tracing::warn!(profile = %profile.name, error = %e, "pod not patched: unexpected shape");
            Plan::default()
        }
    }
}

/// Why a GPU pod cannot be placed by its profile without becoming
/// unschedulable (its own nodeSelector or required affinity excludes the
/// profile's nodes), for the validating side to deny. Empty when it can.
pub fn conflicts(
    profiles: &ProfileSet,
    pod: &Value,
    namespace_labels: &BTreeMap<String, String>,
) -> Vec<String> {
    judge(profiles, pod, &pod_request(profiles, pod), namespace_labels)
        .conflict
        .into_iter()
        .collect()
}

/// How placement sees a pod: the profile that serves it, if any, and why
/// that profile cannot place it, if it cannot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Judgement {
    pub profile: Option<String>,
    pub conflict: Option<String>,
    /// The catalog SKUs the profile's required terms allow, when fewer than
    /// every SKU (empty otherwise).
    pub skus: SkuList,
}

/// [`conflicts`] with the pod's GPU request already read, naming the profile.
pub fn judge(
    profiles: &ProfileSet,
    pod: &Value,
    request: &PodGpuRequest,
    namespace_labels: &BTreeMap<String, String>,
) -> Judgement {
    let Some(profile) = applicable_profile(profiles, pod, request, namespace_labels) else {
        return Judgement::default();
    };
    Judgement {
        profile: Some(profile.name.clone()),
        conflict: plan::conflict_of(profile, pod),
        skus: profiles.skus_of(profile),
    }
}

/// The catalog SKUs a profile's required terms (ORed) allow; empty when
/// they allow every SKU.
fn profile_skus(profile: &Profile, catalog: &Catalog) -> Vec<String> {
    if profile.required.is_empty() {
        return Vec::new();
    }
    let skus: Vec<String> = catalog
        .skus()
        .iter()
        .filter(|sku| {
            profile
                .required
                .iter()
                .any(|t| t.requirements.iter().all(|r| r.matches_sku(sku)))
        })
        .map(|sku| sku.name.clone())
        .collect();
    if skus.len() < catalog.len() {
        skus
    } else {
        Vec::new()
    }
}

/// The profile's required terms narrowed to the sizes of `room` (budget
/// narrowing, [`PodFacts::room`]) when it leaves the pod any, else to
/// those the namespace's tier allows; `None` to place by the profile's
/// own terms.
fn tier_terms(
    profiles: &ProfileSet,
    profile: &Profile,
    pod: &Value,
    request: &PodGpuRequest,
    namespace_labels: &BTreeMap<String, String>,
    room: Option<&[&Sku]>,
) -> Option<Arc<[Term]>> {
    let spec = pod.get("spec")?;
    let catalog = profiles.catalog();
    let narrow = |sizes: &[&Sku]| tiers::narrow(&profile.required, spec, request, sizes, catalog);
    if let Some(terms) = room.and_then(narrow) {
        return Some(terms.into());
    }
    let (tier, premium) = profiles.tiers.as_ref()?.tier_of(namespace_labels)?;
    let sizes = profiles.tier_skus.get(tier)?[usize::from(premium)].as_ref()?;
    if request.asks_for_mig() {
        // Not worked out ahead: `narrow` keeps only the tier's sizes whose
        // GPUs support MIG (none: placed by the profile, and denied by
        // /validate rather than pinned to sizes it cannot run on).
        return narrow(&profiles.at_positions(&sizes.positions)).map(Arc::from);
    }
    let makers = tiers::makers_index(request);
    match tiers::own_selection(spec) {
        // Worked out when the tiers were set.
        None => sizes.narrowed.get(profiles.index_of(profile)?)?[makers].clone(),
        Some(own) => tiers::narrow_for(
            &profile.required,
            Some(&own),
            tiers::MAKER_SETS[makers],
            &profiles.at_positions(&sizes.positions),
            catalog,
        )
        .map(Arc::from),
    }
}

/// The pod's GPU request, over the resources the profiles serve.
fn pod_request(profiles: &ProfileSet, pod: &Value) -> PodGpuRequest {
    pod.get("spec")
        .map(|spec| pod_gpu_request(spec, profiles.gpu_resources()))
        .unwrap_or_default()
}

/// The profile for a GPU pod that the scheduler will place.
fn applicable_profile<'a>(
    profiles: &'a ProfileSet,
    pod: &Value,
    request: &PodGpuRequest,
    namespace_labels: &BTreeMap<String, String>,
) -> Option<&'a Profile> {
    let spec = pod.get("spec")?;
    // A pod bound to a node skips the scheduler; the kubelet would reject
    // affinity it does not meet.
    if crate::gpu::reach::node_name(spec).is_some() || !request.requested() {
        return None;
    }
    profiles.select(request, &labels_of(Some(pod)), namespace_labels)
}

#[cfg(test)]
mod tests;
