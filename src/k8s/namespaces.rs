//! Namespaces: where a request's namespace object and labels come from.
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Looks up Namespace objects (for `namespaceObject`, namespaceSelector and
/// placement profiles' namespace selectors).
pub trait NamespaceLookup: Send + Sync {
    /// The Namespace object named `name`, as JSON, if known.
    fn namespace(&self, name: &str) -> Option<Value>;
}

/// Namespaces known up front: labels given on the command line or in a
/// policy test file.
#[derive(Clone, Debug, Default)]
pub struct StaticNamespaces {
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
}

impl StaticNamespaces {
    pub fn new() -> StaticNamespaces {
        StaticNamespaces::default()
    }

    /// Adds (or replaces) namespace `name` with `labels`.
    pub fn with(mut self, name: &str, labels: BTreeMap<String, String>) -> StaticNamespaces {
        self.insert(name, labels);
        self
    }

    pub fn insert(&mut self, name: &str, labels: BTreeMap<String, String>) {
        self.namespaces.insert(name.to_string(), labels);
    }
}

/// Parses `k=v,k2=v2` (the `--namespace-labels` form) into labels.
pub fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                labels.insert(k.trim().to_string(), v.trim().to_string());
            }
            _ => return Err(format!("expected key=value, got {pair:?}")),
        }
    }
    Ok(labels)
}

impl NamespaceLookup for StaticNamespaces {
    fn namespace(&self, name: &str) -> Option<Value> {
        let labels = self.namespaces.get(name)?;
        Some(json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": labels},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }))
    }
}

/// Namespaces of a live cluster, kept current by a reflector (needs only
/// get/list/watch on namespaces). Empty until the first list completes.
#[derive(Clone)]
pub struct ClusterNamespaces {
    store: Option<kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Namespace>>,
}

impl ClusterNamespaces {
    /// A lookup that knows no namespace, for when there is no cluster.
    pub fn empty() -> ClusterNamespaces {
        ClusterNamespaces { store: None }
    }

    /// Starts watching Namespaces with `client`. The returned task runs
    /// until dropped or aborted.
    pub fn start(client: kube::Client) -> (ClusterNamespaces, tokio::task::JoinHandle<()>) {
        use futures_util::StreamExt as _;
        use kube::runtime::{reflector, watcher, WatchStreamExt};
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        let (reader, writer) = reflector::store();
        let stream = reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .touched_objects();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Err(e) = event {
                    tracing::warn!(error = %e, "namespace watch failed; retrying");
                }
            }
        });
        (
            ClusterNamespaces {
                store: Some(reader),
            },
            task,
        )
    }

    /// Connects with the kubeconfig or in-cluster configuration, if there
    /// is one; otherwise an empty lookup, and a log line saying so.
    pub async fn from_environment() -> (ClusterNamespaces, Option<tokio::task::JoinHandle<()>>) {
        match kube::Client::try_default().await {
            Ok(client) => {
                let (ns, task) = ClusterNamespaces::start(client);
                (ns, Some(task))
            }
            Err(e) => {
                tracing::info!(error = %e, "no Kubernetes configuration: namespaceObject and namespaceSelector see no namespace labels");
                (ClusterNamespaces::empty(), None)
            }
        }
    }
}

impl ClusterNamespaces {
    /// Resolves once the first full list of Namespaces is in the cache
    /// (at once for a lookup without a cluster). Returns false if the watch
    /// ended before that, in which case the cache never syncs.
    pub async fn wait_until_synced(&self) -> bool {
        match &self.store {
            None => true,
            Some(store) => store.wait_until_ready().await.is_ok(),
        }
    }
}

impl NamespaceLookup for ClusterNamespaces {
    fn namespace(&self, name: &str) -> Option<Value> {
        let store = self.store.as_ref()?;
        let ns = store.get(&kube::runtime::reflector::ObjectRef::new(name))?;
        let mut value = serde_json::to_value(ns.as_ref()).ok()?;
        if let Some(obj) = value.as_object_mut() {
            obj.insert("apiVersion".into(), json!("v1"));
            obj.insert("kind".into(), json!("Namespace"));
        }
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_namespaces_carry_labels() {
        let ns = StaticNamespaces::new().with(
            "ml",
            [("tier".to_string(), "gpu".to_string())]
                .into_iter()
                .collect(),
        );
        let obj = ns.namespace("ml").unwrap();
        assert_eq!(obj["metadata"]["labels"]["tier"], "gpu");
        assert_eq!(ns.namespace("other"), None);
        assert_eq!(ClusterNamespaces::empty().namespace("ml"), None);
    }

    #[test]
    fn labels_parse_from_the_command_line_form() {
        let labels = parse_labels("tier=gpu, team = vision,empty=").unwrap();
        assert_eq!(labels["tier"], "gpu");
        assert_eq!(labels["team"], "vision");
        assert_eq!(labels["empty"], "");
        assert!(parse_labels("novalue").is_err());
        assert!(parse_labels("=x").is_err());
        assert!(parse_labels("").unwrap().is_empty());
    }

    #[tokio::test]
    async fn without_a_cluster_there_is_nothing_to_sync() {
        assert!(ClusterNamespaces::empty().wait_until_synced().await);
    }
}
