//! Every conversation with the cluster: kube-apiserver (watched caches of
//! Namespaces, Nodes with NodePools and DRA devices, DRA claims and
//! GpuPolicyExceptions;
//! pages of any kind for the audit; leases, PolicyReport writes, SubjectAccessReviews,
//! the certificates kept in a Secret) and Prometheus (GPU utilization).
//! Domain modules receive what is read here as values and never hold a
//! client.
pub mod access_review;
pub mod budgets;
pub mod certs;
pub mod claims;
pub mod exceptions;
pub mod lease;
pub mod lister;
pub mod namespaces;
pub mod nodes;
pub mod policy_reports;
pub mod prometheus;
pub mod watch;

pub use claims::ClusterClaims;
pub use lister::ClusterLister;
pub use namespaces::ClusterNamespaces;
pub use nodes::ClusterNodes;

/// A client from the in-cluster configuration or the kubeconfig, with the
/// API server's URL it talks to; the error in words.
pub async fn connect() -> Result<(kube::Client, String), String> {
    let config = kube::Config::infer().await.map_err(|e| e.to_string())?;
    let url = config.cluster_url.to_string();
    kube::Client::try_from(config)
        .map(|client| (client, url))
        .map_err(|e| e.to_string())
}

/// `object` as JSON with its `apiVersion` and `kind` (the items of a list
/// come without them).
pub(crate) fn typed(
    object: &impl serde::Serialize,
    api_version: &str,
    kind: &str,
) -> serde_json::Result<serde_json::Value> {
    let mut value = serde_json::to_value(object)?;
    if let Some(fields) = value.as_object_mut() {
        fields.insert("apiVersion".into(), api_version.into());
        fields.insert("kind".into(), kind.into());
    }
    Ok(value)
}
