//! A connection's watchdog: what its requests and its stream have done,
//! and what to do next. It is fed by a service wrapper (requests in flight,
//! last activity) and by the stream itself (the first byte of a request),
//! so it sees every protocol, including the bytes before hyper's protocol
//! detection, which hyper's own timers do not, and it tells an idle
//! keep-alive connection (kept for `--idle-timeout`, as clients keep
//! theirs) from one that is slowly sending a request head (cut at the
//! header timeout). The stream also holds back reading while its answers
//! cannot be written (a peer that stops reading sends no more requests),
//! and the watchdog cuts a connection whose writes stay blocked for the
//! write timeout, or that the listener evicted to make room.
use super::budget::Client;
use super::shutdown::ShutdownHandle;
use axum::http::header::{HeaderValue, CONNECTION};
use axum::http::{Request, Version};
use axum::Router;
use futures_util::future::BoxFuture;
use hyper::body::Incoming;
use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tower::ServiceExt as _;

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
    /// A connection whose writes stay blocked this long (the peer stopped
    /// reading its answers) is closed, busy or not.
    pub write: Duration,
}

/// What a connection's requests have done, written by [`Tracked`] and read
/// by the watchdog.
pub(super) struct Activity {
    accepted: Instant,
    in_flight: AtomicUsize,
    served: AtomicBool,
    http2: AtomicBool,
    /// Start or end of the latest request, in nanoseconds after `accepted`.
    last_nanos: AtomicU64,
    /// First byte read while no request was in flight (the start of the
    /// next request head), in nanoseconds after `accepted` plus one; zero
    /// when none has come since the last request started.
    pending_nanos: AtomicU64,
    /// When a write last found the peer's window and our buffers full, in
    /// nanoseconds after `accepted` plus one; zero while writes go through.
    write_blocked_nanos: AtomicU64,
    /// The reader held back while writes are blocked, woken when they
    /// go through again.
    held_reader: Mutex<Option<Waker>>,
    /// The listener asked this connection to make room.
    evicted: AtomicBool,
    /// Wakes the connection's watchdog on eviction.
    pub evict: tokio::sync::Notify,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Snapshot {
    accepted: Instant,
    in_flight: usize,
    served: bool,
    http2: bool,
    last_activity: Instant,
    /// A request head has started arriving at this time.
    pending: Option<Instant>,
    /// Writes have been blocked since this time.
    write_blocked: Option<Instant>,
}

impl Snapshot {
    /// Served a request over HTTP/2.
    pub fn is_http2(&self) -> bool {
        self.http2
    }
}

impl Activity {
    pub fn new(accepted: Instant) -> Activity {
        Activity {
            accepted,
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            http2: AtomicBool::new(false),
            last_nanos: AtomicU64::new(0),
            pending_nanos: AtomicU64::new(0),
            write_blocked_nanos: AtomicU64::new(0),
            held_reader: Mutex::new(None),
            evicted: AtomicBool::new(false),
            evict: tokio::sync::Notify::new(),
        }
    }

    /// Nothing in flight: a candidate to close when the listener is full.
    pub fn quiet(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0 && !self.evicted.load(Ordering::Relaxed)
    }

    /// Whether the peer has stopped reading: a write is waiting.
    pub fn writes_blocked(&self) -> bool {
        self.write_blocked_nanos.load(Ordering::Relaxed) != 0
    }

    /// The start or end of the latest request, or the accept.
    pub fn last_activity(&self) -> Instant {
        self.accepted + Duration::from_nanos(self.last_nanos.load(Ordering::Relaxed))
    }

    /// Asks the connection to leave, to make room for a new one.
    pub fn evict(&self) {
        self.evicted.store(true, Ordering::Relaxed);
        self.evict.notify_one();
    }

    fn write_blocked(&self) {
        if self.write_blocked_nanos.load(Ordering::Relaxed) == 0 {
            self.write_blocked_nanos
                .store(self.now_nanos() + 1, Ordering::Relaxed);
        }
    }

    fn write_went_through(&self) {
        if self.write_blocked_nanos.swap(0, Ordering::Relaxed) != 0 {
            let held = self
                .held_reader
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(reader) = held {
                reader.wake();
            }
        }
    }

    /// Whether reading must wait for writes; if so, `waker` is woken once
    /// a write goes through.
    fn hold_reader(&self, waker: &Waker) -> bool {
        if self.write_blocked_nanos.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let mut held = self
            .held_reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Checked again under the lock: a write may have gone through and
        // looked for a reader to wake just before.
        if self.write_blocked_nanos.load(Ordering::Relaxed) == 0 {
            return false;
        }
        *held = Some(waker.clone());
        true
    }

    fn now_nanos(&self) -> u64 {
        u64::try_from(self.accepted.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
    }

    fn touch(&self) {
        self.last_nanos
            .fetch_max(self.now_nanos(), Ordering::Relaxed);
    }

    /// Bytes arrived: with no request in flight they start the next head.
    fn bytes_read(&self) {
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.pending_nanos.load(Ordering::Relaxed) == 0
        {
            let _ = self.pending_nanos.compare_exchange(
                0,
                self.now_nanos() + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        // Nanoseconds after `accepted` plus one, or zero for none.
        let since = |nanos: &AtomicU64| match nanos.load(Ordering::Relaxed) {
            0 => None,
            n => Some(self.accepted + Duration::from_nanos(n - 1)),
        };
        Snapshot {
            accepted: self.accepted,
            in_flight: self.in_flight.load(Ordering::Relaxed),
            served: self.served.load(Ordering::Relaxed),
            http2: self.http2.load(Ordering::Relaxed),
            last_activity: self.last_activity(),
            pending: since(&self.pending_nanos),
            write_blocked: since(&self.write_blocked_nanos),
        }
    }
}

/// How long a connection the server closes keeps reading, and dropping,
/// what its peer still sends (nginx's lingering close): a client still
/// writing a request the server has answered early (431 for a head too
/// large, 413) then reads the answer instead of a reset, which closing a
/// socket with unread bytes sends.
const LINGER_TIME: Duration = Duration::from_secs(2);
/// The most a lingering close reads before it closes anyway.
const LINGER_BYTES: usize = 4 << 20;

/// The connection's stream, telling [`Activity`] when bytes arrive; its
/// shutdown lingers (see [`LINGER_TIME`]).
pub(super) struct Metered<S> {
    inner: S,
    activity: Arc<Activity>,
    linger: Option<Linger>,
}

/// A lingering close under way: the write side is shut.
struct Linger {
    until: Pin<Box<tokio::time::Sleep>>,
    dropped: usize,
}

impl<S> Metered<S> {
    pub fn new(inner: S, activity: Arc<Activity>) -> Metered<S> {
        Metered {
            inner,
            activity,
            linger: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        // Answers the peer has not read stay bounded: no more requests are
        // read from it until they are written.
        if self.activity.hold_reader(cx.waker()) {
            return Poll::Pending;
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl<S> Metered<S> {
    /// Records whether a write went through.
    fn wrote<T>(&self, polled: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        match &polled {
            Poll::Pending => self.activity.write_blocked(),
            Poll::Ready(_) => self.activity.write_went_through(),
        }
        polled
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.wrote(polled)
    }

    /// Shuts the write side (the peer sees the end of the answers), then
    /// reads and drops what the peer still sends until it closes too, for
    /// at most [`LINGER_TIME`] and [`LINGER_BYTES`].
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.linger.is_none() {
            std::task::ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
            this.linger = Some(Linger {
                until: Box::pin(tokio::time::sleep(LINGER_TIME)),
                dropped: 0,
            });
        }
        let Some(linger) = this.linger.as_mut() else {
            unreachable!("set above")
        };
        let mut scratch = [0u8; 8192];
        loop {
            if linger.dropped >= LINGER_BYTES || linger.until.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    linger.dropped += buf.filled().len();
                }
                // The peer closed too, or the connection failed: done.
                Poll::Ready(_) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Marks a request in flight until dropped (answered, or its stream reset).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn begin(activity: &Arc<Activity>, http2: bool) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        activity.pending_nanos.store(0, Ordering::Relaxed);
        activity.served.store(true, Ordering::Relaxed);
        if http2 {
            activity.http2.store(true, Ordering::Relaxed);
        }
        activity.touch();
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The router, recording activity and telling each request who sent it;
/// while draining, HTTP/1 answers carry `Connection: close` so keep-alive
/// clients leave after their response.
#[derive(Clone)]
pub(super) struct Tracked {
    pub app: Router,
    pub activity: Arc<Activity>,
    pub client: Client,
    pub shutdown: ShutdownHandle,
}

impl hyper::service::Service<Request<Incoming>> for Tracked {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(self.client.clone());
        let http1 = request.version() < Version::HTTP_2;
        let in_flight = InFlight::begin(&self.activity, !http1);
        let app = self.app.clone();
        let shutdown = self.shutdown.clone();
        Box::pin(async move {
            let mut response = app.oneshot(request).await?;
            if http1 && !shutdown.is_running() {
                response
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            drop(in_flight);
            Ok(response)
        })
    }
}

/// What the watchdog does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Wait(Instant),
    /// Drop the connection; the reason is counted when there is one.
    Close(Option<&'static str>),
    /// Graceful shutdown: GOAWAY on HTTP/2, close-when-idle on HTTP/1.
    GoAway(Option<&'static str>),
}

/// A connection's watchdog state.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Watch {
    pub drain_started: Option<Instant>,
    pub going_away_since: Option<Instant>,
    /// Told to leave to make room: it gets [`EVICTED_GRACE`], not the
    /// header timeout, to do so.
    pub evicted: bool,
}

/// Longest nap between checks when nothing is due.
const FAR: Duration = Duration::from_secs(3600);
/// How long an evicted connection with nothing in flight has to leave
/// (an HTTP/2 peer to read its GOAWAY) before it is dropped.
pub(super) const EVICTED_GRACE: Duration = Duration::from_millis(250);

impl Watch {
    pub fn next(&self, a: &Snapshot, t: &Timeouts, now: Instant) -> Step {
        let mut wake = now + FAR;
        // A peer that stopped reading its answers is cut, busy or not.
        if let Some(blocked) = a.write_blocked {
            let deadline = blocked + t.write;
            if now >= deadline {
                return Step::Close(Some("write_timeout"));
            }
            wake = wake.min(deadline);
        }
        if !a.served {
            let deadline = a.accepted + t.header_read;
            if now >= deadline {
                return Step::Close(Some("header_timeout"));
            }
            wake = wake.min(deadline);
        }
        // When busy, check again a period later: requests ending move
        // `last_activity`, so the deadline is worked out afresh then.
        let idle_deadline = |period: Duration, from: Instant| {
            if a.in_flight > 0 {
                (now + period, false)
            } else {
                let deadline = from.max(a.last_activity) + period;
                (deadline, now >= deadline)
            }
        };
        if let Some(since) = self.going_away_since {
            // Told to leave: with nothing in flight it gets the header
            // timeout to do so (a peer ignoring GOAWAY is then dropped).
            let grace = if self.evicted {
                EVICTED_GRACE
            } else {
                t.header_read
            };
            let (deadline, due) = idle_deadline(grace, since);
            if due {
                return Step::Close(None);
            }
            return Step::Wait(wake.min(deadline));
        }
        if let Some(drain) = self.drain_started {
            if a.http2 {
                return Step::GoAway(None);
            }
            let (deadline, due) = idle_deadline(t.drain_window, drain);
            if due {
                return Step::GoAway(None);
            }
            wake = wake.min(deadline);
        }
        if a.http2 {
            let (deadline, due) = idle_deadline(t.idle, a.accepted);
            if due {
                return Step::GoAway(Some("idle_timeout"));
            }
            wake = wake.min(deadline);
        } else if a.served && a.in_flight == 0 {
            // HTTP/1 between requests: idle until a byte arrives, then the
            // head must be complete within the header timeout.
            let (deadline, reason) = match a.pending {
                Some(started) => (started + t.header_read, "header_timeout"),
                None => (a.last_activity + t.idle, "idle_timeout"),
            };
            if now >= deadline {
                return match a.pending {
                    Some(_) => Step::Close(Some(reason)),
                    None => Step::GoAway(Some(reason)),
                };
            }
            wake = wake.min(deadline);
        }
        Step::Wait(wake)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts {
        header_read: Duration::from_secs(5),
        idle: Duration::from_secs(60),
        drain_window: Duration::from_secs(3),
        write: Duration::from_secs(10),
    };

    fn fresh(at: Instant) -> Snapshot {
        Snapshot {
            accepted: at,
            in_flight: 0,
            served: false,
            http2: false,
            last_activity: at,
            pending: None,
            write_blocked: None,
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// The watchdog's state, the connection's, and what it does next at
    /// each time.
    type Case<'a> = (Watch, Snapshot, &'a [(Instant, Step)]);

    #[test]
    fn the_watchdog_closes_waits_or_sends_goaway() {
        let t0 = Instant::now();
        let at = |n: u64| t0 + secs(n);
        // Served (or not), over HTTP/2 (or not), requests in flight, and
        // the last activity.
        let snap = |served: bool, http2: bool, in_flight: usize, last: u64| Snapshot {
            served,
            http2,
            in_flight,
            last_activity: at(last),
            ..fresh(t0)
        };
        let watch = Watch::default();
        let draining = |n| Watch {
            drain_started: Some(at(n)),
            ..Watch::default()
        };
        let leaving = |evicted| Watch {
            going_away_since: Some(at(60)),
            evicted,
            ..Watch::default()
        };
        let (header, idle) = (Some("header_timeout"), Some("idle_timeout"));
        let (grace, wait) = (EVICTED_GRACE, Step::Wait);
        let cases: [Case; 13] = [
            // A peer that stops reading is cut after the write timeout, busy or not.
            (
                watch,
                Snapshot {
                    write_blocked: Some(at(2)),
                    ..snap(true, true, 250, 0)
                },
                &[
                    (at(3), wait(at(12))),
                    (at(12), Step::Close(Some("write_timeout"))),
                ],
            ),
            // No request within the header timeout closes.
            (
                watch,
                fresh(t0),
                &[(at(1), wait(at(5))), (at(5), Step::Close(header))],
            ),
            // Idle HTTP/1 is kept for the idle timeout.
            (
                watch,
                snap(true, false, 0, 1),
                &[(at(30), wait(at(61))), (at(61), Step::GoAway(idle))],
            ),
            // Busy HTTP/1 is not idle.
            (watch, snap(true, false, 1, 1), &[(at(100), wait(at(3700)))]),
            // A later HTTP/1 head must arrive within the header timeout.
            (
                watch,
                Snapshot {
                    pending: Some(at(40)),
                    ..snap(true, false, 0, 1)
                },
                &[(at(41), wait(at(45))), (at(45), Step::Close(header))],
            ),
            // Idle HTTP/2 gets GOAWAY.
            (
                watch,
                snap(true, true, 0, 10),
                &[(at(20), wait(at(70))), (at(70), Step::GoAway(idle))],
            ),
            // Busy HTTP/2 does not.
            (watch, snap(true, true, 1, 10), &[(at(70), wait(at(130)))]),
            // Draining HTTP/2 goes away at once.
            (
                draining(1),
                snap(true, true, 3, 0),
                &[(at(1), Step::GoAway(None))],
            ),
            // Draining HTTP/1 idle before closes after a whole idle window.
            (
                draining(10),
                snap(true, false, 0, 2),
                &[(at(10), wait(at(13))), (at(13), Step::GoAway(None))],
            ),
            // Draining HTTP/1 used during the window waits longer.
            (
                draining(10),
                snap(true, false, 0, 12),
                &[(at(13), wait(at(15)))],
            ),
            // Draining HTTP/1 busy is checked a window later.
            (
                draining(10),
                snap(true, false, 1, 2),
                &[(at(14), wait(at(17)))],
            ),
            // An evicted connection is dropped after a short grace.
            (
                leaving(true),
                snap(true, true, 0, 0),
                &[
                    (at(60), wait(at(60) + grace)),
                    (at(60) + grace, Step::Close(None)),
                ],
            ),
            // A connection told to leave is dropped once idle for the header timeout.
            (
                leaving(false),
                snap(true, true, 0, 0),
                &[(at(61), wait(at(65))), (at(65), Step::Close(None))],
            ),
        ];
        for (case, (w, a, steps)) in cases.into_iter().enumerate() {
            for &(now, step) in steps {
                assert_eq!(w.next(&a, &T, now), step, "case {case}, at {:?}", now - t0);
            }
        }
    }

    /// While a write waits for a peer that does not read, nothing more is
    /// read from it, though its next request is there; once the peer reads
    /// and a write goes through, the held reader is woken and reads it.
    #[tokio::test]
    async fn reading_waits_while_answers_cannot_be_written() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let (ours, mut peer) = tokio::io::duplex(1024);
        let activity = Arc::new(Activity::new(Instant::now()));
        let metered = Metered::new(ours, activity.clone());
        peer.write_all(b"next request").await.unwrap();
        let (mut reader, mut writer) = tokio::io::split(metered);
        let answers = vec![b'a'; 4096];
        let stuck =
            tokio::time::timeout(Duration::from_millis(100), writer.write_all(&answers)).await;
        assert!(stuck.is_err(), "the peer reads nothing");
        assert!(activity.writes_blocked());
        assert!(activity.snapshot().write_blocked.is_some());
        let held = tokio::spawn(async move {
            let mut buf = [0u8; 12];
            reader.read_exact(&mut buf).await.map(|_| buf)
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!held.is_finished(), "held while answers wait");

        let mut drained = vec![0u8; 1024];
        peer.read_exact(&mut drained).await.unwrap();
        writer.write_all(b"more").await.unwrap();
        assert!(!activity.writes_blocked());
        let read = tokio::time::timeout(Duration::from_secs(5), held)
            .await
            .expect("woken once a write went through")
            .unwrap()
            .unwrap();
        assert_eq!(&read, b"next request");
    }
}
