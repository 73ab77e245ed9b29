//! The report thread: once ready, every interval, lead (or not), audit,
//! publish.
use super::{
    audit_cluster, lease_duration, AuditMetrics, LatestReport, ReportSettings, RunMeta, Stopped,
};
use crate::admission::Admission;
use crate::inventory::{ClusterLister, Lister};
use crate::k8s::lease::{ClusterLease, LeaderElector, LeaseStore};
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
        // Without a client (no service account token yet, a kubeconfig
        // that does not load) each interval tries again.
        let client = loop {
            match runtime.block_on(kube::Client::try_default()) {
                Ok(client) => break client,
                Err(err) => {
                    self.metrics.inc_errors();
                    self.latest
                        .withdraw(format!("no report: no cluster client ({err})"));
                    tracing::error!(error = %err, "the periodic report has no cluster client; trying again in one interval");
                    if let Wake::Stop = sleep(stopped, self.settings.interval) {
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
        loop {
            let started = Instant::now();
            self.tick(runtime, &lister, elector.as_mut(), stopped);
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
            &warn,
            &stop,
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
