//! The page's sections on GPU capacity objects (Karpenter NodePools, KAITO
//! Workspaces, AKS agent pools: what they can bring up), on GPU nodes whose
//! GPUs are reported unhealthy (`tr.unhealthy[data-node][data-unusable]`),
//! and on Kueue flavors outside namespace tiers.
use super::parts::{badge, bar_chart, fmt_int, object_cell, plural, View, MAX_ROWS, MAX_SIZES};
use crate::audit::{CapacityObject, Report};
use maud::{html, Markup};
use std::collections::BTreeMap;

pub(super) fn capacity(report: &Report, view: &View) -> Markup {
    let hint = html! {
        h2 { "GPU capacity objects" }
        p.hint { "Karpenter NodePools, KAITO Workspaces and AKS agent pools that can create GPU nodes: the GPU sizes they allow and how many GPUs they can bring up (a NodePool's GPU limit; otherwise its nodes times the GPUs of its size)." }
    };
    if report.capacity.is_empty() {
        return html! { section #capacity { (hint) p.empty { "No GPU capacity objects were read." } } };
    }
    let by_policy = (view.by_policy.iter())
        .map(|(name, idx)| (name.to_string(), view.tally(report, idx).capacity.1))
        .collect();
    let mut by_kind: BTreeMap<String, i64> = BTreeMap::new();
    for c in &report.capacity {
        *by_kind.entry(c.kind.clone()).or_default() += c.gpus.unwrap_or(0);
    }
    let mut rows: Vec<&CapacityObject> = report.capacity.iter().collect();
    rows.sort_by(|a, b| {
        let gpus = |c: &CapacityObject| c.gpus.unwrap_or(i64::MAX);
        (b.findings.min(1).cmp(&a.findings.min(1)))
            .then(gpus(b).cmp(&gpus(a)))
            .then(a.name.cmp(&b.name))
    });
    html! {
        section #capacity {
            (hint)
            div.chart-grid {
                (bar_chart("chart-capacity", "GPUs node pools with findings can bring up, by policy", "GPUs", by_policy))
                (bar_chart("chart-capacity-kind", "GPUs node pools can bring up, by kind (bounded ones)", "GPUs",
                    by_kind.into_iter().collect()))
            }
            table #capacity-objects {
                thead { tr {
                    th { "Object" } th { "GPU sizes" } th.num { "GPU limit" } th.num { "Nodes" } th { "Taints" }
                    th.num { "GPUs" } th { "Findings" }
                } }
                tbody {
                    @for c in rows.iter().take(MAX_ROWS) { (row(report, view, c)) }
                }
            }
            @if rows.len() > MAX_ROWS {
                p.note {
                    (fmt_int(MAX_ROWS as i64)) " of " (fmt_int(rows.len() as i64)) " shown; "
                    code { "gpu-admission audit -o json" } " lists them all."
                }
            }
        }
    }
}

fn row(report: &Report, view: &View, c: &CapacityObject) -> Markup {
    let key = c.object();
    let skus = match c.skus.len() {
        0 => html! { span.muted { "none in the catalog" } },
        1..=3 => lines(c.skus.iter().map(|s| html! { (s) })),
        n => html! {
            details {
                summary { (n) " sizes" }
                (lines(c.skus.iter().take(MAX_SIZES).map(|s| html! { (s) })))
                @if n > MAX_SIZES { br; span.muted { "and " (n - MAX_SIZES) " more" } }
            }
        },
    };
    let taints = if c.taints.is_empty() && c.gpu_tainted {
        html! { code { "sku=gpu:NoSchedule" } " " span.muted { "(set by KAITO)" } }
    } else if c.taints.is_empty() {
        html! { span.muted { "none" } }
    } else {
        lines(c.taints.iter().map(|t| html! { code { (t) } }))
    };
    let findings = match view.by_object.get(&key) {
        Some(idx) => lines(idx.iter().map(|&i| {
            let f = &report.findings[i];
            html! { span.link { (badge(f.action)) " " a href={ "#f-" (i) } { (f.policy) } } }
        })),
        None => html! { span.muted { "none" } },
    };
    let dash = |n: Option<i64>| n.map_or_else(|| "—".to_string(), fmt_int);
    html! {
        tr.capacity data-kind=(c.kind) data-name=(c.name)
            data-gpus=(c.gpus.map_or_else(|| "unbounded".to_string(), |g| g.to_string())) data-findings=(c.findings) {
            td.object { (object_cell(&key)) }
            td.skus { (skus) }
            td.num { (dash(c.gpu_limit)) }
            td.num { (dash(c.nodes)) }
            td { (taints) }
            td.num {
                @match c.gpus {
                    Some(g) => (fmt_int(g)),
                    None => span.warn-text { "unbounded" },
                }
            }
            td.links { (findings) }
        }
    }
}

/// GPU nodes whose GPUs Node Problem Detector or the device plugin report
/// unhealthy: paid for, unusable; no section when Nodes were not read.
pub(super) fn unhealthy(report: &Report) -> Markup {
    let Some(nodes) = &report.nodes else {
        return html! {};
    };
    html! {
        section #unhealthy {
            h2 { "Unhealthy GPU capacity" }
            p.hint {
                "GPU nodes on which Node Problem Detector set a GPU condition (" code { "GPUMissing" } ", " code { "XIDErrors" }
                ", " code { "NVLinkStatusInactive" } ", " code { "GPUClockThrottling" } ", " code { "UnhealthyNvidiaDevicePlugin" }
                "), whose GPUs all count as unusable, or whose device plugin offers fewer GPUs than the node has. "
                "Unusable GPUs are paid for and not counted as idle; a pod pinned to such a node is warned at admission."
            }
            @if nodes.unhealthy_nodes.is_empty() {
                p.empty #unhealthy-none { "No GPU node reports unhealthy GPUs." }
            } @else {
                p #total-gpus-unusable data-value=(nodes.gpus_unusable) {
                    strong { (fmt_int(nodes.gpus_unusable)) } " " (plural(nodes.gpus_unusable as usize, "GPU", "GPUs")) " unusable on "
                    (fmt_int(nodes.unhealthy_nodes.len() as i64)) " " (plural(nodes.unhealthy_nodes.len(), "node", "nodes")) "."
                }
                table #unhealthy-nodes {
                    thead { tr {
                        th { "Node" } th { "Pool" } th { "Size" } th { "Conditions" } th.num { "Devices dropped" } th.num { "GPUs unusable" }
                    } }
                    tbody {
                        @for u in nodes.unhealthy_nodes.iter().take(MAX_ROWS) {
                            tr.unhealthy data-node=(u.node) data-pool=(u.pool) data-unusable=(u.gpus_unusable) {
                                td.object { span.kind { "Node" } " " strong { (u.node) } }
                                td { (u.pool) }
                                td { (u.size) }
                                td {
                                    @if u.conditions.is_empty() { span.muted { "none" } }
                                    (lines(u.conditions.iter().map(|c| html! {
                                        code { (c.kind) } " " (if c.message.is_empty() { &c.reason } else { &c.message })
                                    })))
                                }
                                td.num { (fmt_int(u.unhealthy_devices)) }
                                td.num { span.warn-text { (fmt_int(u.gpus_unusable)) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `items`, one per line.
fn lines(items: impl Iterator<Item = Markup>) -> Markup {
    html! {
        @for (i, item) in items.enumerate() {
            @if i > 0 { br; }
            (item)
        }
    }
}

/// Kueue flavors outside the tiers of the namespaces their ClusterQueues
/// serve; no section when there are none.
pub(super) fn kueue(report: &Report) -> Markup {
    if report.kueue.is_empty() {
        return html! {};
    }
    html! {
        section #kueue {
            h2 { "Kueue flavors outside namespace tiers" }
            p { "Kueue writes a ResourceFlavor's node labels into every pod it admits on the flavor. These flavors select GPU sizes the tier of a namespace they serve does not allow: the pods Kueue admits from it are denied, and their workloads never start." }
            table #kueue-flavors {
                thead { tr {
                    th { "ClusterQueue" } th { "Namespace" } th { "Tier" } th { "ResourceFlavor" } th { "GPU sizes outside the tier" }
                } }
                tbody {
                    @for k in &report.kueue {
                        tr.kueue data-flavor=(k.flavor) data-namespace=(k.namespace) {
                            td { (k.cluster_queue) } td { (k.namespace) } td { (k.tier) } td { (k.flavor) }
                            td.skus {
                                (k.sizes.iter().take(MAX_SIZES).map(String::as_str).collect::<Vec<_>>().join(", "))
                                @if k.sizes.len() > MAX_SIZES { " and " (k.sizes.len() - MAX_SIZES) " more" }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// GpuBudgets: each limit with what the namespaces it covers hold, and
/// the budgets' findings; no section when no budget was read.
pub(super) fn budgets(report: &Report) -> Markup {
    if report.budgets.is_empty() && report.budget_findings.is_empty() {
        return html! {};
    }
    html! {
        section #budgets {
            h2 { "GPU budgets" }
            p { "GPUs held against each GpuBudget limit (pods not finished, as admission counts them), of them by pods not on a node yet, and GPUs of workloads Kueue keeps queued in the namespaces it covers." }
            table #budget-limits {
                thead { tr {
                    th { "GpuBudget" } th { "Limit of" } th.num { "Held / limit" } th.num { "Pending" } th.num { "Queued (Kueue)" } th { "Held per namespace" }
                } }
                tbody {
                    @for r in &report.budgets {
                        tr.budget data-budget=(r.budget) data-model=(r.model) {
                            td { (r.namespace) "/" (r.budget) } td { (r.model) }
                            td.num { (r.counted.held) " / " (r.limit) } td.num { (r.counted.pending) } td.num { (r.counted.queued) }
                            td { (r.namespaces.iter().map(|(ns, c)| format!("{ns} {}", c.held)).collect::<Vec<_>>().join(", ")) }
                        }
                    }
                }
            }
            @if !report.budget_findings.is_empty() {
                ul #budget-findings {
                    @for f in &report.budget_findings {
                        li data-rule=(f.rule) { code { (f.rule) } " " (f.message) }
                    }
                }
            }
        }
    }
}
