//! Accepting and serving connections, the same way on every listener:
//! a cap on open connections at which the quietest connection makes room
//! for a new one, a deadline for each request head, an idle timeout, a
//! write timeout for peers that stop reading, bounded buffers per
//! connection, and a drain that lets clients leave on their own. Each
//! connection is timed by its watchdog ([`super::watchdog`]).
use super::budget::Client;
use super::metrics::Metrics;
use super::shutdown::{Phase, ShutdownHandle};
use super::watchdog::{Activity, Metered, Step, Timeouts, Tracked, Watch};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

/// Streams one HTTP/2 connection may have open at once, answered or not:
/// a stream whose answer the peer has not read stays open, so this bounds
/// the answers one connection can leave unread. The apiserver opens
/// another connection when it needs more (Go's HTTP/2 client does).
const MAX_CONCURRENT_STREAMS: u32 = 16;
/// What an HTTP/2 peer may send on one stream before the server reads it.
/// A body waiting for memory is not read: what its stream holds of the
/// connection's window is bounded by this, and the connection's window
/// holds that much for every stream, so the bodies still being read on the
/// same connection always get their bytes (and the ones waiting cannot
/// stall them).
const HTTP2_STREAM_WINDOW: u32 = 64 * 1024;
/// An HTTP/2 connection's window: a stream's for each of them.
const HTTP2_CONNECTION_WINDOW: u32 = HTTP2_STREAM_WINDOW * MAX_CONCURRENT_STREAMS;
/// What hyper buffers per HTTP/1 connection, for reading requests and for
/// writing answers (pipelined requests wait in it unread). Request heads
/// larger than this are refused; a review's head is well under 4 KiB.
const HTTP1_BUFFER: usize = 16 * 1024;
/// What one HTTP/2 stream may buffer of its answer before the peer reads.
const HTTP2_SEND_BUFFER: usize = 16 * 1024;
/// The kernel's send buffer per connection (its autotuning would grow it
/// to megabytes for a peer that stops reading, in the pod's memory).
const SOCKET_SEND_BUFFER: usize = 64 * 1024;
/// TLS records rustls holds for a connection before the socket takes them
/// (rustls' own default is 64 KiB).
const TLS_SEND_BUFFER: usize = 16 * 1024;
/// While at the cap with nothing quiet to close, look again this often.
const EVICTION_RETRY: Duration = Duration::from_millis(100);
/// Connections asked to leave to make room that may still be closing
/// (within their grace) beyond the cap, at most a quarter of the cap: a
/// new connection takes the place of the one asked to leave at once,
/// without waiting for it to go.
const LEAVING_MAX: u32 = 64;
/// Streams a client may open and reset before the server has picked them
/// up; beyond it the connection gets GOAWAY (HTTP/2 rapid reset).
const MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;
/// Streams the server may reset for protocol errors before it sends GOAWAY.
const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 256;
/// HTTP/2 keep-alive: a ping this often, and the connection is dropped when
/// it goes unanswered this long (a peer that vanished without a FIN).
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Open connections on the metrics listener (scrapers).
pub(crate) const METRICS_MAX_CONNECTIONS: u32 = 64;
/// Open connections on the probe listener: the kubelet opens one per probe
/// and closes it; anyone else holding them is made to leave at the cap.
pub(crate) const HEALTH_MAX_CONNECTIONS: u32 = 16;
/// A probe's head comes at once; the kubelet waits 2 s for the answer.
pub(crate) const HEALTH_HEADER_READ: Duration = Duration::from_millis(500);

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
    /// Every open connection, for choosing which makes room at the cap.
    open: Mutex<HashMap<u64, Open>>,
    /// Places for connections leaving to make room, beyond the cap.
    leaving: Arc<Semaphore>,
    leaving_max: u32,
    next_id: AtomicU64,
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
            .max_buf_size(HTTP1_BUFFER)
            .header_read_timeout(timeouts.idle + timeouts.header_read);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
            .initial_stream_window_size(HTTP2_STREAM_WINDOW)
            .initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
            .max_send_buf_size(HTTP2_SEND_BUFFER)
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
            open: Mutex::new(HashMap::new()),
            leaving: Arc::new(Semaphore::new(leaving_max(max_connections) as usize)),
            leaving_max: leaving_max(max_connections),
            next_id: AtomicU64::new(0),
            metrics,
            shutdown,
        }
    }

    /// Accepts until `stop` resolves, then drops the listener. At the cap
    /// a new connection is accepted and the quietest open one (nothing in
    /// flight, quiet longest: an idle keep-alive, a stalled handshake) is
    /// asked to leave to make room, as nginx reuses its idle keep-alive
    /// connections; with none quiet, the new one waits for a slot and the
    /// ones behind it wait in the kernel's queue instead of using up file
    /// descriptors.
    pub(crate) async fn accept_until(
        self: Arc<Self>,
        listener: TcpListener,
        stop: impl Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        loop {
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
            let slot = tokio::select! {
                biased;
                _ = &mut stop => break,
                slot = self.make_room() => match slot {
                    Some(slot) => slot,
                    None => break,
                },
            };
            let edge = self.clone();
            tokio::spawn(async move { edge.serve(tcp, peer, slot).await });
        }
    }

    /// A connection slot: a free one, or the place of the quietest
    /// connection, which is asked to leave. `None` once the slots are
    /// closed.
    async fn make_room(&self) -> Option<OwnedSemaphorePermit> {
        loop {
            match self.slots.clone().try_acquire_owned() {
                Ok(slot) => return Some(slot),
                Err(TryAcquireError::Closed) => return None,
                Err(TryAcquireError::NoPermits) => {}
            }
            // A quiet one leaves in a place beyond the cap: wait for one of
            // those (others are still leaving) or for a free slot.
            let leaving = async {
                if self.any_quiet() {
                    self.leaving.clone().acquire_owned().await.ok()
                } else {
                    tokio::time::sleep(EVICTION_RETRY).await;
                    None
                }
            };
            tokio::select! {
                slot = self.slots.clone().acquire_owned() => return slot.ok(),
                leaving = leaving => {
                    if let Some(slot) = leaving.and_then(|l| self.evict_quietest(l)) {
                        return Some(slot);
                    }
                }
            }
        }
    }

    /// The open connections, listed.
    fn listed(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Open>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether some open connection has nothing in flight.
    fn any_quiet(&self) -> bool {
        self.listed().values().any(|o| o.activity.quiet())
    }

    /// Asks the open connection that has nothing in flight and has been
    /// quiet longest (one whose peer stopped reading first) to leave, and
    /// takes its place under the cap; it finishes leaving in `leaving`, a
    /// place of its own beyond the cap. `None` when every connection is
    /// busy.
    fn evict_quietest(&self, leaving: OwnedSemaphorePermit) -> Option<OwnedSemaphorePermit> {
        let mut open = self.listed();
        let victim = open
            .values_mut()
            .filter(|o| o.activity.quiet())
            .min_by_key(|o| (!o.activity.writes_blocked(), o.activity.last_activity()))?;
        victim.activity.evict();
        Some(std::mem::replace(&mut victim.slot, leaving))
    }

    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        self.listed().len()
    }

    /// Resolves once every connection has closed.
    pub(crate) async fn closed(&self) {
        let _all = self.slots.acquire_many(self.max_connections).await;
        let _leaving = self.leaving.acquire_many(self.leaving_max).await;
    }

    async fn serve(&self, tcp: TcpStream, peer: SocketAddr, slot: OwnedSemaphorePermit) {
        let _open = OpenConnection::new(&self.metrics, self.listener);
        let accepted = Instant::now();
        let activity = Arc::new(Activity::new(accepted));
        let _registered = self.register(&activity, slot);
        let _ = tcp.set_nodelay(true);
        let _ = socket2::SockRef::from(&tcp).set_send_buffer_size(SOCKET_SEND_BUFFER);
        let Some(acceptor) = &self.tls else {
            return self.serve_http(tcp, activity, peer).await;
        };
        let handshake = acceptor.accept_with(tcp, |tls| {
            tls.set_buffer_limit(Some(TLS_SEND_BUFFER));
        });
        let handshake = tokio::time::timeout_at(accepted + self.timeouts.header_read, handshake);
        let shaken = tokio::select! {
            shaken = handshake => shaken,
            _ = activity.evict.notified() => {
                self.metrics.inc_connections_closed(self.listener, "evicted");
                tracing::debug!(%peer, "closing a connection still in its TLS handshake to make room");
                return;
            }
        };
        match shaken {
            Ok(Ok(tls)) => self.serve_http(tls, activity, peer).await,
            Ok(Err(err)) => tracing::debug!(%peer, "TLS handshake failed: {err}"),
            Err(_) => {
                self.metrics
                    .inc_connections_closed(self.listener, "header_timeout");
                tracing::debug!(%peer, "TLS handshake timed out");
            }
        }
    }

    /// Lists the connection among the open ones, holding its place, until
    /// the guard drops.
    fn register(&self, activity: &Arc<Activity>, slot: OwnedSemaphorePermit) -> Registered<'_> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let open = Open {
            activity: activity.clone(),
            slot,
        };
        self.listed().insert(id, open);
        Registered { edge: self, id }
    }

    async fn serve_http<S>(&self, stream: S, activity: Arc<Activity>, peer: SocketAddr)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let io = TokioIo::new(Metered::new(stream, activity.clone()));
        let service = Tracked {
            app: self.app.clone(),
            activity: activity.clone(),
            client: Client::connected(peer.ip()),
            shutdown: self.shutdown.clone(),
        };
        let conn = self.builder.serve_connection(io, service);
        tokio::pin!(conn);
        let draining = self.shutdown.reached(Phase::Draining);
        tokio::pin!(draining);
        let mut watch = Watch::default();
        loop {
            let now = Instant::now();
            let step = watch.next(&activity.snapshot(), &self.timeouts, now);
            if let Step::Close(Some(reason)) | Step::GoAway(Some(reason)) = step {
                self.metrics.inc_connections_closed(self.listener, reason);
            }
            let wake = match step {
                Step::Wait(until) => until,
                Step::Close(reason) => {
                    tracing::debug!(%peer, reason = reason.unwrap_or("going away"), "closing connection");
                    return;
                }
                Step::GoAway(_) => {
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
                _ = activity.evict.notified(), if !watch.evicted => {
                    self.metrics.inc_connections_closed(self.listener, "evicted");
                    if !activity.snapshot().is_http2() || activity.writes_blocked() {
                        // HTTP/1 has no way to say "leave" but closing (an
                        // idle keep-alive or a half-sent head); a peer that
                        // stopped reading would not read a GOAWAY either.
                        tracing::debug!(%peer, "closing a quiet connection to make room");
                        return;
                    }
                    tracing::debug!(%peer, "asking a quiet connection to leave to make room");
                    watch.evicted = true;
                    if watch.going_away_since.is_none() {
                        conn.as_mut().graceful_shutdown();
                    }
                    watch.going_away_since = Some(Instant::now());
                }
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}

/// Places beyond a cap of `max_connections` for connections leaving.
fn leaving_max(max_connections: u32) -> u32 {
    (max_connections / 4).clamp(1, LEAVING_MAX)
}

/// An open connection as its listener sees it.
struct Open {
    activity: Arc<Activity>,
    /// Its place under the cap, or among those leaving once it was asked
    /// to make room; given back when the connection ends.
    slot: OwnedSemaphorePermit,
}

/// Keeps a connection listed among the open ones while it lives.
struct Registered<'a> {
    edge: &'a Edge,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.edge.listed().remove(&self.id);
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
