//! Kueue in the audit: the ResourceFlavors a ClusterQueue gives the
//! namespaces it serves, against those namespaces' SKU tiers. Kueue writes
//! a flavor's `nodeLabels` into every pod it admits on the flavor; when the
//! flavor's sizes fall outside the namespace's tier, those pods are denied
//! (`gpu-sku-allowlist`) and the admitted workload never starts.
use crate::gpu::capacity::{CapacityRequest, PoolKind};
use crate::k8s::json::labels_of;
use crate::k8s::namespaces::with_name_label;
use crate::k8s::NamespaceLookup;
use crate::kueue::{self, ClusterQueue};
use crate::placement::ProfileSet;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A ResourceFlavor a ClusterQueue gives a namespace whose tier does not
/// allow the flavor's GPU sizes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FlavorOutsideTier {
    pub cluster_queue: String,
    pub flavor: String,
    /// A namespace with a LocalQueue of the ClusterQueue, which the
    /// ClusterQueue's namespaceSelector admits.
    pub namespace: String,
    pub tier: String,
    /// The flavor's GPU sizes the tier does not allow: those its nodeLabels
    /// name, or when it names none, every one it selects (then none of
    /// them is in the tier).
    pub sizes: Vec<String>,
    pub message: String,
}

/// Every (ClusterQueue, namespace it serves, flavor it gives) among
/// `objects` whose flavor selects GPU sizes outside the namespace's tier,
/// in ClusterQueue, namespace and flavor order. A namespace is served when
/// it has a LocalQueue of the ClusterQueue and the ClusterQueue's
/// namespaceSelector admits it; its labels come from `namespaces`.
pub fn flavors_outside_tiers(
    objects: &[Value],
    profiles: &ProfileSet,
    namespaces: &dyn NamespaceLookup,
) -> Vec<FlavorOutsideTier> {
    let catalog = profiles.catalog();
    let flavors = flavors(objects);
    let mut out = Vec::new();
    for (queue, namespace, labels) in served(objects, namespaces) {
        let Some(allowed) = profiles.tier_allowed(&labels) else {
            continue;
        };
        let tier = profiles.tier_name(&labels).unwrap_or_default();
        let in_tier = |s: &str| allowed.iter().any(|a| a.is_named(s));
        for name in &queue.flavors {
            let Some(flavor) = flavors.get(name) else {
                continue;
            };
            let named: Vec<String> = (flavor.sizes.iter())
                .filter_map(|s| catalog.get(s))
                .map(|s| s.name.clone())
                .collect();
            let sizes: Vec<String> = if named.is_empty() {
                let selected = flavor.gpu_skus(catalog);
                if selected.iter().any(|s| in_tier(s)) {
                    continue;
                }
                selected
            } else {
                named.into_iter().filter(|s| !in_tier(s)).collect()
            };
            let Some(first) = sizes.first() else {
                continue;
            };
            let more = match sizes.len() {
                1 => String::new(),
                n => format!(" and {} other sizes", n - 1),
            };
            let message = format!(
                    "ResourceFlavor {name} selects {first}{more}, outside tier {tier} of namespace {namespace} (ClusterQueue {}): the pods Kueue admits from {namespace} on it are denied (gpu-sku-allowlist) and their workloads never start; give the namespace a flavor of its tier, or the tier these sizes",
                    queue.name
                );
            out.push(FlavorOutsideTier {
                cluster_queue: queue.name.clone(),
                flavor: name.clone(),
                namespace: namespace.to_string(),
                tier: tier.to_string(),
                sizes,
                message,
            });
        }
    }
    out
}

/// The ResourceFlavors among `objects`, by name.
pub(super) fn flavors(objects: &[Value]) -> BTreeMap<String, CapacityRequest> {
    (objects.iter())
        .filter_map(CapacityRequest::from_object)
        .filter(|r| r.kind == PoolKind::ResourceFlavor)
        .map(|r| (r.name.clone(), r))
        .collect()
}

/// Each ClusterQueue among `objects` (by name) with each namespace it
/// serves, and that namespace's labels (from `namespaces`): a namespace
/// with a LocalQueue of the ClusterQueue that its namespaceSelector admits.
pub(super) fn served<'a>(
    objects: &'a [Value],
    namespaces: &dyn NamespaceLookup,
) -> Vec<(ClusterQueue, &'a str, BTreeMap<String, String>)> {
    let mut queues: Vec<ClusterQueue> = objects
        .iter()
        .filter_map(ClusterQueue::from_object)
        .collect();
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    let mut local: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (namespace, cluster_queue) in objects.iter().filter_map(kueue::local_queue) {
        local.entry(cluster_queue).or_default().insert(namespace);
    }
    let mut out = Vec::new();
    for queue in queues {
        for &namespace in local.get(queue.name.as_str()).into_iter().flatten() {
            let object = namespaces.namespace(namespace);
            let labels = with_name_label(namespace, labels_of(object.as_deref()));
            if queue.serves(&labels) {
                out.push((queue.clone(), namespace, labels));
            }
        }
    }
    out
}
