//! The namespaced policy reports one tool manages, in either [`Schema`]
//! (`wgpolicyk8s.io/v1alpha2` PolicyReports, which Policy Reporter and
//! Kyverno's tooling read, or their successor `openreports.io/v1alpha1`
//! Reports, which Kubewarden writes by default), found by their
//! `app.kubernetes.io/managed-by` label: list them, get one, create,
//! replace (carrying the `resourceVersion` read, so a concurrent writer
//! gets a conflict instead of being overwritten) and delete.
use serde_json::Value;

/// Which API the reports are written in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Schema {
    /// `wgpolicyk8s.io/v1alpha2` PolicyReport / ClusterPolicyReport.
    #[default]
    #[value(name = "policyreport")]
    PolicyReport,
    /// `openreports.io/v1alpha1` Report / ClusterReport.
    #[value(name = "openreports")]
    OpenReports,
}

impl Schema {
    /// `apiVersion` of the reports.
    pub fn api_version(self) -> &'static str {
        match self {
            Schema::PolicyReport => "wgpolicyk8s.io/v1alpha2",
            Schema::OpenReports => "openreports.io/v1alpha1",
        }
    }

    /// `kind` of a namespace's report, or of the cluster-scoped one.
    pub fn kind(self, cluster_scoped: bool) -> &'static str {
        match (self, cluster_scoped) {
            (Schema::PolicyReport, false) => "PolicyReport",
            (Schema::PolicyReport, true) => "ClusterPolicyReport",
            (Schema::OpenReports, false) => "Report",
            (Schema::OpenReports, true) => "ClusterReport",
        }
    }

    /// Who installs the reports' CRD.
    fn shipped_by(self) -> &'static str {
        match self {
            Schema::PolicyReport => "Kyverno and Policy Reporter ship it",
            Schema::OpenReports => {
                "the openreports.io chart, Kubewarden and Policy Reporter ship it"
            }
        }
    }

    /// The resource of a namespace's report.
    fn plural(self) -> &'static str {
        match self {
            Schema::PolicyReport => "policyreports",
            Schema::OpenReports => "reports",
        }
    }
}

/// The label that says which tool manages a report.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Objects per page when listing reports.
const PAGE: u32 = 500;

/// Why a read or write of PolicyReports failed.
#[derive(Debug, thiserror::Error)]
pub enum ReportStoreError {
    /// The report changed since it was read (HTTP 409), or already exists.
    #[error("the report was changed or created by another writer")]
    Conflict,
    /// The cluster does not serve the reports' API: which, and what it said.
    #[error("the cluster does not serve {api} {kind}s (install their CRD: {by}): {1}",
            api = .0.api_version(), kind = .0.kind(false), by = .0.shipped_by())]
    NotServed(Schema, String),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Where the reports are kept: the cluster, or memory in tests.
#[allow(async_fn_in_trait)]
pub trait PolicyReportStore {
    /// Every report, in every namespace, labelled as managed by `manager`.
    async fn list(&self, manager: &str) -> Result<Vec<Value>, ReportStoreError>;
    /// The report `name` in `namespace`, whoever manages it; none when
    /// there is none.
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Value>, ReportStoreError>;
    /// Creates `report` in its `metadata.namespace`;
    /// [`ReportStoreError::Conflict`] if it exists.
    async fn create(&self, report: &Value) -> Result<Value, ReportStoreError>;
    /// Replaces `report` if its `metadata.resourceVersion` is still the
    /// stored one, else [`ReportStoreError::Conflict`].
    async fn replace(&self, report: &Value) -> Result<Value, ReportStoreError>;
    /// Deletes the report; one already gone is not an error.
    async fn delete(&self, namespace: &str, name: &str) -> Result<(), ReportStoreError>;
}

/// [`PolicyReportStore`] over the cluster's API server, for reports in
/// one [`Schema`].
pub struct ClusterPolicyReports {
    client: kube::Client,
    schema: Schema,
    resource: kube::discovery::ApiResource,
}

impl ClusterPolicyReports {
    pub fn new(client: kube::Client, schema: Schema) -> ClusterPolicyReports {
        let (group, version) = schema.api_version().split_once('/').unwrap_or_default();
        let gvk = kube::core::GroupVersionKind::gvk(group, version, schema.kind(false));
        ClusterPolicyReports {
            client,
            schema,
            resource: kube::discovery::ApiResource::from_gvk_with_plural(&gvk, schema.plural()),
        }
    }

    fn namespaced(&self, namespace: &str) -> kube::Api<kube::core::DynamicObject> {
        kube::Api::namespaced_with(self.client.clone(), namespace, &self.resource)
    }

    /// `report` as the typed object kube's client sends, and its namespace.
    fn object(report: &Value) -> Result<(kube::core::DynamicObject, String), ReportStoreError> {
        let namespace = crate::k8s::json::str_at(report, "/metadata/namespace").to_string();
        if namespace.is_empty() {
            return Err(ReportStoreError::Other(anyhow::anyhow!(
                "a namespaced report needs metadata.namespace"
            )));
        }
        let object = serde_json::from_value(report.clone())
            .map_err(|e| ReportStoreError::Other(e.into()))?;
        Ok((object, namespace))
    }

    fn value(&self, object: kube::core::DynamicObject) -> Result<Value, ReportStoreError> {
        super::typed(&object, &self.resource.api_version, &self.resource.kind)
            .map_err(|e| ReportStoreError::Other(e.into()))
    }
}

fn store_error(err: kube::Error) -> ReportStoreError {
    match &err {
        kube::Error::Api(status) if status.code == 409 => ReportStoreError::Conflict,
        _ => ReportStoreError::Other(err.into()),
    }
}

/// Whether `report` carries `manager` in its managed-by label.
pub fn managed_by(report: &Value, manager: &str) -> bool {
    report["metadata"]["labels"][MANAGED_BY].as_str() == Some(manager)
}

impl PolicyReportStore for ClusterPolicyReports {
    async fn list(&self, manager: &str) -> Result<Vec<Value>, ReportStoreError> {
        let api: kube::Api<kube::core::DynamicObject> =
            kube::Api::all_with(self.client.clone(), &self.resource);
        let selector = format!("{MANAGED_BY}={manager}");
        let mut reports = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut params = kube::api::ListParams::default()
                .labels(&selector)
                .limit(PAGE);
            if let Some(token) = &token {
                params = params.continue_token(token);
            }
            let page = api.list(&params).await.map_err(|err| match err {
                kube::Error::Api(status) if status.code == 404 => {
                    ReportStoreError::NotServed(self.schema, status.message)
                }
                err => store_error(err),
            })?;
            for item in page.items {
                let value = self.value(item)?;
                // A server that ignored the selector must not hand over
                // another tool's reports.
                if managed_by(&value, manager) {
                    reports.push(value);
                }
            }
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                return Ok(reports);
            }
        }
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Value>, ReportStoreError> {
        let found = self.namespaced(namespace).get_opt(name).await;
        found
            .map_err(store_error)?
            .map(|o| self.value(o))
            .transpose()
    }

    async fn create(&self, report: &Value) -> Result<Value, ReportStoreError> {
        let (mut object, namespace) = Self::object(report)?;
        object.metadata.resource_version = None;
        let created = self
            .namespaced(&namespace)
            .create(&kube::api::PostParams::default(), &object)
            .await
            .map_err(store_error)?;
        self.value(created)
    }

    async fn replace(&self, report: &Value) -> Result<Value, ReportStoreError> {
        let (object, namespace) = Self::object(report)?;
        let name = object.metadata.name.clone().unwrap_or_default();
        let replaced = self
            .namespaced(&namespace)
            .replace(&name, &kube::api::PostParams::default(), &object)
            .await
            .map_err(|err| match err {
                // Deleted since it was read: the next run creates it.
                kube::Error::Api(status) if status.code == 404 => ReportStoreError::Conflict,
                err => store_error(err),
            })?;
        self.value(replaced)
    }

    async fn delete(&self, namespace: &str, name: &str) -> Result<(), ReportStoreError> {
        match self
            .namespaced(namespace)
            .delete(name, &kube::api::DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(err) => Err(store_error(err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_reports_labelled_with_the_manager_are_its_own() {
        let ours = json!({"metadata": {"labels": {MANAGED_BY: "gpu-admission"}}});
        let kyverno = json!({"metadata": {"labels": {MANAGED_BY: "kyverno"}}});
        let unlabelled = json!({"metadata": {"name": "x"}});
        assert!(managed_by(&ours, "gpu-admission"));
        assert!(!managed_by(&kyverno, "gpu-admission"));
        assert!(!managed_by(&unlabelled, "gpu-admission"));
    }

    #[test]
    fn a_report_without_a_namespace_is_refused_before_any_request() {
        let err = ClusterPolicyReports::object(&json!({
            "apiVersion": "openreports.io/v1alpha1", "kind": "Report", "metadata": {"name": "gpu-admission"},
        }))
        .unwrap_err();
        assert!(err.to_string().contains("metadata.namespace"), "{err}");
    }
}
