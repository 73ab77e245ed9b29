//! The page's parts on GpuPolicyExceptions: at the top, those that end
//! within a week and those already ended; then a section per exception
//! (what it matches, who asked, why, until when, what it let through in
//! this run) and the results exceptions let through.
use super::exceptions::ExceptionEntry;
use super::html::{badge, esc, object_cell, MAX_ROWS};
use super::{ObjectKey, Report};
use crate::exceptions::EXPIRING_SOON;
use std::fmt::Write as _;

/// The exceptions that need someone now: expiring within
/// [`EXPIRING_SOON`], and expired ones still in the cluster.
pub(super) fn attention(out: &mut String, report: &Report) {
    let soon: Vec<&ExceptionEntry> = report
        .exceptions
        .iter()
        .filter(|e| e.expiring_soon)
        .collect();
    let expired: Vec<&ExceptionEntry> = (report.exceptions.iter())
        .filter(|e| e.state == "expired")
        .collect();
    if soon.is_empty() && expired.is_empty() {
        return;
    }
    out.push_str("<section id=\"exceptions-attention\">\n<h2>Policy exceptions that need attention</h2>\n<ul>\n");
    let days = EXPIRING_SOON.as_secs() / 86_400;
    for e in soon {
        let _ = writeln!(
            out,
            "<li class=\"exception-expiring\" data-exception=\"{0}\"><span class=\"badge warn\">expiring</span> <a href=\"#exception-{1}\"><code>{0}</code></a> ends at <time>{2}</time> (within {days} days): what it lets through will be denied after that; renew it or fix the objects.</li>",
            esc(&e.id()),
            anchor(e),
            esc(e.expires_at.as_deref().unwrap_or_default()),
        );
    }
    for e in expired {
        let _ = writeln!(
            out,
            "<li class=\"exception-expired\" data-exception=\"{0}\"><span class=\"badge deny\">expired</span> <a href=\"#exception-{1}\"><code>{0}</code></a> ended at <time>{2}</time> and lets nothing through: delete it.</li>",
            esc(&e.id()),
            anchor(e),
            esc(e.expires_at.as_deref().unwrap_or_default()),
        );
    }
    out.push_str("</ul>\n</section>\n");
}

/// The `id` of an exception's section.
fn anchor(e: &ExceptionEntry) -> String {
    esc(&format!("{}-{}", e.namespace, e.name))
}

/// A section per exception, then the results they let through.
pub(super) fn exceptions(out: &mut String, report: &Report) {
    if report.exceptions.is_empty()
        && report.excepted.is_empty()
        && report.exception_notes.is_empty()
    {
        return;
    }
    out.push_str("<section id=\"exceptions\">\n<h2>Policy exceptions</h2>\n");
    out.push_str("<p class=\"hint\">GpuPolicyExceptions let the objects they match, in their own namespace, through the policies they name, until they expire. What they let through is not counted as a violation above.</p>\n");
    for note in &report.exception_notes {
        let _ = writeln!(out, "<p class=\"note exception-note\">{}</p>", esc(note));
    }
    if report.exceptions.is_empty() {
        out.push_str("<p class=\"empty\">No GpuPolicyExceptions were read.</p>\n");
    }
    for e in &report.exceptions {
        entry(out, e);
    }
    excepted(out, report);
    out.push_str("</section>\n");
}

fn entry(out: &mut String, e: &ExceptionEntry) {
    let flag = match (e.expiring_soon, e.state) {
        (true, _) => " <span class=\"badge warn\">expiring soon</span>",
        (_, "expired") => " <span class=\"badge deny\">expired</span>",
        (_, "invalid") => " <span class=\"badge deny\">invalid</span>",
        _ => "",
    };
    let _ = writeln!(
        out,
        "<section class=\"exception\" id=\"exception-{}\" data-exception=\"{}\" data-state=\"{}\" data-let-through=\"{}\">",
        anchor(e),
        esc(&e.id()),
        e.state,
        e.let_through.len()
    );
    let _ = writeln!(
        out,
        "<h3><span class=\"kind\">GpuPolicyException</span> {}/<strong>{}</strong>{flag}</h3>",
        esc(&e.namespace),
        esc(&e.name)
    );
    if !e.errors.is_empty() {
        out.push_str("<p>It does not read, and lets nothing through:</p>\n<ul>\n");
        for err in &e.errors {
            let _ = writeln!(out, "<li><code>{}</code></li>", esc(err));
        }
        out.push_str("</ul>\n</section>\n");
        return;
    }
    out.push_str("<dl class=\"meta\">\n");
    let policies: Vec<String> = (e.policies.iter())
        .map(|p| format!("<code>{}</code>", esc(p)))
        .collect();
    let _ = writeln!(out, "<dt>Policies</dt><dd>{}</dd>", policies.join(", "));
    let _ = writeln!(
        out,
        "<dt>Matches</dt><dd><code>{}</code></dd>",
        esc(&e.match_.describe())
    );
    let _ = writeln!(out, "<dt>Reason</dt><dd>{}</dd>", esc(&e.reason));
    let _ = writeln!(
        out,
        "<dt>Requested by</dt><dd>{}</dd>",
        esc(e.requested_by.as_deref().unwrap_or("(not recorded)"))
    );
    let _ = writeln!(
        out,
        "<dt>Expires</dt><dd>{} ({})</dd>",
        esc(e.expires_at.as_deref().unwrap_or("never")),
        e.state
    );
    out.push_str("</dl>\n");
    if e.let_through.is_empty() {
        out.push_str("<p class=\"empty\">It let nothing through in this run.</p>\n");
    } else {
        out.push_str("<p>Let through in this run:</p>\n<ul class=\"let-through\">\n");
        for line in e.let_through.iter().take(MAX_ROWS) {
            let _ = writeln!(out, "<li>{}</li>", esc(line));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</section>\n");
}

/// The results exceptions let through, one row each.
fn excepted(out: &mut String, report: &Report) {
    if report.excepted.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<h3>Allowed by exception ({})</h3>",
        report.excepted.len()
    );
    out.push_str("<table id=\"excepted\">\n<thead><tr><th>Object</th><th>Policy</th><th>Action</th><th>Message</th><th>Allowed by</th><th class=\"num\">GPUs</th></tr></thead>\n<tbody>\n");
    for f in report.excepted.iter().take(MAX_ROWS) {
        let key = ObjectKey {
            kind: f.kind.clone(),
            namespace: f.namespace.clone(),
            name: f.name.clone(),
        };
        let _ = writeln!(
            out,
            "<tr class=\"excepted\" data-policy=\"{}\" data-exception=\"{}\"><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            esc(&f.policy),
            esc(&f.exception),
            object_cell(&key),
            esc(&f.policy),
            badge(f.action),
            esc(&f.message),
            esc(&f.allowed_by()),
            f.gpus
        );
    }
    out.push_str("</tbody>\n</table>\n");
    if report.excepted.len() > MAX_ROWS {
        let _ = writeln!(
            out,
            "<p class=\"note\">{MAX_ROWS} of {} are shown; <code>gpu-admission audit -o json</code> lists them all.</p>",
            report.excepted.len()
        );
    }
}
