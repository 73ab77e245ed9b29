//! Metrics of policy exceptions: `gpu_admission_exceptions{state}`, the
//! exceptions the cluster cache knows by state at its clock (worked out
//! at each scrape, so that one that expires moves from active to expired
//! with no event; `invalid` ones are unreadable, `over_bound` ones beyond
//! the cache's bounds), and `gpu_admission_excepted_requests_total{policy}`,
//! requests a policy would have denied or warned and an exception let
//! through. The policy label takes the loaded policies' names only.
use super::ClusterExceptions;
use crate::exceptions::Excepted;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::{Arc, OnceLock};

/// The states of `gpu_admission_exceptions`.
pub const STATES: [&str; 4] = ["active", "expired", "invalid", "over_bound"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

/// The exception metrics; cloning shares them.
#[derive(Clone, Debug, Default)]
pub struct ExceptionMetrics {
    excepted: Family<PolicyLabels, Counter>,
    cache: Arc<OnceLock<ClusterExceptions>>,
}

/// Writes `gpu_admission_exceptions` at scrape time.
#[derive(Debug)]
struct StateCollector {
    cache: Arc<OnceLock<ClusterExceptions>>,
}

impl ExceptionMetrics {
    /// Registers the families in `registry` (`Metrics::with_families`).
    /// The gauge reads 0 in every state until [`ExceptionMetrics::watch`]
    /// names the cache.
    pub fn register(registry: &mut Registry) -> ExceptionMetrics {
        let metrics = ExceptionMetrics::default();
        registry.register(
            "gpu_admission_excepted_requests",
            "Requests a policy would have denied or warned and a GpuPolicyException let through, by policy",
            metrics.excepted.clone(),
        );
        registry.register_collector(Box::new(StateCollector {
            cache: metrics.cache.clone(),
        }));
        metrics
    }

    /// The gauge reports `cache` from now on (the first cache named stays).
    pub fn watch(&self, cache: ClusterExceptions) {
        let _ = self.cache.set(cache);
    }

    /// Counts one answered request: each policy (once) whose denial or
    /// warning an exception turned. Audit-only results change no answer
    /// and are not counted.
    pub fn count(&self, excepted: &[Excepted]) {
        let mut counted: Vec<&Arc<str>> = Vec::new();
        for e in excepted {
            if e.action.eq_ignore_ascii_case("audit") || counted.contains(&&e.policy) {
                continue;
            }
            counted.push(&e.policy);
            self.excepted
                .get_or_create(&PolicyLabels {
                    policy: e.policy.clone(),
                })
                .inc();
        }
    }
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.cache.get().map(ClusterExceptions::counts);
        let counts = counts.unwrap_or_default();
        let mut family = encoder.encode_descriptor(
            "gpu_admission_exceptions",
            "GpuPolicyExceptions the server's cache knows, by state: active, expired (past expiresAt), invalid (unreadable), over_bound (beyond the cache's bounds, past their namespace's fair share); invalid and over_bound ones let nothing through",
            None,
            MetricType::Gauge,
        )?;
        for (state, n) in STATES.into_iter().zip([
            counts.active,
            counts.expired,
            counts.invalid,
            counts.over_bound,
        ]) {
            let gauge = ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
            gauge.encode(family.encode_family(&StateLabels { state })?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    fn excepted(policy: &str, action: &'static str) -> Excepted {
        Excepted {
            policy: Arc::from(policy),
            exception: "research/nccl-bench".into(),
            reason: "benchmark".into(),
            expires_at: None,
            message: format!("{policy}: no"),
            action,
        }
    }

    #[test]
    fn every_state_is_exported_from_the_start() {
        let mut registry = Registry::default();
        let _metrics = ExceptionMetrics::register(&mut registry);
        let out = text(&registry);
        for state in STATES {
            assert!(
                out.contains(&format!(
                    "gpu_admission_exceptions{{state=\"{state}\"}} 0\n"
                )),
                "{out}"
            );
        }
        assert!(
            out.contains("# TYPE gpu_admission_exceptions gauge"),
            "{out}"
        );
        // A policy's series appears with its first excepted request.
        assert!(
            !out.contains("gpu_admission_excepted_requests_total{"),
            "{out}"
        );
    }

    #[test]
    fn a_request_counts_once_per_policy_it_was_let_through() {
        let mut registry = Registry::default();
        let metrics = ExceptionMetrics::register(&mut registry);
        // A controller judged twice (itself and its template pod) by one
        // policy, a warning of another, and an audit that changed nothing.
        metrics.count(&[
            excepted("gpu-privileged", "Deny"),
            excepted("gpu-privileged", "Deny"),
            excepted("gpu-privileged-init", "Warn"),
            excepted("gpu-audit-only", "Audit"),
        ]);
        metrics.count(&[excepted("gpu-privileged", "Deny")]);
        let out = text(&registry);
        assert!(
            out.contains("gpu_admission_excepted_requests_total{policy=\"gpu-privileged\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains(
                "gpu_admission_excepted_requests_total{policy=\"gpu-privileged-init\"} 1\n"
            ),
            "{out}"
        );
        assert!(!out.contains("gpu-audit-only"), "{out}");
    }
}
