//! `serve`'s GpuBudgets: in a cluster with `--gpu-budgets=on`, the
//! default, a cache of the budgets and of the GPU pods, made before the
//! [`Admission`] that judges with it and watched once that exists (pods
//! are read with the catalog and GPU resources of the policies it serves
//! and its DRA claims cache, once that is listed, a bound pod charged by
//! its node's size as the node cache holds it, a pending one naming node
//! pools by their sizes).
use crate::admission::Admission;
use crate::budgets::{self, BudgetLookup};
use crate::cluster::budgets::metrics::BudgetMetrics;
use crate::cluster::budgets::{ClusterBudgets, PodReader};
use crate::cluster::watch::{CacheMetrics, Settings, Watched};
use crate::cluster::ClusterNodes;
use crate::daemon::Service;
use crate::k8s::NamespaceLookup;
use crate::server::{Gate, Readiness};
use std::sync::Arc;

pub struct PendingBudgets {
    cache: ClusterBudgets,
    client: kube::Client,
    nodes: Option<ClusterNodes>,
    claims: Vec<Watched>,
    gates: [Gate; 2],
    settings: Settings,
    metrics: CacheMetrics,
}

impl PendingBudgets {
    /// The cache, readiness waiting for the first list of budgets and of
    /// pods (so a restarted server counts what is held before it answers);
    /// team budgets (a namespaceSelector) are honoured in the server's
    /// own namespace. Pods bound to a node `nodes` holds are charged by
    /// its size (`None`: the node cache is off, by their selection); the
    /// pods are listed once `claims` (the watches of the DRA claims the
    /// Admission looks up) are.
    pub fn new(
        client: kube::Client,
        namespaces: Arc<dyn NamespaceLookup>,
        nodes: Option<ClusterNodes>,
        claims: Vec<Watched>,
        readiness: &Readiness,
        settings: Settings,
        metrics: &CacheMetrics,
    ) -> PendingBudgets {
        let own = crate::periodic::LeaseSettings::from_environment("").namespace;
        PendingBudgets {
            cache: ClusterBudgets::new(namespaces, &own),
            client,
            nodes,
            claims,
            gates: [
                readiness.gate("gpu budgets not synced"),
                readiness.gate("pods not synced"),
            ],
            settings,
            metrics: metrics.clone(),
        }
    }

    pub fn lookup(&self) -> Arc<dyn BudgetLookup> {
        Arc::new(self.cache.clone())
    }

    /// Starts both watches; `metrics` then reports the cache.
    pub fn start(self, admission: Arc<Admission>, metrics: &BudgetMetrics) -> [Service; 2] {
        metrics.watch(self.cache.clone());
        let read: PodReader = Arc::new(move |pod, landed| {
            let (bundle, claims) = (admission.bundle(), admission.claims());
            let (catalog, resources) =
                (bundle.placement.catalog(), bundle.placement.gpu_resources());
            // The node pools a pending pod names are sized as admission
            // sizes them, with the nodes it judges against.
            let snapshot = admission.nodes().nodes();
            let set = snapshot.as_ref().map(|s| s.gpu_nodes(resources, catalog));
            budgets::charge_landed(pod, landed, set.as_ref(), claims, catalog, resources)
        });
        let (client, nodes, claims) = (self.client, self.nodes, self.claims);
        let [budgets, pods] =
            (self.cache).watch(client, read, nodes, claims, self.settings, self.metrics);
        let [budgets_synced, pods_synced] = self.gates;
        tracing::info!("watching GpuBudgets and pods; ready once both are listed (--gpu-budgets=off does without)");
        [
            Service::task("gpu budgets", budgets.1).following(budgets_synced, budgets.0),
            Service::task("pods", pods.1).following(pods_synced, pods.0),
        ]
    }
}
