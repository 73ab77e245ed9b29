//! Audit of objects that already exist: which policies they violate, and
//! how many GPUs the violating objects hold (or, for node pools and other
//! capacity objects, can bring up); the cluster's GPU nodes and pools; and,
//! with a price file, what the waste costs.
pub mod budgets;
pub mod exceptions;
pub mod holding;
pub mod html;
pub mod kueue;
pub mod namespaces;
pub mod nodes;
pub mod policy_reports;
pub mod prices;
pub mod run;
pub mod utilization;

pub use exceptions::{ExceptedFinding, ExceptionEntry, InvalidException};
pub use holding::{holding, Holding, PodsRead};
pub use html::{render, ReportMeta, ReportSource};
pub use namespaces::NamespaceRow;
pub use nodes::{HeldPod, NodeReport, PodLedger};
pub use prices::{Money, Prices};

use crate::admission::Admission;
use crate::exceptions::Exception;
use crate::gpu::capacity::CapacityRequest;
use crate::gpu::dra_devices::is_dra_device_object;
use crate::gpu::DraDevices;
use crate::k8s::json::Pointer as _;
use crate::offline::build_request;
use crate::policy::VALIDATION_FAILURE_ANNOTATION;
use crate::review::{Operation, Response};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

/// One policy violated by one object.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub policy: String,
    /// `deny`, `warn` or `audit`: what the webhook would do to this object now.
    pub action: &'static str,
    pub api_version: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    pub message: String,
    /// GPUs the object holds: its pods bound to a node and not finished
    /// ([`holding`]); for a capacity object, the GPUs it can bring up (0
    /// when nothing bounds them).
    pub gpus: i64,
    /// GPUs its pods ask for and are not placed yet (pods not bound, and
    /// pods a controller wants and has not created).
    pub gpus_pending: i64,
}

/// A GPU capacity object (Karpenter NodePool, KAITO Workspace, ASO agent
/// pool...): what it can bring up, and how many findings it has.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityObject {
    pub api_version: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// The catalog GPU sizes it can create nodes of.
    pub skus: Vec<String>,
    /// A NodePool's GPU limit.
    pub gpu_limit: Option<i64>,
    /// Nodes it asks for (Workspace count, agent pool count or maxCount,
    /// NodePool replicas).
    pub nodes: Option<i64>,
    /// Taints of its nodes, `key=value:Effect`.
    pub taints: Vec<String>,
    /// Its nodes carry a GPU taint (KAITO taints its nodes itself).
    pub gpu_tainted: bool,
    /// GPUs it can bring up; `None` when nothing bounds them (a NodePool
    /// of GPU sizes with no GPU limit).
    pub gpus: Option<i64>,
    /// Findings on it (in [`Report::findings`]).
    pub findings: usize,
}

/// The object a finding is about, as the report groups findings.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectKey {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    fn new(kind: &str, namespace: &Option<String>, name: &str) -> ObjectKey {
        let (kind, namespace, name) = (kind.to_string(), namespace.clone(), name.to_string());
        ObjectKey {
            kind,
            namespace,
            name,
        }
    }
}

impl Finding {
    pub fn object(&self) -> ObjectKey {
        ObjectKey::new(&self.kind, &self.namespace, &self.name)
    }
}

impl CapacityObject {
    pub fn object(&self) -> ObjectKey {
        ObjectKey::new(&self.kind, &self.namespace, &self.name)
    }
}

/// The result of auditing a set of objects.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Objects read.
    pub objects: usize,
    /// Objects evaluated (objects owned by another object in the input are
    /// judged through their owner).
    pub evaluated: usize,
    /// Evaluated objects with no finding, per namespace ("" for cluster scope).
    pub passed: BTreeMap<String, usize>,
    /// GPUs held (pods bound to a node, not finished) by every evaluated
    /// pod and pod controller.
    pub gpus_held: i64,
    /// GPUs requested and not placed (pods not bound to a node, and pods
    /// controllers want and have not created) by them.
    pub gpus_pending: i64,
    /// How the GPUs of those objects were counted: objects asking for GPUs
    /// by way ([`holding::counted`]): `pod` (a Pod's own state), `pods` (a
    /// controller through its pods read), `status` (a controller whose
    /// pods were not read, by its status), `spec` (a workload custom
    /// resource whose pods were not read, by its spec).
    pub gpus_counted: BTreeMap<&'static str, usize>,
    /// GPUs held by the evaluated pods and pod controllers that violate
    /// some policy, each object counted once: the share of `gpus_held`
    /// that is waste.
    pub gpus_in_violation: i64,
    pub gpus_pending_in_violation: i64,
    /// GPUs per namespace that has workloads asking for GPUs
    /// ([`namespaces`]; cluster-scoped objects hold no pods and have no
    /// row): held, not placed and in violation as the totals above count
    /// them, idle and costs once utilization and prices are known.
    pub namespaces: BTreeMap<String, NamespaceRow>,
    /// GPUs the capacity objects can bring up (the bounded ones).
    pub capacity_gpus: i64,
    /// GPUs the capacity objects with a finding can bring up.
    pub capacity_gpus_in_violation: i64,
    pub findings: Vec<Finding>,
    /// Every GPU-capable capacity object, and any other with a finding.
    pub capacity: Vec<CapacityObject>,
    /// Kueue ResourceFlavors whose GPU sizes fall outside the tier of a
    /// namespace their ClusterQueue serves (left out when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kueue: Vec<kueue::FlavorOutsideTier>,
    /// GpuBudgets: each limit with what the namespaces it covers hold
    /// ([`budgets`]; left out when no budget was read).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<budgets::BudgetRow>,
    /// Budgets full with pods waiting, and ClusterQueues that disagree
    /// with budgets.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budget_findings: Vec<budgets::BudgetFinding>,
    /// What each namespace holds against budgets, as the run counts it.
    #[serde(skip)]
    pub budget_holdings: BTreeMap<String, budgets::Holdings>,
    /// The GPU nodes, when Nodes were read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeReport>,
    /// What the waste costs, with a price file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub money: Option<Money>,
    /// Every pod holding GPUs (controlled or not), for the sections that
    /// judge pods by what they do with them.
    #[serde(skip)]
    pub held_pods: Vec<HeldPod>,
    /// Idle GPU pods, when utilization was asked for (`--prometheus`,
    /// `--utilization`); says why when it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilization: Option<utilization::Utilization>,
    /// Policy results GpuPolicyExceptions let through: not findings, and
    /// not counted in the violation totals.
    pub excepted: Vec<ExceptedFinding>,
    /// The GpuPolicyExceptions known to the run (expiring ones first).
    pub exceptions: Vec<ExceptionEntry>,
    /// What the run could not tell of exceptions (none read, and why).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exception_notes: Vec<String>,
    /// Namespaces whose in-cluster report name another owner holds, with
    /// that owner (set by the periodic report's last write): their
    /// findings reach no report there.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub reports_held: BTreeMap<String, String>,
}

/// Evaluates `objects` as if each were created now; Nodes among them are
/// not evaluated but reported with the pods bound to them. One
/// [`run::Run`] fed the objects in the cluster's order.
pub fn audit(admission: &Admission, objects: &[Value]) -> Report {
    let mut run = run::Run::new(admission);
    let (nodes, rest): (Vec<&Value>, Vec<&Value>) = objects.iter().partition(|o| is_node(o));
    let (pods, others): (Vec<&Value>, Vec<&Value>) = rest
        .into_iter()
        .partition(|o| crate::k8s::workloads::is_pod(o));
    if !nodes.is_empty() {
        run.nodes(nodes.into_iter().cloned().collect());
    }
    run.objects(others.into_iter().cloned().collect());
    run.pods(pods.into_iter().cloned().collect());
    run.finish(&[])
}

/// Every GpuPolicyException `admission` honours: its lookup's, then the
/// policy folder's.
pub fn known_exceptions(admission: &Admission) -> Vec<Arc<Exception>> {
    let mut known = admission.exceptions().all();
    known.extend(admission.bundle().policies.exceptions().iter().cloned());
    known
}

/// The node report on `nodes`, with the GPUs `devices` serves on them,
/// and what `ledger` saw of the pods, now.
pub fn account_nodes(
    admission: &Admission,
    nodes: &[Value],
    devices: &DraDevices,
    ledger: &PodLedger,
) -> NodeReport {
    let placement = &admission.bundle().placement;
    nodes::account(
        nodes,
        devices,
        ledger,
        placement.catalog(),
        placement.gpu_resources(),
        k8s_openapi::jiff::Timestamp::now(),
    )
}

/// A core/v1 Node.
pub fn is_node(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && object.get("kind").and_then(Value::as_str) == Some("Node")
}

/// Ends a report whose utilization section (if any) is measured: the
/// cost of its waste at `prices`, and the idle GPUs and costs of each
/// namespace. `audit` (of files or of the cluster) and the periodic
/// report call it alike, so their figures agree.
pub fn conclude(report: &mut Report, prices: Option<&Prices>) {
    if let Some(prices) = prices {
        report.money = Some(prices::cost(report, prices));
        utilization::sizing::price(report, prices);
    }
    namespaces::complete(report);
}

/// The report on pods, controllers and capacity objects (Nodes are only
/// counted), and what the pods among them say about their nodes; a
/// controller whose pods are in `pods` is counted through them.
pub fn audit_workloads(
    admission: &Admission,
    objects: &[Value],
    pods: &PodsRead,
) -> (Report, PodLedger) {
    let uids: BTreeSet<&str> = objects
        .iter()
        .filter_map(|o| o.at("/metadata/uid").and_then(Value::as_str))
        .collect();
    let bundle = admission.bundle();
    let catalog = bundle.placement.catalog();
    let mut report = Report::default();
    let resources = bundle.placement.gpu_resources();
    let mut ledger = PodLedger::default();
    for object in objects {
        report.objects += 1;
        ledger.add(object, resources);
        if is_node(object)
            || is_dra_device_object(object)
            || exceptions::is_exception(object)
            || budgets::is_budget(object)
            || owned_by_input(object, &uids)
        {
            continue;
        }
        report.evaluated += 1;
        let req = build_request(object.clone(), None, Operation::Create, None);
        let namespace = req.namespace.clone();
        let outcome = admission.validate(&req);
        let excepted = crate::offline::excepted_results(&outcome.excepted);
        let violations = exceptions::split_excepted(violations(&outcome.response), &excepted);
        let capacity = CapacityRequest::from_object(object).map(|request| CapacityObject {
            api_version: crate::k8s::json::str_at(object, "/apiVersion").to_string(),
            kind: req.kind.kind.clone(),
            namespace: namespace.clone(),
            name: req.name.clone(),
            skus: request.gpu_skus(catalog),
            gpu_limit: request.gpu_limit,
            nodes: request.count,
            taints: request
                .pools()
                .iter()
                .flat_map(|p| &p.taints)
                .map(ToString::to_string)
                .collect(),
            gpu_tainted: if request.kind.holds_pools() {
                (request.pools.iter()).all(|p| p.tainted() || p.gpu_skus(catalog).is_empty())
            } else {
                request.tainted()
            },
            gpus: request.launchable_gpus(catalog),
            findings: violations.len(),
        });
        let holds = match &capacity {
            Some(c) => Holding {
                held: c.gpus.unwrap_or(0),
                pending: 0,
            },
            None => {
                // A workload custom resource in a state its document says
                // holds nothing (a finished RayJob, a failed PyTorchJob).
                let done = (bundle.policies.template_sources())
                    .source_of(object)
                    .is_some_and(|source| source.holds_nothing(object));
                let workload = if done { 0 } else { outcome.workload_gpus };
                if let Some(ns) = namespace.as_ref().filter(|_| holding::queued(object)) {
                    report.budget_holdings.entry(ns.clone()).or_default().queued += workload;
                }
                let per_pod = outcome.gpus_per_pod;
                let (holds, way) = match pods.of(object) {
                    _ if crate::k8s::workloads::is_pod(object) => {
                        (holding(object, per_pod, 0), holding::counted::POD)
                    }
                    Some(seen) => (
                        holding::through_pods(object, per_pod, workload, seen),
                        holding::counted::PODS,
                    ),
                    None if crate::k8s::workloads::template_kind_of(object).is_some() => {
                        (holding(object, per_pod, workload), holding::counted::STATUS)
                    }
                    None => (holding(object, per_pod, workload), holding::counted::SPEC),
                };
                if per_pod > 0 || workload > 0 || holds != Holding::default() {
                    *report.gpus_counted.entry(way).or_default() += 1;
                }
                holds
            }
        };
        match capacity {
            Some(c) => {
                report.capacity_gpus += c.gpus.unwrap_or(0);
                if !violations.is_empty() {
                    report.capacity_gpus_in_violation += c.gpus.unwrap_or(0);
                }
                if !c.skus.is_empty() || c.findings > 0 {
                    report.capacity.push(c);
                }
            }
            None => {
                report.gpus_held += holds.held;
                report.gpus_pending += holds.pending;
                if !violations.is_empty() {
                    report.gpus_in_violation += holds.held;
                    report.gpus_pending_in_violation += holds.pending;
                }
                if let Some(ns) = namespace.as_ref().filter(|_| holds != Holding::default()) {
                    let row = report.namespaces.entry(ns.clone()).or_default();
                    row.count(holds, !violations.is_empty());
                }
            }
        }
        let finding = Finding {
            policy: String::new(),
            action: "deny",
            api_version: crate::k8s::json::str_at(object, "/apiVersion").to_string(),
            kind: req.kind.kind.clone(),
            namespace: namespace.clone(),
            name: req.name.clone(),
            uid: None,
            message: String::new(),
            gpus: holds.held,
            gpus_pending: holds.pending,
        };
        if !excepted.is_empty() {
            (report.excepted).extend(exceptions::excepted_findings(&excepted, &finding));
        }
        if violations.is_empty() {
            *report
                .passed
                .entry(namespace.unwrap_or_default())
                .or_default() += 1;
            continue;
        }
        let uid = object.at("/metadata/uid").and_then(Value::as_str);
        for (policy, action, message) in violations {
            report.findings.push(Finding {
                policy,
                action,
                uid: uid.map(str::to_string),
                message,
                ..finding.clone()
            });
        }
    }
    report.kueue = kueue::flavors_outside_tiers(objects, &bundle.placement, admission.namespaces());
    (report, ledger)
}

/// Totals per policy, namespace and action, most GPUs first.
pub fn summary(report: &Report) -> Vec<SummaryRow> {
    let mut rows: BTreeMap<(String, String, &'static str), SummaryRow> = BTreeMap::new();
    for f in &report.findings {
        let key = (
            f.policy.clone(),
            f.namespace.clone().unwrap_or_default(),
            f.action,
        );
        let row = rows.entry(key).or_insert_with(|| SummaryRow {
            policy: f.policy.clone(),
            namespace: f.namespace.clone().unwrap_or_default(),
            action: f.action,
            violations: 0,
            gpus: 0,
        });
        row.violations += 1;
        row.gpus += f.gpus;
    }
    let mut rows: Vec<SummaryRow> = rows.into_values().collect();
    rows.sort_by(|a, b| b.gpus.cmp(&a.gpus).then(b.violations.cmp(&a.violations)));
    rows
}

/// One line of the summary table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SummaryRow {
    pub policy: String,
    pub namespace: String,
    pub action: &'static str,
    pub violations: usize,
    pub gpus: i64,
}

/// The text report: a summary table, the sentence per policy a platform
/// team reads first, then each finding.
pub fn render_text(report: &Report) -> String {
    let rows = summary(report);
    let mut out = String::new();
    let _ = write!(
        out,
        "{} objects read, {} evaluated, {} findings",
        report.objects,
        report.evaluated,
        report.findings.len()
    );
    if !report.excepted.is_empty() {
        let _ = write!(out, ", {} allowed by exceptions", report.excepted.len());
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "GPUs held (pods bound to a node, not finished): {}, {} of them by violating workloads; requested, not placed (pods not bound, or not created): {}, {} by violating workloads",
        report.gpus_held,
        report.gpus_in_violation,
        report.gpus_pending,
        report.gpus_pending_in_violation
    );
    if !report.gpus_counted.is_empty() {
        let counted = holding::counted_text(&report.gpus_counted);
        let _ = writeln!(out, "GPUs counted: {counted}");
    }
    out.push_str(&namespaces::render_text(report));
    if let Some(nodes) = &report.nodes {
        let _ = writeln!(
            out,
            "\nGPU nodes: {}, {} GPUs allocatable, {} requested, {} idle, {} unusable (reported unhealthy)",
            nodes.gpu_nodes,
            nodes.gpus_allocatable,
            nodes.gpus_requested,
            nodes.gpus_idle,
            nodes.gpus_unusable
        );
        for f in &nodes.findings {
            let _ = writeln!(
                out,
                "  Node {} ({}): [{}] {}",
                f.node, f.pool, f.rule, f.message
            );
        }
    }
    if let Some(money) = &report.money {
        let _ = writeln!(
            out,
            "\nCost per day at the prices of {} ({}{}): {:.2} {} held by violating workloads, {:.2} {} in idle node GPUs, {:.2} {} in unusable node GPUs, {}",
            money.price_date,
            money.price_source,
            if money.example { ", example prices" } else { "" },
            money.violations_per_day,
            money.currency,
            money.idle_nodes_per_day,
            money.currency,
            money.unusable_nodes_per_day,
            money.currency,
            money.idle_pods_text()
        );
    }
    out.push_str(&budgets::render_text(report));
    if !report.kueue.is_empty() {
        out.push_str("\nKueue flavors outside the tiers of the namespaces they serve:\n");
        for k in &report.kueue {
            let _ = writeln!(out, "  {}", k.message);
        }
    }
    if let Some(section) = &report.utilization {
        out.push_str(&utilization::render_text(section));
    }
    out.push_str(&exceptions::render_text(report));
    if rows.is_empty() {
        return out;
    }
    let width = |header: &str, of: fn(&SummaryRow) -> &str| {
        rows.iter()
            .map(|r| of(r).len())
            .fold(header.len(), usize::max)
    };
    let w_policy = width("POLICY", |r| &r.policy);
    let w_ns = width("NAMESPACE", |r| &r.namespace);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<w_policy$}  {:<w_ns$}  {:<6}  {:>10}  {:>9}",
        "POLICY", "NAMESPACE", "ACTION", "VIOLATIONS", "GPUS HELD"
    );
    for r in &rows {
        let ns = if r.namespace.is_empty() {
            "-"
        } else {
            &r.namespace
        };
        let _ = writeln!(
            out,
            "{:<w_policy$}  {:<w_ns$}  {:<6}  {:>10}  {:>9}",
            r.policy, ns, r.action, r.violations, r.gpus
        );
    }
    let mut per_policy: BTreeMap<&str, (i64, usize)> = BTreeMap::new();
    for r in &rows {
        let e = per_policy.entry(&r.policy).or_default();
        e.0 += r.gpus;
        e.1 += r.violations;
    }
    let _ = writeln!(out);
    for (policy, (gpus, violations)) in &per_policy {
        let _ = writeln!(
            out,
            "{gpus} GPUs held by {violations} objects violating {policy}"
        );
    }
    let _ = writeln!(out);
    for f in &report.findings {
        let ns = namespace_prefix(&f.namespace);
        let _ = writeln!(
            out,
            "{} {ns}{}: [{}] {}",
            f.kind, f.name, f.action, f.message
        );
    }
    out
}

/// `namespace/` before an object's name, nothing for a cluster-scoped one.
fn namespace_prefix(namespace: &Option<String>) -> String {
    namespace
        .as_deref()
        .map(|n| format!("{n}/"))
        .unwrap_or_default()
}

/// The report as policy reports in `schema` (one per namespace, and a
/// cluster-scoped one for cluster-scoped objects), made at `now_seconds`,
/// every result kept: [`policy_reports::reports`], the writer the
/// in-cluster reports use too.
pub fn policy_reports(
    report: &Report,
    now_seconds: i64,
    schema: policy_reports::Schema,
) -> Vec<Value> {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(now_seconds.max(0) as u64);
    policy_reports::reports(report, at, usize::MAX, schema)
}

/// Whether a controller in the input owns this object (a Deployment's
/// ReplicaSets and pods are judged through the Deployment).
fn owned_by_input(object: &Value, uids: &BTreeSet<&str>) -> bool {
    crate::k8s::workloads::controller_uid(object).is_some_and(|u| uids.contains(u))
}

/// (policy, action, message) for each violation in a `/validate` answer.
/// Denial and warning lines read `<policy>: <message>` (policy names cannot
/// hold a colon); Audit-only failures come from the audit annotation
/// Kubernetes defines for them. A violation both warned and audited is
/// reported once, as a warning.
fn violations(response: &Response) -> Vec<(String, &'static str, String)> {
    let mut out: Vec<(String, &'static str, String)> = Vec::new();
    let mut push = |line: &str, action: &'static str| {
        let (policy, message) = line.split_once(": ").unwrap_or(("", line));
        out.push((policy.to_string(), action, message.to_string()));
    };
    if !response.allowed {
        for line in response.message.as_deref().unwrap_or_default().lines() {
            push(line, "deny");
        }
    }
    for line in &response.warnings {
        push(line, "warn");
    }
    if let Some(json) = response
        .audit_annotations
        .get(VALIDATION_FAILURE_ANNOTATION)
    {
        let entries: Vec<Value> = serde_json::from_str(json).unwrap_or_default();
        for e in entries {
            let policy = e["policy"].as_str().unwrap_or_default().to_string();
            let message = e["message"].as_str().unwrap_or_default().to_string();
            let seen = out
                .iter()
                .any(|(p, _, m)| *p == policy && m.ends_with(message.as_str()));
            if !seen {
                out.push((policy, "audit", message));
            }
        }
    }
    out
}
