//! `serve`'s GpuPolicyExceptions: from the cluster (a watch cache) when
//! running in one with `--policy-exceptions=on`, the default; otherwise
//! from the policy folder only. Their metrics either way.
use crate::admission::{Admission, ExceptedCounter};
use crate::cluster::exceptions::metrics::ExceptionMetrics;
use crate::cluster::exceptions::{ClusterExceptions, Reader};
use crate::daemon::Service;
use crate::exceptions::ExceptionLookup;
use crate::server::{Gate, Readiness};
use std::sync::Arc;

/// The cluster's exception cache, made before the [`Admission`] that looks
/// exceptions up in it and watched once that exists (its reader compiles
/// expressions with the policies the Admission serves).
pub struct PendingExceptions {
    cache: ClusterExceptions,
    client: kube::Client,
    synced: Gate,
}

/// In a cluster with `on`: a cache of its GpuPolicyExceptions, readiness
/// then waiting for the first list (a cluster without the CRD, or that
/// refuses the list, is not waited for). Otherwise none.
pub async fn cluster_exceptions(readiness: &Readiness, on: bool) -> Option<PendingExceptions> {
    // Outside a cluster there is nothing to watch.
    std::env::var_os("KUBERNETES_SERVICE_HOST")?;
    if !on {
        tracing::info!("policy exceptions off: only the policy folder's GpuPolicyExceptions apply");
        return None;
    }
    // Without a client namespace_lookup has said why, and keeps the
    // server not ready.
    let client = kube::Client::try_default().await.ok()?;
    Some(PendingExceptions {
        cache: ClusterExceptions::waiting(),
        client,
        synced: readiness.gate("policy exceptions not synced"),
    })
}

impl PendingExceptions {
    /// What the Admission looks exceptions up in.
    pub fn lookup(&self) -> Arc<dyn ExceptionLookup> {
        Arc::new(self.cache.clone())
    }

    /// Starts the watch, each exception read with the policy set
    /// `admission` serves at the time; `metrics` then reports the cache,
    /// and its readiness gate opens on its first list.
    pub fn start(self, admission: Arc<Admission>, metrics: &ExceptionMetrics) -> Service {
        let PendingExceptions {
            cache,
            client,
            synced,
        } = self;
        let read: Reader =
            Arc::new(move |object| admission.bundle().policies.read_exception(object));
        let task = cache.watch(client, read);
        metrics.watch(cache.clone());
        tracing::info!("watching GpuPolicyExceptions; ready once they are listed (--policy-exceptions=off does without)");
        Service::task("policy exceptions", task).opening(synced, "policy exception", async move {
            cache.wait_until_synced().await
        })
    }
}

/// Feeds `metrics`' excepted-requests counter from the Admission.
pub fn excepted_counter(metrics: &ExceptionMetrics) -> ExceptedCounter {
    let metrics = metrics.clone();
    Arc::new(move |excepted| metrics.count(excepted))
}
