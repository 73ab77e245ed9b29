//! The periodic audit `serve --report-interval` runs in the cluster: the
//! objects already there judged by the policies being served, the latest
//! report kept for `GET /report`, and its totals exported as
//! `gpu_admission_audit_*` metrics. With several replicas only the holder
//! of a Lease runs it.
//!
//! Memory: Pods, the bulk of a cluster, are read and judged a page at a
//! time ([`inventory::PAGE_SIZE`]) and dropped; the other audited kinds
//! (controllers, capacity objects, DRA claims) are held for the length of
//! a run, at most [`ReportSettings::max_objects`] of them.
use crate::admission::Admission;
use crate::audit::{self, Report};
use crate::inventory::{self, ClusterLister, Lister, AUDITED};
use crate::k8s::lease::{ClusterLease, LeaderElector, LeaseStore};
use crate::server::{ReportAnswer, ReportFormat, ReportPages};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// Namespaces that get their own label value in the audit metrics (those
/// with the most GPUs held by violations, then the most violations); the
/// rest are summed under [`OTHER_NAMESPACES`].
pub const TOP_NAMESPACES: usize = 20;
/// The namespace label of namespaces beyond the top ones. Not a valid
/// namespace name, so it never collides with one.
pub const OTHER_NAMESPACES: &str = "_other";
/// The namespace label of cluster-scoped objects (NodePools, ...).
pub const CLUSTER_SCOPE: &str = "_cluster";

/// How the periodic report runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportSettings {
    /// Time between the starts of two runs.
    pub interval: Duration,
    /// Objects other than Pods a run may hold; a cluster with more fails
    /// the run (counted in `gpu_admission_audit_run_errors_total`).
    pub max_objects: usize,
    /// The Lease that picks the one replica that runs it; none: every
    /// replica runs it (one replica, or no permission on Leases).
    pub lease: Option<LeaseSettings>,
}

/// Where the report's Lease lives and who this replica is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// This replica's `holderIdentity`: its pod name.
    pub identity: String,
}

impl LeaseSettings {
    /// The Lease `name` in this pod's namespace (`POD_NAMESPACE`, else the
    /// service account's namespace, else `gpu-admission`), held as this
    /// pod (`POD_NAME`, else `HOSTNAME`, which Kubernetes sets to it).
    pub fn from_environment(name: &str) -> LeaseSettings {
        let namespace = std::env::var("POD_NAMESPACE")
            .ok()
            .filter(|n| !n.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                    .ok()
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty())
            })
            .unwrap_or_else(|| "gpu-admission".to_string());
        let identity = ["POD_NAME", "HOSTNAME"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|n| !n.is_empty()))
            .unwrap_or_else(|| format!("gpu-admission-{}", std::process::id()));
        LeaseSettings {
            namespace,
            name: name.to_string(),
            identity,
        }
    }
}

/// How long a report Lease stays valid without renewal. The leader renews
/// it at the start of every run, so it must outlast one interval; a
/// replica takes over at most this long (plus an interval) after the
/// leader stops.
pub fn lease_duration(interval: Duration) -> Duration {
    (interval * 2).max(Duration::from_secs(30))
}

/// The content type of [`render_report_page`]'s output.
pub const REPORT_PAGE_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// When and from what a report was made.
#[derive(Clone, Debug, PartialEq)]
pub struct RunMeta {
    pub generated_at: SystemTime,
    pub duration: Duration,
}

/// The page `GET /report` serves: the one place the served report is
/// rendered for people.
pub fn render_report_page(report: &Report, meta: &RunMeta) -> String {
    let generated = meta
        .generated_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .and_then(|d| k8s_openapi::jiff::Timestamp::from_second(d.as_secs() as i64).ok())
        .map_or_else(|| "unknown".to_string(), |t| t.to_string());
    format!(
        "GPU audit of the cluster, generated {generated} in {:.1} s\n\n{}",
        meta.duration.as_secs_f64(),
        audit::render_text(report)
    )
}

/// The latest report, rendered once per run, for `/report`.
#[derive(Default)]
pub struct LatestReport {
    state: RwLock<Latest>,
}

#[derive(Default)]
struct Latest {
    page: Option<axum::body::Bytes>,
    json: Option<axum::body::Bytes>,
    /// Why there is no report (yet), when there is none.
    waiting: Option<String>,
}

impl LatestReport {
    pub fn new() -> LatestReport {
        LatestReport::default()
    }

    /// Replaces the served report.
    pub fn publish(&self, report: &Report, meta: &RunMeta) -> anyhow::Result<()> {
        let json = serde_json::to_string_pretty(report)?;
        let page = render_report_page(report, meta);
        let mut latest = self.state.write().unwrap_or_else(|e| e.into_inner());
        latest.page = Some(page.into());
        latest.json = Some(json.into());
        latest.waiting = None;
        Ok(())
    }

    /// Serves no report, saying `why` (this replica is not the leader).
    pub fn withdraw(&self, why: String) {
        let mut latest = self.state.write().unwrap_or_else(|e| e.into_inner());
        *latest = Latest {
            waiting: Some(why),
            ..Latest::default()
        };
    }
}

impl ReportPages for LatestReport {
    fn latest(&self, format: ReportFormat) -> ReportAnswer {
        let latest = self.state.read().unwrap_or_else(|e| e.into_inner());
        let (body, content_type) = match format {
            ReportFormat::Page => (&latest.page, REPORT_PAGE_CONTENT_TYPE),
            ReportFormat::Json => (&latest.json, "application/json"),
        };
        match body {
            Some(body) => ReportAnswer::Ready {
                content_type,
                body: body.clone(),
            },
            None => ReportAnswer::NotYet(latest.waiting.clone().unwrap_or_else(|| {
                "no report yet: the first audit of the cluster has not finished".to_string()
            })),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ViolationLabels {
    policy: String,
    namespace: String,
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HeldLabels {
    policy: String,
    namespace: String,
}

/// The `gpu_admission_audit_*` families.
#[derive(Clone, Default)]
pub struct AuditMetrics {
    violations: Family<ViolationLabels, Gauge>,
    gpus_held: Family<HeldLabels, Gauge>,
    objects: Gauge,
    evaluated: Gauge,
    last_run: Gauge,
    duration: Gauge<f64, AtomicU64>,
    errors: Counter,
    leader: Gauge,
}

impl AuditMetrics {
    /// Registers the families in `registry` (`Metrics::with_families`).
    pub fn register(registry: &mut Registry) -> AuditMetrics {
        let m = AuditMetrics::default();
        registry.register(
            "gpu_admission_audit_violations",
            "Objects in the cluster violating a policy at the last audit, by policy, namespace (top namespaces, the rest as _other; _cluster for cluster-scoped objects) and action (deny, warn, audit)",
            m.violations.clone(),
        );
        registry.register(
            "gpu_admission_audit_gpus_held",
            "GPUs held by objects violating a policy at the last audit, by policy and namespace",
            m.gpus_held.clone(),
        );
        registry.register(
            "gpu_admission_audit_objects",
            "Objects read by the last audit",
            m.objects.clone(),
        );
        registry.register(
            "gpu_admission_audit_objects_evaluated",
            "Objects judged by the last audit (others are judged through their controller)",
            m.evaluated.clone(),
        );
        registry.register(
            "gpu_admission_audit_last_run_timestamp_seconds",
            "Unix time the last successful audit finished (0: none yet)",
            m.last_run.clone(),
        );
        registry.register(
            "gpu_admission_audit_run_duration_seconds",
            "How long the last successful audit took",
            m.duration.clone(),
        );
        registry.register(
            "gpu_admission_audit_run_errors",
            "Audits that failed (listing the cluster or the lease); the last report stays served",
            m.errors.clone(),
        );
        registry.register(
            "gpu_admission_audit_leader",
            "1 when this replica holds the report Lease and runs the audit, else 0",
            m.leader.clone(),
        );
        m
    }

    /// Sets the gauges from `report`.
    pub fn record(&self, report: &Report, meta: &RunMeta) {
        let (violations, held) = audit_series(report, TOP_NAMESPACES);
        self.violations.clear();
        self.gpus_held.clear();
        for ((policy, namespace, action), n) in violations {
            self.violations
                .get_or_create(&ViolationLabels {
                    policy,
                    namespace,
                    action,
                })
                .set(n);
        }
        for ((policy, namespace), n) in held {
            self.gpus_held
                .get_or_create(&HeldLabels { policy, namespace })
                .set(n);
        }
        self.objects
            .set(i64::try_from(report.objects).unwrap_or(i64::MAX));
        self.evaluated
            .set(i64::try_from(report.evaluated).unwrap_or(i64::MAX));
        let finished = (meta.generated_at + meta.duration)
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.last_run.set(finished);
        self.duration.set(meta.duration.as_secs_f64());
    }

    /// Drops the per-policy series: a replica that does not lead exports
    /// none, so sums across replicas count each violation once.
    pub fn clear(&self) {
        self.violations.clear();
        self.gpus_held.clear();
    }

    pub fn inc_errors(&self) {
        self.errors.inc();
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }
}

type ViolationSeries = BTreeMap<(String, String, &'static str), i64>;
type HeldSeries = BTreeMap<(String, String), i64>;

/// The report's totals per (policy, namespace, action) and GPUs per
/// (policy, namespace), with namespaces beyond the `top` ones (by GPUs
/// held, then violations, then name) summed as [`OTHER_NAMESPACES`].
fn audit_series(report: &Report, top: usize) -> (ViolationSeries, HeldSeries) {
    let label = |ns: &Option<String>| match ns.as_deref() {
        None | Some("") => CLUSTER_SCOPE.to_string(),
        Some(ns) => ns.to_string(),
    };
    let mut weight: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for f in &report.findings {
        let w = weight.entry(label(&f.namespace)).or_default();
        w.0 = w.0.saturating_add(f.gpus);
        w.1 += 1;
    }
    let mut ranked: Vec<(String, (i64, i64))> = weight
        .into_iter()
        .filter(|(ns, _)| ns != CLUSTER_SCOPE)
        .collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let kept: HashSet<String> = ranked.into_iter().take(top).map(|(ns, _)| ns).collect();
    let bucket = |ns: String| {
        if ns == CLUSTER_SCOPE || kept.contains(&ns) {
            ns
        } else {
            OTHER_NAMESPACES.to_string()
        }
    };
    let mut violations = ViolationSeries::new();
    let mut held = HeldSeries::new();
    for f in &report.findings {
        let ns = bucket(label(&f.namespace));
        *violations
            .entry((f.policy.clone(), ns.clone(), f.action))
            .or_default() += 1;
        let gpus = held.entry((f.policy.clone(), ns)).or_default();
        *gpus = gpus.saturating_add(f.gpus);
    }
    (violations, held)
}

/// One audit of the cluster `lister` reads, judged by `admission`. Kinds
/// other than Pods are read first and held (at most `max_objects`); Pods
/// follow a page at a time, those controlled by an object already read
/// being judged through it.
pub async fn audit_cluster(
    admission: &Admission,
    lister: &impl Lister,
    max_objects: usize,
    warn: &dyn Fn(String),
) -> anyhow::Result<Report> {
    let (pods, others): (Vec<_>, Vec<_>) = AUDITED.iter().partition(|(_, kind)| *kind == "Pod");
    let mut held: Vec<Value> = Vec::new();
    inventory::list_pages(lister, &others, warn, &mut |page| {
        held.extend(page);
        if held.len() > max_objects {
            anyhow::bail!(
                "the cluster has more than {max_objects} controllers, capacity objects and claims; raise --report-max-objects (each takes a few KiB during a run)"
            );
        }
        Ok(())
    })
    .await?;
    let mut report = audit::audit(admission, &held);
    let controllers: HashSet<String> = held
        .iter()
        .filter_map(|o| o.pointer("/metadata/uid").and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    drop(held);
    inventory::list_pages(lister, &pods, warn, &mut |mut page| {
        let read = page.len();
        page.retain(|pod| !controlled_by(pod, &controllers));
        let judged = audit::audit(admission, &page);
        merge(&mut report, judged);
        report.objects += read - page.len();
        Ok(())
    })
    .await?;
    Ok(report)
}

/// Whether an object in `uids` is `object`'s controller.
fn controlled_by(object: &Value, uids: &HashSet<String>) -> bool {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|owners| {
            owners.iter().any(|o| {
                o.get("controller").and_then(Value::as_bool) == Some(true)
                    && o.get("uid")
                        .and_then(Value::as_str)
                        .is_some_and(|u| uids.contains(u))
            })
        })
}

/// Adds `more` (a report of other objects) to `report`.
fn merge(report: &mut Report, more: Report) {
    report.objects += more.objects;
    report.evaluated += more.evaluated;
    for (ns, n) in more.passed {
        *report.passed.entry(ns).or_default() += n;
    }
    report.findings.extend(more.findings);
}

/// The thread that runs the periodic report; stopped (and its Lease
/// released) by [`ReportTask::stop`] or on drop.
pub struct ReportTask {
    stop: Option<Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ReportTask {
    /// Starts the report thread: every `settings.interval`, once `ready()`
    /// (the namespace and claim caches the admission relies on have
    /// synced), it audits the cluster of the in-cluster service account
    /// (or kubeconfig) with `admission` and publishes to `latest` and
    /// `metrics`. It runs on a thread of its own with the stack policy
    /// evaluation needs, never on the server's runtime.
    pub fn spawn(
        settings: ReportSettings,
        admission: Arc<Admission>,
        latest: Arc<LatestReport>,
        metrics: AuditMetrics,
        ready: Box<dyn Fn() -> bool + Send>,
    ) -> anyhow::Result<ReportTask> {
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("report".into())
            .stack_size(crate::policy::EVALUATION_STACK)
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        tracing::error!(error = %err, "the periodic report cannot start");
                        return;
                    }
                };
                let runner = Runner {
                    settings,
                    admission,
                    latest,
                    metrics,
                };
                runner.run(&runtime, &stopped, ready.as_ref());
            })?;
        Ok(ReportTask {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it (it finishes the page it is
    /// judging and releases its Lease).
    pub fn stop(mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ReportTask {
    fn drop(&mut self) {
        // Dropping the sender wakes the thread, which then exits.
        self.stop.take();
    }
}

struct Runner {
    settings: ReportSettings,
    admission: Arc<Admission>,
    latest: Arc<LatestReport>,
    metrics: AuditMetrics,
}

/// What waiting on the stop channel found.
enum Wake {
    Timeout,
    Stop,
}

fn sleep(stopped: &Receiver<()>, period: Duration) -> Wake {
    match stopped.recv_timeout(period) {
        Err(RecvTimeoutError::Timeout) => Wake::Timeout,
        Ok(()) | Err(RecvTimeoutError::Disconnected) => Wake::Stop,
    }
}

impl Runner {
    fn run(
        &self,
        runtime: &tokio::runtime::Runtime,
        stopped: &Receiver<()>,
        ready: &dyn Fn() -> bool,
    ) {
        while !ready() {
            if let Wake::Stop = sleep(stopped, Duration::from_millis(500)) {
                return;
            }
        }
        let client = match runtime.block_on(kube::Client::try_default()) {
            Ok(client) => client,
            Err(err) => {
                self.metrics.inc_errors();
                self.latest
                    .withdraw(format!("no report: no cluster client ({err})"));
                tracing::error!(error = %err, "the periodic report has no cluster client; it stays off");
                return;
            }
        };
        let lister = ClusterLister::new(client.clone());
        let mut elector = self.settings.lease.as_ref().map(|lease| {
            LeaderElector::new(
                ClusterLease::new(client.clone(), &lease.namespace, &lease.name),
                lease.identity.clone(),
                lease_duration(self.settings.interval),
            )
        });
        loop {
            let started = Instant::now();
            self.tick(runtime, &lister, elector.as_mut());
            let rest = self.settings.interval.saturating_sub(started.elapsed());
            if let Wake::Stop = sleep(stopped, rest) {
                break;
            }
        }
        if let Some(elector) = elector.as_mut() {
            if let Err(err) = runtime.block_on(elector.release(SystemTime::now())) {
                tracing::warn!(error = %err, "could not release the report lease; another replica takes over once it expires");
            }
        }
    }

    /// One period: lead (or not), audit, publish.
    fn tick(
        &self,
        runtime: &tokio::runtime::Runtime,
        lister: &impl Lister,
        elector: Option<&mut LeaderElector<impl LeaseStore>>,
    ) {
        if let Some(elector) = elector {
            match runtime.block_on(elector.try_acquire_or_renew(SystemTime::now())) {
                Ok(true) => self.metrics.set_leader(true),
                Ok(false) => {
                    self.metrics.set_leader(false);
                    self.metrics.clear();
                    let holder = elector.holder().unwrap_or("another replica");
                    self.latest.withdraw(format!(
                        "no report on this replica ({}): {holder} holds the report lease and runs the audit; ask it (kubectl port-forward pod/{holder} 9090)",
                        elector.identity()
                    ));
                    return;
                }
                Err(err) => {
                    self.metrics.inc_errors();
                    tracing::error!(error = %err, "cannot read or renew the report lease; skipping this run");
                    return;
                }
            }
        } else {
            self.metrics.set_leader(true);
        }
        let generated_at = SystemTime::now();
        let started = Instant::now();
        let warn = |message: String| tracing::warn!("periodic report: {message}");
        let run = runtime.block_on(audit_cluster(
            &self.admission,
            lister,
            self.settings.max_objects,
            &warn,
        ));
        match run {
            Ok(report) => {
                let meta = RunMeta {
                    generated_at,
                    duration: started.elapsed(),
                };
                if let Err(err) = self.latest.publish(&report, &meta) {
                    self.metrics.inc_errors();
                    tracing::error!(error = %err, "cannot render the report");
                    return;
                }
                self.metrics.record(&report, &meta);
                tracing::info!(
                    objects = report.objects,
                    evaluated = report.evaluated,
                    findings = report.findings.len(),
                    seconds = meta.duration.as_secs_f64(),
                    "periodic report done"
                );
            }
            Err(err) => {
                self.metrics.inc_errors();
                tracing::error!(
                    error = format!("{err:#}"),
                    "periodic report failed; the last report stays served"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Finding;
    use crate::bundle::{self, PolicySource};
    use crate::inventory::{ListError, Page};
    use crate::k8s::StaticNamespaces;
    use serde_json::json;

    /// Objects per kind, served in pages of the requested size.
    struct FakeCluster {
        objects: BTreeMap<&'static str, Vec<Value>>,
        pages_of_pods: std::sync::Mutex<usize>,
    }

    impl Lister for FakeCluster {
        async fn list_page(
            &self,
            _group: &str,
            kind: &str,
            limit: u32,
            continue_token: Option<&str>,
        ) -> Result<Page, ListError> {
            let Some(all) = self.objects.get(kind) else {
                return Err(ListError::NotServed(format!("no {kind}")));
            };
            if kind == "Pod" {
                *self.pages_of_pods.lock().unwrap() += 1;
            }
            let start: usize = continue_token.map_or(0, |t| t.parse().unwrap());
            let end = (start + limit as usize).min(all.len());
            Ok(Page {
                items: all[start..end].to_vec(),
                continue_token: (end < all.len()).then(|| end.to_string()),
            })
        }
    }

    fn gpu_pod_spec(privileged: bool) -> Value {
        json!({"containers": [{
            "name": "train",
            "image": "nvcr.io/nvidia/pytorch:24.01-py3",
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
            "securityContext": {"privileged": privileged},
        }]})
    }

    fn owner(kind: &str, name: &str, uid: &str) -> Value {
        json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true}])
    }

    /// A privileged GPU Deployment with its ReplicaSet and pods, and
    /// `loose` pods of no controller, every other one privileged.
    fn cluster(loose: usize) -> FakeCluster {
        let template =
            json!({"metadata": {"labels": {"app": "train"}}, "spec": gpu_pod_spec(true)});
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "train", "namespace": "ml", "uid": "d-1"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "train"}}, "template": template},
        });
        let replica_set = json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "train-5d8f", "namespace": "ml", "uid": "rs-1",
                         "ownerReferences": owner("Deployment", "train", "d-1")},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "train"}}, "template": template},
        });
        let mut pods: Vec<Value> = (0..2)
            .map(|i| {
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("train-5d8f-{i}"), "namespace": "ml", "uid": format!("p-{i}"),
                                 "ownerReferences": owner("ReplicaSet", "train-5d8f", "rs-1"),
                                 "managedFields": [{"manager": "kube-controller-manager"}]},
                    "spec": gpu_pod_spec(true),
                    "status": {"phase": "Running"},
                })
            })
            .collect();
        pods.extend((0..loose).map(|i| {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("loose-{i}"), "namespace": format!("team-{}", i % 3), "uid": format!("l-{i}")},
                "spec": gpu_pod_spec(i % 2 == 0),
                "status": {"phase": "Running"},
            })
        }));
        FakeCluster {
            objects: BTreeMap::from([
                ("Deployment", vec![deployment]),
                ("ReplicaSet", vec![replica_set]),
                ("Pod", pods),
            ]),
            pages_of_pods: std::sync::Mutex::new(0),
        }
    }

    fn admission() -> Admission {
        let loaded = bundle::load(&PolicySource::Embedded).unwrap();
        Admission::new(loaded.bundle, Arc::new(StaticNamespaces::new()))
    }

    fn audit_of(cluster: &FakeCluster, max_objects: usize) -> anyhow::Result<Report> {
        crate::offline::with_evaluation_stack(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(audit_cluster(&admission(), cluster, max_objects, &|_| {}))
        })
        .unwrap()
    }

    fn sorted(findings: &[Finding]) -> Vec<String> {
        let mut out: Vec<String> = findings
            .iter()
            .map(|f| serde_json::to_string(f).unwrap())
            .collect();
        out.sort();
        out
    }

    #[test]
    fn pods_read_a_page_at_a_time_give_the_report_of_the_whole_cluster_at_once() {
        let cluster = cluster(601);
        let streamed = audit_of(&cluster, 100).unwrap();
        assert_eq!(
            *cluster.pages_of_pods.lock().unwrap(),
            2,
            "603 pods in pages of 500"
        );

        let mut everything: Vec<Value> = Vec::new();
        for kind in ["Deployment", "ReplicaSet", "Pod"] {
            everything.extend(cluster.objects[kind].iter().cloned());
        }
        let whole =
            crate::offline::with_evaluation_stack(|| audit::audit(&admission(), &everything))
                .unwrap();
        assert_eq!(streamed.objects, 605);
        assert_eq!(streamed.objects, whole.objects);
        assert_eq!(streamed.evaluated, whole.evaluated);
        assert_eq!(
            streamed.evaluated,
            1 + 601,
            "the Deployment and the loose pods"
        );
        assert_eq!(streamed.passed, whole.passed);
        assert_eq!(sorted(&streamed.findings), sorted(&whole.findings));
        let deployment: Vec<_> = streamed
            .findings
            .iter()
            .filter(|f| f.kind == "Deployment" && f.policy == "gpu-privileged")
            .collect();
        assert_eq!(deployment.len(), 1, "{:#?}", streamed.findings);
        assert_eq!(deployment[0].gpus, 2);
        assert!(
            !streamed
                .findings
                .iter()
                .any(|f| f.name.starts_with("train-5d8f")),
            "pods and ReplicaSet of the Deployment are judged through it"
        );
        let loose = streamed
            .findings
            .iter()
            .filter(|f| f.name.starts_with("loose-") && f.policy == "gpu-privileged")
            .count();
        assert_eq!(loose, 301);
    }

    #[test]
    fn a_cluster_beyond_the_cap_fails_the_run_saying_which_flag_raises_it() {
        let err = audit_of(&cluster(0), 1).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("more than 1 "), "{text}");
        assert!(text.contains("--report-max-objects"), "{text}");
    }

    fn finding(policy: &str, namespace: Option<&str>, action: &'static str, gpus: i64) -> Finding {
        Finding {
            policy: policy.into(),
            action,
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: namespace.map(str::to_string),
            name: "p".into(),
            uid: None,
            message: "m".into(),
            gpus,
        }
    }

    #[test]
    fn namespaces_beyond_the_top_ones_share_one_label() {
        let mut report = Report::default();
        for i in 0..5 {
            let ns = format!("team-{i}");
            for _ in 0..=i {
                report
                    .findings
                    .push(finding("gpu-privileged", Some(&ns), "deny", 2));
            }
        }
        report
            .findings
            .push(finding("gpu-nodepool", None, "warn", 8));
        let (violations, held) = audit_series(&report, 2);
        let namespaces: HashSet<&str> = violations.keys().map(|k| k.1.as_str()).collect();
        assert_eq!(
            namespaces,
            HashSet::from(["team-4", "team-3", OTHER_NAMESPACES, CLUSTER_SCOPE])
        );
        assert_eq!(
            violations[&("gpu-privileged".into(), OTHER_NAMESPACES.into(), "deny")],
            1 + 2 + 3
        );
        assert_eq!(held[&("gpu-privileged".into(), "team-4".into())], 10);
        assert_eq!(
            held[&("gpu-privileged".into(), OTHER_NAMESPACES.into())],
            12
        );
        assert_eq!(held[&("gpu-nodepool".into(), CLUSTER_SCOPE.into())], 8);
    }

    #[test]
    fn the_gauges_follow_the_last_report_and_a_follower_exports_none() {
        let mut registry = Registry::default();
        let metrics = AuditMetrics::register(&mut registry);
        let encode = |registry: &Registry| {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
            out
        };
        let mut report = Report {
            objects: 7,
            evaluated: 5,
            ..Report::default()
        };
        report
            .findings
            .push(finding("gpu-privileged", Some("ml"), "deny", 4));
        let meta = RunMeta {
            generated_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            duration: Duration::from_millis(2_500),
        };
        metrics.record(&report, &meta);
        metrics.set_leader(true);
        let text = encode(&registry);
        for line in [
            r#"gpu_admission_audit_violations{policy="gpu-privileged",namespace="ml",action="deny"} 1"#,
            r#"gpu_admission_audit_gpus_held{policy="gpu-privileged",namespace="ml"} 4"#,
            "gpu_admission_audit_objects 7",
            "gpu_admission_audit_objects_evaluated 5",
            "gpu_admission_audit_last_run_timestamp_seconds 1800000002",
            "gpu_admission_audit_run_duration_seconds 2.5",
            "gpu_admission_audit_run_errors_total 0",
            "gpu_admission_audit_leader 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        // The next report has no finding in "ml": its series goes.
        metrics.record(&Report::default(), &meta);
        assert!(!encode(&registry).contains(r#"namespace="ml""#));
        metrics.record(&report, &meta);
        metrics.clear();
        metrics.set_leader(false);
        metrics.inc_errors();
        let text = encode(&registry);
        assert!(!text.contains("gpu_admission_audit_violations{"), "{text}");
        assert!(text.contains("gpu_admission_audit_leader 0"), "{text}");
        assert!(
            text.contains("gpu_admission_audit_run_errors_total 1"),
            "{text}"
        );
    }

    #[test]
    fn the_latest_report_is_served_in_both_formats_until_withdrawn() {
        let latest = LatestReport::new();
        let ReportAnswer::NotYet(why) = latest.latest(ReportFormat::Page) else {
            panic!("a report before any run");
        };
        assert!(why.contains("first audit"), "{why}");
        let mut report = Report {
            objects: 3,
            evaluated: 3,
            ..Report::default()
        };
        report
            .findings
            .push(finding("gpu-privileged", Some("ml"), "deny", 4));
        let meta = RunMeta {
            generated_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            duration: Duration::from_millis(1_200),
        };
        latest.publish(&report, &meta).unwrap();
        let ReportAnswer::Ready { content_type, body } = latest.latest(ReportFormat::Json) else {
            panic!("no JSON report");
        };
        assert_eq!(content_type, "application/json");
        let json: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            json,
            serde_json::to_value(&report).unwrap(),
            "the JSON of `audit -o json`"
        );
        let ReportAnswer::Ready { content_type, body } = latest.latest(ReportFormat::Page) else {
            panic!("no page");
        };
        assert_eq!(content_type, REPORT_PAGE_CONTENT_TYPE);
        let page = String::from_utf8(body.to_vec()).unwrap();
        assert!(
            page.contains("generated 2027-01-15T08:00:00Z in 1.2 s"),
            "{page}"
        );
        assert!(
            page.contains("4 GPUs held by 1 objects violating gpu-privileged"),
            "{page}"
        );

        latest.withdraw("another replica runs it".into());
        let ReportAnswer::NotYet(why) = latest.latest(ReportFormat::Json) else {
            panic!("still served after withdraw");
        };
        assert_eq!(why, "another replica runs it");
    }

    #[test]
    fn the_lease_outlasts_an_interval() {
        assert_eq!(
            lease_duration(Duration::from_secs(600)),
            Duration::from_secs(1200)
        );
        assert_eq!(
            lease_duration(Duration::from_secs(5)),
            Duration::from_secs(30)
        );
    }
}
