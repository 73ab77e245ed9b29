//! The cluster's `GpuBudget`s and what the namespaces hold against them:
//! two watches on [`watch`] (gpubudgets, and pods in every namespace),
//! and a short-lived ledger of the pods this process admitted that the
//! pod watch has not shown yet.
//!
//! Of the pods, only GPU pods that are not finished are kept, each as its
//! charge ([`crate::budgets::Charge`]: GPUs, those its DRA claims ask for
//! included, model, size; read once per pod and node, not per version: a
//! pod bound to a node the node cache knows is charged anew by its VM
//! size, a pod charged no GPU at each of its changes) and whether it is
//! bound, by the holding rule the audit uses
//! ([`crate::k8s::workloads::pod_state`]): bound pods hold their GPUs,
//! pods not bound yet are about to, finished pods hold nothing. At most
//! [`MAX_PODS`] are kept (beyond: logged, not counted).
//!
//! The ledger: a pod this process admitted is counted from the moment it
//! is admitted until the pod watch shows it, or for [`LEDGER_TTL`] at
//! most (a create another webhook refused never shows). Checking and
//! recording happen under one lock, so one process never admits past a
//! limit; two replicas each see the other's pods only through the watch
//! (docs/budgets.md, "Races").
use super::watch::{self, CacheMetrics, Event, Kind, Relisted, Settings, Watched};
use super::ClusterNodes;
use crate::budgets::{self, Admitted, Budget, BudgetLookup, Charge, Standing, Usage};
use crate::k8s::json::{labels_of, str_at};
use crate::k8s::namespaces::with_name_label;
use crate::k8s::workloads::pod_state;
use crate::k8s::NamespaceLookup;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// GPU pods kept, at most.
pub const MAX_PODS: usize = 200_000;
/// How long an admitted pod the watch has not shown is counted.
pub const LEDGER_TTL: Duration = Duration::from_secs(30);
/// What the server's ClusterRole needs.
pub const RBAC_RULE: &str =
    "get, list and watch on pods and gpubudgets.gpu-admission.io (deploy/base/rbac.yaml)";

/// Reads a pod into its charge (none: not a GPU pod), given the VM size
/// of the node it is bound to where that is known
/// ([`crate::budgets::charge_on`]); serve's reads with the catalog and GPU
/// resources of the policy set it serves.
pub type PodReader = Arc<dyn Fn(&Value, Option<&str>) -> Option<Charge> + Send + Sync>;
/// A [`PodReader`] that looks the pod's node up itself.
type Read = dyn Fn(&Value) -> Option<Charge> + Send + Sync;

/// The budgets and holdings of a live cluster. Cloning shares them.
#[derive(Clone)]
pub struct ClusterBudgets {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    namespaces: Arc<dyn NamespaceLookup>,
    /// Where budgets with a namespaceSelector are honoured.
    teams_in: String,
    ttl: Duration,
    /// The pod watch, once started.
    pods: OnceLock<Watched>,
}

#[derive(Default)]
struct State {
    /// By `namespace/name`; `None`: does not read (logged).
    budgets: Relisted<Option<Arc<Budget>>>,
    pods: HashMap<(String, String), Pod>,
    /// While the pods are (re)listed.
    relisting: Option<HashMap<(String, String), Pod>>,
    by_namespace: HashMap<String, Usage>,
    /// Of those, the pods not bound yet.
    pending: HashMap<String, Usage>,
    ledger: HashMap<(String, String), (Charge, Instant)>,
    over_bound: bool,
}

#[derive(Clone)]
struct Pod {
    /// Its uid and `spec.nodeName` when the charge was read.
    at: [String; 2],
    charge: Charge,
    bound: bool,
}

/// One limit of a budget: `model` is a GPU model, a VM size, or `total`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limit {
    pub namespace: String,
    pub budget: String,
    pub model: String,
    pub limit: i64,
    /// GPUs held against it (pending ones included).
    pub held: i64,
    pub pending: i64,
}

impl ClusterBudgets {
    /// An empty cache; budgets with a namespaceSelector are honoured only
    /// in namespace `teams_in` (the server's own): anyone else could
    /// otherwise cap namespaces not theirs.
    pub fn new(namespaces: Arc<dyn NamespaceLookup>, teams_in: &str) -> ClusterBudgets {
        ClusterBudgets::with_ttl(namespaces, teams_in, LEDGER_TTL)
    }

    /// [`ClusterBudgets::new`] whose ledger keeps pods for `ttl`.
    pub fn with_ttl(
        namespaces: Arc<dyn NamespaceLookup>,
        teams_in: &str,
        ttl: Duration,
    ) -> ClusterBudgets {
        let shared = Shared {
            state: Mutex::default(),
            namespaces,
            teams_in: teams_in.to_string(),
            ttl,
            pods: OnceLock::new(),
        };
        ClusterBudgets {
            shared: Arc::new(shared),
        }
    }

    /// The budgets' kind; refused (RBAC) or not served (no CRD), no budget
    /// applies and readiness does not wait.
    pub fn budgets_kind() -> Kind {
        Kind::new(
            "gpu budgets",
            budgets::GROUP,
            budgets::VERSION,
            budgets::RESOURCE,
        )
        .forbidden_is_empty(RBAC_RULE)
    }

    /// The pods' kind; refused, readiness does not wait, and a pod in a
    /// namespace some budget covers is denied (its holdings are unknown).
    pub fn pods_kind() -> Kind {
        Kind::new("pods", "", "v1", "pods").forbidden_is_empty(RBAC_RULE)
    }

    /// Watches budgets and pods with `client` (each pod read with `read`,
    /// given its node's size as `nodes` holds it; the pods are taken in
    /// once the nodes, and `claims` (the watches of the DRA claims `read`
    /// looks up), are listed); each watch until aborted. Call once per
    /// cache.
    pub fn watch(
        &self,
        client: kube::Client,
        read: PodReader,
        nodes: Option<ClusterNodes>,
        claims: Vec<Watched>,
        settings: Settings,
        metrics: CacheMetrics,
    ) -> [(Watched, tokio::task::JoinHandle<()>); 2] {
        let shared = self.shared.clone();
        let on_budget = watch::sink(move |event: Event<Value>| {
            let teams_in = shared.teams_in.clone();
            shared
                .lock()
                .budgets
                .take(event, |o| read_budget(o, &teams_in));
        });
        let budgets = watch::start(
            client.clone(),
            ClusterBudgets::budgets_kind(),
            settings,
            metrics.clone(),
            on_budget,
        );
        let listed: Vec<Watched> = (nodes.as_ref().and_then(ClusterNodes::watched))
            .into_iter()
            .chain(claims)
            .collect();
        let (shared, read) = (self.shared.clone(), sized(read, nodes));
        let on_pod = move |event: Event<Value>| {
            // Only a (re)list waits for the nodes and claims to be listed.
            let wait = if matches!(event, Event::Init) {
                listed.clone()
            } else {
                Vec::new()
            };
            let (shared, read) = (shared.clone(), read.clone());
            async move {
                for first in &wait {
                    first.synced().await;
                }
                shared.lock().take(event, &*read)
            }
        };
        let pods = watch::start(
            client,
            ClusterBudgets::pods_kind(),
            settings,
            metrics,
            on_pod,
        );
        let _ = self.shared.pods.set(pods.0.clone());
        [budgets, pods]
    }

    /// Each limit of each budget with what is held against it and, of
    /// that, what is pending (pods not bound yet, and admitted pods the
    /// watch has not shown).
    pub fn limits(&self) -> Vec<Limit> {
        let shared = &*self.shared;
        let state = shared.lock();
        let mut limits = Vec::new();
        for budget in state.budgets.held.values().flatten() {
            let [used, pending] = [false, true].map(|p| state.used(budget, shared, p));
            let of = |usage: &Usage, key: &str| {
                budgets::held_of(&usage.models, key) + budgets::held_of(&usage.sizes, key)
            };
            let each = (budget.models.iter().chain(&budget.sizes))
                .map(|(key, limit)| (key.clone(), *limit, of(&used, key), of(&pending, key)));
            let total = budget
                .total
                .map(|t| ("total".to_string(), t, used.total, pending.total));
            for (model, limit, held, pending) in each.chain(total) {
                limits.push(Limit {
                    namespace: budget.namespace.clone(),
                    budget: budget.name.clone(),
                    model,
                    limit,
                    held,
                    pending,
                });
            }
        }
        limits
    }

    /// The budgets held (that read), by namespace and name.
    pub fn budgets(&self) -> Vec<Arc<Budget>> {
        let state = self.shared.lock();
        state.budgets.held.values().flatten().cloned().collect()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The labels namespace selectors see of `namespace`.
    fn labels(&self, namespace: &str) -> BTreeMap<String, String> {
        let object = self.namespaces.namespace(namespace);
        with_name_label(namespace, labels_of(object.as_deref()))
    }
}

/// `read` looking up the VM size of each pod's node in `nodes`.
fn sized(read: PodReader, nodes: Option<ClusterNodes>) -> Arc<Read> {
    Arc::new(move |pod| {
        let node = str_at(pod, "/spec/nodeName");
        read(pod, nodes.as_ref().and_then(|n| n.size_of(node)).as_deref())
    })
}

/// `namespace/name` and the budget, `None` when it does not read (or has
/// a namespaceSelector outside `teams_in`).
fn read_budget(object: &Value, teams_in: &str) -> Option<(String, Option<Arc<Budget>>)> {
    let namespace = str_at(object, "/metadata/namespace");
    let name = str_at(object, "/metadata/name");
    let mut typed = object.clone();
    typed["apiVersion"] = budgets::API_VERSION.into();
    typed["kind"] = budgets::KIND.into();
    let budget = match budgets::read(&typed) {
        Ok(b) if b.selector.is_some() && namespace != teams_in => {
            tracing::warn!(namespace, name, teams_in, "GpuBudget ignored: a namespaceSelector is honoured only on budgets in the server's namespace");
            None
        }
        Ok(b) => Some(Arc::new(b)),
        Err(errors) => {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            tracing::warn!(namespace, name, errors = %errors.join("; "), "GpuBudget not read: it limits nothing until fixed");
            None
        }
    };
    Some((format!("{namespace}/{name}"), budget))
}

impl State {
    fn take(&mut self, mut event: Event<Value>, read: &Read) {
        // The items of a list come without their kind.
        if let Event::InitApply(pod) | Event::Apply(pod) = &mut event {
            if let Some(fields) = pod.as_object_mut() {
                fields.insert("apiVersion".into(), "v1".into());
                fields.insert("kind".into(), "Pod".into());
            }
        }
        match event {
            Event::Init => self.relisting = Some(HashMap::new()),
            Event::InitApply(pod) => {
                let mut listed = self.relisting.take().unwrap_or_default();
                let known = self.pods.get(&key_of(&pod)).cloned();
                if let Some((key, entry)) = self.read_pod(&pod, known, read, listed.len()) {
                    listed.insert(key, entry);
                }
                self.relisting = Some(listed);
            }
            Event::InitDone => {
                let pods = self.relisting.take().unwrap_or_default();
                (self.by_namespace, self.pending) = Default::default();
                for ((namespace, _), pod) in &pods {
                    self.count(namespace, pod, 1);
                }
                self.pods = pods;
            }
            Event::Apply(pod) => {
                let key = key_of(&pod);
                let known = self.remove(&key);
                if let Some((key, entry)) = self.read_pod(&pod, known, read, self.pods.len()) {
                    self.count(&key.0, &entry, 1);
                    self.pods.insert(key, entry);
                }
            }
            Event::Delete(pod) => {
                let key = key_of(&pod);
                self.ledger.remove(&key);
                self.remove(&key);
            }
        }
    }

    /// Takes a pod out of what is held.
    fn remove(&mut self, key: &(String, String)) -> Option<Pod> {
        let pod = self.pods.remove(key)?;
        self.count(&key.0, &pod, -1);
        Some(pod)
    }

    /// Adds `times` of `pod` to what its namespace holds (and has pending).
    fn count(&mut self, namespace: &str, pod: &Pod, times: i64) {
        let maps = [
            Some(&mut self.by_namespace),
            (!pod.bound).then_some(&mut self.pending),
        ];
        for map in maps.into_iter().flatten() {
            let used = map.entry(namespace.to_string()).or_default();
            used.add(&pod.charge, times);
            if *used == Usage::default() {
                map.remove(namespace);
            }
        }
    }

    /// A pod the watch shows, as kept (none: finished, not a GPU pod, or
    /// past [`MAX_PODS`]); its ledger entry is dropped. The charge of a
    /// pod `known` by its uid and node is kept (what it asks never
    /// changes; once bound, it is read anew against its node).
    fn read_pod(
        &mut self,
        pod: &Value,
        known: Option<Pod>,
        read: &Read,
        kept: usize,
    ) -> Option<((String, String), Pod)> {
        let key = key_of(pod);
        self.ledger.remove(&key);
        let (held, pending) = pod_state(pod);
        if held + pending == 0 {
            return None;
        }
        let at = ["/metadata/uid", "/spec/nodeName"].map(|p| str_at(pod, p).to_string());
        let charge = match known.filter(|k| k.at == at) {
            Some(known) => known.charge,
            None => read(pod)?,
        };
        if kept >= MAX_PODS {
            if !self.over_bound {
                tracing::warn!(
                    max = MAX_PODS,
                    "more GPU pods than the budget cache keeps: those past it are not counted"
                );
            }
            self.over_bound = true;
            return None;
        }
        let bound = held > 0;
        Some((key, Pod { at, charge, bound }))
    }

    /// What the namespaces `budget` covers hold (`pending`: of that, the
    /// pods not bound yet), with the pods admitted and not shown yet.
    fn used(&self, budget: &Budget, shared: &Shared, pending: bool) -> Usage {
        let covered = |namespace: &str| budget.covers_with(namespace, || shared.labels(namespace));
        let mut used = Usage::default();
        let map = if pending {
            &self.pending
        } else {
            &self.by_namespace
        };
        for (namespace, usage) in map {
            if covered(namespace) {
                used.merge(usage);
            }
        }
        for ((namespace, _), (charge, _)) in &self.ledger {
            if covered(namespace) {
                used.add(charge, 1);
            }
        }
        used
    }
}

fn key_of(pod: &Value) -> (String, String) {
    let at = |pointer| str_at(pod, pointer).to_string();
    (at("/metadata/namespace"), at("/metadata/name"))
}

impl BudgetLookup for ClusterBudgets {
    fn covers(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        let state = self.shared.lock();
        let mut budgets = state.budgets.held.values().flatten();
        budgets.any(|b| b.covers(namespace, labels))
    }

    fn judge(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        pod: Option<&str>,
        judge: &mut dyn FnMut(&[Standing]) -> Option<Admitted>,
    ) -> Result<(), String> {
        let shared = &*self.shared;
        let mut state = shared.lock();
        let now = Instant::now();
        // The pod judged again (a retried create) is not counted twice.
        let retried = |key: &(String, String)| Some(key.1.as_str()) == pod && key.0 == namespace;
        state
            .ledger
            .retain(|key, (_, at)| now.duration_since(*at) < shared.ttl && !retried(key));
        let standings: Vec<Standing> = (state.budgets.held.values().flatten())
            .filter(|b| b.covers(namespace, labels))
            .map(|b| Standing {
                budget: b.clone(),
                used: state.used(b, shared, false),
            })
            .collect();
        let pods = shared.pods.get();
        if !standings.is_empty() && !pods.is_some_and(Watched::holds_list) {
            let why = pods.map_or("the pods are not watched".to_string(), |w| {
                let status = w.status();
                status
                    .why_not_synced()
                    .unwrap_or(format!("{:?}", status.state))
            });
            return Err(why);
        }
        if let Some(admitted) = judge(&standings) {
            let key = (admitted.namespace, admitted.name);
            state.ledger.insert(key, (admitted.charge, now));
        }
        Ok(())
    }
}

pub mod metrics;

#[cfg(test)]
mod tests;
