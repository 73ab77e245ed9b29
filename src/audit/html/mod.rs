//! The audit report as one self-contained HTML page: totals, where the
//! GPUs of violating objects go (bar charts drawn here as inline SVG), the
//! top offenders, every policy with its findings, and the GPU capacity
//! objects. Nothing is fetched when the page opens (clusters are often
//! offline; the page's Content-Security-Policy forbids it), and tables
//! are bounded so that a report on 10,000 objects stays a few MiB.
//!
//! Numbers a program may read carry stable ids and `data-` attributes:
//! `#total-*[data-value]`, `svg.chart g.bar[data-label][data-value]`,
//! `tr.offender[data-gpus]`, `section.policy[data-objects][data-gpus]`,
//! `tr.capacity[data-gpus]`.
//!
//! Written with maud's `html!`, which escapes every spliced value. A file
//! per section; the sections share only the leaf `parts`, never this file
//! or each other.
mod capacity;
mod exceptions;
mod parts;
mod policies;
pub(super) mod utilization;
mod waste;

use super::{ObjectKey, Report};
use crate::admission::Bundle;
use maud::{html, Markup, PreEscaped, DOCTYPE};
use parts::{bar_chart, card, fmt_int, plural, View};
use std::collections::BTreeMap;

/// Where the audited objects came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReportSource {
    /// Listed from the cluster whose API server is at this URL.
    Cluster(String),
    /// Read from these files.
    Files(Vec<String>),
}

/// When and against what a report was made.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportMeta {
    /// RFC 3339, UTC.
    pub generated_at: String,
    pub source: ReportSource,
    /// The policy set: `built-in policies`, or its folder.
    pub policy_set: String,
    /// SHA-256 of the policy files ([`crate::bundle::policy_digest`]).
    pub policy_digest: String,
    /// Every policy loaded, in file order, with what it checks.
    pub policies: Vec<(String, Option<String>)>,
    /// The SKU catalog: `built-in`, or its file.
    pub catalog: String,
    /// The date the catalog's rows were last checked, when it says.
    pub catalog_date: Option<String>,
}

impl ReportMeta {
    /// The description of a report made now from `source` with `bundle`
    /// (loaded from `policy_set`, whose files hash to `policy_digest`) and
    /// the catalog called `catalog`.
    pub fn now(
        source: ReportSource,
        policy_set: String,
        policy_digest: String,
        bundle: &Bundle,
        catalog: String,
    ) -> ReportMeta {
        let now = k8s_openapi::jiff::Timestamp::now();
        ReportMeta {
            generated_at: format!("{:.0}", now),
            source,
            policy_set,
            policy_digest,
            policies: bundle
                .policies
                .descriptions()
                .into_iter()
                .map(|(name, description)| (name.to_string(), description.map(str::to_string)))
                .collect(),
            catalog,
            catalog_date: bundle.placement.catalog().as_of().map(str::to_string),
        }
    }
}

/// Rows of the top offenders table.
const TOP_OFFENDERS: usize = 25;

/// The report as a self-contained HTML page.
pub fn render(report: &Report, meta: &ReportMeta) -> String {
    let view = View::new(report);
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";
                meta name="generator" content="gpu-admission";
                title { "GPU admission report" }
                // The page's own stylesheet, a constant: nothing user-controlled.
                style { (PreEscaped(STYLE)) }
            }
            body {
                (header(meta))
                @if let Some(section) = &report.utilization {
                    (utilization::efficiency(section))
                }
                (exceptions::attention(report))
                (policies::reports_held(report))
                (totals(report))
                (waste::namespaces(report))
                (waste::money(report))
                (waste::nodes(report))
                (capacity::unhealthy(report))
                (charts(report, &view))
                (offenders(report, &view))
                (policies::policies(report, &view, &meta.policies))
                (exceptions::exceptions(report))
                (capacity::capacity(report, &view))
                (capacity::kueue(report))
                (capacity::budgets(report))
                @if let Some(section) = &report.utilization {
                    (utilization::section(section))
                }
                (footer(meta))
                // The page's own script, a constant: nothing user-controlled.
                script { (PreEscaped(SCRIPT)) }
            }
        }
    }
    .into_string()
}

fn header(meta: &ReportMeta) -> Markup {
    let digest = &meta.policy_digest;
    html! {
        header {
            h1 { "GPU admission report" }
            p.lede { "Which GPU workloads and node pools violate the admission policies, and how many GPUs they hold." }
            dl.meta {
                dt { "Generated" }
                dd #meta-generated { time datetime=(meta.generated_at) { (meta.generated_at) } }
                dt { "Objects from" }
                dd #meta-source {
                    @match &meta.source {
                        ReportSource::Cluster(url) => { "cluster " code { (url) } }
                        ReportSource::Files(files) => {
                            (plural(files.len(), "file", "files")) " "
                            @for (i, file) in files.iter().take(5).enumerate() {
                                @if i > 0 { ", " }
                                code { (file) }
                            }
                            @if files.len() > 5 { " and " (files.len() - 5) " more" }
                        }
                    }
                }
                dt { "Policy set" }
                dd #meta-policies {
                    (meta.policy_set) " (" (meta.policies.len()) " policies), SHA-256 "
                    code.digest title=(digest) { (digest.get(..12).unwrap_or(digest)) }
                }
                dt { "SKU catalog" }
                dd #meta-catalog {
                    (meta.catalog) ", "
                    @match &meta.catalog_date {
                        Some(date) => { "as of " (date) }
                        None => "no date stated",
                    }
                }
            }
        }
    }
}

fn totals(report: &Report) -> Markup {
    let count = |action: &str| {
        (report.findings.iter())
            .filter(|f| f.action == action)
            .count()
    };
    let (deny, warn) = (count("deny"), count("warn"));
    let audit = report.findings.len() - deny - warn;
    let share = if report.gpus_held > 0 {
        report.gpus_in_violation as f64 / report.gpus_held as f64
    } else {
        0.0
    };
    let unbounded = report.capacity.iter().filter(|c| c.gpus.is_none()).count();
    let (findings, evaluated) = (report.findings.len(), report.evaluated);
    html! {
        section #totals {
            h2 { "Totals" }
            div.cards {
                (card("gpus-held", report.gpus_held, fmt_int(report.gpus_held), "GPUs held",
                    "pods of the workloads read bound to a node, not finished"))
                (card("gpus-pending", report.gpus_pending, fmt_int(report.gpus_pending), "GPUs requested, not placed",
                    format_args!("pods not bound, or not created yet; {} of them by violating workloads", fmt_int(report.gpus_pending_in_violation))))
                (card("gpus-in-violation", report.gpus_in_violation, fmt_int(report.gpus_in_violation),
                    "GPUs held by violating workloads", "held, each object counted once"))
                (card("waste-share", format_args!("{share:.6}"), format_args!("{:.1}\u{202f}%", share * 100.0),
                    "share that is waste", "GPUs held by violating workloads of all GPUs held"))
                (card("findings", findings, fmt_int(findings as i64), "findings",
                    format_args!("{deny} deny, {warn} warn, {audit} audit")))
                (card("evaluated", evaluated, fmt_int(evaluated as i64), "objects evaluated",
                    format_args!("of {} read; owned objects judged through their owner", fmt_int(report.objects as i64))))
                (card("capacity-gpus", report.capacity_gpus, fmt_int(report.capacity_gpus), "GPUs node pools can bring up",
                    format_args!("{} of them in pools with findings; {unbounded} unbounded", fmt_int(report.capacity_gpus_in_violation))))
            }
            @if !report.gpus_counted.is_empty() {
                p.hint #gpus-counted { "GPUs counted: " (crate::audit::holding::counted_text(&report.gpus_counted)) "." }
            }
            span hidden id="total-objects" data-value=(report.objects) {}
            span hidden id="total-capacity-gpus-in-violation" data-value=(report.capacity_gpus_in_violation) {}
            span hidden id="total-gpus-pending-in-violation" data-value=(report.gpus_pending_in_violation) {}
        }
    }
}

fn charts(report: &Report, view: &View) -> Markup {
    let by_policy = (view.by_policy.iter())
        .map(|(name, idx)| (name.to_string(), view.tally(report, idx).workloads.1))
        .collect();
    let mut by_namespace: BTreeMap<String, i64> = BTreeMap::new();
    for (key, idx) in &view.by_object {
        if !view.capacity.contains(key) {
            let namespace = key.namespace.clone().unwrap_or_else(|| "(cluster)".into());
            *by_namespace.entry(namespace).or_default() += report.findings[idx[0]].gpus;
        }
    }
    html! {
        section #charts {
            h2 { "Where the GPUs of violating objects go" }
            p.hint { "A workload that violates several policies counts under each of them; by namespace each counts once, so those bars add up to the GPUs held by violating workloads." }
            div.chart-grid {
                (bar_chart("chart-policy", "GPUs held by violating workloads, by policy", "GPUs", by_policy))
                (bar_chart("chart-namespace", "GPUs held by violating workloads, by namespace", "GPUs",
                    by_namespace.into_iter().collect()))
            }
        }
    }
}

fn offenders(report: &Report, view: &View) -> Markup {
    let mut objects: Vec<(&ObjectKey, &Vec<usize>, i64)> = (view.by_object.iter())
        .map(|(key, idx)| (key, idx, report.findings[idx[0]].gpus))
        .filter(|(_, _, gpus)| *gpus > 0)
        .collect();
    objects.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(b.0)));
    objects.truncate(TOP_OFFENDERS);
    html! {
        section #offenders {
            h2 { "Top offenders" }
            p.hint { "The objects holding the most GPUs (or, for node pools, able to bring up the most) while violating a policy, with what each policy says to change." }
            @if objects.is_empty() {
                p.empty { "No object holding GPUs violates a policy." }
            } @else {
                table #top-offenders {
                    thead { tr { th.num { "#" } th { "Object" } th.num { "GPUs held" } th { "Findings" } } }
                    tbody {
                        @for (rank, (key, idx, gpus)) in objects.iter().enumerate() {
                            tr.offender data-kind=(key.kind) data-namespace=(key.namespace.as_deref().unwrap_or_default())
                                data-name=(key.name) data-gpus=(gpus) {
                                td.num { (rank + 1) }
                                td.object { (parts::object_cell(key)) }
                                td.num { (fmt_int(*gpus)) }
                                td { ul.messages {
                                    @for &i in idx.iter() {
                                        @let f = &report.findings[i];
                                        li {
                                            (parts::badge(f.action)) " "
                                            a href={ "#f-" (i) } class="policy-name" { (f.policy) }
                                            ": " (f.message)
                                        }
                                    }
                                } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn footer(meta: &ReportMeta) -> Markup {
    html! {
        footer {
            p {
                "How GPUs are counted: " em { "held" } " GPUs belong to pods bound to a node and not finished; "
                em { "requested, not placed" } " GPUs to pods not bound yet, and to the pods a controller wants and has not created. A controller is counted through its pods where they were read (a cluster's, or its namespace's in a dump), by its status (ready replicas, a Job's ready active pods) only where they were not; the line under the totals says which. Suspended, completed and failed work holds none. Node pools count the GPUs they can bring up, not GPUs in use; GPU nodes count what is allocatable and what pods bound to them request."
            }
            p {
                "Made by " code { "gpu-admission " (env!("CARGO_PKG_VERSION")) " audit -o html" } " at " (meta.generated_at) "."
            }
        }
    }
}

const STYLE: &str = include_str!("report.css");

const SCRIPT: &str = r#"
window.addEventListener("beforeprint", function () {
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
});
"#;
