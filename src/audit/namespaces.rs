//! GPUs per namespace, the first question of a platform team ("which team
//! holds what"): GPUs held, requested and not placed, held by violating
//! workloads, held by idle pods, and what the waste costs. Held and not
//! placed are counted object by object as the run judges them, by
//! [`super::holding`]'s one rule, so the rows add up to the report's
//! totals; idle GPUs and costs are added by [`super::conclude`] once
//! utilization and prices are known. Cluster-scoped objects have no row:
//! they hold no pods (a capacity object's GPUs are what it can bring up,
//! counted apart).
use super::{Holding, Report};
use serde::Serialize;
use std::fmt::Write as _;

/// The GPUs of one namespace's workloads (Pods, controllers, workload
/// custom resources).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceRow {
    /// Held: pods bound to a node, not finished.
    pub gpus_held: i64,
    /// Requested, not placed: pods not bound, or not created yet.
    pub gpus_pending: i64,
    /// Held by workloads violating some policy, each object once.
    pub gpus_in_violation: i64,
    /// Held by idle pods (the utilization section); absent when
    /// utilization was not measured, never 0 by guess.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_idle: Option<i64>,
    /// GPU-seconds its pods with a utilization series held within the
    /// window, and of those the seconds used (the utilization section's
    /// efficiency by namespace); absent when utilization was not measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_seconds_allocated: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_seconds_used: Option<f64>,
    /// Per day at the report's prices (`money` says which): the GPUs held
    /// by its violating workloads; absent without prices, or when they
    /// could not be priced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violations_per_day: Option<f64>,
    /// Per day at the report's prices: the GPUs of its idle pods, each at
    /// its node's price; absent without prices or utilization, or when
    /// they could not be priced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_pods_per_day: Option<f64>,
}

impl NamespaceRow {
    /// Counts one workload's GPUs.
    pub(super) fn count(&mut self, holds: Holding, violating: bool) {
        self.gpus_held += holds.held;
        self.gpus_pending += holds.pending;
        if violating {
            self.gpus_in_violation += holds.held;
        }
    }

    /// Adds the counts of `more` (rows of the same namespace from another
    /// page of the run).
    pub(super) fn add(&mut self, more: &NamespaceRow) {
        self.gpus_held += more.gpus_held;
        self.gpus_pending += more.gpus_pending;
        self.gpus_in_violation += more.gpus_in_violation;
    }
}

/// Adds to the rows what the finished report knows: the GPUs of idle pods
/// and the GPU-seconds allocated and used where utilization was measured,
/// and the costs of its `money`. A
/// namespace with nothing to price costs 0; one whose GPUs could not be
/// priced has no cost.
pub(super) fn complete(report: &mut Report) {
    let rows = &mut report.namespaces;
    if let Some(m) = (report.utilization.as_ref()).and_then(|u| u.measured.as_ref()) {
        for row in rows.values_mut() {
            row.gpus_idle = Some(0);
            (row.gpu_seconds_allocated, row.gpu_seconds_used) = (Some(0.0), Some(0.0));
        }
        for p in &m.idle_pods {
            let row = rows.entry(p.namespace.clone()).or_default();
            *row.gpus_idle.get_or_insert(0) += p.gpus;
        }
        for (namespace, e) in &m.by_namespace {
            let row = rows.entry(namespace.clone()).or_default();
            row.gpu_seconds_allocated = Some(e.gpu_seconds_allocated);
            row.gpu_seconds_used = Some(e.gpu_seconds_used);
        }
    }
    let Some(money) = &report.money else {
        return;
    };
    let per_day = |costs: &[super::prices::Cost], name: &str, gpus: i64| {
        let cost = costs.iter().find(|c| c.name == name);
        match cost {
            Some(c) if c.gpus == gpus => Some(c.per_day),
            None if gpus == 0 => Some(0.0),
            _ => None,
        }
    };
    for (name, row) in rows.iter_mut() {
        row.violations_per_day = per_day(&money.by_namespace, name, row.gpus_in_violation);
        if money.idle_pods_per_day.is_some() {
            let idle = row.gpus_idle.unwrap_or(0);
            row.idle_pods_per_day = per_day(&money.idle_pods_by_namespace, name, idle);
        }
    }
}

/// The rows most GPUs held first, then most requested, then by name.
pub fn ranked(report: &Report) -> Vec<(&str, &NamespaceRow)> {
    let mut rows: Vec<(&str, &NamespaceRow)> = (report.namespaces.iter())
        .map(|(name, row)| (name.as_str(), row))
        .collect();
    rows.sort_by_key(|(name, r)| (-r.gpus_held, -r.gpus_pending, *name));
    rows
}

/// The "GPUs per namespace" table of the text report.
pub fn render_text(report: &Report) -> String {
    if report.namespaces.is_empty() {
        return String::new();
    }
    let idle = match &report.utilization {
        Some(u) if u.measured.is_some() => format!(
            "idle: peak use under {}% over {}",
            u.threshold_percent, u.window
        ),
        Some(u) => format!(
            "idle: not measured ({})",
            u.missing.as_deref().unwrap_or("no answer")
        ),
        None => "idle: not measured (no --prometheus or --utilization)".to_string(),
    };
    let money = report.money.as_ref();
    let mut out = format!("\nGPUs per namespace ({idle}");
    if let Some(m) = money {
        let _ = write!(
            out,
            "; cost per day at the prices of {} ({}, {})",
            m.price_date, m.price_source, m.currency
        );
        if m.example {
            out.push_str(", example prices");
        }
    }
    out.push_str("):\n");
    let rows = ranked(report);
    let width = (rows.iter().map(|(n, _)| n.len())).fold("NAMESPACE".len(), usize::max);
    let _ = write!(
        out,
        "{:<width$}  {:>5}  {:>10}  {:>12}  {:>12}",
        "NAMESPACE", "HELD", "NOT PLACED", "IN VIOLATION", "IDLE"
    );
    let seconds = (rows.iter()).any(|(_, r)| r.gpu_seconds_allocated.is_some());
    if seconds {
        let _ = write!(out, "  {:>15}  {:>10}", "GPU-H ALLOCATED", "GPU-H USED");
    }
    if money.is_some() {
        let _ = write!(out, "  {:>13}  {:>13}", "VIOLATING/DAY", "IDLE PODS/DAY");
    }
    out.push('\n');
    let amount = |v: Option<f64>| v.map_or("not priced".to_string(), |v| format!("{v:.2}"));
    for (name, r) in rows {
        let idle = r
            .gpus_idle
            .map_or("not measured".to_string(), |n| n.to_string());
        let _ = write!(
            out,
            "{name:<width$}  {:>5}  {:>10}  {:>12}  {idle:>12}",
            r.gpus_held, r.gpus_pending, r.gpus_in_violation
        );
        if seconds {
            let (allocated, used) = (r.gpu_seconds_allocated, r.gpu_seconds_used);
            let _ = write!(
                out,
                "  {:>15.1}  {:>10.1}",
                allocated.unwrap_or(0.0) / 3600.0,
                used.unwrap_or(0.0) / 3600.0
            );
        }
        if let Some(m) = money {
            let idle_pods = match m.idle_pods_per_day {
                Some(_) => amount(r.idle_pods_per_day),
                None => "not measured".to_string(),
            };
            let _ = write!(
                out,
                "  {:>13}  {idle_pods:>13}",
                amount(r.violations_per_day)
            );
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::prices::tests::{idle_pod, measured, priced_nodes, test_prices};
    use crate::audit::{conclude, nodes::HeldPod, Finding};

    fn row(held: i64, pending: i64, in_violation: i64) -> NamespaceRow {
        NamespaceRow {
            gpus_held: held,
            gpus_pending: pending,
            gpus_in_violation: in_violation,
            ..NamespaceRow::default()
        }
    }

    /// ml: nb (1 GPU on the A100 node, violating, idle) and a pending pod;
    /// research: 9 GPUs held by idle pods, 8 of them on a node of a size
    /// the price file lacks; serving: 1 GPU, busy.
    fn cluster() -> Report {
        let nb = Finding {
            policy: "no-keepalive".into(),
            action: "warn",
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("ml".into()),
            name: "nb".into(),
            uid: None,
            message: "m".into(),
            gpus: 1,
            gpus_pending: 0,
        };
        Report {
            nodes: Some(priced_nodes()),
            held_pods: vec![HeldPod {
                namespace: "ml".into(),
                name: "nb".into(),
                node: Some("a100".into()),
                gpus: 1,
                ..HeldPod::default()
            }],
            findings: vec![nb],
            namespaces: [
                ("ml".into(), row(1, 1, 1)),
                ("research".into(), row(9, 0, 0)),
                ("serving".into(), row(1, 0, 0)),
            ]
            .into(),
            ..Report::default()
        }
    }

    fn idle_pods() -> Vec<crate::audit::utilization::IdlePod> {
        vec![
            idle_pod("ml", "nb", "a100", 1, 12.0),
            idle_pod("research", "big", "nd", 8, 12.0),
            idle_pod("research", "small", "t4", 1, 12.0),
        ]
    }

    /// The utilization section of [`idle_pods`], with their GPU-seconds by
    /// namespace (12 hours each, 1 % used in ml, none in research).
    fn measured_idle() -> crate::audit::utilization::Utilization {
        let mut section = measured(idle_pods());
        let m = section.measured.as_mut().unwrap();
        for (namespace, gpus, used) in [("ml", 1.0, 0.01), ("research", 9.0, 0.0)] {
            let e = m.by_namespace.entry(namespace.to_string()).or_default();
            e.gpu_seconds_allocated = gpus * 12.0 * 3600.0;
            e.gpu_seconds_used = e.gpu_seconds_allocated * used;
        }
        section
    }

    #[test]
    fn idle_gpus_and_costs_join_the_rows_where_measured_and_priced() {
        let mut report = cluster();
        report.utilization = Some(measured_idle());
        conclude(&mut report, Some(&test_prices()));
        let rows = &report.namespaces;
        let a100_day = 3.6 * 24.0;
        assert_eq!(
            rows["ml"],
            NamespaceRow {
                gpus_idle: Some(1),
                gpu_seconds_allocated: Some(43_200.0),
                gpu_seconds_used: Some(432.0),
                violations_per_day: Some(a100_day),
                idle_pods_per_day: Some(a100_day),
                ..row(1, 1, 1)
            }
        );
        assert_eq!(
            rows["research"],
            NamespaceRow {
                gpus_idle: Some(9),
                gpu_seconds_allocated: Some(388_800.0),
                gpu_seconds_used: Some(0.0),
                violations_per_day: Some(0.0),
                idle_pods_per_day: None,
                ..row(9, 0, 0)
            },
            "8 of its idle GPUs have no price: no figure rather than a part"
        );
        let serving = &rows["serving"];
        assert_eq!(
            (serving.gpus_idle, serving.idle_pods_per_day),
            (Some(0), Some(0.0)),
            "measured and busy: 0"
        );
        assert_eq!(
            (serving.gpu_seconds_allocated, serving.gpu_seconds_used),
            (Some(0.0), Some(0.0)),
            "measured, no pod with a series"
        );
    }

    #[test]
    fn without_utilization_or_prices_nothing_is_guessed() {
        let mut report = cluster();
        conclude(&mut report, Some(&test_prices()));
        let ml = &report.namespaces["ml"];
        assert_eq!((ml.gpus_idle, ml.idle_pods_per_day), (None, None));
        assert_eq!(
            (ml.gpu_seconds_allocated, ml.gpu_seconds_used),
            (None, None)
        );
        assert_eq!(ml.violations_per_day, Some(3.6 * 24.0));
        let mut measured_only = cluster();
        measured_only.utilization = Some(measured_idle());
        conclude(&mut measured_only, None);
        let ml = &measured_only.namespaces["ml"];
        assert_eq!(ml.gpus_idle, Some(1));
        assert_eq!((ml.violations_per_day, ml.idle_pods_per_day), (None, None));
        let json = serde_json::to_value(ml).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"gpusHeld": 1, "gpusPending": 1, "gpusInViolation": 1, "gpusIdle": 1,
                "gpuSecondsAllocated": 43_200.0, "gpuSecondsUsed": 432.0})
        );
    }

    #[test]
    fn the_text_table_ranks_by_gpus_held_and_names_the_prices() {
        let mut report = cluster();
        assert_eq!(
            render_text(&report),
            "\nGPUs per namespace (idle: not measured (no --prometheus or --utilization)):\n\
             NAMESPACE   HELD  NOT PLACED  IN VIOLATION          IDLE\n\
             research       9           0             0  not measured\n\
             ml             1           1             1  not measured\n\
             serving        1           0             0  not measured\n"
        );
        report.utilization = Some(measured_idle());
        conclude(&mut report, Some(&test_prices()));
        assert_eq!(
            render_text(&report),
            "\nGPUs per namespace (idle: peak use under 5% over 12h; cost per day at the prices of 2026-11-01 (test prices, USD), example prices):\n\
             NAMESPACE   HELD  NOT PLACED  IN VIOLATION          IDLE  GPU-H ALLOCATED  GPU-H USED  VIOLATING/DAY  IDLE PODS/DAY\n\
             research       9           0             0             9            108.0         0.0           0.00     not priced\n\
             ml             1           1             1             1             12.0         0.1          86.40          86.40\n\
             serving        1           0             0             0              0.0         0.0           0.00           0.00\n"
        );
        assert_eq!(render_text(&Report::default()), "");
    }
}
