//! `serve`'s GpuPolicyExceptions: from the cluster (a watch cache) when
//! running in one with `--policy-exceptions=on`, the default; otherwise
//! from the policy folder only. Their metrics either way.
use crate::admission::{Admission, ExceptedCounter};
use crate::cluster::exceptions::metrics::ExceptionMetrics;
use crate::cluster::exceptions::{ClusterExceptions, Reader};
use crate::cluster::watch::{CacheMetrics, Settings};
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
    settings: Settings,
    metrics: CacheMetrics,
}

impl PendingExceptions {
    /// A cache of the cluster's GpuPolicyExceptions, readiness waiting for
    /// its first list (a cluster without the CRD, or that refuses the
    /// list, is not waited for).
    pub fn new(
        client: kube::Client,
        readiness: &Readiness,
        settings: Settings,
        metrics: CacheMetrics,
    ) -> PendingExceptions {
        PendingExceptions {
            cache: ClusterExceptions::waiting(),
            client,
            synced: readiness.gate("policy exceptions not synced"),
            settings,
            metrics,
        }
    }

    /// What the Admission looks exceptions up in.
    pub fn lookup(&self) -> Arc<dyn ExceptionLookup> {
        Arc::new(self.cache.clone())
    }

    /// Starts the watch, each exception read with the policy set
    /// `admission` serves at the time; `metrics` then reports the cache,
    /// and its readiness gate opens on its first list.
    pub fn start(self, admission: Arc<Admission>, metrics: &ExceptionMetrics) -> Service {
        let read: Reader =
            Arc::new(move |object| admission.bundle().policies.read_exception(object));
        let (watched, task) = self
            .cache
            .watch(self.client, read, self.settings, self.metrics);
        metrics.watch(self.cache);
        tracing::info!("watching GpuPolicyExceptions; ready once they are listed (--policy-exceptions=off does without)");
        Service::task("policy exceptions", task).following(self.synced, watched)
    }
}

/// Feeds `metrics`' excepted-requests counter from the Admission.
pub fn excepted_counter(metrics: &ExceptionMetrics) -> ExceptedCounter {
    let metrics = metrics.clone();
    Arc::new(move |excepted| metrics.count(excepted))
}
