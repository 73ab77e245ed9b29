//! What the server holds for requests in progress, bounded process-wide:
//! memory for bodies being read, memory for decoded requests, and
//! evaluation slots, separately for `/mutate` and `/validate` so that a flood
//! of slow validations never delays placement.
//!
//! Body memory is taken as the bytes arrive, never by declaration, within
//! its connection's, its client address's, its endpoint's and the pool's
//! shares, so a client that declares large bodies and sends nothing holds
//! nothing. A body that would pass a share stops being read (its sender is
//! held back by TCP and HTTP/2 flow control) and waits for room, within its
//! review's deadline. Each body's declared length is its claim, and growth
//! is granted only while every body in progress could still be read to its
//! claim in some order (the banker's rule): bodies holding part of their
//! memory can wait on each other but never deadlock. Decoded memory is
//! reserved whole, in one wait, once the body is read and sized; a slot
//! comes last. Nobody holding a later reservation waits for an earlier
//! one.
use super::metrics::Metrics;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Memory is counted in KiB: semaphores count in `u32`.
const UNIT: usize = 1024;

/// The default process-wide in-flight memory budget: its two thirds for
/// decoded requests hold the largest one, an UPDATE carrying two objects of
/// the default 48 MiB each.
pub const DEFAULT_IN_FLIGHT_BYTES: usize = 160 << 20;

/// A pool of memory that requests reserve before using it; `/validate`
/// requests may be held to a part of it, the rest kept for `/mutate`.
#[derive(Clone)]
pub(crate) struct MemoryPool {
    name: &'static str,
    semaphore: Arc<Semaphore>,
    units: usize,
    /// The part `/validate` may hold, taken before the pool itself (always
    /// in that order, so the two never deadlock).
    validate: Option<(Arc<Semaphore>, usize)>,
    metrics: Metrics,
}

/// Memory reserved from a [`MemoryPool`]; returned when dropped.
pub(crate) struct Reserved {
    permit: OwnedSemaphorePermit,
    _validate: Option<OwnedSemaphorePermit>,
    pool: &'static str,
    metrics: Metrics,
}

/// The reservation can never be granted: it is larger than the pool.
#[derive(Debug, thiserror::Error)]
#[error("{wanted_mib} MiB is more than the whole in-flight budget for {pool} ({total_mib} MiB)")]
pub(crate) struct TooBig {
    pool: &'static str,
    wanted_mib: usize,
    total_mib: usize,
}

impl MemoryPool {
    pub fn new(name: &'static str, bytes: usize, metrics: Metrics) -> MemoryPool {
        let units = (bytes / UNIT).clamp(1, u32::MAX as usize);
        MemoryPool {
            name,
            semaphore: Arc::new(Semaphore::new(units)),
            units,
            validate: None,
            metrics,
        }
    }

    /// The same pool, with `/validate` reservations held to `bytes` of it
    /// in all (at most the whole pool).
    pub fn with_validate_share(mut self, bytes: usize) -> MemoryPool {
        let units = (bytes / UNIT).clamp(1, self.units);
        self.validate = Some((Arc::new(Semaphore::new(units)), units));
        self
    }

    /// Bytes reserved now, by everyone.
    #[cfg(test)]
    pub fn in_use(&self) -> usize {
        (self.units - self.semaphore.available_permits()) * UNIT
    }

    /// Waits until `bytes` are free and reserves them, all at once: a
    /// request never holds part of a pool while it waits for more.
    #[cfg(test)]
    pub async fn reserve(&self, bytes: usize) -> Result<Reserved, TooBig> {
        self.reserve_for(bytes, false).await
    }

    /// [`MemoryPool::reserve`] for `/validate` (`validate`), within its
    /// share, or for `/mutate`, from the whole pool.
    pub async fn reserve_for(&self, bytes: usize, validate: bool) -> Result<Reserved, TooBig> {
        let units = bytes.div_ceil(UNIT);
        let share = match &self.validate {
            Some((share, share_units)) if validate => Some((share, *share_units)),
            _ => None,
        };
        let limit = share.map_or(self.units, |(_, share_units)| share_units);
        if units > limit {
            return Err(TooBig {
                pool: self.name,
                wanted_mib: (units * UNIT) >> 20,
                total_mib: (limit * UNIT) >> 20,
            });
        }
        // Never closed, and `units` fits in u32 since the pool does.
        let take = |semaphore: &Arc<Semaphore>| {
            let acquired = semaphore.clone().acquire_many_owned(units as u32);
            async move {
                let Ok(permit) = acquired.await else {
                    unreachable!("memory pools are never closed")
                };
                permit
            }
        };
        let validate_permit = match share {
            Some((share, _)) => Some(take(share).await),
            None => None,
        };
        let permit = take(&self.semaphore).await;
        self.metrics
            .add_memory_reserved(self.name, (units * UNIT) as i64);
        Ok(Reserved {
            permit,
            _validate: validate_permit,
            pool: self.name,
            metrics: self.metrics.clone(),
        })
    }
}

impl Reserved {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.permit.num_permits() * UNIT
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        let bytes = self.bytes();
        if bytes > 0 {
            self.metrics.add_memory_reserved(self.pool, -(bytes as i64));
        }
    }
}

/// Who sends a request: its address and its connection's count of body
/// memory, shared by the connection's requests.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    pub address: IpAddr,
    connection: Arc<AtomicUsize>,
}

impl Client {
    /// A new connection from `address`.
    pub fn connected(address: IpAddr) -> Client {
        Client {
            address,
            connection: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A request that came with no connection details (a router called
    /// directly): a connection of its own from an unknown address.
    pub fn unknown() -> Client {
        Client::connected(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }

    /// Body memory held by this connection's requests now.
    #[cfg(test)]
    pub fn connection_bytes(&self) -> usize {
        self.connection.load(Ordering::Relaxed)
    }

    /// Tells this connection from others while it lives.
    fn connection_id(&self) -> usize {
        Arc::as_ptr(&self.connection) as usize
    }
}

/// How much body memory each holder may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BodyShares {
    /// All bodies together.
    pub total: usize,
    /// `/validate` bodies together; the rest of `total` is kept for
    /// `/mutate`, so that validations never leave placement waiting.
    pub validate: usize,
    /// The bodies of all connections from one address.
    pub per_address: usize,
    /// The bodies of one connection (HTTP/2 carries many at once).
    pub per_connection: usize,
}

impl BodyShares {
    /// Shares of a pool of `total` bytes in which one body may reach
    /// `largest`: `/validate` two thirds, an address two thirds (the
    /// apiserver may send several of the largest bodies at once), a
    /// connection a third, and never less than one largest body each.
    pub fn of(total: usize, largest: usize) -> BodyShares {
        BodyShares {
            total,
            validate: (total / 3 * 2).max(largest),
            per_address: (total / 3 * 2).max(largest),
            per_connection: (total / 3).max(largest),
        }
    }
}

/// Why a body could not grow: which share it would have passed, and
/// whether waiting could ever help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refused {
    /// Room may come as other bodies are read and given back.
    Wait(Shortfall),
    /// Larger than the share itself: it never fits.
    Never(Shortfall),
}

/// Which share a body would have passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Shortfall {
    #[error("the memory for request bodies is in use")]
    Pool,
    #[error("the memory for /validate request bodies is in use")]
    Validate,
    #[error("this connection's request bodies hold their whole share of memory")]
    Connection,
    #[error("this client address's request bodies hold their whole share of memory")]
    Address,
}

impl Shortfall {
    /// The client's own doing (it sends too much at once), rather than
    /// the server's memory being in use by everyone.
    pub fn is_clients(self) -> bool {
        matches!(self, Shortfall::Connection | Shortfall::Address)
    }
}

/// Memory for request bodies, taken as their bytes arrive within
/// [`BodyShares`].
#[derive(Clone)]
pub(crate) struct BodyMemory {
    inner: Arc<BodyLedger>,
}

struct BodyLedger {
    shares: BodyShares,
    held: Mutex<Held>,
    /// Woken whenever memory is given back or a body's claim shrinks.
    room: Notify,
    next_id: AtomicU64,
    metrics: Metrics,
}

#[derive(Default)]
struct Held {
    total: usize,
    validate: usize,
    by_address: HashMap<IpAddr, usize>,
    /// Every body holding or claiming memory, by hold.
    bodies: HashMap<u64, Body>,
}

/// One body as the ledger sees it.
#[derive(Clone, Copy)]
struct Body {
    address: IpAddr,
    connection: usize,
    validate: bool,
    held: usize,
    /// The most it may still come to hold: its declared length (or the
    /// body limit), no more than any of its shares; what it holds once it
    /// has been read whole.
    claim: usize,
}

impl Body {
    fn need(&self) -> usize {
        self.claim.saturating_sub(self.held)
    }
}

/// The body memory one request holds; returned when dropped.
pub(crate) struct BodyHold {
    memory: BodyMemory,
    client: Client,
    validate: bool,
    id: u64,
    units: usize,
}

impl BodyMemory {
    pub fn new(shares: BodyShares, metrics: Metrics) -> BodyMemory {
        BodyMemory {
            inner: Arc::new(BodyLedger {
                shares,
                held: Mutex::new(Held::default()),
                room: Notify::new(),
                next_id: AtomicU64::new(0),
                metrics,
            }),
        }
    }

    /// A hold of nothing yet for a body of `client`'s, for `/validate` or
    /// `/mutate`, that may come to `claim` bytes (its declared length, or
    /// the body limit).
    pub fn hold(&self, client: &Client, validate: bool, claim: usize) -> BodyHold {
        let shares = self.inner.shares;
        let mut cap = shares
            .total
            .min(shares.per_address)
            .min(shares.per_connection);
        if validate {
            cap = cap.min(shares.validate);
        }
        let claim = claim.div_ceil(UNIT).min(cap / UNIT) * UNIT;
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().bodies.insert(
            id,
            Body {
                address: client.address,
                connection: client.connection_id(),
                validate,
                held: 0,
                claim,
            },
        );
        BodyHold {
            memory: self.clone(),
            client: client.clone(),
            validate,
            id,
            units: 0,
        }
    }

    /// Bytes held now, by everyone.
    #[cfg(test)]
    pub fn in_use(&self) -> usize {
        self.lock().total
    }

    /// Bytes held now by `address`.
    #[cfg(test)]
    pub fn held_by(&self, address: IpAddr) -> usize {
        self.lock().by_address.get(&address).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // A holder never panics while it holds the lock: the counts stay
        // whole even if another thread did.
        self.inner
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl BodyHold {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.units * UNIT
    }

    /// Holds `bytes` in all (rounded up to whole KiB), waiting until
    /// every share has room for it and every body in progress could still
    /// be read to its claim, or until `deadline`. Says how long it waited,
    /// or which share it found full: at once when `bytes` is more than a
    /// share could ever hold, else at the deadline.
    pub async fn grow_to(
        &mut self,
        bytes: usize,
        deadline: Instant,
    ) -> Result<Duration, Shortfall> {
        let started = Instant::now();
        let memory = self.memory.clone();
        loop {
            let room = memory.inner.room.notified();
            tokio::pin!(room);
            // Listening before trying: memory given back in between wakes it.
            room.as_mut().enable();
            match self.try_grow_to(bytes) {
                Ok(()) => return Ok(started.elapsed()),
                Err(Refused::Never(short)) => return Err(short),
                Err(Refused::Wait(short)) => {
                    tokio::select! {
                        () = room => {}
                        () = tokio::time::sleep_until(deadline) => return Err(short),
                    }
                }
            }
        }
    }

    /// [`BodyHold::grow_to`] without waiting.
    fn try_grow_to(&mut self, bytes: usize) -> Result<(), Refused> {
        let want = bytes.div_ceil(UNIT) * UNIT;
        let more = want.saturating_sub(self.bytes());
        if more == 0 {
            return Ok(());
        }
        let shares = self.memory.inner.shares;
        if let Some(short) = self.overflows(None, &shares, want).next() {
            return Err(Refused::Never(short));
        }
        let mut held = self.memory.lock();
        let address = held
            .by_address
            .get(&self.client.address)
            .copied()
            .unwrap_or(0);
        let wait = |short| Err(Refused::Wait(short));
        if let Some(short) = self.overflows(Some(&*held), &shares, more).next() {
            return wait(short);
        }
        let Some(body) = held.bodies.get(&self.id).copied() else {
            unreachable!("a hold is listed until it drops")
        };
        let grown = Body {
            held: want,
            claim: body.claim.max(want),
            ..body
        };
        held.total += more;
        if self.validate {
            held.validate += more;
        }
        held.by_address.insert(self.client.address, address + more);
        held.bodies.insert(self.id, grown);
        // Every grant keeps the ledger safe, so one that lets the body be
        // read whole is safe too (it finishes, then gives all back): only
        // a partial grant needs checking, and a small body never does.
        if grown.need() > 0 && !held.every_body_can_finish(&shares) {
            // Granting it could leave bodies waiting on each other for
            // good: it waits for room instead.
            held.total -= more;
            if self.validate {
                held.validate -= more;
            }
            held.by_address.insert(self.client.address, address);
            held.bodies.insert(self.id, body);
            return wait(self.tightest(&held, &shares, body.need()));
        }
        self.client.connection.fetch_add(more, Ordering::Relaxed);
        drop(held);
        self.units = want / UNIT;
        self.memory
            .inner
            .metrics
            .add_memory_reserved("body", more as i64);
        Ok(())
    }

    /// The share with the least room for `need` more, to say which one a
    /// body waited for.
    fn tightest(&self, held: &Held, shares: &BodyShares, need: usize) -> Shortfall {
        let mut overflows = self.overflows(Some(held), shares, need);
        overflows.next_back().unwrap_or(Shortfall::Pool)
    }

    /// The shares `more` bytes would overflow, from the pool's to the
    /// address's: on top of what is `held`, or alone.
    fn overflows(
        &self,
        held: Option<&Held>,
        shares: &BodyShares,
        more: usize,
    ) -> impl DoubleEndedIterator<Item = Shortfall> {
        let (pool, validate, connection, address) = held.map_or((0, 0, 0, 0), |h| {
            let address = h.by_address.get(&self.client.address).copied();
            let connection = self.client.connection.load(Ordering::Relaxed);
            (h.total, h.validate, connection, address.unwrap_or(0))
        });
        let for_validate = self.validate;
        [
            (pool, shares.total, Shortfall::Pool),
            (validate, shares.validate, Shortfall::Validate),
            (connection, shares.per_connection, Shortfall::Connection),
            (address, shares.per_address, Shortfall::Address),
        ]
        .into_iter()
        .filter(move |&(used, share, short)| {
            (for_validate || short != Shortfall::Validate) && used + more > share
        })
        .map(|(_, _, short)| short)
    }

    /// The body is read whole into `bytes`: what it holds beyond is given
    /// back, and it claims no more.
    pub fn finish(&mut self, bytes: usize) {
        let keep = bytes.div_ceil(UNIT).min(self.units);
        self.release((self.units - keep) * UNIT);
        self.units = keep;
        let mut held = self.memory.lock();
        if let Some(body) = held.bodies.get_mut(&self.id) {
            body.claim = body.held;
        }
        drop(held);
        self.memory.inner.room.notify_waiters();
    }

    fn release(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut held = self.memory.lock();
        held.total -= bytes;
        if self.validate {
            held.validate -= bytes;
        }
        if let Some(by_address) = held.by_address.get_mut(&self.client.address) {
            *by_address -= bytes;
            if *by_address == 0 {
                held.by_address.remove(&self.client.address);
            }
        }
        if let Some(body) = held.bodies.get_mut(&self.id) {
            body.held -= bytes;
        }
        self.client.connection.fetch_sub(bytes, Ordering::Relaxed);
        drop(held);
        self.memory
            .inner
            .metrics
            .add_memory_reserved("body", -(bytes as i64));
        self.memory.inner.room.notify_waiters();
    }
}

impl Held {
    /// Whether, from what is held now, every body could still be read to
    /// its claim: some body's remaining need fits the room of each of its
    /// shares, it gives all back, and so on until every body is done (the
    /// banker's rule; finishing one never leaves less room for another, so
    /// the order tried does not matter).
    fn every_body_can_finish(&self, shares: &BodyShares) -> bool {
        let mut pool = shares.total.saturating_sub(self.total);
        let mut validate = shares.validate.saturating_sub(self.validate);
        let mut addresses: HashMap<IpAddr, usize> = HashMap::new();
        let mut connections: HashMap<usize, usize> = HashMap::new();
        for body in self.bodies.values() {
            *connections.entry(body.connection).or_default() += body.held;
        }
        for held in connections.values_mut() {
            *held = shares.per_connection.saturating_sub(*held);
        }
        for (address, held) in &self.by_address {
            addresses.insert(*address, shares.per_address.saturating_sub(*held));
        }
        let mut left: Vec<&Body> = self.bodies.values().filter(|b| b.need() > 0).collect();
        // Bodies that need nothing more give back what they hold.
        for body in self.bodies.values().filter(|b| b.need() == 0) {
            pool += body.held;
            if body.validate {
                validate += body.held;
            }
            *addresses.entry(body.address).or_insert(shares.per_address) += body.held;
            *connections
                .entry(body.connection)
                .or_insert(shares.per_connection) += body.held;
        }
        while !left.is_empty() {
            let before = left.len();
            left.retain(|body| {
                let need = body.need();
                let address = addresses
                    .get(&body.address)
                    .copied()
                    .unwrap_or(shares.per_address);
                let conn = connections
                    .get(&body.connection)
                    .copied()
                    .unwrap_or(shares.per_connection);
                let fits = need <= pool
                    && (!body.validate || need <= validate)
                    && need <= address
                    && need <= conn;
                if fits {
                    pool += body.held;
                    if body.validate {
                        validate += body.held;
                    }
                    *addresses.entry(body.address).or_insert(address) += body.held;
                    *connections.entry(body.connection).or_insert(conn) += body.held;
                }
                !fits
            });
            if left.len() == before {
                return false;
            }
        }
        true
    }
}

impl Drop for BodyHold {
    fn drop(&mut self) {
        self.release(self.bytes());
        self.memory.lock().bodies.remove(&self.id);
        // Its claim is gone: others may fit now even if it held nothing.
        self.memory.inner.room.notify_waiters();
    }
}

/// Evaluation slots of one endpoint.
#[derive(Clone)]
pub(crate) struct Slots {
    endpoint: &'static str,
    semaphore: Arc<Semaphore>,
    metrics: Metrics,
}

/// A slot held while a request is evaluated.
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
    endpoint: &'static str,
    metrics: Metrics,
}

impl Slots {
    pub fn new(endpoint: &'static str, n: usize, metrics: Metrics) -> Slots {
        Slots {
            endpoint,
            semaphore: Arc::new(Semaphore::new(n.max(1))),
            metrics,
        }
    }

    /// Slots not held.
    #[cfg(test)]
    pub fn free(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// Waits for a free slot.
    pub async fn acquire(&self) -> Slot {
        let Ok(permit) = self.semaphore.clone().acquire_owned().await else {
            unreachable!("slot semaphores are never closed")
        };
        self.metrics.add_slots_in_use(self.endpoint, 1);
        Slot {
            _permit: permit,
            endpoint: self.endpoint,
            metrics: self.metrics.clone(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.metrics.add_slots_in_use(self.endpoint, -1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn reservations_wait_for_memory_and_return_it_when_dropped() {
        let pool = MemoryPool::new("body", 100 * UNIT, Metrics::new());
        let first = pool.reserve(60 * UNIT).await.unwrap();
        assert_eq!(first.bytes(), 60 * UNIT);
        // Only 40 KiB are free: a reservation that is free to run (it would
        // finish on its first poll) is still waiting after many turns.
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move { pool.reserve(50 * UNIT).await.map(|r| r.bytes()) }
        });
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "only 40 KiB are free");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), waiting);
        assert_eq!(second.await.unwrap().unwrap().unwrap(), 50 * UNIT);
    }

    /// `/validate` reservations wait within their share: memory beyond it
    /// stays free for `/mutate`, which never queues behind them.
    #[tokio::test]
    async fn validate_reservations_leave_the_rest_to_mutate() {
        let pool =
            MemoryPool::new("decoded", 100 * UNIT, Metrics::new()).with_validate_share(70 * UNIT);
        let first = pool.reserve_for(60 * UNIT, true).await.unwrap();
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move { pool.reserve_for(20 * UNIT, true).await.map(|r| r.bytes()) }
        });
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "past the /validate share");
        let mutate =
            tokio::time::timeout(Duration::from_secs(5), pool.reserve_for(40 * UNIT, false))
                .await
                .expect("/mutate does not queue behind /validate")
                .unwrap();
        assert_eq!(pool.in_use(), 100 * UNIT);
        assert!(
            pool.reserve_for(71 * UNIT, true).await.is_err(),
            "more than the share can never be granted"
        );
        drop((first, mutate));
        let second = tokio::time::timeout(Duration::from_secs(5), waiting);
        assert_eq!(second.await.unwrap().unwrap().unwrap(), 20 * UNIT);
        assert_eq!(pool.in_use(), 0);
    }

    #[tokio::test]
    async fn a_reservation_is_rounded_to_whole_kib_and_never_exceeds_the_pool() {
        let pool = MemoryPool::new("body", 100 * UNIT, Metrics::new());
        let reserved = pool.reserve(30 * UNIT + 1).await.unwrap();
        assert_eq!(reserved.bytes(), 31 * UNIT, "rounded up to whole KiB");
        let err = pool
            .reserve(101 * UNIT)
            .await
            .err()
            .expect("larger than the pool");
        assert!(err.to_string().contains("more than the whole"), "{err}");
    }

    #[tokio::test]
    async fn reserved_memory_and_slots_show_in_metrics() {
        let metrics = Metrics::new();
        let pool = MemoryPool::new("decoded", 1 << 20, metrics.clone());
        let slots = Slots::new("mutate", 2, metrics.clone());
        let reserved = pool.reserve(10 * UNIT).await.unwrap();
        let slot = slots.acquire().await;
        let text = metrics.encode();
        assert!(
            text.contains(r#"gpu_admission_memory_reserved_bytes{pool="decoded"} 10240"#),
            "{text}"
        );
        assert!(
            text.contains(r#"gpu_admission_evaluation_slots_in_use{endpoint="mutate"} 1"#),
            "{text}"
        );
        drop((reserved, slot));
        let text = metrics.encode();
        assert!(text.contains(r#"gpu_admission_memory_reserved_bytes{pool="decoded"} 0"#));
        assert!(text.contains(r#"gpu_admission_evaluation_slots_in_use{endpoint="mutate"} 0"#));
    }
}
