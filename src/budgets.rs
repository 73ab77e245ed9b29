//! GPU budgets: `GpuBudget` objects (`gpu-admission.io/v1alpha1`) that cap
//! the GPUs a namespace, or a team of namespaces chosen by labels, holds
//! at once: per GPU model (`A100`, as the catalog names models), per VM
//! size, and in total. What one pod is charged against them, and the
//! judgement of a pod or a workload's templates against what is already
//! held. Knows nothing of the cluster: the cluster layer keeps the
//! budgets and what the namespaces hold, and hands them to [`judge`]
//! through a [`BudgetLookup`] (docs/budgets.md).
use crate::gpu::catalog::{Catalog, Sku};
use crate::gpu::facts::GpuFacts;
use crate::gpu::reach::{node_size, GpuNodes, NodeLookup};
use crate::gpu::GpuResources;
use crate::k8s::doc::{from_value, Object};
use crate::k8s::json::{labels_of, str_at, FieldError};
use crate::k8s::labels::{LabelSelector, LabelSelectorDoc};
use crate::k8s::namespaces::with_name_label;
use crate::k8s::workloads::{pod_is_finished, pod_spec};
use crate::k8s::{ClaimLookup, NamespaceLookup, NodeInfo};
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub const GROUP: &str = "gpu-admission.io";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "gpu-admission.io/v1alpha1";
pub const KIND: &str = "GpuBudget";
pub const RESOURCE: &str = "gpubudgets";

/// One `GpuBudget`.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    pub namespace: String,
    pub name: String,
    /// The namespaces it covers, by their labels; `None`: its own.
    pub selector: Option<LabelSelector>,
    /// GPUs held at once, per GPU model.
    pub models: BTreeMap<String, i64>,
    /// GPUs held at once, per VM size.
    pub sizes: BTreeMap<String, i64>,
    pub total: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SpecDoc {
    #[serde(default)]
    models: BTreeMap<String, i64>,
    #[serde(default)]
    sizes: BTreeMap<String, i64>,
    total: Option<i64>,
    namespace_selector: Option<LabelSelectorDoc>,
}

/// Reads one `GpuBudget` (as YAML or the API gives it); every error at
/// its field.
pub fn read(value: &Value) -> Result<Budget, Vec<FieldError>> {
    let object: Object<SpecDoc> = from_value(value).map_err(|e| vec![e])?;
    let mut errors = Vec::new();
    let Some(spec) = object.spec else {
        return Err(vec![FieldError::new("spec", "required")]);
    };
    let limits = (spec
        .models
        .iter()
        .map(|(k, v)| (format!("spec.models.{k}"), *v)))
    .chain(
        spec.sizes
            .iter()
            .map(|(k, v)| (format!("spec.sizes.{k}"), *v)),
    )
    .chain(spec.total.map(|t| ("spec.total".to_string(), t)));
    let mut any = false;
    for (field, limit) in limits {
        any = true;
        if limit < 0 {
            errors.push(FieldError::new(field, "must be 0 or more"));
        }
    }
    if !any {
        errors.push(FieldError::new(
            "spec",
            "set at least one of models, sizes or total",
        ));
    }
    let selector = (spec.namespace_selector).and_then(|doc| {
        let selector = doc.validate("spec.namespaceSelector");
        selector.map_err(|e| errors.push(e)).ok()
    });
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Budget {
        namespace: object.metadata.namespace.unwrap_or_default(),
        name: object.metadata.name,
        selector,
        models: spec.models,
        sizes: spec.sizes,
        total: spec.total,
    })
}

impl Budget {
    /// Whether it covers `namespace`, whose labels are `labels`.
    pub fn covers(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.covers_with(namespace, || labels)
    }

    /// [`Budget::covers`], the labels looked up only when a
    /// namespaceSelector needs them.
    pub fn covers_with<L: Borrow<BTreeMap<String, String>>>(
        &self,
        namespace: &str,
        labels: impl FnOnce() -> L,
    ) -> bool {
        match &self.selector {
            Some(selector) => selector.matches(labels().borrow()),
            None => namespace == self.namespace,
        }
    }

    /// The limits that apply to `charge`: (what, how many held, limit).
    fn limits(&self, charge: &Charge, used: &Usage) -> Vec<(String, i64, i64)> {
        let mut limits = Vec::new();
        for (mine, held, name) in [
            (&self.models, &used.models, &charge.model),
            (&self.sizes, &used.sizes, &charge.size),
        ] {
            let found = mine.iter().find(|(k, _)| k.eq_ignore_ascii_case(name));
            if let (Some((key, limit)), false) = (found, name.is_empty()) {
                limits.push((format!("{key} GPUs"), held_of(held, key), *limit));
            }
        }
        if let Some(limit) = self.total {
            limits.push(("GPUs in total".to_string(), used.total, limit));
        }
        limits
    }
}

/// What one pod is charged against budgets: its GPUs, counted as the size
/// of the node it is bound to, else as the most expensive size its node
/// selection allows ([`costlier`]), and that size's GPU model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Charge {
    /// Empty when the selection allows no catalog size of the pod's GPU
    /// maker: then only `total` limits apply.
    pub model: String,
    pub size: String,
    pub gpus: i64,
}

/// The charge of a pod with `facts`; none for a pod that asks for no GPU.
/// The sizes are those its node selection allows (after placement: the
/// pod's own pins and the profile's), of the maker its GPU resources name
/// (`amd.com/` or a DRA device class of `amd.com`: AMD, anything else NVIDIA).
pub fn charge(facts: &GpuFacts, catalog: &Catalog) -> Option<Charge> {
    charge_on(facts, catalog, None)
}

/// [`charge`] of a pod bound to a node (`spec.nodeName`) of VM size
/// `landed`, when its nodes are known: a catalog size of the pod's GPU
/// maker is what it is charged against, whatever its selection allows;
/// any other (`None`, a size the catalog does not list, another maker's)
/// changes nothing.
pub fn charge_on(facts: &GpuFacts, catalog: &Catalog, landed: Option<&str>) -> Option<Charge> {
    if facts.total <= 0 {
        return None;
    }
    let maker = maker(facts);
    let landed = landed.and_then(|size| catalog.get(size));
    let top = (landed.filter(|sku| sku.manufacturer.eq_ignore_ascii_case(maker)))
        .or_else(|| sizes(facts, catalog, maker).max_by(|a, b| costlier(a, b)));
    Some(charge_as(top, facts.total))
}

/// The maker the GPU resources of `facts` name (`amd.com/` or a DRA
/// device class of `amd.com`: AMD, anything else NVIDIA), as catalog
/// sizes spell their manufacturer (in any case).
fn maker(facts: &GpuFacts) -> &'static str {
    // `amd.com/gpu`, or a DRA device class such as `gpu.amd.com`.
    let amd_domain = |r: &str| {
        let domain = r.split('/').next().unwrap_or_default();
        domain == "amd.com" || domain.ends_with(".amd.com")
    };
    let amd = facts.request.resources().into_iter().all(amd_domain);
    if amd {
        "amd"
    } else {
        "nvidia"
    }
}

/// The catalog sizes a pod with `facts` may land on, of `maker` (its GPU
/// resources', [`maker`]): those [`charge`] picks from.
fn sizes<'f, 'c: 'f>(
    facts: &'f GpuFacts,
    catalog: &'c Catalog,
    maker: &'static str,
) -> impl Iterator<Item = &'c Sku> + 'f {
    (facts.skus.iter())
        .filter_map(|name| catalog.get(name))
        .filter(move |sku| sku.manufacturer.eq_ignore_ascii_case(maker))
}

/// The charge of a pod of `gpus` GPUs counted as `size` (none: in total only).
fn charge_as(size: Option<&Sku>, gpus: i64) -> Charge {
    Charge {
        model: size.map(|s| s.gpu_model.clone()).unwrap_or_default(),
        size: size.map(|s| s.name.clone()).unwrap_or_default(),
        gpus,
    }
}

/// The budget of `standings` that one more pod of `charge` would take past
/// a limit, if any.
fn blocking<'s>(standings: &'s [Standing], charge: &Charge) -> Option<&'s Budget> {
    let past = |s: &&Standing| {
        let limits = s.budget.limits(charge, &s.used);
        limits
            .iter()
            .any(|(_, held, limit)| held + charge.gpus > *limit)
    };
    standings.iter().find(past).map(|s| &*s.budget)
}

/// The sizes `/mutate` keeps a pod to (`serve --budget-narrowing`), and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Room<'c> {
    pub sizes: Vec<&'c Sku>,
    pub warning: String,
}

/// Of the sizes a pod with `facts` may land on (those [`charge`] picks
/// from), those where one pod of its GPUs, counted as that size and its
/// model, fits every budget covering `namespace`; `None` when all of them
/// fit, none does, or what is held cannot be counted (`/validate` then
/// judges the pod as it is). Records nothing.
pub fn with_room<'c>(
    budgets: &dyn BudgetLookup,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    facts: &GpuFacts,
    catalog: &'c Catalog,
) -> Option<Room<'c>> {
    let sizes: Vec<&'c Sku> = sizes(facts, catalog, maker(facts)).collect();
    let mut blocked = Vec::new();
    let counted = budgets.judge(namespace, labels, None, &mut |standings| {
        let by = |s: &Sku| blocking(standings, &charge_as(Some(s), facts.total));
        let name = |b: &Budget| format!("{}/{}", b.namespace, b.name);
        blocked = sizes.iter().map(|s| by(s).map(name)).collect();
        None
    });
    let (full, free): (Vec<_>, Vec<_>) = sizes.iter().zip(&blocked).partition(|(_, b)| b.is_some());
    if counted.is_err() || full.is_empty() || free.is_empty() || facts.total <= 0 {
        return None;
    }
    let distinct = |all: &mut dyn Iterator<Item = &str>| {
        Vec::from_iter(std::collections::BTreeSet::from_iter(all)).join(", ")
    };
    let by = distinct(&mut full.iter().filter_map(|(_, b)| b.as_deref()));
    let model = |of: &[(&&Sku, _)]| distinct(&mut of.iter().map(|(s, _)| s.gpu_model.as_str()));
    let sizes: Vec<&'c Sku> = free.iter().map(|(s, _)| **s).collect();
    let names = Vec::from_iter(sizes.iter().map(|s| s.name.as_str())).join(", ");
    let plural = if facts.total == 1 { "" } else { "s" };
    let warning = format!(
        "GpuBudget {by} has no room on {} for this pod's {} GPU{plural}; its node affinity was narrowed to the sizes with room: {} ({names})",
        model(&full), facts.total, model(&free)
    );
    Some(Room { sizes, warning })
}

/// The VM size of each Node among `objects` that says it, by name.
pub fn node_sizes<'a>(objects: impl IntoIterator<Item = &'a Value>) -> HashMap<String, String> {
    let nodes = objects.into_iter().filter(|o| o["kind"] == "Node");
    (nodes.map(NodeInfo::from_value))
        .filter_map(|n| Some((n.name.clone(), node_size(&n)?.to_string())))
        .collect()
}

/// [`charge_on`] of `pod` as it is held, bound to a node of VM size
/// `landed` (if known), the GPUs of its DRA claims looked up in `claims`
/// counted as admission counts them: what every count of what is held
/// charges (the server's cache, the audit, the offline commands). Not
/// bound to a node of known size, with the cluster's GPU nodes known
/// (`nodes`), a pod whose selection names node pools or nodes is charged
/// over their sizes, as admission narrows it
/// ([`GpuFacts::narrow_to_named`]).
pub fn charge_landed(
    pod: &Value,
    landed: Option<&str>,
    nodes: Option<&GpuNodes>,
    claims: &dyn ClaimLookup,
    catalog: &Catalog,
    resources: &GpuResources,
) -> Option<Charge> {
    let mut facts = GpuFacts::claiming(pod, claims, catalog, resources);
    if let (None, Some(set), Some(spec)) = (landed, nodes, pod_spec(pod)) {
        if facts.total > 0 {
            facts.narrow_to_named(spec, set, catalog);
        }
    }
    charge_on(&facts, catalog, landed)
}

/// The VM size of the node `pod` is bound to, in `sizes` ([`node_sizes`]).
pub fn landed<'s>(pod: &Value, sizes: &'s HashMap<String, String>) -> Option<&'s str> {
    sizes.get(str_at(pod, "/spec/nodeName")).map(String::as_str)
}

/// The order "more expensive" follows (the catalog has no prices): a
/// premium GPU (A100, H100, H200, GB200/GB300, MI300X) first, then more
/// GPU memory per GPU, then more GPUs per VM, then the name.
pub fn costlier(a: &Sku, b: &Sku) -> std::cmp::Ordering {
    let per_gpu = |s: &Sku| s.gpu_memory_gib.unwrap_or(0.0) / s.gpus.max(f64::MIN_POSITIVE);
    (a.premium.cmp(&b.premium))
        .then(per_gpu(a).total_cmp(&per_gpu(b)))
        .then(a.gpus.total_cmp(&b.gpus))
        .then(b.name.cmp(&a.name))
}

/// GPUs held, per model, per size and in total.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub models: BTreeMap<String, i64>,
    pub sizes: BTreeMap<String, i64>,
    pub total: i64,
}

impl Usage {
    /// Adds `times` pods of `charge` (negative: takes them away).
    pub fn add(&mut self, charge: &Charge, times: i64) {
        let gpus = charge.gpus.saturating_mul(times);
        for (map, key) in [
            (&mut self.models, &charge.model),
            (&mut self.sizes, &charge.size),
        ] {
            if key.is_empty() {
                continue;
            }
            let held = map.entry(key.clone()).or_default();
            *held += gpus;
            if *held == 0 {
                map.remove(key);
            }
        }
        self.total += gpus;
    }

    /// Adds what `other` holds.
    pub fn merge(&mut self, other: &Usage) {
        for (mine, theirs) in [
            (&mut self.models, &other.models),
            (&mut self.sizes, &other.sizes),
        ] {
            for (key, gpus) in theirs {
                *mine.entry(key.clone()).or_default() += gpus;
            }
        }
        self.total += other.total;
    }
}

/// A budget that covers a request's namespace, and what the namespaces it
/// covers hold now.
#[derive(Clone, Debug)]
pub struct Standing {
    pub budget: Arc<Budget>,
    pub used: Usage,
}

/// A pod admitted: recorded until the cluster's pods show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub namespace: String,
    pub name: String,
    pub charge: Charge,
}

/// Where budgets and what is held are looked up.
pub trait BudgetLookup: Send + Sync {
    /// Whether some budget covers `namespace` (labels `labels`).
    fn covers(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool;

    /// Calls `judge` with the budgets covering `namespace` and what the
    /// namespaces each covers hold (the pods the cluster shows, plus those
    /// admitted here and not shown yet, but `pod`, the one judged, should
    /// it be judged again); the pod it returns is recorded as admitted
    /// before another request is judged. `Err` (why) when what is held
    /// cannot be counted.
    fn judge(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        pod: Option<&str>,
        judge: &mut dyn FnMut(&[Standing]) -> Option<Admitted>,
    ) -> Result<(), String>;
}

/// Budgets known up front with what is held (none by default: no budget
/// anywhere); each pod admitted is added to what the budgets covering its
/// namespace hold.
#[derive(Default)]
pub struct StaticBudgets {
    standings: std::sync::Mutex<Vec<Standing>>,
}

impl StaticBudgets {
    pub fn new(standings: Vec<Standing>) -> StaticBudgets {
        StaticBudgets {
            standings: std::sync::Mutex::new(standings),
        }
    }

    /// The budgets and what they hold now.
    pub fn standings(&self) -> Vec<Standing> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Standing>> {
        (self.standings.lock()).unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl BudgetLookup for StaticBudgets {
    fn covers(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.lock()
            .iter()
            .any(|s| s.budget.covers(namespace, labels))
    }

    fn judge(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        _: Option<&str>,
        judge: &mut dyn FnMut(&[Standing]) -> Option<Admitted>,
    ) -> Result<(), String> {
        let mut all = self.lock();
        let covering = |s: &&mut Standing| s.budget.covers(namespace, labels);
        let mine: Vec<Standing> = all.iter_mut().filter(covering).map(|s| s.clone()).collect();
        if let Some(admitted) = judge(&mine) {
            for standing in all.iter_mut().filter(covering) {
                standing.used.add(&admitted.charge, 1);
            }
        }
        Ok(())
    }
}

impl StaticBudgets {
    /// The GpuBudgets among `objects` that read, each holding the GPUs of
    /// the Pods among them that are not finished in the namespaces it
    /// covers (labels from `namespaces`; a pod bound to one of the Nodes
    /// among them charged by its size, one naming node pools the `nodes`
    /// admission judges with know over their sizes, its DRA claims looked
    /// up in `claims`): what `evaluate` reads of a manifest and of a dump
    /// of the cluster. A namespaceSelector is honoured wherever the budget
    /// is.
    pub fn of_objects(
        objects: &[&Value],
        namespaces: &dyn NamespaceLookup,
        claims: &dyn ClaimLookup,
        nodes: Option<&dyn NodeLookup>,
        catalog: &Catalog,
        resources: &GpuResources,
    ) -> StaticBudgets {
        let kind = |o: &Value, k: &str| o.get("kind").and_then(Value::as_str) == Some(k);
        let labels = |ns: &str| with_name_label(ns, labels_of(namespaces.namespace(ns).as_deref()));
        let sizes = node_sizes(objects.iter().copied());
        let snapshot = nodes.and_then(NodeLookup::nodes);
        let set = snapshot.as_ref().map(|s| s.gpu_nodes(resources, catalog));
        let held: Vec<(String, BTreeMap<String, String>, Charge)> = (objects.iter())
            .filter(|o| kind(o, "Pod") && !pod_is_finished(o))
            .filter_map(|pod| {
                let landed = landed(pod, &sizes);
                let charge = charge_landed(pod, landed, set.as_ref(), claims, catalog, resources)?;
                let ns = str_at(pod, "/metadata/namespace");
                Some((ns.to_string(), labels(ns), charge))
            })
            .collect();
        let standings = (objects.iter())
            .filter(|o| kind(o, KIND))
            .filter_map(|o| read(o).ok())
            .map(|budget| {
                let mut used = Usage::default();
                for (ns, labels, charge) in &held {
                    if budget.covers(ns, labels) {
                        used.add(charge, 1);
                    }
                }
                Standing {
                    budget: Arc::new(budget),
                    used,
                }
            })
            .collect();
        StaticBudgets::new(standings)
    }
}

/// Pods asked for at once: one pod (`replicas` 1, recorded when
/// admitted), or the pods of a workload's template.
#[derive(Clone, Debug)]
pub struct Ask {
    /// Put before messages about it (`Deployment train: `); empty for a pod.
    pub prefix: String,
    pub charge: Charge,
    pub replicas: i64,
}

/// What the budgets make of a request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    pub denials: Vec<String>,
    pub warnings: Vec<String>,
}

/// Judges `asks` against the budgets covering `namespace`: a pod that
/// would take some limit past it is denied; a template whose one pod
/// would is denied, one whose replicas could not all fit is warned about.
/// `pod` (the pod's name, for a pod CREATE that is not a dry run) is
/// recorded as admitted when nothing is denied.
pub fn judge(
    budgets: &dyn BudgetLookup,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    asks: &[Ask],
    pod: Option<&str>,
) -> Verdict {
    let mut verdict = Verdict::default();
    let counted = budgets.judge(namespace, labels, pod, &mut |standings| {
        for ask in asks {
            judge_ask(standings, ask, &mut verdict);
        }
        let name = pod.filter(|_| verdict.denials.is_empty())?;
        Some(Admitted {
            namespace: namespace.to_string(),
            name: name.to_string(),
            charge: asks.first()?.charge.clone(),
        })
    });
    if let Err(why) = counted {
        verdict.denials.push(format!(
            "gpu-admission: a GpuBudget covers namespace {namespace} but the GPUs it holds cannot be counted ({why}); retry once the server has listed the cluster's pods"
        ));
    }
    verdict
}

fn judge_ask(standings: &[Standing], ask: &Ask, verdict: &mut Verdict) {
    let Ask {
        prefix,
        charge,
        replicas,
    } = ask;
    let counted = if charge.model.is_empty() {
        "no catalog size: counted in total only".to_string()
    } else {
        format!(
            "counted as {} on {}, the most expensive size its node selection allows",
            charge.model, charge.size
        )
    };
    for Standing { budget, used } in standings {
        for (what, held, limit) in budget.limits(charge, used) {
            let who = format!(
                "{prefix}GpuBudget {}/{} allows {limit} {what} held at once",
                budget.namespace, budget.name
            );
            if held + charge.gpus > limit {
                let pod = if prefix.is_empty() {
                    "this pod"
                } else {
                    "one pod"
                };
                verdict.denials.push(format!(
                    "{who}; {held}/{limit} are held and {pod} asks for {} more ({counted}). Wait for pods holding them to finish or delete some, narrow the pod's node selection to a model with room{}, or ask the budget's owner for more",
                    charge.gpus,
                    room(budget, used, &charge.model)
                ));
            } else if held + charge.gpus.saturating_mul(*replicas) > limit {
                let fit = (limit - held) / charge.gpus.max(1);
                verdict.warnings.push(format!(
                    "{who}; {held}/{limit} are held: {fit} of {replicas} replicas of {} GPUs each fit ({counted}); the rest will be denied when created",
                    charge.gpus
                ));
            }
        }
    }
}

/// GPUs held of `key` in `map`, whatever the case either spells it in.
pub fn held_of(map: &BTreeMap<String, i64>, key: &str) -> i64 {
    (map.iter().filter(|(k, _)| k.eq_ignore_ascii_case(key)))
        .map(|(_, gpus)| gpus)
        .sum()
}

/// The models of `budget` other than `model` with room left, as a
/// parenthesis (empty when none).
fn room(budget: &Budget, used: &Usage, model: &str) -> String {
    let free: Vec<String> = (budget.models.iter())
        .filter(|(m, _)| !m.eq_ignore_ascii_case(model))
        .map(|(m, limit)| (m, limit - held_of(&used.models, m)))
        .filter(|(_, left)| *left > 0)
        .map(|(m, left)| format!("{m}: {left} left"))
        .collect();
    if free.is_empty() {
        String::new()
    } else {
        format!(" ({})", free.join(", "))
    }
}

#[cfg(test)]
mod tests;
