//! The page's parts on GpuPolicyExceptions: at the top, those that end
//! within a week and those already ended; then a section per exception
//! (what it matches, who asked, why, until when, what it let through in
//! this run) and the results exceptions let through.
use super::parts::{badge, object_cell, MAX_ROWS};
use crate::audit::{ExceptionEntry, ObjectKey, Report};
use crate::exceptions::EXPIRING_SOON;
use maud::{html, Markup};

/// The exceptions that need someone now: expiring within
/// [`EXPIRING_SOON`], and expired ones still in the cluster.
pub(super) fn attention(report: &Report) -> Markup {
    let soon: Vec<&ExceptionEntry> = (report.exceptions.iter())
        .filter(|e| e.expiring_soon)
        .collect();
    let expired: Vec<&ExceptionEntry> = (report.exceptions.iter())
        .filter(|e| e.state == "expired")
        .collect();
    if soon.is_empty() && expired.is_empty() {
        return html! {};
    }
    let days = EXPIRING_SOON.as_secs() / 86_400;
    let link =
        |e: &ExceptionEntry| html! { a href={ "#exception-" (anchor(e)) } { code { (e.id()) } } };
    let ends =
        |e: &ExceptionEntry| html! { time { (e.expires_at.as_deref().unwrap_or_default()) } };
    html! {
        section #exceptions-attention {
            h2 { "Policy exceptions that need attention" }
            ul {
                @for e in soon {
                    li.exception-expiring data-exception=(e.id()) {
                        span.badge.warn { "expiring" } " " (link(e)) " ends at " (ends(e))
                        " (within " (days) " days): what it lets through will be denied after that; renew it or fix the objects."
                    }
                }
                @for e in expired {
                    li.exception-expired data-exception=(e.id()) {
                        span.badge.deny { "expired" } " " (link(e)) " ended at " (ends(e))
                        " and lets nothing through: delete it."
                    }
                }
            }
        }
    }
}

/// The `id` of an exception's section.
fn anchor(e: &ExceptionEntry) -> String {
    format!("{}-{}", e.namespace, e.name)
}

/// A section per exception, then the results they let through.
pub(super) fn exceptions(report: &Report) -> Markup {
    if report.exceptions.is_empty()
        && report.excepted.is_empty()
        && report.exception_notes.is_empty()
    {
        return html! {};
    }
    html! {
        section #exceptions {
            h2 { "Policy exceptions" }
            p.hint { "GpuPolicyExceptions let the objects they match, in their own namespace, through the policies they name, until they expire. What they let through is not counted as a violation above." }
            @for note in &report.exception_notes {
                p.note.exception-note { (note) }
            }
            @if report.exceptions.is_empty() {
                p.empty { "No GpuPolicyExceptions were read." }
            }
            @for e in &report.exceptions { (entry(e)) }
            (excepted(report))
        }
    }
}

fn entry(e: &ExceptionEntry) -> Markup {
    html! {
        section.exception id={ "exception-" (anchor(e)) } data-exception=(e.id()) data-state=(e.state)
            data-let-through=(e.let_through.len()) {
            h3 {
                span.kind { "GpuPolicyException" } " " (e.namespace) "/" strong { (e.name) }
                @match (e.expiring_soon, e.state) {
                    (true, _) => { " " span.badge.warn { "expiring soon" } }
                    (_, "expired") => { " " span.badge.deny { "expired" } }
                    (_, "invalid") => { " " span.badge.deny { "invalid" } }
                    _ => {}
                }
            }
            @if !e.errors.is_empty() {
                p { "It does not read, and lets nothing through:" }
                ul { @for err in &e.errors { li { code { (err) } } } }
            } @else {
                dl.meta {
                    dt { "Policies" }
                    dd { @for (i, p) in e.policies.iter().enumerate() { @if i > 0 { ", " } code { (p) } } }
                    dt { "Matches" }
                    dd { code { (e.match_.describe()) } }
                    dt { "Reason" }
                    dd { (e.reason) }
                    dt { "Requested by" }
                    dd { (e.requested_by.as_deref().unwrap_or("(not recorded)")) }
                    dt { "Expires" }
                    dd { (e.expires_at.as_deref().unwrap_or("never")) " (" (e.state) ")" }
                }
                @if e.let_through.is_empty() {
                    p.empty { "It let nothing through in this run." }
                } @else {
                    p { "Let through in this run:" }
                    ul.let-through { @for line in e.let_through.iter().take(MAX_ROWS) { li { (line) } } }
                }
            }
        }
    }
}

/// The results exceptions let through, one row each.
fn excepted(report: &Report) -> Markup {
    if report.excepted.is_empty() {
        return html! {};
    }
    html! {
        h3 { "Allowed by exception (" (report.excepted.len()) ")" }
        table #excepted {
            thead { tr {
                th { "Object" } th { "Policy" } th { "Action" } th { "Message" } th { "Allowed by" } th.num { "GPUs" }
            } }
            tbody {
                @for f in report.excepted.iter().take(MAX_ROWS) {
                    @let key = ObjectKey::new(&f.kind, &f.namespace, &f.name);
                    tr.excepted data-policy=(f.policy) data-exception=(f.exception) {
                        td { (object_cell(&key)) }
                        td { code { (f.policy) } }
                        td { (badge(f.action)) }
                        td { (f.message) }
                        td { (f.allowed_by()) }
                        td.num { (f.gpus) }
                    }
                }
            }
        }
        @if report.excepted.len() > MAX_ROWS {
            p.note {
                (MAX_ROWS) " of " (report.excepted.len()) " are shown; " code { "gpu-admission audit -o json" }
                " lists them all."
            }
        }
    }
}
