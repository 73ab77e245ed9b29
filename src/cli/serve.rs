//! `gpu-admission serve`: flags into a [`DaemonConfig`], logging, the
//! policy bundle, signals, and the services a [`Daemon`] runs around the edge.
use super::flags::{
    parse_duration, parse_optional_addr, parse_optional_name, parse_report_interval, parse_size,
    parse_username, OptionalAddr, OptionalName, Switch,
};
use super::serve_budgets::PendingBudgets;
use super::serve_certs::{managed_certs, ManagedCertArgs};
use super::serve_exceptions::{excepted_counter, PendingExceptions};
use crate::admission::{Admission, Bundle};
use crate::bundle::{self, Fingerprint, PolicySource, Snapshot};
use crate::cluster::budgets::metrics::BudgetMetrics;
use crate::cluster::exceptions::metrics::ExceptionMetrics;
use crate::cluster::watch::{CacheMetrics, Settings};
use crate::cluster::{ClusterClaims, ClusterNamespaces, ClusterNodes};
use crate::daemon::{self, Daemon, DaemonConfig, LogFormat, Service};
use crate::gpu::catalog::Catalog;
use crate::gpu::{NoNodes, NodeLookup};
use crate::k8s::{ClaimLookup, NamespaceLookup};
use crate::periodic::{
    AuditMetrics, LatestReport, LeaseSettings, PolicyReportSettings, ReportSettings, ReportTask,
};
use crate::policy::{self, DirWatcher, LoadErrors, WatchOptions};
use crate::review;
use crate::server::{self, Metrics, OnError, Readiness, ServeConfig, Server, ShutdownHandle};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address of the HTTPS webhook listener.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Policy folder (ValidatingAdmissionPolicy, bindings, params, PlacementProfile).
    #[arg(long, value_name = "DIR")]
    pub policies: Option<PathBuf>,
    /// SKU catalog CSV replacing the built-in one (columns of data/azure-gpu-skus.csv).
    #[arg(long, value_name = "CSV")]
    pub catalog: Option<PathBuf>,
    /// Serving certificate chain, PEM, leaf first. Without it, a local CA
    /// and certificate are created under --certs-dir.
    #[arg(
        long,
        value_name = "PEM",
        requires = "tls_key",
        conflicts_with = "manage_certs"
    )]
    pub tls_cert: Option<PathBuf>,
    /// Private key of the serving certificate, PEM (PKCS#8, RSA or SEC1).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Address of the plain-HTTP metrics listener (/metrics, /report, and
    /// /healthz, /readyz), or `off`. Loopback unless told otherwise: in a
    /// cluster the Deployment names the pod's address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9090", value_parser = parse_optional_addr)]
    pub metrics_listen: OptionalAddr,
    /// Address of the plain-HTTP probe listener (/healthz and /readyz only,
    /// for the kubelet, apart from everything else), or `off`.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081", value_parser = parse_optional_addr)]
    pub health_listen: OptionalAddr,
    /// Where self-generated certificates are kept.
    #[arg(long, value_name = "DIR", default_value = "certs")]
    pub certs_dir: PathBuf,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// /validate reviews evaluated at once on answering threads (default:
    /// twice the CPUs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrency: Option<u32>,
    /// /mutate reviews evaluated at once on answering threads, in slots of
    /// their own so that slow validations never delay placement (default:
    /// twice the CPUs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_mutate_concurrency: Option<u32>,
    /// Memory all requests in progress may hold: a third for bodies being
    /// read (taken as their bytes arrive, within each client's share; a
    /// body that does not fit is refused at once), the rest for decoded
    /// requests (waited for within the deadline).
    #[arg(long, value_name = "SIZE", default_value = "160Mi", value_parser = parse_size)]
    pub max_in_flight_memory: usize,
    /// Memory one decoded object of a request may take (estimated before
    /// decoding; an UPDATE's object and oldObject each); larger ones are
    /// denied as too large.
    #[arg(long, value_name = "SIZE", default_value = "48Mi", value_parser = parse_size)]
    pub max_request_memory: usize,
    /// JSON values one object of a request may hold (an UPDATE's object
    /// and oldObject each); more are denied as too large.
    #[arg(long, value_name = "N", default_value_t = review::Limits::default().max_nodes)]
    pub max_object_nodes: usize,
    /// /mutate's answer when placement fails or times out: deny (retryable)
    /// or allow unchanged with a warning.
    #[arg(long, value_enum, default_value_t = OnError::Deny)]
    pub mutate_on_error: OnError,
    /// Namespace whose requests are allowed without evaluation (repeatable).
    #[arg(long = "exempt-namespace", value_name = "NS")]
    pub exempt_namespaces: Vec<String>,
    /// Time a new connection has for its TLS handshake and first request
    /// headers, and an HTTP/1 connection for each later request's headers
    /// from their first byte.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// A connection with nothing in flight and no request arriving this long
    /// is closed (HTTP/1) or gets GOAWAY (HTTP/2). Keep it above the 90 s
    /// clients keep idle connections, so that they close first.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// A request body may fall behind 1 MiB/s by at most this long (from
    /// its head; a body the apiserver sends takes milliseconds); slower
    /// ones are cut with 408.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub body_read_timeout: Duration,
    /// A connection whose answers the peer leaves unread this long is cut
    /// (nginx's send_timeout); until then nothing more is read from it.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub write_timeout: Duration,
    /// Connections open at once on the webhook listener; at the cap the
    /// quietest one is closed to serve a new one. Lowered to what the
    /// open-file limit allows (raised to its hard limit at start).
    #[arg(long, value_name = "N", default_value_t = server::DEFAULT_MAX_CONNECTIONS as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// After SIGTERM, keep accepting with readiness false for this long.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// After SIGTERM, an HTTP/1 connection idle this long is closed; busy
    /// ones get `Connection: close` on their next answer, HTTP/2 ones GOAWAY.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub drain_window: Duration,
    /// Longest wait for in-flight requests after SIGTERM.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// Accept a policy reload that leaves no binding (or no placement
    /// profile) where the running set has some. Without it such a reload
    /// is refused as a mistake, e.g. an emptied ConfigMap.
    #[arg(long)]
    pub allow_empty_policies: bool,
    /// Audit the objects already in the cluster this often (e.g. 10m) and
    /// serve the latest report at /report on the metrics listener, with
    /// gpu_admission_audit_* metrics. Off by default; needs list access to
    /// the audited kinds (deploy/overlays/report grants it).
    #[arg(long, value_name = "DURATION", value_parser = parse_report_interval)]
    pub report_interval: Option<Duration>,
    /// Controllers, capacity objects and claims one audit may hold in
    /// memory (Pods are read a page at a time); a larger cluster fails the run.
    #[arg(long, value_name = "N", default_value_t = daemon::DEFAULT_REPORT_MAX_OBJECTS)]
    pub report_max_objects: usize,
    /// Lease (in the pod's namespace) that elects the one replica running
    /// the audit, or `off` to run it on every replica.
    #[arg(long, value_name = "NAME", default_value = daemon::DEFAULT_REPORT_LEASE, value_parser = parse_optional_name)]
    pub report_lease: OptionalName,
    /// A dated price file (region, size, price per hour; see
    /// docs/prices.md) that turns the report's waste into a cost per day.
    #[arg(long, value_name = "FILE")]
    pub report_prices: Option<PathBuf>,
    /// GPU utilization for the periodic report's idle GPU pods.
    #[command(flatten)]
    pub utilization: super::utilization_args::PrometheusArgs,
    /// With --report-interval: write the findings as namespaced
    /// PolicyReports (wgpolicyk8s.io/v1alpha2, one per namespace, named
    /// gpu-admission), for `kubectl get policyreports -A` and Policy
    /// Reporter. Needs their CRD and write access to them
    /// (deploy/overlays/report grants it).
    #[arg(long, value_enum, default_value_t = Switch::Off)]
    pub policy_reports: Switch,
    /// With --policy-reports on: the API the reports are written in,
    /// `policyreport` (wgpolicyk8s.io/v1alpha2 PolicyReports, the default)
    /// or `openreports` (openreports.io/v1alpha1 Reports, what Kubewarden
    /// writes by default), with the same results. Needs that CRD and write
    /// access to it (deploy/overlays/openreports grants it).
    #[arg(long, value_enum, value_name = "API")]
    pub reports: Option<crate::cluster::policy_reports::Schema>,
    /// Results in one namespace's PolicyReport (the costliest kept); the
    /// rest are counted in its summary.
    #[arg(long, value_name = "N", default_value_t = crate::periodic::policy_reports::DEFAULT_MAX_RESULTS,
          value_parser = clap::builder::TypedValueParser::map(
              clap::value_parser!(u32).range(1..), |n| n as usize))]
    pub policy_report_max_results: usize,
    /// PolicyReport creates, updates and deletes per second, at most.
    #[arg(long, value_name = "N", default_value_t = crate::periodic::policy_reports::DEFAULT_WRITES_PER_SECOND,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub policy_report_writes_per_second: u32,
    /// Watch the cluster's Nodes so that where a pod can land (any label,
    /// spec.nodeName) is judged against the nodes that exist (and a GPU
    /// budget counts a bound pod by its node's size); `off` for a cluster
    /// that does not grant list and watch on nodes: by GPU node labels
    /// alone.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub node_cache: Switch,
    /// In a cluster, watch its GpuPolicyExceptions (gpu-admission.io/v1alpha1)
    /// and let the objects they match through the policies they name,
    /// readiness waiting for their first list; `off`: only those of the
    /// policy folder apply. Needs get, list and watch on them
    /// (deploy/base/rbac.yaml).
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub policy_exceptions: Switch,
    /// In a cluster, watch its GpuBudgets (gpu-admission.io/v1alpha1) and
    /// its GPU pods, and deny a GPU pod that would take a namespace past
    /// its budget (docs/budgets.md), readiness waiting for both lists;
    /// `off`: no budget applies. Needs get, list and watch on both.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub gpu_budgets: Switch,
    /// With --gpu-budgets on: /mutate narrows a GPU pod's required node
    /// affinity to the sizes of the models with room left in its
    /// namespace's GpuBudgets, when some of the models it may take have
    /// none (docs/budgets.md). Off by default.
    #[arg(long)]
    pub budget_narrowing: bool,
    /// Username of Kueue's controller (repeatable). Its UPDATE of a queued
    /// Job that only admits it (suspend, the ResourceFlavor's node
    /// selection and tolerations, Kueue's labels and annotations) is not
    /// judged again; the flavors are judged instead (docs/kueue.md).
    #[arg(long = "kueue-controller", value_name = "USER",
          default_value = crate::kueue::DEFAULT_CONTROLLER, value_parser = parse_username)]
    pub kueue_controllers: Vec<String>,
    #[command(flatten)]
    pub certs: ManagedCertArgs,
}

impl ServeArgs {
    /// Where the periodic report reads GPU utilization (`--prometheus`);
    /// none: no idle GPU pods section.
    pub fn report_utilization(&self) -> Option<crate::audit::utilization::Settings> {
        self.utilization.settings(None)
    }

    pub fn into_config(self) -> DaemonConfig {
        let utilization = self.report_utilization();
        let ServeArgs {
            listen,
            policies,
            catalog,
            tls_cert,
            tls_key,
            metrics_listen,
            health_listen,
            certs_dir,
            log_format,
            max_concurrency,
            max_mutate_concurrency,
            max_in_flight_memory,
            max_request_memory,
            max_object_nodes,
            mutate_on_error,
            exempt_namespaces,
            header_read_timeout,
            idle_timeout,
            body_read_timeout,
            write_timeout,
            max_connections,
            shutdown_delay,
            drain_window,
            drain_timeout,
            allow_empty_policies,
            report_interval,
            report_max_objects,
            report_lease,
            report_prices,
            utilization: _,
            policy_reports,
            reports,
            policy_report_max_results,
            policy_report_writes_per_second,
            node_cache,
            policy_exceptions,
            gpu_budgets,
            budget_narrowing,
            kueue_controllers,
            certs,
        } = self;
        let edge = ServeConfig {
            listen,
            tls_cert,
            tls_key,
            metrics_listen: metrics_listen.0,
            health_listen: health_listen.0,
            certs_dir,
            max_concurrency: max_concurrency
                .map_or_else(server::default_concurrency, |n| n as usize),
            max_mutate_concurrency: max_mutate_concurrency
                .map_or_else(server::default_concurrency, |n| n as usize),
            in_flight_bytes: max_in_flight_memory,
            decode_limits: review::Limits {
                max_nodes: max_object_nodes,
                max_decoded_bytes: max_request_memory,
                ..review::Limits::default()
            },
            mutate_on_error,
            exempt_namespaces,
            header_read_timeout,
            idle_timeout,
            body_pace: server::BodyPace {
                grace: body_read_timeout,
                ..server::BodyPace::default()
            },
            write_timeout,
            max_connections: max_connections as usize,
            shutdown_delay,
            drain_window,
            drain_timeout,
        };
        DaemonConfig {
            edge,
            policies,
            catalog,
            log_format,
            allow_empty_policies,
            report_interval,
            report_max_objects,
            report_lease: report_lease.0,
            report_prices,
            utilization,
            kueue_controllers,
            policy_reports: policy_reports == Switch::On,
            policy_report_schema: reports,
            policy_report_max_results,
            policy_report_writes_per_second,
            node_cache: node_cache == Switch::On,
            policy_exceptions: policy_exceptions == Switch::On,
            gpu_budgets: gpu_budgets == Switch::On,
            budget_narrowing,
            manage_certs: certs.options(),
        }
    }
}

/// The runtime `serve` runs on. Every answer starts on the thread serving
/// its connection, one of this runtime's, and what is cheap ends there
/// (placement alone, a `/validate` that no binding could match or that
/// finishes within a short slice); the rest goes to the server's answering
/// threads. So the runtime's threads get the stack policy evaluation needs
/// (address space; only the pages used are resident).
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(crate::policy::EVALUATION_STACK)
        .build()
}

/// Runs the server until SIGTERM/SIGINT.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let config = args.into_config();
    init_logging(config.log_format);
    let runtime = runtime()?;
    let shutdown = ShutdownHandle::new();
    let result = runtime.block_on(async {
        tokio::spawn(server::forward_signals(shutdown.clone()));
        serve(config, shutdown).await
    });
    // A second signal must not wait for blocking tasks still running.
    runtime.shutdown_timeout(Duration::from_millis(200));
    result.map(|()| ExitCode::SUCCESS)
}

/// Loads the policies, starts the services around the edge (watches,
/// policy reload, certificates, report) and serves until `shutdown`
/// completes, then stops the services. `/readyz` turns true once the
/// policies are loaded and, in a cluster, the watched caches have synced.
pub async fn serve(config: DaemonConfig, shutdown: ShutdownHandle) -> anyhow::Result<()> {
    let mut audit_metrics = None;
    let mut exception_metrics = ExceptionMetrics::default();
    let mut cache_metrics = CacheMetrics::default();
    let mut budget_metrics = BudgetMetrics::default();
    let metrics = Metrics::with_families(|registry| {
        budget_metrics = BudgetMetrics::register(registry);
        if config.report_interval.is_some() {
            audit_metrics = Some(AuditMetrics::register(registry));
        }
        exception_metrics = ExceptionMetrics::register(registry);
        cache_metrics = CacheMetrics::register(registry);
    });
    let readiness = Readiness::new();
    let policies_loaded = readiness.gate("policies not loaded");
    let (bundle, fingerprint) = load_initial(&config)?;
    log_loaded(&config, &bundle, &metrics);
    let mut daemon = Daemon::default();
    let lookups = watch_cluster(&config, &readiness, &mut daemon, &cache_metrics).await;
    let (exceptions, budgets) = (lookups.exceptions, lookups.budgets);
    let mut admission = Admission::new(bundle, lookups.namespaces)
        .with_claims(lookups.claims)
        .with_nodes(lookups.nodes)
        .with_kueue_controllers(config.kueue_controllers.clone())
        .with_authorizer(cluster_authorizer())
        .on_excepted(excepted_counter(&exception_metrics));
    if let Some(exceptions) = &exceptions {
        admission = admission.with_exceptions(exceptions.lookup());
    }
    if let Some(budgets) = &budgets {
        admission = (admission.with_budgets(budgets.lookup()))
            .with_budget_narrowing(config.budget_narrowing);
    }
    let admission = Arc::new(admission);
    daemon.start(exceptions.map(|pending| pending.start(admission.clone(), &exception_metrics)));
    daemon.start(
        budgets
            .into_iter()
            .flat_map(|b| b.start(admission.clone(), &budget_metrics)),
    );
    policies_loaded.open();
    daemon.start(policy_reload(&config, fingerprint, &admission, &metrics)?);
    let report = report_settings(&config)?;
    let feed = managed_certs(config.manage_certs.as_ref(), &mut daemon).await?;
    let (webhook, ready) = (admission.clone(), readiness.clone());
    let mut edge = match feed {
        Some(feed) => {
            Server::bind_with_feed(config.edge, webhook, metrics, shutdown, ready, feed).await?
        }
        None => Server::bind_with_readiness(config.edge, webhook, metrics, shutdown, ready).await?,
    };
    if let (Some(settings), Some(audit_metrics)) = (report, audit_metrics) {
        let report;
        (edge, report) = start_report(edge, settings, audit_metrics, admission, readiness)?;
        daemon.start([report]);
    }
    daemon.run(edge.run()).await
}

/// Starts the periodic report once `readiness` holds, served at `/report`
/// on `edge`'s metrics listener.
fn start_report(
    edge: Server,
    settings: ReportSettings,
    audit_metrics: AuditMetrics,
    admission: Arc<Admission>,
    readiness: Readiness,
) -> anyhow::Result<(Server, Service)> {
    tracing::info!(
        interval_seconds = settings.interval.as_secs(),
        lease = settings
            .lease
            .as_ref()
            .map(|l| format!("{}/{} as {}", l.namespace, l.name, l.identity)),
        "periodic report on: GET /report on the metrics listener"
    );
    let latest = Arc::new(LatestReport::new());
    let ready = Box::new(move || readiness.is_ready());
    let task = ReportTask::spawn(settings, admission, latest.clone(), audit_metrics, ready)?;
    // Releases the report lease, so another replica takes over at once.
    let stop = async move {
        let _ = tokio::task::spawn_blocking(move || task.stop()).await;
    };
    Ok((edge.with_report(latest), Service::new("report", stop)))
}

/// Logs the policies `serve` starts with, and counts them in `metrics`.
fn log_loaded(config: &DaemonConfig, bundle: &Bundle, metrics: &Metrics) {
    let source = PolicySource::of(config.policies.as_deref());
    metrics.set_policies_loaded(bundle.policies.len());
    tracing::info!(
        policies = bundle.policies.len(),
        bindings = bundle.policies.bindings(),
        placement_profiles = bundle.placement.len(),
        source = %source.describe(),
        "policies loaded"
    );
    log_notices(&bundle.policies);
    if bundle.policies.bindings() == 0 && !config.allow_empty_policies {
        tracing::warn!(
            source = %source.describe(),
            "no policy bindings: nothing is validated until some are added"
        );
    }
}

/// The policy folder's watcher, reloading it into `admission` (none for
/// the built-in policies).
fn policy_reload(
    config: &DaemonConfig,
    fingerprint: Option<Fingerprint>,
    admission: &Arc<Admission>,
    metrics: &Metrics,
) -> anyhow::Result<Option<Service>> {
    let Some(dir) = config.policies.clone() else {
        return Ok(None);
    };
    let catalog = bundle::catalog(config.catalog.as_deref())?;
    let mut reloader = PolicyReloader::new(dir, catalog, admission.clone(), metrics.clone())
        .allow_empty(config.allow_empty_policies);
    if let Some(fingerprint) = fingerprint {
        reloader = reloader.serving(fingerprint);
    }
    let watcher = watch_policies(reloader, WatchOptions::default())?;
    Ok(Some(Service::held("policy reload", watcher)))
}

/// The periodic report's settings, if `--report-interval` asks for one.
fn report_settings(config: &DaemonConfig) -> anyhow::Result<Option<ReportSettings>> {
    let prices = match (&config.report_interval, &config.report_prices) {
        (Some(_), Some(path)) => Some(Arc::new(crate::audit::Prices::from_file(path)?)),
        (None, Some(_)) => anyhow::bail!("--report-prices needs --report-interval"),
        _ => None,
    };
    let report = config.report_interval.map(|interval| ReportSettings {
        prices,
        interval,
        max_objects: config.report_max_objects,
        lease: config
            .report_lease
            .as_deref()
            .map(LeaseSettings::from_environment),
        policies: PolicySource::of(config.policies.as_deref()),
        catalog: bundle::catalog_name(config.catalog.as_deref()),
        utilization: config.utilization.clone(),
        policy_reports: config.policy_reports.then_some(PolicyReportSettings {
            schema: config.policy_report_schema.unwrap_or_default(),
            max_results: config.policy_report_max_results,
            writes_per_second: config.policy_report_writes_per_second,
        }),
    });
    match &report {
        _ if config.policy_report_schema.is_some() && !config.policy_reports => {
            tracing::warn!("--reports without --policy-reports on: no report is written")
        }
        None if config.utilization.is_some() => {
            tracing::warn!("--prometheus without --report-interval: nothing reads utilization")
        }
        Some(_) if config.edge.metrics_listen.is_none() => {
            tracing::warn!("--report-interval with --metrics-listen off: the report runs, but neither /report nor its metrics are served")
        }
        _ => {}
    }
    Ok(report)
}

/// The policy bundle for `config`: the folder given, or the built-in set.
/// At start-up there is no last good set to fall back on, so any error is
/// fatal and lists every problem found.
pub fn load_bundle(config: &DaemonConfig) -> anyhow::Result<Bundle> {
    load_initial(config).map(|(bundle, _)| bundle)
}

/// [`load_bundle`], with the fingerprint of the folder content it read.
fn load_initial(config: &DaemonConfig) -> anyhow::Result<(Bundle, Option<Fingerprint>)> {
    let source = PolicySource::of(config.policies.as_deref());
    let catalog = bundle::catalog(config.catalog.as_deref())?;
    let failed = |errors: LoadErrors| source.failed(errors);
    match &config.policies {
        Some(dir) => {
            if !dir.is_dir() {
                anyhow::bail!("policy folder {} is not a directory", dir.display());
            }
            let snapshot = Snapshot::read(dir).map_err(failed)?;
            let loaded = snapshot.load(catalog).map_err(failed)?;
            Ok((loaded.bundle, Some(snapshot.fingerprint())))
        }
        None => bundle::load_with(&source, catalog)
            .map(|loaded| (loaded.bundle, None))
            .map_err(failed),
    }
}

/// Runs `reloader` whenever the policy folder changes, and every
/// `options.rescan` to catch changes whose events were missed.
pub fn watch_policies(
    reloader: PolicyReloader,
    options: WatchOptions,
) -> anyhow::Result<DirWatcher> {
    let dir = reloader.dir.clone();
    policy::watch_dir(&dir, options, move || {
        reloader.check();
    })
    .map_err(|e| anyhow::anyhow!("cannot watch {}: {e}", dir.display()))
}

/// Keeps the served policy set in step with a policy folder. A folder
/// that fails to load, or that would leave no binding or no placement
/// profile where the served set has some (unless allowed), leaves the
/// served set in force; the refusal is logged with every reason and
/// counted in `gpu_admission_policy_reload_failures_total`.
pub struct PolicyReloader {
    dir: PathBuf,
    catalog: Arc<Catalog>,
    admission: Arc<Admission>,
    metrics: Metrics,
    allow_empty: bool,
    /// The folder content last acted on (loaded or refused): the same
    /// content is not loaded, logged or counted again.
    last: Mutex<Option<Fingerprint>>,
}

/// What one [`PolicyReloader::check`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// Same content as last time: nothing done.
    Unchanged,
    /// The new set is served.
    Reloaded,
    /// The folder could not be read or does not load.
    Failed,
    /// The new set would switch every policy or placement profile off.
    RefusedEmpty,
}

impl PolicyReloader {
    pub fn new(
        dir: PathBuf,
        catalog: Arc<Catalog>,
        admission: Arc<Admission>,
        metrics: Metrics,
    ) -> PolicyReloader {
        PolicyReloader {
            dir,
            catalog,
            admission,
            metrics,
            allow_empty: false,
            last: Mutex::new(None),
        }
    }

    /// Whether a set without bindings or profiles may replace one with some.
    pub fn allow_empty(mut self, allow: bool) -> PolicyReloader {
        self.allow_empty = allow;
        self
    }

    /// The folder content the served set was loaded from, so that an
    /// unchanged folder is not loaded again.
    pub fn serving(self, fingerprint: Fingerprint) -> PolicyReloader {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(fingerprint);
        self
    }

    /// Reads the folder and, if its content changed, loads it.
    pub fn check(&self) -> ReloadOutcome {
        let source = self.dir.display().to_string();
        let snapshot = match Snapshot::read(&self.dir) {
            Ok(snapshot) => snapshot,
            // Not remembered: a read that failed (a `..data` swap under
            // way, a permission problem) is tried again on the next check.
            Err(errors) => return self.fail(&source, &errors),
        };
        let fingerprint = snapshot.fingerprint();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if *last == Some(fingerprint) {
            return ReloadOutcome::Unchanged;
        }
        *last = Some(fingerprint);
        let loaded = match snapshot.load(self.catalog.clone()) {
            Ok(loaded) => loaded.bundle,
            Err(errors) => return self.fail(&source, &errors),
        };
        let served = self.admission.bundle();
        if let Some(lost) = emptied(&served, &loaded) {
            if !self.allow_empty {
                self.metrics.inc_reload_failures();
                tracing::error!(
                    source = %source,
                    bindings = served.policies.bindings(),
                    placement_profiles = served.placement.len(),
                    "policy reload refused: the folder now has no {lost}, which would switch them all off (an emptied ConfigMap?); keeping the last good policies (--allow-empty-policies accepts it)"
                );
                return ReloadOutcome::RefusedEmpty;
            }
            tracing::warn!(source = %source, "the reloaded policy folder has no {lost}; accepted (--allow-empty-policies)");
        }
        let (policies, bindings) = (loaded.policies.len(), loaded.policies.bindings());
        let profiles = loaded.placement.len();
        log_notices(&loaded.policies);
        self.admission.replace(loaded);
        self.metrics.set_policies_loaded(policies);
        tracing::info!(
            policies,
            bindings,
            placement_profiles = profiles,
            source = %source,
            "policies reloaded"
        );
        ReloadOutcome::Reloaded
    }

    fn fail(&self, source: &str, errors: &LoadErrors) -> ReloadOutcome {
        self.metrics.inc_reload_failures();
        for error in &errors.0 {
            tracing::error!(source = %source, error = %error, "policy reload failed; keeping the last good policies");
        }
        ReloadOutcome::Failed
    }
}

/// What `next` would switch off entirely compared with `served`, if anything.
fn emptied(served: &Bundle, next: &Bundle) -> Option<&'static str> {
    if served.policies.bindings() > 0 && next.policies.bindings() == 0 {
        Some("policy binding")
    } else if !served.placement.is_empty() && next.placement.is_empty() {
        Some("placement profile")
    } else {
        None
    }
}

/// What requests look up in the cluster, and the GpuPolicyException cache
/// waiting for the Admission that reads its objects.
struct Lookups {
    namespaces: Arc<dyn NamespaceLookup>,
    claims: Arc<dyn ClaimLookup>,
    nodes: Arc<dyn NodeLookup>,
    exceptions: Option<PendingExceptions>,
    budgets: Option<PendingBudgets>,
}

/// Starts the cluster's watched caches, when running in one, each a
/// service whose readiness gate opens on its first list (or once the
/// cluster is known not to serve the kind): Namespaces (namespaceSelector,
/// namespaceObject), DRA ResourceClaims and ResourceClaimTemplates (which
/// pods claim GPUs; none before Kubernetes 1.34), Nodes with Karpenter
/// NodePools, DeviceClasses and ResourceSlices (where pods can land and
/// the GPUs of each node; `--node-cache`), GpuPolicyExceptions
/// (`--policy-exceptions`). Outside a cluster, lookups that know nothing:
/// selectors then see only `kubernetes.io/metadata.name`, which placement
/// adds, and pods are judged by GPU node labels. In a cluster without a
/// usable client the server stays not ready: without namespace labels,
/// namespaceSelector would answer wrongly.
async fn watch_cluster(
    config: &DaemonConfig,
    readiness: &Readiness,
    daemon: &mut Daemon,
    metrics: &CacheMetrics,
) -> Lookups {
    let mut lookups = Lookups {
        namespaces: Arc::new(ClusterNamespaces::empty()),
        claims: Arc::new(ClusterClaims::empty()),
        nodes: Arc::new(NoNodes),
        exceptions: None,
        budgets: None,
    };
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
        tracing::info!("not running in a cluster: no namespace labels for namespaceSelector, pods judged by GPU node labels alone");
        return lookups;
    }
    let namespaces_synced = readiness.gate("namespaces not synced");
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(err) => {
            tracing::error!(error = %err, "in a cluster but no cluster client: namespaceSelector cannot be evaluated; staying not ready");
            namespaces_synced.say(Some(format!("no cluster client: {err}")));
            return lookups;
        }
    };
    let settings = Settings::default();
    let (namespaces, task) =
        ClusterNamespaces::start_with(client.clone(), settings, metrics.clone());
    tracing::info!(
        "watching Namespaces for namespaceSelector and namespaceObject; ready once they are listed"
    );
    let mut service = Service::task("namespaces", task);
    if let Some(watched) = namespaces.watched() {
        service = service.following(namespaces_synced, watched);
    }
    daemon.start([service]);
    lookups.namespaces = Arc::new(namespaces);

    let (claims, task) = ClusterClaims::start_with(client.clone(), settings, metrics.clone());
    tracing::info!("watching ResourceClaims and ResourceClaimTemplates for DRA GPU pods (none before Kubernetes 1.34); ready once they are listed");
    let gates = [
        "resource claims not synced",
        "resource claim templates not synced",
    ];
    let mut service = Service::task("resource claims", task);
    let claims_watched = claims.watched();
    for (gate, watched) in gates.into_iter().zip(claims_watched.clone()) {
        service = service.following(readiness.gate(gate), watched);
    }
    daemon.start([service]);
    lookups.claims = Arc::new(claims);

    let mut node_cache = None;
    if config.node_cache {
        let (nodes, task) = ClusterNodes::start(client.clone(), settings, metrics.clone());
        let (pools, pools_task) = nodes.watch_node_pools(client.clone(), settings, metrics.clone());
        tracing::info!("watching Nodes, and Karpenter NodePools for the nodes they could create, for where pods can land; ready once they are listed (--node-cache=off judges by labels)");
        let mut service = Service::task("nodes", task);
        if let Some(watched) = nodes.watched() {
            service = service.following(readiness.gate("nodes not synced"), watched);
        }
        let pools = Service::task("node pools", pools_task)
            .following(readiness.gate("node pools not synced"), pools);
        daemon.start([service, pools]);
        let [classes, slices] = nodes.watch_devices(client.clone(), settings, metrics.clone());
        tracing::info!("watching DeviceClasses and ResourceSlices for the GPUs DRA serves as extended resources (none before Kubernetes 1.34); ready once they are listed");
        let names = [
            ("device classes", "device classes not synced"),
            ("resource slices", "resource slices not synced"),
        ];
        for ((watched, task), (name, gate)) in [classes, slices].into_iter().zip(names) {
            daemon.start([Service::task(name, task).following(readiness.gate(gate), watched)]);
        }
        node_cache = Some(nodes.clone());
        lookups.nodes = Arc::new(nodes);
    } else {
        tracing::info!("node cache off: where pods can land is judged by GPU node labels alone");
    }

    if config.gpu_budgets {
        let (ns, nodes) = (lookups.namespaces.clone(), node_cache);
        let budgets = PendingBudgets::new(
            client.clone(),
            ns,
            nodes,
            claims_watched,
            readiness,
            settings,
            metrics,
        );
        lookups.budgets = Some(budgets);
    } else {
        tracing::info!("GPU budgets off: no GpuBudget applies");
    }

    if config.policy_exceptions {
        lookups.exceptions = Some(PendingExceptions::new(
            client,
            readiness,
            settings,
            metrics.clone(),
        ));
    } else {
        tracing::info!("policy exceptions off: only the policy folder's GpuPolicyExceptions apply");
    }
    lookups
}

/// What the policies' `authorizer` checks ask: the cluster, through
/// SubjectAccessReviews, when running in one; otherwise nothing (every
/// check denied, "no authorizer configured").
fn cluster_authorizer() -> Arc<dyn crate::authz::Authorizer> {
    use crate::cluster::access_review::{ClusterAuthorizer, DEFAULT_TIMEOUT};
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
        return Arc::new(crate::authz::NoAuthorizer);
    }
    match ClusterAuthorizer::start(None, DEFAULT_TIMEOUT) {
        Ok(authorizer) => Arc::new(authorizer),
        Err(err) => {
            tracing::error!(error = %err, "cannot start the SubjectAccessReview client: authorizer checks are denied");
            Arc::new(crate::authz::NoAuthorizer)
        }
    }
}

/// What loading the policies ignored: warnings at warn, notes at debug.
fn log_notices(policies: &policy::PolicySet) {
    for notice in policies.notices() {
        match notice.level {
            policy::NoticeLevel::Warning | policy::NoticeLevel::Typing => {
                tracing::warn!("policy folder: {notice}")
            }
            policy::NoticeLevel::Note => tracing::debug!("policy folder: {notice}"),
        }
    }
}

fn init_logging(format: LogFormat) {
    use std::io::IsTerminal as _;
    init_logging_to(format, std::io::stderr, std::io::stderr().is_terminal());
}

/// Installs `serve`'s log subscriber (level from `RUST_LOG`, else `info`)
/// writing to `writer`; benchmarks use it to pay for the same log lines.
/// A subscriber already installed (embedding, tests) is kept.
pub fn init_logging_to<W>(format: LogFormat, writer: W, ansi: bool)
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::cluster::policy_reports::Schema;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ServeArgs,
    }

    /// `serve` with the flags of `line`, split at spaces.
    pub(in crate::cli) fn parse(line: &str) -> Result<DaemonConfig, clap::Error> {
        parse_args(line).map(ServeArgs::into_config)
    }

    fn parse_args(line: &str) -> Result<ServeArgs, clap::Error> {
        let argv = std::iter::once("serve").chain(line.split_whitespace());
        Cli::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn defaults() {
        let config = parse("").unwrap();
        let expected = DaemonConfig::default();
        assert_eq!(config, expected);
    }

    #[test]
    fn every_flag() {
        let config = parse(
            "--listen 127.0.0.1:9443 --policies policies --tls-cert c.pem --tls-key \
            k.pem --metrics-listen off --certs-dir /tmp/c --log-format json \
            --max-concurrency 3 --max-mutate-concurrency 5 --max-in-flight-memory \
            1Gi --max-request-memory 64Mi --max-object-nodes 1000 \
            --mutate-on-error allow --exempt-namespace gpu-admission \
            --exempt-namespace kube-system --header-read-timeout 2s --idle-timeout \
            90s --max-connections 10 --shutdown-delay 5s --drain-window 3s \
            --drain-timeout 1m --allow-empty-policies --report-interval 10m \
            --report-max-objects 900 --report-lease off --policy-reports on \
            --reports openreports --policy-report-max-results 50 --policy-report-writes-per-second 2 \
            --policy-exceptions off --budget-narrowing",
        )
        .unwrap();
        assert_eq!(config.edge.listen, "127.0.0.1:9443".parse().unwrap());
        assert_eq!(config.policies, Some(PathBuf::from("policies")));
        assert_eq!(config.edge.tls_cert, Some(PathBuf::from("c.pem")));
        assert_eq!(config.edge.metrics_listen, None);
        assert_eq!(config.log_format, LogFormat::Json);
        assert_eq!(config.edge.max_concurrency, 3);
        assert_eq!(config.edge.max_mutate_concurrency, 5);
        assert_eq!(config.edge.in_flight_bytes, 1 << 30);
        assert_eq!(config.edge.decode_limits.max_decoded_bytes, 64 << 20);
        assert_eq!(config.edge.decode_limits.max_nodes, 1000);
        assert_eq!(config.edge.mutate_on_error, OnError::Allow);
        assert_eq!(
            config.edge.exempt_namespaces,
            ["gpu-admission", "kube-system"]
        );
        assert_eq!(config.edge.header_read_timeout, Duration::from_secs(2));
        assert_eq!(config.edge.idle_timeout, Duration::from_secs(90));
        assert_eq!(config.edge.max_connections, 10);
        assert_eq!(config.edge.shutdown_delay, Duration::from_secs(5));
        assert_eq!(config.edge.drain_window, Duration::from_secs(3));
        assert_eq!(config.edge.drain_timeout, Duration::from_secs(60));
        assert!(config.allow_empty_policies);
        assert_eq!(config.report_interval, Some(Duration::from_secs(600)));
        assert_eq!(config.report_max_objects, 900);
        assert_eq!(config.report_lease, None);
        assert!(config.policy_reports);
        assert_eq!(config.policy_report_schema, Some(Schema::OpenReports));
        assert_eq!(config.policy_report_max_results, 50);
        assert_eq!(config.policy_report_writes_per_second, 2);
        assert!(!config.policy_exceptions);
        assert!(config.budget_narrowing);
        let defaults = parse("--report-interval 1h").unwrap();
        assert_eq!(
            defaults.report_lease.as_deref(),
            Some("gpu-admission-report")
        );
        assert_eq!(
            parse_args("--report-interval 1h")
                .unwrap()
                .report_utilization(),
            None
        );
        let with_prometheus = parse_args("--report-interval 10m --prometheus http://prometheus-server.monitoring --utilization-window 12h")
        .unwrap();
        assert_eq!(
            with_prometheus.report_utilization(),
            Some(crate::audit::utilization::Settings {
                source: crate::audit::utilization::Source::Prometheus(
                    crate::cluster::prometheus::Endpoint {
                        url: "http://prometheus-server.monitoring".into(),
                        token_file: None,
                        timeout: crate::audit::utilization::DEFAULT_TIMEOUT,
                    }
                ),
                window: Duration::from_secs(12 * 3600),
                threshold_percent: crate::audit::utilization::DEFAULT_THRESHOLD_PERCENT,
                sizing: crate::audit::utilization::sizing::DEFAULT_RULES,
            })
        );
        assert!(!defaults.policy_reports, "PolicyReports are opt-in");
        assert_eq!(
            defaults.policy_report_schema, None,
            "PolicyReports unless asked"
        );
        assert!(parse("--reports policyreports").is_err());
        assert!(
            defaults.policy_exceptions,
            "exceptions are watched by default"
        );
        assert_eq!(defaults.policy_report_max_results, 1000);
        assert!(!defaults.budget_narrowing, "narrowing is opt-in");
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(parse("--tls-cert c.pem").is_err(), "cert without key");
        assert!(parse("--max-concurrency 0").is_err());
        assert!(parse("--max-mutate-concurrency 0").is_err());
        assert!(parse("--max-in-flight-memory lots").is_err());
        assert!(parse("--mutate-on-error maybe").is_err());
        assert!(parse("--max-connections 0").is_err());
        assert!(parse("--listen nowhere").is_err());
        let err = parse("--header-read-timeout soon").unwrap_err();
        assert!(err.to_string().contains("not a duration"), "{err}");
        let err = parse("--report-interval 10s").unwrap_err();
        assert!(err.to_string().contains("use 1m or more"), "{err}");
        assert!(parse("--report-lease Not_A_Name").is_err());
        assert!(parse("--policy-report-max-results 0").is_err());
        assert!(parse("--policy-report-writes-per-second 0").is_err());
        assert!(parse("--policy-reports maybe").is_err());
        assert!(parse("--policy-exceptions maybe").is_err());
    }

    #[test]
    fn missing_policy_folder_is_an_error() {
        let config = DaemonConfig {
            policies: Some(PathBuf::from("/nonexistent/policies")),
            ..DaemonConfig::default()
        };
        let err = load_bundle(&config).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/policies"), "{err}");
    }
}
