//! The page's sections on GPUs per namespace, GPU nodes and pools, and
//! money. Numbers a program may read: `tr.namespace[data-namespace]
//! [data-held][data-pending][data-in-violation][data-idle]
//! [data-violations-per-day][data-idle-pods-per-day]` (`data-idle` and the
//! costs absent where not measured or priced), `#total-node-*[data-value]`,
//! `tr.pool[data-*]`, `tr.node-finding[data-rule][data-node][data-gpus]`,
//! `#total-cost-*[data-value]`, `tr.cost[data-table][data-name][data-per-day]`.
use super::parts::{card, fmt_int, plural, MAX_ROWS};
use crate::audit::nodes::NodeReport;
use crate::audit::prices::{Cost, Money};
use crate::audit::Report;
use maud::{html, Markup};

/// Node findings listed; the rest are counted (`audit -o json` has all).
const MAX_NODE_ROWS: usize = 500;

/// What each namespace's workloads hold, wait for, waste, and what it
/// costs.
pub(super) fn namespaces(report: &Report) -> Markup {
    let rows = crate::audit::namespaces::ranked(report);
    if rows.is_empty() {
        return html! {};
    }
    let money = report.money.as_ref();
    let measured = (report.utilization.as_ref()).is_some_and(|u| u.measured.is_some());
    let cost = |v: Option<f64>| v.map(|v| format!("{v:.2}"));
    let seconds = |v: Option<f64>| v.map(|v| format!("{v:.0}"));
    let shown = |v: Option<f64>, missing: &'static str| match (v, money) {
        (Some(v), Some(m)) => amount(v, &m.currency),
        _ => missing.to_string(),
    };
    html! {
        section #namespaces {
            h2 { "GPUs per namespace" }
            p.hint #namespaces-hint {
                "What each namespace's workloads hold (pods bound to a node, not finished), request and are not given yet, and hold while violating a policy; "
                em { "idle" } ": GPUs of its idle pods; GPU-hours its measured pods held within the window, and used (as in GPU efficiency)"
                @if !measured { " (not measured: no utilization section, or it is missing)" }
                "."
                @if let Some(m) = money {
                    " Costs per day at the prices of " time datetime=(m.price_date) { (m.price_date) } " (" (m.price_source) "): the GPUs held by its violating workloads, and those of its idle pods at their node's price."
                    @if m.example { " " strong.warn-text { "Example prices, not a quote." } }
                }
            }
            table #gpu-namespaces {
                thead { tr {
                    th { "Namespace" } th.num { "Held" } th.num { "Not placed" } th.num { "In violation" } th.num { "Idle" }
                    th.num { "GPU-hours allocated" } th.num { "GPU-hours used" }
                    @if money.is_some() { th.num { "Violating, per day" } th.num { "Idle pods, per day" } }
                } }
                tbody {
                    @for (name, r) in rows.iter().take(MAX_ROWS) {
                        tr.namespace data-namespace=(name) data-held=(r.gpus_held) data-pending=(r.gpus_pending)
                            data-in-violation=(r.gpus_in_violation) data-idle=[r.gpus_idle]
                            data-allocated=[seconds(r.gpu_seconds_allocated)] data-used=[seconds(r.gpu_seconds_used)]
                            data-violations-per-day=[cost(r.violations_per_day)] data-idle-pods-per-day=[cost(r.idle_pods_per_day)] {
                            td { strong { (name) } }
                            td.num { (fmt_int(r.gpus_held)) }
                            td.num { (fmt_int(r.gpus_pending)) }
                            td.num { (fmt_int(r.gpus_in_violation)) }
                            td.num { @match r.gpus_idle { Some(n) => (fmt_int(n)), None => span.muted { "not measured" } } }
                            @for v in [r.gpu_seconds_allocated, r.gpu_seconds_used] {
                                td.num { @match v { Some(v) => (format!("{:.1}", v / 3600.0)), None => span.muted { "not measured" } } }
                            }
                            @if money.is_some() {
                                td.num { (shown(r.violations_per_day, "not priced")) }
                                td.num { (shown(r.idle_pods_per_day, if measured { "not priced" } else { "not measured" })) }
                            }
                        }
                    }
                }
            }
            @if rows.len() > MAX_ROWS {
                p.note {
                    (fmt_int(MAX_ROWS as i64)) " of " (fmt_int(rows.len() as i64)) " namespaces shown; "
                    code { "gpu-admission audit -o json" } " lists them all."
                }
            }
        }
    }
}

/// The GPU nodes per pool and size, and the findings on nodes.
pub(super) fn nodes(report: &Report) -> Markup {
    let Some(nodes) = &report.nodes else {
        return html! {
            section #nodes {
                h2 { "GPU nodes and pools" }
                p.empty #nodes-missing {
                    "No Nodes were read: pass them with the other objects (" code { "kubectl get nodes,pods,... -o json" }
                    "), or allow the audit to list nodes."
                }
            }
        };
    };
    let node_card = |id, value: i64, label, note| card(id, value, fmt_int(value), label, note);
    html! {
        section #nodes {
            h2 { "GPU nodes and pools" }
            p.hint {
                "Every node with GPUs, whatever made its pool (" code { "az aks nodepool add" } ", Bicep, Terraform, Karpenter). "
                em { "Allocatable" } ": what the nodes offer; " em { "requested" } ": what unfinished pods bound to them ask for; "
                em { "idle" } ": allocatable GPUs no pod requests, on nodes whose GPUs work; "
                em { "unusable" } ": GPUs reported unhealthy (" a href="#unhealthy" { "below" } ")."
            }
            div.cards {
                (node_card("node-gpu-nodes", nodes.gpu_nodes as i64, "GPU nodes",
                    format!("of {} nodes read", fmt_int(nodes.nodes as i64))))
                (node_card("node-gpus-allocatable", nodes.gpus_allocatable, "GPUs allocatable", "on the GPU nodes".into()))
                (node_card("node-gpus-requested", nodes.gpus_requested, "GPUs requested on nodes",
                    "by unfinished pods bound to them".into()))
                (node_card("node-gpus-idle", nodes.gpus_idle, "GPUs idle on nodes", "allocatable and requested by no pod".into()))
                (node_card("node-gpus-unusable", nodes.gpus_unusable, "GPUs unusable on nodes", "reported unhealthy, not idle".into()))
            }
            (pools(nodes))
            (node_findings(nodes))
        }
    }
}

fn pools(nodes: &NodeReport) -> Markup {
    if nodes.pools.is_empty() {
        return html! { p.empty { "No GPU nodes." } };
    }
    html! {
        table #gpu-pools {
            thead { tr {
                th { "Pool" } th { "Size" } th.num { "GPU nodes" } th.num { "Allocatable" } th.num { "Requested" }
                th.num { "Idle" } th.num { "Unusable" } th.num { "Without GPU taint" }
            } }
            tbody {
                @for p in &nodes.pools {
                    tr.pool data-pool=(p.pool) data-size=(p.size) data-nodes=(p.gpu_nodes) data-allocatable=(p.gpus_allocatable)
                        data-requested=(p.gpus_requested) data-idle=(p.gpus_idle) data-unusable=(p.gpus_unusable) data-untainted=(p.untainted_nodes) {
                        td { strong { (p.pool) } }
                        td {
                            @if p.size.is_empty() { span.muted { "not labelled" } } @else { (p.size) }
                        }
                        td.num { (fmt_int(p.gpu_nodes as i64)) }
                        td.num { (fmt_int(p.gpus_allocatable)) }
                        td.num { (fmt_int(p.gpus_requested)) }
                        td.num { (fmt_int(p.gpus_idle)) }
                        td.num { (fmt_int(p.gpus_unusable)) }
                        td.num {
                            @if p.untainted_nodes > 0 {
                                span.warn-text { (fmt_int(p.untainted_nodes as i64)) }
                            } @else { "0" }
                        }
                    }
                }
            }
        }
    }
}

fn node_findings(nodes: &NodeReport) -> Markup {
    let n = nodes.findings.len();
    html! {
        h3 #node-findings-title { "Findings on nodes (" (fmt_int(n as i64)) ")" }
        @if n == 0 {
            p.empty { "Every GPU node carries a GPU taint, has a current size, and has GPUs requested." }
        } @else {
            table #node-findings {
                thead { tr { th { "Node" } th { "Pool" } th { "Rule" } th.num { "GPUs" } th { "Message" } } }
                tbody {
                    @for f in nodes.findings.iter().take(MAX_NODE_ROWS) {
                        tr.node-finding data-rule=(f.rule) data-node=(f.node) data-gpus=(f.gpus) {
                            td.object { span.kind { "Node" } " " strong { (f.node) } }
                            td { (f.pool) }
                            td { code { (f.rule) } }
                            td.num { (fmt_int(f.gpus)) }
                            td.message { (f.message) }
                        }
                    }
                }
            }
            @if n > MAX_NODE_ROWS {
                p.note {
                    (fmt_int(MAX_NODE_ROWS as i64)) " of " (fmt_int(n as i64)) " shown; "
                    code { "gpu-admission audit -o json" } " lists them all."
                }
            }
        }
    }
}

/// What the waste costs per day; no section without a price file.
pub(super) fn money(report: &Report) -> Markup {
    let Some(money) = &report.money else {
        return html! {};
    };
    let money_card = |id, value: f64, label, note| {
        card(
            id,
            format!("{value:.2}"),
            amount(value, &money.currency),
            label,
            note,
        )
    };
    html! {
        section #money {
            h2 { "What the waste costs" }
            p.hint #money-prices {
                "At the prices of " time #price-date datetime=(money.price_date) { (money.price_date) }
                " (" (money.price_source) "), per day: the GPUs " em { "held" }
                " by violating workloads (a pod's at its node's price per GPU, a controller's at the mean over the priced GPU nodes), the "
                em { "idle" } " GPUs of GPU nodes, and the GPUs of " em { "idle pods" } " (the utilization section) at their node's price. GPUs requested, not placed, cost nothing yet."
                " GPUs reported unhealthy are priced apart, as " em { "unusable" } "."
                @if money.example { " " strong.warn-text { "Example prices, not a quote." } }
            }
            div.cards {
                (money_card("cost-violations", money.violations_per_day, "per day held by violating workloads",
                    unpriced(money.unpriced_gpus)))
                (money_card("cost-idle-nodes", money.idle_nodes_per_day, "per day in idle node GPUs",
                    unpriced(money.unpriced_idle_gpus)))
                @match (money.idle_pods_per_day, money.idle_pods_in_window) {
                    (Some(per_day), Some(window)) => (money_card("cost-idle-pods", per_day, "per day in idle GPU pods",
                        format!("{} for their GPU-hours within the window; {}", amount(window, &money.currency),
                            unpriced(money.unpriced_idle_pod_gpus)))),
                    _ => div.card #cost-idle-pods-missing {
                        div.value.muted { "—" }
                        div.label { "per day in idle GPU pods" }
                        div.note { "not measured: no utilization section, or it is missing" }
                    },
                }
                (money_card("cost-unusable-nodes", money.unusable_nodes_per_day, "per day in unusable node GPUs",
                    unpriced(money.unpriced_unusable_gpus)))
            }
            div.chart-grid {
                (cost_table("namespace", "Namespace", "By namespace (violations, each object once)", money, &money.by_namespace))
                (cost_table("policy", "Policy", "By policy (violations)", money, &money.by_policy))
                (cost_table("pool", "Pool", "By pool (idle node GPUs)", money, &money.by_pool))
                @if money.idle_pods_per_day.is_some() {
                    (cost_table("idle-pods", "Namespace", "By namespace (idle GPU pods)", money, &money.idle_pods_by_namespace))
                }
            }
        }
    }
}

fn unpriced(gpus: i64) -> String {
    match gpus {
        0 => "every GPU priced".to_string(),
        n => format!(
            "{} {} not priced (size not in the file)",
            fmt_int(n),
            plural(n as usize, "GPU", "GPUs")
        ),
    }
}

fn cost_table(id: &str, column: &str, title: &str, money: &Money, rows: &[Cost]) -> Markup {
    html! {
        figure.chart-box {
            figcaption { (title) }
            @if rows.is_empty() {
                p.empty id={ "cost-" (id) "-empty" } { "None." }
            } @else {
                table.costs id={ "cost-" (id) } {
                    thead { tr {
                        th { (column) } th.num { "GPUs" } th.num { "per day" }
                    } }
                    tbody {
                        @for c in rows.iter().take(25) {
                            tr.cost data-table=(id) data-name=(c.name) data-gpus=(c.gpus) data-per-day=(format!("{:.2}", c.per_day)) {
                                td { @if c.name.is_empty() { "(cluster)" } @else { (c.name) } }
                                td.num { (fmt_int(c.gpus)) }
                                td.num { (amount(c.per_day, &money.currency)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `1234.5` as `$1,234.50` (USD) or `1,234.50 EUR`.
fn amount(value: f64, currency: &str) -> String {
    let cents = (value * 100.0).round() as i64;
    let text = format!("{}.{:02}", fmt_int(cents / 100), (cents % 100).abs());
    if currency == "USD" {
        format!("${text}")
    } else {
        format!("{text} {currency}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_have_two_decimals_and_their_currency() {
        assert_eq!(amount(1234.5, "USD"), "$1,234.50");
        assert_eq!(amount(0.004, "USD"), "$0.00");
        assert_eq!(amount(87.123, "EUR"), "87.12 EUR");
    }
}
