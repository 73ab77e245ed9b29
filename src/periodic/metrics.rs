//! The `gpu_admission_audit_*` metrics: the last report's totals per
//! policy and namespace, with the namespace label bounded; GPUs held and
//! requested, per namespace, GPU pools, findings on nodes, and costs. GPU figures follow
//! the report's one definition ([`crate::audit::holding`]).
use crate::audit::Report;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::time::SystemTime;

use super::RunMeta;

/// Namespaces that get their own label value in the audit metrics (those
/// with the most GPUs held by violations, then the most violations); the
/// rest are summed under [`OTHER_NAMESPACES`].
pub const TOP_NAMESPACES: usize = 20;
/// The namespace label of namespaces beyond the top ones. Not a valid
/// namespace name, so it never collides with one.
pub const OTHER_NAMESPACES: &str = "_other";
/// The namespace label of cluster-scoped objects (NodePools, ...).
pub const CLUSTER_SCOPE: &str = "_cluster";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ViolationLabels {
    policy: String,
    namespace: String,
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HeldLabels {
    policy: String,
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabels {
    namespace: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceCostLabels {
    namespace: String,
    waste: &'static str,
    currency: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
    size: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HolderLabels {
    namespace: String,
    owner: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CostLabels {
    waste: &'static str,
    currency: String,
}

crate::server::metrics::families! {
    /// The `gpu_admission_audit_*` families.
    #[derive(Clone, Default)]
    pub struct AuditMetrics {
        violations: Family<ViolationLabels, Gauge>
            => "gpu_admission_audit_violations",
            "Objects in the cluster violating a policy at the last audit, by policy, namespace (top namespaces, the rest as _other; _cluster for cluster-scoped objects) and action (deny, warn, audit)";
        excepted: Family<PolicyLabels, Gauge>
            => "gpu_admission_audit_excepted",
            "Policy results on objects in the cluster that a GpuPolicyException let through at the last audit (not counted as violations), by policy";
        gpus_held: Family<HeldLabels, Gauge>
            => "gpu_admission_audit_gpus_held",
            "GPUs held (pods bound to a node and not finished) by objects violating a policy at the last audit, by policy and namespace";
        gpus_pending: Family<HeldLabels, Gauge>
            => "gpu_admission_audit_gpus_pending",
            "GPUs requested and not placed (pods not bound to a node, or not created yet) by objects violating a policy at the last audit, by policy and namespace";
        gpus: Family<StateLabels, Gauge>
            => "gpu_admission_audit_gpus",
            "GPUs of every workload read at the last audit, by state: held (pods bound to a node and not finished) or pending (requested, not placed)";
        namespace_gpus: Family<NamespaceLabels, Gauge>
            => "gpu_admission_audit_namespace_gpus",
            "GPUs of the workloads of each namespace at the last audit (the top namespaces by GPUs held, the rest as _other), by state: held, pending (requested, not placed), in_violation (held by violating workloads) or idle (held by idle pods; only when utilization was measured)";
        namespace_gpu_seconds: Family<NamespaceLabels, Gauge<f64, AtomicU64>>
            => "gpu_admission_audit_namespace_gpu_seconds",
            "GPU-seconds of each namespace's pods with a utilization series within the utilization window at the last audit (namespaces as gpu_admission_audit_namespace_gpus), by state: allocated (held) or used (allocated times mean SM, else engine, activity); only when utilization was measured";
        class_gpu_seconds: Family<ClassLabels, Gauge<f64, AtomicU64>>
            => "gpu_admission_audit_class_gpu_seconds",
            "GPU-seconds of the pods with a utilization series within the utilization window at the last audit, by workload class (training, inference, notebook, other) and state (allocated, used); only when utilization was measured";
        namespace_cost: Family<NamespaceCostLabels, Gauge<f64, AtomicU64>>
            => "gpu_admission_audit_namespace_cost_per_day",
            "What the waste of each namespace costs per day at the report's prices (--report-prices), by namespace (as gpu_admission_audit_namespace_gpus), waste (violations; idle_pods, only when utilization was measured) and currency";
        pool_gpus: Family<PoolLabels, Gauge>
            => "gpu_admission_audit_pool_gpus",
            "GPUs of the GPU nodes at the last audit, by pool, size and state: allocatable, requested (by pods bound there), idle, or unusable (reported unhealthy)";
        node_findings: Family<RuleLabels, Gauge>
            => "gpu_admission_audit_node_findings",
            "Findings on GPU nodes at the last audit, by rule (gpu-node-untainted, gpu-node-retired-size, gpu-node-unsupported-size, gpu-node-idle, gpu-node-unhealthy)";
        cost: Family<CostLabels, Gauge<f64, AtomicU64>>
            => "gpu_admission_audit_cost_per_day",
            "What the waste found at the last audit costs per day at the report's prices (--report-prices), by waste (violations: GPUs held by violating workloads; idle_nodes: idle GPUs of GPU nodes; idle_pods: GPUs of idle pods, only when utilization was measured; unusable_nodes: GPUs of GPU nodes reported unhealthy) and currency";
        report_conflicts: Family<HolderLabels, Gauge>
            => "gpu_admission_audit_report_conflicts",
            "1 for each namespace whose policy report name (gpu-admission) another owner holds at the last write, by namespace and that owner: the namespace's findings reach no report there";
        objects: Gauge
            => "gpu_admission_audit_objects",
            "Objects read by the last audit";
        evaluated: Gauge
            => "gpu_admission_audit_objects_evaluated",
            "Objects judged by the last audit (others are judged through their controller)";
        last_run: Gauge
            => "gpu_admission_audit_last_run_timestamp_seconds",
            "Unix time the last successful audit finished (0: none yet)";
        duration: Gauge<f64, AtomicU64>
            => "gpu_admission_audit_run_duration_seconds",
            "How long the last successful audit took";
        errors: Counter
            => "gpu_admission_audit_run_errors",
            "Audits that failed (listing the cluster or the lease); the last report stays served";
        leader: Gauge
            => "gpu_admission_audit_leader",
            "1 when this replica holds the report Lease and runs the audit, else 0";
    }
}

impl AuditMetrics {
    /// Sets the gauges from `report`.
    pub fn record(&self, report: &Report, meta: &RunMeta) {
        let (violations, held) = audit_series(report, TOP_NAMESPACES);
        self.clear();
        for ((policy, namespace, action), n) in violations {
            self.violations
                .get_or_create(&ViolationLabels {
                    policy,
                    namespace,
                    action,
                })
                .set(n);
        }
        let mut excepted: BTreeMap<&str, i64> = BTreeMap::new();
        for e in &report.excepted {
            *excepted.entry(e.policy.as_str()).or_default() += 1;
        }
        for (policy, n) in excepted {
            let labels = PolicyLabels {
                policy: policy.to_string(),
            };
            self.excepted.get_or_create(&labels).set(n);
        }
        for ((policy, namespace), (held, pending)) in held {
            let labels = HeldLabels { policy, namespace };
            self.gpus_held.get_or_create(&labels).set(held);
            self.gpus_pending.get_or_create(&labels).set(pending);
        }
        for (state, n) in [("held", report.gpus_held), ("pending", report.gpus_pending)] {
            self.gpus.get_or_create(&StateLabels { state }).set(n);
        }
        let (gpus, costs, seconds) = namespace_series(report, TOP_NAMESPACES);
        for ((namespace, state), n) in gpus {
            let labels = NamespaceLabels { namespace, state };
            self.namespace_gpus.get_or_create(&labels).set(n);
        }
        for ((namespace, state), n) in seconds {
            let labels = NamespaceLabels { namespace, state };
            self.namespace_gpu_seconds.get_or_create(&labels).set(n);
        }
        let measured = report
            .utilization
            .as_ref()
            .and_then(|u| u.measured.as_ref());
        for (class, e) in measured.iter().flat_map(|m| &m.by_class) {
            for (state, n) in [
                ("allocated", e.gpu_seconds_allocated),
                ("used", e.gpu_seconds_used),
            ] {
                let labels = ClassLabels { class, state };
                self.class_gpu_seconds.get_or_create(&labels).set(n);
            }
        }
        let currency = report.money.as_ref().map(|m| m.currency.as_str());
        for ((namespace, waste), per_day) in costs {
            let labels = NamespaceCostLabels {
                namespace,
                waste,
                currency: currency.unwrap_or_default().to_string(),
            };
            self.namespace_cost.get_or_create(&labels).set(per_day);
        }
        if let Some(nodes) = &report.nodes {
            for p in &nodes.pools {
                for (state, n) in [
                    ("allocatable", p.gpus_allocatable),
                    ("requested", p.gpus_requested),
                    ("idle", p.gpus_idle),
                    ("unusable", p.gpus_unusable),
                ] {
                    let labels = PoolLabels {
                        pool: p.pool.clone(),
                        size: p.size.clone(),
                        state,
                    };
                    self.pool_gpus.get_or_create(&labels).set(n);
                }
            }
            for rule in [
                crate::audit::nodes::UNTAINTED,
                crate::audit::nodes::RETIRED_SIZE,
                crate::audit::nodes::UNSUPPORTED_SIZE,
                crate::audit::nodes::IDLE,
                crate::audit::nodes::UNHEALTHY,
            ] {
                let n = nodes.findings.iter().filter(|f| f.rule == rule).count();
                self.node_findings
                    .get_or_create(&RuleLabels { rule })
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        if let Some(money) = &report.money {
            for (waste, per_day) in [
                ("violations", Some(money.violations_per_day)),
                ("idle_nodes", Some(money.idle_nodes_per_day)),
                ("idle_pods", money.idle_pods_per_day),
                ("unusable_nodes", Some(money.unusable_nodes_per_day)),
            ] {
                let Some(per_day) = per_day else { continue };
                let labels = CostLabels {
                    waste,
                    currency: money.currency.clone(),
                };
                self.cost.get_or_create(&labels).set(per_day);
            }
        }
        self.objects
            .set(i64::try_from(report.objects).unwrap_or(i64::MAX));
        self.evaluated
            .set(i64::try_from(report.evaluated).unwrap_or(i64::MAX));
        let finished = (meta.generated_at + meta.duration)
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.last_run.set(finished);
        self.duration.set(meta.duration.as_secs_f64());
    }

    /// Drops the per-policy series: a replica that does not lead exports
    /// none, so sums across replicas count each violation once.
    pub fn clear(&self) {
        self.violations.clear();
        self.excepted.clear();
        self.gpus_held.clear();
        self.gpus_pending.clear();
        self.gpus.clear();
        self.namespace_gpus.clear();
        self.namespace_gpu_seconds.clear();
        self.class_gpu_seconds.clear();
        self.namespace_cost.clear();
        self.pool_gpus.clear();
        self.node_findings.clear();
        self.cost.clear();
        self.report_conflicts.clear();
    }

    /// Sets the namespaces whose report name another owner holds, with
    /// that owner.
    pub fn set_report_conflicts(&self, held: &BTreeMap<String, String>) {
        self.report_conflicts.clear();
        for (namespace, owner) in held {
            let labels = HolderLabels {
                namespace: namespace.clone(),
                owner: owner.clone(),
            };
            self.report_conflicts.get_or_create(&labels).set(1);
        }
    }

    pub fn inc_errors(&self) {
        self.errors.inc();
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }
}

type ViolationSeries = BTreeMap<(String, String, &'static str), i64>;
/// (held, pending) GPUs per (policy, namespace).
type HeldSeries = BTreeMap<(String, String), (i64, i64)>;

/// The report's totals per (policy, namespace, action) and GPUs per
/// (policy, namespace), with namespaces beyond the `top` ones (by GPUs
/// held, then violations, then name) summed as [`OTHER_NAMESPACES`].
fn audit_series(report: &Report, top: usize) -> (ViolationSeries, HeldSeries) {
    let label = |ns: &Option<String>| match ns.as_deref() {
        None | Some("") => CLUSTER_SCOPE.to_string(),
        Some(ns) => ns.to_string(),
    };
    let mut weight: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for f in &report.findings {
        let w = weight.entry(label(&f.namespace)).or_default();
        w.0 = w.0.saturating_add(f.gpus);
        w.1 += 1;
    }
    let bucket = top_labels(weight, top);
    let mut violations = ViolationSeries::new();
    let mut held = HeldSeries::new();
    for f in &report.findings {
        let ns = bucket(label(&f.namespace));
        *violations
            .entry((f.policy.clone(), ns.clone(), f.action))
            .or_default() += 1;
        let gpus = held.entry((f.policy.clone(), ns)).or_default();
        gpus.0 = gpus.0.saturating_add(f.gpus);
        gpus.1 = gpus.1.saturating_add(f.gpus_pending);
    }
    (violations, held)
}

/// The label of a namespace label: its own for cluster scope and the
/// `top` ones of `weight` (heaviest, then by name), else
/// [`OTHER_NAMESPACES`].
fn top_labels(weight: BTreeMap<String, (i64, i64)>, top: usize) -> impl Fn(String) -> String {
    let mut ranked: Vec<(String, (i64, i64))> = weight
        .into_iter()
        .filter(|(ns, _)| ns != CLUSTER_SCOPE)
        .collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let kept: HashSet<String> = ranked.into_iter().take(top).map(|(ns, _)| ns).collect();
    move |ns: String| {
        if ns == CLUSTER_SCOPE || kept.contains(&ns) {
            ns
        } else {
            OTHER_NAMESPACES.to_string()
        }
    }
}

/// GPUs per (namespace, state), costs per day per (namespace, waste) and
/// GPU-seconds per (namespace, state).
type NamespaceSeries = (
    BTreeMap<(String, &'static str), i64>,
    BTreeMap<(String, &'static str), f64>,
    BTreeMap<(String, &'static str), f64>,
);

/// The series of the report's namespace rows, namespaces beyond the `top`
/// ones (by GPUs held, then requested) summed as [`OTHER_NAMESPACES`];
/// idle GPUs, GPU-seconds and costs only where measured and priced.
fn namespace_series(report: &Report, top: usize) -> NamespaceSeries {
    let weight = (report.namespaces.iter())
        .map(|(ns, r)| (ns.clone(), (r.gpus_held, r.gpus_pending)))
        .collect();
    let bucket = top_labels(weight, top);
    let (mut gpus, mut costs, mut seconds) = NamespaceSeries::default();
    for (ns, r) in &report.namespaces {
        let ns = bucket(ns.clone());
        for (state, n) in [
            ("held", Some(r.gpus_held)),
            ("pending", Some(r.gpus_pending)),
            ("in_violation", Some(r.gpus_in_violation)),
            ("idle", r.gpus_idle),
        ] {
            if let Some(n) = n {
                *gpus.entry((ns.clone(), state)).or_default() += n;
            }
        }
        for (waste, per_day) in [
            ("violations", r.violations_per_day),
            ("idle_pods", r.idle_pods_per_day),
        ] {
            if let Some(per_day) = per_day {
                *costs.entry((ns.clone(), waste)).or_default() += per_day;
            }
        }
        for (state, n) in [
            ("allocated", r.gpu_seconds_allocated),
            ("used", r.gpu_seconds_used),
        ] {
            if let Some(n) = n {
                *seconds.entry((ns.clone(), state)).or_default() += n;
            }
        }
    }
    (gpus, costs, seconds)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::audit::Finding;
    use prometheus_client::registry::Registry;
    use std::time::Duration;

    pub(crate) fn finding(
        policy: &str,
        namespace: Option<&str>,
        action: &'static str,
        gpus: i64,
    ) -> Finding {
        Finding {
            policy: policy.into(),
            action,
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: namespace.map(str::to_string),
            name: "p".into(),
            uid: None,
            message: "m".into(),
            gpus,
            gpus_pending: 0,
        }
    }

    #[test]
    fn namespaces_beyond_the_top_ones_share_one_label() {
        let mut report = Report::default();
        for i in 0..5 {
            let ns = format!("team-{i}");
            for _ in 0..=i {
                report
                    .findings
                    .push(finding("gpu-privileged", Some(&ns), "deny", 2));
            }
        }
        report
            .findings
            .push(finding("gpu-nodepool", None, "warn", 8));
        let (violations, held) = audit_series(&report, 2);
        let namespaces: HashSet<&str> = violations.keys().map(|k| k.1.as_str()).collect();
        assert_eq!(
            namespaces,
            HashSet::from(["team-4", "team-3", OTHER_NAMESPACES, CLUSTER_SCOPE])
        );
        assert_eq!(
            violations[&("gpu-privileged".into(), OTHER_NAMESPACES.into(), "deny")],
            1 + 2 + 3
        );
        assert_eq!(held[&("gpu-privileged".into(), "team-4".into())], (10, 0));
        assert_eq!(
            held[&("gpu-privileged".into(), OTHER_NAMESPACES.into())],
            (12, 0)
        );
        assert_eq!(held[&("gpu-nodepool".into(), CLUSTER_SCOPE.into())], (8, 0));
    }

    /// Namespaces beyond the top ones by GPUs held share `_other`; idle
    /// GPUs and costs are exported only where measured and priced.
    #[test]
    fn namespace_gpus_share_the_top_namespace_cap() {
        let mut report = Report::default();
        for i in 0..5 {
            let row = crate::audit::NamespaceRow {
                gpus_held: i,
                gpus_pending: 1,
                gpus_in_violation: i / 2,
                ..Default::default()
            };
            report.namespaces.insert(format!("team-{i}"), row);
        }
        let (gpus, costs, seconds) = namespace_series(&report, 2);
        let at = |ns: &str, state| gpus.get(&(ns.to_string(), state)).copied();
        assert_eq!(at("team-4", "held"), Some(4));
        assert_eq!(at("team-3", "in_violation"), Some(1));
        assert_eq!(at(OTHER_NAMESPACES, "held"), Some(2 + 1));
        assert_eq!(at(OTHER_NAMESPACES, "pending"), Some(3));
        assert_eq!(at("team-2", "held"), None);
        assert_eq!(at("team-4", "idle"), None, "not measured: no series");
        assert!(costs.is_empty(), "not priced: no series");
        assert!(seconds.is_empty(), "not measured: no series");
    }

    #[test]
    fn the_gauges_follow_the_last_report_and_a_follower_exports_none() {
        let mut registry = Registry::default();
        let metrics = AuditMetrics::register(&mut registry);
        let encode = |registry: &Registry| {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
            out
        };
        let mut report = Report {
            objects: 7,
            evaluated: 5,
            gpus_held: 6,
            gpus_pending: 3,
            nodes: Some(crate::audit::NodeReport {
                pools: vec![crate::audit::nodes::PoolRow {
                    pool: "a100".into(),
                    size: "Standard_NC24ads_A100_v4".into(),
                    gpu_nodes: 2,
                    gpus_allocatable: 2,
                    gpus_requested: 1,
                    gpus_idle: 1,
                    gpus_unusable: 3,
                    untainted_nodes: 1,
                }],
                findings: vec![crate::audit::nodes::NodeFinding {
                    rule: crate::audit::nodes::IDLE,
                    node: "n".into(),
                    pool: "a100".into(),
                    size: "Standard_NC24ads_A100_v4".into(),
                    gpus: 1,
                    message: "idle".into(),
                }],
                ..Default::default()
            }),
            money: Some(crate::audit::Money {
                currency: "USD".into(),
                violations_per_day: 352.5,
                idle_nodes_per_day: 88.25,
                idle_pods_per_day: Some(20.5),
                unusable_nodes_per_day: 705.5,
                ..Default::default()
            }),
            namespaces: [(
                "ml".to_string(),
                crate::audit::NamespaceRow {
                    gpus_held: 5,
                    gpus_pending: 2,
                    gpus_in_violation: 4,
                    gpus_idle: Some(1),
                    gpu_seconds_allocated: Some(7200.0),
                    gpu_seconds_used: Some(1800.0),
                    violations_per_day: Some(352.5),
                    idle_pods_per_day: Some(20.5),
                },
            )]
            .into(),
            ..Report::default()
        };
        let mut training = crate::audit::utilization::Efficiency::default();
        (training.gpu_seconds_allocated, training.gpu_seconds_used) = (7200.0, 1800.0);
        report.utilization = Some(crate::audit::utilization::Utilization {
            source: "file answer.json".into(),
            window: "1h".into(),
            window_seconds: 3600,
            threshold_percent: 5.0,
            sizing: crate::audit::utilization::sizing::DEFAULT_RULES,
            missing: None,
            measured: Some(crate::audit::utilization::Measured {
                by_class: [("training", training)].into(),
                ..Default::default()
            }),
        });
        let mut pending = finding("gpu-privileged", Some("ml"), "deny", 4);
        pending.gpus_pending = 2;
        report.findings.push(pending);
        // Let through by an exception: counted apart, not a violation.
        for name in ["nccl-bench-0", "nccl-bench-1"] {
            report.excepted.push(crate::audit::ExceptedFinding {
                policy: "gpu-privileged".into(),
                action: "deny",
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: Some("research".into()),
                name: name.into(),
                message: "m".into(),
                exception: "research/nccl-bench".into(),
                reason: "benchmark".into(),
                expires_at: None,
                gpus: 8,
            });
        }
        let meta = RunMeta {
            generated_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            duration: Duration::from_millis(2_500),
            about: crate::periodic::tests::about(),
        };
        metrics.record(&report, &meta);
        metrics.set_leader(true);
        let text = encode(&registry);
        for line in [
            r#"gpu_admission_audit_violations{policy="gpu-privileged",namespace="ml",action="deny"} 1"#,
            r#"gpu_admission_audit_gpus_held{policy="gpu-privileged",namespace="ml"} 4"#,
            r#"gpu_admission_audit_excepted{policy="gpu-privileged"} 2"#,
            r#"gpu_admission_audit_gpus_pending{policy="gpu-privileged",namespace="ml"} 2"#,
            r#"gpu_admission_audit_gpus{state="held"} 6"#,
            r#"gpu_admission_audit_gpus{state="pending"} 3"#,
            r#"gpu_admission_audit_pool_gpus{pool="a100",size="Standard_NC24ads_A100_v4",state="idle"} 1"#,
            r#"gpu_admission_audit_pool_gpus{pool="a100",size="Standard_NC24ads_A100_v4",state="allocatable"} 2"#,
            r#"gpu_admission_audit_pool_gpus{pool="a100",size="Standard_NC24ads_A100_v4",state="unusable"} 3"#,
            r#"gpu_admission_audit_node_findings{rule="gpu-node-idle"} 1"#,
            r#"gpu_admission_audit_node_findings{rule="gpu-node-unhealthy"} 0"#,
            r#"gpu_admission_audit_node_findings{rule="gpu-node-untainted"} 0"#,
            r#"gpu_admission_audit_cost_per_day{waste="violations",currency="USD"} 352.5"#,
            r#"gpu_admission_audit_cost_per_day{waste="idle_nodes",currency="USD"} 88.25"#,
            r#"gpu_admission_audit_cost_per_day{waste="idle_pods",currency="USD"} 20.5"#,
            r#"gpu_admission_audit_namespace_gpus{namespace="ml",state="held"} 5"#,
            r#"gpu_admission_audit_namespace_gpus{namespace="ml",state="pending"} 2"#,
            r#"gpu_admission_audit_namespace_gpus{namespace="ml",state="in_violation"} 4"#,
            r#"gpu_admission_audit_namespace_gpus{namespace="ml",state="idle"} 1"#,
            r#"gpu_admission_audit_namespace_gpu_seconds{namespace="ml",state="allocated"} 7200.0"#,
            r#"gpu_admission_audit_namespace_gpu_seconds{namespace="ml",state="used"} 1800.0"#,
            r#"gpu_admission_audit_class_gpu_seconds{class="training",state="allocated"} 7200.0"#,
            r#"gpu_admission_audit_class_gpu_seconds{class="training",state="used"} 1800.0"#,
            r#"gpu_admission_audit_namespace_cost_per_day{namespace="ml",waste="violations",currency="USD"} 352.5"#,
            r#"gpu_admission_audit_namespace_cost_per_day{namespace="ml",waste="idle_pods",currency="USD"} 20.5"#,
            r#"gpu_admission_audit_cost_per_day{waste="unusable_nodes",currency="USD"} 705.5"#,
            "gpu_admission_audit_objects 7",
            "gpu_admission_audit_objects_evaluated 5",
            "gpu_admission_audit_last_run_timestamp_seconds 1800000002",
            "gpu_admission_audit_run_duration_seconds 2.5",
            "gpu_admission_audit_run_errors_total 0",
            "gpu_admission_audit_leader 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(!text.contains(r#"namespace="research""#), "{text}");
        // The next report has no finding in "ml": its series goes.
        metrics.record(&Report::default(), &meta);
        assert!(!encode(&registry).contains(r#"namespace="ml""#));
        metrics.record(&report, &meta);
        metrics.clear();
        metrics.set_leader(false);
        metrics.inc_errors();
        let text = encode(&registry);
        assert!(!text.contains("gpu_admission_audit_violations{"), "{text}");
        assert!(!text.contains("gpu_admission_audit_excepted{"), "{text}");
        assert!(!text.contains("gpu_admission_audit_pool_gpus{"), "{text}");
        assert!(
            !text.contains("gpu_admission_audit_cost_per_day{"),
            "{text}"
        );
        assert!(!text.contains("gpu_admission_audit_namespace_gpus{"));
        assert!(!text.contains("gpu_admission_audit_namespace_gpu_seconds{"));
        assert!(!text.contains("gpu_admission_audit_class_gpu_seconds{"));
        assert!(!text.contains("gpu_admission_audit_namespace_cost_per_day{"));
        assert!(text.contains("gpu_admission_audit_leader 0"), "{text}");
        assert!(
            text.contains("gpu_admission_audit_run_errors_total 1"),
            "{text}"
        );
    }
}
