//! GPU infrastructure known by identity, as the node-isolation policies
//! know it: the `exemptNamespaces` and `infrastructureImages` of the
//! `gpu-node-isolation` params (policies/gpu-exemptions.yaml), and the
//! `gpu-admission.io/gpu-infrastructure=true` namespace label only admins
//! may set. `/mutate` hides GPUs by default from the containers of pods
//! that ask for none but can land on GPU nodes; GPU infrastructure is what
//! it must not hide them from (a device plugin that sees no GPU advertises
//! none).
use crate::k8s::doc::{comma_list, is_config_map};
use crate::k8s::images;
use crate::k8s::json::Pointer as _;
use serde_json::Value;
use std::collections::BTreeMap;

/// The ConfigMap whose data lists the exempt namespaces and images.
pub const EXEMPTIONS_CONFIG_MAP: &str = "gpu-node-isolation";

/// The namespace label an admin sets on a GPU infrastructure namespace.
pub const INFRASTRUCTURE_LABEL: &str = "gpu-admission.io/gpu-infrastructure";

/// The exemption lists placement honours.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Infrastructure {
    namespaces: Vec<String>,
    /// Image repositories, as `image.repository()` gives them.
    images: Vec<String>,
}

fn list(doc: &Value, key: &str) -> Vec<String> {
    comma_list(
        doc.at(&format!("/data/{key}"))
            .and_then(Value::as_str)
            .unwrap_or(""),
    )
}

impl Infrastructure {
    /// The lists of the `gpu-node-isolation` ConfigMap, when `doc` is it.
    pub fn from_config_map(doc: &Value) -> Option<Infrastructure> {
        if !is_config_map(doc, EXEMPTIONS_CONFIG_MAP) {
            return None;
        }
        Some(Infrastructure {
            namespaces: list(doc, "exemptNamespaces"),
            images: list(doc, "infrastructureImages")
                .iter()
                .map(|i| images::repository(i))
                .filter(|r| !r.is_empty())
                .collect(),
        })
    }

    /// A namespace of GPU infrastructure: listed, or labelled by an admin.
    pub fn is_namespace(&self, name: Option<&str>, labels: &BTreeMap<String, String>) -> bool {
        name.is_some_and(|n| self.namespaces.iter().any(|e| e == n))
            || labels.get(INFRASTRUCTURE_LABEL).map(String::as_str) == Some("true")
    }

    /// An image of the GPU stack (exact repository; tag and digest aside).
    pub fn is_image(&self, image: &str) -> bool {
        let repository = images::repository(image);
        !repository.is_empty() && self.images.contains(&repository)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_shipped_lists_and_nothing_else() {
        let doc = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "gpu-node-isolation", "namespace": "gpu-admission"},
            "data": {"exemptNamespaces": "kube-system, gpu-operator ,",
                     "infrastructureImages": " nvcr.io/nvidia/k8s-device-plugin,\n rocm/k8s-device-plugin"}});
        let infra = Infrastructure::from_config_map(&doc).unwrap();
        let none = BTreeMap::new();
        assert!(infra.is_namespace(Some("gpu-operator"), &none));
        assert!(!infra.is_namespace(Some("gpu-operator-x"), &none));
        assert!(!infra.is_namespace(None, &none));
        let labelled = BTreeMap::from([(INFRASTRUCTURE_LABEL.to_string(), "true".to_string())]);
        assert!(infra.is_namespace(Some("monitoring"), &labelled));
        assert!(infra.is_image("nvcr.io/nvidia/k8s-device-plugin:v0.17.0"));
        assert!(infra.is_image("docker.io/rocm/k8s-device-plugin@sha256:00"));
        assert!(!infra.is_image("nvcr.io/nvidia/k8s-device-plugin-evil:v1"));
        assert!(!infra.is_image(""));
        let mut other = doc.clone();
        other["metadata"]["name"] = json!("gpu-tiers");
        assert_eq!(Infrastructure::from_config_map(&other), None);
    }
}
