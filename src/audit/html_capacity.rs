//! The page's sections on GPU capacity objects (Karpenter NodePools, KAITO
//! Workspaces, AKS agent pools: what they can bring up) and on Kueue
//! flavors outside namespace tiers.
use super::html::{badge, bar_chart, esc, fmt_int, object_cell, View, MAX_ROWS, MAX_SIZES};
use super::{CapacityObject, ObjectKey, Report};
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub(super) fn capacity(out: &mut String, report: &Report, view: &View) {
    out.push_str("<section id=\"capacity\">\n<h2>GPU capacity objects</h2>\n");
    out.push_str("<p class=\"hint\">Karpenter NodePools, KAITO Workspaces and AKS agent pools that can create GPU nodes: the GPU sizes they allow and how many GPUs they can bring up (a NodePool's GPU limit; otherwise its nodes times the GPUs of its size).</p>\n");
    if report.capacity.is_empty() {
        out.push_str("<p class=\"empty\">No GPU capacity objects were read.</p>\n</section>\n");
        return;
    }
    let by_policy = view
        .by_policy
        .iter()
        .map(|(name, idx)| (name.to_string(), view.tally(report, idx).capacity.1))
        .collect();
    out.push_str("<div class=\"chart-grid\">\n");
    bar_chart(
        out,
        "chart-capacity",
        "GPUs node pools with findings can bring up, by policy",
        "GPUs",
        by_policy,
    );
    let mut by_kind: BTreeMap<String, i64> = BTreeMap::new();
    for c in &report.capacity {
        *by_kind.entry(c.kind.clone()).or_default() += c.gpus.unwrap_or(0);
    }
    bar_chart(
        out,
        "chart-capacity-kind",
        "GPUs node pools can bring up, by kind (bounded ones)",
        "GPUs",
        by_kind.into_iter().collect(),
    );
    out.push_str("</div>\n");
    let mut rows: Vec<&CapacityObject> = report.capacity.iter().collect();
    rows.sort_by(|a, b| {
        let gpus = |c: &CapacityObject| c.gpus.unwrap_or(i64::MAX);
        b.findings
            .min(1)
            .cmp(&a.findings.min(1))
            .then(gpus(b).cmp(&gpus(a)))
            .then(a.name.cmp(&b.name))
    });
    out.push_str("<table id=\"capacity-objects\">\n<thead><tr><th>Object</th><th>GPU sizes</th><th class=\"num\">GPU limit</th><th class=\"num\">Nodes</th><th>Taints</th><th class=\"num\">GPUs</th><th>Findings</th></tr></thead>\n<tbody>\n");
    for c in rows.iter().take(MAX_ROWS) {
        let key = ObjectKey {
            kind: c.kind.clone(),
            namespace: c.namespace.clone(),
            name: c.name.clone(),
        };
        let skus = match c.skus.len() {
            0 => "<span class=\"muted\">none in the catalog</span>".to_string(),
            1..=3 => c
                .skus
                .iter()
                .map(|s| esc(s))
                .collect::<Vec<_>>()
                .join("<br>"),
            n => {
                let mut listed: Vec<String> =
                    c.skus.iter().take(MAX_SIZES).map(|s| esc(s)).collect();
                if n > MAX_SIZES {
                    listed.push(format!(
                        "<span class=\"muted\">and {} more</span>",
                        n - MAX_SIZES
                    ));
                }
                format!(
                    "<details><summary>{n} sizes</summary>{}</details>",
                    listed.join("<br>")
                )
            }
        };
        let taints = if c.taints.is_empty() && c.gpu_tainted {
            "<code>sku=gpu:NoSchedule</code> <span class=\"muted\">(set by KAITO)</span>"
                .to_string()
        } else if c.taints.is_empty() {
            "<span class=\"muted\">none</span>".to_string()
        } else {
            c.taints
                .iter()
                .map(|t| format!("<code>{}</code>", esc(t)))
                .collect::<Vec<_>>()
                .join("<br>")
        };
        let gpus = match c.gpus {
            Some(g) => fmt_int(g),
            None => "<span class=\"warn-text\">unbounded</span>".to_string(),
        };
        let findings = match view.by_object.get(&key) {
            Some(idx) => idx
                .iter()
                .map(|&i| {
                    let f = &report.findings[i];
                    format!(
                        "<span class=\"link\">{} <a href=\"#f-{i}\">{}</a></span>",
                        badge(f.action),
                        esc(&f.policy)
                    )
                })
                .collect::<Vec<_>>()
                .join("<br>"),
            None => "<span class=\"muted\">none</span>".to_string(),
        };
        let _ = writeln!(
            out,
            "<tr class=\"capacity\" data-kind=\"{}\" data-name=\"{}\" data-gpus=\"{}\" data-findings=\"{}\"><td class=\"object\">{}</td><td class=\"skus\">{skus}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{taints}</td><td class=\"num\">{gpus}</td><td class=\"links\">{findings}</td></tr>",
            esc(&c.kind),
            esc(&c.name),
            c.gpus.map_or_else(|| "unbounded".to_string(), |g| g.to_string()),
            c.findings,
            object_cell(&key),
            c.gpu_limit.map_or_else(|| "&mdash;".to_string(), fmt_int),
            c.nodes.map_or_else(|| "&mdash;".to_string(), fmt_int),
        );
    }
    out.push_str("</tbody>\n</table>\n");
    if rows.len() > MAX_ROWS {
        let _ = writeln!(
            out,
            "<p class=\"note\">{} of {} shown; <code>gpu-admission audit -o json</code> lists them all.</p>",
            fmt_int(MAX_ROWS as i64),
            fmt_int(rows.len() as i64)
        );
    }
    out.push_str("</section>\n");
}

/// Kueue flavors outside the tiers of the namespaces their ClusterQueues
/// serve; no section when there are none.
pub(super) fn kueue(out: &mut String, report: &Report) {
    if report.kueue.is_empty() {
        return;
    }
    out.push_str("<section id=\"kueue\">\n<h2>Kueue flavors outside namespace tiers</h2>\n");
    out.push_str("<p>Kueue writes a ResourceFlavor's node labels into every pod it admits on the flavor. These flavors select GPU sizes the tier of a namespace they serve does not allow: the pods Kueue admits from it are denied, and their workloads never start.</p>\n");
    out.push_str("<table id=\"kueue-flavors\">\n<thead><tr><th>ClusterQueue</th><th>Namespace</th><th>Tier</th><th>ResourceFlavor</th><th>GPU sizes outside the tier</th></tr></thead>\n<tbody>\n");
    for k in &report.kueue {
        let sizes = (k.sizes.iter().take(MAX_SIZES))
            .map(|s| esc(s))
            .collect::<Vec<_>>()
            .join(", ");
        let more = match k.sizes.len().saturating_sub(MAX_SIZES) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        let _ = writeln!(
            out,
            "<tr class=\"kueue\" data-flavor=\"{}\" data-namespace=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"skus\">{sizes}{more}</td></tr>",
            esc(&k.flavor),
            esc(&k.namespace),
            esc(&k.cluster_queue),
            esc(&k.namespace),
            esc(&k.tier),
            esc(&k.flavor),
        );
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}
