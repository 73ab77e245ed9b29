//! The cluster's DRA ResourceClaims and ResourceClaimTemplates, watched,
//! for which pods claim GPUs.
use crate::k8s::ClaimLookup;
use serde_json::Value;

type ClaimStore = kube::runtime::reflector::Store<k8s_openapi::api::resource::v1::ResourceClaim>;
type TemplateStore =
    kube::runtime::reflector::Store<k8s_openapi::api::resource::v1::ResourceClaimTemplate>;

/// ResourceClaims and ResourceClaimTemplates of a live cluster
/// (`resource.k8s.io/v1`), kept current by two reflectors (needs only
/// get/list/watch on both). Empty until the first lists complete.
#[derive(Clone, Default)]
pub struct ClusterClaims {
    stores: Option<(ClaimStore, TemplateStore)>,
}

impl ClusterClaims {
    /// A lookup that knows no claim, for when there is no cluster or the
    /// cluster does not serve `resource.k8s.io/v1`.
    pub fn empty() -> ClusterClaims {
        ClusterClaims::default()
    }

    /// Starts watching both kinds with `client`. The returned task runs
    /// until dropped or aborted.
    pub fn start(client: kube::Client) -> (ClusterClaims, tokio::task::JoinHandle<()>) {
        use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
        let (claims, claim_events) = reflect::<ResourceClaim>(client.clone(), |c| {
            // Only the spec is read; allocations and reservations churn.
            c.status = None;
        });
        let (templates, template_events) = reflect::<ResourceClaimTemplate>(client, |_| {});
        let task = tokio::spawn(async move {
            tokio::join!(claim_events, template_events);
        });
        let lookup = ClusterClaims {
            stores: Some((claims, templates)),
        };
        (lookup, task)
    }

    /// Resolves once both kinds are listed (at once for an empty lookup).
    /// Returns false if a watch ended before that.
    pub async fn wait_until_synced(&self) -> bool {
        match &self.stores {
            None => true,
            Some((claims, templates)) => {
                let (a, b) = tokio::join!(claims.wait_until_ready(), templates.wait_until_ready());
                a.is_ok() && b.is_ok()
            }
        }
    }
}

/// A reflector over every object of `K`, trimmed by `trim` (and of its
/// managed fields) before it is stored; the future drives it.
pub(crate) fn reflect<K>(
    client: kube::Client,
    trim: fn(&mut K),
) -> (
    kube::runtime::reflector::Store<K>,
    impl std::future::Future<Output = ()>,
)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    use futures_util::StreamExt as _;
    use kube::runtime::{reflector, watcher, WatchStreamExt};
    let api: kube::Api<K> = kube::Api::all(client);
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .modify(move |o| {
            o.meta_mut().managed_fields = None;
            trim(o);
        })
        .default_backoff();
    let stream = reflector(writer, stream).touched_objects();
    let events = async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(e) = event {
                tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying");
            }
        }
    };
    (reader, events)
}

fn stored<K: kube::Resource<DynamicType = ()> + Clone + serde::Serialize>(
    store: &kube::runtime::reflector::Store<K>,
    namespace: &str,
    name: &str,
) -> Option<Value> {
    let key = kube::runtime::reflector::ObjectRef::new(name).within(namespace);
    let object = store.get(&key)?;
    let mut value = serde_json::to_value(object.as_ref()).ok()?;
    if let Some(obj) = value.as_object_mut() {
        obj.insert("apiVersion".into(), Value::from(K::api_version(&())));
        obj.insert("kind".into(), Value::from(K::kind(&())));
    }
    Some(value)
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
