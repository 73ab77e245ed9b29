//! The utilization section of the HTML report. Numbers a program may read:
//! `section #utilization[data-status]` (`measured` or `missing`),
//! `#total-idle-gpu-pods`, `#total-idle-gpus`, `#total-idle-gpu-hours`
//! (`data-value`), and `tr.idle-pod[data-namespace][data-pod][data-gpus][data-gpu-hours]`.
use super::parts::{card, MAX_ROWS};
use crate::audit::utilization::Utilization;
use maud::{html, Markup};

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
