//! The cluster's Namespaces, for namespaceSelector and namespaceObject:
//! a watched cache that writes each Namespace as JSON once per version.
use super::watch::{self, CacheMetrics, Kind, Settings, Watched};
use crate::k8s::NamespaceLookup;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

type NamespaceStore = kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Namespace>;

/// Namespaces of a live cluster, kept current by a reflector (needs only
/// get/list/watch on namespaces). Empty until the first list completes.
///
/// Each Namespace is written as JSON once per version, not once per
/// request: the JSON of the version last looked up is kept and handed out
/// while the cache still holds that version.
#[derive(Clone, Default)]
pub struct ClusterNamespaces {
    store: Option<NamespaceStore>,
    watched: Option<Watched>,
    written: Arc<Mutex<HashMap<String, Written>>>,
}

/// A Namespace as JSON, with the resourceVersion it was written from.
struct Written {
    resource_version: String,
    object: Arc<Value>,
}

/// At most this many Namespaces are kept as JSON; past it the kept ones are
/// dropped and written again as requests need them (a cluster with more
/// namespaces than this still gets correct, only slower, lookups).
const MAX_WRITTEN: usize = 10_000;

impl ClusterNamespaces {
    /// A lookup that knows no namespace, for when there is no cluster.
    pub fn empty() -> ClusterNamespaces {
        ClusterNamespaces::default()
    }

    /// A lookup over `store`, a reflector's cache filled elsewhere.
    pub fn from_store(store: NamespaceStore) -> ClusterNamespaces {
        ClusterNamespaces {
            store: Some(store),
            ..ClusterNamespaces::default()
        }
    }

    /// Starts watching Namespaces with `client`. The returned task runs
    /// until aborted.
    pub fn start(client: kube::Client) -> (ClusterNamespaces, tokio::task::JoinHandle<()>) {
        ClusterNamespaces::start_with(client, Settings::default(), CacheMetrics::default())
    }

    /// [`ClusterNamespaces::start`] with these settings and metrics.
    pub fn start_with(
        client: kube::Client,
        settings: Settings,
        metrics: CacheMetrics,
    ) -> (ClusterNamespaces, tokio::task::JoinHandle<()>) {
        let kind = Kind::new("namespaces", "", "v1", "namespaces");
        let (store, watched, task) = watch::reflect(client, kind, settings, metrics, |_| {});
        let mut lookup = ClusterNamespaces::from_store(store);
        lookup.watched = Some(watched);
        (lookup, task)
    }

    /// The watch filling the cache, if it is watched.
    pub fn watched(&self) -> Option<Watched> {
        self.watched.clone()
    }

    /// Resolves once the first full list of Namespaces is in the cache
    /// (at once for a lookup without a cluster). Returns false if the watch
    /// ended before that, in which case the cache never syncs.
    pub async fn wait_until_synced(&self) -> bool {
        match (&self.watched, &self.store) {
            (Some(watched), _) => watched.synced().await,
            (None, Some(store)) => store.wait_until_ready().await.is_ok(),
            (None, None) => true,
        }
    }
}

impl NamespaceLookup for ClusterNamespaces {
    fn namespace(&self, name: &str) -> Option<Arc<Value>> {
        let store = self.store.as_ref()?;
        let lock = || self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(ns) = store.get(&kube::runtime::reflector::ObjectRef::new(name)) else {
            lock().remove(name);
            return None;
        };
        let version = ns.metadata.resource_version.as_deref();
        if let (Some(version), Some(written)) = (version, lock().get(name)) {
            if written.resource_version == version {
                return Some(written.object.clone());
            }
        }
        let object = Arc::new(super::typed(ns.as_ref(), "v1", "Namespace").ok()?);
        // Without a resourceVersion there is no telling versions apart:
        // such an object is written for each request.
        if let Some(version) = version {
            let mut written = lock();
            if written.len() >= MAX_WRITTEN && !written.contains_key(name) {
                written.clear();
            }
            written.insert(
                name.to_string(),
                Written {
                    resource_version: version.to_string(),
                    object: object.clone(),
                },
            );
        }
        Some(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Namespace;

    fn cluster_namespace(name: &str, version: Option<&str>, team: &str) -> Namespace {
        let mut ns = Namespace::default();
        ns.metadata.name = Some(name.into());
        ns.metadata.resource_version = version.map(Into::into);
        ns.metadata.labels = Some([("team".to_string(), team.to_string())].into());
        ns
    }

    #[test]
    fn a_cluster_namespace_is_written_as_json_once_per_version() {
        use kube::runtime::{reflector, watcher::Event};
        let (store, mut writer) = reflector::store::<Namespace>();
        let lookup = ClusterNamespaces::from_store(store);
        assert_eq!(lookup.namespace("ml"), None);

        writer.apply_watcher_event(&Event::Apply(cluster_namespace("ml", Some("1"), "a")));
        let first = lookup.namespace("ml").unwrap();
        assert_eq!(first["apiVersion"], "v1");
        assert_eq!(first["kind"], "Namespace");
        assert_eq!(first["metadata"]["labels"]["team"], "a");
        assert_eq!(first["metadata"]["resourceVersion"], "1");
        // The same version: the same JSON, shared, not written again.
        let again = lookup.namespace("ml").unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        // Clones of the lookup share what it has written.
        assert!(Arc::ptr_eq(
            &first,
            &lookup.clone().namespace("ml").unwrap()
        ));

        // A new version is written anew, with what changed.
        writer.apply_watcher_event(&Event::Apply(cluster_namespace("ml", Some("2"), "b")));
        let second = lookup.namespace("ml").unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(second["metadata"]["labels"]["team"], "b");
        assert_eq!(
            first["metadata"]["labels"]["team"], "a",
            "a held copy stays as it was"
        );

        // Deleted: unknown again, and nothing kept for it.
        writer.apply_watcher_event(&Event::Delete(cluster_namespace("ml", Some("3"), "b")));
        assert_eq!(lookup.namespace("ml"), None);
        assert!(lookup.written.lock().unwrap().is_empty());

        // Without a resourceVersion, each lookup writes the object (and
        // keeps nothing that could go stale).
        writer.apply_watcher_event(&Event::Apply(cluster_namespace("web", None, "c")));
        let a = lookup.namespace("web").unwrap();
        let b = lookup.namespace("web").unwrap();
        assert_eq!(a, b);
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(a["metadata"]["labels"]["team"], "c");
    }

    #[test]
    fn the_written_namespaces_are_bounded() {
        use kube::runtime::{reflector, watcher::Event};
        let (store, mut writer) = reflector::store::<Namespace>();
        let lookup = ClusterNamespaces::from_store(store);
        for i in 0..=MAX_WRITTEN {
            let name = format!("ns-{i}");
            writer.apply_watcher_event(&Event::Apply(cluster_namespace(&name, Some("1"), "t")));
            assert_eq!(lookup.namespace(&name).unwrap()["metadata"]["name"], name);
            assert!(lookup.written.lock().unwrap().len() <= MAX_WRITTEN);
        }
        // Past the bound the kept ones were dropped: the last one is kept.
        assert_eq!(lookup.written.lock().unwrap().len(), 1);
        assert_eq!(
            lookup.namespace("ns-0").unwrap()["metadata"]["name"],
            "ns-0"
        );
    }

    #[tokio::test]
    async fn without_a_cluster_there_is_nothing_to_sync() {
        assert!(ClusterNamespaces::empty().wait_until_synced().await);
    }

    #[test]
    fn an_empty_lookup_knows_no_namespace() {
        assert_eq!(ClusterNamespaces::empty().namespace("ml"), None);
    }
}
