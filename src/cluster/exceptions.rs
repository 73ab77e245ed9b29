//! The `GpuPolicyException`s of a live cluster, kept current by a watch of
//! `gpu-admission.io/v1alpha1 gpupolicyexceptions` in all namespaces
//! (needs only get/list/watch on them).
//!
//! Each object is read once per resourceVersion (its expression compiled
//! with the reader given at start, the policies' CEL environment), and the
//! exceptions of a namespace are kept as one shared slice rebuilt when one
//! of them changes, so a request's lookup is a map lookup and an `Arc`
//! clone. What is held is bounded: each namespace holds its fair share of
//! [`MAX_HELD`], at most [`MAX_PER_NAMESPACE`], its first objects by name
//! (see [`Entries`]), whatever the order the objects came in. An object
//! beyond the bounds is not read, not held and counted `over_bound`
//! (logged once per namespace and change, never the object); one that
//! does not read is not held, logged (namespace/name and why) and counted
//! `invalid`. Expiry needs no event: exceptions are judged at
//! [`ExceptionLookup::now`].
use super::watch::{self, CacheMetrics, Event, Kind, Settings, Watched};
use crate::exceptions::{Exception, ExceptionError, ExceptionLookup, State, GROUP, KIND, RESOURCE};
use kube::api::DynamicObject;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

/// Most exceptions held in the whole cluster.
pub const MAX_HELD: usize = 10_000;
/// Most exceptions held in one namespace.
pub const MAX_PER_NAMESPACE: usize = 256;
/// The version the cluster serves them at.
pub const VERSION: &str = "v1alpha1";
/// The rule the server's ClusterRole needs for the watch.
pub const RBAC_RULE: &str =
    "get, list and watch on gpupolicyexceptions.gpu-admission.io (deploy/base/rbac.yaml)";

/// Reads one object into an exception (serve's reads it with the current
/// policy set's CEL environment). Called on a blocking thread.
pub type Reader = Arc<dyn Fn(&Value) -> Result<Exception, Vec<ExceptionError>> + Send + Sync>;

/// The time exceptions are judged at.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The exceptions of a live cluster. Cloning shares the cache.
#[derive(Clone)]
pub struct ClusterExceptions {
    shared: Arc<Shared>,
    clock: Option<Clock>,
}

/// How many exceptions the cache knows, by state, at its clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub active: usize,
    pub expired: usize,
    /// Within the bounds but unreadable: not held.
    pub invalid: usize,
    /// Beyond the bounds (not read, not held): past its namespace's share
    /// of [`MAX_HELD`] or [`MAX_PER_NAMESPACE`].
    pub over_bound: usize,
}

struct Shared {
    published: RwLock<Published>,
    status: tokio::sync::watch::Sender<Status>,
}

/// What requests see: the held exceptions by namespace.
#[derive(Default)]
struct Published {
    by_namespace: HashMap<String, Arc<[Arc<Exception>]>>,
    invalid: usize,
    over_bound: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    /// The first list is under way.
    Listing,
    /// Listed once (or known to be unavailable: nothing to wait for).
    Synced,
}

impl ClusterExceptions {
    /// A cache that knows no exception and has nothing to wait for.
    pub fn empty() -> ClusterExceptions {
        let lookup = ClusterExceptions::waiting();
        lookup.shared.status.send_replace(Status::Synced);
        lookup
    }

    /// A cache not synced yet, that [`ClusterExceptions::watch`] fills.
    pub fn waiting() -> ClusterExceptions {
        ClusterExceptions {
            shared: Arc::new(Shared {
                published: RwLock::default(),
                status: tokio::sync::watch::Sender::new(Status::Listing),
            }),
            clock: None,
        }
    }

    /// [`ClusterExceptions::waiting`] filled by [`ClusterExceptions::watch`].
    pub fn start(
        client: kube::Client,
        read: Reader,
    ) -> (ClusterExceptions, tokio::task::JoinHandle<()>) {
        let lookup = ClusterExceptions::waiting();
        let (_, task) = lookup.watch(client, read, Settings::default(), CacheMetrics::default());
        (lookup, task)
    }

    /// The kind: a cluster that does not serve it (no CRD) or refuses the
    /// server the list (RBAC) leaves the cache synced and empty, so that
    /// nothing is excepted and readiness does not wait; the watch keeps
    /// asking and fills the cache once it can.
    pub fn kind() -> Kind {
        Kind::new("policy exceptions", GROUP, VERSION, RESOURCE).forbidden_is_empty(RBAC_RULE)
    }

    /// Watches the exceptions of every namespace with `client` into this
    /// cache, reading each with `read` (off the runtime's threads: it
    /// compiles CEL). The returned task runs until aborted; call it once
    /// per cache.
    pub fn watch(
        &self,
        client: kube::Client,
        read: Reader,
        settings: Settings,
        metrics: CacheMetrics,
    ) -> (Watched, tokio::task::JoinHandle<()>) {
        let cache = Arc::new(std::sync::Mutex::new(Cache::new(read, self.shared.clone())));
        watch::start(
            client,
            ClusterExceptions::kind(),
            settings,
            metrics,
            move |event: Event<DynamicObject>| {
                let cache = cache.clone();
                async move {
                    let handled = tokio::task::spawn_blocking(move || {
                        cache
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .handle(event)
                    });
                    if let Err(e) = handled.await {
                        tracing::error!(error = %e, "reading a GpuPolicyException failed; it is not held");
                    }
                }
            },
        )
    }

    /// Judged at `clock` instead of the wall clock (for tests).
    pub fn with_clock(mut self, clock: Clock) -> ClusterExceptions {
        self.clock = Some(clock);
        self
    }

    /// Resolves once the first list is in (or the kind is known to be
    /// unavailable). Returns false if the watch ended before that, in
    /// which case the cache never syncs.
    pub async fn wait_until_synced(&self) -> bool {
        let mut status = self.shared.status.subscribe();
        let synced = status.wait_for(|s| *s == Status::Synced).await.is_ok();
        synced
    }

    /// Whether the first list is in.
    pub fn is_synced(&self) -> bool {
        *self.shared.status.borrow() == Status::Synced
    }

    /// The exceptions held, by state at [`ExceptionLookup::now`], and
    /// those not held.
    pub fn counts(&self) -> Counts {
        let now = self.now();
        let published = self.published();
        let mut counts = Counts {
            invalid: published.invalid,
            over_bound: published.over_bound,
            ..Counts::default()
        };
        for exception in published.by_namespace.values().flat_map(|e| e.iter()) {
            match exception.state(now) {
                State::Active => counts.active += 1,
                State::Expired => counts.expired += 1,
            }
        }
        counts
    }

    fn published(&self) -> std::sync::RwLockReadGuard<'_, Published> {
        self.shared
            .published
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for ClusterExceptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterExceptions")
            .field("status", &*self.shared.status.borrow())
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl ExceptionLookup for ClusterExceptions {
    fn in_namespace(&self, namespace: &str) -> Arc<[Arc<Exception>]> {
        match self.published().by_namespace.get(namespace) {
            Some(held) => held.clone(),
            None => Arc::from([]),
        }
    }

    fn all(&self) -> Vec<Arc<Exception>> {
        let published = self.published();
        let mut all: Vec<Arc<Exception>> = published
            .by_namespace
            .values()
            .flat_map(|e| e.iter().cloned())
            .collect();
        all.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        all
    }

    fn now(&self) -> SystemTime {
        match &self.clock {
            Some(clock) => clock(),
            None => SystemTime::now(),
        }
    }
}

/// namespace, name.
type Key = (String, String);

/// The watch's side: every object seen, with what became of it. Owned by
/// the task driving the watch; what requests see is published from it.
struct Cache {
    read: Reader,
    shared: Arc<Shared>,
    live: Entries,
    /// Being filled by a (re)list, replacing `live` when it completes.
    relist: Option<Entries>,
}

/// Every object seen, and which of them are held.
///
/// Each namespace holds its share of [`MAX_HELD`], at most
/// [`MAX_PER_NAMESPACE`]: its first objects by name. Shares are max-min
/// fair: a namespace gets all it has up to an equal part of what the
/// namespaces with fewer leave over, and the slots an equal split leaves
/// over go one each to the first namespaces by name among those that want
/// more. So what is held follows from the objects alone, whatever the order
/// they were listed, applied or deleted in; an object beyond its
/// namespace's share is not read until it is within it.
#[derive(Default)]
struct Entries {
    map: BTreeMap<Key, Entry>,
    /// Each namespace with objects (or settled with some).
    namespaces: BTreeMap<String, Namespace>,
    /// Held, in every namespace.
    held: usize,
    /// Not held: `unreadable + over_bound`.
    not_held: usize,
    /// Within the bounds, but read with errors.
    unreadable: usize,
    /// Beyond the bounds.
    over_bound: usize,
}

#[derive(Clone, Copy, Debug, Default)]
struct Namespace {
    objects: usize,
    /// As last settled.
    settled: Standing,
}

/// How one namespace stands: its share and what became of its objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Standing {
    share: usize,
    held: usize,
    unreadable: usize,
    over_bound: usize,
}

struct Entry {
    version: Option<String>,
    /// The object as the API gave it (apiVersion and kind set,
    /// managedFields left out), read once it is within the bounds.
    object: Box<str>,
    kept: Kept,
}

#[derive(Clone)]
enum Kept {
    Held(Arc<Exception>),
    /// Read with errors (logged).
    Unreadable,
    /// Not read, or no longer held: beyond the bounds when last settled.
    Ignored,
}

impl Entries {
    /// Adds or replaces the object at `key`; [`Entries::settle`] decides
    /// what becomes of it.
    fn insert(&mut self, key: Key, entry: Entry) {
        let namespace = key.0.clone();
        if self.map.insert(key, entry).is_none() {
            self.namespaces.entry(namespace).or_default().objects += 1;
        }
    }

    fn remove(&mut self, key: &Key) -> Option<Entry> {
        let entry = self.map.remove(key)?;
        if let Some(n) = self.namespaces.get_mut(&key.0) {
            n.objects -= 1;
        }
        Some(entry)
    }

    /// Settles the namespace whose objects `changed` and every namespace
    /// whose share moved with it (reading what comes within the bounds,
    /// dropping what falls beyond); returns the namespaces settled.
    fn settle(&mut self, read: &Reader, changed: &str) -> Vec<String> {
        let shares = fair_shares(&self.namespaces);
        let moved: Vec<(String, usize, Standing)> = (self.namespaces.iter())
            .zip(shares)
            .filter(|((ns, n), share)| n.settled.share != *share || *ns == changed)
            .map(|((ns, n), share)| (ns.clone(), share, n.settled))
            .collect();
        for (namespace, share, before) in &moved {
            // Only the first `share` were held when it was last settled;
            // one object added since moves them one further at most.
            let walk = before.share.max(*share) + 1;
            self.settle_namespace(read, namespace, *share, walk, Some(*before));
        }
        moved.into_iter().map(|(ns, _, _)| ns).collect()
    }

    /// Settles every namespace (a list just completed); `before` is how
    /// they stood until then, for the log.
    fn settle_all(&mut self, read: &Reader, before: &BTreeMap<String, Namespace>) {
        let shares = fair_shares(&self.namespaces);
        let namespaces: Vec<String> = self.namespaces.keys().cloned().collect();
        for (namespace, share) in namespaces.into_iter().zip(shares) {
            let was = before.get(&namespace).map(|n| n.settled);
            self.settle_namespace(read, &namespace, share, usize::MAX, was);
        }
    }

    /// Holds the first `share` objects of `namespace` by name (reading
    /// those not read), and drops the exceptions of the others among the
    /// first `walk`.
    fn settle_namespace(
        &mut self,
        read: &Reader,
        namespace: &str,
        share: usize,
        walk: usize,
        before: Option<Standing>,
    ) {
        let Some(state) = self.namespaces.get(namespace).copied() else {
            return;
        };
        let mut now = Standing {
            share,
            over_bound: state.objects - share,
            ..Standing::default()
        };
        let mut first_beyond = None;
        let from = (namespace.to_string(), String::new());
        let entries = (self.map.range_mut(from..))
            .take_while(|((ns, _), _)| ns == namespace)
            .take(walk);
        for (i, ((_, name), entry)) in entries.enumerate() {
            if i < share {
                if matches!(entry.kept, Kept::Ignored) {
                    entry.kept = read_object(read, namespace, name, &entry.object);
                }
                match entry.kept {
                    Kept::Held(_) => now.held += 1,
                    Kept::Unreadable | Kept::Ignored => now.unreadable += 1,
                }
            } else {
                if i == share {
                    first_beyond = Some(name.clone());
                }
                if matches!(entry.kept, Kept::Held(_)) {
                    entry.kept = Kept::Ignored;
                }
            }
        }
        let old = state.settled;
        self.held = self.held - old.held + now.held;
        self.unreadable = self.unreadable - old.unreadable + now.unreadable;
        self.over_bound = self.over_bound - old.over_bound + now.over_bound;
        self.not_held = self.unreadable + self.over_bound;
        if state.objects == 0 {
            self.namespaces.remove(namespace);
        } else if let Some(n) = self.namespaces.get_mut(namespace) {
            n.settled = now;
        }
        let namespaces = self.namespaces.len();
        ignored(namespace, before, now, first_beyond.as_deref(), namespaces);
    }

    /// The held exceptions of `namespace`, by name.
    fn held_in(&self, namespace: &str) -> Vec<Arc<Exception>> {
        let share = self
            .namespaces
            .get(namespace)
            .map_or(0, |n| n.settled.share);
        let from = (namespace.to_string(), String::new());
        self.map
            .range(from..)
            .take_while(|((ns, _), _)| ns == namespace)
            .take(share)
            .filter_map(|(_, entry)| match &entry.kept {
                Kept::Held(e) => Some(e.clone()),
                _ => None,
            })
            .collect()
    }
}

/// Each namespace's share of [`MAX_HELD`] from how many objects it has, in
/// the order of `namespaces` (by name): max-min fair, each at most
/// [`MAX_PER_NAMESPACE`], the remainder of an equal split one each to the
/// first namespaces by name that want more.
fn fair_shares(namespaces: &BTreeMap<String, Namespace>) -> Vec<usize> {
    let wants = namespaces
        .values()
        .map(|n| n.objects.min(MAX_PER_NAMESPACE));
    let total: usize = wants.clone().sum();
    if total <= MAX_HELD {
        return wants.collect();
    }
    // Water-filling: the smallest wants are met while they fit an equal
    // part of what is left; the rest get that part.
    let mut sorted: Vec<usize> = wants.clone().collect();
    sorted.sort_unstable();
    let (mut left, mut level, mut extra) = (MAX_HELD, 0, 0);
    for (i, want) in sorted.iter().enumerate() {
        let rest = sorted.len() - i;
        if *want > left / rest {
            (level, extra) = (left / rest, left % rest);
            break;
        }
        left -= want;
    }
    wants
        .map(|want| {
            if want <= level {
                want
            } else if extra > 0 {
                extra -= 1;
                level + 1
            } else {
                level
            }
        })
        .collect()
}

impl Cache {
    fn new(read: Reader, shared: Arc<Shared>) -> Cache {
        Cache {
            read,
            shared,
            live: Entries::default(),
            relist: None,
        }
    }

    fn handle(&mut self, event: Event<DynamicObject>) {
        match event {
            Event::Init => self.relist = Some(Entries::default()),
            Event::InitApply(object) => {
                let previous = self.live.map.get(&key_of(&object));
                let relist = self.relist.get_or_insert_with(Entries::default);
                take(previous, relist, object);
            }
            Event::InitDone => {
                let mut listed = self.relist.take().unwrap_or_default();
                listed.settle_all(&self.read, &self.live.namespaces);
                self.live = listed;
                self.publish_all();
                self.shared.status.send_replace(Status::Synced);
            }
            Event::Apply(object) => {
                let namespace = take(None, &mut self.live, object);
                for namespace in self.live.settle(&self.read, &namespace) {
                    self.publish(&namespace);
                }
            }
            Event::Delete(object) => {
                let (namespace, name) = key_of(&object);
                self.live.remove(&(namespace.clone(), name));
                for namespace in self.live.settle(&self.read, &namespace) {
                    self.publish(&namespace);
                }
            }
        }
    }

    fn publish(&self, namespace: &str) {
        let held = self.live.held_in(namespace);
        let mut published = self.write();
        if held.is_empty() {
            published.by_namespace.remove(namespace);
        } else {
            published
                .by_namespace
                .insert(namespace.to_string(), Arc::from(held));
        }
    }

    fn publish_all(&self) {
        let mut by_namespace: HashMap<String, Vec<Arc<Exception>>> = HashMap::new();
        for ((namespace, _), entry) in &self.live.map {
            if let Kept::Held(e) = &entry.kept {
                by_namespace
                    .entry(namespace.clone())
                    .or_default()
                    .push(e.clone());
            }
        }
        let mut published = self.write();
        published.by_namespace = by_namespace
            .into_iter()
            .map(|(ns, held)| (ns, Arc::from(held)))
            .collect();
    }

    /// What requests see, its counts brought up to date.
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Published> {
        let published = self.shared.published.write();
        let mut published = published.unwrap_or_else(PoisonError::into_inner);
        published.invalid = self.live.unreadable;
        published.over_bound = self.live.over_bound;
        published
    }
}

/// Records `object` in `into`, keeping what was read of it when
/// `previous` (the live entry; by default the one `into` has) is of the
/// same version; returns its namespace. Nothing is read here: settling
/// reads what is within the bounds.
fn take(previous: Option<&Entry>, into: &mut Entries, object: DynamicObject) -> String {
    let key = key_of(&object);
    let version = object.metadata.resource_version.clone();
    let kept = (previous.or_else(|| into.map.get(&key)))
        .filter(|p| version.is_some() && p.version == version)
        .map_or(Kept::Ignored, |p| p.kept.clone());
    let object = stored(object);
    let namespace = key.0.clone();
    into.insert(
        key,
        Entry {
            version,
            object,
            kept,
        },
    );
    namespace
}

/// Reads a stored object.
fn read_object(read: &Reader, namespace: &str, name: &str, object: &str) -> Kept {
    let value = serde_json::from_str(object).unwrap_or(Value::Null);
    match read(&value) {
        Ok(exception) => Kept::Held(Arc::new(exception)),
        Err(errors) => {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            tracing::warn!(
                namespace,
                name,
                errors = %errors.join("; "),
                "GpuPolicyException not read: it lets nothing through until fixed"
            );
            Kept::Unreadable
        }
    }
}

/// Logs a namespace's objects beyond the bounds: a warning when some
/// first are (one line per namespace, not per object, never the object),
/// at debug level when their number changes, and once none is any more.
fn ignored(
    namespace: &str,
    before: Option<Standing>,
    now: Standing,
    first_beyond: Option<&str>,
    namespaces: usize,
) {
    let was = before.map_or(0, |b| b.over_bound);
    let share = now.share;
    let first_not_held = first_beyond.unwrap_or_default();
    // Both logs of objects beyond the bounds say where they stand.
    macro_rules! beyond {
        ($level:ident, $($message:tt)+) => {
            tracing::$level!(namespace, held = share, not_held = now.over_bound, first_not_held, $($message)+)
        };
    }
    if now.over_bound > 0 && was == 0 {
        let why = if share >= MAX_PER_NAMESPACE {
            format!("a namespace holds at most {MAX_PER_NAMESPACE}")
        } else {
            format!(
                "the {MAX_HELD} the server holds are shared among the {namespaces} namespaces that have GpuPolicyExceptions, {share} for this one"
            )
        };
        beyond!(warn, "GpuPolicyExceptions ignored: {why}; those after the first {share} by name let nothing through (delete exceptions no longer needed)");
    } else if now.over_bound > 0
        && before.is_some_and(|b| b.share != share || was != now.over_bound)
    {
        beyond!(debug, "GpuPolicyExceptions beyond the bounds changed");
    } else if now.over_bound == 0 && was > 0 {
        tracing::info!(
            namespace,
            "every GpuPolicyException of the namespace is held again"
        );
    }
}

fn key_of(object: &DynamicObject) -> Key {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

/// The object as the API gives it (lists may leave out apiVersion and
/// kind), kept as JSON text without `metadata.managedFields` (the reader
/// does not look at them).
fn stored(object: DynamicObject) -> Box<str> {
    let typed = super::typed(&object, crate::exceptions::API_VERSION, KIND);
    let mut value = typed.unwrap_or(Value::Null);
    if let Some(Value::Object(meta)) = value.get_mut("metadata") {
        meta.remove("managedFields");
    }
    value.to_string().into_boxed_str()
}

pub mod metrics;

#[cfg(test)]
mod tests;
