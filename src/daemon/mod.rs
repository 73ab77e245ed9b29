//! `serve` as a list of named services: each watch, the policy reload, the
//! managed certificates and the periodic report is a [`Service`], stopped
//! one way (awaiting its stop, bounded by a timeout). [`Daemon::run`]
//! serves the edge until it stops (SIGTERM, through the server's
//! `ShutdownHandle`), then stops the services, last started first.
use crate::certs::managed;
use crate::cluster::watch::Watched;
use crate::server::{Gate, ServeConfig};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

/// Longest wait for one service to stop: releasing a Lease is a write.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A running part of `serve`, with its name and its one way to stop.
pub struct Service {
    name: &'static str,
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Service {
    /// A service stopped by awaiting `stop`, which does nothing before.
    pub fn new(name: &'static str, stop: impl Future<Output = ()> + Send + 'static) -> Service {
        Service {
            name,
            stop: Box::pin(stop),
        }
    }

    /// A task that runs until aborted, such as a watch.
    pub fn task(name: &'static str, task: tokio::task::JoinHandle<()>) -> Service {
        Service::new(name, async move {
            task.abort();
            let _ = task.await;
        })
    }

    /// Something that runs for as long as it is held, such as a folder
    /// watcher: stopping drops it.
    pub fn held(name: &'static str, held: impl Send + 'static) -> Service {
        Service::new(name, async move { drop(held) })
    }

    /// Opens `gate` once `watched` has its first list; until then `/readyz`
    /// says what went wrong after the gate's reason ("retrying: 500 …",
    /// "forbidden: …"). Stopping the service stops following.
    pub fn following(self, gate: Gate, watched: Watched) -> Service {
        let cache = self.name;
        let following = tokio::spawn(async move {
            let mut updates = watched.updates();
            loop {
                let status = updates.borrow_and_update().clone();
                if status.synced {
                    gate.say(None);
                    gate.open();
                    tracing::info!(cache, state = ?status.state, "cache synced");
                    return;
                }
                gate.say(status.why_not_synced());
                if updates.changed().await.is_err() {
                    tracing::error!(
                        cache,
                        "watch stopped before its first list; staying not ready"
                    );
                    return;
                }
            }
        });
        let Service { name, stop } = self;
        Service::new(name, async move {
            following.abort();
            stop.await
        })
    }
}

/// The services of one `serve`, in the order they started.
#[derive(Default)]
pub struct Daemon {
    services: Vec<Service>,
}

impl Daemon {
    /// Adds services that have started: none, one or several.
    pub fn start(&mut self, services: impl IntoIterator<Item = Service>) {
        self.services.extend(services);
    }

    /// Runs `edge` until it returns, then stops every service.
    pub async fn run(self, edge: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
        let result = edge.await;
        tracing::info!(service = "edge", "stopped");
        self.stop(STOP_TIMEOUT).await;
        result
    }

    /// Stops the services, last started first, each cut after `timeout`;
    /// returns the names of those cut.
    async fn stop(self, timeout: Duration) -> Vec<&'static str> {
        let mut cut = Vec::new();
        for Service { name, stop } in self.services.into_iter().rev() {
            tracing::info!(service = name, "stopping");
            if tokio::time::timeout(timeout, stop).await.is_err() {
                tracing::warn!(
                    service = name,
                    timeout_ms = timeout.as_millis() as u64,
                    "did not stop in time; going on"
                );
                cut.push(name);
            }
        }
        cut
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Everything `serve` needs: the edge's settings and those of the services
/// around it. The CLI parses flags into it and tests build it directly.
#[derive(Clone, Debug, PartialEq)]
pub struct DaemonConfig {
    pub edge: ServeConfig,
    /// Policy folder; none means the policies built into the binary.
    pub policies: Option<PathBuf>,
    /// Data file for the policy loader (the SKU catalog); none means built in.
    pub catalog: Option<PathBuf>,
    pub log_format: LogFormat,
    /// Accept a policy reload that leaves no binding or placement profile
    /// where the served set has some.
    pub allow_empty_policies: bool,
    /// Period of the in-cluster audit served at `/report`; none: off.
    pub report_interval: Option<Duration>,
    /// Objects other than Pods one audit may hold.
    pub report_max_objects: usize,
    /// Name of the Lease that elects the replica running the audit; none:
    /// every replica runs it.
    pub report_lease: Option<String>,
    /// A price file for the report's costs; none: no costs.
    pub report_prices: Option<PathBuf>,
    /// Where the report reads GPU utilization; none: no idle GPU pods section.
    pub utilization: Option<crate::audit::utilization::Settings>,
    /// The usernames whose updates are Kueue's (`--kueue-controller`).
    pub kueue_controllers: Vec<String>,
    /// Write the report's findings as PolicyReports in the cluster.
    pub policy_reports: bool,
    /// The API they are written in (`--reports`); none: PolicyReports.
    pub policy_report_schema: Option<crate::cluster::policy_reports::Schema>,
    /// Results in one namespace's PolicyReport.
    pub policy_report_max_results: usize,
    /// PolicyReport writes per second, at most.
    pub policy_report_writes_per_second: u32,
    /// Watch the cluster's Nodes (in a cluster), so that where a pod can
    /// land is judged against the nodes that exist; off: by labels alone.
    pub node_cache: bool,
    /// Watch the cluster's GpuPolicyExceptions (in a cluster); off: only
    /// the policy folder's apply.
    pub policy_exceptions: bool,
    /// Watch the cluster's GpuBudgets and GPU pods (in a cluster) and hold
    /// namespaces to their budgets; off: no budget applies.
    pub gpu_budgets: bool,
    /// `/mutate` keeps GPU pods to the sizes with room left in their
    /// budgets (with `gpu_budgets`).
    pub budget_narrowing: bool,
    /// Certificates kept by the server itself in a Secret (instead of the
    /// edge's files or self-generated ones); none: off.
    pub manage_certs: Option<managed::Options>,
}

/// Default of [`DaemonConfig::report_max_objects`].
pub const DEFAULT_REPORT_MAX_OBJECTS: usize = 20_000;
/// Default of [`DaemonConfig::report_lease`].
pub const DEFAULT_REPORT_LEASE: &str = "gpu-admission-report";

impl Default for DaemonConfig {
    fn default() -> Self {
        use crate::periodic::policy_reports::{DEFAULT_MAX_RESULTS, DEFAULT_WRITES_PER_SECOND};
        DaemonConfig {
            edge: ServeConfig::default(),
            policies: None,
            catalog: None,
            log_format: LogFormat::Text,
            allow_empty_policies: false,
            report_interval: None,
            report_max_objects: DEFAULT_REPORT_MAX_OBJECTS,
            report_lease: Some(DEFAULT_REPORT_LEASE.to_string()),
            report_prices: None,
            utilization: None,
            kueue_controllers: vec![crate::kueue::DEFAULT_CONTROLLER.to_string()],
            policy_reports: false,
            policy_report_schema: None,
            policy_report_max_results: DEFAULT_MAX_RESULTS,
            policy_report_writes_per_second: DEFAULT_WRITES_PER_SECOND,
            node_cache: true,
            policy_exceptions: true,
            gpu_budgets: true,
            budget_narrowing: false,
            manage_certs: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A service that records its name in `stopped` when it stops.
    fn recording(name: &'static str, stopped: &Arc<Mutex<Vec<&'static str>>>) -> Service {
        let stopped = stopped.clone();
        Service::new(name, async move { stopped.lock().unwrap().push(name) })
    }

    #[tokio::test]
    async fn services_stop_after_the_edge_last_started_first() {
        let stopped = Arc::new(Mutex::new(Vec::new()));
        let mut daemon = Daemon::default();
        daemon.start([recording("namespaces", &stopped)]);
        daemon.start(None);
        daemon.start(Some(recording("certificates", &stopped)));
        daemon.start([recording("report", &stopped)]);
        let during = stopped.clone();
        let edge = async move {
            assert!(during.lock().unwrap().is_empty(), "nothing stops first");
            anyhow::bail!("edge failed")
        };
        let err = daemon.run(edge).await.unwrap_err();
        assert_eq!(err.to_string(), "edge failed");
        assert_eq!(
            *stopped.lock().unwrap(),
            ["report", "certificates", "namespaces"]
        );
    }

    #[tokio::test]
    async fn a_service_that_hangs_is_cut_at_its_timeout_and_the_rest_still_stop() {
        let stopped = Arc::new(Mutex::new(Vec::new()));
        let mut daemon = Daemon::default();
        daemon.start([
            recording("namespaces", &stopped),
            Service::new("certificates", std::future::pending()),
            recording("report", &stopped),
        ]);
        let cut = daemon.stop(Duration::from_millis(20)).await;
        assert_eq!(cut, ["certificates"]);
        assert_eq!(*stopped.lock().unwrap(), ["report", "namespaces"]);
    }

    #[tokio::test]
    async fn a_watch_is_aborted_and_held_things_are_dropped() {
        let (watching, watch_ended) = tokio::sync::oneshot::channel::<()>();
        let watch = tokio::spawn(async move {
            let _watching = watching;
            std::future::pending::<()>().await
        });
        let (holding, hold_ended) = tokio::sync::oneshot::channel::<()>();
        let mut daemon = Daemon::default();
        daemon.start([
            Service::task("nodes", watch),
            Service::held("reload", holding),
        ]);
        assert!(daemon.stop(STOP_TIMEOUT).await.is_empty());
        assert!(watch_ended.await.is_err(), "the watch ended");
        assert!(hold_ended.await.is_err(), "the watcher was dropped");
    }

    #[tokio::test]
    async fn a_gate_follows_its_cache_and_stopping_stops_following() {
        use crate::cluster::watch::tests::wait_for;
        use crate::cluster::watch::{State, Status};
        let readiness = crate::server::Readiness::new();
        let (status, watched) = tokio::sync::watch::channel(Status::default());
        let service = Service::task("nodes", tokio::spawn(async {}))
            .following(readiness.gate("nodes not synced"), Watched::from(watched));
        tokio::task::yield_now().await;
        let said = || readiness.not_ready_reason();
        wait_for("listing", || {
            said().as_deref() == Some("nodes not synced\n")
        })
        .await;
        status.send_replace(Status {
            synced: false,
            state: State::Failing("500 Internal Server Error".into()),
        });
        wait_for("the failure", || {
            said().as_deref() == Some("nodes not synced: retrying: 500 Internal Server Error\n")
        })
        .await;
        status.send_replace(Status {
            synced: true,
            state: State::Watching,
        });
        wait_for("ready", || readiness.is_ready()).await;

        let readiness = crate::server::Readiness::new();
        let (_status, watched) = tokio::sync::watch::channel(Status::default());
        let service_2 = Service::task("nodes", tokio::spawn(async {}))
            .following(readiness.gate("nodes not synced"), Watched::from(watched));
        let mut daemon = Daemon::default();
        daemon.start([service, service_2]);
        assert!(daemon.stop(STOP_TIMEOUT).await.is_empty());
        assert!(!readiness.is_ready());
    }
}
