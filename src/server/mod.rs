//! HTTP edge: router, handlers, TLS, health, metrics, shutdown.
//!
//! The server knows AdmissionReviews and nothing of GPUs or policies: it
//! hands each decoded request to a [`Webhook`] (in production,
//! `admission::Admission`), as [`webhook`] describes.
mod body;
mod budget;
mod conn;
mod executor;
mod fds;
mod handlers;
pub mod health;
pub mod metrics;
pub mod report;
pub mod shutdown;
pub mod tls;
mod watchdog;
pub mod webhook;

pub use body::{BodyPace, MAX_BODY_BYTES};
pub use budget::DEFAULT_IN_FLIGHT_BYTES;
pub use executor::{Executor, RunError};
pub use handlers::{parse_duration, DEFAULT_TIMEOUT};
pub use health::{Gate, Readiness};
pub use metrics::Metrics;
pub use report::{ReportAnswer, ReportFormat, ReportPages};
pub use shutdown::{forward_signals, Phase, ShutdownHandle};
pub use webhook::{Answer, Endpoint, Hints, PolicyResult, Resume, Step, Webhook};

use crate::certs;
use crate::review;
use anyhow::Context as _;
use conn::Edge;
use handlers::AppState;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tls::{CertFeed, CertReloader, CertResolver};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use watchdog::Timeouts;

/// What `/mutate` answers when placement fails or runs out of time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnError {
    /// Deny, saying the request can be retried: a GPU pod admitted without
    /// its tolerations can never schedule onto tainted GPU nodes.
    #[default]
    Deny,
    /// Admit unchanged, with a warning.
    Allow,
}

/// The edge's settings; `daemon::DaemonConfig` holds the rest of `serve`'s.
/// Tests build it directly.
#[derive(Clone, Debug, PartialEq)]
pub struct ServeConfig {
    /// Address of the HTTPS webhook listener.
    pub listen: SocketAddr,
    /// Serving certificate chain (PEM); with `tls_key`, else self-generated.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Address of the plain-HTTP metrics listener (`/metrics`, `/report`);
    /// none disables it.
    pub metrics_listen: Option<SocketAddr>,
    /// Address of the plain-HTTP probe listener (`/healthz`, `/readyz`
    /// only, for the kubelet); none disables it.
    pub health_listen: Option<SocketAddr>,
    /// Where self-generated certificates live.
    pub certs_dir: PathBuf,
    /// `/validate` reviews resumed on answering threads at once, each on a
    /// thread of its own; more wait for a slot.
    pub max_concurrency: usize,
    /// `/mutate` reviews resumed on answering threads at once, in slots and
    /// threads of their own.
    pub max_mutate_concurrency: usize,
    /// Memory that requests in progress may reserve in all: a third for
    /// bodies being read (taken as they arrive, never waited for), the
    /// rest for decoded requests.
    pub in_flight_bytes: usize,
    /// What one request may hold once decoded.
    pub decode_limits: review::Limits,
    /// `/mutate`'s answer on an internal error or a timeout.
    pub mutate_on_error: OnError,
    /// Namespaces whose requests are allowed without evaluation.
    pub exempt_namespaces: Vec<String>,
    /// Time a new connection has for its TLS handshake and first request
    /// headers, and an HTTP/1 connection for each later request's headers.
    pub header_read_timeout: Duration,
    /// An HTTP/2 connection with no open stream this long gets GOAWAY.
    pub idle_timeout: Duration,
    /// How far a request body may fall behind its minimum rate.
    pub body_pace: BodyPace,
    /// A connection whose answers the peer leaves unread this long is cut.
    pub write_timeout: Duration,
    /// Connections open at once on the webhook listener; at it, the
    /// quietest makes room for a new one. Lowered at start to what the
    /// process's file-descriptor limit allows.
    pub max_connections: usize,
    /// After a shutdown signal, keep accepting connections this long (with
    /// readiness false) so load balancers stop sending traffic first.
    pub shutdown_delay: Duration,
    /// While draining, an HTTP/1 connection is closed once idle this long
    /// (clients in use leave after a `Connection: close` answer).
    pub drain_window: Duration,
    /// Longest wait for in-flight requests once draining.
    pub drain_timeout: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 8443)),
            tls_cert: None,
            tls_key: None,
            metrics_listen: Some(SocketAddr::from(([127, 0, 0, 1], 9090))),
            health_listen: Some(SocketAddr::from(([127, 0, 0, 1], 8081))),
            certs_dir: PathBuf::from("certs"),
            max_concurrency: default_concurrency(),
            max_mutate_concurrency: default_concurrency(),
            in_flight_bytes: DEFAULT_IN_FLIGHT_BYTES,
            decode_limits: review::Limits::default(),
            mutate_on_error: OnError::Deny,
            exempt_namespaces: Vec::new(),
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(120),
            body_pace: BodyPace::default(),
            write_timeout: Duration::from_secs(10),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            shutdown_delay: Duration::ZERO,
            drain_window: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// Stack of an answering thread when the webhook asks for no other: Rust's
/// default for spawned threads.
pub const DEFAULT_STACK: usize = 2 << 20;

/// Room for a large control plane's concurrent webhook connections, with
/// margin; with their buffers bounded (docs/server.md, "Memory per
/// connection") they fit the Deployment's memory beside the in-flight
/// budget.
pub const DEFAULT_MAX_CONNECTIONS: usize = 700;

/// Twice the cores: evaluation is CPU work, and a little slack hides
/// scheduling gaps.
pub fn default_concurrency() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get() * 2)
}

/// Where the served certificate comes from, and is reloaded from.
enum CertSource {
    Files(PathBuf, PathBuf),
    Feed(CertFeed),
}

/// A bound, not yet running, server.
pub struct Server {
    config: ServeConfig,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    health_listener: Option<TcpListener>,
    /// `max_connections` as the file-descriptor limit allows.
    max_connections: u32,
    resolver: Arc<CertResolver>,
    certs: CertSource,
    acceptor: TlsAcceptor,
    state: Arc<AppState>,
    report: Option<Arc<dyn ReportPages>>,
}

impl Server {
    /// Loads (or creates) the serving certificate and binds both listeners.
    /// `webhook` is taken as ready: loaded, and needing no cluster state.
    pub async fn bind(
        config: ServeConfig,
        webhook: Arc<dyn Webhook>,
        metrics: Metrics,
        shutdown: ShutdownHandle,
    ) -> anyhow::Result<Server> {
        Server::bind_with_readiness(config, webhook, metrics, shutdown, Readiness::ready()).await
    }

    /// [`Server::bind`], with `/readyz` following `readiness`.
    pub async fn bind_with_readiness(
        config: ServeConfig,
        webhook: Arc<dyn Webhook>,
        metrics: Metrics,
        shutdown: ShutdownHandle,
        readiness: Readiness,
    ) -> anyhow::Result<Server> {
        Server::bind_inner(config, webhook, metrics, shutdown, readiness, None).await
    }

    /// [`Server::bind_with_readiness`], serving the certificate `feed`
    /// publishes (self-managed certificates) instead of files.
    pub async fn bind_with_feed(
        config: ServeConfig,
        webhook: Arc<dyn Webhook>,
        metrics: Metrics,
        shutdown: ShutdownHandle,
        readiness: Readiness,
        feed: CertFeed,
    ) -> anyhow::Result<Server> {
        Server::bind_inner(config, webhook, metrics, shutdown, readiness, Some(feed)).await
    }

    async fn bind_inner(
        config: ServeConfig,
        webhook: Arc<dyn Webhook>,
        metrics: Metrics,
        shutdown: ShutdownHandle,
        readiness: Readiness,
        feed: Option<CertFeed>,
    ) -> anyhow::Result<Server> {
        if config.max_concurrency == 0 || config.max_mutate_concurrency == 0 {
            anyhow::bail!("--max-concurrency and --max-mutate-concurrency must be at least 1");
        }
        let body_bytes = config.in_flight_bytes / 3;
        let decoded_bytes = config.in_flight_bytes - body_bytes;
        // The largest decoded request is an UPDATE carrying two objects of
        // --max-request-memory each.
        let largest_decoded = config.decode_limits.for_two_objects().max_decoded_bytes;
        if body_bytes < MAX_BODY_BYTES || decoded_bytes < largest_decoded {
            anyhow::bail!(
                "--max-in-flight-memory ({} MiB) must hold one largest body in its third for bodies ({} MiB) and one largest decoded request (an UPDATE's two objects of --max-request-memory, {} MiB) in the rest",
                config.in_flight_bytes >> 20,
                MAX_BODY_BYTES >> 20,
                largest_decoded >> 20
            );
        }
        if config.max_connections == 0 || u32::try_from(config.max_connections).is_err() {
            anyhow::bail!("--max-connections must be between 1 and {}", u32::MAX);
        }
        let max_connections = fds::connections_allowed(config.max_connections)?;
        let (certified, certs) = match feed {
            Some(feed) => (tls::load_from_feed(&feed)?, CertSource::Feed(feed)),
            None => {
                let (cert, key) = match (&config.tls_cert, &config.tls_key) {
                    (Some(cert), Some(key)) => (cert.clone(), key.clone()),
                    (None, None) => self_generated(&config.certs_dir).await?,
                    _ => anyhow::bail!("--tls-cert and --tls-key must be given together"),
                };
                (
                    tls::load_certified_key(&cert, &key)?,
                    CertSource::Files(cert, key),
                )
            }
        };
        if let Some(expiry) = tls::not_after(&certified) {
            metrics.set_certificate_expiry(expiry);
        }
        let resolver = Arc::new(CertResolver::new(certified));
        let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(resolver.clone())?));
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let metrics_listener = bind_if(config.metrics_listen, "metrics").await?;
        let health_listener = bind_if(config.health_listen, "probes").await?;
        // One thread per slot: a request holding a slot always finds a
        // thread, and mutations never wait behind validations. The queues
        // hold what a slot-holder hands over while its thread finishes
        // with the last request.
        let hints = webhook.hints();
        let answering = |name, slots| {
            Executor::new(name, slots, slots, hints.stack)
                .with_context(|| format!("cannot start the {name} threads"))
        };
        let mutate_threads = answering("mutate", config.max_mutate_concurrency)?;
        let validate_threads = answering("validate", config.max_concurrency)?;
        let state = Arc::new(AppState {
            webhook,
            hints,
            mutate_threads,
            validate_threads,
            bodies: budget::BodyMemory::new(
                budget::BodyShares::of(body_bytes, MAX_BODY_BYTES),
                metrics.clone(),
            ),
            body_pace: config.body_pace,
            // /validate may hold the largest decoded request and no more;
            // the rest is kept for /mutate.
            decoded: budget::MemoryPool::new("decoded", decoded_bytes, metrics.clone())
                .with_validate_share(largest_decoded),
            mutate_slots: budget::Slots::new(
                "mutate",
                config.max_mutate_concurrency,
                metrics.clone(),
            ),
            validate_slots: budget::Slots::new("validate", config.max_concurrency, metrics.clone()),
            limits: config.decode_limits,
            mutate_on_error: config.mutate_on_error,
            metrics,
            shutdown,
            readiness,
            exempt_namespaces: config.exempt_namespaces.clone(),
        });
        Ok(Server {
            config,
            listener,
            metrics_listener,
            health_listener,
            max_connections,
            resolver,
            certs,
            acceptor,
            state,
            report: None,
        })
    }

    /// Serves the periodic audit's latest report at `GET /report` on the metrics
    /// listener (without it, `/report` answers 404).
    pub fn with_report(mut self, report: Arc<dyn ReportPages>) -> Server {
        self.report = Some(report);
        self
    }

    /// The webhook listener's address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.config.listen)
    }

    /// The metrics listener's address, if enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        address(&self.metrics_listener)
    }

    /// The probe listener's address, if enabled.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        address(&self.health_listener)
    }

    /// Serves until shutdown: on the first trigger readiness turns false,
    /// HTTP/1 answers carry `Connection: close` and HTTP/2 connections get
    /// GOAWAY; after `shutdown_delay` the listener closes, and the process
    /// returns once every connection has closed (idle HTTP/1 ones after
    /// `drain_window`), at most `drain_timeout` later; a second trigger
    /// returns at once.
    pub async fn run(self) -> anyhow::Result<()> {
        let (config, state, resolver) = (self.config, self.state, self.resolver);
        let shutdown = state.shutdown.clone();
        // Held (or aborted on return) for as long as the server runs.
        let (_reloader, _follower) = match self.certs {
            CertSource::Files(cert, key) => (
                Some(CertReloader::spawn(
                    resolver,
                    cert,
                    key,
                    state.metrics.clone(),
                )),
                None,
            ),
            CertSource::Feed(feed) => (
                None,
                Some(AbortOnDrop(tls::follow_feed(
                    resolver,
                    feed,
                    state.metrics.clone(),
                ))),
            ),
        };
        let timeouts = Timeouts {
            header_read: config.header_read_timeout,
            idle: config.idle_timeout,
            drain_window: config.drain_window,
            write: config.write_timeout,
        };
        if let Some(addr) = address(&self.metrics_listener) {
            tracing::info!(metrics_addr = %addr, "serving metrics");
        }
        // Plain HTTP, served until the process ends.
        let plain = |name, listener: TcpListener, app, timeouts, cap| {
            let edge = Arc::new(Edge::new(
                name,
                None,
                app,
                timeouts,
                cap,
                state.metrics.clone(),
                shutdown.clone(),
            ));
            tokio::spawn(edge.accept_until(listener, std::future::pending()))
        };
        let metrics_task = self.metrics_listener.map(|l| {
            let app = handlers::metrics_router(state.clone(), self.report);
            plain("metrics", l, app, timeouts, conn::METRICS_MAX_CONNECTIONS)
        });
        // The kubelet's probes get a listener of their own: nothing sent
        // to the webhook or metrics ports can keep them waiting.
        if let Some(addr) = address(&self.health_listener) {
            tracing::info!(health_addr = %addr, "serving probes");
        }
        let health_task = self.health_listener.map(|l| {
            let app = handlers::health_router(state.clone());
            let timeouts = Timeouts {
                header_read: conn::HEALTH_HEADER_READ,
                ..timeouts
            };
            plain("health", l, app, timeouts, conn::HEALTH_MAX_CONNECTIONS)
        });
        tracing::info!(addr = %self.listener.local_addr()?, "serving admission webhooks");

        let edge = Arc::new(Edge::new(
            "webhook",
            Some(self.acceptor),
            handlers::router(state.clone()),
            timeouts,
            self.max_connections,
            state.metrics.clone(),
            shutdown.clone(),
        ));
        let stop_accepting = {
            let shutdown = shutdown.clone();
            let delay = config.shutdown_delay;
            async move {
                shutdown.reached(Phase::Draining).await;
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.reached(Phase::Aborted) => {}
                }
            }
        };
        edge.clone()
            .accept_until(self.listener, stop_accepting)
            .await;
        tracing::info!(
            connections = edge.open(),
            "stopped accepting connections; draining in-flight requests"
        );
        let drained = tokio::select! {
            _ = edge.closed() => true,
            _ = shutdown.reached(Phase::Aborted) => false,
            _ = tokio::time::sleep(config.drain_timeout) => false,
        };
        for task in [metrics_task, health_task].into_iter().flatten() {
            task.abort();
        }
        if drained {
            tracing::info!("drained; exiting");
        } else {
            tracing::warn!("exiting before every in-flight request finished");
        }
        Ok(())
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The address of `listener`, if there is one.
fn address(listener: &Option<TcpListener>) -> Option<SocketAddr> {
    listener.as_ref()?.local_addr().ok()
}

/// A listener on `addr` for `what`, if one is asked for.
async fn bind_if(addr: Option<SocketAddr>, what: &str) -> anyhow::Result<Option<TcpListener>> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for {what}"))?;
    Ok(Some(listener))
}

/// Creates or reuses the local CA and serving certificate in `dir`.
async fn self_generated(dir: &std::path::Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let dir = dir.to_path_buf();
    let ensured = tokio::task::spawn_blocking(move || certs::ensure_for_serving(&dir))
        .await
        .context("certificate generation task failed")??;
    let ca = ensured.paths.ca_cert.display().to_string();
    if ensured.created_ca {
        tracing::info!(ca = %ca, "created a local CA; trust it (caBundle: `gpu-admission certs` prints it)");
    } else {
        tracing::info!(ca = %ca, reissued = ensured.issued_cert, "using the local CA");
    }
    Ok((ensured.paths.cert, ensured.paths.key))
}
