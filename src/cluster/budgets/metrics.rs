//! `gpu_admission_budget_limit`, `_used` and `_pending`
//! `{namespace, budget, model}`: each limit of each GpuBudget the cache
//! holds, the GPUs held against it (pods bound or waiting for a node, and
//! pods admitted the watch has not shown yet) and, of those, the ones not
//! on a node yet; worked out at each scrape. `model` is a GPU model, a VM
//! size or `total`. Labels are bounded by the budgets (written by admins).
use super::ClusterBudgets;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::{Arc, OnceLock};

/// The budget gauges; cloning shares them.
#[derive(Clone, Default)]
pub struct BudgetMetrics {
    cache: Arc<OnceLock<ClusterBudgets>>,
}

impl std::fmt::Debug for BudgetMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BudgetMetrics")
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    namespace: String,
    budget: String,
    model: String,
}

impl BudgetMetrics {
    /// Registers the gauges (none until [`BudgetMetrics::watch`]).
    pub fn register(registry: &mut Registry) -> BudgetMetrics {
        let metrics = BudgetMetrics::default();
        registry.register_collector(Box::new(metrics.clone()));
        metrics
    }

    /// The gauges report `cache` from now on (the first cache named stays).
    pub fn watch(&self, cache: ClusterBudgets) {
        let _ = self.cache.set(cache);
    }
}

impl Collector for BudgetMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let limits = self.cache.get().map(ClusterBudgets::limits);
        let limits = limits.unwrap_or_default();
        let families = [
            ("gpu_admission_budget_limit", "GPUs a GpuBudget allows held at once, per limit (GPU model, VM size or total)"),
            ("gpu_admission_budget_used", "GPUs held against a GpuBudget's limit: pods bound or waiting for a node, and pods admitted the watch has not shown yet"),
            ("gpu_admission_budget_pending", "Of the GPUs held against a GpuBudget's limit, those of pods not on a node yet"),
        ];
        for (i, (name, help)) in families.into_iter().enumerate() {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for l in &limits {
                let labels = Labels {
                    namespace: l.namespace.clone(),
                    budget: l.budget.clone(),
                    model: l.model.clone(),
                };
                let value = [l.limit, l.held, l.pending][i];
                ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
