//! GpuBudgets in the audit: per budget and limit, the GPUs the namespaces
//! it covers hold against it (their pods not finished, each charged as
//! the server's cache charges it: [`crate::budgets::charge_landed`] with
//! the Nodes and the DRA claims read, the holding rule of
//! [`crate::k8s::workloads::pod_state`]), of those the pods not on a node
//! yet, and the GPUs of the workloads Kueue keeps queued there. A limit
//! reached while pods wait is a finding (`gpu-budget-full`), and so is a
//! ClusterQueue that disagrees with a budget of a namespace it serves
//! (`gpu-budget-kueue-mismatch`, [`budget_mismatches`]), and so is a
//! budget that does not read (`gpu-budget-unread`): the server ignores it.
use super::kueue::{flavors, served};
use super::Report;
use crate::budgets::{charge_landed, held_of, landed, Budget, Usage};
use crate::gpu::catalog::Catalog;
use crate::gpu::reach::GpuNodes;
use crate::gpu::request::parse_count;
use crate::gpu::GpuResources;
use crate::k8s::json::{labels_of, str_at, FieldError};
use crate::k8s::namespaces::with_name_label;
use crate::k8s::workloads::{group_kind, pod_state};
use crate::k8s::{ClaimLookup, NamespaceLookup};
use crate::placement::ProfileSet;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A limit reached while pods wait for nodes.
pub const FULL: &str = "gpu-budget-full";
/// A ClusterQueue and a budget of a namespace it serves disagree.
pub const MISMATCH: &str = "gpu-budget-kueue-mismatch";
/// A GpuBudget that does not read: it limits nothing.
pub const UNREAD: &str = "gpu-budget-unread";

/// What one namespace holds against budgets: GPUs of pods not finished
/// (`held`, pending ones included), of pods not on a node (`pending`), and
/// of Kueue's queued workloads (model not known until Kueue admits them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holdings {
    pub held: Usage,
    pub pending: Usage,
    pub queued: i64,
}

impl Holdings {
    /// Adds `pod`, if it asks for GPUs (its DRA claims looked up in
    /// `claims`) and is not finished (bound to a node of `sizes`, charged
    /// by its size; else, naming node pools of `nodes`, by theirs).
    pub fn pod(
        &mut self,
        pod: &Value,
        (sizes, nodes): (&HashMap<String, String>, Option<&GpuNodes>),
        claims: &dyn ClaimLookup,
        catalog: &Catalog,
        resources: &GpuResources,
    ) {
        let (held, pending) = pod_state(pod);
        if held + pending == 0 {
            return;
        }
        let landed = landed(pod, sizes);
        if let Some(charge) = charge_landed(pod, landed, nodes, claims, catalog, resources) {
            self.held.add(&charge, 1);
            self.pending.add(&charge, pending);
        }
    }

    pub fn add(&mut self, other: &Holdings) {
        self.held.merge(&other.held);
        self.pending.merge(&other.pending);
        self.queued += other.queued;
    }
}

/// GPUs counted against one limit, in one namespace or all it covers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counted {
    /// Of pods not finished, pending ones included (what the budget counts).
    pub held: i64,
    /// Of pods not on a node yet.
    pub pending: i64,
    /// Of workloads Kueue keeps queued (suspended with a queue name),
    /// whatever model it gives them.
    pub queued: i64,
}

/// One limit of a GpuBudget and what the namespaces it covers hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRow {
    /// The GpuBudget's namespace and name.
    pub namespace: String,
    pub budget: String,
    /// A GPU model, a VM size, or `total` (as the server's
    /// `gpu_admission_budget_*` metrics label it).
    pub model: String,
    pub limit: i64,
    #[serde(flatten)]
    pub counted: Counted,
    /// Per namespace it covers with GPU pods or queued workloads.
    pub namespaces: BTreeMap<String, Counted>,
}

/// A finding on a GpuBudget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetFinding {
    /// [`FULL`] or [`MISMATCH`].
    pub rule: &'static str,
    pub namespace: String,
    pub budget: String,
    /// The ClusterQueue that disagrees, for [`MISMATCH`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_queue: Option<String>,
    pub message: String,
}

impl BudgetFinding {
    pub fn new(rule: &'static str, budget: &Budget, message: String) -> BudgetFinding {
        let (namespace, budget) = (budget.namespace.clone(), budget.name.clone());
        BudgetFinding {
            rule,
            namespace,
            budget,
            cluster_queue: None,
            message,
        }
    }
}

/// Whether `object` is a GpuBudget.
pub fn is_budget(object: &Value) -> bool {
    group_kind(object) == Some((crate::budgets::GROUP, crate::budgets::KIND))
}

/// The rows of the GpuBudgets among `objects` over what
/// `report.budget_holdings` counted (namespace labels from `namespaces`),
/// their `gpu-budget-full` findings, and the ClusterQueues among
/// `objects` that disagree with them. A namespaceSelector is honoured
/// wherever the budget is, as `evaluate` honours it.
pub fn account(
    report: &mut Report,
    objects: &[Value],
    placement: &ProfileSet,
    namespaces: &dyn NamespaceLookup,
) {
    let mut budgets = Vec::new();
    for object in objects.iter().filter(|o| is_budget(o)) {
        match crate::budgets::read(object) {
            Ok(budget) => budgets.push(budget),
            Err(errors) => report.budget_findings.push(unread(object, &errors)),
        }
    }
    for budget in &budgets {
        let covered: Vec<(&String, &Holdings)> = (report.budget_holdings.iter())
            .filter(|(ns, _)| {
                let labels = labels_of(namespaces.namespace(ns).as_deref());
                budget.covers(ns, &with_name_label(ns, labels))
            })
            .collect();
        let limits = (budget.models.iter().map(|(k, l)| (k.as_str(), *l, 0)))
            .chain(budget.sizes.iter().map(|(k, l)| (k.as_str(), *l, 1)))
            .chain(budget.total.map(|l| ("total", l, 2)));
        for (model, limit, of) in limits {
            let against = |usage: &Usage| match of {
                0 => held_of(&usage.models, model),
                1 => held_of(&usage.sizes, model),
                _ => usage.total,
            };
            let mut row = BudgetRow {
                namespace: budget.namespace.clone(),
                budget: budget.name.clone(),
                model: model.to_string(),
                limit,
                counted: Counted::default(),
                namespaces: BTreeMap::new(),
            };
            for (ns, holdings) in &covered {
                let counted = Counted {
                    held: against(&holdings.held),
                    pending: against(&holdings.pending),
                    queued: holdings.queued,
                };
                row.counted.held += counted.held;
                row.counted.pending += counted.pending;
                row.counted.queued += counted.queued;
                row.namespaces.insert(ns.to_string(), counted);
            }
            let Counted { held, pending, .. } = row.counted;
            if held >= limit && pending > 0 {
                let what = if of == 2 {
                    "GPUs in total".to_string()
                } else {
                    format!("{model} GPUs")
                };
                let message = format!(
                    "{held}/{limit} {what} are held in the namespaces GpuBudget {}/{} covers, {pending} of them by pods not on a node yet: new pods asking for them are denied until some finish; free GPUs or raise the budget",
                    budget.namespace, budget.name
                );
                (report.budget_findings).push(BudgetFinding::new(FULL, budget, message));
            }
            report.budgets.push(row);
        }
    }
    let mismatches = budget_mismatches(objects, &budgets, placement, namespaces);
    report.budget_findings.extend(mismatches);
}

/// The finding on a GpuBudget that does not read: the server ignores it
/// (with a warning in its log), so it limits nothing.
fn unread(object: &Value, errors: &[FieldError]) -> BudgetFinding {
    let namespace = str_at(object, "/metadata/namespace");
    let budget = str_at(object, "/metadata/name");
    let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
    BudgetFinding {
        rule: UNREAD,
        namespace: namespace.to_string(),
        budget: budget.to_string(),
        cluster_queue: None,
        message: format!(
            "GpuBudget {namespace}/{budget} does not read ({}): the server ignores it, so it limits nothing until fixed",
            errors.join("; ")
        ),
    }
}

/// The text section: one line per limit, then the findings.
pub fn render_text(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if report.budgets.is_empty() && report.budget_findings.is_empty() {
        return out;
    }
    out.push_str("\nGPU budgets (held / limit, of them not on a node, queued by Kueue):\n");
    for r in &report.budgets {
        let Counted {
            held,
            pending,
            queued,
        } = r.counted;
        let per: Vec<String> = (r.namespaces.iter())
            .map(|(ns, c)| format!("{ns} {}", c.held))
            .collect();
        let _ = writeln!(
            out,
            "  {}/{} {}: {held}/{}, {pending} pending, {queued} queued ({})",
            r.namespace,
            r.budget,
            r.model,
            r.limit,
            per.join(", ")
        );
    }
    for f in &report.budget_findings {
        let _ = writeln!(out, "  [{}] {}", f.rule, f.message);
    }
    out
}

/// Where a ClusterQueue serving a namespace and a GpuBudget covering it
/// disagree (`gpu-budget-kueue-mismatch`): a flavor's nominalQuota of GPU
/// resources above the budget's limit for a model its nodeLabels select,
/// a flavor selecting a model a budget of per-model limits and no total
/// sets no limit for, or the queue's GPU quotas together above the
/// budget's total.
pub fn budget_mismatches(
    objects: &[Value],
    budgets: &[Budget],
    profiles: &ProfileSet,
    namespaces: &dyn NamespaceLookup,
) -> Vec<BudgetFinding> {
    let (catalog, resources) = (profiles.catalog(), profiles.gpu_resources());
    let flavors = flavors(objects);
    let mut out = Vec::new();
    for (queue, namespace, labels) in served(objects, namespaces) {
        let mut quotas: BTreeMap<&str, i64> = BTreeMap::new();
        for (flavor, resource, quota) in &queue.quotas {
            if let (true, Ok(n)) = (resources.matches(resource), parse_count(quota)) {
                *quotas.entry(flavor).or_default() += n as i64;
            }
        }
        for budget in budgets.iter().filter(|b| b.covers(namespace, &labels)) {
            let mut say = |lead: String, tail: &str| {
                let message = format!(
                    "ClusterQueue {} gives namespace {namespace} {lead} GpuBudget {}/{} {tail}: Kueue admits workloads whose pods the budget then denies, or lets run pods the budget does not bound; make each flavor's quota the budget's limit for its model (docs/budgets.md, Pairing with Kueue)",
                    queue.name, budget.namespace, budget.name
                );
                let cluster_queue = Some(queue.name.clone());
                let finding = BudgetFinding::new(MISMATCH, budget, message);
                out.push(BudgetFinding {
                    cluster_queue,
                    ..finding
                });
            };
            for (&flavor, &quota) in quotas.iter().filter(|(_, q)| **q > 0) {
                let Some(selects) = flavors.get(flavor) else {
                    continue;
                };
                let models: BTreeSet<String> = (selects.gpu_skus(catalog).iter())
                    .filter_map(|s| catalog.get(s))
                    .map(|s| s.gpu_model.clone())
                    .collect();
                for model in &models {
                    let lead = format!("{quota} GPUs of ResourceFlavor {flavor} ({model}),");
                    match (budget.models.iter()).find(|(m, _)| m.eq_ignore_ascii_case(model)) {
                        Some((m, &limit)) if quota > limit => {
                            say(lead, &format!("allows {limit} {m} GPUs"))
                        }
                        None if !budget.models.is_empty() && budget.total.is_none() => say(
                            lead,
                            "sets no limit for that model (it limits models and sets no total)",
                        ),
                        _ => {}
                    }
                }
            }
            let all: i64 = quotas.values().sum();
            if let Some(total) = budget.total.filter(|t| all > *t) {
                let lead = format!("{all} GPUs in all its flavors;");
                say(lead, &format!("allows {total} in total"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::StaticNamespaces;
    use serde_json::json;

    fn usage(model: &str, size: &str, gpus: i64) -> Usage {
        let mut usage = Usage::default();
        let charge = crate::budgets::Charge {
            model: model.into(),
            size: size.into(),
            gpus,
        };
        usage.add(&charge, 1);
        usage
    }

    /// A team budget covers the namespaces its selector picks, each
    /// counted per model, size and in total; a namespace budget only its
    /// own; a limit reached with pods waiting is a finding.
    #[test]
    fn rows_per_budget_limit_and_namespace() {
        let mut report = Report::default();
        let a100 = usage("A100", "Standard_NC24ads_A100_v4", 4);
        let t4 = usage("T4", "Standard_NC4as_T4_v3", 2);
        report.budget_holdings.insert(
            "nlp".into(),
            Holdings {
                held: a100.clone(),
                pending: usage("A100", "Standard_NC24ads_A100_v4", 1),
                queued: 8,
            },
        );
        let mut both = t4.clone();
        both.merge(&a100);
        report.budget_holdings.insert(
            "vision".into(),
            Holdings {
                held: both,
                ..Holdings::default()
            },
        );
        let mut namespaces = StaticNamespaces::new();
        namespaces.insert("nlp", [("team".to_string(), "ml".to_string())].into());
        namespaces.insert("vision", [("team".to_string(), "ml".to_string())].into());
        let objects = [
            json!({"apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuBudget",
                "metadata": {"name": "gpus", "namespace": "nlp"},
                "spec": {"models": {"a100": 4}}}),
            json!({"apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuBudget",
                "metadata": {"name": "team-ml", "namespace": "gpu-admission"},
                "spec": {"namespaceSelector": {"matchLabels": {"team": "ml"}},
                         "sizes": {"Standard_NC4as_T4_v3": 4}, "total": 16}}),
            json!({"apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuBudget",
                "metadata": {"name": "typo", "namespace": "vision"},
                "spec": {"models": {"a100": "four"}}}),
        ];
        let loaded = crate::bundle::load(&crate::bundle::PolicySource::Embedded).unwrap();
        account(&mut report, &objects, &loaded.bundle.placement, &namespaces);
        let rows: Vec<String> = (report.budgets.iter())
            .map(|r| {
                let Counted {
                    held,
                    pending,
                    queued,
                } = r.counted;
                let namespaces: Vec<&str> = r.namespaces.keys().map(String::as_str).collect();
                let (budget, model, limit) = (&r.budget, &r.model, r.limit);
                format!("{budget} {model} {held}/{limit} pending {pending} queued {queued} {namespaces:?}")
            })
            .collect();
        assert_eq!(
            rows,
            [
                r#"gpus a100 4/4 pending 1 queued 8 ["nlp"]"#,
                r#"team-ml Standard_NC4as_T4_v3 2/4 pending 0 queued 8 ["nlp", "vision"]"#,
                r#"team-ml total 10/16 pending 1 queued 8 ["nlp", "vision"]"#,
            ]
        );
        assert_eq!(report.budgets[2].namespaces["vision"].held, 6);
        let findings: Vec<(&str, &str)> = (report.budget_findings.iter())
            .map(|f| (f.rule, f.budget.as_str()))
            .collect();
        assert_eq!(findings, [(UNREAD, "typo"), (FULL, "gpus")]);
        assert_eq!(
            report.budget_findings[0].message,
            "GpuBudget vision/typo does not read (spec.models.a100: invalid type: string \"four\", expected i64): the server ignores it, so it limits nothing until fixed"
        );
        report.budget_findings.remove(0);
        assert!(
            report.budget_findings[0].message.starts_with(
                "4/4 a100 GPUs are held in the namespaces GpuBudget nlp/gpus covers, 1 of them by pods not on a node yet"
            ),
            "{}",
            report.budget_findings[0].message
        );
        let text = render_text(&report);
        assert!(
            text.contains("  nlp/gpus a100: 4/4, 1 pending, 8 queued (nlp 4)\n"),
            "{text}"
        );
    }
}
