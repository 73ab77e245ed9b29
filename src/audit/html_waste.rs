//! The page's sections on GPU nodes and pools and on money. Numbers a
//! program may read: `#total-node-*[data-value]`, `tr.pool[data-*]`,
//! `tr.node-finding[data-rule][data-node][data-gpus]`,
//! `#total-cost-*[data-value]`, `tr.cost[data-table][data-name][data-per-day]`.
use super::html::{esc, fmt_int, plural};
use super::nodes::NodeReport;
use super::prices::{Cost, Money};
use super::Report;
use std::fmt::Write as _;

/// Node findings listed; the rest are counted (`audit -o json` has all).
const MAX_NODE_ROWS: usize = 500;

/// The GPU nodes per pool and size, and the findings on nodes.
pub(super) fn nodes(out: &mut String, report: &Report) {
    out.push_str("<section id=\"nodes\">\n<h2>GPU nodes and pools</h2>\n");
    let Some(nodes) = &report.nodes else {
        out.push_str("<p class=\"empty\" id=\"nodes-missing\">No Nodes were read: pass them with the other objects (<code>kubectl get nodes,pods,... -o json</code>), or allow the audit to list nodes.</p>\n</section>\n");
        return;
    };
    out.push_str("<p class=\"hint\">Every node with GPUs, whatever made its pool (<code>az aks nodepool add</code>, Bicep, Terraform, Karpenter). <em>Allocatable</em>: what the nodes offer; <em>requested</em>: what unfinished pods bound to them ask for; <em>idle</em>: allocatable GPUs no pod requests.</p>\n<div class=\"cards\">\n");
    node_card(
        out,
        "node-gpu-nodes",
        nodes.gpu_nodes as i64,
        "GPU nodes",
        &format!("of {} nodes read", fmt_int(nodes.nodes as i64)),
    );
    node_card(
        out,
        "node-gpus-allocatable",
        nodes.gpus_allocatable,
        "GPUs allocatable",
        "on the GPU nodes",
    );
    node_card(
        out,
        "node-gpus-requested",
        nodes.gpus_requested,
        "GPUs requested on nodes",
        "by unfinished pods bound to them",
    );
    node_card(
        out,
        "node-gpus-idle",
        nodes.gpus_idle,
        "GPUs idle on nodes",
        "allocatable and requested by no pod",
    );
    out.push_str("</div>\n");
    pools(out, nodes);
    node_findings(out, nodes);
    out.push_str("</section>\n");
}

fn node_card(out: &mut String, id: &str, value: i64, label: &str, note: &str) {
    let _ = writeln!(
        out,
        "<div class=\"card\"><div class=\"value\" id=\"total-{id}\" data-value=\"{value}\">{}</div><div class=\"label\">{}</div><div class=\"note\">{}</div></div>",
        fmt_int(value),
        esc(label),
        esc(note)
    );
}

fn pools(out: &mut String, nodes: &NodeReport) {
    if nodes.pools.is_empty() {
        out.push_str("<p class=\"empty\">No GPU nodes.</p>\n");
        return;
    }
    out.push_str("<table id=\"gpu-pools\">\n<thead><tr><th>Pool</th><th>Size</th><th class=\"num\">GPU nodes</th><th class=\"num\">Allocatable</th><th class=\"num\">Requested</th><th class=\"num\">Idle</th><th class=\"num\">Without GPU taint</th></tr></thead>\n<tbody>\n");
    for p in &nodes.pools {
        let untainted = if p.untainted_nodes > 0 {
            format!(
                "<span class=\"warn-text\">{}</span>",
                fmt_int(p.untainted_nodes as i64)
            )
        } else {
            "0".to_string()
        };
        let _ = writeln!(
            out,
            "<tr class=\"pool\" data-pool=\"{}\" data-size=\"{}\" data-nodes=\"{}\" data-allocatable=\"{}\" data-requested=\"{}\" data-idle=\"{}\" data-untainted=\"{}\"><td><strong>{}</strong></td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{untainted}</td></tr>",
            esc(&p.pool),
            esc(&p.size),
            p.gpu_nodes,
            p.gpus_allocatable,
            p.gpus_requested,
            p.gpus_idle,
            p.untainted_nodes,
            esc(&p.pool),
            if p.size.is_empty() { "<span class=\"muted\">not labelled</span>".to_string() } else { esc(&p.size) },
            fmt_int(p.gpu_nodes as i64),
            fmt_int(p.gpus_allocatable),
            fmt_int(p.gpus_requested),
            fmt_int(p.gpus_idle),
        );
    }
    out.push_str("</tbody>\n</table>\n");
}

fn node_findings(out: &mut String, nodes: &NodeReport) {
    let n = nodes.findings.len();
    let _ = writeln!(
        out,
        "<h3 id=\"node-findings-title\">Findings on nodes ({})</h3>",
        fmt_int(n as i64)
    );
    if n == 0 {
        out.push_str("<p class=\"empty\">Every GPU node carries a GPU taint, has a current size, and has GPUs requested.</p>\n");
        return;
    }
    out.push_str("<table id=\"node-findings\">\n<thead><tr><th>Node</th><th>Pool</th><th>Rule</th><th class=\"num\">GPUs</th><th>Message</th></tr></thead>\n<tbody>\n");
    for f in nodes.findings.iter().take(MAX_NODE_ROWS) {
        let _ = writeln!(
            out,
            "<tr class=\"node-finding\" data-rule=\"{}\" data-node=\"{}\" data-gpus=\"{}\"><td class=\"object\"><span class=\"kind\">Node</span> <strong>{}</strong></td><td>{}</td><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"message\">{}</td></tr>",
            f.rule,
            esc(&f.node),
            f.gpus,
            esc(&f.node),
            esc(&f.pool),
            f.rule,
            fmt_int(f.gpus),
            esc(&f.message),
        );
    }
    out.push_str("</tbody>\n</table>\n");
    if n > MAX_NODE_ROWS {
        let _ = writeln!(
            out,
            "<p class=\"note\">{} of {} shown; <code>gpu-admission audit -o json</code> lists them all.</p>",
            fmt_int(MAX_NODE_ROWS as i64),
            fmt_int(n as i64)
        );
    }
}

/// What the waste costs per day; no section without a price file.
pub(super) fn money(out: &mut String, report: &Report) {
    let Some(money) = &report.money else {
        return;
    };
    out.push_str("<section id=\"money\">\n<h2>What the waste costs</h2>\n");
    let example = if money.example {
        " <strong class=\"warn-text\">Example prices, not a quote.</strong>"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "<p class=\"hint\" id=\"money-prices\">At the prices of <time id=\"price-date\" datetime=\"{0}\">{0}</time> ({1}), per day: the GPUs <em>held</em> by violating workloads (a pod's at its node's price per GPU, a controller's at the mean over the priced GPU nodes), and the <em>idle</em> GPUs of GPU nodes. GPUs requested, not placed, cost nothing yet.{example}</p>",
        esc(&money.price_date),
        esc(&money.price_source),
    );
    out.push_str("<div class=\"cards\">\n");
    money_card(
        out,
        "cost-violations",
        money,
        money.violations_per_day,
        "per day held by violating workloads",
        &unpriced(money.unpriced_gpus),
    );
    money_card(
        out,
        "cost-idle-nodes",
        money,
        money.idle_nodes_per_day,
        "per day in idle node GPUs",
        &unpriced(money.unpriced_idle_gpus),
    );
    out.push_str("</div>\n<div class=\"chart-grid\">\n");
    cost_table(
        out,
        "namespace",
        "By namespace (violations, each object once)",
        money,
        &money.by_namespace,
    );
    cost_table(
        out,
        "policy",
        "By policy (violations)",
        money,
        &money.by_policy,
    );
    cost_table(
        out,
        "pool",
        "By pool (idle node GPUs)",
        money,
        &money.by_pool,
    );
    out.push_str("</div>\n</section>\n");
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

fn money_card(out: &mut String, id: &str, money: &Money, value: f64, label: &str, note: &str) {
    let _ = writeln!(
        out,
        "<div class=\"card\"><div class=\"value\" id=\"total-{id}\" data-value=\"{value:.2}\">{}</div><div class=\"label\">{}</div><div class=\"note\">{}</div></div>",
        amount(value, &money.currency),
        esc(label),
        esc(note)
    );
}

fn cost_table(out: &mut String, id: &str, title: &str, money: &Money, rows: &[Cost]) {
    let _ = writeln!(
        out,
        "<figure class=\"chart-box\">\n<figcaption>{}</figcaption>",
        esc(title)
    );
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"empty\" id=\"cost-{id}-empty\">None.</p>\n</figure>"
        );
        return;
    }
    let _ = writeln!(out, "<table class=\"costs\" id=\"cost-{id}\">\n<thead><tr><th>{}</th><th class=\"num\">GPUs</th><th class=\"num\">per day</th></tr></thead>\n<tbody>", esc(&id[..1].to_uppercase()) + &id[1..]);
    for c in rows.iter().take(25) {
        let _ = writeln!(
            out,
            "<tr class=\"cost\" data-table=\"{id}\" data-name=\"{}\" data-gpus=\"{}\" data-per-day=\"{:.2}\"><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&c.name),
            c.gpus,
            c.per_day,
            if c.name.is_empty() { "(cluster)".to_string() } else { esc(&c.name) },
            fmt_int(c.gpus),
            amount(c.per_day, &money.currency),
        );
    }
    out.push_str("</tbody>\n</table>\n</figure>\n");
}

/// `1234.5` as `$1,234.50` (USD) or `1,234.50 EUR`.
fn amount(value: f64, currency: &str) -> String {
    let cents = (value * 100.0).round() as i64;
    let text = format!("{}.{:02}", fmt_int(cents / 100), (cents % 100).abs());
    if currency == "USD" {
        format!("${text}")
    } else {
        format!("{text} {}", esc(currency))
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
