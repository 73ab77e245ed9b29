//! HTTP edge: router, handlers, TLS, health, metrics, shutdown.
//!
//! The server knows AdmissionReviews and nothing of GPUs: it hands each
//! decoded request to a [`Webhook`] (in production, [`Admission`]).
mod handlers;
pub mod health;
pub mod metrics;
pub mod shutdown;
pub mod tls;

pub use handlers::{parse_duration, DEFAULT_TIMEOUT, MAX_BODY_BYTES};
pub use health::Readiness;
pub use metrics::Metrics;
pub use shutdown::{forward_signals, Phase, ShutdownHandle};

use crate::admission::{Admission, Outcome};
use crate::certs;
use crate::review::Request;
use anyhow::Context as _;
use handlers::AppState;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tls::{CertReloader, CertResolver};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

/// Answers decoded admission requests. Called on a blocking thread.
pub trait Webhook: Send + Sync + 'static {
    fn mutate(&self, request: &Request) -> Outcome;
    fn validate(&self, request: &Request) -> Outcome;
}

impl Webhook for Admission {
    fn mutate(&self, request: &Request) -> Outcome {
        Admission::mutate(self, request)
    }

    fn validate(&self, request: &Request) -> Outcome {
        Admission::validate(self, request)
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Everything `serve` needs; the CLI parses flags into it and tests build
/// it directly.
#[derive(Clone, Debug, PartialEq)]
pub struct ServeConfig {
    /// Address of the HTTPS webhook listener.
    pub listen: SocketAddr,
    /// Policy folder; none means the policies built into the binary.
    pub policies: Option<PathBuf>,
    /// Data file for the policy loader (the SKU catalog); none means built in.
    pub catalog: Option<PathBuf>,
    /// Serving certificate chain (PEM); with `tls_key`, else self-generated.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Address of the plain-HTTP metrics listener; none disables it.
    pub metrics_listen: Option<SocketAddr>,
    /// Where self-generated certificates live.
    pub certs_dir: PathBuf,
    pub log_format: LogFormat,
    /// Reviews evaluated at once; more wait for a slot.
    pub max_concurrency: usize,
    /// Namespaces whose requests are allowed without evaluation.
    pub exempt_namespaces: Vec<String>,
    /// Time a client has for its TLS handshake and request headers.
    pub header_read_timeout: Duration,
    /// After a shutdown signal, keep accepting connections this long (with
    /// readiness false) so load balancers stop sending traffic first.
    pub shutdown_delay: Duration,
    /// Longest wait for in-flight requests once draining.
    pub drain_timeout: Duration,
    /// Accept a policy reload that leaves no binding or placement profile
    /// where the served set has some.
    pub allow_empty_policies: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 8443)),
            policies: None,
            catalog: None,
            tls_cert: None,
            tls_key: None,
            metrics_listen: Some(SocketAddr::from(([0, 0, 0, 0], 9090))),
            certs_dir: PathBuf::from("certs"),
            log_format: LogFormat::Text,
            max_concurrency: default_concurrency(),
            exempt_namespaces: Vec::new(),
            header_read_timeout: Duration::from_secs(5),
            shutdown_delay: Duration::ZERO,
            drain_timeout: Duration::from_secs(30),
            allow_empty_policies: false,
        }
    }
}

/// Twice the cores: evaluation is CPU work, and a little slack hides
/// scheduling gaps.
pub fn default_concurrency() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get() * 2)
}

/// A bound, not yet running, server.
pub struct Server {
    config: ServeConfig,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    resolver: Arc<CertResolver>,
    cert_files: (PathBuf, PathBuf),
    acceptor: TlsAcceptor,
    state: Arc<AppState>,
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
        if config.max_concurrency == 0 {
            anyhow::bail!("--max-concurrency must be at least 1");
        }
        let (cert, key) = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => (cert.clone(), key.clone()),
            (None, None) => self_generated(&config.certs_dir).await?,
            _ => anyhow::bail!("--tls-cert and --tls-key must be given together"),
        };
        let certified = tls::load_certified_key(&cert, &key)?;
        if let Some(expiry) = tls::not_after(&certified) {
            metrics.set_certificate_expiry(expiry);
        }
        let resolver = Arc::new(CertResolver::new(certified));
        let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(resolver.clone())?));
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr} for metrics"))?,
            ),
            None => None,
        };
        let state = Arc::new(AppState {
            webhook,
            metrics,
            permits: Arc::new(tokio::sync::Semaphore::new(config.max_concurrency)),
            shutdown,
            readiness,
            exempt_namespaces: config.exempt_namespaces.clone(),
        });
        Ok(Server {
            config,
            listener,
            metrics_listener,
            resolver,
            cert_files: (cert, key),
            acceptor,
            state,
        })
    }

    /// The webhook listener's address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.config.listen)
    }

    /// The metrics listener's address, if enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.state.shutdown.clone()
    }

    /// Serves until shutdown: on the first trigger readiness turns false,
    /// (after `shutdown_delay`) the listener closes and in-flight requests
    /// finish; a second trigger returns at once.
    pub async fn run(self) -> anyhow::Result<()> {
        let Server {
            config,
            listener,
            metrics_listener,
            resolver,
            cert_files: (cert, key),
            acceptor,
            state,
        } = self;
        let shutdown = state.shutdown.clone();
        let _reloader = CertReloader::spawn(resolver, cert, key, state.metrics.clone());
        let metrics_task = metrics_listener.map(|l| {
            let app = handlers::metrics_router(state.clone());
            tokio::spawn(async move {
                if let Err(err) = axum::serve(l, app).await {
                    tracing::error!("metrics listener failed: {err}");
                }
            })
        });
        tracing::info!(addr = %listener.local_addr()?, "serving admission webhooks");

        let app = handlers::router(state.clone());
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(config.header_read_timeout);
        builder.http2().timer(TokioTimer::new());
        let builder = Arc::new(builder);
        let graceful = GracefulShutdown::new();

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
        tokio::pin!(stop_accepting);
        loop {
            let (tcp, peer) = tokio::select! {
                biased;
                _ = &mut stop_accepting => break,
                accepted = listener.accept() => match accepted {
                    Ok(conn) => conn,
                    Err(err) => {
                        // Out of file descriptors and the like: back off.
                        tracing::warn!("accept failed: {err}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let acceptor = acceptor.clone();
            let app = app.clone();
            let builder = builder.clone();
            let watcher = graceful.watcher();
            let handshake_timeout = config.header_read_timeout;
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(err)) => {
                        tracing::debug!(%peer, "TLS handshake failed: {err}");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
                let service = hyper::service::service_fn(move |req| app.clone().oneshot(req));
                let conn = builder.serve_connection(TokioIo::new(tls), service);
                if let Err(err) = watcher.watch(conn).await {
                    tracing::debug!(%peer, "connection ended: {err}");
                }
            });
        }
        drop(listener);
        tracing::info!(
            connections = graceful.count(),
            "stopped accepting connections; draining in-flight requests"
        );
        let drained = tokio::select! {
            _ = graceful.shutdown() => true,
            _ = shutdown.reached(Phase::Aborted) => false,
            _ = tokio::time::sleep(config.drain_timeout) => false,
        };
        if let Some(task) = metrics_task {
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
