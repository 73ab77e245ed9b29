//! The cluster's DRA ResourceClaims and ResourceClaimTemplates, watched,
//! for which pods claim GPUs.
use super::watch::{self, CacheMetrics, Kind, Settings, Watched};
use crate::k8s::ClaimLookup;
use serde_json::Value;

type ClaimStore = kube::runtime::reflector::Store<k8s_openapi::api::resource::v1::ResourceClaim>;
type TemplateStore =
    kube::runtime::reflector::Store<k8s_openapi::api::resource::v1::ResourceClaimTemplate>;

/// ResourceClaims and ResourceClaimTemplates of a live cluster
/// (`resource.k8s.io/v1`), kept current by two watched caches (needs only
/// get/list/watch on both). Empty until the first lists complete.
#[derive(Clone, Default)]
pub struct ClusterClaims {
    stores: Option<(ClaimStore, TemplateStore)>,
    watched: Vec<Watched>,
}

impl ClusterClaims {
    /// A lookup that knows no claim, for when there is no cluster or the
    /// cluster does not serve `resource.k8s.io/v1`.
    pub fn empty() -> ClusterClaims {
        ClusterClaims::default()
    }

    /// Starts watching both kinds with `client`; the task runs until
    /// aborted. A cluster that does not serve `resource.k8s.io/v1` (before
    /// Kubernetes 1.34) has no claims: both caches are then synced and empty.
    pub fn start_with(
        client: kube::Client,
        settings: Settings,
        metrics: CacheMetrics,
    ) -> (ClusterClaims, tokio::task::JoinHandle<()>) {
        use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
        let kind = |name, plural| Kind::new(name, "resource.k8s.io", "v1", plural);
        let (claims, claims_watched, claims_task) = watch::reflect::<ResourceClaim>(
            client.clone(),
            kind("resource claims", "resourceclaims"),
            settings,
            metrics.clone(),
            // Only the spec is read; allocations and reservations churn.
            |c| c.status = None,
        );
        let (templates, templates_watched, templates_task) = watch::reflect::<ResourceClaimTemplate>(
            client,
            kind("resource claim templates", "resourceclaimtemplates"),
            settings,
            metrics,
            |_| {},
        );
        let task = tokio::spawn(async move {
            let _abort_both = (AbortOnDrop(claims_task), AbortOnDrop(templates_task));
            std::future::pending::<()>().await
        });
        let lookup = ClusterClaims {
            stores: Some((claims, templates)),
            watched: vec![claims_watched, templates_watched],
        };
        (lookup, task)
    }

    /// The watches filling the cache.
    pub fn watched(&self) -> Vec<Watched> {
        self.watched.clone()
    }

    /// Resolves once both kinds are listed, or known not served (at once
    /// for an empty lookup). Returns false if a watch stopped before that.
    pub async fn wait_until_synced(&self) -> bool {
        for watched in &self.watched {
            if !watched.synced().await {
                return false;
            }
        }
        true
    }
}

/// Aborts a task when dropped, so that aborting the task holding it stops
/// both watches.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn stored<K: kube::Resource<DynamicType = ()> + Clone + serde::Serialize>(
    store: &kube::runtime::reflector::Store<K>,
    namespace: &str,
    name: &str,
) -> Option<Value> {
    let key = kube::runtime::reflector::ObjectRef::new(name).within(namespace);
    super::typed(
        store.get(&key)?.as_ref(),
        &K::api_version(&()),
        &K::kind(&()),
    )
    .ok()
}

impl ClaimLookup for ClusterClaims {
    fn resource_claim(&self, namespace: &str, name: &str) -> Option<Value> {
        stored(&self.stores.as_ref()?.0, namespace, name)
    }

    fn resource_claim_template(&self, namespace: &str, name: &str) -> Option<Value> {
        stored(&self.stores.as_ref()?.1, namespace, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_lookup_knows_no_claim() {
        assert!(ClusterClaims::empty()
            .resource_claim_template("ml", "one-gpu")
            .is_none());
    }
}
