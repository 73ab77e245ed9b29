//! Prometheus metrics. Every label is a bounded set: endpoint and decision
//! are fixed words, kind is one of the kinds the webhook names
//! ([`super::Hints::metric_kinds`]) or `other`, policy and profile names
//! come from the loaded configuration. Never error text.
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;

use super::webhook::PolicyResult;

/// The `kind` label of a request of `kind`: itself when it is one of
/// `known` (the webhook's [`super::Hints::metric_kinds`]), else `other`.
pub(crate) fn kind_label(known: &[&'static str], kind: &str) -> &'static str {
    known
        .iter()
        .find(|k| **k == kind)
        .copied()
        .unwrap_or("other")
}

/// Label sets, each a struct with the derives every family's labels need.
/// A `policy` label is shared with the policy set: recording copies no
/// string. A `queue` is `memory` or `slot`.
macro_rules! label_sets {
    ($($name:ident { $($field:ident: $ty:ty),* })*) => {$(
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        struct $name { $($field: $ty),* }
    )*};
}

label_sets! {
    RequestLabels { endpoint: &'static str, kind: &'static str, operation: &'static str, decision: &'static str }
    EndpointLabels { endpoint: &'static str }
    DurationLabels { endpoint: &'static str, decision: &'static str }
    ListenerLabels { listener: &'static str }
    ClosedLabels { listener: &'static str, reason: &'static str }
    QueueLabels { endpoint: &'static str, queue: &'static str }
    RejectionLabels { endpoint: &'static str, reason: &'static str }
    PoolLabels { pool: &'static str }
    PolicyResultLabels { policy: Arc<str>, result: &'static str }
    PolicyLabels { policy: Arc<str> }
    ReloadLabels { result: &'static str }
    ProfileLabels { profile: String }
}

/// Each policy's series: its evaluations by result and the histogram of
/// their durations, found by the policy's name. An answer records every
/// policy it evaluated under one read lock, each found by one fast hash of
/// the name, where a [`Family`] per metric would take a lock and hash the
/// whole label set (`SipHash`, the name cloned) for each series: with
/// hundreds of policies a review, that was a seventh of what each one cost.
#[derive(Clone, Debug, Default)]
struct PolicySeries(Arc<std::sync::RwLock<PolicyMap>>);

type PolicyMap = std::collections::HashMap<Arc<str>, PolicyEntry, foldhash::fast::RandomState>;

/// One policy's series.
#[derive(Debug)]
struct PolicyEntry {
    /// A counter for each result word seen (a handful, in the order seen).
    results: Vec<(&'static str, Counter)>,
    duration: Histogram,
}

impl PolicyEntry {
    fn counter(&self, result: &str) -> Option<&Counter> {
        (self.results.iter())
            .find(|(r, _)| *r == result)
            .map(|(_, c)| c)
    }
}

impl PolicySeries {
    fn observe(&self, policies: &[PolicyResult]) {
        // A poisoned lock still holds whole counters: a panic elsewhere
        // must not stop the metrics.
        let mut rest = policies;
        while !rest.is_empty() {
            let series = self.0.read().unwrap_or_else(|e| e.into_inner());
            let recorded = rest.iter().take_while(|p| {
                let Some(entry) = series.get(&*p.policy) else {
                    return false;
                };
                let Some(counter) = entry.counter(p.result) else {
                    return false;
                };
                counter.inc();
                entry.duration.observe(p.duration.as_secs_f64());
                true
            });
            let done = recorded.count();
            drop(series);
            rest = &rest[done..];
            // A series not seen before: made under the write lock, then
            // recorded with the others.
            if let Some(first) = rest.first() {
                self.add(first);
            }
        }
    }

    fn add(&self, p: &PolicyResult) {
        let mut series = self.0.write().unwrap_or_else(|e| e.into_inner());
        let entry = (series.entry(p.policy.clone())).or_insert_with(|| PolicyEntry {
            results: Vec::new(),
            // 10 us .. ~2.6 s.
            duration: Histogram::new(exponential_buckets(0.00001, 4.0, 10)),
        });
        if entry.counter(p.result).is_none() {
            entry.results.push((p.result, Counter::default()));
        }
    }
}

/// `gpu_admission_policy_evaluations_total` by policy and result.
#[derive(Clone, Debug, Default)]
struct PolicyEvaluations(PolicySeries);

/// `gpu_admission_policy_evaluation_duration_seconds` by policy.
#[derive(Clone, Debug)]
struct PolicyDurations(PolicySeries);

impl EncodeMetric for PolicyEvaluations {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let series = (self.0).0.read().unwrap_or_else(|e| e.into_inner());
        for (policy, entry) in series.iter() {
            for (result, counter) in &entry.results {
                let labels = PolicyResultLabels {
                    policy: policy.clone(),
                    result,
                };
                counter.encode(encoder.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        Counter::<u64>::TYPE
    }

    fn is_empty(&self) -> bool {
        (self.0)
            .0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

impl EncodeMetric for PolicyDurations {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let series = (self.0).0.read().unwrap_or_else(|e| e.into_inner());
        for (policy, entry) in series.iter() {
            let labels = PolicyLabels {
                policy: policy.clone(),
            };
            entry.duration.encode(encoder.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        Histogram::TYPE
    }

    fn is_empty(&self) -> bool {
        (self.0)
            .0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

/// Results of re-reading the serving certificate files.
const CERTIFICATE_RELOAD_RESULTS: [&str; 3] = ["reloaded", "unchanged", "refused"];

/// Why a review is answered without evaluation.
const REJECTION_REASONS: [&str; 9] = [
    "too_large",
    "memory_wait",
    "slot_wait",
    "deadline",
    "overloaded",
    "error",
    "body_timeout",
    "body_memory",
    "client_share",
];

/// Why the server closes a connection.
const CLOSE_REASONS: [&str; 4] = ["header_timeout", "idle_timeout", "write_timeout", "evicted"];

/// A struct of metric families, each said once: its field, its type, how
/// it is made (by default, `Default::default()`), and the name and help it
/// is registered under. The struct's `register` makes every family and
/// registers it, in the order given.
macro_rules! families {
    (@make) => { Default::default() };
    (@make $make:expr) => { $make };
    ($(#[$meta:meta])* $vis:vis struct $name:ident {
        $($(#[$field_meta:meta])* $field:ident: $ty:ty $(= $make:expr)? => $metric:literal, $help:literal;)*
    }) => {
        $(#[$meta])*
        $vis struct $name {
            $($(#[$field_meta])* $field: $ty,)*
        }

        impl $name {
            /// Registers the families in `registry` (`Metrics::with_families`).
            $vis fn register(registry: &mut prometheus_client::registry::Registry) -> $name {
                $(
                    let $field: $ty = $crate::server::metrics::families!(@make $($make)?);
                    registry.register($metric, $help, $field.clone());
                )*
                $name { $($field,)* }
            }
        }
    };
}
pub(crate) use families;

/// A cheap, cloneable handle on the metrics registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    families: Arc<Families>,
}

families! {
    struct Families {
        requests: Family<RequestLabels, Counter>
            => "gpu_admission_requests",
            "Admission reviews answered, by endpoint, kind, operation and decision";
        // 0.5 ms .. ~8 s: admission answers are fast, the apiserver gives up at 30 s.
        request_duration: Family<DurationLabels, Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 15)))
            => "gpu_admission_request_duration_seconds",
            "Time from request received to answer, by endpoint and decision";
        policy_evaluations: PolicyEvaluations
            => "gpu_admission_policy_evaluations",
            "Policy binding evaluations, by policy and result (pass, deny, warn, error)";
        // The durations of the same series: registered, and recorded
        // through `policy_evaluations`.
        #[allow(dead_code)]
        policy_duration: PolicyDurations = PolicyDurations(policy_evaluations.0.clone())
            => "gpu_admission_policy_evaluation_duration_seconds",
            "Time to evaluate one policy binding, by policy";
        policies_loaded: Gauge
            => "gpu_admission_policies_loaded", "Policies in the active set";
        reload_failures: Counter
            => "gpu_admission_policy_reload_failures",
            "Policy folder reloads that failed (the last good set stays active)";
        mutations: Family<ProfileLabels, Counter>
            => "gpu_admission_mutations", "Objects patched, by placement profile";
        open_connections: Family<ListenerLabels, Gauge>
            => "gpu_admission_open_connections",
            "Connections open now, by listener (webhook, metrics)";
        connections_closed: Family<ClosedLabels, Counter>
            => "gpu_admission_connections_closed",
            "Connections the server closed, by listener and reason (header_timeout, idle_timeout, write_timeout: the peer stopped reading; evicted: closed idle to make room at the connection cap)";
        // Saturation: what requests wait for and what they are refused for.
        // 0.1 ms .. ~3.3 s.
        queue_wait: Family<QueueLabels, Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 16)))
            => "gpu_admission_queue_wait_seconds",
            "Time a request waited for in-flight memory (queue=memory) or an evaluation slot (queue=slot), by endpoint";
        rejections: Family<RejectionLabels, Counter>
            => "gpu_admission_rejected_requests",
            "Requests answered without evaluation, by endpoint and reason (too_large, memory_wait, slot_wait, deadline, overloaded, error, body_timeout, body_memory, client_share)";
        slots_in_use: Family<EndpointLabels, Gauge>
            => "gpu_admission_evaluation_slots_in_use",
            "Evaluation slots held, by endpoint (each endpoint has its own)";
        memory_reserved: Family<PoolLabels, Gauge>
            => "gpu_admission_memory_reserved_bytes",
            "In-flight memory reserved by requests, by pool (body: bodies being read; decoded: requests being answered)";
        certificate_expiry: Gauge
            => "gpu_admission_certificate_expiry_seconds",
            "Unix time at which the served certificate's notAfter is reached";
        certificate_reloads: Family<ReloadLabels, Counter>
            => "gpu_admission_certificate_reloads",
            "Times the serving certificate files were re-read, by result (reloaded, unchanged, refused: the current certificate stays)";
    }
}

impl Families {
    /// Makes every bounded series at 0, so that the first rejection shows
    /// in rate() and increase(), and dashboards and alerts find the series
    /// before anything went wrong.
    fn with_bounded_series(self) -> Families {
        for endpoint in ["mutate", "validate"] {
            let _ = self
                .slots_in_use
                .get_or_create(&EndpointLabels { endpoint });
            for reason in REJECTION_REASONS {
                let _ = (self.rejections).get_or_create(&RejectionLabels { endpoint, reason });
            }
        }
        for pool in ["body", "decoded"] {
            let _ = self.memory_reserved.get_or_create(&PoolLabels { pool });
        }
        for listener in ["webhook", "metrics", "health"] {
            for reason in CLOSE_REASONS {
                let _ = (self.connections_closed).get_or_create(&ClosedLabels { listener, reason });
            }
        }
        for result in CERTIFICATE_RELOAD_RESULTS {
            let _ = self
                .certificate_reloads
                .get_or_create(&ReloadLabels { result });
        }
        self
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::with_families(|_| {})
    }

    /// The server's metrics plus the families `register` adds: metrics of
    /// work the server hosts but knows nothing of, kept by their owner
    /// and exported on the same `/metrics`.
    pub fn with_families(register: impl FnOnce(&mut Registry)) -> Metrics {
        let mut registry = Registry::default();
        let families = Families::register(&mut registry).with_bounded_series();
        register(&mut registry);
        let (registry, families) = (Arc::new(registry), Arc::new(families));
        Metrics { registry, families }
    }

    /// Records how long a request waited in `queue` (`memory` or `slot`).
    pub fn observe_queue_wait(
        &self,
        endpoint: &'static str,
        queue: &'static str,
        waited: Duration,
    ) {
        self.families
            .queue_wait
            .get_or_create(&QueueLabels { endpoint, queue })
            .observe(waited.as_secs_f64());
    }

    /// Counts a request answered without evaluation, for `reason`.
    pub fn inc_rejections(&self, endpoint: &'static str, reason: &'static str) {
        self.families
            .rejections
            .get_or_create(&RejectionLabels { endpoint, reason })
            .inc();
    }

    pub(crate) fn add_slots_in_use(&self, endpoint: &'static str, delta: i64) {
        self.families
            .slots_in_use
            .get_or_create(&EndpointLabels { endpoint })
            .inc_by(delta);
    }

    pub(crate) fn add_memory_reserved(&self, pool: &'static str, delta: i64) {
        self.families
            .memory_reserved
            .get_or_create(&PoolLabels { pool })
            .inc_by(delta);
    }

    /// Sets the number of policies in the active set.
    pub fn set_policies_loaded(&self, n: usize) {
        self.families
            .policies_loaded
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Counts a policy reload that failed.
    pub fn inc_reload_failures(&self) {
        self.families.reload_failures.inc();
    }

    /// Sets when the served certificate expires.
    pub fn set_certificate_expiry(&self, not_after: std::time::SystemTime) {
        let secs = not_after
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.families.certificate_expiry.set(secs);
    }

    /// Counts one re-reading of the certificate files, by `result` (one of
    /// [`CERTIFICATE_RELOAD_RESULTS`]).
    pub fn inc_certificate_reloads(&self, result: &'static str) {
        self.families
            .certificate_reloads
            .get_or_create(&ReloadLabels { result })
            .inc();
    }

    /// Records one answered request.
    pub fn observe_request(
        &self,
        endpoint: &'static str,
        kind: &'static str,
        operation: &'static str,
        decision: &'static str,
        elapsed: Duration,
    ) {
        self.families
            .requests
            .get_or_create(&RequestLabels {
                endpoint,
                kind,
                operation,
                decision,
            })
            .inc();
        self.families
            .request_duration
            .get_or_create(&DurationLabels { endpoint, decision })
            .observe(elapsed.as_secs_f64());
    }

    /// Records the policy evaluations behind one answer.
    pub fn observe_policies(&self, policies: &[PolicyResult]) {
        self.families.policy_evaluations.0.observe(policies);
    }

    /// Counts an object patched by `profile`.
    pub fn inc_mutations(&self, profile: &str) {
        self.families
            .mutations
            .get_or_create(&ProfileLabels {
                profile: profile.to_string(),
            })
            .inc();
    }

    /// Adds `delta` to the open connections of `listener`.
    pub fn add_open_connections(&self, listener: &'static str, delta: i64) {
        self.families
            .open_connections
            .get_or_create(&ListenerLabels { listener })
            .inc_by(delta);
    }

    /// Counts a connection of `listener` closed for `reason` (a timeout).
    pub fn inc_connections_closed(&self, listener: &'static str, reason: &'static str) {
        self.families
            .connections_closed
            .get_or_create(&ClosedLabels { listener, reason })
            .inc();
    }

    /// The registry in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_kinds_share_one_label() {
        let known = &["Pod", "NodePool"];
        assert_eq!(kind_label(known, "Pod"), "Pod");
        assert_eq!(kind_label(known, "NodePool"), "NodePool");
        assert_eq!(kind_label(known, "Secret"), "other");
        assert_eq!(kind_label(known, "pod"), "other");
        assert_eq!(kind_label(&[], "Pod"), "other");
    }

    /// Each set of metrics counts its own evaluations, and a policy's name
    /// spelled again (a reload) counts into the same series.
    #[test]
    fn policy_metrics_count_where_they_belong() {
        let evaluation = |policy: &Arc<str>, result| PolicyResult {
            policy: policy.clone(),
            result,
            duration: Duration::from_micros(30),
        };
        let line = |m: &Metrics, policy: &str, result: &str, n: u64| {
            let wanted = format!(
                r#"gpu_admission_policy_evaluations_total{{policy="{policy}",result="{result}"}} {n}"#
            );
            let text = m.encode();
            assert!(text.contains(&wanted), "missing {wanted} in\n{text}");
        };
        let name: Arc<str> = "gpu-limits".into();
        let (a, b) = (Metrics::new(), Metrics::new());
        a.observe_policies(&[evaluation(&name, "pass"), evaluation(&name, "deny")]);
        a.observe_policies(&[evaluation(&name, "pass")]);
        b.observe_policies(&[evaluation(&name, "error")]);
        a.observe_policies(&[evaluation(&"gpu-limits".into(), "pass")]);
        line(&a, "gpu-limits", "pass", 3);
        line(&a, "gpu-limits", "deny", 1);
        line(&b, "gpu-limits", "error", 1);
        assert!(!b.encode().contains(r#"result="pass""#));
        assert!(a.encode().contains(
            r#"gpu_admission_policy_evaluation_duration_seconds_count{policy="gpu-limits"} 4"#
        ));
    }

    /// The policy series encode as prometheus-client's families of the
    /// same labels would, whatever order answers bring new policies and
    /// results in.
    #[test]
    fn policy_series_encode_as_families_would() {
        let evaluation = |policy: &str, result, micros| PolicyResult {
            policy: policy.into(),
            result,
            duration: Duration::from_micros(micros),
        };
        let answers = [
            vec![evaluation("gpu-limits", "pass", 30)],
            vec![
                evaluation("gpu-limits", "pass", 12),
                evaluation("gpu-limits", "deny", 900),
                evaluation("gpu-limits", "warn", 7),
            ],
            vec![evaluation("gpu-limits", "deny", 40_000)],
        ];
        let m = Metrics::new();
        for answer in &answers {
            m.observe_policies(answer);
        }
        let mut registry = Registry::default();
        let counters = Family::<PolicyResultLabels, Counter>::default();
        let durations = Family::<PolicyLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.00001, 4.0, 10))
        });
        registry.register(
            "gpu_admission_policy_evaluations",
            "Policy binding evaluations, by policy and result (pass, deny, warn, error)",
            counters.clone(),
        );
        registry.register(
            "gpu_admission_policy_evaluation_duration_seconds",
            "Time to evaluate one policy binding, by policy",
            durations.clone(),
        );
        for p in answers.iter().flatten() {
            let policy = p.policy.clone();
            let labels = PolicyResultLabels {
                policy: policy.clone(),
                result: p.result,
            };
            counters.get_or_create(&labels).inc();
            let labels = PolicyLabels { policy };
            (durations.get_or_create(&labels)).observe(p.duration.as_secs_f64());
        }
        let mut expected = String::new();
        prometheus_client::encoding::text::encode_registry(&mut expected, &registry).unwrap();
        // One family's lines (HELP, TYPE, its series), in order within a
        // series, the series in any order.
        let family = |text: &str, name: &str| {
            let mut lines: Vec<String> = (text.lines())
                .filter(|l| {
                    let metric = l
                        .trim_start_matches("# HELP ")
                        .trim_start_matches("# TYPE ");
                    metric.starts_with(name)
                        && !metric[name.len()..].starts_with(|c: char| c.is_alphanumeric())
                })
                .map(str::to_string)
                .collect();
            lines.sort();
            lines
        };
        let text = m.encode();
        for name in [
            "gpu_admission_policy_evaluations",
            "gpu_admission_policy_evaluation_duration_seconds",
        ] {
            let wanted = family(&expected, name);
            assert!(wanted.len() > 3, "{name} in\n{expected}");
            assert_eq!(family(&text, name), wanted, "{name}");
        }
    }

    #[test]
    fn encodes_every_family() {
        let m = Metrics::new();
        m.observe_request(
            "validate",
            "Pod",
            "CREATE",
            "denied",
            Duration::from_millis(2),
        );
        m.observe_policies(&[PolicyResult {
            policy: "gpu-limits".into(),
            result: "deny",
            duration: Duration::from_micros(30),
        }]);
        m.inc_mutations("aks-gpu");
        m.set_policies_loaded(7);
        m.inc_reload_failures();
        m.add_open_connections("webhook", 2);
        m.add_open_connections("webhook", -1);
        m.inc_connections_closed("webhook", "header_timeout");
        m.set_certificate_expiry(std::time::UNIX_EPOCH + Duration::from_secs(1_795_000_000));
        m.inc_certificate_reloads("refused");
        let text = m.encode();
        for line in [
            r#"gpu_admission_requests_total{endpoint="validate",kind="Pod",operation="CREATE",decision="denied"} 1"#,
            r#"gpu_admission_request_duration_seconds_count{endpoint="validate",decision="denied"} 1"#,
            r#"gpu_admission_policy_evaluations_total{policy="gpu-limits",result="deny"} 1"#,
            r#"gpu_admission_policy_evaluation_duration_seconds_count{policy="gpu-limits"} 1"#,
            "gpu_admission_policies_loaded 7",
            "gpu_admission_policy_reload_failures_total 1",
            r#"gpu_admission_mutations_total{profile="aks-gpu"} 1"#,
            r#"gpu_admission_open_connections{listener="webhook"} 1"#,
            r#"gpu_admission_connections_closed_total{listener="webhook",reason="header_timeout"} 1"#,
            "gpu_admission_certificate_expiry_seconds 1795000000",
            r#"gpu_admission_certificate_reloads_total{result="refused"} 1"#,
            r#"gpu_admission_certificate_reloads_total{result="reloaded"} 0"#,
            r#"gpu_admission_rejected_requests_total{endpoint="mutate",reason="deadline"} 0"#,
            r#"gpu_admission_connections_closed_total{listener="metrics",reason="idle_timeout"} 0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
