//! What the page's sections share: findings grouped per object and per
//! policy, row caps, numbers, badges, object names, cards and bar charts.
use crate::audit::{CapacityObject, ObjectKey, Report};
use maud::{html, Markup, Render};
use std::collections::{BTreeMap, BTreeSet};

/// Bars a chart draws; the rest are summed into one last bar.
const MAX_BARS: usize = 12;
/// GPU sizes listed per capacity object (an unconstrained NodePool
/// allows every size of the catalog).
pub(super) const MAX_SIZES: usize = 8;
/// Rows of a long table: the ones holding the most GPUs are shown, the
/// rest counted (`audit -o json` lists them all).
pub(super) const MAX_ROWS: usize = 1_000;

/// What the page groups: findings per object and per policy.
pub(super) struct View<'r> {
    /// Indexes into `report.findings` per object, in report order.
    pub(super) by_object: BTreeMap<ObjectKey, Vec<usize>>,
    /// Indexes per policy.
    pub(super) by_policy: BTreeMap<&'r str, Vec<usize>>,
    /// Objects that are capacity objects.
    pub(super) capacity: BTreeSet<ObjectKey>,
}

impl<'r> View<'r> {
    pub(super) fn new(report: &'r Report) -> View<'r> {
        let mut by_object: BTreeMap<ObjectKey, Vec<usize>> = BTreeMap::new();
        let mut by_policy: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, f) in report.findings.iter().enumerate() {
            by_object.entry(f.object()).or_default().push(i);
            by_policy.entry(f.policy.as_str()).or_default().push(i);
        }
        let capacity = report.capacity.iter().map(CapacityObject::object).collect();
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

/// A number card: `#total-{id}[data-value]` showing `shown`, its label
/// and a note.
pub(super) fn card(
    id: &str,
    value: impl Render,
    shown: impl Render,
    label: &str,
    note: impl Render,
) -> Markup {
    html! {
        div.card {
            div.value id={ "total-" (id) } data-value=(value) { (shown) }
            div.label { (label) }
            div.note { (note) }
        }
    }
}

pub(super) fn badge(action: &str) -> Markup {
    let class = match action {
        "deny" => "deny",
        "warn" => "warn",
        _ => "audit",
    };
    html! { span.badge.(class) { (action) } }
}

pub(super) fn object_cell(key: &ObjectKey) -> Markup {
    html! {
        span.kind { (key.kind) } " "
        @if let Some(ns) = &key.namespace { (ns) "/" }
        strong { (key.name) }
    }
}

/// Draws a horizontal bar chart of `(label, value)`, largest first.
pub(super) fn bar_chart(id: &str, title: &str, unit: &str, mut bars: Vec<(String, i64)>) -> Markup {
    const WIDTH: i64 = 560;
    const LABEL: i64 = 200;
    const VALUE: i64 = 56;
    const ROW: i64 = 26;
    bars.retain(|(_, v)| *v > 0);
    bars.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    if bars.len() > MAX_BARS {
        let rest = bars.split_off(MAX_BARS - 1);
        let sum = (rest.iter()).fold(0i64, |a, (_, v)| a.saturating_add(*v));
        bars.push((format!("{} others", rest.len()), sum));
    }
    let max = bars.iter().map(|(_, v)| *v).max().unwrap_or(1).max(1);
    let height = ROW * bars.len() as i64 + 4;
    let span = (WIDTH - LABEL - VALUE - 8) as f64;
    html! {
        figure.chart-box {
            figcaption { (title) }
            @if bars.is_empty() {
                p.empty id={ (id) "-empty" } { "None." }
            } @else {
                svg.chart id=(id) viewBox={ "0 0 " (WIDTH) " " (height) } width=(WIDTH) height=(height)
                    role="img" aria-label=(title) xmlns="http://www.w3.org/2000/svg" {
                    @for (i, (label, value)) in bars.iter().enumerate() {
                        @let y = ROW * i as i64;
                        @let w = (*value as f64 / max as f64 * span).round().max(2.0) as i64;
                        g.bar data-label=(label) data-value=(value) {
                            title { (label) ": " (value) " " (unit) }
                            text.bar-label x=(LABEL - 8) y=(y + 17) text-anchor="end" { (truncate(label, 28)) }
                            rect x=(LABEL) y=(y + 5) width=(w) height="16" rx="2" {}
                            text.bar-value x=(LABEL + w + 6) y=(y + 17) { (fmt_int(*value)) }
                        }
                    }
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_text_and_attribute_values() {
        // maud always quotes attributes with `"`, so `'` needs no escape.
        let s = r#"<script>alert("x") & 'y'</script>"#;
        let escaped = "&lt;script&gt;alert(&quot;x&quot;) &amp; 'y'&lt;/script&gt;";
        assert_eq!(
            html! { p title=(s) { (s) } }.into_string(),
            format!(r#"<p title="{escaped}">{escaped}</p>"#)
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
    fn charts_keep_a_dozen_bars_and_sum_the_rest() {
        let bars: Vec<(String, i64)> = (1..=20).map(|i| (format!("ns-{i:02}"), i)).collect();
        let out = bar_chart("c", "title <b>", "GPUs", bars).into_string();
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
        let empty = bar_chart("c", "t", "GPUs", vec![("a".into(), 0)]).into_string();
        assert!(!empty.contains("<svg"), "{empty}");
    }
}
