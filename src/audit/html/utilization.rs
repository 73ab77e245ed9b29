//! The utilization sections of the HTML report: GPU efficiency (which
//! the page opens with) and idle GPU pods. Numbers a program may read:
//! `section #efficiency[data-status]` and `#utilization[data-status]`
//! (`measured` or `missing`); `#total-gpu-used-share`,
//! `#total-gpu-seconds-allocated`, `#total-gpu-seconds-used`,
//! `#total-dram-active`, `#total-gpu-seconds-without-data`;
//! `tr.efficiency[data-by][data-name][data-pods][data-allocated][data-used][data-dram][data-without-data]`
//! (`data-by`: `class`, `namespace` or `kind`);
//! `tr.right-size[data-namespace][data-pod][data-choice][data-to][data-gpus-freed][data-per-day]`;
//! `#total-idle-gpu-pods`, `#total-idle-gpus`, `#total-idle-gpu-hours`
//! (`data-value`), and `tr.idle-pod[data-namespace][data-pod][data-gpus][data-gpu-hours]`.
use super::parts::{card, plural, MAX_ROWS};
use crate::audit::utilization::{Efficiency, Utilization};
use maud::{html, Markup};
use std::collections::BTreeMap;

/// Pods without data named before the rest are counted.
const MAX_WITHOUT_DATA: usize = 50;

pub(crate) fn section(section: &Utilization) -> Markup {
    let status = if section.measured.is_some() {
        "measured"
    } else {
        "missing"
    };
    let threshold = section.threshold_percent;
    html! {
        section #utilization data-status=(status) {
            h2 { "Idle GPU pods" }
            p.hint {
                "Pods holding GPUs whose GPUs stayed under " (threshold) "\u{202f}% of use for the last " (section.window)
                " (or since they started, for younger pods), from dcgm-exporter's series in " (section.source)
                ". GPU-hours: GPUs times the hours each pod held them within the window."
            }
            @match &section.measured {
                None => p.missing.warn-text #utilization-missing {
                    "Utilization is missing from this report: " (section.missing.as_deref().unwrap_or("not measured"))
                },
                Some(m) => {
                    @let (pods, hours) = (m.idle_pods.len(), format!("{:.1}", m.gpu_hours_wasted));
                    div.cards {
                        (card("idle-gpu-pods", pods, pods, "idle GPU pods", format!("of {} pods holding GPUs", m.gpu_pods)))
                        (card("idle-gpus", m.idle_gpus, m.idle_gpus, "GPUs held by idle pods",
                            format!("peak use under {threshold}\u{202f}%")))
                        (card("idle-gpu-hours", &hours, &hours, "GPU-hours wasted", format!("over the last {}", section.window)))
                    }
                    p.stats #utilization-stats {
                        "Measured at " time datetime=(m.measured_at) { (m.measured_at) } " with " code { (m.metrics.join(", ")) }
                        ": " (m.busy_pods) " busy, " (m.recent_pods) " started within the last hour (not judged), "
                        (m.without_data.len()) " without utilization series (not judged)."
                    }
                    @if m.idle_pods.is_empty() {
                        p.empty { "No idle GPU pod." }
                    } @else {
                        table #idle-pods {
                            thead { tr {
                                th { "Pod" } th { "Node" } th.num { "GPUs" } th.num { "Peak" } th.num { "Mean" }
                                th.num { "Hours" } th.num { "GPU-hours" } th { "Metric" }
                            } }
                            tbody {
                                @for p in m.idle_pods.iter().take(MAX_ROWS) {
                                    tr.idle-pod data-namespace=(p.namespace) data-pod=(p.pod) data-gpus=(p.gpus)
                                        data-gpu-hours=(format!("{:.3}", p.gpu_hours)) {
                                        td.object { span.kind { "Pod" } " " (p.namespace) "/" strong { (p.pod) } }
                                        td { (p.node.as_deref().unwrap_or("—")) }
                                        td.num { (p.gpus) }
                                        td.num { (format!("{:.1}\u{202f}%", p.peak_percent)) }
                                        td.num { (format!("{:.1}\u{202f}%", p.mean_percent)) }
                                        td.num { (format!("{:.1}", p.hours)) }
                                        td.num { (format!("{:.1}", p.gpu_hours)) }
                                        td { code { (p.metric) } }
                                    }
                                }
                            }
                        }
                        @if m.idle_pods.len() > MAX_ROWS {
                            p.note {
                                "The " (MAX_ROWS) " wasting the most GPU-hours are shown of " (m.idle_pods.len()) "; "
                                code { "gpu-admission audit -o json" } " lists them all."
                            }
                        }
                    }
                    @if !m.without_data.is_empty() {
                        details #utilization-without-data {
                            summary { (m.without_data.len()) " pods holding GPUs have no utilization series" }
                            p {
                                @for (i, p) in m.without_data.iter().take(MAX_WITHOUT_DATA).enumerate() {
                                    @if i > 0 { ", " }
                                    code { (p.namespace) "/" (p.name) }
                                }
                                @if m.without_data.len() > MAX_WITHOUT_DATA {
                                    " and " (m.without_data.len() - MAX_WITHOUT_DATA) " more"
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// GPU-seconds used against allocated: the cluster's, per workload class,
/// namespace and kind, with DRAM activity beside; then right-sizing.
pub(crate) fn efficiency(section: &Utilization) -> Markup {
    let Some(m) = &section.measured else {
        return html! {
            section #efficiency data-status="missing" {
                h2 { "GPU efficiency" }
                p.missing.warn-text { "Not measured: " (section.missing.as_deref().unwrap_or("not measured")) }
            }
        };
    };
    let e = &m.efficiency;
    let percent = |p: Option<f64>| p.map_or("—".to_string(), |p| format!("{p:.1}\u{202f}%"));
    let hours = |s: f64| format!("{:.1}", s / 3600.0);
    html! {
        section #efficiency data-status="measured" {
            h2 { "GPU efficiency" }
            p.hint {
                "GPU-seconds used of GPU-seconds allocated over the last " (section.window) ", from " (section.source)
                ". Allocated: each pod's GPUs times the seconds it held them within the window; used: allocated times its mean "
                "SM activity (" code { "DCGM_FI_PROF_SM_ACTIVE" } ") where exported, else engine activity, else "
                code { "DCGM_FI_DEV_GPU_UTIL" } ". Pods with no series are counted apart, not guessed."
            }
            div.cards {
                (card("gpu-used-share", format!("{:.3}", e.used_percent.unwrap_or(0.0)), percent(e.used_percent),
                    "of allocated GPU time used", format!("{} pods measured", e.pods)))
                (card("gpu-seconds-allocated", format!("{:.0}", e.gpu_seconds_allocated), hours(e.gpu_seconds_allocated),
                    "GPU-hours allocated", format!("{} GPUs", e.gpus)))
                (card("gpu-seconds-used", format!("{:.0}", e.gpu_seconds_used), hours(e.gpu_seconds_used),
                    "GPU-hours used", "by activity"))
                (card("dram-active", format!("{:.3}", e.dram_active_percent.unwrap_or(0.0)), percent(e.dram_active_percent),
                    "DRAM active", "memory bandwidth, weighted by GPU-seconds"))
                (card("gpu-seconds-without-data", format!("{:.0}", e.gpu_seconds_without_data), hours(e.gpu_seconds_without_data),
                    "GPU-hours without data", format!("{} {} without series", e.pods_without_data, plural(e.pods_without_data, "pod", "pods"))))
            }
            (rows("class", "By workload class", &m.by_class))
            (rows("namespace", "By namespace", &m.by_namespace))
            (rows("kind", "By workload kind", &m.by_kind))
            h3 { "Right-sizing" }
            p.hint {
                "Pods whose peaks over the window, grown by " (section.sizing.headroom_percent) "\u{202f}%, would fit a MIG profile of their GPU, "
                (section.sizing.shared_percent) "\u{202f}% of a time-sliced GPU, or a smaller size of their node's family. "
                "Memory from " code { "DCGM_FI_DEV_FB_USED" } "; pods without it are not judged."
                @if let Some(s) = &m.savings {
                    " Savings per day at the prices of " (s.price_date) " (" (s.price_source) ")."
                    @if s.example { " " strong.warn-text { "Example prices, not a quote." } }
                }
            }
            @if m.right_sizing.is_empty() {
                p.empty { "No pod would fit less than it holds." }
            } @else {
                table #right-sizing {
                    thead { tr {
                        th { "Pod" } th.num { "GPUs" } th { "Of size, fits" } th.num { "GPUs freed" } th.num { "Per day" }
                        th.num { "Peaks: activity, memory" }
                    } }
                    tbody {
                        @for r in m.right_sizing.iter().take(MAX_ROWS) {
                            tr.right-size data-namespace=(r.namespace) data-pod=(r.pod) data-choice=(r.choice) data-to=(r.to)
                                data-gpus-freed=(format!("{:.3}", r.gpus_freed)) data-per-day=(r.per_day.map_or(String::new(), |d| format!("{d:.2}"))) {
                                td.object { span.kind { (r.workload_kind.as_deref().unwrap_or("Pod")) } " " (r.namespace) "/" strong { (r.pod) } }
                                td.num { (r.gpus) }
                                td { (r.size) br; "\u{2192} " (r.choice) " " code { (r.to) } }
                                td.num { (format!("{:.2}", r.gpus_freed)) }
                                td.num {
                                    @match (r.per_day, &m.savings) {
                                        (Some(d), Some(s)) => { (format!("{d:.2}")) " " (s.currency) }
                                        _ => "—",
                                    }
                                }
                                td.num {
                                    (format!("{:.1}\u{202f}%", r.peak_percent)) " " code title=(r.metric) { (short(r.metric)) } br;
                                    (format!("{:.0} of {:.0} MiB", r.peak_memory_mib, r.gpu_memory_mib))
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One efficiency table: a row per name.
fn rows<K: AsRef<str>>(by: &str, title: &str, map: &BTreeMap<K, Efficiency>) -> Markup {
    let percent = |p: Option<f64>| p.map_or("—".to_string(), |p| format!("{p:.1}\u{202f}%"));
    html! {
        table.efficiency id={ "efficiency-by-" (by) } {
            caption { (title) }
            thead { tr {
                th { (by) } th.num { "Pods" } th.num { "GPUs" } th.num { "GPU-hours allocated" } th.num { "GPU-hours used" }
                th.num { "Used" } th.num { "DRAM active" } th { "Measured by" } th.num { "Without data" }
            } }
            tbody {
                @for (name, e) in map {
                    tr.efficiency data-by=(by) data-name=(name.as_ref()) data-pods=(e.pods)
                        data-allocated=(format!("{:.0}", e.gpu_seconds_allocated)) data-used=(format!("{:.0}", e.gpu_seconds_used))
                        data-dram=(e.dram_active_percent.map_or(String::new(), |d| format!("{d:.3}")))
                        data-without-data=(e.pods_without_data) {
                        td { (name.as_ref()) }
                        td.num { (e.pods) }
                        td.num { (e.gpus) }
                        td.num { (format!("{:.1}", e.gpu_seconds_allocated / 3600.0)) }
                        td.num { (format!("{:.1}", e.gpu_seconds_used / 3600.0)) }
                        td.num { (percent(e.used_percent)) }
                        td.num { (percent(e.dram_active_percent)) }
                        td { @for (i, metric) in e.metrics.keys().enumerate() { @if i > 0 { ", " } code title=(metric) { (short(metric)) } } }
                        td.num {
                            (e.pods_without_data) " " (plural(e.pods_without_data, "pod", "pods")) ", "
                            (format!("{:.1}", e.gpu_seconds_without_data / 3600.0)) " GPU-hours"
                        }
                    }
                }
            }
        }
    }
}

/// A DCGM field without its `DCGM_FI_PROF_` or `DCGM_FI_DEV_` prefix.
fn short(metric: &str) -> &str {
    (metric.strip_prefix("DCGM_FI_PROF_"))
        .or_else(|| metric.strip_prefix("DCGM_FI_DEV_"))
        .unwrap_or(metric)
}
