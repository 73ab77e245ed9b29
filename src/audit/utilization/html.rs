//! The utilization section of the HTML report. Numbers a program may read:
//! `section#utilization[data-status]` (`measured` or `missing`),
//! `#total-idle-gpu-pods`, `#total-idle-gpus`, `#total-idle-gpu-hours`
//! (`data-value`), and `tr.idle-pod[data-namespace][data-pod][data-gpus][data-gpu-hours]`.
use super::Utilization;
use crate::audit::html::esc;
use std::fmt::Write as _;

/// Idle pods listed; the rest are counted (`audit -o json` lists them all).
const MAX_ROWS: usize = 1_000;
/// Pods without data named before the rest are counted.
const MAX_WITHOUT_DATA: usize = 50;

/// Appends the section to `out`.
pub fn render(out: &mut String, section: &Utilization) {
    let status = if section.measured.is_some() {
        "measured"
    } else {
        "missing"
    };
    let _ = writeln!(
        out,
        "<section id=\"utilization\" data-status=\"{status}\">\n<h2>Idle GPU pods</h2>"
    );
    let _ = writeln!(
        out,
        "<p class=\"hint\">Pods holding GPUs whose GPUs stayed under {}&#8239;% of use for the last {} (or since they started, for younger pods), from dcgm-exporter's series in {}. GPU-hours: GPUs times the hours each pod held them within the window.</p>",
        section.threshold_percent,
        esc(&section.window),
        esc(&section.source)
    );
    let Some(m) = &section.measured else {
        let _ = writeln!(
            out,
            "<p class=\"missing warn-text\" id=\"utilization-missing\">Utilization is missing from this report: {}</p>\n</section>",
            esc(section.missing.as_deref().unwrap_or("not measured"))
        );
        return;
    };
    out.push_str("<div class=\"cards\">\n");
    let cards = [
        (
            "idle-gpu-pods",
            m.idle_pods.len().to_string(),
            "idle GPU pods",
            format!("of {} pods holding GPUs", m.gpu_pods),
        ),
        (
            "idle-gpus",
            m.idle_gpus.to_string(),
            "GPUs held by idle pods",
            format!("peak use under {}&#8239;%", section.threshold_percent),
        ),
        (
            "idle-gpu-hours",
            format!("{:.1}", m.gpu_hours_wasted),
            "GPU-hours wasted",
            format!("over the last {}", esc(&section.window)),
        ),
    ];
    for (id, value, label, note) in cards {
        let _ = writeln!(
            out,
            "<div class=\"card\"><div class=\"value\" id=\"total-{id}\" data-value=\"{value}\">{value}</div><div class=\"label\">{label}</div><div class=\"note\">{note}</div></div>"
        );
    }
    out.push_str("</div>\n");
    let _ = writeln!(
        out,
        "<p class=\"stats\" id=\"utilization-stats\">Measured at <time datetime=\"{0}\">{0}</time> with <code>{1}</code>: {2} busy, {3} started within the last hour (not judged), {4} without utilization series (not judged).</p>",
        esc(&m.measured_at),
        esc(&m.metrics.join(", ")),
        m.busy_pods,
        m.recent_pods,
        m.without_data.len()
    );
    if m.idle_pods.is_empty() {
        out.push_str("<p class=\"empty\">No idle GPU pod.</p>\n");
    } else {
        out.push_str("<table id=\"idle-pods\">\n<thead><tr><th>Pod</th><th>Node</th><th class=\"num\">GPUs</th><th class=\"num\">Peak</th><th class=\"num\">Mean</th><th class=\"num\">Hours</th><th class=\"num\">GPU-hours</th><th>Metric</th></tr></thead>\n<tbody>\n");
        for p in m.idle_pods.iter().take(MAX_ROWS) {
            let _ = writeln!(
                out,
                "<tr class=\"idle-pod\" data-namespace=\"{ns}\" data-pod=\"{pod}\" data-gpus=\"{gpus}\" data-gpu-hours=\"{gh:.3}\"><td class=\"object\"><span class=\"kind\">Pod</span> {ns}/<strong>{pod}</strong></td><td>{node}</td><td class=\"num\">{gpus}</td><td class=\"num\">{peak:.1}&#8239;%</td><td class=\"num\">{mean:.1}&#8239;%</td><td class=\"num\">{hours:.1}</td><td class=\"num\">{gh:.1}</td><td><code>{metric}</code></td></tr>",
                ns = esc(&p.namespace),
                pod = esc(&p.pod),
                node = p.node.as_deref().map_or_else(|| "&mdash;".to_string(), esc),
                gpus = p.gpus,
                peak = p.peak_percent,
                mean = p.mean_percent,
                hours = p.hours,
                gh = p.gpu_hours,
                metric = p.metric,
            );
        }
        out.push_str("</tbody>\n</table>\n");
        if m.idle_pods.len() > MAX_ROWS {
            let _ = writeln!(
                out,
                "<p class=\"note\">The {MAX_ROWS} wasting the most GPU-hours are shown of {}; <code>gpu-admission audit -o json</code> lists them all.</p>",
                m.idle_pods.len()
            );
        }
    }
    if !m.without_data.is_empty() {
        let names: Vec<String> = (m.without_data.iter().take(MAX_WITHOUT_DATA))
            .map(|p| format!("<code>{}/{}</code>", esc(&p.namespace), esc(&p.name)))
            .collect();
        let more = m.without_data.len().saturating_sub(names.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "<details id=\"utilization-without-data\"><summary>{} pods holding GPUs have no utilization series</summary><p>{}{more}</p></details>",
            m.without_data.len(),
            names.join(", ")
        );
    }
    out.push_str("</section>\n");
}
