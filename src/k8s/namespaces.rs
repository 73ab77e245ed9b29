//! Namespaces: where a request's namespace object and labels come from.
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The label the apiserver sets on every Namespace to its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The labels of the Namespace `name` as the cluster has them: `labels`
/// and [`NAMESPACE_NAME_LABEL`], which the apiserver sets to the name
/// whatever the object says.
pub fn with_name_label(
    name: &str,
    mut labels: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    labels.insert(NAMESPACE_NAME_LABEL.to_string(), name.to_string());
    labels
}

/// Looks up Namespace objects (for `namespaceObject`, namespaceSelector and
/// placement profiles' namespace selectors).
pub trait NamespaceLookup: Send + Sync {
    /// The Namespace object named `name`, as JSON, if known. Shared: a
    /// lookup may hand out the same object to every request.
    fn namespace(&self, name: &str) -> Option<Arc<Value>>;
}

/// Namespaces known up front: labels given on the command line or in a
/// policy test file.
#[derive(Clone, Debug, Default)]
pub struct StaticNamespaces {
    namespaces: BTreeMap<String, Arc<Value>>,
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
        let object = json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": labels},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        self.namespaces.insert(name.to_string(), Arc::new(object));
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
    fn namespace(&self, name: &str) -> Option<Arc<Value>> {
        self.namespaces.get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_label_is_the_name_whatever_the_labels_say() {
        let labels = with_name_label(
            "ml",
            BTreeMap::from([
                ("team".to_string(), "a".to_string()),
                (NAMESPACE_NAME_LABEL.to_string(), "other".to_string()),
            ]),
        );
        assert_eq!(labels[NAMESPACE_NAME_LABEL], "ml");
        assert_eq!(labels["team"], "a");
        assert_eq!(labels.len(), 2);
    }

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
}
