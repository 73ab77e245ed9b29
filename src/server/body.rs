//! Reading request bodies: memory taken as the bytes arrive, within the
//! sender's shares ([`BodyMemory`]), at a pace the sender must keep.
use super::budget::{BodyHold, BodyMemory, Client, Shortfall};
use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use std::time::Duration;
use tokio::time::Instant;

/// Largest body read: an UPDATE carries two objects of up to ~1.5 MiB each.
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;
/// An oversized body is read and discarded up to this size so the client
/// sees the 413 instead of a reset connection; beyond it the connection
/// is simply closed.
const DISCARD_LIMIT_BYTES: usize = 32 * 1024 * 1024;

/// The pace a body must keep: it may fall behind `min_rate` bytes a second
/// by at most `grace` (nginx's `client_body_timeout`, measured against a
/// rate rather than between two reads, so a body trickled a byte at a time
/// is cut too). kube-apiserver writes a body at once: even its largest,
/// 7 MiB, takes milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyPace {
    pub grace: Duration,
    pub min_rate: usize,
}

impl Default for BodyPace {
    fn default() -> Self {
        BodyPace {
            grace: Duration::from_secs(2),
            min_rate: 1 << 20,
        }
    }
}

impl BodyPace {
    /// When the next bytes of a body started at `started`, with `received`
    /// bytes so far, must have arrived.
    fn due(&self, started: Instant, received: usize) -> Instant {
        let ahead = Duration::from_secs_f64(received as f64 / self.min_rate.max(1) as f64);
        started + self.grace + ahead
    }
}

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("request body is larger than {} MiB", MAX_BODY_BYTES / (1024 * 1024))]
    TooLarge,
    #[error("request body not received in time")]
    Slow,
    #[error("request body arrived slower than {} KiB/s", .0 / 1024)]
    BelowPace(usize),
    #[error("no memory for the request body within its timeout: {0}; retry")]
    NoMemory(Shortfall),
    #[error("cannot read request body: {0}")]
    Read(String),
}

/// What a body may take, and by when it must be in.
pub(crate) struct BodyRules<'a> {
    pub memory: &'a BodyMemory,
    pub client: &'a Client,
    pub validate: bool,
    pub limit: usize,
    pub pace: BodyPace,
    /// The answer's deadline: the body must be whole by then.
    pub deadline: Instant,
}

/// Reads the whole body. Memory is held for the buffer as it grows (never
/// for a declared length the client has not sent), within the sender's
/// shares; a body that would pass one is not read further (its sender is
/// held back) until there is room, and is refused when the deadline
/// comes first, or at once when it is larger than a share. `declared` is
/// its claim on memory (see [`BodyMemory`]), and is trusted to refuse a
/// body over the limit without reading it; with `expects_continue`
/// (`Expect: 100-continue`) that refusal is sent before the client sends
/// any of it.
pub(crate) async fn read_body(
    mut body: Body,
    declared: Option<usize>,
    expects_continue: bool,
    rules: BodyRules<'_>,
) -> Result<(Bytes, BodyHold), BodyError> {
    let expected = match declared {
        Some(length) if length > rules.limit => {
            if !expects_continue {
                discard(
                    body,
                    DISCARD_LIMIT_BYTES.saturating_sub(length),
                    rules.pace,
                    rules.deadline,
                )
                .await;
            }
            return Err(BodyError::TooLarge);
        }
        Some(length) => length,
        None => rules.limit,
    };
    // The pace is counted from here, less the time the body waited for
    // memory (its sender was held back then, not slow).
    let mut started = Instant::now();
    let mut hold = rules.memory.hold(rules.client, rules.validate, expected);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let due = rules.pace.due(started, buf.len()).min(rules.deadline);
        let frame = match tokio::time::timeout_at(due, body.frame()).await {
            Ok(Some(frame)) => frame.map_err(|e| BodyError::Read(e.to_string()))?,
            Ok(None) => break,
            Err(_) if due >= rules.deadline => return Err(BodyError::Slow),
            Err(_) => return Err(BodyError::BelowPace(rules.pace.min_rate)),
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let needed = buf.len() + data.len();
        // hyper stops a body at its declared length; the limit covers the
        // undeclared ones.
        if needed > expected {
            discard(
                body,
                DISCARD_LIMIT_BYTES.saturating_sub(needed),
                rules.pace,
                rules.deadline,
            )
            .await;
            return Err(BodyError::TooLarge);
        }
        if needed > buf.capacity() {
            // Doubling, as a Vec would, but never past what the body can
            // still be; held before it is allocated.
            let capacity = needed.max(buf.capacity() * 2).min(expected);
            started += hold
                .grow_to(capacity, rules.deadline)
                .await
                .map_err(BodyError::NoMemory)?;
            buf.reserve_exact(capacity - buf.len());
        }
        buf.extend_from_slice(&data);
    }
    buf.shrink_to_fit();
    hold.finish(buf.capacity());
    Ok((Bytes::from(buf), hold))
}

/// Reads and drops up to `remaining` bytes of `body`, as long as they keep
/// `pace` and arrive by `deadline`: a refused body holds its connection no
/// longer than one being read.
async fn discard(mut body: Body, mut remaining: usize, pace: BodyPace, deadline: Instant) {
    let started = Instant::now();
    let mut dropped = 0usize;
    loop {
        let due = pace.due(started, dropped).min(deadline);
        let Ok(Some(Ok(frame))) = tokio::time::timeout_at(due, body.frame()).await else {
            return;
        };
        let len = frame.data_ref().map_or(0, |d| d.len());
        if len > remaining {
            return;
        }
        remaining -= len;
        dropped += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::budget::BodyShares;
    use crate::server::metrics::Metrics;
    use std::net::IpAddr;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

    type Feed = UnboundedSender<Result<Bytes, std::io::Error>>;

    /// A body whose bytes arrive when the test sends them.
    fn fed_body() -> (Feed, Body) {
        let (tx, rx) = unbounded_channel::<Result<Bytes, std::io::Error>>();
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        (tx, Body::from_stream(stream))
    }

    fn memory(total: usize) -> BodyMemory {
        BodyMemory::new(BodyShares::of(total, 64 * 1024), Metrics::new())
    }

    /// A pool of `total` bytes with the given shares.
    fn shares(total: usize, validate: usize, address: usize, connection: usize) -> BodyMemory {
        let shares = BodyShares {
            total,
            validate,
            per_address: address,
            per_connection: connection,
        };
        BodyMemory::new(shares, Metrics::new())
    }

    fn xs(n: usize) -> Body {
        Body::from(vec![b'x'; n])
    }

    /// 1 MiB/s, with a grace of `ms` milliseconds.
    fn pace(ms: u64) -> BodyPace {
        let grace = Duration::from_millis(ms);
        BodyPace {
            grace,
            min_rate: 1 << 20,
        }
    }

    /// A body read without `Expect: 100-continue`.
    async fn receive(
        body: Body,
        declared: Option<usize>,
        rules: BodyRules<'_>,
    ) -> Result<(Bytes, BodyHold), BodyError> {
        read_body(body, declared, false, rules).await
    }

    /// [`receive`] on a task of its own; says the length read.
    fn spawn_receive(
        body: Body,
        declared: Option<usize>,
        memory: &BodyMemory,
        client: &Client,
        pace: BodyPace,
    ) -> tokio::task::JoinHandle<Result<usize, BodyError>> {
        let (memory, client) = (memory.clone(), client.clone());
        tokio::spawn(async move {
            let rules = BodyRules {
                pace,
                ..rules(&memory, &client)
            };
            receive(body, declared, rules)
                .await
                .map(|(bytes, _)| bytes.len())
        })
    }

    /// A `/validate` body of up to [`MAX_BODY_BYTES`], due within a minute.
    fn rules<'a>(memory: &'a BodyMemory, client: &'a Client) -> BodyRules<'a> {
        BodyRules {
            memory,
            client,
            validate: true,
            limit: MAX_BODY_BYTES,
            pace: BodyPace::default(),
            deadline: Instant::now() + Duration::from_secs(60),
        }
    }

    impl BodyRules<'_> {
        /// These rules with the body due within `ms` milliseconds.
        fn within(self, ms: u64) -> Self {
            let deadline = Instant::now() + Duration::from_millis(ms);
            BodyRules { deadline, ..self }
        }

        /// These rules with a limit of `limit` bytes.
        fn limit(self, limit: usize) -> Self {
            BodyRules { limit, ..self }
        }
    }

    #[tokio::test]
    async fn body_limit() {
        let memory = memory(1 << 20);
        let client = Client::unknown();
        let (small, held) = receive(xs(10), None, rules(&memory, &client).limit(10))
            .await
            .unwrap();
        assert_eq!(small.len(), 10);
        assert_eq!(held.bytes(), 1024, "what was read, in whole KiB");
        let big = receive(xs(11), None, rules(&memory, &client).limit(10)).await;
        assert!(matches!(big, Err(BodyError::TooLarge)));
    }

    /// A client declaring a large body and sending a little of it holds
    /// what it sent, not what it declared.
    #[tokio::test]
    async fn memory_is_held_as_bytes_arrive_not_by_declaration() {
        let memory = memory(8 << 20);
        let client = Client::unknown();
        let (feed, body) = fed_body();
        let pace = BodyPace::default();
        let reader = spawn_receive(body, Some(MAX_BODY_BYTES), &memory, &client, pace);
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert_eq!(memory.in_use(), 0, "nothing sent, nothing held");
        feed.send(Ok(Bytes::from(vec![b'x'; 100_000]))).unwrap();
        while memory.in_use() == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(memory.in_use(), 100_000_usize.div_ceil(1024) * 1024);
        assert_eq!(client.connection_bytes(), memory.in_use());
        feed.send(Ok(Bytes::from(vec![b'x'; 100_000]))).unwrap();
        drop(feed);
        assert_eq!(reader.await.unwrap().unwrap(), 200_000);
        assert_eq!(memory.in_use(), 0, "given back");
        assert_eq!(client.connection_bytes(), 0);
    }

    /// Six 160 KB bodies from one address arrive together, in interleaved
    /// 16 KB chunks, through a pool (and an address share) of 300 KiB:
    /// those that do not fit wait for room instead of being refused, none
    /// waits for good on another holding part of the pool, all finish, and
    /// every byte goes back.
    #[tokio::test]
    async fn bodies_that_do_not_fit_wait_and_all_finish() {
        const LENGTH: usize = 160_000;
        let memory = shares(300 * 1024, 300 * 1024, 300 * 1024, 300 * 1024);
        let (feeds, readers): (Vec<Feed>, Vec<_>) = (0..6)
            .map(|_| {
                let (feed, body) = fed_body();
                let (client, pace) = (Client::unknown(), BodyPace::default());
                (
                    feed,
                    spawn_receive(body, Some(LENGTH), &memory, &client, pace),
                )
            })
            .unzip();
        for _ in 0..LENGTH.div_ceil(16_000) {
            for feed in &feeds {
                let _ = feed.send(Ok(Bytes::from(vec![b'x'; 16_000])));
            }
            tokio::task::yield_now().await;
        }
        drop(feeds);
        for reader in readers {
            let read = tokio::time::timeout(Duration::from_secs(30), reader)
                .await
                .expect("no body waits for good")
                .unwrap();
            assert_eq!(read.unwrap(), LENGTH);
        }
        assert_eq!(memory.in_use(), 0, "every byte returned");
    }

    /// A body that would pass its connection's or address's share waits
    /// for room: it is refused (saying which share) only at the deadline,
    /// and goes on as soon as the room is given back. Another address is
    /// not held up meanwhile; a body larger than a share is refused at once.
    #[tokio::test]
    async fn a_connection_and_an_address_are_held_to_their_shares() {
        let memory = shares(1 << 20, 1 << 20, 300 * 1024, 200 * 1024);
        // 100,000 bytes from `client`, refused if not read within 200 ms.
        let refused_soon = |client| receive(xs(100_000), None, rules(&memory, client).within(200));
        let attacker: IpAddr = "10.1.2.3".parse().unwrap();
        let one = Client::connected(attacker);
        let two = Client::connected(attacker);
        let (_kept, held) = receive(xs(150_000), None, rules(&memory, &one))
            .await
            .unwrap();
        let over_connection = refused_soon(&one).await;
        assert!(matches!(
            over_connection,
            Err(BodyError::NoMemory(Shortfall::Connection))
        ));
        let (_also, _held_too) = receive(xs(100_000), None, rules(&memory, &two))
            .await
            .unwrap();
        let over_address = refused_soon(&two).await;
        assert!(matches!(
            over_address,
            Err(BodyError::NoMemory(Shortfall::Address))
        ));
        assert!(memory.held_by(attacker) <= 300 * 1024);
        let other = Client::connected("10.9.9.9".parse().unwrap());
        let (fine, _) = receive(xs(100_000), None, rules(&memory, &other))
            .await
            .unwrap();
        assert_eq!(fine.len(), 100_000);

        // Waiting, then given the room the first body held.
        let waiting = spawn_receive(
            xs(100_000),
            Some(100_000),
            &memory,
            &two,
            BodyPace::default(),
        );
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "the address holds its share");
        drop(held);
        let read = tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("woken when room is given back")
            .unwrap();
        assert_eq!(read.unwrap(), 100_000);

        let larger_than_a_share = tokio::time::timeout(
            Duration::from_secs(30),
            receive(xs(250_000), Some(250_000), rules(&memory, &other)),
        )
        .await
        .expect("refused at once");
        assert!(matches!(
            larger_than_a_share,
            Err(BodyError::NoMemory(Shortfall::Connection))
        ));
    }

    /// `/validate` bodies leave the rest of the pool to `/mutate`: a
    /// `/validate` body past its part waits, a `/mutate` one is read.
    #[tokio::test]
    async fn validate_bodies_leave_room_for_mutate() {
        let memory = shares(300 * 1024, 200 * 1024, 300 * 1024, 300 * 1024);
        let (a, b, c) = (Client::unknown(), Client::unknown(), Client::unknown());
        let (_v, _held) = receive(xs(190_000), None, rules(&memory, &a))
            .await
            .unwrap();
        let refused = receive(xs(20_000), None, rules(&memory, &b).within(200)).await;
        assert!(matches!(
            refused,
            Err(BodyError::NoMemory(Shortfall::Validate))
        ));
        let mutate = BodyRules {
            validate: false,
            ..rules(&memory, &c)
        };
        let (m, _) = receive(xs(90_000), None, mutate).await.unwrap();
        assert_eq!(m.len(), 90_000);
    }

    /// Time spent waiting for memory is not counted against the body's
    /// pace: its sender was held back, not slow.
    #[tokio::test]
    async fn waiting_for_memory_does_not_count_against_the_pace() {
        let memory = shares(100 * 1024, 100 * 1024, 100 * 1024, 100 * 1024);
        let pace = pace(100);
        let (a, b) = (Client::unknown(), Client::unknown());
        let (_first, held) = receive(xs(90_000), Some(90_000), rules(&memory, &a))
            .await
            .unwrap();
        let waiting = spawn_receive(xs(50_000), Some(50_000), &memory, &b, pace);
        // Several graces pass while it waits.
        tokio::time::sleep(pace.grace * 5).await;
        assert!(!waiting.is_finished());
        drop(held);
        assert_eq!(waiting.await.unwrap().unwrap(), 50_000);
    }

    /// Bytes that fall behind the pace by more than its grace cut the body,
    /// however often a byte comes; a body still short at the deadline is
    /// cut as slow.
    #[tokio::test]
    async fn a_body_below_the_pace_is_cut() {
        let memory = memory(1 << 20);
        let client = Client::unknown();
        let pace = pace(300);
        let (feed, body) = fed_body();
        let reading = receive(
            body,
            Some(1000),
            BodyRules {
                pace,
                ..rules(&memory, &client).limit(1000)
            },
        );
        let trickle = async {
            for _ in 0..100 {
                if feed.send(Ok(Bytes::from_static(b"x"))).is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let started = Instant::now();
        let read = tokio::select! {
            read = reading => read,
            () = trickle => panic!("the trickle outlasted the pace"),
        };
        assert!(
            matches!(read, Err(BodyError::BelowPace(_))),
            "{:?}",
            read.err()
        );
        assert!(started.elapsed() >= pace.grace);
        assert_eq!(memory.in_use(), 0);

        let (_feed, silent) = fed_body();
        let read = receive(
            silent,
            Some(1000),
            rules(&memory, &client).limit(1000).within(100),
        )
        .await;
        assert!(matches!(read, Err(BodyError::Slow)));
    }

    /// A body refused for its size is read and dropped (so the client sees
    /// the 413) only while it keeps the pace.
    #[tokio::test]
    async fn an_oversized_body_trickled_is_dropped_no_longer_than_the_pace() {
        let memory = memory(1 << 20);
        let client = Client::unknown();
        let (feed, body) = fed_body();
        let trickle = tokio::spawn(async move {
            while feed.send(Ok(Bytes::from_static(b"x"))).is_ok() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let rules = BodyRules {
            pace: pace(300),
            ..rules(&memory, &client).limit(10)
        };
        let refused = tokio::time::timeout(Duration::from_secs(5), receive(body, Some(11), rules))
            .await
            .expect("given up at the pace, not the minute-long deadline");
        assert!(matches!(refused, Err(BodyError::TooLarge)));
        trickle.abort();
    }

    #[tokio::test]
    async fn a_declared_body_over_the_limit_is_refused_before_reading() {
        let memory = memory(1 << 20);
        let client = Client::unknown();
        let refused = receive(xs(10), Some(11), rules(&memory, &client).limit(10)).await;
        assert!(matches!(refused, Err(BodyError::TooLarge)));
        assert_eq!(memory.in_use(), 0);
        // With `Expect: 100-continue` nothing of it is read, so the client
        // never gets `100 Continue`: a body that never comes is not waited for.
        let (_feed, never) = fed_body();
        let refused = tokio::time::timeout(
            Duration::from_secs(5),
            read_body(never, Some(11), true, rules(&memory, &client).limit(10)),
        )
        .await
        .expect("answered at once");
        assert!(matches!(refused, Err(BodyError::TooLarge)));
    }
}
