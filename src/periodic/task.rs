//! The report thread: once ready, every interval, lead (or not), audit,
//! publish.
use super::{
    audit_cluster, lease_duration, AuditMetrics, LatestReport, ReportSettings, RunMeta, Stopped,
};
use crate::admission::Admission;
use crate::audit::policy_reports::{MANAGER, REPORT_NAME};
use crate::audit::{ReportMeta, ReportSource};
use crate::cluster::lease::{ClusterLease, LeaderElector, LeaseStore};
use crate::cluster::policy_reports::{ClusterPolicyReports, PolicyReportStore, ReportStoreError};
use crate::cluster::ClusterLister;
use crate::inventory::Lister;
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

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

    /// Stops the thread and waits for it: a run in progress ends after
    /// the page it is judging, and the Lease is released.
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

/// Waits `period` on the stop channel: whether a stop came.
fn stopped_within(stopped: &Receiver<()>, period: Duration) -> bool {
    !matches!(stopped.recv_timeout(period), Err(RecvTimeoutError::Timeout))
}

impl Runner {
    fn run(
        &self,
        runtime: &tokio::runtime::Runtime,
        stopped: &Receiver<()>,
        ready: &dyn Fn() -> bool,
    ) {
        while !ready() {
            if stopped_within(stopped, Duration::from_millis(500)) {
                return;
            }
        }
        // Without a client (no service account token yet, a kubeconfig
        // that does not load) each interval tries again.
        let (client, cluster_url) = loop {
            match runtime.block_on(crate::cluster::connect()) {
                Ok(connected) => break connected,
                Err(err) => {
                    self.metrics.inc_errors();
                    self.latest
                        .withdraw(format!("no report: no cluster client ({err})"));
                    tracing::error!(error = %err, "the periodic report has no cluster client; trying again in one interval");
                    if stopped_within(stopped, self.settings.interval) {
                        return;
                    }
                }
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
        let reports = (self.settings.policy_reports.as_ref())
            .map(|s| ClusterPolicyReports::new(client.clone(), s.schema));
        loop {
            let started = Instant::now();
            self.tick(
                runtime,
                &lister,
                &cluster_url,
                elector.as_mut(),
                reports.as_ref(),
                stopped,
            );
            let rest = self.settings.interval.saturating_sub(started.elapsed());
            if stopped_within(stopped, rest) {
                break;
            }
        }
        if let Some(elector) = elector.as_mut() {
            if let Err(err) = runtime.block_on(elector.release(SystemTime::now())) {
                tracing::warn!(error = %err, "could not release the report lease; another replica takes over once it expires");
            }
        }
    }

    /// What the report says of its sources: the cluster at `cluster_url`,
    /// the policy set served (its files' digest as they are now) and the
    /// catalog.
    fn about(&self, cluster_url: &str) -> ReportMeta {
        let policies = &self.settings.policies;
        let digest = crate::bundle::policy_digest(policies).unwrap_or_else(|_| {
            "unavailable (the policy files do not load; the last good set is served)".to_string()
        });
        ReportMeta::now(
            ReportSource::Cluster(cluster_url.to_string()),
            policies.describe(),
            digest,
            &self.admission.bundle(),
            self.settings.catalog.clone(),
        )
    }

    /// One period: lead (or not), audit, publish, and write the
    /// PolicyReports to `reports` when they are on.
    fn tick(
        &self,
        runtime: &tokio::runtime::Runtime,
        lister: &impl Lister,
        cluster_url: &str,
        elector: Option<&mut LeaderElector<impl LeaseStore>>,
        reports: Option<&impl PolicyReportStore>,
        stopped: &Receiver<()>,
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
        // A shutdown ends the run between two pages, so the Lease is
        // released soon after.
        let stop = || {
            matches!(
                stopped.try_recv(),
                Ok(()) | Err(std::sync::mpsc::TryRecvError::Disconnected)
            )
        };
        let run = runtime.block_on(audit_cluster(
            &self.admission,
            lister,
            self.settings.max_objects,
            self.settings.utilization.as_ref(),
            &warn,
            &stop,
        ));
        match run {
            Ok(mut report) => {
                crate::audit::conclude(&mut report, self.settings.prices.as_deref());
                let meta = RunMeta {
                    generated_at,
                    duration: started.elapsed(),
                    about: self.about(cluster_url),
                };
                if let Err(err) = self.latest.publish(&report, &meta) {
                    self.metrics.inc_errors();
                    tracing::error!(error = %err, "cannot render the report");
                    return;
                }
                self.metrics.record(&report, &meta);
                let nodes = report.nodes.as_ref();
                tracing::info!(
                    objects = report.objects,
                    evaluated = report.evaluated,
                    findings = report.findings.len(),
                    gpus_held = report.gpus_held,
                    gpus_pending = report.gpus_pending,
                    gpus_in_violation = report.gpus_in_violation,
                    gpus_idle = nodes.map(|n| n.gpus_idle),
                    gpus_unusable = nodes.map(|n| n.gpus_unusable),
                    seconds = meta.duration.as_secs_f64(),
                    "periodic report done"
                );
                if let (Some(store), Some(settings)) = (reports, &self.settings.policy_reports) {
                    let held = self.write_policy_reports(
                        runtime,
                        store,
                        &report,
                        generated_at,
                        settings,
                        &stop,
                    );
                    // The page says which namespaces have no report, and why.
                    if !held.is_empty() {
                        report.reports_held = held;
                        if let Err(err) = self.latest.publish(&report, &meta) {
                            tracing::error!(error = %err, "cannot render the report");
                        }
                    }
                }
            }
            Err(err) if err.is::<Stopped>() => {
                tracing::info!("periodic report stopped for shutdown");
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

impl Runner {
    /// Makes the cluster's policy reports say what `report` found. A
    /// failure leaves them as they were (the next run tries again) and is
    /// counted as a run error, but for a cluster without their CRD. A
    /// namespace whose report name another owner holds is a warning
    /// naming both, and a series of `gpu_admission_audit_report_conflicts`;
    /// those namespaces and owners are returned.
    fn write_policy_reports(
        &self,
        runtime: &tokio::runtime::Runtime,
        store: &impl PolicyReportStore,
        report: &crate::audit::Report,
        generated_at: SystemTime,
        settings: &super::PolicyReportSettings,
        stop: &dyn Fn() -> bool,
    ) -> BTreeMap<String, String> {
        let synced = runtime.block_on(super::policy_reports::sync(
            store,
            report,
            generated_at,
            settings,
            stop,
        ));
        match synced {
            Ok(done) => {
                tracing::info!(
                    created = done.created,
                    updated = done.updated,
                    unchanged = done.unchanged,
                    deleted = done.deleted,
                    conflicts = done.conflicts,
                    held_elsewhere = done.held_elsewhere.len(),
                    stopped = done.stopped,
                    "policy reports written"
                );
                let kind = settings.schema.kind(false);
                for (namespace, owner) in &done.held_elsewhere {
                    tracing::warn!(namespace, owner, "the {kind} {namespace}/{REPORT_NAME} belongs to {owner}, not to {MANAGER}: this namespace's findings reach no {kind}; remove or rename that report");
                }
                self.metrics.set_report_conflicts(&done.held_elsewhere);
                return done.held_elsewhere;
            }
            Err(err @ ReportStoreError::NotServed(..)) => {
                tracing::warn!(error = %err, "no policy reports written");
            }
            Err(err) => {
                self.metrics.inc_errors();
                tracing::error!(
                    error = format!("{err:#}"),
                    "cannot write the policy reports; the next run tries again"
                );
            }
        }
        BTreeMap::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::lease::tests::MemoryLease;
    use crate::periodic::policy_reports::tests::MemoryReports;
    use crate::periodic::tests::{admission, cluster, FakeCluster};
    use crate::periodic::PolicyReportSettings;
    use crate::server::{ReportAnswer, ReportFormat, ReportPages};
    use prometheus_client::registry::Registry;

    /// A replica on a runtime of its own, never stopped.
    struct Replica {
        runner: Runner,
        registry: Registry,
        elector: LeaderElector<MemoryLease>,
        runtime: tokio::runtime::Runtime,
        stop: (std::sync::mpsc::Sender<()>, Receiver<()>),
    }

    const URL: &str = "https://aks.example:443/";

    impl Replica {
        /// One report period of this replica.
        fn tick(&mut self, cluster: &FakeCluster, reports: Option<&MemoryReports>) {
            let elector = Some(&mut self.elector);
            let stopped = &self.stop.1;
            (self.runner).tick(&self.runtime, cluster, URL, elector, reports, stopped);
        }
    }

    fn replica(name: &str, lease: &MemoryLease) -> Replica {
        let mut registry = Registry::default();
        let metrics = AuditMetrics::register(&mut registry);
        Replica {
            runner: Runner {
                settings: ReportSettings {
                    interval: Duration::from_secs(600),
                    max_objects: 100,
                    lease: None,
                    policies: crate::bundle::PolicySource::Embedded,
                    catalog: "built-in".into(),
                    prices: None,
                    utilization: None,
                    policy_reports: Some(PolicyReportSettings {
                        max_results: 100,
                        writes_per_second: 1000,
                        ..PolicyReportSettings::default()
                    }),
                },
                admission: Arc::new(admission()),
                latest: Arc::new(LatestReport::new()),
                metrics,
            },
            registry,
            elector: LeaderElector::new(lease.clone(), name, Duration::from_secs(1200)),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            stop: std::sync::mpsc::channel(),
        }
    }

    fn metrics_text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn only_the_replica_holding_the_lease_audits_and_the_other_says_who_does() {
        // Everything on one thread with the evaluation stack, as the
        // report thread runs.
        crate::offline::with_evaluation_stack(two_replicas_share_one_lease).unwrap();
    }

    fn two_replicas_share_one_lease() {
        let cluster = cluster(3);
        let lease = MemoryLease::default();
        let mut a = replica("pod-a", &lease);
        let mut b = replica("pod-b", &lease);
        a.tick(&cluster, None);
        b.tick(&cluster, None);

        assert!(matches!(
            a.runner.latest.latest(ReportFormat::Json),
            ReportAnswer::Ready { .. }
        ));
        let text = metrics_text(&a.registry);
        assert!(text.contains("gpu_admission_audit_leader 1"), "{text}");
        assert!(
            text.contains(
                r#"gpu_admission_audit_gpus_held{policy="gpu-privileged",namespace="ml"} 2"#
            ),
            "{text}"
        );

        let ReportAnswer::NotYet(why) = b.runner.latest.latest(ReportFormat::Page) else {
            panic!("the follower serves a report");
        };
        assert!(
            why.contains("(pod-b): pod-a holds the report lease"),
            "{why}"
        );
        assert!(why.contains("port-forward pod/pod-a"), "{why}");
        let text = metrics_text(&b.registry);
        assert!(text.contains("gpu_admission_audit_leader 0"), "{text}");
        assert!(!text.contains("gpu_admission_audit_gpus_held{"), "{text}");
        assert_eq!(cluster.pages_of("Pod"), 1, "one audit");

        // The Lease cannot be read: the run is skipped and counted.
        *lease.unreachable.borrow_mut() = true;
        a.tick(&cluster, None);
        assert!(metrics_text(&a.registry).contains("gpu_admission_audit_run_errors_total 1"));
        assert_eq!(cluster.pages_of("Pod"), 1);
    }

    #[test]
    fn only_the_leader_writes_policy_reports_and_a_new_leader_takes_them_over() {
        crate::offline::with_evaluation_stack(policy_reports_survive_a_leader_change).unwrap();
    }

    fn policy_reports_survive_a_leader_change() {
        let lease = MemoryLease::default();
        let reports = MemoryReports::default();
        let mut a = replica("pod-a", &lease);
        let mut b = replica("pod-b", &lease);
        // GPU pods with findings in ml (the Deployment) and team-0..2.
        let busy = cluster(3);
        a.tick(&busy, Some(&reports));
        let namespaces = |reports: &MemoryReports| -> Vec<String> {
            reports
                .stored
                .borrow()
                .keys()
                .map(|k| k.0.clone())
                .collect()
        };
        assert_eq!(namespaces(&reports), ["ml", "team-0", "team-1", "team-2"]);
        assert_eq!(reports.writes.borrow().len(), 4);
        let ml = reports.get("ml").unwrap();
        assert_eq!(ml["results"][0]["resources"][0]["kind"], "Deployment");
        assert_eq!(ml["results"][0]["properties"]["gpus"], "2");

        // The follower writes nothing.
        b.tick(&busy, Some(&reports));
        assert_eq!(reports.writes.borrow().len(), 4);

        // pod-a steps down; pod-b leads, finds pod-a's reports unchanged
        // and writes nothing, then follows the cluster as it changes.
        a.runtime
            .block_on(a.elector.release(SystemTime::now()))
            .unwrap();
        b.tick(&busy, Some(&reports));
        assert!(b.elector.is_leader());
        assert_eq!(reports.writes.borrow().len(), 4, "{:?}", reports.writes);
        let only_ml = cluster(0);
        b.tick(&only_ml, Some(&reports));
        assert_eq!(namespaces(&reports), ["ml"]);
        assert_eq!(
            reports.writes.borrow()[4..],
            ["delete team-0", "delete team-1", "delete team-2"]
        );
        assert_eq!(reports.get("ml").unwrap(), ml, "ml's report unchanged");
    }
}
