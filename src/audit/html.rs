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
use super::{Finding, ObjectKey, Report};
use crate::admission::Bundle;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

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

/// Bars a chart draws; the rest are summed into one last bar.
const MAX_BARS: usize = 12;
/// Rows of the top offenders table.
const TOP_OFFENDERS: usize = 25;
/// GPU sizes listed per capacity object (an unconstrained NodePool
/// allows every size of the catalog).
pub(super) const MAX_SIZES: usize = 8;
/// Finding rows per policy, and capacity rows: the ones holding the most
/// GPUs are shown, the rest counted (`audit -o json` lists them all).
pub(super) const MAX_ROWS: usize = 1_000;

/// The report as a self-contained HTML page.
pub fn render(report: &Report, meta: &ReportMeta) -> String {
    let view = View::new(report);
    let mut out = String::with_capacity(64 * 1024 + report.findings.len() * 400);
    out.push_str(HEAD);
    out.push_str(STYLE);
    out.push_str(BODY);
    header(&mut out, meta);
    super::html_exceptions::attention(&mut out, report);
    totals(&mut out, report);
    super::html_waste::money(&mut out, report);
    super::html_waste::nodes(&mut out, report);
    charts(&mut out, report, &view);
    offenders(&mut out, report, &view);
    policies(&mut out, report, &view, meta);
    super::html_exceptions::exceptions(&mut out, report);
    super::html_capacity::capacity(&mut out, report, &view);
    super::html_capacity::kueue(&mut out, report);
    if let Some(section) = &report.utilization {
        super::utilization::html::render(&mut out, section);
    }
    footer(&mut out, meta);
    out.push_str(TAIL);
    out
}

/// What the page groups: findings per object and per policy.
pub(super) struct View<'r> {
    /// Indexes into `report.findings` per object, in report order.
    pub(super) by_object: BTreeMap<ObjectKey, Vec<usize>>,
    /// Indexes per policy.
    pub(super) by_policy: BTreeMap<&'r str, Vec<usize>>,
    /// Objects that are capacity objects.
    capacity: BTreeSet<ObjectKey>,
}

impl<'r> View<'r> {
    fn new(report: &'r Report) -> View<'r> {
        let mut by_object: BTreeMap<ObjectKey, Vec<usize>> = BTreeMap::new();
        let mut by_policy: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, f) in report.findings.iter().enumerate() {
            by_object.entry(f.object()).or_default().push(i);
            by_policy.entry(f.policy.as_str()).or_default().push(i);
        }
        let capacity = report
            .capacity
            .iter()
            .map(|c| ObjectKey {
                kind: c.kind.clone(),
                namespace: c.namespace.clone(),
                name: c.name.clone(),
            })
            .collect();
        View {
            by_object,
            by_policy,
            capacity,
        }
    }

    /// The objects among the findings `indexes` and their GPUs, each
    /// object once.
    pub(super) fn tally(&self, report: &Report, indexes: &[usize]) -> Tally {
        let mut seen = BTreeSet::new();
        let (mut workloads, mut capacity) = ((0, 0), (0, 0));
        for &i in indexes {
            let f = &report.findings[i];
            let key = f.object();
            if seen.insert(key.clone()) {
                let slot = if self.capacity.contains(&key) {
                    &mut capacity
                } else {
                    &mut workloads
                };
                slot.0 += 1;
                slot.1 += f.gpus;
            }
        }
        Tally {
            workloads,
            capacity,
        }
    }
}

/// (objects, GPUs) of some findings: workloads, and capacity objects
/// (whose GPUs are the ones they can bring up).
pub(super) struct Tally {
    pub(super) workloads: (usize, i64),
    pub(super) capacity: (usize, i64),
}

fn header(out: &mut String, meta: &ReportMeta) {
    out.push_str("<header>\n<h1>GPU admission report</h1>\n");
    out.push_str("<p class=\"lede\">Which GPU workloads and node pools violate the admission policies, and how many GPUs they hold.</p>\n<dl class=\"meta\">\n");
    let _ = writeln!(
        out,
        "<dt>Generated</dt><dd id=\"meta-generated\"><time datetime=\"{0}\">{0}</time></dd>",
        esc(&meta.generated_at)
    );
    let source = match &meta.source {
        ReportSource::Cluster(url) => format!("cluster <code>{}</code>", esc(url)),
        ReportSource::Files(files) => {
            let shown: Vec<String> = files
                .iter()
                .take(5)
                .map(|f| format!("<code>{}</code>", esc(f)))
                .collect();
            let more = files.len().saturating_sub(shown.len());
            let noun = if files.len() == 1 { "file" } else { "files" };
            let mut s = format!("{noun} {}", shown.join(", "));
            if more > 0 {
                let _ = write!(s, " and {more} more");
            }
            s
        }
    };
    let _ = writeln!(
        out,
        "<dt>Objects from</dt><dd id=\"meta-source\">{source}</dd>"
    );
    let _ = writeln!(
        out,
        "<dt>Policy set</dt><dd id=\"meta-policies\">{} ({} policies), SHA-256 <code class=\"digest\" title=\"{}\">{}</code></dd>",
        esc(&meta.policy_set),
        meta.policies.len(),
        esc(&meta.policy_digest),
        esc(meta.policy_digest.get(..12).unwrap_or(&meta.policy_digest)),
    );
    let date = match &meta.catalog_date {
        Some(d) => format!("as of {}", esc(d)),
        None => "no date stated".to_string(),
    };
    let _ = writeln!(
        out,
        "<dt>SKU catalog</dt><dd id=\"meta-catalog\">{}, {date}</dd>\n</dl>\n</header>",
        esc(&meta.catalog)
    );
}

fn totals(out: &mut String, report: &Report) {
    let deny = report
        .findings
        .iter()
        .filter(|f| f.action == "deny")
        .count();
    let warn = report
        .findings
        .iter()
        .filter(|f| f.action == "warn")
        .count();
    let audit = report.findings.len() - deny - warn;
    let share = if report.gpus_held > 0 {
        report.gpus_in_violation as f64 / report.gpus_held as f64
    } else {
        0.0
    };
    out.push_str("<section id=\"totals\">\n<h2>Totals</h2>\n<div class=\"cards\">\n");
    card(
        out,
        "gpus-held",
        &fmt_int(report.gpus_held),
        &report.gpus_held.to_string(),
        "GPUs held",
        "bound to running or scheduled pods of the workloads read",
    );
    card(
        out,
        "gpus-pending",
        &fmt_int(report.gpus_pending),
        &report.gpus_pending.to_string(),
        "GPUs requested, not placed",
        &format!(
            "by Pending pods; {} of them by violating workloads",
            fmt_int(report.gpus_pending_in_violation)
        ),
    );
    card(
        out,
        "gpus-in-violation",
        &fmt_int(report.gpus_in_violation),
        &report.gpus_in_violation.to_string(),
        "GPUs held by violating workloads",
        "held, each object counted once",
    );
    card(
        out,
        "waste-share",
        &format!("{:.1}&#8239;%", share * 100.0),
        &format!("{share:.6}"),
        "share that is waste",
        "GPUs held by violating workloads of all GPUs held",
    );
    card(
        out,
        "findings",
        &fmt_int(report.findings.len() as i64),
        &report.findings.len().to_string(),
        "findings",
        &format!("{deny} deny, {warn} warn, {audit} audit"),
    );
    card(
        out,
        "evaluated",
        &fmt_int(report.evaluated as i64),
        &report.evaluated.to_string(),
        "objects evaluated",
        &format!(
            "of {} read; owned objects judged through their owner",
            fmt_int(report.objects as i64)
        ),
    );
    card(
        out,
        "capacity-gpus",
        &fmt_int(report.capacity_gpus),
        &report.capacity_gpus.to_string(),
        "GPUs node pools can bring up",
        &format!(
            "{} of them in pools with findings; {} unbounded",
            fmt_int(report.capacity_gpus_in_violation),
            report.capacity.iter().filter(|c| c.gpus.is_none()).count()
        ),
    );
    out.push_str("</div>\n");
    let _ = writeln!(
        out,
        "<span hidden id=\"total-objects\" data-value=\"{}\"></span><span hidden id=\"total-capacity-gpus-in-violation\" data-value=\"{}\"></span><span hidden id=\"total-gpus-pending-in-violation\" data-value=\"{}\"></span>",
        report.objects, report.capacity_gpus_in_violation, report.gpus_pending_in_violation
    );
    out.push_str("</section>\n");
}

fn card(out: &mut String, id: &str, shown: &str, value: &str, label: &str, note: &str) {
    let _ = writeln!(
        out,
        "<div class=\"card\"><div class=\"value\" id=\"total-{id}\" data-value=\"{}\">{shown}</div><div class=\"label\">{}</div><div class=\"note\">{}</div></div>",
        esc(value),
        esc(label),
        esc(note)
    );
}

fn charts(out: &mut String, report: &Report, view: &View) {
    let mut by_policy = Vec::new();
    for (name, idx) in &view.by_policy {
        by_policy.push((name.to_string(), view.tally(report, idx).workloads.1));
    }
    let mut by_namespace: BTreeMap<String, i64> = BTreeMap::new();
    for (key, idx) in &view.by_object {
        if view.capacity.contains(key) {
            continue;
        }
        let namespace = key.namespace.clone().unwrap_or_else(|| "(cluster)".into());
        *by_namespace.entry(namespace).or_default() += report.findings[idx[0]].gpus;
    }
    out.push_str("<section id=\"charts\">\n<h2>Where the GPUs of violating objects go</h2>\n");
    out.push_str("<p class=\"hint\">A workload that violates several policies counts under each of them; by namespace each counts once, so those bars add up to the GPUs held by violating workloads.</p>\n<div class=\"chart-grid\">\n");
    bar_chart(
        out,
        "chart-policy",
        "GPUs held by violating workloads, by policy",
        "GPUs",
        by_policy,
    );
    bar_chart(
        out,
        "chart-namespace",
        "GPUs held by violating workloads, by namespace",
        "GPUs",
        by_namespace.into_iter().collect(),
    );
    out.push_str("</div>\n</section>\n");
}

/// Draws a horizontal bar chart of `(label, value)`, largest first.
pub(super) fn bar_chart(
    out: &mut String,
    id: &str,
    title: &str,
    unit: &str,
    mut bars: Vec<(String, i64)>,
) {
    bars.retain(|(_, v)| *v > 0);
    bars.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let _ = writeln!(
        out,
        "<figure class=\"chart-box\">\n<figcaption>{}</figcaption>",
        esc(title)
    );
    if bars.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"empty\" id=\"{id}-empty\">None.</p>\n</figure>"
        );
        return;
    }
    if bars.len() > MAX_BARS {
        let rest = bars.split_off(MAX_BARS - 1);
        let sum = rest
            .iter()
            .map(|(_, v)| v)
            .fold(0i64, |a, v| a.saturating_add(*v));
        bars.push((format!("{} others", rest.len()), sum));
    }
    const WIDTH: i64 = 560;
    const LABEL: i64 = 200;
    const VALUE: i64 = 56;
    const ROW: i64 = 26;
    let max = bars.iter().map(|(_, v)| *v).max().unwrap_or(1).max(1);
    let height = ROW * bars.len() as i64 + 4;
    let _ = writeln!(
        out,
        "<svg class=\"chart\" id=\"{id}\" viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" role=\"img\" aria-label=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">",
        esc(title)
    );
    for (i, (label, value)) in bars.iter().enumerate() {
        let y = ROW * i as i64;
        let span = WIDTH - LABEL - VALUE - 8;
        let w = ((*value as f64 / max as f64) * span as f64)
            .round()
            .max(2.0) as i64;
        let shown = truncate(label, 28);
        let _ = writeln!(
            out,
            "<g class=\"bar\" data-label=\"{l}\" data-value=\"{value}\"><title>{l}: {value} {unit}</title><text class=\"bar-label\" x=\"{lx}\" y=\"{ty}\" text-anchor=\"end\">{s}</text><rect x=\"{LABEL}\" y=\"{ry}\" width=\"{w}\" height=\"16\" rx=\"2\"></rect><text class=\"bar-value\" x=\"{vx}\" y=\"{ty}\">{v}</text></g>",
            l = esc(label),
            lx = LABEL - 8,
            ty = y + 17,
            s = esc(&shown),
            ry = y + 5,
            vx = LABEL + w + 6,
            v = fmt_int(*value),
            unit = esc(unit),
        );
    }
    out.push_str("</svg>\n</figure>\n");
}

fn offenders(out: &mut String, report: &Report, view: &View) {
    let mut objects: Vec<(&ObjectKey, &Vec<usize>, i64)> = view
        .by_object
        .iter()
        .map(|(key, idx)| (key, idx, report.findings[idx[0]].gpus))
        .filter(|(_, _, gpus)| *gpus > 0)
        .collect();
    objects.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(b.0)));
    objects.truncate(TOP_OFFENDERS);
    out.push_str("<section id=\"offenders\">\n<h2>Top offenders</h2>\n");
    out.push_str("<p class=\"hint\">The objects holding the most GPUs (or, for node pools, able to bring up the most) while violating a policy, with what each policy says to change.</p>\n");
    if objects.is_empty() {
        out.push_str(
            "<p class=\"empty\">No object holding GPUs violates a policy.</p>\n</section>\n",
        );
        return;
    }
    out.push_str("<table id=\"top-offenders\">\n<thead><tr><th class=\"num\">#</th><th>Object</th><th class=\"num\">GPUs held</th><th>Findings</th></tr></thead>\n<tbody>\n");
    for (rank, (key, idx, gpus)) in objects.iter().enumerate() {
        let _ = write!(
            out,
            "<tr class=\"offender\" data-kind=\"{}\" data-namespace=\"{}\" data-name=\"{}\" data-gpus=\"{gpus}\"><td class=\"num\">{}</td><td class=\"object\">{}</td><td class=\"num\">{}</td><td><ul class=\"messages\">",
            esc(&key.kind),
            esc(key.namespace.as_deref().unwrap_or_default()),
            esc(&key.name),
            rank + 1,
            object_cell(key),
            fmt_int(*gpus),
        );
        for &i in idx.iter() {
            let f = &report.findings[i];
            let _ = write!(
                out,
                "<li>{} <a href=\"#f-{i}\" class=\"policy-name\">{}</a>: {}</li>",
                badge(f.action),
                esc(&f.policy),
                esc(&f.message)
            );
        }
        out.push_str("</ul></td></tr>\n");
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}

fn policies(out: &mut String, report: &Report, view: &View, meta: &ReportMeta) {
    let descriptions: BTreeMap<&str, Option<&str>> = meta
        .policies
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_deref()))
        .collect();
    let mut flagged: Vec<(&str, &Vec<usize>, Tally)> = view
        .by_policy
        .iter()
        .map(|(name, idx)| (*name, idx, view.tally(report, idx)))
        .collect();
    flagged.sort_by(|a, b| {
        let gpus = |t: &Tally| t.workloads.1 + t.capacity.1;
        gpus(&b.2)
            .cmp(&gpus(&a.2))
            .then(b.1.len().cmp(&a.1.len()))
            .then(a.0.cmp(b.0))
    });
    out.push_str("<section id=\"policies\">\n<h2>Policies</h2>\n");
    if flagged.is_empty() {
        out.push_str("<p class=\"empty\">No policy flags anything.</p>\n");
    }
    for (n, (name, idx, tally)) in flagged.iter().enumerate() {
        let (w_objects, w_gpus) = &tally.workloads;
        let (c_objects, c_gpus) = &tally.capacity;
        let objects = w_objects + c_objects;
        let gpus = w_gpus + c_gpus;
        let _ = writeln!(
            out,
            "<section class=\"policy\" id=\"policy-{}\" data-policy=\"{}\" data-objects=\"{objects}\" data-gpus=\"{gpus}\" data-findings=\"{}\">",
            anchor(name, n),
            esc(name),
            idx.len()
        );
        let actions = action_counts(report, idx);
        let _ = writeln!(out, "<h3><code>{}</code> {actions}</h3>", esc(name));
        match descriptions.get(name).copied().flatten() {
            Some(d) => {
                let _ = writeln!(out, "<p class=\"desc\">{}</p>", esc(d));
            }
            None if !descriptions.contains_key(name) => {
                out.push_str(
                    "<p class=\"desc muted\">Not in the policy set's list of policies.</p>\n",
                );
            }
            None => {}
        }
        let mut stats = format!(
            "Flags <strong>{}</strong> {} holding <strong>{}</strong> GPUs",
            fmt_int(*w_objects as i64),
            plural(*w_objects, "workload", "workloads"),
            fmt_int(*w_gpus)
        );
        if *c_objects > 0 {
            let _ = write!(
                stats,
                " and <strong>{}</strong> capacity {} able to bring up <strong>{}</strong>",
                fmt_int(*c_objects as i64),
                plural(*c_objects, "object", "objects"),
                fmt_int(*c_gpus)
            );
        }
        let _ = writeln!(out, "<p class=\"stats\">{stats}.</p>");
        let mut rows: Vec<usize> = idx.to_vec();
        rows.sort_by(|&a, &b| {
            let (fa, fb) = (&report.findings[a], &report.findings[b]);
            fb.gpus.cmp(&fa.gpus).then(a.cmp(&b))
        });
        let open = if rows.len() <= 20 { " open" } else { "" };
        let _ = writeln!(
            out,
            "<details{open}><summary>{} {}</summary>",
            fmt_int(rows.len() as i64),
            plural(rows.len(), "finding", "findings")
        );
        out.push_str("<table class=\"findings\">\n<thead><tr><th>Object</th><th class=\"num\">GPUs held</th><th>Action</th><th>Message</th></tr></thead>\n<tbody>\n");
        for &i in rows.iter().take(MAX_ROWS) {
            finding_row(out, i, &report.findings[i]);
        }
        out.push_str("</tbody>\n</table>\n");
        if rows.len() > MAX_ROWS {
            let _ = writeln!(
                out,
                "<p class=\"note\">The {} holding the most GPUs are shown of {}; <code>gpu-admission audit -o json</code> lists every finding.</p>",
                fmt_int(MAX_ROWS as i64),
                fmt_int(rows.len() as i64)
            );
        }
        out.push_str("</details>\n</section>\n");
    }
    let quiet: Vec<&(String, Option<String>)> = meta
        .policies
        .iter()
        .filter(|(n, _)| !view.by_policy.contains_key(n.as_str()))
        .collect();
    if !quiet.is_empty() {
        let _ = writeln!(
            out,
            "<h3 id=\"quiet-policies\">Policies with no findings ({})</h3>\n<table class=\"quiet\">\n<thead><tr><th>Policy</th><th>What it checks</th></tr></thead>\n<tbody>",
            quiet.len()
        );
        for (name, description) in quiet {
            let _ = writeln!(
                out,
                "<tr><td><code>{}</code></td><td>{}</td></tr>",
                esc(name),
                esc(description.as_deref().unwrap_or_default())
            );
        }
        out.push_str("</tbody>\n</table>\n");
    }
    out.push_str("</section>\n");
}

fn finding_row(out: &mut String, i: usize, f: &Finding) {
    let pending = if f.gpus_pending > 0 {
        format!(
            " <span class=\"muted\" title=\"requested, not placed\">+{} pending</span>",
            fmt_int(f.gpus_pending)
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "<tr class=\"finding\" id=\"f-{i}\" data-gpus-pending=\"{}\"><td class=\"object\">{}</td><td class=\"num\">{}{pending}</td><td>{}</td><td class=\"message\">{}</td></tr>",
        f.gpus_pending,
        object_cell(&f.object()),
        fmt_int(f.gpus),
        badge(f.action),
        esc(&f.message)
    );
}

fn footer(out: &mut String, meta: &ReportMeta) {
    let _ = writeln!(
        out,
        "<footer>\n<p>How GPUs are counted: <em>held</em> GPUs are bound to running or scheduled pods: a pod's while it runs or is bound to a node; a controller's per ready pod (ready replicas, a Job's ready active pods, a DaemonSet's ready pods, a CronJob's active Jobs). <em>Requested, not placed</em> GPUs belong to Pending pods not yet on a node, and to a controller's desired pods that are not ready. Suspended, completed and failed work holds none. Pods and ReplicaSets whose controller was read are counted through it. Node pools count the GPUs they can bring up, not GPUs in use; GPU nodes count what is allocatable and what pods bound to them request.</p>\n<p>Made by <code>gpu-admission {} audit -o html</code> at {}.</p>\n</footer>",
        env!("CARGO_PKG_VERSION"),
        esc(&meta.generated_at)
    );
}

fn action_counts(report: &Report, idx: &[usize]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for &i in idx {
        *counts.entry(report.findings[i].action).or_default() += 1;
    }
    ["deny", "warn", "audit"]
        .iter()
        .filter_map(|a| {
            counts
                .get(a)
                .map(|n| format!("{} {}", badge(a), fmt_int(*n as i64)))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub(super) fn badge(action: &str) -> String {
    let class = match action {
        "deny" => "deny",
        "warn" => "warn",
        _ => "audit",
    };
    format!("<span class=\"badge {class}\">{}</span>", esc(action))
}

pub(super) fn object_cell(key: &ObjectKey) -> String {
    let place = match &key.namespace {
        Some(ns) => format!("{}/", esc(ns)),
        None => String::new(),
    };
    format!(
        "<span class=\"kind\">{}</span> {place}<strong>{}</strong>",
        esc(&key.kind),
        esc(&key.name)
    )
}

/// A fragment id for a policy: its name where it is plain, always unique.
fn anchor(name: &str, n: usize) -> String {
    let plain: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    if plain.is_empty() || plain != name {
        format!("{n}-{plain}")
    } else {
        plain
    }
}

pub(super) fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max - 1).collect();
    t.push('…');
    t
}

/// `1234567` as `1,234,567`.
pub(super) fn fmt_int(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

const HEAD: &str = r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="generator" content="gpu-admission">
<title>GPU admission report</title>
<style>
"#;

const STYLE: &str = include_str!("report.css");

const BODY: &str = r#"</style>
</head>
<body>
"#;

const TAIL: &str = r#"<script>
window.addEventListener("beforeprint", function () {
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
});
</script>
</body>
</html>
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_text_and_attribute_values() {
        assert_eq!(
            esc(r#"<script>alert("x") & 'y'</script>"#),
            "&lt;script&gt;alert(&quot;x&quot;) &amp; &#39;y&#39;&lt;/script&gt;"
        );
    }

    #[test]
    fn numbers_have_thousands_separators() {
        assert_eq!(fmt_int(0), "0");
        assert_eq!(fmt_int(999), "999");
        assert_eq!(fmt_int(1_000), "1,000");
        assert_eq!(fmt_int(1_234_567), "1,234,567");
        assert_eq!(fmt_int(-4_096), "-4,096");
    }

    #[test]
    fn policy_anchors_are_plain_and_unique() {
        assert_eq!(anchor("gpu-keep-alive", 3), "gpu-keep-alive");
        assert_eq!(anchor("Odd Name", 4), "4-odd-name");
        assert_eq!(anchor("", 5), "5-");
    }

    #[test]
    fn charts_keep_a_dozen_bars_and_sum_the_rest() {
        let bars: Vec<(String, i64)> = (1..=20).map(|i| (format!("ns-{i:02}"), i)).collect();
        let mut out = String::new();
        bar_chart(&mut out, "c", "title <b>", "GPUs", bars);
        assert_eq!(out.matches("<g class=\"bar\"").count(), MAX_BARS);
        assert!(
            out.contains(r#"data-label="ns-20" data-value="20""#),
            "{out}"
        );
        // 11 largest shown (20..10), 1..9 summed.
        assert!(
            out.contains(r#"data-label="9 others" data-value="45""#),
            "{out}"
        );
        assert!(out.contains("title &lt;b&gt;"));
        let mut empty = String::new();
        bar_chart(&mut empty, "c", "t", "GPUs", vec![("a".into(), 0)]);
        assert!(!empty.contains("<svg"), "{empty}");
    }
}
