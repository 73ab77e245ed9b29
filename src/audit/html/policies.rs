//! The page's section on policies: per policy what it flags, with a row
//! per finding, then the policies that flag nothing; at the top, the
//! namespaces whose findings reach no in-cluster report.
use super::parts::{badge, fmt_int, object_cell, plural, Tally, View, MAX_ROWS};
use crate::audit::{Finding, Report};
use maud::{html, Markup};
use std::collections::BTreeMap;

/// The namespaces whose report name another owner holds, a line each
/// (nothing when there is none).
pub(super) fn reports_held(report: &Report) -> Markup {
    if report.reports_held.is_empty() {
        return html! {};
    }
    html! {
        section #reports-held {
            h2 { "Findings that reach no policy report" }
            ul {
                @for (namespace, owner) in &report.reports_held {
                    li.report-held data-namespace=(namespace) data-owner=(owner) {
                        span.badge.warn { "report name taken" } " namespace " code { (namespace) }
                        ": the report named " code { (crate::audit::policy_reports::REPORT_NAME) } " belongs to " code { (owner) }
                        ", so this namespace's findings are in no report; remove or rename that report."
                    }
                }
            }
        }
    }
}

/// `policies`: every policy loaded, in file order, with what it checks.
pub(super) fn policies(
    report: &Report,
    view: &View,
    policies: &[(String, Option<String>)],
) -> Markup {
    let descriptions: BTreeMap<&str, Option<&str>> = (policies.iter())
        .map(|(n, d)| (n.as_str(), d.as_deref()))
        .collect();
    let mut flagged: Vec<(&str, &Vec<usize>, Tally)> = (view.by_policy.iter())
        .map(|(name, idx)| (*name, idx, view.tally(report, idx)))
        .collect();
    flagged.sort_by(|a, b| {
        let gpus = |t: &Tally| t.workloads.1 + t.capacity.1;
        gpus(&b.2)
            .cmp(&gpus(&a.2))
            .then(b.1.len().cmp(&a.1.len()))
            .then(a.0.cmp(b.0))
    });
    let quiet: Vec<&(String, Option<String>)> = (policies.iter())
        .filter(|(n, _)| !view.by_policy.contains_key(n.as_str()))
        .collect();
    html! {
        section #policies {
            h2 { "Policies" }
            @if flagged.is_empty() {
                p.empty { "No policy flags anything." }
            }
            @for (n, (name, idx, tally)) in flagged.iter().enumerate() {
                (policy(report, n, name, idx, tally, descriptions.get(name).copied()))
            }
            @if !quiet.is_empty() {
                h3 #quiet-policies { "Policies with no findings (" (quiet.len()) ")" }
                table.quiet {
                    thead { tr { th { "Policy" } th { "What it checks" } } }
                    tbody {
                        @for (name, description) in quiet {
                            tr { td { code { (name) } } td { (description.as_deref().unwrap_or_default()) } }
                        }
                    }
                }
            }
        }
    }
}

/// The section of the `n`th policy flagging something; `description` is
/// `None` when the policy set does not list it.
fn policy(
    report: &Report,
    n: usize,
    name: &str,
    idx: &[usize],
    tally: &Tally,
    description: Option<Option<&str>>,
) -> Markup {
    let (w_objects, w_gpus) = tally.workloads;
    let (c_objects, c_gpus) = tally.capacity;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for &i in idx {
        *counts.entry(report.findings[i].action).or_default() += 1;
    }
    let actions: Vec<(&str, usize)> = (["deny", "warn", "audit"].into_iter())
        .filter_map(|a| counts.get(a).map(|n| (a, *n)))
        .collect();
    let mut rows: Vec<usize> = idx.to_vec();
    rows.sort_by(|&a, &b| {
        let (fa, fb) = (&report.findings[a], &report.findings[b]);
        fb.gpus.cmp(&fa.gpus).then(a.cmp(&b))
    });
    html! {
        section.policy id={ "policy-" (anchor(name, n)) } data-policy=(name) data-objects=(w_objects + c_objects)
            data-gpus=(w_gpus + c_gpus) data-findings=(idx.len()) {
            h3 {
                code { (name) } " "
                @for (k, (action, count)) in actions.iter().enumerate() {
                    @if k > 0 { " " }
                    (badge(action)) " " (fmt_int(*count as i64))
                }
            }
            @match description {
                Some(Some(d)) => p.desc { (d) },
                None => p.desc.muted { "Not in the policy set's list of policies." },
                Some(None) => {},
            }
            p.stats {
                "Flags " strong { (fmt_int(w_objects as i64)) } " " (plural(w_objects, "workload", "workloads"))
                " holding " strong { (fmt_int(w_gpus)) } " GPUs"
                @if c_objects > 0 {
                    " and " strong { (fmt_int(c_objects as i64)) } " capacity " (plural(c_objects, "object", "objects"))
                    " able to bring up " strong { (fmt_int(c_gpus)) }
                }
                "."
            }
            details open[rows.len() <= 20] {
                summary { (fmt_int(rows.len() as i64)) " " (plural(rows.len(), "finding", "findings")) }
                table.findings {
                    thead { tr { th { "Object" } th.num { "GPUs held" } th { "Action" } th { "Message" } } }
                    tbody {
                        @for &i in rows.iter().take(MAX_ROWS) {
                            (finding_row(i, &report.findings[i]))
                        }
                    }
                }
                @if rows.len() > MAX_ROWS {
                    p.note {
                        "The " (fmt_int(MAX_ROWS as i64)) " holding the most GPUs are shown of " (fmt_int(rows.len() as i64))
                        "; " code { "gpu-admission audit -o json" } " lists every finding."
                    }
                }
            }
        }
    }
}

fn finding_row(i: usize, f: &Finding) -> Markup {
    html! {
        tr.finding id={ "f-" (i) } data-gpus-pending=(f.gpus_pending) {
            td.object { (object_cell(&f.object())) }
            td.num {
                (fmt_int(f.gpus))
                @if f.gpus_pending > 0 {
                    " " span.muted title="requested, not placed" { "+" (fmt_int(f.gpus_pending)) " pending" }
                }
            }
            td { (badge(f.action)) }
            td.message { (f.message) }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_anchors_are_plain_and_unique() {
        assert_eq!(anchor("gpu-keep-alive", 3), "gpu-keep-alive");
        assert_eq!(anchor("Odd Name", 4), "4-odd-name");
        assert_eq!(anchor("", 5), "5-");
    }
}
