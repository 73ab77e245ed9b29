//! The cluster side of self-managed certificates: the Secret that holds
//! them, and the caBundle of the project's own webhook configurations.
use crate::certs::material::Material;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;

/// What the Secret held when read.
pub struct Stored {
    /// None: the Secret's data is not a complete set (the reason).
    pub material: Result<Material, String>,
    pub resource_version: Option<String>,
}

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Someone changed (or created) the object since it was read.
    #[error("changed by someone else since it was read")]
    Conflict,
    #[error(transparent)]
    Other(#[from] kube::Error),
}

fn write_error(err: kube::Error) -> WriteError {
    match &err {
        kube::Error::Api(status) if status.code == 409 || status.code == 422 => {
            WriteError::Conflict
        }
        _ => WriteError::Other(err),
    }
}

/// The certificate Secret, by name, in the server's namespace.
pub struct SecretStore {
    api: kube::Api<Secret>,
    name: String,
}

/// Label set on the Secret this server creates.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "gpu-admission");

impl SecretStore {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> SecretStore {
        SecretStore {
            api: kube::Api::namespaced(client, namespace),
            name: name.to_string(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Secret, or none if it does not exist.
    pub async fn get(&self) -> Result<Option<Stored>, kube::Error> {
        let Some(secret) = self.api.get_opt(&self.name).await? else {
            return Ok(None);
        };
        let data: BTreeMap<String, Vec<u8>> = secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        Ok(Some(Stored {
            material: Material::from_data(&data),
            resource_version: secret.metadata.resource_version,
        }))
    }

    /// Creates the Secret (`resource_version` none) or replaces the one
    /// read at `resource_version`.
    pub async fn put(
        &self,
        material: &Material,
        resource_version: Option<String>,
    ) -> Result<(), WriteError> {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(BTreeMap::from([(
                    MANAGED_BY.0.to_string(),
                    MANAGED_BY.1.to_string(),
                )])),
                resource_version: resource_version.clone(),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_string()),
            data: Some(
                material
                    .to_data()
                    .into_iter()
                    .map(|(k, v)| (k, ByteString(v)))
                    .collect(),
            ),
            ..Secret::default()
        };
        let params = PostParams::default();
        match resource_version {
            None => self.api.create(&params, &secret).await.map(drop),
            Some(_) => self
                .api
                .replace(&self.name, &params, &secret)
                .await
                .map(drop),
        }
        .map_err(write_error)
    }
}

/// The project's MutatingWebhookConfiguration and
/// ValidatingWebhookConfiguration, by name; no other is read or written.
pub struct WebhookConfigurations {
    /// Each named configuration, mutating first, and its name.
    named: Vec<(kube::Api<DynamicObject>, String)>,
}

/// What is read of a configuration of either kind.
#[derive(serde::Deserialize)]
struct Webhooks {
    #[serde(default)]
    webhooks: Vec<Webhook>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Webhook {
    name: String,
    client_config: ClientConfig,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClientConfig {
    ca_bundle: Option<ByteString>,
}

/// One configuration as read: its resourceVersion and, per webhook, its
/// name and caBundle (PEM text; empty when unset).
struct Read {
    resource_version: Option<String>,
    webhooks: Vec<(String, String)>,
}

impl Read {
    fn first_bundle(&self) -> Option<String> {
        let mut bundles = self.webhooks.iter().map(|(_, pem)| pem);
        bundles.find(|pem| !pem.is_empty()).cloned()
    }
}

/// What [`WebhookConfigurations::ensure`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BundleState {
    /// Every webhook of both configurations already had the caBundle.
    pub confirmed: bool,
    /// Webhooks whose caBundle was written.
    pub written: usize,
    /// The first non-empty caBundle found, PEM.
    pub first_bundle: Option<String>,
}

impl WebhookConfigurations {
    pub fn new(
        client: kube::Client,
        mutating: Option<&str>,
        validating: Option<&str>,
    ) -> WebhookConfigurations {
        let kinds = [
            (
                mutating,
                ApiResource::erase::<MutatingWebhookConfiguration>(&()),
            ),
            (
                validating,
                ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
            ),
        ];
        let named = kinds.into_iter().filter_map(|(name, resource)| {
            Some((
                kube::Api::all_with(client.clone(), &resource),
                name?.to_string(),
            ))
        });
        WebhookConfigurations {
            named: named.collect(),
        }
    }

    /// The first non-empty caBundle of the configurations, PEM.
    pub async fn current_bundle(&self) -> Result<Option<String>, kube::Error> {
        let reads = self.read_all().await?;
        Ok(reads.iter().flatten().find_map(Read::first_bundle))
    }

    /// Makes every webhook of both configurations trust exactly
    /// `trusted_pem`; a configuration that does not exist (yet) is left
    /// for the next check. A write that races another is a
    /// [`WriteError::Conflict`], tried again on the next check.
    pub async fn ensure(&self, trusted_pem: &str) -> Result<BundleState, WriteError> {
        let mut state = BundleState {
            confirmed: true,
            ..BundleState::default()
        };
        let reads = self.read_all().await?;
        for (read, (api, name)) in reads.into_iter().zip(&self.named) {
            let Some(read) = read else {
                state.confirmed = false;
                continue;
            };
            if state.first_bundle.is_none() {
                state.first_bundle = read.first_bundle();
            }
            let stale: Vec<usize> = read
                .webhooks
                .iter()
                .enumerate()
                .filter(|(_, (_, pem))| pem != trusted_pem)
                .map(|(i, _)| i)
                .collect();
            if stale.is_empty() {
                continue;
            }
            state.confirmed = false;
            let patch = bundle_patch(&read, &stale, trusted_pem);
            let params = PatchParams::default();
            api.patch(name, &params, &Patch::Json::<()>(patch))
                .await
                .map_err(write_error)?;
            state.written += stale.len();
        }
        Ok(state)
    }

    /// Each named configuration, in `named` order; none for one that
    /// does not exist.
    async fn read_all(&self) -> Result<Vec<Option<Read>>, kube::Error> {
        let mut out = Vec::new();
        for (api, name) in &self.named {
            let Some(object) = api.get_opt(name).await? else {
                out.push(None);
                continue;
            };
            let read: Webhooks =
                serde_json::from_value(object.data).map_err(kube::Error::SerdeError)?;
            let webhooks = read.webhooks.into_iter();
            out.push(Some(Read {
                resource_version: object.metadata.resource_version,
                webhooks: webhooks
                    .map(|w| (w.name, pem_of(w.client_config.ca_bundle)))
                    .collect(),
            }));
        }
        Ok(out)
    }
}

fn pem_of(bundle: Option<ByteString>) -> String {
    bundle
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

/// A JSON patch setting the caBundle of the webhooks at `stale`, which
/// applies only to the configuration as it was read: its resourceVersion
/// and each webhook's name are tested first.
fn bundle_patch(read: &Read, stale: &[usize], trusted_pem: &str) -> json_patch::Patch {
    let bundle = crate::certs::ca_bundle(trusted_pem);
    let mut ops = Vec::new();
    if let Some(rv) = &read.resource_version {
        ops.push(
            serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}),
        );
    }
    for &i in stale {
        let name = &read.webhooks[i].0;
        ops.push(
            serde_json::json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": name}),
        );
        ops.push(serde_json::json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": bundle}));
    }
    serde_json::from_value(serde_json::Value::Array(ops))
        .expect("well-formed JSON patch operations")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_tests_what_it_read_and_sets_only_stale_webhooks() {
        let read = Read {
            resource_version: Some("41".into()),
            webhooks: vec![
                ("pods.validate.gpu-admission.io".into(), "good".into()),
                ("workloads.validate.gpu-admission.io".into(), String::new()),
            ],
        };
        let patch = serde_json::to_value(bundle_patch(&read, &[1], "PEM\n")).unwrap();
        assert_eq!(
            patch,
            serde_json::json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
                {"op": "test", "path": "/webhooks/1/name", "value": "workloads.validate.gpu-admission.io"},
                {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "UEVNCg=="},
            ])
        );
    }
}
