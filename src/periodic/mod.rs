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
use crate::inventory::{self, Lister};
use crate::server::{ReportAnswer, ReportFormat, ReportPages};
use std::sync::RwLock;
use std::time::{Duration, SystemTime};

mod metrics;
pub mod policy_reports;
mod task;

pub use metrics::{AuditMetrics, CLUSTER_SCOPE, OTHER_NAMESPACES, TOP_NAMESPACES};
pub use policy_reports::PolicyReportSettings;
pub use task::ReportTask;

/// How the periodic report runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportSettings {
    /// Time between the starts of two runs.
    pub interval: Duration,
    /// Objects other than Pods a run may hold; a cluster with more fails
    /// the run (counted in `gpu_admission_audit_run_errors_total`).
    pub max_objects: usize,
    /// The Lease that picks the one replica that runs it; none: every
    /// replica runs it (one replica, or no permission on Leases).
    pub lease: Option<LeaseSettings>,
    /// Where the served policies come from (for the report's policy-set
    /// line and digest).
    pub policies: crate::bundle::PolicySource,
    /// The SKU catalog's name: `built-in`, or its file.
    pub catalog: String,
    /// Prices that turn the report's waste into a cost per day.
    pub prices: Option<std::sync::Arc<audit::Prices>>,
    /// Where GPU utilization is read for the idle GPU pods section; none:
    /// no such section.
    pub utilization: Option<audit::utilization::Settings>,
    /// Write the findings as PolicyReports (by the replica holding the
    /// Lease); none: off.
    pub policy_reports: Option<PolicyReportSettings>,
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
    /// pod (`POD_NAME`, else the host name, which Kubernetes sets to the
    /// pod's name).
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
            .find_map(|v| std::env::var(v).ok())
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
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
pub const REPORT_PAGE_CONTENT_TYPE: &str = "text/html; charset=utf-8";

/// When and from what a report was made.
#[derive(Clone, Debug, PartialEq)]
pub struct RunMeta {
    pub generated_at: SystemTime,
    pub duration: Duration,
    /// What the page says of its sources (cluster, policy set and digest,
    /// catalog); its `generated_at` is set from the run's.
    pub about: audit::ReportMeta,
}

/// The page `GET /report` serves: the one place the served report is
/// rendered for people, the same page as `gpu-admission audit -o html`.
pub fn render_report_page(report: &Report, meta: &RunMeta) -> String {
    let mut about = meta.about.clone();
    if let Some(at) = meta
        .generated_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .and_then(|d| k8s_openapi::jiff::Timestamp::from_second(d.as_secs() as i64).ok())
    {
        about.generated_at = at.to_string();
    }
    audit::render(report, &about)
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

/// A run given up because the server is shutting down.
#[derive(Debug, thiserror::Error)]
#[error("the audit was stopped")]
pub struct Stopped;

/// One audit of the cluster `lister` reads, judged by `admission`. Kinds
/// other than Pods are read first and held (at most `max_objects`); Pods
/// follow a page at a time, those controlled by an object already read
/// being judged through it. Between pages, a `stop()` that says true ends
/// the run with [`Stopped`]. With `utilization`, the pods holding GPUs
/// are joined with their GPU use at the end.
pub async fn audit_cluster(
    admission: &Admission,
    lister: &impl Lister,
    max_objects: usize,
    utilization: Option<&audit::utilization::Settings>,
    warn: &dyn Fn(String),
    stop: &dyn Fn() -> bool,
) -> anyhow::Result<Report> {
    let bundle = admission.bundle();
    let kinds = inventory::audited_kinds(bundle.policies.template_sources());
    let (pods, others): (Vec<_>, Vec<_>) = kinds.iter().partition(|(_, kind)| *kind == "Pod");
    let mut run = audit::run::Run::new(admission);
    // Nodes first (without permission to list them the report has no node
    // section and says so), then the other kinds, held (at most
    // `max_objects` of each), then Pods a page at a time.
    let phases: [(&[(&str, &str)], usize); 3] = [(&[("", "Node")], 0), (&others, 1), (&pods, 2)];
    for (kinds, phase) in phases {
        inventory::list_pages(lister, kinds, warn, &mut |page| {
            if stop() {
                return Err(Stopped.into());
            }
            match phase {
                0 => run.nodes(page),
                1 => run.objects(page),
                _ => run.pods_of_cluster(page),
            }
            let (nodes, held) = run.held();
            if nodes > max_objects {
                anyhow::bail!(
                    "the cluster has more than {max_objects} nodes; raise --report-max-objects"
                );
            }
            if held > max_objects {
                anyhow::bail!(
                    "the cluster has more than {max_objects} controllers, capacity objects and claims; raise --report-max-objects (each takes a few KiB during a run)"
                );
            }
            Ok(())
        })
        .await?;
    }
    let mut report = run.finish(&[]);
    if let Some(settings) = utilization {
        let catalog = bundle.placement.catalog();
        let measured =
            audit::utilization::measure(settings, &report, catalog, SystemTime::now()).await;
        report.utilization = Some(measured);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Finding;
    use crate::bundle::{self, PolicySource};
    pub(super) use crate::inventory::tests::FakeCluster;
    use crate::k8s::StaticNamespaces;
    use metrics::tests::finding;
    use serde_json::json;
    use serde_json::Value;
    use std::collections::BTreeMap;
    use std::sync::Arc;

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

    /// A privileged GPU Deployment with its ReplicaSet and pods (on node
    /// gpu-0), `loose` pods of no controller, every other one privileged,
    /// and two GPU nodes of 8 GPUs, gpu-1 untainted and unused.
    pub(super) fn cluster(loose: usize) -> FakeCluster {
        let template =
            json!({"metadata": {"labels": {"app": "train"}}, "spec": gpu_pod_spec(true)});
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "train", "namespace": "ml", "uid": "d-1"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "train"}}, "template": template},
            "status": {"replicas": 2, "readyReplicas": 2},
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
                    "spec": {"nodeName": "gpu-0", "containers": gpu_pod_spec(true)["containers"]},
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
        let node = |name: &str, taints: Value| {
            json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.azure.com/agentpool": "gpu",
                    "node.kubernetes.io/instance-type": "Standard_ND96asr_v4"}},
                "spec": {"taints": taints},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}}})
        };
        let tainted = json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]);
        FakeCluster::new(BTreeMap::from([
            (
                "Node",
                vec![node("gpu-0", tainted), node("gpu-1", json!([]))],
            ),
            ("Deployment", vec![deployment]),
            ("ReplicaSet", vec![replica_set]),
            ("Pod", pods),
        ]))
    }

    pub(super) fn admission() -> Admission {
        let loaded = bundle::load(&PolicySource::Embedded).unwrap();
        Admission::new(loaded.bundle, Arc::new(StaticNamespaces::new()))
    }

    fn audit_of(cluster: &FakeCluster, max_objects: usize) -> anyhow::Result<Report> {
        audit_with(&admission(), cluster, max_objects, None, &|| false)
    }

    /// One `audit_cluster` run on a thread with the evaluation stack.
    fn audit_with(
        admission: &Admission,
        cluster: &FakeCluster,
        max_objects: usize,
        utilization: Option<&audit::utilization::Settings>,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> anyhow::Result<Report> {
        crate::offline::with_evaluation_stack(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let run = audit_cluster(admission, cluster, max_objects, utilization, &|_| {}, stop);
            runtime.block_on(run)
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

    /// The periodic report's budget rows and findings are those of
    /// `audit` on the same objects (tests/audit_budgets.rs pins them).
    #[test]
    fn budget_rows_are_those_of_audit() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/audit/budgets.yaml");
        let objects = crate::offline::read_manifest(&path).unwrap();
        let mut namespaces = StaticNamespaces::new();
        let mut by_kind: BTreeMap<&'static str, Vec<Value>> = BTreeMap::new();
        for object in &objects {
            let kind = object["kind"].as_str().unwrap();
            if kind == "Namespace" {
                let labels = serde_json::from_value(object["metadata"]["labels"].clone());
                namespaces.insert(
                    object["metadata"]["name"].as_str().unwrap(),
                    labels.unwrap(),
                );
                continue;
            }
            let kind = (crate::inventory::AUDITED.iter())
                .chain([&crate::inventory::BUDGETS])
                .map(|(_, k)| *k)
                .find(|k| *k == kind)
                .unwrap();
            by_kind.entry(kind).or_default().push(object.clone());
        }
        let loaded = bundle::load(&PolicySource::Embedded).unwrap();
        let admission = Admission::new(loaded.bundle, Arc::new(namespaces));
        // The fake serves by kind alone: Volcano's Jobs are not Jobs.
        struct Served(FakeCluster);
        impl crate::inventory::Lister for Served {
            async fn list_page(
                &self,
                ask: crate::inventory::PageAsk<'_>,
            ) -> Result<crate::inventory::Page, crate::inventory::ListError> {
                match ask.group {
                    "batch.volcano.sh" => {
                        Err(crate::inventory::ListError::NotServed(String::new()))
                    }
                    _ => self.0.list_page(ask).await,
                }
            }
        }
        let cluster = Served(FakeCluster::new(by_kind));
        let report = crate::offline::block_on(audit_cluster(
            &admission,
            &cluster,
            1000,
            None,
            &|_| {},
            &|| false,
        ));
        let report = report.unwrap().unwrap();
        let objects: Vec<Value> = objects
            .into_iter()
            .filter(|o| o["kind"] != "Namespace")
            .collect();
        let offline = crate::offline::with_evaluation_stack(|| audit::audit(&admission, &objects));
        let offline = offline.unwrap();
        assert_eq!(report.budgets.len(), 3);
        assert_eq!(report.budget_findings.len(), 5);
        assert_eq!(report.budgets, offline.budgets);
        assert_eq!(report.budget_findings, offline.budget_findings);
    }

    /// The run honours the exceptions of the admission's lookup, across
    /// pages: what they let through is counted apart, not as findings,
    /// and each exception is listed with it.
    #[test]
    fn the_run_honours_the_admissions_exceptions_on_every_page() {
        use crate::exceptions::StaticExceptions;
        let cluster = cluster(1200);
        let baseline = audit_of(&cluster, 100).unwrap();
        let privileged = |report: &Report, ns: &str| {
            (report.findings.iter())
                .filter(|f| f.policy == "gpu-privileged" && f.namespace.as_deref() == Some(ns))
                .count()
        };
        let (ml, team) = (privileged(&baseline, "ml"), privileged(&baseline, "team-0"));
        assert!(ml > 0 && team > 0, "{ml} {team}");
        let admission = admission();
        let read = |text: &str| {
            let value: Value = serde_yaml::from_str(text).unwrap();
            Arc::new(admission.bundle().policies.read_exception(&value).unwrap())
        };
        let exceptions = vec![
            read("apiVersion: gpu-admission.io/v1alpha1\nkind: GpuPolicyException\nmetadata: {name: train, namespace: ml}\nspec: {policies: [gpu-privileged], match: {kinds: [Deployment], names: [train]}, reason: driver debugging, requestedBy: alice}\n"),
            read("apiVersion: gpu-admission.io/v1alpha1\nkind: GpuPolicyException\nmetadata: {name: loose, namespace: team-0}\nspec: {policies: [gpu-privileged], match: {names: [\"loose-*\"]}, reason: benchmarks, expiresAt: \"2099-01-01T00:00:00Z\"}\n"),
        ];
        let admission = admission.with_exceptions(Arc::new(StaticExceptions::new(exceptions)));
        let report = audit_with(&admission, &cluster, 100, None, &|| false).unwrap();
        assert_eq!(privileged(&report, "ml"), 0);
        assert_eq!(privileged(&report, "team-0"), 0);
        assert_eq!(
            privileged(&report, "team-1"),
            privileged(&baseline, "team-1")
        );
        assert_eq!(report.findings.len(), baseline.findings.len() - ml - team);
        assert_eq!(report.excepted.len(), ml + team);
        let listed: Vec<(String, usize)> = (report.exceptions.iter())
            .map(|e| (e.id(), e.let_through.len()))
            .collect();
        assert_eq!(
            listed,
            [
                ("ml/train".to_string(), ml),
                ("team-0/loose".to_string(), team)
            ]
        );
        assert_eq!(report.exceptions[0].requested_by.as_deref(), Some("alice"));
    }

    #[test]
    fn pods_read_a_page_at_a_time_give_the_report_of_the_whole_cluster_at_once() {
        let cluster = cluster(601);
        let streamed = audit_of(&cluster, 100).unwrap();
        assert_eq!(cluster.pages_of("Pod"), 2, "603 pods in pages of 500");

        let mut everything: Vec<Value> = Vec::new();
        for kind in ["Node", "Deployment", "ReplicaSet", "Pod"] {
            everything.extend(cluster.objects[kind].iter().cloned());
        }
        let whole =
            crate::offline::with_evaluation_stack(|| audit::audit(&admission(), &everything))
                .unwrap();
        assert_eq!(streamed.objects, 607);
        assert_eq!(streamed.objects, whole.objects);
        assert_eq!(
            (streamed.gpus_held, streamed.gpus_pending),
            (2 + 601, 0),
            "the Deployment's 2 ready replicas and the running loose pods"
        );
        assert_eq!(
            (streamed.gpus_held, streamed.gpus_in_violation),
            (whole.gpus_held, whole.gpus_in_violation)
        );
        assert_eq!(streamed.held_pods.len(), 2 + 601);
        let (nodes, whole_nodes) = (streamed.nodes.unwrap(), whole.nodes.unwrap());
        assert_eq!(nodes.pools, whole_nodes.pools);
        assert_eq!(nodes.findings, whole_nodes.findings);
        assert_eq!(
            (
                nodes.gpus_allocatable,
                nodes.gpus_requested,
                nodes.gpus_idle
            ),
            (16, 2, 14),
            "the Deployment's pods are on gpu-0, the loose ones on no node"
        );
        let rules = nodes.findings.iter().map(|f| (f.rule, f.node.as_str()));
        let expected = [
            (audit::nodes::UNTAINTED, "gpu-1"),
            (audit::nodes::IDLE, "gpu-1"),
        ];
        assert_eq!(rules.collect::<Vec<_>>(), expected);
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
    fn the_run_joins_the_gpu_pods_of_every_page_with_their_utilization() {
        use crate::audit::utilization::{self, Settings, Source};
        let samples: Vec<Value> = ["max", "mean"]
            .iter()
            .flat_map(|stat| {
                [("ml", "train-5d8f-0", 0.0), ("team-1", "loose-1", 0.7)].map(|(ns, pod, v)| {
                    json!({"metric": {"namespace": ns, "pod": pod, "stat": stat,
                                      "metric": utilization::ENGINE_ACTIVE, "window": "24h"},
                           "value": [1_800_000_000.0, v.to_string()]})
                })
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let answer = dir.path().join("answer.json");
        let body =
            json!({"status": "success", "data": {"resultType": "vector", "result": samples}});
        std::fs::write(&answer, body.to_string()).unwrap();
        let settings = Settings {
            source: Source::File(answer),
            window: utilization::DEFAULT_WINDOW,
            threshold_percent: utilization::DEFAULT_THRESHOLD_PERCENT,
            sizing: utilization::sizing::DEFAULT_RULES,
        };
        let cluster = cluster(601);
        let report = audit_with(&admission(), &cluster, 100, Some(&settings), &|| false).unwrap();
        let m = report.utilization.unwrap().measured.unwrap();
        // The Deployment's pods (judged through it) are joined too, from
        // both pages of Pods.
        assert_eq!(m.gpu_pods, 603);
        assert_eq!(m.busy_pods, 1);
        assert_eq!(m.idle_pods.len(), 1);
        assert_eq!(m.idle_pods[0].pod, "train-5d8f-0");
        assert_eq!(m.idle_pods[0].gpu_hours, 24.0);
        assert_eq!(m.without_data.len(), 601);
    }

    #[test]
    fn a_stop_between_pages_ends_the_run() {
        let cluster = cluster(601);
        let pages = std::sync::atomic::AtomicUsize::new(0);
        // Stop once the nodes, the controllers and the first page of Pods
        // are in.
        let stop = || pages.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= 4;
        let err = audit_with(&admission(), &cluster, 100, None, &stop).unwrap_err();
        assert!(err.is::<Stopped>(), "{err:#}");
        assert_eq!(cluster.pages_of("Pod"), 2);
    }

    #[test]
    fn a_cluster_beyond_the_cap_fails_the_run_saying_which_flag_raises_it() {
        let err = audit_of(&cluster(0), 1).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("more than 1 "), "{text}");
        assert!(text.contains("--report-max-objects"), "{text}");
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
            about: about(),
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
        assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
        assert_eq!(
            page,
            audit::render(
                &report,
                &audit::ReportMeta {
                    generated_at: "2027-01-15T08:00:00Z".into(),
                    ..about()
                }
            ),
            "the page of `audit -o html`, generated when the run started"
        );
        assert!(page.contains("https://aks.example:443"), "{page}");

        latest.withdraw("another replica runs it".into());
        let ReportAnswer::NotYet(why) = latest.latest(ReportFormat::Json) else {
            panic!("still served after withdraw");
        };
        assert_eq!(why, "another replica runs it");
    }

    /// What a test report says of its sources.
    pub(super) fn about() -> audit::ReportMeta {
        audit::ReportMeta {
            generated_at: "2000-01-01T00:00:00Z".into(),
            source: audit::ReportSource::Cluster("https://aks.example:443".into()),
            policy_set: "built-in policies".into(),
            policy_digest: "0d85".into(),
            policies: vec![("gpu-privileged".into(), Some("privileged GPU pods".into()))],
            catalog: "built-in".into(),
            catalog_date: None,
        }
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
