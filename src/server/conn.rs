//! Accepting and serving connections, the same way on both listeners:
//! a cap on open connections, a deadline for each request head, an idle
//! timeout, and a drain that lets clients leave on their own. Each
//! connection is timed by its watchdog ([`super::watchdog`]).
use super::metrics::Metrics;
use super::shutdown::{Phase, ShutdownHandle};
use super::watchdog::{Activity, Metered, Step, Tracked, Watch};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

/// Streams one HTTP/2 connection may have open at once (the apiserver
/// multiplexes its webhook calls over a few connections).
const MAX_CONCURRENT_STREAMS: u32 = 250;
/// Streams a client may open and reset before the server has picked them
/// up; beyond it the connection gets GOAWAY (HTTP/2 rapid reset).
const MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;
/// Streams the server may reset for protocol errors before it sends GOAWAY.
const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 256;
/// HTTP/2 keep-alive: a ping this often, and the connection is dropped when
/// it goes unanswered this long (a peer that vanished without a FIN).
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Open connections on the metrics listener (scrapers and probes).
pub(crate) const METRICS_MAX_CONNECTIONS: u32 = 64;

/// Time limits for every connection of a listener.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// From accept to the first complete request head (TLS handshake and
    /// protocol detection included), and from the first byte of each later
    /// HTTP/1 request to its complete head.
    pub header_read: Duration,
    /// A connection with nothing in flight and nothing arriving this long is
    /// closed (HTTP/1) or gets GOAWAY (HTTP/2).
    pub idle: Duration,
    /// While draining, an HTTP/1 connection idle this long is closed.
    pub drain_window: Duration,
}

/// One listener's connections: accepts, serves, counts them.
pub(crate) struct Edge {
    /// `webhook` or `metrics`: the metrics label.
    listener: &'static str,
    tls: Option<TlsAcceptor>,
    app: Router,
    builder: auto::Builder<TokioExecutor>,
    timeouts: Timeouts,
    slots: Arc<Semaphore>,
    max_connections: u32,
    metrics: Metrics,
    shutdown: ShutdownHandle,
}

impl Edge {
    pub(crate) fn new(
        listener: &'static str,
        tls: Option<TlsAcceptor>,
        app: Router,
        timeouts: Timeouts,
        max_connections: u32,
        metrics: Metrics,
        shutdown: ShutdownHandle,
    ) -> Edge {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // The watchdog times request heads and idleness; hyper's own
        // HTTP/1 timer, which starts as soon as a connection waits for its
        // next request, is only a backstop past both.
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(timeouts.idle + timeouts.header_read);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
            .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESET_STREAMS)
            .max_local_error_reset_streams(MAX_LOCAL_ERROR_RESET_STREAMS)
            .keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
        Edge {
            listener,
            tls,
            app,
            builder,
            timeouts,
            slots: Arc::new(Semaphore::new(max_connections as usize)),
            max_connections,
            metrics,
            shutdown,
        }
    }

    /// Accepts until `stop` resolves, then drops the listener. At the cap
    /// it stops accepting: new connections wait in the kernel's queue
    /// instead of using up file descriptors.
    pub(crate) async fn accept_until(
        self: Arc<Self>,
        listener: TcpListener,
        stop: impl Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        loop {
            let slot = tokio::select! {
                biased;
                _ = &mut stop => break,
                slot = self.slots.clone().acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => break,
                },
            };
            let (tcp, peer) = tokio::select! {
                biased;
                _ = &mut stop => break,
                accepted = listener.accept() => match accepted {
                    Ok(conn) => conn,
                    Err(err) => {
                        // Out of file descriptors and the like: back off.
                        tracing::warn!(listener = self.listener, "accept failed: {err}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let edge = self.clone();
            tokio::spawn(async move {
                edge.serve(tcp, peer).await;
                drop(slot);
            });
        }
    }

    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        (self.max_connections as usize).saturating_sub(self.slots.available_permits())
    }

    /// Resolves once every connection has closed.
    pub(crate) async fn closed(&self) {
        let _all = self.slots.acquire_many(self.max_connections).await;
    }

    async fn serve(&self, tcp: TcpStream, peer: SocketAddr) {
        let _open = OpenConnection::new(&self.metrics, self.listener);
        let accepted = Instant::now();
        let _ = tcp.set_nodelay(true);
        let Some(acceptor) = &self.tls else {
            return self.serve_http(tcp, accepted, peer).await;
        };
        let handshake = acceptor.accept(tcp);
        match tokio::time::timeout_at(accepted + self.timeouts.header_read, handshake).await {
            Ok(Ok(tls)) => self.serve_http(tls, accepted, peer).await,
            Ok(Err(err)) => tracing::debug!(%peer, "TLS handshake failed: {err}"),
            Err(_) => {
                self.metrics
                    .inc_connections_closed(self.listener, "header_timeout");
                tracing::debug!(%peer, "TLS handshake timed out");
            }
        }
    }

    async fn serve_http<S>(&self, stream: S, accepted: Instant, peer: SocketAddr)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Arc::new(Activity::new(accepted));
        let io = TokioIo::new(Metered {
            inner: stream,
            activity: activity.clone(),
        });
        let service = Tracked {
            app: self.app.clone(),
            activity: activity.clone(),
            shutdown: self.shutdown.clone(),
        };
        let conn = self.builder.serve_connection(io, service);
        tokio::pin!(conn);
        let draining = self.shutdown.reached(Phase::Draining);
        tokio::pin!(draining);
        let mut watch = Watch::default();
        loop {
            let now = Instant::now();
            let wake = match watch.next(&activity.snapshot(), &self.timeouts, now) {
                Step::Wait(until) => until,
                Step::Close(reason) => {
                    if let Some(reason) = reason {
                        self.metrics.inc_connections_closed(self.listener, reason);
                    }
                    tracing::debug!(%peer, reason = reason.unwrap_or("going away"), "closing connection");
                    return;
                }
                Step::GoAway(reason) => {
                    if let Some(reason) = reason {
                        self.metrics.inc_connections_closed(self.listener, reason);
                    }
                    conn.as_mut().graceful_shutdown();
                    watch.going_away_since = Some(now);
                    continue;
                }
            };
            tokio::select! {
                ended = conn.as_mut() => {
                    if let Err(err) = ended {
                        let timed_out = err
                            .downcast_ref::<hyper::Error>()
                            .is_some_and(hyper::Error::is_timeout);
                        if timed_out {
                            self.metrics.inc_connections_closed(self.listener, "header_timeout");
                        }
                        tracing::debug!(%peer, "connection ended: {err}");
                    }
                    return;
                }
                _ = &mut draining, if watch.drain_started.is_none() => {
                    watch.drain_started = Some(Instant::now());
                }
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}

/// Counts a connection in the open-connections gauge while it lives.
struct OpenConnection<'a> {
    metrics: &'a Metrics,
    listener: &'static str,
}

impl<'a> OpenConnection<'a> {
    fn new(metrics: &'a Metrics, listener: &'static str) -> Self {
        metrics.add_open_connections(listener, 1);
        OpenConnection { metrics, listener }
    }
}

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        self.metrics.add_open_connections(self.listener, -1);
    }
}
