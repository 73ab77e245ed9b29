//! The audit's [`Lister`] over a live cluster: pages of any kind, found
//! through API discovery.
use crate::inventory::{ListError, Lister, Page, PageAsk};
use std::collections::BTreeMap;

/// [`Lister`] over a cluster, through API discovery (once per kind).
pub struct ClusterLister {
    client: kube::Client,
    resources: std::sync::Mutex<BTreeMap<(String, String), kube::discovery::ApiResource>>,
}

impl ClusterLister {
    pub fn new(client: kube::Client) -> ClusterLister {
        ClusterLister {
            client,
            resources: Default::default(),
        }
    }

    async fn resource(
        &self,
        group: &str,
        kind: &str,
    ) -> Result<kube::discovery::ApiResource, ListError> {
        let key = (group.to_string(), kind.to_string());
        if let Some(found) = self.cache().get(&key) {
            return Ok(found.clone());
        }
        let api_group = kube::discovery::group(&self.client, group)
            .await
            .map_err(classify)?;
        let Some((resource, _caps)) = api_group.recommended_kind(kind) else {
            return Err(ListError::NotServed(format!("no kind {kind} in the group")));
        };
        self.cache().insert(key, resource.clone());
        Ok(resource)
    }

    fn cache(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), kube::discovery::ApiResource>> {
        self.resources.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Lister for ClusterLister {
    async fn list_page(&self, ask: PageAsk<'_>) -> Result<Page, ListError> {
        let resource = self.resource(ask.group, ask.kind).await?;
        let api: kube::Api<kube::core::DynamicObject> =
            kube::Api::all_with(self.client.clone(), &resource);
        let mut params = kube::api::ListParams::default().limit(ask.limit);
        if let Some(token) = ask.continue_token {
            params = params.continue_token(token);
        }
        let list = api.list(&params).await.map_err(classify)?;
        let items = (list.items.iter())
            .map(|item| super::typed(item, &resource.api_version, &resource.kind))
            .collect::<Result<_, _>>()
            .map_err(|e| ListError::Other(e.into()))?;
        Ok(Page {
            items,
            continue_token: list.metadata.continue_.filter(|t| !t.is_empty()),
        })
    }
}

fn classify(err: kube::Error) -> ListError {
    match &err {
        kube::Error::Api(status) if status.is_forbidden() || status.code == 403 => {
            ListError::Forbidden(status.message.clone())
        }
        kube::Error::Api(status) if status.is_not_found() || status.code == 404 => {
            ListError::NotServed(status.message.clone())
        }
        kube::Error::Discovery(
            kube::error::DiscoveryError::MissingApiGroup(_)
            | kube::error::DiscoveryError::MissingKind(_)
            | kube::error::DiscoveryError::MissingResource(_),
        ) => ListError::NotServed(err.to_string()),
        _ => ListError::Other(err.into()),
    }
}
